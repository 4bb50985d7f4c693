/* nccl_gate: holds the NCCL backend's communication stream until an operation is wholly
 * enqueued, so the CUDA events around it time the device's work and nothing of the
 * host's. Host logic over an injected clock, tested on a machine without a GPU;
 * worker/comm/nccl.c queues nccl_gate_hold on the stream with cudaLaunchHostFunc.
 *
 * Why a gate: a timing event recorded on an idle stream completes at once, so with
 * [t0][collective][t1] queued one call after the other, t0 fires while the host is still
 * inside ncclAllReduce (argument checks, planning, the kernel launch, polling a
 * non-blocking communicator) and t1 - t0 counts that host enqueue latency as device time.
 * In the collective benchmark the stream is always idle when an operation starts (each is
 * waited for), so small messages measured mostly the host. Queued as
 * [fence wait][gate][t0][collective][t1], t0 fires only once the host opened the gate,
 * after the last enqueue call returned: t1 - t0 is the device's time from the moment the
 * collective could start, and waiting for compute (the fence) stays outside it too.
 * (nvbench's blocking_kernel solves the same problem with a spinning kernel; a host
 * function needs no kernel in comm/ and holds no SM.)
 *
 * Decisions:
 * - The hold spins on the CUDA callback thread for at most limit_ns, then gives up and
 *   marks the gate expired: an enqueue that stalls (or a host that never opens the gate
 *   because it failed) costs one bounded pause, never a hang, and the operation's device
 *   time is then reported as unknown (-1) rather than as a figure that includes the
 *   stall.
 * - One gate per operation, reference-counted (the host's and the stream's): the stream
 *   may reach the hold after the host gave up on the operation (timeout, abort), so
 *   whoever lets go last frees it; no gate state outlives both or is freed under one.
 *
 * Ownership: nccl_gate_new returns a gate holding two references; nccl_gate_hold drops
 * the stream's, nccl_gate_put the host's (call it once, or twice when the hold was never
 * queued). */
#ifndef DDPB_NCCL_GATE_H
#define DDPB_NCCL_GATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct nccl_gate {
    atomic_int refs;     /* 2 at creation: the host's and the queued hold's */
    atomic_bool open;    /* set by the host once the operation is enqueued */
    atomic_bool expired; /* the hold gave up waiting: the operation's timing is unknown */
    int64_t limit_ns;    /* how long the hold waits at most */
    int64_t (*now_ns)(void *ctx); /* borrowed clock (clock_mono_ns in the backend) */
    void *clock_ctx;              /* borrowed */
};

/* A closed gate with two references, or NULL when out of memory. now_ns NULL: the
 * monotonic clock. */
struct nccl_gate *nccl_gate_new(int64_t limit_ns, int64_t (*now_ns)(void *ctx),
                                void *clock_ctx);
/* The stream side (a cudaHostFn_t: arg is the gate): returns once the gate is open or
 * after limit_ns (then marks it expired), and drops the stream's reference. */
void nccl_gate_hold(void *arg);
/* The host side: everything of the operation is enqueued. Idempotent. */
void nccl_gate_open(struct nccl_gate *g);
/* Drops one reference; the last frees g. NULL is a no-op. */
void nccl_gate_put(struct nccl_gate *g);

/* The operation's device time in seconds from the events' elapsed milliseconds
 * (elapsed_ok false: cudaEventElapsedTime failed): -1 when unknown (no elapsed time, or
 * the hold expired so t0 may have fired before the collective was enqueued). Read it
 * once the operation completed (the hold returned before t0 fired). */
double nccl_gate_seconds(const struct nccl_gate *g, bool elapsed_ok, float elapsed_ms);

#endif
