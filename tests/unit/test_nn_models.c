/* Unit tests for worker/nn/models: every zoo model's parameter count against PyTorch's for
 * the same input shape and classes, and one forward pass of each on the oneDNN path with
 * finite outputs of the right shape.
 *
 * The reference counts were computed once with Debian's python3-torch 1.13 on the same
 * architectures written as torchvision writes them (torchvision is not packaged there):
 *   sum(p.numel() for p in model.parameters())
 * with the definitions of tests/bench/nn_bench_torch.py (`nn_bench_torch.py MODEL 1 1
 * --shape C,H,W --classes K --count`). The ImageNet ones equal torchvision's published
 * numbers (resnet18 11,689,512; resnet50 25,557,032; vgg16 138,357,544; mobilenet_v2
 * 3,504,872; alexnet 61,100,840). Every row of common/model_table.h is built at its usual
 * input and its parameter count compared with the table's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/model_table.h"
#include "tests/unit/test.h"
#include "worker/nn/model.h"
#include "worker/nn/models.h"

struct zoo_case {
    const char *name;
    int c, h, w, classes;
    size_t params;
};

static const struct zoo_case zoo_cases[] = {
    {"mnist-cnn", 1, 28, 28, 10, 21840},
    {"mnist-cnn", 3, 32, 32, 10, 31340},
    {"lenet5", 1, 28, 28, 10, 61706},
    {"lenet5", 3, 32, 32, 10, 83126},
    {"alexnet", 3, 224, 224, 1000, 61100840},
    {"alexnet", 3, 64, 64, 10, 57044810},
    {"alexnet-cifar", 3, 32, 32, 10, 2472266},
    {"vgg16", 3, 224, 224, 1000, 138357544},
    {"vgg16", 3, 32, 32, 10, 134301514},
    {"resnet18", 3, 224, 224, 1000, 11689512},
    {"resnet18", 3, 32, 32, 10, 11181642},
    {"resnet18-cifar", 3, 32, 32, 10, 11173962},
    {"resnet50", 3, 224, 224, 1000, 25557032},
    {"resnet50", 3, 32, 32, 10, 23528522},
    {"mobilenetv2", 3, 224, 224, 1000, 3504872},
    {"mobilenetv2", 3, 32, 32, 10, 2236682},
};

static void test_models_param_counts(void)
{
    struct err e;
    for (size_t i = 0; i < sizeof zoo_cases / sizeof *zoo_cases; i++) {
        const struct zoo_case *z = &zoo_cases[i];
        struct nn_model m;
        nn_model_init(&m);
        int rc = nn_models_build(&m, z->name, z->c, z->h, z->w, z->classes, NULL, &e);
        size_t got = nn_model_param_count(&m);
        nn_model_destroy(&m);
        T_CHECK_MSG(rc == 0, "%s: %s", z->name, e.msg);
        T_CHECK_MSG(got == z->params, "%s %dx%dx%d: %zu parameters, PyTorch has %zu", z->name,
                    z->c, z->h, z->w, got, z->params);
    }
}

/* The zoo builds exactly the models of common/model_table.h, in its order, and each row's
 * parameter count is what the built model has at the row's shape and classes. */
static void test_models_table_rows(void)
{
    struct err e;
    T_EQ_INT((int)nn_models_count(), (int)model_table_count());
    T_CHECK(nn_models_name_at(nn_models_count()) == NULL);
    T_CHECK(model_table_at(model_table_count()) == NULL);
    for (size_t i = 0; i < model_table_count(); i++) {
        const struct model_info *mi = model_table_at(i);
        T_CHECK_MSG(nn_models_name_at(i) && !strcmp(nn_models_name_at(i), mi->name),
                    "row %zu: table %s, zoo %s", i, mi->name,
                    nn_models_name_at(i) ? nn_models_name_at(i) : "(none)");
        T_CHECK(model_table_find(mi->name) == mi);
        T_CHECK_MSG(mi->desc && mi->desc[0], "%s has no description", mi->name);
        struct nn_model m;
        nn_model_init(&m);
        int rc = nn_models_build(&m, mi->name, mi->c, mi->h, mi->w, mi->classes, NULL, &e);
        size_t got = nn_model_param_count(&m);
        int classes = nn_model_classes(&m);
        nn_model_destroy(&m);
        T_CHECK_MSG(rc == 0, "%s: %s", mi->name, e.msg);
        T_CHECK_MSG((int64_t)got == mi->params,
                    "%s %dx%dx%d: %zu parameters, the table says "
                    "%lld",
                    mi->name, mi->c, mi->h, mi->w, got, (long long)mi->params);
        T_EQ_INT(classes, mi->classes);
    }
    T_CHECK(model_table_find("resnet1000") == NULL);
    T_CHECK(model_table_find(NULL) == NULL);
}

/* Floats of every tensor of one sample (the input and each layer's output). */
static double models_act_floats(const struct nn_model *m)
{
    double sum = 0;
    for (int t = 0; t < m->ntensors; t++)
        sum += (double)nn_shape_sample(nn_model_tensor_shape(m, t));
    return sum;
}

