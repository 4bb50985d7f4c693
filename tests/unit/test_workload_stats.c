/* Unit tests for the pure parts of worker/workload_collective: statistics (median, p95
 * by nearest rank, mean, min, max in microseconds), the element-wise max that makes an
 * iteration as slow as its slowest rank, the per-op table of worker/coll_ops.h (nccl-tests
 * bus bandwidth factors, buffer sizes, peers, names agreeing with the spec), and the
 * input/expected functions (expected == sum over ranks of the inputs, exactly, and a
 * wrong or shifted result is counted; in place, what the output holds before the run
 * differs from the result on some rank at every element). Also a one-rank benchmark run
 * through a real store and communicator, checking the collective event rank 0 writes, and
 * benchmarks over a fake backend whose operations skip their writes (never, after the
 * first timed iteration, or in it), which the check must count wrong. */
#include <fcntl.h>
#include <jansson.h>
#include <unistd.h>

#include "common/report.h"
#include "common/spec.h"
#include "common/stats.h"
#include "daemon/store_server.h"
#include "tests/unit/one_rank.h"
#include "tests/unit/test.h"
#include "worker/coll_ops.h"
#include "worker/comm/comm.h"
#include "worker/comm/reduce.h"
#include "worker/comm/tcp.h"
#include "worker/store/store_client.h"
#include "worker/workload_collective.h"

static void test_stats_median_p95_mean(void)
{
    double t[] = {5e-6, 1e-6, 3e-6, 2e-6, 4e-6};
    struct collective_stats st;
    collective_stats_compute(t, 5, &st);
    T_NEAR(st.min_us, 1, 1e-9);
    T_NEAR(st.max_us, 5, 1e-9);
    T_NEAR(st.median_us, 3, 1e-9);
    T_NEAR(st.mean_us, 3, 1e-9);
    T_NEAR(st.p95_us, 5, 1e-9); /* ceil(0.95 * 5) = 5th */
    T_NEAR(t[0], 1e-6, 1e-15);  /* sorted in place */

    double even[] = {4, 1, 3, 2};
    collective_stats_compute(even, 4, &st);
    T_NEAR(st.median_us, 2.5e6, 1e-3);

    double one[] = {7e-6};
    collective_stats_compute(one, 1, &st);
    T_NEAR(st.median_us, 7, 1e-9);
    T_NEAR(st.p95_us, 7, 1e-9);
}

static void test_stats_percentile_nearest_rank(void)
{
    double v[100];
    for (int i = 0; i < 100; i++)
        v[i] = i + 1; /* 1..100 */
    T_NEAR(stats_percentile_sorted(v, 100, 95), 95, 0);
    T_NEAR(stats_percentile_sorted(v, 100, 50), 50, 0);
    T_NEAR(stats_percentile_sorted(v, 100, 100), 100, 0);
    T_NEAR(stats_percentile_sorted(v, 100, 0), 1, 0);
    T_NEAR(stats_percentile_sorted(v, 20, 95), 19, 0); /* ceil(19.0) */
    T_NEAR(stats_percentile_sorted(v, 21, 95), 20, 0); /* ceil(19.95) */
    T_NEAR(stats_percentile_sorted(v, 10, 95), 10, 0); /* ceil(9.5) */
    T_NEAR(stats_median_sorted(v, 3), 2, 0);
    T_NEAR(stats_median_sorted(v, 0), 0, 0);
}

static void test_stats_elementwise_max(void)
{
    double acc[] = {1, 5, 3};
    double other[] = {2, 4, 3};
    collective_max_into(acc, other, 3);
    T_NEAR(acc[0], 2, 0);
    T_NEAR(acc[1], 5, 0);
    T_NEAR(acc[2], 3, 0);
}

