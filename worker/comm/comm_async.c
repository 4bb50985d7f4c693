/* comm_async: the asynchronous half of comm.h. One communication thread per
 * communicator, started by the first comm_start, runs queued operations in order with
 * the backend's synchronous entry points; the caller keeps computing and later waits on
 * the handle.
 *
 * Decisions:
 * - One thread and a FIFO, not a pool: collectives must run in the same order on every
 *   rank, and one TCP stream per peer pair cannot carry two operations at once. Overlap
 *   comes from the thread doing the communication (and the reductions) while the
 *   caller's thread computes.
 * - The thread blocks every signal, so SIGTERM/SIGINT keep going to the worker's main
 *   thread, whose handler raises the abort flag the operations watch.
 * - Every handle not yet waited for is on a list, so comm_destroy can free what a failed
 *   caller never waited for. */
#include "worker/comm/comm_async.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "worker/comm/comm_internal.h"

struct comm_handle {
    struct comm_args args;
    struct comm_async *owner;
    struct comm_handle *next;                  /* queue */
    struct comm_handle *live_prev, *live_next; /* not yet waited for */
    atomic_bool done;
    int rc;
    struct comm_op_times times; /* written by the thread before done is raised */
    struct err err;
};

struct comm_async {
    struct comm *c; /* borrowed: the communicator owns this struct */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work;     /* the queue got an entry, or stopping */
    pthread_cond_t finished; /* some handle is done */
    struct comm_handle *head, *tail;
    struct comm_handle *live;
    bool stopping;
};

static void comm_async_finish(struct comm_async *q, struct comm_handle *h, int rc)
{
    pthread_mutex_lock(&q->mu);
    h->rc = rc;
    atomic_store(&h->done, true);
    pthread_cond_broadcast(&q->finished);
    pthread_mutex_unlock(&q->mu);
}

static void *comm_async_main(void *arg)
{
    struct comm_async *q = arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->head && !q->stopping)
            pthread_cond_wait(&q->work, &q->mu);
        struct comm_handle *h = q->head;
        if (!h)
            break; /* stopping and nothing left */
        q->head = h->next;
        if (!q->head)
            q->tail = NULL;
        bool stopping = q->stopping;
        pthread_mutex_unlock(&q->mu);
        h->times.run_ns = clock_mono_ns();
        int rc = stopping ? err_set(&h->err, ERR_ABORTED, NULL,
                                    "%s: the communicator was "
                                    "destroyed before it ran",
                                    comm_op_name(h->args.op))
                          : comm_execute(q->c, &h->args, &h->err);
        /* before done is raised: a waiter sees them set; last_algorithm is this thread's
         * to read, it wrote it */
        h->times.end_ns = clock_mono_ns();
        snprintf(h->times.algorithm, sizeof h->times.algorithm, "%s", q->c->last_algorithm);
        comm_async_finish(q, h, rc);
        pthread_mutex_lock(&q->mu);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

/* Starts c's thread when it has none. */
static int comm_async_ensure(struct comm *c, struct err *e)
{
    if (c->async)
        return 0;
    struct comm_async *q = calloc(1, sizeof *q);
    if (!q)
        return err_set(e, ERR_NOMEM, NULL, "comm: out of memory for the communication thread");
    q->c = c;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->work, NULL);
    pthread_cond_init(&q->finished, NULL);
    int rc = pthread_create(&q->thread, NULL, comm_async_main, q);
    if (rc != 0) {
        pthread_cond_destroy(&q->finished);
        pthread_cond_destroy(&q->work);
        pthread_mutex_destroy(&q->mu);
        free(q);
        return err_set(e, ERR_IO, NULL, "comm: cannot start the communication thread: %s",
                       strerror(rc));
    }
    c->async = q;
    return 0;
}

