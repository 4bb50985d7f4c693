/* ddp: the data-parallel strategies (ddp.h): bucket and shard layout, the backward hook
 * that launches gradient exchanges, the step's communication timeline (ddp.h "Timing":
 * every launch, wait and operation is an interval on one clock; exposed and total
 * communication are measured from those intervals), and the ZeRO optimizer step with its
 * all-gather. */
#include "worker/ddp/ddp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buckets.h"
#include "common/clock.h"
#include "worker/comm/reduce.h"
#include "worker/comm/wait_note.h"

static const char *const ddp_compression_names[] = {"none", "fp16", "bf16", NULL};

static int ddp_name_index(const char *const *names, const char *s)
{
    for (int i = 0; s && names[i]; i++)
        if (strcmp(names[i], s) == 0)
            return i;
    return -1;
}

int ddp_strategy_parse(const char *s)
{
    return vocab_find(VOCAB_STRATEGY, s);
}

const char *ddp_strategy_name(enum ddp_strategy s)
{
    const char *name = vocab_name(VOCAB_STRATEGY, (int)s);
    return name ? name : "?";
}

int ddp_compression_parse(const char *s)
{
    return ddp_name_index(ddp_compression_names, s);
}

/* The strategy's row (ddp_init refuses a strategy without one). */
static const struct vocab_strategy *ddp_row(const struct ddp *d)
{
    return vocab_strategy((int)d->cfg.strategy);
}

static bool ddp_is_zero(const struct ddp *d)
{
    return ddp_row(d)->shards_optimizer;
}

/* The arenas the exchanges and the optimizer work on: the model's, or the device's. */
static float *ddp_params(const struct ddp *d)
{
    return d->on_device ? d->dev.params : d->m->params.data;
}

static float *ddp_grads(const struct ddp *d)
{
    return d->on_device ? d->dev.grads : d->m->grads.data;
}

/* ---- layout ------------------------------------------------------------------------ */

/* Parameter tensors in reverse registration order (the order backward finishes them)
 * into off/len (nt entries each, caller-sized). Checks that they tile the arena. */
static int ddp_tensors(const struct nn_model *m, size_t *off, size_t *len, int *nt,
                       struct err *e)
{
    int count = 0;
    const struct nn_param *p = nn_model_param_info(m, &count);
    size_t expect = 0;
    for (int i = 0; i < count; i++) {
        if (p[i].offset != expect)
            return err_set(e, ERR_INTERNAL, NULL,
                           "ddp: parameter %s does not follow the previous one in the arena",
                           p[i].name);
        expect += p[i].len;
        if (off) {
            off[count - 1 - i] = p[i].offset;
            len[count - 1 - i] = p[i].len;
        }
    }
    *nt = count;
    return 0;
}

/* Groups tensors (reverse order, lengths in floats) into buckets by size
 * (common/buckets.h); bounds as there. */
static int ddp_group_by_size(const size_t *len, int nt, size_t first_cap, size_t cap,
                             int *bounds)
{
    int64_t *bytes = malloc(((size_t)nt + 1) * sizeof *bytes);
    if (!bytes)
        return -1;
    for (int t = 0; t < nt; t++)
        bytes[t] = (int64_t)(len[t] * sizeof(float));
    int nb = buckets_by_size(bytes, nt, (int64_t)first_cap, (int64_t)cap, bounds);
    free(bytes);
    return nb;
}

/* The first bucket's and the others' caps; 1 and 1 when every tensor goes alone. */
static void ddp_bucket_caps(const struct ddp_config *cfg, size_t *first, size_t *cap)
{
    const struct vocab_strategy *row = vocab_strategy((int)cfg->strategy);
    enum vocab_bucketing how = row ? row->buckets : VOCAB_BUCKETS_BY_SIZE;
    *cap = how == VOCAB_BUCKETS_FUSION ? cfg->fusion_bytes : cfg->bucket_bytes;
    *first = how == VOCAB_BUCKETS_SMALL_FIRST ? DDP_FIRST_BUCKET_BYTES : *cap;
    if (how == VOCAB_BUCKETS_PER_TENSOR)
        *first = *cap = 1;
}

int ddp_bucket_sizes(const struct nn_model *m, const struct ddp_config *cfg, int64_t *bytes,
                     int cap)
{
    int nt = 0;
    if (ddp_tensors(m, NULL, NULL, &nt, NULL) < 0 || nt == 0)
        return 0;
    size_t *off = calloc((size_t)nt, sizeof *off), *len = calloc((size_t)nt, sizeof *len);
    int *bounds = calloc((size_t)nt + 1, sizeof *bounds), n = 0;
    if (off && len && bounds && ddp_tensors(m, off, len, &nt, NULL) == 0) {
        size_t first, bcap;
        ddp_bucket_caps(cfg, &first, &bcap);
        int nb = ddp_group_by_size(len, nt, first, bcap, bounds);
        for (int b = 0; b < nb && n < cap; b++) {
            size_t sum = 0;
            for (int t = bounds[b]; t < bounds[b + 1]; t++)
                sum += len[t];
            bytes[n++] = (int64_t)(sum * sizeof(float));
        }
    }
    free(off);
    free(len);
    free(bounds);
    return n;
}

