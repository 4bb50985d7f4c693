/* spec_parse: experiment specs (spec.h): parse, validate, fill defaults, fill struct spec.
 * The module's other files: spec_table.c (the field and rule tables, their lookups and
 * text helpers, shared through common/spec_table.h), spec_checks.c (the cross-field
 * checks), spec_sweep.c (walking and expanding sweeps), spec_memory.c (the memory
 * estimate), spec_schema.c (the JSON Schema). common/spec.h, the module's public face, has
 * no source of its own.
 *
 * Decision: a field is one row of spec_fields[] (JSON type, range or choices, default as
 * JSON text, the workloads that have it, sweepable or not, the struct spec member it
 * fills, its description) and a rule between two fields is one row of spec_rules[].
 * Validation, defaults, sweep checks, spec_from_json and spec_schema_json all walk these
 * two tables, and error messages are built from the same row as the schema ("must be an
 * integer from 1 to 1024"), so the contract is written once. A new workload is an enum
 * value, a name in spec_workload_names (spec_table.c) and its rows. The model names are not
 * listed here: "model" and "buckets_of" take theirs from common/model_table.h.
 *
 * What runs where (device with backend, precision, strategy, compression; backend with
 * algorithm) is SPEC_RULE_ALLOWED rows too, so a combination the workers cannot run is a
 * 400 naming the field when it is submitted, and the worker, which reads its spec through
 * spec_from_json, is held to the same rows; only what depends on how the worker was built
 * stays in worker/device_check.c.
 *
 * "factor" and "step" are a one-of pair in which 0 means "not used": a normalized spec
 * names every field, so it says factor 0 when step is used, and submitting it again
 * normalizes to the same spec. Cross-field rules are checked on the top level (unless a
 * field of the rule is swept: its top-level value is then never run) and on every point
 * of the sweep, so a bad point is rejected when the spec is submitted, not when it runs:
 * spec_checks.c walks these rows and the checks they cannot state, one table. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/model_table.h"
#include "common/spec.h"
#include "common/spec_table.h"
#include "common/vocab.h"

static const struct spec_field *spec_field_workload(void)
{
    for (size_t i = 0; i < spec_field_count; i++)
        if (spec_field_table[i].flags & SPEC_F_WORKLOAD)
            return &spec_field_table[i];
    return NULL;
}

/* The other field of name's one-of rule, or NULL. */
static const char *spec_partner(const char *name)
{
    for (size_t i = 0; i < spec_rule_count; i++) {
        const struct spec_rule *r = &spec_rule_table[i];
        if (r->kind != SPEC_RULE_ONE_OF)
            continue;
        if (strcmp(r->a, name) == 0)
            return r->b;
        if (strcmp(r->b, name) == 0)
            return r->a;
    }
    return NULL;
}

/* Index of s among f's allowed values, or -1. */
static int spec_choice_index(const struct spec_field *f, const char *s)
{
    for (int i = 0; spec_choice(f, i); i++)
        if (strcmp(spec_choice(f, i), s) == 0)
            return i;
    return -1;
}

/* --- nested fields ------------------------------------------------------------------ */
/* A field named "group.key" lives in the object "group" of the spec: one level only. */

/* True when key is the group of some field ("dataset" for "dataset.name"). */
static bool spec_is_group(const char *key)
{
    size_t n = strlen(key);
    for (size_t i = 0; i < spec_field_count; i++)
        if (strncmp(spec_field_table[i].name, key, n) == 0 &&
            spec_field_table[i].name[n] == '.')
            return true;
    return false;
}

/* --- message helpers ----------------------------------------------------------------- */

/* A user-given key made safe for e->field and messages: printable ASCII, others '?'. */
static void spec_key_text(const char *prefix, const char *key, char *out, size_t n)
{
    size_t len = 0;
    spec_append(out, n, &len, prefix);
    for (const char *p = key; *p && len + 1 < n; p++)
        out[len++] = (*p >= 0x20 && *p < 0x7f) ? *p : '?';
    if (len < n)
        out[len] = '\0';
}

static void spec_size_text(int64_t v, char *out, size_t n)
{
    static const char units[] = "GMK";
    for (int i = 0; i < 3; i++) {
        int64_t unit = INT64_C(1) << (10 * (3 - i));
        if (v != 0 && v % unit == 0) {
            snprintf(out, n, "%" PRId64 "%c", v / unit, units[i]);
            return;
        }
    }
    snprintf(out, n, "%" PRId64, v);
}

