/* findings: see findings.h. */
#include "daemon/findings.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define F_KEY 512

void findings_fmt(char *out, size_t cap, double v)
{
    double a = fabs(v);
    if (a >= 100 || v == floor(v)) /* counts and round figures read as integers */
        snprintf(out, cap, "%.0f", v);
    else if (a >= 10)
        snprintf(out, cap, "%.1f", v);
    else if (a >= 1)
        snprintf(out, cap, "%.2f", v);
    else
        snprintf(out, cap, "%.3g", v);
}

double findings_num(const json_t *row, const char *k)
{
    const json_t *v = json_object_get(row, k);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

double findings_col(const json_t *row, enum column c, enum column_stat st)
{
    char key[COLUMNS_KEY_MAX];
    return findings_num(row, columns_key(c, st, key));
}

static const char *f_str(const json_t *row, const char *k)
{
    const char *s = json_string_value(json_object_get(row, k));
    return s ? s : "";
}

/* Results column c's text in row ("" where it has none). */
static const char *f_col_str(const json_t *row, enum column c)
{
    return f_str(row, columns_get(c)->key);
}

/* A finding: text from fmt, where each "%N" (N a digit) is figure N formatted; figures as
 * name, value pairs (nfig of them). A figure that is not finite drops the finding. */
static void f_add(json_t *out, const char *rule, const char *fmt, int nfig, ...)
{
    const char *names[10];
    double vals[10];
    va_list ap;
    va_start(ap, nfig);
    for (int i = 0; i < nfig && i < 10; i++) {
        names[i] = va_arg(ap, const char *);
        vals[i] = va_arg(ap, double);
    }
    va_end(ap);
    for (int i = 0; i < nfig; i++)
        if (!isfinite(vals[i]))
            return;
    char text[1024];
    size_t len = 0;
    for (const char *p = fmt; *p && len + 32 < sizeof text; p++) {
        if (p[0] == '%' && p[1] >= '0' && p[1] <= '9' && p[1] - '0' < nfig) {
            findings_fmt(text + len, sizeof text - len, vals[p[1] - '0']);
            len += strlen(text + len);
            p++;
        } else {
            text[len++] = *p;
        }
    }
    text[len] = 0;
    json_t *figs = json_object();
    for (int i = 0; i < nfig; i++)
        json_object_set_new(figs, names[i], json_real(vals[i]));
    json_array_append_new(
        out, json_pack("{s:s, s:s, s:o}", "rule", rule, "text", text, "figures", figs));
}

void findings_context(const json_t *table, const json_t *row, const char *skip1,
                      const char *skip2, char *out, size_t cap)
{
    size_t i, len = 0;
    json_t *f;
    out[0] = 0;
    json_array_foreach(json_object_get(table, "group_by"), i, f)
    {
        const char *k = json_string_value(f);
        if (!k || (skip1 && strcmp(k, skip1) == 0) || (skip2 && strcmp(k, skip2) == 0))
            continue;
        const json_t *v = json_object_get(row, k);
        char val[96];
        if (json_is_string(v))
            snprintf(val, sizeof val, "%s", json_string_value(v));
        else if (json_is_number(v))
            findings_fmt(val, sizeof val, json_number_value(v));
        else
            snprintf(val, sizeof val, "%s", json_is_true(v) ? "true" : "-");
        len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "%s%s %s",
                                len ? ", " : "", k, val);
        if (len >= cap)
            break;
    }
}

/* " (k v, ...)" of the row's other fields, or "". */
static void f_paren(const json_t *table, const json_t *row, const char *skip1,
                    const char *skip2, char *out, size_t cap)
{
    char ctx[F_KEY];
    findings_context(table, row, skip1, skip2, ctx, sizeof ctx);
    snprintf(out, cap, "%s%s%s", ctx[0] ? " (" : "", ctx, ctx[0] ? ")" : "");
}

static bool f_is_train(const json_t *table)
{
    const char *w = json_string_value(json_object_get(table, "workload"));
    return w && strcmp(w, "train") == 0;
}

