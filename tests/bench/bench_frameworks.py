#!/usr/bin/python3
"""Framework choice and single-process strategies side by side under one ddpbenchd (issue
33, part C), in one run on one machine.

  tests/bench/bench_frameworks.py --build build [--rounds 3] [--models mnist-cnn,resnet18]
                                  [--json F]

points: Horovod's Keras binding (engine horovod, framework keras), TensorFlow's
  MultiWorkerMirroredStrategy (tensorflow ddp) and MirroredStrategy (tensorflow mirrored:
  one process, world_size replicas on logical CPU devices), PyTorch DDP (pytorch ddp) and
  PyTorch Lightning's DDP (lightning ddp), each at 1, 2 and 4 ranks or replicas, on
  bench_engines' models and fixed synthetic batches (mnist-cnn batch 64, 60 timed steps;
  resnet18 batch 32, 20), 1 thread a replica; throughput and speed-up from the stored
  results (each point against its own 1). Points and world sizes interleaved within a
  round, the order reversed every other round; the headline is the median of the rounds.
overhead: lightning and horovod-keras at 2 ranks on mnist-cnn under ddpbench against the
  same adapter under its own launcher (torchrun --standalone for Lightning; horovodrun
  --gloo for Horovod, the adapter keeping horovodrun's environment), each rank pinned to a
  CPU of its own with taskset as ddpbench pins them, report lines read from stdout,
  throughput computed as results do (bench_engines.torchrun's rule).

Ranks are unpinned (more CPU slots than CPUs): 4 ranks on a 2-CPU machine share CPUs, so
the 4-rank figures measure oversubscription; a benchmark, never pass/fail. Hold
/tmp/ddpb-bench.lock.
"""
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from bench_engines import MODELS, spec_of  # noqa: E402
from bench_train import Daemon, bench_args, write_json  # noqa: E402

# (label, engine, strategy, framework)
POINTS = [("horovod-keras", "horovod", "horovod", "keras"), ("tf-mwms", "tensorflow", "ddp", None),
          ("tf-mirrored", "tensorflow", "mirrored", None), ("pytorch-ddp", "pytorch", "ddp", None),
          ("lightning", "lightning", "ddp", None)]
WORLDS = (1, 2, 4)
VENV_PY = os.path.join(ROOT, ".venv", "bin", "python")


def point_spec(point, model, batch, shape, steps, world):
    label, engine, strategy, framework = point
    spec = spec_of(engine, strategy, model, batch, shape, steps, world)
    spec["name"] = f"bench {label} {model} x{world}"
    if framework:
        spec["framework"] = framework
    return spec


def throughput(lines):
    """Samples of all ranks over the sum of the slowest rank's non-warm-up step times."""
    steps = {}
    for line in lines:
        line = line[line.find("{"):] if "{" in line else ""
        if '"type":"step"' in line:
            ev = json.loads(line)
            if not ev["warmup"]:
                steps.setdefault(ev["step"], []).append(ev)
    samples = sum(e["samples"] for evs in steps.values() for e in evs)
    ms = sum(max(e["step_ms"] for e in evs) for evs in steps.values())
    return samples / (ms / 1000.0)


