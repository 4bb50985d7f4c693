/* Unit tests for worker/data/storage: the named profiles' figures and the unknown name,
 * the profile checks naming their field, exact bytes from pread at offsets and from
 * read_file, the errors (truncated, missing, too large, not a regular file, bad fd, bad
 * offset), plain reads without a storage, exact stats, the server's side (openat,
 * pread_upto: ddpbench-fs); and the caps, by timing: one bandwidth cap shared by every
 * thread (the measured rate is within [80 %, 102 %] of it from 1 and from 4 threads), an
 * idle bucket banking at most 5 ms, the latency paid per request and overlapped only as
 * far as the concurrency allows, and a concurrency cap holding requests back; cold reads
 * give the same bytes and, where the file system drops pages at all, leave none cached.
 *
 * Timing assertions are bounds a slow machine cannot break: a cap gives a hard lower bound
 * on the time (sleeps end no earlier than asked), and the upper bounds leave several
 * milliseconds of scheduling slack per request. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "tests/unit/test.h"
#include "worker/data/storage.h"

#define BIG_CHUNK (256u * 1024u)
#define BIG_CHUNKS 96 /* 24 MiB: 0.25 s at 100 MB/s */
#define SMALL_LEN 100000u

static char big_path[128];   /* BIG_CHUNKS * BIG_CHUNK bytes of the pattern */
static char small_path[128]; /* SMALL_LEN bytes of the pattern */

static uint8_t pattern_at(size_t i)
{
    return (uint8_t)(i * 131u + (i >> 9) * 7u + 1u);
}

static bool pattern_matches(const uint8_t *buf, size_t n, size_t off)
{
    for (size_t i = 0; i < n; i++)
        if (buf[i] != pattern_at(off + i))
            return false;
    return true;
}

/* Writes n bytes of the pattern as name in the scratch folder, whose path it puts in path
 * (cap bytes), and syncs them (clean pages can be dropped). */
static int write_pattern(char *path, size_t cap, const char *name, size_t n)
{
    test_tmp_path(path, cap, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    uint8_t block[65536];
    int rc = 0;
    for (size_t done = 0; rc == 0 && done < n;) {
        size_t k = n - done < sizeof block ? n - done : sizeof block;
        for (size_t i = 0; i < k; i++)
            block[i] = pattern_at(done + i);
        rc = write(fd, block, k) == (ssize_t)k ? 0 : -1;
        done += k;
    }
    if (rc == 0)
        rc = fdatasync(fd);
    close(fd);
    return rc;
}

static struct data_storage *storage_of(double mbps, double latency_ms, int concurrency,
                                       bool cold)
{
    struct data_storage_profile p = {.name = "test",
                                     .read_mbps = mbps,
                                     .latency_ms = latency_ms,
                                     .concurrency = concurrency,
                                     .cold = cold};
    struct data_storage *st = NULL;
    struct err e;
    if (data_storage_create(&p, &st, &e) < 0)
        fprintf(stderr, "  data_storage_create: %s\n", e.msg);
    return st;
}

/* --- readers on threads ---------------------------------------------------------------- */

struct reader {
    struct data_storage *st;
    int fd;
    const char *path;
    int first, step, count; /* requests first, first + step, ... (count of them) */
    size_t chunk;           /* request i reads chunk bytes at i * chunk */
    int rc;
    struct err e;
};

static void *reader_main(void *arg)
{
    struct reader *r = arg;
    uint8_t *buf = malloc(r->chunk);
    r->rc = buf ? 0 : -1;
    for (int k = 0; r->rc == 0 && k < r->count; k++) {
        size_t off = (size_t)(r->first + k * r->step) * r->chunk;
        r->rc = data_storage_pread(r->st, r->fd, buf, r->chunk, (off_t)off, r->path, &r->e);
        if (r->rc == 0 &&
            (buf[0] != pattern_at(off) || buf[r->chunk - 1] != pattern_at(off + r->chunk - 1)))
            r->rc = err_set(&r->e, ERR_INTERNAL, NULL, "wrong bytes at %zu", off);
    }
    free(buf);
    return NULL;
}

/* nreq requests of chunk bytes (request i at i * chunk) split over nthreads threads;
 * returns the wall time in ns, or -1 after printing the first error. */
static int64_t run_readers(struct data_storage *st, const char *path, int nthreads, int nreq,
                           size_t chunk)
{
    struct reader r[8];
    pthread_t th[8];
    struct err e;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || nthreads > 8)
        return -1;
    int64_t t0 = clock_mono_ns();
    int started = 0;
    for (int t = 0; t < nthreads; t++) {
        r[t] = (struct reader){.st = st,
                               .fd = fd,
                               .path = path,
                               .first = t,
                               .step = nthreads,
                               .count = (nreq - t + nthreads - 1) / nthreads,
                               .chunk = chunk};
        if (pthread_create(&th[t], NULL, reader_main, &r[t]) != 0)
            break;
        started++;
    }
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    int64_t dt = clock_mono_ns() - t0;
    close(fd);
    for (int t = 0; t < nthreads; t++) {
        if (t >= started || r[t].rc != 0) {
            e = r[t].e;
            fprintf(stderr, "  reader %d: %s\n", t, t < started ? e.msg : "not started");
            return -1;
        }
    }
    return dt;
}

