/* models: the zoo (see models.h). Each network is written the way its PyTorch source reads,
 * module by module with torchvision's names, so parameter order and names match
 * state_dict()'s. Key decision: BN -> ReLU pairs are built as one batch-norm node with the
 * ReLU fused (model.h), and a residual block's final ReLU is fused into its add; the
 * arithmetic is the same as PyTorch's separate modules. */
#include "worker/nn/models.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- building blocks ---------------------------------------------------------------- */

static int zoo_conv(struct nn_model *m, const char *name, int x, int cout, int k, int s, int p,
                    int groups, int bias)
{
    if (x < 0)
        return -1;
    struct nn_conv2d_cfg c = nn_conv2d_square(nn_model_tensor_shape(m, x).c, cout, k, s, p,
                                              groups, bias);
    return nn_model_conv2d(m, name, x, &c);
}

/* A kh x kw kernel with padding (ph, pw), no bias: Inception's 1x7, 7x1, 1x3 and 3x1. */
static int zoo_conv_k(struct nn_model *m, const char *name, int x, int cout, int kh, int kw,
                      int s, int ph, int pw)
{
    if (x < 0)
        return -1;
    struct nn_conv2d_cfg c = nn_conv2d_square(nn_model_tensor_shape(m, x).c, cout, kh, s, ph, 1,
                                              0);
    c.kw = kw;
    c.pw = pw;
    return nn_model_conv2d(m, name, x, &c);
}

static int zoo_channels(struct nn_model *m, int x)
{
    return x < 0 ? 0 : nn_model_tensor_shape(m, x).c;
}

/* "prefix.suffix" into buf */
static const char *zoo_name(char *buf, size_t cap, const char *prefix, const char *suffix)
{
    snprintf(buf, cap, "%s.%s", prefix, suffix);
    return buf;
}

/* conv -> relu pairs and max pools of VGG / AlexNet "features", numbered as nn.Sequential
 * numbers them; *idx is the next module index. */
static int zoo_conv_relu(struct nn_model *m, int x, int *idx, int cout, int k, int s, int p)
{
    char name[48];
    snprintf(name, sizeof name, "features.%d", (*idx)++);
    x = zoo_conv(m, name, x, cout, k, s, p, 1, 1);
    snprintf(name, sizeof name, "features.%d", (*idx)++);
    return nn_model_act(m, name, x, NN_ACT_RELU);
}

static int zoo_maxpool(struct nn_model *m, int x, int *idx, int k, int s)
{
    char name[48];
    snprintf(name, sizeof name, "features.%d", (*idx)++);
    return nn_model_maxpool(m, name, x, k, s, 0);
}

/* ---- mnist-cnn, lenet5 ---------------------------------------------------------------- */

static int zoo_mnist_cnn(struct nn_model *m, int x, int classes)
{
    x = zoo_conv(m, "conv1", x, 10, 5, 1, 0, 1, 1);
    x = nn_model_maxpool(m, "pool1", x, 2, 2, 0);
    x = nn_model_act(m, "relu1", x, NN_ACT_RELU);
    x = zoo_conv(m, "conv2", x, 20, 5, 1, 0, 1, 1);
    x = nn_model_dropout(m, "conv2_drop", x, 0.5f, 1);
    x = nn_model_maxpool(m, "pool2", x, 2, 2, 0);
    x = nn_model_act(m, "relu2", x, NN_ACT_RELU);
    x = nn_model_flatten(m, "flatten", x);
    x = nn_model_linear(m, "fc1", x, 50, 1);
    x = nn_model_act(m, "relu3", x, NN_ACT_RELU);
    x = nn_model_dropout(m, "dropout", x, 0.5f, 0);
    return nn_model_linear(m, "fc2", x, classes, 1);
}

/* LeNet-5's layers: conv 6 5x5 (padded pad1), relu, max pool 2, conv 16 5x5, relu, max
 * pool 2, fc 120, relu, fc 84, relu, fc classes. The PyTorch tutorials pad the first
 * convolution by 2 for 28x28 MNIST (lenet5); the CIFAR tutorial's Net, which DeepSpeed's
 * CIFAR example trains, does not (deepspeed-cifar-net). */
static int zoo_lenet(struct nn_model *m, int x, int classes, int pad1)
{
    x = zoo_conv(m, "conv1", x, 6, 5, 1, pad1, 1, 1);
    x = nn_model_act(m, "relu1", x, NN_ACT_RELU);
    x = nn_model_maxpool(m, "pool1", x, 2, 2, 0);
    x = zoo_conv(m, "conv2", x, 16, 5, 1, 0, 1, 1);
    x = nn_model_act(m, "relu2", x, NN_ACT_RELU);
    x = nn_model_maxpool(m, "pool2", x, 2, 2, 0);
    x = nn_model_flatten(m, "flatten", x);
    x = nn_model_linear(m, "fc1", x, 120, 1);
    x = nn_model_act(m, "relu3", x, NN_ACT_RELU);
    x = nn_model_linear(m, "fc2", x, 84, 1);
    x = nn_model_act(m, "relu4", x, NN_ACT_RELU);
    return nn_model_linear(m, "fc3", x, classes, 1);
}

static int zoo_lenet5(struct nn_model *m, int x, int classes)
{
    return zoo_lenet(m, x, classes, 2);
}

/* ---- AlexNet, VGG ------------------------------------------------------------------- */

