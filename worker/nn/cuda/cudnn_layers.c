/* cudnn_layers: convolution, batch normalization and pooling through cuDNN's legacy API
 * (gpu_layers.h), NHWC.
 *
 * Decision: the legacy API (deprecated in cuDNN 9, still shipped) because it covers these
 * three layers with a handful of calls and heuristics, where the graph API needs an
 * execution plan per shape; what to run is decided by dnn_plan.c (host C, unit-tested),
 * this file only converts cuDNN's structs to it and makes the calls; biases go through
 * our own kernels (gpu_bias_add/_grad) so a float bias works with half activations,
 * which cudnnAddTensor does not promise. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "worker/nn/cuda/gpu_layers.h"

#define GPU_CONV_WS_LIMIT ((size_t)512 << 20) /* algorithms needing more are skipped */

static int cudnn_check(cudnnStatus_t rc, const char *what, struct err *e)
{
    if (rc == CUDNN_STATUS_SUCCESS)
        return 0;
    return err_set(e, rc == CUDNN_STATUS_ALLOC_FAILED ? ERR_NOMEM : ERR_IO, NULL,
                   "%s: cuDNN error %s", what, cudnnGetErrorString(rc));
}

static cudnnDataType_t cudnn_type(enum gpu_dtype t)
{
    return t == GPU_F16    ? CUDNN_DATA_HALF
           : t == GPU_BF16 ? CUDNN_DATA_BFLOAT16
                           : CUDNN_DATA_FLOAT;
}

static const float cudnn_one = 1.0f, cudnn_zero = 0.0f;

const char *gpu_cudnn_version(char *buf, size_t len)
{
    size_t v = cudnnGetVersion();
    snprintf(buf, len, "cuDNN %zu.%zu.%zu", v / 10000, v / 100 % 100, v % 100);
    return buf;
}

static int cudnn_nhwc(cudnnTensorDescriptor_t *d, struct nn_shape s, cudnnDataType_t t,
                      struct err *e)
{
    if (cudnn_check(cudnnCreateTensorDescriptor(d), "tensor descriptor", e) < 0)
        return -1;
    return cudnn_check(cudnnSetTensor4dDescriptor(*d, CUDNN_TENSOR_NHWC, t, s.n, s.c, s.h, s.w),
                       "tensor descriptor", e);
}

/* ==== shared state ======================================================================= */

static enum dnn_precision cudnn_precision(enum gpu_dtype t, bool tf32)
{
    return t != GPU_F32 ? DNN_HALF : tf32 ? DNN_FP32_TF32 : DNN_FP32;
}

static cudnnMathType_t cudnn_math_to(enum dnn_math m)
{
    switch (m) {
    case DNN_MATH_TENSOR_OP: return CUDNN_TENSOR_OP_MATH;
    case DNN_MATH_TENSOR_OP_CONVERSION: return CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    case DNN_MATH_FMA: return CUDNN_FMA_MATH;
    case DNN_MATH_DEFAULT: break;
    }
    return CUDNN_DEFAULT_MATH;
}

static enum dnn_math cudnn_math_from(cudnnMathType_t m)
{
    switch (m) {
    case CUDNN_TENSOR_OP_MATH: return DNN_MATH_TENSOR_OP;
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return DNN_MATH_TENSOR_OP_CONVERSION;
    case CUDNN_FMA_MATH: return DNN_MATH_FMA;
    default: break;
    }
    return DNN_MATH_DEFAULT;
}

void gpu_dnn_init(struct gpu_dnn *d, cudnnHandle_t h, const struct gpu_dnn_opts *o)
{
    memset(d, 0, sizeof *d);
    d->h = h;
    if (o)
        d->o = *o;
}

/* Find's scratch, made on the first measurement: as much as dnn_plan_search_bytes allows,
 * halved while the device refuses (a smaller scratch only narrows the candidates). */
static void gpu_dnn_search_ws(struct gpu_dnn *d)
{
    if (d->search_tried)
        return;
    d->search_tried = true;
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess)
        free_b = 0;
    for (size_t b = dnn_plan_search_bytes(free_b, GPU_CONV_WS_LIMIT); b >= DNN_WS_ROUND;
         b /= 2) {
        if (cudaMalloc(&d->search, b) == cudaSuccess) {
            d->search_bytes = b;
            return;
        }
        d->search = NULL;
        (void)cudaGetLastError(); /* an allocation failure is not sticky; clear it */
    }
}