/* --- profiles and checks --------------------------------------------------------------- */

static void test_profiles(void)
{
    struct err e;
    struct data_storage_profile p;
    T_OK(data_storage_profile_get("local", &p, &e));
    T_EQ_STR(p.name, "local");
    T_CHECK(p.read_mbps == 0 && p.latency_ms == 0 && p.concurrency == 0 && !p.cold);
    T_OK(data_storage_profile_get("nfs", &p, &e));
    T_EQ_STR(p.name, "nfs");
    T_CHECK(p.read_mbps == 200 && p.latency_ms == 0.5 && p.concurrency == 8 && !p.cold);
    T_OK(data_storage_profile_get("blob", &p, &e));
    T_EQ_STR(p.name, "blob");
    T_CHECK(p.read_mbps == 100 && p.latency_ms == 15 && p.concurrency == 32 && !p.cold);

    T_EQ_INT(data_storage_profile_get("s3", &p, &e), -1);
    T_EQ_INT(e.code, ERR_INVALID);
    T_EQ_STR(e.field, "dataset.storage");
    T_CHECK_MSG(strstr(e.msg, "s3"), "%s", e.msg);
    T_EQ_INT(data_storage_profile_get("NFS", &p, &e), -1);
    T_EQ_INT(data_storage_profile_get(NULL, &p, &e), -1);
    T_EQ_STR(e.field, "dataset.storage");

    /* every named profile is one create accepts */
    const char *names[] = {"local", "nfs", "blob"};
    for (int i = 0; i < 3; i++) {
        struct data_storage *st;
        T_OK(data_storage_profile_get(names[i], &p, &e));
        T_OK(data_storage_create(&p, &st, &e));
        data_storage_destroy(st);
    }
}

