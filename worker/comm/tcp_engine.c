/* tcp_engine: the core of the TCP backend (tcp_engine.h): failing (tcp_fail, which
 * breaks the communicator) and the transfer engine, which runs the lanes of a plan over
 * non-blocking sockets in one loop until all are done. tcp_fail lives here, not in
 * tcp.c, so that the engine never calls back into the file that calls it.
 *
 * Decisions:
 * - Sends and receives of a plan progress together; doing one after the other deadlocks
 *   as soon as a message is larger than the socket buffers.
 * - A reducing receive reads at most TCP_SEG_BYTES into a segment buffer that stays in
 *   cache and combines it into the destination at once, while the next segment is
 *   already on the wire: reduction overlaps the transfer, and the received data is
 *   never written to memory and read back.
 * - Latency: before sleeping in poll(2) the loop polls without sleeping for spin_us,
 *   because a wake-up costs more than a small message's round trip; when ranks may
 *   share CPUs (unpinned, or more ranks than CPUs) it yields the CPU between polls (the
 *   rank it waits for may need it; tcp.c decides).
 * - Timeout: an operation fails when no byte has moved for the communicator's timeout,
 *   so a large transfer over a slow link is not killed while a stopped peer is.
 * - Blame: peers that send nothing to this rank in the current plan are watched for
 *   hang-ups only (POLLRDHUP), never read: they may already be sending data of the next
 *   operation. A hang-up with nothing queued but the one-byte goodbye of comm_destroy is
 *   a clean exit; a hang-up with nothing queued at all means the process died, and this
 *   rank names that peer instead of the neighbour that fails after it. */
#include "worker/comm/tcp_engine.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/clock.h"
#include "common/net.h"
#include "worker/comm/reduce.h"

/* Records a failure of operation `op` blaming `peer` (-1: none), breaks the
 * communicator and fills e with "op: message". Returns -1. */
int tcp_fail(struct comm_tcp *t, struct err *e, enum err_code code, const char *op, int peer,
             const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = comm_vfail(&t->base, &t->broken, &t->first_err, e, code, op, peer, fmt, ap);
    va_end(ap);
    return rc;
}

bool tcp_aborted(const struct comm_tcp *t)
{
    return atomic_load_explicit(&t->base.stop, memory_order_relaxed) ||
           (t->base.abort_flag &&
            atomic_load_explicit(t->base.abort_flag, memory_order_relaxed));
}

int tcp_plan_reserve(struct comm_tcp *t, const char *op, int nlanes, int npieces, struct err *e)
{
    if ((size_t)nlanes > t->lanes_cap) {
        struct tcp_lane *l = realloc(t->lanes, (size_t)nlanes * sizeof *l);
        if (!l)
            return tcp_fail(t, e, ERR_NOMEM, op, -1, "no memory for %d lanes", nlanes);
        t->lanes = l;
        t->lanes_cap = (size_t)nlanes;
    }
    if ((size_t)npieces > t->pieces_cap) {
        struct tcp_piece *p = realloc(t->pieces, (size_t)npieces * sizeof *p);
        if (!p)
            return tcp_fail(t, e, ERR_NOMEM, op, -1, "no memory for %d pieces", npieces);
        t->pieces = p;
        t->pieces_cap = (size_t)npieces;
    }
    memset(t->lanes, 0, (size_t)nlanes * sizeof *t->lanes);
    memset(t->pieces, 0, (size_t)npieces * sizeof *t->pieces);
    return 0;
}

int tcp_scratch_reserve(struct comm_tcp *t, const char *op, size_t bytes, struct err *e)
{
    if (bytes <= t->scratch_cap)
        return 0;
    uint8_t *p = realloc(t->scratch, bytes);
    if (!p)
        return tcp_fail(t, e, ERR_NOMEM, op, -1, "no memory for %zu bytes of scratch", bytes);
    t->base.buffer_bytes += bytes - t->scratch_cap;
    t->scratch = p;
    t->scratch_cap = bytes;
    return 0;
}

static const char *tcp_io_verb(int err)
{
    return err == ECONNRESET ? "reset the connection" : "closed the connection";
}

