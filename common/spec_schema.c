/* spec_schema: the JSON Schema of a spec (spec_schema_json of spec.h), generated from the
 * field and rule tables of spec_table.c; schema/spec.schema.json is its output, written by
 * `test_spec --write-schema` and checked against it by test_spec.
 *
 * Decision: every field row becomes a property (type, range or enum, default,
 * description; a size field also as the exact pattern of its string forms), the workloads
 * and the SPEC_RULE_ONE_OF and SPEC_RULE_ALLOWED rows become if/then clauses, so a client
 * validating with the schema refuses what the server refuses where JSON Schema can say
 * it. What it cannot say (the rows of spec_checks[] and the LE and FILLS rules, the
 * distinct sizes, the run count) is listed, numbered, in the schema's description. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/spec_table.h"

/* Patterns are written with plain groups and [0-9] (no \d, no (?:)), so one text reads
 * alike in ECMA 262 (JSON Schema), Python, Rust and POSIX ERE, which the unit test checks
 * them with (regcomp) against what validation accepts. */

#define SPEC_PATTERN_MAX 2048 /* a size field's pattern is about 600 characters */
/* The unit suffixes spec_size_from_text accepts, after the digits. */
#define SPEC_RE_UNIT "([Ii]?[Bb])?"
#define SPEC_RE_ANY_UNIT "([KkMmGgTt]" SPEC_RE_UNIT "|[Bb])?"

static void spec_append_n(char *out, size_t n, size_t *len, const char *s, size_t k)
{
    char part[24];
    snprintf(part, sizeof part, "%.*s", (int)(k < sizeof part ? k : sizeof part - 1), s);
    spec_append(out, n, len, part);
}

/* Appends a regular expression matching exactly the n-digit strings from lo to hi (both n
 * digits, lo <= hi): their common prefix, then the first differing digit split into
 * lo's digit with the rest of its range, whole digits between, and hi's digit with the
 * rest of its range. */
static void spec_re_digits(const char *lo, const char *hi, size_t n, char *out, size_t cap,
                           size_t *len)
{
    size_t k = 0;
    while (k < n && lo[k] == hi[k])
        k++;
    spec_append_n(out, cap, len, lo, k);
    if (k == n)
        return;
    lo += k, hi += k, n -= k;
    char zeros[24], nines[24], part[40];
    memset(zeros, '0', n - 1), zeros[n - 1] = '\0';
    memset(nines, '9', n - 1), nines[n - 1] = '\0';
    bool lo_whole = strcmp(lo + 1, zeros) == 0, hi_whole = strcmp(hi + 1, nines) == 0;
    char first = (char)(lo[0] + !lo_whole), last = (char)(hi[0] - !hi_whole);
    const char *sep = "";
    spec_append(out, cap, len, "(");
    if (!lo_whole) {
        spec_append_n(out, cap, len, lo, 1);
        spec_re_digits(lo + 1, nines, n - 1, out, cap, len);
        sep = "|";
    }
    if (first <= last) {
        snprintf(part, sizeof part, n > 1 ? "%s[%c-%c][0-9]{%zu}" : "%s[%c-%c]", sep, first,
                 last, n - 1);
        spec_append(out, cap, len, part);
        sep = "|";
    }
    if (!hi_whole) {
        spec_append(out, cap, len, sep);
        spec_append_n(out, cap, len, hi, 1);
        spec_re_digits(zeros, hi + 1, n - 1, out, cap, len);
    }
    spec_append(out, cap, len, ")");
}

/* Appends a group matching exactly the decimal numbers from lo to hi (0 <= lo <= hi),
 * without leading zeros: one alternative per digit count. */
static void spec_re_range(int64_t lo, int64_t hi, char *out, size_t cap, size_t *len)
{
    char a[24], b[24];
    int64_t low = 1; /* the smallest number of d digits, d > 1 */
    spec_append(out, cap, len, "(");
    for (size_t d = 1; low <= hi; d++, low *= 10) {
        int64_t from = d == 1 ? lo : (lo > low ? lo : low);
        int64_t to = low <= INT64_MAX / 10 && low * 10 - 1 < hi ? low * 10 - 1 : hi;
        if (from > to)
            continue;
        snprintf(a, sizeof a, "%" PRId64, from);
        snprintf(b, sizeof b, "%" PRId64, to);
        spec_append(out, cap, len, from == lo ? "" : "|");
        spec_re_digits(a, b, d, out, cap, len);
    }
    spec_append(out, cap, len, ")");
}

