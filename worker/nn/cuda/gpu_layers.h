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
 * - Algorithms and math types are dnn_plan.h's decisions: fp32 queries and runs FMA math
 *   (no TF32) so it matches the CPU reference to float rounding, unless a model asks for
 *   TF32; fp16/bf16 tensor-op math; each chosen algorithm runs under the math type cuDNN
 *   ranked it with, set on the descriptor before every call (PyTorch does the same). The
 *   ranking is cuDNN's heuristics (cudnnGet*_v7) or, in benchmark mode, measured
 *   (cudnnFind*AlgorithmEx on the layer's own buffers), once per shape: the struct
 *   gpu_dnn a model's layers share caches the choices.
 * - One workspace per model (struct gpu_dnn): each convolution and batch norm requests
 *   its bytes at init, gpu_dnn_fit allocates the largest once; the layers run one at a
 *   time on one stream, so they take turns in it.
 * - Batch norm followed by a ReLU trains through cuDNN's fused BN+ReLU
 *   (cudnnBatchNormalizationForwardTrainingEx / BackwardEx, CUDNN_BATCHNORM_OPS_BN_ACTIVATION,
 *   CUDNN_BATCHNORM_SPATIAL_PERSISTENT, a reserve space per layer) where cuDNN supports it
 *   (dnn_plan_bn_fused, then cuDNN's own answer); otherwise the plain API, the ReLU applied
 *   by gpu_act_* on the output (in place) and its mask applied to dout before the
 *   batch-norm backward, as nn_bn_backward does.
 *
 * Ownership: a state borrows its struct gpu_dnn (which borrows the handle); it owns its
 * descriptors and device buffers (saved statistics, reserve space, scratch), freed by
 * *_destroy (which accepts a zeroed or half-made state). A gpu_dnn owns the workspace and
 * the cache, and must outlive its layers. */
#ifndef DDPB_GPU_LAYERS_H
#define DDPB_GPU_LAYERS_H

#include <cublas_v2.h>

#include "ddpb_config.h"
#include "worker/nn/cuda/gpu.h"
#include "worker/nn/layers.h"

#if DDPB_HAVE_CUDNN
#include <cudnn.h>
#include <stdbool.h>
#include <stdio.h>

#include "worker/nn/cuda/dnn_plan.h"

/* ==== what a model's cuDNN layers share ============================================ */

struct gpu_dnn_opts {
    bool benchmark;   /* measure the candidates (cudnnFind*AlgorithmEx), once per shape */
    bool tf32;        /* fp32 convolutions may use TF32 tensor ops */
    bool no_fused_bn; /* the plain batch-norm path even where the fused one applies (tests) */
    FILE *trace;      /* borrowed, may be NULL: one line per convolution direction chosen
                         (algorithm, math type, workspace, ranked or cached), for the device
                         tests' logs */
};

struct gpu_dnn {
    cudnnHandle_t h; /* borrowed */
    struct gpu_dnn_opts o;
    void *ws; /* owned: the workspace */
    struct dnn_ws_plan plan;
    struct dnn_algo_cache cache; /* owned */
    void *search;                /* owned until gpu_dnn_fit: cudnnFind's scratch */
    size_t search_bytes;
    bool search_tried;
    int ranked, cached; /* convolution directions ranked by cuDNN, taken from the cache */
};

void gpu_dnn_init(struct gpu_dnn *d, cudnnHandle_t h, const struct gpu_dnn_opts *o);
/* Once every layer is initialised: frees Find's scratch and grows the workspace to the
 * largest request (a later layer may call it again; it grows only when needed). */
int gpu_dnn_fit(struct gpu_dnn *d, struct err *e);
void gpu_dnn_destroy(struct gpu_dnn *d);

/* ==== convolution ==================================================================== */

/* The buffers cudnnFind*AlgorithmEx runs the candidates on in benchmark mode (the layer's
 * own, so measuring allocates no copies): y, dx and dw are overwritten, dw is the float
 * weight gradient (half precision measures into the layer's scratch). NULL without
 * benchmark mode; dx and dw only when training. */
struct gpu_conv_bufs {
    const void *x, *w, *dy;
    void *y, *dx;
    float *dw;
};

struct gpu_conv {
    struct gpu_dnn *d; /* borrowed */
    struct nn_conv2d_cfg cfg;
    struct nn_shape in, out;
    enum gpu_dtype t;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    struct dnn_algo_choice algo[DNN_CONV_NDIRS]; /* forward; training: both backwards */
    int ndirs;                                   /* how many of algo[] are chosen */
    void *dw_half; /* owned: half-precision weight gradient before it is added in float */
};

/* Checks the config (nn_conv2d_shape), creates descriptors, chooses the algorithms (train:
 * the backward ones too) and requests their workspace from d. */
int gpu_conv_init(struct gpu_conv *f, struct gpu_dnn *d, const struct nn_conv2d_cfg *c,
                  struct nn_shape in, enum gpu_dtype t, int train,
                  const struct gpu_conv_bufs *b, struct err *e);
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
    struct gpu_dnn *d; /* borrowed */
    struct nn_bn_cfg cfg;
    struct nn_shape s;
    enum gpu_dtype t;
    cudnnTensorDescriptor_t x, p;    /* activations, per-channel parameters (float) */
    cudnnActivationDescriptor_t act; /* fused: the ReLU */
    bool fused;                      /* training through the Ex API, ReLU fused */
    void *reserve;                   /* owned (fused): forward to backward */
    size_t reserve_bytes;
    float *save_mean, *save_invstd; /* owned (C): cuDNN's saved statistics */
    float *dparams;                 /* owned (fused, 2C): cuDNN writes the parameter
                                       gradients here, then they are added */
};

int gpu_bn_init(struct gpu_bn *f, struct gpu_dnn *d, const struct nn_bn_cfg *c,
                struct nn_shape s, enum gpu_dtype t, struct err *e);
/* Training (train = 1): batch statistics, running_mean/var (C float) updated as PyTorch
 * does; evaluation: the running statistics. out may not be inp. relu per the config. */
int gpu_bn_forward(struct gpu_bn *f, void *out, float *running_mean, float *running_var,
                   const void *inp, const float *weight, const float *bias, int train,
                   cudaStream_t s, struct err *e);
/* dinp =, dweight +=, dbias += ; out is the forward's output (the ReLU's mask); on the
 * plain path dout is masked in place when relu, the fused path leaves it. */
int gpu_bn_backward(struct gpu_bn *f, void *dinp, float *dweight, float *dbias, void *dout,
                    const void *inp, const void *out, const float *weight, const float *bias,
                    cudaStream_t s, struct err *e);
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