/* Lays the buckets over the arena from the tensor groups; zero: each rank's chunk. */
static void ddp_layout_buckets(struct ddp *d, const int *bounds)
{
    size_t state = 0, pad = 0, staged = 0;
    for (int b = 0; b < d->nb; b++) {
        struct ddp_bucket *bk = &d->b[b];
        int last = bounds[b + 1] - 1; /* lowest offset: reverse order */
        bk->offset = d->t_off[last];
        bk->len = d->t_off[bounds[b]] + d->t_len[bounds[b]] - bk->offset;
        bk->chunk = (bk->len + (size_t)d->world - 1) / (size_t)d->world;
        size_t lo = (size_t)d->rank * bk->chunk;
        bk->own_off = bk->offset + (lo < bk->len ? lo : bk->len);
        bk->own_len = lo < bk->len ? (bk->len - lo < bk->chunk ? bk->len - lo : bk->chunk) : 0;
        bk->state_off = state;
        state += bk->own_len;
        bk->pad_off = pad;
        pad += bk->chunk * (size_t)d->world;
        bk->stage_off = staged; /* only a bucket the world does not divide is staged */
        if (bk->len % (size_t)d->world != 0)
            staged += bk->chunk * (size_t)d->world;
    }
    d->own_total = state;
    d->pad_len = pad;      /* zero: the padded copy of every bucket (the wire buffer) */
    d->stage_len = staged; /* zero: of those the world does not divide */
}

int ddp_init(struct ddp *d, const struct ddp_config *cfg, struct comm *c, struct nn_model *m,
             struct err *e)
{
    memset(d, 0, sizeof *d);
    d->cfg = *cfg;
    d->comm = c;
    d->m = m;
    d->rank = c->rank;
    d->world = c->world_size;
    d->n = m->nparams;
    d->sync = true;
    if (!vocab_strategy((int)cfg->strategy) || (unsigned)cfg->compression > DDP_COMPRESS_BF16)
        return err_set(e, ERR_INVALID, "strategy", "ddp: unknown strategy or compression");
    if (vocab_strategy((int)cfg->strategy)->single_process) /* the spec refuses it too */
        return err_set(e, ERR_INVALID, "strategy",
                       "ddp: %s is a framework's single-process strategy; this worker runs a "
                       "replica per process",
                       vocab_strategy((int)cfg->strategy)->name);
    if (!m->params.data)
        return err_set(e, ERR_INVALID, NULL, "ddp: the model has no parameters yet");
    if (ddp_tensors(m, NULL, NULL, &d->nt, e) < 0)
        return -1;
    size_t nt = (size_t)d->nt;
    d->t_off = calloc(nt + 1, sizeof *d->t_off);
    d->t_len = calloc(nt + 1, sizeof *d->t_len);
    d->plan = calloc(nt + 1, sizeof *d->plan);
    d->ready_ns = calloc(nt + 1, sizeof *d->ready_ns);
    d->b = calloc(nt + 1, sizeof *d->b);
    if (!d->t_off || !d->t_len || !d->plan || !d->ready_ns || !d->b)
        goto nomem;
    ddp_tensors(m, d->t_off, d->t_len, &d->nt, e);

    size_t first, cap;
    ddp_bucket_caps(cfg, &first, &cap);
    /* horovod starts with the size-only plan; naive exchanges tensor by tensor */
    int *bounds = d->plan;
    d->nb = ddp_group_by_size(d->t_len, d->nt, first, cap, bounds);
    if (d->nb < 0)
        goto nomem;
    d->nplan = d->nb;
    ddp_layout_buckets(d, bounds);

    size_t wire = ddp_is_zero(d) ? d->pad_len : d->n;
    if (cfg->compression != DDP_COMPRESS_NONE && !(d->wire = calloc(wire + 1, 2)))
        goto nomem;
    d->wire_len = d->wire ? wire + 1 : 0;
    if (cfg->strategy == DDP_HOROVOD)
        d->stage_len = d->n; /* the fusion buffer, at the arena's offsets */
    else if (!ddp_is_zero(d))
        d->stage_len = 0;
    if (d->stage_len && !(d->stage = calloc(d->stage_len, sizeof(float))))
        goto nomem;
    return 0;
nomem:
    ddp_cleanup(d);
    return err_set(e, ERR_NOMEM, NULL, "ddp: out of memory for %d parameter tensors", d->nt);
}