/* Whether row k of table is in the group of key (the rows' context without skip). */
static bool f_in_group(const json_t *table, size_t k, const char *skip, const char *key)
{
    char kk[F_KEY];
    findings_context(table, json_array_get(json_object_get(table, "rows"), k), skip, NULL, kk,
                     sizeof kk);
    return strcmp(kk, key) == 0;
}

/* Whether row i is the first row of its group (the rows alike but for skip); its key into
 * key. A rule speaks once per group, at its first row. */
static bool f_first_of_group(const json_t *table, size_t i, const char *skip, char *key,
                             size_t cap)
{
    findings_context(table, json_array_get(json_object_get(table, "rows"), i), skip, NULL, key,
                     cap);
    for (size_t k = 0; k < i; k++)
        if (f_in_group(table, k, skip, key))
            return false;
    return true;
}

/* ---- rules over training tables ---------------------------------------------------------- */

/* At each scale, the fastest strategy and by how much (rows differing by strategy only). */
static void f_rule_fastest(const json_t *table, json_t *out)
{
    const json_t *rows = json_object_get(table, "rows");
    size_t n = json_array_size(rows);
    for (size_t i = 0; i < n; i++) {
        char ki[F_KEY];
        if (!f_first_of_group(table, i, "strategy", ki, sizeof ki) ||
            !json_is_string(json_object_get(json_array_get(rows, i), "strategy")))
            continue;
        const json_t *best = NULL, *second = NULL;
        for (size_t k = i; k < n; k++) {
            const json_t *rk = json_array_get(rows, k);
            double t = findings_col(rk, COL_THROUGHPUT, STAT_MEAN);
            if (!f_in_group(table, k, "strategy", ki) || !isfinite(t))
                continue;
            if (!best || t > findings_col(best, COL_THROUGHPUT, STAT_MEAN)) {
                second = best;
                best = rk;
            } else if (!second || t > findings_col(second, COL_THROUGHPUT, STAT_MEAN)) {
                second = rk;
            }
        }
        if (!best || !second)
            continue;
        double t1 = findings_col(best, COL_THROUGHPUT, STAT_MEAN),
               t2 = findings_col(second, COL_THROUGHPUT, STAT_MEAN);
        double c1 = findings_col(best, COL_THROUGHPUT, STAT_CI95),
               c2 = findings_col(second, COL_THROUGHPUT, STAT_CI95);
        double w = findings_col(best, COL_WORLD_SIZE, STAT_NONE), ratio = t1 / t2;
        char ctx[F_KEY], text[1024];
        f_paren(table, best, "strategy", "world_size", ctx, sizeof ctx);
        if (isfinite(c1) && isfinite(c2)) {
            bool apart = t1 - c1 > t2 + c2;
            snprintf(text, sizeof text,
                     "At world size %%0%s, %s is the fastest strategy: %%1 samples/s (95%% CI "
                     "± %%2), %%3× %s (%%4 samples/s ± %%5)%s.",
                     ctx, f_str(best, "strategy"), f_str(second, "strategy"),
                     apart ? ""
                           : "; the intervals overlap, so the two are not distinguishable "
                             "at 95% confidence");
            f_add(out, "fastest", text, 6, "world_size", w, "throughput", t1, "throughput_ci95",
                  c1, "ratio", ratio, "runner_up_throughput", t2, "runner_up_ci95", c2);
        } else {
            snprintf(text, sizeof text,
                     "At world size %%0%s, %s is the fastest strategy: %%1 samples/s, %%2× %s "
                     "(%%3 samples/s); one repeat each, so no interval says whether the "
                     "difference would hold.",
                     ctx, f_str(best, "strategy"), f_str(second, "strategy"));
            f_add(out, "fastest", text, 4, "world_size", w, "throughput", t1, "ratio", ratio,
                  "runner_up_throughput", t2);
        }
    }
}

