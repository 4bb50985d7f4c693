/* report: the worker → daemon event lines (one JSON object per line on fd 3).
 * This header is the contract; docs/design.md §10 "Reports".
 *
 * Decision: events are JSON (jansson) so a human can read a rank's pipe and the daemon
 * can store them verbatim, but every event has a fixed shape validated here on both
 * sides: the worker builds events only through these functions and the daemon accepts
 * only lines report_parse_line validates. Nothing parses worker stdout.
 *
 * Every event carries "type", "rank" (int >= 0) and "t" (Unix seconds, float).
 *   hello       pid (int), host (str), world_size (int)
 *   env         env (object of string/number values: versions, cpu model, kernel, ...;
 *               or objects of them, REPORT_ENV_DEPTH levels in all: "mpi": {...})
 *   progress    done (int), total (int), phase (str); gen, world (int, elastic runs)
 *   collective  the fields of struct report_collective
 *   heartbeat   phase (str: what the rank is doing now), progress (int: a counter the
 *               rank advances as it works); sent every second by a thread of its own
 *   step        the fields of struct report_step (one training step of one rank)
 *   epoch       the fields of struct report_epoch (rank 0, after each epoch)
 *   memory      the fields of struct report_memory (each rank, once per repeat)
 *   usage       the fields of struct report_usage (each rank, per epoch and at the end)
 *   trace       the fields of struct report_trace (each rank, per traced step)
 *   grads       the fields of struct report_grads (rank 0, once per repeat of training)
 *   error       code (str: an err_code_name), message (str), where (str "file:line"),
 *               optional op (str), optional peer (int)
 *   elastic     the fields of struct report_elastic (worker/elastic.h)
 *   pipe        the fields of struct report_pipe (rank 0 of a pipeline run, once per repeat)
 *   done        (nothing else) */
#ifndef DDPB_REPORT_H
#define DDPB_REPORT_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/vocab.h"

#define REPORT_MAX_LINE (256u << 10)

/* REPORT_HELLO, REPORT_ENV, ...: common/vocab.h's report types, in its order. */
#define REPORT_TYPE_ENUM(id, name) REPORT_##id,
enum report_type { VOCAB_REPORTS(REPORT_TYPE_ENUM) REPORT_NTYPES };

/* One size point of a collective benchmark, as rank 0 reports it after combining every
 * rank's per-iteration times (time of an iteration = slowest rank's). */
struct report_collective {
    int repeat;
    char op[24];        /* "allreduce", ... */
    char dtype[16];     /* "float32", ... */
    char redop[8];      /* "sum", ... */
    char algorithm[16]; /* the algorithm actually used: "ring", ... */
    bool inplace;
    int64_t bytes; /* message size per rank in bytes */
    int64_t count; /* elements */
    int iters;
    double time_us_min, time_us_median, time_us_p95, time_us_mean, time_us_max;
    double algbw_gbs, busbw_gbs; /* from time_us_median; GB/s = 1e9 bytes/s */
    int64_t wrong;               /* elements that differ from the expected result, all ranks */
};

/* One training step of one rank. Phase times are this rank's, in milliseconds:
 *   data          waiting for the next batch (the loader's prefetch did not hide it)
 *   forward, backward, optimizer   compute
 *   comm          total time gradient communication was in flight (may overlap backward)
 *   comm_exposed  time the step waited for communication (not hidden by compute)
 *   step          the whole step, start of data wait to end of optimizer
 * The run's step time is the slowest rank's (docs/design.md §13). */