void ddp_cleanup(struct ddp *d)
{
    for (int b = 0; d->b && b < d->nb; b++)
        if (d->b[b].h)
            comm_wait(d->b[b].h, NULL);
    free(d->b);
    free(d->t_off);
    free(d->t_len);
    free(d->plan);
    free(d->ready_ns);
    free(d->wire);
    free(d->stage);
    free(d->spans);
    free(d->ops);
    memset(d, 0, sizeof *d);
}

int ddp_set_device(struct ddp *d, const struct ddp_device *dev, struct err *e)
{
    if (d->cfg.strategy != DDP_NAIVE && d->cfg.strategy != DDP_DDP)
        return err_set(e, ERR_INVALID, "strategy",
                       "strategy %s on device \"cuda\" is not implemented (its staging is "
                       "host memory): use naive or ddp",
                       ddp_strategy_name(d->cfg.strategy));
    if (d->cfg.compression != DDP_COMPRESS_NONE)
        return err_set(e, ERR_INVALID, "compression",
                       "compression %s on device \"cuda\" is not implemented (it converts "
                       "on the host): use none",
                       ddp_compression_names[d->cfg.compression]);
    if (!dev->params || !dev->grads || !dev->scale || !dev->update ||
        (d->m->nbuffers > 0 && !dev->buffers))
        return err_set(e, ERR_INVALID, NULL, "ddp: device mode needs arenas and hooks");
    d->dev = *dev;
    d->on_device = true;
    return 0;
}

int ddp_optim_init(const struct ddp *d, struct nn_optim *o, const struct nn_optim_cfg *cfg,
                   struct err *e)
{
    return nn_optim_init(o, cfg, ddp_is_zero(d) ? d->own_total : d->n, e);
}

/* ---- the full optimizer state (elastic training) ---------------------------------- */

size_t ddp_optim_full_len(const struct ddp *d, const struct nn_optim *o)
{
    return nn_optim_planes(&o->cfg) * d->n;
}

/* zero: every rank's packed chunks, each padded to its bucket's chunk length, plane after
 * plane, all-gathered; rank r's chunk of bucket b lands at b's offset + r * chunk. */
static int ddp_zero_export(struct ddp *d, const struct nn_optim *o, float *full, size_t planes,
                           struct err *e)
{
    size_t sum = 0, W = (size_t)d->world;
    for (int b = 0; b < d->nb; b++)
        sum += d->b[b].chunk;
    size_t per = planes * sum;
    float *send = calloc(per ? per : 1, sizeof *send);
    float *recv = calloc(per > 0 ? per * W : 1, sizeof *recv);
    if (!send || !recv) {
        free(send);
        free(recv);
        return err_set(e, ERR_NOMEM, NULL, "optimizer state: out of memory");
    }
    for (size_t k = 0, at = 0; k < planes; k++)
        for (int b = 0; b < d->nb; at += d->b[b].chunk, b++)
            memcpy(send + at, o->state.data + k * d->own_total + d->b[b].state_off,
                   d->b[b].own_len * sizeof(float));
    int rc = comm_all_gather(d->comm, send, recv, per, COMM_FLOAT32, e);
    for (size_t r = 0; rc == 0 && r < W; r++)
        for (size_t k = 0, at = 0; k < planes; k++)
            for (int b = 0; b < d->nb; at += d->b[b].chunk, b++) {
                const struct ddp_bucket *bk = &d->b[b];
                size_t lo = r * bk->chunk;
                size_t len = lo < bk->len
                                 ? (bk->len - lo < bk->chunk ? bk->len - lo : bk->chunk)
                                 : 0;
                memcpy(full + k * d->n + bk->offset + lo, recv + r * per + at,
                       len * sizeof(float));
            }
    free(send);
    free(recv);
    return rc < 0 ? err_prefix(e, "gathering the optimizer's shards") : 0;
}

int ddp_optim_export(struct ddp *d, const struct nn_optim *o, float *full, struct err *e)
{
    size_t planes = nn_optim_planes(&o->cfg);
    if (planes == 0)
        return 0;
    if (!ddp_is_zero(d)) {
        memcpy(full, o->state.data, planes * d->n * sizeof(float));
        return 0;
    }
    memset(full, 0, planes * d->n * sizeof(float));
    return ddp_zero_export(d, o, full, planes, e);
}