/* classifier of AlexNet (dropout first) and VGG (dropout after each relu) */
static int zoo_classifier_4096(struct nn_model *m, int x, int classes, int dropout_first)
{
    x = nn_model_flatten(m, "flatten", x);
    int i = 0;
    char name[48];
    for (int layer = 0; layer < 2; layer++) {
        if (dropout_first) {
            snprintf(name, sizeof name, "classifier.%d", i++);
            x = nn_model_dropout(m, name, x, 0.5f, 0);
        }
        snprintf(name, sizeof name, "classifier.%d", i++);
        x = nn_model_linear(m, name, x, 4096, 1);
        snprintf(name, sizeof name, "classifier.%d", i++);
        x = nn_model_act(m, name, x, NN_ACT_RELU);
        if (!dropout_first) {
            snprintf(name, sizeof name, "classifier.%d", i++);
            x = nn_model_dropout(m, name, x, 0.5f, 0);
        }
    }
    snprintf(name, sizeof name, "classifier.%d", i);
    return nn_model_linear(m, name, x, classes, 1);
}

/* AlexNet's five convolutions and three max pools; torchvision pads the 11x11/4 stem by 2
 * and pools 3x3/2, the CIFAR variant pads by 5 and pools 2x2/2 */
static int zoo_alexnet_features(struct nn_model *m, int x, int stem_pad, int pool)
{
    int i = 0;
    x = zoo_conv_relu(m, x, &i, 64, 11, 4, stem_pad);
    x = zoo_maxpool(m, x, &i, pool, 2);
    x = zoo_conv_relu(m, x, &i, 192, 5, 1, 2);
    x = zoo_maxpool(m, x, &i, pool, 2);
    x = zoo_conv_relu(m, x, &i, 384, 3, 1, 1);
    x = zoo_conv_relu(m, x, &i, 256, 3, 1, 1);
    x = zoo_conv_relu(m, x, &i, 256, 3, 1, 1);
    return zoo_maxpool(m, x, &i, pool, 2);
}

static int zoo_alexnet(struct nn_model *m, int x, int classes)
{
    x = zoo_alexnet_features(m, x, 2, 3);
    x = nn_model_adaptive_avgpool(m, "avgpool", x, 6, 6);
    return zoo_classifier_4096(m, x, classes, 1);
}

static int zoo_alexnet_cifar(struct nn_model *m, int x, int classes)
{
    x = zoo_alexnet_features(m, x, 5, 2);
    x = nn_model_flatten(m, "flatten", x);
    return nn_model_linear(m, "classifier", x, classes, 1);
}

/* VGG's configurations as torchvision's cfgs "A" (VGG-11) and "D" (VGG-16) write them:
 * output channels of each 3x3 convolution, 0 for a 2x2 max pool; VGG_END ends a list */
#define VGG_END (-1)
static const int vgg_cfg_a[] = {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0, VGG_END};
static const int vgg_cfg_d[] = {64,  64,  0,   128, 128, 0,   256, 256, 256,    0,
                                512, 512, 512, 0,   512, 512, 512, 0,   VGG_END};

/* torchvision's make_layers: "features" of conv (-> BN when bn) -> ReLU and max pools,
 * numbered as the nn.Sequential numbers them; with BN the ReLU is fused into it and keeps
 * its index */
static int zoo_vgg_features(struct nn_model *m, int x, const int *cfg, int bn)
{
    int i = 0;
    char name[48];
    for (; *cfg != VGG_END; cfg++) {
        if (*cfg == 0) {
            x = zoo_maxpool(m, x, &i, 2, 2);
        } else if (!bn) {
            x = zoo_conv_relu(m, x, &i, *cfg, 3, 1, 1);
        } else {
            snprintf(name, sizeof name, "features.%d", i++);
            x = zoo_conv(m, name, x, *cfg, 3, 1, 1, 1, 1);
            snprintf(name, sizeof name, "features.%d", i);
            x = nn_model_batchnorm(m, name, x, 1);
            i += 2; /* the BN and its ReLU */
        }
    }
    return x;
}

static int zoo_vgg(struct nn_model *m, int x, int classes, const int *cfg)
{
    x = zoo_vgg_features(m, x, cfg, 0);
    x = nn_model_adaptive_avgpool(m, "avgpool", x, 7, 7);
    return zoo_classifier_4096(m, x, classes, 0);
}

static int zoo_vgg11(struct nn_model *m, int x, int classes)
{
    return zoo_vgg(m, x, classes, vgg_cfg_a);
}

static int zoo_vgg16(struct nn_model *m, int x, int classes)
{
    return zoo_vgg(m, x, classes, vgg_cfg_d);
}

/* kuangliu/pytorch-cifar's VGG('VGG16') (DDLBench's): conv -> BN -> ReLU, five max pools
 * and one linear layer 512 -> classes (its AvgPool2d(1, 1) is the identity, left out); at
 * other sides than 32 the linear layer reads 512 (side/32)^2 features */
static int zoo_vgg16_cifar(struct nn_model *m, int x, int classes)
{
    x = zoo_vgg_features(m, x, vgg_cfg_d, 1);
    x = nn_model_flatten(m, "flatten", x);
    return nn_model_linear(m, "classifier", x, classes, 1);
}

/* ---- ResNet ------------------------------------------------------------------------- */

/* the downsample branch when the block changes stride or width, else the identity */
static int zoo_shortcut(struct nn_model *m, const char *prefix, int x, int cout, int stride)
{
    char name[64];
    if (stride == 1 && zoo_channels(m, x) == cout)
        return x;
    int y = zoo_conv(m, zoo_name(name, sizeof name, prefix, "downsample.0"), x, cout, 1, stride,
                     0, 1, 0);
    return nn_model_batchnorm(m, zoo_name(name, sizeof name, prefix, "downsample.1"), y, 0);
}