def own_launcher(spec, label):
    """Throughput of the adapter under its framework's own launcher (no ddpbench)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    py = VENV_PY if os.path.exists(VENV_PY) else "/usr/bin/python3"
    env = dict(os.environ, DDPB_SPEC=f.name, PYTHONPATH=os.path.join(ROOT, "engines"),
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="1")
    n = spec["world_size"]
    logs = tempfile.mkdtemp(prefix="ddpb-own-")
    # each rank on a CPU of its own, as ddpbench pins a run whose ranks fit (DDPB_CPUS):
    # unpinned, two ranks ran 1.4-1.5x slower here under torchrun, which is no harness cost
    ncpu = os.cpu_count()
    if label == "lightning":  # torch 1.13's torchrun: --redirects/--tee 1 (bench_engines)
        cmd = [py, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}",
               "--redirects", "1", "--tee", "1", "--log_dir", logs, "--no_python", "sh", "-c",
               f"exec taskset -c $((LOCAL_RANK % {ncpu})) {py} "
               f"{os.path.join(ROOT, 'engines', 'engine_lightning.py')}"]
    else:  # horovodrun numbers its workers HOROVOD_RANK; the adapter reads RANK
        cmd = [os.path.join(os.path.dirname(py), "horovodrun"), "-np", str(n), "-H",
               f"localhost:{n}", "--gloo", "sh", "-c", "RANK=$HOROVOD_RANK "
               f"WORLD_SIZE=$HOROVOD_SIZE exec taskset -c $((HOROVOD_LOCAL_RANK % {ncpu})) "
               f"{py} {os.path.join(ROOT, 'engines', 'engine_horovod_keras.py')}"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    os.unlink(f.name)
    if out.returncode != 0:
        raise SystemExit(f"{label} under its own launcher failed: {out.stderr[-2000:]}")
    lines = out.stdout.splitlines()
    if label == "lightning":
        lines = [x for p in glob.glob(os.path.join(logs, "*", "attempt_0", "*", "stdout.log"))
                 for x in open(p)]
    shutil.rmtree(logs, ignore_errors=True)
    return throughput(lines)


def part_points(d, rounds, models, res):
    rows = {}  # (model, label, world) -> results rows
    for r in range(rounds):
        for model, batch, shape, steps in models:
            for world in WORLDS:
                order = POINTS if r % 2 == 0 else POINTS[::-1]
                for p in order:
                    row = d.run(point_spec(p, model, batch, shape, steps, world))[0]
                    rows.setdefault((model, p[0], world), []).append(row)
            print(f"  round {r} {model}: " + ", ".join(
                f"{p[0]} x{w} {rows[(model, p[0], w)][-1]['throughput_mean']:.0f}"
                for p in POINTS for w in WORLDS), flush=True)
    for (model, label, world), rs in sorted(rows.items()):
        res["points"].append({"model": model, "point": label, "world": world,
                              "throughput": [x["throughput_mean"] for x in rs],
                              "single_process": rs[0].get("single_process"),
                              "test_acc": rs[-1].get("test_acc_mean"),
                              "median": statistics.median(x["throughput_mean"] for x in rs)})


def part_overhead(d, rounds, res):
    model, batch, shape, steps = MODELS[0]
    for p in (POINTS[4], POINTS[0]):
        spec = point_spec(p, model, batch, shape, steps, 2)
        ours, theirs = [], []
        for r in range(rounds):
            for who in ((0, 1) if r % 2 == 0 else (1, 0)):
                if who == 0:
                    ours.append(d.run(spec)[0]["throughput_mean"])
                else:
                    theirs.append(own_launcher(spec, p[0]))
            print(f"  overhead {p[0]} round {r}: ddpbench {ours[-1]:.0f} img/s, own launcher "
                  f"{theirs[-1]:.0f}", flush=True)
        res["overhead"][p[0]] = {"ddpbench": ours, "own": theirs}


def report(res):
    print("\n## points: images/s (median of rounds), speed-up against the same point at 1")
    base = {(e["model"], e["point"]): e["median"] for e in res["points"] if e["world"] == 1}
    print("| model | point | ranks/replicas | single process | images/s | speed-up | "
          "efficiency | rounds |")
    print("|---|---|---|---|---|---|---|---|")
    for e in res["points"]:
        sp = e["median"] / base[(e["model"], e["point"])]
        print(f"| {e['model']} | {e['point']} | {e['world']} | {e['single_process']} | "
              f"{e['median']:.1f} | {sp:.2f} | {sp / e['world']:.2f} | "
              f"{', '.join(f'{x:.0f}' for x in e['throughput'])} |")
    for label, o in res["overhead"].items():
        a, b = statistics.median(o["ddpbench"]), statistics.median(o["own"])
        ratios = [x / y for x, y in zip(o["ddpbench"], o["own"])]
        print(f"\n## overhead {label}: mnist-cnn x2 under ddpbench {a:.0f} img/s, under its "
              f"own launcher {b:.0f} img/s: ratio {a / b:.3f} (median of rounds' ratios "
              f"{statistics.median(ratios):.3f}; rounds {', '.join(f'{r:.3f}' for r in ratios)})")


def main():
    ap = bench_args(3)
    ap.add_argument("--models", default="mnist-cnn",
                    help="comma-separated subset of bench_engines' models (mnist-cnn, resnet18)")
    ap.add_argument("--no-overhead", action="store_true", help="skip the own-launcher part")
    ap.add_argument("--overhead-only", action="store_true", help="only the own-launcher part")
    a = ap.parse_args()
    models = [m for m in MODELS if m[0] in a.models.split(",")]
    res = {"points": [], "overhead": {}, "machine": os.uname().nodename,
           "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d")}
    d = Daemon(a.build, 8)
    try:
        if not a.overhead_only:
            part_points(d, a.rounds, models, res)
        if not a.no_overhead:
            part_overhead(d, a.rounds, res)
    finally:
        d.close()
    report(res)
    write_json(a.json, res)


if __name__ == "__main__":
    main()
