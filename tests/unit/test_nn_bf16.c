/* Unit tests for bf16 training on the CPU (worker/nn/bf16.h, onednn.h enum nn_bf16).
 *
 * - The rounding kernel (AVX2) against the scalar reference (worker/comm/reduce.h's
 *   float -> bf16 -> float), bit for bit, on random values of every magnitude, exact ties
 *   (both directions of ties-to-even), the largest finite values (which round to inf),
 *   subnormals, infinities and NaNs, at lengths that leave a scalar tail.
 * - The layers: a convolution or inner product in bf16 must compute exactly the fp32
 *   reference (double accumulation) on operands rounded to bf16: src, weights and diff_dst
 *   rounded, outputs not. Both paths run where they can: oneDNN's native bf16 kernels when
 *   nn_dnnl_bf16_probe finds them on this CPU (AVX512-BF16), and the emulated one always
 *   (forced). Tolerance 1e-4 of the output's scale: the products of bf16 values are exact
 *   in fp32, so only fp32 accumulation separates the two (~1e-6); a path that forgot to
 *   round an operand is off by its rounding, ~2^-9 = 2e-3 of the scale, and fails.
 * - A model: mnist-cnn trained in bf16 (each path) and in fp32 from the same parameters
 *   on the same batches: the bf16 loss falls (mean of the last 5 steps below 0.8 of the
 *   first step's), and after 30 SGD steps the parameters' distance from the fp32 run's is
 *   under 10 % of how far the fp32 run moved them (bf16's gradients differ from fp32's by
 *   ~2^-8 relative per operand; measured here it is ~1 %, while training in fp32 on
 *   unrounded operands with a broken backward moves it by O(100 %)). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bf16.h"
#include "tests/unit/nn_check.h"
#include "tests/unit/test.h"
#include "worker/nn/bf16.h"
#include "worker/nn/layers.h"
#include "worker/nn/model.h"
#include "worker/nn/models.h"
#include "worker/nn/nn.h"
#include "worker/nn/onednn.h"

static float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float ref_round(float x)
{
    return bf16_to_float(bf16_from_float(x));
}

/* Rounded copy of x (malloc'd). */
static float *rounded(const float *x, size_t n)
{
    float *r = malloc(n * sizeof *r);
    for (size_t i = 0; i < n; i++)
        r[i] = ref_round(x[i]);
    return r;
}

/* ---- the kernel -------------------------------------------------------------------- */

static void test_bf16_round_matches_reference(void)
{
    enum { N = 4099 }; /* 512 AVX2 steps and a tail of 3 */
    static float x[N], a[N], s[N];
    uint64_t st = 12345;
    for (size_t i = 0; i < N; i++) {
        st = st * 6364136223846793005ULL + 1442695040888963407ULL;
        uint32_t u = (uint32_t)(st >> 32);
        switch (i % 8) {
        case 0: x[i] = bits_float(u); break;                               /* any pattern */
        case 1: x[i] = bits_float((u & 0xffff0000u) | 0x8000u); break;     /* an exact tie */
        case 2: x[i] = bits_float((u & 0x807f0000u) | 0x7f7f8000u); break; /* huge, ties */
        case 3: x[i] = bits_float(u & 0x807fffffu); break;                 /* subnormal */
        case 4: x[i] = bits_float((u & 0x80000000u) | 0x7f800000u); break; /* inf */
        case 5: x[i] = bits_float(u | 0x7f800001u); break;                 /* NaN */
        default: x[i] = (float)((double)(int32_t)u / 65536.0); break;      /* ordinary */
        }
    }
    memcpy(a, x, sizeof x);
    memcpy(s, x, sizeof x);
    nn_bf16_round_with(a, N, true);
    nn_bf16_round_with(s, N, false);
    size_t bad = 0, nans = 0;
    for (size_t i = 0; i < N; i++) {
        float want = ref_round(x[i]);
        if (isnan(x[i]))
            nans += isnan(a[i]) && isnan(s[i]);
        if (float_bits(a[i]) != float_bits(want) || float_bits(s[i]) != float_bits(want)) {
            if (bad++ < 5)
                fprintf(stderr, "    %08x: avx2 %08x scalar %08x want %08x\n", float_bits(x[i]),
                        float_bits(a[i]), float_bits(s[i]), float_bits(want));
        }
        T_CHECK((float_bits(a[i]) & 0xffffu) == 0); /* bf16 has 16 bits */
    }
    T_EQ_INT(bad, 0);
    T_CHECK(nans > 0);
    /* ties to even, both ways, and the largest finite value up to inf */
    float t[] = {bits_float(0x3f808000u), bits_float(0x3f818000u), bits_float(0x7f7fffffu),
                 1.0f, -2.5f};
    nn_bf16_round(t, 5);
    T_EQ_INT(float_bits(t[0]), 0x3f800000u); /* 1 + 2^-8: the even neighbour is 1 */
    T_EQ_INT(float_bits(t[1]), 0x3f820000u); /* odd below: up */
    T_CHECK(isinf(t[2]));
    T_CHECK(t[3] == 1.0f && t[4] == -2.5f); /* exact values stay */
}

