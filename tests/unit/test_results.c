/* Unit tests for daemon/results: the statistics (median, nearest-rank p95, Student-t
 * interval), grouping and per-size rows of collectives, the training metrics (step time
 * = slowest rank, throughput per repeat, speed-up and efficiency against the world_size 1
 * group, overlap, straggler spread, final accuracy), and CSV quoting. Inputs are built
 * by hand in the shape db_get_experiment_data returns, so every expected value is known. */
#include <math.h>
#include <stdbool.h>

#include "daemon/results.h"
#include "tests/unit/test.h"

static void test_stats_summarize(void)
{
    double v[] = {5, 1, 4, 2, 3};
    struct stats_summary s;
    stats_summarize(v, 5, &s);
    T_EQ_INT(s.n, 5);
    T_NEAR(s.mean, 3.0, 1e-12);
    T_NEAR(s.median, 3.0, 1e-12);
    T_NEAR(s.p95, 5.0, 1e-12); /* nearest rank: ceil(0.95*5) = 5th */
    T_NEAR(s.min, 1.0, 1e-12);
    T_NEAR(s.max, 5.0, 1e-12);
    /* sd = sqrt(2.5); t(4) = 2.776 */
    T_NEAR(s.ci95, 2.776 * sqrt(2.5) / sqrt(5.0), 1e-9);
    double w[] = {1, 2, 3, 4};
    stats_summarize(w, 4, &s);
    T_NEAR(s.median, 2.5, 1e-12);
    double one[] = {7};
    stats_summarize(one, 1, &s);
    T_NEAR(s.ci95, 0.0, 0);
    T_NEAR(s.p95, 7.0, 0);
    stats_summarize(NULL, 0, &s);
    T_EQ_INT(s.n, 0);
    T_NEAR(stats_t95(1), 12.706, 1e-9);
    T_NEAR(stats_t95(1000), 1.96, 1e-9);
}

static json_t *coll(int repeat, int64_t bytes, double busbw)
{
    return json_pack("{s:i, s:s, s:s, s:s, s:b, s:I, s:s, s:f, s:f, s:f, s:i}", "repeat", repeat,
                     "op", "allreduce", "dtype", "float32", "redop", "sum", "inplace", 0,
                     "bytes", (json_int_t)bytes, "algorithm", "ring", "busbw_gbs", busbw,
                     "algbw_gbs", busbw / 2, "time_us_median", 10.0, "wrong", 0);
}

static json_t *run(int world, json_t *collectives, json_t *steps, json_t *epochs)
{
    return json_pack("{s:i, s:{s:i}, s:{s:i, s:s}, s:o, s:o, s:o}", "world_size", world,
                     "params", "world_size", world, "spec", "world_size", world, "op",
                     "allreduce", "collectives", collectives, "steps",
                     steps ? steps : json_array(), "epochs", epochs ? epochs : json_array());
}

static void test_results_collectives(void)
{
    struct err e;
    json_t *data = json_pack(
        "{s:i, s:s, s:[o, o]}", "id", 9, "workload", "collective", "runs",
        run(1, json_pack("[o, o, o, o]", coll(0, 1024, 0), coll(0, 4096, 0), coll(1, 1024, 0),
                         coll(1, 4096, 0)), NULL, NULL),
        run(2, json_pack("[o, o, o, o]", coll(0, 1024, 1.0), coll(0, 4096, 2.0),
                         coll(1, 1024, 3.0), coll(1, 4096, 4.0)), NULL, NULL));
    json_t *t = results_build(data, NULL, 0, &e);
    T_CHECK(t != NULL);
    json_t *rows = json_object_get(t, "rows");
    T_EQ_INT(json_array_size(rows), 4); /* 2 world sizes x 2 sizes */
    json_t *r = json_array_get(rows, 2);  /* world_size 2, 1024 bytes */
    T_EQ_INT(json_integer_value(json_object_get(r, "world_size")), 2);
    T_EQ_INT(json_integer_value(json_object_get(r, "bytes")), 1024);
    T_NEAR(json_real_value(json_object_get(r, "busbw_gbs_mean")), 2.0, 1e-12);
    T_EQ_INT(json_integer_value(json_object_get(r, "busbw_gbs_n")), 2);
    T_NEAR(json_real_value(json_object_get(r, "busbw_gbs_ci95")),
           12.706 * sqrt(2.0) / sqrt(2.0), 1e-9);
    T_EQ_STR(json_string_value(json_object_get(r, "algorithm")), "ring");
    json_t *cols = json_object_get(t, "columns");
    T_EQ_STR(json_string_value(json_array_get(cols, 0)), "world_size");
    size_t ncols = json_array_size(cols);
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) T_EQ_INT(json_object_size(row), ncols);
    json_decref(t);
    /* pooled over world sizes when grouped by op */
    const char *by[] = {"op"};
    t = results_build(data, by, 1, &e);
    T_EQ_INT(json_array_size(json_object_get(t, "rows")), 2);
    T_EQ_INT(json_integer_value(json_object_get(json_array_get(json_object_get(t, "rows"), 0),
                                                "busbw_gbs_n")), 4);
    json_decref(t);
    const char *bad[] = {"nope"};
    T_CHECK(results_build(data, bad, 1, &e) == NULL);
    T_EQ_STR(e.field, "group_by");
    json_decref(data);
}

