/* pool: max pooling (MaxPool2d), average pooling (AvgPool2d, count_include_pad as PyTorch's
 * default), global average pooling and adaptive average pooling (AdaptiveAvgPool2d); the
 * plain-loop references and oneDNN's pooling primitive. One file because they share the
 * output-size rules, the window walk of the references and the primitive.
 *
 * Decisions: ties go to the FIRST maximum of a window in row-major order, as in PyTorch's
 * and oneDNN's kernels, so both paths route a gradient to the same element even where a ReLU
 * before the pool produced many zeros; the fast path keeps oneDNN's index workspace for
 * backward, the reference recomputes the arg max. Windows follow PyTorch exactly: without
 * ceil_mode no window reaches past the right padding, so count_include_pad divides by kh*kw
 * everywhere. Adaptive pooling is an ordinary pooling when the plane divides evenly (the
 * fast path uses oneDNN then) and otherwise runs these loops on a plain layout. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/nn/layer_type.h"
#include "worker/nn/layers.h"

int nn_pool_shape(const struct nn_pool_cfg *c, struct nn_shape in, struct nn_shape *out,
                  struct err *e)
{
    if (in.ndims != 4)
        return err_set(e, ERR_INVALID, "shape", "pooling needs a 4-D input");
    if (c->kh < 1 || c->kw < 1 || c->sh < 1 || c->sw < 1 || c->ph < 0 || c->pw < 0)
        return err_set(e, ERR_INVALID, "pool", "pooling: sizes must be positive");
    if (2 * c->ph > c->kh || 2 * c->pw > c->kw)
        return err_set(e, ERR_INVALID, "pool", "pooling: padding over half the kernel");
    if (in.h + 2 * c->ph < c->kh || in.w + 2 * c->pw < c->kw)
        return err_set(e, ERR_INVALID, "shape", "pooling: input %dx%d is smaller than %dx%d",
                       in.h, in.w, c->kh, c->kw);
    *out = nn_shape4(in.n, in.c, (in.h + 2 * c->ph - c->kh) / c->sh + 1,
                     (in.w + 2 * c->pw - c->kw) / c->sw + 1);
    return 0;
}

struct nn_pool_cfg nn_pool_global(struct nn_shape in)
{
    return (struct nn_pool_cfg){
        .kh = in.h, .kw = in.w, .sh = 1, .sw = 1, .count_include_pad = 1};
}

int nn_adaptive_as_pool(struct nn_pool_cfg *c, int oh, int ow, struct nn_shape in)
{
    if (oh < 1 || ow < 1 || in.h % oh || in.w % ow)
        return 0;
    int kh = in.h / oh, kw = in.w / ow;
    *c = (struct nn_pool_cfg){.kh = kh, .kw = kw, .sh = kh, .sw = kw, .count_include_pad = 1};
    return 1;
}

/* ---- reference -------------------------------------------------------------------- */

enum pool_op { POOL_MAX_FWD, POOL_MAX_BWD, POOL_AVG_FWD, POOL_AVG_BWD };

/* Output cell (oh, ow)'s window clipped to the input: rows [y0, y1), columns [x0, x1), and
 * the divisor of its average. c == NULL: adaptive pooling's window for an os-sized output. */
struct pool_win {
    int y0, y1, x0, x1, div;
};

static struct pool_win pool_window(const struct nn_pool_cfg *c, struct nn_shape in,
                                   struct nn_shape os, int oh, int ow)
{
    struct pool_win w;
    if (!c) { /* PyTorch: floor(i*H/OH) .. ceil((i+1)*H/OH) */
        w.y0 = (int)((long)oh * in.h / os.h);
        w.y1 = (int)((((long)oh + 1) * in.h + os.h - 1) / os.h);
        w.x0 = (int)((long)ow * in.w / os.w);
        w.x1 = (int)((((long)ow + 1) * in.w + os.w - 1) / os.w);
        w.div = (w.y1 - w.y0) * (w.x1 - w.x0);
        return w;
    }
    w.y0 = oh * c->sh - c->ph;
    w.x0 = ow * c->sw - c->pw;
    w.y1 = w.y0 + c->kh < in.h ? w.y0 + c->kh : in.h;
    w.x1 = w.x0 + c->kw < in.w ? w.x0 + c->kw : in.w;
    w.y0 = w.y0 > 0 ? w.y0 : 0;
    w.x0 = w.x0 > 0 ? w.x0 : 0;
    w.div = c->count_include_pad ? c->kh * c->kw : (w.y1 - w.y0) * (w.x1 - w.x0);
    return w;
}

