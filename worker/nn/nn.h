/* nn: the core of the CPU training engine: tensor shapes, the contiguous arenas that hold
 * parameters / gradients / optimizer state, the activation workspace, the seeded RNG, the
 * thread count, and the conventions every layer follows.
 *
 * Conventions (llm.c style; every layer file follows them):
 * - One file per layer; `nn_<layer>_forward` and `nn_<layer>_backward` side by side, the
 *   plain-loop reference first (it is the spec), the oneDNN fast path after it.
 * - Outputs first in argument lists, then inputs, then parameters, then the config.
 * - Shapes are written in comments as (N,C,H,W) or (N,F); the reference path works on
 *   plain row-major NCHW / NF float32. The fast path works on oneDNN memory descriptors:
 *   a tensor's layout is chosen by the layer that produces it (usually a blocked format
 *   such as nChw16c) and a tensor's gradient always has the same layout as the tensor.
 * - Gradients: backward ACCUMULATES into parameter gradients (dweight += ...), so a step
 *   needs nn_model_zero_grad (or a memset) first and micro-batches accumulate for free.
 *   Backward OVERWRITES the input gradient dinp (it never reads it first); dinp = NULL
 *   skips the input gradient (a network's first layer). The model container sums input
 *   gradients where a tensor feeds several layers (residual connections).
 * - Forward and backward never allocate: every buffer is made once when a layer (or the
 *   model) is prepared for a batch size and reused every step, because first-touching
 *   freshly mapped pages is slow on these machines.
 *
 * Threads: oneDNN 2.6 as Debian builds it uses the OpenMP runtime (libgomp; nn_runtime_info
 * reports it from dnnl_version()), and so do the engine's own loops; nn_set_threads calls
 * omp_set_num_threads (OMP_NUM_THREADS sets the default). Call it from the thread that runs
 * the model (OpenMP keeps the setting per thread) and before preparing the model: oneDNN
 * picks its kernels' blocking for the thread count when it creates a primitive. Idle OpenMP
 * threads spin briefly before sleeping (OMP_WAIT_POLICY / GOMP_SPINCOUNT tune that).
 *
 * Ownership: an nn_arena owns its one allocation (nn_arena_free releases it); the
 * workspace owns its allocation; pointers handed out of either are borrowed. */
#ifndef DDPB_NN_H
#define DDPB_NN_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* ---- shapes ----------------------------------------------------------------------- */

/* A float32 tensor's logical shape: 4-D (N,C,H,W) or 2-D (N,F) stored as c = F,
 * h = w = 1, ndims = 2. */
struct nn_shape {
    int ndims; /* 2 or 4 */
    int n, c, h, w;
};

struct nn_shape nn_shape4(int n, int c, int h, int w);
struct nn_shape nn_shape2(int n, int f);
size_t nn_shape_numel(struct nn_shape s);
/* elements per sample: C*H*W (or F) */
size_t nn_shape_sample(struct nn_shape s);
/* "2x64x32x32" into buf; returns buf */
const char *nn_shape_str(struct nn_shape s, char *buf, size_t cap);

/* ---- memory ----------------------------------------------------------------------- */

/* 64-byte aligned, zero-filled (so the pages are touched now, not during a step).
 * Caller owns the result: free() it. NULL on overflow or out of memory. */
void *nn_alloc(size_t bytes);

/* Bytes of physical memory on this node (sysconf), SIZE_MAX when unknown: the most one
 * allocation plan may ask for, since pages beyond it can never all be touched. */
size_t nn_memory_total(void);

/* One contiguous float allocation: parameters, gradients or optimizer state. A DDP bucket
 * is a slice [offset, offset + len) of it. */
struct nn_arena {
    float *data; /* owned */
    size_t len;  /* floats */
};

int nn_arena_alloc(struct nn_arena *a, size_t len, struct err *e); /* zero-filled */
void nn_arena_free(struct nn_arena *a);

/* The activation workspace: planned first (reserve returns offsets), then committed
 * once (one zero-filled allocation), then read through nn_ws_ptr every step. */
struct nn_workspace {
    unsigned char *base; /* owned, NULL until committed */
    size_t size;         /* bytes reserved so far */
};

/* 64-byte aligned offset. A size past SIZE_MAX saturates ws->size at SIZE_MAX, so the
 * commit fails cleanly instead of wrapping. */
size_t nn_ws_reserve(struct nn_workspace *ws, size_t bytes);
int nn_ws_commit(struct nn_workspace *ws, struct err *e);
void *nn_ws_ptr(const struct nn_workspace *ws, size_t offset);
void nn_ws_free(struct nn_workspace *ws);

/* ---- random numbers --------------------------------------------------------------- */

/* xoshiro256** seeded through splitmix64: weight init and test data. Not PyTorch's
 * generator (its numbers cannot be reproduced), but deterministic given the seed. */
struct nn_rng {
    uint64_t s[4];
};

void nn_rng_seed(struct nn_rng *r, uint64_t seed);
uint64_t nn_rng_next(struct nn_rng *r);
double nn_rng_uniform(struct nn_rng *r); /* [0, 1) */
double nn_rng_normal(struct nn_rng *r);  /* N(0, 1), Box-Muller */
void nn_rng_fill_uniform(struct nn_rng *r, float *x, size_t n, float lo, float hi);
void nn_rng_fill_normal(struct nn_rng *r, float *x, size_t n, float mean, float std);

/* Counter-based: the same (key, index) always gives the same value in [0, 1), whatever
 * the order of evaluation or the thread. Dropout masks come from it. */
uint64_t nn_hash64(uint64_t x);
double nn_hash_uniform(uint64_t key, uint64_t index);

/* ---- threads ---------------------------------------------------------------------- */

/* omp_set_num_threads(n) (n < 1: 1). Call before nn_model_prepare. */
void nn_set_threads(int n);
int nn_get_threads(void);
/* "oneDNN 2.6.3 (cpu runtime: OpenMP)" into buf; returns buf */
const char *nn_runtime_info(char *buf, size_t cap);

#endif
