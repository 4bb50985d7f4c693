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
 *   whatever shape the model gives it.
 * - The fast path is an activation's (relu.c's nn_act_fast: one oneDNN eltwise pair), made
 *   with the gelu_tanh algorithm and a backward that reads the input. */
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

int nn_gelu_fast_init(struct nn_act_fast *f, struct nn_dnnl *d, size_t n, int train,
                      struct err *e)
{
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = {(dnnl_dim_t)n};
    nn_md_tag(&md, 1, dims, dnnl_a);
    const struct nn_act_eltwise el = {.alg = dnnl_eltwise_gelu_tanh,
                                      .keep_arg = DNNL_ARG_SRC,
                                      .fwd_what = "gelu forward",
                                      .bwd_what = "gelu backward"};
    return nn_act_fast_make(f, d, &el, &md, train, e);
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
    return nn_gelu_fast_init(&a->n->fast->act, a->dnnl, nn_shape_numel(a->x->shape), a->train,
                             e);
}

NN_LAYER_FAST_STATE(gelu, act, act, (a->y->data, a->x->data), (a->din0, a->y->grad, a->x->data))

const struct nn_layer_type nn_layer_gelu = {
    .name = "gelu", NN_LAYER_ROW(gelu), .impl_prim = NN_LAYER_PRIM(act.fwd)};
