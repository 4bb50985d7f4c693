/* onednn: engine, primitives with a shared user scratchpad, memory binding, reorders and
 * layout helpers (see onednn.h). Key decision: nothing here allocates while a step runs;
 * the scratchpad grows only when a primitive is created. */
#include "worker/nn/onednn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/nn/bf16.h"
#include "worker/nn/vec.h"

int nn_dnnl_err(struct err *e, dnnl_status_t st, const char *what)
{
    const char *why = st == dnnl_out_of_memory       ? "out of memory"
                      : st == dnnl_invalid_arguments ? "invalid arguments"
                      : st == dnnl_unimplemented     ? "unimplemented"
                      : st == dnnl_iterator_ends     ? "no implementation"
                      : st == dnnl_runtime_error     ? "runtime error"
                                                     : "failure";
    return err_set(e, st == dnnl_out_of_memory ? ERR_NOMEM : ERR_INTERNAL, "",
                   "oneDNN %s: %s (status %d)", what, why, (int)st);
}

static int dnnl_attr_make(dnnl_primitive_attr_t *attr, int accumulate, struct err *e)
{
    dnnl_status_t st = dnnl_primitive_attr_create(attr);
    if (st != dnnl_success)
        return nn_dnnl_err(e, st, "attribute");
    st = dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user);
    if (st == dnnl_success && accumulate) {
        dnnl_post_ops_t ops;
        st = dnnl_post_ops_create(&ops);
        if (st == dnnl_success) {
            st = dnnl_post_ops_append_sum(ops, 1.0f);
            if (st == dnnl_success)
                st = dnnl_primitive_attr_set_post_ops(*attr, ops);
            dnnl_post_ops_destroy(ops);
        }
    }
    if (st != dnnl_success) {
        dnnl_primitive_attr_destroy(*attr);
        *attr = NULL;
        return nn_dnnl_err(e, st, "attribute");
    }
    return 0;
}

int nn_dnnl_init(struct nn_dnnl *d, struct err *e)
{
    memset(d, 0, sizeof *d);
    d->status = dnnl_success;
    dnnl_status_t st = dnnl_engine_create(&d->engine, dnnl_cpu, 0);
    if (st != dnnl_success)
        return nn_dnnl_err(e, st, "engine");
    st = dnnl_stream_create(&d->stream, d->engine, dnnl_stream_default_flags);
    if (st != dnnl_success) {
        nn_dnnl_cleanup(d);
        return nn_dnnl_err(e, st, "stream");
    }
    if (dnnl_attr_make(&d->attr, 0, e) || dnnl_attr_make(&d->attr_sum, 1, e)) {
        nn_dnnl_cleanup(d);
        return -1;
    }
    return 0;
}

/* Whether an optimised implementation of op exists (a probe: nothing is kept). */
static bool dnnl_bf16_has(const struct nn_dnnl *d, const_dnnl_op_desc_t op,
                          const_dnnl_primitive_desc_t hint, dnnl_primitive_desc_t *keep)
{
    dnnl_primitive_desc_t pd = NULL;
    const char *impl = NULL;
    bool ok = dnnl_primitive_desc_create(&pd, op, NULL, d->engine, hint) == dnnl_success &&
              dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) ==
                  dnnl_success &&
              impl && strncmp(impl, "ref", 3) != 0;
    if (ok && keep)
        *keep = pd;
    else if (pd)
        dnnl_primitive_desc_destroy(pd);
    return ok;
}

/* A 3x3 convolution 16 -> 16 channels on 8x8 and a 64 -> 32 inner product, batch 4, with
 * the operand and output types the layers use (conv2d.c, linear.c). */
