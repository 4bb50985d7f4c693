/* Unit tests for worker/nn/cuda/dnn_plan.c, the cuDNN layers' host-side choices (no GPU
 * needed): made-up perf results in, the algorithm and math type out. The pick skips
 * failed candidates, those over the workspace limit and, in strict fp32, tensor-op (TF32)
 * ones, and runs a default-math report as FMA there; fp16/bf16 keep the reported math;
 * the shared workspace grows once to the largest request; the cache tells problems apart
 * by every field of the key; the fused BN+ReLU condition. */
#include <string.h>

#include "tests/unit/test.h"
#include "worker/nn/cuda/dnn_plan.h"

#define MiB ((size_t)1 << 20)

static void test_dnn_plan_query_math(void)
{
    T_EQ_INT(dnn_plan_query_math(DNN_HALF), DNN_MATH_TENSOR_OP);
    T_EQ_INT(dnn_plan_query_math(DNN_FP32), DNN_MATH_FMA);
    T_EQ_INT(dnn_plan_query_math(DNN_FP32_TF32), DNN_MATH_DEFAULT);
    T_EQ_INT(dnn_plan_run_math(DNN_FP32, DNN_MATH_TENSOR_OP), -1);
    T_EQ_INT(dnn_plan_run_math(DNN_FP32, DNN_MATH_TENSOR_OP_CONVERSION), -1);
    T_EQ_INT(dnn_plan_run_math(DNN_FP32, DNN_MATH_DEFAULT), DNN_MATH_FMA);
    T_EQ_INT(dnn_plan_run_math(DNN_FP32_TF32, DNN_MATH_TENSOR_OP), DNN_MATH_TENSOR_OP);
    T_EQ_INT(dnn_plan_run_math(DNN_HALF, DNN_MATH_DEFAULT), DNN_MATH_DEFAULT);
    T_EQ_STR(dnn_plan_math_name(DNN_MATH_FMA), "fma");
}

static void test_dnn_plan_pick(void)
{
    /* ranked as cuDNN returns them: a failed one, one over the limit, a TF32 one, then
     * two that fit */
    const struct dnn_algo_perf c[] = {
        {.algo = 6, .ok = false, .memory = 0, .math = DNN_MATH_FMA},
        {.algo = 4, .ok = true, .memory = 900 * MiB, .math = DNN_MATH_FMA},
        {.algo = 1, .ok = true, .memory = 4 * MiB, .math = DNN_MATH_TENSOR_OP},
        {.algo = 2, .ok = true, .memory = 8 * MiB, .math = DNN_MATH_FMA},
        {.algo = 0, .ok = true, .memory = 0, .math = DNN_MATH_DEFAULT},
    };
    struct dnn_algo_choice ch;
    T_CHECK(0 == dnn_plan_pick(c, 5, 512 * MiB, DNN_FP32, &ch));
    T_EQ_INT(ch.algo, 2); /* not the TF32 one */
    T_EQ_INT(ch.math, DNN_MATH_FMA);
    T_CHECK(ch.memory == 8 * MiB);
    T_CHECK(0 == dnn_plan_pick(c, 5, 512 * MiB, DNN_HALF, &ch));
    T_EQ_INT(ch.algo, 1); /* tensor ops with its math type applied */
    T_EQ_INT(ch.math, DNN_MATH_TENSOR_OP);
    T_CHECK(0 == dnn_plan_pick(c, 5, 1024 * MiB, DNN_HALF, &ch));
    T_EQ_INT(ch.algo, 4); /* the limit is what keeps the first fitting one out */
    T_CHECK(0 == dnn_plan_pick(c, 5, 0, DNN_FP32, &ch));
    T_EQ_INT(ch.algo, 0); /* no workspace: the default-math one, run as FMA */
    T_EQ_INT(ch.math, DNN_MATH_FMA);
    T_CHECK(dnn_plan_pick(c, 3, 512 * MiB, DNN_FP32, &ch) < 0);
    T_CHECK(dnn_plan_pick(c, 0, 512 * MiB, DNN_HALF, &ch) < 0);
}

static void test_dnn_plan_workspace(void)
{
    struct dnn_ws_plan p = {0};
    T_CHECK(dnn_plan_ws_grow(&p) == 0); /* nothing asked: nothing allocated */
    dnn_plan_ws_request(&p, 3 * MiB + 1);
    dnn_plan_ws_request(&p, 1 * MiB);
    dnn_plan_ws_request(&p, 0);
    T_CHECK(p.need == 3 * MiB + 1);
    T_CHECK(dnn_plan_ws_grow(&p) == 4 * MiB); /* the largest, in whole MiB */
    T_CHECK(dnn_plan_ws_grow(&p) == 0);       /* grown once */
    dnn_plan_ws_request(&p, 4 * MiB);         /* fits what is there */
    T_CHECK(dnn_plan_ws_grow(&p) == 0);
    dnn_plan_ws_request(&p, 5 * MiB);
    T_CHECK(dnn_plan_ws_grow(&p) == 5 * MiB);
    T_CHECK(dnn_plan_search_bytes(10 * 1024 * MiB, 512 * MiB) == 512 * MiB);
    T_CHECK(dnn_plan_search_bytes(300 * MiB + 5, 512 * MiB) == 150 * MiB);
    T_CHECK(dnn_plan_search_bytes(1 * MiB, 512 * MiB) == 0);
}

