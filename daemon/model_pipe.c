/* model_pipe: a pipeline run's rows into perf_pipe (model_pipe.h). Each step below reads
 * one input and says in *why what is missing when it cannot. */
#include "daemon/model_pipe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/spec.h"
#include "daemon/model.h"

/* Everything one simulation takes, stage by stage (seconds). */
struct pipe_input {
    int P, M;
    double fwd[PERF_PIPE_MAX_STAGES], bwd[PERF_PIPE_MAX_STAGES], opt[PERF_PIPE_MAX_STAGES];
    double dp[PERF_PIPE_MAX_STAGES], p2p[PERF_PIPE_MAX_STAGES];
    double params[PERF_PIPE_MAX_STAGES]; /* bytes */
    double tie_s;
    double cut_scale; /* the micro-batch's samples over the profile's: a cut's activations
                         are per sample (worker/pipeline.c), 1 for the profiled run */
};

static int pipe_spec_int(const json_t *spec, const char *name, int dflt)
{
    const json_t *v = spec_field_value(spec, name);
    return json_is_integer(v) ? (int)json_integer_value(v) : dflt;
}

/* layers and cuts into each stage's compute (profile: ns per micro-batch) and
 * parameter bytes; -1 when they do not fit each other. */
static int pipe_stages_of(const struct db_pipe_row *pr, struct pipe_input *in)
{
    size_t nl = json_array_size(pr->layers);
    if (pr->stages != in->P || json_array_size(pr->cuts) != (size_t)in->P - 1 || nl == 0)
        return -1;
    int stage = 0;
    for (size_t i = 0; i < nl; i++) {
        const json_t *l = json_array_get(pr->layers, i);
        while (stage < in->P - 1 && (json_int_t)i >= json_integer_value(json_array_get(
                                                         json_array_get(pr->cuts, stage), 0)))
            stage++;
        in->fwd[stage] += (double)json_integer_value(json_array_get(l, 0)) / 1e9;
        in->bwd[stage] += (double)json_integer_value(json_array_get(l, 1)) / 1e9;
        in->params[stage] += (double)json_integer_value(json_array_get(l, 2));
    }
    return stage == in->P - 1 ? 0 : -1;
}

/* The level of the stages' compute from the one-rank base: its forward and backward per
 * step on its batch, times what a micro-batch of `samples` costs against that batch
 * (perf_pipe_call_ratio over the profile's micro-batch and whole-batch timings; 1/M where
 * a run from before them has only the first), shared among the stages as the profile
 * shares them. The profile, passes taken once at start-up, reads the quiet machine: its
 * ratios are used, its level is not; the base's phases are means over its measured steps,
 * as every other prediction's are. Returns the micro-batches' compute over the batch's
 * (M x that cost, forward and backward together; 1: a micro-batch costs its share). */
static double pipe_level(const struct perf_base *b, const struct db_pipe_row *pr, int samples,
                         int batch, struct pipe_input *in)
{
    double f = 0, k = 0;
    for (int s = 0; s < in->P; s++) {
        f += in->fwd[s];
        k += in->bwd[s];
    }
    bool timed = pr->batch > 0 && pr->batch_forward_ns > 0 && pr->batch_backward_ns > 0;
    struct perf_pipe_calls cf = {pr->micro_batch, f, timed ? pr->batch : 0,
                                 timed ? (double)pr->batch_forward_ns / 1e9 : 0},
                           cb = {pr->micro_batch, k, timed ? pr->batch : 0,
                                 timed ? (double)pr->batch_backward_ns / 1e9 : 0};
    double rf = perf_pipe_call_ratio(&cf, samples, batch);
    double rb = perf_pipe_call_ratio(&cb, samples, batch);
    for (int s = 0; s < in->P; s++) {
        in->fwd[s] = f > 0 ? in->fwd[s] / f * b->forward_s * rf : 0;
        in->bwd[s] = k > 0 ? in->bwd[s] / k * b->backward_s * rb : 0;
    }
    double whole = b->forward_s + b->backward_s;
    return whole > 0 ? in->M * (rf * b->forward_s + rb * b->backward_s) / whole : 1;
}

