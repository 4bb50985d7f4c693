/* gelu: GPT-2's activation, the tanh approximation of GELU (Hendrycks & Gimpel; PyTorch's
 * GELU(approximate="tanh"), HF's "gelu_new"): gelu(x) = 0.5 x (1 + tanh(u)) with
 * u = sqrt(2/pi) (x + 0.044715 x^3). Reference loop and oneDNN eltwise (gelu_tanh).
 *
 * Decisions:
 * - The backward is the exact derivative of that formula (not of the erf GELU):
 *   gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
 *   It needs the INPUT (oneDNN's gelu has no use_dst_for_bwd form), so the layer keeps its
 *   input alive until backward and cannot run in place when training.
 * - The reference computes in double (the spec: exact to the float rounding of its result,
 *   where float's 1 + tanh(u) cancels for x below about -3) and skips the second term
 *   where the sech^2 factor is exactly 0, so no large |x| makes 0 * inf.
 * - The tensor is any (n) floats: elementwise, so the fast path sees a 1-D plain tensor
 *   whatever shape the model gives it. */
#include <math.h>
#include <string.h>

#include "worker/nn/layer_type.h"
#include "worker/nn/layers.h"

#define GELU_K 0.7978845608028654 /* sqrt(2/pi) */
#define GELU_A 0.044715

/* ---- reference -------------------------------------------------------------------- */

/* out (n) = gelu(inp (n)) */
void nn_gelu_forward(float *out, const float *inp, size_t n)
{
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        out[i] = (float)(0.5 * x * (1.0 + tanh(GELU_K * (x + GELU_A * x * x * x))));
    }
}

/* dinp (n) = dout (n) * gelu'(inp (n)) */
void nn_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n)
{
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        double t = tanh(GELU_K * (x + GELU_A * x * x * x)), sech2 = 1.0 - t * t;
        double g = 0.5 * (1.0 + t);
        if (sech2 != 0)
            g += 0.5 * x * sech2 * GELU_K * (1.0 + 3.0 * GELU_A * x * x);
        dinp[i] = (float)(dout[i] * g);
    }
}

/* ---- oneDNN ----------------------------------------------------------------------- */

int nn_gelu_fast_init(struct nn_gelu_fast *f, struct nn_dnnl *d, size_t n, int train,
                      struct err *e)
{
    memset(f, 0, sizeof *f);
    f->d = d;
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = {(dnnl_dim_t)n};
    nn_md_tag(&md, 1, dims, dnnl_a);
    dnnl_eltwise_desc_t ed;
    dnnl_status_t st = dnnl_eltwise_forward_desc_init(
        &ed, train ? dnnl_forward_training : dnnl_forward_inference, dnnl_eltwise_gelu_tanh,
        &md, 0, 0);
    if (st != dnnl_success)
        return nn_dnnl_err(e, st, "gelu forward");
    if (nn_prim_create(&f->fwd, d, &ed, NULL, "gelu forward", e) ||
        nn_mem_create(&f->m_src, d, &md, e) || nn_mem_create(&f->m_dst, d, &md, e))
        goto fail;
    if (train) {
        /* diff_data then data: the backward reads the forward's src */
        st = dnnl_eltwise_backward_desc_init(&ed, dnnl_eltwise_gelu_tanh, &md, &md, 0, 0);
        if (st != dnnl_success) {
            nn_dnnl_err(e, st, "gelu backward");
            goto fail;
        }
        if (nn_prim_create(&f->bwd, d, &ed, f->fwd.pd, "gelu backward", e) ||
            nn_mem_create(&f->m_bsrc, d, &md, e) || nn_mem_create(&f->m_ddst, d, &md, e) ||
            nn_mem_create(&f->m_dsrc, d, &md, e))
            goto fail;
    }
    return 0;
fail:
    nn_gelu_fast_destroy(f);
    return -1;
}

void nn_gelu_fast_forward(struct nn_gelu_fast *f, float *out, const float *inp)
{
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, nn_mem_bind(&f->m_src, inp)},
        {DNNL_ARG_DST, nn_mem_bind(&f->m_dst, out)},
    };
    nn_prim_run(&f->fwd, f->d, 2, args);
}

void nn_gelu_fast_backward(struct nn_gelu_fast *f, float *dinp, const float *dout,
                           const float *inp)
{
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, nn_mem_bind(&f->m_bsrc, inp)},
        {DNNL_ARG_DIFF_DST, nn_mem_bind(&f->m_ddst, dout)},
        {DNNL_ARG_DIFF_SRC, nn_mem_bind(&f->m_dsrc, dinp)},
    };
    nn_prim_run(&f->bwd, f->d, 3, args);
}

void nn_gelu_fast_destroy(struct nn_gelu_fast *f)
{
    nn_fast_release(
        (struct nn_prim *[]){&f->fwd, &f->bwd, NULL},
        (struct nn_mem *[]){&f->m_src, &f->m_dst, &f->m_bsrc, &f->m_ddst, &f->m_dsrc, NULL},
        NULL, 0);
    memset(f, 0, sizeof *f);
}

/* ---- the row (layer_type.h) ---------------------------------------------------------- */

static void gelu_row_forward(const struct nn_layer_args *a)
{
    nn_gelu_forward(a->y->data, a->x->data, nn_shape_numel(a->x->shape));
}

static void gelu_row_backward(const struct nn_layer_args *a)
{
    if (a->din0)
        nn_gelu_backward(a->din0, a->y->grad, a->x->data, nn_shape_numel(a->x->shape));
}

static int gelu_row_fast_init(const struct nn_layer_args *a, struct err *e)
{
    nn_md_plain(&a->y->md, a->y->shape);
    return nn_gelu_fast_init(&a->n->fast->gelu, a->dnnl, nn_shape_numel(a->x->shape), a->train,
                             e);
}

NN_LAYER_FAST_STATE(gelu, gelu, (a->y->data, a->x->data), (a->din0, a->y->grad, a->x->data))

const struct nn_layer_type nn_layer_gelu = {
    .name = "gelu", NN_LAYER_ROW(gelu), .impl_prim = NN_LAYER_PRIM(gelu.fwd)};
