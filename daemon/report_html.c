/* report_html: see report_html.h. */
#include "daemon/report_html.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/columns.h"
#include "common/spec.h"
#include "daemon/findings.h"
#include "daemon/model.h"
#include "daemon/results.h"

#define RH_MAX_SERIES 24
#define RH_MAX_POINTS 64
#define RH_LEGEND_LINE 20.0 /* px between legend entries (13 px type) */

/* ---- the page buffer --------------------------------------------------------------------- */

/* The page being written; a failed append marks it, and the page is then refused whole. */
struct rh {
    struct buf b;
    bool oom;
};

static void rh_printf(struct rh *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rh_printf(struct rh *h, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (!h->oom && buf_vprintf(&h->b, fmt, ap) < 0)
        h->oom = true;
    va_end(ap);
}

/* s, HTML-escaped. */
static void rh_text(struct rh *h, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '&': rh_printf(h, "&amp;"); break;
        case '<': rh_printf(h, "&lt;"); break;
        case '>': rh_printf(h, "&gt;"); break;
        case '"': rh_printf(h, "&quot;"); break;
        case '\'': rh_printf(h, "&#39;"); break;
        default: rh_printf(h, "%c", *s);
        }
    }
}

/* v by the report's one rule (findings_fmt; a percentage by findings_fmt_pct, "< 0.01"
 * for a sliver); "–" when not a number. */
static void rh_fmt(struct rh *h, double v, bool pct)
{
    char b[32];
    if (!isfinite(v)) {
        rh_printf(h, "–");
        return;
    }
    (pct ? findings_fmt_pct : findings_fmt)(b, sizeof b, v);
    rh_text(h, b);
}

static void rh_num(struct rh *h, double v)
{
    rh_fmt(h, v, false);
}

static void rh_pct(struct rh *h, double v)
{
    rh_fmt(h, v, true);
}

/* v * scale, a percentage when scale is 100. */
static void rh_scaled(struct rh *h, double v, double scale)
{
    if (scale == 100)
        rh_pct(h, v * scale);
    else
        rh_num(h, v * scale);
}

/* ---- SVG line charts --------------------------------------------------------------------- */

static const char *const rh_colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                        "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"};
#define RH_NCOLORS (sizeof rh_colors / sizeof *rh_colors)

/* The chart's geometry: plot area and the data's range. */
struct rh_axes {
    double x0, x1, y0, y1; /* data range (in log2 on a log axis) */
    double left, top, w, h;
    bool logx, logy;
};

/* Whether (x, y) can be drawn on a's axes. */
static bool rh_drawable(const struct rh_axes *a, double x, double y)
{
    return isfinite(x) && isfinite(y) && (!a->logx || x > 0) && (!a->logy || y > 0);
}

static double rh_px(const struct rh_axes *a, double x)
{
    double v = a->logx ? log2(x) : x;
    return a->left + (a->x1 > a->x0 ? (v - a->x0) / (a->x1 - a->x0) : 0.5) * a->w;
}

static double rh_py(const struct rh_axes *a, double y)
{
    if (a->logy)
        y = log2(y);
    return a->top + a->h - (a->y1 > a->y0 ? (y - a->y0) / (a->y1 - a->y0) : 0.5) * a->h;
}

static void rh_range(const struct report_series *s, size_t ns, struct rh_axes *a)
{
    a->x0 = a->y0 = INFINITY;
    a->x1 = a->y1 = -INFINITY;
    for (size_t i = 0; i < ns; i++)
        for (size_t k = 0; k < s[i].n; k++) {
            double x = s[i].x[k], y = s[i].y[k],
                   e = s[i].err && isfinite(s[i].err[k]) && !a->logy ? s[i].err[k] : 0;
            if (!rh_drawable(a, x, y))
                continue;
            double v = a->logx ? log2(x) : x, w = a->logy ? log2(y) : y;
            a->x0 = fmin(a->x0, v);
            a->x1 = fmax(a->x1, v);
            a->y1 = fmax(a->y1, w + e);
            a->y0 = fmin(a->y0, w - e);
        }
    if (!isfinite(a->x0))
        a->x0 = 0, a->x1 = 1, a->y0 = 0, a->y1 = 1;
    if (a->logy) { /* whole powers of two at both ends */
        a->y0 = floor(a->y0);
        a->y1 = fmax(ceil(a->y1), a->y0 + 1);
        return;
    }
    a->y0 = fmin(a->y0, 0); /* figures of merit start at zero: no exaggerated slopes */
    if (a->y1 <= a->y0)
        a->y1 = a->y0 + 1;
    a->y1 *= 1.05;
}

static void rh_axes_draw(struct rh *h, const struct rh_axes *a, const char *xlabel,
                         const char *ylabel)
{
    rh_printf(h,
              "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' class='ax'/>"
              "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' class='ax'/>",
              a->left, a->top + a->h, a->left + a->w, a->top + a->h, a->left, a->top, a->left,
              a->top + a->h);
    /* y ticks: quarters, or powers of two on a log axis */
    double ystep = a->logy ? fmax(1, ceil((a->y1 - a->y0) / 6)) : (a->y1 - a->y0) / 4;
    for (double v = a->y0; v <= a->y1 + 1e-9; v += ystep) {
        double y = a->logy ? exp2(v) : v;
        rh_printf(h, "<text x='%.1f' y='%.1f' class='tk' text-anchor='end'>", a->left - 4,
                  rh_py(a, y) + 4);
        rh_num(h, y);
        rh_printf(h, "</text><line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' class='gr'/>",
                  a->left, rh_py(a, y), a->left + a->w, rh_py(a, y));
    }
    /* x ticks: integers (powers of two on a log axis) */
    double step = a->logx ? 1 : fmax(1, ceil((a->x1 - a->x0) / 8));
    for (double v = ceil(a->x0); v <= a->x1 + 1e-9; v += step) {
        double x = a->logx ? exp2(v) : v;
        rh_printf(h, "<text x='%.1f' y='%.1f' class='tk' text-anchor='middle'>", rh_px(a, x),
                  a->top + a->h + 16);
        if (a->logx && x >= 1048576)
            rh_printf(h, "%gM", x / 1048576);
        else if (a->logx && x >= 1024)
            rh_printf(h, "%gK", x / 1024);
        else
            rh_printf(h, "%g", x);
        rh_printf(h, "</text>");
    }
    rh_printf(h, "<text x='%.1f' y='%.1f' class='lb' text-anchor='middle'>", a->left + a->w / 2,
              a->top + a->h + 34);
    rh_text(h, xlabel);
    rh_printf(h,
              "</text><text x='14' y='%.1f' class='lb' text-anchor='middle' "
              "transform='rotate(-90 14 %.1f)'>",
              a->top + a->h / 2, a->top + a->h / 2);
    rh_text(h, ylabel);
    rh_printf(h, "</text>");
}