/* What a valid value of f looks like, for "must be ..." messages. */
static void spec_requirement(const struct spec_field *f, char *out, size_t n)
{
    char lo[32], hi[32];
    size_t len = 0;
    switch (f->type) {
    case SPEC_T_STRING:
        len = (size_t)snprintf(out, n, "a string of %" PRId64 " to %" PRId64 "%s characters",
                               f->min, f->max,
                               (f->flags & SPEC_F_PRINTABLE) ? " printable ASCII" : "");
        break;
    case SPEC_T_ENUM:
        spec_append(out, n, &len, "one of ");
        for (int i = 0; spec_choice(f, i); i++) {
            spec_append(out, n, &len, i ? ", \"" : "\"");
            spec_append(out, n, &len, spec_choice(f, i));
            spec_append(out, n, &len, "\"");
        }
        break;
    case SPEC_T_INT:
        len = (size_t)snprintf(out, n, "an integer from %" PRId64 " to %" PRId64, f->min,
                               f->max);
        break;
    case SPEC_T_SIZE:
        spec_size_text(f->min, lo, sizeof lo);
        spec_size_text(f->max, hi, sizeof hi);
        len = (size_t)snprintf(out, n,
                               "a size from %s to %s (bytes as an integer, or a string "
                               "such as \"4K\", \"64M\", \"1G\")",
                               lo, hi);
        break;
    case SPEC_T_BOOL: len = (size_t)snprintf(out, n, "%s", "true or false"); break;
    case SPEC_T_SIZE_LIST:
        spec_size_text(f->min, lo, sizeof lo);
        spec_size_text(f->max, hi, sizeof hi);
        len = (size_t)snprintf(out, n,
                               "a list of at most %d distinct sizes from %s to %s (bytes as "
                               "integers, or strings such as \"4K\", \"64M\")",
                               SPEC_MAX_SIZES, lo, hi);
        break;
    case SPEC_T_NUMBER:
        len = (size_t)snprintf(out, n, "a number %s %g and at most %g",
                               f->dmin_open ? "greater than" : "at least", f->dmin, f->dmax);
        break;
    case SPEC_T_SHAPE:
        len = (size_t)snprintf(
            out, n, "[] or [channels, height, width], integers from %" PRId64 " to %" PRId64,
            f->min, f->max);
        break;
    case SPEC_T_FAULTS:
        len = (size_t)snprintf(out, n, "a list of at most %d faults", SPEC_MAX_FAULTS);
        break;
    case SPEC_T_MAP:
        len = (size_t)snprintf(out, n,
                               "an object of at most %d entries, each an OpenMPI MCA name "
                               "or MPIR_CVAR_* name with a string value",
                               SPEC_MAX_MPI_PARAMS);
        break;
    }
    if ((f->flags & SPEC_F_ZERO_UNSET) && len < n)
        snprintf(out + len, n - len, " (or 0 when %s is used)", spec_partner(f->name));
}

/* Comma-separated names of the fields of wl having every flag in `flags`. */
static void spec_field_list(enum spec_workload wl, unsigned flags, char *out, size_t n)
{
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < spec_field_count; i++) {
        const struct spec_field *f = &spec_field_table[i];
        if (!spec_field_in(f, wl) || (f->flags & flags) != flags)
            continue;
        spec_append(out, n, &len, len ? ", " : "");
        spec_append(out, n, &len, f->name);
    }
}

/* --- single values ------------------------------------------------------------------- */

/* Returns 0 with *out set, -1 when s is not a size, -2 when it is too large. */
static int spec_size_from_text(const char *s, size_t len, int64_t *out)
{
    static const char units[] = "KMGT";
    const char *p = s, *u;
    int64_t n = 0;
    int shift = 0;
    if (strlen(s) != len || *p < '0' || *p > '9')
        return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        int d = *p - '0';
        if (n > (INT64_MAX - d) / 10)
            return -2;
        n = n * 10 + d;
    }
    if (*p && (u = strchr(units, *p & ~0x20))) {
        shift = 10 * (int)(u - units + 1);
        p++;
        if ((*p == 'i' || *p == 'I') && p[1] != 'b' && p[1] != 'B')
            return -1;
        p += *p == 'i' || *p == 'I';
    }
    p += *p == 'b' || *p == 'B';
    if (*p)
        return -1;
    if (n > (INT64_MAX >> shift))
        return -2;
    *out = n << shift;
    return 0;
}

int spec_parse_size(const json_t *v, int64_t *out, struct err *e)
{
    char got[64];
    int rc = -1;
    int64_t n = 0;
    if (json_is_integer(v))
        rc = json_integer_value(v) < 0 ? -1 : 0;
    else if (json_is_string(v))
        rc = spec_size_from_text(json_string_value(v), json_string_length(v), &n);
    if (rc == 0) {
        *out = json_is_integer(v) ? json_integer_value(v) : n;
        return 0;
    }
    spec_value_text(v, got, sizeof got);
    if (rc == -2)
        return err_set(e, ERR_INVALID, "", "size %s is too large", got);
    return err_set(e, ERR_INVALID, "",
                   "a size is a non-negative integer or digits with an optional binary unit "
                   "K, M, G or T and an optional B or iB (\"4096\", \"4K\", \"64MiB\"), "
                   "got %s",
                   got);
}

static bool spec_string_ok(const struct spec_field *f, const json_t *v)
{
    if (!json_is_string(v))
        return false;
    const char *s = json_string_value(v);
    size_t bytes = json_string_length(v), chars = 0;
    if (strlen(s) != bytes)
        return false; /* an embedded NUL */
    for (size_t i = 0; i < bytes; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((f->flags & SPEC_F_PRINTABLE) && (c < 0x20 || c > 0x7e))
            return false;
        chars += (c & 0xc0) != 0x80; /* count UTF-8 lead bytes: characters */
    }
    return (int64_t)chars >= f->min && (int64_t)chars <= f->max;
}

/* A size list: an array of distinct sizes in f's range, normalized to integers. Returns
 * 0 with *out owned (NULL only when out of memory), or -1. */
