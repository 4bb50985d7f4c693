/* stats: see stats.h. */
#include "common/stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double stats_t95(size_t df)
{
    /* two-sided 95% quantiles of Student's t for 1..30 degrees of freedom */
    static const double t[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306,
                               2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
                               2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
                               2.060,  2.056, 2.052, 2.048, 2.045, 2.042};
    if (df == 0)
        return 0;
    if (df <= 30)
        return t[df - 1];
    if (df <= 60)
        return 2.000;
    if (df <= 120)
        return 1.980;
    return 1.960;
}

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

void stats_summarize(double *v, size_t n, struct stats_summary *out)
{
    memset(out, 0, sizeof *out);
    out->n = n;
    if (n == 0)
        return;
    qsort(v, n, sizeof *v, stats_cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    out->mean = sum / (double)n;
    double ss = 0;
    for (size_t i = 0; i < n; i++)
        ss += (v[i] - out->mean) * (v[i] - out->mean);
    if (n > 1)
        out->ci95 = stats_t95(n - 1) * sqrt(ss / (double)(n - 1)) / sqrt((double)n);
    out->median = stats_median_sorted(v, n);
    out->p95 = stats_percentile_sorted(v, n, 95);
    out->min = v[0];
    out->max = v[n - 1];
}
