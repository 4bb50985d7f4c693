/* stats: see stats.h. */
#include "common/stats.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* --- Student t quantile ------------------------------------------------------------------ */

/* log Gamma(x); lgamma_r because lgamma writes the global signgam, and the daemon builds
 * results on several threads at once. */
static double stats_lgamma(double x)
{
    int sign;
    return lgamma_r(x, &sign);
}

/* Continued fraction of the incomplete beta function (modified Lentz), x < (a+1)/(a+b+2)
 * where it converges fast; y = 1 - x is passed as computed by the caller. */
static double stats_beta_cf(double a, double b, double x)
{
    const double tiny = 1e-300, eps = 1e-16;
    double c = 1, d = 1 - (a + b) * x / (a + 1);
    d = 1 / (fabs(d) < tiny ? tiny : d);
    double h = d;
    for (int m = 1; m <= 100000; m++) {
        double m2 = 2.0 * m;
        /* even then odd step of the fraction */
        double num[2] = {m * (b - m) * x / ((a - 1 + m2) * (a + m2)),
                         -(a + m) * (a + b + m) * x / ((a + m2) * (a + 1 + m2))};
        double del = 1;
        for (int k = 0; k < 2; k++) {
            d = 1 + num[k] * d;
            d = 1 / (fabs(d) < tiny ? tiny : d);
            c = 1 + num[k] / c;
            c = fabs(c) < tiny ? tiny : c;
            del = d * c;
            h *= del;
        }
        if (fabs(del - 1) < eps)
            break;
    }
    return h;
}

/* Regularized incomplete beta I_x(a, b), with y = 1 - x given separately so that x near 1
 * (large df) keeps its precision. */
static double stats_ibeta(double a, double b, double x, double y)
{
    if (x <= 0)
        return 0;
    if (y <= 0)
        return 1;
    double front = exp(stats_lgamma(a + b) - stats_lgamma(a) - stats_lgamma(b) + a * log(x) +
                       b * log(y));
    if (x < (a + 1) / (a + b + 2))
        return front * stats_beta_cf(a, b, x) / a;
    return 1 - front * stats_beta_cf(b, a, y) / b;
}

/* P(|T| > t) for Student's t with df degrees of freedom: I_{df/(df+t^2)}(df/2, 1/2). */
static double stats_t_two_tail(double t, double df)
{
    double t2 = t * t;
    return stats_ibeta(df / 2, 0.5, df / (df + t2), t2 / (df + t2));
}

double stats_t95(size_t df)
{
    if (df == 0)
        return NAN;
    /* Bisection on t: the two-sided tail falls monotonically in t, so bisection cannot
     * diverge the way Newton can on the flat tails of df = 1; it runs until the bracket
     * cannot shrink in double precision. t(0.975, 1) = 12.7062 is the largest quantile. */
    double lo = 0, hi = 16, d = (double)df;
    for (int i = 0; i < 200; i++) {
        double mid = 0.5 * (lo + hi);
        if (mid <= lo || mid >= hi)
            break;
        if (stats_t_two_tail(mid, d) > 0.05)
            lo = mid;
        else
            hi = mid;
    }
    return 0.5 * (lo + hi);
}

/* --- summaries -------------------------------------------------------------------------- */

static int stats_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double stats_median_sorted(const double *sorted, size_t n)
{
    if (n == 0)
        return 0;
    return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

double stats_percentile_sorted(const double *sorted, size_t n, double pct)
{
    if (n == 0)
        return 0;
    double r = ceil(pct / 100.0 * (double)n);
    size_t rank = r < 1 ? 1 : (r > (double)n ? n : (size_t)r);
    return sorted[rank - 1];
}

/* Student-t half-width from n samples with sum of squared deviations ss (n >= 2). */
static double stats_half_width(size_t n, double ss)
{
    return stats_t95(n - 1) * sqrt(ss / (double)(n - 1)) / sqrt((double)n);
}

static double stats_mean_of(const double *v, size_t n)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    return sum / (double)n;
}

double stats_ci95(const double *v, size_t n)
{
    if (n < 2)
        return NAN;
    double mean = stats_mean_of(v, n), ss = 0;
    for (size_t i = 0; i < n; i++)
        ss += (v[i] - mean) * (v[i] - mean);
    return stats_half_width(n, ss);
}

void stats_summarize(double *v, size_t n, struct stats_summary *out)
{
    memset(out, 0, sizeof *out);
    out->n = n;
    out->ci95 = stats_ci95(v, n);
    if (n == 0)
        return;
    qsort(v, n, sizeof *v, stats_cmp_double);
    out->mean = stats_mean_of(v, n);
    out->median = stats_median_sorted(v, n);
    out->p95 = stats_percentile_sorted(v, n, 95);
    out->min = v[0];
    out->max = v[n - 1];
}

/* --- intervals of autocorrelated series ------------------------------------------------- */

/* Batch means of one repeat's steps: k contiguous batches whose sizes differ by at most
 * one step, so none is left out. */
static double stats_ci95_batch_means(const double *v, size_t n)
{
    size_t k = n / 2 < STATS_MAX_BATCHES ? n / 2 : STATS_MAX_BATCHES;
    double means[STATS_MAX_BATCHES];
    if (k < 2)
        return NAN;
    for (size_t b = 0; b < k; b++) {
        size_t from = b * n / k, to = (b + 1) * n / k;
        means[b] = stats_mean_of(v + from, to - from);
    }
    return stats_ci95(means, k);
}

/* One past repeat r's last step. */
static size_t stats_repeat_end(size_t n, const size_t *start, size_t nrep, size_t r)
{
    return r + 1 < nrep ? start[r + 1] : n;
}

/* Mean of repeat r's steps into *mean; false when it has none (no sample). */
static bool stats_repeat_mean(const double *series, size_t n, const size_t *start, size_t nrep,
                              size_t r, double *mean)
{
    size_t from = start[r], to = stats_repeat_end(n, start, nrep, r);
    if (to <= from)
        return false;
    *mean = stats_mean_of(series + from, to - from);
    return true;
}

double stats_ci95_series(const double *series, size_t n, const size_t *start, size_t nrep)
{
    /* two passes over the repeat means (no allocation): their mean, then their spread */
    size_t k = 0, last = 0;
    double sum = 0, ss = 0, m;
    for (size_t r = 0; r < nrep; r++)
        if (stats_repeat_mean(series, n, start, nrep, r, &m)) {
            sum += m;
            k++;
            last = r;
        }
    if (k == 0)
        return NAN;
    if (k == 1)
        return stats_ci95_batch_means(series + start[last],
                                      stats_repeat_end(n, start, nrep, last) - start[last]);
    for (size_t r = 0; r < nrep; r++)
        if (stats_repeat_mean(series, n, start, nrep, r, &m))
            ss += (m - sum / (double)k) * (m - sum / (double)k);
    return stats_half_width(k, ss);
}