/* Series i's colour: its configuration's, else its position's. */
static const char *rh_color(const struct report_series *s, size_t i)
{
    return rh_colors[(s->color > 0 ? (size_t)s->color - 1 : i) % RH_NCOLORS];
}

/* The line style of a model (dashed) or ideal (dotted) curve. */
static const char *rh_dash(const struct report_series *s)
{
    return s->dashed ? " stroke-dasharray='6 4'" : s->dotted ? " stroke-dasharray='2 3'" : "";
}

static void rh_series_draw(struct rh *h, const struct rh_axes *a, const struct report_series *s,
                           const char *color)
{
    if (s->n == 0) /* a style key: the legend's only */
        return;
    rh_printf(h, "<polyline fill='none' stroke='%s' stroke-width='2'%s points='", color,
              rh_dash(s));
    for (size_t k = 0; k < s->n; k++)
        if (rh_drawable(a, s->x[k], s->y[k]))
            rh_printf(h, "%.1f,%.1f ", rh_px(a, s->x[k]), rh_py(a, s->y[k]));
    rh_printf(h, "'/>");
    if (s->dashed || s->dotted)
        return;
    for (size_t k = 0; k < s->n; k++) {
        if (!rh_drawable(a, s->x[k], s->y[k]))
            continue;
        double px = rh_px(a, s->x[k]), py = rh_py(a, s->y[k]);
        if (s->err && isfinite(s->err[k]) && s->err[k] > 0 && (!a->logy || s->y[k] > s->err[k]))
            rh_printf(h, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='%s'/>", px,
                      rh_py(a, s->y[k] - s->err[k]), px, rh_py(a, s->y[k] + s->err[k]), color);
        rh_printf(h, "<circle cx='%.1f' cy='%.1f' r='3.5' fill='%s'><title>", px, py, color);
        rh_text(h, s->label);
        rh_printf(h, ": ");
        rh_num(h, s->y[k]);
        rh_printf(h, "</title></circle>");
    }
}

/* The legend: the series not marked nolegend, one line each. */
static void rh_legend(struct rh *h, const struct report_series *s, size_t ns, double x0,
                      double y0)
{
    size_t row = 0;
    for (size_t i = 0; i < ns; i++) {
        if (s[i].nolegend)
            continue;
        double y = y0 + RH_LEGEND_LINE * (double)row++;
        rh_printf(
            h,
            "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='%s' stroke-width='2.5'%s/>"
            "<text x='%.1f' y='%.1f' class='lg'>",
            x0, y, x0 + 26, y, rh_color(&s[i], i), rh_dash(&s[i]), x0 + 32, y + 5);
        rh_text(h, s[i].label);
        rh_printf(h, "</text>");
    }
}

int report_svg_lines(struct buf *out, const char *title, const char *xlabel, const char *ylabel,
                     unsigned log, const struct report_series *s, size_t nseries)
{
    struct rh h = {*out, false};
    struct rh_axes a = {.left = 64,
                        .top = 30,
                        .w = 430,
                        .h = 240,
                        .logx = log & REPORT_LOGX,
                        .logy = log & REPORT_LOGY};
    rh_range(s, nseries, &a);
    size_t listed = 0;
    for (size_t i = 0; i < nseries; i++)
        listed += !s[i].nolegend;
    double height = fmax(320, 50 + RH_LEGEND_LINE * (double)listed);
    rh_printf(&h,
              "<figure><svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 820 %.0f' "
              "role='img'><title>",
              height);
    rh_text(&h, title);
    rh_printf(&h, "</title><text x='64' y='18' class='tt'>");
    rh_text(&h, title);
    rh_printf(&h, "</text>");
    rh_axes_draw(&h, &a, xlabel, ylabel);
    for (size_t i = 0; i < nseries; i++)
        rh_series_draw(&h, &a, &s[i], rh_color(&s[i], i));
    rh_legend(&h, s, nseries, 515, 40);
    rh_printf(&h, "</svg></figure>\n");
    *out = h.b;
    return h.oom ? -1 : 0;
}

static void rh_chart(struct rh *h, const char *title, const char *xlabel, const char *ylabel,
                     unsigned log, const struct report_series *s, size_t ns)
{
    if (ns > 0 && report_svg_lines(&h->b, title, xlabel, ylabel, log, s, ns) < 0)
        h->oom = true;
}

/* ---- series from tables ---------------------------------------------------------------- */

/* Series storage: labels and points, owned by the struct (no allocation). */
struct rh_set {
    struct report_series s[RH_MAX_SERIES];
    char label[RH_MAX_SERIES][160];
    double x[RH_MAX_SERIES][RH_MAX_POINTS], y[RH_MAX_SERIES][RH_MAX_POINTS],
        err[RH_MAX_SERIES][RH_MAX_POINTS];
    size_t n;
};

/* The series named label (made when new), or NULL when the set is full. */
static struct report_series *rh_series(struct rh_set *set, const char *label, bool dashed,
                                       bool with_err)
{
    for (size_t i = 0; i < set->n; i++)
        if (strcmp(set->label[i], label) == 0 && set->s[i].dashed == dashed)
            return &set->s[i];
    if (set->n == RH_MAX_SERIES)
        return NULL;
    size_t i = set->n++;
    snprintf(set->label[i], sizeof set->label[i], "%s", label);
    set->s[i] = (struct report_series){.label = set->label[i],
                                       .x = set->x[i],
                                       .y = set->y[i],
                                       .err = with_err ? set->err[i] : NULL,
                                       .dashed = dashed};
    return &set->s[i];
}

static void rh_point(struct rh_set *set, struct report_series *s, double x, double y,
                     double err)
{
    if (!s || s->n == RH_MAX_POINTS || !isfinite(x) || !isfinite(y))
        return;
    size_t i = (size_t)(s - set->s);
    set->x[i][s->n] = x;
    set->y[i][s->n] = y;
    set->err[i][s->n] = err;
    s->n++;
}

/* Row r's label in a chart: the table's group_by fields but skip, and only those whose
 * values differ between the rows (web/js/figures.js rowLabels): a field every series
 * shares names none of them. "all runs" when nothing differs. */
static void rh_label(const json_t *table, const json_t *r, const char *skip, char *out,
                     size_t cap)
{
    const json_t *rows = json_object_get(table, "rows");
    size_t i, k, len = 0;
    json_t *f, *o;
    out[0] = 0;
    json_array_foreach(json_object_get(table, "group_by"), i, f)
    {
        const char *key = json_string_value(f);
        if (!key || (skip && strcmp(key, skip) == 0))
            continue;
        bool differ = false;
        json_array_foreach(rows, k, o)
        {
            const json_t *a = json_object_get(o, key), *b = json_object_get(r, key);
            differ = differ || !((!a && !b) || (a && b && json_equal(a, b)));
        }
        if (!differ)
            continue;
        char val[96];
        findings_value_text(json_object_get(r, key), val, sizeof val);
        /* a strategy or an engine is its own name; other fields say which they are */
        bool bare = strcmp(key, "strategy") == 0 || strcmp(key, "engine") == 0;
        len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "%s%s%s%s",
                                len ? ", " : "", bare ? "" : key, bare ? "" : " ", val);
        if (len >= cap)
            break;
    }
    if (!out[0])
        snprintf(out, cap, "all runs");
}

