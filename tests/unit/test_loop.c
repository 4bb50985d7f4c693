/* Unit tests for daemon/heap and daemon/loop: the heap pops in key order through
 * removals and key changes; the loop calls fd watches when their fd is ready, runs
 * posted closures on its own thread in posting order, fires timers in deadline order
 * (stopped ones never, re-armed ones again), drops the pending events of a watch removed
 * mid-batch, runs its hook after each batch, and stops from another thread, refusing
 * posts afterwards.
 *
 * State written by loop callbacks is read by the test thread only after a
 * loop_call_sync or loop_wait, which order it (no data race under ThreadSanitizer);
 * waiting for a callback polls such a synchronised read against a deadline. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "common/clock.h"
#include "daemon/heap.h"
#include "daemon/loop.h"
#include "tests/unit/test.h"

/* ---- heap --------------------------------------------------------------------------- */

static void test_heap_order_and_removal(void)
{
    enum { N = 500 };
    struct heap h;
    heap_init(&h);
    struct heap_node *nodes = calloc(N, sizeof *nodes);
    T_CHECK(nodes);
    T_CHECK(heap_top(&h) == NULL);
    T_CHECK(!heap_node_linked(&nodes[0])); /* zeroed = not in a heap */
    srand(7);
    for (int i = 0; i < N; i++)
        T_CHECK(heap_push(&h, &nodes[i], rand() % 1000) == 0);
    for (int i = 0; i < N; i += 3) /* remove a third from anywhere */
        heap_remove(&h, &nodes[i]);
    heap_remove(&h, &nodes[0]);    /* again: a no-op */
    for (int i = 1; i < N; i += 7) /* move some keys in the heap: up and down */
        if (heap_node_linked(&nodes[i]))
            T_CHECK(heap_push(&h, &nodes[i], i % 2 ? -i : 5000 + i) == 0);
    int linked = 0;
    int64_t max = INT64_MIN;
    for (int i = 0; i < N; i++)
        if (heap_node_linked(&nodes[i])) {
            linked++;
            max = nodes[i].key > max ? nodes[i].key : max;
        }
    T_EQ_INT(linked, N - (N + 2) / 3);
    T_EQ_INT(max, 5000 + 484); /* 484: the largest even moved index not removed */
    int64_t last = INT64_MIN;
    int popped = 0;
    struct heap_node *n;
    while ((n = heap_top(&h))) {
        T_CHECK(n->key >= last);
        T_CHECK((n - nodes) % 3 != 0); /* removed nodes never come back */
        last = n->key;
        heap_remove(&h, n);
        T_CHECK(!heap_node_linked(n));
        popped++;
    }
    T_EQ_INT(popped, linked);
    T_EQ_INT(last, max);
    heap_cleanup(&h);
    free(nodes);
}

/* ---- loop --------------------------------------------------------------------------- */

struct probe {
    struct loop *l;
    pthread_t loop_thread;
    int fd_calls, fd_bytes;
    int order[64], norder;
    int64_t fired_at[4];
    int fired[4], nfired, ticks, hook_runs, hook_saw;
    struct loop_timer timers[4];
    bool flag;
};

/* Waits until pred(p) holds, read on the loop thread; false after 5 s. */
struct poll_arg {
    struct probe *p;
    bool (*pred)(const struct probe *);
    bool ok;
};

static void poll_on_loop(void *arg)
{
    struct poll_arg *a = arg;
    a->ok = a->pred(a->p);
}

static bool wait_for(struct probe *p, bool (*pred)(const struct probe *))
{
    int64_t end = clock_mono_ms() + 5000;
    struct poll_arg a = {p, pred, false};
    while (clock_mono_ms() < end) {
        struct err e = {0};
        if (loop_call_sync(p->l, poll_on_loop, &a, &e) < 0)
            return false;
        if (a.ok)
            return true;
        usleep(2000);
    }
    return false;
}

static void note_thread(void *arg)
{
    struct probe *p = arg;
    p->loop_thread = pthread_self();
}

