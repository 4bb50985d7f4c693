/* device_check: see device_check.h. The order of the checks is the order a user fixes
 * things in: CUDA first, then NCCL, then cuDNN for training. */
#include "worker/device_check.h"

#include <string.h>

#include "ddpb_config.h"

int worker_device_check(const struct spec *s, struct err *e)
{
    bool cuda = strcmp(s->device, "cuda") == 0, nccl = strcmp(s->backend, "nccl") == 0;
    if (cuda && !DDPB_HAVE_CUDA)
        return err_set(e, ERR_INVALID, "device",
                       "device \"cuda\": this ddpbench-worker was built without CUDA (rebuild "
                       "with meson -Dcuda=enabled, which needs nvcc)");
    if (nccl && !DDPB_HAVE_NCCL)
        return err_set(e, ERR_INVALID, "backend",
                       "backend \"nccl\": this ddpbench-worker was built without NCCL (rebuild "
                       "with meson -Dcuda=enabled -Dnccl=enabled, or -Dnccl_prefix=)");
    if (cuda && s->workload == SPEC_WORKLOAD_TRAIN && !DDPB_HAVE_CUDNN)
        return err_set(e, ERR_INVALID, "device",
                       "workload \"train\" on device \"cuda\": this ddpbench-worker was "
                       "built without cuDNN (rebuild with -Dcudnn=enabled, or "
                       "-Dcudnn_prefix=)");
    return 0;
}
