/* Unit tests for worker/comm/mpi.c, the MPI communicator module, run by an MPI launcher
 * with 2 ranks (tests/meson.build: mpirun.openmpi -np 2 for the openmpi module, mpiexec.mpich
 * -n 2 for mpich; DDPB_TEST_MPI names the implementation). The module is loaded the way the
 * worker loads it (comm_factory_mpi_module, the vocabulary's row).
 *
 * Checked against a reference each rank computes locally from every rank's inputs: every
 * collective x dtype x redop, in and out of place, through the synchronous calls and the
 * communication thread; send, recv and sendrecv (in place, unequal sizes, to itself); a
 * group of one rank; and the timeout: rank 1 enters an allreduce late, rank 0 fails with
 * ERR_TIMEOUT naming "allreduce" instead of hanging, and the operation still completes
 * when rank 1 arrives, so MPI finalises and both ranks exit 0.
 *
 * Inputs are small integers, which every dtype holds exactly and every reduction order
 * sums exactly, so results compare exactly. Only rank 0 prints the summary line; a
 * failure on either rank fails its exit status and so the launcher's. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "tests/unit/test.h"
#include "worker/comm/comm_factory.h"
#include "worker/comm/comm_mpi.h"
#include "worker/comm/reduce.h"

#define COUNT 1003 /* not a multiple of anything MPI segments by */

static const struct comm_mpi_module *mod;
static struct comm *world;
static int me, n;

static const enum comm_dtype dtypes[] = {COMM_FLOAT32, COMM_FLOAT16, COMM_BFLOAT16, COMM_INT32,
                                         COMM_INT64};
static const enum comm_redop redops[] = {COMM_SUM, COMM_AVG, COMM_MIN, COMM_MAX};

/* Rank r's input element i: small integers of both signs (exact in bfloat16). */
static double input_value(int r, size_t i)
{
    return (double)((int)((i * 7 + (size_t)r * 13) % 41) - 20 + r);
}

static void fill_input(void *buf, enum comm_dtype t, int r, size_t count, size_t base)
{
    size_t es = comm_dtype_size(t);
    for (size_t i = 0; i < count; i++)
        reduce_store((char *)buf + i * es, t, input_value(r, base + i));
}

/* The reduction of element i over every rank, rounded as comm.h defines it. */
static double expect_reduced(enum comm_dtype t, enum comm_redop op, size_t i)
{
    double acc = input_value(0, i);
    for (int r = 1; r < n; r++) {
        double v = input_value(r, i);
        acc = op == COMM_MIN   ? (v < acc ? v : acc)
              : op == COMM_MAX ? (v > acc ? v : acc)
                               : acc + v;
    }
    if (op != COMM_AVG)
        return acc;
    if (t == COMM_INT32 || t == COMM_INT64)
        return (double)((int64_t)acc / n); /* toward zero */
    return (double)((float)acc / (float)n);
}

/* Compares count elements of buf with the reference got(i); names the first mismatch. */
static int check_block(const char *what, const void *buf, enum comm_dtype t, size_t count,
                       enum comm_redop op, size_t base, int gather_rank)
{
    size_t es = comm_dtype_size(t);
    for (size_t i = 0; i < count; i++) {
        double want = gather_rank >= 0 ? input_value(gather_rank, base + i)
                                       : expect_reduced(t, op, base + i);
        char tmp[8];
        reduce_store(tmp, t, want); /* rounded to the dtype */
        want = reduce_load(tmp, t);
        double got = reduce_load((const char *)buf + i * es, t);
        if (got != want) {
            fprintf(stderr, "  rank %d %s %s/%s: element %zu = %g, want %g\n", me, what,
                    comm_dtype_name(t), comm_redop_name(op), base + i, got, want);
            return -1;
        }
    }
    return 0;
}

/* ---- collectives -------------------------------------------------------------------- */