static int spec_convert_sizes(const struct spec_field *f, const json_t *v, json_t **out)
{
    size_t n = json_array_size(v);
    if (!json_is_array(v) || n > SPEC_MAX_SIZES)
        return -1;
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        int64_t b = 0;
        bool ok = spec_parse_size(json_array_get(v, i), &b, NULL) == 0 && b >= f->min &&
                  b <= f->max;
        for (size_t j = 0; ok && j < i; j++)
            ok = json_integer_value(json_array_get(arr, j)) != b;
        if (!ok) {
            json_decref(arr);
            return -1;
        }
        if (json_array_append_new(arr, json_integer(b)) < 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    *out = arr;
    return 0;
}

/* A number (integers accepted) in f's range, normalized to a real. Returns 0 with *out
 * owned (NULL only when out of memory), or -1. */
static int spec_convert_number(const struct spec_field *f, const json_t *v, json_t **out)
{
    if (!json_is_number(v))
        return -1;
    double d = json_number_value(v);
    if (!(d <= f->dmax) || !(f->dmin_open ? d > f->dmin : d >= f->dmin))
        return -1; /* written so a NaN fails too */
    *out = json_real(d);
    return 0;
}

/* [] or exactly three integers in f's range. Returns 0 with *out owned (NULL only when
 * out of memory), or -1. */
static int spec_convert_shape(const struct spec_field *f, const json_t *v, json_t **out)
{
    size_t n = json_array_size(v);
    if (!json_is_array(v) || (n != 0 && n != 3))
        return -1;
    for (size_t i = 0; i < n; i++) {
        const json_t *d = json_array_get(v, i);
        if (!json_is_integer(d) || json_integer_value(d) < f->min ||
            json_integer_value(d) > f->max)
            return -1;
    }
    *out = json_deep_copy(v);
    return 0;
}

/* Why a map value is not valid (SPEC_T_MAP): 0 when it is, else -1 with e naming the
 * entry ("mpi_mca.btl") or the map (path) itself. e may be NULL. */
static int spec_map_check(const json_t *v, const char *path, struct err *e)
{
    char got[96];
    if (!json_is_object(v) || json_object_size(v) > SPEC_MAX_MPI_PARAMS) {
        spec_value_text(v, got, sizeof got);
        return err_set(e, ERR_INVALID, path,
                       "%s: must be an object of at most %d entries, got %s", path,
                       SPEC_MAX_MPI_PARAMS, got);
    }
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)v, key, val)
    {
        char at[96];
        snprintf(at, sizeof at, "%s.%.*s", path, 60, key);
        if (!spec_map_key_ok(key)) {
            json_t *k = json_string(key);
            spec_value_text(k, got, sizeof got);
            json_decref(k);
            return err_set(e, ERR_INVALID, at,
                           "%s: key %s is neither an OpenMPI MCA name (%s) nor an MPICH "
                           "control variable (MPIR_CVAR_*)",
                           path, got, "lowercase letters, digits and _, up to 63");
        }
        if (!json_is_string(val) || !spec_map_value_ok(json_string_value(val))) {
            spec_value_text(val, got, sizeof got);
            return err_set(e, ERR_INVALID, at,
                           "%s: must be a string of 1 to 127 letters, digits and _.,:/^+=@- "
                           "(no shell characters), got %s",
                           at, got);
        }
    }
    return 0;
}

/* Checks v against f. Returns 0 with *out the owned normalized value (NULL only when
 * out of memory), or -1 when v is not valid for f. */
static int spec_convert(const struct spec_field *f, const json_t *v, json_t **out)
{
    int64_t n = 0;
    *out = NULL;
    switch (f->type) {
    case SPEC_T_STRING:
        if (!spec_string_ok(f, v))
            return -1;
        *out = json_string(json_string_value(v));
        return 0;
    case SPEC_T_ENUM:
        if (!json_is_string(v) || spec_choice_index(f, json_string_value(v)) < 0)
            return -1;
        *out = json_string(json_string_value(v));
        return 0;
    case SPEC_T_INT:
        if (!json_is_integer(v))
            return -1;
        n = json_integer_value(v);
        break;
    case SPEC_T_SIZE:
        if (spec_parse_size(v, &n, NULL) < 0)
            return -1;
        break;
    case SPEC_T_BOOL:
        if (!json_is_boolean(v))
            return -1;
        *out = json_boolean(json_is_true(v));
        return 0;
    case SPEC_T_SIZE_LIST: return spec_convert_sizes(f, v, out);
    case SPEC_T_NUMBER: return spec_convert_number(f, v, out);
    case SPEC_T_SHAPE: return spec_convert_shape(f, v, out);
    case SPEC_T_MAP:
        if (spec_map_check(v, f->name, NULL) < 0)
            return -1;
        *out = json_deep_copy(v);
        return 0;
    case SPEC_T_FAULTS: return spec_faults_convert(v, f->name, out, NULL);
    }
    if (!(n >= f->min && n <= f->max) && !(n == 0 && (f->flags & SPEC_F_ZERO_UNSET)))
        return -1;
    *out = json_integer(n);
    return 0;
}

