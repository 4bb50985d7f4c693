/* Unit tests for common/report: every event type written to a pipe and parsed back, every
 * kind of malformed line rejected with the field it names, struct report_collective round
 * trips, and the writer's failure modes (closed pipe, oversize event, signals interrupting
 * a write that the reader drains slowly). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/report.h"
#include "tests/unit/test.h"

/* --- helpers ------------------------------------------------------------------------- */

static struct report_collective sample_collective(void)
{
    struct report_collective c;
    memset(&c, 0, sizeof c); /* padding too, so whole structs compare with memcmp */
    c.repeat = 2;
    snprintf(c.op, sizeof c.op, "%s", "allreduce");
    snprintf(c.dtype, sizeof c.dtype, "%s", "float32");
    snprintf(c.redop, sizeof c.redop, "%s", "sum");
    snprintf(c.algorithm, sizeof c.algorithm, "%s", "ring");
    c.inplace = true;
    c.bytes = INT64_C(1) << 33;
    c.count = INT64_C(1) << 31;
    c.iters = 20;
    c.time_us_min = 1.0 / 3.0;
    c.time_us_median = 123456789.123456789;
    c.time_us_p95 = 1e-300;
    c.time_us_mean = 0.0;
    c.time_us_max = 1e300;
    c.algbw_gbs = 12.5;
    c.busbw_gbs = 18.75;
    c.wrong = 7;
    return c;
}

/* Reads everything until EOF into b. */
static void drain_fd(int fd, struct buf *b)
{
    char chunk[4096];
    ssize_t n;
    while ((n = read(fd, chunk, sizeof chunk)) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        buf_append(b, chunk, (size_t)n);
    }
}

/* Splits b's text into lines (each must end with '\n'); returns the count. */
static size_t split_lines(struct buf *b, const char **lines, size_t *lens, size_t max)
{
    size_t n = 0, start = 0;
    for (size_t i = 0; i < b->len && n < max; i++) {
        if (b->data[i] != '\n')
            continue;
        lines[n] = (const char *)b->data + start;
        lens[n++] = i - start;
        start = i + 1;
    }
    return start == b->len ? n : 0; /* a trailing partial line is a failure */
}

/* True when line is rejected with code and field. */
static bool line_rejected(const char *line, size_t len, enum err_code code, const char *field)
{
    struct err e = {0};
    enum report_type type;
    json_t *ev = report_parse_line(line, len, &type, &e);
    if (ev) {
        fprintf(stderr, "    accepted: %.200s\n", line);
        json_decref(ev);
        return false;
    }
    if (e.code != code || strcmp(e.field, field) != 0) {
        fprintf(stderr, "    %.200s\n    -> %s field \"%s\": %s\n", line, err_code_name(e.code),
                e.field, e.msg);
        return false;
    }
    return true;
}

/* A valid collective event with one field replaced (bad == NULL: removed). */
static char *collective_line_with(const char *key, json_t *bad)
{
    struct report_collective c = sample_collective();
    json_t *ev = report_collective_to_json(&c);
    json_object_set_new(ev, "type", json_string("collective"));
    json_object_set_new(ev, "rank", json_integer(0));
    json_object_set_new(ev, "t", json_real(1.7e9));
    if (bad)
        json_object_set_new(ev, key, bad);
    else
        json_object_del(ev, key);
    char *line = json_dumps(ev, JSON_COMPACT);
    json_decref(ev);
    return line;
}

/* --- every type through a pipe ------------------------------------------------------- */

static void test_report_emit_parse_every_type(void)
{
    int fds[2];
    T_CHECK(pipe(fds) == 0);
    struct report_writer w;
    report_writer_init(&w, fds[1], 3);
    struct err e, cause;
    struct report_collective c = sample_collective();
    T_OK(report_emit_hello(&w, 4, &e));
    T_OK(report_emit(
        &w, REPORT_ENV,
        json_pack("{s:{s:s, s:i, s:f}}", "env", "kernel", "6.1.0", "cpus", 16, "ghz", 2.5),
        &e));
    T_OK(report_emit_progress(&w, "sizes", 3, 8, &e));
    T_OK(report_emit_collective(&w, &c, &e));
    err_set(&cause, ERR_TIMEOUT, "", "allreduce: peer 2 silent for 30 s");
    T_OK(report_emit_error(&w, &cause, "comm/tcp.c:120", "allreduce", 2, &e));
    T_OK(report_emit_error(&w, &cause, "main.c:1", NULL, -1, &e));
    T_OK(report_emit_done(&w, &e));
    close(fds[1]);
    struct buf b;
    buf_init(&b);
    drain_fd(fds[0], &b);
    close(fds[0]);

    const char *lines[16];
    size_t lens[16];
    size_t n = split_lines(&b, lines, lens, 16);
    static const enum report_type want[] = {REPORT_HELLO,      REPORT_ENV,   REPORT_PROGRESS,
                                            REPORT_COLLECTIVE, REPORT_ERROR, REPORT_ERROR,
                                            REPORT_DONE};
    json_t *ev[7] = {0};
    bool ok = n == 7;
    for (size_t i = 0; ok && i < n; i++) {
        enum report_type type;
        ev[i] = report_parse_line(lines[i], lens[i], &type, &e);
        ok = ev[i] && type == want[i] &&
             json_integer_value(json_object_get(ev[i], "rank")) == 3 &&
             json_number_value(json_object_get(ev[i], "t")) > 1e9;
        if (!ok)
            fprintf(stderr, "    line %zu: %.*s (%s)\n", i, (int)lens[i], lines[i], e.msg);
    }
    buf_free(&b);
    if (ok) {
        json_t *h = ev[0], *err1 = ev[4], *err2 = ev[5];
        ok = json_integer_value(json_object_get(h, "pid")) == getpid() &&
             json_integer_value(json_object_get(h, "world_size")) == 4 &&
             json_string_length(json_object_get(h, "host")) > 0 &&
             json_integer_value(json_object_get(json_object_get(ev[1], "env"), "cpus")) == 16 &&
             json_integer_value(json_object_get(ev[2], "done")) == 3 &&
             json_integer_value(json_object_get(ev[2], "total")) == 8 &&
             strcmp(json_string_value(json_object_get(ev[2], "phase")), "sizes") == 0 &&
             strcmp(json_string_value(json_object_get(err1, "code")), "timeout") == 0 &&
             strcmp(json_string_value(json_object_get(err1, "op")), "allreduce") == 0 &&
             json_integer_value(json_object_get(err1, "peer")) == 2 &&
             strcmp(json_string_value(json_object_get(err1, "where")), "comm/tcp.c:120") == 0 &&
             !json_object_get(err2, "op") && !json_object_get(err2, "peer") &&
             json_object_size(ev[6]) == 3;
    }
    struct report_collective back;
    int rc = ok ? report_collective_from_json(ev[3], &back, &e) : -1;
    for (size_t i = 0; i < 7; i++)
        json_decref(ev[i]);
    T_CHECK_MSG(ok, "lines: %zu", n);
    T_CHECK_MSG(rc == 0, "%s", e.msg);
    T_CHECK(memcmp(&back, &c, sizeof c) == 0);
}

