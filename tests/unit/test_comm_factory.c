/* Unit tests for worker/comm/comm_factory: a tcp spec gives a working communicator for a
 * world of one and of two (two threads, each through its own store client as a worker's
 * rank, the two steps with a store in between): the ranks' allreduce sums across them,
 * the collective spec's forced algorithm is the one the operation ran with, the final
 * barrier passes. A backend this build lacks (nccl without NCCL) or one nobody knows
 * (mpi) is refused with ERR_INVALID on field "backend", naming it; a bad listen address
 * fails the first step; a setup never finished is freed (ASan's leak check).
 *
 * Groups (comm_create_group): 4 ranks as threads each make the world communicator and
 * groups of it; the groups' allreduces (asynchronous, larger than a segment) run while
 * the world carries a sendrecv between ranks 0<->1 and 2<->3, and each group's sum holds
 * its members only; the store holds each group's addresses under its namespace; a group
 * of all ranks and a group of one work beside each other; bad ranks, namespaces and
 * backends are ERR_INVALID naming the argument. A rank of a mesh with another namespace
 * (same run secret, world size and rank numbers) that reaches a mesh's port is dropped
 * by the handshake, and the mesh forms with its real peer. */
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "daemon/store_server.h"
#include "ddpb_config.h"
#include "tests/unit/test.h"
#include "worker/comm/comm_factory.h"
#include "worker/comm/tcp.h"

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
    const char *transport, *forced; /* the spec's (NULL: "", and algorithm "ring") */
    float sum;                      /* what the allreduce gave element 0 */
    char backend[8], algorithm[16], resolved[8];
    int rc;
    struct err e;
};

static void *rank_main(void *arg)
{
    struct rank_job *j = arg;
    struct spec s = spec_for("tcp", j->forced ? j->forced : "ring");
    snprintf(s.transport, sizeof s.transport, "%s", j->transport ? j->transport : "");
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
        snprintf(j->resolved, sizeof j->resolved, "%s", c->transport);
        j->rc = comm_barrier(c, &j->e);
    }
    comm_destroy(c);
    store_client_destroy(sc);
    return NULL;
}

/* Runs n ranks of rank_main with the spec's transport and forced algorithm; jobs out. */
static void run_world_jobs(int n, const char *transport, const char *forced,
                           struct rank_job *jobs)
{
    struct err e = {0};
    struct world w;
    T_OK(world_open(&w, &e));
    pthread_t th[2];
    for (int r = 0; r < n; r++) {
        jobs[r] = (struct rank_job){
            .w = &w, .rank = r, .world_size = n, .transport = transport, .forced = forced};
        T_CHECK(pthread_create(&th[r], NULL, rank_main, &jobs[r]) == 0);
    }
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);
    store_server_destroy(w.srv);
}

static void run_world(int n)
{
    struct rank_job jobs[2];
    run_world_jobs(n, NULL, NULL, jobs);
    for (int r = 0; r < n; r++) {
        T_CHECK_MSG(jobs[r].rc == 0, "rank %d: %s", r, jobs[r].e.msg);
        T_EQ_STR(jobs[r].backend, "tcp");
        T_NEAR(jobs[r].sum, n * (n + 1) / 2.0, 0);
        if (n > 1) /* a world of one moves nothing: no algorithm to force */
            T_EQ_STR(jobs[r].algorithm, "ring");
    }
}

/* The spec's transport reaches the communicator: auto (and an empty field, as a spec
 * stored before the field existed parses) puts two ranks of one machine on shared
 * memory and the allreduce runs over it; tcp keeps them on sockets. */
