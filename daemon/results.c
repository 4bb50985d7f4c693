/* results: see results.h. */
#include "daemon/results.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/columns.h"
#include "common/spec.h"
#include "common/stats.h"
#include "common/vocab.h"
#include "daemon/model.h"
#include "daemon/model_pipe.h"

/* --- growable vectors (of doubles, and of step indexes) ---------------------------------- */

struct results_vec {
    double *v;
    size_t n, cap;
};

struct results_idx {
    size_t *v;
    size_t n, cap;
};

/* Makes room for one more element of size `size` in *v (n used of cap). */
static int results_grow(void **v, size_t n, size_t *cap, size_t size)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? 2 * *cap : 16;
    void *g = realloc(*v, c * size);
    if (!g)
        return -1;
    *v = g;
    *cap = c;
    return 0;
}

static int results_push(struct results_vec *x, double d)
{
    if (results_grow((void **)&x->v, x->n, &x->cap, sizeof *x->v) < 0)
        return -1;
    x->v[x->n++] = d;
    return 0;
}

static int results_push_idx(struct results_idx *x, size_t i)
{
    if (results_grow((void **)&x->v, x->n, &x->cap, sizeof *x->v) < 0)
        return -1;
    x->v[x->n++] = i;
    return 0;
}

/* --- table building ----------------------------------------------------------------------- */

struct results_table {
    json_t *columns; /* array of names, in order */
    json_t *rows;    /* array of objects */
    json_t *row;     /* the row being built (owned until added) */
};

/* The cell name of the row being built; the first row defines the columns. */
static void results_put_name(struct results_table *t, const char *name, json_t *v)
{
    if (json_array_size(t->rows) == 0) { /* the first row defines the columns */
        bool known = false;
        size_t i;
        json_t *c;
        json_array_foreach(t->columns, i, c)
            known = known || strcmp(json_string_value(c), name) == 0;
        if (!known)
            json_array_append_new(t->columns, json_string(name));
    }
    json_object_set_new(t->row, name, v ? v : json_null());
}

/* Column c's cell (a COLUMN_VALUE's). */
static void results_put(struct results_table *t, enum column c, json_t *v)
{
    results_put_name(t, columns_get(c)->key, v);
}

static json_t *results_num(double d)
{
    return isfinite(d) ? json_real(d) : json_null();
}

/* Column c's statistics, as its shape (common/columns.h) has them: c_mean, c_ci95, and
 * for a spread c_median, c_p95, c_min, c_max, then c_n. */
static void results_put_stats(struct results_table *t, enum column c,
                              const struct stats_summary *s)
{
    enum column_stat st[STAT_N + 1];
    size_t n = columns_stats_of(columns_get(c)->shape, st);
    bool none = s->n == 0;
    for (size_t i = 0; i < n; i++) {
        char key[COLUMNS_KEY_MAX];
        double v = st[i] == STAT_MEAN     ? s->mean
                   : st[i] == STAT_CI95   ? (s->n < 2 ? NAN : s->ci95)
                   : st[i] == STAT_MEDIAN ? s->median
                   : st[i] == STAT_P95    ? s->p95
                   : st[i] == STAT_MIN    ? s->min
                                          : s->max;
        columns_key(c, st[i], key);
        if (st[i] == STAT_N)
            results_put_name(t, key, json_integer((json_int_t)s->n));
        else
            results_put_name(t, key, none ? NULL : results_num(v));
    }
}

static void results_stats_of(struct results_vec *x, struct stats_summary *s)
{
    stats_summarize(x->v, x->n, s);
}

static void results_begin_row(struct results_table *t, const json_t *key)
{
    t->row = json_object();
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)key, k, v) results_put_name(t, k, json_incref(v));
}

static void results_end_row(struct results_table *t)
{
    json_array_append_new(t->rows, t->row);
    t->row = NULL;
}

/* --- groups ------------------------------------------------------------------------------- */

struct results_group {
    json_t *key;                     /* owned: {field: value, ..., "emulated": bool,
                                          "oversubscribed": bool,
                                          "network_profile": string or null,
                                          "nodes": how many the ranks spanned} */
    const struct db_data_run **runs; /* owned array of borrowed runs */
    size_t n;
};

struct results_groups {
    struct results_group *g;
    size_t n;
};

static void results_groups_free(struct results_groups *gs)
{
    for (size_t i = 0; i < gs->n; i++) {
        json_decref(gs->g[i].key);
        free(gs->g[i].runs);
    }
    free(gs->g);
}

/* Whether run's strategy keeps its replicas in one process (vocab.h single_process). */
static bool results_single_process(const struct db_data_run *run)
{
    const json_t *wl = json_object_get(run->spec, "workload");
    const char *name = json_string_value(spec_field_value(run->spec, "strategy"));
    const struct vocab_strategy *st = vocab_strategy(vocab_find(VOCAB_STRATEGY, name));
    return json_is_string(wl) && strcmp(json_string_value(wl), "train") == 0 && st &&
           st->single_process;
}

/* run NULL: the key of no run (every field null), for a table's columns alone. */
static json_t *results_key_of(const struct db_data_run *run, const json_t *fields)
{
    json_t *key = json_object();
    size_t i;
    json_t *f;
    json_array_foreach(fields, i, f)
    {
        const char *name = json_string_value(f);
        /* dotted names ("optimizer.type") are nested in the spec, as sweeps name them */
        const json_t *v = run ? spec_field_value(run->spec, name) : NULL;
        json_object_set(key, name, v ? (json_t *)v : json_null());
        /* grouped by the placement: what the run got, not the spec's 0 ("as few as fit") */
        if (run && strcmp(name, "ranks_per_node") == 0)
            json_object_set_new(key, name, json_integer(run->ranks_per_node));
    }
    /* always part of the key, whatever group_by says: figures of ranks sharing one GPU
     * are never pooled with one-rank-per-GPU figures (nor used as their baseline) */
    json_object_set_new(key, columns_get(COL_EMULATED)->key,
                        json_boolean(run && run->emulated));
    /* likewise figures of ranks that shared CPUs (--cpu-slots above the CPU count) */
    json_object_set_new(key, columns_get(COL_OVERSUBSCRIBED)->key,
                        json_boolean(run && run->oversubscribed));
    /* and figures measured over different networks (ddpbenchd --network-profile): a run
     * over an emulated 1 GbE link is not a sample of the host network, nor its baseline */
    json_object_set_new(key, columns_get(COL_NETWORK_PROFILE)->key,
                        run && run->network_profile[0] ? json_string(run->network_profile)
                                                       : json_null());
    /* and how many nodes the ranks spanned: 4 ranks on 2 nodes cross the network, 4 on 1
     * do not (the spec's nodes may say 0, "as few as fit": this is what they got). How
     * they were split (ranks_per_node) keys only when grouped by: world sizes a user pools
     * on one node differ in it by definition */
    json_object_set_new(key, columns_get(COL_NODES)->key,
                        run ? json_integer(run->nodes) : json_null());
    /* and replicas in one process (issue 33: mirrored, dp), which exchange inside it: never
     * pooled with a process per rank, whatever group_by says */
    json_object_set_new(key, columns_get(COL_SINGLE_PROCESS)->key,
                        json_boolean(run && results_single_process(run)));
    return key;
}

