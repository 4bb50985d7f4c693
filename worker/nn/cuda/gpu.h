/* gpu: the CUDA twins of worker/nn/'s own loops (kernels.cu) and the runtime helpers the
 * GPU layers share (gpu.c): errors, device memory, streams. cuDNN layers are in
 * cudnn_layers.h, cuBLAS linear in linear.c (gpu_layers.h).
 *
 * Conventions (those of nn.h, on the device):
 * - 4-D activations are NHWC (channels last) so cuDNN and cuBLAS use tensor cores; the
 *   CPU reference is NCHW, and tests/gpu transposes when comparing.
 * - Activations may be float32, float16 or bfloat16 (enum gpu_dtype); parameters,
 *   gradients of parameters and optimizer state are float32 (master weights) in device
 *   arenas; losses and reductions accumulate in float32 (double for the loss sum).
 * - Every kernel launch takes the stream it runs on and returns at once; launch errors
 *   surface at gpu_check / gpu_sync (CUDA's errors are sticky per context).
 * - Outputs first, then inputs; backward overwrites input gradients and accumulates into
 *   parameter gradients, as on the CPU.
 *
 * Ownership: gpu_alloc's memory is the caller's (gpu_free); kernels borrow everything. */
#ifndef DDPB_GPU_H
#define DDPB_GPU_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#ifdef __cplusplus
extern "C" {
#endif

enum gpu_dtype { GPU_F32 = 0, GPU_F16, GPU_BF16 };

size_t gpu_dtype_size(enum gpu_dtype t);
const char *gpu_dtype_name(enum gpu_dtype t);
/* "fp32", "fp16", "bf16" (the spec's precision names) -> dtype; -1 when unknown */
int gpu_dtype_parse(const char *precision);

/* ---- runtime (gpu.c) ---------------------------------------------------------------- */

/* 0 for cudaSuccess, else -1 with e = "what: CUDA error <name>: <string>". */
int gpu_check(cudaError_t rc, const char *what, struct err *e);
/* The last launch's error, then a stream synchronisation. */
int gpu_sync(cudaStream_t s, const char *what, struct err *e);
/* Zero-filled device memory; NULL with e set. Caller owns it (gpu_free). */
void *gpu_alloc(size_t bytes, struct err *e);
void gpu_free(void *p);
int gpu_upload(void *dst, const void *src, size_t bytes, struct err *e);
int gpu_download(void *dst, const void *src, size_t bytes, struct err *e);
/* "NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB, driver 13.0, runtime 13.0" into buf; -1 with
 * e set (no device, no driver). */
int gpu_describe(int device, char *buf, size_t len, struct err *e);

/* ---- elementwise (kernels.cu) --------------------------------------------------------- */

enum gpu_act { GPU_ACT_RELU = 0, GPU_ACT_RELU6 }; /* the values of enum nn_act */

/* out (n) = relu(inp) or clamp(inp, 0, 6); out may be inp. */
void gpu_act_forward(void *out, const void *inp, size_t n, enum gpu_act a, enum gpu_dtype t,
                     cudaStream_t s);
/* dinp = dout where 0 < out (< 6 for relu6), else 0 (from the output, as nn_act_backward);
 * dinp may be dout. */
void gpu_act_backward(void *dinp, const void *dout, const void *out, size_t n, enum gpu_act a,
                      enum gpu_dtype t, cudaStream_t s);
/* out = a + b, then ReLU when relu; da = db = dout masked by out > 0 when relu. */
void gpu_add_forward(void *out, const void *a, const void *b, size_t n, int relu,
                     enum gpu_dtype t, cudaStream_t s);
void gpu_add_backward(void *da, void *db, const void *dout, const void *out, size_t n, int relu,
                      enum gpu_dtype t, cudaStream_t s);
/* dst (n, type dt) = src (n, type st), round to nearest even. */
void gpu_cast(void *dst, enum gpu_dtype dt, const void *src, enum gpu_dtype st, size_t n,
              cudaStream_t s);
/* dst (n floats) += src (n, type st): a half-precision gradient into its float arena. */
void gpu_accumulate(float *dst, const void *src, enum gpu_dtype st, size_t n, cudaStream_t s);
/* x (n floats) *= factor */
void gpu_scale(float *x, size_t n, float factor, cudaStream_t s);
/* *found (device int) |= 1 when any of x (n floats) is inf or NaN; never cleared here. */
void gpu_find_nonfinite(int *found, const float *x, size_t n, cudaStream_t s);
/* out (rows, cols) += bias (cols) per row (a linear layer's bias; NHWC conv's too). */
void gpu_bias_add(void *out, const float *bias, int rows, int cols, enum gpu_dtype t,
                  cudaStream_t s);
/* dbias (cols) += sum over rows of dout (rows, cols). */
void gpu_bias_grad(float *dbias, const void *dout, int rows, int cols, enum gpu_dtype t,
                   cudaStream_t s);

/* ---- softmax cross-entropy (kernels.cu) ---------------------------------------------- */

/* probs (N,K) float = softmax(logits (N,K) of type t); row_loss (N) = -log probs[label],
 * row_correct (N) = label is the first arg max; rows >= n_valid get 0. A label outside
 * [0, K) sets *bad_label (device int) to 1. */
void gpu_xent_forward(float *probs, float *row_loss, int *row_correct, int *bad_label,
                      const void *logits, enum gpu_dtype t, const int32_t *labels, int n, int k,
                      int n_valid, cudaStream_t s);
/* *loss (device double) = sum(row_loss[0..n)) / n_valid, *correct = sum(row_correct). */
void gpu_xent_reduce(double *loss, int *correct, const float *row_loss, const int *row_correct,
                     int n, int n_valid, cudaStream_t s);
/* dlogits (N,K, type t) = (probs - onehot) / n_valid * scale for valid rows, else 0
 * (scale: the loss scale of mixed precision, 1 otherwise). */
void gpu_xent_backward(void *dlogits, enum gpu_dtype t, const float *probs,
                       const int32_t *labels, int n, int k, int n_valid, float scale,
                       cudaStream_t s);

/* ---- optimizers (kernels.cu; scalars from gpu_optim.c) ------------------------------- */

/* The per-step scalars of nn/optim.c's update, formed on the host in the same order and
 * precision as the CPU path so both round alike. */
struct gpu_optim_scalars {
    int type;                     /* enum nn_optim_type */
    float lr, wd, momentum, damp; /* SGD: damp = 1 - dampening */
    int nesterov, first;          /* SGD: first step clones the gradient */
    float w1, b2, w2, eps;        /* Adam: 1-beta1, beta2, 1-beta2 */
    float step_size, bc2_sqrt, shrink;
    int decoupled; /* AdamW */
};

struct nn_optim;
/* The scalars of optimizer o's current step (nn_optim_begin_step done) at rate lr. */
void gpu_optim_scalars_for(const struct nn_optim *o, double lr, struct gpu_optim_scalars *out);

/* params (len) updated from grads (len) with state (SGD: momentum (len); Adam: m then v,
 * each `stride` floats apart: the optimizer arena's layout). */
void gpu_optim_update(float *params, const float *grads, float *state, size_t stride,
                      size_t len, const struct gpu_optim_scalars *sc, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
