/* tcp_algo: the algorithms of the TCP backend, each a plan of lanes for tcp_engine.c
 * (see tcp_engine.h), and the choice between them.
 *
 *   allreduce       ring (reduce-scatter + all-gather as one pipelined stream) | rd
 *                   (recursive doubling) | hd (Rabenseifner: recursive halving, then
 *                   doubling) | hier (chain reduce inside each node to its leader, ring,
 *                   rd or hd between the leaders, broadcast inside each node)
 *   reduce_scatter  ring | direct          all_gather  ring | direct
 *   broadcast       ring (a pipelined chain from the root) | tree (binomial)
 *   send, recv, sendrecv  direct (16-byte header announcing the length)
 *   barrier         rd (allreduce of one int32)
 *
 * Decisions:
 * - The ring allreduce is one engine run, not 2(n-1) steps: the piece sent at step k is
 *   the chunk received at step k-1, gated on how much of it has been reduced, so a
 *   segment travels on as soon as it is reduced and the steps overlap.
 * - Large allreduces go in blocks of world_size chunks of 512 KiB (2 MiB when ranks share
 *   CPUs), each reduced, forwarded and overwritten while it is still in cache: on this
 *   machine that took 64 MiB from 2.3 to 3 GB/s of bus bandwidth (RESULTS.md).
 * - Recursive doubling and halving-doubling handle any world size by folding: the first
 *   2*(n - p) ranks (p the largest power of two <= n) pair up, the even one hands its
 *   data to the odd one and gets the result at the end. In recursive doubling, operands
 *   are combined lower rank first on every rank, so every rank computes bit-identical
 *   results; in the others every element is reduced by one rank only.
 * - Automatic choice by message size, thresholds measured on loopback
 *   (tests/bench/RESULTS.md): latency-bound algorithms below, bandwidth-bound above.
 *   When ranks share nodes and there is more than one node, auto takes hier from 64 KiB:
 *   measured between 2 netlab nodes of 2 ranks over 1 GbE it took 0.6 to 0.84 of the
 *   flat ring's time at every size from 64 KiB to 64 MiB, and halving-doubling (what
 *   size alone picks at 4 ranks) was slower still, since it crosses the slow link more
 *   (tests/bench/RESULTS.md, bench_netlab.py --part hier). Every rank decides alike: the
 *   node map and the size are the same on all of them.
 * - The algorithms run on a group of ranks (struct tcp_group): the whole communicator,
 *   or, for hier, the ranks of one node or the node leaders. The mesh already connects
 *   every pair, so a group needs no sockets of its own, and hier reuses ring, rd, hd and
 *   broadcast as they are instead of copies. A group other than the whole communicator
 *   runs sum, min or max only: avg divides by the communicator's world size. */
#include "worker/comm/tcp_algo.h"

#include <stdio.h>
#include <string.h>

#include "worker/comm/reduce.h"
#include "worker/comm/shm.h"

/* Allreduce: recursive doubling below these many bytes per rank (measured on loopback,
 * tests/bench/RESULTS.md: at 2 ranks rd wins up to 512 KiB, at 4 up to 16 or 32 KiB);
 * above, the ring at 2 ranks or any world size that is not a power of two (folding
 * would send the whole buffer twice more), halving-doubling otherwise. */
#define TCP_AUTO_RD_BYTES_2 (1u << 20)
#define TCP_AUTO_RD_BYTES (64u << 10)
#define TCP_AUTO_GATHER_RING (64u << 10) /* reduce_scatter, all_gather: total bytes */
#define TCP_AUTO_BROADCAST_RING (64u << 10)
#define TCP_AUTO_HIER_BYTES (64u << 10) /* allreduce across nodes that hold several ranks */
/* The same with shared memory inside the nodes: hier from this size. Measured (RESULTS.md,
 * issue 30, 2 netlab hosts x 2 ranks on 2 shared CPUs): over 1gbe hier beats every flat
 * TCP algorithm by 1.2-1.5x from 64 KiB up and is within noise of rd below; over 10gbe
 * the flat ring wins from 4 MiB (0.5-0.8x for hier), where the 4 ranks' CPUs and not the
 * link are the bound. The communicator does not know the link's speed, so hier stays the
 * choice at every size across nodes; an upper bound by link speed is left open. */
#define TCP_AUTO_HIER_BYTES_SHM 0u

static int tcp_mod(int a, int n)
{
    return ((a % n) + n) % n;
}

/* The ranks an algorithm runs among: n members, this rank is member me, member i is
 * communicator rank ranks[i] (ranks NULL: member i is rank i). Ranks ascend with the
 * members, so "lower member first" is "lower rank first". */
struct tcp_group {
    int n, me;
    const int *ranks; /* borrowed */
};

static int tcp_grp_rank(const struct tcp_group *g, int member)
{
    return g->ranks ? g->ranks[member] : member;
}

static struct tcp_group tcp_group_all(const struct comm_tcp *t)
{
    return (struct tcp_group){t->base.world_size, t->base.rank, NULL};
}

/* ---- plans ---------------------------------------------------------------------- */

struct tcp_plan {
    struct tcp_run run;
    struct tcp_piece *pool;
    int used;
};

