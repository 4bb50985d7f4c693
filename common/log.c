/* log: see log.h. One write(2) per line; level read without a lock (an int). */
#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static enum log_level log_level_now = LOG_INFO;
static char log_tag[32] = "ddpbench";

void log_set_level(enum log_level level)
{
    log_level_now = level;
}

int log_parse_level(const char *s, enum log_level *out)
{
    static const char *names[] = {"debug", "info", "warn", "error", "off"};
    for (int i = 0; i <= LOG_OFF; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = (enum log_level)i;
            return 0;
        }
    }
    return -1;
}

void log_set_tag(const char *tag)
{
    snprintf(log_tag, sizeof log_tag, "%s", tag);
}

void log_write(enum log_level level, const char *file, int line, const char *fmt, ...)
{
    static const char letters[] = "DIWE";
    if (level < log_level_now || level >= LOG_OFF)
        return;
    char out[1024];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    int n = snprintf(out, sizeof out, "%02d:%02d:%02d.%03ld %c %s %s:%d ", tm.tm_hour,
                     tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000L, letters[level], log_tag, base,
                     line);
    if (n < 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(out + n, sizeof out - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof out - 2)
        len = sizeof out - 2;
    out[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, out, len);
    (void)w;
}
