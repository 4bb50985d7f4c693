/* device_check: see device_check.h. The order of the checks is the order a user fixes
 * things in: CUDA first, then NCCL, then cuDNN for training. */
#include "worker/device_check.h"

#include <string.h>

#include "worker/comm/comm_factory.h"
#include "worker/gpu_modules.h"
#include "worker/train_module.h"

int worker_device_check(const struct spec *s, struct err *e)
{
    if (strcmp(s->device, "cuda") == 0 && !gpu_module_cuda(e))
        return -1;
    if (comm_backend_check(s->backend, e) < 0)
        return -1;
    if (s->workload == SPEC_WORKLOAD_TRAIN && !train_module_pick(s->device, e))
        return -1;
    return 0;
}
