/* Unit tests for daemon/results (the statistics themselves are test_stats.c's): grouping
 * and per-size rows of collectives, the training metrics (step time = slowest rank,
 * throughput per repeat, speed-up and efficiency against the world_size 1 group, overlap,
 * straggler spread, final accuracy), the nulls where a figure cannot be computed (an
 * interval from one repeat, the baseline's own speed-up interval, one rank's overlap, a
 * loss never measured), the header of a table with no row, and CSV quoting. Inputs are
 * built by hand as the typed rows db_get_experiment_data returns, so every expected value
 * is known. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "common/spec.h"
#include "daemon/calib.h"
#include "daemon/results.h"
#include "tests/unit/test.h"

static struct report_collective coll(int repeat, int64_t bytes, double busbw)
{
    return (struct report_collective){.repeat = repeat,
                                      .op = "allreduce",
                                      .dtype = "float32",
                                      .redop = "sum",
                                      .inplace = false,
                                      .bytes = bytes,
                                      .algorithm = "ring",
                                      .busbw_gbs = busbw,
                                      .algbw_gbs = busbw / 2,
                                      .time_us_median = 10.0,
                                      .wrong = 0};
}

/* A run as db_get_experiment_data returns it; the row arrays are borrowed from the test
 * (run_free releases only the JSON it made). */
static struct db_data_run run(int world, struct report_collective *c, size_t nc,
                              struct db_step_row *st, size_t ns, struct report_epoch *ep,
                              size_t ne)
{
    return (struct db_data_run){
        .world_size = world,
        .params = json_pack("{s:i}", "world_size", world),
        .spec = json_pack("{s:i, s:s}", "world_size", world, "op", "allreduce"),
        .collectives = c,
        .ncollectives = nc,
        .steps = st,
        .nsteps = ns,
        .epochs = ep,
        .nepochs = ne};
}

static void runs_free(struct db_data_run *runs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        json_decref(runs[i].params);
        json_decref(runs[i].spec);
    }
}

static void test_results_collectives(void)
{
    struct err e;
    struct report_collective c1[] = {coll(0, 1024, 0), coll(0, 4096, 0), coll(1, 1024, 0),
                                     coll(1, 4096, 0)};
    struct report_collective c2[] = {coll(0, 1024, 1.0), coll(0, 4096, 2.0), coll(1, 1024, 3.0),
                                     coll(1, 4096, 4.0)};
    struct db_data_run runs[] = {run(1, c1, 4, NULL, 0, NULL, 0),
                                 run(2, c2, 4, NULL, 0, NULL, 0)};
    struct db_experiment_data data = {
        .id = 9, .workload = "collective", .runs = runs, .nruns = 2};
    json_t *t = results_build(&data, NULL, 0, &e);
    T_CHECK(t != NULL);
    T_EQ_INT(json_integer_value(json_object_get(t, "experiment")), 9);
    json_t *rows = json_object_get(t, "rows");
    T_EQ_INT(json_array_size(rows), 4);  /* 2 world sizes x 2 sizes */
    json_t *r = json_array_get(rows, 2); /* world_size 2, 1024 bytes */
    T_EQ_INT(json_integer_value(json_object_get(r, "world_size")), 2);
    T_EQ_INT(json_integer_value(json_object_get(r, "bytes")), 1024);
    T_NEAR(json_real_value(json_object_get(r, "busbw_gbs_mean")), 2.0, 1e-12);
    T_EQ_INT(json_integer_value(json_object_get(r, "busbw_gbs_n")), 2);
    T_NEAR(json_real_value(json_object_get(r, "busbw_gbs_ci95")),
           stats_t95(1) * sqrt(2.0) / sqrt(2.0), 1e-9);
    T_EQ_STR(json_string_value(json_object_get(r, "algorithm")), "ring");
    T_EQ_STR(json_string_value(json_object_get(r, "op")), "allreduce");
    T_CHECK(json_is_false(json_object_get(r, "inplace")));
    json_t *cols = json_object_get(t, "columns");
    T_EQ_STR(json_string_value(json_array_get(cols, 0)), "world_size");
    size_t ncols = json_array_size(cols);
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) T_EQ_INT(json_object_size(row), ncols);
    json_decref(t);
    /* pooled over world sizes when grouped by op */
    const char *by[] = {"op"};
    t = results_build(&data, by, 1, &e);
    T_EQ_INT(json_array_size(json_object_get(t, "rows")), 2);
    T_EQ_INT(json_integer_value(
                 json_object_get(json_array_get(json_object_get(t, "rows"), 0), "busbw_gbs_n")),
             4);
    json_decref(t);
    const char *bad[] = {"nope"};
    T_CHECK(results_build(&data, bad, 1, &e) == NULL);
    T_EQ_STR(e.field, "group_by");
    runs_free(runs, 2);
}

/* steps of one run: n steps per repeat, step_ms given, samples per step (owned array) */
static struct db_step_row *steps(int repeats, int n, double step_ms, double fastest_ms,
                                 int samples)
{
    struct db_step_row *a = calloc((size_t)(repeats * n), sizeof *a);
    for (int r = 0; r < repeats; r++)
        for (int s = 0; s < n; s++)
            a[r * n + s] = (struct db_step_row){.repeat = r,
                                                .step = s,
                                                .step_ms = step_ms * (1 + 0.1 * r),
                                                .fastest_ms = fastest_ms,
                                                .samples = samples,
                                                .phase_ms = {[PHASE_DATA] = 1.0,
                                                             [PHASE_FORWARD] = 2.0,
                                                             [PHASE_BACKWARD] = 3.0,
                                                             [PHASE_COMM] = 4.0,
                                                             [PHASE_COMM_EXPOSED] = 1.0,
                                                             [PHASE_OPTIMIZER] = 0.5}};
    return a;
}

/* The table of two training runs: world size wa with steps sa (owned, freed here) and
 * epochs ep, then wb with sb (owned, freed here). Owned table, NULL on error. */
static json_t *train_table(int wa, struct db_step_row *sa, size_t na, struct report_epoch *ep,
                           size_t ne, int wb, struct db_step_row *sb, size_t nb)
{
    struct err e;
    struct db_data_run runs[] = {run(wa, NULL, 0, sa, na, ep, ne),
                                 run(wb, NULL, 0, sb, nb, NULL, 0)};
    struct db_experiment_data data = {.id = 3, .workload = "train", .runs = runs, .nruns = 2};
    json_t *t = results_build(&data, NULL, 0, &e);
    free(sa);
    free(sb);
    runs_free(runs, 2);
    return t;
}

static void test_results_training(void)
{
    struct report_epoch ep[] = {
        {.repeat = 0, .epoch = 0, .test_acc = 0.5, .train_loss = 1.0},
        {.repeat = 0, .epoch = 1, .test_acc = 0.8, .train_loss = 0.4},
    };
    json_t *t = train_table(1, steps(2, 4, 100.0, 100.0, 32), 8, ep, 2, 4,
                            steps(2, 4, 125.0, 100.0, 128), 8);
    T_CHECK(t != NULL);
    json_t *rows = json_object_get(t, "rows");
    T_EQ_INT(json_array_size(rows), 2);
    json_t *one = json_array_get(rows, 0), *four = json_array_get(rows, 1);
    /* throughput per repeat: 32 samples / 0.1 s = 320, then 32 / 0.11 s */
    double t1 = (320.0 + 32.0 / 0.11) / 2, t4 = (128 / 0.125 + 128 / 0.1375) / 2;
    T_NEAR(json_real_value(json_object_get(one, "throughput_mean")), t1, 1e-6);
    T_EQ_INT(json_integer_value(json_object_get(one, "throughput_n")), 2);
    T_NEAR(json_real_value(json_object_get(four, "throughput_mean")), t4, 1e-6);
    T_NEAR(json_real_value(json_object_get(one, "speedup")), 1.0, 1e-12);
    T_NEAR(json_real_value(json_object_get(four, "speedup")), t4 / t1, 1e-9);
    T_NEAR(json_real_value(json_object_get(four, "efficiency")), t4 / t1 / 4, 1e-9);
    /* two repeats each: t(1) over the relative half-widths of both throughputs */
    double ci1 = stats_t95(1) * fabs(320.0 - 32.0 / 0.11) / 2,
           ci4 = stats_t95(1) * fabs(128 / 0.125 - 128 / 0.1375) / 2;
    T_NEAR(json_real_value(json_object_get(four, "speedup_ci95")),
           t4 / t1 * hypot(ci1 / t1, ci4 / t4), 1e-9);
    /* the baseline is 1 by definition: no interval, and exactly 1 */
    T_CHECK(json_is_null(json_object_get(one, "speedup_ci95")));
    T_NEAR(json_real_value(json_object_get(one, "efficiency")), 1.0, 0);
    /* step time: one mean per repeat (125 and 137.5 ms), not 8 pooled steps */
    T_NEAR(json_real_value(json_object_get(four, "step_ms_ci95")),
           stats_t95(1) * (137.5 - 125.0) / 2, 1e-9);
    /* one rank exchanges nothing: no overlap, whatever its comm phases timed */
    T_CHECK(json_is_null(json_object_get(one, "overlap")));
    T_NEAR(json_real_value(json_object_get(four, "overlap")), 0.75, 1e-12); /* 1 - 1/4 */
    T_NEAR(json_real_value(json_object_get(four, "straggler_ms")), (25.0 + 37.5) / 2, 1e-9);
    T_NEAR(json_real_value(json_object_get(four, "backward_ms")), 3.0, 1e-12);
    T_EQ_INT(json_integer_value(json_object_get(four, "step_ms_n")), 8);
    T_NEAR(json_real_value(json_object_get(one, "test_acc_mean")), 0.8, 1e-12); /* last epoch */
    T_CHECK(json_is_null(json_object_get(four, "test_acc_mean")));
    json_decref(t);
}

