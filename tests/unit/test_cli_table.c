/* Unit tests for cli/table (column widths and alignment, no trailing spaces, UTF-8 widths,
 * control characters removed, cutting at a max width, dropping empty columns, number
 * formats) and cli/view (result tables of both workloads, compare, the experiment list,
 * an experiment and a run), all output ASCII. */
#include "cli/table.h"
#include "cli/view.h"
#include "tests/unit/test.h"

static char *render(struct table *t, struct buf *b)
{
    buf_reset(b);
    if (table_render(t, b) < 0 || buf_append(b, "", 1) < 0)
        return NULL;
    return (char *)b->data;
}

static void test_table_layout(void)
{
    struct table t;
    struct buf b;
    buf_init(&b);
    table_init(&t);
    T_EQ_INT(table_add_col(&t, "id", TABLE_RIGHT, 0, false), 0);
    T_EQ_INT(table_add_col(&t, "name", TABLE_LEFT, 0, false), 1);
    T_EQ_INT(table_add_col(&t, "status", TABLE_LEFT, 0, false), 2);
    T_EQ_INT(table_add_row(&t), 0);
    table_set(&t, 0, "1");
    table_set(&t, 1, "alpha");
    table_set(&t, 2, "ok");
    T_EQ_INT(table_add_row(&t), 0);
    table_setf(&t, 0, "%d", 12);
    table_set(&t, 1, "b");
    table_set(&t, 2, "failed");
    T_CHECK(table_add_col(&t, "late", TABLE_LEFT, 0, false) < 0); /* columns come first */
    T_EQ_STR(render(&t, &b), "id  name   status\n"
                             "--  -----  ------\n"
                             " 1  alpha  ok\n"
                             "12  b      failed\n");
    t.bare = true;
    T_EQ_STR(render(&t, &b), " 1  alpha  ok\n12  b      failed\n");
    table_free(&t);
    buf_free(&b);
}

static void test_table_cells_cleaned_cut_dropped(void)
{
    struct table t;
    struct buf b;
    buf_init(&b);
    table_init(&t);
    table_add_col(&t, "name", TABLE_LEFT, 8, false);
    table_add_col(&t, "empty", TABLE_RIGHT, 0, true);
    table_add_col(&t, "n", TABLE_RIGHT, 0, false);
    table_add_row(&t);
    table_set(&t, 0, "r\xc3\xa9sum\xc3\xa9"); /* "resume" with two e-acute: 6 wide */
    table_set(&t, 1, "-");
    table_set(&t, 2, "1");
    table_add_row(&t);
    table_set(&t, 0, "evil\x1b[31mred"); /* an escape sequence from a spec name */
    table_set(&t, 2, "22");
    table_add_row(&t);
    table_set(&t, 0, "a-very-long-name-indeed");
    table_set(&t, 2, "333");
    T_EQ_STR(render(&t, &b), "name        n\n"
                             "--------  ---\n"
                             "r\xc3\xa9sum\xc3\xa9      1\n"
                             "evil?...   22\n"
                             "a-ver...  333\n");
    T_EQ_INT(table_width("r\xc3\xa9sum\xc3\xa9"), 6);
    table_free(&t);
    buf_free(&b);
}