int gpu_dnn_fit(struct gpu_dnn *d, struct err *e)
{
    gpu_free(d->search);
    d->search = NULL;
    d->search_bytes = 0;
    d->search_tried = false;
    size_t have = d->plan.have, bytes = dnn_plan_ws_grow(&d->plan);
    if (!bytes)
        return 0;
    gpu_free(d->ws);
    if (!(d->ws = gpu_alloc(bytes, e))) {
        d->plan.have = 0;
        return err_prefix(e, "cuDNN workspace of %.1f MiB (was %.1f)",
                          (double)bytes / (1 << 20), (double)have / (1 << 20));
    }
    return 0;
}

void gpu_dnn_destroy(struct gpu_dnn *d)
{
    gpu_free(d->ws);
    gpu_free(d->search);
    dnn_plan_cache_free(&d->cache);
    memset(d, 0, sizeof *d);
}

/* ==== convolution ======================================================================= */

static const char *const gpu_conv_dir_name[DNN_CONV_NDIRS] = {"forward", "backward-data",
                                                              "backward-filter"};

#define GPU_CONV_MAX_ALGOS 8
_Static_assert(CUDNN_CONVOLUTION_FWD_ALGO_COUNT <= GPU_CONV_MAX_ALGOS &&
                   CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT <= GPU_CONV_MAX_ALGOS &&
                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT <= GPU_CONV_MAX_ALGOS,
               "more cuDNN algorithms than GPU_CONV_MAX_ALGOS");

/* cuDNN's three perf structs have the same fields: one conversion for all of them */
#define CUDNN_PERF_TO_PLAN(dst, src, n)                                                        \
    for (int i_ = 0; i_ < (n); i_++)                                                           \
        (dst)[i_] = (struct dnn_algo_perf)                                                     \
        {                                                                                      \
            .algo = (int)(src)[i_].algo, .ok = (src)[i_].status == CUDNN_STATUS_SUCCESS,       \
            .memory = (src)[i_].memory, .math = cudnn_math_from((src)[i_].mathType)            \
        }

/* cuDNN's ranked candidates for direction dir: its heuristics, or measured on b's buffers
 * with Find's scratch in benchmark mode. */
