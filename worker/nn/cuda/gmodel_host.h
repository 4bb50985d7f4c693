/* gmodel_host: the host half of the GPU model runner (gmodel.h), defined in gmodel_host.c:
 * the convolution weight permutation between the host's (Cout,Cin/G,KH,KW) and cuDNN's
 * NHWC filters (Cout,KH,KW,Cin/G), applied over whole arenas, and the check that a graph
 * has a GPU form.
 *
 * Decision: a header of its own, not a part of gmodel.h: gmodel_host.c builds in every
 * configuration (unit-tested on the CPU, tests/unit/test_gmodel_host.c) and the device
 * half (gmodel.c) calls it, so the host half declares only what it defines and depends on
 * nothing of the device half's.
 *
 * Ownership: nothing is allocated; every pointer is borrowed for the call. */
#ifndef DDPB_GPU_GMODEL_HOST_H
#define DDPB_GPU_GMODEL_HOST_H

#include "common/err.h"
#include "worker/nn/model.h"

/* Convolution weight (Cout,Cin/G,KH,KW) -> (Cout,KH,KW,Cin/G) and back; dst != src. */
void gmodel_conv_weight_to_device(float *dst, const float *src, const struct nn_conv2d_cfg *c);
void gmodel_conv_weight_to_host(float *dst, const float *src, const struct nn_conv2d_cfg *c);
/* A whole parameter (or gradient) arena of m in the device's order and back: every
 * convolution weight permuted, everything else copied. dst != src, nparams floats. */
void gmodel_arena_to_device(const struct nn_model *m, float *dst, const float *src);
void gmodel_arena_to_host(const struct nn_model *m, float *dst, const float *src);
/* Whether every layer of m (finished) has a GPU form: ERR_INVALID naming
 * "model" and the layer otherwise (an adaptive pooling that is no ordinary pooling). */
int gmodel_check(const struct nn_model *m, struct err *e);

#endif
