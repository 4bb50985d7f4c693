/* model: see model.h. */
#include "daemon/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/spec.h"
#include "common/vocab.h"
#include "daemon/perf_pipe.h"

#define MODEL_MAX_FITS 4096
#define MODEL_LATEST_SCAN 32 /* finished collective experiments model_fits_latest looks at */

/* ---- fits ------------------------------------------------------------------------------- */

static const char *model_str(const json_t *spec, const char *name, const char *dflt)
{
    const char *v = json_string_value(spec_field_value(spec, name));
    return v ? v : dflt;
}

/* The framework engines whose exchange runs on torch.distributed's process group (and
 * Horovod's own gloo): over TCP that is gloo, not ddpbench's tcp collectives. */
static bool model_engine_on_gloo(const char *engine)
{
    static const char *const gloo[] = {"pytorch", "lightning", "deepspeed", "horovod"};
    for (size_t i = 0; engine && i < sizeof gloo / sizeof *gloo; i++)
        if (strcmp(engine, gloo[i]) == 0)
            return true;
    return false;
}

const char *model_backend_of(const json_t *spec)
{
    const char *backend = model_str(spec, "backend", "tcp");
    if (strcmp(backend, "tcp") == 0 && model_engine_on_gloo(model_str(spec, "engine", "")))
        return "gloo";
    return backend;
}

int model_exchange_of(const char *engine, const char *strategy, enum perf_exchange *x,
                      const char **why)
{
    *x = PERF_EXCHANGE_WORKER;
    *why = NULL;
    if (!engine || strcmp(engine, "ddpbench") == 0)
        return 0;
    bool ddp = strcmp(strategy, "ddp") == 0, zero1 = strcmp(strategy, "zero1") == 0;
    if (strcmp(engine, "pytorch") == 0 && (ddp || zero1))
        *x = ddp ? PERF_EXCHANGE_TORCH_DDP : PERF_EXCHANGE_TORCH_ZERO1;
    else if (strcmp(engine, "lightning") == 0 && ddp)
        *x = PERF_EXCHANGE_TORCH_DDP;
    else if (strcmp(engine, "horovod") == 0 && strcmp(strategy, "horovod") == 0)
        *x = PERF_EXCHANGE_HOROVOD;
    else if (strcmp(engine, "deepspeed") == 0 && (zero1 || strcmp(strategy, "zero2") == 0))
        *x = PERF_EXCHANGE_DEEPSPEED;
    else if (strcmp(engine, "tensorflow") == 0)
        *why = "engine tensorflow runs forward, backward, the all-reduce and the update as one "
               "tf.function graph: it has no gradient readiness and no phases to simulate "
               "from";
    else if (strcmp(engine, "script") == 0)
        *why = "engine script runs the operator's own script: the model does not know how it "
               "exchanges gradients";
    else if (strcmp(strategy, "dp") == 0)
        *why = "strategy dp is torch.nn.DataParallel: one process sums its replicas' "
               "gradients inside backward, which the model does not simulate";
    else
        *why = "the model does not simulate this engine's strategy";
    return *why ? -1 : 0;
}

const char *model_no_fit_note(const json_t *spec)
{
    return strcmp(model_backend_of(spec), "gloo") == 0
               ? "no gloo fit: the framework engines exchange over gloo; run a collective "
                 "experiment with engine pytorch (torch.distributed over gloo)"
               : "no network fit: run a collective experiment on this backend";
}

/* The key of one collective row of run: everything a fit is per, bytes aside. */
static void model_key_of(const struct db_experiment_data *d, const struct db_data_run *run,
                         const struct report_collective *c, struct perf_fit *k)
{
    memset(k, 0, sizeof *k);
    k->experiment_id = d->id;
    snprintf(k->backend, sizeof k->backend, "%s", model_backend_of(run->spec));
    snprintf(k->device, sizeof k->device, "%s", model_str(run->spec, "device", "cpu"));
    snprintf(k->op, sizeof k->op, "%s", c->op);
    snprintf(k->algorithm, sizeof k->algorithm, "%s", c->algorithm);
    snprintf(k->network_profile, sizeof k->network_profile, "%s", run->network_profile);
    k->world_size = run->world_size;
    k->nodes = run->nodes;
}

static bool model_same_key(const struct perf_fit *a, const struct perf_fit *b)
{
    return strcmp(a->backend, b->backend) == 0 && strcmp(a->device, b->device) == 0 &&
           strcmp(a->op, b->op) == 0 && strcmp(a->algorithm, b->algorithm) == 0 &&
           strcmp(a->network_profile, b->network_profile) == 0 &&
           a->world_size == b->world_size && a->nodes == b->nodes;
}

/* Every sample of key k in d: one per stored row (each repeat, in place or not), the
 * median iteration's time. Rows with wrong results are no measurement of the op. */
static size_t model_samples(const struct db_experiment_data *d, const struct perf_fit *k,
                            struct perf_sample *s, size_t cap)
{
    size_t n = 0;
    for (size_t r = 0; r < d->nruns; r++)
        for (size_t i = 0; i < d->runs[r].ncollectives; i++) {
            const struct report_collective *c = &d->runs[r].collectives[i];
            struct perf_fit ki;
            model_key_of(d, &d->runs[r], c, &ki);
            if (c->wrong == 0 && c->time_us_median > 0 && model_same_key(&ki, k) && n < cap)
                s[n++] = (struct perf_sample){(double)c->bytes, c->time_us_median * 1e-6};
        }
    return n;
}

int model_fits_compute(const struct db_experiment_data *d, struct perf_fit **out, size_t *n,
                       struct err *e)
{
    *out = NULL;
    *n = 0;
    if (strcmp(d->workload, "collective") != 0)
        return err_set(e, ERR_INVALID, "fit",
                       "experiment %lld is a %s experiment: fits come from collective "
                       "experiments",
                       (long long)d->id, d->workload);
    size_t rows = 0;
    for (size_t r = 0; r < d->nruns; r++)
        rows += d->runs[r].ncollectives;
    struct perf_fit *fits = calloc(rows + 1, sizeof *fits);
    struct perf_sample *s = calloc(rows + 1, sizeof *s);
    if (!fits || !s) {
        free(fits);
        free(s);
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    }
    size_t nf = 0;
    for (size_t r = 0; r < d->nruns; r++)
        for (size_t i = 0; i < d->runs[r].ncollectives && nf < MODEL_MAX_FITS; i++) {
            struct perf_fit k;
            model_key_of(d, &d->runs[r], &d->runs[r].collectives[i], &k);
            bool seen = false;
            for (size_t j = 0; j < nf && !seen; j++)
                seen = model_same_key(&fits[j], &k);
            size_t ns = seen ? 0 : model_samples(d, &k, s, rows);
            if (!seen && perf_fit_line(s, ns, &k) == 0)
                fits[nf++] = k;
        }
    free(s);
    perf_fits_separate(fits, nf);
    *out = fits;
    *n = nf;
    return 0;
}

