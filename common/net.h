/* net: TCP sockets with deadlines and an abort flag.
 *
 * Decision: every blocking transfer here is a poll(2) loop bounded by a monotonic
 * deadline and woken at least every NET_ABORT_POLL_MS to look at an abort flag, so no
 * caller can hang on a dead or stopped peer. All fds are close-on-exec (workers are
 * spawned by the daemon and must not inherit its sockets). */
#ifndef DDPB_NET_H
#define DDPB_NET_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define NET_ABORT_POLL_MS 100

/* "host:port" or "[v6]:port" into host (NUL-terminated) and port (1..65535, or 0 when
 * allow_zero). */
int net_split_hostport(const char *s, char *host, size_t hostlen, int *port, bool allow_zero,
                       struct err *e);
/* Listening socket bound to host:port (port 0 = ephemeral). Returns the fd (caller
 * owns it) or -1. SO_REUSEADDR, close-on-exec, blocking. backlog <= 0 asks for the
 * system's maximum (net.core.somaxconn): a server thousands of clients dial at once
 * needs it, since a full accept queue drops SYNs and the client retries only after 1 s. */
int net_listen(const char *host, int port, int backlog, struct err *e);
/* Port a bound socket listens on, -1 on error. */
int net_local_port(int fd);
/* Connects within timeout_ms (retrying refused connections until the deadline, since
 * peers start at different times when retry is true). Returns a blocking fd with
 * TCP_NODELAY (caller owns it) or -1. */
int net_connect(const char *host, int port, int timeout_ms, bool retry,
                const atomic_bool *abort_flag, struct err *e);
int net_set_nonblock(int fd, bool on);
int net_set_nodelay(int fd);
/* Accepts one connection within the deadline; returns the fd (caller owns) or -1. */
int net_accept(int lfd, int64_t deadline_ms, const atomic_bool *abort_flag, struct err *e);
/* Send/receive exactly n bytes before deadline_ms (monotonic ms, -1 = none). Work on
 * blocking and non-blocking fds. A peer that closes is ERR_PEER, a deadline
 * ERR_TIMEOUT, a raised abort flag ERR_ABORTED. */
int net_send_all(int fd, const void *p, size_t n, int64_t deadline_ms,
                 const atomic_bool *abort_flag, struct err *e);
int net_recv_all(int fd, void *p, size_t n, int64_t deadline_ms, const atomic_bool *abort_flag,
                 struct err *e);
/* The local address (numeric) the kernel would send from to reach host:port: a
 * connected UDP socket's own address, so nothing is sent. Where a rank started on another
 * node listens for its peers (worker/store/rendezvous.h). 0, or -1 with e set. */
int net_route_addr(const char *host, int port, char *out, size_t cap, struct err *e);
/* Raises the soft RLIMIT_NOFILE to the hard limit; returns the new soft limit. */
long net_raise_nofile(void);

#endif
