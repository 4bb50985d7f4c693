/* log: see log.h. One write(2) per line; level read without a lock (an int).
 *
 * Decision: the message is escaped here, once, for every caller: a control character
 * (below 0x20, and DEL) becomes \xNN, so a user's string in a message (dataset.path, a
 * run's error text, a node name) can neither start a forged line with "\n" nor move the
 * terminal with "\x1b[". Bytes from 0x80 pass as they are (UTF-8 text). */
#include "common/log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LOG_LINE_MAX 1024

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

/* msg's first len bytes (cut at its size) into out (cap bytes, no NUL), control
 * characters as \xNN; returns the bytes written. */
static size_t log_escape(const char *msg, size_t len, char *out, size_t cap)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    if (len >= LOG_LINE_MAX)
        len = LOG_LINE_MAX - 1;
    for (size_t i = 0; i < len && msg[i]; i++) {
        unsigned char ch = (unsigned char)msg[i];
        bool ctl = ch < 0x20 || ch == 0x7f;
        if (o + (ctl ? 4 : 1) > cap)
            break;
        if (ctl) {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[ch >> 4];
            out[o++] = hex[ch & 15];
        } else {
            out[o++] = (char)ch;
        }
    }
    return o;
}

void log_write(enum log_level level, const char *file, int line, const char *fmt, ...)
{
    static const char letters[] = "DIWE";
    if (level < log_level_now || level >= LOG_OFF)
        return;
    char out[LOG_LINE_MAX];
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
    char msg[sizeof out];
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n +
                 log_escape(msg, m < 0 ? 0 : (size_t)m, out + n, sizeof out - 1 - (size_t)n);
    out[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, out, len);
    (void)w;
}
