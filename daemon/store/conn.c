/* store/conn: see conn.h. The request logic is reached through s->hooks (store/state.h),
 * never by name. */
#include "daemon/store/conn.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <utlist.h>

#include "common/clock.h"
#include "common/log.h"
#include "daemon/store/state.h"

#define STORE_HELLO_TIMEOUT_MS 10000
#define STORE_OUT_CAP ((size_t)64 << 20) /* unread replies before a client is dropped */
#define STORE_PARKED_IN_CAP (STORE_MAX_FRAME + 4 + 65536) /* input buffered while blocked */
#define STORE_HELLO_MAX_BODY (1 + 4 + 2 + 4 + STORE_MAX_RUN + 4 + STORE_MAX_SECRET + 8)
#define STORE_READ_CHUNK 65536
#define STORE_KEEP_BUF ((size_t)1 << 20)    /* larger idle buffers go back to the allocator */
#define STORE_READ_BUDGET ((size_t)1 << 20) /* per readiness event, for fairness */
#define STORE_CONN_EVENTS (EPOLLIN | EPOLLRDHUP)

static void store_conn_set_out(struct store_server *s, struct store_conn *c, bool on)
{
    loop_watch_modify(s->loop, &c->watch, STORE_CONN_EVENTS | (on ? EPOLLOUT : 0u), NULL);
}

/* Sends what the socket takes now; EPOLLOUT covers the rest. Returns -1 (conn killed)
 * when the peer is gone. */
static int store_conn_flush(struct store_server *s, struct store_conn *c)
{
    while (c->out_off < c->out.len) {
        ssize_t w = send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            c->out_off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            store_conn_set_out(s, c, true);
            return 0;
        }
        store_conn_kill(s, c);
        return -1;
    }
    /* A big reply (values reach 8 MiB) must not pin its buffer for the connection's life. */
    if (c->out.cap > STORE_KEEP_BUF)
        buf_free(&c->out);
    buf_reset(&c->out);
    c->out_off = 0;
    store_conn_set_out(s, c, false);
    return 0;
}

void store_conn_sent(struct store_server *s, struct store_conn *c, int rc)
{
    if (rc < 0) {
        log_warn("store: out of memory encoding a reply, dropping client");
        store_conn_kill(s, c);
        return;
    }
    if (c->out.len - c->out_off > STORE_OUT_CAP) {
        log_warn("store: client does not read its replies (%zu bytes pending), dropping it",
                 c->out.len - c->out_off);
        atomic_fetch_add(&s->n_rejected, 1);
        store_conn_kill(s, c);
        return;
    }
    store_conn_flush(s, c);
}

void store_conn_error(struct store_server *s, struct store_conn *c, enum store_status st,
                      const char *msg)
{
    store_conn_sent(s, c, store_proto_encode_error(&c->out, st, msg));
}

/* Discards unread input so close(2) sends FIN rather than RST, which could destroy the
 * error reply before the peer reads it. Bounded: a flooding peer just gets the RST. */
static void store_conn_drain(int fd)
{
    uint8_t tmp[4096];
    for (int i = 0; i < 256; i++)
        if (recv(fd, tmp, sizeof tmp, MSG_DONTWAIT) <= 0)
            return;
}

void store_conn_fail(struct store_server *s, struct store_conn *c, enum store_status st,
                     const char *msg)
{
    if (c->dead)
        return;
    log_debug("store: closing client fd %d: %s: %s", c->fd, store_proto_status_name(st), msg);
    if (st != STORE_E_CLOSED)
        atomic_fetch_add(&s->n_rejected, 1);
    store_conn_error(s, c, st, msg);
    if (c->dead)
        return;
    store_conn_drain(c->fd);
    store_conn_kill(s, c);
}

static void store_conn_leave_run(struct store_conn *c)
{
    if (!c->run)
        return;
    DL_DELETE2(c->run->clients, c, run_prev, run_next);
    c->run_prev = c->run_next = NULL;
    c->run = NULL;
}

void store_conn_kill(struct store_server *s, struct store_conn *c)
{
    if (c->dead)
        return;
    c->dead = true;
    s->hooks.unpark(s, c);
    loop_timer_stop(s->loop, &c->timer);
    store_conn_leave_run(c);
    DL_DELETE2(s->conns, c, all_prev, all_next);
    loop_watch_remove(s->loop, &c->watch);
    close(c->fd);
    c->fd = -1;
    c->dead_next = s->dead;
    s->dead = c;
    atomic_fetch_sub(&s->n_clients, 1);
}

