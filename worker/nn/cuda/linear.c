/* linear: the fully connected layer through cuBLAS (gpu_layers.h).
 *
 * Decision: row-major tensors are handed to column-major cuBLAS as their transposes, so
 * no copy is ever made: out(N,O) = inp(N,I) W(O,I)^T is, column-major, out^T = W^T' inp^T
 * with W read transposed. cublasGemmEx with float compute for every precision (fp32 in
 * CUBLAS_COMPUTE_32F_PEDANTIC: no TF32, so it matches the CPU reference; fp16/bf16 on
 * tensor cores), and the weight gradient written in float32 directly (half inputs, float
 * output is one of GemmEx's supported combinations), accumulated with beta = 1. */
#include <stdio.h>

#include "worker/nn/cuda/gpu_layers.h"

static int blas_check(cublasStatus_t rc, const char *what, struct err *e)
{
    if (rc == CUBLAS_STATUS_SUCCESS)
        return 0;
    return err_set(e, ERR_IO, NULL, "%s: cuBLAS error %s", what, cublasGetStatusString(rc));
}

static cudaDataType_t blas_type(enum gpu_dtype t)
{
    return t == GPU_F16 ? CUDA_R_16F : t == GPU_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static cublasComputeType_t blas_compute(enum gpu_dtype t)
{
    return t == GPU_F32 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
}

int gpu_linear_init(struct gpu_linear *f, cublasHandle_t h, const struct nn_linear_cfg *c,
                    int n, enum gpu_dtype t, struct err *e)
{
    if (c->in < 1 || c->out < 1 || n < 1)
        return err_set(e, ERR_INVALID, "linear", "linear %d -> %d on a batch of %d", c->in,
                       c->out, n);
    *f = (struct gpu_linear){.h = h, .cfg = *c, .n = n, .t = t};
    return 0;
}

int gpu_linear_forward(struct gpu_linear *f, void *out, const void *inp, const void *weight,
                       const float *bias, cudaStream_t s, struct err *e)
{
    const float one = 1.0f, zero = 0.0f;
    int I = f->cfg.in, O = f->cfg.out, N = f->n;
    cudaDataType_t dt = blas_type(f->t);
    if (blas_check(cublasSetStream(f->h, s), "linear forward", e) < 0 ||
        blas_check(cublasGemmEx(f->h, CUBLAS_OP_T, CUBLAS_OP_N, O, N, I, &one, weight, dt, I,
                                inp, dt, I, &zero, out, dt, O, blas_compute(f->t),
                                CUBLAS_GEMM_DEFAULT),
                   "linear forward", e) < 0)
        return -1;
    if (bias && f->cfg.bias)
        gpu_bias_add(out, bias, N, O, f->t, s);
    return 0;
}

int gpu_linear_backward(struct gpu_linear *f, void *dinp, float *dweight, float *dbias,
                        const void *dout, const void *inp, const void *weight, cudaStream_t s,
                        struct err *e)
{
    const float one = 1.0f, zero = 0.0f;
    int I = f->cfg.in, O = f->cfg.out, N = f->n;
    cudaDataType_t dt = blas_type(f->t);
    if (blas_check(cublasSetStream(f->h, s), "linear backward", e) < 0)
        return -1;
    /* dinp^T (I,N) = W^T (I,O) dout^T (O,N) */
    if (dinp && blas_check(cublasGemmEx(f->h, CUBLAS_OP_N, CUBLAS_OP_N, I, N, O, &one, weight,
                                        dt, I, dout, dt, O, &zero, dinp, dt, I,
                                        blas_compute(f->t), CUBLAS_GEMM_DEFAULT),
                           "linear backward data", e) < 0)
        return -1;
    /* dW^T (I,O) += inp^T (I,N) dout (N,O) */
    if (blas_check(cublasGemmEx(f->h, CUBLAS_OP_N, CUBLAS_OP_T, I, O, N, &one, inp, dt, I, dout,
                                dt, O, &one, dweight, CUDA_R_32F, I, blas_compute(f->t),
                                CUBLAS_GEMM_DEFAULT),
                   "linear backward weights", e) < 0)
        return -1;
    if (dbias && f->cfg.bias)
        gpu_bias_grad(dbias, dout, N, O, f->t, s);
    return 0;
}
