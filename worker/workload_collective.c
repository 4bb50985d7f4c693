/* workload_collective: see workload_collective.h. Per size: inputs once, warmup, timed
 * iterations back to back (no barrier between them, as nccl-tests times) except that the
 * checked first and last ones are poisoned before and verified after, with a barrier
 * realigning the ranks after that untimed work; times and wrong counts to the store, one
 * comm barrier, then rank 0 combines and reports. */
#include "worker/workload_collective.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/stats.h"
#include "worker/comm/reduce.h"
#include "worker/comm/wait_note.h"
#include "worker/train_module.h"

/* ---- statistics ------------------------------------------------------------------- */

void collective_stats_compute(double *times_s, size_t n, struct collective_stats *out)
{
    struct stats_summary s;
    stats_summarize(times_s, n, &s);
    *out = (struct collective_stats){.min_us = s.min * 1e6,
                                     .median_us = s.median * 1e6,
                                     .p95_us = s.p95 * 1e6,
                                     .mean_us = s.mean * 1e6,
                                     .max_us = s.max * 1e6};
}

void collective_max_into(double *acc, const double *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] > acc[i])
            acc[i] = v[i];
}

/* ---- inputs ---------------------------------------------------------------------- */

static uint64_t collective_mix(uint64_t x)
{
    /* splitmix64 finalizer: neighbouring indices get unrelated values, so a result
     * shifted by a few elements or a chunk cannot pass the check by accident */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t collective_index_hash(int64_t seed, size_t i)
{
    return collective_mix((uint64_t)seed * 0x100000001b3ull ^ (uint64_t)i);
}

/* The rotation of rank's values: consecutive ranks differ at every index (a hashed one
 * let two ranks of a world of 2 share every value one seed in 17, and then an in-place
 * average or broadcast that never wrote passed its check). */
static unsigned collective_rank_residue(int rank, int q)
{
    return (unsigned)rank % (unsigned)q;
}

/* Largest integer magnitude up to which every integer is exact in t (and far from
 * overflowing for the integer types). */
static int64_t collective_exact_limit(enum comm_dtype t)
{
    switch (t) {
    case COMM_BFLOAT16: return 256;
    case COMM_FLOAT16: return 2048;
    case COMM_FLOAT32: return INT64_C(1) << 24;
    default: return INT64_C(1) << 40;
    }
}

static int64_t collective_clamp(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

void collective_data_init(struct collective_data *d, int64_t seed, enum comm_op op,
                          enum comm_dtype dtype, enum comm_redop redop, int world)
{
    memset(d, 0, sizeof *d);
    d->seed = seed;
    d->op = op;
    d->dtype = dtype;
    d->redop = redop;
    d->world = world < 1 ? 1 : world;
    d->opi = coll_op_get(op);
    bool reducing = d->opi && d->opi->reduces;
    int64_t limit = collective_exact_limit(dtype);
    d->minmax = reducing && (redop == COMM_MIN || redop == COMM_MAX);
    if (d->minmax) {
        d->levels = (int)collective_clamp(limit / d->world, 1, 17);
        d->off = (int64_t)d->levels * d->world / 2;
        return;
    }
    /* values lo..q: a sum over the world stays within world * q <= limit; beyond limit
     * ranks only zeros are exact */
    d->q = (int)(reducing ? collective_clamp(limit / d->world, 1, 17) : 17);
    d->lo = !reducing || limit >= d->world;
    int per_residue[17] = {0};
    for (int r = 0; r < d->world; r++)
        per_residue[collective_rank_residue(r, d->q)]++;
    for (int h = 0; h < d->q; h++)
        for (int v = 0; v < d->q; v++)
            d->sum_by_residue[h] += (int64_t)per_residue[v] * (((h + v) % d->q) + d->lo);
}

static int64_t collective_input_h(const struct collective_data *d, int rank, uint64_t h,
                                  unsigned rank_residue)
{
    if (d->minmax)
        return (int64_t)(h % (uint64_t)d->levels) * d->world +
               (int64_t)(((h >> 32) % (uint64_t)d->world + (uint64_t)rank) %
                         (uint64_t)d->world) -
               d->off;
    return (int64_t)((h % (uint64_t)d->q + rank_residue) % (uint64_t)d->q) + d->lo;
}

int64_t collective_input(const struct collective_data *d, int rank, size_t i)
{
    unsigned rr = d->minmax ? 0 : collective_rank_residue(rank, d->q);
    return collective_input_h(d, rank, collective_index_hash(d->seed, i), rr);
}

void collective_fill(const struct collective_data *d, void *buf, size_t n, int rank)
{
    uint8_t *p = buf;
    size_t es = comm_dtype_size(d->dtype);
    unsigned rr = d->minmax ? 0 : collective_rank_residue(rank, d->q);
    for (size_t i = 0; i < n; i++)
        reduce_store(
            p + i * es, d->dtype,
            (double)collective_input_h(d, rank, collective_index_hash(d->seed, i), rr));
}

/* The reduction over ranks of element j, as the dtype stores it. */
static double collective_reduced(const struct collective_data *d, size_t j)
{
    uint64_t h = collective_index_hash(d->seed, j);
    if (d->minmax) {
        int64_t lo = (int64_t)(h % (uint64_t)d->levels) * d->world - d->off;
        return (double)(d->redop == COMM_MIN ? lo : lo + d->world - 1);
    }
    int64_t sum = d->sum_by_residue[h % (uint64_t)d->q];
    if (d->redop != COMM_AVG)
        return (double)sum;
    if (d->dtype == COMM_INT32 || d->dtype == COMM_INT64)
        return (double)(sum / d->world); /* C division: toward zero */
    uint8_t tmp[8];
    reduce_store(tmp, d->dtype, (double)((float)sum / (float)d->world));
    return reduce_load(tmp, d->dtype);
}

double collective_expected(const struct collective_data *d, int rank, size_t count, size_t i)
{
    if (!d->opi)
        return 0;
    struct coll_source src = d->opi->source(rank, d->world, count, i);
    return src.reduced ? collective_reduced(d, src.index)
                       : (double)collective_input(d, src.rank, src.index);
}

int64_t collective_count_wrong(const struct collective_data *d, const void *out, int rank,
                               size_t count)
{
    const uint8_t *p = out;
    size_t es = comm_dtype_size(d->dtype);
    size_t n = d->opi ? coll_op_elems(d->opi->recv, count, d->world) : 0;
    int64_t wrong = 0;
    for (size_t i = 0; i < n; i++)
        wrong += reduce_load(p + i * es, d->dtype) != collective_expected(d, rank, count, i);
    return wrong;
}

/* ---- benchmark --------------------------------------------------------------------- */

void collective_bench_cleanup(struct collective_bench *b)
{
    if (b->mem) {
        if (b->send)
            b->mem->free(b->mem->ctx, b->send);
        if (b->recv)
            b->mem->free(b->mem->ctx, b->recv);
    } else {
        free(b->send);
        free(b->recv);
    }
    free(b->host);
    free(b->times);
    free(b->slowest);
    free(b->wire);
    free(b->trace_ns);
    if (b->have_obs)
        observe_cleanup(&b->obs);
    memset(b, 0, sizeof *b);
}

static int collective_bench_parse(struct collective_bench *b, const struct spec_collective *cfg,
                                  struct err *e)
{
    if (!(b->opi = coll_op_find(cfg->op)))
        return err_set(e, ERR_INVALID, "op", "collective: op '%s' is not a benchmark op",
                       cfg->op);
    b->op = b->opi->op;
    if (comm_dtype_parse(cfg->dtype, &b->dtype) < 0)
        return err_set(e, ERR_INVALID, "dtype", "collective: unknown dtype '%s'", cfg->dtype);
    if (comm_redop_parse(cfg->redop, &b->redop) < 0)
        return err_set(e, ERR_INVALID, "redop", "collective: unknown redop '%s'", cfg->redop);
    if (comm_algorithm_parse(cfg->algorithm[0] ? cfg->algorithm : "auto", &b->algorithm) < 0)
        return err_set(e, ERR_INVALID, "algorithm", "collective: unknown algorithm '%s'",
                       cfg->algorithm);
    if (cfg->iters < 1 || cfg->warmup < 0)
        return err_set(e, ERR_INVALID, "iters", "collective: iters must be >= 1, warmup >= 0");
    b->esize = comm_dtype_size(b->dtype);
    return 0;
}

/* One message buffer of cap_bytes: host memory, or through the hooks. */
static uint8_t *collective_buffer(struct collective_bench *b, struct err *e)
{
    if (!b->mem)
        return malloc(b->cap_bytes);
    return b->mem->alloc(b->mem->ctx, b->cap_bytes, e);
}

int collective_bench_init(struct collective_bench *b, const struct spec *s, struct comm *c,
                          struct store_client *store, struct report_writer *w,
                          int64_t max_bytes, int64_t points_total, struct err *e)
{
    return collective_bench_init_mem(b, s, c, store, w, max_bytes, points_total, NULL, e);
}

int collective_bench_init_mem(struct collective_bench *b, const struct spec *s, struct comm *c,
                              struct store_client *store, struct report_writer *w,
                              int64_t max_bytes, int64_t points_total,
                              const struct collective_mem *mem, struct err *e)
{
    memset(b, 0, sizeof *b);
    b->mem = mem;
    b->cfg = &s->coll;
    b->comm = c;
    b->store = store;
    b->w = w;
    b->seed = s->seed;
    b->points_total = points_total;
    b->trace_steps = s->trace_steps;
    if (w && s->trace_steps > 0) {
        observe_init(&b->obs, w, NULL);
        b->have_obs = true;
        b->trace_ns = calloc(2 * (size_t)s->trace_steps, sizeof *b->trace_ns);
        if (!b->trace_ns) {
            collective_bench_cleanup(b);
            return err_set(e, ERR_NOMEM, NULL, "collective: out of memory for the trace");
        }
    }
    if (collective_bench_parse(b, b->cfg, e) < 0)
        return -1;
    /* NCCL is told its algorithm once, when the communicator is made (comm_nccl.h); its
     * operations take none of their own */
    if (c && c->backend && strcmp(c->backend, "nccl") == 0)
        b->algorithm = COMM_ALG_AUTO;
    if (max_bytes < 1 || (uint64_t)max_bytes > SIZE_MAX / 4)
        return err_set(e, ERR_INVALID, "max_bytes", "collective: max_bytes %lld out of range",
                       (long long)max_bytes);
    /* the smallest message is one element per rank: world_size elements for
     * reduce_scatter and all_gather, whatever max_bytes says */
    size_t floor = (c ? (size_t)c->world_size : 1) * 8;
    b->cap_bytes = (size_t)max_bytes > floor ? (size_t)max_bytes : floor;
    size_t iters = (size_t)b->cfg->iters;
    struct err ae = {0};
    b->recv = collective_buffer(b, &ae);
    b->send = b->cfg->inplace || !b->recv ? NULL : collective_buffer(b, &ae);
    b->host = mem ? malloc(b->cap_bytes) : NULL;
    b->times = calloc(iters, sizeof *b->times);
    b->slowest = calloc(iters, sizeof *b->slowest);
    b->wire = malloc(iters * 8);
    if (!b->recv || (!b->cfg->inplace && !b->send) || (mem && !b->host) || !b->times ||
        !b->slowest || !b->wire) {
        size_t cap = b->cap_bytes;
        collective_bench_cleanup(b);
        return err_set(e, ERR_NOMEM, "max_bytes",
                       "collective: cannot allocate buffers for %zu-byte messages%s%s", cap,
                       ae.msg[0] ? ": " : "", ae.msg);
    }
    return 0;
}

/* One point's operation on count elements per block, laid out in the bench's buffers,
 * with the op's peers; in place as NCCL defines it (coll_op_inplace_block: the one-block
 * side is this rank's block of the one buffer). */
static void collective_point_args(const struct collective_bench *b, size_t count,
                                  struct comm_args *a)
{
    int r = b->comm->rank, n = b->comm->world_size;
    size_t block = (size_t)r * count * b->esize;
    *a = (struct comm_args){.op = b->op,
                            .count = count,
                            .dtype = b->dtype,
                            .redop = b->redop,
                            .algorithm = b->algorithm,
                            .send = b->send,
                            .recv = b->recv};
    if (b->opi->peers)
        b->opi->peers(a, r, n);
    if (!b->cfg->inplace)
        return;
    a->send = b->recv;
    int side = coll_op_inplace_block(b->opi);
    if (side > 0)
        a->recv = b->recv + block;
    else if (side < 0)
        a->send = b->recv + block;
}

/* Writes this rank's inputs where a reads them (through the host copy with hooks). */
static int collective_point_inputs(const struct collective_bench *b, const struct comm_args *a,
                                   const struct collective_data *d, struct err *e)
{
    size_t n = coll_op_elems(b->opi->send, a->count, b->comm->world_size);
    if (!b->mem) {
        collective_fill(d, (void *)(uintptr_t)a->send, n, b->comm->rank);
        return 0;
    }
    collective_fill(d, b->host, n, b->comm->rank);
    if (b->mem->upload(b->mem->ctx, (void *)(uintptr_t)a->send, b->host, n * b->esize, e) < 0)
        return err_prefix(e, "collective: uploading inputs");
    return 0;
}

/* The time of the operation that just completed: the device's when it knows, else the
 * host clock's since t0_ns. */
static double collective_op_seconds(const struct collective_bench *b, int64_t t0_ns)
{
    double host = (double)(clock_mono_ns() - t0_ns) * 1e-9;
    if (!b->mem || !b->mem->last_op_seconds)
        return host;
    double dev = b->mem->last_op_seconds(b->mem->ctx, b->comm);
    return dev >= 0 ? dev : host;
}

static void collective_key(char *out, size_t outlen, int repeat, size_t idx, const char *what,
                           int rank)
{
    snprintf(out, outlen, "coll/r%d/s%zu/%s/%d", repeat, idx, what, rank);
}

static void collective_times_encode(const double *t, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t bits;
        memcpy(&bits, &t[i], sizeof bits);
        for (int k = 0; k < 8; k++)
            out[i * 8 + (size_t)k] = (uint8_t)(bits >> (8 * k));
    }
}

static void collective_times_decode(const uint8_t *in, size_t n, double *t)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t bits = 0;
        for (int k = 0; k < 8; k++)
            bits |= (uint64_t)in[i * 8 + (size_t)k] << (8 * k);
        memcpy(&t[i], &bits, sizeof bits);
    }
}