enum nn_bf16 nn_dnnl_bf16_probe(const struct nn_dnnl *d)
{
    dnnl_memory_desc_t x16, w16, y32, dx32, dw32, dy16;
    dnnl_dims_t xd = {4, 16, 8, 8}, wd = {16, 16, 3, 3}, one = {1, 1};
    dnnl_memory_desc_init_by_tag(&x16, 4, xd, dnnl_bf16, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&w16, 4, wd, dnnl_bf16, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&y32, 4, xd, dnnl_f32, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&dx32, 4, xd, dnnl_f32, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&dw32, 4, wd, dnnl_f32, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&dy16, 4, xd, dnnl_bf16, dnnl_format_tag_any);
    dnnl_convolution_desc_t cf, cd, cw;
    dnnl_primitive_desc_t fwd = NULL;
    bool ok = dnnl_convolution_forward_desc_init(&cf, dnnl_forward_training,
                                                 dnnl_convolution_direct, &x16, &w16, NULL,
                                                 &y32, one, one, one) == dnnl_success &&
              dnnl_bf16_has(d, &cf, NULL, &fwd) &&
              dnnl_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct, &dx32,
                                                       &w16, &dy16, one, one,
                                                       one) == dnnl_success &&
              dnnl_bf16_has(d, &cd, fwd, NULL) &&
              dnnl_convolution_backward_weights_desc_init(&cw, dnnl_convolution_direct, &x16,
                                                          &dw32, NULL, &dy16, one, one,
                                                          one) == dnnl_success &&
              dnnl_bf16_has(d, &cw, fwd, NULL);
    if (fwd)
        dnnl_primitive_desc_destroy(fwd);
    fwd = NULL;
    dnnl_memory_desc_t s16, v16, o32, ds32, dv32, do16;
    dnnl_dims_t sd = {4, 64}, vd = {32, 64}, od = {4, 32};
    dnnl_memory_desc_init_by_tag(&s16, 2, sd, dnnl_bf16, dnnl_nc);
    dnnl_memory_desc_init_by_tag(&v16, 2, vd, dnnl_bf16, dnnl_oi);
    dnnl_memory_desc_init_by_tag(&o32, 2, od, dnnl_f32, dnnl_nc);
    dnnl_memory_desc_init_by_tag(&ds32, 2, sd, dnnl_f32, dnnl_nc);
    dnnl_memory_desc_init_by_tag(&dv32, 2, vd, dnnl_f32, dnnl_oi);
    dnnl_memory_desc_init_by_tag(&do16, 2, od, dnnl_bf16, dnnl_nc);
    dnnl_inner_product_desc_t pf, pb, pw;
    ok = ok &&
         dnnl_inner_product_forward_desc_init(&pf, dnnl_forward_training, &s16, &v16, NULL,
                                              &o32) == dnnl_success &&
         dnnl_bf16_has(d, &pf, NULL, &fwd) &&
         dnnl_inner_product_backward_data_desc_init(&pb, &ds32, &v16, &do16) == dnnl_success &&
         dnnl_bf16_has(d, &pb, fwd, NULL) &&
         dnnl_inner_product_backward_weights_desc_init(&pw, &s16, &dv32, NULL, &do16) ==
             dnnl_success &&
         dnnl_bf16_has(d, &pw, fwd, NULL);
    if (fwd)
        dnnl_primitive_desc_destroy(fwd);
    return ok ? NN_BF16_NATIVE : NN_BF16_EMULATED;
}

const char *nn_bf16_path_name(enum nn_bf16 b)
{
    return b == NN_BF16_NATIVE     ? "onednn-native"
           : b == NN_BF16_EMULATED ? "emulated-storage"
                                   : NULL;
}

void nn_dnnl_cleanup(struct nn_dnnl *d)
{
    if (d->attr)
        dnnl_primitive_attr_destroy(d->attr);
    if (d->attr_sum)
        dnnl_primitive_attr_destroy(d->attr_sum);
    if (d->stream)
        dnnl_stream_destroy(d->stream);
    if (d->engine)
        dnnl_engine_destroy(d->engine);
    free(d->scratch);
    free(d->work);
    memset(d, 0, sizeof *d);
}

int nn_dnnl_work_reserve(struct nn_dnnl *d, size_t bytes, struct err *e)
{
    if (bytes <= d->work_size)
        return 0;
    void *grown = nn_alloc(bytes);
    if (!grown)
        return err_set(e, ERR_NOMEM, "", "workspace of %zu bytes", bytes);
    free(d->work);
    d->work = grown;
    d->work_size = bytes;
    return 0;
}

int nn_dnnl_check(const struct nn_dnnl *d, struct err *e)
{
    if (d->status == dnnl_success)
        return 0;
    return nn_dnnl_err(e, d->status, d->failed);
}

/* ---- primitives ------------------------------------------------------------------- */