static bool model_finished(const char *status)
{
    return strcmp(status, "queued") != 0 && strcmp(status, "running") != 0;
}

/* Appends src[0..n) to *all (n_all, grown). */
static int model_append(struct perf_fit **all, size_t *n_all, const struct perf_fit *src,
                        size_t n, struct err *e)
{
    struct perf_fit *g = realloc(*all, (*n_all + n + 1) * sizeof *g);
    if (!g)
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    memcpy(g + *n_all, src, n * sizeof *src);
    *all = g;
    *n_all += n;
    return 0;
}

/* The fits of one experiment into *all. */
static int model_fits_one(struct db *db, int64_t id, struct perf_fit **all, size_t *n_all,
                          struct err *e)
{
    struct perf_fit *f = NULL;
    size_t n = 0;
    if (db_get_fits(db, id, &f, &n, e) < 0)
        return -1;
    if (n == 0) { /* never stored: from the figures, then stored when they are final */
        free(f);
        f = NULL;
        struct db_experiment_data d;
        int rc = db_get_experiment_data(db, id, &d, e);
        /* a training experiment measured no collective: it has no fit, which is no error
         * (a prediction without any fit says so) */
        if (rc == 0 && strcmp(d.workload, "collective") == 0)
            rc = model_fits_compute(&d, &f, &n, e);
        bool final = rc == 0 && model_finished(d.status);
        db_experiment_data_free(&d);
        if (rc == 0 && final && n > 0) {
            rc = db_store_fits(db, f, n, e);
            free(f);
            f = NULL;
            n = 0;
            if (rc == 0)
                rc = db_get_fits(db, id, &f, &n, e);
        }
        if (rc < 0) {
            free(f);
            return -1;
        }
    }
    int rc = model_append(all, n_all, f, n, e);
    free(f);
    return rc;
}

int model_fits_load(struct db *db, const int64_t *ids, size_t nid, struct perf_fit **out,
                    size_t *n, struct err *e)
{
    *out = NULL;
    *n = 0;
    for (size_t i = 0; i < nid; i++)
        if (model_fits_one(db, ids[i], out, n, e) < 0) {
            free(*out);
            *out = NULL;
            *n = 0;
            return -1;
        }
    return 0;
}

/* Whether fit g's placement (network profile, node count) is among have[0..nh). */
static bool model_placement_seen(const struct perf_fit *g, const struct perf_fit *have,
                                 size_t nh)
{
    for (size_t j = 0; j < nh; j++)
        if (have[j].nodes == g->nodes &&
            strcmp(have[j].network_profile, g->network_profile) == 0)
            return true;
    return false;
}

/* Appends those of g[0..ng) on backend and device whose placement *all has not yet (an
 * older experiment's fits of a placement a newer one measured are left out). */
static int model_append_new(struct perf_fit **all, size_t *n_all, const struct perf_fit *g,
                            size_t ng, const char *backend, const char *device, struct err *e)
{
    size_t nh = *n_all;
    for (size_t k = 0; k < ng; k++)
        if (strcmp(g[k].backend, backend) == 0 && strcmp(g[k].device, device) == 0 &&
            !model_placement_seen(&g[k], *all, nh) && model_append(all, n_all, &g[k], 1, e) < 0)
            return -1;
    return 0;
}

/* The fits, for backend and device, of the most recent finished collective experiment of
 * each placement (network profile and node count): a run across nodes needs its link's
 * fits and those inside one node, most often from two experiments (none: *n = 0, no
 * error). */
static int model_fits_latest(struct db *db, const char *backend, const char *device,
                             struct perf_fit **out, size_t *n, struct err *e)
{
    int64_t ids[MODEL_LATEST_SCAN];
    size_t nid = 0;
    *out = NULL;
    *n = 0;
    if (db_finished_collectives(db, ids, MODEL_LATEST_SCAN, &nid, e) < 0)
        return -1;
    for (size_t i = 0; i < nid; i++) {
        struct perf_fit *f = NULL;
        size_t nf = 0;
        int rc = model_fits_load(db, &ids[i], 1, &f, &nf, e);
        if (rc == 0)
            rc = model_append_new(out, n, f, nf, backend, device, e);
        free(f);
        if (rc < 0) {
            free(*out);
            *out = NULL;
            *n = 0;
            return -1;
        }
    }
    return 0;
}

int model_fits_choose(struct db *db, const int64_t *ids, size_t nid, const json_t *spec,
                      struct perf_fit **out, size_t *n, struct err *e)
{
    *out = NULL;
    *n = 0;
    if (nid > 0)
        return model_fits_load(db, ids, nid, out, n, e);
    if (!spec)
        return 0;
    return model_fits_latest(db, model_backend_of(spec), model_str(spec, "device", "cpu"), out,
                             n, e);
}

static json_t *model_num(double d)
{
    return isfinite(d) ? json_real(d) : json_null();
}

json_t *model_fit_json(const struct perf_fit *f)
{
    json_t *o = json_pack(
        "{s:o, s:I, s:i, s:s, s:s, s:s, s:s, s:i, s:i, s:o, s:o, s:o, s:o, s:o, s:o, s:i, s:I, "
        "s:I}",
        "id", f->id > 0 ? json_integer((json_int_t)f->id) : json_null(), "experiment",
        (json_int_t)f->experiment_id, "model_version", PERF_MODEL_VERSION, "backend",
        f->backend, "device", f->device, "op", f->op, "algorithm", f->algorithm, "world_size",
        f->world_size, "nodes", f->nodes, "network_profile",
        f->network_profile[0] ? json_string(f->network_profile) : json_null(), "alpha_us",
        model_num(f->alpha_s * 1e6), "beta_ns_per_byte", model_num(f->beta_s * 1e9),
        "gamma_ns_per_byte", model_num(f->gamma_s * 1e9), "r2", model_num(f->r2),
        "worst_residual", model_num(f->worst_resid), "points", f->points, "min_bytes",
        (json_int_t)f->min_bytes, "max_bytes", (json_int_t)f->max_bytes);
    /* the bandwidth the per-byte term stands for, as busbw would read it */
    if (o && f->beta_s > 0)
        json_object_set_new(o, "bandwidth_gbs", json_real(1e-9 / f->beta_s));
    return o;
}

