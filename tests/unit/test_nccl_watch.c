/* Unit tests for worker/comm/nccl_watch (the NCCL backend's watchdog) with a fake clock,
 * fake asynchronous errors and a fake completion query: an operation that completes is
 * OK; one that never completes is aborted once at the timeout and not before; an
 * asynchronous error or a raised abort/stop flag aborts at the next poll; the verdict is
 * sticky; completion seen in the same poll as the deadline counts as completion; an
 * initialisation (no op_done) waits for "in progress" to end. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "tests/unit/test.h"
#include "worker/comm/nccl_watch.h"

struct fake {
    int64_t now;
    int tick_ms;           /* the clock advances this much per pause */
    int async_state;       /* 0 ok, 1 in progress, -1 error */
    int in_progress_polls; /* async_state 1 turns 0 after this many queries */
    int64_t done_at;       /* op_done says 1 from this time on; -1: never */
    int aborts;
    int queries;
};

static int64_t fake_now(void *ctx)
{
    return ((struct fake *)ctx)->now;
}

static int fake_async(void *ctx, char *msg, size_t len)
{
    struct fake *f = ctx;
    f->queries++;
    if (f->async_state == 1 && f->in_progress_polls > 0 && --f->in_progress_polls == 0)
        f->async_state = 0;
    if (f->async_state < 0)
        snprintf(msg, len, "unhandled system error (remote process exited)");
    return f->async_state;
}

static int fake_done(void *ctx, char *msg, size_t len)
{
    struct fake *f = ctx;
    return f->done_at >= 0 && f->now >= f->done_at ? 1 : 0;
}

static void fake_abort(void *ctx)
{
    ((struct fake *)ctx)->aborts++;
}

static void fake_pause(void *ctx)
{
    struct fake *f = ctx;
    f->now += f->tick_ms;
}

static const struct nccl_watch_ops fake_ops = {fake_now, fake_async, fake_done, fake_abort};
static const struct nccl_watch_ops fake_init_ops = {fake_now, fake_async, NULL, fake_abort};

static void test_watch_completes(void)
{
    struct fake f = {.now = 1000, .tick_ms = 10, .done_at = 1500};
    struct nccl_watch w;
    nccl_watch_init(&w, &fake_ops, &f, 1000, NULL, NULL);
    nccl_watch_begin(&w, "allreduce");
    T_EQ_INT(nccl_watch_wait(&w, fake_pause), NCCL_WATCH_OK);
    T_EQ_INT(f.aborts, 0);
    T_EQ_INT(f.now, 1500);
    T_EQ_INT(w.started_ms, -1); /* ended */
}

static void test_watch_timeout_aborts_once(void)
{
    struct fake f = {.now = 0, .tick_ms = 100, .done_at = -1};
    struct nccl_watch w;
    nccl_watch_init(&w, &fake_ops, &f, 2000, NULL, NULL);
    nccl_watch_begin(&w, "reduce_scatter");
    T_EQ_INT(nccl_watch_wait(&w, fake_pause), NCCL_WATCH_TIMEOUT);
    T_EQ_INT(f.now, 2000); /* exactly at the deadline, not before */
    T_EQ_INT(f.aborts, 1);
    T_CHECK(strstr(w.msg, "reduce_scatter") != NULL);
    T_CHECK(strstr(w.msg, "timeout 2000 ms") != NULL);
    /* sticky: later polls and waits report it without aborting again */
    f.done_at = 0;
    T_EQ_INT(nccl_watch_poll(&w), NCCL_WATCH_TIMEOUT);
    T_EQ_INT(nccl_watch_wait(&w, fake_pause), NCCL_WATCH_TIMEOUT);
    T_EQ_INT(f.aborts, 1);
}

static void test_watch_no_timeout_without_op(void)
{
    struct fake f = {.now = 0, .done_at = -1};
    struct nccl_watch w;
    nccl_watch_init(&w, &fake_ops, &f, 50, NULL, NULL);
    f.now = 1000000; /* idle for long: no operation, no timeout */
    T_EQ_INT(nccl_watch_poll(&w), NCCL_WATCH_OK);
    T_EQ_INT(f.aborts, 0);
}

