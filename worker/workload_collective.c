/* workload_collective: see workload_collective.h. Per size: inputs once, warmup, timed
 * iterations back to back (no barrier between them, as nccl-tests times), times to the
 * store, optional check, one comm barrier, then rank 0 combines and reports. */
#include "workload_collective.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"

/* ---- statistics ------------------------------------------------------------------- */

static int collective_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double collective_median_sorted(const double *sorted, size_t n)
{
    if (n == 0)
        return 0;
    return n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

double collective_percentile_sorted(const double *sorted, size_t n, double pct)
{
    if (n == 0)
        return 0;
    double r = ceil(pct / 100.0 * (double)n);
    size_t rank = r < 1 ? 1 : (r > (double)n ? n : (size_t)r);
    return sorted[rank - 1];
}

void collective_stats_compute(double *times_s, size_t n, struct collective_stats *out)
{
    memset(out, 0, sizeof *out);
    if (n == 0)
        return;
    qsort(times_s, n, sizeof *times_s, collective_cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += times_s[i];
    out->min_us = times_s[0] * 1e6;
    out->max_us = times_s[n - 1] * 1e6;
    out->median_us = collective_median_sorted(times_s, n) * 1e6;
    out->p95_us = collective_percentile_sorted(times_s, n, 95) * 1e6;
    out->mean_us = sum / (double)n * 1e6;
}

void collective_max_into(double *acc, const double *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] > acc[i])
            acc[i] = v[i];
}

double collective_busbw_factor(const char *op, int world_size)
{
    double n = world_size;
    if (world_size < 1)
        return 0;
    if (strcmp(op, "allreduce") == 0)
        return 2.0 * (n - 1) / n;
    if (strcmp(op, "reduce_scatter") == 0 || strcmp(op, "all_gather") == 0)
        return (n - 1) / n;
    if (strcmp(op, "broadcast") == 0 || strcmp(op, "reduce") == 0)
        return 1.0;
    return 0;
}

