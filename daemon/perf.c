/* perf: see perf.h. */
#include "daemon/perf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/buckets.h"

/* ---- the fit ------------------------------------------------------------------------- */

/* Weighted least squares of T = a + b x with weights 1 / T^2 (relative residuals); through
 * the origin when origin. */
static void perf_wls(const struct perf_sample *s, size_t n, bool origin, double *a, double *b)
{
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (size_t i = 0; i < n; i++) {
        double w = 1.0 / (s[i].seconds * s[i].seconds);
        sw += w;
        sx += w * s[i].bytes;
        sy += w * s[i].seconds;
        sxx += w * s[i].bytes * s[i].bytes;
        sxy += w * s[i].bytes * s[i].seconds;
    }
    if (origin) {
        *a = 0;
        *b = sxx > 0 ? sxy / sxx : 0;
        return;
    }
    double det = sw * sxx - sx * sx;
    *b = (sw * sxy - sx * sy) / det;
    *a = (sy - *b * sx) / sw;
}

int perf_fit_line(const struct perf_sample *s, size_t n, struct perf_fit *f)
{
    size_t ok = 0;
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (s[i].seconds > 0 && s[i].bytes >= 0) {
            ok++;
            lo = fmin(lo, s[i].bytes);
            hi = fmax(hi, s[i].bytes);
        }
    if (ok != n || n < 2 || !(hi > lo))
        return -1;
    double a, b;
    perf_wls(s, n, false, &a, &b);
    if (a < 0 || b < 0) /* latency below zero is no latency: through the origin */
        perf_wls(s, n, true, &a, &b);
    double sw = 0, swy = 0, ssr = 0, worst = 0;
    for (size_t i = 0; i < n; i++) {
        double w = 1.0 / (s[i].seconds * s[i].seconds);
        sw += w;
        swy += w * s[i].seconds;
    }
    double mean = swy / sw, sst = 0;
    for (size_t i = 0; i < n; i++) {
        double w = 1.0 / (s[i].seconds * s[i].seconds), r = s[i].seconds - (a + b * s[i].bytes);
        ssr += w * r * r;
        sst += w * (s[i].seconds - mean) * (s[i].seconds - mean);
        worst = fmax(worst, fabs(r) / s[i].seconds);
    }
    f->alpha_s = a;
    f->beta_s = b;
    f->gamma_s = NAN;
    f->r2 = sst > 0 ? 1.0 - ssr / sst : 1.0;
    f->worst_resid = worst;
    f->points = (int)n;
    f->min_bytes = (int64_t)lo;
    f->max_bytes = (int64_t)hi;
    return 0;
}

/* ---- algorithm costs ------------------------------------------------------------------ */

static double perf_log2(int n)
{
    return ceil(log2((double)n));
}

void perf_cost_of(const char *op, const char *algorithm, int world, struct perf_cost *c)
{
    memset(c, 0, sizeof *c);
    if (world <= 1)
        return;
    double n = world, share = (n - 1) / n, lg = perf_log2(world);
    bool rd = algorithm && strcmp(algorithm, "rd") == 0;
    bool hd = algorithm && strcmp(algorithm, "hd") == 0;
    bool tree = algorithm && strcmp(algorithm, "tree") == 0;
    bool direct = algorithm && strcmp(algorithm, "direct") == 0;
    if (strcmp(op, "allreduce") == 0) {
        if (rd) /* every step exchanges and reduces the whole buffer */
            *c = (struct perf_cost){lg, lg, lg};
        else if (hd) /* halving then doubling: a ring's bytes in log steps */
            *c = (struct perf_cost){2 * lg, 2 * share, share};
        else /* ring (hier, nccl and unknown read as ring) */
            *c = (struct perf_cost){2 * (n - 1), 2 * share, share};
    } else if (strcmp(op, "reduce_scatter") == 0) {
        *c = (struct perf_cost){hd ? lg : n - 1, share, share};
    } else if (strcmp(op, "all_gather") == 0) {
        *c = (struct perf_cost){direct ? 1 : n - 1, share, 0};
    } else if (strcmp(op, "broadcast") == 0) {
        *c = (struct perf_cost){tree ? lg : n - 1, 1, 0};
    } else { /* point to point */
        *c = (struct perf_cost){1, 1, 0};
    }
}

