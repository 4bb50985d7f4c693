/* calib: contention calibrations (issue 35, docs/model.md "Co-location and contention"):
 * what k co-located ranks cost each other's compute on a node, measured once per node and
 * (model, batch_size, threads, device, dataset) and stored (migration 021).
 *
 * Decisions:
 * - A calibration is a training experiment with spec calibrate true: its runs are k-rank
 *   launches (the sweep's world_size) placed and pinned by the scheduler exactly as a
 *   k-rank training run, whose workers never synchronise (no exchange). So the placement
 *   code is the real one, not a copy, and the phases measured are the worker's own.
 * - It is stored once it has finished, like a fit: on the first read that finds it
 *   (GET /v1/calibrations, a results table, POST /v1/predict). The node's context-switch
 *   cost is measured then, once per calibration (a pipe ping-pong between two processes
 *   pinned to one CPU), with the scheduler's time slice.
 * - Per k and phase: the median over the run's steps (each the ranks' mean) over the
 *   median at k = 1, with a distribution-free 95 % interval (order statistics of each
 *   median, combined conservatively: lo = lo_k / hi_1, hi = hi_k / lo_1); the same for
 *   the step's whole compute (forward + backward + optimizer). The model applies each
 *   phase's up to the node's cores and the compute's beyond: time-sliced, a phase shorter
 *   than the slice mostly runs within one, so its own median misses the slices the step
 *   waits for. Medians, not means: a one-off stall (another process on the node) would
 *   move a mean of a few dozen steps more than co-location does.
 * - A run is predicted with the latest calibration whose key is its own; with none, the
 *   core-share rule (model.c) stays.
 *
 * Ownership: as each function says. */
#ifndef DDPB_CALIB_H
#define DDPB_CALIB_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "daemon/db.h"
#include "daemon/perf.h"

#define CALIB_MAX_K 64

/* One stored calibration as the model reads it. */
struct calib {
    int64_t id;
    char node[64], model[64], device[8], dataset[128];
    int batch_size, threads;
    struct perf_calib_point pts[CALIB_MAX_K];
    struct perf_calib perf; /* pts borrowed from this struct: fixed by calib_load */
};

struct calib_set {
    struct calib *c; /* owned (calib_set_free), newest first */
    size_t n;
};

/* The key of a run of a training spec: its node, model and the rest (strings into the
 * given buffers). */
void calib_key_of(const struct db_data_run *run, char *dataset, size_t n);

/* The curve of a finished calibration experiment d: [{"k", "steps", "forward",
 * "forward_lo", "forward_hi", ..., "compute", ...}] in ascending k. New reference, or NULL
 * with e set (ERR_CONFLICT: no run at k = 1, or no measured step). */
json_t *calib_curve_of(const struct db_experiment_data *d, struct err *e);

/* One context switch on this node in microseconds: two processes pinned to one CPU pass
 * a byte back and forth over pipes; NaN when it cannot be measured. */
double calib_switch_us(void);
/* The scheduler's time slice in milliseconds for cpus CPUs (the kernel's base slice when
 * readable, else its default 0.75 ms x (1 + log2(min(cpus, 8)))). */
double calib_quantum_ms(int cpus);

/* Stores every finished calibration experiment not stored yet. */
int calib_refresh(struct db *db, struct err *e);
/* calib_refresh, then every stored calibration into *out (calib_set_free). */
int calib_load(struct db *db, struct calib_set *out, struct err *e);
void calib_set_free(struct calib_set *s);
/* The latest calibration of run's key (NULL: none). Borrowed from s. */
const struct calib *calib_match(const struct calib_set *s, const struct db_data_run *run);

/* GET /v1/calibrations: {"calibrations": [...]} newest first, filtered by node and model
 * (NULL: any) or one id (0: any). New reference; NULL with e set. */
json_t *calib_list(struct db *db, const char *node, const char *model, int64_t id,
                   struct err *e);

#endif
