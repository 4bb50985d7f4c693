/* Unit tests for worker/comm/comm_factory: a tcp spec gives a working communicator for a
 * world of one and of two (two threads, each through its own store client as a worker's
 * rank, the two steps with a store in between): the ranks' allreduce sums across them,
 * the collective spec's forced algorithm is the one the operation ran with, the final
 * barrier passes. A backend this build lacks (nccl without NCCL) or one nobody knows
 * (mpi) is refused with ERR_INVALID on field "backend", naming it; a bad listen address
 * fails the first step; a setup never finished is freed (ASan's leak check). */
#include <pthread.h>
#include <string.h>

#include "ddpb_config.h"
#include "daemon/store_server.h"
#include "tests/unit/test.h"
#include "worker/comm/comm_factory.h"

#define RUN "factory"
#define SECRET "pw"

struct world {
    struct store_server *srv;
    char addr[64];
};

static int world_open(struct world *w, struct err *e)
{
    memset(w, 0, sizeof *w);
    w->srv = store_server_create("127.0.0.1", 0, e);
    if (!w->srv || store_server_add_run(w->srv, RUN, SECRET, e) < 0)
        return -1;
    snprintf(w->addr, sizeof w->addr, "127.0.0.1:%d", store_server_port(w->srv));
    return 0;
}

static struct spec spec_for(const char *backend, const char *algorithm)
{
    struct spec s;
    memset(&s, 0, sizeof s);
    s.workload = SPEC_WORKLOAD_COLLECTIVE;
    snprintf(s.device, sizeof s.device, "cpu");
    snprintf(s.backend, sizeof s.backend, "%s", backend);
    snprintf(s.coll.algorithm, sizeof s.coll.algorithm, "%s", algorithm);
    return s;
}

static struct rendezvous_env env_for(int rank, int world_size)
{
    struct rendezvous_env env;
    memset(&env, 0, sizeof env);
    env.rank = rank;
    env.world_size = world_size;
    env.timeout_ms = 10000;
    snprintf(env.host, sizeof env.host, "127.0.0.1");
    snprintf(env.secret, sizeof env.secret, SECRET);
    return env;
}

/* One rank of a tcp world: begin, its store client, finish, an allreduce of rank + 1
 * (8 floats, forced algorithm "ring"), a barrier. */
struct rank_job {
    const struct world *w;
    int rank, world_size;
    float sum; /* what the allreduce gave element 0 */
    char backend[8], algorithm[16];
    int rc;
    struct err e;
};

static void *rank_main(void *arg)
{
    struct rank_job *j = arg;
    struct spec s = spec_for("tcp", "ring");
    struct rendezvous_env env = env_for(j->rank, j->world_size);
    j->rc = -1;
    struct comm_factory *f = comm_factory_begin(&s, &env, NULL, &j->e);
    if (!f)
        return NULL;
    struct store_client *sc = store_client_connect(j->w->addr, RUN, SECRET, j->rank, 5000, NULL,
                                                   &j->e);
    if (!sc) {
        comm_factory_discard(f);
        return NULL;
    }
    struct comm *c = comm_factory_finish(f, sc, NULL, &j->e);
    float v[8];
    for (int i = 0; i < 8; i++)
        v[i] = (float)(j->rank + 1);
    if (c && comm_allreduce(c, v, v, 8, COMM_FLOAT32, COMM_SUM, &j->e) == 0) {
        j->sum = v[0];
        snprintf(j->backend, sizeof j->backend, "%s", c->backend);
        snprintf(j->algorithm, sizeof j->algorithm, "%s", c->last_algorithm);
        j->rc = comm_barrier(c, &j->e);
    }
    comm_destroy(c);
    store_client_destroy(sc);
    return NULL;
}

