/* train_module: the training workload as a loadable module (module.h), ddpb_train.so:
 * workload_train.c and everything it computes with (nn/ over oneDNN, ddp/, data/ over
 * libpng, libjpeg and zstd, pipeline.c, the CPU engine), opened only when a spec asks for
 * workload "train". A collective run maps none of it: not oneDNN, nor the OpenCL loader
 * that Debian's oneDNN needs, nor libstdc++ or OpenMP.
 *
 * Decisions:
 * - Every build makes it (it needs no optional part); ddpbench-worker links none of its
 *   code, and finds it where it finds the GPU modules (module.h).
 * - The module carries its own copy of the worker code it calls, as the GPU modules do
 *   (gpu_modules.h), and the first loaded copy of a symbol serves every module loaded
 *   after it (all open RTLD_GLOBAL, default visibility): one copy of nn/ and ddp/ in a
 *   process that loads the CUDA engine too, whichever came first.
 * - What else needs a model goes through it too: the spec's training check (which engine
 *   a device trains on, train_module_pick) and the collective benchmark's buckets_of (a
 *   model's gradient buckets), which loads it for that run alone.
 *
 * Ownership: the entry is borrowed for the life of the process (never closed). */
#ifndef DDPB_WORKER_TRAIN_MODULE_H
#define DDPB_WORKER_TRAIN_MODULE_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* Declared only: the callers that load the module need none of the training code's
 * headers, and the module's side (workload_train.c) includes this one. */
struct spec;
struct comm;
struct report_writer;
struct heartbeat;
struct train_outcome;
struct train_engine_ops;
struct elastic;

/* ddpb_train.so's entry (symbol ddpb_module_train). */
struct train_module {
    int abi; /* MODULE_ABI: first, as module_load reads it */
    /* workload_train.h's workload_train_run and train_engines.h's train_engine_pick */
    int (*run)(const struct spec *s, struct comm *c, struct comm *stage_c,
               struct report_writer *w, struct heartbeat *hb, struct elastic *el,
               struct train_outcome *out, struct err *e);
    const struct train_engine_ops *(*pick)(const char *device, struct err *e);
    /* workload_train_model_buckets: the collective benchmark's buckets_of */
    int (*model_buckets)(const struct spec *s, int64_t *sizes, size_t cap, size_t *n,
                         struct err *e);
};

/* The training workload, loaded on first use; NULL with e set (ERR_INVALID, field
 * "workload") naming ddpb_train.so and what installs it. */
const struct train_module *train_module_load(struct err *e);
/* The training engine for device through the module (train_engine_pick's errors, or the
 * module's). */
const struct train_engine_ops *train_module_pick(const char *device, struct err *e);

#endif