static int gpu_conv_rank(struct gpu_conv *f, enum dnn_conv_dir dir,
                         const struct gpu_conv_bufs *b, struct dnn_algo_perf *out, int *n,
                         struct err *e)
{
    struct gpu_dnn *d = f->d;
    bool find = d->o.benchmark;
    void *ws = d->search;
    size_t wsb = d->search_bytes;
    cudnnStatus_t rc = CUDNN_STATUS_SUCCESS;
    *n = 0;
    if (dir == DNN_CONV_FWD) {
        cudnnConvolutionFwdAlgoPerf_t p[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        int k = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
        rc = find ? cudnnFindConvolutionForwardAlgorithmEx(
                        d->h, f->x, b->x, f->w, b->w, f->conv, f->y, b->y, k, n, p, ws, wsb)
                  : cudnnGetConvolutionForwardAlgorithm_v7(d->h, f->x, f->w, f->conv, f->y, k,
                                                           n, p);
        CUDNN_PERF_TO_PLAN(out, p, rc == CUDNN_STATUS_SUCCESS ? *n : 0);
    } else if (dir == DNN_CONV_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        int k = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
        rc = find ? cudnnFindConvolutionBackwardDataAlgorithmEx(
                        d->h, f->w, b->w, f->y, b->dy, f->conv, f->x, b->dx, k, n, p, ws, wsb)
                  : cudnnGetConvolutionBackwardDataAlgorithm_v7(d->h, f->w, f->y, f->conv, f->x,
                                                                k, n, p);
        CUDNN_PERF_TO_PLAN(out, p, rc == CUDNN_STATUS_SUCCESS ? *n : 0);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        int k = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
        /* of the data's type; b is NULL for the heuristics (run 2's segfault: b->dw was read
         * before the choice between Find and the heuristics) */
        void *dw = !find ? NULL : f->t == GPU_F32 ? (void *)b->dw : f->dw_half;
        rc = find ? cudnnFindConvolutionBackwardFilterAlgorithmEx(
                        d->h, f->x, b->x, f->y, b->dy, f->conv, f->w, dw, k, n, p, ws, wsb)
                  : cudnnGetConvolutionBackwardFilterAlgorithm_v7(d->h, f->x, f->y, f->conv,
                                                                  f->w, k, n, p);
        CUDNN_PERF_TO_PLAN(out, p, rc == CUDNN_STATUS_SUCCESS ? *n : 0);
    }
    return cudnn_check(rc, gpu_conv_dir_name[dir], e);
}

/* Direction dir's algorithm and math type: from d's cache, else ranked by cuDNN under the
 * precision's query math type and picked (dnn_plan_pick); its workspace requested. */
static int gpu_conv_choose(struct gpu_conv *f, enum dnn_conv_dir dir,
                           const struct gpu_conv_bufs *b, struct err *e)
{
    struct gpu_dnn *d = f->d;
    enum dnn_precision p = cudnn_precision(f->t, d->o.tf32);
    struct dnn_algo_choice *ch = &f->algo[dir];
    struct dnn_conv_key k;
    dnn_plan_conv_key(&k, dir, &f->cfg, f->in, p, (int)f->t);
    bool cached = dnn_plan_cache_find(&d->cache, &k, ch);
    if (cached) {
        d->cached++;
    } else {
        if (d->o.benchmark && !b)
            return err_set(e, ERR_INVALID, NULL,
                           "conv: benchmark mode needs the layer's buffers");
        if (d->o.benchmark)
            gpu_dnn_search_ws(d);
        struct dnn_algo_perf c[GPU_CONV_MAX_ALGOS];
        int n = 0;
        if (cudnn_check(
                cudnnSetConvolutionMathType(f->conv, cudnn_math_to(dnn_plan_query_math(p))),
                "math type", e) < 0 ||
            gpu_conv_rank(f, dir, b, c, &n, e) < 0)
            return err_prefix(e, "conv %s algorithm", gpu_conv_dir_name[dir]);
        size_t limit = d->o.benchmark ? d->search_bytes : GPU_CONV_WS_LIMIT;
        if (dnn_plan_pick(c, n, limit, p, ch) < 0)
            return err_set(e, ERR_INVALID, NULL,
                           "conv: cuDNN has no %s algorithm for %s in %s within %zu MiB of "
                           "workspace",
                           gpu_conv_dir_name[dir], nn_shape_str(f->in, (char[48]){0}, 48),
                           gpu_dtype_name(f->t), limit >> 20);
        if (dnn_plan_cache_put(&d->cache, &k, ch, e) < 0)
            return -1;
        d->ranked++;
    }
    if (d->o.trace)
        fprintf(d->o.trace,
                "    cudnn conv %s %s %s k%dx%d s%d -> %d: algo %d, %s math, %zu B%s\n",
                gpu_dtype_name(f->t), gpu_conv_dir_name[dir],
                nn_shape_str(f->in, (char[48]){0}, 48), f->cfg.kh, f->cfg.kw, f->cfg.sh,
                f->cfg.cout, ch->algo, dnn_plan_math_name(ch->math), ch->memory,
                cached           ? ", cached"
                : d->o.benchmark ? ", measured"
                                 : ", heuristic");
    dnn_plan_ws_request(&d->plan, ch->memory);
    return 0;
}

int gpu_conv_init(struct gpu_conv *f, struct gpu_dnn *d, const struct nn_conv2d_cfg *c,
                  struct nn_shape in, enum gpu_dtype t, int train,
                  const struct gpu_conv_bufs *b, struct err *e)
{
    memset(f, 0, sizeof *f);
    f->d = d;
    f->cfg = *c;
    f->in = in;
    f->t = t;
    if (nn_conv2d_shape(c, in, &f->out, e) < 0)
        return -1;
    cudnnDataType_t dt = cudnn_type(t);
    if (cudnn_nhwc(&f->x, in, dt, e) < 0 || cudnn_nhwc(&f->y, f->out, dt, e) < 0 ||
        cudnn_check(cudnnCreateFilterDescriptor(&f->w), "filter", e) < 0 ||
        cudnn_check(cudnnSetFilter4dDescriptor(f->w, dt, CUDNN_TENSOR_NHWC, c->cout,
                                               c->cin / c->groups, c->kh, c->kw),
                    "filter", e) < 0 ||
        cudnn_check(cudnnCreateConvolutionDescriptor(&f->conv), "convolution", e) < 0 ||
        cudnn_check(cudnnSetConvolution2dDescriptor(f->conv, c->ph, c->pw, c->sh, c->sw, c->dh,
                                                    c->dw, CUDNN_CROSS_CORRELATION,
                                                    CUDNN_DATA_FLOAT),
                    "convolution", e) < 0 ||
        cudnn_check(cudnnSetConvolutionGroupCount(f->conv, c->groups), "groups", e) < 0)
        return -1;
    /* the output shape cuDNN computes must be the reference's */
    int on, oc, oh, ow;
    if (cudnn_check(
            cudnnGetConvolution2dForwardOutputDim(f->conv, f->x, f->w, &on, &oc, &oh, &ow),
            "output shape", e) < 0)
        return -1;
    if (on != f->out.n || oc != f->out.c || oh != f->out.h || ow != f->out.w)
        return err_set(e, ERR_INTERNAL, NULL,
                       "conv: cuDNN output %dx%dx%dx%d differs from "
                       "the reference's",
                       on, oc, oh, ow);
    if (train && t != GPU_F32 &&
        !(f->dw_half = gpu_alloc(nn_conv2d_weight_len(c) * gpu_dtype_size(t), e)))
        return -1;
    for (int k = 0; k < (train ? DNN_CONV_NDIRS : 1); k++, f->ndirs++)
        if (gpu_conv_choose(f, (enum dnn_conv_dir)k, b, e) < 0)
            return -1;
    return 0;
}

/* Before each call: the direction's math type on the descriptor (the three directions
 * share it) and a check that the shared workspace was fitted to the choice. */
static int gpu_conv_prepare(struct gpu_conv *f, enum dnn_conv_dir dir, cudaStream_t s,
                            struct err *e)
{
    if (f->algo[dir].memory > f->d->plan.have)
        return err_set(e, ERR_INTERNAL, NULL,
                       "conv %s: the workspace holds %zu bytes of %zu (gpu_dnn_fit not called)",
                       gpu_conv_dir_name[dir], f->d->plan.have, f->algo[dir].memory);
    if (cudnn_check(cudnnSetStream(f->d->h, s), "stream", e) < 0 ||
        cudnn_check(cudnnSetConvolutionMathType(f->conv, cudnn_math_to(f->algo[dir].math)),
                    "math type", e) < 0)
        return err_prefix(e, "conv %s", gpu_conv_dir_name[dir]);
    return 0;
}

int gpu_conv_forward(struct gpu_conv *f, void *out, const void *inp, const void *weight,
                     const float *bias, cudaStream_t s, struct err *e)
{
    struct gpu_dnn *d = f->d;
    if (gpu_conv_prepare(f, DNN_CONV_FWD, s, e) < 0 ||
        cudnn_check(
            cudnnConvolutionForward(d->h, &cudnn_one, f->x, inp, f->w, weight, f->conv,
                                    (cudnnConvolutionFwdAlgo_t)f->algo[DNN_CONV_FWD].algo,
                                    d->ws, d->plan.have, &cudnn_zero, f->y, out),
            "conv forward", e) < 0)
        return -1;
    if (bias)
        gpu_bias_add(out, bias, f->out.n * f->out.h * f->out.w, f->out.c, f->t, s);
    return 0;
}

int gpu_conv_backward(struct gpu_conv *f, void *dinp, float *dweight, float *dbias,
                      const void *dout, const void *inp, const void *weight, cudaStream_t s,
                      struct err *e)
{
    struct gpu_dnn *d = f->d;
    if (f->ndirs < DNN_CONV_NDIRS)
        return err_set(e, ERR_INVALID, NULL, "conv backward on a layer made without train");
    if (dinp && (gpu_conv_prepare(f, DNN_CONV_BWD_DATA, s, e) < 0 ||
                 cudnn_check(cudnnConvolutionBackwardData(
                                 d->h, &cudnn_one, f->w, weight, f->y, dout, f->conv,
                                 (cudnnConvolutionBwdDataAlgo_t)f->algo[DNN_CONV_BWD_DATA].algo,
                                 d->ws, d->plan.have, &cudnn_zero, f->x, dinp),
                             "conv backward data", e) < 0))
        return -1;
    /* float: accumulate straight into the arena; half: into scratch, then added */
    bool half = f->t != GPU_F32;
    if (gpu_conv_prepare(f, DNN_CONV_BWD_FILTER, s, e) < 0 ||
        cudnn_check(cudnnConvolutionBackwardFilter(
                        d->h, &cudnn_one, f->x, inp, f->y, dout, f->conv,
                        (cudnnConvolutionBwdFilterAlgo_t)f->algo[DNN_CONV_BWD_FILTER].algo,
                        d->ws, d->plan.have, half ? &cudnn_zero : &cudnn_one, f->w,
                        half ? f->dw_half : (void *)dweight),
                    "conv backward filter", e) < 0)
        return -1;
    if (half)
        gpu_accumulate(dweight, f->dw_half, f->t, nn_conv2d_weight_len(&f->cfg), s);
    if (dbias)
        gpu_bias_grad(dbias, dout, f->out.n * f->out.h * f->out.w, f->out.c, f->t, s);
    return 0;
}

void gpu_conv_destroy(struct gpu_conv *f)
{
    if (f->x)
        cudnnDestroyTensorDescriptor(f->x);
    if (f->y)
        cudnnDestroyTensorDescriptor(f->y);
    if (f->w)
        cudnnDestroyFilterDescriptor(f->w);
    if (f->conv)
        cudnnDestroyConvolutionDescriptor(f->conv);
    gpu_free(f->dw_half);
    memset(f, 0, sizeof *f);
}

/* ==== batch normalization ================================================================= */

#define GPU_BN_FUSED_MODE CUDNN_BATCHNORM_SPATIAL_PERSISTENT
#define GPU_BN_FUSED_OPS CUDNN_BATCHNORM_OPS_BN_ACTIVATION

/* The fused path's descriptor, workspace request, reserve space and gradient scratch.
 * *ok = false (nothing set up, no error) when cuDNN answers that it does not support it. */
static int gpu_bn_fused_init(struct gpu_bn *f, bool *ok, struct err *e)
{
    struct gpu_dnn *d = f->d;
    size_t fwd = 0, bwd = 0;
    *ok = false;
    if (cudnn_check(cudnnCreateActivationDescriptor(&f->act), "bn activation", e) < 0 ||
        cudnn_check(cudnnSetActivationDescriptor(f->act, CUDNN_ACTIVATION_RELU,
                                                 CUDNN_PROPAGATE_NAN, 0.0),
                    "bn activation", e) < 0)
        return -1;
    cudnnStatus_t rc = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
        d->h, GPU_BN_FUSED_MODE, GPU_BN_FUSED_OPS, f->x, NULL, f->x, f->p, f->act, &fwd);
    if (rc == CUDNN_STATUS_SUCCESS)
        rc = cudnnGetBatchNormalizationBackwardExWorkspaceSize(
            d->h, GPU_BN_FUSED_MODE, GPU_BN_FUSED_OPS, f->x, f->x, f->x, NULL, f->x, f->p,
            f->act, &bwd);
    if (rc == CUDNN_STATUS_SUCCESS)
        rc = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
            d->h, GPU_BN_FUSED_MODE, GPU_BN_FUSED_OPS, f->act, f->x, &f->reserve_bytes);
    if (rc == CUDNN_STATUS_NOT_SUPPORTED || rc == CUDNN_STATUS_BAD_PARAM)
        return 0; /* the plain path */
    if (cudnn_check(rc, "fused bn sizes", e) < 0 ||
        !(f->reserve = gpu_alloc(f->reserve_bytes, e)) ||
        !(f->dparams = gpu_alloc(2 * (size_t)f->s.c * sizeof(float), e)))
        return -1;
    dnn_plan_ws_request(&d->plan, fwd > bwd ? fwd : bwd);
    *ok = true;
    return 0;
}

