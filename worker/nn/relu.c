/* relu: ReLU and ReLU6 (MobileNetV2), reference loop and oneDNN eltwise; the eltwise fast
 * state (nn_act_fast_make) is every activation's, GELU's too (gelu.c).
 *
 * Decision: backward is computed from the OUTPUT (oneDNN's *_use_dst_for_bwd algorithms),
 * as PyTorch's in-place ReLU does, so the layer's input need not be kept and the layer may
 * run in place. For ReLU6 the output lies strictly inside (0, 6) exactly where the input
 * does, so the gradient mask equals PyTorch's hardtanh_backward on the input. */
#include <math.h>
#include <string.h>

#include "worker/nn/layer_type.h"
#include "worker/nn/layers.h"

/* ---- reference -------------------------------------------------------------------- */

void nn_act_forward(float *out, const float *inp, size_t n, enum nn_act a)
{
    float hi = a == NN_ACT_RELU6 ? 6.0f : INFINITY;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float v = inp[i] > 0 ? inp[i] : 0;
        out[i] = v < hi ? v : hi;
    }
}

void nn_act_backward(float *dinp, const float *dout, const float *out, size_t n, enum nn_act a)
{
    float hi = a == NN_ACT_RELU6 ? 6.0f : INFINITY;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++)
        dinp[i] = out[i] > 0 && out[i] < hi ? dout[i] : 0;
}

/* ---- oneDNN ----------------------------------------------------------------------- */

int nn_act_fast_make(struct nn_act_fast *f, struct nn_dnnl *d, const struct nn_act_eltwise *el,
                     const dnnl_memory_desc_t *md, int train, struct err *e)
{
    memset(f, 0, sizeof *f);
    f->d = d;
    f->keep_arg = el->keep_arg;
    dnnl_eltwise_desc_t ed;
    dnnl_status_t st = dnnl_eltwise_forward_desc_init(
        &ed, train ? dnnl_forward_training : dnnl_forward_inference, el->alg, md, el->alpha,
        el->beta);
    if (st != dnnl_success)
        return nn_dnnl_err(e, st, el->fwd_what);
    if (nn_prim_create(&f->fwd, d, &ed, NULL, el->fwd_what, e) ||
        nn_mem_create(&f->m_src, d, md, e) || nn_mem_create(&f->m_dst, d, md, e))
        goto fail;
    if (train) {
        /* diff_data then data: the backward reads the forward's src or dst */
        st = dnnl_eltwise_backward_desc_init(&ed, el->alg, md, md, el->alpha, el->beta);
        if (st != dnnl_success) {
            nn_dnnl_err(e, st, el->bwd_what);
            goto fail;
        }
        if (nn_prim_create(&f->bwd, d, &ed, f->fwd.pd, el->bwd_what, e) ||
            nn_mem_create(&f->m_keep, d, md, e) || nn_mem_create(&f->m_ddst, d, md, e) ||
            nn_mem_create(&f->m_dsrc, d, md, e))
            goto fail;
    }
    return 0;
fail:
    nn_act_fast_destroy(f);
    return -1;
}

int nn_act_fast_init(struct nn_act_fast *f, struct nn_dnnl *d, enum nn_act a,
                     const dnnl_memory_desc_t *md, int train, struct err *e)
{
    const struct nn_act_eltwise el = {.alg = a == NN_ACT_RELU6
                                                 ? dnnl_eltwise_clip_v2_use_dst_for_bwd
                                                 : dnnl_eltwise_relu_use_dst_for_bwd,
                                      .alpha = 0,
                                      .beta = a == NN_ACT_RELU6 ? 6.0f : 0,
                                      .keep_arg = DNNL_ARG_DST,
                                      .fwd_what = "activation forward",
                                      .bwd_what = "activation backward"};
    return nn_act_fast_make(f, d, &el, md, train, e);
}

void nn_act_fast_forward(struct nn_act_fast *f, float *out, const float *inp)
{
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, nn_mem_bind(&f->m_src, inp)},
        {DNNL_ARG_DST, nn_mem_bind(&f->m_dst, out)},
    };
    nn_prim_run(&f->fwd, f->d, 2, args);
}

void nn_act_fast_backward(struct nn_act_fast *f, float *dinp, const float *dout,
                          const float *keep)
{
    dnnl_exec_arg_t args[] = {
        {f->keep_arg, nn_mem_bind(&f->m_keep, keep)},
        {DNNL_ARG_DIFF_DST, nn_mem_bind(&f->m_ddst, dout)},
        {DNNL_ARG_DIFF_SRC, nn_mem_bind(&f->m_dsrc, dinp)},
    };
    nn_prim_run(&f->bwd, f->d, 3, args);
}

void nn_act_fast_destroy(struct nn_act_fast *f)
{
    nn_fast_release(
        (struct nn_prim *[]){&f->fwd, &f->bwd, NULL},
        (struct nn_mem *[]){&f->m_src, &f->m_dst, &f->m_keep, &f->m_ddst, &f->m_dsrc, NULL},
        NULL, 0);
    memset(f, 0, sizeof *f);
}

/* ---- the row (layer_type.h) ---------------------------------------------------------- */

static void act_row_forward(const struct nn_layer_args *a)
{
    nn_act_forward(a->y->data, a->x->data, nn_shape_numel(a->x->shape), a->n->cfg.act);
}

static void act_row_backward(const struct nn_layer_args *a)
{
    if (a->din0)
        nn_act_backward(a->din0, a->y->grad, a->y->data, nn_shape_numel(a->x->shape),
                        a->n->cfg.act);
}

static int act_row_fast_init(const struct nn_layer_args *a, struct err *e)
{
    a->y->md = a->x->md;
    return nn_act_fast_init(&a->n->fast->act, a->dnnl, a->n->cfg.act, &a->x->md, a->train, e);
}

NN_LAYER_FAST_STATE(act, act, act, (a->y->data, a->x->data), (a->din0, a->y->grad, a->y->data))

const struct nn_layer_type nn_layer_act = {
    .name = "act", NN_LAYER_ROW(act), .impl_prim = NN_LAYER_PRIM(act.fwd)};
