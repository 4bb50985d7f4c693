/* channel: the report channel of a run whose ranks another launcher started (spec
 * launcher mpirun or srun): ranks the daemon did not fork have no report pipe, so each
 * connects to a listening socket the run opens and proves it belongs to the run with its
 * first line, {"channel": {"run", "rank", "secret", "pid", "host"}}; the connection then
 * carries the same report lines as a pipe (common/report.h), and its end is the rank's.
 *
 * Decisions:
 * - One listener per run, on the daemon's store address and a port the kernel picks,
 *   passed to the ranks as DDPB_REPORT: the run's state stays the monitor's, and a
 *   finished run's port is closed, so nothing can report into it late.
 * - A connection is nobody's until its first line arrives: it is read a byte at a time
 *   (the line is short and arrives once per rank), so nothing after the line is consumed
 *   here and the rank's reader sees every report line; a line over CHANNEL_MAX_HELLO
 *   bytes, one that is not the hello, a wrong secret (compared in constant time), a rank
 *   out of range or one already connected closes the connection. So does silence past
 *   CHANNEL_HELLO_MS, and at most CHANNEL_MAX_PENDING connections wait at once: garbage on
 *   the port costs a few fds for a few seconds, never the run.
 * - The listener and the waiting connections are watched on the monitor's loop, like the
 *   report pipes, so the callbacks touch the run without locks. */
#ifndef DDPB_CHANNEL_H
#define DDPB_CHANNEL_H

#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"
#include "daemon/loop.h"

#define CHANNEL_MAX_HELLO 1024
#define CHANNEL_HELLO_MS 10000
#define CHANNEL_MAX_PENDING 16

/* A proven connection of rank `rank`: the callee takes fd (non-blocking) and returns 0,
 * or returns -1 and the channel closes it (e.g. the rank is gone already). host is the
 * rank's host name as it said ("" when it did not), pid its process id there. */
typedef int (*channel_adopt_fn)(void *ctx, int rank, int fd, pid_t pid, const char *host);

struct channel;

/* Listens on host (port picked by the kernel) for run `run`'s ranks 0..world_size-1
 * with secret (both copied). adopt is called on loop's thread. Owned (channel_close), or
 * NULL with e set. */
struct channel *channel_open(struct loop *loop, const char *host, const char *run,
                             const char *secret, int world_size, channel_adopt_fn adopt,
                             void *ctx, struct err *e);
/* The port it listens on. */
int channel_port(const struct channel *c);
/* Drops connections that did not say who they are within CHANNEL_HELLO_MS. */
void channel_tick(struct channel *c, int64_t now_ms);
/* Rank `rank`'s connection ended and another process may now claim the rank (an elastic
 * run whose framework driver starts a replacement in a lost slot, daemon/monitor.c): its
 * next hello is accepted once. Out of range: a no-op. */
void channel_release(struct channel *c, int rank);
/* Connections closed for not proving themselves, for logs and tests. */
int channel_refused(const struct channel *c);
/* Stops listening and closes the waiting connections (not the adopted ones). NULL is a
 * no-op. */
void channel_close(struct channel *c);

#endif