int gpu_bn_init(struct gpu_bn *f, struct gpu_dnn *d, const struct nn_bn_cfg *c,
                struct nn_shape s, enum gpu_dtype t, struct err *e)
{
    memset(f, 0, sizeof *f);
    f->d = d;
    f->cfg = *c;
    f->s = s;
    f->t = t;
    if (s.c != c->c)
        return err_set(e, ERR_INVALID, "c", "batch norm of %d channels on a %d-channel input",
                       c->c, s.c);
    if (c->eps < CUDNN_BN_MIN_EPSILON)
        return err_set(e, ERR_INVALID, "eps", "batch norm eps %g is below cuDNN's minimum %g",
                       (double)c->eps, CUDNN_BN_MIN_EPSILON);
    if (cudnn_nhwc(&f->x, s, cudnn_type(t), e) < 0 ||
        cudnn_check(cudnnCreateTensorDescriptor(&f->p), "bn parameters", e) < 0 ||
        cudnn_check(cudnnDeriveBNTensorDescriptor(f->p, f->x, CUDNN_BATCHNORM_SPATIAL),
                    "bn parameters", e) < 0)
        return -1;
    f->save_mean = gpu_alloc((size_t)s.c * sizeof(float), e);
    f->save_invstd = f->save_mean ? gpu_alloc((size_t)s.c * sizeof(float), e) : NULL;
    if (!f->save_invstd)
        return -1;
    bool ok = false;
    if (!d->o.no_fused_bn && dnn_plan_bn_fused(cudnn_precision(t, false), c->relu != 0, s) &&
        gpu_bn_fused_init(f, &ok, e) < 0)
        return -1;
    f->fused = ok;
    return 0;
}

