/* store_proto: encoding and decoding of the store's frames (contract in store_proto.h).
 *
 * Decision: decoding validates everything a server would otherwise have to re-check
 * (field lengths against their caps, every CHECK/WAIT key, no trailing bytes), so a
 * request that decodes is fully well-formed and store_proto_next_key cannot fail later.
 * Encoders write a placeholder length, append the body and patch the length in place;
 * on failure they roll `out` back to where it was so a half frame is never left behind. */
#include "common/store_proto.h"

#include <string.h>

/* ---- decoding helpers ------------------------------------------------------------ */

static int proto_get_u32(struct buf_reader *r, uint32_t *v, const char *what, struct err *e)
{
    if (!buf_get_u32(r, v))
        return err_set(e, ERR_PROTOCOL, what, "truncated %s", what);
    return 0;
}

/* Reads str := u32 len | bytes[len] with min_len <= len <= max_len; *out borrows r. */
static int proto_get_str(struct buf_reader *r, struct store_bytes *out, uint32_t min_len,
                         uint32_t max_len, const char *what, struct err *e)
{
    uint32_t len;
    const uint8_t *p;
    if (proto_get_u32(r, &len, what, e) < 0)
        return -1;
    if (len < min_len)
        return err_set(e, ERR_PROTOCOL, what, "%s is empty", what);
    if (len > max_len)
        return err_set(e, ERR_PROTOCOL, what, "%s too long: %u bytes (max %u)", what, len,
                       max_len);
    if (!buf_get_bytes(r, len, &p))
        return err_set(e, ERR_PROTOCOL, what, "truncated %s: %u bytes announced, %zu left",
                       what, len, buf_reader_left(r));
    out->p = p;
    out->len = len;
    return 0;
}

static int proto_get_key(struct buf_reader *r, struct store_bytes *key, struct err *e)
{
    return proto_get_str(r, key, 1, STORE_MAX_KEY, "key", e);
}

static int proto_get_value(struct buf_reader *r, struct store_bytes *v, const char *what,
                           struct err *e)
{
    return proto_get_str(r, v, 0, STORE_MAX_VALUE, what, e);
}

static int proto_get_i64(struct buf_reader *r, int64_t *v, const char *what, struct err *e)
{
    if (!buf_get_i64(r, v))
        return err_set(e, ERR_PROTOCOL, what, "truncated %s", what);
    return 0;
}

/* u32 n | str key[n]: validates every key and records the span they occupy. */
static int proto_get_keys(struct buf_reader *r, struct store_request *req, struct err *e)
{
    if (proto_get_u32(r, &req->nkeys, "nkeys", e) < 0)
        return -1;
    if (req->nkeys == 0 || req->nkeys > STORE_MAX_WAIT_KEYS)
        return err_set(e, ERR_PROTOCOL, "nkeys", "key count %u out of range 1..%u", req->nkeys,
                       STORE_MAX_WAIT_KEYS);
    size_t start = r->off;
    for (uint32_t i = 0; i < req->nkeys; i++) {
        struct store_bytes key;
        if (proto_get_key(r, &key, e) < 0)
            return err_prefix(e, "key %u of %u", i + 1, req->nkeys);
    }
    req->keys.p = r->p + start;
    req->keys.len = (uint32_t)(r->off - start);
    return 0;
}

static int proto_decode_hello(struct buf_reader *r, struct store_request *req, struct err *e)
{
    if (proto_get_u32(r, &req->magic, "magic", e) < 0)
        return -1;
    if (!buf_get_u16(r, &req->version))
        return err_set(e, ERR_PROTOCOL, "version", "truncated version");
    if (proto_get_str(r, &req->run, 1, STORE_MAX_RUN, "run", e) < 0 ||
        proto_get_str(r, &req->secret, 0, STORE_MAX_SECRET, "secret", e) < 0)
        return -1;
    return proto_get_i64(r, &req->rank, "rank", e);
}

