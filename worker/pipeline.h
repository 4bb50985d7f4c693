/* pipeline: one rank's stage of a pipeline-parallel training run (spec "pipeline" P > 1,
 * "micro_batches" M, "schedule"): the stage's layers as models of their own, the
 * micro-batch schedule, and the activations and their gradients it trades with the
 * neighbouring stages over the world communicator's point-to-point operations.
 *
 * Ranks: rank = replica * P + stage, so a replica's stages are neighbours in rank order
 * (one node holds whole replicas when ranks are packed); the replicas of a stage form the
 * data-parallel group whose communicator the strategy (ddp/) uses for that stage's
 * gradients, exactly as it does for a whole model.
 *
 * Decisions:
 * - The whole model is built (and initialised from the seed) on every rank, then cut
 *   (nn_model_stage_split: the largest stage as small as it can be) and only this rank's
 *   stage is kept, its parameters copied, so a stage's parameters are the whole model's.
 *   Balanced by parameters (the default) every rank computes the same cut without a
 *   message; balanced by time, rank 0 times each layer's forward and backward on a
 *   micro-batch and broadcasts the times, so every rank still cuts at the same places
 *   (times measured on each rank would differ). Rank 0 takes that profile whatever the
 *   balance, alone before the stages start, and reports it with the cut (report "pipe"):
 *   the daemon shares the one-rank base run's compute among the stages by it (the base
 *   has no per-layer times).
 * - Micro-batches in flight each need their own activations: the stage is built once per
 *   slot, the slots sharing one set of parameter, gradient and buffer arenas
 *   (nn_model_share_arenas). gpipe holds all M micro-batches (M slots); 1f1b at most
 *   P - stage (PipeDream-flush: its warm-up is P - stage - 1 forwards).
 * - The schedules order the point-to-point operations as Megatron's do, a forward's send
 *   paired with the next backward's receive in one sendrecv, so blocking transfers never
 *   deadlock whatever the socket buffers hold.
 * - The last micro-batch to run backward ends the step for the strategy (ddp_begin_step
 *   with sync), as the last micro-batch of gradient accumulation does, and ddp_finish
 *   divides the sum by M: one step of a replica with M micro-batches is one step of
 *   batch_size samples.
 * - A weight tied across stages (gpt2's token embedding and output projection) lives in
 *   both; after the strategy's exchange the two stages swap their gradients and each adds
 *   the other's (pipe_sync_tied), so both copies take the same update. Summing after the
 *   exchange is right because averaging over replicas is linear; the ZeRO strategies,
 *   whose ranks hold shards of the gradient, are refused with a tie at submit.
 *
 * Ownership: pipe_init borrows the whole model only for the call and the world
 * communicator for the pipeline's life; the pipeline owns its stage models and buffers
 * (pipe_cleanup). pipe_model's model is borrowed. */
#ifndef DDPB_PIPELINE_H
#define DDPB_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "common/report.h"
#include "common/vocab.h"
#include "worker/comm/comm.h"
#include "worker/ddp/ddp.h"
#include "worker/nn/model.h"
#include "worker/observe.h"

/* PIPE_1F1B, PIPE_GPIPE: common/vocab.h's schedules, in its order. */
#define PIPE_SCHEDULE_ENUM(id, name) PIPE_##id,
enum pipe_schedule { VOCAB_SCHEDULES(PIPE_SCHEDULE_ENUM) };

struct pipe_config {
    int stages, micro_batches;
    enum pipe_schedule schedule;
    int batch;         /* samples per step of a replica; micro_batches divides it */
    bool balance_time; /* stages balanced by measured layer time, not parameters */
    const char *split; /* the layers stages 1.. start at, comma-separated; NULL or "":
                          balanced. Borrowed for pipe_init. */
};

/* One step on this rank: compute, and the point-to-point traffic with the neighbours. */
struct pipe_stats {
    int64_t forward_ns, backward_ns; /* the stage's compute, over the micro-batches */
    int64_t p2p_ns;                  /* in sends and receives, waiting for neighbours too */
    int64_t p2p_bytes;               /* sent */
    double loss_sum;                 /* the last stage: the micro-batches' mean losses */
    int right;                       /* the last stage: labels predicted right */
};

