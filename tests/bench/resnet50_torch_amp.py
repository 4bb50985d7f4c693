#!/usr/bin/env python3
"""PyTorch peer of ddpbench's GPU training figure: torchvision resnet50 trained on one GPU
with AMP bf16 autocast, channels_last, SGD (momentum 0.9), synthetic data (one fixed random
batch, as ddpbench's synthetic dataset), cudnn.benchmark on. Prints one JSON line:
{"peer": "pytorch-amp-bf16", "model": "resnet50", "batch": B, "images_per_s": X, ...}
measured over the steps after warm-up (CUDA-synchronised wall time).

Usage: resnet50_torch_amp.py [--batch 128] [--steps 40] [--warmup 10]"""
import argparse
import json
import time

import torch
import torchvision


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=10)
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    model = torchvision.models.resnet50(num_classes=1000).to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(a.batch, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (a.batch,), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(json.dumps({"peer": "pytorch-amp-bf16", "model": "resnet50", "batch": a.batch,
                      "steps": a.steps, "images_per_s": a.batch * a.steps / dt,
                      "loss": float(loss), "torch": torch.__version__,
                      "gpu": torch.cuda.get_device_name(0)}), flush=True)


if __name__ == "__main__":
    main()