static int run_allreduce(enum comm_dtype t, enum comm_redop op, bool in_place, bool async)
{
    size_t es = comm_dtype_size(t);
    char *send = malloc(COUNT * es), *recv = in_place ? send : malloc(COUNT * es);
    fill_input(send, t, me, COUNT, 0);
    struct err e = {0};
    int rc;
    if (async) {
        struct comm_handle *h = comm_iallreduce(world, send, recv, COUNT, t, op, &e);
        rc = h ? comm_wait(h, &e) : -1;
    } else {
        rc = comm_allreduce(world, send, recv, COUNT, t, op, &e);
    }
    if (rc < 0)
        fprintf(stderr, "  allreduce: %s\n", e.msg);
    if (rc == 0)
        rc = check_block("allreduce", recv, t, COUNT, op, 0, -1);
    if (!in_place)
        free(recv);
    free(send);
    return rc;
}

static void test_allreduce(void)
{
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
        for (size_t o = 0; o < sizeof redops / sizeof redops[0]; o++)
            for (int ip = 0; ip < 2; ip++)
                T_CHECK_MSG(run_allreduce(dtypes[d], redops[o], ip, false) == 0, "%s %s %s",
                            comm_dtype_name(dtypes[d]), comm_redop_name(redops[o]),
                            ip ? "in place" : "out of place");
    T_EQ_STR(world->last_algorithm, "mpi");
}

/* Through the communication thread: MPI runs on another thread than MPI_Init's. */
static void test_allreduce_async(void)
{
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
        T_CHECK(run_allreduce(dtypes[d], COMM_AVG, d % 2, true) == 0);
    uint64_t before = world->bytes_sent;
    T_CHECK(run_allreduce(COMM_FLOAT32, COMM_SUM, false, false) == 0);
    T_EQ_INT(world->bytes_sent - before, comm_wire_bytes(COMM_OP_ALLREDUCE, COUNT * 4, n));
}

static int run_reduce_scatter(enum comm_dtype t, enum comm_redop op, bool in_place)
{
    size_t es = comm_dtype_size(t), total = COUNT * (size_t)n;
    char *send = malloc(total * es);
    char *recv = in_place ? send + (size_t)me * COUNT * es : malloc(COUNT * es);
    fill_input(send, t, me, total, 0);
    struct err e = {0};
    int rc = comm_reduce_scatter(world, send, recv, COUNT, t, op, &e);
    if (rc < 0)
        fprintf(stderr, "  reduce_scatter: %s\n", e.msg);
    if (rc == 0)
        rc = check_block("reduce_scatter", recv, t, COUNT, op, (size_t)me * COUNT, -1);
    if (!in_place)
        free(recv);
    free(send);
    return rc;
}

static void test_reduce_scatter(void)
{
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
        for (size_t o = 0; o < sizeof redops / sizeof redops[0]; o++)
            for (int ip = 0; ip < 2; ip++)
                T_CHECK_MSG(run_reduce_scatter(dtypes[d], redops[o], ip) == 0, "%s %s %s",
                            comm_dtype_name(dtypes[d]), comm_redop_name(redops[o]),
                            ip ? "in place" : "out of place");
}

static int run_all_gather(enum comm_dtype t, bool in_place)
{
    size_t es = comm_dtype_size(t);
    char *recv = malloc(COUNT * (size_t)n * es);
    char *send = in_place ? recv + (size_t)me * COUNT * es : malloc(COUNT * es);
    fill_input(send, t, me, COUNT, 0);
    struct err e = {0};
    int rc = comm_all_gather(world, send, recv, COUNT, t, &e);
    if (rc < 0)
        fprintf(stderr, "  all_gather: %s\n", e.msg);
    for (int r = 0; rc == 0 && r < n; r++)
        rc = check_block("all_gather", recv + (size_t)r * COUNT * es, t, COUNT, COMM_SUM, 0, r);
    if (!in_place)
        free(send);
    free(recv);
    return rc;
}

static void test_all_gather(void)
{
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
        for (int ip = 0; ip < 2; ip++)
            T_CHECK_MSG(run_all_gather(dtypes[d], ip) == 0, "%s %s", comm_dtype_name(dtypes[d]),
                        ip ? "in place" : "out of place");
}