/* After tcp_plan_reserve: an empty plan for a. */
static void tcp_plan_init(struct tcp_plan *pl, struct comm_tcp *t, const char *op,
                          const struct comm_args *a)
{
    pl->run = (struct tcp_run){.op = op,
                               .dtype = a->dtype,
                               .redop = a->redop,
                               .esize = comm_dtype_size(a->dtype),
                               .lanes = t->lanes};
    pl->pool = t->pieces;
    pl->used = 0;
}

/* Adds a lane of npieces pieces (zeroed, ungated) and returns it. */
static struct tcp_lane *tcp_plan_lane(struct tcp_plan *pl, int peer, bool is_send, int npieces)
{
    struct tcp_lane *l = &pl->run.lanes[pl->run.n++];
    l->peer = peer;
    l->is_send = is_send;
    l->gate_lane = -1;
    l->pieces = pl->pool + pl->used;
    l->n = npieces;
    for (int i = 0; i < npieces; i++)
        l->pieces[i].gate = -1;
    pl->used += npieces;
    return l;
}

static void tcp_piece_set(struct tcp_piece *pc, const void *p, size_t len)
{
    pc->p = (uint8_t *)(uintptr_t)p; /* send pieces are only read */
    pc->len = len;
}

/* One run sending sbuf to rank `to` while receiving rbuf from rank `from` (either -1). */
static int tcp_xchg(struct comm_tcp *t, const struct comm_args *a, const char *op, int to,
                    const void *sbuf, size_t slen, int from, void *rbuf, size_t rlen,
                    struct err *e)
{
    struct tcp_plan pl;
    if (tcp_plan_reserve(t, op, 2, 2, e) < 0)
        return -1;
    tcp_plan_init(&pl, t, op, a);
    if (to >= 0)
        tcp_piece_set(&tcp_plan_lane(&pl, to, true, 1)->pieces[0], sbuf, slen);
    if (from >= 0)
        tcp_piece_set(&tcp_plan_lane(&pl, from, false, 1)->pieces[0], rbuf, rlen);
    return tcp_engine_run(t, &pl.run, e);
}

/* Chunk k of count elements over n ranks: floor(count/n), plus one for the first
 * count % n chunks. */
struct tcp_chunks {
    size_t base, rem, esize;
};

static size_t tcp_chunk_off(const struct tcp_chunks *c, int k)
{
    size_t kk = (size_t)k;
    return (kk * c->base + (kk < c->rem ? kk : c->rem)) * c->esize;
}

static size_t tcp_chunk_len(const struct tcp_chunks *c, int k)
{
    return (c->base + ((size_t)k < c->rem ? 1 : 0)) * c->esize;
}

/* ---- allreduce ---------------------------------------------------------------------- */

/* Step k (0 .. 2n-3) sends chunk r-k and receives chunk r-k-1: steps up to n-2 reduce
 * what arrives into recv (reduce-scatter), later ones store it (all-gather). Step 0
 * sends from send, so out of place needs no copy; the contribution combined at each
 * reduce step is still untouched in send (or is recv itself, in place).
 * Large messages go around the ring in blocks of TCP_RING_BLOCK bytes, one after the
 * other in the same run (block b+1's first step starts while block b's last one is on
 * the wire): a block's data is still in cache when it is reduced, forwarded and
 * overwritten by the result, so each byte crosses the memory bus once each way instead
 * of up to three times. */
static int tcp_ring_allreduce(struct comm_tcp *t, const struct comm_args *a,
                              const struct tcp_group *g, struct err *e)
{
    int n = g->n, r = g->me, steps = 2 * n - 2;
    size_t es = comm_dtype_size(a->dtype), per_block = t->ring_block / es;
    if (per_block < (size_t)n)
        per_block = (size_t)n;
    size_t nblocks = (a->count + per_block - 1) / per_block;
    if (nblocks > (size_t)(INT32_MAX / 2 / steps))
        return err_set(e, ERR_INVALID, "count", "allreduce: %zu elements are too many",
                       a->count);
    struct tcp_plan pl;
    if (tcp_plan_reserve(t, comm_op_name(a->op), 2, 2 * steps * (int)nblocks, e) < 0)
        return -1;
    tcp_plan_init(&pl, t, "allreduce", a);
    struct tcp_lane *out = tcp_plan_lane(&pl, tcp_grp_rank(g, tcp_mod(r + 1, n)), true,
                                         steps * (int)nblocks);
    struct tcp_lane *in = tcp_plan_lane(&pl, tcp_grp_rank(g, tcp_mod(r - 1, n)), false,
                                        steps * (int)nblocks);
    out->gate_lane = 1;
    for (size_t b = 0; b < nblocks; b++) {
        size_t first = b * per_block,
               cnt = a->count - first < per_block ? a->count - first : per_block;
        struct tcp_chunks ch = {cnt / (size_t)n, cnt % (size_t)n, es};
        const uint8_t *send = (const uint8_t *)a->send + first * es;
        uint8_t *recv = (uint8_t *)a->recv + first * es;
        for (int k = 0; k < steps; k++) {
            int j = (int)b * steps + k, sc = tcp_mod(r - k, n), rc = tcp_mod(r - k - 1, n);
            tcp_piece_set(&out->pieces[j], (k == 0 ? send : recv) + tcp_chunk_off(&ch, sc),
                          tcp_chunk_len(&ch, sc));
            out->pieces[j].gate = k == 0 ? -1 : j - 1;
            struct tcp_piece *pc = &in->pieces[j];
            tcp_piece_set(pc, recv + tcp_chunk_off(&ch, rc), tcp_chunk_len(&ch, rc));
            if (k <= n - 2) {
                pc->a = send + tcp_chunk_off(&ch, rc);
                pc->divide = a->redop == COMM_AVG && k == n - 2;
            }
        }
    }
    return tcp_engine_run(t, &pl.run, e);
}

