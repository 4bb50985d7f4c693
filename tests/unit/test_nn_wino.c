/* Unit tests for worker/nn/winograd.c, ddpbench's own Winograd F(4x4, 3x3) and
 * F(2x2, 3x3): the AVX2/FMA transforms against their plain-C references, the convolution
 * (forward and backward data, through conv2d's fast path) against conv2d's naive reference
 * on odd sizes, both tile sizes, and a few training steps of a ResNet with it against the
 * same steps with direct convolution.
 *
 * The binary sets ONEDNN_MAX_CPU_ISA=AVX2 before oneDNN starts (AVX2 emulated), so on an
 * AVX-512 machine too oneDNN has no Winograd of its own and NN_CONV_WINOGRAD selects ours;
 * each convolution runs twice, with the AVX2 transforms and with the plain-C ones.
 *
 * Error bounds. Direct convolution's rounding is about K * 2^-24 of the terms' magnitude
 * (test_nn_layers.c). Winograd adds the transforms' own: B^T d B sums up to 10 x 10 inputs
 * with weights up to 5 (|B^T| row sums 10), A^T m A up to 19 x 19 products with weights up
 * to 8, and G's 1/6, 1/12, 1/24 are inexact in binary; each transformed value carries a
 * relative error of a few 2^-24 of its (larger) terms, so the output's error, relative to
 * the output's scale, is ~100x direct's: 2^-24 * 100 * a few ~1e-5 with K up to a few
 * hundred. Measured here up to 9e-6 of the largest |output|; bound 1e-4 of the largest
 * |output| (11x margin), while a wrong tap, tile edge or channel moves results by O(1) of
 * that scale. F(2x2, 3x3)'s matrices hold only 0, +-1 and 1/2 (exact in binary), B^T d B
 * sums 4 inputs and A^T m A 9 products, so its error stays near direct's: measured up to
 * 5e-7 of the largest |output|, bound 5e-6 (10x margin). Transforms, AVX2 vs reference:
 * the same sums in another order and with fused multiply-adds, so a few 2^-24 of the
 * largest term: bound 1e-6 of the scale. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/nn_check.h"
#include "tests/unit/test.h"
#include "worker/nn/graph.h"
#include "worker/nn/isa.h"
#include "worker/nn/layer_type.h"
#include "worker/nn/layers.h"
#include "worker/nn/models.h"
#include "worker/nn/optim.h"
#include "worker/nn/winograd.h"

/* The bounds of the header, relative to the largest |output|. */
#define WINO_TOL 1e-4
#define WINO2_TOL 5e-6

/* ---- the transforms ------------------------------------------------------------- */

static void test_wino_transforms_avx2_match_ref(void)
{
    if (nn_isa_get() < NN_ISA_AVX2)
        T_SKIP("this CPU has no AVX2+FMA");
    enum { S = 40 }; /* a stride wider than the block, as in V and M */
    float *in = nn_check_randn(NN_WINO_E * S, 5, 0, 1);
    float *a = nn_check_filled(NN_WINO_E * S, 7), *b = nn_check_filled(NN_WINO_E * S, 7);
    nn_wino_input_ref(a, S, in);
    nn_wino_input_avx2(b, S, in);
    T_CHECK(nn_check_close_rel("input transform", b, a, NN_WINO_E * S, 1e-6));
    for (size_t i = 0; i < NN_WINO_E * S; i++) /* the gaps between elements untouched */
        if (i % S >= NN_WINO_BLK)
            T_CHECK(a[i] == 7 && b[i] == 7);
    float oa[16 * NN_WINO_BLK], ob[16 * NN_WINO_BLK];
    nn_wino_output_ref(oa, in, S);
    nn_wino_output_avx2(ob, in, S);
    T_CHECK(nn_check_close_rel("output transform", ob, oa, 16 * NN_WINO_BLK, 1e-6));
    /* F(2x2, 3x3): 16 elements in, a 2x2 tile out */
    float *a2 = nn_check_filled(NN_WINO2_E * S, 7), *b2 = nn_check_filled(NN_WINO2_E * S, 7);
    nn_wino2_input_ref(a2, S, in);
    nn_wino2_input_avx2(b2, S, in);
    T_CHECK(nn_check_close_rel("f2 input transform", b2, a2, NN_WINO2_E * S, 1e-6));
    for (size_t i = 0; i < NN_WINO2_E * S; i++)
        if (i % S >= NN_WINO_BLK)
            T_CHECK(a2[i] == 7 && b2[i] == 7);
    nn_wino2_output_ref(oa, in, S);
    nn_wino2_output_avx2(ob, in, S);
    T_CHECK(nn_check_close_rel("f2 output transform", ob, oa, 4 * NN_WINO_BLK, 1e-6));
    free(a2);
    free(b2);
    free(in);
    free(a);
    free(b);
}

