/* model_table: the rows of model_table.h. Shapes and classes are what the models were
 * designed for; parameter counts are torchvision's published ones for the ImageNet
 * models and PyTorch 1.13's count of the same definitions for the others
 * (tests/unit/test_nn_models.c builds each row and compares). */
#include "common/model_table.h"

#include <string.h>

static const struct model_info model_rows[] = {
    {"mnist-cnn", 1, 28, 28, 10, 21840,
     "PyTorch examples' MNIST network: two 5x5 convolutions, two linear layers", 250, 20, 4, 3,
     50, 50, 13104, 5771724, 0, 0, 0, 0},
    {"lenet5", 1, 28, 28, 10, 61706,
     "LeNet-5 as the PyTorch tutorials write it (padding 2 on the first convolution)", 150, 16,
     4, 2, 120, 84, 15786, 4846626, 0, 0, 0, 0},
    {"alexnet", 3, 224, 224, 1000, 61100840,
     "torchvision's AlexNet (11x11/4 stem, 4096-wide classifier); at least 63x63 input", 7744,
     9216, 0, 0, 4096, 4096, 1257960, 332446440, 0, 0, 0, 0},
    {"alexnet-cifar", 3, 32, 32, 10, 2472266,
     "the CIFAR AlexNet of pytorch-classification: five convolutions, one linear layer", 7744,
     256, 32, 0, 0, 0, 26890, 6881290, 0, 0, 0, 0},
    {"vgg16", 3, 224, 224, 1000, 138357544, "torchvision's VGG-16 without batch norm", 576,
     25088, 0, 0, 4096, 4096, 28851688, 7366715368, 0, 0, 0, 0},
    {"resnet18", 3, 224, 224, 1000, 11689512,
     "torchvision's ResNet-18 (BasicBlocks, 7x7 stride-2 stem, max pool)", 3136, 512, 0, 0, 0,
     0, 6073320, 1554253800, 0, 0, 0, 0},
    {"resnet18-cifar", 3, 32, 32, 10, 11173962,
     "ResNet-18 with a 3x3 stride-1 stem and no max pool, the usual CIFAR form", 576, 512, 0, 0,
     0, 0, 1478666, 378274826, 0, 0, 0, 0},
    {"resnet50", 3, 224, 224, 1000, 25557032,
     "torchvision's ResNet-50 (Bottlenecks, stride on the 3x3: v1.5)", 3136, 2048, 0, 0, 0, 0,
     28103656, 7193236456, 0, 0, 0, 0},
    {"mobilenetv2", 3, 224, 224, 1000, 3504872,
     "torchvision's MobileNetV2, width 1.0, dropout 0.2", 288, 1280, 0, 0, 0, 0, 19833768,
     5076210408, 0, 0, 0, 0},
    /* tensors per token: the id, the embedding, 18 C per block (ln_1, qkv 3C, attention,
     * c_proj, add, ln_2, c_fc 4C, GELU 4C, c_proj, add), ln_f, the logits (classes) */
    {"gpt2-tiny", 1, 1, 128, 256, 124672,
     "a 2-block GPT-2 (4 heads, 64 channels, 128 positions) over bytes, for tests", 0, 0, 0, 0,
     0, 0, 344192, 88113152, 64, 2, 4, 0},
    {"gpt2-small", 1, 1, 1024, 50257, 124439808,
     "OpenAI's GPT-2 small: 12 blocks, 12 heads, 768 channels, 1024 positions, tied head", 0, 0,
     0, 0, 0, 0, 222906368, 57064030208, 768, 12, 12, 0},
    {"inception-v3", 3, 299, 299, 1000, 23834568,
     "torchvision's Inception V3 with aux_logits=False (no AuxLogits head, counted without "
     "it); at least 75x75 input",
     288, 2048, 0, 0, 0, 0, 26542675, 7715546824, 0, 0, 0, 1},
    {"resnet101", 3, 224, 224, 1000, 44549160,
     "torchvision's ResNet-101 (Bottlenecks 3, 4, 23, 3)", 3136, 2048, 0, 0, 0, 0, 41751528,
     10687091688, 0, 0, 0, 0},
    {"resnet152", 3, 224, 224, 1000, 60192808,
     "torchvision's ResNet-152 (Bottlenecks 3, 8, 36, 3)", 3136, 2048, 0, 0, 0, 0, 58610664,
     15003030504, 0, 0, 0, 0},
    {"vgg11", 3, 224, 224, 1000, 132863336, "torchvision's VGG-11 without batch norm", 576,
     25088, 0, 0, 4096, 4096, 16608744, 4232521704, 0, 0, 0, 0},
    {"resnet50-cifar", 3, 32, 32, 10, 23520842,
     "ResNet-50 with a 3x3 stride-1 stem and no max pool (kuangliu's, DDLBench's CIFAR form)",
     576, 2048, 0, 0, 0, 0, 8674314, 2219577354, 0, 0, 0, 0},
    {"vgg16-cifar", 3, 32, 32, 10, 14728266,
     "kuangliu's CIFAR VGG16 (DDLBench's): conv + BN + ReLU, one 512-wide linear layer", 576,
     512, 32, 0, 0, 0, 587786, 150470666, 0, 0, 0, 0},
    {"mobilenetv2-cifar", 3, 32, 32, 10, 2296922,
     "kuangliu's CIFAR MobileNetV2 (DDLBench's): stride-1 stem and second stage, ReLU", 288,
     1280, 0, 0, 0, 0, 3578378, 915409418, 0, 0, 0, 0},
    {"deepspeed-cifar-net", 3, 32, 32, 10, 62006,
     "the DeepSpeed CIFAR-10 tutorial's Net: two 5x5 convolutions, fc 400-120-84", 150, 16, 4,
     3, 120, 84, 18074, 6770714, 0, 0, 0, 0},
};