int nn_prim_create_from_pd(struct nn_prim *p, struct nn_dnnl *d, dnnl_primitive_desc_t pd,
                           const char *what, struct err *e)
{
    memset(p, 0, sizeof *p);
    p->pd = pd;
    p->what = what;
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md,
                                                                 0);
    size_t need = smd ? dnnl_memory_desc_get_size(smd) : 0;
    if (need > d->scratch_size) {
        void *grown = nn_alloc(need);
        if (!grown) {
            nn_prim_destroy(p);
            return err_set(e, ERR_NOMEM, "", "scratchpad of %zu bytes", need);
        }
        free(d->scratch);
        d->scratch = grown;
        d->scratch_size = need;
    }
    dnnl_status_t st = dnnl_primitive_create(&p->prim, pd);
    if (st == dnnl_success && need > 0)
        st = dnnl_memory_create(&p->scratch, smd, d->engine, DNNL_MEMORY_NONE);
    if (st != dnnl_success) {
        nn_prim_destroy(p);
        return nn_dnnl_err(e, st, what);
    }
    return 0;
}

int nn_prim_create(struct nn_prim *p, struct nn_dnnl *d, const_dnnl_op_desc_t op,
                   const_dnnl_primitive_desc_t hint, const char *what, struct err *e)
{
    dnnl_primitive_desc_t pd;
    memset(p, 0, sizeof *p);
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, op, d->attr, d->engine, hint);
    if (st != dnnl_success)
        return nn_dnnl_err(e, st, what);
    return nn_prim_create_from_pd(p, d, pd, what, e);
}

const dnnl_memory_desc_t *nn_prim_md(const struct nn_prim *p, dnnl_query_t q, int index)
{
    return dnnl_primitive_desc_query_md(p->pd, q, index);
}

const char *nn_prim_impl(const struct nn_prim *p)
{
    const char *s = NULL;
    if (!p->pd ||
        dnnl_primitive_desc_query(p->pd, dnnl_query_impl_info_str, 0, &s) != dnnl_success || !s)
        return "?";
    return s;
}

void nn_prim_run(struct nn_prim *p, struct nn_dnnl *d, int nargs, const dnnl_exec_arg_t *args)
{
    dnnl_exec_arg_t all[16];
    if (nargs > 15) {
        d->status = dnnl_invalid_arguments;
        snprintf(d->failed, sizeof d->failed, "%s (too many arguments)", p->what);
        return;
    }
    memcpy(all, args, (size_t)nargs * sizeof *args);
    if (p->scratch) {
        if (p->bound != d->scratch) {
            dnnl_memory_set_data_handle(p->scratch, d->scratch);
            p->bound = d->scratch;
        }
        all[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, p->scratch};
    }
    dnnl_status_t st = dnnl_primitive_execute(p->prim, d->stream, nargs, all);
    if (st != dnnl_success && d->status == dnnl_success) {
        d->status = st;
        snprintf(d->failed, sizeof d->failed, "%s", p->what);
    }
}

void nn_prim_destroy(struct nn_prim *p)
{
    if (p->scratch)
        dnnl_memory_destroy(p->scratch);
    if (p->prim)
        dnnl_primitive_destroy(p->prim);
    if (p->pd)
        dnnl_primitive_desc_destroy(p->pd);
    memset(p, 0, sizeof *p);
}

/* ---- memory objects --------------------------------------------------------------- */

int nn_mem_create(struct nn_mem *m, struct nn_dnnl *d, const dnnl_memory_desc_t *md,
                  struct err *e)
{
    m->bound = NULL;
    dnnl_status_t st = dnnl_memory_create(&m->mem, md, d->engine, DNNL_MEMORY_NONE);
    if (st != dnnl_success) {
        m->mem = NULL;
        return nn_dnnl_err(e, st, "memory");
    }
    return 0;
}

dnnl_memory_t nn_mem_bind(struct nn_mem *m, const void *ptr)
{
    if (m->bound != ptr) {
        /* oneDNN takes a non-const handle; inputs are only read */
        dnnl_memory_set_data_handle(m->mem, (void *)(uintptr_t)ptr);
        m->bound = (void *)(uintptr_t)ptr;
    }
    return m->mem;
}

void nn_mem_destroy(struct nn_mem *m)
{
    if (m->mem)
        dnnl_memory_destroy(m->mem);
    m->mem = NULL;
    m->bound = NULL;
}

void nn_fast_release(struct nn_prim *const *prims, struct nn_mem *const *mems,
                     void *const *bufs, size_t nbufs)
{
    for (; *prims; prims++)
        nn_prim_destroy(*prims);
    for (; *mems; mems++)
        nn_mem_destroy(*mems);
    for (size_t i = 0; i < nbufs; i++)
        free(bufs[i]);
}

/* ---- reorders --------------------------------------------------------------------- */