static struct loop *start_loop(struct probe *p, loop_fn hook)
{
    struct err e = {0};
    p->l = loop_create("test-loop", &e);
    if (!p->l || loop_start(p->l, hook, p, &e) < 0 ||
        loop_call_sync(p->l, note_thread, p, &e) < 0) {
        fprintf(stderr, "  loop: %s\n", e.msg);
        loop_destroy(p->l);
        return NULL;
    }
    return p->l;
}

struct pipe_probe {
    struct probe *p;
    struct loop_watch w;
    int fds[2];
};

static void on_pipe(void *ctx, uint32_t events)
{
    struct pipe_probe *pp = ctx;
    char buf[16];
    ssize_t r = read(pp->fds[0], buf, sizeof buf);
    if (r > 0 && (events & EPOLLIN)) {
        pp->p->fd_bytes += (int)r;
        pp->p->flag = pthread_equal(pthread_self(), pp->p->loop_thread);
    }
    pp->p->fd_calls++;
}

static void add_pipe_watch(void *arg)
{
    struct pipe_probe *pp = arg;
    struct err e = {0};
    if (loop_watch_add(pp->p->l, &pp->w, pp->fds[0], EPOLLIN, on_pipe, pp, &e) < 0)
        pp->fds[1] = -1;
}

static void remove_pipe_watch(void *arg)
{
    struct pipe_probe *pp = arg;
    loop_watch_remove(pp->p->l, &pp->w);
}

static bool got_three_bytes(const struct probe *p)
{
    return p->fd_bytes == 3;
}

static void test_loop_fd_readiness(void)
{
    struct probe p = {0};
    struct pipe_probe pp = {.p = &p};
    struct err e = {0};
    T_CHECK(pipe(pp.fds) == 0);
    T_CHECK(start_loop(&p, NULL));
    T_OK(loop_call_sync(p.l, add_pipe_watch, &pp, &e));
    T_CHECK(pp.fds[1] >= 0);
    T_CHECK(write(pp.fds[1], "abc", 3) == 3);
    T_CHECK(wait_for(&p, got_three_bytes));
    T_CHECK(p.flag); /* the callback ran on the loop's thread */
    T_OK(loop_call_sync(p.l, remove_pipe_watch, &pp, &e));
    int calls = p.fd_calls;
    T_CHECK(write(pp.fds[1], "d", 1) == 1); /* no longer watched */
    usleep(50000);
    loop_stop(p.l);
    loop_wait(p.l);
    T_EQ_INT(p.fd_calls, calls);
    T_EQ_INT(p.fd_bytes, 3);
    loop_destroy(p.l);
    close(pp.fds[0]);
    close(pp.fds[1]);
}

/* ---- posted closures ---------------------------------------------------------------- */

struct post_item {
    struct probe *p;
    int index;
    struct loop_call call;
};

static void record_order(void *arg)
{
    struct post_item *it = arg;
    if (it->p->norder < 64 && pthread_equal(pthread_self(), it->p->loop_thread))
        it->p->order[it->p->norder++] = it->index;
}

static void test_loop_posts_run_in_order_on_loop_thread(void)
{
    struct probe p = {0};
    struct err e = {0};
    T_CHECK(start_loop(&p, NULL));
    struct post_item items[64];
    for (int i = 0; i < 64; i++) {
        items[i] = (struct post_item){.p = &p, .index = i};
        T_OK(loop_post(p.l, &items[i].call, record_order, &items[i], &e));
    }
    loop_stop(p.l); /* closures already accepted still run, as the loop stops */
    loop_wait(p.l);
    T_EQ_INT(p.norder, 64);
    for (int i = 0; i < 64; i++)
        T_EQ_INT(p.order[i], i);
    struct post_item late = {.p = &p, .index = 99};
    T_CHECK(loop_post(p.l, &late.call, record_order, &late, &e) < 0);
    T_EQ_INT(e.code, ERR_UNAVAILABLE);
    T_CHECK(loop_call_sync(p.l, record_order, &late, &e) < 0);
    T_EQ_INT(p.norder, 64);
    loop_destroy(p.l);
}

