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

static int zoo_lenet5(struct nn_model *m, int x, int classes)
{
    x = zoo_conv(m, "conv1", x, 6, 5, 1, 2, 1, 1);
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

static int zoo_vgg16(struct nn_model *m, int x, int classes)
{
    static const int cfg[] = {64, 64,  0,   128, 128, 0,   256, 256, 256,
                              0,  512, 512, 512, 0,   512, 512, 512, 0};
    int i = 0;
    for (size_t k = 0; k < sizeof cfg / sizeof *cfg; k++)
        x = cfg[k] ? zoo_conv_relu(m, x, &i, cfg[k], 3, 1, 1) : zoo_maxpool(m, x, &i, 2, 2);
    x = nn_model_adaptive_avgpool(m, "avgpool", x, 7, 7);
    return zoo_classifier_4096(m, x, classes, 0);
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

/* ---- initialisation ----------------------------------------------------------------- */

enum zoo_init { ZOO_INIT_PYTORCH, ZOO_INIT_RESNET, ZOO_INIT_VGG, ZOO_INIT_GPT2 };

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
 * N(0, 0.01) weights and zero biases; BN weight 1, bias 0 is the default already. */
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
