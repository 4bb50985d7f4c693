/* batchnorm: 2-D batch normalization as PyTorch's BatchNorm2d (batch statistics with the
 * biased variance in training, running statistics updated with momentum and the unbiased
 * variance, running statistics in evaluation), optionally with a ReLU fused after it.
 *
 * Decision: the fused ReLU (ResNet's and VGG-BN's bn -> relu) is one oneDNN primitive
 * (dnnl_fuse_norm_relu, which keeps a bit mask for backward) instead of two passes over
 * the activation; the reference recomputes the mask from the output. The running
 * statistics are updated by our own loop over C in both paths, since oneDNN returns the
 * batch statistics but does not keep running ones. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/nn/layer_type.h"
#include "worker/nn/layers.h"

/* ---- reference -------------------------------------------------------------------- */

void nn_bn_forward_train(float *out, float *mean, float *var, float *running_mean,
                         float *running_var, const float *inp, const float *weight,
                         const float *bias, const struct nn_bn_cfg *c, struct nn_shape s)
{
    size_t hw = (size_t)s.h * s.w, m = (size_t)s.n * hw;
#pragma omp parallel for schedule(static)
    for (int ch = 0; ch < c->c; ch++) {
        double sum = 0, sq = 0;
        for (int n = 0; n < s.n; n++)
            for (size_t i = 0; i < hw; i++)
                sum += inp[((size_t)n * c->c + ch) * hw + i];
        double mu = sum / (double)m;
        for (int n = 0; n < s.n; n++)
            for (size_t i = 0; i < hw; i++) {
                double d = inp[((size_t)n * c->c + ch) * hw + i] - mu;
                sq += d * d;
            }
        double v = sq / (double)m, inv = 1.0 / sqrt(v + c->eps);
        for (int n = 0; n < s.n; n++)
            for (size_t i = 0; i < hw; i++) {
                size_t k = ((size_t)n * c->c + ch) * hw + i;
                double y = (inp[k] - mu) * inv * weight[ch] + bias[ch];
                out[k] = (float)(c->relu && y < 0 ? 0 : y);
            }
        mean[ch] = (float)mu;
        var[ch] = (float)v;
        double unbiased = m > 1 ? v * (double)m / (double)(m - 1) : v;
        running_mean[ch] = (float)((1 - c->momentum) * running_mean[ch] + c->momentum * mu);
        running_var[ch] = (float)((1 - c->momentum) * running_var[ch] + c->momentum * unbiased);
    }
}

void nn_bn_forward_eval(float *out, const float *inp, const float *weight, const float *bias,
                        const float *running_mean, const float *running_var,
                        const struct nn_bn_cfg *c, struct nn_shape s)
{
    size_t hw = (size_t)s.h * s.w;
#pragma omp parallel for collapse(2) schedule(static)
    for (int n = 0; n < s.n; n++)
        for (int ch = 0; ch < c->c; ch++) {
            double inv = 1.0 / sqrt((double)running_var[ch] + c->eps);
            for (size_t i = 0; i < hw; i++) {
                size_t k = ((size_t)n * c->c + ch) * hw + i;
                double y = (inp[k] - running_mean[ch]) * inv * weight[ch] + bias[ch];
                out[k] = (float)(c->relu && y < 0 ? 0 : y);
            }
        }
}