/* ---- the layers -------------------------------------------------------------------- */

struct conv_case {
    struct nn_conv2d_cfg c;
    int n, h, w;
};

#define CONV(ci, co, k, s, p, g, b)                                                            \
    {                                                                                          \
        .cin = ci, .cout = co, .kh = k, .kw = k, .sh = s, .sw = s, .ph = p, .pw = p, .dh = 1,  \
        .dw = 1, .groups = g, .bias = b                                                        \
    }

static const struct conv_case conv_cases[] = {
    {CONV(1, 32, 3, 1, 0, 1, 1), 4, 28, 28},  /* mnist-cnn conv1 */
    {CONV(32, 64, 3, 1, 0, 1, 1), 4, 12, 12}, /* mnist-cnn conv2 (smaller image) */
    {CONV(3, 64, 3, 1, 1, 1, 0), 2, 16, 16},  /* resnet18-cifar stem */
    {CONV(64, 128, 1, 2, 0, 1, 0), 2, 8, 8},  /* 1x1 downsample */
    {CONV(32, 32, 3, 1, 1, 32, 0), 2, 8, 8},  /* depthwise */
};

static const char *path_name(enum nn_bf16 p)
{
    return nn_bf16_path_name(p);
}

/* The paths this CPU can run: the emulated one always, native where oneDNN has it. */
static int paths(enum nn_bf16 out[2])
{
    struct nn_dnnl d;
    struct err e;
    int n = 0;
    if (nn_dnnl_init(&d, &e) == 0) {
        if (nn_dnnl_bf16_probe(&d) == NN_BF16_NATIVE)
            out[n++] = NN_BF16_NATIVE;
        nn_dnnl_cleanup(&d);
    }
    out[n++] = NN_BF16_EMULATED;
    fprintf(stderr, "    bf16 paths here: %s%s\n", n == 2 ? "onednn-native, " : "",
            "emulated-storage");
    return n;
}

static int conv_bf16_case(enum nn_bf16 path, const struct conv_case *k, int seed)
{
    struct nn_dnnl d;
    struct err e;
    if (nn_dnnl_init(&d, &e))
        return 0;
    d.bf16 = path;
    d.conv_algo = NN_CONV_DIRECT;
    struct nn_shape in = nn_shape4(k->n, k->c.cin, k->h, k->w), out;
    nn_conv2d_shape(&k->c, in, &out, &e);
    size_t nx = nn_shape_numel(in), ny = nn_shape_numel(out), nw = nn_conv2d_weight_len(&k->c);
    float *x = nn_check_randn(nx, seed, 0, 1), *w = nn_check_randn(nw, seed + 1, 0, 0.3f);
    float *b = nn_check_randn(k->c.cout, seed + 2, 0, 1),
          *dy = nn_check_randn(ny, seed + 3, 0, 1);
    float *xr = rounded(x, nx), *wr = rounded(w, nw), *dyr = rounded(dy, ny);
    float *y = malloc(ny * sizeof *y), *dx = malloc(nx * sizeof *dx);
    float *dw = nn_check_filled(nw, 0), *db = nn_check_filled(k->c.cout, 0);
    const float *bias = k->c.bias ? b : NULL;
    nn_conv2d_forward(y, xr, wr, bias, &k->c, in);
    nn_conv2d_backward(dx, dw, k->c.bias ? db : NULL, dyr, xr, wr, &k->c, in);
    dnnl_memory_desc_t src_md;
    nn_md_plain(&src_md, in);
    struct nn_conv2d_fast f;
    int ok = nn_conv2d_fast_init(&f, &d, &k->c, in, &src_md, 1, 1, &e) == 0;
    if (!ok)
        fprintf(stderr, "    init: %s\n", e.msg);
    float *fy = NULL, *fdx = NULL, *fdy = NULL;
    float *fdw = nn_check_filled(nw, 0), *fdb = nn_check_filled(k->c.cout, 0);
    if (ok) {
        fy = nn_alloc(nn_md_bytes(&f.dst_md));
        fdx = nn_alloc(nn_md_bytes(&src_md));
        fdy = nn_check_to_layout(&d, &f.dst_md, out, dy);
        nn_conv2d_fast_forward(&f, fy, x, w, bias);
        nn_conv2d_fast_backward(&f, fdx, fdw, k->c.bias ? fdb : NULL, fdy, x, w);
        ok = nn_dnnl_check(&d, &e) == 0;
        float *py = nn_check_to_plain(&d, &f.dst_md, out, fy);
        ok = ok && nn_check_close_rel("bf16 conv out", py, y, ny, 1e-4) &&
             nn_check_close_rel("bf16 conv dinp", fdx, dx, nx, 1e-4) &&
             nn_check_close_rel("bf16 conv dweight", fdw, dw, nw, 1e-4) &&
             (!k->c.bias || nn_check_close_rel("bf16 conv dbias", fdb, db, k->c.cout, 1e-4));
        if (!ok)
            fprintf(stderr, "    %s: forward %s\n", path_name(path), nn_prim_impl(&f.fwd));
        free(py);
    }
    nn_conv2d_fast_destroy(&f);
    float *bufs[] = {x, w, b, dy, xr, wr, dyr, y, dx, dw, db, fy, fdx, fdy, fdw, fdb};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
    nn_dnnl_cleanup(&d);
    return ok;
}

