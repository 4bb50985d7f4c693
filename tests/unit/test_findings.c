/* Unit tests for daemon/findings (the report's sentences) and the report's SVG charts:
 * results tables with known properties give the findings they imply and no other; every
 * figure a finding carries is written in its text by the one number rule; a difference
 * within the intervals is not called one, and none is sought at one rank; a missing figure
 * silences its rule; each prediction's verdict (results_pred_verdict) is said with the
 * error distribution; the summary takes the supported conclusions, one kind in turn;
 * chart text is escaped and the legend lists only the series not marked nolegend. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/findings.h"
#include "daemon/report_html.h"
#include "daemon/results.h"
#include "tests/unit/test.h"

/* One training row: strategy, world size, throughput mean and CI, and the rest. */
static json_t *row(const char *strategy, int world, double thr, double ci)
{
    return json_pack("{s:s, s:i, s:f, s:o, s:i, s:f, s:f}", "strategy", strategy, "world_size",
                     world, "throughput_mean", thr, "throughput_ci95",
                     isfinite(ci) ? json_real(ci) : json_null(), "throughput_n", 3, "speedup",
                     world == 1 ? 1.0 : thr / 100.0, "efficiency",
                     world == 1 ? 1.0 : thr / 100.0 / world);
}

static void set(json_t *r, const char *k, double v)
{
    json_object_set_new(r, k, json_real(v));
}

/* The row's pred_verdict as results.c computes it from the row's own figures. */
static void set_verdict(json_t *r)
{
    double err = json_number_value(json_object_get(r, "pred_step_err"));
    const json_t *ci = json_object_get(r, "step_ms_ci95");
    double noise = json_is_number(ci)
                       ? json_number_value(ci) /
                             json_number_value(json_object_get(r, "step_ms_mean"))
                       : NAN;
    const char *v = results_pred_verdict(err, noise);
    json_object_set_new(r, "pred_verdict", v ? json_string(v) : json_null());
}

/* A row's further columns, as a table: the figures each rule reads. */
struct col {
    const char *k;
    double v;
};

static void set_cols(json_t *r, const struct col *c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        set(r, c[i].k, c[i].v);
}

static json_t *train_table(void)
{
    json_t *ddp1 = row("ddp", 1, 100, 2), *naive1 = row("naive", 1, 98, 2);
    json_t *ddp4 = row("ddp", 4, 360, 10), *naive4 = row("naive", 4, 300, 10);
    static const struct col ddp4_cols[] = {{"speedup_ci95", 0.1},   {"overlap", 0.6},
                                           {"comm_ms", 10},         {"comm_exposed_ms", 4},
                                           {"pred_step_err", 0.05}, {"pred_step_ms", 21},
                                           {"step_ms_mean", 20},    {"step_ms_ci95", 0.4},
                                           {"test_acc_mean", 0.9},  {"test_acc_ci95", 0.01}};
    static const struct col naive4_cols[] = {
        {"overlap", 0},           {"comm_ms", 12},
        {"comm_exposed_ms", 12},  {"pred_comm_exposed_ms", 6},
        {"backward_ms", 20},      {"pred_backward_ms", 19},
        {"pred_step_err", -0.25}, {"pred_step_ms", 30},
        {"step_ms_mean", 40},     {"step_ms_ci95", 2},
        {"straggler_ms", 5},      {"test_acc_mean", 0.8},
        {"test_acc_ci95", 0.01}};
    set_cols(ddp4, ddp4_cols, sizeof ddp4_cols / sizeof *ddp4_cols);
    set_cols(naive4, naive4_cols, sizeof naive4_cols / sizeof *naive4_cols);
    set_verdict(ddp4);
    set_verdict(naive4);
    /* one rank: the same computation under every strategy, accuracy apart by chance */
    static const struct col one_cols[] = {{"test_acc_mean", 0.5}, {"test_acc_ci95", 0.01}};
    set_cols(ddp1, one_cols, 2);
    set(naive1, "test_acc_mean", 0.7);
    set(naive1, "test_acc_ci95", 0.01);
    return json_pack("{s:s, s:[s, s], s:[o, o, o, o]}", "workload", "train", "group_by",
                     "strategy", "world_size", "rows", ddp1, naive1, ddp4, naive4);
}

