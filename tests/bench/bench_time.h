/* bench_time: the clock and the median the CPU engine's C benchmarks (nn_bench,
 * conv_bench) share, so both read time and summarise rounds the same way. Header-only:
 * each benchmark is one program of its own. */
#ifndef DDPB_BENCH_TIME_H
#define DDPB_BENCH_TIME_H

#include <stdlib.h>
#include <time.h>

/* Seconds on clk: CLOCK_MONOTONIC (wall) or CLOCK_PROCESS_CPUTIME_ID (every thread's CPU
 * time, for a machine shared with other work). */
static inline double bench_time_now(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline int bench_time_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) (the upper one for even n); sorts v in place. */
static inline double bench_time_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_time_cmp);
    return v[n / 2];
}

#endif
