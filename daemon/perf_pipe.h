/* perf_pipe: the performance model of a pipeline-parallel step (issue 35, docs/model.md
 * "Pipelines"): the schedule (gpipe or 1f1b) simulated over stages x micro-batches from
 * each stage's forward and backward time per micro-batch, the point-to-point transfer
 * across each cut, the tied-weight exchange, the data-parallel exchange of a stage's
 * gradients among replicas, and the optimizer step.
 *
 * Decisions:
 * - Each stage runs its operations in the worker's order (worker/pipeline.c): gpipe every
 *   forward, then every backward from the last micro-batch; 1f1b P - s - 1 warm-up
 *   forwards, then one forward and one backward in turn, then the remaining backwards. An
 *   operation starts when its stage is free and its input has arrived.
 * - A transfer (an activation forward or its gradient back; the same bytes) keeps the
 *   sender busy for its time (the worker's sends are blocking) and arrives at the sender's
 *   compute end plus that time. The receiver's wait is idle time.
 * - After its last backward a stage exchanges the tied weight's gradient (first and last
 *   stage together), then allreduces its gradients among replicas (exposed whole), then
 *   steps its optimizer. The step lasts until the last stage is done (a makespan: the
 *   next step's forwards do not start early).
 * - The bubble is the measured bubble_fraction's counterpart: per stage, the part of the
 *   step that is neither data, compute, the data-parallel exchange nor the optimizer (so
 *   transfers count as idle, as the worker's bubble_ms counts them), averaged over stages.
 * No I/O; nothing here allocates for the caller. */
#ifndef DDPB_PERF_PIPE_H
#define DDPB_PERF_PIPE_H

#include <stdbool.h>

#define PERF_PIPE_MAX_STAGES 64

enum perf_pipe_schedule { PERF_PIPE_GPIPE, PERF_PIPE_1F1B };

/* Seconds, borrowed arrays. */
struct perf_pipe {
    int stages, micro_batches;
    enum perf_pipe_schedule schedule;
    const double *forward_s;   /* [stages]: one micro-batch's forward on the stage */
    const double *backward_s;  /* [stages]: one micro-batch's backward */
    const double *p2p_s;       /* [stages - 1]: one transfer across cut s (s to s + 1) */
    const double *optimizer_s; /* [stages]: the stage's optimizer step */
    const double *dp_s;        /* [stages] or NULL: the stage's allreduce among replicas */
    double tie_s;              /* the first and last stage's tied-weight exchange; 0: none */
    double data_s;             /* every stage reads the step's batch first */
};

struct perf_pipe_step {
    double step_s;
    double bubble; /* mean over stages of the idle share of the step */
    /* means over stages, per step (the measured phase columns average ranks) */
    double data_s, forward_s, backward_s, optimizer_s, exposed_s, p2p_s;
    /* most micro-batches whose activations one stage holds at once */
    int peak_in_flight;
    /* set by the caller (model_pipe.c): the compute slowdown its stage times carry (the
     * calibration's or the core share's, at the stages busy at once; 1 = none), and the M
     * micro-batches' compute over the batch's (1: a micro-batch costs its share) */
    double contention, micro_batch_cost;
};

/* Simulates one step. -1 when the input is unusable (no stage, no micro-batch, more
 * than PERF_PIPE_MAX_STAGES stages, a missing or negative time). */
int perf_pipe_simulate(const struct perf_pipe *p, struct perf_pipe_step *out);

/* What one call of the whole model (its forward, or its backward) costs on a number of
 * samples: rank 0 timed it on a micro-batch (t_mb on mb samples) and on the whole batch
 * (t_batch on batch samples; 0: not timed). Any unit. */
struct perf_pipe_calls {
    double mb, t_mb, batch, t_batch;
};

/* One call on `samples` samples over one on `to` samples: the line through the two
 * timings (a fixed cost per call plus a cost per sample; a micro-batch of 2 resnet18
 * samples costs 0.7 of 8 samples' time here, not 0.25). Below mb, a line with a negative
 * fixed cost (the batch's per-sample cost higher: it fell out of a cache) is floored by
 * the micro-batch's per-sample cost. Without both timings, or with the batch timed faster
 * than the micro-batch (noise: the line would reach 0), the time is proportional to the
 * samples: samples / to. */
double perf_pipe_call_ratio(const struct perf_pipe_calls *c, double samples, double to);

#endif
