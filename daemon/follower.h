/* follower: a ddpbenchd started with --join URL. It holds no database and no queue: it
 * joins the leader (POST /v1/cluster/join with the cluster token), then syncs every
 * --sync-ms (POST /v1/cluster/sync): each sync is its heartbeat, carries its ranks'
 * events (spawned, every report line as written, exits) and brings back the commands for
 * it (spawn, signal) and the runs the leader wants alive here (daemon/cluster.h).
 *
 * Decisions:
 * - One thread: the follower's loop (daemon/loop.h) watches its ranks' report pipes and
 *   pidfds and runs the sync timer; a sync is a blocking libcurl call with a short timeout
 *   on that thread. A slow leader delays reading pipes by at most that timeout, and the
 *   pipes' buffers hold what the ranks write meanwhile; no locks are needed.
 * - It runs nothing but its own worker binary: a spawn command carries the run's
 *   parameters (spec, store, secret, placement) and the argv is built here by
 *   daemon/launcher.c (posix_spawn, no shell), with the same environment as on the leader.
 * - The runs list is obeyed literally: a local rank of a run the leader does not list is
 *   killed (a cancel elsewhere, a leader that restarted, a node taken as lost).
 * - A stale session (409) means the leader forgot us: rejoin, drop what was not sent
 *   (those runs are over on the leader), and let the new runs list clean up.
 * - SIGTERM drains: the follower says "draining" (the leader places nothing new here),
 *   its ranks run to their end with every line forwarded, then it leaves and exits. */
#ifndef DDPB_FOLLOWER_H
#define DDPB_FOLLOWER_H

#include <stdbool.h>

#include "common/err.h"
#include "daemon/config.h"

struct follower;

/* An owned follower that starts joining at once (its loop thread runs), or NULL with e
 * set. http_port: the port its own API listens on, told to the leader. */
struct follower *follower_start(const struct config *cfg, int http_port, struct err *e);
/* Asks it to drain (thread-safe): no new ranks, leave once its ranks are done. */
void follower_drain(struct follower *f);
/* True once it drained and left (or gave up leaving). */
bool follower_done(struct follower *f);
/* Kills its ranks, stops the loop, frees it. */
void follower_stop(struct follower *f);

/* A spawn of nranks ranks of per CPU slots each on a node with `slots` CPU slots of which
 * `used` are held: 0 when it fits; -1 with why ("was refused by node N: ...", the rank's
 * failure as the leader words it) when it would pass them (issue 31: a follower obeys no
 * spawn beyond its own slots, whoever sends it). Pure: unit-tested. */
int follower_spawn_refusal(const char *node, int used, int slots, int nranks, int per,
                           char *why, size_t cap);

#endif
