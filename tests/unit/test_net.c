/* Unit tests for common/net: address parsing, loopback transfer, deadlines and the
 * abort flag (a silent peer must produce ERR_TIMEOUT / ERR_ABORTED, never a hang), and a
 * closed peer (ERR_PEER); the local address towards a host (net_route_addr). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/net.h"
#include "tests/unit/test.h"

static void test_net_split_hostport(void)
{
    struct err e;
    char host[64];
    int port;
    T_OK(net_split_hostport("127.0.0.1:8080", host, sizeof host, &port, false, &e));
    T_EQ_STR(host, "127.0.0.1");
    T_EQ_INT(port, 8080);
    T_OK(net_split_hostport("[::1]:9", host, sizeof host, &port, false, &e));
    T_EQ_STR(host, "::1");
    T_EQ_INT(port, 9);
    T_OK(net_split_hostport("localhost:0", host, sizeof host, &port, true, &e));
    T_EQ_INT(port, 0);
    T_CHECK(net_split_hostport("localhost:0", host, sizeof host, &port, false, &e) < 0);
    T_CHECK(net_split_hostport("nocolon", host, sizeof host, &port, false, &e) < 0);
    T_EQ_INT(e.code, ERR_INVALID);
    T_CHECK(net_split_hostport("h:70000", host, sizeof host, &port, false, &e) < 0);
    T_CHECK(net_split_hostport("h:12x", host, sizeof host, &port, false, &e) < 0);
    T_CHECK(net_split_hostport(":80", host, sizeof host, &port, false, &e) < 0);
}

struct echo_arg {
    int lfd;
    size_t n;
};

static void *net_echo_thread(void *p)
{
    struct echo_arg *a = p;
    struct err e;
    int fd = net_accept(a->lfd, clock_mono_ms() + 5000, NULL, &e);
    if (fd < 0)
        return NULL;
    uint8_t *tmp = malloc(a->n);
    if (net_recv_all(fd, tmp, a->n, clock_mono_ms() + 5000, NULL, &e) == 0)
        net_send_all(fd, tmp, a->n, clock_mono_ms() + 5000, NULL, &e);
    free(tmp);
    close(fd);
    return NULL;
}

static void test_net_loopback_large_transfer(void)
{
    struct err e;
    int lfd = net_listen("127.0.0.1", 0, 16, &e);
    T_CHECK(lfd >= 0);
    int port = net_local_port(lfd);
    T_CHECK(port > 0);
    struct echo_arg a = {lfd, 8u << 20};
    pthread_t th;
    pthread_create(&th, NULL, net_echo_thread, &a);
    int fd = net_connect("127.0.0.1", port, 2000, false, NULL, &e);
    T_CHECK(fd >= 0);
    uint8_t *out = malloc(a.n), *in = malloc(a.n);
    for (size_t i = 0; i < a.n; i++)
        out[i] = (uint8_t)(i * 31 + 7);
    /* 8 MiB does not fit in socket buffers: the echo thread must receive all before it
     * sends, so send_all has to complete before recv_all starts. */
    T_OK(net_send_all(fd, out, a.n, clock_mono_ms() + 5000, NULL, &e));
    T_OK(net_recv_all(fd, in, a.n, clock_mono_ms() + 5000, NULL, &e));
    T_CHECK(memcmp(in, out, a.n) == 0);
    pthread_join(th, NULL);
    free(out);
    free(in);
    close(fd);
    close(lfd);
}

static void test_net_timeout_on_silent_peer(void)
{
    struct err e;
    int lfd = net_listen("127.0.0.1", 0, 16, &e);
    T_CHECK(lfd >= 0);
    int fd = net_connect("127.0.0.1", net_local_port(lfd), 2000, false, NULL, &e);
    T_CHECK(fd >= 0);
    int peer = net_accept(lfd, clock_mono_ms() + 2000, NULL, &e);
    T_CHECK(peer >= 0);
    char b[16];
    int64_t t0 = clock_mono_ms();
    T_CHECK(net_recv_all(fd, b, sizeof b, clock_mono_ms() + 200, NULL, &e) < 0);
    int64_t dt = clock_mono_ms() - t0;
    T_EQ_INT(e.code, ERR_TIMEOUT);
    T_CHECK_MSG(dt >= 180 && dt < 2000, "took %lld ms", (long long)dt);
    /* abort flag already raised: returns at once */
    atomic_bool flag = true;
    t0 = clock_mono_ms();
    T_CHECK(net_recv_all(fd, b, sizeof b, -1, &flag, &e) < 0);
    T_EQ_INT(e.code, ERR_ABORTED);
    T_CHECK(clock_mono_ms() - t0 < 500);
    /* peer closes: ERR_PEER */
    close(peer);
    T_CHECK(net_recv_all(fd, b, sizeof b, clock_mono_ms() + 2000, NULL, &e) < 0);
    T_EQ_INT(e.code, ERR_PEER);
    close(fd);
    close(lfd);
}

static void test_net_connect_refused_and_retry_deadline(void)
{
    struct err e;
    int lfd = net_listen("127.0.0.1", 0, 1, &e);
    T_CHECK(lfd >= 0);
    int port = net_local_port(lfd);
    close(lfd); /* nothing listens there now */
    T_CHECK(net_connect("127.0.0.1", port, 1000, false, NULL, &e) < 0);
    int64_t t0 = clock_mono_ms();
    T_CHECK(net_connect("127.0.0.1", port, 300, true, NULL, &e) < 0);
    int64_t dt = clock_mono_ms() - t0;
    T_EQ_INT(e.code, ERR_TIMEOUT);
    T_CHECK_MSG(dt >= 250 && dt < 3000, "took %lld ms", (long long)dt);
}

/* The address the kernel would send from: loopback is reached from loopback; a name
 * that does not resolve is refused naming it. */
static void test_net_route_addr(void)
{
    char out[64];
    struct err e = {0};
    T_CHECK_MSG(net_route_addr("127.0.0.1", 9, out, sizeof out, &e) == 0, "%s", e.msg);
    T_EQ_STR(out, "127.0.0.1");
    T_CHECK_MSG(net_route_addr("localhost", 9, out, sizeof out, &e) == 0, "%s", e.msg);
    T_CHECK(strcmp(out, "127.0.0.1") == 0 || strcmp(out, "::1") == 0);
    e = (struct err){0};
    T_CHECK(net_route_addr("no-such-host.invalid", 9, out, sizeof out, &e) < 0);
    T_CHECK_MSG(strstr(e.msg, "no-such-host.invalid") != NULL, "%s", e.msg);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_net_split_hostport);
    TEST_RUN(test_net_loopback_large_transfer);
    TEST_RUN(test_net_timeout_on_silent_peer);
    TEST_RUN(test_net_connect_refused_and_retry_deadline);
    TEST_RUN(test_net_route_addr);
    return test_end();
}
