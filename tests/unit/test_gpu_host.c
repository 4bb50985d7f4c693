/* Unit tests for the GPU code's host-only parts, built in every configuration: NVML loaded
 * at run time is "nvml unavailable" (not an error) where the library is missing or is not
 * NVML, and the daemon then counts 0 GPUs; CUDA_VISIBLE_DEVICES to NVML index; dynamic
 * loss scaling follows PyTorch's GradScaler (skip + halve on inf, double after the growth
 * interval) and fixed scaling never skips. */
#include <stdio.h>
#include <string.h>

#include "common/nvml.h"
#include "tests/unit/test.h"
#include "worker/nn/loss_scale.h"

static void test_nvml_missing_library(void)
{
    char why[256] = "";
    struct gpu_nvml *n = gpu_nvml_open("/nonexistent/libnvidia-ml.so.1", why, sizeof why);
    T_CHECK(n == NULL);
    T_CHECK_MSG(strncmp(why, "nvml unavailable: ", 18) == 0, "why: %s", why);
    T_CHECK(strstr(why, "libnvidia-ml.so.1") != NULL);
    T_EQ_INT(gpu_nvml_detect_count("/nonexistent/libnvidia-ml.so.1", why, sizeof why), 0);
    json_t *j = gpu_nvml_json(NULL, 0, why);
    T_CHECK(j != NULL);
    T_CHECK(strncmp(json_string_value(json_object_get(j, "nvml")), "nvml unavailable", 16) ==
            0);
    json_decref(j);
}

static void test_nvml_not_nvml(void)
{
    /* a library that loads but has no NVML symbols: unavailable, naming the symbol */
    char why[256] = "";
    struct gpu_nvml *n = gpu_nvml_open("libm.so.6", why, sizeof why);
    T_CHECK(n == NULL);
    T_CHECK_MSG(strstr(why, "nvmlInit_v2") != NULL, "why: %s", why);
}

/* The driver's own library: opens and counts where there is one (a GPU machine). */
static void test_nvml_default_library(void)
{
    char why[256] = "";
    struct gpu_nvml *n = gpu_nvml_open(NULL, why, sizeof why);
    if (!n)
        T_SKIP("NVML unavailable here (%s)", why);
    int count = -1;
    struct err e = {0};
    T_OK(gpu_nvml_count(n, &count, &e));
    T_CHECK(count >= 0);
    gpu_nvml_close(n);
}

static void test_nvml_index_from_visible(void)
{
    T_EQ_INT(gpu_nvml_index_from_visible(NULL), 0);
    T_EQ_INT(gpu_nvml_index_from_visible(""), 0);
    T_EQ_INT(gpu_nvml_index_from_visible("3"), 3);
    T_EQ_INT(gpu_nvml_index_from_visible("5,6"), 5);
    T_EQ_INT(gpu_nvml_index_from_visible("GPU-8f2c1a"), 0);
    T_EQ_INT(gpu_nvml_index_from_visible("2x"), 0);
}

static void test_loss_scale_dynamic(void)
{
    struct loss_scale ls;
    loss_scale_init(&ls, true);
    ls.growth_interval = 3;
    struct err e = {0};
    T_OK(loss_scale_validate(&ls, &e));
    T_NEAR(ls.scale, 65536.0, 0);
    T_CHECK(!loss_scale_update(&ls, true)); /* inf: skipped, halved */
    T_NEAR(ls.scale, 32768.0, 0);
    T_CHECK(loss_scale_update(&ls, false));
    T_CHECK(loss_scale_update(&ls, false));
    T_NEAR(ls.scale, 32768.0, 0);
    T_CHECK(loss_scale_update(&ls, false)); /* third good step in a row: doubled */
    T_NEAR(ls.scale, 65536.0, 0);
    T_CHECK(loss_scale_update(&ls, false));
    T_CHECK(!loss_scale_update(&ls, true)); /* an inf resets the streak */
    T_CHECK(loss_scale_update(&ls, false));
    T_CHECK(loss_scale_update(&ls, false));
    T_NEAR(ls.scale, 32768.0, 0);
    T_EQ_INT(ls.skipped, 2);
    T_EQ_INT(ls.applied, 6);
    T_NEAR(loss_scale_inverse(&ls), 1.0 / 32768.0, 0);
    for (int i = 0; i < 400; i++) /* halving stops at a normal float: 1/scale stays finite */
        loss_scale_update(&ls, true);
    T_CHECK(ls.scale > 0 && isfinite(loss_scale_inverse(&ls)));
}

static void test_loss_scale_fixed_and_validation(void)
{
    struct loss_scale ls;
    loss_scale_init(&ls, false);
    T_NEAR(ls.scale, 1.0, 0);
    T_CHECK(loss_scale_update(&ls, true)); /* bf16/fp32: never skipped */
    T_NEAR(ls.scale, 1.0, 0);
    struct err e = {0};
    ls.backoff = 1.5f;
    T_CHECK(loss_scale_validate(&ls, &e) < 0);
    T_EQ_STR(e.field, "backoff");
    loss_scale_init(&ls, true);
    ls.growth_interval = 0;
    T_CHECK(loss_scale_validate(&ls, &e) < 0);
    T_EQ_STR(e.field, "growth_interval");
}

/* The spec's knobs (issue 33): fp16 with loss_scale 0 is dynamic with the window as its
 * growth interval; loss_scale > 0 is static: never changes, still skips a non-finite step;
 * other precisions are unscaled and never skip. */
static void test_loss_scale_configure(void)
{
    struct loss_scale ls;
    loss_scale_configure(&ls, true, 0, 2);
    T_CHECK(ls.dynamic && ls.scaled);
    T_NEAR(ls.scale, 65536.0, 0);
    T_CHECK(loss_scale_update(&ls, false));
    T_CHECK(loss_scale_update(&ls, false)); /* window 2: doubled */
    T_NEAR(ls.scale, 131072.0, 0);
    loss_scale_configure(&ls, true, 512, 2000);
    T_CHECK(!ls.dynamic && ls.scaled);
    T_NEAR(ls.scale, 512.0, 0);
    for (int i = 0; i < 5000; i++)
        T_CHECK(loss_scale_update(&ls, false));
    T_CHECK(!loss_scale_update(&ls, true)); /* skipped, the scale kept */
    T_NEAR(ls.scale, 512.0, 0);
    T_EQ_INT(ls.skipped, 1);
    struct err e = {0};
    T_OK(loss_scale_validate(&ls, &e));
    loss_scale_configure(&ls, false, 0, 2000);
    T_CHECK(!ls.dynamic && !ls.scaled);
    T_NEAR(ls.scale, 1.0, 0);
    T_CHECK(loss_scale_update(&ls, true));
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_nvml_missing_library);
    TEST_RUN(test_nvml_not_nvml);
    TEST_RUN(test_nvml_default_library);
    TEST_RUN(test_nvml_index_from_visible);
    TEST_RUN(test_loss_scale_dynamic);
    TEST_RUN(test_loss_scale_fixed_and_validation);
    TEST_RUN(test_loss_scale_configure);
    return test_end();
}