/* Rank 0's profile of the whole model on one micro-batch, and the cut (report "pipe", the
 * input of the daemon's model of the step, daemon/perf_pipe.h): per layer, forward and
 * backward ns (the median of three passes) and parameter bytes; per stage after the first,
 * the layer it starts at and the bytes of one micro-batch's activation crossing into it;
 * and the whole model timed the same way on the whole batch (what a micro-batch costs
 * against its batch: a layer's fixed cost per call does not shrink with the samples). */
struct pipe_profile {
    int nlayers;
    int64_t *forward_ns, *backward_ns, *param_bytes; /* owned, nlayers each */
    int64_t batch_forward_ns, batch_backward_ns;     /* sums over layers, on cfg.batch */
    int first[65];
    int64_t cut_bytes[65];
};

struct pipeline {
    struct pipe_config cfg;
    int stage, replica, prev, next; /* world ranks of the neighbours, -1 at the ends */
    int first, end;                 /* the whole model's layers this stage runs */
    int mb;                         /* samples per micro-batch */
    int labels_per;                 /* labels per sample (a sequence model: tokens) */
    struct comm *world;             /* borrowed */
    struct nn_model *slots;         /* owned; slot 0 owns the arenas */
    int nslots;
    size_t in_floats, out_floats; /* per micro-batch: the activation received, sent */
    size_t sample_floats;         /* of the data, stage 0 */
    float *in_act;                /* nslots x in_floats: each slot's received input */
    float *out_buf, *dout, *din;  /* the activation sent, its gradient, ours sent back */
    int tie_param;                /* the tied weight's parameter in this stage, -1 */
    int tie_peer;                 /* the world rank holding its other copy */
    float *tie_buf;               /* owned: the other copy's gradient */
    struct pipe_profile *profile; /* owned, rank 0 only (else NULL): the model's input */
};

/* Cuts whole (built, parameters initialised) for this rank of world (its stage and replica
 * from the rank) and prepares the stage's slots for micro-batches of cfg->batch /
 * cfg->micro_batches samples. Balancing by time prepares and runs whole on rank 0 (its
 * parameters unchanged: the gradients are zeroed after). Collective over world. */
int pipe_init(struct pipeline *p, const struct pipe_config *cfg, struct nn_model *whole,
              struct comm *world, struct err *e);
void pipe_cleanup(struct pipeline *p);
/* The stage's model whose arenas the strategy exchanges and the optimizer updates. */
struct nn_model *pipe_model(struct pipeline *p);
bool pipe_is_last(const struct pipeline *p);
/* Rank 0: emits its profile and the cut (report "pipe") for repeat; others: nothing. */
int pipe_report_profile(const struct pipeline *p, struct report_writer *w, int repeat,
                        struct err *e);
/* Bytes of every slot's activation workspace. */
int64_t pipe_activation_bytes(const struct pipeline *p);

/* One training step of the schedule over a replica's batch: x (stage 0 reads it) and y
 * (the last stage), cut into micro-batches. Before each backward, ddp_begin_step(ddp,
 * whether it is the step's last); hook(ctx) is the backward hook. Spans go to obs's trace
 * when it traces (obs may be NULL). */
int pipe_train_step(struct pipeline *p, const float *x, const int32_t *y, uint64_t step,
                    struct ddp *ddp, nn_grad_hook_fn hook, void *ctx, struct observe *obs,
                    struct pipe_stats *st, struct err *e);
/* After the strategy's exchange: the tied weight's two copies swap gradients and add
 * them. Nothing where no tie crosses this stage. Time and bytes add to st. */
int pipe_sync_tied(struct pipeline *p, struct pipe_stats *st, struct err *e);
/* Evaluation of a batch (n_valid of its samples count): forwards only, micro-batch by
 * micro-batch. The last stage gets the summed per-sample loss and the labels right. */
int pipe_eval_batch(struct pipeline *p, const float *x, const int32_t *y, int n_valid,
                    double *loss_sum, int *right, struct err *e);

#endif