/* How much of its communication each multi-rank configuration computes through. */
static void f_rule_hidden(const json_t *table, json_t *out)
{
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(table, "rows"), i, r)
    {
        double w = findings_col(r, COL_WORLD_SIZE, STAT_NONE),
               ov = findings_col(r, COL_OVERLAP, STAT_NONE);
        double comm = findings_col(r, COL_PHASE_COMM, STAT_NONE),
               exp = findings_col(r, COL_PHASE_COMM_EXPOSED, STAT_NONE);
        if (!(w > 1) || !isfinite(ov) || !(comm > 0))
            continue;
        char ctx[F_KEY], text[1024];
        f_paren(table, r, "strategy", "world_size", ctx, sizeof ctx);
        snprintf(text, sizeof text,
                 "%s at %%0 ranks%s hides %%1 %% of its communication: %%2 ms per step in "
                 "flight, %%3 ms of it exposed.",
                 json_is_string(json_object_get(r, "strategy")) ? f_str(r, "strategy")
                                                                : "The configuration",
                 ctx);
        f_add(out, "hidden", text, 4, "world_size", w, "overlap_pct", ov * 100, "comm_ms", comm,
              "exposed_ms", exp);
    }
}

/* The largest scale each configuration reached, with its speed-up and efficiency. */
static void f_rule_scaling(const json_t *table, json_t *out)
{
    const json_t *rows = json_object_get(table, "rows");
    size_t n = json_array_size(rows);
    for (size_t i = 0; i < n; i++) {
        char ki[F_KEY];
        if (!f_first_of_group(table, i, "world_size", ki, sizeof ki))
            continue;
        const json_t *top = NULL;
        for (size_t k = i; k < n; k++) {
            const json_t *rk = json_array_get(rows, k);
            if (f_in_group(table, k, "world_size", ki) &&
                isfinite(findings_col(rk, COL_SPEEDUP, STAT_NONE)) &&
                (!top || findings_col(rk, COL_WORLD_SIZE, STAT_NONE) >
                             findings_col(top, COL_WORLD_SIZE, STAT_NONE)))
                top = rk;
        }
        if (!top || !(findings_col(top, COL_WORLD_SIZE, STAT_NONE) > 1))
            continue;
        char ctx[F_KEY], text[1024];
        findings_context(table, top, "world_size", NULL, ctx, sizeof ctx);
        double ci = findings_col(top, COL_SPEEDUP_CI95, STAT_NONE);
        snprintf(text, sizeof text,
                 "%s%sreaches a speed-up of %%0%s at %%1 ranks over one rank: %%2 %% scaling "
                 "efficiency.",
                 ctx[0] ? ctx : "", ctx[0] ? " " : "", isfinite(ci) ? " (95% CI ± %3)" : "");
        if (isfinite(ci))
            f_add(out, "scaling", text, 4, "speedup", findings_col(top, COL_SPEEDUP, STAT_NONE),
                  "world_size", findings_col(top, COL_WORLD_SIZE, STAT_NONE), "efficiency_pct",
                  findings_col(top, COL_EFFICIENCY, STAT_NONE) * 100, "speedup_ci95", ci);
        else
            f_add(out, "scaling", text, 3, "speedup", findings_col(top, COL_SPEEDUP, STAT_NONE),
                  "world_size", findings_col(top, COL_WORLD_SIZE, STAT_NONE), "efficiency_pct",
                  findings_col(top, COL_EFFICIENCY, STAT_NONE) * 100);
    }
}

/* Phase p's mean per step in row r, measured or as predicted. */
static double f_phase(const json_t *r, enum phase p, bool predicted)
{
    return findings_col(r, predicted ? COLUMN_OF_PRED_PHASE(p) : COLUMN_OF_PHASE(p), STAT_NONE);
}