/* The findings of one table t (borrowed) and fits (may be NULL); SHOW=1 prints them. */
static json_t *build_one(const json_t *t, const json_t *fits)
{
    const json_t *tables[1] = {t};
    json_t *fs = findings_build(tables, 1, fits);
    size_t i;
    json_t *f;
    json_array_foreach(fs, i, f) if (getenv("SHOW"))
        fprintf(stderr, "%s\n", json_string_value(json_object_get(f, "text")));
    return fs;
}

/* The findings of rule `rule` in fs, in order. */
static size_t of_rule(const json_t *fs, const char *rule, const json_t **out, size_t cap)
{
    size_t n = 0, i;
    json_t *f;
    json_array_foreach((json_t *)fs, i, f)
    {
        if (strcmp(json_string_value(json_object_get(f, "rule")), rule) == 0 && n < cap)
            out[n++] = f;
    }
    return n;
}

static bool says(const json_t *f, const char *what)
{
    return strstr(json_string_value(json_object_get(f, "text")), what) != NULL;
}

/* Every figure, formatted as findings_fmt writes it, is in the text; and there is one. */
static bool numbers_in_text(const json_t *f)
{
    const char *k;
    json_t *v;
    size_t n = 0;
    json_object_foreach(json_object_get(f, "figures"), k, v)
    {
        char b[32];
        findings_fmt_figure(b, sizeof b, k, json_number_value(v));
        if (!says(f, b)) {
            fprintf(stderr, "    figure %s = %s not in \"%s\"\n", k, b,
                    json_string_value(json_object_get(f, "text")));
            return false;
        }
        n++;
    }
    return n > 0;
}

