/* Unit tests for worker/comm (comm.c, comm_async.c, tcp*.c): ranks run as threads of
 * this process (or as forked processes where a signal must hit one rank) and build their
 * mesh with comm_tcp_listen/comm_tcp_connect (no store).
 *
 * Correctness: every operation and algorithm, world sizes 1 to 5 (the hierarchical
 * allreduce also on emulated node maps: 2 nodes x 2 ranks, 3+1+2, one node, every rank
 * its own node, nodes whose ranks interleave), every dtype and
 * reduction, in place and out of place, odd and prime counts, buffers misaligned by 0..7
 * bytes, counts larger than a segment (streamed reductions with partial elements), all
 * checked element by element against a naive reference computed from every rank's
 * inputs. Asynchronous operations: queued ops complete in order with correct results
 * while the caller computes, and a synchronous call queues behind them.
 * Failures: a peer that drops its connections or is killed mid-operation (named, fast),
 * a silent or SIGSTOPped peer (timeout naming it, not a hang), the abort flag, bad
 * arguments, garbage and silent clients on the peer port, a wrong run secret, a rank
 * that joins late (in time, and never). */
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/net.h"
#include "tests/unit/test.h"
#include "worker/comm/comm.h"
#include "worker/comm/reduce.h"
#include "worker/comm/tcp.h"

#define MAX_WORLD 6

struct mesh {
    int n;
    struct comm *c[MAX_WORLD];
    struct err e[MAX_WORLD];
};

struct setup_arg {
    struct comm_tcp *t;
    const char *const *addrs;
    struct comm **out;
    struct err *e;
    int delay_ms; /* a rank that joins late */
};

static void *setup_thread(void *p)
{
    struct setup_arg *a = p;
    if (a->delay_ms)
        usleep((useconds_t)a->delay_ms * 1000);
    *a->out = comm_tcp_connect(a->t, a->addrs, a->e);
    return NULL;
}

/* transport "tcp" unless a shared-memory test says otherwise: the TCP cases test TCP. */
static struct comm_tcp_config mesh_config(int rank, int n, int timeout_ms,
                                          const atomic_bool *abort_flag, const char *secret)
{
    return (struct comm_tcp_config){.rank = rank,
                                    .world_size = n,
                                    .listen_host = "127.0.0.1",
                                    .timeout_ms = timeout_ms,
                                    .abort_flag = abort_flag,
                                    .algorithm = "auto",
                                    .secret = secret,
                                    .transport = "tcp"};
}

/* Listens all ranks (transport: NULL = "tcp"). */
static int mesh_listen_over(struct comm_tcp **t, char addrs[][64], int n, int timeout_ms,
                            const atomic_bool *abort_flag, const char *const *secrets,
                            const char *transport)
{
    struct err e;
    for (int r = 0; r < n; r++) {
        struct comm_tcp_config cfg = mesh_config(r, n, timeout_ms, abort_flag,
                                                 secrets ? secrets[r] : "s3cret");
        if (transport)
            cfg.transport = transport;
        t[r] = comm_tcp_listen(&cfg, &e);
        if (!t[r])
            return -1;
        snprintf(addrs[r], 64, "%s", comm_tcp_address(t[r]));
    }
    return 0;
}

static int mesh_listen(struct comm_tcp **t, char addrs[][64], int n, int timeout_ms,
                       const atomic_bool *abort_flag, const char *const *secrets)
{
    return mesh_listen_over(t, addrs, n, timeout_ms, abort_flag, secrets, NULL);
}

/* Connects every rank from its own thread; rank `late` starts late_ms after the others. */
static void mesh_connect_late(struct mesh *m, struct comm_tcp **t, char addrs[][64], int late,
                              int late_ms)
{
    const char *ap[MAX_WORLD];
    pthread_t th[MAX_WORLD];
    struct setup_arg args[MAX_WORLD];
    for (int r = 0; r < m->n; r++)
        ap[r] = addrs[r];
    for (int r = 0; r < m->n; r++) {
        args[r] = (struct setup_arg){t[r], ap, &m->c[r], &m->e[r], r == late ? late_ms : 0};
        pthread_create(&th[r], NULL, setup_thread, &args[r]);
    }
    for (int r = 0; r < m->n; r++)
        pthread_join(th[r], NULL);
}

static void mesh_connect(struct mesh *m, struct comm_tcp **t, char addrs[][64])
{
    mesh_connect_late(m, t, addrs, -1, 0);
}

/* How a mesh is built beyond its size: the shared-memory tests set the transport (NULL:
 * "tcp"), the slot size and the spin budget. */
struct mesh_opts {
    int ring_chunk;     /* as in the config */
    const int *node_of; /* NULL: one node (comm_tcp_set_nodes) */
    const char *transport;
    size_t shm_slot;
    int spin_us;
};

/* Returns 0 when every rank built its communicator. */
static int mesh_build_opts(struct mesh *m, int n, int timeout_ms, const atomic_bool *abort_flag,
                           const struct mesh_opts *o)
{
    struct comm_tcp *t[MAX_WORLD];
    char addrs[MAX_WORLD][64];
    memset(m, 0, sizeof *m);
    m->n = n;
    struct err e;
    for (int r = 0; r < n; r++) {
        struct comm_tcp_config cfg = mesh_config(r, n, timeout_ms, abort_flag, "s3cret");
        cfg.ring_chunk_bytes = o->ring_chunk;
        if (o->transport)
            cfg.transport = o->transport;
        cfg.shm_slot_bytes = o->shm_slot;
        cfg.spin_us = o->spin_us;
        t[r] = comm_tcp_listen(&cfg, &e);
        if (!t[r])
            return -1;
        if (o->node_of && comm_tcp_set_nodes(t[r], o->node_of, &e) < 0)
            return -1;
        snprintf(addrs[r], 64, "%s", comm_tcp_address(t[r]));
    }
    mesh_connect(m, t, addrs);
    for (int r = 0; r < n; r++)
        if (!m->c[r])
            return -1;
    return 0;
}

static int mesh_build_nodes(struct mesh *m, int n, int timeout_ms,
                            const atomic_bool *abort_flag, int ring_chunk, const int *node_of)
{
    const struct mesh_opts o = {.ring_chunk = ring_chunk, .node_of = node_of};
    return mesh_build_opts(m, n, timeout_ms, abort_flag, &o);
}

static int mesh_build(struct mesh *m, int n, int timeout_ms, const atomic_bool *abort_flag)
{
    return mesh_build_nodes(m, n, timeout_ms, abort_flag, 0, NULL);
}

static void mesh_destroy(struct mesh *m)
{
    for (int r = 0; r < m->n; r++)
        comm_destroy(m->c[r]);
    memset(m, 0, sizeof *m);
}

/* Runs fn(rank's comm, arg) on a thread per rank and joins them. */
static void mesh_run(struct mesh *m, void *(*fn)(void *), void *args, size_t arg_size)
{
    pthread_t th[MAX_WORLD];
    for (int r = 0; r < m->n; r++)
        pthread_create(&th[r], NULL, fn, (char *)args + (size_t)r * arg_size);
    for (int r = 0; r < m->n; r++)
        pthread_join(th[r], NULL);
}

/* ---- reference -------------------------------------------------------------------- */

/* One operation as every rank runs it. */
struct op_case {
    enum comm_op op;
    enum comm_algorithm alg;
    enum comm_dtype dtype;
    enum comm_redop redop;
    bool inplace;
    size_t count;    /* elements per rank (see struct comm_args) */
    size_t misalign; /* bytes added to every buffer pointer */
    int root;        /* broadcast */
};

static bool case_minmax(const struct op_case *k)
{
    return k->redop == COMM_MIN || k->redop == COMM_MAX;
}

/* Input element i of rank: small integers, exact in every dtype; for min and max distinct
 * across ranks and varied across indices, so the result comes from one known rank. */
static double case_input(const struct op_case *k, int world, int rank, size_t i)
{
    if (case_minmax(k))
        return (double)((i % 11) * (size_t)world + (i + (size_t)rank) % (size_t)world) - 20;
    return (double)((int)((i * 7 + (size_t)rank * 13) % 17) - 8);
}

/* The reduction of element j over ranks 0..world-1, as the dtype stores it. */
static double case_reduced(const struct op_case *k, int world, size_t j)
{
    double acc = case_input(k, world, 0, j);
    for (int r = 1; r < world; r++) {
        double v = case_input(k, world, r, j);
        acc = k->redop == COMM_MIN   ? (v < acc ? v : acc)
              : k->redop == COMM_MAX ? (v > acc ? v : acc)
                                     : acc + v;
    }
    if (k->redop != COMM_AVG)
        return acc;
    if (k->dtype == COMM_INT32 || k->dtype == COMM_INT64)
        return (double)((int64_t)acc / world);
    uint8_t tmp[8];
    reduce_store(tmp, k->dtype, (double)((float)acc / (float)world));
    return reduce_load(tmp, k->dtype);
}

static double case_expected(const struct op_case *k, int world, int rank, size_t i)
{
    switch (k->op) {
    case COMM_OP_ALLREDUCE: return case_reduced(k, world, i);
    case COMM_OP_REDUCE_SCATTER: return case_reduced(k, world, (size_t)rank * k->count + i);
    case COMM_OP_ALL_GATHER: return case_input(k, world, (int)(i / k->count), i % k->count);
    case COMM_OP_BROADCAST: return case_input(k, world, k->root, i);
    default: return case_input(k, world, (rank + world - 1) % world, i);
    }
}

/* Buffers of one case, misaligned as asked; send and recv as NCCL lays out in place. */
struct case_bufs {
    uint8_t *a, *b; /* owned allocations */
    struct comm_args args;
    size_t in_n, out_n; /* elements of input and output */
};

static void case_setup(const struct op_case *k, const struct comm *c, struct case_bufs *cb)
{
    int n = c->world_size, r = c->rank;
    size_t es = comm_dtype_size(k->dtype), W = (size_t)n;
    cb->in_n = k->op == COMM_OP_REDUCE_SCATTER ? k->count * W : k->count;
    cb->out_n = k->op == COMM_OP_ALL_GATHER ? k->count * W : k->count;
    size_t big = (cb->in_n > cb->out_n ? cb->in_n : cb->out_n) * es + 16;
    cb->a = malloc(big);
    cb->b = malloc(big);
    uint8_t *send = cb->a + k->misalign, *recv = cb->b + k->misalign;
    if (k->inplace) {
        send = recv;
        if (k->op == COMM_OP_REDUCE_SCATTER) {
            send = cb->a + k->misalign;
            recv = send + (size_t)r * k->count * es;
        } else if (k->op == COMM_OP_ALL_GATHER) {
            send = recv + (size_t)r * k->count * es;
        }
    }
    memset(cb->b, 0x5a, big);
    for (size_t i = 0; i < cb->in_n; i++)
        reduce_store(send + i * es, k->dtype, case_input(k, n, r, i));
    cb->args = (struct comm_args){.op = k->op,
                                  .send = send,
                                  .recv = recv,
                                  .count = k->count,
                                  .dtype = k->dtype,
                                  .redop = k->redop,
                                  .algorithm = k->alg,
                                  .peer = k->root,
                                  .count2 = k->count};
    if (k->op == COMM_OP_SENDRECV) {
        cb->args.peer = (r + 1) % n;
        cb->args.peer2 = (r + n - 1) % n;
    }
}

