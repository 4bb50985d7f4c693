/* linear: a fully connected layer (PyTorch's nn.Linear, weight (O,I)), reference loops and
 * oneDNN's inner product.
 *
 * Decision: the fast path runs on plain layouts only (src (N,I) nc, weights (O,I) as they
 * sit in the arena, dst nc), which oneDNN's gemm-based inner product handles without any
 * reorder; a flatten before the first linear layer puts activations in that order. The
 * weight gradient is computed into a private buffer and added to the arena, since inner
 * product backward cannot accumulate. bf16 (onednn.h enum nn_bf16): src, weights and
 * diff_dst are converted on the way in (to bf16 plain tensors, or rounded fp32 copies);
 * dst and both gradients stay fp32. */
#include <stdlib.h>
#include <string.h>

#include "worker/nn/layer_type.h"
#include "worker/nn/layers.h"

/* ---- reference -------------------------------------------------------------------- */

void nn_linear_forward(float *out, const float *inp, const float *weight, const float *bias,
                       const struct nn_linear_cfg *c, int n)
{
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < n; b++)
        for (int o = 0; o < c->out; o++) {
            const float *x = inp + (size_t)b * c->in, *w = weight + (size_t)o * c->in;
            double acc = bias ? bias[o] : 0.0;
            for (int i = 0; i < c->in; i++)
                acc += (double)x[i] * w[i];
            out[(size_t)b * c->out + o] = (float)acc;
        }
}

void nn_linear_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, const struct nn_linear_cfg *c,
                        int n)
{
    if (dinp) {
#pragma omp parallel for collapse(2) schedule(static)
        for (int b = 0; b < n; b++)
            for (int i = 0; i < c->in; i++) {
                double acc = 0;
                for (int o = 0; o < c->out; o++)
                    acc += (double)dout[(size_t)b * c->out + o] * weight[(size_t)o * c->in + i];
                dinp[(size_t)b * c->in + i] = (float)acc;
            }
    }
#pragma omp parallel for schedule(static)
    for (int o = 0; o < c->out; o++) {
        for (int i = 0; i < c->in; i++) {
            double acc = 0;
            for (int b = 0; b < n; b++)
                acc += (double)dout[(size_t)b * c->out + o] * inp[(size_t)b * c->in + i];
            dweight[(size_t)o * c->in + i] += (float)acc;
        }
        if (dbias) {
            double acc = 0;
            for (int b = 0; b < n; b++)
                acc += dout[(size_t)b * c->out + o];
            dbias[o] += (float)acc;
        }
    }
}

/* ---- oneDNN ----------------------------------------------------------------------- */

/* The tensors as the arena and workspace hold them (fp32, plain), and as the primitives
 * read the operands: the same, or bf16 plain under native bf16. */
struct linear_mds {
    dnnl_memory_desc_t src, w, b, dst;
    dnnl_memory_desc_t src_op, w_op, dst_op;
};

static void linear_mds_init(struct linear_mds *m, const struct nn_dnnl *d,
                            const struct nn_linear_cfg *c, int n)
{
    nn_md_plain(&m->src, nn_shape2(n, c->in));
    nn_md_plain(&m->dst, nn_shape2(n, c->out));
    dnnl_dims_t wd = {c->out, c->in}, bd = {c->out};
    nn_md_tag(&m->w, 2, wd, dnnl_oi);
    nn_md_tag(&m->b, 1, bd, dnnl_a);
    m->src_op = m->src;
    m->w_op = m->w;
    m->dst_op = m->dst;
    if (d->bf16 == NN_BF16_NATIVE) {
        nn_md_bf16(&m->src_op, &m->src, dnnl_nc);
        nn_md_bf16(&m->w_op, &m->w, dnnl_oi);
        nn_md_bf16(&m->dst_op, &m->dst, dnnl_nc);
    }
}