static void test_fmt_numbers(void)
{
    char s[64];
    struct {
        double v;
        const char *want;
    } nums[] = {
        {0, "0"},          {1234.6, "1235"},        {1234.4, "1234"}, {98765.4, "98765"},
        {12.345, "12.35"}, {1.5, "1.500"},          {0.5, "0.5000"},  {0.01234, "0.01234"},
        {-3.25, "-3.250"}, {0.00001234, "1.2e-05"}, {NAN, "-"},       {INFINITY, "-"}};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        table_fmt_num(nums[i].v, s, sizeof s);
        T_CHECK_MSG(strcmp(s, nums[i].want) == 0, "%g -> '%s', want '%s'", nums[i].v, s,
                    nums[i].want);
    }
    table_fmt_mean_ci(12.345, 0.2134, s, sizeof s);
    T_EQ_STR(s, "12.35 +- 0.21");
    table_fmt_mean_ci(1234.0, 56.7, s, sizeof s);
    T_EQ_STR(s, "1234 +- 57");
    table_fmt_mean_ci(3.0, NAN, s, sizeof s);
    T_EQ_STR(s, "3.000");
    table_fmt_bytes(512, s, sizeof s);
    T_EQ_STR(s, "512");
    table_fmt_bytes(4096, s, sizeof s);
    T_EQ_STR(s, "4K");
    table_fmt_bytes(64 << 20, s, sizeof s);
    T_EQ_STR(s, "64M");
    table_fmt_bytes(1536 << 10, s, sizeof s);
    T_EQ_STR(s, "1.5M");
    table_fmt_bytes((int64_t)2 << 30, s, sizeof s);
    T_EQ_STR(s, "2G");
    table_fmt_duration(0.85, s, sizeof s);
    T_EQ_STR(s, "850ms");
    table_fmt_duration(12.34, s, sizeof s);
    T_EQ_STR(s, "12.3s");
    table_fmt_duration(303, s, sizeof s);
    T_EQ_STR(s, "5m03s");
    table_fmt_duration(7440, s, sizeof s);
    T_EQ_STR(s, "2h04m");
    table_fmt_duration(NAN, s, sizeof s);
    T_EQ_STR(s, "-");
    table_fmt_pct(0.9534, s, sizeof s);
    T_EQ_STR(s, "95.3%");
    table_fmt_time("2026-11-22T10:04:05.123Z", s, sizeof s);
    T_EQ_STR(s, "2026-11-22 10:04:05");
    table_fmt_time(NULL, s, sizeof s);
    T_EQ_STR(s, "-");
}

/* --- views ------------------------------------------------------------------------------ */

static json_t *coll_row(int ws, int bytes, const char *algo, double busbw, double ci)
{
    return json_pack("{s:i, s:s, s:s, s:s, s:b, s:i, s:s, s:f, s:f, s:i, s:f, s:f, s:f, s:i}",
                     "world_size", ws, "op", "allreduce", "dtype", "float32", "redop", "sum",
                     "inplace", 0, "bytes", bytes, "algorithm", algo, "busbw_gbs_mean", busbw,
                     "busbw_gbs_ci95", ci, "busbw_gbs_n", 3, "algbw_gbs_mean", busbw / 2,
                     "time_us_median", 40.0, "time_us_p95", 44.5, "wrong", 0);
}

static json_t *coll_table(int id, json_t *rows)
{
    return json_pack("{s:i, s:s, s:[s], s:[s,s,s,s,s,s,s,s,s,s,s,s,s,s], s:o}", "experiment",
                     id, "workload", "collective", "group_by", "world_size", "columns",
                     "world_size", "op", "dtype", "redop", "inplace", "bytes", "algorithm",
                     "busbw_gbs_mean", "busbw_gbs_ci95", "busbw_gbs_n", "algbw_gbs_mean",
                     "time_us_median", "time_us_p95", "wrong", "rows", rows);
}

static bool ascii_only(const struct buf *b)
{
    for (size_t i = 0; i < b->len; i++)
        if (b->data[i] >= 0x80 || (b->data[i] < 0x20 && b->data[i] != '\n'))
            return false;
    return true;
}

static const char *text(struct buf *b)
{
    buf_append(b, "", 1);
    b->len--;
    return (const char *)b->data;
}

static void test_view_collective_results(void)
{
    json_t *t = coll_table(5, json_pack("[o,o,o]", coll_row(2, 4096, "ring", 1.2345, 0.0512),
                                        coll_row(2, 65536, "ring", 4.5, 0.25),
                                        coll_row(2, 1 << 20, "ring", 9.87, 0.1)));
    struct buf b;
    buf_init(&b);
    T_EQ_INT(view_results(t, &b), 0);
    const char *s = text(&b);
    /* constant descriptive columns become one line above the table */
    T_CHECK_MSG(strncmp(s,
                        "op=allreduce  dtype=float32  redop=sum  inplace=false  "
                        "algorithm=ring\n",
                        70) == 0,
                "%s", s);
    /* headings from common/columns.h: label, statistic, unit (in ASCII: us for µs) */
    T_CHECK_MSG(strstr(s, "world_size  message size      busbw GB/s  n  algbw GB/s  "
                          "time median us  time p95 us  wrong"),
                "%s", s);
    T_CHECK_MSG(strstr(s, "         2            4K  1.234 +- 0.051  3      0.6172") != NULL,
                "%s", s);
    T_CHECK_MSG(strstr(s, "64K") && strstr(s, "1M") && strstr(s, "9.870 +- 0.100"), "%s", s);
    T_CHECK_MSG(strstr(s, "time median us") && strstr(s, "44.50"), "%s", s);
    T_CHECK(strstr(s, "algorithm  ") == NULL); /* not a column */
    T_CHECK(ascii_only(&b));
    for (const char *p = s; *p; p++) /* no trailing spaces */
        T_CHECK(!(p[0] == ' ' && p[1] == '\n'));
    buf_free(&b);
    json_decref(t);
    json_t *empty = coll_table(6, json_array());
    buf_init(&b);
    T_EQ_INT(view_results(empty, &b), 0);
    T_EQ_STR(text(&b), "(no results yet)\n");
    buf_free(&b);
    json_decref(empty);
}

