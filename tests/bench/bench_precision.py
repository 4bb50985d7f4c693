#!/usr/bin/python3
"""What precision bf16 costs ddpbench's own engine on this CPU (issue 33).

  tests/bench/bench_precision.py --build build [--rounds 3] [--models M,...] [--json F]

Training throughput (images/s, the run's stored throughput_mean), 1 rank, one fixed
synthetic batch, SGD momentum 0.9: mnist-cnn 1x28x28 batch 64 on 1 thread and
resnet18-cifar 3x32x32 batch 32 on 2 threads (bench_train.py's "single" rows), in fp32 and
bf16 on two daemons:
  native  the machine as it is: bf16 runs oneDNN's bf16 kernels where the CPU has them
          (AVX512-BF16: env bf16_path "onednn-native");
  avx2    every worker under ONEDNN_MAX_CPU_ISA=AVX2, which hides AVX-512 from oneDNN, as
          on an AVX2-only CPU: fp32 runs oneDNN's AVX2 kernels and bf16 has no kernels, so
          it runs "emulated-storage" (fp32 kernels on operands rounded to bf16).
Each variant's bf16_path is read back from its run's env, so the table says which path
ran. Variants interleave round by round (the order rotates); the table is the median of
the rounds, bf16 / fp32 the ratio of the medians. A benchmark: it prints figures, never
pass/fail. Hold /tmp/ddpb-bench.lock.
"""
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_train import Daemon, bench_args, train_spec, write_json  # noqa: E402

MODELS = {"mnist-cnn": (64, 1, [1, 28, 28], 60), "resnet18-cifar": (32, 2, [3, 32, 32], 15)}
VARIANTS = [("native", "fp32"), ("native", "bf16"), ("avx2", "fp32"), ("avx2", "bf16")]


def run_one(d, model, precision):
    """(images/s, bf16_path or None) of one run."""
    batch, threads, shape, steps = MODELS[model]
    spec = train_spec(model, batch, shape, steps, threads)
    spec["precision"] = precision
    exp = d.finish(spec)
    rows = d.call(f"/v1/experiments/{exp['id']}/results")["rows"]
    run = d.call(f"/v1/runs/{exp['runs'][0]['id']}")
    envs = [e.get("env", {}) for e in run.get("env", [])]
    path = next((e["bf16_path"] for e in envs if "bf16_path" in e), None)
    return rows[0]["throughput_mean"], path


def main():
    ap = bench_args(3, description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    a = ap.parse_args()
    daemons = {"native": Daemon(a.build, 4)}
    os.environ["ONEDNN_MAX_CPU_ISA"] = "AVX2"  # inherited by the second daemon's workers
    daemons["avx2"] = Daemon(a.build, 4)
    del os.environ["ONEDNN_MAX_CPU_ISA"]
    res = {"rounds": a.rounds, "models": {}}
    try:
        for model in a.models.split(","):
            got = {v: [] for v in VARIANTS}
            paths = {}
            for r in range(a.rounds):
                order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
                for isa, prec in order:
                    ips, path = run_one(daemons[isa], model, prec)
                    got[(isa, prec)].append(ips)
                    paths[(isa, prec)] = path
                print(f"  {model} round {r}: " + ", ".join(
                    f"{isa}/{prec} {got[(isa, prec)][-1]:.1f}" for isa, prec in VARIANTS),
                    flush=True)
            res["models"][model] = {f"{i}/{p}": {"images_s": got[(i, p)], "bf16_path": paths[(i, p)]}
                                    for i, p in VARIANTS}
    finally:
        for d in daemons.values():
            d.close()
    print(f"\n### fp32 against bf16, ddpbench's engine, 1 rank (median of {a.rounds} rounds, "
          "images/s)\n")
    print("| model | oneDNN ISA | fp32 | bf16 | bf16 path | bf16 / fp32 | rounds fp32 | rounds bf16 |")
    print("|---|---|---|---|---|---|---|---|")
    for model, m in res["models"].items():
        for isa in ("native", "avx2"):
            f, b = m[f"{isa}/fp32"], m[f"{isa}/bf16"]
            mf, mb = statistics.median(f["images_s"]), statistics.median(b["images_s"])
            print(f"| {model} | {isa} | {mf:.1f} | {mb:.1f} | {b['bf16_path']} | "
                  f"{mb / mf:.2f} | " + ", ".join(f"{v:.1f}" for v in f["images_s"]) + " | "
                  + ", ".join(f"{v:.1f}" for v in b["images_s"]) + " |")
    write_json(a.json, res)


if __name__ == "__main__":
    main()