static void test_report_type_names(void)
{
    T_EQ_STR(report_type_name(REPORT_HELLO), "hello");
    T_EQ_STR(report_type_name(REPORT_ENV), "env");
    T_EQ_STR(report_type_name(REPORT_PROGRESS), "progress");
    T_EQ_STR(report_type_name(REPORT_COLLECTIVE), "collective");
    T_EQ_STR(report_type_name(REPORT_ERROR), "error");
    T_EQ_STR(report_type_name(REPORT_DONE), "done");
    T_EQ_STR(report_type_name((enum report_type)99), "unknown");
}

/* --- malformed lines ----------------------------------------------------------------- */

struct bad_line {
    const char *line;
    const char *field;
};

static void test_report_rejects_malformed_lines(void)
{
    static const struct bad_line cases[] = {
        {"not json", ""},
        {"", ""},
        {"[1]", ""},
        {"42", ""},
        {"{\"type\":\"done\",\"rank\":0,\"t\":1", ""},
        {"{\"type\":\"done\",\"rank\":0,\"t\":1,\"t\":2}", ""},
        {"{\"type\":\"done\",\"rank\":0,\"t\":1}\n{\"type\":\"done\",\"rank\":0,\"t\":1}", ""},
        {"{\"rank\":0,\"t\":1}", "type"},
        {"{\"type\":5,\"rank\":0,\"t\":1}", "type"},
        {"{\"type\":\"bogus\",\"rank\":0,\"t\":1}", "type"},
        {"{\"type\":\"DONE\",\"rank\":0,\"t\":1}", "type"},
        {"{\"type\":\"done\",\"t\":1}", "rank"},
        {"{\"type\":\"done\",\"rank\":-1,\"t\":1}", "rank"},
        {"{\"type\":\"done\",\"rank\":1.0,\"t\":1}", "rank"},
        {"{\"type\":\"done\",\"rank\":\"0\",\"t\":1}", "rank"},
        {"{\"type\":\"done\",\"rank\":4294967296,\"t\":1}", "rank"},
        {"{\"type\":\"done\",\"rank\":0}", "t"},
        {"{\"type\":\"done\",\"rank\":0,\"t\":\"now\"}", "t"},
        {"{\"type\":\"done\",\"rank\":0,\"t\":-5}", "t"},
        {"{\"type\":\"done\",\"rank\":0,\"t\":1,\"extra\":1}", "extra"},
        {"{\"type\":\"hello\",\"rank\":0,\"t\":1,\"host\":\"h\",\"world_size\":2}", "pid"},
        {"{\"type\":\"hello\",\"rank\":0,\"t\":1,\"pid\":\"9\",\"host\":\"h\","
         "\"world_size\":2}",
         "pid"},
        {"{\"type\":\"hello\",\"rank\":0,\"t\":1,\"pid\":9,\"host\":5,\"world_size\":2}",
         "host"},
        {"{\"type\":\"hello\",\"rank\":0,\"t\":1,\"pid\":9,\"host\":\"h\",\"world_size\":0}",
         "world_size"},
        {"{\"type\":\"hello\",\"rank\":0,\"t\":1,\"pid\":9,\"host\":\"h\",\"world_size\":2,"
         "\"gpu\":0}",
         "gpu"},
        {"{\"type\":\"env\",\"rank\":0,\"t\":1}", "env"},
        {"{\"type\":\"env\",\"rank\":0,\"t\":1,\"env\":5}", "env"},
        /* objects nest REPORT_ENV_DEPTH levels, no deeper */
        {"{\"type\":\"env\",\"rank\":0,\"t\":1,\"env\":{\"a\":{\"b\":{\"c\":{}}}}}", "env"},
        {"{\"type\":\"env\",\"rank\":0,\"t\":1,\"env\":{\"a\":{\"b\":[1]}}}", "env"},
        {"{\"type\":\"env\",\"rank\":0,\"t\":1,\"env\":{\"a\":[1]}}", "env"},
        {"{\"type\":\"env\",\"rank\":0,\"t\":1,\"env\":{\"a\":true}}", "env"},
        {"{\"type\":\"progress\",\"rank\":0,\"t\":1,\"done\":-1,\"total\":2,\"phase\":\"p\"}",
         "done"},
        {"{\"type\":\"progress\",\"rank\":0,\"t\":1,\"done\":1,\"total\":1.5,\"phase\":\"p\"}",
         "total"},
        {"{\"type\":\"progress\",\"rank\":0,\"t\":1,\"done\":1,\"total\":2}", "phase"},
        {"{\"type\":\"error\",\"rank\":0,\"t\":1,\"code\":\"nope\",\"message\":\"m\","
         "\"where\":\"w\"}",
         "code"},
        {"{\"type\":\"error\",\"rank\":0,\"t\":1,\"code\":\"io\",\"where\":\"w\"}", "message"},
        {"{\"type\":\"error\",\"rank\":0,\"t\":1,\"code\":\"io\",\"message\":\"m\"}", "where"},
        {"{\"type\":\"error\",\"rank\":0,\"t\":1,\"code\":\"io\",\"message\":\"m\","
         "\"where\":\"w\",\"peer\":-1}",
         "peer"},
        {"{\"type\":\"error\",\"rank\":0,\"t\":1,\"code\":\"io\",\"message\":\"m\","
         "\"where\":\"w\",\"op\":5}",
         "op"},
        {"{\"type\":\"error\",\"rank\":0,\"t\":1,\"code\":\"io\",\"message\":\"m\","
         "\"where\":\"w\",\"field\":\"x\"}",
         "field"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        T_CHECK_MSG(
            line_rejected(cases[i].line, strlen(cases[i].line), ERR_INVALID, cases[i].field),
            "case %zu", i);
    /* Optional fields are optional: the same error line without them is fine. */
    const char *ok = "{\"type\":\"error\",\"rank\":0,\"t\":1,\"code\":\"io\",\"message\":\"m\","
                     "\"where\":\"w\"}";
    struct err e;
    enum report_type type;
    json_t *ev = report_parse_line(ok, strlen(ok), &type, &e);
    T_CHECK_MSG(ev, "%s", e.msg);
    T_EQ_INT(type, REPORT_ERROR);
    json_decref(ev);
}

/* An env may carry a library's facts as objects ("mpi": {"transport": {...}}). */
static void test_report_env_nested(void)
{
    const char *ok = "{\"type\":\"env\",\"rank\":1,\"t\":1,\"env\":{\"kernel\":\"6.1\","
                     "\"mpi\":{\"implementation\":\"openmpi\",\"transport\":{\"btl\":"
                     "\"self,tcp\",\"n\":2}}}}";
    struct err e;
    enum report_type type;
    json_t *ev = report_parse_line(ok, strlen(ok), &type, &e);
    T_CHECK_MSG(ev, "%s", e.msg);
    const char *btl = json_string_value(json_object_get(
        json_object_get(json_object_get(json_object_get(ev, "env"), "mpi"), "transport"),
        "btl"));
    bool good = type == REPORT_ENV && btl && strcmp(btl, "self,tcp") == 0;
    json_decref(ev);
    T_CHECK(good);
}

static void test_report_rejects_bad_collective_fields(void)
{
    char op[40];
    memset(op, 'o', 24);
    op[24] = '\0';
    struct {
        const char *key;
        json_t *bad;
    } cases[] = {
        {"bytes", json_integer(-1)},
        {"bytes", json_real(1.0)},
        {"count", json_string("1")},
        {"iters", json_integer(-1)},
        {"iters", json_integer(INT64_C(1) << 31)},
        {"wrong", NULL},
        {"wrong", json_integer(-3)},
        {"repeat", json_null()},
        {"op", json_string(op)},
        {"op", NULL},
        {"dtype", json_integer(32)},
        {"algorithm", json_string("0123456789abcdef")},
        {"inplace", json_integer(1)},
        {"time_us_min", json_integer(-1)},
        {"time_us_median", json_string("5")},
        {"time_us_p95", NULL},
        {"busbw_gbs", json_real(-0.5)},
        {"algbw_gbs", json_true()},
        {"bogus", json_integer(1)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *line = collective_line_with(cases[i].key, cases[i].bad);
        bool ok = line && line_rejected(line, strlen(line), ERR_INVALID, cases[i].key);
        free(line);
        T_CHECK_MSG(ok, "case %zu (%s)", i, cases[i].key);
    }
    /* the unmodified line is valid, so each case above failed for its own field */
    char *line = collective_line_with("time_us_mean", json_integer(5));
    struct err e;
    enum report_type type;
    json_t *ev = report_parse_line(line, strlen(line), &type, &e);
    free(line);
    T_CHECK_MSG(ev, "%s", e.msg);
    T_EQ_INT(type, REPORT_COLLECTIVE);
    json_decref(ev);
}

static void test_report_line_too_large(void)
{
    size_t n = REPORT_MAX_LINE + 1;
    char *line = malloc(n + 1);
    memset(line, ' ', n);
    line[n] = '\0';
    T_CHECK(line_rejected(line, n, ERR_TOO_LARGE, ""));
    /* just under the limit is judged on its content */
    const char *head = "{\"type\":\"done\",\"rank\":0,\"t\":1}";
    memcpy(line, head, strlen(head));
    struct err e;
    enum report_type type;
    json_t *ev = report_parse_line(line, n - 1, &type, &e);
    free(line);
    T_CHECK_MSG(ev, "%s", e.msg);
    json_decref(ev);
}

/* --- struct report_collective -------------------------------------------------------- */

static void test_report_collective_round_trip(void)
{
    struct report_collective c = sample_collective(), back;
    json_t *obj = report_collective_to_json(&c);
    T_CHECK(obj);
    T_EQ_INT(json_object_size(obj), 17); /* every member, no type/rank/t */
    T_CHECK(!json_object_get(obj, "type"));
    struct err e;
    char *text = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    json_t *again = json_loads(text, 0, NULL);
    free(text);
    memset(&back, 0x7f, sizeof back);
    int rc = report_collective_from_json(again, &back, &e);
    json_decref(again);
    T_CHECK_MSG(rc == 0, "%s", e.msg);
    T_CHECK(memcmp(&back, &c, sizeof c) == 0); /* doubles survive text exactly */
    T_EQ_STR(back.algorithm, "ring");
    T_EQ_INT(back.bytes, INT64_C(1) << 33);
    T_CHECK(back.time_us_min == 1.0 / 3.0);

    /* strings at their longest fit */
    memset(c.op, 'x', sizeof c.op - 1);
    obj = report_collective_to_json(&c);
    T_CHECK(obj);
    T_OK(report_collective_from_json(obj, &back, &e));
    json_decref(obj);
    T_EQ_INT(strlen(back.op), sizeof back.op - 1);
}

/* The sample with one member broken, case i; false past the last case. */
static bool broken_collective(int i, struct report_collective *c)
{
    *c = sample_collective();
    switch (i) {
    case 0: c->time_us_p95 = NAN; break;
    case 1: c->busbw_gbs = INFINITY; break;
    case 2: c->time_us_mean = -1.0; break;
    case 3: c->bytes = -1; break;
    case 4: c->wrong = -1; break;
    case 5: c->iters = -1; break;
    case 6: memset(c->dtype, 'f', sizeof c->dtype); break;          /* unterminated */
    case 7: snprintf(c->op, sizeof c->op, "%s", "\xff\xfe"); break; /* not UTF-8 */
    default: return false;
    }
    return true;
}

static void test_report_collective_rejects_bad_struct(void)
{
    struct report_collective c = sample_collective();
    json_t *good = report_collective_to_json(&c);
    T_CHECK(good); /* so each refusal below is the changed member's doing */
    json_decref(good);
    for (int i = 0; broken_collective(i, &c); i++) {
        json_t *obj = report_collective_to_json(&c);
        json_decref(obj);
        T_CHECK_MSG(!obj, "case %d accepted", i);
    }

    /* from_json: not an object, a missing field, an unknown field */
    struct err e;
    struct report_collective back;
    json_t *arr = json_array();
    T_CHECK(report_collective_from_json(arr, &back, &e) < 0);
    json_decref(arr);
    c = sample_collective();
    json_t *obj = report_collective_to_json(&c);
    json_object_del(obj, "count");
    T_CHECK(report_collective_from_json(obj, &back, &e) < 0);
    T_EQ_STR(e.field, "count");
    json_object_set_new(obj, "count", json_integer(4));
    json_object_set_new(obj, "latency", json_integer(4));
    T_CHECK(report_collective_from_json(obj, &back, &e) < 0);
    T_EQ_STR(e.field, "latency");
    json_decref(obj);
}

/* --- the writer ---------------------------------------------------------------------- */

static void test_report_emit_refuses_bad_events(void)
{
    int fds[2];
    T_CHECK(pipe(fds) == 0);
    struct report_writer w;
    report_writer_init(&w, fds[1], 0);
    struct err e;
    struct report_collective c = sample_collective();
    c.time_us_p95 = NAN;
    T_CHECK(report_emit_collective(&w, &c, &e) < 0);
    T_EQ_INT(e.code, ERR_INVALID);
    T_EQ_STR(e.field, "time_us_p95");
    /* fields the daemon would reject are refused at the source */
    T_CHECK(report_emit(&w, REPORT_HELLO, json_pack("{s:s}", "host", "h"), &e) < 0);
    T_EQ_STR(e.field, "pid");
    T_CHECK(report_emit(&w, REPORT_DONE, json_pack("{s:i}", "rank", 5), &e) < 0);
    T_EQ_STR(e.field, "rank");
    T_CHECK(report_emit(&w, REPORT_DONE, json_pack("{s:i}", "extra", 5), &e) < 0);
    T_EQ_STR(e.field, "extra");
    T_CHECK(report_emit_progress(&w, NULL, 1, 2, &e) < 0);
    T_EQ_INT(e.code, ERR_INVALID);
    struct report_writer neg;
    report_writer_init(&neg, fds[1], -1);
    T_CHECK(report_emit_done(&neg, &e) < 0);
    T_EQ_STR(e.field, "rank");
    /* over the line limit */
    size_t big = REPORT_MAX_LINE + 10;
    char *s = malloc(big + 1);
    memset(s, 'a', big);
    s[big] = '\0';
    T_CHECK(report_emit(&w, REPORT_ENV, json_pack("{s:{s:s}}", "env", "blob", s), &e) < 0);
    free(s);
    T_EQ_INT(e.code, ERR_TOO_LARGE);
    /* nothing reached the pipe */
    close(fds[1]);
    struct buf b;
    buf_init(&b);
    drain_fd(fds[0], &b);
    close(fds[0]);
    T_EQ_INT(b.len, 0);
    buf_free(&b);
}

static void test_report_emit_discard_and_dead_pipe(void)
{
    struct report_writer w;
    struct err e;
    report_writer_init(&w, -1, 1);
    T_OK(report_emit_hello(&w, 2, &e));
    T_OK(report_emit_done(&w, &e));

    int fds[2];
    T_CHECK(pipe(fds) == 0);
    close(fds[0]); /* the daemon is gone */
    void (*old)(int) = signal(SIGPIPE, SIG_IGN);
    report_writer_init(&w, fds[1], 1);
    int rc = report_emit_done(&w, &e);
    signal(SIGPIPE, old);
    close(fds[1]);
    T_CHECK(rc < 0);
    T_EQ_INT(e.code, ERR_PEER);

    int fd = open("/dev/null", O_RDONLY);
    T_CHECK(fd >= 0);
    report_writer_init(&w, fd, 1);
    rc = report_emit_done(&w, &e);
    close(fd);
    T_CHECK(rc < 0);
    T_EQ_INT(e.code, ERR_IO);
}

struct slow_reader {
    int fd;
    struct buf got;
};

static void *slow_reader_main(void *p)
{
    struct slow_reader *r = p;
    char chunk[3000];
    ssize_t n;
    usleep(50 * 1000); /* let the writer fill the pipe and block */
    while ((n = read(r->fd, chunk, sizeof chunk)) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        buf_append(&r->got, chunk, (size_t)n);
        usleep(200);
    }
    return NULL;
}

static void on_alarm(int sig)
{
    (void)sig;
}

/* A line several times the pipe's capacity, written while a timer keeps interrupting the
 * writer (no SA_RESTART): write() returns short counts or EINTR and the loop must still
 * deliver exactly one intact line. */
static void test_report_emit_large_line_interrupted(void)
{
    int fds[2];
    T_CHECK(pipe(fds) == 0);
    struct slow_reader r = {.fd = fds[0]};
    buf_init(&r.got);
    sigset_t alrm, old;
    sigemptyset(&alrm);
    sigaddset(&alrm, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &alrm, &old); /* the reader inherits the block */
    pthread_t th;
    T_CHECK(pthread_create(&th, NULL, slow_reader_main, &r) == 0);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    struct sigaction sa = {0}, old_sa;
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, &old_sa);
    struct itimerval tick = {{0, 2000}, {0, 2000}}, off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &tick, NULL);

    size_t big = 200 * 1024;
    char *s = malloc(big + 1);
    for (size_t i = 0; i < big; i++)
        s[i] = (char)('a' + i % 26);
    s[big] = '\0';
    struct report_writer w;
    struct err e;
    report_writer_init(&w, fds[1], 5);
    int rc = report_emit(&w, REPORT_ENV, json_pack("{s:{s:s}}", "env", "blob", s), &e);

    setitimer(ITIMER_REAL, &off, NULL);
    sigaction(SIGALRM, &old_sa, NULL);
    close(fds[1]);
    pthread_join(th, NULL);
    close(fds[0]);
    T_CHECK_MSG(rc == 0, "%s", e.msg);
    T_CHECK(r.got.len > big);
    T_EQ_INT(r.got.data[r.got.len - 1], '\n');
    enum report_type type;
    json_t *ev = report_parse_line((const char *)r.got.data, r.got.len - 1, &type, &e);
    buf_free(&r.got);
    T_CHECK_MSG(ev, "%s", e.msg);
    const char *blob = json_string_value(json_object_get(json_object_get(ev, "env"), "blob"));
    bool same = blob && strcmp(blob, s) == 0;
    json_decref(ev);
    free(s);
    T_EQ_INT(type, REPORT_ENV);
    T_CHECK(same);
}

/* Emits an event into a pipe and parses the line back: the owned event, or NULL. */
static json_t *observe_round_trip(int (*emit)(struct report_writer *, const void *,
                                              struct err *),
                                  const void *what, enum report_type want)
{
    int fds[2];
    struct err e = {0};
    if (pipe(fds) != 0)
        return NULL;
    struct report_writer w;
    report_writer_init(&w, fds[1], 1);
    int rc = emit(&w, what, &e);
    close(fds[1]);
    report_writer_cleanup(&w);
    struct buf b;
    buf_init(&b);
    drain_fd(fds[0], &b);
    close(fds[0]);
    enum report_type type;
    json_t *ev = rc == 0 && b.len > 0
                     ? report_parse_line((const char *)b.data, b.len - 1, &type, &e)
                     : NULL;
    buf_free(&b);
    if (ev && type != want) {
        json_decref(ev);
        ev = NULL;
    }
    if (!ev)
        fprintf(stderr, "    %s\n", e.msg);
    return ev;
}

static int emit_memory(struct report_writer *w, const void *x, struct err *e)
{
    return report_emit_memory(w, x, e);
}
static int emit_usage(struct report_writer *w, const void *x, struct err *e)
{
    return report_emit_usage(w, x, e);
}
static int emit_trace(struct report_writer *w, const void *x, struct err *e)
{
    return report_emit_trace(w, x, e);
}

/* memory, usage and trace round-trip through a pipe; a figure the engine cannot tell
 * (-1) is left out of the line and reads back as -1; the trace's arrays come back equal. */
static void test_report_observe_round_trip(void)
{
    struct err e = {0};
    struct report_memory m = {.repeat = 1,
                              .params_bytes = 246824,
                              .buffers_bytes = 0,
                              .grads_bytes = 123412,
                              .optimizer_bytes = 61708,
                              .comm_bytes = 400000,
                              .activations_bytes = -1,
                              .peak_rss_bytes = 50 << 20,
                              .device_peak_bytes = -1},
                         mb;
    json_t *ev = observe_round_trip(emit_memory, &m, REPORT_MEMORY);
    T_CHECK(ev && !json_object_get(ev, "activations_bytes") &&
            !json_object_get(ev, "device_peak_bytes"));
    T_OK(report_memory_from_json(ev, &mb, &e));
    T_CHECK(mb.repeat == 1 && mb.params_bytes == m.params_bytes && mb.buffers_bytes == 0 &&
            mb.grads_bytes == m.grads_bytes && mb.optimizer_bytes == m.optimizer_bytes &&
            mb.comm_bytes == m.comm_bytes && mb.activations_bytes == -1 &&
            mb.peak_rss_bytes == m.peak_rss_bytes && mb.device_peak_bytes == -1);
    json_decref(ev);

    struct report_usage u = {.repeat = 0,
                             .epoch = 2,
                             .steps = 40,
                             .wall_s = 1.5,
                             .user_s = 2.25,
                             .sys_s = 0.125,
                             .voluntary_cs = 7,
                             .involuntary_cs = 3,
                             .rss_bytes = 1 << 20,
                             .gpu_util_pct = 87.5,
                             .gpu_mem_util_pct = -1,
                             .gpu_power_w = 310.0},
                        ub;
    ev = observe_round_trip(emit_usage, &u, REPORT_USAGE);
    T_CHECK(ev && !json_object_get(ev, "gpu_mem_util_pct"));
    T_OK(report_usage_from_json(ev, &ub, &e));
    T_CHECK(memcmp(&u, &ub, sizeof u) == 0);
    json_decref(ev);

    json_t *spans = json_pack("[[s, I, I], [s, I, I]]", "step", (json_int_t)10, (json_int_t)90,
                              "forward", (json_int_t)12, (json_int_t)40);
    json_t *ops = json_pack("[[s, i, I, s, I, I]]", "allreduce", 2, (json_int_t)1 << 20, "ring",
                            (json_int_t)41, (json_int_t)80);
    struct report_trace t = {.repeat = 0,
                             .step = 7,
                             .clock_offset_ns = 1700000000000000000,
                             .spans = spans,
                             .ops = ops},
                        tb;
    ev = observe_round_trip(emit_trace, &t, REPORT_TRACE);
    T_CHECK(ev != NULL);
    T_OK(report_trace_from_json(ev, &tb, &e));
    T_CHECK(tb.step == 7 && tb.clock_offset_ns == t.clock_offset_ns);
    T_CHECK(json_equal(tb.spans, spans) && json_equal(tb.ops, ops));
    json_decref(ev);
    /* the caller's arrays are its own still */
    T_EQ_INT(json_array_size(spans), 2);
    json_decref(spans);
    json_decref(ops);
}

/* Each of the n lines is refused as ERR_INVALID naming field[i]. */
static void lines_refused(const char *const *bad, const char *const *field, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct err e = {0};
        enum report_type type;
        json_t *ev = report_parse_line(bad[i], strlen(bad[i]), &type, &e);
        T_CHECK_MSG(!ev && e.code == ERR_INVALID && strcmp(e.field, field[i]) == 0,
                    "line %zu: field '%s': %s", i, e.field, e.msg);
        json_decref(ev);
    }
}

