/* nccl_watch: see nccl_watch.h. The order of the checks in a poll is the decision: the
 * abort flag first (a cancelled run must stop even while NCCL is healthy), then the
 * communicator's asynchronous error (the most specific reason), then completion, and the
 * timeout last, so an operation that completed in the same poll as its deadline passed
 * counts as completed. */
#include "worker/comm/nccl_watch.h"

#include <stdio.h>
#include <string.h>

void nccl_watch_init(struct nccl_watch *w, const struct nccl_watch_ops *ops, void *ctx,
                     int timeout_ms, const atomic_bool *abort_flag,
                     const atomic_bool *stop_flag)
{
    memset(w, 0, sizeof *w);
    w->ops = ops;
    w->ctx = ctx;
    w->abort_flag = abort_flag;
    w->stop_flag = stop_flag;
    w->timeout_ms = timeout_ms > 0 ? timeout_ms : 1;
    w->started_ms = -1;
}

void nccl_watch_begin(struct nccl_watch *w, const char *what)
{
    snprintf(w->what, sizeof w->what, "%s", what);
    w->started_ms = w->ops->now_ms(w->ctx);
}

void nccl_watch_end(struct nccl_watch *w)
{
    w->started_ms = -1;
}

const char *nccl_watch_verdict_name(enum nccl_watch_verdict v)
{
    switch (v) {
    case NCCL_WATCH_OK: return "ok";
    case NCCL_WATCH_ERROR: return "error";
    case NCCL_WATCH_TIMEOUT: return "timeout";
    case NCCL_WATCH_ABORTED: return "aborted";
    }
    return "unknown";
}

/* Records the first bad verdict and aborts the communicator, once. */
static enum nccl_watch_verdict nccl_watch_trip(struct nccl_watch *w, enum nccl_watch_verdict v,
                                               const char *msg)
{
    if (w->verdict != NCCL_WATCH_OK)
        return w->verdict;
    w->verdict = v;
    snprintf(w->msg, sizeof w->msg, "%s", msg);
    w->ops->abort(w->ctx);
    return v;
}

enum nccl_watch_verdict nccl_watch_poll(struct nccl_watch *w)
{
    if (w->verdict != NCCL_WATCH_OK)
        return w->verdict;
    char msg[300], why[256] = "";
    if ((w->abort_flag && atomic_load_explicit(w->abort_flag, memory_order_relaxed)) ||
        (w->stop_flag && atomic_load_explicit(w->stop_flag, memory_order_relaxed))) {
        snprintf(msg, sizeof msg, "%s: aborted on request while in flight",
                 w->what[0] ? w->what : "nccl");
        return nccl_watch_trip(w, NCCL_WATCH_ABORTED, msg);
    }
    if (w->ops->async_error(w->ctx, why, sizeof why) < 0) {
        snprintf(msg, sizeof msg, "%s: NCCL asynchronous error: %s",
                 w->what[0] ? w->what : "nccl", why);
        return nccl_watch_trip(w, NCCL_WATCH_ERROR, msg);
    }
    if (w->started_ms >= 0) {
        int64_t ran = w->ops->now_ms(w->ctx) - w->started_ms;
        if (ran >= w->timeout_ms) {
            snprintf(msg, sizeof msg,
                     "%s: not complete after %lld ms (timeout %d ms): a rank is stuck, dead "
                     "or slow; the communicator was aborted",
                     w->what, (long long)ran, w->timeout_ms);
            return nccl_watch_trip(w, NCCL_WATCH_TIMEOUT, msg);
        }
    }
    return NCCL_WATCH_OK;
}

enum nccl_watch_verdict nccl_watch_wait(struct nccl_watch *w, void (*pause)(void *ctx))
{
    for (;;) {
        char why[256] = "";
        int done;
        if (w->ops->op_done) {
            done = w->ops->op_done(w->ctx, why, sizeof why);
        } else {
            int st = w->ops->async_error(w->ctx, why, sizeof why);
            done = st == 0 ? 1 : st == 1 ? 0 : -1;
        }
        if (done < 0) {
            char msg[300];
            snprintf(msg, sizeof msg, "%s: %s", w->what, why);
            return nccl_watch_trip(w, NCCL_WATCH_ERROR, msg);
        }
        if (done == 1 && w->verdict == NCCL_WATCH_OK) {
            nccl_watch_end(w);
            return NCCL_WATCH_OK;
        }
        enum nccl_watch_verdict v = nccl_watch_poll(w);
        if (v != NCCL_WATCH_OK)
            return v;
        if (pause)
            pause(w->ctx);
    }
}