static int results_group_runs(const struct db_experiment_data *data, const json_t *fields,
                              struct results_groups *gs, struct err *e)
{
    gs->g = calloc(data->nruns + 1, sizeof *gs->g);
    gs->n = 0;
    if (!gs->g)
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    for (size_t i = 0; i < data->nruns; i++) {
        const struct db_data_run *run = &data->runs[i];
        json_t *key = results_key_of(run, fields);
        size_t k = 0;
        while (k < gs->n && !json_equal(gs->g[k].key, key))
            k++;
        if (k == gs->n) {
            gs->g[k].runs = calloc(data->nruns, sizeof *gs->g[k].runs);
            if (!gs->g[k].runs) {
                json_decref(key);
                return err_set(e, ERR_NOMEM, NULL, "out of memory");
            }
            gs->g[k].key = key;
            gs->n++;
        } else {
            json_decref(key);
        }
        gs->g[k].runs[gs->g[k].n++] = run;
    }
    return 0;
}

/* The fields to group by: as asked (each must exist in the specs), or the swept ones. */
static json_t *results_fields(const struct db_experiment_data *data,
                              const char *const *group_by, size_t ngroup, struct err *e)
{
    json_t *fields = json_array();
    const struct db_data_run *first = data->nruns ? &data->runs[0] : NULL;
    if (ngroup == 0) {
        const char *k;
        json_t *v;
        json_object_foreach(first ? first->params : NULL, k, v)
            json_array_append_new(fields, json_string(k));
        return fields;
    }
    for (size_t i = 0; i < ngroup; i++) {
        if (first && !spec_field_value(first->spec, group_by[i])) {
            json_decref(fields);
            err_set(e, ERR_INVALID, "group_by",
                    "group_by: '%s' is not a field of this "
                    "experiment's specs",
                    group_by[i]);
            return NULL;
        }
        json_array_append_new(fields, json_string(group_by[i]));
    }
    return fields;
}

/* --- collectives -------------------------------------------------------------------------- */

/* One message size of one operation: the figures pooled in a row. */
static bool results_same_point(const struct report_collective *a,
                               const struct report_collective *b)
{
    return strcmp(a->op, b->op) == 0 && strcmp(a->dtype, b->dtype) == 0 &&
           strcmp(a->redop, b->redop) == 0 && a->inplace == b->inplace && a->bytes == b->bytes;
}

/* One row for the point `like` (op, dtype, redop, inplace, bytes) over every run of g. */
static void results_collective_row(struct results_table *t, const struct results_group *g,
                                   const struct report_collective *like)
{
    struct results_vec bus = {0}, alg = {0}, tim = {0};
    int64_t wrong = 0;
    char algos[64] = "";
    for (size_t i = 0; i < g->n; i++)
        for (size_t j = 0; j < g->runs[i]->ncollectives; j++) {
            const struct report_collective *c = &g->runs[i]->collectives[j];
            if (!results_same_point(c, like))
                continue;
            results_push(&bus, c->busbw_gbs);
            results_push(&alg, c->algbw_gbs);
            results_push(&tim, c->time_us_median);
            wrong += c->wrong;
            const char *a = c->algorithm;
            if (!strstr(algos, a) && strlen(algos) + strlen(a) + 2 < sizeof algos)
                snprintf(algos + strlen(algos), sizeof algos - strlen(algos), "%s%s",
                         algos[0] ? "+" : "", a);
        }
    struct stats_summary sb, sa, st;
    results_stats_of(&bus, &sb);
    results_stats_of(&alg, &sa);
    results_stats_of(&tim, &st);
    results_begin_row(t, g->key);
    results_put(t, COL_OP, json_string(like->op));
    results_put(t, COL_DTYPE, json_string(like->dtype));
    results_put(t, COL_REDOP, json_string(like->redop));
    results_put(t, COL_INPLACE, json_boolean(like->inplace));
    results_put(t, COL_BYTES, json_integer(like->bytes));
    results_put(t, COL_ALGORITHM, json_string(algos));
    results_put_stats(t, COL_BUSBW_GBS, &sb);
    results_put_stats(t, COL_ALGBW_GBS, &sa);
    results_put_stats(t, COL_TIME_US, &st);
    results_put(t, COL_WRONG, json_integer(wrong));
    results_end_row(t);
    free(bus.v);
    free(alg.v);
    free(tim.v);
}

/* A row per distinct point of each group, in the order the points first appear. */
static int results_collectives(struct results_table *t, const struct results_groups *gs,
                               struct err *e)
{
    for (size_t k = 0; k < gs->n; k++) {
        const struct results_group *g = &gs->g[k];
        size_t total = 0, nseen = 0;
        for (size_t i = 0; i < g->n; i++)
            total += g->runs[i]->ncollectives;
        const struct report_collective **seen = calloc(total + 1, sizeof *seen);
        if (!seen)
            return err_set(e, ERR_NOMEM, NULL, "out of memory");
        for (size_t i = 0; i < g->n; i++)
            for (size_t j = 0; j < g->runs[i]->ncollectives; j++) {
                const struct report_collective *c = &g->runs[i]->collectives[j];
                bool dup = false;
                for (size_t s = 0; s < nseen && !dup; s++)
                    dup = results_same_point(seen[s], c);
                if (!dup) {
                    seen[nseen++] = c;
                    results_collective_row(t, g, c);
                }
            }
        free(seen);
    }
    return 0;
}

/* --- training ----------------------------------------------------------------------------- */

/* Time to accuracy of a group (spec target_accuracy): over its repeats, the training
 * time and epochs until the first epoch at the target, and how many repeats got there. */
struct results_tta {
    double target; /* 0: not asked; -1: the group's runs asked for different targets */
    size_t runs;
    struct results_vec secs, epochs;
    size_t repeats, reached;
};

