/* dnn_plan: the host-side decisions of the cuDNN layers (cudnn_layers.c), with no CUDA in
 * them so every build unit-tests them (tests/unit/test_dnn_plan.c): which convolution
 * algorithm runs and under which math type, the one workspace the layers of a model
 * share, the cache that benchmark mode measures into, and whether a batch norm may take
 * cuDNN's fused BN+ReLU path.
 *
 * Decisions:
 * - cuDNN ranks the candidates (cudnnGet*_v7: heuristics, best first; cudnnFind*Ex:
 *   measured, fastest first) and reports for each the math type it ranked it under; the
 *   math type is applied with the algorithm (PyTorch's Note [behavior of cudnnFind and
 *   cudnnGet]: an algorithm run under another math type falls back to a slower kernel).
 *   The descriptor is queried under the precision's math type: tensor ops for fp16/bf16,
 *   FMA for fp32 (no TF32, so fp32 matches the CPU reference to float rounding), cuDNN's
 *   default (TF32 allowed) only when TF32 is asked for. A candidate whose math type the
 *   precision forbids (tensor ops in strict fp32) is skipped, never run.
 * - One workspace for the whole model: each layer requests its bytes, the plan keeps the
 *   largest, and it is allocated once after every layer asked (dnn_plan_ws_grow says by
 *   how much, 0 when what is there suffices).
 * - The cache is keyed by everything that makes two convolutions the same problem for
 *   cuDNN (direction, input shape, filter, strides, padding, dilation, groups, precision,
 *   data type),
 *   so ResNet-50's repeated blocks are measured once.
 *
 * Ownership: a cache owns its arrays (dnn_plan_cache_free); everything else is values. */
#ifndef DDPB_DNN_PLAN_H
#define DDPB_DNN_PLAN_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "worker/nn/layers.h"

/* cuDNN's cudnnMathType_t, in its order (cudnn_layers.c maps each value explicitly). */
enum dnn_math {
    DNN_MATH_DEFAULT,
    DNN_MATH_TENSOR_OP,
    DNN_MATH_TENSOR_OP_CONVERSION,
    DNN_MATH_FMA
};

/* The arithmetic a layer runs in: strict fp32, fp32 with TF32 allowed, fp16 or bf16. */
enum dnn_precision { DNN_FP32, DNN_FP32_TF32, DNN_HALF };

enum dnn_conv_dir { DNN_CONV_FWD, DNN_CONV_BWD_DATA, DNN_CONV_BWD_FILTER, DNN_CONV_NDIRS };

/* One ranked candidate, as cuDNN's perf structs report it. */
struct dnn_algo_perf {
    int algo;
    bool ok;       /* status == CUDNN_STATUS_SUCCESS */
    size_t memory; /* workspace bytes */
    enum dnn_math math;
};

/* What runs: the algorithm, the math type set on the descriptor before each call, and
 * the workspace it needs. */
struct dnn_algo_choice {
    int algo;
    enum dnn_math math;
    size_t memory;
};

const char *dnn_plan_math_name(enum dnn_math m);
/* The descriptor's math type while cuDNN ranks candidates for precision p. */
enum dnn_math dnn_plan_query_math(enum dnn_precision p);
/* The math type to run a candidate cuDNN reported under `reported`, or -1 when p forbids
 * it. Strict fp32 runs FMA (cuDNN's default would allow TF32 on Ampere and later). */
int dnn_plan_run_math(enum dnn_precision p, enum dnn_math reported);
/* The first of c[0..n) that succeeded, needs at most ws_limit bytes and whose math type p
 * allows, into *out. 0, or -1 when none qualifies. */
int dnn_plan_pick(const struct dnn_algo_perf *c, int n, size_t ws_limit, enum dnn_precision p,
                  struct dnn_algo_choice *out);

/* ---- the shared workspace ------------------------------------------------------------ */

struct dnn_ws_plan {
    size_t need; /* the largest request so far */
    size_t have; /* bytes allocated */
};

#define DNN_WS_ROUND ((size_t)1 << 20) /* growth in whole MiB: fewer regrowths */

void dnn_plan_ws_request(struct dnn_ws_plan *p, size_t bytes);
/* Bytes to allocate now (need rounded up to DNN_WS_ROUND) when need exceeds have, and
 * have set to them; 0 when the allocation there suffices. */
size_t dnn_plan_ws_grow(struct dnn_ws_plan *p);
/* The scratch benchmark mode lends cudnnFind*Ex: at most limit, at most half the free
 * device memory (the model's own buffers come first), whole MiB. */
size_t dnn_plan_search_bytes(size_t free_bytes, size_t limit);

/* ---- the benchmark cache -------------------------------------------------------------- */

#define DNN_KEY_INTS 17
struct dnn_conv_key {
    int v[DNN_KEY_INTS];
};

struct dnn_algo_cache {
    struct dnn_conv_key *keys;    /* owned */
    struct dnn_algo_choice *vals; /* owned */
    int n, cap;
};

/* dtype: the layer's data type as its caller numbers it (fp16 and bf16 share a
 * precision, not their kernels). */
void dnn_plan_conv_key(struct dnn_conv_key *k, enum dnn_conv_dir dir,
                       const struct nn_conv2d_cfg *c, struct nn_shape in, enum dnn_precision p,
                       int dtype);
bool dnn_plan_cache_find(const struct dnn_algo_cache *c, const struct dnn_conv_key *k,
                         struct dnn_algo_choice *out);
/* Adds (or replaces) k's choice; ERR_NOMEM when it cannot grow. */
int dnn_plan_cache_put(struct dnn_algo_cache *c, const struct dnn_conv_key *k,
                       const struct dnn_algo_choice *v, struct err *e);
void dnn_plan_cache_free(struct dnn_algo_cache *c);

/* ---- batch norm ------------------------------------------------------------------------ */

/* Whether a training batch norm may run cuDNN's fused BN+ReLU
 * (cudnnBatchNormalizationForwardTrainingEx / BackwardEx with
 * CUDNN_BATCHNORM_OPS_BN_ACTIVATION, CUDNN_BATCHNORM_SPATIAL_PERSISTENT): a ReLU follows,
 * the data are half precision (fp16 or bf16, NHWC as every activation here), 4-D, and the
 * channels a multiple of 4, as cuDNN documents for these kernels. cuDNN may still refuse
 * (its size queries or the call say CUDNN_STATUS_NOT_SUPPORTED); the layer then falls
 * back to the plain API. */
bool dnn_plan_bn_fused(enum dnn_precision p, bool relu, struct nn_shape s);

#endif
