/* view: the API's JSON replies turned into what `ddpbench` prints on a terminal.
 *
 * Decision: one table of result columns (key, heading, format) serves both workloads and
 * both `show` and `compare`: a column the reply does not have, or that no row fills, is
 * left out, and descriptive columns whose value is the same in every row (op, dtype,
 * algorithm, ...) move to one line above the table, so that what varies is what the eye
 * meets. Every figure with a spread is shown as "mean +- ci95" next to its sample count.
 * All functions borrow their JSON and append text to out; they return 0 or -1 (no
 * memory, or e set where an err is taken). */
#ifndef DDPB_CLI_VIEW_H
#define DDPB_CLI_VIEW_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/err.h"

/* One experiment's result table (GET .../results) with the experiment's id and spec. A
 * group field a table lacks (it was not swept there) is read from its spec, so a single
 * run can be compared with the matching point of a sweep. */
struct view_src {
    int64_t id;
    const json_t *table; /* borrowed ResultTable */
    const json_t *spec;  /* borrowed normalized spec, or NULL */
};

/* A JSON scalar as text: strings as-is, numbers via table_fmt_num, null "-", others as
 * compact JSON. */
void view_scalar(const json_t *v, char *out, size_t cap);

/* GET /v1/experiments reply: id, name, workload, status, runs, created, duration. */
int view_experiments(const json_t *page, struct buf *out);
/* GET /v1/experiments/{id} reply: a header and the runs table, then failed runs' errors. */
int view_experiment(const json_t *exp, struct buf *out);
/* "run 15 failed: why" for each run (of an array of runs) that carries an error. */
int view_errors(const json_t *runs, struct buf *out);
/* One result table, every metric it has. */
int view_results(const json_t *table, struct buf *out);
/* Several experiments' tables as one, an experiment column first, rows that describe the
 * same point (same size, world size, group values) next to each other, the headline
 * metric (busbw or throughput) relative to the first experiment's. ERR_INVALID when the
 * tables' workloads differ. */
int view_compare(const struct view_src *src, size_t n, struct buf *out, struct err *e);
/* GET /v1/runs/{id} reply: summary, ranks, environment, collectives, epochs. */
int view_run(const json_t *run, struct buf *out);
/* GET /v1/nodes: one row a node (role, state, slots used of total, GPUs, profile,
 * heartbeat age, active runs), then how many are up. */
int view_nodes(const json_t *reply, struct buf *out);

/* GET /v1/experiments/{id}/fit: one row a fit (op, algorithm, ranks, alpha, beta as
 * bandwidth, gamma, R^2, worst residual, sizes). */
int view_fits(const json_t *reply, struct buf *out);
/* POST /v1/predict: one row per strategy and world size, then where each strategy's
 * exchanges stop hiding behind backward. */
int view_predict(const json_t *reply, struct buf *out);

#endif