/* What the ranks held and used, over repeats (db_memory_row, db_usage_row). */
enum results_mem {
    RM_PARAMS,
    RM_BUFFERS,
    RM_GRADS,
    RM_OPTIMIZER,
    RM_COMM,
    RM_ACTIVATIONS,
    RM_MODEL_STATE,
    RM_PEAK_RSS,
    RM_DEVICE_PEAK,
    RM_N
};
/* in the order of their results columns, COL_PARAMS_BYTES on */
_Static_assert(COL_PARAMS_BYTES + RM_N - 1 == COL_DEVICE_PEAK_BYTES, "memory columns");
enum results_use { RU_CPU, RU_VCS, RU_ICS, RU_GPU_UTIL, RU_GPU_POWER, RU_N };
/* What a fault cost (db_elastic_fig), one sample per run that had it, COL_GENERATIONS on */
enum results_el {
    RE_GENS,
    RE_DETECT,
    RE_RESUME,
    RE_LOST,
    RE_BEFORE,
    RE_DURING,
    RE_AFTER,
    RE_N
};
_Static_assert(COL_GENERATIONS + RE_N - 1 == COL_THROUGHPUT_AFTER, "elastic columns");
/* likewise, COL_CPU_UTIL on */
_Static_assert(COL_CPU_UTIL + RU_N - 1 == COL_GPU_POWER_W, "usage columns");

/* A group's pipeline (spec pipeline > 1): its stages and micro-batches (0: no run yet, -1:
 * they differ across the group's runs) and its ranks' figures pooled over every
 * non-warm-up step row that reported them (db_step_row sums). */
struct results_pipe {
    int64_t stages, micro;
    double bubble_ms, bubble_step_ms, p2p_ms, p2p_bytes;
    int64_t p2p_n, p2p_bytes_n;
};

/* A step whose data wait is at least this fraction of the step time is input-bound: with a
 * prefetching loader that keeps up, the wait is a hand-off of microseconds. */
#define RESULTS_INPUT_BOUND 0.05

/* A group's data pipeline, pooled over every non-warm-up step row (db_step_row sums). */
struct results_data {
    double data_ms, step_ms; /* the ranks' mean data wait and the step time, summed */
    int64_t steps;           /* steps with a data phase */
    double loader_cpu_ms, read_bytes, read_step_ms;
    int64_t loader_n, read_n;
};

/* test_acc_per_class (issue 33) of a group: per class, the sum and number of its repeats'
 * last-epoch accuracies (a class the split lacks counts none). k: the classes; -1 when the
 * group's runs report different numbers of them. Owned arrays (free in results_training). */
struct results_classes {
    double *sum, *n;
    int k;
};

struct results_train {
    struct results_vec thr, step, acc, loss;
    struct results_classes cls;
    struct results_vec mem[RM_N], use[RU_N]; /* one sample per repeat that reported it */
    struct results_vec el[RE_N];             /* one sample per run that had it */
    struct results_tta tta;
    struct results_idx starts; /* where each repeat (of each run) begins in step */
    double phase[PHASE_N], straggler;
    size_t phase_n[PHASE_N]; /* steps that observed each phase (engines may not: -1) */
    size_t nsteps;
    int64_t world; /* -1: differs across the group's runs */
    struct results_pipe pipe;
    struct results_data data;
};

/* Each repeat's time to accuracy: training time (the epochs' time_s, evaluation left
 * out) and epochs until the first epoch whose test accuracy (train accuracy where no test
 * split was evaluated) is at least the target. */
static void results_tta_run(struct results_tta *t, const struct db_data_run *run)
{
    double target = json_number_value(json_object_get(run->spec, "target_accuracy"));
    if (t->runs++ == 0)
        t->target = target;
    else if (target != t->target)
        t->target = -1; /* no one figure: the group pools different targets */
    if (t->target <= 0)
        return;
    int repeat = -1;
    double secs = 0;
    bool done = false;
    for (size_t k = 0; k < run->nepochs; k++) {
        const struct report_epoch *ep = &run->epochs[k];
        if (ep->repeat != repeat) {
            repeat = ep->repeat, secs = 0, done = false;
            t->repeats++;
        }
        secs += ep->time_s;
        double acc = ep->test_acc >= 0 ? ep->test_acc : ep->train_acc;
        if (done || acc < target)
            continue;
        done = true;
        t->reached++;
        results_push(&t->secs, secs);
        results_push(&t->epochs, (double)(ep->epoch + 1)); /* epochs count from 0 */
    }
}

/* The memory and usage figures of each repeat of run. */
static void results_resources_run(struct results_train *r, const struct db_data_run *run)
{
    for (size_t k = 0; k < run->nmemory; k++) {
        const struct db_memory_row *m = &run->memory[k];
        double v[RM_N] = {m->params_bytes,
                          m->buffers_bytes,
                          m->grads_bytes,
                          m->optimizer_bytes,
                          m->comm_bytes,
                          m->activations_bytes,
                          -1,
                          m->peak_rss_bytes,
                          m->device_peak_bytes};
        if (m->params_bytes >= 0 && m->grads_bytes >= 0 && m->optimizer_bytes >= 0)
            v[RM_MODEL_STATE] = m->params_bytes + m->grads_bytes + m->optimizer_bytes;
        for (int i = 0; i < RM_N; i++)
            if (v[i] >= 0) /* not told by the engine: no sample, never a 0 */
                results_push(&r->mem[i], v[i]);
    }
    for (size_t k = 0; k < run->nusage; k++) {
        const struct db_usage_row *u = &run->usage[k];
        double v[RU_N] = {u->cpu_util, u->voluntary_cs_per_s, u->involuntary_cs_per_s,
                          u->gpu_util_pct, u->gpu_power_w};
        for (int i = 0; i < RU_N; i++)
            if (v[i] >= 0)
                results_push(&r->use[i], v[i]);
    }
}

/* A spec's integer field, or def where it has none (a run from before the field). */
static int64_t results_spec_int(const json_t *spec, const char *name, int64_t def)
{
    const json_t *v = spec_field_value(spec, name);
    return json_is_integer(v) ? json_integer_value(v) : def;
}

/* The run's pipeline figures into the group's (struct results_pipe). */
static void results_pipe_run(struct results_pipe *p, const struct db_data_run *run)
{
    int64_t stages = results_spec_int(run->spec, "pipeline", 1);
    int64_t micro = results_spec_int(run->spec, "micro_batches", 1);
    p->stages = p->stages == 0 || p->stages == stages ? stages : -1;
    p->micro = p->micro == 0 || p->micro == micro ? micro : -1;
    for (size_t i = 0; i < run->nsteps; i++) {
        const struct db_step_row *s = &run->steps[i];
        if (s->bubble_ms >= 0 && s->bubble_step_ms >= 0) {
            p->bubble_ms += s->bubble_ms;
            p->bubble_step_ms += s->bubble_step_ms;
        }
        if (s->p2p_ms >= 0) {
            p->p2p_ms += s->p2p_ms;
            p->p2p_n += s->p2p_ranks;
        }
        if (s->p2p_bytes >= 0) {
            p->p2p_bytes += s->p2p_bytes;
            p->p2p_bytes_n += s->p2p_bytes_ranks;
        }
    }
}

