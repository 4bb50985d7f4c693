/* perf: see perf.h. */
#include "daemon/perf.h"

#include <math.h>
#include <stdio.h>
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

/* The fit net picks for op at world ranks over bytes: the nearest world size measured,
 * then the fits that cover the size (else the nearest range), then the fastest of those
 * (the backend picks by size alike). net->n when none matches; marks it used. */
static size_t perf_net_pick(struct perf_net *net, const char *op, int world, double bytes)
{
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
        return net->n;
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
    return pick;
}

int perf_net_link(struct perf_net *net, const char *op, int world, double bytes,
                  struct perf_link *l)
{
    size_t pick = perf_net_pick(net, op, world, bytes);
    if (pick >= net->n)
        return -1;
    perf_link_of(&net->fits[pick], l);
    return 0;
}

double perf_hier_time(const struct perf_link *intra, int per_node, double inter_s, double bytes)
{
    double k1 = per_node > 1 ? per_node - 1 : 0;
    double reduce = k1 > 0 ? k1 * intra->latency_s +
                                 bytes * (intra->s_per_byte + intra->gamma_s_per_byte)
                           : 0; /* a pipelined chain: each byte once over each link */
    double bcast = perf_link_time(intra, "broadcast", "ring", per_node, bytes);
    return reduce + fmax(inter_s, 0) + bcast;
}

double perf_slowest_time(double inter_s, double intra_s)
{
    return inter_s < 0 ? intra_s : intra_s < 0 ? inter_s : fmax(inter_s, intra_s);
}

/* Whether net has a fit of op measured at world ranks (its own nodes and profile). */
static bool perf_net_measured(const struct perf_net *net, const char *op, int world)
{
    for (size_t i = 0; i < net->n; i++)
        if (perf_fit_matches(net, &net->fits[i], op) && net->fits[i].world_size == world)
            return true;
    return false;
}

/* The time of op across nodes (net->intra set, net->nodes > 1): as measured where the
 * link's fits have this very placement; else hierarchical for an allreduce the backend
 * runs so, else the flat algorithm at the pace of the slower of the two links. */
static double perf_across_time(struct perf_net *net, const char *op, int world, double bytes)
{
    struct perf_net inter = *net, intra = *net->intra;
    inter.intra = NULL;
    intra.intra = NULL;
    if (perf_net_measured(&inter, op, world))
        return perf_net_time(&inter, op, world, bytes);
    if (net->algorithm && strcmp(net->algorithm, "hier") == 0)
        inter.algorithm = intra.algorithm = "auto"; /* its parts pick by size */
    int nodes = net->nodes < world ? net->nodes : world;
    if (strcmp(op, "allreduce") == 0 && net->per_node > 1 && net->hier_from >= 0 &&
        bytes >= (double)net->hier_from) {
        struct perf_link in;
        inter.algorithm = intra.algorithm = "auto"; /* each part picks by size */
        double t_out = perf_net_time(&inter, op, nodes, bytes);
        if (t_out < 0 || perf_net_link(&intra, op, net->per_node, bytes, &in) < 0)
            return -1;
        return perf_hier_time(&in, net->per_node, t_out, bytes);
    }
    double t_out = perf_net_time(&inter, op, world, bytes);
    if (t_out < 0)
        return -1;
    return perf_slowest_time(t_out, perf_net_time(&intra, op, world, bytes));
}

double perf_net_time(struct perf_net *net, const char *op, int world, double bytes)
{
    if (world <= 1)
        return 0;
    if (net->link)
        return perf_link_time(net->link, op, net->algorithm, world, bytes);
    if (net->intra && net->nodes > 1)
        return perf_across_time(net, op, world, bytes);
    size_t pick = perf_net_pick(net, op, world, bytes);
    return pick < net->n ? perf_fit_time(&net->fits[pick], op, world, bytes) : -1;
}

/* ---- the range a prediction covers --------------------------------------------------- */