/* The fused training forward; *done = false when cuDNN refused it at the call (the layer
 * then stays on the plain path). */
static int gpu_bn_fused_forward(struct gpu_bn *f, bool *done, void *out, float *running_mean,
                                float *running_var, const void *inp, const float *weight,
                                const float *bias, struct err *e)
{
    struct gpu_dnn *d = f->d;
    cudnnStatus_t rc = cudnnBatchNormalizationForwardTrainingEx(
        d->h, GPU_BN_FUSED_MODE, GPU_BN_FUSED_OPS, &cudnn_one, &cudnn_zero, f->x, inp, NULL,
        NULL, f->x, out, f->p, weight, bias, f->cfg.momentum, running_mean, running_var,
        f->cfg.eps, f->save_mean, f->save_invstd, f->act, d->ws, d->plan.have, f->reserve,
        f->reserve_bytes);
    *done = rc != CUDNN_STATUS_NOT_SUPPORTED;
    if (!*done)
        f->fused = false;
    return *done ? cudnn_check(rc, "fused bn forward", e) : 0;
}

int gpu_bn_forward(struct gpu_bn *f, void *out, float *running_mean, float *running_var,
                   const void *inp, const float *weight, const float *bias, int train,
                   cudaStream_t s, struct err *e)
{
    if (cudnn_check(cudnnSetStream(f->d->h, s), "bn forward", e) < 0)
        return -1;
    bool done = false;
    if (train && f->fused &&
        gpu_bn_fused_forward(f, &done, out, running_mean, running_var, inp, weight, bias, e) <
            0)
        return -1;
    if (done)
        return 0;
    cudnnStatus_t rc = train ? cudnnBatchNormalizationForwardTraining(
                                   f->d->h, CUDNN_BATCHNORM_SPATIAL, &cudnn_one, &cudnn_zero,
                                   f->x, inp, f->x, out, f->p, weight, bias, f->cfg.momentum,
                                   running_mean, running_var, f->cfg.eps, f->save_mean,
                                   f->save_invstd)
                             : cudnnBatchNormalizationForwardInference(
                                   f->d->h, CUDNN_BATCHNORM_SPATIAL, &cudnn_one, &cudnn_zero,
                                   f->x, inp, f->x, out, f->p, weight, bias, running_mean,
                                   running_var, f->cfg.eps);
    if (cudnn_check(rc, "bn forward", e) < 0)
        return -1;
    if (f->cfg.relu)
        gpu_act_forward(out, out, nn_shape_numel(f->s), GPU_ACT_RELU, f->t, s);
    return 0;
}