/* The run's data-pipeline figures into the group's (struct results_data). read_step_ms
 * sums the step time once per rank that read, so read_bytes / read_step_ms is a rank's
 * read rate. */
static void results_data_run(struct results_data *d, const struct db_data_run *run)
{
    for (size_t i = 0; i < run->nsteps; i++) {
        const struct db_step_row *s = &run->steps[i];
        if (s->phase_ms[PHASE_DATA] >= 0) {
            d->data_ms += s->phase_ms[PHASE_DATA];
            d->step_ms += s->step_ms;
            d->steps++;
        }
        if (s->loader_cpu_ms >= 0) {
            d->loader_cpu_ms += s->loader_cpu_ms;
            d->loader_n += s->loader_ranks;
        }
        if (s->read_bytes >= 0) {
            d->read_bytes += s->read_bytes;
            d->read_step_ms += s->step_ms * s->read_ranks;
            d->read_n += s->read_ranks;
        }
    }
}

/* The run's fault figures (db_elastic_fig): each one it has, as a sample. */
static void results_elastic_run(struct results_train *r, const struct db_data_run *run)
{
    const struct db_elastic_fig *f = &run->elastic;
    /* a fault-free run has no fault's figures; one that is not elastic no generations */
    double no = -1, v[RE_N] = {f->elastic ? (double)f->generations : -1,
                               f->faulted ? f->detect_s : no,
                               f->faulted ? f->resume_s : no,
                               f->faulted ? f->lost_steps : no,
                               f->faulted ? f->thr_before : no,
                               f->faulted ? f->thr_during : no,
                               f->faulted ? f->thr_after : no};
    for (int i = 0; i < RE_N; i++)
        if (v[i] >= 0)
            results_push(&r->el[i], v[i]);
}

/* Adds one repeat's per-class accuracies (a JSON array, or null when none was reported). */
static void results_classes_add(struct results_classes *c, const json_t *arr)
{
    int m = json_is_array(arr) ? (int)json_array_size(arr) : 0;
    if (m == 0 || c->k < 0)
        return;
    if (c->k == 0) {
        c->sum = calloc((size_t)m, sizeof *c->sum);
        c->n = calloc((size_t)m, sizeof *c->n);
        c->k = c->sum && c->n ? m : -1; /* out of memory: no figure rather than a wrong one */
    }
    if (c->k != m) {
        c->k = -1;
        return;
    }
    for (int i = 0; i < m; i++) {
        const json_t *v = json_array_get(arr, (size_t)i);
        if (json_is_number(v)) {
            c->sum[i] += json_number_value(v);
            c->n[i] += 1;
        }
    }
}

/* The group's cell: owned "a;b;;d" (4 decimals, empty for a class with no figure), or NULL
 * (null) when there is none. */
static json_t *results_classes_cell(const struct results_classes *c)
{
    if (c->k <= 0)
        return NULL;
    struct buf b = {0};
    char one[32];
    int rc = 0;
    for (int i = 0; i < c->k; i++) {
        one[0] = 0;
        if (c->n[i] > 0)
            snprintf(one, sizeof one, "%.4f", c->sum[i] / c->n[i]);
        rc |= (i ? buf_append_str(&b, ";") : 0) | buf_append_str(&b, one);
    }
    json_t *out = rc == 0 && b.data ? json_stringn((const char *)b.data, b.len) : NULL;
    buf_free(&b);
    return out;
}

static void results_train_run(struct results_train *r, const struct db_data_run *run)
{
    results_resources_run(r, run);
    results_elastic_run(r, run);
    results_tta_run(&r->tta, run);
    results_pipe_run(&r->pipe, run);
    results_data_run(&r->data, run);
    int64_t w = run->world_size;
    r->world = r->world == 0 || r->world == w ? w : -1;
    /* every stage of a pipeline's replica reports the replica's batch: a step's global
     * batch is the replicas', batch_size * world_size / pipeline */
    int64_t stages = results_spec_int(run->spec, "pipeline", 1);
    double per_sample = stages > 1 ? 1.0 / (double)stages : 1.0;
    int repeat = -1;
    double samples = 0, ms = 0;
    for (size_t i = 0; i < run->nsteps; i++) {
        const struct db_step_row *s = &run->steps[i];
        if (s->repeat != repeat && ms > 0)
            results_push(&r->thr, samples / (ms / 1000.0));
        if (s->repeat != repeat) {
            samples = ms = 0;
            results_push_idx(&r->starts, r->step.n);
        }
        repeat = s->repeat;
        samples += (double)s->samples * per_sample;
        ms += s->step_ms;
        results_push(&r->step, s->step_ms);
        for (int p = 0; p < PHASE_N; p++) {
            if (s->phase_ms[p] < 0) /* not observable by this run's engine: null, not 0 */
                continue;
            r->phase[p] += s->phase_ms[p];
            r->phase_n[p]++;
        }
        r->straggler += s->step_ms - s->fastest_ms;
        r->nsteps++;
    }
    if (ms > 0)
        results_push(&r->thr, samples / (ms / 1000.0));
    /* the last epoch of each repeat carries the final accuracy */
    for (size_t k = 0; k < run->nepochs; k++) {
        const struct report_epoch *ep = &run->epochs[k];
        if (k + 1 < run->nepochs && run->epochs[k + 1].repeat == ep->repeat)
            continue;
        if (ep->test_acc >= 0) /* -1: no test split was evaluated */
            results_push(&r->acc, ep->test_acc);
        results_classes_add(&r->cls, ep->test_acc_per_class);
        if (ep->train_loss >= 0) /* -1: the epoch trained on no sample */
            results_push(&r->loss, ep->train_loss);
    }
}

struct results_train_group {
    struct stats_summary thr;
    int64_t world;
};

/* Speed-up against base and its 95% half-width into *ci. is_base: g is its own baseline
 * (world_size 1), whose speed-up is exactly 1 by definition: its interval is null, not 0,
 * because no interval was computed (0 would read as "measured with no spread"), and never
 * the nonzero width that comparing a throughput with itself as if independent would give.
 * Null too where either throughput has no interval (one repeat): hypot(0, 0) is no CI. */
static double results_speedup(const struct stats_summary *thr,
                              const struct results_train_group *base, bool is_base, double *ci)
{
    *ci = NAN;
    if (!base || base->thr.n == 0 || thr->n == 0)
        return NAN;
    if (is_base)
        return 1.0;
    double speedup = thr->mean / base->thr.mean;
    /* relative 95% half-widths add in quadrature for a ratio of independent means */
    if (isfinite(thr->ci95) && isfinite(base->thr.ci95))
        *ci = speedup * hypot(thr->ci95 / thr->mean, base->thr.ci95 / base->thr.mean);
    return speedup;
}