/* Where the measured step departs from the model: the phase that departs most. */
static void f_model_miss(const json_t *table, const json_t *r, json_t *out)
{
    static const struct {
        enum phase phase;
        const char *cause;
    } phases[] = {
        {PHASE_COMM_EXPOSED,
         "exposed communication: the exchanges took longer inside training than the "
         "collective benchmark's fit says (the communication thread competing with backward "
         "for the cores, or a network slower under load)"},
        {PHASE_BACKWARD,
         "backward compute: slower than at one rank (ranks sharing cores or memory bandwidth)"},
        {PHASE_FORWARD,
         "forward compute: slower than at one rank (ranks sharing cores or memory bandwidth)"},
        {PHASE_DATA, "data loading"},
        {PHASE_OPTIMIZER, "the optimizer step"},
    };
    int worst = -1;
    double worst_d = 0;
    for (int p = 0; p < (int)(sizeof phases / sizeof *phases); p++) {
        double d = f_phase(r, phases[p].phase, false) - f_phase(r, phases[p].phase, true);
        if (isfinite(d) && fabs(d) > fabs(worst_d)) {
            worst_d = d;
            worst = p;
        }
    }
    double err = findings_col(r, COL_PRED_STEP_ERR, STAT_NONE),
           step = findings_col(r, COL_STEP_MS, STAT_MEAN);
    double pred = findings_col(r, COL_PRED_STEP_MS, STAT_NONE),
           w = findings_col(r, COL_WORLD_SIZE, STAT_NONE);
    double strag = findings_col(r, COL_STRAGGLER_MS, STAT_NONE);
    char ctx[F_KEY], text[1024];
    f_paren(table, r, "strategy", "world_size", ctx, sizeof ctx);
    const char *who = json_is_string(json_object_get(r, "strategy")) ? f_str(r, "strategy")
                                                                     : "the configuration";
    if (worst < 0)
        return;
    bool strags = isfinite(strag) && strag > 0.1 * step;
    snprintf(
        text, sizeof text,
        "At world size %%0%s, %s's measured step (%%1 ms) is %%2 %% %s the model's %%3 ms. "
        "The phase that departs most is %s: %%4 ms measured against %%5 ms predicted%s.",
        ctx, who, err > 0 ? "below" : "above", phases[worst].cause,
        strags ? "; stragglers add to it: the slowest rank finished %6 ms after the "
                 "fastest per step"
               : "");
    f_add(out, "model_miss", text, strags ? 7 : 6, "world_size", w, "measured_step_ms", step,
          "error_pct", fabs(err) * 100, "predicted_step_ms", pred, "measured_phase_ms",
          f_phase(r, phases[worst].phase, false), "predicted_phase_ms",
          f_phase(r, phases[worst].phase, true), "straggler_ms", strag);
}

/* How well the model agrees overall, then each configuration it misses. */
static void f_rule_model(const json_t *table, json_t *out)
{
    size_t i, total = 0, within = 0;
    double sum = 0;
    json_t *r;
    json_array_foreach(json_object_get(table, "rows"), i, r)
    {
        double err = findings_col(r, COL_PRED_STEP_ERR, STAT_NONE);
        if (!isfinite(err) || !(findings_col(r, COL_WORLD_SIZE, STAT_NONE) > 1))
            continue;
        total++;
        sum += fabs(err);
        if (fabs(err) <= FINDINGS_MODEL_TOLERANCE)
            within++;
        else
            f_model_miss(table, r, out);
    }
    if (total == 0)
        return;
    f_add(out, "model",
          "The model predicts the step time within %0 % for %1 of %2 multi-rank "
          "configurations; its mean absolute error is %3 %.",
          4, "tolerance_pct", FINDINGS_MODEL_TOLERANCE * 100, "within", (double)within, "of",
          (double)total, "mean_abs_error_pct", sum / (double)total * 100);
}