void perf_range_of(const struct perf_fit *fits, size_t n, const bool *used, int base_world,
                   struct perf_range *r)
{
    memset(r, 0, sizeof *r);
    r->base_world = base_world;
    for (size_t i = 0; i < n; i++) {
        if (used && !used[i])
            continue;
        const struct perf_fit *f = &fits[i];
        int nodes = f->nodes > 0 ? f->nodes : 1;
        if (r->world_hi == 0) {
            r->world_lo = r->world_hi = f->world_size;
            r->nodes_lo = r->nodes_hi = nodes;
            continue;
        }
        r->world_lo = f->world_size < r->world_lo ? f->world_size : r->world_lo;
        r->world_hi = f->world_size > r->world_hi ? f->world_size : r->world_hi;
        r->nodes_lo = nodes < r->nodes_lo ? nodes : r->nodes_lo;
        r->nodes_hi = nodes > r->nodes_hi ? nodes : r->nodes_hi;
    }
}

bool perf_range_extrapolates(const struct perf_range *r, int world, int nodes)
{
    if (r->world_hi == 0 || world <= 1) /* a described link; one rank exchanges nothing */
        return false;
    bool off_nodes = nodes > 0 && (nodes < r->nodes_lo || nodes > r->nodes_hi);
    return world < r->world_lo || world > r->world_hi || off_nodes;
}

/* "2-4" or "2" into out. */
static void perf_span_text(int lo, int hi, char *out, size_t n)
{
    if (lo == hi)
        snprintf(out, n, "%d", lo);
    else
        snprintf(out, n, "%d-%d", lo, hi);
}

void perf_range_text(const struct perf_range *r, char *out, size_t n)
{
    char w[32], nd[32];
    perf_span_text(r->world_lo, r->world_hi, w, sizeof w);
    perf_span_text(r->nodes_lo, r->nodes_hi, nd, sizeof nd);
    if (r->world_hi == 0)
        snprintf(out, n, "no fit (a described link); base %d rank%s", r->base_world,
                 r->base_world == 1 ? "" : "s");
    else
        snprintf(out, n, "fits world %s, %s node%s; base %d rank%s", w, nd,
                 r->nodes_hi == 1 ? "" : "s", r->base_world, r->base_world == 1 ? "" : "s");
}

void perf_fits_restrict(struct perf_fit *fits, size_t *n, int max_world)
{
    if (max_world <= 0)
        return;
    size_t k = 0;
    for (size_t i = 0; i < *n; i++)
        if (fits[i].world_size <= max_world)
            fits[k++] = fits[i];
    *n = k;
}

/* ---- co-location ------------------------------------------------------------------------ */

/* The slowdowns at k (pts[0].k <= k <= the last k), linear between the measured k. */
static void perf_calib_interp(const struct perf_calib *c, double k, double *slow)
{
    size_t i = 0;
    while (i + 1 < c->n && c->pts[i + 1].k <= k)
        i++;
    const struct perf_calib_point *a = &c->pts[i], *b = i + 1 < c->n ? &c->pts[i + 1] : a;
    double f = b->k > a->k ? (k - a->k) / (double)(b->k - a->k) : 0;
    f = fmin(fmax(f, 0), 1);
    for (int p = 0; p < PERF_NPHASES; p++)
        slow[p] = a->slow[p] + f * (b->slow[p] - a->slow[p]);
}

int perf_contention_at(const struct perf_calib *c, int k, struct perf_contention *out)
{
    memset(out, 0, sizeof *out);
    if (!c || c->n == 0 || k < 1)
        return -1;
    int kmax = c->pts[c->n - 1].k;
    double cores = c->cores > 0 ? c->cores : kmax;
    if (k <= kmax || k <= cores) {
        /* measured (or no more ranks than cores past the last k: the last k's) */
        perf_calib_interp(c, fmin(k, kmax), out->slow);
    } else {
        /* time-slicing: k ranks on `cores` CPUs take turns, each turn ending in a context
         * switch every quantum */
        double base[PERF_NPHASES];
        perf_calib_interp(c, fmin(cores, kmax), base);
        double sw = c->quantum_s > 0 ? c->switch_s / c->quantum_s : 0;
        for (int p = 0; p < PERF_NPHASES; p++)
            out->slow[p] = (double)k / cores * fmax(base[p], 1) * (1 + sw);
    }
    /* a ring's message needs its peer running: descheduled with probability 1 - cores/k,
     * it runs again after half a quantum on average */
    if (k > cores)
        out->msg_wait_s = (1 - cores / (double)k) * c->quantum_s / 2;
    for (int p = 0; p < PERF_NPHASES; p++)
        out->slow[p] = fmax(out->slow[p], 1);
    return 0;
}

