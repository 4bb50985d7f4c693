/* spec_sweep: a normalized spec's sweep as runs: counting them, walking the points (the
 * cross product of the swept lists, last field fastest) and expanding them into
 * [{params, spec}] for spec_expand.
 *
 * Decision: one walk serves both the checks at every point (spec_checks.c) and the
 * expansion, so a point is resolved the same way when it is judged at submit and when it
 * runs: the top level with the point's values set over it. The count comes first and caps
 * both, so a sweep past the limit is refused before any point is built. */
#include <stdio.h>

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
            json_t *v = json_array_get(vals[k], idx[k]);
            if (json_object_set(params, keys[k], v) < 0 ||
                spec_set_path(resolved, keys[k], json_incref(v)) < 0) {
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
