/* store_client: synchronous client of the daemon's TCP store (see store_client.h).
 *
 * Decision: every call is encode -> send_all -> recv the reply frame, each bounded by a
 * deadline and the abort flag (common/net.h). A GET/WAIT with timeout T waits for the
 * reply up to T plus the I/O timeout: the server enforces T and answers STORE_E_TIMEOUT
 * (the connection stays usable); the margin only covers a dead or hung server, and when
 * it runs out the reply may still arrive later, so the connection is closed. Arguments
 * are validated here so that a bad key is ERR_INVALID and never reaches the server,
 * which would close the connection over it. */
#include "worker/store/store_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/net.h"
#include "common/store_proto.h"

#define STORE_CLIENT_DEFAULT_IO_MS 30000
#define STORE_CLIENT_MIN_HELLO_MS 1000

struct store_client {
    int fd; /* -1 once the connection is closed */
    int io_timeout_ms;
    const atomic_bool *abort_flag; /* borrowed */
    struct buf out;                /* the request being sent */
    struct buf in;                 /* the last reply's body; responses borrow it */
};

static void store_client_close(struct store_client *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

static int64_t store_client_deadline(int timeout_ms)
{
    return timeout_ms < 0 ? -1 : clock_mono_ms() + timeout_ms;
}

/* Maps a non-OK reply to an error; statuses after which the server closes the
 * connection close ours too. */
static int store_client_status_error(struct store_client *c, const struct store_response *r,
                                     struct err *e)
{
    enum err_code code;
    bool closes = false;
    switch (r->status) {
    case STORE_E_TIMEOUT: code = ERR_TIMEOUT; break;
    case STORE_E_NOT_FOUND: code = ERR_NOT_FOUND; break;
    case STORE_E_CONFLICT: code = ERR_CONFLICT; break;
    case STORE_E_AUTH:
        code = ERR_UNAUTHORIZED;
        closes = true;
        break;
    case STORE_E_TOO_LARGE:
        code = ERR_TOO_LARGE;
        closes = true;
        break;
    case STORE_E_CLOSED:
        code = ERR_PEER;
        closes = true;
        break;
    case STORE_E_PROTOCOL:
    case STORE_E_VERSION:
        code = ERR_PROTOCOL;
        closes = true;
        break;
    default: code = ERR_INTERNAL; break;
    }
    if (closes)
        store_client_close(c);
    return err_set(e, code, NULL, "store: %s: %.*s", store_proto_status_name(r->status),
                   (int)(r->value.len > 256 ? 256 : r->value.len), (const char *)r->value.p);
}

/* Sends c->out and reads one reply into *resp (borrowing c->in). reply_timeout_ms < 0
 * waits forever (the abort flag still works). Returns 0 only for STORE_OK. */
static int store_client_roundtrip(struct store_client *c, enum store_op op,
                                  int reply_timeout_ms, struct store_response *resp,
                                  struct err *e)
{
    if (c->fd < 0)
        return err_set(e, ERR_PEER, NULL, "store: connection is closed");
    uint8_t hdr[4];
    uint32_t len;
    if (net_send_all(c->fd, c->out.data, c->out.len, store_client_deadline(c->io_timeout_ms),
                     c->abort_flag, e) < 0)
        goto broken;
    int64_t deadline = store_client_deadline(reply_timeout_ms);
    if (net_recv_all(c->fd, hdr, sizeof hdr, deadline, c->abort_flag, e) < 0)
        goto broken;
    len = buf_load_u32(hdr);
    if (len > STORE_MAX_FRAME) {
        err_set(e, ERR_PROTOCOL, NULL, "reply of %u bytes exceeds the frame cap", len);
        goto broken;
    }
    buf_reset(&c->in);
    if (buf_reserve(&c->in, len ? len : 1) < 0) {
        err_set(e, ERR_NOMEM, NULL, "out of memory for a %u-byte reply", len);
        goto broken;
    }
    if (net_recv_all(c->fd, c->in.data, len, deadline, c->abort_flag, e) < 0)
        goto broken;
    c->in.len = len;
    if (store_proto_decode_response(op, c->in.data, len, resp, e) < 0)
        goto broken;
    if (resp->status != STORE_OK)
        return store_client_status_error(c, resp, e);
    return 0;
broken:
    /* Mid-frame or out of sync with the server: the connection is unusable. */
    store_client_close(c);
    return err_prefix(e, "store");
}

static int store_client_check_key(const char *key, struct err *e)
{
    size_t n = key ? strlen(key) : 0;
    if (n == 0 || n > STORE_MAX_KEY)
        return err_set(e, ERR_INVALID, "key", "store key must be 1..%u bytes", STORE_MAX_KEY);
    return 0;
}

static int store_client_check_value(size_t len, const char *what, struct err *e)
{
    if (len > STORE_MAX_VALUE)
        return err_set(e, ERR_TOO_LARGE, what, "store %s of %zu bytes exceeds %u", what, len,
                       STORE_MAX_VALUE);
    return 0;
}

/* Runs the request the caller encoded into c->out (encode_rc is the encoder's result). */
static int store_client_call(struct store_client *c, int encode_rc, enum store_op op,
                             int reply_timeout_ms, struct store_response *resp, struct err *e)
{
    if (encode_rc < 0)
        return err_set(e, ERR_NOMEM, NULL, "store: out of memory encoding a request");
    return store_client_roundtrip(c, op, reply_timeout_ms, resp, e);
}

/* Copies a reply value into a malloc'd NUL-terminated string (caller frees). */
static int store_client_copy_value(const struct store_bytes *v, char **out, size_t *len,
                                   struct err *e)
{
    char *p = malloc((size_t)v->len + 1);
    if (!p)
        return err_set(e, ERR_NOMEM, NULL, "out of memory for a %u-byte value", v->len);
    if (v->len)
        memcpy(p, v->p, v->len);
    p[v->len] = '\0';
    *out = p;
    if (len)
        *len = v->len;
    return 0;
}

/* Timeout for a blocking op on the wire (u32, 0 = do not block) and for our own wait. */
static uint32_t store_client_wire_timeout(int timeout_ms)
{
    return timeout_ms < 0 ? UINT32_MAX : (uint32_t)timeout_ms;
}

static int store_client_reply_timeout(const struct store_client *c, int timeout_ms)
{
    if (timeout_ms < 0 || c->io_timeout_ms < 0)
        return -1;
    int64_t t = (int64_t)timeout_ms + c->io_timeout_ms;
    return t > 0x7fffffff ? 0x7fffffff : (int)t;
}

static int store_client_hello(struct store_client *c, const char *run, const char *secret,
                              int64_t rank, int timeout_ms, struct err *e)
{
    struct store_response r;
    buf_reset(&c->out);
    int rc = store_proto_encode_hello(&c->out, run, secret, rank);
    return store_client_call(c, rc, STORE_OP_HELLO, timeout_ms, &r, e);
}

static int store_client_check_identity(const char *run, const char *secret, struct err *e)
{
    size_t rl = run ? strlen(run) : 0;
    if (rl == 0 || rl > STORE_MAX_RUN)
        return err_set(e, ERR_INVALID, "run", "store run name must be 1..%u bytes",
                       STORE_MAX_RUN);
    if (!secret || strlen(secret) > STORE_MAX_SECRET)
        return err_set(e, ERR_INVALID, "secret", "store secret must be at most %u bytes",
                       STORE_MAX_SECRET);
    return 0;
}

struct store_client *store_client_connect(const char *hostport, const char *run,
                                          const char *secret, int64_t rank,
                                          int connect_timeout_ms, const atomic_bool *abort_flag,
                                          struct err *e)
{
    char host[256];
    int port;
    if (store_client_check_identity(run, secret, e) < 0 ||
        net_split_hostport(hostport, host, sizeof host, &port, false, e) < 0)
        return NULL;
    struct store_client *c = calloc(1, sizeof *c);
    if (!c) {
        err_set(e, ERR_NOMEM, NULL, "out of memory for a store client");
        return NULL;
    }
    buf_init(&c->out);
    buf_init(&c->in);
    c->io_timeout_ms = STORE_CLIENT_DEFAULT_IO_MS;
    c->abort_flag = abort_flag;
    int64_t deadline = store_client_deadline(connect_timeout_ms);
    c->fd = net_connect(host, port, connect_timeout_ms, true, abort_flag, e);
    /* The handshake gets what is left of the connect budget, but at least a second. */
    int left = clock_ms_left(deadline);
    int hello_ms = left < 0
                       ? c->io_timeout_ms
                       : (left < STORE_CLIENT_MIN_HELLO_MS ? STORE_CLIENT_MIN_HELLO_MS : left);
    if (c->fd < 0 || store_client_hello(c, run, secret, rank, hello_ms, e) < 0) {
        err_prefix(e, "store %s run '%s'", hostport, run);
        store_client_destroy(c);
        return NULL;
    }
    return c;
}

void store_client_destroy(struct store_client *c)
{
    if (!c)
        return;
    store_client_close(c);
    buf_free(&c->out);
    buf_free(&c->in);
    free(c);
}

void store_client_set_io_timeout(struct store_client *c, int timeout_ms)
{
    c->io_timeout_ms = timeout_ms;
}

int store_client_set(struct store_client *c, const char *key, const void *value, size_t len,
                     struct err *e)
{
    struct store_response r;
    if (store_client_check_key(key, e) < 0 || store_client_check_value(len, "value", e) < 0)
        return -1;
    buf_reset(&c->out);
    int rc = store_proto_encode_set(&c->out, key, value, len);
    return store_client_call(c, rc, STORE_OP_SET, c->io_timeout_ms, &r, e);
}

int store_client_set_str(struct store_client *c, const char *key, const char *value,
                         struct err *e)
{
    return store_client_set(c, key, value, strlen(value), e);
}

int store_client_get(struct store_client *c, const char *key, int timeout_ms, char **value,
                     size_t *len, struct err *e)
{
    struct store_response r;
    if (store_client_check_key(key, e) < 0)
        return -1;
    buf_reset(&c->out);
    int rc = store_proto_encode_get(&c->out, key, store_client_wire_timeout(timeout_ms));
    if (store_client_call(c, rc, STORE_OP_GET, store_client_reply_timeout(c, timeout_ms), &r,
                          e) < 0)
        return err_prefix(e, "get '%s'", key);
    return store_client_copy_value(&r.value, value, len, e);
}

int store_client_add(struct store_client *c, const char *key, int64_t delta, int64_t *result,
                     struct err *e)
{
    struct store_response r;
    if (store_client_check_key(key, e) < 0)
        return -1;
    buf_reset(&c->out);
    int rc = store_proto_encode_add(&c->out, key, delta);
    if (store_client_call(c, rc, STORE_OP_ADD, c->io_timeout_ms, &r, e) < 0)
        return err_prefix(e, "add '%s'", key);
    if (result)
        *result = r.number;
    return 0;
}

int store_client_compare_set(struct store_client *c, const char *key, const char *expected,
                             const char *desired, char **current, struct err *e)
{
    struct store_response r;
    expected = expected ? expected : "";
    desired = desired ? desired : "";
    size_t el = strlen(expected), dl = strlen(desired);
    if (store_client_check_key(key, e) < 0 || store_client_check_value(el, "expected", e) < 0 ||
        store_client_check_value(dl, "desired", e) < 0)
        return -1;
    if (el + dl + strlen(key) + 16 > STORE_MAX_FRAME)
        return err_set(e, ERR_TOO_LARGE, NULL, "compare_set '%s': request exceeds %u bytes",
                       key, STORE_MAX_FRAME);
    buf_reset(&c->out);
    int rc = store_proto_encode_compare_set(&c->out, key, expected, el, desired, dl);
    if (store_client_call(c, rc, STORE_OP_COMPARE_SET, c->io_timeout_ms, &r, e) < 0)
        return err_prefix(e, "compare_set '%s'", key);
    return current ? store_client_copy_value(&r.value, current, NULL, e) : 0;
}

static int store_client_check_keys(const char *const *keys, uint32_t n, struct err *e)
{
    if (n == 0 || n > STORE_MAX_WAIT_KEYS)
        return err_set(e, ERR_INVALID, "keys", "store key count %u out of range 1..%u", n,
                       STORE_MAX_WAIT_KEYS);
    for (uint32_t i = 0; i < n; i++)
        if (store_client_check_key(keys[i], e) < 0)
            return -1;
    return 0;
}

int store_client_check(struct store_client *c, const char *const *keys, uint32_t n, int *all,
                       struct err *e)
{
    struct store_response r;
    if (store_client_check_keys(keys, n, e) < 0)
        return -1;
    buf_reset(&c->out);
    int rc = store_proto_encode_keys(&c->out, STORE_OP_CHECK, keys, n, 0);
    if (store_client_call(c, rc, STORE_OP_CHECK, c->io_timeout_ms, &r, e) < 0)
        return err_prefix(e, "check");
    *all = r.flag;
    return 0;
}

int store_client_wait(struct store_client *c, const char *const *keys, uint32_t n,
                      int timeout_ms, struct err *e)
{
    struct store_response r;
    if (store_client_check_keys(keys, n, e) < 0)
        return -1;
    buf_reset(&c->out);
    int rc = store_proto_encode_keys(&c->out, STORE_OP_WAIT, keys, n,
                                     store_client_wire_timeout(timeout_ms));
    if (store_client_call(c, rc, STORE_OP_WAIT, store_client_reply_timeout(c, timeout_ms), &r,
                          e) < 0)
        return err_prefix(e, "wait for '%s'%s", keys[0], n > 1 ? " and more" : "");
    return 0;
}

int store_client_delete(struct store_client *c, const char *key, int *existed, struct err *e)
{
    struct store_response r;
    if (store_client_check_key(key, e) < 0)
        return -1;
    buf_reset(&c->out);
    int rc = store_proto_encode_delete(&c->out, key);
    if (store_client_call(c, rc, STORE_OP_DELETE, c->io_timeout_ms, &r, e) < 0)
        return err_prefix(e, "delete '%s'", key);
    if (existed)
        *existed = r.flag;
    return 0;
}

int store_client_ping(struct store_client *c, struct err *e)
{
    struct store_response r;
    buf_reset(&c->out);
    int rc = store_proto_encode_ping(&c->out);
    return store_client_call(c, rc, STORE_OP_PING, c->io_timeout_ms, &r, e);
}

int store_client_barrier(struct store_client *c, const char *name, int64_t world_size,
                         int timeout_ms, struct err *e)
{
    char count_key[STORE_MAX_KEY + 2], done_key[STORE_MAX_KEY + 2];
    if (world_size < 1)
        return err_set(e, ERR_INVALID, "world_size", "barrier '%s': world size %lld < 1", name,
                       (long long)world_size);
    if (snprintf(count_key, sizeof count_key, "%s/count", name) > (int)STORE_MAX_KEY ||
        snprintf(done_key, sizeof done_key, "%s/done", name) > (int)STORE_MAX_KEY)
        return err_set(e, ERR_INVALID, "name", "barrier name too long");
    int64_t deadline = store_client_deadline(timeout_ms);
    int64_t arrived;
    if (store_client_add(c, count_key, 1, &arrived, e) < 0)
        return err_prefix(e, "barrier '%s'", name);
    if (arrived > world_size)
        return err_set(e, ERR_CONFLICT, "name",
                       "barrier '%s': %lld arrivals for a world of %lld (name reused?)", name,
                       (long long)arrived, (long long)world_size);
    if (arrived == world_size && store_client_set_str(c, done_key, "1", e) < 0)
        return err_prefix(e, "barrier '%s'", name);
    const char *keys[1] = {done_key};
    if (store_client_wait(c, keys, 1, clock_ms_left(deadline), e) < 0)
        return err_prefix(e, "barrier '%s' (%lld of %lld arrived when this rank did)", name,
                          (long long)arrived, (long long)world_size);
    return 0;
}
