/* gpu_test: what every tests/gpu binary does first: find a CUDA device, or mark all its
 * cases skipped with the reason, which tests/summarize.py allows for the gpu suite only
 * ("no CUDA device"). So the suite runs in every build with CUDA, and a machine without
 * a GPU reports it as skipped instead of leaving it out.
 *
 * Ownership: the reason lives in a static buffer for the whole run. */
#ifndef DDPB_GPU_TEST_H
#define DDPB_GPU_TEST_H

#include <cuda_runtime_api.h>
#include <stdio.h>

#include "tests/unit/test.h"

/* true when a device is there; otherwise every later TEST_RUN is skipped */
static inline int gpu_test_require_device(void)
{
    static char reason[160];
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc == cudaSuccess && n > 0)
        return 1;
    snprintf(reason, sizeof reason, "no CUDA device (cudaGetDeviceCount: %s, %d devices)",
             rc == cudaSuccess ? "ok" : cudaGetErrorString(rc), n);
    test_skip_all(reason);
    return 0;
}

#endif