static void test_create_refuses(void)
{
    struct err e;
    struct {
        double mbps, latency;
        int concurrency;
        const char *field;
    } bad[] = {
        {-1, 0, 0, "dataset.read_mbps"},
        {NAN, 0, 0, "dataset.read_mbps"},
        {INFINITY, 0, 0, "dataset.read_mbps"},
        {0, -0.5, 0, "dataset.read_latency_ms"},
        {0, NAN, 0, "dataset.read_latency_ms"},
        {0, INFINITY, 0, "dataset.read_latency_ms"},
        {0, 0, -1, "dataset.read_concurrency"},
        {0, 0, DATA_STORAGE_MAX_CONCURRENCY + 1, "dataset.read_concurrency"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct data_storage_profile p = {.name = "x",
                                         .read_mbps = bad[i].mbps,
                                         .latency_ms = bad[i].latency,
                                         .concurrency = bad[i].concurrency};
        struct data_storage *st = (struct data_storage *)&p; /* must be reset */
        err_clear(&e);
        T_EQ_INT(data_storage_create(&p, &st, &e), -1);
        T_CHECK(st == NULL);
        T_EQ_INT(e.code, ERR_INVALID);
        T_EQ_STR(e.field, bad[i].field);
    }
    /* the edges are accepted, and absurd but finite figures do not overflow */
    struct data_storage_profile ok = {.name = "x",
                                      .read_mbps = 1e-300,
                                      .latency_ms = 0,
                                      .concurrency = DATA_STORAGE_MAX_CONCURRENCY};
    struct data_storage *st;
    T_OK(data_storage_create(&ok, &st, &e));
    data_storage_destroy(st);
    data_storage_destroy(NULL);
}

/* --- bytes and errors ------------------------------------------------------------------ */

static void test_pread_round_trip(void)
{
    struct err e;
    struct data_storage *st = storage_of(0, 0, 0, false);
    T_CHECK(st);
    struct {
        size_t off, n;
    } at[] = {{0, 1}, {1, 4096}, {4095, 2}, {SMALL_LEN - 10, 10}, {0, SMALL_LEN}, {777, 0}};
    uint8_t *buf = malloc(SMALL_LEN);
    int fd = data_storage_open(st, small_path, &e);
    bool same = true;
    for (size_t i = 0; buf && fd >= 0 && same && i < sizeof at / sizeof at[0]; i++) {
        memset(buf, 0, SMALL_LEN);
        same = data_storage_pread(st, fd, buf, at[i].n, (off_t)at[i].off, small_path, &e) ==
                   0 &&
               pattern_matches(buf, at[i].n, at[i].off);
        if (!same)
            fprintf(stderr, "  at %zu, %zu bytes: %s\n", at[i].off, at[i].n, e.msg);
    }
    if (fd >= 0)
        close(fd);
    free(buf);
    data_storage_destroy(st);
    T_CHECK(fd >= 0);
    T_CHECK(same);
}

static void test_pread_errors(void)
{
    struct err e;
    char path[128];
    T_CHECK(write_pattern(path, sizeof path, "hundred", 100) == 0);
    struct data_storage *st = storage_of(0, 0, 2, false);
    T_CHECK(st);
    int fd = data_storage_open(st, path, &e);
    uint8_t buf[64];
    int truncated = data_storage_pread(st, fd, buf, 50, 80, path, &e);
    struct err e_trunc = e;
    int past_end = data_storage_pread(st, fd, buf, 10, 100, path, &e);
    struct err e_past = e;
    int negative = data_storage_pread(st, fd, buf, 10, -1, path, &e);
    struct err e_neg = e;
    int whole = data_storage_pread(st, fd, buf, 20, 80, path, &e);
    if (fd >= 0)
        close(fd);
    int badfd = data_storage_pread(st, -1, buf, 10, 0, path, &e);
    struct err e_bad = e;
    data_storage_destroy(st);

    T_CHECK(fd >= 0);
    T_EQ_INT(truncated, -1);
    T_EQ_INT(e_trunc.code, ERR_INVALID);
    T_CHECK_MSG(strncmp(e_trunc.msg, path, strlen(path)) == 0, "%s", e_trunc.msg);
    T_CHECK_MSG(strstr(e_trunc.msg, "truncated: 50 bytes at 80, file ends at 100"), "%s",
                e_trunc.msg);
    T_EQ_INT(past_end, -1);
    T_EQ_INT(e_past.code, ERR_INVALID);
    T_CHECK_MSG(strstr(e_past.msg, "truncated"), "%s", e_past.msg);
    T_EQ_INT(negative, -1);
    T_EQ_INT(e_neg.code, ERR_INVALID);
    T_EQ_INT(whole, 0);
    T_CHECK(pattern_matches(buf, 20, 80));
    T_EQ_INT(badfd, -1);
    T_EQ_INT(e_bad.code, ERR_IO);
    T_CHECK_MSG(strncmp(e_bad.msg, path, strlen(path)) == 0, "%s", e_bad.msg);
}

static void test_missing_file(void)
{
    struct err e;
    char path[128];
    test_tmp_path(path, sizeof path, "no-such-file");
    struct data_storage *st = storage_of(0, 0.1, 1, false);
    T_CHECK(st);
    int fd = data_storage_open(st, path, &e);
    struct err e_open = e;
    uint8_t *out = (uint8_t *)path; /* must be reset */
    size_t len = 99;
    int rf = data_storage_read_file(st, path, 1000, &out, &len, &e);
    struct data_storage_stats s;
    data_storage_get_stats(st, &s);
    data_storage_destroy(st);

    T_EQ_INT(fd, -1);
    T_EQ_INT(e_open.code, ERR_NOT_FOUND);
    T_CHECK_MSG(strncmp(e_open.msg, path, strlen(path)) == 0, "%s", e_open.msg);
    T_EQ_INT(rf, -1);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    T_CHECK(out == NULL);
    T_EQ_INT(len, 0);
    /* a failed open was still issued: a request, no bytes */
    T_EQ_INT(s.requests, 2);
    T_EQ_INT(s.bytes, 0);
}

static void test_read_file(void)
{
    struct err e;
    char empty[128];
    T_CHECK(write_pattern(empty, sizeof empty, "empty", 0) == 0);
    struct data_storage *st = storage_of(0, 0, 0, false);
    T_CHECK(st);
    uint8_t *out = NULL, *none = NULL, *zero = NULL, *dir = NULL;
    size_t len = 0, none_len = 7, zero_len = 7, dir_len = 7;
    int whole = data_storage_read_file(st, small_path, SMALL_LEN, &out, &len, &e);
    int big = data_storage_read_file(st, small_path, SMALL_LEN - 1, &none, &none_len, &e);
    struct err e_big = e;
    int rz = data_storage_read_file(st, empty, 0, &zero, &zero_len, &e);
    int rd = data_storage_read_file(st, test_tmpdir(), 1 << 20, &dir, &dir_len, &e);
    struct err e_dir = e;
    data_storage_destroy(st);
    bool same = out && len == SMALL_LEN && pattern_matches(out, len, 0);
    bool zero_ok = zero != NULL && zero_len == 0;
    free(out);
    free(zero);

    T_EQ_INT(whole, 0);
    T_CHECK(same);
    T_EQ_INT(big, -1);
    T_EQ_INT(e_big.code, ERR_TOO_LARGE);
    T_CHECK_MSG(strncmp(e_big.msg, small_path, strlen(small_path)) == 0, "%s", e_big.msg);
    T_CHECK(none == NULL && none_len == 0);
    T_EQ_INT(rz, 0);
    T_CHECK(zero_ok);
    T_EQ_INT(rd, -1);
    T_EQ_INT(e_dir.code, ERR_INVALID);
    T_CHECK_MSG(strstr(e_dir.msg, "not a regular file"), "%s", e_dir.msg);
    T_CHECK(dir == NULL && dir_len == 0);
}

static void test_null_storage(void)
{
    struct err e;
    uint8_t buf[300];
    int fd = data_storage_open(NULL, small_path, &e);
    T_CHECK(fd >= 0);
    int rc = data_storage_pread(NULL, fd, buf, sizeof buf, 1234, small_path, &e);
    close(fd);
    T_EQ_INT(rc, 0);
    T_CHECK(pattern_matches(buf, sizeof buf, 1234));
    uint8_t *out;
    size_t len;
    T_OK(data_storage_read_file(NULL, small_path, SMALL_LEN, &out, &len, &e));
    bool same = len == SMALL_LEN && pattern_matches(out, len, 0);
    free(out);
    T_CHECK(same);
    struct data_storage_stats s = {.requests = 5, .bytes = 5};
    data_storage_get_stats(NULL, &s);
    T_CHECK(s.requests == 0 && s.bytes == 0 && s.wait_ns == 0 && s.read_ns == 0);
}

static void test_stats_exact(void)
{
    struct err e;
    /* 0.2 ms per request, 1000 MB/s: small enough to be quick, large enough to measure */
    struct data_storage *st = storage_of(1000, 0.2, 2, false);
    T_CHECK(st);
    uint8_t buf[1000], *out = NULL;
    size_t len = 0;
    int fd = data_storage_open(st, small_path, &e); /* 1 request */
    int rc = 0;
    rc |= data_storage_pread(st, fd, buf, 10, 0, small_path, &e);                    /* 2 */
    rc |= data_storage_pread(st, fd, buf, 100, 5, small_path, &e);                   /* 3 */
    rc |= data_storage_pread(st, fd, buf, 1000, 50, small_path, &e);                 /* 4 */
    int trunc = data_storage_pread(st, fd, buf, 40, SMALL_LEN - 30, small_path, &e); /* 5 */
    if (fd >= 0)
        close(fd);
    rc |= data_storage_read_file(st, small_path, SMALL_LEN, &out, &len, &e); /* 6, 7 */
    free(out);
    struct data_storage_stats s;
    data_storage_get_stats(st, &s);
    data_storage_destroy(st);

    T_CHECK(fd >= 0);
    T_EQ_INT(rc, 0);
    T_EQ_INT(trunc, -1);
    T_EQ_INT(s.requests, 7);
    /* a truncated read counts the bytes it did read */
    T_EQ_INT(s.bytes, 10 + 100 + 1000 + 30 + SMALL_LEN);
    /* 7 latencies of 0.2 ms, and 101140 bytes at 1000 MB/s = 0.1 ms, at least */
    T_CHECK_MSG(s.wait_ns >= 7 * 200000, "wait_ns %lld", (long long)s.wait_ns);
    T_CHECK(s.read_ns > 0);
}

/* The server's side (ddpbench-fs): openat and pread_upto count one request each, read
 * short at the end of the file (0 bytes past it) with the exact bytes, charge what they
 * read, pay the latency, and answer errno: ENOENT for a missing file, EBADF for a bad fd,
 * EINVAL for a negative offset. */
static void test_server_side(void)
{
    struct data_storage *st = storage_of(1000, 0.2, 2, false);
    T_CHECK(st);
    int dirfd = open(test_tmpdir(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int fd = data_storage_openat(st, dirfd, "small", O_RDONLY | O_CLOEXEC); /* 1 */
    int missing = data_storage_openat(st, dirfd, "no-such", O_RDONLY);      /* 2 */
    int e_missing = errno;
    uint8_t buf[4096];
    size_t got_mid = 0, got_end = 0, got_past = 0, got_bad = 0, got_neg = 0;
    int rc_mid = data_storage_pread_upto(st, fd, buf, 4096, 4097, &got_mid); /* 3 */
    bool same = pattern_matches(buf, got_mid, 4097);
    int rc_end = data_storage_pread_upto(st, fd, buf, 4096, SMALL_LEN - 100, &got_end); /* 4 */
    bool same_end = pattern_matches(buf, got_end, SMALL_LEN - 100);
    int rc_past = data_storage_pread_upto(st, fd, buf, 10, SMALL_LEN + 5, &got_past); /* 5 */
    int rc_bad = data_storage_pread_upto(st, -1, buf, 10, 0, &got_bad);               /* 6 */
    int e_bad = errno;
    int rc_neg = data_storage_pread_upto(st, fd, buf, 10, -1,
                                         &got_neg); /* refused, no request */
    int e_neg = errno;
    struct data_storage_stats s;
    data_storage_get_stats(st, &s);
    if (fd >= 0)
        close(fd);
    if (dirfd >= 0)
        close(dirfd);
    data_storage_destroy(st);

    T_CHECK(dirfd >= 0 && fd >= 0);
    T_EQ_INT(missing, -1);
    T_EQ_INT(e_missing, ENOENT);
    T_EQ_INT(rc_mid, 0);
    T_EQ_INT(got_mid, 4096);
    T_CHECK(same);
    T_EQ_INT(rc_end, 0);
    T_EQ_INT(got_end, 100);
    T_CHECK(same_end);
    T_EQ_INT(rc_past, 0);
    T_EQ_INT(got_past, 0);
    T_EQ_INT(rc_bad, -1);
    T_EQ_INT(e_bad, EBADF);
    T_EQ_INT(rc_neg, -1);
    T_EQ_INT(e_neg, EINVAL);
    T_EQ_INT(s.requests, 6);
    T_EQ_INT(s.bytes, 4096 + 100);
    T_CHECK_MSG(s.wait_ns >= 6 * 200000, "wait_ns %lld", (long long)s.wait_ns);
}

/* --- the caps ---------------------------------------------------------------------------- */

/* One reading of BIG_CHUNKS through a fresh 100 MB/s storage by nthreads: *mbps. */
static void bandwidth_once(int nthreads, double *mbps)
{
    struct data_storage *st = storage_of(100, 0, 0, false);
    T_CHECK(st);
    int64_t dt = run_readers(st, big_path, nthreads, BIG_CHUNKS, BIG_CHUNK);
    struct data_storage_stats s;
    data_storage_get_stats(st, &s);
    data_storage_destroy(st);
    T_CHECK(dt > 0);
    double total = (double)BIG_CHUNKS * BIG_CHUNK;
    *mbps = total / ((double)dt * 1e-9) / 1e6;
    fprintf(stderr, "  %d thread(s): %.0f bytes in %.1f ms = %.2f MB/s under a 100 MB/s cap\n",
            nthreads, total, (double)dt * 1e-6, *mbps);
    T_EQ_INT(s.requests, BIG_CHUNKS);
    T_EQ_INT(s.bytes, (int64_t)BIG_CHUNKS * BIG_CHUNK);
}

/* The cap is a hard ceiling on every attempt. The floor (80 %) is a goal a loaded machine
 * can miss: under TSan with another test beside it, four readers on 2 cores once measured
 * 70 %, their threads woken late; so it gets up to three attempts. */
static void check_bandwidth(int nthreads)
{
    double mbps = 0;
    for (int attempt = 0; attempt < 3 && mbps < 100 * 0.80; attempt++) {
        bandwidth_once(nthreads, &mbps);
        T_CHECK_MSG(mbps <= 100 * 1.02, "%.2f MB/s", mbps);
    }
    T_CHECK_MSG(mbps >= 100 * 0.80, "%.2f MB/s", mbps);
}

static void test_bandwidth_one_thread(void)
{
    check_bandwidth(1);
}

/* the cap is the storage's, not each thread's: four readers share 100 MB/s */
static void test_bandwidth_four_threads(void)
{
    check_bandwidth(4);
}

/* The bank (a token bucket's depth): at 100 MB/s a new storage's first 1 MB read takes its
 * full 10 ms (nothing banked), and after 20 ms idle a second read is credited at most the
 * 5 ms banked: >= 10 + 20 + 5 ms in all. Lower bounds only: a sleep never ends early. */
static void test_bucket_bank(void)
{
    struct data_storage *st = storage_of(100, 0, 0, false);
    T_CHECK(st);
    int fd = open(big_path, O_RDONLY | O_CLOEXEC);
    uint8_t *buf = malloc(1000000);
    size_t got1 = 0, got2 = 0;
    int64_t t0 = clock_mono_ns();
    int rc1 = buf ? data_storage_pread_upto(st, fd, buf, 1000000, 0, &got1) : -1;
    int64_t t1 = clock_mono_ns();
    struct timespec idle = {.tv_nsec = 20 * 1000000L};
    nanosleep(&idle, NULL);
    int rc2 = buf ? data_storage_pread_upto(st, fd, buf, 1000000, 1000000, &got2) : -1;
    int64_t t2 = clock_mono_ns();
    free(buf);
    if (fd >= 0)
        close(fd);
    data_storage_destroy(st);
    fprintf(stderr, "  1 MB at 100 MB/s: %.1f ms new, %.1f ms for both around 20 ms idle\n",
            (double)(t1 - t0) * 1e-6, (double)(t2 - t0) * 1e-6);
    T_EQ_INT(rc1, 0);
    T_EQ_INT(rc2, 0);
    T_EQ_INT(got1 + got2, 2000000);
    T_CHECK_MSG(t1 - t0 >= 10 * 1000000LL, "%lld ns", (long long)(t1 - t0));
    T_CHECK_MSG(t2 - t0 >= 35 * 1000000LL, "%lld ns", (long long)(t2 - t0));
}

/* 20 one-byte requests at 5 ms from 4 threads: serialized by concurrency 1 (>= 100 ms),
 * four at a time with concurrency 4 (>= 25 ms, and well under the serial 100 ms). */
static void test_latency(void)
{
    struct data_storage *one = storage_of(0, 5, 1, false);
    struct data_storage *four = storage_of(0, 5, 4, false);
    int64_t dt1 = one ? run_readers(one, small_path, 4, 20, 1) : -1;
    int64_t dt4 = four ? run_readers(four, small_path, 4, 20, 1) : -1;
    struct data_storage_stats s;
    data_storage_get_stats(four, &s);
    data_storage_destroy(one);
    data_storage_destroy(four);
    fprintf(stderr, "  20 requests at 5 ms: %.1f ms with concurrency 1, %.1f ms with 4\n",
            (double)dt1 * 1e-6, (double)dt4 * 1e-6);
    T_CHECK(dt1 > 0 && dt4 > 0);
    T_CHECK_MSG(dt1 >= 100 * 1000000LL, "%lld ns", (long long)dt1);
    T_CHECK_MSG(dt4 >= 25 * 1000000LL, "%lld ns", (long long)dt4);
    T_CHECK_MSG(dt4 < 80 * 1000000LL, "%lld ns", (long long)dt4);
    T_EQ_INT(s.requests, 20);
    T_CHECK(s.wait_ns >= 20 * 5000000LL);
}

/* 6 threads x 4 requests at 10 ms with 2 slots: 12 rounds at least (without the cap 4) */
static void test_concurrency_cap(void)
{
    struct data_storage *st = storage_of(0, 10, 2, false);
    T_CHECK(st);
    int64_t dt = run_readers(st, small_path, 6, 24, 1);
    data_storage_destroy(st);
    fprintf(stderr, "  24 requests at 10 ms, 2 in flight: %.1f ms\n", (double)dt * 1e-6);
    T_CHECK(dt > 0);
    T_CHECK_MSG(dt >= 120 * 1000000LL, "%lld ns", (long long)dt);
}

/* --- cold mode --------------------------------------------------------------------------- */

/* Pages of path's [off, off + len) in the page cache (off a multiple of the page), or -1. */
static long resident_pages(const char *path, size_t off, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)off);
    close(fd);
    if (m == MAP_FAILED)
        return -1;
    long page = sysconf(_SC_PAGESIZE), n = (long)((len + (size_t)page - 1) / (size_t)page);
    unsigned char *vec = malloc((size_t)n);
    long resident = -1;
    if (vec && mincore(m, len, vec) == 0) {
        resident = 0;
        for (long i = 0; i < n; i++)
            resident += vec[i] & 1;
    }
    free(vec);
    munmap(m, len);
    return resident;
}

/* Whether this file system drops a clean file's pages on POSIX_FADV_DONTNEED at all. */
static bool fs_drops_pages(const char *path, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    uint8_t *buf = malloc(len);
    bool warm = buf && pread(fd, buf, len, 0) == (ssize_t)len &&
                resident_pages(path, 0, len) > 0;
    free(buf);
    bool drops = warm && posix_fadvise(fd, 0, (off_t)len, POSIX_FADV_DONTNEED) == 0 &&
                 resident_pages(path, 0, len) == 0;
    close(fd);
    return drops;
}

static void test_cold_reads(void)
{
    struct err e;
    char path[128];
    size_t len = 1u << 20;
    T_CHECK(write_pattern(path, sizeof path, "cold", len) == 0);
    bool drops = fs_drops_pages(path, len);
    struct data_storage *st = storage_of(0, 0, 0, true);
    T_CHECK(st);
    uint8_t *out = NULL, *part = malloc(4096);
    size_t out_len = 0;
    int rf = data_storage_read_file(st, path, len, &out, &out_len, &e);
    long after_file = resident_pages(path, 0, len);
    int fd = data_storage_open(st, path, &e);
    int rp = fd >= 0 && part ? data_storage_pread(st, fd, part, 4096, 8192, path, &e) : -1;
    if (fd >= 0)
        close(fd);
    /* only the range read: readahead may have cached pages past it, as on a real disk */
    long after_pread = resident_pages(path, 8192, 4096);
    data_storage_destroy(st);
    bool same = rf == 0 && out_len == len && pattern_matches(out, len, 0);
    bool part_same = rp == 0 && pattern_matches(part, 4096, 8192);
    free(out);
    free(part);

    T_CHECK(same);
    T_CHECK(part_same);
    if (!drops) {
        fprintf(stderr, "  note: this file system keeps pages on POSIX_FADV_DONTNEED; "
                        "only the bytes were checked\n");
        return;
    }
    T_CHECK_MSG(after_file == 0, "%ld pages still cached after a cold read_file", after_file);
    T_CHECK_MSG(after_pread == 0, "%ld pages still cached after a cold pread", after_pread);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    if (write_pattern(big_path, sizeof big_path, "big", (size_t)BIG_CHUNKS * BIG_CHUNK) < 0 ||
        write_pattern(small_path, sizeof small_path, "small", SMALL_LEN) < 0) {
        perror("writing the test files");
        return 1;
    }
    TEST_RUN(test_profiles);
    TEST_RUN(test_create_refuses);
    TEST_RUN(test_pread_round_trip);
    TEST_RUN(test_pread_errors);
    TEST_RUN(test_missing_file);
    TEST_RUN(test_read_file);
    TEST_RUN(test_null_storage);
    TEST_RUN(test_stats_exact);
    TEST_RUN(test_server_side);
    TEST_RUN(test_bandwidth_one_thread);
    TEST_RUN(test_bandwidth_four_threads);
    TEST_RUN(test_bucket_bank);
    TEST_RUN(test_latency);
    TEST_RUN(test_concurrency_cap);
    TEST_RUN(test_cold_reads);
    return test_end();
}
