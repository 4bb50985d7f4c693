#!/usr/bin/python3
"""What observing a run costs (issue 17), in one run on one machine.

  tests/bench/bench_observe.py --build build [--rounds 5] [--json F]

train: ddpbench's C worker trains at 2 ranks (strategy ddp, SGD momentum, 1 thread a rank,
  one fixed synthetic batch) with nothing traced (trace_steps 0) against every step traced
  (trace_steps = all of them, the worst case: a trace line per rank and step on top of the
  step line). Memory and usage are reported in both (once per repeat and per epoch: no
  per-step cost). Figure: throughput traced / untraced, per round.
collective: allreduce at 2 ranks, 4 KiB to 4 MiB, 20 iterations, with none against all
  iterations traced (sent after each size's timed loop). Figure: busbw traced / untraced
  per size, per round.

Peers are the same program at its best settings (nothing traced); the two arms alternate
order round by round. Headline: the median of the rounds' ratios (1.00 = no cost).
memory (--part memory): what a rank holds training resnet18-cifar with Adam at 2 ranks,
  ddpbench's exact accounting for ddp, zero1 and zero2 beside what PyTorch (DDP,
  ZeroRedundancyOptimizer) and DeepSpeed (ZeRO stages 1 and 2) hold in their own tensors,
  and every run's peak RSS: the ZeRO sharding as each implementation does it.
engines (--part engines): what the framework engines' trace and gradient readiness cost
  (issue 33): each engine trains mnist-cnn at 2 ranks (batch 32, 1 thread a rank) with
  every step after warm-up traced (trace_steps = all of them, the worst case; rank 0's
  readiness hooks on too) against a daemon whose engines observe nothing
  (DDPBENCH_OBSERVE_OFF=1 in its environment: no trace, no hooks), the arms alternating
  order round by round. Figure: step_ms observed / unobserved, per round; the bound is
  1.02 (<= 2 % of step time).
steps (--part steps): the same cost inside one process group, which a shared machine's
  load disturbs less than separate runs: observe_engine_steps.py runs the engines' real
  loop and adapters at 2 ranks (pytorch: two processes over gloo; horovod: horovodrun
  --gloo), alternating blocks of --block steps observed and unobserved, 4 of each a round.
  Figure per round: the arms' median and 20th-percentile step time, observed /
  unobserved; headline: the median over the rounds. observe_cost_micro.py times the
  observing code itself (the Tracer calls of a step, the readiness hooks of a backward).
A benchmark: figures and ratios, never pass/fail. Hold /tmp/ddpb-bench.lock.
"""
import json
import subprocess
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_train import Daemon, bench_args, train_spec, write_json  # noqa: E402

MODELS = [("mnist-cnn", 64, [1, 28, 28], 60), ("resnet18-cifar", 32, [3, 32, 32], 12)]
COLL = {"workload": "collective", "world_size": 2, "min_bytes": "4K", "max_bytes": "4M",
        "factor": 16, "iters": 20, "warmup": 5}


def train_pair(d, model, batch, shape, steps, traced_first):
    """(untraced, traced) throughput of one round."""
    out = {}
    for traced in ([True, False] if traced_first else [False, True]):
        spec = train_spec(model, batch, shape, steps)
        spec.update(world_size=2, strategy="ddp",
                    trace_steps=spec["steps"] if traced else 0,
                    name=f"observe {model} {'traced' if traced else 'untraced'}")
        out[traced] = d.run(spec)[0]["throughput_mean"]
    return out[False], out[True]


def coll_pair(d, traced_first):
    """({bytes: busbw} untraced, traced) of one round."""
    out = {}
    for traced in ([True, False] if traced_first else [False, True]):
        spec = dict(COLL, trace_steps=COLL["iters"] if traced else 0,
                    name=f"observe allreduce {'traced' if traced else 'untraced'}")
        out[traced] = {r["bytes"]: r["busbw_gbs_mean"] for r in d.run(spec)}
    return out[False], out[True]


MEMORY_RUNS = [("ddpbench", "ddp"), ("ddpbench", "zero1"), ("ddpbench", "zero2"),
               ("pytorch", "ddp"), ("pytorch", "zero1"), ("deepspeed", "zero1"),
               ("deepspeed", "zero2")]