/* A trace entry that is not what its array holds is refused naming the array and the
 * entry: an end before its start, a wrong arity, a negative time, a bucket below -1, a
 * long name; more than REPORT_TRACE_MAX entries; a memory figure below -1. */
static void test_report_observe_rejects(void)
{
    static const char *const bad[] = {
        "{\"type\":\"trace\",\"rank\":0,\"t\":1,\"repeat\":0,\"step\":0,\"clock_offset_ns\":0,"
        "\"spans\":[[\"step\",10,9]],\"ops\":[]}",
        "{\"type\":\"trace\",\"rank\":0,\"t\":1,\"repeat\":0,\"step\":0,\"clock_offset_ns\":0,"
        "\"spans\":[[\"step\",10]],\"ops\":[]}",
        "{\"type\":\"trace\",\"rank\":0,\"t\":1,\"repeat\":0,\"step\":0,\"clock_offset_ns\":0,"
        "\"spans\":[[\"step\",-1,9]],\"ops\":[]}",
        "{\"type\":\"trace\",\"rank\":0,\"t\":1,\"repeat\":0,\"step\":0,\"clock_offset_ns\":0,"
        "\"spans\":[],\"ops\":[[\"allreduce\",-2,4,\"ring\",1,2]]}",
        "{\"type\":\"trace\",\"rank\":0,\"t\":1,\"repeat\":0,\"step\":0,\"clock_offset_ns\":0,"
        "\"spans\":[[\"a-name-longer-than-twenty-four\",1,2]],\"ops\":[]}",
        "{\"type\":\"trace\",\"rank\":0,\"t\":1,\"repeat\":0,\"step\":0,\"clock_offset_ns\":0,"
        "\"spans\":{},\"ops\":[]}",
        "{\"type\":\"memory\",\"rank\":0,\"t\":1,\"repeat\":0,\"peak_rss_bytes\":1,"
        "\"params_bytes\":-5}",
        "{\"type\":\"memory\",\"rank\":0,\"t\":1,\"repeat\":0}",
        "{\"type\":\"usage\",\"rank\":0,\"t\":1,\"repeat\":0,\"epoch\":0,\"steps\":1,"
        "\"wall_s\":1,\"user_s\":1,\"sys_s\":0,\"voluntary_cs\":0,\"involuntary_cs\":0,"
        "\"gpu_util_pct\":\"high\"}",
    };
    static const char *const field[] = {"spans",        "spans",          "spans",
                                        "ops",          "spans",          "spans",
                                        "params_bytes", "peak_rss_bytes", "gpu_util_pct"};
    lines_refused(bad, field, sizeof bad / sizeof bad[0]);
    /* too many entries: refused at the source too */
    json_t *spans = json_array();
    for (int i = 0; i <= REPORT_TRACE_MAX; i++)
        json_array_append_new(spans, json_pack("[s, i, i]", "x", i, i + 1));
    json_t *ops = json_array();
    struct report_trace t = {.spans = spans, .ops = ops};
    struct report_writer w;
    report_writer_init(&w, -1, 0);
    struct err e = {0};
    T_CHECK(report_emit_trace(&w, &t, &e) < 0 && strcmp(e.field, "spans") == 0);
    report_writer_cleanup(&w);
    json_decref(spans);
    json_decref(ops);
}