/* The transfers across each cut and the tied weight's exchange, from the sendrecv fit
 * (a point-to-point message costs what the fit at any world size says: perf_cost_of). */
static int pipe_transfers(const struct db_pipe_row *pr, struct perf_net *net,
                          struct pipe_input *in)
{
    struct perf_net p2p = *net;
    p2p.algorithm = "auto"; /* the spec's algorithm is its collectives' */
    for (int s = 0; s < in->P - 1; s++) {
        double bytes = in->cut_scale * (double)json_integer_value(
                                           json_array_get(json_array_get(pr->cuts, s), 1));
        in->p2p[s] = perf_net_time(&p2p, "sendrecv", 2, bytes);
        if (in->p2p[s] < 0)
            return -1;
    }
    in->tie_s = pr->tied_bytes > 0 ? perf_net_time(&p2p, "sendrecv", 2, (double)pr->tied_bytes)
                                   : 0;
    return in->tie_s < 0 ? -1 : 0;
}

/* The replicas' allreduce of each stage's gradients (world / P replicas), exposed whole. */
static int pipe_replicas(int world, struct perf_net *net, struct pipe_input *in)
{
    int R = world / in->P;
    for (int s = 0; s < in->P; s++) {
        in->dp[s] = R > 1 ? perf_net_time(net, "allreduce", R, in->params[s]) : 0;
        if (in->dp[s] < 0)
            return -1;
    }
    return 0;
}

/* The one-rank base's optimizer step and its local exposed communication (hand-offs,
 * copies: per bucket, so per parameter) shared among the stages by parameter bytes. */
static void pipe_base_share(const struct perf_base *b, struct pipe_input *in)
{
    double total = 0;
    for (int k = 0; k < in->P; k++)
        total += in->params[k];
    for (int k = 0; k < in->P; k++) {
        double share = total > 0 ? in->params[k] / total : 0;
        in->opt[k] = b->optimizer_s * share;
        in->dp[k] += b->local_s * share;
    }
}

/* Each stage's compute slowed by its placement's co-location (perf_phase_scale: the
 * calibration's phase slowdowns, else the core share). Returns what the stages' compute
 * was slowed by in all (pred_contention: 1, none). */
static double pipe_contend(const struct perf_setup *s, struct pipe_input *in)
{
    double f = perf_phase_scale(s, PERF_FORWARD), b = perf_phase_scale(s, PERF_BACKWARD);
    double o = perf_phase_scale(s, PERF_OPTIMIZER), before = 0, after = 0;
    for (int k = 0; k < in->P; k++) {
        before += in->fwd[k] + in->bwd[k] + in->opt[k];
        in->fwd[k] *= f;
        in->bwd[k] *= b;
        in->opt[k] *= o;
        after += in->fwd[k] + in->bwd[k] + in->opt[k];
    }
    return before > 0 ? after / before : b;
}

/* One step of the stages in `in` under schedule sched. */
static int pipe_simulate(const struct pipe_input *in, enum perf_pipe_schedule sched,
                         double data_s, struct perf_pipe_step *out)
{
    struct perf_pipe p = {.stages = in->P,
                          .micro_batches = in->M,
                          .schedule = sched,
                          .forward_s = in->fwd,
                          .backward_s = in->bwd,
                          .p2p_s = in->p2p,
                          .optimizer_s = in->opt,
                          .dp_s = in->dp,
                          .tie_s = in->tie_s,
                          .data_s = data_s};
    return perf_pipe_simulate(&p, out);
}

