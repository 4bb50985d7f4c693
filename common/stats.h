/* stats: the summary statistics every figure shown to a user carries (DESIGN.md §4
 * "Metrics": sample count, mean with its 95% confidence interval, median, p95, min, max).
 *
 * Decision: one implementation shared by the worker (per-iteration collective times) and
 * the daemon (results tables), so a median or a p95 means the same thing everywhere:
 * median = mean of the two middle values for even n; p95 = nearest rank, the
 * ceil(0.95 n)-th smallest value; ci95 = Student t(n-1) * sample sd / sqrt(n). */
#ifndef DDPB_STATS_H
#define DDPB_STATS_H

#include <stddef.h>

struct stats_summary {
    size_t n;
    double mean, ci95; /* ci95: half-width of the 95% interval of the mean; 0 for n < 2 */
    double median, p95, min, max;
};

/* Summarizes v[0..n) (v is sorted in place). n = 0 gives all zeros. */
void stats_summarize(double *v, size_t n, struct stats_summary *out);
/* Median of sorted values (mean of the middle two for even n); 0 for n = 0. */
double stats_median_sorted(const double *sorted, size_t n);
/* Nearest-rank percentile of sorted values: the ceil(pct/100 * n)-th smallest (at least
 * the first); 0 for n = 0. */
double stats_percentile_sorted(const double *sorted, size_t n, double pct);
/* Two-sided 95% Student t quantile for df degrees of freedom (0 for df = 0). */
double stats_t95(size_t df);

#endif
