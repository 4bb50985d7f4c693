/* ddp: the data-parallel strategies (docs/design.md §12.3 "ddp/"), one engine over one model:
 *
 *   naive    allreduce every gradient tensor after backward, one at a time (the loop
 *            everyone starts from: `for p in params: all_reduce(p.grad)`)
 *   ddp      PyTorch DDP's reducer: gradients in buckets in reverse registration order
 *            (first bucket 1 MiB, then bucket_mb), each bucket's allreduce queued on the
 *            communication thread the moment its last gradient is final in backward
 *   horovod  tensor fusion: ready gradients copied into a fusion buffer (fusion_mb) and
 *            reduced together; tensors ready within one cycle (cycle_ms) share a buffer
 *   zero1    DeepSpeed ZeRO stage 1: after backward, gradients reduce-scattered bucket by
 *            bucket; each rank keeps optimizer state for its shard only, updates its
 *            shard of the parameters, and the shards are all-gathered
 *   zero2    stage 2: the same, with each bucket's reduce-scatter launched during
 *            backward and only the rank's shard of the reduced gradients kept
 *
 * Decisions:
 * - Gradients are averaged (sum, then one division by the world size), as DDP does, so
 *   N ranks with batch B step exactly like one rank with batch N*B up to rounding.
 * - A bucket is a contiguous slice of the gradient arena (nn/model.h: parameters in
 *   registration order, backward finishes them from the end), so a bucket needs no copy
 *   into a flat buffer; the hook counts each bucket's outstanding floats down.
 * - Horovod's coordinator decides fusion from readiness; here rank 0 records when each
 *   tensor became ready in the first synchronising step (fused by size only), groups
 *   them by cycle_ms and fusion_mb, and broadcasts that plan, which every rank then
 *   replays (Horovod's response cache does the same after its first steps). Every rank
 *   therefore issues identical collectives whatever its own timing.
 * - ZeRO shards are per bucket: bucket b (length L, padded to a multiple of W) is split in
 *   W chunks of ceil(L/W); rank r owns chunk r of every bucket. A divisible bucket is
 *   reduce-scattered in place in the gradient arena (its reduced chunk lands where the
 *   optimizer reads it); the others go through a padded staging buffer, which holds only
 *   them (staging every bucket had cost resnet18-cifar 42 MiB a rank at 2 ranks). The optimizer
 *   state holds only the owned chunks, packed (nn_optim_update_slice).
 * - fp16 / bf16 compression: each bucket is converted into a 2-byte wire buffer, reduced
 *   in that dtype (the backend sums through float and rounds to the dtype after every
 *   combine, as NCCL and Gloo do), converted back and divided by the world size.
 * - Timing, per step, both on the training thread's clock (clock_mono_ns, which the
 *   communication thread shares), defined here once:
 *     exposed_ns  the time the training thread spent on communication instead of
 *                 computing: inside a launch (compression, copies into the fusion or
 *                 staging buffer, the hand-off), inside a wait and the copy or
 *                 decompression after it, inside a blocking collective;
 *     comm_ns     the length of the union of those intervals and of each operation's
 *                 flight, from the start of its launch until the communication thread
 *                 finished it (queued behind another operation counts as in flight).
 *   Every exposed interval is part of the union, so 0 <= exposed <= comm, and overlap =
 *   1 - exposed / comm is the share of the communication the training thread computed
 *   through. naive launches and waits back to back, each call starting at the clock
 *   reading that ended the previous one, so its exposed time is its whole flight: overlap
 *   is exactly 0 by construction. One clock for both is the point: an operation's run
 *   on its own thread against the training thread's waits after a launch returned left
 *   the launch's work out of exposed, so naive showed overlap 0.44 and exposed could
 *   exceed comm. On a device the clock is the host's: a wait that covers the kernels an
 *   operation waits for counts them.
 * - Gradient accumulation: ddp_begin_step(sync = false) makes backward accumulate
 *   locally with no communication (DDP's no_sync); the last micro-batch synchronises.
 *
 * Ownership: a ddp borrows the communicator and the model (both must outlive it) and
 * owns its buckets, staging and wire buffers, plan and handles (ddp_cleanup). */
