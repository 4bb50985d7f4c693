/* conv2d: 2-D convolution with stride, zero padding, dilation, groups (depthwise when
 * groups == channels) and an optional bias; the plain-loop reference and the oneDNN path.
 *
 * Decisions (fast path): the primitives choose their own layouts (format_tag any) so
 * consecutive oneDNN layers stay in blocked formats; the parameters stay in PyTorch's
 * plain (Cout,Cin/G,KH,KW) layout in the arena (DDP and the optimizer see PyTorch's
 * layout), so the weights are reordered into the primitive's format every forward, and the
 * weight gradient is reordered back with a sum post-op, which is also how it accumulates.
 * The algorithm is the context's (onednn.h): direct by default, as PyTorch's oneDNN path
 * does, or Winograd / oneDNN's choice where the caller asks for speed over the last bits.
 * Where oneDNN has no Winograd (below AVX-512) the forward and backward data of 3x3 stride-1
 * layers run ddpbench's own (winograd.h) on the same layouts; the weight gradient stays
 * oneDNN's direct primitive.
 * bf16 (onednn.h enum nn_bf16): the operands src, weights and diff_dst are converted on
 * the way in (into bf16 tensors, or rounded fp32 copies), the outputs stay fp32; the
 * backward passes read the forward's converted src and weights where the layouts agree.
 * Under native bf16 each of the three primitives is bf16 where oneDNN has a JIT bf16
 * kernel for it, else fp32 on rounded operands (conv_make). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "worker/nn/isa.h"
#include "worker/nn/layer_type.h"
#include "worker/nn/layers.h"

static int conv_out_dim(int in, int k, int s, int p, int d)
{
    return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

int nn_conv2d_shape(const struct nn_conv2d_cfg *c, struct nn_shape in, struct nn_shape *out,
                    struct err *e)
{
    if (in.ndims != 4)
        return err_set(e, ERR_INVALID, "shape", "conv2d needs a 4-D input");
    if (c->cin < 1 || c->cout < 1 || c->kh < 1 || c->kw < 1 || c->sh < 1 || c->sw < 1 ||
        c->dh < 1 || c->dw < 1 || c->ph < 0 || c->pw < 0 || c->groups < 1)
        return err_set(e, ERR_INVALID, "conv2d", "conv2d: sizes must be positive");
    if (c->cin % c->groups || c->cout % c->groups)
        return err_set(e, ERR_INVALID, "conv2d", "conv2d: groups %d does not divide %d -> %d",
                       c->groups, c->cin, c->cout);
    if (in.c != c->cin)
        return err_set(e, ERR_INVALID, "conv2d", "conv2d: input has %d channels, expected %d",
                       in.c, c->cin);
    int oh = conv_out_dim(in.h, c->kh, c->sh, c->ph, c->dh);
    int ow = conv_out_dim(in.w, c->kw, c->sw, c->pw, c->dw);
    if (in.h + 2 * c->ph < c->dh * (c->kh - 1) + 1 ||
        in.w + 2 * c->pw < c->dw * (c->kw - 1) + 1 || oh < 1 || ow < 1)
        return err_set(e, ERR_INVALID, "shape",
                       "conv2d: input %dx%d is smaller than the kernel", in.h, in.w);
    *out = nn_shape4(in.n, c->cout, oh, ow);
    return 0;
}

size_t nn_conv2d_weight_len(const struct nn_conv2d_cfg *c)
{
    return (size_t)c->cout * (size_t)(c->cin / c->groups) * (size_t)c->kh * (size_t)c->kw;
}

/* ---- reference -------------------------------------------------------------------- */

void nn_conv2d_forward(float *out, const float *inp, const float *weight, const float *bias,
                       const struct nn_conv2d_cfg *c, struct nn_shape in)
{
    int icg = c->cin / c->groups, ocg = c->cout / c->groups;
    int H = in.h, W = in.w;
    int OH = conv_out_dim(H, c->kh, c->sh, c->ph, c->dh);
    int OW = conv_out_dim(W, c->kw, c->sw, c->pw, c->dw);
#pragma omp parallel for collapse(2) schedule(static)
    for (int n = 0; n < in.n; n++)
        for (int oc = 0; oc < c->cout; oc++) {
            int g = oc / ocg;
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    double acc = bias ? bias[oc] : 0.0;
                    for (int icl = 0; icl < icg; icl++) {
                        const float *x = inp + ((size_t)n * c->cin + g * icg + icl) * H * W;
                        const float *wk = weight + ((size_t)oc * icg + icl) * c->kh * c->kw;
                        for (int ky = 0; ky < c->kh; ky++) {
                            int iy = oh * c->sh - c->ph + ky * c->dh;
                            if (iy < 0 || iy >= H)
                                continue;
                            for (int kx = 0; kx < c->kw; kx++) {
                                int ix = ow * c->sw - c->pw + kx * c->dw;
                                if (ix >= 0 && ix < W)
                                    acc += (double)x[iy * W + ix] * wk[ky * c->kw + kx];
                            }
                        }
                    }
                    out[(((size_t)n * c->cout + oc) * OH + oh) * OW + ow] = (float)acc;
                }
        }
}

