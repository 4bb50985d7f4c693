/* gmodel: the GPU model runner. It takes a zoo model already built on the host (an
 * nn_model graph, finished, parameters initialised by nn_model_init_params) and trains it
 * on the GPU with worker/nn/cuda's layers: forward, softmax cross-entropy and backward in NHWC,
 * with a per-layer gradient hook as nn_model_backward has, so ddp/ runs unchanged over it.
 *
 *     gmodel_create(&g, m, batch, "bf16", NULL, &opts, e); uploads the host parameters
 *     gmodel_zero_grad(g);
 *     gmodel_forward(g, x, y, n, 1, step, reuse, e);    x: host NCHW floats
 *     gmodel_backward(g, hook, ctx, e);                  hook per layer, reverse order
 *     gmodel_wait_backward(g, &loss, &right, e);         the loss of the forward
 *     ... ddp_finish, gmodel_unscale (fp16) ...
 *     gmodel_optim_update(g, o, lr, 0, 0, n);  gmodel_after_update(g);
 *
 * Decisions:
 * - Same arenas, same offsets: parameters, gradients and batch-norm buffers are float32
 *   device arenas with the host arenas' lengths and offsets, so a DDP bucket or a
 *   broadcast is the same slice on both. One thing differs inside a slice: convolution
 *   weights are (Cout,KH,KW,Cin/G) on the device (cuDNN's NHWC filters) where the host
 *   has (Cout,Cin/G,KH,KW); gmodel_arena_to_device / _to_host (gmodel_host.h) permute
 *   (uploads, downloads, tests). Reductions are elementwise, so every strategy is
 *   indifferent to it.
 * - Activations and their gradients are in the precision's dtype (fp32, fp16, bf16), NHWC
 *   for 4-D tensors; flatten transposes to PyTorch's (c,h,w) order so linear weights are
 *   the host's. fp16 and bf16 keep float32 master weights and a half-precision copy of
 *   them (cast after each update) for convolutions and linear layers; batch norm reads
 *   the float32 weights (cuDNN takes float parameters with half data). fp16 seeds backward
 *   with the loss scale (loss_scale.h); gmodel_unscale divides it out and reports inf/NaN.
 * - Dropout draws the CPU engine's masks: the same counter hash of (seed, step, layer,
 *   logical index), so a GPU step and a CPU step drop the same elements.
 * - The runner computes on one stream (NULL: CUDA's legacy default stream, which is what
 *   the NCCL communicator of comm_create_from_spec fences against). After each layer
 *   with parameters, an event is recorded on it and handed to the hook (struct
 *   nn_grad_ready.ready_event): an NCCL bucket waits for that layer, not for the rest of
 *   backward.
 * - The whole activation workspace is one allocation made at creation, and the cuDNN
 *   layers share one more (gpu_layers.h: sized to the largest layer's need, allocated
 *   once); phases are timed with CUDA events (gmodel_phase_ms); gmodel_mem_used samples
 *   the device's memory in use for the peak the trainer reports.
 * - The host waits only where it needs something, each time on an event, never on the
 *   stream: gmodel_wait_loss for the end of backward (the loss comes back in one async
 *   copy into pinned memory on the way; the end is what keeps the trainer's exposed
 *   communication free of compute), gmodel_unscale for the non-finite flag (fp16),
 *   gmodel_phase_ms for the step's last event (the step time needs its end). Nothing
 *   else in a step synchronises.
 * - cuDNN choices (gmodel_opts): convolution algorithms from cuDNN's heuristics, or
 *   measured once per shape in benchmark mode (the spec's cudnn_benchmark); batch norm
 *   followed by ReLU fused by cuDNN where it supports it (fp16/bf16).
 * - A reused batch (the synthetic dataset's fixed batch) is uploaded once, as a PyTorch
 *   benchmark keeps its synthetic batch on the GPU; other batches are uploaded per step.
 *
 * This header is the device half (gmodel.c), which needs -Dcuda and -Dcudnn; the host
 * half (gmodel_host.h: the weight permutation, gmodel_check) builds everywhere and is
 * unit-tested on the CPU.
 *
 * Ownership: gmodel_create returns an owned runner (gmodel_destroy); it borrows the
 * nn_model (which must outlive it) and the stream. Device pointers read out of it are
 * borrowed until gmodel_destroy. */
#ifndef DDPB_GPU_GMODEL_H
#define DDPB_GPU_GMODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/err.h"
#include "worker/nn/model.h"
#include "worker/nn/optim.h"

struct gmodel;

/* How the cuDNN layers choose (a zeroed struct, or NULL: cuDNN's heuristics, no TF32,
 * batch norm + ReLU fused where cuDNN supports it). */
struct gmodel_opts {
    bool cudnn_benchmark; /* measure each convolution shape's algorithms once
                             (cudnnFind*AlgorithmEx, PyTorch's cudnn.benchmark) */
    bool tf32;            /* fp32 convolutions may use TF32 tensor ops */
    bool no_fused_bn;     /* batch norm + ReLU on the plain path (tests compare both) */
    FILE *trace;          /* borrowed, may be NULL: the cuDNN choices (gpu_dnn_opts) */
};

