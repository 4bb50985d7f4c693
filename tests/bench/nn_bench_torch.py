#!/usr/bin/env python3
"""PyTorch peer of tests/bench/nn_bench.c: the same zoo written as torchvision writes it
(torchvision is not packaged for this Debian, so the definitions are repeated here) and the
same timed loop: zero_grad + forward + cross-entropy + backward + SGD(lr 0.01, momentum 0.9)
step on one fixed random batch, median over the timed steps.

  nn_bench_torch.py MODEL BATCH THREADS [STEPS] [--shape C,H,W] [--classes K] [--count]
                    [--layers]

Run it with Debian's interpreter (/usr/bin/python3, python3-torch) under the same lock and
glibc settings as nn_bench (MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=4294967296), which keep
PyTorch from handing freed activation memory back to the OS every step. --count prints the
parameter count (the numbers tests/unit/test_nn_models.c checks against). Run as a script it
parses its arguments before importing torch, so THREADS reaches OMP_NUM_THREADS and
OPENBLAS_NUM_THREADS too (tests/bench/torch_threads.py says why). --layers runs the timed
steps again under torch.profiler and prints each operator's self CPU time per step, by
operator and input shapes (the peer of nn_bench --layers; the profiler adds a few
microseconds per operator, so the table is for where the time goes, not the headline).
"""
import argparse, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_threads


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("batch", type=int)
    ap.add_argument("threads", type=int)
    ap.add_argument("steps", type=int, nargs="?", default=20)
    ap.add_argument("--shape", default=None)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--count", action="store_true", help="print the parameter count only")
    ap.add_argument("--layers", action="store_true",
                    help="also print per-operator self CPU time per step (torch.profiler)")
    return ap.parse_args()


if __name__ == "__main__":
    ARGS = parse_args()
    torch_threads.set_before_import(ARGS.threads)
import torch, torch.nn as nn, torch.nn.functional as F  # noqa: E402 (after the thread env)


class MnistCnn(nn.Module):  # pytorch/examples mnist, the classic version
    def __init__(self, c, h, w, k):
        super().__init__()
        self.conv1 = nn.Conv2d(c, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.flat = 20 * ((h - 4) // 2 - 4) // 2 * (((w - 4) // 2 - 4) // 2)
        self.fc1 = nn.Linear(self.flat, 50)
        self.fc2 = nn.Linear(50, k)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, self.flat)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        return self.fc2(x)


class LeNet5(nn.Module):
    def __init__(self, c, h, w, k):
        super().__init__()
        self.conv1 = nn.Conv2d(c, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        hh, ww = (h // 2 - 4) // 2, (w // 2 - 4) // 2
        self.fc1 = nn.Linear(16 * hh * ww, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, k)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def alexnet_features(c, pad, pool):
    """AlexNet's five convolutions: the ImageNet and the CIFAR variant differ only in the
    first convolution's padding and the pooling window (stride 2 in both)."""
    return nn.Sequential(
        nn.Conv2d(c, 64, 11, 4, pad), nn.ReLU(inplace=True), nn.MaxPool2d(pool, 2),
        nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(pool, 2),
        nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(pool, 2))


class AlexNet(nn.Module):  # torchvision.models.alexnet
    def __init__(self, c, h, w, k):
        super().__init__()
        self.features = alexnet_features(c, pad=2, pool=3)
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(0.5), nn.Linear(256 * 36, 4096), nn.ReLU(inplace=True),
            nn.Dropout(0.5), nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Linear(4096, k))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


class AlexNetCifar(nn.Module):  # bearpaw/pytorch-classification models/cifar/alexnet.py
    def __init__(self, c, h, w, k):
        super().__init__()
        self.features = alexnet_features(c, pad=5, pool=2)
        with torch.no_grad():
            n = self.features(torch.zeros(1, c, h, w)).numel()
        self.classifier = nn.Linear(n, k)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


class VGG16(nn.Module):  # torchvision.models.vgg16 (cfg "D", no batch norm)
    def __init__(self, c, h, w, k):
        super().__init__()
        layers, cin = [], c
        for v in [64, 64, 'M', 128, 128, 'M', 256, 256, 256, 'M', 512, 512, 512, 'M',
                  512, 512, 512, 'M']:
            if v == 'M':
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(cin, v, 3, padding=1), nn.ReLU(inplace=True)]
                cin = v
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 49, 4096), nn.ReLU(True), nn.Dropout(0.5),
            nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(0.5), nn.Linear(4096, k))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride, downsample):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + idt)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride, downsample):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + idt)


