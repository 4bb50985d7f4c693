/* findings: see findings.h. */
#include "daemon/findings.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/results.h"

#define F_KEY 512

void findings_fmt(char *out, size_t cap, double v)
{
    double a = fabs(v);
    if (v == floor(v) && a < 1e15) /* counts and round figures read as integers */
        snprintf(out, cap, "%.0f", v);
    else if (a >= 1000) { /* 21896.4 is 21900: three significant digits, as the rest */
        double unit = pow(10, floor(log10(a)) - 2);
        snprintf(out, cap, "%.0f", round(v / unit) * unit);
    } else if (a >= 100)
        snprintf(out, cap, "%.0f", v);
    else if (a >= 10)
        snprintf(out, cap, "%.1f", v);
    else if (a >= 1)
        snprintf(out, cap, "%.2f", v);
    else /* "#": trailing zeros kept, 0.270 as 93.0 and 1.40 */
        snprintf(out, cap, "%#.3g", v);
}

void findings_fmt_pct(char *out, size_t cap, double v)
{
    if (v != 0 && fabs(v) < FINDINGS_PCT_FLOOR) /* "0.00215 %" claims a precision no run has */
        snprintf(out, cap, "< %g", FINDINGS_PCT_FLOOR);
    else
        findings_fmt(out, cap, v);
}

