/* flatten: (N,C,H,W) -> (N,C*H*W) in PyTorch's (c, h, w) order, the step between the
 * convolutional part of a network and its linear head.
 *
 * Decision: the fast path's activations are in a blocked layout, so flatten is where they
 * are reordered to plain (and the gradient back); a plain input makes it a copy. */
#include <string.h>

#include "worker/nn/layer_type.h"
#include "worker/nn/layers.h"

void nn_flatten_forward(float *out, const float *inp, struct nn_shape in)
{
    if (out != inp)
        memcpy(out, inp, nn_shape_numel(in) * sizeof *out);
}

void nn_flatten_backward(float *dinp, const float *dout, struct nn_shape in)
{
    if (dinp != dout)
        memcpy(dinp, dout, nn_shape_numel(in) * sizeof *dinp);
}

int nn_flatten_fast_init(struct nn_flatten_fast *f, struct nn_dnnl *d, struct nn_shape in,
                         const dnnl_memory_desc_t *src_md, int train, struct err *e)
{
    memset(f, 0, sizeof *f);
    f->d = d;
    dnnl_memory_desc_t plain;
    nn_md_plain(&plain, in);
    if (nn_reorder_init(&f->fwd, d, src_md, &plain, 0, e) ||
        (train && nn_reorder_init(&f->bwd, d, &plain, src_md, 0, e))) {
        nn_flatten_fast_destroy(f);
        return -1;
    }
    return 0;
}

void nn_flatten_fast_forward(struct nn_flatten_fast *f, float *out, const float *inp)
{
    nn_reorder_run(&f->fwd, f->d, out, inp);
}

void nn_flatten_fast_backward(struct nn_flatten_fast *f, float *dinp, const float *dout)
{
    nn_reorder_run(&f->bwd, f->d, dinp, dout);
}

void nn_flatten_fast_destroy(struct nn_flatten_fast *f)
{
    nn_reorder_destroy(&f->fwd);
    nn_reorder_destroy(&f->bwd);
    memset(f, 0, sizeof *f);
}

/* ---- the row (layer_type.h) ---------------------------------------------------------- */

static void flatten_row_forward(const struct nn_layer_args *a)
{
    nn_flatten_forward(a->y->data, a->x->data, a->x->shape);
}

static void flatten_row_backward(const struct nn_layer_args *a)
{
    if (a->din0)
        nn_flatten_backward(a->din0, a->y->grad, a->x->shape);
}

static int flatten_row_fast_init(const struct nn_layer_args *a, struct err *e)
{
    nn_md_plain(&a->y->md, a->y->shape);
    return nn_flatten_fast_init(&a->n->fast->flatten, a->dnnl, a->x->shape, &a->x->md, a->train,
                                e);
}

NN_LAYER_FAST_STATE(flatten, flatten, flatten, (a->y->data, a->x->data), (a->din0, a->y->grad))

const struct nn_layer_type nn_layer_flatten = {
    .name = "flatten", .flags = NN_LAYER_SEQ_END, NN_LAYER_ROW(flatten), .impl = "reorder"};