/* ---- the base run ------------------------------------------------------------------------ */

static int model_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int model_base_of(const struct db_data_run *run, struct model_base *mb, const char **why)
{
    memset(mb, 0, sizeof *mb);
    mb->run_id = run->id;
    if (run->ngrads == 0) {
        *why = "the one-rank run reported no gradient readiness (engines ddpbench, pytorch, "
               "horovod and deepspeed report it)";
        return -1;
    }
    if (run->nsteps == 0) {
        *why = "the one-rank run has no measured step";
        return -1;
    }
    const struct db_grads_row *g = &run->grads[run->ngrads - 1]; /* its last repeat */
    size_t nt = json_array_size(g->tensors);
    mb->bytes = calloc(nt + 1, sizeof *mb->bytes);
    mb->ready = calloc(nt + 1, sizeof *mb->ready);
    mb->steps = calloc(run->nsteps + 1, sizeof *mb->steps);
    if (!mb->bytes || !mb->ready || !mb->steps || nt == 0) {
        model_base_cleanup(mb);
        *why = nt ? "out of memory" : "the one-rank run reported no parameter tensor";
        return -1;
    }
    for (size_t t = 0; t < nt; t++) {
        const json_t *p = json_array_get(g->tensors, t);
        mb->bytes[t] = (int64_t)json_integer_value(json_array_get(p, 0));
        mb->ready[t] = (int64_t)json_integer_value(json_array_get(p, 1));
    }
    double sum[PHASE_N] = {0};
    size_t cnt[PHASE_N] = {0};
    for (size_t i = 0; i < run->nsteps; i++)
        mb->steps[i] = run->steps[i].step_ms * 1e-3;
    qsort(mb->steps, run->nsteps, sizeof *mb->steps, model_cmp_double);
    for (size_t i = 0; i < run->nsteps; i++)
        for (int p = 0; p < PHASE_N; p++)
            if (run->steps[i].phase_ms[p] >= 0) {
                sum[p] += run->steps[i].phase_ms[p];
                cnt[p]++;
            }
    double ms[PHASE_N];
    for (int p = 0; p < PHASE_N; p++)
        ms[p] = cnt[p] ? sum[p] / (double)cnt[p] * 1e-3 : 0;
    mb->b = (struct perf_base){.data_s = ms[PHASE_DATA],
                               .forward_s = ms[PHASE_FORWARD],
                               .backward_s = ms[PHASE_BACKWARD],
                               .optimizer_s = ms[PHASE_OPTIMIZER],
                               .local_s = ms[PHASE_COMM_EXPOSED],
                               .nt = (int)nt,
                               .bytes = mb->bytes,
                               .ready_ns = mb->ready,
                               .backward_ns = g->backward_ns,
                               .step_s = mb->steps,
                               .nsteps = run->nsteps};
    return 0;
}

void model_base_cleanup(struct model_base *mb)
{
    free(mb->bytes);
    free(mb->ready);
    free(mb->steps);
    memset(mb, 0, sizeof *mb);
}

/* The strategy knobs of spec (a run's resolved spec), at world ranks with compute_scale. */
static void model_setup_of(const json_t *spec, int world, double compute_scale,
                           struct perf_setup *s)
{
    int strat = perf_strategy_parse(model_str(spec, "strategy", "ddp"));
    const char *compression = model_str(spec, "compression", "none");
    *s = (struct perf_setup){
        .strategy = strat < 0 ? PERF_DDP : (enum perf_strategy)strat,
        .world = world,
        .bucket_bytes = (int64_t)json_integer_value(spec_field_value(spec, "bucket_mb")) << 20,
        .fusion_bytes = (int64_t)json_integer_value(spec_field_value(spec, "fusion_mb")) << 20,
        .cycle_ms = json_number_value(spec_field_value(spec, "cycle_ms")),
        .wire = strcmp(compression, "none") == 0 ? 1.0 : 0.5,
        .compute_scale = compute_scale,
    };
    if (s->bucket_bytes <= 0)
        s->bucket_bytes = (int64_t)25 << 20;
    if (s->fusion_bytes <= 0)
        s->fusion_bytes = (int64_t)64 << 20;
    const char *why;
    model_exchange_of(model_str(spec, "engine", "ddpbench"), model_str(spec, "strategy", "ddp"),
                      &s->exchange, &why);
}

/* CPU cores each rank had: threads over the node's share, at most its threads. */
static double model_cores_per_rank(const struct db_data_run *run, int ranks_per_node)
{
    double threads = json_number_value(spec_field_value(run->spec, "threads"));
    if (threads < 1)
        threads = 1;
    if (run->cpus_online <= 0 || ranks_per_node <= 0)
        return threads;
    return fmin(threads, (double)run->cpus_online / ranks_per_node);
}

/* The share of CPUs a run's ranks had on a node, relative to base's (device cpu). */
static double model_compute_scale(const struct db_data_run *run, int ranks_per_node,
                                  const struct db_data_run *base)
{
    if (strcmp(model_str(run->spec, "device", "cpu"), "cpu") != 0)
        return 1;
    double had = model_cores_per_rank(base, 1), has = model_cores_per_rank(run, ranks_per_node);
    return has > 0 && had > has ? had / has : 1;
}

/* Whether a CPU run's ranks had no core beside their compute threads for the communication
 * thread at ranks_per_node. */
static bool model_no_spare_core(const struct db_data_run *run, int ranks_per_node)
{
    if (strcmp(model_str(run->spec, "device", "cpu"), "cpu") != 0 ||
        strcmp(model_str(run->spec, "backend", "tcp"), "tcp") != 0 || run->cpus_online <= 0 ||
        ranks_per_node <= 1)
        return false;
    double threads = json_number_value(spec_field_value(run->spec, "threads"));
    return (double)run->cpus_online / ranks_per_node < (threads < 1 ? 1 : threads) + 1;
}

