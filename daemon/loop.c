/* loop: see loop.h.
 *
 * Decision: the eventfd that wakes the loop is itself an ordinary watch whose callback
 * runs the posted closures, so posting, waking and stopping share one path. Only the
 * closure queue and the running flag are shared with other threads (under mu); the stop
 * request is an atomic so that loop_stop never takes a lock. */
#include "daemon/loop.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"

#define LOOP_MAX_EVENTS 256
#define LOOP_MAX_WAIT_MS 60000 /* a bound, not a tick: nothing needs it */

struct loop {
    char name[16];
    int epfd, wakefd;
    struct loop_watch wake;
    loop_fn hook;
    void *hook_ctx;
    pthread_t thread;
    bool joinable; /* the owner's: a thread was started and not yet joined */
    atomic_bool stop;

    /* Shared with other threads, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;             /* loop_call_sync waiters; the thread's start */
    bool running;                  /* posts accepted; thread is valid */
    struct loop_call *head, *tail; /* posted, not yet taken */

    /* The loop thread's. */
    struct heap timers;
    struct epoll_event batch[LOOP_MAX_EVENTS];
    int batch_n, batch_i; /* the batch being dispatched (batch_n 0 outside dispatch) */
    bool firing;          /* in the timer pass, whose clock is fire_now */
    int64_t fire_now;
};

#define LOOP_TIMER_OF(n) ((struct loop_timer *)((char *)(n)-offsetof(struct loop_timer, node)))

/* Takes the whole queue (FIFO) under the lock; with closing, also stops accepting. */
static struct loop_call *loop_take_calls(struct loop *l, bool closing)
{
    pthread_mutex_lock(&l->mu);
    struct loop_call *list = l->head;
    l->head = l->tail = NULL;
    if (closing)
        l->running = false;
    pthread_mutex_unlock(&l->mu);
    return list;
}

static void loop_run_calls(struct loop_call *c)
{
    while (c) {
        struct loop_call *next = c->next; /* c may be gone once its fn returned */
        c->fn(c->ctx);
        c = next;
    }
}

static void loop_on_wake(void *ctx, uint32_t events)
{
    (void)events;
    struct loop *l = ctx;
    uint64_t v;
    if (read(l->wakefd, &v, sizeof v) < 0 && errno != EAGAIN)
        log_warn("%s: eventfd read: %s", l->name, strerror(errno));
    loop_run_calls(loop_take_calls(l, false));
}

static int loop_poll_timeout(const struct loop *l)
{
    const struct heap_node *top = heap_top(&l->timers);
    if (!top)
        return -1;
    int64_t left = top->key - clock_mono_ms();
    if (left <= 0)
        return 0;
    return left > LOOP_MAX_WAIT_MS ? LOOP_MAX_WAIT_MS : (int)left;
}

static void loop_dispatch(struct loop *l, int n)
{
    l->batch_n = n;
    for (l->batch_i = 0; l->batch_i < n; l->batch_i++) {
        struct loop_watch *w = l->batch[l->batch_i].data.ptr;
        if (w) /* NULL: removed earlier in this batch */
            w->fn(w->ctx, l->batch[l->batch_i].events);
    }
    l->batch_n = 0;
}

static void loop_fire_timers(struct loop *l)
{
    l->firing = true;
    l->fire_now = clock_mono_ms();
    struct heap_node *n;
    while ((n = heap_top(&l->timers)) && n->key <= l->fire_now) {
        struct loop_timer *t = LOOP_TIMER_OF(n);
        heap_remove(&l->timers, n);
        t->fn(t->ctx);
    }
    l->firing = false;
}

static void loop_run_once(struct loop *l)
{
    int n = epoll_wait(l->epfd, l->batch, LOOP_MAX_EVENTS, loop_poll_timeout(l));
    if (n < 0) {
        if (errno != EINTR) {
            log_error("%s: epoll_wait: %s", l->name, strerror(errno));
            usleep(10000); /* cannot happen with a valid epoll fd; never spin if it does */
        }
        n = 0;
    }
    loop_dispatch(l, n);
    loop_fire_timers(l);
    if (l->hook)
        l->hook(l->hook_ctx);
}

static void *loop_thread_main(void *arg)
{
    struct loop *l = arg;
    pthread_setname_np(pthread_self(), l->name);
    pthread_mutex_lock(&l->mu); /* until loop_start stored the thread id */
    while (!l->running)
        pthread_cond_wait(&l->cv, &l->mu);
    pthread_mutex_unlock(&l->mu);
    while (!atomic_load(&l->stop))
        loop_run_once(l);
    loop_run_calls(loop_take_calls(l, true));
    return NULL;
}

struct loop *loop_create(const char *name, struct err *e)
{
    struct loop *l = calloc(1, sizeof *l);
    if (!l) {
        err_set(e, ERR_NOMEM, NULL, "out of memory creating a loop");
        return NULL;
    }
    snprintf(l->name, sizeof l->name, "%s", name);
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    heap_init(&l->timers);
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    l->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (l->epfd < 0 || l->wakefd < 0) {
        err_errno(e, "%s: epoll/eventfd", name);
        loop_destroy(l);
        return NULL;
    }
    if (loop_watch_add(l, &l->wake, l->wakefd, EPOLLIN, loop_on_wake, l, e) < 0) {
        loop_destroy(l);
        return NULL;
    }
    return l;
}

