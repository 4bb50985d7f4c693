/* Unit tests for daemon/channel: a rank that proves itself is adopted with the bytes after
 * its first line left unread on the connection; a wrong secret, another run, a rank out of
 * range, a rank already connected, garbage, an endless line and a connection that closes
 * early are refused; a silent connection is dropped at its deadline; more connections
 * than CHANNEL_MAX_PENDING at once are refused without touching the others. The channel
 * runs on a real loop thread, as in the daemon. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/net.h"
#include "daemon/channel.h"
#include "tests/unit/test.h"

struct adopted {
    atomic_int count;
    int rank[8], fd[8];
    pid_t pid[8];
    char host[8][64];
};

/* channel_adopt_fn: keeps the connection; rank 3 is "gone" and refused by the callee. */
static int test_adopt(void *ctx, int rank, int fd, pid_t pid, const char *host)
{
    struct adopted *a = ctx;
    if (rank == 3)
        return -1;
    int i = atomic_load(&a->count);
    a->rank[i] = rank;
    a->fd[i] = fd;
    a->pid[i] = pid;
    snprintf(a->host[i], sizeof a->host[i], "%s", host);
    atomic_store(&a->count, i + 1);
    return 0;
}

struct fixture {
    struct loop *loop;
    struct channel *ch;
    struct adopted a;
    int port;
};

static bool fixture_open(struct fixture *f)
{
    struct err e = {0};
    memset(f, 0, sizeof *f);
    f->loop = loop_create("channel", &e);
    f->ch = f->loop ? channel_open(f->loop, "127.0.0.1", "run-5", "feedbeef", 4, test_adopt,
                                   &f->a, &e)
                    : NULL;
    if (!f->ch || loop_start(f->loop, NULL, NULL, &e) < 0) {
        fprintf(stderr, "  fixture: %s\n", e.msg);
        return false;
    }
    f->port = channel_port(f->ch);
    return f->port > 0;
}

static void fixture_close_cb(void *ctx)
{
    channel_close(ctx);
}

static void fixture_close(struct fixture *f)
{
    struct err e = {0};
    if (f->ch)
        loop_call_sync(f->loop, fixture_close_cb, f->ch, &e);
    loop_destroy(f->loop);
    for (int i = 0; i < atomic_load(&f->a.count); i++)
        close(f->a.fd[i]);
}

static int dial(int port)
{
    struct err e = {0};
    return net_connect("127.0.0.1", port, 2000, false, NULL, &e);
}

static void say(int fd, const char *text)
{
    struct err e = {0};
    net_send_all(fd, text, strlen(text), -1, NULL, &e);
}

/* True when the daemon side closed fd within 3 s (a read returns 0 or fails). */
static bool closed_by_peer(int fd)
{
    struct timeval tv = {3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char c;
    return read(fd, &c, 1) <= 0;
}

static bool wait_count(struct adopted *a, int n)
{
    int64_t end = clock_mono_ms() + 3000;
    while (atomic_load(&a->count) < n && clock_mono_ms() < end)
        usleep(2000);
    return atomic_load(&a->count) == n;
}

#define HELLO(rank, secret)                                                                    \
    "{\"channel\": {\"run\": \"run-5\", \"rank\": " #rank ", \"secret\": \"" secret            \
    "\", \"pid\": 77, \"host\": \"n1\"}}\n"

static void test_channel_adopts_proven_rank(void)
{
    struct fixture f;
    T_CHECK(fixture_open(&f));
    int fd = dial(f.port);
    T_CHECK(fd >= 0);
    say(fd, HELLO(2, "feedbeef") "{\"type\":\"hello\"}\n");
    T_CHECK(wait_count(&f.a, 1));
    T_EQ_INT(f.a.rank[0], 2);
    T_EQ_INT(f.a.pid[0], 77);
    T_EQ_STR(f.a.host[0], "n1");
    char got[64] = "";
    ssize_t n = read(f.a.fd[0], got, sizeof got - 1); /* what followed the hello is there */
    T_CHECK(n > 0);
    got[n] = '\0';
    T_EQ_STR(got, "{\"type\":\"hello\"}\n");
    int again = dial(f.port); /* rank 2 a second time */
    say(again, HELLO(2, "feedbeef"));
    T_CHECK(closed_by_peer(again));
    close(again);
    close(fd);
    fixture_close(&f);
}

static void test_channel_refuses_impostors(void)
{
    static const char *const bad[] = {
        HELLO(1, "feedbeee"), /* secret */
        "{\"channel\": {\"run\": \"run-6\", \"rank\": 1, \"secret\": \"feedbeef\", "
        "\"pid\": 1}}\n",     /* run */
        HELLO(4, "feedbeef"), /* range */
        HELLO(-1, "feedbeef"),
        "{\"channel\": {\"run\": \"run-5\", \"rank\": \"1\", \"secret\": \"feedbeef\", "
        "\"pid\": 1}}\n",         /* type */
        "GET / HTTP/1.1\r\n\r\n", /* garbage */
        "{\"type\": \"hello\"}\n",
        HELLO(3, "feedbeef"), /* the callee refuses it */
    };
    struct fixture f;
    T_CHECK(fixture_open(&f));
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int fd = dial(f.port);
        T_CHECK(fd >= 0);
        say(fd, bad[i]);
        T_CHECK_MSG(closed_by_peer(fd), "case %zu", i);
        close(fd);
    }
    T_EQ_INT(atomic_load(&f.a.count), 0);
    int fd = dial(f.port); /* a line that never ends */
    char junk[CHANNEL_MAX_HELLO + 16];
    memset(junk, 'x', sizeof junk - 1);
    junk[sizeof junk - 1] = '\0';
    say(fd, junk);
    T_CHECK(closed_by_peer(fd));
    close(fd);
    fd = dial(f.port); /* proven ranks still get in */
    say(fd, HELLO(0, "feedbeef"));
    T_CHECK(wait_count(&f.a, 1));
    close(fd);
    fixture_close(&f);
}

struct tick_ctx {
    struct channel *ch;
    int64_t now;
};

static void tick_cb(void *ctx)
{
    struct tick_ctx *t = ctx;
    channel_tick(t->ch, t->now);
}

static void test_channel_drops_silent_and_excess(void)
{
    struct fixture f;
    T_CHECK(fixture_open(&f));
    int fds[CHANNEL_MAX_PENDING + 1];
    for (int i = 0; i <= CHANNEL_MAX_PENDING; i++)
        fds[i] = dial(f.port);
    T_CHECK(closed_by_peer(fds[CHANNEL_MAX_PENDING])); /* one too many */
    say(fds[0], "{\"chan");                            /* half a hello, then silence */
    struct err e = {0};
    struct tick_ctx t = {f.ch, clock_mono_ms() + CHANNEL_HELLO_MS + 1};
    T_CHECK(loop_call_sync(f.loop, tick_cb, &t, &e) == 0);
    for (int i = 0; i < CHANNEL_MAX_PENDING; i++)
        T_CHECK_MSG(closed_by_peer(fds[i]), "pending %d", i);
    for (int i = 0; i <= CHANNEL_MAX_PENDING; i++)
        close(fds[i]);
    int fd = dial(f.port); /* the slots are free again */
    say(fd, HELLO(1, "feedbeef"));
    T_CHECK(wait_count(&f.a, 1));
    close(fd);
    fixture_close(&f);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_channel_adopts_proven_rank);
    TEST_RUN(test_channel_refuses_impostors);
    TEST_RUN(test_channel_drops_silent_and_excess);
    return test_end();
}
