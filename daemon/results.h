/* results: turns an experiment's stored figures into the tables researchers compare:
 * one row per group of runs (grouped by any spec fields) and, for collectives, per
 * message size. Every figure carries its sample count and spread (docs/design.md §13
 * "Metrics": median, p95, mean ± 95% CI).
 *
 * Decision: aggregation happens here, in C over the rows db_get_experiment_data returns,
 * not in SQL, because Student-t intervals, nearest-rank percentiles and the speed-up
 * baseline lookup read better as code, and the same table feeds JSON and CSV. Those rows
 * are typed structs (db.h), filled through column tables the database checks against
 * its SQL's column names, so no figure is looked up here by a column's name. The output
 * columns are common/columns.h's: a cell is filled by its enum (key, statistics and order
 * from that table; tests/unit/test_results.c checks a table's columns against it).
 *
 * Training metrics (per run and repeat, non-warm-up steps only):
 *   step time  = the slowest rank's time of each step; its median and p95 over the steps,
 *                its 95% CI over one mean per repeat, or batch means within a single
 *                repeat (common/stats.h: steps are autocorrelated, never pooled)
 *   throughput = samples of all ranks / total step time (images/s), one value per repeat;
 *                a pipeline's (spec pipeline P > 1) counts each replica's batch once:
 *                batch_size * world_size / P samples a step
 *   speed-up   = throughput / throughput of the group that differs only by world_size 1
 *                (a pipeline's: by world_size 1 and no pipeline, its schedule too where
 *                no one-rank group has the same)
 *   efficiency = speed-up / world_size
 *   overlap    = 1 - exposed communication / total communication
 *   pipelines  bubble_fraction = sum of the ranks' bubble_ms / sum of their step_ms over
 *              every non-warm-up step row; bubble_theory = (P - 1) / (M + P - 1) at M
 *              micro_batches; p2p_ms and p2p_bytes per rank and step (means); all null
 *              for a group without a pipeline (the model predicts none of them)
 *   data       data_fraction = the ranks' mean data wait / the step time, pooled over the
 *              steps; input_bound = data_fraction >= 0.05 (the loader did not keep up);
 *              loader_cpu_ms = the loader threads' CPU time per rank and step;
 *              read_mbps = bytes a rank read from storage / its step time (MB/s); null
 *              where no step reported them (the framework engines)
 * A figure that cannot be computed is null, never 0: an interval from one repeat (and a
 * speed-up interval when either throughput has one), the world_size 1 group's own
 * speed-up interval (it is 1 by definition), the overlap of one rank (it exchanges
 * nothing), a loss no sample was trained on. */
#ifndef DDPB_RESULTS_H
#define DDPB_RESULTS_H

#include <jansson.h>
#include <stddef.h>

#include "common/err.h"
#include "common/stats.h"
#include "daemon/db.h"
#include "daemon/perf.h"

struct calib_set; /* daemon/calib.h */

/* Statistics are common/stats.h's (stats_summarize), shared with the worker. */

/* data: borrowed, from db_get_experiment_data. group_by: spec field names (NULL or empty
 * = the fields the sweep varies). Returns an owned
 *   {"experiment": id, "workload": w, "group_by": [...], "columns": [...], "rows": [{...}]}
 * where every row has exactly the keys in "columns", in that order. Rows are keyed by the
 * group_by fields, "emulated", "oversubscribed" and "network_profile" (columns of every
 * table): runs whose ranks shared one GPU (runs.emulated), shared CPUs, or measured over
 * another network form groups of their own, never mixed with the others. A table with no
 * row (no run has finished) still has all its columns. ERR_INVALID naming
 * "group_by" for a field no run's spec has. */
json_t *results_build(const struct db_experiment_data *data, const char *const *group_by,
                      size_t ngroup, struct err *e);
/* results_build, and every training row predicted by the model (model.h) from its
 * one-rank group with these fits (borrowed; none: the pred_* columns are null and
 * pred_note says why):
 *   pred_step_ms, pred_<phase>_ms, pred_throughput, pred_efficiency, pred_overlap
 *   pred_*_err  (predicted - measured) / measured; overlap: predicted - measured
 *   pred_base_run, pred_fits ("id,id"), pred_model_version, pred_note */
json_t *results_build_with(const struct db_experiment_data *data, const char *const *group_by,
                           size_t ngroup, const struct perf_fit *fits, size_t nfits,
                           struct err *e);
/* results_build_with, and each prediction at a placement that shares a node corrected by
 * the latest calibration of its node and model in cals (borrowed, NULL: none; calib.h):
 *   pred_contention (the compute slowdown applied), pred_calibration (its id, or null) */
json_t *results_build_calibrated(const struct db_experiment_data *data,
                                 const char *const *group_by, size_t ngroup,
                                 const struct perf_fit *fits, size_t nfits,
                                 const struct calib_set *cals, struct err *e);
/* The table as CSV (RFC 4180; header = columns). Owned malloc'd string. */
char *results_csv(const json_t *table, size_t *len, struct err *e);

/* A prediction's verdict (the pred_verdict column, docs/model.md "Noise and error"): err
 * the step error's size, |pred - measured| / measured; noise the measured step's own 95%
 * CI half-width over its mean. "within_noise" when noise >= err (the measurement cannot
 * tell the prediction from the truth), else "hit" within RESULTS_PRED_TOLERANCE, else
 * "miss"; NULL when either is not a number (no prediction, or no interval: one step). */
#define RESULTS_PRED_TOLERANCE 0.15
const char *results_pred_verdict(double err, double noise);

#endif