int nn_reorder_init(struct nn_reorder *r, struct nn_dnnl *d, const dnnl_memory_desc_t *src,
                    const dnnl_memory_desc_t *dst, int accumulate, struct err *e)
{
    dnnl_primitive_desc_t pd;
    memset(r, 0, sizeof *r);
    dnnl_status_t st = dnnl_reorder_primitive_desc_create(&pd, src, d->engine, dst, d->engine,
                                                          accumulate ? d->attr_sum : d->attr);
    if (st != dnnl_success)
        return nn_dnnl_err(e, st, "reorder");
    if (nn_prim_create_from_pd(&r->p, d, pd, "reorder", e) ||
        nn_mem_create(&r->src, d, src, e) || nn_mem_create(&r->dst, d, dst, e)) {
        nn_reorder_destroy(r);
        return -1;
    }
    return 0;
}

void nn_reorder_run(struct nn_reorder *r, struct nn_dnnl *d, void *dst, const void *src)
{
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_FROM, nn_mem_bind(&r->src, src)},
        {DNNL_ARG_TO, nn_mem_bind(&r->dst, dst)},
    };
    nn_prim_run(&r->p, d, 2, args);
}

void nn_reorder_destroy(struct nn_reorder *r)
{
    nn_prim_destroy(&r->p);
    nn_mem_destroy(&r->src);
    nn_mem_destroy(&r->dst);
}

/* ---- conversions ------------------------------------------------------------------ */

static int convert_init(struct nn_convert *c, struct nn_dnnl *d, const dnnl_memory_desc_t *from,
                        const dnnl_memory_desc_t *to, const dnnl_memory_desc_t *buf_md,
                        int accumulate, struct err *e)
{
    memset(c, 0, sizeof *c);
    if (!accumulate && nn_md_same(from, to))
        return 0;
    c->active = 1;
    c->buf = nn_alloc(nn_md_bytes(buf_md));
    if (!c->buf)
        return err_set(e, ERR_NOMEM, "", "conversion buffer of %zu bytes", nn_md_bytes(buf_md));
    if (accumulate && from->data_type == dnnl_f32 && nn_md_same(from, to)) {
        c->add_n = nn_md_bytes(from) / sizeof(float); /* padding lanes add zeros */
        return 0;
    }
    return nn_reorder_init(&c->r, d, from, to, accumulate, e);
}

int nn_convert_in_init(struct nn_convert *c, struct nn_dnnl *d, const dnnl_memory_desc_t *ours,
                       const dnnl_memory_desc_t *prim, struct err *e)
{
    return convert_init(c, d, ours, prim, prim, 0, e);
}

int nn_convert_operand_init(struct nn_convert *c, struct nn_dnnl *d,
                            const dnnl_memory_desc_t *ours, const dnnl_memory_desc_t *prim,
                            struct err *e)
{
    if (d->bf16 == NN_BF16_OFF || prim->data_type != dnnl_f32)
        return nn_convert_in_init(c, d, ours, prim, e);
    memset(c, 0, sizeof *c);
    c->active = 1;
    c->round_n = nn_md_bytes(prim) / sizeof(float);
    c->buf = nn_alloc(nn_md_bytes(prim));
    if (!c->buf)
        return err_set(e, ERR_NOMEM, "", "bf16 operand buffer of %zu bytes", nn_md_bytes(prim));
    return nn_md_same(ours, prim) ? 0 : nn_reorder_init(&c->r, d, ours, prim, 0, e);
}

int nn_convert_out_init(struct nn_convert *c, struct nn_dnnl *d, const dnnl_memory_desc_t *prim,
                        const dnnl_memory_desc_t *ours, int accumulate, struct err *e)
{
    return convert_init(c, d, prim, ours, prim, accumulate, e);
}

const float *nn_convert_in(struct nn_convert *c, struct nn_dnnl *d, const float *ours)
{
    if (!c->active)
        return ours;
    if (c->r.p.prim)
        nn_reorder_run(&c->r, d, c->buf, ours);
    else /* emulated bf16 in the same layout: a copy to round */
        memcpy(c->buf, ours, c->round_n * sizeof(float));
    if (c->round_n)
        nn_bf16_round(c->buf, c->round_n);
    return c->buf;
}

float *nn_convert_out_begin(struct nn_convert *c, float *ours)
{
    return c->active ? c->buf : ours;
}

void nn_convert_out_end(struct nn_convert *c, struct nn_dnnl *d, float *ours)
{
    if (c->add_n)
        nn_vec_add(ours, c->buf, c->add_n);
    else if (c->active)
        nn_reorder_run(&c->r, d, ours, c->buf);
}

