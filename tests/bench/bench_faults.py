#!/usr/bin/python3
"""What an injected fault does to a non-elastic ddp run, and whom the per-rank views blame
(issue 32), in one run on one machine.

  tests/bench/bench_faults.py --build build [--rounds 3] [--part stop|slow|link|all]
                              [--json F]

mnist-cnn (1x28x28 synthetic, batch 64, SGD), 2 ranks of 1 thread, strategy ddp; rank 1
(or node 1) is faulted from step 100 for duration_s, through the spec's "faults":
stop: SIGSTOP for 2 s, then SIGCONT;
slow: rank 1 keeps about 25 % of its CPU for 2 s (SCHED_IDLE and a pinned burner);
link: under netlab (2 hosts, profile 1gbe, one rank on each: nodes 2), node 1's link
  shaped down to 10 Mbit/s for 3 s (root only; skipped with the reason elsewhere).
Figures, per round, from the run's own steps (GET /v1/runs/{id}/steps) and its events
(GET /v1/runs/{id}: inject and restore, with the run's step then):
- rank 0's median step before the fault, its median step while the fault lasted and the
  ratio (stop: the one step that spanned the stop, in ms), and the run's wall time beside
  its fault-free twin's (the same spec without faults, run just before);
- whom each view blames in the fault's window: the dashboard's straggler view (web/js
  figures.js stragglers(): per step the rank with the largest step_ms; its slowest_share),
  and the per-rank step breakdown: each rank's own compute (step_ms - comm_exposed_ms,
  the time it was not waiting for its peer); the rank with more compute is the one that
  made the other wait. Whether each names the faulted rank (1); the straggler view's rule
  also over the whole run, as the dashboard's table shows it.
A benchmark: figures, never pass/fail. Hold /tmp/ddpb-bench.lock.
"""
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_train import Daemon, bench_args, write_json  # noqa: E402

STEPS, AT = 400, 100
SPEC = {"workload": "train", "model": "mnist-cnn", "batch_size": 64, "steps": STEPS,
        "warmup_steps": 5, "world_size": 2, "strategy": "ddp",
        "dataset": {"name": "synthetic", "shape": [1, 28, 28], "samples": 8192},
        "optimizer": {"type": "sgd", "lr": 0.01}, "timeout_s": 600}
FAULTS = {
    "stop": {"at_step": AT, "rank": 1, "kind": "stop", "duration_s": 2},
    "slow": {"at_step": AT, "rank": 1, "kind": "slow", "duration_s": 2, "fraction": 0.25},
    "link": {"at_step": AT, "node": 1, "kind": "link", "duration_s": 3, "rate": 10},
}


class Local:
    """A ddpbenchd on this machine, pinned ranks (2 slots on 2 CPUs)."""

    def __init__(self, build):
        self.d = Daemon(build, 2)

    def get(self, path):
        return self.d.call(path)

    def submit(self, spec):
        return self.d.call("/v1/experiments", spec)

    def close(self):
        self.d.close()


class Netlab:
    """2 netlab hosts (bench_netlab.Lab), one rank on each."""

    def __init__(self, build):
        from bench_netlab import Lab
        self.lab = Lab(build, 2, "1gbe")

    def get(self, path):
        return self.lab.call("GET", path)

    def submit(self, spec):
        return self.lab.call("POST", "/v1/experiments", spec)

    def close(self):
        self.lab.close()


def run_once(api, spec):
    """The run of a one-run spec once it ended: its detail and its steps by rank."""
    exp = api.submit(spec)
    while True:
        e = api.get(f"/v1/experiments/{exp['id']}")
        if e["status"] not in ("queued", "running"):
            break
        time.sleep(0.5)
    run = api.get(f"/v1/runs/{e['runs'][0]['id']}")
    if run["status"] != "succeeded":
        raise SystemExit(f"run {run['id']} {run['status']}: {run['error']}")
    steps = api.get(f"/v1/runs/{run['id']}/steps")
    rows = [dict(zip(steps["columns"], r)) for r in steps["rows"]]
    by_rank = {}
    for r in rows:
        by_rank.setdefault(r["rank"], {})[r["step"]] = r
    return run, by_rank


