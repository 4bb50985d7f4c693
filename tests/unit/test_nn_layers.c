/* Unit tests for worker/nn's layers: every layer's oneDNN path against its plain-loop
 * reference on random inputs (outputs, input gradients, weight and bias gradients, in plain
 * and in blocked layouts), and finite-difference checks of the references.
 *
 * Tolerances, fast vs reference: the references accumulate in double, oneDNN in float with
 * its own summation order, so a result that sums K terms differs by at most about
 * K * 2^-24 of the magnitude of those terms (the worst case; random signs make it closer
 * to sqrt(K) * 2^-24). Our largest K here is a few hundred, so 1e-4 of the tensor's largest
 * magnitude bounds every honest difference with margin, while any indexing or semantic
 * bug (a wrong tap, a missed channel, a dropped bias) moves results by O(1).
 *
 * Finite differences: L = sum(out * R) for a fixed random R, so dL/dinput is the backward
 * of dout = R. Central differences of step h; conv, linear, pooling and add are linear in
 * each input, so the only error is float rounding of L (~1e-7 relative per output, summed
 * in double) divided by 2h: with h = 1e-2 and L's terms O(1) that is below 1e-3. Batch
 * norm is smooth, its truncation error O(h^2) is ~1e-4 at h = 1e-2. Inputs of max pooling
 * and ReLU are spaced so no perturbation crosses a kink. Tolerance 5e-3 absolute plus
 * 5e-3 relative to the larger of the two derivatives. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/nn_check.h"
#include "tests/unit/test.h"
#include "worker/nn/layers.h"
#include "worker/nn/nn.h"
#include "worker/nn/onednn.h"

/* ---- helpers ---------------------------------------------------------------------- */

static float *rnd(size_t n, uint64_t seed, float std)
{
    return nn_check_randn(n, seed, 0, std);
}

static void md_blocked(dnnl_memory_desc_t *md, struct nn_shape s)
{
    dnnl_dims_t dims = {s.n, s.c, s.h, s.w};
    nn_md_tag(md, 4, dims, dnnl_nChw16c);
}

/* ---- conv2d ----------------------------------------------------------------------- */

struct conv_case {
    struct nn_conv2d_cfg c;
    int n, h, w;
};

#define CONV(ci, co, k, s, p, d, g, b)                                                         \
    {                                                                                          \
        .cin = ci, .cout = co, .kh = k, .kw = k, .sh = s, .sw = s, .ph = p, .pw = p, .dh = d,  \
        .dw = d, .groups = g, .bias = b                                                        \
    }

static const struct conv_case conv_cases[] = {
    {CONV(3, 8, 3, 1, 1, 1, 1, 1), 2, 10, 10},   /* 3x3 same */
    {CONV(8, 16, 3, 2, 1, 1, 1, 0), 2, 9, 9},    /* stride 2 */
    {CONV(4, 6, 3, 1, 2, 2, 1, 1), 2, 11, 11},   /* dilation 2 */
    {CONV(8, 12, 3, 1, 1, 1, 2, 1), 2, 7, 7},    /* groups 2 */
    {CONV(16, 16, 3, 2, 1, 1, 16, 0), 2, 8, 8},  /* depthwise */
    {CONV(32, 32, 3, 1, 1, 1, 32, 0), 2, 6, 6},  /* depthwise, 2 blocks */
    {CONV(16, 32, 1, 2, 0, 1, 1, 0), 2, 8, 8},   /* 1x1 downsample */
    {CONV(1, 10, 5, 1, 0, 1, 1, 1), 3, 12, 12},  /* mnist conv1 */
    {CONV(10, 20, 5, 1, 0, 1, 1, 1), 3, 12, 12}, /* mnist conv2: 10 channels */
    {CONV(3, 16, 7, 2, 3, 1, 1, 0), 2, 16, 16},  /* ResNet stem */
    {CONV(16, 24, 3, 1, 1, 1, 1, 1), 3, 1, 1},   /* single pixel (ResNet at 32x32) */
    {CONV(16, 24, 3, 2, 1, 1, 1, 0), 3, 1, 1},   /* single pixel, stride 2 */
    {CONV(8, 12, 5, 1, 2, 1, 1, 0), 2, 1, 1},    /* single pixel, 5x5 */
    {CONV(8, 12, 3, 1, 2, 2, 1, 1), 2, 1, 1},    /* single pixel, dilation 2 */
    {{.cin = 5,
      .cout = 7,
      .kh = 3,
      .kw = 5,
      .sh = 1,
      .sw = 2,
      .ph = 1,
      .pw = 2,
      .dh = 2,
      .dw = 1,
      .groups = 1,
      .bias = 1},
     2,
     9,
     10}, /* asymmetric everything */
    /* Inception's factorised 7x7 (1x7 padded (0, 3), 7x1 padded (3, 0)) and 1x3 */
    {{.cin = 16,
      .cout = 8,
      .kh = 1,
      .kw = 7,
      .sh = 1,
      .sw = 1,
      .ph = 0,
      .pw = 3,
      .dh = 1,
      .dw = 1,
      .groups = 1,
      .bias = 0},
     2,
     6,
     9},
    {{.cin = 8,
      .cout = 16,
      .kh = 7,
      .kw = 1,
      .sh = 1,
      .sw = 1,
      .ph = 3,
      .pw = 0,
      .dh = 1,
      .dw = 1,
      .groups = 1,
      .bias = 0},
     2,
     9,
     6},
    {{.cin = 16,
      .cout = 16,
      .kh = 1,
      .kw = 3,
      .sh = 1,
      .sw = 1,
      .ph = 0,
      .pw = 1,
      .dh = 1,
      .dw = 1,
      .groups = 1,
      .bias = 0},
     2,
     4,
     4},
};

