#!/usr/bin/python3
"""Data, model and pipeline parallelism at 4 ranks: the comparison DDLBench draws (issue 19).

  tests/bench/bench_ddlbench.py --build build [--rounds 3] [--models resnet18-cifar,gpt2-tiny]
                                [--batch B] [--steps N] [--no-hybrid] [--json F]

One engine (ddpbench's CPU worker), one model, one global batch; only the distribution
changes. B is the per-rank batch of data parallelism (default 8 for both models):

  data    world_size 4, pipeline 1, strategy ddp, batch_size B (4 replicas x B)
  model   world_size 4, pipeline 4, micro_batches 1, batch_size 4B (one replica; plain model
          parallelism: one stage computes at a time)
  gpipe   world_size 4, pipeline 4, micro_batches 8, schedule gpipe, batch_size 4B
  1f1b    world_size 4, pipeline 4, micro_batches 8, schedule 1f1b, batch_size 4B
  hybrid  world_size 4, pipeline 2 (2 replicas of 2 stages), micro_batches 4, 1f1b, ddp,
          batch_size 2B

Models: resnet18-cifar (torchvision's resnet18 with the CIFAR stem) on synthetic 3x32x32
images, and gpt2-tiny on synthetic tokens, seq_len 64. SGD momentum 0.9 for resnet18-cifar,
Adam for gpt2-tiny; 1 thread a rank, trace_steps 0; 3 warm-up steps, then 12 timed steps
(resnet18-cifar) or 40 (gpt2-tiny), --steps for both. resnet18-cifar's
batch norm normalises per micro-batch in the pipelined runs (as GPipe's does): the figures
are throughput and memory, not accuracy.

Per configuration: throughput (the results' throughput_mean, samples/s of the global batch)
and its ratio to data parallelism; step ms (results' step_ms_mean); memory per rank: the
largest rank's params + grads + optimizer + comm + activations (GET /v1/runs/ID "memory",
MiB; the largest rank's activation workspace beside it) and the largest peak RSS;
parameters held by the largest rank; the measured bubble
fraction (idle over step time, every rank pooled) beside (P-1)/(M+P-1); point-to-point MB
sent per step (all ranks together; the results' p2p_bytes is per rank, times world_size)
and the mean point-to-point ms per rank and step.

Every run is its own experiment, one at a time. The daemon gets 4x the machine's CPUs as
CPU slots (at least 4), more slots than CPUs, so it pins nothing; on a 2-CPU machine the 4
ranks oversubscribe the CPUs. Each round runs every configuration of every model, the
configurations rotated per round (and the models' order alternated). Headline: the median of rounds. A benchmark: it prints
figures, never pass/fail. Hold /tmp/ddpb-bench.lock.
"""
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_train import Daemon, bench_args, write_json  # noqa: E402

WORLD = 4
MIB = 1024.0 * 1024.0
# model -> (dataset, extra spec fields, optimizer, timed steps: a resnet18-cifar run is ~30 s)
MODELS = {
    "resnet18-cifar": ({"name": "synthetic", "shape": [3, 32, 32]}, {},
                       {"type": "sgd", "lr": 0.01, "momentum": 0.9}, 12),
    "gpt2-tiny": ({"name": "synthetic"}, {"seq_len": 64},
                  {"type": "adam", "lr": 0.001}, 40),
}
WARMUP = 3
# label -> (pipeline, micro_batches, schedule, batch multiplier of B)
CONFIGS = {
    "data": (1, 1, None, 1),
    "model": (WORLD, 1, None, WORLD),
    "gpipe": (WORLD, 8, "gpipe", WORLD),
    "1f1b": (WORLD, 8, "1f1b", WORLD),
    "hybrid": (2, 4, "1f1b", 2),
}
DESCR = {
    "data": "data: 4 replicas x B, ddp",
    "model": "model: 4 stages, 1 micro-batch",
    "gpipe": "pipeline gpipe: 4 stages, 8 micro-batches",
    "1f1b": "pipeline 1f1b: 4 stages, 8 micro-batches",
    "hybrid": "hybrid: 2 replicas x 2 stages, 4 micro-batches, ddp",
}
MEM = ("params_bytes", "grads_bytes", "optimizer_bytes", "comm_bytes", "activations_bytes")


def spec_of(model, label, batch, steps):
    dataset, extra, optim, _ = MODELS[model]
    pipe, micro, sched, mult = CONFIGS[label]
    spec = {"name": f"bench ddlbench: {model} {label}", "workload": "train", "model": model,
            "world_size": WORLD, "strategy": "ddp", "batch_size": batch * mult,
            "threads": 1, "steps": steps + WARMUP, "warmup_steps": WARMUP, "trace_steps": 0,
            "dataset": dict(dataset), "optimizer": dict(optim), "timeout_s": 1800}
    spec.update(extra)
    if pipe > 1:
        spec.update(pipeline=pipe, micro_batches=micro)
        if sched:
            spec["schedule"] = sched
    return spec