/* The pattern of a SIZE field's string form: exactly the strings spec_parse_size reads as
 * a size in the field's range (or as 0 where 0 means "not used" and zero is true),
 * leading zeros and unit spellings included: per unit, the range of counts it allows. */
static void spec_schema_size_pattern(const struct spec_field *f, bool zero, char *out,
                                     size_t cap)
{
    static const char units[] = "KMGT";
    size_t len = 0;
    const char *sep = "";
    spec_append(out, cap, &len, "^0*(");
    for (int u = 0; u <= 4; u++) {
        int shift = 10 * u;
        int64_t lo = (f->min + (INT64_C(1) << shift) - 1) >> shift, hi = f->max >> shift;
        char suffix[24];
        if (lo > hi)
            continue;
        spec_append(out, cap, &len, sep);
        spec_re_range(lo, hi, out, cap, &len);
        if (u == 0)
            snprintf(suffix, sizeof suffix, "[Bb]?");
        else
            snprintf(suffix, sizeof suffix, "[%c%c]%s", units[u - 1], units[u - 1] | 0x20,
                     SPEC_RE_UNIT);
        spec_append(out, cap, &len, suffix);
        sep = "|";
    }
    if (zero) {
        spec_append(out, cap, &len, sep);
        spec_append(out, cap, &len, "0" SPEC_RE_ANY_UNIT);
    }
    spec_append(out, cap, &len, ")$");
}

static json_t *spec_schema_range(int64_t min, int64_t max)
{
    return json_pack("{s:s, s:I, s:I}", "type", "integer", "minimum", (json_int_t)min,
                     "maximum", (json_int_t)max);
}

/* The integer 0 ("not used"): const alone would take 0.0, which validation refuses. */
static json_t *spec_schema_zero(void)
{
    return json_pack("{s:s, s:i}", "type", "integer", "const", 0);
}

/* A size as an integer or a string, in f's range (or 0 when zero is true). */
static void spec_schema_size_forms(const struct spec_field *f, bool zero, json_t *alts)
{
    char pattern[SPEC_PATTERN_MAX];
    spec_schema_size_pattern(f, zero, pattern, sizeof pattern);
    if (zero)
        json_array_append_new(alts, spec_schema_zero());
    json_array_append_new(alts, spec_schema_range(f->min, f->max));
    json_array_append_new(alts, json_pack("{s:s, s:s}", "type", "string", "pattern", pattern));
}

/* Owned schema of one value of f (no description, no default). zero: 0 ("not used") is a
 * value too; false for a swept one-of field, whose partner is then 0, so a swept 0 leaves
 * both unused and is refused. */