void model_setup_at(const struct db_data_run *run, int world, int ranks_per_node,
                    const struct db_data_run *base, struct perf_setup *s)
{
    model_setup_of(run->spec, world,
                   ranks_per_node > 0 ? model_compute_scale(run, ranks_per_node, base) : 1, s);
    s->no_spare_core = ranks_per_node > 0 && model_no_spare_core(run, ranks_per_node);
}

void model_setup_calibrated(const struct db_data_run *run, int world, int ranks_per_node,
                            const struct db_data_run *base, const struct calib_set *cals,
                            struct perf_setup *s, int64_t *calib_id)
{
    model_setup_busy(run, world, ranks_per_node, 1, base, cals, s, calib_id);
}

void model_setup_busy(const struct db_data_run *run, int world, int ranks_per_node, double busy,
                      const struct db_data_run *base, const struct calib_set *cals,
                      struct perf_setup *s, int64_t *calib_id)
{
    model_setup_at(run, world, ranks_per_node, base, s);
    *calib_id = 0;
    if (ranks_per_node > 0 && busy < 1) { /* the core share, weighted as the calibration's */
        s->compute_scale = 0;
        for (int j = 0; j < ranks_per_node; j++)
            s->compute_scale += perf_busy_weight(ranks_per_node - 1, busy, j) *
                                model_compute_scale(run, j + 1, base);
    }
    const struct calib *c = ranks_per_node > 0 ? calib_match(cals, run) : NULL;
    if (!c || perf_contention_busy(&c->perf, ranks_per_node, busy, &s->contention) < 0)
        return;
    s->has_contention = true;
    s->compute_scale = s->contention.slow[PERF_BACKWARD]; /* the data phase's, too */
    *calib_id = c->id;
}

void model_net_of(const json_t *spec, const char *profile, int nodes,
                  const struct perf_fit *fits, size_t n, bool *used, struct perf_net *net)
{
    *net = (struct perf_net){.fits = fits,
                             .n = n,
                             .backend = model_backend_of(spec),
                             .device = model_str(spec, "device", "cpu"),
                             .network_profile = profile ? profile : "",
                             .algorithm = model_str(spec, "algorithm", "auto"),
                             .nodes = nodes,
                             .used = used};
}

/* Whether fits on net's backend and device were measured on nodes nodes under profile. */
static bool model_has_placement(const struct perf_net *net, int nodes, const char *profile)
{
    for (size_t i = 0; i < net->n; i++) {
        const struct perf_fit *f = &net->fits[i];
        if (strcmp(f->backend, net->backend) == 0 && strcmp(f->device, net->device) == 0 &&
            f->nodes == nodes && strcmp(f->network_profile, profile) == 0)
            return true;
    }
    return false;
}

void model_net_across(struct perf_net *net, int per_node, struct perf_net *intra)
{
    if (net->nodes <= 1 || net->link)
        return;
    *intra = *net;
    intra->nodes = 1;
    /* inside one node no shaped link is crossed: the same profile's one-node fits where
     * they exist, else the host's (netlab's hosts share this machine's loopback) */
    if (!model_has_placement(net, 1, net->network_profile))
        intra->network_profile = "";
    net->intra = intra;
    net->per_node = per_node > 0 ? per_node : 1;
    bool hier = strcmp(net->algorithm, "hier") == 0,
         auto_ = strcmp(net->algorithm, "auto") == 0;
    /* the TCP backend's auto takes hier across nodes from 64 KiB (worker/comm/tcp_algo.c,
     * TCP_AUTO_HIER_BYTES); other backends run their flat algorithms */
    net->hier_from = hier ? 0 : auto_ && strcmp(net->backend, "tcp") == 0 ? 64 << 10 : -1;
}

void model_across_note(const struct perf_net *net, char *out, size_t n)
{
    const char *prof = net->network_profile[0] ? net->network_profile : "host";
    if (!model_has_placement(net, net->nodes, net->network_profile))
        snprintf(out, n,
                 "no fit of the %s link between %d nodes for backend %s: run a collective "
                 "experiment with nodes: %d under that network profile",
                 prof, net->nodes, net->backend, net->nodes);
    else if (!model_has_placement(net, 1, net->network_profile) &&
             !model_has_placement(net, 1, "")) /* the fits model_net_across would take */
        snprintf(out, n,
                 "no fit inside one node for backend %s: run a collective experiment with "
                 "nodes: 1 and world_size %d (the ranks per node)",
                 net->backend, net->per_node > 1 ? net->per_node : 2);
    else
        snprintf(out, n,
                 "no fit of the %s link between %d nodes or inside one covers the operations "
                 "this strategy needs (allreduce, reduce_scatter, all_gather)",
                 prof, net->nodes);
}

/* Adds v to the ascending distinct list a (a JSON array of integers). */
static void model_add_sorted(json_t *a, int v)
{
    size_t i;
    for (i = 0; i < json_array_size(a); i++) {
        json_int_t x = json_integer_value(json_array_get(a, i));
        if (x == v)
            return;
        if (x > v)
            break;
    }
    json_array_insert_new(a, i, json_integer(v));
}

json_t *model_covers_json(const struct perf_fit *fits, size_t n, const bool *used,
                          int base_world)
{
    json_t *worlds = json_array(), *nodes = json_array();
    for (size_t i = 0; i < n; i++)
        if (!used || used[i]) {
            model_add_sorted(worlds, fits[i].world_size);
            model_add_sorted(nodes, fits[i].nodes > 0 ? fits[i].nodes : 1);
        }
    struct perf_range r;
    char text[128];
    perf_range_of(fits, n, used, base_world, &r);
    perf_range_text(&r, text, sizeof text);
    return json_pack("{s:o, s:o, s:i, s:s}", "world_sizes", worlds, "nodes", nodes,
                     "base_world_size", base_world, "text", text);
}