/* fast vs reference for one case, the input arriving in layout src_md */
static int conv_compare(struct nn_dnnl *d, const struct conv_case *k,
                        const dnnl_memory_desc_t *src_md, int seed, double tol)
{
    struct err e;
    struct nn_shape in = nn_shape4(k->n, k->c.cin, k->h, k->w), out;
    if (nn_conv2d_shape(&k->c, in, &out, &e))
        return 0;
    size_t nx = nn_shape_numel(in), ny = nn_shape_numel(out), nw = nn_conv2d_weight_len(&k->c);
    float *x = rnd(nx, seed, 1), *w = rnd(nw, seed + 1, 0.3f), *b = rnd(k->c.cout, seed + 2, 1);
    float *dy = rnd(ny, seed + 3, 1), *y = malloc(ny * sizeof *y),
          *dx = malloc(nx * sizeof *dx);
    float *dw = nn_check_filled(nw, 0.5f), *db = nn_check_filled(k->c.cout, 0.5f);
    float *fdw = nn_check_filled(nw, 0.5f), *fdb = nn_check_filled(k->c.cout, 0.5f);
    const float *bias = k->c.bias ? b : NULL;
    nn_conv2d_forward(y, x, w, bias, &k->c, in);
    nn_conv2d_backward(dx, dw, k->c.bias ? db : NULL, dy, x, w, &k->c, in);
    struct nn_conv2d_fast f;
    int ok = nn_conv2d_fast_init(&f, d, &k->c, in, src_md, 1, 1, &e) == 0;
    if (!ok)
        fprintf(stderr, "    init: %s\n", e.msg);
    float *fx = ok ? nn_check_to_layout(d, src_md, in, x) : NULL;
    float *fy = ok ? nn_alloc(nn_md_bytes(&f.dst_md)) : NULL;
    float *fdy = ok ? nn_check_to_layout(d, &f.dst_md, out, dy) : NULL;
    float *fdx = ok ? nn_alloc(nn_md_bytes(src_md)) : NULL;
    if (ok) {
        nn_conv2d_fast_forward(&f, fy, fx, w, bias);
        nn_conv2d_fast_backward(&f, fdx, fdw, k->c.bias ? fdb : NULL, fdy, fx, w);
        ok = nn_dnnl_check(d, &e) == 0;
        float *py = nn_check_to_plain(d, &f.dst_md, out, fy),
              *pdx = nn_check_to_plain(d, src_md, in, fdx);
        ok = ok && nn_check_close_rel("conv out", py, y, ny, tol) &&
             nn_check_close_rel("conv dinp", pdx, dx, nx, tol) &&
             nn_check_close_acc("conv dweight", fdw, dw, nw, 0.5f, tol) &&
             nn_check_close_acc("conv dbias", fdb, db, k->c.cout, 0.5f, tol);
        if (k->c.bias == 0)
            ok = ok && fdb[0] == 0.5f; /* no bias: its gradient untouched */
        free(py);
        free(pdx);
    }
    nn_conv2d_fast_destroy(&f);
    float *bufs[] = {x, w, b, dy, y, dx, dw, db, fdw, fdb, fx, fy, fdy, fdx};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
    return ok;
}

static void test_conv2d_fast_matches_ref(void)
{
    struct nn_dnnl d;
    struct err e;
    T_OK(nn_dnnl_init(&d, &e));
    for (size_t i = 0; i < sizeof conv_cases / sizeof *conv_cases; i++) {
        const struct conv_case *k = &conv_cases[i];
        struct nn_shape in = nn_shape4(k->n, k->c.cin, k->h, k->w);
        dnnl_memory_desc_t plain, blocked;
        nn_md_plain(&plain, in);
        md_blocked(&blocked, in);
        int ok_plain = conv_compare(&d, k, &plain, (int)i * 10, 1e-4);
        int ok_blocked = conv_compare(&d, k, &blocked, (int)i * 10 + 5, 1e-4);
        if (!ok_plain || !ok_blocked)
            nn_dnnl_cleanup(&d);
        T_CHECK_MSG(ok_plain, "case %zu, plain input", i);
        T_CHECK_MSG(ok_blocked, "case %zu, blocked input", i);
    }
    nn_dnnl_cleanup(&d);
}

/* Winograd F(4x4, 3x3) (3x3 stride-1 layers; oneDNN's choice for large ones under AUTO).
 * Its transforms multiply by constants up to ~10, so its rounding bound is an order above
 * direct convolution's; measured here it stays within 1e-5 of the scale, and 1e-4 (as for
 * direct) still separates rounding from any semantic error. */
static void test_conv2d_winograd_matches_ref(void)
{
    static const struct conv_case wino[] = {
        {CONV(64, 64, 3, 1, 1, 1, 1, 0), 4, 8, 8},
        {CONV(32, 48, 3, 1, 1, 1, 1, 1), 2, 12, 12},
    };
    struct nn_dnnl d;
    struct err e;
    T_OK(nn_dnnl_init(&d, &e));
    d.conv_algo = NN_CONV_WINOGRAD;
    int ok = 1;
    for (size_t i = 0; i < sizeof wino / sizeof *wino && ok; i++) {
        struct nn_shape in = nn_shape4(wino[i].n, wino[i].c.cin, wino[i].h, wino[i].w);
        dnnl_memory_desc_t blocked;
        md_blocked(&blocked, in);
        ok = conv_compare(&d, &wino[i], &blocked, (int)i + 70, 1e-4);
    }
    nn_dnnl_cleanup(&d);
    T_CHECK(ok);
}

struct conv_ctx {
    const struct nn_conv2d_cfg *c;
    struct nn_shape in;
    float *x, *w, *b, *r, *y;
    size_t ny;
};

static double conv_loss(void *p)
{
    struct conv_ctx *k = p;
    nn_conv2d_forward(k->y, k->x, k->w, k->b, k->c, k->in);
    return nn_check_dot(k->y, k->r, k->ny);
}

static void test_conv2d_gradcheck(void)
{
    static const int which[] = {0, 2, 3, 4, 10};
    for (size_t j = 0; j < sizeof which / sizeof *which; j++) {
        const struct conv_case *k = &conv_cases[which[j]];
        struct nn_shape in = nn_shape4(k->n, k->c.cin, k->h, k->w), out;
        struct err e;
        T_OK(nn_conv2d_shape(&k->c, in, &out, &e));
        size_t nx = nn_shape_numel(in), ny = nn_shape_numel(out),
               nw = nn_conv2d_weight_len(&k->c);
        struct conv_ctx c = {.c = &k->c,
                             .in = in,
                             .x = rnd(nx, 1, 1),
                             .w = rnd(nw, 2, 0.3f),
                             .b = k->c.bias ? rnd(k->c.cout, 3, 1) : NULL,
                             .r = rnd(ny, 4, 1),
                             .y = malloc(ny * sizeof(float)),
                             .ny = ny};
        float *dx = malloc(nx * sizeof *dx), *dw = nn_check_filled(nw, 0),
              *db = nn_check_filled(k->c.cout, 0);
        nn_conv2d_backward(dx, dw, c.b ? db : NULL, c.r, c.x, c.w, &k->c, in);
        int ok = nn_check_fd("conv x", c.x, nx, dx, conv_loss, &c, 1e-2f) &&
                 nn_check_fd("conv w", c.w, nw, dw, conv_loss, &c, 1e-2f) &&
                 (!c.b || nn_check_fd("conv b", c.b, k->c.cout, db, conv_loss, &c, 1e-2f));
        float *bufs[] = {c.x, c.w, c.b, c.r, c.y, dx, dw, db};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
            free(bufs[i]);
        T_CHECK_MSG(ok, "case %d", which[j]);
    }
}

