#!/usr/bin/python3
"""fp32 against bf16 on every framework engine on this CPU (issue 33, "Precision").

  tests/bench/bench_precision_engines.py --build build [--rounds 3] [--samples 4096]
      [--epochs 3] [--engines pytorch,tensorflow,horovod,deepspeed] [--json F]

Each engine trains mnist-cnn on Fashion-MNIST (the first --samples training samples, the
full 10,000-sample test split), batch 32, SGD lr 0.05 momentum 0.9, one rank with one
thread, for --epochs epochs, at precision fp32 and bf16 (pytorch and horovod: torch
autocast; tensorflow: Keras' mixed_bfloat16 policy; deepspeed: its "bf16" config, ZeRO-1;
ddpbench's own engine where this tree runs it). Per run, from the stored results: the
throughput (samples/s over the non-warm-up steps), the last epoch's test accuracy, and
the rank's peak resident memory (GET /v1/runs/{id} memory). Engines and precisions are
interleaved within a round; the table shows the median of the rounds and the bf16/fp32
ratio. A benchmark: figures, never pass/fail. Hold /tmp/ddpb-bench.lock.

--kernels: instead, one process of .venv's torch times a training step (forward, backward,
SGD) of mnist-cnn and resnet18-cifar at batch 32 on one thread, fp32 against bf16 autocast,
interleaved over 9 rounds (median), and prints which oneDNN implementations the bf16 step
ran (ONEDNN_VERBOSE): what the engines' bf16 costs without the harness, and why.
"""
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_train import Daemon, bench_args, write_json  # noqa: E402

STRATEGY = {"ddpbench": "ddp", "pytorch": "ddp", "tensorflow": "ddp", "horovod": "horovod",
            "deepspeed": "zero1"}
PRECISIONS = ("fp32", "bf16")


def spec_of(engine, precision, samples, epochs):
    return {"name": f"bench precision {engine} {precision}", "workload": "train",
            "engine": engine, "strategy": STRATEGY[engine], "precision": precision,
            "model": "mnist-cnn", "batch_size": 32, "threads": 1, "world_size": 1,
            "epochs": epochs, "steps": 0, "warmup_steps": 5, "timeout_s": 3600,
            "dataset": {"name": "fashion-mnist", "samples": samples},
            "optimizer": {"type": "sgd", "lr": 0.05, "momentum": 0.9}}


def one(d, spec):
    """(throughput, test accuracy, peak RSS MiB) of one run, or None when it failed."""
    exp = d.ended(spec)
    if exp["status"] != "succeeded":
        print(f"  {spec['name']}: {exp['status']}: {[r['error'] for r in exp['runs']]}",
              flush=True)
        return None
    row = d.call(f"/v1/experiments/{exp['id']}/results")["rows"][0]
    run = d.call(f"/v1/runs/{exp['runs'][0]['id']}")
    peak = max(m["peak_rss_bytes"] for m in run["memory"]) / 2**20
    return row["throughput_mean"], run["epochs"][-1]["test_acc"], peak


def med(v):
    return statistics.median(v) if v else float("nan")


def report(res, engines):
    print("\nmnist-cnn on Fashion-MNIST, 1 rank x 1 thread, median of rounds")
    print(f"{'engine':<11} {'prec':<5} {'samples/s':>10} {'bf16/fp32':>9} {'test acc':>9} "
          f"{'peak MiB':>9} {'rounds':>6}")
    for e in engines:
        base = med([x[0] for x in res[e]["fp32"]])
        for p in PRECISIONS:
            xs = res[e][p]
            thr = med([x[0] for x in xs])
            print(f"{e:<11} {p:<5} {thr:>10.1f} {thr / base:>9.2f} "
                  f"{med([x[1] for x in xs]):>9.4f} {med([x[2] for x in xs]):>9.0f} "
                  f"{len(xs):>6}")


KERNELS = r"""
import statistics, sys, time, torch, torch.nn.functional as F
sys.path.insert(0, sys.argv[1])
import ddpb_torch_models as zoo
torch.set_num_threads(1)
name, steps = sys.argv[2], int(sys.argv[3])
c, h = (1, 28) if name == "mnist-cnn" else (3, 32)
m = zoo.build(name, c, h, h, 10)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
x, y = torch.randn(32, c, h, h), torch.randint(0, 10, (32,))
def run(bf16, n):
    t = time.perf_counter()
    for _ in range(n):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = m(x).float()
        F.cross_entropy(out, y).backward()
        opt.step()
    return (time.perf_counter() - t) / n * 1000
if steps == 0:  # one bf16 step, for ONEDNN_VERBOSE
    run(True, 1)
    sys.exit(0)
run(False, 2), run(True, 2)
ms = {False: [], True: []}
for r in range(9):
    for b in ((False, True) if r % 2 == 0 else (True, False)):
        ms[b].append(run(b, steps))
f, b = statistics.median(ms[False]), statistics.median(ms[True])
print(f"{name:<15} fp32 {f:8.2f} ms/step  bf16 {b:8.2f} ms/step  bf16/fp32 time {b / f:.2f}")
"""


def kernels():
    py = os.path.join(os.path.dirname(os.path.dirname(HERE)), ".venv", "bin", "python")
    engines = os.path.join(os.path.dirname(os.path.dirname(HERE)), "engines")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for name, steps in (("mnist-cnn", 30), ("resnet18-cifar", 2)):
        subprocess.run([py, "-c", KERNELS, engines, name, str(steps)], env=env, check=True)
    out = subprocess.run([py, "-c", KERNELS, engines, "mnist-cnn", "0"], check=True,
                         env=dict(env, ONEDNN_VERBOSE="1"), capture_output=True, text=True)
    seen = {}
    for line in out.stdout.splitlines():
        f = line.split(",")
        if len(f) > 3 and f[1] == "info" and f[3].startswith("isa:"):
            print("oneDNN", f[3])
        if len(f) > 5 and f[1] == "exec":
            seen[f"{f[3]} {f[5]} {f[4]}"] = seen.get(f"{f[3]} {f[5]} {f[4]}", 0) + 1
    for k, n in sorted(seen.items()):
        print(f"  {n:3d} x {k}")


def main():
    ap = bench_args(3, description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=4096)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--engines", default="pytorch,tensorflow,horovod,deepspeed")
    ap.add_argument("--kernels", action="store_true")
    a = ap.parse_args()
    if a.kernels:
        kernels()
        return
    engines = a.engines.split(",")
    res = {e: {p: [] for p in PRECISIONS} for e in engines}
    d = Daemon(a.build, 2)
    try:
        for r in range(a.rounds):
            for e in engines if r % 2 == 0 else list(reversed(engines)):
                for p in PRECISIONS if r % 2 == 0 else list(reversed(PRECISIONS)):
                    got = one(d, spec_of(e, p, a.samples, a.epochs))
                    if got:
                        res[e][p].append(got)
                        print(f"  round {r} {e} {p}: {got[0]:.1f} samples/s, acc {got[1]:.4f}, "
                              f"peak {got[2]:.0f} MiB", flush=True)
    finally:
        d.close()
    report(res, engines)
    write_json(a.json, res)


if __name__ == "__main__":
    main()