json_t *model_step_json(const struct perf_step *st, double samples)
{
    return json_pack(
        "{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:i}", "step_ms",
        model_num(st->step_s * 1e3), "data_ms", model_num(st->data_s * 1e3), "forward_ms",
        model_num(st->forward_s * 1e3), "backward_ms", model_num(st->backward_s * 1e3),
        "comm_ms", model_num(st->comm_s * 1e3), "comm_exposed_ms",
        model_num(st->exposed_s * 1e3), "wait_ms", model_num(st->sync_s * 1e3), "optimizer_ms",
        model_num(st->optimizer_s * 1e3), "throughput",
        model_num(st->step_s > 0 ? samples / st->step_s : NAN), "overlap",
        model_num(st->overlap), "comm_busy_over_backward",
        model_num(st->window_s > 0 ? st->busy_s / st->window_s : NAN), "ops", st->ops);
}

char *model_used_ids(const struct perf_fit *fits, size_t n, const bool *used)
{
    struct buf b;
    buf_init(&b);
    int rc = buf_printf(&b, "%s", ""); /* "" when none is stored */
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (used[i] && fits[i].id > 0)
            rc = buf_printf(&b, "%s%lld", b.len ? "," : "", (long long)fits[i].id);
    if (rc < 0)
        buf_free(&b);
    return (char *)b.data;
}

/* ---- POST /v1/predict ------------------------------------------------------------------- */

struct model_req {
    int64_t exp_id, run_id;
    int64_t fit_ids[MODEL_MAX_FIT_IDS];
    size_t nfit;
    bool has_link;
    struct perf_link link;
    char link_alg[16];
    int worlds[MODEL_MAX_POINTS];
    size_t nworld;
    int strategies[PERF_NSTRATEGIES];
    size_t nstrat;
    int ranks_per_node; /* 0: every rank has its cores */
    int nodes;          /* 0: any placement measured; else the ranks spread over this many */
    bool has_profile;
    char profile[64]; /* the network profile across nodes (has_profile), "" = host */
    int max_world;    /* > 0: only fits of at most this world size (pred_max_world) */
    /* a pipeline's what-if (model_pipe.h): its stage counts, micro-batches, schedules */
    int stages[MODEL_MAX_POINTS];
    size_t nstages, nsched;
    int micro_batches, schedules[2];
    bool has_worlds;
};

static int model_bad(struct err *e, const char *field, const char *msg)
{
    return err_set(e, ERR_INVALID, field, "%s: %s", field, msg);
}

static int model_parse_link(const json_t *l, struct model_req *r, struct err *e)
{
    const char *k;
    json_t *v;
    double gbps = -1, lat_us = -1;
    snprintf(r->link_alg, sizeof r->link_alg, "ring");
    json_object_foreach((json_t *)l, k, v)
    {
        if (strcmp(k, "bandwidth_gbps") == 0 && json_is_number(v) && json_number_value(v) > 0 &&
            json_number_value(v) <= 1e5)
            gbps = json_number_value(v);
        else if (strcmp(k, "latency_us") == 0 && json_is_number(v) &&
                 json_number_value(v) >= 0 && json_number_value(v) <= 1e6)
            lat_us = json_number_value(v);
        else if (strcmp(k, "algorithm") == 0 && json_is_string(v) &&
                 (strcmp(json_string_value(v), "ring") == 0 ||
                  strcmp(json_string_value(v), "rd") == 0 ||
                  strcmp(json_string_value(v), "hd") == 0))
            snprintf(r->link_alg, sizeof r->link_alg, "%s", json_string_value(v));
        else
            return err_set(e, ERR_INVALID, "link",
                           "link.%s: unknown or out of range (bandwidth_gbps > 0, latency_us "
                           ">= 0, algorithm ring, rd or hd)",
                           k);
    }
    if (gbps < 0 || lat_us < 0)
        return model_bad(e, "link", "needs bandwidth_gbps (Gbit/s) and latency_us");
    r->has_link = true;
    r->link = (struct perf_link){.latency_s = lat_us * 1e-6, .s_per_byte = 8.0 / (gbps * 1e9)};
    return 0;
}

static int model_parse_ints(const json_t *a, int64_t lo, int64_t hi, size_t cap, int64_t *out,
                            size_t *n, const char *field, struct err *e)
{
    size_t i;
    json_t *v;
    if (!json_is_array(a) || json_array_size(a) == 0 || json_array_size(a) > cap)
        return err_set(e, ERR_INVALID, field, "%s: must be a list of 1 to %zu integers", field,
                       cap);
    json_array_foreach((json_t *)a, i, v)
    {
        if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
            return err_set(e, ERR_INVALID, field, "%s[%zu]: must be an integer in [%lld, %lld]",
                           field, i, (long long)lo, (long long)hi);
        out[i] = json_integer_value(v);
    }
    *n = json_array_size(a);
    return 0;
}

/* The strategies the model predicts, "a or b or c", into out (n bytes): the vocabulary's
 * but the single-process ones (perf_strategy_parse). */
static void model_strategy_names(char *out, size_t n)
{
    size_t len = 0;
    out[0] = '\0';
    for (int st = 0; st < PERF_NSTRATEGIES; st++) {
        const char *name = vocab_name(VOCAB_STRATEGY, st);
        if (perf_strategy_parse(name) < 0 || len >= n)
            continue;
        int k = snprintf(out + len, n - len, "%s%s", len ? " or " : "", name);
        len += k > 0 ? (size_t)k : 0;
    }
}

/* The pipeline fields of the body (pipeline, micro_batches, schedules) into r; any other
 * name is unknown. */
static int model_parse_pipe(const char *k, const json_t *v, struct model_req *r, struct err *e)
{
    int64_t tmp[MODEL_MAX_POINTS];
    size_t n, i;
    json_t *x;
    if (strcmp(k, "pipeline") == 0) {
        if (model_parse_ints(v, 2, PERF_PIPE_MAX_STAGES, MODEL_MAX_POINTS, tmp, &n, k, e) < 0)
            return -1;
        for (i = 0; i < n; i++)
            r->stages[i] = (int)tmp[i];
        r->nstages = n;
    } else if (strcmp(k, "micro_batches") == 0) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 4096)
            return model_bad(e, k, "must be an integer in [1, 4096]");
        r->micro_batches = (int)json_integer_value(v);
    } else if (strcmp(k, "schedules") == 0) {
        if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > 2)
            return model_bad(e, k, "must be a list of 1 or 2 of gpipe, 1f1b");
        json_array_foreach(v, i, x)
        {
            const char *name = json_string_value(x);
            if (!name || (strcmp(name, "gpipe") != 0 && strcmp(name, "1f1b") != 0))
                return err_set(e, ERR_INVALID, k, "schedules[%zu]: must be gpipe or 1f1b", i);
            r->schedules[r->nsched++] = strcmp(name, "gpipe") == 0 ? PERF_PIPE_GPIPE
                                                                   : PERF_PIPE_1F1B;
        }
    } else {
        return err_set(e, ERR_INVALID, k,
                       "%s: unknown field (experiment, run, fit, link, world_sizes, "
                       "strategies, ranks_per_node, nodes, network_profile, pred_max_world, "
                       "pipeline, micro_batches, schedules)",
                       k);
    }
    return 0;
}