/* What the spec's memory estimate reads from the table: the parameter count at another
 * shape and class count equals PyTorch's at every zoo case; the activation floats are the
 * built model's at the row's shape and at 16 times its side, and within -15 % / +20 % of
 * them at half, twice and four times the side (the estimate interpolates by area), where
 * the parameter estimate stays within 2 %. */
static void test_models_estimates(void)
{
    struct err e;
    for (size_t i = 0; i < sizeof zoo_cases / sizeof *zoo_cases; i++) {
        const struct zoo_case *z = &zoo_cases[i];
        const struct model_info *mi = model_table_find(z->name);
        T_CHECK(mi != NULL);
        double est = model_table_params(mi, z->c, z->h, z->w, z->classes);
        T_CHECK_MSG(est == (double)z->params, "%s %dx%dx%d/%d: estimate %.0f, PyTorch %zu",
                    z->name, z->c, z->h, z->w, z->classes, est, z->params);
    }
    for (size_t i = 0; i < model_table_count(); i++) {
        const struct model_info *mi = model_table_at(i);
        static const int times4[] = {4, 64, 8, 2, 16}; /* side x 1, x 16, x 2, x 1/2, x 4 */
        for (int scale = 0; scale < 5; scale++) {
            int side = mi->h * times4[scale] / 4;
            if (side < 28)
                continue; /* below what the CIFAR and MNIST forms take */
            struct nn_model m;
            nn_model_init(&m);
            int rc = nn_models_build(&m, mi->name, mi->c, side, side, mi->classes, NULL, &e);
            double got = models_act_floats(&m), params = (double)nn_model_param_count(&m);
            nn_model_destroy(&m);
            T_CHECK_MSG(rc == 0, "%s at %d: %s", mi->name, side, e.msg);
            double est = model_table_activations(mi, mi->c, side, side);
            if (scale < 2) {
                T_CHECK_MSG(fabs(est - got) < 0.5,
                            "%s at %d: %.0f activation floats, the "
                            "table gives %.0f",
                            mi->name, side, got, est);
            } else {
                T_CHECK_MSG(est >= 0.85 * got && est <= 1.2 * got,
                            "%s at %d: %.0f activation "
                            "floats, estimate %.0f",
                            mi->name, side, got, est);
                double pe = model_table_params(mi, mi->c, side, side, mi->classes);
                T_CHECK_MSG(fabs(pe - params) <= 0.02 * params,
                            "%s at %d: %.0f parameters, "
                            "estimate %.0f",
                            mi->name, side, params, pe);
            }
        }
    }
}

static void test_models_errors(void)
{
    struct err e;
    struct nn_model m;
    nn_model_init(&m);
    T_CHECK(nn_models_build(&m, "resnet1000", 3, 32, 32, 10, NULL, &e) != 0);
    T_EQ_INT(e.code, ERR_INVALID);
    T_CHECK(strstr(e.msg, "resnet1000") != NULL);
    nn_model_destroy(&m);
    /* ImageNet AlexNet cannot take a CIFAR image: a clear error, not a crash */
    nn_model_init(&m);
    T_CHECK(nn_models_build(&m, "alexnet", 3, 32, 32, 10, NULL, &e) != 0);
    T_EQ_INT(e.code, ERR_INVALID);
    T_CHECK(strstr(e.msg, "alexnet") != NULL);
    nn_model_destroy(&m);
    nn_model_init(&m);
    T_CHECK(nn_models_build(&m, "mnist-cnn", 1, 28, 28, 0, NULL, &e) != 0);
    nn_model_destroy(&m);
}

/* torchvision's ResNet init: conv weights N(0, 2/fan_out), BN (1, 0); zero_init_residual
 * zeroes each block's last BN weight. */
static void test_models_resnet_init(void)
{
    struct err e;
    struct nn_model m;
    nn_model_init(&m);
    struct nn_zoo_opts o = {.zero_init_residual = 1};
    T_OK(nn_models_build(&m, "resnet18-cifar", 3, 32, 32, 10, &o, &e));
    T_OK(nn_model_init_params(&m, 5, &e));
    int zeroed = 0;
    for (int i = 0; i < m.nparam_tensors; i++) {
        const struct nn_param *p = &m.param_info[i];
        const float *w = m.params.data + p->offset;
        if (strstr(p->name, "layer2.0.conv1.weight")) { /* 128x64x3x3, fan_out 1152 */
            double s = 0;
            for (size_t k = 0; k < p->len; k++)
                s += (double)w[k] * w[k];
            double std = sqrt(s / (double)p->len);
            T_CHECK_MSG(fabs(std - sqrt(2.0 / 1152)) < 0.05 * sqrt(2.0 / 1152), "std %g", std);
        }
        if (strstr(p->name, ".bn2.weight")) {
            T_CHECK(w[0] == 0 && w[p->len - 1] == 0);
            zeroed++;
        }
        if (!strcmp(p->name, "bn1.weight"))
            T_CHECK(w[0] == 1);
    }
    T_EQ_INT(zeroed, 8);
    nn_model_destroy(&m);
}

