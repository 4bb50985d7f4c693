/* Unit tests for common/columns: every enum value has a row with a unique key, keys and
 * statistics expand as results rows have them, the phase columns follow PHASES, and
 * schema/result_row.schema.json and schema/columns.json are what the tables generate
 * (the contract's ResultRow, and the phases and columns the Python and JS sides read).
 *
 * `test_columns --write-schema SRCDIR` regenerates both files under SRCDIR/schema. */
#include <unistd.h>

#include "common/columns.h"
#include "tests/unit/test.h"

static const char *const generated[] = {"schema/result_row.schema.json", "schema/columns.json"};

/* The text of generated[i] as the tables make it. Owned. */
static char *columns_text_now(int i)
{
    json_t *doc = i == 0 ? columns_row_schema()
                         : json_pack("{s:o, s:o}", "columns", columns_json(), "phases",
                                     phases_json());
    char *text = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(doc);
    if (!text)
        return NULL;
    char *out = malloc(strlen(text) + 2); /* a final newline, as editors leave it */
    if (out)
        sprintf(out, "%s\n", text);
    free(text);
    return out;
}

/* The whole file at path, or NULL. Owned. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *p = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    if (p)
        p[n] = '\0';
    fclose(f);
    return p;
}

static void test_columns_rows_complete(void)
{
    T_EQ_INT(columns_check(), COL_N);
    for (int c = 0; c < COL_N; c++)
        T_CHECK(columns_find(columns_get((enum column)c)->key) == (enum column)c);
    T_CHECK(columns_find("no_such_column") == COL_N);
}

static void test_columns_keys(void)
{
    char key[COLUMNS_KEY_MAX], head[96];
    T_EQ_STR(columns_key(COL_STEP_MS, STAT_P95, key), "step_ms_p95");
    T_EQ_STR(columns_key(COL_OVERLAP, STAT_NONE, key), "overlap");
    enum column_stat st[STAT_N + 1];
    T_EQ_INT(columns_stats_of(columns_get(COL_THROUGHPUT)->shape, st), 3);
    T_CHECK(st[0] == STAT_MEAN && st[1] == STAT_CI95 && st[2] == STAT_N);
    T_EQ_INT(columns_stats_of(columns_get(COL_BUSBW_GBS)->shape, st), 7);
    T_EQ_INT(columns_stats_of(COLUMN_VALUE, st), 1);
    T_EQ_STR(columns_heading(COL_STEP_MS, head, sizeof head), "step (ms)");
    T_EQ_STR(columns_heading(COL_EFFICIENCY, head, sizeof head), "efficiency");
}

static void test_columns_phases(void)
{
    T_EQ_STR(phases_get(PHASE_DATA)->key, "data_ms");
    T_EQ_STR(phases_get(PHASE_COMM_EXPOSED)->name, "comm_exposed");
    T_CHECK(!phases_get(PHASE_COMM)->stacked); /* it runs beside backward */
    for (int p = 0; p < PHASE_N; p++) {
        char pred[COLUMNS_KEY_MAX];
        snprintf(pred, sizeof pred, "pred_%s", phases_get((enum phase)p)->key);
        T_EQ_STR(columns_get(COLUMN_OF_PHASE(p))->key, phases_get((enum phase)p)->key);
        T_EQ_STR(columns_get(COLUMN_OF_PRED_PHASE(p))->key, pred);
    }
    json_t *j = phases_json();
    T_EQ_INT(json_array_size(j), PHASE_N);
    T_EQ_INT(json_integer_value(json_object_get(json_array_get(j, 2), "order")), 2);
    json_decref(j);
}

static void test_columns_json_and_schema(void)
{
    json_t *j = columns_json();
    T_EQ_INT(json_array_size(j), COL_N);
    const json_t *step = json_array_get(j, COL_STEP_MS);
    T_EQ_STR(json_string_value(json_object_get(step, "key")), "step_ms");
    T_EQ_STR(json_string_value(json_object_get(step, "unit")), "ms");
    T_EQ_STR(json_string_value(json_object_get(step, "group")), "train");
    T_EQ_INT(json_array_size(json_object_get(step, "stats")), 7);
    json_decref(j);
    json_t *s = columns_row_schema();
    const json_t *props = json_object_get(s, "properties");
    const json_t *n = json_object_get(props, "throughput_n");
    T_EQ_STR(json_string_value(json_array_get(json_object_get(n, "type"), 0)), "integer");
    T_CHECK(json_object_get(props, "pred_optimizer_ms"));
    T_CHECK(!json_object_get(props, "throughput")); /* a shaped column has no bare key */
    T_CHECK(json_is_true(json_object_get(s, "additionalProperties")));
    json_decref(s);
}

static void test_columns_files_in_sync(void)
{
    const char *src = getenv("DDPB_SOURCE_DIR");
    T_CHECK_MSG(src && *src, "set DDPB_SOURCE_DIR to the source tree (meson test does)");
    for (int i = 0; i < 2; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", src, generated[i]);
        char *file = slurp(path), *now = columns_text_now(i);
        bool same = file && now && strcmp(file, now) == 0;
        if (!same)
            fprintf(stderr,
                    "    %s is not what common/columns.c generates: regenerate with\n"
                    "      <build>/tests/test_columns --write-schema %s\n"
                    "    and commit the result.\n",
                    path, src);
        free(file);
        free(now);
        T_CHECK(same);
    }
}

static int columns_write(const char *src)
{
    int rc = 0;
    for (int i = 0; i < 2; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", src, generated[i]);
        char *text = columns_text_now(i);
        FILE *f = text ? fopen(path, "w") : NULL;
        int bad = !f || fputs(text, f) < 0;
        if (f && fclose(f) != 0)
            bad = 1;
        free(text);
        fprintf(stderr, bad ? "cannot write %s\n" : "wrote %s\n", path);
        rc |= bad;
    }
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--write-schema") == 0)
        return columns_write(argv[2]);
    test_begin(argc, argv);
    TEST_RUN(test_columns_rows_complete);
    TEST_RUN(test_columns_keys);
    TEST_RUN(test_columns_phases);
    TEST_RUN(test_columns_json_and_schema);
    TEST_RUN(test_columns_files_in_sync);
    return test_end();
}