static void store_conn_free(struct store_conn *c)
{
    buf_free(&c->in);
    buf_free(&c->out);
    free(c->wait_keys);
    free(c);
}

void store_reap(struct store_server *s)
{
    while (s->dead) {
        struct store_conn *c = s->dead;
        s->dead = c->dead_next;
        store_conn_free(c);
    }
}

void store_mark_ready(struct store_server *s, struct store_conn *c)
{
    if (c->in_ready || c->dead)
        return;
    c->in_ready = true;
    c->ready_next = s->ready;
    s->ready = c;
}

void store_conn_process(struct store_server *s, struct store_conn *c)
{
    int64_t now = clock_mono_ms();
    while (!c->dead && !c->park_op) {
        const uint8_t *body;
        uint32_t body_len;
        size_t frame_len;
        struct err e = {0};
        size_t avail = c->in.len - c->in_off;
        if (avail < 4)
            break; /* also keeps a freed (NULL) buffer from being offset */
        const uint8_t *data = c->in.data + c->in_off;
        if (!c->run && buf_load_u32(data) > STORE_HELLO_MAX_BODY) {
            store_conn_fail(s, c, STORE_E_TOO_LARGE, "first frame is too large for a HELLO");
            return;
        }
        int rc = store_proto_split_frame(data, avail, &body, &body_len, &frame_len, &e);
        if (rc == 0)
            break;
        if (rc < 0) {
            store_conn_fail(s, c, STORE_E_TOO_LARGE, e.msg);
            return;
        }
        struct store_request req;
        if (store_proto_decode_request(body, body_len, &req, &e) < 0) {
            store_conn_fail(s, c, STORE_E_PROTOCOL, e.msg);
            return;
        }
        s->hooks.serve(s, c, &req, now);
        c->in_off += frame_len;
    }
    if (c->dead)
        return;
    if (c->in_off == c->in.len) {
        if (c->in.cap > STORE_KEEP_BUF)
            buf_free(&c->in);
        buf_reset(&c->in);
        c->in_off = 0;
    } else if (c->in_off > c->in.len / 2) {
        buf_consume(&c->in, c->in_off);
        c->in_off = 0;
    }
}

static void store_conn_read(struct store_server *s, struct store_conn *c)
{
    size_t got = 0;
    while (!c->dead && got < STORE_READ_BUDGET) {
        if (c->park_op && c->in.len - c->in_off > STORE_PARKED_IN_CAP) {
            store_conn_fail(s, c, STORE_E_PROTOCOL, "too much input while a request blocks");
            return;
        }
        if (buf_reserve(&c->in, STORE_READ_CHUNK) < 0) {
            store_conn_kill(s, c);
            return;
        }
        ssize_t r = recv(c->fd, c->in.data + c->in.len, STORE_READ_CHUNK, MSG_DONTWAIT);
        if (r > 0) {
            c->in.len += (size_t)r;
            got += (size_t)r;
            store_conn_process(s, c);
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        store_conn_kill(s, c); /* EOF or reset: the client is gone */
        return;
    }
}

static void store_conn_event(void *arg, uint32_t events)
{
    struct store_conn *c = arg;
    struct store_server *s = c->srv;
    if (c->dead)
        return;
    if (events & EPOLLOUT)
        store_conn_flush(s, c);
    if (!c->dead && (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
        store_conn_read(s, c);
}

int store_conn_add(struct store_server *s, int fd, int64_t now)
{
    struct store_conn *c = calloc(1, sizeof *c);
    if (!c)
        return -1;
    c->srv = s;
    c->fd = fd;
    buf_init(&c->in);
    buf_init(&c->out);
    if (loop_timer_start(s->loop, &c->timer, now + STORE_HELLO_TIMEOUT_MS, s->hooks.on_timeout,
                         c) < 0) {
        free(c);
        return -1;
    }
    if (loop_watch_add(s->loop, &c->watch, fd, STORE_CONN_EVENTS, store_conn_event, c, NULL) <
        0) {
        loop_timer_stop(s->loop, &c->timer);
        free(c);
        return -1;
    }
    DL_PREPEND2(s->conns, c, all_prev, all_next);
    atomic_fetch_add(&s->n_clients, 1);
    return 0;
}
