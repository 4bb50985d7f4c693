/* kernels: the project's own CUDA kernels (gpu.h): activations, residual add, casts, loss
 * scaling helpers, bias, softmax cross-entropy, SGD/Adam/AdamW.
 *
 * Decisions: one templated kernel per operation instantiated for float, __half and
 * __nv_bfloat16 and selected by enum gpu_dtype at launch, arithmetic always in float
 * (loads convert up, stores round to nearest-even), so a kernel's fp32 instance computes
 * exactly what the CPU reference loop computes. Grid-stride loops with a capped grid: the
 * same launch serves 10 elements and 100 M. Reductions (bias gradient, loss) are per-block
 * in shared memory plus one atomicAdd per block, in float (double for the loss). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "worker/nn/cuda/gpu.h"
#include "worker/nn/cuda/kernels_common.cuh"

namespace
{

template <typename T> __global__ void act_fwd(T *out, const T *inp, size_t n, int relu6)
{
    GRID_STRIDE(i, n)
    {
        float x = ld(inp[i]);
        x = x > 0.f ? x : 0.f;
        if (relu6)
            x = x < 6.f ? x : 6.f;
        out[i] = st<T>(x);
    }
}

template <typename T>
__global__ void act_bwd(T *dinp, const T *dout, const T *out, size_t n, int relu6)
{
    GRID_STRIDE(i, n)
    {
        float o = ld(out[i]);
        bool pass = o > 0.f && (!relu6 || o < 6.f);
        dinp[i] = st<T>(pass ? ld(dout[i]) : 0.f);
    }
}

template <typename T>
__global__ void add_fwd(T *out, const T *a, const T *b, size_t n, int relu)
{
    GRID_STRIDE(i, n)
    {
        float x = ld(a[i]) + ld(b[i]);
        out[i] = st<T>(relu && x < 0.f ? 0.f : x);
    }
}

template <typename T>
__global__ void add_bwd(T *da, T *db, const T *dout, const T *out, size_t n, int relu)
{
    GRID_STRIDE(i, n)
    {
        float g = relu && !(ld(out[i]) > 0.f) ? 0.f : ld(dout[i]);
        if (da)
            da[i] = st<T>(g);
        if (db)
            db[i] = st<T>(g);
    }
}

template <typename D, typename S> __global__ void cast_k(D *dst, const S *src, size_t n)
{
    GRID_STRIDE(i, n) dst[i] = st<D>(ld(src[i]));
}

template <typename S> __global__ void accumulate_k(float *dst, const S *src, size_t n)
{
    GRID_STRIDE(i, n) dst[i] += ld(src[i]);
}

__global__ void scale_k(float *x, size_t n, float f)
{
    GRID_STRIDE(i, n) x[i] *= f;
}

__global__ void nonfinite_k(int *found, const float *x, size_t n)
{
    bool bad = false;
    GRID_STRIDE(i, n) bad |= !isfinite(x[i]);
    if (__syncthreads_or(bad) && threadIdx.x == 0)
        atomicOr(found, 1);
}

template <typename T> __global__ void bias_add_k(T *out, const float *bias, int rows, int cols)
{
    size_t n = (size_t)rows * cols;
    GRID_STRIDE(i, n) out[i] = st<T>(ld(out[i]) + bias[i % cols]);
}

/* one thread per column, rows strided over blockIdx.y: coalesced along columns */
template <typename T>
__global__ void bias_grad_k(float *dbias, const T *dout, int rows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols)
        return;
    float acc = 0.f;
    for (int r = blockIdx.y; r < rows; r += gridDim.y)
        acc += ld(dout[(size_t)r * cols + c]);
    atomicAdd(&dbias[c], acc);
}