static void test_conv2d_shape_errors(void)
{
    struct err e;
    struct nn_shape out;
    struct nn_conv2d_cfg c = CONV(6, 8, 3, 1, 0, 1, 4, 0); /* 4 does not divide 6 */
    T_CHECK(nn_conv2d_shape(&c, nn_shape4(1, 6, 8, 8), &out, &e) != 0);
    T_EQ_INT(e.code, ERR_INVALID);
    c = (struct nn_conv2d_cfg)CONV(3, 8, 5, 1, 0, 1, 1, 0);
    T_CHECK(nn_conv2d_shape(&c, nn_shape4(1, 3, 4, 4), &out, &e) != 0); /* input < kernel */
    T_CHECK(nn_conv2d_shape(&c, nn_shape4(1, 4, 8, 8), &out, &e) != 0); /* channels */
    c = (struct nn_conv2d_cfg)CONV(3, 8, 3, 2, 1, 2, 1, 0);
    T_OK(nn_conv2d_shape(&c, nn_shape4(1, 3, 9, 9), &out, &e));
    T_EQ_INT(out.h, 4); /* (9 + 2 - 2*2 - 1)/2 + 1, PyTorch's formula */
    c.dh = 0;
    T_CHECK(nn_conv2d_shape(&c, nn_shape4(1, 3, 9, 9), &out, &e) != 0);
}

/* ---- batch norm ----------------------------------------------------------------------- */

static int bn_compare(struct nn_dnnl *d, int relu, int blocked)
{
    struct err e;
    struct nn_shape s = nn_shape4(4, 20, 5, 6);
    size_t n = nn_shape_numel(s), C = (size_t)s.c;
    struct nn_bn_cfg c = {.c = s.c, .eps = 1e-5f, .momentum = 0.1f, .relu = relu};
    float *x = rnd(n, 7, 2), *w = rnd(C, 8, 1), *b = rnd(C, 9, 1), *dy = rnd(n, 10, 1);
    for (size_t i = 0; i < n; i++)
        x[i] += 0.5f; /* a non-zero mean */
    float *y = malloc(n * sizeof *y), *dx = malloc(n * sizeof *dx), *mean = malloc(C * 4),
          *var = malloc(C * 4), *rm = nn_check_filled(C, 0), *rv = nn_check_filled(C, 1),
          *frm = nn_check_filled(C, 0), *frv = nn_check_filled(C, 1),
          *dw = nn_check_filled(C, 0.5f), *db = nn_check_filled(C, 0.5f),
          *fdw = nn_check_filled(C, 0.5f), *fdb = nn_check_filled(C, 0.5f),
          *ye = malloc(n * sizeof *ye);
    nn_bn_forward_train(y, mean, var, rm, rv, x, w, b, &c, s);
    nn_bn_backward(dx, dw, db, dy, x, y, mean, var, w, &c, s);
    nn_bn_forward_eval(ye, x, w, b, rm, rv, &c, s);
    dnnl_memory_desc_t md;
    if (blocked)
        md_blocked(&md, s);
    else
        nn_md_plain(&md, s);
    struct nn_bn_fast f;
    int ok = nn_bn_fast_init(&f, d, &c, s, &md, 1, &e) == 0;
    float *fx = nn_check_to_layout(d, &md, s, x), *fdy = nn_check_to_layout(d, &md, s, dy);
    float *fy = nn_alloc(nn_md_bytes(&md)), *fdx = nn_alloc(nn_md_bytes(&md));
    float *fye = nn_alloc(nn_md_bytes(&md));
    if (ok) {
        nn_bn_fast_forward(&f, fy, frm, frv, fx, w, b, 1);
        nn_bn_fast_backward(&f, fdx, fdw, fdb, fdy, fx, w);
        nn_bn_fast_forward(&f, fye, frm, frv, fx, w, b, 0);
        ok = nn_dnnl_check(d, &e) == 0;
        float *py = nn_check_to_plain(d, &md, s, fy), *pdx = nn_check_to_plain(d, &md, s, fdx);
        float *pye = nn_check_to_plain(d, &md, s, fye);
        ok = ok && nn_check_close_rel("bn out", py, y, n, 1e-4) &&
             nn_check_close_rel("bn mean", f.mean, mean, C, 1e-4) &&
             nn_check_close_rel("bn var", f.var, var, C, 1e-4) &&
             nn_check_close_rel("bn running mean", frm, rm, C, 1e-4) &&
             nn_check_close_rel("bn running var", frv, rv, C, 1e-4) &&
             nn_check_close_rel("bn dinp", pdx, dx, n, 1e-4) &&
             nn_check_close_acc("bn dweight", fdw, dw, C, 0.5f, 1e-4) &&
             nn_check_close_acc("bn dbias", fdb, db, C, 0.5f, 1e-4) &&
             nn_check_close_rel("bn eval out", pye, ye, n, 1e-4);
        free(py);
        free(pdx);
        free(pye);
    }
    nn_bn_fast_destroy(&f);
    float *bufs[] = {x,   w,  b,  dy,  y,   dx, mean, var, rm, rv,  frm,
                     frv, dw, db, fdw, fdb, ye, fx,   fdy, fy, fdx, fye};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
    return ok;
}

static void test_bn_fast_matches_ref(void)
{
    struct nn_dnnl d;
    struct err e;
    T_OK(nn_dnnl_init(&d, &e));
    int ok[4];
    for (int k = 0; k < 4; k++)
        ok[k] = bn_compare(&d, k & 1, k >> 1);
    nn_dnnl_cleanup(&d);
    for (int k = 0; k < 4; k++)
        T_CHECK_MSG(ok[k], "relu %d blocked %d", k & 1, k >> 1);
}

struct bn_ctx {
    struct nn_bn_cfg c;
    struct nn_shape s;
    float *x, *w, *b, *r, *y, *mean, *var, *rm, *rv;
};

static double bn_loss(void *p)
{
    struct bn_ctx *k = p;
    nn_bn_forward_train(k->y, k->mean, k->var, k->rm, k->rv, k->x, k->w, k->b, &k->c, k->s);
    return nn_check_dot(k->y, k->r, nn_shape_numel(k->s));
}