int model_pipe_predict(const struct db_data_run *run, const struct db_data_run *base,
                       struct perf_net *net, const struct calib_set *cals,
                       struct perf_pipe_step *out, int64_t *calib_id, const char **why)
{
    memset(out, 0, sizeof *out);
    *calib_id = 0;
    struct pipe_input in = {.P = pipe_spec_int(run->spec, "pipeline", 1),
                            .M = pipe_spec_int(run->spec, "micro_batches", 1)};
    const char *sch = json_string_value(spec_field_value(run->spec, "schedule"));
    if (run->npipes == 0) {
        *why = "the pipeline run reported no layer profile (it ran before the model of "
               "pipelines, issue 35): run it again to predict it";
        return -1;
    }
    if (in.P < 2 || in.P > PERF_PIPE_MAX_STAGES || in.M < 1) {
        *why = "the pipeline has more stages than the model simulates (64)";
        return -1;
    }
    const struct db_pipe_row *pr = &run->pipes[run->npipes - 1];
    int samples = pipe_spec_int(run->spec, "batch_size", 0) / in.M; /* the worker's p->mb */
    in.cut_scale = pr->micro_batch > 0 && samples > 0 ? (double)samples / pr->micro_batch : 1;
    *why = pipe_stages_of(pr, &in) < 0
               ? "the pipeline's layer profile does not match its stages"
           : pipe_transfers(pr, net, &in) < 0
               ? "no sendrecv fit: run a collective experiment with op sendrecv on this "
                 "backend to predict the pipeline's transfers between stages"
           : pipe_replicas(run->world_size, net, &in) < 0
               ? "no allreduce fit for the exchange among the pipeline's replicas"
               : NULL;
    struct model_base mb;
    if (*why || model_base_of(base, &mb, why) < 0)
        return -1;
    int batch = pipe_spec_int(base->spec, "batch_size", in.M * samples); /* the base's step */
    double mb_cost = pipe_level(&mb.b, pr, samples, batch, &in);
    pipe_base_share(&mb.b, &in);
    double data_s = mb.b.data_s;
    model_base_cleanup(&mb);
    enum perf_pipe_schedule sched = sch && strcmp(sch, "gpipe") == 0 ? PERF_PIPE_GPIPE
                                                                     : PERF_PIPE_1F1B;
    /* the stages compute only outside the bubble: the co-location a busy stage meets is
     * the expectation over its neighbours, each busy the share the schedule without
     * co-location gives (model_setup_busy) */
    struct perf_setup s;
    int64_t applied = 0;
    double contention = 1;
    int rc = pipe_simulate(&in, sched, data_s, out);
    if (rc == 0) {
        model_setup_busy(run, run->world_size, run->ranks_per_node, 1 - out->bubble, base, cals,
                         &s, &applied);
        contention = pipe_contend(&s, &in);
        rc = pipe_simulate(&in, sched, data_s, out);
    }
    if (rc < 0) {
        *why = "the pipeline's schedule could not be simulated from its profile";
        return -1;
    }
    out->contention = contention;
    out->micro_batch_cost = mb_cost;
    *calib_id = applied;
    return 0;
}

int model_pipe_point(const struct db_data_run *run, const struct db_data_run *base,
                     const struct perf_fit *fits, size_t nfits, bool *used,
                     const struct calib_set *cals, struct perf_pipe_step *out,
                     struct perf_step *one, int64_t *calib_id, const char **why)
{
    struct perf_net net;
    model_net_of(run->spec, run->network_profile, run->nodes, fits, nfits, used, &net);
    if (model_pipe_predict(run, base, &net, cals, out, calib_id, why) < 0)
        return -1;
    struct model_base mb;
    if (model_base_of(base, &mb, why) < 0)
        return -1;
    struct perf_setup s1;
    model_setup_at(base, 1, 0, base, &s1);
    s1.world = 1;
    s1.compute_scale = 1;
    int rc = perf_simulate(&mb.b, &s1, &net, one);
    model_base_cleanup(&mb);
    if (rc < 0)
        *why = "the one-rank run could not be simulated";
    return rc < 0 ? -1 : 0;
}

/* ---- POST /v1/predict with "pipeline" ---------------------------------------------------- */

static const char *const pipe_schedule_names[] = {
    [PERF_PIPE_GPIPE] = "gpipe", [PERF_PIPE_1F1B] = "1f1b"};

static json_t *pipe_num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