/* The transforms compute the textbook identity: a tile of ones through a kernel of ones
 * gives 9 at every interior output (checks the matrices, not only the AVX2 formulas), for
 * F(4x4, 3x3) (m 4) and F(2x2, 3x3) (m 2). */
static void wino_identity_check(int m)
{
    int ne = (m + 2) * (m + 2);
    float tile[NN_WINO_E * NN_WINO_BLK], v[NN_WINO_E * NN_WINO_BLK];
    float ker[9], u[NN_WINO_E * NN_WINO_BLK], out[16 * NN_WINO_BLK];
    for (int i = 0; i < NN_WINO_E * NN_WINO_BLK; i++)
        tile[i] = 1;
    for (int i = 0; i < 9; i++)
        ker[i] = 1;
    if (m == NN_WINO2_M)
        nn_wino2_input_ref(v, NN_WINO_BLK, tile);
    else
        nn_wino_input_ref(v, NN_WINO_BLK, tile);
    /* u = G g G^T through a 1x1 layer's weight transform */
    struct nn_wino w = {
        .cin = 1, .cout = 1, .cinp = 1, .coutp = 1, .m = m, .a = m + 2, .ne = ne};
    float u1[NN_WINO_E];
    w.u = u1;
    nn_wino_weights(&w, ker);
    for (int e = 0; e < ne; e++)
        for (int l = 0; l < NN_WINO_BLK; l++)
            u[e * NN_WINO_BLK + l] = v[e * NN_WINO_BLK + l] * u1[e];
    if (m == NN_WINO2_M)
        nn_wino2_output_ref(out, u, NN_WINO_BLK);
    else
        nn_wino_output_ref(out, u, NN_WINO_BLK);
    for (int i = 0; i < m * m * NN_WINO_BLK; i++)
        T_NEAR(out[i], 9, 1e-4);
}

static void test_wino_identity_on_ones(void)
{
    wino_identity_check(NN_WINO_M);
    wino_identity_check(NN_WINO2_M);
}

/* ---- the convolution ------------------------------------------------------------ */

struct wino_case {
    int cin, cout, n, h, w, pad, bias;
};

static const struct wino_case wino_cases[] = {
    {5, 11, 1, 7, 9, 1, 1},    /* channels not multiples of 8, a partial tile */
    {13, 8, 3, 10, 6, 1, 0},   /* batch 3 */
    {16, 24, 3, 5, 5, 0, 0},   /* no padding: 3x3 output, backward pads 2 */
    {9, 7, 1, 6, 11, 2, 1},    /* padding 2 */
    {64, 64, 2, 8, 8, 1, 0},   /* a ResNet layer */
    {32, 48, 1, 13, 13, 1, 1}, /* several tiles, odd */
};

struct wino_bufs {
    float *x, *w, *b, *dy, *y, *dx, *dw, *db;
};

static void wino_bufs_free(struct wino_bufs *r)
{
    float *all[] = {r->x, r->w, r->b, r->dy, r->y, r->dx, r->dw, r->db};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        free(all[i]);
}

/* One conv2d fast-path step with layout src_md, the transforms on isa; 1 when its output
 * and input gradient are within tol of the reference's (and the weight gradient, oneDNN's
 * direct, within direct's 1e-4). */