class ResNet(nn.Module):  # torchvision.models.resnet
    def __init__(self, c, h, w, k, block, layers, cifar=False):
        super().__init__()
        self.inplanes = 64
        if cifar:
            self.conv1 = nn.Conv2d(c, 64, 3, 1, 1, bias=False)
        else:
            self.conv1 = nn.Conv2d(c, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.Identity() if cifar else nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make(block, 64, layers[0], 1)
        self.layer2 = self._make(block, 128, layers[1], 2)
        self.layer3 = self._make(block, 256, layers[2], 2)
        self.layer4 = self._make(block, 512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, k)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make(self, block, planes, blocks, stride):
        ds = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            ds = nn.Sequential(nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride,
                                         bias=False), nn.BatchNorm2d(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, ds)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes, 1, None) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def conv_bn(inp, oup, k, s, groups=1, act=True):  # torchvision Conv2dNormActivation
    layers = [nn.Conv2d(inp, oup, k, s, (k - 1) // 2, groups=groups, bias=False),
              nn.BatchNorm2d(oup)]
    if act:
        layers.append(nn.ReLU6(inplace=True))
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, inp, oup, stride, t):
        super().__init__()
        hidden = int(round(inp * t))
        self.use_res = stride == 1 and inp == oup
        layers = [] if t == 1 else [conv_bn(inp, hidden, 1, 1)]
        layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden),
                   nn.Conv2d(hidden, oup, 1, 1, 0, bias=False), nn.BatchNorm2d(oup)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2(nn.Module):  # torchvision.models.mobilenet_v2, width 1.0
    def __init__(self, c, h, w, k):
        super().__init__()
        feats, inp = [conv_bn(c, 32, 3, 2)], 32
        for t, ch, n, s in [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2],
                            [6, 96, 3, 1], [6, 160, 3, 2], [6, 320, 1, 1]]:
            for i in range(n):
                feats.append(InvertedResidual(inp, ch, s if i == 0 else 1, t))
                inp = ch
        feats.append(conv_bn(inp, 1280, 1, 1))
        self.features = nn.Sequential(*feats)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, k))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


def build(name, c, h, w, k):
    if name == "mnist-cnn":
        return MnistCnn(c, h, w, k)
    if name == "lenet5":
        return LeNet5(c, h, w, k)
    if name == "alexnet":
        return AlexNet(c, h, w, k)
    if name == "alexnet-cifar":
        return AlexNetCifar(c, h, w, k)
    if name == "vgg16":
        return VGG16(c, h, w, k)
    if name == "resnet18":
        return ResNet(c, h, w, k, BasicBlock, [2, 2, 2, 2])
    if name == "resnet18-cifar":
        return ResNet(c, h, w, k, BasicBlock, [2, 2, 2, 2], cifar=True)
    if name == "resnet50":
        return ResNet(c, h, w, k, Bottleneck, [3, 4, 6, 3])
    if name == "mobilenetv2":
        return MobileNetV2(c, h, w, k)
    raise SystemExit("unknown model " + name)


def print_layers(step, steps):
    """Runs steps more steps under torch.profiler; one line per (operator, input shapes):
    calls and self CPU milliseconds per step, the largest first; the optimizer's and
    zero_grad's record_function totals after them."""
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(steps):
            step()
    rows = prof.key_averages(group_by_input_shape=True)
    for r in sorted(rows, key=lambda r: -r.self_cpu_time_total):
        if r.self_cpu_time_total <= 0:
            continue
        shapes = ";".join("x".join(str(d) for d in s) for s in r.input_shapes if s)
        print(f"op {r.key:<44} {shapes:<40} calls {r.count / steps:5.1f} "
              f"self {r.self_cpu_time_total / steps / 1e3:8.3f} ms")
    for r in prof.key_averages():
        if r.key.startswith("Optimizer.") or r.key.startswith("aten::zero_"):
            print(f"total {r.key:<44} {r.cpu_time_total / steps / 1e3:8.3f} ms")


def main():
    a = ARGS
    shape = a.shape or ("1,28,28" if a.model in ("mnist-cnn", "lenet5") else "3,32,32")
    c, h, w = (int(v) for v in shape.split(","))
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    m = build(a.model, c, h, w, a.classes)
    if a.count:
        print(sum(p.numel() for p in m.parameters()))
        return
    x = torch.randn(a.batch, c, h, w)
    y = torch.randint(0, a.classes, (a.batch,))
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    m.train()

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    ts = []
    for _ in range(a.steps):
        t = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t)
    ts.sort()
    med = ts[len(ts) // 2]
    print(f"torch {a.model} {c}x{h}x{w} batch {a.batch} threads {a.threads}: "
          f"median {med * 1e3:.2f} ms/step, {a.batch / med:.1f} img/s "
          f"(min {ts[0] * 1e3:.2f}, max {ts[-1] * 1e3:.2f}, {a.steps} steps)")
    if a.layers:
        print_layers(step, a.steps)


if __name__ == "__main__":
    main()
