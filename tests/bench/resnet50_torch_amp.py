#!/usr/bin/env python3
"""PyTorch peer of ddpbench's GPU training figures: torchvision resnet50 trained on one GPU
with channels_last, SGD (momentum 0.9), synthetic data (one fixed random batch, as
ddpbench's synthetic dataset), cudnn.benchmark on, in each precision asked for:
- bf16: AMP autocast to bfloat16 (the usual mixed-precision recipe);
- fp32: true fp32, TF32 off for cuDNN and cuBLAS (torch.backends.cudnn.allow_tf32 and
  torch.backends.cuda.matmul.allow_tf32 False), as ddpbench's fp32 runs (FMA math in
  cuDNN, pedantic cuBLAS): PyTorch's own default lets cuDNN use TF32 for fp32
  convolutions, which would compare a 10-bit-mantissa product with a 23-bit one;
- fp32-tf32: PyTorch's defaults for fp32 with TF32 on for both, for reference.
Prints one JSON line per precision:
{"peer": "pytorch-amp-bf16", "model": "resnet50", "batch": B, "images_per_s": X,
 "max_memory_allocated": bytes, "max_memory_reserved": bytes, "tf32": false, ...}
measured over the steps after warm-up (CUDA-synchronised wall time); the peak memory is
torch.cuda.max_memory_allocated over that precision's whole run (model, optimizer state,
activations; reset between precisions).

Usage: resnet50_torch_amp.py [--batch 128] [--steps 40] [--warmup 10]
                             [--precision bf16[,fp32[,fp32-tf32]]]"""
import argparse
import contextlib
import gc
import json
import time

import torch
import torchvision

PEERS = {"bf16": "pytorch-amp-bf16", "fp32": "pytorch-fp32", "fp32-tf32": "pytorch-fp32-tf32"}


def measure(precision, batch, steps, warmup):
    tf32 = precision == "fp32-tf32"
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    torch.cuda.reset_peak_memory_stats(dev)
    model = torchvision.models.resnet50(num_classes=1000).to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        ctx = (torch.autocast("cuda", dtype=torch.bfloat16) if precision == "bf16"
               else contextlib.nullcontext())
        with ctx:
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    out = {"peer": PEERS[precision], "model": "resnet50", "precision": precision,
           "batch": batch, "steps": steps, "images_per_s": batch * steps / dt,
           "step_ms": dt * 1000.0 / steps, "loss": float(loss),
           "max_memory_allocated": torch.cuda.max_memory_allocated(dev),
           "max_memory_reserved": torch.cuda.max_memory_reserved(dev), "tf32": tf32,
           "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}
    del model, opt, x, y
    gc.collect()
    torch.cuda.empty_cache()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--precision", default="bf16",
                    help="comma-separated: bf16, fp32 (TF32 off), fp32-tf32")
    a = ap.parse_args()
    for p in a.precision.split(","):
        if p not in PEERS:
            ap.error(f"unknown precision {p!r}: one of {', '.join(PEERS)}")
        try:
            print(json.dumps(measure(p, a.batch, a.steps, a.warmup)), flush=True)
        except torch.cuda.OutOfMemoryError as ex:  # a batch too large for the card: say so
            print(json.dumps({"peer": PEERS[p], "precision": p, "batch": a.batch,
                              "error": f"out of memory: {ex}"[:300]}), flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
