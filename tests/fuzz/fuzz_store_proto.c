/* libFuzzer target for common/store_proto: arbitrary bytes are split into frames as the
 * server's input buffer would be, and every body is decoded as a request and as the
 * response to every op. What must hold beyond "no crash" (ASan watches the reads):
 * a decoded request's borrowed fields lie inside its body, its CHECK/WAIT keys walk to
 * exactly nkeys valid keys, and a frame is never reported larger than its input.
 *
 * Build (not wired into meson yet):
 *   clang -g -fsanitize=fuzzer,address -D_GNU_SOURCE -Icommon tests/fuzz/fuzz_store_proto.c \
 *     common/store_proto.c common/buf.c common/err.c -o /tmp/fz
 *   /tmp/fz tests/fuzz/corpus/store_proto */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/store_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_check_inside(struct store_bytes b, const uint8_t *body, uint32_t len)
{
    if (b.len == 0)
        return;
    if (b.p < body || b.p + b.len > body + len)
        abort();
}

static void fuzz_walk_keys(const struct store_request *req, const uint8_t *body, uint32_t len)
{
    uint32_t cursor = 0, n = 0;
    struct store_bytes key;
    while (store_proto_next_key(req, &cursor, &key)) {
        if (key.len == 0 || key.len > STORE_MAX_KEY)
            abort();
        fuzz_check_inside(key, body, len);
        n++;
    }
    if (n != req->nkeys || cursor != req->keys.len)
        abort();
}

static void fuzz_request(const uint8_t *body, uint32_t len)
{
    struct store_request req;
    struct err e;
    if (store_proto_decode_request(body, len, &req, &e) < 0)
        return;
    fuzz_check_inside(req.run, body, len);
    fuzz_check_inside(req.secret, body, len);
    fuzz_check_inside(req.key, body, len);
    fuzz_check_inside(req.value, body, len);
    fuzz_check_inside(req.expected, body, len);
    fuzz_check_inside(req.keys, body, len);
    if (req.key.len > STORE_MAX_KEY || req.value.len > STORE_MAX_VALUE ||
        req.run.len > STORE_MAX_RUN || req.secret.len > STORE_MAX_SECRET)
        abort();
    if (req.op == STORE_OP_CHECK || req.op == STORE_OP_WAIT)
        fuzz_walk_keys(&req, body, len);
}

static void fuzz_responses(const uint8_t *body, uint32_t len)
{
    struct store_response resp;
    struct err e;
    /* 0 and 10 are not ops: the decoder must refuse them, not misread. */
    for (int op = 0; op <= STORE_OP_PING + 1; op++)
        if (store_proto_decode_response((enum store_op)op, body, len, &resp, &e) == 0)
            fuzz_check_inside(resp.value, body, len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;
    for (;;) {
        const uint8_t *body;
        uint32_t len;
        size_t frame_len;
        struct err e;
        int rc = store_proto_split_frame(data + off, size - off, &body, &len, &frame_len, &e);
        if (rc <= 0)
            break;
        if (frame_len > size - off || frame_len != (size_t)len + 4)
            abort();
        fuzz_request(body, len);
        fuzz_responses(body, len);
        off += frame_len;
    }
    /* The whole input as one body too, so the decoders see bytes with no valid prefix. */
    if (size <= UINT32_MAX) {
        fuzz_request(data, (uint32_t)size);
        fuzz_responses(data, (uint32_t)size);
    }
    return 0;
}
