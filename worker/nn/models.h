/* models: the model zoo, defined as PyTorch / torchvision define them (layer names, widths,
 * parameter order and initialisation), for any input shape (C,H,W) and class count. Which
 * models exist, their usual input and their parameter counts are the rows of
 * common/model_table.h; this file builds them:
 *
 *   mnist-cnn      PyTorch examples' classic MNIST network: conv 1->10 5x5, max pool 2,
 *                  relu, conv 10->20 5x5, Dropout2d, max pool 2, relu, flatten,
 *                  linear ->50, relu, dropout, linear ->classes (21,840 for 1x28x28, 10)
 *   lenet5         LeNet-5 as the PyTorch tutorials write it: conv 6 5x5 (padding 2, so
 *                  28x28 works as LeCun's padded 32x32), relu, max pool 2, conv 16 5x5, relu,
 *                  max pool 2, linear 120, relu, linear 84, relu, linear ->classes
 *   alexnet        torchvision's AlexNet (11x11/4 stem, adaptive average pool to 6x6,
 *                  dropout 0.5 classifier of 4096); needs at least 63x63 input
 *   alexnet-cifar  the CIFAR AlexNet of bearpaw/pytorch-classification: the same five
 *                  convolutions (11x11 stride 4 padding 5 first), 2x2 max pools, and one
 *                  linear layer 256*h*w ->classes
 *   vgg16          torchvision's VGG-16 without batch norm (adaptive average pool to 7x7)
 *   resnet18/50    torchvision's ResNet: 7x7 stride-2 stem and 3x3 max pool whatever the
 *                  input size, BasicBlock / Bottleneck (stride on the 3x3, "v1.5")
 *   resnet18-cifar resnet18 with a 3x3 stride-1 stem and no max pool (model.conv1 replaced,
 *                  model.maxpool = Identity), the usual CIFAR form
 *   mobilenetv2    torchvision's MobileNetV2, width 1.0, dropout 0.2
 *   inception-v3   torchvision's Inception V3 with aux_logits=False: BasicConv2d (conv, BN
 *                  eps 0.001, ReLU), Mixed_5b..7c with their 1x7 / 7x1 / 1x3 / 3x1 kernels
 *                  and channel concatenations, dropout 0.5, fc; at least 75x75 (299 usual)
 *   resnet101/152  torchvision's (Bottlenecks 3-4-23-3, 3-8-36-3)
 *   vgg11          torchvision's VGG-11 without batch norm (cfg "A")
 *   resnet50-cifar resnet50 with resnet18-cifar's stem: kuangliu's CIFAR ResNet50
 *   vgg16-cifar    kuangliu/pytorch-cifar's VGG16: conv (bias) + BN + ReLU, 512 -> classes
 *   mobilenetv2-cifar  kuangliu's CIFAR MobileNetV2: stride-1 stem and second stage, ReLU,
 *                  1x1 + BN shortcuts where a stride-1 block changes width
 *   deepspeed-cifar-net  the DeepSpeed CIFAR tutorial's Net (LeNet-5 unpadded): 62,006
 *                  parameters at 3x32x32, 10 classes
 *
 * Initialisation follows the same sources: PyTorch's layer defaults, and for ResNet /
 * VGG / MobileNetV2 torchvision's kaiming_normal(fan_out) convolutions, BN (1, 0), VGG's and
 * MobileNetV2's N(0, 0.01) linear weights with zero biases, Inception's N(0, 0.1) conv and
 * linear weights; kuangliu's VGG16 and MobileNetV2 and the DeepSpeed Net keep PyTorch's
 * defaults (resnet50-cifar is torchvision's ResNet, initialised as resnet18-cifar).
 *
 * Ownership: the builders fill a caller-owned nn_model (nn_model_init'd); on failure it may
 * hold a partial graph, released by nn_model_destroy as usual. */
#ifndef DDPB_NN_MODELS_H
#define DDPB_NN_MODELS_H

#include <stddef.h>

#include "common/err.h"
#include "worker/nn/model.h"

struct nn_zoo_opts {
    int zero_init_residual; /* ResNet: last BN of each block starts at 0 (torchvision: off) */
};

/* Builds model `name` for inputs (c, h, w) and `classes` outputs, finishes it and sets
 * its initialisers (opts may be NULL). ERR_INVALID names unknown models and inputs too
 * small for the network. */
int nn_models_build(struct nn_model *m, const char *name, int c, int h, int w, int classes,
                    const struct nn_zoo_opts *opts, struct err *e);
/* The builders, in the order of common/model_table.h (which lists the same names and each
 * model's usual input): how many, and the i-th name (NULL when i >= nn_models_count()). */
size_t nn_models_count(void);
const char *nn_models_name_at(size_t i);

#endif
