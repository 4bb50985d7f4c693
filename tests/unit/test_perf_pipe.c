/* Unit tests for daemon/perf_pipe: the pipeline schedules simulated against timelines
 * computed by hand. Equal stages give GPipe's bubble (P - 1) / (M + P - 1) under both
 * schedules, and 1f1b holds fewer micro-batches; unequal stages, transfers, the tied
 * weight, the replicas' exchange and the optimizer land where the hand timeline puts
 * them; bad input is refused. */
#include <math.h>
#include <string.h>

#include "daemon/perf_pipe.h"
#include "tests/unit/test.h"

/* A gpipe pipeline of P stages and M micro-batches over the arrays given (borrowed). */
static struct perf_pipe pipe_of(int P, int M, const double *fw, const double *bw,
                                const double *c, const double *opt)
{
    return (struct perf_pipe){.stages = P,
                              .micro_batches = M,
                              .schedule = PERF_PIPE_GPIPE,
                              .forward_s = fw,
                              .backward_s = bw,
                              .p2p_s = c,
                              .optimizer_s = opt};
}

/* P equal stages, forward f and backward b per micro-batch, nothing else. */
static int equal_stages(int P, int M, enum perf_pipe_schedule sch, double f, double b,
                        struct perf_pipe_step *out)
{
    double fw[8], bw[8], zero[8] = {0};
    for (int s = 0; s < P; s++) {
        fw[s] = f;
        bw[s] = b;
    }
    struct perf_pipe p = pipe_of(P, M, fw, bw, zero, zero);
    p.schedule = sch;
    return perf_pipe_simulate(&p, out);
}

/* Equal stages: the step is (M + P - 1)(f + b) and the bubble (P - 1) / (M + P - 1),
 * under gpipe and 1f1b alike; gpipe holds M micro-batches, 1f1b min(P, M). */
static void test_pipe_equal_stages(void)
{
    const int Ps[] = {2, 4}, Ms[] = {1, 4, 8};
    for (size_t i = 0; i < 2; i++)
        for (size_t k = 0; k < 3; k++) {
            int P = Ps[i], M = Ms[k];
            struct perf_pipe_step g, o;
            T_CHECK(equal_stages(P, M, PERF_PIPE_GPIPE, 1, 2, &g) == 0);
            T_CHECK(equal_stages(P, M, PERF_PIPE_1F1B, 1, 2, &o) == 0);
            T_NEAR(g.step_s, (M + P - 1) * 3.0, 1e-12);
            T_NEAR(o.step_s, g.step_s, 1e-12);
            T_NEAR(g.bubble, (double)(P - 1) / (M + P - 1), 1e-12);
            T_NEAR(o.bubble, g.bubble, 1e-12);
            T_EQ_INT(g.peak_in_flight, M);
            T_EQ_INT(o.peak_in_flight, P < M ? P : M);
            T_NEAR(g.forward_s, M * 1.0, 1e-12);
            T_NEAR(g.backward_s, M * 2.0, 1e-12);
        }
}

/* P = 2, M = 2, stage 1 twice as slow: f = (1, 2), b = (2, 4). By hand, gpipe:
 *   stage 0: F0 [0,1] F1 [1,2] .......... B1 [9,11] .. B0 [13,15]
 *   stage 1:    F0 [1,3] F1 [3,5] B1 [5,9] B0 [9,13]
 * 1f1b:
 *   stage 0: F0 [0,1] F1 [1,2] .. B0 [7,9] .. B1 [13,15]
 *   stage 1:    F0 [1,3] B0 [3,7] F1 [7,9] B1 [9,13]
 * Both 15; busy 6 and 12: bubble (9/15 + 3/15) / 2 = 0.4. */