/* Returns the owned normalized value of v for field f, or NULL with e naming path. */
static json_t *spec_check_value(const struct spec_field *f, const json_t *v, const char *path,
                                struct err *e)
{
    json_t *out;
    if (spec_convert(f, v, &out) == 0) {
        if (!out)
            err_set(e, ERR_NOMEM, path, "%s: out of memory", path);
        return out;
    }
    if (f->type == SPEC_T_MAP) /* the entry at fault, by name */
        return spec_map_check(v, path, e), NULL;
    if (f->type == SPEC_T_FAULTS) /* the fault and its member, by name */
        return spec_faults_convert(v, path, &out, e), NULL;
    char need[256], got[96];
    spec_requirement(f, need, sizeof need);
    spec_value_text(v, got, sizeof got);
    err_set(e, ERR_INVALID, path, "%s: must be %s, got %s", path, need, got);
    return NULL;
}

/* Owned default of f for workload wl (an error for a required field). */
static json_t *spec_default(const struct spec_field *f, enum spec_workload wl, struct err *e)
{
    if (f->flags & SPEC_F_REQUIRED) {
        err_set(e, ERR_INVALID, f->name, "%s: is required", f->name);
        return NULL;
    }
    if (!f->def && f->type == SPEC_T_STRING) {
        json_t *s = json_string(spec_workload_table[wl]);
        if (!s)
            err_set(e, ERR_NOMEM, f->name, "%s: out of memory", f->name);
        return s;
    }
    json_t *raw = f->def ? json_loads(f->def, JSON_DECODE_ANY, NULL) : NULL, *out = NULL;
    if (!raw || spec_convert(f, raw, &out) < 0 || !out)
        err_set(e, ERR_INTERNAL, f->name, "%s: the table's default does not parse", f->name);
    json_decref(raw);
    return out;
}

static bool spec_is_zero(const json_t *v)
{
    return json_is_integer(v) && json_integer_value(v) == 0;
}

/* --- the whole spec ------------------------------------------------------------------ */

static int spec_workload_of(const json_t *in, enum spec_workload *wl, struct err *e)
{
    const struct spec_field *f = spec_field_workload();
    const json_t *v = json_object_get(in, f->name);
    if (!v) {
        char need[128];
        spec_requirement(f, need, sizeof need);
        return err_set(e, ERR_INVALID, f->name, "%s: is required; must be %s", f->name, need);
    }
    json_t *nv = spec_check_value(f, v, f->name, e);
    if (!nv)
        return -1;
    *wl = (enum spec_workload)spec_choice_index(f, json_string_value(nv));
    json_decref(nv);
    return 0;
}

static int spec_unknown_key(const char *prefix, const char *key, enum spec_workload wl,
                            unsigned flags, const char *what, struct err *e)
{
    char path[64], list[256];
    spec_key_text(prefix, key, path, sizeof path);
    spec_field_list(wl, flags, list, sizeof list);
    return err_set(e, ERR_INVALID, path, "%s: %s; %s: %s%s", path, what,
                   flags ? "sweepable fields" : "known fields", list, flags ? "" : ", sweep");
}

/* Every key of a group object must be a field "group.key" of wl. */
static int spec_check_group(const char *group, const json_t *obj, enum spec_workload wl,
                            struct err *e)
{
    char prefix[40], name[96];
    snprintf(prefix, sizeof prefix, "%s.", group);
    if (!json_is_object(obj)) {
        char got[96];
        spec_value_text(obj, got, sizeof got);
        return err_set(e, ERR_INVALID, group, "%s: must be an object of %s* fields, got %s",
                       group, prefix, got);
    }
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        snprintf(name, sizeof name, "%s%s", prefix, key);
        const struct spec_field *f = strlen(key) < 64 ? spec_field_find(name) : NULL;
        if (!f)
            return spec_unknown_key(prefix, key, wl, 0, "unknown field", e);
        if (!spec_field_in(f, wl))
            return spec_unknown_key(prefix, key, wl, 0, "not a field of this workload", e);
    }
    /* an empty group of another workload says nothing, except that it is on ("elastic") */
    for (size_t i = 0; i < spec_field_count; i++)
        if (strncmp(spec_field_table[i].name, prefix, strlen(prefix)) == 0 &&
            spec_field_in(&spec_field_table[i], wl))
            return 0;
    return spec_unknown_key("", group, wl, 0, "not a field of this workload", e);
}

/* Every key of the top level must be a field of wl, a group of such fields, or
 * "sweep". */
static int spec_check_keys(const json_t *in, enum spec_workload wl, struct err *e)
{
    const char *key;
    json_t *v;
    /* jansson's iterators take a non-const object; nothing is modified. */
    json_object_foreach((json_t *)in, key, v)
    {
        if (strcmp(key, "sweep") == 0)
            continue;
        const struct spec_field *f = strchr(key, '.') ? NULL : spec_field_find(key);
        if (!f && !strchr(key, '.') && spec_is_group(key)) {
            if (spec_check_group(key, v, wl, e) < 0)
                return -1;
            continue;
        }
        if (!f)
            return spec_unknown_key("", key, wl, 0, "unknown field", e);
        if (!spec_field_in(f, wl))
            return spec_unknown_key("", key, wl, 0, "not a field of this workload", e);
    }
    return 0;
}