/* issue 33: test_acc_per_class is, per class, the mean over the repeats of the last epoch's
 * accuracy (an earlier epoch's is not read), ';'-separated, empty for a class no repeat
 * had a sample of; null for a group whose runs reported none. */
static void test_results_per_class(void)
{
    json_t *early = json_pack("[f, f, n]", 0.0, 0.0), *r0 = json_pack("[f, f, n]", 1.0, 0.5),
           *r1 = json_pack("[f, f, n]", 0.5, 0.25);
    struct report_epoch ep[] = {
        {.repeat = 0,
         .epoch = 0,
         .test_acc = 0.1,
         .train_loss = 1,
         .test_acc_per_class = early},
        {.repeat = 0, .epoch = 1, .test_acc = 0.8, .train_loss = 1, .test_acc_per_class = r0},
        {.repeat = 1, .epoch = 0, .test_acc = 0.4, .train_loss = 1, .test_acc_per_class = r1},
    };
    json_t *t = train_table(1, steps(2, 4, 100.0, 100.0, 32), 8, ep, 3, 2,
                            steps(2, 4, 60.0, 55.0, 64), 8);
    T_CHECK(t != NULL);
    json_t *one = json_array_get(json_object_get(t, "rows"), 0);
    json_t *two = json_array_get(json_object_get(t, "rows"), 1);
    T_CHECK_MSG(json_is_string(json_object_get(one, "test_acc_per_class")) &&
                    strcmp(json_string_value(json_object_get(one, "test_acc_per_class")),
                           "0.7500;0.3750;") == 0,
                "%s", json_string_value(json_object_get(one, "test_acc_per_class")));
    T_CHECK(json_is_null(json_object_get(two, "test_acc_per_class")));
    json_decref(t);
    json_decref(early);
    json_decref(r0);
    json_decref(r1);
}

/* One repeat per world size: intervals that cannot be computed are null, never "± 0";
 * the step-time interval of a single repeat comes from batch means; a loss that was not
 * measured (-1) is left out, not averaged as 0. */
static void test_results_one_repeat_nulls(void)
{
    struct report_epoch ep[] = {
        {.repeat = 0, .epoch = 0, .test_acc = 0.5, .train_loss = -1},
    };
    struct db_step_row *s1 = steps(1, 4, 100.0, 100.0, 32);
    s1[2].step_ms = s1[3].step_ms = 110.0; /* batches {100, 100} and {110, 110} */
    json_t *t = train_table(1, s1, 4, ep, 1, 2, steps(1, 4, 60.0, 55.0, 64), 4);
    T_CHECK(t != NULL);
    json_t *one = json_array_get(json_object_get(t, "rows"), 0);
    json_t *two = json_array_get(json_object_get(t, "rows"), 1);
    T_EQ_INT(json_integer_value(json_object_get(two, "throughput_n")), 1);
    T_CHECK(json_is_null(json_object_get(two, "throughput_ci95")));
    T_CHECK(json_real_value(json_object_get(two, "speedup")) > 1);
    T_CHECK(json_is_null(json_object_get(two, "speedup_ci95")));
    T_CHECK(json_is_null(json_object_get(one, "speedup_ci95")));
    T_NEAR(json_real_value(json_object_get(one, "speedup")), 1.0, 0);
    T_CHECK(json_is_null(json_object_get(one, "overlap")));
    T_NEAR(json_real_value(json_object_get(two, "overlap")), 0.75, 1e-12);
    T_NEAR(json_real_value(json_object_get(one, "step_ms_ci95")), stats_t95(1) * 10.0 / 2,
           1e-9);
    T_CHECK(json_is_null(json_object_get(one, "train_loss_mean")));
    T_EQ_INT(json_integer_value(json_object_get(one, "train_loss_n")), 0);
    T_NEAR(json_real_value(json_object_get(one, "test_acc_mean")), 0.5, 0);
    json_decref(t);
}

/* An experiment none of whose runs has finished has no row, and still every column: the
 * CSV is a header (that of a table with rows), never an empty line. */
static void test_results_no_rows_header(void)
{
    struct err e;
    struct report_collective c[] = {coll(0, 1024, 1.0)};
    struct db_data_run runs[] = {run(2, NULL, 0, NULL, 0, NULL, 0),
                                 run(2, c, 1, NULL, 0, NULL, 0)};
    struct db_experiment_data data = {
        .id = 5, .workload = "collective", .runs = runs, .nruns = 1};
    json_t *empty = results_build(&data, NULL, 0, &e);
    data.nruns = 2;
    json_t *full = results_build(&data, NULL, 0, &e);
    runs_free(runs, 2);
    T_CHECK(empty != NULL && full != NULL);
    T_EQ_INT(json_array_size(json_object_get(empty, "rows")), 0);
    T_EQ_INT(json_array_size(json_object_get(full, "rows")), 1);
    T_CHECK(json_equal(json_object_get(empty, "columns"), json_object_get(full, "columns")));
    size_t len;
    char *csv = results_csv(empty, &len, &e);
    T_CHECK(csv != NULL);
    const char head[] =
        "world_size,emulated,oversubscribed,network_profile,nodes,single_process,op,";
    T_CHECK_MSG(strncmp(csv, head, strlen(head)) == 0, "%.80s", csv);
    T_CHECK(strstr(csv, "busbw_gbs_mean") != NULL);
    T_EQ_INT(strchr(csv, '\n') - csv, (long)len - 1); /* one line: the header */
    free(csv);
    /* a training table with no run at all has its columns too */
    struct db_experiment_data none = {.id = 6, .workload = "train", .runs = NULL, .nruns = 0};
    json_t *tt = results_build(&none, NULL, 0, &e);
    T_CHECK(tt != NULL);
    T_CHECK(json_array_size(json_object_get(tt, "columns")) > 20);
    T_EQ_STR(json_string_value(json_array_get(json_object_get(tt, "columns"), 0)), "emulated");
    json_decref(tt);
    json_decref(empty);
    json_decref(full);
}

/* The keys columns.h expands for a workload's groups, in table order. Owned. */
static json_t *expected_columns(bool collective)
{
    json_t *out = json_array();
    for (int c = 0; c < COL_N; c++) {
        enum column_group g = columns_get((enum column)c)->group;
        if (g != CG_KEY && (g == CG_COLLECTIVE) != collective)
            continue;
        enum column_stat st[STAT_N + 1];
        size_t n = columns_stats_of(columns_get((enum column)c)->shape, st);
        for (size_t i = 0; i < n; i++) {
            char key[COLUMNS_KEY_MAX];
            json_array_append_new(out, json_string(columns_key((enum column)c, st[i], key)));
        }
    }
    return out;
}

/* Every column results.c writes is a row of common/columns.h, in the table's order: a
 * collective table has the key and collective groups, a training table the others. */
static void test_results_columns_from_table(void)
{
    struct err e;
    for (int collective = 0; collective < 2; collective++) {
        struct db_experiment_data none = {.id = 7, .runs = NULL, .nruns = 0};
        snprintf(none.workload, sizeof none.workload, "%s",
                 collective ? "collective" : "train");
        json_t *t = results_build(&none, NULL, 0, &e), *want = expected_columns(collective);
        T_CHECK(t != NULL);
        bool same = json_equal(json_object_get(t, "columns"), want);
        if (!same) {
            char *got = json_dumps(json_object_get(t, "columns"), JSON_COMPACT);
            fprintf(stderr, "    columns %s\n", got);
            free(got);
        }
        T_CHECK(same);
        json_decref(want);
        json_decref(t);
    }
}