double perf_busy_weight(int n, double u, int j)
{
    if (j < 0 || j > n)
        return 0;
    double w = 1; /* C(n, j) u^j (1 - u)^(n - j), as a product: n stays small */
    for (int i = 0; i < j; i++)
        w *= (double)(n - i) / (i + 1) * u;
    for (int i = 0; i < n - j; i++)
        w *= 1 - u;
    return w;
}

int perf_contention_busy(const struct perf_calib *c, int k, double busy,
                         struct perf_contention *out)
{
    if (perf_contention_at(c, k, out) < 0)
        return -1;
    if (busy >= 1)
        return 0;
    double u = busy > 0 ? busy : 0, slow[PERF_NPHASES] = {0};
    for (int j = 0; j < k; j++) {
        struct perf_contention at;
        double w = perf_busy_weight(k - 1, u, j);
        perf_contention_at(c, j + 1, &at);
        for (int p = 0; p < PERF_NPHASES; p++)
            slow[p] += w * at.slow[p];
    }
    memcpy(out->slow, slow, sizeof slow);
    return 0;
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

double perf_phase_scale(const struct perf_setup *s, enum perf_phase p)
{
    if (s->has_contention && s->contention.slow[p] > 0)
        return s->contention.slow[p];
    return s->compute_scale >= 1 ? s->compute_scale : 1;
}

static double perf_bwd_scale(const struct perf_setup *s)
{
    return perf_phase_scale(s, PERF_BACKWARD);
}

/* Runs op over every bucket, each launched at its readiness (overlapped) or at `after`.
 * Returns -1 when no fit gives the op's time. */
int64_t perf_horovod_launch_ns(int64_t ready_ns, int64_t cycle_ns)
{
    return cycle_ns > 0 ? (ready_ns / cycle_ns + 1) * cycle_ns : ready_ns;
}

static int perf_exchange_cycled(const struct perf_base *b, const struct perf_setup *s,
                                struct perf_net *net, const int *bounds, int nb, const char *op,
                                int64_t cycle_ns, double after, struct perf_chan *c)
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
        if (k == 0 && s->has_contention && s->contention.msg_wait_s > 0) {
            /* oversubscribed: each message of the first operation may find its peer
             * descheduled; after it the ranks are in step (a later message's peer is
             * waiting for it, not computing) */
            struct perf_cost cost;
            perf_cost_of(op, net->algorithm, s->world, &cost);
            t += cost.lat * s->contention.msg_wait_s;
        }
        double launch = cycle_ns >= 0
                            ? (double)perf_horovod_launch_ns(
                                  (int64_t)((double)ready * perf_bwd_scale(s)), cycle_ns) *
                                  1e-9
                            : after;
        perf_chan_run(c, fmax(launch, 0), t);
    }
    return 0;
}

