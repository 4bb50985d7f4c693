#!/usr/bin/python3
"""The data pipeline on CIFAR-10-sized data: ddpbench's loader against PyTorch's DataLoader
on the same JPEG files, and JPEG files against record shards, local against emulated NFS.

  tests/bench/bench_data.py --build build [--rounds 3] [--workers 1,2,4] [--batch 128]
                            [--batches 40] [--train-steps 4] [--json F] [--keep DIR]

Data: 50,000 training and 10,000 test images of 3x32x32 (CIFAR-10's sizes) written as
CIFAR-10 binary batches, each image smooth (a random gradient per channel and a bright
block), so its JPEG is about the size of a real CIFAR image's rather than noise's; then
`ddpbench dataset convert` writes them as JPEG files (quality 95, 4:4:4; one file per
sample and the manifest), raw, zstd and JPEG record shards (64 MB shards; records-jpeg
holds the same JPEG bytes as the files, so files-jpeg against records-jpeg is the file
layout alone). The conversions are timed once.

Loader only (the headline), every configuration once per round, the order rotated each
round, peers at their best settings:
  ddpbench  a real ddpbenchd, spec loader_only (the loader and nothing else; results'
            throughput), world_size 1, batch --batch, dataset.augment (crop + flip, the
            CIFAR recipe), dataset.workers N, prefetch max(2, N), over --formats
            (files-jpeg, records, records-zstd, records-jpeg), each on local storage and
            on the emulated nfs
            profile (200 MB/s, 0.5 ms a request, 8 in flight);
  PyTorch   tests/bench/data_torch.py: DataLoader(num_workers=N, shuffle, drop_last,
            persistent workers, default prefetch) over the same files-jpeg manifest, PIL
            decode, RandomCrop(32, 4) + RandomHorizontalFlip + ToTensor + Normalize.
Figures: samples/s per configuration, the median over rounds, and for each worker count
ddpbench files-jpeg local / PyTorch (> 1: ddpbench's loader supplies more).

Training (--train-steps > 0): --train-model (resnet18-cifar, or mnist-cnn: a step short
enough on 2 CPUs for the loader to show), one rank, batch 64, SGD, 2 compute threads,
2 loader workers, on files-jpeg and records, each on local, nfs and blob storage (blob's
15 ms a request is where a JPEG file, two requests, costs more than the step can hide);
figures: step ms and data wait ms (medians of the stored steps) and whether the results
call the run input-bound, beside PyTorch training the same ResNet-18 (CIFAR stem) from its
DataLoader over the JPEG files. A benchmark: it prints figures and ratios, never
pass/fail. Takes /tmp/ddpb-bench.lock itself (flock)."""
import fcntl
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_threads  # noqa: E402
from bench_train import Daemon, bench_args, write_json  # noqa: E402

TRAIN, TEST = 50000, 10000


def write_cifar(root, train=TRAIN, test=TEST):
    """CIFAR-10 binary batches (5 x train / 5 training images, test test images) of smooth
    images; CIFAR-10's own sizes by default."""
    import numpy as np
    rng = np.random.default_rng(20)
    yy, xx = np.mgrid[0:32, 0:32]
    os.makedirs(root, exist_ok=True)
    files = [(f"data_batch_{i}.bin", train // 5) for i in range(1, 6)] + [("test_batch.bin", test)]
    for name, n in files:
        a = rng.integers(0, 200, (n, 3, 1, 1))
        b = rng.uniform(-3, 3, (n, 3, 1, 1))
        c = rng.uniform(-3, 3, (n, 3, 1, 1))
        img = a + b * yy + c * xx
        y0, x0 = rng.integers(0, 24, n), rng.integers(0, 24, n)
        for i in range(n):
            img[i, :, y0[i]:y0[i] + 8, x0[i]:x0[i] + 8] += 60
        img = np.clip(img, 0, 255).astype(np.uint8).reshape(n, -1)
        labels = rng.integers(0, 10, (n, 1)).astype(np.uint8)
        np.concatenate([labels, img], axis=1).tofile(os.path.join(root, name))


def convert(build, root, fmt):
    t0 = time.time()
    subprocess.run([f"{build}/worker/ddpbench-data", "convert", "--name", "cifar10", "--path", root,
                    "--to", fmt], check=True, capture_output=True, text=True)
    size = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(os.path.join(root, fmt))
               for f in fs)
    return time.time() - t0, size


def drop_caches():
    """So each configuration starts as cold as the machine allows (root only)."""
    try:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        pass


def ours_loader(d, root, fmt, storage, workers, a):
    spec = {"name": f"loader {fmt} {storage} {workers}", "workload": "train", "model": "mnist-cnn",
            "loader_only": True, "batch_size": a.batch, "steps": a.batches + 3, "warmup_steps": 3,
            "prefetch": max(2, workers), "eval": False,
            "dataset": {"name": "cifar10", "path": root, "format": fmt, "storage": storage,
                        "workers": workers, "augment": True}}
    row = d.run(spec)[0]
    return row["throughput_mean"], row["loader_cpu_ms"], row["read_mbps"]


def torch_loader(root, workers, a, model=""):
    cmd = ["/usr/bin/python3", f"{HERE}/data_torch.py", "--dir", os.path.join(root, "files-jpeg"),
           "--workers", str(workers), "--batch", str(a.batch if not model else 64),
           "--batches", str(a.batches if not model else a.train_steps), "--threads", "2"]
    if model:
        cmd += ["--model", model]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         env=torch_threads.thread_env(2)).stdout
    return json.loads(out.strip().splitlines()[-1])


