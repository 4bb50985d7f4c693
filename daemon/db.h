/* db: everything ddpbenchd stores, in one SQLite file (schema in schema/NNN_*.sql).
 *
 * Decision: one writer connection behind a mutex (every write is a short
 * BEGIN IMMEDIATE transaction) and a small pool of reader connections, in WAL mode, so
 * HTTP reads never wait behind the monitor's inserts and there is exactly one writer.
 * Statements are prepared once per connection and reused. Reads come back as jansson
 * objects built generically from result columns (column name → key; *_at columns as
 * ISO-8601 strings; JSON text columns decoded), so adding a column needs no new C; the
 * replies polled most (the list, an experiment, a run) are built the same way by
 * SQLite's JSON functions, as text; the figures results aggregate come back as typed rows
 * (db_get_experiment_data, db_rows.h).
 * Every function is thread-safe. Returned json_t are new references (caller decrefs). */
#ifndef DDPB_DB_H
#define DDPB_DB_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/columns.h"
#include "common/err.h"
#include "common/report.h"
#include "common/spec.h"
#include "daemon/perf.h"

struct db;

enum db_run_status {
    DB_RUN_QUEUED,
    DB_RUN_STARTING,
    DB_RUN_RUNNING,
    DB_RUN_SUCCEEDED,
    DB_RUN_FAILED,
    DB_RUN_CANCELLED,
    DB_RUN_INTERRUPTED,
};
const char *db_run_status_name(enum db_run_status s);

/* Opens (creating) the database at path, sets WAL / synchronous=NORMAL / busy timeout /
 * foreign keys, applies pending migrations. Returns an owned handle (db_close) or NULL. */
struct db *db_open(const char *path, struct err *e);
void db_close(struct db *db);
int db_schema_version(struct db *db);

/* --- experiments ------------------------------------------------------------------ */
struct db_new_run {
    const char *params_json; /* borrowed */
    const char *spec_json;   /* borrowed */
    int world_size;
    const char *network_profile; /* borrowed; NULL: the host network as is (migration 008) */
};
/* Inserts an experiment and all its runs (queued) in one transaction. */
int db_create_experiment(struct db *db, const char *name, const char *workload,
                         const char *spec_json, const struct db_new_run *runs, size_t n_runs,
                         int64_t *id_out, struct err *e);

struct db_experiment_filter {
    const char *status;                   /* NULL = any */
    const char *name;                     /* substring, NULL = any */
    const char *workload;                 /* NULL = any */
    const char *model;                    /* spec's model, NULL = any */
    double created_after, created_before; /* Unix seconds; 0 = unbounded */
    int64_t limit;                        /* 1..1000 */
    int64_t offset;                       /* >= 0 */
};
/* {"items": [experiment...], "total": N, "limit": L, "offset": O}, newest first, as
 * compact JSON text (owned, free()), built by SQLite: the list is the most polled reply
 * and its rows are sent as they are stored. */
char *db_list_experiments(struct db *db, const struct db_experiment_filter *f, struct err *e);
/* The experiment with "spec" and a page of its "runs" (each run without its results,
 * ordered by point): at most runs_limit from runs_offset, with "runs_total",
 * "runs_limit" and "runs_offset" beside them, so a client knows what it has not seen.
 * Returns owned JSON, or NULL with ERR_NOT_FOUND. */
json_t *db_get_experiment_page(struct db *db, int64_t id, int64_t runs_limit,
                               int64_t runs_offset, struct err *e);
/* The same page as compact JSON text built by SQLite in one statement (owned, free()). */
char *db_get_experiment_text(struct db *db, int64_t id, int64_t runs_limit, int64_t runs_offset,
                             struct err *e);
/* The same with every run (runs_limit SPEC_MAX_RUNS, the most an experiment has). */
json_t *db_get_experiment(struct db *db, int64_t id, struct err *e);
/* The run with "spec", "params", "ranks", "collectives", "epochs", "env", as compact
 * JSON text built by SQLite in one statement (owned, free()). ERR_NOT_FOUND. */
char *db_get_run_text(struct db *db, int64_t id, struct err *e);
/* The same reply as owned JSON, for callers that read its fields. */
json_t *db_get_run(struct db *db, int64_t id, struct err *e);
/* Steps of a run: {"columns": [...], "rows": [[...], ...]} (compact: runs have many),
 * optionally one rank (rank < 0 = all) and without warm-up steps. ERR_NOT_FOUND for a
 * missing run, and (field "rank") for a rank at or above the run's world size. */
json_t *db_get_steps(struct db *db, int64_t run_id, int rank, bool include_warmup,
                     struct err *e);