/* Whether the strategies end at the same accuracy (rows differing by strategy only). */
static void f_rule_accuracy(const json_t *table, json_t *out)
{
    const json_t *rows = json_object_get(table, "rows");
    size_t n = json_array_size(rows);
    for (size_t i = 0; i < n; i++) {
        char ki[F_KEY];
        bool first = f_first_of_group(table, i, "strategy", ki, sizeof ki);
        const json_t *hi = NULL, *lo = NULL;
        for (size_t k = i; first && k < n; k++) {
            const json_t *rk = json_array_get(rows, k);
            double a = findings_col(rk, COL_TEST_ACC, STAT_MEAN);
            if (!f_in_group(table, k, "strategy", ki) || !isfinite(a))
                continue;
            if (!hi || a > findings_col(hi, COL_TEST_ACC, STAT_MEAN))
                hi = rk;
            if (!lo || a < findings_col(lo, COL_TEST_ACC, STAT_MEAN))
                lo = rk;
        }
        if (!hi || hi == lo)
            continue;
        double a1 = findings_col(hi, COL_TEST_ACC, STAT_MEAN) * 100,
               a2 = findings_col(lo, COL_TEST_ACC, STAT_MEAN) * 100;
        double c1 = findings_col(hi, COL_TEST_ACC, STAT_CI95) * 100,
               c2 = findings_col(lo, COL_TEST_ACC, STAT_CI95) * 100;
        char ctx[F_KEY], text[1024];
        f_paren(table, hi, "strategy", NULL, ctx, sizeof ctx);
        bool apart = a1 - c1 > a2 + c2;
        snprintf(text, sizeof text,
                 "Test accuracy%s: %s ends highest at %%0 %% (± %%1) and %s lowest at %%2 %% "
                 "(± %%3); %s.",
                 ctx, f_str(hi, "strategy"), f_str(lo, "strategy"),
                 apart ? "the difference exceeds both 95% intervals"
                       : "the intervals overlap: the strategies train to the same accuracy "
                         "within what the repeats can tell");
        f_add(out, "accuracy", text, 4, "high_pct", a1, "high_ci95", c1, "low_pct", a2,
              "low_ci95", c2);
    }
}

/* A row whose runs had a fault (issue 32): a time to detect or to resume. */
static bool f_faulted(const json_t *row)
{
    return isfinite(findings_col(row, COL_DETECT_S, STAT_MEAN)) ||
           isfinite(findings_col(row, COL_RESUME_S, STAT_MEAN));
}

/* What a fault cost each configuration (an engine, when the table has one per row): the
 * time to detect and to resume, the steps redone, and the final accuracy against the
 * fault-free twin, the row alike but for faults (and elastic, when only the faulted runs
 * were elastic), where the experiment has one. */
static void f_rule_fault(const json_t *table, json_t *out)
{
    const json_t *rows = json_object_get(table, "rows");
    size_t n = json_array_size(rows);
    for (size_t i = 0; i < n; i++) {
        const json_t *ri = json_array_get(rows, i);
        if (!f_faulted(ri))
            continue;
        char ki[F_KEY], ctx[F_KEY], text[1024];
        findings_context(table, ri, "faults", NULL, ki, sizeof ki);
        const json_t *twin = NULL;
        for (size_t k = 0; k < n && !twin; k++)
            if (k != i && f_in_group(table, k, "faults", ki) &&
                !f_faulted(json_array_get(rows, k)))
                twin = json_array_get(rows, k);
        f_paren(table, ri, "faults", NULL, ctx, sizeof ctx);
        double lost = findings_col(ri, COL_LOST_STEPS, STAT_MEAN);
        double acc = findings_col(ri, COL_TEST_ACC, STAT_MEAN) * 100;
        double tacc = twin ? findings_col(twin, COL_TEST_ACC, STAT_MEAN) * 100 : NAN;
        if (twin && isfinite(acc) && isfinite(tacc)) {
            snprintf(text, sizeof text,
                     "A fault%s: detected after %%0 s, training resumed %%1 s after it, "
                     "%%2 steps redone; test accuracy %%3 %% against %%4 %% without the fault "
                     "(a difference of %%5 points).",
                     ctx);
            f_add(out, "fault", text, 6, "detect_s", findings_col(ri, COL_DETECT_S, STAT_MEAN),
                  "resume_s", findings_col(ri, COL_RESUME_S, STAT_MEAN), "lost_steps",
                  isfinite(lost) ? lost : 0, "acc_pct", acc, "twin_acc_pct", tacc,
                  "diff_points", acc - tacc);
        } else {
            snprintf(text, sizeof text,
                     "A fault%s: detected after %%0 s, training resumed %%1 s after it, "
                     "%%2 steps redone (no fault-free twin to compare the accuracy with).",
                     ctx);
            f_add(out, "fault", text, 3, "detect_s", findings_col(ri, COL_DETECT_S, STAT_MEAN),
                  "resume_s", findings_col(ri, COL_RESUME_S, STAT_MEAN), "lost_steps",
                  isfinite(lost) ? lost : 0);
        }
    }
}