static json_t *spec_schema_value(const struct spec_field *f, bool zero)
{
    json_t *s = json_object(), *alts = json_array();
    switch (f->type) {
    case SPEC_T_STRING:
        json_object_set_new(s, "type", json_string("string"));
        json_object_set_new(s, "minLength", json_integer(f->min));
        json_object_set_new(s, "maxLength", json_integer(f->max));
        /* printable ASCII, or anything but NUL (a C string ends there) */
        json_object_set_new(
            s, "pattern",
            json_string(f->flags & SPEC_F_PRINTABLE ? "^[ -~]*$" : "^[^\\x00]*$"));
        break;
    case SPEC_T_ENUM: {
        json_t *choices = json_array();
        for (int i = 0; spec_choice(f, i); i++)
            json_array_append_new(choices, json_string(spec_choice(f, i)));
        json_object_set_new(s, "type", json_string("string"));
        json_object_set_new(s, "enum", choices);
        break;
    }
    case SPEC_T_INT:
        if (zero)
            json_array_append_new(alts, spec_schema_zero());
        json_array_append_new(alts, spec_schema_range(f->min, f->max));
        break;
    case SPEC_T_SIZE: spec_schema_size_forms(f, zero, alts); break;
    case SPEC_T_BOOL: json_object_set_new(s, "type", json_string("boolean")); break;
    case SPEC_T_NUMBER:
        json_object_set_new(s, "type", json_string("number"));
        json_object_set_new(s, f->dmin_open ? "exclusiveMinimum" : "minimum",
                            json_real(f->dmin));
        json_object_set_new(s, "maximum", json_real(f->dmax));
        break;
    case SPEC_T_SHAPE:
        json_object_set_new(s, "type", json_string("array"));
        json_object_set_new(s, "items", spec_schema_range(f->min, f->max));
        json_array_append_new(alts, json_pack("{s:i}", "maxItems", 0));
        json_array_append_new(alts, json_pack("{s:i, s:i}", "minItems", 3, "maxItems", 3));
        break;
    case SPEC_T_MAP:
        json_object_set_new(s, "type", json_string("object"));
        json_object_set_new(s, "maxProperties", json_integer(SPEC_MAX_MPI_PARAMS));
        /* the key pattern (SPEC_MAP_KEY_PATTERN) is the server's to check: propertyNames
         * has no OpenAPI 3.0 form (schema/embed.py) */
        json_object_set_new(
            s, "additionalProperties",
            json_pack("{s:s, s:s}", "type", "string", "pattern", SPEC_MAP_VALUE_PATTERN));
        break;
    case SPEC_T_FAULTS: {
        json_t *fs = spec_faults_schema();
        json_object_update(s, fs);
        json_decref(fs);
        break;
    }
    case SPEC_T_SIZE_LIST: {
        json_t *item = json_array();
        spec_schema_size_forms(f, false, item);
        json_object_set_new(s, "type", json_string("array"));
        json_object_set_new(s, "maxItems", json_integer(SPEC_MAX_SIZES));
        json_object_set_new(s, "uniqueItems", json_true());
        json_object_set_new(s, "items", json_pack("{s:o}", "anyOf", item));
        break;
    }
    }
    if (json_array_size(alts) == 1)
        json_object_update(s, json_array_get(alts, 0));
    else if (json_array_size(alts) > 1)
        json_object_set(s, "anyOf", alts);
    json_decref(alts);
    return s;
}

static json_t *spec_schema_field(const struct spec_field *f)
{
    json_t *s = json_pack("{s:s}", "description", f->desc);
    json_t *v = spec_schema_value(f, f->flags & SPEC_F_ZERO_UNSET);
    json_object_update(s, v);
    json_decref(v);
    if (f->def)
        json_object_set_new(s, "default", json_loads(f->def, JSON_DECODE_ANY, NULL));
    return s;
}

/* The group of a nested field name ("dataset" of "dataset.name") into out (32 bytes). */
static const char *spec_schema_group_name(const char *name, const char *dot, char *out)
{
    snprintf(out, 32, "%.*s", (int)(dot - name), name);
    return out;
}

/* The properties object of group in props, made (an object schema) when missing.
 * Borrowed. */
static json_t *spec_schema_group(json_t *props, const char *group)
{
    json_t *g = json_object_get(props, group);
    if (!g) {
        g = json_pack("{s:s, s:s, s:{}, s:b}", "description", "", "type", "object",
                      "properties", "additionalProperties", 0);
        char desc[96];
        snprintf(desc, sizeof desc, "The %s.* fields, as one object.", group);
        json_object_set_new(g, "description", json_string(desc));
        json_object_set_new(props, group, g);
    }
    return json_object_get(g, "properties");
}