static int wino_compare(struct nn_dnnl *d, const struct nn_conv2d_cfg *c, struct nn_shape in,
                        const dnnl_memory_desc_t *src_md, const struct wino_bufs *r,
                        enum nn_isa isa, double tol)
{
    struct err e;
    struct nn_shape out;
    nn_conv2d_shape(c, in, &out, &e);
    size_t nx = nn_shape_numel(in), ny = nn_shape_numel(out), nw = nn_conv2d_weight_len(c);
    struct nn_conv2d_fast f;
    if (nn_conv2d_fast_init(&f, d, c, in, src_md, 1, 1, &e)) {
        fprintf(stderr, "    init: %s\n", e.msg);
        return 0;
    }
    int ok = strcmp(nn_conv2d_algo_name(&f), "winograd-own") == 0 &&
             (!d->wino_tile || f.own_fwd.m == d->wino_tile);
    if (!ok)
        fprintf(stderr, "    algorithm %s tile %d, not ours with tile %d\n",
                nn_conv2d_algo_name(&f), f.own_fwd.m, d->wino_tile);
    f.own_fwd.isa = f.own_bwd.isa = isa;
    float *fx = nn_check_to_layout(d, src_md, in, r->x);
    float *fy = nn_alloc(nn_md_bytes(&f.dst_md)), *fdx = nn_alloc(nn_md_bytes(src_md));
    float *fdy = nn_check_to_layout(d, &f.dst_md, out, r->dy);
    float *fdw = nn_check_filled(nw, 0.5f), *fdb = nn_check_filled(c->cout, 0.5f);
    nn_conv2d_fast_forward(&f, fy, fx, r->w, c->bias ? r->b : NULL);
    nn_conv2d_fast_backward(&f, fdx, fdw, c->bias ? fdb : NULL, fdy, fx, r->w);
    float *py = nn_check_to_plain(d, &f.dst_md, out, fy);
    float *pdx = nn_check_to_plain(d, src_md, in, fdx);
    ok = ok && nn_dnnl_check(d, &e) == 0 && nn_check_close_rel("wino out", py, r->y, ny, tol) &&
         nn_check_close_rel("wino dinp", pdx, r->dx, nx, tol) &&
         nn_check_close_acc("wino dweight", fdw, r->dw, nw, 0.5f, 1e-4) &&
         nn_check_close_acc("wino dbias", fdb, r->db, c->cout, 0.5f, 1e-4);
    nn_conv2d_fast_destroy(&f);
    float *bufs[] = {fx, fy, fdx, fdy, fdw, fdb, py, pdx};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
    return ok;
}

static void test_wino_conv_matches_ref(void)
{
    struct nn_dnnl d;
    struct err e;
    T_OK(nn_dnnl_init(&d, &e));
    d.conv_algo = NN_CONV_WINOGRAD;
    for (size_t i = 0; i < sizeof wino_cases / sizeof *wino_cases; i++) {
        const struct wino_case *k = &wino_cases[i];
        struct nn_conv2d_cfg c = nn_conv2d_square(k->cin, k->cout, 3, 1, k->pad, 1, k->bias);
        struct nn_shape in = nn_shape4(k->n, k->cin, k->h, k->w), out;
        T_OK(nn_conv2d_shape(&c, in, &out, &e));
        size_t nx = nn_shape_numel(in), ny = nn_shape_numel(out), nw = nn_conv2d_weight_len(&c);
        uint64_t s = 100 + i * 10;
        struct wino_bufs r = {nn_check_randn(nx, s, 0, 1),
                              nn_check_randn(nw, s + 1, 0, .3f),
                              nn_check_randn(k->cout, s + 2, 0, 1),
                              nn_check_randn(ny, s + 3, 0, 1),
                              malloc(ny * sizeof(float)),
                              malloc(nx * sizeof(float)),
                              nn_check_filled(nw, 0.5f),
                              nn_check_filled(k->cout, 0.5f)};
        nn_conv2d_forward(r.y, r.x, r.w, k->bias ? r.b : NULL, &c, in);
        nn_conv2d_backward(r.dx, r.dw, k->bias ? r.db : NULL, r.dy, r.x, r.w, &c, in);
        dnnl_dims_t dims = {in.n, in.c, in.h, in.w};
        dnnl_memory_desc_t mds[2];
        nn_md_tag(&mds[0], 4, dims, dnnl_nChw8c);
        nn_md_plain(&mds[1], in);
        for (int t = 0; t < 2; t++)
            for (int l = 0; l < 2; l++)
                for (int isa = NN_ISA_BASE; isa <= NN_ISA_AVX2;
                     isa += NN_ISA_AVX2 - NN_ISA_BASE) {
                    if (isa == NN_ISA_AVX2 && nn_isa_get() < NN_ISA_AVX2)
                        continue;
                    d.wino_tile = t ? NN_WINO2_M : NN_WINO_M;
                    T_CHECK_MSG(wino_compare(&d, &c, in, &mds[l], &r, (enum nn_isa)isa,
                                             t ? WINO2_TOL : WINO_TOL),
                                "case %zu, F(%d,3), %s input, %s transforms", i, d.wino_tile,
                                l ? "nchw" : "nChw8c", nn_isa_name((enum nn_isa)isa));
                }
        wino_bufs_free(&r);
    }
    nn_dnnl_cleanup(&d);
}

/* AUTO never takes ours where oneDNN has Winograd, and DIRECT never; layers it cannot
 * compute (stride 2, 1x1, dilation) stay direct under WINOGRAD. */