/* Elements of the output that differ from the reference; the first one goes to why. */
static int case_check(const struct op_case *k, const struct comm *c, const struct case_bufs *cb,
                      char *why, size_t whylen)
{
    size_t es = comm_dtype_size(k->dtype);
    int bad = 0;
    for (size_t i = 0; i < cb->out_n; i++) {
        double got = reduce_load((const uint8_t *)cb->args.recv + i * es, k->dtype);
        double want = case_expected(k, c->world_size, c->rank, i);
        if (got != want && !bad++)
            snprintf(why, whylen,
                     "%s/%s %s %s%s count %zu off %zu: rank %d element %zu is "
                     "%g, want %g",
                     comm_op_name(k->op), comm_algorithm_name(k->alg),
                     comm_dtype_name(k->dtype), comm_redop_name(k->redop),
                     k->inplace ? " in place" : "", k->count, k->misalign, c->rank, i, got,
                     want);
    }
    return bad;
}

/* Every rank runs the same list of cases in the same order and checks its results. */
struct case_job {
    struct comm *c;
    const struct op_case *cases;
    int ncases;
    int failures;
    char why[512];
};

static void *case_job_run(void *p)
{
    struct case_job *j = p;
    for (int i = 0; i < j->ncases; i++) {
        const struct op_case *k = &j->cases[i];
        struct case_bufs cb;
        struct err e;
        case_setup(k, j->c, &cb);
        int rc = comm_run(j->c, &cb.args, &e);
        if (rc < 0 && !j->failures++)
            snprintf(j->why, sizeof j->why, "%s/%s count %zu: rank %d: %s", comm_op_name(k->op),
                     comm_algorithm_name(k->alg), k->count, j->c->rank, e.msg);
        else if (rc == 0 && case_check(k, j->c, &cb, j->failures ? NULL : j->why,
                                       j->failures ? 0 : sizeof j->why))
            j->failures++;
        free(cb.a);
        free(cb.b);
        if (rc < 0)
            break; /* the streams are out of step now */
    }
    return NULL;
}

/* Runs cases on every rank of m; returns the failures, the first one described in why. */
static int run_cases_on(struct mesh *m, const struct op_case *cases, int ncases, char *why,
                        size_t whylen)
{
    struct case_job jobs[MAX_WORLD];
    for (int r = 0; r < m->n; r++)
        jobs[r] = (struct case_job){.c = m->c[r], .cases = cases, .ncases = ncases};
    mesh_run(m, case_job_run, jobs, sizeof jobs[0]);
    int failures = 0;
    for (int r = 0; r < m->n; r++) {
        if (jobs[r].failures && !failures)
            snprintf(why, whylen, "%s", jobs[r].why);
        failures += jobs[r].failures;
    }
    return failures;
}

static void test_comm_dtype_names(void)
{
    enum comm_dtype d;
    enum comm_redop op;
    T_EQ_INT(comm_dtype_parse("float32", &d), 0);
    T_EQ_INT(d, COMM_FLOAT32);
    T_EQ_INT(comm_dtype_size(COMM_FLOAT32), 4);
    T_EQ_INT(comm_dtype_parse("bfloat16", &d), 0);
    T_EQ_INT(d, COMM_BFLOAT16);
    T_EQ_INT(comm_dtype_size(d), 2);
    T_EQ_INT(comm_dtype_size(COMM_INT64), 8);
    T_EQ_STR(comm_dtype_name(COMM_INT32), "int32");
    T_CHECK(comm_dtype_parse("float33", &d) < 0);
    T_CHECK(comm_dtype_parse("", &d) < 0);
    T_EQ_INT(comm_redop_parse("max", &op), 0);
    T_EQ_INT(op, COMM_MAX);
    T_EQ_STR(comm_redop_name(COMM_SUM), "sum");
    T_CHECK(comm_redop_parse("prod", &op) < 0);
    T_EQ_STR(comm_dtype_name((enum comm_dtype)99), "unknown");
    T_EQ_INT(comm_dtype_size((enum comm_dtype)99), 0);
    enum comm_op o;
    enum comm_algorithm a;
    T_EQ_INT(comm_op_parse("reduce_scatter", &o), 0);
    T_EQ_INT(o, COMM_OP_REDUCE_SCATTER);
    T_EQ_STR(comm_op_name(COMM_OP_SENDRECV), "sendrecv");
    T_CHECK(comm_op_parse("allgather", &o) < 0);
    T_EQ_INT(comm_algorithm_parse("rd", &a), 0);
    T_EQ_INT(a, COMM_ALG_RD);
    T_EQ_STR(comm_algorithm_name(COMM_ALG_TREE), "tree");
    T_CHECK(comm_algorithm_parse("bruck", &a) < 0);
}

/* ---- correctness ------------------------------------------------------------------- */

static const size_t small_counts[] = {1, 2, 3, 7, 31, 1009};

static int add_case(struct op_case *out, int n, int max, struct op_case k)
{
    if (n < max)
        out[n] = k;
    return n + 1;
}

/* Every reducing op x algorithm (auto included) x dtype x operator, rotating through
 * counts, in place or not, and misalignments. */
static int reducing_cases(struct op_case *out, int max)
{
    static const enum comm_algorithm ar[] = {COMM_ALG_RING, COMM_ALG_RD, COMM_ALG_AUTO,
                                             COMM_ALG_HD, COMM_ALG_HIER};
    static const enum comm_algorithm rs[] = {COMM_ALG_RING, COMM_ALG_DIRECT, COMM_ALG_AUTO};
    int n = 0, i = 0;
    for (int o = 0; o < 2; o++)
        for (int a = 0; a < (o ? 3 : 5); a++)
            for (int t = COMM_FLOAT32; t <= COMM_INT64; t++)
                for (int op = COMM_SUM; op <= COMM_MAX; op++, i++)
                    n = add_case(
                        out, n, max,
                        (struct op_case){.op = o ? COMM_OP_REDUCE_SCATTER : COMM_OP_ALLREDUCE,
                                         .alg = o ? rs[a] : ar[a],
                                         .dtype = (enum comm_dtype)t,
                                         .redop = (enum comm_redop)op,
                                         .inplace = i % 2,
                                         .count = small_counts[i % 6],
                                         .misalign = (size_t)(i * 3) % 8});
    return n;
}

/* all_gather, broadcast from every root, sendrecv. */
static int moving_cases(struct op_case *out, int max, int world)
{
    static const enum comm_algorithm ag[] = {COMM_ALG_RING, COMM_ALG_DIRECT, COMM_ALG_AUTO};
    static const enum comm_algorithm bc[] = {COMM_ALG_RING, COMM_ALG_TREE, COMM_ALG_AUTO};
    int n = 0, i = 0;
    for (int a = 0; a < 3; a++)
        for (int t = COMM_FLOAT32; t <= COMM_INT64; t++, i++)
            n = add_case(out, n, max,
                         (struct op_case){.op = COMM_OP_ALL_GATHER,
                                          .alg = ag[a],
                                          .dtype = (enum comm_dtype)t,
                                          .inplace = i % 2,
                                          .count = small_counts[i % 6],
                                          .misalign = (size_t)i % 8});
    for (int a = 0; a < 3; a++)
        for (int root = 0; root < world; root++, i++)
            n = add_case(out, n, max,
                         (struct op_case){.op = COMM_OP_BROADCAST,
                                          .alg = bc[a],
                                          .dtype = (enum comm_dtype)(i % 5),
                                          .inplace = i % 2,
                                          .count = small_counts[i % 6],
                                          .misalign = (size_t)i % 8,
                                          .root = root});
    for (int t = COMM_FLOAT32; t <= COMM_INT64; t++, i++)
        n = add_case(out, n, max,
                     (struct op_case){.op = COMM_OP_SENDRECV,
                                      .dtype = (enum comm_dtype)t,
                                      .count = small_counts[i % 6],
                                      .inplace = t % 2,
                                      .misalign = (size_t)i % 8});
    return n;
}

/* Larger than a receive segment, odd counts and misaligned: streamed reductions carry
 * partial elements between segments; sendrecv crosses exchanges larger than socket
 * buffers. */
