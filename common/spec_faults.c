/* spec_faults: the spec's "faults" (issue 32), a list of at most SPEC_MAX_FAULTS objects
 * {at_step | at_s, rank | node, kind, duration_s, fraction, rate}: their validation and
 * normal form, their struct spec_fault rows, their JSON Schema, and the checks against
 * the run's world_size and nodes.
 *
 * Decision: a fault is an object with fields of its own, which the flat field table
 * (spec_table.c) cannot say, so the list is one field of type SPEC_T_FAULTS whose value
 * this file checks whole: every error names the element and the member at fault
 * ("faults[1].duration_s"). Which members a kind takes is vocab.h's VOCAB_FAULT_KINDS
 * row (duration, fraction, rate): each one it takes is required, each other refused, so
 * a spec cannot carry a field that does nothing. The normal form keeps only the members
 * given, in a fixed order, so two equal faults compare equal (a sweep refuses a repeated
 * list). rate is a number of Mbit/s (not tc's "10mbit" text): the schema can bound it and
 * the daemon writes tc's unit itself. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/spec_table.h"

#define FAULT_MAX_STEP INT64_C(1000000000)
#define FAULT_MAX_S 1e6         /* at_s, duration_s: about 11 days */
#define FAULT_MAX_RATE_MBIT 1e6 /* 1 Tbit/s */

/* The members of a fault, in their normal order. */
static const char *const fault_members[] = {"kind",       "at_step",  "at_s", "rank", "node",
                                            "duration_s", "fraction", "rate", NULL};

static int fault_bad(struct err *e, const char *at, const char *member, const char *need,
                     const json_t *v)
{
    char path[64], got[96];
    snprintf(path, sizeof path, "%s.%s", at, member);
    if (v) {
        spec_value_text(v, got, sizeof got);
        return err_set(e, ERR_INVALID, path, "%s: must be %s, got %s", path, need, got);
    }
    return err_set(e, ERR_INVALID, path, "%s: %s", path, need);
}

/* An integer member in [0, max] into *out; absent: *out = -1. */
static int fault_int(const json_t *obj, const char *at, const char *m, int64_t max,
                     int64_t *out, struct err *e)
{
    const json_t *v = json_object_get(obj, m);
    char need[64];
    *out = -1;
    if (!v)
        return 0;
    snprintf(need, sizeof need, "an integer from 0 to %lld", (long long)max);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > max)
        return fault_bad(e, at, m, need, v);
    *out = json_integer_value(v);
    return 0;
}

/* A number member in (lo, hi] (or [lo, hi] when !open); absent: *out = -1. */
static int fault_num(const json_t *obj, const char *at, const char *m, double lo, bool open,
                     double hi, double *out, struct err *e)
{
    const json_t *v = json_object_get(obj, m);
    char need[96];
    *out = -1;
    if (!v)
        return 0;
    double d = json_is_number(v) ? json_number_value(v) : NAN;
    snprintf(need, sizeof need, "a number %s %g and %s %g", open ? "greater than" : "from", lo,
             open ? "at most" : "to", hi);
    if (!(d <= hi) || !(open ? d > lo : d >= lo))
        return fault_bad(e, at, m, need, v);
    *out = d;
    return 0;
}

/* fraction: the CPU share left, in (0, 1) (a share of 1 is no fault); absent: -1. */
static int fault_fraction(const json_t *obj, const char *at, double *out, struct err *e)
{
    const json_t *v = json_object_get(obj, "fraction");
    double d = json_is_number(v) ? json_number_value(v) : NAN;
    *out = -1;
    if (!v)
        return 0;
    if (!(d > 0 && d < 1))
        return fault_bad(e, at, "fraction", "a number greater than 0 and less than 1", v);
    *out = d;
    return 0;
}

/* Exactly one of members a and b given. */
static int fault_one_of(const json_t *obj, const char *at, const char *a, const char *b,
                        struct err *e)
{
    bool ga = json_object_get(obj, a) != NULL, gb = json_object_get(obj, b) != NULL;
    char need[96];
    if (ga && gb) {
        snprintf(need, sizeof need, "%s and %s are mutually exclusive (give one)", a, b);
        return fault_bad(e, at, b, need, NULL);
    }
    if (!ga && !gb) {
        snprintf(need, sizeof need, "is required (or %s)", b);
        return fault_bad(e, at, a, need, NULL);
    }
    return 0;
}

