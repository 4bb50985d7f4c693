/* gpu: the runtime helpers of gpu.h (errors, memory, device description) and the host half
 * of the optimizer kernels.
 *
 * Decision: the optimizer's per-step scalars are formed here exactly as nn/optim.c forms
 * them (the same double expressions rounded to float at the same points), so the GPU
 * update differs from the CPU one only by the kernel's own float rounding; the kernels
 * take them by value. */
#include "worker/nn/cuda/gpu.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "worker/nn/optim.h"

static const char *const gpu_dtype_names[] = {"float32", "float16", "bfloat16"};
static const char *const gpu_precisions[] = {"fp32", "fp16", "bf16"};

size_t gpu_dtype_size(enum gpu_dtype t)
{
    return t == GPU_F32 ? 4 : 2;
}

const char *gpu_dtype_name(enum gpu_dtype t)
{
    return (unsigned)t < 3 ? gpu_dtype_names[t] : "unknown";
}

int gpu_dtype_parse(const char *precision)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(precision, gpu_precisions[i]) == 0)
            return i;
    return -1;
}

int gpu_check(cudaError_t rc, const char *what, struct err *e)
{
    if (rc == cudaSuccess)
        return 0;
    return err_set(e, rc == cudaErrorMemoryAllocation ? ERR_NOMEM : ERR_IO, NULL,
                   "%s: CUDA error %s: %s", what, cudaGetErrorName(rc), cudaGetErrorString(rc));
}

int gpu_sync(cudaStream_t s, const char *what, struct err *e)
{
    if (gpu_check(cudaGetLastError(), what, e) < 0)
        return -1;
    return gpu_check(cudaStreamSynchronize(s), what, e);
}

void *gpu_alloc(size_t bytes, struct err *e)
{
    void *p = NULL;
    if (gpu_check(cudaMalloc(&p, bytes ? bytes : 1), "device allocation", e) < 0)
        return NULL;
    if (gpu_check(cudaMemset(p, 0, bytes), "device allocation", e) < 0) {
        cudaFree(p);
        return NULL;
    }
    return p;
}

void gpu_free(void *p)
{
    if (p)
        cudaFree(p);
}

int gpu_upload(void *dst, const void *src, size_t bytes, struct err *e)
{
    return gpu_check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "upload", e);
}

int gpu_download(void *dst, const void *src, size_t bytes, struct err *e)
{
    return gpu_check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "download", e);
}

int gpu_describe(int device, char *buf, size_t len, struct err *e)
{
    struct cudaDeviceProp p;
    int drv = 0, rt = 0;
    if (gpu_check(cudaGetDeviceProperties(&p, device), "device properties", e) < 0)
        return -1;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    snprintf(buf, len, "%s, sm_%d%d, %.1f GiB, driver %d.%d, runtime %d.%d", p.name, p.major,
             p.minor, (double)p.totalGlobalMem / (1u << 30), drv / 1000, drv % 1000 / 10,
             rt / 1000, rt % 1000 / 10);
    return 0;
}

void gpu_optim_scalars_for(const struct nn_optim *o, double lr, struct gpu_optim_scalars *out)
{
    const struct nn_optim_cfg *c = &o->cfg;
    memset(out, 0, sizeof *out);
    out->type = c->type == NN_OPTIM_SGD ? 0 : 1;
    out->lr = (float)lr;
    out->wd = (float)c->weight_decay;
    out->momentum = (float)c->momentum;
    out->damp = (float)(1.0 - c->dampening);
    out->nesterov = c->nesterov;
    out->first = o->step <= 1;
    out->w1 = (float)(1.0 - c->beta1);
    out->b2 = (float)c->beta2;
    out->w2 = (float)(1.0 - c->beta2);
    out->eps = (float)c->eps;
    double bc1 = 1.0 - pow(c->beta1, (double)o->step);
    double bc2 = 1.0 - pow(c->beta2, (double)o->step);
    if (out->type == 1) {
        out->step_size = (float)(lr / bc1);
        out->bc2_sqrt = (float)sqrt(bc2);
    }
    out->decoupled = c->type == NN_OPTIM_ADAMW;
    out->shrink = (float)(1.0 - lr * c->weight_decay);
}