/* Sorts each series of set by x (rows come in any order). */
static void rh_set_sort(struct rh_set *set)
{
    for (size_t k = 0; k < set->n; k++)
        for (size_t a = 1; a < set->s[k].n; a++)
            for (size_t b = a; b > 0 && set->x[k][b - 1] > set->x[k][b]; b--) {
                double t;
                t = set->x[k][b], set->x[k][b] = set->x[k][b - 1], set->x[k][b - 1] = t;
                t = set->y[k][b], set->y[k][b] = set->y[k][b - 1], set->y[k][b - 1] = t;
                t = set->err[k][b], set->err[k][b] = set->err[k][b - 1], set->err[k][b - 1] = t;
            }
}

/* The style key: a grey entry of no points for the model's (dashed) and the ideal's
 * (dotted) curves, so the legend lists each configuration once. */
static void rh_style_keys(struct rh_set *set)
{
    struct report_series *m = rh_series(set, "model (dashed)", true, false);
    struct report_series *i = rh_series(set, "ideal (dotted)", false, false);
    if (m)
        m->color = 9; /* the palette's grey */
    if (i) {
        i->dotted = true;
        i->color = 9;
    }
}

/* Throughput and efficiency against world size, measured with the predicted and ideal
 * curves: one colour per configuration, listed once; the model dashed and the ideal
 * dotted in the same colour, said once by the style key. */
static void rh_scaling_charts(struct rh *h, const json_t *table, struct rh_set *set)
{
    for (int pass = 0; pass < 2; pass++) {
        set->n = 0;
        size_t i;
        json_t *r;
        int nconf = 0;
        enum column m = pass ? COL_EFFICIENCY : COL_THROUGHPUT;
        json_array_foreach(json_object_get(table, "rows"), i, r)
        {
            char ctx[140], lab[160];
            rh_label(table, r, "world_size", ctx, sizeof ctx);
            double w = findings_col(r, COL_WORLD_SIZE, STAT_NONE);
            struct report_series *ms = rh_series(set, ctx, false, true);
            if (!ms)
                continue;
            /* the palette in order, its grey (9) left to the style key */
            int color = ms->color ? ms->color : (ms->color = nconf++ % 8 + 1);
            rh_point(set, ms, w, findings_col(r, m, pass ? STAT_NONE : STAT_MEAN),
                     pass ? NAN : findings_col(r, COL_THROUGHPUT, STAT_CI95));
            snprintf(lab, sizeof lab, "%s: model", ctx);
            struct report_series *s = rh_series(set, lab, true, false);
            if (s)
                *s = (struct report_series){.label = s->label,
                                            .n = s->n,
                                            .x = s->x,
                                            .y = s->y,
                                            .dashed = true,
                                            .color = color,
                                            .nolegend = true};
            rh_point(
                set, s, w,
                findings_col(r, pass ? COL_PRED_EFFICIENCY : COL_PRED_THROUGHPUT, STAT_NONE),
                NAN);
            /* ideal: the one-rank throughput times N (efficiency 1: one line for all) */
            double base = findings_col(r, COL_THROUGHPUT, STAT_MEAN) /
                          findings_col(r, COL_SPEEDUP, STAT_NONE);
            snprintf(lab, sizeof lab, "%s: ideal", pass ? "all" : ctx);
            s = rh_series(set, lab, false, false);
            if (s)
                *s = (struct report_series){.label = s->label,
                                            .n = s->n,
                                            .x = s->x,
                                            .y = s->y,
                                            .dotted = true,
                                            .color = pass ? 9 : color,
                                            .nolegend = true};
            bool have = false; /* one ideal line for every configuration: each x once */
            for (size_t k = 0; s && k < s->n; k++)
                have = have || s->x[k] == w;
            if (!have)
                rh_point(set, s, w, pass ? 1.0 : base * w, NAN);
        }
        rh_style_keys(set);
        rh_set_sort(set);
        rh_chart(
            h, pass ? "Scaling efficiency against world size" : "Throughput against world size",
            "world size (ranks)", pass ? "efficiency" : "samples/s", false, set->s, set->n);
    }
}

/* Phase p's mean per step in row r, measured or (predicted) as the model predicts it. */
static double rh_phase_ms(const json_t *r, enum phase p, bool predicted)
{
    return findings_col(r, predicted ? COLUMN_OF_PRED_PHASE(p) : COLUMN_OF_PHASE(p), STAT_NONE);
}

/* Each configuration's step as stacked phases: measured beside predicted (the phases
 * that add up to the step, common/columns.h). */
static void rh_phase_chart(struct rh *h, const json_t *table)
{
    enum phase ph[PHASE_N];
    int nph = 0;
    for (int k = 0; k < PHASE_N; k++)
        if (phases_get((enum phase)k)->stacked)
            ph[nph++] = (enum phase)k;
    const json_t *rows = json_object_get(table, "rows");
    size_t n = json_array_size(rows), i;
    json_t *r;
    double top = 0;
    json_array_foreach(rows, i, r) for (int p = 0; p < 2; p++)
    {
        double sum = 0;
        for (int k = 0; k < nph; k++) {
            double v = rh_phase_ms(r, ph[k], p);
            sum += isfinite(v) ? v : 0;
        }
        top = fmax(top, sum);
    }
    if (n == 0 || top <= 0)
        return;
    double bar = 14, gap = 10, left = 230, width = 520;
    double height = 60 + (double)n * (2 * bar + gap);
    rh_printf(
        h,
        "<figure><svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 820 %.0f' "
        "role='img'><title>Step phases, measured and predicted</title><text x='10' y='18' "
        "class='tt'>Step phases per configuration: measured (solid) and predicted "
        "(hatched), ms</text>",
        height);
    for (int k = 0; k < nph; k++)
        rh_printf(h,
                  "<rect x='%d' y='28' width='12' height='10' fill='%s'/><text x='%d' y='37' "
                  "class='lg'>%s</text>",
                  230 + k * 110, rh_colors[k], 246 + k * 110, phases_get(ph[k])->label);
    json_array_foreach(rows, i, r)
    {
        double y = 50 + (double)i * (2 * bar + gap);
        char ctx[160];
        rh_label(table, r, NULL, ctx, sizeof ctx);
        rh_printf(h, "<text x='%.1f' y='%.1f' class='lg' text-anchor='end'>", left - 6,
                  y + bar + 4);
        rh_text(h, ctx);
        rh_printf(h, "</text>");
        for (int p = 0; p < 2; p++) {
            double x = left;
            for (int k = 0; k < nph; k++) {
                double v = rh_phase_ms(r, ph[k], p);
                if (!isfinite(v) || v <= 0)
                    continue;
                double w = v / top * width;
                rh_printf(h,
                          "<rect x='%.1f' y='%.1f' width='%.1f' height='%.0f' fill='%s'%s>"
                          "<title>%s %s: ",
                          x, y + p * bar, w, bar - 1, rh_colors[k],
                          p ? " fill-opacity='0.45' stroke='#333' stroke-dasharray='2 2'" : "",
                          p ? "predicted" : "measured", phases_get(ph[k])->label);
                rh_num(h, v);
                rh_printf(h, " ms</title></rect>");
                x += w;
            }
        }
    }
    rh_printf(h, "</svg></figure>\n");
}

