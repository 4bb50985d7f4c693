/* vec: the CPU engine's own elementwise vector kernels, each an AVX2 (+FMA) function beside
 * its plain-C reference, chosen at run time by nn_isa_get() (isa.h), so a run capped by
 * ONEDNN_MAX_CPU_ISA takes the same path as oneDNN and the binary runs on any x86-64 (no
 * -march: the AVX2 bodies carry __attribute__((target)) and are only called where the CPU
 * has AVX2 and FMA).
 *
 * Decision: every kernel computes exactly what its reference computes (the same
 * operations in the same order, no contraction into FMA where the reference has a multiply
 * and an add), so the path taken never changes a result: the tests compare bit for bit. */
#ifndef DDPB_NN_VEC_H
#define DDPB_NN_VEC_H

#include <stddef.h>

#include "worker/nn/isa.h"

/* dst[i] += src[i] for i < n; OpenMP-parallel (the calling thread's team). */
void nn_vec_add(float *dst, const float *src, size_t n);
/* The same at a chosen level (the tests; an unsupported level runs the reference). */
void nn_vec_add_at(enum nn_isa isa, float *dst, const float *src, size_t n);

/* SGD with momentum over one slice, as optim.c's loop (PyTorch's order of operations):
 * d = g + wd * p; b = first ? d : b * mom + damp * d; d = nesterov ? d + mom * b : b;
 * p = p - lr * d. */
struct nn_vec_sgd {
    float wd, mom, damp, lr;
    int first, nesterov;
};
void nn_vec_sgd_momentum(const struct nn_vec_sgd *s, float *p, const float *g, float *buf,
                         size_t n);
void nn_vec_sgd_momentum_at(enum nn_isa isa, const struct nn_vec_sgd *s, float *p,
                            const float *g, float *buf, size_t n);

#endif