static void test_bn_gradcheck(void)
{
    struct nn_shape s = nn_shape4(3, 4, 3, 5);
    size_t n = nn_shape_numel(s);
    struct bn_ctx k = {.c = {.c = 4, .eps = 1e-5f, .momentum = 0.1f},
                       .s = s,
                       .x = rnd(n, 1, 1),
                       .w = rnd(4, 2, 1),
                       .b = rnd(4, 3, 1),
                       .r = rnd(n, 4, 1),
                       .y = malloc(n * 4),
                       .mean = malloc(16),
                       .var = malloc(16),
                       .rm = nn_check_filled(4, 0),
                       .rv = nn_check_filled(4, 1)};
    bn_loss(&k);
    float *dx = malloc(n * 4), *dw = nn_check_filled(4, 0), *db = nn_check_filled(4, 0);
    nn_bn_backward(dx, dw, db, k.r, k.x, k.y, k.mean, k.var, k.w, &k.c, s);
    int ok = nn_check_fd("bn x", k.x, n, dx, bn_loss, &k, 1e-2f) &&
             nn_check_fd("bn w", k.w, 4, dw, bn_loss, &k, 1e-2f) &&
             nn_check_fd("bn b", k.b, 4, db, bn_loss, &k, 1e-2f);
    float *bufs[] = {k.x, k.w, k.b, k.r, k.y, k.mean, k.var, k.rm, k.rv, dx, dw, db};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
    T_CHECK(ok);
}

/* Running statistics follow PyTorch's update (momentum 0.1, unbiased variance) and evaluation
 * normalises with them, not with the batch. */
static void test_bn_train_vs_eval(void)
{
    struct nn_shape s = nn_shape4(2, 1, 1, 3); /* one channel, values 1..6 */
    float x[6] = {1, 2, 3, 4, 5, 6}, y[6], ye[6], w = 2, b = 1, mean, var, rm = 0, rv = 1;
    struct nn_bn_cfg c = {.c = 1, .eps = 1e-5f, .momentum = 0.1f};
    nn_bn_forward_train(y, &mean, &var, &rm, &rv, x, &w, &b, &c, s);
    T_NEAR(mean, 3.5, 1e-6);
    T_NEAR(var, 17.5 / 6, 1e-6);       /* biased, for normalisation */
    T_NEAR(rm, 0.35, 1e-6);            /* 0.9*0 + 0.1*3.5 */
    T_NEAR(rv, 0.9 + 0.1 * 3.5, 1e-6); /* unbiased: 17.5/5 */
    T_NEAR(y[0], 2 * (1 - 3.5) / sqrt(17.5 / 6 + 1e-5) + 1, 1e-5);
    nn_bn_forward_eval(ye, x, &w, &b, &rm, &rv, &c, s);
    T_NEAR(ye[0], 2 * (1 - 0.35) / sqrt(1.25 + 1e-5) + 1, 1e-5);
    T_CHECK(fabsf(ye[0] - y[0]) > 1);
    for (int i = 0; i < 200; i++) /* the same batch over and over: running -> batch stats */
        nn_bn_forward_train(y, &mean, &var, &rm, &rv, x, &w, &b, &c, s);
    T_NEAR(rm, 3.5, 1e-4);
    T_NEAR(rv, 3.5, 1e-4);
}

/* ---- relu / relu6 --------------------------------------------------------------------- */

/* values at least 0.05 away from the kinks at 0 and 6 */
static float *rnd_away_from_kinks(size_t n, uint64_t seed)
{
    float *x = rnd(n, seed, 4);
    for (size_t i = 0; i < n; i++) {
        if (fabsf(x[i]) < 0.05f)
            x[i] = x[i] < 0 ? -0.1f : 0.1f;
        if (fabsf(x[i] - 6) < 0.05f)
            x[i] = 6.1f;
    }
    return x;
}

static void test_act_fast_matches_ref(void)
{
    struct nn_dnnl d;
    struct err e;
    T_OK(nn_dnnl_init(&d, &e));
    struct nn_shape s = nn_shape4(2, 20, 3, 3);
    size_t n = nn_shape_numel(s);
    int ok = 1;
    for (int a = NN_ACT_RELU; a <= NN_ACT_RELU6 && ok; a++) {
        float *x = rnd_away_from_kinks(n, 3), *dy = rnd(n, 4, 1);
        float *y = malloc(n * 4), *dx = malloc(n * 4);
        nn_act_forward(y, x, n, (enum nn_act)a);
        nn_act_backward(dx, dy, y, n, (enum nn_act)a);
        for (size_t i = 0; i < n && ok; i++) { /* the definition itself */
            float want = x[i] < 0 ? 0 : (a == NN_ACT_RELU6 && x[i] > 6 ? 6 : x[i]);
            ok = y[i] == want && dx[i] == (want > 0 && want == x[i] ? dy[i] : 0);
        }
        dnnl_memory_desc_t md;
        md_blocked(&md, s);
        struct nn_act_fast f;
        ok = ok && nn_act_fast_init(&f, &d, (enum nn_act)a, &md, 1, &e) == 0;
        float *fx = nn_check_to_layout(&d, &md, s, x),
              *fdy = nn_check_to_layout(&d, &md, s, dy);
        float *fy = nn_alloc(nn_md_bytes(&md)), *fdx = nn_alloc(nn_md_bytes(&md));
        if (ok) {
            nn_act_fast_forward(&f, fy, fx);
            nn_act_fast_backward(&f, fdx, fdy, fy);
            float *py = nn_check_to_plain(&d, &md, s, fy),
                  *pdx = nn_check_to_plain(&d, &md, s, fdx);
            ok = nn_dnnl_check(&d, &e) == 0 && nn_check_close_rel("act out", py, y, n, 0) &&
                 nn_check_close_rel("act dinp", pdx, dx, n, 0);
            free(py);
            free(pdx);
        }
        nn_act_fast_destroy(&f);
        float *bufs[] = {x, dy, y, dx, fx, fdy, fy, fdx};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
            free(bufs[i]);
    }
    nn_dnnl_cleanup(&d);
    T_CHECK(ok);
}

/* ---- pooling ---------------------------------------------------------------------- */

/* distinct values 0.1 apart in random order: no window has near-ties */
static float *rnd_distinct(size_t n, uint64_t seed)
{
    float *x = malloc(n * sizeof *x);
    struct nn_rng r;
    nn_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++)
        x[i] = 0.1f * (float)i - 0.05f * (float)n;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = nn_rng_next(&r) % (i + 1);
        float t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
    return x;
}

struct pool_case {
    int max;
    struct nn_pool_cfg c;
    int n, ch, h, w;
};

static const struct pool_case pool_cases[] = {
    {1, {3, 3, 2, 2, 1, 1, 0}, 2, 20, 9, 9},   /* ResNet's stem pool */
    {1, {2, 2, 2, 2, 0, 0, 0}, 2, 10, 8, 7},   /* odd width: floor */
    {1, {3, 3, 2, 2, 0, 0, 0}, 1, 16, 13, 13}, /* AlexNet's */
    {0, {3, 3, 2, 2, 1, 1, 1}, 2, 20, 9, 9},   /* average, count_include_pad */
    {0, {3, 3, 2, 2, 1, 1, 0}, 2, 20, 9, 9},   /* average, exclude padding */
    {0, {3, 3, 1, 1, 1, 1, 1}, 2, 16, 7, 7},   /* Inception's branch pool: 3x3/1 pad 1 */
    {0, {2, 2, 2, 2, 0, 0, 1}, 2, 18, 6, 6},
    {0, {5, 4, 1, 1, 0, 0, 1}, 2, 33, 5, 4}, /* global */
};

