/* store_server: the daemon's rendezvous key-value store (see store_server.h; wire format
 * in common/store_proto.h).
 *
 * Decision: one thread, a daemon/loop's, owns every piece of state (runs, keys,
 * connections, waiters, deadlines), so nothing but the stats needs a lock; other threads
 * reach it only through closures the loop runs synchronously (add/remove a run).
 * A blocked GET/WAIT parks its connection on ONE missing key (a placeholder entry holds
 * the waiter list of a key that does not exist yet) and on its deadline timer; a write to
 * that key wakes exactly its waiters, and a WAIT re-parks on its next missing key, so
 * thousands of waiting clients cost nothing per loop iteration. Connections are never
 * freed in the middle of an iteration: a closed one is marked dead and reaped in the
 * loop's iteration hook, so pointers held by the wake lists and the ready list stay
 * valid. */
#include "daemon/store_server.h"

#define HASH_NONFATAL_OOM 1
/* uthash's OOM hook: the macro expands inside functions that declare `bool oom`. */
#define uthash_nonfatal_oom(obj) (oom = true)

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uthash.h>
#include <utlist.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/net.h"
#include "common/store_proto.h"
#include "daemon/loop.h"

#define STORE_HELLO_TIMEOUT_MS 10000
#define STORE_OUT_CAP ((size_t)64 << 20)          /* unread replies before a client is dropped */
#define STORE_PARKED_IN_CAP (STORE_MAX_FRAME + 4 + 65536) /* input buffered while blocked */
#define STORE_HELLO_MAX_BODY (1 + 4 + 2 + 4 + STORE_MAX_RUN + 4 + STORE_MAX_SECRET + 8)
#define STORE_READ_CHUNK 65536
#define STORE_KEEP_BUF ((size_t)1 << 20) /* larger idle buffers go back to the allocator */
#define STORE_READ_BUDGET ((size_t)1 << 20)      /* per readiness event, for fairness */
#define STORE_ACCEPT_PAUSE_MS 100
#define STORE_ACCEPT_BATCH 256 /* connections taken per readiness event */
#define STORE_CONN_EVENTS (EPOLLIN | EPOLLRDHUP)

struct store_conn;

/* One key of a run. A placeholder (present == false) exists only while clients wait for
 * the key; it is freed when its last waiter leaves. */
struct store_kv {
    uint8_t *key; /* owned, klen bytes */
    uint32_t klen;
    bool present;
    uint8_t *val; /* owned (NULL when vlen == 0) */
    uint32_t vlen;
    struct store_conn *waiters; /* utlist DL through wait_prev/wait_next */
    UT_hash_handle hh;
};

struct store_run {
    char name[STORE_MAX_RUN + 1];
    char secret[STORE_MAX_SECRET + 1];
    size_t secret_len;
    struct store_kv *keys;      /* uthash by key bytes */
    struct store_conn *clients; /* utlist DL through run_prev/run_next */
    UT_hash_handle hh;
};

struct store_conn {
    struct store_server *srv;
    int fd;
    struct loop_watch watch; /* EPOLLOUT in its events while replies wait */
    bool dead;       /* closed, waiting to be reaped at the end of the loop iteration */
    bool in_ready;   /* on the server's ready list */
    struct buf in;   /* bytes received; frames start at in_off */
    size_t in_off;
    struct buf out;  /* replies not yet sent start at out_off */
    size_t out_off;
    struct store_run *run; /* NULL until HELLO succeeded */
    struct store_conn *run_prev, *run_next;
    struct store_conn *all_prev, *all_next;
    struct store_conn *ready_next, *dead_next;
    /* HELLO deadline before the handshake, the request's deadline while parked. */
    struct loop_timer timer;
    /* Parked request (park_op == 0 when none). */
    enum store_op park_op;
    struct store_kv *park_kv;
    struct store_conn *wait_prev, *wait_next;
    uint8_t *wait_keys; /* owned copy of a WAIT's encoded keys */
    uint32_t wait_keys_len, wait_cursor;
};

