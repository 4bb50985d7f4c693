/* concat: torch.cat([a, b], 1), two tensors side by side along the channels, the join of
 * Inception's branches: (N,Ca,H,W) and (N,Cb,H,W) -> (N,Ca+Cb,H,W), a's channels first.
 * A block of k branches is k - 1 of these in a row (cat(cat(a, b), c) has torch.cat([a, b,
 * c], 1)'s channel order), so the graph keeps its two-input nodes.
 *
 * Decisions: the reference copies each sample's two planes of channels; the fast path runs
 * oneDNN's concat primitive forward (it reads both inputs in their own layouts and picks
 * the output's) and, backward, reorders each half of the gradient out of the output's
 * layout through a sub-memory view of it. A view into a channel-blocked layout needs the
 * cut on a block boundary (Ca a multiple of 8 or 16); where it is not, the output is
 * made plain (nchw), where every cut is a view. */
#include <string.h>

#include "worker/nn/layer_type.h"
#include "worker/nn/layers.h"

/* out (N,Ca+Cb,H,W) = a's channels then b's; a (N,Ca,H,W), b (N,Cb,H,W) plain */
void nn_concat_forward(float *out, const float *a, const float *b, struct nn_shape sa,
                       struct nn_shape sb)
{
    size_t plane = (size_t)sa.h * sa.w, na = (size_t)sa.c * plane, nb = (size_t)sb.c * plane;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < sa.n; n++) {
        float *y = out + (size_t)n * (na + nb);
        memcpy(y, a + (size_t)n * na, na * sizeof *y);
        memcpy(y + na, b + (size_t)n * nb, nb * sizeof *y);
    }
}

/* da (N,Ca,H,W) =, db (N,Cb,H,W) = the two channel ranges of dout; either may be NULL */
void nn_concat_backward(float *da, float *db, const float *dout, struct nn_shape sa,
                        struct nn_shape sb)
{
    size_t plane = (size_t)sa.h * sa.w, na = (size_t)sa.c * plane, nb = (size_t)sb.c * plane;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < sa.n; n++) {
        const float *dy = dout + (size_t)n * (na + nb);
        if (da)
            memcpy(da + (size_t)n * na, dy, na * sizeof *da);
        if (db)
            memcpy(db + (size_t)n * nb, dy + na, nb * sizeof *db);
    }
}

/* The view of channels [c0, c0 + s.c) of a tensor of layout parent: 0, or -1 when the
 * layout cannot cut there. */
static int concat_view(dnnl_memory_desc_t *view, const dnnl_memory_desc_t *parent,
                       struct nn_shape s, int c0)
{
    dnnl_dims_t dims = {s.n, s.c, s.h, s.w}, offs = {0, c0, 0, 0};
    return dnnl_memory_desc_init_submemory(view, parent, dims, offs) == dnnl_success ? 0 : -1;
}

/* The concat primitive into dst (NULL: oneDNN's choice); 0 when both halves of its output
 * are views (the backward's sources), *fit 0 when they are not. */
static int concat_make(struct nn_concat_fast *f, struct nn_dnnl *d,
                       const dnnl_memory_desc_t *dst, int *fit, struct err *e)
{
    dnnl_memory_desc_t src[2] = {f->a_md, f->b_md};
    dnnl_primitive_desc_t pd;
    dnnl_status_t st = dnnl_concat_primitive_desc_create(&pd, dst, 2, 1, src, d->attr,
                                                         d->engine);
    if (st != dnnl_success)
        return nn_dnnl_err(e, st, "concat");
    if (nn_prim_create_from_pd(&f->fwd, d, pd, "concat", e))
        return -1;
    f->dst_md = *nn_prim_md(&f->fwd, dnnl_query_dst_md, 0);
    *fit = concat_view(&f->a_view, &f->dst_md, f->sa, 0) == 0 &&
           concat_view(&f->b_view, &f->dst_md, f->sb, f->sa.c) == 0;
    return 0;
}