/* The buffer an operation's output lies in, poisoned whole before a checked iteration:
 * out of place the receive side; in place the one buffer, whose larger side is the
 * world-sized one (coll_ops.h). */
static size_t collective_span(const struct collective_bench *b, const struct comm_args *a,
                              uint8_t **base)
{
    int n = b->comm->world_size;
    size_t recv = coll_op_elems(b->opi->recv, a->count, n);
    size_t send = coll_op_elems(b->opi->send, a->count, n);
    if (!b->cfg->inplace) {
        *base = a->recv;
        return recv * b->esize;
    }
    *base = b->recv;
    return (recv > send ? recv : send) * b->esize;
}

/* Before a checked iteration: poison the output's buffer (0xa5 bytes, the header says
 * why no expected value has them), then write fresh inputs over their part, so the
 * iteration starts from known data whatever the warmup or the earlier timed runs left. */
static int collective_arm(const struct collective_bench *b, const struct comm_args *a,
                          const struct collective_data *d, struct err *e)
{
    uint8_t *base;
    size_t bytes = collective_span(b, a, &base);
    if (!b->mem)
        memset(base, 0xa5, bytes);
    else {
        memset(b->host, 0xa5, bytes);
        if (b->mem->upload(b->mem->ctx, base, b->host, bytes, e) < 0)
            return err_prefix(e, "collective: poisoning the output");
    }
    return collective_point_inputs(b, a, d, e);
}

