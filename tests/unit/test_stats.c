/* Unit tests for common/stats: exact Student t quantiles against published values, no
 * interval from one sample, and the step-time interval rule (over repeats when there are
 * two or more, batch means within a single repeat), each expected value worked by hand. */
#include <math.h>
#include <stddef.h>

#include "common/stats.h"
#include "tests/unit/test.h"

/* t(0.975, df) to 4 decimals, from the published tables; 31, 45 and 60 are the dfs the
 * old step table rounded to 2.000. */
static void test_stats_t95_exact(void)
{
    static const struct {
        size_t df;
        double t;
    } known[] = {{1, 12.7062}, {2, 4.3027},  {3, 3.1824},  {10, 2.2281},  {30, 2.0423},
                 {31, 2.0395}, {45, 2.0141}, {60, 2.0003}, {120, 1.9799}, {1000, 1.9623}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        T_CHECK_MSG(fabs(stats_t95(known[i].df) - known[i].t) < 5e-5, "df %zu: %.6f, want %.4f",
                    known[i].df, stats_t95(known[i].df), known[i].t);
    /* falls with df towards the normal quantile 1.959964 */
    for (size_t df = 1; df < 400; df++)
        T_CHECK_MSG(stats_t95(df + 1) < stats_t95(df), "df %zu", df);
    T_NEAR(stats_t95(100000000), 1.959964, 1e-5);
    T_CHECK(isnan(stats_t95(0)));
}

static void test_stats_summarize(void)
{
    double v[] = {5, 1, 4, 2, 3};
    struct stats_summary s;
    stats_summarize(v, 5, &s);
    T_EQ_INT(s.n, 5);
    T_NEAR(s.mean, 3.0, 1e-12);
    T_NEAR(s.median, 3.0, 1e-12);
    T_NEAR(s.p95, 5.0, 1e-12); /* nearest rank: ceil(0.95*5) = 5th */
    T_NEAR(s.min, 1.0, 1e-12);
    T_NEAR(s.max, 5.0, 1e-12);
    /* sd = sqrt(2.5); t(0.975, 4) = 2.776445 */
    T_NEAR(s.ci95, 2.776445 * sqrt(2.5) / sqrt(5.0), 1e-5);
    double w[] = {1, 2, 3, 4};
    stats_summarize(w, 4, &s);
    T_NEAR(s.median, 2.5, 1e-12);
    /* one sample has a mean and no interval */
    double one[] = {7};
    stats_summarize(one, 1, &s);
    T_CHECK(isnan(s.ci95));
    T_NEAR(s.mean, 7.0, 0);
    T_NEAR(s.p95, 7.0, 0);
    stats_summarize(NULL, 0, &s);
    T_EQ_INT(s.n, 0);
    T_CHECK(isnan(s.ci95));
    T_CHECK(isnan(stats_ci95(one, 1)));
}

/* Two or more repeats: the interval is over one mean per repeat, whatever the steps. */
static void test_stats_series_over_repeats(void)
{
    /* repeat means 2, 4, 6 (sd 2); the steps inside each vary widely, which pooled steps
     * would count as 9 samples */
    double v[] = {1, 3, 2, 0, 8, 4, 6, 6, 6};
    size_t start[] = {0, 3, 6};
    T_NEAR(stats_ci95_series(v, 9, start, 3), stats_t95(2) * 2.0 / sqrt(3.0), 1e-12);
    /* a repeat with no timed step is no sample: two repeats left, means 2 and 6 */
    double u[] = {1, 3, 2, 6, 6, 6};
    size_t start2[] = {0, 3, 3};
    T_NEAR(stats_ci95_series(u, 6, start2, 3), stats_t95(1) * sqrt(8.0) / sqrt(2.0), 1e-12);
    /* identical repeat means: zero width, not null (the runs agree) */
    double same[] = {1, 3, 2, 2};
    size_t start3[] = {0, 2};
    T_NEAR(stats_ci95_series(same, 4, start3, 2), 0.0, 0);
}

/* One repeat: batch means over contiguous batches, which sees a drift that pooling the
 * steps as independent samples would hide behind a narrow interval. */
static void test_stats_series_batch_means(void)
{
    /* 20 steps -> 10 batches of 2: batch means 1.5, 3.5, ..., 19.5 (sd = 2 * sd(1..10)) */
    double v[20];
    for (int i = 0; i < 20; i++)
        v[i] = i + 1;
    size_t start[] = {0};
    double sd = 2 * sqrt(110.0 / 12.0); /* sd of 1..10 is sqrt(n(n+1)/12) */
    T_NEAR(stats_ci95_series(v, 20, start, 1), stats_t95(9) * sd / sqrt(10.0), 1e-9);
    /* 5 steps -> 2 batches [0,2) and [2,5): means 1.5 and 4 */
    double w[] = {1, 2, 3, 4, 5};
    T_NEAR(stats_ci95_series(w, 5, start, 1), stats_t95(1) * sqrt(2 * 1.25 * 1.25) / sqrt(2.0),
           1e-9);
    /* a trending series: batch means are wider than pooled independent samples */
    double trend[100];
    for (int i = 0; i < 100; i++)
        trend[i] = 10 + 0.1 * i + (i % 2 ? 0.05 : -0.05);
    T_CHECK(stats_ci95_series(trend, 100, start, 1) > 2 * stats_ci95(trend, 100));
    /* fewer than 4 steps: not two batches of two, no interval */
    T_CHECK(isnan(stats_ci95_series(w, 3, start, 1)));
    T_CHECK(!isnan(stats_ci95_series(w, 4, start, 1)));
    T_CHECK(isnan(stats_ci95_series(NULL, 0, start, 1)));
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_stats_t95_exact);
    TEST_RUN(test_stats_summarize);
    TEST_RUN(test_stats_series_over_repeats);
    TEST_RUN(test_stats_series_batch_means);
    return test_end();
}
