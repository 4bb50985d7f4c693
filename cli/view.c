/* view: see view.h. Result tables (show and compare) are built in three steps over the
 * same column list: choose the columns (group keys, then every known column a table
 * has; constant descriptive ones set aside), order the rows (compare: rows that describe
 * the same point together), then emit each row's cells. */
#include "cli/view.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/table.h"
#include "common/columns.h"

enum view_kind {
    VK_VALUE,
    VK_BYTES,
    VK_STAT,
    VK_INT,
    VK_NUM,
    VK_PCT,
    VK_TIME,     /* ISO-8601 shown as "2026-11-22 10:04:05" */
    VK_DURATION, /* seconds */
    VK_PAIRS,    /* an object as "k=v, k=v" */
    VK_OF,       /* "key/key2" */
};

enum view_flag {
    VF_HIDE_CONST = 1,  /* the same value in every row: shown once above the table */
    VF_MATCH = 2,       /* compare: rows with equal values describe the same point */
    VF_COMPARE = 4,     /* compare shows it */
    VF_HIDE_NULL = 8,   /* null in every row (not measured, not asked): not shown */
    VF_HIDE_FALSE = 16, /* false or null in every row (a flag no row has): not shown */
};

struct view_col {
    const char *key, *head;
    enum view_kind kind;
    const char *key2; /* VK_STAT: the 95% half-width next to the mean; VK_OF: the total */
    unsigned flags;
};

/* The results table's columns: a statistic of a common/columns.h column, shown as kind,
 * with a second one for VK_STAT (the interval) and VK_OF (the total); headings come from
 * the columns table (view_results_cols_fill). */
struct view_result_col {
    enum column c;
    enum column_stat st;
    enum view_kind kind;
    enum column c2; /* COL_N: none */
    enum column_stat st2;
    unsigned flags;
};

static const struct view_result_col view_result_cols[] = {
    {COL_OP, STAT_NONE, VK_VALUE, COL_N, STAT_NONE, VF_HIDE_CONST | VF_MATCH | VF_COMPARE},
    {COL_DTYPE, STAT_NONE, VK_VALUE, COL_N, STAT_NONE, VF_HIDE_CONST | VF_MATCH | VF_COMPARE},
    {COL_REDOP, STAT_NONE, VK_VALUE, COL_N, STAT_NONE, VF_HIDE_CONST | VF_MATCH | VF_COMPARE},
    {COL_INPLACE, STAT_NONE, VK_VALUE, COL_N, STAT_NONE, VF_HIDE_CONST | VF_MATCH | VF_COMPARE},
    {COL_ALGORITHM, STAT_NONE, VK_VALUE, COL_N, STAT_NONE, VF_HIDE_CONST | VF_COMPARE},
    {COL_WORLD_SIZE, STAT_NONE, VK_VALUE, COL_N, STAT_NONE, VF_MATCH | VF_COMPARE},
    /* beside world_size: its replicas shared one process (issue 33) */
    {COL_SINGLE_PROCESS, STAT_NONE, VK_VALUE, COL_N, STAT_NONE,
     VF_HIDE_FALSE | VF_HIDE_CONST | VF_MATCH | VF_COMPARE},
    {COL_BYTES, STAT_NONE, VK_BYTES, COL_N, STAT_NONE, VF_MATCH | VF_COMPARE},
    {COL_RUNS, STAT_NONE, VK_INT, COL_N, STAT_NONE, 0},
    {COL_BUSBW_GBS, STAT_MEAN, VK_STAT, COL_BUSBW_GBS, STAT_CI95, VF_COMPARE},
    {COL_BUSBW_GBS, STAT_N, VK_INT, COL_N, STAT_NONE, VF_COMPARE},
    {COL_ALGBW_GBS, STAT_MEAN, VK_NUM, COL_N, STAT_NONE, 0},
    {COL_TIME_US, STAT_MEDIAN, VK_NUM, COL_N, STAT_NONE, 0},
    {COL_TIME_US, STAT_P95, VK_NUM, COL_N, STAT_NONE, 0},
    {COL_WRONG, STAT_NONE, VK_INT, COL_N, STAT_NONE, 0},
    {COL_THROUGHPUT, STAT_MEAN, VK_STAT, COL_THROUGHPUT, STAT_CI95, VF_COMPARE},
    {COL_THROUGHPUT, STAT_N, VK_INT, COL_N, STAT_NONE, VF_COMPARE},
    {COL_STEP_MS, STAT_MEDIAN, VK_NUM, COL_N, STAT_NONE, 0},
    {COL_STEP_MS, STAT_P95, VK_NUM, COL_N, STAT_NONE, 0},
    {COL_PHASE_COMM_EXPOSED, STAT_NONE, VK_NUM, COL_N, STAT_NONE, 0},
    {COL_OVERLAP, STAT_NONE, VK_PCT, COL_N, STAT_NONE, 0},
    {COL_BUBBLE_FRACTION, STAT_NONE, VK_PCT, COL_N, STAT_NONE,
     VF_HIDE_NULL}, /* pipelines only */
    {COL_BUBBLE_THEORY, STAT_NONE, VK_PCT, COL_N, STAT_NONE, VF_HIDE_NULL},
    {COL_P2P_MS, STAT_NONE, VK_NUM, COL_N, STAT_NONE, VF_HIDE_NULL},
    {COL_DATA_FRACTION, STAT_NONE, VK_PCT, COL_N, STAT_NONE,
     VF_HIDE_NULL}, /* the data pipeline */
    {COL_READ_MBPS, STAT_NONE, VK_NUM, COL_N, STAT_NONE, VF_HIDE_NULL | VF_HIDE_CONST},
    {COL_SPEEDUP, STAT_NONE, VK_STAT, COL_SPEEDUP_CI95, STAT_NONE, VF_COMPARE},
    {COL_EFFICIENCY, STAT_NONE, VK_PCT, COL_N, STAT_NONE, VF_COMPARE},
    {COL_PRED_STEP_MS, STAT_NONE, VK_NUM, COL_N, STAT_NONE, VF_HIDE_NULL},
    {COL_PRED_STEP_ERR, STAT_NONE, VK_PCT, COL_N, STAT_NONE, VF_HIDE_NULL},
    {COL_TEST_ACC, STAT_MEAN, VK_PCT, COL_N, STAT_NONE, 0},
    {COL_TRAIN_LOSS, STAT_MEAN, VK_NUM, COL_N, STAT_NONE, 0},
    {COL_MODEL_STATE_BYTES, STAT_MEAN, VK_BYTES, COL_N, STAT_NONE, VF_HIDE_NULL},
    {COL_PEAK_RSS_BYTES, STAT_MEAN, VK_BYTES, COL_N, STAT_NONE, VF_HIDE_NULL},
    {COL_DEVICE_PEAK_BYTES, STAT_MEAN, VK_BYTES, COL_N, STAT_NONE, VF_HIDE_NULL},
    {COL_CPU_UTIL, STAT_MEAN, VK_NUM, COL_N, STAT_NONE, VF_HIDE_NULL},
    {COL_GPU_UTIL_PCT, STAT_MEAN, VK_NUM, COL_N, STAT_NONE, VF_HIDE_NULL},
    {COL_TTA_S, STAT_MEAN, VK_STAT, COL_TTA_S, STAT_CI95, VF_HIDE_NULL | VF_COMPARE},
    {COL_TTA_REACHED, STAT_NONE, VK_OF, COL_TTA_REPEATS, STAT_NONE, VF_HIDE_NULL},
};