/* After a checked iteration: the output elements that differ from the expected ones
 * (downloaded into the host copy first with hooks). */
static int collective_verify(const struct collective_bench *b, const struct comm_args *a,
                             const struct collective_data *d, int64_t *wrong, struct err *e)
{
    const void *out = a->recv;
    if (b->mem) {
        size_t bytes = coll_op_elems(b->opi->recv, a->count, b->comm->world_size) * b->esize;
        if (b->mem->download(b->mem->ctx, b->host, a->recv, bytes, e) < 0)
            return err_prefix(e, "collective: downloading the output");
        out = b->host;
    }
    *wrong = collective_count_wrong(d, out, b->comm->rank, a->count);
    return 0;
}

/* A barrier of the benchmark's ranks, noted for the heartbeat while it waits. */
static int collective_barrier(struct collective_bench *b, struct err *e)
{
    wait_note_begin(b->comm->note, WAIT_BARRIER, COMM_OP_BARRIER, 0, 0, 0);
    int rc = comm_barrier(b->comm, e);
    wait_note_end(b->comm->note);
    return rc;
}

/* Warmup and timed iterations of a; b->times gets each timed iteration's seconds and
 * *wrong the wrong elements of the checked ones (the first and last, when the spec
 * checks). A barrier ends the untimed work around a checked iteration, so that one rank's
 * arming or verifying is not timed as another rank's wait. */
