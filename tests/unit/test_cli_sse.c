/* Unit tests for cli/sse: events as the daemon writes them, split across chunks at every
 * byte (the transport may cut anywhere, even between "\r" and "\n"), all three line
 * endings, comments (heartbeats), multi-line data, the format's edge rules (no data: no
 * event; one space after the colon is dropped), stopping from the callback, and the cap
 * on a line's length. */
#include "cli/sse.h"
#include "tests/unit/test.h"

#define MAX_EV 16

struct seen {
    int n;
    char type[MAX_EV][64];
    char id[MAX_EV][64];
    char data[MAX_EV][256];
    size_t len[MAX_EV];
    int stop_after; /* stop when this many were seen (0 = never) */
};

static int on_event(void *arg, const struct sse_event *ev)
{
    struct seen *s = arg;
    if (s->n < MAX_EV) {
        snprintf(s->type[s->n], sizeof s->type[0], "%s", ev->type);
        snprintf(s->id[s->n], sizeof s->id[0], "%s", ev->id);
        snprintf(s->data[s->n], sizeof s->data[0], "%s", ev->data);
        s->len[s->n] = ev->data_len;
    }
    s->n++;
    return s->stop_after && s->n >= s->stop_after ? 7 : 0;
}

/* Feeds text in pieces of `step` bytes (0 = all at once); returns sse_feed's last rc. */
static int feed(struct sse_parser *p, const char *text, size_t step, struct err *e)
{
    size_t n = strlen(text);
    if (step == 0)
        step = n ? n : 1;
    for (size_t off = 0; off < n; off += step) {
        size_t k = n - off < step ? n - off : step;
        int rc = sse_feed(p, text + off, k, e);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static const char daemon_text[] =
    ": connected\n"
    "id: 1\nevent: snapshot\ndata: {\"id\": 3, \"status\": \"queued\"}\n\n"
    "id: 2\nevent: run\ndata: {\"run\": 7, \"status\": \"running\"}\n\n"
    ": keep-alive\n\n"
    "id: 3\nevent: experiment\ndata: {\"id\": 3, \"status\": \"succeeded\"}\n\n";

static void test_sse_daemon_stream_any_split(void)
{
    size_t n = strlen(daemon_text);
    for (size_t cut = 0; cut <= n; cut++) { /* every two-chunk split */
        struct seen s = {0};
        struct sse_parser p;
        struct err e;
        sse_init(&p, on_event, &s);
        T_EQ_INT(sse_feed(&p, daemon_text, cut, &e), 0);
        T_EQ_INT(sse_feed(&p, daemon_text + cut, n - cut, &e), 0);
        T_CHECK_MSG(s.n == 3, "cut %zu: %d events", cut, s.n);
        T_EQ_STR(s.type[0], "snapshot");
        T_EQ_STR(s.id[0], "1");
        T_EQ_STR(s.data[0], "{\"id\": 3, \"status\": \"queued\"}");
        T_EQ_STR(s.type[1], "run");
        T_EQ_STR(s.type[2], "experiment");
        T_EQ_STR(s.id[2], "3");
        T_EQ_INT(p.comments, 2);
        T_EQ_STR(p.last_id, "3");
        sse_cleanup(&p);
    }
    struct seen s = {0};
    struct sse_parser p;
    struct err e;
    sse_init(&p, on_event, &s);
    T_EQ_INT(feed(&p, daemon_text, 1, &e), 0); /* byte by byte */
    T_EQ_INT(s.n, 3);
    T_EQ_STR(s.data[1], "{\"run\": 7, \"status\": \"running\"}");
    sse_cleanup(&p);
}

static void test_sse_line_endings(void)
{
    static const char *const texts[] = {
        "event: a\r\ndata: x\r\n\r\nevent: b\r\ndata: y\r\n\r\n",
        "event: a\rdata: x\r\revent: b\rdata: y\r\r",
        "event: a\ndata: x\r\n\revent: b\r\ndata: y\n\n",
    };
    for (size_t t = 0; t < 3; t++)
        for (size_t step = 0; step <= 3; step++) {
            struct seen s = {0};
            struct sse_parser p;
            struct err e;
            sse_init(&p, on_event, &s);
            T_EQ_INT(feed(&p, texts[t], step, &e), 0);
            T_CHECK_MSG(s.n == 2, "text %zu step %zu: %d events", t, step, s.n);
            T_EQ_STR(s.type[0], "a");
            T_EQ_STR(s.data[0], "x");
            T_EQ_STR(s.type[1], "b");
            T_EQ_STR(s.data[1], "y");
            sse_cleanup(&p);
        }
}

/* "\r" ends one chunk and "\n" starts the next: one line end, not an empty line too. */
static void test_sse_cr_lf_across_chunks(void)
{
    struct seen s = {0};
    struct sse_parser p;
    struct err e;
    sse_init(&p, on_event, &s);
    T_EQ_INT(sse_feed(&p, "data: one\r", 10, &e), 0);
    T_EQ_INT(sse_feed(&p, "\n", 1, &e), 0);
    T_EQ_INT(s.n, 0); /* the "\n" did not count as the blank line ending the event */
    T_EQ_INT(sse_feed(&p, "data: two\r", 10, &e), 0);
    T_EQ_INT(sse_feed(&p, "\n\r", 2, &e), 0); /* the lone "\r" is the blank line */
    T_EQ_INT(s.n, 1);
    T_EQ_STR(s.data[0], "one\ntwo");
    T_EQ_INT(sse_feed(&p, "\ndata: three\n\n", 14, &e), 0); /* that "\r"'s "\n" */
    T_EQ_INT(s.n, 2);
    T_EQ_STR(s.data[1], "three");
    sse_cleanup(&p);
}

static void test_sse_multiline_and_field_rules(void)
{
    struct seen s = {0};
    struct sse_parser p;
    struct err e;
    sse_init(&p, on_event, &s);
    const char *text =
        "data: first\ndata:second\ndata:  third\n\n" /* one space dropped, not two */
        "event: lonely\n\n"                          /* no data: not dispatched */
        "data\n\n"                                   /* a field without colon: empty data */
        "retry: 100\nunknown: x\ndata: y\nid: 9\n\n"
        "data: after\n\n";
    T_EQ_INT(feed(&p, text, 5, &e), 0);
    T_EQ_INT(s.n, 4);
    T_EQ_STR(s.data[0], "first\nsecond\n third");
    T_EQ_INT(s.len[0], strlen("first\nsecond\n third"));
    T_EQ_STR(s.type[0], "message");
    T_EQ_STR(s.data[1], "");
    T_EQ_INT(s.len[1], 0);
    T_EQ_STR(s.type[1], "message"); /* "lonely" was reset with its empty event */
    T_EQ_STR(s.data[2], "y");
    T_EQ_STR(s.id[2], "9");
    T_EQ_STR(s.id[3], ""); /* ids belong to their event; the last one is kept apart */
    T_EQ_STR(p.last_id, "9");
    T_EQ_INT(p.events, 4);
    sse_cleanup(&p);
}

static void test_sse_stop_from_callback(void)
{
    struct seen s = {.stop_after = 1};
    struct sse_parser p;
    struct err e;
    sse_init(&p, on_event, &s);
    T_EQ_INT(sse_feed(&p, daemon_text, strlen(daemon_text), &e), 7);
    T_EQ_INT(s.n, 1);
    sse_cleanup(&p);
}

static void test_sse_reset_drops_partial(void)
{
    struct seen s = {0};
    struct sse_parser p;
    struct err e;
    sse_init(&p, on_event, &s);
    T_EQ_INT(feed(&p, "event: half\ndata: cut off mid-", 0, &e), 0);
    sse_reset(&p); /* a new connection */
    T_EQ_INT(feed(&p, "data: whole\n\n", 0, &e), 0);
    T_EQ_INT(s.n, 1);
    T_EQ_STR(s.data[0], "whole");
    T_EQ_STR(s.type[0], "message");
    sse_cleanup(&p);
}

static void test_sse_line_cap(void)
{
    struct seen s = {0};
    struct sse_parser p;
    struct err e;
    sse_init(&p, on_event, &s);
    size_t n = 1 << 16;
    char *chunk = malloc(n);
    T_CHECK(chunk);
    memset(chunk, 'x', n);
    int rc = 0;
    for (size_t sent = 0; rc == 0 && sent <= SSE_MAX_LINE; sent += n)
        rc = sse_feed(&p, chunk, n, &e);
    free(chunk);
    T_EQ_INT(rc, -1);
    T_EQ_INT(e.code, ERR_TOO_LARGE);
    T_EQ_INT(s.n, 0);
    sse_cleanup(&p);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_sse_daemon_stream_any_split);
    TEST_RUN(test_sse_line_endings);
    TEST_RUN(test_sse_cr_lf_across_chunks);
    TEST_RUN(test_sse_multiline_and_field_rules);
    TEST_RUN(test_sse_stop_from_callback);
    TEST_RUN(test_sse_reset_drops_partial);
    TEST_RUN(test_sse_line_cap);
    return test_end();
}