void ddp_optim_import(const struct ddp *d, struct nn_optim *o, const float *full, long step)
{
    size_t planes = nn_optim_planes(&o->cfg);
    o->step = step;
    if (planes && !ddp_is_zero(d))
        memcpy(o->state.data, full, planes * d->n * sizeof(float));
    for (size_t k = 0; ddp_is_zero(d) && k < planes; k++)
        for (int b = 0; b < d->nb; b++)
            memcpy(o->state.data + k * d->own_total + d->b[b].state_off,
                   full + k * d->n + d->b[b].own_off, d->b[b].own_len * sizeof(float));
}

/* ---- communication helpers ------------------------------------------------------- */

static enum comm_dtype ddp_wire_dtype(const struct ddp *d)
{
    return d->cfg.compression == DDP_COMPRESS_FP16 ? COMM_FLOAT16 : COMM_BFLOAT16;
}

static void ddp_compress(const struct ddp *d, uint16_t *dst, const float *src, size_t n)
{
    if (d->cfg.compression == DDP_COMPRESS_FP16)
        for (size_t i = 0; i < n; i++)
            dst[i] = reduce_float_to_half(src[i]);
    else
        for (size_t i = 0; i < n; i++)
            dst[i] = reduce_float_to_bf16(src[i]);
}

/* dst = decompressed src / world: the compressed exchanges sum, then average in float */
static void ddp_decompress(const struct ddp *d, float *dst, const uint16_t *src, size_t n)
{
    float inv = 1.0f / (float)d->world;
    if (d->cfg.compression == DDP_COMPRESS_FP16)
        for (size_t i = 0; i < n; i++)
            dst[i] = reduce_half_to_float(src[i]) * inv;
    else
        for (size_t i = 0; i < n; i++)
            dst[i] = reduce_bf16_to_float(src[i]) * inv;
}

static void ddp_fail(struct ddp *d, const struct err *e)
{
    if (!d->failed) {
        d->err = *e;
        d->failed = true;
    }
}

/* ---- the step's communication timeline (ddp.h "Timing") ------------------------------ */

/* Adds [from, to) to the step's intervals. The array grows in the first steps only. */
static void ddp_span_add(struct ddp *d, int64_t from, int64_t to, bool exposed)
{
    if (d->nspans == d->spans_cap) {
        int cap = d->spans_cap > 0 ? 2 * d->spans_cap : 64;
        struct ddp_span *s = realloc(d->spans, (size_t)cap * sizeof *s);
        if (!s) {
            struct err e;
            err_set(&e, ERR_NOMEM, NULL, "ddp: out of memory for the step's timeline");
            ddp_fail(d, &e);
            return;
        }
        d->spans = s;
        d->spans_cap = cap;
    }
    d->spans[d->nspans++] = (struct ddp_span){.from_ns = from, .to_ns = to, .exposed = exposed};
}

/* The training thread did communication work from `from` until now: exposed, and part
 * of the union. Returns now, where the caller's next communication call starts (naive
 * chains them, so nothing between its calls escapes either figure). */
static int64_t ddp_exposed(struct ddp *d, int64_t from)
{
    int64_t now = clock_mono_ns();
    d->st.exposed_ns += now - from;
    ddp_span_add(d, from, now, true);
    return now;
}

static int ddp_span_cmp(const void *a, const void *b)
{
    const struct ddp_span *x = a, *y = b;
    return (x->from_ns > y->from_ns) - (x->from_ns < y->from_ns);
}

/* st.comm_ns = the length of the union of the step's intervals (sorted in place). */
static void ddp_comm_total(struct ddp *d)
{
    qsort(d->spans, (size_t)d->nspans, sizeof *d->spans, ddp_span_cmp);
    int64_t total = 0, from = 0, to = 0;
    for (int i = 0; i < d->nspans; i++) {
        const struct ddp_span *s = &d->spans[i];
        if (i == 0 || s->from_ns > to) {
            total += to - from;
            from = s->from_ns;
            to = s->to_ns;
        } else if (s->to_ns > to) {
            to = s->to_ns;
        }
    }
    d->st.comm_ns = total + (to - from);
}

/* Waits for bucket b's operation (op, for the heartbeat's note) and adds its flight, from
 * the start of its launch until the communication thread finished it. Returns the
 * operation's result. */
/* The bytes of bucket b's operation op: the whole buffer (every rank's chunk for the
 * sharded ops), in the dtype it travels in. */
static int64_t ddp_op_bytes(const struct ddp *d, int b, enum comm_op op)
{
    const struct ddp_bucket *bk = &d->b[b];
    if (op == COMM_OP_ALL_GATHER)
        return (int64_t)(bk->chunk * (size_t)d->world * sizeof(float));
    size_t elem = d->wire ? 2 : sizeof(float);
    size_t n = op == COMM_OP_REDUCE_SCATTER ? bk->chunk * (size_t)d->world : bk->len;
    return (int64_t)(n * elem);
}