/* buf = op(lower rank's operand, higher rank's operand). */
static void tcp_combine(const struct comm_args *a, uint8_t *buf, const uint8_t *theirs,
                        bool theirs_lower)
{
    if (theirs_lower)
        reduce_apply(buf, theirs, buf, a->count, a->dtype, a->redop);
    else
        reduce_apply(buf, buf, theirs, a->count, a->dtype, a->redop);
}

/* Folding for recursive doubling and halving-doubling: the first 2*extra ranks pair up
 * and the even one hands its data to the odd one, which combines it (lower rank first)
 * and takes part in the power-of-two exchange as rank r/2; the other ranks as r - extra.
 * Returns the rank in the power-of-two group, or -1 for a rank that handed its data
 * over and waits for the result. */
static int tcp_fold_in(struct comm_tcp *t, const struct comm_args *a, const struct tcp_group *g,
                       const char *op, uint8_t *buf, int extra, struct err *e)
{
    int r = g->me;
    size_t bytes = a->count * comm_dtype_size(a->dtype);
    if (r >= 2 * extra)
        return r - extra;
    if (r % 2 == 0)
        return tcp_xchg(t, a, op, tcp_grp_rank(g, r + 1), buf, bytes, -1, NULL, 0, e) < 0 ? -2
                                                                                          : -1;
    if (tcp_scratch_reserve(t, op, bytes, e) < 0 ||
        tcp_xchg(t, a, op, -1, NULL, 0, tcp_grp_rank(g, r - 1), t->scratch, bytes, e) < 0)
        return -2;
    tcp_combine(a, buf, t->scratch, true);
    return r / 2;
}

/* The member that plays power-of-two rank pn. */
static int tcp_fold_rank(int pn, int extra)
{
    return pn < extra ? pn * 2 + 1 : pn + extra;
}

/* The end of folding: the odd rank of a pair hands the result back. */
static int tcp_fold_out(struct comm_tcp *t, const struct comm_args *a,
                        const struct tcp_group *g, const char *op, uint8_t *buf, int extra,
                        struct err *e)
{
    int r = g->me;
    size_t bytes = a->count * comm_dtype_size(a->dtype);
    if (r >= 2 * extra)
        return 0;
    if (r % 2)
        return tcp_xchg(t, a, op, tcp_grp_rank(g, r - 1), buf, bytes, -1, NULL, 0, e);
    return tcp_xchg(t, a, op, -1, NULL, 0, tcp_grp_rank(g, r + 1), buf, bytes, e);
}

static int tcp_pow2_below(int n)
{
    int p = 1;
    while (p * 2 <= n)
        p *= 2;
    return p;
}

/* Every step exchanges the whole buffer with the partner at distance 1, 2, 4, ... */
static int tcp_rd_allreduce(struct comm_tcp *t, const struct comm_args *a,
                            const struct tcp_group *g, const char *op, struct err *e)
{
    int p = tcp_pow2_below(g->n), extra = g->n - p;
    size_t bytes = a->count * comm_dtype_size(a->dtype);
    uint8_t *buf = a->recv;
    if (a->send != a->recv)
        memcpy(buf, a->send, bytes);
    int me = tcp_fold_in(t, a, g, op, buf, extra, e);
    if (me == -2 || tcp_scratch_reserve(t, op, bytes, e) < 0)
        return -1;
    for (int mask = 1; me >= 0 && mask < p; mask <<= 1) {
        int partner = tcp_fold_rank(me ^ mask, extra), peer = tcp_grp_rank(g, partner);
        if (tcp_xchg(t, a, op, peer, buf, bytes, peer, t->scratch, bytes, e) < 0)
            return -1;
        tcp_combine(a, buf, t->scratch, partner < g->me);
    }
    if (me >= 0 && a->redop == COMM_AVG)
        reduce_divide(buf, a->count, a->dtype, t->base.world_size);
    return tcp_fold_out(t, a, g, op, buf, extra, e);
}

/* One halving-doubling step: send chunks [glo, ghi) to the partner while receiving
 * chunks [klo, khi) from it, reduced into buf (reduce) or stored. */
static int tcp_hd_step(struct comm_tcp *t, const struct comm_args *a, uint8_t *buf,
                       const struct tcp_chunks *ch, int partner, int glo, int ghi, int klo,
                       int khi, bool reduce, bool divide, struct err *e)
{
    struct tcp_plan pl;
    if (tcp_plan_reserve(t, "allreduce", 2, 2, e) < 0)
        return -1;
    tcp_plan_init(&pl, t, "allreduce", a);
    size_t go = tcp_chunk_off(ch, glo), ko = tcp_chunk_off(ch, klo);
    tcp_piece_set(&tcp_plan_lane(&pl, partner, true, 1)->pieces[0], buf + go,
                  tcp_chunk_off(ch, ghi) - go);
    struct tcp_piece *pc = &tcp_plan_lane(&pl, partner, false, 1)->pieces[0];
    tcp_piece_set(pc, buf + ko, tcp_chunk_off(ch, khi) - ko);
    pc->a = reduce ? buf + ko : NULL;
    pc->divide = divide;
    return tcp_engine_run(t, &pl.run, e);
}

