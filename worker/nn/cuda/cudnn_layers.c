/* cudnn_layers: convolution, batch normalization and pooling through cuDNN's legacy API
 * (gpu_layers.h), NHWC.
 *
 * Decision: the legacy API (deprecated in cuDNN 9, still shipped) because it covers these
 * three layers with a handful of calls and heuristics, where the graph API needs an
 * execution plan per shape; biases go through our own kernels (gpu_bias_add/_grad) so a
 * float bias works with half activations, which cudnnAddTensor does not promise. */
#include "worker/nn/cuda/gpu_layers.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

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

/* ==== convolution ======================================================================= */

int gpu_conv_init(struct gpu_conv *f, cudnnHandle_t h, const struct nn_conv2d_cfg *c,
                  struct nn_shape in, enum gpu_dtype t, int train, struct err *e)
{
    memset(f, 0, sizeof *f);
    f->h = h;
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
        cudnn_check(cudnnSetConvolutionGroupCount(f->conv, c->groups), "groups", e) < 0 ||
        cudnn_check(cudnnSetConvolutionMathType(f->conv, t == GPU_F32 ? CUDNN_FMA_MATH
                                                                      : CUDNN_TENSOR_OP_MATH),
                    "math type", e) < 0)
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
    size_t ws = 0;
    int found = 0;
    cudnnConvolutionFwdAlgoPerf_t fp[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    if (cudnn_check(cudnnGetConvolutionForwardAlgorithm_v7(h, f->x, f->w, f->conv, f->y,
                                                           CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                           &found, fp),
                    "forward algorithm", e) < 0)
        return -1;
    int k = 0;
    while (k < found &&
           (fp[k].status != CUDNN_STATUS_SUCCESS || fp[k].memory > GPU_CONV_WS_LIMIT))
        k++;
    if (k == found)
        return err_set(e, ERR_INVALID, NULL,
                       "conv: cuDNN has no forward algorithm for %s "
                       "in %s",
                       nn_shape_str(in, (char[48]){0}, 48), gpu_dtype_name(t));
    f->fwd_algo = fp[k].algo;
    ws = fp[k].memory;
    if (train) {
        cudnnConvolutionBwdDataAlgoPerf_t dp[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        cudnnConvolutionBwdFilterAlgoPerf_t wp[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        if (cudnn_check(cudnnGetConvolutionBackwardDataAlgorithm_v7(
                            h, f->w, f->y, f->conv, f->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                            &found, dp),
                        "backward data algorithm", e) < 0)
            return -1;
        for (k = 0; k < found &&
                    (dp[k].status != CUDNN_STATUS_SUCCESS || dp[k].memory > GPU_CONV_WS_LIMIT);
             k++)
            ;
        if (k == found)
            return err_set(e, ERR_INVALID, NULL, "conv: no backward-data algorithm");
        f->bwd_data_algo = dp[k].algo;
        ws = dp[k].memory > ws ? dp[k].memory : ws;
        if (cudnn_check(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                            h, f->x, f->y, f->conv, f->w,
                            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &found, wp),
                        "backward filter algorithm", e) < 0)
            return -1;
        for (k = 0; k < found &&
                    (wp[k].status != CUDNN_STATUS_SUCCESS || wp[k].memory > GPU_CONV_WS_LIMIT);
             k++)
            ;
        if (k == found)
            return err_set(e, ERR_INVALID, NULL, "conv: no backward-filter algorithm");
        f->bwd_filter_algo = wp[k].algo;
        ws = wp[k].memory > ws ? wp[k].memory : ws;
        if (t != GPU_F32 &&
            !(f->dw_half = gpu_alloc(nn_conv2d_weight_len(c) * gpu_dtype_size(t), e)))
            return -1;
    }
    f->ws_bytes = ws;
    if (ws && !(f->ws = gpu_alloc(ws, e)))
        return -1;
    return 0;
}

int gpu_conv_forward(struct gpu_conv *f, void *out, const void *inp, const void *weight,
                     const float *bias, cudaStream_t s, struct err *e)
{
    if (cudnn_check(cudnnSetStream(f->h, s), "conv forward", e) < 0 ||
        cudnn_check(cudnnConvolutionForward(f->h, &cudnn_one, f->x, inp, f->w, weight, f->conv,
                                            f->fwd_algo, f->ws, f->ws_bytes, &cudnn_zero, f->y,
                                            out),
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
    if (cudnn_check(cudnnSetStream(f->h, s), "conv backward", e) < 0)
        return -1;
    if (dinp && cudnn_check(cudnnConvolutionBackwardData(f->h, &cudnn_one, f->w, weight, f->y,
                                                         dout, f->conv, f->bwd_data_algo, f->ws,
                                                         f->ws_bytes, &cudnn_zero, f->x, dinp),
                            "conv backward data", e) < 0)
        return -1;
    /* float: accumulate straight into the arena; half: into scratch, then added */
    bool half = f->t != GPU_F32;
    if (cudnn_check(cudnnConvolutionBackwardFilter(f->h, &cudnn_one, f->x, inp, f->y, dout,
                                                   f->conv, f->bwd_filter_algo, f->ws,
                                                   f->ws_bytes, half ? &cudnn_zero : &cudnn_one,
                                                   f->w, half ? f->dw_half : (void *)dweight),
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
    gpu_free(f->ws);
    gpu_free(f->dw_half);
    memset(f, 0, sizeof *f);
}

/* ==== batch normalization ================================================================= */

int gpu_bn_init(struct gpu_bn *f, cudnnHandle_t h, const struct nn_bn_cfg *c, struct nn_shape s,
                enum gpu_dtype t, struct err *e)
{
    memset(f, 0, sizeof *f);
    f->h = h;
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
    return f->save_invstd ? 0 : -1;
}

int gpu_bn_forward(struct gpu_bn *f, void *out, float *running_mean, float *running_var,
                   const void *inp, const float *weight, const float *bias, int train,
                   cudaStream_t s, struct err *e)
{
    if (cudnn_check(cudnnSetStream(f->h, s), "bn forward", e) < 0)
        return -1;
    cudnnStatus_t rc = train ? cudnnBatchNormalizationForwardTraining(
                                   f->h, CUDNN_BATCHNORM_SPATIAL, &cudnn_one, &cudnn_zero, f->x,
                                   inp, f->x, out, f->p, weight, bias, f->cfg.momentum,
                                   running_mean, running_var, f->cfg.eps, f->save_mean,
                                   f->save_invstd)
                             : cudnnBatchNormalizationForwardInference(
                                   f->h, CUDNN_BATCHNORM_SPATIAL, &cudnn_one, &cudnn_zero, f->x,
                                   inp, f->x, out, f->p, weight, bias, running_mean,
                                   running_var, f->cfg.eps);
    if (cudnn_check(rc, "bn forward", e) < 0)
        return -1;
    if (f->cfg.relu)
        gpu_act_forward(out, out, nn_shape_numel(f->s), GPU_ACT_RELU, f->t, s);
    return 0;
}

int gpu_bn_backward(struct gpu_bn *f, void *dinp, float *dweight, float *dbias, void *dout,
                    const void *inp, const void *out, const float *weight, cudaStream_t s,
                    struct err *e)
{
    if (f->cfg.relu)
        gpu_act_backward(dout, dout, out, nn_shape_numel(f->s), GPU_ACT_RELU, f->t, s);
    if (cudnn_check(cudnnSetStream(f->h, s), "bn backward", e) < 0)
        return -1;
    return cudnn_check(cudnnBatchNormalizationBackward(
                           f->h, CUDNN_BATCHNORM_SPATIAL, &cudnn_one, &cudnn_zero, &cudnn_one,
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
    gpu_free(f->save_mean);
    gpu_free(f->save_invstd);
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
