/* Unit tests for daemon/db: migrations, the experiment/run life cycle, the experiment
 * status that follows its runs, queue order, results round trip, an epoch's unmeasured
 * train figures stored and served as null, restart repair, a database from a newer
 * ddpbenchd being refused, the list page (built by SQLite) against the experiment (built
 * by jansson), the pages of an experiment's runs, and each run's network profile. */
#include <sqlite3.h>
#include <stdlib.h>
#include <unistd.h>

#include "daemon/db.h"
#include "daemon/db_rows.h"
#include "daemon/trace.h"
#include "tests/unit/test.h"

/* every traced step of a run (within the cap) */
static const struct db_trace_query test_trace_all = {-1, -1, 0, TRACE_MAX_ROWS};

/* the schema version a fresh database reaches: the number of schema/NNN_*.sql files */
#define TEST_DB_VERSION 23
/* migration 015's triggers and columns, undone */
/* migrations 016 to 023, undone (023 first) */
#define TEST_DB_UNDO_023                                                                       \
    "ALTER TABLE run_pipe DROP COLUMN batch; ALTER TABLE run_pipe DROP COLUMN "                \
    "batch_forward_ns; ALTER TABLE run_pipe DROP COLUMN batch_backward_ns; "
#define TEST_DB_UNDO_022 TEST_DB_UNDO_023 "DROP TABLE run_pipe; "
#define TEST_DB_UNDO_021 TEST_DB_UNDO_022 "DROP TABLE calibrations; "
#define TEST_DB_UNDO_020 TEST_DB_UNDO_021 "ALTER TABLE epochs DROP COLUMN test_acc_per_class; "
#define TEST_DB_UNDO_019 TEST_DB_UNDO_020 "ALTER TABLE runs DROP COLUMN processes; "
#define TEST_DB_UNDO_018                                                                       \
    TEST_DB_UNDO_019                                                                           \
    "ALTER TABLE steps DROP COLUMN grad_norm; ALTER TABLE steps DROP COLUMN loss_scale; "      \
    "ALTER TABLE steps DROP COLUMN skipped; "
#define TEST_DB_UNDO_017                                                                       \
    TEST_DB_UNDO_018 "DROP TABLE generations; ALTER TABLE steps DROP COLUMN generation; "      \
                     "ALTER TABLE steps DROP COLUMN world; ALTER TABLE steps DROP COLUMN at; "
#define TEST_DB_UNDO_016 TEST_DB_UNDO_017 "DROP TABLE run_events; DROP TABLE run_faults; "
#define TEST_DB_UNDO_015                                                                       \
    TEST_DB_UNDO_016                                                                           \
    "DROP TRIGGER IF EXISTS experiments_version_self; "                                        \
    "DROP TRIGGER IF EXISTS experiments_version_run_insert; "                                  \
    "DROP TRIGGER IF EXISTS experiments_version_run_update; "                                  \
    "DROP TRIGGER IF EXISTS experiments_version_run_ranks_insert; "                            \
    "DROP TRIGGER IF EXISTS experiments_version_run_ranks_update; "                            \
    "DROP TRIGGER IF EXISTS experiments_version_collectives_insert; "                          \
    "DROP TRIGGER IF EXISTS experiments_version_collectives_update; "                          \
    "DROP TRIGGER IF EXISTS experiments_version_run_env_insert; "                              \
    "DROP TRIGGER IF EXISTS experiments_version_run_env_update; "                              \
    "DROP TRIGGER IF EXISTS experiments_version_steps_insert; "                                \
    "DROP TRIGGER IF EXISTS experiments_version_steps_update; "                                \
    "DROP TRIGGER IF EXISTS experiments_version_epochs_insert; "                               \
    "DROP TRIGGER IF EXISTS experiments_version_epochs_update; "                               \
    "DROP TRIGGER IF EXISTS experiments_version_rank_memory_insert; "                          \
    "DROP TRIGGER IF EXISTS experiments_version_rank_memory_update; "                          \
    "DROP TRIGGER IF EXISTS experiments_version_rank_usage_insert; "                           \
    "DROP TRIGGER IF EXISTS experiments_version_rank_usage_update; "                           \
    "DROP TRIGGER IF EXISTS experiments_version_run_grads_insert; "                            \
    "DROP TRIGGER IF EXISTS experiments_version_run_grads_update; "                            \
    "ALTER TABLE experiments DROP COLUMN version; ALTER TABLE runs DROP COLUMN trace_dropped; "
/* what migration 009 added, undone for a test that sets the version back below it */
#define TEST_DB_UNDO_014                                                                       \
    TEST_DB_UNDO_015                                                                           \
    "ALTER TABLE steps DROP COLUMN loader_cpu_ms; ALTER TABLE steps DROP COLUMN read_bytes; "
#define TEST_DB_UNDO_013                                                                       \
    TEST_DB_UNDO_014                                                                           \
    "ALTER TABLE steps DROP COLUMN stage; ALTER TABLE steps DROP COLUMN p2p_ms; "              \
    "ALTER TABLE steps DROP COLUMN p2p_bytes; ALTER TABLE steps DROP COLUMN bubble_ms; "
#define TEST_DB_UNDO_012 TEST_DB_UNDO_013 "DROP TABLE run_grads; DROP TABLE fits; "
#define TEST_DB_UNDO_011                                                                       \
    TEST_DB_UNDO_012 "DROP TABLE rank_memory; DROP TABLE rank_usage; DROP TABLE trace_steps; "
#define TEST_DB_UNDO_009                                                                       \
    TEST_DB_UNDO_011 "DROP TABLE nodes; ALTER TABLE runs DROP COLUMN nodes; ALTER TABLE runs " \
                     "DROP COLUMN ranks_per_node; "

static char db_dir[64];
static char db_path[128];

static struct db *test_db_fresh(void)
{
    snprintf(db_dir, sizeof db_dir, "/tmp/ddpb-test-db-XXXXXX");
    if (!mkdtemp(db_dir))
        return NULL;
    snprintf(db_path, sizeof db_path, "%s/t.db", db_dir);
    struct err e;
    struct db *db = db_open(db_path, &e);
    if (!db) /* e.g. a typed reader that disagrees with its SQL's column names */
        fprintf(stderr, "db_open: %s\n", e.msg);
    return db;
}