void nn_bn_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                    const float *inp, const float *out, const float *mean, const float *var,
                    const float *weight, const struct nn_bn_cfg *c, struct nn_shape s)
{
    size_t hw = (size_t)s.h * s.w, m = (size_t)s.n * hw;
#pragma omp parallel for schedule(static)
    for (int ch = 0; ch < c->c; ch++) {
        double inv = 1.0 / sqrt((double)var[ch] + c->eps), sdy = 0, sdyx = 0;
        for (int n = 0; n < s.n; n++)
            for (size_t i = 0; i < hw; i++) {
                size_t k = ((size_t)n * c->c + ch) * hw + i;
                double dy = c->relu && out[k] <= 0 ? 0 : dout[k];
                sdy += dy;
                sdyx += dy * (inp[k] - mean[ch]) * inv;
            }
        dbias[ch] += (float)sdy;
        dweight[ch] += (float)sdyx;
        if (!dinp)
            continue;
        double scale = weight[ch] * inv;
        for (int n = 0; n < s.n; n++)
            for (size_t i = 0; i < hw; i++) {
                size_t k = ((size_t)n * c->c + ch) * hw + i;
                double dy = c->relu && out[k] <= 0 ? 0 : dout[k];
                double xhat = (inp[k] - mean[ch]) * inv;
                dinp[k] = (float)(scale * (dy - sdy / (double)m - xhat * sdyx / (double)m));
            }
    }
}

/* ---- oneDNN ----------------------------------------------------------------------- */

static int bn_prim(struct nn_prim *p, struct nn_bn_fast *f, dnnl_prop_kind_t prop,
                   unsigned flags, const char *what, struct err *e)
{
    dnnl_batch_normalization_desc_t bd;
    dnnl_status_t st = prop == dnnl_backward ? dnnl_batch_normalization_backward_desc_init(
                                                   &bd, prop, &f->md, &f->md, f->cfg.eps, flags)
                                             : dnnl_batch_normalization_forward_desc_init(
                                                   &bd, prop, &f->md, f->cfg.eps, flags);
    if (st != dnnl_success)
        return nn_dnnl_err(e, st, what);
    return nn_prim_create(p, f->d, &bd, prop == dnnl_backward ? f->fwd_train.pd : NULL, what,
                          e);
}

int nn_bn_fast_init(struct nn_bn_fast *f, struct nn_dnnl *d, const struct nn_bn_cfg *c,
                    struct nn_shape s, const dnnl_memory_desc_t *md, int train, struct err *e)
{
    memset(f, 0, sizeof *f);
    f->d = d;
    f->cfg = *c;
    f->s = s;
    f->md = *md;
    unsigned flags = dnnl_use_scale | dnnl_use_shift | (c->relu ? dnnl_fuse_norm_relu : 0);
    dnnl_memory_desc_t cmd;
    dnnl_dims_t cd = {c->c};
    nn_md_tag(&cmd, 1, cd, dnnl_a);
    size_t cbytes = (size_t)c->c * sizeof(float);
    if (bn_prim(&f->fwd_eval, f, dnnl_forward_inference, flags | dnnl_use_global_stats,
                "batchnorm forward (eval)", e) ||
        nn_mem_create(&f->m_src, d, md, e) || nn_mem_create(&f->m_dst, d, md, e) ||
        nn_mem_create(&f->m_scale, d, &cmd, e) || nn_mem_create(&f->m_shift, d, &cmd, e) ||
        nn_mem_create(&f->m_mean, d, &cmd, e) || nn_mem_create(&f->m_var, d, &cmd, e) ||
        nn_mem_create(&f->m_rmean, d, &cmd, e) || nn_mem_create(&f->m_rvar, d, &cmd, e))
        goto fail;
    if (train) {
        if (bn_prim(&f->fwd_train, f, dnnl_forward_training, flags, "batchnorm forward", e) ||
            bn_prim(&f->bwd, f, dnnl_backward, flags, "batchnorm backward", e) ||
            nn_mem_create(&f->m_ddst, d, md, e) || nn_mem_create(&f->m_dsrc, d, md, e) ||
            nn_mem_create(&f->m_dscale, d, &cmd, e) || nn_mem_create(&f->m_dshift, d, &cmd, e))
            goto fail;
        f->mean = nn_alloc(cbytes);
        f->var = nn_alloc(cbytes);
        f->dscale = nn_alloc(cbytes);
        f->dshift = nn_alloc(cbytes);
        if (!f->mean || !f->var || !f->dscale || !f->dshift)
            goto nomem;
        if (c->relu) {
            const dnnl_memory_desc_t *ws = nn_prim_md(&f->fwd_train, dnnl_query_workspace_md,
                                                      0);
            f->ws = nn_alloc(nn_md_bytes(ws));
            if (!f->ws)
                goto nomem;
            if (nn_mem_create(&f->m_ws, d, ws, e))
                goto fail;
            nn_mem_bind(&f->m_ws, f->ws);
        }
    }
    return 0;
nomem:
    err_set(e, ERR_NOMEM, "", "batchnorm buffers");
fail:
    nn_bn_fast_destroy(f);
    return -1;
}