/* An experiment's figures as daemon/results.c aggregates them: typed rows, each filled
 * through a column table checked against its statement's column names (db_rows.h). */
/* A step's phases are common/columns.h's PHASES (enum phase, PHASE_N). */
/* One non-warm-up training step of a run, over its ranks. */
struct db_step_row {
    int repeat;
    int64_t step;
    double step_ms;           /* the slowest rank's: the step's time */
    double fastest_ms;        /* the fastest rank's */
    int64_t samples;          /* all ranks' (a pipeline's replica counted once per stage) */
    double phase_ms[PHASE_N]; /* mean over ranks, enum phase order */
    int64_t bytes_sent;       /* all ranks' */
    int ranks;                /* ranks that reported the step */
    /* Pipeline runs (migration 013), sums over the ranks that reported each; -1 (and a
     * count of 0) where none did, as in every step of a run without a pipeline */
    double bubble_ms;      /* idle time */
    double bubble_step_ms; /* step_ms of the ranks that reported bubble_ms */
    double p2p_ms;         /* point-to-point time, over p2p_ranks ranks */
    double p2p_bytes;      /* bytes sent point-to-point, over p2p_bytes_ranks ranks */
    int p2p_ranks, p2p_bytes_ranks;
    /* The data pipeline (migration 014), sums over the ranks that reported each; -1 (and a
     * count of 0) where none did */
    double loader_cpu_ms; /* the loader threads' CPU time, over loader_ranks ranks */
    double read_bytes;    /* bytes read from storage, over read_ranks ranks */
    int loader_ranks, read_ranks;
};
/* What a run's ranks held in one repeat: the largest rank's figure (the one a node's
 * memory must fit), -1 where no rank reported it (report.h struct report_memory). */
struct db_memory_row {
    int repeat;
    double params_bytes, buffers_bytes, grads_bytes, optimizer_bytes, comm_bytes;
    double activations_bytes, peak_rss_bytes, device_peak_bytes;
};
/* What a run's ranks used in one repeat, over every window, per rank: cores busy
 * ((user + sys) / wall), context switches per second; NVML means; -1 where unknown. */
struct db_usage_row {
    int repeat;
    double cpu_util, voluntary_cs_per_s, involuntary_cs_per_s;
    double gpu_util_pct, gpu_power_w;
};
/* When rank 0's gradients became final in one repeat (report.h struct report_grads). */
struct db_grads_row {
    int repeat;
    int64_t steps, backward_ns;
    json_t *tensors; /* owned by the row: [[bytes, ready_ns], ...] */
};
/* A pipeline run's layer profile and cut, from rank 0, per repeat (report.h struct
 * report_pipe; migration 022). */
struct db_pipe_row {
    int repeat, stages, micro_batch;
    int64_t tied_bytes;
    int batch; /* the whole batch's timing (migration 023); -1 each: not taken */
    int64_t batch_forward_ns, batch_backward_ns;
    json_t *layers; /* owned by the row: [[forward_ns, backward_ns, param_bytes], ...] */
    json_t *cuts;   /* owned by the row: [[first_layer, bytes], ...] */
};
/* What a fault cost a run (issue 32; migration 017), -1 where unknown: the fault's time
 * (the first injected fault's event, else the first lost slot's end; -1: none), the
 * generations formed after the launch's (-1: the run kept none), the first detection and
 * the first resumption after it minus its time, the steps redone, and the global samples
 * per second before the fault, from it to the resumption and after. */
struct db_elastic_fig {
    bool elastic, faulted; /* it kept generations; it had a fault: the figures below are
                              read only then (a zeroed struct is a run without either) */
    double fault_at;
    int64_t generations;
    double detect_s, resume_s, lost_steps;
    double thr_before, thr_during, thr_after;
};