/* Rabenseifner: reduce-scatter by recursive halving (at distance p/2, p/4, ..., 1 keep
 * the half of the chunk range this rank's bit selects, reducing what the partner sends
 * for it), then all-gather by recursive doubling back out. Moves as many bytes as the
 * ring in log2(p) steps each way instead of p-1. a is one block (see below). */
static int tcp_hd_block(struct comm_tcp *t, const struct comm_args *a,
                        const struct tcp_group *g, struct err *e)
{
    int p = tcp_pow2_below(g->n), extra = g->n - p;
    size_t es = comm_dtype_size(a->dtype);
    uint8_t *buf = a->recv;
    if (a->send != a->recv)
        memcpy(buf, a->send, a->count * es);
    int me = tcp_fold_in(t, a, g, "allreduce", buf, extra, e);
    if (me == -2)
        return -1;
    struct tcp_chunks ch = {a->count / (size_t)p, a->count % (size_t)p, es};
    int lo = 0, hi = p;
    for (int d = p / 2; me >= 0 && d >= 1; d /= 2) {
        int mid = lo + (hi - lo) / 2, up = me & d;
        if (tcp_hd_step(t, a, buf, &ch, tcp_grp_rank(g, tcp_fold_rank(me ^ d, extra)),
                        up ? lo : mid, up ? mid : hi, up ? mid : lo, up ? hi : mid, true,
                        d == 1 && a->redop == COMM_AVG, e) < 0)
            return -1;
        lo = up ? mid : lo;
        hi = up ? hi : mid;
    }
    for (int d = 1; me >= 0 && d < p; d *= 2) {
        int size = hi - lo, up = me & d;
        if (tcp_hd_step(t, a, buf, &ch, tcp_grp_rank(g, tcp_fold_rank(me ^ d, extra)), lo, hi,
                        up ? lo - size : hi, up ? lo : hi + size, false, false, e) < 0)
            return -1;
        lo = up ? lo - size : lo;
        hi = up ? hi : hi + size;
    }
    return tcp_fold_out(t, a, g, "allreduce", buf, extra, e);
}

/* Large messages in blocks of t->ring_block bytes, one whole halving-doubling each, so
 * that a block stays in cache from being reduced to being sent on and overwritten. */
static int tcp_hd_allreduce(struct comm_tcp *t, const struct comm_args *a,
                            const struct tcp_group *g, struct err *e)
{
    size_t es = comm_dtype_size(a->dtype), per_block = t->ring_block / es;
    if (per_block < (size_t)g->n)
        per_block = (size_t)g->n;
    for (size_t first = 0; first < a->count; first += per_block) {
        struct comm_args b = *a;
        b.count = a->count - first < per_block ? a->count - first : per_block;
        b.send = (const uint8_t *)a->send + first * es;
        b.recv = (uint8_t *)a->recv + first * es;
        if (tcp_hd_block(t, &b, g, e) < 0)
            return -1;
    }
    return 0;
}

/* ---- reduce_scatter and all_gather ---------------------------------------------------- */

/* Step k (0 .. n-2) sends block r-k-1 and receives block r-k-2, reduced with this
 * rank's own block; the last step's block is r and lands in recv. Partial blocks
 * alternate between two scratch blocks: a receive may only overwrite the bytes the
 * previous step has already sent from that block (its gate). */
static int tcp_ring_reduce_scatter(struct comm_tcp *t, const struct comm_args *a, struct err *e)
{
    int n = t->base.world_size, r = t->base.rank, steps = n - 1;
    size_t bb = a->count * comm_dtype_size(a->dtype);
    const uint8_t *send = a->send;
    struct tcp_plan pl;
    if (tcp_scratch_reserve(t, "reduce_scatter", 2 * bb, e) < 0 ||
        tcp_plan_reserve(t, "reduce_scatter", 2, 2 * steps, e) < 0)
        return -1;
    uint8_t *tmp[2] = {t->scratch, t->scratch + bb};
    tcp_plan_init(&pl, t, "reduce_scatter", a);
    struct tcp_lane *out = tcp_plan_lane(&pl, tcp_mod(r + 1, n), true, steps);
    struct tcp_lane *in = tcp_plan_lane(&pl, tcp_mod(r - 1, n), false, steps);
    out->gate_lane = 1;
    in->gate_lane = 0;
    for (int k = 0; k < steps; k++) {
        int sb = tcp_mod(r - k - 1, n), rb = tcp_mod(r - k - 2, n);
        bool last = k == steps - 1;
        tcp_piece_set(&out->pieces[k], k == 0 ? send + (size_t)sb * bb : tmp[(k - 1) % 2], bb);
        out->pieces[k].gate = k - 1;
        struct tcp_piece *pc = &in->pieces[k];
        tcp_piece_set(pc, last ? a->recv : tmp[k % 2], bb);
        pc->a = send + (size_t)rb * bb;
        pc->divide = last && a->redop == COMM_AVG;
        pc->gate = !last && k >= 2 ? k - 1 : -1;
    }
    return tcp_engine_run(t, &pl.run, e);
}

/* Every rank sends block j to rank j and receives its own block from everyone into
 * scratch, then reduces in rank order (the same order on every run). */