static int run_broadcast(enum comm_dtype t, int root, bool in_place)
{
    size_t es = comm_dtype_size(t);
    char *send = malloc(COUNT * es), *recv = in_place ? send : malloc(COUNT * es);
    fill_input(send, t, me, COUNT, 0);
    if (!in_place)
        memset(recv, 0x5a, COUNT * es);
    struct err e = {0};
    int rc = comm_broadcast(world, send, recv, COUNT, t, root, &e);
    if (rc < 0)
        fprintf(stderr, "  broadcast: %s\n", e.msg);
    if (rc == 0)
        rc = check_block("broadcast", recv, t, COUNT, COMM_SUM, 0, root);
    if (!in_place)
        free(recv);
    free(send);
    return rc;
}

static void test_broadcast(void)
{
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
        for (int root = 0; root < n; root++)
            for (int ip = 0; ip < 2; ip++)
                T_CHECK_MSG(run_broadcast(dtypes[d], root, ip) == 0, "%s root %d %s",
                            comm_dtype_name(dtypes[d]), root, ip ? "in place" : "out of place");
}

static void test_barrier(void)
{
    struct err e = {0};
    T_OK(comm_barrier(world, &e));
    struct comm_handle *h = comm_start(world, &(struct comm_args){.op = COMM_OP_BARRIER}, &e);
    T_CHECK(h);
    T_OK(comm_wait(h, &e));
}

/* ---- point to point ----------------------------------------------------------------- */

static void test_send_recv(void)
{
    int peer = me ^ 1;
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        enum comm_dtype t = dtypes[d];
        size_t es = comm_dtype_size(t);
        char *buf = malloc(COUNT * es);
        struct err e = {0};
        int rc;
        if (me == 0) { /* 0 -> 1, then 1 -> 0 */
            fill_input(buf, t, me, COUNT, 0);
            rc = comm_send(world, buf, COUNT, t, peer, &e);
            if (rc == 0)
                rc = comm_recv(world, buf, COUNT, t, peer, &e);
        } else {
            rc = comm_recv(world, buf, COUNT, t, peer, &e);
            if (rc == 0)
                rc = check_block("recv", buf, t, COUNT, COMM_SUM, 0, peer);
            fill_input(buf, t, me, COUNT, 0);
            if (rc == 0)
                rc = comm_send(world, buf, COUNT, t, peer, &e);
        }
        if (rc == 0 && me == 0)
            rc = check_block("recv", buf, t, COUNT, COMM_SUM, 0, peer);
        free(buf);
        T_CHECK_MSG(rc == 0, "%s: %s", comm_dtype_name(t), e.msg);
    }
}

/* Unequal sizes (rank 0 sends COUNT and receives COUNT / 2), in place and out of place. */
static int run_sendrecv(enum comm_dtype t, bool in_place)
{
    size_t es = comm_dtype_size(t), mine = me == 0 ? COUNT : COUNT / 2;
    size_t theirs = me == 0 ? COUNT / 2 : COUNT;
    char *send = malloc(COUNT * es), *recv = in_place ? send : malloc(COUNT * es);
    fill_input(send, t, me, mine, 0);
    if (in_place) /* in place: both sizes equal, as comm.h's layout says */
        mine = theirs = COUNT / 2;
    struct err e = {0};
    int rc = comm_sendrecv(world, send, mine, me ^ 1, recv, theirs, me ^ 1, t, &e);
    if (rc < 0)
        fprintf(stderr, "  sendrecv: %s\n", e.msg);
    if (rc == 0)
        rc = check_block("sendrecv", recv, t, theirs, COMM_SUM, 0, me ^ 1);
    if (!in_place)
        free(recv);
    free(send);
    return rc;
}

static void test_sendrecv(void)
{
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
        for (int ip = 0; ip < 2; ip++)
            T_CHECK_MSG(run_sendrecv(dtypes[d], ip) == 0, "%s %s", comm_dtype_name(dtypes[d]),
                        ip ? "in place" : "out of place");
    /* to itself: a local copy */
    float a[4] = {1, 2, 3, 4}, b[4] = {0};
    struct err e = {0};
    T_OK(comm_sendrecv(world, a, 4, me, b, 4, me, COMM_FLOAT32, &e));
    T_CHECK(memcmp(a, b, sizeof a) == 0);
}

/* Two communicators busy at once on two threads (a pipeline's stage allreduce on its
 * communication thread beside the world's traffic on the main thread): MPI is called from
 * both at the same time, which the module serializes (MPICH over UCX asserts otherwise). */
