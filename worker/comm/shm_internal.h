/* shm_internal: what the files of the shared-memory transport share (shm.c: segments,
 * setup, waiting and failure; shm_algo.c: the operations). Not for use outside
 * worker/comm.
 *
 * A segment (one per member, mapped by every member) is laid out as
 *   struct shm_head                    counters of this member, one cache line each
 *   struct shm_pair pairs[n]           point-to-point counters, one per peer
 *   slots: 2 x slot_bytes              a collective's steps, double-buffered
 *   fifos: n x fifo_bytes              point-to-point rings, this member to peer k
 * Counters are 32-bit (futex words) and compared modulo 2^32. */
#ifndef DDPB_COMM_SHM_INTERNAL_H
#define DDPB_COMM_SHM_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "worker/comm/shm.h"

#define SHM_LINE 64

struct shm_head {
    uint64_t magic, nonce;
    int32_t member, n;
    uint64_t bytes;
    /* collective steps this member has published (its slot for that step is written) */
    _Alignas(SHM_LINE) atomic_uint in;
    /* allreduce steps whose reduced part this member has published */
    _Alignas(SHM_LINE) atomic_uint out;
    /* doorbell: a poster bumps it (and wakes the futex) when sleeping is set */
    _Alignas(SHM_LINE) atomic_uint bell;
    _Alignas(SHM_LINE) atomic_uint sleeping;
    /* in-process users of the owner's mapping (members that are threads of the owner's
     * process use it instead of a mapping of their own); the last one unmaps */
    _Alignas(SHM_LINE) atomic_int users;
};

struct shm_pair {
    _Alignas(SHM_LINE) atomic_uint head; /* bytes this member wrote to peer k's ring */
    _Alignas(SHM_LINE) atomic_uint tail; /* bytes this member consumed from peer k's ring */
};

struct shm_group {
    int me, n;
    int *ranks; /* owned: communicator rank of each member */
    int timeout_ms;
    const atomic_bool *abort_flag, *stop;
    int spin_us;
    bool spin_yield;
    size_t slot_bytes, fifo_bytes, seg_bytes;
    size_t pairs_off, slots_off, fifos_off;
    int fd;              /* this member's file until sealed; -1 after */
    uint8_t **seg;       /* owned array: every member's segment as this member sees it */
    bool *own_map;       /* owned: seg[j] is a mapping of this member's (else the owner's) */
    pid_t *pid;          /* owned: each member's process */
    int *pidfd;          /* owned: each member's pidfd (-1: none; kill(2) checks instead) */
    const uint8_t **src; /* owned: n operands of a reduction (shm_algo.c) */
    unsigned step;       /* collective steps this member has published (head->in) */
    bool broken;
};

static inline struct shm_head *shm_head_of(const struct shm_group *g, int j)
{
    return (struct shm_head *)(void *)g->seg[j];
}

static inline struct shm_pair *shm_pair_of(const struct shm_group *g, int j, int k)
{
    return (struct shm_pair *)(void *)(g->seg[j] + g->pairs_off) + k;
}

static inline uint8_t *shm_slot_of(const struct shm_group *g, int j, unsigned step)
{
    return g->seg[j] + g->slots_off + (step & 1u) * g->slot_bytes;
}

static inline uint8_t *shm_fifo_of(const struct shm_group *g, int j, int k)
{
    return g->seg[j] + g->fifos_off + (size_t)k * g->fifo_bytes;
}

/* v has reached target (modulo 2^32). */
static inline bool shm_reached(unsigned v, unsigned target)
{
    return (int)(v - target) >= 0;
}

/* A condition shm_wait polls; ctx is the caller's. */
typedef bool (*shm_ready_fn)(const struct shm_group *g, const void *ctx);

/* Stores v in *p (release) and wakes every member sleeping on its doorbell. */
void shm_post(struct shm_group *g, atomic_uint *p, unsigned v);
/* Waits until ready(g, ctx): spins, then sleeps on this member's doorbell. Fails
 * (ERR_TIMEOUT blaming member peer) when it has not held for the timeout, ERR_PEER when a
 * member's process is gone, ERR_ABORTED on the abort flag or stop. Breaks g on failure. */
int shm_wait(struct shm_group *g, shm_ready_fn ready, const void *ctx, int peer, int *blame,
             struct err *e);
/* shm_wait for *p to reach target, blaming member peer. */
int shm_wait_count(struct shm_group *g, const atomic_uint *p, unsigned target, int peer,
                   int *blame, struct err *e);

#endif