static json_t *train_row(int ws, double thr, double ci, double speedup, double eff)
{
    return json_pack("{s:i, s:i, s:f, s:f, s:i, s:f, s:f, s:f, s:f, s:n, s:f}", "world_size",
                     ws, "runs", 1, "throughput_mean", thr, "throughput_ci95", ci,
                     "throughput_n", 3, "step_ms_median", 12.5, "speedup", speedup,
                     "speedup_ci95", 0.05, "efficiency", eff, "test_acc_mean", "overlap", 0.42);
}

static void test_view_training_results(void)
{
    json_t *t = json_pack("{s:i, s:s, s:[s], s:[s,s,s,s,s,s,s,s,s,s,s], s:[o,o]}", "experiment",
                          9, "workload", "train", "group_by", "world_size", "columns",
                          "world_size", "runs", "throughput_mean", "throughput_ci95",
                          "throughput_n", "step_ms_median", "speedup", "speedup_ci95",
                          "efficiency", "test_acc_mean", "overlap", "rows",
                          train_row(1, 1000, 10, 1.0, 1.0), train_row(2, 1900, 20, 1.9, 0.95));
    struct buf b;
    buf_init(&b);
    T_EQ_INT(view_results(t, &b), 0);
    const char *s = text(&b);
    T_CHECK_MSG(strstr(s, "throughput samples/s") && strstr(s, "step median ms") &&
                    strstr(s, "speed-up") && strstr(s, "efficiency"),
                "%s", s);
    T_CHECK_MSG(strstr(s, "1900 +- 20") && strstr(s, "1.900 +- 0.050") && strstr(s, "95.0%"),
                "%s", s);
    T_CHECK_MSG(strstr(s, "test acc") == NULL, "%s", s); /* all null: dropped */
    T_CHECK_MSG(strstr(s, "42.0%") != NULL, "%s", s);
    T_CHECK_MSG(strstr(s, "bubble") == NULL, "%s", s); /* no pipeline: no column */
    T_CHECK(ascii_only(&b));
    buf_free(&b);
    json_decref(t);
    /* a pipeline's rows: its bubble measured and in theory, its p2p time; a row without a
     * pipeline shows "-" there */
    json_t *p = train_row(4, 3000, 30, 3.0, 0.75), *d = train_row(4, 3500, 30, 3.5, 0.875);
    json_object_set_new(p, "pipeline", json_integer(2));
    json_object_set_new(p, "bubble_fraction", json_real(0.2345));
    json_object_set_new(p, "bubble_theory", json_real(0.2));
    json_object_set_new(p, "p2p_ms", json_real(1.5));
    json_object_set_new(d, "pipeline", json_integer(1));
    json_object_set_new(d, "bubble_fraction", json_null());
    json_object_set_new(d, "bubble_theory", json_null());
    json_object_set_new(d, "p2p_ms", json_null());
    t = json_pack("{s:i, s:s, s:[s], s:[s,s,s,s,s,s,s,s,s,s,s,s,s,s], s:[o,o]}", "experiment",
                  10, "workload", "train", "group_by", "pipeline", "columns", "world_size",
                  "pipeline", "runs", "throughput_mean", "throughput_ci95", "throughput_n",
                  "step_ms_median", "overlap", "bubble_fraction", "bubble_theory", "p2p_ms",
                  "speedup", "speedup_ci95", "efficiency", "rows", p, d);
    buf_init(&b);
    T_EQ_INT(view_results(t, &b), 0);
    s = text(&b);
    T_CHECK_MSG(strstr(s, "pipeline") && strstr(s, "bubble  bubble (theory)  p2p ms"), "%s", s);
    T_CHECK_MSG(strstr(s, "23.4%") && strstr(s, "20.0%") && strstr(s, "1.500"), "%s", s);
    buf_free(&b);
    json_decref(t);
}

