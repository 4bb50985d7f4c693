/* Unit tests for worker/comm/nccl_gate (the hold that keeps the NCCL communication stream
 * closed until an operation is enqueued, so its timing events exclude host enqueue
 * latency): a hold returns only once the host opened the gate (a real thread opens it
 * while the hold spins), an already open gate passes at once, a gate never opened expires
 * at the limit on a fake clock and not before, an expired gate or a failed elapsed time
 * reports the device time as unknown (-1), and either side may let go last (ASan's leak
 * check and use-after-free detection watch the frees). */
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "common/clock.h"
#include "tests/unit/test.h"
#include "worker/comm/nccl_gate.h"

struct fake_clock {
    int64_t now, tick; /* each reading advances the clock by tick */
    int reads;
};

static int64_t fake_now(void *ctx)
{
    struct fake_clock *c = ctx;
    c->reads++;
    c->now += c->tick;
    return c->now;
}

struct opener {
    struct nccl_gate *g;
    atomic_bool *holding; /* set just before the hold starts spinning */
    int64_t opened_ns;
};

static void *opener_main(void *arg)
{
    struct opener *o = arg;
    while (!atomic_load(o->holding))
        ;
    struct timespec ts = {0, 20 * 1000 * 1000}; /* the hold spins meanwhile */
    nanosleep(&ts, NULL);
    o->opened_ns = clock_mono_ns();
    nccl_gate_open(o->g);
    nccl_gate_put(o->g); /* the host lets go while the hold may still run */
    return NULL;
}

static void test_gate_holds_until_opened(void)
{
    struct nccl_gate *g = nccl_gate_new(10LL * 1000 * 1000 * 1000, NULL, NULL);
    T_CHECK(g != NULL);
    atomic_bool holding = false;
    struct opener o = {.g = g, .holding = &holding};
    pthread_t t;
    T_CHECK(pthread_create(&t, NULL, opener_main, &o) == 0);
    atomic_store(&holding, true);
    nccl_gate_hold(g); /* drops the stream's reference: g may be gone after this */
    int64_t returned = clock_mono_ns();
    pthread_join(t, NULL);
    T_CHECK_MSG(returned >= o.opened_ns, "the hold returned %lld ns before the gate opened",
                (long long)(o.opened_ns - returned));
}

static void test_gate_open_passes_at_once(void)
{
    struct fake_clock c = {.tick = 1};
    struct nccl_gate *g = nccl_gate_new(1000, fake_now, &c);
    nccl_gate_open(g);
    nccl_gate_open(g);             /* idempotent */
    atomic_fetch_add(&g->refs, 1); /* keep it to read after the hold let go */
    nccl_gate_hold(g);
    T_CHECK(c.reads <= 1);
    T_CHECK(!atomic_load(&g->expired));
    T_NEAR(nccl_gate_seconds(g, true, 2.5f), 2.5e-3, 1e-12);
    nccl_gate_put(g);
    nccl_gate_put(g);
}

static void test_gate_expires_at_limit(void)
{
    struct fake_clock c = {.tick = 10};
    struct nccl_gate *g = nccl_gate_new(1000, fake_now, &c);
    atomic_fetch_add(&g->refs, 1);
    nccl_gate_hold(g); /* never opened: gives up at the limit */
    T_CHECK(atomic_load(&g->expired));
    /* the first reading sets the deadline; it gives up at the first reading past it */
    T_EQ_INT(c.reads, 1 + 1000 / 10);
    T_CHECK(nccl_gate_seconds(g, true, 2.5f) < 0);
    nccl_gate_open(g); /* the host opening late is harmless */
    nccl_gate_put(g);
    nccl_gate_put(g);
}

static void test_gate_unknown_elapsed(void)
{
    struct nccl_gate *g = nccl_gate_new(1000, NULL, NULL);
    nccl_gate_open(g);
    T_CHECK(nccl_gate_seconds(g, false, 2.5f) < 0);
    T_CHECK(nccl_gate_seconds(g, true, -1.0f) < 0);
    T_NEAR(nccl_gate_seconds(g, true, 0.0f), 0.0, 0);
    nccl_gate_put(g); /* the hold never queued: the host drops both references */
    nccl_gate_put(g);
    nccl_gate_put(NULL);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_gate_holds_until_opened);
    TEST_RUN(test_gate_open_passes_at_once);
    TEST_RUN(test_gate_expires_at_limit);
    TEST_RUN(test_gate_unknown_elapsed);
    return test_end();
}
