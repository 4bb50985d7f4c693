#!/usr/bin/python3
"""Every engine side by side under one ddpbenchd (issue 16), in one run on one machine.

  tests/bench/bench_engines.py --build build [--rounds 3] [--json F]

engines: ddpbench's own C worker (strategy ddp), pytorch (DDP, gloo), horovod
  (DistributedOptimizer, Gloo), tensorflow (MultiWorkerMirroredStrategy, RING) and deepspeed
  (ZeRO-1, gloo) train mnist-cnn (1x28x28, batch 64, 60 timed steps) and resnet18 (3x32x32,
  batch 32, 20 timed steps) on one fixed synthetic batch, SGD momentum 0.9, 1 thread a
  rank, at 1, 2 and 4 ranks; each run is an experiment over REST and its figures are the
  stored results (throughput, speed-up against the same engine's 1 rank, efficiency, the
  phases each engine observes). Engines and world sizes are interleaved within a round.
overhead: the pytorch engine at 2 ranks on mnist-cnn under ddpbench against the same
  adapter (engines/engine_pytorch.py) under plain torchrun (python3 -m torch.distributed.run,
  --standalone), its report lines read from stdout; throughput computed the same way as
  results do (samples of all ranks over the sum of the slowest rank's step times).
  Interleaved round by round; the goal is a ratio within the rounds' noise.

Ranks are unpinned (more CPU slots than CPUs), so 4 ranks on a 2-CPU machine share CPUs:
the 4-rank figures there measure oversubscription, and the table says so. Headline: the
median of the rounds. A benchmark: figures and ratios, never pass/fail. Hold
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
from bench_train import Daemon, bench_args, train_spec, write_json  # noqa: E402

ENGINES = [("ddpbench", "ddp"), ("pytorch", "ddp"), ("horovod", "horovod"),
           ("tensorflow", "ddp"), ("deepspeed", "zero1")]
MODELS = [("mnist-cnn", 64, [1, 28, 28], 60), ("resnet18", 32, [3, 32, 32], 20)]
WORLDS = (1, 2, 4)
PHASES = ("data_ms", "forward_ms", "backward_ms", "comm_ms", "comm_exposed_ms",
          "optimizer_ms")


def spec_of(engine, strategy, model, batch, shape, steps, world):
    spec = train_spec(model, batch, shape, steps)
    spec.update(engine=engine, strategy=strategy, world_size=world,
                name=f"bench {engine} {model} x{world}")
    return spec


def torchrun(spec):
    """Throughput of the pytorch adapter under plain torchrun, from its stdout reports."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    venv = os.path.join(ROOT, ".venv", "bin", "python")
    env = dict(os.environ, DDPB_SPEC=f.name, PYTHONPATH=os.path.join(ROOT, "engines"),
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    logs = tempfile.mkdtemp(prefix="ddpb-torchrun-")
    # --redirects/--tee 1: torch 1.13's default "0" fails under Python 3.11 (its Std flag
    # enum no longer iterates over NONE), so each rank's stdout goes to a file under logs
    cmd = [venv if os.path.exists(venv) else "/usr/bin/python3", "-m",
           "torch.distributed.run", "--standalone", f"--nproc_per_node={spec['world_size']}",
           "--redirects", "1", "--tee", "1", "--log_dir", logs,
           os.path.join(ROOT, "engines", "engine_pytorch.py")]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    os.unlink(f.name)
    if out.returncode != 0:
        raise SystemExit(f"torchrun failed: {out.stderr[-2000:]}")
    steps = {}
    for path in glob.glob(os.path.join(logs, "*", "attempt_0", "*", "stdout.log")):
        for line in open(path):
            if line.startswith("{") and '"type":"step"' in line:
                ev = json.loads(line)
                if not ev["warmup"]:
                    steps.setdefault(ev["step"], []).append(ev)
    shutil.rmtree(logs, ignore_errors=True)
    samples = sum(e["samples"] for evs in steps.values() for e in evs)
    ms = sum(max(e["step_ms"] for e in evs) for evs in steps.values())
    return samples / (ms / 1000.0)


def stored_runner(d):
    """For --reuse-state: the r-th experiment named like spec, in submission order, of a
    state directory an earlier run of this script left (its results, re-read)."""
    by_name, offset = {}, 0
    while True:
        page = d.call(f"/v1/experiments?limit=200&offset={offset}")
        for e in page["items"]:
            by_name.setdefault(e["name"], []).append(e["id"])
        offset += len(page["items"])
        if not page["items"] or offset >= page["total"]:
            break
    seen = {}

    def run(spec):
        ids = sorted(by_name.get(spec["name"], []))
        k = seen.get(spec["name"], 0)
        seen[spec["name"]] = k + 1
        if k >= len(ids):
            raise SystemExit(f"--reuse-state: no round {k} of {spec['name']!r}")
        return d.call(f"/v1/experiments/{ids[k]}/results")["rows"]
    return run


def part_engines(run, rounds, res, engines=ENGINES):
    rows = {}  # (model, engine, world) -> list of results rows
    for r in range(rounds):
        for model, batch, shape, steps in MODELS:
            for world in WORLDS:
                order = engines if r % 2 == 0 else engines[::-1]
                for engine, strategy in order:
                    row = run(spec_of(engine, strategy, model, batch, shape, steps, world))[0]
                    rows.setdefault((model, engine, world), []).append(row)
            print(f"  round {r} {model}: " + ", ".join(
                f"{e} x{w} {rows[(model, e, w)][-1]['throughput_mean']:.0f}"
                for e, _ in engines for w in WORLDS), flush=True)
    for (model, engine, world), rs in sorted(rows.items()):
        med = {k: statistics.median(x[k] for x in rs if x.get(k) is not None)
               if any(x.get(k) is not None for x in rs) else None
               for k in ("throughput_mean", *PHASES)}
        res["engines"].append({"model": model, "engine": engine, "world": world,
                               "throughput": [x["throughput_mean"] for x in rs],
                               "median": med})


def part_overhead(d, rounds, res):
    model, batch, shape, steps = MODELS[0]
    spec = spec_of("pytorch", "ddp", model, batch, shape, steps, 2)
    ours, theirs = [], []
    for r in range(rounds):
        for who in ((0, 1) if r % 2 == 0 else (1, 0)):
            if who == 0:
                ours.append(d.run(spec)[0]["throughput_mean"])
            else:
                theirs.append(torchrun(spec))
        print(f"  overhead round {r}: ddpbench {ours[-1]:.0f} img/s, torchrun "
              f"{theirs[-1]:.0f}", flush=True)
    res["overhead"] = {"ddpbench": ours, "torchrun": theirs}


def report(res):
    print("\n## engines: images/s (median of rounds), speed-up and efficiency against the "
          "same engine at 1 rank")
    base = {(e["model"], e["engine"]): e["median"]["throughput_mean"]
            for e in res["engines"] if e["world"] == 1}
    print("| model | engine | ranks | images/s | speed-up | efficiency | data | forward | "
          "backward | comm | exposed | optimizer (ms) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for e in res["engines"]:
        m = e["median"]
        sp = m["throughput_mean"] / base[(e["model"], e["engine"])]
        ph = " | ".join("-" if m[p] is None else f"{m[p]:.2f}" for p in PHASES)
        print(f"| {e['model']} | {e['engine']} | {e['world']} | {m['throughput_mean']:.1f} | "
              f"{sp:.2f} | {sp / e['world']:.2f} | {ph} |")
    o = res.get("overhead")
    if o:
        a, b = statistics.median(o["ddpbench"]), statistics.median(o["torchrun"])
        ratios = [x / y for x, y in zip(o["ddpbench"], o["torchrun"])]
        print(f"\n## overhead: pytorch mnist-cnn x2 under ddpbench {a:.0f} img/s, under "
              f"torchrun {b:.0f} img/s: ratio {a / b:.3f} (rounds {', '.join(f'{r:.3f}' for r in ratios)})")


def main():
    ap = bench_args(3)
    ap.add_argument("--engines", help="comma-separated subset of the engines (default: all)")
    ap.add_argument("--no-overhead", action="store_true", help="skip the torchrun part")
    ap.add_argument("--reuse-state", help="re-read the engine rounds an earlier run stored "
                    "in this state directory instead of running them (the overhead part runs)")
    a = ap.parse_args()
    res = {"engines": [], "machine": os.uname().nodename, "cpus": os.cpu_count(),
           "date": time.strftime("%Y-%m-%d")}
    d = Daemon(a.build, 8, state=a.reuse_state)
    try:
        engines = [e for e in ENGINES if not a.engines or e[0] in a.engines.split(",")]
        part_engines(stored_runner(d) if a.reuse_state else d.run, a.rounds, res, engines)
        print(f"  engine rounds stored in {d.state}", flush=True)
        if not a.no_overhead:
            part_overhead(d, a.rounds, res)
    finally:
        d.close()
    report(res)
    write_json(a.json, res)


if __name__ == "__main__":
    main()