/* Adds bucket b's operation to the step's trace (while tracing). */
static void ddp_trace_op(struct ddp *d, int b, enum comm_op op, const struct comm_op_times *t)
{
    if (!d->trace)
        return;
    if (d->nops == d->ops_cap) {
        int cap = d->ops_cap > 0 ? 2 * d->ops_cap : 64;
        struct ddp_op_rec *g = realloc(d->ops, (size_t)cap * sizeof *g);
        if (!g)
            return; /* the trace loses an entry; the step does not fail for it */
        d->ops = g;
        d->ops_cap = cap;
    }
    struct ddp_op_rec *r = &d->ops[d->nops++];
    *r = (struct ddp_op_rec){.op = op,
                             .bucket = b,
                             .bytes = ddp_op_bytes(d, b, op),
                             .launch_ns = d->b[b].launch_ns,
                             .run_ns = t->run_ns,
                             .end_ns = t->end_ns};
    snprintf(r->algorithm, sizeof r->algorithm, "%s", t->algorithm);
}

static int ddp_wait(struct ddp *d, int b, enum comm_op op, struct err *e)
{
    struct ddp_bucket *bk = &d->b[b];
    struct comm_op_times t = {0};
    wait_note_begin(d->comm->note, WAIT_BUCKET, op, b + 1, d->nb, 0);
    int rc = comm_wait_timed(bk->h, &t, e);
    wait_note_end(d->comm->note);
    bk->h = NULL;
    ddp_span_add(d, bk->launch_ns, t.end_ns, false);
    if (rc == 0)
        ddp_trace_op(d, b, op, &t);
    return rc;
}

/* Where bucket b is exchanged: its place in the arenas, or for zero its padded place in
 * the staging / wire buffers (ddp_launch reduce-scatters a divisible, uncompressed zero
 * bucket in place in the arena instead). */
static size_t ddp_exchange_at(const struct ddp *d, int b)
{
    return ddp_is_zero(d) ? d->b[b].pad_off : d->b[b].offset;
}

/* Queues the exchange of bucket b (allreduce; zero: reduce-scatter), its launch starting
 * at t0 (a clock reading); returns the reading that ends it. */
static int64_t ddp_launch(struct ddp *d, int b, int64_t t0)
{
    struct ddp_bucket *bk = &d->b[b];
    float *g = ddp_grads(d);
    struct comm_args a = {
        .op = COMM_OP_ALLREDUCE, .count = bk->len, .ready_event = d->ready_event};
    struct err e = {0};
    bk->launched = true;
    bk->launch_ns = t0;
    if (d->failed)
        return t0;
    bool zero = ddp_is_zero(d), pad = zero && bk->len % (size_t)d->world != 0;
    size_t at = ddp_exchange_at(d, b);
    if (zero) {
        size_t padded = bk->chunk * (size_t)d->world;
        a.op = COMM_OP_REDUCE_SCATTER;
        a.count = bk->chunk;
        if (d->wire) {
            ddp_compress(d, d->wire + at, g + bk->offset, bk->len);
            memset(d->wire + at + bk->len, 0, (padded - bk->len) * 2);
        } else if (pad) {
            at = bk->stage_off;
            memcpy(d->stage + at, g + bk->offset, bk->len * sizeof(float));
            memset(d->stage + at + bk->len, 0, (padded - bk->len) * sizeof(float));
        } else {
            at = bk->offset;
        }
    }
    if (d->wire) {
        if (!zero)
            ddp_compress(d, d->wire + at, g + at, bk->len);
        a.send = d->wire + at;
        a.dtype = ddp_wire_dtype(d);
        a.redop = COMM_SUM;
    } else {
        float *buf = (zero && pad) ? d->stage + at : g + at;
        if (d->cfg.strategy == DDP_HOROVOD) { /* into the fusion buffer */
            memcpy(d->stage + at, g + at, bk->len * sizeof(float));
            buf = d->stage + at;
        }
        a.send = buf;
        a.dtype = COMM_FLOAT32;
        a.redop = COMM_AVG;
    }
    /* in place, as comm.h defines it for each op */
    a.recv = zero ? (uint8_t *)a.send + (size_t)d->rank * bk->chunk * comm_dtype_size(a.dtype)
                  : (void *)a.send;
    bk->h = comm_start(d->comm, &a, &e);
    if (!bk->h)
        ddp_fail(d, &e);
    d->st.ops++;
    return ddp_exposed(d, t0);
}