#define VIEW_NCOLS (sizeof view_result_cols / sizeof view_result_cols[0])
/* The figure compare relates to the first experiment's, by workload. */
static const enum column view_headline[] = {COL_BUSBW_GBS, COL_THROUGHPUT}; /* their means */

/* view_result_cols as struct view_col, with the storage of their keys and headings. */
struct view_results_cols {
    struct view_col col[VIEW_NCOLS];
    char key[VIEW_NCOLS][COLUMNS_KEY_MAX], key2[VIEW_NCOLS][COLUMNS_KEY_MAX];
    char head[VIEW_NCOLS][64];
    char headline[2][COLUMNS_KEY_MAX];
};

/* unit in ASCII, as the terminal tables are ("us" for "µs"). */
static const char *view_ascii_unit(const char *unit)
{
    return strcmp(unit, "\xc2\xb5s") == 0 ? "us" : unit;
}

/* A heading from the columns table: "n" for a count, else the label, the statistic where
 * it is not the mean, and the unit of a measured figure ("step median ms"; none for
 * counts, values and fractions shown as %). */
static void view_result_head(const struct view_result_col *r, char *out, size_t cap)
{
    const struct column_info *i = columns_get(r->c);
    const char *stat = r->st == STAT_MEDIAN ? " median" : r->st == STAT_P95 ? " p95" : "";
    bool unit = (r->kind == VK_NUM || r->kind == VK_STAT) && i->unit[0] &&
                strcmp(i->unit, "fraction") != 0;
    if (r->st == STAT_N)
        snprintf(out, cap, "n");
    else
        snprintf(out, cap, "%s%s%s%s", i->label, stat, unit ? " " : "",
                 unit ? view_ascii_unit(i->unit) : "");
}

static void view_results_cols_fill(struct view_results_cols *v)
{
    for (size_t i = 0; i < VIEW_NCOLS; i++) {
        const struct view_result_col *r = &view_result_cols[i];
        view_result_head(r, v->head[i], sizeof v->head[i]);
        v->col[i] = (struct view_col){
            .key = columns_key(r->c, r->st, v->key[i]),
            .head = v->head[i],
            .kind = r->kind,
            .key2 = r->c2 < COL_N ? columns_key(r->c2, r->st2, v->key2[i]) : NULL,
            .flags = r->flags};
    }
    for (size_t h = 0; h < 2; h++)
        columns_key(view_headline[h], STAT_MEAN, v->headline[h]);
}

/* --- small helpers ------------------------------------------------------------------ */

void view_scalar(const json_t *v, char *out, size_t cap)
{
    if (json_is_string(v)) {
        snprintf(out, cap, "%s", json_string_value(v));
    } else if (json_is_integer(v)) {
        snprintf(out, cap, "%lld", (long long)json_integer_value(v));
    } else if (json_is_real(v)) {
        table_fmt_num(json_real_value(v), out, cap);
    } else if (!v || json_is_null(v)) {
        snprintf(out, cap, "-");
    } else if (json_is_boolean(v)) {
        snprintf(out, cap, "%s", json_is_true(v) ? "true" : "false");
    } else {
        char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        snprintf(out, cap, "%s", s ? s : "?");
        free(s);
    }
}

static double view_num(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static const char *view_str(const json_t *obj, const char *key)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s ? s : "-";
}

static bool view_table_has(const json_t *table, const char *key)
{
    size_t i;
    const json_t *c;
    json_array_foreach(json_object_get(table, "columns"), i,
                       c) if (json_is_string(c) &&
                              strcmp(json_string_value(c), key) == 0) return true;
    return false;
}

