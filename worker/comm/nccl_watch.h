/* nccl_watch: the NCCL backend's watchdog as a state machine over injected functions, so
 * every decision (error, timeout, abort flag, abort exactly once) is tested on a machine
 * without a GPU; worker/comm/nccl.c plugs ncclCommGetAsyncError, cudaEventQuery and
 * ncclCommAbort into it.
 *
 * Decision: one watcher per communicator, polled (nccl_watch_poll) by whoever waits for
 * NCCL: the thread that initialises the communicator and the thread that waits for an
 * operation's completion event. Polling from the waiter (instead of a separate thread)
 * means no second thread touches the communicator while NCCL runs an operation, and the
 * abort happens on the thread that would otherwise hang. An operation is timed from
 * nccl_watch_begin; the verdict is sticky: once the communicator is aborted every later
 * poll reports the same verdict and message, and abort() has been called exactly once.
 *
 * Ownership: the watcher borrows ctx, the abort flag and the functions; it allocates
 * nothing. */
#ifndef DDPB_NCCL_WATCH_H
#define DDPB_NCCL_WATCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum nccl_watch_verdict {
    NCCL_WATCH_OK = 0,  /* nothing wrong: the operation runs or is done */
    NCCL_WATCH_ERROR,   /* the communicator reported an asynchronous error */
    NCCL_WATCH_TIMEOUT, /* the operation ran longer than the timeout */
    NCCL_WATCH_ABORTED, /* the abort flag was raised (SIGTERM, cancel) */
};

/* What the watcher asks of the backend; ctx is the backend's communicator. */
struct nccl_watch_ops {
    int64_t (*now_ms)(void *ctx);
    /* 0: no error; 1: still in progress (non-blocking init or enqueue); -1: an error,
     * described in msg (NUL-terminated, at most len bytes) */
    int (*async_error)(void *ctx, char *msg, size_t len);
    /* 1: the watched operation has completed on the device; 0: not yet; -1: the device
     * reported an error (msg as above). NULL: operations are not watched (init only). */
    int (*op_done)(void *ctx, char *msg, size_t len);
    /* Called once, on the first non-OK verdict: ncclCommAbort. */
    void (*abort)(void *ctx);
};

struct nccl_watch {
    const struct nccl_watch_ops *ops; /* borrowed */
    void *ctx;                        /* borrowed */
    const atomic_bool *abort_flag;    /* borrowed, may be NULL */
    const atomic_bool *stop_flag;     /* borrowed, may be NULL: the comm's own stop */
    int timeout_ms;                   /* > 0 */
    int64_t started_ms;               /* -1: no operation in flight */
    char what[32];                    /* the operation in flight ("allreduce", "init") */
    enum nccl_watch_verdict verdict;  /* sticky once not OK */
    char msg[300];                    /* why, once not OK */
};

/* abort_flag (the worker's) and stop_flag (comm_destroy's) both count as an abort. */
void nccl_watch_init(struct nccl_watch *w, const struct nccl_watch_ops *ops, void *ctx,
                     int timeout_ms, const atomic_bool *abort_flag,
                     const atomic_bool *stop_flag);
/* An operation (or the communicator's initialisation) starts now; `what` names it. */
void nccl_watch_begin(struct nccl_watch *w, const char *what);
/* It is over (its completion was observed). */
void nccl_watch_end(struct nccl_watch *w);

/* One poll: checks the abort flag, then the asynchronous error, then (with an operation
 * in flight) its timeout. On the first non-OK verdict calls ops->abort once and keeps the
 * verdict and message. Returns the verdict (sticky). */
enum nccl_watch_verdict nccl_watch_poll(struct nccl_watch *w);

/* Waits for the operation in flight: polls until op_done says 1 (returns NCCL_WATCH_OK
 * and ends the operation) or a verdict is not OK (returned). `pause` is called between
 * polls (a short sleep in the backend, a fake clock's tick in tests); may be NULL. With
 * ops->op_done NULL it waits until async_error stops saying "in progress" (init). */
enum nccl_watch_verdict nccl_watch_wait(struct nccl_watch *w, void (*pause)(void *ctx));

const char *nccl_watch_verdict_name(enum nccl_watch_verdict v);

#endif
