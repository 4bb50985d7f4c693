/* Unit tests for common/store_proto: every request and response survives an
 * encode/decode round trip; every truncation of every frame, trailing bytes, unknown ops
 * and statuses, and every over-cap length are rejected with ERR_PROTOCOL (never read out
 * of bounds: ASan watches); frame splitting waits for partial input and refuses a huge
 * announced length. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/store_proto.h"
#include "tests/unit/test.h"

/* Splits the single frame in b; returns its body. */
static int frame_body(const struct buf *b, const uint8_t **body, uint32_t *len)
{
    size_t flen;
    struct err e;
    if (store_proto_split_frame(b->data, b->len, body, len, &flen, &e) != 1)
        return -1;
    return flen == b->len ? 0 : -1;
}

static int decode_req(const struct buf *b, struct store_request *req, struct err *e)
{
    const uint8_t *body;
    uint32_t len;
    if (frame_body(b, &body, &len) < 0)
        return err_set(e, ERR_INTERNAL, NULL, "frame does not split");
    return store_proto_decode_request(body, len, req, e);
}

static bool bytes_eq(struct store_bytes b, const char *s)
{
    return b.len == strlen(s) && memcmp(b.p, s, b.len) == 0;
}

#define N_REQ 10

/* One valid frame of every request op (WAIT and CHECK with several keys). */
static void build_requests(struct buf *b)
{
    static const char *const keys[] = {"a", "rank/1/addr", "zz"};
    for (int i = 0; i < N_REQ; i++)
        buf_init(&b[i]);
    store_proto_encode_hello(&b[0], "run-1", "s3cret", 7);
    store_proto_encode_set(&b[1], "key", "value", 5);
    store_proto_encode_get(&b[2], "key", 1500);
    store_proto_encode_add(&b[3], "ctr", -42);
    store_proto_encode_compare_set(&b[4], "key", "old", 3, "new!", 4);
    store_proto_encode_keys(&b[5], STORE_OP_CHECK, keys, 3, 0);
    store_proto_encode_keys(&b[6], STORE_OP_WAIT, keys, 3, 250);
    store_proto_encode_delete(&b[7], "key");
    store_proto_encode_ping(&b[8]);
    store_proto_encode_set(&b[9], "empty", "", 0);
}

static void free_bufs(struct buf *b, int n)
{
    for (int i = 0; i < n; i++)
        buf_free(&b[i]);
}

static void test_store_proto_request_roundtrip(void)
{
    struct buf b[N_REQ];
    struct store_request r;
    struct err e;
    build_requests(b);
    T_OK(decode_req(&b[0], &r, &e));
    T_CHECK(r.op == STORE_OP_HELLO && r.magic == STORE_MAGIC && r.version == STORE_VERSION);
    T_CHECK(bytes_eq(r.run, "run-1") && bytes_eq(r.secret, "s3cret") && r.rank == 7);
    T_OK(decode_req(&b[1], &r, &e));
    T_CHECK(r.op == STORE_OP_SET && bytes_eq(r.key, "key") && bytes_eq(r.value, "value"));
    T_OK(decode_req(&b[2], &r, &e));
    T_CHECK(r.op == STORE_OP_GET && bytes_eq(r.key, "key") && r.timeout_ms == 1500);
    T_OK(decode_req(&b[3], &r, &e));
    T_CHECK(r.op == STORE_OP_ADD && bytes_eq(r.key, "ctr") && r.delta == -42);
    T_OK(decode_req(&b[4], &r, &e));
    T_CHECK(r.op == STORE_OP_COMPARE_SET && bytes_eq(r.key, "key"));
    T_CHECK(bytes_eq(r.expected, "old") && bytes_eq(r.value, "new!"));
    T_OK(decode_req(&b[5], &r, &e));
    T_CHECK(r.op == STORE_OP_CHECK && r.nkeys == 3);
    T_OK(decode_req(&b[6], &r, &e));
    T_CHECK(r.op == STORE_OP_WAIT && r.nkeys == 3 && r.timeout_ms == 250);
    uint32_t cur = 0;
    struct store_bytes k;
    T_CHECK(store_proto_next_key(&r, &cur, &k) && bytes_eq(k, "a"));
    T_CHECK(store_proto_next_key(&r, &cur, &k) && bytes_eq(k, "rank/1/addr"));
    T_CHECK(store_proto_next_key(&r, &cur, &k) && bytes_eq(k, "zz"));
    T_CHECK(!store_proto_next_key(&r, &cur, &k));
    T_OK(decode_req(&b[7], &r, &e));
    T_CHECK(r.op == STORE_OP_DELETE && bytes_eq(r.key, "key"));
    T_OK(decode_req(&b[8], &r, &e));
    T_CHECK(r.op == STORE_OP_PING);
    T_OK(decode_req(&b[9], &r, &e));
    T_CHECK(r.op == STORE_OP_SET && r.value.len == 0);
    free_bufs(b, N_REQ);
}

