/* buf: see buf.h. Growth doubles capacity; encoding is explicit little-endian so the
 * wire format does not depend on the host. */
#include "common/buf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void buf_init(struct buf *b)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

void buf_free(struct buf *b)
{
    free(b->data);
    buf_init(b);
}

void buf_reset(struct buf *b)
{
    b->len = 0;
}

int buf_reserve(struct buf *b, size_t extra)
{
    if (extra > SIZE_MAX - b->len)
        return -1;
    size_t need = b->len + extra;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    uint8_t *p = realloc(b->data, cap);
    if (!p)
        return -1;
    b->data = p;
    b->cap = cap;
    return 0;
}

int buf_append(struct buf *b, const void *p, size_t n)
{
    if (n == 0)
        return 0;
    if (buf_reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

int buf_append_str(struct buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

int buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, again);
    va_end(again);
    if (n < 0 || buf_reserve(b, (size_t)n + 1) < 0)
        return -1;
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return 0;
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

static int buf_put_le(struct buf *b, uint64_t v, int nbytes)
{
    uint8_t tmp[8];
    for (int i = 0; i < nbytes; i++)
        tmp[i] = (uint8_t)(v >> (8 * i));
    return buf_append(b, tmp, (size_t)nbytes);
}

int buf_put_u8(struct buf *b, uint8_t v)
{
    return buf_put_le(b, v, 1);
}
int buf_put_u16(struct buf *b, uint16_t v)
{
    return buf_put_le(b, v, 2);
}
int buf_put_u32(struct buf *b, uint32_t v)
{
    return buf_put_le(b, v, 4);
}
int buf_put_u64(struct buf *b, uint64_t v)
{
    return buf_put_le(b, v, 8);
}
int buf_put_i64(struct buf *b, int64_t v)
{
    return buf_put_le(b, (uint64_t)v, 8);
}

int buf_read_lines(int fd, struct buf *pending, size_t max_line, buf_line_fn fn, void *ctx)
{
    char chunk[16384];
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n <= 0)
            return 1;
        if (buf_append(pending, chunk, (size_t)n) < 0)
            return -1;
        size_t start = 0;
        for (size_t i = 0; i < pending->len; i++) {
            if (pending->data[i] != '\n')
                continue;
            fn(ctx, (const char *)pending->data + start, i - start);
            start = i + 1;
        }
        buf_consume(pending, start);
        if (pending->len > max_line) {
            fn(ctx, NULL, pending->len);
            buf_reset(pending);
        }
    }
}

void buf_consume(struct buf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

void buf_reader_init(struct buf_reader *r, const void *p, size_t len)
{
    r->p = p;
    r->len = len;
    r->off = 0;
}

size_t buf_reader_left(const struct buf_reader *r)
{
    return r->len - r->off;
}

static bool buf_get_le(struct buf_reader *r, int nbytes, uint64_t *v)
{
    if (buf_reader_left(r) < (size_t)nbytes)
        return false;
    uint64_t x = 0;
    for (int i = 0; i < nbytes; i++)
        x |= (uint64_t)r->p[r->off + (size_t)i] << (8 * i);
    r->off += (size_t)nbytes;
    *v = x;
    return true;
}

bool buf_get_u8(struct buf_reader *r, uint8_t *v)
{
    uint64_t x;
    if (!buf_get_le(r, 1, &x))
        return false;
    *v = (uint8_t)x;
    return true;
}

bool buf_get_u16(struct buf_reader *r, uint16_t *v)
{
    uint64_t x;
    if (!buf_get_le(r, 2, &x))
        return false;
    *v = (uint16_t)x;
    return true;
}

bool buf_get_u32(struct buf_reader *r, uint32_t *v)
{
    uint64_t x;
    if (!buf_get_le(r, 4, &x))
        return false;
    *v = (uint32_t)x;
    return true;
}

bool buf_get_u64(struct buf_reader *r, uint64_t *v)
{
    return buf_get_le(r, 8, v);
}

bool buf_get_i64(struct buf_reader *r, int64_t *v)
{
    uint64_t x;
    if (!buf_get_le(r, 8, &x))
        return false;
    *v = (int64_t)x;
    return true;
}

bool buf_get_bytes(struct buf_reader *r, size_t n, const uint8_t **p)
{
    if (buf_reader_left(r) < n)
        return false;
    *p = r->p + r->off;
    r->off += n;
    return true;
}

void buf_store_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

uint32_t buf_load_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