/* bubble_fraction (idle time over step time, every rank's non-warm-up steps pooled),
 * bubble_theory ((P - 1) / (M + P - 1), GPipe's and 1F1B's bubble at P stages and M
 * micro-batches of equal cost), p2p_ms and p2p_bytes (mean per rank and step): null for a
 * group without a pipeline; the theory null too where the group pools different P or M. */
static void results_put_pipe(struct results_table *t, const struct results_pipe *p)
{
    bool pipe = p->stages > 1 || p->stages == -1;
    double stages = (double)p->stages, micro = (double)p->micro;
    double theory = p->stages > 1 && p->micro >= 1 ? (stages - 1) / (micro + stages - 1) : NAN;
    results_put(t, COL_BUBBLE_FRACTION,
                pipe && p->bubble_step_ms > 0 ? results_num(p->bubble_ms / p->bubble_step_ms)
                                              : NULL);
    results_put(t, COL_BUBBLE_THEORY, results_num(theory));
    results_put(t, COL_P2P_MS,
                pipe && p->p2p_n ? results_num(p->p2p_ms / (double)p->p2p_n) : NULL);
    results_put(t, COL_P2P_BYTES,
                pipe && p->p2p_bytes_n ? results_num(p->p2p_bytes / (double)p->p2p_bytes_n)
                                       : NULL);
}

/* data_fraction (the ranks' mean data wait over the step time, pooled), input_bound (the
 * data wait is at least RESULTS_INPUT_BOUND of the step: the loader did not keep up, and a
 * faster model or more ranks would not make the run faster), loader_cpu_ms (the loader
 * threads' CPU time per rank and step) and read_mbps (what a rank read from storage, MB/s
 * of its step time): null where nothing reported them. */
static void results_put_data(struct results_table *t, const struct results_data *d)
{
    double frac = d->steps && d->step_ms > 0 ? d->data_ms / d->step_ms : NAN;
    results_put(t, COL_DATA_FRACTION, results_num(frac));
    results_put(t, COL_INPUT_BOUND,
                isfinite(frac) ? json_boolean(frac >= RESULTS_INPUT_BOUND) : NULL);
    results_put(t, COL_LOADER_CPU_MS,
                d->loader_n ? results_num(d->loader_cpu_ms / (double)d->loader_n) : NULL);
    results_put(t, COL_READ_MBPS,
                d->read_n && d->read_step_ms > 0
                    ? results_num(d->read_bytes / 1e6 / (d->read_step_ms / 1e3))
                    : NULL);
}

/* Memory (bytes: mean over repeats, with its interval where repeats differ, e.g. the
 * peak resident set) and utilisation, each with its sample count. */
static void results_put_resources(struct results_table *t, struct results_train *r)
{
    for (int i = 0; i < RM_N; i++) {
        struct stats_summary s;
        results_stats_of(&r->mem[i], &s);
        results_put_stats(t, (enum column)(COL_PARAMS_BYTES + i), &s);
    }
    for (int i = 0; i < RU_N; i++) {
        struct stats_summary s;
        results_stats_of(&r->use[i], &s);
        results_put_stats(t, (enum column)(COL_CPU_UTIL + i), &s);
    }
}

/* What a fault cost the group's runs: mean over the runs that had each figure. */
static void results_put_elastic(struct results_table *t, struct results_train *r)
{
    for (int i = 0; i < RE_N; i++) {
        struct stats_summary s;
        results_stats_of(&r->el[i], &s);
        results_put_stats(t, (enum column)(COL_GENERATIONS + i), &s);
    }
}

/* target_accuracy (null: not asked, or different across the group), the time and epochs
 * of the repeats that reached it, and how many did of how many. */
static void results_put_tta(struct results_table *t, struct results_tta *a)
{
    bool asked = a->target > 0;
    if (!asked) /* a target that differs across the group: no figure pools them */
        a->secs.n = a->epochs.n = 0;
    struct stats_summary secs, epochs;
    results_stats_of(&a->secs, &secs);
    results_stats_of(&a->epochs, &epochs);
    results_put(t, COL_TARGET_ACCURACY, asked ? json_real(a->target) : NULL);
    results_put_stats(t, COL_TTA_S, &secs);
    results_put_stats(t, COL_TTA_EPOCHS, &epochs);
    results_put(t, COL_TTA_REACHED, asked ? json_integer((json_int_t)a->reached) : NULL);
    results_put(t, COL_TTA_REPEATS, asked ? json_integer((json_int_t)a->repeats) : NULL);
}

/* The model's prediction for a group (model.h): NULL note = predicted. */
struct results_pred {
    struct perf_step st, one; /* at the group's world size, and at one rank */
    double samples;           /* global batch of a step */
    double replicas_share;    /* of the world that are replicas: 1, a pipeline's 1 / P */
    double bubble;            /* a pipeline's simulated bubble; NaN: no pipeline */
    int64_t base_run;
    int64_t calib_id;        /* the calibration applied (calib.h), 0: none */
    char *fits;              /* owned: "id,id" of the fits used */
    const char *note;        /* why there is none */
    char note_buf[256];      /* note's text when composed (across nodes) */
    struct perf_range range; /* what the fits used and the base cover */
    bool extrapolated;       /* the group lies outside range */
};

/* The network group g's run used (fits, used: the caller's): its own placement's fits, and
 * across nodes the link's and one node's (intra, the caller's). */
static void results_net_of(const struct db_data_run *run, const struct perf_fit *fits,
                           size_t nfits, bool *used, struct perf_net *net,
                           struct perf_net *intra)
{
    model_net_of(run->spec, run->network_profile, run->nodes, fits, nfits, used, net);
    int per_node = run->ranks_per_node > 0
                       ? run->ranks_per_node
                       : (run->world_size + run->nodes - 1) / (run->nodes > 0 ? run->nodes : 1);
    model_net_across(net, per_node, intra);
}

/* The range of p's fits (used) and base b, and whether run lies beyond it. */
static void results_pred_range(struct results_pred *p, const struct db_data_run *run,
                               const struct db_data_run *b, const struct perf_fit *fits,
                               size_t nfits, const bool *used)
{
    perf_range_of(fits, nfits, used, b->world_size, &p->range);
    p->extrapolated = perf_range_extrapolates(&p->range, run->world_size, run->nodes);
}

/* The batch of a step of run, per replica (accumulation's micro-batches counted). */
static double results_pred_samples(const struct db_data_run *run)
{
    double batch = json_number_value(spec_field_value(run->spec, "batch_size"));
    double accum = json_number_value(spec_field_value(run->spec, "accumulate"));
    return batch * (accum >= 1 ? accum : 1);
}

