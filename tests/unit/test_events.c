/* Unit tests for daemon/events: events reach the subscribers of their experiment and
 * the all-experiments ones, formatted as SSE; a read with nothing pending suspends and a
 * later publish resumes exactly once; a slow subscriber is capped and told it lagged;
 * shutdown ends every stream; concurrent publishers and readers lose nothing. */
#include <pthread.h>
#include <unistd.h>

#include "daemon/events.h"
#include "tests/unit/test.h"

struct probe {
    int suspended, resumed;
};

/* atomic: test_events_concurrent polls them from the reader while publishers resume */
static void on_suspend(void *arg)
{
    __atomic_add_fetch(&((struct probe *)arg)->suspended, 1, __ATOMIC_SEQ_CST);
}
static void on_resume(void *arg)
{
    __atomic_add_fetch(&((struct probe *)arg)->resumed, 1, __ATOMIC_SEQ_CST);
}

static void test_events_routing_and_format(void)
{
    struct events *h = events_create();
    struct probe pa = {0}, pb = {0}, pall = {0};
    struct events_sub *a = events_subscribe(h, 1, on_suspend, on_resume, &pa);
    struct events_sub *b = events_subscribe(h, 2, on_suspend, on_resume, &pb);
    struct events_sub *all = events_subscribe(h, 0, on_suspend, on_resume, &pall);
    T_EQ_INT(events_subscribers(h), 3);
    json_t *d = json_pack("{s:i}", "run", 5);
    events_publish(h, 1, "run", d);
    json_decref(d);
    char buf[512];
    long n = events_read(a, buf, sizeof buf - 1);
    T_CHECK(n > 0);
    buf[n] = '\0';
    T_EQ_STR(buf, "id: 1\nevent: run\ndata: {\"run\":5}\n\n");
    T_EQ_INT(events_read(b, buf, sizeof buf), 0); /* not its experiment: suspends */
    T_EQ_INT(pb.suspended, 1);
    T_CHECK(events_read(all, buf, sizeof buf) > 0);
    events_unsubscribe(a);
    events_unsubscribe(b);
    events_unsubscribe(all);
    T_EQ_INT(events_subscribers(h), 0);
    events_destroy(h);
}

static void test_events_suspend_resume(void)
{
    struct events *h = events_create();
    struct probe p = {0};
    struct events_sub *s = events_subscribe(h, 3, on_suspend, on_resume, &p);
    char buf[64];
    T_EQ_INT(events_read(s, buf, sizeof buf), 0);
    T_EQ_INT(p.suspended, 1);
    json_t *d = json_pack("{}");
    events_publish(h, 3, "x", d);
    T_EQ_INT(p.resumed, 1);
    events_publish(h, 3, "x", d); /* already awake: no second resume */
    T_EQ_INT(p.resumed, 1);
    json_decref(d);
    /* small reads get the text in pieces, all of it */
    size_t total = 0;
    long n;
    while ((n = events_read(s, buf, 7)) > 0)
        total += (size_t)n;
    T_EQ_INT(total, 2 * strlen("id: 1\nevent: x\ndata: {}\n\n"));
    events_heartbeat(h);
    n = events_read(s, buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = '\0';
    T_EQ_STR(buf, ": keepalive\n\n");
    events_shutdown(h);
    T_EQ_INT(events_read(s, buf, sizeof buf), -1); /* end of stream */
    events_unsubscribe(s);
    events_destroy(h);
}

static void test_events_slow_subscriber_is_capped(void)
{
    struct events *h = events_create();
    struct probe p = {0};
    struct events_sub *s = events_subscribe(h, 0, on_suspend, on_resume, &p);
    json_t *d = json_pack("{s:s}", "pad", "0123456789012345678901234567890123456789");
    for (int i = 0; i < 40000; i++) /* ~3 MiB of text, never read */
        events_publish(h, 1, "x", d);
    json_decref(d);
    char *buf = malloc(EVENTS_SUB_MAX_BYTES * 2);
    long n = events_read(s, buf, EVENTS_SUB_MAX_BYTES * 2);
    T_CHECK(n > 0 && (size_t)n <= EVENTS_SUB_MAX_BYTES + 128);
    buf[n - 1] = '\0';
    T_CHECK(strstr(buf, "event: lagged") != NULL);
    free(buf);
    events_unsubscribe(s);
    events_destroy(h);
}

struct pub_arg {
    struct events *h;
    int count;
};

static void *test_publisher(void *p)
{
    struct pub_arg *a = p;
    json_t *d = json_pack("{}");
    for (int i = 0; i < a->count; i++)
        events_publish(a->h, 1, "e", d);
    json_decref(d);
    return NULL;
}

/* Counts "\n\n" event ends; *prev carries the last byte over, since an event may end
 * across two reads. */
static size_t test_count_events(const char *buf, long n, char *prev)
{
    size_t k = 0;
    for (long i = 0; i < n; i++) {
        k += *prev == '\n' && buf[i] == '\n';
        *prev = buf[i];
    }
    return k;
}

/* The reader behaves as libmicrohttpd does: after a read that suspended, it waits to be
 * resumed. A lost wake-up would leave it waiting with events still to come. */
static void test_events_concurrent(void)
{
    struct events *h = events_create();
    struct probe p = {0};
    struct events_sub *s = events_subscribe(h, 1, on_suspend, on_resume, &p);
    pthread_t th[4];
    struct pub_arg a = {h, 500};
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, test_publisher, &a);
    size_t events = 0;
    char buf[4096], prev = 0;
    bool lost = false;
    while (events < 2000 && !lost) {
        long n = events_read(s, buf, sizeof buf);
        if (n > 0) {
            events += test_count_events(buf, n, &prev);
            continue;
        }
        int waited = 0; /* suspended: wait for the resume */
        while (__atomic_load_n(&p.resumed, __ATOMIC_SEQ_CST) <
                   __atomic_load_n(&p.suspended, __ATOMIC_SEQ_CST) &&
               waited < 3000) {
            usleep(1000);
            waited++;
        }
        lost = waited >= 3000;
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    T_CHECK(!lost);
    T_EQ_INT(events, 2000);
    events_unsubscribe(s);
    events_destroy(h);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_events_routing_and_format);
    TEST_RUN(test_events_suspend_resume);
    TEST_RUN(test_events_slow_subscriber_is_capped);
    TEST_RUN(test_events_concurrent);
    return test_end();
}