/* The fast path of pooling against the reference, on a channel-blocked layout (tag
 * nChw8c or nChw16c: max pooling runs pool.c's own loops on both, average pooling oneDNN). */
static int pool_compare(struct nn_dnnl *d, const struct pool_case *k, const float *x_in,
                        uint64_t seed, dnnl_format_tag_t tag)
{
    struct err e;
    struct nn_shape in = nn_shape4(k->n, k->ch, k->h, k->w), out;
    if (nn_pool_shape(&k->c, in, &out, &e))
        return 0;
    size_t nx = nn_shape_numel(in), ny = nn_shape_numel(out);
    float *x = malloc(nx * 4), *dy = rnd(ny, seed, 1), *y = malloc(ny * 4),
          *dx = malloc(nx * 4);
    memcpy(x, x_in, nx * 4);
    if (k->max) {
        nn_maxpool_forward(y, x, &k->c, in);
        nn_maxpool_backward(dx, dy, x, &k->c, in);
    } else {
        nn_avgpool_forward(y, x, &k->c, in);
        nn_avgpool_backward(dx, dy, &k->c, in);
    }
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = {in.n, in.c, in.h, in.w};
    nn_md_tag(&md, 4, dims, tag);
    struct nn_pool_fast f;
    int ok = nn_pool_fast_init(&f, d, k->max, &k->c, in, &md, 1, &e) == 0;
    float *fx = nn_check_to_layout(d, &md, in, x), *fdx = nn_alloc(nn_md_bytes(&md));
    float *fy = ok ? nn_alloc(nn_md_bytes(&f.dst_md)) : NULL;
    float *fdy = ok ? nn_check_to_layout(d, &f.dst_md, out, dy) : NULL;
    if (ok) {
        nn_pool_fast_forward(&f, fy, fx);
        nn_pool_fast_backward(&f, fdx, fdy);
        float *py = nn_check_to_plain(d, &f.dst_md, out, fy),
              *pdx = nn_check_to_plain(d, &md, in, fdx);
        ok = nn_dnnl_check(d, &e) == 0 && nn_check_close_rel("pool out", py, y, ny, 1e-5) &&
             nn_check_close_rel("pool dinp", pdx, dx, nx, 1e-5);
        free(py);
        free(pdx);
    }
    nn_pool_fast_destroy(&f);
    float *bufs[] = {x, dy, y, dx, fx, fdx, fy, fdy};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
    return ok;
}

static void test_pool_fast_matches_ref(void)
{
    struct nn_dnnl d;
    struct err e;
    T_OK(nn_dnnl_init(&d, &e));
    int ok = 1, ok_ties = 1;
    size_t bad = 0;
    for (size_t i = 0; i < sizeof pool_cases / sizeof *pool_cases && ok && ok_ties; i++) {
        const struct pool_case *k = &pool_cases[i];
        size_t nx = (size_t)k->n * k->ch * k->h * k->w;
        float *x = rnd(nx, i, 1);
        ok = pool_compare(&d, k, x, i + 100, dnnl_nChw16c) &&
             pool_compare(&d, k, x, i + 100, dnnl_nChw8c);
        /* a ReLU before the pool makes many windows all-zero: the gradient must go to the
         * same (first) element on both paths */
        for (size_t j = 0; j < nx; j++)
            x[j] = x[j] > 0.5f ? x[j] : 0;
        ok_ties = pool_compare(&d, k, x, i + 200, dnnl_nChw16c) &&
                  pool_compare(&d, k, x, i + 200, dnnl_nChw8c);
        free(x);
        bad = i;
    }
    nn_dnnl_cleanup(&d);
    T_CHECK_MSG(ok, "case %zu", bad);
    T_CHECK_MSG(ok_ties, "case %zu with ties", bad);
}

struct pool_ctx {
    const struct pool_case *k;
    struct nn_shape in;
    float *x, *r, *y;
    size_t ny;
};

static double pool_loss(void *p)
{
    struct pool_ctx *c = p;
    if (c->k->max)
        nn_maxpool_forward(c->y, c->x, &c->k->c, c->in);
    else
        nn_avgpool_forward(c->y, c->x, &c->k->c, c->in);
    return nn_check_dot(c->y, c->r, c->ny);
}

static void test_pool_gradcheck(void)
{
    for (size_t i = 0; i < sizeof pool_cases / sizeof *pool_cases; i++) {
        const struct pool_case *k = &pool_cases[i];
        struct err e;
        struct nn_shape in = nn_shape4(k->n, k->ch, k->h, k->w), out;
        T_OK(nn_pool_shape(&k->c, in, &out, &e));
        size_t nx = nn_shape_numel(in), ny = nn_shape_numel(out);
        struct pool_ctx c = {.k = k,
                             .in = in,
                             .x = rnd_distinct(nx, i),
                             .r = rnd(ny, i, 1),
                             .y = malloc(ny * 4),
                             .ny = ny};
        float *dx = malloc(nx * 4);
        if (k->max)
            nn_maxpool_backward(dx, c.r, c.x, &k->c, in);
        else
            nn_avgpool_backward(dx, c.r, &k->c, in);
        int ok = nn_check_fd("pool x", c.x, nx, dx, pool_loss, &c, 1e-2f);
        free(c.x);
        free(c.r);
        free(c.y);
        free(dx);
        T_CHECK_MSG(ok, "case %zu", i);
    }
}

/* PyTorch's adaptive windows: 5 -> 3 uses rows {0,1}, {1,2,3}, {3,4}; 1 -> 7 replicates;
 * divisible sizes are ordinary pooling. */