/* A pipeline's what-if: from a run, over fits, of the pipeline's own exchanges. */
static int model_check_pipe(struct model_req *r, struct err *e)
{
    if (r->run_id == 0)
        return model_bad(e, "run",
                         "a pipeline is predicted from a run: name a pipeline run or its "
                         "one-rank base");
    if (r->has_link)
        return model_bad(e, "link",
                         "a pipeline is predicted from the sendrecv and allreduce fits: give "
                         "fit, not link");
    if (r->nstrat > 0)
        return model_bad(e, "strategies",
                         "a pipeline's replicas exchange by allreduce: give pipeline or "
                         "strategies, not both");
    if (r->nsched == 0) {
        r->schedules[r->nsched++] = PERF_PIPE_GPIPE;
        r->schedules[r->nsched++] = PERF_PIPE_1F1B;
    }
    return 0;
}

static int model_parse(const json_t *body, struct model_req *r, struct err *e)
{
    memset(r, 0, sizeof *r);
    if (!json_is_object(body))
        return err_set(e, ERR_INVALID, NULL, "the body must be a JSON object");
    const char *k;
    json_t *v;
    int64_t tmp[MODEL_MAX_POINTS];
    size_t n;
    json_object_foreach((json_t *)body, k, v)
    {
        if (strcmp(k, "experiment") == 0 || strcmp(k, "run") == 0) {
            if (!json_is_integer(v) || json_integer_value(v) < 1)
                return model_bad(e, k, "must be an id (an integer >= 1)");
            *(strcmp(k, "run") == 0 ? &r->run_id : &r->exp_id) = json_integer_value(v);
        } else if (strcmp(k, "fit") == 0) {
            if (model_parse_ints(v, 1, INT64_MAX, MODEL_MAX_FIT_IDS, r->fit_ids, &r->nfit, k,
                                 e) < 0)
                return -1;
        } else if (strcmp(k, "link") == 0) {
            if (!json_is_object(v))
                return model_bad(e, k, "must be an object {bandwidth_gbps, latency_us}");
            if (model_parse_link(v, r, e) < 0)
                return -1;
        } else if (strcmp(k, "world_sizes") == 0) {
            if (model_parse_ints(v, 1, PERF_MAX_WORLD, MODEL_MAX_POINTS, tmp, &n, k, e) < 0)
                return -1;
            for (size_t i = 0; i < n; i++)
                r->worlds[i] = (int)tmp[i];
            r->nworld = n;
        } else if (strcmp(k, "ranks_per_node") == 0) {
            if (!json_is_integer(v) || json_integer_value(v) < 1 ||
                json_integer_value(v) > PERF_MAX_WORLD)
                return model_bad(e, k, "must be an integer in [1, 1024]");
            r->ranks_per_node = (int)json_integer_value(v);
        } else if (strcmp(k, "nodes") == 0 || strcmp(k, "pred_max_world") == 0) {
            if (!json_is_integer(v) || json_integer_value(v) < 1 ||
                json_integer_value(v) > PERF_MAX_WORLD)
                return model_bad(e, k, "must be an integer in [1, 1024]");
            *(strcmp(k, "nodes") == 0 ? &r->nodes : &r->max_world) = (int)json_integer_value(v);
        } else if (strcmp(k, "network_profile") == 0) {
            if (!json_is_null(v) &&
                (!json_is_string(v) || json_string_length(v) >= sizeof r->profile))
                return model_bad(e, k, "must be a profile name (1gbe, 10gbe, ...) or null");
            snprintf(r->profile, sizeof r->profile, "%s",
                     json_is_string(v) ? json_string_value(v) : "");
            r->has_profile = true;
        } else if (strcmp(k, "strategies") == 0) {
            size_t i;
            json_t *x;
            char names[128];
            model_strategy_names(names, sizeof names);
            if (!json_is_array(v) || json_array_size(v) == 0 ||
                json_array_size(v) > PERF_NSTRATEGIES)
                return err_set(e, ERR_INVALID, k, "%s: must be a list of 1 to %d strategies", k,
                               PERF_NSTRATEGIES);
            json_array_foreach(v, i, x)
            {
                int st = perf_strategy_parse(json_string_value(x));
                if (st < 0)
                    return err_set(e, ERR_INVALID, k, "strategies[%zu]: must be %s", i, names);
                r->strategies[r->nstrat++] = st;
            }
        } else if (model_parse_pipe(k, v, r, e) < 0) {
            return -1;
        }
    }
    if (r->nstages > 0 && model_check_pipe(r, e) < 0)
        return -1;
    r->has_worlds = r->nworld > 0;
    if ((r->exp_id > 0) == (r->run_id > 0))
        return err_set(e, ERR_INVALID, "experiment",
                       "experiment or run: name exactly one (a training experiment, or its "
                       "one-rank run)");
    if (r->nfit > 0 && r->has_link)
        return model_bad(e, "link", "give a fit or a link, not both");
    if (r->nworld == 0)
        for (int w = 1; w <= PERF_MAX_WORLD; w *= 2)
            r->worlds[r->nworld++] = w;
    if (r->nstrat == 0)
        for (int st = 0; st < PERF_NSTRATEGIES; st++)
            if (perf_strategy_parse(vocab_name(VOCAB_STRATEGY, st)) >= 0)
                r->strategies[r->nstrat++] = st;
    return 0;
}

bool model_same_but(const json_t *a, const json_t *b, const char *const *drop, size_t n)
{
    json_t *x = json_deep_copy(a), *y = json_deep_copy(b);
    for (size_t i = 0; i < n; i++) {
        json_object_del(x, drop[i]);
        json_object_del(y, drop[i]);
    }
    bool same = json_equal(x, y);
    json_decref(x);
    json_decref(y);
    return same;
}