static int tcp_direct_reduce_scatter(struct comm_tcp *t, const struct comm_args *a,
                                     struct err *e)
{
    int n = t->base.world_size, r = t->base.rank;
    size_t bb = a->count * comm_dtype_size(a->dtype);
    const uint8_t *send = a->send;
    struct tcp_plan pl;
    if (tcp_scratch_reserve(t, comm_op_name(a->op), (size_t)n * bb, e) < 0 ||
        tcp_plan_reserve(t, comm_op_name(a->op), 2 * (n - 1), 2 * (n - 1), e) < 0)
        return -1;
    uint8_t *blocks = t->scratch;
    memcpy(blocks + (size_t)r * bb, send + (size_t)r * bb, bb);
    tcp_plan_init(&pl, t, "reduce_scatter", a);
    for (int j = 0; j < n; j++) {
        if (j == r)
            continue;
        tcp_piece_set(&tcp_plan_lane(&pl, j, true, 1)->pieces[0], send + (size_t)j * bb, bb);
        tcp_piece_set(&tcp_plan_lane(&pl, j, false, 1)->pieces[0], blocks + (size_t)j * bb, bb);
    }
    if (tcp_engine_run(t, &pl.run, e) < 0)
        return -1;
    reduce_apply(a->recv, blocks, blocks + bb, a->count, a->dtype, a->redop);
    for (int j = 2; j < n; j++)
        reduce_apply(a->recv, a->recv, blocks + (size_t)j * bb, a->count, a->dtype, a->redop);
    if (a->redop == COMM_AVG)
        reduce_divide(a->recv, a->count, a->dtype, n);
    return 0;
}

/* The own block goes to its place in recv first; step k forwards block r-k (as it
 * arrives, from step 1 on) and receives block r-k-1. */
static int tcp_ring_all_gather(struct comm_tcp *t, const struct comm_args *a, struct err *e)
{
    int n = t->base.world_size, r = t->base.rank, steps = n - 1;
    size_t bb = a->count * comm_dtype_size(a->dtype);
    uint8_t *recv = a->recv;
    struct tcp_plan pl;
    if (tcp_plan_reserve(t, comm_op_name(a->op), 2, 2 * steps, e) < 0)
        return -1;
    if (a->send != recv + (size_t)r * bb)
        memcpy(recv + (size_t)r * bb, a->send, bb);
    tcp_plan_init(&pl, t, "all_gather", a);
    struct tcp_lane *out = tcp_plan_lane(&pl, tcp_mod(r + 1, n), true, steps);
    struct tcp_lane *in = tcp_plan_lane(&pl, tcp_mod(r - 1, n), false, steps);
    out->gate_lane = 1;
    for (int k = 0; k < steps; k++) {
        tcp_piece_set(&out->pieces[k], recv + (size_t)tcp_mod(r - k, n) * bb, bb);
        out->pieces[k].gate = k - 1;
        tcp_piece_set(&in->pieces[k], recv + (size_t)tcp_mod(r - k - 1, n) * bb, bb);
    }
    return tcp_engine_run(t, &pl.run, e);
}

static int tcp_direct_all_gather(struct comm_tcp *t, const struct comm_args *a, struct err *e)
{
    int n = t->base.world_size, r = t->base.rank;
    size_t bb = a->count * comm_dtype_size(a->dtype);
    uint8_t *recv = a->recv;
    struct tcp_plan pl;
    if (tcp_plan_reserve(t, comm_op_name(a->op), 2 * (n - 1), 2 * (n - 1), e) < 0)
        return -1;
    tcp_plan_init(&pl, t, "all_gather", a);
    for (int j = 0; j < n; j++) {
        if (j == r)
            continue;
        tcp_piece_set(&tcp_plan_lane(&pl, j, true, 1)->pieces[0], a->send, bb);
        tcp_piece_set(&tcp_plan_lane(&pl, j, false, 1)->pieces[0], recv + (size_t)j * bb, bb);
    }
    if (tcp_engine_run(t, &pl.run, e) < 0)
        return -1;
    if (a->send != recv + (size_t)r * bb)
        memcpy(recv + (size_t)r * bb, a->send, bb);
    return 0;
}

/* ---- broadcast --------------------------------------------------------------------- */

/* Ranks numbered from the root (v = rank - root): the chain's parent is v-1 and its
 * child v+1; the binomial tree's parent clears v's lowest set bit and its children are
 * v + m for the powers of two m below that bit. Every forward is gated on the bytes
 * received, so data moves on while it arrives. */
static int tcp_broadcast(struct comm_tcp *t, const struct comm_args *a,
                         const struct tcp_group *g, bool tree, struct err *e)
{
    int n = g->n, r = g->me, root = a->peer; /* root: a member of g */
    int v = tcp_mod(r - root, n), low = v ? v & -v : n, kids[32], nk = 0;
    size_t bytes = a->count * comm_dtype_size(a->dtype);
    for (int m = 1; tree && m < low && v + m < n; m *= 2)
        kids[nk++] = v + m;
    if (!tree && v + 1 < n)
        kids[nk++] = v + 1;
    struct tcp_plan pl;
    if (tcp_plan_reserve(t, comm_op_name(a->op), nk + 1, nk + 1, e) < 0)
        return -1;
    tcp_plan_init(&pl, t, "broadcast", a);
    if (v > 0) {
        int parent = tree ? v - low : v - 1;
        tcp_piece_set(&tcp_plan_lane(&pl, tcp_grp_rank(g, tcp_mod(parent + root, n)), false, 1)
                           ->pieces[0],
                      a->recv, bytes);
    }
    for (int k = 0; k < nk; k++) {
        struct tcp_lane *l = tcp_plan_lane(&pl, tcp_grp_rank(g, tcp_mod(kids[k] + root, n)),
                                           true, 1);
        tcp_piece_set(&l->pieces[0], v == 0 ? a->send : a->recv, bytes);
        l->gate_lane = v > 0 ? 0 : -1;
        l->pieces[0].gate = v > 0 ? 0 : -1;
    }
    if (tcp_engine_run(t, &pl.run, e) < 0)
        return -1;
    if (v == 0 && a->send != a->recv)
        memcpy(a->recv, a->send, bytes);
    return 0;
}

