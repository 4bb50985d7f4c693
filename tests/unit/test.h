/* test: the unit-test harness. Each test binary lists its cases in main() with
 * TEST_RUN; a failed check prints file:line and the expression, ends that case and the
 * run goes on. A case that cannot run here says so with T_SKIP (or the whole binary with
 * test_skip_all) and is counted as skipped, never as passed. The last line a binary
 * prints is "TEST-SUMMARY passed=P failed=F skipped=S", which tests/summarize.py adds up
 * into "N passed, N failed, N skipped" (and fails the run for a skip it does not allow).
 *
 * A binary that writes files keeps them under test_tmpdir(), which test_end removes.
 *
 * Decision: header-only with one static state per binary (each test binary is one
 * translation unit plus the libraries under test), so there is nothing to link. */
#ifndef DDPB_TEST_H
#define DDPB_TEST_H

#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct test_state {
    int passed, failed, skipped;
    int case_failed, case_skipped;
    const char *skip_all;  /* set by test_skip_all: every later case is skipped for this */
    char skip_reason[256]; /* the current case's, from T_SKIP */
    const char *only;      /* run only cases whose name contains one of these words
                              (argv[1], comma-separated); "!a,b": only those whose name
                              contains none of them */
    const char *prog;      /* argv[0]: names the scratch folder */
    char tmpdir[256];      /* test_tmpdir's folder once made, else "" */
};

static struct test_state test_state;

__attribute__((format(printf, 3, 4))) static inline void test_fail(const char *file, int line,
                                                                   const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "  FAIL %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    test_state.case_failed = 1;
}

#define T_CHECK(cond)                                                                          \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            test_fail(__FILE__, __LINE__, "%s", #cond);                                        \
            return;                                                                            \
        }                                                                                      \
    } while (0)

#define T_CHECK_MSG(cond, ...)                                                                 \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            char test_msg_[512];                                                               \
            snprintf(test_msg_, sizeof test_msg_, __VA_ARGS__);                                \
            test_fail(__FILE__, __LINE__, "%s: %s", #cond, test_msg_);                         \
            return;                                                                            \
        }                                                                                      \
    } while (0)