static void test_adaptive_avgpool(void)
{
    struct nn_shape in = nn_shape4(1, 1, 5, 1);
    float x[5] = {1, 2, 3, 4, 5}, y[3], dx[5], dy[3] = {1, 1, 1};
    nn_adaptive_avgpool_forward(y, x, 3, 1, in);
    T_NEAR(y[0], 1.5, 1e-6);
    T_NEAR(y[1], 3.0, 1e-6);
    T_NEAR(y[2], 4.5, 1e-6);
    nn_adaptive_avgpool_backward(dx, dy, 3, 1, in);
    T_NEAR(dx[1], 0.5 + 1.0 / 3, 1e-6);
    T_NEAR(dx[0], 0.5, 1e-6);
    float one = 2.5f, seven[49];
    nn_adaptive_avgpool_forward(seven, &one, 7, 7, nn_shape4(1, 1, 1, 1));
    T_CHECK(seven[0] == 2.5f && seven[48] == 2.5f);
    struct nn_pool_cfg pc;
    T_CHECK(!nn_adaptive_as_pool(&pc, 7, 7, nn_shape4(1, 1, 1, 1)));
    T_CHECK(nn_adaptive_as_pool(&pc, 2, 3, nn_shape4(1, 1, 8, 9)));
    T_EQ_INT(pc.kh, 4);
    T_EQ_INT(pc.sw, 3);
    /* equal to the pooling it stands for */
    struct nn_shape s = nn_shape4(2, 3, 8, 9);
    float *a = rnd(nn_shape_numel(s), 3, 1), ya[36], yb[36];
    nn_adaptive_avgpool_forward(ya, a, 2, 3, s);
    nn_avgpool_forward(yb, a, &pc, s);
    free(a);
    for (int i = 0; i < 36; i++)
        T_NEAR(ya[i], yb[i], 1e-6);
}

/* ---- linear ----------------------------------------------------------------------- */

struct lin_ctx {
    struct nn_linear_cfg c;
    int n;
    float *x, *w, *b, *r, *y;
};

static double lin_loss(void *p)
{
    struct lin_ctx *k = p;
    nn_linear_forward(k->y, k->x, k->w, k->b, &k->c, k->n);
    return nn_check_dot(k->y, k->r, (size_t)k->n * k->c.out);
}

static void test_linear(void)
{
    struct nn_dnnl d;
    struct err e;
    T_OK(nn_dnnl_init(&d, &e));
    struct lin_ctx k = {.c = {.in = 37, .out = 11, .bias = 1}, .n = 5};
    size_t nx = 5 * 37, ny = 5 * 11, nw = 37 * 11;
    k.x = rnd(nx, 1, 1), k.w = rnd(nw, 2, 0.3f), k.b = rnd(11, 3, 1), k.r = rnd(ny, 4, 1);
    k.y = malloc(ny * 4);
    float *dx = malloc(nx * 4), *dw = nn_check_filled(nw, 0.5f),
          *db = nn_check_filled(11, 0.5f);
    float *fy = malloc(ny * 4), *fdx = malloc(nx * 4), *fdw = nn_check_filled(nw, 0.5f),
          *fdb = nn_check_filled(11, 0.5f), *gw = nn_check_filled(nw, 0),
          *gb = nn_check_filled(11, 0);
    nn_linear_forward(k.y, k.x, k.w, k.b, &k.c, k.n);
    nn_linear_backward(dx, dw, db, k.r, k.x, k.w, &k.c, k.n);
    nn_linear_backward(NULL, gw, gb, k.r, k.x, k.w, &k.c, k.n);
    struct nn_linear_fast f;
    int ok = nn_linear_fast_init(&f, &d, &k.c, k.n, 1, 1, &e) == 0;
    if (ok) {
        nn_linear_fast_forward(&f, fy, k.x, k.w, k.b);
        nn_linear_fast_backward(&f, fdx, fdw, fdb, k.r, k.x, k.w);
        ok = nn_dnnl_check(&d, &e) == 0 &&
             nn_check_close_rel("linear out", fy, k.y, ny, 1e-4) &&
             nn_check_close_rel("linear dinp", fdx, dx, nx, 1e-4) &&
             nn_check_close_acc("linear dweight", fdw, dw, nw, 0.5f, 1e-4) &&
             nn_check_close_acc("linear dbias", fdb, db, 11, 0.5f, 1e-4);
    }
    nn_linear_fast_destroy(&f);
    nn_dnnl_cleanup(&d);
    int fd = nn_check_fd("linear x", k.x, nx, dx, lin_loss, &k, 1e-2f) &&
             nn_check_fd("linear w", k.w, nw, gw, lin_loss, &k, 1e-2f) &&
             nn_check_fd("linear b", k.b, 11, gb, lin_loss, &k, 1e-2f);
    float *bufs[] = {k.x, k.w, k.b, k.r, k.y, dx, dw, db, fy, fdx, fdw, fdb, gw, gb};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
    T_CHECK(ok);
    T_CHECK(fd);
}

/* ---- dropout ---------------------------------------------------------------------- */

static void test_dropout(void)
{
    struct nn_shape s = nn_shape4(4, 24, 6, 5);
    size_t n = nn_shape_numel(s);
    struct nn_dropout_cfg c = {.p = 0.3f};
    struct nn_layout plain;
    nn_layout_plain(&plain, s);
    float *x = nn_check_filled(n, 1), *y1 = malloc(n * 4), *y2 = malloc(n * 4),
          *y3 = malloc(n * 4);
    uint64_t key = nn_dropout_key(42, 7, 3);
    nn_dropout_forward(y1, x, &c, s, &plain, key, 1);
    nn_dropout_forward(y2, x, &c, s, &plain, nn_dropout_key(42, 7, 3), 1);
    nn_dropout_forward(y3, x, &c, s, &plain, nn_dropout_key(42, 8, 3), 1);
    size_t dropped = 0, differ = 0;
    for (size_t i = 0; i < n; i++) {
        T_CHECK(y1[i] == 0 || fabsf(y1[i] - 1 / 0.7f) < 1e-6f); /* scaled by 1/(1-p) */
        T_CHECK(y1[i] == y2[i]);                                /* same seed, step, layer */
        dropped += y1[i] == 0;
        differ += y1[i] != y3[i];
    }
    T_CHECK_MSG(fabs((double)dropped / n - 0.3) < 0.03, "dropped %zu of %zu", dropped, n);
    T_CHECK(differ > n / 4); /* another step, another mask */
    /* backward uses the same mask */
    float *dx = malloc(n * 4);
    nn_dropout_backward(dx, x, &c, s, &plain, key);
    T_CHECK(memcmp(dx, y1, n * 4) == 0);
    /* evaluation is the identity */
    nn_dropout_forward(y3, x, &c, s, &plain, key, 0);
    T_CHECK(memcmp(y3, x, n * 4) == 0);
    /* Dropout2d: whole planes */
    struct nn_dropout_cfg c2 = {.p = 0.5f, .channelwise = 1};
    nn_dropout_forward(y2, x, &c2, s, &plain, key, 1);
    int planes_dropped = 0;
    for (int p = 0; p < s.n * s.c; p++) {
        const float *pl = y2 + (size_t)p * 30;
        for (int i = 1; i < 30; i++)
            T_CHECK(pl[i] == pl[0]);
        T_CHECK(pl[0] == 0 || pl[0] == 2.0f);
        T_CHECK((pl[0] != 0) == nn_dropout_keep(&c2, s, key, p / s.c, p % s.c, 0, 0));
        planes_dropped += pl[0] == 0;
    }
    T_CHECK(planes_dropped > 20 && planes_dropped < 76);
    /* a blocked layout drops the same logical elements */
    struct nn_dnnl d;
    struct err e;
    T_OK(nn_dnnl_init(&d, &e));
    dnnl_memory_desc_t md;
    md_blocked(&md, s);
    struct nn_layout bl;
    T_OK(nn_layout_from_md(&bl, &md, &e));
    T_EQ_INT(bl.blk, 16);
    float *r = rnd(n, 9, 1), *fr = nn_check_to_layout(&d, &md, s, r),
          *fy = nn_alloc(nn_md_bytes(&md));
    nn_dropout_forward(y1, r, &c, s, &plain, key, 1);
    nn_dropout_forward(fy, fr, &c, s, &bl, key, 1);
    float *py = nn_check_to_plain(&d, &md, s, fy);
    int same = memcmp(py, y1, n * 4) == 0;
    nn_dnnl_cleanup(&d);
    float *bufs[] = {x, y1, y2, y3, dx, r, fr, fy, py};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
    T_CHECK(same);
}