/* one block per row: max, sum of exp, probabilities, loss, arg max */
template <typename T>
__global__ void xent_fwd(float *probs, float *row_loss, int *row_correct, int *bad_label,
                         const T *logits, const int32_t *labels, int k, int n_valid)
{
    int row = blockIdx.x;
    const T *x = logits + (size_t)row * k;
    float *p = probs + (size_t)row * k;
    __shared__ float s_val[GPU_THREADS];
    __shared__ int s_idx[GPU_THREADS];
    float m = -INFINITY;
    int mi = k;
    for (int j = threadIdx.x; j < k; j += blockDim.x) {
        float v = ld(x[j]);
        if (v > m || (v == m && j < mi)) {
            m = v;
            mi = j;
        }
    }
    s_val[threadIdx.x] = m;
    s_idx[threadIdx.x] = mi;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) {
            float o = s_val[threadIdx.x + w];
            int oi = s_idx[threadIdx.x + w];
            if (o > s_val[threadIdx.x] ||
                (o == s_val[threadIdx.x] && oi < s_idx[threadIdx.x])) {
                s_val[threadIdx.x] = o;
                s_idx[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    float mx = s_val[0];
    int argmax = s_idx[0];
    __syncthreads();
    float sum = 0.f;
    for (int j = threadIdx.x; j < k; j += blockDim.x)
        sum += expf(ld(x[j]) - mx);
    s_val[threadIdx.x] = sum;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w)
            s_val[threadIdx.x] += s_val[threadIdx.x + w];
        __syncthreads();
    }
    float total = s_val[0];
    for (int j = threadIdx.x; j < k; j += blockDim.x)
        p[j] = expf(ld(x[j]) - mx) / total;
    if (threadIdx.x == 0) {
        int lab = labels[row];
        bool valid = row < n_valid;
        if (valid && (lab < 0 || lab >= k)) {
            atomicOr(bad_label, 1);
            valid = false;
        }
        /* -log softmax computed from the logits, not log(p): no log(0) for tiny p */
        row_loss[row] = valid ? -(ld(x[lab]) - mx - logf(total)) : 0.f;
        row_correct[row] = valid && argmax == lab;
    }
}

__global__ void xent_reduce_k(double *loss, int *correct, const float *row_loss,
                              const int *row_correct, int n, int n_valid)
{
    __shared__ double s_loss[GPU_THREADS];
    __shared__ int s_ok[GPU_THREADS];
    double l = 0;
    int ok = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        l += row_loss[i];
        ok += row_correct[i];
    }
    s_loss[threadIdx.x] = l;
    s_ok[threadIdx.x] = ok;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) {
            s_loss[threadIdx.x] += s_loss[threadIdx.x + w];
            s_ok[threadIdx.x] += s_ok[threadIdx.x + w];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        *loss = n_valid > 0 ? s_loss[0] / n_valid : 0.0;
        *correct = s_ok[0];
    }
}

template <typename T>
__global__ void xent_bwd(T *dlogits, const float *probs, const int32_t *labels, int n, int k,
                         int n_valid, float scale)
{
    size_t total = (size_t)n * k;
    GRID_STRIDE(i, total)
    {
        int row = (int)(i / k), j = (int)(i % k);
        float g = 0.f;
        if (row < n_valid)
            g = (probs[i] - (labels[row] == j ? 1.f : 0.f)) / n_valid * scale;
        dlogits[i] = st<T>(g);
    }
}

__global__ void sgd_k(float *p, const float *g, float *buf, size_t len, gpu_optim_scalars c)
{
    GRID_STRIDE(i, len)
    {
        float d = g[i];
        if (c.wd != 0)
            d = d + c.wd * p[i];
        if (c.momentum != 0) {
            float b = c.first ? d : buf[i] * c.momentum + c.damp * d;
            buf[i] = b;
            d = c.nesterov ? d + c.momentum * b : b;
        }
        p[i] = p[i] - c.lr * d;
    }
}

__global__ void adam_k(float *p, const float *g, float *m, float *v, size_t len,
                       gpu_optim_scalars c)
{
    GRID_STRIDE(i, len)
    {
        float pi = p[i], gi = g[i];
        if (c.decoupled)
            pi = pi * c.shrink;
        else if (c.wd != 0)
            gi = gi + c.wd * pi;
        float mi = m[i] + c.w1 * (gi - m[i]);
        float vi = v[i] * c.b2 + c.w2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / c.bc2_sqrt + c.eps;
        p[i] = pi - c.step_size * (mi / denom);
    }
}

} // namespace