int gpu_bn_backward(struct gpu_bn *f, void *dinp, float *dweight, float *dbias, void *dout,
                    const void *inp, const void *out, const float *weight, const float *bias,
                    cudaStream_t s, struct err *e)
{
    struct gpu_dnn *d = f->d;
    if (cudnn_check(cudnnSetStream(d->h, s), "bn backward", e) < 0)
        return -1;
    if (f->fused) { /* cuDNN writes the parameter gradients: through dparams, then added */
        size_t c = (size_t)f->s.c;
        if (cudnn_check(cudnnBatchNormalizationBackwardEx(
                            d->h, GPU_BN_FUSED_MODE, GPU_BN_FUSED_OPS, &cudnn_one, &cudnn_zero,
                            &cudnn_one, &cudnn_zero, f->x, inp, f->x, out, f->x, dout, NULL,
                            NULL, f->x, dinp, f->p, weight, bias, f->dparams, f->dparams + c,
                            f->cfg.eps, f->save_mean, f->save_invstd, f->act, d->ws,
                            d->plan.have, f->reserve, f->reserve_bytes),
                        "fused bn backward", e) < 0)
            return -1;
        gpu_accumulate(dweight, f->dparams, GPU_F32, c, s);
        gpu_accumulate(dbias, f->dparams + c, GPU_F32, c, s);
        return 0;
    }
    if (f->cfg.relu)
        gpu_act_backward(dout, dout, out, nn_shape_numel(f->s), GPU_ACT_RELU, f->t, s);
    return cudnn_check(cudnnBatchNormalizationBackward(
                           d->h, CUDNN_BATCHNORM_SPATIAL, &cudnn_one, &cudnn_zero, &cudnn_one,
                           &cudnn_one, f->x, inp, f->x, dout, f->x, dinp, f->p, weight, dweight,
                           dbias, f->cfg.eps, f->save_mean, f->save_invstd),
                       "bn backward", e);
}