/* Sends the traced iterations of point idx, after its timed loop (a report line between
 * iterations would be timed as the next one's wait on another rank): each as a traced
 * step (step idx * iters + i) holding the iteration and its operation. */
static int collective_trace_point(struct collective_bench *b, int repeat, size_t idx,
                                  const struct comm_args *a, int64_t bytes, struct err *e)
{
    int n = b->trace_steps < b->cfg->iters ? b->trace_steps : b->cfg->iters;
    for (int i = 0; b->have_obs && i < n; i++) {
        int64_t t0 = b->trace_ns[2 * i], t1 = b->trace_ns[2 * i + 1];
        observe_trace_begin(&b->obs);
        observe_trace_span(&b->obs, "iteration", t0, t1);
        observe_trace_op(&b->obs, comm_op_name(a->op), -1, bytes, b->algorithm_used, t0, t1);
        if (observe_trace_emit(&b->obs, repeat, (int64_t)idx * b->cfg->iters + i, e) < 0)
            return -1;
    }
    return 0;
}

static int collective_bench_time(struct collective_bench *b, int repeat, size_t idx,
                                 const struct comm_args *a, const struct collective_data *d,
                                 int64_t *wrong, struct err *e)
{
    *wrong = 0;
    /* the message size as the spec counts it (reduce_scatter, all_gather: every block) */
    int64_t bytes = (int64_t)(coll_op_message_blocks(b->opi, b->comm->world_size) * a->count *
                              b->esize);
    struct wait_note *note = b->comm->note;
    for (int i = 0; i < b->cfg->warmup; i++) {
        wait_note_begin(note, WAIT_ITER, a->op, 0, b->cfg->iters, bytes);
        int rc = comm_run(b->comm, a, e);
        wait_note_end(note);
        if (rc < 0)
            return -1;
    }
    bool realign = false;
    for (int i = 0; i < b->cfg->iters; i++) {
        bool checked = b->cfg->check && (i == 0 || i == b->cfg->iters - 1);
        if (checked && collective_arm(b, a, d, e) < 0)
            return -1;
        if ((checked || realign) && collective_barrier(b, e) < 0)
            return -1;
        wait_note_begin(note, WAIT_ITER, a->op, i + 1, b->cfg->iters, bytes);
        int64_t t0 = clock_mono_ns();
        int rc = comm_run(b->comm, a, e);
        wait_note_end(note);
        if (rc < 0)
            return -1;
        int64_t t1 = clock_mono_ns();
        b->times[i] = collective_op_seconds(b, t0);
        if (i < b->trace_steps && b->trace_ns) {
            b->trace_ns[2 * i] = t0;
            b->trace_ns[2 * i + 1] = t1;
        }
        int64_t w = 0;
        if (checked && collective_verify(b, a, d, &w, e) < 0)
            return -1;
        *wrong += w;
        realign = checked;
    }
    snprintf(b->algorithm_used, sizeof b->algorithm_used, "%s", b->comm->last_algorithm);
    return collective_trace_point(b, repeat, idx, a, bytes, e);
}