/* Runs check on every frame of build_requests; returns the index of the first one it
 * fails, -1 when none. */
static int each_request(int (*check)(const struct buf *frame, const uint8_t *body,
                                     uint32_t len))
{
    struct buf b[N_REQ];
    build_requests(b);
    int bad = -1;
    for (int i = 0; i < N_REQ && bad < 0; i++) {
        const uint8_t *body;
        uint32_t len;
        if (frame_body(&b[i], &body, &len) < 0 || check(&b[i], body, len) < 0)
            bad = i;
    }
    free_bufs(b, N_REQ);
    return bad;
}

static int check_truncations(const struct buf *frame, const uint8_t *body, uint32_t len)
{
    struct store_request r;
    struct err e;
    /* Each prefix of the body in its own heap block, so ASan sees any overread. */
    for (uint32_t n = 0; n < len; n++) {
        uint8_t *copy = malloc(n ? n : 1);
        memcpy(copy, body, n);
        e.code = ERR_OK;
        int rc = store_proto_decode_request(copy, n, &r, &e);
        free(copy);
        if (rc == 0 || e.code != ERR_PROTOCOL)
            return -1;
    }
    /* Each prefix of the frame is "need more bytes". */
    for (size_t n = 0; n < frame->len; n++) {
        size_t flen;
        if (store_proto_split_frame(frame->data, n, &body, &len, &flen, &e) != 0)
            return -1;
    }
    return 0;
}

static int check_trailing_byte(const struct buf *frame, const uint8_t *body, uint32_t len)
{
    struct store_request r;
    struct err e;
    uint8_t *copy = malloc(len + 1);
    memcpy(copy, body, len);
    copy[len] = 0;
    int rc = store_proto_decode_request(copy, len + 1, &r, &e);
    free(copy);
    return rc == 0 || e.code != ERR_PROTOCOL || !strstr(e.msg, "trailing") ? -1 : 0;
}

static void test_store_proto_request_truncations(void)
{
    T_EQ_INT(each_request(check_truncations), -1);
}

static void test_store_proto_request_trailing_bytes(void)
{
    T_EQ_INT(each_request(check_trailing_byte), -1);
}

static void test_store_proto_unknown_op(void)
{
    struct store_request r;
    struct err e;
    const uint8_t ops[] = {0, 10, 77, 255};
    for (size_t i = 0; i < sizeof ops; i++) {
        T_CHECK(store_proto_decode_request(&ops[i], 1, &r, &e) < 0);
        T_EQ_INT(e.code, ERR_PROTOCOL);
        T_CHECK(strstr(e.msg, "unknown op") != NULL);
    }
    T_CHECK(store_proto_decode_request(ops, 0, &r, &e) < 0);
    T_EQ_INT(e.code, ERR_PROTOCOL);
}

/* Decodes the frame in b (then empties b); true when it is rejected with a message
 * mentioning `what`. */
static bool rejects_with(struct buf *b, const char *what)
{
    struct store_request r;
    struct err e = {0};
    int rc = decode_req(b, &r, &e);
    buf_reset(b);
    if (rc == 0 || e.code != ERR_PROTOCOL || !strstr(e.msg, what)) {
        fprintf(stderr, "  expected rejection for '%s', got rc=%d: %s\n", what, rc, e.msg);
        return false;
    }
    return true;
}

static char *repeat_char(char c, size_t n)
{
    char *s = malloc(n + 1);
    memset(s, c, n);
    s[n] = '\0';
    return s;
}

static void test_store_proto_oversized_fields(void)
{
    struct buf b;
    struct store_request r;
    struct err e;
    buf_init(&b);
    char *key_max = repeat_char('k', STORE_MAX_KEY);
    char *key_big = repeat_char('k', STORE_MAX_KEY + 1);
    char *run_big = repeat_char('r', STORE_MAX_RUN + 1);
    char *secret_big = repeat_char('s', STORE_MAX_SECRET + 1);
    size_t vbig = STORE_MAX_VALUE + 1;
    char *value_big = repeat_char('v', vbig);
    int fails = 0;
    /* The limits themselves are accepted. */
    store_proto_encode_set(&b, key_max, value_big, STORE_MAX_VALUE);
    fails += decode_req(&b, &r, &e) != 0;
    buf_reset(&b);
    store_proto_encode_set(&b, key_big, "v", 1);
    fails += !rejects_with(&b, "key too long");
    store_proto_encode_get(&b, "", 10);
    fails += !rejects_with(&b, "key is empty");
    store_proto_encode_set(&b, "k", value_big, vbig);
    fails += !rejects_with(&b, "value too long");
    store_proto_encode_compare_set(&b, "k", value_big, vbig, "x", 1);
    fails += !rejects_with(&b, "expected too long");
    store_proto_encode_compare_set(&b, "k", "x", 1, value_big, vbig);
    fails += !rejects_with(&b, "desired too long");
    store_proto_encode_hello(&b, run_big, "s", 0);
    fails += !rejects_with(&b, "run too long");
    store_proto_encode_hello(&b, "", "s", 0);
    fails += !rejects_with(&b, "run is empty");
    store_proto_encode_hello(&b, "run", secret_big, 0);
    fails += !rejects_with(&b, "secret too long");
    free(key_max);
    free(key_big);
    free(run_big);
    free(secret_big);
    free(value_big);
    buf_free(&b);
    T_EQ_INT(fails, 0);
}

