#!/usr/bin/env python3
"""Failures end a run cleanly: a worker killed mid-run fails the run naming that rank
and no worker is left behind; a worker that cannot start fails the run with the reason;
a run past its timeout is stopped and failed; nothing stored before is lost."""
import os
import signal
import sys
import time

from harness import Daemon, check, run_cases, wait_gone

LONG = {"workload": "collective", "min_bytes": "32M", "max_bytes": "32M", "iters": 5000,
        "warmup": 0, "timeout_s": 300}


def test_killed_worker_fails_run_naming_rank():
    d = Daemon(cpu_slots=3)
    try:
        exp = d.submit(dict(LONG, name="victim", world_size=3))
        run_id = exp["runs"][0]["id"]
        run = d.wait_run(run_id, lambda r: r["status"] == "running" and len(r["ranks"]) == 3,
                         what="running")
        time.sleep(0.5)  # inside the timed loop
        pids = [k["pid"] for k in run["ranks"]]
        os.kill(pids[1], signal.SIGKILL)
        exp = d.wait_experiment(exp["id"], timeout=60)
        check(exp["status"] == "failed", exp)
        run = d.get(f"/v1/runs/{run_id}")
        check(run["status"] == "failed" and run["error_rank"] == 1, run)
        check("rank 1" in run["error"] and "signal 9" in run["error"], run["error"])
        check(run["ranks"][1]["status"] == "killed" and run["ranks"][1]["signal"] == 9, run["ranks"][1])
        wait_gone(pids)
        d.wait_slots_free(3)
    finally:
        d.close()


def test_worker_that_cannot_start():
    d = Daemon(cpu_slots=2, extra_args=["--worker", "/nonexistent/ddpbench-worker"])
    try:
        exp = d.run_experiment({"name": "nostart", "workload": "collective", "world_size": 2},
                               timeout=30)
        run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
        check(run["status"] == "failed" and "could not start rank 0" in run["error"], run)
        d.wait_slots_free(2)
    finally:
        d.close()


def test_run_timeout_stops_workers():
    d = Daemon(cpu_slots=2)
    try:
        exp = d.submit(dict(LONG, name="slow", world_size=2, timeout_s=2))
        run_id = exp["runs"][0]["id"]
        run = d.wait_run(run_id, lambda r: len(r["ranks"]) == 2 and all(k["pid"] for k in r["ranks"]),
                         what="spawned")
        pids = [k["pid"] for k in run["ranks"]]
        exp = d.wait_experiment(exp["id"], timeout=30)
        run = d.get(f"/v1/runs/{run_id}")
        check(run["status"] == "failed" and "timeout of 2 s" in run["error"], run)
        wait_gone(pids)
    finally:
        d.close()


if __name__ == "__main__":
    sys.exit(run_cases([
        test_killed_worker_fails_run_naming_rank,
        test_worker_that_cannot_start,
        test_run_timeout_stops_workers,
    ]))
