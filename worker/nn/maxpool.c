/* maxpool: max pooling (PyTorch's MaxPool2d without ceil_mode or dilation), the pooling
 * shape rules shared with average pooling, and the oneDNN pooling path both use.
 *
 * Decision: ties go to the FIRST maximum of a window in row-major order, as in PyTorch's
 * and oneDNN's kernels, so the reference and the fast path route gradients to the same
 * element even where a ReLU before the pool produced many zeros. The fast path keeps
 * oneDNN's index workspace for backward; the reference recomputes the arg max. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"

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
    return (struct nn_pool_cfg){.kh = in.h, .kw = in.w, .sh = 1, .sw = 1,
                                .count_include_pad = 1};
}

/* ---- reference -------------------------------------------------------------------- */

/* The offset (within the plane) of the window's first maximum; -1 if the window lies in
 * the padding only (impossible with padding at most half the kernel). */
static long maxpool_argmax(const float *x, const struct nn_pool_cfg *c, int H, int W, int oh,
                           int ow)
{
    long best = -1;
    float bv = -INFINITY;
    for (int ky = 0; ky < c->kh; ky++) {
        int iy = oh * c->sh - c->ph + ky;
        if (iy < 0 || iy >= H)
            continue;
        for (int kx = 0; kx < c->kw; kx++) {
            int ix = ow * c->sw - c->pw + kx;
            if (ix >= 0 && ix < W && (best < 0 || x[iy * W + ix] > bv)) {
                bv = x[iy * W + ix];
                best = (long)iy * W + ix;
            }
        }
    }
    return best;
}

void nn_maxpool_forward(float *out, const float *inp, const struct nn_pool_cfg *c,
                        struct nn_shape in)
{
    struct nn_shape os;
    if (nn_pool_shape(c, in, &os, NULL))
        return;
    size_t plane = (size_t)in.h * in.w, oplane = (size_t)os.h * os.w;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < (long)in.n * in.c; p++) {
        const float *x = inp + (size_t)p * plane;
        for (int oh = 0; oh < os.h; oh++)
            for (int ow = 0; ow < os.w; ow++) {
                long k = maxpool_argmax(x, c, in.h, in.w, oh, ow);
                out[(size_t)p * oplane + (size_t)oh * os.w + ow] = k < 0 ? -INFINITY : x[k];
            }
    }
}

void nn_maxpool_backward(float *dinp, const float *dout, const float *inp,
                         const struct nn_pool_cfg *c, struct nn_shape in)
{
    struct nn_shape os;
    if (nn_pool_shape(c, in, &os, NULL))
        return;
    size_t plane = (size_t)in.h * in.w, oplane = (size_t)os.h * os.w;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < (long)in.n * in.c; p++) {
        float *dx = dinp + (size_t)p * plane;
        memset(dx, 0, plane * sizeof *dx);
        for (int oh = 0; oh < os.h; oh++)
            for (int ow = 0; ow < os.w; ow++) {
                long k = maxpool_argmax(inp + (size_t)p * plane, c, in.h, in.w, oh, ow);
                if (k >= 0)
                    dx[k] += dout[(size_t)p * oplane + (size_t)oh * os.w + ow];
            }
    }
}

/* ---- oneDNN (max and average) ------------------------------------------------------ */

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

void nn_pool_fast_forward(struct nn_pool_fast *f, float *out, const float *inp)
{
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, nn_mem_bind(&f->m_src, inp)},
        {DNNL_ARG_DST, nn_mem_bind(&f->m_dst, out)},
        {DNNL_ARG_WORKSPACE, f->m_ws.mem},
    };
    nn_prim_run(&f->fwd, f->d, f->ws ? 3 : 2, args);
}

void nn_pool_fast_backward(struct nn_pool_fast *f, float *dinp, const float *dout)
{
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_DIFF_DST, nn_mem_bind(&f->m_ddst, dout)},
        {DNNL_ARG_DIFF_SRC, nn_mem_bind(&f->m_dsrc, dinp)},
        {DNNL_ARG_WORKSPACE, f->m_ws.mem},
    };
    nn_prim_run(&f->bwd, f->d, f->ws ? 3 : 2, args);
}

void nn_pool_fast_destroy(struct nn_pool_fast *f)
{
    nn_prim_destroy(&f->fwd);
    nn_prim_destroy(&f->bwd);
    struct nn_mem *ms[] = {&f->m_src, &f->m_dst, &f->m_ws, &f->m_ddst, &f->m_dsrc};
    for (size_t i = 0; i < sizeof ms / sizeof *ms; i++)
        nn_mem_destroy(ms[i]);
    free(f->ws);
    memset(f, 0, sizeof *f);
}