/* dinp gathered per input element (so threads never write the same element): the outputs
 * that read (iy, ix) through tap (ky, kx) are those with oh*sh = iy + ph - ky*dh. */
static void conv2d_backward_input(float *dinp, const float *dout, const float *weight,
                                  const struct nn_conv2d_cfg *c, struct nn_shape in, int OH,
                                  int OW)
{
    int icg = c->cin / c->groups, ocg = c->cout / c->groups;
    int H = in.h, W = in.w;
#pragma omp parallel for collapse(2) schedule(static)
    for (int n = 0; n < in.n; n++)
        for (int ic = 0; ic < c->cin; ic++) {
            int g = ic / icg, icl = ic % icg;
            for (int iy = 0; iy < H; iy++)
                for (int ix = 0; ix < W; ix++) {
                    double acc = 0;
                    for (int ocl = 0; ocl < ocg; ocl++) {
                        int oc = g * ocg + ocl;
                        const float *dy = dout + ((size_t)n * c->cout + oc) * OH * OW;
                        const float *wk = weight + ((size_t)oc * icg + icl) * c->kh * c->kw;
                        for (int ky = 0; ky < c->kh; ky++) {
                            int ty = iy + c->ph - ky * c->dh;
                            if (ty < 0 || ty % c->sh || ty / c->sh >= OH)
                                continue;
                            for (int kx = 0; kx < c->kw; kx++) {
                                int tx = ix + c->pw - kx * c->dw;
                                if (tx < 0 || tx % c->sw || tx / c->sw >= OW)
                                    continue;
                                acc += (double)dy[(ty / c->sh) * OW + tx / c->sw] *
                                       wk[ky * c->kw + kx];
                            }
                        }
                    }
                    dinp[(((size_t)n * c->cin + ic) * H + iy) * W + ix] = (float)acc;
                }
        }
}

void nn_conv2d_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, const struct nn_conv2d_cfg *c,
                        struct nn_shape in)
{
    int icg = c->cin / c->groups, ocg = c->cout / c->groups;
    int H = in.h, W = in.w;
    int OH = conv_out_dim(H, c->kh, c->sh, c->ph, c->dh);
    int OW = conv_out_dim(W, c->kw, c->sw, c->pw, c->dw);
    if (dinp)
        conv2d_backward_input(dinp, dout, weight, c, in, OH, OW);
#pragma omp parallel for schedule(static)
    for (int oc = 0; oc < c->cout; oc++) {
        int g = oc / ocg;
        if (dbias) {
            double s = 0;
            for (int n = 0; n < in.n; n++)
                for (int i = 0; i < OH * OW; i++)
                    s += dout[((size_t)n * c->cout + oc) * OH * OW + i];
            dbias[oc] += (float)s;
        }
        for (int icl = 0; icl < icg; icl++)
            for (int ky = 0; ky < c->kh; ky++)
                for (int kx = 0; kx < c->kw; kx++) {
                    double s = 0;
                    for (int n = 0; n < in.n; n++) {
                        const float *x = inp + ((size_t)n * c->cin + g * icg + icl) * H * W;
                        const float *dy = dout + ((size_t)n * c->cout + oc) * OH * OW;
                        for (int oh = 0; oh < OH; oh++) {
                            int iy = oh * c->sh - c->ph + ky * c->dh;
                            if (iy < 0 || iy >= H)
                                continue;
                            for (int ow = 0; ow < OW; ow++) {
                                int ix = ow * c->sw - c->pw + kx * c->dw;
                                if (ix >= 0 && ix < W)
                                    s += (double)dy[oh * OW + ow] * x[iy * W + ix];
                            }
                        }
                    }
                    dweight[(((size_t)oc * icg + icl) * c->kh + ky) * c->kw + kx] += (float)s;
                }
    }
}

/* ---- oneDNN ----------------------------------------------------------------------- */

struct conv_geom {
    dnnl_dims_t strides, dilates, pad;
    dnnl_memory_desc_t w_plain, w_any, b_md;
};

