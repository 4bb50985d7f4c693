/* model_pipe: a pipeline run's stored rows into the model of its step (issue 35,
 * docs/model.md "Pipelines"): rank 0's layer profile and cut (report "pipe", migration
 * 022) give each stage's forward and backward per micro-batch, the sendrecv fit each
 * transfer across a cut and the tied weight's exchange, the allreduce fit the replicas'
 * exchange of a stage's gradients, and the one-rank base run the data wait and the
 * optimizer (shared among stages by their parameter bytes). daemon/perf_pipe.c
 * simulates the schedule.
 *
 * Decision: the profile (rank 0, alone, three passes at start-up) gives how the compute is
 * shared among the stages; the one-rank base run gives its level: its forward and backward
 * per step over M, the means over its measured steps that every other prediction starts
 * from. Measured on a loaded 2-CPU machine, the profile's level read 2 to 5 times faster
 * than the base's and the pipeline's own steps (a median of three passes misses the load a
 * step pays); its shares among layers do not depend on that. The stages' co-location is
 * that of a data-parallel run of as many ranks per node: the node's stored calibration of
 * the run's key (calib.h: model, batch_size, threads, device, dataset) scales each
 * stage's forward, backward and optimizer by its phase's slowdown, else the CPU-sharing
 * rule of the placement (model.h) scales them as it scales a base. A calibration measures
 * whole-model ranks, not stages of one: the stages run the same layers, a part each, so
 * what they cost each other's cores and memory is that of the same kernels side by side.
 *
 * Ownership: nothing here allocates for the caller. */
#ifndef DDPB_MODEL_PIPE_H
#define DDPB_MODEL_PIPE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/calib.h"
#include "daemon/db.h"
#include "daemon/model.h"
#include "daemon/perf.h"
#include "daemon/perf_pipe.h"

/* Predicts pipeline run `run` (spec pipeline > 1) against one-rank run base (with
 * gradient readiness; model_base_of) over fits; net's used[] marks the fits it took. cals
 * (borrowed, NULL: none) give the stages' contention where one matches the run; *calib_id
 * is the one applied, 0: none. -1 with *why a sentence for a results row's pred_note when
 * it cannot. */
int model_pipe_predict(const struct db_data_run *run, const struct db_data_run *base,
                       struct perf_net *net, const struct calib_set *cals,
                       struct perf_pipe_step *out, int64_t *calib_id, const char **why);

/* model_pipe_predict over the network run used (its backend, device, nodes and profile
 * from fits[0..nfits), used[] marking the fits taken), and into *one the one-rank step of
 * base as perf_simulate predicts it (for the efficiency). One computation for a results
 * row's pred_* and for POST /v1/predict's pipeline points. -1 with *why as above. */
int model_pipe_point(const struct db_data_run *run, const struct db_data_run *base,
                     const struct perf_fit *fits, size_t nfits, bool *used,
                     const struct calib_set *cals, struct perf_pipe_step *out,
                     struct perf_step *one, int64_t *calib_id, const char **why);

/* POST /v1/predict with "pipeline" (model.h model_pipe_ask): each stage count simulated
 * under each schedule at each world size that is a multiple of it. q->run_id is a
 * pipeline run with a layer profile (it gives that of its own stage count) or a one-rank
 * run with gradient readiness (the base); the profile of a stage count is that of the
 * experiment's latest pipeline run of that many stages.
 * New reference: {"experiment", "model_version", "fits", "link": null, "predictions":
 * [{"base_run", "profile_run", "params", "strategy" (the replicas'), "pipeline",
 * "micro_batches", "schedule", "points", "comm_exceeds_backward_at": null}]}, or
 * NULL with e set: ERR_CONFLICT naming the field when nothing stored answers (no layer
 * profile of a stage count, no base, no sendrecv fit), ERR_INVALID, ERR_NOT_FOUND. Each
 * point is placed as asked (ranks_per_node), else as the profile run was, and carries the
 * contention and calibration that placement gets, as a results row's pred_contention and
 * pred_calibration. */
json_t *model_pipe_whatif(struct db *db, const struct model_pipe_ask *q, struct err *e);

#endif