static void test_concurrent_comms(void)
{
    struct err e = {0};
    struct comm_mpi_config cfg = {.timeout_ms = 20000};
    struct comm *c2 = mod->create(&cfg, &e);
    T_CHECK_MSG(c2, "%s", e.msg);
    enum { N = 1 << 16 };
    static float a[N], b[N];
    int bad = 0, rc = 0;
    for (int round = 0; round < 40 && rc == 0; round++) {
        for (int i = 0; i < N; i++) {
            a[i] = (float)(me + i % 5);
            b[i] = (float)(2 * me + round);
        }
        struct comm_handle *h = comm_iallreduce(c2, a, a, N, COMM_FLOAT32, COMM_SUM, &e);
        rc = h ? 0 : -1;
        for (int k = 0; k < 4 && rc == 0; k++) /* world ops while c2's runs */
            rc = comm_allreduce(world, b, b, 64, COMM_FLOAT32, COMM_MAX, &e);
        if (h && comm_wait(h, &e) < 0)
            rc = -1;
        bad += rc == 0 && (a[7] != (float)(2 * (7 % 5) + 1) || b[0] != (float)(2 + round));
    }
    comm_destroy(c2);
    T_CHECK_MSG(rc == 0, "%s", e.msg);
    T_EQ_INT(bad, 0);
}

/* ---- groups, refusals, the timeout -------------------------------------------------- */

/* Each rank alone in a group of its own: MPI_Comm_create_group of one rank. */
static void test_group_of_one(void)
{
    struct err e = {0};
    int ranks[1] = {me};
    struct comm_mpi_config cfg = {.timeout_ms = 10000, .ranks = ranks, .n_ranks = 1};
    struct comm *g = mod->create(&cfg, &e);
    T_CHECK_MSG(g, "%s", e.msg);
    T_EQ_INT(g->rank, 0);
    T_EQ_INT(g->world_size, 1);
    int32_t v[3] = {me, 2, -7}, out[3];
    int rc = comm_allreduce(g, v, out, 3, COMM_INT32, COMM_SUM, &e);
    comm_destroy(g);
    T_CHECK_MSG(rc == 0, "%s", e.msg);
    T_CHECK(out[0] == me && out[1] == 2 && out[2] == -7);
}

static void test_refusals(void)
{
    struct err e = {0};
    float v[2] = {0};
    struct comm_args a = {.op = COMM_OP_ALLREDUCE,
                          .send = v,
                          .recv = v,
                          .count = 2,
                          .dtype = COMM_FLOAT32,
                          .algorithm = COMM_ALG_RING};
    T_CHECK(comm_run(world, &a, &e) < 0); /* MPI chooses its own algorithms */
    T_EQ_STR(e.field, "algorithm");
    struct comm_mpi_config bad = {.timeout_ms = 0};
    T_CHECK(mod->create(&bad, &e) == NULL);
    T_EQ_STR(e.field, "comm_timeout_s");
}

/* Rank 1 enters the allreduce only once rank 0 has given up on it (a world barrier tells
 * it when): rank 0 fails in about its 300 ms timeout with ERR_TIMEOUT naming the op; its
 * later operations fail with the first error; rank 1's late allreduce completes while
 * rank 0 destroys the communicator (which waits for the operation still in flight). */
