/* conv_bench: times one 3x3 stride-1 convolution layer of the CPU engine per pass (forward,
 * backward data, backward weights) under three algorithms, interleaved round by round, to
 * decide where worker/nn/winograd.c's own Winograd, F(4x4, 3x3) or F(2x2, 3x3), beats
 * oneDNN's direct kernel (conv2d.c conv_own_prefers, conv_own_tile). A benchmark, not a
 * test: it prints medians, never pass/fail.
 *
 *   [CONV_BENCH_CLOCK=cpu] conv_bench CIN COUT H W BATCH THREADS [ROUNDS]
 *
 * The input arrives in nChw8c, the layout the neighbouring oneDNN layers choose on AVX2;
 * run it with ONEDNN_MAX_CPU_ISA=AVX2 to emulate an AVX2 CPU (there NN_CONV_WINOGRAD is
 * ours). Backward data is timed as backward with the input gradient minus backward
 * without it. Prints one line per algorithm: forward, backward data, backward weights and
 * their sum in ms, the algorithm's name and our tile (0: not ours). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/bench/bench_time.h"
#include "worker/nn/layers.h"

struct cb_run {
    /* CONV_BENCH_CLOCK=cpu: the process's CPU time (all threads) instead of wall time, for
     * a machine shared with other work, where preemption, not the kernel, rules the wall
     * time (run it with OMP_WAIT_POLICY=passive, so no thread spins at a barrier) */
    clockid_t clk;
    struct nn_conv2d_fast f;
    float *x, *y, *dy, *dx, *w, *dw;
};

/* times[0..2]: forward, backward (weights only), backward (data and weights) */
static void cb_time(struct cb_run *r, double *times)
{
    double t0 = bench_time_now(r->clk);
    nn_conv2d_fast_forward(&r->f, r->y, r->x, r->w, NULL);
    double t1 = bench_time_now(r->clk);
    nn_conv2d_fast_backward(&r->f, NULL, r->dw, NULL, r->dy, r->x, r->w);
    double t2 = bench_time_now(r->clk);
    nn_conv2d_fast_backward(&r->f, r->dx, r->dw, NULL, r->dy, r->x, r->w);
    double t3 = bench_time_now(r->clk);
    times[0] = t1 - t0, times[1] = t2 - t1, times[2] = t3 - t2;
}

static int cb_init(struct cb_run *r, struct nn_dnnl *d, const struct nn_conv2d_cfg *c,
                   struct nn_shape in, const dnnl_memory_desc_t *md, struct err *e)
{
    if (nn_conv2d_fast_init(&r->f, d, c, in, md, 1, 1, e))
        return -1;
    size_t xb = nn_md_bytes(md), yb = nn_md_bytes(&r->f.dst_md);
    size_t wb = nn_conv2d_weight_len(c) * sizeof(float);
    r->x = nn_alloc(xb), r->dx = nn_alloc(xb), r->y = nn_alloc(yb), r->dy = nn_alloc(yb);
    r->w = nn_alloc(wb), r->dw = nn_alloc(wb);
    for (size_t i = 0; i < xb / sizeof(float); i++)
        r->x[i] = (float)((i * 7919) % 101) / 101.0f - 0.5f;
    for (size_t i = 0; i < yb / sizeof(float); i++)
        r->dy[i] = (float)((i * 104729) % 97) / 97.0f - 0.5f;
    for (size_t i = 0; i < wb / sizeof(float); i++)
        r->w[i] = (float)((i * 31) % 17) / 170.0f - 0.05f;
    return 0;
}

enum { NA = 3 }; /* direct, ours F(4,3), ours F(2,3) */

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: conv_bench CIN COUT H W BATCH THREADS [ROUNDS]\n");
        return 2;
    }
    int cin = atoi(argv[1]), cout = atoi(argv[2]), h = atoi(argv[3]), w = atoi(argv[4]);
    int batch = atoi(argv[5]), rounds = argc > 7 ? atoi(argv[7]) : 20;
    const char *clk = getenv("CONV_BENCH_CLOCK");
    clockid_t clock_id = clk && strcmp(clk, "cpu") == 0 ? CLOCK_PROCESS_CPUTIME_ID
                                                        : CLOCK_MONOTONIC;
    nn_set_threads(atoi(argv[6]));
    struct nn_conv2d_cfg c = nn_conv2d_square(cin, cout, 3, 1, 1, 1, 0);
    struct nn_shape in = nn_shape4(batch, cin, h, w);
    dnnl_dims_t dims = {batch, cin, h, w};
    dnnl_memory_desc_t md;
    nn_md_tag(&md, 4, dims, dnnl_nChw8c);
    enum nn_conv_algo algos[NA] = {NN_CONV_DIRECT, NN_CONV_WINOGRAD, NN_CONV_WINOGRAD};
    int tiles[NA] = {0, 4, 2}; /* ours forced to F(4x4, 3x3), then F(2x2, 3x3) */
    struct nn_dnnl d[NA];
    struct cb_run r[NA];
    struct err e;
    for (int a = 0; a < NA; a++) {
        if (nn_dnnl_init(&d[a], &e))
            return fprintf(stderr, "conv_bench: %s\n", e.msg), 1;
        d[a].conv_algo = algos[a];
        d[a].wino_tile = tiles[a];
        if (cb_init(&r[a], &d[a], &c, in, &md, &e))
            return fprintf(stderr, "conv_bench: %s\n", e.msg), 1;
        r[a].clk = clock_id;
    }
    double *t = calloc((size_t)rounds * NA * 3, sizeof *t), scratch[3];
    for (int a = 0; a < NA; a++) /* warm-up */
        cb_time(&r[a], scratch);
    for (int k = 0; k < rounds; k++)
        for (int a = 0; a < NA; a++)
            cb_time(&r[a], t + (size_t)k * NA * 3 + (size_t)a * 3);
    double *col = malloc((size_t)rounds * sizeof *col);
    for (int a = 0; a < NA; a++) {
        double med[3];
        for (int p = 0; p < 3; p++) {
            for (int k = 0; k < rounds; k++)
                col[k] = t[(size_t)k * NA * 3 + (size_t)a * 3 + (size_t)p];
            med[p] = bench_time_median(col, rounds) * 1e3;
        }
        double fwd = med[0], bwd_w = med[1], bwd_d = med[2] - med[1];
        printf(
            "conv %d->%d %dx%d batch %d: %-15s tile %d fwd %.3f bwd-data %.3f bwd-weights %.3f "
            "total %.3f ms\n",
            cin, cout, h, w, batch, nn_conv2d_algo_name(&r[a].f), tiles[a], fwd, bwd_d, bwd_w,
            fwd + bwd_d + bwd_w);
    }
    return 0;
}