/* ---- timers ------------------------------------------------------------------------- */

static void on_timer(struct probe *p, int i)
{
    p->fired_at[i] = clock_mono_ms();
    p->fired[p->nfired++] = i;
}

static void on_timer0(void *arg)
{
    on_timer(arg, 0);
}
static void on_timer1(void *arg)
{
    on_timer(arg, 1);
}
static void on_timer2(void *arg)
{
    on_timer(arg, 2);
}

/* Re-arms itself every 5 ms until it ticked 5 times. */
static void on_tick(void *arg)
{
    struct probe *p = arg;
    if (++p->ticks < 5)
        loop_timer_start(p->l, &p->timers[3], clock_mono_ms() + 5, on_tick, p);
}

struct timer_plan {
    struct probe *p;
    int64_t t0;
};

static void arm_timers(void *arg)
{
    struct timer_plan *tp = arg;
    struct probe *p = tp->p;
    loop_timer_start(p->l, &p->timers[0], tp->t0 + 60, on_timer0, p);
    loop_timer_start(p->l, &p->timers[1], tp->t0 + 20, on_timer1, p);
    loop_timer_start(p->l, &p->timers[2], tp->t0 + 40, on_timer2, p);
    loop_timer_start(p->l, &p->timers[3], tp->t0, on_tick, p);        /* already due */
    loop_timer_start(p->l, &p->timers[0], tp->t0 + 80, on_timer0, p); /* re-armed later */
    loop_timer_stop(p->l, &p->timers[2]);
}

static bool timers_done(const struct probe *p)
{
    return p->nfired == 2 && p->ticks == 5;
}

static void test_loop_timers(void)
{
    struct probe p = {0};
    struct err e = {0};
    T_CHECK(start_loop(&p, NULL));
    struct timer_plan tp = {&p, clock_mono_ms()};
    T_OK(loop_call_sync(p.l, arm_timers, &tp, &e));
    T_CHECK(wait_for(&p, timers_done));
    usleep(60000); /* past the stopped timer's deadline too */
    loop_stop(p.l);
    loop_wait(p.l);
    T_EQ_INT(p.nfired, 2); /* the stopped one never fired */
    T_EQ_INT(p.fired[0], 1);
    T_EQ_INT(p.fired[1], 0);
    T_CHECK(p.fired_at[1] >= tp.t0 + 20);
    T_CHECK(p.fired_at[0] >= tp.t0 + 80); /* at its re-armed deadline, not the first */
    T_EQ_INT(p.ticks, 5);
    T_CHECK(!loop_timer_armed(&p.timers[3]));
    loop_destroy(p.l);
}

/* ---- removal mid-batch, hook, stop from another thread ------------------------------ */

struct twin {
    struct probe *p;
    struct pipe_probe *self, *other;
    bool *other_alive;
};

struct twins {
    struct probe *p;
    struct pipe_probe *a, *b;
    bool a_alive, b_alive;
    struct twin ta, tb;
};

/* Whichever of the two runs first removes and frees the other: its event, pending in the
 * same batch, must not be delivered (ASan would see the use after free). */
static void on_twin(void *ctx, uint32_t events)
{
    (void)events;
    struct twin *t = ctx;
    t->p->fd_calls++;
    if (*t->other_alive) {
        loop_watch_remove(t->p->l, &t->other->w);
        close(t->other->fds[0]);
        close(t->other->fds[1]);
        free(t->other);
        *t->other_alive = false;
    }
    loop_watch_remove(t->p->l, &t->self->w); /* done: its fd stays readable */
}

static void add_twins(void *arg)
{
    struct twins *tw = arg;
    struct err e = {0};
    loop_watch_add(tw->p->l, &tw->a->w, tw->a->fds[0], EPOLLIN, on_twin, &tw->ta, &e);
    loop_watch_add(tw->p->l, &tw->b->w, tw->b->fds[0], EPOLLIN, on_twin, &tw->tb, &e);
}