static int collective_publish(struct collective_bench *b, int repeat, size_t idx, int64_t wrong,
                              struct err *e)
{
    char key[96], val[32];
    size_t iters = (size_t)b->cfg->iters;
    collective_times_encode(b->times, iters, b->wire);
    collective_key(key, sizeof key, repeat, idx, "times", b->comm->rank);
    if (store_client_set(b->store, key, b->wire, iters * 8, e) < 0)
        return err_prefix(e, "collective: storing iteration times");
    collective_key(key, sizeof key, repeat, idx, "wrong", b->comm->rank);
    snprintf(val, sizeof val, "%lld", (long long)wrong);
    if (store_client_set_str(b->store, key, val, e) < 0)
        return err_prefix(e, "collective: storing the wrong count");
    return 0;
}

/* Rank 0: folds rank r's times into b->slowest and its wrong count into *wrong. */
static int collective_gather_rank(struct collective_bench *b, int repeat, size_t idx, int r,
                                  int64_t *wrong, struct err *e)
{
    char key[96], *val = NULL;
    size_t len, iters = (size_t)b->cfg->iters;
    collective_key(key, sizeof key, repeat, idx, "times", r);
    if (store_client_get(b->store, key, b->comm->timeout_ms, &val, &len, e) < 0)
        return err_prefix(e, "collective: iteration times of rank %d", r);
    if (len != iters * 8) {
        free(val);
        return err_set(e, ERR_PROTOCOL, NULL,
                       "collective: rank %d stored %zu bytes of times, want %zu", r, len,
                       iters * 8);
    }
    collective_times_decode((const uint8_t *)val, iters, b->times);
    free(val);
    collective_max_into(b->slowest, b->times, iters);
    collective_key(key, sizeof key, repeat, idx, "wrong", r);
    if (store_client_get(b->store, key, b->comm->timeout_ms, &val, &len, e) < 0)
        return err_prefix(e, "collective: wrong count of rank %d", r);
    char *end;
    long long wr = strtoll(val, &end, 10);
    bool bad = end == val || *end || wr < 0;
    free(val);
    if (bad)
        return err_set(e, ERR_PROTOCOL, NULL, "collective: bad wrong count from rank %d", r);
    *wrong += wr;
    return 0;
}