/* the offset of the window's first maximum (padding lies outside the clipped window and
 * counts as -inf; padding at most half the kernel keeps every window non-empty) */
static size_t pool_argmax(const float *x, int W, struct pool_win w)
{
    size_t best = (size_t)w.y0 * W + w.x0;
    for (int iy = w.y0; iy < w.y1; iy++)
        for (int ix = w.x0; ix < w.x1; ix++)
            if (x[(size_t)iy * W + ix] > x[best])
                best = (size_t)iy * W + ix;
    return best;
}

/* One (n, c) plane. Forward: dst (OH,OW) from src (H,W). Backward: dst (H,W) from src = dout
 * (OH,OW); max pooling also reads the forward input x (H,W). */
static void pool_plane(enum pool_op op, float *dst, const float *src, const float *x,
                       const struct nn_pool_cfg *c, struct nn_shape in, struct nn_shape os)
{
    if (op == POOL_MAX_BWD || op == POOL_AVG_BWD)
        memset(dst, 0, (size_t)in.h * in.w * sizeof *dst);
    for (int oh = 0; oh < os.h; oh++)
        for (int ow = 0; ow < os.w; ow++) {
            struct pool_win w = pool_window(c, in, os, oh, ow);
            size_t o = (size_t)oh * os.w + ow;
            if (op == POOL_MAX_FWD) {
                dst[o] = src[pool_argmax(src, in.w, w)];
            } else if (op == POOL_MAX_BWD) {
                dst[pool_argmax(x, in.w, w)] += src[o];
            } else if (op == POOL_AVG_FWD) {
                double s = 0;
                for (int iy = w.y0; iy < w.y1; iy++)
                    for (int ix = w.x0; ix < w.x1; ix++)
                        s += src[(size_t)iy * in.w + ix];
                dst[o] = (float)(s / w.div);
            } else {
                float g = src[o] / (float)w.div;
                for (int iy = w.y0; iy < w.y1; iy++)
                    for (int ix = w.x0; ix < w.x1; ix++)
                        dst[(size_t)iy * in.w + ix] += g;
            }
        }
}

static void pool_run(enum pool_op op, float *dst, const float *src, const float *x,
                     const struct nn_pool_cfg *c, struct nn_shape in, struct nn_shape os)
{
    int bwd = op == POOL_MAX_BWD || op == POOL_AVG_BWD;
    size_t plane = (size_t)in.h * in.w, oplane = (size_t)os.h * os.w;
    size_t dplane = bwd ? plane : oplane, splane = bwd ? oplane : plane;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < (long)in.n * in.c; p++)
        pool_plane(op, dst + (size_t)p * dplane, src + (size_t)p * splane,
                   x ? x + (size_t)p * plane : NULL, c, in, os);
}

static void pool_ref(enum pool_op op, float *dst, const float *src, const float *x,
                     const struct nn_pool_cfg *c, struct nn_shape in)
{
    struct nn_shape os;
    if (nn_pool_shape(c, in, &os, NULL) == 0)
        pool_run(op, dst, src, x, c, in, os);
}

void nn_maxpool_forward(float *out, const float *inp, const struct nn_pool_cfg *c,
                        struct nn_shape in)
{
    pool_ref(POOL_MAX_FWD, out, inp, NULL, c, in);
}

void nn_maxpool_backward(float *dinp, const float *dout, const float *inp,
                         const struct nn_pool_cfg *c, struct nn_shape in)
{
    pool_ref(POOL_MAX_BWD, dinp, dout, inp, c, in);
}

void nn_avgpool_forward(float *out, const float *inp, const struct nn_pool_cfg *c,
                        struct nn_shape in)
{
    pool_ref(POOL_AVG_FWD, out, inp, NULL, c, in);
}

void nn_avgpool_backward(float *dinp, const float *dout, const struct nn_pool_cfg *c,
                         struct nn_shape in)
{
    pool_ref(POOL_AVG_BWD, dinp, dout, NULL, c, in);
}

void nn_adaptive_avgpool_forward(float *out, const float *inp, int oh, int ow,
                                 struct nn_shape in)
{
    pool_run(POOL_AVG_FWD, out, inp, NULL, NULL, in, nn_shape4(in.n, in.c, oh, ow));
}

