/* store_proto: the wire format of the rendezvous key-value store (daemon/store/
 * serves it, worker/store/store_client.c speaks it). This header is the contract.
 *
 * Decision: binary, length-prefixed, little-endian frames with a magic + version
 * handshake carrying the run and its secret, so one listening port serves every run
 * and a client can only reach its own run's keys. Decoding never allocates: a decoded
 * request borrows the bytes of the frame it came from, which keeps the decoder simple
 * to fuzz and the server's per-request cost flat.
 *
 * Every frame, both directions:   u32 body_len | body[body_len]
 * body_len is at most STORE_MAX_FRAME; a larger length is a protocol error (the server
 * answers STORE_E_TOO_LARGE and closes).
 *
 * Strings and byte values:  str := u32 len | bytes[len]
 * Keys are 1..STORE_MAX_KEY bytes; values 0..STORE_MAX_VALUE bytes.
 *
 * Request body:  u8 op | fields
 *   HELLO        u32 magic (STORE_MAGIC) | u16 version | str run | str secret | i64 rank
 *                must be the first frame; anything else first is a protocol error.
 *   SET          str key | str value
 *   GET          str key | u32 timeout_ms           blocks until key exists or timeout
 *   ADD          str key | i64 delta                 value kept as decimal ASCII text;
 *                                                    a missing key counts as 0; a value
 *                                                    that is not a decimal int64, or an
 *                                                    overflow, is STORE_E_CONFLICT
 *   COMPARE_SET  str key | str expected | str desired
 *                stores desired when the current value equals expected (a missing key
 *                matches an empty expected) and replies the value stored afterwards,
 *                which is desired on success and the unchanged current value otherwise;
 *                a missing key with a non-empty expected replies STORE_E_NOT_FOUND
 *   CHECK        u32 n | str key[n]                  replies u8 1 when all exist
 *   WAIT         u32 n | str key[n] | u32 timeout_ms blocks until all exist or timeout
 *   DELETE       str key                             replies u8 1 when it existed
 *   PING         (nothing)
 * n is 1..STORE_MAX_WAIT_KEYS.
 *
 * Response body:  u8 status | fields
 *   status STORE_OK:   HELLO, SET, WAIT, PING: nothing;  GET, COMPARE_SET: str value;
 *                      ADD: i64 value;  CHECK, DELETE: u8 flag
 *   any other status:  str message (human-readable)
 *
 * A timeout (GET, WAIT) is status STORE_E_TIMEOUT and the connection stays usable.
 * STORE_E_AUTH, STORE_E_VERSION, STORE_E_PROTOCOL, STORE_E_TOO_LARGE and
 * STORE_E_CLOSED (the run was removed) are followed by the server closing the
 * connection. Timeouts of 0 mean "do not block". */
#ifndef DDPB_STORE_PROTO_H
#define DDPB_STORE_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/err.h"

#define STORE_MAGIC 0x42504444u /* "DDPB" little-endian */
#define STORE_VERSION 1
#define STORE_MAX_FRAME (16u << 20)
#define STORE_MAX_KEY 512u
#define STORE_MAX_VALUE (8u << 20)
#define STORE_MAX_WAIT_KEYS 4096u
#define STORE_MAX_RUN 64u
#define STORE_MAX_SECRET 128u

enum store_op {
    STORE_OP_HELLO = 1,
    STORE_OP_SET = 2,
    STORE_OP_GET = 3,
    STORE_OP_ADD = 4,
    STORE_OP_COMPARE_SET = 5,
    STORE_OP_CHECK = 6,
    STORE_OP_WAIT = 7,
    STORE_OP_DELETE = 8,
    STORE_OP_PING = 9,
};

enum store_status {
    STORE_OK = 0,
    STORE_E_TIMEOUT = 1,
    STORE_E_NOT_FOUND = 2,
    STORE_E_PROTOCOL = 3,
    STORE_E_AUTH = 4,
    STORE_E_VERSION = 5,
    STORE_E_TOO_LARGE = 6,
    STORE_E_CLOSED = 7,
    STORE_E_INTERNAL = 8,
    STORE_E_CONFLICT = 9, /* valid request the current value refuses (ADD on a value that
                           * is not a decimal int64, or overflow); connection stays open */
};