/* Whether runs a and b compute the same but for their placement and pipeline (and their
 * schedule when any_schedule: a schedule means nothing to one stage). */
static bool pipe_same_compute(const struct db_data_run *a, const struct db_data_run *b,
                              bool any_schedule)
{
    static const char *const knobs[] = {"world_size", "nodes",         "ranks_per_node",
                                        "pipeline",   "micro_batches", "oversubscribed",
                                        "schedule"};
    return model_same_but(a->params, b->params, knobs,
                          sizeof knobs / sizeof *knobs - !any_schedule);
}

/* The one-rank run to predict run from: run itself when it has one rank, else the first
 * one-rank run with gradient readiness that computes as it does, of its schedule first
 * (as a results row's base: results.c results_find_base), else the first with
 * readiness. NULL when none. */
static const struct db_data_run *pipe_base_for(const struct db_experiment_data *d,
                                               const struct db_data_run *run)
{
    if (run->world_size == 1)
        return run;
    const struct db_data_run *any = NULL;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < d->nruns; i++) {
            const struct db_data_run *b = &d->runs[i];
            if (b->world_size != 1 || b->ngrads == 0)
                continue;
            if (pipe_same_compute(b, run, pass == 1))
                return b;
            if (!any)
                any = b;
        }
    return any;
}

/* The run whose layer profile predicts P stages: the asked run when it has P, else the
 * experiment's latest pipeline run of P stages with a profile. NULL when none. */
static const struct db_data_run *pipe_profile_for(const struct db_experiment_data *d,
                                                  const struct db_data_run *asked, int P)
{
    if (asked->npipes > 0 && pipe_spec_int(asked->spec, "pipeline", 1) == P)
        return asked;
    for (size_t i = d->nruns; i-- > 0;)
        if (d->runs[i].npipes > 0 && pipe_spec_int(d->runs[i].spec, "pipeline", 1) == P)
            return &d->runs[i];
    return NULL;
}

/* One point: profile run prof at P stages, M micro-batches, schedule sch, world ranks. */
static json_t *pipe_point_json(const struct db_data_run *prof, const struct db_data_run *base,
                               int P, int M, int sch, int world, int ranks_per_node,
                               const struct perf_fit *fits, size_t nf, bool *used,
                               const struct calib_set *cals, struct err *e)
{
    struct db_data_run v = *prof; /* borrows prof's rows; only its spec is its own */
    json_t *spec = json_deep_copy(prof->spec);
    json_object_set_new(spec, "pipeline", json_integer(P));
    json_object_set_new(spec, "micro_batches", json_integer(M));
    json_object_set_new(spec, "schedule", json_string(pipe_schedule_names[sch]));
    v.spec = spec;
    v.world_size = world;
    if (ranks_per_node > 0)
        v.ranks_per_node = ranks_per_node < world ? ranks_per_node : world;
    struct perf_pipe_step ps;
    struct perf_step one;
    const char *why = NULL;
    json_t *p = NULL;
    int64_t calib_id = 0;
    if (model_pipe_point(&v, base, fits, nf, used, cals, &ps, &one, &calib_id, &why) < 0) {
        err_set(e, ERR_CONFLICT, strstr(why, "fit") ? "fit" : "run", "pipeline %d: %s", P, why);
    } else {
        double batch = json_number_value(spec_field_value(spec, "batch_size"));
        double accum = json_number_value(spec_field_value(spec, "accumulate"));
        double samples = batch * (accum >= 1 ? accum : 1), R = (double)world / P;
        double thr = samples * R / ps.step_s, speedup = thr / (samples / one.step_s);
        p = json_pack("{s:i, s:i, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:i}",
                      "world_size", world, "replicas", world / P, "step_ms",
                      pipe_num(ps.step_s * 1e3), "bubble", pipe_num(ps.bubble), "data_ms",
                      pipe_num(ps.data_s * 1e3), "forward_ms", pipe_num(ps.forward_s * 1e3),
                      "backward_ms", pipe_num(ps.backward_s * 1e3), "p2p_ms",
                      pipe_num(ps.p2p_s * 1e3), "comm_exposed_ms", pipe_num(ps.exposed_s * 1e3),
                      "optimizer_ms", pipe_num(ps.optimizer_s * 1e3), "throughput",
                      pipe_num(thr), "speedup", pipe_num(speedup), "efficiency",
                      pipe_num(speedup / world), "peak_in_flight", ps.peak_in_flight);
        if (p)
            json_object_set_new(p, "micro_batch_cost", pipe_num(ps.micro_batch_cost));
        if (p && v.ranks_per_node > 0) { /* as model_whatif's points: what co-location cost */
            json_object_set_new(p, "contention", pipe_num(ps.contention));
            json_object_set_new(p, "calibration",
                                calib_id > 0 ? json_integer((json_int_t)calib_id)
                                             : json_null());
        }
        if (!p)
            err_set(e, ERR_NOMEM, NULL, "out of memory");
    }
    json_decref(spec);
    return p;
}