/* "run 12: strategy ddp, world_size 2": a run and its sweep point, as a label. */
static void rh_params_text(const struct db_data_run *run, char *out, size_t cap)
{
    size_t len = (size_t)snprintf(out, cap, "run %lld", (long long)run->id);
    const char *k;
    json_t *v;
    bool first = true;
    json_object_foreach((json_t *)run->params, k, v)
    {
        char val[64];
        if (json_is_number(v))
            findings_fmt(val, sizeof val, json_number_value(v));
        else if (json_is_string(v))
            snprintf(val, sizeof val, "%s", json_string_value(v));
        else
            snprintf(val, sizeof val, "%s", json_is_true(v) ? "true" : "…");
        if (len < cap)
            len += (size_t)snprintf(out + len, cap - len, "%s%s %s", first ? ": " : ", ", k,
                                    val);
        first = false;
    }
}

/* Accuracy per epoch of each run (mean over its repeats), when any run evaluated. */
static void rh_accuracy_chart(struct rh *h, const struct db_experiment_data *d,
                              struct rh_set *set)
{
    set->n = 0;
    for (size_t i = 0; i < d->nruns; i++) {
        const struct db_data_run *run = &d->runs[i];
        char label[160];
        rh_params_text(run, label, sizeof label);
        double sum[RH_MAX_POINTS] = {0};
        int cnt[RH_MAX_POINTS] = {0};
        for (size_t k = 0; k < run->nepochs; k++) {
            const struct report_epoch *ep = &run->epochs[k];
            double a = ep->test_acc >= 0 ? ep->test_acc : ep->train_acc;
            if (ep->epoch >= 0 && ep->epoch < RH_MAX_POINTS && a >= 0) {
                sum[ep->epoch] += a;
                cnt[ep->epoch]++;
            }
        }
        struct report_series *s = NULL;
        for (int k = 0; k < RH_MAX_POINTS; k++)
            if (cnt[k] && (s || (s = rh_series(set, label, false, false))))
                rh_point(set, s, k + 1, sum[k] / cnt[k], NAN);
    }
    size_t longest = 0; /* one epoch a run is a point, not a curve: the table has it */
    for (size_t k = 0; k < set->n; k++)
        longest = set->s[k].n > longest ? set->s[k].n : longest;
    if (longest > 1)
        rh_chart(h, "Accuracy per epoch (test split where evaluated, else training)", "epoch",
                 "accuracy", 0, set->s, set->n);
}

/* The class names of the datasets that have them (their publishers' order), for the
 * per-class table; another dataset's classes are numbered. */
static const char *const rh_names_mnist[] = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};
static const char *const rh_names_fashion[] = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
static const char *const rh_names_cifar10[] = {
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};
static const struct {
    const char *dataset;
    const char *const *names;
} rh_class_names[] = {{"mnist", rh_names_mnist},
                      {"fashion-mnist", rh_names_fashion},
                      {"cifar10", rh_names_cifar10}};
#define RH_NAMED_CLASSES 10
#define RH_MAX_CLASS_COLS 20 /* wider tables are for the results' JSON, not a page */

/* The per-class test accuracy of each run's last epoch (issue 33), one row per run, when
 * any run reported it. */
static void rh_per_class_table(struct rh *h, const struct db_experiment_data *d)
{
    const char *const *names = NULL;
    size_t k = 0;
    for (size_t i = 0; i < d->nruns && k == 0; i++) {
        const struct db_data_run *run = &d->runs[i];
        const json_t *per = run->nepochs ? run->epochs[run->nepochs - 1].test_acc_per_class
                                         : NULL;
        k = json_is_array(per) ? json_array_size(per) : 0;
        const char *ds = json_string_value(
            json_object_get(json_object_get(run->spec, "dataset"), "name"));
        for (size_t j = 0; ds && j < sizeof rh_class_names / sizeof *rh_class_names; j++)
            if (strcmp(ds, rh_class_names[j].dataset) == 0 && k == RH_NAMED_CLASSES)
                names = rh_class_names[j].names;
    }
    if (k == 0 || k > RH_MAX_CLASS_COLS)
        return;
    rh_printf(h, "<h3>Test accuracy per class</h3><p>The last epoch of each run's last "
                 "repeat; – where the test split has no sample of the class.</p>"
                 "<table><tr><th>run</th>");
    for (size_t c = 0; c < k; c++) {
        rh_printf(h, "<th>");
        if (names)
            rh_text(h, names[c]);
        else
            rh_printf(h, "%zu", c);
        rh_printf(h, "</th>");
    }
    rh_printf(h, "</tr>\n");
    for (size_t i = 0; i < d->nruns; i++) {
        const struct db_data_run *run = &d->runs[i];
        const json_t *per = run->nepochs ? run->epochs[run->nepochs - 1].test_acc_per_class
                                         : NULL;
        if (!json_is_array(per) || json_array_size(per) != k)
            continue;
        char label[160];
        rh_params_text(run, label, sizeof label);
        rh_printf(h, "<tr><td>");
        rh_text(h, label);
        rh_printf(h, "</td>");
        for (size_t c = 0; c < k; c++) {
            const json_t *v = json_array_get(per, c);
            if (json_is_number(v)) {
                rh_printf(h, "<td class='n'>");
                rh_pct(h, 100.0 * json_number_value(v));
                rh_printf(h, " %%</td>");
            } else
                rh_printf(h, "<td>–</td>");
        }
        rh_printf(h, "</tr>\n");
    }
    rh_printf(h, "</table>\n");
}

/* Bus bandwidth against message size, one series per operation and configuration. */
static void rh_busbw_chart(struct rh *h, const json_t *table, struct rh_set *set)
{
    set->n = 0;
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(table, "rows"), i, r)
    {
        char ctx[140], lab[160];
        findings_context(table, r, "op", NULL, ctx, sizeof ctx);
        const char *op = json_string_value(json_object_get(r, "op"));
        snprintf(lab, sizeof lab, "%s%s%s", op ? op : "", ctx[0] ? " " : "", ctx);
        rh_point(set, rh_series(set, lab, false, true), findings_col(r, COL_BYTES, STAT_NONE),
                 findings_col(r, COL_BUSBW_GBS, STAT_MEAN),
                 findings_col(r, COL_BUSBW_GBS, STAT_CI95));
    }
    rh_chart(h, "Bus bandwidth against message size", "bytes", "busbw (GB/s)", REPORT_LOGX,
             set->s, set->n);
}

