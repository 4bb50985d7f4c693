/* store/handlers: see handlers.h. Every reply goes through store/conn (store_conn_sent
 * and friends), which also drops clients that cannot be answered. */
#include "daemon/store/handlers.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utlist.h>

#include "daemon/loop.h"
#include "daemon/store/conn.h"
#include "daemon/store/keys.h"
#include "daemon/store/state.h"

void store_conn_unpark(struct store_server *s, struct store_conn *c)
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
void store_conn_on_timeout(void *arg)
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
    struct store_run *run = store_runs_auth(s->runs, &req->run, &req->secret);
    /* One message for both cases: no oracle for which runs exist. */
    if (!run) {
        store_conn_fail(s, c, STORE_E_AUTH, "unknown run or wrong secret");
        return;
    }
    loop_timer_stop(s->loop, &c->timer);
    c->run = run;
    DL_PREPEND2(run->clients, c, run_prev, run_next);
    store_reply_ok(s, c);
}

struct store_kv *store_kv_put(struct store_server *s, struct store_run *run,
                              const struct store_bytes *key, const void *p, uint32_t len)
{
    struct store_kv *kv = store_kv_get(run, key);
    if (!kv || store_kv_assign(kv, p, len) < 0) {
        if (kv)
            store_kv_release_if_unused(run, kv);
        return NULL;
    }
    store_kv_wake(s, kv);
    return kv;
}

/* Stores a value and wakes its waiters; replies INTERNAL on ENOMEM. Returns the entry
 * or NULL. */
static struct store_kv *store_put(struct store_server *s, struct store_conn *c,
                                  const struct store_bytes *key, const void *p, uint32_t len)
{
    struct store_kv *kv = store_kv_put(s, c->run, key, p, len);
    if (!kv)
        store_conn_error(s, c, STORE_E_INTERNAL, "out of memory");
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
    bool match = !present ||
                 (kv->vlen == req->expected.len &&
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

void store_handle_request(struct store_server *s, struct store_conn *c,
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