static int proto_decode_fields(struct buf_reader *r, struct store_request *req, struct err *e)
{
    switch (req->op) {
    case STORE_OP_HELLO: return proto_decode_hello(r, req, e);
    case STORE_OP_SET:
        if (proto_get_key(r, &req->key, e) < 0)
            return -1;
        return proto_get_value(r, &req->value, "value", e);
    case STORE_OP_GET:
        if (proto_get_key(r, &req->key, e) < 0)
            return -1;
        return proto_get_u32(r, &req->timeout_ms, "timeout_ms", e);
    case STORE_OP_ADD:
        if (proto_get_key(r, &req->key, e) < 0)
            return -1;
        return proto_get_i64(r, &req->delta, "delta", e);
    case STORE_OP_COMPARE_SET:
        if (proto_get_key(r, &req->key, e) < 0 ||
            proto_get_value(r, &req->expected, "expected", e) < 0)
            return -1;
        return proto_get_value(r, &req->value, "desired", e);
    case STORE_OP_CHECK: return proto_get_keys(r, req, e);
    case STORE_OP_WAIT:
        if (proto_get_keys(r, req, e) < 0)
            return -1;
        return proto_get_u32(r, &req->timeout_ms, "timeout_ms", e);
    case STORE_OP_DELETE: return proto_get_key(r, &req->key, e);
    case STORE_OP_PING: return 0;
    }
    return err_set(e, ERR_PROTOCOL, "op", "unknown op %d", (int)req->op);
}

static int proto_check_end(const struct buf_reader *r, struct err *e)
{
    if (buf_reader_left(r) != 0)
        return err_set(e, ERR_PROTOCOL, NULL, "%zu trailing bytes after the message",
                       buf_reader_left(r));
    return 0;
}

/* ---- decoding -------------------------------------------------------------------- */

int store_proto_split_frame(const uint8_t *data, size_t len, const uint8_t **body,
                            uint32_t *body_len, size_t *frame_len, struct err *e)
{
    if (len < 4)
        return 0;
    uint32_t n = buf_load_u32(data);
    if (n > STORE_MAX_FRAME)
        return err_set(e, ERR_TOO_LARGE, NULL, "frame of %u bytes exceeds the %u-byte cap", n,
                       STORE_MAX_FRAME);
    if (len - 4 < n)
        return 0;
    *body = data + 4;
    *body_len = n;
    *frame_len = 4 + (size_t)n;
    return 1;
}

int store_proto_decode_request(const uint8_t *body, uint32_t body_len,
                               struct store_request *req, struct err *e)
{
    struct buf_reader r;
    uint8_t op;
    memset(req, 0, sizeof *req);
    buf_reader_init(&r, body, body_len);
    if (!buf_get_u8(&r, &op))
        return err_set(e, ERR_PROTOCOL, "op", "empty request");
    if (op < STORE_OP_HELLO || op > STORE_OP_PING)
        return err_set(e, ERR_PROTOCOL, "op", "unknown op %u", op);
    req->op = (enum store_op)op;
    if (proto_decode_fields(&r, req, e) < 0)
        return -1;
    return proto_check_end(&r, e);
}

static int proto_decode_ok_fields(enum store_op op, struct buf_reader *r,
                                  struct store_response *resp, struct err *e)
{
    switch (op) {
    case STORE_OP_HELLO:
    case STORE_OP_SET:
    case STORE_OP_WAIT:
    case STORE_OP_PING: return 0;
    case STORE_OP_GET:
    case STORE_OP_COMPARE_SET: return proto_get_value(r, &resp->value, "value", e);
    case STORE_OP_ADD: return proto_get_i64(r, &resp->number, "value", e);
    case STORE_OP_CHECK:
    case STORE_OP_DELETE:
        if (!buf_get_u8(r, &resp->flag))
            return err_set(e, ERR_PROTOCOL, "flag", "truncated flag");
        if (resp->flag > 1)
            return err_set(e, ERR_PROTOCOL, "flag", "flag %u is not 0 or 1", resp->flag);
        return 0;
    }
    return err_set(e, ERR_PROTOCOL, "op", "unknown op %d", (int)op);
}