static void conv_geom_init(struct conv_geom *g, const struct nn_conv2d_cfg *c)
{
    g->strides[0] = c->sh;
    g->strides[1] = c->sw;
    g->dilates[0] = c->dh - 1; /* oneDNN counts the gaps */
    g->dilates[1] = c->dw - 1;
    g->pad[0] = c->ph;
    g->pad[1] = c->pw;
    int G = c->groups;
    if (G > 1) {
        dnnl_dims_t wd = {G, c->cout / G, c->cin / G, c->kh, c->kw};
        nn_md_tag(&g->w_plain, 5, wd, dnnl_goihw);
        nn_md_tag(&g->w_any, 5, wd, dnnl_format_tag_any);
    } else {
        dnnl_dims_t wd = {c->cout, c->cin, c->kh, c->kw};
        nn_md_tag(&g->w_plain, 4, wd, dnnl_oihw);
        nn_md_tag(&g->w_any, 4, wd, dnnl_format_tag_any);
    }
    dnnl_dims_t bd = {c->cout};
    nn_md_tag(&g->b_md, 1, bd, dnnl_a);
}

enum conv_kind { CONV_FWD, CONV_BWD_DATA, CONV_BWD_WEIGHTS };

static const char *const conv_what[] = {"conv2d forward", "conv2d backward data",
                                        "conv2d backward weights"};

/* One convolution primitive; a: src (diff_src), c: dst (diff_dst) layouts. */
static int conv_make_alg(struct nn_prim *p, struct nn_conv2d_fast *f, const struct conv_geom *g,
                         enum conv_kind k, const dnnl_memory_desc_t *a,
                         const dnnl_memory_desc_t *c, int train, dnnl_alg_kind_t alg, bool op16,
                         struct err *e)
{
    dnnl_convolution_desc_t cd;
    const dnnl_memory_desc_t *bias = f->cfg.bias ? &g->b_md : NULL;
    /* op16 (native bf16): the operands (src, weights, diff_dst) in bf16, the outputs fp32 */
    dnnl_memory_desc_t a_op = *a, w_op = g->w_any, c_op = *c;
    if (op16 && k != CONV_BWD_DATA)
        nn_md_bf16(&a_op, a, dnnl_format_tag_any);
    if (op16 && k != CONV_BWD_WEIGHTS)
        nn_md_bf16(&w_op, &g->w_any, dnnl_format_tag_any);
    if (op16 && k != CONV_FWD)
        nn_md_bf16(&c_op, c, dnnl_format_tag_any);
    if (!op16 && a->data_type != dnnl_f32) /* fp32 after a bf16 forward: its own layout */
        dnnl_memory_desc_init_by_tag(&a_op, a->ndims, a->dims, dnnl_f32, dnnl_format_tag_any);
    dnnl_status_t st;
    if (k == CONV_FWD)
        st = dnnl_dilated_convolution_forward_desc_init(
            &cd, train ? dnnl_forward_training : dnnl_forward_inference, alg, &a_op, &w_op,
            bias, &c_op, g->strides, g->dilates, g->pad, g->pad);
    else if (k == CONV_BWD_DATA)
        st = dnnl_dilated_convolution_backward_data_desc_init(
            &cd, alg, &a_op, &w_op, &c_op, g->strides, g->dilates, g->pad, g->pad);
    else
        st = dnnl_dilated_convolution_backward_weights_desc_init(
            &cd, alg, &a_op, &w_op, bias, &c_op, g->strides, g->dilates, g->pad, g->pad);
    if (st != dnnl_success)
        return nn_dnnl_err(e, st, conv_what[k]);
    return nn_prim_create(p, f->d, &cd, k == CONV_FWD ? NULL : f->fwd.pd, conv_what[k], e);
}

/* Where Winograd F(4x4, 3x3) pays on these machines. Measured (fwd + both backwards, batch
 * 32, 2 threads, square CxC layers): 1.1-2.9x faster from 7x7 outputs up with 64+ channels
 * and from 16x16 up with 32, but up to 10x SLOWER on 1x1..6x6 outputs, where its 4x4 tiles
 * are mostly padding. oneDNN 2.6's own dnnl_convolution_auto picks Winograd for all of them,
 * hence this rule. */
static int conv_prefers_winograd(const struct nn_conv2d_cfg *c, struct nn_shape out)
{
    int hw = out.h < out.w ? out.h : out.w, ch = c->cin < c->cout ? c->cin : c->cout;
    return c->kh == 3 && c->kw == 3 && c->sh == 1 && c->sw == 1 && c->dh == 1 && c->dw == 1 &&
           c->groups == 1 && ((hw >= 7 && ch >= 64) || (hw >= 16 && ch >= 32));
}