/* Each operation's measured time against size with its fitted line, on log axes: where
 * the line leaves the points, the fit does not describe the collective. */
static void rh_fit_chart(struct rh *h, const json_t *table, const json_t *fits, int64_t exp,
                         struct rh_set *set)
{
    set->n = 0;
    size_t i, k;
    json_t *r, *f;
    json_array_foreach(json_object_get(table, "rows"), i, r)
    {
        char ctx[140], lab[160];
        findings_context(table, r, "op", NULL, ctx, sizeof ctx);
        const char *op = json_string_value(json_object_get(r, "op"));
        snprintf(lab, sizeof lab, "%s%s%s measured", op ? op : "", ctx[0] ? " " : "", ctx);
        double bytes = findings_col(r, COL_BYTES, STAT_NONE);
        rh_point(set, rh_series(set, lab, false, false), bytes,
                 findings_col(r, COL_TIME_US, STAT_MEDIAN), NAN);
        json_array_foreach((json_t *)fits, k, f)
        {
            if (findings_num(f, "experiment") != (double)exp || !op ||
                strcmp(json_string_value(json_object_get(f, "op")), op) != 0 ||
                bytes < findings_num(f, "min_bytes") || bytes > findings_num(f, "max_bytes") ||
                findings_num(f, "world_size") != findings_col(r, COL_WORLD_SIZE, STAT_NONE))
                continue;
            snprintf(lab, sizeof lab, "%s %s fit, %g ranks", op,
                     json_string_value(json_object_get(f, "algorithm")),
                     findings_num(f, "world_size"));
            rh_point(set, rh_series(set, lab, true, false), bytes,
                     findings_num(f, "alpha_us") +
                         findings_num(f, "beta_ns_per_byte") * bytes / 1000,
                     NAN);
        }
    }
    rh_chart(h, "Time per operation against size, measured and fitted (T = α + β·bytes)",
             "bytes", "time (µs)", REPORT_LOGX | REPORT_LOGY, set->s, set->n);
}

/* ---- tables ------------------------------------------------------------------------------ */

/* A column of a report table: a results column's statistic (common/columns.h), and the
 * column and statistic of its interval (ci COL_N: none) and its count when present. */
struct rh_col {
    enum column c;
    enum column_stat st;
    enum column ci;
    enum column_stat ci_st;
    bool n;
    double scale; /* shown as value * scale (fractions as %) */
};

static const struct rh_col rh_train_cols[] = {
    {COL_WORLD_SIZE, STAT_NONE, COL_N, 0, false, 1},
    {COL_THROUGHPUT, STAT_MEAN, COL_THROUGHPUT, STAT_CI95, true, 1},
    {COL_STEP_MS, STAT_MEDIAN, COL_N, 0, false, 1},
    {COL_STEP_MS, STAT_P95, COL_N, 0, false, 1},
    {COL_SPEEDUP, STAT_NONE, COL_SPEEDUP_CI95, STAT_NONE, false, 1},
    {COL_EFFICIENCY, STAT_NONE, COL_N, 0, false, 100},
    {COL_OVERLAP, STAT_NONE, COL_N, 0, false, 100},
    {COLUMN_OF_PHASE(PHASE_COMM_EXPOSED), STAT_NONE, COL_N, 0, false, 1},
    {COL_STRAGGLER_MS, STAT_NONE, COL_N, 0, false, 1},
    {COL_PRED_STEP_MS, STAT_NONE, COL_N, 0, false, 1},
    {COL_PRED_STEP_ERR, STAT_NONE, COL_N, 0, false, 100},
    {COL_PRED_VERDICT, STAT_NONE, COL_N, 0, false, 1},
    {COL_PRED_EFFICIENCY, STAT_NONE, COL_N, 0, false, 100},
    {COL_TEST_ACC, STAT_MEAN, COL_TEST_ACC, STAT_CI95, true, 100},
};

static const struct rh_col rh_coll_cols[] = {
    {COL_BYTES, STAT_NONE, COL_N, 0, false, 1},
    {COL_BUSBW_GBS, STAT_MEAN, COL_BUSBW_GBS, STAT_CI95, true, 1},
    {COL_ALGBW_GBS, STAT_MEAN, COL_ALGBW_GBS, STAT_CI95, false, 1},
    {COL_TIME_US, STAT_MEDIAN, COL_N, 0, false, 1},
    {COL_TIME_US, STAT_P95, COL_N, 0, false, 1},
    {COL_WRONG, STAT_NONE, COL_N, 0, false, 1},
};

/* A report column's heading from the columns table: "step median (ms)", "efficiency (%)"
 * (a fraction shown as a percentage). */
static void rh_col_head(struct rh *h, const struct rh_col *col)
{
    const struct column_info *i = columns_get(col->c);
    const char *stat = col->st == STAT_MEDIAN ? " median" : col->st == STAT_P95 ? " p95" : "";
    const char *unit = col->scale == 100 ? "%" : strcmp(i->unit, "fraction") ? i->unit : "";
    rh_printf(h, "<th>");
    rh_text(h, i->label);
    rh_printf(h, "%s", stat);
    if (unit[0]) {
        rh_printf(h, " (");
        rh_text(h, unit);
        rh_printf(h, ")");
    }
    rh_printf(h, "</th>");
}

static void rh_cell(struct rh *h, const json_t *v)
{
    if (json_is_string(v))
        rh_text(h, json_string_value(v));
    else if (json_is_boolean(v))
        rh_printf(h, "%s", json_is_true(v) ? "yes" : "no");
    else if (json_is_number(v))
        rh_num(h, json_number_value(v));
    else if (json_is_object(v)) { /* an env's nested facts ("mpi"): as compact JSON */
        char *text = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
        rh_text(h, text ? text : "–");
        free(text);
    } else
        rh_printf(h, "–");
}