static int emit_step(struct report_writer *w, const void *x, struct err *e)
{
    return report_emit_step(w, x, e);
}

/* A pipeline rank's step carries stage, p2p_ms, p2p_bytes and bubble_ms; a step without
 * them (-1: no pipeline) leaves them out of the line and reads them back as -1; a value of
 * the wrong type or below 0 is refused naming the field. */
/* Issue 33's step figures: grad_norm and loss_scale round-trip and, at -1, are left out;
 * skipped is written only when true and reads back false when absent; a bad value is
 * refused naming the field. */
static void test_report_step_precision(void)
{
    struct err e = {0};
    struct report_step s = {REPORT_STEP_NO_PIPELINE, .step = 3, .samples = 8, .step_ms = 2,
                            .skipped = true};
    s.grad_norm = 3.25;
    s.loss_scale = 32768;
    json_t *ev = observe_round_trip(emit_step, &s, REPORT_STEP);
    T_CHECK(ev && json_is_true(json_object_get(ev, "skipped")));
    struct report_step back;
    T_OK(report_step_from_json(ev, &back, &e));
    T_NEAR(back.grad_norm, 3.25, 0);
    T_NEAR(back.loss_scale, 32768, 0);
    T_CHECK(back.skipped);
    json_decref(ev);
    s.grad_norm = s.loss_scale = -1;
    s.skipped = false;
    ev = observe_round_trip(emit_step, &s, REPORT_STEP);
    T_CHECK(ev && !json_object_get(ev, "grad_norm") && !json_object_get(ev, "loss_scale") &&
            !json_object_get(ev, "skipped"));
    T_OK(report_step_from_json(ev, &back, &e));
    T_CHECK(back.grad_norm == -1 && back.loss_scale == -1 && !back.skipped);
    json_object_set_new(ev, "skipped", json_string("yes"));
    T_CHECK(report_step_from_json(ev, &back, &e) < 0);
    T_EQ_STR(e.field, "skipped");
    json_decref(ev);
}