static void test_busbw_factor(void)
{
    T_NEAR(coll_op_busbw_factor(COMM_OP_ALLREDUCE, 1), 0, 1e-12);
    T_NEAR(coll_op_busbw_factor(COMM_OP_ALLREDUCE, 2), 1, 1e-12);
    T_NEAR(coll_op_busbw_factor(COMM_OP_ALLREDUCE, 4), 1.5, 1e-12);
    T_NEAR(coll_op_busbw_factor(COMM_OP_ALLREDUCE, 8), 1.75, 1e-12);
    T_NEAR(coll_op_busbw_factor(COMM_OP_REDUCE_SCATTER, 4), 0.75, 1e-12);
    T_NEAR(coll_op_busbw_factor(COMM_OP_ALL_GATHER, 2), 0.5, 1e-12);
    T_NEAR(coll_op_busbw_factor(COMM_OP_BROADCAST, 8), 1, 1e-12);
    T_NEAR(coll_op_busbw_factor(COMM_OP_SENDRECV, 8), 1, 1e-12);
    T_NEAR(coll_op_busbw_factor(COMM_OP_BARRIER, 8), 0, 0); /* not a benchmark op */
    T_NEAR(coll_op_busbw_factor((enum comm_op)99, 8), 0, 0);
    T_NEAR(coll_op_busbw_factor(COMM_OP_ALLREDUCE, 0), 0, 0);
    const struct coll_op *o = coll_op_find("allreduce");
    T_CHECK(o && o->op == COMM_OP_ALLREDUCE && o == coll_op_get(COMM_OP_ALLREDUCE));
    o = coll_op_find("sendrecv");
    T_CHECK(o && o->op == COMM_OP_SENDRECV);
    T_CHECK(coll_op_find("alltoall") == NULL);
    T_CHECK(coll_op_find("barrier") == NULL);
    T_CHECK(coll_op_find("send") == NULL);
    T_CHECK(coll_op_get(COMM_OP_SEND) == NULL && coll_op_get(COMM_OP_RECV) == NULL);
}

/* Buffer sizes as nccl-tests counts them: reduce_scatter sends and all_gather receives
 * world_size blocks, and their message is the whole buffer; in place, that rank's block
 * is the small side. */
static void test_op_buffers(void)
{
    const struct coll_op *ar = coll_op_get(COMM_OP_ALLREDUCE);
    const struct coll_op *rs = coll_op_get(COMM_OP_REDUCE_SCATTER);
    const struct coll_op *ag = coll_op_get(COMM_OP_ALL_GATHER);
    const struct coll_op *bc = coll_op_get(COMM_OP_BROADCAST);
    T_EQ_INT((int)coll_op_elems(rs->send, 10, 4), 40);
    T_EQ_INT((int)coll_op_elems(rs->recv, 10, 4), 10);
    T_EQ_INT((int)coll_op_elems(ag->send, 10, 4), 10);
    T_EQ_INT((int)coll_op_elems(ag->recv, 10, 4), 40);
    T_EQ_INT((int)coll_op_elems(ar->send, 10, 4), 10);
    T_EQ_INT((int)coll_op_elems(ar->recv, 10, 4), 10);
    T_EQ_INT((int)coll_op_message_blocks(rs, 4), 4);
    T_EQ_INT((int)coll_op_message_blocks(ag, 4), 4);
    T_EQ_INT((int)coll_op_message_blocks(ar, 4), 1);
    T_EQ_INT((int)coll_op_message_blocks(bc, 4), 1);
    T_EQ_INT(coll_op_inplace_block(rs), 1);
    T_EQ_INT(coll_op_inplace_block(ag), -1);
    T_EQ_INT(coll_op_inplace_block(ar), 0);
    T_CHECK(ar->reduces && rs->reduces && !ag->reduces && !bc->reduces);
    /* peers: sendrecv to the next rank, from the previous; broadcast's root is 0 */
    struct comm_args a = {.count = 7, .peer = 5};
    coll_op_get(COMM_OP_SENDRECV)->peers(&a, 0, 3);
    T_EQ_INT(a.peer, 1);
    T_EQ_INT(a.peer2, 2);
    T_EQ_INT((int)a.count2, 7);
    a.peer = 5;
    bc->peers(&a, 2, 3);
    T_EQ_INT(a.peer, 0);
    T_CHECK(ar->peers == NULL);
}

/* The spec's "op" values (common/spec_table.c, the contract the daemon checks) are exactly the
 * table's rows. */
static void test_op_names_match_spec(void)
{
    json_t *schema = spec_schema_json();
    json_t *ops = json_object_get(json_object_get(json_object_get(schema, "properties"), "op"),
                                  "enum");
    size_t i, rows = 0;
    json_t *v;
    json_array_foreach(ops, i, v) T_CHECK_MSG(coll_op_find(json_string_value(v)),
                                              "spec op %s has no row", json_string_value(v));
    for (int op = 0; op <= COMM_OP_BARRIER; op++)
        rows += coll_op_get((enum comm_op)op) != NULL;
    T_EQ_INT((int)rows, (int)json_array_size(ops));
    json_decref(schema);
}

