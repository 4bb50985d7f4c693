#!/usr/bin/python3
"""How well the performance model (docs/model.md) predicts what ddpbench measures.

  tests/bench/bench_model.py --build build [--rounds 3] [--models mnist-cnn,resnet18]
                             [--worlds 2,4] [--json F]

The peer is the measurement itself: every round runs, one experiment at a time, a
collective sweep (allreduce, reduce_scatter, all_gather at every world size, 4 KiB to
64 MiB by factors of 2, 20 iterations, 2 repeats), then for each model each strategy's one-rank run, then each strategy at each world
size. Each multi-rank run is predicted by POST /v1/predict from that round's one-rank run
of its strategy, over that round's fits, with the placement it had (ranks_per_node = world
size: every rank on this machine), which is the same code a results row runs. The error is
(predicted - measured) / measured step time; the headline is the median over rounds, with
the rounds' range. The phases say where a prediction misses: compute (data + forward +
backward + optimizer) and exposed communication, each predicted against measured.

Conditions as bench_train.py: ranks unpinned (more CPU slots than CPUs), 1 thread a rank,
the glibc settings that keep freed memory, one run at a time, strategies rotated per round.
A benchmark: it prints figures, never pass/fail. Hold /tmp/ddpb-bench.lock.
"""
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_train import Daemon, bench_args, write_json  # noqa: E402

MODELS = {"mnist-cnn": (32, [1, 28, 28], 40, 8), "resnet18": (8, [3, 32, 32], 12, 3)}
STRATEGIES = ["naive", "ddp", "horovod", "zero1", "zero2"]
COMPUTE = ("data_ms", "forward_ms", "backward_ms", "optimizer_ms")


def collective_spec(worlds):
    return {"name": "bench model: network", "workload": "collective", "min_bytes": "4K",
            "max_bytes": "64M", "factor": 2, "iters": 20, "warmup": 5, "repeats": 2,
            "timeout_s": 1800,
            "sweep": {"op": ["allreduce", "reduce_scatter", "all_gather"], "world_size": worlds}}


def train_spec(model, world, strategy):
    batch, shape, steps, warmup = MODELS[model]
    return {"name": f"bench model: {model}", "workload": "train", "model": model,
            "batch_size": batch, "threads": 1, "steps": steps + warmup, "warmup_steps": warmup,
            "trace_steps": 0, "world_size": world, "strategy": strategy,
            "dataset": {"name": "synthetic", "shape": shape},
            "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9}, "timeout_s": 1800}


def one_round(d, r, models, worlds, out):
    coll = d.finish(collective_spec(worlds))
    fits = d.call(f"/v1/experiments/{coll['id']}/fit")["fits"]
    print(f"round {r}: {len(fits)} fits from experiment {coll['id']}", flush=True)
    order = STRATEGIES[r % len(STRATEGIES):] + STRATEGIES[:r % len(STRATEGIES)]
    for model in models:
        base = {}
        for s in order:
            exp = d.finish(train_spec(model, 1, s))
            base[s] = exp["runs"][0]["id"]
        for w in worlds:
            for s in order:
                exp = d.finish(train_spec(model, w, s))
                row = d.call(f"/v1/experiments/{exp['id']}/results")["rows"][0]
                p = d.call("/v1/predict", {"run": base[s], "fit": [coll["id"]],
                                           "world_sizes": [w], "strategies": [s],
                                           "ranks_per_node": w})
                pt = p["predictions"][0]["points"][0]
                rec = {"round": r, "model": model, "strategy": s, "world": w,
                       "step_ms": row["step_ms_mean"], "pred_step_ms": pt["step_ms"],
                       "compute_ms": sum(row[k] for k in COMPUTE),
                       "pred_compute_ms": sum(pt[k] for k in COMPUTE),
                       "exposed_ms": row["comm_exposed_ms"],
                       "pred_exposed_ms": pt["comm_exposed_ms"],
                       "straggler_ms": row["straggler_ms"]}
                rec["err"] = (rec["pred_step_ms"] - rec["step_ms"]) / rec["step_ms"]
                out.append(rec)
                print(f"  {model} {s} x{w}: measured {rec['step_ms']:.2f} ms, predicted "
                      f"{rec['pred_step_ms']:.2f} ms ({rec['err'] * 100:+.1f} %); compute "
                      f"{rec['compute_ms']:.2f}/{rec['pred_compute_ms']:.2f}, exposed "
                      f"{rec['exposed_ms']:.2f}/{rec['pred_exposed_ms']:.2f}", flush=True)


def report(recs, models, worlds):
    med = statistics.median
    print("\n| model | strategy | ranks | measured step ms | predicted ms | error (median, "
          "range) | compute meas/pred ms | exposed comm meas/pred ms |")
    print("|---|---|---:|---:|---:|---|---|---|")
    within = total = 0
    for model in models:
        for w in worlds:
            for s in STRATEGIES:
                rs = [x for x in recs if x["model"] == model and x["world"] == w
                      and x["strategy"] == s]
                if not rs:
                    continue
                errs = [x["err"] * 100 for x in rs]
                total += 1
                within += abs(med(errs)) <= 15
                print(f"| {model} | {s} | {w} | {med([x['step_ms'] for x in rs]):.2f} | "
                      f"{med([x['pred_step_ms'] for x in rs]):.2f} | {med(errs):+.1f} % "
                      f"({min(errs):+.1f} to {max(errs):+.1f}) | "
                      f"{med([x['compute_ms'] for x in rs]):.2f} / "
                      f"{med([x['pred_compute_ms'] for x in rs]):.2f} | "
                      f"{med([x['exposed_ms'] for x in rs]):.2f} / "
                      f"{med([x['pred_exposed_ms'] for x in rs]):.2f} |")
    print(f"\n{within} of {total} configurations within 15 % (median of rounds).")


def main():
    ap = bench_args(3)
    ap.add_argument("--models", default="mnist-cnn,resnet18")
    ap.add_argument("--worlds", default="2,4")
    a = ap.parse_args()
    models = a.models.split(",")
    worlds = [int(w) for w in a.worlds.split(",")]
    os.environ.setdefault("MALLOC_MMAP_MAX_", "0")
    os.environ.setdefault("MALLOC_TRIM_THRESHOLD_", "4294967296")
    d = Daemon(a.build, max(worlds) * 2)
    recs = []
    try:
        for r in range(a.rounds):
            one_round(d, r, models, worlds, recs)
    finally:
        d.close()
    report(recs, models, worlds)
    write_json(a.json, recs)


if __name__ == "__main__":
    main()