extern "C" {

void gpu_act_forward(void *out, const void *inp, size_t n, enum gpu_act a, enum gpu_dtype t,
                     cudaStream_t s)
{
    GPU_DISPATCH(t, act_fwd<T><<<grid_for(n), GPU_THREADS, 0, s>>>((T *)out, (const T *)inp, n,
                                                                   a == GPU_ACT_RELU6));
}

void gpu_act_backward(void *dinp, const void *dout, const void *out, size_t n, enum gpu_act a,
                      enum gpu_dtype t, cudaStream_t s)
{
    GPU_DISPATCH(t, act_bwd<T><<<grid_for(n), GPU_THREADS, 0, s>>>(
                        (T *)dinp, (const T *)dout, (const T *)out, n, a == GPU_ACT_RELU6));
}

void gpu_add_forward(void *out, const void *a, const void *b, size_t n, int relu,
                     enum gpu_dtype t, cudaStream_t s)
{
    GPU_DISPATCH(t, add_fwd<T><<<grid_for(n), GPU_THREADS, 0, s>>>((T *)out, (const T *)a,
                                                                   (const T *)b, n, relu));
}

void gpu_add_backward(void *da, void *db, const void *dout, const void *out, size_t n, int relu,
                      enum gpu_dtype t, cudaStream_t s)
{
    GPU_DISPATCH(t, add_bwd<T><<<grid_for(n), GPU_THREADS, 0, s>>>(
                        (T *)da, (T *)db, (const T *)dout, (const T *)out, n, relu));
}

void gpu_cast(void *dst, enum gpu_dtype dt, const void *src, enum gpu_dtype st_, size_t n,
              cudaStream_t s)
{
    GPU_DISPATCH(dt, {
        typedef T D;
        GPU_DISPATCH(st_, cast_k<D, T>
                     <<<grid_for(n), GPU_THREADS, 0, s>>>((D *)dst, (const T *)src, n));
    });
}

void gpu_accumulate(float *dst, const void *src, enum gpu_dtype st_, size_t n, cudaStream_t s)
{
    GPU_DISPATCH(st_,
                 accumulate_k<T><<<grid_for(n), GPU_THREADS, 0, s>>>(dst, (const T *)src, n));
}

void gpu_scale(float *x, size_t n, float factor, cudaStream_t s)
{
    scale_k<<<grid_for(n), GPU_THREADS, 0, s>>>(x, n, factor);
}

void gpu_find_nonfinite(int *found, const float *x, size_t n, cudaStream_t s)
{
    nonfinite_k<<<grid_for(n), GPU_THREADS, 0, s>>>(found, x, n);
}

void gpu_bias_add(void *out, const float *bias, int rows, int cols, enum gpu_dtype t,
                  cudaStream_t s)
{
    size_t n = (size_t)rows * cols;
    GPU_DISPATCH(t,
                 bias_add_k<T><<<grid_for(n), GPU_THREADS, 0, s>>>((T *)out, bias, rows, cols));
}

void gpu_bias_grad(float *dbias, const void *dout, int rows, int cols, enum gpu_dtype t,
                   cudaStream_t s)
{
    dim3 grid((unsigned)((cols + GPU_THREADS - 1) / GPU_THREADS),
              (unsigned)(rows < 256 ? (rows > 0 ? rows : 1) : 256));
    GPU_DISPATCH(t, bias_grad_k<T>
                 <<<grid, GPU_THREADS, 0, s>>>(dbias, (const T *)dout, rows, cols));
}

void gpu_xent_forward(float *probs, float *row_loss, int *row_correct, int *bad_label,
                      const void *logits, enum gpu_dtype t, const int32_t *labels, int n, int k,
                      int n_valid, cudaStream_t s)
{
    if (n <= 0)
        return;
    GPU_DISPATCH(t, xent_fwd<T>
                 <<<(unsigned)n, GPU_THREADS, 0, s>>>(probs, row_loss, row_correct, bad_label,
                                                      (const T *)logits, labels, k, n_valid));
}

void gpu_xent_reduce(double *loss, int *correct, const float *row_loss, const int *row_correct,
                     int n, int n_valid, cudaStream_t s)
{
    xent_reduce_k<<<1, GPU_THREADS, 0, s>>>(loss, correct, row_loss, row_correct, n, n_valid);
}

void gpu_xent_backward(void *dlogits, enum gpu_dtype t, const float *probs,
                       const int32_t *labels, int n, int k, int n_valid, float scale,
                       cudaStream_t s)
{
    size_t total = (size_t)n * k;
    GPU_DISPATCH(t, xent_bwd<T><<<grid_for(total), GPU_THREADS, 0, s>>>(
                        (T *)dlogits, probs, labels, n, k, n_valid, scale));
}

void gpu_optim_update(float *params, const float *grads, float *state, size_t stride,
                      size_t len, const struct gpu_optim_scalars *sc, cudaStream_t s)
{
    if (sc->type == 0) /* NN_OPTIM_SGD */
        sgd_k<<<grid_for(len), GPU_THREADS, 0, s>>>(params, grads, state, len, *sc);
    else
        adam_k<<<grid_for(len), GPU_THREADS, 0, s>>>(params, grads, state, state + stride, len,
                                                     *sc);
}

} // extern "C"