/* ---- point to point ------------------------------------------------------------------ */

static void tcp_p2p_header(uint8_t h[TCP_P2P_HEADER], size_t len)
{
    for (int i = 0; i < 4; i++)
        h[i] = (uint8_t)(TCP_P2P_MAGIC >> (8 * i));
    memset(h + 4, 0, 4);
    for (int i = 0; i < 8; i++)
        h[8 + i] = (uint8_t)((uint64_t)len >> (8 * i));
}

#define TCP_P2P_SMALL 4096 /* header and payload up to this go out in one send(2) */

/* Sends slen bytes to `to` while receiving rlen bytes from `from` (either -1), each as
 * a header then the payload, in one run so crossing exchanges cannot deadlock. In place
 * (rbuf == sbuf) a small payload was copied out first; a large one is received only
 * over bytes already sent (the receive is gated on the send). */
static int tcp_p2p(struct comm_tcp *t, const struct comm_args *a, int to, const void *sbuf,
                   size_t slen, int from, void *rbuf, size_t rlen, struct err *e)
{
    uint8_t small[TCP_P2P_HEADER + TCP_P2P_SMALL], hin[TCP_P2P_HEADER];
    const char *op = comm_op_name(a->op);
    struct tcp_plan pl;
    if (tcp_plan_reserve(t, comm_op_name(a->op), 2, 4, e) < 0)
        return -1;
    tcp_plan_init(&pl, t, op, a);
    tcp_p2p_header(small, slen);
    if (to >= 0 && slen <= TCP_P2P_SMALL) {
        memcpy(small + TCP_P2P_HEADER, sbuf, slen);
        tcp_piece_set(&tcp_plan_lane(&pl, to, true, 1)->pieces[0], small,
                      TCP_P2P_HEADER + slen);
    } else if (to >= 0) {
        struct tcp_lane *l = tcp_plan_lane(&pl, to, true, 2);
        tcp_piece_set(&l->pieces[0], small, TCP_P2P_HEADER);
        tcp_piece_set(&l->pieces[1], sbuf, slen);
    }
    if (from >= 0) {
        struct tcp_lane *l = tcp_plan_lane(&pl, from, false, 2);
        tcp_piece_set(&l->pieces[0], hin, TCP_P2P_HEADER);
        l->pieces[0].header = true;
        tcp_piece_set(&l->pieces[1], rbuf, rlen);
        if (to >= 0 && rbuf == sbuf && slen > TCP_P2P_SMALL) {
            l->gate_lane = 0;
            l->pieces[1].gate = 1;
        }
    }
    return tcp_engine_run(t, &pl.run, e);
}

/* ---- choice and dispatch ---------------------------------------------------------------- */

/* 1 when op has algorithm alg (AUTO included), else 0. */
static int tcp_algo_has(enum comm_op op, enum comm_algorithm alg)
{
    if (alg == COMM_ALG_AUTO)
        return 1;
    switch (op) {
    case COMM_OP_ALLREDUCE:
        return alg == COMM_ALG_RING || alg == COMM_ALG_RD || alg == COMM_ALG_HD ||
               alg == COMM_ALG_HIER;
    case COMM_OP_REDUCE_SCATTER:
    case COMM_OP_ALL_GATHER: return alg == COMM_ALG_RING || alg == COMM_ALG_DIRECT;
    case COMM_OP_BROADCAST: return alg == COMM_ALG_RING || alg == COMM_ALG_TREE;
    case COMM_OP_SEND:
    case COMM_OP_RECV:
    case COMM_OP_SENDRECV: return alg == COMM_ALG_DIRECT;
    case COMM_OP_BARRIER: return alg == COMM_ALG_RD;
    }
    return 0;
}

static enum comm_algorithm tcp_allreduce_by_size(int n, size_t bytes)
{
    if (bytes < (n == 2 ? TCP_AUTO_RD_BYTES_2 : TCP_AUTO_RD_BYTES))
        return COMM_ALG_RD;
    return n == 2 || (n & (n - 1)) ? COMM_ALG_RING : COMM_ALG_HD;
}

static enum comm_algorithm tcp_algo_by_size(const struct comm_tcp *t, const struct comm_args *a)
{
    size_t bytes = a->count * comm_dtype_size(a->dtype);
    size_t total = bytes * (size_t)t->base.world_size;
    switch (a->op) {
    case COMM_OP_ALLREDUCE:
        if (t->nleaders > 1 && t->nleaders < t->base.world_size &&
            bytes >= (t->shm ? TCP_AUTO_HIER_BYTES_SHM : TCP_AUTO_HIER_BYTES))
            return COMM_ALG_HIER;
        return tcp_allreduce_by_size(t->base.world_size, bytes);
    case COMM_OP_REDUCE_SCATTER:
    case COMM_OP_ALL_GATHER:
        return total < TCP_AUTO_GATHER_RING ? COMM_ALG_DIRECT : COMM_ALG_RING;
    case COMM_OP_BROADCAST:
        return bytes < TCP_AUTO_BROADCAST_RING ? COMM_ALG_TREE : COMM_ALG_RING;
    case COMM_OP_BARRIER: return COMM_ALG_RD;
    default: return COMM_ALG_DIRECT;
    }
}

