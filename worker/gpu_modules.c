/* gpu_modules: see gpu_modules.h. What the messages say to rebuild depends on whether this
 * build has CUDA (DDPB_HAVE_CUDA from ddpb_config.h): a build without it names the meson
 * option, a build with it names where the module is installed. */
#include "worker/gpu_modules.h"

#include <stdio.h>

#include "ddpb_config.h"
#include "worker/comm/comm_factory.h"
#include "worker/comm/comm_nccl.h"
#include "worker/module/module.h"

/* cuBLAS and cuDNN, which the CUDA engine links: PyTorch's wheels (what
 * tests/gpu/gpu_libs.py finds) or the toolkit's packages. The driver's libcuda is opened
 * by the CUDA runtime at its first call, where its absence is CUDA's own error. */
#define GPU_MODULES_CUDA_LIBS                                                                  \
    "cuBLAS and cuDNN: pip install nvidia-cublas nvidia-cudnn-cu13 (on the loader's path), "   \
    "or the CUDA toolkit's libcublas and libcudnn9 packages"

static const struct module_spec gpu_modules_cuda_spec = {
    .file = "ddpb_cuda.so",
    .symbol = "ddpb_module_cuda",
    .field = "device",
    .what = "the CUDA engine (device \"cuda\")",
    .install = GPU_MODULES_CUDA_LIBS,
#if DDPB_HAVE_CUDA
    .rebuild = "it is built with meson -Dcuda=enabled and installed there by ninja install",
#else
    .rebuild = "this ddpbench-worker was built without CUDA: rebuild with meson "
               "-Dcuda=enabled, which needs nvcc",
#endif
};

const struct gpu_module_cuda *gpu_module_cuda(struct err *e)
{
    return module_load(&gpu_modules_cuda_spec, e);
}

const struct train_engine_ops *gpu_module_train(struct err *e)
{
    const struct gpu_module_cuda *m = gpu_module_cuda(e);
    if (m && !m->train)
        err_set(e, ERR_INVALID, "device",
                "workload \"train\" on device \"cuda\": the CUDA engine (ddpb_cuda.so) was "
                "built without cuDNN (rebuild with -Dcudnn=enabled, or -Dcudnn_prefix=)");
    return m ? m->train : NULL;
}

/* collective_mem's device timing: ctx is the NCCL module's entry. */
static double gpu_modules_op_seconds(void *ctx, struct comm *c)
{
    const struct comm_nccl_module *nccl = ctx;
    return nccl->last_op_seconds(c);
}

int gpu_modules_collective_mem(struct collective_mem *out, struct err *e)
{
    const struct gpu_module_cuda *cuda = gpu_module_cuda(e);
    const struct comm_nccl_module *nccl = cuda ? comm_factory_nccl_module(e) : NULL;
    if (!nccl)
        return -1;
    cuda->collective_mem(out);
    out->ctx = (void *)nccl;
    out->last_op_seconds = gpu_modules_op_seconds;
    return 0;
}

void gpu_modules_env_add(json_t *env)
{
    struct err e = {0};
    const struct gpu_module_cuda *cuda = gpu_module_cuda(&e);
    if (!cuda) {
        json_object_set_new(env, "gpu", json_string(e.msg));
        return;
    }
    cuda->env_add(env);
    const struct comm_nccl_module *nccl = comm_factory_nccl_module(&e);
    char v[64];
    json_object_set_new(env, "nccl", json_string(nccl ? nccl->version(v, sizeof v) : e.msg));
}