static void test_report_step_pipeline(void)
{
    struct err e = {0};
    struct report_step s, sb;
    memset(&s, 0, sizeof s); /* padding too: whole structs compare */
    s.repeat = 1;
    s.epoch = 0;
    s.step = 12;
    s.samples = 16;
    s.loss = 2.5;
    s.data_ms = 0.25;
    s.forward_ms = 4;
    s.backward_ms = 8;
    s.comm_ms = 1;
    s.comm_exposed_ms = 0.5;
    s.optimizer_ms = 0.75;
    s.step_ms = 20;
    s.bytes_sent = 4096;
    s.stage = 1;
    s.p2p_ms = 3.5;
    s.p2p_bytes = INT64_C(1) << 33;
    s.bubble_ms = 6.5;
    s.gen = s.world = -1; /* not an elastic run */
    json_t *ev = observe_round_trip(emit_step, &s, REPORT_STEP);
    T_CHECK(ev && json_integer_value(json_object_get(ev, "stage")) == 1 &&
            json_is_real(json_object_get(ev, "p2p_ms")) &&
            json_integer_value(json_object_get(ev, "p2p_bytes")) == INT64_C(1) << 33);
    memset(&sb, 0xff, sizeof sb);
    T_OK(report_step_from_json(ev, &sb, &e));
    T_CHECK(memcmp(&s, &sb, sizeof s) == 0);
    json_decref(ev);
    /* stage 0 is a stage, not "absent" */
    s.stage = 0;
    s.bubble_ms = 0;
    ev = observe_round_trip(emit_step, &s, REPORT_STEP);
    T_CHECK(ev && json_integer_value(json_object_get(ev, "stage")) == 0 &&
            json_object_get(ev, "bubble_ms"));
    T_OK(report_step_from_json(ev, &sb, &e));
    T_CHECK(sb.stage == 0 && sb.bubble_ms == 0);
    json_decref(ev);
    /* no pipeline: the fields are absent and read back as -1 */
    s.stage = -1;
    s.p2p_ms = s.bubble_ms = -1;
    s.p2p_bytes = -1;
    ev = observe_round_trip(emit_step, &s, REPORT_STEP);
    T_CHECK(ev && !json_object_get(ev, "stage") && !json_object_get(ev, "p2p_ms") &&
            !json_object_get(ev, "p2p_bytes") && !json_object_get(ev, "bubble_ms"));
    T_OK(report_step_from_json(ev, &sb, &e));
    T_CHECK(sb.stage == -1 && sb.p2p_ms == -1 && sb.p2p_bytes == -1 && sb.bubble_ms == -1 &&
            sb.step_ms == 20 && sb.bytes_sent == 4096);
    json_decref(ev);
    static const char *const bad[] = {
        "\"stage\":\"1\"",  "\"stage\":-1",       "\"stage\":1.5",
        "\"p2p_ms\":\"x\"", "\"p2p_ms\":-0.5",    "\"p2p_bytes\":1.5",
        "\"p2p_bytes\":-2", "\"bubble_ms\":true", "\"bubble_ms\":-1"};
    static const char *const field[] = {"stage",     "stage",     "stage",
                                        "p2p_ms",    "p2p_ms",    "p2p_bytes",
                                        "p2p_bytes", "bubble_ms", "bubble_ms"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char line[512];
        snprintf(line, sizeof line,
                 "{\"type\":\"step\",\"rank\":1,\"t\":1,\"repeat\":0,\"epoch\":0,\"step\":3,"
                 "\"warmup\":false,\"samples\":8,\"loss\":1,\"step_ms\":2,%s}",
                 bad[i]);
        T_CHECK_MSG(line_rejected(line, strlen(line), ERR_INVALID, field[i]), "line %zu", i);
    }
    /* the worker refuses to write what the daemon would refuse */
    struct report_writer w;
    report_writer_init(&w, -1, 0);
    s.p2p_ms = NAN;
    T_CHECK(report_emit_step(&w, &s, &e) < 0 && strcmp(e.field, "p2p_ms") == 0);
    report_writer_cleanup(&w);
}