struct report_step {
    int repeat;
    int epoch;
    int64_t step; /* global step index within the repeat, from 0 */
    bool warmup;  /* excluded from statistics */
    int samples;  /* this rank's batch size */
    double loss;
    /* The phases are optional on the wire: a framework engine (issue 16) that cannot observe
     * one leaves it out and it reads as -1, stored NULL and served null ("not observable",
     * the reason in GET /v1/engines), never 0; bytes_sent likewise (-1: the framework does
     * not say what its collectives put on the wire). step_ms is always there. */
    double data_ms, forward_ms, backward_ms, comm_ms, comm_exposed_ms, optimizer_ms, step_ms;
    int64_t bytes_sent; /* gradient bytes this rank sent in this step */
    /* Pipeline runs only (spec pipeline > 1; rank = replica * pipeline + stage): every one
     * is -1 otherwise, left out of the event and stored NULL, never 0. A rank of a pipeline
     * reports samples = its replica's batch_size, like every other stage of that replica.
     *   stage      this rank's stage (>= 0)
     *   p2p_ms     time in point-to-point sends and receives of activations and their
     *              gradients, waiting for the neighbours included
     *   p2p_bytes  bytes this rank sent point-to-point in the step
     *   bubble_ms  idle time: step_ms less data, forward, backward, optimizer and
     *              comm_exposed (the pipeline's bubble plus the p2p overhead) */
    int stage;
    double p2p_ms, bubble_ms;
    int64_t p2p_bytes;
    /* The data pipeline (optional; -1 where the engine does not measure it, stored NULL):
     *   loader_cpu_ms  CPU time of the rank's loader threads (or inline fills) during the
     *                  step, summed over the threads
     *   read_bytes     bytes the rank's dataset read from storage during the step (0 for a
     *                  dataset held in memory) */
    double loader_cpu_ms;
    int64_t read_bytes;
    /* Elastic runs only (spec elastic; worker/elastic.h), -1 otherwise (left out): the
     * generation the step ran in and its world size. step is then the run's iteration
     * counter, which never goes back (work redone after a regroup gets new numbers). */
    int gen, world;
    /* Issue 33 (optional, -1 / false where they do not apply, left out):
     *   grad_norm   the global L2 norm of the averaged gradients before clipping (runs with
     *               clip_grad_norm > 0)
     *   loss_scale  the loss scale the step's backward ran with (precision fp16)
     *   skipped     the optimizer step was skipped: a non-finite gradient (fp16); written
     *               only when true */
    double grad_norm, loss_scale;
    bool skipped;
};
/* The pipeline's and the data pipeline's members of a step without them, for a designated
 * initializer: struct report_step s = {REPORT_STEP_NO_PIPELINE, .repeat = ...} (0 is a
 * stage). */
#define REPORT_STEP_NO_PIPELINE                                                                \
    .stage = -1, .p2p_ms = -1, .bubble_ms = -1, .p2p_bytes = -1, .loader_cpu_ms = -1,          \
    .read_bytes = -1, .gen = -1, .world = -1, .grad_norm = -1, .loss_scale = -1

/* One epoch, reported by rank 0; test figures are -1 when no test split was evaluated,
 * train figures -1 when no sample was trained on (omitted from the event, stored as NULL:
 * a loss never measured is not a loss of 0). Accuracies are fractions in [0, 1]. */
struct report_epoch {
    int repeat;
    int epoch;
    int64_t samples; /* training samples over all ranks */
    double train_loss, train_acc;
    double test_loss, test_acc;
    double time_s; /* wall time of the epoch's training steps */
    /* The test accuracy of each class (issue 33): a JSON array of at most
     * REPORT_MAX_CLASSES numbers in [0, 1], null for a class the test split lacks; NULL when
     * not evaluated (left out of the event, stored NULL). Borrowed from the event in
     * report_epoch_from_json and by report_emit_epoch; owned by a database row (db_rows). */
    json_t *test_acc_per_class;
};
/* The most classes an epoch's test_acc_per_class lists: a classifier's (ImageNet's 1,000);
 * a language model's vocabulary is no class table, and its runs send none. */
#define REPORT_MAX_CLASSES 1000

/* What one rank holds, reported once per repeat after its last step. Bytes; an optional
 * figure the engine cannot tell is -1 (left out of the event, stored and served null).
 * The accounting is exact for the C engine (ddp.h ddp_memory): what each arena holds.
 *   params       the parameter arena (fp32 master weights)
 *   buffers      non-trained state (batch-norm running statistics)
 *   grads        the gradients the strategy keeps for the optimizer (zero2: the rank's
 *                shard; the rest of the arena backward writes is counted in comm)
 *   optimizer    optimizer state (momentum; Adam's two moments), sharded under zero
 *   comm         communication buffers: fusion / staging / wire buffers, the backend's
 *                own, and zero2's reduce-scatter input
 *   activations  the activation workspace of one prepared batch (tensors, their
 *                gradients, saved statistics)
 *   peak_rss     the process's peak resident set (getrusage ru_maxrss) so far
 *   device_peak  device "cuda": the most device memory in use after a step */
struct report_memory {
    int repeat;
    int64_t params_bytes, buffers_bytes, grads_bytes, optimizer_bytes, comm_bytes;
    int64_t activations_bytes;
    int64_t peak_rss_bytes, device_peak_bytes;
};