/* "k=v, k=v" of an object's members; "-" when it has none. */
static void view_pairs(const json_t *obj, const char *sep, char *out, size_t cap)
{
    const char *k;
    const json_t *v;
    size_t n = 0;
    out[0] = '\0';
    json_object_foreach((json_t *)obj, k, v)
    {
        char val[128];
        view_scalar(v, val, sizeof val);
        n += (size_t)snprintf(out + n, n < cap ? cap - n : 0, "%s%s=%s", n ? sep : "", k, val);
        if (n >= cap)
            break;
    }
    if (!out[0])
        snprintf(out, cap, "-");
}

static int view_flush(struct table *t, struct buf *out)
{
    int rc = table_render(t, out);
    table_free(t);
    return rc;
}

/* --- result tables ------------------------------------------------------------------- */

struct view_rowref {
    size_t src;        /* index into view_src */
    const json_t *row; /* borrowed */
    char *match;       /* owned: compact JSON of the row's matching values */
    size_t group;      /* index of the first row with the same match */
    size_t order;      /* position before sorting */
};

struct view_build {
    const struct view_src *src;
    size_t n;
    bool compare;
    const char *keys[TABLE_MAX_COLS]; /* group_by fields (union), borrowed */
    size_t nkeys;
    struct view_results_cols all; /* every results column, as the table may show it */
    const struct view_col *cols[VIEW_NCOLS];
    size_t ncols;
    json_t *consts; /* owned: hidden constant columns and their value */
    const char *headline;
    struct view_rowref *rows; /* owned */
    size_t nrows;
};

static bool view_is_key(const struct view_build *b, const char *key)
{
    for (size_t i = 0; i < b->nkeys; i++)
        if (strcmp(b->keys[i], key) == 0)
            return true;
    return false;
}

static bool view_any_has(const struct view_build *b, const char *key)
{
    for (size_t i = 0; i < b->n; i++)
        if (view_table_has(b->src[i].table, key))
            return true;
    return false;
}

/* Whether key is null (or absent) in every row. */
static bool view_all_null(const struct view_build *b, const char *key)
{
    for (size_t r = 0; r < b->nrows; r++) {
        const json_t *v = json_object_get(b->rows[r].row, key);
        if (v && !json_is_null(v))
            return false;
    }
    return true;
}

static bool view_all_false(const struct view_build *b, const char *key)
{
    for (size_t r = 0; r < b->nrows; r++)
        if (json_is_true(json_object_get(b->rows[r].row, key)))
            return false;
    return true;
}

static void view_collect_keys(struct view_build *b)
{
    for (size_t i = 0; i < b->n; i++) {
        size_t j;
        const json_t *k;
        json_array_foreach(json_object_get(b->src[i].table, "group_by"), j,
                           k) if (json_is_string(k) && !view_is_key(b, json_string_value(k)) &&
                                  b->nkeys < TABLE_MAX_COLS / 2)
            b->keys[b->nkeys++] = json_string_value(k);
    }
}

/* The value every row has for key (NULL: rows differ). Borrowed. */
static const json_t *view_constant(const struct view_build *b, const char *key)
{
    const json_t *first = NULL;
    bool seen = false;
    for (size_t r = 0; r < b->nrows; r++) {
        const json_t *v = json_object_get(b->rows[r].row, key);
        if (!seen)
            first = v;
        else if (!(v == first || (v && first && json_equal(v, first))))
            return NULL;
        seen = true;
    }
    return seen ? first : NULL;
}

static void view_choose_cols(struct view_build *b)
{
    for (size_t i = 0; i < VIEW_NCOLS; i++) {
        const struct view_col *c = &b->all.col[i];
        if (view_is_key(b, c->key) || !view_any_has(b, c->key) ||
            (b->compare && !(c->flags & VF_COMPARE)) ||
            ((c->flags & VF_HIDE_NULL) && view_all_null(b, c->key)) ||
            ((c->flags & VF_HIDE_FALSE) && view_all_false(b, c->key)))
            continue;
        const json_t *same = (c->flags & VF_HIDE_CONST) ? view_constant(b, c->key) : NULL;
        if (same && !json_is_null(same)) {
            json_object_set(b->consts, c->key, (json_t *)same);
            continue;
        }
        b->cols[b->ncols++] = c;
    }
    for (size_t h = 0; b->compare && h < 2 && !b->headline; h++)
        if (view_any_has(b, b->all.headline[h]))
            b->headline = b->all.headline[h];
}

/* A row's value of key, else its experiment's spec's (borrowed, may be NULL). */
static const json_t *view_value(const struct view_build *b, const struct view_rowref *r,
                                const char *key)
{
    const json_t *v = json_object_get(r->row, key);
    return v ? v : json_object_get(b->src[r->src].spec, key);
}

/* Owned compact JSON of the values that say which point a row measures. */
static char *view_match_of(const struct view_build *b, const struct view_rowref *r)
{
    json_t *m = json_object();
    for (size_t i = 0; m && i < b->nkeys; i++) {
        const json_t *v = view_value(b, r, b->keys[i]);
        json_object_set_new(m, b->keys[i], v ? json_deep_copy(v) : json_null());
    }
    for (size_t i = 0; m && i < VIEW_NCOLS; i++) {
        const struct view_col *c = &b->all.col[i];
        const json_t *v = (c->flags & VF_MATCH) ? view_value(b, r, c->key) : NULL;
        if (v)
            json_object_set(m, c->key, (json_t *)v);
    }
    char *s = m ? json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(m);
    return s;
}

