/* gpu_probe: prints what the GPU libraries this build links are, as loaded at run time:
 * driver and runtime versions, the devices, and the version and file of cuBLAS, NCCL and
 * cuDNN. Linked like the worker (static cudart, the libraries by the paths meson found),
 * so it answers "which libcudnn.so.9 would the worker load here, and which version is it".
 *
 * Decision: every call it makes works without a GPU (versions are library calls, the file
 * names come from the loaded objects), so the packaging test runs it on a machine without
 * one, and on a device tests/gpu/run-on-device.sh prints it before anything else. It fails
 * (exit 1) only when a library it needs does not load, which the dynamic loader reports
 * before main(). Usage: gpu_probe */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <library_types.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

#include "ddpb_config.h"
#if DDPB_HAVE_NCCL
#include <nccl.h>
#endif
#if DDPB_HAVE_CUDNN
#include <cudnn.h>
#endif

/* dl_iterate_phdr callback: prints each loaded object whose name holds one of the
 * libraries the probe reports (the driver's libcuda too, loaded by the runtime) */
static int probe_print_object(struct dl_phdr_info *info, size_t size, void *data)
{
    static const char *const wanted[] = {"libcuda.so", "libcublas", "libnccl", "libcudnn"};
    const char *name = info->dlpi_name;
    for (size_t i = 0; name && i < sizeof wanted / sizeof wanted[0]; i++)
        if (strstr(name, wanted[i])) {
            printf("loaded: %s\n", name);
            break;
        }
    return 0;
}

static void probe_print_devices(void)
{
    int driver = 0, runtime = 0, n = 0;
    cudaDriverGetVersion(&driver); /* 0 when there is no driver */
    cudaRuntimeGetVersion(&runtime);
    printf("cuda driver: %d\ncuda runtime: %d (static)\n", driver, runtime);
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
        printf("devices: 0 (%s)\n", cudaGetErrorString(rc));
        return;
    }
    printf("devices: %d\n", n);
    for (int d = 0; d < n; d++) {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, d) == cudaSuccess)
            printf("device %d: %s, sm_%d%d, %.1f GiB\n", d, p.name, p.major, p.minor,
                   (double)p.totalGlobalMem / (1 << 30));
    }
}

int main(void)
{
    probe_print_devices();
    int major = 0, minor = 0, patch = 0;
    cublasGetProperty(MAJOR_VERSION, &major);
    cublasGetProperty(MINOR_VERSION, &minor);
    cublasGetProperty(PATCH_LEVEL, &patch);
    printf("cublas: %d.%d.%d\n", major, minor, patch);
#if DDPB_HAVE_NCCL
    int nccl = 0;
    ncclGetVersion(&nccl);
    printf("nccl: %d.%d.%d (built against %d)\n", nccl / 10000, nccl / 100 % 100, nccl % 100,
           NCCL_VERSION_CODE);
#else
    printf("nccl: not in this build\n");
#endif
#if DDPB_HAVE_CUDNN
    size_t cudnn = cudnnGetVersion();
    printf("cudnn: %zu.%zu.%zu (built against %d)\n", cudnn / 10000, cudnn / 100 % 100,
           cudnn % 100, CUDNN_VERSION);
#else
    printf("cudnn: not in this build\n");
#endif
    dl_iterate_phdr(probe_print_object, NULL);
    return 0;
}
