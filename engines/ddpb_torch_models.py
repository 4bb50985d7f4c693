"""ddpb_torch_models: common/model_table.h's models in PyTorch, for the pytorch, horovod and
deepspeed engines.

torchvision's definitions where the C zoo follows torchvision (alexnet, vgg16, resnet18,
resnet50, mobilenetv2); the small and CIFAR forms written here layer by layer as
worker/nn/models.c builds them. tests/integration/test_engines.py checks every parameter
count against common/model_table.c, so a definition that drifts fails a test.

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


TORCHVISION = {"alexnet": torchvision.models.alexnet, "vgg16": torchvision.models.vgg16,
               "resnet18": torchvision.models.resnet18, "resnet50": torchvision.models.resnet50,
               "mobilenetv2": torchvision.models.mobilenet_v2}


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
    if name in TORCHVISION:
        return _first_conv(TORCHVISION[name](num_classes=classes), c)
    raise ValueError(f"model: {name!r} has no PyTorch definition here")


def count_params(model):
    return sum(p.numel() for p in model.parameters())
