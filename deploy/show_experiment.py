#!/usr/bin/env python3
"""Waits for an experiment and prints its runs' results as nccl-tests-style tables.
Used by deploy/quickstart.sh until the ddpbench CLI exists; talks only to the REST API.
Usage: show_experiment.py URL EXPERIMENT_ID [TIMEOUT_S]
"""
import json
import sys
import time
import urllib.request

TERMINAL = ("succeeded", "failed", "cancelled", "interrupted")


def get(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


def main(base, exp_id, timeout=900):
    deadline = time.time() + timeout
    last = None
    while True:
        exp = get(f"{base}/v1/experiments/{exp_id}")
        progress = sum(r["progress"] for r in exp["runs"]) / max(1, len(exp["runs"]))
        line = f"experiment {exp_id} '{exp['name']}': {exp['status']} ({progress:.0%})"
        if line != last:
            print(line, flush=True)
            last = line
        if exp["status"] in TERMINAL:
            break
        if time.time() > deadline:
            print("gave up waiting", file=sys.stderr)
            return 1
        time.sleep(0.5)
    for summary in exp["runs"]:
        run = get(f"{base}/v1/runs/{summary['id']}")
        spec = run["spec"]
        print(f"\nrun {run['id']}  {spec['op']} {spec['dtype']} {spec['redop']}  "
              f"world_size {run['world_size']}  backend {spec['backend']}  {run['status']}"
              f"  params {json.dumps(run['params'])}")
        if run["error"]:
            print(f"  error: {run['error']}")
        if not run["collectives"]:
            continue
        print(f"  {'size (B)':>12} {'count':>11} {'algo':>6} {'min us':>10} {'median us':>10} "
              f"{'p95 us':>10} {'algbw GB/s':>10} {'busbw GB/s':>10} {'#wrong':>6}")
        for c in run["collectives"]:
            print(f"  {c['bytes']:>12} {c['count']:>11} {c['algorithm']:>6} {c['time_us_min']:>10.1f} "
                  f"{c['time_us_median']:>10.1f} {c['time_us_p95']:>10.1f} {c['algbw_gbs']:>10.3f} "
                  f"{c['busbw_gbs']:>10.3f} {c['wrong']:>6}")
    return 0 if exp["status"] == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), *(float(a) for a in sys.argv[3:4])))
