/* model_table: the rows of model_table.h. Shapes and classes are what the models were
 * designed for; parameter counts are torchvision's published ones for the ImageNet
 * models and PyTorch 1.13's count of the same definitions for the others
 * (tests/unit/test_nn_models.c builds each row and compares). */
#include "common/model_table.h"

#include <string.h>

static const struct model_info model_rows[] = {
    {"mnist-cnn", 1, 28, 28, 10, 21840,
     "PyTorch examples' MNIST network: two 5x5 convolutions, two linear layers"},
    {"lenet5", 1, 28, 28, 10, 61706,
     "LeNet-5 as the PyTorch tutorials write it (padding 2 on the first convolution)"},
    {"alexnet", 3, 224, 224, 1000, 61100840,
     "torchvision's AlexNet (11x11/4 stem, 4096-wide classifier); at least 63x63 input"},
    {"alexnet-cifar", 3, 32, 32, 10, 2472266,
     "the CIFAR AlexNet of pytorch-classification: five convolutions, one linear layer"},
    {"vgg16", 3, 224, 224, 1000, 138357544,
     "torchvision's VGG-16 without batch norm"},
    {"resnet18", 3, 224, 224, 1000, 11689512,
     "torchvision's ResNet-18 (BasicBlocks, 7x7 stride-2 stem, max pool)"},
    {"resnet18-cifar", 3, 32, 32, 10, 11173962,
     "ResNet-18 with a 3x3 stride-1 stem and no max pool, the usual CIFAR form"},
    {"resnet50", 3, 224, 224, 1000, 25557032,
     "torchvision's ResNet-50 (Bottlenecks, stride on the 3x3: v1.5)"},
    {"mobilenetv2", 3, 224, 224, 1000, 3504872,
     "torchvision's MobileNetV2, width 1.0, dropout 0.2"},
};

size_t model_table_count(void)
{
    return sizeof model_rows / sizeof model_rows[0];
}

const struct model_info *model_table_at(size_t i)
{
    return i < model_table_count() ? &model_rows[i] : NULL;
}

const struct model_info *model_table_find(const char *name)
{
    for (size_t i = 0; name && i < model_table_count(); i++)
        if (strcmp(model_rows[i].name, name) == 0)
            return &model_rows[i];
    return NULL;
}
