/* build_check: the refusals for what this worker binary was built without (CUDA, cuDNN),
 * each naming the meson option that adds it. Nothing is allocated.
 *
 * Decision: these are the leaf both callers share: device_check.c (what a spec's device
 * and backend need, checked before the worker joins) and train_engine.c (which training
 * engine a device gets) each call them, so neither includes the other and each message is
 * written once. */
#ifndef DDPB_WORKER_BUILD_CHECK_H
#define DDPB_WORKER_BUILD_CHECK_H

#include "common/err.h"

/* The device "cuda" parts of the build, each refusal naming the meson option that adds
 * it: CUDA itself, and cuDNN, which training on the GPU needs. */
int worker_cuda_check(struct err *e);
int worker_cudnn_check(struct err *e);

#endif
