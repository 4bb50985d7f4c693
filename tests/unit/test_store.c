/* Unit tests for daemon/store_server + worker/store_client, in one process: the server's
 * epoll thread on an ephemeral port, clients on threads or raw sockets.
 *
 * Ordering is made deterministic through the server's request counter: before a test
 * writes the key another client blocks on, it waits until the server has counted (and so
 * parked) the blocking request. Timing assertions are bounds with wide margins. The
 * handshake-timeout probe is opened first and checked last, so the 10 s the server
 * grants a silent connection overlap the other tests instead of adding to them. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/net.h"
#include "common/store_proto.h"
#include "daemon/store_server.h"
#include "tests/unit/test.h"
#include "worker/store/store_client.h"

#define RUN "run-1"
#define SECRET "sesame"

struct fixture {
    struct store_server *s;
    char addr[64];
    int port;
};

static int fx_start(struct fixture *fx, struct err *e)
{
    fx->s = store_server_create("127.0.0.1", 0, e);
    if (!fx->s)
        return -1;
    fx->port = store_server_port(fx->s);
    snprintf(fx->addr, sizeof fx->addr, "127.0.0.1:%d", fx->port);
    return store_server_add_run(fx->s, RUN, SECRET, e);
}

static struct store_client *fx_client(const struct fixture *fx, struct err *e)
{
    return store_client_connect(fx->addr, RUN, SECRET, 0, 5000, NULL, e);
}

/* Server plus one client of RUN; NULL with e set when either fails. */
static struct store_client *fx_start_client(struct fixture *fx, struct err *e)
{
    return fx_start(fx, e) < 0 ? NULL : fx_client(fx, e);
}

static void fx_stop(struct fixture *fx, struct store_client *c)
{
    store_client_destroy(c);
    store_server_destroy(fx->s);
}

static struct store_server_stats fx_stats(const struct fixture *fx)
{
    struct store_server_stats st;
    store_server_get_stats(fx->s, &st);
    return st;
}

/* Waits until the server counted `n` requests in total (so a blocking one is parked). */
static bool fx_wait_requests(const struct fixture *fx, uint64_t n)
{
    int64_t deadline = clock_mono_ms() + 10000;
    while (fx_stats(fx).requests < n) {
        if (clock_mono_ms() > deadline)
            return false;
        usleep(1000);
    }
    return true;
}

static bool fx_wait_clients(const struct fixture *fx, uint64_t n)
{
    int64_t deadline = clock_mono_ms() + 10000;
    while (fx_stats(fx).clients != n) {
        if (clock_mono_ms() > deadline)
            return false;
        usleep(1000);
    }
    return true;
}

/* ---- raw protocol helpers ---------------------------------------------------------- */

static int raw_connect(int port)
{
    struct err e;
    return net_connect("127.0.0.1", port, 5000, false, NULL, &e);
}

static int raw_send(int fd, const struct buf *b)
{
    struct err e;
    return net_send_all(fd, b->data, b->len, clock_mono_ms() + 5000, NULL, &e);
}

/* Reads one reply frame and decodes it for op; the body lives in *body. */
static int raw_recv(int fd, enum store_op op, struct buf *body, struct store_response *r,
                    int64_t deadline)
{
    struct err e;
    uint8_t hdr[4];
    if (net_recv_all(fd, hdr, 4, deadline, NULL, &e) < 0)
        return -1;
    uint32_t len = buf_load_u32(hdr);
    if (len > 4096)
        return -1;
    buf_reset(body);
    if (buf_reserve(body, len + 1) < 0 ||
        net_recv_all(fd, body->data, len, deadline, NULL, &e) < 0)
        return -1;
    body->len = len;
    return store_proto_decode_response(op, body->data, len, r, &e);
}

static int raw_hello(int fd, const char *run, const char *secret)
{
    struct buf b, body;
    struct store_response r;
    buf_init(&b);
    buf_init(&body);
    store_proto_encode_hello(&b, run, secret, 0);
    int rc = raw_send(fd, &b) < 0 ||
                     raw_recv(fd, STORE_OP_HELLO, &body, &r, clock_mono_ms() + 10000) < 0
                 ? -1
                 : (int)r.status;
    buf_free(&b);
    buf_free(&body);
    return rc;
}

/* Expects the server to answer `status` and then close the connection (before the
 * deadline); closes fd. */
static bool raw_expect_closed_by(int fd, enum store_status status, int64_t deadline)
{
    struct buf body;
    struct store_response r;
    buf_init(&body);
    int rc = raw_recv(fd, STORE_OP_HELLO, &body, &r, deadline);
    bool ok = rc == 0 && r.status == status;
    buf_free(&body);
    uint8_t byte;
    struct err e;
    ok = ok && net_recv_all(fd, &byte, 1, deadline, NULL, &e) < 0 && e.code == ERR_PEER;
    close(fd);
    return ok;
}

static bool raw_expect_closed(int fd, enum store_status status)
{
    return raw_expect_closed_by(fd, status, clock_mono_ms() + 5000);
}

