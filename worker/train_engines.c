/* train_engines: train_engine_pick (train_engines.h). Decision: whether the CUDA instance
 * exists is a fact of the build (DDPB_HAVE_CUDA and DDPB_HAVE_CUDNN, ddpb_config.h), read
 * here and nowhere else in the training code. */
#include "worker/train_engines.h"

#include <string.h>

#include "ddpb_config.h"
#include "worker/build_check.h"

const struct train_engine_ops *train_engine_pick(const char *device, struct err *e)
{
    if (strcmp(device, "cpu") == 0)
        return &train_engine_cpu;
    if (strcmp(device, "cuda") != 0) {
        err_set(e, ERR_INVALID, "device", "device \"%s\" is unknown (cpu, cuda)", device);
        return NULL;
    }
#if DDPB_HAVE_CUDA && DDPB_HAVE_CUDNN
    return &train_engine_cuda;
#else
    if (worker_cuda_check(e) == 0)
        worker_cudnn_check(e);
    return NULL;
#endif
}
