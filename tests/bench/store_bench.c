/* store_bench: the store barrier's benchmark driver (not a test; tests/bench/bench_store.py
 * runs it against ddpbenchd's store and PyTorch's TCPStore and writes the table).
 *
 *   store_bench serve                      ddpbenchd's store server (daemon/store/, the
 *                                          daemon's own code) with run "bench"; prints its
 *                                          port, serves until stdin closes
 *   store_bench barrier ddpb|torch PORT N ROUND TIMEOUT_S
 *                                          N clients do one barrier; prints one JSON line
 *
 * Decision: every client is a non-blocking socket of one epoll thread, for both peers, so
 * the 2-core machine spends its time in the servers, not in thousands of client threads,
 * and both servers see the same client. A client does what a rank does: connect, (HELLO),
 * ADD count 1, the last arrival SETs done, then WAIT done: store_client_barrier's steps
 * for ddpbench, the same queries in TCPStore's wire format (PyTorch 1.13: u8 query, u64
 * length-prefixed keys, "/" key prefix as its client adds) for PyTorch. TCPStore's own
 * client also opens a second (callback) connection per store; this driver does not, which
 * only spares the peer work. Clients close with SO_LINGER 0 so that rounds of thousands
 * leave no TIME_WAIT ports behind. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/net.h"
#include "common/store_proto.h"
#include "daemon/store_server.h"

#define BENCH_RUN "bench"
#define BENCH_SECRET "bench-secret"

enum proto { PROTO_DDPB, PROTO_TORCH };

/* What a client waits for next. */
enum phase { PH_CONNECT, PH_HELLO, PH_ADD, PH_SET, PH_WAIT, PH_DONE, PH_FAILED };

struct client {
    int fd;
    enum phase phase;
    struct buf out; /* owned: the bytes still to send */
    size_t out_off;
    uint8_t in[256];
    size_t in_len;
};

struct bench {
    enum proto proto;
    int n, ep;
    long round;
    struct client *cl; /* owned, n of them */
    char count_key[64], done_key[64];
    int done, failed;
    int64_t t_connected_ms; /* when the last connect completed */
    int connected;
    char why[160]; /* the first failure */
};

/* ---- requests in each wire format ------------------------------------------------ */

static void torch_put_str(struct buf *b, const char *s)
{
    size_t n = strlen(s);
    buf_put_u64(b, n); /* little-endian, as TCPStore sends it from an x86 host */
    buf_append(b, s, n);
}

static void bench_req_add(struct bench *B, struct client *c)
{
    if (B->proto == PROTO_DDPB) {
        store_proto_encode_add(&c->out, B->count_key, 1);
        return;
    }
    buf_put_u8(&c->out, 3); /* QueryType::ADD: key, i64 delta */
    torch_put_str(&c->out, B->count_key);
    buf_put_i64(&c->out, 1);
}

static void bench_req_set(struct bench *B, struct client *c)
{
    if (B->proto == PROTO_DDPB) {
        store_proto_encode_set(&c->out, B->done_key, "1", 1);
        return;
    }
    buf_put_u8(&c->out, 0); /* QueryType::SET: key, then the value as u64 length + bytes */
    torch_put_str(&c->out, B->done_key);
    torch_put_str(&c->out, "1");
}

static void bench_req_wait(struct bench *B, struct client *c)
{
    if (B->proto == PROTO_DDPB) {
        const char *keys[1] = {B->done_key};
        store_proto_encode_keys(&c->out, STORE_OP_WAIT, keys, 1, 60000);
        return;
    }
    buf_put_u8(&c->out, 5); /* QueryType::WAIT: u64 count, keys */
    buf_put_u64(&c->out, 1);
    torch_put_str(&c->out, B->done_key);
}

/* ---- one client's steps ------------------------------------------------------------ */

static void bench_fail(struct bench *B, struct client *c, const char *what)
{
    if (!B->why[0])
        snprintf(B->why, sizeof B->why, "%s: %s", what, errno ? strerror(errno) : "protocol");
    c->phase = PH_FAILED;
    B->failed++;
    epoll_ctl(B->ep, EPOLL_CTL_DEL, c->fd, NULL);
}

