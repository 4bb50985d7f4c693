/* report_html: GET /v1/experiments/{id}/report (issue 18): one self-contained HTML page a
 * researcher could hand in, built from what is stored: the setup (each experiment's spec
 * and the environment its first run captured), the findings (findings.h), the results
 * tables with their intervals and the model's predictions, the fits, and the charts
 * (throughput and efficiency against world size with the predicted curve and the ideal
 * line, phases measured against predicted, accuracy per epoch, bus bandwidth against
 * size).
 *
 * Decisions:
 * - Charts are inline SVG written here, with no script and no external file: the page is
 *   one file that opens offline, archives, and prints (a print stylesheet drops the
 *   colours of the screen and keeps each figure on one page).
 * - Several experiments make one report: a collective experiment named beside a training
 *   one supplies the fits its predictions use (else the latest finished collective
 *   experiment on the same backend does, as GET .../results does).
 * - Every text from a user (names, spec values) is HTML-escaped.
 *
 * Ownership: the returned page is malloc'd (free()). */
#ifndef DDPB_REPORT_HTML_H
#define DDPB_REPORT_HTML_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/err.h"
#include "daemon/db.h"

/* The report of experiments ids[0..n) (n >= 1), in that order. max_world > 0: its
 * predictions use only fits measured at world sizes <= max_world (the extrapolation check,
 * docs/model.md "Extrapolation"); 0: every fit. ERR_NOT_FOUND. */
char *report_html_build(struct db *db, const int64_t *ids, size_t n, int max_world, size_t *len,
                        struct err *e);

/* The chart primitive, exposed for its test: one SVG line chart of nseries series. */
struct report_series {
    const char *label;
    size_t n;
    const double *x, *y;
    const double *err; /* half-widths of error bars, or NULL */
    bool dashed;       /* a model curve: dashed line, no markers */
    bool dotted;       /* an ideal curve: dotted line, no markers */
    int color;         /* 1 + the palette index (series of one configuration share it); 0:
                          the series' position */
    bool nolegend;     /* not listed: a style key entry (a series of no points) says it */
};
#define REPORT_LOGX 1u /* a base-2 axis */
#define REPORT_LOGY 2u
/* Appends an <svg> to out. log: REPORT_LOGX and/or REPORT_LOGY. -1 on no memory. */
int report_svg_lines(struct buf *out, const char *title, const char *xlabel, const char *ylabel,
                     unsigned log, const struct report_series *s, size_t nseries);

#endif