static void test_results_csv_quoting(void)
{
    struct err e;
    json_t *t = json_pack("{s:[s, s, s], s:[{s:s, s:f, s:n}]}", "columns", "name", "x", "y",
                          "rows", "name", "a,\"b\"", "x", 1.5, "y");
    size_t len;
    char *csv = results_csv(t, &len, &e);
    T_CHECK(csv != NULL);
    T_EQ_STR(csv, "name,x,y\r\n\"a,\"\"b\"\"\",1.5,\r\n");
    T_EQ_INT(len, strlen(csv));
    free(csv);
    json_decref(t);
}

/* Three runs of one op and size, the middle one flagged (runs.emulated,
 * runs.oversubscribed, or a runs.network_profile the others lack): the table must split
 * them by the flag alone, the clean ones pooled (8 and 6) and the flagged one on its own
 * (3), and say which row is which. The table is returned for further checks (owned), NULL
 * after a failed check. */
static json_t *results_check_flag_apart(const char *flag)
{
    struct err e;
    struct report_collective c1[] = {coll(0, 1024, 8.0)}, c2[] = {coll(0, 1024, 3.0)},
                             c3[] = {coll(0, 1024, 6.0)};
    struct db_data_run runs[] = {run(2, c1, 1, NULL, 0, NULL, 0),
                                 run(2, c2, 1, NULL, 0, NULL, 0),
                                 run(2, c3, 1, NULL, 0, NULL, 0)};
    bool profile = strcmp(flag, "network_profile") == 0;
    runs[1].emulated = strcmp(flag, "emulated") == 0;
    runs[1].oversubscribed = strcmp(flag, "oversubscribed") == 0;
    if (profile)
        snprintf(runs[1].network_profile, sizeof runs[1].network_profile, "1gbe");
    struct db_experiment_data data = {
        .id = 3, .workload = "collective", .runs = runs, .nruns = 3};
    const char *by[] = {"op"};
    json_t *t = results_build(&data, by, 1, &e);
    runs_free(runs, 3);
    json_t *rows = json_object_get(t, "rows");
    bool ok = t && json_array_size(rows) == 2;
    for (size_t i = 0; ok && i < 2; i++) {
        json_t *r = json_array_get(rows, i);
        json_t *v = json_object_get(r, flag);
        bool flagged = profile ? json_is_string(v) : json_is_true(v);
        double mean = json_real_value(json_object_get(r, "busbw_gbs_mean"));
        ok = (profile ? flagged || json_is_null(v) : json_is_boolean(v)) &&
             (!flagged || !profile || strcmp(json_string_value(v), "1gbe") == 0) &&
             fabs(mean - (flagged ? 3.0 : 7.0)) < 1e-12 &&
             json_integer_value(json_object_get(r, "busbw_gbs_n")) == (flagged ? 1 : 2);
    }
    if (!ok) {
        json_decref(t);
        return NULL;
    }
    return t;
}

/* Runs whose ranks shared one GPU (emulated) are never pooled with real ones, whatever
 * the grouping, and every table says which rows are which. */
static void test_results_emulated_apart(void)
{
    json_t *t = results_check_flag_apart("emulated");
    T_CHECK_MSG(t != NULL, "emulated runs pooled with real ones");
    /* columns of the table, after the group_by fields; group_by is what was asked */
    json_t *cols = json_object_get(t, "columns");
    T_EQ_STR(json_string_value(json_array_get(cols, 0)), "op");
    T_EQ_STR(json_string_value(json_array_get(cols, 1)), "emulated");
    T_EQ_STR(json_string_value(json_array_get(cols, 2)), "oversubscribed");
    T_EQ_STR(json_string_value(json_array_get(cols, 3)), "network_profile");
    T_EQ_INT(json_array_size(json_object_get(t, "group_by")), 1);
    json_decref(t);
}

/* Runs that shared CPUs (oversubscribed) are kept apart from clean ones the same way. */
static void test_results_oversubscribed_apart(void)
{
    json_t *t = results_check_flag_apart("oversubscribed");
    T_CHECK_MSG(t != NULL, "oversubscribed runs pooled with clean ones");
    json_decref(t);
}

/* Runs measured over another network (ddpbenchd --network-profile, deploy/netlab.sh) are
 * kept apart from the host network's the same way, the row naming its profile. */
static void test_results_network_profile_apart(void)
{
    json_t *t = results_check_flag_apart("network_profile");
    T_CHECK_MSG(t != NULL, "runs of another network profile pooled with the host's");
    json_decref(t);
}

/* A single-process run (issue 33: strategy mirrored or dp, its replicas in one process) is
 * never pooled with a process-per-rank run of the same world size, and its row says so. */
static void test_results_single_process_apart(void)
{
    struct err e;
    struct db_data_run runs[] = {run(2, NULL, 0, steps(1, 4, 100.0, 100.0, 32), 4, NULL, 0),
                                 run(2, NULL, 0, steps(1, 4, 50.0, 50.0, 32), 4, NULL, 0)};
    for (int i = 0; i < 2; i++) {
        json_decref(runs[i].spec);
        runs[i].spec = json_pack("{s:s, s:i, s:s}", "workload", "train", "world_size", 2,
                                 "strategy", i ? "mirrored" : "ddp");
    }
    struct db_experiment_data data = {.id = 3, .workload = "train", .runs = runs, .nruns = 2};
    json_t *t = results_build(&data, NULL, 0, &e);
    for (int i = 0; i < 2; i++)
        free(runs[i].steps);
    runs_free(runs, 2);
    T_CHECK_MSG(t != NULL, "%s", e.msg);
    json_t *rows = json_object_get(t, "rows");
    T_EQ_INT(json_array_size(rows), 2);
    int single = 0;
    for (size_t i = 0; i < json_array_size(rows); i++) {
        json_t *r = json_array_get(rows, i);
        bool one = json_is_true(json_object_get(r, "single_process"));
        T_CHECK(json_is_boolean(json_object_get(r, "single_process")));
        T_EQ_INT(json_integer_value(json_object_get(r, "world_size")), 2);
        /* 32 samples a step over 50 ms (the single process) or 100 ms */
        T_NEAR(json_real_value(json_object_get(r, "step_ms_median")), one ? 50.0 : 100.0, 1e-9);
        single += one;
    }
    T_EQ_INT(single, 1);
    json_decref(t);
}

/* One repeat's memory sample: the same model state every repeat (400 B parameters and
 * gradients, 200 B optimizer state), a peak RSS that differs, no device figure. */
static struct db_memory_row mem_row(int repeat, double peak_rss)
{
    struct db_memory_row m = {.repeat = repeat, .peak_rss_bytes = peak_rss};
    m.params_bytes = m.grads_bytes = 400; /* model state 400 + 400 + 200 */
    m.optimizer_bytes = 200;
    m.comm_bytes = 64;
    m.activations_bytes = 1000;
    m.device_peak_bytes = -1;
    return m;
}

/* One repeat's utilisation: cores busy and context switches, no NVML figures. */
static struct db_usage_row use_row(int repeat, double cpu, double vcs, double ics)
{
    return (struct db_usage_row){.repeat = repeat,
                                 .cpu_util = cpu,
                                 .voluntary_cs_per_s = vcs,
                                 .involuntary_cs_per_s = ics,
                                 .gpu_util_pct = -1,
                                 .gpu_power_w = -1};
}

/* Memory and utilisation per group: one sample per repeat (the largest rank's bytes,
 * the ranks' pooled cores), a figure no rank reported stays null with n 0 (never 0), and
 * model state is parameters + gradients + optimizer state. */
