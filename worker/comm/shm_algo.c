/* shm_algo: the operations of the shared-memory transport (shm.h) on the segments and
 * waits of shm.c.
 *
 * Decisions:
 * - Collectives run in steps. At step s every member writes what its peers need into its
 *   slot s & 1 and posts head->in = s; readers wait for that post. Before writing slot
 *   s & 1 again (step s + 2) a member waits until every peer has posted step s + 1,
 *   which a peer does only once it has finished step s: two slots let neighbours one
 *   step apart proceed without waiting, and a chunk's copy-in overlaps the previous
 *   chunk's reduction and copy-out on the other members.
 * - Large allreduce is a reduce-scatter and an all-gather through the slots, chunk by
 *   chunk (slot_bytes per step, so a chunk stays in cache between the copy in and the
 *   reduction): member k copies the parts of its input the others reduce, reduces its own
 *   part from its input and their copies, posts head->out, and every member copies the
 *   reduced parts out. Each element is reduced by one member, in member order, so every
 *   member gets the same bytes. Small allreduce (up to SHM_SMALL_BYTES) is one step:
 *   every member copies its whole input and reduces everything itself, one wait instead
 *   of two. Measured (tests/bench/RESULTS.md, issue 30): thresholds of 4, 16 and 64 KiB
 *   are within 10% at 2 ranks; at 4 ranks 64 KiB helps 8-32 KiB but costs 35% at 64 KiB.
 * - Staging through the segment at every size, not single-copy reads of a peer's buffer
 *   (process_vm_readv, CMA). Measured (tests/bench/RESULTS.md, issue 30, shm_copy.c, 2
 *   processes, one-way copies): CMA is 1.2-2.0x faster from 32 to 512 KiB, but staging
 *   wins at 4-16 KiB (a system call and page pinning per piece) and from 1 MiB up (CMA at
 *   0.36-0.64x of it), where a staged chunk stays in cache between the copy in and its
 *   reduction. An allreduce of 32-512 KiB already runs at 1.2-2.9x OpenMPI's busbw
 *   staged, and Docker's default seccomp profile refuses CMA, so one path is kept; CMA
 *   for one-way 32-512 KiB copies (send/recv, broadcast) is the measured opportunity.
 * - Point-to-point is a byte stream per ordered pair: a ring of fifo_bytes in the
 *   sender's segment, its head counter in the sender's and its tail in the receiver's,
 *   each message an 8-byte length and the payload. sendrecv moves both directions in
 *   one loop, so exchanges larger than a ring cannot deadlock. */
#include <string.h>

#include "worker/comm/reduce.h"
#include "worker/comm/shm_internal.h"

#define SHM_SMALL_BYTES (16u << 10)
#define SHM_P2P_PIECE (64u << 10) /* a ring's bytes posted at once: the receiver starts early */

/* ---- steps ------------------------------------------------------------------------ */

/* Starts step g->step + 1: waits until every peer posted g->step (finished reading this
 * member's slot of two steps ago). Returns the slot to write, or NULL with e set. */
static uint8_t *shm_step_begin(struct shm_group *g, int *blame, struct err *e)
{
    for (int j = 0; j < g->n; j++)
        if (j != g->me && shm_wait_count(g, &shm_head_of(g, j)->in, g->step, j, blame, e) < 0)
            return NULL;
    return shm_slot_of(g, g->me, g->step + 1);
}

static void shm_step_publish(struct shm_group *g)
{
    g->step++;
    shm_post(g, &shm_head_of(g, g->me)->in, g->step);
}

/* Waits until every peer has published the current step. */
static int shm_step_gather(struct shm_group *g, int *blame, struct err *e)
{
    for (int j = 0; j < g->n; j++)
        if (j != g->me && shm_wait_count(g, &shm_head_of(g, j)->in, g->step, j, blame, e) < 0)
            return -1;
    return 0;
}

/* dst = src[0] op src[1] op ... (member order) over count elements. dst may be one of the
 * sources exactly: that one is folded first, before dst is written. */