static int view_rowref_cmp(const void *pa, const void *pb)
{
    const struct view_rowref *a = pa, *b = pb;
    if (a->group != b->group)
        return a->group < b->group ? -1 : 1;
    if (a->src != b->src)
        return a->src < b->src ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

static int view_collect_rows(struct view_build *b)
{
    size_t total = 0;
    for (size_t i = 0; i < b->n; i++)
        total += json_array_size(json_object_get(b->src[i].table, "rows"));
    b->rows = calloc(total + 1, sizeof *b->rows);
    if (!b->rows)
        return -1;
    for (size_t i = 0; i < b->n; i++) {
        size_t j;
        const json_t *row;
        json_array_foreach(json_object_get(b->src[i].table, "rows"), j, row)
        {
            struct view_rowref *r = &b->rows[b->nrows];
            *r = (struct view_rowref){.src = i, .row = row, .order = b->nrows};
            r->group = b->nrows++;
        }
    }
    return 0;
}

/* Compare: each row joins the group of the first row that measures the same point. */
static int view_group_rows(struct view_build *b)
{
    for (size_t r = 0; r < b->nrows; r++) {
        if (!(b->rows[r].match = view_match_of(b, &b->rows[r])))
            return -1;
        for (size_t q = 0; q < r; q++)
            if (strcmp(b->rows[q].match, b->rows[r].match) == 0) {
                b->rows[r].group = b->rows[q].group;
                break;
            }
    }
    qsort(b->rows, b->nrows, sizeof *b->rows, view_rowref_cmp);
    return 0;
}

static void view_cell(const struct view_col *c, const json_t *row, char *out, size_t cap)
{
    const json_t *v = json_object_get(row, c->key);
    switch (c->kind) {
    case VK_BYTES:
        if (json_is_number(v)) /* a mean over repeats is a real */
            table_fmt_bytes((int64_t)llround(json_number_value(v)), out, cap);
        else
            view_scalar(v, out, cap);
        return;
    case VK_STAT:
        table_fmt_mean_ci(view_num(row, c->key), view_num(row, c->key2), out, cap);
        return;
    case VK_NUM: table_fmt_num(view_num(row, c->key), out, cap); return;
    case VK_PCT: table_fmt_pct(view_num(row, c->key), out, cap); return;
    case VK_TIME: table_fmt_time(json_string_value(v), out, cap); return;
    case VK_DURATION: table_fmt_duration(view_num(row, c->key), out, cap); return;
    case VK_PAIRS: view_pairs(v, ", ", out, cap); return;
    case VK_OF:
        snprintf(out, cap, "%lld/%lld", (long long)json_integer_value(v),
                 (long long)json_integer_value(json_object_get(row, c->key2)));
        return;
    default: view_scalar(v, out, cap); return;
    }
}

/* The headline figure relative to the first experiment's row of the same point. */
static void view_ratio(const struct view_build *b, size_t r, char *out, size_t cap)
{
    snprintf(out, cap, "-");
    const struct view_rowref *base = NULL;
    for (size_t q = 0; q < b->nrows && !base; q++)
        if (b->rows[q].group == b->rows[r].group && b->rows[q].src == 0)
            base = &b->rows[q];
    double x = view_num(b->rows[r].row, b->headline);
    double y = base ? view_num(base->row, b->headline) : NAN;
    if (isfinite(x) && isfinite(y) && y > 0)
        snprintf(out, cap, "%.2fx", x / y);
}

static bool view_numeric_key(const struct view_build *b, const char *key)
{
    for (size_t r = 0; r < b->nrows; r++) {
        const json_t *v = json_object_get(b->rows[r].row, key);
        if (v && !json_is_null(v) && !json_is_number(v))
            return false;
    }
    return true;
}

static int view_add_cols(struct view_build *b, struct table *t)
{
    int rc = 0;
    char head[64];
    if (b->compare)
        rc |= table_add_col(t, "exp", TABLE_RIGHT, 0, false);
    for (size_t i = 0; i < b->nkeys; i++)
        rc |= table_add_col(t, b->keys[i],
                            view_numeric_key(b, b->keys[i]) ? TABLE_RIGHT : TABLE_LEFT, 40,
                            false);
    for (size_t i = 0; i < b->ncols; i++) {
        enum table_align a = b->cols[i]->kind == VK_VALUE ? TABLE_LEFT : TABLE_RIGHT;
        if (b->cols[i]->kind == VK_VALUE && view_numeric_key(b, b->cols[i]->key))
            a = TABLE_RIGHT;
        rc |= table_add_col(t, b->cols[i]->head, a, 40, true);
    }
    if (b->compare && b->headline) {
        snprintf(head, sizeof head, "vs #%lld", (long long)b->src[0].id);
        rc |= table_add_col(t, head, TABLE_RIGHT, 0, false);
    }
    return rc < 0 ? -1 : 0;
}

static int view_add_row(struct view_build *b, struct table *t, size_t r)
{
    const json_t *row = b->rows[r].row;
    char cell[256];
    size_t c = 0;
    int rc = table_add_row(t);
    if (b->compare && rc == 0)
        rc = table_setf(t, c++, "%lld", (long long)b->src[b->rows[r].src].id);
    for (size_t i = 0; i < b->nkeys && rc == 0; i++) {
        view_scalar(view_value(b, &b->rows[r], b->keys[i]), cell, sizeof cell);
        rc = table_set(t, c++, cell);
    }
    for (size_t i = 0; i < b->ncols && rc == 0; i++) {
        view_cell(b->cols[i], row, cell, sizeof cell);
        rc = table_set(t, c++, cell);
    }
    if (b->compare && b->headline && rc == 0) {
        view_ratio(b, r, cell, sizeof cell);
        rc = table_set(t, c++, cell);
    }
    return rc;
}

/* "op=allreduce  dtype=float32 ..." for the columns set aside as constant. */
static int view_consts_line(const struct view_build *b, struct buf *out)
{
    if (json_object_size(b->consts) == 0)
        return 0;
    char line[1024];
    view_pairs(b->consts, "  ", line, sizeof line);
    return buf_append_str(out, line) < 0 || buf_append_str(out, "\n") < 0 ? -1 : 0;
}

static int view_build_run(struct view_build *b, struct buf *out)
{
    if (!b->consts || view_collect_rows(b) < 0)
        return -1;
    if (b->nrows == 0)
        return buf_append_str(out, "(no results yet)\n");
    view_collect_keys(b);
    view_choose_cols(b);
    if (b->compare && view_group_rows(b) < 0)
        return -1;
    struct table t;
    table_init(&t);
    int rc = view_add_cols(b, &t);
    for (size_t r = 0; r < b->nrows && rc == 0; r++)
        rc = view_add_row(b, &t, r);
    if (rc == 0)
        rc = view_consts_line(b, out);
    if (rc == 0)
        return view_flush(&t, out);
    table_free(&t);
    return -1;
}

static int view_build(const struct view_src *src, size_t n, bool compare, struct buf *out)
{
    struct view_build b = {.src = src, .n = n, .compare = compare, .consts = json_object()};
    view_results_cols_fill(&b.all);
    int rc = view_build_run(&b, out);
    for (size_t r = 0; r < b.nrows; r++)
        free(b.rows[r].match);
    free(b.rows);
    json_decref(b.consts);
    return rc;
}

int view_results(const json_t *table, struct buf *out)
{
    struct view_src src = {.id = json_integer_value(json_object_get(table, "experiment")),
                           .table = table,
                           .spec = NULL};
    return view_build(&src, 1, false, out);
}

int view_compare(const struct view_src *src, size_t n, struct buf *out, struct err *e)
{
    for (size_t i = 1; i < n; i++) {
        const char *w0 = view_str(src[0].table, "workload");
        const char *wi = view_str(src[i].table, "workload");
        if (strcmp(w0, wi) != 0)
            return err_set(e, ERR_INVALID, "id",
                           "experiments %lld (%s) and %lld (%s) have "
                           "different workloads; compare needs one kind",
                           (long long)src[0].id, w0, (long long)src[i].id, wi);
    }
    if (view_build(src, n, true, out) < 0)
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    return 0;
}

static bool view_left(enum view_kind k)
{
    return k == VK_VALUE || k == VK_TIME || k == VK_PAIRS;
}

/* A table of an array of objects, one column per entry of cols; columns nobody fills
 * are left out. No rows: nothing at all. */
static int view_rows(const json_t *rows, const struct view_col *cols, size_t ncols,
                     struct buf *out)
{
    if (json_array_size(rows) == 0)
        return 0;
    struct table t;
    table_init(&t);
    for (size_t c = 0; c < ncols; c++)
        table_add_col(&t, cols[c].head, view_left(cols[c].kind) ? TABLE_LEFT : TABLE_RIGHT, 60,
                      true);
    size_t i;
    const json_t *r;
    int rc = 0;
    json_array_foreach(rows, i, r)
    {
        rc |= table_add_row(&t);
        for (size_t c = 0; c < ncols; c++) {
            char cell[512];
            view_cell(&cols[c], r, cell, sizeof cell);
            rc |= table_set(&t, c, cell);
        }
    }
    return rc < 0 ? (table_free(&t), -1) : view_flush(&t, out);
}

#define VIEW_ROWS(rows, cols, out) view_rows(rows, cols, sizeof cols / sizeof cols[0], out)

static const struct view_col view_list_cols[] = {
    {"id", "id", VK_INT, NULL, 0},
    {"name", "name", VK_VALUE, NULL, 0},
    {"workload", "workload", VK_VALUE, NULL, 0},
    {"status", "status", VK_VALUE, NULL, 0},
    {"runs_finished", "runs", VK_OF, "n_runs", 0},
    {"created_at", "created", VK_TIME, NULL, 0},
    {"duration_s", "duration", VK_DURATION, NULL, 0},
};

static const struct view_col view_run_cols[] = {
    {"id", "run", VK_INT, NULL, 0},
    {"point", "point", VK_INT, NULL, 0},
    {"params", "params", VK_PAIRS, NULL, 0},
    {"world_size", "ranks", VK_INT, NULL, 0},
    {"status", "status", VK_VALUE, NULL, 0},
    {"progress", "progress", VK_PCT, NULL, 0},
    {"duration_s", "duration", VK_DURATION, NULL, 0},
};

static const struct view_col view_rank_cols[] = {
    {"rank", "rank", VK_INT, NULL, 0},      {"node", "node", VK_VALUE, NULL, 0},
    {"host", "host", VK_VALUE, NULL, 0},    {"pid", "pid", VK_INT, NULL, 0},
    {"cpus", "cpus", VK_VALUE, NULL, 0},    {"status", "status", VK_VALUE, NULL, 0},
    {"exit_code", "exit", VK_INT, NULL, 0}, {"signal", "signal", VK_INT, NULL, 0},
    {"error", "error", VK_VALUE, NULL, 0},
};

static const struct view_col view_collective_cols[] = {
    {"repeat", "repeat", VK_INT, NULL, 0},
    {"op", "op", VK_VALUE, NULL, 0},
    {"dtype", "dtype", VK_VALUE, NULL, 0},
    {"algorithm", "algorithm", VK_VALUE, NULL, 0},
    {"bytes", "size", VK_BYTES, NULL, 0},
    {"iters", "iters", VK_INT, NULL, 0},
    {"time_us_median", "median us", VK_NUM, NULL, 0},
    {"time_us_p95", "p95 us", VK_NUM, NULL, 0},
    {"algbw_gbs", "algbw GB/s", VK_NUM, NULL, 0},
    {"busbw_gbs", "busbw GB/s", VK_NUM, NULL, 0},
    {"wrong", "wrong", VK_INT, NULL, 0},
};

static const struct view_col view_epoch_cols[] = {
    {"repeat", "repeat", VK_INT, NULL, 0},     {"epoch", "epoch", VK_INT, NULL, 0},
    {"samples", "samples", VK_INT, NULL, 0},   {"train_loss", "loss", VK_NUM, NULL, 0},
    {"train_acc", "acc", VK_PCT, NULL, 0},     {"test_loss", "test loss", VK_NUM, NULL, 0},
    {"test_acc", "test acc", VK_PCT, NULL, 0}, {"time_s", "seconds", VK_NUM, NULL, 0},
};

static const struct view_col view_memory_cols[] = {
    {"rank", "rank", VK_INT, NULL, 0},
    {"repeat", "repeat", VK_INT, NULL, 0},
    {"params_bytes", "params", VK_BYTES, NULL, 0},
    {"grads_bytes", "grads", VK_BYTES, NULL, 0},
    {"optimizer_bytes", "optimizer", VK_BYTES, NULL, 0},
    {"comm_bytes", "comm buffers", VK_BYTES, NULL, 0},
    {"activations_bytes", "activations", VK_BYTES, NULL, 0},
    {"peak_rss_bytes", "peak RSS", VK_BYTES, NULL, 0},
    {"device_peak_bytes", "GPU peak", VK_BYTES, NULL, 0},
};

/* GET /v1/runs/{id}'s faults (issue 32): each injected fault and its outcome. */
static const struct view_col view_fault_cols[] = {
    {"fault", "fault", VK_INT, NULL, 0},      {"kind", "kind", VK_VALUE, NULL, 0},
    {"rank", "rank", VK_INT, NULL, 0},        {"node", "node", VK_INT, NULL, 0},
    {"at_step", "at step", VK_INT, NULL, 0},  {"at_s", "at s", VK_NUM, NULL, 0},
    {"duration_s", "for s", VK_NUM, NULL, 0}, {"injected", "injected", VK_VALUE, NULL, 0},
    {"step", "step", VK_INT, NULL, 0},        {"run_s", "run s", VK_NUM, NULL, 0},
    {"note", "note", VK_VALUE, NULL, 0},
};

/* GET /v1/runs/{id}'s generations (issue 32): an elastic run's worlds, in order. */
static const struct view_col view_generation_cols[] = {
    {"gen", "gen", VK_INT, NULL, 0},
    {"world", "world", VK_INT, NULL, 0},
    {"members", "members", VK_VALUE, NULL, 0},
    {"joiners", "joiners", VK_VALUE, NULL, 0},
    {"reason", "reason", VK_VALUE, NULL, 0},
    {"regroup_ms", "regroup ms", VK_NUM, NULL, 0},
    {"commit_step", "commit", VK_INT, NULL, 0},
    {"lost_steps", "lost steps", VK_INT, NULL, 0},
};

static const struct view_col view_usage_cols[] = {
    {"rank", "rank", VK_INT, NULL, 0},
    {"repeat", "repeat", VK_INT, NULL, 0},
    {"steps", "steps", VK_INT, NULL, 0},
    {"wall_s", "wall s", VK_NUM, NULL, 0},
    {"user_s", "user s", VK_NUM, NULL, 0},
    {"sys_s", "sys s", VK_NUM, NULL, 0},
    {"cpu_util", "cores", VK_NUM, NULL, 0},
    {"voluntary_cs", "vol cs", VK_INT, NULL, 0},
    {"involuntary_cs", "invol cs", VK_INT, NULL, 0},
    {"gpu_util_pct", "GPU util %", VK_NUM, NULL, 0},
    {"gpu_power_w", "GPU W", VK_NUM, NULL, 0},
};

static const struct view_col view_node_cols[] = {
    {"name", "node", VK_VALUE, NULL, 0},
    {"role", "role", VK_VALUE, NULL, 0},
    {"state", "state", VK_VALUE, NULL, 0},
    {"address", "address", VK_VALUE, NULL, 0},
    {"slots_used", "slots", VK_OF, "cpu_slots", 0},
    {"gpus", "gpus", VK_INT, NULL, 0},
    {"network_profile", "profile", VK_VALUE, NULL, 0},
    {"heartbeat_age_s", "heartbeat s ago", VK_NUM, NULL, 0},
    {"runs", "runs", VK_INT, NULL, 0},
};

int view_nodes(const json_t *reply, struct buf *out)
{
    const json_t *nodes = json_object_get(reply, "nodes");
    if (VIEW_ROWS(nodes, view_node_cols, out) < 0)
        return -1;
    size_t i, up = 0;
    const json_t *n;
    json_array_foreach(nodes, i, n) up += strcmp(view_str(n, "state"), "up") == 0;
    char foot[96];
    snprintf(foot, sizeof foot, "%zu of %zu node%s up\n", up, json_array_size(nodes),
             json_array_size(nodes) == 1 ? "" : "s");
    return buf_append_str(out, foot);
}

/* --- experiments ---------------------------------------------------------------------- */

int view_experiments(const json_t *page, struct buf *out)
{
    const json_t *items = json_object_get(page, "items");
    if (VIEW_ROWS(items, view_list_cols, out) < 0)
        return -1;
    long long n = (long long)json_array_size(items);
    long long total = json_integer_value(json_object_get(page, "total"));
    long long off = json_integer_value(json_object_get(page, "offset"));
    char foot[160];
    if (total > off + n)
        snprintf(foot, sizeof foot, "%lld-%lld of %lld (--offset %lld for more)\n",
                 n ? off + 1 : off, off + n, total, off + n);
    else
        snprintf(foot, sizeof foot, "%lld experiment%s\n", total, total == 1 ? "" : "s");
    return buf_append_str(out, foot);
}

/* "run 15 failed (rank 1): why" for each run that carries an error. */
int view_errors(const json_t *runs, struct buf *out)
{
    size_t i;
    const json_t *r;
    struct table t; /* one-column table: sanitises the daemon's text like every cell */
    table_init(&t);
    t.bare = true;
    table_add_col(&t, "errors", TABLE_LEFT, 0, false);
    json_array_foreach(runs, i, r)
    {
        const char *why = json_string_value(json_object_get(r, "error"));
        if (!why)
            continue;
        if (table_add_row(&t) < 0 ||
            table_setf(&t, 0, "run %lld %s: %s",
                       (long long)json_integer_value(json_object_get(r, "id")),
                       view_str(r, "status"), why) < 0) {
            table_free(&t);
            return -1;
        }
    }
    if (t.nrows == 0) {
        table_free(&t);
        return 0;
    }
    return view_flush(&t, out);
}

int view_experiment(const json_t *exp, struct buf *out)
{
    char created[32], started[32], dur[32], line[1024];
    table_fmt_time(json_string_value(json_object_get(exp, "created_at")), created,
                   sizeof created);
    table_fmt_time(json_string_value(json_object_get(exp, "started_at")), started,
                   sizeof started);
    table_fmt_duration(view_num(exp, "duration_s"), dur, sizeof dur);
    struct table h; /* the header as a two-column table: aligned and sanitised */
    table_init(&h);
    table_add_col(&h, "experiment", TABLE_LEFT, 0, false);
    table_add_col(&h, "", TABLE_LEFT, 100, false);
    int rc = 0;
    const char *labels[] = {"name",    "workload", "status",   "runs",
                            "created", "started",  "duration", "sweep"};
    snprintf(line, sizeof line, "%lld of %lld finished",
             (long long)json_integer_value(json_object_get(exp, "runs_finished")),
             (long long)json_integer_value(json_object_get(exp, "n_runs")));
    const char *values[] = {view_str(exp, "name"),
                            view_str(exp, "workload"),
                            view_str(exp, "status"),
                            line,
                            created,
                            started,
                            dur,
                            NULL};
    char sweep[512];
    view_scalar(json_object_get(json_object_get(exp, "spec"), "sweep"), sweep, sizeof sweep);
    values[7] = sweep;
    for (size_t i = 0; i < sizeof labels / sizeof labels[0]; i++) {
        rc |= table_add_row(&h);
        rc |= table_set(&h, 0, labels[i]);
        rc |= table_set(&h, 1, values[i]);
    }
    char title[64];
    snprintf(title, sizeof title, "experiment %lld\n",
             (long long)json_integer_value(json_object_get(exp, "id")));
    if (rc < 0 || buf_append_str(out, title) < 0) {
        table_free(&h);
        return -1;
    }
    h.bare = true; /* the title line stands for the heading */
    if (view_flush(&h, out) < 0 || buf_append_str(out, "\n") < 0)
        return -1;
    const json_t *runs = json_object_get(exp, "runs");
    if (VIEW_ROWS(runs, view_run_cols, out) < 0)
        return -1;
    size_t mark = out->len;
    if (buf_append_str(out, "\n") < 0 || view_errors(runs, out) < 0)
        return -1;
    if (out->len == mark + 1)
        out->len = mark; /* no errors: no blank line either */
    return 0;
}

/* --- one run -------------------------------------------------------------------------- */

/* Rank 0's environment in full; for the other ranks only what differs from it. */
static int view_env(const json_t *envs, struct buf *out)
{
    const json_t *base = json_object_get(json_array_get(envs, 0), "env");
    if (!json_is_object(base))
        return 0;
    struct table t;
    table_init(&t);
    table_add_col(&t, "environment", TABLE_LEFT, 0, false);
    table_add_col(&t, "", TABLE_LEFT, 100, false);
    const char *k;
    const json_t *v;
    int rc = 0;
    char cell[1024];
    json_object_foreach((json_t *)base, k, v)
    {
        view_scalar(v, cell, sizeof cell);
        rc |= table_add_row(&t);
        rc |= table_set(&t, 0, k);
        rc |= table_set(&t, 1, cell);
    }
    size_t i;
    const json_t *other;
    json_array_foreach(envs, i, other)
    {
        json_t *diff = json_object();
        json_object_foreach(json_object_get(other, "env"), k,
                            v) if (i > 0 && diff && !json_equal(v, json_object_get(base, k)))
            json_object_set(diff, k, (json_t *)v);
        if (json_object_size(diff) > 0) {
            view_pairs(diff, ", ", cell, sizeof cell);
            rc |= table_add_row(&t);
            rc |= table_setf(&t, 0, "rank %lld",
                             (long long)json_integer_value(json_object_get(other, "rank")));
            rc |= table_set(&t, 1, cell);
        }
        json_decref(diff);
    }
    return rc < 0 ? (table_free(&t), -1) : view_flush(&t, out);
}

int view_run(const json_t *run, struct buf *out)
{
    char params[512], dur[32], line[1200];
    view_pairs(json_object_get(run, "params"), ", ", params, sizeof params);
    table_fmt_duration(view_num(run, "duration_s"), dur, sizeof dur);
    snprintf(line, sizeof line,
             "run %lld  experiment %lld  point %lld  status %s  "
             "ranks %lld  nodes %lld  duration %s\nparams: %s\n",
             (long long)json_integer_value(json_object_get(run, "id")),
             (long long)json_integer_value(json_object_get(run, "experiment_id")),
             (long long)json_integer_value(json_object_get(run, "point")),
             view_str(run, "status"),
             (long long)json_integer_value(json_object_get(run, "world_size")),
             json_is_integer(json_object_get(run, "nodes"))
                 ? (long long)json_integer_value(json_object_get(run, "nodes"))
                 : 1LL,
             dur, params);
    for (char *p = line; *p; p++) /* status and params come from the daemon */
        if ((unsigned char)*p < 0x20 && *p != '\n')
            *p = '?';
    if (buf_append_str(out, line) < 0)
        return -1;
    json_t *one = json_array(); /* the run's error through the sanitising error list */
    json_array_append(one, (json_t *)run);
    int rc = view_errors(one, out);
    json_decref(one);
    const char *const sections[] = {"ranks",  "env",   "collectives", "epochs",
                                    "memory", "usage", "faults",      "generations"};
    for (size_t i = 0; i < 8 && rc == 0; i++) {
        const json_t *rows = json_object_get(run, sections[i]);
        if (json_array_size(rows) == 0)
            continue;
        if (buf_append_str(out, "\n") < 0)
            return -1;
        rc = i == 0   ? VIEW_ROWS(rows, view_rank_cols, out)
             : i == 1 ? view_env(rows, out)
             : i == 2 ? VIEW_ROWS(rows, view_collective_cols, out)
             : i == 3 ? VIEW_ROWS(rows, view_epoch_cols, out)
             : i == 4 ? VIEW_ROWS(rows, view_memory_cols, out)
             : i == 5 ? VIEW_ROWS(rows, view_usage_cols, out)
             : i == 6 ? VIEW_ROWS(rows, view_fault_cols, out)
                      : VIEW_ROWS(rows, view_generation_cols, out);
    }
    return rc;
}

/* --- the performance model ------------------------------------------------------------- */

static const struct view_col view_fit_cols[] = {
    {"id", "fit", VK_VALUE, NULL, 0},
    {"experiment", "exp", VK_INT, NULL, 0},
    {"backend", "backend", VK_VALUE, NULL, 0},
    {"op", "op", VK_VALUE, NULL, 0},
    {"algorithm", "algorithm", VK_VALUE, NULL, 0},
    {"world_size", "ranks", VK_INT, NULL, 0},
    {"alpha_us", "alpha us", VK_NUM, NULL, 0},
    {"bandwidth_gbs", "1/beta GB/s", VK_NUM, NULL, 0},
    {"gamma_ns_per_byte", "gamma ns/B", VK_NUM, NULL, 0},
    {"r2", "R2", VK_NUM, NULL, 0},
    {"worst_residual", "worst resid", VK_PCT, NULL, 0},
    {"points", "points", VK_INT, NULL, 0},
};

int view_fits(const json_t *reply, struct buf *out)
{
    const json_t *fits = json_object_get(reply, "fits");
    if (VIEW_ROWS(fits, view_fit_cols, out) < 0)
        return -1;
    char foot[96];
    snprintf(foot, sizeof foot, "%zu fit%s (model version %lld)\n", json_array_size(fits),
             json_array_size(fits) == 1 ? "" : "s",
             (long long)json_integer_value(json_object_get(reply, "model_version")));
    return buf_append_str(out, foot);
}

static const struct view_col view_predict_cols[] = {
    {"base_run", "base run", VK_INT, NULL, 0},
    {"strategy", "strategy", VK_VALUE, NULL, 0},
    {"world_size", "ranks", VK_INT, NULL, 0},
    {"step_ms", "step ms", VK_NUM, NULL, 0},
    {"comm_exposed_ms", "exposed ms", VK_NUM, NULL, 0},
    {"throughput", "samples/s", VK_NUM, NULL, 0},
    {"speedup", "speedup", VK_NUM, NULL, 0},
    {"efficiency", "efficiency", VK_PCT, NULL, 0},
    {"overlap", "overlap", VK_PCT, NULL, 0},
    {"extrapolated", "extrapolated", VK_VALUE, NULL, 0},
};

int view_predict(const json_t *reply, struct buf *out)
{
    json_t *rows = json_array();
    size_t i, k;
    const json_t *c, *p;
    json_array_foreach(json_object_get(reply, "predictions"), i, c)
    {
        json_array_foreach(json_object_get(c, "points"), k, p)
        {
            json_t *r = json_deep_copy(p);
            json_object_set(r, "base_run", json_object_get(c, "base_run"));
            json_object_set(r, "strategy", json_object_get(c, "strategy"));
            json_array_append_new(rows, r);
        }
    }
    int rc = VIEW_ROWS(rows, view_predict_cols, out);
    json_decref(rows);
    const char *covers = json_string_value(
        json_object_get(json_object_get(reply, "covers"), "text"));
    if (rc == 0 && covers) /* the range the data covers: what "extrapolated" is against */
        rc = buf_printf(out, "data: %s\n", covers);
    json_array_foreach(json_object_get(reply, "predictions"), i, c)
    {
        char line[160];
        const json_t *at = json_object_get(c, "comm_exceeds_backward_at");
        if (json_is_integer(at))
            snprintf(line, sizeof line,
                     "run %lld %s: the exchanges outlast backward from %lld ranks on\n",
                     (long long)json_integer_value(json_object_get(c, "base_run")),
                     json_string_value(json_object_get(c, "strategy")),
                     (long long)json_integer_value(at));
        else
            line[0] = 0;
        if (rc == 0 && line[0])
            rc = buf_append_str(out, line);
    }
    return rc;
}