static void test_db_cleanup(struct db *db)
{
    char cmd[160];
    db_close(db);
    snprintf(cmd, sizeof cmd, "rm -rf %s", db_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cleanup of %s failed\n", db_dir);
}

static int64_t test_db_experiment(struct db *db, int nruns)
{
    struct db_new_run runs[4];
    for (int i = 0; i < nruns; i++)
        runs[i] = (struct db_new_run){"{\"world_size\":2}", "{\"world_size\":2}", 2, NULL};
    int64_t id = 0;
    struct err e;
    if (db_create_experiment(db, "exp", "collective", "{\"workload\":\"collective\"}", runs,
                             (size_t)nruns, &id, &e) < 0)
        return -1;
    return id;
}

/* The list page, parsed (db_list_experiments returns its JSON text). Owned, or NULL. */
static json_t *test_db_list(struct db *db, const struct db_experiment_filter *f)
{
    struct err e = {0};
    char *text = db_list_experiments(db, f, &e);
    if (!text) {
        fprintf(stderr, "db_list_experiments: %s\n", e.msg);
        return NULL;
    }
    json_error_t je;
    json_t *page = json_loads(text, 0, &je);
    if (!page)
        fprintf(stderr, "list is not JSON: %s: %s\n", je.text, text);
    free(text);
    return page;
}

static const char *test_db_exp_status(struct db *db, int64_t id, json_t **keep)
{
    struct err e;
    *keep = db_get_experiment(db, id, &e);
    return *keep ? json_string_value(json_object_get(*keep, "status")) : NULL;
}

static void test_db_lifecycle(void)
{
    struct err e = {0};
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    T_EQ_INT(db_schema_version(db), TEST_DB_VERSION);
    int64_t id = test_db_experiment(db, 2);
    T_CHECK(id > 0);
    json_t *exp;
    T_EQ_STR(test_db_exp_status(db, id, &exp), "queued");
    json_t *runs = json_object_get(exp, "runs");
    T_EQ_INT(json_array_size(runs), 2);
    int64_t r0 = json_integer_value(json_object_get(json_array_get(runs, 0), "id"));
    int64_t r1 = json_integer_value(json_object_get(json_array_get(runs, 1), "id"));
    T_CHECK(json_is_object(json_object_get(exp, "spec")));
    json_decref(exp);

    struct db_queued_run *q;
    size_t n;
    T_OK(db_list_queued(db, 10, &q, &n, &e));
    T_EQ_INT(n, 2);
    T_EQ_INT(q[0].id, r0); /* submission order */
    T_EQ_INT(q[0].world_size, 2);
    T_EQ_STR(q[0].spec_json, "{\"world_size\":2}");
    /* no workload: not a run spec, so the run cannot start and says why */
    T_EQ_INT(q[0].spec_err.code, ERR_INVALID);
    T_CHECK_MSG(strstr(q[0].spec_err.msg, "stored spec") != NULL, "%s", q[0].spec_err.msg);
    db_queued_runs_free(q, n);

    T_OK(db_run_starting(db, r0, &e));
    T_CHECK(db_run_starting(db, r0, &e) < 0); /* not queued any more */
    T_EQ_INT(e.code, ERR_CONFLICT);
    T_EQ_STR(test_db_exp_status(db, id, &exp), "running");
    json_decref(exp);
    T_OK(db_rank_spawned(db, r0, 0, "node", 100, "0", &e));
    T_OK(db_rank_spawned(db, r0, 1, "node", 101, "1", &e));
    T_CHECK(db_rank_hello(db, r0, 0, "host", 3, &e) < 0); /* wrong world size */
    T_EQ_INT(e.code, ERR_INVALID);
    T_OK(db_rank_hello(db, r0, 0, "host", 2, &e));
    json_t *run = db_get_run(db, r0, &e);
    T_EQ_STR(json_string_value(json_object_get(run, "status")), "starting");
    json_decref(run);
    T_OK(db_rank_hello(db, r0, 1, "host", 2, &e));
    run = db_get_run(db, r0, &e);
    T_EQ_STR(json_string_value(json_object_get(run, "status")), "running");
    /* times as ISO text, booleans as booleans, ranks in order, no results yet */
    const char *created = json_string_value(json_object_get(run, "created_at"));
    T_CHECK_MSG(created && strlen(created) == 24 && created[23] == 'Z', "%s", created);
    T_CHECK(json_is_null(json_object_get(run, "finished_at")));
    T_CHECK(json_is_false(json_object_get(run, "oversubscribed")));
    T_CHECK(json_is_null(json_object_get(run, "network_profile"))); /* the host's */
    json_t *ranks = json_object_get(run, "ranks");
    T_EQ_INT(json_array_size(ranks), 2);
    T_EQ_INT(json_integer_value(json_object_get(json_array_get(ranks, 1), "rank")), 1);
    T_EQ_INT(json_integer_value(json_object_get(json_array_get(ranks, 1), "pid")), 101);
    T_CHECK(json_is_string(json_object_get(json_array_get(ranks, 0), "started_at")));
    T_EQ_INT(json_array_size(json_object_get(run, "collectives")), 0);
    T_CHECK(json_is_object(json_object_get(run, "spec")));
    json_decref(run);

    T_OK(db_run_finish(db, r0, DB_RUN_SUCCEEDED, NULL, -1, &e));
    T_EQ_STR(test_db_exp_status(db, id, &exp), "running"); /* r1 still queued */
    json_decref(exp);
    T_OK(db_run_starting(db, r1, &e));
    T_OK(db_run_finish(db, r1, DB_RUN_FAILED, "rank 1 died", 1, &e));
    T_EQ_STR(test_db_exp_status(db, id, &exp), "failed");
    T_CHECK(json_is_string(json_object_get(exp, "finished_at")));
    T_EQ_INT(json_integer_value(json_object_get(exp, "runs_finished")), 2);
    json_decref(exp);
    run = db_get_run(db, r1, &e);
    T_EQ_STR(json_string_value(json_object_get(run, "error")), "rank 1 died");
    T_EQ_INT(json_integer_value(json_object_get(run, "error_rank")), 1);
    json_decref(run);
    test_db_cleanup(db);
}

/* A queued run's spec comes back parsed once, with the spec's own defaults filled. */
static void test_db_queued_spec_parsed(void)
{
    struct err e = {0};
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    const char *spec = "{\"workload\":\"train\",\"model\":\"lenet5\",\"world_size\":2,"
                       "\"threads\":3,\"heartbeat_timeout_s\":7}";
    struct db_new_run run = {"{}", spec, 2, NULL};
    int64_t id;
    T_OK(db_create_experiment(db, "t", "train", spec, &run, 1, &id, &e));
    struct db_queued_run *q;
    size_t n;
    T_OK(db_list_queued(db, 10, &q, &n, &e));
    T_EQ_INT(n, 1);
    T_EQ_INT(q[0].spec_err.code, ERR_OK);
    T_EQ_INT(q[0].spec.workload, SPEC_WORKLOAD_TRAIN);
    T_EQ_INT(q[0].spec.world_size, 2);
    T_EQ_INT(q[0].spec.train.threads, 3);
    T_EQ_INT(q[0].spec.heartbeat_timeout_s, 7);
    T_EQ_INT(q[0].spec.timeout_s, 600); /* common/spec_table.c's default */
    T_EQ_STR(q[0].spec.device, "cpu");
    db_queued_runs_free(q, n);
    test_db_cleanup(db);
}

static void test_db_results_roundtrip(void)
{
    struct err e = {0};
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    int64_t id = test_db_experiment(db, 1);
    json_t *exp = db_get_experiment(db, id, &e);
    int64_t r = json_integer_value(
        json_object_get(json_array_get(json_object_get(exp, "runs"), 0), "id"));
    json_decref(exp);
    struct report_collective c = {
        .repeat = 0,
        .op = "allreduce",
        .dtype = "float32",
        .redop = "sum",
        .algorithm = "ring",
        .inplace = true,
        .bytes = 4096,
        .count = 1024,
        .iters = 20,
        .time_us_min = 10,
        .time_us_median = 12.5,
        .time_us_p95 = 20,
        .time_us_mean = 13,
        .time_us_max = 30,
        .algbw_gbs = 0.32768,
        .busbw_gbs = 0.32768,
        .wrong = 0,
    };
    T_OK(db_insert_collective(db, r, &c, &e));
    c.bytes = 1024;
    c.count = 256;
    T_OK(db_insert_collective(db, r, &c, &e));
    json_t *env = json_pack("{s:s, s:i}", "cpu_model", "Test CPU", "nproc", 2);
    T_OK(db_rank_env(db, r, 0, env, &e));
    json_decref(env);
    T_OK(db_run_progress(db, r, 0.5, &e));
    json_t *run = db_get_run(db, r, &e);
    T_CHECK(run != NULL);
    json_t *rows = json_object_get(run, "collectives");
    T_EQ_INT(json_array_size(rows), 2);
    json_t *first = json_array_get(rows, 0);
    T_EQ_INT(json_integer_value(json_object_get(first, "bytes")), 1024); /* ordered by size */
    T_CHECK(json_is_true(json_object_get(first, "inplace")));
    T_NEAR(json_real_value(json_object_get(first, "time_us_median")), 12.5, 1e-12);
    T_EQ_STR(json_string_value(json_object_get(first, "algorithm")), "ring");
    json_t *envrow = json_array_get(json_object_get(run, "env"), 0);
    T_EQ_STR(json_string_value(json_object_get(json_object_get(envrow, "env"), "cpu_model")),
             "Test CPU");
    T_NEAR(json_real_value(json_object_get(run, "progress")), 0.5, 1e-12);
    json_decref(run);
    T_CHECK(db_get_run(db, 999, &e) == NULL);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    /* the typed path gives back every field of what was stored */
    struct db_experiment_data data;
    T_OK(db_get_experiment_data(db, id, &data, &e));
    T_EQ_STR(data.workload, "collective");
    T_EQ_INT(data.runs[0].ncollectives, 2);
    const struct report_collective *got = &data.runs[0].collectives[1];
    T_EQ_STR(got->op, "allreduce");
    T_EQ_STR(got->dtype, "float32");
    T_EQ_STR(got->redop, "sum");
    T_EQ_STR(got->algorithm, "ring");
    T_CHECK(got->inplace);
    T_EQ_INT(got->bytes, 4096);
    T_EQ_INT(got->count, 1024);
    T_EQ_INT(got->iters, 20);
    T_NEAR(got->time_us_min, 10, 0);
    T_NEAR(got->time_us_median, 12.5, 0);
    T_NEAR(got->time_us_p95, 20, 0);
    T_NEAR(got->time_us_mean, 13, 0);
    T_NEAR(got->time_us_max, 30, 0);
    T_NEAR(got->busbw_gbs, 0.32768, 0);
    T_EQ_INT(json_integer_value(json_object_get(data.runs[0].spec, "world_size")), 2);
    db_experiment_data_free(&data);
    test_db_cleanup(db);
}

/* A typed reader is checked against its statement's column names: an alias that does not
 * say what the reader fills (or a column too many or too few) is an error naming it. The
 * daemon's own readers pass the same check in db_open, which every test here calls. */
struct test_db_pair {
    double step_ms, fastest_ms;
};
static const struct db_col test_db_pair_cols[] = {
    DB_COL("step_ms", DB_COL_REAL, struct test_db_pair, step_ms),
    DB_COL("fastest_ms", DB_COL_REAL, struct test_db_pair, fastest_ms),
};

static void test_db_reader_checks_aliases(void)
{
    struct err e = {0};
    sqlite3 *h = NULL;
    T_CHECK(sqlite3_open(":memory:", &h) == SQLITE_OK);
    static const char good[] = "SELECT 13.0 AS step_ms, 11.0 AS fastest_ms";
    static const char swapped[] = "SELECT 13.0 AS step_ms, 11.0 AS fastest";
    static const char short_[] = "SELECT 13.0 AS step_ms";
    const char *sqls[] = {good, swapped, short_};
    sqlite3_stmt *st[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++)
        T_CHECK(sqlite3_prepare_v2(h, sqls[i], -1, &st[i], NULL) == SQLITE_OK);
    struct db_reader r = {good, test_db_pair_cols, 2, sizeof(struct test_db_pair)};
    T_OK(db_rows_check(st[0], &r, &e));
    void *rows;
    size_t n;
    T_OK(db_rows_read(st[0], &r, &rows, &n, &e));
    T_EQ_INT(n, 1);
    T_NEAR(((struct test_db_pair *)rows)->fastest_ms, 11.0, 0);
    db_rows_free(&r, rows, n);
    T_CHECK(db_rows_check(st[1], &r, &e) < 0);
    T_EQ_INT(e.code, ERR_INTERNAL);
    T_CHECK_MSG(strstr(e.msg, "column 1 is 'fastest' but its reader expects 'fastest_ms'"),
                "%s", e.msg);
    T_CHECK(db_rows_check(st[2], &r, &e) < 0);
    T_CHECK_MSG(strstr(e.msg, "returns 1 columns, its reader reads 2"), "%s", e.msg);
    for (int i = 0; i < 3; i++)
        sqlite3_finalize(st[i]);
    sqlite3_close(h);
}

static void test_db_list_filters_and_paging(void)
{
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    for (int i = 0; i < 5; i++)
        T_CHECK(test_db_experiment(db, 1) > 0);
    struct db_experiment_filter f = {.limit = 2, .offset = 0};
    json_t *page = test_db_list(db, &f);
    T_CHECK(page != NULL);
    T_EQ_INT(json_integer_value(json_object_get(page, "total")), 5);
    json_t *items = json_object_get(page, "items");
    T_EQ_INT(json_array_size(items), 2);
    T_EQ_INT(json_integer_value(json_object_get(json_array_get(items, 0), "id")), 5);
    json_decref(page);
    f.offset = 4;
    page = test_db_list(db, &f);
    T_EQ_INT(json_array_size(json_object_get(page, "items")), 1);
    json_decref(page);
    f = (struct db_experiment_filter){.status = "failed", .limit = 10};
    page = test_db_list(db, &f);
    T_EQ_INT(json_integer_value(json_object_get(page, "total")), 0);
    json_decref(page);
    f = (struct db_experiment_filter){.name = "ex", .workload = "collective", .limit = 10};
    page = test_db_list(db, &f);
    T_EQ_INT(json_integer_value(json_object_get(page, "total")), 5);
    json_decref(page);
    T_EQ_INT(db_count_runs(db, DB_RUN_QUEUED), 5);
    test_db_cleanup(db);
}

/* The list (SQLite's JSON) shows each experiment exactly as the experiment's own reply
 * (jansson over the rows) does: the same keys, times, duration and summary. */
static void test_db_list_item_matches_experiment(void)
{
    struct err e = {0};
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    int64_t done = test_db_experiment(db, 2), queued = test_db_experiment(db, 1);
    T_CHECK(done > 0 && queued > 0);
    json_t *exp = db_get_experiment(db, done, &e);
    for (size_t i = 0; i < 2; i++) {
        json_t *r = json_array_get(json_object_get(exp, "runs"), i);
        int64_t run = json_integer_value(json_object_get(r, "id"));
        T_OK(db_run_starting(db, run, &e));
        usleep(2000);
        T_OK(db_run_finish(db, run, DB_RUN_SUCCEEDED, NULL, -1, &e));
    }
    json_decref(exp);
    struct db_experiment_filter f = {.limit = 10};
    json_t *page = test_db_list(db, &f);
    T_CHECK(page != NULL);
    T_EQ_INT(json_array_size(json_object_get(page, "items")), 2);
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(page, "items"), i, item)
    {
        int64_t id = json_integer_value(json_object_get(item, "id"));
        exp = db_get_experiment(db, id, &e);
        T_CHECK(exp != NULL);
        const char *key;
        json_t *v;
        json_object_foreach(item, key, v)
            T_CHECK_MSG(json_equal(v, json_object_get(exp, key)), "experiment %lld: %s differs",
                        (long long)id, key);
        T_EQ_INT(json_object_size(item) + 5, json_object_size(exp)); /* + spec, runs, runs_* */
        if (id == done) {
            T_CHECK(json_real_value(json_object_get(item, "duration_s")) >= 0.002);
            T_CHECK(json_is_string(json_object_get(item, "finished_at")));
        } else {
            T_CHECK(json_is_null(json_object_get(item, "duration_s")));
            T_CHECK(json_is_null(json_object_get(item, "started_at")));
        }
        json_decref(exp);
    }
    json_decref(page);
    test_db_cleanup(db);
}

