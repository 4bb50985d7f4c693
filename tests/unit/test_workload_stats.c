/* Unit tests for the pure parts of worker/workload_collective: statistics (median, p95
 * by nearest rank, mean, min, max in microseconds), the element-wise max that makes an
 * iteration as slow as its slowest rank, the nccl-tests bus bandwidth factors, and the
 * input/expected functions (expected == sum over ranks of the inputs, exactly, and a
 * wrong or shifted result is counted). Also a one-rank benchmark run through a real
 * store and communicator, checking the collective event rank 0 writes. */
#include <fcntl.h>
#include <jansson.h>
#include <unistd.h>

#include "comm.h"
#include "report.h"
#include "spec.h"
#include "store_client.h"
#include "store_server.h"
#include "tcp.h"
#include "test.h"
#include "workload_collective.h"

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
    T_NEAR(collective_percentile_sorted(v, 100, 95), 95, 0);
    T_NEAR(collective_percentile_sorted(v, 100, 50), 50, 0);
    T_NEAR(collective_percentile_sorted(v, 100, 100), 100, 0);
    T_NEAR(collective_percentile_sorted(v, 100, 0), 1, 0);
    T_NEAR(collective_percentile_sorted(v, 20, 95), 19, 0); /* ceil(19.0) */
    T_NEAR(collective_percentile_sorted(v, 21, 95), 20, 0); /* ceil(19.95) */
    T_NEAR(collective_percentile_sorted(v, 10, 95), 10, 0); /* ceil(9.5) */
    T_NEAR(collective_median_sorted(v, 3), 2, 0);
    T_NEAR(collective_median_sorted(v, 0), 0, 0);
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
    T_NEAR(collective_busbw_factor("allreduce", 1), 0, 1e-12);
    T_NEAR(collective_busbw_factor("allreduce", 2), 1, 1e-12);
    T_NEAR(collective_busbw_factor("allreduce", 4), 1.5, 1e-12);
    T_NEAR(collective_busbw_factor("allreduce", 8), 1.75, 1e-12);
    T_NEAR(collective_busbw_factor("reduce_scatter", 4), 0.75, 1e-12);
    T_NEAR(collective_busbw_factor("all_gather", 2), 0.5, 1e-12);
    T_NEAR(collective_busbw_factor("broadcast", 8), 1, 1e-12);
    T_NEAR(collective_busbw_factor("nonsense", 8), 0, 0);
    enum collective_op op;
    T_EQ_INT(collective_op_parse("allreduce", &op), 0);
    T_CHECK(collective_op_parse("alltoall", &op) < 0);
}

static void test_inputs_and_expected(void)
{
    int worlds[] = {1, 2, 3, 7, 17, 18, 40};
    int64_t seeds[] = {0, 1, 12345};
    for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; w++) {
        for (size_t s = 0; s < 3; s++) {
            struct collective_expect x;
            collective_expect_init(&x, seeds[s], worlds[w]);
            for (size_t i = 0; i < 3000; i += 7) {
                int sum = 0;
                for (int r = 0; r < worlds[w]; r++) {
                    int v = collective_input(seeds[s], r, i);
                    T_CHECK(v >= -8 && v <= 8);
                    sum += v;
                }
                T_CHECK_MSG((float)sum == collective_expected(&x, i),
                            "world %d seed %lld i %zu: %d vs %g", worlds[w],
                            (long long)seeds[s], i, sum, (double)collective_expected(&x, i));
            }
        }
    }
    /* ranks and indices get different values */
    int differ_rank = 0, differ_index = 0;
    for (size_t i = 0; i < 100; i++) {
        differ_rank += collective_input(1, 0, i) != collective_input(1, 1, i);
        differ_index += collective_input(1, 0, i) != collective_input(1, 0, i + 1);
    }
    T_CHECK(differ_rank > 50);
    T_CHECK(differ_index > 50);
}

