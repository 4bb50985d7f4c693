/* nn_check: what the layer tests share (test_nn_layers, test_nn_tlayers,
 * test_nn_attention): seeded inputs, comparing a fast path with its reference relative to
 * the reference's scale, and central-difference gradient checks.
 *
 * Decision: closeness is relative to the largest magnitude of the expected tensor, not per
 * element: a reference accumulating in double and oneDNN in float differ by rounding of
 * the terms summed, which scales with the tensor, while an indexing bug moves results by
 * O(1) of that scale (test_nn_layers.c's opening comment derives the tolerances).
 *
 * Ownership: the allocating helpers return malloc'd arrays the caller frees. */
#ifndef DDPB_TESTS_NN_CHECK_H
#define DDPB_TESTS_NN_CHECK_H

#include <oneapi/dnnl/dnnl.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/nn/nn.h"

/* n floats from N(mean, std^2), seeded (malloc'd). */
float *nn_check_randn(size_t n, uint64_t seed, float mean, float std);
/* n copies of v (malloc'd). */
float *nn_check_filled(size_t n, float v);
/* 1 when max |got - want| <= tol * max |want|; else prints the worst element under what. */
int nn_check_close_rel(const char *what, const float *got, const float *want, size_t n,
                       double tol);
/* nn_check_close_rel of got - base against want - base: gradients that accumulate onto a
 * non-zero start. */
int nn_check_close_acc(const char *what, const float *got, const float *want, size_t n,
                       float base, double tol);
/* sum a[i] b[i] in double */
double nn_check_dot(const float *a, const float *b, size_t n);

struct nn_dnnl;
/* A copy of plain data in oneDNN layout md (nn_alloc'd: free()). */
float *nn_check_to_layout(struct nn_dnnl *d, const dnnl_memory_desc_t *md, struct nn_shape s,
                          const float *plain);
/* A plain copy of data in layout md (malloc'd). */
float *nn_check_to_plain(struct nn_dnnl *d, const dnnl_memory_desc_t *md, struct nn_shape s,
                         const float *x);

typedef double (*nn_check_loss_fn)(void *ctx);
/* Central differences of loss() in x[i] (step h) at up to 24 indices spread over x,
 * against analytic[i]: within 5e-3 absolute plus 5e-3 relative to the larger of the two. */
int nn_check_fd(const char *what, float *x, size_t n, const float *analytic,
                nn_check_loss_fn loss, void *ctx, float h);

#endif
