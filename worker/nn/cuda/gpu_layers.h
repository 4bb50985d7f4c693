/* gpu_layers: the CUDA twins of nn/'s library-backed layers: convolution, batch
 * normalization and pooling through cuDNN's legacy API (cudnn_layers.c, built with
 * -Dcudnn), linear through cuBLAS (linear.c).
 *
 * Decisions:
 * - NHWC activations and KRSC (Cout,KH,KW,Cin/G) convolution weights: the layouts cuDNN's
 *   tensor-core kernels want. Weights and their gradients stay float32 in the parameter
 *   arena; for fp16/bf16 the caller passes a half-precision copy (gpu_cast) to forward and
 *   backward-data, and the weight gradient comes back in float32 (cuDNN/cuBLAS accumulate
 *   it with beta = 1 into the arena for fp32; for half precision through a float scratch
 *   the state owns).
 * - fp32 runs with FMA math (no TF32) so it matches the CPU reference to float rounding;
 *   fp16/bf16 with tensor-op math. Algorithms come from cuDNN's heuristics (_v7 queries)
 *   at init, the first one that fits the workspace limit; the workspace is owned by the
 *   state, allocated once.
 * - A fused ReLU after batch norm is applied by gpu_act_* on the output (in place) and its
 *   mask is applied to dout before the batch-norm backward, as nn_bn_backward does.
 *
 * Ownership: a state borrows its handle; it owns its descriptors and device buffers
 * (saved statistics, workspace, scratch), freed by *_destroy (which accepts a zeroed or
 * half-made state). */
#ifndef DDPB_GPU_LAYERS_H
#define DDPB_GPU_LAYERS_H

#include <cublas_v2.h>

#include "ddpb_config.h"
#include "worker/nn/cuda/gpu.h"
#include "worker/nn/layers.h"

#if DDPB_HAVE_CUDNN
#include <cudnn.h>

/* ==== convolution ==================================================================== */

struct gpu_conv {
    cudnnHandle_t h; /* borrowed */
    struct nn_conv2d_cfg cfg;
    struct nn_shape in, out;
    enum gpu_dtype t;
    cudnnTensorDescriptor_t x, y, b;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionFwdAlgo_t fwd_algo;
    cudnnConvolutionBwdDataAlgo_t bwd_data_algo;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo;
    void *ws; /* owned */
    size_t ws_bytes;
    void *dw_half; /* owned: half-precision weight gradient before it is added in float */
};

/* Checks the config (nn_conv2d_shape), creates descriptors, picks algorithms (train: the
 * backward ones too) and allocates the workspace. */
int gpu_conv_init(struct gpu_conv *f, cudnnHandle_t h, const struct nn_conv2d_cfg *c,
                  struct nn_shape in, enum gpu_dtype t, int train, struct err *e);
/* out (N,OH,OW,Cout) = conv(inp (N,H,W,Cin), weight (Cout,KH,KW,Cin/G), type t) + bias
 * (Cout float | NULL) */
int gpu_conv_forward(struct gpu_conv *f, void *out, const void *inp, const void *weight,
                     const float *bias, cudaStream_t s, struct err *e);
/* dinp = (NULL: skipped), dweight (float) +=, dbias (float | NULL) += */
int gpu_conv_backward(struct gpu_conv *f, void *dinp, float *dweight, float *dbias,
                      const void *dout, const void *inp, const void *weight, cudaStream_t s,
                      struct err *e);
void gpu_conv_destroy(struct gpu_conv *f);

/* ==== batch normalization ============================================================== */

struct gpu_bn {
    cudnnHandle_t h;
    struct nn_bn_cfg cfg;
    struct nn_shape s;
    enum gpu_dtype t;
    cudnnTensorDescriptor_t x, p;   /* activations, per-channel parameters (float) */
    float *save_mean, *save_invstd; /* owned (C): cuDNN's saved statistics */
};

int gpu_bn_init(struct gpu_bn *f, cudnnHandle_t h, const struct nn_bn_cfg *c, struct nn_shape s,
                enum gpu_dtype t, struct err *e);
/* Training (train = 1): batch statistics, running_mean/var (C float) updated as PyTorch
 * does; evaluation: the running statistics. out may not be inp. relu per the config. */
int gpu_bn_forward(struct gpu_bn *f, void *out, float *running_mean, float *running_var,
                   const void *inp, const float *weight, const float *bias, int train,
                   cudaStream_t s, struct err *e);
/* dinp =, dweight +=, dbias += ; out is the forward's output (the fused ReLU's mask);
 * dout is masked in place when relu. */
int gpu_bn_backward(struct gpu_bn *f, void *dinp, float *dweight, float *dbias, void *dout,
                    const void *inp, const void *out, const float *weight, cudaStream_t s,
                    struct err *e);
void gpu_bn_destroy(struct gpu_bn *f);

/* ==== pooling ========================================================================== */

struct gpu_pool {
    cudnnHandle_t h;
    struct nn_shape in, out;
    enum gpu_dtype t;
    cudnnTensorDescriptor_t x, y;
    cudnnPoolingDescriptor_t pool;
};

/* max: 1 for max pooling, 0 for average (count_include_pad per the config). */
int gpu_pool_init(struct gpu_pool *f, cudnnHandle_t h, int max, const struct nn_pool_cfg *c,
                  struct nn_shape in, enum gpu_dtype t, struct err *e);
int gpu_pool_forward(struct gpu_pool *f, void *out, const void *inp, cudaStream_t s,
                     struct err *e);
/* dinp = ; needs the forward's input and output */
int gpu_pool_backward(struct gpu_pool *f, void *dinp, const void *dout, const void *out,
                      const void *inp, cudaStream_t s, struct err *e);
void gpu_pool_destroy(struct gpu_pool *f);

/* "cuDNN 9.19.0" into buf */
const char *gpu_cudnn_version(char *buf, size_t len);
#endif

/* ==== linear (cuBLAS) ==================================================================== */

struct gpu_linear {
    cublasHandle_t h; /* borrowed */
    struct nn_linear_cfg cfg;
    int n;
    enum gpu_dtype t;
};

int gpu_linear_init(struct gpu_linear *f, cublasHandle_t h, const struct nn_linear_cfg *c,
                    int n, enum gpu_dtype t, struct err *e);
/* out (N,O) = inp (N,I) @ weight (O,I)^T + bias (O float | NULL); weight of type t */
int gpu_linear_forward(struct gpu_linear *f, void *out, const void *inp, const void *weight,
                       const float *bias, cudaStream_t s, struct err *e);
/* dinp (N,I) = (NULL: skipped), dweight (O,I float) +=, dbias (O float | NULL) += */
int gpu_linear_backward(struct gpu_linear *f, void *dinp, float *dweight, float *dbias,
                        const void *dout, const void *inp, const void *weight, cudaStream_t s,
                        struct err *e);

#endif