/* perf_exchange_cycled launched at readiness (overlapped) or at `after`. */
static int perf_exchange(const struct perf_base *b, const struct perf_setup *s,
                         struct perf_net *net, const int *bounds, int nb, const char *op,
                         bool overlapped, double after, struct perf_chan *c)
{
    return perf_exchange_cycled(b, s, net, bounds, nb, op, overlapped ? 0 : -1, after, c);
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

/* What one step's exchanges did, before the terms every step shares are added. */
struct perf_flights {
    double exposed, comm, busy; /* the step waited for; union of flights; channel busy */
    double window;              /* the backward they could hide behind (0: none) */
    int ops;
    int opt_share; /* the optimizer's work is divided by this (ZeRO: the world) */
};

/* Adds a channel's operations, all exposed (they ran after compute, nothing beside them). */
static void perf_flights_add(struct perf_flights *f, const struct perf_chan *c)
{
    f->exposed += c->free_at;
    f->comm += c->comm;
    f->busy += c->busy;
    f->ops += c->ops;
}

/* The step from the base's phases and f: compute scaled, the slowest rank's wait added. */
static void perf_step_fill(const struct perf_base *b, const struct perf_setup *s,
                           const struct perf_flights *f, struct perf_step *out)
{
    double scale = s->compute_scale >= 1 ? s->compute_scale : 1;
    out->data_s = b->data_s * scale;
    out->forward_s = b->forward_s * perf_phase_scale(s, PERF_FORWARD);
    out->backward_s = b->backward_s * perf_bwd_scale(s);
    double opt = b->optimizer_s * perf_phase_scale(s, PERF_OPTIMIZER);
    out->optimizer_s = opt / (f->opt_share > 1 ? f->opt_share : 1);
    double compute = b->forward_s + b->backward_s + b->optimizer_s;
    out->contention = compute > 0 ? (out->forward_s + out->backward_s + opt) / compute
                                  : perf_bwd_scale(s);
    out->sync_s = perf_expected_wait(b->step_s, b->nsteps, s->world);
    out->exposed_s = f->exposed + b->local_s + out->sync_s;
    out->comm_s = f->comm + b->local_s + out->sync_s;
    out->busy_s = f->busy;
    out->window_s = f->window;
    out->ops = f->ops;
    out->overlap = s->world > 1 && out->comm_s > 0 ? fmax(0, 1 - out->exposed_s / out->comm_s)
                                                   : NAN;
    out->step_s = out->data_s + out->forward_s + out->backward_s + out->exposed_s +
                  out->optimizer_s;
}

/* ---- the framework engines' exchanges (docs/model.md "The framework engines") ---------- */

#define PERF_TORCH_FIRST_BUCKET ((int64_t)1 << 20) /* torch's _DEFAULT_FIRST_BUCKET_BYTES */

/* The buckets the engine's own framework makes of the tensors (in readiness order). */
static int perf_engine_buckets(const struct perf_base *b, const struct perf_setup *s,
                               int *bounds)
{
    switch (s->exchange) {
    case PERF_EXCHANGE_HOROVOD:
        return buckets_by_cycle(b->bytes, b->ready_ns, b->nt, (int64_t)(s->cycle_ms * 1e6),
                                s->fusion_bytes, bounds);
    case PERF_EXCHANGE_DEEPSPEED:
        return buckets_by_limit(b->bytes, b->nt, s->bucket_bytes, bounds);
    default: /* torch's Reducer, rebuilt in readiness order after the first step */
        return buckets_by_size(b->bytes, b->nt, PERF_TORCH_FIRST_BUCKET, s->bucket_bytes,
                               bounds);
    }
}

/* ZeroRedundancyOptimizer's _sync_params: every parameter broadcast from the rank that
 * owns it, after the step (bounds reused: one tensor each). */
static int perf_torch_zero1_params(const struct perf_base *b, const struct perf_setup *s,
                                   struct perf_net *net, int *bounds, struct perf_flights *f)
{
    for (int t = 0; t <= b->nt; t++)
        bounds[t] = t;
    struct perf_chan g = {0};
    struct perf_setup full = *s;
    full.wire = 1; /* the parameters go whole, whatever the gradients' compression */
    if (perf_exchange(b, &full, net, bounds, b->nt, "broadcast", false, 0, &g) < 0)
        return -1;
    perf_flights_add(f, &g);
    return 0;
}

/* DeepSpeed's all_gather_dp_groups: the updated partitions gathered in
 * max(1, params // allgather_bucket_size) shards, each one all_gather of its share. */
static int perf_deepspeed_gather(const struct perf_base *b, const struct perf_setup *s,
                                 struct perf_net *net, struct perf_flights *f)
{
    double total = 0;
    for (int t = 0; t < b->nt; t++)
        total += (double)b->bytes[t];
    int64_t cap = s->bucket_bytes > 0 ? s->bucket_bytes : 1;
    int64_t shards = (int64_t)total / cap > 1 ? (int64_t)total / cap : 1;
    struct perf_chan g = {0};
    for (int64_t k = 0; k < shards; k++) {
        double t = perf_net_time(net, "all_gather", s->world, total / (double)shards);
        if (t < 0)
            return -1;
        perf_chan_run(&g, 0, t);
    }
    perf_flights_add(f, &g);
    return 0;
}

/* How a step exchanges: its buckets' op, launched at readiness (cycle 0), at its cycle's end
 * (Horovod's) or after backward (cycle -1), and the optimizer's share. */
struct perf_plan {
    const char *op;
    int64_t cycle_ns;
    int opt_share;
};

static void perf_plan_of(const struct perf_setup *s, struct perf_plan *p)
{
    const struct vocab_strategy *row = vocab_strategy((int)s->strategy);
    bool zero = s->exchange == PERF_EXCHANGE_WORKER
                    ? row->shards_optimizer
                    : s->exchange == PERF_EXCHANGE_TORCH_ZERO1 ||
                          s->exchange == PERF_EXCHANGE_DEEPSPEED;
    bool overlapped = !s->no_spare_core && (s->exchange == PERF_EXCHANGE_WORKER
                                                ? row->overlaps_backward
                                                : s->exchange != PERF_EXCHANGE_DEEPSPEED);
    p->op = zero && s->exchange == PERF_EXCHANGE_WORKER ? "reduce_scatter" : "allreduce";
    p->cycle_ns = !overlapped                            ? -1
                  : s->exchange == PERF_EXCHANGE_HOROVOD ? (int64_t)(s->cycle_ms * 1e6)
                                                         : 0;
    p->opt_share = zero ? s->world : 1;
}

/* What runs after the step's update: the worker's ZeRO all-gathers of its shards, torch's
 * ZeroRedundancyOptimizer's broadcasts, DeepSpeed's gathered partitions. */
static int perf_after_step(const struct perf_base *b, const struct perf_setup *s,
                           struct perf_net *net, int *bounds, int nb, const struct perf_plan *p,
                           struct perf_flights *f)
{
    if (s->world <= 1 || p->opt_share <= 1)
        return 0;
    if (s->exchange == PERF_EXCHANGE_TORCH_ZERO1)
        return perf_torch_zero1_params(b, s, net, bounds, f);
    if (s->exchange == PERF_EXCHANGE_DEEPSPEED)
        return perf_deepspeed_gather(b, s, net, f);
    struct perf_chan g = {0}; /* the updated shards, gathered after the update */
    if (perf_exchange(b, s, net, bounds, nb, "all_gather", false, 0, &g) < 0)
        return -1;
    perf_flights_add(f, &g);
    return 0;
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
    int nb = s->exchange == PERF_EXCHANGE_WORKER ? perf_buckets(b, s, bounds)
                                                 : perf_engine_buckets(b, s, bounds);
    double window = (double)b->backward_ns * 1e-9 * perf_bwd_scale(s);
    struct perf_plan plan;
    perf_plan_of(s, &plan);
    struct perf_chan c = {0};
    int rc = nb < 0 ? -1 : 0;
    if (rc == 0 && s->world > 1)
        rc = perf_exchange_cycled(b, s, net, bounds, nb, plan.op, plan.cycle_ns, window, &c);
    struct perf_flights f = {.exposed = fmax(0, c.free_at - window), /* backward uncovered */
                             .comm = c.comm,
                             .busy = c.busy,
                             .window = plan.cycle_ns >= 0 ? window : 0,
                             .ops = c.ops,
                             .opt_share = plan.opt_share};
    if (rc == 0)
        rc = perf_after_step(b, s, net, bounds, nb, &plan, &f);
    free(bounds);
    if (rc < 0)
        return -1;
    perf_step_fill(b, s, &f, out);
    return 0;
}
