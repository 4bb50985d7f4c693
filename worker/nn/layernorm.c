/* layernorm: layer normalization over the last dimension (PyTorch's nn.LayerNorm(C), GPT-2's
 * ln_1, ln_2, ln_f): each row of C is normalised by its own mean and biased variance, then
 * scaled and shifted per channel. Reference loops (llm.c's layernorm_forward/backward, with
 * double accumulators) and oneDNN's layer normalization primitive.
 *
 * Decisions:
 * - The reference saves mean and rstd = 1/sqrt(var + eps) per row, as llm.c does; oneDNN
 *   saves mean and variance. Each path keeps its own statistics (the fast state owns them),
 *   so the two never need converting.
 * - Backward parallelises dinp over rows (independent) and dweight/dbias over slices of
 *   channels (each a sum over every row): one pass each, no shared writes.
 * - oneDNN 2.6 wants the scale and shift as separate (C) memories (dnnl_use_scale |
 *   dnnl_use_shift: the arena keeps weight and bias apart) and writes diff_scale and
 *   diff_shift rather than adding to them, so the fast backward computes them into owned
 *   (C) buffers and adds those to dweight/dbias, as linear.c does. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/nn/layer_type.h"
#include "worker/nn/layers.h"

#define NN_LN_CBLK 16 /* channels one thread owns while summing dweight/dbias */

/* ---- reference -------------------------------------------------------------------- */

/* out (R,C), mean (R), rstd (R) from inp (R,C), weight (C), bias (C) */
void nn_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *weight, const float *bias, int rows, int c)
{
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *x = inp + (size_t)r * c;
        float *y = out + (size_t)r * c;
        double s = 0;
        for (int i = 0; i < c; i++)
            s += x[i];
        double m = s / c, v = 0;
        for (int i = 0; i < c; i++) {
            double d = x[i] - m;
            v += d * d;
        }
        double rs = 1.0 / sqrt(v / c + (double)NN_LAYERNORM_EPS);
        for (int i = 0; i < c; i++)
            y[i] = (float)((x[i] - m) * rs * weight[i] + bias[i]);
        mean[r] = (float)m;
        rstd[r] = (float)rs;
    }
}

/* dinp (R,C) =, dweight (C) +=, dbias (C) += from dout (R,C), with the forward's mean and
 * rstd. With norm = (x - mean) * rstd and g = weight * dout (llm.c's dnorm_i):
 * dinp = rstd * (g - mean(g) - norm * mean(g * norm)). */
void nn_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                           const float *inp, const float *weight, const float *mean,
                           const float *rstd, int rows, int c)
{
    if (dinp) {
#pragma omp parallel for schedule(static)
        for (int r = 0; r < rows; r++) {
            const float *x = inp + (size_t)r * c, *dy = dout + (size_t)r * c;
            float *dx = dinp + (size_t)r * c;
            double m = mean[r], rs = rstd[r], gm = 0, gnm = 0;
            for (int i = 0; i < c; i++) {
                double g = (double)weight[i] * dy[i];
                gm += g;
                gnm += g * (x[i] - m) * rs;
            }
            gm /= c;
            gnm /= c;
            for (int i = 0; i < c; i++) {
                double g = (double)weight[i] * dy[i], norm = (x[i] - m) * rs;
                dx[i] = (float)(rs * (g - gm - norm * gnm));
            }
        }
    }
    int nblk = (c + NN_LN_CBLK - 1) / NN_LN_CBLK;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < nblk; b++) {
        int lo = b * NN_LN_CBLK, hi = lo + NN_LN_CBLK < c ? lo + NN_LN_CBLK : c;
        double dw[NN_LN_CBLK] = {0}, db[NN_LN_CBLK] = {0};
        for (int r = 0; r < rows; r++) {
            const float *x = inp + (size_t)r * c, *dy = dout + (size_t)r * c;
            double m = mean[r], rs = rstd[r];
            for (int i = lo; i < hi; i++) {
                dw[i - lo] += (double)dy[i] * ((x[i] - m) * rs);
                db[i - lo] += dy[i];
            }
        }
        for (int i = lo; i < hi; i++) {
            dweight[i] += (float)dw[i - lo];
            dbias[i] += (float)db[i - lo];
        }
    }
}

/* ---- oneDNN ----------------------------------------------------------------------- */