/* A byte string borrowed from a frame. */
struct store_bytes {
    const uint8_t *p;
    uint32_t len;
};

/* A decoded request. Every pointer borrows the frame passed to the decoder. For CHECK
 * and WAIT, `keys` holds the n encoded keys back to back (u32 len | bytes each), walk
 * them with store_proto_next_key. */
struct store_request {
    enum store_op op;
    /* HELLO */
    uint32_t magic;
    uint16_t version;
    struct store_bytes run, secret;
    int64_t rank;
    /* SET, GET, ADD, COMPARE_SET, DELETE */
    struct store_bytes key;
    struct store_bytes value;    /* SET value; COMPARE_SET desired */
    struct store_bytes expected; /* COMPARE_SET */
    int64_t delta;               /* ADD */
    uint32_t timeout_ms;         /* GET, WAIT */
    /* CHECK, WAIT */
    uint32_t nkeys;
    struct store_bytes keys;
};

/* A decoded response; value borrows the frame. */
struct store_response {
    enum store_status status;
    struct store_bytes value; /* GET, COMPARE_SET; message when status != OK */
    int64_t number;           /* ADD */
    uint8_t flag;             /* CHECK, DELETE */
};

/* Frame splitting over a byte stream. Returns 1 with *body and *body_len set (borrowing
 * `data`) and *frame_len = bytes the whole frame used, 0 when more bytes are needed,
 * -1 (ERR_TOO_LARGE) when the announced length exceeds STORE_MAX_FRAME. */
int store_proto_split_frame(const uint8_t *data, size_t len, const uint8_t **body,
                            uint32_t *body_len, size_t *frame_len, struct err *e);

/* Decodes one request body (no length prefix). Returns 0 or -1 with ERR_PROTOCOL naming
 * what is wrong (unknown op, truncated field, key too long, trailing bytes, ...). */
int store_proto_decode_request(const uint8_t *body, uint32_t body_len,
                               struct store_request *req, struct err *e);
/* Decodes one response body for request op `op`. */
int store_proto_decode_response(enum store_op op, const uint8_t *body, uint32_t body_len,
                                struct store_response *resp, struct err *e);
/* Walks CHECK/WAIT keys: *cursor starts at 0; returns false after the last key. */
bool store_proto_next_key(const struct store_request *req, uint32_t *cursor,
                          struct store_bytes *key);

/* Encoders append one whole frame (length prefix included) to out; -1 on ENOMEM or
 * when the frame would exceed STORE_MAX_FRAME, with out left as it was. */
int store_proto_encode_hello(struct buf *out, const char *run, const char *secret,
                             int64_t rank);
int store_proto_encode_set(struct buf *out, const char *key, const void *value, size_t len);
int store_proto_encode_get(struct buf *out, const char *key, uint32_t timeout_ms);
int store_proto_encode_add(struct buf *out, const char *key, int64_t delta);
int store_proto_encode_compare_set(struct buf *out, const char *key, const void *expected,
                                   size_t expected_len, const void *desired,
                                   size_t desired_len);
int store_proto_encode_keys(struct buf *out, enum store_op op, const char *const *keys,
                            uint32_t n,
                            uint32_t timeout_ms); /* CHECK (timeout ignored), WAIT */
int store_proto_encode_delete(struct buf *out, const char *key);
int store_proto_encode_ping(struct buf *out);

/* Responses (server side). */
int store_proto_encode_ok(struct buf *out);
int store_proto_encode_ok_value(struct buf *out, const void *value, size_t len);
int store_proto_encode_ok_number(struct buf *out, int64_t v);
int store_proto_encode_ok_flag(struct buf *out, uint8_t flag);
int store_proto_encode_error(struct buf *out, enum store_status status, const char *msg);

const char *store_proto_status_name(enum store_status s);

#endif