static void test_findings_training(void)
{
    json_t *t = train_table();
    const json_t *tables[1] = {t};
    json_t *fs = findings_build(tables, 1, NULL);
    size_t i;
    json_t *f;
    json_array_foreach(fs, i, f)
    {
        if (getenv("SHOW"))
            fprintf(stderr, "%s\n", json_string_value(json_object_get(f, "text")));
        T_CHECK(numbers_in_text(f));
    }
    const json_t *got[8];
    /* fastest: ddp at 4 ranks, apart; none at one rank, where strategies cannot differ */
    T_EQ_INT(of_rule(fs, "fastest", got, 8), 1);
    T_CHECK(says(got[0], "At world size 4") && says(got[0], "1.20× naive") &&
            !says(got[0], "not distinguishable"));
    T_CHECK(json_is_true(json_object_get(got[0], "supported")));
    json_array_foreach(fs, i, f) T_CHECK(!says(f, "world size 1") && !says(f, "at 1 ranks"));
    /* scaling: each strategy's largest scale */
    T_EQ_INT(of_rule(fs, "scaling", got, 8), 2);
    T_CHECK(says(got[0], "3.60") && says(got[0], "90 %") && says(got[0], "± 0.1") &&
            says(got[0], "excludes 1"));
    T_CHECK(says(got[1], "reaches a speed-up of 3 at") &&
            !says(got[1], "CI")); /* no interval given */
    /* hidden: only the multi-rank rows */
    T_EQ_INT(of_rule(fs, "hidden", got, 8), 2);
    T_CHECK(says(got[0], "ddp at 4 ranks hides 60 %"));
    /* the model: ddp a hit, naive a miss blamed on exposed communication (6 ms over the
     * prediction, the backward only 1) with its stragglers; the errors' distribution */
    T_EQ_INT(of_rule(fs, "model", got, 8), 1);
    T_CHECK(says(got[0], "Of the 2 multi-rank") && says(got[0], "1 hit (") &&
            says(got[0], "1 miss,") && says(got[0], "0 within noise") &&
            says(got[0], "median of 15 %") && says(got[0], "worst of 25 %") &&
            says(got[0], "strategy naive, world_size 4"));
    T_EQ_INT(of_rule(fs, "model_row", got, 8), 1);
    T_CHECK(says(got[0], "At world size 4, ddp: the model predicts 21 ms") &&
            says(got[0], "± 2 %") && says(got[0], "5 % is a hit"));
    T_EQ_INT(of_rule(fs, "model_miss", got, 8), 1);
    T_CHECK(says(got[0], "At world size 4, naive: the model predicts 30 ms a step, 40 ms was "
                         "measured (95% CI ± 5 %); the error of 25 % is a miss"));
    T_CHECK(says(got[0], "exposed communication") &&
            says(got[0], "12 ms measured against 6 ms"));
    T_CHECK(says(got[0], "stragglers") && says(got[0], "5 ms after"));
    /* accuracy: 90 % against 80 %, intervals of 1 point: a difference */
    T_EQ_INT(of_rule(fs, "accuracy", got, 8), 1);
    T_CHECK(says(got[0], "ddp ends highest at 90 %") && says(got[0], "exceeds"));
    /* the summary: the supported ones, one kind in turn; topics and tables labelled */
    json_t *sum = findings_summary(fs, 5);
    static const char *const kinds[] = {"fastest", "model", "scaling", "accuracy"};
    T_EQ_INT(json_array_size(sum), 4);
    for (size_t k = 0; k < 4 && k < json_array_size(sum); k++)
        T_CHECK(strcmp(json_string_value(json_object_get(json_array_get(sum, k), "rule")),
                       kinds[k]) == 0);
    json_decref(sum);
    sum = findings_summary(fs, 2);
    T_EQ_INT(json_array_size(sum), 2);
    json_decref(sum);
    json_array_foreach(fs, i, f)
    {
        const char *topic = json_string_value(json_object_get(f, "topic"));
        T_CHECK(json_integer_value(json_object_get(f, "table")) == 0);
        bool known = false;
        for (size_t k = 0; findings_topic_at(k); k++)
            known = known || strcmp(topic, findings_topic_at(k)) == 0;
        T_CHECK(known);
    }
    json_decref(fs);

    /* one repeat (no intervals): the fastest says so instead of comparing intervals; a
     * row whose figures are missing gives no sentence */
    json_t *rows = json_object_get(t, "rows");
    for (size_t k = 0; k < json_array_size(rows); k++) {
        json_object_set_new(json_array_get(rows, k), "throughput_ci95", json_null());
        json_object_set_new(json_array_get(rows, k), "pred_step_err", json_null());
    }
    fs = findings_build(tables, 1, NULL);
    T_EQ_INT(of_rule(fs, "fastest", got, 8), 1);
    T_CHECK(says(got[0], "one repeat each") &&
            !json_is_true(json_object_get(got[0], "supported")));
    T_EQ_INT(of_rule(fs, "model", got, 8), 0);
    T_EQ_INT(of_rule(fs, "model_miss", got, 8), 0);
    json_decref(fs);
    json_decref(t);
}

/* Noise separated from error (issue 35): the verdict's three cases and its edges; a
 * row whose interval is as wide as its error is within noise, not a miss; a row without a
 * prediction or an interval has no verdict and is counted apart. */