#define T_EQ_INT(a, b)                                                                         \
    do {                                                                                       \
        long long test_a_ = (long long)(a), test_b_ = (long long)(b);                          \
        if (test_a_ != test_b_) {                                                              \
            char test_x_[64], test_y_[64];                                                     \
            snprintf(test_x_, sizeof test_x_, "%lld", test_a_);                                \
            snprintf(test_y_, sizeof test_y_, "%lld", test_b_);                                \
            test_fail(__FILE__, __LINE__, "%s == %s (%s vs %s)", #a, #b, test_x_, test_y_);    \
            return;                                                                            \
        }                                                                                      \
    } while (0)

#define T_EQ_STR(a, b)                                                                         \
    do {                                                                                       \
        const char *test_a_ = (a), *test_b_ = (b);                                             \
        if (!test_a_ || !test_b_ || strcmp(test_a_, test_b_) != 0) {                           \
            test_fail(__FILE__, __LINE__, "%s == %s (\"%s\" vs \"%s\")", #a, #b,               \
                      test_a_ ? test_a_ : "(null)", test_b_ ? test_b_ : "(null)");             \
            return;                                                                            \
        }                                                                                      \
    } while (0)

#define T_NEAR(a, b, tol)                                                                      \
    do {                                                                                       \
        double test_a_ = (double)(a), test_b_ = (double)(b);                                   \
        if (!(fabs(test_a_ - test_b_) <= (double)(tol))) {                                     \
            char test_x_[64], test_y_[64];                                                     \
            snprintf(test_x_, sizeof test_x_, "%.9g", test_a_);                                \
            snprintf(test_y_, sizeof test_y_, "%.9g", test_b_);                                \
            test_fail(__FILE__, __LINE__, "%s ~= %s (%s vs %s)", #a, #b, test_x_, test_y_);    \
            return;                                                                            \
        }                                                                                      \
    } while (0)

/* Ends the case as skipped, with the reason (printf-style) on its "skip" line. */
#define T_SKIP(...)                                                                            \
    do {                                                                                       \
        snprintf(test_state.skip_reason, sizeof test_state.skip_reason, __VA_ARGS__);          \
        test_state.case_skipped = 1;                                                           \
        return;                                                                                \
    } while (0)

/* A call returning 0 on success with a struct err named e in scope. */
#define T_OK(call)                                                                             \
    do {                                                                                       \
        if ((call) != 0) {                                                                     \
            test_fail(__FILE__, __LINE__, "%s failed: %s", #call, e.msg);                      \
            return;                                                                            \
        }                                                                                      \
    } while (0)

/* Whether name contains the n characters at w (an empty word is in no name). */
static inline int test_name_has(const char *name, const char *w, size_t n)
{
    for (const char *p = name; n > 0 && *p; p++)
        if (strncmp(p, w, n) == 0)
            return 1;
    return 0;
}

/* Whether the case named name runs under argv[1] (test_state.only). */
static inline int test_selected(const char *name)
{
    const char *o = test_state.only;
    if (!o)
        return 1;
    int negate = o[0] == '!', hit = 0;
    for (const char *w = o + negate; *w && !hit;) {
        size_t n = strcspn(w, ",");
        hit = test_name_has(name, w, n);
        w += n + (w[n] == ',');
    }
    return negate ? !hit : hit;
}

#define TEST_RUN(fn)                                                                           \
    do {                                                                                       \
        if (!test_selected(#fn))                                                               \
            break;                                                                             \
        test_state.case_failed = test_state.case_skipped = 0;                                  \
        if (test_state.skip_all) {                                                             \
            test_state.skipped++;                                                              \
            fprintf(stderr, "skip %s: %s\n", #fn, test_state.skip_all);                        \
            break;                                                                             \
        }                                                                                      \
        fn();                                                                                  \
        if (test_state.case_skipped && !test_state.case_failed) {                              \
            test_state.skipped++;                                                              \
            fprintf(stderr, "skip %s: %s\n", #fn, test_state.skip_reason);                     \
        } else if (test_state.case_failed) {                                                   \
            test_state.failed++;                                                               \
            fprintf(stderr, "not ok %s\n", #fn);                                               \
        } else {                                                                               \
            test_state.passed++;                                                               \
            fprintf(stderr, "ok %s\n", #fn);                                                   \
        }                                                                                      \
    } while (0)

static inline void test_begin(int argc, char **argv)
{
    test_state.only = argc > 1 ? argv[1] : NULL;
    test_state.prog = argv[0];
    setvbuf(stdout, NULL, _IONBF, 0);
    setvbuf(stderr, NULL, _IONBF, 0);
}

/* Every case after this is skipped with reason (a string that outlives the run): for a
 * binary none of whose cases can run here, e.g. the GPU tests without a device. */
static inline void test_skip_all(const char *reason)
{
    test_state.skip_all = reason;
}

static inline int test_rmtree_entry(const char *path, const struct stat *st, int flag,
                                    struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* Writes n bytes of p as the whole of path. Returns 0, or -1. */
static inline int test_write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

/* The whole of path into an owned heap block (free()) of *n bytes and a NUL after them, or
 * NULL when it does not read. */
static inline uint8_t *test_slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = size < 0 ? NULL : malloc((size_t)size + 1);
    if (p && fread(p, 1, (size_t)size, f) != (size_t)size) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) {
        *n = (size_t)size;
        p[*n] = 0;
    }
    return p;
}

/* rm -r dir: a test's temporary folder, at its end. */
static inline void test_rmtree(const char *dir)
{
    nftw(dir, test_rmtree_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The binary's scratch folder, /tmp/ddpb-<binary>-XXXXXX: made on the first call, removed
 * with all it holds by test_end. A binary that cannot make it stops there with status 1 (no
 * case could run). The path is the harness's; callers do not free it. */
static inline const char *test_tmpdir(void)
{
    if (test_state.tmpdir[0])
        return test_state.tmpdir;
    const char *prog = test_state.prog ? test_state.prog : "test";
    const char *slash = strrchr(prog, '/');
    snprintf(test_state.tmpdir, sizeof test_state.tmpdir, "/tmp/ddpb-%s-XXXXXX",
             slash ? slash + 1 : prog);
    if (!mkdtemp(test_state.tmpdir)) {
        perror("mkdtemp");
        exit(1);
    }
    return test_state.tmpdir;
}

/* "<scratch folder>/<name>" into out (n bytes). */
static inline void test_tmp_path(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", test_tmpdir(), name);
}

static inline int test_end(void)
{
    if (test_state.tmpdir[0])
        test_rmtree(test_state.tmpdir);
    printf("TEST-SUMMARY passed=%d failed=%d skipped=%d\n", test_state.passed,
           test_state.failed, test_state.skipped);
    return test_state.failed ? 1 : 0;
}

#endif