static void count_hook(void *arg)
{
    struct probe *p = arg;
    p->hook_runs++;
    if (p->fd_calls > 0)
        p->hook_saw = p->fd_calls; /* the hook runs after the batch it belongs to */
}

static bool one_twin_ran(const struct probe *p)
{
    return p->fd_calls >= 1;
}

static void test_loop_remove_mid_batch_and_hook(void)
{
    struct probe p = {0};
    struct err e = {0};
    struct twins tw = {.p = &p, .a_alive = true, .b_alive = true};
    tw.a = calloc(1, sizeof *tw.a);
    tw.b = calloc(1, sizeof *tw.b);
    T_CHECK(tw.a && tw.b && pipe(tw.a->fds) == 0 && pipe(tw.b->fds) == 0);
    tw.ta = (struct twin){&p, tw.a, tw.b, &tw.b_alive};
    tw.tb = (struct twin){&p, tw.b, tw.a, &tw.a_alive};
    /* both readable before they are watched: one epoll_wait returns both */
    T_CHECK(write(tw.a->fds[1], "x", 1) == 1 && write(tw.b->fds[1], "y", 1) == 1);
    T_CHECK(start_loop(&p, count_hook));
    T_OK(loop_call_sync(p.l, add_twins, &tw, &e));
    T_CHECK(wait_for(&p, one_twin_ran));
    usleep(30000);
    loop_stop(p.l);
    loop_wait(p.l);
    T_EQ_INT(p.fd_calls, 1);
    T_CHECK(tw.a_alive != tw.b_alive);
    T_EQ_INT(p.hook_saw, 1);
    T_CHECK(p.hook_runs >= 2);
    struct pipe_probe *left = tw.a_alive ? tw.a : tw.b;
    close(left->fds[0]);
    close(left->fds[1]);
    free(left);
    loop_destroy(p.l);
}

static void *stopper(void *arg)
{
    usleep(20000);
    loop_stop(arg);
    return NULL;
}

static void count_runs(void *arg)
{
    struct probe *p = arg;
    p->hook_runs++;
}

static void test_loop_stop_from_other_thread(void)
{
    struct probe p = {0};
    T_CHECK(start_loop(&p, count_runs));
    pthread_t t;
    int64_t t0 = clock_mono_ms();
    T_CHECK(pthread_create(&t, NULL, stopper, p.l) == 0);
    loop_wait(p.l); /* no timers: the loop sleeps until the stop wakes it */
    T_CHECK(clock_mono_ms() - t0 < 5000);
    pthread_join(t, NULL);
    T_CHECK(p.hook_runs >= 1);
    struct err e = {0};
    T_CHECK(loop_call_sync(p.l, count_runs, &p, &e) < 0);
    loop_destroy(p.l);
    /* a loop that never started is destroyed as well */
    struct loop *idle = loop_create("idle", &e);
    T_CHECK(idle);
    T_CHECK(loop_post(idle, &(struct loop_call){0}, count_runs, &p, &e) < 0);
    loop_destroy(idle);
}

/* The loop thread calling loop_call_sync runs the closure at once instead of waiting for
 * itself. */
static void nested_sync(void *arg)
{
    struct probe *p = arg;
    struct err e = {0};
    p->flag = loop_call_sync(p->l, count_runs, p, &e) == 0 && p->hook_runs == 1;
}

static void test_loop_sync_from_loop_thread(void)
{
    struct probe p = {0};
    struct err e = {0};
    T_CHECK(start_loop(&p, NULL));
    T_OK(loop_call_sync(p.l, nested_sync, &p, &e));
    T_CHECK(p.flag);
    loop_destroy(p.l);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_heap_order_and_removal);
    TEST_RUN(test_loop_fd_readiness);
    TEST_RUN(test_loop_posts_run_in_order_on_loop_thread);
    TEST_RUN(test_loop_timers);
    TEST_RUN(test_loop_remove_mid_batch_and_hook);
    TEST_RUN(test_loop_stop_from_other_thread);
    TEST_RUN(test_loop_sync_from_loop_thread);
    return test_end();
}