static int linear_fast_backward_init(struct nn_linear_fast *f, const struct linear_mds *m,
                                     int need_dinp, struct err *e)
{
    struct nn_dnnl *d = f->d;
    dnnl_inner_product_desc_t ipd;
    dnnl_status_t st = dnnl_inner_product_backward_weights_desc_init(
        &ipd, &m->src_op, &m->w, f->cfg.bias ? &m->b : NULL, &m->dst_op);
    if (st != dnnl_success)
        return nn_dnnl_err(e, st, "linear backward weights");
    if (nn_prim_create(&f->bwd_weights, d, &ipd, f->fwd.pd, "linear backward weights", e) ||
        nn_mem_create(&f->m_bsrc, d, &m->src_op, e) ||
        nn_mem_create(&f->m_bddst, d, &m->dst_op, e) || nn_mem_create(&f->m_dw, d, &m->w, e) ||
        nn_mem_create(&f->m_db, d, &m->b, e) ||
        nn_convert_operand_init(&f->ddst_cv, d, &m->dst, &m->dst_op, e))
        return -1;
    f->dw_buf = nn_alloc((size_t)f->cfg.in * f->cfg.out * sizeof(float));
    f->db_buf = nn_alloc((size_t)f->cfg.out * sizeof(float));
    if (!f->dw_buf || !f->db_buf)
        return err_set(e, ERR_NOMEM, "", "linear gradient buffers");
    if (!need_dinp)
        return 0;
    st = dnnl_inner_product_backward_data_desc_init(&ipd, &m->src, &m->w_op, &m->dst_op);
    if (st != dnnl_success)
        return nn_dnnl_err(e, st, "linear backward data");
    return nn_prim_create(&f->bwd_data, d, &ipd, f->fwd.pd, "linear backward data", e) ||
           nn_mem_create(&f->m_ddst, d, &m->dst_op, e) ||
           nn_mem_create(&f->m_dsrc, d, &m->src, e) || nn_mem_create(&f->m_bw, d, &m->w_op, e);
}

int nn_linear_fast_init(struct nn_linear_fast *f, struct nn_dnnl *d,
                        const struct nn_linear_cfg *c, int n, int train, int need_dinp,
                        struct err *e)
{
    memset(f, 0, sizeof *f);
    f->d = d;
    f->cfg = *c;
    f->n = n;
    struct linear_mds m;
    linear_mds_init(&m, d, c, n);
    dnnl_inner_product_desc_t ipd;
    dnnl_status_t st = dnnl_inner_product_forward_desc_init(
        &ipd, train ? dnnl_forward_training : dnnl_forward_inference, &m.src_op, &m.w_op,
        c->bias ? &m.b : NULL, &m.dst);
    if (st != dnnl_success)
        return nn_dnnl_err(e, st, "linear forward");
    if (nn_prim_create(&f->fwd, d, &ipd, NULL, "linear forward", e) ||
        nn_mem_create(&f->m_src, d, &m.src_op, e) || nn_mem_create(&f->m_w, d, &m.w_op, e) ||
        nn_mem_create(&f->m_b, d, &m.b, e) || nn_mem_create(&f->m_dst, d, &m.dst, e) ||
        nn_convert_operand_init(&f->src_cv, d, &m.src, &m.src_op, e) ||
        nn_convert_operand_init(&f->w_cv, d, &m.w, &m.w_op, e) ||
        (train && linear_fast_backward_init(f, &m, need_dinp, e))) {
        nn_linear_fast_destroy(f);
        return -1;
    }
    return 0;
}

void nn_linear_fast_forward(struct nn_linear_fast *f, float *out, const float *inp,
                            const float *weight, const float *bias)
{
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, nn_mem_bind(&f->m_src, nn_convert_in(&f->src_cv, f->d, inp))},
        {DNNL_ARG_WEIGHTS, nn_mem_bind(&f->m_w, nn_convert_in(&f->w_cv, f->d, weight))},
        {DNNL_ARG_DST, nn_mem_bind(&f->m_dst, out)},
        {DNNL_ARG_BIAS, f->cfg.bias ? nn_mem_bind(&f->m_b, bias) : NULL},
    };
    nn_prim_run(&f->fwd, f->d, f->cfg.bias ? 4 : 3, args);
}

