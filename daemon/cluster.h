/* cluster: the leader's registry of the nodes of a cluster (docs/design.md §15). A follower
 * joins over HTTP with its cluster credential (POST /v1/cluster/join) and then syncs
 * (POST /v1/cluster/sync) every few hundred ms: each sync is its heartbeat, carries the
 * events of its ranks (spawned, report lines, exits) and takes back the commands queued
 * for it (spawn, signal) with the list of runs the leader wants alive there.
 *
 * Decisions:
 * - Every connection goes follower -> leader. A follower obeys only the leader it joined
 *   because it takes commands only from replies to its own requests; the leader needs no
 *   route to the follower's API.
 * - The registry is declarative about runs: the `runs` list of every sync reply is the
 *   whole set the leader wants alive on that node, and the follower kills any rank of a run
 *   not in it. A cancel, a lost node elsewhere, a leader restart (whose fresh registry
 *   wants nothing) all converge through that one rule.
 * - Thread split: HTTP threads call join/sync/leave/list under the registry's mutex; the
 *   scheduler's loop thread places runs (snapshot, reserve), queues commands, and takes
 *   the events and the nodes newly lost. Events are handed over in a queue and the loop is
 *   woken, so every run's state stays on the loop's thread (daemon/monitor.h).
 * - A follower's session is new at every join; a sync with a stale one (the leader
 *   restarted, or the node joined again since) is refused with "rejoin", and a node that
 *   joins again while the leader still counted ranks on it is handled as lost first: its
 *   old ranks are gone with the process that ran them.
 * - The nodes table (schema/009_cluster.sql) records what the registry knows; the leader
 *   is its only writer. Heartbeats are kept in memory and written when the state changes,
 *   always after the registry's mutex is released (a slow SQLite write must not hold up
 *   syncs).
 * - Credentials by role (issue 31): with --cluster-key a follower proves its node name
 *   with HMAC-SHA256(key, name) (daemon/credential.h) on every join, sync and leave, and
 *   the admin token is no cluster credential. Without a key the admin token is (the
 *   behaviour before, with a warning at start) and proves no node's name. Either way, a
 *   join under the name of a node that synced within the lost window must prove that
 *   name's identity, else 409 naming the node, which keeps its session and its runs.
 * - The 256 slots are not spent for good: a lost or left node can be removed
 *   (DELETE /v1/nodes/NAME), a join into a full registry takes the slot of the longest
 *   gone one, and a node that left more than 7 days ago is forgotten at start. */
#ifndef DDPB_CLUSTER_H
#define DDPB_CLUSTER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "daemon/config.h"
#include "daemon/db.h"

#define CLUSTER_MAX_NODES 256
#define CLUSTER_MAX_EVENTS 65536 /* events queued per sync, at most */
#define CLUSTER_MAX_ENGINES 16   /* rows of a follower's engine probe, at most */

struct cluster;

/* What the scheduler sees of a follower that takes new ranks (state up). */
struct cluster_slot_view {
    int id; /* the node's id in the registry (1.., 0 is the leader) */
    int free_slots;
};

/* An owned registry with the leader (cfg->node) as node 0, or NULL with e set. Earlier
 * followers stored in db are listed as lost until they join again. wake(ctx) is called,
 * from any thread, when events or lost nodes are waiting for the loop. */
struct cluster *cluster_create(const struct config *cfg, struct db *db, struct err *e);
void cluster_set_wake(struct cluster *c, void (*wake)(void *), void *ctx);
void cluster_destroy(struct cluster *c);

/* --- HTTP threads ----------------------------------------------------------------------- */

/* POST /v1/cluster/join: body (borrowed) is the follower's offer; cred (borrowed, may be
 * NULL) the bearer credential it sent. Returns 0 with *reply (owned) {"node_id",
 * "session", "leader", "sync_ms", "timeout_ms", "runs": []}, or -1: ERR_UNAUTHORIZED
 * (--cluster-key: cred is not the name's identity), ERR_CONFLICT (a live node has the
 * name and cred does not prove it; the registry is full). */
int cluster_join(struct cluster *c, const json_t *body, const char *cred, json_t **reply,
                 struct err *e);
