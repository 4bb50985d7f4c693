/* Unit tests for worker/nn/cuda/gmodel_host.c, the host half of the GPU model runner (built
 * and run in every configuration, no GPU needed): the convolution weight permutation
 * between the host's (Cout,Cin/G,KH,KW) and cuDNN's (Cout,KH,KW,Cin/G) puts each weight
 * where the other layout indexes it, also for grouped convolutions, and round-trips;
 * over a whole arena it permutes exactly the convolution weights (resnet18-cifar) and
 * copies everything else; gmodel_check admits the zoo at its usual inputs and refuses an
 * adaptive pooling that no ordinary pooling expresses, naming the layer. */
#include <stdlib.h>
#include <string.h>

#include "tests/unit/test.h"
#include "worker/nn/cuda/gmodel_host.h"
#include "worker/nn/models.h"

static void test_gmodel_conv_permutation(void)
{
    /* grouped: cin 6, groups 2 -> 3 input channels per filter */
    struct nn_conv2d_cfg c = {.cin = 6, .cout = 4, .kh = 3, .kw = 2, .groups = 2};
    enum { CI = 3, KH = 3, KW = 2, CO = 4, N = CO * CI * KH * KW };
    float host[N], dev[N], back[N];
    for (int i = 0; i < N; i++)
        host[i] = (float)i;
    gmodel_conv_weight_to_device(dev, host, &c);
    for (int o = 0; o < CO; o++)
        for (int i = 0; i < CI; i++)
            for (int y = 0; y < KH; y++)
                for (int x = 0; x < KW; x++)
                    T_CHECK_MSG(dev[((o * KH + y) * KW + x) * CI + i] ==
                                    host[((o * CI + i) * KH + y) * KW + x],
                                "weight o%d i%d y%d x%d misplaced", o, i, y, x);
    gmodel_conv_weight_to_host(back, dev, &c);
    T_CHECK(memcmp(back, host, sizeof host) == 0);
    /* a 1x1 convolution with one input channel is the identity either way */
    struct nn_conv2d_cfg one = {.cin = 1, .cout = 5, .kh = 1, .kw = 1, .groups = 1};
    gmodel_conv_weight_to_device(dev, host, &one);
    T_CHECK(memcmp(dev, host, 5 * sizeof(float)) == 0);
}

static void test_gmodel_arena_permutation(void)
{
    struct err e = {0};
    struct nn_model m;
    nn_model_init(&m);
    T_OK(nn_models_build(&m, "resnet18-cifar", 3, 32, 32, 10, NULL, &e));
    T_OK(nn_model_init_params(&m, 5, &e));
    size_t n = m.nparams;
    float *dev = malloc(n * sizeof *dev), *back = malloc(n * sizeof *back);
    T_CHECK(dev && back);
    if (!dev || !back)
        goto out;
    gmodel_arena_to_device(&m, dev, m.params.data);
    size_t conv_floats = 0, moved = 0;
    for (int i = 0; i < nn_model_node_count(&m); i++) {
        struct nn_node_info ni;
        nn_model_node_info(&m, i, &ni);
        const float *h = m.params.data + ni.param_off, *d = dev + ni.param_off;
        if (ni.op == NN_OP_CONV) {
            size_t w = nn_conv2d_weight_len(&ni.cfg.conv);
            conv_floats += w;
            for (size_t k = 0; k < w; k++)
                moved += h[k] != d[k];
            /* one spot check: weight (o=1, i=2, y=0, x=1) of a 3x3 layer */
            const struct nn_conv2d_cfg *c = &ni.cfg.conv;
            if (c->kh == 3 && c->cin / c->groups > 2 && c->cout > 1)
                T_CHECK(d[((1 * 3 + 0) * 3 + 1) * (c->cin / c->groups) + 2] ==
                        h[((1 * (c->cin / c->groups) + 2) * 3 + 0) * 3 + 1]);
            T_CHECK_MSG(memcmp(h + w, d + w, (ni.param_len - w) * sizeof(float)) == 0,
                        "%s: the bias moved", ni.name);
        } else if (ni.param_len > 0) {
            T_CHECK_MSG(memcmp(h, d, ni.param_len * sizeof(float)) == 0, "%s moved", ni.name);
        }
    }
    T_CHECK(conv_floats > n / 2); /* resnet18 is mostly convolution weights */
    T_CHECK_MSG(moved > conv_floats / 2, "only %zu of %zu convolution weights moved", moved,
                conv_floats);
    gmodel_arena_to_host(&m, back, dev);
    T_CHECK(memcmp(back, m.params.data, n * sizeof(float)) == 0);
out:
    free(dev);
    free(back);
    nn_model_destroy(&m);
}

static void test_gmodel_check(void)
{
    struct err e = {0};
    struct nn_model m;
    /* the zoo at its usual inputs: adaptive pools that are ordinary poolings */
    const char *ok[][2] = {{"resnet50", "224"},
                           {"alexnet", "224"},
                           {"lenet5", "28"},
                           {"mobilenetv2", "224"},
                           {"resnet18-cifar", "32"}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int hw = atoi(ok[i][1]), c = hw == 28 ? 1 : 3;
        nn_model_init(&m);
        T_OK(nn_models_build(&m, ok[i][0], c, hw, hw, 10, NULL, &e));
        T_CHECK_MSG(gmodel_check(&m, &e) == 0, "%s: %s", ok[i][0], e.msg);
        nn_model_destroy(&m);
    }
    /* alexnet at 64x64 pools a 1x1 map adaptively to 6x6: refused naming the layer */
    nn_model_init(&m);
    T_OK(nn_models_build(&m, "alexnet", 3, 64, 64, 10, NULL, &e));
    T_CHECK(gmodel_check(&m, &e) < 0);
    T_EQ_STR(e.field, "model");
    T_CHECK_MSG(strstr(e.msg, "avgpool") != NULL && strstr(e.msg, "6x6") != NULL, "%s", e.msg);
    nn_model_destroy(&m);
    /* an unfinished model */
    nn_model_init(&m);
    nn_model_input(&m, 1, 4, 4);
    T_CHECK(gmodel_check(&m, &e) < 0);
    nn_model_destroy(&m);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_gmodel_conv_permutation);
    TEST_RUN(test_gmodel_arena_permutation);
    TEST_RUN(test_gmodel_check);
    return test_end();
}