/* A pipeline trace's spans: forward, backward and p2p with a 4th element, the micro-batch
 * index, beside spans of three; round trip; a 4th element that is not an integer >= 0,
 * or a 5th, is refused naming spans. */
static void test_report_trace_micro_batches(void)
{
    struct err e = {0};
    json_t *spans = json_pack(
        "[[s, I, I], [s, I, I, i], [s, I, I, i], [s, I, I, i], [s, I, I]]", "step",
        (json_int_t)0, (json_int_t)900, "forward", (json_int_t)10, (json_int_t)100, 0, "p2p",
        (json_int_t)100, (json_int_t)150, 0, "backward", (json_int_t)400, (json_int_t)600, 3,
        "optimizer", (json_int_t)800, (json_int_t)900);
    json_t *ops = json_array();
    struct report_trace t = {.repeat = 0, .step = 2, .spans = spans, .ops = ops}, tb;
    json_t *ev = observe_round_trip(emit_trace, &t, REPORT_TRACE);
    T_CHECK(ev != NULL);
    T_OK(report_trace_from_json(ev, &tb, &e));
    T_CHECK(json_equal(tb.spans, spans));
    json_decref(ev);
    json_decref(spans);
    json_decref(ops);
    static const char *const bad[] = {"[\"forward\",1,2,-1]", "[\"forward\",1,2,\"0\"]",
                                      "[\"forward\",1,2,0.5]", "[\"forward\",1,2,0,1]",
                                      "[\"p2p\",5,2,0]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char line[256];
        snprintf(line, sizeof line,
                 "{\"type\":\"trace\",\"rank\":0,\"t\":1,\"repeat\":0,\"step\":0,"
                 "\"clock_offset_ns\":0,\"spans\":[%s],\"ops\":[]}",
                 bad[i]);
        T_CHECK_MSG(line_rejected(line, strlen(line), ERR_INVALID, "spans"), "line %zu", i);
    }
}

static int emit_grads(struct report_writer *w, const void *x, struct err *e)
{
    return report_emit_grads(w, x, e);
}