def part_memory(d):
    """Each rank's memory per (engine, strategy), as GET /v1/runs/ID stores it."""
    out = []
    for engine, strategy in MEMORY_RUNS:
        spec = train_spec("resnet18-cifar", 32, [3, 32, 32], 2)
        spec.update(world_size=2, engine=engine, strategy=strategy, trace_steps=0,
                    optimizer={"type": "adam", "lr": 0.001},
                    name=f"observe memory {engine} {strategy}")
        run = d.call(f"/v1/runs/{d.finish(spec)['runs'][0]['id']}")
        out.append({"engine": engine, "strategy": strategy, "memory": run["memory"]})
    return out


def report_memory(rows):
    mib = lambda v: "-" if v is None else f"{v / 2**20:.2f}"  # noqa: E731
    print("| engine | strategy | rank | params | grads | optimizer | comm buffers | "
          "activations | peak RSS |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        for m in r["memory"]:
            print(f"| {r['engine']} | {r['strategy']} | {m['rank']} | {mib(m['params_bytes'])} | "
                  f"{mib(m['grads_bytes'])} | {mib(m['optimizer_bytes'])} | "
                  f"{mib(m['comm_bytes'])} | {mib(m['activations_bytes'])} | "
                  f"{mib(m['peak_rss_bytes'])} |")


ENGINES = {"pytorch": "ddp", "horovod": "horovod", "deepspeed": "zero1"}


def engine_pair(on, off, engine, steps, observed_first):
    """(unobserved, observed) step_ms of one round of engine."""
    out = {}
    for observed in ([True, False] if observed_first else [False, True]):
        spec = train_spec("mnist-cnn", 32, [1, 28, 28], steps)
        spec.update(world_size=2, engine=engine, strategy=ENGINES[engine], eval=False,
                    trace_steps=min(steps, 100), name=f"observe {engine} {observed}")
        d = on if observed else off
        exp = d.finish(spec)
        rows = d.call(f"/v1/experiments/{exp['id']}/results")["rows"]
        traced = d.call(f"/v1/runs/{exp['runs'][0]['id']}/trace")["otherData"]["traced_steps"]
        if traced != (2 * min(steps, 100) if observed else 0):
            sys.exit(f"{engine}: {traced} traced steps where the arm "
                     f"{'observes' if observed else 'does not'}: DDPBENCH_OBSERVE_OFF not passed on?")
        out[observed] = rows[0]["step_ms_mean"]
    return out[False], out[True]


def part_engines(a):
    """Each engine's observed / unobserved step time over a.rounds interleaved rounds."""
    on = Daemon(a.build, 2 * os.cpu_count())
    os.environ["DDPBENCH_OBSERVE_OFF"] = "1"  # the second daemon's engines, and only its
    try:
        off = Daemon(a.build, 2 * os.cpu_count())
    finally:
        del os.environ["DDPBENCH_OBSERVE_OFF"]
    res = {}
    try:
        for r in range(a.rounds):
            for engine in a.engines.split(","):
                pair = engine_pair(on, off, engine, a.steps, observed_first=r % 2 == 1)
                res.setdefault(engine, []).append(pair)
    finally:
        on.close()
        off.close()
    print(f"## bench_observe --part engines, {a.rounds} rounds, mnist-cnn 2 ranks, "
          f"{a.steps} steps all traced: median (min-max) of the rounds' ratios")
    print("| engine | step_ms unobserved | step_ms observed | observed / unobserved |")
    print("|---|---:|---:|---:|")
    for engine, pairs in res.items():
        ratios = [t / u for u, t in pairs]
        print(f"| {engine} | {statistics.median(u for u, _ in pairs):.3f} | "
              f"{statistics.median(t for _, t in pairs):.3f} | {statistics.median(ratios):.4f} "
              f"({min(ratios):.4f}-{max(ratios):.4f}) |")
    return res


def steps_of(engine, rounds, block):
    """observe_engine_steps.py's rounds for engine at 2 ranks."""
    script, py = os.path.join(HERE, "observe_engine_steps.py"), sys.executable
    args = [engine, str(rounds), str(block)]
    if engine == "horovod":
        hvd = os.path.join(os.path.dirname(py), "horovodrun")
        outs = [subprocess.run([hvd, "-np", "2", "-H", "localhost:2", "--gloo", py, script,
                                *args], capture_output=True, text=True, timeout=1800).stdout]
    else:
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT="29613", WORLD_SIZE="2")
        ps = [subprocess.Popen([py, script, *args], env=dict(env, RANK=str(r)),
                               stdout=subprocess.PIPE, text=True) for r in (0, 1)]
        outs = [p.communicate(timeout=1800)[0] for p in ps]
    for line in "".join(outs).splitlines():
        if "OBSERVE-STEPS " in line:
            return json.loads(line.split("OBSERVE-STEPS ", 1)[1])["rounds"]
    sys.exit(f"{engine}: observe_engine_steps.py printed no result")


