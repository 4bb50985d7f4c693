/* gpu_slots: which GPU each rank of a device "cuda" run gets, and the environment that
 * pins it there (docs/design.md §9 "Launching a rank": CUDA_VISIBLE_DEVICES).
 *
 * Decisions:
 * - A GPU slot is one GPU of the node (config --gpus N, or NVML's count when not given).
 *   Normally a run takes world_size free GPUs, one rank each, lowest first, and every rank
 *   sees only its own (CUDA_VISIBLE_DEVICES=<index>, device 0 inside the worker).
 * - Emulation (spec emulate_multi_rank) puts all ranks on ONE free GPU, so multi-rank
 *   NCCL can be exercised on a single-GPU node. It is experimental: NCCL does not support
 *   several ranks on one GPU (NVIDIA/nccl issue 418), so such a run may hang or measure
 *   socket copies; the daemon logs a warning when one starts (gpu_slots_warning), results
 *   keep it apart, and no test or benchmark relies on it. NCCL refuses two ranks of a
 * communicator
 *   on one GPU unless told otherwise: with NCCL >= 2.30 NCCL_MULTI_RANK_GPU_ENABLE=1,
 *   before that a distinct NCCL_HOSTID per rank (NCCL then believes the ranks are on
 *   different hosts and uses its socket transport). Emulated runs are flagged
 *   (gpu_plan.emulated) so results never mix them with one-rank-per-GPU figures.
 * Pure functions over plain arrays: the scheduler owns the slot table.
 *
 * Ownership: nothing allocated; out-arrays are the caller's. */
#ifndef DDPB_GPU_SLOTS_H
#define DDPB_GPU_SLOTS_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"

#define GPU_SLOTS_MAX 64
#define GPU_SLOTS_MULTI_RANK_NCCL 23000 /* NCCL_VERSION_CODE of 2.30.0 */

struct gpu_plan {
    int world_size;
    bool emulated;
    int gpu[1024]; /* GPU index of each rank */
};

/* Plans world_size ranks on the free GPUs (used[i] false) of ngpus. Returns 1 with plan
 * filled, 0 when not enough GPUs are free now (the run waits), -1 with e set when it can
 * never fit (ERR_CONFLICT: more GPUs than the node has, or no GPU at all). */
int gpu_slots_plan(int ngpus, const bool *used, int world_size, bool emulate,
                   struct gpu_plan *plan, struct err *e);

/* The environment of one rank, as up to 3 "KEY=VALUE" strings in out[i] (each at least
 * 64 bytes); returns how many. nccl_version: NCCL_VERSION_CODE the workers load (0 when
 * unknown: the NCCL_HOSTID way, which every version has). run_tag makes host ids unique
 * per run. */
int gpu_slots_env(const struct gpu_plan *plan, int rank, int nccl_version, const char *run_tag,
                  char out[][64]);

/* The environment of a single-process run's one process (issue 33: strategy dp, whose
 * replicas are the plan's ranks): every GPU of the plan visible to it, in rank order, as
 * one "CUDA_VISIBLE_DEVICES=..." in out[0] (at least 64 bytes); returns 1, or 0 when the
 * list does not fit (the process then sees none, and its adapter names world_size). */
int gpu_slots_env_single(const struct gpu_plan *plan, char out[][64]);

/* The warning the daemon logs when an emulated plan starts, into buf (what the ranks
 * share, how NCCL is made to accept it for nccl_version, what can go wrong, that the
 * results are flagged); NULL (buf untouched) when plan is not emulated. */
const char *gpu_slots_warning(const struct gpu_plan *plan, int nccl_version, char *buf,
                              size_t len);

#endif