/* What one rank used over a window of steps (an epoch, or what is left at the end of a
 * repeat): getrusage(RUSAGE_SELF) differences, so every thread of the process counts
 * (compute, loader, communication). cpu utilisation = (user + sys) / wall, in cores.
 * The GPU figures (device cuda, NVML) are means of a sample taken after every step of
 * the window, -1 when not sampled. */
struct report_usage {
    int repeat;
    int epoch;     /* the epoch of the window's last step */
    int64_t steps; /* steps in the window */
    double wall_s, user_s, sys_s;
    int64_t voluntary_cs, involuntary_cs; /* context switches */
    int64_t rss_bytes;                    /* resident set at the window's end */
    double gpu_util_pct, gpu_mem_util_pct, gpu_power_w;
};

/* One traced step (or collective iteration) of one rank, on its CLOCK_MONOTONIC in ns
 * (one clock per node); clock_offset_ns = CLOCK_REALTIME - CLOCK_MONOTONIC when the
 * rank started, which puts ranks of different nodes on one time line.
 *   spans  [name, start_ns, end_ns] on the compute thread: "step" (or "iteration") and
 *          inside it "data", "forward", "backward", "optimizer", and the "comm_exposed" spans
 *          the thread spent on communication (launches, waits: exposed). A pipeline run's
 *          "forward" and "backward" are one span per micro-batch, and its "p2p" spans the
 *          time blocked in a point-to-point send or receive; these carry a 4th element,
 *          the micro-batch index: [name, start_ns, end_ns, micro_batch] (integer >= 0)
 *   ops    [op, bucket, bytes, algorithm, launch_ns, end_ns] each collective from the
 *          start of its launch until the communication thread completed it; bucket -1
 *          when the operation has none (a collective benchmark's iteration)
 * Both are JSON arrays kept as they are: the daemon stores them as text. */
#define REPORT_TRACE_MAX 4096 /* entries of spans and of ops */
#define REPORT_ENV_DEPTH 3    /* env, a library's object, its transport's object */
struct report_trace {
    int repeat;
    int64_t step;
    int64_t clock_offset_ns;
    const json_t *spans, *ops; /* borrowed from the parsed event */
};

/* When each gradient became final in backward, for the performance model (issue 18:
 * daemon/perf.c simulates the strategies from it). Rank 0, once per repeat, over the
 * repeat's synchronising non-warm-up steps:
 *   tensors      [bytes, ready_ns] per parameter tensor in the order backward finishes
 *                them (reverse registration order, ddp.h's buckets' order): the median
 *                over the steps of the time from the start of the synchronising
 *                micro-batch's backward until the hook saw the tensor's gradient final
 *   backward_ns  the median of that backward's length (the window buckets can hide in)
 *   steps        how many steps the medians are over */
struct report_grads {
    int repeat;
    int64_t steps;
    int64_t backward_ns;
    const json_t *tensors; /* borrowed */
};

/* A pipeline run's input to the model of its step (issue 35, daemon/perf_pipe.h): rank 0
 * times every layer of the whole model on one micro-batch, alone, before the stages start
 * (worker/pipeline.c pipe_profile: a warm-up pass, then three timed ones):
 *   layers       [forward_ns, backward_ns, param_bytes] per layer (the model's node
 *                order), each the median of the three passes
 *   cuts         [first_layer, bytes] per stage after the first: where it starts and the
 *                fp32 bytes of one micro-batch's activation that cross into it (its
 *                gradient crosses back with the same bytes)
 *   stages       the pipeline's stages; micro_batch its samples per micro-batch
 *   tied_bytes   the weight tied across the first and last stage (gpt2's embedding and
 *                head) whose gradient they exchange each step; 0: none
 *   batch, batch_forward_ns, batch_backward_ns
 *                the whole model timed the same way on the whole batch (batch samples):
 *                the sums of its layers' medians. With the layers' sums they say what a
 *                micro-batch costs against the batch it is cut from (a call's fixed cost
 *                does not shrink with its samples). Optional (-1: absent, a worker from
 *                before them) */
struct report_pipe {
    int repeat, stages, micro_batch;
    int64_t tied_bytes;
    int batch;
    int64_t batch_forward_ns, batch_backward_ns;
    const json_t *layers; /* borrowed */
    const json_t *cuts;   /* borrowed */
};

const char *report_type_name(enum report_type t);