def measure(d, model, label, batch, steps, r):
    exp = d.finish(spec_of(model, label, batch, steps))
    row = d.call(f"/v1/experiments/{exp['id']}/results")["rows"][0]
    run = d.call(f"/v1/runs/{exp['runs'][0]['id']}")
    mem = run["memory"]

    def biggest(key):
        vals = [m[key] for m in mem if m.get(key) is not None]
        return max(vals) if vals else None

    held = [sum(m[k] or 0 for k in MEM) for m in mem]
    rec = {"round": r, "model": model, "config": label, "experiment": exp["id"],
           "run": exp["runs"][0]["id"],
           "throughput": row["throughput_mean"], "step_ms": row["step_ms_mean"],
           "mem_bytes": max(held) if held else None, "peak_rss_bytes": biggest("peak_rss_bytes"),
           "params_bytes": biggest("params_bytes"), "act_bytes": biggest("activations_bytes"),
           "bubble_fraction": row.get("bubble_fraction"),
           "bubble_theory": row.get("bubble_theory"),
           "p2p_ms": row.get("p2p_ms"),
           "p2p_bytes_rank": row.get("p2p_bytes"),
           "memory": mem, "row": {k: v for k, v in row.items() if not isinstance(v, (dict, list))}}
    return rec


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def report(recs, models, configs, batch):
    for model in models:
        dataset, extra, optim, _ = MODELS[model]
        what = ("synthetic 3x32x32" if model == "resnet18-cifar"
                else f"synthetic tokens, seq_len {extra.get('seq_len')}")
        print(f"\n### {model} ({what}), global batch {WORLD * batch}, {WORLD} ranks "
              f"(median of rounds)\n")
        print("| configuration | samples/s (rounds' range) | vs data | step ms | memory / rank "
              "MiB | of which activations | peak RSS / rank MiB | params / rank (M) | bubble "
              "measured | bubble theory | p2p MB / step | p2p ms / rank |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        data = med([x["throughput"] for x in recs if x["model"] == model
                    and x["config"] == "data"])
        for label in configs:
            rs = [x for x in recs if x["model"] == model and x["config"] == label]
            if not rs:
                continue

            def m(key, scale=1.0, spec=".1f"):
                v = med([x[key] for x in rs])
                return "-" if v is None else format(v * scale, spec)

            thr = [x["throughput"] for x in rs]
            t = med(thr)
            print(f"| {DESCR[label]} | {t:.1f} ({min(thr):.1f}-{max(thr):.1f}) | "
                  + (f"{t / data:.2f}" if data else "-") + " | "
                  f"{m('step_ms')} | {m('mem_bytes', 1 / MIB)} | {m('act_bytes', 1 / MIB)} | "
                  f"{m('peak_rss_bytes', 1 / MIB)} | {m('params_bytes', 0.25e-6, '.3f')} | "
                  f"{m('bubble_fraction', 1, '.3f')} | {m('bubble_theory', 1, '.3f')} | "
                  f"{m('p2p_bytes_rank', WORLD / 1e6, '.2f')} | {m('p2p_ms')} |")


def main():
    ap = bench_args(3)
    ap.add_argument("--models", default="resnet18-cifar,gpt2-tiny")
    ap.add_argument("--batch", type=int, default=8, help="B: per-rank batch of data parallelism")
    ap.add_argument("--steps", type=int, default=None,
                    help="timed steps per run (default per model), after 3 warm-up steps")
    ap.add_argument("--no-hybrid", action="store_true")
    a = ap.parse_args()
    models = a.models.split(",")
    configs = [c for c in CONFIGS if not (a.no_hybrid and c == "hybrid")]
    os.environ.setdefault("MALLOC_MMAP_MAX_", "0")
    os.environ.setdefault("MALLOC_TRIM_THRESHOLD_", "4294967296")
    d = Daemon(a.build, max(WORLD, 4 * os.cpu_count()))
    recs = []
    t0 = time.time()
    try:
        for r in range(a.rounds):
            order = configs[r % len(configs):] + configs[:r % len(configs)]
            for model in (models if r % 2 == 0 else models[::-1]):
                steps = a.steps or MODELS[model][3]
                for label in order:
                    rec = measure(d, model, label, a.batch, steps, r)
                    recs.append(rec)
                    print(f"  round {r} {model} {label}: {rec['throughput']:.1f} samples/s, "
                          f"step {rec['step_ms']:.1f} ms, bubble "
                          f"{fmt(rec['bubble_fraction'], '.3f')} (theory "
                          f"{fmt(rec['bubble_theory'], '.3f')}), memory "
                          f"{fmt(rec['mem_bytes'] and rec['mem_bytes'] / MIB, '.1f')} MiB, "
                          f"{fmt(rec['row'].get('cpu_util_mean'), '.2f')} cores a rank "
                          f"[{time.time() - t0:.0f} s]", flush=True)
    finally:
        d.close()
    report(recs, models, configs, a.batch)
    write_json(a.json, {"date": time.strftime("%Y-%m-%d %H:%M"), "batch": a.batch,
                        "world": WORLD, "rounds": a.rounds, "records": recs})


if __name__ == "__main__":
    main()