/* bytes: the message size as nccl-tests counts it (see the header). */
static int collective_report(struct collective_bench *b, int repeat, size_t bytes,
                             int64_t wrong, struct err *e)
{
    struct report_collective rc;
    memset(&rc, 0, sizeof rc);
    struct collective_stats st;
    collective_stats_compute(b->slowest, (size_t)b->cfg->iters, &st);
    rc.repeat = repeat;
    snprintf(rc.op, sizeof rc.op, "%s", b->opi->name);
    snprintf(rc.dtype, sizeof rc.dtype, "%s", b->cfg->dtype);
    snprintf(rc.redop, sizeof rc.redop, "%s", b->cfg->redop);
    snprintf(rc.algorithm, sizeof rc.algorithm, "%s", b->algorithm_used);
    rc.inplace = b->cfg->inplace;
    rc.count = (int64_t)(bytes / b->esize);
    rc.bytes = (int64_t)bytes;
    rc.iters = b->cfg->iters;
    rc.time_us_min = st.min_us;
    rc.time_us_median = st.median_us;
    rc.time_us_p95 = st.p95_us;
    rc.time_us_mean = st.mean_us;
    rc.time_us_max = st.max_us;
    rc.algbw_gbs = st.median_us > 0 ? (double)rc.bytes / (st.median_us * 1e-6) / 1e9 : 0;
    rc.busbw_gbs = rc.algbw_gbs * coll_op_busbw_factor(b->op, b->comm->world_size);
    rc.wrong = wrong;
    if (report_emit_collective(b->w, &rc, e) < 0 ||
        report_emit_progress(b->w, "collective", b->points_done, b->points_total, e) < 0)
        return err_prefix(e, "collective: reporting");
    return 0;
}