/* With the context's algorithm; Winograd falls back to direct where oneDNN has none. */
static int conv_make_op(struct nn_prim *p, struct nn_conv2d_fast *f, const struct conv_geom *g,
                        enum conv_kind k, const dnnl_memory_desc_t *a,
                        const dnnl_memory_desc_t *c, int train, bool op16, struct err *e)
{
    enum nn_conv_algo algo = f->d->conv_algo;
    int wino = algo == NN_CONV_WINOGRAD ||
               (algo == NN_CONV_AUTO && conv_prefers_winograd(&f->cfg, f->out));
    if (wino && conv_make_alg(p, f, g, k, a, c, train, dnnl_convolution_winograd, op16, e) == 0)
        return 0;
    return conv_make_alg(p, f, g, k, a, c, train, dnnl_convolution_direct, op16, e);
}

/* Native bf16 where oneDNN has a JIT bf16 kernel for this convolution; where it offers only
 * its gemm (im2col) one, as for a 1-channel input's weight gradient (mnist-cnn's first layer:
 * measured 13x slower than fp32's JIT kernel here), the fp32 kernel on operands rounded to
 * bf16 (nn_convert_operand_init), which computes the same numbers. */
static int conv_make(struct nn_prim *p, struct nn_conv2d_fast *f, const struct conv_geom *g,
                     enum conv_kind k, const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *c,
                     int train, struct err *e)
{
    bool op16 = f->d->bf16 == NN_BF16_NATIVE;
    if (conv_make_op(p, f, g, k, a, c, train, op16, e))
        return -1;
    if (!op16 || strncmp(nn_prim_impl(p), "jit", 3) == 0)
        return 0;
    nn_prim_destroy(p);
    return conv_make_op(p, f, g, k, a, c, train, false, e);
}

/* First with the layouts the tensors already have (no reorders at all); if oneDNN has only
 * its reference implementation for those (say plain diff_src with blocked diff_dst), again
 * with format any, and the caller converts. */
static int conv_make_fast(struct nn_prim *p, struct nn_conv2d_fast *f,
                          const struct conv_geom *g, enum conv_kind k,
                          const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *c, int train,
                          struct err *e)
{
    if (conv_make(p, f, g, k, a, c, train, e))
        return -1;
    if (!nn_prim_is_ref(p))
        return 0;
    nn_prim_destroy(p);
    dnnl_memory_desc_t a_any, c_any;
    nn_md_any(&a_any, f->in);
    nn_md_any(&c_any, f->out);
    return conv_make(p, f, g, k, &a_any, &c_any, train, e);
}

static int conv_fast_backward_init(struct nn_conv2d_fast *f, const struct conv_geom *g,
                                   int need_dinp, struct err *e)
{
    struct nn_dnnl *d = f->d;
    const dnnl_memory_desc_t *fwd_src = nn_prim_md(&f->fwd, dnnl_query_src_md, 0);
    if (conv_make_fast(&f->bwd_weights, f, g, CONV_BWD_WEIGHTS, fwd_src, &f->dst_md, 1, e))
        return -1;
    const struct nn_prim *bw = &f->bwd_weights;
    const dnnl_memory_desc_t *bw_src = nn_prim_md(bw, dnnl_query_src_md, 0);
    const dnnl_memory_desc_t *bw_ddst = nn_prim_md(bw, dnnl_query_diff_dst_md, 0);
    const dnnl_memory_desc_t *bw_dw = nn_prim_md(bw, dnnl_query_diff_weights_md, 0);
    f->db_buf = nn_alloc((size_t)f->cfg.cout * sizeof(float));
    if (!f->db_buf)
        return err_set(e, ERR_NOMEM, "", "conv2d bias gradient");
    if (nn_convert_in_init(&f->src_bw, d, fwd_src, bw_src, e) ||
        nn_convert_operand_init(&f->ddst_bw, d, &f->dst_md, bw_ddst, e) ||
        nn_convert_out_init(&f->dw_out, d, bw_dw, &g->w_plain, 1, e) ||
        nn_mem_create(&f->m_src_bw, d, bw_src, e) ||
        nn_mem_create(&f->m_ddst_bw, d, bw_ddst, e) || nn_mem_create(&f->m_dw, d, bw_dw, e) ||
        nn_mem_create(&f->m_db, d, &g->b_md, e))
        return -1;
    if (!need_dinp)
        return 0;
    if (f->own) /* dY in the forward's output layout -> dX in its input layout */
        return nn_wino_init(&f->own_bwd, d, f->in.n, f->cfg.cout, f->cfg.cin, f->out.h,
                            f->out.w, 2 - f->cfg.ph, &f->own_fwd.dst, &f->own_fwd.src, 1,
                            f->own_fwd.m, e);
    if (conv_make_fast(&f->bwd_data, f, g, CONV_BWD_DATA, &f->src_md, &f->dst_md, 1, e))
        return -1;
    const struct nn_prim *bd = &f->bwd_data;
    const dnnl_memory_desc_t *bd_w = nn_prim_md(bd, dnnl_query_weights_md, 0);
    const dnnl_memory_desc_t *bd_dsrc = nn_prim_md(bd, dnnl_query_diff_src_md, 0);
    const dnnl_memory_desc_t *bd_ddst = nn_prim_md(bd, dnnl_query_diff_dst_md, 0);
    f->w_bwd_shared = f->w_fwd.active &&
                      nn_md_same(bd_w, nn_prim_md(&f->fwd, dnnl_query_weights_md, 0));
    if ((!f->w_bwd_shared && nn_convert_operand_init(&f->w_bwd, d, &g->w_plain, bd_w, e)) ||
        nn_convert_operand_init(&f->ddst_bd, d, &f->dst_md, bd_ddst, e) ||
        nn_convert_out_init(&f->dsrc_out, d, bd_dsrc, &f->src_md, 0, e) ||
        nn_mem_create(&f->m_wbwd, d, bd_w, e) || nn_mem_create(&f->m_ddst, d, bd_ddst, e) ||
        nn_mem_create(&f->m_dsrc_bwd, d, bd_dsrc, e))
        return -1;
    return 0;
}