void perf_link_of(const struct perf_fit *f, struct perf_link *l)
{
    struct perf_cost c;
    perf_cost_of(f->op, f->algorithm, f->world_size, &c);
    l->latency_s = c.lat > 0 ? f->alpha_s / c.lat : 0;
    double gamma = isfinite(f->gamma_s) ? f->gamma_s : 0;
    l->gamma_s_per_byte = c.red > 0 ? gamma / c.red : 0;
    l->s_per_byte = c.bw > 0 ? (f->beta_s - gamma) / c.bw : 0;
}

double perf_link_time(const struct perf_link *l, const char *op, const char *algorithm,
                      int world, double bytes)
{
    struct perf_cost c;
    perf_cost_of(op, algorithm, world, &c);
    return c.lat * l->latency_s + bytes * (c.bw * l->s_per_byte + c.red * l->gamma_s_per_byte);
}

static bool perf_same_place(const struct perf_fit *a, const struct perf_fit *b)
{
    return strcmp(a->backend, b->backend) == 0 && strcmp(a->device, b->device) == 0 &&
           strcmp(a->algorithm, b->algorithm) == 0 && a->world_size == b->world_size &&
           a->nodes == b->nodes && strcmp(a->network_profile, b->network_profile) == 0;
}

void perf_fits_separate(struct perf_fit *fits, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct perf_fit *f = &fits[i];
        if (strcmp(f->op, "allreduce") != 0 && strcmp(f->op, "reduce_scatter") != 0)
            continue;
        for (size_t k = 0; k < n; k++) {
            const struct perf_fit *g = &fits[k];
            if (strcmp(g->op, "all_gather") != 0 || !perf_same_place(f, g))
                continue;
            struct perf_cost cf, cg;
            perf_cost_of(f->op, f->algorithm, f->world_size, &cf);
            perf_cost_of(g->op, g->algorithm, g->world_size, &cg);
            if (cg.bw <= 0)
                continue;
            /* the same bytes cross the link at the all_gather's price; the rest is the
             * arithmetic (noise can make it negative: then the data does not show it) */
            double gamma = f->beta_s - cf.bw * (g->beta_s / cg.bw);
            f->gamma_s = gamma > 0 ? gamma : NAN;
        }
    }
}

/* ---- choosing a fit --------------------------------------------------------------------- */

static bool perf_fit_matches(const struct perf_net *net, const struct perf_fit *f,
                             const char *op)
{
    if (strcmp(f->op, op) != 0 || strcmp(f->backend, net->backend) != 0 ||
        strcmp(f->device, net->device) != 0)
        return false;
    if (strcmp(f->network_profile, net->network_profile ? net->network_profile : "") != 0)
        return false;
    if (net->nodes > 0 && f->nodes != net->nodes)
        return false;
    bool forced = net->algorithm && net->algorithm[0] && strcmp(net->algorithm, "auto") != 0;
    return !forced || strcmp(f->algorithm, net->algorithm) == 0;
}

/* How far bytes lies outside f's measured range, in factors of two (0: inside). */
static double perf_outside(const struct perf_fit *f, double bytes)
{
    double lo = fmax((double)f->min_bytes, 1), hi = fmax((double)f->max_bytes, 1);
    double b = fmax(bytes, 1);
    return b < lo ? log2(lo / b) : b > hi ? log2(b / hi) : 0;
}

static double perf_fit_time(const struct perf_fit *f, const char *op, int world, double bytes)
{
    if (world == f->world_size)
        return f->alpha_s + f->beta_s * bytes;
    struct perf_link l;
    perf_link_of(f, &l);
    return perf_link_time(&l, op, f->algorithm, world, bytes);
}