void nn_adaptive_avgpool_backward(float *dinp, const float *dout, int oh, int ow,
                                  struct nn_shape in)
{
    pool_run(POOL_AVG_BWD, dinp, dout, NULL, NULL, in, nn_shape4(in.n, in.c, oh, ow));
}

/* ---- oneDNN (max and average) ------------------------------------------------------ */

/* ---- own max pooling on blocked layouts -------------------------------------------- */
/* oneDNN 2.6's jit:avx2 max pooling took 2.9 ms forward and 2.5 ms backward for mnist-cnn's
 * first pool (64x10x24x24, nChw8c) on one thread: a third of the whole training step and
 * ~5 ns an element. These loops walk the blocked layout in memory order, a channel block
 * (8 or 16 floats) at a time, and keep the window index of each maximum (first maximum in
 * row-major order, as the reference and oneDNN) for backward: 0.2 ms for the same pool. */

#define POOL_MAX_BLK 16

static int pool_own_fits(const struct nn_pool_fast *f)
{
    return f->lx.blk == f->ly.blk && (f->lx.blk == 8 || f->lx.blk == 16) &&
           f->cfg.kh * f->cfg.kw <= 255;
}

/* One output position of one channel block: B (8 or 16, a constant where it is inlined,
 * so the channel loops vectorize) maxima with their window indices. */
static inline void pool_own_window(const struct nn_pool_fast *f, const float *inp, float *out,
                                   uint8_t *argmax, size_t xb, size_t yo, int oh, int ow,
                                   const int B)
{
    const struct nn_pool_cfg *c = &f->cfg;
    const struct nn_layout *lx = &f->lx;
    float best[POOL_MAX_BLK];
    uint8_t arg[POOL_MAX_BLK];
    int first = 1;
    for (int i = 0; i < B; i++)
        best[i] = 0.0f, arg[i] = 0; /* a window of padding only (impossible: pad <= k/2) */
    for (int ky = 0; ky < c->kh; ky++) {
        int iy = oh * c->sh - c->ph + ky;
        if (iy < 0 || iy >= f->in.h)
            continue;
        for (int kx = 0; kx < c->kw; kx++) {
            int ix = ow * c->sw - c->pw + kx;
            if (ix < 0 || ix >= f->in.w)
                continue;
            const float *p = inp + xb + (size_t)iy * lx->sh + (size_t)ix * lx->sw;
            uint8_t k = (uint8_t)(ky * c->kw + kx);
            if (first) {
                for (int i = 0; i < B; i++)
                    best[i] = p[i], arg[i] = k;
                first = 0;
                continue;
            }
            for (int i = 0; i < B; i++) { /* strictly greater: the first maximum wins */
                int gt = p[i] > best[i];
                best[i] = gt ? p[i] : best[i];
                arg[i] = gt ? k : arg[i];
            }
        }
    }
    for (int i = 0; i < B; i++) {
        out[yo + (size_t)i] = best[i];
        argmax[yo + (size_t)i] = arg[i];
    }
}

static void pool_own_forward(struct nn_pool_fast *f, float *out, const float *inp)
{
    const struct nn_layout *lx = &f->lx, *ly = &f->ly;
    int B = lx->blk, nblk = (f->in.c + B - 1) / B;
    struct nn_shape o = f->out;
#pragma omp parallel for collapse(2) schedule(static)
    for (int n = 0; n < f->in.n; n++)
        for (int cb = 0; cb < nblk; cb++) {
            size_t xb = (size_t)n * lx->sn + (size_t)cb * lx->sc;
            for (int oh = 0; oh < o.h; oh++)
                for (int ow = 0; ow < o.w; ow++) {
                    size_t yo = (size_t)n * ly->sn + (size_t)cb * ly->sc + (size_t)oh * ly->sh +
                                (size_t)ow * ly->sw;
                    if (B == 8)
                        pool_own_window(f, inp, out, f->argmax, xb, yo, oh, ow, 8);
                    else
                        pool_own_window(f, inp, out, f->argmax, xb, yo, oh, ow, 16);
                }
        }
}