static void test_view_compare(void)
{
    json_t *a = coll_table(3, json_pack("[o,o]", coll_row(2, 4096, "ring", 1.0, 0.1),
                                        coll_row(2, 65536, "ring", 2.0, 0.1)));
    json_t *b2 = coll_table(4, json_pack("[o,o]", coll_row(2, 4096, "tree", 2.0, 0.1),
                                         coll_row(2, 65536, "tree", 3.0, 0.1)));
    struct view_src src[] = {{3, a, NULL}, {4, b2, NULL}};
    struct buf b;
    buf_init(&b);
    struct err e = {0};
    T_OK(view_compare(src, 2, &b, &e));
    const char *s = text(&b);
    T_CHECK_MSG(
        strstr(s, "exp  world_size  algorithm  message size      busbw GB/s  n  vs #3\n"), "%s",
        s);
    T_CHECK_MSG(strstr(s, "vs #3") != NULL, "%s", s);
    /* rows of the same point next to each other, ratios against experiment 3 */
    const char *r1 = strstr(s, "  3           2  ring                 4K");
    const char *r2 = strstr(s, "  4           2  tree                 4K");
    const char *r3 = strstr(s, "  3           2  ring                64K");
    const char *r4 = strstr(s, "  4           2  tree                64K");
    T_CHECK_MSG(r1 && r2 && r3 && r4 && r1 < r2 && r2 < r3 && r3 < r4, "%s", s);
    T_CHECK_MSG(strstr(r2, "2.00x") && strstr(r4, "1.50x") && strstr(r1, "1.00x"), "%s", s);
    T_CHECK(strstr(s, "median us") == NULL); /* compare keeps to the headline metrics */
    T_CHECK(ascii_only(&b));
    buf_free(&b);
    /* an unswept experiment: its world size comes from its spec, and it matches */
    json_t *row = coll_row(2, 65536, "ring", 4.0, 0.1);
    json_object_del(row, "world_size");
    json_t *c = json_pack("{s:i, s:s, s:[], s:[s,s,s], s:[o]}", "experiment", 6, "workload",
                          "collective", "group_by", "columns", "op", "bytes", "busbw_gbs_mean",
                          "rows", row);
    json_t *spec = json_pack("{s:i}", "world_size", 2);
    struct view_src single[] = {{3, a, NULL}, {6, c, spec}};
    buf_init(&b);
    T_OK(view_compare(single, 2, &b, &e));
    s = text(&b);
    T_CHECK_MSG(strstr(s, "  3           2           64K  2.000 +- 0.100  3  1.00x\n"
                          "  6           2           64K  4.000 +- 0.100  3  2.00x\n"),
                "%s", s);
    buf_free(&b);
    json_decref(c);
    json_decref(spec);
    json_t *t = json_pack("{s:i, s:s, s:[], s:[], s:[]}", "experiment", 5, "workload", "train",
                          "group_by", "columns", "rows");
    struct view_src mixed[] = {{3, a, NULL}, {5, t, NULL}};
    buf_init(&b);
    T_CHECK(view_compare(mixed, 2, &b, &e) < 0);
    T_EQ_INT(e.code, ERR_INVALID);
    T_CHECK(strstr(e.msg, "collective") && strstr(e.msg, "train"));
    buf_free(&b);
    json_decref(t);
    json_decref(a);
    json_decref(b2);
}

static void test_view_experiment_list(void)
{
    json_t *page = json_pack(
        "{s:[{s:i, s:s, s:s, s:s, s:i, s:i, s:s, s:f}, {s:i, s:s, s:s, s:s, s:i, s:i, s:s, "
        "s:n}],"
        " s:i, s:i, s:i}",
        "items", "id", 12, "name", "allreduce-2", "workload", "collective", "status",
        "succeeded", "n_runs", 3, "runs_finished", 3, "created_at", "2026-11-22T10:04:05.123Z",
        "duration_s", 12.34, "id", 11, "name", "train-r18", "workload", "train", "status",
        "running", "n_runs", 4, "runs_finished", 1, "created_at", "2026-11-22T09:00:00Z",
        "duration_s", "total", 5, "limit", 2, "offset", 0);
    struct buf b;
    buf_init(&b);
    T_EQ_INT(view_experiments(page, &b), 0);
    const char *s = text(&b);
    T_CHECK_MSG(strstr(s, "id  name         workload    status     runs  created              "
                          "duration\n") != NULL,
                "%s", s);
    T_CHECK_MSG(strstr(s, "12  allreduce-2  collective  succeeded   3/3  2026-11-22 10:04:05  "
                          "   12.3s\n") != NULL,
                "%s", s);
    T_CHECK_MSG(strstr(s, "1/4") && strstr(s, "1-2 of 5 (--offset 2 for more)"), "%s", s);
    buf_free(&b);
    json_decref(page);
}

