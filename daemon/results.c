/* results: see results.h. */
#include "daemon/results.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/stats.h"

/* --- statistics ------------------------------------------------------------------------ */

/* --- a growable vector of doubles --------------------------------------------------------- */

struct results_vec {
    double *v;
    size_t n, cap;
};

static int results_push(struct results_vec *x, double d)
{
    if (x->n == x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 16;
        double *g = realloc(x->v, cap * sizeof *g);
        if (!g)
            return -1;
        x->v = g;
        x->cap = cap;
    }
    x->v[x->n++] = d;
    return 0;
}

/* --- table building ------------------------------------------------------------------------ */

struct results_table {
    json_t *columns; /* array of names, in order */
    json_t *rows;    /* array of objects */
    json_t *row;     /* the row being built (owned until added) */
};

static void results_put(struct results_table *t, const char *name, json_t *v)
{
    if (json_array_size(t->rows) == 0) { /* the first row defines the columns */
        bool known = false;
        size_t i;
        json_t *c;
        json_array_foreach(t->columns, i, c) known = known || strcmp(json_string_value(c), name) == 0;
        if (!known)
            json_array_append_new(t->columns, json_string(name));
    }
    json_object_set_new(t->row, name, v ? v : json_null());
}

static json_t *results_num(double d) { return isfinite(d) ? json_real(d) : json_null(); }

/* name_mean, name_ci95, name_median, name_p95, name_min, name_max, name_n (as chosen). */
static void results_put_stats(struct results_table *t, const char *name,
                              const struct stats_summary *s, bool spread)
{
    char key[96];
    bool none = s->n == 0;
    snprintf(key, sizeof key, "%s_mean", name);
    results_put(t, key, none ? NULL : results_num(s->mean));
    snprintf(key, sizeof key, "%s_ci95", name);
    results_put(t, key, none || s->n < 2 ? NULL : results_num(s->ci95));
    if (spread) {
        snprintf(key, sizeof key, "%s_median", name);
        results_put(t, key, none ? NULL : results_num(s->median));
        snprintf(key, sizeof key, "%s_p95", name);
        results_put(t, key, none ? NULL : results_num(s->p95));
        snprintf(key, sizeof key, "%s_min", name);
        results_put(t, key, none ? NULL : results_num(s->min));
        snprintf(key, sizeof key, "%s_max", name);
        results_put(t, key, none ? NULL : results_num(s->max));
    }
    snprintf(key, sizeof key, "%s_n", name);
    results_put(t, key, json_integer((json_int_t)s->n));
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
    json_object_foreach((json_t *)key, k, v) results_put(t, k, json_incref(v));
}

static void results_end_row(struct results_table *t)
{
    json_array_append_new(t->rows, t->row);
    t->row = NULL;
}

/* --- groups ------------------------------------------------------------------------------- */

struct results_group {
    json_t *key;  /* owned: {field: value} */
    json_t *runs; /* owned array of run objects (references) */
};

struct results_groups {
    struct results_group *g;
    size_t n;
};

static void results_groups_free(struct results_groups *gs)
{
    for (size_t i = 0; i < gs->n; i++) {
        json_decref(gs->g[i].key);
        json_decref(gs->g[i].runs);
    }
    free(gs->g);
}

static json_t *results_key_of(const json_t *run, const json_t *fields)
{
    json_t *key = json_object();
    const json_t *spec = json_object_get(run, "spec");
    size_t i;
    json_t *f;
    json_array_foreach(fields, i, f)
    {
        json_t *v = json_object_get(spec, json_string_value(f));
        json_object_set(key, json_string_value(f), v ? v : json_null());
    }
    /* always part of the key, whatever group_by says: figures of ranks sharing one GPU
     * are never pooled with one-rank-per-GPU figures (nor used as their baseline) */
    json_object_set_new(key, "emulated", json_boolean(json_is_true(json_object_get(run,
                                                                                "emulated"))));
    return key;
}