/* steps of one run: n steps per repeat, step_ms given, samples per step */
static json_t *steps(int repeats, int n, double step_ms, double fastest_ms, int samples)
{
    json_t *a = json_array();
    for (int r = 0; r < repeats; r++)
        for (int s = 0; s < n; s++)
            json_array_append_new(a, json_pack(
                "{s:i, s:i, s:f, s:f, s:i, s:f, s:f, s:f, s:f, s:f, s:f}", "repeat", r, "step",
                s, "step_ms", step_ms * (1 + 0.1 * r), "fastest_ms", fastest_ms, "samples",
                samples, "data_ms", 1.0, "forward_ms", 2.0, "backward_ms", 3.0, "comm_ms", 4.0,
                "comm_exposed_ms", 1.0, "optimizer_ms", 0.5));
    return a;
}

static void test_results_training(void)
{
    struct err e;
    json_t *ep = json_pack("[{s:i, s:i, s:f, s:f}, {s:i, s:i, s:f, s:f}]", "repeat", 0, "epoch", 0,
                           "test_acc", 0.5, "train_loss", 1.0, "repeat", 0, "epoch", 1,
                           "test_acc", 0.8, "train_loss", 0.4);
    json_t *data = json_pack("{s:i, s:s, s:[o, o]}", "id", 3, "workload", "train", "runs",
                             run(1, json_array(), steps(2, 4, 100.0, 100.0, 32), ep),
                             run(4, json_array(), steps(2, 4, 125.0, 100.0, 128), NULL));
    json_t *t = results_build(data, NULL, 0, &e);
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
    T_CHECK(json_real_value(json_object_get(four, "speedup_ci95")) > 0);
    T_NEAR(json_real_value(json_object_get(four, "overlap")), 0.75, 1e-12); /* 1 - 1/4 */
    T_NEAR(json_real_value(json_object_get(four, "straggler_ms")), (25.0 + 37.5) / 2, 1e-9);
    T_NEAR(json_real_value(json_object_get(four, "backward_ms")), 3.0, 1e-12);
    T_EQ_INT(json_integer_value(json_object_get(four, "step_ms_n")), 8);
    T_NEAR(json_real_value(json_object_get(one, "test_acc_mean")), 0.8, 1e-12); /* last epoch */
    T_CHECK(json_is_null(json_object_get(four, "test_acc_mean")));
    json_decref(t);
    json_decref(data);
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

/* Runs whose ranks shared one GPU (emulated) are never pooled with real ones, whatever
 * the grouping, and every table says which rows are which. */
static void test_results_emulated_apart(void)
{
    struct err e;
    json_t *real = run(2, json_pack("[o]", coll(0, 1024, 8.0)), NULL, NULL);
    json_t *emu = run(2, json_pack("[o]", coll(0, 1024, 2.0)), NULL, NULL);
    json_object_set_new(emu, "emulated", json_true());
    json_object_set_new(real, "emulated", json_false());
    json_t *data = json_pack("{s:i, s:s, s:[o, o]}", "id", 3, "workload", "collective", "runs",
                             real, emu);
    const char *by[] = {"op"};
    json_t *t = results_build(data, by, 1, &e);
    T_CHECK(t != NULL);
    json_t *rows = json_object_get(t, "rows");
    T_EQ_INT(json_array_size(rows), 2); /* same op and size: split by emulated only */
    for (size_t i = 0; i < 2; i++) {
        json_t *r = json_array_get(rows, i);
        bool emulated = json_is_true(json_object_get(r, "emulated"));
        T_CHECK(json_is_boolean(json_object_get(r, "emulated")));
        T_NEAR(json_real_value(json_object_get(r, "busbw_gbs_mean")), emulated ? 2.0 : 8.0,
               1e-12);
        T_EQ_INT(json_integer_value(json_object_get(r, "busbw_gbs_n")), 1);
    }
    T_CHECK(json_is_true(json_object_get(json_array_get(rows, 1), "emulated")));
    /* a column of the table, after the group_by fields; group_by is what was asked */
    json_t *cols = json_object_get(t, "columns");
    T_EQ_STR(json_string_value(json_array_get(cols, 0)), "op");
    T_EQ_STR(json_string_value(json_array_get(cols, 1)), "emulated");
    T_EQ_INT(json_array_size(json_object_get(t, "group_by")), 1);
    json_decref(t);
    json_decref(data);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_stats_summarize);
    TEST_RUN(test_results_collectives);
    TEST_RUN(test_results_training);
    TEST_RUN(test_results_csv_quoting);
    TEST_RUN(test_results_emulated_apart);
    return test_end();
}