static int zoo_basic_block(struct nn_model *m, const char *prefix, int x, int planes,
                           int stride)
{
    char name[64];
    int y = zoo_conv(m, zoo_name(name, sizeof name, prefix, "conv1"), x, planes, 3, stride, 1,
                     1, 0);
    y = nn_model_batchnorm(m, zoo_name(name, sizeof name, prefix, "bn1"), y, 1);
    y = zoo_conv(m, zoo_name(name, sizeof name, prefix, "conv2"), y, planes, 3, 1, 1, 1, 0);
    y = nn_model_batchnorm(m, zoo_name(name, sizeof name, prefix, "bn2"), y, 0);
    int sc = x < 0 ? -1 : zoo_shortcut(m, prefix, x, planes, stride);
    return nn_model_add(m, zoo_name(name, sizeof name, prefix, "add"), y, sc, 1);
}

static int zoo_bottleneck(struct nn_model *m, const char *prefix, int x, int planes, int stride)
{
    char name[64];
    int y = zoo_conv(m, zoo_name(name, sizeof name, prefix, "conv1"), x, planes, 1, 1, 0, 1, 0);
    y = nn_model_batchnorm(m, zoo_name(name, sizeof name, prefix, "bn1"), y, 1);
    y = zoo_conv(m, zoo_name(name, sizeof name, prefix, "conv2"), y, planes, 3, stride, 1, 1,
                 0);
    y = nn_model_batchnorm(m, zoo_name(name, sizeof name, prefix, "bn2"), y, 1);
    y = zoo_conv(m, zoo_name(name, sizeof name, prefix, "conv3"), y, planes * 4, 1, 1, 0, 1, 0);
    y = nn_model_batchnorm(m, zoo_name(name, sizeof name, prefix, "bn3"), y, 0);
    int sc = x < 0 ? -1 : zoo_shortcut(m, prefix, x, planes * 4, stride);
    return nn_model_add(m, zoo_name(name, sizeof name, prefix, "add"), y, sc, 1);
}

static int zoo_resnet(struct nn_model *m, int x, int classes, const int blocks[4],
                      int bottleneck, int cifar_stem)
{
    if (cifar_stem) {
        x = zoo_conv(m, "conv1", x, 64, 3, 1, 1, 1, 0);
        x = nn_model_batchnorm(m, "bn1", x, 1);
    } else {
        x = zoo_conv(m, "conv1", x, 64, 7, 2, 3, 1, 0);
        x = nn_model_batchnorm(m, "bn1", x, 1);
        x = nn_model_maxpool(m, "maxpool", x, 3, 2, 1);
    }
    for (int l = 0; l < 4; l++)
        for (int b = 0; b < blocks[l]; b++) {
            char prefix[32];
            snprintf(prefix, sizeof prefix, "layer%d.%d", l + 1, b);
            int stride = b == 0 && l > 0 ? 2 : 1;
            x = bottleneck ? zoo_bottleneck(m, prefix, x, 64 << l, stride)
                           : zoo_basic_block(m, prefix, x, 64 << l, stride);
        }
    x = nn_model_global_avgpool(m, "avgpool", x);
    x = nn_model_flatten(m, "flatten", x);
    return nn_model_linear(m, "fc", x, classes, 1);
}

/* ---- MobileNetV2 -------------------------------------------------------------------- */

/* Conv2dNormActivation: conv (no bias) -> BN -> ReLU6 (act = 0: no activation) */
static int zoo_conv_bn(struct nn_model *m, const char *prefix, int x, int cout, int k, int s,
                       int groups, int act)
{
    char name[64];
    x = zoo_conv(m, zoo_name(name, sizeof name, prefix, "0"), x, cout, k, s, (k - 1) / 2,
                 groups, 0);
    x = nn_model_batchnorm(m, zoo_name(name, sizeof name, prefix, "1"), x, 0);
    return act ? nn_model_act(m, zoo_name(name, sizeof name, prefix, "2"), x, NN_ACT_RELU6) : x;
}

static int zoo_inverted_residual(struct nn_model *m, int idx, int x, int oup, int stride, int t)
{
    char prefix[32], name[64];
    int inp = zoo_channels(m, x), hidden = inp * t, j = 0;
    int y = x;
    if (t != 1) {
        snprintf(name, sizeof name, "features.%d.conv.%d", idx, j++);
        y = zoo_conv_bn(m, name, y, hidden, 1, 1, 1, 1);
    }
    snprintf(name, sizeof name, "features.%d.conv.%d", idx, j++);
    y = zoo_conv_bn(m, name, y, hidden, 3, stride, hidden, 1);
    snprintf(name, sizeof name, "features.%d.conv.%d", idx, j++);
    y = zoo_conv(m, name, y, oup, 1, 1, 0, 1, 0);
    snprintf(name, sizeof name, "features.%d.conv.%d", idx, j);
    y = nn_model_batchnorm(m, name, y, 0);
    if (stride != 1 || inp != oup || x < 0)
        return y;
    snprintf(prefix, sizeof prefix, "features.%d.add", idx);
    return nn_model_add(m, prefix, x, y, 0);
}