/* Validates one swept field's array into an owned array of normalized values. */
static json_t *spec_sweep_values(const struct spec_field *f, const json_t *arr, struct err *e)
{
    char path[64], got[96];
    snprintf(path, sizeof path, "sweep.%s", f->name);
    size_t n = json_array_size(arr);
    if (!json_is_array(arr) || n == 0 || n > SPEC_MAX_SWEEP_VALUES) {
        spec_value_text(arr, got, sizeof got);
        err_set(e, ERR_INVALID, path,
                "%s: must be a non-empty array of at most %d values, got %s", path,
                SPEC_MAX_SWEEP_VALUES, got);
        return NULL;
    }
    json_t *out = json_array();
    if (!out) {
        err_set(e, ERR_NOMEM, path, "%s: out of memory", path);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        char at[64];
        snprintf(at, sizeof at, "%s[%zu]", path, i);
        json_t *v = spec_check_value(f, json_array_get(arr, i), at, e);
        for (size_t j = 0; v && j < i; j++) {
            if (json_equal(v, json_array_get(out, j))) {
                spec_value_text(v, got, sizeof got);
                err_set(e, ERR_INVALID, at, "%s: %s is already listed at [%zu]", at, got, j);
                json_decref(v);
                v = NULL;
            }
        }
        if (!v || json_array_append_new(out, v) < 0) {
            if (v)
                err_set(e, ERR_NOMEM, at, "%s: out of memory", at);
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

/* The field of a zip point, by its key, into out (owned normalized value). Returns 0 or
 * -1 with e naming sweep.zip[i].key. */
static int spec_zip_field(const char *prefix, const char *key, const json_t *v,
                          enum spec_workload wl, json_t *out, struct err *e)
{
    const struct spec_field *f = spec_field_find(key);
    char path[128];
    snprintf(path, sizeof path, "%s%s", prefix, key);
    if (!f || !spec_field_in(f, wl))
        return spec_unknown_key(prefix, key, wl, SPEC_F_SWEEP, "unknown field", e);
    if (!(f->flags & SPEC_F_SWEEP))
        return spec_unknown_key(prefix, key, wl, SPEC_F_SWEEP, "cannot be swept", e);
    json_t *nv = spec_check_value(f, v, path, e);
    if (!nv || json_object_set_new(out, key, nv) < 0)
        return nv ? err_set(e, ERR_NOMEM, path, "%s: out of memory", path) : -1;
    return 0;
}

/* Point i of "zip": an object of sweepable fields of wl, naming the same fields as first
 * (NULL: it is the first). Returns the owned normalized point (first's field order) or
 * NULL with e naming sweep.zip[i] or sweep.zip[i].field. */
static json_t *spec_zip_point(const json_t *pt, size_t i, const json_t *first,
                              enum spec_workload wl, struct err *e)
{
    char at[48], prefix[56], got[96];
    snprintf(at, sizeof at, "sweep.zip[%zu]", i);
    snprintf(prefix, sizeof prefix, "%s.", at);
    if (!json_is_object(pt) || json_object_size(pt) == 0) {
        spec_value_text(pt, got, sizeof got);
        err_set(e, ERR_INVALID, at,
                "%s: must be a non-empty object of the fields that vary together, got %s", at,
                got);
        return NULL;
    }
    json_t *out = json_object();
    const char *key;
    json_t *v;
    char path[128];
    int rc = out ? 0 : err_set(e, ERR_NOMEM, at, "%s: out of memory", at);
    json_object_foreach((json_t *)(first ? first : pt), key, v) /* first's order */
    {
        const json_t *mine = json_object_get(pt, key);
        snprintf(path, sizeof path, "%s%s", prefix, key);
        if (rc == 0 && !mine)
            rc = err_set(e, ERR_INVALID, path,
                         "%s: is missing: every point of sweep.zip names the same fields as "
                         "sweep.zip[0]",
                         path);
        else if (rc == 0)
            rc = spec_zip_field(prefix, key, mine, wl, out, e);
    }
    json_object_foreach((json_t *)pt, key, v)
    {
        snprintf(path, sizeof path, "%s%s", prefix, key);
        if (rc == 0 && !json_object_get(out, key))
            rc = err_set(e, ERR_INVALID, path,
                         "%s: sweep.zip[0] does not name it: every point of sweep.zip names "
                         "the same fields",
                         path);
    }
    if (rc < 0) {
        json_decref(out);
        return NULL;
    }
    return out;
}

/* "zip": the points whose fields vary together, each validated and distinct, none of
 * their fields also swept by its own list in sweep. Returns the owned normalized list or
 * NULL with e set. */
static json_t *spec_zip_normalize(const json_t *zip, const json_t *sweep, enum spec_workload wl,
                                  struct err *e)
{
    size_t n = json_array_size(zip);
    if (!json_is_array(zip) || n == 0 || n > SPEC_MAX_SWEEP_VALUES) {
        char got[96];
        spec_value_text(zip, got, sizeof got);
        err_set(e, ERR_INVALID, "sweep.zip",
                "sweep.zip: must be a non-empty array of at most %d points (objects of the "
                "fields that vary together), got %s",
                SPEC_MAX_SWEEP_VALUES, got);
        return NULL;
    }
    json_t *out = json_array();
    for (size_t i = 0; out && i < n; i++) {
        json_t *pt = spec_zip_point(json_array_get(zip, i), i, json_array_get(out, 0), wl, e);
        for (size_t j = 0; pt && j < i; j++)
            if (json_equal(pt, json_array_get(out, j))) {
                char at[48];
                snprintf(at, sizeof at, "sweep.zip[%zu]", i);
                err_set(e, ERR_INVALID, at, "%s: the same point as sweep.zip[%zu]", at, j);
                json_decref(pt);
                pt = NULL;
            }
        if (!pt || json_array_append_new(out, pt) < 0) {
            json_decref(out);
            return NULL;
        }
    }
    const char *key;
    json_t *v;
    json_object_foreach(json_array_get(out, 0), key, v)
    {
        if (json_object_get(sweep, key)) {
            char path[96];
            snprintf(path, sizeof path, "sweep.%s", key);
            err_set(e, ERR_INVALID, path,
                    "%s: is both zipped (in sweep.zip) and swept: list its values in the zip "
                    "points or in its own list, not both",
                    path);
            json_decref(out);
            return NULL;
        }
    }
    if (!out)
        err_set(e, ERR_NOMEM, "sweep.zip", "sweep.zip: out of memory");
    return out;
}

/* Returns the owned normalized sweep (same field order) or NULL with e set. */
static json_t *spec_sweep_normalize(const json_t *sweep, enum spec_workload wl, struct err *e)
{
    if (!json_is_object(sweep)) {
        char got[96];
        spec_value_text(sweep, got, sizeof got);
        err_set(e, ERR_INVALID, "sweep",
                "sweep: must be an object mapping fields to arrays of values, got %s", got);
        return NULL;
    }
    json_t *out = json_object();
    const char *key;
    json_t *arr;
    if (!out) {
        err_set(e, ERR_NOMEM, "sweep", "sweep: out of memory");
        return NULL;
    }
    json_object_foreach((json_t *)sweep, key, arr)
    {
        const struct spec_field *f = spec_field_find(key);
        json_t *vals = NULL;
        if (strcmp(key, SPEC_SWEEP_ZIP) == 0)
            vals = spec_zip_normalize(arr, sweep, wl, e);
        else if (!f || !spec_field_in(f, wl))
            spec_unknown_key("sweep.", key, wl, SPEC_F_SWEEP, "unknown field", e);
        else if (!(f->flags & SPEC_F_SWEEP))
            spec_unknown_key("sweep.", key, wl, SPEC_F_SWEEP, "cannot be swept", e);
        else
            vals = spec_sweep_values(f, arr, e);
        if (!vals || json_object_set_new(out, key, vals) < 0) {
            if (vals)
                err_set(e, ERR_NOMEM, "sweep", "sweep: out of memory");
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

/* A field of a one-of pair is given when it is set non-zero or swept. */
static bool spec_given(const json_t *in, const json_t *out, const json_t *sweep,
                       const char *name)
{
    if (sweep && json_object_get(sweep, name))
        return true;
    return spec_field_value(in, name) && !spec_is_zero(spec_field_value(out, name));
}

/* One-of pairs: giving both is an error; giving b makes a 0; otherwise b is 0 and a
 * keeps its value, or its default when it was not given (absent or 0). */
static int spec_apply_one_of(json_t *out, const json_t *in, const json_t *sweep,
                             enum spec_workload wl, struct err *e)
{
    for (size_t i = 0; i < spec_rule_count; i++) {
        const struct spec_rule *r = &spec_rule_table[i];
        if (r->kind != SPEC_RULE_ONE_OF || !spec_rule_in(r, wl))
            continue;
        bool ga = spec_given(in, out, sweep, r->a), gb = spec_given(in, out, sweep, r->b);
        if (ga && gb)
            return err_set(e, ERR_INVALID, r->b,
                           "%s: %s and %s are mutually exclusive (set or sweep only one)", r->b,
                           r->a, r->b);
        if (spec_set_path(out, gb ? r->a : r->b, json_integer(0)) < 0)
            return err_set(e, ERR_NOMEM, r->b, "%s: out of memory", r->b);
        json_t *def = NULL;
        if (!ga && !gb &&
            (!(def = spec_default(spec_field_find(r->a), wl, e)) ||
             spec_set_path(out, r->a, def) < 0))
            return def ? err_set(e, ERR_NOMEM, r->a, "%s: out of memory", r->a) : -1;
    }
    return 0;
}

/* Owned top level: every field of wl, validated or defaulted, in table order. */
static json_t *spec_fill(const json_t *in, const json_t *sweep, enum spec_workload wl,
                         struct err *e)
{
    json_t *out = json_object();
    if (!out) {
        err_set(e, ERR_NOMEM, "", "spec: out of memory");
        return NULL;
    }
    for (size_t i = 0; i < spec_field_count; i++) {
        const struct spec_field *f = &spec_field_table[i];
        if (!spec_field_in(f, wl) ||
            ((f->flags & SPEC_F_OPTIONAL_GROUP) && !spec_group_given(in, sweep, f->name)))
            continue;
        const json_t *v = spec_field_value(in, f->name);
        json_t *nv = v ? spec_check_value(f, v, f->name, e) : spec_default(f, wl, e);
        if (!nv || spec_set_path(out, f->name, nv) < 0) {
            if (nv)
                err_set(e, ERR_NOMEM, f->name, "%s: out of memory", f->name);
            json_decref(out);
            return NULL;
        }
    }
    if (spec_apply_one_of(out, in, sweep, wl, e) < 0) {
        json_decref(out);
        return NULL;
    }
    return out;
}

json_t *spec_normalize(const json_t *in, struct err *e)
{
    enum spec_workload wl;
    if (!json_is_object(in)) {
        char got[64];
        spec_value_text(in, got, sizeof got);
        err_set(e, ERR_INVALID, "", "spec: must be a JSON object, got %s", got);
        return NULL;
    }
    if (spec_workload_of(in, &wl, e) < 0 || spec_check_keys(in, wl, e) < 0)
        return NULL;
    json_t *sweep = NULL;
    const json_t *sweep_in = json_object_get(in, "sweep");
    if (sweep_in && !(sweep = spec_sweep_normalize(sweep_in, wl, e)))
        return NULL;
    json_t *varied = sweep ? spec_sweep_fields(sweep) : NULL; /* swept or zipped */
    json_t *out = spec_fill(in, varied, wl, e);
    json_decref(varied);
    if (out && sweep && json_object_set(out, "sweep", sweep) < 0) {
        err_set(e, ERR_NOMEM, "sweep", "sweep: out of memory");
        json_decref(out);
        out = NULL;
    }
    json_decref(sweep);
    if (out && spec_checks_run(out, wl, e) < 0) {
        json_decref(out);
        out = NULL;
    }
    return out;
}

json_t *spec_parse(const char *text, size_t len, struct err *e)
{
    if (len > SPEC_MAX_BODY) {
        err_set(e, ERR_TOO_LARGE, "", "spec: %zu bytes, more than the limit of %u", len,
                SPEC_MAX_BODY);
        return NULL;
    }
    json_error_t je;
    json_t *in = json_loadb(text ? text : "", text ? len : 0, JSON_REJECT_DUPLICATES, &je);
    if (!in) {
        err_set(e, ERR_INVALID, "", "spec: invalid JSON at line %d, column %d: %s", je.line,
                je.column, je.text);
        return NULL;
    }
    json_t *out = spec_normalize(in, e);
    json_decref(in);
    return out;
}

json_t *spec_expand(const json_t *normalized, size_t max_runs, struct err *e)
{
    /* Normalizing again costs little and makes a stored spec as safe as a submitted one. */
    json_t *norm = spec_normalize(normalized, e);
    json_t *runs = norm ? spec_sweep_runs(norm, max_runs, e) : NULL;
    json_decref(norm);
    return runs;
}

/* --- struct spec --------------------------------------------------------------------- */

static int spec_store(const struct spec_field *f, const json_t *v, struct spec *s,
                      struct err *e)
{
    char *dst = (char *)s + f->off;
    if (f->flags & SPEC_F_WORKLOAD) {
        enum spec_workload wl = (enum spec_workload)spec_choice_index(f, json_string_value(v));
        if (f->size != sizeof wl)
            goto bad;
        memcpy(dst, &wl, sizeof wl);
        return 0;
    }
    switch (f->type) {
    case SPEC_T_STRING:
    case SPEC_T_ENUM: {
        size_t n = json_string_length(v);
        if (n >= f->size)
            goto bad;
        memcpy(dst, json_string_value(v), n + 1);
        return 0;
    }
    case SPEC_T_INT:
    case SPEC_T_SIZE: {
        int64_t n64 = json_integer_value(v);
        int n32 = (int)n64;
        if (f->size == sizeof n64)
            memcpy(dst, &n64, sizeof n64);
        else if (f->size == sizeof n32 && f->max <= INT32_MAX)
            memcpy(dst, &n32, sizeof n32);
        else
            goto bad;
        return 0;
    }
    case SPEC_T_BOOL: {
        bool b = json_is_true(v);
        if (f->size != sizeof b)
            goto bad;
        memcpy(dst, &b, sizeof b);
        return 0;
    }
    case SPEC_T_NUMBER: {
        double d = json_number_value(v);
        if (f->size != sizeof d)
            goto bad;
        memcpy(dst, &d, sizeof d);
        return 0;
    }
    case SPEC_T_SHAPE: {
        struct spec_shape sh = {.n = (int)json_array_size(v)};
        if (f->size != sizeof sh || sh.n > 3)
            goto bad;
        for (int i = 0; i < sh.n; i++)
            sh.dims[i] = (int)json_integer_value(json_array_get(v, (size_t)i));
        memcpy(dst, &sh, sizeof sh);
        return 0;
    }
    case SPEC_T_MAP: {
        int n = (int)json_object_size(v);
        struct spec_mpi_param p[SPEC_MAX_MPI_PARAMS];
        if (f->size != sizeof n + sizeof p || n > SPEC_MAX_MPI_PARAMS)
            goto bad;
        memset(p, 0, sizeof p);
        int i = 0;
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)v, key, val)
        {
            snprintf(p[i].key, sizeof p[i].key, "%s", key);
            snprintf(p[i].value, sizeof p[i].value, "%s", json_string_value(val));
            i++;
        }
        memcpy(dst, &n, sizeof n);
        memcpy(dst + sizeof n, p, sizeof p);
        return 0;
    }
    case SPEC_T_FAULTS:
        if (f->off != offsetof(struct spec, n_faults) || spec_faults_store(v, s) < 0)
            goto bad;
        return 0;
    case SPEC_T_SIZE_LIST: {
        struct spec_sizes sz = {.n = (int)json_array_size(v)};
        if (f->size != sizeof sz || sz.n > SPEC_MAX_SIZES)
            goto bad;
        for (int i = 0; i < sz.n; i++)
            sz.bytes[i] = json_integer_value(json_array_get(v, (size_t)i));
        memcpy(dst, &sz, sizeof sz);
        return 0;
    }
    }
bad:
    return err_set(e, ERR_INTERNAL, f->name, "%s: does not fit its struct spec member",
                   f->name);
}

/* threads is validated (1 to 256) for the workloads that have it, absent or 0 for the
 * others, which take one slot a rank */
static int spec_slots_of_threads(json_int_t t)
{
    return t >= 1 && t <= 256 ? (int)t : 1;
}

int spec_slots_per_rank(const json_t *resolved)
{
    return spec_slots_of_threads(json_integer_value(json_object_get(resolved, "threads")));
}

/* A single-process strategy's one process holds every replica (vocab.h single_process) */
static bool spec_single_process(const struct spec *s)
{
    const struct vocab_strategy *st = vocab_strategy(
        vocab_find(VOCAB_STRATEGY, s->train.strategy));
    return s->workload == SPEC_WORKLOAD_TRAIN && st && st->single_process;
}

int spec_rank_slots(const struct spec *s)
{
    int per = spec_slots_of_threads(s->train.threads);
    return spec_single_process(s) ? per * (s->world_size > 0 ? s->world_size : 1) : per;
}

int spec_processes(const struct spec *s)
{
    return spec_single_process(s) ? 1 : s->world_size;
}

int spec_processes_of(const json_t *resolved)
{
    const json_t *wl = json_object_get(resolved, "workload");
    const struct vocab_strategy *st = spec_strategy_of(resolved);
    bool train = json_is_string(wl) && strcmp(json_string_value(wl), "train") == 0;
    return train && st && st->single_process
               ? 1
               : (int)json_integer_value(json_object_get(resolved, "world_size"));
}

/* "elastic": on when its group is in the spec; max_ranks 0 (the default) is world_size. */
static void spec_elastic_resolve(const json_t *norm, struct spec *out)
{
    out->elastic.on = json_object_get(norm, "elastic") != NULL;
    if (out->elastic.on && out->elastic.max_ranks == 0)
        out->elastic.max_ranks = out->world_size;
}

int spec_from_json(const json_t *resolved, struct spec *out, struct err *e)
{
    if (json_is_object(resolved) && json_object_get(resolved, "sweep"))
        return err_set(e, ERR_INVALID, "sweep",
                       "sweep: a run's spec has no sweep; expand it first (spec_expand)");
    json_t *norm = spec_normalize(resolved, e);
    if (!norm)
        return -1;
    enum spec_workload wl;
    int rc = spec_workload_of(norm, &wl, e);
    memset(out, 0, sizeof *out);
    for (size_t i = 0; rc == 0 && i < spec_field_count; i++) {
        const struct spec_field *f = &spec_field_table[i];
        const json_t *v = spec_field_value(norm, f->name);
        if (spec_field_in(f, wl) && f->size > 0 && v) /* an optional group may be absent */
            rc = spec_store(f, v, out, e);
    }
    spec_elastic_resolve(norm, out);
    json_decref(norm);
    return rc;
}

size_t spec_collective_sizes(const struct spec_collective *c, int64_t *sizes, size_t max)
{
    size_t n = 0;
    if (c->sizes.n > 0) {
        for (int i = 0; i < c->sizes.n && n < max; i++)
            sizes[n++] = c->sizes.bytes[i];
        return n;
    }
    if (c->min_bytes < 1 || (c->factor < 2 && c->step < 1))
        return 0; /* not a valid spec: no sizes rather than an endless loop */
    for (int64_t s = c->min_bytes; s <= c->max_bytes && n < max;
         s = c->factor >= 2 ? s * c->factor : s + c->step)
        sizes[n++] = s;
    return n;
}

/* Whether field f's value v equals its default def: sizes by their bytes ("4K" is 4096),
 * numbers by value (2 is 2.0), the rest as JSON. */
static bool spec_is_default(const struct spec_field *f, const json_t *v, const json_t *def)
{
    int64_t a, b;
    if (f->type == SPEC_T_SIZE)
        return spec_parse_size(v, &a, NULL) == 0 && spec_parse_size(def, &b, NULL) == 0 &&
               a == b;
    if (json_is_number(v) && json_is_number(def))
        return json_number_value(v) == json_number_value(def);
    return json_equal(v, def);
}

json_t *spec_nondefault(const json_t *spec)
{
    json_t *out = json_object();
    const json_t *sweep = json_object_get(spec, "sweep");
    for (size_t i = 0; out && i < spec_field_count; i++) {
        const struct spec_field *f = &spec_field_table[i];
        const json_t *v = spec_field_value(spec, f->name);
        if (!v || json_is_null(v) || json_object_get(sweep, f->name))
            continue;
        json_t *def = f->def ? json_loads(f->def, JSON_DECODE_ANY, NULL) : NULL;
        bool same = def && spec_is_default(f, v, def);
        json_decref(def);
        if (!same)
            json_object_set(out, f->name, (json_t *)v);
    }
    return out;
}
