/* Unit tests for daemon/perf: the fit recovers a known alpha and beta from synthetic
 * timings (with multiplicative noise, and without), the reduction term is separated only
 * where an all_gather stands beside, fits move across world sizes through the algorithm's
 * cost, and the step simulation reproduces schedules computed by hand for two and three
 * buckets under every strategy, and under each framework engine's own bucketing. */
#include <math.h>
#include <string.h>

#include "common/buckets.h"
#include "daemon/model.h"
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

/* 2-rank fits of algorithm alg over 4 KiB .. 64 MiB: allreduce 100 us + 1 ns/B, op
 * a + b per byte, all_gather 100 us + 0.5 ns/B. */
static void fits3(struct perf_fit *fs, const char *alg, const char *op, double a, double b)
{
    fs[0] = fit_of("allreduce", alg, 2, 100e-6, 1e-9, 4096, 1 << 26);
    fs[1] = fit_of(op, alg, 2, a, b, 4096, 1 << 26);
    fs[2] = fit_of("all_gather", alg, 2, 100e-6, 0.5e-9, 4096, 1 << 26);
}

/* The network of fits fs[0..n): tcp on the CPU, one node, the algorithm left to it. */
static struct perf_net net_of(const struct perf_fit *fs, size_t n)
{
    return (struct perf_net){.fits = fs,
                             .n = n,
                             .backend = "tcp",
                             .device = "cpu",
                             .network_profile = "",
                             .algorithm = "auto",
                             .nodes = 1};
}