/* ---- add, flatten, cross-entropy ----------------------------------------------------- */

static void test_add(void)
{
    float a[4] = {1, -2, 3, -4}, b[4] = {0.5f, 1, -4, 2}, y[4], da[4], db[4];
    float dy[4] = {1, 2, 3, 4};
    nn_add_forward(y, a, b, 4, 0);
    T_CHECK(y[0] == 1.5f && y[1] == -1 && y[2] == -1 && y[3] == -2);
    nn_add_backward(da, db, dy, y, 4, 0);
    T_CHECK(memcmp(da, dy, sizeof dy) == 0 && memcmp(db, dy, sizeof dy) == 0);
    nn_add_forward(y, a, b, 4, 1); /* ResNet's block end: relu(a + b) */
    T_CHECK(y[0] == 1.5f && y[1] == 0 && y[2] == 0 && y[3] == 0);
    nn_add_backward(da, NULL, dy, y, 4, 1);
    T_CHECK(da[0] == 1 && da[1] == 0 && da[3] == 0);
}

static void test_flatten_fast(void)
{
    struct nn_dnnl d;
    struct err e;
    T_OK(nn_dnnl_init(&d, &e));
    struct nn_shape s = nn_shape4(3, 20, 2, 3);
    size_t n = nn_shape_numel(s);
    dnnl_memory_desc_t md;
    md_blocked(&md, s);
    float *x = rnd(n, 1, 1), *fx = nn_check_to_layout(&d, &md, s, x), *y = malloc(n * 4);
    float *dx = nn_alloc(nn_md_bytes(&md));
    struct nn_flatten_fast f;
    T_OK(nn_flatten_fast_init(&f, &d, s, &md, 1, &e));
    nn_flatten_fast_forward(&f, y, fx);
    int same = memcmp(y, x, n * 4) == 0; /* plain (N, C*H*W) is PyTorch's order */
    nn_flatten_fast_backward(&f, dx, y);
    float *pdx = nn_check_to_plain(&d, &md, s, dx);
    int back = memcmp(pdx, x, n * 4) == 0;
    nn_flatten_fast_destroy(&f);
    nn_dnnl_cleanup(&d);
    free(x);
    free(fx);
    free(y);
    free(dx);
    free(pdx);
    T_CHECK(same);
    T_CHECK(back);
}

/* ---- concat ------------------------------------------------------------------------ */

/* torch.cat([a, b], 1) of (N,Ca,H,W) and (N,Cb,H,W) in each input's layout (1: nChw16c, 0:
 * plain): Ca 32 cuts the output's 16-channel blocks on a boundary, Ca 20 inside one (the
 * fast path then makes its output plain), and mixed layouts. */
struct concat_case {
    int n, ca, cb, h, w, a_blocked, b_blocked;
};

static const struct concat_case concat_cases[] = {
    {2, 32, 16, 3, 5, 1, 1},
    {2, 20, 12, 4, 3, 1, 1},
    {3, 8, 24, 2, 2, 0, 1},
    {1, 16, 7, 5, 5, 1, 0},
};

static void concat_md(dnnl_memory_desc_t *md, struct nn_shape s, int blocked)
{
    if (blocked)
        md_blocked(md, s);
    else
        nn_md_plain(md, s);
}

/* The reference against its definition, and the fast path against the reference: both
 * only move numbers, so they agree exactly, forward and backward, in every layout. */
static void test_concat_fast_matches_ref(void)
{
    struct nn_dnnl d;
    struct err e;
    T_OK(nn_dnnl_init(&d, &e));
    for (size_t i = 0; i < sizeof concat_cases / sizeof *concat_cases; i++) {
        const struct concat_case *k = &concat_cases[i];
        struct nn_shape sa = nn_shape4(k->n, k->ca, k->h, k->w),
                        sb = nn_shape4(k->n, k->cb, k->h, k->w),
                        sy = nn_shape4(k->n, k->ca + k->cb, k->h, k->w);
        size_t na = nn_shape_numel(sa), nb = nn_shape_numel(sb), ny = nn_shape_numel(sy);
        float *a = rnd(na, 10 + i, 1), *b = rnd(nb, 20 + i, 1), *dy = rnd(ny, 30 + i, 1);
        float *y = malloc(ny * 4), *da = malloc(na * 4), *db = malloc(nb * 4);
        nn_concat_forward(y, a, b, sa, sb);
        nn_concat_backward(da, db, dy, sa, sb);
        int defined = 1; /* y[n][c][h][w] is a[n][c] for c < Ca, else b[n][c - Ca] */
        size_t plane = (size_t)k->h * k->w;
        for (int n = 0; n < k->n; n++)
            for (int c = 0; c < k->ca + k->cb; c++)
                for (size_t p = 0; p < plane; p++) {
                    size_t at = ((size_t)n * (k->ca + k->cb) + c) * plane + p;
                    float want = c < k->ca ? a[((size_t)n * k->ca + c) * plane + p]
                                           : b[((size_t)n * k->cb + c - k->ca) * plane + p];
                    float dwant = c < k->ca ? da[((size_t)n * k->ca + c) * plane + p]
                                            : db[((size_t)n * k->cb + c - k->ca) * plane + p];
                    defined &= y[at] == want && dy[at] == dwant;
                }
        T_CHECK_MSG(defined, "case %zu: the reference is not torch.cat", i);
        dnnl_memory_desc_t amd, bmd;
        concat_md(&amd, sa, k->a_blocked);
        concat_md(&bmd, sb, k->b_blocked);
        struct nn_concat_fast f;
        int rc = nn_concat_fast_init(&f, &d, sa, sb, &amd, &bmd, 1, &e);
        T_CHECK_MSG(rc == 0, "case %zu: %s", i, e.msg);
        if (rc == 0) {
            float *fa = nn_check_to_layout(&d, &amd, sa, a),
                  *fb = nn_check_to_layout(&d, &bmd, sb, b);
            float *fy = nn_alloc(nn_md_bytes(&f.dst_md)),
                  *fdy = nn_check_to_layout(&d, &f.dst_md, sy, dy);
            float *fda = nn_alloc(nn_md_bytes(&amd)), *fdb = nn_alloc(nn_md_bytes(&bmd));
            nn_concat_fast_forward(&f, fy, fa, fb);
            nn_concat_fast_backward(&f, fda, fdb, fdy);
            T_OK(nn_dnnl_check(&d, &e));
            float *py = nn_check_to_plain(&d, &f.dst_md, sy, fy),
                  *pda = nn_check_to_plain(&d, &amd, sa, fda),
                  *pdb = nn_check_to_plain(&d, &bmd, sb, fdb);
            T_CHECK_MSG(memcmp(py, y, ny * 4) == 0, "case %zu: forward", i);
            T_CHECK_MSG(memcmp(pda, da, na * 4) == 0, "case %zu: da", i);
            T_CHECK_MSG(memcmp(pdb, db, nb * 4) == 0, "case %zu: db", i);
            nn_concat_fast_backward(&f, NULL, fdb, fdy); /* a gradient skipped */
            T_OK(nn_dnnl_check(&d, &e));
            free(fa), free(fb), free(fy), free(fdy), free(fda), free(fdb);
            free(py), free(pda), free(pdb);
        }
        nn_concat_fast_destroy(&f);
        free(a), free(b), free(dy), free(y), free(da), free(db);
    }
    nn_dnnl_cleanup(&d);
}

