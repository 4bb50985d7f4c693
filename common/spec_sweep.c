/* spec_sweep: a normalized spec's sweep as runs: counting them, walking the points (the
 * cross product of the swept lists, last field fastest) and expanding them into
 * [{params, spec}] for spec_expand.
 *
 * "zip" (issue 33) is one more list of the cross product whose values are points, objects
 * of fields that vary together ({"engine": "horovod", "strategy": "horovod"}): a point
 * sets each of its fields, so a run's params carry the zipped fields by their own names
 * (results group by them as by any swept field) and never "zip" itself.
 *
 * Decision: one walk serves both the checks at every point (spec_checks.c) and the
 * expansion, so a point is resolved the same way when it is judged at submit and when it
 * runs: the top level with the point's values set over it. The count comes first and caps
 * both, so a sweep past the limit is refused before any point is built. */
#include <stdio.h>
#include <string.h>

#include "common/spec_table.h"

/* Advances the per-field value indexes, last field fastest; false after the last point. */
static bool spec_odometer_next(size_t *idx, json_t *const *vals, size_t n)
{
    for (size_t k = n; k-- > 0;) {
        if (++idx[k] < json_array_size(vals[k]))
            return true;
        idx[k] = 0;
    }
    return false;
}

/* Sets field key to v in the point's params and its resolved spec; a zip point sets each
 * of its fields. Returns 0 or -1 (out of memory). */
static int spec_point_set(json_t *params, json_t *resolved, const char *key, json_t *v)
{
    if (strcmp(key, SPEC_SWEEP_ZIP) != 0)
        return json_object_set(params, key, v) < 0 ||
                       spec_set_path(resolved, key, json_incref(v)) < 0
                   ? -1
                   : 0;
    const char *k;
    json_t *zv;
    json_object_foreach(v, k, zv)
    {
        if (spec_point_set(params, resolved, k, zv) < 0)
            return -1;
    }
    return 0;
}

json_t *spec_sweep_fields(const json_t *sweep)
{
    json_t *out = json_object();
    const char *key, *k;
    json_t *v, *zv;
    json_object_foreach((json_t *)sweep, key, v)
    {
        if (strcmp(key, SPEC_SWEEP_ZIP) != 0) {
            json_object_set(out, key, v);
            continue;
        }
        json_object_foreach(json_array_get(v, 0), k, zv)
            json_object_set_new(out, k, json_true());
    }
    return out;
}

int spec_sweep_zip_index(const json_t *sweep, const json_t *params)
{
    size_t i;
    const json_t *pt;
    json_array_foreach(json_object_get(sweep, SPEC_SWEEP_ZIP), i, pt)
    {
        const char *k;
        json_t *v;
        bool same = true;
        json_object_foreach((json_t *)pt, k, v)
            same = same && json_equal(v, json_object_get(params, k));
        if (same)
            return (int)i;
    }
    return -1;
}

int spec_sweep_walk(const json_t *norm, spec_point_fn fn, void *arg, struct err *e)
{
    const char *keys[SPEC_MAX_FIELDS];
    json_t *vals[SPEC_MAX_FIELDS];
    size_t idx[SPEC_MAX_FIELDS] = {0}, n = 0;
    const char *key;
    json_t *arr, *sweep = json_object_get(norm, "sweep");
    if (sweep) {
        json_object_foreach(sweep, key, arr)
        {
            if (n == spec_field_count)
                return err_set(e, ERR_INTERNAL, "sweep", "sweep: more fields than exist");
            keys[n] = key;
            vals[n++] = arr;
        }
    }
    json_t *resolved = json_deep_copy(norm);
    if (!resolved)
        return err_set(e, ERR_NOMEM, "", "spec: out of memory");
    json_object_del(resolved, "sweep");
    int rc = 0;
    size_t i = 0;
    do {
        json_t *params = json_object();
        for (size_t k = 0; params && k < n; k++) {
            if (spec_point_set(params, resolved, keys[k], json_array_get(vals[k], idx[k])) <
                0) {
                json_decref(params);
                params = NULL;
            }
        }
        rc = params ? fn(arg, i++, params, resolved, e)
                    : err_set(e, ERR_NOMEM, "", "spec: out of memory");
        json_decref(params);
    } while (rc == 0 && spec_odometer_next(idx, vals, n));
    json_decref(resolved);
    return rc;
}

int spec_sweep_count(const json_t *norm, size_t cap, size_t *total, struct err *e)
{
    const char *key;
    json_t *arr, *sweep = json_object_get(norm, "sweep");
    size_t p = 1;
    if (sweep) {
        json_object_foreach(sweep, key, arr)
        {
            size_t s = json_array_size(arr);
            if (s && p > SIZE_MAX / s) {
                p = SIZE_MAX;
                break;
            }
            p *= s;
        }
    }
    *total = p;
    if (p <= cap)
        return 0;
    char runs[32] = "more";
    if (p != SIZE_MAX)
        snprintf(runs, sizeof runs, "%zu", p);
    return err_set(e, ERR_INVALID, "sweep",
                   "sweep: expands to %s runs, more than the limit of %zu; sweep fewer "
                   "values or split the experiment",
                   runs, cap);
}

static int spec_point_collect(void *arg, size_t index, const json_t *params,
                              const json_t *resolved, struct err *e)
{
    json_t *runs = arg, *run = json_object();
    if (run && json_object_set(run, "params", (json_t *)params) == 0 &&
        json_object_set_new(run, "spec", json_deep_copy(resolved)) == 0 &&
        json_array_append_new(runs, run) == 0)
        return 0;
    json_decref(run);
    return err_set(e, ERR_NOMEM, "", "spec: out of memory expanding point %zu", index + 1);
}

json_t *spec_sweep_runs(const json_t *norm, size_t max_runs, struct err *e)
{
    size_t total;
    if (spec_sweep_count(norm, max_runs, &total, e) < 0)
        return NULL;
    json_t *runs = json_array();
    if (!runs)
        err_set(e, ERR_NOMEM, "", "spec: out of memory");
    else if (spec_sweep_walk(norm, spec_point_collect, runs, e) < 0) {
        json_decref(runs);
        runs = NULL;
    }
    return runs;
}