static int large_cases(struct op_case *out, int max, int world)
{
    const struct op_case big[] = {
        {COMM_OP_ALLREDUCE, COMM_ALG_RING, COMM_FLOAT32, COMM_SUM, false, 300007, 3, 0},
        {COMM_OP_ALLREDUCE, COMM_ALG_RING, COMM_FLOAT32, COMM_SUM, true, 300007, 0, 0},
        {COMM_OP_ALLREDUCE, COMM_ALG_RING, COMM_FLOAT16, COMM_AVG, false, 200003, 1, 0},
        {COMM_OP_ALLREDUCE, COMM_ALG_RING, COMM_INT64, COMM_MAX, true, 70001, 5, 0},
        {COMM_OP_ALLREDUCE, COMM_ALG_RD, COMM_BFLOAT16, COMM_SUM, false, 100003, 7, 0},
        {COMM_OP_ALLREDUCE, COMM_ALG_HD, COMM_FLOAT32, COMM_AVG, true, 300007, 2, 0},
        {COMM_OP_ALLREDUCE, COMM_ALG_HD, COMM_INT32, COMM_MIN, false, 3, 1, 0},
        {COMM_OP_REDUCE_SCATTER, COMM_ALG_RING, COMM_FLOAT32, COMM_SUM, true, 100003, 2, 0},
        {COMM_OP_REDUCE_SCATTER, COMM_ALG_RING, COMM_BFLOAT16, COMM_MIN, false, 50021, 1, 0},
        {COMM_OP_ALL_GATHER, COMM_ALG_RING, COMM_INT32, COMM_SUM, false, 100003, 7, 0},
        {COMM_OP_ALL_GATHER, COMM_ALG_RING, COMM_FLOAT16, COMM_SUM, true, 90001, 0, 0},
        {COMM_OP_BROADCAST, COMM_ALG_RING, COMM_FLOAT32, COMM_SUM, false, 300007, 1, world - 1},
        {COMM_OP_BROADCAST, COMM_ALG_TREE, COMM_INT64, COMM_SUM, true, 100003, 0, 0},
        {COMM_OP_SENDRECV, COMM_ALG_AUTO, COMM_FLOAT32, COMM_SUM, false, 1000003, 4, 0},
        {COMM_OP_SENDRECV, COMM_ALG_DIRECT, COMM_INT64, COMM_SUM, true, 500009, 3, 0},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
        n = add_case(out, n, max, big[i]);
    return n;
}

static void check_world_cases(int (*build)(struct op_case *, int, int))
{
    struct op_case cases[256];
    for (int n = 1; n <= 5; n++) {
        struct mesh m;
        T_CHECK_MSG(mesh_build(&m, n, 20000, NULL) == 0, "world %d: setup failed", n);
        int nc = build(cases, 256, n);
        char why[512] = "";
        int failures = nc <= 256 ? run_cases_on(&m, cases, nc, why, sizeof why) : -1;
        mesh_destroy(&m);
        T_CHECK_MSG(failures == 0, "world %d: %d failures: %s", n, failures, why);
    }
}

static int reducing_cases_w(struct op_case *out, int max, int world)
{
    (void)world;
    return reducing_cases(out, max);
}

static void test_comm_reducing_ops_exact(void)
{
    check_world_cases(reducing_cases_w);
}

/* The ring allreduce in many small blocks (chunks of 1000 bytes): blocks of uneven
 * lengths, the last one short, elements split across blocks never. */
static void test_comm_ring_blocks_exact(void)
{
    struct op_case cases[] = {
        {COMM_OP_ALLREDUCE, COMM_ALG_RING, COMM_FLOAT32, COMM_SUM, false, 100003, 1, 0},
        {COMM_OP_ALLREDUCE, COMM_ALG_RING, COMM_INT64, COMM_AVG, true, 20011, 0, 0},
        {COMM_OP_ALLREDUCE, COMM_ALG_RING, COMM_BFLOAT16, COMM_MAX, false, 77777, 3, 0},
        {COMM_OP_ALLREDUCE, COMM_ALG_RING, COMM_FLOAT16, COMM_AVG, true, 5, 1, 0},
    };
    for (int n = 2; n <= 5; n++) {
        struct mesh m;
        T_CHECK_MSG(mesh_build_nodes(&m, n, 20000, NULL, 1000, NULL) == 0, "world %d", n);
        char why[512] = "";
        int failures = run_cases_on(&m, cases, 4, why, sizeof why);
        mesh_destroy(&m);
        T_CHECK_MSG(failures == 0, "world %d: %s", n, why);
    }
}
static void test_comm_moving_ops_exact(void)
{
    check_world_cases(moving_cases);
}
static void test_comm_large_ops_exact(void)
{
    check_world_cases(large_cases);
}

/* The hierarchical allreduce on emulated node maps: every dtype and operator, counts from
 * 0 to several MiB (odd ones, larger than a segment and than a ring block, so the
 * leaders' ring, rd and hd and the intra-node chain and broadcast all stream), in place
 * and not, misaligned; every element checked against the reference. */
static int hier_cases(struct op_case *out, int max)
{
    static const size_t counts[] = {0, 1, 2, 3, 7, 31, 1009, 20011};
    int n = 0, i = 0;
    for (int t = COMM_FLOAT32; t <= COMM_INT64; t++)
        for (int op = COMM_SUM; op <= COMM_MAX; op++, i++)
            n = add_case(out, n, max,
                         (struct op_case){.op = COMM_OP_ALLREDUCE,
                                          .alg = COMM_ALG_HIER,
                                          .dtype = (enum comm_dtype)t,
                                          .redop = (enum comm_redop)op,
                                          .inplace = i % 2,
                                          .count = counts[i % 8],
                                          .misalign = (size_t)(i * 3) % 8});
    const struct op_case big[] = {
        {COMM_OP_ALLREDUCE, COMM_ALG_HIER, COMM_FLOAT32, COMM_SUM, false, 786433, 3, 0},
        {COMM_OP_ALLREDUCE, COMM_ALG_HIER, COMM_FLOAT32, COMM_AVG, true, 300007, 0, 0},
        {COMM_OP_ALLREDUCE, COMM_ALG_HIER, COMM_BFLOAT16, COMM_SUM, true, 1048579, 1, 0},
        {COMM_OP_ALLREDUCE, COMM_ALG_HIER, COMM_INT64, COMM_MAX, false, 400009, 5, 0},
        {COMM_OP_ALLREDUCE, COMM_ALG_HIER, COMM_FLOAT16, COMM_AVG, false, 70001, 7, 0},
    };
    for (size_t k = 0; k < sizeof big / sizeof big[0]; k++)
        n = add_case(out, n, max, big[k]);
    return n;
}

static void test_comm_hier_node_maps_exact(void)
{
    static const struct {
        int n;
        int node_of[MAX_WORLD];
        const char *what;
    } maps[] = {
        {4, {0, 0, 1, 1}, "2 nodes x 2 ranks"},
        {6, {0, 0, 0, 1, 2, 2}, "3 nodes of 3, 1 and 2 ranks"},
        {5, {0, 0, 0, 0, 0}, "one node"},
        {5, {0, 1, 2, 3, 4}, "every rank its own node (5)"},
        {4, {3, 2, 1, 0}, "every rank its own node (4)"},
        {4, {1, 0, 1, 0}, "2 nodes with interleaved ranks"},
    };
    struct op_case cases[64];
    int nc = hier_cases(cases, 64);
    T_CHECK(nc <= 64);
    for (size_t k = 0; k < sizeof maps / sizeof maps[0]; k++) {
        struct mesh m;
        T_CHECK_MSG(mesh_build_nodes(&m, maps[k].n, 20000, NULL, 0, maps[k].node_of) == 0,
                    "%s: setup failed", maps[k].what);
        char why[512] = "";
        int failures = run_cases_on(&m, cases, nc <= 64 ? nc : 64, why, sizeof why);
        bool named = true;
        for (int r = 0; r < m.n; r++)
            named = named && strcmp(m.c[r]->last_algorithm, "hier") == 0;
        mesh_destroy(&m);
        T_CHECK_MSG(failures == 0, "%s: %d failures: %s", maps[k].what, failures, why);
        T_CHECK_MSG(named, "%s: the last operation is not recorded as hier", maps[k].what);
    }
}

/* auto takes hier for an allreduce of 64 KiB or more when ranks share nodes and there is
 * more than one node (measured over netlab's 1 GbE: tcp_algo.c); otherwise the choice by
 * size stands. Every rank must pick alike: each one's recorded algorithm is checked. */
static void test_comm_auto_takes_hier_across_nodes(void)
{
    static const struct {
        int node_of[MAX_WORLD];
        size_t count;
        const char *want, *what;
    } cases[] = {
        {{0, 0, 1, 1}, 65536 / 4, "hier", "2 nodes x 2 ranks, 64 KiB"},
        {{0, 0, 1, 1}, 1 << 20, "hier", "2 nodes x 2 ranks, 4 MiB"},
        {{0, 0, 1, 1}, 1024 / 4, "rd", "2 nodes x 2 ranks, 1 KiB"},
        {{0, 1, 2, 3}, 1 << 20, "hd", "every rank its own node"},
        {{0, 0, 0, 0}, 1 << 20, "hd", "one node"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct mesh m;
        T_CHECK_MSG(mesh_build_nodes(&m, 4, 20000, NULL, 0, cases[k].node_of) == 0,
                    "%s: setup failed", cases[k].what);
        struct op_case c = {COMM_OP_ALLREDUCE,
                            COMM_ALG_AUTO,
                            COMM_FLOAT32,
                            COMM_SUM,
                            false,
                            cases[k].count,
                            0,
                            0};
        char why[512] = "";
        int failures = run_cases_on(&m, &c, 1, why, sizeof why);
        bool alike = true;
        for (int r = 0; r < m.n; r++)
            alike = alike && strcmp(m.c[r]->last_algorithm, cases[k].want) == 0;
        char got[16];
        snprintf(got, sizeof got, "%s", m.c[0]->last_algorithm);
        mesh_destroy(&m);
        T_CHECK_MSG(failures == 0, "%s: %s", cases[k].what, why);
        T_CHECK_MSG(alike, "%s: auto ran %s, want %s on every rank", cases[k].what, got,
                    cases[k].want);
    }
}

/* A node map with a negative node is refused naming the rank. */
static void test_comm_hier_bad_map(void)
{
    struct err e;
    struct comm_tcp_config cfg = mesh_config(0, 3, 1000, NULL, "s");
    struct comm_tcp *t = comm_tcp_listen(&cfg, &e);
    T_CHECK(t != NULL);
    const int bad[3] = {0, -1, 0};
    T_CHECK(comm_tcp_set_nodes(t, bad, &e) < 0);
    T_EQ_INT(e.code, ERR_INVALID);
    T_CHECK_MSG(strstr(e.msg, "rank 1") != NULL, "%s", e.msg);
    comm_tcp_discard(t);
}

/* The algorithm used is recorded per operation, and auto picks by size. */
static void *algo_names_job(void *p)
{
    struct case_job *j = p;
    struct err e;
    float *buf = calloc(1 << 20, sizeof *buf);
    j->failures = comm_allreduce(j->c, buf, buf, 2, COMM_FLOAT32, COMM_SUM, &e) != 0 ||
                  strcmp(j->c->last_algorithm, "rd") != 0;
    j->failures += comm_allreduce(j->c, buf, buf, 1 << 20, COMM_FLOAT32, COMM_SUM, &e) != 0 ||
                   strcmp(j->c->last_algorithm, "ring") != 0;
    j->failures += comm_broadcast(j->c, buf, buf, 2, COMM_FLOAT32, 1, &e) != 0 ||
                   strcmp(j->c->last_algorithm, "tree") != 0;
    j->failures += comm_all_gather(j->c, buf, buf + 8, 2, COMM_FLOAT32, &e) != 0 ||
                   strcmp(j->c->last_algorithm, "direct") != 0;
    j->failures += comm_barrier(j->c, &e) != 0 || strcmp(j->c->last_algorithm, "rd") != 0;
    free(buf);
    return NULL;
}

static void test_comm_algorithm_recorded(void)
{
    struct mesh m;
    T_CHECK(mesh_build(&m, 3, 20000, NULL) == 0);
    struct case_job jobs[3];
    for (int r = 0; r < 3; r++)
        jobs[r] = (struct case_job){.c = m.c[r]};
    mesh_run(&m, algo_names_job, jobs, sizeof jobs[0]);
    mesh_destroy(&m);
    for (int r = 0; r < 3; r++)
        T_EQ_INT(jobs[r].failures, 0);
}

/* Ring traffic per rank: every chunk but chunk r+1 in reduce-scatter, every chunk but
 * chunk r+2 in all-gather. */
static void *bytes_job(void *p)
{
    struct case_job *j = p;
    struct err e;
    float buf[10] = {0};
    struct comm_args a = {.op = COMM_OP_ALLREDUCE,
                          .send = buf,
                          .recv = buf,
                          .count = 10,
                          .dtype = COMM_FLOAT32,
                          .algorithm = COMM_ALG_RING};
    j->failures = comm_run(j->c, &a, &e) != 0;
    return NULL;
}

static void test_comm_tcp_bytes_sent(void)
{
    struct mesh m;
    int n = 3;
    T_CHECK(mesh_build(&m, n, 20000, NULL) == 0);
    struct case_job jobs[3];
    for (int r = 0; r < n; r++)
        jobs[r] = (struct case_job){.c = m.c[r]};
    mesh_run(&m, bytes_job, jobs, sizeof jobs[0]);
    uint64_t sent[3];
    for (int r = 0; r < n; r++)
        sent[r] = m.c[r]->bytes_sent;
    mesh_destroy(&m);
    /* chunks of 10 over 3 ranks: 4, 3, 3 elements */
    size_t len[3] = {4, 3, 3};
    for (int r = 0; r < n; r++) {
        T_EQ_INT(jobs[r].failures, 0);
        T_EQ_INT(sent[r], ((10 - len[(r + 1) % 3]) + (10 - len[(r + 2) % 3])) * 4);
    }
}

struct barrier_arg {
    struct comm *c;
    int rc[5];
};

static void *barrier_job(void *p)
{
    struct barrier_arg *a = p;
    struct err e;
    for (int i = 0; i < 5; i++)
        a->rc[i] = comm_barrier(a->c, &e);
    return NULL;
}

static void test_comm_tcp_barrier(void)
{
    for (int n = 1; n <= 5; n++) {
        struct mesh m;
        T_CHECK(mesh_build(&m, n, 20000, NULL) == 0);
        struct barrier_arg a[5];
        for (int r = 0; r < n; r++)
            a[r] = (struct barrier_arg){.c = m.c[r]};
        mesh_run(&m, barrier_job, a, sizeof a[0]);
        int bad = 0;
        for (int r = 0; r < n; r++)
            for (int i = 0; i < 5; i++)
                bad += a[r].rc[i] != 0;
        mesh_destroy(&m);
        T_EQ_INT(bad, 0);
    }
}

/* Pairs (0,1), (2,3): the even rank sends then receives, the odd one the reverse;
 * three messages in a row arrive in order; a length mismatch is a protocol error. */
struct p2p_job {
    struct comm *c;
    int bad;
    struct err e;
};

static void *p2p_job_run(void *p)
{
    struct p2p_job *j = p;
    int r = j->c->rank, peer = r ^ 1;
    size_t sizes[3] = {1 << 20, 3, 100003};
    int32_t *buf = malloc((1 << 20) * sizeof *buf);
    for (int k = 0; k < 3 && !j->bad; k++) {
        for (int phase = 0; phase < 2 && !j->bad; phase++) {
            bool sending = (phase == 0) == (r % 2 == 0);
            int rc;
            if (sending) {
                for (size_t i = 0; i < sizes[k]; i++)
                    buf[i] = (int32_t)(i * 31 + (size_t)r + (size_t)k);
                rc = comm_send(j->c, buf, sizes[k], COMM_INT32, peer, &j->e);
            } else {
                rc = comm_recv(j->c, buf, sizes[k], COMM_INT32, peer, &j->e);
                for (size_t i = 0; rc == 0 && i < sizes[k]; i++)
                    rc = buf[i] == (int32_t)(i * 31 + (size_t)peer + (size_t)k) ? 0 : 1;
            }
            j->bad = rc != 0;
        }
    }
    /* rank 1 sends 5 elements, rank 0 expects 4 */
    if (!j->bad && r == 1)
        j->bad = comm_send(j->c, buf, 5, COMM_INT32, 0, &j->e) != 0;
    else if (!j->bad && r == 0)
        j->bad = comm_recv(j->c, buf, 4, COMM_INT32, 1, &j->e) == 0 ||
                 j->e.code != ERR_PROTOCOL ||
                 !strstr(j->e.msg, "rank 1 sent a 20-byte message");
    free(buf);
    return NULL;
}

static void check_send_recv_ordered(const char *transport)
{
    struct mesh m;
    const struct mesh_opts o = {.transport = transport};
    T_CHECK(mesh_build_opts(&m, 4, 20000, NULL, &o) == 0);
    struct p2p_job jobs[4];
    for (int r = 0; r < 4; r++)
        jobs[r] = (struct p2p_job){.c = m.c[r]};
    mesh_run(&m, p2p_job_run, jobs, sizeof jobs[0]);
    mesh_destroy(&m);
    for (int r = 0; r < 4; r++)
        T_CHECK_MSG(!jobs[r].bad, "%s: rank %d: %s", transport, r, jobs[r].e.msg);
}

static void test_comm_send_recv_ordered(void)
{
    check_send_recv_ordered("tcp");
}

static void test_comm_bad_arguments(void)
{
    struct mesh m;
    struct err e;
    T_CHECK(mesh_build(&m, 1, 2000, NULL) == 0);
    struct comm *c = m.c[0];
    float f[16] = {0};
    T_CHECK(comm_allreduce(c, NULL, NULL, 4, COMM_FLOAT32, COMM_SUM, &e) < 0);
    T_EQ_STR(e.field, "send");
    T_CHECK(comm_allreduce(c, f, f + 1, 4, COMM_FLOAT32, COMM_SUM, &e) < 0);
    T_CHECK_MSG(strstr(e.msg, "overlap") != NULL, "%s", e.msg);
    T_CHECK(comm_allreduce(c, f, f, 4, (enum comm_dtype)9, COMM_SUM, &e) < 0);
    T_EQ_STR(e.field, "dtype");
    T_CHECK(comm_allreduce(c, f, f, 4, COMM_FLOAT32, (enum comm_redop)9, &e) < 0);
    T_EQ_STR(e.field, "redop");
    T_CHECK(comm_allreduce(c, f, f, SIZE_MAX / 2, COMM_FLOAT32, COMM_SUM, &e) < 0);
    T_EQ_STR(e.field, "count");
    T_CHECK(comm_broadcast(c, f, f, 4, COMM_FLOAT32, 1, &e) < 0);
    T_EQ_STR(e.field, "peer");
    T_CHECK(comm_send(c, f, 1, COMM_FLOAT32, 0, &e) < 0); /* to itself */
    T_EQ_STR(e.field, "peer");
    T_CHECK(comm_sendrecv(c, f, 2, 0, f + 8, 3, 0, COMM_FLOAT32, &e) < 0);
    T_EQ_STR(e.field, "count");
    T_OK(comm_sendrecv(c, f, 2, 0, f + 8, 2, 0, COMM_FLOAT32, &e)); /* to itself: a copy */
    /* in place as NCCL lays it out is fine; reduce_scatter's recv elsewhere in send is not */
    T_OK(comm_reduce_scatter(c, f, f, 4, COMM_FLOAT32, COMM_SUM, &e));
    T_OK(comm_all_gather(c, f, f, 4, COMM_FLOAT32, &e));
    struct comm_args a = {.op = COMM_OP_ALLREDUCE,
                          .send = f,
                          .recv = f,
                          .count = 4,
                          .dtype = COMM_FLOAT32,
                          .algorithm = COMM_ALG_TREE};
    mesh_destroy(&m);
    T_CHECK(mesh_build(&m, 2, 2000, NULL) == 0);
    T_CHECK(comm_run(m.c[0], &a, &e) < 0); /* checked before any byte moves */
    T_EQ_STR(e.field, "algorithm");
    T_CHECK_MSG(strstr(e.msg, "allreduce has no algorithm 'tree' (it has ring, rd, hd, hier)"),
                "%s", e.msg);
    a.op = COMM_OP_REDUCE_SCATTER;
    a.recv = f + 1; /* inside send but not rank 0's block */
    T_CHECK(comm_run(m.c[0], &a, &e) < 0);
    T_EQ_STR(e.field, "recv");
    T_CHECK(comm_start(m.c[0], &a, &e) == NULL); /* async checks the same */
    T_CHECK(m.c[0]->async == NULL);
    mesh_destroy(&m);

    struct comm_tcp_config cfg = mesh_config(0, 2, 1000, NULL, "s");
    cfg.algorithm = "spiral";
    T_CHECK(comm_tcp_listen(&cfg, &e) == NULL);
    T_EQ_STR(e.field, "algorithm");
    cfg = mesh_config(2, 2, 1000, NULL, "s");
    T_CHECK(comm_tcp_listen(&cfg, &e) == NULL);
    T_EQ_STR(e.field, "rank");
    cfg = mesh_config(0, 2, 0, NULL, "s");
    T_CHECK(comm_tcp_listen(&cfg, &e) == NULL);
    T_EQ_STR(e.field, "timeout_ms");
    cfg = mesh_config(0, 2, 1000, NULL, "s");
    cfg.listen_host = "no.such.host.invalid";
    T_CHECK(comm_tcp_listen(&cfg, &e) == NULL);
    /* a peer address that does not parse */
    cfg = mesh_config(0, 2, 1000, NULL, "s");
    struct comm_tcp *t = comm_tcp_listen(&cfg, &e);
    T_CHECK(t != NULL);
    const char *addrs[2] = {comm_tcp_address(t), "nonsense"};
    T_CHECK(comm_tcp_connect(t, addrs, &e) == NULL);
    T_EQ_INT(e.code, ERR_INVALID);
}

/* ---- asynchronous ------------------------------------------------------------------ */

#define ASYNC_OPS 6
#define ASYNC_COUNT (256u << 10)

struct async_job {
    struct comm *c;
    int bad;
    long compute_steps_pending; /* computation done while some op was still pending */
    bool order_ok;
    char why[256];
};

static float async_value(int op, int rank, size_t i)
{
    return (float)((int)((i * 3 + (size_t)rank * 5 + (size_t)op) % 13) - 6);
}

static void *async_job_run(void *p)
{
    struct async_job *j = p;
    struct err e;
    int n = j->c->world_size;
    float *buf[ASYNC_OPS];
    struct comm_handle *h[ASYNC_OPS];
    for (int k = 0; k < ASYNC_OPS; k++) {
        buf[k] = malloc(ASYNC_COUNT * sizeof(float));
        for (size_t i = 0; i < ASYNC_COUNT; i++)
            buf[k][i] = async_value(k, j->c->rank, i);
        h[k] = comm_iallreduce(j->c, buf[k], buf[k], ASYNC_COUNT, COMM_FLOAT32, COMM_SUM, &e);
        if (!h[k]) {
            snprintf(j->why, sizeof j->why, "start %d: %s", k, e.msg);
            j->bad++;
            return NULL;
        }
    }
    /* compute while the thread communicates: done ops must form a prefix of the queue */
    volatile double acc = 0;
    j->order_ok = true;
    int64_t deadline = clock_mono_ms() + 30000;
    while (!comm_test(h[ASYNC_OPS - 1]) && clock_mono_ms() < deadline) {
        for (int s = 0; s < 2000; s++)
            acc += s * 0.5;
        j->compute_steps_pending++;
        bool seen_pending = false;
        for (int k = 0; k < ASYNC_OPS; k++) {
            bool done = comm_test(h[k]);
            if (done && seen_pending)
                j->order_ok = false;
            seen_pending |= !done;
        }
    }
    /* a synchronous call queues behind whatever is pending */
    float one = 1;
    if (comm_allreduce(j->c, &one, &one, 1, COMM_FLOAT32, COMM_SUM, &e) != 0 ||
        one != (float)n) {
        snprintf(j->why, sizeof j->why, "sync after async: %s (%g)", e.msg, (double)one);
        j->bad++;
    }
    for (int k = 0; k < ASYNC_OPS; k++) {
        if (comm_wait(h[k], &e) != 0) {
            snprintf(j->why, sizeof j->why, "op %d: %s", k, e.msg);
            j->bad++;
        }
        for (size_t i = 0; i < ASYNC_COUNT && !j->bad; i++) {
            float want = 0;
            for (int r = 0; r < n; r++)
                want += async_value(k, r, i);
            if (buf[k][i] != want) {
                snprintf(j->why, sizeof j->why, "op %d element %zu: %g, want %g", k, i,
                         (double)buf[k][i], (double)want);
                j->bad++;
            }
        }
        free(buf[k]);
    }
    return NULL;
}

static void test_comm_async_overlap_in_order(void)
{
    struct mesh m;
    T_CHECK(mesh_build(&m, 3, 20000, NULL) == 0);
    struct async_job jobs[3];
    for (int r = 0; r < 3; r++)
        jobs[r] = (struct async_job){.c = m.c[r]};
    mesh_run(&m, async_job_run, jobs, sizeof jobs[0]);
    bool threads = m.c[0]->async && m.c[1]->async && m.c[2]->async;
    mesh_destroy(&m);
    T_CHECK(threads);
    for (int r = 0; r < 3; r++) {
        T_CHECK_MSG(!jobs[r].bad, "rank %d: %s", r, jobs[r].why);
        T_CHECK_MSG(jobs[r].order_ok, "rank %d: ops completed out of order", r);
        /* the caller computed while its ops were on the wire */
        T_CHECK_MSG(jobs[r].compute_steps_pending > 0, "rank %d never overlapped", r);
    }
}

/* A failed operation fails what is queued behind it at once, and destroying a
 * communicator with handles never waited for frees them (ASan checks). */
static void test_comm_async_failure_and_destroy(void)
{
    struct mesh m;
    struct err e;
    T_CHECK(mesh_build(&m, 2, 20000, NULL) == 0);
    comm_tcp_drop_connections(m.c[1]);
    float *buf = calloc(1 << 16, sizeof *buf);
    struct comm_handle *h[3];
    int64_t t0 = clock_mono_ms();
    for (int k = 0; k < 3; k++)
        h[k] = comm_iallreduce(m.c[0], buf, buf, 1 << 16, COMM_FLOAT32, COMM_SUM, &e);
    T_CHECK(h[0] && h[1] && h[2]);
    int rc0 = comm_wait(h[0], &e);
    struct err e0 = e;
    int rc1 = comm_wait(h[1], &e);
    int64_t dt = clock_mono_ms() - t0;
    /* h[2] is left for comm_destroy, as is a handle queued on rank 1 */
    struct comm_handle *left = comm_iallreduce(m.c[1], buf, buf, 4, COMM_FLOAT32, COMM_SUM, &e);
    mesh_destroy(&m);
    free(buf);
    T_CHECK(left != NULL);
    T_CHECK(rc0 < 0 && rc1 < 0);
    T_CHECK_MSG(e0.code == ERR_PEER && strstr(e0.msg, "rank 1"), "%s", e0.msg);
    T_CHECK_MSG(strstr(e.msg, "unusable") != NULL, "%s", e.msg);
    T_CHECK_MSG(dt < 10000, "took %lld ms", (long long)dt);
}

/* ---- failures -------------------------------------------------------------------- */

struct fail_job {
    struct comm *c;
    size_t count;
    int rc;
    struct err e;
    int64_t ms;
};

static void *fail_job_run(void *p)
{
    struct fail_job *j = p;
    float *buf = calloc(j->count, sizeof *buf);
    int64_t t0 = clock_mono_ms();
    /* several ops so the failure lands mid-stream whatever the timing */
    j->rc = 0;
    for (int i = 0; i < 50 && j->rc == 0; i++)
        j->rc = comm_allreduce(j->c, buf, buf, j->count, COMM_FLOAT32, COMM_SUM, &j->e);
    j->ms = clock_mono_ms() - t0;
    free(buf);
    return NULL;
}

/* Runs every rank but `victim` on fail_job; calls act(victim comm) after delay_ms. */
static void run_with_victim(struct mesh *m, int victim, size_t count, int delay_ms,
                            void (*act)(struct mesh *, int), struct fail_job *jobs)
{
    pthread_t th[MAX_WORLD];
    for (int r = 0; r < m->n; r++) {
        if (r == victim)
            continue;
        jobs[r] = (struct fail_job){.c = m->c[r], .count = count};
        pthread_create(&th[r], NULL, fail_job_run, &jobs[r]);
    }
    usleep((useconds_t)delay_ms * 1000);
    if (act)
        act(m, victim);
    for (int r = 0; r < m->n; r++)
        if (r != victim)
            pthread_join(th[r], NULL);
}

static void drop_victim(struct mesh *m, int victim)
{
    comm_tcp_drop_connections(m->c[victim]);
}

static void test_comm_tcp_peer_closes_mid_operation(void)
{
    struct mesh m;
    T_CHECK(mesh_build(&m, 4, 20000, NULL) == 0);
    struct fail_job jobs[4];
    run_with_victim(&m, 2, 1u << 20, 200, drop_victim, jobs);
    char msg[512] = "";
    int wrong = 0;
    for (int r = 0; r < 4; r++) {
        if (r == 2)
            continue;
        if (jobs[r].rc == 0 || jobs[r].e.code != ERR_PEER || m.c[r]->error_peer != 2 ||
            !strstr(jobs[r].e.msg, "rank 2") || jobs[r].ms > 15000) {
            wrong++;
            snprintf(msg, sizeof msg, "rank %d: rc %d code %s peer %d after %lld ms: %s", r,
                     jobs[r].rc, err_code_name(jobs[r].e.code), m.c[r]->error_peer,
                     (long long)jobs[r].ms, jobs[r].e.msg);
        }
    }
    T_CHECK(strstr(jobs[3].e.msg, "allreduce: rank 2") == jobs[3].e.msg);
    T_EQ_STR(m.c[3]->error_op, "allreduce");
    /* a broken communicator refuses further work */
    struct err e;
    float f = 0;
    T_CHECK(comm_allreduce(m.c[0], &f, &f, 1, COMM_FLOAT32, COMM_SUM, &e) < 0);
    T_CHECK(strstr(e.msg, "unusable") != NULL);
    mesh_destroy(&m);
    T_CHECK_MSG(wrong == 0, "%s", msg);
}

static void test_comm_tcp_silent_peer_times_out(void)
{
    struct mesh m;
    T_CHECK(mesh_build(&m, 3, 600, NULL) == 0);
    struct fail_job jobs[3];
    run_with_victim(&m, 1, 1000, 0, NULL, jobs);
    for (int r = 0; r < 3; r++) {
        if (r == 1)
            continue;
        T_CHECK_MSG(jobs[r].rc < 0 && jobs[r].e.code == ERR_TIMEOUT, "rank %d: %s", r,
                    jobs[r].e.msg);
        T_CHECK_MSG(jobs[r].ms >= 500 && jobs[r].ms < 10000, "rank %d took %lld ms", r,
                    (long long)jobs[r].ms);
        T_CHECK(strstr(jobs[r].e.msg, "timed out after 600 ms waiting for rank") != NULL);
    }
    /* rank 2 receives from the silent rank 1 (rd pairs 0 with 1 and 2 folds onto... the
     * plan does not matter: whoever waits on rank 1 names it) */
    T_CHECK_MSG(strstr(jobs[0].e.msg, "waiting for rank 1") ||
                    strstr(jobs[2].e.msg, "waiting for rank 1"),
                "%s | %s", jobs[0].e.msg, jobs[2].e.msg);
    mesh_destroy(&m);
}

static atomic_bool abort_flag_for_test;

static void raise_abort(struct mesh *m, int victim)
{
    atomic_store(&abort_flag_for_test, true);
}

/* The abort flag ends the operations in flight at once (transport: NULL = "tcp"). */
static void check_abort_flag(const char *transport)
{
    struct mesh m;
    atomic_store(&abort_flag_for_test, false);
    const struct mesh_opts o = {.transport = transport};
    T_CHECK(mesh_build_opts(&m, 3, 30000, &abort_flag_for_test, &o) == 0);
    struct fail_job jobs[3];
    run_with_victim(&m, 0, 1000, 200, raise_abort, jobs);
    for (int r = 1; r < 3; r++) {
        T_CHECK_MSG(jobs[r].rc < 0 && jobs[r].e.code == ERR_ABORTED, "rank %d: %s", r,
                    jobs[r].e.msg);
        T_CHECK_MSG(jobs[r].ms < 5000, "rank %d took %lld ms", r, (long long)jobs[r].ms);
    }
    mesh_destroy(&m);
    atomic_store(&abort_flag_for_test, false);
}

static void test_comm_tcp_abort_flag(void)
{
    check_abort_flag(NULL);
}

/* Ranks as processes, so that a signal stops or kills one of them. Each child runs 1 MiB
 * ring allreduces until one fails, says "up" after the first, writes its result, then
 * waits (sockets open) until the parent lets it go. */
struct proc_result {
    int rc, code, peer;
    char msg[300];
};

struct procs {
    int n;
    pid_t pid[MAX_WORLD];
    int from[MAX_WORLD]; /* child -> parent */
    int release;         /* parent closes it to let the children exit */
};

static void proc_child(struct comm_tcp **t, char addrs[][64], int n, int r, int out, int hold,
                       enum comm_algorithm alg)
{
    const char *ap[MAX_WORLD];
    for (int j = 0; j < n; j++) {
        ap[j] = addrs[j];
        if (j != r)
            comm_tcp_discard(t[j]);
    }
    struct proc_result res = {0};
    struct err e;
    struct comm *c = comm_tcp_connect(t[r], ap, &e);
    size_t count = 1 << 18;
    float *buf = calloc(count, sizeof *buf);
    struct comm_args a = {.op = COMM_OP_ALLREDUCE,
                          .send = buf,
                          .recv = buf,
                          .count = count,
                          .dtype = COMM_FLOAT32,
                          .algorithm = alg};
    res.rc = c ? 0 : -1;
    for (int i = 0; c && res.rc == 0 && i < 100000; i++) {
        res.rc = comm_run(c, &a, &e);
        if (i == 0 && write(out, "U", 1) != 1)
            break;
    }
    res.code = e.code;
    res.peer = c ? c->error_peer : -1;
    snprintf(res.msg, sizeof res.msg, "%s", e.msg);
    if (write(out, &res, sizeof res) != (ssize_t)sizeof res)
        _exit(3);
    char b;
    while (read(hold, &b, 1) > 0)
        ;
    _exit(0);
}

/* transport NULL: "tcp", the children running ring allreduces; else theirs by auto. */
static int procs_start(struct procs *p, int n, int timeout_ms, const char *transport)
{
    struct comm_tcp *t[MAX_WORLD];
    char addrs[MAX_WORLD][64];
    int hold[2];
    memset(p, 0, sizeof *p);
    p->n = n;
    if (mesh_listen_over(t, addrs, n, timeout_ms, NULL, NULL, transport) < 0 || pipe(hold) < 0)
        return -1;
    for (int r = 0; r < n; r++) {
        int fds[2];
        if (pipe(fds) < 0)
            return -1;
        p->pid[r] = fork();
        if (p->pid[r] == 0) {
            close(fds[0]);
            close(hold[1]);
            proc_child(t, addrs, n, r, fds[1], hold[0],
                       transport ? COMM_ALG_AUTO : COMM_ALG_RING);
        }
        close(fds[1]);
        p->from[r] = fds[0];
    }
    close(hold[0]);
    p->release = hold[1];
    for (int r = 0; r < n; r++)
        comm_tcp_discard(t[r]);
    return 0;
}

/* Reads rank r's "up" byte or its result; false at the deadline. */
static bool procs_read(struct procs *p, int r, void *out, size_t len, int64_t deadline)
{
    size_t got = 0;
    while (got < len) {
        struct pollfd pfd = {.fd = p->from[r], .events = POLLIN};
        int left = clock_ms_left(deadline);
        if (left == 0 || poll(&pfd, 1, left) <= 0)
            return false;
        ssize_t k = read(p->from[r], (char *)out + got, len - got);
        if (k <= 0)
            return false;
        got += (size_t)k;
    }
    return true;
}

static void procs_finish(struct procs *p)
{
    close(p->release);
    for (int r = 0; r < p->n; r++) {
        kill(p->pid[r], SIGKILL);
        kill(p->pid[r], SIGCONT);
        waitpid(p->pid[r], NULL, 0);
        close(p->from[r]);
    }
}

/* Starts 3 ranks, sends sig to rank 1 once everyone is up; returns the survivors'
 * results and the milliseconds from the signal to each result. */
static int signal_victim(int sig, int timeout_ms, struct proc_result *res, int64_t *ms,
                         const char *transport, bool (*up_check)(const struct procs *))
{
    struct procs p;
    if (procs_start(&p, 3, timeout_ms, transport) < 0)
        return -1;
    int64_t deadline = clock_mono_ms() + 20000;
    char byte;
    int ok = 0;
    for (int r = 0; r < 3; r++)
        ok += procs_read(&p, r, &byte, 1, deadline);
    int64_t t0 = clock_mono_ms();
    bool up = ok == 3 && (!up_check || up_check(&p));
    if (up)
        kill(p.pid[1], sig);
    for (int r = 0; r < 3 && up; r += 2) {
        ok += procs_read(&p, r, &res[r], sizeof res[r], t0 + timeout_ms + 15000);
        ms[r] = clock_mono_ms() - t0;
    }
    procs_finish(&p);
    return ok == 5 ? 0 : -1;
}

/* A stopped peer (SIGSTOP): the others fail with a timeout, not a hang, within the
 * timeout of the last byte that moved; whoever waits on it directly names it. */
static void test_comm_tcp_stopped_peer_times_out(void)
{
    struct proc_result res[3];
    int64_t ms[3];
    T_CHECK_MSG(signal_victim(SIGSTOP, 1500, res, ms, NULL, NULL) == 0,
                "ranks did not start or report");
    for (int r = 0; r < 3; r += 2) {
        T_CHECK_MSG(res[r].rc < 0 && res[r].code == ERR_TIMEOUT, "rank %d: %s", r, res[r].msg);
        T_CHECK_MSG(ms[r] >= 700 && ms[r] < 1500 + 8000, "rank %d failed after %lld ms", r,
                    (long long)ms[r]);
        T_CHECK_MSG(res[r].peer == 1 || res[r].peer == 2 - r, "rank %d blames %d", r,
                    res[r].peer);
    }
    /* rank 2 receives from rank 1 in the ring */
    T_EQ_INT(res[2].peer, 1);
    T_CHECK_MSG(strstr(res[2].msg, "waiting for rank 1"), "%s", res[2].msg);
}

/* A killed peer (SIGKILL): the others see its connections close and name it, far
 * faster than the timeout. */
static void test_comm_tcp_killed_peer_named(void)
{
    struct proc_result res[3];
    int64_t ms[3];
    T_CHECK_MSG(signal_victim(SIGKILL, 30000, res, ms, NULL, NULL) == 0,
                "ranks did not start or report");
    for (int r = 0; r < 3; r += 2) {
        T_CHECK_MSG(res[r].rc < 0 && res[r].code == ERR_PEER && res[r].peer == 1,
                    "rank %d: peer %d: %s", r, res[r].peer, res[r].msg);
        T_CHECK_MSG(ms[r] < 10000, "rank %d failed after %lld ms", r, (long long)ms[r]);
    }
}

/* ---- shared memory (shm.c, shm_algo.c) ------------------------------------------------ */

/* The cases of build with the algorithm left to the communicator: over shared memory
 * when every rank shares the node. */
static int shm_cases(struct op_case *out, int max, int world,
                     int (*build)(struct op_case *, int, int))
{
    int n = build(out, max, world);
    for (int i = 0; i < n && i < max; i++)
        out[i].alg = COMM_ALG_AUTO;
    return n;
}

/* Runs the cases of build over shared memory for world sizes lo..hi with opts o; every
 * element checked, and every rank must report transport and algorithm "shm". */
static void check_shm_cases(int (*build)(struct op_case *, int, int), int lo, int hi,
                            const struct mesh_opts *o, const char *what)
{
    struct op_case cases[256];
    for (int n = lo; n <= hi; n++) {
        struct mesh m;
        T_CHECK_MSG(mesh_build_opts(&m, n, 20000, NULL, o) == 0, "%s world %d: setup failed",
                    what, n);
        int nc = shm_cases(cases, 256, n, build);
        char why[512] = "";
        int failures = nc <= 256 ? run_cases_on(&m, cases, nc, why, sizeof why) : -1;
        bool named = true;
        for (int r = 0; r < n && n > 1; r++)
            named = named && strcmp(m.c[r]->transport, "shm") == 0 &&
                    strcmp(m.c[r]->last_algorithm, "shm") == 0;
        mesh_destroy(&m);
        T_CHECK_MSG(failures == 0, "%s world %d: %d failures: %s", what, n, failures, why);
        T_CHECK_MSG(named, "%s world %d: not run over shared memory", what, n);
    }
}

/* Every op, dtype and operator, in place and not, misaligned, worlds 1..5: with the
 * default slot, with 4 KiB slots (every op in many double-buffered steps, the large
 * allreduce's parts smaller than an element for 5 ranks) and with waiters that never
 * spin (the futex path alone). */
static void test_shm_ops_exact(void)
{
    const struct mesh_opts def = {.transport = "shm"};
    const struct mesh_opts tiny = {.transport = "shm", .shm_slot = 4096};
    const struct mesh_opts sleepy = {.transport = "shm", .shm_slot = 4096, .spin_us = -1};
    check_shm_cases(reducing_cases_w, 1, 5, &def, "default slot");
    check_shm_cases(moving_cases, 1, 5, &def, "default slot");
    check_shm_cases(large_cases, 2, 5, &def, "default slot");
    check_shm_cases(reducing_cases_w, 2, 5, &tiny, "4 KiB slots");
    check_shm_cases(moving_cases, 2, 5, &tiny, "4 KiB slots");
    check_shm_cases(large_cases, 2, 3, &tiny, "4 KiB slots");
    check_shm_cases(reducing_cases_w, 2, 4, &sleepy, "no spinning");
    check_shm_cases(moving_cases, 3, 3, &sleepy, "no spinning");
}

/* Messages in order and a length mismatch named, over shared memory. */
static void test_shm_send_recv_ordered(void)
{
    check_send_recv_ordered("shm");
}

/* hier with shared memory inside the nodes (transport auto): every node map, every
 * dtype and operator; the transport says "shm+tcp" on every rank when a node holds
 * several ranks and there are several nodes. */
static void test_shm_hier_node_maps_exact(void)
{
    static const struct {
        int n;
        int node_of[MAX_WORLD];
        const char *transport, *what;
    } maps[] = {
        {4, {0, 0, 1, 1}, "shm+tcp", "2 nodes x 2 ranks"},
        {6, {0, 0, 0, 1, 2, 2}, "shm+tcp", "3 nodes of 3, 1 and 2 ranks"},
        {5, {0, 0, 0, 0, 0}, "shm", "one node"},
        {4, {3, 2, 1, 0}, "tcp", "every rank its own node"},
        {4, {1, 0, 1, 0}, "shm+tcp", "2 nodes with interleaved ranks"},
    };
    struct op_case cases[64];
    int nc = hier_cases(cases, 64);
    T_CHECK(nc <= 64);
    for (size_t k = 0; k < sizeof maps / sizeof maps[0]; k++) {
        struct mesh m;
        const struct mesh_opts o = {
            .node_of = maps[k].node_of, .transport = "auto", .shm_slot = 8192};
        T_CHECK_MSG(mesh_build_opts(&m, maps[k].n, 20000, NULL, &o) == 0, "%s: setup failed",
                    maps[k].what);
        char why[512] = "";
        int failures = run_cases_on(&m, cases, nc <= 64 ? nc : 64, why, sizeof why);
        bool named = true;
        for (int r = 0; r < m.n; r++)
            named = named && strcmp(m.c[r]->transport, maps[k].transport) == 0;
        char got[8];
        snprintf(got, sizeof got, "%s", m.c[0]->transport);
        mesh_destroy(&m);
        T_CHECK_MSG(failures == 0, "%s: %d failures: %s", maps[k].what, failures, why);
        T_CHECK_MSG(named, "%s: transport %s, want %s", maps[k].what, got, maps[k].transport);
    }
}

/* With shared memory inside the nodes, auto takes hier across nodes at every size. */
static void test_shm_auto_takes_hier(void)
{
    const int node_of[4] = {0, 0, 1, 1};
    const struct mesh_opts o = {.node_of = node_of, .transport = "auto"};
    struct mesh m;
    T_CHECK(mesh_build_opts(&m, 4, 20000, NULL, &o) == 0);
    struct op_case c = {
        COMM_OP_ALLREDUCE, COMM_ALG_AUTO, COMM_FLOAT32, COMM_SUM, false, 2, 0, 0};
    char why[512] = "";
    int failures = run_cases_on(&m, &c, 1, why, sizeof why);
    bool hier = true;
    for (int r = 0; r < 4; r++)
        hier = hier && strcmp(m.c[r]->last_algorithm, "hier") == 0;
    mesh_destroy(&m);
    T_CHECK_MSG(failures == 0, "%s", why);
    T_CHECK(hier);
}

/* What each transport resolves to, and an algorithm named per call that runs over TCP
 * even when the ranks share memory. */
static void *shm_recorded_job(void *p)
{
    struct case_job *j = p;
    struct err e;
    float buf[64] = {0};
    j->failures = comm_allreduce(j->c, buf, buf, 8, COMM_FLOAT32, COMM_SUM, &e) != 0 ||
                  strcmp(j->c->last_algorithm, "shm") != 0;
    struct comm_args a = {.op = COMM_OP_ALLREDUCE,
                          .send = buf,
                          .recv = buf,
                          .count = 8,
                          .dtype = COMM_FLOAT32,
                          .algorithm = COMM_ALG_RING};
    j->failures += comm_run(j->c, &a, &e) != 0 || strcmp(j->c->last_algorithm, "ring") != 0;
    j->failures += comm_barrier(j->c, &e) != 0 || strcmp(j->c->last_algorithm, "shm") != 0;
    return NULL;
}

static void test_shm_transport_recorded(void)
{
    struct mesh m;
    const struct mesh_opts o = {.transport = "auto"};
    T_CHECK(mesh_build_opts(&m, 3, 20000, NULL, &o) == 0);
    struct case_job jobs[3];
    for (int r = 0; r < 3; r++)
        jobs[r] = (struct case_job){.c = m.c[r]};
    mesh_run(&m, shm_recorded_job, jobs, sizeof jobs[0]);
    for (int r = 0; r < 3; r++) {
        T_EQ_STR(m.c[r]->transport, "shm");
        T_EQ_INT(jobs[r].failures, 0);
        T_CHECK_MSG(m.c[r]->buffer_bytes > 3 * 512 * 1024, "buffer bytes %llu",
                    (unsigned long long)m.c[r]->buffer_bytes);
    }
    mesh_destroy(&m);
    const struct mesh_opts tcp = {.transport = "tcp"};
    T_CHECK(mesh_build_opts(&m, 2, 20000, NULL, &tcp) == 0);
    T_EQ_STR(m.c[0]->transport, "tcp");
    mesh_destroy(&m);
}

/* An allreduce of 10 floats, a send to the next rank and a receive from the previous
 * one, and a barrier, over shared memory. */
static void *shm_bytes_job(void *p)
{
    struct case_job *j = p;
    struct err e;
    float buf[10] = {0}, in[10];
    int n = j->c->world_size, me = j->c->rank;
    j->failures = comm_allreduce(j->c, buf, buf, 10, COMM_FLOAT32, COMM_SUM, &e) != 0;
    struct comm_args a = {.op = COMM_OP_SENDRECV,
                          .send = buf,
                          .recv = in,
                          .count = 10,
                          .count2 = 10,
                          .dtype = COMM_FLOAT32,
                          .peer = (me + 1) % n,
                          .peer2 = (me + n - 1) % n};
    j->failures += comm_run(j->c, &a, &e) != 0;
    j->failures += comm_barrier(j->c, &e) != 0;
    j->failures += strcmp(j->c->last_algorithm, "shm") != 0;
    return NULL;
}

/* Shared memory has no wire: bytes_sent counts the ring model's bytes, as nccl and mpi
 * do (a training step over shm reported 0 bytes sent before). */
static void test_shm_bytes_sent(void)
{
    struct mesh m;
    const struct mesh_opts o = {.transport = "shm"};
    T_CHECK(mesh_build_opts(&m, 3, 20000, NULL, &o) == 0);
    struct case_job jobs[3];
    for (int r = 0; r < 3; r++)
        jobs[r] = (struct case_job){.c = m.c[r]};
    mesh_run(&m, shm_bytes_job, jobs, sizeof jobs[0]);
    uint64_t sent[3];
    for (int r = 0; r < 3; r++)
        sent[r] = m.c[r]->bytes_sent;
    mesh_destroy(&m);
    /* allreduce: 2 (n - 1) (40 / n) = 52 bytes; sendrecv: the 40 bytes sent */
    for (int r = 0; r < 3; r++) {
        T_EQ_INT(jobs[r].failures, 0);
        T_EQ_INT(sent[r], 52 + 40);
    }
}

/* Setup refuses what shared memory cannot do, naming the field. */
static void test_shm_refusals(void)
{
    struct err e;
    struct comm_tcp_config cfg = mesh_config(0, 2, 1000, NULL, "s");
    cfg.transport = "shm";
    cfg.algorithm = "ring";
    T_CHECK(comm_tcp_listen(&cfg, &e) == NULL);
    T_EQ_STR(e.field, "transport");
    cfg.algorithm = "hier"; /* hier has an shm form */
    struct comm_tcp *t = comm_tcp_listen(&cfg, &e);
    T_CHECK(t != NULL);
    comm_tcp_discard(t);
    cfg.transport = "udp";
    T_CHECK(comm_tcp_listen(&cfg, &e) == NULL);
    T_EQ_STR(e.field, "transport");
    /* ranks on two nodes with transport shm: every rank fails setup naming transport */
    const int two[4] = {0, 0, 1, 1};
    struct mesh m;
    const struct mesh_opts o = {.node_of = two, .transport = "shm"};
    T_CHECK(mesh_build_opts(&m, 4, 5000, NULL, &o) < 0);
    for (int r = 0; r < 4; r++) {
        T_CHECK(m.c[r] == NULL);
        T_EQ_STR(m.e[r].field, "transport");
        T_CHECK_MSG(strstr(m.e[r].msg, "2 nodes"), "%s", m.e[r].msg);
    }
    mesh_destroy(&m);
}

/* A segment directory that does not exist fails setup naming it. */
static void test_shm_bad_dir(void)
{
    struct comm_tcp *t[2];
    char addrs[2][64];
    struct err e;
    for (int r = 0; r < 2; r++) {
        struct comm_tcp_config cfg = mesh_config(r, 2, 5000, NULL, "s");
        cfg.transport = "shm";
        cfg.shm_dir = "/nonexistent/ddpbench-shm";
        t[r] = comm_tcp_listen(&cfg, &e);
        T_CHECK(t[r] != NULL);
        snprintf(addrs[r], 64, "%s", comm_tcp_address(t[r]));
    }
    struct mesh m = {.n = 2};
    mesh_connect(&m, t, addrs);
    for (int r = 0; r < 2; r++) {
        T_CHECK(m.c[r] == NULL);
        T_CHECK_MSG(m.e[r].code == ERR_IO || m.e[r].code == ERR_PEER, "%s", m.e[r].msg);
    }
    /* at least the rank that failed to create says where */
    T_CHECK_MSG(strstr(m.e[0].msg, "/nonexistent/ddpbench-shm") ||
                    strstr(m.e[1].msg, "/nonexistent/ddpbench-shm"),
                "%s | %s", m.e[0].msg, m.e[1].msg);
}

static void test_shm_abort_flag(void)
{
    check_abort_flag("shm");
}

/* Entries of /dev/shm, or -1. */
static int shm_dir_entries(void)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *de; (de = readdir(d));)
        n++;
    closedir(d);
    return n;
}