/* Whether run a repeats an earlier base's compute: the same swept values but for the
 * strategy's own knobs. */
static bool model_same_compute(const struct db_data_run *a, const struct db_data_run *b)
{
    static const char *const knobs[] = {"strategy", "bucket_mb", "fusion_mb", "cycle_ms",
                                        "compression"};
    return model_same_but(a->params, b->params, knobs, sizeof knobs / sizeof *knobs);
}

/* The placement of a curve's point of world ranks: *nodes the nodes they spread over (0:
 * any placement measured, as nothing was asked), *rpn the ranks sharing each (0: every
 * rank has its cores). Ranks spread evenly: ranks_per_node where asked, else
 * ceil(world / nodes). */
static void model_placement_at(const struct model_req *r, int world, int *nodes, int *rpn)
{
    *nodes = r->nodes > 0 ? (r->nodes < world ? r->nodes : world) : 0;
    *rpn = r->ranks_per_node < world ? r->ranks_per_node : world;
    if (*nodes > 0 && r->ranks_per_node == 0)
        *rpn = (world + *nodes - 1) / *nodes;
}

/* Marks each point of curves extrapolated or not against the range of the fits used. */
static void model_mark_extrapolated(json_t *curves, const struct perf_range *range)
{
    size_t i, k;
    json_t *c, *p;
    json_array_foreach(curves, i, c) json_array_foreach(json_object_get(c, "points"), k, p)
    {
        int w = (int)json_integer_value(json_object_get(p, "world_size"));
        int nodes = (int)json_integer_value(json_object_get(p, "nodes"));
        json_object_set_new(p, "extrapolated",
                            json_boolean(perf_range_extrapolates(range, w, nodes)));
    }
}

/* One strategy's curve from base mb (run: its spec). */
static json_t *model_curve(const struct model_req *r, const struct db_data_run *run,
                           const struct model_base *mb, int strat, const struct perf_fit *fits,
                           size_t nf, bool *used, const struct calib_set *cals, struct err *e)
{
    json_t *points = json_array();
    double batch = json_number_value(spec_field_value(run->spec, "batch_size"));
    double accum = json_number_value(spec_field_value(run->spec, "accumulate"));
    double samples1 = batch * (accum >= 1 ? accum : 1), thr1 = NAN;
    int exceeds = 0;
    for (size_t i = 0; i < r->nworld; i++) {
        struct perf_setup s;
        int nodes = 0, rpn = 0;
        model_placement_at(r, r->worlds[i], &nodes, &rpn);
        /* ranks sharing a node's CPUs, as asked: the same rules as a measured placement */
        int64_t calib_id = 0;
        model_setup_calibrated(run, r->worlds[i], rpn, run, cals, &s, &calib_id);
        s.strategy = (enum perf_strategy)strat;
        const char *unsimulated; /* an engine's strategy it does not run: the worker's */
        model_exchange_of(model_str(run->spec, "engine", "ddpbench"),
                          vocab_name(VOCAB_STRATEGY, strat), &s.exchange, &unsimulated);
        struct perf_net net, intra;
        model_net_of(run->spec, r->has_profile ? r->profile : run->network_profile, nodes, fits,
                     nf, used, &net);
        if (r->has_link) {
            net.link = &r->link;
            net.algorithm = r->link_alg;
        }
        model_net_across(&net, rpn, &intra);
        struct perf_step st;
        if (perf_simulate(&mb->b, &s, &net, &st) < 0) {
            char why[256];
            json_decref(points);
            if (net.intra)
                model_across_note(&net, why, sizeof why);
            else
                snprintf(why, sizeof why,
                         "no network fit for backend %s on %s covers %s: run a collective "
                         "experiment of allreduce, reduce_scatter and all_gather on it, or "
                         "give a link",
                         net.backend, net.device, vocab_name(VOCAB_STRATEGY, strat));
            err_set(e, ERR_CONFLICT, "fit", "%s", why);
            return NULL;
        }
        double samples = samples1 * r->worlds[i];
        if (r->worlds[i] == 1)
            thr1 = samples / st.step_s;
        if (!isfinite(thr1)) { /* the curve's own one-rank point, even when not asked */
            struct perf_setup s1 = s;
            struct perf_step one;
            s1.world = 1;
            s1.compute_scale = 1;
            s1.no_spare_core = false;
            s1.has_contention = false;
            if (perf_simulate(&mb->b, &s1, &net, &one) == 0)
                thr1 = samples1 / one.step_s;
        }
        json_t *p = model_step_json(&st, samples);
        double speedup = (samples / st.step_s) / thr1;
        json_object_set_new(p, "world_size", json_integer(r->worlds[i]));
        json_object_set_new(p, "nodes", nodes > 0 ? json_integer(nodes) : json_null());
        json_object_set_new(p, "speedup", model_num(speedup));
        json_object_set_new(p, "efficiency", model_num(speedup / r->worlds[i]));
        json_object_set_new(p, "contention", model_num(st.contention));
        json_object_set_new(p, "calibration",
                            calib_id > 0 ? json_integer((json_int_t)calib_id) : json_null());
        json_array_append_new(points, p);
        if (!exceeds && st.window_s > 0 && st.busy_s > st.window_s)
            exceeds = r->worlds[i];
    }
    return json_pack("{s:I, s:O, s:s, s:o, s:o}", "base_run", (json_int_t)run->id, "params",
                     run->params, "strategy", vocab_name(VOCAB_STRATEGY, strat), "points",
                     points, "comm_exceeds_backward_at",
                     exceeds ? json_integer(exceeds) : json_null());
}

/* The base runs of the request: the run, or the experiment's one-rank runs. */
static int model_bases(struct db *db, const struct model_req *r, struct db_experiment_data *d,
                       struct err *e)
{
    int64_t exp = r->exp_id;
    memset(d, 0, sizeof *d);
    if (r->run_id > 0 && db_run_experiment_id(db, r->run_id, &exp, e) < 0)
        return -1;
    if (db_get_experiment_data(db, exp, d, e) < 0)
        return -1;
    if (strcmp(d->workload, "train") != 0)
        return err_set(e, ERR_CONFLICT, r->run_id ? "run" : "experiment",
                       "experiment %lld is a %s experiment: predictions start from a training "
                       "run",
                       (long long)exp, d->workload);
    return 0;
}