/* Moves bucket b's exchanged values into the gradient arena. */
static void ddp_unstage(struct ddp *d, int b)
{
    struct ddp_bucket *bk = &d->b[b];
    float *g = ddp_grads(d);
    size_t at = ddp_exchange_at(d, b);
    if (ddp_is_zero(d)) {
        size_t mine = at + (size_t)d->rank * bk->chunk;
        if (d->wire)
            ddp_decompress(d, g + bk->own_off, d->wire + mine, bk->own_len);
        else if (bk->len % (size_t)d->world != 0)
            memcpy(g + bk->own_off, d->stage + bk->stage_off + (size_t)d->rank * bk->chunk,
                   bk->own_len * sizeof(float));
        return;
    }
    if (d->wire)
        ddp_decompress(d, g + at, d->wire + at, bk->len);
    else if (d->cfg.strategy == DDP_HOROVOD)
        memcpy(g + at, d->stage + at, bk->len * sizeof(float));
}

/* Waits for bucket b and moves its result into the gradient arena, starting at t0 (a
 * clock reading); returns the reading that ends it. */
static int64_t ddp_complete(struct ddp *d, int b, int64_t t0)
{
    if (!d->b[b].h)
        return t0;
    struct err e = {0};
    if (ddp_wait(d, b, ddp_is_zero(d) ? COMM_OP_REDUCE_SCATTER : COMM_OP_ALLREDUCE, &e) < 0)
        ddp_fail(d, &e);
    else
        ddp_unstage(d, b);
    return ddp_exposed(d, t0);
}

/* ---- the step ---------------------------------------------------------------------- */

void ddp_begin_step(struct ddp *d, bool sync)
{
    if (d->sync) { /* the previous micro-batch ended a step: a new step's figures */
        memset(&d->st, 0, sizeof d->st);
        d->nspans = 0;
        d->nops = 0;
        d->bytes_at_start = d->comm->bytes_sent;
    }
    d->sync = sync;
    d->fused_from = 0;
    d->step_start_ns = clock_mono_ns();
    d->cycle_start_ns = d->step_start_ns;
    for (int b = 0; b < d->nb; b++) {
        d->b[b].pending = d->b[b].len;
        d->b[b].launched = false;
    }
}

/* Launches, in bucket order, every bucket whose gradients are all final. */
static void ddp_launch_ready(struct ddp *d)
{
    while (d->fused_from < d->nb && d->b[d->fused_from].pending == 0)
        ddp_launch(d, d->fused_from++, clock_mono_ns());
}

void ddp_grad_hook(void *ctx, const struct nn_grad_ready *r)
{
    struct ddp *d = ctx;
    if (!d->sync || !ddp_row(d)->overlaps_backward)
        return; /* these exchange after backward */
    size_t lo = r->offset, hi = r->offset + r->len;
    for (int b = 0; b < d->nb; b++) {
        struct ddp_bucket *bk = &d->b[b];
        size_t blo = bk->offset, bhi = bk->offset + bk->len;
        size_t a = lo > blo ? lo : blo, z = hi < bhi ? hi : bhi;
        if (a < z)
            bk->pending -= z - a;
    }
    if (d->cfg.strategy == DDP_HOROVOD && !d->plan_fixed && d->rank == 0) {
        int64_t now = clock_mono_ns() - d->step_start_ns;
        for (int t = 0; t < d->nt; t++)
            if (d->t_off[t] >= lo && d->t_off[t] < hi)
                d->ready_ns[t] = now;
    }
    /* device mode: a bucket completed by this layer waits for this layer's event (stream
     * order makes every earlier layer's gradients final by then too) */
    d->ready_event = r->ready_event;
    ddp_launch_ready(d);
    d->ready_event = NULL;
}

/* horovod, rank 0: the plan from the first step's readiness times: tensors ready in the
 * same cycle share a fusion buffer up to fusion_bytes (a larger tensor goes alone). */
static int ddp_plan_from_cycles(const struct ddp *d, int *bounds)
{
    int64_t *bytes = malloc(((size_t)d->nt + 1) * sizeof *bytes);
    if (!bytes)
        return -1;
    for (int t = 0; t < d->nt; t++)
        bytes[t] = (int64_t)(d->t_len[t] * sizeof(float));
    int nb = buckets_by_cycle(bytes, d->ready_ns, d->nt, (int64_t)(d->cfg.cycle_ms * 1e6),
                              (int64_t)d->cfg.fusion_bytes, bounds);
    free(bytes);
    return nb;
}

