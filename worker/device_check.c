/* device_check: see device_check.h. The order of the checks is the order a user fixes
 * things in: CUDA first, then NCCL, then cuDNN for training. */
#include "worker/device_check.h"

#include <string.h>

#include "ddpb_config.h"
#include "worker/comm/comm_factory.h"
#include "worker/train_engine.h"

int worker_cuda_check(struct err *e)
{
    if (DDPB_HAVE_CUDA)
        return 0;
    return err_set(e, ERR_INVALID, "device",
                   "device \"cuda\": this ddpbench-worker was built without CUDA (rebuild "
                   "with meson -Dcuda=enabled, which needs nvcc)");
}

int worker_cudnn_check(struct err *e)
{
    if (DDPB_HAVE_CUDNN)
        return 0;
    return err_set(e, ERR_INVALID, "device",
                   "workload \"train\" on device \"cuda\": this ddpbench-worker was built "
                   "without cuDNN (rebuild with -Dcudnn=enabled, or -Dcudnn_prefix=)");
}

int worker_device_check(const struct spec *s, struct err *e)
{
    if (strcmp(s->device, "cuda") == 0 && worker_cuda_check(e) < 0)
        return -1;
    if (comm_backend_check(s->backend, e) < 0)
        return -1;
    if (s->workload == SPEC_WORKLOAD_TRAIN && !train_engine_pick(s->device, e))
        return -1;
    return 0;
}