static void test_factory_transport(void)
{
    static const struct {
        const char *transport, *resolved, *algorithm;
    } cases[] = {{"auto", "shm", "shm"},
                 {NULL, "shm", "shm"},
                 {"shm", "shm", "shm"},
                 {"tcp", "tcp", "rd"}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct rank_job jobs[2];
        run_world_jobs(2, cases[k].transport, "auto", jobs);
        for (int r = 0; r < 2; r++) {
            T_CHECK_MSG(jobs[r].rc == 0, "%s rank %d: %s", cases[k].transport, r,
                        jobs[r].e.msg);
            T_NEAR(jobs[r].sum, 3.0, 0);
            T_EQ_STR(jobs[r].resolved, cases[k].resolved);
            T_EQ_STR(jobs[r].algorithm, cases[k].algorithm);
        }
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
    snprintf(s.mpi, sizeof s.mpi, "lam"); /* an implementation the vocabulary lacks */
    T_CHECK(comm_factory_begin(&s, &env, NULL, &e) == NULL);
    T_EQ_INT(e.code, ERR_INVALID);
    T_EQ_STR(e.field, "mpi");
    T_CHECK_MSG(strstr(e.msg, "\"lam\"") && strstr(e.msg, "unknown") &&
                    strstr(e.msg, "openmpi, mpich"),
                "%s", e.msg);
    s = spec_for("bogus", "");
    T_CHECK(comm_factory_begin(&s, &env, NULL, &e) == NULL);
    T_EQ_STR(e.field, "backend");
    T_OK(comm_backend_check("tcp", &e));
    T_OK(comm_backend_check("mpi", &e)); /* which MPI: the spec's "mpi", at the module */
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

/* ---- groups ------------------------------------------------------------------------ */

#define GRP_WORLD 4
#define GRP_MAX 2                /* groups per rank */
#define GRP_COUNT (300u * 1000u) /* floats a group allreduces: over a segment */
#define GRP_P2P (100u * 1000u)   /* floats of the world's sendrecv */

struct group_def {
    int ranks[GRP_WORLD], n;
    char ns[32];
};

/* One rank: the world, its groups, then the groups' allreduces in flight while the world
 * does a sendrecv with rank ^ 1, then a world allreduce. */
struct group_job {
    const struct world *w;
    int rank;
    struct group_def g[GRP_MAX];
    int ngroups;
    int rc;
    struct err e;
    char why[200]; /* the first wrong value or property, "" when none */
};

/* Group input element i of world rank r: distinct per rank, exact in float. */
static float group_input(int r, size_t i)
{
    return (float)((r + 1) * (int)(i % 7 + 1));
}

static float p2p_input(int r, size_t i)
{
    return (float)(r * 1000 + (int)(i % 997));
}

/* Checks group g's result against its members' inputs; returns 0 or writes why. */
static int group_verify(const struct group_def *g, const float *got, char *why, size_t len)
{
    int members = 0;
    for (int k = 0; k < g->n; k++)
        members += g->ranks[k] + 1;
    for (size_t i = 0; i < GRP_COUNT; i++) {
        float want = (float)(members * (int)(i % 7 + 1));
        if (got[i] != want) {
            snprintf(why, len, "group %s: element %zu is %g, want %g", g->ns, i, got[i], want);
            return -1;
        }
    }
    return 0;
}

static int group_job_ops(struct group_job *j, struct comm *world, struct comm **grp)
{
    float *buf[GRP_MAX] = {0};
    struct comm_handle *h[GRP_MAX] = {0};
    float *ps = malloc(GRP_P2P * sizeof *ps), *pr = malloc(GRP_P2P * sizeof *pr);
    int rc = -1;
    for (int g = 0; g < j->ngroups; g++) {
        buf[g] = malloc(GRP_COUNT * sizeof *buf[g]);
        if (!buf[g])
            goto out;
        for (size_t i = 0; i < GRP_COUNT; i++)
            buf[g][i] = group_input(j->rank, i);
    }
    if (!ps || !pr)
        goto out;
    for (size_t i = 0; i < GRP_P2P; i++)
        ps[i] = p2p_input(j->rank, i);
    for (int g = 0; g < j->ngroups; g++)
        if (!(h[g] = comm_iallreduce(grp[g], buf[g], buf[g], GRP_COUNT, COMM_FLOAT32, COMM_SUM,
                                     &j->e)))
            goto out;
    int peer = j->rank ^ 1;
    rc = comm_sendrecv(world, ps, GRP_P2P, peer, pr, GRP_P2P, peer, COMM_FLOAT32, &j->e);
    for (int g = 0; g < j->ngroups; g++) {
        int w = comm_wait(h[g], rc == 0 ? &j->e : NULL);
        h[g] = NULL;
        rc = rc == 0 ? w : rc;
    }
    if (rc < 0)
        goto out;
    for (size_t i = 0; i < GRP_P2P && !j->why[0]; i++)
        if (pr[i] != p2p_input(peer, i))
            snprintf(j->why, sizeof j->why, "world sendrecv: element %zu is %g, want %g", i,
                     pr[i], p2p_input(peer, i));
    for (int g = 0; g < j->ngroups && !j->why[0]; g++)
        group_verify(&j->g[g], buf[g], j->why, sizeof j->why);
    /* the world still spans every rank after its groups ran */
    float v = (float)(j->rank + 1);
    rc = comm_allreduce(world, &v, &v, 1, COMM_FLOAT32, COMM_SUM, &j->e);
    if (rc == 0 && v != 10.0f && !j->why[0])
        snprintf(j->why, sizeof j->why, "world allreduce gave %g, want 10", v);
out:
    for (int g = 0; g < j->ngroups; g++) {
        if (h[g])
            comm_wait(h[g], NULL);
        free(buf[g]);
    }
    free(ps);
    free(pr);
    return rc;
}

static void *group_main(void *arg)
{
    struct group_job *j = arg;
    struct spec s = spec_for("tcp", "");
    struct rendezvous_env env = env_for(j->rank, GRP_WORLD);
    struct comm *grp[GRP_MAX] = {0};
    j->rc = -1;
    struct store_client *sc = store_client_connect(j->w->addr, RUN, SECRET, j->rank, 5000, NULL,
                                                   &j->e);
    struct comm *world = sc ? comm_create_from_spec(&s, &env, NULL, sc, &j->e) : NULL;
    int made = 0;
    while (world && made < j->ngroups) {
        const struct group_def *g = &j->g[made];
        if (!(grp[made] = comm_create_group(&s, &env, NULL, sc, g->ranks, g->n, g->ns, NULL,
                                            &j->e)))
            break;
        int me = 0;
        while (g->ranks[me] != j->rank)
            me++;
        if (grp[made]->rank != me || grp[made]->world_size != g->n ||
            strcmp(grp[made]->backend, "tcp") != 0)
            snprintf(j->why, sizeof j->why, "group %s: rank %d of %d, want %d of %d", g->ns,
                     grp[made]->rank, grp[made]->world_size, me, g->n);
        made++;
    }
    if (made == j->ngroups && group_job_ops(j, world, grp) == 0) {
        j->rc = 0;
        for (int g = 0; g < j->ngroups && j->rc == 0; g++)
            j->rc = comm_barrier(grp[g], &j->e);
    }
    for (int g = 0; g < made; g++)
        comm_destroy(grp[g]);
    comm_destroy(world);
    store_client_destroy(sc);
    return NULL;
}

static struct group_def group_of(const char *ns, int n, const int *ranks)
{
    struct group_def g = {.n = n};
    memcpy(g.ranks, ranks, (size_t)n * sizeof *ranks);
    snprintf(g.ns, sizeof g.ns, "%s", ns);
    return g;
}

/* Runs GRP_WORLD ranks with the groups set up in jobs; the store stays open for checks
 * until *w is closed by the caller (store_server_destroy). */
static void run_groups(struct world *w, struct group_job *jobs)
{
    pthread_t th[GRP_WORLD];
    for (int r = 0; r < GRP_WORLD; r++) {
        jobs[r].w = w;
        jobs[r].rank = r;
        pthread_create(&th[r], NULL, group_main, &jobs[r]);
    }
    for (int r = 0; r < GRP_WORLD; r++)
        pthread_join(th[r], NULL);
}

/* Whether key exists in the run's store (GET that does not block). */
static bool store_has(const struct world *w, const char *key)
{
    struct err e = {0};
    struct store_client *sc = store_client_connect(w->addr, RUN, SECRET, 0, 5000, NULL, &e);
    char *val = NULL;
    size_t len;
    bool has = sc && store_client_get(sc, key, 0, &val, &len, &e) == 0;
    free(val);
    store_client_destroy(sc);
    return has;
}

/* Pipeline stages of 2 replicas each: stage 0 on ranks {0,2}, stage 1 on {1,3}; the
 * world's sendrecv pairs 0<->1 and 2<->3 (the activations between stages). */
static void test_groups_beside_world_traffic(void)
{
    struct err e = {0};
    struct world w;
    T_OK(world_open(&w, &e));
    static const int s0[] = {0, 2}, s1[] = {1, 3};
    struct group_job jobs[GRP_WORLD];
    memset(jobs, 0, sizeof jobs);
    for (int r = 0; r < GRP_WORLD; r++) {
        jobs[r].g[0] = r % 2 == 0 ? group_of("pp/s0/", 2, s0) : group_of("pp/s1/", 2, s1);
        jobs[r].ngroups = 1;
    }
    run_groups(&w, jobs);
    /* each group's addresses under its namespace, the world's where they always were */
    bool keys = store_has(&w, "tcp/addr/3") && store_has(&w, "pp/s0/tcp/addr/1") &&
                store_has(&w, "pp/s1/tcp/addr/1") && !store_has(&w, "pp/s0/tcp/addr/2");
    store_server_destroy(w.srv);
    for (int r = 0; r < GRP_WORLD; r++) {
        T_CHECK_MSG(jobs[r].rc == 0, "rank %d: %s", r, jobs[r].e.msg);
        T_CHECK_MSG(!jobs[r].why[0], "rank %d: %s", r, jobs[r].why);
    }
    T_CHECK(keys);
}

/* A group of every rank and a group of one (its collectives copy) side by side. */
static void test_group_of_all_and_of_one(void)
{
    struct err e = {0};
    struct world w;
    T_OK(world_open(&w, &e));
    static const int all[] = {0, 1, 2, 3};
    struct group_job jobs[GRP_WORLD];
    memset(jobs, 0, sizeof jobs);
    for (int r = 0; r < GRP_WORLD; r++) {
        char ns[32];
        snprintf(ns, sizeof ns, "solo/%d/", r);
        jobs[r].g[0] = group_of("all/", GRP_WORLD, all);
        jobs[r].g[1] = group_of(ns, 1, &r);
        jobs[r].ngroups = 2;
    }
    run_groups(&w, jobs);
    store_server_destroy(w.srv);
    for (int r = 0; r < GRP_WORLD; r++) {
        T_CHECK_MSG(jobs[r].rc == 0, "rank %d: %s", r, jobs[r].e.msg);
        T_CHECK_MSG(!jobs[r].why[0], "rank %d: %s", r, jobs[r].why);
    }
}

/* Expects comm_create_group to refuse with ERR_INVALID naming field. */
static int group_refused(struct store_client *sc, const char *backend, int rank,
                         const int *ranks, int n, const char *ns, const char *field, char *why,
                         size_t len)
{
    struct err e = {0};
    struct spec s = spec_for(backend, "");
    struct rendezvous_env env = env_for(rank, GRP_WORLD);
    env.timeout_ms = 500; /* a check that lets a bad group through must not hang */
    struct comm *c = comm_create_group(&s, &env, NULL, sc, ranks, n, ns, NULL, &e);
    if (c) {
        comm_destroy(c);
        snprintf(why, len, "%s: accepted", field);
        return -1;
    }
    if (e.code != ERR_INVALID || strcmp(e.field, field) != 0) {
        snprintf(why, len, "want ERR_INVALID on %s, got code %d field '%s': %s", field, e.code,
                 e.field, e.msg);
        return -1;
    }
    return 0;
}

static void test_group_bad_arguments(void)
{
    struct err e = {0};
    struct world w;
    T_OK(world_open(&w, &e));
    struct store_client *sc = store_client_connect(w.addr, RUN, SECRET, 1, 5000, NULL, &e);
    T_CHECK_MSG(sc != NULL, "%s", e.msg);
    static const int r01[] = {0, 1}, r11[] = {1, 1}, r21[] = {2, 1}, rneg[] = {-1, 1},
                     r14[] = {1, 4}, r02[] = {0, 2}, five[] = {0, 1, 2, 3, 4}, r1[] = {1};
    char longns[COMM_TCP_NS_MAX + 2], maxns[COMM_TCP_NS_MAX + 1];
    memset(longns, 'x', sizeof longns - 1);
    longns[sizeof longns - 1] = '\0';
    memset(maxns, 'y', sizeof maxns - 1);
    maxns[sizeof maxns - 1] = '\0';
    char why[400] = "";
    int bad = 0;
    bad += group_refused(sc, "tcp", 1, r01, 0, "g/", "ranks", why, sizeof why) < 0;
    bad += group_refused(sc, "tcp", 1, NULL, 2, "g/", "ranks", why, sizeof why) < 0;
    bad += group_refused(sc, "tcp", 1, five, 5, "g/", "ranks", why, sizeof why) < 0;
    bad += group_refused(sc, "tcp", 1, r11, 2, "g/", "ranks", why, sizeof why) < 0;
    bad += group_refused(sc, "tcp", 1, r21, 2, "g/", "ranks", why, sizeof why) < 0;
    bad += group_refused(sc, "tcp", 1, rneg, 2, "g/", "ranks", why, sizeof why) < 0;
    bad += group_refused(sc, "tcp", 1, r14, 2, "g/", "ranks", why, sizeof why) < 0;
    bad += group_refused(sc, "tcp", 1, r02, 2, "g/", "ranks", why, sizeof why) < 0;
    bad += group_refused(sc, "tcp", 1, r01, 2, NULL, "ns", why, sizeof why) < 0;
    bad += group_refused(sc, "tcp", 1, r01, 2, "", "ns", why, sizeof why) < 0;
    bad += group_refused(sc, "tcp", 1, r01, 2, longns, "ns", why, sizeof why) < 0;
    bad += group_refused(sc, "tcp", 1, r01, 2, "a b/", "ns", why, sizeof why) < 0;
    bad += group_refused(sc, "nccl", 1, r01, 2, "g/", "backend", why, sizeof why) < 0;
    /* the longest namespace is fine: a group of one forms on it */
    struct spec s = spec_for("tcp", "");
    struct rendezvous_env env = env_for(1, GRP_WORLD);
    struct comm *c = comm_create_group(&s, &env, NULL, sc, r1, 1, maxns, NULL, &e);
    int one = c && c->rank == 0 && c->world_size == 1 && comm_barrier(c, &e) == 0;
    comm_destroy(c);
    store_client_destroy(sc);
    store_server_destroy(w.srv);
    T_CHECK_MSG(bad == 0, "%d refused wrongly, last: %s", bad, why);
    T_CHECK_MSG(one, "%s", e.msg);
}

/* One rank's comm_tcp_connect, started delay_ms late. */
struct tcp_job {
    struct comm_tcp *t;
    const char *addrs[2];
    int delay_ms;
    struct comm *c;
    struct err e;
};

static void *tcp_job_main(void *arg)
{
    struct tcp_job *j = arg;
    if (j->delay_ms)
        usleep((useconds_t)j->delay_ms * 1000);
    j->c = comm_tcp_connect(j->t, j->addrs, &j->e);
    return NULL;
}

static struct comm_tcp *listen_ns(int rank, const char *ns, struct err *e)
{
    struct comm_tcp_config cfg = {.rank = rank,
                                  .world_size = 2,
                                  .listen_host = "127.0.0.1",
                                  .timeout_ms = 3000,
                                  .secret = SECRET,
                                  .ns = ns};
    return comm_tcp_listen(&cfg, e);
}

/* Mesh A ("pp/s0/", ranks 0 and 1) and a rank 0 of mesh B ("pp/s1/": same secret, world
 * size and rank numbers) that was given A's rank 1 as its peer: B's hello reaches A1
 * first (A0 starts late), where, were the namespace not in the handshake, A1 would take
 * it for rank 0, ack it (so B0 would "succeed" on A's mesh) and drop the real A0 as a
 * duplicate. Instead A1 drops B0 and A forms; B0 learns it was refused. */
static void test_group_ns_keeps_meshes_apart(void)
{
    struct err e = {0};
    struct comm_tcp *a0 = listen_ns(0, "pp/s0/", &e), *a1 = listen_ns(1, "pp/s0/", &e),
                    *b0 = listen_ns(0, "pp/s1/", &e);
    T_CHECK_MSG(a0 && a1 && b0, "%s", e.msg);
    const char *addr_a0 = comm_tcp_address(a0), *addr_a1 = comm_tcp_address(a1),
               *addr_b0 = comm_tcp_address(b0);
    struct tcp_job jobs[3] = {{.t = a0, .addrs = {addr_a0, addr_a1}, .delay_ms = 300},
                              {.t = a1, .addrs = {addr_a0, addr_a1}},
                              {.t = b0, .addrs = {addr_b0, addr_a1}}};
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, tcp_job_main, &jobs[i]);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    int ok = 0;
    float v[2] = {1, 2};
    if (jobs[0].c && jobs[1].c) { /* A works: 1 + 2 on each */
        struct comm_handle *h = comm_iallreduce(jobs[0].c, &v[0], &v[0], 1, COMM_FLOAT32,
                                                COMM_SUM, &e);
        ok = comm_allreduce(jobs[1].c, &v[1], &v[1], 1, COMM_FLOAT32, COMM_SUM, &e) == 0;
        ok = (h && comm_wait(h, &e) == 0) && ok && v[0] == 3 && v[1] == 3;
    }
    for (int i = 0; i < 3; i++)
        comm_destroy(jobs[i].c);
    T_CHECK_MSG(jobs[0].c && jobs[1].c, "mesh A: %s | %s", jobs[0].e.msg, jobs[1].e.msg);
    T_CHECK_MSG(ok, "mesh A allreduce: %s", e.msg);
    T_CHECK_MSG(jobs[2].c == NULL, "mesh B's rank joined mesh A");
    T_CHECK_MSG(jobs[2].e.code == ERR_PEER && strstr(jobs[2].e.msg, "namespace"), "%s",
                jobs[2].e.msg);
}

/* Meshes meet exactly when their namespaces are equal: NULL and "" are both the world's
 * (the protocol of ranks that know no namespaces), "pp/s0/" is not. */
static void test_group_ns_null_is_world(void)
{
    const char *pairs[][2] = {{NULL, ""}, {"pp/s0/", "pp/s0/"}, {NULL, "pp/s0/"}};
    bool meet[] = {true, true, false};
    for (int p = 0; p < 3; p++) {
        struct err e = {0};
        struct comm_tcp *t0 = listen_ns(0, pairs[p][0], &e),
                        *t1 = listen_ns(1, pairs[p][1], &e);
        T_CHECK_MSG(t0 && t1, "%s", e.msg);
        const char *a0 = comm_tcp_address(t0), *a1 = comm_tcp_address(t1);
        struct tcp_job jobs[2] = {{.t = t0, .addrs = {a0, a1}}, {.t = t1, .addrs = {a0, a1}}};
        pthread_t th[2];
        for (int i = 0; i < 2; i++)
            pthread_create(&th[i], NULL, tcp_job_main, &jobs[i]);
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        bool both = jobs[0].c && jobs[1].c, none = !jobs[0].c && !jobs[1].c;
        for (int i = 0; i < 2; i++)
            comm_destroy(jobs[i].c);
        T_CHECK_MSG(meet[p] ? both : none, "'%s' and '%s': %s | %s",
                    pairs[p][0] ? pairs[p][0] : "(null)", pairs[p][1], jobs[0].e.msg,
                    jobs[1].e.msg);
    }
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_tcp_world_of_one);
    TEST_RUN(test_tcp_world_of_two);
    TEST_RUN(test_factory_transport);
    TEST_RUN(test_create_from_spec_one_rank);
    TEST_RUN(test_backend_unavailable_named);
    TEST_RUN(test_bad_listen_host_fails_first_step);
    TEST_RUN(test_discard_frees_listener);
    TEST_RUN(test_groups_beside_world_traffic);
    TEST_RUN(test_group_of_all_and_of_one);
    TEST_RUN(test_group_bad_arguments);
    TEST_RUN(test_group_ns_keeps_meshes_apart);
    TEST_RUN(test_group_ns_null_is_world);
    return test_end();
}
