/* clock: see clock.h. */
#include "common/clock.h"

#include <math.h>
#include <stddef.h>
#include <string.h>
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

/* Writes v (0 <= v < 10^width) as exactly width decimal digits at p; returns the end. */
static char *clock_put_digits(char *p, int64_t v, int width)
{
    for (int i = width - 1; i >= 0; i--, v /= 10)
        p[i] = (char)('0' + v % 10);
    return p + width;
}

/* Days since 1970-01-01 → proleptic Gregorian year, month (1-12), day (1-31): Howard
 * Hinnant's civil_from_days, exact for every day and free of the time-zone lock glibc's
 * gmtime_r takes on every call. */
static void clock_civil_from_days(int64_t days, int64_t *y, int *m, int *d)
{
    days += 719468;
    int64_t era = (days >= 0 ? days : days - 146096) / 146097;
    int64_t doe = days - era * 146097;                                   /* [0, 146096] */
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365; /* [0, 399] */
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);               /* [0, 365] */
    int64_t mp = (5 * doy + 2) / 153; /* [0, 11], from March */
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

/* Decision: digits written by hand, not snprintf. Every time in every JSON reply passes
 * through here (a list page of 20 experiments formats 60), and snprintf's format
 * parsing plus gmtime_r's lock were an eighth of the list's CPU (tests/bench/RESULTS.md).
 * Times outside years 0000-9999, which no clock here produces, are clamped into them so
 * the text always has this one shape. */
void clock_format_iso(double unix_s, char *out, int outlen)
{
    const double lo = -62167219200000.0, hi = 253402300799999.0; /* ms: 0000-01-01, 9999 */
    double ms_total = floor(unix_s * 1000.0); /* exact: integers below 2^53 */
    if (!(ms_total >= lo))                    /* NaN too */
        ms_total = lo;
    if (ms_total > hi)
        ms_total = hi;
    int64_t msi = (int64_t)ms_total;
    int64_t sec = (msi >= 0 ? msi : msi - 999) / 1000, ms = msi - sec * 1000;
    int64_t days = (sec >= 0 ? sec : sec - 86399) / 86400, rem = sec - days * 86400;
    int64_t year;
    int month, day;
    clock_civil_from_days(days, &year, &month, &day);
    char text[sizeof "2026-11-22T10:04:05.123Z"], *p = text;
    p = clock_put_digits(p, year, 4);
    *p++ = '-';
    p = clock_put_digits(p, month, 2);
    *p++ = '-';
    p = clock_put_digits(p, day, 2);
    *p++ = 'T';
    p = clock_put_digits(p, rem / 3600, 2);
    *p++ = ':';
    p = clock_put_digits(p, rem / 60 % 60, 2);
    *p++ = ':';
    p = clock_put_digits(p, rem % 60, 2);
    *p++ = '.';
    p = clock_put_digits(p, ms, 3);
    *p++ = 'Z';
    if (outlen <= 0)
        return;
    size_t n = (size_t)(p - text) < (size_t)outlen - 1 ? (size_t)(p - text)
                                                       : (size_t)outlen - 1;
    memcpy(out, text, n);
    out[n] = '\0';
}