static void test_results_memory_and_usage(void)
{
    struct err e;
    struct db_memory_row mem[] = {mem_row(0, 5000), mem_row(1, 7000)};
    struct db_usage_row use[] = {use_row(0, 0.9, 10, 2), use_row(1, 1.1, 12, 4)};
    struct db_data_run runs[] = {run(2, NULL, 0, steps(2, 2, 10.0, 10.0, 8), 4, NULL, 0)};
    runs[0].memory = mem;
    runs[0].nmemory = 2;
    runs[0].usage = use;
    runs[0].nusage = 2;
    struct db_experiment_data data = {.id = 1, .workload = "train", .runs = runs, .nruns = 1};
    json_t *t = results_build(&data, NULL, 0, &e);
    free(runs[0].steps);
    runs_free(runs, 1);
    T_CHECK(t != NULL);
    json_t *row = json_array_get(json_object_get(t, "rows"), 0);
    T_NEAR(json_real_value(json_object_get(row, "optimizer_bytes_mean")), 200, 0);
    T_NEAR(json_real_value(json_object_get(row, "model_state_bytes_mean")), 1000, 0);
    T_NEAR(json_real_value(json_object_get(row, "peak_rss_bytes_mean")), 6000, 0);
    T_NEAR(json_real_value(json_object_get(row, "peak_rss_bytes_ci95")),
           stats_t95(1) * 2000.0 / 2, 1e-6);
    T_EQ_INT(json_integer_value(json_object_get(row, "peak_rss_bytes_n")), 2);
    T_CHECK(json_is_null(json_object_get(row, "device_peak_bytes_mean")));
    T_EQ_INT(json_integer_value(json_object_get(row, "device_peak_bytes_n")), 0);
    T_NEAR(json_real_value(json_object_get(row, "cpu_util_mean")), 1.0, 1e-12);
    T_NEAR(json_real_value(json_object_get(row, "involuntary_cs_per_s_mean")), 3.0, 1e-12);
    T_CHECK(json_is_null(json_object_get(row, "gpu_util_pct_mean")));
    /* no target asked: every time-to-accuracy figure is null */
    T_CHECK(json_is_null(json_object_get(row, "target_accuracy")));
    T_CHECK(json_is_null(json_object_get(row, "tta_s_mean")));
    T_CHECK(json_is_null(json_object_get(row, "tta_reached")));
    json_decref(t);
}

/* What a fault cost (issue 32): each run's figures are a sample of the group's mean; a
 * fault-free run adds none (its row is null there), and an elastic run without a fault
 * adds its generations (0) only. */
static void test_results_elastic(void)
{
    struct err e;
    struct db_data_run runs[] = {run(3, NULL, 0, steps(2, 3, 10.0, 10.0, 8), 6, NULL, 0),
                                 run(3, NULL, 0, steps(2, 3, 10.0, 10.0, 8), 6, NULL, 0),
                                 run(3, NULL, 0, steps(2, 3, 10.0, 10.0, 8), 6, NULL, 0)};
    runs[0].elastic = (struct db_elastic_fig){.elastic = true,
                                              .faulted = true,
                                              .fault_at = 100,
                                              .generations = 2,
                                              .detect_s = 0.5,
                                              .resume_s = 2.0,
                                              .lost_steps = 4,
                                              .thr_before = 300,
                                              .thr_during = 0,
                                              .thr_after = 200};
    runs[1].elastic = (struct db_elastic_fig){.elastic = true,
                                              .faulted = true,
                                              .fault_at = 100,
                                              .generations = 1,
                                              .detect_s = 1.5,
                                              .resume_s = 3.0,
                                              .lost_steps = -1,
                                              .thr_before = 310,
                                              .thr_during = 10,
                                              .thr_after = -1};
    runs[2].elastic = (struct db_elastic_fig){.elastic = true, .generations = 0};
    struct db_experiment_data data = {.id = 1, .workload = "train", .runs = runs, .nruns = 3};
    json_t *t = results_build(&data, NULL, 0, &e);
    for (size_t i = 0; i < 3; i++)
        free(runs[i].steps);
    runs_free(runs, 3);
    T_CHECK(t != NULL);
    json_t *row = json_array_get(json_object_get(t, "rows"), 0);
    T_NEAR(json_real_value(json_object_get(row, "generations_mean")), 1.0, 1e-12);
    T_EQ_INT(json_integer_value(json_object_get(row, "generations_n")), 3);
    T_NEAR(json_real_value(json_object_get(row, "detect_s_mean")), 1.0, 1e-12);
    T_EQ_INT(json_integer_value(json_object_get(row, "detect_s_n")), 2);
    T_NEAR(json_real_value(json_object_get(row, "resume_s_mean")), 2.5, 1e-12);
    T_NEAR(json_real_value(json_object_get(row, "lost_steps_mean")), 4, 0);
    T_EQ_INT(json_integer_value(json_object_get(row, "lost_steps_n")), 1);
    T_NEAR(json_real_value(json_object_get(row, "throughput_before_mean")), 305, 1e-9);
    T_NEAR(json_real_value(json_object_get(row, "throughput_during_mean")), 5, 1e-9);
    T_NEAR(json_real_value(json_object_get(row, "throughput_after_mean")), 200, 0);
    json_decref(t);
    /* a fault-free, non-elastic run: every figure null */
    struct db_data_run plain[] = {run(2, NULL, 0, steps(2, 2, 10.0, 10.0, 8), 4, NULL, 0)};
    data = (struct db_experiment_data){.id = 2, .workload = "train", .runs = plain, .nruns = 1};
    t = results_build(&data, NULL, 0, &e);
    free(plain[0].steps);
    runs_free(plain, 1);
    row = json_array_get(json_object_get(t, "rows"), 0);
    T_CHECK(json_is_null(json_object_get(row, "generations_mean")));
    T_CHECK(json_is_null(json_object_get(row, "detect_s_mean")));
    T_CHECK(json_is_null(json_object_get(row, "throughput_after_mean")));
    json_decref(t);
}

/* Time to accuracy from a known epoch curve: repeat 0 reaches 0.9 in its third epoch
 * (2 + 3 + 4 = 9 s of training), repeat 1 in its second (2 + 3 = 5 s, through train
 * accuracy where no test split was evaluated), repeat 2 never: 2 of 3 reached it. A group
 * whose runs asked for different targets reports no figure. */
static void test_results_time_to_accuracy(void)
{
    struct err e;
    struct report_epoch ep[] = {
        {.repeat = 0, .epoch = 0, .test_acc = 0.5, .train_acc = 0.5, .time_s = 2},
        {.repeat = 0, .epoch = 1, .test_acc = 0.85, .train_acc = 0.95, .time_s = 3},
        {.repeat = 0, .epoch = 2, .test_acc = 0.91, .train_acc = 0.97, .time_s = 4},
        {.repeat = 0, .epoch = 3, .test_acc = 0.95, .train_acc = 0.99, .time_s = 4},
        {.repeat = 1, .epoch = 0, .test_acc = -1, .train_acc = 0.6, .time_s = 2},
        {.repeat = 1, .epoch = 1, .test_acc = -1, .train_acc = 0.9, .time_s = 3},
        {.repeat = 2, .epoch = 0, .test_acc = 0.3, .train_acc = 0.3, .time_s = 2},
        {.repeat = 2, .epoch = 1, .test_acc = 0.4, .train_acc = 0.4, .time_s = 2},
    };
    struct db_data_run runs[] = {run(1, NULL, 0, steps(3, 2, 10.0, 10.0, 8), 6, ep, 8)};
    json_object_set_new(runs[0].spec, "target_accuracy", json_real(0.9));
    struct db_experiment_data data = {.id = 1, .workload = "train", .runs = runs, .nruns = 1};
    json_t *t = results_build(&data, NULL, 0, &e);
    T_CHECK(t != NULL);
    json_t *row = json_array_get(json_object_get(t, "rows"), 0);
    T_NEAR(json_real_value(json_object_get(row, "target_accuracy")), 0.9, 0);
    T_NEAR(json_real_value(json_object_get(row, "tta_s_mean")), 7.0, 1e-12);
    T_NEAR(json_real_value(json_object_get(row, "tta_s_min")), 5.0, 0);
    T_NEAR(json_real_value(json_object_get(row, "tta_s_max")), 9.0, 0);
    T_NEAR(json_real_value(json_object_get(row, "tta_epochs_mean")), 2.5, 1e-12);
    T_EQ_INT(json_integer_value(json_object_get(row, "tta_s_n")), 2);
    T_EQ_INT(json_integer_value(json_object_get(row, "tta_reached")), 2);
    T_EQ_INT(json_integer_value(json_object_get(row, "tta_repeats")), 3);
    json_decref(t);
    /* the same epochs, a second run asking 0.8, grouped together: no figure */
    struct db_data_run two[] = {runs[0], run(1, NULL, 0, steps(1, 2, 10.0, 10.0, 8), 2, ep, 2)};
    json_object_set_new(two[1].spec, "target_accuracy", json_real(0.8));
    data.runs = two;
    data.nruns = 2;
    const char *by[] = {"world_size"};
    t = results_build(&data, by, 1, &e);
    T_CHECK(t != NULL);
    row = json_array_get(json_object_get(t, "rows"), 0);
    T_EQ_INT(json_array_size(json_object_get(t, "rows")), 1);
    T_CHECK(json_is_null(json_object_get(row, "target_accuracy")));
    T_CHECK(json_is_null(json_object_get(row, "tta_s_mean")));
    T_EQ_INT(json_integer_value(json_object_get(row, "tta_s_n")), 0);
    json_decref(t);
    free(runs[0].steps);
    free(two[1].steps);
    runs_free(two, 2);
}