/* Naive reference: the reduction over ranks of input element j, computed in int64 from
 * the inputs themselves, then finished as the dtype does (avg: one division). */
static double ref_reduced(const struct collective_data *d, size_t j)
{
    int64_t acc = collective_input(d, 0, j);
    for (int r = 1; r < d->world; r++) {
        int64_t v = collective_input(d, r, j);
        acc = d->redop == COMM_MIN   ? (v < acc ? v : acc)
              : d->redop == COMM_MAX ? (v > acc ? v : acc)
                                     : acc + v;
    }
    if (d->redop != COMM_AVG)
        return (double)acc;
    if (d->dtype == COMM_INT32 || d->dtype == COMM_INT64)
        return (double)(acc / d->world);
    uint8_t tmp[8];
    reduce_store(tmp, d->dtype, (double)((float)acc / (float)d->world));
    return reduce_load(tmp, d->dtype);
}

/* The benchmark ops, in the order the exhaustive tests walk them. */
static const enum comm_op bench_ops[] = {COMM_OP_ALLREDUCE, COMM_OP_REDUCE_SCATTER,
                                         COMM_OP_ALL_GATHER, COMM_OP_BROADCAST,
                                         COMM_OP_SENDRECV};

/* Calls check for every op x dtype x redop x world of worlds[6], with the data chosen
 * from seed; one walk for the tests that must hold over the whole space. */
static void each_data_case(int64_t seed, const int worlds[6], size_t count,
                           void (*check)(const struct collective_data *d, size_t count,
                                         void *ctx),
                           void *ctx)
{
    for (size_t o = 0; o < 5; o++)
        for (int t = COMM_FLOAT32; t <= COMM_INT64; t++)
            for (int op = COMM_SUM; op <= COMM_MAX; op++)
                for (size_t w = 0; w < 6; w++) {
                    struct collective_data d;
                    collective_data_init(&d, seed, bench_ops[o], (enum comm_dtype)t,
                                         (enum comm_redop)op, worlds[w]);
                    check(&d, count, ctx);
                }
}

/* The reference value of output element i of rank for d's op. */
static double ref_output(const struct collective_data *d, int rank, size_t count, size_t i)
{
    int n = d->world;
    switch (d->op) {
    case COMM_OP_ALLREDUCE: return ref_reduced(d, i);
    case COMM_OP_REDUCE_SCATTER: return ref_reduced(d, (size_t)rank * count + i);
    case COMM_OP_ALL_GATHER: return (double)collective_input(d, (int)(i / count), i % count);
    case COMM_OP_BROADCAST: return (double)collective_input(d, 0, i);
    default: return (double)collective_input(d, (rank + n - 1) % n, i);
    }
}

static void check_expected(const struct collective_data *d, size_t count, void *ctx)
{
    (void)ctx;
    int n = d->world;
    size_t out = d->op == COMM_OP_ALL_GATHER ? count * (size_t)n : count;
    for (int rank = 0; rank < n; rank += (n > 3 ? 3 : 1)) {
        for (size_t i = 0; i < out; i++) {
            double want = ref_output(d, rank, count, i);
            double got = collective_expected(d, rank, count, i);
            T_CHECK_MSG(got == want, "op %d dtype %d redop %d world %d rank %d i %zu: %g vs %g",
                        (int)d->op, (int)d->dtype, (int)d->redop, n, rank, i, got, want);
        }
    }
    if (!d->minmax)
        return;
    for (size_t i = 0; i < count && n <= 256; i++) /* distinct per index */
        for (int r = 1; r < n; r++)
            T_CHECK(collective_input(d, r, i) != collective_input(d, r - 1, i));
}

/* Every input is exact in its dtype; every expected element equals the naive
 * reference; min/max inputs are distinct across ranks; avg sums stay exact. */
static void test_expected_matches_reference(void)
{
    static const int worlds[] = {1, 2, 3, 5, 7, 40};
    each_data_case(77, worlds, 13, check_expected, NULL);
}

/* Inputs are small: a float16 or bfloat16 sum over many ranks never leaves the exact
 * range, and the fill stores them exactly. */