/* Sends raw bytes on a fresh connection. */
static int raw_send_bytes(int port, const void *p, size_t n)
{
    struct err e;
    int fd = raw_connect(port);
    if (fd >= 0 && net_send_all(fd, p, n, clock_mono_ms() + 5000, NULL, &e) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* ---- handshake timeout probe (begins first, checked last) -------------------------- */

static struct {
    struct fixture fx;
    int silent_fd, partial_fd;
    int64_t t0;
} probe = {.silent_fd = -1, .partial_fd = -1};

static void test_store_hello_timeout_begin(void)
{
    struct err e;
    T_OK(fx_start(&probe.fx, &e));
    probe.t0 = clock_mono_ms();
    probe.silent_fd = raw_connect(probe.fx.port);
    /* A length prefix announcing a small frame whose body never comes. */
    const uint8_t partial[] = {20, 0, 0, 0, STORE_OP_HELLO, 0x44};
    probe.partial_fd = raw_send_bytes(probe.fx.port, partial, sizeof partial);
    T_CHECK(probe.silent_fd >= 0 && probe.partial_fd >= 0);
    T_CHECK(fx_wait_clients(&probe.fx, 2));
}

static void test_store_hello_timeout_end(void)
{
    T_CHECK(probe.fx.s != NULL);
    T_CHECK(raw_expect_closed_by(probe.silent_fd, STORE_E_PROTOCOL, probe.t0 + 25000));
    int64_t elapsed = clock_mono_ms() - probe.t0;
    T_CHECK(raw_expect_closed_by(probe.partial_fd, STORE_E_PROTOCOL, probe.t0 + 25000));
    T_CHECK_MSG(elapsed >= 9500 && elapsed < 25000, "closed after %" PRId64 " ms", elapsed);
    T_CHECK(fx_wait_clients(&probe.fx, 0));
    T_EQ_INT(fx_stats(&probe.fx).rejected, 2);
    store_server_destroy(probe.fx.s);
}

/* ---- basic operations ------------------------------------------------------------- */

static void test_store_set_get(void)
{
    struct fixture fx;
    struct err e;
    struct store_client *c = fx_start_client(&fx, &e);
    T_CHECK_MSG(c != NULL, "%s", e.msg);
    char *v = NULL;
    size_t len = 0;
    T_OK(store_client_set_str(c, "a", "1", &e));
    T_OK(store_client_get(c, "a", 1000, &v, &len, &e));
    T_EQ_STR(v, "1");
    T_EQ_INT(len, 1);
    free(v);
    T_OK(store_client_set_str(c, "a", "overwritten", &e));
    T_OK(store_client_get(c, "a", 0, &v, &len, &e));
    T_EQ_STR(v, "overwritten");
    free(v);
    const uint8_t bin[] = {0, 1, 2, 0, 255};
    T_OK(store_client_set(c, "bin", bin, sizeof bin, &e));
    T_OK(store_client_get(c, "bin", 0, &v, &len, &e));
    T_CHECK(len == sizeof bin && memcmp(v, bin, len) == 0 && v[len] == '\0');
    free(v);
    T_OK(store_client_set(c, "empty", "", 0, &e));
    T_OK(store_client_get(c, "empty", 0, &v, &len, &e));
    T_EQ_INT(len, 0);
    free(v);
    /* A value of 4 MiB crosses many socket buffers both ways. */
    size_t big = 4u << 20;
    char *payload = malloc(big);
    for (size_t i = 0; i < big; i++)
        payload[i] = (char)('a' + i % 23);
    T_OK(store_client_set(c, "big", payload, big, &e));
    T_OK(store_client_get(c, "big", 0, &v, &len, &e));
    T_CHECK(len == big && memcmp(v, payload, big) == 0);
    free(v);
    free(payload);
    /* Bad arguments are refused locally; the connection stays usable. */
    T_CHECK(store_client_set_str(c, "", "x", &e) < 0);
    T_EQ_INT(e.code, ERR_INVALID);
    T_CHECK(store_client_set(c, "k", "x", STORE_MAX_VALUE + 1, &e) < 0);
    T_EQ_INT(e.code, ERR_TOO_LARGE);
    T_OK(store_client_ping(c, &e));
    fx_stop(&fx, c);
}

struct getter {
    struct store_client *c;
    const char *key;
    int timeout_ms;
    int rc;
    struct err e;
    char *value;
    int64_t elapsed_ms;
};

static void *getter_main(void *p)
{
    struct getter *g = p;
    int64_t t0 = clock_mono_ms();
    size_t len;
    g->rc = store_client_get(g->c, g->key, g->timeout_ms, &g->value, &len, &g->e);
    g->elapsed_ms = clock_mono_ms() - t0;
    return NULL;
}

static void test_store_get_blocks_until_set(void)
{
    struct fixture fx;
    struct err e;
    T_OK(fx_start(&fx, &e));
    struct store_client *writer = fx_client(&fx, &e);
    struct getter g = {.key = "late", .timeout_ms = 20000};
    g.c = fx_client(&fx, &e);
    T_CHECK(writer && g.c);
    uint64_t before = fx_stats(&fx).requests;
    pthread_t th;
    pthread_create(&th, NULL, getter_main, &g);
    T_CHECK(fx_wait_requests(&fx, before + 1)); /* the GET is parked */
    usleep(100 * 1000);
    T_OK(store_client_set_str(writer, "late", "finally", &e));
    pthread_join(th, NULL);
    T_CHECK_MSG(g.rc == 0, "%s", g.e.msg);
    T_EQ_STR(g.value, "finally");
    T_CHECK(g.elapsed_ms >= 90);
    free(g.value);
    store_client_destroy(writer);
    store_client_destroy(g.c);
    store_server_destroy(fx.s);
}

/* store_server_set: the daemon's own write wakes a client parked on the key (GET with
 * wait), a later GET reads it, a rewrite replaces it; unknown runs and oversized keys are
 * refused by name. */
static void test_store_server_set(void)
{
    struct fixture fx;
    struct err e;
    T_OK(fx_start(&fx, &e));
    struct getter g = {.key = "elastic/g1", .timeout_ms = 20000};
    g.c = fx_client(&fx, &e);
    T_CHECK(g.c);
    uint64_t before = fx_stats(&fx).requests;
    pthread_t th;
    pthread_create(&th, NULL, getter_main, &g);
    T_CHECK(fx_wait_requests(&fx, before + 1)); /* the GET is parked */
    usleep(50 * 1000);
    static const char gen[] = "{\"gen\":1,\"members\":[0,2]}";
    T_OK(store_server_set(fx.s, RUN, "elastic/g1", gen, strlen(gen), &e));
    pthread_join(th, NULL);
    T_CHECK_MSG(g.rc == 0, "%s", g.e.msg);
    T_EQ_STR(g.value, gen);
    free(g.value);
    T_OK(store_server_set(fx.s, RUN, "elastic/gen", "1", 1, &e));
    T_OK(store_server_set(fx.s, RUN, "elastic/gen", "2", 1, &e));
    char *v = NULL;
    size_t len = 0;
    T_OK(store_client_get(g.c, "elastic/gen", 0, &v, &len, &e));
    T_CHECK(v && len == 1 && v[0] == '2');
    free(v);
    T_CHECK(store_server_set(fx.s, "no-such-run", "k", "v", 1, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    T_CHECK(store_server_set(fx.s, RUN, "", "v", 1, &e) < 0);
    T_EQ_INT(e.code, ERR_INVALID);
    T_EQ_STR(e.field, "key");
    store_client_destroy(g.c);
    store_server_destroy(fx.s);
}

static void test_store_get_timeout(void)
{
    struct fixture fx;
    struct err e;
    struct store_client *c = fx_start_client(&fx, &e);
    T_CHECK_MSG(c != NULL, "%s", e.msg);
    char *v = NULL;
    size_t len;
    int64_t t0 = clock_mono_ms();
    T_CHECK(store_client_get(c, "never", 300, &v, &len, &e) < 0);
    int64_t elapsed = clock_mono_ms() - t0;
    T_EQ_INT(e.code, ERR_TIMEOUT);
    T_CHECK_MSG(elapsed >= 250 && elapsed < 5000, "timed out after %" PRId64 " ms", elapsed);
    T_CHECK(store_client_get(c, "never", 0, &v, &len, &e) < 0);
    T_EQ_INT(e.code, ERR_TIMEOUT);
    /* Still usable, and the expired waiter left nothing behind. */
    T_OK(store_client_ping(c, &e));
    T_OK(store_client_set_str(c, "never", "now", &e));
    T_OK(store_client_get(c, "never", 0, &v, &len, &e));
    T_EQ_STR(v, "now");
    free(v);
    fx_stop(&fx, c);
}

struct adder {
    const struct fixture *fx;
    int n;
    int failures;
};

static void *adder_main(void *p)
{
    struct adder *a = p;
    struct err e;
    struct store_client *c = fx_client(a->fx, &e);
    if (!c) {
        a->failures = a->n;
        return NULL;
    }
    for (int i = 0; i < a->n; i++) {
        int64_t v;
        if (store_client_add(c, "ctr", 1, &v, &e) < 0 || v < 1)
            a->failures++;
    }
    store_client_destroy(c);
    return NULL;
}

static void test_store_add(void)
{
    struct fixture fx;
    struct err e;
    T_OK(fx_start(&fx, &e));
    enum { NT = 12, PER = 150 };
    struct adder a[NT];
    pthread_t th[NT];
    for (int i = 0; i < NT; i++) {
        a[i] = (struct adder){.fx = &fx, .n = PER};
        pthread_create(&th[i], NULL, adder_main, &a[i]);
    }
    int failures = 0;
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        failures += a[i].failures;
    }
    T_EQ_INT(failures, 0);
    struct store_client *c = fx_client(&fx, &e);
    T_CHECK(c != NULL);
    int64_t v;
    T_OK(store_client_add(c, "ctr", 0, &v, &e));
    T_EQ_INT(v, NT * PER);
    T_OK(store_client_add(c, "ctr", -(NT * PER) - 5, &v, &e));
    T_EQ_INT(v, -5);
    char *s;
    size_t len;
    T_OK(store_client_get(c, "ctr", 0, &s, &len, &e));
    T_EQ_STR(s, "-5"); /* kept as decimal text */
    free(s);
    /* Non-integers and overflow are refused; the connection stays open. */
    T_OK(store_client_set_str(c, "text", "12abc", &e));
    T_CHECK(store_client_add(c, "text", 1, &v, &e) < 0);
    T_EQ_INT(e.code, ERR_CONFLICT);
    T_OK(store_client_set_str(c, "big", "9223372036854775807", &e));
    T_CHECK(store_client_add(c, "big", 1, &v, &e) < 0);
    T_EQ_INT(e.code, ERR_CONFLICT);
    T_OK(store_client_add(c, "big", -7, &v, &e));
    T_EQ_INT(v, INT64_MAX - 7);
    T_OK(store_client_set_str(c, "huge", "99999999999999999999", &e));
    T_CHECK(store_client_add(c, "huge", 1, &v, &e) < 0);
    T_OK(store_client_set_str(c, "min", "-9223372036854775808", &e));
    T_OK(store_client_add(c, "min", 1, &v, &e));
    T_EQ_INT(v, INT64_MIN + 1);
    T_OK(store_client_add(c, "fresh", 3, &v, &e)); /* missing counts as 0 */
    T_EQ_INT(v, 3);
    T_OK(store_client_ping(c, &e));
    fx_stop(&fx, c);
}

static void test_store_compare_set(void)
{
    struct fixture fx;
    struct err e;
    struct store_client *c = fx_start_client(&fx, &e);
    T_CHECK_MSG(c != NULL, "%s", e.msg);
    char *cur = NULL;
    T_CHECK(store_client_compare_set(c, "k", "x", "y", &cur, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    T_OK(store_client_compare_set(c, "k", "", "first", &cur, &e)); /* missing matches "" */
    T_EQ_STR(cur, "first");
    free(cur);
    T_OK(store_client_compare_set(c, "k", "wrong", "second", &cur, &e));
    T_EQ_STR(cur, "first"); /* mismatch: unchanged, current value returned */
    free(cur);
    T_OK(store_client_compare_set(c, "k", "first", "second", &cur, &e));
    T_EQ_STR(cur, "second");
    free(cur);
    T_OK(store_client_compare_set(c, "k", "second", "third", NULL, &e));
    char *v;
    size_t len;
    T_OK(store_client_get(c, "k", 0, &v, &len, &e));
    T_EQ_STR(v, "third");
    free(v);
    fx_stop(&fx, c);
}

static void test_store_check_and_delete(void)
{
    struct fixture fx;
    struct err e;
    struct store_client *c = fx_start_client(&fx, &e);
    T_CHECK_MSG(c != NULL, "%s", e.msg);
    const char *keys[] = {"x", "y"};
    int all = -1, existed = -1;
    T_OK(store_client_check(c, keys, 2, &all, &e));
    T_EQ_INT(all, 0);
    T_OK(store_client_set_str(c, "x", "1", &e));
    T_OK(store_client_check(c, keys, 2, &all, &e));
    T_EQ_INT(all, 0);
    T_OK(store_client_set_str(c, "y", "2", &e));
    T_OK(store_client_check(c, keys, 2, &all, &e));
    T_EQ_INT(all, 1);
    T_OK(store_client_delete(c, "x", &existed, &e));
    T_EQ_INT(existed, 1);
    T_OK(store_client_delete(c, "x", &existed, &e));
    T_EQ_INT(existed, 0);
    T_OK(store_client_check(c, keys, 2, &all, &e));
    T_EQ_INT(all, 0);
    char *v;
    size_t len;
    T_CHECK(store_client_get(c, "x", 0, &v, &len, &e) < 0);
    T_EQ_INT(e.code, ERR_TIMEOUT);
    fx_stop(&fx, c);
}

struct waiter {
    struct store_client *c;
    const char *const *keys;
    uint32_t n;
    int timeout_ms;
    int rc;
    struct err e;
    atomic_bool done;
};

static void *waiter_main(void *p)
{
    struct waiter *w = p;
    w->rc = store_client_wait(w->c, w->keys, w->n, w->timeout_ms, &w->e);
    atomic_store(&w->done, true);
    return NULL;
}

static void test_store_wait_several_keys(void)
{
    struct fixture fx;
    struct err e;
    T_OK(fx_start(&fx, &e));
    struct store_client *writer = fx_client(&fx, &e);
    static const char *const keys[] = {"w/a", "w/b", "w/c"};
    struct waiter w = {.keys = keys, .n = 3, .timeout_ms = 20000};
    w.c = fx_client(&fx, &e);
    T_CHECK(writer && w.c);
    T_OK(store_client_set_str(writer, "w/b", "present", &e));
    uint64_t before = fx_stats(&fx).requests;
    pthread_t th;
    pthread_create(&th, NULL, waiter_main, &w);
    T_CHECK(fx_wait_requests(&fx, before + 1));
    /* The waiter moves from key to key; deleting one it already passed must count. */
    T_OK(store_client_set_str(writer, "w/a", "1", &e));
    T_OK(store_client_delete(writer, "w/b", NULL, &e));
    T_OK(store_client_set_str(writer, "w/c", "3", &e));
    T_OK(store_client_ping(writer, &e)); /* a round trip after the wake-ups */
    T_CHECK(!atomic_load(&w.done));
    T_OK(store_client_set_str(writer, "w/b", "2", &e));
    pthread_join(th, NULL);
    T_CHECK_MSG(w.rc == 0, "%s", w.e.msg);
    /* A WAIT whose keys never all exist times out and leaves the connection usable. */
    const char *missing[] = {"w/a", "w/nope"};
    T_CHECK(store_client_wait(w.c, missing, 2, 200, &e) < 0);
    T_EQ_INT(e.code, ERR_TIMEOUT);
    T_OK(store_client_wait(w.c, keys, 3, 0, &e));
    store_client_destroy(writer);
    store_client_destroy(w.c);
    store_server_destroy(fx.s);
}

/* ---- runs: auth, isolation, removal ------------------------------------------------ */

static void test_store_auth_rejected(void)
{
    struct fixture fx;
    struct err e;
    T_OK(fx_start(&fx, &e));
    T_CHECK(store_client_connect(fx.addr, RUN, "wrong", 0, 5000, NULL, &e) == NULL);
    T_EQ_INT(e.code, ERR_UNAUTHORIZED);
    T_CHECK(store_client_connect(fx.addr, "no-such-run", SECRET, 0, 5000, NULL, &e) == NULL);
    T_EQ_INT(e.code, ERR_UNAUTHORIZED);
    T_CHECK(store_client_connect(fx.addr, RUN, SECRET "x", 0, 5000, NULL, &e) == NULL);
    T_EQ_INT(e.code, ERR_UNAUTHORIZED);
    /* Wrong version and magic, by hand. */
    struct buf b;
    buf_init(&b);
    store_proto_encode_hello(&b, RUN, SECRET, 0);
    b.data[9] = STORE_VERSION + 1;
    int fd = raw_connect(fx.port);
    T_CHECK(fd >= 0 && raw_send(fd, &b) == 0);
    T_CHECK(raw_expect_closed(fd, STORE_E_VERSION));
    b.data[9] = STORE_VERSION;
    b.data[5] ^= 0xff;
    fd = raw_connect(fx.port);
    T_CHECK(fd >= 0 && raw_send(fd, &b) == 0);
    T_CHECK(raw_expect_closed(fd, STORE_E_PROTOCOL));
    buf_free(&b);
    T_EQ_INT(fx_stats(&fx).rejected, 5);
    T_CHECK(fx_wait_clients(&fx, 0));
    store_server_destroy(fx.s);
}

static void test_store_runs_isolated(void)
{
    struct fixture fx;
    struct err e;
    T_OK(fx_start(&fx, &e));
    T_OK(store_server_add_run(fx.s, "run-2", "other", &e));
    T_CHECK(store_server_add_run(fx.s, "run-2", "again", &e) < 0);
    T_EQ_INT(e.code, ERR_CONFLICT);
    T_CHECK(store_server_add_run(fx.s, "", "x", &e) < 0);
    T_EQ_INT(e.code, ERR_INVALID);
    T_EQ_INT(fx_stats(&fx).runs, 2);
    struct store_client *a = fx_client(&fx, &e);
    struct store_client *b = store_client_connect(fx.addr, "run-2", "other", 1, 5000, NULL, &e);
    T_CHECK(a && b);
    /* run-1's secret does not open run-2. */
    T_CHECK(store_client_connect(fx.addr, "run-2", SECRET, 0, 5000, NULL, &e) == NULL);
    T_OK(store_client_set_str(a, "k", "one", &e));
    char *v;
    size_t len;
    T_CHECK(store_client_get(b, "k", 0, &v, &len, &e) < 0);
    T_EQ_INT(e.code, ERR_TIMEOUT);
    T_OK(store_client_set_str(b, "k", "two", &e));
    T_OK(store_client_get(a, "k", 0, &v, &len, &e));
    T_EQ_STR(v, "one");
    free(v);
    T_OK(store_client_get(b, "k", 0, &v, &len, &e));
    T_EQ_STR(v, "two");
    free(v);
    store_client_destroy(a);
    store_client_destroy(b);
    store_server_destroy(fx.s);
}

static void test_store_remove_run(void)
{
    struct fixture fx;
    struct err e;
    T_OK(fx_start(&fx, &e));
    T_OK(store_server_add_run(fx.s, "doomed", "pw", &e));
    struct store_client *keep = fx_client(&fx, &e);
    struct store_client *idle = store_client_connect(fx.addr, "doomed", "pw", 0, 5000, NULL,
                                                     &e);
    struct getter g = {.key = "never", .timeout_ms = 30000};
    g.c = store_client_connect(fx.addr, "doomed", "pw", 1, 5000, NULL, &e);
    T_CHECK(keep && idle && g.c);
    T_OK(store_client_set_str(idle, "secret-data", "x", &e));
    T_OK(store_client_set_str(keep, "survives", "y", &e));
    uint64_t before = fx_stats(&fx).requests;
    pthread_t th;
    pthread_create(&th, NULL, getter_main, &g);
    T_CHECK(fx_wait_requests(&fx, before + 1));
    T_EQ_INT(fx_stats(&fx).clients, 3);
    store_server_remove_run(fx.s, "doomed");
    /* Applied on return: its clients are gone from the count. */
    struct store_server_stats st = fx_stats(&fx);
    T_EQ_INT(st.clients, 1);
    T_EQ_INT(st.runs, 1);
    pthread_join(th, NULL);
    T_CHECK(g.rc < 0);
    T_CHECK_MSG(g.e.code == ERR_PEER && g.elapsed_ms < 20000, "%s", g.e.msg);
    T_CHECK(store_client_ping(idle, &e) < 0);
    T_CHECK(store_client_ping(idle, &e) < 0);
    store_server_remove_run(fx.s, "doomed"); /* unknown now: ignored */
    /* Re-created, the run starts empty; the other run is untouched. */
    T_OK(store_server_add_run(fx.s, "doomed", "pw2", &e));
    struct store_client *fresh = store_client_connect(fx.addr, "doomed", "pw2", 0, 5000, NULL,
                                                      &e);
    T_CHECK(fresh != NULL);
    char *v;
    size_t len;
    T_CHECK(store_client_get(fresh, "secret-data", 0, &v, &len, &e) < 0);
    T_EQ_INT(e.code, ERR_TIMEOUT);
    T_OK(store_client_get(keep, "survives", 0, &v, &len, &e));
    T_EQ_STR(v, "y");
    free(v);
    store_client_destroy(fresh);
    store_client_destroy(idle);
    store_client_destroy(g.c);
    store_client_destroy(keep);
    store_server_destroy(fx.s);
}

/* ---- hostile input ----------------------------------------------------------------- */

static void test_store_garbage_does_not_disturb(void)
{
    struct fixture fx;
    struct err e;
    T_OK(fx_start(&fx, &e));
    struct store_client *good = fx_client(&fx, &e);
    T_CHECK(good != NULL);
    T_OK(store_client_set_str(good, "k", "v", &e));
    /* An HTTP request: its first 4 bytes read as a huge length. */
    const char http[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    int fd = raw_send_bytes(fx.port, http, sizeof http - 1);
    T_CHECK(fd >= 0 && raw_expect_closed(fd, STORE_E_TOO_LARGE));
    const uint8_t huge[] = {0xff, 0xff, 0xff, 0xff, 1, 2, 3};
    fd = raw_send_bytes(fx.port, huge, sizeof huge);
    T_CHECK(fd >= 0 && raw_expect_closed(fd, STORE_E_TOO_LARGE));
    const uint8_t bad_op[] = {1, 0, 0, 0, 0x63};
    fd = raw_send_bytes(fx.port, bad_op, sizeof bad_op);
    T_CHECK(fd >= 0 && raw_expect_closed(fd, STORE_E_PROTOCOL));
    /* A valid request before HELLO. */
    struct buf b;
    buf_init(&b);
    store_proto_encode_ping(&b);
    fd = raw_connect(fx.port);
    T_CHECK(fd >= 0 && raw_send(fd, &b) == 0 && raw_expect_closed(fd, STORE_E_PROTOCOL));
    /* After a good HELLO: a huge length, then an undecodable body. */
    fd = raw_connect(fx.port);
    T_CHECK(fd >= 0 && raw_hello(fd, RUN, SECRET) == STORE_OK);
    T_CHECK(net_send_all(fd, huge, sizeof huge, clock_mono_ms() + 5000, NULL, &e) == 0);
    T_CHECK(raw_expect_closed(fd, STORE_E_TOO_LARGE));
    fd = raw_connect(fx.port);
    T_CHECK(fd >= 0 && raw_hello(fd, RUN, SECRET) == STORE_OK);
    const uint8_t truncated_set[] = {6, 0, 0, 0, STORE_OP_SET, 9, 0, 0, 0, 'k'};
    T_CHECK(net_send_all(fd, truncated_set, sizeof truncated_set, clock_mono_ms() + 5000, NULL,
                         &e) == 0);
    T_CHECK(raw_expect_closed(fd, STORE_E_PROTOCOL));
    /* Half a frame, then the peer goes away. */
    buf_reset(&b);
    store_proto_encode_hello(&b, RUN, SECRET, 0);
    fd = raw_send_bytes(fx.port, b.data, b.len / 2);
    T_CHECK(fd >= 0);
    close(fd);
    buf_free(&b);
    T_CHECK(fx_wait_clients(&fx, 1));
    T_EQ_INT(fx_stats(&fx).rejected, 6);
    char *v;
    size_t len;
    T_OK(store_client_get(good, "k", 0, &v, &len, &e));
    T_EQ_STR(v, "v");
    free(v);
    T_OK(store_client_ping(good, &e));
    store_client_destroy(good);
    store_server_destroy(fx.s);
}

/* Highest fd this process has open. */
static int max_open_fd(void)
{
    int hi = -1;
    for (int fd = 0; fd < 65536; fd++)
        if (fcntl(fd, F_GETFD) >= 0)
            hi = fd;
    return hi;
}

/* Lowers the soft fd limit to the highest open fd and fills the free slots below it, so
 * the process has no fd left. *fillers (malloc'd, freed by fds_release) gets the filler
 * fds; returns their count or -1. */
static int fds_exhaust(int **fillers, struct rlimit *saved)
{
    struct rlimit low;
    int hi = max_open_fd();
    getrlimit(RLIMIT_NOFILE, saved);
    low = *saved;
    low.rlim_cur = (rlim_t)hi + 1;
    *fillers = malloc(((size_t)hi + 1) * sizeof **fillers);
    if (!*fillers || setrlimit(RLIMIT_NOFILE, &low) < 0)
        return -1;
    int n = 0;
    while (n <= hi && ((*fillers)[n] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
        n++;
    return n;
}

static void fds_release(int *fillers, int n, const struct rlimit *saved)
{
    for (int i = 0; i < n; i++)
        close(fillers[i]);
    free(fillers);
    setrlimit(RLIMIT_NOFILE, saved);
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* Child: opens n connections that the server cannot accept, reports, waits to die.
 * Only system calls after fork(). */
static void emfile_child(int port, int n, int ready_fd, int hold_fd)
{
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(0x7f000001);
    for (int i = 0; i < n; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd >= 0)
            connect(fd, (struct sockaddr *)&sa, sizeof sa);
    }
    char byte = 1;
    if (write(ready_fd, &byte, 1) < 0)
        _exit(1);
    while (read(hold_fd, &byte, 1) > 0) {
    }
    _exit(0);
}

static void test_store_emfile_does_not_spin(void)
{
    struct fixture fx;
    struct err e;
    T_OK(fx_start(&fx, &e));
    int ready[2], hold[2];
    T_CHECK(pipe2(ready, O_CLOEXEC) == 0 && pipe2(hold, O_CLOEXEC) == 0);
    struct rlimit saved;
    int *fillers = NULL;
    int nfill = fds_exhaust(&fillers, &saved); /* no fd left for accept() */
    T_CHECK(nfill >= 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(ready[0]);
        close(hold[1]);
        emfile_child(fx.port, 64, ready[1], hold[0]);
    }
    char byte = 0;
    bool child_ready = pid > 0 && read(ready[0], &byte, 1) == 1;
    /* With 64 connections the server cannot take, the loop must idle, not spin. */
    usleep(200 * 1000);
    double cpu0 = cpu_seconds();
    int64_t t0 = clock_mono_ms();
    usleep(1000 * 1000);
    double cpu = cpu_seconds() - cpu0;
    double wall = (double)(clock_mono_ms() - t0) / 1000.0;
    fds_release(fillers, nfill, &saved);
    close(hold[1]);
    close(hold[0]);
    close(ready[0]);
    close(ready[1]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    T_CHECK(child_ready);
    T_CHECK_MSG(cpu < 0.5 * wall, "%.2f s CPU in %.2f s while out of fds", cpu, wall);
    T_CHECK(fx_stats(&fx).rejected >= 1); /* connections were shed, not left queued */
    /* With fds back, service resumes. */
    struct store_client *c = fx_client(&fx, &e);
    T_CHECK_MSG(c != NULL, "%s", e.msg);
    T_OK(store_client_ping(c, &e));
    fx_stop(&fx, c);
}

/* ---- a server that hangs ----------------------------------------------------------- */

/* Accepts `conns` connections one after another, answers HELLO and then never replies,
 * holding each connection until the client closes it. */
#define HUNG_HELLO_MAX 512 /* more than any HELLO body */

struct hung_server {
    int lfd;
    int conns;
};

static void *hung_server_main(void *p)
{
    struct hung_server *h = p;
    struct err e;
    struct buf ok;
    buf_init(&ok);
    store_proto_encode_ok(&ok);
    for (int i = 0; i < h->conns; i++) {
        int fd = net_accept(h->lfd, clock_mono_ms() + 10000, NULL, &e);
        if (fd < 0)
            break;
        uint8_t hdr[4], body[HUNG_HELLO_MAX];
        if (net_recv_all(fd, hdr, 4, clock_mono_ms() + 5000, NULL, &e) == 0 &&
            buf_load_u32(hdr) <= sizeof body &&
            net_recv_all(fd, body, buf_load_u32(hdr), clock_mono_ms() + 5000, NULL, &e) == 0 &&
            raw_send(fd, &ok) == 0) {
            /* Swallow requests until the client gives up and closes. */
            while (net_recv_all(fd, body, 1, clock_mono_ms() + 10000, NULL, &e) == 0) {
            }
        }
        close(fd);
    }
    buf_free(&ok);
    return NULL;
}

static void *raise_flag_later(void *p)
{
    usleep(200 * 1000);
    atomic_store((atomic_bool *)p, true);
    return NULL;
}

static void test_store_client_hung_server(void)
{
    struct err e;
    struct hung_server h = {.conns = 2};
    h.lfd = net_listen("127.0.0.1", 0, 4, &e);
    T_CHECK(h.lfd >= 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", net_local_port(h.lfd));
    pthread_t th;
    pthread_create(&th, NULL, hung_server_main, &h);
    /* No reply within timeout + I/O margin: ERR_TIMEOUT, and the connection is dropped
     * since a late reply would desynchronize it. */
    struct store_client *c = store_client_connect(addr, RUN, SECRET, 0, 5000, NULL, &e);
    T_CHECK_MSG(c != NULL, "%s", e.msg);
    store_client_set_io_timeout(c, 300);
    char *v;
    size_t len;
    int64_t t0 = clock_mono_ms();
    T_CHECK(store_client_get(c, "k", 100, &v, &len, &e) < 0);
    int64_t elapsed = clock_mono_ms() - t0;
    T_EQ_INT(e.code, ERR_TIMEOUT);
    T_CHECK_MSG(elapsed >= 350 && elapsed < 5000, "gave up after %" PRId64 " ms", elapsed);
    T_CHECK(store_client_ping(c, &e) < 0);
    T_EQ_INT(e.code, ERR_PEER);
    store_client_destroy(c);
    /* The abort flag ends a call that would otherwise block for a minute. */
    atomic_bool abort_flag = false;
    c = store_client_connect(addr, RUN, SECRET, 0, 5000, &abort_flag, &e);
    T_CHECK_MSG(c != NULL, "%s", e.msg);
    pthread_t raiser;
    pthread_create(&raiser, NULL, raise_flag_later, &abort_flag);
    t0 = clock_mono_ms();
    T_CHECK(store_client_get(c, "k", 60000, &v, &len, &e) < 0);
    elapsed = clock_mono_ms() - t0;
    pthread_join(raiser, NULL);
    T_EQ_INT(e.code, ERR_ABORTED);
    T_CHECK_MSG(elapsed < 5000, "aborted after %" PRId64 " ms", elapsed);
    store_client_destroy(c);
    pthread_join(th, NULL);
    close(h.lfd);
}

/* ---- barrier ---------------------------------------------------------------------- */

struct barrier_member {
    const struct fixture *fx;
    int rank;
    int64_t world;
    int rc;
    struct err e;
};

static void *barrier_member_main(void *p)
{
    struct barrier_member *m = p;
    struct store_client *c = store_client_connect(m->fx->addr, RUN, SECRET, m->rank, 5000, NULL,
                                                  &m->e);
    m->rc = -1;
    if (!c)
        return NULL;
    m->rc = store_client_barrier(c, "b/0", m->world, 20000, &m->e);
    if (m->rc == 0)
        m->rc = store_client_barrier(c, "b/1", m->world, 20000, &m->e);
    store_client_destroy(c);
    return NULL;
}

static void test_store_client_barrier(void)
{
    struct fixture fx;
    struct err e;
    T_OK(fx_start(&fx, &e));
    enum { N = 8 };
    struct barrier_member m[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        m[i] = (struct barrier_member){.fx = &fx, .rank = i, .world = N};
        pthread_create(&th[i], NULL, barrier_member_main, &m[i]);
    }
    int failed = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        if (m[i].rc != 0) {
            fprintf(stderr, "  rank %d: %s\n", i, m[i].e.msg);
            failed++;
        }
    }
    T_EQ_INT(failed, 0);
    /* One missing member: the barrier times out; reusing a full barrier is refused. */
    struct store_client *c = fx_client(&fx, &e);
    T_CHECK(c != NULL);
    T_CHECK(store_client_barrier(c, "short", 2, 200, &e) < 0);
    T_EQ_INT(e.code, ERR_TIMEOUT);
    T_CHECK(store_client_barrier(c, "b/0", N, 200, &e) < 0);
    T_EQ_INT(e.code, ERR_CONFLICT);
    fx_stop(&fx, c);
}

/* 1,000 barrier members: most are raw non-blocking-style connections driven by a few
 * threads (one thread per member would be 1,000 ASan threads), plus real clients using
 * store_client_barrier, all in one barrier on one server. */
#define BIG_WORLD 1000
#define BIG_DRIVERS 4
#define BIG_REAL 8
#define BIG_RAW_PER ((BIG_WORLD - BIG_REAL) / BIG_DRIVERS)

struct big_ctx {
    const struct fixture *fx;
    pthread_barrier_t connected, go;
};

struct big_driver {
    struct big_ctx *ctx;
    int fds[BIG_RAW_PER];
    int ok;
    char why[128];
};

static int big_request(int fd, struct buf *out, enum store_op op, struct buf *body,
                       struct store_response *r)
{
    if (raw_send(fd, out) < 0)
        return -1;
    buf_reset(out);
    return raw_recv(fd, op, body, r, clock_mono_ms() + 30000) < 0 || r->status != STORE_OK ? -1
                                                                                           : 0;
}

/* ADD, SET done when last, then WAIT without reading the reply (collected later). */
static int big_arrive(int fd, struct buf *out, struct buf *body)
{
    struct store_response r;
    static const char *const done[] = {"big/done"};
    store_proto_encode_add(out, "big/count", 1);
    if (big_request(fd, out, STORE_OP_ADD, body, &r) < 0)
        return -1;
    if (r.number == BIG_WORLD) {
        store_proto_encode_set(out, "big/done", "1", 1);
        if (big_request(fd, out, STORE_OP_SET, body, &r) < 0)
            return -1;
    }
    store_proto_encode_keys(out, STORE_OP_WAIT, done, 1, 30000);
    int rc = raw_send(fd, out);
    buf_reset(out);
    return rc;
}

static void big_driver_run(struct big_driver *d, struct buf *out, struct buf *body)
{
    int i;
    for (i = 0; i < BIG_RAW_PER; i++) {
        d->fds[i] = raw_connect(d->ctx->fx->port);
        if (d->fds[i] < 0 || raw_hello(d->fds[i], RUN, SECRET) != STORE_OK) {
            snprintf(d->why, sizeof d->why, "connect/hello %d failed", i);
            break;
        }
    }
    pthread_barrier_wait(&d->ctx->connected);
    pthread_barrier_wait(&d->ctx->go);
    if (i < BIG_RAW_PER)
        return;
    for (i = 0; i < BIG_RAW_PER; i++)
        if (big_arrive(d->fds[i], out, body) < 0) {
            snprintf(d->why, sizeof d->why, "arrival %d failed", i);
            return;
        }
    for (i = 0; i < BIG_RAW_PER; i++) {
        struct store_response r;
        if (raw_recv(d->fds[i], STORE_OP_WAIT, body, &r, clock_mono_ms() + 30000) < 0 ||
            r.status != STORE_OK) {
            snprintf(d->why, sizeof d->why, "wait %d failed", i);
            return;
        }
        d->ok++;
    }
}

static void *big_driver_main(void *p)
{
    struct big_driver *d = p;
    struct buf out, body;
    buf_init(&out);
    buf_init(&body);
    for (int i = 0; i < BIG_RAW_PER; i++)
        d->fds[i] = -1;
    big_driver_run(d, &out, &body);
    for (int i = 0; i < BIG_RAW_PER; i++)
        if (d->fds[i] >= 0)
            close(d->fds[i]);
    buf_free(&out);
    buf_free(&body);
    return NULL;
}

struct big_real {
    struct big_ctx *ctx;
    int rank;
    int rc;
    struct err e;
};

static void *big_real_main(void *p)
{
    struct big_real *m = p;
    struct store_client *c = store_client_connect(m->ctx->fx->addr, RUN, SECRET, m->rank, 5000,
                                                  NULL, &m->e);
    pthread_barrier_wait(&m->ctx->connected);
    pthread_barrier_wait(&m->ctx->go);
    m->rc = c ? store_client_barrier(c, "big", BIG_WORLD, 30000, &m->e) : -1;
    store_client_destroy(c);
    return NULL;
}

static void test_store_barrier_1000_clients(void)
{
    struct fixture fx;
    struct err e;
    T_OK(fx_start(&fx, &e));
    long nofile = net_raise_nofile();
    T_CHECK_MSG(nofile >= 2 * BIG_WORLD + 200, "RLIMIT_NOFILE %ld too low for %d clients",
                nofile, BIG_WORLD);
    struct big_ctx ctx = {.fx = &fx};
    unsigned parties = BIG_DRIVERS + BIG_REAL + 1;
    pthread_barrier_init(&ctx.connected, NULL, parties);
    pthread_barrier_init(&ctx.go, NULL, parties);
    struct big_driver drivers[BIG_DRIVERS];
    struct big_real real[BIG_REAL];
    pthread_t th[BIG_DRIVERS + BIG_REAL];
    int64_t t0 = clock_mono_ms();
    for (int i = 0; i < BIG_DRIVERS; i++) {
        drivers[i] = (struct big_driver){.ctx = &ctx};
        pthread_create(&th[i], NULL, big_driver_main, &drivers[i]);
    }
    for (int i = 0; i < BIG_REAL; i++) {
        real[i] = (struct big_real){.ctx = &ctx, .rank = i};
        pthread_create(&th[BIG_DRIVERS + i], NULL, big_real_main, &real[i]);
    }
    pthread_barrier_wait(&ctx.connected);
    uint64_t clients = fx_stats(&fx).clients;
    pthread_barrier_wait(&ctx.go);
    int ok = 0, real_ok = 0;
    for (int i = 0; i < BIG_DRIVERS + BIG_REAL; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < BIG_DRIVERS; i++) {
        ok += drivers[i].ok;
        if (drivers[i].why[0])
            fprintf(stderr, "  driver %d: %s\n", i, drivers[i].why);
    }
    for (int i = 0; i < BIG_REAL; i++) {
        real_ok += real[i].rc == 0;
        if (real[i].rc != 0)
            fprintf(stderr, "  real %d: %s\n", i, real[i].e.msg);
    }
    int64_t elapsed = clock_mono_ms() - t0;
    pthread_barrier_destroy(&ctx.connected);
    pthread_barrier_destroy(&ctx.go);
    T_EQ_INT(clients, BIG_WORLD);
    T_EQ_INT(ok, BIG_DRIVERS * BIG_RAW_PER);
    T_EQ_INT(real_ok, BIG_REAL);
    T_CHECK_MSG(elapsed < 20000, "barrier of %d took %" PRId64 " ms", BIG_WORLD, elapsed);
    struct store_client *c = fx_client(&fx, &e);
    T_CHECK(c != NULL);
    char *v;
    size_t len;
    T_OK(store_client_get(c, "big/count", 0, &v, &len, &e));
    T_EQ_STR(v, "1000");
    free(v);
    store_client_destroy(c);
    T_CHECK(fx_wait_clients(&fx, 0));
    store_server_destroy(fx.s);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_store_hello_timeout_begin);
    TEST_RUN(test_store_set_get);
    TEST_RUN(test_store_get_blocks_until_set);
    TEST_RUN(test_store_get_timeout);
    TEST_RUN(test_store_server_set);
    TEST_RUN(test_store_add);
    TEST_RUN(test_store_compare_set);
    TEST_RUN(test_store_check_and_delete);
    TEST_RUN(test_store_wait_several_keys);
    TEST_RUN(test_store_auth_rejected);
    TEST_RUN(test_store_runs_isolated);
    TEST_RUN(test_store_remove_run);
    TEST_RUN(test_store_garbage_does_not_disturb);
    TEST_RUN(test_store_emfile_does_not_spin);
    TEST_RUN(test_store_client_hung_server);
    TEST_RUN(test_store_client_barrier);
    TEST_RUN(test_store_barrier_1000_clients);
    TEST_RUN(test_store_hello_timeout_end);
    return test_end();
}