struct store_server {
    struct loop *loop; /* owned */
    int lfd;
    struct loop_watch listen;
    struct loop_timer accept_resume; /* armed while accepting is paused */
    int reserve_fd;          /* spare fd given up to shed connections on EMFILE */
    int port;
    int64_t emfile_logged_ms;
    /* Owned by the loop's thread. */
    struct store_run *runs; /* uthash by name */
    struct store_conn *conns;
    struct store_conn *ready, *dead;
    /* Stats, read by any thread. */
    atomic_uint_fast64_t n_clients, n_runs, n_requests, n_rejected;
};

/* ---- keys ------------------------------------------------------------------------- */

static struct store_kv *store_kv_find(struct store_run *run, const struct store_bytes *key)
{
    struct store_kv *kv = NULL;
    HASH_FIND(hh, run->keys, key->p, key->len, kv);
    return kv;
}

static bool store_kv_present(struct store_run *run, const struct store_bytes *key)
{
    struct store_kv *kv = store_kv_find(run, key);
    return kv && kv->present;
}

static void store_kv_free(struct store_run *run, struct store_kv *kv)
{
    HASH_DEL(run->keys, kv);
    free(kv->key);
    free(kv->val);
    free(kv);
}

/* Finds or creates the entry (a placeholder when new). Returns NULL on ENOMEM. */
static struct store_kv *store_kv_get(struct store_run *run, const struct store_bytes *key)
{
    struct store_kv *kv = store_kv_find(run, key);
    if (kv)
        return kv;
    kv = calloc(1, sizeof *kv);
    if (!kv)
        return NULL;
    kv->key = malloc(key->len);
    if (!kv->key) {
        free(kv);
        return NULL;
    }
    memcpy(kv->key, key->p, key->len);
    kv->klen = key->len;
    bool oom = false;
    HASH_ADD_KEYPTR(hh, run->keys, kv->key, kv->klen, kv);
    if (oom) {
        free(kv->key);
        free(kv);
        return NULL;
    }
    return kv;
}

static void store_kv_release_if_unused(struct store_run *run, struct store_kv *kv)
{
    if (!kv->present && !kv->waiters)
        store_kv_free(run, kv);
}

/* Replaces the value (copied). Returns -1 on ENOMEM with the entry unchanged. */
static int store_kv_assign(struct store_kv *kv, const void *p, uint32_t len)
{
    uint8_t *v = NULL;
    if (len > 0) {
        v = malloc(len);
        if (!v)
            return -1;
        memcpy(v, p, len);
    }
    free(kv->val);
    kv->val = v;
    kv->vlen = len;
    kv->present = true;
    return 0;
}

static void store_run_free(struct store_run *run)
{
    struct store_kv *kv, *tmp;
    HASH_ITER(hh, run->keys, kv, tmp)
        store_kv_free(run, kv);
    free(run);
}

/* Compares in time independent of where the secrets differ (and of their lengths up to
 * the cap), so the secret cannot be guessed byte by byte. */
static bool store_secret_equal(const char *want, size_t want_len, const struct store_bytes *got)
{
    unsigned diff = (unsigned)(want_len ^ got->len);
    for (size_t i = 0; i < STORE_MAX_SECRET; i++) {
        uint8_t a = i < want_len ? (uint8_t)want[i] : 0;
        uint8_t b = i < got->len ? got->p[i] : 0;
        diff |= (unsigned)(a ^ b);
    }
    return diff == 0;
}

/* ---- connection output and teardown ----------------------------------------------- */

static void store_conn_kill(struct store_server *s, struct store_conn *c);

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

/* After a reply was appended (rc from the encoder): flush it, or drop a client that does
 * not read its replies or that we cannot answer. */
static void store_conn_sent(struct store_server *s, struct store_conn *c, int rc)
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

