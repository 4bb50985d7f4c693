#!/usr/bin/python3
"""What a lost rank costs each elastic engine (issue 32), in one run on one machine.

  tests/bench/bench_elastic.py --build build [--rounds 5] [--engines ddpbench,pytorch,horovod]
                               [--worlds 2,3] [--samples 6000] [--epochs 3] [--json F]

mnist-cnn on Fashion-MNIST (Debian's dataset-fashion-mnist; the first --samples training
images per epoch, the whole test split evaluated after every epoch), batch 64 a rank, SGD
lr 0.01 momentum 0.5, 1 thread a rank, --epochs epochs. For each engine (ddpbench's own in
place, pytorch restarting from its checkpoint, horovod through its elastic driver) and each
starting world W (2 -> 1 and 3 -> 2), four runs, each an experiment over REST:
  plain     not elastic, no fault: the baseline the study compared elastic runs with;
  twin      elastic, no fault: the fault-free twin (what committing costs);
  kill      elastic {min_ranks W-1, max_ranks W-1}, rank 1 SIGKILLed by the daemon at 30 %
            of the run's steps: the run goes on at W-1;
  replace   elastic {min_ranks W-1, max_ranks W}, the same kill: a replacement rank joins.
The seed is the round: every round runs every engine, world and case (their order
rotating), so seed variation is inside each comparison. Figures are the stored results of
each run (GET /v1/runs/{id}: the epochs' test accuracy, the generations; the results
columns of the fault: time to detect, time to resume, lost steps, throughput before,
during and after). Headline: the median over rounds; the accuracy verdict compares the
kill/replace runs' final accuracy with the twin's over the seeds (a difference inside the
larger standard deviation over seeds is a tie). A benchmark: figures, never pass/fail.
Hold /tmp/ddpb-bench.lock.
"""
import datetime
import fcntl
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_allreduce import machine  # noqa: E402
from bench_train import Daemon, bench_args, write_json  # noqa: E402

ENGINES = {"ddpbench": "ddp", "pytorch": "ddp", "horovod": "horovod"}
CASES = ("plain", "twin", "kill", "replace")
BATCH = 64


