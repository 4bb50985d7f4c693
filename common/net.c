/* net: see net.h. IPv4 and IPv6 through getaddrinfo; poll loops with deadlines. */
#include "common/net.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"

int net_split_hostport(const char *s, char *host, size_t hostlen, int *port, bool allow_zero,
                       struct err *e)
{
    const char *colon;
    const char *h = s;
    size_t hl;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':')
            return err_set(e, ERR_INVALID, NULL, "bad address '%s': want [v6]:port", s);
        h = s + 1;
        hl = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return err_set(e, ERR_INVALID, NULL, "bad address '%s': want host:port", s);
        hl = (size_t)(colon - s);
    }
    if (hl == 0 || hl >= hostlen)
        return err_set(e, ERR_INVALID, NULL, "bad address '%s': host empty or too long", s);
    char *end;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (errno || *end || end == colon + 1 || p < (allow_zero ? 0 : 1) || p > 65535)
        return err_set(e, ERR_INVALID, NULL, "bad address '%s': port out of range", s);
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (int)p;
    return 0;
}

static struct addrinfo *net_resolve(const char *host, int port, bool passive, struct err *e)
{
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc != 0) {
        err_set(e, ERR_INVALID, NULL, "cannot resolve '%s': %s", host, gai_strerror(rc));
        return NULL;
    }
    return res;
}

int net_route_addr(const char *host, int port, char *out, size_t cap, struct err *e)
{
    struct addrinfo *res = net_resolve(host, port, false, e);
    if (!res)
        return -1;
    int rc = -1;
    for (struct addrinfo *ai = res; ai && rc < 0; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        struct sockaddr_storage me;
        socklen_t len = sizeof me;
        if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
            getsockname(fd, (struct sockaddr *)&me, &len) == 0 &&
            getnameinfo((struct sockaddr *)&me, len, out, (socklen_t)cap, NULL, 0,
                        NI_NUMERICHOST) == 0)
            rc = 0;
        if (fd >= 0)
            close(fd);
    }
    freeaddrinfo(res);
    if (rc < 0)
        err_set(e, ERR_INVALID, NULL, "no route to '%s' from this host", host);
    return rc;
}

/* The kernel's cap on a listen backlog (net.core.somaxconn): listen(2) silently cuts a
 * larger request down to it, so asking for it is asking for the most we can get. */
static int net_backlog_max(void)
{
    int v = 0;
    FILE *f = fopen("/proc/sys/net/core/somaxconn", "r");
    if (f) {
        if (fscanf(f, "%d", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v > 0 ? v : SOMAXCONN;
}

int net_listen(const char *host, int port, int backlog, struct err *e)
{
    if (backlog <= 0)
        backlog = net_backlog_max();
    struct addrinfo *res = net_resolve(host, port, true, e);
    if (!res)
        return -1;
    int fd = -1;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0)
            continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, backlog) == 0)
            break;
        err_errno(e, "bind/listen %s:%d", host, port);
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0 && e && e->code == ERR_OK)
        err_set(e, ERR_IO, NULL, "no usable address for %s:%d", host, port);
    return fd;
}

int net_local_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
        return -1;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return -1;
}

int net_set_nonblock(int fd, bool on)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -1;
    fl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
    return fcntl(fd, F_SETFL, fl);
}

