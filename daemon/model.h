/* model: the performance model's service (issue 18): fits from stored collective
 * experiments (computed, stored once the experiment has finished, read back with their
 * ids), a training run's measurements as the simulation's input, and predictions as JSON.
 * The arithmetic is perf.c's; this file moves stored rows in and out of it.
 *
 * Decisions:
 * - A fit is stored only from a finished experiment: its collectives no longer change,
 *   so the stored fit is the fit of those figures forever and a prediction naming its id
 *   names exactly what it used. A running experiment's fits are returned unstored (id 0).
 * - Each prediction names the one-rank run it simulated from and the fits it used.
 * - Compute at a placement: CPU ranks that share a node's cores slow each other by the
 *   share ranks_per_node * threads / cores beyond 1 (device cpu only), and a TCP rank with
 *   no core left for its communication thread overlaps nothing (perf.h); a prediction for
 *   a placement not measured (POST /v1/predict) assumes each rank has its cores.
 * - Across nodes a prediction takes the network profile's fits at the run's node count
 *   and one node's (the same profile's, else the host's); by default the latest finished
 *   collective experiment of each placement supplies them (model_fits_choose).
 *
 * Ownership: as each function says; json_t results are new references. */
#ifndef DDPB_MODEL_H
#define DDPB_MODEL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "daemon/calib.h"
#include "daemon/db.h"
#include "daemon/perf.h"

/* The fits of a collective experiment's data (gamma separated), experiment_id set, id 0.
 * *out owned (free()). ERR_INVALID when d is no collective experiment. */
int model_fits_compute(const struct db_experiment_data *d, struct perf_fit **out, size_t *n,
                       struct err *e);
/* The backend whose fits a run of spec needs: the spec's, but "gloo" for the framework
 * engines on tcp (pytorch, lightning, deepspeed: torch.distributed's gloo; horovod: its
 * gloo controller and operations). Borrowed from spec or static. */
const char *model_backend_of(const json_t *spec);
/* The exchange engine runs for strategy (perf_exchange): the worker's for ddpbench; -1
 * with *why (a sentence, static) where the model simulates none of it. */
int model_exchange_of(const char *engine, const char *strategy, enum perf_exchange *x,
                      const char **why);
/* The pred_note of a row with no fit for its backend (static). */
const char *model_no_fit_note(const json_t *spec);
/* The fits of experiments ids[0..nid): stored ones read back, a finished experiment's
 * computed and stored first, a running one's computed (id 0); a training experiment has
 * none. *out owned (free()). ERR_NOT_FOUND. */
int model_fits_load(struct db *db, const int64_t *ids, size_t nid, struct perf_fit **out,
                    size_t *n, struct err *e);
/* The fits predictions of a run of spec use: those of experiments ids[0..nid) when any is
 * named, else for spec's backend and device those of the most recent finished collective
 * experiment of each placement (network profile, nodes) (spec NULL, or none found: *n = 0,
 * no error). *out owned (free()). One choice for results rows, the report and POST
 * /v1/predict; perf_fits_restrict then applies pred_max_world. */
int model_fits_choose(struct db *db, const int64_t *ids, size_t nid, const json_t *spec,
                      struct perf_fit **out, size_t *n, struct err *e);
json_t *model_fit_json(const struct perf_fit *f);

/* A one-rank run's measurements as the simulation's input. */
struct model_base {
    struct perf_base b;
    int64_t run_id;
    int64_t *bytes, *ready; /* owned (model_base_cleanup) */
    double *steps;          /* owned: its step times, ascending */
};
/* -1 when run has no gradient readiness (a framework engine, a run before migration 012)
 * or no step: *why says which. */
int model_base_of(const struct db_data_run *run, struct model_base *mb, const char **why);
void model_base_cleanup(struct model_base *mb);

/* The setup of run's strategy knobs at world ranks, ranks_per_node of them sharing a node
 * (0: every rank has its cores), measured against one-rank run base: compute slowed by
 * the CPU share, no overlap without a spare core (perf_setup). One rule for a measured
 * row and for POST /v1/predict. */
void model_setup_at(const struct db_data_run *run, int world, int ranks_per_node,
                    const struct db_data_run *base, struct perf_setup *s);