static bool tcp_again(void)
{
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

/* Bytes of l's current piece pc its gate allows to move. */
static size_t tcp_gate_avail(const struct tcp_run *r, const struct tcp_lane *l,
                             const struct tcp_piece *pc)
{
    if (pc->gate < 0 || l->gate_lane < 0)
        return pc->len;
    const struct tcp_lane *g = &r->lanes[l->gate_lane];
    if (g->cur > pc->gate)
        return pc->len;
    if (g->cur < pc->gate)
        return 0;
    size_t v = g->is_send ? g->done : g->ready;
    return v < pc->len ? v : pc->len;
}

static void tcp_lane_next(struct tcp_lane *l)
{
    l->cur++;
    l->done = l->ready = l->carry = 0;
}

/* Returns 1 when bytes moved, 0 when not, -1 on error. */
static int tcp_lane_send(struct comm_tcp *t, struct tcp_run *r, struct tcp_lane *l,
                         struct err *e)
{
    int moved = 0;
    while (l->cur < l->n) {
        struct tcp_piece *pc = &l->pieces[l->cur];
        if (l->done == pc->len) {
            tcp_lane_next(l);
            moved = 1;
            continue;
        }
        size_t avail = tcp_gate_avail(r, l, pc);
        if (avail <= l->done || (avail - l->done < TCP_SEND_MIN && avail < pc->len))
            break; /* wait for the gate: a bigger batch is cheaper than many small sends */
        size_t want = avail - l->done;
        ssize_t w = send(t->peers[l->peer].fd, pc->p + l->done, want,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && tcp_again()) {
            l->blocked = true;
            break;
        }
        if (w < 0 && (errno == EPIPE || errno == ECONNRESET))
            return tcp_fail(t, e, ERR_PEER, r->op, l->peer, "rank %d %s", l->peer,
                            tcp_io_verb(errno));
        if (w < 0)
            return tcp_fail(t, e, ERR_IO, r->op, l->peer, "send to rank %d: %s", l->peer,
                            strerror(errno));
        l->done += (size_t)w;
        l->ready = l->done;
        t->base.bytes_sent += (uint64_t)w;
        moved = 1;
        if ((size_t)w < want) {
            l->blocked = true;
            break;
        }
    }
    return moved;
}

/* A point-to-point header piece is complete: it must announce the next piece's length. */
static int tcp_header_check(struct comm_tcp *t, struct tcp_run *r, struct tcp_lane *l,
                            const struct tcp_piece *pc, struct err *e)
{
    uint64_t magic = 0, len = 0;
    for (int i = 0; i < 4; i++)
        magic |= (uint64_t)pc->p[i] << (8 * i);
    for (int i = 0; i < 8; i++)
        len |= (uint64_t)pc->p[8 + i] << (8 * i);
    size_t want = l->cur + 1 < l->n ? l->pieces[l->cur + 1].len : 0;
    if (magic != TCP_P2P_MAGIC)
        return tcp_fail(t, e, ERR_PROTOCOL, r->op, l->peer,
                        "rank %d sent bytes that are not a message header (operations out "
                        "of step?)",
                        l->peer);
    if (len != want)
        return tcp_fail(t, e, ERR_PROTOCOL, r->op, l->peer,
                        "rank %d sent a %llu-byte message, this rank expects %zu bytes",
                        l->peer, (unsigned long long)len, want);
    return 0;
}

/* Receives into the segment buffer and reduces whole elements into pc->p. */
static ssize_t tcp_recv_reduce(struct comm_tcp *t, struct tcp_run *r, struct tcp_lane *l,
                               struct tcp_piece *pc, size_t *wantp)
{
    size_t room = TCP_SEG_BYTES - l->carry, want = *wantp < room ? *wantp : room;
    *wantp = want;
    memcpy(t->seg, l->carry_buf, l->carry);
    ssize_t got = recv(t->peers[l->peer].fd, t->seg + l->carry, want, MSG_DONTWAIT);
    if (got <= 0)
        return got;
    size_t have = l->carry + (size_t)got, whole = have / r->esize;
    uint8_t *dst = pc->p + l->ready;
    reduce_apply(dst, pc->a + l->ready, t->seg, whole, r->dtype, r->redop);
    if (pc->divide)
        reduce_divide(dst, whole, r->dtype, t->base.world_size);
    l->ready += whole * r->esize;
    l->carry = have - whole * r->esize;
    memcpy(l->carry_buf, t->seg + whole * r->esize, l->carry);
    return got;
}

static int tcp_lane_recv(struct comm_tcp *t, struct tcp_run *r, struct tcp_lane *l,
                         struct err *e)
{
    int moved = 0;
    while (l->cur < l->n) {
        struct tcp_piece *pc = &l->pieces[l->cur];
        if (l->ready == pc->len) {
            if (pc->header && tcp_header_check(t, r, l, pc, e) < 0)
                return -1;
            tcp_lane_next(l);
            moved = 1;
            continue;
        }
        size_t limit = tcp_gate_avail(r, l, pc);
        if (limit <= l->done)
            break;
        size_t want = limit - l->done;
        ssize_t got;
        if (pc->a) {
            got = tcp_recv_reduce(t, r, l, pc, &want);
        } else {
            got = recv(t->peers[l->peer].fd, pc->p + l->done, want, MSG_DONTWAIT);
            if (got > 0)
                l->ready = l->done + (size_t)got;
        }
        if (got < 0 && tcp_again()) {
            l->blocked = true;
            break;
        }
        if (got == 0 || (got < 0 && errno == ECONNRESET))
            return tcp_fail(t, e, ERR_PEER, r->op, l->peer, "rank %d %s", l->peer,
                            tcp_io_verb(got == 0 ? 0 : errno));
        if (got < 0)
            return tcp_fail(t, e, ERR_IO, r->op, l->peer, "recv from rank %d: %s", l->peer,
                            strerror(errno));
        l->done += (size_t)got;
        moved = 1;
        if ((size_t)got < want) {
            l->blocked =
                true; /* drained what the socket had: poll(2) says when there is more */
            break;
        }
    }
    return moved;
}

/* A watched peer hung up: only a goodbye (or data of a later operation) may precede it. */
static int tcp_check_watched(struct comm_tcp *t, int p, const char *op, struct err *e)
{
    uint8_t b[2];
    ssize_t n = recv(t->peers[p].fd, b, sizeof b, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && tcp_again())
        return 0;
    if (n == 0 || (n < 0 && errno == ECONNRESET))
        return tcp_fail(t, e, ERR_PEER, op, p, "rank %d %s", p,
                        tcp_io_verb(n == 0 ? 0 : errno));
    if (n < 0)
        return tcp_fail(t, e, ERR_IO, op, p, "recv from rank %d: %s", p, strerror(errno));
    if (n == 1 && b[0] == TCP_BYE) {
        ssize_t r = recv(t->peers[p].fd, b, 1, MSG_DONTWAIT);
        (void)r;
        t->peers[p].said_bye = true;
    } else {
        t->peers[p].hup = true; /* alive until it closed; a later operation will tell */
    }
    return 0;
}

/* The peer this rank is waiting on: a receive that wants data, else a full send. */
static int tcp_blame(const struct tcp_run *r)
{
    int sender = -1, any = -1;
    for (int i = 0; i < r->n; i++) {
        const struct tcp_lane *l = &r->lanes[i];
        if (l->cur >= l->n)
            continue;
        size_t avail = tcp_gate_avail(r, l, &l->pieces[l->cur]);
        if (!l->is_send && avail > l->done)
            return l->peer;
        if (l->is_send && l->blocked && sender < 0)
            sender = l->peer;
        if (any < 0)
            any = l->peer;
    }
    return sender >= 0 ? sender : any;
}

static int tcp_timeout(struct comm_tcp *t, const struct tcp_run *r, struct err *e)
{
    int blamed = tcp_blame(r);
    return tcp_fail(t, e, ERR_TIMEOUT, r->op, blamed,
                    "timed out after %d ms waiting for rank %d", t->base.timeout_ms, blamed);
}

static void tcp_poll_add(struct comm_tcp *t, nfds_t *n, int peer, short events)
{
    int i = t->pfd_index[peer];
    if (i >= 0) {
        t->pfds[i].events |= events;
        return;
    }
    t->pfd_index[peer] = (int)*n;
    t->pfd_peer[*n] = peer;
    t->pfds[(*n)++] = (struct pollfd){.fd = t->peers[peer].fd, .events = events};
}

/* Sockets the blocked lanes wait on (data to read, room to write) and peers to watch.
 * A lane neither blocked nor done waits on its gate, which another lane moves. */
static nfds_t tcp_poll_set(struct comm_tcp *t, const struct tcp_run *r)
{
    nfds_t n = 0;
    for (int p = 0; p < t->base.world_size; p++) {
        t->reading[p] = false;
        t->pfd_index[p] = -1;
    }
    for (int i = 0; i < r->n; i++) {
        const struct tcp_lane *l = &r->lanes[i];
        if (l->cur >= l->n)
            continue;
        if (!l->is_send)
            t->reading[l->peer] = true;
        if (l->blocked)
            tcp_poll_add(t, &n, l->peer, l->is_send ? POLLOUT : POLLIN);
    }
    for (int p = 0; p < t->base.world_size; p++) {
        const struct tcp_peer *pe = &t->peers[p];
        if (p != t->base.rank && !t->reading[p] && pe->fd >= 0 && !pe->said_bye && !pe->hup)
            tcp_poll_add(t, &n, p, POLLRDHUP);
    }
    return n;
}

/* Lanes whose socket poll(2) found ready try again (errors are found by trying). */
static void tcp_unblock(struct comm_tcp *t, struct tcp_run *r)
{
    for (int i = 0; i < r->n; i++) {
        struct tcp_lane *l = &r->lanes[i];
        int k = l->blocked ? t->pfd_index[l->peer] : -1;
        short want = l->is_send ? POLLOUT : POLLIN;
        if (k >= 0 && (t->pfds[k].revents & (want | POLLHUP | POLLERR)))
            l->blocked = false;
    }
}

/* Polls the plan's sockets: without sleeping when spin, else until one is ready, at most
 * until the deadline and never longer than NET_ABORT_POLL_MS (the abort flag and
 * c->stop are looked at between polls). Hang-ups of watched peers are examined here. */
static int tcp_wait(struct comm_tcp *t, struct tcp_run *r, int64_t deadline, bool spin,
                    struct err *e)
{
    int left = clock_ms_left(deadline);
    int slice = spin ? 0 : left > NET_ABORT_POLL_MS ? NET_ABORT_POLL_MS : left;
    nfds_t n = tcp_poll_set(t, r);
    int rc = poll(t->pfds, n, slice);
    if (rc < 0 && errno != EINTR)
        return tcp_fail(t, e, ERR_IO, r->op, -1, "poll: %s", strerror(errno));
    for (nfds_t i = 0; rc > 0 && i < n; i++) {
        int p = t->pfd_peer[i];
        short bad = POLLRDHUP | POLLHUP | POLLERR;
        if (!t->reading[p] && (t->pfds[i].revents & bad) &&
            tcp_check_watched(t, p, r->op, e) < 0)
            return -1;
    }
    if (rc > 0)
        tcp_unblock(t, r);
    return rc > 0;
}

int tcp_engine_run(struct comm_tcp *t, struct tcp_run *r, struct err *e)
{
    int64_t start = clock_mono_ns();
    int64_t deadline = start / 1000000 + t->base.timeout_ms;
    int64_t spin_end = start + (int64_t)t->spin_us * 1000;
    for (;;) {
        int moved = 0, open = 0;
        for (int i = 0; i < r->n; i++) {
            struct tcp_lane *l = &r->lanes[i];
            if (l->blocked) {
                open++;
                continue;
            }
            int m = l->is_send ? tcp_lane_send(t, r, l, e) : tcp_lane_recv(t, r, l, e);
            if (m < 0)
                return -1;
            moved |= m;
            open += l->cur < l->n;
        }
        if (!open)
            return 0;
        if (tcp_aborted(t))
            return tcp_fail(t, e, ERR_ABORTED, r->op, -1, "aborted");
        int64_t now_ns = clock_mono_ns();
        if (moved) {
            deadline = now_ns / 1000000 + t->base.timeout_ms;
            spin_end = now_ns + (int64_t)t->spin_us * 1000;
            continue;
        }
        if (now_ns / 1000000 >= deadline)
            return tcp_timeout(t, r, e);
        bool spin = now_ns < spin_end;
        if (spin && t->spin_yield)
            sched_yield();
        if (tcp_wait(t, r, deadline, spin, e) < 0)
            return -1;
    }
}