/* The children map their segments from /dev/shm files without a name (the kernel shows
 * them as deleted) and add no entry to the directory. */
static bool shm_unnamed_segments(const struct procs *p)
{
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)p->pid[0]);
    FILE *f = fopen(path, "re");
    int unnamed = 0;
    while (f && fgets(line, sizeof line, f))
        unnamed += strstr(line, "/dev/shm/") && strstr(line, "(deleted)");
    if (f)
        fclose(f);
    return unnamed == 3; /* rank 0 maps the three ranks' segments */
}

/* A killed rank mid-allreduce over shared memory: its peers name it within moments (its
 * process is gone), far inside the timeout; nothing is left in /dev/shm. */
static void test_shm_killed_peer_named(void)
{
    struct proc_result res[3];
    int64_t ms[3];
    int before = shm_dir_entries();
    T_CHECK_MSG(signal_victim(SIGKILL, 30000, res, ms, "shm", shm_unnamed_segments) == 0,
                "ranks did not start, report or map unnamed segments");
    for (int r = 0; r < 3; r += 2) {
        T_CHECK_MSG(res[r].rc < 0 && res[r].code == ERR_PEER && res[r].peer == 1,
                    "rank %d: peer %d: %s", r, res[r].peer, res[r].msg);
        T_CHECK_MSG(strstr(res[r].msg, "allreduce: rank 1") == res[r].msg, "%s", res[r].msg);
        T_CHECK_MSG(ms[r] < 3000, "rank %d failed after %lld ms", r, (long long)ms[r]);
    }
    T_EQ_INT(shm_dir_entries(), before);
}