/* data (R,C) nc; statistics (R) a; scale, shift and their gradients (C) a */
struct ln_mds {
    dnnl_memory_desc_t data, stat, chan;
};

static void ln_mds_init(struct ln_mds *m, int rows, int c)
{
    nn_md_plain(&m->data, nn_shape2(rows, c));
    dnnl_dims_t sd = {rows}, cd = {c};
    nn_md_tag(&m->stat, 1, sd, dnnl_a);
    nn_md_tag(&m->chan, 1, cd, dnnl_a);
}

static int ln_backward_init(struct nn_layernorm_fast *f, const struct ln_mds *m, unsigned flags,
                            struct err *e)
{
    struct nn_dnnl *d = f->d;
    dnnl_layer_normalization_desc_t ld;
    dnnl_status_t st = dnnl_layer_normalization_backward_desc_init(
        &ld, dnnl_backward, &m->data, &m->data, &m->stat, NN_LAYERNORM_EPS, flags);
    if (st != dnnl_success)
        return nn_dnnl_err(e, st, "layernorm backward");
    if (nn_prim_create(&f->bwd, d, &ld, f->fwd.pd, "layernorm backward", e) ||
        nn_mem_create(&f->m_ddst, d, &m->data, e) ||
        nn_mem_create(&f->m_dsrc, d, &m->data, e) ||
        nn_mem_create(&f->m_dscale, d, &m->chan, e) ||
        nn_mem_create(&f->m_dshift, d, &m->chan, e))
        return -1;
    f->dscale = nn_alloc((size_t)f->c * sizeof(float));
    f->dshift = nn_alloc((size_t)f->c * sizeof(float));
    if (!f->dscale || !f->dshift)
        return err_set(e, ERR_NOMEM, "", "layernorm gradient buffers");
    return 0;
}

int nn_layernorm_fast_init(struct nn_layernorm_fast *f, struct nn_dnnl *d, int rows, int c,
                           int train, struct err *e)
{
    memset(f, 0, sizeof *f);
    f->d = d;
    f->rows = rows;
    f->c = c;
    struct ln_mds m;
    ln_mds_init(&m, rows, c);
    unsigned flags = dnnl_use_scale | dnnl_use_shift;
    dnnl_layer_normalization_desc_t ld;
    dnnl_status_t st = dnnl_layer_normalization_forward_desc_init(
        &ld, train ? dnnl_forward_training : dnnl_forward_inference, &m.data, &m.stat,
        NN_LAYERNORM_EPS, flags);
    if (st != dnnl_success)
        return nn_dnnl_err(e, st, "layernorm forward");
    if (nn_prim_create(&f->fwd, d, &ld, NULL, "layernorm forward", e) ||
        nn_mem_create(&f->m_src, d, &m.data, e) || nn_mem_create(&f->m_dst, d, &m.data, e) ||
        nn_mem_create(&f->m_scale, d, &m.chan, e) ||
        nn_mem_create(&f->m_shift, d, &m.chan, e) || nn_mem_create(&f->m_mean, d, &m.stat, e) ||
        nn_mem_create(&f->m_var, d, &m.stat, e))
        goto fail;
    /* training saves the statistics here for backward; inference computes them in the
     * scratchpad, and the buffers are only bound */
    f->mean = nn_alloc((size_t)rows * sizeof(float));
    f->var = nn_alloc((size_t)rows * sizeof(float));
    if (!f->mean || !f->var) {
        err_set(e, ERR_NOMEM, "", "layernorm statistics");
        goto fail;
    }
    if (train && ln_backward_init(f, &m, flags, e))
        goto fail;
    return 0;
fail:
    nn_layernorm_fast_destroy(f);
    return -1;
}

void nn_layernorm_fast_forward(struct nn_layernorm_fast *f, float *out, const float *inp,
                               const float *weight, const float *bias)
{
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, nn_mem_bind(&f->m_src, inp)},
        {DNNL_ARG_DST, nn_mem_bind(&f->m_dst, out)},
        {DNNL_ARG_SCALE, nn_mem_bind(&f->m_scale, weight)},
        {DNNL_ARG_SHIFT, nn_mem_bind(&f->m_shift, bias)},
        {DNNL_ARG_MEAN, nn_mem_bind(&f->m_mean, f->mean)},
        {DNNL_ARG_VARIANCE, nn_mem_bind(&f->m_var, f->var)},
    };
    nn_prim_run(&f->fwd, f->d, 6, args);
}