/* POST /v1/cluster/sync: {"node_id", "session", "state", "events": [...]}. Returns 0 with
 * *reply (owned) {"commands": [...], "runs": [...]}; -1 with ERR_CONFLICT ("rejoin")
 * for a stale session, ERR_INVALID for a malformed body (nothing of it is taken). */
int cluster_sync(struct cluster *c, const json_t *body, const char *cred, json_t **reply,
                 struct err *e);
/* POST /v1/cluster/leave: {"node_id", "session"}: the node drained and goes (state left).
 * Sync and leave: with --cluster-key, cred must be the node's identity (ERR_UNAUTHORIZED). */
int cluster_leave(struct cluster *c, const json_t *body, const char *cred, struct err *e);
/* DELETE /v1/nodes/NAME: forgets a lost or left node (its slot and its row); ERR_NOT_FOUND,
 * or ERR_CONFLICT for the leader, a node up or draining, or one whose runs are still
 * being failed. */
int cluster_remove(struct cluster *c, const char *name, struct err *e);
/* GET /v1/nodes: an owned {"nodes": [...]} in registry order. */
json_t *cluster_list(struct cluster *c);
/* Counts for /healthz: nodes up (the leader included) and known. */
void cluster_count(struct cluster *c, int *up, int *known);
/* Per follower (leader excluded): {"node", "state", "engines": its probe, [] until its
 * first sync carried one}. New reference. */
json_t *cluster_engines(struct cluster *c);
/* 0 when every follower that is up runs the spec's engine with its backend (and mpi), as
 * its probe says (engines_row_check); else ERR_CONFLICT naming "engine", "backend" or
 * "mpi", the node and its reason. Borrows spec. */
int cluster_engine_check(struct cluster *c, const json_t *spec, struct err *e);

/* --- the scheduler's loop thread --------------------------------------------------------- */

/* Followers taking new ranks, in join order, with their free CPU slots; returns how many
 * were written to out (at most cap). */
int cluster_followers(struct cluster *c, struct cluster_slot_view *out, int cap);
/* Every node taking new ranks (the leader first, as id 0) with its whole CPU slots as
 * free_slots: what a run could ever get, for the check at submit. */
int cluster_capacity(struct cluster *c, struct cluster_slot_view *out, int cap);
/* Places world ranks of `per` CPU slots each on candidate nodes (free[i] slots each, in
 * order of preference): want_nodes/want_rpn are the spec's nodes/ranks_per_node (0: pack
 * onto as few as fit, the first candidate that holds them all, else the roomiest first).
 * Fills count[i] (ranks on candidate i, 0 for unused) and returns how many nodes it
 * uses; 0 when the candidates' free slots cannot hold it now. Pure: unit-tested. */
int cluster_place(int world, int per, int want_nodes, int want_rpn, const int *free, int ncand,
                  int *count);

/* Reserves (slots > 0) or releases (slots < 0) CPU slots of node id for a run. */
void cluster_reserve(struct cluster *c, int id, int slots);
/* The node's name into out ("" when id is unknown). */
void cluster_node_name(struct cluster *c, int id, char *out, size_t cap);
/* The address the node offered (its store address, where its ranks listen) into out
 * ("" when id is unknown): another launcher's host list names nodes by it. */
void cluster_node_address(struct cluster *c, int id, char *out, size_t cap);
/* The name of the node whose address is addr into out; false (out untouched) when no
 * node has it. */
bool cluster_name_at(struct cluster *c, const char *addr, char *out, size_t cap);
/* Queues cmd (stolen) for node id's next sync. */
void cluster_send(struct cluster *c, int id, json_t *cmd);
/* Adds (want) or removes run from the runs node id must keep alive. */
void cluster_want_run(struct cluster *c, int id, int64_t run, bool want);
/* Takes the queued events: an owned array of {"node": id, "run", "rank", and one of
 * "spawned", "line", "exit"}, in arrival order (empty when none). */
json_t *cluster_take_events(struct cluster *c);
/* Marks followers silent past the timeout lost, and takes the nodes that lost their ranks
 * since the last call (timed out, or joined again while holding runs) into ids; each
 * comes with its reason in why[i]. Returns how many (at most cap). */
int cluster_take_lost(struct cluster *c, int64_t now_ms, int *ids, char (*why)[160], int cap);

#endif
