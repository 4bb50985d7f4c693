/* observe: what a rank reports about itself beside its steps (issue 17): the resources
 * it used over a window of steps (report "usage"), its peak memory, and the trace of a
 * bounded window of steps (report "trace").
 *
 * Decisions:
 * - Usage is getrusage(RUSAGE_SELF) differences over a window: every thread of the
 *   process counts (compute, oneDNN's pool, the loader, the communication thread), so
 *   (user + sys) / wall is the cores the rank kept busy, and involuntary context switches
 *   show a rank that shared its CPUs. A window is an epoch, or what is left of a repeat.
 * - NVML (device cuda) is sampled at most every OBSERVE_NVML_PERIOD_NS between steps,
 *   never inside one: its utilisation is itself an average over NVML's sample period.
 * - A trace is built as JSON arrays while the step runs (spans and collectives as they
 *   end), then sent as one line; the times stay on CLOCK_MONOTONIC in ns and the line
 *   carries the rank's CLOCK_REALTIME offset, so the daemon places ranks of different
 *   nodes on one time line without the worker converting anything inside a step.
 *
 * - Gradient readiness (report "grads", the performance model's input) is recorded per
 *   tensor on every profiled step and reduced to medians once per repeat: one slow step
 *   (a page fault, a preemption) moves a median by nothing, and the line stays one per
 *   repeat whatever the step count. At most OBSERVE_GRADS_STEPS steps are kept.
 *
 * Ownership: struct observe owns its NVML handle and the trace arrays being built
 * (observe_cleanup); the report writer is borrowed. */
#ifndef DDPB_OBSERVE_H
#define DDPB_OBSERVE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>

#include "common/err.h"
#include "common/report.h"

#define OBSERVE_NVML_PERIOD_NS 100000000LL
#define OBSERVE_GRADS_STEPS 512

/* Gradient readiness of the steps of one repeat (observe_grads_*). */
struct observe_grads {
    int nt;         /* parameter tensors, in the order backward finishes them */
    int64_t *bytes; /* owned, nt */
    int64_t *ready; /* owned, OBSERVE_GRADS_STEPS * nt: ns from the backward's start, -1
                       when the hook never named the tensor that step */
    int64_t *bwd;   /* owned, OBSERVE_GRADS_STEPS: each step's backward length */
    int nsteps;
    int64_t start_ns; /* the backward being recorded began here; 0: none is */
};

struct gpu_nvml;

struct observe {
    struct report_writer *w; /* borrowed */
    int repeat;
    /* the usage window */
    struct rusage ru0;
    int64_t wall0_ns, steps;
    struct gpu_nvml *nvml; /* owned; NULL when not sampling */
    int nvml_index;
    int64_t nvml_last_ns;
    double util_sum, mem_util_sum, power_sum;
    int nsamples;
    /* the step being traced */
    int64_t clock_offset_ns;
    json_t *spans, *ops; /* owned while tracing, else NULL */
    struct observe_grads grads;
};

/* nvml_lib: sample NVML from this library (GPU_NVML_DEFAULT_LIB on a GPU run) for the
 * rank's GPU (CUDA_VISIBLE_DEVICES); NULL: no GPU, nothing sampled. NVML missing is no
 * error: the GPU figures are then left out. w borrowed. */
void observe_init(struct observe *o, struct report_writer *w, const char *nvml_lib);
void observe_cleanup(struct observe *o);

/* Starts a usage window of repeat `repeat`. */
void observe_window_begin(struct observe *o, int repeat);
/* A step of the window ended (and NVML is sampled when due). */
void observe_window_step(struct observe *o);
/* Sends the window ending now (epoch: its last step's) and starts the next one. A window
 * without a step sends nothing. */
int observe_window_emit(struct observe *o, int epoch, struct err *e);

/* The process's peak resident set so far, in bytes (getrusage ru_maxrss). */
int64_t observe_peak_rss_bytes(void);
/* The resident set now (/proc/self/statm), in bytes; -1 when unknown. */
int64_t observe_rss_bytes(void);

/* Starts recording a traced step (or iteration); the spans and ops below are dropped
 * when no trace was begun, so callers add them unconditionally. */
void observe_trace_begin(struct observe *o);
bool observe_tracing(const struct observe *o);
/* A span [from, to) of the compute thread (clock_mono_ns); name a short literal. */
void observe_trace_span(struct observe *o, const char *name, int64_t from_ns, int64_t to_ns);
/* The same for one micro-batch of a pipeline step: "forward", "backward" or "p2p" of
 * micro-batch mb (the span's 4th element). */
void observe_trace_span_mb(struct observe *o, const char *name, int mb, int64_t from_ns,
                           int64_t to_ns);
/* A collective from the start of its launch until it completed. bucket -1: none. */
void observe_trace_op(struct observe *o, const char *op, int bucket, int64_t bytes,
                      const char *algorithm, int64_t launch_ns, int64_t end_ns);
/* Sends the traced step and stops tracing. */
int observe_trace_emit(struct observe *o, int repeat, int64_t step, struct err *e);

/* Starts recording gradient readiness for a model of nt tensors whose sizes, in the
 * order backward finishes them, are bytes[] (copied). ERR_NOMEM. */
int observe_grads_begin(struct observe *o, const int64_t *bytes, int nt, struct err *e);
/* The backward of a profiled step begins at start_ns (clock_mono_ns). */
void observe_grads_backward(struct observe *o, int64_t start_ns);
/* Tensors [first, first + n) (backward order) are final at now_ns; ignored when no
 * backward is being recorded. */
void observe_grads_ready(struct observe *o, int first, int n, int64_t now_ns);
/* The recorded backward lasted backward_ns (its own compute, the exposed communication
 * inside it left out). */
void observe_grads_end(struct observe *o, int64_t backward_ns);
/* Sends the repeat's medians (nothing when no step was recorded) and frees the record. */
int observe_grads_emit(struct observe *o, int repeat, struct err *e);

#endif
