#!/usr/bin/python3
"""PyTorch's DataLoader over the same per-sample image files ddpbench reads (the peer of
tests/bench/bench_data.py): a Dataset of the manifest `ddpbench dataset convert` writes
(DIR/train.txt: "relative/path label" lines, the order of the samples), each image opened
with PIL (libjpeg-turbo / libpng underneath, as ddpbench's decoders), then torchvision's
CIFAR recipe: RandomCrop(32, padding=4), RandomHorizontalFlip, ToTensor, Normalize with
the published CIFAR-10 mean and std, the same transform ddpbench's dataset.augment applies.
DataLoader(batch, shuffle, num_workers=N, drop_last) with its default prefetch_factor (2)
and persistent workers, at its best for a CPU loader: no pin_memory (no GPU to copy to).

  data_torch.py --dir DIR/files-jpeg --workers N --batch B --batches K [--warmup W]
                [--model resnet18-cifar --threads T]

Loader only: times K batches after W untimed ones (the workers' start-up and first fills
excluded) and prints one JSON line {"samples_per_s", "batches", "wall_s"}. With --model,
each batch also trains a torchvision ResNet-18 with the CIFAR stem (3x3 conv, no max
pool; ddpbench's resnet18-cifar) one SGD step, and the line adds "step_ms" (median) and
"data_ms" (median time waiting for the batch)."""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_threads  # noqa: E402


class ManifestImages:
    """The samples of DIR/train.txt, in its order, as (tensor, label)."""

    def __init__(self, root, transform):
        self.root, self.transform = root, transform
        with open(os.path.join(root, "train.txt"), encoding="utf-8") as f:
            self.items = [(p, int(l)) for p, l in (line.split() for line in f if line.strip())]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        from PIL import Image
        path, label = self.items[i]
        with Image.open(os.path.join(self.root, path)) as im:
            return self.transform(im.convert("RGB")), label


def resnet18_cifar():
    import torch.nn as nn
    import torchvision
    m = torchvision.models.resnet18(num_classes=10)
    m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    m.maxpool = nn.Identity()
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--model", default="")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch_threads.set_before_import(a.threads)
    import torch
    torch.set_num_threads(a.threads)
    import torchvision.transforms as T
    tf = T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))])
    ds = ManifestImages(a.dir, tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, drop_last=True,
                                     num_workers=a.workers, persistent_workers=a.workers > 0)
    model = opt = None
    if a.model:
        model = resnet18_cifar()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    it, done, t0 = iter(dl), 0, None
    steps, waits = [], []
    while done < a.warmup + a.batches:
        ts = time.perf_counter()
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(dl)
            continue
        tw = time.perf_counter()
        if model is not None:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        te = time.perf_counter()
        done += 1
        if done == a.warmup:
            t0 = time.perf_counter()
        elif done > a.warmup:
            steps.append((te - ts) * 1e3)
            waits.append((tw - ts) * 1e3)
    wall = time.perf_counter() - t0
    out = {"samples_per_s": a.batches * a.batch / wall, "batches": a.batches, "wall_s": wall}
    if model is not None:
        out.update(step_ms=statistics.median(steps), data_ms=statistics.median(waits))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