void nn_bn_fast_forward(struct nn_bn_fast *f, float *out, float *running_mean,
                        float *running_var, const float *inp, const float *weight,
                        const float *bias, int train)
{
    dnnl_exec_arg_t args[7] = {
        {DNNL_ARG_SRC, nn_mem_bind(&f->m_src, inp)},
        {DNNL_ARG_DST, nn_mem_bind(&f->m_dst, out)},
        {DNNL_ARG_SCALE, nn_mem_bind(&f->m_scale, weight)},
        {DNNL_ARG_SHIFT, nn_mem_bind(&f->m_shift, bias)},
    };
    if (!train) {
        args[4] = (dnnl_exec_arg_t){DNNL_ARG_MEAN, nn_mem_bind(&f->m_rmean, running_mean)};
        args[5] = (dnnl_exec_arg_t){DNNL_ARG_VARIANCE, nn_mem_bind(&f->m_rvar, running_var)};
        nn_prim_run(&f->fwd_eval, f->d, 6, args);
        return;
    }
    args[4] = (dnnl_exec_arg_t){DNNL_ARG_MEAN, nn_mem_bind(&f->m_mean, f->mean)};
    args[5] = (dnnl_exec_arg_t){DNNL_ARG_VARIANCE, nn_mem_bind(&f->m_var, f->var)};
    args[6] = (dnnl_exec_arg_t){DNNL_ARG_WORKSPACE, f->m_ws.mem};
    nn_prim_run(&f->fwd_train, f->d, f->cfg.relu ? 7 : 6, args);
    double m = (double)f->s.n * f->s.h * f->s.w, mom = f->cfg.momentum;
    double unbias = m > 1 ? m / (m - 1) : 1;
    for (int ch = 0; ch < f->cfg.c; ch++) {
        running_mean[ch] = (float)((1 - mom) * running_mean[ch] + mom * f->mean[ch]);
        running_var[ch] = (float)((1 - mom) * running_var[ch] + mom * f->var[ch] * unbias);
    }
}

void nn_bn_fast_backward(struct nn_bn_fast *f, float *dinp, float *dweight, float *dbias,
                         const float *dout, const float *inp, const float *weight)
{
    /* oneDNN's backward always produces diff_src: dinp is required here */
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, nn_mem_bind(&f->m_src, inp)},
        {DNNL_ARG_DIFF_DST, nn_mem_bind(&f->m_ddst, dout)},
        {DNNL_ARG_MEAN, nn_mem_bind(&f->m_mean, f->mean)},
        {DNNL_ARG_VARIANCE, nn_mem_bind(&f->m_var, f->var)},
        {DNNL_ARG_SCALE, nn_mem_bind(&f->m_scale, weight)},
        /* unused by the arithmetic but required by oneDNN 2.6 with use_shift; the
         * forward bound it to the bias */
        {DNNL_ARG_SHIFT, f->m_shift.mem},
        {DNNL_ARG_DIFF_SRC, nn_mem_bind(&f->m_dsrc, dinp)},
        {DNNL_ARG_DIFF_SCALE, nn_mem_bind(&f->m_dscale, f->dscale)},
        {DNNL_ARG_DIFF_SHIFT, nn_mem_bind(&f->m_dshift, f->dshift)},
        {DNNL_ARG_WORKSPACE, f->m_ws.mem},
    };
    nn_prim_run(&f->bwd, f->d, f->cfg.relu ? 10 : 9, args);
    for (int ch = 0; ch < f->cfg.c; ch++) {
        dweight[ch] += f->dscale[ch];
        dbias[ch] += f->dshift[ch];
    }
}