/* The pipe step's figures as a results row's pred_* read them (perf_step). */
static void results_pred_from_pipe(const struct perf_pipe_step *ps, struct perf_step *st)
{
    *st = (struct perf_step){.step_s = ps->step_s,
                             .data_s = ps->data_s,
                             .forward_s = ps->forward_s,
                             .backward_s = ps->backward_s,
                             .optimizer_s = ps->optimizer_s,
                             .comm_s = ps->exposed_s,
                             .exposed_s = ps->exposed_s,
                             .contention = ps->contention,
                             .overlap = NAN};
}

/* A pipeline group (spec pipeline > 1): its schedule simulated from rank 0's layer profile
 * (model_pipe.h); one rank as perf_simulate predicts it, for the efficiency. */
static void results_predict_pipe(const struct db_data_run *run, const struct db_data_run *b,
                                 const struct perf_fit *fits, size_t nfits,
                                 const struct calib_set *cals, struct results_pred *p)
{
    bool *used = calloc(nfits + 1, sizeof *used);
    struct perf_pipe_step ps;
    p->base_run = b->id;
    if (!used) {
        p->note = "out of memory";
        return;
    }
    if (model_pipe_point(run, b, fits, nfits, used, cals, &ps, &p->one, &p->calib_id,
                         &p->note) == 0) {
        results_pred_from_pipe(&ps, &p->st);
        p->bubble = ps.bubble;
        p->replicas_share = 1.0 / results_spec_int(run->spec, "pipeline", 1);
        p->samples = results_pred_samples(run);
        p->fits = model_used_ids(fits, nfits, used);
        results_pred_range(p, run, b, fits, nfits, used);
    }
    free(used);
}

/* Why a run of spec's framework engine is not simulated (model_exchange_of), into *note;
 * ddpbench's and the simulated engines' leave it NULL. */
static void results_engine_note(const json_t *spec, const char **note)
{
    const char *engine = json_string_value(spec_field_value(spec, "engine"));
    const char *strategy = json_string_value(spec_field_value(spec, "strategy"));
    enum perf_exchange x;
    model_exchange_of(engine, strategy ? strategy : "ddp", &x, note);
}

/* Predicts group g from the one-rank group base (its first run that reported gradient
 * readiness) with fits. */
static void results_predict(const struct results_group *g, const struct results_group *base,
                            const struct perf_fit *fits, size_t nfits,
                            const struct calib_set *cals, struct results_pred *p)
{
    memset(p, 0, sizeof *p);
    const struct db_data_run *run = g->n ? g->runs[0] : NULL, *b = NULL;
    for (size_t i = 0; base && i < base->n && !b; i++)
        if (base->runs[i]->ngrads > 0)
            b = base->runs[i];
    p->bubble = NAN;
    p->replicas_share = 1;
    p->note = run && json_is_true(spec_field_value(run->spec, "calibrate"))
                  ? "a calibration's ranks exchange nothing: it is stored as the node's "
                    "contention (GET /v1/calibrations), not predicted"
              : !run || !base ? "no one-rank run to predict from"
              : !b            ? "the one-rank run reported no gradient readiness"
              : nfits == 0    ? model_no_fit_note(run->spec)
                              : NULL;
    const char *engine_note = NULL; /* an engine the model does not simulate says so first */
    if (run && results_spec_int(run->spec, "pipeline", 1) <= 1)
        results_engine_note(run->spec, &engine_note);
    if (engine_note)
        p->note = engine_note;
    if (p->note)
        return;
    if (results_spec_int(run->spec, "pipeline", 1) > 1) {
        results_predict_pipe(run, b, fits, nfits, cals, p);
        return;
    }
    struct model_base mb;
    if (model_base_of(b, &mb, &p->note) < 0)
        return;
    bool *used = calloc(nfits + 1, sizeof *used);
    struct perf_setup s;
    model_setup_calibrated(run, run->world_size, run->ranks_per_node, b, cals, &s,
                           &p->calib_id);
    struct perf_net net, intra;
    results_net_of(run, fits, nfits, used, &net, &intra);
    struct perf_setup s1 = s;
    s1.world = 1;
    s1.compute_scale = 1;
    s1.has_contention = false;
    if (!used || perf_simulate(&mb.b, &s, &net, &p->st) < 0 ||
        perf_simulate(&mb.b, &s1, &net, &p->one) < 0) {
        p->note = "no network fit covers this backend, device, network and placement";
        if (used && net.intra) { /* across nodes: say which fit is missing */
            model_across_note(&net, p->note_buf, sizeof p->note_buf);
            p->note = p->note_buf;
        }
    }
    if (used)
        results_pred_range(p, run, b, fits, nfits, used);
    p->base_run = b->id;
    p->fits = used ? model_used_ids(fits, nfits, used) : NULL;
    p->samples = results_pred_samples(run);
    free(used);
    model_base_cleanup(&mb);
}

/* pred_contention and pred_calibration (issue 35): the compute slowdown the prediction
 * applied and the calibration it came from (null: the core-share rule, or none). */
static void results_put_contention(struct results_table *t, const struct results_pred *p)
{
    results_put(t, COL_PRED_CONTENTION, p ? results_num(p->st.contention) : NULL);
    results_put(t, COL_PRED_CALIBRATION,
                p && p->calib_id > 0 ? json_integer((json_int_t)p->calib_id) : NULL);
}

/* pred_* columns: the prediction and its error against what was measured (relative for
 * times and rates, a difference for overlap, which is already a fraction). */