static void test_pipe_unequal_stages(void)
{
    double fw[] = {1, 2}, bw[] = {2, 4}, zero[] = {0, 0};
    struct perf_pipe p = pipe_of(2, 2, fw, bw, zero, zero);
    struct perf_pipe_step g, o;
    T_CHECK(perf_pipe_simulate(&p, &g) == 0);
    p.schedule = PERF_PIPE_1F1B;
    T_CHECK(perf_pipe_simulate(&p, &o) == 0);
    T_NEAR(g.step_s, 15, 1e-12);
    T_NEAR(o.step_s, 15, 1e-12);
    T_NEAR(g.bubble, 0.4, 1e-12);
    T_NEAR(o.bubble, 0.4, 1e-12);
    T_NEAR(g.forward_s, (2 * 1 + 2 * 2) / 2.0, 1e-12);
}

/* P = 2, M = 1, f = b = 1, transfer 0.5 each way, data 0.25, optimizer (0.5, 1), a tied
 * weight 0.2 and replicas' exchange (0.3, 0.1). By hand:
 *   stage 0: data [0,.25] F0 [.25,1.25] send [1.25,1.75] ........... B0 [4.25,5.25]
 *   stage 1: data [0,.25] ......... F0 [1.75,2.75] B0 [2.75,3.75] send [3.75,4.25]
 *   the tie: both at 5.25 -> 5.45; then dp + optimizer: 5.45 + .3 + .5 = 6.25 and
 *   5.45 + .1 + 1 = 6.55: the step is 6.55.
 *   busy: stage 0 .25 + 2 + .3 + .5 = 3.05, stage 1 .25 + 2 + .1 + 1 = 3.35;
 *   bubble ((6.55 - 3.05) + (6.55 - 3.35)) / 2 / 6.55. */
static void test_pipe_transfers_and_tail(void)
{
    double fw[] = {1, 1}, bw[] = {1, 1}, c[] = {0.5}, opt[] = {0.5, 1}, dp[] = {0.3, 0.1};
    struct perf_pipe p = pipe_of(2, 1, fw, bw, c, opt);
    p.schedule = PERF_PIPE_1F1B;
    p.dp_s = dp;
    p.tie_s = 0.2;
    p.data_s = 0.25;
    struct perf_pipe_step o;
    T_CHECK(perf_pipe_simulate(&p, &o) == 0);
    T_NEAR(o.step_s, 6.55, 1e-12);
    T_NEAR(o.bubble, (3.5 + 3.2) / 2 / 6.55, 1e-12);
    T_NEAR(o.p2p_s, 0.5, 1e-12); /* each stage sent once: (0.5 + 0.5) / 2 */
    T_NEAR(o.exposed_s, 0.2, 1e-12);
    T_NEAR(o.optimizer_s, 0.75, 1e-12);
    T_NEAR(o.data_s, 0.25, 1e-12);
    p.schedule = PERF_PIPE_GPIPE; /* one micro-batch: the same order */
    struct perf_pipe_step g;
    T_CHECK(perf_pipe_simulate(&p, &g) == 0);
    T_NEAR(g.step_s, 6.55, 1e-12);
}

/* 1f1b with P = 4, M = 8 and a slow last stage: never slower than gpipe here (the last
 * stage is the bottleneck in both), and holds at most P micro-batches. */
static void test_pipe_memory(void)
{
    double fw[] = {1, 1, 1, 3}, bw[] = {2, 2, 2, 6}, c[] = {0.1, 0.1, 0.1},
           zero[] = {0, 0, 0, 0};
    struct perf_pipe p = pipe_of(4, 8, fw, bw, c, zero);
    struct perf_pipe_step g, o;
    T_CHECK(perf_pipe_simulate(&p, &g) == 0);
    p.schedule = PERF_PIPE_1F1B;
    T_CHECK(perf_pipe_simulate(&p, &o) == 0);
    T_EQ_INT(g.peak_in_flight, 8);
    T_EQ_INT(o.peak_in_flight, 4);
    /* the last stage runs its 8 x (3 + 6) back to back after the first forward arrives
     * (3 x (1 + 0.1)), sending each of its first 7 backwards' gradients (0.1 each) on
     * the way; the last gradient then goes back through three stages of a transfer and 2
     * each: the lower bound 1f1b meets */
    double bound = 3 * 1.1 + 72 + 7 * 0.1 + 3 * (0.1 + 2);
    T_CHECK(g.step_s >= bound - 1e-9);
    T_NEAR(o.step_s, bound, 1e-9);
    T_CHECK(o.bubble > 0 && o.bubble < 1);
}

