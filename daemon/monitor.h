/* monitor: the life of one active run: prepares it (files, secret, store namespace),
 * spawns its ranks, supervises them (report pipes, exits, heartbeats, deadline, cancel)
 * and decides how the run ended. What a report line means is daemon/ingest.h's: the
 * monitor frames the lines of each rank's pipe and hands each to ingest_line.
 *
 * Decision: the monitor owns no thread. Its file descriptors (each rank's report pipe
 * and pidfd) are watched on the scheduler's loop (daemon/loop.h) with a struct
 * monitor_watch as the callback's context, so all run state is touched by one thread
 * and needs no locks. When a rank fails the others are stopped
 * (SIGTERM, SIGKILL after a grace period) and, once every rank has exited, the failure
 * is attributed to the rank that caused it: a rank that died on its own outranks one
 * that exited with an error of its own, which outranks ranks that merely saw a peer go
 * away or time out (those name the peer, which is then blamed).
 *
 * Under another launcher (spec launcher mpirun or srun, daemon/launch_plan.h) the daemon
 * starts one process, the launcher, and no rank: each rank connects the run's report
 * channel (daemon/channel.h), and the end of its connection is its exit (done, an
 * error, or neither: it died). The daemon signals the launcher's process group and the
 * ranks it can see on this node (by the pid each one reported, checked against
 * /proc/PID/environ), and the run ends only once the launcher itself has exited, so
 * nothing it started is left behind; a launcher that outlives its ranks by the kill
 * grace is killed. Heartbeats, the deadline, cancel and blame work as for forked ranks. */
#ifndef DDPB_MONITOR_H
#define DDPB_MONITOR_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "daemon/cluster.h"
#include "daemon/config.h"
#include "daemon/db.h"
#include "daemon/events.h"
#include "daemon/gpu_slots.h"
#include "daemon/loop.h"
#include "daemon/store_server.h"

struct monitor_ctx {
    struct db *db;              /* borrowed */
    struct store_server *store; /* borrowed */
    struct events *events;      /* borrowed; live events for SSE streams */
    const struct config *cfg;   /* borrowed */
    struct loop *loop;          /* borrowed: the scheduler's loop, where a run's fds are
                                     watched (callbacks run on its thread) */
    struct cluster *cluster;    /* borrowed: the nodes a run's ranks may go to */
};

struct active_run;

/* What a fd watched by the monitor stands for: the loop calls back with it. */
enum monitor_watch_kind {
    MONITOR_W_REPORT,   /* a rank's report pipe or report channel */
    MONITOR_W_EXIT,     /* a rank's pidfd */
    MONITOR_W_LAUNCHER, /* the pidfd of the run's launcher (mpirun, srun) */
    MONITOR_W_STORAGE,  /* the pidfd of a rank's ddpbench-fs (daemon/storage_mount.h) */
};
struct monitor_watch {
    struct loop_watch lw; /* the loop's registration, removed before the fd closes */
    struct active_run *run;
    int rank;
    enum monitor_watch_kind kind;
};

/* Starts queued run q on the given CPUs (cpus[rank], -1 = unpinned). Marks it starting,
 * writes its spec file, registers its store namespace and spawns every rank. Returns an
 * owned active run (monitor_free_run), also when a rank failed to start or q's spec
 * could not be parsed (q->spec_err: the run is then stopping and finishes through the
 * normal path, naming why); NULL only when the run could not be marked starting (e is
 * set; the run stays as it was). Its timeouts are q->spec's. */
/* CPU slots each rank of q takes: its parsed spec's threads, 1 without threads. */
int monitor_slots_per_rank(const struct db_queued_run *q);
/* cpus: monitor_slots_per_rank(q) entries per rank (rank r's from r * per), -1 = not
 * pinned; a rank is pinned to its list of CPUs (DDPB_CPUS). gpu: NULL for a CPU run; for
 * a device "cuda" run its placement (borrowed for the call): each rank gets the
 * environment gpu_slots_env makes for it, and the placement is stored with the run. */
struct monitor_gpu {
    const struct gpu_plan *plan; /* borrowed */
    int nccl_version;            /* NCCL_VERSION_CODE the workers load; 0 = unknown */
};
/* rank_node: the cluster node id of each rank (0 = this node; ranks contiguous per
 * node), NULL = all here. A follower's ranks get one spawn command through the cluster
 * (daemon/cluster.h) and are then supervised from its events (monitor_remote_event). */
struct active_run *monitor_start_run(const struct monitor_ctx *ctx,
                                     const struct db_queued_run *q, const int *cpus,
                                     const struct monitor_gpu *gpu, const int *rank_node,
                                     struct err *e);
/* An event a follower sent for one of its ranks: {"spawned": {...}} | {"line": "..."} |
 * {"exit": {"code", "signal"}} (ev borrowed). */
void monitor_remote_event(struct active_run *r, int node, int rank, const json_t *ev);
/* Node `node` was lost or restarted: its ranks are gone, the run fails naming why. */
void monitor_node_lost(struct active_run *r, int node, const char *why);
/* The daemon shuts down and will not hear from followers again: their ranks count as
 * gone (they kill them when they find the leader restarted), so the run can end. */
void monitor_forget_remote(struct active_run *r);
/* Deadline and SIGKILL escalation; call at least every few hundred ms. */
void monitor_tick(struct active_run *r, int64_t now_ms);
/* Stops the run (SIGTERM now, SIGKILL after the grace period) and records why, with
 * which final status it will end and which rank (-1: none) caused it. The first stop
 * reason wins. */
void monitor_stop_run(struct active_run *r, enum db_run_status status, int rank,
                      const char *reason);
/* True once every rank exited and the outcome was stored. */
bool monitor_run_finished(const struct active_run *r);
int64_t monitor_run_id(const struct active_run *r);
int monitor_run_world_size(const struct active_run *r);
void monitor_free_run(struct active_run *r);

#endif