/* A stopped rank: its peers time out naming it, not hang. */
static void test_shm_stopped_peer_times_out(void)
{
    struct proc_result res[3];
    int64_t ms[3];
    T_CHECK_MSG(signal_victim(SIGSTOP, 1500, res, ms, "shm", NULL) == 0,
                "ranks did not start or report");
    for (int r = 0; r < 3; r += 2) {
        T_CHECK_MSG(res[r].rc < 0 && res[r].code == ERR_TIMEOUT && res[r].peer == 1,
                    "rank %d: peer %d: %s", r, res[r].peer, res[r].msg);
        T_CHECK_MSG(ms[r] >= 1000 && ms[r] < 1500 + 8000, "rank %d failed after %lld ms", r,
                    (long long)ms[r]);
        T_CHECK_MSG(strstr(res[r].msg, "no progress from rank 1"), "%s", res[r].msg);
    }
}

/* ---- setup robustness ------------------------------------------------------------ */

static int poke_port(const char *addr, const void *bytes, size_t n)
{
    char host[64];
    int port;
    struct err e;
    if (net_split_hostport(addr, host, sizeof host, &port, false, &e) < 0)
        return -1;
    int fd = net_connect(host, port, 2000, false, NULL, &e);
    if (fd >= 0 && n > 0)
        net_send_all(fd, bytes, n, clock_mono_ms() + 2000, NULL, &e);
    return fd;
}