static void test_bf16_conv_rounds_operands(void)
{
    enum nn_bf16 p[2];
    int np = paths(p);
    for (int j = 0; j < np; j++)
        for (size_t i = 0; i < sizeof conv_cases / sizeof *conv_cases; i++)
            T_CHECK_MSG(conv_bf16_case(p[j], &conv_cases[i], 10 * (int)i), "%s, conv case %zu",
                        path_name(p[j]), i);
}

static int linear_bf16_case(enum nn_bf16 path, int n, int fin, int fout, int seed)
{
    struct nn_dnnl d;
    struct err e;
    if (nn_dnnl_init(&d, &e))
        return 0;
    d.bf16 = path;
    struct nn_linear_cfg c = {.in = fin, .out = fout, .bias = 1};
    size_t nx = (size_t)n * fin, ny = (size_t)n * fout, nw = (size_t)fin * fout;
    float *x = nn_check_randn(nx, seed, 0, 1), *w = nn_check_randn(nw, seed + 1, 0, 0.3f);
    float *b = nn_check_randn(fout, seed + 2, 0, 1), *dy = nn_check_randn(ny, seed + 3, 0, 1);
    float *xr = rounded(x, nx), *wr = rounded(w, nw), *dyr = rounded(dy, ny);
    float *y = malloc(ny * sizeof *y), *dx = malloc(nx * sizeof *dx);
    float *dw = nn_check_filled(nw, 0), *db = nn_check_filled(fout, 0);
    float *fy = malloc(ny * sizeof *fy), *fdx = malloc(nx * sizeof *fdx);
    float *fdw = nn_check_filled(nw, 0), *fdb = nn_check_filled(fout, 0);
    nn_linear_forward(y, xr, wr, b, &c, n);
    nn_linear_backward(dx, dw, db, dyr, xr, wr, &c, n);
    struct nn_linear_fast f;
    int ok = nn_linear_fast_init(&f, &d, &c, n, 1, 1, &e) == 0;
    if (!ok)
        fprintf(stderr, "    init: %s\n", e.msg);
    if (ok) {
        nn_linear_fast_forward(&f, fy, x, w, b);
        nn_linear_fast_backward(&f, fdx, fdw, fdb, dy, x, w);
        ok = nn_dnnl_check(&d, &e) == 0 &&
             nn_check_close_rel("bf16 linear out", fy, y, ny, 1e-4) &&
             nn_check_close_rel("bf16 linear dinp", fdx, dx, nx, 1e-4) &&
             nn_check_close_rel("bf16 linear dweight", fdw, dw, nw, 1e-4) &&
             nn_check_close_rel("bf16 linear dbias", fdb, db, fout, 1e-4);
        if (!ok)
            fprintf(stderr, "    %s: forward %s\n", path_name(path), nn_prim_impl(&f.fwd));
        nn_linear_fast_destroy(&f);
    }
    float *bufs[] = {x, w, b, dy, xr, wr, dyr, y, dx, dw, db, fy, fdx, fdw, fdb};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
    nn_dnnl_cleanup(&d);
    return ok;
}

static void test_bf16_linear_rounds_operands(void)
{
    enum nn_bf16 p[2];
    int np = paths(p);
    for (int j = 0; j < np; j++) {
        T_CHECK_MSG(linear_bf16_case(p[j], 8, 9216, 128, 1), "%s: mnist-cnn fc1",
                    path_name(p[j]));
        T_CHECK_MSG(linear_bf16_case(p[j], 5, 37, 10, 2), "%s: odd sizes", path_name(p[j]));
    }
}

/* ---- a model ----------------------------------------------------------------------- */

#define MB 16
#define MSTEPS 30

