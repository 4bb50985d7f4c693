/* train_engines: the table of training engines (train_engine.h's instances: train_cpu.c,
 * train_cuda.c) and the pick among them by a spec's device.
 *
 * Decision: the pick is apart from train_engine.h, the seam the engines implement, so an
 * engine includes only the seam and the table alone names the instances: no file both
 * implements the seam and picks among its implementations. */
#ifndef DDPB_TRAIN_ENGINES_H
#define DDPB_TRAIN_ENGINES_H

#include "common/err.h"
#include "worker/train_engine.h"

/* The engine for a spec's device ("cpu", "cuda": loads the CUDA engine module).
 * ERR_INVALID with field "device" naming it: unknown, or its module is missing, cannot
 * load or lacks cuDNN (with the meson options or packages that provide it). */
const struct train_engine_ops *train_engine_pick(const char *device, struct err *e);

#endif