static void results_put_pred(struct results_table *t, const struct results_pred *p,
                             int64_t world, double step_ms, double thr, double eff,
                             double overlap)
{
    bool ok = p && !p->note;
    double w = world > 0 ? (double)world : NAN;
    double pstep = ok ? p->st.step_s * 1e3 : NAN;
    double pthr = ok ? p->samples * w * p->replicas_share / p->st.step_s : NAN;
    double peff = ok ? pthr / (w * p->samples / p->one.step_s) : NAN;
    double pover = ok ? p->st.overlap : NAN;
    const double ph[PHASE_N] = {[PHASE_DATA] = ok ? p->st.data_s : NAN,
                                [PHASE_FORWARD] = ok ? p->st.forward_s : NAN,
                                [PHASE_BACKWARD] = ok ? p->st.backward_s : NAN,
                                [PHASE_COMM] = ok ? p->st.comm_s : NAN,
                                [PHASE_COMM_EXPOSED] = ok ? p->st.exposed_s : NAN,
                                [PHASE_OPTIMIZER] = ok ? p->st.optimizer_s : NAN};
    results_put(t, COL_PRED_STEP_MS, results_num(pstep));
    for (int i = 0; i < PHASE_N; i++) {
        results_put(t, COLUMN_OF_PRED_PHASE(i), results_num(ph[i] * 1e3));
    }
    results_put(t, COL_PRED_THROUGHPUT, results_num(pthr));
    results_put(t, COL_PRED_EFFICIENCY, results_num(peff));
    results_put(t, COL_PRED_OVERLAP, results_num(pover));
    results_put(t, COL_PRED_STEP_ERR, results_num((pstep - step_ms) / step_ms));
    results_put(t, COL_PRED_THROUGHPUT_ERR, results_num((pthr - thr) / thr));
    results_put(t, COL_PRED_EFFICIENCY_ERR, results_num((peff - eff) / eff));
    results_put(t, COL_PRED_OVERLAP_ERR, results_num(pover - overlap));
    results_put(t, COL_PRED_BASE_RUN,
                p && p->base_run > 0 ? json_integer((json_int_t)p->base_run) : NULL);
    results_put(t, COL_PRED_FITS, ok && p->fits ? json_string(p->fits) : NULL);
    results_put(t, COL_PRED_MODEL_VERSION, ok ? json_integer(PERF_MODEL_VERSION) : NULL);
    results_put(t, COL_PRED_NOTE, ok ? NULL : json_string(p ? p->note : "not predicted"));
    char range[128];
    if (ok)
        perf_range_text(&p->range, range, sizeof range);
    results_put(t, COL_PRED_EXTRAPOLATED, ok ? json_boolean(p->extrapolated) : NULL);
    results_put(t, COL_PRED_RANGE, ok ? json_string(range) : NULL);
    results_put(t, COL_PRED_BUBBLE, ok ? results_num(p->bubble) : NULL);
    results_put_contention(t, ok ? p : NULL);
}

const char *results_pred_verdict(double err, double noise)
{
    if (!isfinite(err) || !isfinite(noise))
        return NULL;
    err = fabs(err);
    if (noise >= err)
        return "within_noise";
    return err <= RESULTS_PRED_TOLERANCE ? "hit" : "miss";
}

/* The pred_verdict cell: the step error (pred_step_err's) judged against the measured
 * step's own interval, step_ci over step_ms. */
static void results_put_verdict(struct results_table *t, const struct results_pred *p,
                                double step_ms, double step_ci)
{
    double pstep = p && !p->note ? p->st.step_s * 1e3 : NAN;
    const char *v = results_pred_verdict((pstep - step_ms) / step_ms, step_ci / step_ms);
    results_put(t, COL_PRED_VERDICT, v ? json_string(v) : NULL);
}

static void results_train_row(struct results_table *t, const struct results_group *g,
                              struct results_train *r, const struct results_train_group *base,
                              bool is_base, const struct results_pred *pred)
{
    struct stats_summary thr, step, acc, loss;
    results_stats_of(&r->thr, &thr);
    /* before summarizing sorts the steps: the interval needs them in order (stats.h) */
    double step_ci = stats_ci95_series(r->step.v, r->step.n, r->starts.v, r->starts.n);
    results_stats_of(&r->step, &step);
    step.ci95 = step_ci;
    results_stats_of(&r->acc, &acc);
    results_stats_of(&r->loss, &loss);
    results_begin_row(t, g->key);
    results_put(t, COL_WORLD_SIZE, r->world > 0 ? json_integer(r->world) : NULL);
    results_put(t, COL_RUNS, json_integer((json_int_t)g->n));
    results_put_stats(t, COL_THROUGHPUT, &thr);
    results_put_stats(t, COL_STEP_MS, &step);
    double n = r->nsteps ? (double)r->nsteps : NAN;
    double mean[PHASE_N];
    for (int p = 0; p < PHASE_N; p++) {
        mean[p] = r->phase_n[p] ? r->phase[p] / (double)r->phase_n[p] : NAN;
        results_put(t, COLUMN_OF_PHASE(p), results_num(mean[p]));
    }
    /* exposed includes the hand-off to the communication thread, so it can exceed the
     * time the operations ran by a few microseconds: nothing overlapped is 0, not less */
    /* one rank exchanges nothing: whatever its comm phases timed (hand-offs) is no
     * communication that could overlap, so its overlap is null, not a percentage */
    double comm = mean[PHASE_COMM], exposed = mean[PHASE_COMM_EXPOSED];
    double overlap = comm > 0 && isfinite(exposed) && r->world != 1
                         ? fmax(0.0, 1.0 - exposed / comm)
                         : NAN;
    results_put(t, COL_OVERLAP, results_num(overlap));
    results_put(t, COL_STRAGGLER_MS, results_num(r->straggler / n));
    results_put_pipe(t, &r->pipe);
    results_put_data(t, &r->data);
    double speedup_ci = NAN;
    double speedup = r->world > 0 ? results_speedup(&thr, base, is_base, &speedup_ci) : NAN;
    results_put(t, COL_SPEEDUP, results_num(speedup));
    results_put(t, COL_SPEEDUP_CI95, results_num(speedup_ci));
    results_put(t, COL_EFFICIENCY, results_num(speedup / (double)r->world));
    results_put_pred(t, pred, r->world, step.mean, thr.mean, speedup / (double)r->world,
                     overlap);
    results_put_verdict(t, pred, step.mean, step.ci95);
    results_put_stats(t, COL_TEST_ACC, &acc);
    results_put(t, COL_TEST_ACC_PER_CLASS, results_classes_cell(&r->cls));
    results_put_stats(t, COL_TRAIN_LOSS, &loss);
    results_put_resources(t, r);
    results_put_tta(t, &r->tta);
    results_put_elastic(t, r);
    results_end_row(t);
}

/* The group that differs from key only by having world_size 1 (and so one node with one
 * rank: the placement of N ranks across nodes is what speed-up measures against it). A
 * pipeline's base is the same one-rank run: one rank has no pipeline (stages 1, one
 * micro-batch), so those fields may differ, and its schedule too where no one-rank group
 * has the same (a schedule means nothing to one stage). */
static size_t results_find_base(const struct results_groups *gs, const json_t *key,
                                const struct results_train_group *tg, bool any_share)
{
    /* the order matters: the last are dropped only when asked (any_share, a second pass) */
    static const char *const scale[] = {"world_size",    "nodes",         "ranks_per_node",
                                        "pipeline",      "micro_batches", "schedule",
                                        "oversubscribed"};
    for (int pass = 0; pass < 2; pass++) {
        /* the model accounts for CPUs shared (model.h): its base may differ in that too */
        const char *drop[sizeof scale / sizeof *scale];
        size_t n = 0;
        for (size_t i = 0; i < sizeof scale / sizeof *scale; i++)
            if ((strcmp(scale[i], "schedule") != 0 || pass == 1) &&
                (strcmp(scale[i], "oversubscribed") != 0 || any_share))
                drop[n++] = scale[i];
        for (size_t b = 0; b < gs->n; b++)
            if (tg[b].world == 1 && model_same_but(gs->g[b].key, key, drop, n))
                return b;
    }
    return gs->n;
}