struct comm_handle *comm_start(struct comm *c, const struct comm_args *a, struct err *e)
{
    if (comm_args_check(c, a, e) < 0 || comm_async_ensure(c, e) < 0)
        return NULL;
    struct comm_handle *h = calloc(1, sizeof *h);
    if (!h) {
        err_set(e, ERR_NOMEM, NULL, "%s: out of memory for a handle", comm_op_name(a->op));
        return NULL;
    }
    struct comm_async *q = c->async;
    h->args = *a;
    h->owner = q;
    atomic_init(&h->done, false);
    pthread_mutex_lock(&q->mu);
    h->live_next = q->live;
    if (q->live)
        q->live->live_prev = h;
    q->live = h;
    if (q->tail)
        q->tail->next = h;
    else
        q->head = h;
    q->tail = h;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->mu);
    return h;
}

struct comm_handle *comm_iallreduce(struct comm *c, const void *send, void *recv, size_t count,
                                    enum comm_dtype dtype, enum comm_redop op, struct err *e)
{
    struct comm_args a = comm_args_collective(COMM_OP_ALLREDUCE, send, recv, count, dtype, op,
                                              0);
    return comm_start(c, &a, e);
}

struct comm_handle *comm_ireduce_scatter(struct comm *c, const void *send, void *recv,
                                         size_t recv_count, enum comm_dtype dtype,
                                         enum comm_redop op, struct err *e)
{
    struct comm_args a = comm_args_collective(COMM_OP_REDUCE_SCATTER, send, recv, recv_count,
                                              dtype, op, 0);
    return comm_start(c, &a, e);
}

struct comm_handle *comm_iall_gather(struct comm *c, const void *send, void *recv,
                                     size_t send_count, enum comm_dtype dtype, struct err *e)
{
    struct comm_args a = comm_args_collective(COMM_OP_ALL_GATHER, send, recv, send_count, dtype,
                                              COMM_SUM, 0);
    return comm_start(c, &a, e);
}

struct comm_handle *comm_ibroadcast(struct comm *c, const void *send, void *recv, size_t count,
                                    enum comm_dtype dtype, int root, struct err *e)
{
    struct comm_args a = comm_args_collective(COMM_OP_BROADCAST, send, recv, count, dtype,
                                              COMM_SUM, root);
    return comm_start(c, &a, e);
}

bool comm_test(const struct comm_handle *h)
{
    return atomic_load(&h->done);
}

/* Takes h off the list of handles not waited for; the caller holds q->mu. */
static void comm_async_unlink(struct comm_async *q, struct comm_handle *h)
{
    if (h->live_prev)
        h->live_prev->live_next = h->live_next;
    else
        q->live = h->live_next;
    if (h->live_next)
        h->live_next->live_prev = h->live_prev;
}

int comm_wait(struct comm_handle *h, struct err *e)
{
    return comm_wait_timed(h, NULL, e);
}

int comm_wait_timed(struct comm_handle *h, struct comm_op_times *t, struct err *e)
{
    struct comm_async *q = h->owner;
    pthread_mutex_lock(&q->mu);
    while (!atomic_load(&h->done))
        pthread_cond_wait(&q->finished, &q->mu);
    comm_async_unlink(q, h);
    pthread_mutex_unlock(&q->mu);
    int rc = h->rc;
    if (rc < 0 && e)
        *e = h->err;
    if (t)
        *t = h->times;
    free(h);
    return rc;
}

void comm_async_shutdown(struct comm *c)
{
    struct comm_async *q = c->async;
    atomic_store(&c->stop, true);
    if (!q)
        return;
    pthread_mutex_lock(&q->mu);
    q->stopping = true;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->thread, NULL);
    while (q->live) {
        struct comm_handle *h = q->live;
        q->live = h->live_next;
        free(h);
    }
    pthread_cond_destroy(&q->finished);
    pthread_cond_destroy(&q->work);
    pthread_mutex_destroy(&q->mu);
    free(q);
    c->async = NULL;
}
