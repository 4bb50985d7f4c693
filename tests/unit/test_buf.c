/* Unit tests for common/buf and common/err and common/clock: little-endian round trips,
 * bounds-checked reads, consume, error formatting. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/err.h"
#include "tests/unit/test.h"

static void test_buf_roundtrip(void)
{
    struct buf b;
    buf_init(&b);
    T_CHECK(buf_put_u8(&b, 0xab) == 0);
    T_CHECK(buf_put_u16(&b, 0x1234) == 0);
    T_CHECK(buf_put_u32(&b, 0xdeadbeef) == 0);
    T_CHECK(buf_put_u64(&b, 0x0102030405060708ull) == 0);
    T_CHECK(buf_put_i64(&b, -5) == 0);
    T_CHECK(buf_append_str(&b, "xyz") == 0);
    T_EQ_INT(b.len, 1 + 2 + 4 + 8 + 8 + 3);
    /* little-endian on the wire whatever the host */
    T_EQ_INT(b.data[1], 0x34);
    T_EQ_INT(b.data[2], 0x12);
    struct buf_reader r;
    buf_reader_init(&r, b.data, b.len);
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    const uint8_t *p;
    T_CHECK(buf_get_u8(&r, &u8) && u8 == 0xab);
    T_CHECK(buf_get_u16(&r, &u16) && u16 == 0x1234);
    T_CHECK(buf_get_u32(&r, &u32) && u32 == 0xdeadbeef);
    T_CHECK(buf_get_u64(&r, &u64) && u64 == 0x0102030405060708ull);
    T_CHECK(buf_get_i64(&r, &i64) && i64 == -5);
    T_CHECK(buf_get_bytes(&r, 3, &p) && memcmp(p, "xyz", 3) == 0);
    T_EQ_INT(buf_reader_left(&r), 0);
    buf_free(&b);
}

static void test_buf_reader_never_overreads(void)
{
    uint8_t bytes[3] = {1, 2, 3};
    struct buf_reader r;
    buf_reader_init(&r, bytes, sizeof bytes);
    uint32_t u32 = 77;
    T_CHECK(!buf_get_u32(&r, &u32));
    T_EQ_INT(u32, 77); /* untouched */
    T_EQ_INT(r.off, 0);
    const uint8_t *p;
    T_CHECK(!buf_get_bytes(&r, 4, &p));
    uint16_t u16;
    T_CHECK(buf_get_u16(&r, &u16) && u16 == 0x0201);
    T_CHECK(!buf_get_u16(&r, &u16));
}

static void test_buf_consume_and_growth(void)
{
    struct buf b;
    buf_init(&b);
    for (int i = 0; i < 10000; i++)
        T_CHECK(buf_put_u8(&b, (uint8_t)i) == 0);
    T_CHECK(b.cap >= 10000);
    buf_consume(&b, 9998);
    T_EQ_INT(b.len, 2);
    T_EQ_INT(b.data[0], (uint8_t)9998);
    buf_consume(&b, 100);
    T_EQ_INT(b.len, 0);
    buf_free(&b);
    T_CHECK(b.data == NULL);
}

/* buf_read_lines' callback for the test: lines joined by '|', an over-long one as '#'. */
struct lines_seen {
    char text[256];
    int n;
};

static void lines_note(void *ctx, const char *line, size_t len)
{
    struct lines_seen *s = ctx;
    size_t at = strlen(s->text);
    snprintf(s->text + at, sizeof s->text - at, "%s%.*s", s->n++ ? "|" : "",
             line ? (int)len : 1, line ? line : "#");
}

/* buf_printf appends formatted text, always followed by a NUL len does not count, and
 * grows past any first capacity (a text longer than a page of the report). */
static void test_buf_printf(void)
{
    struct buf b;
    buf_init(&b);
    T_CHECK(buf_printf(&b, "%s", "") == 0 && b.len == 0 && b.data && b.data[0] == 0);
    T_CHECK(buf_printf(&b, "<p>%d %s</p>", 42, "ranks") == 0);
    T_EQ_STR((const char *)b.data, "<p>42 ranks</p>");
    T_EQ_INT(b.len, strlen("<p>42 ranks</p>"));
    for (int i = 0; i < 2000; i++)
        T_CHECK(buf_printf(&b, "%04d", i) == 0);
    T_EQ_INT(b.len, strlen("<p>42 ranks</p>") + 8000);
    T_CHECK(b.data[b.len] == 0 && memcmp(b.data + b.len - 4, "1999", 4) == 0);
    buf_append(&b, "x", 1); /* raw appends keep working after it */
    T_EQ_INT(b.data[b.len - 1], 'x');
    buf_free(&b);
}