static void test_inputs_exact_and_varied(void)
{
    struct collective_data d;
    collective_data_init(&d, 5, COMM_OP_ALLREDUCE, COMM_BFLOAT16, COMM_SUM, 40);
    T_CHECK(d.q * 40 <= 256 && d.q >= 2 && d.lo == 1);
    collective_data_init(&d, 5, COMM_OP_ALLREDUCE, COMM_BFLOAT16, COMM_SUM, 300);
    T_CHECK(d.lo == 0 && d.q == 1); /* no positive sum over 300 ranks is exact */
    T_EQ_INT((int)collective_expected(&d, 0, 4, 3), 0);
    collective_data_init(&d, 5, COMM_OP_ALLREDUCE, COMM_FLOAT16, COMM_SUM, 40);
    T_EQ_INT(d.q, 17);
    uint16_t h[100];
    collective_fill(&d, h, 100, 3);
    for (size_t i = 0; i < 100; i++)
        T_CHECK(reduce_load(&h[i], COMM_FLOAT16) == (double)collective_input(&d, 3, i));
    /* ranks and indices get different values */
    int differ_rank = 0, differ_index = 0;
    collective_data_init(&d, 1, COMM_OP_ALLREDUCE, COMM_FLOAT32, COMM_SUM, 2);
    for (size_t i = 0; i < 100; i++) {
        differ_rank += collective_input(&d, 0, i) != collective_input(&d, 1, i);
        differ_index += collective_input(&d, 0, i) != collective_input(&d, 0, i + 1);
    }
    T_CHECK(differ_rank > 50);
    T_CHECK(differ_index > 50);
    /* the min over ranks lands on different ranks and levels from index to index */
    collective_data_init(&d, 1, COMM_OP_ALLREDUCE, COMM_INT32, COMM_MIN, 4);
    int which[4] = {0}, levels = 0;
    for (size_t i = 0; i < 200; i++) {
        for (int r = 0; r < 4; r++)
            which[r] += collective_input(&d, r, i) ==
                        (int64_t)collective_expected(&d, 0, 200, i);
        levels += collective_expected(&d, 0, 200, i) != collective_expected(&d, 0, 200, i + 1);
    }
    for (int r = 0; r < 4; r++)
        T_CHECK_MSG(which[r] > 20, "rank %d holds the min %d times", r, which[r]);
    T_CHECK(levels > 100);
}

/* What the output of rank holds before an in-place run, at output element i: its own
 * input where the output overlays it, the bench's poison elsewhere (all_gather's other
 * blocks), returned as NAN. */
static double inplace_before(const struct collective_data *d, int rank, size_t count, size_t i)
{
    switch (d->op) {
    case COMM_OP_REDUCE_SCATTER:
        return (double)collective_input(d, rank, (size_t)rank * count + i);
    case COMM_OP_ALL_GATHER:
        return i / count == (size_t)rank ? (double)collective_input(d, rank, i % count) : NAN;
    default: return (double)collective_input(d, rank, i);
    }
}

/* ctx: a char[200] that gets the first failure. */
static void check_inplace_changes(const struct collective_data *d, size_t count, void *ctx)
{
    char *why = ctx;
    int n = d->world, t = (int)d->dtype, op = (int)d->redop;
    size_t out = d->op == COMM_OP_ALL_GATHER ? count * (size_t)n : count;
    bool sum = d->op == COMM_OP_ALLREDUCE || d->op == COMM_OP_REDUCE_SCATTER;
    sum = sum && d->redop == COMM_SUM;
    bool own_block = d->op == COMM_OP_REDUCE_SCATTER && !sum;
    int anywhere = 0;
    for (size_t i = 0; i < out; i++) {
        int caught = 0;
        for (int r = 0; r < n; r++)
            caught += inplace_before(d, r, count, i) != collective_expected(d, r, count, i);
        anywhere += caught;
        bool ok = n == 1 ? caught == 0 : sum ? caught == n : own_block || caught > 0;
        if (!ok && !why[0])
            snprintf(why, 200,
                     "op %d dtype %d redop %d world %d element %zu: caught on %d ranks",
                     (int)d->op, t, op, n, i, caught);
    }
    if (own_block && n > 1 && anywhere < (int)count / 4 && !why[0])
        snprintf(why, 200, "reduce_scatter dtype %d redop %d world %d: caught %d times", t, op,
                 n, anywhere);
}