void nn_bn_fast_destroy(struct nn_bn_fast *f)
{
    struct nn_prim *ps[] = {&f->fwd_train, &f->fwd_eval, &f->bwd, NULL};
    struct nn_mem *ms[] = {&f->m_src,    &f->m_dst,   &f->m_scale, &f->m_shift, &f->m_mean,
                           &f->m_var,    &f->m_ws,    &f->m_ddst,  &f->m_dsrc,  &f->m_dscale,
                           &f->m_dshift, &f->m_rmean, &f->m_rvar,  NULL};
    void *bufs[] = {f->mean, f->var, f->dscale, f->dshift, f->ws};
    nn_fast_release(ps, ms, bufs, sizeof bufs / sizeof *bufs);
    memset(f, 0, sizeof *f);
}

/* ---- the row (layer_type.h) ---------------------------------------------------------- */

static void bn_row_forward(const struct nn_layer_args *a)
{
    const struct nn_bn_cfg *c = &a->n->cfg.bn;
    float *save = a->n->save;
    if (a->train)
        nn_bn_forward_train(a->y->data, save, save + c->c, a->run, a->run + c->c, a->x->data,
                            a->w, a->b, c, a->x->shape);
    else
        nn_bn_forward_eval(a->y->data, a->x->data, a->w, a->b, a->run, a->run + c->c, c,
                           a->x->shape);
}

static void bn_row_backward(const struct nn_layer_args *a)
{
    const struct nn_bn_cfg *c = &a->n->cfg.bn;
    nn_bn_backward(a->din0, a->dw, a->db, a->y->grad, a->x->data, a->y->data, a->n->save,
                   a->n->save + c->c, a->w, c, a->x->shape);
}

/* the saved batch mean (C) and variance (C) */
static size_t bn_row_saved(const struct nn_node *n, const struct nn_tensor *x, int train)
{
    (void)x, (void)train;
    return 2 * (size_t)n->cfg.bn.c;
}

static int bn_row_fast_init(const struct nn_layer_args *a, struct err *e)
{
    a->y->md = a->x->md;
    return nn_bn_fast_init(&a->n->fast->bn, a->dnnl, &a->n->cfg.bn, a->x->shape, &a->x->md,
                           a->train, e);
}

/* backward: oneDNN always writes diff_src */
NN_LAYER_FAST_STATE(
    bn, bn, bn, (a->y->data, a->run, a->run + a->n->cfg.bn.c, a->x->data, a->w, a->b, a->train),
    (a->din0 ? a->din0 : a->scratch, a->dw, a->db, a->y->grad, a->x->data, a->w))

/* the running mean (C) then variance (C) */
static size_t bn_row_buffers(const union nn_layer_cfg *c)
{
    return 2 * (size_t)c->bn.c;
}

static void bn_row_buffers_init(float *buf, const union nn_layer_cfg *c)
{
    for (int i = 0; i < c->bn.c; i++) { /* running mean 0, var 1 */
        buf[i] = 0.0f;
        buf[c->bn.c + i] = 1.0f;
    }
}

static int bn_row_check_batch(const struct nn_node *n, const struct nn_tensor *x, int train,
                              struct err *e)
{
    if (train && (int64_t)x->shape.n * x->shape.h * x->shape.w < 2)
        return err_set(e, ERR_INVALID, "batch_size",
                       "%s: batch norm needs more than one value per channel in training",
                       n->name);
    return 0;
}

/* clang-format off */
const struct nn_layer_type nn_layer_bn = {
    .name = "batchnorm", NN_LAYER_ROW(bn), .saved = bn_row_saved,
    .impl_prim = NN_LAYER_PRIM(bn.fwd_eval), .buffers = bn_row_buffers,
    .buffers_init = bn_row_buffers_init, .check_batch = bn_row_check_batch,
};
/* clang-format on */