/* ---- rules over collective tables and fits ----------------------------------------------- */

/* The peak bus bandwidth of each operation and configuration, and the size it peaks at. */
static void f_rule_busbw(const json_t *table, json_t *out)
{
    const json_t *rows = json_object_get(table, "rows");
    size_t n = json_array_size(rows);
    for (size_t i = 0; i < n; i++) {
        const json_t *ri = json_array_get(rows, i);
        char ki[F_KEY];
        f_first_of_group(table, i, "op", ki, sizeof ki);
        bool first = true; /* no earlier row of this group has this op */
        for (size_t k = 0; k < i && first; k++)
            first = !(
                f_in_group(table, k, "op", ki) &&
                strcmp(f_col_str(json_array_get(rows, k), COL_OP), f_col_str(ri, COL_OP)) == 0);
        const json_t *peak = NULL;
        for (size_t k = i; first && k < n; k++) {
            const json_t *rk = json_array_get(rows, k);
            if (!f_in_group(table, k, "op", ki) ||
                strcmp(f_col_str(rk, COL_OP), f_col_str(ri, COL_OP)) != 0)
                continue;
            if (!peak || findings_col(rk, COL_BUSBW_GBS, STAT_MEAN) >
                             findings_col(peak, COL_BUSBW_GBS, STAT_MEAN))
                peak = rk;
        }
        if (!first || !peak)
            continue;
        char ctx[F_KEY], text[1024];
        f_paren(table, peak, "op", NULL, ctx, sizeof ctx);
        snprintf(text, sizeof text,
                 "%s%s peaks at %%0 GB/s bus bandwidth at %%1 KiB messages (%%2 µs per "
                 "operation).",
                 f_col_str(peak, COL_OP), ctx);
        f_add(out, "busbw", text, 3, "busbw_gbs", findings_col(peak, COL_BUSBW_GBS, STAT_MEAN),
              "kib", findings_col(peak, COL_BYTES, STAT_NONE) / 1024, "time_us",
              findings_col(peak, COL_TIME_US, STAT_MEDIAN));
    }
}

static void f_rule_fits(const json_t *fits, json_t *out)
{
    size_t i;
    json_t *f;
    json_array_foreach((json_t *)fits, i, f)
    {
        char text[1024];
        double g = findings_num(f, "gamma_ns_per_byte");
        snprintf(text, sizeof text,
                 "%s (%s) over %s at %%0 ranks fits T = α + β·bytes with α = %%1 µs and β = "
                 "%%2 ns/byte (%%3 GB/s), R² = %%4, worst residual %%5 %% over %%6 "
                 "sizes%s%s.",
                 f_str(f, "op"), f_str(f, "algorithm"), f_str(f, "backend"),
                 findings_num(f, "points") < 3
                     ? " (two sizes: a line through them, which tests nothing)"
                     : "",
                 isfinite(g) ? "; %7 ns/byte of β is the reduction's arithmetic" : "");
        f_add(out, "fit", text, isfinite(g) ? 8 : 7, "world_size",
              findings_num(f, "world_size"), "alpha_us", findings_num(f, "alpha_us"),
              "beta_ns_per_byte", findings_num(f, "beta_ns_per_byte"), "bandwidth_gbs",
              findings_num(f, "bandwidth_gbs"), "r2", findings_num(f, "r2"),
              "worst_residual_pct", findings_num(f, "worst_residual") * 100, "points",
              findings_num(f, "points"), "gamma_ns_per_byte", g);
    }
}

json_t *findings_build(const json_t *const *tables, size_t n, const json_t *fits)
{
    json_t *out = json_array();
    for (size_t i = 0; i < n; i++) {
        if (f_is_train(tables[i])) {
            f_rule_fastest(tables[i], out);
            f_rule_scaling(tables[i], out);
            f_rule_hidden(tables[i], out);
            f_rule_model(tables[i], out);
            f_rule_accuracy(tables[i], out);
            f_rule_fault(tables[i], out);
        } else {
            f_rule_busbw(tables[i], out);
        }
    }
    if (fits)
        f_rule_fits(fits, out);
    return out;
}
