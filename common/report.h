/* report: the worker → daemon event lines (one JSON object per line on fd 3).
 * This header is the contract; DESIGN.md §3 "Reports".
 *
 * Decision: events are JSON (jansson) so a human can read a rank's pipe and the daemon
 * can store them verbatim, but every event has a fixed shape validated here on both
 * sides: the worker builds events only through these functions and the daemon accepts
 * only lines report_parse_line validates. Nothing parses worker stdout.
 *
 * Every event carries "type", "rank" (int >= 0) and "t" (Unix seconds, float).
 *   hello       pid (int), host (str), world_size (int)
 *   env         env (object of string/number values: versions, cpu model, kernel, ...)
 *   progress    done (int), total (int), phase (str)
 *   collective  the fields of struct report_collective
 *   error       code (str: an err_code_name), message (str), where (str "file:line"),
 *               optional op (str), optional peer (int)
 *   done        (nothing else)
 * Later issues add step and epoch with their own structs. */
#ifndef DDPB_REPORT_H
#define DDPB_REPORT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define REPORT_MAX_LINE (256u << 10)

enum report_type {
    REPORT_HELLO,
    REPORT_ENV,
    REPORT_PROGRESS,
    REPORT_COLLECTIVE,
    REPORT_ERROR,
    REPORT_DONE,
};

/* One size point of a collective benchmark, as rank 0 reports it after combining every
 * rank's per-iteration times (time of an iteration = slowest rank's). */
struct report_collective {
    int repeat;
    char op[24];        /* "allreduce", ... */
    char dtype[16];     /* "float32", ... */
    char redop[8];      /* "sum", ... */
    char algorithm[16]; /* the algorithm actually used: "ring", ... */
    bool inplace;
    int64_t bytes; /* message size per rank in bytes */
    int64_t count; /* elements */
    int iters;
    double time_us_min, time_us_median, time_us_p95, time_us_mean, time_us_max;
    double algbw_gbs, busbw_gbs; /* from time_us_median; GB/s = 1e9 bytes/s */
    int64_t wrong;               /* elements that differ from the expected result, all ranks */
};

const char *report_type_name(enum report_type t);

/* Parses and validates one line (without its newline). Returns an owned object (caller
 * json_decref's) and sets *type, or NULL with e set (ERR_INVALID / ERR_TOO_LARGE). */
json_t *report_parse_line(const char *line, size_t len, enum report_type *type, struct err *e);

/* Converts a validated collective event to/from the struct. to_json returns an owned
 * object carrying every field of the struct but not type/rank/t. */
int report_collective_from_json(const json_t *obj, struct report_collective *out,
                                struct err *e);
json_t *report_collective_to_json(const struct report_collective *c);

/* Worker side: writes events as single lines to fd. */
struct report_writer {
    int fd;   /* borrowed; -1 = discard */
    int rank;
};

void report_writer_init(struct report_writer *w, int fd, int rank);
/* Adds type, rank and t to `fields` (stolen: always decref'd) and writes the line.
 * Returns -1 with e set when the write fails (the daemon is gone). */
int report_emit(struct report_writer *w, enum report_type type, json_t *fields, struct err *e);
int report_emit_hello(struct report_writer *w, int world_size, struct err *e);
int report_emit_collective(struct report_writer *w, const struct report_collective *c,
                           struct err *e);
int report_emit_progress(struct report_writer *w, const char *phase, int64_t done,
                         int64_t total, struct err *e);
/* peer < 0 and op NULL omit those fields. */
int report_emit_error(struct report_writer *w, const struct err *cause, const char *where,
                      const char *op, int peer, struct err *e);
int report_emit_done(struct report_writer *w, struct err *e);

#endif
