/* dropout: elementwise dropout (nn.Dropout) and channel dropout (nn.Dropout2d), scaled by
 * 1/(1-p) in training and the identity in evaluation.
 *
 * Decision: no mask is stored. Whether element (n,c,h,w) survives is a counter-based hash
 * of (key, its logical index), key = f(seed, step, layer); backward recomputes the same
 * mask. So a run is deterministic given its seed whatever the thread count, and the
 * reference (plain layout) and fast path (oneDNN's blocked layout, found through an
 * nn_layout) drop exactly the same elements. One implementation serves both paths: the
 * loops are parallel and touch each element once, so there is nothing faster to call. */
#include "worker/nn/layer_type.h"
#include "worker/nn/layers.h"

uint64_t nn_dropout_key(uint64_t seed, uint64_t step, int layer)
{
    return nn_hash64(nn_hash64(nn_hash64(seed) + step) + (uint64_t)(unsigned)layer);
}

int nn_dropout_keep(const struct nn_dropout_cfg *c, struct nn_shape s, uint64_t key, int n,
                    int ch, int h, int w)
{
    uint64_t plane = (uint64_t)n * (uint64_t)s.c + (uint64_t)ch;
    uint64_t index = c->channelwise ? plane : (plane * (uint64_t)s.h + (uint64_t)h) * s.w + w;
    return nn_hash_uniform(key, index) >= c->p;
}

/* dropout_apply for a channel-blocked layout (nChw8c, nChw16c), in memory order: a
 * block's channels are contiguous, so walking (n, block, h, w) with the block innermost
 * touches each cache line once (the logical order strides by the block and measured 9 ns
 * an element, 10% of an mnist-cnn training step). */
static void dropout_apply_blocked(float *out, const float *inp, const struct nn_dropout_cfg *c,
                                  struct nn_shape s, const struct nn_layout *l, uint64_t key,
                                  int train, float scale)
{
    int nblk = (s.c + l->blk - 1) / l->blk;
#pragma omp parallel for collapse(2) schedule(static)
    for (int n = 0; n < s.n; n++)
        for (int cb = 0; cb < nblk; cb++) {
            float keep[64]; /* blk <= 64: per channel of the block, channelwise masks */
            int c0 = cb * l->blk, cn = s.c - c0 < l->blk ? s.c - c0 : l->blk;
            for (int i = 0; i < cn; i++)
                keep[i] = !train || !c->channelwise ||
                                  nn_dropout_keep(c, s, key, n, c0 + i, 0, 0)
                              ? scale
                              : 0.0f;
            for (int h = 0; h < s.h; h++)
                for (int w = 0; w < s.w; w++) {
                    size_t k = (size_t)n * l->sn + (size_t)cb * l->sc + (size_t)h * l->sh +
                               (size_t)w * l->sw;
                    for (int i = 0; i < cn; i++) {
                        float m = keep[i];
                        if (train && !c->channelwise)
                            m = nn_dropout_keep(c, s, key, n, c0 + i, h, w) ? scale : 0.0f;
                        out[k + (size_t)i] = m != 0.0f ? inp[k + (size_t)i] * m : 0.0f;
                    }
                }
        }
}

/* out = inp * mask * scale over the logical elements; mask = 1 everywhere when !train */
static void dropout_apply(float *out, const float *inp, const struct nn_dropout_cfg *c,
                          struct nn_shape s, const struct nn_layout *l, uint64_t key, int train)
{
    float scale = !train ? 1.0f : c->p >= 1.0f ? 0.0f : 1.0f / (1.0f - c->p);
    if (l->blk > 1 && l->blk <= 64) {
        dropout_apply_blocked(out, inp, c, s, l, key, train, scale);
        return;
    }
#pragma omp parallel for collapse(2) schedule(static)
    for (int n = 0; n < s.n; n++)
        for (int ch = 0; ch < s.c; ch++) {
            int keep_plane = !train || !c->channelwise ||
                             nn_dropout_keep(c, s, key, n, ch, 0, 0);
            for (int h = 0; h < s.h; h++)
                for (int w = 0; w < s.w; w++) {
                    size_t k = nn_layout_off(l, n, ch, h, w);
                    int keep = keep_plane;
                    if (train && !c->channelwise)
                        keep = nn_dropout_keep(c, s, key, n, ch, h, w);
                    out[k] = keep ? inp[k] * scale : 0.0f;
                }
        }
}

void nn_dropout_forward(float *out, const float *inp, const struct nn_dropout_cfg *c,
                        struct nn_shape s, const struct nn_layout *l, uint64_t key, int train)
{
    if (!train && out == inp)
        return;
    dropout_apply(out, inp, c, s, l, key, train);
}

void nn_dropout_backward(float *dinp, const float *dout, const struct nn_dropout_cfg *c,
                         struct nn_shape s, const struct nn_layout *l, uint64_t key)
{
    dropout_apply(dinp, dout, c, s, l, key, 1);
}

/* ---- the row (layer_type.h): both paths run these loops, on the tensor's layout ------- */

static void dropout_row_forward(const struct nn_layer_args *a)
{
    nn_dropout_forward(a->y->data, a->x->data, &a->n->cfg.dropout, a->x->shape, &a->n->layout,
                       a->key, a->train);
}

static void dropout_row_backward(const struct nn_layer_args *a)
{
    if (a->din0)
        nn_dropout_backward(a->din0, a->y->grad, &a->n->cfg.dropout, a->x->shape, &a->n->layout,
                            a->key);
}

static int dropout_row_fast_init(const struct nn_layer_args *a, struct err *e)
{
    a->y->md = a->x->md;
    return nn_layout_from_md(&a->n->layout, &a->x->md, e);
}

/* clang-format off */
const struct nn_layer_type nn_layer_dropout = {
    .name = "dropout", .flags = NN_LAYER_RANDOM, .forward = dropout_row_forward,
    .backward = dropout_row_backward, .fast_init = dropout_row_fast_init,
    .fast_forward = dropout_row_forward, .fast_backward = dropout_row_backward,
    .impl = "own loop",
};
/* clang-format on */