/* ---- a single-pixel input ------------------------------------------------------------ */

/* With a 1x1 input and a 1x1 output, one kernel tap (ty, tx) reads data and the others
 * read only padding: ResNet's last stage at 32x32 input (3x3, pad 1, on 1x1 maps). The
 * layer is then a 1x1 convolution on that tap's weights. oneDNN runs the 3x3 one's weight
 * gradient as a gemm over nine im2col'd taps, eight of them zeros (on AVX2: measured 13.7
 * ms a step for one 512->512 layer at batch 32, 30% of resnet18's step, PyTorch alike). */
static int conv_pixel_tap(const struct nn_conv2d_cfg *c, struct nn_shape in,
                          struct nn_shape out, int *ty, int *tx)
{
    if (in.h != 1 || in.w != 1 || out.h != 1 || out.w != 1 || c->groups != 1 ||
        (c->kh == 1 && c->kw == 1) || c->ph % c->dh || c->pw % c->dw)
        return 0;
    *ty = c->ph / c->dh;
    *tx = c->pw / c->dw;
    return *ty < c->kh && *tx < c->kw;
}

/* The inner 1x1 convolution (owned by f) and the tap's weight buffers. */
static int conv_pixel_init(struct nn_conv2d_fast *f, const dnnl_memory_desc_t *src_md,
                           int train, int need_dinp, struct err *e)
{
    struct nn_conv2d_cfg one = f->cfg;
    one.kh = one.kw = one.sh = one.sw = one.dh = one.dw = 1;
    one.ph = one.pw = 0;
    size_t nw = (size_t)one.cout * (size_t)one.cin * sizeof(float);
    f->pix = calloc(1, sizeof *f->pix);
    f->w_pix = nn_alloc(nw);
    f->dw_pix = train ? nn_alloc(nw) : NULL;
    if (!f->pix || !f->w_pix || (train && !f->dw_pix))
        return err_set(e, ERR_NOMEM, "", "conv2d single-pixel weights");
    if (nn_conv2d_fast_init(f->pix, f->d, &one, f->in, src_md, train, need_dinp, e))
        return -1;
    f->dst_md = f->pix->dst_md;
    return 0;
}

/* w_pix = weight[:, :, ty, tx] */
static void conv_pixel_gather(struct nn_conv2d_fast *f, const float *weight)
{
    size_t taps = (size_t)f->cfg.kh * f->cfg.kw, at = (size_t)f->tap_y * f->cfg.kw + f->tap_x;
    size_t n = (size_t)f->cfg.cout * f->cfg.cin;
    for (size_t i = 0; i < n; i++)
        f->w_pix[i] = weight[i * taps + at];
}

static void conv_pixel_forward(struct nn_conv2d_fast *f, float *out, const float *inp,
                               const float *weight, const float *bias)
{
    conv_pixel_gather(f, weight);
    nn_conv2d_fast_forward(f->pix, out, inp, f->w_pix, bias);
}

/* dweight[:, :, ty, tx] += the 1x1 convolution's weight gradient; the other taps' is 0 */
static void conv_pixel_backward(struct nn_conv2d_fast *f, float *dinp, float *dweight,
                                float *dbias, const float *dout, const float *inp,
                                const float *weight)
{
    size_t taps = (size_t)f->cfg.kh * f->cfg.kw, at = (size_t)f->tap_y * f->cfg.kw + f->tap_x;
    size_t n = (size_t)f->cfg.cout * f->cfg.cin;
    conv_pixel_gather(f, weight);
    memset(f->dw_pix, 0, n * sizeof *f->dw_pix);
    nn_conv2d_fast_backward(f->pix, dinp, f->dw_pix, dbias, dout, inp, f->w_pix);
    for (size_t i = 0; i < n; i++)
        dweight[i * taps + at] += f->dw_pix[i];
}