/* horovod after its first synchronising step: rank 0's plan to every rank. */
static int ddp_fix_plan(struct ddp *d, struct err *e)
{
    int32_t *wire = calloc((size_t)d->nt + 2, sizeof *wire);
    if (!wire)
        return err_set(e, ERR_NOMEM, NULL, "ddp: out of memory for the fusion plan");
    if (d->rank == 0) {
        int nb = ddp_plan_from_cycles(d, d->plan);
        if (nb < 0) /* no memory for a new plan: keep the size-only one */
            nb = d->nb;
        wire[0] = nb;
        for (int i = 0; i <= nb; i++)
            wire[i + 1] = d->plan[i];
    }
    int64_t t0 = clock_mono_ns();
    wait_note_begin(d->comm->note, WAIT_PLAN, COMM_OP_BROADCAST, 0, 0, 0);
    int rc = comm_broadcast(d->comm, wire, wire, (size_t)d->nt + 2, COMM_INT32, 0, e);
    wait_note_end(d->comm->note);
    ddp_exposed(d, t0); /* blocking: its flight is the training thread's wait */
    ddp_comm_total(d);
    if (rc == 0) {
        d->nb = wire[0];
        for (int i = 0; i <= d->nb; i++)
            d->plan[i] = wire[i + 1];
        ddp_layout_buckets(d, d->plan);
        d->stage_len = d->n;
        d->plan_fixed = true;
    }
    free(wire);
    return rc;
}

/* Scales gradients (zero: the owned chunks) by 1/accumulate after an exchange. */
static void ddp_scale_accumulated(struct ddp *d, int accumulate)
{
    if (accumulate <= 1)
        return;
    float s = 1.0f / (float)accumulate, *g = ddp_grads(d);
    for (int b = 0; b < d->nb; b++) {
        size_t off = ddp_is_zero(d) ? d->b[b].own_off : d->b[b].offset;
        size_t len = ddp_is_zero(d) ? d->b[b].own_len : d->b[b].len;
        if (d->on_device) {
            d->dev.scale(d->dev.ctx, g + off, len, s);
            continue;
        }
        for (size_t i = 0; i < len; i++)
            g[off + i] *= s;
    }
}

int ddp_finish(struct ddp *d, int accumulate, struct err *e)
{
    if (!d->sync)
        return 0;
    if (d->cfg.strategy == DDP_NAIVE) {
        /* one blocking exchange per tensor, nothing overlapped: each call starts at the
         * reading that ended the last, so exposed == comm to the nanosecond */
        int64_t t = clock_mono_ns();
        for (int b = 0; b < d->nb; b++)
            t = ddp_complete(d, b, ddp_launch(d, b, t));
    } else {
        for (int b = 0; b < d->nb; b++) /* what backward did not launch */
            d->b[b].pending = 0;
        ddp_launch_ready(d);
        for (int b = 0; b < d->nb; b++)
            ddp_complete(d, b, clock_mono_ns());
    }
    ddp_comm_total(d);
    d->st.bytes_sent = d->comm->bytes_sent - d->bytes_at_start;
    if (d->failed) {
        *e = d->err;
        return -1;
    }
    ddp_scale_accumulated(d, accumulate);
    if (d->cfg.strategy == DDP_HOROVOD && !d->plan_fixed)
        return ddp_fix_plan(d, e);
    return 0;
}

/* The sum of squares of the averaged gradients this rank holds: the whole arena, or
 * under zero its own chunks (the only reduced part; zero1's other floats are local). */
static double ddp_grad_sumsq(const struct ddp *d)
{
    const float *g = ddp_grads(d);
    double s = 0;
    if (!ddp_is_zero(d)) {
        for (size_t i = 0; i < d->n; i++)
            s += (double)g[i] * g[i];
        return s;
    }
    for (int b = 0; b < d->nb; b++)
        for (size_t i = 0; i < d->b[b].own_len; i++) {
            double v = g[d->b[b].own_off + i];
            s += v * v;
        }
    return s;
}

/* Multiplies the gradients the optimizer reads (ddp_grad_sumsq's) by f. */
static void ddp_grad_scale(struct ddp *d, float f)
{
    float *g = ddp_grads(d);
    if (!ddp_is_zero(d)) {
        for (size_t i = 0; i < d->n; i++)
            g[i] *= f;
        return;
    }
    for (int b = 0; b < d->nb; b++)
        for (size_t i = 0; i < d->b[b].own_len; i++)
            g[d->b[b].own_off + i] *= f;
}

int ddp_clip_grad_norm(struct ddp *d, double clip, double *norm, struct err *e)
{
    if (d->on_device)
        return err_set(e, ERR_INVALID, "clip_grad_norm",
                       "clip_grad_norm: the gradients are on the device; ddpbench clips on "
                       "the host only");
    double sumsq = ddp_grad_sumsq(d);
    if (ddp_is_zero(d)) { /* every rank holds one shard: their sums add up to the norm */
        float s = (float)sumsq;
        int64_t t0 = clock_mono_ns();
        if (comm_allreduce(d->comm, &s, &s, 1, COMM_FLOAT32, COMM_SUM, e) < 0)
            return -1;
        d->st.ops++;
        ddp_exposed(d, t0);
        ddp_comm_total(d);
        sumsq = s;
    }
    *norm = sqrt(sumsq);
    if (clip > 0 && *norm > clip) /* torch.nn.utils.clip_grad_norm_'s factor */
        ddp_grad_scale(d, (float)(clip / (*norm + 1e-6)));
    return 0;
}

