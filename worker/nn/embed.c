/* embed: GPT-2's input layer, a learned token embedding wte (V,C) plus a learned position
 * embedding wpe (max_t,C), added: out[n,t] = wte[tok[n,t]] + wpe[t]. Reference loops only:
 * a gather forward and a scatter-add backward move C floats per row and do no arithmetic
 * worth a library call.
 *
 * Decisions:
 * - Token ids travel as floats (the batch is one float tensor, like every other input), so
 *   nn_embed_check validates them once per batch (integer, finite, in [0, vocab)); forward
 *   and backward trust them and index with a plain conversion.
 * - Backward scatters into dwte, and two rows with the same token write the same dwte row:
 *   parallelising over rows would race. Threads own disjoint slices of channels instead
 *   (NN_EMBED_CBLK at a time, one 64-byte line of floats), each walking every row in order,
 *   so duplicates add up in the same order as the serial loop and no write is shared.
 *   dwpe sums over the batch per position: threads own (position, channel slice) pairs. */
#include <math.h>
#include <stddef.h>

#include "worker/nn/layer_type.h"
#include "worker/nn/layers.h"

#define NN_EMBED_CBLK 16 /* channels a thread owns at a time in backward */

int nn_embed_check(const float *tok, size_t n, int vocab, struct err *e)
{
    for (size_t i = 0; i < n; i++) {
        float v = tok[i];
        /* !(...) so NaN fails too */
        if (!(isfinite(v) && v >= 0 && v < (float)vocab && v == floorf(v)))
            return err_set(e, ERR_INVALID, "tokens",
                           "token id %g at position %zu is not an integer in [0, %d)",
                           (double)v, i, vocab);
    }
    return 0;
}

/* out (N,T,C) = wte (V,C)[tok (N,T)] + wpe (max_t,C)[t] */
void nn_embed_forward(float *out, const float *tok, const float *wte, const float *wpe,
                      const struct nn_embed_cfg *c, int n, int t)
{
    size_t rows = (size_t)n * t, C = (size_t)c->c;
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++) {
        size_t pos = r % (size_t)t;
        const float *we = wte + (size_t)tok[r] * C, *pe = wpe + pos * C;
        float *o = out + r * C;
        for (size_t i = 0; i < C; i++)
            o[i] = we[i] + pe[i];
    }
}

/* dwte (V,C) +=, dwpe (max_t,C) += from dout (N,T,C) */
void nn_embed_backward(float *dwte, float *dwpe, const float *dout, const float *tok,
                       const struct nn_embed_cfg *c, int n, int t)
{
    size_t rows = (size_t)n * t, C = (size_t)c->c;
    int nblk = (c->c + NN_EMBED_CBLK - 1) / NN_EMBED_CBLK;
    /* dwte: a thread owns channels [lo, hi) of every vocabulary row */
#pragma omp parallel for schedule(static)
    for (int b = 0; b < nblk; b++) {
        size_t lo = (size_t)b * NN_EMBED_CBLK,
               hi = lo + NN_EMBED_CBLK < C ? lo + NN_EMBED_CBLK : C;
        for (size_t r = 0; r < rows; r++) {
            float *dw = dwte + (size_t)tok[r] * C;
            const float *g = dout + r * C;
            for (size_t i = lo; i < hi; i++)
                dw[i] += g[i];
        }
    }
    /* dwpe: position p gets the sum over the batch, accumulated in double */
#pragma omp parallel for collapse(2) schedule(static)
    for (int p = 0; p < t; p++)
        for (int b = 0; b < nblk; b++) {
            size_t lo = (size_t)b * NN_EMBED_CBLK,
                   hi = lo + NN_EMBED_CBLK < C ? lo + NN_EMBED_CBLK : C;
            double acc[NN_EMBED_CBLK] = {0};
            for (int s = 0; s < n; s++) {
                const float *g = dout + ((size_t)s * t + (size_t)p) * C;
                for (size_t i = lo; i < hi; i++)
                    acc[i - lo] += g[i];
            }
            float *dw = dwpe + (size_t)p * C;
            for (size_t i = lo; i < hi; i++)
                dw[i] += (float)acc[i - lo];
        }
}

/* ---- the row (layer_type.h): both paths run these loops, on plain tensors ------------- */

static void embed_row_forward(const struct nn_layer_args *a)
{
    nn_embed_forward(a->y->data, a->x->data, a->w, a->b, &a->n->cfg.embed, a->x->shape.n,
                     a->x->shape.w);
}

static void embed_row_backward(const struct nn_layer_args *a)
{
    nn_embed_backward(a->dw, a->db, a->y->grad, a->x->data, &a->n->cfg.embed, a->x->shape.n,
                      a->x->shape.w);
}

static int embed_row_fast_init(const struct nn_layer_args *a, struct err *e)
{
    (void)e;
    nn_md_plain(&a->y->md, a->y->shape);
    return 0;
}

/* the ids index the tables: checked before use */
static int embed_row_check_input(const struct nn_node *n, const float *x, size_t numel,
                                 struct err *e)
{
    return nn_embed_check(x, numel, n->cfg.embed.vocab, e);
}

/* clang-format off */
const struct nn_layer_type nn_layer_embed = {
    .name = "embed", .flags = NN_LAYER_SEQ_START, .forward = embed_row_forward,
    .backward = embed_row_backward, .fast_init = embed_row_fast_init,
    .fast_forward = embed_row_forward, .fast_backward = embed_row_backward, .impl = "own loop",
    .check_input = embed_row_check_input,
};
/* clang-format on */