def steps_of(samples, world, epochs):
    return epochs * (samples // (BATCH * world))


def spec_of(engine, world, case, seed, samples, epochs):
    spec = {"name": f"elastic {engine} {world} {case} s{seed}", "workload": "train",
            "model": "mnist-cnn", "engine": engine, "strategy": ENGINES[engine],
            "dataset": {"name": "fashion-mnist", "samples": samples}, "world_size": world,
            "batch_size": BATCH, "epochs": epochs, "warmup_steps": 5, "threads": 1,
            "seed": seed, "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.5},
            "timeout_s": 1800}
    if case == "plain":
        return spec
    grow = case in ("twin", "replace")  # the twin's max_ranks is the replace run's
    spec["elastic"] = {"min_ranks": world - 1, "max_ranks": world if grow else world - 1,
                       "commit_every": 10}
    if case in ("kill", "replace"):
        at = int(0.3 * steps_of(samples, world, epochs))
        spec["faults"] = [{"at_step": at, "rank": 1, "kind": "kill"}]
    return spec


def seconds(start, end):
    """end - start of two ISO times of the API; None when either is missing."""
    if not start or not end:
        return None
    iso = datetime.datetime.fromisoformat
    return (iso(end.replace("Z", "+00:00")) - iso(start.replace("Z", "+00:00"))).total_seconds()


def figures(d, run_id):
    """The stored figures of run run_id (its experiment's one results row)."""
    run = d.call(f"/v1/runs/{run_id}")
    rows = d.call(f"/v1/experiments/{run['experiment_id']}/results")["rows"]
    row = rows[0] if rows else {}
    epochs = [e for e in run.get("epochs", []) if e.get("test_acc") is not None]
    out = {"run": run_id, "status": run["status"],
           "accuracy": epochs[-1]["test_acc"] if epochs else None,
           "wall_s": seconds(run.get("started_at"), run.get("finished_at")),
           "generations": [(g.get("gen"), g.get("world")) for g in run.get("generations", [])]}
    for key in ("throughput", "detect_s", "resume_s", "lost_steps", "throughput_before",
                "throughput_during", "throughput_after"):
        out[key] = row.get(key + "_mean")
    return out


def one(d, engine, world, case, seed, a):
    e = d.ended(spec_of(engine, world, case, seed, a.samples, a.epochs))
    f = figures(d, e["runs"][0]["id"])
    print(f"  {engine:9} W={world} {case:8} seed {seed}: {f}", flush=True)
    return f


def med(vals):
    vals = [v for v in vals if isinstance(v, (int, float))]
    return statistics.median(vals) if vals else None


def sd(vals):
    vals = [v for v in vals if isinstance(v, (int, float))]
    return statistics.stdev(vals) if len(vals) > 1 else 0.0


def fmt(v, spec="{:.3f}"):
    return "-" if v is None else spec.format(v)


def table(res, a):
    keys = ["detect_s", "resume_s", "lost_steps", "throughput", "throughput_before",
            "throughput_during", "throughput_after"]
    print(f"\n## Elastic runs, median of {a.rounds} seeds ({machine()})\n")
    print("| engine | W | case | succeeded | final accuracy mean (sd) | wall s | "
          + " | ".join(keys) + " |")
    print("|---|---|---|---|---|---|" + "---|" * len(keys))
    for engine in a.engines:
        for world in a.worlds:
            for case in CASES:
                fs = [r["f"] for r in res if (r["engine"], r["world"], r["case"])
                      == (engine, world, case)]
                if not fs:
                    continue
                ok = sum(f["status"] == "succeeded" for f in fs)
                accs = [f["accuracy"] for f in fs if f["status"] == "succeeded"]
                mean = statistics.mean(accs) if accs else None
                print(f"| {engine} | {world} | {case} | {ok}/{len(fs)} | "
                      f"{fmt(mean, '{:.4f}')} ({fmt(sd(accs), '{:.4f}')}) | "
                      f"{fmt(med([f['wall_s'] for f in fs]), '{:.1f}')} | "
                      + " | ".join(fmt(med([f.get(k) for f in fs])) for k in keys) + " |")
    print("\nAccuracy against the fault-free elastic twin (tie: |difference of means| <= the "
          "larger standard deviation over seeds):\n")
    for engine in a.engines:
        for world in a.worlds:
            twin = [r["f"]["accuracy"] for r in res if (r["engine"], r["world"], r["case"])
                    == (engine, world, "twin") and r["f"]["status"] == "succeeded"]
            for case in ("plain", "kill", "replace"):
                acc = [r["f"]["accuracy"] for r in res if (r["engine"], r["world"], r["case"])
                       == (engine, world, case) and r["f"]["status"] == "succeeded"]
                if len(acc) < 2 or len(twin) < 2:
                    continue
                diff = statistics.mean(acc) - statistics.mean(twin)
                spread = max(sd(acc), sd(twin))
                verdict = "tie" if abs(diff) <= spread else ("ahead" if diff > 0 else "behind")
                print(f"- {engine} W={world} {case}: {diff:+.4f} against the twin "
                      f"(spread {spread:.4f}, {len(acc)} seeds): {verdict}")


def main():
    ap = bench_args(5, description=__doc__.split("\n")[0])
    ap.add_argument("--engines", default="ddpbench,pytorch,horovod")
    ap.add_argument("--worlds", default="2,3")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--samples", type=int, default=6000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--reread", metavar="STATE",
                    help="serve a finished bench's daemon state folder with --build and read "
                    "the runs of --json again (results are computed when read)")
    a = ap.parse_args()
    a.engines = a.engines.split(",")
    a.worlds = [int(w) for w in a.worlds.split(",")]
    cases = a.cases.split(",")
    if a.reread:
        with open(a.json) as f:
            res = json.load(f)
        d = Daemon(a.build, 8, state=a.reread)
        try:
            for r in res:
                r["f"] = figures(d, r["f"]["run"])
        finally:
            d.close()
        write_json(a.json, res)
        table(res, a)
        return
    lock = open("/tmp/ddpb-bench.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    d = Daemon(a.build, 8)
    print(f"daemon state: {d.state}", flush=True)
    res = []
    try:
        for rnd in range(a.rounds):
            seed = rnd + 1
            order = [(e, w, c) for e in a.engines for w in a.worlds for c in cases]
            k = rnd % len(order)
            for engine, world, case in order[k:] + order[:k]:
                res.append({"engine": engine, "world": world, "case": case, "seed": seed,
                            "f": one(d, engine, world, case, seed, a)})
            write_json(a.json, res)
    finally:
        d.close()
    table(res, a)


if __name__ == "__main__":
    main()
