/* build_check: see build_check.h. Whether each part is there is a fact of the build
 * (DDPB_HAVE_CUDA and DDPB_HAVE_CUDNN, ddpb_config.h). */
#include "worker/build_check.h"

#include "ddpb_config.h"

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
