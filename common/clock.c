/* clock: see clock.h. */
#include "common/clock.h"

#include <math.h>
#include <stdio.h>
#include <time.h>

int64_t clock_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t clock_mono_ms(void)
{
    return clock_mono_ns() / 1000000LL;
}

double clock_wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int clock_ms_left(int64_t deadline_ms)
{
    if (deadline_ms < 0)
        return -1;
    int64_t left = deadline_ms - clock_mono_ms();
    if (left <= 0)
        return 0;
    return left > 0x7fffffff ? 0x7fffffff : (int)left;
}

void clock_format_iso(double unix_s, char *out, int outlen)
{
    time_t sec = (time_t)floor(unix_s);
    int ms = (int)((unix_s - (double)sec) * 1000.0);
    if (ms > 999)
        ms = 999;
    struct tm tm;
    gmtime_r(&sec, &tm);
    snprintf(out, (size_t)outlen, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}
