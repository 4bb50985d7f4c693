/* nccl_gate: see nccl_gate.h. The hold busy-waits instead of sleeping: the gate is open
 * within microseconds in the normal case (the host opens it right after its last enqueue
 * call), and a sleep would add its wake-up latency to every operation's wall time. The
 * release store and the hold's load pair as release/acquire; the expired mark is read by
 * the host only after the operation's completion event, which the stream reaches after
 * the hold returned. */
#include "worker/comm/nccl_gate.h"

#include <stdlib.h>

#include "common/clock.h"

static int64_t nccl_gate_mono_ns(void *ctx)
{
    return clock_mono_ns();
}

struct nccl_gate *nccl_gate_new(int64_t limit_ns, int64_t (*now_ns)(void *ctx), void *clock_ctx)
{
    struct nccl_gate *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    atomic_init(&g->refs, 2);
    atomic_init(&g->open, false);
    atomic_init(&g->expired, false);
    g->limit_ns = limit_ns;
    g->now_ns = now_ns ? now_ns : nccl_gate_mono_ns;
    g->clock_ctx = clock_ctx;
    return g;
}

void nccl_gate_hold(void *arg)
{
    struct nccl_gate *g = arg;
    int64_t deadline = g->now_ns(g->clock_ctx) + g->limit_ns;
    while (!atomic_load_explicit(&g->open, memory_order_acquire)) {
        if (g->now_ns(g->clock_ctx) >= deadline) {
            atomic_store(&g->expired, true);
            break;
        }
    }
    nccl_gate_put(g);
}

void nccl_gate_open(struct nccl_gate *g)
{
    atomic_store_explicit(&g->open, true, memory_order_release);
}

void nccl_gate_put(struct nccl_gate *g)
{
    if (g && atomic_fetch_sub(&g->refs, 1) == 1)
        free(g);
}

double nccl_gate_seconds(const struct nccl_gate *g, bool elapsed_ok, float elapsed_ms)
{
    if (!elapsed_ok || atomic_load(&g->expired) || elapsed_ms < 0)
        return -1;
    return (double)elapsed_ms * 1e-3;
}