int store_proto_decode_response(enum store_op op, const uint8_t *body, uint32_t body_len,
                                struct store_response *resp, struct err *e)
{
    struct buf_reader r;
    uint8_t status;
    memset(resp, 0, sizeof *resp);
    buf_reader_init(&r, body, body_len);
    if (!buf_get_u8(&r, &status))
        return err_set(e, ERR_PROTOCOL, "status", "empty response");
    if (status > STORE_E_CONFLICT)
        return err_set(e, ERR_PROTOCOL, "status", "unknown status %u", status);
    resp->status = (enum store_status)status;
    int rc = status == STORE_OK
                 ? proto_decode_ok_fields(op, &r, resp, e)
                 : proto_get_str(&r, &resp->value, 0, STORE_MAX_FRAME, "message", e);
    if (rc < 0)
        return -1;
    return proto_check_end(&r, e);
}

bool store_proto_next_key(const struct store_request *req, uint32_t *cursor,
                          struct store_bytes *key)
{
    if (*cursor >= req->keys.len)
        return false;
    struct buf_reader r;
    uint32_t len;
    const uint8_t *p;
    buf_reader_init(&r, req->keys.p + *cursor, req->keys.len - *cursor);
    /* Cannot fail on a decoded request; the checks keep a hand-built one in bounds. */
    if (!buf_get_u32(&r, &len) || !buf_get_bytes(&r, len, &p))
        return false;
    key->p = p;
    key->len = len;
    *cursor += (uint32_t)r.off;
    return true;
}

/* ---- encoding -------------------------------------------------------------------- */

/* Encoders: each append's -1 is OR-ed into rc and the frame is judged once at the end;
 * an append after a failed one is harmless because the whole frame is rolled back. */

/* Starts a frame: reserves the length prefix; *start gets its offset in out. */
static int proto_frame_begin(struct buf *out, size_t *start)
{
    *start = out->len;
    return buf_put_u32(out, 0);
}

/* Patches the length prefix, or rolls back the whole frame when any append failed. */
static int proto_frame_end(struct buf *out, size_t start, int rc)
{
    if (rc < 0 || out->len - start - 4 > STORE_MAX_FRAME) {
        out->len = start;
        return -1;
    }
    buf_store_u32(out->data + start, (uint32_t)(out->len - start - 4));
    return 0;
}

static int proto_put_str(struct buf *out, const void *p, size_t len)
{
    if (len > UINT32_MAX)
        return -1;
    int rc = buf_put_u32(out, (uint32_t)len);
    return rc | buf_append(out, p, len);
}

static int proto_put_cstr(struct buf *out, const char *s)
{
    return proto_put_str(out, s, strlen(s));
}

/* Begins a frame whose body starts with `first` (an op or a status). */
static int proto_begin_body(struct buf *out, uint8_t first, size_t *start)
{
    int rc = proto_frame_begin(out, start);
    return rc | buf_put_u8(out, first);
}

int store_proto_encode_hello(struct buf *out, const char *run, const char *secret, int64_t rank)
{
    size_t start;
    int rc = proto_begin_body(out, STORE_OP_HELLO, &start);
    rc |= buf_put_u32(out, STORE_MAGIC);
    rc |= buf_put_u16(out, STORE_VERSION);
    rc |= proto_put_cstr(out, run);
    rc |= proto_put_cstr(out, secret);
    rc |= buf_put_i64(out, rank);
    return proto_frame_end(out, start, rc);
}

int store_proto_encode_set(struct buf *out, const char *key, const void *value, size_t len)
{
    size_t start;
    int rc = proto_begin_body(out, STORE_OP_SET, &start);
    rc |= proto_put_cstr(out, key);
    rc |= proto_put_str(out, value, len);
    return proto_frame_end(out, start, rc);
}