int collective_op_parse(const char *s, enum collective_op *out)
{
    if (strcmp(s, "allreduce") == 0) {
        *out = COLLECTIVE_ALLREDUCE;
        return 0;
    }
    return -1;
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

static unsigned collective_index_residue(int64_t seed, size_t i)
{
    return (unsigned)(collective_mix((uint64_t)seed * 0x100000001b3ull ^ (uint64_t)i) % 17);
}

static unsigned collective_rank_residue(int64_t seed, int rank)
{
    return (unsigned)(collective_mix(~(uint64_t)seed ^ ((uint64_t)rank << 40)) % 17);
}

/* input = ((index residue + rank residue) mod 17) - 8: the sum over ranks depends on the
 * index only through its residue, hence the 17-entry table of expected values. */
int collective_input(int64_t seed, int rank, size_t i)
{
    return (int)((collective_index_residue(seed, i) + collective_rank_residue(seed, rank)) %
                 17) - 8;
}

void collective_expect_init(struct collective_expect *x, int64_t seed, int world_size)
{
    int per_residue[17] = {0};
    for (int r = 0; r < world_size; r++)
        per_residue[collective_rank_residue(seed, r)]++;
    x->seed = seed;
    for (int h = 0; h < 17; h++) {
        int sum = 0;
        for (int v = 0; v < 17; v++)
            sum += per_residue[v] * (((h + v) % 17) - 8);
        x->by_residue[h] = (float)sum;
    }
}

float collective_expected(const struct collective_expect *x, size_t i)
{
    return x->by_residue[collective_index_residue(x->seed, i)];
}

int collective_fill_inputs(void *buf, enum comm_dtype dtype, size_t count, int64_t seed,
                           int rank, struct err *e)
{
    if (dtype != COMM_FLOAT32)
        return err_set(e, ERR_INVALID, "dtype", "collective: dtype %s not supported yet",
                       comm_dtype_name(dtype));
    float *f = buf;
    unsigned rr = collective_rank_residue(seed, rank);
    for (size_t i = 0; i < count; i++)
        f[i] = (float)((int)((collective_index_residue(seed, i) + rr) % 17) - 8);
    return 0;
}

int64_t collective_count_wrong(const void *buf, enum comm_dtype dtype, size_t count,
                               const struct collective_expect *x)
{
    if (dtype != COMM_FLOAT32)
        return (int64_t)count;
    const float *f = buf;
    int64_t wrong = 0;
    for (size_t i = 0; i < count; i++)
        wrong += f[i] != collective_expected(x, i);
    return wrong;
}

/* ---- benchmark --------------------------------------------------------------------- */

void collective_bench_cleanup(struct collective_bench *b)
{
    free(b->send);
    free(b->recv);
    free(b->times);
    free(b->slowest);
    free(b->wire);
    memset(b, 0, sizeof *b);
}

static int collective_bench_parse(struct collective_bench *b, const struct spec_collective *cfg,
                                  struct err *e)
{
    if (collective_op_parse(cfg->op, &b->op) < 0)
        return err_set(e, ERR_INVALID, "op", "collective: op '%s' not supported yet", cfg->op);
    if (comm_dtype_parse(cfg->dtype, &b->dtype) < 0)
        return err_set(e, ERR_INVALID, "dtype", "collective: unknown dtype '%s'", cfg->dtype);
    if (comm_redop_parse(cfg->redop, &b->redop) < 0)
        return err_set(e, ERR_INVALID, "redop", "collective: unknown redop '%s'", cfg->redop);
    if (cfg->iters < 1 || cfg->warmup < 0)
        return err_set(e, ERR_INVALID, "iters", "collective: iters must be >= 1, warmup >= 0");
    b->esize = comm_dtype_size(b->dtype);
    return 0;
}

int collective_bench_init(struct collective_bench *b, const struct spec *s, struct comm *c,
                          struct store_client *store, struct report_writer *w,
                          int64_t max_bytes, int64_t points_total, struct err *e)
{
    memset(b, 0, sizeof *b);
    b->cfg = &s->coll;
    b->comm = c;
    b->store = store;
    b->w = w;
    b->seed = s->seed;
    b->points_total = points_total;
    if (collective_bench_parse(b, b->cfg, e) < 0)
        return -1;
    if (max_bytes < 1 || (uint64_t)max_bytes > SIZE_MAX / 2)
        return err_set(e, ERR_INVALID, "max_bytes", "collective: max_bytes %lld out of range",
                       (long long)max_bytes);
    size_t count = (size_t)max_bytes / b->esize;
    b->cap_bytes = (count ? count : 1) * b->esize;
    size_t iters = (size_t)b->cfg->iters;
    b->recv = malloc(b->cap_bytes);
    b->send = b->cfg->inplace ? NULL : malloc(b->cap_bytes);
    b->times = calloc(iters, sizeof *b->times);
    b->slowest = calloc(iters, sizeof *b->slowest);
    b->wire = malloc(iters * 8);
    if (!b->recv || (!b->cfg->inplace && !b->send) || !b->times || !b->slowest || !b->wire) {
        size_t cap = b->cap_bytes;
        collective_bench_cleanup(b);
        return err_set(e, ERR_NOMEM, "max_bytes",
                       "collective: cannot allocate buffers for %zu-byte messages", cap);
    }
    return 0;
}

static int collective_bench_op(struct collective_bench *b, size_t count, struct err *e)
{
    const void *in = b->cfg->inplace ? b->recv : b->send;
    switch (b->op) {
    case COLLECTIVE_ALLREDUCE:
        return comm_allreduce(b->comm, in, b->recv, count, b->dtype, b->redop, e);
    }
    return err_set(e, ERR_INTERNAL, NULL, "collective: op %d", (int)b->op);
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

/* Warmup and timed iterations; b->times gets each timed iteration's seconds. */
static int collective_bench_time(struct collective_bench *b, size_t count, struct err *e)
{
    void *in = b->cfg->inplace ? (void *)b->recv : (void *)b->send;
    if (collective_fill_inputs(in, b->dtype, count, b->seed, b->comm->rank, e) < 0)
        return -1;
    for (int i = 0; i < b->cfg->warmup; i++)
        if (collective_bench_op(b, count, e) < 0)
            return -1;
    for (int i = 0; i < b->cfg->iters; i++) {
        int64_t t0 = clock_mono_ns();
        if (collective_bench_op(b, count, e) < 0)
            return -1;
        b->times[i] = (double)(clock_mono_ns() - t0) * 1e-9;
    }
    return 0;
}

static int collective_bench_check(struct collective_bench *b, size_t count, int64_t *wrong,
                                  struct err *e)
{
    *wrong = 0;
    if (!b->cfg->check)
        return 0;
    void *in = b->cfg->inplace ? (void *)b->recv : (void *)b->send;
    if (collective_fill_inputs(in, b->dtype, count, b->seed, b->comm->rank, e) < 0 ||
        collective_bench_op(b, count, e) < 0)
        return -1;
    struct collective_expect x;
    collective_expect_init(&x, b->seed, b->comm->world_size);
    *wrong = collective_count_wrong(b->recv, b->dtype, count, &x);
    return 0;
}

static int collective_publish(struct collective_bench *b, int repeat, size_t idx,
                              int64_t wrong, struct err *e)
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

static int collective_report(struct collective_bench *b, int repeat, size_t count,
                             int64_t wrong, struct err *e)
{
    struct report_collective rc;
    memset(&rc, 0, sizeof rc);
    struct collective_stats st;
    collective_stats_compute(b->slowest, (size_t)b->cfg->iters, &st);
    rc.repeat = repeat;
    snprintf(rc.op, sizeof rc.op, "%s", b->cfg->op);
    snprintf(rc.dtype, sizeof rc.dtype, "%s", b->cfg->dtype);
    snprintf(rc.redop, sizeof rc.redop, "%s", b->cfg->redop);
    snprintf(rc.algorithm, sizeof rc.algorithm, "%s", b->comm->last_algorithm);
    rc.inplace = b->cfg->inplace;
    rc.count = (int64_t)count;
    rc.bytes = (int64_t)(count * b->esize);
    rc.iters = b->cfg->iters;
    rc.time_us_min = st.min_us;
    rc.time_us_median = st.median_us;
    rc.time_us_p95 = st.p95_us;
    rc.time_us_mean = st.mean_us;
    rc.time_us_max = st.max_us;
    rc.algbw_gbs = st.median_us > 0 ? (double)rc.bytes / (st.median_us * 1e-6) / 1e9 : 0;
    rc.busbw_gbs = rc.algbw_gbs * collective_busbw_factor(b->cfg->op, b->comm->world_size);
    rc.wrong = wrong;
    if (report_emit_collective(b->w, &rc, e) < 0 ||
        report_emit_progress(b->w, "collective", b->points_done, b->points_total, e) < 0)
        return err_prefix(e, "collective: reporting");
    return 0;
}

static int collective_bench_point(struct collective_bench *b, int repeat, size_t idx,
                                  int64_t bytes, struct err *e)
{
    size_t count = bytes > 0 ? (size_t)bytes / b->esize : 0;
    if (count == 0)
        count = 1;
    if (count * b->esize > b->cap_bytes)
        return err_set(e, ERR_INVALID, "max_bytes",
                       "collective: size %lld is over the %zu bytes allocated", (long long)bytes,
                       b->cap_bytes);
    int64_t wrong;
    if (collective_bench_time(b, count, e) < 0 || collective_bench_check(b, count, &wrong, e) < 0 ||
        collective_publish(b, repeat, idx, wrong, e) < 0)
        return -1;
    /* Every rank stored its times before entering the barrier, so rank 0's reads below
     * find them at once; a rank that died fails the barrier instead. */
    if (comm_barrier(b->comm, e) < 0)
        return -1;
    b->points_done++;
    if (b->comm->rank != 0)
        return 0;
    memcpy(b->slowest, b->times, (size_t)b->cfg->iters * sizeof *b->slowest);
    for (int r = 1; r < b->comm->world_size; r++)
        if (collective_gather_rank(b, repeat, idx, r, &wrong, e) < 0)
            return -1;
    return collective_report(b, repeat, count, wrong, e);
}

int collective_bench_run_sizes(struct collective_bench *b, int repeat, const int64_t *sizes,
                               size_t n, struct err *e)
{
    for (size_t i = 0; i < n; i++)
        if (collective_bench_point(b, repeat, i, sizes[i], e) < 0)
            return -1;
    return 0;
}

int workload_collective_run(const struct spec *s, struct comm *c, struct store_client *store,
                            struct report_writer *w, struct err *e)
{
    int64_t *sizes = malloc((COLLECTIVE_MAX_SIZES + 1) * sizeof *sizes);
    if (!sizes)
        return err_set(e, ERR_NOMEM, NULL, "collective: out of memory");
    size_t n = spec_collective_sizes(&s->coll, sizes, COLLECTIVE_MAX_SIZES + 1);
    int rc = 0;
    if (n == 0)
        rc = err_set(e, ERR_INVALID, "min_bytes", "collective: the spec visits no sizes");
    else if (n > COLLECTIVE_MAX_SIZES)
        rc = err_set(e, ERR_INVALID, "step",
                     "collective: the spec visits more than %d sizes; use a larger step "
                     "or factor", COLLECTIVE_MAX_SIZES);
    int64_t max_bytes = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        max_bytes = sizes[i] > max_bytes ? sizes[i] : max_bytes;
    struct collective_bench b = {0}; /* cleanup of a zeroed bench is a no-op */
    if (rc == 0)
        rc = collective_bench_init(&b, s, c, store, w, max_bytes,
                                   (int64_t)n * s->repeats, e);
    for (int rep = 0; rc == 0 && rep < s->repeats; rep++)
        rc = collective_bench_run_sizes(&b, rep, sizes, n, e);
    collective_bench_cleanup(&b);
    free(sizes);
    return rc;
}