/* data's 4-rank run moved to 2 nodes of 2 ranks under 1gbe (test_results_predictions):
 * with one node's fit alone pred_note names the missing link; with the link's 2-rank fit
 * too the allreduce is hierarchical, each part over its link (docs/model.md "Across
 * nodes"), and the row states the range; without one node's fit the note says so. */
static void results_check_across(struct db_experiment_data *data, const struct perf_fit *one)
{
    struct err e;
    struct db_data_run *r = &data->runs[1];
    r->nodes = 2;
    r->ranks_per_node = 2;
    for (int i = 0; i < 2; i++) /* a netlab leader stamps its profile on every run */
        snprintf(data->runs[i].network_profile, sizeof data->runs[i].network_profile, "1gbe");
    struct perf_fit fits[2] = {*one, *one};
    fits[1].id = 78;
    fits[1].world_size = 2;
    fits[1].nodes = 2;
    fits[1].alpha_s = 2e-4;
    fits[1].beta_s = 8e-9;
    snprintf(fits[1].network_profile, sizeof fits[1].network_profile, "1gbe");
    json_t *t = results_build_with(data, NULL, 0, fits, 1, &e);
    json_t *row = json_array_get(json_object_get(t, "rows"), 1);
    T_EQ_INT(json_integer_value(json_object_get(row, "nodes")), 2);
    T_CHECK(json_is_null(json_object_get(row, "pred_step_ms")));
    T_CHECK(strstr(json_string_value(json_object_get(row, "pred_note")),
                   "no fit of the 1gbe link between 2 nodes") != NULL);
    json_decref(t);
    t = results_build_with(data, NULL, 0, fits, 2, &e);
    row = json_array_get(json_object_get(t, "rows"), 1);
    T_CHECK(json_is_null(json_object_get(row, "pred_note")));
    T_EQ_STR(json_string_value(json_object_get(row, "pred_fits")), "77,78");
    T_EQ_STR(json_string_value(json_object_get(row, "pred_range")),
             "fits world 2-4, 1-2 nodes; base 1 rank");
    T_CHECK(json_is_false(json_object_get(row, "pred_extrapolated")));
    /* by hand: 2 ranks on a node's 2 CPUs: compute as measured, no spare core (no
     * overlap); one bucket B after backward: chain reduce and broadcast inside the node
     * over one node's link (the 4-rank fit: 1e-4 / 6 s a message, 1e-9 / 1.5 s/B), the
     * leaders' allreduce over the 1gbe fit at 2 ranks */
    double b = 4096 + (1 << 20), lat = 1e-4 / 6, spb = 1e-9 / 1.5;
    double hier = 2 * (lat + b * spb) + 2e-4 + 8e-9 * b;
    double want = (1 + 2 + 3 + 0.5) + 1 + hier * 1e3;
    T_NEAR(json_number_value(json_object_get(row, "pred_step_ms")), want, 1e-9);
    json_decref(t);
    t = results_build_with(data, NULL, 0, &fits[1], 1, &e); /* the link's alone */
    row = json_array_get(json_object_get(t, "rows"), 1);
    T_CHECK(strstr(json_string_value(json_object_get(row, "pred_note")),
                   "no fit inside one node") != NULL);
    json_decref(t);
}

/* Predictions: a 4-rank run that shared the node's 2 CPUs (oversubscribed) has no speed-up
 * (its baseline did not share) but is predicted from the one-rank run, with compute
 * slowed by the share (2 cores / 4 ranks: twice) and no overlap (no spare core); the row
 * names the fit and the base run and its error is against its measured step; without
 * fits every pred_* is null and pred_note says why. */
static void test_results_predictions(void)
{
    struct err e;
    struct db_step_row *s1 = steps(1, 4, 7.5, 7.5, 8), *s4 = steps(1, 4, 30.0, 25.0, 32);
    struct db_data_run runs[] = {run(1, NULL, 0, s1, 4, NULL, 0),
                                 run(4, NULL, 0, s4, 4, NULL, 0)};
    for (int i = 0; i < 2; i++) {
        json_decref(runs[i].spec);
        runs[i].spec = json_pack("{s:i, s:s, s:s, s:s, s:i, s:i, s:i}", "world_size",
                                 runs[i].world_size, "strategy", "ddp", "device", "cpu",
                                 "backend", "tcp", "threads", 1, "batch_size", 8, "accumulate",
                                 1);
        runs[i].cpus_online = 2;
        runs[i].nodes = 1;
        runs[i].ranks_per_node = runs[i].world_size;
        runs[i].id = 10 + i;
    }
    runs[1].oversubscribed = true;
    json_t *tensors = json_pack("[[i, i], [i, i]]", 4096, 1000000, 1 << 20, 2500000);
    struct db_grads_row g = {
        .repeat = 0, .steps = 4, .backward_ns = 3000000, .tensors = tensors};
    runs[0].grads = &g;
    runs[0].ngrads = 1;
    struct perf_fit f = {.id = 77,
                         .world_size = 4,
                         .nodes = 1,
                         .alpha_s = 1e-4,
                         .beta_s = 1e-9,
                         .gamma_s = NAN,
                         .min_bytes = 1024,
                         .max_bytes = 1 << 26};
    snprintf(f.backend, sizeof f.backend, "tcp");
    snprintf(f.device, sizeof f.device, "cpu");
    snprintf(f.op, sizeof f.op, "allreduce");
    snprintf(f.algorithm, sizeof f.algorithm, "ring");
    struct db_experiment_data data = {.id = 3, .workload = "train", .runs = runs, .nruns = 2};
    json_t *t = results_build_with(&data, NULL, 0, &f, 1, &e);
    json_t *none = results_build_with(&data, NULL, 0, NULL, 0, &e);
    T_CHECK(t && none);
    json_t *r4 = json_array_get(json_object_get(t, "rows"), 1);
    T_EQ_INT(json_integer_value(json_object_get(r4, "world_size")), 4);
    T_CHECK(json_is_null(json_object_get(r4, "speedup")));
    T_EQ_STR(json_string_value(json_object_get(r4, "pred_fits")), "77");
    T_EQ_INT(json_integer_value(json_object_get(r4, "pred_base_run")), 10);
    /* by hand: phases 1 + 2 + 3 + 0.5 ms twice over (2 cores shared by 4 ranks), the base's
     * 1 ms of local exposed comm; every step of the base is 7.5 ms: no wait for stragglers;
     * one bucket (1 MiB + 4 KiB < 25 MiB), its allreduce after backward */
    double bytes = 4096 + (1 << 20);
    double ar = 6 * (1e-4 / 6) + 1.5 * (1e-9 / 1.5) * bytes;
    double want = 2 * (1 + 2 + 3 + 0.5) + 1 + ar * 1e3;
    T_NEAR(json_number_value(json_object_get(r4, "pred_step_ms")), want, 1e-9);
    T_NEAR(json_number_value(json_object_get(r4, "pred_overlap")), 0, 1e-12);
    double step = json_number_value(json_object_get(r4, "step_ms_mean"));
    T_NEAR(json_number_value(json_object_get(r4, "pred_step_err")), (want - step) / step, 1e-9);
    T_CHECK(json_is_null(json_object_get(r4, "pred_note")));
    /* the verdict: the error against the measured step's own interval (docs/model.md §8) */
    const json_t *ci = json_object_get(r4, "step_ms_ci95");
    double err = fabs((want - step) / step);
    const char *verdict = json_string_value(json_object_get(r4, "pred_verdict"));
    if (json_is_number(ci)) {
        double noise = json_number_value(ci) / step;
        T_CHECK(verdict && strcmp(verdict, noise >= err  ? "within_noise"
                                           : err <= 0.15 ? "hit"
                                                         : "miss") == 0);
    } else { /* too few steps for an interval: nothing to judge the error against */
        T_CHECK(verdict == NULL && json_is_null(json_object_get(r4, "pred_verdict")));
    }
    T_EQ_STR(json_string_value(json_object_get(r4, "pred_range")),
             "fits world 4, 1 node; base 1 rank");
    T_CHECK(json_is_false(json_object_get(r4, "pred_extrapolated")));
    json_t *n4 = json_array_get(json_object_get(none, "rows"), 1);
    T_CHECK(json_is_null(json_object_get(n4, "pred_verdict")));
    T_CHECK(json_is_null(json_object_get(n4, "pred_step_ms")));
    T_CHECK(strstr(json_string_value(json_object_get(n4, "pred_note")), "no network fit"));
    T_CHECK(json_is_null(json_object_get(n4, "pred_range")));
    T_CHECK(json_is_null(json_object_get(n4, "pred_extrapolated")));
    json_decref(t);
    json_decref(none);
    results_check_across(&data, &f);
    json_decref(tensors);
    runs[0].grads = NULL;
    runs_free(runs, 2);
    free(s1);
    free(s4);
}