struct db_data_run {
    int64_t id;
    json_t *params, *spec; /* owned: the swept values and the resolved spec */
    int world_size;
    bool emulated;                         /* its ranks shared one GPU */
    bool oversubscribed;                   /* it shared CPUs with other ranks (migration 007) */
    char network_profile[64];              /* the network it measured over; "": the host's */
    int nodes, ranks_per_node;             /* its placement (1 and world_size before 009) */
    struct report_collective *collectives; /* owned arrays, in (repeat, op, inplace, */
    size_t ncollectives;                   /* bytes) order */
    struct db_step_row *steps;             /* (repeat, step) order */
    size_t nsteps;
    struct report_epoch *epochs;  /* (repeat, epoch) order; test figures -1 */
    size_t nepochs;               /* when not evaluated */
    struct db_memory_row *memory; /* repeat order (migration 011) */
    size_t nmemory;
    struct db_usage_row *usage; /* repeat order */
    size_t nusage;
    struct db_grads_row *grads; /* repeat order (migration 012) */
    size_t ngrads;
    struct db_pipe_row *pipes; /* repeat order (migration 022) */
    size_t npipes;
    int cpus_online; /* rank 0's node's CPUs as its env reported them; 0: unknown */
    char host[64];   /* rank 0's hostname as its env reported it; "": unknown */
    struct db_elastic_fig elastic;
};
struct db_experiment_data {
    int64_t id;
    char workload[16];
    char name[136];
    char status[16];
    double created_at;
    struct db_data_run *runs; /* owned, in sweep point order */
    size_t nruns;
};
/* Every run of an experiment with its figures into *out (db_experiment_data_free, also
 * after a failure). ERR_NOT_FOUND. */
int db_get_experiment_data(struct db *db, int64_t id, struct db_experiment_data *out,
                           struct err *e);
void db_experiment_data_free(struct db_experiment_data *d);

/* What db_cancel did. Arrays owned (db_cancel_result_free). */
struct db_cancel_result {
    int64_t experiment_id;
    int64_t *cancelled; /* queued runs now cancelled */
    size_t n_cancelled;
    int64_t *active; /* starting or running: for the scheduler to stop */
    size_t n_active;
};
/* Cancels: every queued run of experiment exp_id (run_id 0) or the one run run_id becomes
 * cancelled at once; runs that are starting or running are listed for the scheduler to
 * stop. ERR_NOT_FOUND; ERR_CONFLICT when nothing is left to cancel (all finished). */
int db_cancel(struct db *db, int64_t exp_id, int64_t run_id, struct db_cancel_result *out,
              struct err *e);
void db_cancel_result_free(struct db_cancel_result *r);
/* Deletes an experiment and everything stored for it. ERR_CONFLICT while any of its runs
 * is queued, starting or running; *run_ids (owned) lists its runs (for their files). */
int db_delete_experiment(struct db *db, int64_t id, int64_t **run_ids, size_t *n,
                         struct err *e);

/* --- the scheduler's queue ----------------------------------------------------------- */
struct db_queued_run {
    int64_t id, experiment_id;
    int world_size;      /* the processes to start (spec_processes): the spec's world_size, or 1
                       for a single-process strategy's replicas (issue 33) */
    char *spec_json;     /* owned (db_queued_runs_free): the resolved spec as stored, the
                            text a worker reads from its spec file */
    struct spec spec;    /* spec_json parsed once, defaults filled (spec_from_json): what
                            the daemon reads of a run (device, threads, timeouts) */
    struct err spec_err; /* code != ERR_OK: spec_json is no valid run spec (spec zeroed);
                            the run cannot start and fails naming this */
};
/* Queued runs in submission order, at most max. *out owned (db_queued_runs_free). Each
 * run's spec is parsed here, once, for everything that starts it. */
int db_list_queued(struct db *db, size_t max, struct db_queued_run **out, size_t *n,
                   struct err *e);
void db_queued_runs_free(struct db_queued_run *runs, size_t n);
int64_t db_count_runs(struct db *db, enum db_run_status status);

/* --- a run's life ------------------------------------------------------------------- */
/* queued -> starting; the experiment becomes running. ERR_CONFLICT when not queued. */
int db_run_starting(struct db *db, int64_t run_id, struct err *e);
/* Records a spawned rank. */
int db_rank_spawned(struct db *db, int64_t run_id, int rank, const char *node, int pid,
                    const char *cpus, struct err *e);
/* Marks a run as having shared CPUs (migration 007): set by the scheduler when the
 * node's active CPU slots exceed its CPUs while the run is active. */
int db_run_oversubscribed(struct db *db, int64_t run_id, struct err *e);
/* A device "cuda" run's placement (migration 003): whether its ranks share one GPU
 * (emulated) and the GPU index of each of ranks 0..n-1 already recorded as spawned. */
int db_run_gpu_placement(struct db *db, int64_t run_id, bool emulated, const int *gpu, int n,
                         struct err *e);
/* A rank said hello: host recorded, rank running; when every rank is running the run
 * becomes running. */
int db_rank_hello(struct db *db, int64_t run_id, int rank, const char *host, int world_size,
                  struct err *e);
int db_rank_env(struct db *db, int64_t run_id, int rank, const json_t *env, struct err *e);
int db_rank_exited(struct db *db, int64_t run_id, int rank, const char *status, int exit_code,
                   int signal, const char *error, struct err *e);