int ddp_optim_step(struct ddp *d, struct nn_optim *o, double lr, struct err *e)
{
    float *p = ddp_params(d), *g = ddp_grads(d);
    if (d->on_device) { /* naive or ddp (ddp_set_device): one update of everything */
        nn_optim_begin_step(o);
        d->dev.update(d->dev.ctx, o, 0, 0, d->n, lr);
        return 0;
    }
    if (!ddp_is_zero(d)) {
        nn_optim_step(o, p, g, lr);
        return 0;
    }
    nn_optim_begin_step(o);
    for (int b = 0; b < d->nb; b++) {
        struct ddp_bucket *bk = &d->b[b];
        nn_optim_update_slice(o, p + bk->own_off, g + bk->own_off, bk->state_off, bk->own_len,
                              lr);
    }
    /* every rank's updated chunks to every rank, bucket by bucket, in flight together */
    int rc = 0;
    for (int b = 0; b < d->nb; b++) {
        struct ddp_bucket *bk = &d->b[b];
        int64_t t0 = clock_mono_ns();
        bk->launch_ns = t0;
        bool pad = bk->len % (size_t)d->world != 0;
        float *buf = pad ? d->stage + bk->stage_off : p + bk->offset;
        if (pad)
            memcpy(buf + (size_t)d->rank * bk->chunk, p + bk->own_off,
                   bk->own_len * sizeof(float));
        struct comm_args a = {.op = COMM_OP_ALL_GATHER,
                              .count = bk->chunk,
                              .dtype = COMM_FLOAT32,
                              .send = buf + (size_t)d->rank * bk->chunk,
                              .recv = buf};
        if (rc == 0 && !(bk->h = comm_start(d->comm, &a, e)))
            rc = -1;
        d->st.ops++;
        ddp_exposed(d, t0);
    }
    for (int b = 0; b < d->nb; b++) {
        struct ddp_bucket *bk = &d->b[b];
        if (bk->h) {
            int64_t t0 = clock_mono_ns();
            struct err we = {0};
            if (ddp_wait(d, b, COMM_OP_ALL_GATHER, &we) < 0 && rc == 0) {
                *e = we;
                rc = -1;
            }
            if (rc == 0 && bk->len % (size_t)d->world != 0)
                memcpy(p + bk->offset, d->stage + bk->stage_off, bk->len * sizeof(float));
            ddp_exposed(d, t0);
        }
    }
    ddp_comm_total(d);
    d->st.bytes_sent = d->comm->bytes_sent - d->bytes_at_start;
    if (rc == 0 && d->failed) { /* the timeline ran out of memory */
        *e = d->err;
        rc = -1;
    }
    return rc;
}

int ddp_broadcast_params(struct ddp *d, struct err *e)
{
    struct nn_model *m = d->m;
    float *p = ddp_params(d), *buf = d->on_device ? d->dev.buffers : m->buffers.data;
    wait_note_begin(d->comm->note, WAIT_PARAMS, COMM_OP_BROADCAST, 0, 0, 0);
    int rc = comm_broadcast(d->comm, p, p, m->nparams, COMM_FLOAT32, 0, e);
    wait_note_begin(d->comm->note, WAIT_BUFFERS, COMM_OP_BROADCAST, 0, 0, 0);
    if (rc == 0 && m->nbuffers > 0)
        rc = comm_broadcast(d->comm, buf, buf, m->nbuffers, COMM_FLOAT32, 0, e);
    wait_note_end(d->comm->note);
    return rc;
}

void ddp_set_trace(struct ddp *d, bool on)
{
    d->trace = on;
}

void ddp_memory(const struct ddp *d, const struct nn_optim *o, struct ddp_memory *out)
{
    int64_t f = (int64_t)sizeof(float), n = (int64_t)d->n;
    int64_t kept = ddp_row(d)->shards_gradients ? (int64_t)d->own_total : n;
    out->params = n * f;
    out->buffers = (int64_t)d->m->nbuffers * f;
    out->grads = kept * f;
    out->optimizer = (int64_t)o->state.len * f;
    out->comm = (int64_t)d->stage_len * f + (int64_t)d->wire_len * 2 + (n - kept) * f +
                (int64_t)d->comm->buffer_bytes;
}