/* Fields that exist only for some workloads are forbidden for the others. */
static json_t *spec_schema_workload_rules(void)
{
    json_t *all = json_array();
    for (int w = 0; spec_workload_table[w]; w++) {
        json_t *top = json_object(), *swept = json_object();
        char group[32];
        for (size_t i = 0; i < spec_field_count; i++) {
            if (spec_field_in(&spec_field_table[i], (enum spec_workload)w))
                continue;
            /* a nested field forbids its whole group: groups belong to one workload */
            const char *name = spec_field_table[i].name, *dot = strchr(name, '.');
            if (dot)
                json_object_set_new(top, spec_schema_group_name(name, dot, group),
                                    json_false());
            else
                json_object_set_new(top, name, json_false());
            json_object_set_new(swept, spec_field_table[i].name, json_false());
        }
        if (json_object_size(top) == 0) {
            json_decref(top);
            json_decref(swept);
            continue;
        }
        /* a zip point names fields as a sweep does: the same ones are off */
        json_t *zip_off = json_pack("{s:{s:o}}", "items", "properties", json_deep_copy(swept));
        json_object_set_new(swept, SPEC_SWEEP_ZIP, zip_off);
        json_object_set_new(top, "sweep", json_pack("{s:o}", "properties", swept));
        json_array_append_new(all, json_pack("{s:{s:{s:{s:s}}}, s:{s:o}}", "if", "properties",
                                             "workload", "const", spec_workload_table[w],
                                             "then", "properties", top));
    }
    return all;
}

/* {properties: {name: S}} with name's group when it has one ("dataset.shape" is "shape"
 * inside "dataset"), and name (and its group) required when required is true. Owned; S is
 * stolen. */
static json_t *spec_schema_at(const char *name, json_t *value, bool required)
{
    const char *dot = strchr(name, '.');
    json_t *s = json_pack("{s:{s:o}}", "properties", dot ? dot + 1 : name, value);
    if (required)
        json_object_set_new(s, "required", json_pack("[s]", dot ? dot + 1 : name));
    if (dot) {
        char group[32];
        s = json_pack("{s:{s:o}}", "properties", spec_schema_group_name(name, dot, group), s);
        if (required)
            json_object_set_new(s, "required", json_pack("[s]", group));
    }
    return s;
}

/* "sweep" lists name (S: the schema of its list, NULL: any) or, when present is false,
 * does not. Owned; S is stolen. */
static json_t *spec_schema_swept(const char *name, json_t *list, bool present)
{
    json_t *sweep = json_pack("{s:{s:o}}", "properties", name,
                              present ? (list ? list : json_object()) : json_false());
    if (present)
        json_object_set_new(sweep, "required", json_pack("[s]", name));
    return json_pack("{s:{s:o}, s:[s]}", "properties", "sweep", sweep, "required", "sweep");
}

/* The alternatives (an owned array, for anyOf) of "the value of b that runs is one of
 * `values` (stolen)": b's sweep lists only those, or b is not swept and its value (given,
 * or the default when that is one) is. */
static json_t *spec_schema_runs_with(const struct spec_field *b, json_t *values)
{
    json_t *def = json_loads(b->def ? b->def : "null", JSON_DECODE_ANY, NULL), *v;
    bool default_ok = false;
    size_t i;
    json_array_foreach(values, i, v) default_ok |= json_equal(v, def);
    json_decref(def);
    json_t *top = spec_schema_at(b->name, json_pack("{s:O}", "enum", values), !default_ok);
    json_t *unswept = spec_schema_swept(b->name, NULL, false);
    json_object_update(json_object_get(top, "properties"),
                       json_object_get(unswept, "properties"));
    json_decref(unswept);
    json_t *swept = spec_schema_swept(b->name, json_pack("{s:{s:o}}", "items", "enum", values),
                                      true);
    return json_pack("[o, o]", swept, top);
}

/* A rule's values as JSON: strings, or booleans for a BOOL field. Owned. */
static json_t *spec_schema_words(const struct spec_field *f, const char *const *words)
{
    json_t *out = json_array();
    for (int k = 0; words[k]; k++)
        json_array_append_new(out, f->type == SPEC_T_BOOL
                                       ? json_boolean(!strcmp(words[k], "true"))
                                       : json_string(words[k]));
    return out;
}

/* SPEC_RULE_ALLOWED rules: for each value of a, two if/then clauses. When a has that
 * value at the top (or by default) and is not swept, the b that runs is allowed; when a's
 * sweep lists it, likewise (the cross product pairs it with every b that runs). Each rule's
 * b must be a field of every workload the rule is of, or have an allowed default
 * (test_spec checks), so a clause never requires b where it cannot be. */