static int results_group_runs(const json_t *runs, const json_t *fields, struct results_groups *gs,
                              struct err *e)
{
    size_t i;
    json_t *run;
    gs->g = calloc(json_array_size(runs) + 1, sizeof *gs->g);
    gs->n = 0;
    if (!gs->g)
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    json_array_foreach(runs, i, run)
    {
        json_t *key = results_key_of(run, fields);
        size_t k = 0;
        while (k < gs->n && !json_equal(gs->g[k].key, key))
            k++;
        if (k == gs->n) {
            gs->g[k].key = key;
            gs->g[k].runs = json_array();
            gs->n++;
        } else {
            json_decref(key);
        }
        json_array_append(gs->g[k].runs, run);
    }
    return 0;
}

/* The fields to group by: as asked (each must exist in the specs), or the swept ones. */
static json_t *results_fields(const json_t *runs, const char *const *group_by, size_t ngroup,
                              struct err *e)
{
    json_t *fields = json_array();
    const json_t *first = json_array_get(runs, 0);
    if (ngroup == 0) {
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(first, "params"), k, v)
            json_array_append_new(fields, json_string(k));
        return fields;
    }
    for (size_t i = 0; i < ngroup; i++) {
        if (first && !json_object_get(json_object_get(first, "spec"), group_by[i])) {
            json_decref(fields);
            err_set(e, ERR_INVALID, "group_by", "group_by: '%s' is not a field of this "
                    "experiment's specs", group_by[i]);
            return NULL;
        }
        json_array_append_new(fields, json_string(group_by[i]));
    }
    return fields;
}

/* --- collectives -------------------------------------------------------------------------- */

