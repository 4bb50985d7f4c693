/* trace: a run's traced steps as Chrome trace-event JSON (GET /v1/runs/{id}/trace), the
 * format chrome://tracing and Perfetto open.
 *
 * Decisions:
 * - One process per rank (pid = rank, named with its node), one thread for the compute
 *   timeline (tid 0: each step, and inside it data, forward, backward, optimizer and the
 *   exposed communication), and communication threads (tid 1, 2, ...) for the
 *   collectives from launch to completion. Operations queued behind one another
 *   overlap in time, which complete events ("X") on one thread cannot show, so each
 *   collective goes to the first communication lane free at its launch: lane 1 alone
 *   means nothing waited in the queue.
 * - Times: each row's CLOCK_MONOTONIC ns plus its rank's CLOCK_REALTIME offset put every
 *   rank on one time line (ranks of one node share the clock exactly; across nodes the
 *   wall clocks' agreement bounds the error); ts is microseconds from the run's first
 *   traced instant, which otherData gives in Unix ns with every rank's offset.
 * - A pipeline run (its spec's pipeline P > 1): each rank's process name gives its stage
 *   and replica (rank = replica * P + stage, so the sort by rank is by replica, then
 *   stage); its forward, backward and p2p spans are one per micro-batch, each keeping
 *   its name with args.micro_batch the index (report.h), p2p in category "p2p";
 *   otherData.pipeline is P (1: none).
 * - Every duration is the worker's own pair of readings, so a phase's total over its
 *   spans is the step phase stored for it (backward and optimizer less the exposed
 *   communication nested in them, as report.h defines the phases). On a GPU the stored
 *   phases are the device's event timings (train_engine.h end_step) and the spans the
 *   host's: there they agree only where the host waited for the device.
 *
 * - Bounded (issue 31): a run stores at most TRACE_MAX_ROWS traced steps (ingest drops
 *   and counts the rest: runs.trace_dropped), and a GET reads at most that many, a page
 *   of them, filtered by rank and repeat; otherData.page says which page, whether more
 *   follow and how many rows ingest dropped.
 *
 * Ownership: trace_build borrows its input (db_get_trace's object) and returns an owned
 * object. */
#ifndef DDPB_TRACE_H
#define DDPB_TRACE_H

#include <jansson.h>
#include <stdint.h>

#include "common/err.h"

#define TRACE_MAX_ROWS 2048 /* traced steps stored per run, and read per GET */

json_t *trace_build(const json_t *rows, int64_t run_id, struct err *e);

#endif