static void test_perf_schedules(void)
{
    struct perf_fit fs[3];
    fits3(fs, "ring", "reduce_scatter", 100e-6, 0.5e-9);
    struct perf_net net = net_of(fs, 3);
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

/* A calibration's slowdowns (issue 35): measured k read as they are, k between two
 * measured ones interpolated, k beyond the last and the cores time-sliced (k / cores x
 * the slowdown at cores x (1 + switch / quantum)), and an oversubscribed ring's first
 * operation waiting (1 - cores / k) x half a quantum per message in sequence. */
static void test_perf_contention(void)
{
    const struct perf_calib_point pts[3] = {
        {1, {1, 1, 1}}, {2, {1.4, 1.6, 1.2}}, {4, {2.8, 3.2, 2.0}}};
    struct perf_calib c = {
        .pts = pts, .n = 3, .cores = 2, .switch_s = 5e-6, .quantum_s = 1.5e-3};
    struct perf_contention x;
    T_CHECK(perf_contention_at(&c, 1, &x) == 0);
    T_NEAR(x.slow[PERF_FORWARD], 1, 1e-12);
    T_NEAR(x.msg_wait_s, 0, 1e-15);
    T_CHECK(perf_contention_at(&c, 2, &x) == 0);
    T_NEAR(x.slow[PERF_BACKWARD], 1.6, 1e-12);
    T_NEAR(x.msg_wait_s, 0, 1e-15); /* two ranks on two cores: each has its own */
    /* k = 3: halfway between 2 and 4; one rank too many for 2 cores */
    T_CHECK(perf_contention_at(&c, 3, &x) == 0);
    T_NEAR(x.slow[PERF_FORWARD], 2.1, 1e-12);
    T_NEAR(x.slow[PERF_BACKWARD], 2.4, 1e-12);
    T_NEAR(x.slow[PERF_OPTIMIZER], 1.6, 1e-12);
    T_NEAR(x.msg_wait_s, (1 - 2.0 / 3) * 0.75e-3, 1e-15);
    /* k = 8, beyond the last measured: 8 / 2 x the slowdown at 2 cores x 1.00333 */
    T_CHECK(perf_contention_at(&c, 8, &x) == 0);
    T_NEAR(x.slow[PERF_FORWARD], 4 * 1.4 * (1 + 5e-6 / 1.5e-3), 1e-12);
    T_NEAR(x.slow[PERF_OPTIMIZER], 4 * 1.2 * (1 + 5e-6 / 1.5e-3), 1e-12);
    T_NEAR(x.msg_wait_s, 0.75 * 0.75e-3, 1e-15);
    /* measured to 2 on 4 cores: up to the cores the last k's, then time-sliced from it */
    c.n = 2;
    c.cores = 4;
    T_CHECK(perf_contention_at(&c, 3, &x) == 0);
    T_NEAR(x.slow[PERF_BACKWARD], 1.6, 1e-12);
    T_NEAR(x.msg_wait_s, 0, 1e-15);
    T_CHECK(perf_contention_at(&c, 6, &x) == 0);
    T_NEAR(x.slow[PERF_BACKWARD], 1.5 * 1.6 * (1 + 5e-6 / 1.5e-3), 1e-12);
    T_NEAR(x.msg_wait_s, (1 - 4.0 / 6) * 0.75e-3, 1e-15);
    /* nothing measured: no contention */
    c.n = 0;
    T_CHECK(perf_contention_at(&c, 2, &x) < 0);
    T_CHECK(perf_contention_at(NULL, 2, &x) < 0);
    T_CHECK(perf_contention_busy(&c, 2, 0.5, &x) < 0);
    /* a ratio measured below 1 (the one-rank reference's noise) reads 1 */
    const struct perf_calib_point low[2] = {{1, {1, 1, 1}}, {2, {0.83, 1.3, 0.9}}};
    struct perf_calib cl = {.pts = low, .n = 2, .cores = 2, .quantum_s = 1.5e-3};
    T_CHECK(perf_contention_at(&cl, 2, &x) == 0);
    T_NEAR(x.slow[PERF_FORWARD], 1, 1e-12);
    T_NEAR(x.slow[PERF_BACKWARD], 1.3, 1e-12);
    T_NEAR(x.slow[PERF_OPTIMIZER], 1, 1e-12);
    T_CHECK(perf_contention_at(&cl, 4, &x) == 0); /* time-sliced from the 1 it reads */
    T_NEAR(x.slow[PERF_FORWARD], 2, 1e-12);
}

/* Ranks busy a share u of the step (a pipeline's stages): the slowdown a busy one meets is
 * the expectation over how many of the others compute with it, binomially (j of n busy:
 * C(n, j) u^j (1 - u)^(n - j)). 4 ranks on 2 cores, u = 0.42 (resnet18's 4 stages): the
 * others' count is 0, 1, 2, 3 with 0.195, 0.424, 0.307, 0.074, the slowdowns at 1 to 4
 * ranks those of perf_contention_at. busy 1: exactly k's. */
static void test_perf_contention_busy(void)
{
    T_NEAR(perf_busy_weight(3, 0.42, 0), 0.58 * 0.58 * 0.58, 1e-12);
    T_NEAR(perf_busy_weight(3, 0.42, 1), 3 * 0.42 * 0.58 * 0.58, 1e-12);
    T_NEAR(perf_busy_weight(3, 0.42, 2), 3 * 0.42 * 0.42 * 0.58, 1e-12);
    T_NEAR(perf_busy_weight(3, 0.42, 3), 0.42 * 0.42 * 0.42, 1e-12);
    T_NEAR(perf_busy_weight(3, 0.42, 4), 0, 1e-12);
    T_NEAR(perf_busy_weight(0, 0.42, 0), 1, 1e-12);
    const struct perf_calib_point pts[3] = {
        {1, {1, 1, 1}}, {2, {1.15, 1.05, 1.03}}, {4, {2.35, 2.35, 2.25}}};
    struct perf_calib c = {
        .pts = pts, .n = 3, .cores = 2, .switch_s = 3e-6, .quantum_s = 1.5e-3};
    struct perf_contention x, at[4];
    for (int k = 1; k <= 4; k++)
        T_CHECK(perf_contention_at(&c, k, &at[k - 1]) == 0);
    T_CHECK(perf_contention_busy(&c, 4, 0.42, &x) == 0);
    for (int p = 0; p < PERF_NPHASES; p++) {
        double want = 0;
        for (int j = 0; j < 4; j++)
            want += perf_busy_weight(3, 0.42, j) * at[j].slow[p];
        T_NEAR(x.slow[p], want, 1e-12);
    }
    /* by hand, forward: 0.195 x 1 + 0.424 x 1.15 + 0.307 x 1.75 (k = 3, halfway) + 0.074 x
     * 2.35 */
    T_NEAR(x.slow[PERF_FORWARD],
           0.58 * 0.58 * 0.58 + 3 * 0.42 * 0.58 * 0.58 * 1.15 + 3 * 0.42 * 0.42 * 0.58 * 1.75 +
               0.42 * 0.42 * 0.42 * 2.35,
           1e-12);
    T_NEAR(x.msg_wait_s, at[3].msg_wait_s, 1e-15);
    T_CHECK(perf_contention_busy(&c, 4, 1, &x) == 0);
    T_NEAR(x.slow[PERF_BACKWARD], 2.35, 1e-12);
    T_CHECK(perf_contention_busy(&c, 4, 0, &x) == 0); /* nobody else ever computes */
    T_NEAR(x.slow[PERF_BACKWARD], 1, 1e-12);
}

/* The step with a calibration's contention: each phase slowed by its own factor, the
 * backward window and readiness by backward's, the first exchange's messages waiting for
 * their descheduled peers; pred_contention is the compute's ratio. Computed by hand. */
static void test_perf_contention_step(void)
{
    struct perf_fit fs[1] = {fit_of("allreduce", "ring", 2, 100e-6, 1e-9, 4096, 1 << 26)};
    struct perf_net net = net_of(fs, 1);
    struct perf_base b = base3();
    struct perf_setup s = {.strategy = PERF_NAIVE,
                           .world = 4,
                           .bucket_bytes = 2 << 20,
                           .fusion_bytes = 64 << 20,
                           .wire = 1,
                           .compute_scale = 3.2,
                           .has_contention = true,
                           .contention = {.slow = {2.8, 3.2, 2.0}, .msg_wait_s = 0.375e-3}};
    struct perf_step st;
    T_CHECK(perf_simulate(&b, &s, &net, &st) == 0);
    /* the 2-rank fit at 4 ranks: 6 messages of 50 us, 1.5 x 1 ns per byte */
    double op = 6 * 50e-6 + 1.5e-9 * 1048576;
    T_NEAR(st.forward_s, 0.0056, 1e-12);
    T_NEAR(st.backward_s, 0.0128, 1e-12);
    T_NEAR(st.optimizer_s, 0.002, 1e-12);
    T_NEAR(st.data_s, 0.0032, 1e-12);
    T_NEAR(st.exposed_s, 3 * op + 6 * 0.375e-3, 1e-12);
    T_NEAR(st.contention, (0.0056 + 0.0128 + 0.002) / 0.007, 1e-12);
    T_NEAR(st.step_s, 0.0032 + 0.0056 + 0.0128 + 0.002 + 3 * op + 6 * 0.375e-3, 1e-12);
    /* without: the core share's single factor, and the contention reads it */
    s.has_contention = false;
    s.compute_scale = 2;
    T_CHECK(perf_simulate(&b, &s, &net, &st) == 0);
    T_NEAR(st.contention, 2, 1e-12);
    T_NEAR(st.exposed_s, 3 * op, 1e-12);
    s.compute_scale = 1;
    T_CHECK(perf_simulate(&b, &s, &net, &st) == 0);
    T_NEAR(st.contention, 1, 1e-12);
}

/* The framework engines' own exchanges on base3 (docs/model.md "The framework engines"),
 * each schedule computed by hand. */
static void test_perf_engines(void)
{
    struct perf_fit fs[3];
    fits3(fs, "gloo", "broadcast", 50e-6, 1e-9);
    struct perf_net net = net_of(fs, 3);
    struct perf_base b = base3();
    struct perf_step st;
    double t1 = 100e-6 + 1e-9 * 1048576, t2 = 100e-6 + 1e-9 * 2097152;
    /* torch DDP, bucket_cap_mb 25: the 1 MiB first bucket is tensor 0 alone ([1, 2.149)
     * ms), then {1, 2}, ready at 3 ms: [3, 5.197) ms, 1.197 ms past backward's 4 ms */
    struct perf_setup s = {.strategy = PERF_DDP,
                           .exchange = PERF_EXCHANGE_TORCH_DDP,
                           .world = 2,
                           .bucket_bytes = 25 << 20,
                           .fusion_bytes = 64 << 20,
                           .cycle_ms = 1,
                           .wire = 1,
                           .compute_scale = 1};
    T_CHECK(perf_simulate(&b, &s, &net, &st) == 0);
    double e1 = 0.003 + t2 - 0.004;
    T_EQ_INT(st.ops, 2);
    T_NEAR(st.exposed_s, e1, 1e-12);
    T_NEAR(st.comm_s, t1 + t2, 1e-12);
    T_NEAR(st.window_s, 0.004, 1e-12);
    T_NEAR(st.step_s, 0.008 + e1, 1e-12);
    /* no core for gloo's thread: both after backward, exposed whole */
    s.no_spare_core = true;
    T_CHECK(perf_simulate(&b, &s, &net, &st) == 0);
    T_NEAR(st.exposed_s, t1 + t2, 1e-12);
    T_NEAR(st.window_s, 0, 1e-12);
    s.no_spare_core = false;
    /* ZeroRedundancyOptimizer: DDP's, then each parameter broadcast from its owner after
     * the step on half the optimizer's work (3 x 50 us + 1 MiB at 1 ns/B) */
    s.exchange = PERF_EXCHANGE_TORCH_ZERO1;
    s.strategy = PERF_ZERO1;
    T_CHECK(perf_simulate(&b, &s, &net, &st) == 0);
    double bc = 50e-6 + 1e-9 * 1048576;
    T_EQ_INT(st.ops, 5);
    T_NEAR(st.exposed_s, e1 + 3 * bc, 1e-12);
    T_NEAR(st.optimizer_s, 0.0005, 1e-12);
    T_NEAR(st.step_s, 0.007 + 0.0005 + e1 + 3 * bc, 1e-12);
    /* Horovod, 2 ms cycles: {0} (cycle 0) launched at its end, 2 ms: [2, 3.149) ms; {1, 2}
     * (cycle 1, ready 3 ms) at 4 ms: [4, 6.197) ms, all 2.197 ms past backward */
    T_EQ_INT((int)perf_horovod_launch_ns(1000000, 2000000), 2000000);
    T_EQ_INT((int)perf_horovod_launch_ns(2000000, 2000000), 4000000);
    T_EQ_INT((int)perf_horovod_launch_ns(1234, 0), 1234);
    s.exchange = PERF_EXCHANGE_HOROVOD;
    s.strategy = PERF_HOROVOD;
    s.cycle_ms = 2;
    T_CHECK(perf_simulate(&b, &s, &net, &st) == 0);
    T_EQ_INT(st.ops, 2);
    T_NEAR(st.exposed_s, t2, 1e-12);
    T_NEAR(st.comm_s, t1 + t2, 1e-12);
    T_NEAR(st.optimizer_s, 0.001, 1e-12);
    /* DeepSpeed ZeRO, bucket 2 MiB: {0, 1} and {2} all-reduced after backward, the step on
     * half, then 3 MiB // 2 MiB = 1 shard: one all_gather of 3 MiB */
    s.exchange = PERF_EXCHANGE_DEEPSPEED;
    s.strategy = PERF_ZERO2;
    s.bucket_bytes = 2 << 20;
    T_CHECK(perf_simulate(&b, &s, &net, &st) == 0);
    double ag = 100e-6 + 0.5e-9 * 3145728;
    T_EQ_INT(st.ops, 3);
    T_NEAR(st.exposed_s, t2 + t1 + ag, 1e-12);
    T_NEAR(st.optimizer_s, 0.0005, 1e-12);
    T_NEAR(st.window_s, 0, 1e-12);
    /* 1 MiB buckets: three all_gather shards of 1 MiB each */
    s.bucket_bytes = 1 << 20;
    T_CHECK(perf_simulate(&b, &s, &net, &st) == 0);
    T_EQ_INT(st.ops, 6);
    T_NEAR(st.exposed_s, 3 * t1 + 3 * (100e-6 + 0.5e-9 * 1048576), 1e-12);
    /* no broadcast fit: ZeroRedundancyOptimizer's step cannot be timed */
    s.exchange = PERF_EXCHANGE_TORCH_ZERO1;
    net.n = 1;
    T_CHECK(perf_simulate(&b, &s, &net, &st) < 0);
}

/* Which exchange and which fits an engine's run is predicted from (daemon/model.c): gloo
 * for the framework engines on tcp, each engine's own schedule, a sentence where none. */
static void test_model_engine_choice(void)
{
    json_t *spec = json_pack("{s:s, s:s, s:s}", "engine", "pytorch", "backend", "tcp",
                             "strategy", "ddp");
    T_EQ_STR(model_backend_of(spec), "gloo");
    json_object_set_new(spec, "engine", json_string("horovod"));
    T_EQ_STR(model_backend_of(spec), "gloo");
    T_CHECK(strstr(model_no_fit_note(spec), "engine pytorch"));
    json_object_set_new(spec, "backend", json_string("mpi"));
    T_EQ_STR(model_backend_of(spec), "mpi");
    json_object_set_new(spec, "engine", json_string("ddpbench"));
    json_object_set_new(spec, "backend", json_string("tcp"));
    T_EQ_STR(model_backend_of(spec), "tcp");
    json_decref(spec);
    static const struct {
        const char *engine, *strategy;
        enum perf_exchange x;
    } sim[] = {{"ddpbench", "zero2", PERF_EXCHANGE_WORKER},
               {"pytorch", "ddp", PERF_EXCHANGE_TORCH_DDP},
               {"pytorch", "zero1", PERF_EXCHANGE_TORCH_ZERO1},
               {"lightning", "ddp", PERF_EXCHANGE_TORCH_DDP},
               {"horovod", "horovod", PERF_EXCHANGE_HOROVOD},
               {"deepspeed", "zero2", PERF_EXCHANGE_DEEPSPEED}};
    enum perf_exchange x;
    const char *why;
    for (size_t i = 0; i < sizeof sim / sizeof *sim; i++) {
        T_EQ_INT(model_exchange_of(sim[i].engine, sim[i].strategy, &x, &why), 0);
        T_EQ_INT(x, sim[i].x);
        T_CHECK(!why);
    }
    T_EQ_INT(model_exchange_of("tensorflow", "ddp", &x, &why), -1);
    T_CHECK(why && strstr(why, "tf.function"));
    T_EQ_INT(model_exchange_of("pytorch", "dp", &x, &why), -1);
    T_CHECK(why && strstr(why, "DataParallel"));
    T_EQ_INT(model_exchange_of("script", "ddp", &x, &why), -1);
    T_CHECK(why && strstr(why, "script"));
}

/* DeepSpeed's buckets close before a tensor would overflow them; PyTorch's once full. */
static void test_buckets_by_limit(void)
{
    const int64_t bytes[4] = {4, 4, 8, 1};
    int bounds[5];
    T_EQ_INT(buckets_by_limit(bytes, 4, 6, bounds), 4);
    for (int i = 0; i < 5; i++)
        T_EQ_INT(bounds[i], i);
    T_EQ_INT(buckets_by_size(bytes, 4, 6, 6, bounds), 3);
    T_EQ_INT(bounds[1], 2);
    T_EQ_INT(bounds[2], 3);
    T_EQ_INT(buckets_by_limit(bytes, 4, 9, bounds), 2); /* {4, 4}, {8, 1} */
    T_EQ_INT(bounds[1], 2);
    T_EQ_INT(bounds[2], 4);
    T_EQ_INT(buckets_by_limit(bytes, 0, 9, bounds), 0);
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

/* The fits fs[0..n) of TCP on the CPU under profile, on nodes nodes. */
static struct perf_net tcp_net(const struct perf_fit *fs, size_t n, const char *profile,
                               int nodes)
{
    return (struct perf_net){.fits = fs,
                             .n = n,
                             .backend = "tcp",
                             .device = "cpu",
                             .network_profile = profile,
                             .algorithm = "auto",
                             .nodes = nodes};
}

/* Across nodes: 2 nodes of 2 ranks. Inside a node, a 2-rank ring allreduce fit of 20 us +
 * 1 ns/B (link: 10 us per message, 1 ns/B); between nodes, a 1gbe fit of 100 us + 8 ns/B
 * at 2 ranks on 2 nodes (leaders' allreduce at world 2: exactly the fit). */
static void test_perf_hier(void)
{
    struct perf_fit fs[2] = {
        fit_of("allreduce", "ring", 2, 20e-6, 1e-9, 4096, 1 << 26),
        fit_of("allreduce", "ring", 2, 100e-6, 8e-9, 4096, 1 << 26),
    };
    fs[1].nodes = 2;
    snprintf(fs[1].network_profile, sizeof fs[1].network_profile, "1gbe");
    bool used[2] = {false, false};
    struct perf_net net = tcp_net(fs, 2, "1gbe", 2), intra = net;
    net.used = intra.used = used;
    intra.nodes = 1;
    intra.network_profile = "";
    net.intra = &intra;
    net.per_node = 2;
    net.hier_from = 64 << 10;
    double mib = 1048576;
    /* chain reduce: 1 message + 1 MiB at 1 ns/B; leaders: the fit; broadcast: the same */
    double in = 10e-6 + 1e-9 * mib, out = 100e-6 + 8e-9 * mib;
    struct perf_link l = {.latency_s = 10e-6, .s_per_byte = 1e-9};
    T_NEAR(perf_hier_time(&l, 2, out, mib), 2 * in + out, 1e-12);
    T_NEAR(perf_net_time(&net, "allreduce", 4, mib), 2 * in + out, 1e-12);
    T_CHECK(used[0] && used[1]);
    /* a reduction term in the intra link is paid once, by the reduce */
    l.gamma_s_per_byte = 0.5e-9;
    T_NEAR(perf_hier_time(&l, 2, out, mib), 2 * in + 0.5e-9 * mib + out, 1e-12);
    /* one rank per node: no intra-node part at all */
    T_NEAR(perf_hier_time(&l, 1, out, mib), out, 1e-12);
    /* below 64 KiB the flat ring: both fits moved to 4 ranks (6 messages, 1.5 B/B), the
     * slower link paces it: 6 * 50 us + 1.5 * 8 ns * 4096 across nodes */
    double flat = 6 * 50e-6 + 1.5 * 8e-9 * 4096;
    T_NEAR(perf_net_time(&net, "allreduce", 4, 4096), flat, 1e-12);
    T_NEAR(perf_slowest_time(flat, 6 * 10e-6 + 1.5 * 1e-9 * 4096), flat, 0);
    T_NEAR(perf_slowest_time(-1, 2.0), 2.0, 0);
    T_NEAR(perf_slowest_time(3.0, -1), 3.0, 0);
    T_NEAR(perf_slowest_time(1.0, 2.0), 2.0, 0); /* the intra link can be the slower */
    /* a forced flat ring never runs hierarchically */
    net.hier_from = -1;
    T_NEAR(perf_net_time(&net, "allreduce", 4, mib), 6 * 50e-6 + 1.5 * 8e-9 * mib, 1e-12);
    /* without a fit inside one node the hierarchical allreduce has no price */
    net.hier_from = 0;
    intra.backend = "gloo";
    T_CHECK(perf_net_time(&net, "allreduce", 4, mib) < 0);
    intra.backend = "tcp";
    /* this very placement measured (4 ranks on 2 nodes, hier as the worker ran it): the
     * measurement, not the composition */
    struct perf_fit four[3] = {fs[0], fs[1],
                               fit_of("allreduce", "hier", 4, 300e-6, 9e-9, 4096, 1 << 26)};
    four[2].nodes = 2;
    snprintf(four[2].network_profile, sizeof four[2].network_profile, "1gbe");
    net.fits = intra.fits = four;
    net.n = intra.n = 3;
    net.used = intra.used = NULL;
    T_NEAR(perf_net_time(&net, "allreduce", 4, mib), 300e-6 + 9e-9 * mib, 1e-12);
    net.fits = intra.fits = fs;
    net.n = intra.n = 2;
    /* nor without the link's fit */
    net.network_profile = "10gbe";
    T_CHECK(perf_net_time(&net, "allreduce", 4, mib) < 0);
}

/* The range of the fits used: world sizes, nodes, the base's ranks; what lies outside. */
static void test_perf_range(void)
{
    struct perf_fit fs[3] = {
        fit_of("allreduce", "ring", 2, 20e-6, 1e-9, 4096, 1 << 26),
        fit_of("allreduce", "ring", 4, 20e-6, 1e-9, 4096, 1 << 26),
        fit_of("allreduce", "ring", 2, 100e-6, 8e-9, 4096, 1 << 26),
    };
    fs[2].nodes = 2;
    bool used[3] = {true, true, false};
    struct perf_range r;
    char text[128];
    perf_range_of(fs, 3, used, 1, &r);
    T_EQ_INT(r.world_lo, 2);
    T_EQ_INT(r.world_hi, 4);
    T_EQ_INT(r.nodes_hi, 1);
    perf_range_text(&r, text, sizeof text);
    T_EQ_STR(text, "fits world 2-4, 1 node; base 1 rank");
    T_CHECK(perf_range_extrapolates(&r, 8, 1));  /* beyond the largest world measured */
    T_CHECK(!perf_range_extrapolates(&r, 4, 1)); /* measured */
    T_CHECK(!perf_range_extrapolates(&r, 3, 1)); /* between two measured: interpolated */
    T_CHECK(perf_range_extrapolates(&r, 4, 2));  /* two nodes from one node's fits */
    T_CHECK(!perf_range_extrapolates(&r, 4, 0)); /* nodes not known: world alone */
    T_CHECK(!perf_range_extrapolates(&r, 1, 1)); /* one rank exchanges nothing */
    perf_range_of(fs, 3, NULL, 1, &r);
    perf_range_text(&r, text, sizeof text);
    T_EQ_STR(text, "fits world 2-4, 1-2 nodes; base 1 rank");
    T_CHECK(!perf_range_extrapolates(&r, 2, 2));
    perf_range_of(fs, 3, (bool[3]){false, false, false}, 2, &r);
    perf_range_text(&r, text, sizeof text);
    T_EQ_STR(text, "no fit (a described link); base 2 ranks");
    T_CHECK(!perf_range_extrapolates(&r, 64, 8));
    /* pred_max_world 2: the 4-rank fit goes, the order of the rest stays */
    size_t n = 3;
    perf_fits_restrict(fs, &n, 2);
    T_EQ_INT((int)n, 2);
    T_EQ_INT(fs[0].world_size, 2);
    T_EQ_INT(fs[1].nodes, 2);
    perf_fits_restrict(fs, &n, 0); /* 0: all kept */
    T_EQ_INT((int)n, 2);
    perf_fits_restrict(fs, &n, 1); /* no fit of one rank */
    T_EQ_INT((int)n, 0);
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
    TEST_RUN(test_perf_contention);
    TEST_RUN(test_perf_contention_busy);
    TEST_RUN(test_perf_contention_step);
    TEST_RUN(test_perf_engines);
    TEST_RUN(test_buckets_by_limit);
    TEST_RUN(test_model_engine_choice);
    TEST_RUN(test_perf_hier);
    TEST_RUN(test_perf_range);
    return test_end();
}