static void spec_schema_allowed_rules(json_t *all)
{
    for (size_t i = 0; i < spec_rule_count; i++) {
        const struct spec_rule *r = &spec_rule_table[i];
        const struct spec_field *fa = spec_field_find(r->a), *fb = spec_field_find(r->b);
        for (const struct spec_allowed *al = r->kind == SPEC_RULE_ALLOWED ? r->allowed : NULL;
             al && al->a; al++) {
            json_t *va = spec_schema_words(fa, (const char *const[]){al->a, NULL});
            json_t *def = json_loads(fa->def ? fa->def : "null", JSON_DECODE_ANY, NULL);
            bool is_default = json_equal(json_array_get(va, 0), def);
            json_decref(def);
            json_t *values = spec_schema_words(fb, al->b);
            json_t *top_if = spec_schema_at(
                r->a, json_pack("{s:O}", "const", json_array_get(va, 0)), !is_default);
            json_t *top_then = spec_schema_runs_with(fb, json_incref(values));
            json_array_insert_new(top_then, 0, spec_schema_swept(r->a, NULL, true));
            json_t *contains = json_pack("{s:{s:{s:{s:O}}}}", "not", "items", "not", "const",
                                         json_array_get(va, 0));
            json_array_append_new(
                all, json_pack("{s:o, s:{s:o}}", "if", top_if, "then", "anyOf", top_then));
            json_array_append_new(
                all, json_pack("{s:o, s:{s:o}}", "if", spec_schema_swept(r->a, contains, true),
                               "then", "anyOf", spec_schema_runs_with(fb, values)));
            json_decref(va);
        }
    }
}

/* The schema's one-of value "not given": absent or 0 at the top, and not swept. */
static json_t *spec_schema_not_given(const struct spec_field *f)
{
    json_t *zero = spec_schema_zero();
    if (f->type == SPEC_T_SIZE)
        zero = json_pack("{s:[o, {s:s, s:s}]}", "anyOf", zero, "type", "string", "pattern",
                         "^0+" SPEC_RE_ANY_UNIT "$");
    json_t *s = spec_schema_at(f->name, zero, false);
    json_t *unswept = spec_schema_swept(f->name, NULL, false);
    json_object_update(json_object_get(s, "properties"),
                       json_object_get(unswept, "properties"));
    json_decref(unswept);
    return s;
}

/* SPEC_RULE_ONE_OF: a and b are not both given (set non-zero or swept). A swept value
 * of either is non-zero (spec_schema_value), so the one that runs is never 0. */
static void spec_schema_one_of_rules(json_t *all)
{
    for (size_t i = 0; i < spec_rule_count; i++) {
        const struct spec_rule *r = &spec_rule_table[i];
        if (r->kind != SPEC_RULE_ONE_OF)
            continue;
        char desc[128];
        snprintf(desc, sizeof desc, "%s and %s: set or sweep at most one", r->a, r->b);
        json_array_append_new(all, json_pack("{s:s, s:[o, o]}", "description", desc, "anyOf",
                                             spec_schema_not_given(spec_field_find(r->a)),
                                             spec_schema_not_given(spec_field_find(r->b))));
    }
}

/* sweep.zip (issue 33): 1 to SPEC_MAX_SWEEP_VALUES distinct points, each an object of
 * sweepable fields (fields: their value schemas, stolen). That every point names the same
 * fields, none of them also swept, is the description's rule (13). Owned. */
static json_t *spec_schema_zip(json_t *fields)
{
    return json_pack("{s:s, s:s, s:i, s:i, s:b, s:{s:s, s:i, s:o, s:b}}", "description",
                     "Points whose fields vary together (e.g. each engine with its strategy): "
                     "objects naming the same sweepable fields, crossed with the other lists; "
                     "a run's params carry the point's fields.",
                     "type", "array", "minItems", 1, "maxItems", SPEC_MAX_SWEEP_VALUES,
                     "uniqueItems", 1, "items", "type", "object", "minProperties", 1,
                     "properties", fields, "additionalProperties", 0);
}