json_t *model_predict(struct db *db, const json_t *body, struct err *e)
{
    struct model_req r;
    if (model_parse(body, &r, e) < 0)
        return NULL;
    if (r.nstages > 0) {
        err_set(e, ERR_INVALID, "pipeline", "pipeline: asked of model_pipe_whatif");
        return NULL;
    }
    struct db_experiment_data d;
    if (model_bases(db, &r, &d, e) < 0) {
        db_experiment_data_free(&d);
        return NULL;
    }
    struct perf_fit *fits = NULL;
    size_t nf = 0;
    json_t *curves = json_array(), *out = NULL;
    bool *used = NULL;
    const struct db_data_run *first = NULL;
    int rc = 0;
    for (size_t i = 0; i < d.nruns && !first; i++)
        if (d.runs[i].world_size == 1 && (r.run_id == 0 || d.runs[i].id == r.run_id))
            first = &d.runs[i];
    if (!first)
        rc = err_set(e, ERR_CONFLICT, r.run_id ? "run" : "experiment",
                     r.run_id ? "run %lld is not a one-rank run: predictions start from one"
                              : "experiment %lld has no one-rank run to predict from",
                     (long long)(r.run_id ? r.run_id : r.exp_id));
    if (rc == 0 && !r.has_link) {
        rc = model_fits_choose(db, r.fit_ids, r.nfit, first->spec, &fits, &nf, e);
        perf_fits_restrict(fits, &nf, r.max_world);
        if (rc == 0 && nf == 0)
            rc = err_set(e, ERR_CONFLICT, "fit",
                         "no network fit for backend %s%s: run a collective experiment on it "
                         "first, name one in fit, or describe a link",
                         model_backend_of(first->spec),
                         r.max_world > 0 ? " at the world sizes pred_max_world allows" : "");
    }
    struct calib_set cals = {0};
    if (rc == 0 && r.ranks_per_node > 0)
        rc = calib_load(db, &cals, e);
    used = calloc(nf + 1, sizeof *used);
    if (rc == 0 && !used)
        rc = err_set(e, ERR_NOMEM, NULL, "out of memory");
    for (size_t i = 0; rc == 0 && i < d.nruns; i++) {
        const struct db_data_run *run = &d.runs[i];
        if (run->world_size != 1 || (r.run_id > 0 && run->id != r.run_id))
            continue;
        bool seen = false;
        for (size_t k = 0; k < i && !seen; k++)
            seen = d.runs[k].world_size == 1 && r.run_id == 0 && d.runs[k].ngrads > 0 &&
                   model_same_compute(&d.runs[k], run);
        if (seen)
            continue;
        for (size_t s = 0; rc == 0 && s < r.nstrat; s++) {
            /* the one-rank run of this strategy, where the experiment has one: its local
             * costs (hand-offs, copies) are the strategy's own */
            const struct db_data_run *b = run;
            for (size_t k = i; r.run_id == 0 && k < d.nruns && b == run; k++)
                if (d.runs[k].world_size == 1 && d.runs[k].ngrads > 0 &&
                    perf_strategy_parse(model_str(d.runs[k].spec, "strategy", "")) ==
                        r.strategies[s] &&
                    model_same_compute(&d.runs[k], run))
                    b = &d.runs[k];
            struct model_base mb;
            const char *why = NULL;
            if (model_base_of(b, &mb, &why) < 0) {
                if (r.run_id > 0)
                    rc = err_set(e, ERR_CONFLICT, "run", "run %lld: %s", (long long)b->id, why);
                continue;
            }
            json_t *c = model_curve(&r, b, &mb, r.strategies[s], fits, nf, used, &cals, e);
            if (!c)
                rc = -1;
            else
                json_array_append_new(curves, c);
            model_base_cleanup(&mb);
        }
    }
    if (rc == 0 && json_array_size(curves) == 0)
        rc = err_set(e, ERR_CONFLICT, "experiment",
                     "no one-rank run of experiment %lld reported gradient readiness (engines "
                     "ddpbench, pytorch, horovod and deepspeed do)",
                     (long long)d.id);
    if (rc == 0) {
        json_t *fj = json_array();
        for (size_t i = 0; i < nf; i++)
            if (used[i])
                json_array_append_new(fj, model_fit_json(&fits[i]));
        json_t *link = r.has_link ? json_pack("{s:f, s:f, s:s}", "bandwidth_gbps",
                                              8.0 / r.link.s_per_byte / 1e9, "latency_us",
                                              r.link.latency_s * 1e6, "algorithm", r.link_alg)
                                  : json_null();
        struct perf_range range;
        perf_range_of(fits, nf, used, first->world_size, &range);
        model_mark_extrapolated(curves, &range);
        out = json_pack("{s:I, s:i, s:o, s:o, s:o, s:o}", "experiment", (json_int_t)d.id,
                        "model_version", PERF_MODEL_VERSION, "fits", fj, "link", link, "covers",
                        model_covers_json(fits, nf, used, first->world_size), "predictions",
                        curves);
        curves = NULL;
    }
    json_decref(curves);
    calib_set_free(&cals);
    free(used);
    free(fits);
    db_experiment_data_free(&d);
    return out;
}

int model_parse_pipe_ask(const json_t *body, struct model_pipe_ask *ask, struct err *e)
{
    struct model_req r;
    if (model_parse(body, &r, e) < 0)
        return -1;
    if (r.nstages == 0)
        return 0;
    *ask = (struct model_pipe_ask){.run_id = r.run_id,
                                   .nfit = r.nfit,
                                   .nstages = r.nstages,
                                   .nworld = r.has_worlds ? r.nworld : 0,
                                   .nsched = r.nsched,
                                   .micro_batches = r.micro_batches,
                                   .ranks_per_node = r.ranks_per_node};
    memcpy(ask->fit_ids, r.fit_ids, sizeof ask->fit_ids);
    memcpy(ask->stages, r.stages, sizeof ask->stages);
    memcpy(ask->worlds, r.worlds, sizeof ask->worlds);
    memcpy(ask->schedules, r.schedules, sizeof ask->schedules);
    return 1;
}