/* In place the output overlays the input, so an operation that never writes is caught
 * only where the result differs from what was there: for sums at every element of every
 * rank; for the other ops at every element on some rank, while ranks 0 and 1 hold
 * different values; for reduce_scatter with avg, min or max, whose ranks each see only
 * their own block, at some elements. On one rank everything is the identity (trivially
 * exact). */
static void test_inplace_inputs_must_change(void)
{
    static const int worlds[] = {1, 2, 3, 5, 16, 40};
    char why[200] = "";
    each_data_case(21, worlds, 64, check_inplace_changes, why);
    T_CHECK_MSG(!why[0], "%s", why);
}

static void test_count_wrong(void)
{
    enum { N = 1000, W = 3 };
    struct collective_data d;
    collective_data_init(&d, 9, COMM_OP_ALLREDUCE, COMM_FLOAT32, COMM_SUM, W);
    float sum[N] = {0}, in[N];
    for (int r = 0; r < W; r++) {
        collective_fill(&d, in, N, r);
        for (int i = 0; i < N; i++)
            sum[i] += in[i];
    }
    T_EQ_INT(collective_count_wrong(&d, sum, 0, N), 0);
    sum[17] += 1;
    sum[500] = -sum[500] - 1;
    T_EQ_INT(collective_count_wrong(&d, sum, 0, N), 2);
    /* a result shifted by one element is almost all wrong */
    T_CHECK(collective_count_wrong(&d, sum + 1, 0, N - 1) > N / 2);
    /* all_gather: rank 1's block in rank 0's place is wrong */
    collective_data_init(&d, 9, COMM_OP_ALL_GATHER, COMM_INT64, COMM_SUM, 2);
    int64_t g[8];
    collective_fill(&d, g, 4, 0);
    collective_fill(&d, g + 4, 4, 1);
    T_EQ_INT(collective_count_wrong(&d, g, 1, 4), 0);
    collective_fill(&d, g, 4, 1);
    T_CHECK(collective_count_wrong(&d, g, 1, 4) >= 2);
}

/* One rank, real store and communicator, every op in and out of place: a checked
 * collective event and a progress event per size. */
static void test_bench_single_rank_reports(void)
{
    struct err e;
    struct one_rank o;
    T_CHECK_MSG(one_rank_open(&o, &e) == 0, "%s", e.msg);
    static const char *ops[] = {"allreduce", "reduce_scatter", "all_gather", "broadcast",
                                "sendrecv"};
    static const char *dtypes[] = {"float32", "float16", "bfloat16", "int32", "int64"};
    static const char *redops[] = {"sum", "avg", "min", "max", "sum"};
    char why[300] = "";
    for (int i = 0; i < 10 && !why[0]; i++) {
        int k = i % 5, progress = 0;
        bool inplace = i >= 5;
        int64_t sizes[] = {1, 6, 4096}; /* 1 byte rounds up to one element */
        struct report_collective rc[3];
        struct spec s;
        one_rank_coll_spec(&s, 3, ops[k], dtypes[(i + 2) % 5], redops[k], 4, inplace);
        int n = one_rank_run_bench(&o, &s, NULL, sizes, 3, rc, &progress, &e);
        size_t es = strcmp(dtypes[(i + 2) % 5], "int64") == 0                        ? 8
                    : dtypes[(i + 2) % 5][5] == '3' || dtypes[(i + 2) % 5][3] == '3' ? 4
                                                                                     : 2;
        if (n != 3 || progress != 3)
            snprintf(why, sizeof why, "%s: %d events, %d progress: %s", ops[k], n, progress,
                     n < 0 ? e.msg : "");
        for (int j = 0; j < n && !why[0]; j++)
            if (rc[j].wrong || rc[j].iters != 4 || strcmp(rc[j].algorithm, "local") ||
                strcmp(rc[j].op, ops[k]) || rc[j].inplace != inplace ||
                rc[j].bytes != rc[j].count * (int64_t)es ||
                !(rc[j].time_us_min <= rc[j].time_us_median &&
                  rc[j].time_us_median <= rc[j].time_us_max))
                snprintf(why, sizeof why, "%s size %d: wrong %lld alg %s bytes %lld count %lld",
                         ops[k], j, (long long)rc[j].wrong, rc[j].algorithm,
                         (long long)rc[j].bytes, (long long)rc[j].count);
        if (!why[0] && (rc[0].count != 1 || rc[2].count != 4096 / (int64_t)es))
            snprintf(why, sizeof why, "%s: counts %lld %lld", ops[k], (long long)rc[0].count,
                     (long long)rc[2].count);
    }
    one_rank_close(&o);
    T_CHECK_MSG(!why[0], "%s", why);
}