static void test_wino_selection(void)
{
    struct nn_dnnl d;
    struct err e;
    T_OK(nn_dnnl_init(&d, &e));
    struct {
        struct nn_conv2d_cfg c;
        enum nn_conv_algo algo;
        const char *want;
    } cases[] = {
        {nn_conv2d_square(64, 64, 3, 1, 1, 1, 0), NN_CONV_DIRECT, "direct"},
        {nn_conv2d_square(64, 64, 3, 1, 1, 1, 0), NN_CONV_WINOGRAD, "winograd-own"},
        {nn_conv2d_square(64, 64, 3, 1, 1, 1, 0), NN_CONV_AUTO, "winograd-own"},
        {nn_conv2d_square(64, 64, 3, 2, 1, 1, 0), NN_CONV_WINOGRAD, "direct"},
        {nn_conv2d_square(64, 64, 1, 1, 0, 1, 0), NN_CONV_WINOGRAD, "direct"},
        {nn_conv2d_square(64, 64, 3, 1, 2, 1, 0), NN_CONV_WINOGRAD, "direct"}, /* dilated */
    };
    cases[5].c.dh = cases[5].c.dw = 2;
    struct nn_shape in = nn_shape4(2, 64, 16, 16);
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = {in.n, in.c, in.h, in.w};
    nn_md_tag(&md, 4, dims, dnnl_nChw8c);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct nn_conv2d_fast f;
        d.conv_algo = cases[i].algo;
        T_OK(nn_conv2d_fast_init(&f, &d, &cases[i].c, in, &md, 1, 1, &e));
        T_CHECK_MSG(strcmp(nn_conv2d_algo_name(&f), cases[i].want) == 0, "case %zu: %s", i,
                    nn_conv2d_algo_name(&f));
        nn_conv2d_fast_destroy(&f);
    }
    nn_dnnl_cleanup(&d);
}

/* The tile per layer: AUTO takes F(4x4, 3x3) on 8x8 outputs with 256 channels and leaves
 * 8x8 with 64 direct; WINOGRAD runs F(4x4, 3x3) from 8x8 up and F(2x2, 3x3) below. */
static void test_wino_tile_choice(void)
{
    struct nn_dnnl d;
    struct err e;
    T_OK(nn_dnnl_init(&d, &e));
    struct {
        int ch, hw;
        enum nn_conv_algo algo;
        int tile; /* 0: direct */
    } cases[] = {
        {256, 8, NN_CONV_AUTO, NN_WINO_M},
        {64, 8, NN_CONV_AUTO, 0},
        {256, 4, NN_CONV_AUTO, 0},
        {64, 16, NN_CONV_AUTO, NN_WINO_M},
        {64, 8, NN_CONV_WINOGRAD, NN_WINO_M},
        {64, 4, NN_CONV_WINOGRAD, NN_WINO2_M},
        {32, 7, NN_CONV_WINOGRAD, NN_WINO2_M},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct nn_shape in = nn_shape4(2, cases[i].ch, cases[i].hw, cases[i].hw);
        struct nn_conv2d_cfg c = nn_conv2d_square(in.c, in.c, 3, 1, 1, 1, 0);
        dnnl_memory_desc_t md;
        dnnl_dims_t dims = {in.n, in.c, in.h, in.w};
        nn_md_tag(&md, 4, dims, dnnl_nChw8c);
        struct nn_conv2d_fast f;
        d.conv_algo = cases[i].algo;
        T_OK(nn_conv2d_fast_init(&f, &d, &c, in, &md, 1, 1, &e));
        int got = f.own ? f.own_fwd.m : 0;
        if (nn_isa_get() == NN_ISA_AVX2 || cases[i].algo == NN_CONV_WINOGRAD)
            T_CHECK_MSG(got == cases[i].tile, "case %zu: tile %d, want %d", i, got,
                        cases[i].tile);
        nn_conv2d_fast_destroy(&f);
    }
    nn_dnnl_cleanup(&d);
}

/* ---- a model -------------------------------------------------------------------- */

enum { MB = 2, MC = 3, MH = 16, MSTEPS = 3 };

/* resnet18-cifar on 3x16x16, algo, MSTEPS SGD steps on one batch; the losses, the
 * parameters after, and how many conv layers ran ours (own). */