/* loss = sum r * cat(a, b): its gradient in a and b by central differences */
struct concat_ctx {
    float *a, *b, *y;
    const float *r;
    struct nn_shape sa, sb;
};

static double concat_loss(void *c)
{
    struct concat_ctx *x = c;
    nn_concat_forward(x->y, x->a, x->b, x->sa, x->sb);
    return nn_check_dot(x->y, x->r, nn_shape_numel(x->sa) + nn_shape_numel(x->sb));
}

static void test_concat_gradcheck(void)
{
    struct nn_shape sa = nn_shape4(2, 3, 2, 3), sb = nn_shape4(2, 5, 2, 3);
    size_t na = nn_shape_numel(sa), nb = nn_shape_numel(sb);
    struct concat_ctx c = {.a = rnd(na, 1, 1),
                           .b = rnd(nb, 2, 1),
                           .y = malloc((na + nb) * 4),
                           .r = rnd(na + nb, 3, 1),
                           .sa = sa,
                           .sb = sb};
    float *da = malloc(na * 4), *db = malloc(nb * 4);
    nn_concat_backward(da, db, c.r, sa, sb);
    T_CHECK(nn_check_fd("concat a", c.a, na, da, concat_loss, &c, 1e-2f));
    T_CHECK(nn_check_fd("concat b", c.b, nb, db, concat_loss, &c, 1e-2f));
    free(c.a), free(c.b), free(c.y), free((void *)c.r), free(da), free(db);
}

struct xent_ctx {
    float *z, *p;
    const int32_t *labels;
    int n, k;
};

static double xent_loss(void *c)
{
    struct xent_ctx *x = c;
    double loss;
    int right;
    nn_xent_forward(x->p, &loss, &right, x->z, x->labels, x->n, x->k, x->n, NULL);
    return loss;
}

static void test_xent(void)
{
    struct err e;
    float z[6] = {1, 2, 3, 1000, 0, -1000}, p[6], dz[6];
    int32_t labels[2] = {2, 1};
    double loss;
    int right;
    T_OK(nn_xent_forward(p, &loss, &right, z, labels, 2, 3, 2, &e));
    double l0 = log(exp(1.0) + exp(2.0) + exp(3.0)) - 3; /* row 0 */
    T_NEAR(loss, (l0 + 1000) / 2, 1e-9);                 /* row 1: no overflow */
    T_EQ_INT(right, 1);
    T_NEAR(p[2], exp(3.0) / (exp(1.0) + exp(2.0) + exp(3.0)), 1e-6);
    nn_xent_backward(dz, p, labels, 2, 3, 2);
    T_NEAR(dz[2], (p[2] - 1) / 2, 1e-7);
    T_NEAR(dz[0], p[0] / 2, 1e-7);
    /* only valid rows count */
    T_OK(nn_xent_forward(p, &loss, &right, z, labels, 2, 3, 1, &e));
    T_NEAR(loss, l0, 1e-9);
    nn_xent_backward(dz, p, labels, 2, 3, 1);
    T_CHECK(dz[3] == 0 && dz[5] == 0);
    T_NEAR(dz[2], p[2] - 1, 1e-7); /* the mean over one row */
    labels[1] = 3;
    T_CHECK(nn_xent_forward(p, &loss, &right, z, labels, 2, 3, 2, &e) != 0);
    T_EQ_STR(e.field, "label");
    /* finite differences of the mean loss */
    int32_t lab[4] = {0, 4, 2, 2};
    struct xent_ctx c = {.z = rnd(20, 5, 2), .p = malloc(80), .labels = lab, .n = 4, .k = 5};
    float *g = malloc(80);
    xent_loss(&c);
    nn_xent_backward(g, c.p, lab, 4, 5, 4);
    int ok = nn_check_fd("xent z", c.z, 20, g, xent_loss, &c, 1e-2f);
    free(c.z);
    free(c.p);
    free(g);
    T_CHECK(ok);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_conv2d_fast_matches_ref);
    TEST_RUN(test_conv2d_winograd_matches_ref);
    TEST_RUN(test_conv2d_gradcheck);
    TEST_RUN(test_conv2d_shape_errors);
    TEST_RUN(test_bn_fast_matches_ref);
    TEST_RUN(test_bn_gradcheck);
    TEST_RUN(test_bn_train_vs_eval);
    TEST_RUN(test_act_fast_matches_ref);
    TEST_RUN(test_pool_fast_matches_ref);
    TEST_RUN(test_pool_gradcheck);
    TEST_RUN(test_adaptive_avgpool);
    TEST_RUN(test_linear);
    TEST_RUN(test_dropout);
    TEST_RUN(test_add);
    TEST_RUN(test_flatten_fast);
    TEST_RUN(test_concat_fast_matches_ref);
    TEST_RUN(test_concat_gradcheck);
    TEST_RUN(test_xent);
    return test_end();
}