static void test_store_proto_key_lists(void)
{
    struct buf b;
    struct store_request r;
    struct err e;
    buf_init(&b);
    static const char *const with_empty[] = {"a", "", "c"};
    int fails = 0;
    store_proto_encode_keys(&b, STORE_OP_CHECK, with_empty, 0, 0);
    fails += !rejects_with(&b, "key count 0");
    store_proto_encode_keys(&b, STORE_OP_WAIT, with_empty, 3, 5);
    fails += !rejects_with(&b, "key 2 of 3");
    const char **many = malloc((STORE_MAX_WAIT_KEYS + 1) * sizeof *many);
    for (uint32_t i = 0; i <= STORE_MAX_WAIT_KEYS; i++)
        many[i] = "x";
    store_proto_encode_keys(&b, STORE_OP_WAIT, many, STORE_MAX_WAIT_KEYS, 5);
    fails += decode_req(&b, &r, &e) != 0 || r.nkeys != STORE_MAX_WAIT_KEYS;
    uint32_t cur = 0, seen = 0;
    struct store_bytes k;
    while (store_proto_next_key(&r, &cur, &k))
        seen += bytes_eq(k, "x");
    fails += seen != STORE_MAX_WAIT_KEYS;
    buf_reset(&b);
    store_proto_encode_keys(&b, STORE_OP_WAIT, many, STORE_MAX_WAIT_KEYS + 1, 5);
    fails += !rejects_with(&b, "out of range");
    free(many);
    buf_free(&b);
    T_EQ_INT(fails, 0);
}

static void test_store_proto_split_frame(void)
{
    struct buf b;
    struct err e;
    const uint8_t *body;
    uint32_t len;
    size_t flen;
    buf_init(&b);
    store_proto_encode_ping(&b);
    store_proto_encode_get(&b, "kk", 3);
    size_t first = 5;
    /* Partial length prefix and partial body: need more. */
    for (size_t n = 0; n < first; n++)
        T_EQ_INT(store_proto_split_frame(b.data, n, &body, &len, &flen, &e), 0);
    T_EQ_INT(store_proto_split_frame(b.data, b.len, &body, &len, &flen, &e), 1);
    T_EQ_INT(flen, first);
    T_EQ_INT(len, 1);
    T_EQ_INT(body[0], STORE_OP_PING);
    T_EQ_INT(store_proto_split_frame(b.data + flen, b.len - flen, &body, &len, &flen, &e), 1);
    T_EQ_INT(body[0], STORE_OP_GET);
    T_EQ_INT(flen, b.len - first);
    /* The cap itself waits for more; one past it is refused before any body arrives. */
    uint8_t hdr[4];
    buf_store_u32(hdr, STORE_MAX_FRAME);
    T_EQ_INT(store_proto_split_frame(hdr, 4, &body, &len, &flen, &e), 0);
    buf_store_u32(hdr, STORE_MAX_FRAME + 1);
    T_EQ_INT(store_proto_split_frame(hdr, 4, &body, &len, &flen, &e), -1);
    T_EQ_INT(e.code, ERR_TOO_LARGE);
    buf_store_u32(hdr, UINT32_MAX);
    T_EQ_INT(store_proto_split_frame(hdr, 4, &body, &len, &flen, &e), -1);
    buf_free(&b);
}

#define N_RESP 9

struct resp_case {
    enum store_op op;
    struct buf b;
};

static void build_responses(struct resp_case *rc)
{
    for (int i = 0; i < N_RESP; i++)
        buf_init(&rc[i].b);
    rc[0].op = STORE_OP_HELLO, store_proto_encode_ok(&rc[0].b);
    rc[1].op = STORE_OP_GET, store_proto_encode_ok_value(&rc[1].b, "hello", 5);
    rc[2].op = STORE_OP_COMPARE_SET, store_proto_encode_ok_value(&rc[2].b, "", 0);
    rc[3].op = STORE_OP_ADD, store_proto_encode_ok_number(&rc[3].b, INT64_MIN);
    rc[4].op = STORE_OP_CHECK, store_proto_encode_ok_flag(&rc[4].b, 1);
    rc[5].op = STORE_OP_DELETE, store_proto_encode_ok_flag(&rc[5].b, 0);
    rc[6].op = STORE_OP_WAIT, store_proto_encode_error(&rc[6].b, STORE_E_TIMEOUT, "slow");
    rc[7].op = STORE_OP_ADD, store_proto_encode_error(&rc[7].b, STORE_E_CONFLICT, "nan");
    rc[8].op = STORE_OP_PING, store_proto_encode_ok(&rc[8].b);
}