static void test_watch_completion_beats_deadline(void)
{
    struct fake f = {.now = 0, .tick_ms = 500, .done_at = 1000};
    struct nccl_watch w;
    nccl_watch_init(&w, &fake_ops, &f, 1000, NULL, NULL);
    nccl_watch_begin(&w, "broadcast");
    T_EQ_INT(nccl_watch_wait(&w, fake_pause), NCCL_WATCH_OK);
    T_EQ_INT(f.aborts, 0);
}

static void test_watch_async_error(void)
{
    struct fake f = {.now = 0, .tick_ms = 1, .done_at = -1};
    struct nccl_watch w;
    nccl_watch_init(&w, &fake_ops, &f, 60000, NULL, NULL);
    nccl_watch_begin(&w, "all_gather");
    f.async_state = -1;
    T_EQ_INT(nccl_watch_wait(&w, fake_pause), NCCL_WATCH_ERROR);
    T_EQ_INT(f.aborts, 1);
    T_EQ_INT(f.now, 0); /* at the first poll */
    T_CHECK(strstr(w.msg, "remote process exited") != NULL);
    T_CHECK(strstr(w.msg, "all_gather") != NULL);
}

static void test_watch_abort_and_stop_flags(void)
{
    atomic_bool abort_flag = false, stop = false;
    struct fake f = {.now = 0, .tick_ms = 1, .done_at = -1};
    struct nccl_watch w;
    nccl_watch_init(&w, &fake_ops, &f, 60000, &abort_flag, &stop);
    nccl_watch_begin(&w, "sendrecv");
    T_EQ_INT(nccl_watch_poll(&w), NCCL_WATCH_OK);
    atomic_store(&abort_flag, true);
    T_EQ_INT(nccl_watch_poll(&w), NCCL_WATCH_ABORTED);
    T_EQ_INT(f.aborts, 1);
    /* the stop flag alone does it too */
    struct fake g = {.now = 0, .tick_ms = 1, .done_at = -1};
    nccl_watch_init(&w, &fake_ops, &g, 60000, NULL, &stop);
    nccl_watch_begin(&w, "barrier");
    atomic_store(&stop, true);
    T_EQ_INT(nccl_watch_wait(&w, fake_pause), NCCL_WATCH_ABORTED);
    T_EQ_INT(g.aborts, 1);
    T_EQ_STR(nccl_watch_verdict_name(w.verdict), "aborted");
}

static void test_watch_init_waits_for_in_progress(void)
{
    struct fake f = {.now = 0, .tick_ms = 10, .async_state = 1, .in_progress_polls = 5};
    struct nccl_watch w;
    nccl_watch_init(&w, &fake_init_ops, &f, 1000, NULL, NULL);
    nccl_watch_begin(&w, "init");
    T_EQ_INT(nccl_watch_wait(&w, fake_pause), NCCL_WATCH_OK);
    T_EQ_INT(f.aborts, 0);
    T_CHECK(f.now > 0);
    /* an init that never finishes times out */
    struct fake g = {.now = 0, .tick_ms = 10, .async_state = 1};
    nccl_watch_init(&w, &fake_init_ops, &g, 300, NULL, NULL);
    nccl_watch_begin(&w, "init");
    T_EQ_INT(nccl_watch_wait(&w, fake_pause), NCCL_WATCH_TIMEOUT);
    T_EQ_INT(g.aborts, 1);
    T_EQ_INT(g.now, 300);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_watch_completes);
    TEST_RUN(test_watch_timeout_aborts_once);
    TEST_RUN(test_watch_no_timeout_without_op);
    TEST_RUN(test_watch_completion_beats_deadline);
    TEST_RUN(test_watch_async_error);
    TEST_RUN(test_watch_abort_and_stop_flags);
    TEST_RUN(test_watch_init_waits_for_in_progress);
    return test_end();
}
