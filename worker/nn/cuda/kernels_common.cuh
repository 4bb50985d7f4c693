/* kernels_common: what every CUDA file of worker/nn/cuda shares: loads and stores between the
 * storage types (float, __half, __nv_bfloat16) and float arithmetic, the launch size of
 * a grid-stride loop, the loop itself, and the dispatch from enum gpu_dtype to a type.
 *
 * Decision: arithmetic is always float; stores round to nearest-even, so an fp32 kernel
 * computes what the CPU reference loop computes and the half types round as PyTorch's do.
 * The grid is capped: one launch serves 10 elements and 100 M. Everything is internal
 * linkage (anonymous namespace), so each .cu file gets its own copy and no symbol clashes. */
#ifndef DDPB_GPU_KERNELS_COMMON_CUH
#define DDPB_GPU_KERNELS_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stddef.h>

#include "worker/nn/cuda/gpu.h"

#define GPU_THREADS 256
#define GPU_MAX_BLOCKS 4096

namespace
{

__device__ __forceinline__ float ld(float x)
{
    return x;
}
__device__ __forceinline__ float ld(__half x)
{
    return __half2float(x);
}
__device__ __forceinline__ float ld(__nv_bfloat16 x)
{
    return __bfloat162float(x);
}
template <typename T> __device__ __forceinline__ T st(float x);
template <> __device__ __forceinline__ float st<float>(float x)
{
    return x;
}
template <> __device__ __forceinline__ __half st<__half>(float x)
{
    return __float2half_rn(x);
}
template <> __device__ __forceinline__ __nv_bfloat16 st<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}

/* Blocks of GPU_THREADS for n elements, at least 1, at most GPU_MAX_BLOCKS. */
inline unsigned grid_for(size_t n)
{
    size_t b = (n + GPU_THREADS - 1) / GPU_THREADS;
    return (unsigned)(b < 1 ? 1 : b > GPU_MAX_BLOCKS ? GPU_MAX_BLOCKS : b);
}

} // namespace

#define GRID_STRIDE(i, n)                                                                      \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                    \
         i += (size_t)gridDim.x * blockDim.x)

/* Runs the statements with T the C++ type of enum gpu_dtype t. */
#define GPU_DISPATCH(t, ...)                                                                   \
    do {                                                                                       \
        switch (t) {                                                                           \
        case GPU_F32: {                                                                        \
            typedef float T;                                                                   \
            __VA_ARGS__;                                                                       \
        } break;                                                                               \
        case GPU_F16: {                                                                        \
            typedef __half T;                                                                  \
            __VA_ARGS__;                                                                       \
        } break;                                                                               \
        case GPU_BF16: {                                                                       \
            typedef __nv_bfloat16 T;                                                           \
            __VA_ARGS__;                                                                       \
        } break;                                                                               \
        }                                                                                      \
    } while (0)

#endif