static void shm_fold(void *dst, const uint8_t *const *src, int k, size_t count,
                     enum comm_dtype t, enum comm_redop op)
{
    if (count == 0)
        return;
    if (k == 1) {
        if (src[0] != dst)
            memcpy(dst, src[0], count * comm_dtype_size(t));
        return;
    }
    int first = 0;
    for (int i = 0; i < k; i++)
        if (src[i] == dst)
            first = i;
    int second = first == 0 ? 1 : 0;
    int lo = first < second ? first : second, hi = first < second ? second : first;
    reduce_apply(dst, src[lo], src[hi], count, t, op);
    for (int i = 0; i < k; i++)
        if (i != lo && i != hi)
            reduce_apply(dst, dst, src[i], count, t, op);
}

/* The start of part k of a chunk of m elements split among n members. */
static size_t shm_part(size_t m, int n, int k)
{
    return m * (size_t)k / (size_t)n;
}

/* ---- allreduce -------------------------------------------------------------------- */

/* One step of the small allreduce: every member copies its chunk, every reader reduces
 * all of it. */
static int shm_allreduce_small(struct shm_group *g, const struct comm_args *a, int root,
                               size_t off, size_t m, const uint8_t **src, int *blame,
                               struct err *e)
{
    size_t es = comm_dtype_size(a->dtype);
    uint8_t *slot = shm_step_begin(g, blame, e);
    if (!slot)
        return -1;
    memcpy(slot, (const uint8_t *)a->send + off * es, m * es);
    shm_step_publish(g);
    if (shm_step_gather(g, blame, e) < 0)
        return -1;
    if (root >= 0 && root != g->me)
        return 0;
    for (int j = 0; j < g->n; j++)
        src[j] = shm_slot_of(g, j, g->step);
    uint8_t *dst = (uint8_t *)a->recv + off * es;
    shm_fold(dst, src, g->n, m, a->dtype, a->redop);
    if (a->redop == COMM_AVG)
        reduce_divide(dst, m, a->dtype, g->n);
    return 0;
}

/* One step of the large allreduce (see the opening comment). */
static int shm_allreduce_large(struct shm_group *g, const struct comm_args *a, int root,
                               size_t off, size_t m, const uint8_t **src, int *blame,
                               struct err *e)
{
    size_t es = comm_dtype_size(a->dtype);
    int n = g->n, me = g->me;
    const uint8_t *send = (const uint8_t *)a->send + off * es;
    uint8_t *slot = shm_step_begin(g, blame, e);
    if (!slot)
        return -1;
    for (int k = 0; k < n; k++) {
        size_t p = shm_part(m, n, k), len = shm_part(m, n, k + 1) - p;
        if (k != me)
            memcpy(slot + p * es, send + p * es, len * es);
    }
    shm_step_publish(g);
    if (shm_step_gather(g, blame, e) < 0)
        return -1;
    size_t mine = shm_part(m, n, me), mlen = shm_part(m, n, me + 1) - mine;
    for (int j = 0; j < n; j++)
        src[j] = j == me ? send + mine * es : shm_slot_of(g, j, g->step) + mine * es;
    uint8_t *dst = slot + mine * es;
    shm_fold(dst, src, n, mlen, a->dtype, a->redop);
    if (a->redop == COMM_AVG)
        reduce_divide(dst, mlen, a->dtype, n);
    shm_post(g, &shm_head_of(g, me)->out, g->step);
    if (root >= 0 && root != me)
        return 0;
    uint8_t *recv = (uint8_t *)a->recv + off * es;
    for (int k = 0; k < n; k++) {
        size_t p = shm_part(m, n, k), len = shm_part(m, n, k + 1) - p;
        if (k != me && shm_wait_count(g, &shm_head_of(g, k)->out, g->step, k, blame, e) < 0)
            return -1;
        memcpy(recv + p * es, shm_slot_of(g, k, g->step) + p * es, len * es);
    }
    return 0;
}