void gpu_bn_destroy(struct gpu_bn *f)
{
    if (f->x)
        cudnnDestroyTensorDescriptor(f->x);
    if (f->p)
        cudnnDestroyTensorDescriptor(f->p);
    if (f->act)
        cudnnDestroyActivationDescriptor(f->act);
    gpu_free(f->save_mean);
    gpu_free(f->save_invstd);
    gpu_free(f->reserve);
    gpu_free(f->dparams);
    memset(f, 0, sizeof *f);
}

/* ==== pooling ============================================================================= */

int gpu_pool_init(struct gpu_pool *f, cudnnHandle_t h, int max, const struct nn_pool_cfg *c,
                  struct nn_shape in, enum gpu_dtype t, struct err *e)
{
    memset(f, 0, sizeof *f);
    f->h = h;
    f->in = in;
    f->t = t;
    if (nn_pool_shape(c, in, &f->out, e) < 0)
        return -1;
    cudnnPoolingMode_t mode = max ? CUDNN_POOLING_MAX_DETERMINISTIC
                              : c->count_include_pad
                                  ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                  : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    if (cudnn_nhwc(&f->x, in, cudnn_type(t), e) < 0 ||
        cudnn_nhwc(&f->y, f->out, cudnn_type(t), e) < 0 ||
        cudnn_check(cudnnCreatePoolingDescriptor(&f->pool), "pooling", e) < 0 ||
        cudnn_check(cudnnSetPooling2dDescriptor(f->pool, mode, CUDNN_PROPAGATE_NAN, c->kh,
                                                c->kw, c->ph, c->pw, c->sh, c->sw),
                    "pooling", e) < 0)
        return -1;
    int n, ch, oh, ow;
    if (cudnn_check(cudnnGetPooling2dForwardOutputDim(f->pool, f->x, &n, &ch, &oh, &ow),
                    "pooling shape", e) < 0)
        return -1;
    if (oh != f->out.h || ow != f->out.w)
        return err_set(e, ERR_INTERNAL, NULL,
                       "pool: cuDNN output %dx%d differs from the "
                       "reference's %dx%d",
                       oh, ow, f->out.h, f->out.w);
    return 0;
}

int gpu_pool_forward(struct gpu_pool *f, void *out, const void *inp, cudaStream_t s,
                     struct err *e)
{
    if (cudnn_check(cudnnSetStream(f->h, s), "pool forward", e) < 0)
        return -1;
    return cudnn_check(
        cudnnPoolingForward(f->h, f->pool, &cudnn_one, f->x, inp, &cudnn_zero, f->y, out),
        "pool forward", e);
}

int gpu_pool_backward(struct gpu_pool *f, void *dinp, const void *dout, const void *out,
                      const void *inp, cudaStream_t s, struct err *e)
{
    if (cudnn_check(cudnnSetStream(f->h, s), "pool backward", e) < 0)
        return -1;
    return cudnn_check(cudnnPoolingBackward(f->h, f->pool, &cudnn_one, f->y, out, f->y, dout,
                                            f->x, inp, &cudnn_zero, f->x, dinp),
                       "pool backward", e);
}

void gpu_pool_destroy(struct gpu_pool *f)
{
    if (f->x)
        cudnnDestroyTensorDescriptor(f->x);
    if (f->y)
        cudnnDestroyTensorDescriptor(f->y);
    if (f->pool)
        cudnnDestroyPoolingDescriptor(f->pool);
    memset(f, 0, sizeof *f);
}