static void hello_bytes(uint8_t out[24], uint32_t magic, int rank, int world, uint64_t hash)
{
    uint64_t vals[] = {magic, 2, 1, (uint64_t)rank, (uint64_t)world, hash};
    int widths[] = {4, 2, 2, 4, 4, 8};
    int off = 0;
    for (int f = 0; f < 6; f++)
        for (int b = 0; b < widths[f]; b++)
            out[off++] = (uint8_t)(vals[f] >> (8 * b));
}

static void test_comm_tcp_setup_ignores_strays(void)
{
    struct comm_tcp *t[3];
    char addrs[3][64];
    T_CHECK(mesh_listen(t, addrs, 3, 10000, NULL, NULL) == 0);
    uint8_t garbage[40], bad_magic[24], wrong_secret[24], high_rank[24];
    for (size_t i = 0; i < sizeof garbage; i++)
        garbage[i] = (uint8_t)(i * 37 + 11);
    hello_bytes(bad_magic, 0x11223344u, 0, 3, 0);
    hello_bytes(wrong_secret, 0x54504444u, 0, 3, 12345);
    hello_bytes(high_rank, 0x54504444u, 2, 3, 0);
    int fds[8], nfds = 0;
    fds[nfds++] = poke_port(addrs[2], garbage, sizeof garbage);
    fds[nfds++] = poke_port(addrs[2], bad_magic, sizeof bad_magic);
    fds[nfds++] = poke_port(addrs[1], wrong_secret, sizeof wrong_secret);
    fds[nfds++] = poke_port(addrs[1], NULL, 0);    /* silent, held open */
    fds[nfds++] = poke_port(addrs[2], garbage, 5); /* partial, held open */
    fds[nfds++] = poke_port(addrs[1], high_rank, sizeof high_rank);
    int closed = poke_port(addrs[2], garbage, 3);
    if (closed >= 0)
        close(closed);
    struct mesh m = {.n = 3};
    mesh_connect(&m, t, addrs);
    for (int i = 0; i < nfds; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    for (int r = 0; r < 3; r++)
        T_CHECK_MSG(m.c[r] != NULL, "rank %d: %s", r, m.e[r].msg);
    struct op_case k = {
        COMM_OP_ALLREDUCE, COMM_ALG_AUTO, COMM_FLOAT32, COMM_SUM, false, 1000, 0, 0};
    char why[512] = "";
    int failures = run_cases_on(&m, &k, 1, why, sizeof why);
    mesh_destroy(&m);
    T_CHECK_MSG(failures == 0, "%s", why);
}

/* Once the mesh is up the peer port is closed: garbage sent to it goes nowhere and the
 * ranks keep working. */
static void test_comm_tcp_port_closed_after_setup(void)
{
    struct comm_tcp *t[2];
    char addrs[2][64];
    T_CHECK(mesh_listen(t, addrs, 2, 5000, NULL, NULL) == 0);
    struct mesh m = {.n = 2};
    mesh_connect(&m, t, addrs);
    T_CHECK(m.c[0] && m.c[1]);
    uint8_t garbage[64];
    memset(garbage, 0xee, sizeof garbage);
    for (int r = 0; r < 2; r++) {
        char host[64];
        int port;
        struct err e;
        T_OK(net_split_hostport(addrs[r], host, sizeof host, &port, false, &e));
        int fd = net_connect(host, port, 500, false, NULL, &e);
        if (fd >= 0) { /* the port was reused by something else: send it nothing */
            close(fd);
            continue;
        }
        T_CHECK_MSG(e.code != ERR_OK, "connect to a closed peer port succeeded");
    }
    struct op_case k = {
        COMM_OP_ALLREDUCE, COMM_ALG_RING, COMM_INT32, COMM_MAX, false, 4099, 1, 0};
    char why[512] = "";
    int failures = run_cases_on(&m, &k, 1, why, sizeof why);
    mesh_destroy(&m);
    T_CHECK_MSG(failures == 0, "%s", why);
}

static void test_comm_tcp_wrong_secret_fails_setup(void)
{
    struct comm_tcp *t[3];
    char addrs[3][64];
    const char *secrets[3] = {"good", "evil", "good"};
    T_CHECK(mesh_listen(t, addrs, 3, 800, NULL, secrets) == 0);
    struct mesh m = {.n = 3};
    int64_t t0 = clock_mono_ms();
    mesh_connect(&m, t, addrs);
    int64_t dt = clock_mono_ms() - t0;
    int built = 0;
    for (int r = 0; r < 3; r++)
        built += m.c[r] != NULL;
    T_EQ_INT(built, 0);
    T_CHECK_MSG(dt < 8000, "took %lld ms", (long long)dt);
    T_CHECK_MSG(m.e[1].code == ERR_TIMEOUT || m.e[1].code == ERR_PEER, "%s", m.e[1].msg);
    T_CHECK_MSG(strstr(m.e[0].msg, "setup") != NULL, "%s", m.e[0].msg);
}

/* A rank that starts a second late, well within the timeout: the mesh forms anyway. */
static void test_comm_tcp_late_rank_joins(void)
{
    struct comm_tcp *t[3];
    char addrs[3][64];
    T_CHECK(mesh_listen(t, addrs, 3, 10000, NULL, NULL) == 0);
    struct mesh m = {.n = 3};
    mesh_connect_late(&m, t, addrs, 0, 1000);
    for (int r = 0; r < 3; r++)
        T_CHECK_MSG(m.c[r] != NULL, "rank %d: %s", r, m.e[r].msg);
    struct op_case k = {
        COMM_OP_ALL_GATHER, COMM_ALG_AUTO, COMM_FLOAT16, COMM_SUM, true, 77, 0, 0};
    char why[512] = "";
    int failures = run_cases_on(&m, &k, 1, why, sizeof why);
    mesh_destroy(&m);
    T_CHECK_MSG(failures == 0, "%s", why);
}

/* An address nothing answers at, held by this process until it closes the returned fd: a
 * socket bound to a free port of 127.0.0.1 that never listens, so every connect there is
 * refused. A listener closed for the purpose would leave its port to whichever process
 * binds next (other unit tests run beside this one), and a stranger's accept on it is
 * ERR_PEER, not the timeout the case waits for (seen once in a full run). */
static int dead_address_hold(char *addr, size_t cap)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || bind(fd, (const struct sockaddr *)&sa, sizeof sa) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    snprintf(addr, cap, "127.0.0.1:%d", net_local_port(fd));
    return fd;
}