static int tcp_algo_choose(const struct comm_tcp *t, const struct comm_args *a,
                           enum comm_algorithm *out, struct err *e)
{
    if (a->algorithm != COMM_ALG_AUTO && !tcp_algo_has(a->op, a->algorithm)) {
        char have[64] = "";
        size_t len = 0;
        for (int g = COMM_ALG_RING; g <= COMM_ALG_HIER; g++)
            if (tcp_algo_has(a->op, (enum comm_algorithm)g) && len < sizeof have)
                len += (size_t)snprintf(have + len, sizeof have - len, "%s%s", len ? ", " : "",
                                        comm_algorithm_name((enum comm_algorithm)g));
        return err_set(e, ERR_INVALID, "algorithm", "%s has no algorithm '%s' (it has %s)",
                       comm_op_name(a->op), comm_algorithm_name(a->algorithm), have);
    }
    if (a->algorithm != COMM_ALG_AUTO)
        *out = a->algorithm;
    else if (t->algorithm != COMM_ALG_AUTO && tcp_algo_has(a->op, t->algorithm))
        *out = t->algorithm;
    else
        *out = tcp_algo_by_size(t, a);
    return 0;
}

/* ---- shared memory ------------------------------------------------------------------ */

/* Runs a over the node's shared memory (peers and root: members of t->local; root >= 0
 * with an allreduce: reduce to that member only) and turns a failure into the
 * communicator's, naming the operation and the rank blamed. Shared memory has no wire to
 * count: bytes_sent grows by the ring model's bytes among the node's ranks (comm.h
 * comm_wire_bytes), as nccl and mpi count, so a training step's bytes_sent is not 0. */
static int tcp_shm_run(struct comm_tcp *t, const struct comm_args *a, int root, struct err *e)
{
    int blame = -1;
    if (shm_group_run(t->shm, a, root, &blame, e) == 0) {
        size_t bytes = a->count * comm_dtype_size(a->dtype);
        t->base.bytes_sent += comm_wire_bytes(a->op, bytes, t->nlocal);
        return 0;
    }
    char msg[sizeof e->msg];
    snprintf(msg, sizeof msg, "%s", e->msg);
    return tcp_fail(t, e, e->code, comm_op_name(a->op), blame >= 0 ? t->local[blame] : -1,
                    "%s (shared memory)", msg);
}

/* Whether an operation of a communicator whose ranks all share the node's memory runs
 * over it: yes unless the call or the configuration names a TCP algorithm it has. */
static bool tcp_shm_takes(const struct comm_tcp *t, const struct comm_args *a)
{
    if (a->algorithm != COMM_ALG_AUTO)
        return a->algorithm == COMM_ALG_HIER;
    return t->algorithm == COMM_ALG_AUTO || t->algorithm == COMM_ALG_HIER ||
           !tcp_algo_has(a->op, t->algorithm);
}

/* ---- hierarchical allreduce ----------------------------------------------------------- */

/* Reduces to member 0 of g along a chain: member v receives the reduction of members
 * v+1 .. n-1 from v+1, stores op(own, incoming) in recv and forwards it to v-1 as it is
 * reduced (the send is gated on the receive), so segments move on while later ones still
 * arrive and every byte crosses each link once. The last member sends its input as it
 * is. Member 0 ends with the reduction in recv; the others' recv holds a partial one. */
static int tcp_chain_reduce(struct comm_tcp *t, const struct comm_args *a,
                            const struct tcp_group *g, struct err *e)
{
    int n = g->n, v = g->me;
    size_t bytes = a->count * comm_dtype_size(a->dtype);
    bool last = v == n - 1;
    if (n == 1) {
        if (a->send != a->recv)
            memcpy(a->recv, a->send, bytes);
        return 0;
    }
    struct tcp_plan pl;
    if (tcp_plan_reserve(t, "allreduce", 2, 2, e) < 0)
        return -1;
    tcp_plan_init(&pl, t, "allreduce", a);
    if (!last) {
        struct tcp_piece *pc = &tcp_plan_lane(&pl, tcp_grp_rank(g, v + 1), false, 1)->pieces[0];
        tcp_piece_set(pc, a->recv, bytes);
        pc->a = a->send;
    }
    if (v > 0) {
        struct tcp_lane *l = tcp_plan_lane(&pl, tcp_grp_rank(g, v - 1), true, 1);
        tcp_piece_set(&l->pieces[0], last ? a->send : a->recv, bytes);
        l->gate_lane = last ? -1 : 0;
        l->pieces[0].gate = last ? -1 : 0;
    }
    return tcp_engine_run(t, &pl.run, e);
}

/* Allreduce of a (sum, min or max; in place or not) among the members of g with the flat
 * algorithm alg (ring, rd or hd). */
static int tcp_flat_allreduce(struct comm_tcp *t, const struct comm_args *a,
                              const struct tcp_group *g, enum comm_algorithm alg, struct err *e)
{
    if (alg == COMM_ALG_RD)
        return tcp_rd_allreduce(t, a, g, "allreduce", e);
    return alg == COMM_ALG_HD ? tcp_hd_allreduce(t, a, g, e) : tcp_ring_allreduce(t, a, g, e);
}