/* A fake backend: each operation writes the expected result (collective_expected of the
 * same value model) or, depending on mode, skips the write, as a broken backend would. */
enum fake_mode {
    FAKE_RIGHT, /* always writes */
    FAKE_NEVER, /* never writes */
    FAKE_STOPS, /* writes in the warmup and the first timed iteration only */
    FAKE_LATE,  /* skips the first timed iteration, writes every other run */
};

struct fake_comm {
    struct comm c; /* first: the bench's struct comm * is this */
    struct collective_data d;
    enum fake_mode mode;
    int calls, warmup;
};

static int fake_op(struct comm *c, const struct comm_args *a, struct err *e)
{
    struct fake_comm *f = (struct fake_comm *)c;
    int call = f->calls++;
    bool write = f->mode == FAKE_RIGHT || (f->mode == FAKE_STOPS && call <= f->warmup) ||
                 (f->mode == FAKE_LATE && call != f->warmup);
    size_t n = coll_op_elems(f->d.opi->recv, a->count, c->world_size);
    size_t es = comm_dtype_size(a->dtype);
    for (size_t i = 0; write && i < n; i++)
        reduce_store((uint8_t *)a->recv + i * es, a->dtype,
                     collective_expected(&f->d, c->rank, a->count, i));
    snprintf(c->last_algorithm, sizeof c->last_algorithm, "fake");
    return 0;
}

static int fake_barrier(struct comm *c, const struct comm_args *a, struct err *e)
{
    return 0;
}

static const struct comm_ops fake_ops = {
    .allreduce = fake_op,
    .reduce_scatter = fake_op,
    .all_gather = fake_op,
    .broadcast = fake_op,
    .sendrecv = fake_op,
    .barrier = fake_barrier,
};

/* Runs op (sum) at sizes 8 and 4096 bytes as rank of world over the fake backend in mode,
 * as repeat number rep; wrong[k] gets the wrong count rank stored for size k. */
static int fake_bench(struct one_rank *o, const char *op, bool inplace, int rank, int world,
                      enum fake_mode mode, int rep, int64_t wrong[2], struct err *e)
{
    struct spec s;
    memset(&s, 0, sizeof s);
    s.world_size = world;
    s.repeats = 1;
    s.seed = 8;
    snprintf(s.coll.op, sizeof s.coll.op, "%s", op);
    snprintf(s.coll.dtype, sizeof s.coll.dtype, "float32");
    snprintf(s.coll.redop, sizeof s.coll.redop, "sum");
    snprintf(s.coll.algorithm, sizeof s.coll.algorithm, "auto");
    s.coll.iters = 4;
    s.coll.warmup = 2;
    s.coll.check = true;
    s.coll.inplace = inplace;
    struct fake_comm f = {.c = {.ops = &fake_ops,
                                .backend = "fake",
                                .rank = rank,
                                .world_size = world,
                                .timeout_ms = 2000},
                          .mode = mode,
                          .warmup = s.coll.warmup};
    const struct coll_op *row = coll_op_find(op);
    collective_data_init(&f.d, s.seed, row->op, COMM_FLOAT32, COMM_SUM, world);
    int devnull = open("/dev/null", O_WRONLY);
    struct report_writer w;
    report_writer_init(&w, devnull, 0);
    int64_t sizes[] = {8, 4096};
    struct collective_bench b;
    int rc = collective_bench_init(&b, &s, &f.c, o->sc, &w, 4096, 2, e);
    for (int k = 0; rc == 0 && k < 2; k++) { /* one size at a time: each from call 0 */
        f.calls = 0;
        rc = collective_bench_run_sizes(&b, rep * 2 + k, &sizes[k], 1, e);
    }
    collective_bench_cleanup(&b);
    close(devnull);
    for (int k = 0; rc == 0 && k < 2; k++) {
        char key[64], *val = NULL;
        size_t len;
        snprintf(key, sizeof key, "coll/r%d/s0/wrong/%d", rep * 2 + k, rank);
        rc = store_client_get(o->sc, key, 1000, &val, &len, e);
        wrong[k] = rc == 0 ? strtoll(val, NULL, 10) : -1;
        free(val);
    }
    return rc;
}