int nn_concat_fast_init(struct nn_concat_fast *f, struct nn_dnnl *d, struct nn_shape sa,
                        struct nn_shape sb, const dnnl_memory_desc_t *a_md,
                        const dnnl_memory_desc_t *b_md, int train, struct err *e)
{
    memset(f, 0, sizeof *f);
    f->d = d;
    f->sa = sa;
    f->sb = sb;
    f->a_md = *a_md;
    f->b_md = *b_md;
    int fit = 0;
    if (concat_make(f, d, NULL, &fit, e))
        goto fail;
    if (!fit) { /* a cut inside a channel block: a plain output, where any cut is a view */
        dnnl_memory_desc_t plain;
        nn_md_plain(&plain, nn_shape4(sa.n, sa.c + sb.c, sa.h, sa.w));
        nn_prim_destroy(&f->fwd);
        if (concat_make(f, d, &plain, &fit, e))
            goto fail;
        if (!fit) {
            err_set(e, ERR_INVALID, "", "concat: no view of the output's channels");
            goto fail;
        }
    }
    if (nn_mem_create(&f->m_a, d, a_md, e) || nn_mem_create(&f->m_b, d, b_md, e) ||
        nn_mem_create(&f->m_dst, d, &f->dst_md, e))
        goto fail;
    if (train && (nn_reorder_init(&f->bwd_a, d, &f->a_view, a_md, 0, e) ||
                  nn_reorder_init(&f->bwd_b, d, &f->b_view, b_md, 0, e)))
        goto fail;
    return 0;
fail:
    nn_concat_fast_destroy(f);
    return -1;
}

void nn_concat_fast_forward(struct nn_concat_fast *f, float *out, const float *a,
                            const float *b)
{
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_MULTIPLE_SRC + 0, nn_mem_bind(&f->m_a, a)},
        {DNNL_ARG_MULTIPLE_SRC + 1, nn_mem_bind(&f->m_b, b)},
        {DNNL_ARG_DST, nn_mem_bind(&f->m_dst, out)},
    };
    nn_prim_run(&f->fwd, f->d, 3, args);
}

/* the views' offsets are in their descriptors: both reorders read from dout's start */
void nn_concat_fast_backward(struct nn_concat_fast *f, float *da, float *db, const float *dout)
{
    if (da)
        nn_reorder_run(&f->bwd_a, f->d, da, dout);
    if (db)
        nn_reorder_run(&f->bwd_b, f->d, db, dout);
}

void nn_concat_fast_destroy(struct nn_concat_fast *f)
{
    struct nn_prim *const prims[] = {&f->fwd, NULL};
    struct nn_mem *const mems[] = {&f->m_a, &f->m_b, &f->m_dst, NULL};
    nn_fast_release(prims, mems, NULL, 0);
    nn_reorder_destroy(&f->bwd_a);
    nn_reorder_destroy(&f->bwd_b);
    memset(f, 0, sizeof *f);
}

/* ---- the row (layer_type.h) ---------------------------------------------------------- */

static void concat_row_forward(const struct nn_layer_args *a)
{
    nn_concat_forward(a->y->data, a->x->data, a->x1->data, a->x->shape, a->x1->shape);
}

static void concat_row_backward(const struct nn_layer_args *a)
{
    nn_concat_backward(a->din0, a->din1, a->y->grad, a->x->shape, a->x1->shape);
}

static int concat_row_fast_init(const struct nn_layer_args *a, struct err *e)
{
    struct nn_concat_fast *f = &a->n->fast->concat;
    if (nn_concat_fast_init(f, a->dnnl, a->x->shape, a->x1->shape, &a->x->md, &a->x1->md,
                            a->train, e))
        return -1;
    a->y->md = f->dst_md;
    return 0;
}

NN_LAYER_FAST_STATE(concat, concat, concat, (a->y->data, a->x->data, a->x1->data),
                    (a->din0, a->din1, a->y->grad))

const struct nn_layer_type nn_layer_concat = {
    .name = "concat", NN_LAYER_ROW(concat), .impl_prim = NN_LAYER_PRIM(concat.fwd)};