double perf_net_time(struct perf_net *net, const char *op, int world, double bytes)
{
    if (world <= 1)
        return 0;
    if (net->link)
        return perf_link_time(net->link, op, net->algorithm, world, bytes);
    /* the nearest world size measured, then the fits that cover the size (else the
     * nearest range), then the fastest of those: the backend picks by size alike */
    int best_world = -1;
    for (size_t i = 0; i < net->n; i++) {
        const struct perf_fit *f = &net->fits[i];
        if (!perf_fit_matches(net, f, op))
            continue;
        if (best_world < 0 || abs(f->world_size - world) < abs(best_world - world) ||
            (abs(f->world_size - world) == abs(best_world - world) &&
             f->world_size > best_world))
            best_world = f->world_size;
    }
    if (best_world < 0)
        return -1;
    double best_out = INFINITY;
    for (size_t i = 0; i < net->n; i++)
        if (perf_fit_matches(net, &net->fits[i], op) && net->fits[i].world_size == best_world)
            best_out = fmin(best_out, perf_outside(&net->fits[i], bytes));
    double t = -1;
    size_t pick = net->n;
    for (size_t i = 0; i < net->n; i++) {
        const struct perf_fit *f = &net->fits[i];
        if (!perf_fit_matches(net, f, op) || f->world_size != best_world ||
            perf_outside(f, bytes) > best_out)
            continue;
        double ti = perf_fit_time(f, op, world, bytes);
        if (t < 0 || ti < t) {
            t = ti;
            pick = i;
        }
    }
    if (pick < net->n && net->used)
        net->used[pick] = true;
    return t;
}

/* ---- the step ------------------------------------------------------------------------- */

int perf_strategy_parse(const char *s)
{
    int i = vocab_find(VOCAB_STRATEGY, s);
    const struct vocab_strategy *row = vocab_strategy(i);
    /* a single-process strategy's replicas exchange inside one process: not modelled */
    return row && !row->single_process ? i : -1;
}

/* The simulation's running state: one channel, the union of flights. */
struct perf_chan {
    double free_at;    /* when the channel is next free */
    double union_end;  /* end of the flight union so far */
    double comm, busy; /* union length, sum of own times */
    int ops;
};

/* An operation launched at `launch` taking `t`: queued behind the previous one. */
static void perf_chan_run(struct perf_chan *c, double launch, double t)
{
    double start = fmax(launch, c->free_at), end = start + t;
    double from = fmax(launch, c->union_end); /* the part of [launch, end) not counted yet */
    if (end > from)
        c->comm += end - from;
    c->union_end = fmax(c->union_end, end);
    c->free_at = end;
    c->busy += t;
    c->ops++;
}

/* The buckets a strategy exchanges (tensor ranges in bounds); -1 on no memory. */
static int perf_buckets(const struct perf_base *b, const struct perf_setup *s, int *bounds)
{
    enum vocab_bucketing how = vocab_strategy((int)s->strategy)->buckets;
    int64_t cap = how == VOCAB_BUCKETS_FUSION ? s->fusion_bytes : s->bucket_bytes;
    int64_t first = how == VOCAB_BUCKETS_SMALL_FIRST ? ((int64_t)1 << 20) : cap;
    if (how == VOCAB_BUCKETS_PER_TENSOR)
        first = cap = 1; /* every tensor alone */
    if (how != VOCAB_BUCKETS_FUSION)
        return buckets_by_size(b->bytes, b->nt, first, cap, bounds);
    return buckets_by_cycle(b->bytes, b->ready_ns, b->nt, (int64_t)(s->cycle_ms * 1e6),
                            s->fusion_bytes, bounds);
}

/* Runs op over every bucket, each launched at its readiness (overlapped) or at `after`.
 * Returns -1 when no fit gives the op's time. */