#ifndef DDPB_DDP_H
#define DDPB_DDP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/vocab.h"
#include "worker/comm/comm.h"
#include "worker/nn/model.h"
#include "worker/nn/optim.h"

/* DDP_NAIVE, DDP_DDP, ...: common/vocab.h's strategies, in its order (its attributes say
 * which overlap backward, shard the optimizer or the gradients, and how they bucket). */
#define DDP_STRATEGY_ENUM(id, name) DDP_##id,
enum ddp_strategy { VOCAB_STRATEGIES(DDP_STRATEGY_ENUM) };
enum ddp_compression { DDP_COMPRESS_NONE = 0, DDP_COMPRESS_FP16, DDP_COMPRESS_BF16 };

#define DDP_FIRST_BUCKET_BYTES ((size_t)1 << 20) /* PyTorch DDP's first bucket */

struct ddp_config {
    enum ddp_strategy strategy;
    enum ddp_compression compression;
    size_t bucket_bytes; /* ddp, zero1, zero2: bucket cap (after the first, for ddp) */
    size_t fusion_bytes; /* horovod */
    double cycle_ms;     /* horovod */
};

/* Device mode (spec device "cuda"): the arenas live on the GPU (worker/nn/cuda/gmodel.h) at
 * the host arenas' offsets, the communicator moves device buffers (NCCL), and the two
 * things ddp does to the numbers itself run as device kernels through these hooks, so
 * this file has no CUDA in it. Strategies naive and ddp only: horovod's fusion buffer,
 * ZeRO's padded staging and fp16/bf16 compression are host loops here and are refused
 * on the device (ddp_set_device). All pointers borrowed. */
struct ddp_device {
    float *params, *grads, *buffers; /* device arenas */
    void *ctx;
    /* x[0..n) *= factor, in the compute stream's order */
    void (*scale)(void *ctx, float *x, size_t n, float factor);
    /* the optimizer's current step (begun) on [off, off+len) of the arenas, its state at
     * state_off of the device optimizer state */
    void (*update)(void *ctx, struct nn_optim *o, size_t off, size_t state_off, size_t len,
                   double lr);
};

/* One step's communication figures of this rank ("Timing" above). */
struct ddp_step_stats {
    int64_t comm_ns;     /* wall time with communication in flight */
    int64_t exposed_ns;  /* the part of it the training thread spent on communication */
    uint64_t bytes_sent; /* payload bytes this rank sent */
    int ops;             /* collective operations issued */
};

/* [from_ns, to_ns) on clock_mono_ns; exposed: the training thread's own (a launch, a
 * wait), else an operation's flight */
struct ddp_span {
    int64_t from_ns, to_ns;
    bool exposed;
};

/* One collective of the step, for the run's trace (ddp_set_trace): from the start of its
 * launch until the communication thread finished it (queued, then running from run_ns). */
struct ddp_op_rec {
    enum comm_op op;
    int bucket;    /* index in launch order */
    int64_t bytes; /* the whole buffer, as the collective workload counts it */
    int64_t launch_ns, run_ns, end_ns;
    char algorithm[16];
};

/* What the strategy holds, in bytes ("Memory" above). */
struct ddp_memory {
    int64_t params, buffers, grads, optimizer, comm;
};

struct ddp_bucket {
    size_t offset, len;      /* floats: the slice [offset, offset+len) of the arenas */
    size_t pending;          /* floats whose gradient is not final yet this step */
    size_t chunk;            /* zero: ceil(len / world) */
    size_t own_off, own_len; /* zero: this rank's chunk inside the arenas */
    size_t state_off;        /* zero: where that chunk's optimizer state starts */
    size_t pad_off;          /* zero: where the bucket, padded to chunk * world, lies in
                                the wire buffer */
    size_t stage_off;        /* zero, a bucket the world does not divide: where its padded
                                copy lies in the staging buffer */
    struct comm_handle *h;   /* in flight, or NULL */
    int64_t launch_ns;       /* when its launch began (clock_mono_ns) */
    bool launched;
};

