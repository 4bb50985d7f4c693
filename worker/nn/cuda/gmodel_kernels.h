/* gmodel_kernels: the CUDA kernels only the model runner needs (gmodel_kernels.cu): the
 * input batch from the host's NCHW float32 into the runner's NHWC dtype, flatten's
 * transposes between NHWC and PyTorch's (c,h,w) order, and dropout with the CPU engine's
 * masks (nn/dropout.c: the same hash of (key, logical index)).
 *
 * Conventions as gpu.h: queued on stream s, outputs first, arithmetic in float.
 * Ownership: kernels borrow everything. */
#ifndef DDPB_GPU_GMODEL_KERNELS_H
#define DDPB_GPU_GMODEL_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "worker/nn/cuda/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst (n,h,w,c) of type t = src (n,c,h,w) float */
void gmodel_k_input(void *dst, enum gpu_dtype t, const float *src, int n, int c, int h, int w,
                    cudaStream_t s);
/* dst (n, c*h*w in (c,h,w) order) = src (n,h,w,c); both of type t */
void gmodel_k_nhwc_to_nchw(void *dst, const void *src, int n, int c, int h, int w,
                           enum gpu_dtype t, cudaStream_t s);
/* dst (n,h,w,c) = src (n,c,h,w); both of type t */
void gmodel_k_nchw_to_nhwc(void *dst, const void *src, int n, int c, int h, int w,
                           enum gpu_dtype t, cudaStream_t s);
/* out = inp * keep / (1 - p) over the logical elements (n,c,h,w) stored NHWC (a 2-D
 * tensor: h = w = 1); keep = nn_dropout_keep's verdict under key (channelwise: per (n,c)).
 * out may be inp. The backward is the same call on the gradients. */
void gmodel_k_dropout(void *out, const void *inp, enum gpu_dtype t, int n, int c, int h, int w,
                      float p, int channelwise, uint64_t key, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