/* The schema's own description: what it is, and the rules of the validator that JSON
 * Schema cannot state (relations between two values, counts over the cross product, the
 * memory estimate). tests/integration/schemathesis_hooks.py filters exactly these, so a
 * new rule here is a new filter there. */
static const char spec_schema_description_format[] =
    "An experiment for ddpbenchd (POST /v1/experiments). Generated from the field table in "
    "common/spec_table.c; do not edit by hand. The server also applies rules this schema "
    "cannot "
    "state, each refused with 400 naming the field: (1) min_bytes at most max_bytes, at the "
    "top and at every sweep point; (2) the sizes of \"sizes\" and the values of each sweep "
    "list distinct once their units are read (\"4K\" and 4096 are the same size); (3) at "
    "most %d runs in the sweep's cross product; (4) a train run's memory estimate for one "
    "rank (parameters, gradients, optimizer state, buffers, activations and input batches) "
    "at most %.0f TiB at every point; (5) nodes and ranks_per_node each at most world_size, "
    "and, when both are non-zero, nodes times ranks_per_node equal to world_size, at every "
    "point; (6) a model's data and engine, at every point: a gpt2 model trains on dataset "
    "synthetic or text, on device cpu with engine ddpbench, with seq_len at most its "
    "positions; any other model trains on images (not text) with seq_len 0; dataset text "
    "names its file in dataset.path; (7) pipelines, at every point: micro_batches above 1 "
    "and a non-empty pipeline_split only with pipeline above 1; then pipeline divides "
    "world_size, micro_batches divides batch_size, pipeline_split names pipeline - 1 layers "
    "(when given), accumulate is 1, device cpu and engine ddpbench, and a gpt2 model's "
    "strategy is not zero1 or zero2; (8) loader workers, at every point: dataset.workers "
    "above 1 only with prefetch at least 1; dataset.read_mbps, dataset.read_latency_ms and "
    "dataset.read_concurrency non-zero only with dataset.storage custom; dataset.storage "
    "other than local on mnist, fashion-mnist or cifar10 only with a dataset.format other "
    "than native; dataset.storage_layer other than auto only on mnist, fashion-mnist or "
    "cifar10 with a dataset.format other than native; (9) mpi_mca's keys, which OpenAPI "
    "3.0 cannot constrain: each an OpenMPI "
    "MCA parameter name (a lowercase letter, then up to 62 lowercase letters, digits and _) "
    "or MPIR_CVAR_ and 1 to 53 of A-Z, 0-9 and _; and in a run over MPI (backend mpi or "
    "launcher mpirun) every key is the run's implementation's (OpenMPI names with mpi "
    "openmpi, MPIR_CVAR_* with mpich) and an OpenMPI name one this node's OpenMPI lists "
    "(ompi_info); (10) transport shm, at every point: its ranks on one node, so nodes at "
    "most 1 and ranks_per_node 0 or at least world_size; (11) faults, at every point: each "
    "fault gives exactly one of at_step and at_s and exactly one of rank and node, the "
    "members its kind takes and no other (duration_s with stop, slow and link; fraction "
    "with slow; rate with link), a rank below world_size and, when nodes or "
    "ranks_per_node place the ranks, a node below their count; kind link only on a daemon "
    "with an emulated network (--network-profile, deploy/netlab.sh); (12) elastic, at "
    "every point: "
    "elastic.min_ranks at most world_size, elastic.max_ranks 0 or from min_ranks to "
    "world_size, pipeline 1, backend not mpi, engine ddpbench, pytorch or horovod; (13) "
    "sweep.zip: every point names the same fields, none of them also swept by its own list "
    "(400 naming sweep.zip[i].field, or sweep.field), and every rule holds at every point, "
    "the relations this schema states between two fields too (its clauses read the top "
    "level and the swept lists only), a refused one naming sweep.zip[i].field; "
    "(14) precision knobs, at every point: loss_scale 0 and loss_scale_window 2000 unless "
    "precision is fp16; clip_grad_norm 0 with device cuda and engine ddpbench; with "
    "pipeline above 1, clip_grad_norm 0 and precision not bf16; "
    "(15) a "
    "single-process strategy (mirrored, dp), at every point: its one process on one node "
    "(nodes at most 1 and ranks_per_node 0 or at least world_size), launcher ddpbench, "
    "no elastic, pipeline 1";