static void pool_own_backward(struct nn_pool_fast *f, float *dinp, const float *dout)
{
    const struct nn_pool_cfg *c = &f->cfg;
    const struct nn_layout *lx = &f->lx, *ly = &f->ly;
    int B = lx->blk, nblk = (f->in.c + B - 1) / B;
    struct nn_shape o = f->out;
    /* the window offset of each index, relative to the window's corner, once */
    size_t rel[256];
    for (int k = 0; k < c->kh * c->kw; k++)
        rel[k] = (size_t)(k / c->kw) * lx->sh + (size_t)(k % c->kw) * lx->sw;
    memset(dinp, 0, f->src_bytes);
    /* windows of one (n, block) overlap only each other: the blocks run in parallel */
#pragma omp parallel for collapse(2) schedule(static)
    for (int n = 0; n < f->in.n; n++)
        for (int cb = 0; cb < nblk; cb++)
            for (int oh = 0; oh < o.h; oh++)
                for (int ow = 0; ow < o.w; ow++) {
                    size_t yo = (size_t)n * ly->sn + (size_t)cb * ly->sc + (size_t)oh * ly->sh +
                                (size_t)ow * ly->sw;
                    int y0 = oh * c->sh - c->ph, x0 = ow * c->sw - c->pw;
                    /* the corner may lie in the padding; the maxima never do */
                    ptrdiff_t corner = (ptrdiff_t)(n * lx->sn + cb * lx->sc) +
                                       (ptrdiff_t)y0 * (ptrdiff_t)lx->sh +
                                       (ptrdiff_t)x0 * (ptrdiff_t)lx->sw;
                    for (int i = 0; i < B; i++)
                        dinp[corner + (ptrdiff_t)rel[f->argmax[yo + (size_t)i]] + i] +=
                            dout[yo + (size_t)i];
                }
}

int nn_pool_fast_init(struct nn_pool_fast *f, struct nn_dnnl *d, int max,
                      const struct nn_pool_cfg *c, struct nn_shape in,
                      const dnnl_memory_desc_t *src_md, int train, struct err *e)
{
    memset(f, 0, sizeof *f);
    f->d = d;
    f->in = in;
    f->src_md = *src_md;
    if (nn_pool_shape(c, in, &f->out, e))
        return -1;
    dnnl_alg_kind_t alg = max                    ? dnnl_pooling_max
                          : c->count_include_pad ? dnnl_pooling_avg_include_padding
                                                 : dnnl_pooling_avg_exclude_padding;
    dnnl_dims_t strides = {c->sh, c->sw}, kernel = {c->kh, c->kw}, dil = {0, 0},
                pad = {c->ph, c->pw};
    dnnl_memory_desc_t dst_any;
    nn_md_any(&dst_any, f->out);
    dnnl_pooling_v2_desc_t pd;
    dnnl_status_t st = dnnl_pooling_v2_forward_desc_init(
        &pd, train ? dnnl_forward_training : dnnl_forward_inference, alg, src_md, &dst_any,
        strides, kernel, dil, pad, pad);
    if (st != dnnl_success)
        return nn_dnnl_err(e, st, "pooling forward");
    if (nn_prim_create(&f->fwd, d, &pd, NULL, "pooling forward", e))
        goto fail;
    f->dst_md = *nn_prim_md(&f->fwd, dnnl_query_dst_md, 0);
    if (nn_mem_create(&f->m_src, d, src_md, e) || nn_mem_create(&f->m_dst, d, &f->dst_md, e))
        goto fail;
    const dnnl_memory_desc_t *ws = nn_prim_md(&f->fwd, dnnl_query_workspace_md, 0);
    if (ws && nn_md_bytes(ws) > 0) {
        f->ws = nn_alloc(nn_md_bytes(ws));
        if (!f->ws) {
            err_set(e, ERR_NOMEM, "", "pooling workspace");
            goto fail;
        }
        if (nn_mem_create(&f->m_ws, d, ws, e))
            goto fail;
        nn_mem_bind(&f->m_ws, f->ws);
    }
    if (max && nn_layout_from_md(&f->lx, src_md, NULL) == 0 &&
        nn_layout_from_md(&f->ly, &f->dst_md, NULL) == 0) {
        f->cfg = *c;
        f->own = pool_own_fits(f);
    }
    if (f->own) {
        f->dst_bytes = nn_md_bytes(&f->dst_md);
        f->src_bytes = nn_md_bytes(src_md);
        f->argmax = calloc(f->dst_bytes / sizeof(float), 1);
        if (!f->argmax) {
            err_set(e, ERR_NOMEM, "", "pooling indices");
            goto fail;
        }
        return 0; /* backward runs the own loops too: no oneDNN backward primitive */
    }
    if (!train)
        return 0;
    st = dnnl_pooling_v2_backward_desc_init(&pd, alg, src_md, &f->dst_md, strides, kernel, dil,
                                            pad, pad);
    if (st != dnnl_success) {
        nn_dnnl_err(e, st, "pooling backward");
        goto fail;
    }
    if (nn_prim_create(&f->bwd, d, &pd, f->fwd.pd, "pooling backward", e) ||
        nn_mem_create(&f->m_ddst, d, &f->dst_md, e) || nn_mem_create(&f->m_dsrc, d, src_md, e))
        goto fail;
    return 0;
fail:
    nn_pool_fast_destroy(f);
    return -1;
}

