/* worker_gpu: what ddpbench-worker needs to run a spec on device "cuda" beside its
 * communicator (comm/comm_factory.h) and training engine (train_engine.h): the collective
 * benchmark's buffers in device memory (struct collective_mem over cudaMalloc /
 * cudaMemcpy, timed by the NCCL backend's CUDA events), and the GPU facts of the env
 * report.
 *
 * Decision: the rank's GPU is device 0 of what CUDA_VISIBLE_DEVICES (set by the daemon,
 * daemon/gpu_slots.h) lets it see, and NVML is sampled at the index that variable names,
 * so the report describes the GPU the rank really used. Only this file and what it calls
 * touch CUDA. It is built into the CUDA engine module (ddpb_cuda.so), whose entry
 * (ddpb_module_cuda) it defines; the worker reaches it through gpu_modules.h.
 *
 * Ownership: the memory hooks own nothing (the benchmark owns what alloc returns);
 * worker_gpu_env_add adds owned members to a borrowed object. */
#ifndef DDPB_WORKER_GPU_H
#define DDPB_WORKER_GPU_H

#include <jansson.h>

#include "worker/workload_collective.h"

/* Hooks for device buffers; they ignore ctx. last_op_seconds is NULL: the device time
 * is the NCCL module's (gpu_modules_collective_mem adds it). */
void worker_gpu_collective_mem(struct collective_mem *out);
/* Adds "gpu" (cudaGetDeviceProperties of device 0, or the error), "nvml" ("ok" or why
 * NVML is unavailable) with the sample of the rank's GPU as "nvml_gpu_<field>" (the env
 * event is flat: strings and numbers), "cudnn" (the loaded library's version) and
 * "emulated" (1 when DDPB_EMULATED=1, else 0) to env. */
void worker_gpu_env_add(json_t *env);

#endif