static int zoo_mobilenetv2(struct nn_model *m, int x, int classes)
{
    static const int settings[][4] = {{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2},
                                      {6, 64, 4, 2}, {6, 96, 3, 1}, {6, 160, 3, 2},
                                      {6, 320, 1, 1}};
    int idx = 0;
    x = zoo_conv_bn(m, "features.0", x, 32, 3, 2, 1, 1);
    idx++;
    for (size_t s = 0; s < sizeof settings / sizeof *settings; s++)
        for (int i = 0; i < settings[s][2]; i++)
            x = zoo_inverted_residual(m, idx++, x, settings[s][1], i == 0 ? settings[s][3] : 1,
                                      settings[s][0]);
    char name[32];
    snprintf(name, sizeof name, "features.%d", idx);
    x = zoo_conv_bn(m, name, x, 1280, 1, 1, 1, 1);
    x = nn_model_global_avgpool(m, "avgpool", x);
    x = nn_model_flatten(m, "flatten", x);
    x = nn_model_dropout(m, "classifier.0", x, 0.2f, 0);
    return nn_model_linear(m, "classifier.1", x, classes, 1);
}

/* kuangliu/pytorch-cifar's MobileNetV2 (DDLBench's CIFAR form): a 3x3 stride-1 stem, the
 * second stage at stride 1 (its "NOTE: change stride 2 -> 1 for CIFAR10"), ReLU rather
 * than ReLU6, a 1x1 expansion even at t = 1, a 1x1 conv + BN shortcut where a stride-1
 * block changes width (the identity where it keeps it; none at stride 2), and global
 * average pooling (its avg_pool2d(4) at 32x32) before one linear layer. Names as its
 * modules: conv1, bn1, layers.i.{conv1..3, bn1..3, shortcut.0/1}, conv2, bn2, linear. */
static int zoo_cifar_mbv2_block(struct nn_model *m, int idx, int x, int oup, int stride, int t)
{
    char p[32], name[64];
    snprintf(p, sizeof p, "layers.%d", idx);
    int inp = zoo_channels(m, x), planes = t * inp;
    int y = zoo_conv(m, zoo_name(name, sizeof name, p, "conv1"), x, planes, 1, 1, 0, 1, 0);
    y = nn_model_batchnorm(m, zoo_name(name, sizeof name, p, "bn1"), y, 1);
    y = zoo_conv(m, zoo_name(name, sizeof name, p, "conv2"), y, planes, 3, stride, 1, planes,
                 0);
    y = nn_model_batchnorm(m, zoo_name(name, sizeof name, p, "bn2"), y, 1);
    y = zoo_conv(m, zoo_name(name, sizeof name, p, "conv3"), y, oup, 1, 1, 0, 1, 0);
    y = nn_model_batchnorm(m, zoo_name(name, sizeof name, p, "bn3"), y, 0);
    if (stride != 1 || x < 0)
        return y;
    int sc = x;
    if (inp != oup) {
        sc = zoo_conv(m, zoo_name(name, sizeof name, p, "shortcut.0"), x, oup, 1, 1, 0, 1, 0);
        sc = nn_model_batchnorm(m, zoo_name(name, sizeof name, p, "shortcut.1"), sc, 0);
    }
    return nn_model_add(m, zoo_name(name, sizeof name, p, "add"), y, sc, 0);
}