static void test_view_experiment_and_run(void)
{
    json_t *exp = json_pack(
        "{s:i, s:s, s:s, s:s, s:i, s:i, s:s, s:n, s:n, s:{s:{s:[i,i]}},"
        " s:[{s:i, s:i, s:{s:i}, s:i, s:s, s:f, s:f, s:n},"
        "    {s:i, s:i, s:{s:i}, s:i, s:s, s:f, s:n, s:s}]}",
        "id", 7, "name", "two", "workload", "collective", "status", "failed", "n_runs", 2,
        "runs_finished", 2, "created_at", "2026-01-02T03:04:05Z", "started_at", "duration_s",
        "spec", "sweep", "world_size", 1, 2, "runs", "id", 20, "point", 0, "params",
        "world_size", 1, "world_size", 1, "status", "succeeded", "progress", 1.0, "duration_s",
        1.5, "error", "id", 21, "point", 1, "params", "world_size", 2, "world_size", 2,
        "status", "failed", "progress", 0.5, "duration_s", "error", "rank 1: peer closed");
    struct buf b;
    buf_init(&b);
    T_EQ_INT(view_experiment(exp, &b), 0);
    const char *s = text(&b);
    T_CHECK_MSG(strncmp(s, "experiment 7\n", 13) == 0, "%s", s);
    T_CHECK_MSG(strstr(s, "status    failed") && strstr(s, "2 of 2 finished"), "%s", s);
    T_CHECK_MSG(strstr(s, "sweep     {\"world_size\":[1,2]}"), "%s", s);
    T_CHECK_MSG(strstr(s, "21      1  world_size=2      2  failed        50.0%"), "%s", s);
    T_CHECK_MSG(strstr(s, "run 21 failed: rank 1: peer closed\n"), "%s", s);
    buf_free(&b);
    json_decref(exp);

    json_t *run = json_pack(
        "{s:i, s:i, s:i, s:{}, s:i, s:s, s:f, s:n,"
        " s:[{s:i, s:s, s:i, s:s}, {s:i, s:s, s:i, s:s}],"
        " s:[{s:i, s:{s:s, s:s}}, {s:i, s:{s:s, s:s}}],"
        " s:[{s:i, s:s, s:s, s:s, s:I, s:i, s:f, s:f, s:f, s:f, s:i}], s:[]}",
        "id", 21, "experiment_id", 7, "point", 1, "params", "world_size", 2, "status",
        "succeeded", "duration_s", 2.5, "error", "ranks", "rank", 0, "node", "n0", "pid", 100,
        "status", "done", "rank", 1, "node", "n0", "pid", 101, "status", "done", "env", "rank",
        0, "env", "compiler", "gcc 12", "hostname", "h0", "rank", 1, "env", "compiler",
        "gcc 12", "hostname", "h1", "collectives", "repeat", 0, "op", "allreduce", "dtype",
        "float32", "algorithm", "ring", "bytes", (json_int_t)1 << 20, "iters", 20,
        "time_us_median", 512.25, "time_us_p95", 600.0, "algbw_gbs", 2.047, "busbw_gbs", 2.047,
        "wrong", 0, "epochs");
    buf_init(&b);
    T_EQ_INT(view_run(run, &b), 0);
    s = text(&b);
    T_CHECK_MSG(strstr(s, "run 21  experiment 7  point 1  status succeeded  ranks 2  nodes 1  "
                          "duration 2.5s\nparams: -\n"),
                "%s", s);
    T_CHECK_MSG(strstr(s, "rank  node  pid  status\n") && strstr(s, "   1  n0    101  done\n"),
                "%s", s);
    T_CHECK_MSG(strstr(s, "compiler     gcc 12") && strstr(s, "rank 1       hostname=h1"), "%s",
                s);
    T_CHECK_MSG(strstr(s, "1M") && strstr(s, "512.2") && strstr(s, "2.047"), "%s", s);
    T_CHECK_MSG(!strstr(s, "injected"), "no faults, no faults table: %s", s);
    T_CHECK(ascii_only(&b));
    buf_free(&b);
    /* its injected faults (issue 32): one injected, one the run ended before */
    json_object_set_new(run, "faults",
                        json_pack("[{s:i, s:s, s:i, s:n, s:i, s:f, s:b, s:i, s:f, s:n},"
                                  " {s:i, s:s, s:i, s:n, s:i, s:n, s:b, s:n, s:n, s:s}]",
                                  "fault", 0, "kind", "stop", "rank", 1, "node", "at_step", 50,
                                  "duration_s", 2.0, "injected", 1, "step", 51, "run_s", 1.25,
                                  "note", "fault", 1, "kind", "kill", "rank", 0, "node",
                                  "at_step", 900, "duration_s", "injected", 0, "step", "run_s",
                                  "note", "not injected: the run ended first"));
    buf_init(&b);
    T_EQ_INT(view_run(run, &b), 0);
    s = text(&b);
    T_CHECK_MSG(strstr(s, "fault  kind  rank  at step  for s  injected  step  run s  note"),
                "%s", s);
    T_CHECK_MSG(strstr(s, "stop") && strstr(s, "true") &&
                    strstr(s, "not injected: the run ended first"),
                "%s", s);
    T_CHECK_MSG(!strstr(s, "lost steps"), "not elastic, no generations table: %s", s);
    buf_free(&b);
    /* an elastic run's generations (issue 32): the launch's, then the survivors' */
    json_object_set_new(run, "generations",
                        json_pack("[{s:i, s:i, s:[i,i], s:[], s:s, s:n, s:n, s:n},"
                                  " {s:i, s:i, s:[i], s:[], s:s, s:f, s:i, s:i}]",
                                  "gen", 0, "world", 2, "members", 0, 1, "joiners", "reason",
                                  "launch", "regroup_ms", "commit_step", "lost_steps", "gen", 1,
                                  "world", 1, "members", 0, "joiners", "reason", "rank 1 lost",
                                  "regroup_ms", 5.25, "commit_step", 80, "lost_steps", 3));
    buf_init(&b);
    T_EQ_INT(view_run(run, &b), 0);
    s = text(&b);
    T_CHECK_MSG(strstr(s, "gen  world  members  joiners  reason"), "%s", s);
    T_CHECK_MSG(strstr(s, "[0,1]") && strstr(s, "rank 1 lost") && strstr(s, "5.25") &&
                    strstr(s, "80") && strstr(s, "lost steps"),
                "%s", s);
    T_CHECK(ascii_only(&b));
    buf_free(&b);
    json_decref(run);
}

