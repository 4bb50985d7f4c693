/* train_engine: the seam between the training loop (workload_train.c) and what computes
 * the model: a struct of function pointers, like comm_ops and dataset_ops, with a CPU
 * instance (train_cpu.c: nn/ with oneDNN, every build) and a CUDA instance (train_cuda.c:
 * worker/nn/cuda/gmodel.h, only with CUDA and cuDNN). The external engines of a later
 * issue sit behind the same ops.
 *
 * Decisions:
 * - The loop owns everything the engines share: data, the ddp/ strategy, the optimizer
 *   step, the schedule, the reports, and the host clock around each phase. An engine
 *   owns only the model's compute: the host nn_model is the graph, parameter registry and
 *   initialisation of both (the loop builds it), and an engine runs it where it runs.
 * - One step is: begin_step, then per micro-batch forward / backward / wait_loss, then
 *   (after the strategy finished the exchange) begin_update, the strategy's optimizer
 *   step, end_update, end_step. Operations may be queued (CUDA) and complete only at
 *   wait_loss / end_step; the host times the loop takes around them are the phases unless
 *   end_step replaces them with the device's own (CUDA events).
 * - The engine is picked once, by the spec's device, in train_engine_pick
 *   (train_engines.h): the one place that knows which instances this build has and says
 *   how to build a missing one. It is not in this header, which the engines include: the
 *   instances implement the seam, the table picks among them, and neither calls back.
 *
 * Ownership: create returns an owned engine (destroy); it borrows the model, which must
 * outlive it. Every other op borrows its arguments for the call; attach keeps the
 * strategy's device arenas pointing into the engine until destroy. */
#ifndef DDPB_TRAIN_ENGINE_H
#define DDPB_TRAIN_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "worker/comm/comm.h"
#include "worker/ddp/ddp.h"
#include "worker/nn/model.h"
#include "worker/nn/optim.h"

struct train_engine_ops;

/* The base of every engine's state (embedded first, as struct comm in a backend). */
struct train_engine {
    const struct train_engine_ops *ops;
};

/* One optimizer step's compute phases in milliseconds: forward (with the loss), backward
 * (with the hook's launches), optimizer (the update less the communication it waited
 * for). */
struct train_phases {
    double forward_ms, backward_ms, optimizer_ms;
};

/* What an engine is made for (the spec's train section; borrowed for the call). */
struct train_engine_cfg {
    int batch;             /* samples per micro-batch */
    const char *precision; /* "fp32", "fp16", "bf16" */
    bool cudnn_benchmark;  /* cuda: convolution algorithms measured once per shape */
    double loss_scale;     /* fp16: 0 dynamic, > 0 static (spec loss_scale) */
    int loss_scale_window; /* fp16 dynamic: growth interval (spec loss_scale_window) */
};

struct train_engine_ops {
    const char *device; /* the spec's device it serves: "cpu", "cuda" */
    /* Prepares m (built, parameters initialised) for training batches as cfg says. Owned
     * engine or NULL with e set. */
    struct train_engine *(*create)(struct nn_model *m, const struct train_engine_cfg *cfg,
                                   struct err *e);
    /* Once the strategy and its optimizer exist: points the strategy at the engine's
     * arenas (where they are not m's) and sizes the engine's optimizer state for oc. */
    int (*attach)(struct train_engine *en, struct ddp *ddp, const struct nn_optim_cfg *oc,
                  struct err *e);
    /* The parameters changed outside an update (rank 0's broadcast at the start). */
    void (*params_changed)(struct train_engine *en);
    /* Zeroes the gradients and starts the step's phase record. */
    void (*begin_step)(struct train_engine *en);
    /* Forward of x (n rows of the prepared batch valid, labels y) and its loss, seeding
     * backward. train: batch statistics and dropout keyed by step, else evaluation.
     * reuse: x and y hold what they held at the previous training call (skip an
     * upload). */
    int (*forward)(struct train_engine *en, const float *x, const int32_t *y, int n, int train,
                   uint64_t step, bool reuse, struct err *e);
    /* Backward, gradients accumulating; hook once per layer with parameters, reverse
     * order, as soon as that layer's gradient is final (or queued). */
    int (*backward)(struct train_engine *en, nn_grad_hook_fn hook, void *ctx, struct err *e);
    /* The mean loss and correct count of the last forward, once it is done. */
    int (*wait_loss)(struct train_engine *en, double *loss, int *right, struct err *e);
    /* The last forward's logits (batch, classes), plain host memory, once wait_loss
     * returned; borrowed. NULL op: the engine keeps them on its device (an evaluation then
     * reports no test_acc_per_class). */
    const float *(*logits)(const struct train_engine *en);
    /* After the exchange, before the optimizer: *apply = false skips this step's update
     * (fp16 loss scaling found inf/NaN gradients). */
    int (*begin_update)(struct train_engine *en, bool *apply, struct err *e);
    /* The loss scale the step's backward ran with, read before begin_update; -1 where
     * the loss is not scaled. NULL: never scaled (the CPU engine: fp32 and bf16). */
    double (*loss_scale)(const struct train_engine *en);
    /* After the optimizer step (applied or skipped). */
    void (*end_update)(struct train_engine *en, bool applied);
    /* The step is over: waits for it where it was queued and replaces the host-timed
     * phases in *ph with the engine's own measurement, if it has one. */
    int (*end_step)(struct train_engine *en, struct train_phases *ph, struct err *e);
    /* Sums n floats of host memory v over the ranks of c, staging them where c's
     * buffers must live. */
    int (*allreduce_host)(struct train_engine *en, struct comm *c, float *v, int n,
                          struct err *e);
    /* The most device memory in use after a step so far; -1 where there is no device. */
    int64_t (*peak_bytes)(const struct train_engine *en);
    /* Bytes of the activation workspace of the prepared batch (every tensor, its gradient,
     * saved statistics, the loss's scratch), where the engine allocated it. */
    int64_t (*activation_bytes)(const struct train_engine *en);
    void (*destroy)(struct train_engine *en);
};

extern const struct train_engine_ops train_engine_cpu;
/* only in the CUDA engine module (ddpb_cuda.so, with cuDNN): the worker reaches it through
 * train_engine_pick */
extern const struct train_engine_ops train_engine_cuda;

#endif