/* model_setup_at, then, at ranks_per_node > 0, the latest calibration in cals of run's
 * node and model (calib.h): its measured slowdowns at ranks_per_node replace the core
 * share. *calib_id: the calibration used, 0 when none (the core-share rule stands). */
void model_setup_calibrated(const struct db_data_run *run, int world, int ranks_per_node,
                            const struct db_data_run *base, const struct calib_set *cals,
                            struct perf_setup *s, int64_t *calib_id);
/* model_setup_calibrated for ranks that compute only a share `busy` (0..1] of the step (a
 * pipeline's stages idle in its bubble): the calibration's slowdowns, or the core share,
 * are the expectation over how many of the node's other ranks compute at once, each with
 * probability busy (perf_contention_busy); the spare core for communication is still
 * judged at ranks_per_node. busy 1: model_setup_calibrated. */
void model_setup_busy(const struct db_data_run *run, int world, int ranks_per_node, double busy,
                      const struct db_data_run *base, const struct calib_set *cals,
                      struct perf_setup *s, int64_t *calib_id);
/* The network a run of spec used: its backend, device, algorithm, nodes and profile. All
 * strings borrowed from spec and profile. */
void model_net_of(const json_t *spec, const char *profile, int nodes,
                  const struct perf_fit *fits, size_t n, bool *used, struct perf_net *net);

/* A net across nodes (net->nodes > 1; docs/model.md "Across nodes"): intra (the
 * caller's, filled) becomes its fits inside one node, per_node ranks on each, and the
 * allreduce hierarchical where the backend runs it so. Nothing for one node or a link. */
void model_net_across(struct perf_net *net, int per_node, struct perf_net *intra);
/* Which fit a net across nodes lacks, as a pred_note sentence, into out (n bytes). */
void model_across_note(const struct perf_net *net, char *out, size_t n);
/* The range of the fits marked used and of a base of base_world ranks as JSON: {"world_sizes":
 * [..], "nodes": [..], "base_world_size", "text"}. New reference. */
json_t *model_covers_json(const struct perf_fit *fits, size_t n, const bool *used,
                          int base_world);

/* {"step_ms", "data_ms", ..., "throughput", "overlap", ...} of a simulated step of
 * global batch `samples`. New reference. */
json_t *model_step_json(const struct perf_step *st, double samples);
/* Whether objects a and b (a run's params, a results group's key) are equal but for the
 * fields named in drop[0..n). Nothing kept. */
bool model_same_but(const json_t *a, const json_t *b, const char *const *drop, size_t n);
/* "id,id": the fits marked used, for a results cell. Owned malloc'd string. */
char *model_used_ids(const struct perf_fit *fits, size_t n, const bool *used);

#define MODEL_MAX_POINTS 64  /* world sizes (and stage counts) one request asks */
#define MODEL_MAX_FIT_IDS 16 /* collective experiments one request names */

/* A pipeline's what-if asked of POST /v1/predict (body "pipeline"), answered by
 * model_pipe_whatif (model_pipe.h): the stage counts, the micro-batches (0: the profile
 * run's), the schedules (PERF_PIPE_*), the world sizes (none: the stages alone, one
 * replica), ranks_per_node (0: the profile run's placement), from run_id over the fits of
 * fit_ids (none: the latest). */
struct model_pipe_ask {
    int64_t run_id;
    int64_t fit_ids[MODEL_MAX_FIT_IDS];
    int stages[MODEL_MAX_POINTS], worlds[MODEL_MAX_POINTS], schedules[2];
    size_t nfit, nstages, nworld, nsched;
    int micro_batches, ranks_per_node;
};
/* Parses a POST /v1/predict body (borrowed): 1 with *ask filled when it asks a pipeline,
 * 0 when it does not (model_predict answers it), -1 with e set (ERR_INVALID naming the
 * field). */
int model_parse_pipe_ask(const json_t *body, struct model_pipe_ask *ask, struct err *e);

/* POST /v1/predict: body (borrowed) as api/openapi.yaml says. New reference or NULL with
 * e set: ERR_INVALID naming the field of a malformed body, ERR_NOT_FOUND, ERR_CONFLICT
 * naming it when what is stored cannot answer (no one-rank run, no gradient readiness,
 * no fit for the backend, an experiment of the other workload). */
json_t *model_predict(struct db *db, const json_t *body, struct err *e);

#endif