static void test_timeout(void)
{
    struct err e = {0};
    struct comm_mpi_config cfg = {.timeout_ms = me == 0 ? 300 : 20000};
    struct comm *c = mod->create(&cfg, &e);
    T_CHECK_MSG(c, "%s", e.msg);
    int32_t v[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    int rc = 0;
    bool ok = true;
    if (me == 0) {
        int64_t t0 = clock_mono_ms();
        rc = comm_allreduce(c, v, v, 8, COMM_INT32, COMM_SUM, &e);
        int64_t took = clock_mono_ms() - t0;
        ok = rc < 0 && e.code == ERR_TIMEOUT && strcmp(c->error_op, "allreduce") == 0 &&
             strstr(e.msg, "allreduce") && took >= 250 && took < 5000;
        if (!ok)
            fprintf(stderr, "  rank 0: rc %d code %d op %s after %lld ms: %s\n", rc, e.code,
                    c->error_op, (long long)took, e.msg);
        struct err e2 = {0}; /* broken: the next operation fails at once with the first */
        ok = ok && comm_barrier(c, &e2) < 0 && e2.code == ERR_TIMEOUT;
    }
    struct err eb = {0};
    int brc = comm_barrier(world, &eb); /* rank 0 has timed out */
    if (me == 1) {
        rc = comm_allreduce(c, v, v, 8, COMM_INT32, COMM_SUM, &e);
        ok = rc == 0 && v[0] == 2;
    }
    comm_destroy(c);
    T_CHECK_MSG(brc == 0, "%s", eb.msg);
    T_CHECK_MSG(ok, "rank %d: %s", me, e.msg);
}

/* The factory's path, as the worker takes it: the spec's implementation, the launch
 * environment's rank checked against MPI's, a group through comm_create_group. */
static struct spec mpi_spec(void)
{
    struct spec s;
    memset(&s, 0, sizeof s);
    s.workload = SPEC_WORKLOAD_COLLECTIVE;
    snprintf(s.device, sizeof s.device, "cpu");
    snprintf(s.backend, sizeof s.backend, "mpi");
    snprintf(s.mpi, sizeof s.mpi, "%s", mod->implementation);
    return s;
}

static void test_factory(void)
{
    struct spec s = mpi_spec();
    struct rendezvous_env env = {.rank = me, .world_size = n, .timeout_ms = 10000};
    struct err e = {0};
    struct comm *c = comm_create_from_spec(&s, &env, NULL, NULL, &e);
    T_CHECK_MSG(c, "%s", e.msg);
    int32_t v[2] = {me, 1}, out[2] = {0};
    int rc = comm_allreduce(c, v, out, 2, COMM_INT32, COMM_SUM, &e);
    comm_destroy(c);
    T_CHECK_MSG(rc == 0 && out[0] == 1 && out[1] == 2, "%s", e.msg);
    int ranks[2] = {0, 1};
    c = comm_create_group(&s, &env, NULL, NULL, ranks, 2, "g/", NULL, &e);
    T_CHECK_MSG(c, "%s", e.msg);
    rc = comm_allreduce(c, v, out, 2, COMM_INT32, COMM_MAX, &e);
    comm_destroy(c);
    T_CHECK_MSG(rc == 0 && out[0] == 1 && out[1] == 1, "%s", e.msg);
    /* a launch environment that disagrees with MPI: refused naming the launcher */
    env.rank = me ^ 1;
    T_CHECK(comm_create_from_spec(&s, &env, NULL, NULL, &e) == NULL);
    T_EQ_STR(e.field, "launcher");
    T_CHECK_MSG(strstr(e.msg, "launch environment"), "%s", e.msg);
    env.rank = me; /* a forced algorithm: MPI chooses its own */
    snprintf(s.coll.algorithm, sizeof s.coll.algorithm, "ring");
    T_CHECK(comm_create_from_spec(&s, &env, NULL, NULL, &e) == NULL);
    T_EQ_STR(e.field, "algorithm");
}

static void test_env(void)
{
    json_t *env = mod->env();
    T_CHECK(env);
    const char *impl = json_string_value(json_object_get(env, "implementation"));
    const char *ver = json_string_value(json_object_get(env, "library_version"));
    const char *thr = json_string_value(json_object_get(env, "thread_level"));
    json_t *tr = json_object_get(env, "transport");
    bool ok = impl && strcmp(impl, mod->implementation) == 0 && ver &&
              strstr(ver, strcmp(impl, "openmpi") == 0 ? "Open MPI" : "MPICH") && thr &&
              (strcmp(thr, "serialized") == 0 || strcmp(thr, "multiple") == 0) &&
              json_is_object(tr) &&
              (strcmp(impl, "openmpi") == 0 ? json_object_get(tr, "pml_selected") != NULL
                                            : json_object_get(tr, "device") != NULL);
    json_t *set = json_object_get(env, "settings"); /* main's params reached MPI's env */
    ok = ok && json_object_get(set, "OMPI_MCA_btl") &&
         json_object_get(set, "MPIR_CVAR_DEBUG_HOLD");
    if (strcmp(mod->implementation, "openmpi") == 0) /* and OpenMPI took the btl */
        ok = ok && strcmp(json_string_value(json_object_get(tr, "btl")), "self,vader,tcp") == 0;
    char *dump = json_dumps(env, JSON_COMPACT);
    if (me == 0)
        printf("  env: %s\n", dump ? dump : "?");
    free(dump);
    json_decref(env);
    T_CHECK(ok);
}

/* Not a test: `test_comm_mpi --loop` runs 1 MiB allreduces until one fails and prints how
 * (what happens when a rank is killed inside MPI_Allreduce: the report's measurement). */
static int loop_until_failure(void)
{
    static float buf[1 << 18];
    struct err e = {0};
    struct comm_mpi_config cfg = {.timeout_ms = 5000};
    struct comm *c = mod->create(&cfg, &e);
    if (!c)
        return fprintf(stderr, "%s\n", e.msg), 1;
    fprintf(stderr, "rank %d pid %d looping\n", c->rank, (int)getpid());
    long done = 0;
    int64_t t_last = clock_mono_ms();
    while (comm_allreduce(c, buf, buf, 1 << 18, COMM_FLOAT32, COMM_SUM, &e) == 0) {
        done++;
        t_last = clock_mono_ms();
    }
    fprintf(stderr, "rank %d: allreduce %ld failed %lld ms after the last success: %s (%s)\n",
            c->rank, done, (long long)(clock_mono_ms() - t_last), e.msg, err_code_name(e.code));
    return 3; /* without MPI_Finalize: a peer is gone */
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--loop") == 0) {
        struct err e = {0};
        const char *impl = getenv("DDPB_TEST_MPI");
        mod = impl ? comm_factory_mpi_module(impl, &e) : NULL;
        return mod ? loop_until_failure() : (fprintf(stderr, "%s\n", e.msg), 1);
    }
    test_begin(argc, argv);
    const char *impl = getenv("DDPB_TEST_MPI");
    struct err e = {0};
    mod = impl ? comm_factory_mpi_module(impl, &e) : NULL;
    if (!mod) {
        fprintf(stderr, "cannot load the MPI module (DDPB_TEST_MPI=%s): %s\n",
                impl ? impl : "unset", e.msg);
        return 1;
    }
    /* the worker reports its env before MPI is initialised: env must work then too */
    json_t *early = mod->env();
    const char *thr = json_string_value(json_object_get(early, "thread_level"));
    if (!thr || strcmp(thr, "not initialised") != 0) {
        fprintf(stderr, "env before MPI_Init: thread_level %s\n", thr ? thr : "missing");
        return 1;
    }
    json_decref(early);
    /* one setting each implementation reads, the other ignores (test_env checks them) */
    const struct comm_mpi_param params[] = {{"btl", "self,vader,tcp"},
                                            {"MPIR_CVAR_DEBUG_HOLD", "0"}};
    struct comm_mpi_config cfg = {.timeout_ms = 60000, .params = params, .n_params = 2};
    world = mod->create(&cfg, &e);
    if (!world) {
        fprintf(stderr, "mpi world: %s\n", e.msg);
        return 1;
    }
    me = world->rank;
    n = world->world_size;
    if (n != 2) {
        fprintf(stderr, "run me with 2 ranks, not %d\n", n);
        return 1;
    }
    if (me != 0 && !freopen("/dev/null", "w", stdout)) /* one summary line per run */
        return 1;
    TEST_RUN(test_allreduce);
    TEST_RUN(test_allreduce_async);
    TEST_RUN(test_reduce_scatter);
    TEST_RUN(test_all_gather);
    TEST_RUN(test_broadcast);
    TEST_RUN(test_barrier);
    TEST_RUN(test_send_recv);
    TEST_RUN(test_sendrecv);
    TEST_RUN(test_concurrent_comms);
    TEST_RUN(test_group_of_one);
    TEST_RUN(test_refusals);
    TEST_RUN(test_timeout);
    TEST_RUN(test_factory);
    TEST_RUN(test_env);
    comm_destroy(world); /* the last communicator: MPI_Finalize */
    return test_end();
}