int store_proto_encode_get(struct buf *out, const char *key, uint32_t timeout_ms)
{
    size_t start;
    int rc = proto_begin_body(out, STORE_OP_GET, &start);
    rc |= proto_put_cstr(out, key);
    rc |= buf_put_u32(out, timeout_ms);
    return proto_frame_end(out, start, rc);
}

int store_proto_encode_add(struct buf *out, const char *key, int64_t delta)
{
    size_t start;
    int rc = proto_begin_body(out, STORE_OP_ADD, &start);
    rc |= proto_put_cstr(out, key);
    rc |= buf_put_i64(out, delta);
    return proto_frame_end(out, start, rc);
}

int store_proto_encode_compare_set(struct buf *out, const char *key, const void *expected,
                                   size_t expected_len, const void *desired, size_t desired_len)
{
    size_t start;
    int rc = proto_begin_body(out, STORE_OP_COMPARE_SET, &start);
    rc |= proto_put_cstr(out, key);
    rc |= proto_put_str(out, expected, expected_len);
    rc |= proto_put_str(out, desired, desired_len);
    return proto_frame_end(out, start, rc);
}

int store_proto_encode_keys(struct buf *out, enum store_op op, const char *const *keys,
                            uint32_t n, uint32_t timeout_ms)
{
    size_t start;
    int rc = proto_begin_body(out, (uint8_t)op, &start);
    rc |= buf_put_u32(out, n);
    for (uint32_t i = 0; rc == 0 && i < n; i++)
        rc |= proto_put_cstr(out, keys[i]);
    if (op == STORE_OP_WAIT)
        rc |= buf_put_u32(out, timeout_ms);
    return proto_frame_end(out, start, rc);
}

int store_proto_encode_delete(struct buf *out, const char *key)
{
    size_t start;
    int rc = proto_begin_body(out, STORE_OP_DELETE, &start);
    rc |= proto_put_cstr(out, key);
    return proto_frame_end(out, start, rc);
}

int store_proto_encode_ping(struct buf *out)
{
    size_t start;
    int rc = proto_begin_body(out, STORE_OP_PING, &start);
    return proto_frame_end(out, start, rc);
}

int store_proto_encode_ok(struct buf *out)
{
    size_t start;
    int rc = proto_begin_body(out, STORE_OK, &start);
    return proto_frame_end(out, start, rc);
}

int store_proto_encode_ok_value(struct buf *out, const void *value, size_t len)
{
    size_t start;
    int rc = proto_begin_body(out, STORE_OK, &start);
    rc |= proto_put_str(out, value, len);
    return proto_frame_end(out, start, rc);
}

int store_proto_encode_ok_number(struct buf *out, int64_t v)
{
    size_t start;
    int rc = proto_begin_body(out, STORE_OK, &start);
    rc |= buf_put_i64(out, v);
    return proto_frame_end(out, start, rc);
}

int store_proto_encode_ok_flag(struct buf *out, uint8_t flag)
{
    size_t start;
    int rc = proto_begin_body(out, STORE_OK, &start);
    rc |= buf_put_u8(out, flag);
    return proto_frame_end(out, start, rc);
}

int store_proto_encode_error(struct buf *out, enum store_status status, const char *msg)
{
    size_t start;
    int rc = proto_begin_body(out, (uint8_t)status, &start);
    rc |= proto_put_cstr(out, msg);
    return proto_frame_end(out, start, rc);
}

const char *store_proto_status_name(enum store_status s)
{
    switch (s) {
    case STORE_OK: return "ok";
    case STORE_E_TIMEOUT: return "timeout";
    case STORE_E_NOT_FOUND: return "not_found";
    case STORE_E_PROTOCOL: return "protocol";
    case STORE_E_AUTH: return "auth";
    case STORE_E_VERSION: return "version";
    case STORE_E_TOO_LARGE: return "too_large";
    case STORE_E_CLOSED: return "closed";
    case STORE_E_INTERNAL: return "internal";
    case STORE_E_CONFLICT: return "conflict";
    }
    return "unknown";
}