static int shm_allreduce(struct shm_group *g, const struct comm_args *a, int root, int *blame,
                         struct err *e)
{
    size_t es = comm_dtype_size(a->dtype), per = g->slot_bytes / es;
    bool small = a->count * es <= SHM_SMALL_BYTES;
    int rc = 0;
    for (size_t off = 0; off < a->count && rc == 0; off += per) {
        size_t m = a->count - off < per ? a->count - off : per;
        rc = small ? shm_allreduce_small(g, a, root, off, m, g->src, blame, e)
                   : shm_allreduce_large(g, a, root, off, m, g->src, blame, e);
    }
    return rc;
}

/* ---- reduce_scatter, all_gather, broadcast, barrier -------------------------------- */

static int shm_reduce_scatter(struct shm_group *g, const struct comm_args *a, int *blame,
                              struct err *e)
{
    size_t es = comm_dtype_size(a->dtype), c = a->count;
    size_t per = g->slot_bytes / es / (size_t)g->n;
    int n = g->n, me = g->me;
    const uint8_t *send = a->send;
    const uint8_t **src = g->src;
    int rc = 0;
    for (size_t off = 0; off < c && rc == 0; off += per) {
        size_t m = c - off < per ? c - off : per;
        uint8_t *slot = shm_step_begin(g, blame, e);
        if (!slot) {
            rc = -1;
            break;
        }
        for (int k = 0; k < n; k++)
            if (k != me)
                memcpy(slot + (size_t)k * m * es, send + ((size_t)k * c + off) * es, m * es);
        shm_step_publish(g);
        if ((rc = shm_step_gather(g, blame, e)) < 0)
            break;
        for (int j = 0; j < n; j++)
            src[j] = j == me ? send + ((size_t)me * c + off) * es
                             : shm_slot_of(g, j, g->step) + (size_t)me * m * es;
        uint8_t *dst = (uint8_t *)a->recv + off * es;
        shm_fold(dst, src, n, m, a->dtype, a->redop);
        if (a->redop == COMM_AVG)
            reduce_divide(dst, m, a->dtype, n);
    }
    return rc;
}

/* The copying collectives in one loop: all_gather (root -1: every member writes its chunk
 * and copies every member's out) and broadcast (root writes, the others copy it out). */
static int shm_copy_steps(struct shm_group *g, const struct comm_args *a, int root, int *blame,
                          struct err *e)
{
    size_t es = comm_dtype_size(a->dtype), c = a->count, per = g->slot_bytes / es;
    const uint8_t *send = a->send;
    uint8_t *recv = a->recv;
    for (size_t off = 0; off < c; off += per) {
        size_t m = c - off < per ? c - off : per;
        uint8_t *slot = shm_step_begin(g, blame, e);
        if (!slot)
            return -1;
        if (root < 0 || g->me == root)
            memcpy(slot, send + off * es, m * es);
        shm_step_publish(g);
        if (root >= 0 && g->me == root) {
            if (send != recv)
                memcpy(recv + off * es, send + off * es, m * es);
        } else if (root >= 0) {
            if (shm_wait_count(g, &shm_head_of(g, root)->in, g->step, root, blame, e) < 0)
                return -1;
            memcpy(recv + off * es, shm_slot_of(g, root, g->step), m * es);
        } else {
            if (shm_step_gather(g, blame, e) < 0)
                return -1;
            for (int k = 0; k < g->n; k++) {
                uint8_t *dst = recv + ((size_t)k * c + off) * es;
                const uint8_t *from = k == g->me ? send + off * es : shm_slot_of(g, k, g->step);
                if (dst != from)
                    memcpy(dst, from, m * es);
            }
        }
    }
    return 0;
}

static int shm_barrier(struct shm_group *g, int *blame, struct err *e)
{
    if (!shm_step_begin(g, blame, e))
        return -1;
    shm_step_publish(g);
    return shm_step_gather(g, blame, e);
}

/* ---- point-to-point ---------------------------------------------------------------- */

/* One direction of a message: an 8-byte length, then the payload. */
struct shm_xfer {
    int peer; /* member, or -1: no transfer in this direction */
    uint8_t hdr[8];
    uint8_t *part[2];
    size_t len[2];
    int cur; /* part in progress; 2 when done */
    size_t done;
    size_t expect; /* receive: payload bytes this member expects */
};

