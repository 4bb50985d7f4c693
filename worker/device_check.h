/* device_check: whether this worker binary can run a spec's device and backend, decided
 * before the worker joins its run, with an error naming the field.
 *
 * Decision: what was compiled in (DDPB_HAVE_CUDA / DDPB_HAVE_NCCL from ddpb_config.h) and
 * what the workloads can drive are separate facts, each with its own message: a CPU-only
 * build says to rebuild with -Dcuda=enabled; a GPU build runs the collective workload on
 * device "cuda" with backend "nccl" (worker/worker_gpu.h) and trains there with
 * strategies naive and ddp (worker/nn/cuda/gmodel.h, built with cuDNN), and says which piece
 * is not wired yet for the rest (other strategies and compression on the GPU, tcp on GPU
 * buffers). Nothing is allocated. */
#ifndef DDPB_WORKER_DEVICE_CHECK_H
#define DDPB_WORKER_DEVICE_CHECK_H

#include "common/err.h"
#include "common/spec.h"

/* 0 when the spec's device/backend/emulation can run here; ERR_INVALID with e->field
 * "device", "backend", "emulate_multi_rank", "algorithm", "strategy" or "compression"
 * otherwise. */
int worker_device_check(const struct spec *s, struct err *e);

#endif
