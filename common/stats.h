/* stats: the summary statistics every figure shown to a user carries (docs/design.md §13
 * "Metrics": sample count, mean with its 95% confidence interval, median, p95, min, max).
 *
 * Decision: one implementation shared by the worker (per-iteration collective times) and
 * the daemon (results tables), so a median or a p95 means the same thing everywhere:
 * median = mean of the two middle values for even n; p95 = nearest rank, the
 * ceil(0.95 n)-th smallest value; ci95 = t(0.975, n-1) * sample sd / sqrt(n), with the
 * Student t quantile computed exactly for every df (inverting the regularized incomplete
 * beta function), and NaN (shown as null) below two samples: a CI from one sample is
 * never shown.
 *
 * The Student-t interval holds only for independent samples. Consecutive training steps
 * are not (a slow phase of the machine slows a run of steps), so pooling every step as a
 * sample gives an interval far too narrow. A step-time interval is therefore taken over
 * independent units (stats_ci95_series):
 *   - two or more repeats (runs x repeats): one mean per repeat, t with (repeats - 1) df;
 *   - one repeat: batch means, its steps in order cut into k = min(10, steps / 2)
 *     contiguous batches (at least 2 steps each), t with (k - 1) df over the k batch means;
 *     fewer than 4 steps have no interval. */
#ifndef DDPB_STATS_H
#define DDPB_STATS_H

#include <stddef.h>

struct stats_summary {
    size_t n;
    double mean, ci95; /* ci95: half-width of the 95% interval of the mean; NaN for n < 2 */
    double median, p95, min, max;
};

/* Summarizes v[0..n) (v is sorted in place). n = 0 gives all zeros (ci95 NaN). */
void stats_summarize(double *v, size_t n, struct stats_summary *out);
/* Median of sorted values (mean of the middle two for even n); 0 for n = 0. */
double stats_median_sorted(const double *sorted, size_t n);
/* Nearest-rank percentile of sorted values: the ceil(pct/100 * n)-th smallest (at least
 * the first); 0 for n = 0. */
double stats_percentile_sorted(const double *sorted, size_t n, double pct);
/* Two-sided 95% Student t quantile, t(0.975, df), exact to double precision for every
 * df >= 1 (NaN for df = 0). */
double stats_t95(size_t df);
/* Half-width of the 95% interval of the mean of n independent samples v (not modified);
 * NaN for n < 2. */
double stats_ci95(const double *v, size_t n);
/* The most batches a single repeat is cut into for batch means. */
#define STATS_MAX_BATCHES 10
/* Half-width of the 95% interval of a step time by the rule above: series[0..n) are the
 * steps of every repeat in order, repeat r's steps from start[r] to start[r + 1] (or n),
 * nrep repeats (nrep >= 1, start[0] = 0). NaN where no interval can be computed. */
double stats_ci95_series(const double *series, size_t n, const size_t *start, size_t nrep);

#endif
