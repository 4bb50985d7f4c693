/* sse: an incremental parser of Server-Sent Events text (the WHATWG event-stream format)
 * for the CLI's `submit --watch`.
 *
 * Decision: the parser is fed whatever chunks the transport hands over (libcurl's write
 * callback splits anywhere, even between "\r" and "\n") and keeps only the unfinished
 * line and the event being built, so it never needs the whole stream; a line longer than
 * SSE_MAX_LINE is an error instead of unbounded memory. It knows nothing of HTTP. */
#ifndef DDPB_CLI_SSE_H
#define DDPB_CLI_SSE_H

#include <stddef.h>

#include "common/buf.h"
#include "common/err.h"

#define SSE_MAX_LINE (4u << 20)

/* One dispatched event. All strings are borrowed, valid only during the callback; data
 * is NUL-terminated (multi-line data joined with "\n"). type is "message" when the event
 * named none; id is "" when it carried none (the last id seen is in the parser). */
struct sse_event {
    const char *type;
    const char *id;
    const char *data;
    size_t data_len;
};

/* Returns 0 to go on, non-zero to stop: sse_feed then returns that value. */
typedef int (*sse_event_fn)(void *arg, const struct sse_event *ev);

struct sse_parser {
    struct buf line; /* owned: the unfinished line */
    struct buf data; /* owned: data lines of the event being built */
    char type[64];
    char id[64];      /* id of the event being built */
    char last_id[64]; /* last id dispatched (for a reconnect's Last-Event-ID) */
    int after_cr;     /* the previous chunk ended in "\r": a leading "\n" belongs to it */
    size_t events;    /* events dispatched so far */
    size_t comments;  /* comment lines seen (heartbeats) */
    sse_event_fn fn;
    void *arg;
};

/* fn/arg are borrowed. */
void sse_init(struct sse_parser *p, sse_event_fn fn, void *arg);
void sse_cleanup(struct sse_parser *p);
/* Forgets any partial line or event (a new connection); keeps last_id and counters. */
void sse_reset(struct sse_parser *p);
/* Parses len bytes. Returns 0, the callback's non-zero value when it asked to stop, or
 * -1 with e set (ERR_TOO_LARGE: a line over SSE_MAX_LINE; ERR_NOMEM). */
int sse_feed(struct sse_parser *p, const char *chunk, size_t len, struct err *e);

#endif