def part_steps(a):
    res = {e: steps_of(e, a.rounds, a.block) for e in a.engines.split(",") if e != "deepspeed"}
    print(f"## bench_observe --part steps, {a.rounds} rounds of 4 + 4 blocks of {a.block} "
          "steps, mnist-cnn 2 ranks: median (min-max) over rounds of observed / unobserved")
    print("| engine | step_ms unobserved (median) | ratio of medians | ratio of 20th pct |")
    print("|---|---:|---:|---:|")
    for engine, rounds in res.items():
        cells = []
        for qi in (0, 1):
            r = [x[qi][1] / x[qi][0] for x in rounds]
            cells.append(f"{statistics.median(r):.4f} ({min(r):.3f}-{max(r):.3f})")
        print(f"| {engine} | {statistics.median(x[0][0] for x in rounds):.3f} | {cells[0]} | "
              f"{cells[1]} |")
    return res


def main():
    ap = bench_args(5)
    ap.add_argument("--part", default="cost", choices=["cost", "memory", "engines", "steps"])
    ap.add_argument("--block", type=int, default=10, help="--part steps: steps a block")
    ap.add_argument("--engines", default=",".join(ENGINES), help="--part engines: which")
    ap.add_argument("--steps", type=int, default=60, help="--part engines: timed steps")
    a = ap.parse_args()
    os.environ.update(MALLOC_MMAP_MAX_="0", MALLOC_TRIM_THRESHOLD_="4294967296")
    if a.part in ("engines", "steps"):
        write_json(a.json, part_engines(a) if a.part == "engines" else part_steps(a))
        return
    d = Daemon(a.build, 2 * os.cpu_count())
    if a.part == "memory":
        try:
            rows = part_memory(d)
        finally:
            d.close()
        print("## bench_observe --part memory, MiB per rank (resnet18-cifar, Adam, 2 ranks)")
        report_memory(rows)
        write_json(a.json, rows)
        return
    res = {"date": time.strftime("%Y-%m-%d %H:%M"), "train": {}, "collective": {}}
    try:
        for r in range(a.rounds):
            for model, batch, shape, steps in MODELS:
                u, t = train_pair(d, model, batch, shape, steps, traced_first=r % 2 == 1)
                res["train"].setdefault(model, []).append((u, t))
            u, t = coll_pair(d, traced_first=r % 2 == 1)
            for size in u:
                res["collective"].setdefault(size, []).append((u[size], t[size]))
    finally:
        d.close()
    print(f"## bench_observe {res['date']}, {a.rounds} rounds, median (min-max) of the "
          "rounds' ratios traced / untraced")
    print("| what | untraced | traced | ratio |")
    print("|---|---|---|---|")
    for model, pairs in res["train"].items():
        ratios = [t / u for u, t in pairs]
        print(f"| {model} 2 ranks, images/s | {statistics.median(u for u, _ in pairs):.1f} | "
              f"{statistics.median(t for _, t in pairs):.1f} | {statistics.median(ratios):.3f} "
              f"({min(ratios):.3f}-{max(ratios):.3f}) |")
    for size, pairs in sorted(res["collective"].items()):
        ratios = [t / u for u, t in pairs if u > 0]
        print(f"| allreduce {size} B, busbw GB/s | {statistics.median(u for u, _ in pairs):.3f} | "
              f"{statistics.median(t for _, t in pairs):.3f} | {statistics.median(ratios):.3f} "
              f"({min(ratios):.3f}-{max(ratios):.3f}) |")
    write_json(a.json, res)


if __name__ == "__main__":
    main()