static void bench_flush(struct bench *B, struct client *c)
{
    while (c->out_off < c->out.len) {
        ssize_t w = send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off,
                         MSG_NOSIGNAL);
        if (w > 0) {
            c->out_off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN)
            return; /* tiny requests: does not happen on loopback; EPOLLIN still polls */
        bench_fail(B, c, "send");
        return;
    }
    buf_reset(&c->out);
    c->out_off = 0;
}

/* Size of the reply the client waits for: -1 while incomplete. */
static long bench_reply_len(const struct bench *B, const struct client *c)
{
    if (B->proto == PROTO_DDPB) {
        if (c->in_len < 4)
            return -1;
        uint32_t body = buf_load_u32(c->in);
        return c->in_len >= 4 + body ? (long)(4 + body) : -1;
    }
    size_t want = c->phase == PH_ADD ? 8 : 1; /* ADD: i64; WAIT: u8 STOP_WAITING */
    return c->in_len >= want ? (long)want : -1;
}

/* The reply in c->in (len bytes) is OK; *number gets ADD's value. */
static bool bench_reply_ok(const struct bench *B, const struct client *c, long len,
                           int64_t *number)
{
    if (B->proto == PROTO_TORCH) {
        if (c->phase == PH_ADD)
            memcpy(number, c->in, sizeof *number);
        return c->phase == PH_ADD || c->in[0] == 0;
    }
    static const enum store_op ops[] = {[PH_HELLO] = STORE_OP_HELLO,
                                        [PH_ADD] = STORE_OP_ADD,
                                        [PH_SET] = STORE_OP_SET,
                                        [PH_WAIT] = STORE_OP_WAIT};
    struct store_response r;
    struct err e = {0};
    if (store_proto_decode_response(ops[c->phase], c->in + 4, (uint32_t)(len - 4), &r, &e) <
            0 ||
        r.status != STORE_OK)
        return false;
    *number = r.number;
    return true;
}

/* Moves c past the reply it just got and queues its next request. */
static void bench_advance(struct bench *B, struct client *c, int64_t number)
{
    switch (c->phase) {
    case PH_HELLO:
        c->phase = PH_ADD;
        bench_req_add(B, c);
        break;
    case PH_ADD:
        if (number == B->n && B->proto == PROTO_DDPB) {
            c->phase = PH_SET;
            bench_req_set(B, c);
            break;
        }
        if (number == B->n)
            bench_req_set(B, c); /* TCPStore answers no SET: the WAIT follows at once */
        c->phase = PH_WAIT;
        bench_req_wait(B, c);
        break;
    case PH_SET:
        c->phase = PH_WAIT;
        bench_req_wait(B, c);
        break;
    case PH_WAIT:
        c->phase = PH_DONE;
        B->done++;
        epoll_ctl(B->ep, EPOLL_CTL_DEL, c->fd, NULL);
        return;
    default: return;
    }
    bench_flush(B, c);
}

static void bench_read(struct bench *B, struct client *c)
{
    for (;;) {
        ssize_t r = recv(c->fd, c->in + c->in_len, sizeof c->in - c->in_len, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno == EAGAIN)
            return;
        if (r <= 0) {
            bench_fail(B, c, r == 0 ? "server closed" : "recv");
            return;
        }
        c->in_len += (size_t)r;
        long len;
        while (c->phase < PH_DONE && (len = bench_reply_len(B, c)) >= 0) {
            int64_t number = 0;
            if (!bench_reply_ok(B, c, len, &number)) {
                errno = 0;
                bench_fail(B, c, "reply");
                return;
            }
            memmove(c->in, c->in + len, c->in_len - (size_t)len);
            c->in_len -= (size_t)len;
            bench_advance(B, c, number);
        }
    }
}

static void bench_connected(struct bench *B, struct client *c)
{
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
    if (soerr) {
        errno = soerr;
        bench_fail(B, c, "connect");
        return;
    }
    if (++B->connected == B->n)
        B->t_connected_ms = clock_mono_ms();
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    epoll_ctl(B->ep, EPOLL_CTL_MOD, c->fd, &ev);
    if (B->proto == PROTO_DDPB) {
        c->phase = PH_HELLO;
        store_proto_encode_hello(&c->out, BENCH_RUN, BENCH_SECRET, c - B->cl);
    } else {
        c->phase = PH_ADD;
        bench_req_add(B, c);
    }
    bench_flush(B, c);
}