/* Gradient readiness round-trips; a tensor entry that is not [bytes, ready_ns] with both
 * >= 0, or steps below 1, is refused naming the field. */
static void test_report_grads(void)
{
    struct err e = {0};
    json_t *tensors = json_pack("[[I, I], [I, I]]", (json_int_t)40, (json_int_t)28554,
                                (json_int_t)64000, (json_int_t)101641);
    struct report_grads g = {.repeat = 2,
                             .steps = 10,
                             .backward_ns = 2648957,
                             .tensors = tensors},
                        gb;
    json_t *ev = observe_round_trip(emit_grads, &g, REPORT_GRADS);
    T_CHECK(ev != NULL);
    T_OK(report_grads_from_json(ev, &gb, &e));
    T_CHECK(gb.repeat == 2 && gb.steps == 10 && gb.backward_ns == 2648957);
    T_CHECK(json_equal(gb.tensors, tensors));
    json_decref(ev);
    json_decref(tensors);
    static const char *const bad[] = {
        "{\"type\":\"grads\",\"rank\":0,\"t\":1,\"repeat\":0,\"steps\":1,"
        "\"backward_ns\":5,\"tensors\":[[40,-1]]}",
        "{\"type\":\"grads\",\"rank\":0,\"t\":1,\"repeat\":0,\"steps\":1,"
        "\"backward_ns\":5,\"tensors\":[[40]]}",
        "{\"type\":\"grads\",\"rank\":0,\"t\":1,\"repeat\":0,\"steps\":0,"
        "\"backward_ns\":5,\"tensors\":[]}",
        "{\"type\":\"grads\",\"rank\":0,\"t\":1,\"repeat\":0,\"steps\":1,"
        "\"backward_ns\":5,\"tensors\":{}}",
    };
    static const char *const field[] = {"tensors", "tensors", "steps", "tensors"};
    lines_refused(bad, field, sizeof bad / sizeof bad[0]);
}

static int emit_pipe(struct report_writer *w, const void *x, struct err *e)
{
    return report_emit_pipe(w, x, e);
}

/* A pipeline's layer profile and cut round-trip; a layer that is not [forward_ns,
 * backward_ns, param_bytes] of integers >= 0, a cut that is not [first_layer, bytes], or
 * one stage are refused naming the field. */
static void test_report_pipe(void)
{
    struct err e = {0};
    json_t *layers = json_pack("[[I, I, I], [I, I, I]]", (json_int_t)300, (json_int_t)600,
                               (json_int_t)4096, (json_int_t)900, (json_int_t)1800,
                               (json_int_t)0);
    json_t *cuts = json_pack("[[I, I]]", (json_int_t)1, (json_int_t)65536);
    struct report_pipe p = {.repeat = 1,
                            .stages = 2,
                            .micro_batch = 4,
                            .tied_bytes = 1024,
                            .layers = layers,
                            .cuts = cuts,
                            .batch = 16,
                            .batch_forward_ns = 2000,
                            .batch_backward_ns = 4000},
                       pb;
    json_t *ev = observe_round_trip(emit_pipe, &p, REPORT_PIPE);
    T_CHECK(ev != NULL);
    T_OK(report_pipe_from_json(ev, &pb, &e));
    T_CHECK(pb.repeat == 1 && pb.stages == 2 && pb.micro_batch == 4 && pb.tied_bytes == 1024);
    T_CHECK(json_equal(pb.layers, layers) && json_equal(pb.cuts, cuts));
    T_CHECK(pb.batch == 16 && pb.batch_forward_ns == 2000 && pb.batch_backward_ns == 4000);
    json_decref(ev);
    /* the whole batch's timing is optional (a worker from before it): absent, -1 */
    p.batch = -1;
    p.batch_forward_ns = p.batch_backward_ns = -1;
    ev = observe_round_trip(emit_pipe, &p, REPORT_PIPE);
    T_CHECK(ev && !json_object_get(ev, "batch") && !json_object_get(ev, "batch_forward_ns"));
    T_OK(report_pipe_from_json(ev, &pb, &e));
    T_CHECK(pb.batch == -1 && pb.batch_forward_ns == -1 && pb.batch_backward_ns == -1);
    json_decref(ev);
    json_decref(layers);
    json_decref(cuts);
#define PIPE_LINE(st, lay, cut)                                                                \
    "{\"type\":\"pipe\",\"rank\":0,\"t\":1,\"repeat\":0,\"stages\":" st ",\"micro_batch\":2,"  \
    "\"tied_bytes\":0,\"layers\":" lay ",\"cuts\":" cut "}"
    static const char *const bad[] = {
        PIPE_LINE("2", "[[1,2]]", "[[1,8]]"),
        PIPE_LINE("2", "[[1,2,-3]]", "[[1,8]]"),
        PIPE_LINE("2", "[[1,2,3]]", "[[1]]"),
        PIPE_LINE("1", "[[1,2,3]]", "[]"),
        PIPE_LINE("2", "[[1,2,3]]", "[[1,8]],\"batch\":0"),
        PIPE_LINE("2", "[[1,2,3]]", "[[1,8]],\"batch_forward_ns\":\"5\""),
    };
#undef PIPE_LINE
    static const char *const field[] = {"layers", "layers", "cuts",
                                        "stages", "batch",  "batch_forward_ns"};
    lines_refused(bad, field, sizeof bad / sizeof bad[0]);
}

static int emit_epoch(struct report_writer *w, const void *x, struct err *e)
{
    return report_emit_epoch(w, x, e);
}

/* issue 33: an epoch's test_acc_per_class (fractions, null for an absent class) is written
 * and read back as the same array; left out when NULL; refused naming the field when it is
 * no array, holds a value outside [0, 1], a string, or more than REPORT_MAX_CLASSES
 * entries. A step's grad_norm, loss_scale and skipped are validated (a negative norm or a
 * non-bool skipped refused naming the field). */
