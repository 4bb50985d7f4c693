/* wait_note: see wait_note.h. The phrases of every kind of wait are here. */
#include "worker/comm/wait_note.h"

#include <inttypes.h>
#include <stdio.h>

void wait_note_begin(struct wait_note *n, enum wait_kind kind, enum comm_op op, int64_t a,
                     int64_t b, int64_t bytes)
{
    if (!n)
        return;
    atomic_store_explicit(&n->op, (int)op, memory_order_relaxed);
    atomic_store_explicit(&n->a, a, memory_order_relaxed);
    atomic_store_explicit(&n->b, b, memory_order_relaxed);
    atomic_store_explicit(&n->bytes, bytes, memory_order_relaxed);
    atomic_store_explicit(&n->kind, (int)kind, memory_order_release); /* the fields first */
}

void wait_note_end(struct wait_note *n)
{
    if (n)
        atomic_store_explicit(&n->kind, WAIT_NONE, memory_order_release);
}

void wait_note_text(const struct wait_note *n, char *buf, size_t cap)
{
    int kind = atomic_load_explicit(&n->kind, memory_order_acquire); /* then the fields */
    const char *op = comm_op_name(
        (enum comm_op)atomic_load_explicit(&n->op, memory_order_relaxed));
    int64_t a = atomic_load_explicit(&n->a, memory_order_relaxed);
    int64_t b = atomic_load_explicit(&n->b, memory_order_relaxed);
    int64_t bytes = atomic_load_explicit(&n->bytes, memory_order_relaxed);
    switch ((enum wait_kind)kind) {
    case WAIT_NONE: snprintf(buf, cap, "%s", ""); break;
    case WAIT_BUCKET: snprintf(buf, cap, "%s bucket %" PRId64 "/%" PRId64, op, a, b); break;
    case WAIT_PARAMS: snprintf(buf, cap, "%s", "broadcast params"); break;
    case WAIT_BUFFERS: snprintf(buf, cap, "%s", "broadcast buffers"); break;
    case WAIT_PLAN: snprintf(buf, cap, "%s", "broadcast fusion plan"); break;
    case WAIT_METRICS: snprintf(buf, cap, "%s", "allreduce metrics"); break;
    case WAIT_ITER:
        if (a == 0)
            snprintf(buf, cap, "%s of %" PRId64 " bytes, warm-up", op, bytes);
        else
            snprintf(buf, cap, "%s of %" PRId64 " bytes, iteration %" PRId64 "/%" PRId64, op,
                     bytes, a, b);
        break;
    case WAIT_BARRIER: snprintf(buf, cap, "%s", "barrier"); break;
    default: snprintf(buf, cap, "%s", "?"); break;
    }
}
