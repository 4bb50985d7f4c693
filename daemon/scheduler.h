/* scheduler: the daemon's supervisor thread: takes queued runs from the database in
 * submission order, starts each when the node has enough free CPU slots for its ranks,
 * and drives every active run's monitor from one epoll loop.
 *
 * Decision: the queue lives in the database (runs with status 'queued'), not in memory,
 * so a restarted daemon continues it and the API needs no lock to enqueue: it inserts
 * and calls scheduler_wake. Strict FIFO: a run that does not fit blocks the ones behind
 * it, so a large run can never starve (a GPU run waits for its GPUs the same way). A
 * slot is a CPU of the daemon's affinity set;
 * each rank is pinned to its own CPU unless the node is configured with more slots than
 * CPUs (then ranks are not pinned, since pinning would stack them on the same cores). */
#ifndef DDPB_SCHEDULER_H
#define DDPB_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "daemon/cluster.h"
#include "daemon/config.h"
#include "daemon/db.h"
#include "daemon/events.h"
#include "daemon/store_server.h"

struct scheduler;

struct scheduler_stats {
    int slots_total, slots_free;
    int runs_active;
};

/* Starts the supervisor thread. db, store, events and cfg are borrowed and must outlive
 * it. The loop also sends the event streams' keep-alive every SCHED_KEEPALIVE_MS.
 * Returns an owned scheduler (scheduler_destroy) or NULL. */
/* cluster (borrowed): the leader's nodes, where ranks that do not fit here may go. */
struct scheduler *scheduler_create(const struct config *cfg, struct db *db,
                                   struct store_server *store, struct events *events,
                                   struct cluster *cluster, struct err *e);
/* What active runs end as when scheduler_destroy stops them: 'interrupted' unless this
 * says otherwise (a daemon whose Slurm job is ending: 'cancelled'). Call it from the
 * thread that then calls scheduler_destroy, before it (destroy's post to the loop orders
 * the two). why is copied. */
void scheduler_set_stop_status(struct scheduler *s, enum db_run_status status, const char *why);
/* Stops active runs (they end 'interrupted', or as set above), joins the thread, frees
 * everything. */
void scheduler_destroy(struct scheduler *s);
/* New runs were queued. Thread-safe, async-signal-safe. */
void scheduler_wake(struct scheduler *s);
/* Asks the supervisor to stop these active runs; they end 'cancelled' once their
 * workers are gone (SIGTERM, SIGKILL after the grace period), keeping what they stored.
 * Ids that are not active (any more) are ignored. Thread-safe; returns at once. */
int scheduler_cancel_runs(struct scheduler *s, const int64_t *ids, size_t n, struct err *e);
void scheduler_get_stats(struct scheduler *s, struct scheduler_stats *out);
int scheduler_slots_total(const struct scheduler *s);
/* Whether ranks of launcher (a spec's "launcher"; NULL or "" is ddpbench) may be placed on
 * followers: ddpbench's own always, mpirun when cfg has an --mpi-agent to start MPI's
 * daemon there; srun places its own ranks, and the others stay on this node. */
bool scheduler_launcher_spreads(const struct config *cfg, const char *launcher);
/* GPU slots of this node (config gpus; daemon/gpu_slots.h): device "cuda" runs take one
 * per rank, or one for all ranks when emulated, besides their CPU slots. */
int scheduler_gpus_total(const struct scheduler *s);

#endif
