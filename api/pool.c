/* pool: a bounded worker pool for the heavy GETs (trace, report, fit, results, steps,
 * predict), so that they never run on libmicrohttpd's threads, which serve
 * /v1/cluster/sync and every other short request.
 *
 * Decision: a fixed number of workers and a fixed-size queue. A job that finds the queue
 * full is refused at once (the caller answers 503 with Retry-After): work waits in a
 * queue of known length, never in an unbounded one. The workers run at a lower CPU
 * priority (nice API_POOL_NICE), so on a busy host the scheduler prefers the threads
 * that answer the cluster's syncs over a report being rendered (API_POOL_NICE above the
 * daemon's own nice value, at most 19; never below it).
 *
 * Ownership: api_pool_start returns an owned pool; api_pool_stop joins the workers,
 * runs nothing still queued (each such job's fn is called with cancelled = true so its
 * owner can free it) and frees the pool. A job's arg belongs to its submitter. */
#include "api/pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define API_POOL_NICE 5

struct api_pool_job {
    api_pool_fn fn;
    void *arg;
};

struct api_pool {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct api_pool_job *queue; /* ring of cap jobs */
    size_t cap, head, len;
    pthread_t *threads;
    size_t nthreads;
    bool stop;
    size_t busy; /* workers running a job */
};

static void *api_pool_main(void *arg)
{
    struct api_pool *p = arg;
    /* Linux: a thread's nice value is its own (the tid is the target). Relative to the
     * daemon's: an absolute value would raise the workers above a daemon started with
     * nice, starving the threads that answer syncs (and read new requests' heads). */
    id_t tid = (id_t)syscall(SYS_gettid);
    errno = 0;
    int nice_now = getpriority(PRIO_PROCESS, tid);
    int want = nice_now + API_POOL_NICE > 19 ? 19 : nice_now + API_POOL_NICE;
    if (errno == 0 && want > nice_now)
        setpriority(PRIO_PROCESS, tid, want);
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stop && p->len == 0)
            pthread_cond_wait(&p->wake, &p->lock);
        if (p->stop)
            break;
        struct api_pool_job job = p->queue[p->head];
        p->head = (p->head + 1) % p->cap;
        p->len--;
        p->busy++;
        pthread_mutex_unlock(&p->lock);
        job.fn(job.arg, false);
        pthread_mutex_lock(&p->lock);
        p->busy--;
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

struct api_pool *api_pool_start(size_t nthreads, size_t queue_cap, struct err *e)
{
    struct api_pool *p = calloc(1, sizeof *p);
    if (!p || !(p->queue = calloc(queue_cap ? queue_cap : 1, sizeof *p->queue)) ||
        !(p->threads = calloc(nthreads ? nthreads : 1, sizeof *p->threads))) {
        if (p)
            free(p->queue);
        free(p);
        err_set(e, ERR_NOMEM, NULL, "out of memory");
        return NULL;
    }
    p->cap = queue_cap ? queue_cap : 1;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    for (size_t i = 0; i < (nthreads ? nthreads : 1); i++) {
        int rc = pthread_create(&p->threads[i], NULL, api_pool_main, p);
        if (rc != 0) {
            errno = rc;
            err_errno(e, "pool: pthread_create");
            api_pool_stop(p);
            return NULL;
        }
        p->nthreads++;
    }
    return p;
}

int api_pool_submit(struct api_pool *p, api_pool_fn fn, void *arg)
{
    pthread_mutex_lock(&p->lock);
    if (p->stop || p->len == p->cap) {
        pthread_mutex_unlock(&p->lock);
        return -1;
    }
    p->queue[(p->head + p->len) % p->cap] = (struct api_pool_job){fn, arg};
    p->len++;
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->lock);
    return 0;
}

void api_pool_load(struct api_pool *p, size_t *queued, size_t *busy)
{
    pthread_mutex_lock(&p->lock);
    *queued = p->len;
    *busy = p->busy;
    pthread_mutex_unlock(&p->lock);
}

void api_pool_stop(struct api_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (size_t i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    for (; p->len > 0; p->len--, p->head = (p->head + 1) % p->cap)
        p->queue[p->head].fn(p->queue[p->head].arg, true);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->lock);
    free(p->threads);
    free(p->queue);
    free(p);
}