static int collective_bench_point(struct collective_bench *b, int repeat, size_t idx,
                                  int64_t bytes, struct err *e)
{
    size_t blocks = coll_op_message_blocks(b->opi, b->comm->world_size);
    size_t count = bytes > 0 ? (size_t)bytes / (b->esize * blocks) : 0;
    if (count == 0)
        count = 1; /* one element per rank at least */
    size_t total = count * blocks * b->esize;
    if (total > b->cap_bytes)
        return err_set(e, ERR_INVALID, "max_bytes",
                       "collective: size %lld is over the %zu bytes allocated",
                       (long long)bytes, b->cap_bytes);
    struct comm_args a;
    struct collective_data d;
    collective_point_args(b, count, &a);
    collective_data_init(&d, b->seed, b->op, b->dtype, b->redop, b->comm->world_size);
    int64_t wrong;
    if (collective_point_inputs(b, &a, &d, e) < 0 ||
        collective_bench_time(b, repeat, idx, &a, &d, &wrong, e) < 0 ||
        collective_publish(b, repeat, idx, wrong, e) < 0)
        return -1;
    /* Every rank stored its times before entering the barrier, so rank 0's reads below
     * find them at once; a rank that died fails the barrier instead. */
    if (collective_barrier(b, e) < 0)
        return -1;
    b->points_done++;
    if (b->comm->rank != 0)
        return 0;
    memcpy(b->slowest, b->times, (size_t)b->cfg->iters * sizeof *b->slowest);
    for (int r = 1; r < b->comm->world_size; r++)
        if (collective_gather_rank(b, repeat, idx, r, &wrong, e) < 0)
            return -1;
    return collective_report(b, repeat, total, wrong, e);
}

int collective_bench_run_sizes(struct collective_bench *b, int repeat, const int64_t *sizes,
                               size_t n, struct err *e)
{
    for (size_t i = 0; i < n; i++)
        if (collective_bench_point(b, repeat, i, sizes[i], e) < 0)
            return -1;
    return 0;
}

/* The gradient bucket sizes of s->coll.buckets_of: the model is the training module's
 * (train_module.h), loaded only for such a run. */
static int collective_model_buckets(const struct spec *s, int64_t *sizes, size_t cap, size_t *n,
                                    struct err *e)
{
    const struct train_module *t = train_module_load(e);
    if (!t) {
        if (e)
            snprintf(e->field, sizeof e->field, "buckets_of");
        return -1;
    }
    return t->model_buckets(s, sizes, cap, n, e);
}

int workload_collective_run(const struct spec *s, struct comm *c, struct store_client *store,
                            struct report_writer *w, struct err *e)
{
    return workload_collective_run_mem(s, c, store, w, NULL, e);
}

int workload_collective_run_mem(const struct spec *s, struct comm *c,
                                struct store_client *store, struct report_writer *w,
                                const struct collective_mem *mem, struct err *e)
{
    int64_t *sizes = malloc((COLLECTIVE_MAX_SIZES + 1) * sizeof *sizes);
    if (!sizes)
        return err_set(e, ERR_NOMEM, NULL, "collective: out of memory");
    size_t n = 0;
    int rc = 0;
    if (strcmp(s->coll.buckets_of, "none") != 0 && s->coll.buckets_of[0])
        rc = collective_model_buckets(s, sizes, COLLECTIVE_MAX_SIZES, &n, e);
    else
        n = spec_collective_sizes(&s->coll, sizes, COLLECTIVE_MAX_SIZES + 1);
    if (rc == 0 && n == 0)
        rc = err_set(e, ERR_INVALID, "min_bytes", "collective: the spec visits no sizes");
    else if (rc == 0 && n > COLLECTIVE_MAX_SIZES)
        rc = err_set(e, ERR_INVALID, "step",
                     "collective: the spec visits more than %d sizes; use a larger step "
                     "or factor",
                     COLLECTIVE_MAX_SIZES);
    int64_t max_bytes = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        max_bytes = sizes[i] > max_bytes ? sizes[i] : max_bytes;
    struct collective_bench b = {0}; /* cleanup of a zeroed bench is a no-op */
    if (rc == 0)
        rc = collective_bench_init_mem(&b, s, c, store, w, max_bytes, (int64_t)n * s->repeats,
                                       mem, e);
    for (int rep = 0; rc == 0 && rep < s->repeats; rep++)
        rc = collective_bench_run_sizes(&b, rep, sizes, n, e);
    collective_bench_cleanup(&b);
    free(sizes);
    return rc;
}