static int perf_exchange(const struct perf_base *b, const struct perf_setup *s,
                         struct perf_net *net, const int *bounds, int nb, const char *op,
                         bool overlapped, double after, struct perf_chan *c)
{
    for (int k = 0; k < nb; k++) {
        double bytes = 0;
        int64_t ready = 0;
        for (int t = bounds[k]; t < bounds[k + 1]; t++) {
            bytes += (double)b->bytes[t];
            ready = b->ready_ns[t] > ready ? b->ready_ns[t] : ready;
        }
        double t = perf_net_time(net, op, s->world, bytes * s->wire);
        if (t < 0)
            return -1;
        double launch = overlapped ? (double)ready * 1e-9 * s->compute_scale : after;
        perf_chan_run(c, fmax(launch, 0), t);
    }
    return 0;
}

double perf_expected_wait(const double *x, size_t m, int n)
{
    if (m == 0 || n <= 1)
        return 0;
    /* far outliers (beyond Tukey's outer fence, q3 + 3 IQR: a page-fault storm, a
     * preemption) happen once, not every step: left out of the distribution */
    double q1 = x[(m - 1) / 4], q3 = x[3 * (m - 1) / 4], fence = q3 + 3 * (q3 - q1);
    while (m > 1 && x[m - 1] > fence)
        m--;
    double mean = 0, emax = 0;
    for (size_t i = 0; i < m; i++) {
        mean += x[i];
        /* P(max of n is the i-th smallest) = (i/m)^n - ((i-1)/m)^n */
        emax += x[i] * (pow((double)(i + 1) / (double)m, n) - pow((double)i / (double)m, n));
    }
    return fmax(0, emax - mean / (double)m);
}

int perf_simulate(const struct perf_base *b, const struct perf_setup *s, struct perf_net *net,
                  struct perf_step *out)
{
    memset(out, 0, sizeof *out);
    if (b->nt <= 0 || !b->bytes || !b->ready_ns || s->world < 1 ||
        !vocab_strategy((int)s->strategy))
        return -1;
    int *bounds = malloc(((size_t)b->nt + 1) * sizeof *bounds);
    if (!bounds)
        return -1;
    int nb = perf_buckets(b, s, bounds);
    double scale = s->compute_scale >= 1 ? s->compute_scale : 1;
    double window = (double)b->backward_ns * 1e-9 * scale;
    const struct vocab_strategy *row = vocab_strategy((int)s->strategy);
    bool zero = row->shards_optimizer;
    bool overlapped = !s->no_spare_core && row->overlaps_backward;
    struct perf_chan c = {0};
    const char *op = zero ? "reduce_scatter" : "allreduce";
    int rc = nb < 0 ? -1 : 0;
    if (rc == 0 && s->world > 1)
        rc = perf_exchange(b, s, net, bounds, nb, op, overlapped, window, &c);
    double exposed = fmax(0, c.free_at - window); /* what backward did not cover */
    double comm = c.comm, busy = c.busy;
    int ops = c.ops;
    if (rc == 0 && zero && s->world > 1) { /* the updated shards, gathered after the update */
        struct perf_chan g = {0};
        rc = perf_exchange(b, s, net, bounds, nb, "all_gather", false, 0, &g);
        exposed += g.free_at;
        comm += g.comm;
        busy += g.busy;
        ops += g.ops;
    }
    free(bounds);
    if (rc < 0)
        return -1;
    out->data_s = b->data_s * scale;
    out->forward_s = b->forward_s * scale;
    out->backward_s = b->backward_s * scale;
    out->optimizer_s = b->optimizer_s * scale / (zero ? s->world : 1);
    out->sync_s = perf_expected_wait(b->step_s, b->nsteps, s->world);
    out->exposed_s = exposed + b->local_s + out->sync_s;
    out->comm_s = comm + b->local_s + out->sync_s;
    out->busy_s = busy;
    out->window_s = overlapped ? window : 0;
    out->ops = ops;
    out->overlap = s->world > 1 && out->comm_s > 0 ? fmax(0, 1 - out->exposed_s / out->comm_s)
                                                   : NAN;
    out->step_s = out->data_s + out->forward_s + out->backward_s + out->exposed_s +
                  out->optimizer_s;
    return 0;
}
