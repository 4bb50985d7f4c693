/* flatten: (N,C,H,W) -> (N,C*H*W) in PyTorch's (c, h, w) order, the step between the
 * convolutional part of a network and its linear head.
 *
 * Decision: the fast path's activations are in a blocked layout, so flatten is where they
 * are reordered to plain (and the gradient back); a plain input makes it a copy. */
#include <string.h>

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
