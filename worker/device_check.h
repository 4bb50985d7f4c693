/* device_check: whether this worker binary can run a spec's device and backend, decided
 * before the worker joins its run, with an error naming the field.
 *
 * Decision: what runs with what (nccl only on cuda, tcp only on cpu, emulation only on
 * cuda, the strategies, compression and precisions each device trains with, the
 * algorithms NCCL takes) is a rule of the spec (common/spec_table.c): the daemon refuses it at
 * submit and the worker's spec_from_json refuses it again. What is left here is what
 * depends on the worker's modules (gpu_modules.h: the CUDA engine, NCCL; the training
 * workload, train_module.h), which these
 * checks load, so a missing one fails the run before it joins, naming the module and
 * the meson option or package that provides it. A CPU collective run over tcp loads
 * none; a training run loads the training module (train_module.h). */
#ifndef DDPB_WORKER_DEVICE_CHECK_H
#define DDPB_WORKER_DEVICE_CHECK_H

#include "common/err.h"
#include "common/spec.h"

/* 0 when this build has what the spec's device and backend need; ERR_INVALID with
 * e->field "device" or "backend" otherwise. s is a spec that passed spec_from_json. The
 * backend's part is comm_backend_check's (comm_factory.h), the training device's
 * train_engine_pick's (train_engines.h, through the training module: train_module.h):
 * each message is written once. */
int worker_device_check(const struct spec *s, struct err *e);

#endif