static void rh_table(struct rh *h, const json_t *table, const struct rh_col *cols, size_t ncols,
                     const char *lead)
{
    const json_t *by = json_object_get(table, "group_by");
    size_t i, k;
    json_t *f, *r;
    rh_printf(h, "<table><thead><tr>");
    if (lead)
        rh_printf(h, "<th>%s</th>", lead);
    json_array_foreach(by, i, f)
    {
        if (json_string_value(f) && strcmp(json_string_value(f), "world_size") == 0)
            continue;
        rh_printf(h, "<th>");
        rh_text(h, json_string_value(f));
        rh_printf(h, "</th>");
    }
    for (k = 0; k < ncols; k++)
        rh_col_head(h, &cols[k]);
    rh_printf(h, "</tr></thead><tbody>\n");
    json_array_foreach(json_object_get(table, "rows"), i, r)
    {
        rh_printf(h, "<tr>");
        if (lead) {
            rh_printf(h, "<td>");
            rh_cell(h, json_object_get(r, lead));
            rh_printf(h, "</td>");
        }
        size_t j;
        json_array_foreach(by, j, f)
        {
            if (json_string_value(f) && strcmp(json_string_value(f), "world_size") == 0)
                continue;
            rh_printf(h, "<td>");
            rh_cell(h, json_object_get(r, json_string_value(f)));
            rh_printf(h, "</td>");
        }
        for (k = 0; k < ncols; k++) {
            char key[COLUMNS_KEY_MAX];
            double v = findings_col(r, cols[k].c, cols[k].st);
            rh_printf(h, "<td class='n'>");
            if (isfinite(v))
                rh_scaled(h, v, cols[k].scale);
            else
                rh_cell(h, json_object_get(r, columns_key(cols[k].c, cols[k].st, key)));
            double ci = cols[k].ci < COL_N ? findings_col(r, cols[k].ci, cols[k].ci_st) : NAN;
            if (isfinite(ci)) {
                rh_printf(h, " <span class='ci'>± ");
                rh_scaled(h, ci, cols[k].scale);
                rh_printf(h, "</span>");
            }
            double n = cols[k].n ? findings_col(r, cols[k].c, STAT_N) : NAN;
            if (n > 0) /* n=0: nothing measured, the cell's "–" says it */
                rh_printf(h, " <span class='ci'>n=%.0f</span>", n);
            rh_printf(h, "</td>");
        }
        rh_printf(h, "</tr>\n");
    }
    rh_printf(h, "</tbody></table>\n");
}

static void rh_fits_table(struct rh *h, const json_t *fits)
{
    if (json_array_size(fits) == 0)
        return;
    static const char *const keys[] = {"id",
                                       "experiment",
                                       "backend",
                                       "op",
                                       "algorithm",
                                       "world_size",
                                       "nodes",
                                       "alpha_us",
                                       "beta_ns_per_byte",
                                       "gamma_ns_per_byte",
                                       "bandwidth_gbs",
                                       "r2",
                                       "worst_residual",
                                       "points"};
    rh_printf(h, "<h2>Network fits</h2><p>T(bytes) = α + β·bytes per operation, fitted by "
                 "least squares on relative residuals; γ, where shown, is the part of β that "
                 "is the reduction's arithmetic.</p><table><thead><tr>");
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
        rh_printf(h, "<th>%s</th>", keys[k]);
    rh_printf(h, "</tr></thead><tbody>");
    size_t i;
    json_t *f;
    json_array_foreach((json_t *)fits, i, f)
    {
        rh_printf(h, "<tr>");
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
            rh_printf(h, "<td class='n'>");
            rh_cell(h, json_object_get(f, keys[k]));
            rh_printf(h, "</td>");
        }
        rh_printf(h, "</tr>\n");
    }
    rh_printf(h, "</tbody></table>\n");
}

/* ---- the page ---------------------------------------------------------------------------- */

/* Print: no forced page break anywhere; headings kept with what follows them; a figure
 * or a table row never split; a long block (the appendix's spec) flows over pages, so no
 * page holds a heading alone. */
static const char rh_style[] =
    "<style>\n"
    "body{font:14px/1.45 system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;"
    "color:#222}\n"
    "h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}\n"
    "h3{margin:1.4em 0 .4em}h4{margin:1em 0 .3em;font-size:1em}\n"
    "table{border-collapse:collapse;margin:.6em 0;font-size:12px}\n"
    "th,td{border:1px solid #ccc;padding:3px 6px}th{background:#f2f2f2;text-align:left}\n"
    "td.n{text-align:right;white-space:nowrap}.ci{color:#666}\n"
    "pre{background:#f6f6f6;padding:.6em;overflow:auto;font-size:12px}\n"
    "pre.spec{column-count:2;column-gap:2em}\n"
    "figure{margin:1em 0}svg{width:100%;height:auto;max-width:820px}\n"
    ".ax{stroke:#444}.gr{stroke:#e4e4e4}.tk{font-size:12px;fill:#333}"
    ".lg{font-size:13px;fill:#222}.lb{font-size:13px;fill:#222}"
    ".tt{font-size:14px;font-weight:600}\n"
    "ol.findings li,ol.summary li{margin:.35em 0}.meta{color:#555}\n"
    "ol.summary{background:#f6f8fa;border-left:3px solid #1f77b4;padding:.5em 1em .5em 2.5em}\n"
    "@media print{body{margin:0;max-width:none;font-size:10pt}a{color:inherit;"
    "text-decoration:none}h1,h2,h3,h4{break-after:avoid;page-break-after:avoid}"
    "h2,h3,h4{break-inside:avoid}figure,tr,li{break-inside:avoid;page-break-inside:avoid}"
    "table{font-size:8pt}pre{white-space:pre-wrap;font-size:8pt;overflow:visible}"
    "svg{max-width:16cm}.noprint{display:none}}\n"
    "</style>\n";

/* "Experiment 3: name" as a heading of level lvl. */
static void rh_exp_heading(struct rh *h, int lvl, const struct db_experiment_data *d)
{
    rh_printf(h, "<h%d>Experiment %lld: ", lvl, (long long)d->id);
    rh_text(h, d->name);
    rh_printf(h, "</h%d>", lvl);
}

/* The compact setup of experiment d: the spec's fields that differ from their defaults
 * (spec_nondefault), and the sweep; the whole spec is the appendix's. */
static void rh_setup(struct rh *h, struct db *db, const struct db_experiment_data *d)
{
    struct err e = {0};
    json_t *exp = db_get_experiment(db, d->id, &e);
    const json_t *spec = json_object_get(exp, "spec");
    json_t *diff = spec ? spec_nondefault(spec) : NULL;
    rh_printf(h, "<h3>Setup</h3><p>The fields set apart from their defaults (the whole spec is "
                 "in the appendix).</p><table><tbody>");
    const char *k;
    json_t *v;
    json_object_foreach(diff, k, v)
    {
        if (strcmp(k, "name") == 0)
            continue;
        rh_printf(h, "<tr><th>");
        rh_text(h, k);
        rh_printf(h, "</th><td>");
        rh_cell(h, v);
        rh_printf(h, "</td></tr>");
    }
    json_object_foreach(json_object_get(spec, "sweep"), k, v)
    {
        char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        rh_printf(h, "<tr><th>sweep ");
        rh_text(h, k);
        rh_printf(h, "</th><td>");
        rh_text(h, text ? text : "–");
        rh_printf(h, "</td></tr>");
        free(text);
    }
    rh_printf(h, "</tbody></table>\n");
    json_decref(diff);
    json_decref(exp);
}

/* The appendix entry of experiment d: its spec as submitted and the environment its first
 * run captured. */