def step_medians(d, run_id):
    """(step ms, data wait ms): the medians of the run's stored steps."""
    steps = d.call(f"/v1/runs/{run_id}/steps")
    rows = [dict(zip(steps["columns"], r)) for r in steps["rows"]]
    return statistics.median(r["step_ms"] for r in rows), statistics.median(r["data_ms"] for r in rows)


def ours_train(d, root, fmt, storage, a):
    spec = {"name": f"train {fmt} {storage}", "workload": "train", "model": a.train_model,
            "batch_size": 64, "threads": 2, "steps": a.train_steps + 2, "warmup_steps": 2,
            "eval": False, "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9},
            "dataset": {"name": "cifar10", "path": root, "format": fmt, "storage": storage,
                        "workers": 2, "augment": True}, "timeout_s": 1800}
    exp = d.finish(spec)
    bound = d.call(f"/v1/experiments/{exp['id']}/results")["rows"][0]["input_bound"]
    return step_medians(d, exp["runs"][0]["id"]) + (bound,)


def main():
    ap = bench_args(3)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--formats", default="files-jpeg,records,records-zstd,records-jpeg",
                    help="ddpbench's formats in the loader-only part (files-jpeg is the peer's)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--train-steps", type=int, default=4)
    ap.add_argument("--train-model", default="resnet18-cifar",
                    help="mnist-cnn: a model fast enough on 2 CPUs for the loader to matter")
    ap.add_argument("--keep", default="", help="reuse or keep the generated data here")
    a = ap.parse_args()
    workers = [int(w) for w in a.workers.split(",")]
    formats = a.formats.split(",")
    lock = open("/tmp/ddpb-bench.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    root = a.keep or tempfile.mkdtemp(prefix="ddpb-bench-data-")
    out = {"conversions": {}, "loader": {}, "train": {}}
    d = Daemon(a.build, 16, data_dir=root)
    try:
        if not os.path.exists(os.path.join(root, "test_batch.bin")):
            write_cifar(root)
        for fmt in sorted(set(formats) | {"files-jpeg", "records"}):
            if not os.path.exists(os.path.join(root, fmt)):
                out["conversions"][fmt] = convert(a.build, root, fmt)
                print(f"convert {fmt}: {out['conversions'][fmt][0]:.1f} s, "
                      f"{out['conversions'][fmt][1] / 1e6:.1f} MB", flush=True)
        configs = [("ddpbench", fmt, st, w) for w in workers
                   for fmt in formats for st in ("local", "nfs")]
        configs += [("pytorch", "files-jpeg", "local", w) for w in workers]
        for r in range(a.rounds):
            k = r % len(configs)
            for who, fmt, st, w in configs[k:] + configs[:k]:
                drop_caches()
                if who == "ddpbench":
                    thr, cpu, mbps = ours_loader(d, root, fmt, st, w, a)
                else:
                    thr, cpu, mbps = torch_loader(root, w, a)["samples_per_s"], None, None
                key = f"{who} {fmt} {st} w{w}"
                out["loader"].setdefault(key, []).append(thr)
                print(f"round {r} {key}: {thr:.0f} samples/s"
                      + (f", loader cpu {cpu:.1f} ms/step, read {mbps:.1f} MB/s" if cpu else ""), flush=True)
        if a.train_steps > 0:
            for fmt in ("files-jpeg", "records"):
                for st in ("local", "nfs", "blob"):
                    drop_caches()
                    out["train"][f"ddpbench {fmt} {st}"] = ours_train(d, root, fmt, st, a)
                    print("train", fmt, st, out["train"][f"ddpbench {fmt} {st}"], flush=True)
            if a.train_model == "resnet18-cifar":  # data_torch.py writes only this model
                drop_caches()
                t = torch_loader(root, 2, a, model=a.train_model)
                out["train"]["pytorch files-jpeg local"] = (t["step_ms"], t["data_ms"], None)
                print("train pytorch", out["train"]["pytorch files-jpeg local"], flush=True)
    finally:
        d.close()
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    print("\n| configuration | samples/s (median) | per round |\n|---|---:|---|")
    for key, v in out["loader"].items():
        print(f"| {key} | {statistics.median(v):.0f} | {', '.join(f'{x:.0f}' for x in v)} |")
    for w in workers if a.rounds else []:
        ours = statistics.median(out["loader"][f"ddpbench files-jpeg local w{w}"])
        theirs = statistics.median(out["loader"][f"pytorch files-jpeg local w{w}"])
        print(f"workers {w}: ddpbench / PyTorch on JPEG files = {ours / theirs:.2f}")
    for key, (step, data, bound) in out["train"].items():
        print(f"train {key}: step {step:.0f} ms, data wait {data:.1f} ms, input-bound {bound}")
    write_json(a.json, out)


if __name__ == "__main__":
    main()