static void run_world(int n)
{
    struct err e = {0};
    struct world w;
    T_OK(world_open(&w, &e));
    struct rank_job jobs[2];
    pthread_t th[2];
    for (int r = 0; r < n; r++) {
        jobs[r] = (struct rank_job){.w = &w, .rank = r, .world_size = n};
        T_CHECK(pthread_create(&th[r], NULL, rank_main, &jobs[r]) == 0);
    }
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);
    store_server_destroy(w.srv);
    for (int r = 0; r < n; r++) {
        T_CHECK_MSG(jobs[r].rc == 0, "rank %d: %s", r, jobs[r].e.msg);
        T_EQ_STR(jobs[r].backend, "tcp");
        T_NEAR(jobs[r].sum, n * (n + 1) / 2.0, 0);
        if (n > 1) /* a world of one moves nothing: no algorithm to force */
            T_EQ_STR(jobs[r].algorithm, "ring");
    }
}

static void test_tcp_world_of_one(void)
{
    run_world(1);
}
static void test_tcp_world_of_two(void)
{
    run_world(2);
}

/* comm_create_from_spec is the two steps in one, for a caller that has joined. */
static void test_create_from_spec_one_rank(void)
{
    struct err e = {0};
    struct world w;
    T_OK(world_open(&w, &e));
    struct store_client *sc = store_client_connect(w.addr, RUN, SECRET, 0, 5000, NULL, &e);
    T_CHECK_MSG(sc != NULL, "%s", e.msg);
    struct spec s = spec_for("tcp", "");
    struct rendezvous_env env = env_for(0, 1);
    struct comm *c = comm_create_from_spec(&s, &env, NULL, sc, &e);
    int ok = c && c->rank == 0 && c->world_size == 1 && comm_barrier(c, &e) == 0;
    comm_destroy(c);
    store_client_destroy(sc);
    store_server_destroy(w.srv);
    T_CHECK_MSG(ok, "%s", e.msg);
}

static void test_backend_unavailable_named(void)
{
    struct err e = {0};
    struct spec s = spec_for("nccl", "");
    struct rendezvous_env env = env_for(0, 1);
    struct comm_factory *f = comm_factory_begin(&s, &env, NULL, &e);
    if (DDPB_HAVE_NCCL) { /* the first step of nccl touches nothing */
        T_CHECK_MSG(f != NULL, "%s", e.msg);
        T_OK(comm_backend_check("nccl", &e));
        comm_factory_discard(f);
    } else {
        T_CHECK(f == NULL);
        T_EQ_INT(e.code, ERR_INVALID);
        T_EQ_STR(e.field, "backend");
        T_CHECK_MSG(strstr(e.msg, "\"nccl\"") && strstr(e.msg, "built without NCCL") &&
                        strstr(e.msg, "-Dnccl=enabled"),
                    "%s", e.msg);
    }
    memset(&e, 0, sizeof e);
    s = spec_for("mpi", "");
    T_CHECK(comm_factory_begin(&s, &env, NULL, &e) == NULL);
    T_EQ_INT(e.code, ERR_INVALID);
    T_EQ_STR(e.field, "backend");
    T_CHECK_MSG(strstr(e.msg, "\"mpi\"") && strstr(e.msg, "unknown"), "%s", e.msg);
    T_OK(comm_backend_check("tcp", &e));
}

static void test_bad_listen_host_fails_first_step(void)
{
    struct err e = {0};
    struct spec s = spec_for("tcp", "");
    struct rendezvous_env env = env_for(0, 2);
    snprintf(env.host, sizeof env.host, "256.1.1.1");
    T_CHECK(comm_factory_begin(&s, &env, NULL, &e) == NULL);
    T_CHECK(e.msg[0] != '\0');
}

/* A setup whose rank never joined (the worker failed between the steps) is freed. */
static void test_discard_frees_listener(void)
{
    struct err e = {0};
    struct spec s = spec_for("tcp", "");
    struct rendezvous_env env = env_for(1, 2);
    struct comm_factory *f = comm_factory_begin(&s, &env, NULL, &e);
    T_CHECK_MSG(f != NULL, "%s", e.msg);
    comm_factory_discard(f);
    comm_factory_discard(NULL);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_tcp_world_of_one);
    TEST_RUN(test_tcp_world_of_two);
    TEST_RUN(test_create_from_spec_one_rank);
    TEST_RUN(test_backend_unavailable_named);
    TEST_RUN(test_bad_listen_host_fails_first_step);
    TEST_RUN(test_discard_frees_listener);
    return test_end();
}