/* Parses and validates one line (without its newline). Returns an owned object (caller
 * json_decref's) and sets *type, or NULL with e set (ERR_INVALID / ERR_TOO_LARGE). */
json_t *report_parse_line(const char *line, size_t len, enum report_type *type, struct err *e);

/* Converts a validated collective event to/from the struct. to_json returns an owned
 * object carrying every field of the struct but not type/rank/t. */
int report_collective_from_json(const json_t *obj, struct report_collective *out,
                                struct err *e);
json_t *report_collective_to_json(const struct report_collective *c);

int report_step_from_json(const json_t *obj, struct report_step *out, struct err *e);
int report_epoch_from_json(const json_t *obj, struct report_epoch *out, struct err *e);
int report_memory_from_json(const json_t *obj, struct report_memory *out, struct err *e);
int report_usage_from_json(const json_t *obj, struct report_usage *out, struct err *e);
/* out->spans and out->ops borrow from obj. */
int report_trace_from_json(const json_t *obj, struct report_trace *out, struct err *e);
/* out->tensors borrows from obj. */
int report_grads_from_json(const json_t *obj, struct report_grads *out, struct err *e);
/* out->layers and out->cuts borrow from obj. */
int report_pipe_from_json(const json_t *obj, struct report_pipe *out, struct err *e);

/* Worker side: writes events as single lines to fd. Thread-safe: a lock keeps lines
 * from two threads (the worker and its heartbeat) whole. */
struct report_writer {
    int fd; /* borrowed; -1 = discard */
    int rank;
    pthread_mutex_t lock;
};

void report_writer_init(struct report_writer *w, int fd, int rank);
void report_writer_cleanup(struct report_writer *w);
/* Adds type, rank and t to `fields` (stolen: always decref'd) and writes the line.
 * Returns -1 with e set when the write fails (the daemon is gone). */
int report_emit(struct report_writer *w, enum report_type type, json_t *fields, struct err *e);
int report_emit_hello(struct report_writer *w, int world_size, struct err *e);
int report_emit_collective(struct report_writer *w, const struct report_collective *c,
                           struct err *e);
int report_emit_progress(struct report_writer *w, const char *phase, int64_t done,
                         int64_t total, struct err *e);
/* The same with an elastic run's generation and world size (gen < 0: left out). */
int report_emit_progress_gen(struct report_writer *w, const char *phase, int64_t done,
                             int64_t total, int gen, int world, struct err *e);

/* One event of elastic training (worker/elastic.h), type "elastic":
 *   event        "detect" (a rank saw a peer of its generation fail), "regroup" (the
 *                generation's communicator is up and the state restored), "resumed" (its
 *                first step is done), "left" (this rank is not in the generation)
 *   gen, world   the generation (0: the launch's) and its size; members its slots
 *   commit_step  the iteration counter of the commit restored (-1: left out)
 *   lost_steps   iterations done since that commit, redone now (-1: left out)
 *   regroup_ms   from the detection (or the growth decision) to the state restored
 *                (in "regroup" and again in "resumed")
 *   peer         the slot blamed ("detect"), else -1 */
struct report_elastic {
    const char *event;
    int gen, world;
    const int *members; /* borrowed, n_members entries */
    int n_members;
    int64_t commit_step, lost_steps;
    double regroup_ms;
    int peer;
};
int report_emit_elastic(struct report_writer *w, const struct report_elastic *el,
                        struct err *e);

/* peer < 0 and op NULL omit those fields. */
int report_emit_error(struct report_writer *w, const struct err *cause, const char *where,
                      const char *op, int peer, struct err *e);
int report_emit_done(struct report_writer *w, struct err *e);
int report_emit_heartbeat(struct report_writer *w, const char *phase, int64_t progress,
                          struct err *e);
int report_emit_step(struct report_writer *w, const struct report_step *s, struct err *e);
int report_emit_epoch(struct report_writer *w, const struct report_epoch *ep, struct err *e);
int report_emit_memory(struct report_writer *w, const struct report_memory *m, struct err *e);
int report_emit_usage(struct report_writer *w, const struct report_usage *u, struct err *e);
/* spans and ops are borrowed (the caller keeps its reference). */
int report_emit_trace(struct report_writer *w, const struct report_trace *t, struct err *e);
/* tensors is borrowed. */
int report_emit_grads(struct report_writer *w, const struct report_grads *g, struct err *e);
int report_emit_pipe(struct report_writer *w, const struct report_pipe *p, struct err *e);

#endif
