/* columns: the tables of columns.h and their JSON. Decision: the rows are indexed by the
 * enum (designated initializers), so a section's order in the enum and here cannot drift
 * apart; columns_check() finds a row left out. */
#include "common/columns.h"

#include <stdio.h>
#include <string.h>

#define PHASE_ROW(id, nm, lab, st, desc) [PHASE_##id] = {#nm, #nm "_ms", lab, st, desc},
static const struct phase_info phases_table[PHASE_N] = {PHASES(PHASE_ROW)};
#undef PHASE_ROW

const struct phase_info *phases_get(enum phase p)
{
    return &phases_table[p];
}

json_t *phases_json(void)
{
    json_t *out = json_array();
    for (int p = 0; p < PHASE_N; p++) {
        const struct phase_info *i = phases_get((enum phase)p);
        json_array_append_new(out,
                              json_pack("{s:s, s:s, s:s, s:i, s:b, s:s}", "name", i->name,
                                        "key", i->key, "label", i->label, "order", p, "stacked",
                                        i->stacked, "description", i->description));
    }
    return out;
}

#define COLUMN_ROW(id, k, sh, ty, un, lab, gr, desc)                                           \
    [COL_##id] = {k, COLUMN_##sh, CT_##ty, un, lab, CG_##gr, desc},
#define COLUMN_PHASE_ROW(id, nm, lab, st, desc)                                                \
    [COL_PHASE_##id] = {#nm "_ms", COLUMN_VALUE,          CT_NUMBER, "ms", lab,                \
                        CG_TRAIN,  "mean per step: " desc},
#define COLUMN_PRED_PHASE_ROW(id, nm, lab, st, desc)                                           \
    [COL_PRED_PHASE_##id] = {"pred_" #nm "_ms", COLUMN_VALUE,  CT_NUMBER,         "ms",        \
                             "model " lab,      CG_PREDICTION, "predicted: " desc},
static const struct column_info columns_table[COL_N] = {
    COLUMNS(COLUMN_ROW, COLUMN_PHASE_ROW, COLUMN_PRED_PHASE_ROW)};
#undef COLUMN_ROW
#undef COLUMN_PHASE_ROW
#undef COLUMN_PRED_PHASE_ROW

static const char *const columns_stat_suffix[] = {
    [STAT_MEAN] = "mean", [STAT_CI95] = "ci95", [STAT_MEDIAN] = "median", [STAT_P95] = "p95",
    [STAT_MIN] = "min",   [STAT_MAX] = "max",   [STAT_N] = "n",           [STAT_NONE] = ""};
static const char *const columns_shape_names[] = {"value", "mean", "spread"};
static const char *const columns_type_names[] = {"number", "integer", "boolean", "string"};
static const char *const columns_group_names[] = {"key",  "collective", "train",  "pipeline",
                                                  "data", "prediction", "memory", "usage",
                                                  "tta",  "elastic"};

const struct column_info *columns_get(enum column c)
{
    return &columns_table[c];
}

const char *columns_key(enum column c, enum column_stat st, char *out)
{
    if (st == STAT_NONE)
        snprintf(out, COLUMNS_KEY_MAX, "%s", columns_table[c].key);
    else
        snprintf(out, COLUMNS_KEY_MAX, "%s_%s", columns_table[c].key, columns_stat_suffix[st]);
    return out;
}

size_t columns_stats_of(enum column_shape shape, enum column_stat *out)
{
    static const enum column_stat mean[] = {STAT_MEAN, STAT_CI95, STAT_N};
    static const enum column_stat spread[] = {STAT_MEAN, STAT_CI95, STAT_MEDIAN, STAT_P95,
                                              STAT_MIN,  STAT_MAX,  STAT_N};
    const enum column_stat *s = shape == COLUMN_SPREAD ? spread : mean;
    size_t n = shape == COLUMN_SPREAD ? 7 : shape == COLUMN_MEAN ? 3 : 0;
    if (shape == COLUMN_VALUE) {
        out[0] = STAT_NONE;
        return 1;
    }
    memcpy(out, s, n * sizeof *s);
    return n;
}

const char *columns_heading(enum column c, char *out, size_t cap)
{
    const struct column_info *i = &columns_table[c];
    if (!i->unit[0] || strcmp(i->unit, "fraction") == 0)
        snprintf(out, cap, "%s", i->label);
    else
        snprintf(out, cap, "%s (%s)", i->label, i->unit);
    return out;
}

enum column columns_find(const char *key)
{
    for (int c = 0; c < COL_N; c++)
        if (columns_table[c].key && strcmp(columns_table[c].key, key) == 0)
            return (enum column)c;
    return COL_N;
}

json_t *columns_json(void)
{
    json_t *out = json_array();
    for (int c = 0; c < COL_N; c++) {
        const struct column_info *i = &columns_table[c];
        enum column_stat st[STAT_N + 1];
        size_t n = columns_stats_of(i->shape, st);
        json_t *stats = json_array();
        for (size_t k = 0; k < n && i->shape != COLUMN_VALUE; k++)
            json_array_append_new(stats, json_string(columns_stat_suffix[st[k]]));
        json_array_append_new(
            out,
            json_pack("{s:s, s:s, s:o, s:s, s:s, s:s, s:s, s:s}", "key", i->key, "shape",
                      columns_shape_names[i->shape], "stats", stats, "type",
                      columns_type_names[i->type], "unit", i->unit, "label", i->label, "group",
                      columns_group_names[i->group], "description", i->description));
    }
    return out;
}

/* {"type": [T, "null"], "description": ...} of one expanded key. */
static json_t *columns_prop_schema(const struct column_info *i, enum column_stat st)
{
    const char *type = st == STAT_N      ? "integer"
                       : st == STAT_NONE ? columns_type_names[i->type]
                                         : "number";
    char desc[256];
    if (st == STAT_NONE)
        snprintf(desc, sizeof desc, "%s%s%s%s", i->description, i->unit[0] ? " (" : "", i->unit,
                 i->unit[0] ? ")" : "");
    else
        snprintf(desc, sizeof desc, "%s of %s", columns_stat_suffix[st], i->description);
    return json_pack("{s:[s,s], s:s}", "type", type, "null", "description", desc);
}

json_t *columns_row_schema(void)
{
    json_t *props = json_object();
    for (int c = 0; c < COL_N; c++) {
        const struct column_info *i = &columns_table[c];
        enum column_stat st[STAT_N + 1];
        size_t n = columns_stats_of(i->shape, st);
        for (size_t k = 0; k < n; k++) {
            char key[COLUMNS_KEY_MAX];
            json_object_set_new(props, columns_key((enum column)c, st[k], key),
                                columns_prop_schema(i, st[k]));
        }
    }
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:b}", "$schema",
                     "https://json-schema.org/draft/2020-12/schema", "title", "ResultRow",
                     "type", "object", "description",
                     "One row of a results table: the group_by spec fields (any value), then "
                     "the columns of common/columns.h that the workload has (a collective's "
                     "or a training group's). Generated from common/columns.c.",
                     "properties", props, "additionalProperties", 1);
}

int columns_check(void)
{
    for (int c = 0; c < COL_N; c++) {
        if (!columns_table[c].key || !columns_table[c].label || !columns_table[c].unit ||
            !columns_table[c].description)
            return c;
        for (int d = 0; d < c; d++)
            if (strcmp(columns_table[c].key, columns_table[d].key) == 0)
                return c;
    }
    return COL_N;
}