int db_run_progress(struct db *db, int64_t run_id, double fraction, struct err *e);
int db_insert_collective(struct db *db, int64_t run_id, const struct report_collective *c,
                         struct err *e);
int db_insert_step(struct db *db, int64_t run_id, int rank, const struct report_step *s,
                   struct err *e);
/* Rank 0's gradient readiness of one repeat (replaces a repeat's earlier line). */
int db_insert_grads(struct db *db, int64_t run_id, const struct report_grads *g, struct err *e);
int db_insert_pipe(struct db *db, int64_t run_id, const struct report_pipe *p, struct err *e);
/* Stores fits (perf.h; their experiment_id set) of this model version: a fit already
 * stored for the same key is kept as it is. */
int db_store_fits(struct db *db, const struct perf_fit *fits, size_t n, struct err *e);
/* The stored fits of this model version of experiment exp_id (0: of every experiment) in
 * id order, into *out (owned, free()). */
/* The ids of the most recent finished collective experiments, newest first, at most max. */
int db_finished_collectives(struct db *db, int64_t *ids, size_t max, size_t *n, struct err *e);
/* A calibration (migration 021, daemon/calib.h) to store: strings and curve borrowed. */
struct db_calibration {
    int64_t experiment_id;
    const char *node, *model, *device, *dataset;
    int batch_size, threads, cpus;
    bool pinned;
    double switch_us, quantum_ms;
    const json_t *curve;
};
/* The finished experiments of spec calibrate with no calibration of this model version
 * stored yet, oldest first, at most max. */
int db_calibrations_pending(struct db *db, int64_t *ids, size_t max, size_t *n, struct err *e);
/* Stores cal (one per experiment and model version: a second is ignored). */
int db_store_calibration(struct db *db, const struct db_calibration *cal, struct err *e);
/* The stored calibrations of this model version, newest first, as row objects (curve
 * decoded): node, model NULL = any; id 0 = any. Owned. */
json_t *db_list_calibrations(struct db *db, const char *node, const char *model, int64_t id,
                             struct err *e);
/* The experiment of run run_id. ERR_NOT_FOUND. */
int db_run_experiment_id(struct db *db, int64_t run_id, int64_t *exp_id, struct err *e);
int db_get_fits(struct db *db, int64_t exp_id, struct perf_fit **out, size_t *n, struct err *e);

int db_insert_memory(struct db *db, int64_t run_id, int rank, const struct report_memory *m,
                     struct err *e);
int db_insert_usage(struct db *db, int64_t run_id, int rank, const struct report_usage *u,
                    struct err *e);
int db_insert_trace(struct db *db, int64_t run_id, int rank, const struct report_trace *t,
                    struct err *e);
/* Which traced steps db_get_trace reads: rank and repeat (-1: any), and a page of at most
 * limit rows (> 0) after offset, in (repeat, step, rank) order. */
struct db_trace_query {
    int rank, repeat;
    int64_t offset, limit;
};
/* A run's traced steps for daemon/trace.c: {"world_size": N, "pipeline": its spec's stages
 * (1: none), "ranks": [{rank, node, host}...], "steps": {"columns": [rank, repeat, step,
 * clock_offset_ns, spans, ops], "rows": [...]}, "page": {offset, limit, more,
 * dropped_at_ingest}} with spans and ops decoded; more: rows follow the page. The SQL
 * reads at most limit + 1 rows. Owned; ERR_NOT_FOUND for no such run. */
json_t *db_get_trace(struct db *db, int64_t run_id, const struct db_trace_query *q,
                     struct err *e);
/* The trace rows ingest dropped past the run's cap (daemon/ingest.c). */
int db_set_trace_dropped(struct db *db, int64_t run_id, int64_t dropped, struct err *e);

/* One event of a run (run_events, migration 016): what the daemon did, in the run's order
 * (seq counts from 1 per run). rank, node, fault, step: -1 = none; kind, detail may be
 * NULL. */
struct db_run_event {
    double at; /* unix seconds */
    const char *type, *action, *kind, *detail;
    int fault, rank, node;
    int64_t step;
};
int db_insert_run_event(struct db *db, int64_t run_id, int64_t seq,
                        const struct db_run_event *ev, struct err *e);
/* A fault of a run's spec (run_faults), stored as the run starts: not injected yet. rank,
 * node, at_step: -1 = none; at_s, duration_s: below 0 = none. */
int db_insert_run_fault(struct db *db, int64_t run_id, int fault, const struct spec_fault *f,
                        struct err *e);