void nn_linear_fast_backward(struct nn_linear_fast *f, float *dinp, float *dweight,
                             float *dbias, const float *dout, const float *inp,
                             const float *weight)
{
    /* bf16: the forward of this step left its converted src and weights in the buffers */
    const float *dy = nn_convert_in(&f->ddst_cv, f->d, dout);
    const float *x = f->src_cv.active ? f->src_cv.buf : inp;
    const float *w = f->w_cv.active ? f->w_cv.buf : weight;
    if (dinp && f->bwd_data.prim) {
        dnnl_exec_arg_t args[] = {
            {DNNL_ARG_DIFF_DST, nn_mem_bind(&f->m_ddst, dy)},
            {DNNL_ARG_WEIGHTS, nn_mem_bind(&f->m_bw, w)},
            {DNNL_ARG_DIFF_SRC, nn_mem_bind(&f->m_dsrc, dinp)},
        };
        nn_prim_run(&f->bwd_data, f->d, 3, args);
    }
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, nn_mem_bind(&f->m_bsrc, x)},
        {DNNL_ARG_DIFF_DST, nn_mem_bind(&f->m_bddst, dy)},
        {DNNL_ARG_DIFF_WEIGHTS, nn_mem_bind(&f->m_dw, f->dw_buf)},
        {DNNL_ARG_DIFF_BIAS, nn_mem_bind(&f->m_db, f->db_buf)},
    };
    nn_prim_run(&f->bwd_weights, f->d, f->cfg.bias ? 4 : 3, args);
    size_t nw = (size_t)f->cfg.in * f->cfg.out;
    const float *dw = f->dw_buf;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < nw; i++)
        dweight[i] += dw[i];
    if (f->cfg.bias && dbias)
        for (int o = 0; o < f->cfg.out; o++)
            dbias[o] += f->db_buf[o];
}

void nn_linear_fast_destroy(struct nn_linear_fast *f)
{
    struct nn_prim *ps[] = {&f->fwd, &f->bwd_data, &f->bwd_weights, NULL};
    struct nn_mem *ms[] = {&f->m_src,   &f->m_w,    &f->m_b,  &f->m_dst,
                           &f->m_ddst,  &f->m_dsrc, &f->m_bw, &f->m_bsrc,
                           &f->m_bddst, &f->m_dw,   &f->m_db, NULL};
    void *bufs[] = {f->dw_buf, f->db_buf};
    nn_convert_destroy(&f->src_cv);
    nn_convert_destroy(&f->w_cv);
    nn_convert_destroy(&f->ddst_cv);
    nn_fast_release(ps, ms, bufs, 2);
    memset(f, 0, sizeof *f);
}

/* ---- the row (layer_type.h) ---------------------------------------------------------- */

static void linear_row_forward(const struct nn_layer_args *a)
{
    nn_linear_forward(a->y->data, a->x->data, a->w, a->b, &a->n->cfg.linear,
                      nn_tensor_rows(a->x));
}

static void linear_row_backward(const struct nn_layer_args *a)
{
    nn_linear_backward(a->din0, a->dw, a->db, a->y->grad, a->x->data, a->w, &a->n->cfg.linear,
                       nn_tensor_rows(a->x));
}

static int linear_row_fast_init(const struct nn_layer_args *a, struct err *e)
{
    nn_md_plain(&a->y->md, a->y->shape);
    return nn_linear_fast_init(&a->n->fast->linear, a->dnnl, &a->n->cfg.linear,
                               nn_tensor_rows(a->x), a->train, a->dinp, e);
}

NN_LAYER_FAST_STATE(linear, linear, linear, (a->y->data, a->x->data, a->w, a->b),
                    (a->din0, a->dw, a->db, a->y->grad, a->x->data, a->w))

const struct nn_layer_type nn_layer_linear = {
    .name = "linear", NN_LAYER_ROW(linear), .impl_prim = NN_LAYER_PRIM(linear.fwd)};