static void conv_pixel_destroy(struct nn_conv2d_fast *f)
{
    if (f->pix)
        nn_conv2d_fast_destroy(f->pix);
    free(f->pix);
    free(f->w_pix);
    free(f->dw_pix);
}

/* ---- ddpbench's own Winograd (winograd.h) ----------------------------------------- */

/* The layers it computes: 3x3, stride 1, dilation 1, ungrouped, equal padding up to 2
 * (backward data pads 2 - p), fp32 (bf16 stays on oneDNN's path). */
static int conv_own_fits(const struct nn_conv2d_fast *f)
{
    const struct nn_conv2d_cfg *c = &f->cfg;
    return c->kh == 3 && c->kw == 3 && c->sh == 1 && c->sw == 1 && c->dh == 1 && c->dw == 1 &&
           c->groups == 1 && c->ph == c->pw && c->ph <= 2 && f->d->bf16 == NN_BF16_OFF;
}

/* Where ours beat oneDNN's direct JIT kernel on AVX2 (AVX2 emulated on a Zen 4 by
 * ONEDNN_MAX_CPU_ISA; tests/bench/conv_bench, fwd + both backwards, 2 threads, RESULTS.md
 * "Issue 36 - own Winograd on AVX2"): 1.4-2x faster forward and backward data on 56x56,
 * 28x28 and 14x14 outputs with 64-256 channels, 1.27x on 8x8 with 256 (resnet18-cifar's
 * layer3), even on 8x8 with 64; slower on 7x7 with 512 (0.68x forward; its 9 MB-per-
 * element U no longer stays in cache) and on 4x4, where a 4x4 tile is mostly padding.
 * F(2x2, 3x3) measured faster than both nowhere (P6: at best level with F(4x4, 3x3) on
 * 8x8/256, 0.8x of direct on 4x4/512 and 7x7/512), so AUTO runs F(4x4, 3x3) only. */
static int conv_own_prefers(const struct nn_conv2d_cfg *c, struct nn_shape out)
{
    int hw = out.h < out.w ? out.h : out.w, ch = c->cin < c->cout ? c->cin : c->cout;
    return (hw >= 14 && ch >= 32) || (hw >= 8 && ch >= 256 && ch < 512);
}

/* Our output tile for the layer: forced by the context (benchmarks, tests), else
 * F(4x4, 3x3) from 8x8 outputs up (faster than F(2x2, 3x3) on every layer measured there),
 * F(2x2, 3x3) below, where F(4x4, 3x3)'s tiles are mostly padding (measured 1.2x faster
 * than F(4x4, 3x3) on 4x4/512, 1.07x on 7x7/512; only NN_CONV_WINOGRAD runs ours there). */
static int conv_own_tile(const struct nn_conv2d_fast *f)
{
    if (f->d->wino_tile)
        return f->d->wino_tile;
    int hw = f->out.h < f->out.w ? f->out.h : f->out.w;
    return hw >= 8 ? NN_WINO_M : NN_WINO2_M;
}

/* WINOGRAD: ours wherever oneDNN made no Winograd for the layer (no AVX-512); AUTO: ours
 * on AVX2 CPUs (on AVX-512 oneDNN's is there and stays) where it measured faster. */
static int conv_own_wanted(const struct nn_conv2d_fast *f)
{
    if (!conv_own_fits(f) || strstr(nn_prim_impl(&f->fwd), "wino"))
        return 0;
    enum nn_conv_algo a = f->d->conv_algo;
    return a == NN_CONV_WINOGRAD || (a == NN_CONV_AUTO && nn_isa_get() == NN_ISA_AVX2 &&
                                     conv_own_prefers(&f->cfg, f->out));
}

/* After the forward primitive is made: ours instead where wanted, reading the incoming
 * tensor as it is and writing the layout the primitive chose (so the neighbours'
 * conversions stay inactive). */
static int conv_own_init(struct nn_conv2d_fast *f, struct err *e)
{
    struct nn_layout src, dst;
    struct err ignored;
    if (!conv_own_wanted(f) || nn_layout_from_md(&src, &f->src_md, &ignored) ||
        nn_layout_from_md(&dst, &f->dst_md, &ignored))
        return 0;
    if (nn_wino_init(&f->own_fwd, f->d, f->in.n, f->cfg.cin, f->cfg.cout, f->in.h, f->in.w,
                     f->cfg.ph, &src, &dst, 0, conv_own_tile(f), e))
        return -1;
    f->own = 1;
    return 0;
}