/* Chain reduce inside the node to its leader, allreduce between the node leaders (the
 * algorithm chosen by size for that many leaders), broadcast inside the node from its
 * leader. avg runs as a sum divided once by the world size on each leader before the
 * broadcast, so it rounds once, as the flat algorithms do. One node: a reduce and a
 * broadcast; every rank its own node: the leaders' allreduce alone. Every rank of a node
 * gets the bytes its leader computed, and the leaders' algorithms give every leader the
 * same bytes, so results are identical on every rank. */
static int tcp_hier_allreduce(struct comm_tcp *t, const struct comm_args *a, struct err *e)
{
    size_t bytes = a->count * comm_dtype_size(a->dtype);
    struct comm_args s = *a;
    s.redop = a->redop == COMM_AVG ? COMM_SUM : a->redop;
    const struct tcp_group local = {t->nlocal, t->local_me, t->local};
    if (t->shm ? tcp_shm_run(t, &s, 0, e) < 0 : tcp_chain_reduce(t, &s, &local, e) < 0)
        return -1;
    if (local.me == 0) {
        const struct tcp_group leaders = {t->nleaders, t->leader_me, t->leaders};
        s.send = s.recv;
        if (leaders.n > 1 &&
            tcp_flat_allreduce(t, &s, &leaders, tcp_allreduce_by_size(leaders.n, bytes), e) < 0)
            return -1;
        if (a->redop == COMM_AVG)
            reduce_divide(a->recv, a->count, a->dtype, t->base.world_size);
    }
    if (local.n == 1)
        return 0;
    struct comm_args b = comm_args_collective(COMM_OP_BROADCAST, a->recv, a->recv, a->count,
                                              a->dtype, COMM_SUM, 0);
    if (t->shm)
        return tcp_shm_run(t, &b, -1, e);
    return tcp_broadcast(t, &b, &local, bytes < TCP_AUTO_BROADCAST_RING, e);
}

/* ---- dispatch ----------------------------------------------------------------------- */

/* One rank, or a rank exchanging with itself: copies (an average over one rank is the
 * value itself). */
static int tcp_local(struct comm_tcp *t, const struct comm_args *a)
{
    size_t bytes = a->count * comm_dtype_size(a->dtype);
    snprintf(t->base.last_algorithm, sizeof t->base.last_algorithm, "local");
    if (a->op != COMM_OP_BARRIER && bytes && a->send != a->recv)
        memcpy(a->recv, a->send, bytes);
    return 0;
}

int tcp_algo_run(struct comm_tcp *t, const struct comm_args *a, struct err *e)
{
    enum comm_algorithm alg = COMM_ALG_AUTO;
    if (tcp_algo_choose(t, a, &alg, e) < 0)
        return -1;
    bool self = a->op == COMM_OP_SENDRECV && a->peer == t->base.rank;
    if (t->base.world_size == 1 || self)
        return tcp_local(t, a);
    if (t->shm_all && tcp_shm_takes(t, a)) {
        memcpy(t->base.last_algorithm, "shm", 4);
        return tcp_shm_run(t, a, -1, e);
    }
    snprintf(t->base.last_algorithm, sizeof t->base.last_algorithm, "%s",
             comm_algorithm_name(alg));
    size_t bytes = a->count * comm_dtype_size(a->dtype);
    struct tcp_group all = tcp_group_all(t);
    switch (a->op) {
    case COMM_OP_ALLREDUCE:
        if (a->count == 0)
            return 0;
        if (alg == COMM_ALG_HIER)
            return tcp_hier_allreduce(t, a, e);
        return tcp_flat_allreduce(t, a, &all, alg, e);
    case COMM_OP_REDUCE_SCATTER:
        if (a->count == 0)
            return 0;
        return alg == COMM_ALG_RING ? tcp_ring_reduce_scatter(t, a, e)
                                    : tcp_direct_reduce_scatter(t, a, e);
    case COMM_OP_ALL_GATHER:
        if (a->count == 0)
            return 0;
        return alg == COMM_ALG_RING ? tcp_ring_all_gather(t, a, e)
                                    : tcp_direct_all_gather(t, a, e);
    case COMM_OP_BROADCAST: return tcp_broadcast(t, a, &all, alg == COMM_ALG_TREE, e);
    case COMM_OP_SEND: return tcp_p2p(t, a, a->peer, a->send, bytes, -1, NULL, 0, e);
    case COMM_OP_RECV: return tcp_p2p(t, a, -1, NULL, 0, a->peer, a->recv, bytes, e);
    case COMM_OP_SENDRECV:
        return tcp_p2p(t, a, a->peer, a->send, bytes, a->peer2, a->recv,
                       a->count2 * comm_dtype_size(a->dtype), e);
    case COMM_OP_BARRIER: {
        int32_t one = 1;
        struct comm_args b = {.op = COMM_OP_BARRIER,
                              .send = &one,
                              .recv = &one,
                              .count = 1,
                              .dtype = COMM_INT32,
                              .redop = COMM_SUM};
        return tcp_rd_allreduce(t, &b, &all, "barrier", e);
    }
    }
    return err_set(e, ERR_INTERNAL, NULL, "tcp: operation %d", (int)a->op);
}