static void rh_appendix(struct rh *h, struct db *db, const struct db_experiment_data *d)
{
    struct err e = {0};
    json_t *exp = db_get_experiment(db, d->id, &e);
    char *spec = exp ? json_dumps(json_object_get(exp, "spec"),
                                  JSON_INDENT(1) | JSON_SORT_KEYS | JSON_REAL_PRECISION(12))
                     : NULL;
    rh_exp_heading(h, 3, d);
    rh_printf(h, "<h4>Spec as submitted</h4><pre class='spec'>");
    rh_text(h, spec ? spec : "(not available)");
    rh_printf(h, "</pre>");
    free(spec);
    json_decref(exp);
    json_t *run = d->nruns ? db_get_run(db, d->runs[0].id, &e) : NULL;
    const json_t *env = json_object_get(json_array_get(json_object_get(run, "env"), 0), "env");
    if (json_is_object(env)) {
        rh_printf(h, "<h4>Environment of run %lld, rank 0</h4><table><tbody>",
                  (long long)d->runs[0].id);
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)env, k, v)
        {
            rh_printf(h, "<tr><th>");
            rh_text(h, k);
            rh_printf(h, "</th><td>");
            rh_cell(h, v);
            rh_printf(h, "</td></tr>");
        }
        rh_printf(h, "</tbody></table>\n");
    }
    json_decref(run);
}

/* Everything the page needs, loaded before a word is written. */
struct rh_doc {
    struct db_experiment_data data[16];
    json_t *tables[16];
    size_t n;
    struct perf_fit *fits; /* of the collective experiments named, else the latest */
    size_t nfits;
    json_t *fits_json;
};

static void rh_doc_free(struct rh_doc *d)
{
    for (size_t i = 0; i < d->n; i++) {
        db_experiment_data_free(&d->data[i]);
        json_decref(d->tables[i]);
    }
    free(d->fits);
    json_decref(d->fits_json);
}

static int rh_doc_load(struct db *db, const int64_t *ids, size_t n, int max_world,
                       struct rh_doc *d, struct err *e)
{
    memset(d, 0, sizeof *d);
    int64_t coll[16];
    size_t ncoll = 0;
    for (size_t i = 0; i < n && i < 16; i++) {
        if (db_get_experiment_data(db, ids[i], &d->data[i], e) < 0) {
            db_experiment_data_free(&d->data[i]);
            return -1;
        }
        d->n++;
        if (strcmp(d->data[i].workload, "collective") == 0)
            coll[ncoll++] = ids[i];
    }
    const json_t *spec = NULL; /* the first run's: its backend picks the default fits */
    for (size_t i = 0; i < d->n && !spec; i++)
        spec = d->data[i].nruns > 0 ? d->data[i].runs[0].spec : NULL;
    if (model_fits_choose(db, coll, ncoll, spec, &d->fits, &d->nfits, e) < 0)
        return -1;
    perf_fits_restrict(d->fits, &d->nfits, max_world);
    d->fits_json = json_array();
    for (size_t i = 0; i < d->nfits; i++)
        json_array_append_new(d->fits_json, model_fit_json(&d->fits[i]));
    struct calib_set cals = {0}; /* the rows' contention, as their results table has it */
    int rc = calib_load(db, &cals, e);
    for (size_t i = 0; rc == 0 && i < d->n; i++)
        if (!(d->tables[i] = results_build_calibrated(&d->data[i], NULL, 0, d->fits, d->nfits,
                                                      &cals, e)))
            rc = -1;
    calib_set_free(&cals);
    return rc;
}

/* Which co-location the table's multi-rank predictions applied (docs/model.md §6): the
 * stored calibrations its rows name, else the core-share rule. A reader cannot tell from
 * the numbers whether a measured slowdown or the rule stands behind them. */
static void rh_colocation(struct rh *h, const json_t *t)
{
    const json_t *r;
    size_t i, predicted = 0, calibrated = 0, nid = 0;
    json_int_t ids[8];
    json_array_foreach(json_object_get(t, "rows"), i, r)
    {
        if (json_integer_value(json_object_get(r, "world_size")) <= 1 ||
            !json_is_number(json_object_get(r, "pred_step_ms")))
            continue;
        predicted++;
        const json_t *c = json_object_get(r, "pred_calibration");
        if (!json_is_integer(c))
            continue;
        calibrated++;
        size_t k = 0;
        while (k < nid && ids[k] != json_integer_value(c))
            k++;
        if (k == nid && nid < sizeof ids / sizeof *ids)
            ids[nid++] = json_integer_value(c);
    }
    if (predicted == 0)
        return;
    if (calibrated == 0) {
        rh_printf(h, "<p>Co-location: no calibration of this node and model is stored, so "
                     "ranks sharing a node are slowed by the core-share rule (a spec with "
                     "<code>calibrate</code> measures it).</p>");
        return;
    }
    rh_printf(h,
              "<p>Co-location: %zu of %zu multi-rank predictions apply the measured "
              "calibration%s",
              calibrated, predicted, nid > 1 ? "s" : "");
    for (size_t k = 0; k < nid; k++)
        rh_printf(h, "%s %lld", k == 0 ? "" : ",", (long long)ids[k]);
    rh_printf(h, " (<code>GET /v1/calibrations/{id}</code>)%s.</p>",
              calibrated < predicted ? "; the others the core-share rule" : "");
}

static void rh_experiment(struct rh *h, struct db *db, const struct rh_doc *doc, size_t i,
                          struct rh_set *set)
{
    const struct db_experiment_data *d = &doc->data[i];
    const json_t *t = doc->tables[i];
    time_t created = (time_t)d->created_at;
    char when[64] = "";
    struct tm tm;
    if (gmtime_r(&created, &tm))
        strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm);
    rh_exp_heading(h, 2, d);
    rh_printf(h, "<p class='meta'>%s workload, %zu runs, %s, submitted %s.</p>", d->workload,
              d->nruns, d->status, when);
    rh_setup(h, db, d);
    rh_printf(h, "<h3>Results</h3>");
    if (strcmp(d->workload, "train") == 0) {
        rh_printf(h, "<p>Step times over non-warm-up steps (the slowest rank's); intervals are "
                     "95%% confidence over repeats; predictions come from each configuration's "
                     "one-rank run and the network fits below.</p>");
        rh_colocation(h, t);
        rh_table(h, t, rh_train_cols, sizeof rh_train_cols / sizeof *rh_train_cols, NULL);
        rh_scaling_charts(h, t, set);
        rh_phase_chart(h, t);
        rh_accuracy_chart(h, d, set);
        rh_per_class_table(h, d);
    } else {
        rh_table(h, t, rh_coll_cols, sizeof rh_coll_cols / sizeof *rh_coll_cols, "op");
        rh_busbw_chart(h, t, set);
        rh_fit_chart(h, t, doc->fits_json, d->id, set);
    }
}