int nn_conv2d_fast_init(struct nn_conv2d_fast *f, struct nn_dnnl *d,
                        const struct nn_conv2d_cfg *c, struct nn_shape in,
                        const dnnl_memory_desc_t *src_md, int train, int need_dinp,
                        struct err *e)
{
    memset(f, 0, sizeof *f);
    f->d = d;
    f->cfg = *c;
    f->in = in;
    f->src_md = *src_md;
    if (nn_conv2d_shape(c, in, &f->out, e))
        return -1;
    if (conv_pixel_tap(c, in, f->out, &f->tap_y, &f->tap_x)) {
        if (conv_pixel_init(f, src_md, train, need_dinp, e) == 0)
            return 0;
        goto fail;
    }
    struct conv_geom g;
    conv_geom_init(&g, c);
    dnnl_memory_desc_t dst_any;
    nn_md_any(&dst_any, f->out);
    if (conv_make_fast(&f->fwd, f, &g, CONV_FWD, src_md, &dst_any, train, e))
        goto fail;
    const dnnl_memory_desc_t *fwd_src = nn_prim_md(&f->fwd, dnnl_query_src_md, 0);
    const dnnl_memory_desc_t *w_md = nn_prim_md(&f->fwd, dnnl_query_weights_md, 0);
    f->dst_md = *nn_prim_md(&f->fwd, dnnl_query_dst_md, 0);
    if (conv_own_init(f, e))
        goto fail;
    if (nn_convert_operand_init(&f->src_in, d, src_md, fwd_src, e) ||
        nn_convert_operand_init(&f->w_fwd, d, &g.w_plain, w_md, e) ||
        nn_mem_create(&f->m_src, d, fwd_src, e) || nn_mem_create(&f->m_w, d, w_md, e) ||
        nn_mem_create(&f->m_b, d, &g.b_md, e) || nn_mem_create(&f->m_dst, d, &f->dst_md, e))
        goto fail;
    if (train && conv_fast_backward_init(f, &g, need_dinp, e))
        goto fail;
    return 0;
fail:
    nn_conv2d_fast_destroy(f);
    return -1;
}

void nn_conv2d_fast_forward(struct nn_conv2d_fast *f, float *out, const float *inp,
                            const float *weight, const float *bias)
{
    if (f->pix) {
        conv_pixel_forward(f, out, inp, weight, bias);
        return;
    }
    if (f->own) {
        if (f->src_in.active) /* the weight gradient reads the primitive's layout */
            nn_convert_in(&f->src_in, f->d, inp);
        nn_wino_weights(&f->own_fwd, weight);
        nn_wino_run(&f->own_fwd, f->d, out, inp, f->cfg.bias ? bias : NULL);
        return;
    }
    dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, nn_mem_bind(&f->m_src, nn_convert_in(&f->src_in, f->d, inp))},
        {DNNL_ARG_WEIGHTS, nn_mem_bind(&f->m_w, nn_convert_in(&f->w_fwd, f->d, weight))},
        {DNNL_ARG_DST, nn_mem_bind(&f->m_dst, out)},
        {DNNL_ARG_BIAS, f->cfg.bias ? nn_mem_bind(&f->m_b, bias) : NULL},
    };
    nn_prim_run(&f->fwd, f->d, f->cfg.bias ? 4 : 3, args);
}