/* Runs p on its input and output arguments, plus max pooling's workspace where there is
 * one: forward and backward alike. */
static void pool_prim_run(struct nn_pool_fast *f, struct nn_prim *p, dnnl_exec_arg_t in,
                          dnnl_exec_arg_t out)
{
    dnnl_exec_arg_t args[] = {in, out, {DNNL_ARG_WORKSPACE, f->m_ws.mem}};
    nn_prim_run(p, f->d, f->ws ? 3 : 2, args);
}

void nn_pool_fast_forward(struct nn_pool_fast *f, float *out, const float *inp)
{
    if (f->own)
        pool_own_forward(f, out, inp);
    else
        pool_prim_run(f, &f->fwd, (dnnl_exec_arg_t){DNNL_ARG_SRC, nn_mem_bind(&f->m_src, inp)},
                      (dnnl_exec_arg_t){DNNL_ARG_DST, nn_mem_bind(&f->m_dst, out)});
}

void nn_pool_fast_backward(struct nn_pool_fast *f, float *dinp, const float *dout)
{
    if (f->own)
        pool_own_backward(f, dinp, dout);
    else
        pool_prim_run(f, &f->bwd,
                      (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, nn_mem_bind(&f->m_ddst, dout)},
                      (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, nn_mem_bind(&f->m_dsrc, dinp)});
}

void nn_pool_fast_destroy(struct nn_pool_fast *f)
{
    nn_fast_release(
        (struct nn_prim *[]){&f->fwd, &f->bwd, NULL},
        (struct nn_mem *[]){&f->m_src, &f->m_dst, &f->m_ws, &f->m_ddst, &f->m_dsrc, NULL},
        (void *[]){f->ws, f->argmax}, 2);
    memset(f, 0, sizeof *f);
}

/* ---- the rows (layer_type.h): max, average and adaptive average pooling --------------- */

static void maxpool_row_forward(const struct nn_layer_args *a)
{
    nn_maxpool_forward(a->y->data, a->x->data, &a->n->cfg.pool, a->x->shape);
}

static void maxpool_row_backward(const struct nn_layer_args *a)
{
    if (a->din0)
        nn_maxpool_backward(a->din0, a->y->grad, a->x->data, &a->n->cfg.pool, a->x->shape);
}

static void avgpool_row_forward(const struct nn_layer_args *a)
{
    nn_avgpool_forward(a->y->data, a->x->data, &a->n->cfg.pool, a->x->shape);
}

static void avgpool_row_backward(const struct nn_layer_args *a)
{
    if (a->din0)
        nn_avgpool_backward(a->din0, a->y->grad, &a->n->cfg.pool, a->x->shape);
}

static int pool_row_fast_make(struct nn_pool_fast *f, const struct nn_layer_args *a, int max,
                              const struct nn_pool_cfg *c, struct err *e)
{
    if (nn_pool_fast_init(f, a->dnnl, max, c, a->x->shape, &a->x->md, a->train, e))
        return -1;
    a->y->md = f->dst_md;
    return 0;
}

static int maxpool_row_fast_init(const struct nn_layer_args *a, struct err *e)
{
    return pool_row_fast_make(&a->n->fast->pool, a, 1, &a->n->cfg.pool, e);
}

static int avgpool_row_fast_init(const struct nn_layer_args *a, struct err *e)
{
    return pool_row_fast_make(&a->n->fast->pool, a, 0, &a->n->cfg.pool, e);
}