/* A topic's heading in the findings ("model" is "Model agreement"). */
static const char *rh_topic_title(const char *topic)
{
    static const struct {
        const char *topic, *title;
    } titles[] = {{"scaling", "Scaling"},       {"communication", "Communication"},
                  {"model", "Model agreement"}, {"accuracy", "Accuracy"},
                  {"faults", "Faults"},         {"fits", "Network fits"}};
    for (size_t i = 0; i < sizeof titles / sizeof *titles; i++)
        if (strcmp(topic, titles[i].topic) == 0)
            return titles[i].title;
    return topic;
}

/* The findings of table (an index, -1: the fits) on topic, as a numbered list under the
 * topic's heading; nothing when there are none. */
static void rh_topic(struct rh *h, const json_t *findings, int table, const char *topic)
{
    size_t i, n = 0;
    json_t *f;
    json_array_foreach(findings, i, f)
    {
        if (json_integer_value(json_object_get(f, "table")) != table ||
            strcmp(json_string_value(json_object_get(f, "topic")), topic) != 0)
            continue;
        if (n++ == 0) { /* the fits are every experiment's: a section of their own */
            rh_printf(h, "<h%d>", table < 0 ? 3 : 4);
            rh_text(h, rh_topic_title(topic));
            rh_printf(h, "</h%d><ol class='findings'>", table < 0 ? 3 : 4);
        }
        rh_printf(h, "<li data-rule='%s'>", json_string_value(json_object_get(f, "rule")));
        rh_text(h, json_string_value(json_object_get(f, "text")));
        rh_printf(h, "</li>\n");
    }
    if (n)
        rh_printf(h, "</ol>\n");
}

/* The summary: the conclusions the figures support at 95 % confidence
 * (findings_summary), each naming its experiment when the report has several. */
static void rh_summary(struct rh *h, const struct rh_doc *doc, const json_t *findings)
{
    json_t *sum = findings_summary(findings, 5);
    rh_printf(h, "<h2>Summary</h2>");
    if (json_array_size(sum) == 0)
        rh_printf(h, "<p>No conclusion is supported at 95%% confidence: the intervals of "
                     "every comparison overlap, or the runs had one repeat and so no "
                     "interval. The findings below state each figure.</p>\n");
    else
        rh_printf(h, "<p>The conclusions the measurements support at 95%% confidence (the "
                     "intervals apart, or a speed-up's interval excluding 1), and the "
                     "model's agreement:</p><ol class='summary'>");
    size_t i;
    json_t *f;
    json_array_foreach(sum, i, f)
    {
        json_int_t t = json_integer_value(json_object_get(f, "table"));
        rh_printf(h, "<li data-summary='%s'>", json_string_value(json_object_get(f, "rule")));
        if (doc->n > 1 && t >= 0 && (size_t)t < doc->n) {
            rh_printf(h, "<b>Experiment %lld:</b> ", (long long)doc->data[t].id);
        }
        rh_text(h, json_string_value(json_object_get(f, "text")));
        rh_printf(h, "</li>\n");
    }
    if (json_array_size(sum))
        rh_printf(h, "</ol>\n");
    json_decref(sum);
}

/* The findings: per experiment (a heading naming it), per topic in findings_topic_at's
 * order, numbered within each; the fits' last. */
static void rh_findings(struct rh *h, const struct rh_doc *doc, const json_t *findings)
{
    rh_printf(h, "<h2>Findings</h2>");
    if (json_array_size(findings) == 0)
        rh_printf(h, "<p>No finding: the stored figures are too few (a run still going, or "
                     "one configuration only).</p>");
    size_t i;
    json_t *f;
    for (int t = -1; t < (int)doc->n; t++) {
        bool any = false;
        json_array_foreach(findings, i, f)
            any = any || json_integer_value(json_object_get(f, "table")) == t;
        if (!any || t == -1) /* the fits come last */
            continue;
        rh_exp_heading(h, 3, &doc->data[t]);
        for (size_t k = 0; findings_topic_at(k); k++)
            rh_topic(h, findings, t, findings_topic_at(k));
    }
    bool fits = false;
    json_array_foreach(findings, i, f)
        fits = fits || json_integer_value(json_object_get(f, "table")) == -1;
    if (fits) /* its topic heading says it: "Network fits" */
        rh_topic(h, findings, -1, "fits");
}

char *report_html_build(struct db *db, const int64_t *ids, size_t n, int max_world, size_t *len,
                        struct err *e)
{
    struct rh_doc doc;
    if (rh_doc_load(db, ids, n, max_world, &doc, e) < 0) {
        rh_doc_free(&doc);
        return NULL;
    }
    struct rh_set *set = malloc(sizeof *set);
    struct rh h = {.oom = false};
    buf_init(&h.b);
    json_t *findings = findings_build((const json_t *const *)doc.tables, doc.n, doc.fits_json);
    char when[64] = "";
    time_t now = (time_t)clock_wall_s();
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm);
    rh_printf(&h,
              "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>ddpbench "
              "report: ");
    rh_text(&h, doc.data[0].name);
    rh_printf(&h, "</title>%s</head><body>\n<h1>ddpbench report: ", rh_style);
    rh_text(&h, doc.data[0].name);
    rh_printf(&h, "</h1><p class='meta'>Experiments");
    for (size_t i = 0; i < doc.n; i++) {
        rh_printf(&h, "%s %lld (", i ? "," : "", (long long)doc.data[i].id);
        rh_text(&h, doc.data[i].name);
        rh_printf(&h, ")");
    }
    rh_printf(&h,
              ". Generated %s by ddpbenchd; performance model version %d. Numbers carry "
              "three significant digits, shares under %g %% print as &lt; %g %%, and ± is "
              "a 95 %% confidence interval.</p>\n",
              when, PERF_MODEL_VERSION, FINDINGS_PCT_FLOOR, FINDINGS_PCT_FLOOR);
    if (max_world > 0)
        rh_printf(&h,
                  "<p class='meta'>The extrapolation check: the predictions use only the "
                  "network fits measured at world sizes up to %d (pred_max_world), so a row "
                  "beyond them is an extrapolation, marked in its model range.</p>\n",
                  max_world);
    rh_summary(&h, &doc, findings);
    rh_findings(&h, &doc, findings);
    for (size_t k = 0; set && k < doc.n; k++)
        rh_experiment(&h, db, &doc, k, set);
    rh_fits_table(&h, doc.fits_json);
    rh_printf(&h, "<h2>Appendix: specs and environments</h2>");
    for (size_t k = 0; k < doc.n; k++)
        rh_appendix(&h, db, &doc.data[k]);
    rh_printf(&h, "<p class='meta'>Metric definitions: docs/design.md §13; the model and how "
                  "an error is judged against noise: docs/model.md.</p></body></html>\n");
    json_decref(findings);
    free(set);
    rh_doc_free(&doc);
    if (h.oom || !set) {
        buf_free(&h.b);
        err_set(e, ERR_NOMEM, NULL, "report: out of memory");
        return NULL;
    }
    *len = h.b.len;
    return (char *)h.b.data; /* NUL-terminated: buf_printf */
}
