/* Unit tests for daemon/perf: the fit recovers a known alpha and beta from synthetic
 * timings (with multiplicative noise, and without), the reduction term is separated only
 * where an all_gather stands beside, fits move across world sizes through the algorithm's
 * cost, and the step simulation reproduces schedules computed by hand for two and three
 * buckets under every strategy. */
#include <math.h>
#include <string.h>

#include "daemon/perf.h"
#include "tests/unit/test.h"

static struct perf_fit fit_of(const char *op, const char *alg, int world, double a, double b,
                              int64_t lo, int64_t hi)
{
    struct perf_fit f = {0};
    snprintf(f.backend, sizeof f.backend, "tcp");
    snprintf(f.device, sizeof f.device, "cpu");
    snprintf(f.op, sizeof f.op, "%s", op);
    snprintf(f.algorithm, sizeof f.algorithm, "%s", alg);
    f.world_size = world;
    f.nodes = 1;
    f.alpha_s = a;
    f.beta_s = b;
    f.gamma_s = NAN;
    f.min_bytes = lo;
    f.max_bytes = hi;
    return f;
}

/* 4 KiB .. 64 MiB by 2: alpha 50 us, beta 1 ns/B; exact, then with +-3 % noise. */
static void test_perf_fit_recovers(void)
{
    struct perf_sample s[15];
    size_t n = 0;
    for (double b = 4096; b <= 64.0 * 1048576; b *= 2)
        s[n++] = (struct perf_sample){b, 50e-6 + 1e-9 * b};
    struct perf_fit f = {0};
    T_CHECK(perf_fit_line(s, n, &f) == 0);
    T_NEAR(f.alpha_s, 50e-6, 1e-9);
    T_NEAR(f.beta_s, 1e-9, 1e-15);
    T_NEAR(f.r2, 1.0, 1e-9);
    T_CHECK(f.worst_resid < 1e-9);
    T_EQ_INT(f.points, (int)n);
    T_EQ_INT(f.min_bytes, 4096);
    T_EQ_INT(f.max_bytes, 64 << 20);
    /* alternating noise: the relative weights keep alpha from drowning in 64 MiB's */
    for (size_t i = 0; i < n; i++)
        s[i].seconds *= i % 2 ? 1.03 : 0.97;
    T_CHECK(perf_fit_line(s, n, &f) == 0);
    T_NEAR(f.alpha_s / 50e-6, 1.0, 0.05);
    T_NEAR(f.beta_s / 1e-9, 1.0, 0.05);
    T_CHECK(f.r2 > 0.99 && f.r2 < 1.0);
    T_NEAR(f.worst_resid, 0.03, 0.02);
    /* one size: no line */
    T_CHECK(perf_fit_line(s, 1, &f) < 0);
    struct perf_sample same[2] = {{4096, 1e-5}, {4096, 2e-5}};
    T_CHECK(perf_fit_line(same, 2, &f) < 0);
    /* a pure bandwidth curve never gets a negative latency */
    struct perf_sample bw[3] = {{1000, 0.9e-6}, {2000, 2e-6}, {4000, 4.1e-6}};
    T_CHECK(perf_fit_line(bw, 3, &f) == 0);
    T_CHECK(f.alpha_s >= 0);
    T_NEAR(f.beta_s, 1e-9, 0.1e-9);
}

/* Ring allreduce at 2 ranks -> 8 ranks: per-message latency and per-byte time carried
 * over by the cost formula, checked against the formula written out. */