NN_LAYER_FAST_STATE(pool, pool, pool, (a->y->data, a->x->data), (a->din0, a->y->grad))

/* clang-format off */
const struct nn_layer_type nn_layer_maxpool = {
    .name = "maxpool", .forward = maxpool_row_forward, .backward = maxpool_row_backward,
    .fast_init = maxpool_row_fast_init, .fast_forward = pool_row_fast_forward,
    .fast_backward = pool_row_fast_backward, .fast_destroy = pool_row_fast_destroy,
    .impl_prim = NN_LAYER_PRIM(pool.fwd),
};
/* clang-format on */

/* clang-format off */
const struct nn_layer_type nn_layer_avgpool = {
    .name = "avgpool", .forward = avgpool_row_forward, .backward = avgpool_row_backward,
    .fast_init = avgpool_row_fast_init, .fast_forward = pool_row_fast_forward,
    .fast_backward = pool_row_fast_backward, .fast_destroy = pool_row_fast_destroy,
    .impl_prim = NN_LAYER_PRIM(pool.fwd),
};
/* clang-format on */

static void adaptive_row_forward(const struct nn_layer_args *a)
{
    nn_adaptive_avgpool_forward(a->y->data, a->x->data, a->n->cfg.adapt.oh, a->n->cfg.adapt.ow,
                                a->x->shape);
}

static void adaptive_row_backward(const struct nn_layer_args *a)
{
    if (a->din0)
        nn_adaptive_avgpool_backward(a->din0, a->y->grad, a->n->cfg.adapt.oh,
                                     a->n->cfg.adapt.ow, a->x->shape);
}

/* an ordinary pooling where the sizes divide evenly, else the plain loops between
 * conversions */
static int adaptive_row_fast_init(const struct nn_layer_args *a, struct err *e)
{
    struct nn_adapt_fast *f = &a->n->fast->adapt;
    struct nn_pool_cfg pc;
    if (nn_adaptive_as_pool(&pc, a->n->cfg.adapt.oh, a->n->cfg.adapt.ow, a->x->shape)) {
        f->as_pool = 1;
        return pool_row_fast_make(&f->pool, a, 0, &pc, e);
    }
    dnnl_memory_desc_t plain;
    nn_md_plain(&plain, a->x->shape);
    nn_md_plain(&a->y->md, a->y->shape);
    return nn_convert_in_init(&f->x_in, a->dnnl, &a->x->md, &plain, e) ||
           (a->train && nn_convert_out_init(&f->dx_out, a->dnnl, &plain, &a->x->md, 0, e));
}

static void adaptive_row_fast_forward(const struct nn_layer_args *a)
{
    struct nn_adapt_fast *f = &a->n->fast->adapt;
    if (f->as_pool)
        nn_pool_fast_forward(&f->pool, a->y->data, a->x->data);
    else
        nn_adaptive_avgpool_forward(a->y->data, nn_convert_in(&f->x_in, a->dnnl, a->x->data),
                                    a->n->cfg.adapt.oh, a->n->cfg.adapt.ow, a->x->shape);
}

static void adaptive_row_fast_backward(const struct nn_layer_args *a)
{
    struct nn_adapt_fast *f = &a->n->fast->adapt;
    if (f->as_pool) {
        nn_pool_fast_backward(&f->pool, a->din0, a->y->grad);
        return;
    }
    nn_adaptive_avgpool_backward(nn_convert_out_begin(&f->dx_out, a->din0), a->y->grad,
                                 a->n->cfg.adapt.oh, a->n->cfg.adapt.ow, a->x->shape);
    nn_convert_out_end(&f->dx_out, a->dnnl, a->din0);
}

static void adaptive_row_fast_destroy(union nn_node_fast *f)
{
    if (f->adapt.as_pool) {
        nn_pool_fast_destroy(&f->adapt.pool);
    } else {
        nn_convert_destroy(&f->adapt.x_in);
        nn_convert_destroy(&f->adapt.dx_out);
    }
}

static const char *adaptive_row_fast_impl(const union nn_node_fast *f)
{
    return f->adapt.as_pool ? nn_prim_impl(&f->adapt.pool.fwd) : "plain loops";
}

const struct nn_layer_type nn_layer_adaptive = {
    .name = "adaptive_avgpool", NN_LAYER_ROW(adaptive), .fast_impl = adaptive_row_fast_impl};