/* dinp (R,C) = (required: oneDNN always writes it), dweight (C) +=, dbias (C) += */
void nn_layernorm_fast_backward(struct nn_layernorm_fast *f, float *dinp, float *dweight,
                                float *dbias, const float *dout, const float *inp,
                                const float *weight)
{
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, nn_mem_bind(&f->m_src, inp)},
        {DNNL_ARG_DIFF_DST, nn_mem_bind(&f->m_ddst, dout)},
        {DNNL_ARG_MEAN, nn_mem_bind(&f->m_mean, f->mean)},
        {DNNL_ARG_VARIANCE, nn_mem_bind(&f->m_var, f->var)},
        {DNNL_ARG_SCALE, nn_mem_bind(&f->m_scale, weight)},
        /* unused by the arithmetic but required by oneDNN 2.6 with use_shift (as in
         * batchnorm.c): the forward bound it to the bias, and before any forward it is
         * bound to a buffer of the right size that is never read */
        {DNNL_ARG_SHIFT,
         f->m_shift.bound ? f->m_shift.mem : nn_mem_bind(&f->m_shift, f->dshift)},
        {DNNL_ARG_DIFF_SRC, nn_mem_bind(&f->m_dsrc, dinp)},
        {DNNL_ARG_DIFF_SCALE, nn_mem_bind(&f->m_dscale, f->dscale)},
        {DNNL_ARG_DIFF_SHIFT, nn_mem_bind(&f->m_dshift, f->dshift)},
    };
    nn_prim_run(&f->bwd, f->d, 9, args);
    for (int i = 0; i < f->c; i++) {
        dweight[i] += f->dscale[i];
        dbias[i] += f->dshift[i];
    }
}

void nn_layernorm_fast_destroy(struct nn_layernorm_fast *f)
{
    struct nn_prim *ps[] = {&f->fwd, &f->bwd, NULL};
    struct nn_mem *ms[] = {&f->m_src,    &f->m_dst,    &f->m_scale, &f->m_shift,
                           &f->m_mean,   &f->m_var,    &f->m_ddst,  &f->m_dsrc,
                           &f->m_dscale, &f->m_dshift, NULL};
    void *bufs[] = {f->mean, f->var, f->dscale, f->dshift};
    nn_fast_release(ps, ms, bufs, sizeof bufs / sizeof *bufs);
    memset(f, 0, sizeof *f);
}

/* ---- the row (layer_type.h) ---------------------------------------------------------- */

static void layernorm_row_forward(const struct nn_layer_args *a)
{
    int rows = nn_tensor_rows(a->x);
    nn_layernorm_forward(a->y->data, a->n->save, a->n->save + rows, a->x->data, a->w, a->b,
                         rows, nn_tensor_row_len(a->x));
}

static void layernorm_row_backward(const struct nn_layer_args *a)
{
    int rows = nn_tensor_rows(a->x);
    nn_layernorm_backward(a->din0 ? a->din0 : a->scratch, a->dw, a->db, a->y->grad, a->x->data,
                          a->w, a->n->save, a->n->save + rows, rows, nn_tensor_row_len(a->x));
}

/* the saved mean (R) and rstd (R) */
static size_t layernorm_row_saved(const struct nn_node *n, const struct nn_tensor *x, int train)
{
    (void)n, (void)train;
    return 2 * (size_t)nn_tensor_rows(x);
}

static int layernorm_row_fast_init(const struct nn_layer_args *a, struct err *e)
{
    nn_md_plain(&a->y->md, a->y->shape);
    return nn_layernorm_fast_init(&a->n->fast->ln, a->dnnl, nn_tensor_rows(a->x),
                                  nn_tensor_row_len(a->x), a->train, e);
}

/* backward: like batch norm, oneDNN always writes diff_src */
NN_LAYER_FAST_STATE(layernorm, layernorm, ln, (a->y->data, a->x->data, a->w, a->b),
                    (a->din0 ? a->din0 : a->scratch, a->dw, a->db, a->y->grad, a->x->data,
                     a->w))

/* clang-format off */
const struct nn_layer_type nn_layer_layernorm = {
    .name = "layernorm", NN_LAYER_ROW(layernorm), .saved = layernorm_row_saved,
    .impl_prim = NN_LAYER_PRIM(ln.fwd),
};
/* clang-format on */