static void test_dnn_plan_cache(void)
{
    struct err e = {0};
    struct dnn_algo_cache c = {0};
    struct nn_conv2d_cfg cfg = nn_conv2d_square(64, 64, 3, 1, 1, 1, 0);
    struct nn_shape in = {.ndims = 4, .n = 32, .c = 64, .h = 56, .w = 56};
    struct dnn_conv_key k, kother;
    struct dnn_algo_choice v = {.algo = 1, .math = DNN_MATH_TENSOR_OP, .memory = MiB}, got;
    dnn_plan_conv_key(&k, DNN_CONV_FWD, &cfg, in, DNN_HALF, 1);
    T_CHECK(!dnn_plan_cache_find(&c, &k, &got));
    T_OK(dnn_plan_cache_put(&c, &k, &v, &e));
    T_CHECK(dnn_plan_cache_find(&c, &k, &got));
    T_EQ_INT(got.algo, 1);
    T_EQ_INT(got.math, DNN_MATH_TENSOR_OP);
    /* any field that makes another problem is another entry */
    dnn_plan_conv_key(&kother, DNN_CONV_BWD_DATA, &cfg, in, DNN_HALF, 1);
    T_CHECK(!dnn_plan_cache_find(&c, &kother, &got));
    dnn_plan_conv_key(&kother, DNN_CONV_FWD, &cfg, in, DNN_FP32, 0);
    T_CHECK(!dnn_plan_cache_find(&c, &kother, &got));
    dnn_plan_conv_key(&kother, DNN_CONV_FWD, &cfg, in, DNN_HALF, 2); /* bf16, not fp16 */
    T_CHECK(!dnn_plan_cache_find(&c, &kother, &got));
    struct nn_conv2d_cfg strided = cfg;
    strided.sh = strided.sw = 2;
    dnn_plan_conv_key(&kother, DNN_CONV_FWD, &strided, in, DNN_HALF, 1);
    T_CHECK(!dnn_plan_cache_find(&c, &kother, &got));
    in.n = 64;
    dnn_plan_conv_key(&kother, DNN_CONV_FWD, &cfg, in, DNN_HALF, 1);
    T_CHECK(!dnn_plan_cache_find(&c, &kother, &got));
    /* many entries (growth), each found with its own value; a put replaces */
    for (int i = 0; i < 40; i++) {
        in.n = 100 + i;
        dnn_plan_conv_key(&kother, DNN_CONV_BWD_FILTER, &cfg, in, DNN_HALF, 1);
        struct dnn_algo_choice vi = {.algo = i, .math = DNN_MATH_DEFAULT};
        T_OK(dnn_plan_cache_put(&c, &kother, &vi, &e));
    }
    T_EQ_INT(c.n, 41);
    in.n = 117;
    dnn_plan_conv_key(&kother, DNN_CONV_BWD_FILTER, &cfg, in, DNN_HALF, 1);
    T_CHECK(dnn_plan_cache_find(&c, &kother, &got));
    T_EQ_INT(got.algo, 17);
    v.algo = 5;
    T_OK(dnn_plan_cache_put(&c, &k, &v, &e));
    T_EQ_INT(c.n, 41);
    T_CHECK(dnn_plan_cache_find(&c, &k, &got));
    T_EQ_INT(got.algo, 5);
    dnn_plan_cache_free(&c);
    T_EQ_INT(c.n, 0);
}

static void test_dnn_plan_bn_fused(void)
{
    struct nn_shape s = {.ndims = 4, .n = 8, .c = 64, .h = 7, .w = 7};
    T_CHECK(dnn_plan_bn_fused(DNN_HALF, true, s));
    T_CHECK(!dnn_plan_bn_fused(DNN_HALF, false, s)); /* no ReLU: nothing to fuse */
    T_CHECK(!dnn_plan_bn_fused(DNN_FP32, true, s));
    T_CHECK(!dnn_plan_bn_fused(DNN_FP32_TF32, true, s));
    s.c = 6;
    T_CHECK(!dnn_plan_bn_fused(DNN_HALF, true, s));
    s.c = 64;
    s.ndims = 2;
    T_CHECK(!dnn_plan_bn_fused(DNN_HALF, true, s));
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_dnn_plan_query_math);
    TEST_RUN(test_dnn_plan_pick);
    TEST_RUN(test_dnn_plan_workspace);
    TEST_RUN(test_dnn_plan_cache);
    TEST_RUN(test_dnn_plan_bn_fused);
    return test_end();
}