/* A fit of op at world 2 (tcp, cpu): alpha a, beta b. */
static struct perf_fit pipe_fit(int64_t id, const char *op, const char *alg, double a, double b)
{
    struct perf_fit f = {.id = id,
                         .world_size = 2,
                         .nodes = 1,
                         .alpha_s = a,
                         .beta_s = b,
                         .gamma_s = NAN,
                         .min_bytes = 1024,
                         .max_bytes = 1 << 26};
    snprintf(f.backend, sizeof f.backend, "tcp");
    snprintf(f.device, sizeof f.device, "cpu");
    snprintf(f.op, sizeof f.op, "%s", op);
    snprintf(f.algorithm, sizeof f.algorithm, "%s", alg);
    return f;
}

/* The pipeline of test_results_pipeline_predicted (run pipe) once its node has a
 * calibration of its key at k = 2: forward x2, backward x1.5, the optimizer x4 (and, up to
 * the node's 4 cores, the same at k = 3 and 4) replace the core share phase by phase. A
 * stage computes a share u of the step (1 - the bubble of the schedule without
 * co-location), so a busy stage has another beside it with probability
 * g = 1 - (1 - u)^(ranks - 1): each slowdown is 1 + g x (its k = 2 value - 1). Before it,
 * means over the stages: forward 1.0 ms, backward 1.5, the optimizer 0.25; the stages'
 * compute in all (per micro-batch forward 0.5 + 0.5, backward 0.5 + 1.0, then the
 * optimizer 0.375 + 0.125) 3.0. */
static void pipeline_calibrated(const struct db_experiment_data *data,
                                const struct perf_fit *fits, const struct db_data_run *pipe,
                                double u)
{
    struct err e;
    struct calib cal = {.id = 7, .batch_size = 8, .threads = 1};
    cal.pts[0] = (struct perf_calib_point){.k = 1, .slow = {1, 1, 1}};
    cal.pts[1] = (struct perf_calib_point){.k = 2, .slow = {2, 1.5, 4}};
    cal.perf = (struct perf_calib){.pts = cal.pts, .n = 2, .cores = 4};
    const char *model = json_string_value(spec_field_value(pipe->spec, "model"));
    snprintf(cal.node, sizeof cal.node, "%s", pipe->host);
    snprintf(cal.model, sizeof cal.model, "%s", model ? model : "");
    snprintf(cal.device, sizeof cal.device, "cpu");
    calib_key_of(pipe, cal.dataset, sizeof cal.dataset);
    struct calib_set cals = {&cal, 1};
    json_t *t = results_build_calibrated(data, NULL, 0, fits, 2, &cals, &e);
    T_CHECK(t != NULL);
    json_t *r = json_array_get(json_object_get(t, "rows"), 1);
    T_CHECK_MSG(json_is_null(json_object_get(r, "pred_note")), "%s",
                json_string_value(json_object_get(r, "pred_note")));
    T_EQ_INT(json_integer_value(json_object_get(r, "pred_calibration")), 7);
    double f = 1 - pow(1 - u, pipe->ranks_per_node - 1);
    double sf = 1 + f, sb = 1 + 0.5 * f, so = 1 + 3 * f;
    T_NEAR(json_number_value(json_object_get(r, "pred_forward_ms")), 1.0 * sf, 1e-9);
    T_NEAR(json_number_value(json_object_get(r, "pred_backward_ms")), 1.5 * sb, 1e-9);
    T_NEAR(json_number_value(json_object_get(r, "pred_optimizer_ms")), 0.25 * so, 1e-9);
    T_NEAR(json_number_value(json_object_get(r, "pred_contention")),
           (1.0 * sf + 1.5 * sb + 0.5 * so) / 3.0, 1e-9);
    json_decref(t);
}

/* A gpipe pipeline of 2 stages and 2 micro-batches on 2 ranks of a 4-CPU node. The
 * one-rank base (batch 8) gives the level: forward 2 ms and backward 3 ms a step, so 1 and
 * 1.5 ms a micro-batch; rank 0's layer profile the shares: forward 1:1, backward 1:2, so
 * stage 0 forward 0.5 and backward 0.5 ms, stage 1 0.5 and 1 ms; parameters 3:1. The
 * sendrecv fit: 1e6 bytes per cut, 0.1 + 1 = 1.1 ms. The base's data 1 ms each; its
 * optimizer 0.5 ms and local exposed communication 1 ms shared 3:1. By hand (ms):
 *   stage 0: data [0,1] F0 [1,1.5] send ->2.6 F1 [2.6,3.1] send ->4.2 .. B1 [6.8,7.3]
 *            .. B0 [8.9,9.4] local 0.75 optimizer 0.375 ->10.525
 *   stage 1: data [0,1] F0 [2.6,3.1] F1 [4.2,4.7] B1 [4.7,5.7] send ->6.8 B0 [6.8,7.8]
 *            send ->8.9 local 0.25 optimizer 0.125 ->9.275
 *   step 10.525; busy 4.125 and 4.375: bubble (6.4 + 6.15) / 2 / 10.525.
 * Without a sendrecv fit: no prediction, and the note says which fit is missing. */