static void test_buf_read_lines(void)
{
    int p[2];
    T_CHECK(pipe2(p, O_NONBLOCK) == 0);
    struct buf pend;
    buf_init(&pend);
    struct lines_seen seen = {"", 0};
    T_CHECK(write(p[1], "a\nbb\n\npart", 10) == 10);
    T_EQ_INT(buf_read_lines(p[0], &pend, 16, lines_note, &seen), 0); /* would block */
    T_EQ_STR(seen.text, "a|bb|");
    T_EQ_INT((int)pend.len, 4); /* "part" waits for its end */
    T_CHECK(write(p[1], "ial\n0123456789abcdefXYZ", 23) == 23);
    T_EQ_INT(buf_read_lines(p[0], &pend, 16, lines_note, &seen), 0);
    T_EQ_STR(seen.text, "a|bb||partial|#"); /* 19 bytes without a newline: dropped */
    T_EQ_INT((int)pend.len, 0);
    T_CHECK(write(p[1], "tail", 4) == 4);
    close(p[1]);
    T_EQ_INT(buf_read_lines(p[0], &pend, 16, lines_note, &seen), 1); /* end of file */
    T_EQ_INT((int)pend.len, 4); /* the unterminated tail stays for the caller to judge */
    close(p[0]);
    buf_free(&pend);
}

static void test_err_format(void)
{
    struct err e;
    err_clear(&e);
    T_EQ_INT(err_set(&e, ERR_INVALID, "world_size", "must be %d..%d", 1, 1024), -1);
    T_EQ_INT(e.code, ERR_INVALID);
    T_EQ_STR(e.field, "world_size");
    T_EQ_STR(e.msg, "must be 1..1024");
    err_prefix(&e, "run %d", 7);
    T_EQ_STR(e.msg, "run 7: must be 1..1024");
    T_EQ_STR(err_code_name(ERR_NOT_FOUND), "not_found");
    errno = ENOENT;
    err_errno(&e, "open %s", "x");
    T_EQ_INT(e.code, ERR_IO);
    T_EQ_STR(e.msg, "open x: No such file or directory");
    T_EQ_INT(err_set(NULL, ERR_IO, NULL, "ignored"), -1);
}

/* What clock_format_iso should write for second u and ms milliseconds, by libc. */
static void iso_by_gmtime(int64_t u, int ms, char *out, size_t cap)
{
    time_t tt = (time_t)u;
    struct tm tm;
    char date[32];
    gmtime_r(&tt, &tm);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, cap, "%s.%03dZ", date, ms);
}

/* The formatter against libc over 1900-2150, a day and 7 s apart (every month, leap day
 * and time of day is met), and at every second of the last minute of 2016. */
static void test_clock_iso_matches_gmtime(void)
{
    char want[48], got[40];
    for (int64_t u = -2208988800LL; u < 5680281600LL; u += 86407) {
        iso_by_gmtime(u, 250, want, sizeof want);
        clock_format_iso((double)u + 0.25, got, sizeof got);
        T_EQ_STR(got, want);
    }
    for (int64_t u = 1483228740LL; u < 1483228800LL; u++) {
        iso_by_gmtime(u, 0, want, sizeof want);
        clock_format_iso((double)u, got, sizeof got);
        T_EQ_STR(got, want);
    }
}

static void test_clock_iso(void)
{
    char s[40];
    clock_format_iso(0.5, s, sizeof s);
    T_EQ_STR(s, "1970-01-01T00:00:00.500Z");
    clock_format_iso(1795000000.25, s, sizeof s);
    T_EQ_STR(s, "2026-11-18T11:06:40.250Z");
    clock_format_iso(951782400.0, s, sizeof s); /* a leap day of a year divisible by 400 */
    T_EQ_STR(s, "2000-02-29T00:00:00.000Z");
    clock_format_iso(-0.5, s, sizeof s);
    T_EQ_STR(s, "1969-12-31T23:59:59.500Z");
    clock_format_iso(1e300, s, sizeof s);
    T_EQ_STR(s, "9999-12-31T23:59:59.999Z");
    clock_format_iso(1795000000.25, s, 11);
    T_EQ_STR(s, "2026-11-18");
    T_EQ_INT(clock_ms_left(-1), -1);
    T_EQ_INT(clock_ms_left(clock_mono_ms() - 5), 0);
    T_CHECK(clock_ms_left(clock_mono_ms() + 10000) > 9000);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_buf_roundtrip);
    TEST_RUN(test_buf_reader_never_overreads);
    TEST_RUN(test_buf_consume_and_growth);
    TEST_RUN(test_buf_printf);
    TEST_RUN(test_buf_read_lines);
    TEST_RUN(test_err_format);
    TEST_RUN(test_clock_iso_matches_gmtime);
    TEST_RUN(test_clock_iso);
    return test_end();
}
