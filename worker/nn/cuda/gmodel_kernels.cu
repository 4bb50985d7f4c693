/* gmodel_kernels: see gmodel_kernels.h.
 *
 * Decision: dropout recomputes nn/nn.c's splitmix64 hash on the device, bit for bit (64-bit
 * integer arithmetic, the 53-bit uniform compared in double against p as the CPU does),
 * so no mask is stored and a GPU run drops what a CPU run with the same seed drops.
 * Transposes are one thread per element with the write coalesced; they run once per
 * flatten, on tensors of a few thousand values per sample. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "worker/nn/cuda/gmodel_kernels.h"
#include "worker/nn/cuda/kernels_common.cuh"

namespace
{

/* nn/nn.c's nn_hash64 and nn_hash_uniform */
__device__ __forceinline__ uint64_t hash64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

__device__ __forceinline__ double hash_uniform(uint64_t key, uint64_t index)
{
    return (double)(hash64(key ^ hash64(index)) >> 11) * 0x1.0p-53;
}

/* An element's (batch, channel, row, column), and its flat index in either layout: one
 * place for the index arithmetic every layout kernel below does. */
struct pos4 {
    int b, ch, y, x;
};

/* Splits i into its digits in the radices r0 (innermost), r1, r2; the rest is *d3. */
__device__ __forceinline__ void unravel4(size_t i, int r0, int r1, int r2, int *d0, int *d1,
                                         int *d2, int *d3)
{
    *d0 = (int)(i % r0);
    i /= r0;
    *d1 = (int)(i % r1);
    i /= r1;
    *d2 = (int)(i % r2);
    *d3 = (int)(i / r2);
}

__device__ __forceinline__ pos4 nhwc_pos(size_t i, int c, int h, int w)
{
    pos4 q;
    unravel4(i, c, w, h, &q.ch, &q.x, &q.y, &q.b);
    return q;
}

__device__ __forceinline__ pos4 nchw_pos(size_t i, int c, int h, int w)
{
    pos4 q;
    unravel4(i, w, h, c, &q.x, &q.y, &q.ch, &q.b);
    return q;
}

__device__ __forceinline__ size_t nchw_at(pos4 q, int c, int h, int w)
{
    return (((size_t)q.b * c + q.ch) * h + q.y) * w + q.x;
}

__device__ __forceinline__ size_t nhwc_at(pos4 q, int c, int h, int w)
{
    return (((size_t)q.b * h + q.y) * w + q.x) * c + q.ch;
}

template <typename T>
__global__ void input_k(T *dst, const float *src, int n, int c, int h, int w)
{
    size_t total = (size_t)n * c * h * w;
    GRID_STRIDE(i, total)
    { /* i indexes dst (n,h,w,c) */
        dst[i] = st<T>(src[nchw_at(nhwc_pos(i, c, h, w), c, h, w)]);
    }
}

/* to_nchw: dst index is NCHW (read NHWC); else dst index is NHWC (read NCHW) */
template <typename T>
__global__ void transpose_k(T *dst, const T *src, int n, int c, int h, int w, int to_nchw)
{
    size_t total = (size_t)n * c * h * w;
    GRID_STRIDE(i, total)
    {
        if (to_nchw)
            dst[i] = src[nhwc_at(nchw_pos(i, c, h, w), c, h, w)];
        else
            dst[i] = src[nchw_at(nhwc_pos(i, c, h, w), c, h, w)];
    }
}

template <typename T>
__global__ void dropout_k(T *out, const T *inp, int n, int c, int h, int w, float p,
                          int channelwise, uint64_t key, float scale)
{
    size_t total = (size_t)n * c * h * w;
    GRID_STRIDE(i, total)
    { /* NHWC storage, logical (n,c,h,w) index for the hash */
        pos4 q = nhwc_pos(i, c, h, w);
        uint64_t plane = (uint64_t)q.b * (uint64_t)c + (uint64_t)q.ch;
        uint64_t index = channelwise ? plane : (plane * (uint64_t)h + (uint64_t)q.y) * w + q.x;
        bool keep = hash_uniform(key, index) >= (double)p;
        out[i] = st<T>(keep ? ld(inp[i]) * scale : 0.f);
    }
}

} // namespace

extern "C" {

void gmodel_k_input(void *dst, enum gpu_dtype t, const float *src, int n, int c, int h, int w,
                    cudaStream_t s)
{
    size_t total = (size_t)n * c * h * w;
    GPU_DISPATCH(t,
                 input_k<T><<<grid_for(total), GPU_THREADS, 0, s>>>((T *)dst, src, n, c, h, w));
}

void gmodel_k_nhwc_to_nchw(void *dst, const void *src, int n, int c, int h, int w,
                           enum gpu_dtype t, cudaStream_t s)
{
    size_t total = (size_t)n * c * h * w;
    GPU_DISPATCH(t, transpose_k<T><<<grid_for(total), GPU_THREADS, 0, s>>>(
                        (T *)dst, (const T *)src, n, c, h, w, 1));
}

void gmodel_k_nchw_to_nhwc(void *dst, const void *src, int n, int c, int h, int w,
                           enum gpu_dtype t, cudaStream_t s)
{
    size_t total = (size_t)n * c * h * w;
    GPU_DISPATCH(t, transpose_k<T><<<grid_for(total), GPU_THREADS, 0, s>>>(
                        (T *)dst, (const T *)src, n, c, h, w, 0));
}

void gmodel_k_dropout(void *out, const void *inp, enum gpu_dtype t, int n, int c, int h, int w,
                      float p, int channelwise, uint64_t key, cudaStream_t s)
{
    size_t total = (size_t)n * c * h * w;
    float scale = p >= 1.0f ? 0.0f : 1.0f / (1.0f - p);
    GPU_DISPATCH(t, dropout_k<T><<<grid_for(total), GPU_THREADS, 0, s>>>(
                        (T *)out, (const T *)inp, n, c, h, w, p, channelwise, key, scale));
}

} // extern "C"
