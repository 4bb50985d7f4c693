/* tcp: the TCP communicator (tcp.h): mesh setup with verified handshakes, and a ring
 * allreduce whose every step sends to the next rank and receives from the previous one
 * in a single poll(2) loop over non-blocking sockets.
 *
 * Decisions:
 * - Sends and receives of a step progress together; doing one after the other
 *   deadlocks as soon as a message is larger than the socket buffers.
 * - Received bytes are reduced as soon as whole elements have arrived, so the
 *   reduction overlaps the transfer instead of following it.
 * - Blame: while an operation waits, it also watches the connections of peers that send
 *   it nothing in this operation. Such a peer only ever sends a one-byte goodbye when it
 *   destroys its communicator; an end of stream without that goodbye means the process
 *   died or dropped out, and every rank names that peer instead of the neighbour that
 *   failed after it. (Valid because every operation is a ring over next/prev; an
 *   algorithm that receives from other peers must exclude them from the watch.)
 * - After a failed operation the byte streams are out of step, so the communicator
 *   refuses further operations with the first error.
 * - Scratch space grows to the largest chunk seen and is kept: re-faulting freshly
 *   mapped pages costs more than the transfer on these machines (DESIGN.md §4). */
#include "tcp.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "buf.h"
#include "clock.h"
#include "log.h"
#include "net.h"
#include "store_client.h"

#define TCP_MAGIC 0x54504444u /* "DDPT" little-endian */
#define TCP_VERSION 1
#define TCP_KIND_HELLO 1
#define TCP_KIND_ACK 2
#define TCP_HELLO_LEN 24
#define TCP_BYE 0xB7u
#define TCP_MAX_PENDING 64
#define TCP_HANDSHAKE_MS 5000

struct tcp_peer {
    int fd;        /* -1: self, not connected, or dropped */
    bool said_bye; /* the peer destroyed its communicator cleanly */
};

struct comm_tcp {
    struct comm base; /* first member: a struct comm * converts back */
    int lfd;
    char host[256];
    char addr[300];
    uint64_t secret_hash;
    struct tcp_peer *peers;  /* world_size entries, owned */
    struct pollfd *pfds;     /* world_size + 1 entries, owned */
    int *pfd_peer;           /* peer rank of each pfds entry, owned */
    uint8_t *scratch;        /* owned, grows, never shrinks */
    size_t scratch_cap;
    bool broken;
    struct err first_err; /* why it broke */
};

/* dst[i] = a[i] (op) b[i] for n elements; dst may equal a. */
typedef void (*tcp_reduce_fn)(uint8_t *dst, const uint8_t *a, const uint8_t *b, size_t n);

/* One ring step: send a buffer to one peer while receiving another from a peer. */
struct tcp_xfer {
    const char *op;
    int send_peer;
    const uint8_t *send_p;
    size_t send_len, sent;
    int recv_peer;
    uint8_t *recv_p;
    size_t recv_len, got;
    /* When reduce is set, recv_p is scratch and each whole element that arrived is
     * combined into red_dst = red_a (op) recv_p. */
    tcp_reduce_fn reduce;
    size_t esize;
    uint8_t *red_dst;
    const uint8_t *red_a;
    size_t reduced; /* elements combined so far */
};

static const struct comm_ops tcp_ops;

static uint64_t tcp_hash_secret(const char *secret)
{
    /* FNV-1a over a domain tag and the secret: keeps ranks of different runs (or stray
     * clients) out of a mesh; it is a guard against mix-ups, not cryptography. */
    static const char tag[] = "ddpbench-tcp-mesh";
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < sizeof tag; i++)
        h = (h ^ (uint8_t)tag[i]) * 0x100000001b3ull;
    for (const char *p = secret; *p; p++)
        h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    return h;
}

static void tcp_sum_f32(uint8_t *dst, const uint8_t *a, const uint8_t *b, size_t n)
{
    float *d = (float *)(void *)dst;
    const float *x = (const float *)(const void *)a;
    const float *y = (const float *)(const void *)b;
    for (size_t i = 0; i < n; i++)
        d[i] = x[i] + y[i];
}

/* Records a failure of operation `op` blaming `peer` (-1: none), breaks the
 * communicator and fills e with "op: message". Returns -1. */