void nn_conv2d_fast_backward(struct nn_conv2d_fast *f, float *dinp, float *dweight,
                             float *dbias, const float *dout, const float *inp,
                             const float *weight)
{
    if (f->pix) {
        conv_pixel_backward(f, dinp, dweight, dbias, dout, inp, weight);
        return;
    }
    struct nn_dnnl *d = f->d;
    if (dinp && f->own) {
        nn_wino_weights(&f->own_bwd, weight);
        nn_wino_run(&f->own_bwd, d, dinp, dout, NULL);
    }
    if (dinp && f->bwd_data.prim) {
        /* the forward of this step left its converted weights in w_fwd.buf */
        const float *w = f->w_bwd_shared ? f->w_fwd.buf : nn_convert_in(&f->w_bwd, d, weight);
        float *ds = nn_convert_out_begin(&f->dsrc_out, dinp);
        dnnl_exec_arg_t args[] = {
            {DNNL_ARG_DIFF_DST, nn_mem_bind(&f->m_ddst, nn_convert_in(&f->ddst_bd, d, dout))},
            {DNNL_ARG_WEIGHTS, nn_mem_bind(&f->m_wbwd, w)},
            {DNNL_ARG_DIFF_SRC, nn_mem_bind(&f->m_dsrc_bwd, ds)},
        };
        nn_prim_run(&f->bwd_data, d, 3, args);
        nn_convert_out_end(&f->dsrc_out, d, dinp);
    }
    /* the forward's own input: converted into src_in.buf when the layouts differed */
    const float *src = f->src_in.active ? f->src_in.buf : inp;
    float *dw = nn_convert_out_begin(&f->dw_out, dweight);
    dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, nn_mem_bind(&f->m_src_bw, nn_convert_in(&f->src_bw, d, src))},
        {DNNL_ARG_DIFF_DST, nn_mem_bind(&f->m_ddst_bw, nn_convert_in(&f->ddst_bw, d, dout))},
        {DNNL_ARG_DIFF_WEIGHTS, nn_mem_bind(&f->m_dw, dw)},
        {DNNL_ARG_DIFF_BIAS, nn_mem_bind(&f->m_db, f->db_buf)},
    };
    nn_prim_run(&f->bwd_weights, d, f->cfg.bias ? 4 : 3, args);
    nn_convert_out_end(&f->dw_out, d, dweight);
    if (f->cfg.bias && dbias)
        for (int i = 0; i < f->cfg.cout; i++)
            dbias[i] += f->db_buf[i];
}

void nn_conv2d_fast_destroy(struct nn_conv2d_fast *f)
{
    conv_pixel_destroy(f);
    struct nn_convert *cs[] = {&f->src_in,   &f->w_fwd,  &f->w_bwd,   &f->ddst_bd,
                               &f->dsrc_out, &f->src_bw, &f->ddst_bw, &f->dw_out};
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++)
        nn_convert_destroy(cs[i]);
    struct nn_prim *ps[] = {&f->fwd, &f->bwd_data, &f->bwd_weights, NULL};
    struct nn_mem *ms[] = {&f->m_src,     &f->m_w,    &f->m_b,        &f->m_dst,
                           &f->m_ddst,    &f->m_wbwd, &f->m_dsrc_bwd, &f->m_src_bw,
                           &f->m_ddst_bw, &f->m_dw,   &f->m_db,       NULL};
    nn_fast_release(ps, ms, (void *[]){f->db_buf}, 1);
    nn_wino_destroy(&f->own_fwd);
    nn_wino_destroy(&f->own_bwd);
    memset(f, 0, sizeof *f);
}

const char *nn_conv2d_algo_name(const struct nn_conv2d_fast *f)
{
    if (f->own)
        return "winograd-own";
    if (f->pix)
        return nn_conv2d_algo_name(f->pix);
    /* what was created, not what was asked: Winograd may have fallen back (conv_make_op) */
    const_dnnl_op_desc_t op = NULL;
    if (f->fwd.pd &&
        dnnl_primitive_desc_query(f->fwd.pd, dnnl_query_convolution_d, 0, &op) ==
            dnnl_success &&
        op && ((const dnnl_convolution_desc_t *)op)->alg_kind == dnnl_convolution_winograd)
        return "winograd-onednn";
    return "direct";
}

/* ---- the row (layer_type.h) ---------------------------------------------------------- */

static void conv2d_row_forward(const struct nn_layer_args *a)
{
    nn_conv2d_forward(a->y->data, a->x->data, a->w, a->b, &a->n->cfg.conv, a->x->shape);
}

static void conv2d_row_backward(const struct nn_layer_args *a)
{
    nn_conv2d_backward(a->din0, a->dw, a->db, a->y->grad, a->x->data, a->w, &a->n->cfg.conv,
                       a->x->shape);
}

static int conv2d_row_fast_init(const struct nn_layer_args *a, struct err *e)
{
    struct nn_conv2d_fast *f = &a->n->fast->conv;
    if (nn_conv2d_fast_init(f, a->dnnl, &a->n->cfg.conv, a->x->shape, &a->x->md, a->train,
                            a->dinp, e))
        return -1;
    a->y->md = f->dst_md;
    return 0;
}

NN_LAYER_FAST_STATE(conv2d, conv2d, conv, (a->y->data, a->x->data, a->w, a->b),
                    (a->din0, a->dw, a->db, a->y->grad, a->x->data, a->w))

/* a single-pixel layer names its inner 1x1 convolution's implementation */
static const char *conv2d_row_fast_impl(const union nn_node_fast *f)
{
    return nn_prim_impl(f->conv.pix ? &f->conv.pix->fwd : &f->conv.fwd);
}

const struct nn_layer_type nn_layer_conv2d = {
    .name = "conv2d", NN_LAYER_ROW(conv2d), .fast_impl = conv2d_row_fast_impl};