static void test_perf_fit_moves_world(void)
{
    struct perf_fit f = fit_of("allreduce", "ring", 2, 40e-6, 2e-9, 4096, 1 << 26);
    struct perf_link l;
    perf_link_of(&f, &l);
    T_NEAR(l.latency_s, 40e-6 / 2, 1e-12);   /* 2(N-1) = 2 messages */
    T_NEAR(l.s_per_byte, 2e-9 / 1.0, 1e-18); /* 2(N-1)/N = 1 */
    double t8 = perf_link_time(&l, "allreduce", "ring", 8, 1e6);
    T_NEAR(t8, 14 * 20e-6 + 1.75 * 2e-9 * 1e6, 1e-12);
    T_NEAR(perf_link_time(&l, "allreduce", "ring", 1, 1e6), 0, 0);
    /* rd: log2 N messages and whole-buffer steps */
    struct perf_cost c;
    perf_cost_of("allreduce", "rd", 4, &c);
    T_NEAR(c.lat, 2, 0);
    T_NEAR(c.bw, 2, 0);
    perf_cost_of("all_gather", "ring", 4, &c);
    T_NEAR(c.red, 0, 0);
    T_NEAR(c.bw, 0.75, 1e-12);
    /* through perf_net_time: only a 2-rank fit, asked at 8 */
    struct perf_net net = {.fits = &f,
                           .n = 1,
                           .backend = "tcp",
                           .device = "cpu",
                           .network_profile = "",
                           .algorithm = "auto",
                           .nodes = 1};
    T_NEAR(perf_net_time(&net, "allreduce", 8, 1e6), t8, 1e-12);
    T_NEAR(perf_net_time(&net, "allreduce", 2, 1e6), 40e-6 + 2e-3, 1e-12);
    T_CHECK(perf_net_time(&net, "all_gather", 2, 1e6) < 0); /* no fit of that op */
    net.backend = "nccl";
    T_CHECK(perf_net_time(&net, "allreduce", 2, 1e6) < 0);
}

/* gamma: reduce_scatter's beta minus what the same bytes cost an all_gather. */
static void test_perf_gamma_separated(void)
{
    struct perf_fit fs[3] = {
        fit_of("reduce_scatter", "ring", 4, 30e-6, 1.0e-9, 4096, 1 << 20),
        fit_of("all_gather", "ring", 4, 30e-6, 0.75e-9, 4096, 1 << 20),
        fit_of("allreduce", "ring", 2, 30e-6, 1.0e-9, 4096, 1 << 20), /* no all_gather at 2 */
    };
    perf_fits_separate(fs, 3);
    T_NEAR(fs[0].gamma_s, 0.25e-9, 1e-18);
    T_CHECK(isnan(fs[1].gamma_s));
    T_CHECK(isnan(fs[2].gamma_s));
    struct perf_link l;
    perf_link_of(&fs[0], &l);
    T_NEAR(l.s_per_byte, 1e-9, 1e-18); /* 0.75e-9 / (3/4) */
    T_NEAR(l.gamma_s_per_byte, 0.25e-9 / 0.75, 1e-18);
}

/* Three tensors of 1 MiB ready at 1, 2 and 3 ms of a 4 ms backward; a 2-rank fit of
 * 100 us + 1 ns/B (1 MiB: 1.148576 ms). */
static const int64_t tb[3] = {1 << 20, 1 << 20, 1 << 20};
static const int64_t tr[3] = {1000000, 2000000, 3000000};

static struct perf_base base3(void)
{
    return (struct perf_base){.data_s = 0.001,
                              .forward_s = 0.002,
                              .backward_s = 0.004,
                              .optimizer_s = 0.001,
                              .local_s = 0,
                              .nt = 3,
                              .bytes = tb,
                              .ready_ns = tr,
                              .backward_ns = 4000000};
}

