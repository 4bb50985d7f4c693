#!/usr/bin/env python3
"""Benchmark (not a test): what each launcher costs a run, POST to succeeded.

One release ddpbenchd (2 CPU slots); each round submits the same tiny 2-rank run (a 4 KiB
float32 allreduce, 1 iteration, no warm-up) once per launcher, in an order that rotates
every round, and times from the POST to the experiment reading `succeeded` (polled every
2 ms: the figures carry up to that much). The headline is the median over rounds per
launcher and its ratio to ddpbench's own launcher. Launchers: ddpbench, mpirun with
OpenMPI, mpirun with MPICH, and srun when this script runs inside a Slurm allocation
(SLURM_JOB_ID set: the daemon inherits it); LAUNCHERS=name,... picks.

    ninja -C build && python3 tests/bench/bench_launch.py [ROUNDS]
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_api import call  # noqa: E402  (one HTTP helper for the benches)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BUILD = os.environ.get("DDPB_BUILD_DIR", os.path.join(ROOT, "build"))
ALL = {"ddpbench": {}, "mpirun-openmpi": {"launcher": "mpirun", "mpi": "openmpi"},
       "mpirun-mpich": {"launcher": "mpirun", "mpi": "mpich"}, "srun": {"launcher": "srun"}}
SPEC = {"workload": "collective", "world_size": 2, "min_bytes": 4096, "max_bytes": 4096,
        "iters": 1, "warmup": 0, "check": False, "trace_steps": 0}


def one_run(url, fields):
    t0 = time.perf_counter()
    exp = call(f"{url}/v1/experiments", "POST", dict(SPEC, **fields))
    while True:
        st = call(f"{url}/v1/experiments/{exp['id']}?runs_limit=1")["status"]
        if st in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.002)
    took = time.perf_counter() - t0
    if st != "succeeded":
        raise SystemExit(f"{fields}: run {st}: {call(url + '/v1/experiments/' + str(exp['id']))}")
    return took


def main(rounds=15):
    names = os.environ.get("LAUNCHERS", "").split(",") if os.environ.get("LAUNCHERS") else \
        [n for n in ALL if n != "srun" or os.environ.get("SLURM_JOB_ID")]
    state = tempfile.mkdtemp(prefix="ddpb-bench-launch-")
    info = os.path.join(state, "ddpbenchd.json")
    log = open(os.path.join(state, "daemon.log"), "ab")
    proc = subprocess.Popen([os.path.join(BUILD, "daemon", "ddpbenchd"), "--port", "0",
                             "--state-dir", state, "--cpu-slots", "2", "--log-level", "warn"],
                            stdout=log, stderr=log)
    try:
        while not os.path.exists(info):
            time.sleep(0.05)
        time.sleep(0.1)
        url = f"http://127.0.0.1:{json.load(open(info))['http_port']}"
        times = {n: [] for n in names}
        for n in names:  # one untimed run each: page cache, first exec of each launcher
            one_run(url, ALL[n])
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for n in order:
                times[n].append(one_run(url, ALL[n]))
        base = statistics.median(times[names[0]])
        print(f"| launcher | POST to succeeded, median of {rounds} (ms) | min | max | x {names[0]} |")
        print("|---|---|---|---|---|")
        for n in names:
            med = statistics.median(times[n])
            print(f"| {n} | {med * 1e3:.1f} | {min(times[n]) * 1e3:.1f} | "
                  f"{max(times[n]) * 1e3:.1f} | {med / base:.2f} |")
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main(*[int(a) for a in sys.argv[1:]])