def blame(by_rank, lo, hi):
    """In steps lo..hi: (the straggler view's slowest_share per rank, each rank's median
    compute = step_ms - comm_exposed_ms)."""
    slowest, compute = {0: 0, 1: 0}, {0: [], 1: []}
    steps = [s for s in by_rank[0] if lo <= s <= hi and s in by_rank[1]]
    for s in steps:
        rows = {k: by_rank[k][s] for k in (0, 1)}
        slowest[max(rows, key=lambda k: rows[k]["step_ms"])] += 1
        for k, r in rows.items():
            compute[k].append(r["step_ms"] - (r["comm_exposed_ms"] or 0))
    n = max(1, len(steps))
    return ({k: v / n for k, v in slowest.items()},
            {k: statistics.median(v) if v else 0 for k, v in compute.items()})


def measure(api, kind, nodes):
    """One round: the fault-free twin, then the faulted run."""
    t0 = time.time()
    run_once(api, dict(SPEC, name="faults twin", nodes=nodes))
    twin_s = time.time() - t0
    t0 = time.time()
    run, by_rank = run_once(api, dict(SPEC, name=f"faults {kind}", nodes=nodes,
                                      faults=[FAULTS[kind]]))
    wall_s = time.time() - t0
    ev = {e["action"]: e for e in run["events"]}
    s0, s1 = ev["inject"]["step"], ev["restore"]["step"]
    r0 = by_rank[0]
    before = [r["step_ms"] for s, r in r0.items() if AT - 60 <= s < s0 - 1]
    during = [r["step_ms"] for s, r in r0.items() if s0 <= s <= s1]
    share, compute = blame(by_rank, s0, s1)
    share_run, _ = blame(by_rank, 0, STEPS)  # the dashboard's table: the whole run
    out = {"kind": kind, "inject_step": s0, "restore_step": s1,
           "before_ms": statistics.median(before), "during_ms": statistics.median(during),
           "max_during_ms": max(during), "steps_during": len(during),
           "wall_s": wall_s, "twin_wall_s": twin_s, "slowest_share": share,
           "compute_ms": compute, "slowest_share_run": share_run,
           "straggler_view_names": max(share, key=share.get),
           "straggler_run_names": max(share_run, key=share_run.get),
           "breakdown_names": max(compute, key=compute.get)}
    print(f"  {kind}: steps {s0}..{s1}; rank 0 step {out['before_ms']:.1f} -> "
          f"{out['during_ms']:.1f} ms (max {out['max_during_ms']:.0f}); run "
          f"{wall_s:.1f} s vs twin {twin_s:.1f} s; slowest share r0 {share[0]:.2f} "
          f"r1 {share[1]:.2f} (whole run r1 {share_run[1]:.2f}); compute r0 {compute[0]:.1f} r1 {compute[1]:.1f} ms",
          flush=True)
    return out


def main():
    ap = bench_args(3, description=__doc__.splitlines()[0])
    ap.add_argument("--part", default="all", choices=["stop", "slow", "link", "all"])
    args = ap.parse_args()
    kinds = ["stop", "slow", "link"] if args.part == "all" else [args.part]
    res = {"rounds": []}
    for kind in kinds:
        if kind == "link" and os.geteuid() != 0:
            print("link: skipped, netlab needs root (ip netns)")
            continue
        api = Netlab(args.build) if kind == "link" else Local(args.build)
        try:
            for _ in range(args.rounds):
                res["rounds"].append(measure(api, kind, 2 if kind == "link" else 0))
        finally:
            api.close()
    print("\n| fault | rank 0 step before (ms) | during (ms) | x | run s (twin s) | "
          "straggler view, window | straggler view, whole run | breakdown, window |")
    print("|---|---:|---:|---:|---:|---|---|---|")
    for kind in kinds:
        rows = [r for r in res["rounds"] if r["kind"] == kind]
        if not rows:
            continue
        b = statistics.median(r["before_ms"] for r in rows)
        d = statistics.median(r["during_ms"] for r in rows)
        w = statistics.median(r["wall_s"] for r in rows)
        tw = statistics.median(r["twin_wall_s"] for r in rows)
        names = [[r[k] for r in rows] for k in ("straggler_view_names", "straggler_run_names",
                                                  "breakdown_names")]
        print(f"| {kind} | {b:.1f} | {d:.1f} | {d / b:.1f} | {w:.1f} ({tw:.1f}) | " +
              " | ".join(f"rank 1 in {v.count(1)}/{len(v)}" for v in names) + " |")
    write_json(args.json, res)


if __name__ == "__main__":
    main()