static void test_fill_and_count_wrong(void)
{
    struct err e;
    enum { N = 1000, W = 3 };
    float sum[N] = {0}, in[N];
    for (int r = 0; r < W; r++) {
        T_OK(collective_fill_inputs(in, COMM_FLOAT32, N, 9, r, &e));
        for (int i = 0; i < N; i++)
            sum[i] += in[i];
    }
    struct collective_expect x;
    collective_expect_init(&x, 9, W);
    T_EQ_INT(collective_count_wrong(sum, COMM_FLOAT32, N, &x), 0);
    sum[17] += 1;
    sum[500] = -sum[500] - 1;
    T_EQ_INT(collective_count_wrong(sum, COMM_FLOAT32, N, &x), 2);
    /* a result shifted by one element is almost all wrong */
    T_CHECK(collective_count_wrong(sum + 1, COMM_FLOAT32, N - 1, &x) > N / 2);
    int32_t ints[4];
    T_CHECK(collective_fill_inputs(ints, COMM_INT32, 4, 9, 0, &e) < 0);
    T_EQ_INT(e.code, ERR_INVALID);
}

/* One rank, real store and communicator: the benchmark emits a checked collective event
 * and a progress event per size. */
static void test_bench_single_rank_reports(void)
{
    struct err e;
    struct store_server *srv = store_server_create("127.0.0.1", 0, &e);
    T_CHECK(srv != NULL);
    T_OK(store_server_add_run(srv, "bench", "pw", &e));
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", store_server_port(srv));
    struct store_client *sc = store_client_connect(addr, "bench", "pw", 0, 2000, NULL, &e);
    T_CHECK(sc != NULL);
    struct comm_tcp_config cfg = {.rank = 0, .world_size = 1, .listen_host = "127.0.0.1",
                                  .timeout_ms = 5000, .algorithm = "auto", .secret = "pw"};
    struct comm *c = comm_tcp_create(&cfg, sc, &e);
    T_CHECK(c != NULL);
    int pfd[2];
    T_CHECK(pipe(pfd) == 0);
    struct report_writer w;
    report_writer_init(&w, pfd[1], 0);
    struct spec s;
    memset(&s, 0, sizeof s);
    s.world_size = 1;
    s.repeats = 1;
    s.seed = 3;
    snprintf(s.coll.op, sizeof s.coll.op, "allreduce");
    snprintf(s.coll.dtype, sizeof s.coll.dtype, "float32");
    snprintf(s.coll.redop, sizeof s.coll.redop, "sum");
    s.coll.iters = 4;
    s.coll.warmup = 1;
    s.coll.check = true;
    struct collective_bench b;
    T_OK(collective_bench_init(&b, &s, c, sc, &w, 4096, 3, &e));
    int64_t sizes[] = {1, 6, 4096}; /* 1 byte rounds up to one element */
    int rc = collective_bench_run_sizes(&b, 0, sizes, 3, &e);
    collective_bench_cleanup(&b);
    close(pfd[1]);
    char text[16384];
    ssize_t n = read(pfd[0], text, sizeof text - 1);
    close(pfd[0]);
    comm_destroy(c);
    store_client_destroy(sc);
    store_server_destroy(srv);
    T_CHECK_MSG(rc == 0, "%s", e.msg);
    T_CHECK(n > 0);
    text[n] = '\0';
    int collectives = 0, progress = 0;
    int64_t counts[3] = {0};
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        enum report_type type;
        json_t *ev = report_parse_line(line, strlen(line), &type, &e);
        T_CHECK_MSG(ev != NULL, "%s", e.msg);
        if (type == REPORT_COLLECTIVE) {
            struct report_collective rc2;
            int ok = report_collective_from_json(ev, &rc2, &e);
            json_decref(ev);
            T_OK(ok);
            T_EQ_INT(rc2.wrong, 0);
            T_EQ_INT(rc2.iters, 4);
            T_EQ_STR(rc2.algorithm, "local");
            T_CHECK(rc2.time_us_min <= rc2.time_us_median && rc2.time_us_median <= rc2.time_us_max);
            counts[collectives++] = rc2.count;
        } else {
            progress += type == REPORT_PROGRESS;
            json_decref(ev);
        }
    }
    T_EQ_INT(collectives, 3);
    T_EQ_INT(progress, 3);
    T_EQ_INT(counts[0], 1);
    T_EQ_INT(counts[1], 1);
    T_EQ_INT(counts[2], 1024);
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
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_stats_median_p95_mean);
    TEST_RUN(test_stats_percentile_nearest_rank);
    TEST_RUN(test_stats_elementwise_max);
    TEST_RUN(test_busbw_factor);
    TEST_RUN(test_inputs_and_expected);
    TEST_RUN(test_fill_and_count_wrong);
    TEST_RUN(test_bench_single_rank_reports);
    TEST_RUN(test_bench_rejects_unsupported);
    return test_end();
}
