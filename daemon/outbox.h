/* outbox: a follower's events waiting for the leader (daemon/follower.h), and the reply
 * it buffers from the leader.
 *
 * Decisions (issue 31 defect 6):
 * - Sizes are what goes on the wire: an event's encoded JSON, escapes included (a line of
 *   control characters grows six-fold), so a batch under batch_bytes is a body under the
 *   leader's --max-body.
 * - The outbox is capped by bytes as well as by count: report lines are up to 256 KiB.
 * - A batch the leader refuses as too large (413) is not sent again as is: the next batch
 *   is half its size, down to one event; one event alone too large is taken out and
 *   handed back to the caller, whose run then fails naming why. The batch size returns
 *   to its default once the leader accepts one.
 * - The leader's reply is buffered up to a cap (defect 1): past it the transfer stops
 *   with a named error rather than growing without bound.
 *
 * Ownership: the outbox owns its events; outbox_push steals one; outbox_batch returns a
 * new array holding references. */
#ifndef DDPB_OUTBOX_H
#define DDPB_OUTBOX_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"

struct outbox {
    json_t *events;     /* owned array, oldest first */
    size_t bytes;       /* their encoded size */
    size_t batch_bytes; /* default batch size (encoded bytes) */
    size_t batch_max;   /* this batch's: smaller after a 413 */
    size_t cap_bytes, cap_count;
};

/* An empty outbox; false when out of memory. */
bool outbox_init(struct outbox *o, size_t batch_bytes, size_t cap_bytes, size_t cap_count);
void outbox_free(struct outbox *o);
/* The encoded size of ev (JSON_COMPACT). */
size_t outbox_size_of(const json_t *ev);
/* Appends ev (stolen); false (ev dropped, logged) when the caps are reached. */
bool outbox_push(struct outbox *o, json_t *ev);
size_t outbox_count(const struct outbox *o);
/* The first events up to batch_max encoded bytes (always one at least, when any) as a new
 * array (owned); their count into *n. */
json_t *outbox_batch(struct outbox *o, size_t *n);
/* The leader took the first n events: removed; the batch size back to its default. */
void outbox_accepted(struct outbox *o, size_t n);
/* The leader answered 413 to a batch of n: with n > 1 the next batch is half as large and
 * NULL is returned; with n == 1 that event is taken out and returned (owned). */
json_t *outbox_refused_too_large(struct outbox *o, size_t n);
/* Removes every event (a new session: those runs are over). */
void outbox_clear(struct outbox *o);

/* A reply body buffered up to cap bytes. */
struct outbox_reply {
    struct buf body;
    size_t cap;
    bool over; /* the reply was longer than cap: cut, not to be used */
};

/* libcurl's write callback over an outbox_reply (ctx): n bytes taken, or 0 (the transfer
 * stops) once the reply would pass its cap. */
size_t outbox_reply_take(char *p, size_t size, size_t n, void *ctx);

#endif