/* mnist-cnn for MSTEPS SGD steps (lr 0.05) on 4 fixed batches in turn, from the same
 * initial parameters; bf16: the path. The final parameters (malloc'd) and each step's
 * loss into losses. */
static float *train_mnist(enum nn_bf16 bf16, const float *x, const int32_t *y, double *losses,
                          size_t *np, float **init, struct err *e)
{
    struct nn_model m;
    nn_model_init(&m);
    nn_model_set_bf16(&m, bf16);
    float *out = NULL;
    if (nn_models_build(&m, "mnist-cnn", 1, 28, 28, 10, NULL, e) < 0 ||
        nn_model_init_params(&m, 5, e) < 0 ||
        nn_model_prepare(&m, MB, NN_BACKEND_FAST, 1, e) < 0)
        goto out;
    if (nn_model_bf16_path(&m) != bf16) {
        err_set(e, ERR_INTERNAL, NULL, "path %d prepared as %d", (int)bf16,
                (int)nn_model_bf16_path(&m));
        goto out;
    }
    if (init) {
        *init = malloc(m.nparams * sizeof(float));
        memcpy(*init, m.params.data, m.nparams * sizeof(float));
    }
    for (int s = 0; s < MSTEPS; s++) {
        int right;
        const float *bx = x + (size_t)(s % 4) * MB * 784;
        nn_model_zero_grad(&m);
        if (nn_model_forward(&m, bx, 1, (uint64_t)s, e) < 0 ||
            nn_model_loss(&m, y + (s % 4) * MB, MB, &losses[s], &right, e) < 0 ||
            nn_model_backward(&m, NULL, NULL, e) < 0)
            goto out;
        for (size_t i = 0; i < m.nparams; i++)
            m.params.data[i] -= 0.05f * m.grads.data[i];
    }
    *np = m.nparams;
    out = malloc(m.nparams * sizeof *out);
    memcpy(out, m.params.data, m.nparams * sizeof *out);
out:
    nn_model_destroy(&m);
    return out;
}

static void test_bf16_mnist_cnn_trains(void)
{
    /* 4 batches of "digits": class k lights up a band of rows, with noise */
    float *x = nn_check_randn((size_t)4 * MB * 784, 3, 0, 0.3f);
    int32_t y[4 * MB];
    for (int i = 0; i < 4 * MB; i++) {
        y[i] = (i * 7) % 10;
        for (int p = y[i] * 56; p < y[i] * 56 + 112 && p < 784; p++)
            x[(size_t)i * 784 + (size_t)p] += 1.5f;
    }
    struct err e = {0};
    double l32[MSTEPS], l16[MSTEPS];
    size_t n32 = 0, n16 = 0;
    float *init = NULL;
    float *p32 = train_mnist(NN_BF16_OFF, x, y, l32, &n32, &init, &e);
    T_CHECK_MSG(p32 != NULL, "fp32: %s", e.msg);
    enum nn_bf16 p[2];
    int np = paths(p);
    for (int j = 0; p32 && j < np; j++) {
        float *p16 = train_mnist(p[j], x, y, l16, &n16, NULL, &e);
        T_CHECK_MSG(p16 != NULL, "%s: %s", path_name(p[j]), e.msg);
        if (!p16)
            continue;
        double last = 0, moved = 0, apart = 0;
        for (int s = MSTEPS - 5; s < MSTEPS; s++)
            last += l16[s] / 5;
        for (size_t i = 0; i < n32; i++) {
            moved += ((double)p32[i] - init[i]) * ((double)p32[i] - init[i]);
            apart += ((double)p16[i] - p32[i]) * ((double)p16[i] - p32[i]);
        }
        moved = sqrt(moved);
        apart = sqrt(apart);
        fprintf(stderr,
                "    %s: loss %.4f -> %.4f (fp32 %.4f -> %.4f); |p16 - p32| %.3g, fp32 "
                "moved %.3g (%.2f %%)\n",
                path_name(p[j]), l16[0], last, l32[0], l32[MSTEPS - 1], apart, moved,
                100 * apart / moved);
        T_CHECK_MSG(last < 0.8 * l16[0], "%s: the loss did not fall", path_name(p[j]));
        T_CHECK_MSG(apart < 0.1 * moved, "%s: %.3g apart of %.3g moved", path_name(p[j]), apart,
                    moved);
        free(p16);
    }
    free(p32);
    free(init);
    free(x);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    nn_set_threads(2);
    TEST_RUN(test_bf16_round_matches_reference);
    TEST_RUN(test_bf16_conv_rounds_operands);
    TEST_RUN(test_bf16_linear_rounds_operands);
    TEST_RUN(test_bf16_mnist_cnn_trains);
    return test_end();
}
