/* dnn_plan: the cuDNN layers' host-side choices (dnn_plan.h): algorithm and math type,
 * the shared workspace's size, the benchmark cache, the fused batch-norm condition.
 *
 * Decision: plain C over value structs, so the logic the device path relies on is tested
 * with made-up perf results on any machine; cudnn_layers.c only converts cuDNN's structs
 * into these and back. */
#include "worker/nn/cuda/dnn_plan.h"

#include <stdlib.h>
#include <string.h>

const char *dnn_plan_math_name(enum dnn_math m)
{
    switch (m) {
    case DNN_MATH_DEFAULT: return "default";
    case DNN_MATH_TENSOR_OP: return "tensor_op";
    case DNN_MATH_TENSOR_OP_CONVERSION: return "tensor_op_allow_conversion";
    case DNN_MATH_FMA: return "fma";
    }
    return "?";
}

enum dnn_math dnn_plan_query_math(enum dnn_precision p)
{
    switch (p) {
    case DNN_HALF: return DNN_MATH_TENSOR_OP;
    case DNN_FP32_TF32: return DNN_MATH_DEFAULT;
    case DNN_FP32: break;
    }
    return DNN_MATH_FMA;
}

int dnn_plan_run_math(enum dnn_precision p, enum dnn_math reported)
{
    if (p != DNN_FP32)
        return (int)reported;
    /* strict fp32: FMA only; a default-math report is run as FMA, where cuDNN's default
     * would let TF32 in; tensor-op math is TF32 and is not run */
    return reported == DNN_MATH_FMA || reported == DNN_MATH_DEFAULT ? (int)DNN_MATH_FMA : -1;
}

int dnn_plan_pick(const struct dnn_algo_perf *c, int n, size_t ws_limit, enum dnn_precision p,
                  struct dnn_algo_choice *out)
{
    for (int i = 0; i < n; i++) {
        int math = dnn_plan_run_math(p, c[i].math);
        if (!c[i].ok || c[i].memory > ws_limit || math < 0)
            continue;
        *out = (struct dnn_algo_choice){
            .algo = c[i].algo, .math = (enum dnn_math)math, .memory = c[i].memory};
        return 0;
    }
    return -1;
}

/* ---- workspace -------------------------------------------------------------------------- */

void dnn_plan_ws_request(struct dnn_ws_plan *p, size_t bytes)
{
    if (bytes > p->need)
        p->need = bytes;
}

size_t dnn_plan_ws_grow(struct dnn_ws_plan *p)
{
    if (p->need <= p->have)
        return 0;
    p->have = (p->need + DNN_WS_ROUND - 1) / DNN_WS_ROUND * DNN_WS_ROUND;
    return p->have;
}

size_t dnn_plan_search_bytes(size_t free_bytes, size_t limit)
{
    size_t b = free_bytes / 2 < limit ? free_bytes / 2 : limit;
    return b / DNN_WS_ROUND * DNN_WS_ROUND;
}

/* ---- cache ------------------------------------------------------------------------------ */

void dnn_plan_conv_key(struct dnn_conv_key *k, enum dnn_conv_dir dir,
                       const struct nn_conv2d_cfg *c, struct nn_shape in, enum dnn_precision p,
                       int dtype)
{
    int v[DNN_KEY_INTS] = {(int)dir, in.n,  in.c,      in.h,   in.w,  c->cout,
                           c->kh,    c->kw, c->sh,     c->sw,  c->ph, c->pw,
                           c->dh,    c->dw, c->groups, (int)p, dtype};
    memcpy(k->v, v, sizeof v);
}

static int dnn_plan_cache_index(const struct dnn_algo_cache *c, const struct dnn_conv_key *k)
{
    for (int i = 0; i < c->n; i++)
        if (memcmp(c->keys[i].v, k->v, sizeof k->v) == 0)
            return i;
    return -1;
}

bool dnn_plan_cache_find(const struct dnn_algo_cache *c, const struct dnn_conv_key *k,
                         struct dnn_algo_choice *out)
{
    int i = dnn_plan_cache_index(c, k);
    if (i < 0)
        return false;
    *out = c->vals[i];
    return true;
}

int dnn_plan_cache_put(struct dnn_algo_cache *c, const struct dnn_conv_key *k,
                       const struct dnn_algo_choice *v, struct err *e)
{
    int i = dnn_plan_cache_index(c, k);
    if (i < 0) {
        if (c->n == c->cap) {
            int cap = c->cap ? c->cap * 2 : 16;
            struct dnn_conv_key *keys = realloc(c->keys, (size_t)cap * sizeof *keys);
            if (keys)
                c->keys = keys;
            struct dnn_algo_choice *vals = keys ? realloc(c->vals, (size_t)cap * sizeof *vals)
                                                : NULL;
            if (!vals)
                return err_set(e, ERR_NOMEM, NULL, "cuDNN algorithm cache of %d entries", cap);
            c->vals = vals;
            c->cap = cap;
        }
        i = c->n++;
        c->keys[i] = *k;
    }
    c->vals[i] = *v;
    return 0;
}

void dnn_plan_cache_free(struct dnn_algo_cache *c)
{
    free(c->keys);
    free(c->vals);
    memset(c, 0, sizeof *c);
}

/* ---- batch norm ------------------------------------------------------------------------- */

bool dnn_plan_bn_fused(enum dnn_precision p, bool relu, struct nn_shape s)
{
    return relu && p == DNN_HALF && s.ndims == 4 && s.c % 4 == 0;
}
