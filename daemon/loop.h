/* loop: the daemon's event loop: one thread around one epoll set, with fd watches,
 * timers, closures posted from other threads, a per-iteration hook and stop. The
 * scheduler and the store server each run on their own instance.
 *
 * Decision: small and explicit, in the spirit of Redis's ae.c. Watches and timers are
 * intrusive (the owner embeds struct loop_watch / struct loop_timer and the loop only
 * borrows them), so a server with thousands of clients allocates nothing per client
 * here; posted closures carry their own node too, so posting cannot fail for memory.
 * One iteration: wait (until the earliest timer at most), dispatch the batch of fd
 * events, fire the timers that are due, then call the iteration hook, which is where an
 * owner frees what its callbacks retired.
 *
 * Threading and ownership rules:
 *  - loop_post, loop_call_sync, loop_wake and loop_stop may be called from any thread.
 *    The watch and timer functions are called on the loop's thread (inside a callback),
 *    or before loop_start, or after loop_wait returned; loop_start, loop_wait and
 *    loop_destroy by the loop's owner, never from a callback. All callbacks run on the
 *    loop's thread, so the state they share needs no lock.
 *  - A watch or timer must be removed (loop_watch_remove, loop_timer_stop) before its
 *    memory is freed. Removing a watch also drops its events still pending in the
 *    current batch, so its owner may free it right after removing it, even mid-batch.
 *  - Closures posted and accepted run exactly once, on the loop's thread, in the order
 *    they were posted; the last ones run as the loop stops. After the loop stopped,
 *    posting is refused (ERR_UNAVAILABLE) and the caller keeps its node. */
#ifndef DDPB_LOOP_H
#define DDPB_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "daemon/heap.h"

struct loop;

/* fd readiness: events is the EPOLL* mask that epoll reported. */
typedef void (*loop_fd_fn)(void *ctx, uint32_t events);
/* A due timer (already disarmed: it may re-arm itself), a posted closure, the hook. */
typedef void (*loop_fn)(void *ctx);

struct loop_watch { /* owned by the caller; fields are the loop's */
    int fd;
    uint32_t events;
    loop_fd_fn fn;
    void *ctx;
};

struct loop_timer { /* owned by the caller; zeroed = not armed */
    struct heap_node node;
    loop_fn fn;
    void *ctx;
};

struct loop_call { /* owned by the caller until its fn ran */
    loop_fn fn;
    void *ctx;
    struct loop_call *next;
};

/* An owned loop (loop_destroy) with no thread yet, or NULL with e set. name (copied,
 * 15 bytes kept) names the thread in logs and tools. */
struct loop *loop_create(const char *name, struct err *e);
/* Starts the loop's thread. hook (may be NULL) runs after every iteration. */
int loop_start(struct loop *l, loop_fn hook, void *hook_ctx, struct err *e);
/* Asks the loop to stop after its current iteration. Thread-safe, also from a callback;
 * returns at once. */
void loop_stop(struct loop *l);
/* Waits until the loop's thread ended (after loop_stop from anywhere). Not from the
 * loop's thread. A no-op when it never started or was already waited for. */
void loop_wait(struct loop *l);
/* loop_stop + loop_wait, then frees the loop. Watches and timers still registered are
 * forgotten (their owners keep them). NULL is a no-op. */
void loop_destroy(struct loop *l);
/* Makes the loop run an iteration soon (the hook sees whatever flag the caller set
 * before). Thread-safe and async-signal-safe: one write(2). */
void loop_wake(struct loop *l);

/* Watches fd for events (EPOLLIN, EPOLLOUT, EPOLLRDHUP; level-triggered); w is
 * borrowed until loop_watch_remove. */
int loop_watch_add(struct loop *l, struct loop_watch *w, int fd, uint32_t events, loop_fd_fn fn,
                   void *ctx, struct err *e);
int loop_watch_modify(struct loop *l, struct loop_watch *w, uint32_t events, struct err *e);
/* Stops watching (call it before closing the fd: a forked child may hold a copy, which
 * would keep the registration alive). w may be freed afterwards. */
void loop_watch_remove(struct loop *l, struct loop_watch *w);

/* Arms t to call fn(ctx) once the monotonic clock reaches deadline_ms (clock_mono_ms);
 * re-arms it when armed. Returns -1 only for memory; re-arming a timer from its own
 * callback never fails. A deadline already past fires in the next iteration. */
int loop_timer_start(struct loop *l, struct loop_timer *t, int64_t deadline_ms, loop_fn fn,
                     void *ctx);
void loop_timer_stop(struct loop *l, struct loop_timer *t);
static inline bool loop_timer_armed(const struct loop_timer *t)
{
    return heap_node_linked(&t->node);
}
static inline int64_t loop_timer_deadline(const struct loop_timer *t)
{
    return t->node.key;
}

/* Queues fn(ctx) to run on the loop's thread, with call (borrowed until fn ran) as its
 * node; ERR_UNAVAILABLE when the loop is not running. Thread-safe. */
int loop_post(struct loop *l, struct loop_call *call, loop_fn fn, void *ctx, struct err *e);
/* Runs fn(ctx) on the loop's thread and returns after it did (at once, directly, when
 * called on that thread); ERR_UNAVAILABLE when the loop is not running. Thread-safe. */
int loop_call_sync(struct loop *l, loop_fn fn, void *ctx, struct err *e);

#endif
