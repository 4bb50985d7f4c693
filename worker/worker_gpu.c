/* worker_gpu: see worker_gpu.h. Uploads and downloads are synchronous cudaMemcpy: they
 * happen outside the timed iterations (inputs once per point, the check's output once),
 * where simplicity beats overlap. Also the CUDA engine module's entry (gpu_modules.h). */
#include "worker/worker_gpu.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/nvml.h"
#include "ddpb_config.h"
#include "worker/gpu_modules.h"
#include "worker/module.h"
#include "worker/nn/cuda/gpu.h"
#if DDPB_HAVE_CUDNN
#include "worker/nn/cuda/gpu_layers.h"
#endif

static void *worker_gpu_alloc(void *ctx, size_t bytes, struct err *e)
{
    return gpu_alloc(bytes, e);
}

static void worker_gpu_free(void *ctx, void *p)
{
    gpu_free(p);
}

static int worker_gpu_upload(void *ctx, void *dst, const void *src, size_t bytes, struct err *e)
{
    return gpu_upload(dst, src, bytes, e);
}

static int worker_gpu_download(void *ctx, void *dst, const void *src, size_t bytes,
                               struct err *e)
{
    return gpu_download(dst, src, bytes, e);
}

void worker_gpu_collective_mem(struct collective_mem *out)
{
    *out = (struct collective_mem){
        NULL, worker_gpu_alloc, worker_gpu_free, worker_gpu_upload, worker_gpu_download, NULL};
}

/* The env event holds only strings and numbers: gpu_nvml_json's {"nvml": "ok", "gpu":
 * {"name": ..}} becomes "nvml": "ok", "nvml_gpu_name": ... Takes the reference to obj. */
static void worker_gpu_env_flatten(json_t *env, json_t *obj)
{
    const char *k, *k2;
    json_t *v, *v2;
    json_object_foreach(obj, k, v)
    {
        if (json_is_string(v) || json_is_number(v))
            json_object_set(env, k, v);
        else if (json_is_object(v))
            json_object_foreach(v, k2, v2)
            {
                char key[128];
                snprintf(key, sizeof key, "nvml_%s_%s", k, k2);
                if (json_is_string(v2) || json_is_number(v2))
                    json_object_set(env, key, v2);
            }
    }
    json_decref(obj);
}

void worker_gpu_env_add(json_t *env)
{
    char desc[256];
    struct err e = {0};
    json_object_set_new(
        env, "gpu", json_string(gpu_describe(0, desc, sizeof desc, &e) == 0 ? desc : e.msg));
    char why[256] = "";
    struct gpu_nvml *n = gpu_nvml_open(NULL, why, sizeof why);
    int index = gpu_nvml_index_from_visible(getenv("CUDA_VISIBLE_DEVICES"));
    worker_gpu_env_flatten(env, gpu_nvml_json(n, index, why));
    gpu_nvml_close(n);
#if DDPB_HAVE_CUDNN
    char dv[64];
    json_object_set_new(env, "cudnn", json_string(gpu_cudnn_version(dv, sizeof dv)));
#endif
    /* what "fp32" ran as: no TF32 anywhere (dnn_plan.c's FMA math for cuDNN, gmodel.c's
     * pedantic cuBLAS), unless the process-wide override says otherwise */
    const char *tf32 = getenv("NVIDIA_TF32_OVERRIDE");
    char math[160];
    snprintf(math, sizeof math, "no TF32: cuDNN FMA math, cuBLAS pedantic%s%s",
             tf32 ? "; NVIDIA_TF32_OVERRIDE=" : "", tf32 ? tf32 : "");
    json_object_set_new(env, "gpu_fp32_math", json_string(math));
    const char *emu = getenv("DDPB_EMULATED");
    json_object_set_new(env, "emulated", json_integer(emu && emu[0] == '1'));
}

/* The module's entry (module.h: one symbol, unique across modules). */
const struct gpu_module_cuda ddpb_module_cuda = {
    .abi = MODULE_ABI,
#if DDPB_HAVE_CUDNN
    .train = &train_engine_cuda,
#else
    .train = NULL,
#endif
    .collective_mem = worker_gpu_collective_mem,
    .env_add = worker_gpu_env_add,
};