void nn_convert_destroy(struct nn_convert *c)
{
    nn_reorder_destroy(&c->r);
    free(c->buf);
    memset(c, 0, sizeof *c);
}

int nn_prim_is_ref(const struct nn_prim *p)
{
    return strncmp(nn_prim_impl(p), "ref", 3) == 0;
}

/* ---- memory descriptors ----------------------------------------------------------- */

static void md_dims(dnnl_dims_t dims, struct nn_shape s)
{
    dims[0] = s.n;
    dims[1] = s.c;
    dims[2] = s.h;
    dims[3] = s.w;
}

void nn_md_tag(dnnl_memory_desc_t *md, int ndims, const dnnl_dim_t *dims, dnnl_format_tag_t tag)
{
    dnnl_memory_desc_init_by_tag(md, ndims, dims, dnnl_f32, tag);
}

void nn_md_plain(dnnl_memory_desc_t *md, struct nn_shape s)
{
    dnnl_dims_t dims;
    md_dims(dims, s);
    nn_md_tag(md, s.ndims, dims, s.ndims == 2 ? dnnl_nc : dnnl_nchw);
}

void nn_md_any(dnnl_memory_desc_t *md, struct nn_shape s)
{
    dnnl_dims_t dims;
    md_dims(dims, s);
    nn_md_tag(md, s.ndims, dims, dnnl_format_tag_any);
}

void nn_md_bf16(dnnl_memory_desc_t *md, const dnnl_memory_desc_t *in, dnnl_format_tag_t tag)
{
    dnnl_memory_desc_init_by_tag(md, in->ndims, in->dims, dnnl_bf16, tag);
}

size_t nn_md_bytes(const dnnl_memory_desc_t *md)
{
    return dnnl_memory_desc_get_size(md);
}

int nn_md_same(const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b)
{
    return dnnl_memory_desc_equal(a, b);
}

const char *nn_md_str(const dnnl_memory_desc_t *md, char *buf, size_t cap)
{
    if (md->format_kind != dnnl_blocked) {
        snprintf(buf, cap, "%s", md->format_kind == dnnl_format_kind_any ? "any" : "opaque");
        return buf;
    }
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    int order[DNNL_MAX_NDIMS], nd = md->ndims, blocked[DNNL_MAX_NDIMS] = {0};
    for (int i = 0; i < nd; i++)
        order[i] = i;
    for (int i = 1; i < nd; i++) /* outermost (largest stride) first */
        for (int j = i; j > 0 && b->strides[order[j]] > b->strides[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (int k = 0; k < b->inner_nblks; k++)
        blocked[b->inner_idxs[k]] = 1;
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < nd && len + 1 < cap; i++)
        buf[len++] = (char)((blocked[order[i]] ? 'A' : 'a') + order[i]);
    buf[len] = 0;
    for (int k = 0; k < b->inner_nblks && len < cap; k++)
        len += (size_t)snprintf(buf + len, cap - len, "%lld%c", (long long)b->inner_blks[k],
                                'a' + (int)b->inner_idxs[k]);
    return buf;
}

void nn_layout_plain(struct nn_layout *l, struct nn_shape s)
{
    l->blk = 1;
    l->sw = s.ndims == 2 ? 0 : 1;
    l->sh = s.ndims == 2 ? 0 : (size_t)s.w;
    l->sc = (size_t)s.h * (size_t)s.w;
    if (s.ndims == 2)
        l->sc = 1;
    l->sn = (size_t)s.c * l->sc;
}

int nn_layout_from_md(struct nn_layout *l, const dnnl_memory_desc_t *md, struct err *e)
{
    if (md->format_kind != dnnl_blocked || md->offset0 != 0 ||
        (md->ndims != 2 && md->ndims != 4))
        return err_set(e, ERR_INTERNAL, "", "layout: not a plain or blocked 2-D/4-D tensor");
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    l->blk = 1;
    if (b->inner_nblks == 1 && b->inner_idxs[0] == 1)
        l->blk = (int)b->inner_blks[0];
    else if (b->inner_nblks != 0)
        return err_set(e, ERR_INTERNAL, "", "layout: blocking on other than channels");
    l->sn = (size_t)b->strides[0];
    l->sc = (size_t)b->strides[1];
    l->sh = md->ndims == 4 ? (size_t)b->strides[2] : 0;
    l->sw = md->ndims == 4 ? (size_t)b->strides[3] : 0;
    return 0;
}
