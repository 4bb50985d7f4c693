/* wait_note: what a rank's working thread is blocked in, for its heartbeat ("allreduce
 * bucket 3/7", "broadcast params", "barrier"), so that when a peer freezes the daemon's
 * failure names the collective each healthy rank waits in (daemon/monitor.c).
 *
 * Decision: a wait is a few numbers, not text: the working thread stores the kind, the
 * operation and up to three counts in atomics before a blocking call and clears the kind
 * after it (no allocation, no formatting, no syscall on the training path), and only the
 * heartbeat thread formats them, once a second, with wait_note_text: every phase string
 * of a wait is written there, once. A reader may see a wait's fields half updated while
 * the next wait begins; a wait that lasts (the one a frozen peer causes) reads whole.
 *
 * Ownership: the heartbeat owns the note (worker/heartbeat.h); struct comm carries a
 * borrowed pointer for the code that waits, NULL when nothing reads it. */
#ifndef DDPB_WAIT_NOTE_H
#define DDPB_WAIT_NOTE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/comm/comm.h"

enum wait_kind {
    WAIT_NONE = 0,
    WAIT_BUCKET,  /* op of gradient bucket a of b (1-based) */
    WAIT_PARAMS,  /* broadcast of the initial parameters */
    WAIT_BUFFERS, /* broadcast of the initial buffers (batch-norm statistics) */
    WAIT_PLAN,    /* broadcast of horovod's fusion plan */
    WAIT_METRICS, /* allreduce of the step's loss and accuracy */
    WAIT_ITER,    /* collective benchmark: op of `bytes`, iteration a of b (0: warm-up) */
    WAIT_BARRIER, /* barrier */
};

struct wait_note {
    atomic_int kind; /* enum wait_kind; WAIT_NONE: not waiting */
    atomic_int op;   /* enum comm_op */
    atomic_int_fast64_t a, b, bytes;
};

/* Records that the calling thread is about to block in `kind` (op, counts as the kind
 * says). n may be NULL (nothing reads it): then nothing happens. */
void wait_note_begin(struct wait_note *n, enum wait_kind kind, enum comm_op op, int64_t a,
                     int64_t b, int64_t bytes);
/* The wait ended. n may be NULL. */
void wait_note_end(struct wait_note *n);
/* The current wait as text into buf ("allreduce bucket 3/7"); "" when none. */
void wait_note_text(const struct wait_note *n, char *buf, size_t cap);

#endif