static void test_comm_tcp_late_rank_and_timeout(void)
{
    /* rank 1 never connects: rank 0 reports who is missing */
    struct comm_tcp *t[2];
    char addrs[2][64], dead[64];
    int hold = dead_address_hold(dead, sizeof dead);
    T_CHECK(hold >= 0);
    if (mesh_listen(t, addrs, 2, 500, NULL, NULL) < 0) {
        close(hold);
        T_CHECK_MSG(0, "mesh_listen failed");
    }
    const char *ap[2] = {addrs[0], dead}; /* rank 1's listener is gone: nothing answers */
    struct err e;
    struct comm_tcp *late = t[0];
    comm_tcp_discard(t[1]);
    int64_t t0 = clock_mono_ms();
    struct comm *got = comm_tcp_connect(late, ap, &e); /* rank 0 connects up to rank 1 */
    close(hold);
    T_CHECK(got == NULL);
    T_CHECK(clock_mono_ms() - t0 < 5000);
    T_EQ_INT(e.code, ERR_TIMEOUT);
    T_CHECK_MSG(strstr(e.msg, "rank 1") != NULL, "%s", e.msg);
    /* rank 1 of another mesh waits for rank 0, who never comes */
    T_CHECK(mesh_listen(t, addrs, 2, 300, NULL, NULL) == 0);
    comm_tcp_discard(t[0]);
    T_CHECK(comm_tcp_connect(t[1], ap, &e) == NULL);
    T_EQ_INT(e.code, ERR_TIMEOUT);
    T_CHECK_MSG(strstr(e.msg, "rank(s) 0 to connect") != NULL, "%s", e.msg);
}