struct ddp {
    struct ddp_config cfg;
    struct comm *comm;  /* borrowed */
    struct nn_model *m; /* borrowed */
    int rank, world;
    size_t n;             /* floats in the parameter arena */
    struct ddp_bucket *b; /* owned; in launch order (from the arena's end) */
    int nb;
    /* per-tensor view for naive and horovod: parameter tensors in reverse order */
    size_t *t_off, *t_len; /* owned */
    int nt;
    uint16_t *wire;  /* owned: n 2-byte values (compression), or NULL */
    size_t wire_len; /* 2-byte values allocated for wire */
    float *stage;    /* owned: staging (horovod fusion buffer, zero padding) */
    size_t stage_len;
    size_t pad_len; /* zero: every bucket padded to chunk * world (the wire buffer's size) */
    /* horovod: the fusion plan, as tensor index ranges [plan[i], plan[i+1]) */
    int *plan; /* owned, nt + 1 entries */
    int nplan;
    bool plan_fixed;          /* after the first synchronising step */
    int64_t *ready_ns;        /* owned: rank 0's readiness times in the first step */
    int fused_from, fused_to; /* horovod: tensors queued but not launched yet */
    int64_t cycle_start_ns;
    size_t own_total; /* zero: floats this rank owns (its optimizer state size) */
    bool sync;        /* this micro-batch exchanges gradients */
    int64_t step_start_ns;
    uint64_t bytes_at_start; /* comm->bytes_sent when the step began */
    struct ddp_step_stats st;
    /* this step's communication intervals, whose union is st.comm_ns */
    struct ddp_span *spans; /* owned; grows to what one step adds, then is reused */
    int nspans, spans_cap;
    /* this step's collectives, recorded while trace is set (ddp_set_trace) */
    bool trace;
    struct ddp_op_rec *ops; /* owned; grows like spans */
    int nops, ops_cap;
    struct err err; /* the first failure inside the hook (it cannot return one) */
    bool failed;
    struct ddp_device dev; /* device mode (on_device): borrowed arenas and hooks */
    bool on_device;
    void *ready_event; /* the hook's layer event while it launches (device mode) */
};

/* "naive", "ddp", ... -> strategy; -1 when unknown. */
int ddp_strategy_parse(const char *s);
const char *ddp_strategy_name(enum ddp_strategy s);
/* "none", "fp16", "bf16" -> compression; -1 when unknown. */
int ddp_compression_parse(const char *s);

/* Builds the buckets / shards of m's parameter arena (initialised) for comm's world.
 * m and c are borrowed and must outlive d. */
int ddp_init(struct ddp *d, const struct ddp_config *cfg, struct comm *c, struct nn_model *m,
             struct err *e);
void ddp_cleanup(struct ddp *d);
/* Switches d (just initialised) to device mode: the exchanges, the averaging and the
 * optimizer work on dev's arenas. ERR_INVALID naming "strategy" or "compression" for what
 * device mode does not do (see struct ddp_device). */
int ddp_set_device(struct ddp *d, const struct ddp_device *dev, struct err *e);

/* The optimizer a strategy needs: every parameter (naive, ddp, horovod) or only this
 * rank's chunks (zero1, zero2). */
int ddp_optim_init(const struct ddp *d, struct nn_optim *o, const struct nn_optim_cfg *cfg,
                   struct err *e);

/* Copies rank 0's parameters and buffers (batch-norm running statistics) to every rank. */
int ddp_broadcast_params(struct ddp *d, struct err *e);

/* Starts a micro-batch: sync = true when its backward ends the optimizer step (the
 * gradients are exchanged), false to accumulate locally. Clears the step's stats when
 * the previous micro-batch synchronised. */
