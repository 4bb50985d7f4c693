/* device_check: see device_check.h. The order of the checks is the order a user fixes
 * things in: the build first, then the combination, then what is not wired yet. */
#include "worker/device_check.h"

#include <string.h>

#include "ddpb_config.h"

int worker_device_check(const struct spec *s, struct err *e)
{
    bool cuda = strcmp(s->device, "cuda") == 0, nccl = strcmp(s->backend, "nccl") == 0;
    if (strcmp(s->device, "cpu") != 0 && !cuda)
        return err_set(e, ERR_INVALID, "device", "device \"%s\" is unknown (cpu, cuda)",
                       s->device);
    if (strcmp(s->backend, "tcp") != 0 && !nccl)
        return err_set(e, ERR_INVALID, "backend", "backend \"%s\" is unknown (tcp, nccl)",
                       s->backend);
    if (cuda && !DDPB_HAVE_CUDA)
        return err_set(e, ERR_INVALID, "device",
                       "device \"cuda\": this ddpbench-worker was built without CUDA (rebuild "
                       "with meson -Dcuda=enabled, which needs nvcc)");
    if (nccl && !DDPB_HAVE_NCCL)
        return err_set(e, ERR_INVALID, "backend",
                       "backend \"nccl\": this ddpbench-worker was built without NCCL (rebuild "
                       "with meson -Dcuda=enabled -Dnccl=enabled, or -Dnccl_prefix=)");
    if (nccl && !cuda)
        return err_set(e, ERR_INVALID, "backend",
                       "backend \"nccl\" needs device \"cuda\" (NCCL moves GPU buffers)");
    if (s->emulate_multi_rank && !cuda)
        return err_set(e, ERR_INVALID, "emulate_multi_rank",
                       "emulate_multi_rank shares a GPU between ranks: it needs device "
                       "\"cuda\"");
    if (cuda && !nccl)
        return err_set(e, ERR_INVALID, "backend",
                       "backend \"tcp\" on device \"cuda\" (staging through pinned host "
                       "memory) is not implemented yet: use backend \"nccl\"");
    if (cuda && s->workload == SPEC_WORKLOAD_TRAIN) {
        if (!DDPB_HAVE_CUDNN)
            return err_set(e, ERR_INVALID, "device",
                           "workload \"train\" on device \"cuda\": this ddpbench-worker was "
                           "built without cuDNN (rebuild with -Dcudnn=enabled, or "
                           "-Dcudnn_prefix=)");
        if (strcmp(s->train.strategy, "naive") != 0 && strcmp(s->train.strategy, "ddp") != 0)
            return err_set(e, ERR_INVALID, "strategy",
                           "strategy \"%s\" on device \"cuda\" is not implemented yet (its "
                           "staging buffers are host memory): use naive or ddp",
                           s->train.strategy);
        if (s->train.compression[0] && strcmp(s->train.compression, "none") != 0)
            return err_set(e, ERR_INVALID, "compression",
                           "compression \"%s\" on device \"cuda\" is not implemented yet "
                           "(it converts on the host): use none", s->train.compression);
    }
    if (nccl && s->workload == SPEC_WORKLOAD_COLLECTIVE && s->coll.algorithm[0] &&
        strcmp(s->coll.algorithm, "auto") != 0 && strcmp(s->coll.algorithm, "ring") != 0 &&
        strcmp(s->coll.algorithm, "tree") != 0)
        return err_set(e, ERR_INVALID, "algorithm",
                       "backend \"nccl\" chooses among its own algorithms: auto, ring or "
                       "tree, not \"%s\"", s->coll.algorithm);
    return 0;
}