static void test_findings_noise(void)
{
    T_CHECK(strcmp(results_pred_verdict(0.10, 0.02), "hit") == 0);
    T_CHECK(strcmp(results_pred_verdict(-0.15, 0.02), "hit") == 0); /* 15 % is a hit */
    T_CHECK(strcmp(results_pred_verdict(0.16, 0.02), "miss") == 0);
    T_CHECK(strcmp(results_pred_verdict(-0.40, 0.40), "within_noise") == 0); /* as wide */
    T_CHECK(strcmp(results_pred_verdict(0.05, 0.30), "within_noise") == 0);
    T_CHECK(results_pred_verdict(NAN, 0.1) == NULL && results_pred_verdict(0.1, NAN) == NULL);
    json_t *rows = json_array();
    static const double rs[][4] = {
        /* world, err, step mean, step ci */
        {2, 0.40, 10, 5}, /* within noise: ± 50 % */
        {2, 0.10, 10, 0.5}, {2, -0.30, 10, 0.5},
        {2, 0.20, 10, NAN}, /* no interval: no verdict */
        {1, 0.90, 10, 0.5}, /* one rank: no exchange to predict */
    };
    static const char *const names[] = {"a", "b", "c", "d", "e"};
    for (size_t k = 0; k < 5; k++) {
        json_t *r = json_pack("{s:s, s:f, s:f, s:f, s:f, s:o}", "strategy", names[k],
                              "world_size", rs[k][0], "pred_step_err", rs[k][1], "step_ms_mean",
                              rs[k][2], "pred_step_ms", rs[k][2] * (1 + rs[k][1]),
                              "step_ms_ci95",
                              isfinite(rs[k][3]) ? json_real(rs[k][3]) : json_null());
        set_verdict(r);
        json_array_append_new(rows, r);
    }
    json_t *t = json_pack("{s:s, s:[s, s], s:o}", "workload", "train", "group_by", "strategy",
                          "world_size", "rows", rows);
    json_t *fs = build_one(t, NULL);
    const json_t *got[8];
    T_EQ_INT(of_rule(fs, "model", got, 8), 1);
    T_CHECK(says(got[0], "Of the 4 multi-rank") && says(got[0], "1 hit (") &&
            says(got[0], "1 miss,") && says(got[0], "1 within noise") &&
            says(got[0], "1 without an interval") && says(got[0], "median of 25 %") &&
            says(got[0], "worst of 40 %") && numbers_in_text(got[0]));
    /* not every row judged: no conclusion for the summary */
    T_CHECK(!json_is_true(json_object_get(got[0], "supported")));
    T_EQ_INT(of_rule(fs, "model_row", got, 8), 2);
    T_CHECK(says(got[0], "a: the model predicts 14 ms") && says(got[0], "within noise") &&
            says(got[0], "± 50 %"));
    T_CHECK(says(got[1], "b: the model predicts 11 ms") && says(got[1], "a hit"));
    T_EQ_INT(of_rule(fs, "model_miss", got, 8), 0);         /* c's miss: no phases to blame */
    T_EQ_INT(of_rule(fs, "model_extrapolated", got, 8), 0); /* every row within its fits */
    json_decref(fs);
    /* the extrapolation check: a and c predicted beyond what their fits measured */
    json_object_set_new(json_array_get(rows, 0), "pred_extrapolated", json_true());
    json_object_set_new(json_array_get(rows, 2), "pred_extrapolated", json_true());
    fs = build_one(t, NULL);
    T_EQ_INT(of_rule(fs, "model_extrapolated", got, 8), 1);
    T_CHECK(says(got[0], "2 multi-rank configurations are predicted beyond") &&
            says(got[0], "a median of 35 % and a worst of 40 %") &&
            says(got[0], "against a median of 15.0 % for the configurations within") &&
            numbers_in_text(got[0]));
    T_EQ_STR(json_string_value(json_object_get(got[0], "topic")), "model");
    json_decref(fs);
    json_decref(t);
}

/* The one number rule: three significant digits, integers whole, a sliver of a share as
 * "< 0.01"; a figure named *_pct is a share. */