static bool results_same_point(const json_t *a, const json_t *b)
{
    static const char *const keys[] = {"op", "dtype", "redop", "inplace", "bytes"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (!json_equal(json_object_get(a, keys[i]), json_object_get(b, keys[i])))
            return false;
    return true;
}

/* One row for the point `like` (op, dtype, redop, inplace, bytes) over every run of g. */
static void results_collective_row(struct results_table *t, const struct results_group *g,
                                   const json_t *like)
{
    struct results_vec bus = {0}, alg = {0}, tim = {0};
    int64_t wrong = 0;
    char algos[64] = "";
    size_t i, j;
    json_t *run, *c;
    json_array_foreach(g->runs, i, run) json_array_foreach(json_object_get(run, "collectives"), j, c)
    {
        if (!results_same_point(c, like))
            continue;
        results_push(&bus, json_number_value(json_object_get(c, "busbw_gbs")));
        results_push(&alg, json_number_value(json_object_get(c, "algbw_gbs")));
        results_push(&tim, json_number_value(json_object_get(c, "time_us_median")));
        wrong += json_integer_value(json_object_get(c, "wrong"));
        const char *a = json_string_value(json_object_get(c, "algorithm"));
        if (a && !strstr(algos, a) && strlen(algos) + strlen(a) + 2 < sizeof algos)
            snprintf(algos + strlen(algos), sizeof algos - strlen(algos), "%s%s",
                     algos[0] ? "+" : "", a);
    }
    struct stats_summary sb, sa, st;
    results_stats_of(&bus, &sb);
    results_stats_of(&alg, &sa);
    results_stats_of(&tim, &st);
    results_begin_row(t, g->key);
    static const char *const keys[] = {"op", "dtype", "redop", "inplace", "bytes"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
        results_put(t, keys[k], json_incref(json_object_get(like, keys[k])));
    results_put(t, "algorithm", json_string(algos));
    results_put_stats(t, "busbw_gbs", &sb, true);
    results_put_stats(t, "algbw_gbs", &sa, false);
    results_put_stats(t, "time_us", &st, true);
    results_put(t, "wrong", json_integer(wrong));
    results_end_row(t);
    free(bus.v);
    free(alg.v);
    free(tim.v);
}

static void results_collectives(struct results_table *t, const struct results_groups *gs)
{
    for (size_t k = 0; k < gs->n; k++) {
        json_t *seen = json_array();
        size_t i, j;
        json_t *run, *c;
        json_array_foreach(gs->g[k].runs, i, run)
            json_array_foreach(json_object_get(run, "collectives"), j, c)
        {
            size_t s;
            json_t *x;
            bool dup = false;
            json_array_foreach(seen, s, x) dup = dup || results_same_point(x, c);
            if (!dup) {
                json_array_append(seen, c);
                results_collective_row(t, &gs->g[k], c);
            }
        }
        json_decref(seen);
    }
}

/* --- training ------------------------------------------------------------------------------ */

struct results_train {
    struct results_vec thr, step, acc, loss;
    double phase[6], straggler, comm, exposed;
    size_t nsteps;
    int64_t world; /* -1: differs across the group's runs */
};

static const char *const results_phases[] = {"data_ms", "forward_ms", "backward_ms", "comm_ms",
                                             "comm_exposed_ms", "optimizer_ms"};

static void results_train_run(struct results_train *r, const json_t *run)
{
    int64_t w = json_integer_value(json_object_get(run, "world_size"));
    r->world = r->world == 0 || r->world == w ? w : -1;
    const json_t *steps = json_object_get(run, "steps");
    int64_t repeat = -1;
    double samples = 0, ms = 0;
    size_t i;
    json_t *s;
    json_array_foreach(steps, i, s)
    {
        int64_t rp = json_integer_value(json_object_get(s, "repeat"));
        if (rp != repeat && ms > 0)
            results_push(&r->thr, samples / (ms / 1000.0));
        if (rp != repeat)
            samples = ms = 0;
        repeat = rp;
        double step_ms = json_number_value(json_object_get(s, "step_ms"));
        samples += (double)json_integer_value(json_object_get(s, "samples"));
        ms += step_ms;
        results_push(&r->step, step_ms);
        for (int p = 0; p < 6; p++)
            r->phase[p] += json_number_value(json_object_get(s, results_phases[p]));
        r->straggler += step_ms - json_number_value(json_object_get(s, "fastest_ms"));
        r->nsteps++;
    }
    if (ms > 0)
        results_push(&r->thr, samples / (ms / 1000.0));
    /* the last epoch of each repeat carries the final accuracy */
    const json_t *epochs = json_object_get(run, "epochs");
    for (size_t k = 0; k < json_array_size(epochs); k++) {
        const json_t *ep = json_array_get(epochs, k), *next = json_array_get(epochs, k + 1);
        if (next && json_equal(json_object_get(next, "repeat"), json_object_get(ep, "repeat")))
            continue;
        if (json_is_number(json_object_get(ep, "test_acc")))
            results_push(&r->acc, json_number_value(json_object_get(ep, "test_acc")));
        results_push(&r->loss, json_number_value(json_object_get(ep, "train_loss")));
    }
}

struct results_train_group {
    struct stats_summary thr;
    int64_t world;
};

static void results_train_row(struct results_table *t, const struct results_group *g,
                              struct results_train *r, const struct results_train_group *base)
{
    struct stats_summary thr, step, acc, loss;
    results_stats_of(&r->thr, &thr);
    results_stats_of(&r->step, &step);
    results_stats_of(&r->acc, &acc);
    results_stats_of(&r->loss, &loss);
    results_begin_row(t, g->key);
    results_put(t, "world_size", r->world > 0 ? json_integer(r->world) : NULL);
    results_put(t, "runs", json_integer((json_int_t)json_array_size(g->runs)));
    results_put_stats(t, "throughput", &thr, false);
    results_put_stats(t, "step_ms", &step, true);
    double n = r->nsteps ? (double)r->nsteps : NAN;
    for (int p = 0; p < 6; p++)
        results_put(t, results_phases[p], results_num(r->phase[p] / n));
    /* exposed includes the hand-off to the communication thread, so it can exceed the
     * time the operations ran by a few microseconds: nothing overlapped is 0, not less */
    double overlap = r->phase[3] > 0 ? fmax(0.0, 1.0 - r->phase[4] / r->phase[3]) : NAN;
    results_put(t, "overlap", results_num(overlap));
    results_put(t, "straggler_ms", results_num(r->straggler / n));
    bool have_base = base && base->thr.n > 0 && thr.n > 0 && r->world > 0;
    double speedup = have_base ? thr.mean / base->thr.mean : NAN;
    /* relative 95% half-widths add in quadrature for a ratio of independent means */
    double rel = have_base ? hypot(thr.ci95 / thr.mean, base->thr.ci95 / base->thr.mean) : NAN;
    results_put(t, "speedup", results_num(speedup));
    results_put(t, "speedup_ci95", results_num(speedup * rel));
    results_put(t, "efficiency", results_num(have_base ? speedup / (double)r->world : NAN));
    results_put_stats(t, "test_acc", &acc, false);
    results_put_stats(t, "train_loss", &loss, false);
    results_end_row(t);
}

/* The group that differs from key only by having world_size 1. */
static size_t results_find_base(const struct results_groups *gs, const json_t *key,
                                const struct results_train_group *tg)
{
    for (size_t b = 0; b < gs->n; b++) {
        if (tg[b].world != 1)
            continue;
        json_t *k1 = json_deep_copy(gs->g[b].key), *k2 = json_deep_copy(key);
        json_object_del(k1, "world_size");
        json_object_del(k2, "world_size");
        bool same = json_equal(k1, k2);
        json_decref(k1);
        json_decref(k2);
        if (same)
            return b;
    }
    return gs->n;
}

static int results_training(struct results_table *t, const struct results_groups *gs,
                            struct err *e)
{
    struct results_train *rs = calloc(gs->n + 1, sizeof *rs);
    struct results_train_group *tg = calloc(gs->n + 1, sizeof *tg);
    if (!rs || !tg) {
        free(rs);
        free(tg);
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    }
    for (size_t k = 0; k < gs->n; k++) {
        size_t i;
        json_t *run;
        json_array_foreach(gs->g[k].runs, i, run) results_train_run(&rs[k], run);
        double *copy = malloc((rs[k].thr.n + 1) * sizeof *copy);
        memcpy(copy, rs[k].thr.v, rs[k].thr.n * sizeof *copy);
        stats_summarize(copy, rs[k].thr.n, &tg[k].thr);
        free(copy);
        tg[k].world = rs[k].world;
    }
    for (size_t k = 0; k < gs->n; k++) {
        size_t b = results_find_base(gs, gs->g[k].key, tg);
        results_train_row(t, &gs->g[k], &rs[k], b < gs->n ? &tg[b] : NULL);
    }
    for (size_t k = 0; k < gs->n; k++) {
        free(rs[k].thr.v);
        free(rs[k].step.v);
        free(rs[k].acc.v);
        free(rs[k].loss.v);
    }
    free(rs);
    free(tg);
    return 0;
}

/* --- entry points ------------------------------------------------------------------------- */

json_t *results_build(const json_t *data, const char *const *group_by, size_t ngroup,
                      struct err *e)
{
    const json_t *runs = json_object_get(data, "runs");
    const char *workload = json_string_value(json_object_get(data, "workload"));
    json_t *fields = results_fields(runs, group_by, ngroup, e);
    if (!fields)
        return NULL;
    struct results_groups gs = {0};
    struct results_table t = {json_array(), json_array(), NULL};
    size_t i;
    json_t *f;
    json_array_foreach(fields, i, f) json_array_append(t.columns, f);
    int rc = results_group_runs(runs, fields, &gs, e);
    if (rc == 0 && workload && strcmp(workload, "collective") == 0)
        results_collectives(&t, &gs);
    else if (rc == 0)
        rc = results_training(&t, &gs, e);
    results_groups_free(&gs);
    if (rc < 0) {
        json_decref(fields);
        json_decref(t.columns);
        json_decref(t.rows);
        return NULL;
    }
    return json_pack("{s:O, s:s, s:o, s:o, s:o}", "experiment", json_object_get(data, "id"),
                     "workload", workload ? workload : "", "group_by", fields, "columns",
                     t.columns, "rows", t.rows);
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