static void test_view_nodes(void)
{
    json_t *reply = json_pack("{s:[{s:s, s:s, s:s, s:s, s:i, s:i, s:i, s:n, s:n, s:i},"
                              " {s:s, s:s, s:s, s:s, s:i, s:i, s:i, s:s, s:f, s:i}]}",
                              "nodes", "name", "lead", "role", "leader", "state", "up",
                              "address", "10.0.0.1", "slots_used", 2, "cpu_slots", 4, "gpus", 0,
                              "network_profile", "heartbeat_age_s", "runs", 1, "name", "f1",
                              "role", "follower", "state", "lost", "address", "10.0.0.2",
                              "slots_used", 0, "cpu_slots", 3, "gpus", 1, "network_profile",
                              "1gbe", "heartbeat_age_s", 7.25, "runs", 0);
    struct buf b;
    buf_init(&b);
    T_EQ_INT(view_nodes(reply, &b), 0);
    const char *s = text(&b);
    T_CHECK_MSG(strstr(s, "node  role      state  address   slots") != NULL, "%s", s);
    T_CHECK_MSG(strstr(s, "lead  leader    up     10.0.0.1    2/4") != NULL, "%s", s);
    T_CHECK_MSG(strstr(s, "f1    follower  lost   10.0.0.2    0/3") && strstr(s, "1gbe") &&
                    strstr(s, "7.25"),
                "%s", s);
    T_CHECK_MSG(strstr(s, "1 of 2 nodes up\n") != NULL, "%s", s);
    T_CHECK(ascii_only(&b));
    buf_free(&b);
    json_decref(reply);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_table_layout);
    TEST_RUN(test_table_cells_cleaned_cut_dropped);
    TEST_RUN(test_fmt_numbers);
    TEST_RUN(test_view_collective_results);
    TEST_RUN(test_view_training_results);
    TEST_RUN(test_view_compare);
    TEST_RUN(test_view_experiment_list);
    TEST_RUN(test_view_experiment_and_run);
    TEST_RUN(test_view_nodes);
    return test_end();
}