/* GET /v1/experiments/ID's runs come in pages: in point order, runs_total always the
 * whole count, an offset past the end an empty page, and every run of an experiment
 * from db_get_experiment. */
static void test_db_experiment_runs_paged(void)
{
    struct err e = {0};
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    enum { N = 7 };
    struct db_new_run runs[N];
    for (int i = 0; i < N; i++)
        runs[i] = (struct db_new_run){"{}", "{\"world_size\":1}", 1, NULL};
    int64_t id = 0;
    T_OK(db_create_experiment(db, "paged", "collective", "{\"workload\":\"collective\"}", runs,
                              N, &id, &e));
    json_t *all = db_get_experiment(db, id, &e);
    T_EQ_INT(json_array_size(json_object_get(all, "runs")), N);
    T_EQ_INT(json_integer_value(json_object_get(all, "runs_total")), N);
    T_EQ_INT(json_integer_value(json_object_get(all, "runs_offset")), 0);
    struct {
        int64_t limit, offset;
        size_t want;
    } pages[] = {
        {3, 0, 3}, {3, 3, 3}, {3, 6, 1}, {3, 7, 0}, {100, 0, N}, {1, 4, 1},
    };
    for (size_t p = 0; p < sizeof pages / sizeof *pages; p++) {
        json_t *exp = db_get_experiment_page(db, id, pages[p].limit, pages[p].offset, &e);
        T_CHECK(exp != NULL);
        json_t *got = json_object_get(exp, "runs");
        T_EQ_INT(json_array_size(got), pages[p].want);
        T_EQ_INT(json_integer_value(json_object_get(exp, "runs_total")), N);
        T_EQ_INT(json_integer_value(json_object_get(exp, "runs_limit")), pages[p].limit);
        T_EQ_INT(json_integer_value(json_object_get(exp, "runs_offset")), pages[p].offset);
        for (size_t k = 0; k < json_array_size(got); k++) {
            json_t *r = json_array_get(got, k);
            T_EQ_INT(json_integer_value(json_object_get(r, "point")),
                     pages[p].offset + (int64_t)k);
            T_CHECK(json_equal(
                r, json_array_get(json_object_get(all, "runs"), (size_t)pages[p].offset + k)));
        }
        json_decref(exp);
    }
    json_decref(all);
    T_CHECK(db_get_experiment_page(db, id + 1, 10, 0, &e) == NULL);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    test_db_cleanup(db);
}

static void test_db_recover_and_reopen(void)
{
    struct err e = {0};
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    int64_t id = test_db_experiment(db, 2);
    json_t *exp = db_get_experiment(db, id, &e);
    int64_t r0 = json_integer_value(
        json_object_get(json_array_get(json_object_get(exp, "runs"), 0), "id"));
    json_decref(exp);
    T_OK(db_run_starting(db, r0, &e));
    T_OK(db_rank_spawned(db, r0, 0, "node", 1234, NULL, &e));
    db_close(db);
    db = db_open(db_path, &e); /* as a restarted daemon */
    T_CHECK(db != NULL);
    int64_t n = 0;
    struct db_orphan *orphans;
    size_t norph;
    T_OK(db_recover(db, &n, &orphans, &norph, &e));
    T_EQ_INT(n, 1);
    T_EQ_INT(norph, 1); /* the pid the daemon had spawned, for it to make sure it is gone */
    T_EQ_INT(orphans[0].pid, 1234);
    T_EQ_INT(orphans[0].run_id, r0);
    T_EQ_INT(orphans[0].rank, 0);
    free(orphans);
    json_t *run = db_get_run(db, r0, &e);
    T_EQ_STR(json_string_value(json_object_get(run, "status")), "interrupted");
    json_t *rank = json_array_get(json_object_get(run, "ranks"), 0);
    T_EQ_STR(json_string_value(json_object_get(rank, "status")), "killed");
    json_decref(run);
    /* the other run is still queued, so the experiment goes on */
    json_t *keep;
    T_EQ_STR(test_db_exp_status(db, id, &keep), "running");
    json_decref(keep);
    T_EQ_INT(db_count_runs(db, DB_RUN_QUEUED), 1);
    T_OK(db_recover(db, &n, &orphans, &norph, &e));
    T_EQ_INT(n, 0);
    T_EQ_INT(norph, 0);
    free(orphans);
    test_db_cleanup(db);
}

/* migration 003: a GPU run's emulated flag and each rank's GPU, in the run and in the
 * data results are built from; CPU runs read emulated false and gpu null */
static void test_db_gpu_placement(void)
{
    struct err e = {0};
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    int64_t id = test_db_experiment(db, 2);
    json_t *exp = db_get_experiment(db, id, &e);
    T_CHECK(exp != NULL);
    json_t *runs = json_object_get(exp, "runs");
    int64_t r0 = json_integer_value(json_object_get(json_array_get(runs, 0), "id"));
    int64_t r1 = json_integer_value(json_object_get(json_array_get(runs, 1), "id"));
    json_decref(exp);
    T_OK(db_run_starting(db, r0, &e));
    T_OK(db_rank_spawned(db, r0, 0, "node", 100, NULL, &e));
    T_OK(db_rank_spawned(db, r0, 1, "node", 101, NULL, &e));
    const int gpus[2] = {3, 3};
    T_OK(db_run_gpu_placement(db, r0, true, gpus, 2, &e));
    T_OK(db_run_starting(db, r1, &e));
    T_OK(db_rank_spawned(db, r1, 0, "node", 102, "0", &e));
    json_t *run = db_get_run(db, r0, &e);
    T_CHECK(run != NULL);
    T_CHECK(json_is_true(json_object_get(run, "emulated")));
    json_t *ranks = json_object_get(run, "ranks");
    T_EQ_INT(json_integer_value(json_object_get(json_array_get(ranks, 1), "gpu")), 3);
    json_decref(run);
    run = db_get_run(db, r1, &e);
    T_CHECK(json_is_false(json_object_get(run, "emulated")));
    T_CHECK(
        json_is_null(json_object_get(json_array_get(json_object_get(run, "ranks"), 0), "gpu")));
    json_decref(run);
    struct db_experiment_data data;
    T_OK(db_get_experiment_data(db, id, &data, &e));
    T_EQ_INT(data.nruns, 2);
    T_CHECK(data.runs[0].emulated);
    T_CHECK(!data.runs[1].emulated);
    db_experiment_data_free(&data);
    test_db_cleanup(db);
}

/* The list carries each experiment's summary: the distinct models, ops, backends,
 * strategies and world sizes of its runs; migration 004 fills it for older rows. */