static int results_training(struct results_table *t, const struct results_groups *gs,
                            const struct perf_fit *fits, size_t nfits,
                            const struct calib_set *cals, struct err *e)
{
    struct results_train *rs = calloc(gs->n + 1, sizeof *rs);
    struct results_train_group *tg = calloc(gs->n + 1, sizeof *tg);
    if (!rs || !tg) {
        free(rs);
        free(tg);
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    }
    for (size_t k = 0; k < gs->n; k++) {
        for (size_t i = 0; i < gs->g[k].n; i++)
            results_train_run(&rs[k], gs->g[k].runs[i]);
        double *copy = malloc((rs[k].thr.n + 1) * sizeof *copy);
        memcpy(copy, rs[k].thr.v, rs[k].thr.n * sizeof *copy);
        stats_summarize(copy, rs[k].thr.n, &tg[k].thr);
        free(copy);
        tg[k].world = rs[k].world;
    }
    for (size_t k = 0; k < gs->n; k++) {
        size_t b = results_find_base(gs, gs->g[k].key, tg, false);
        size_t mb = results_find_base(gs, gs->g[k].key, tg, true);
        struct results_pred pred;
        results_predict(&gs->g[k], mb < gs->n ? &gs->g[mb] : NULL, fits, nfits, cals, &pred);
        results_train_row(t, &gs->g[k], &rs[k], b < gs->n ? &tg[b] : NULL, b == k, &pred);
        free(pred.fits);
    }
    for (size_t k = 0; k < gs->n; k++) {
        free(rs[k].thr.v);
        free(rs[k].step.v);
        free(rs[k].acc.v);
        free(rs[k].loss.v);
        free(rs[k].cls.sum);
        free(rs[k].cls.n);
        free(rs[k].starts.v);
        for (int i = 0; i < RM_N; i++)
            free(rs[k].mem[i].v);
        for (int i = 0; i < RU_N; i++)
            free(rs[k].use[i].v);
        for (int i = 0; i < RE_N; i++)
            free(rs[k].el[i].v);
        free(rs[k].tta.secs.v);
        free(rs[k].tta.epochs.v);
    }
    free(rs);
    free(tg);
    return 0;
}

/* --- entry points ------------------------------------------------------------------------- */

/* A table with no row (a collective experiment none of whose runs has finished) still has
 * all its columns, so its CSV has a header (pandas and csv readers fail on an empty file):
 * they are those of a row built from no figures, which is then dropped. One row builder
 * for both, so the columns cannot disagree with a real row's. */
static void results_columns_only(struct results_table *t, const json_t *fields, bool collective)
{
    struct results_group g = {results_key_of(NULL, fields), NULL, 0};
    if (collective) {
        struct report_collective none = {0};
        results_collective_row(t, &g, &none);
    } else {
        struct results_train none = {0};
        results_train_row(t, &g, &none, NULL, false, NULL);
    }
    json_array_clear(t->rows);
    json_decref(g.key);
}

json_t *results_build(const struct db_experiment_data *data, const char *const *group_by,
                      size_t ngroup, struct err *e)
{
    return results_build_with(data, group_by, ngroup, NULL, 0, e);
}

json_t *results_build_with(const struct db_experiment_data *data, const char *const *group_by,
                           size_t ngroup, const struct perf_fit *fits, size_t nfits,
                           struct err *e)
{
    return results_build_calibrated(data, group_by, ngroup, fits, nfits, NULL, e);
}

json_t *results_build_calibrated(const struct db_experiment_data *data,
                                 const char *const *group_by, size_t ngroup,
                                 const struct perf_fit *fits, size_t nfits,
                                 const struct calib_set *cals, struct err *e)
{
    json_t *fields = results_fields(data, group_by, ngroup, e);
    if (!fields)
        return NULL;
    struct results_groups gs = {0};
    struct results_table t = {json_array(), json_array(), NULL};
    size_t i;
    json_t *f;
    json_array_foreach(fields, i, f) json_array_append(t.columns, f);
    bool collective = strcmp(data->workload, "collective") == 0;
    int rc = results_group_runs(data, fields, &gs, e);
    if (rc == 0 && collective)
        rc = results_collectives(&t, &gs, e);
    else if (rc == 0)
        rc = results_training(&t, &gs, fits, nfits, cals, e);
    if (rc == 0 && json_array_size(t.rows) == 0)
        results_columns_only(&t, fields, collective);
    results_groups_free(&gs);
    if (rc < 0) {
        json_decref(fields);
        json_decref(t.columns);
        json_decref(t.rows);
        return NULL;
    }
    return json_pack("{s:I, s:s, s:o, s:o, s:o}", "experiment", (json_int_t)data->id,
                     "workload", data->workload, "group_by", fields, "columns", t.columns,
                     "rows", t.rows);
}

static int results_csv_cell(struct buf *b, const json_t *v)
{
    if (!v || json_is_null(v))
        return 0;
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (!strpbrk(s, ",\"\r\n"))
            return buf_append_str(b, s);
        int rc = buf_append_str(b, "\"");
        for (const char *p = s; *p && rc == 0; p++)
            rc = *p == '"' ? buf_append_str(b, "\"\"") : buf_append(b, p, 1);
        return rc ? rc : buf_append_str(b, "\"");
    }
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    int rc = text ? buf_append_str(b, text) : -1;
    free(text);
    return rc;
}

char *results_csv(const json_t *table, size_t *len, struct err *e)
{
    struct buf b;
    buf_init(&b);
    const json_t *cols = json_object_get(table, "columns");
    int rc = 0;
    size_t i, r;
    json_t *c, *row;
    json_array_foreach(cols, i, c)
        rc |= (i ? buf_append_str(&b, ",") : 0) | results_csv_cell(&b, c);
    rc |= buf_append_str(&b, "\r\n");
    json_array_foreach(json_object_get(table, "rows"), r, row)
    {
        json_array_foreach(cols, i, c)
            rc |= (i ? buf_append_str(&b, ",") : 0) |
                  results_csv_cell(&b, json_object_get(row, json_string_value(c)));
        rc |= buf_append_str(&b, "\r\n");
    }
    if (rc || buf_append(&b, "", 1) < 0) {
        buf_free(&b);
        err_set(e, ERR_NOMEM, NULL, "out of memory");
        return NULL;
    }
    *len = b.len - 1;
    return (char *)b.data;
}