static int wino_train(enum nn_conv_algo algo, double *losses, float **params, int *own,
                      struct err *e)
{
    struct nn_model m;
    struct nn_optim o;
    float *x = nn_check_randn((size_t)MB * MC * MH * MH, 11, 0, 1);
    int32_t labels[MB] = {3, 7};
    nn_model_init(&m);
    nn_model_set_conv_algo(&m, algo);
    int rc = nn_models_build(&m, "resnet18-cifar", MC, MH, MH, 10, NULL, e) ||
             nn_model_init_params(&m, 5, e) || nn_model_prepare(&m, MB, NN_BACKEND_FAST, 1, e);
    struct nn_optim_cfg oc = nn_optim_defaults(NN_OPTIM_SGD);
    oc.lr = 0.01;
    oc.momentum = 0.9;
    int have_optim = !rc && nn_optim_init(&o, &oc, nn_model_param_count(&m), e) == 0;
    rc = rc || !have_optim;
    *own = 0;
    for (int i = 0; !rc && i < m.nnodes; i++)
        if (m.nodes[i].op == NN_OP_CONV)
            *own += m.nodes[i].fast->conv.own;
    for (int s = 0; !rc && s < MSTEPS; s++) {
        int right;
        nn_model_zero_grad(&m);
        rc = nn_model_forward(&m, x, 1, (uint64_t)s, e) ||
             nn_model_loss(&m, labels, MB, &losses[s], &right, e) ||
             nn_model_backward(&m, NULL, NULL, e);
        if (!rc)
            nn_optim_step(&o, m.params.data, m.grads.data, oc.lr);
    }
    *params = rc ? NULL : malloc(m.nparams * sizeof(float));
    if (*params)
        memcpy(*params, m.params.data, m.nparams * sizeof(float));
    if (have_optim)
        nn_optim_cleanup(&o);
    nn_model_destroy(&m);
    free(x);
    return rc || !*params ? -1 : 0;
}

/* Training with ours matches training with direct: three SGD steps (momentum 0.9) of
 * resnet18-cifar, where 14 of its 20 convolutions are 3x3 stride 1. Per layer ours is
 * within ~1e-5 of the scale; through 20 layers, batch norm over 2 samples (which divides
 * by small deviations) and three steps the differences compound: the losses within 1e-3
 * relative, every parameter within 1e-3 of its tensor's scale, while a wrong gradient
 * moves the loss of the second step by O(lr * |g|^2) ~1e-2 and parameters by O(lr). */
static void test_wino_model_trains_like_direct(void)
{
    struct err e;
    double la[MSTEPS], lb[MSTEPS];
    float *pa = NULL, *pb = NULL;
    int own_a, own_b;
    T_OK(wino_train(NN_CONV_DIRECT, la, &pa, &own_a, &e));
    T_OK(wino_train(NN_CONV_WINOGRAD, lb, &pb, &own_b, &e));
    T_CHECK(own_a == 0);
    T_CHECK_MSG(own_b == 14, "%d layers ours", own_b);
    for (int s = 0; s < MSTEPS; s++)
        T_NEAR(lb[s], la[s], 1e-3 * fabs(la[s]));
    T_CHECK(la[MSTEPS - 1] < la[0]); /* it trained */
    struct nn_model m;
    nn_model_init(&m);
    T_OK(nn_models_build(&m, "resnet18-cifar", MC, MH, MH, 10, NULL, &e));
    int np;
    const struct nn_param *pi = nn_model_param_info(&m, &np);
    int bad = 0;
    for (int p = 0; p < np; p++) {
        double scale = 0, worst = 0;
        for (size_t k = 0; k < pi[p].len; k++) {
            scale = fmax(scale, fabs(pa[pi[p].offset + k]));
            worst = fmax(worst, fabs(pa[pi[p].offset + k] - pb[pi[p].offset + k]));
        }
        if (worst > 1e-3 * scale + 1e-7) {
            fprintf(stderr, "    %s: differs by %.3g (scale %.3g)\n", pi[p].name, worst, scale);
            bad = 1;
        }
    }
    nn_model_destroy(&m);
    free(pa);
    free(pb);
    T_CHECK(!bad);
}

int main(int argc, char **argv)
{
    /* before oneDNN's first call: it reads the cap once */
    setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);
    test_begin(argc, argv);
    TEST_RUN(test_wino_transforms_avx2_match_ref);
    TEST_RUN(test_wino_identity_on_ones);
    TEST_RUN(test_wino_conv_matches_ref);
    TEST_RUN(test_wino_selection);
    TEST_RUN(test_wino_tile_choice);
    TEST_RUN(test_wino_model_trains_like_direct);
    return test_end();
}