/* Its rules from (16) on (one C string may hold only so much). */
static const char spec_schema_description_tail[] =
    "; (16) a collective on a framework engine, at every point: "
    "engine pytorch, backend tcp, device cpu, op allreduce, all_gather or broadcast, "
    "algorithm auto, dtype not "
    "bfloat16, buckets_of none. "
    "dataset.path must also resolve beneath one of the daemon's --data-dir directories, "
    "else 400 naming it. A run must also fit this node or the cluster's nodes "
    "(CPU slots, GPUs, and for device cpu its memory; transport shm on one node), else "
    "409.";

json_t *spec_schema_json(void)
{
    json_t *props = json_object(), *swept = json_object(), *required = json_array();
    json_t *zipped = json_object(); /* stolen by spec_schema_zip */
    char group[32];
    for (size_t i = 0; i < spec_field_count; i++) {
        const struct spec_field *f = &spec_field_table[i];
        const char *dot = strchr(f->name, '.');
        if (dot)
            json_object_set_new(
                spec_schema_group(props, spec_schema_group_name(f->name, dot, group)), dot + 1,
                spec_schema_field(f));
        else
            json_object_set_new(props, f->name, spec_schema_field(f));
        if (f->flags & SPEC_F_REQUIRED)
            json_array_append_new(required, json_string(f->name));
        if (f->flags & SPEC_F_SWEEP)
            json_object_set_new(zipped, f->name, spec_schema_value(f, false));
        if (f->flags & SPEC_F_SWEEP)
            json_object_set_new(swept, f->name,
                                json_pack("{s:s, s:i, s:i, s:b, s:o}", "type", "array",
                                          "minItems", 1, "maxItems", SPEC_MAX_SWEEP_VALUES,
                                          "uniqueItems", 1, "items",
                                          spec_schema_value(f, false)));
    }
    json_object_set_new(swept, SPEC_SWEEP_ZIP, spec_schema_zip(zipped));
    char sweep_desc[768];
    snprintf(sweep_desc, sizeof sweep_desc,
             "Fields to sweep, each with a list of 1 to %d distinct values: the experiment "
             "runs every combination (the cross product, last field varying fastest). The "
             "product of the lists' lengths may be at most %d runs; a larger sweep is refused "
             "(400, field \"sweep\"): sweep fewer values or split the experiment. \"zip\" "
             "lists points of fields that vary together, one more list of the cross product "
             "(its length counts).",
             SPEC_MAX_SWEEP_VALUES, SPEC_MAX_RUNS);
    json_object_set_new(props, "sweep",
                        json_pack("{s:s, s:s, s:o, s:b}", "description", sweep_desc, "type",
                                  "object", "properties", swept, "additionalProperties", 0));
    char description[sizeof spec_schema_description_format +
                     sizeof spec_schema_description_tail + 32];
    int head = snprintf(description, sizeof description, spec_schema_description_format,
                        SPEC_MAX_RUNS, (double)SPEC_MAX_RANK_BYTES / (1024.0 * SPEC_GIB));
    snprintf(description + head, sizeof description - (size_t)head, "%s",
             spec_schema_description_tail);
    json_t *schema = json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:b}", "$schema",
                               "https://json-schema.org/draft/2020-12/schema", "title",
                               "ddpbench experiment spec", "description", description, "type",
                               "object", "required", required, "properties", props,
                               "additionalProperties", 0);
    json_t *rules = spec_schema_workload_rules();
    spec_schema_one_of_rules(rules);
    spec_schema_allowed_rules(rules);
    if (schema && json_array_size(rules) > 0)
        json_object_set(schema, "allOf", rules);
    json_decref(rules);
    return schema;
}