/* The curves of P stages from profile run prof: one per schedule, a point per world. */
static int pipe_curves(const struct model_pipe_ask *q, const struct db_data_run *prof,
                       const struct db_data_run *base, int P, const struct perf_fit *fits,
                       size_t nf, bool *used, const struct calib_set *cals, json_t *curves,
                       struct err *e)
{
    int M = q->micro_batches > 0 ? q->micro_batches
                                 : pipe_spec_int(prof->spec, "micro_batches", 1);
    int batch = pipe_spec_int(prof->spec, "batch_size", 0);
    if (M > batch)
        return err_set(e, ERR_INVALID, "micro_batches",
                       "micro_batches: %d exceeds run %lld's batch_size %d (a micro-batch "
                       "holds at least one sample)",
                       M, (long long)prof->id, batch);
    for (size_t s = 0; s < q->nsched; s++) {
        json_t *points = json_array();
        for (size_t w = 0; w < (q->nworld ? q->nworld : 1); w++) {
            int world = q->nworld ? q->worlds[w] : P;
            if (world % P != 0)
                continue;
            json_t *p = pipe_point_json(prof, base, P, M, q->schedules[s], world,
                                        q->ranks_per_node, fits, nf, used, cals, e);
            if (!p) {
                json_decref(points);
                return -1;
            }
            json_array_append_new(points, p);
        }
        if (json_array_size(points) == 0) {
            json_decref(points);
            return err_set(e, ERR_INVALID, "world_sizes",
                           "world_sizes: none is a multiple of pipeline %d (world = stages x "
                           "replicas)",
                           P);
        }
        const char *strategy = json_string_value(spec_field_value(prof->spec, "strategy"));
        json_array_append_new(curves, json_pack("{s:I, s:I, s:O, s:s, s:i, s:i, s:s, s:o, s:n}",
                                                "base_run", (json_int_t)base->id, "profile_run",
                                                (json_int_t)prof->id, "params", prof->params,
                                                "strategy", strategy ? strategy : "ddp",
                                                "pipeline", P, "micro_batches", M, "schedule",
                                                pipe_schedule_names[q->schedules[s]], "points",
                                                points, "comm_exceeds_backward_at"));
    }
    return 0;
}