static void test_perf_schedules(void)
{
    struct perf_fit fs[3] = {
        fit_of("allreduce", "ring", 2, 100e-6, 1e-9, 4096, 1 << 26),
        fit_of("reduce_scatter", "ring", 2, 100e-6, 0.5e-9, 4096, 1 << 26),
        fit_of("all_gather", "ring", 2, 100e-6, 0.5e-9, 4096, 1 << 26),
    };
    struct perf_net net = {.fits = fs,
                           .n = 3,
                           .backend = "tcp",
                           .device = "cpu",
                           .network_profile = "",
                           .algorithm = "auto",
                           .nodes = 1};
    struct perf_base b = base3();
    double t1 = 100e-6 + 1e-9 * 1048576; /* one tensor's allreduce */
    struct perf_step st;
    /* ddp: first bucket (1 MiB cap) = tensor 0 alone; then cap 2 MiB takes tensors 1, 2.
     * op 0: [1 ms, 2.1486 ms); op 1 (ready at 3 ms): [3 ms, 3 ms + 0.1 ms + 2.097 ms) */
    struct perf_setup s = {.strategy = PERF_DDP,
                           .world = 2,
                           .bucket_bytes = 2 << 20,
                           .fusion_bytes = 64 << 20,
                           .wire = 1,
                           .compute_scale = 1};
    T_CHECK(perf_simulate(&b, &s, &net, &st) == 0);
    double t2 = 100e-6 + 1e-9 * 2097152, end = 0.003 + t2;
    T_EQ_INT(st.ops, 2);
    T_NEAR(st.exposed_s, end - 0.004, 1e-12);
    T_NEAR(st.comm_s, t1 + t2, 1e-12);
    T_NEAR(st.busy_s, t1 + t2, 1e-12);
    T_NEAR(st.step_s, 0.008 + end - 0.004, 1e-12);
    T_NEAR(st.overlap, 1 - (end - 0.004) / (t1 + t2), 1e-9);
    /* queued: a slow link makes op 0 end after tensor 1's bucket is ready */
    fs[0].beta_s = 2e-9; /* op 0: [1, 3.197) ms; op 1 waits until 3.197 */
    T_CHECK(perf_simulate(&b, &s, &net, &st) == 0);
    double a0 = 100e-6 + 2e-9 * 1048576, a1 = 100e-6 + 2e-9 * 2097152;
    T_NEAR(st.exposed_s, 0.001 + a0 + a1 - 0.004, 1e-12);
    T_NEAR(st.comm_s, a0 + a1, 1e-12); /* launched at 3 ms, in flight since: no gap */
    fs[0].beta_s = 1e-9;
    /* naive: three allreduces after backward, all exposed */
    s.strategy = PERF_NAIVE;
    T_CHECK(perf_simulate(&b, &s, &net, &st) == 0);
    T_EQ_INT(st.ops, 3);
    T_NEAR(st.exposed_s, 3 * t1, 1e-12);
    T_NEAR(st.overlap, 0, 1e-12);
    /* horovod, 2 ms cycles: tensors 0 (cycle 0) and 1, 2 (cycle 1, 2 MiB fits 64 MiB) */
    s.strategy = PERF_HOROVOD;
    s.cycle_ms = 2;
    T_CHECK(perf_simulate(&b, &s, &net, &st) == 0);
    T_EQ_INT(st.ops, 2);
    T_NEAR(st.exposed_s, end - 0.004, 1e-12);
    /* cycle 5 ms: one buffer of all three, ready at 3 ms */
    s.cycle_ms = 5;
    T_CHECK(perf_simulate(&b, &s, &net, &st) == 0);
    T_EQ_INT(st.ops, 1);
    T_NEAR(st.exposed_s, 0.003 + 100e-6 + 1e-9 * 3145728 - 0.004, 1e-12);
    /* zero1, 2 MiB buckets: {0,1}, {2} reduce-scattered after backward, optimizer on
     * half, then the all-gathers */
    s.strategy = PERF_ZERO1;
    T_CHECK(perf_simulate(&b, &s, &net, &st) == 0);
    double rs = 2 * 100e-6 + 0.5e-9 * 3145728, ag = rs;
    T_EQ_INT(st.ops, 4);
    T_NEAR(st.exposed_s, rs + ag, 1e-12);
    T_NEAR(st.optimizer_s, 0.0005, 1e-12);
    T_NEAR(st.step_s, 0.007 + 0.0005 + rs + ag, 1e-12);
    /* zero2: the reduce-scatters overlap ({0,1} ready at 2 ms, {2} at 3 ms) */
    s.strategy = PERF_ZERO2;
    T_CHECK(perf_simulate(&b, &s, &net, &st) == 0);
    double r01 = 100e-6 + 0.5e-9 * 2097152, r2 = 100e-6 + 0.5e-9 * 1048576;
    double rs_end = fmax(0.002 + r01, 0.003) + r2;
    T_NEAR(st.exposed_s, fmax(0, rs_end - 0.004) + ag, 1e-12);
    /* compression halves the bytes; compute shared by two ranks doubles compute */
    s.strategy = PERF_NAIVE;
    s.wire = 0.5;
    s.compute_scale = 2;
    T_CHECK(perf_simulate(&b, &s, &net, &st) == 0);
    T_NEAR(st.exposed_s, 3 * (100e-6 + 0.5e-9 * 1048576), 1e-12);
    T_NEAR(st.forward_s, 0.004, 1e-12);
    /* one rank: the base itself */
    s.world = 1;
    s.compute_scale = 1;
    T_CHECK(perf_simulate(&b, &s, &net, &st) == 0);
    T_NEAR(st.step_s, 0.008, 1e-12);
    T_CHECK(isnan(st.overlap));
    /* no fit for the op: no prediction */
    s.world = 2;
    net.n = 1;
    s.strategy = PERF_ZERO1;
    T_CHECK(perf_simulate(&b, &s, &net, &st) < 0);
}