int loop_start(struct loop *l, loop_fn hook, void *hook_ctx, struct err *e)
{
    l->hook = hook;
    l->hook_ctx = hook_ctx;
    int rc = pthread_create(&l->thread, NULL, loop_thread_main, l);
    if (rc != 0)
        return err_set(e, ERR_IO, NULL, "%s: pthread_create: %s", l->name, strerror(rc));
    l->joinable = true;
    pthread_mutex_lock(&l->mu);
    l->running = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    return 0;
}

void loop_wake(struct loop *l)
{
    uint64_t one = 1;
    ssize_t w = write(l->wakefd, &one, sizeof one);
    (void)w; /* only fails when the counter is saturated: then it is readable anyway */
}

void loop_stop(struct loop *l)
{
    atomic_store(&l->stop, true);
    loop_wake(l);
}

void loop_wait(struct loop *l)
{
    if (!l->joinable)
        return;
    pthread_join(l->thread, NULL);
    l->joinable = false;
}

void loop_destroy(struct loop *l)
{
    if (!l)
        return;
    loop_stop(l);
    loop_wait(l);
    if (l->epfd >= 0)
        close(l->epfd);
    if (l->wakefd >= 0)
        close(l->wakefd);
    heap_cleanup(&l->timers);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l);
}

int loop_watch_add(struct loop *l, struct loop_watch *w, int fd, uint32_t events, loop_fd_fn fn,
                   void *ctx, struct err *e)
{
    *w = (struct loop_watch){.fd = fd, .events = events, .fn = fn, .ctx = ctx};
    struct epoll_event ev = {.events = events, .data.ptr = w};
    if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
        return err_errno(e, "%s: epoll_ctl add fd %d", l->name, fd);
    return 0;
}

int loop_watch_modify(struct loop *l, struct loop_watch *w, uint32_t events, struct err *e)
{
    if (w->events == events)
        return 0;
    struct epoll_event ev = {.events = events, .data.ptr = w};
    if (epoll_ctl(l->epfd, EPOLL_CTL_MOD, w->fd, &ev) < 0)
        return err_errno(e, "%s: epoll_ctl mod fd %d", l->name, w->fd);
    w->events = events;
    return 0;
}

void loop_watch_remove(struct loop *l, struct loop_watch *w)
{
    epoll_ctl(l->epfd, EPOLL_CTL_DEL, w->fd, NULL);
    for (int i = l->batch_i + 1; i < l->batch_n; i++)
        if (l->batch[i].data.ptr == w)
            l->batch[i].data.ptr = NULL;
}

int loop_timer_start(struct loop *l, struct loop_timer *t, int64_t deadline_ms, loop_fn fn,
                     void *ctx)
{
    /* A timer armed in the past from the timer pass would keep the pass going. */
    if (l->firing && deadline_ms <= l->fire_now)
        deadline_ms = l->fire_now + 1;
    if (heap_push(&l->timers, &t->node, deadline_ms) < 0)
        return -1;
    t->fn = fn;
    t->ctx = ctx;
    return 0;
}

void loop_timer_stop(struct loop *l, struct loop_timer *t)
{
    heap_remove(&l->timers, &t->node);
}

int loop_post(struct loop *l, struct loop_call *call, loop_fn fn, void *ctx, struct err *e)
{
    *call = (struct loop_call){.fn = fn, .ctx = ctx};
    pthread_mutex_lock(&l->mu);
    if (!l->running) {
        pthread_mutex_unlock(&l->mu);
        return err_set(e, ERR_UNAVAILABLE, NULL, "%s is not running", l->name);
    }
    if (l->tail)
        l->tail->next = call;
    else
        l->head = call;
    l->tail = call;
    pthread_mutex_unlock(&l->mu);
    loop_wake(l);
    return 0;
}

/* A loop_call_sync in flight; lives on the caller's stack. */
struct loop_sync {
    struct loop *l;
    loop_fn fn;
    void *ctx;
    bool done; /* under l->mu */
    struct loop_call call;
};

static void loop_sync_run(void *arg)
{
    struct loop_sync *s = arg;
    struct loop *l = s->l;
    s->fn(s->ctx);
    pthread_mutex_lock(&l->mu);
    s->done = true; /* from here on the caller may return and s is gone */
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

int loop_call_sync(struct loop *l, loop_fn fn, void *ctx, struct err *e)
{
    pthread_mutex_lock(&l->mu);
    bool here = l->running && pthread_equal(pthread_self(), l->thread);
    pthread_mutex_unlock(&l->mu);
    if (here) { /* posting would wait for ourselves */
        fn(ctx);
        return 0;
    }
    struct loop_sync s = {.l = l, .fn = fn, .ctx = ctx};
    if (loop_post(l, &s.call, loop_sync_run, &s, e) < 0)
        return -1;
    pthread_mutex_lock(&l->mu);
    while (!s.done)
        pthread_cond_wait(&l->cv, &l->mu);
    pthread_mutex_unlock(&l->mu);
    return 0;
}