static void test_db_experiment_summary(void)
{
    struct err e = {0};
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    struct db_new_run runs[3] = {
        {"{}", "{\"model\":\"lenet5\",\"backend\":\"tcp\",\"strategy\":\"ddp\"}", 4, NULL},
        {"{}", "{\"model\":\"lenet5\",\"backend\":\"tcp\",\"strategy\":\"naive\"}", 1, NULL},
        {"{}", "{\"model\":\"lenet5\",\"backend\":\"tcp\",\"strategy\":\"ddp\"}", 2, NULL},
    };
    int64_t id = 0;
    T_OK(
        db_create_experiment(db, "sum", "train", "{\"workload\":\"train\"}", runs, 3, &id, &e));
    const char *want = "{\"models\":[\"lenet5\"],\"ops\":[],\"backends\":[\"tcp\"],"
                       "\"strategies\":[\"ddp\",\"naive\"],\"world_sizes\":[1,2,4]}";
    json_t *w = json_loads(want, 0, NULL);
    struct db_experiment_filter f = {.limit = 10};
    json_t *list = test_db_list(db, &f);
    json_t *got = json_object_get(json_array_get(json_object_get(list, "items"), 0), "summary");
    T_CHECK_MSG(json_equal(got, w), "summary as created");
    json_decref(list);
    /* a database from before 004: the column dropped, the version set back */
    db_close(db);
    sqlite3 *h;
    T_CHECK(sqlite3_open(db_path, &h) == SQLITE_OK);
    T_CHECK(sqlite3_exec(h,
                         "ALTER TABLE experiments DROP COLUMN summary; " TEST_DB_UNDO_009
                         "PRAGMA user_version=3",
                         NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(h);
    db = db_open(db_path, &e);
    T_CHECK_MSG(db != NULL, "%s", e.msg);
    T_EQ_INT(db_schema_version(db), TEST_DB_VERSION);
    list = test_db_list(db, &f);
    got = json_object_get(json_array_get(json_object_get(list, "items"), 0), "summary");
    T_CHECK_MSG(json_equal(got, w), "summary as migrated");
    json_decref(list);
    /* 005 rebuilt experiments and runs: every run kept its id and its parent */
    json_t *exp = db_get_experiment(db, id, &e);
    T_EQ_INT(json_array_size(json_object_get(exp, "runs")), 3);
    /* and 007 left every existing run clean (not oversubscribed) */
    int64_t rid = json_integer_value(
        json_object_get(json_array_get(json_object_get(exp, "runs"), 0), "id"));
    json_decref(exp);
    json_t *one = db_get_run(db, rid, &e);
    T_CHECK(one && json_is_false(json_object_get(one, "oversubscribed")));
    json_decref(one);
    T_OK(db_run_oversubscribed(db, rid, &e));
    one = db_get_run(db, rid, &e);
    T_CHECK(one && json_is_true(json_object_get(one, "oversubscribed")));
    /* and 008 left every existing run on the host network (no profile) */
    T_CHECK(one && json_is_null(json_object_get(one, "network_profile")));
    json_decref(one);
    json_decref(w);
    test_db_cleanup(db);
}

static int64_t test_db_run_id(struct db *db, int64_t exp_id, size_t i);

/* Cancels every (queued) run of exp, then deletes it. */
static int test_db_drop(struct db *db, int64_t exp, struct err *e)
{
    struct db_cancel_result cr;
    int64_t *run_ids = NULL;
    size_t n = 0;
    if (db_cancel(db, exp, 0, &cr, e) < 0)
        return -1;
    db_cancel_result_free(&cr);
    int rc = db_delete_experiment(db, exp, &run_ids, &n, e);
    free(run_ids);
    return rc;
}

/* Ids freed by DELETE are never handed out again (005), and deleting still cascades. */
static void test_db_ids_never_reused(void)
{
    struct err e = {0};
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    int64_t keep = test_db_experiment(db, 1), gone = test_db_experiment(db, 2);
    T_CHECK(keep > 0 && gone > keep);
    int64_t gone_run = test_db_run_id(db, gone, 1);
    T_OK(test_db_drop(db, gone, &e));
    int64_t next = test_db_experiment(db, 1);
    T_CHECK_MSG(next > gone, "experiment id %lld after deleting %lld", (long long)next,
                (long long)gone);
    T_CHECK(test_db_run_id(db, next, 0) > gone_run);
    /* and across a restart, where only the database remembers */
    db_close(db);
    db = db_open(db_path, &e);
    T_CHECK_MSG(db != NULL, "%s", e.msg);
    T_OK(test_db_drop(db, next, &e));
    T_CHECK(test_db_experiment(db, 1) > next);
    /* the rebuilt runs table still cascades from experiments */
    sqlite3 *h;
    T_CHECK(sqlite3_open(db_path, &h) == SQLITE_OK);
    sqlite3_stmt *st;
    T_CHECK(sqlite3_prepare_v2(h, "SELECT count(*) FROM runs WHERE experiment_id = ?", -1, &st,
                               NULL) == SQLITE_OK);
    sqlite3_bind_int64(st, 1, gone);
    T_CHECK(sqlite3_step(st) == SQLITE_ROW);
    T_EQ_INT(sqlite3_column_int(st, 0), 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    test_db_cleanup(db);
}

static void test_db_refuses_newer_schema(void)
{
    struct err e = {0};
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    db_close(db);
    sqlite3 *h;
    T_CHECK(sqlite3_open(db_path, &h) == SQLITE_OK);
    T_CHECK(sqlite3_exec(h, "PRAGMA user_version=99", NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(h);
    db = db_open(db_path, &e);
    T_CHECK(db == NULL);
    T_EQ_INT(e.code, ERR_CONFLICT);
    T_CHECK(strstr(e.msg, "newer") != NULL);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", db_dir);
    T_CHECK(system(cmd) == 0);
}

static int64_t test_db_run_id(struct db *db, int64_t exp_id, size_t i)
{
    struct err e;
    json_t *exp = db_get_experiment(db, exp_id, &e);
    int64_t id = json_integer_value(
        json_object_get(json_array_get(json_object_get(exp, "runs"), i), "id"));
    json_decref(exp);
    return id;
}

static void test_db_cancel_and_delete(void)
{
    struct err e = {0};
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    int64_t id = test_db_experiment(db, 3);
    int64_t r0 = test_db_run_id(db, id, 0), r1 = test_db_run_id(db, id, 1);
    T_OK(db_run_starting(db, r0, &e));
    int64_t *ids;
    size_t n;
    struct db_cancel_result cr;
    /* a delete of an experiment with live runs is refused */
    T_CHECK(db_delete_experiment(db, id, &ids, &n, &e) < 0);
    T_EQ_INT(e.code, ERR_CONFLICT);
    /* cancelling one queued run: only it */
    T_OK(db_cancel(db, 0, r1, &cr, &e));
    T_EQ_INT(cr.n_active, 0);
    T_EQ_INT(cr.n_cancelled, 1);
    T_EQ_INT(cr.cancelled[0], r1);
    T_EQ_INT(cr.experiment_id, id);
    db_cancel_result_free(&cr);
    json_t *run = db_get_run(db, r1, &e);
    T_EQ_STR(json_string_value(json_object_get(run, "status")), "cancelled");
    json_decref(run);
    /* cancelling the experiment: queued runs at once, the running one handed back */
    T_OK(db_cancel(db, id, 0, &cr, &e));
    T_EQ_INT(cr.n_active, 1);
    T_EQ_INT(cr.active[0], r0);
    T_EQ_INT(cr.n_cancelled, 1); /* the third run */
    db_cancel_result_free(&cr);
    T_EQ_INT(db_count_runs(db, DB_RUN_QUEUED), 0);
    T_OK(db_run_finish(db, r0, DB_RUN_CANCELLED, "cancelled", -1, &e));
    json_t *exp;
    T_EQ_STR(test_db_exp_status(db, id, &exp), "cancelled");
    json_decref(exp);
    T_CHECK(db_cancel(db, id, 0, &cr, &e) < 0); /* nothing left */
    T_EQ_INT(e.code, ERR_CONFLICT);
    T_CHECK(db_cancel(db, 777, 0, &cr, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    T_CHECK(db_cancel(db, 0, 777, &cr, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    /* deletion removes the experiment and its runs' rows */
    struct report_collective c = {.op = "allreduce",
                                  .dtype = "float32",
                                  .redop = "sum",
                                  .algorithm = "ring",
                                  .bytes = 8,
                                  .count = 2,
                                  .iters = 1};
    T_OK(db_insert_collective(db, r0, &c, &e));
    T_OK(db_delete_experiment(db, id, &ids, &n, &e));
    T_EQ_INT(n, 3);
    free(ids);
    T_CHECK(db_get_experiment(db, id, &e) == NULL);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    T_CHECK(db_get_run(db, r0, &e) == NULL);
    T_CHECK(db_delete_experiment(db, id, &ids, &n, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    test_db_cleanup(db);
}

static void test_db_steps_epochs_and_data(void)
{
    struct err e = {0};
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    int64_t id = test_db_experiment(db, 1);
    int64_t r = test_db_run_id(db, id, 0);
    for (int step = 0; step < 3; step++)
        for (int rank = 0; rank < 2; rank++) {
            struct report_step st = {.step = step,
                                     .warmup = step == 0,
                                     .samples = 32,
                                     .loss = 2.0 - 0.1 * step,
                                     .forward_ms = 1,
                                     .backward_ms = 2,
                                     .comm_ms = 1.5,
                                     .comm_exposed_ms = 0.5,
                                     .step_ms = 10 + rank * 2 + step,
                                     .bytes_sent = 100};
            T_OK(db_insert_step(db, r, rank, &st, &e));
        }
    struct report_epoch ep = {.epoch = 0,
                              .samples = 192,
                              .train_loss = 1.9,
                              .train_acc = 0.3,
                              .test_loss = -1,
                              .test_acc = -1,
                              .time_s = 0.1};
    T_OK(db_insert_epoch(db, r, &ep, &e));
    json_t *steps = db_get_steps(db, r, -1, false, &e);
    T_CHECK(steps != NULL);
    T_EQ_INT(json_array_size(json_object_get(steps, "rows")), 4); /* warm-up step left out */
    T_EQ_STR(json_string_value(json_array_get(json_object_get(steps, "columns"), 0)), "rank");
    json_decref(steps);
    steps = db_get_steps(db, r, 1, true, &e);
    T_EQ_INT(json_array_size(json_object_get(steps, "rows")), 3);
    json_decref(steps);
    T_CHECK(db_get_steps(db, 999, -1, true, &e) == NULL);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    e = (struct err){0};
    T_CHECK(db_get_steps(db, r, 2, true, &e) == NULL); /* a rank the 2-rank run lacks */
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    T_EQ_STR(e.field, "rank");
    T_CHECK(strstr(e.msg, "world size is 2") != NULL);
    struct db_experiment_data data;
    T_OK(db_get_experiment_data(db, id, &data, &e));
    T_EQ_INT(data.id, id);
    T_CHECK(data.nruns >= 1);
    const struct db_data_run *run = &data.runs[0];
    T_EQ_INT(run->nsteps, 2);
    const struct db_step_row *s1 = &run->steps[0];
    /* the step's time is the slowest rank's; samples add up over ranks */
    T_NEAR(s1->step_ms, 13.0, 1e-9);
    T_NEAR(s1->fastest_ms, 11.0, 1e-9);
    T_EQ_INT(s1->samples, 64);
    T_EQ_INT(run->nepochs, 1);
    T_NEAR(run->epochs[0].test_acc, -1.0, 0); /* stored as NULL: not evaluated */
    T_NEAR(run->epochs[0].train_loss, 1.9, 1e-12);
    db_experiment_data_free(&data);
    T_CHECK(db_get_experiment_data(db, 999, &data, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    db_experiment_data_free(&data);
    test_db_cleanup(db);
}

/* A step phase (or bytes_sent) a framework engine cannot observe arrives as -1: stored
 * NULL, served null by GET /v1/runs/{id}/steps, read back as -1 by results; a measured
 * phase beside it is kept (migration 010). */
static void test_db_step_phases_null(void)
{
    struct err e = {0};
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    int64_t id = test_db_experiment(db, 1);
    int64_t r = test_db_run_id(db, id, 0);
    struct report_step st = {
        REPORT_STEP_NO_PIPELINE, .step = 0,          .samples = 32,     .loss = 2.0,
        .data_ms = 1.5,          .forward_ms = -1,   .backward_ms = -1, .comm_ms = -1,
        .comm_exposed_ms = -1,   .optimizer_ms = -1, .step_ms = 9.0,    .bytes_sent = -1};
    T_OK(db_insert_step(db, r, 0, &st, &e));
    json_t *steps = db_get_steps(db, r, -1, true, &e);
    T_CHECK_MSG(steps != NULL, "%s", e.msg);
    char *text = json_dumps(steps, JSON_COMPACT);
    /* ... read_bytes, then generation and world (not elastic: null), then when it was stored */
    T_CHECK_MSG(strstr(text, "[0,0,0,0,0,32,2.0,1.5,null,null,null,null,null,9.0,null,null,"
                             "null,null,null,null,null,null,null,") != NULL,
                "%s", text);
    free(text);
    json_decref(steps);
    struct db_experiment_data data;
    T_OK(db_get_experiment_data(db, id, &data, &e));
    T_EQ_INT(data.runs[0].nsteps, 1);
    T_NEAR(data.runs[0].steps[0].phase_ms[PHASE_DATA], 1.5, 0);
    T_NEAR(data.runs[0].steps[0].phase_ms[PHASE_FORWARD], -1.0, 0);
    T_NEAR(data.runs[0].steps[0].phase_ms[PHASE_COMM_EXPOSED], -1.0, 0);
    db_experiment_data_free(&data);
    test_db_cleanup(db);
}

/* What a fault cost (migrations 016, 017): the fault is the injected one's event (else the
 * first lost slot's end); detection and resumption are measured from it, lost steps summed over
 * the regroups, and the throughput before, during and after from the steps' stored times
 * (n steps over n - 1 gaps). A fault-free run has no figures. */
static void test_db_elastic_figures(void)
{
    struct err e = {0};
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    int64_t id = test_db_experiment(db, 2);
    int64_t r = test_db_run_id(db, id, 0);
    struct db_generation g0 = {0, 2, "[0,1]", "[]", "launch", 90.0, -1};
    struct db_generation g1 = {1, 1, "[0]", "[]", "rank 1 lost", 100.2, 100.0};
    T_OK(db_insert_generation(db, r, &g0, &e));
    T_OK(db_insert_generation(db, r, &g1, &e));
    T_OK(db_generation_detected(db, r, 0, 100.5, &e));
    T_OK(db_generation_detected(db, r, 0, 100.9, &e)); /* the first one counts */
    T_OK(db_generation_resumed(db, r, 1, 102.0, 30, 5, 800, &e));
    /* the injected kill at 99.5; the daemon saw the slot end at 100.0, before any
     * survivor (100.5): detection is the first of the two */
    struct db_run_event kill = {99.5, "fault", "inject", "kill", NULL, 0, 1, -1, 3};
    T_OK(db_insert_run_event(db, r, 1, &kill, &e));
    for (int k = 0; k < 8; k++) {
        struct report_step st = {
            REPORT_STEP_NO_PIPELINE, .step = k,          .samples = 10,     .step_ms = 5,
            .data_ms = -1,           .forward_ms = -1,   .backward_ms = -1, .comm_ms = -1,
            .comm_exposed_ms = -1,   .optimizer_ms = -1, .bytes_sent = -1};
        T_OK(db_insert_step(db, r, 0, &st, &e));
    }
    db_close(db);
    sqlite3 *h;
    T_CHECK(sqlite3_open(db_path, &h) == SQLITE_OK);
    /* steps 0-3 before the fault, one a second; 4 during; 5-7 after, two a second */
    char sql[512];
    snprintf(sql, sizeof sql,
             "UPDATE steps SET at = CASE WHEN step < 4 THEN 96 + step WHEN step = 4 THEN 101 "
             "ELSE 102 + (step - 5) * 0.5 END WHERE run_id = %lld",
             (long long)r);
    T_CHECK(sqlite3_exec(h, sql, NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(h);
    db = db_open(db_path, &e);
    T_CHECK_MSG(db != NULL, "%s", e.msg);
    struct db_experiment_data data;
    T_OK(db_get_experiment_data(db, id, &data, &e));
    const struct db_elastic_fig *f = &data.runs[0].elastic;
    T_CHECK(f->elastic && f->faulted);
    T_NEAR(f->fault_at, 99.5, 1e-9);
    T_EQ_INT(f->generations, 1);
    T_NEAR(f->detect_s, 0.5, 1e-9);
    T_NEAR(f->resume_s, 2.5, 1e-9);
    T_NEAR(f->lost_steps, 5, 0);
    T_NEAR(f->thr_before, 40.0 * 3 / 4 / 3, 1e-9); /* 4 steps of 10 over 3 s */
    T_NEAR(f->thr_during, 10.0 / 2.5, 1e-9);       /* one step in the 2.5 s gap */
    T_NEAR(f->thr_after, 30.0 * 2 / 3 / 1, 1e-9);  /* 3 steps of 10 over 1 s */
    const struct db_elastic_fig *plain = &data.runs[1].elastic;
    T_CHECK(!plain->elastic && !plain->faulted);
    db_experiment_data_free(&data);
    test_db_cleanup(db);
}

/* A pipeline run's steps (migration 013): stage, p2p_ms, p2p_bytes and bubble_ms stored and
 * served as columns of GET /v1/runs/{id}/steps (null where a step has no pipeline, never
 * 0), summed over the ranks for results (a count of the ranks that reported them); the
 * trace input carries the spec's stages; a database at version 12 gains the columns, its
 * steps read null. */
static void test_db_pipeline_steps(void)
{
    struct err e = {0};
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    struct db_new_run runs[2] = {
        {"{}", "{\"world_size\":4,\"pipeline\":2,\"micro_batches\":4}", 4, NULL},
        {"{}", "{\"world_size\":2}", 2, NULL}};
    int64_t id = 0;
    T_OK(db_create_experiment(db, "pipe", "train", "{\"workload\":\"train\"}", runs, 2, &id,
                              &e));
    int64_t rp = test_db_run_id(db, id, 0), rd = test_db_run_id(db, id, 1);
    for (int rank = 0; rank < 4; rank++) {
        struct report_step st = {.step = 1,
                                 .samples = 16,
                                 .loss = 1.0,
                                 .forward_ms = 2,
                                 .backward_ms = 4,
                                 .comm_ms = 1,
                                 .comm_exposed_ms = 0.5,
                                 .step_ms = 10 + rank,
                                 .bytes_sent = 100,
                                 .stage = rank % 2,
                                 .p2p_ms = 1.5,
                                 .p2p_bytes = 1000 * (rank + 1),
                                 .bubble_ms = rank == 3 ? -1 : 2.5,
                                 .loader_cpu_ms = rank == 0 ? -1 : 0.5 * rank,
                                 .read_bytes = rank == 3 ? -1 : 1000 * rank};
        T_OK(db_insert_step(db, rp, rank, &st, &e));
    }
    struct report_step plain = {REPORT_STEP_NO_PIPELINE, .step = 1, .samples = 8, .step_ms = 5};
    T_OK(db_insert_step(db, rd, 0, &plain, &e));
    struct report_step fp16 = {REPORT_STEP_NO_PIPELINE, .step = 2, .samples = 8, .step_ms = 5,
                               .skipped = true};
    fp16.grad_norm = 2.5;
    fp16.loss_scale = 1024;
    T_OK(db_insert_step(db, rd, 0, &fp16, &e));

    json_t *steps = db_get_steps(db, rp, 3, true, &e);
    T_CHECK_MSG(steps != NULL, "%s", e.msg);
    const json_t *cols = json_object_get(steps, "columns");
    size_t n = json_array_size(cols);
    T_CHECK(n == 27);
    /* grad_norm, loss_scale, skipped (migration 018): null on a step without them */
    T_EQ_STR(json_string_value(json_array_get(cols, 24)), "grad_norm");
    T_EQ_STR(json_string_value(json_array_get(cols, 26)), "skipped");
    n -= 6; /* generation, world, at follow (migration 017), then 018's */
    T_EQ_STR(json_string_value(json_array_get(cols, n - 6)), "stage");
    T_EQ_STR(json_string_value(json_array_get(cols, n - 5)), "p2p_ms");
    T_EQ_STR(json_string_value(json_array_get(cols, n - 4)), "p2p_bytes");
    T_EQ_STR(json_string_value(json_array_get(cols, n - 3)), "bubble_ms");
    T_EQ_STR(json_string_value(json_array_get(cols, n - 2)), "loader_cpu_ms");
    T_EQ_STR(json_string_value(json_array_get(cols, n - 1)), "read_bytes");
    const json_t *row = json_array_get(json_object_get(steps, "rows"), 0);
    T_EQ_INT(json_integer_value(json_array_get(row, n - 6)), 1);
    T_NEAR(json_number_value(json_array_get(row, n - 5)), 1.5, 0);
    T_EQ_INT(json_integer_value(json_array_get(row, n - 4)), 4000);
    T_CHECK(json_is_null(json_array_get(row, n - 3))); /* rank 3 did not report it */
    json_decref(steps);
    steps = db_get_steps(db, rd, -1, true, &e);
    row = json_array_get(json_object_get(steps, "rows"), 0);
    for (size_t k = n - 6; k < n; k++)
        T_CHECK_MSG(json_is_null(json_array_get(row, k)), "column %zu", k);
    for (size_t k = 24; k < 27; k++) /* no clipping, no loss scale: null, skipped too */
        T_CHECK_MSG(json_is_null(json_array_get(row, k)), "column %zu", k);
    row = json_array_get(json_object_get(steps, "rows"), 1);
    T_NEAR(json_number_value(json_array_get(row, 24)), 2.5, 0);
    T_NEAR(json_number_value(json_array_get(row, 25)), 1024, 0);
    T_EQ_INT(json_integer_value(json_array_get(row, 26)), 1);
    json_decref(steps);

    struct db_experiment_data data;
    T_OK(db_get_experiment_data(db, id, &data, &e));
    T_EQ_INT(data.nruns, 2);
    const struct db_step_row *s = &data.runs[0].steps[0];
    T_EQ_INT(s->samples, 64); /* every rank's: results count a replica once */
    T_NEAR(s->bubble_ms, 7.5, 1e-12);
    T_NEAR(s->bubble_step_ms, 10 + 11 + 12, 1e-12); /* the ranks that reported a bubble */
    T_NEAR(s->p2p_ms, 6.0, 1e-12);
    T_EQ_INT(s->p2p_ranks, 4);
    T_NEAR(s->p2p_bytes, 10000, 0);
    /* the data pipeline's figures: sums and counts over the ranks that reported them */
    T_NEAR(s->loader_cpu_ms, 0.5 + 1.0 + 1.5, 1e-12);
    T_EQ_INT(s->loader_ranks, 3);
    T_NEAR(s->read_bytes, 0 + 1000 + 2000, 0);
    T_EQ_INT(s->read_ranks, 3);
    const struct db_step_row *plain_row = &data.runs[1].steps[0];
    T_CHECK(plain_row->loader_cpu_ms < 0 && plain_row->loader_ranks == 0);
    T_CHECK(plain_row->read_bytes < 0 && plain_row->read_ranks == 0);
    T_EQ_INT(s->p2p_bytes_ranks, 4);
    s = &data.runs[1].steps[0];
    T_CHECK(s->bubble_ms == -1 && s->bubble_step_ms == -1 && s->p2p_ms == -1 &&
            s->p2p_bytes == -1 && s->p2p_ranks == 0 && s->p2p_bytes_ranks == 0);
    db_experiment_data_free(&data);

    json_t *t = db_get_trace(db, rp, &test_trace_all, &e);
    T_CHECK_MSG(t != NULL, "%s", e.msg);
    T_EQ_INT(json_integer_value(json_object_get(t, "pipeline")), 2);
    json_decref(t);
    t = db_get_trace(db, rd, &test_trace_all, &e);
    T_EQ_INT(json_integer_value(json_object_get(t, "pipeline")), 1); /* not in its spec */
    json_decref(t);

    /* a database from before 013, holding steps: migrated, its steps read null */
    db_close(db);
    sqlite3 *h;
    T_CHECK(sqlite3_open(db_path, &h) == SQLITE_OK);
    T_CHECK(sqlite3_exec(h, TEST_DB_UNDO_013 "PRAGMA user_version=12", NULL, NULL, NULL) ==
            SQLITE_OK);
    sqlite3_close(h);
    db = db_open(db_path, &e);
    T_CHECK_MSG(db != NULL, "%s", e.msg);
    T_EQ_INT(db_schema_version(db), TEST_DB_VERSION);
    steps = db_get_steps(db, rp, -1, true, &e);
    T_CHECK_MSG(steps != NULL, "%s", e.msg);
    T_EQ_INT(json_array_size(json_object_get(steps, "rows")), 4);
    row = json_array_get(json_object_get(steps, "rows"), 0);
    T_NEAR(json_number_value(json_array_get(row, 13)), 10.0, 0); /* step_ms kept */
    for (size_t k = n - 4; k < n; k++)
        T_CHECK_MSG(json_is_null(json_array_get(row, k)), "column %zu", k);
    json_decref(steps);
    test_db_cleanup(db);
}

/* Memory, usage and trace rows (migration 011): the run reply lists each rank's memory
 * (a figure the engine could not tell is null) and its usage pooled over windows; the
 * results read the largest rank per repeat; the trace rows come back with spans and ops
 * decoded; a database at version 10 gains the tables and keeps its steps. */
/* Trace pages (issue 31): filtered by rank and repeat, at most limit rows with "more"
 * saying what follows, and the count ingest dropped. */
static void test_db_trace_page(void)
{
    struct err e = {0};
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    int64_t id = test_db_experiment(db, 1);
    int64_t r = test_db_run_id(db, id, 0);
    json_t *spans = json_pack("[[s, I, I]]", "step", (json_int_t)100, (json_int_t)900);
    json_t *ops = json_array();
    for (int rep = 0; rep < 2; rep++)
        for (int step = 0; step < 3; step++)
            for (int rank = 0; rank < 2; rank++) {
                struct report_trace tr = {
                    .repeat = rep, .step = step, .spans = spans, .ops = ops};
                T_OK(db_insert_trace(db, r, rank, &tr, &e));
            }
    struct db_trace_query q = {1, -1, 0, TRACE_MAX_ROWS};
    json_t *t = db_get_trace(db, r, &q, &e);
    json_t *rows = json_object_get(json_object_get(t, "steps"), "rows");
    T_EQ_INT(json_array_size(rows), 6);
    for (size_t i = 0; i < json_array_size(rows); i++)
        T_EQ_INT(json_integer_value(json_array_get(json_array_get(rows, i), 0)), 1);
    json_decref(t);
    q = (struct db_trace_query){-1, 1, 0, 4};
    t = db_get_trace(db, r, &q, &e);
    rows = json_object_get(json_object_get(t, "steps"), "rows");
    T_EQ_INT(json_array_size(rows), 4);
    T_EQ_INT(json_integer_value(json_array_get(json_array_get(rows, 0), 1)), 1); /* repeat */
    T_CHECK(json_is_true(json_object_get(json_object_get(t, "page"), "more")));
    json_decref(t);
    q.offset = 4;
    t = db_get_trace(db, r, &q, &e);
    rows = json_object_get(json_object_get(t, "steps"), "rows");
    T_EQ_INT(json_array_size(rows), 2);
    T_CHECK(json_is_false(json_object_get(json_object_get(t, "page"), "more")));
    T_EQ_INT(
        json_integer_value(json_object_get(json_object_get(t, "page"), "dropped_at_ingest")),
        0);
    json_decref(t);
    T_OK(db_set_trace_dropped(db, r, 17, &e));
    t = db_get_trace(db, r, &q, &e);
    T_EQ_INT(
        json_integer_value(json_object_get(json_object_get(t, "page"), "dropped_at_ingest")),
        17);
    json_decref(t);
    json_decref(spans);
    json_decref(ops);
    db_close(db);
}

/* A run's events and faults (migration 016): in GET /v1/runs/{id} in order, each fault's
 * outcome, and in the trace's input with unix seconds. */
static void test_db_run_events(void)
{
    struct err e = {0};
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    int64_t r = test_db_run_id(db, test_db_experiment(db, 1), 0);
    struct spec_fault stop = {
        .kind = "stop", .at_step = 5, .at_s = -1, .rank = 1, .node = -1, .duration_s = 2};
    struct spec_fault kill = {.kind = "kill", .at_step = -1, .at_s = 3, .rank = -1, .node = 0};
    T_OK(db_insert_run_fault(db, r, 0, &stop, &e));
    T_OK(db_insert_run_fault(db, r, 1, &kill, &e));
    struct db_run_event in = {.at = 1000.5,
                              .type = "fault",
                              .action = "inject",
                              .kind = "stop",
                              .fault = 0,
                              .rank = 1,
                              .node = 0,
                              .step = 5};
    struct db_run_event out = {.at = 1002.5,
                               .type = "fault",
                               .action = "restore",
                               .kind = "stop",
                               .fault = 0,
                               .rank = 1,
                               .node = 0,
                               .step = 9};
    struct db_run_event miss = {.at = 1003.0,
                                .type = "fault",
                                .action = "not_injected",
                                .kind = "kill",
                                .fault = 1,
                                .rank = -1,
                                .node = 0,
                                .step = -1,
                                .detail = "the run ended first"};
    T_OK(db_insert_run_event(db, r, 1, &in, &e));
    T_OK(db_insert_run_event(db, r, 2, &out, &e));
    T_OK(db_insert_run_event(db, r, 3, &miss, &e));
    T_OK(db_run_fault_outcome(db, r, 0, true, 1000.5, 5, 1002.5, NULL, &e));
    T_OK(db_run_fault_outcome(db, r, 1, false, 0, 0, -1, "the run ended first", &e));
    json_t *run = db_get_run(db, r, &e);
    const json_t *ev = json_object_get(run, "events"), *fs = json_object_get(run, "faults");
    T_EQ_INT(json_array_size(ev), 3);
    T_EQ_STR(json_string_value(json_object_get(json_array_get(ev, 1), "action")), "restore");
    T_CHECK(json_is_null(json_object_get(json_array_get(ev, 2), "rank")));
    T_EQ_STR(json_string_value(json_object_get(json_array_get(ev, 2), "detail")),
             "the run ended first");
    T_EQ_INT(json_array_size(fs), 2);
    const json_t *f0 = json_array_get(fs, 0), *f1 = json_array_get(fs, 1);
    T_CHECK(json_is_true(json_object_get(f0, "injected")));
    T_EQ_INT(json_integer_value(json_object_get(f0, "step")), 5);
    T_CHECK(json_is_string(json_object_get(f0, "restored_at")));
    T_CHECK(json_is_null(json_object_get(f0, "at_s")));
    T_CHECK(json_is_false(json_object_get(f1, "injected")));
    T_CHECK(json_is_null(json_object_get(f1, "injected_at")));
    T_CHECK(json_number_value(json_object_get(f1, "at_s")) == 3);
    T_EQ_STR(json_string_value(json_object_get(f1, "note")), "the run ended first");
    json_decref(run);
    struct db_trace_query q = {-1, -1, 0, TRACE_MAX_ROWS};
    json_t *t = db_get_trace(db, r, &q, &e);
    const json_t *te = json_object_get(t, "events");
    T_EQ_INT(json_array_size(te), 3);
    T_CHECK(json_number_value(json_object_get(json_array_get(te, 0), "unix_s")) == 1000.5);
    json_decref(t);
    db_close(db);
}

/* An experiment's version key (issue 31) changes when its rows change, and only then:
 * not for a fit stored, not for trace rows dropped, not for another experiment's rows. */
static void test_db_experiment_version(void)
{
    struct err e = {0};
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    int64_t id = test_db_experiment(db, 1), other = test_db_experiment(db, 1);
    int64_t r = test_db_run_id(db, id, 0), ro = test_db_run_id(db, other, 0);
    char k0[256], k1[256];
    T_OK(db_experiments_version(db, &id, 1, 32, k0, sizeof k0, &e));
    T_OK(db_experiments_version(db, &id, 1, 32, k1, sizeof k1, &e));
    T_EQ_STR(k0, k1);
    struct report_step st = {.step = 1, .samples = 8, .loss = 1.0, .step_ms = 5.0};
    T_OK(db_insert_step(db, ro, 0, &st, &e)); /* another experiment's row */
    T_OK(db_set_trace_dropped(db, r, 3, &e));
    T_OK(db_experiments_version(db, &id, 1, 32, k1, sizeof k1, &e));
    T_EQ_STR(k0, k1);
    T_OK(db_insert_step(db, r, 0, &st, &e));
    T_OK(db_experiments_version(db, &id, 1, 32, k1, sizeof k1, &e));
    T_CHECK_MSG(strcmp(k0, k1) != 0, "unchanged: %s", k1);
    int64_t missing = other + 100;
    T_CHECK(db_experiments_version(db, &missing, 1, 32, k1, sizeof k1, &e) < 0 &&
            e.code == ERR_NOT_FOUND);
    db_close(db);
}

static void test_db_observe(void)
{
    struct err e = {0};
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    int64_t id = test_db_experiment(db, 1);
    int64_t r = test_db_run_id(db, id, 0);
    struct report_memory m0 = {.params_bytes = 400,
                               .buffers_bytes = 8,
                               .grads_bytes = 400,
                               .optimizer_bytes = 200,
                               .comm_bytes = 64,
                               .activations_bytes = -1,
                               .peak_rss_bytes = 5000,
                               .device_peak_bytes = -1};
    struct report_memory m1 = m0;
    m1.optimizer_bytes = 208;
    m1.peak_rss_bytes = 7000;
    T_OK(db_insert_memory(db, r, 0, &m0, &e));
    T_OK(db_insert_memory(db, r, 1, &m1, &e));
    struct report_usage u = {.epoch = 0,
                             .steps = 4,
                             .wall_s = 2.0,
                             .user_s = 1.5,
                             .sys_s = 0.5,
                             .voluntary_cs = 10,
                             .involuntary_cs = 4,
                             .rss_bytes = 4000,
                             .gpu_util_pct = -1,
                             .gpu_mem_util_pct = -1,
                             .gpu_power_w = -1};
    T_OK(db_insert_usage(db, r, 0, &u, &e));
    u.epoch = 1;
    u.user_s = 0.5; /* the second window: 1 core over 2 s */
    T_OK(db_insert_usage(db, r, 0, &u, &e));
    json_t *spans = json_pack("[[s, I, I]]", "step", (json_int_t)100, (json_int_t)900);
    json_t *ops = json_pack("[[s, i, I, s, I, I]]", "allreduce", 0, (json_int_t)4096, "ring",
                            (json_int_t)200, (json_int_t)700);
    struct report_trace tr = {
        .repeat = 0, .step = 3, .clock_offset_ns = 1000000, .spans = spans, .ops = ops};
    T_OK(db_insert_trace(db, r, 1, &tr, &e));

    json_t *run = db_get_run(db, r, &e);
    T_CHECK_MSG(run != NULL, "%s", e.msg);
    json_t *mem = json_object_get(run, "memory");
    T_EQ_INT(json_array_size(mem), 2);
    T_EQ_INT(json_integer_value(json_object_get(json_array_get(mem, 1), "optimizer_bytes")),
             208);
    T_CHECK(json_is_null(json_object_get(json_array_get(mem, 0), "activations_bytes")));
    json_t *use = json_array_get(json_object_get(run, "usage"), 0);
    T_EQ_INT(json_integer_value(json_object_get(use, "windows")), 2);
    T_EQ_INT(json_integer_value(json_object_get(use, "steps")), 8);
    T_NEAR(json_number_value(json_object_get(use, "cpu_util")), 0.75, 1e-9); /* 3 s / 4 s */
    T_CHECK(json_is_null(json_object_get(use, "gpu_util_pct")));
    json_decref(run);

    struct db_experiment_data data;
    T_OK(db_get_experiment_data(db, id, &data, &e));
    T_EQ_INT(data.runs[0].nmemory, 1);
    T_NEAR(data.runs[0].memory[0].optimizer_bytes, 208, 0); /* the largest rank */
    T_NEAR(data.runs[0].memory[0].peak_rss_bytes, 7000, 0);
    T_NEAR(data.runs[0].memory[0].activations_bytes, -1, 0);
    T_EQ_INT(data.runs[0].nusage, 1);
    T_NEAR(data.runs[0].usage[0].cpu_util, 0.75, 1e-9);
    T_NEAR(data.runs[0].usage[0].involuntary_cs_per_s, 2.0, 1e-9); /* 8 over 4 s */
    T_NEAR(data.runs[0].usage[0].gpu_power_w, -1, 0);
    db_experiment_data_free(&data);

    json_t *t = db_get_trace(db, r, &test_trace_all, &e);
    T_CHECK_MSG(t != NULL, "%s", e.msg);
    json_t *row = json_array_get(json_object_get(json_object_get(t, "steps"), "rows"), 0);
    T_EQ_INT(json_array_size(json_object_get(json_object_get(t, "steps"), "rows")), 1);
    T_EQ_INT(json_integer_value(json_array_get(row, 0)), 1);       /* rank */
    T_EQ_INT(json_integer_value(json_array_get(row, 3)), 1000000); /* offset */
    T_CHECK(json_equal(json_array_get(row, 4), spans));
    T_CHECK(json_equal(json_array_get(row, 5), ops));
    json_decref(t);
    T_CHECK(db_get_trace(db, r + 1000, &test_trace_all, &e) == NULL && e.code == ERR_NOT_FOUND);
    json_decref(spans);
    json_decref(ops);

    /* a database from before 011, holding a step: migrated, the step kept */
    struct report_step st = {.step = 3, .samples = 8, .loss = 1.0, .step_ms = 5.0};
    T_OK(db_insert_step(db, r, 0, &st, &e));
    db_close(db);
    sqlite3 *h;
    T_CHECK(sqlite3_open(db_path, &h) == SQLITE_OK);
    T_CHECK(sqlite3_exec(h, TEST_DB_UNDO_011 "PRAGMA user_version=10", NULL, NULL, NULL) ==
            SQLITE_OK);
    sqlite3_close(h);
    db = db_open(db_path, &e);
    T_CHECK_MSG(db != NULL, "%s", e.msg);
    T_EQ_INT(db_schema_version(db), TEST_DB_VERSION);
    run = db_get_run(db, r, &e);
    T_CHECK(run != NULL);
    T_EQ_INT(json_array_size(json_object_get(run, "memory")), 0);
    json_decref(run);
    json_t *steps = db_get_steps(db, r, -1, true, &e);
    T_CHECK_MSG(steps != NULL, "%s", e.msg);
    T_EQ_INT(json_array_size(json_object_get(steps, "rows")), 1);
    json_decref(steps);
    T_OK(db_insert_memory(db, r, 0, &m0, &e));
    run = db_get_run(db, r, &e);
    T_EQ_INT(json_array_size(json_object_get(run, "memory")), 1);
    json_decref(run);
    test_db_cleanup(db);
}

/* issue 33: an epoch's test_acc_per_class is stored as its JSON array, served as an array
 * in GET /v1/runs/{id} (a null entry kept) and read back for results; an epoch without
 * one is served null and read back as a JSON null. */
static void test_db_epoch_per_class(void)
{
    struct err e = {0};
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    int64_t id = test_db_experiment(db, 1);
    int64_t r = test_db_run_id(db, id, 0);
    json_t *per = json_pack("[f, n, f]", 0.75, 0.5);
    struct report_epoch with = {.epoch = 0,
                                .samples = 64,
                                .train_loss = 1,
                                .train_acc = 0.5,
                                .test_loss = 0.7,
                                .test_acc = 0.625,
                                .time_s = 0.1,
                                .test_acc_per_class = per};
    struct report_epoch without = {.epoch = 1,
                                   .samples = 64,
                                   .train_loss = 1,
                                   .train_acc = 0.5,
                                   .test_loss = -1,
                                   .test_acc = -1,
                                   .time_s = 0.1};
    T_OK(db_insert_epoch(db, r, &with, &e));
    T_OK(db_insert_epoch(db, r, &without, &e));
    json_t *run = db_get_run(db, r, &e);
    T_CHECK(run != NULL);
    json_t *eps = json_object_get(run, "epochs");
    T_CHECK(json_equal(json_object_get(json_array_get(eps, 0), "test_acc_per_class"), per));
    T_CHECK(json_is_null(json_object_get(json_array_get(eps, 1), "test_acc_per_class")));
    json_decref(run);
    struct db_experiment_data data;
    T_OK(db_get_experiment_data(db, id, &data, &e));
    T_CHECK(json_equal(data.runs[0].epochs[0].test_acc_per_class, per));
    T_CHECK(json_is_null(data.runs[0].epochs[1].test_acc_per_class));
    db_experiment_data_free(&data);
    json_decref(per);
    db_close(db);
}

/* An epoch that trained on no sample has no train loss or accuracy: stored NULL, served
 * null, read back as -1 (not measured); migration 006 turns the zeros older databases
 * stored for such epochs into NULL and keeps every measured figure. */
static void test_db_epoch_train_null(void)
{
    struct err e = {0};
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    int64_t id = test_db_experiment(db, 1);
    int64_t r = test_db_run_id(db, id, 0);
    struct report_epoch none = {.epoch = 0,
                                .samples = 0,
                                .train_loss = -1,
                                .train_acc = -1,
                                .test_loss = 0.7,
                                .test_acc = 0.6,
                                .time_s = 0.1};
    struct report_epoch some = {.epoch = 1,
                                .samples = 64,
                                .train_loss = 1.5,
                                .train_acc = 0.5,
                                .test_loss = -1,
                                .test_acc = -1,
                                .time_s = 0.2};
    T_OK(db_insert_epoch(db, r, &none, &e));
    T_OK(db_insert_epoch(db, r, &some, &e));
    json_t *run = db_get_run(db, r, &e);
    T_CHECK(run != NULL);
    json_t *eps = json_object_get(run, "epochs");
    T_CHECK(json_is_null(json_object_get(json_array_get(eps, 0), "train_loss")));
    T_CHECK(json_is_null(json_object_get(json_array_get(eps, 0), "train_acc")));
    T_NEAR(json_number_value(json_object_get(json_array_get(eps, 0), "test_acc")), 0.6, 1e-12);
    T_NEAR(json_number_value(json_object_get(json_array_get(eps, 1), "train_loss")), 1.5, 0);
    json_decref(run);
    struct db_experiment_data data;
    T_OK(db_get_experiment_data(db, id, &data, &e));
    T_NEAR(data.runs[0].epochs[0].train_loss, -1.0, 0);
    T_NEAR(data.runs[0].epochs[1].train_acc, 0.5, 0);
    db_experiment_data_free(&data);

    /* a database from before 006: 002's NOT NULL table holding a 0 for the empty epoch */
    db_close(db);
    sqlite3 *h;
    T_CHECK(sqlite3_open(db_path, &h) == SQLITE_OK);
    char sql[4096];
    snprintf(
        sql, sizeof sql,
        TEST_DB_UNDO_009
        "DROP TABLE epochs; CREATE TABLE epochs (run_id INTEGER NOT NULL "
        "REFERENCES "
        "runs (id) ON DELETE CASCADE, repeat INTEGER NOT NULL, epoch INTEGER NOT NULL, "
        "samples INTEGER NOT NULL, train_loss REAL NOT NULL, train_acc REAL NOT NULL, "
        "test_loss REAL, test_acc REAL, time_s REAL NOT NULL, PRIMARY KEY (run_id, "
        "repeat, epoch)) WITHOUT ROWID; INSERT INTO epochs VALUES "
        "(%lld, 0, 0, 0, 0, 0, 0.7, 0.6, 0.1), (%lld, 0, 1, 64, 1.5, 0.5, NULL, NULL, 0.2);"
        "ALTER TABLE runs DROP COLUMN oversubscribed; ALTER TABLE runs DROP COLUMN "
        "network_profile; PRAGMA user_version=5",
        (long long)r, (long long)r);
    T_CHECK(sqlite3_exec(h, sql, NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(h);
    db = db_open(db_path, &e);
    T_CHECK_MSG(db != NULL, "%s", e.msg);
    T_EQ_INT(db_schema_version(db), TEST_DB_VERSION);
    run = db_get_run(db, r, &e);
    T_CHECK(run != NULL);
    eps = json_object_get(run, "epochs");
    T_EQ_INT(json_array_size(eps), 2);
    T_CHECK(json_is_null(json_object_get(json_array_get(eps, 0), "train_loss")));
    T_CHECK(json_is_null(json_object_get(json_array_get(eps, 0), "train_acc")));
    T_NEAR(json_number_value(json_object_get(json_array_get(eps, 0), "test_loss")), 0.7, 0);
    T_NEAR(json_number_value(json_object_get(json_array_get(eps, 1), "train_loss")), 1.5, 0);
    T_NEAR(json_number_value(json_object_get(json_array_get(eps, 1), "train_acc")), 0.5, 0);
    json_decref(run);
    /* still cascades from its run */
    T_OK(test_db_drop(db, id, &e));
    sqlite3 *h2;
    T_CHECK(sqlite3_open(db_path, &h2) == SQLITE_OK);
    sqlite3_stmt *st;
    T_CHECK(sqlite3_prepare_v2(h2, "SELECT count(*) FROM epochs", -1, &st, NULL) == SQLITE_OK);
    T_CHECK(sqlite3_step(st) == SQLITE_ROW);
    int left = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(h2);
    T_EQ_INT(left, 0);
    test_db_cleanup(db);
}

/* A run's network profile (ddpbenchd --network-profile) is stored at submit and shown
 * wherever the run is: its reply, its experiment's page of runs (both built by SQLite),
 * and the typed figures results read; a run submitted without one shows null. */
/* A single-process run (migration 019, issue 33): world_size counts its 2 replicas, the
 * queue hands the scheduler 1 process, and its one hello (world_size 1) makes it running. */
static void test_db_single_process(void)
{
    struct err e = {0};
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    const char text[] = "{\"workload\": \"train\", \"engine\": \"tensorflow\", "
                        "\"strategy\": \"mirrored\", \"world_size\": 2}";
    json_t *spec = spec_parse(text, sizeof text - 1, &e);
    T_CHECK_MSG(spec != NULL, "%s", e.msg);
    char *spec_text = json_dumps(spec, JSON_COMPACT);
    struct db_new_run run = {"{}", spec_text, 2, NULL};
    int64_t id = 0;
    T_OK(db_create_experiment(db, "one", "train", spec_text, &run, 1, &id, &e));
    struct db_queued_run *q = NULL;
    size_t n = 0;
    T_OK(db_list_queued(db, 4, &q, &n, &e));
    T_EQ_INT(n, 1);
    int64_t r0 = n ? q[0].id : 0;
    T_EQ_INT(n ? q[0].world_size : -1, 1);
    T_EQ_INT(n ? q[0].spec.world_size : -1, 2);
    db_queued_runs_free(q, n);
    T_OK(db_run_starting(db, r0, &e));
    T_OK(db_rank_spawned(db, r0, 0, "node", 100, "0,1", &e));
    T_CHECK(db_rank_hello(db, r0, 0, "host", 2, &e) < 0); /* the process is one of 1 */
    T_OK(db_rank_hello(db, r0, 0, "host", 1, &e));
    json_t *got = db_get_run(db, r0, &e);
    T_EQ_STR(json_string_value(json_object_get(got, "status")), "running");
    T_EQ_INT(json_integer_value(json_object_get(got, "world_size")), 2);
    json_decref(got);
    free(spec_text);
    json_decref(spec);
    test_db_cleanup(db);
}

static void test_db_network_profile(void)
{
    struct err e = {0};
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    struct db_new_run runs[2] = {{"{}", "{\"world_size\":2}", 2, "1gbe"},
                                 {"{}", "{\"world_size\":2}", 2, NULL}};
    int64_t id = 0;
    T_OK(db_create_experiment(db, "net", "collective", "{\"workload\":\"collective\"}", runs, 2,
                              &id, &e));
    json_t *exp = db_get_experiment(db, id, &e);
    T_CHECK(exp != NULL);
    json_t *page = json_object_get(exp, "runs");
    T_EQ_STR(json_string_value(json_object_get(json_array_get(page, 0), "network_profile")),
             "1gbe");
    T_CHECK(json_is_null(json_object_get(json_array_get(page, 1), "network_profile")));
    int64_t r0 = json_integer_value(json_object_get(json_array_get(page, 0), "id"));
    int64_t r1 = json_integer_value(json_object_get(json_array_get(page, 1), "id"));
    json_decref(exp);
    json_t *run = db_get_run(db, r0, &e);
    T_CHECK(run != NULL);
    T_EQ_STR(json_string_value(json_object_get(run, "network_profile")), "1gbe");
    json_decref(run);
    run = db_get_run(db, r1, &e);
    T_CHECK(run && json_is_null(json_object_get(run, "network_profile")));
    json_decref(run);
    struct db_experiment_data data;
    T_OK(db_get_experiment_data(db, id, &data, &e));
    T_EQ_INT(data.nruns, 2);
    T_EQ_STR(data.runs[0].network_profile, "1gbe");
    T_EQ_STR(data.runs[1].network_profile, "");
    db_experiment_data_free(&data);
    test_db_cleanup(db);
}

/* The model's rows (migration 012): rank 0's gradient readiness comes back per repeat in
 * the experiment's data; fits are stored once per key (a second store keeps the first),
 * read back with ids, an unseparated gamma as NaN; finished collective experiments are
 * listed newest first. */
static void test_db_model(void)
{
    struct err e = {0};
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    int64_t id = test_db_experiment(db, 1), later = test_db_experiment(db, 1);
    int64_t r = test_db_run_id(db, id, 0);
    json_t *tensors = json_pack("[[I, I], [I, I]]", (json_int_t)400, (json_int_t)1000,
                                (json_int_t)4096, (json_int_t)5000);
    struct report_grads g = {.repeat = 1, .steps = 9, .backward_ns = 6000, .tensors = tensors};
    T_OK(db_insert_grads(db, r, &g, &e));
    g.repeat = 0;
    T_OK(db_insert_grads(db, r, &g, &e));
    struct db_experiment_data data;
    T_OK(db_get_experiment_data(db, id, &data, &e));
    T_EQ_INT(data.runs[0].ngrads, 2);
    T_EQ_INT(data.runs[0].grads[0].repeat, 0); /* repeat order */
    T_EQ_INT(data.runs[0].grads[1].backward_ns, 6000);
    T_CHECK(json_equal(data.runs[0].grads[1].tensors, tensors));
    T_EQ_STR(data.status, "queued");
    db_experiment_data_free(&data);
    json_decref(tensors);

    /* a pipeline's layer profile and cut (migration 022), read back in repeat order */
    json_t *layers = json_pack("[[I, I, I], [I, I, I]]", (json_int_t)10, (json_int_t)20,
                               (json_int_t)4096, (json_int_t)30, (json_int_t)60, (json_int_t)0);
    json_t *cuts = json_pack("[[I, I]]", (json_int_t)1, (json_int_t)8192);
    struct report_pipe pp = {.repeat = 0,
                             .stages = 2,
                             .micro_batch = 4,
                             .tied_bytes = 512,
                             .layers = layers,
                             .cuts = cuts,
                             .batch = 16,
                             .batch_forward_ns = 25,
                             .batch_backward_ns = 55};
    T_OK(db_insert_pipe(db, r, &pp, &e));
    /* a second repeat from a worker that did not time the whole batch (migration 023) */
    pp.repeat = 1;
    pp.batch = -1;
    pp.batch_forward_ns = pp.batch_backward_ns = -1;
    T_OK(db_insert_pipe(db, r, &pp, &e));
    T_OK(db_get_experiment_data(db, id, &data, &e));
    T_EQ_INT(data.runs[0].npipes, 2);
    T_EQ_INT(data.runs[0].pipes[0].micro_batch, 4);
    T_EQ_INT(data.runs[0].pipes[0].tied_bytes, 512);
    T_CHECK(json_equal(data.runs[0].pipes[0].layers, layers));
    T_CHECK(json_equal(data.runs[0].pipes[0].cuts, cuts));
    T_EQ_INT(data.runs[0].pipes[0].batch, 16);
    T_EQ_INT(data.runs[0].pipes[0].batch_forward_ns, 25);
    T_EQ_INT(data.runs[0].pipes[0].batch_backward_ns, 55);
    T_EQ_INT(data.runs[0].pipes[1].repeat, 1);
    T_EQ_INT(data.runs[0].pipes[1].batch, -1);
    T_EQ_INT(data.runs[0].pipes[1].batch_forward_ns, -1);
    T_EQ_INT(data.runs[0].pipes[1].batch_backward_ns, -1);
    db_experiment_data_free(&data);
    json_decref(layers);
    json_decref(cuts);

    struct perf_fit f = {.experiment_id = id,
                         .world_size = 2,
                         .nodes = 1,
                         .alpha_s = 5e-5,
                         .beta_s = 1e-9,
                         .gamma_s = NAN,
                         .r2 = 0.99,
                         .worst_resid = 0.05,
                         .points = 7,
                         .min_bytes = 4096,
                         .max_bytes = 1 << 24};
    snprintf(f.backend, sizeof f.backend, "tcp");
    snprintf(f.device, sizeof f.device, "cpu");
    snprintf(f.op, sizeof f.op, "allreduce");
    snprintf(f.algorithm, sizeof f.algorithm, "ring");
    struct perf_fit f2 = f;
    snprintf(f2.op, sizeof f2.op, "reduce_scatter");
    f2.gamma_s = 2e-10;
    struct perf_fit two[2] = {f, f2};
    T_OK(db_store_fits(db, two, 2, &e));
    two[0].alpha_s = 1; /* the same key again: the stored fit stays */
    T_OK(db_store_fits(db, two, 1, &e));
    struct perf_fit *out = NULL;
    size_t n = 0;
    T_OK(db_get_fits(db, id, &out, &n, &e));
    T_EQ_INT(n, 2);
    T_CHECK(out[0].id > 0 && out[1].id > out[0].id);
    T_NEAR(out[0].alpha_s, 5e-5, 1e-15);
    T_CHECK(isnan(out[0].gamma_s));
    T_NEAR(out[1].gamma_s, 2e-10, 1e-20);
    T_EQ_STR(out[1].op, "reduce_scatter");
    T_EQ_STR(out[0].network_profile, "");
    free(out);
    T_OK(db_get_fits(db, later, &out, &n, &e));
    T_EQ_INT(n, 0);
    free(out);

    int64_t ids[4], exp_of = 0;
    size_t nid = 9;
    T_OK(db_finished_collectives(db, ids, 4, &nid, &e));
    T_EQ_INT(nid, 0); /* both still queued */
    T_OK(db_run_finish(db, r, DB_RUN_SUCCEEDED, NULL, -1, &e));
    T_OK(db_run_finish(db, test_db_run_id(db, later, 0), DB_RUN_FAILED, "x", 0, &e));
    T_OK(db_finished_collectives(db, ids, 4, &nid, &e));
    T_EQ_INT(nid, 2);
    T_EQ_INT(ids[0], later);
    T_OK(db_run_experiment_id(db, r, &exp_of, &e));
    T_EQ_INT(exp_of, id);
    T_CHECK(db_run_experiment_id(db, r + 999, &exp_of, &e) < 0 && e.code == ERR_NOT_FOUND);
    test_db_cleanup(db);
}

/* Calibrations (migration 021): one per experiment and model version (a second store is
 * ignored), listed newest first with the curve decoded, filtered by node, model and id. */
static void test_db_calibrations(void)
{
    struct err e = {0};
    struct db *db = test_db_fresh();
    T_CHECK(db != NULL);
    int64_t a = test_db_experiment(db, 1), b = test_db_experiment(db, 1);
    json_t *curve = json_pack("[{s:i, s:i, s:f}]", "k", 1, "steps", 10, "forward", 1.0);
    struct db_calibration cal = {.experiment_id = a,
                                 .node = "node-a",
                                 .model = "mnist-cnn",
                                 .device = "cpu",
                                 .dataset = "synthetic",
                                 .batch_size = 32,
                                 .threads = 1,
                                 .cpus = 2,
                                 .pinned = true,
                                 .switch_us = 2.5,
                                 .quantum_ms = 1.5,
                                 .curve = curve};
    char none[64] = "x", one[64] = "x", same[64] = "x", two[64] = "x";
    T_OK(db_calibrations_version(db, none, sizeof none, &e));
    T_EQ_STR(none, "x|cal:0:0,");
    T_OK(db_store_calibration(db, &cal, &e));
    T_OK(db_calibrations_version(db, one, sizeof one, &e));
    cal.switch_us = 9; /* the same experiment again: the stored one stays */
    T_OK(db_store_calibration(db, &cal, &e));
    T_OK(db_calibrations_version(db, same, sizeof same, &e));
    cal.experiment_id = b;
    cal.model = "resnet18";
    T_OK(db_store_calibration(db, &cal, &e));
    T_OK(db_calibrations_version(db, two, sizeof two, &e));
    /* the report cache's key: changed by each stored calibration, not by an ignored one */
    T_CHECK(strcmp(none, one) != 0 && strcmp(one, two) != 0);
    T_EQ_STR(one, same);
    char tiny[8] = "x";
    T_CHECK(db_calibrations_version(db, tiny, sizeof tiny, &e) < 0 && e.code == ERR_INVALID);
    json_t *all = db_list_calibrations(db, NULL, NULL, 0, &e);
    T_CHECK(all != NULL);
    T_EQ_INT(json_array_size(all), 2);
    json_t *first = json_array_get(all, 0), *second = json_array_get(all, 1);
    T_EQ_STR(json_string_value(json_object_get(first, "model")), "resnet18"); /* newest */
    T_NEAR(json_real_value(json_object_get(second, "switch_us")), 2.5, 1e-12);
    T_CHECK(json_is_true(json_object_get(second, "pinned")));
    T_CHECK(json_equal(json_object_get(second, "curve"), curve));
    json_t *some = db_list_calibrations(db, "node-a", "mnist-cnn", 0, &e);
    T_EQ_INT(json_array_size(some), 1);
    json_decref(some);
    some = db_list_calibrations(db, "node-b", NULL, 0, &e);
    T_EQ_INT(json_array_size(some), 0);
    json_decref(some);
    some = db_list_calibrations(db, NULL, NULL,
                                json_integer_value(json_object_get(first, "id")), &e);
    T_EQ_INT(json_array_size(some), 1);
    json_decref(some);
    json_decref(all);
    json_decref(curve);
    /* neither experiment is a finished calibration: nothing pending */
    int64_t ids[4];
    size_t n = 9;
    T_OK(db_calibrations_pending(db, ids, 4, &n, &e));
    T_EQ_INT(n, 0);
    test_db_cleanup(db);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_db_calibrations);
    TEST_RUN(test_db_lifecycle);
    TEST_RUN(test_db_network_profile);
    TEST_RUN(test_db_single_process);
    TEST_RUN(test_db_epoch_train_null);
    TEST_RUN(test_db_epoch_per_class);
    TEST_RUN(test_db_step_phases_null);
    TEST_RUN(test_db_pipeline_steps);
    TEST_RUN(test_db_elastic_figures);
    TEST_RUN(test_db_observe);
    TEST_RUN(test_db_trace_page);
    TEST_RUN(test_db_run_events);
    TEST_RUN(test_db_experiment_version);
    TEST_RUN(test_db_queued_spec_parsed);
    TEST_RUN(test_db_results_roundtrip);
    TEST_RUN(test_db_reader_checks_aliases);
    TEST_RUN(test_db_list_filters_and_paging);
    TEST_RUN(test_db_list_item_matches_experiment);
    TEST_RUN(test_db_experiment_runs_paged);
    TEST_RUN(test_db_recover_and_reopen);
    TEST_RUN(test_db_experiment_summary);
    TEST_RUN(test_db_refuses_newer_schema);
    TEST_RUN(test_db_ids_never_reused);
    TEST_RUN(test_db_cancel_and_delete);
    TEST_RUN(test_db_steps_epochs_and_data);
    TEST_RUN(test_db_gpu_placement);
    TEST_RUN(test_db_model);
    return test_end();
}