/* The check counts what a broken backend leaves: every op, in and out of place, on a
 * non-root rank of two; an operation that never writes, one that stops after the first
 * timed iteration (caught by the last) and one that misses the first (caught by the
 * first) are wrong at both sizes, a right one is not. On one rank, out of place the
 * skipped copy is caught, in place nothing can be (the identity, documented). */
static void test_bench_catches_skipped_writes(void)
{
    struct err e = {0};
    struct one_rank o;
    T_CHECK_MSG(one_rank_open(&o, &e) == 0, "%s", e.msg);
    static const char *ops[] = {"allreduce", "reduce_scatter", "all_gather", "broadcast",
                                "sendrecv"};
    static const char *modes[] = {"right", "never", "stops", "late"};
    char why[200] = "";
    int rep = 0;
    for (int i = 0; i < 10 && !why[0]; i++) {
        bool inplace = i >= 5;
        for (int m = FAKE_RIGHT; m <= FAKE_LATE && !why[0]; m++) {
            int64_t wrong[2];
            if (fake_bench(&o, ops[i % 5], inplace, 1, 2, (enum fake_mode)m, rep++, wrong, &e) <
                0) {
                snprintf(why, sizeof why, "%s: %s", ops[i % 5], e.msg);
                break;
            }
            for (int k = 0; k < 2; k++)
                if ((m == FAKE_RIGHT) != (wrong[k] == 0))
                    snprintf(why, sizeof why, "%s%s world 2 %s size %d: %lld wrong", ops[i % 5],
                             inplace ? " in place" : "", modes[m], k, (long long)wrong[k]);
            int64_t one[2];
            if (m != FAKE_NEVER || why[0])
                continue;
            if (fake_bench(&o, ops[i % 5], inplace, 0, 1, FAKE_NEVER, rep++, one, &e) < 0)
                snprintf(why, sizeof why, "%s world 1: %s", ops[i % 5], e.msg);
            else if ((one[0] > 0) != !inplace || (one[1] > 0) != !inplace)
                snprintf(why, sizeof why, "%s%s world 1 never: %lld, %lld wrong", ops[i % 5],
                         inplace ? " in place" : "", (long long)one[0], (long long)one[1]);
        }
    }
    one_rank_close(&o);
    T_CHECK_MSG(!why[0], "%s", why);
}

static void test_bench_rejects_unsupported(void)
{
    struct spec s;
    struct err e;
    struct collective_bench b;
    memset(&s, 0, sizeof s);
    snprintf(s.coll.op, sizeof s.coll.op, "alltoall");
    snprintf(s.coll.dtype, sizeof s.coll.dtype, "float32");
    snprintf(s.coll.redop, sizeof s.coll.redop, "sum");
    s.coll.iters = 1;
    T_CHECK(collective_bench_init(&b, &s, NULL, NULL, NULL, 64, 1, &e) < 0);
    T_EQ_STR(e.field, "op");
    snprintf(s.coll.op, sizeof s.coll.op, "allreduce");
    snprintf(s.coll.dtype, sizeof s.coll.dtype, "float99");
    T_CHECK(collective_bench_init(&b, &s, NULL, NULL, NULL, 64, 1, &e) < 0);
    T_EQ_STR(e.field, "dtype");
    snprintf(s.coll.dtype, sizeof s.coll.dtype, "bfloat16");
    snprintf(s.coll.algorithm, sizeof s.coll.algorithm, "spiral");
    T_CHECK(collective_bench_init(&b, &s, NULL, NULL, NULL, 64, 1, &e) < 0);
    T_EQ_STR(e.field, "algorithm");
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_stats_median_p95_mean);
    TEST_RUN(test_stats_percentile_nearest_rank);
    TEST_RUN(test_stats_elementwise_max);
    TEST_RUN(test_busbw_factor);
    TEST_RUN(test_op_buffers);
    TEST_RUN(test_op_names_match_spec);
    TEST_RUN(test_expected_matches_reference);
    TEST_RUN(test_inputs_exact_and_varied);
    TEST_RUN(test_inplace_inputs_must_change);
    TEST_RUN(test_count_wrong);
    TEST_RUN(test_bench_single_rank_reports);
    TEST_RUN(test_bench_catches_skipped_writes);
    TEST_RUN(test_bench_rejects_unsupported);
    return test_end();
}
