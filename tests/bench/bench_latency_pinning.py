#!/usr/bin/env python3
"""bench_latency_pinning: small-message allreduce latency of 2 ranks pinned (the daemon's
default when every rank gets a CPU) against unpinned (--cpu-slots 4 on a 2-CPU machine
turns pinning off), for one or more builds, through the real daemon. Not a test: it
prints a table and never passes or fails.

    tests/bench/bench_latency_pinning.py [--build NAME=DAEMON ...] [--rounds 8]
        [--repeats 4] [--iters 20] [--warmup 5] [--bytes 8]

Each build (default: build/daemon/ddpbenchd) gets two daemons, pinned and unpinned, on
free ports with temporary state directories. Every round submits one experiment to each
daemon in turn (2 ranks, float32 sum allreduce of --bytes, checked, --repeats repeats, so
--repeats rows per run), so outside load hits them alike. A row's figure is the
benchmark's own: the median over its timed iterations of the slowest rank's time. The
table shows, per daemon, the median over all rows (the headline), the best and worst
rows and how many rows took over 10 times the best pinned row (the bimodal outliers of
tests/bench/RESULTS.md, "8-byte latency").
"""
import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import harness  # noqa: E402  (the integration tests' daemon wrapper)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", action="append", default=[],
                    help="NAME=path of a ddpbenchd (its worker beside it or in ../worker)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--bytes", type=int, default=8)
    a = ap.parse_args()
    builds = dict(b.split("=", 1) for b in a.build) or {"build": harness.DAEMON}
    spec = {"name": "latency", "workload": "collective", "device": "cpu", "backend": "tcp",
            "world_size": 2, "op": "allreduce", "dtype": "float32", "redop": "sum",
            "min_bytes": str(a.bytes), "max_bytes": str(a.bytes), "iters": a.iters,
            "warmup": a.warmup, "check": True, "repeats": a.repeats}
    daemons = {}
    try:
        for name, path in builds.items():
            for mode, slots in (("pinned", None), ("unpinned", 4)):
                daemons[f"{name} {mode}"] = harness.Daemon(cpu_slots=slots, binary=path)
        rows = {k: [] for k in daemons}
        for _ in range(a.rounds):
            for key, d in daemons.items():
                exp = d.wait_experiment(d.submit(spec)["id"], timeout=300)
                run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
                harness.check(run["status"] == "succeeded", f"{key}: {run.get('error')}")
                for r in run["collectives"]:
                    harness.check(r["wrong"] == 0, f"{key}: wrong results {r}")
                    rows[key].append(r["time_us_median"])
        best_pinned = min(min(v) for k, v in rows.items() if k.endswith("pinned")
                          and not k.endswith("unpinned"))
        print(f"{a.bytes}-byte allreduce, 2 ranks, {a.iters} iterations after {a.warmup} "
              f"warm-up, {a.rounds} rounds x {a.repeats} repeats; os.getloadavg() at the end "
              f"{os.getloadavg()[0]:.1f}\n")
        print("| daemon | rows | median (us) | best | worst | rows over 10x best pinned |")
        print("|---|---|---|---|---|---|")
        for key, v in rows.items():
            over = sum(x > 10 * best_pinned for x in v)
            print(f"| {key} | {len(v)} | {statistics.median(v):.1f} | {min(v):.1f} | "
                  f"{max(v):.1f} | {over} |")
    finally:
        for d in daemons.values():
            d.close()


if __name__ == "__main__":
    main()
