/* gpu_slots: see gpu_slots.h. Emulation takes one whole free GPU (not a GPU some other run
 * uses), so an emulated run never shares its GPU with a run that believes it has one. */
#include "daemon/gpu_slots.h"

#include <stdio.h>

int gpu_slots_plan(int ngpus, const bool *used, int world_size, bool emulate,
                   struct gpu_plan *plan, struct err *e)
{
    if (ngpus <= 0)
        return err_set(e, ERR_CONFLICT, "device",
                       "device \"cuda\": this node has no GPU slots (ddpbenchd --gpus N, or "
                       "NVML found no GPU)");
    if (world_size < 1 || world_size > (int)(sizeof plan->gpu / sizeof plan->gpu[0]))
        return err_set(e, ERR_INVALID, "world_size", "world_size %d out of range", world_size);
    if (!emulate && world_size > ngpus)
        return err_set(e, ERR_CONFLICT, "world_size",
                       "world_size %d needs %d GPUs, this node has %d (emulate_multi_rank "
                       "puts several ranks on one GPU)",
                       world_size, world_size, ngpus);
    plan->world_size = world_size;
    plan->emulated = emulate && world_size > 1;
    int need = emulate ? 1 : world_size, k = 0;
    int got[GPU_SLOTS_MAX];
    for (int i = 0; i < ngpus && i < GPU_SLOTS_MAX && k < need; i++)
        if (!used[i])
            got[k++] = i;
    if (k < need)
        return 0;
    for (int r = 0; r < world_size; r++)
        plan->gpu[r] = emulate ? got[0] : got[r];
    return 1;
}

int gpu_slots_env(const struct gpu_plan *plan, int rank, int nccl_version, const char *run_tag,
                  char out[][64])
{
    int n = 0;
    snprintf(out[n++], 64, "CUDA_VISIBLE_DEVICES=%d", plan->gpu[rank]);
    if (!plan->emulated)
        return n;
    if (nccl_version >= GPU_SLOTS_MULTI_RANK_NCCL)
        snprintf(out[n++], 64, "NCCL_MULTI_RANK_GPU_ENABLE=1");
    else /* a host id per rank: NCCL sees separate hosts and uses sockets between them */
        snprintf(out[n++], 64, "NCCL_HOSTID=ddpb-%.32s-r%d", run_tag, rank);
    snprintf(out[n++], 64, "DDPB_EMULATED=1");
    return n;
}

int gpu_slots_env_single(const struct gpu_plan *plan, char out[][64])
{
    int len = snprintf(out[0], 64, "CUDA_VISIBLE_DEVICES=");
    int n = plan->emulated ? 1 : plan->world_size;
    for (int i = 0; i < n && len < 64; i++)
        len += snprintf(out[0] + len, (size_t)(64 - len), "%s%d", i ? "," : "", plan->gpu[i]);
    return len < 64 ? 1 : 0;
}

const char *gpu_slots_warning(const struct gpu_plan *plan, int nccl_version, char *buf,
                              size_t len)
{
    if (!plan->emulated)
        return NULL;
    bool native = nccl_version >= GPU_SLOTS_MULTI_RANK_NCCL;
    snprintf(buf, len,
             "emulate_multi_rank is experimental: %d ranks share GPU %d, which NCCL does "
             "not support (NVIDIA/nccl issue 418); %s. Its figures are flagged emulated "
             "and never pooled with one-rank-per-GPU runs",
             plan->world_size, plan->gpu[0],
             native ? "NCCL_MULTI_RANK_GPU_ENABLE=1 turns on NCCL's own experimental "
                      "support, which may still hang"
                    : "a distinct NCCL_HOSTID per rank makes NCCL use its socket transport, "
                      "so the figures measure socket copies, and the run may hang until "
                      "comm_timeout_s");
    return buf;
}