static void test_results_pipeline_predicted(void)
{
    struct err e;
    struct db_step_row *s1 = steps(1, 4, 7.5, 7.5, 8), *sp = steps(1, 4, 20.0, 20.0, 16);
    struct db_data_run runs[] = {run(1, NULL, 0, s1, 4, NULL, 0),
                                 run(2, NULL, 0, sp, 4, NULL, 0)};
    static const int pipe[] = {1, 2}, micro[] = {1, 2};
    for (int i = 0; i < 2; i++) {
        json_decref(runs[i].spec);
        json_decref(runs[i].params);
        runs[i].spec = json_pack("{s:i, s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:s}",
                                 "world_size", runs[i].world_size, "strategy", "ddp", "device",
                                 "cpu", "backend", "tcp", "threads", 1, "batch_size", 8,
                                 "pipeline", pipe[i], "micro_batches", micro[i], "accumulate",
                                 1, "schedule", "gpipe");
        runs[i].params = json_pack("{s:i, s:i, s:i}", "world_size", runs[i].world_size,
                                   "pipeline", pipe[i], "micro_batches", micro[i]);
        runs[i].cpus_online = 4;
        runs[i].nodes = 1;
        runs[i].ranks_per_node = runs[i].world_size;
        runs[i].id = 20 + i;
    }
    json_t *tensors = json_pack("[[i, i], [i, i]]", 4096, 1000000, 1 << 20, 2500000);
    struct db_grads_row g = {
        .repeat = 0, .steps = 4, .backward_ns = 3000000, .tensors = tensors};
    runs[0].grads = &g;
    runs[0].ngrads = 1;
    json_t *layers = json_pack("[[i, i, i], [i, i, i]]", 2000000, 1000000, 3000, 2000000,
                               2000000, 1000);
    json_t *cuts = json_pack("[[i, i]]", 1, 1000000);
    struct db_pipe_row pr = {.repeat = 0,
                             .stages = 2,
                             .micro_batch = 4,
                             .tied_bytes = 0,
                             .layers = layers,
                             .cuts = cuts};
    runs[1].pipes = &pr;
    runs[1].npipes = 1;
    struct perf_fit fits[] = {pipe_fit(81, "allreduce", "ring", 1e-4, 1e-9),
                              pipe_fit(82, "sendrecv", "direct", 1e-4, 1e-9)};
    struct db_experiment_data data = {.id = 5, .workload = "train", .runs = runs, .nruns = 2};
    json_t *t = results_build_with(&data, NULL, 0, fits, 2, &e);
    json_t *none = results_build_with(&data, NULL, 0, fits, 1, &e);
    T_CHECK(t && none);
    json_t *r2 = json_array_get(json_object_get(t, "rows"), 1);
    T_EQ_INT(json_integer_value(json_object_get(r2, "pipeline")), 2);
    T_CHECK_MSG(json_is_null(json_object_get(r2, "pred_note")), "%s",
                json_string_value(json_object_get(r2, "pred_note")));
    T_NEAR(json_number_value(json_object_get(r2, "pred_step_ms")), 10.525, 1e-9);
    T_NEAR(json_number_value(json_object_get(r2, "pred_bubble")), (6.4 + 6.15) / 2 / 10.525,
           1e-9);
    T_NEAR(json_number_value(json_object_get(r2, "pred_comm_exposed_ms")), 0.5, 1e-9);
    T_NEAR(json_number_value(json_object_get(r2, "pred_forward_ms")), 1.0, 1e-9);
    /* 2 ranks on 4 CPUs, a thread each: the core share slows nothing, and says 1, not 0 */
    T_NEAR(json_number_value(json_object_get(r2, "pred_contention")), 1.0, 1e-12);
    T_NEAR(json_number_value(json_object_get(r2, "pred_backward_ms")), 1.5, 1e-9);
    T_NEAR(json_number_value(json_object_get(r2, "pred_optimizer_ms")), 0.25, 1e-9);
    T_EQ_STR(json_string_value(json_object_get(r2, "pred_fits")), "82");
    T_EQ_INT(json_integer_value(json_object_get(r2, "pred_base_run")), 20);
    /* one replica of batch 8: 8 samples a step */
    T_NEAR(json_number_value(json_object_get(r2, "pred_throughput")), 8 / 10.525e-3, 1e-6);
    T_CHECK(json_is_null(
        json_object_get(json_array_get(json_object_get(t, "rows"), 0), "pred_bubble")));
    json_t *n2 = json_array_get(json_object_get(none, "rows"), 1);
    T_CHECK(json_is_null(json_object_get(n2, "pred_step_ms")));
    T_CHECK(json_is_null(json_object_get(n2, "pred_bubble")));
    T_CHECK(strstr(json_string_value(json_object_get(n2, "pred_note")), "sendrecv") != NULL);
    /* each stage busy (4.125 + 4.375) / 2 of 10.525 ms: the other one computes beside it
     * 0.40 of the time */
    pipeline_calibrated(&data, fits, &runs[1], (4.125 + 4.375) / 2 / 10.525);
    /* a run from before the profile: said so */
    runs[1].npipes = 0;
    json_t *old = results_build_with(&data, NULL, 0, fits, 2, &e);
    T_CHECK(old && strstr(json_string_value(json_object_get(
                              json_array_get(json_object_get(old, "rows"), 1), "pred_note")),
                          "layer profile") != NULL);
    json_decref(old);
    /* rank 0 timed the whole batch too (8 samples: forward 6 ms, backward 4 ms, where the
     * profile's micro-batch of 4 took 4 and 3): a micro-batch costs 4/6 and 3/4 of the
     * base's step, not 1/2 each. Forward per stage and micro-batch 2 ms x 1/2 x 2/3,
     * backward 3 ms x (1/3, 2/3) x 3/4; means over the stages of their two micro-batches:
     * forward 4/3 ms, backward 2.25 */
    runs[1].npipes = 1;
    pr.batch = 8;
    pr.batch_forward_ns = 6000000;
    pr.batch_backward_ns = 4000000;
    json_t *mbt = results_build_with(&data, NULL, 0, fits, 2, &e);
    T_CHECK(mbt != NULL);
    json_t *rm = json_array_get(json_object_get(mbt, "rows"), 1);
    T_NEAR(json_number_value(json_object_get(rm, "pred_forward_ms")), 4.0 / 3.0, 1e-9);
    T_NEAR(json_number_value(json_object_get(rm, "pred_backward_ms")), 2.25, 1e-9);
    T_CHECK(json_number_value(json_object_get(rm, "pred_step_ms")) > 10.525);
    json_decref(mbt);
    pr.batch = -1;
    pr.batch_forward_ns = pr.batch_backward_ns = -1;
    /* 2 replicas of the 2 stages on 4 ranks of the 4 CPUs: each stage then allreduces its
     * gradients with its replica (the allreduce fit at world 2: 0.1 ms + 1 ns a byte, 3000
     * and 1000 bytes) after its last backward: 10.525 + 0.103 and 9.275 + 0.101; each
     * replica's batch of 8 counts once */
    runs[1].npipes = 1;
    runs[1].world_size = runs[1].ranks_per_node = 4;
    json_object_set_new(runs[1].spec, "world_size", json_integer(4));
    json_object_set_new(runs[1].params, "world_size", json_integer(4));
    json_t *dp = results_build_with(&data, NULL, 0, fits, 2, &e);
    T_CHECK(dp != NULL);
    json_t *r4 = json_array_get(json_object_get(dp, "rows"), 1);
    T_EQ_INT(json_integer_value(json_object_get(r4, "world_size")), 4);
    T_NEAR(json_number_value(json_object_get(r4, "pred_step_ms")), 10.525 + 0.103, 1e-9);
    T_NEAR(json_number_value(json_object_get(r4, "pred_comm_exposed_ms")),
           0.5 + (0.103 + 0.101) / 2, 1e-9);
    T_EQ_STR(json_string_value(json_object_get(r4, "pred_fits")), "81,82");
    T_NEAR(json_number_value(json_object_get(r4, "pred_throughput")), 2 * 8 / 10.628e-3, 1e-6);
    /* 4 ranks, each stage busy with its replicas' exchange too (4.228 and 4.476 of 10.628
     * ms): one of the 3 others beside it with probability 1 - (1 - 0.41)^3 */
    pipeline_calibrated(&data, fits, &runs[1], (4.228 + 4.476) / 2 / 10.628);
    json_decref(dp);
    json_decref(t);
    json_decref(none);
    json_decref(tensors);
    json_decref(layers);
    json_decref(cuts);
    runs[0].grads = NULL;
    runs[1].pipes = NULL;
    runs_free(runs, 2);
    free(s1);
    free(sp);
}

/* Step rows of a run without a pipeline, as the database reads them (-1: none reported). */
static struct db_step_row *plain_steps(int repeats, int n, double step_ms, int samples)
{
    struct db_step_row *a = steps(repeats, n, step_ms, step_ms, samples);
    for (int i = 0; i < repeats * n; i++)
        a[i].bubble_ms = a[i].bubble_step_ms = a[i].p2p_ms = a[i].p2p_bytes = -1;
    return a;
}

/* A pipeline group (P = 2 stages, M = 4 micro-batches, 2 replicas: world size 4) beside its
 * one-rank base and a data-parallel group of the same world size: the pipeline's throughput
 * counts each replica's batch once (its 4 ranks report 4 x 16 samples a step, the global
 * batch is 2 x 16); its bubble fraction is every rank's idle time over their step time
 * (known: exactly 0.2), the theory (P-1)/(M+P-1) = 1/5, p2p per rank and step; its speed-up
 * base is the one-rank run although it is swept on another schedule; the data-parallel
 * group's figures are today's and its pipeline columns null; without a base that reported
 * readiness the model predicts nothing, and says so. Grouped by world size alone, the two
 * world-4 groups pool: no one theory. */