__attribute__((format(printf, 6, 7))) static int
tcp_fail(struct comm_tcp *t, struct err *e, enum err_code code, const char *op, int peer,
         const char *fmt, ...)
{
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(t->base.error_op, sizeof t->base.error_op, "%s", op);
    t->base.error_peer = peer;
    if (!t->broken) {
        t->broken = true;
        err_set(&t->first_err, code, NULL, "%s: %s", op, msg);
    }
    return err_set(e, code, NULL, "%s: %s", op, msg);
}

static bool tcp_aborted(const struct comm_tcp *t)
{
    return t->base.abort_flag &&
           atomic_load_explicit(t->base.abort_flag, memory_order_relaxed);
}

/* ---- handshake --------------------------------------------------------------- */

static void tcp_put_le(uint8_t *p, uint64_t v, int nbytes)
{
    for (int i = 0; i < nbytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* u32 magic | u16 version | u16 kind | u32 sender rank | u32 world size | u64 hash */
static void tcp_hello_encode(const struct comm_tcp *t, int kind, uint8_t out[TCP_HELLO_LEN])
{
    tcp_put_le(out, TCP_MAGIC, 4);
    tcp_put_le(out + 4, TCP_VERSION, 2);
    tcp_put_le(out + 6, (uint64_t)kind, 2);
    tcp_put_le(out + 8, (uint64_t)t->base.rank, 4);
    tcp_put_le(out + 12, (uint64_t)t->base.world_size, 4);
    tcp_put_le(out + 16, t->secret_hash, 8);
}

/* Checks a peer's hello/ack; returns the sender rank or -1 with the reason in why. */
static int tcp_hello_check(const struct comm_tcp *t, const uint8_t in[TCP_HELLO_LEN],
                           int kind, char *why, size_t whylen)
{
    struct buf_reader r;
    buf_reader_init(&r, in, TCP_HELLO_LEN);
    uint32_t magic = 0, rank = 0, world = 0;
    uint16_t version = 0, k = 0;
    uint64_t hash = 0;
    buf_get_u32(&r, &magic);
    buf_get_u16(&r, &version);
    buf_get_u16(&r, &k);
    buf_get_u32(&r, &rank);
    buf_get_u32(&r, &world);
    buf_get_u64(&r, &hash);
    if (magic != TCP_MAGIC)
        snprintf(why, whylen, "not a ddpbench peer (bad magic)");
    else if (version != TCP_VERSION)
        snprintf(why, whylen, "protocol version %u, want %u", version, TCP_VERSION);
    else if (k != kind)
        snprintf(why, whylen, "unexpected handshake kind %u", k);
    else if (world != (uint32_t)t->base.world_size)
        snprintf(why, whylen, "world size %u, want %d", world, t->base.world_size);
    else if (hash != t->secret_hash)
        snprintf(why, whylen, "wrong run secret");
    else if (rank >= world || rank == (uint32_t)t->base.rank)
        snprintf(why, whylen, "bad sender rank %u", rank);
    else
        return (int)rank;
    return -1;
}

/* ---- setup ------------------------------------------------------------------- */

static void tcp_free(struct comm_tcp *t)
{
    if (t->lfd >= 0)
        close(t->lfd);
    if (t->peers) {
        for (int i = 0; i < t->base.world_size; i++)
            if (t->peers[i].fd >= 0)
                close(t->peers[i].fd);
    }
    free(t->peers);
    free(t->pfds);
    free(t->pfd_peer);
    free(t->scratch);
    free(t);
}

void comm_tcp_discard(struct comm_tcp *t)
{
    if (t)
        tcp_free(t);
}

static int tcp_config_check(const struct comm_tcp_config *cfg, struct err *e)
{
    if (cfg->world_size < 1)
        return err_set(e, ERR_INVALID, "world_size", "tcp: world_size %d < 1",
                       cfg->world_size);
    if (cfg->rank < 0 || cfg->rank >= cfg->world_size)
        return err_set(e, ERR_INVALID, "rank", "tcp: rank %d outside 0..%d", cfg->rank,
                       cfg->world_size - 1);
    if (cfg->timeout_ms <= 0)
        return err_set(e, ERR_INVALID, "timeout_ms", "tcp: timeout_ms must be > 0");
    if (!cfg->listen_host || !cfg->listen_host[0] || strlen(cfg->listen_host) >= 256)
        return err_set(e, ERR_INVALID, "listen_host", "tcp: listen host empty or too long");
    const char *alg = cfg->algorithm ? cfg->algorithm : "auto";
    if (strcmp(alg, "auto") != 0 && strcmp(alg, "ring") != 0)
        return err_set(e, ERR_INVALID, "algorithm",
                       "tcp: algorithm '%s' not supported (auto, ring)", alg);
    return 0;
}

struct comm_tcp *comm_tcp_listen(const struct comm_tcp_config *cfg, struct err *e)
{
    if (tcp_config_check(cfg, e) < 0)
        return NULL;
    struct comm_tcp *t = calloc(1, sizeof *t);
    int n = cfg->world_size;
    if (t) {
        t->peers = calloc((size_t)n, sizeof *t->peers);
        t->pfds = calloc((size_t)n + 1, sizeof *t->pfds);
        t->pfd_peer = calloc((size_t)n + 1, sizeof *t->pfd_peer);
    }
    if (!t || !t->peers || !t->pfds || !t->pfd_peer) {
        if (t) {
            t->lfd = -1;
            tcp_free(t);
        }
        err_set(e, ERR_NOMEM, NULL, "tcp: out of memory for %d peers", n);
        return NULL;
    }
    t->base.ops = &tcp_ops;
    t->base.backend = "tcp";
    t->base.rank = cfg->rank;
    t->base.world_size = n;
    t->base.timeout_ms = cfg->timeout_ms;
    t->base.abort_flag = cfg->abort_flag;
    t->base.error_peer = -1;
    for (int i = 0; i < n; i++)
        t->peers[i].fd = -1;
    snprintf(t->host, sizeof t->host, "%s", cfg->listen_host);
    t->secret_hash = tcp_hash_secret(cfg->secret ? cfg->secret : "");
    int backlog = n + TCP_MAX_PENDING < 4096 ? n + TCP_MAX_PENDING : 4096;
    t->lfd = net_listen(t->host, 0, backlog, e);
    if (t->lfd < 0) {
        tcp_free(t);
        err_prefix(e, "tcp: listen on %s", cfg->listen_host);
        return NULL;
    }
    int port = net_local_port(t->lfd);
    if (strchr(t->host, ':'))
        snprintf(t->addr, sizeof t->addr, "[%s]:%d", t->host, port);
    else
        snprintf(t->addr, sizeof t->addr, "%s:%d", t->host, port);
    return t;
}

const char *comm_tcp_address(const struct comm_tcp *t) { return t->addr; }

/* Connects to rank j and sends the hello; the ack is read after accepting. */
static int tcp_connect_peer(struct comm_tcp *t, int j, const char *addr, int64_t deadline,
                            struct err *e)
{
    char host[256];
    int port;
    if (!addr || net_split_hostport(addr, host, sizeof host, &port, false, e) < 0)
        return tcp_fail(t, e, ERR_INVALID, "setup", j, "bad address for rank %d: '%s'", j,
                        addr ? addr : "(null)");
    int left = clock_ms_left(deadline);
    int fd = net_connect(host, port, left > 0 ? left : 1, true, t->base.abort_flag, e);
    if (fd < 0)
        return tcp_fail(t, e, e ? e->code : ERR_IO, "setup", j, "connect to rank %d at %s: %s",
                        j, addr, e ? e->msg : "failed");
    t->peers[j].fd = fd;
    uint8_t hello[TCP_HELLO_LEN];
    tcp_hello_encode(t, TCP_KIND_HELLO, hello);
    if (net_send_all(fd, hello, sizeof hello, deadline, t->base.abort_flag, e) < 0)
        return tcp_fail(t, e, e ? e->code : ERR_IO, "setup", j, "hello to rank %d: %s", j,
                        e ? e->msg : "failed");
    return 0;
}

static int tcp_recv_ack(struct comm_tcp *t, int j, int64_t deadline, struct err *e)
{
    uint8_t ack[TCP_HELLO_LEN];
    if (net_recv_all(t->peers[j].fd, ack, sizeof ack, deadline, t->base.abort_flag, e) < 0) {
        if (e && e->code == ERR_PEER)
            return tcp_fail(t, e, ERR_PEER, "setup", j,
                            "rank %d closed the connection during the handshake (different "
                            "run secret or world size?)", j);
        return tcp_fail(t, e, e ? e->code : ERR_IO, "setup", j,
                        "waiting for the handshake of rank %d: %s", j, e ? e->msg : "failed");
    }
    char why[96];
    int sender = tcp_hello_check(t, ack, TCP_KIND_ACK, why, sizeof why);
    if (sender != j)
        return tcp_fail(t, e, ERR_PROTOCOL, "setup", j, "rank %d's address answered: %s", j,
                        sender < 0 ? why : "another rank");
    return 0;
}

/* A connection accepted but not yet identified. */
struct tcp_pending {
    int fd;
    size_t got;
    int64_t deadline;
    uint8_t hello[TCP_HELLO_LEN];
};

static void tcp_pending_drop(struct tcp_pending *p, int *np, int i, const char *why)
{
    log_warn("tcp setup: dropping a connection on the peer port: %s", why);
    close(p[i].fd);
    p[i] = p[*np - 1];
    (*np)--;
}

static int tcp_missing_lower(const struct comm_tcp *t, char *out, size_t outlen)
{
    int missing = 0;
    size_t off = 0;
    out[0] = '\0';
    for (int j = 0; j < t->base.rank; j++) {
        if (t->peers[j].fd >= 0)
            continue;
        missing++;
        if (off + 16 < outlen)
            off += (size_t)snprintf(out + off, outlen - off, "%s%d", off ? ", " : "", j);
    }
    return missing;
}

/* Reads a pending connection's hello; when complete and valid, the connection becomes
 * the sender's peer link and gets an ack. Returns 1 when the entry was consumed. */
static int tcp_pending_read(struct comm_tcp *t, struct tcp_pending *p, int *np, int i,
                            int64_t deadline)
{
    ssize_t r = recv(p[i].fd, p[i].hello + p[i].got, TCP_HELLO_LEN - p[i].got, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    if (r <= 0) {
        tcp_pending_drop(p, np, i, "closed before its handshake");
        return 1;
    }
    p[i].got += (size_t)r;
    if (p[i].got < TCP_HELLO_LEN)
        return 0;
    char why[96];
    int j = tcp_hello_check(t, p[i].hello, TCP_KIND_HELLO, why, sizeof why);
    if (j > t->base.rank) {
        snprintf(why, sizeof why, "rank %d connected to a lower rank", j);
        j = -1;
    } else if (j >= 0 && t->peers[j].fd >= 0) {
        snprintf(why, sizeof why, "rank %d connected twice", j);
        j = -1;
    }
    if (j < 0) {
        tcp_pending_drop(p, np, i, why);
        return 1;
    }
    uint8_t ack[TCP_HELLO_LEN];
    tcp_hello_encode(t, TCP_KIND_ACK, ack);
    struct err ignored;
    if (net_send_all(p[i].fd, ack, sizeof ack, deadline, t->base.abort_flag, &ignored) < 0) {
        tcp_pending_drop(p, np, i, "could not answer its handshake");
        return 1;
    }
    t->peers[j].fd = p[i].fd;
    p[i] = p[*np - 1];
    (*np)--;
    return 1;
}

static void tcp_pending_accept(struct comm_tcp *t, struct tcp_pending *p, int *np)
{
    int fd = accept4(t->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return;
    if (*np == TCP_MAX_PENDING) {
        log_warn("tcp setup: too many unidentified connections, dropping one");
        close(fd);
        return;
    }
    net_set_nodelay(fd);
    p[*np] = (struct tcp_pending){.fd = fd, .deadline = clock_mono_ms() + TCP_HANDSHAKE_MS};
    (*np)++;
}

/* Polls the listening socket and the unidentified connections together, so a stray
 * client that connects and stays silent cannot hold up the real peers. */
static int tcp_accept_step(struct comm_tcp *t, struct tcp_pending *p, int *np,
                           int64_t deadline)
{
    struct pollfd pfd[TCP_MAX_PENDING + 1];
    pfd[0] = (struct pollfd){.fd = t->lfd, .events = POLLIN};
    for (int i = 0; i < *np; i++)
        pfd[i + 1] = (struct pollfd){.fd = p[i].fd, .events = POLLIN};
    int left = clock_ms_left(deadline);
    int slice = left > NET_ABORT_POLL_MS ? NET_ABORT_POLL_MS : left;
    int n = *np;
    if (poll(pfd, (nfds_t)n + 1, slice) < 0 && errno != EINTR)
        return -1;
    /* walk backwards: dropping entry i moves the last one into its place */
    for (int i = n - 1; i >= 0; i--) {
        if (pfd[i + 1].revents)
            tcp_pending_read(t, p, np, i, deadline);
        else if (clock_mono_ms() > p[i].deadline)
            tcp_pending_drop(p, np, i, "no handshake in time");
    }
    if (pfd[0].revents & POLLIN)
        tcp_pending_accept(t, p, np);
    return 0;
}

static int tcp_accept_lower(struct comm_tcp *t, int64_t deadline, struct err *e)
{
    struct tcp_pending p[TCP_MAX_PENDING];
    int np = 0, rc = 0;
    char missing[256];
    while (tcp_missing_lower(t, missing, sizeof missing) > 0) {
        if (tcp_aborted(t)) {
            rc = tcp_fail(t, e, ERR_ABORTED, "setup", -1, "aborted");
            break;
        }
        if (clock_ms_left(deadline) == 0) {
            rc = tcp_fail(t, e, ERR_TIMEOUT, "setup", -1,
                          "timed out after %d ms waiting for rank(s) %s to connect",
                          t->base.timeout_ms, missing);
            break;
        }
        if (tcp_accept_step(t, p, &np, deadline) < 0) {
            err_errno(e, "poll");
            rc = tcp_fail(t, e, ERR_IO, "setup", -1, "%s", e ? e->msg : "poll failed");
            break;
        }
    }
    for (int i = 0; i < np; i++)
        close(p[i].fd);
    return rc;
}

struct comm *comm_tcp_connect(struct comm_tcp *t, const char *const *peer_addrs,
                              struct err *e)
{
    int n = t->base.world_size, r = t->base.rank;
    int64_t deadline = clock_mono_ms() + t->base.timeout_ms;
    /* Connect up, accept down, then read the acks: nobody waits on a peer that is itself
     * waiting, so the mesh forms in any start order. */
    for (int j = r + 1; j < n; j++)
        if (tcp_connect_peer(t, j, peer_addrs[j], deadline, e) < 0)
            goto fail;
    if (tcp_accept_lower(t, deadline, e) < 0)
        goto fail;
    for (int j = r + 1; j < n; j++)
        if (tcp_recv_ack(t, j, deadline, e) < 0)
            goto fail;
    for (int j = 0; j < n; j++) {
        if (j != r && net_set_nonblock(t->peers[j].fd, true) < 0) {
            err_errno(e, "tcp setup: fcntl");
            goto fail;
        }
    }
    close(t->lfd); /* the mesh is complete: later clients are refused */
    t->lfd = -1;
    t->base.error_op[0] = '\0';
    t->base.error_peer = -1;
    return &t->base;
fail:
    tcp_free(t);
    return NULL;
}

struct comm *comm_tcp_create(const struct comm_tcp_config *cfg, struct store_client *store,
                             struct err *e)
{
    struct comm_tcp *t = comm_tcp_listen(cfg, e);
    if (!t)
        return NULL;
    int n = cfg->world_size;
    int64_t deadline = clock_mono_ms() + cfg->timeout_ms;
    char key[48];
    snprintf(key, sizeof key, "tcp/addr/%d", cfg->rank);
    char **vals = calloc((size_t)n, sizeof *vals);
    if (!vals) {
        comm_tcp_discard(t);
        err_set(e, ERR_NOMEM, NULL, "tcp setup: out of memory");
        return NULL;
    }
    int rc = store_client_set_str(store, key, t->addr, e);
    if (rc < 0)
        err_prefix(e, "tcp setup: publishing this rank's address");
    for (int j = 0; j < n && rc == 0; j++) {
        if (j == cfg->rank)
            continue;
        snprintf(key, sizeof key, "tcp/addr/%d", j);
        size_t len;
        int left = clock_ms_left(deadline);
        rc = store_client_get(store, key, left > 0 ? left : 1, &vals[j], &len, e);
        if (rc < 0)
            err_prefix(e, "tcp setup: address of rank %d", j);
    }
    struct comm *c = NULL;
    if (rc == 0) {
        vals[cfg->rank] = t->addr;
        c = comm_tcp_connect(t, (const char *const *)vals, e);
        vals[cfg->rank] = NULL;
    } else {
        comm_tcp_discard(t);
    }
    for (int j = 0; j < n; j++)
        free(vals[j]);
    free(vals);
    return c;
}

/* ---- data path ---------------------------------------------------------------- */

static const char *tcp_io_verb(int err)
{
    return err == ECONNRESET ? "reset the connection" : "closed the connection";
}

static int tcp_try_send(struct comm_tcp *t, struct tcp_xfer *x, struct err *e)
{
    if (x->sent == x->send_len)
        return 0;
    int fd = t->peers[x->send_peer].fd;
    ssize_t w = send(fd, x->send_p + x->sent, x->send_len - x->sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
        x->sent += (size_t)w;
        t->base.bytes_sent += (uint64_t)w;
        return 1;
    }
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    if (w < 0 && (errno == EPIPE || errno == ECONNRESET))
        return tcp_fail(t, e, ERR_PEER, x->op, x->send_peer, "rank %d %s", x->send_peer,
                        tcp_io_verb(errno));
    return tcp_fail(t, e, ERR_IO, x->op, x->send_peer, "send to rank %d: %s", x->send_peer,
                    strerror(errno));
}

static void tcp_reduce_arrived(struct tcp_xfer *x)
{
    size_t whole = x->got / x->esize;
    if (!x->reduce || whole == x->reduced)
        return;
    size_t off = x->reduced * x->esize;
    x->reduce(x->red_dst + off, x->red_a + off, x->recv_p + off, whole - x->reduced);
    x->reduced = whole;
}

static int tcp_try_recv(struct comm_tcp *t, struct tcp_xfer *x, struct err *e)
{
    if (x->got == x->recv_len)
        return 0;
    int fd = t->peers[x->recv_peer].fd;
    ssize_t r = recv(fd, x->recv_p + x->got, x->recv_len - x->got, MSG_DONTWAIT);
    if (r > 0) {
        x->got += (size_t)r;
        tcp_reduce_arrived(x);
        return 1;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    if (r == 0 || errno == ECONNRESET)
        return tcp_fail(t, e, ERR_PEER, x->op, x->recv_peer, "rank %d %s", x->recv_peer,
                        tcp_io_verb(r == 0 ? 0 : errno));
    return tcp_fail(t, e, ERR_IO, x->op, x->recv_peer, "recv from rank %d: %s", x->recv_peer,
                    strerror(errno));
}

/* A watched peer became readable: only a goodbye is legitimate there. */
static int tcp_check_watched(struct comm_tcp *t, int p, const char *op, struct err *e)
{
    uint8_t b[16];
    ssize_t r = recv(t->peers[p].fd, b, sizeof b, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    if (r == 0 || (r < 0 && errno == ECONNRESET))
        return tcp_fail(t, e, ERR_PEER, op, p, "rank %d %s", p, tcp_io_verb(r == 0 ? 0 : errno));
    if (r < 0)
        return tcp_fail(t, e, ERR_IO, op, p, "recv from rank %d: %s", p, strerror(errno));
    if (r == 1 && b[0] == TCP_BYE) {
        t->peers[p].said_bye = true;
        return 0;
    }
    return tcp_fail(t, e, ERR_PROTOCOL, op, p, "rank %d sent unexpected bytes", p);
}

static int tcp_timeout(struct comm_tcp *t, const struct tcp_xfer *x, struct err *e)
{
    int blamed = x->got < x->recv_len ? x->recv_peer : x->send_peer;
    return tcp_fail(t, e, ERR_TIMEOUT, x->op, blamed, "timed out after %d ms waiting for rank %d",
                    t->base.timeout_ms, blamed);
}

/* Fills t->pfds: the step's send and receive sockets plus every watched peer. */
static nfds_t tcp_poll_set(struct comm_tcp *t, const struct tcp_xfer *x)
{
    nfds_t n = 0;
    int send_fd = x->sent < x->send_len ? t->peers[x->send_peer].fd : -1;
    int recv_fd = x->got < x->recv_len ? t->peers[x->recv_peer].fd : -1;
    if (send_fd >= 0) {
        t->pfd_peer[n] = x->send_peer;
        t->pfds[n++] = (struct pollfd){.fd = send_fd, .events = POLLOUT};
    }
    if (recv_fd >= 0 && recv_fd == send_fd)
        t->pfds[0].events |= POLLIN;
    else if (recv_fd >= 0) {
        t->pfd_peer[n] = x->recv_peer;
        t->pfds[n++] = (struct pollfd){.fd = recv_fd, .events = POLLIN};
    }
    for (int p = 0; p < t->base.world_size; p++) {
        const struct tcp_peer *pe = &t->peers[p];
        if (p == t->base.rank || p == x->recv_peer || p == x->send_peer || pe->fd < 0 ||
            pe->said_bye)
            continue;
        t->pfd_peer[n] = p;
        t->pfds[n++] = (struct pollfd){.fd = pe->fd, .events = POLLIN};
    }
    /* The send peer is watched too once our data is out (it sends us nothing in a ring
     * of three or more), so its death is seen even while we wait on another rank. */
    if (send_fd < 0 && x->send_peer >= 0 && x->send_peer != x->recv_peer &&
        !t->peers[x->send_peer].said_bye) {
        t->pfd_peer[n] = x->send_peer;
        t->pfds[n++] = (struct pollfd){.fd = t->peers[x->send_peer].fd, .events = POLLIN};
    }
    return n;
}

static int tcp_wait(struct comm_tcp *t, const struct tcp_xfer *x, int64_t deadline,
                    struct err *e)
{
    int left = clock_ms_left(deadline);
    if (left == 0)
        return tcp_timeout(t, x, e);
    int slice = t->base.abort_flag && left > NET_ABORT_POLL_MS ? NET_ABORT_POLL_MS : left;
    nfds_t n = tcp_poll_set(t, x);
    int rc = poll(t->pfds, n, slice);
    if (rc < 0 && errno != EINTR)
        return tcp_fail(t, e, ERR_IO, x->op, -1, "poll: %s", strerror(errno));
    for (nfds_t i = 0; rc > 0 && i < n; i++) {
        int p = t->pfd_peer[i];
        bool active = (p == x->send_peer && x->sent < x->send_len) ||
                      (p == x->recv_peer && x->got < x->recv_len);
        if (!active && t->pfds[i].revents && tcp_check_watched(t, p, x->op, e) < 0)
            return -1;
    }
    return 0;
}

static int tcp_exchange(struct comm_tcp *t, struct tcp_xfer *x, int64_t deadline,
                        struct err *e)
{
    while (x->sent < x->send_len || x->got < x->recv_len) {
        if (tcp_aborted(t))
            return tcp_fail(t, e, ERR_ABORTED, x->op, -1, "aborted");
        int ps = tcp_try_send(t, x, e);
        if (ps < 0)
            return -1;
        int pr = tcp_try_recv(t, x, e);
        if (pr < 0)
            return -1;
        if (clock_ms_left(deadline) == 0)
            return tcp_timeout(t, x, e);
        if (!ps && !pr && tcp_wait(t, x, deadline, e) < 0)
            return -1;
    }
    return 0;
}

static int tcp_scratch_reserve(struct comm_tcp *t, size_t bytes)
{
    if (bytes <= t->scratch_cap)
        return 0;
    uint8_t *p = realloc(t->scratch, bytes);
    if (!p)
        return -1;
    t->scratch = p;
    t->scratch_cap = bytes;
    return 0;
}

/* Chunk k of the ring: floor(count/n) elements, plus one for the first count % n. */
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

static int tcp_mod(int a, int n) { return ((a % n) + n) % n; }

/* Reduce-scatter then all-gather around the ring. Afterwards recv holds the reduction
 * of every rank's send. Rank r sends its own chunk r at step 0 straight from send (so
 * out-of-place needs no copy) and combines each chunk it receives with its own
 * contribution, which is still untouched in send. */
static int tcp_ring_allreduce(struct comm_tcp *t, const char *op, const uint8_t *send,
                              uint8_t *recv, size_t count, size_t esize, tcp_reduce_fn reduce,
                              struct err *e)
{
    int n = t->base.world_size, r = t->base.rank;
    struct tcp_chunks ch = {count / (size_t)n, count % (size_t)n, esize};
    if (tcp_scratch_reserve(t, tcp_chunk_len(&ch, 0)) < 0)
        return tcp_fail(t, e, ERR_NOMEM, op, -1, "no memory for %zu bytes of scratch",
                        tcp_chunk_len(&ch, 0));
    int next = tcp_mod(r + 1, n), prev = tcp_mod(r - 1, n);
    int64_t deadline = clock_mono_ms() + t->base.timeout_ms;
    for (int s = 0; s < n - 1; s++) {
        int sc = tcp_mod(r - s, n), rc = tcp_mod(r - s - 1, n);
        struct tcp_xfer x = {
            .op = op, .send_peer = next, .recv_peer = prev,
            .send_p = (s == 0 ? send : recv) + tcp_chunk_off(&ch, sc),
            .send_len = tcp_chunk_len(&ch, sc),
            .recv_p = t->scratch, .recv_len = tcp_chunk_len(&ch, rc),
            .reduce = reduce, .esize = esize,
            .red_dst = recv + tcp_chunk_off(&ch, rc), .red_a = send + tcp_chunk_off(&ch, rc),
        };
        if (tcp_exchange(t, &x, deadline, e) < 0)
            return -1;
    }
    for (int s = 0; s < n - 1; s++) {
        int sc = tcp_mod(r + 1 - s, n), rc = tcp_mod(r - s, n);
        struct tcp_xfer x = {
            .op = op, .send_peer = next, .recv_peer = prev,
            .send_p = recv + tcp_chunk_off(&ch, sc), .send_len = tcp_chunk_len(&ch, sc),
            .recv_p = recv + tcp_chunk_off(&ch, rc), .recv_len = tcp_chunk_len(&ch, rc),
            .esize = esize,
        };
        if (tcp_exchange(t, &x, deadline, e) < 0)
            return -1;
    }
    return 0;
}

static int tcp_allreduce_named(struct comm_tcp *t, const char *op, const void *send,
                               void *recv, size_t count, enum comm_dtype dtype,
                               enum comm_redop redop, struct err *e)
{
    if (t->broken) {
        snprintf(t->base.error_op, sizeof t->base.error_op, "%s", op);
        return err_set(e, t->first_err.code, NULL, "%s: communicator unusable after: %s", op,
                       t->first_err.msg);
    }
    if (dtype != COMM_FLOAT32 || redop != COMM_SUM)
        return err_set(e, ERR_INVALID, NULL, "%s: %s/%s not supported yet (float32/sum)", op,
                       comm_dtype_name(dtype), comm_redop_name(redop));
    size_t esize = comm_dtype_size(dtype);
    if (count > SIZE_MAX / esize)
        return err_set(e, ERR_INVALID, NULL, "%s: count %zu too large", op, count);
    if (count > 0 && (!send || !recv))
        return err_set(e, ERR_INVALID, NULL, "%s: NULL buffer", op);
    t->base.error_op[0] = '\0';
    t->base.error_peer = -1;
    if (t->base.world_size == 1) {
        snprintf(t->base.last_algorithm, sizeof t->base.last_algorithm, "local");
        if (count > 0 && send != recv)
            memcpy(recv, send, count * esize);
        return 0;
    }
    snprintf(t->base.last_algorithm, sizeof t->base.last_algorithm, "ring");
    if (count == 0)
        return 0;
    return tcp_ring_allreduce(t, op, send, recv, count, esize, tcp_sum_f32, e);
}

static int tcp_allreduce(struct comm *c, const void *send, void *recv, size_t count,
                         enum comm_dtype dtype, enum comm_redop op, struct err *e)
{
    return tcp_allreduce_named((struct comm_tcp *)c, "allreduce", send, recv, count, dtype, op,
                               e);
}

/* A one-element allreduce is a barrier: nobody gets the sum before everyone added. */
static int tcp_barrier(struct comm *c, struct err *e)
{
    float v = 1.0f;
    return tcp_allreduce_named((struct comm_tcp *)c, "barrier", &v, &v, 1, COMM_FLOAT32,
                               COMM_SUM, e);
}

void comm_tcp_drop_connections(struct comm *c)
{
    struct comm_tcp *t = (struct comm_tcp *)c;
    for (int p = 0; p < c->world_size; p++) {
        if (t->peers[p].fd >= 0)
            close(t->peers[p].fd);
        t->peers[p].fd = -1;
    }
    if (!t->broken) {
        t->broken = true;
        err_set(&t->first_err, ERR_ABORTED, NULL, "connections dropped");
    }
}

/* Says goodbye on every link so peers still in an operation know this end of stream
 * is a clean exit, then closes. */
static void tcp_destroy(struct comm *c)
{
    struct comm_tcp *t = (struct comm_tcp *)c;
    const uint8_t bye = TCP_BYE;
    for (int p = 0; p < c->world_size; p++) {
        if (t->peers[p].fd >= 0 && !t->broken) {
            ssize_t w = send(t->peers[p].fd, &bye, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            (void)w;
        }
    }
    tcp_free(t);
}

static const struct comm_ops tcp_ops = {
    .allreduce = tcp_allreduce,
    .barrier = tcp_barrier,
    .destroy = tcp_destroy,
};