int net_set_nodelay(int fd)
{
    int one = 1;
    return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static bool net_aborted(const atomic_bool *abort_flag)
{
    return abort_flag && atomic_load_explicit(abort_flag, memory_order_relaxed);
}

/* Waits for `events` on fd until the deadline, waking for the abort flag. Returns 1 when
 * ready, -1 with e set on timeout/abort/poll failure. */
static int net_wait_fd(int fd, short events, int64_t deadline_ms, const atomic_bool *abort_flag,
                       const char *what, struct err *e)
{
    for (;;) {
        if (net_aborted(abort_flag))
            return err_set(e, ERR_ABORTED, NULL, "%s: aborted", what);
        int left = clock_ms_left(deadline_ms);
        if (left == 0)
            return err_set(e, ERR_TIMEOUT, NULL, "%s: timed out", what);
        int slice = abort_flag && (left < 0 || left > NET_ABORT_POLL_MS) ? NET_ABORT_POLL_MS
                                                                         : left;
        struct pollfd pfd = {.fd = fd, .events = events};
        int rc = poll(&pfd, 1, slice);
        if (rc > 0)
            return 1;
        if (rc < 0 && errno != EINTR)
            return err_errno(e, "%s: poll", what);
    }
}

static int net_connect_once(const struct addrinfo *ai, int64_t deadline_ms,
                            const atomic_bool *abort_flag, struct err *e)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    ai->ai_protocol);
    if (fd < 0)
        return err_errno(e, "socket");
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        if (errno != EINPROGRESS) {
            err_errno(e, "connect");
            close(fd);
            return -1;
        }
        if (net_wait_fd(fd, POLLOUT, deadline_ms, abort_flag, "connect", e) < 0) {
            close(fd);
            return -1;
        }
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        if (soerr) {
            errno = soerr;
            err_errno(e, "connect");
            close(fd);
            return -1;
        }
    }
    net_set_nonblock(fd, false);
    net_set_nodelay(fd);
    return fd;
}

int net_connect(const char *host, int port, int timeout_ms, bool retry,
                const atomic_bool *abort_flag, struct err *e)
{
    int64_t deadline = timeout_ms < 0 ? -1 : clock_mono_ms() + timeout_ms;
    int backoff_ms = 10;
    for (;;) {
        struct addrinfo *res = net_resolve(host, port, false, e);
        if (!res)
            return -1;
        int fd = -1;
        for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next)
            fd = net_connect_once(ai, deadline, abort_flag, e);
        freeaddrinfo(res);
        if (fd >= 0)
            return fd;
        if (!retry || (e && (e->code == ERR_TIMEOUT || e->code == ERR_ABORTED)))
            return err_prefix(e, "%s:%d", host, port);
        int left = clock_ms_left(deadline);
        if (left == 0)
            return err_set(e, ERR_TIMEOUT, NULL, "connect %s:%d: no listener within %d ms",
                           host, port, timeout_ms);
        int nap = left < 0 || left > backoff_ms ? backoff_ms : left;
        usleep((useconds_t)nap * 1000);
        if (backoff_ms < 200)
            backoff_ms *= 2;
    }
}

int net_accept(int lfd, int64_t deadline_ms, const atomic_bool *abort_flag, struct err *e)
{
    for (;;) {
        if (net_wait_fd(lfd, POLLIN, deadline_ms, abort_flag, "accept", e) < 0)
            return -1;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) {
            net_set_nodelay(fd);
            return fd;
        }
        if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED)
            return err_errno(e, "accept");
    }
}

int net_send_all(int fd, const void *p, size_t n, int64_t deadline_ms,
                 const atomic_bool *abort_flag, struct err *e)
{
    const uint8_t *q = p;
    while (n > 0) {
        ssize_t w = send(fd, q, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            q += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (net_wait_fd(fd, POLLOUT, deadline_ms, abort_flag, "send", e) < 0)
                return -1;
            continue;
        }
        if (w < 0 && (errno == EPIPE || errno == ECONNRESET))
            return err_set(e, ERR_PEER, NULL, "send: peer closed the connection");
        return err_errno(e, "send");
    }
    return 0;
}

int net_recv_all(int fd, void *p, size_t n, int64_t deadline_ms, const atomic_bool *abort_flag,
                 struct err *e)
{
    uint8_t *q = p;
    while (n > 0) {
        ssize_t r = recv(fd, q, n, MSG_DONTWAIT);
        if (r > 0) {
            q += r;
            n -= (size_t)r;
            continue;
        }
        if (r == 0)
            return err_set(e, ERR_PEER, NULL, "recv: peer closed the connection");
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (net_wait_fd(fd, POLLIN, deadline_ms, abort_flag, "recv", e) < 0)
                return -1;
            continue;
        }
        if (errno == ECONNRESET)
            return err_set(e, ERR_PEER, NULL, "recv: connection reset by peer");
        return err_errno(e, "recv");
    }
    return 0;
}

long net_raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return -1;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    return (long)rl.rlim_cur;
}