/* Each model's forward on the fast path at a small input: right shape, finite values. */
static void test_models_forward_all(void)
{
    static const struct zoo_case small[] = {
        {"mnist-cnn", 1, 28, 28, 10, 0},      {"lenet5", 1, 28, 28, 10, 0},
        {"alexnet", 3, 64, 64, 10, 0},        {"alexnet-cifar", 3, 32, 32, 10, 0},
        {"vgg16", 3, 32, 32, 10, 0},          {"resnet18", 3, 32, 32, 10, 0},
        {"resnet18-cifar", 3, 32, 32, 10, 0}, {"resnet50", 3, 32, 32, 10, 0},
        {"mobilenetv2", 3, 32, 32, 10, 0},
    };
    struct err e;
    for (size_t i = 0; i < sizeof small / sizeof *small; i++) {
        const struct zoo_case *z = &small[i];
        struct nn_model m;
        nn_model_init(&m);
        int batch = 2;
        size_t n = (size_t)batch * z->c * z->h * z->w;
        float *x = malloc(n * sizeof *x);
        struct nn_rng r;
        nn_rng_seed(&r, 1);
        nn_rng_fill_normal(&r, x, n, 0, 1);
        int rc = nn_models_build(&m, z->name, z->c, z->h, z->w, z->classes, NULL, &e) ||
                 nn_model_init_params(&m, 1, &e) ||
                 nn_model_prepare(&m, batch, NN_BACKEND_FAST, 0, &e) ||
                 nn_model_forward(&m, x, 0, 0, &e);
        int finite = 1;
        if (rc == 0) {
            const float *y = nn_model_output(&m);
            for (int k = 0; k < batch * z->classes; k++)
                finite &= isfinite(y[k]) != 0;
        }
        int classes = nn_model_classes(&m);
        nn_model_destroy(&m);
        free(x);
        T_CHECK_MSG(rc == 0, "%s: %s", z->name, e.msg);
        T_CHECK_MSG(finite, "%s: non-finite logits", z->name);
        T_EQ_INT(classes, z->classes);
    }
}

/* The reference backend and oneDNN agree on whole zoo networks (evaluation mode, running
 * statistics perturbed away from (0, 1) so batch norm matters): BasicBlocks with
 * downsampling, Bottlenecks, inverted residuals with depthwise convolutions and ReLU6. The
 * logits pass through ~20-50 layers of float rounding: 1e-3 of their scale. */
static void test_models_backends_agree(void)
{
    static const struct zoo_case nets[] = {
        /* 16x16 inputs keep the reference's loops quick under the sanitizers */
        {"resnet18", 3, 16, 16, 10, 0},
        {"resnet50", 3, 16, 16, 10, 0},
        {"mobilenetv2", 3, 16, 16, 10, 0},
    };
    struct err e;
    for (size_t i = 0; i < sizeof nets / sizeof *nets; i++) {
        const struct zoo_case *z = &nets[i];
        struct nn_model a, b;
        nn_model_init(&a);
        nn_model_init(&b);
        size_t n = (size_t)z->c * z->h * z->w;
        float *x = malloc(n * sizeof *x), ya[10], yb[10];
        struct nn_rng r;
        nn_rng_seed(&r, 5);
        nn_rng_fill_normal(&r, x, n, 0, 1);
        int rc = nn_models_build(&a, z->name, z->c, z->h, z->w, 10, NULL, &e) ||
                 nn_models_build(&b, z->name, z->c, z->h, z->w, 10, NULL, &e) ||
                 nn_model_init_params(&a, 3, &e) || nn_model_init_params(&b, 3, &e);
        if (rc == 0) {
            for (size_t k = 0; k < a.nbuffers; k++) /* running mean, var: 0.1 .. 1.1 */
                a.buffers.data[k] = b.buffers.data[k] = 0.1f + (float)nn_rng_uniform(&r);
            rc = nn_model_prepare(&a, 1, NN_BACKEND_REF, 0, &e) ||
                 nn_model_prepare(&b, 1, NN_BACKEND_FAST, 0, &e) ||
                 nn_model_forward(&a, x, 0, 0, &e) || nn_model_forward(&b, x, 0, 0, &e);
        }
        double scale = 0, worst = 0;
        if (rc == 0) {
            memcpy(ya, nn_model_output(&a), sizeof ya);
            memcpy(yb, nn_model_output(&b), sizeof yb);
            for (int k = 0; k < 10; k++) {
                scale = fmax(scale, fabs(ya[k]));
                worst = fmax(worst, fabs(ya[k] - yb[k]));
            }
        }
        nn_model_destroy(&a);
        nn_model_destroy(&b);
        free(x);
        T_CHECK_MSG(rc == 0, "%s: %s", z->name, e.msg);
        T_CHECK_MSG(scale > 0 && worst <= 1e-3 * scale, "%s: logits differ by %g of %g",
                    z->name, worst, scale);
    }
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_models_param_counts);
    TEST_RUN(test_models_table_rows);
    TEST_RUN(test_models_estimates);
    TEST_RUN(test_models_errors);
    TEST_RUN(test_models_resnet_init);
    TEST_RUN(test_models_forward_all);
    TEST_RUN(test_models_backends_agree);
    return test_end();
}