/* precision: "fp32", "fp16" or "bf16"; stream: a cudaStream_t (borrowed), NULL for the
 * legacy default stream; opts borrowed for the call (may be NULL). Prepares every layer
 * for `batch` in training mode, allocates the arenas and the workspaces, uploads m's
 * parameters and buffers. NULL with e set. */
struct gmodel *gmodel_create(struct nn_model *m, int batch, const char *precision, void *stream,
                             const struct gmodel_opts *opts, struct err *e);

/* What the cuDNN layers chose, for tests and reports. */
struct gmodel_cudnn_info {
    int bn_fused, bn_plain;       /* batch norms with a ReLU on each path */
    int conv_ranked, conv_cached; /* convolution directions ranked anew, taken from cache */
    size_t workspace_bytes;       /* the shared workspace */
    size_t activation_bytes;      /* the activation workspace (tensors, their gradients) */
};
void gmodel_cudnn_info(const struct gmodel *g, struct gmodel_cudnn_info *out);
void gmodel_destroy(struct gmodel *g);

/* Device arenas (float32, nparams / nbuffers floats) and the optimizer state. */
float *gmodel_params(struct gmodel *g);
float *gmodel_grads(struct gmodel *g);
float *gmodel_buffers(struct gmodel *g);
/* The precision's dtype name ("float32", ...), and whether it scales the loss (fp16). */
const char *gmodel_dtype_name(const struct gmodel *g);
bool gmodel_wants_loss_scale(const struct gmodel *g);

void gmodel_zero_grad(struct gmodel *g);
/* Uploads x (batch, C, H, W host floats) and y (batch labels), runs the forward (train:
 * batch statistics and dropout keyed by step; else running statistics, no dropout) and the
 * loss of the first n_valid rows, and seeds backward with dloss/dlogits times loss_scale
 * (1 unless fp16). reuse: x and y are the same memory with the same contents as at the
 * previous call with reuse (skips the upload). All queued: returns before the GPU is done. */
int gmodel_forward(struct gmodel *g, const float *x, const int32_t *y, int n_valid, int train,
                   uint64_t step, bool reuse, float loss_scale, struct err *e);
/* Backward through every layer in reverse, gradients ACCUMULATING into the gradient arena;
 * hook (may be NULL) is called once per layer with parameters right after its kernels are
 * queued, with that layer's event. Queued, as forward. */
int gmodel_backward(struct gmodel *g, nn_grad_hook_fn hook, void *ctx, struct err *e);
/* Waits for the forward/backward queued so far and returns the loss and correct count of
 * the last forward (ERR_INVALID when a label was outside the classes). */
int gmodel_wait_loss(struct gmodel *g, double *loss, int *correct, struct err *e);
/* fp16: gradients *= factor (1 / loss scale) and *finite = no inf/NaN among them (waits). */
int gmodel_unscale(struct gmodel *g, float factor, bool *finite, struct err *e);

/* The optimizer's device state for cfg (zeroed), once before the first update. */
int gmodel_optim_init(struct gmodel *g, const struct nn_optim_cfg *cfg, struct err *e);
/* o's current step (nn_optim_begin_step done, on the host) on [off, off+len) of the
 * arenas with state at state_off, on the device. */
void gmodel_optim_update(struct gmodel *g, const struct nn_optim *o, double lr, size_t off,
                         size_t state_off, size_t len);
/* x[0..n) *= factor on the runner's stream. */
void gmodel_scale(struct gmodel *g, float *x, size_t n, float factor);
/* After the parameters changed (update, broadcast): refreshes the half-precision weights. */
void gmodel_after_update(struct gmodel *g);

/* Phase timing with CUDA events: gmodel_mark_step_begin starts a step's record; forward and
 * backward mark themselves; the optimizer is bracketed by mark_optim(g, 0/1). phase_ms
 * waits for the step and sums each phase over its micro-batches. */
void gmodel_mark_step_begin(struct gmodel *g);
void gmodel_mark_optim(struct gmodel *g, int end);
int gmodel_phase_ms(struct gmodel *g, double *forward, double *backward, double *optim,
                    struct err *e);
/* Bytes of device memory in use now (cudaMemGetInfo: this process's context, workspaces,
 * NCCL's buffers; on a shared GPU other processes too). */
int64_t gmodel_mem_used(void);

/* Downloads parameters and buffers into host arrays (nparams / nbuffers floats, either
 * may be NULL) in the host's order (gmodel_arena_to_host). */
int gmodel_download(struct gmodel *g, float *params, float *buffers, struct err *e);
/* A device scratch of GMODEL_SCRATCH_FLOATS floats for a few host values that must
 * travel through device memory (the trainer's NCCL allreduce of an evaluation tally; nn/
 * knows no communicator). gmodel_scratch_put waits for the runner's stream, uploads
 * v[0..n) and returns the scratch (borrowed until gmodel_destroy), NULL with e set;
 * gmodel_scratch_get downloads its first n floats into v (synchronous). */
#define GMODEL_SCRATCH_FLOATS 8
float *gmodel_scratch_put(struct gmodel *g, const float *v, int n, struct err *e);
int gmodel_scratch_get(struct gmodel *g, float *v, int n, struct err *e);

#endif