static void shm_xfer_init(struct shm_xfer *x, int peer, uint8_t *payload, size_t len)
{
    *x = (struct shm_xfer){.peer = peer, .expect = len, .cur = peer < 0 ? 2 : 0};
    uint64_t v = len;
    memcpy(x->hdr, &v, sizeof v);
    x->part[0] = x->hdr;
    x->len[0] = sizeof x->hdr;
    x->part[1] = payload;
    x->len[1] = len;
}

/* Bytes that can move at once between position pos of a ring and the current part. */
static size_t shm_xfer_piece(const struct shm_group *g, const struct shm_xfer *x, size_t room,
                             unsigned pos)
{
    size_t n = x->len[x->cur] - x->done, at = pos % g->fifo_bytes;
    if (n > room)
        n = room;
    if (n > g->fifo_bytes - at)
        n = g->fifo_bytes - at;
    return n < SHM_P2P_PIECE ? n : SHM_P2P_PIECE;
}

static void shm_xfer_advance(struct shm_xfer *x, size_t n)
{
    x->done += n;
    while (x->cur < 2 && x->done == x->len[x->cur]) {
        x->cur++;
        x->done = 0;
    }
}

/* Moves what fits of x into this member's ring to x->peer. Returns whether bytes moved. */
static bool shm_send_some(struct shm_group *g, struct shm_xfer *x)
{
    if (x->cur >= 2)
        return false;
    struct shm_pair *mine = shm_pair_of(g, g->me, x->peer);
    const struct shm_pair *theirs = shm_pair_of(g, x->peer, g->me);
    unsigned head = atomic_load_explicit(&mine->head, memory_order_relaxed);
    unsigned tail = atomic_load_explicit(&theirs->tail, memory_order_acquire);
    uint8_t *ring = shm_fifo_of(g, g->me, x->peer);
    bool moved = false;
    size_t room = g->fifo_bytes - (size_t)(head - tail);
    while (x->cur < 2 && room > 0) {
        size_t n = shm_xfer_piece(g, x, room, head);
        memcpy(ring + head % g->fifo_bytes, x->part[x->cur] + x->done, n);
        head += (unsigned)n;
        room -= n;
        shm_xfer_advance(x, n);
        shm_post(g, &mine->head, head);
        moved = true;
    }
    return moved;
}

/* Payload bytes of x moved so far. */
static size_t shm_xfer_payload(const struct shm_xfer *x)
{
    return x->cur >= 2 ? x->len[1] : x->cur == 1 ? x->done : 0;
}

/* Moves what has arrived from x->peer into x. gate (in place: the send reads the buffer
 * the receive overwrites) bounds the payload to what gate has sent. *moved: whether bytes
 * moved. -1 when the announced length is not the expected one. */
static int shm_recv_some(struct shm_group *g, struct shm_xfer *x, const struct shm_xfer *gate,
                         bool *moved, int *blame, struct err *e)
{
    if (x->cur >= 2)
        return 0;
    struct shm_pair *mine = shm_pair_of(g, g->me, x->peer);
    const struct shm_pair *theirs = shm_pair_of(g, x->peer, g->me);
    unsigned tail = atomic_load_explicit(&mine->tail, memory_order_relaxed);
    unsigned head = atomic_load_explicit(&theirs->head, memory_order_acquire);
    const uint8_t *ring = shm_fifo_of(g, x->peer, g->me);
    size_t avail = (size_t)(head - tail);
    while (x->cur < 2 && avail > 0) {
        int part = x->cur;
        size_t n = shm_xfer_piece(g, x, avail, tail);
        if (part == 1 && gate && gate->cur < 2) {
            size_t sent = shm_xfer_payload(gate);
            if (sent <= x->done)
                break;
            n = n < sent - x->done ? n : sent - x->done;
        }
        memcpy(x->part[part] + x->done, ring + tail % g->fifo_bytes, n);
        tail += (unsigned)n;
        avail -= n;
        shm_xfer_advance(x, n);
        shm_post(g, &mine->tail, tail);
        *moved = true;
        uint64_t announced;
        memcpy(&announced, x->hdr, sizeof announced);
        if (part == 0 && x->cur > 0 && announced != x->expect) {
            g->broken = true;
            *blame = x->peer;
            return err_set(e, ERR_PROTOCOL, NULL,
                           "rank %d sent a %llu-byte message, this rank expects %zu bytes",
                           g->ranks[x->peer], (unsigned long long)announced, x->expect);
        }
    }
    return 0;
}