void findings_fmt_figure(char *out, size_t cap, const char *name, double v)
{
    size_t n = strlen(name);
    if (n > 4 && strcmp(name + n - 4, "_pct") == 0)
        findings_fmt_pct(out, cap, v);
    else
        findings_fmt(out, cap, v);
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

/* A finding: text from fmt, where each "%N" (N a digit) is figure N formatted
 * (findings_fmt_figure: a name ending "_pct" is a percentage); figures as name, value pairs
 * (nfig of them). A figure that is not finite drops the finding. Returns the finding
 * (borrowed from out), or NULL when dropped. */
static json_t *f_add(json_t *out, const char *rule, const char *fmt, int nfig, ...)
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
            return NULL;
    char text[1024];
    size_t len = 0;
    for (const char *p = fmt; *p && len + 32 < sizeof text; p++) {
        if (p[0] == '%' && p[1] >= '0' && p[1] <= '9' && p[1] - '0' < nfig) {
            findings_fmt_figure(text + len, sizeof text - len, names[p[1] - '0'],
                                vals[p[1] - '0']);
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
    json_t *f = json_pack("{s:s, s:s, s:o, s:b}", "rule", rule, "text", text, "figures", figs,
                          "supported", 0);
    json_array_append_new(out, f);
    return f;
}

/* Marks finding f (from f_add; NULL: dropped) as a conclusion the figures support at 95 %
 * confidence (intervals apart, a speed-up's interval excluding 1): the summary's. */
static void f_support(json_t *f, bool supported)
{
    if (f && supported)
        json_object_set_new(f, "supported", json_true());
}

void findings_value_text(const json_t *v, char *out, size_t cap)
{
    if (json_is_string(v))
        snprintf(out, cap, "%s", json_string_value(v));
    else if (json_is_number(v))
        findings_fmt(out, cap, json_number_value(v));
    else
        snprintf(out, cap, "%s", json_is_true(v) ? "true" : "-");
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
        char val[96];
        findings_value_text(json_object_get(row, k), val, sizeof val);
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

/* Whether row r ran on one rank: there every strategy is the same computation (nothing is
 * exchanged), so a difference between strategies there is noise, never a finding. */
static bool f_one_rank(const json_t *r)
{
    return findings_col(r, COL_WORLD_SIZE, STAT_NONE) == 1;
}

/* At each scale above one rank, the fastest strategy and by how much (rows differing by
 * strategy only). */
static void f_rule_fastest(const json_t *table, json_t *out)
{
    const json_t *rows = json_object_get(table, "rows");
    size_t n = json_array_size(rows);
    for (size_t i = 0; i < n; i++) {
        char ki[F_KEY];
        if (!f_first_of_group(table, i, "strategy", ki, sizeof ki) ||
            !json_is_string(json_object_get(json_array_get(rows, i), "strategy")) ||
            f_one_rank(json_array_get(rows, i)))
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
            f_support(f_add(out, "fastest", text, 6, "world_size", w, "throughput", t1,
                            "throughput_ci95", c1, "ratio", ratio, "runner_up_throughput", t2,
                            "runner_up_ci95", c2),
                      apart);
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
        double ci = findings_col(top, COL_SPEEDUP_CI95, STAT_NONE),
               sp = findings_col(top, COL_SPEEDUP, STAT_NONE);
        /* the interval excludes 1: N ranks are faster (or slower) than one, at 95 % */
        bool apart = isfinite(ci) && (sp - ci > 1 || sp + ci < 1);
        snprintf(text, sizeof text,
                 "%s%sreaches a speed-up of %%0%s at %%1 ranks over one rank: %%2 %% scaling "
                 "efficiency%s.",
                 ctx[0] ? ctx : "", ctx[0] ? " " : "", isfinite(ci) ? " (95% CI ± %3)" : "",
                 !apart   ? ""
                 : sp > 1 ? "; the interval excludes 1, so it is faster than one rank"
                          : "; the interval excludes 1, so it is slower than one rank");
        if (isfinite(ci))
            f_support(f_add(out, "scaling", text, 4, "speedup", sp, "world_size",
                            findings_col(top, COL_WORLD_SIZE, STAT_NONE), "efficiency_pct",
                            findings_col(top, COL_EFFICIENCY, STAT_NONE) * 100, "speedup_ci95",
                            ci),
                      apart);
        else
            f_add(out, "scaling", text, 3, "speedup", findings_col(top, COL_SPEEDUP, STAT_NONE),
                  "world_size", findings_col(top, COL_WORLD_SIZE, STAT_NONE), "efficiency_pct",
                  findings_col(top, COL_EFFICIENCY, STAT_NONE) * 100);
    }
}

/* The measured step's own 95 % half-width relative to its mean: the noise an error is
 * judged against (results_pred_verdict). */
static double f_noise(const json_t *r)
{
    return findings_col(r, COL_STEP_MS, STAT_CI95) / findings_col(r, COL_STEP_MS, STAT_MEAN);
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
        "At world size %%0%s, %s: the model predicts %%3 ms a step, %%1 ms was measured (95%% "
        "CI ± %%6 %%); the error of %%2 %% is a miss (beyond 15 %% and the interval), the "
        "model %s. The phase that departs most is %s: %%4 ms measured against %%5 ms "
        "predicted%s.",
        ctx, who, err > 0 ? "predicting the slower step" : "predicting the faster step",
        phases[worst].cause,
        strags ? "; stragglers add to it: the slowest rank finished %7 ms after the "
                 "fastest per step"
               : "");
    f_add(out, "model_miss", text, strags ? 8 : 7, "world_size", w, "measured_step_ms", step,
          "error_pct", fabs(err) * 100, "predicted_step_ms", pred, "measured_phase_ms",
          f_phase(r, phases[worst].phase, false), "predicted_phase_ms",
          f_phase(r, phases[worst].phase, true), "noise_pct", f_noise(r) * 100, "straggler_ms",
          strag);
}

/* A configuration the model predicts within 15 % (a hit) or within the measurement's own
 * noise: its verdict, with the figures it rests on. */
static void f_model_row(const json_t *table, const json_t *r, const char *verdict, json_t *out)
{
    char ctx[F_KEY], text[1024];
    f_paren(table, r, "strategy", "world_size", ctx, sizeof ctx);
    const char *who = json_is_string(json_object_get(r, "strategy")) ? f_str(r, "strategy")
                                                                     : "the configuration";
    bool noise = strcmp(verdict, "within_noise") == 0;
    snprintf(text, sizeof text,
             "At world size %%0%s, %s: the model predicts %%1 ms a step, %%2 ms was measured "
             "(95%% CI ± %%3 %%); the error of %%4 %% is %s.",
             ctx, who,
             noise ? "within noise: the measurement's own interval is as wide, so it cannot "
                     "tell the prediction from the truth"
                   : "a hit (within 15 %, and wider than the measurement's interval)");
    f_add(out, "model_row", text, 5, "world_size", findings_col(r, COL_WORLD_SIZE, STAT_NONE),
          "predicted_step_ms", findings_col(r, COL_PRED_STEP_MS, STAT_NONE), "measured_step_ms",
          findings_col(r, COL_STEP_MS, STAT_MEAN), "noise_pct", f_noise(r) * 100, "error_pct",
          fabs(findings_col(r, COL_PRED_STEP_ERR, STAT_NONE)) * 100);
}

static int f_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of x[0..n) (sorted here), NaN when n is 0. */
static double f_median(double *x, size_t n)
{
    if (n == 0)
        return NAN;
    qsort(x, n, sizeof *x, f_cmp_double);
    return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}

/* How well the model agrees overall (hits, misses, within noise, and the distribution of
 * the errors), then each multi-rank configuration's verdict (pred_verdict): a miss with
 * the phase that departs most. */
static void f_rule_model(const json_t *table, json_t *out)
{
    size_t i, total = 0, nv[3] = {0};
    static const char *const verdicts[3] = {"hit", "miss", "within_noise"};
    double errs[256], worst = -1;
    const json_t *worst_row = NULL;
    json_t *r;
    json_array_foreach(json_object_get(table, "rows"), i, r)
    {
        double err = fabs(findings_col(r, COL_PRED_STEP_ERR, STAT_NONE));
        if (!isfinite(err) || !(findings_col(r, COL_WORLD_SIZE, STAT_NONE) > 1))
            continue;
        if (total < sizeof errs / sizeof *errs)
            errs[total++] = err;
        if (err > worst) {
            worst = err;
            worst_row = r;
        }
        const char *v = f_col_str(r, COL_PRED_VERDICT);
        for (int k = 0; k < 3; k++)
            if (strcmp(v, verdicts[k]) == 0)
                nv[k]++;
        if (strcmp(v, "miss") == 0)
            f_model_miss(table, r, out);
        else if (v[0])
            f_model_row(table, r, v, out);
    }
    if (total == 0)
        return;
    double median = f_median(errs, total);
    char ctx[F_KEY], text[1024];
    findings_context(table, worst_row, NULL, NULL, ctx, sizeof ctx);
    size_t judged = nv[0] + nv[1] + nv[2];
    char unjudged[160] = "";
    if (judged < total)
        snprintf(unjudged, sizeof unjudged,
                 "; %zu without an interval to judge against (one step measured)",
                 total - judged);
    snprintf(text, sizeof text,
             "Of the %%0 multi-rank configurations the model predicts: %%1 hit%s (step time "
             "within %%2 %%), %%3 miss%s, %%4 within noise (the measured step's own 95%% "
             "interval as wide as the error)%s. The absolute errors have a median of %%5 %% "
             "and a worst of %%6 %%%s%s%s.",
             nv[0] == 1 ? "" : "s", nv[1] == 1 ? "" : "es", unjudged, ctx[0] ? " (" : "", ctx,
             ctx[0] ? ")" : "");
    json_t *f = f_add(out, "model", text, 7, "of", (double)total, "hits", (double)nv[0],
                      "tolerance_pct", RESULTS_PRED_TOLERANCE * 100, "misses", (double)nv[1],
                      "within_noise", (double)nv[2], "median_abs_error_pct", median * 100,
                      "worst_abs_error_pct", worst * 100);
    /* a measured agreement: the summary's when every configuration was judged */
    f_support(f, judged == total);
}

/* The extrapolation check (docs/model.md "Extrapolation"): where some multi-rank rows are
 * predicted beyond the world sizes or node counts their fits measured (pred_extrapolated,
 * e.g. a report with ?pred_max_world=2), their errors against the rows within. */
static void f_rule_extrapolation(const json_t *table, json_t *out)
{
    double out_e[256], in_e[256], worst = -1;
    size_t nout = 0, nin = 0, i;
    json_t *r;
    json_array_foreach(json_object_get(table, "rows"), i, r)
    {
        double err = fabs(findings_col(r, COL_PRED_STEP_ERR, STAT_NONE));
        if (!isfinite(err) || !(findings_col(r, COL_WORLD_SIZE, STAT_NONE) > 1))
            continue;
        if (json_is_true(json_object_get(r, "pred_extrapolated"))) {
            if (nout < sizeof out_e / sizeof *out_e)
                out_e[nout++] = err;
            worst = fmax(worst, err);
        } else if (nin < sizeof in_e / sizeof *in_e) {
            in_e[nin++] = err;
        }
    }
    if (nout == 0)
        return;
    double mout = f_median(out_e, nout), min = f_median(in_e, nin);
    char text[512];
    snprintf(text, sizeof text,
             "%%0 multi-rank configuration%s %s predicted beyond what the network fits "
             "measured (world sizes or node counts: an extrapolation, pred_range says from "
             "what): the absolute errors there have a median of %%1 %% and a worst of %%2 "
             "%%%s.",
             nout == 1 ? "" : "s", nout == 1 ? "is" : "are",
             nin ? ", against a median of %3 % for the configurations within the fits" : "");
    f_add(out, "model_extrapolated", text, nin ? 4 : 3, "extrapolated", (double)nout,
          "median_abs_error_pct", mout * 100, "worst_abs_error_pct", worst * 100,
          "median_abs_error_within_pct", min * 100);
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
        if (!hi || hi == lo || f_one_rank(hi))
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
        f_support(f_add(out, "accuracy", text, 4, "high_pct", a1, "high_ci95_pct", c1,
                        "low_pct", a2, "low_ci95_pct", c2),
                  apart);
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

/* The topic (the report's section) of each rule, in the order the sections come. */
static const struct {
    const char *rule, *topic;
} f_topics[] = {
    {"fastest", "scaling"},
    {"scaling", "scaling"},
    {"hidden", "communication"},
    {"busbw", "communication"},
    {"model", "model"},
    {"model_row", "model"},
    {"model_miss", "model"},
    {"model_extrapolated", "model"},
    {"accuracy", "accuracy"},
    {"fault", "faults"},
    {"fit", "fits"},
};

const char *findings_topic_at(size_t i)
{
    static const char *const order[] = {"scaling",  "communication", "model",
                                        "accuracy", "faults",        "fits"};
    return i < sizeof order / sizeof *order ? order[i] : NULL;
}

/* Sets topic and experiment (the table's index; -1: none, the fits) on findings from
 * index from on. */
static void f_label(json_t *out, size_t from, int table)
{
    for (size_t i = from; i < json_array_size(out); i++) {
        json_t *f = json_array_get(out, i);
        const char *rule = json_string_value(json_object_get(f, "rule"));
        const char *topic = "other";
        for (size_t k = 0; k < sizeof f_topics / sizeof *f_topics; k++)
            if (strcmp(rule, f_topics[k].rule) == 0)
                topic = f_topics[k].topic;
        json_object_set_new(f, "topic", json_string(topic));
        json_object_set_new(f, "table", json_integer(table));
    }
}

json_t *findings_build(const json_t *const *tables, size_t n, const json_t *fits)
{
    json_t *out = json_array();
    for (size_t i = 0; i < n; i++) {
        size_t from = json_array_size(out);
        if (f_is_train(tables[i])) {
            f_rule_fastest(tables[i], out);
            f_rule_scaling(tables[i], out);
            f_rule_hidden(tables[i], out);
            f_rule_model(tables[i], out);
            f_rule_extrapolation(tables[i], out);
            f_rule_accuracy(tables[i], out);
            f_rule_fault(tables[i], out);
        } else {
            f_rule_busbw(tables[i], out);
        }
        f_label(out, from, (int)i);
    }
    size_t from = json_array_size(out);
    if (fits)
        f_rule_fits(fits, out);
    f_label(out, from, -1);
    return out;
}

json_t *findings_summary(const json_t *findings, size_t max)
{
    /* one of each kind in turn, so five differences of one kind do not crowd out the
     * model's agreement or the accuracy */
    static const char *const kinds[] = {"fastest", "model", "scaling", "accuracy"};
    json_t *out = json_array();
    bool taken[1024] = {false};
    size_t n = json_array_size(findings);
    for (bool more = true; more && json_array_size(out) < max;) {
        more = false;
        for (size_t k = 0; k < sizeof kinds / sizeof *kinds && json_array_size(out) < max; k++)
            for (size_t i = 0; i < n && i < sizeof taken; i++) {
                const json_t *f = json_array_get(findings, i);
                if (taken[i] || !json_is_true(json_object_get(f, "supported")) ||
                    strcmp(json_string_value(json_object_get(f, "rule")), kinds[k]) != 0)
                    continue;
                taken[i] = more = true;
                json_array_append(out, (json_t *)f);
                break;
            }
    }
    return out;
}
