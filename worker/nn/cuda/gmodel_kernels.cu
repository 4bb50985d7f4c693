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

namespace {

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

template <typename T>
__global__ void input_k(T *dst, const float *src, int n, int c, int h, int w)
{
    size_t total = (size_t)n * c * h * w;
    GRID_STRIDE(i, total) { /* i indexes dst (n,h,w,c) */
        int ch = (int)(i % c);
        size_t r = i / c;
        int x = (int)(r % w);
        r /= w;
        int y = (int)(r % h);
        int b = (int)(r / h);
        dst[i] = st<T>(src[(((size_t)b * c + ch) * h + y) * w + x]);
    }
}

/* to_nchw: dst index is NCHW (read NHWC); else dst index is NHWC (read NCHW) */
template <typename T>
__global__ void transpose_k(T *dst, const T *src, int n, int c, int h, int w, int to_nchw)
{
    size_t total = (size_t)n * c * h * w;
    GRID_STRIDE(i, total) {
        if (to_nchw) {
            int x = (int)(i % w);
            size_t r = i / w;
            int y = (int)(r % h);
            r /= h;
            int ch = (int)(r % c);
            int b = (int)(r / c);
            dst[i] = src[(((size_t)b * h + y) * w + x) * c + ch];
        } else {
            int ch = (int)(i % c);
            size_t r = i / c;
            int x = (int)(r % w);
            r /= w;
            int y = (int)(r % h);
            int b = (int)(r / h);
            dst[i] = src[(((size_t)b * c + ch) * h + y) * w + x];
        }
    }
}

template <typename T>
__global__ void dropout_k(T *out, const T *inp, int n, int c, int h, int w, float p,
                          int channelwise, uint64_t key, float scale)
{
    size_t total = (size_t)n * c * h * w;
    GRID_STRIDE(i, total) { /* NHWC storage, logical (n,c,h,w) index for the hash */
        int ch = (int)(i % c);
        size_t r = i / c;
        int x = (int)(r % w);
        r /= w;
        int y = (int)(r % h);
        uint64_t b = (uint64_t)(r / h);
        uint64_t plane = b * (uint64_t)c + (uint64_t)ch;
        uint64_t index = channelwise ? plane : (plane * (uint64_t)h + (uint64_t)y) * w + x;
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
    GPU_DISPATCH(t, input_k<T><<<grid_for(total), GPU_THREADS, 0, s>>>((T *)dst, src, n, c, h,
                                                                      w));
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