struct shm_p2p_wait {
    const struct shm_xfer *send, *recv;
    bool inplace; /* the receive waits for the send's progress too */
};

/* The send has room in its ring, or the receive has bytes waiting. */
static bool shm_p2p_ready(const struct shm_group *g, const void *ctx)
{
    const struct shm_p2p_wait *w = ctx;
    if (w->send->cur < 2) {
        unsigned head = atomic_load_explicit(&shm_pair_of(g, g->me, w->send->peer)->head,
                                             memory_order_relaxed);
        unsigned tail = atomic_load_explicit(&shm_pair_of(g, w->send->peer, g->me)->tail,
                                             memory_order_seq_cst);
        if ((size_t)(head - tail) < g->fifo_bytes)
            return true;
    }
    bool gated = w->inplace && w->recv->cur == 1 && w->send->cur < 2 &&
                 shm_xfer_payload(w->send) <= w->recv->done;
    if (w->recv->cur < 2 && !gated) {
        unsigned head = atomic_load_explicit(&shm_pair_of(g, w->recv->peer, g->me)->head,
                                             memory_order_seq_cst);
        unsigned tail = atomic_load_explicit(&shm_pair_of(g, g->me, w->recv->peer)->tail,
                                             memory_order_relaxed);
        if (head != tail)
            return true;
    }
    return false;
}

static int shm_p2p(struct shm_group *g, int to, const void *sbuf, size_t slen, int from,
                   void *rbuf, size_t rlen, int *blame, struct err *e)
{
    struct shm_xfer s, r;
    shm_xfer_init(&s, to, (uint8_t *)(uintptr_t)sbuf, slen);
    shm_xfer_init(&r, from, rbuf, rlen);
    bool inplace = to >= 0 && from >= 0 && sbuf == rbuf;
    struct shm_p2p_wait w = {&s, &r, inplace};
    while (s.cur < 2 || r.cur < 2) {
        bool moved = shm_send_some(g, &s);
        if (shm_recv_some(g, &r, inplace ? &s : NULL, &moved, blame, e) < 0)
            return -1;
        if (!moved && (s.cur < 2 || r.cur < 2) &&
            shm_wait(g, shm_p2p_ready, &w, r.cur < 2 ? from : to, blame, e) < 0)
            return -1;
    }
    return 0;
}

/* ---- dispatch ---------------------------------------------------------------------- */

int shm_group_run(struct shm_group *g, const struct comm_args *a, int root, int *blame,
                  struct err *e)
{
    *blame = -1;
    if (g->broken)
        return err_set(e, ERR_PEER, NULL, "shared memory out of step after a failure");
    size_t bytes = a->count * comm_dtype_size(a->dtype);
    switch (a->op) {
    case COMM_OP_ALLREDUCE: return shm_allreduce(g, a, root, blame, e);
    case COMM_OP_REDUCE_SCATTER: return shm_reduce_scatter(g, a, blame, e);
    case COMM_OP_ALL_GATHER: return shm_copy_steps(g, a, -1, blame, e);
    case COMM_OP_BROADCAST: return shm_copy_steps(g, a, a->peer, blame, e);
    case COMM_OP_BARRIER: return shm_barrier(g, blame, e);
    case COMM_OP_SEND: return shm_p2p(g, a->peer, a->send, bytes, -1, NULL, 0, blame, e);
    case COMM_OP_RECV: return shm_p2p(g, -1, NULL, 0, a->peer, a->recv, bytes, blame, e);
    case COMM_OP_SENDRECV:
        return shm_p2p(g, a->peer, a->send, bytes, a->peer2, a->recv,
                       a->count2 * comm_dtype_size(a->dtype), blame, e);
    }
    return err_set(e, ERR_INTERNAL, NULL, "shm: operation %d", (int)a->op);
}