static int decode_resp(struct resp_case *c, struct store_response *r, struct err *e)
{
    const uint8_t *body;
    uint32_t len;
    if (frame_body(&c->b, &body, &len) < 0)
        return -1;
    return store_proto_decode_response(c->op, body, len, r, e);
}

static void test_store_proto_response_roundtrip(void)
{
    struct resp_case c[N_RESP];
    struct store_response r;
    struct err e;
    build_responses(c);
    int fails = 0;
    fails += decode_resp(&c[0], &r, &e) != 0 || r.status != STORE_OK;
    fails += decode_resp(&c[1], &r, &e) != 0 || !bytes_eq(r.value, "hello");
    fails += decode_resp(&c[2], &r, &e) != 0 || r.value.len != 0;
    fails += decode_resp(&c[3], &r, &e) != 0 || r.number != INT64_MIN;
    fails += decode_resp(&c[4], &r, &e) != 0 || r.flag != 1;
    fails += decode_resp(&c[5], &r, &e) != 0 || r.flag != 0;
    fails += decode_resp(&c[6], &r, &e) != 0 || r.status != STORE_E_TIMEOUT ||
             !bytes_eq(r.value, "slow");
    fails += decode_resp(&c[7], &r, &e) != 0 || r.status != STORE_E_CONFLICT;
    fails += decode_resp(&c[8], &r, &e) != 0 || r.status != STORE_OK;
    for (int i = 0; i < N_RESP; i++)
        buf_free(&c[i].b);
    T_EQ_INT(fails, 0);
}

static void test_store_proto_response_rejects(void)
{
    struct resp_case c[N_RESP];
    struct store_response r;
    struct err e;
    build_responses(c);
    int bad = -1;
    for (int i = 0; i < N_RESP && bad < 0; i++) {
        const uint8_t *body;
        uint32_t len;
        frame_body(&c[i].b, &body, &len);
        uint8_t *copy = malloc((size_t)len + 1);
        memcpy(copy, body, len);
        copy[len] = 0;
        for (uint32_t n = 0; n < len && bad < 0; n++)
            if (store_proto_decode_response(c[i].op, copy, n, &r, &e) == 0)
                bad = i;
        if (store_proto_decode_response(c[i].op, copy, len + 1, &r, &e) == 0)
            bad = 100 + i;
        free(copy);
    }
    for (int i = 0; i < N_RESP; i++)
        buf_free(&c[i].b);
    T_EQ_INT(bad, -1);
    const uint8_t unknown_status[] = {42, 0, 0, 0, 0};
    T_CHECK(store_proto_decode_response(STORE_OP_GET, unknown_status, 5, &r, &e) < 0);
    T_CHECK(strstr(e.msg, "unknown status") != NULL);
    const uint8_t flag_two[] = {STORE_OK, 2};
    T_CHECK(store_proto_decode_response(STORE_OP_CHECK, flag_two, 2, &r, &e) < 0);
    const uint8_t ok[] = {STORE_OK};
    T_CHECK(store_proto_decode_response((enum store_op)99, ok, 1, &r, &e) < 0);
    T_EQ_INT(e.code, ERR_PROTOCOL);
}

static void test_store_proto_status_names(void)
{
    T_EQ_STR(store_proto_status_name(STORE_OK), "ok");
    T_EQ_STR(store_proto_status_name(STORE_E_TIMEOUT), "timeout");
    T_EQ_STR(store_proto_status_name(STORE_E_AUTH), "auth");
    T_EQ_STR(store_proto_status_name(STORE_E_CLOSED), "closed");
    T_EQ_STR(store_proto_status_name(STORE_E_CONFLICT), "conflict");
    T_EQ_STR(store_proto_status_name((enum store_status)200), "unknown");
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_store_proto_request_roundtrip);
    TEST_RUN(test_store_proto_request_truncations);
    TEST_RUN(test_store_proto_request_trailing_bytes);
    TEST_RUN(test_store_proto_unknown_op);
    TEST_RUN(test_store_proto_oversized_fields);
    TEST_RUN(test_store_proto_key_lists);
    TEST_RUN(test_store_proto_split_frame);
    TEST_RUN(test_store_proto_response_roundtrip);
    TEST_RUN(test_store_proto_response_rejects);
    TEST_RUN(test_store_proto_status_names);
    return test_end();
}