static void store_conn_error(struct store_server *s, struct store_conn *c,
                             enum store_status st, const char *msg)
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

/* Replies a closing status, counts the rejection and closes. */
static void store_conn_fail(struct store_server *s, struct store_conn *c,
                            enum store_status st, const char *msg)
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

static void store_conn_unpark(struct store_server *s, struct store_conn *c)
{
    if (!c->park_op)
        return;
    struct store_kv *kv = c->park_kv;
    DL_DELETE2(kv->waiters, c, wait_prev, wait_next);
    c->wait_prev = c->wait_next = NULL;
    c->park_op = 0;
    c->park_kv = NULL;
    free(c->wait_keys);
    c->wait_keys = NULL;
    loop_timer_stop(s->loop, &c->timer);
    store_kv_release_if_unused(c->run, kv);
}

static void store_conn_leave_run(struct store_conn *c)
{
    if (!c->run)
        return;
    DL_DELETE2(c->run->clients, c, run_prev, run_next);
    c->run_prev = c->run_next = NULL;
    c->run = NULL;
}

/* Closes the socket and detaches the connection from everything; the struct itself is
 * freed by store_reap at the end of the loop iteration. */
static void store_conn_kill(struct store_server *s, struct store_conn *c)
{
    if (c->dead)
        return;
    c->dead = true;
    store_conn_unpark(s, c);
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

static void store_reap(struct store_server *s)
{
    while (s->dead) {
        struct store_conn *c = s->dead;
        s->dead = c->dead_next;
        store_conn_free(c);
    }
}

static void store_mark_ready(struct store_server *s, struct store_conn *c)
{
    if (c->in_ready || c->dead)
        return;
    c->in_ready = true;
    c->ready_next = s->ready;
    s->ready = c;
}

/* ---- blocking requests ------------------------------------------------------------- */

static void store_conn_on_timeout(void *arg);

/* Links c into kv's waiters and arms its deadline (a re-parked WAIT's is armed
 * already). Returns -1 on ENOMEM with c unparked. */
static int store_conn_park(struct store_server *s, struct store_conn *c, enum store_op op,
                           struct store_kv *kv, int64_t deadline_ms)
{
    c->park_op = op;
    c->park_kv = kv;
    DL_PREPEND2(kv->waiters, c, wait_prev, wait_next);
    if (!loop_timer_armed(&c->timer) &&
        loop_timer_start(s->loop, &c->timer, deadline_ms, store_conn_on_timeout, c) < 0) {
        store_conn_unpark(s, c);
        return -1;
    }
    return 0;
}

/* Parks c on `key` (creating its placeholder). On ENOMEM the request ends with an
 * INTERNAL reply. */
static void store_park_on(struct store_server *s, struct store_conn *c, enum store_op op,
                          const struct store_bytes *key, int64_t deadline_ms)
{
    struct store_kv *kv = store_kv_get(c->run, key);
    if (kv && store_conn_park(s, c, op, kv, deadline_ms) == 0)
        return;
    free(c->wait_keys);
    c->wait_keys = NULL;
    loop_timer_stop(s->loop, &c->timer);
    store_conn_error(s, c, STORE_E_INTERNAL, "out of memory");
}

/* Scans the encoded keys in [from, to) for one that does not exist; *pos gets its offset.
 * Returns false when all exist. */
static bool store_first_missing(struct store_run *run, const uint8_t *keys, uint32_t from,
                                uint32_t to, uint32_t *pos, struct store_bytes *missing)
{
    struct store_request view = {.keys = {keys, to}};
    uint32_t cur = from;
    while (cur < to) {
        uint32_t at = cur;
        if (!store_proto_next_key(&view, &cur, missing))
            break;
        if (!store_kv_present(run, missing)) {
            *pos = at;
            return true;
        }
    }
    return false;
}

/* The next missing key of a parked WAIT: from its cursor to the end, then the keys before
 * the cursor again (a DELETE may have removed one since). */
static bool store_wait_next_missing(struct store_conn *c, struct store_bytes *missing)
{
    uint32_t start = c->wait_cursor;
    return store_first_missing(c->run, c->wait_keys, start, c->wait_keys_len, &c->wait_cursor,
                               missing) ||
           store_first_missing(c->run, c->wait_keys, 0, start, &c->wait_cursor, missing);
}

/* A parked WAIT whose key appeared: re-park on the next missing key or reply OK. */
static void store_wait_resume(struct store_server *s, struct store_conn *c)
{
    struct store_bytes missing;
    if (store_wait_next_missing(c, &missing)) {
        store_park_on(s, c, STORE_OP_WAIT, &missing, loop_timer_deadline(&c->timer));
        return;
    }
    free(c->wait_keys);
    c->wait_keys = NULL;
    loop_timer_stop(s->loop, &c->timer);
    store_conn_sent(s, c, store_proto_encode_ok(&c->out));
}

/* Wakes every client parked on kv (which now has a value). */
static void store_kv_wake(struct store_server *s, struct store_kv *kv)
{
    struct store_conn *c = kv->waiters;
    kv->waiters = NULL;
    while (c) {
        struct store_conn *next = c->wait_next;
        enum store_op op = c->park_op;
        c->wait_prev = c->wait_next = NULL;
        c->park_op = 0;
        c->park_kv = NULL;
        if (op == STORE_OP_GET) {
            loop_timer_stop(s->loop, &c->timer);
            store_conn_sent(s, c, store_proto_encode_ok_value(&c->out, kv->val, kv->vlen));
        } else {
            store_wait_resume(s, c);
        }
        if (!c->park_op)
            store_mark_ready(s, c); /* it may have pipelined more requests */
        c = next;
    }
}

/* c's deadline passed (its timer is disarmed already): no HELLO yet, or a parked
 * request timed out. */
static void store_conn_on_timeout(void *arg)
{
    struct store_conn *c = arg;
    struct store_server *s = c->srv;
    if (!c->run) {
        store_conn_fail(s, c, STORE_E_PROTOCOL, "no HELLO within the handshake timeout");
        return;
    }
    store_conn_unpark(s, c);
    store_conn_error(s, c, STORE_E_TIMEOUT, "timed out waiting for the key");
    store_mark_ready(s, c);
}

/* ---- request handlers -------------------------------------------------------------- */

static void store_reply_ok(struct store_server *s, struct store_conn *c)
{
    store_conn_sent(s, c, store_proto_encode_ok(&c->out));
}

static void store_handle_hello(struct store_server *s, struct store_conn *c,
                               const struct store_request *req)
{
    if (req->magic != STORE_MAGIC) {
        store_conn_fail(s, c, STORE_E_PROTOCOL, "bad magic");
        return;
    }
    if (req->version != STORE_VERSION) {
        char msg[96];
        snprintf(msg, sizeof msg, "protocol version %u not supported (server speaks %d)",
                 req->version, STORE_VERSION);
        store_conn_fail(s, c, STORE_E_VERSION, msg);
        return;
    }
    struct store_run *run = NULL;
    HASH_FIND(hh, s->runs, req->run.p, req->run.len, run);
    /* One message for both cases: no oracle for which runs exist. */
    if (!run || !store_secret_equal(run->secret, run->secret_len, &req->secret)) {
        store_conn_fail(s, c, STORE_E_AUTH, "unknown run or wrong secret");
        return;
    }
    loop_timer_stop(s->loop, &c->timer);
    c->run = run;
    DL_PREPEND2(run->clients, c, run_prev, run_next);
    store_reply_ok(s, c);
}

/* Stores a value and wakes its waiters; replies INTERNAL on ENOMEM. Returns the entry
 * or NULL. */
static struct store_kv *store_put(struct store_server *s, struct store_conn *c,
                                  const struct store_bytes *key, const void *p, uint32_t len)
{
    struct store_kv *kv = store_kv_get(c->run, key);
    if (!kv || store_kv_assign(kv, p, len) < 0) {
        if (kv)
            store_kv_release_if_unused(c->run, kv);
        store_conn_error(s, c, STORE_E_INTERNAL, "out of memory");
        return NULL;
    }
    store_kv_wake(s, kv);
    return kv;
}

static void store_handle_set(struct store_server *s, struct store_conn *c,
                             const struct store_request *req)
{
    if (store_put(s, c, &req->key, req->value.p, req->value.len))
        store_reply_ok(s, c);
}

static void store_handle_get(struct store_server *s, struct store_conn *c,
                             const struct store_request *req, int64_t now)
{
    struct store_kv *kv = store_kv_find(c->run, &req->key);
    if (kv && kv->present) {
        store_conn_sent(s, c, store_proto_encode_ok_value(&c->out, kv->val, kv->vlen));
        return;
    }
    if (req->timeout_ms == 0) {
        store_conn_error(s, c, STORE_E_TIMEOUT, "key does not exist");
        return;
    }
    store_park_on(s, c, STORE_OP_GET, &req->key, now + req->timeout_ms);
}

/* Strict decimal int64: optional '-', 1..19 digits, nothing else. */
static bool store_parse_i64(const uint8_t *p, uint32_t len, int64_t *out)
{
    uint32_t i = 0;
    bool neg = len > 0 && p[0] == '-';
    i = neg ? 1 : 0;
    if (i == len)
        return false;
    uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, v = 0;
    for (; i < len; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        unsigned d = (unsigned)(p[i] - '0');
        if (v > (limit - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

static void store_handle_add(struct store_server *s, struct store_conn *c,
                             const struct store_request *req)
{
    struct store_kv *kv = store_kv_find(c->run, &req->key);
    int64_t cur = 0, sum;
    if (kv && kv->present && !store_parse_i64(kv->val, kv->vlen, &cur)) {
        store_conn_error(s, c, STORE_E_CONFLICT, "current value is not a decimal integer");
        return;
    }
    if (__builtin_add_overflow(cur, req->delta, &sum)) {
        store_conn_error(s, c, STORE_E_CONFLICT, "add overflows a 64-bit integer");
        return;
    }
    char text[24];
    int n = snprintf(text, sizeof text, "%" PRId64, sum);
    if (store_put(s, c, &req->key, text, (uint32_t)n))
        store_conn_sent(s, c, store_proto_encode_ok_number(&c->out, sum));
}

static void store_handle_compare_set(struct store_server *s, struct store_conn *c,
                                     const struct store_request *req)
{
    struct store_kv *kv = store_kv_find(c->run, &req->key);
    bool present = kv && kv->present;
    if (!present && req->expected.len > 0) {
        store_conn_error(s, c, STORE_E_NOT_FOUND, "key does not exist");
        return;
    }
    bool match = !present || (kv->vlen == req->expected.len &&
                              (kv->vlen == 0 || memcmp(kv->val, req->expected.p, kv->vlen) == 0));
    if (match) {
        kv = store_put(s, c, &req->key, req->value.p, req->value.len);
        if (!kv)
            return;
    }
    store_conn_sent(s, c, store_proto_encode_ok_value(&c->out, kv->val, kv->vlen));
}

static void store_handle_check(struct store_server *s, struct store_conn *c,
                               const struct store_request *req)
{
    uint32_t cur = 0;
    struct store_bytes key;
    uint8_t all = 1;
    while (all && store_proto_next_key(req, &cur, &key))
        all = store_kv_present(c->run, &key);
    store_conn_sent(s, c, store_proto_encode_ok_flag(&c->out, all));
}

static void store_handle_wait(struct store_server *s, struct store_conn *c,
                              const struct store_request *req, int64_t now)
{
    uint32_t pos;
    struct store_bytes key;
    if (!store_first_missing(c->run, req->keys.p, 0, req->keys.len, &pos, &key)) {
        store_reply_ok(s, c);
        return;
    }
    if (req->timeout_ms == 0) {
        store_conn_error(s, c, STORE_E_TIMEOUT, "not all keys exist");
        return;
    }
    /* The frame is consumed after this returns: keep our own copy of the keys. */
    c->wait_keys = malloc(req->keys.len);
    if (!c->wait_keys) {
        store_conn_error(s, c, STORE_E_INTERNAL, "out of memory");
        return;
    }
    memcpy(c->wait_keys, req->keys.p, req->keys.len);
    c->wait_keys_len = req->keys.len;
    c->wait_cursor = pos;
    store_park_on(s, c, STORE_OP_WAIT, &key, now + req->timeout_ms);
}

static void store_handle_delete(struct store_server *s, struct store_conn *c,
                                const struct store_request *req)
{
    struct store_kv *kv = store_kv_find(c->run, &req->key);
    uint8_t existed = kv && kv->present;
    if (existed)
        store_kv_free(c->run, kv); /* a present key never has waiters */
    store_conn_sent(s, c, store_proto_encode_ok_flag(&c->out, existed));
}

static void store_handle_request(struct store_server *s, struct store_conn *c,
                                 const struct store_request *req, int64_t now)
{
    atomic_fetch_add(&s->n_requests, 1);
    if (!c->run) {
        if (req->op == STORE_OP_HELLO)
            store_handle_hello(s, c, req);
        else
            store_conn_fail(s, c, STORE_E_PROTOCOL, "the first request must be HELLO");
        return;
    }
    switch (req->op) {
    case STORE_OP_HELLO: store_conn_fail(s, c, STORE_E_PROTOCOL, "HELLO sent twice"); break;
    case STORE_OP_SET: store_handle_set(s, c, req); break;
    case STORE_OP_GET: store_handle_get(s, c, req, now); break;
    case STORE_OP_ADD: store_handle_add(s, c, req); break;
    case STORE_OP_COMPARE_SET: store_handle_compare_set(s, c, req); break;
    case STORE_OP_CHECK: store_handle_check(s, c, req); break;
    case STORE_OP_WAIT: store_handle_wait(s, c, req, now); break;
    case STORE_OP_DELETE: store_handle_delete(s, c, req); break;
    case STORE_OP_PING: store_reply_ok(s, c); break;
    }
}

/* Serves the complete frames buffered on c until it blocks, dies or runs out. */
static void store_conn_process(struct store_server *s, struct store_conn *c)
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
        store_handle_request(s, c, &req, now);
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

/* ---- accepting ------------------------------------------------------------------- */

static void store_accept_resume(void *arg)
{
    struct store_server *s = arg;
    loop_watch_modify(s->loop, &s->listen, EPOLLIN, NULL);
}

/* Stops accepting for a moment (kept accepting if even the timer cannot be armed). */
static void store_accept_pause(struct store_server *s, int64_t now)
{
    if (loop_timer_start(s->loop, &s->accept_resume, now + STORE_ACCEPT_PAUSE_MS,
                         store_accept_resume, s) == 0)
        loop_watch_modify(s->loop, &s->listen, 0, NULL);
}

/* Out of fds: give up the reserve fd to accept-and-close one pending connection, so the
 * listener does not stay readable and spin the loop; without a reserve, stop accepting
 * for a moment. */
static void store_accept_shed(struct store_server *s, int64_t now)
{
    if (now - s->emfile_logged_ms >= 5000) {
        log_warn("store: out of file descriptors, refusing new clients");
        s->emfile_logged_ms = now;
    }
    bool shed = false;
    if (s->reserve_fd >= 0) {
        close(s->reserve_fd);
        int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) {
            close(fd);
            shed = true;
            atomic_fetch_add(&s->n_rejected, 1);
        }
        s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    /* No progress possible (the freed fd went elsewhere): back off instead of spinning. */
    if (!shed || s->reserve_fd < 0)
        store_accept_pause(s, now);
}

static int store_conn_add(struct store_server *s, int fd, int64_t now)
{
    struct store_conn *c = calloc(1, sizeof *c);
    if (!c)
        return -1;
    c->srv = s;
    c->fd = fd;
    buf_init(&c->in);
    buf_init(&c->out);
    if (loop_timer_start(s->loop, &c->timer, now + STORE_HELLO_TIMEOUT_MS,
                         store_conn_on_timeout, c) < 0) {
        free(c);
        return -1;
    }
    if (loop_watch_add(s->loop, &c->watch, fd, STORE_CONN_EVENTS, store_conn_event, c, NULL) < 0) {
        loop_timer_stop(s->loop, &c->timer);
        free(c);
        return -1;
    }
    DL_PREPEND2(s->conns, c, all_prev, all_next);
    atomic_fetch_add(&s->n_clients, 1);
    return 0;
}

static void store_on_listen(void *arg, uint32_t events)
{
    (void)events;
    struct store_server *s = arg;
    int64_t now = clock_mono_ms();
    for (int i = 0; i < STORE_ACCEPT_BATCH; i++) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
                continue;
            if (errno == EMFILE || errno == ENFILE)
                store_accept_shed(s, now);
            else if (errno == ENOBUFS || errno == ENOMEM)
                store_accept_pause(s, now);
            else if (errno != EAGAIN && errno != EWOULDBLOCK)
                log_warn("store: accept: %s", strerror(errno));
            return;
        }
        net_set_nodelay(fd);
        if (store_conn_add(s, fd, now) < 0) {
            log_warn("store: out of memory for a new client");
            close(fd);
        }
    }
}

/* ---- commands from other threads --------------------------------------------------- */

static int store_apply_add_run(struct store_server *s, const char *name, const char *secret,
                               struct err *e)
{
    struct store_run *run = NULL;
    HASH_FIND_STR(s->runs, name, run);
    if (run)
        return err_set(e, ERR_CONFLICT, "run", "store run '%s' already exists", name);
    run = calloc(1, sizeof *run);
    if (!run)
        return err_set(e, ERR_NOMEM, NULL, "out of memory adding store run");
    snprintf(run->name, sizeof run->name, "%s", name);
    snprintf(run->secret, sizeof run->secret, "%s", secret);
    run->secret_len = strlen(run->secret);
    bool oom = false;
    HASH_ADD_STR(s->runs, name, run);
    if (oom) {
        free(run);
        return err_set(e, ERR_NOMEM, NULL, "out of memory adding store run");
    }
    atomic_fetch_add(&s->n_runs, 1);
    return 0;
}

static void store_apply_remove_run(struct store_server *s, const char *name)
{
    struct store_run *run = NULL;
    HASH_FIND_STR(s->runs, name, run);
    if (!run)
        return;
    while (run->clients)
        store_conn_fail(s, run->clients, STORE_E_CLOSED, "run removed");
    HASH_DEL(s->runs, run);
    store_run_free(run);
    atomic_fetch_sub(&s->n_runs, 1);
}

/* A store_server_add_run on the loop's thread; lives on the caller's stack. */
struct store_cmd_add {
    struct store_server *s;
    const char *run, *secret; /* borrowed from the caller */
    int rc;
    struct err err;
};

static void store_do_add_run(void *arg)
{
    struct store_cmd_add *c = arg;
    c->rc = store_apply_add_run(c->s, c->run, c->secret, &c->err);
}

struct store_cmd_remove {
    struct store_server *s;
    const char *run; /* borrowed from the caller */
};

static void store_do_remove_run(void *arg)
{
    struct store_cmd_remove *c = arg;
    store_apply_remove_run(c->s, c->run);
}

/* ---- the loop ---------------------------------------------------------------------- */

static void store_drain_ready(struct store_server *s)
{
    while (s->ready) {
        struct store_conn *c = s->ready;
        s->ready = c->ready_next;
        c->in_ready = false;
        store_conn_process(s, c);
    }
}

/* After each iteration's events and timers: serve the clients that were woken (they
 * may have pipelined more requests), then free the ones that died. */
static void store_after_iteration(void *arg)
{
    struct store_server *s = arg;
    store_drain_ready(s);
    store_reap(s);
}

/* ---- public API -------------------------------------------------------------------- */

static void store_close_fds(struct store_server *s)
{
    loop_destroy(s->loop);
    if (s->lfd >= 0)
        close(s->lfd);
    if (s->reserve_fd >= 0)
        close(s->reserve_fd);
}

static int store_open_fds(struct store_server *s, const char *host, int port, struct err *e)
{
    s->lfd = net_listen(host, port, 1024, e);
    if (s->lfd < 0)
        return err_prefix(e, "store server");
    net_set_nonblock(s->lfd, true);
    s->port = net_local_port(s->lfd);
    s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    s->loop = loop_create("ddpb-store", e);
    if (!s->loop)
        return -1;
    return loop_watch_add(s->loop, &s->listen, s->lfd, EPOLLIN, store_on_listen, s, e);
}

struct store_server *store_server_create(const char *host, int port, struct err *e)
{
    struct store_server *s = calloc(1, sizeof *s);
    if (!s) {
        err_set(e, ERR_NOMEM, NULL, "out of memory creating the store server");
        return NULL;
    }
    s->lfd = s->reserve_fd = -1;
    net_raise_nofile();
    if (store_open_fds(s, host, port, e) < 0 ||
        loop_start(s->loop, store_after_iteration, s, e) < 0) {
        store_close_fds(s);
        free(s);
        return NULL;
    }
    return s;
}

void store_server_destroy(struct store_server *s)
{
    if (!s)
        return;
    loop_stop(s->loop);
    loop_wait(s->loop); /* from here on the loop's state is ours */
    while (s->conns)
        store_conn_kill(s, s->conns);
    store_reap(s);
    struct store_run *run, *tmp;
    HASH_ITER(hh, s->runs, run, tmp) {
        HASH_DEL(s->runs, run);
        store_run_free(run);
    }
    loop_timer_stop(s->loop, &s->accept_resume);
    store_close_fds(s);
    free(s);
}

int store_server_port(const struct store_server *s) { return s->port; }

int store_server_add_run(struct store_server *s, const char *run, const char *secret,
                         struct err *e)
{
    size_t rl = strlen(run), sl = strlen(secret);
    if (rl == 0 || rl > STORE_MAX_RUN)
        return err_set(e, ERR_INVALID, "run", "store run name must be 1..%u bytes", STORE_MAX_RUN);
    if (sl > STORE_MAX_SECRET)
        return err_set(e, ERR_INVALID, "secret", "store secret longer than %u bytes",
                       STORE_MAX_SECRET);
    struct store_cmd_add cmd = {.s = s, .run = run, .secret = secret};
    if (loop_call_sync(s->loop, store_do_add_run, &cmd, e) < 0)
        return err_prefix(e, "store server");
    if (cmd.rc < 0 && e)
        *e = cmd.err;
    return cmd.rc;
}

void store_server_remove_run(struct store_server *s, const char *run)
{
    struct store_cmd_remove cmd = {.s = s, .run = run};
    loop_call_sync(s->loop, store_do_remove_run, &cmd, NULL); /* refused: nothing to remove */
}

void store_server_get_stats(struct store_server *s, struct store_server_stats *out)
{
    out->clients = atomic_load(&s->n_clients);
    out->runs = atomic_load(&s->n_runs);
    out->requests = atomic_load(&s->n_requests);
    out->rejected = atomic_load(&s->n_rejected);
}