void ddp_begin_step(struct ddp *d, bool sync);
/* The nn_model_backward hook (ctx = the ddp). */
void ddp_grad_hook(void *ctx, const struct nn_grad_ready *r);
/* After backward: launches what is left, waits for every operation, averages. On return
 * the gradients (zero: this rank's chunks) hold the global average over ranks and over
 * the step's `accumulate` micro-batches (their sum is divided by it). A micro-batch that
 * does not synchronise returns at once. */
int ddp_finish(struct ddp *d, int accumulate, struct err *e);
/* Gradient clipping by global norm (spec clip_grad_norm), after ddp_finish: *norm is the
 * L2 norm of the averaged gradients over every parameter (zero: each rank's chunks'
 * sums of squares allreduced, one float); when clip > 0 and the norm is above it, every
 * gradient the optimizer reads is multiplied by clip / (norm + 1e-6), as
 * torch.nn.utils.clip_grad_norm_. Every rank gets the same norm. Host arenas only:
 * ERR_INVALID naming clip_grad_norm in device mode. */
int ddp_clip_grad_norm(struct ddp *d, double clip, double *norm, struct err *e);
/* The optimizer step of a synchronising micro-batch (begin_step + update), and for zero
 * the all-gather of the updated shards; the time the all-gather runs counts as comm. */
int ddp_optim_step(struct ddp *d, struct nn_optim *o, double lr, struct err *e);

/* The optimizer's FULL state, as one rank of a non-sharded strategy holds it: its planes
 * (nn_optim_planes) over all d->n parameters, plane k at [k * n, (k + 1) * n). This is
 * what elastic training (worker/elastic.h) commits and restores, so that a world of
 * another size can take it up: zero1 and zero2 all-gather every rank's chunks into it
 * (a collective: every rank calls it, between steps) and re-slice it for the new world
 * at import. Floats in the full state: */
size_t ddp_optim_full_len(const struct ddp *d, const struct nn_optim *o);
/* Fills full (ddp_optim_full_len floats, caller's). 0, or -1 with e set (zero: the
 * all-gather failed). */
int ddp_optim_export(struct ddp *d, const struct nn_optim *o, float *full, struct err *e);
/* Takes this rank's part of full (export's layout, from any world size) into o, and sets
 * its step count (Adam's bias correction). */
void ddp_optim_import(const struct ddp *d, struct nn_optim *o, const float *full, long step);

/* Records the collectives of the steps that begin from now on (ddp_begin_step clears
 * them with the spans) until called with false: the run's trace window. */
void ddp_set_trace(struct ddp *d, bool on);

/* What d and its optimizer o hold (ddp_optim_init's), exactly what their arenas and
 * buffers allocate:
 *   params     the parameter arena; buffers: batch-norm running statistics
 *   grads      the gradients kept for the optimizer: the whole arena, or under zero2 the
 *              rank's shard (zero2 reduce-scatters each bucket as backward finishes it
 *              and keeps only its chunk of the result, DeepSpeed's stage 2; the rest of
 *              the arena is then the reduce-scatter's input and counts under comm)
 *   optimizer  o's state (zero1, zero2: only the owned chunks)
 *   comm       the fusion / staging buffer, the 2-byte wire buffer, the backend's own
 *              buffers (comm->buffer_bytes), and zero2's reduce-scatter input
 * zero1 keeps its full gradients (stage 1 shards only the optimizer state). Call when no
 * operation is in flight (between steps). */
void ddp_memory(const struct ddp *d, const struct nn_optim *o, struct ddp_memory *out);

/* The bucket sizes in bytes, in launch order, that strategy would use for m (the
 * collective workload's model-shaped replay). Fills up to cap; returns the count. */
int ddp_bucket_sizes(const struct nn_model *m, const struct ddp_config *cfg, int64_t *bytes,
                     int cap);

#endif