/* The runs of the request: the asked one, its base, and the fits. */
static int pipe_inputs(struct db *db, const struct model_pipe_ask *q,
                       struct db_experiment_data *d, const struct db_data_run **asked,
                       const struct db_data_run **base, struct perf_fit **fits, size_t *nf,
                       struct err *e)
{
    int64_t exp = 0;
    if (db_run_experiment_id(db, q->run_id, &exp, e) < 0 ||
        db_get_experiment_data(db, exp, d, e) < 0)
        return -1;
    *asked = NULL;
    for (size_t i = 0; i < d->nruns && !*asked; i++)
        if (d->runs[i].id == q->run_id)
            *asked = &d->runs[i];
    if (strcmp(d->workload, "train") != 0 || !*asked)
        return err_set(e, ERR_CONFLICT, "run",
                       "run %lld is no training run: a pipeline is predicted from one",
                       (long long)q->run_id);
    if ((*asked)->world_size != 1 && pipe_spec_int((*asked)->spec, "pipeline", 1) < 2)
        return err_set(e, ERR_CONFLICT, "run",
                       "run %lld is neither a pipeline run nor a one-rank run: name one",
                       (long long)q->run_id);
    if (!(*base = pipe_base_for(d, *asked)))
        return err_set(e, ERR_CONFLICT, "run",
                       "experiment %lld has no one-rank run with gradient readiness to "
                       "predict from (engine ddpbench reports it)",
                       (long long)exp);
    if (model_fits_choose(db, q->fit_ids, q->nfit, (*base)->spec, fits, nf, e) < 0)
        return -1;
    if (*nf == 0)
        return err_set(e, ERR_CONFLICT, "fit",
                       "no network fit for this backend: run a collective experiment with "
                       "sendrecv and allreduce on it first, or name one in fit");
    return 0;
}

/* Each point of curves marked extrapolated or not against the range of the fits used, as
 * every prediction states it (docs/model.md "Extrapolation"); the profile run's nodes are
 * the point's, so only the world size is checked. */
static void pipe_mark_extrapolated(json_t *curves, const struct perf_fit *fits, size_t nf,
                                   const bool *used, int base_world)
{
    struct perf_range range;
    perf_range_of(fits, nf, used, base_world, &range);
    size_t i, k;
    json_t *c, *p;
    json_array_foreach(curves, i, c) json_array_foreach(json_object_get(c, "points"), k, p)
    {
        int w = (int)json_integer_value(json_object_get(p, "world_size"));
        json_object_set_new(p, "extrapolated",
                            json_boolean(perf_range_extrapolates(&range, w, 0)));
    }
}

json_t *model_pipe_whatif(struct db *db, const struct model_pipe_ask *q, struct err *e)
{
    struct db_experiment_data d;
    memset(&d, 0, sizeof d);
    const struct db_data_run *asked = NULL, *base = NULL;
    struct perf_fit *fits = NULL;
    size_t nf = 0;
    json_t *curves = json_array(), *out = NULL;
    int rc = pipe_inputs(db, q, &d, &asked, &base, &fits, &nf, e);
    /* owned: the nodes' contention. Every point has a placement (the one asked, else the
     * profile run's), so a point without ranks_per_node is computed as that run's row. */
    struct calib_set cals = {0};
    if (rc == 0)
        rc = calib_load(db, &cals, e);
    bool *used = calloc(nf + 1, sizeof *used);
    if (rc == 0 && !used)
        rc = err_set(e, ERR_NOMEM, NULL, "out of memory");
    for (size_t i = 0; rc == 0 && i < q->nstages; i++) {
        int P = q->stages[i];
        const struct db_data_run *prof = pipe_profile_for(&d, asked, P);
        if (!prof)
            rc = err_set(e, ERR_CONFLICT, "pipeline",
                         "pipeline %d: no pipeline run of %d stages in experiment %lld "
                         "reported a layer profile: run one (its profile gives the stages' "
                         "cut and the bytes across it)",
                         P, P, (long long)d.id);
        else
            rc = pipe_curves(q, prof, base, P, fits, nf, used, &cals, curves, e);
    }
    if (rc == 0) {
        json_t *fj = json_array();
        for (size_t i = 0; i < nf; i++)
            if (used[i])
                json_array_append_new(fj, model_fit_json(&fits[i]));
        pipe_mark_extrapolated(curves, fits, nf, used, base->world_size);
        out = json_pack("{s:I, s:i, s:o, s:n, s:o, s:O}", "experiment", (json_int_t)d.id,
                        "model_version", PERF_MODEL_VERSION, "fits", fj, "link", "covers",
                        model_covers_json(fits, nf, used, base->world_size), "predictions",
                        curves);
    }
    json_decref(curves);
    calib_set_free(&cals);
    free(used);
    free(fits);
    db_experiment_data_free(&d);
    return out;
}