/* The wait for the slowest of n ranks: E[max of n] - mean by order statistics; one far
 * outlier is left out; one rank waits for nobody. */
static void test_perf_expected_wait(void)
{
    const double u[4] = {1, 2, 3, 4}; /* E[max of 2] = (1*1 + 2*3 + 3*5 + 4*7) / 16 */
    T_NEAR(perf_expected_wait(u, 4, 2), 50.0 / 16 - 2.5, 1e-12);
    T_NEAR(perf_expected_wait(u, 4, 1), 0, 0);
    T_CHECK(perf_expected_wait(u, 4, 64) > perf_expected_wait(u, 4, 8)); /* grows with n */
    T_CHECK(perf_expected_wait(u, 4, 1024) <= 4 - 2.5 + 1e-12);
    const double same[3] = {5, 5, 5};
    T_NEAR(perf_expected_wait(same, 3, 16), 0, 1e-12);
    double x[9] = {10, 10, 10, 10, 11, 11, 11, 11, 11}, xo[10];
    memcpy(xo, x, sizeof x);
    xo[9] = 500; /* a one-off stall */
    T_NEAR(perf_expected_wait(xo, 10, 4), perf_expected_wait(x, 9, 4), 1e-12);
}

/* A described link (10 Gb/s, 20 us) instead of fits. */
static void test_perf_link(void)
{
    struct perf_link l = {.latency_s = 20e-6, .s_per_byte = 1.0 / 1.25e9};
    struct perf_net net = {.backend = "tcp",
                           .device = "cpu",
                           .network_profile = "",
                           .algorithm = "ring",
                           .link = &l};
    T_NEAR(perf_net_time(&net, "allreduce", 4, 4e6), 6 * 20e-6 + 1.5 * 4e6 / 1.25e9, 1e-12);
    T_EQ_INT(perf_strategy_parse("zero2"), PERF_ZERO2);
    T_EQ_INT(perf_strategy_parse("bogus"), -1);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_perf_fit_recovers);
    TEST_RUN(test_perf_fit_moves_world);
    TEST_RUN(test_perf_gamma_separated);
    TEST_RUN(test_perf_schedules);
    TEST_RUN(test_perf_expected_wait);
    TEST_RUN(test_perf_link);
    return test_end();
}