static void test_findings_numbers(void)
{
    static const struct {
        double v;
        bool pct;
        const char *want;
    } cases[] = {
        {21896.4, false, "21900"}, {1024, false, "1024"},       {812.4, false, "812"},
        {63.04, true, "63.0"},     {3.6, false, "3.60"},        {0.0871, true, "0.0871"},
        {0.27, false, "0.270"},    {0.00215, true, "< 0.01"},   {0, true, "0"},
        {-0.004, true, "< 0.01"},  {0.00215, false, "0.00215"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char b[32];
        findings_fmt_figure(b, sizeof b, cases[k].pct ? "share_pct" : "ms", cases[k].v);
        T_EQ_STR(b, cases[k].want);
    }
}

static void test_findings_collectives_and_fits(void)
{
    json_t *t = json_pack(
        "{s:s, s:[s], s:[{s:s, s:i, s:I, s:f, s:f}, {s:s, s:i, s:I, s:f, "
        "s:f}, {s:s, s:i, s:I, s:f, s:f}]}",
        "workload", "collective", "group_by", "world_size", "rows", "op", "allreduce",
        "world_size", 2, "bytes", (json_int_t)4096, "busbw_gbs_mean", 0.5, "time_us_median",
        16.0, "op", "allreduce", "world_size", 2, "bytes", (json_int_t)(1 << 20),
        "busbw_gbs_mean", 2.5, "time_us_median", 420.0, "op", "all_gather", "world_size", 2,
        "bytes", (json_int_t)(1 << 20), "busbw_gbs_mean", 3.0, "time_us_median", 170.0);
    json_t *fits = json_pack("[{s:s, s:s, s:s, s:i, s:f, s:f, s:f, s:f, s:f, s:i, s:f}]", "op",
                             "reduce_scatter", "algorithm", "ring", "backend", "tcp",
                             "world_size", 4, "alpha_us", 30.0, "beta_ns_per_byte", 1.0,
                             "bandwidth_gbs", 1.0, "r2", 0.998, "worst_residual", 0.04,
                             "points", 13, "gamma_ns_per_byte", 0.25);
    json_t *fs = build_one(t, fits);
    const json_t *got[4];
    size_t i;
    json_t *f;
    T_EQ_INT(of_rule(fs, "busbw", got, 4), 2);
    T_CHECK(says(got[0], "allreduce (world_size 2) peaks at 2.50 GB/s") &&
            says(got[0], "at 1024 KiB"));
    T_CHECK(says(got[1], "all_gather") && says(got[1], "3 GB/s"));
    T_EQ_INT(of_rule(fs, "fit", got, 4), 1);
    T_CHECK(says(got[0], "α = 30 µs") && says(got[0], "R² = 0.998") &&
            says(got[0], "0.250 ns/byte of β is the reduction"));
    json_array_foreach(fs, i, f) T_CHECK(numbers_in_text(f));
    json_decref(fs);
    json_decref(t);
    json_decref(fits);
}

static size_t count(const char *s, const char *what)
{
    size_t n = 0;
    for (const char *p = s; (p = strstr(p, what)); p += strlen(what))
        n++;
    return n;
}

/* The cost of a fault (issue 32): a faulted row states its detection, resumption and lost
 * steps, and its accuracy against the fault-free twin (the row alike but for faults); an
 * engine without a twin says so; fault-free rows give no such finding. */
static void test_findings_fault(void)
{
    json_t *pt = json_pack("{s:s, s:s}", "engine", "ddpbench", "faults", "[]");
    json_t *pk = json_pack("{s:s, s:s}", "engine", "ddpbench", "faults", "[kill]");
    json_t *hk = json_pack("{s:s, s:s}", "engine", "horovod", "faults", "[kill]");
    static const struct col twin[] = {{"test_acc_mean", 0.881}};
    static const struct col killed[] = {{"test_acc_mean", 0.863},
                                        {"detect_s_mean", 0.25},
                                        {"resume_s_mean", 1.5},
                                        {"lost_steps_mean", 4}};
    static const struct col hkilled[] = {{"test_acc_mean", 0.85}, {"resume_s_mean", 6.5}};
    set_cols(pt, twin, 1);
    set_cols(pk, killed, 4);
    set_cols(hk, hkilled, 2);
    json_t *t = json_pack("{s:s, s:[s, s], s:[o, o, o]}", "workload", "train", "group_by",
                          "engine", "faults", "rows", pt, pk, hk);
    const json_t *tables[] = {t};
    json_t *fs = findings_build(tables, 1, NULL);
    const json_t *f[4];
    size_t n = of_rule(fs, "fault", f, 4);
    T_EQ_INT(n, 1); /* horovod's has no detection: a figure missing silences it */
    T_CHECK(n >= 1 && says(f[0], "engine ddpbench") && says(f[0], "detected after 0.250 s") &&
            says(f[0], "resumed 1.50 s after it") && says(f[0], "4 steps redone") &&
            says(f[0], "86.3 % against 88.1 %") && numbers_in_text(f[0]));
    json_decref(fs);
    json_decref(t);
    /* the twin missing: the finding says it cannot compare */
    pk = json_pack("{s:s, s:s}", "engine", "ddpbench", "faults", "[kill]");
    set_cols(pk, killed, 4);
    t = json_pack("{s:s, s:[s, s], s:[o]}", "workload", "train", "group_by", "engine", "faults",
                  "rows", pk);
    tables[0] = t;
    fs = findings_build(tables, 1, NULL);
    n = of_rule(fs, "fault", f, 4);
    T_EQ_INT(n, 1);
    T_CHECK(n == 1 && says(f[0], "no fault-free twin") && numbers_in_text(f[0]));
    json_decref(fs);
    json_decref(t);
}

static void test_report_svg(void)
{
    const double x[3] = {1, 2, 4}, y[3] = {100, 190, 350}, err[3] = {2, 5, NAN};
    const double my[3] = {100, 195, 370};
    struct report_series s[2] = {
        {.label = "ddp <measured>", .n = 3, .x = x, .y = y, .err = err},
        {.label = "ddp: model", .n = 3, .x = x, .y = my, .dashed = true},
    };
    struct buf b;
    buf_init(&b);
    T_CHECK(report_svg_lines(&b, "Throughput & more", "ranks", "samples/s", 0, s, 2) == 0);
    const char *out = (const char *)b.data;
    T_CHECK(out && strlen(out) == b.len);
    T_EQ_INT(count(out, "<svg"), 1);
    T_EQ_INT(count(out, "</svg>"), 1);
    T_EQ_INT(count(out, "<polyline"), 2);
    T_EQ_INT(count(out, "<circle"), 3);          /* markers for measured points only */
    T_EQ_INT(count(out, "stroke-dasharray"), 2); /* the model's line and its legend */
    T_CHECK(strstr(out, "ddp &lt;measured&gt;") && !strstr(out, "<measured>"));
    T_CHECK(strstr(out, "Throughput &amp; more"));
    /* a series marked nolegend is drawn but not listed; a style key of no points is
     * listed but draws nothing */
    size_t at = b.len;
    struct report_series k[2] = {
        {.label = "hidden one", .n = 3, .x = x, .y = my, .dashed = true, .nolegend = true},
        {.label = "model (dashed)", .dashed = true, .color = 9},
    };
    T_CHECK(report_svg_lines(&b, "keys", "ranks", "samples/s", 0, k, 2) == 0);
    out = (const char *)b.data;
    T_EQ_INT(count(out + at, "<polyline"), 1);
    T_CHECK(!strstr(out + at, "hidden one") && strstr(out + at, "model (dashed)") &&
            strstr(out + at, "#7f7f7f"));
    /* log axes: a point at or below 0 cannot be drawn and is left out, not misplaced */
    const double lx[3] = {1024, 4096, 0}, ly[3] = {10, 40, 5};
    struct report_series l = {.label = "fit", .n = 3, .x = lx, .y = ly};
    size_t before = b.len;
    T_CHECK(report_svg_lines(&b, "log", "bytes", "us", REPORT_LOGX | REPORT_LOGY, &l, 1) == 0);
    out = (const char *)b.data;
    T_EQ_INT(count(out + before, "<circle"), 2);
    T_CHECK(strstr(out + before, ">4K<") && strstr(out + before, ">1K<"));
    buf_free(&b);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_findings_training);
    TEST_RUN(test_findings_noise);
    TEST_RUN(test_findings_numbers);
    TEST_RUN(test_findings_collectives_and_fits);
    TEST_RUN(test_findings_fault);
    TEST_RUN(test_report_svg);
    return test_end();
}