static void test_report_epoch_per_class(void)
{
    struct err e = {0};
    json_t *per = json_pack("[f, f, n, f]", 0.5, 1.0, 0.0);
    struct report_epoch ep = {.epoch = 1,
                              .samples = 64,
                              .train_loss = 0.5,
                              .train_acc = 0.8,
                              .test_loss = 0.6,
                              .test_acc = 0.7,
                              .time_s = 1.5,
                              .test_acc_per_class = per},
                        back;
    json_t *ev = observe_round_trip(emit_epoch, &ep, REPORT_EPOCH);
    T_CHECK(ev != NULL);
    T_OK(report_epoch_from_json(ev, &back, &e));
    T_CHECK(back.test_acc_per_class && json_equal(back.test_acc_per_class, per));
    T_CHECK(json_array_size(back.test_acc_per_class) == 4 &&
            json_is_null(json_array_get(back.test_acc_per_class, 2)));
    json_decref(ev);
    json_decref(per);
    ep.test_acc_per_class = NULL; /* not evaluated: absent from the line */
    ev = observe_round_trip(emit_epoch, &ep, REPORT_EPOCH);
    T_CHECK(ev && !json_object_get(ev, "test_acc_per_class"));
    T_OK(report_epoch_from_json(ev, &back, &e));
    T_CHECK(back.test_acc_per_class == NULL);
    json_decref(ev);
    const char *head = "{\"type\":\"epoch\",\"rank\":0,\"t\":1,\"repeat\":0,\"epoch\":0,"
                       "\"samples\":8,\"time_s\":1,\"test_acc_per_class\":";
    static const char *const bad[] = {"{}", "[1.5]", "[-0.1]", "[\"0.5\"]", "0.5"};
    char line[16384];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(line, sizeof line, "%s%s}", head, bad[i]);
        T_CHECK_MSG(line_rejected(line, strlen(line), ERR_INVALID, "test_acc_per_class"), "%s",
                    bad[i]);
    }
    size_t n = (size_t)snprintf(line, sizeof line, "%s[", head);
    for (int c = 0; c <= REPORT_MAX_CLASSES; c++) /* one more than the bound */
        n += (size_t)snprintf(line + n, sizeof line - n, "%s0", c ? "," : "");
    snprintf(line + n, sizeof line - n, "]}");
    T_CHECK(line_rejected(line, strlen(line), ERR_INVALID, "test_acc_per_class"));
    snprintf(line, sizeof line, "%s[0, 0.25, null, 1]}", head);
    enum report_type type;
    ev = report_parse_line(line, strlen(line), &type, &e);
    T_CHECK_MSG(ev && type == REPORT_EPOCH, "%s", e.msg);
    json_decref(ev);
    const char *step = "{\"type\":\"step\",\"rank\":0,\"t\":1,\"repeat\":0,\"epoch\":0,"
                       "\"step\":3,\"warmup\":false,\"samples\":8,\"loss\":1,\"step_ms\":2,";
    snprintf(line, sizeof line, "%s\"grad_norm\":3.5,\"loss_scale\":65536,\"skipped\":true}",
             step);
    struct report_step st;
    ev = report_parse_line(line, strlen(line), &type, &e);
    T_CHECK_MSG(ev && type == REPORT_STEP, "%s", e.msg);
    T_OK(report_step_from_json(ev, &st, &e));
    T_CHECK(st.step == 3 && st.loss == 1);
    json_decref(ev);
    snprintf(line, sizeof line, "%s\"grad_norm\":-1}", step);
    T_CHECK(line_rejected(line, strlen(line), ERR_INVALID, "grad_norm"));
    snprintf(line, sizeof line, "%s\"skipped\":1}", step);
    T_CHECK(line_rejected(line, strlen(line), ERR_INVALID, "skipped"));
}

static int emit_elastic(struct report_writer *w, const void *x, struct err *e)
{
    return report_emit_elastic(w, x, e);
}

static int emit_elastic_step(struct report_writer *w, const void *x, struct err *e)
{
    return report_emit_step(w, x, e);
}

/* Elastic training's event carries its generation, world, members and the figures that
 * are known (-1: left out, except peer); an elastic run's step its gen and world, read
 * back; a step or event that breaks the shape is refused naming the field. */
static void test_report_elastic(void)
{
    int members[] = {0, 2, 3};
    struct report_elastic el = {.event = "regroup",
                                .gen = 2,
                                .world = 3,
                                .members = members,
                                .n_members = 3,
                                .commit_step = 40,
                                .lost_steps = -1,
                                .regroup_ms = 12.5,
                                .peer = -1};
    json_t *ev = observe_round_trip(emit_elastic, &el, REPORT_ELASTIC);
    T_CHECK(ev);
    T_EQ_STR(json_string_value(json_object_get(ev, "event")), "regroup");
    T_EQ_INT(json_integer_value(json_object_get(ev, "gen")), 2);
    T_EQ_INT(json_array_size(json_object_get(ev, "members")), 3);
    T_EQ_INT(json_integer_value(json_array_get(json_object_get(ev, "members"), 2)), 3);
    T_EQ_INT(json_integer_value(json_object_get(ev, "commit_step")), 40);
    T_CHECK(!json_object_get(ev, "lost_steps"));
    T_EQ_INT(json_integer_value(json_object_get(ev, "peer")), -1);
    json_decref(ev);
    struct report_step st = {
        REPORT_STEP_NO_PIPELINE, .step = 7,          .samples = 8,      .step_ms = 3,
        .data_ms = -1,           .forward_ms = -1,   .backward_ms = -1, .comm_ms = -1,
        .comm_exposed_ms = -1,   .optimizer_ms = -1, .bytes_sent = -1};
    st.gen = 1;
    st.world = 2;
    ev = observe_round_trip(emit_elastic_step, &st, REPORT_STEP);
    struct report_step back;
    struct err e;
    T_CHECK(ev && report_step_from_json(ev, &back, &e) == 0);
    T_EQ_INT(back.gen, 1);
    T_EQ_INT(back.world, 2);
    json_decref(ev);
    static const char *const bad[] = {
        "{\"type\":\"elastic\",\"rank\":0,\"t\":1,\"event\":\"detect\",\"gen\":0,"
        "\"world\":3,\"members\":[0,-1,2]}",
        "{\"type\":\"elastic\",\"rank\":0,\"t\":1,\"event\":\"detect\",\"gen\":0,"
        "\"world\":3}",
        "{\"type\":\"elastic\",\"rank\":0,\"t\":1,\"event\":\"detect\",\"gen\":0,"
        "\"world\":3,\"members\":[0],\"peer\":-2}",
    };
    static const char *const fields[] = {"members", "members", "peer"};
    for (size_t i = 0; i < 3; i++) {
        enum report_type type;
        json_t *v = report_parse_line(bad[i], strlen(bad[i]), &type, &e);
        T_CHECK_MSG(!v, "accepted %s", bad[i]);
        json_decref(v);
        T_EQ_STR(e.field, fields[i]);
    }
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_report_grads);
    TEST_RUN(test_report_pipe);
    TEST_RUN(test_report_emit_parse_every_type);
    TEST_RUN(test_report_type_names);
    TEST_RUN(test_report_rejects_malformed_lines);
    TEST_RUN(test_report_rejects_bad_collective_fields);
    TEST_RUN(test_report_env_nested);
    TEST_RUN(test_report_line_too_large);
    TEST_RUN(test_report_collective_round_trip);
    TEST_RUN(test_report_collective_rejects_bad_struct);
    TEST_RUN(test_report_emit_refuses_bad_events);
    TEST_RUN(test_report_emit_discard_and_dead_pipe);
    TEST_RUN(test_report_emit_large_line_interrupted);
    TEST_RUN(test_report_observe_round_trip);
    TEST_RUN(test_report_observe_rejects);
    TEST_RUN(test_report_step_pipeline);
    TEST_RUN(test_report_step_precision);
    TEST_RUN(test_report_elastic);
    TEST_RUN(test_report_epoch_per_class);
    TEST_RUN(test_report_trace_micro_batches);
    return test_end();
}