static int zoo_mobilenetv2_cifar(struct nn_model *m, int x, int classes)
{
    static const int cfg[][4] = {{1, 16, 1, 1}, {6, 24, 2, 1},  {6, 32, 3, 2}, {6, 64, 4, 2},
                                 {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
    x = zoo_conv(m, "conv1", x, 32, 3, 1, 1, 1, 0);
    x = nn_model_batchnorm(m, "bn1", x, 1);
    int idx = 0;
    for (size_t s = 0; s < sizeof cfg / sizeof *cfg; s++)
        for (int i = 0; i < cfg[s][2]; i++)
            x = zoo_cifar_mbv2_block(m, idx++, x, cfg[s][1], i == 0 ? cfg[s][3] : 1, cfg[s][0]);
    x = zoo_conv(m, "conv2", x, 1280, 1, 1, 0, 1, 0);
    x = nn_model_batchnorm(m, "bn2", x, 1);
    x = nn_model_global_avgpool(m, "avgpool", x);
    x = nn_model_flatten(m, "flatten", x);
    return nn_model_linear(m, "linear", x, classes, 1);
}

/* ---- DeepSpeed's CIFAR tutorial network --------------------------------------------- */

/* DeepSpeedExamples' cifar10_deepspeed.py Net (the PyTorch 60-minute blitz's): conv 3->6
 * 5x5, relu, max pool 2, conv 6->16 5x5, relu, max pool 2, flatten, fc 400 -> 120 -> 84 ->
 * classes with ReLUs: 62,006 parameters at 3x32x32 and 10 classes. One "pool" module
 * serves both pools there; here each is a node of its own. It is LeNet-5 unpadded. */
static int zoo_deepspeed_cifar_net(struct nn_model *m, int x, int classes)
{
    return zoo_lenet(m, x, classes, 0);
}

/* ---- Inception V3 ------------------------------------------------------------------- */

/* torchvision's BasicConv2d: conv (no bias) "<p>.conv" -> BN (eps 0.001) "<p>.bn" -> ReLU
 * (fused), a kh x kw kernel */
static int zoo_basic_conv(struct nn_model *m, const char *p, int x, int cout, int kh, int kw,
                          int s, int ph, int pw)
{
    char name[64];
    x = zoo_conv_k(m, zoo_name(name, sizeof name, p, "conv"), x, cout, kh, kw, s, ph, pw);
    return nn_model_batchnorm_eps(m, zoo_name(name, sizeof name, p, "bn"), x, 1, 1e-3f);
}

/* a square BasicConv2d named "<block>.<branch>" */
static int zoo_bc(struct nn_model *m, const char *block, const char *branch, int x, int cout,
                  int k, int s, int pad)
{
    char p[48];
    return zoo_basic_conv(m, zoo_name(p, sizeof p, block, branch), x, cout, k, k, s, pad, pad);
}

/* a 1 x k (wide = 1) or k x 1 BasicConv2d, padded to keep the size */
static int zoo_bc_line(struct nn_model *m, const char *block, const char *branch, int x,
                       int cout, int k, int wide)
{
    char p[48];
    zoo_name(p, sizeof p, block, branch);
    return wide ? zoo_basic_conv(m, p, x, cout, 1, k, 1, 0, k / 2)
                : zoo_basic_conv(m, p, x, cout, k, 1, 1, k / 2, 0);
}

/* torch.cat(branches, 1) of n branches, as n - 1 two-input concats "<block>.cat<i>" */
static int zoo_cat(struct nn_model *m, const char *block, const int *branches, int n)
{
    char name[48], what[8];
    int y = branches[0];
    for (int i = 1; i < n; i++) {
        snprintf(what, sizeof what, "cat%d", i);
        y = nn_model_concat(m, zoo_name(name, sizeof name, block, what), y, branches[i]);
    }
    return y;
}

/* F.avg_pool2d(x, 3, stride 1, padding 1) (count_include_pad) */
static int zoo_inception_avgpool(struct nn_model *m, const char *block, int x)
{
    char name[48];
    return nn_model_avgpool(m, zoo_name(name, sizeof name, block, "avg_pool"), x, 3, 1, 1);
}

/* InceptionA (35x35): 1x1 64 | 1x1 48, 5x5 64 | 1x1 64, 3x3 96, 3x3 96 | pool, 1x1 pf */
static int zoo_inception_a(struct nn_model *m, const char *b, int x, int pool_features)
{
    int br[4];
    br[0] = zoo_bc(m, b, "branch1x1", x, 64, 1, 1, 0);
    br[1] = zoo_bc(m, b, "branch5x5_1", x, 48, 1, 1, 0);
    br[1] = zoo_bc(m, b, "branch5x5_2", br[1], 64, 5, 1, 2);
    br[2] = zoo_bc(m, b, "branch3x3dbl_1", x, 64, 1, 1, 0);
    br[2] = zoo_bc(m, b, "branch3x3dbl_2", br[2], 96, 3, 1, 1);
    br[2] = zoo_bc(m, b, "branch3x3dbl_3", br[2], 96, 3, 1, 1);
    br[3] = zoo_bc(m, b, "branch_pool", zoo_inception_avgpool(m, b, x), pool_features, 1, 1, 0);
    return zoo_cat(m, b, br, 4);
}

/* InceptionB (35 -> 17): 3x3/2 384 | 1x1 64, 3x3 96, 3x3/2 96 | max pool 3/2 */
static int zoo_inception_b(struct nn_model *m, const char *b, int x)
{
    char name[48];
    int br[3];
    br[0] = zoo_bc(m, b, "branch3x3", x, 384, 3, 2, 0);
    br[1] = zoo_bc(m, b, "branch3x3dbl_1", x, 64, 1, 1, 0);
    br[1] = zoo_bc(m, b, "branch3x3dbl_2", br[1], 96, 3, 1, 1);
    br[1] = zoo_bc(m, b, "branch3x3dbl_3", br[1], 96, 3, 2, 0);
    br[2] = nn_model_maxpool(m, zoo_name(name, sizeof name, b, "max_pool"), x, 3, 2, 0);
    return zoo_cat(m, b, br, 3);
}

/* InceptionC (17x17) with c7 channels in its factorised 7x7 branches */
static int zoo_inception_c(struct nn_model *m, const char *b, int x, int c7)
{
    int br[4];
    br[0] = zoo_bc(m, b, "branch1x1", x, 192, 1, 1, 0);
    br[1] = zoo_bc(m, b, "branch7x7_1", x, c7, 1, 1, 0);
    br[1] = zoo_bc_line(m, b, "branch7x7_2", br[1], c7, 7, 1);
    br[1] = zoo_bc_line(m, b, "branch7x7_3", br[1], 192, 7, 0);
    br[2] = zoo_bc(m, b, "branch7x7dbl_1", x, c7, 1, 1, 0);
    br[2] = zoo_bc_line(m, b, "branch7x7dbl_2", br[2], c7, 7, 0);
    br[2] = zoo_bc_line(m, b, "branch7x7dbl_3", br[2], c7, 7, 1);
    br[2] = zoo_bc_line(m, b, "branch7x7dbl_4", br[2], c7, 7, 0);
    br[2] = zoo_bc_line(m, b, "branch7x7dbl_5", br[2], 192, 7, 1);
    br[3] = zoo_bc(m, b, "branch_pool", zoo_inception_avgpool(m, b, x), 192, 1, 1, 0);
    return zoo_cat(m, b, br, 4);
}

/* InceptionD (17 -> 8): 1x1 192, 3x3/2 320 | 1x1 192, 1x7, 7x1, 3x3/2 192 | max pool */
static int zoo_inception_d(struct nn_model *m, const char *b, int x)
{
    char name[48];
    int br[3];
    br[0] = zoo_bc(m, b, "branch3x3_1", x, 192, 1, 1, 0);
    br[0] = zoo_bc(m, b, "branch3x3_2", br[0], 320, 3, 2, 0);
    br[1] = zoo_bc(m, b, "branch7x7x3_1", x, 192, 1, 1, 0);
    br[1] = zoo_bc_line(m, b, "branch7x7x3_2", br[1], 192, 7, 1);
    br[1] = zoo_bc_line(m, b, "branch7x7x3_3", br[1], 192, 7, 0);
    br[1] = zoo_bc(m, b, "branch7x7x3_4", br[1], 192, 3, 2, 0);
    br[2] = nn_model_maxpool(m, zoo_name(name, sizeof name, b, "max_pool"), x, 3, 2, 0);
    return zoo_cat(m, b, br, 3);
}

/* InceptionE (8x8): 1x1 320 | 1x1 384, (1x3 | 3x1) 384 each | 1x1 448, 3x3 384, (1x3 |
 * 3x1) | pool, 1x1 192; the split branches concatenate first, as torchvision's do */
static int zoo_inception_e(struct nn_model *m, const char *b, int x)
{
    char sub[48];
    int br[4], two[2];
    br[0] = zoo_bc(m, b, "branch1x1", x, 320, 1, 1, 0);
    int y = zoo_bc(m, b, "branch3x3_1", x, 384, 1, 1, 0);
    two[0] = zoo_bc_line(m, b, "branch3x3_2a", y, 384, 3, 1);
    two[1] = zoo_bc_line(m, b, "branch3x3_2b", y, 384, 3, 0);
    br[1] = zoo_cat(m, zoo_name(sub, sizeof sub, b, "branch3x3"), two, 2);
    y = zoo_bc(m, b, "branch3x3dbl_1", x, 448, 1, 1, 0);
    y = zoo_bc(m, b, "branch3x3dbl_2", y, 384, 3, 1, 1);
    two[0] = zoo_bc_line(m, b, "branch3x3dbl_3a", y, 384, 3, 1);
    two[1] = zoo_bc_line(m, b, "branch3x3dbl_3b", y, 384, 3, 0);
    br[2] = zoo_cat(m, zoo_name(sub, sizeof sub, b, "branch3x3dbl"), two, 2);
    br[3] = zoo_bc(m, b, "branch_pool", zoo_inception_avgpool(m, b, x), 192, 1, 1, 0);
    return zoo_cat(m, b, br, 4);
}

/* torchvision's inception_v3(aux_logits=False): the stem, Mixed_5b..7c, adaptive average
 * pooling to 1x1, dropout 0.5, fc 2048 -> classes. The auxiliary classifier (AuxLogits,
 * on Mixed_6e, torchvision's default) is left out: training without it is aux_logits=False,
 * and its 3,326,696 parameters (1000 classes) would never receive a gradient. Needs at
 * least 75x75 inputs (299x299 usual). */
static int zoo_inception_v3(struct nn_model *m, int x, int classes)
{
    x = zoo_basic_conv(m, "Conv2d_1a_3x3", x, 32, 3, 3, 2, 0, 0);
    x = zoo_basic_conv(m, "Conv2d_2a_3x3", x, 32, 3, 3, 1, 0, 0);
    x = zoo_basic_conv(m, "Conv2d_2b_3x3", x, 64, 3, 3, 1, 1, 1);
    x = nn_model_maxpool(m, "maxpool1", x, 3, 2, 0);
    x = zoo_basic_conv(m, "Conv2d_3b_1x1", x, 80, 1, 1, 1, 0, 0);
    x = zoo_basic_conv(m, "Conv2d_4a_3x3", x, 192, 3, 3, 1, 0, 0);
    x = nn_model_maxpool(m, "maxpool2", x, 3, 2, 0);
    x = zoo_inception_a(m, "Mixed_5b", x, 32);
    x = zoo_inception_a(m, "Mixed_5c", x, 64);
    x = zoo_inception_a(m, "Mixed_5d", x, 64);
    x = zoo_inception_b(m, "Mixed_6a", x);
    x = zoo_inception_c(m, "Mixed_6b", x, 128);
    x = zoo_inception_c(m, "Mixed_6c", x, 160);
    x = zoo_inception_c(m, "Mixed_6d", x, 160);
    x = zoo_inception_c(m, "Mixed_6e", x, 192);
    x = zoo_inception_d(m, "Mixed_7a", x);
    x = zoo_inception_e(m, "Mixed_7b", x);
    x = zoo_inception_e(m, "Mixed_7c", x);
    x = nn_model_adaptive_avgpool(m, "avgpool", x, 1, 1);
    x = nn_model_dropout(m, "dropout", x, 0.5f, 0);
    x = nn_model_flatten(m, "flatten", x);
    return nn_model_linear(m, "fc", x, classes, 1);
}

/* ---- initialisation ----------------------------------------------------------------- */

enum zoo_init {
    ZOO_INIT_PYTORCH,
    ZOO_INIT_RESNET,
    ZOO_INIT_VGG,
    ZOO_INIT_GPT2,
    ZOO_INIT_INCEPTION
};

static int zoo_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* ---- GPT-2 ------------------------------------------------------------------------------ */

/* A GPT-2 size: OpenAI's hyper-parameters (n_layer, n_head, n_embd, n_positions). The
 * vocabulary is the model's `classes` (50257 for GPT-2's BPE, 256 for bytes). */
struct zoo_gpt2_size {
    int layers, heads, embd, block;
};

/* One pre-norm block as HF's GPT2Block reads: x + attn(ln_1(x)), then + mlp(ln_2(x)), with
 * c_attn (C->3C), c_proj (C->C), mlp.c_fc (C->4C), GELU (tanh), mlp.c_proj (4C->C). Dropout
 * is left out (as llm.c does): it would only add noise to a throughput comparison. */
static int zoo_gpt2_block(struct nn_model *m, int x, int l, const struct zoo_gpt2_size *g)
{
    char p[32], b[64];
    snprintf(p, sizeof p, "transformer.h.%d", l);
    int a = nn_model_layernorm(m, zoo_name(b, sizeof b, p, "ln_1"), x);
    a = nn_model_seq_linear(m, zoo_name(b, sizeof b, p, "attn.c_attn"), a, 3 * g->embd, 1);
    a = nn_model_attention(m, zoo_name(b, sizeof b, p, "attn"), a, g->heads);
    a = nn_model_seq_linear(m, zoo_name(b, sizeof b, p, "attn.c_proj"), a, g->embd, 1);
    x = nn_model_add(m, zoo_name(b, sizeof b, p, "add_1"), x, a, 0);
    int f = nn_model_layernorm(m, zoo_name(b, sizeof b, p, "ln_2"), x);
    f = nn_model_seq_linear(m, zoo_name(b, sizeof b, p, "mlp.c_fc"), f, 4 * g->embd, 1);
    f = nn_model_gelu(m, zoo_name(b, sizeof b, p, "mlp.gelu"), f);
    f = nn_model_seq_linear(m, zoo_name(b, sizeof b, p, "mlp.c_proj"), f, g->embd, 1);
    return nn_model_add(m, zoo_name(b, sizeof b, p, "add_2"), x, f, 0);
}

/* x: the (N,1,1,T) token ids. The output projection is tied to wte (parameter 0). */
static int zoo_gpt2(struct nn_model *m, int x, int classes, const struct zoo_gpt2_size *g)
{
    x = nn_model_embed(m, "transformer", x, classes, g->block, g->embd);
    for (int l = 0; l < g->layers; l++)
        x = zoo_gpt2_block(m, x, l, g);
    x = nn_model_layernorm(m, "transformer.ln_f", x);
    return nn_model_tied_linear(m, "lm_head", x, 0);
}

static int zoo_gpt2_tiny(struct nn_model *m, int x, int classes)
{
    static const struct zoo_gpt2_size g = {.layers = 2, .heads = 4, .embd = 64, .block = 128};
    return zoo_gpt2(m, x, classes, &g);
}

static int zoo_gpt2_small(struct nn_model *m, int x, int classes)
{
    static const struct zoo_gpt2_size g = {
        .layers = 12, .heads = 12, .embd = 768, .block = 1024};
    return zoo_gpt2(m, x, classes, &g);
}

/* GPT-2's initialisation (HF's _init_weights, nanoGPT): linear weights N(0, 0.02) with zero
 * biases, and the two projections into the residual stream N(0, 0.02 / sqrt(2 n_layer));
 * embeddings N(0, 0.02) and layer norms (1, 0) are the builders' defaults. */
static void zoo_gpt2_init(struct nn_model *m)
{
    int blocks = 0;
    for (int i = 0; i < m->nparam_tensors; i++)
        blocks += zoo_ends_with(m->param_info[i].name, ".ln_1.weight");
    float proj = 0.02f / sqrtf(2.0f * (float)(blocks > 0 ? blocks : 1));
    for (int i = 0; i < m->nparam_tensors; i++) {
        const struct nn_param *p = &m->param_info[i];
        if (nn_model_node_op(m, p->node) != NN_OP_LINEAR)
            continue;
        if (zoo_ends_with(p->name, ".bias"))
            nn_model_set_init(m, i, NN_INIT_CONST, 0);
        else
            nn_model_set_init(m, i, NN_INIT_NORMAL,
                              zoo_ends_with(p->name, ".c_proj.weight") ? proj : 0.02f);
    }
}

/* torchvision's loops over self.modules(): convolutions kaiming_normal(fan_out) with zero
 * bias; ResNet leaves linear layers at PyTorch's default, VGG and MobileNetV2 use
 * N(0, 0.01) weights and zero biases; BN weight 1, bias 0 is the default already.
 * Inception3 (init_weights=True) draws conv and linear weights from trunc_normal(std 0.1,
 * a=-2, b=2) and leaves the linear bias at PyTorch's default. The CIFAR forms of
 * kuangliu/pytorch-cifar (vgg16-cifar, mobilenetv2-cifar) keep PyTorch's defaults, as
 * that code does; resnet50-cifar is torchvision's ResNet-50 with the CIFAR stem. */
static void zoo_apply_init(struct nn_model *m, enum zoo_init style, const char *zero_bn)
{
    if (style == ZOO_INIT_PYTORCH)
        return;
    if (style == ZOO_INIT_GPT2) {
        zoo_gpt2_init(m);
        return;
    }
    for (int i = 0; i < m->nparam_tensors; i++) {
        const struct nn_param *p = &m->param_info[i];
        int bias = zoo_ends_with(p->name, ".bias");
        enum nn_op op = nn_model_node_op(m, p->node);
        if (style == ZOO_INIT_INCEPTION) { /* trunc_normal(0.1, +-2): +-20 sigma, a normal */
            if ((op == NN_OP_CONV || op == NN_OP_LINEAR) && !bias)
                nn_model_set_init(m, i, NN_INIT_NORMAL, 0.1f);
            continue;
        }
        if (op == NN_OP_CONV)
            nn_model_set_init(m, i, bias ? NN_INIT_CONST : NN_INIT_KAIMING_NORMAL_OUT, 0);
        else if (op == NN_OP_LINEAR && style == ZOO_INIT_VGG)
            nn_model_set_init(m, i, bias ? NN_INIT_CONST : NN_INIT_NORMAL, bias ? 0 : 0.01f);
        else if (op == NN_OP_BN && zero_bn && zoo_ends_with(p->name, zero_bn))
            nn_model_set_init(m, i, NN_INIT_CONST, 0);
    }
}

/* ---- the table ---------------------------------------------------------------------- */

static int zoo_resnet18(struct nn_model *m, int x, int classes)
{
    static const int blocks[4] = {2, 2, 2, 2};
    return zoo_resnet(m, x, classes, blocks, 0, 0);
}

static int zoo_resnet18_cifar(struct nn_model *m, int x, int classes)
{
    static const int blocks[4] = {2, 2, 2, 2};
    return zoo_resnet(m, x, classes, blocks, 0, 1);
}

static int zoo_resnet50(struct nn_model *m, int x, int classes)
{
    static const int blocks[4] = {3, 4, 6, 3};
    return zoo_resnet(m, x, classes, blocks, 1, 0);
}

static int zoo_resnet101(struct nn_model *m, int x, int classes)
{
    static const int blocks[4] = {3, 4, 23, 3};
    return zoo_resnet(m, x, classes, blocks, 1, 0);
}

static int zoo_resnet152(struct nn_model *m, int x, int classes)
{
    static const int blocks[4] = {3, 8, 36, 3};
    return zoo_resnet(m, x, classes, blocks, 1, 0);
}

static int zoo_resnet50_cifar(struct nn_model *m, int x, int classes)
{
    static const int blocks[4] = {3, 4, 6, 3};
    return zoo_resnet(m, x, classes, blocks, 1, 1);
}

/* How to build each model of common/model_table.h: the same names (a test checks), and
 * nothing else the table already says. */
struct zoo_builder {
    const char *name;
    int (*build)(struct nn_model *m, int x, int classes);
    enum zoo_init init;
    const char *zero_bn; /* the BN weight zero_init_residual zeroes; NULL: none */
};

static const struct zoo_builder zoo_builders[] = {
    {"mnist-cnn", zoo_mnist_cnn, ZOO_INIT_PYTORCH, NULL},
    {"lenet5", zoo_lenet5, ZOO_INIT_PYTORCH, NULL},
    {"alexnet", zoo_alexnet, ZOO_INIT_PYTORCH, NULL},
    {"alexnet-cifar", zoo_alexnet_cifar, ZOO_INIT_PYTORCH, NULL},
    {"vgg16", zoo_vgg16, ZOO_INIT_VGG, NULL},
    {"resnet18", zoo_resnet18, ZOO_INIT_RESNET, ".bn2.weight"},
    {"resnet18-cifar", zoo_resnet18_cifar, ZOO_INIT_RESNET, ".bn2.weight"},
    {"resnet50", zoo_resnet50, ZOO_INIT_RESNET, ".bn3.weight"},
    {"mobilenetv2", zoo_mobilenetv2, ZOO_INIT_VGG, NULL},
    {"gpt2-tiny", zoo_gpt2_tiny, ZOO_INIT_GPT2, NULL},
    {"gpt2-small", zoo_gpt2_small, ZOO_INIT_GPT2, NULL},
    {"inception-v3", zoo_inception_v3, ZOO_INIT_INCEPTION, NULL},
    {"resnet101", zoo_resnet101, ZOO_INIT_RESNET, ".bn3.weight"},
    {"resnet152", zoo_resnet152, ZOO_INIT_RESNET, ".bn3.weight"},
    {"vgg11", zoo_vgg11, ZOO_INIT_VGG, NULL},
    {"resnet50-cifar", zoo_resnet50_cifar, ZOO_INIT_RESNET, ".bn3.weight"},
    {"vgg16-cifar", zoo_vgg16_cifar, ZOO_INIT_PYTORCH, NULL},
    {"mobilenetv2-cifar", zoo_mobilenetv2_cifar, ZOO_INIT_PYTORCH, NULL},
    {"deepspeed-cifar-net", zoo_deepspeed_cifar_net, ZOO_INIT_PYTORCH, NULL},
};

#define ZOO_NBUILDERS (sizeof zoo_builders / sizeof zoo_builders[0])

static const struct zoo_builder *zoo_builder_find(const char *name)
{
    for (size_t i = 0; name && i < ZOO_NBUILDERS; i++)
        if (!strcmp(zoo_builders[i].name, name))
            return &zoo_builders[i];
    return NULL;
}

size_t nn_models_count(void)
{
    return ZOO_NBUILDERS;
}

const char *nn_models_name_at(size_t i)
{
    return i < ZOO_NBUILDERS ? zoo_builders[i].name : NULL;
}

int nn_models_build(struct nn_model *m, const char *name, int c, int h, int w, int classes,
                    const struct nn_zoo_opts *opts, struct err *e)
{
    const struct zoo_builder *b = zoo_builder_find(name);
    if (!b)
        return err_set(e, ERR_INVALID, "model", "unknown model \"%s\"", name ? name : "");
    if (classes < 1)
        return err_set(e, ERR_INVALID, "classes", "a model needs at least one class");
    b->build(m, nn_model_input(m, c, h, w), classes);
    if (nn_model_finish(m, e))
        return err_prefix(e, "model %s for %dx%dx%d", name, c, h, w);
    zoo_apply_init(m, b->init, opts && opts->zero_init_residual ? b->zero_bn : NULL);
    return 0;
}