static void test_results_pipeline(void)
{
    struct err e;
    struct db_step_row *s1 = plain_steps(2, 4, 100.0, 16), *sp = steps(2, 4, 50.0, 45.0, 64),
                       *sd = plain_steps(2, 4, 50.0, 64);
    for (int i = 0; i < 8; i++) { /* each of the 4 ranks: 50 ms (55 in repeat 1) */
        sp[i].bubble_step_ms = 4 * sp[i].step_ms;
        sp[i].bubble_ms = 0.2 * sp[i].bubble_step_ms;
        sp[i].p2p_ms = 4 * 2.5;
        sp[i].p2p_ranks = 4;
        sp[i].p2p_bytes = 4 * 1024.0;
        sp[i].p2p_bytes_ranks = 4;
    }
    struct db_data_run runs[] = {run(1, NULL, 0, s1, 8, NULL, 0),
                                 run(4, NULL, 0, sp, 8, NULL, 0),
                                 run(4, NULL, 0, sd, 8, NULL, 0)};
    static const int pipe[] = {1, 2, 1}, micro[] = {1, 4, 1};
    static const char *const sched[] = {"1f1b", "gpipe", "1f1b"};
    for (int i = 0; i < 3; i++) {
        json_decref(runs[i].spec);
        json_decref(runs[i].params);
        runs[i].spec = json_pack("{s:i, s:s, s:i, s:i, s:i, s:s}", "world_size",
                                 runs[i].world_size, "strategy", "ddp", "batch_size", 16,
                                 "pipeline", pipe[i], "micro_batches", micro[i], "schedule",
                                 sched[i]);
        runs[i].params = json_pack("{s:i, s:i, s:i, s:s}", "world_size", runs[i].world_size,
                                   "pipeline", pipe[i], "micro_batches", micro[i], "schedule",
                                   sched[i]);
        runs[i].nodes = 1;
        runs[i].ranks_per_node = runs[i].world_size;
    }
    struct db_experiment_data data = {.id = 4, .workload = "train", .runs = runs, .nruns = 3};
    json_t *t = results_build(&data, NULL, 0, &e);
    T_CHECK_MSG(t != NULL, "%s", e.msg);
    json_t *rows = json_object_get(t, "rows");
    T_EQ_INT(json_array_size(rows), 3);
    json_t *one = json_array_get(rows, 0), *pp = json_array_get(rows, 1),
           *dp = json_array_get(rows, 2);
    T_EQ_INT(json_integer_value(json_object_get(pp, "pipeline")), 2);
    T_EQ_STR(json_string_value(json_object_get(pp, "schedule")), "gpipe");
    double t1 = (16 / 0.1 + 16 / 0.11) / 2;
    double tp = (32 / 0.05 + 32 / 0.055) / 2; /* 2 replicas x 16, not 4 ranks x 16 */
    double td = (64 / 0.05 + 64 / 0.055) / 2; /* data parallel: as ever */
    T_NEAR(json_real_value(json_object_get(one, "throughput_mean")), t1, 1e-9);
    T_NEAR(json_real_value(json_object_get(pp, "throughput_mean")), tp, 1e-9);
    T_NEAR(json_real_value(json_object_get(dp, "throughput_mean")), td, 1e-9);
    T_NEAR(json_real_value(json_object_get(pp, "speedup")), tp / t1, 1e-9);
    T_NEAR(json_real_value(json_object_get(pp, "efficiency")), tp / t1 / 4, 1e-9);
    T_NEAR(json_real_value(json_object_get(dp, "speedup")), td / t1, 1e-9);
    T_NEAR(json_real_value(json_object_get(pp, "bubble_fraction")), 0.2, 1e-12);
    T_NEAR(json_real_value(json_object_get(pp, "bubble_theory")), 1.0 / 5.0, 1e-15);
    T_NEAR(json_real_value(json_object_get(pp, "p2p_ms")), 2.5, 1e-12);
    T_NEAR(json_real_value(json_object_get(pp, "p2p_bytes")), 1024, 0);
    T_CHECK(strstr(json_string_value(json_object_get(pp, "pred_note")), "readiness") != NULL);
    T_CHECK(json_is_null(json_object_get(pp, "pred_bubble")));
    static const char *const cols[] = {"bubble_fraction", "bubble_theory", "p2p_ms",
                                       "p2p_bytes"};
    for (size_t k = 0; k < 4; k++) {
        T_CHECK_MSG(json_is_null(json_object_get(one, cols[k])), "%s", cols[k]);
        T_CHECK_MSG(json_is_null(json_object_get(dp, cols[k])), "%s", cols[k]);
    }
    /* the CSV has the columns too */
    size_t len;
    char *csv = results_csv(t, &len, &e);
    T_CHECK(csv && strstr(csv, ",bubble_fraction,bubble_theory,p2p_ms,p2p_bytes,") != NULL);
    free(csv);
    json_decref(t);
    /* grouped by world size alone: P 2 and P 1 pooled, no one theory; the measured
     * fraction is the pipeline's rows' */
    const char *by[] = {"world_size"};
    t = results_build(&data, by, 1, &e);
    T_CHECK_MSG(t != NULL, "%s", e.msg);
    json_t *four = json_array_get(json_object_get(t, "rows"), 1);
    T_EQ_INT(json_integer_value(json_object_get(four, "runs")), 2);
    T_CHECK(json_is_null(json_object_get(four, "bubble_theory")));
    T_NEAR(json_real_value(json_object_get(four, "bubble_fraction")), 0.2, 1e-12);
    json_decref(t);
    runs_free(runs, 3);
    free(s1);
    free(sp);
    free(sd);
}

/* The data pipeline's columns: a group whose data wait (1 ms of 10) is at least 5 % of its
 * step is input-bound, one whose wait is 1 ms of 100 is not; the loader's CPU time is per
 * rank and step, the read rate pooled bytes over pooled step time; a group whose steps
 * report neither (a framework engine's) has them null, and its data_fraction still comes
 * from its data phase. */
static void test_results_data_pipeline(void)
{
    struct err e;
    struct db_step_row *fast = steps(2, 4, 10.0, 10.0, 16),
                       *slow = plain_steps(2, 4, 100.0, 16);
    for (int i = 0; i < 8; i++) {
        fast[i].loader_cpu_ms = 2 * 3.0; /* two ranks, 3 ms each */
        fast[i].loader_ranks = 2;
        fast[i].read_bytes = 2 * 1e6;
        fast[i].read_ranks = 2;
        slow[i].loader_cpu_ms = slow[i].read_bytes = -1;
    }
    struct db_data_run runs[] = {run(2, NULL, 0, fast, 8, NULL, 0),
                                 run(2, NULL, 0, slow, 8, NULL, 0)};
    for (int i = 0; i < 2; i++) {
        json_decref(runs[i].params);
        json_decref(runs[i].spec);
        runs[i].params = json_pack("{s:b}", "loader_only", i == 0);
        runs[i].spec = json_pack("{s:i, s:b}", "world_size", 2, "loader_only", i == 0);
        runs[i].nodes = 1;
        runs[i].ranks_per_node = 2;
    }
    struct db_experiment_data data = {.id = 5, .workload = "train", .runs = runs, .nruns = 2};
    const char *by[] = {"loader_only"};
    json_t *t = results_build(&data, by, 1, &e);
    T_CHECK_MSG(t != NULL, "%s", e.msg);
    json_t *rows = json_object_get(t, "rows");
    T_EQ_INT(json_array_size(rows), 2);
    json_t *a = json_array_get(rows, 0), *b = json_array_get(rows, 1);
    if (json_is_true(json_object_get(b, "loader_only"))) {
        json_t *x = a;
        a = b;
        b = x;
    }
    /* 8 steps of 1 ms data over 4 x 10 + 4 x 11 ms */
    T_NEAR(json_real_value(json_object_get(a, "data_fraction")), 8.0 / 84.0, 1e-12);
    T_CHECK(json_is_true(json_object_get(a, "input_bound")));
    T_NEAR(json_real_value(json_object_get(a, "loader_cpu_ms")), 3.0, 1e-12);
    /* each rank read 1 MB a step: 8 MB over 0.084 s of its steps */
    T_NEAR(json_real_value(json_object_get(a, "read_mbps")), 8.0 / 0.084, 1e-9);
    T_NEAR(json_real_value(json_object_get(b, "data_fraction")), 8.0 / 840.0, 1e-12);
    T_CHECK(json_is_false(json_object_get(b, "input_bound")));
    T_CHECK(json_is_null(json_object_get(b, "loader_cpu_ms")));
    T_CHECK(json_is_null(json_object_get(b, "read_mbps")));
    size_t len;
    char *csv = results_csv(t, &len, &e);
    T_CHECK(csv && strstr(csv, ",data_fraction,input_bound,loader_cpu_ms,read_mbps,") != NULL);
    free(csv);
    json_decref(t);
    runs_free(runs, 2);
    free(fast);
    free(slow);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_results_collectives);
    TEST_RUN(test_results_training);
    TEST_RUN(test_results_per_class);
    TEST_RUN(test_results_predictions);
    TEST_RUN(test_results_pipeline);
    TEST_RUN(test_results_pipeline_predicted);
    TEST_RUN(test_results_one_repeat_nulls);
    TEST_RUN(test_results_no_rows_header);
    TEST_RUN(test_results_columns_from_table);
    TEST_RUN(test_results_csv_quoting);
    TEST_RUN(test_results_emulated_apart);
    TEST_RUN(test_results_single_process_apart);
    TEST_RUN(test_results_oversubscribed_apart);
    TEST_RUN(test_results_network_profile_apart);
    TEST_RUN(test_results_memory_and_usage);
    TEST_RUN(test_results_time_to_accuracy);
    TEST_RUN(test_results_elastic);
    TEST_RUN(test_results_data_pipeline);
    return test_end();
}
