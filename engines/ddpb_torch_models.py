"""ddpb_torch_models: common/model_table.h's models in PyTorch, for the pytorch, horovod and
deepspeed engines.

torchvision's definitions where the C zoo follows torchvision (alexnet, vgg11, vgg16,
resnet18/50/101/152, mobilenetv2, inception-v3 with aux_logits=False); the small and CIFAR
forms written here layer by layer as worker/nn/models.c builds them (kuangliu/pytorch-cifar's
for the DDLBench CIFAR forms, DeepSpeed's tutorial Net), with the same module names, so
named_parameters() lists the C zoo's parameters in its order (tests/unit/test_nn_models.c
checks the names). tests/integration/test_engines.py checks every parameter count against
common/model_table.c, so a definition that drifts fails a test.

Decision: weights initialise with torch's defaults from torch.manual_seed(spec seed); the C
worker's initial values are not the same numbers (its own generator), so engines agree on
the distribution of initial weights, not on their values."""
import torch
from torch import nn
import torchvision


class MnistCnn(nn.Module):
    """PyTorch's examples/mnist network (21,840 parameters at 1x28x28, 10 classes)."""

    def __init__(self, c=1, classes=10, side=28):
        super().__init__()
        self.conv1 = nn.Conv2d(c, 10, 5)
        self.conv2 = nn.Conv2d(10, 20, 5)
        self.conv2_drop = nn.Dropout2d(0.5)
        flat = ((side - 4) // 2 - 4) // 2
        self.fc1 = nn.Linear(20 * flat * flat, 50)
        self.fc2 = nn.Linear(50, classes)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):  # x: (N, c, side, side) -> (N, classes) logits
        x = torch.relu(nn.functional.max_pool2d(self.conv1(x), 2))
        x = torch.relu(nn.functional.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = self.drop(torch.relu(self.fc1(torch.flatten(x, 1))))
        return self.fc2(x)


def lenet5(c, classes, side):
    flat = ((side // 2) - 4) // 2
    return nn.Sequential(
        nn.Conv2d(c, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(16 * flat * flat, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, classes))


def alexnet_cifar(c, classes, side):
    """pytorch-classification's CIFAR AlexNet: 11x11/4 stem padded 5, 2x2 pools."""
    def conv(i, o, k, s, p):
        return [nn.Conv2d(i, o, k, s, p), nn.ReLU(inplace=True)]
    layers = conv(c, 64, 11, 4, 5) + [nn.MaxPool2d(2)] + conv(64, 192, 5, 1, 2) + \
        [nn.MaxPool2d(2)] + conv(192, 384, 3, 1, 1) + conv(384, 256, 3, 1, 1) + \
        conv(256, 256, 3, 1, 1) + [nn.MaxPool2d(2)]
    out = ((side + 10 - 11) // 4 + 1) // 8
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(256 * out * out, classes))


def resnet18_cifar(c, classes, side):
    m = torchvision.models.resnet18(num_classes=classes)
    m.conv1 = nn.Conv2d(c, 64, 3, 1, 1, bias=False)
    m.maxpool = nn.Identity()
    return m


def _first_conv(m, c):
    """torchvision builds 3-channel stems; a 1-channel input swaps the first convolution."""
    if c == 3:
        return m
    for name, mod in m.named_modules():
        if isinstance(mod, nn.Conv2d):
            new = nn.Conv2d(c, mod.out_channels, mod.kernel_size, mod.stride, mod.padding,
                            bias=mod.bias is not None)
            parent = m
            *path, last = name.split(".")
            for p in path:
                parent = getattr(parent, p)
            setattr(parent, last, new)
            return m
    return m


def resnet50_cifar(c, classes, side):
    """kuangliu's CIFAR ResNet50 (DDLBench's): torchvision's ResNet-50 with resnet18_cifar's
    stem (the same network; its avg_pool2d(4) is the global pool at 32x32)."""
    m = torchvision.models.resnet50(num_classes=classes)
    m.conv1 = nn.Conv2d(c, 64, 3, 1, 1, bias=False)
    m.maxpool = nn.Identity()
    return m


def vgg16_cifar(c, classes, side):
    """kuangliu/pytorch-cifar's VGG('VGG16'): conv (bias) + BN + ReLU, one linear layer;
    its trailing AvgPool2d(1, 1) is the identity and left out (no parameters)."""
    layers, cin = [], c
    for v in (64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0):
        if v == 0:
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(cin, v, 3, padding=1), nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
            cin = v
    m = nn.Sequential()
    m.features = nn.Sequential(*layers)
    m.flatten = nn.Flatten()
    m.classifier = nn.Linear(512 * (side // 32) ** 2, classes)
    return m


class _CifarMbv2Block(nn.Module):
    """kuangliu's MobileNetV2 Block: expand 1x1 + BN + ReLU, depthwise 3x3 + BN + ReLU,
    project 1x1 + BN; a shortcut (1x1 + BN where the width changes) at stride 1 only."""

    def __init__(self, inp, out, expansion, stride):
        super().__init__()
        planes = expansion * inp
        self.stride = stride
        self.conv1 = nn.Conv2d(inp, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, groups=planes, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.shortcut = nn.Sequential()
        if stride == 1 and inp != out:
            self.shortcut = nn.Sequential(nn.Conv2d(inp, out, 1, bias=False),
                                          nn.BatchNorm2d(out))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return y + self.shortcut(x) if self.stride == 1 else y


class MobileNetV2Cifar(nn.Module):
    """kuangliu's CIFAR MobileNetV2 (DDLBench's): stride-1 stem and second stage, ReLU,
    global average pooling (its avg_pool2d(4) at 32x32), one linear layer."""
    CFG = ((1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
           (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, c=3, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(c, 32, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        blocks, inp = [], 32
        for t, out, n, stride in self.CFG:
            for i in range(n):
                blocks.append(_CifarMbv2Block(inp, out, t, stride if i == 0 else 1))
                inp = out
        self.layers = nn.Sequential(*blocks)
        self.conv2 = nn.Conv2d(320, 1280, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(1280)
        self.linear = nn.Linear(1280, classes)

    def forward(self, x):
        x = self.layers(torch.relu(self.bn1(self.conv1(x))))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.linear(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class DeepSpeedCifarNet(nn.Module):
    """DeepSpeedExamples' cifar10_deepspeed.py Net (62,006 parameters at 3x32x32, 10)."""

    def __init__(self, c=3, classes=10, side=32):
        super().__init__()
        self.conv1 = nn.Conv2d(c, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        flat = ((side - 4) // 2 - 4) // 2
        self.fc1 = nn.Linear(16 * flat * flat, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, classes)

    def forward(self, x):
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        x = torch.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc3(torch.relu(self.fc2(x)))


def inception_v3(classes):
    """torchvision's, trained without the auxiliary head (aux_logits=False), with its own
    initialisation (init_weights=True: trunc_normal(std 0.1) weights)."""
    return torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=True,
                                           num_classes=classes)


TORCHVISION = {"alexnet": torchvision.models.alexnet, "vgg16": torchvision.models.vgg16,
               "resnet18": torchvision.models.resnet18, "resnet50": torchvision.models.resnet50,
               "mobilenetv2": torchvision.models.mobilenet_v2,
               "resnet101": torchvision.models.resnet101,
               "resnet152": torchvision.models.resnet152, "vgg11": torchvision.models.vgg11}


def build(name, c, h, w, classes):
    """The named model for inputs (c, h, w) and `classes` outputs."""
    if name == "mnist-cnn":
        return MnistCnn(c, classes, h)
    if name == "lenet5":
        return lenet5(c, classes, h)
    if name == "alexnet-cifar":
        return alexnet_cifar(c, classes, h)
    if name == "resnet18-cifar":
        return resnet18_cifar(c, classes, h)
    if name == "resnet50-cifar":
        return resnet50_cifar(c, classes, h)
    if name == "vgg16-cifar":
        return vgg16_cifar(c, classes, h)
    if name == "mobilenetv2-cifar":
        return MobileNetV2Cifar(c, classes)
    if name == "deepspeed-cifar-net":
        return DeepSpeedCifarNet(c, classes, h)
    if name == "inception-v3":
        return _first_conv(inception_v3(classes), c)
    if name in TORCHVISION:
        return _first_conv(TORCHVISION[name](num_classes=classes), c)
    raise ValueError(f"model: {name!r} has no PyTorch definition here")


def count_params(model):
    return sum(p.numel() for p in model.parameters())