size_t model_table_count(void)
{
    return sizeof model_rows / sizeof model_rows[0];
}

const struct model_info *model_table_at(size_t i)
{
    return i < model_table_count() ? &model_rows[i] : NULL;
}

static double model_table_linear(double in, double out)
{
    return in * out + out; /* weight and bias */
}

/* Features the flatten yields at (h, w). */
static double model_table_flat(const struct model_info *mi, int h, int w)
{
    if (mi->flat_stride == 0)
        return mi->flat_c;
    double fh = h / mi->flat_stride - mi->flat_border,
           fw = w / mi->flat_stride - mi->flat_border;
    return (double)mi->flat_c * (fh < 1 ? 1 : fh) * (fw < 1 ? 1 : fw);
}

/* Parameters that depend on (h, w, classes): the linear layer after the flatten, and the
 * head when that is another layer. */
static double model_table_varying(const struct model_info *mi, int h, int w, int classes)
{
    double flat = model_table_flat(mi, h, w);
    if (mi->flat_out == 0)
        return model_table_linear(flat, classes);
    return model_table_linear(flat, mi->flat_out) + model_table_linear(mi->head_in, classes);
}

double model_table_params(const struct model_info *mi, int c, int h, int w, int classes)
{
    if (mi->embd > 0) /* only the vocabulary moves a transformer's count */
        return (double)mi->params + (double)mi->embd * (classes - mi->classes);
    return (double)mi->params + (double)mi->in_params * (c - mi->c) +
           model_table_varying(mi, h, w, classes) -
           model_table_varying(mi, mi->h, mi->w, mi->classes);
}

double model_table_activations(const struct model_info *mi, int c, int h, int w)
{
    double area = (double)h * w, area0 = (double)mi->h * mi->w, area16 = 256 * area0;
    double layers0 = (double)mi->act_floats - mi->c * area0; /* without the input */
    double layers16 = (double)mi->act_floats_x16 - mi->c * area16;
    double layers = layers0 + (layers16 - layers0) / (area16 - area0) * (area - area0);
    double attention = (double)mi->layers * mi->heads * area * area; /* 0 for the CNNs */
    return (layers > 0 ? layers : 0) + (double)c * area + attention;
}

const struct model_info *model_table_find(const char *name)
{
    for (size_t i = 0; name && i < model_table_count(); i++)
        if (strcmp(model_rows[i].name, name) == 0)
            return &model_rows[i];
    return NULL;
}