/* ---- the barrier ----------------------------------------------------------------------- */

static int bench_dial(struct bench *B, struct client *c, const struct sockaddr_in *sa)
{
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        return -1;
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    net_set_nodelay(c->fd);
    if (connect(c->fd, (const struct sockaddr *)sa, sizeof *sa) < 0 && errno != EINPROGRESS)
        return -1;
    struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
    return epoll_ctl(B->ep, EPOLL_CTL_ADD, c->fd, &ev);
}

static int bench_barrier(struct bench *B, int port, int timeout_s)
{
    const char *pre = B->proto == PROTO_TORCH ? "/" : "";
    snprintf(B->count_key, sizeof B->count_key, "%sb%ld/count", pre, B->round);
    snprintf(B->done_key, sizeof B->done_key, "%sb%ld/done", pre, B->round);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    B->ep = epoll_create1(EPOLL_CLOEXEC);
    int64_t t0 = clock_mono_ms(), deadline = t0 + (int64_t)timeout_s * 1000;
    for (int i = 0; i < B->n; i++) {
        struct client *c = &B->cl[i];
        buf_init(&c->out);
        if (bench_dial(B, c, &sa) < 0)
            bench_fail(B, c, "dial");
    }
    struct epoll_event evs[512];
    while (B->done + B->failed < B->n && clock_mono_ms() < deadline) {
        int k = epoll_wait(B->ep, evs, 512, 100);
        for (int i = 0; i < k; i++) {
            struct client *c = evs[i].data.ptr;
            if (c->phase == PH_CONNECT)
                bench_connected(B, c);
            else if (c->phase < PH_DONE)
                bench_read(B, c);
        }
    }
    int64_t t1 = clock_mono_ms();
    int unfinished = B->n - B->done - B->failed;
    printf("{\"proto\": \"%s\", \"clients\": %d, \"seconds\": %.4f, \"connect_seconds\": %.4f, "
           "\"ok\": %d, \"failed\": %d, \"timed_out\": %d, \"why\": \"%s\"}\n",
           B->proto == PROTO_DDPB ? "ddpbench" : "torch", B->n, (t1 - t0) / 1e3,
           B->t_connected_ms ? (B->t_connected_ms - t0) / 1e3 : -1.0, B->done, B->failed,
           unfinished, B->why);
    for (int i = 0; i < B->n; i++) {
        if (B->cl[i].fd >= 0)
            close(B->cl[i].fd);
        buf_free(&B->cl[i].out);
    }
    close(B->ep);
    return B->done == B->n ? 0 : 1;
}

static int bench_serve(void)
{
    struct err e = {0};
    struct store_server *s = store_server_create("127.0.0.1", 0, &e);
    if (!s || store_server_add_run(s, BENCH_RUN, BENCH_SECRET, &e) < 0) {
        fprintf(stderr, "store_bench: %s\n", e.msg);
        store_server_destroy(s);
        return 1;
    }
    printf("%d\n", store_server_port(s));
    fflush(stdout);
    char tmp[64];
    while (read(0, tmp, sizeof tmp) > 0) {
    }
    store_server_destroy(s);
    return 0;
}

int main(int argc, char **argv)
{
    net_raise_nofile(); /* one fd per client */
    if (argc == 2 && !strcmp(argv[1], "serve"))
        return bench_serve();
    if (argc != 7 || strcmp(argv[1], "barrier") ||
        (strcmp(argv[2], "ddpb") && strcmp(argv[2], "torch"))) {
        fprintf(stderr, "usage: store_bench serve | store_bench barrier ddpb|torch PORT "
                        "CLIENTS ROUND TIMEOUT_S\n");
        return 2;
    }
    struct bench B = {.proto = strcmp(argv[2], "ddpb") ? PROTO_TORCH : PROTO_DDPB,
                      .n = atoi(argv[4]),
                      .round = atol(argv[5])};
    B.cl = calloc((size_t)B.n, sizeof *B.cl);
    if (!B.cl || B.n < 1)
        return 2;
    for (int i = 0; i < B.n; i++)
        B.cl[i].fd = -1;
    int rc = bench_barrier(&B, atoi(argv[3]), atoi(argv[6]));
    free(B.cl);
    return rc;
}