/* A member the kind takes must be there, one it does not take must not. */
static int fault_takes(const json_t *obj, const char *at, const char *m, bool takes,
                       const char *kind, struct err *e)
{
    char need[96];
    bool given = json_object_get(obj, m) != NULL;
    if (takes && !given)
        snprintf(need, sizeof need, "is required with kind \"%s\"", kind);
    else if (!takes && given)
        snprintf(need, sizeof need, "kind \"%s\" takes no %s", kind, m);
    else
        return 0;
    return fault_bad(e, at, m, need, NULL);
}

static int fault_kind(const json_t *obj, const char *at, const struct vocab_fault **out,
                      struct err *e)
{
    const json_t *v = json_object_get(obj, "kind");
    char need[96], list[64];
    vocab_join(VOCAB_FAULT, " or ", list, sizeof list);
    if (!v) {
        snprintf(need, sizeof need, "is required: %s", list);
        return fault_bad(e, at, "kind", need, NULL);
    }
    *out = json_is_string(v) ? vocab_fault(vocab_find(VOCAB_FAULT, json_string_value(v)))
                             : NULL;
    snprintf(need, sizeof need, "one of %s", list);
    return *out ? 0 : fault_bad(e, at, "kind", need, v);
}

/* Every member of one fault known. */
static int fault_keys(const json_t *obj, const char *at, struct err *e)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        if (spec_list_index(fault_members, key) >= 0)
            continue;
        char path[96];
        snprintf(path, sizeof path, "%s.%.24s", at, key);
        return err_set(e, ERR_INVALID, path,
                       "%s: unknown field; a fault's fields: at_step or at_s, rank or node, "
                       "kind, duration_s, fraction, rate",
                       path);
    }
    return 0;
}

/* One fault checked; its normal form (owned) into *out. */
static int fault_check(const json_t *obj, const char *at, json_t **out, struct err *e)
{
    const struct vocab_fault *k = NULL;
    int64_t step, rank, node;
    double at_s, dur, frac, rate;
    if (!json_is_object(obj)) {
        char got[96];
        spec_value_text(obj, got, sizeof got);
        return err_set(e, ERR_INVALID, at,
                       "%s: must be an object {at_step | at_s, rank | node, kind, ...}, got %s",
                       at, got);
    }
    if (fault_keys(obj, at, e) < 0 || fault_kind(obj, at, &k, e) < 0 ||
        fault_one_of(obj, at, "at_step", "at_s", e) < 0 ||
        fault_one_of(obj, at, "rank", "node", e) < 0 ||
        fault_int(obj, at, "at_step", FAULT_MAX_STEP, &step, e) < 0 ||
        fault_num(obj, at, "at_s", 0, false, FAULT_MAX_S, &at_s, e) < 0 ||
        fault_int(obj, at, "rank", SPEC_MAX_WORLD - 1, &rank, e) < 0 ||
        fault_int(obj, at, "node", SPEC_MAX_WORLD - 1, &node, e) < 0 ||
        fault_takes(obj, at, "duration_s", k->duration, k->name, e) < 0 ||
        fault_takes(obj, at, "fraction", k->fraction, k->name, e) < 0 ||
        fault_takes(obj, at, "rate", k->rate, k->name, e) < 0 ||
        fault_num(obj, at, "duration_s", 0, true, FAULT_MAX_S, &dur, e) < 0 ||
        fault_fraction(obj, at, &frac, e) < 0 ||
        fault_num(obj, at, "rate", 0, true, FAULT_MAX_RATE_MBIT, &rate, e) < 0)
        return -1;
    json_t *n = json_pack("{s:s}", "kind", k->name);
    for (int i = 1; n && fault_members[i]; i++) {
        const json_t *v = json_object_get(obj, fault_members[i]);
        if (v)
            json_object_set_new(n, fault_members[i],
                                json_is_integer(v) && i != 1 && i != 3 && i != 4
                                    ? json_real((double)json_integer_value(v))
                                    : json_deep_copy(v));
    }
    *out = n;
    if (!n)
        return err_set(e, ERR_NOMEM, at, "%s: out of memory", at);
    return 0;
}

int spec_faults_convert(const json_t *v, const char *path, json_t **out, struct err *e)
{
    char got[96];
    *out = NULL;
    if (!json_is_array(v) || json_array_size(v) > SPEC_MAX_FAULTS) {
        spec_value_text(v, got, sizeof got);
        return err_set(e, ERR_INVALID, path,
                       "%s: must be a list of at most %d faults {at_step | at_s, rank | node, "
                       "kind, ...}, got %s",
                       path, SPEC_MAX_FAULTS, got);
    }
    json_t *list = json_array();
    if (!list)
        return err_set(e, ERR_NOMEM, path, "%s: out of memory", path);
    for (size_t i = 0; i < json_array_size(v); i++) {
        char at[64];
        json_t *one = NULL;
        snprintf(at, sizeof at, "%s[%zu]", path, i);
        if (fault_check(json_array_get(v, i), at, &one, e) < 0 ||
            json_array_append_new(list, one) < 0) {
            json_decref(list);
            return -1;
        }
    }
    *out = list;
    return 0;
}