/* The polling policy of a 2-rank communicator made by the calling thread (whose
 * affinity the policy reads). */
static int polling_of(int spin_cfg, int *spin_us, bool *yields, size_t *ring_block)
{
    struct err e;
    struct comm_tcp_config cfg = mesh_config(0, 2, 1000, NULL, "s3cret");
    cfg.spin_us = spin_cfg;
    struct comm_tcp *t = comm_tcp_listen(&cfg, &e);
    if (!t)
        return -1;
    comm_tcp_polling(t, spin_us, yields, ring_block);
    comm_tcp_discard(t);
    return 0;
}

/* Unpinned, a rank may share its CPU with the rank it waits for (the scheduler often
 * puts two talking processes on one CPU), so it yields between polls; pinned to CPUs of
 * its own it polls without yielding; ranks outnumbering the CPUs yield with a shorter
 * budget and larger ring blocks; an explicit spin_us never yields. The ring block does
 * not follow the yielding (2 ranks on 2 CPUs keep 512 KiB chunks, pinned or not). */
static void test_comm_tcp_yields_unless_pinned(void)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t all, one;
    T_CHECK(sched_getaffinity(0, sizeof all, &all) == 0);
    int spin, spin_pinned;
    bool yields, yields_pinned;
    size_t block, block_pinned;
    T_CHECK(polling_of(0, &spin, &yields, &block) == 0);
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all)) {
            CPU_SET(c, &one);
            break;
        }
    T_CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
    int rc = polling_of(0, &spin_pinned, &yields_pinned, &block_pinned);
    T_CHECK(sched_setaffinity(0, sizeof all, &all) == 0);
    T_CHECK(rc == 0);
    if (online >= 2) {
        T_CHECK_MSG(CPU_COUNT(&all) < online || yields, "unpinned rank does not yield");
        T_CHECK(!yields_pinned);
        T_EQ_INT(spin, 200);
        T_EQ_INT(spin_pinned, 200);
        T_EQ_INT((int)block, 2 * (512 << 10));
        T_EQ_INT((int)block_pinned, 2 * (512 << 10));
    } else { /* one CPU: the ranks outnumber it, pinned or not */
        T_CHECK(yields && yields_pinned);
        T_EQ_INT(spin, 50);
        T_EQ_INT((int)block, 2 * (2 << 20));
    }
    T_CHECK(polling_of(150, &spin, &yields, &block) == 0);
    T_CHECK(spin == 150 && !yields);
    T_CHECK(polling_of(-1, &spin, &yields, &block) == 0);
    T_CHECK(spin == 0 && !yields);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    TEST_RUN(test_comm_dtype_names);
    TEST_RUN(test_comm_reducing_ops_exact);
    TEST_RUN(test_comm_ring_blocks_exact);
    TEST_RUN(test_comm_moving_ops_exact);
    TEST_RUN(test_comm_large_ops_exact);
    TEST_RUN(test_comm_hier_node_maps_exact);
    TEST_RUN(test_comm_auto_takes_hier_across_nodes);
    TEST_RUN(test_comm_hier_bad_map);
    TEST_RUN(test_comm_algorithm_recorded);
    TEST_RUN(test_comm_tcp_bytes_sent);
    TEST_RUN(test_comm_tcp_barrier);
    TEST_RUN(test_comm_send_recv_ordered);
    TEST_RUN(test_shm_ops_exact);
    TEST_RUN(test_shm_send_recv_ordered);
    TEST_RUN(test_shm_hier_node_maps_exact);
    TEST_RUN(test_shm_auto_takes_hier);
    TEST_RUN(test_shm_transport_recorded);
    TEST_RUN(test_shm_bytes_sent);
    TEST_RUN(test_shm_refusals);
    TEST_RUN(test_shm_bad_dir);
    TEST_RUN(test_shm_abort_flag);
    TEST_RUN(test_shm_killed_peer_named);
    TEST_RUN(test_shm_stopped_peer_times_out);
    TEST_RUN(test_comm_bad_arguments);
    TEST_RUN(test_comm_async_overlap_in_order);
    TEST_RUN(test_comm_async_failure_and_destroy);
    TEST_RUN(test_comm_tcp_peer_closes_mid_operation);
    TEST_RUN(test_comm_tcp_silent_peer_times_out);
    TEST_RUN(test_comm_tcp_abort_flag);
    TEST_RUN(test_comm_tcp_stopped_peer_times_out);
    TEST_RUN(test_comm_tcp_killed_peer_named);
    TEST_RUN(test_comm_tcp_setup_ignores_strays);
    TEST_RUN(test_comm_tcp_port_closed_after_setup);
    TEST_RUN(test_comm_tcp_wrong_secret_fails_setup);
    TEST_RUN(test_comm_tcp_late_rank_joins);
    TEST_RUN(test_comm_tcp_late_rank_and_timeout);
    TEST_RUN(test_comm_tcp_yields_unless_pinned);
    return test_end();
}