/* Its outcome: injected at `at` (unix s) at step; restored at restored_at (below 0: not
 * yet); or not injected (injected false), note saying why. */
int db_run_fault_outcome(struct db *db, int64_t run_id, int fault, bool injected, double at,
                         int64_t step, double restored_at, const char *note, struct err *e);
/* One generation of an elastic run (generations, migration 017; daemon/elastic.h):
 * members and joiners as JSON arrays of slots (borrowed text), times in unix seconds,
 * lost_at below 0 = none (the launch's, a growth). */
struct db_generation {
    int gen, world;
    const char *members, *joiners, *reason;
    double published_at, lost_at;
};
int db_insert_generation(struct db *db, int64_t run_id, const struct db_generation *g,
                         struct err *e);
/* A member of generation gen first saw it fail at `at` (later calls keep the first). */
int db_generation_detected(struct db *db, int64_t run_id, int gen, double at, struct err *e);
/* Generation gen regrouped (communicator up, state restored) in regroup_ms (below 0: not
 * said); the first call counts. */
int db_generation_regrouped(struct db *db, int64_t run_id, int gen, double regroup_ms,
                            struct err *e);
/* Generation gen ran its first step at `at`, restoring the commit at commit_step and
 * redoing lost_steps (below 0: not said); the first call counts. */
int db_generation_resumed(struct db *db, int64_t run_id, int gen, double at,
                          int64_t commit_step, int64_t lost_steps, double regroup_ms,
                          struct err *e);
/* The version key of experiments ids[0..n) as text into key[cap]: each one's version
 * (migration 015: it changes whenever the experiment, its runs or their rows change),
 * then the versions of the newest `scan` finished collective experiments (the fits a
 * report may borrow, daemon/model.c). Equal keys: the same report and fit.
 * ERR_NOT_FOUND naming the first experiment that does not exist. */
int db_experiments_version(struct db *db, const int64_t *ids, size_t n, size_t scan, char *key,
                           size_t cap, struct err *e);
/* Appends "|cal:count:max_id," of the stored calibrations of this model version to the
 * text in key[cap] (what a report's predictions read besides its experiments and fits:
 * daemon/calib.h). ERR_INVALID when it does not fit. */
int db_calibrations_version(struct db *db, char *key, size_t cap, struct err *e);
int db_insert_epoch(struct db *db, int64_t run_id, const struct report_epoch *ep,
                    struct err *e);
/* Ends a run (succeeded, failed, cancelled, interrupted) and updates its experiment's
 * status and timestamps. error may be NULL; error_rank < 0 = none. */
int db_run_finish(struct db *db, int64_t run_id, enum db_run_status status, const char *error,
                  int error_rank, struct err *e);
/* A worker process the database says was running. */
struct db_orphan {
    int64_t run_id;
    int rank, pid;
    char node[64]; /* the node that spawned it: only its own daemon may kill it */
};
/* Start-up repair: runs left starting/running by a daemon that stopped become
 * interrupted (with a message), their experiments updated. *n_out = how many runs;
 * *orphans (owned, free()) lists the processes those runs had, for the caller to make
 * sure they are gone. */
int db_recover(struct db *db, int64_t *n_out, struct db_orphan **orphans, size_t *n_orphans,
               struct err *e);

/* A node of a cluster as the leader records it (daemon/cluster.h); strings borrowed. */
struct db_node {
    const char *name, *address, *role; /* role: "leader" or "follower" */
    int cpu_slots, gpus;
    const char *engines;         /* JSON object text */
    const char *network_profile; /* NULL: none */
    const char *state;           /* up, draining, lost, left */
    double joined_at;
};
/* Inserts or replaces the row of n->name (a node joining again replaces its offer). */
int db_node_upsert(struct db *db, const struct db_node *n, struct err *e);
/* Sets a node's state, and its last heartbeat when heartbeat_at >= 0. */
int db_node_set_state(struct db *db, const char *name, const char *state, double heartbeat_at,
                      struct err *e);
/* Removes a node's row (DELETE /v1/nodes/NAME, a left node reclaimed); its runs keep
 * their node names. */
int db_node_delete(struct db *db, const char *name, struct err *e);
/* Removes the rows of nodes that left before the Unix time `before`. */
int db_nodes_forget_left(struct db *db, double before, struct err *e);
/* Every stored node as an owned array of row objects (engines as an object). */
json_t *db_list_nodes(struct db *db, struct err *e);
/* The placement a run got: how many nodes its ranks spanned, the most on any one. */
int db_run_placement(struct db *db, int64_t run_id, int nodes, int ranks_per_node,
                     struct err *e);

#endif
