/* log: leveled, timestamped lines on stderr.
 *
 * Decision: the level and the process tag ("ddpbenchd", "worker r3") are module state set
 * once at start-up by main(); logging is the one cross-cutting concern where threading a
 * struct through every call would cost more clarity than it buys. Each line is written
 * with a single write(2) so lines from threads and ranks do not interleave. */
#ifndef DDPB_LOG_H
#define DDPB_LOG_H

enum log_level { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR, LOG_OFF };

void log_set_level(enum log_level level);
/* Parses "debug", "info", "warn", "error", "off"; returns -1 when unknown. */
int log_parse_level(const char *s, enum log_level *out);
/* tag is copied. */
void log_set_tag(const char *tag);
/* One line: control characters in the formatted message come out as \\xNN (log.c). */
void log_write(enum log_level level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define log_debug(...) log_write(LOG_DEBUG, __FILE__, __LINE__, __VA_ARGS__)
#define log_info(...) log_write(LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define log_warn(...) log_write(LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define log_error(...) log_write(LOG_ERROR, __FILE__, __LINE__, __VA_ARGS__)

#endif
