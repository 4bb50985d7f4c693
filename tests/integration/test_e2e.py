#!/usr/bin/env python3
"""End to end through the REST API: the default example runs on real workers and its
figures are stored and consistent; a sweep becomes one run per point and waits for CPU
slots; results survive a restart; a daemon killed mid-run comes back, marks what was
running interrupted and finishes the queue with no worker left behind."""
import datetime
import os
import signal
import sqlite3
import sys
import time

from harness import Daemon, check, example, pid_alive, run_cases


def parse_ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def check_collectives(run, world):
    rows = run["collectives"]
    spec = run["spec"]
    sizes = []
    b = spec["min_bytes"]
    while b <= spec["max_bytes"]:
        sizes.append(b)
        b = b * spec["factor"] if spec["factor"] else b + spec["step"]
    check(len(rows) == len(sizes) * spec["repeats"], f"{len(rows)} rows for {len(sizes)} sizes")
    check([r["bytes"] for r in rows[: len(sizes)]] == sizes, [r["bytes"] for r in rows])
    for r in rows:
        check(r["wrong"] == 0, f"wrong results: {r}")
        check(r["op"] == "allreduce" and r["dtype"] == "float32" and r["iters"] == spec["iters"], r)
        check(r["count"] * 4 == r["bytes"], r)
        check(0 < r["time_us_min"] <= r["time_us_median"] <= r["time_us_p95"] <= r["time_us_max"], r)
        algbw = r["bytes"] / r["time_us_median"] / 1e3
        check(abs(r["algbw_gbs"] - algbw) <= 1e-6 * algbw, f"algbw {r['algbw_gbs']} vs {algbw}")
        factor = 2 * (world - 1) / world
        check(abs(r["busbw_gbs"] - r["algbw_gbs"] * factor) <= 1e-9 + 1e-6 * r["busbw_gbs"], r)


def test_default_example_end_to_end():
    d = Daemon(cpu_slots=2)
    try:
        spec = example("allreduce-cpu.json")
        exp = d.submit(spec)
        check(exp["status"] in ("queued", "running") and exp["n_runs"] == 1, exp)
        exp = d.wait_experiment(exp["id"], timeout=300)
        check(exp["status"] == "succeeded", exp)
        run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
        world = spec["world_size"]
        check(run["status"] == "succeeded" and run["progress"] == 1, run["status"])
        check(len(run["ranks"]) == world, run["ranks"])
        for k in run["ranks"]:
            check(k["status"] == "done" and k["exit_code"] == 0 and k["pid"] > 0, k)
            check(k["cpus"] is not None, "ranks pinned to CPUs when slots <= CPUs")
        check(len(run["env"]) == world, run["env"])
        for e in run["env"]:
            check("ddpbench_version" in e["env"] or "version" in str(e["env"]), e)
        check_collectives(run, world)
        # survives a restart: same figures from the same file
        d.restart()
        again = d.get(f"/v1/runs/{run['id']}")
        check(again["collectives"] == run["collectives"], "results changed across restart")
        check(d.get(f"/v1/experiments/{exp['id']}")["status"] == "succeeded", "status lost")
    finally:
        d.close()


def test_sweep_is_queued_by_slots():
    d = Daemon(cpu_slots=2)
    try:
        spec = example("allreduce-sweep.json")
        check(spec["sweep"]["world_size"] == [1, 2, 4], spec)
        status, body, _ = d.request("POST", "/v1/experiments", body=spec)
        check(status == 409 and body["error"]["field"] == "world_size", (status, body))
        d.restart()
    finally:
        d.close()
    d = Daemon(cpu_slots=4)
    try:
        exp = d.submit(spec)
        check(exp["n_runs"] == 3, exp)
        check([r["params"] for r in exp["runs"]] == [{"world_size": w} for w in (1, 2, 4)], exp["runs"])
        exp = d.wait_experiment(exp["id"], timeout=300)
        check(exp["status"] == "succeeded", exp)
        runs = [d.get(f"/v1/runs/{r['id']}") for r in exp["runs"]]
        for r in runs:
            check(r["spec"]["world_size"] == r["params"]["world_size"] == len(r["ranks"]), r["params"])
            check_collectives(r, r["spec"]["world_size"])
        # never more ranks at once than slots: check every start instant
        spans = [(parse_ts(r["started_at"]), parse_ts(r["finished_at"]), r["world_size"]) for r in runs]
        for t, _, _ in spans:
            busy = sum(w for s, f, w in spans if s <= t < f)
            check(busy <= 4, f"{busy} ranks at once on 4 slots: {spans}")
        # strict FIFO: the 4-rank run starts only after both others released their slots
        check(spans[2][0] >= max(spans[0][1], spans[1][1]) - 0.05, spans)
    finally:
        d.close()


def test_daemon_killed_mid_run_recovers():
    d = Daemon(cpu_slots=2)
    try:
        long = {"name": "long", "workload": "collective", "world_size": 2, "min_bytes": "16M",
                "max_bytes": "16M", "iters": 2000, "warmup": 0, "timeout_s": 120}
        short = {"name": "after", "workload": "collective", "world_size": 2, "min_bytes": "4K",
                 "max_bytes": "64K", "factor": 4, "iters": 5, "warmup": 1}
        first = d.submit(long)
        second = d.submit(short)
        run_id = first["runs"][0]["id"]
        run = d.wait_run(run_id, lambda r: r["status"] == "running" and all(k["pid"] for k in r["ranks"]),
                         what="running with pids")
        pids = [k["pid"] for k in run["ranks"]]
        d.stop(signal.SIGKILL)
        deadline = time.time() + 10  # workers die with their parent (PR_SET_PDEATHSIG)
        while time.time() < deadline and any(pid_alive(p) for p in pids):
            time.sleep(0.05)
        check(not any(pid_alive(p) for p in pids), f"orphaned workers {pids}")
        d.start()
        run = d.get(f"/v1/runs/{run_id}")
        check(run["status"] == "interrupted" and "stopped" in run["error"], run)
        check(all(k["status"] == "killed" for k in run["ranks"]), run["ranks"])
        check(d.get(f"/v1/experiments/{first['id']}")["status"] == "interrupted", "experiment status")
        exp2 = d.wait_experiment(second["id"], timeout=120)
        check(exp2["status"] == "succeeded", exp2)
        # Python's own SQLite, so the check cannot be skipped for want of a CLI
        db = sqlite3.connect(os.path.join(d.state_dir, "ddpbench.db"), timeout=10)
        try:
            integrity = db.execute("PRAGMA integrity_check").fetchall()
            dangling = db.execute("PRAGMA foreign_key_check").fetchall()
        finally:
            db.close()
        check(integrity == [("ok",)], integrity)
        check(dangling == [], dangling)
    finally:
        d.close()


if __name__ == "__main__":
    sys.exit(run_cases([
        test_default_example_end_to_end,
        test_sweep_is_queued_by_slots,
        test_daemon_killed_mid_run_recovers,
    ]))