static double fault_real(const json_t *f, const char *m, double none)
{
    const json_t *v = json_object_get(f, m);
    return v ? json_number_value(v) : none;
}

static int64_t fault_integer(const json_t *f, const char *m)
{
    const json_t *v = json_object_get(f, m);
    return v ? json_integer_value(v) : -1;
}

int spec_faults_store(const json_t *v, struct spec *s)
{
    size_t n = json_array_size(v);
    if (n > SPEC_MAX_FAULTS)
        return -1;
    memset(s->faults, 0, sizeof s->faults);
    s->n_faults = (int)n;
    for (size_t i = 0; i < n; i++) {
        const json_t *f = json_array_get(v, i);
        struct spec_fault *o = &s->faults[i];
        snprintf(o->kind, sizeof o->kind, "%s", json_string_value(json_object_get(f, "kind")));
        o->at_step = fault_integer(f, "at_step");
        o->at_s = fault_real(f, "at_s", -1);
        o->rank = (int)fault_integer(f, "rank");
        o->node = (int)fault_integer(f, "node");
        o->duration_s = fault_real(f, "duration_s", 0);
        o->fraction = fault_real(f, "fraction", 0);
        o->rate_mbit = fault_real(f, "rate", 0);
    }
    return 0;
}

int spec_faults_check_placement(const json_t *faults, int world_size, int nodes,
                                const char *path, struct err *e)
{
    size_t i;
    const json_t *f;
    json_array_foreach((json_t *)faults, i, f)
    {
        int64_t rank = fault_integer(f, "rank"), node = fault_integer(f, "node");
        char at[64];
        if (rank >= world_size) {
            snprintf(at, sizeof at, "%s[%zu].rank", path, i);
            return err_set(e, ERR_INVALID, at,
                           "%s: rank %lld, but the run has %d rank%s (world_size); ranks are "
                           "0 to %d",
                           at, (long long)rank, world_size, world_size == 1 ? "" : "s",
                           world_size - 1);
        }
        if (nodes > 0 && node >= nodes) {
            snprintf(at, sizeof at, "%s[%zu].node", path, i);
            return err_set(e, ERR_INVALID, at,
                           "%s: node %lld, but the run spans %d node%s (nodes); nodes are 0 "
                           "to %d",
                           at, (long long)node, nodes, nodes == 1 ? "" : "s", nodes - 1);
        }
    }
    return 0;
}

static json_t *fault_schema_num(double lo, bool open, double hi)
{
    return json_pack("{s:s, s:f, s:f}", "type", "number", open ? "exclusiveMinimum" : "minimum",
                     lo, "maximum", hi);
}

json_t *spec_faults_schema(void)
{
    json_t *kinds = json_array();
    for (int i = 0; vocab_fault_at(i); i++)
        json_array_append_new(kinds, json_string(vocab_fault_at(i)));
    json_t *item = json_pack(
        "{s:s, s:b, s:[s], s:{s:{s:s, s:o}, s:{s:s, s:i, s:I}, s:o, s:{s:s, s:i, s:i}, "
        "s:{s:s, s:i, s:i}, s:o, s:o, s:o}}",
        "type", "object", "additionalProperties", 0, "required", "kind", "properties", "kind",
        "type", "string", "enum", kinds, "at_step", "type", "integer", "minimum", 0, "maximum",
        (json_int_t)FAULT_MAX_STEP, "at_s", fault_schema_num(0, false, FAULT_MAX_S), "rank",
        "type", "integer", "minimum", 0, "maximum", SPEC_MAX_WORLD - 1, "node", "type",
        "integer", "minimum", 0, "maximum", SPEC_MAX_WORLD - 1, "duration_s",
        fault_schema_num(0, true, FAULT_MAX_S), "fraction",
        json_pack("{s:s, s:i, s:i}", "type", "number", "exclusiveMinimum", 0,
                  "exclusiveMaximum", 1),
        "rate", fault_schema_num(0, true, FAULT_MAX_RATE_MBIT));
    return json_pack("{s:s, s:i, s:o}", "type", "array", "maxItems", SPEC_MAX_FAULTS, "items",
                     item);
}
