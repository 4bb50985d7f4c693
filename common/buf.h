/* buf: a growable byte buffer and a bounds-checked little-endian reader over bytes.
 *
 * Decision: writers append to a struct buf that owns its heap memory (buf_free releases
 * it); readers never allocate: struct buf_reader borrows the bytes it walks and every
 * read reports "not enough bytes" instead of reading past the end, which is what the
 * wire decoders (store protocol, peer handshakes) and their fuzzers rely on. */
#ifndef DDPB_BUF_H
#define DDPB_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct buf {
    uint8_t *data; /* owned */
    size_t len;
    size_t cap;
};

void buf_init(struct buf *b);
void buf_free(struct buf *b);
void buf_reset(struct buf *b); /* len = 0, memory kept */
/* Ensures room for `extra` more bytes; returns -1 on allocation failure. */
int buf_reserve(struct buf *b, size_t extra);
int buf_append(struct buf *b, const void *p, size_t n);
int buf_append_str(struct buf *b, const char *s);
/* Appends printf-formatted text; the byte after it is a NUL that len does not count, so
 * data reads as a C string while only text is appended. -1 on allocation failure. */
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int buf_vprintf(struct buf *b, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
int buf_put_u8(struct buf *b, uint8_t v);
int buf_put_u16(struct buf *b, uint16_t v);
int buf_put_u32(struct buf *b, uint32_t v);
int buf_put_u64(struct buf *b, uint64_t v);
int buf_put_i64(struct buf *b, int64_t v);
/* Drops the first n bytes (a consumed frame) by moving the rest down. */
void buf_consume(struct buf *b, size_t n);

/* A whole line (without its '\n'), or line NULL for a partial line that grew past the
 * limit (dropped; len is its length so far). */
typedef void (*buf_line_fn)(void *ctx, const char *line, size_t len);
/* The lines of a non-blocking fd (a worker's report pipe): reads until it would block or
 * ends, calls fn for each whole line in order, keeps a partial one in *pending. Returns 0
 * when the fd would block, 1 at end of file or on a read error (the caller closes it;
 * *pending holds any unterminated tail), -1 when memory ran out. */
int buf_read_lines(int fd, struct buf *pending, size_t max_line, buf_line_fn fn, void *ctx);

struct buf_reader {
    const uint8_t *p; /* borrowed */
    size_t len;
    size_t off;
};

void buf_reader_init(struct buf_reader *r, const void *p, size_t len);
size_t buf_reader_left(const struct buf_reader *r);
/* Each returns false (and leaves *v untouched) when too few bytes remain. */
bool buf_get_u8(struct buf_reader *r, uint8_t *v);
bool buf_get_u16(struct buf_reader *r, uint16_t *v);
bool buf_get_u32(struct buf_reader *r, uint32_t *v);
bool buf_get_u64(struct buf_reader *r, uint64_t *v);
bool buf_get_i64(struct buf_reader *r, int64_t *v);
/* Borrows n bytes: *p points into the reader's memory. */
bool buf_get_bytes(struct buf_reader *r, size_t n, const uint8_t **p);

/* Little-endian load/store on raw memory (no alignment needed). */
void buf_store_u32(uint8_t *p, uint32_t v);
uint32_t buf_load_u32(const uint8_t *p);

#endif