static void test_pipe_bad_input(void)
{
    double one[] = {1}, neg[] = {-1};
    struct perf_pipe p = pipe_of(1, 2, one, one, NULL, one);
    struct perf_pipe_step o;
    T_CHECK(perf_pipe_simulate(&p, &o) == 0); /* one stage: no transfer needed */
    T_NEAR(o.step_s, 2 * 2 + 1, 1e-12);
    T_NEAR(o.bubble, 0, 1e-12);
    p.micro_batches = 0;
    T_CHECK(perf_pipe_simulate(&p, &o) < 0);
    p.micro_batches = 2;
    p.backward_s = neg;
    T_CHECK(perf_pipe_simulate(&p, &o) < 0);
    p.backward_s = one;
    p.stages = 2; /* two stages and no transfer times */
    T_CHECK(perf_pipe_simulate(&p, &o) < 0);
    p.stages = PERF_PIPE_MAX_STAGES + 1;
    T_CHECK(perf_pipe_simulate(&p, &o) < 0);
}

/* A micro-batch's cost against its batch: the line through the two timings (resnet18 on
 * this project's CPU: 7.3 ms forward on 2 samples, 10.5 on 8), proportional without the
 * batch's timing or with a batch timed faster than its micro-batch, floored below the
 * micro-batch by its per-sample cost where the line's fixed cost is negative. */
static void test_pipe_call_ratio(void)
{
    struct perf_pipe_calls r18 = {2, 7.3, 8, 10.5};
    T_NEAR(perf_pipe_call_ratio(&r18, 2, 8), 7.3 / 10.5, 1e-12);
    T_NEAR(perf_pipe_call_ratio(&r18, 4, 8), (7.3 + 3.2 / 6 * 2) / 10.5, 1e-12);
    T_NEAR(perf_pipe_call_ratio(&r18, 8, 8), 1.0, 1e-12);
    T_NEAR(perf_pipe_call_ratio(&r18, 16, 8), (7.3 + 3.2 / 6 * 14) / 10.5, 1e-12);
    struct perf_pipe_calls untimed = {2, 7.3, 0, 0}, noisy = {2, 7.3, 8, 5.0};
    T_NEAR(perf_pipe_call_ratio(&untimed, 2, 8), 0.25, 1e-12);
    T_NEAR(perf_pipe_call_ratio(&noisy, 2, 8), 0.25, 1e-12);
    /* t = 4 + 1.5 (n - 4): at 2 samples the line says 1, the per-sample floor 2 */
    struct perf_pipe_calls super = {4, 4, 8, 10};
    T_NEAR(perf_pipe_call_ratio(&super, 2, 8), 0.2, 1e-12);
    T_NEAR(perf_pipe_call_ratio(&super, 6, 8), 0.7, 1e-12);
    struct perf_pipe_calls one = {8, 10.5, 8, 10.5}; /* one micro-batch: one timing */
    T_NEAR(perf_pipe_call_ratio(&one, 4, 8), 0.5, 1e-12);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_pipe_equal_stages);
    TEST_RUN(test_pipe_unequal_stages);
    TEST_RUN(test_pipe_transfers_and_tail);
    TEST_RUN(test_pipe_memory);
    TEST_RUN(test_pipe_bad_input);
    TEST_RUN(test_pipe_call_ratio);
    return test_end();
}
