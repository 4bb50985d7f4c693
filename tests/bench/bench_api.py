#!/usr/bin/env python3
"""Benchmark (not a test): ddpbenchd's REST API under wrk with 10,000 runs stored.

Starts the release build's ddpbenchd on a fresh state directory, stores 10 experiments
of 1,000 runs each (a sweep of seed x repeats; cancelled as soon as they are submitted,
so nothing runs and every run row is real), then drives each endpoint with wrk for a
fixed time and prints requests/s and latency percentiles as a Markdown table.

    deploy/install-deps.sh --bench && ninja -C build && \\
        flock /tmp/ddpb-bench.lock python3 tests/bench/bench_api.py [SECONDS] [CONNECTIONS]
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DAEMON = os.path.join(ROOT, os.environ.get("DDPB_BUILD_DIR", "build"), "daemon", "ddpbenchd")


def call(url, method="GET", body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def populate(url, experiments=10):
    spec = {"workload": "collective", "world_size": 1, "min_bytes": "8", "max_bytes": "8",
            "iters": 1, "warmup": 0,
            "sweep": {"seed": list(range(50)), "repeats": list(range(1, 21))}}
    ids = []
    t0 = time.time()
    for i in range(experiments):
        exp = call(f"{url}/v1/experiments", "POST", dict(spec, name=f"bench-{i}"))
        call(f"{url}/v1/experiments/{exp['id']}/cancel", "POST")
        ids.append(exp["id"])
    while call(f"{url}/healthz")["runs"]["active"]:
        time.sleep(0.1)
    return ids, time.time() - t0


def wrk(url, seconds, conns):
    out = subprocess.run(["wrk", "-t2", f"-c{conns}", f"-d{seconds}s", "--latency", url],
                         capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    lat = dict(re.findall(r"^\s+(50|90|99)%\s+(\S+)", out, re.M))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return rps, lat, int(errors.group(1)) if errors else 0


def main(seconds=10, conns=16):
    state = tempfile.mkdtemp(prefix="ddpb-bench-api-")
    env = dict(os.environ, MALLOC_MMAP_MAX_="0", MALLOC_TRIM_THRESHOLD_="4294967296")
    proc = subprocess.Popen([DAEMON, "--port", "0", "--state-dir", state, "--cpu-slots", "1",
                             "--log-level", "warn"], env=env, stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if os.path.exists(f"{state}/ddpbenchd.json"):
                break
            time.sleep(0.05)
        info = json.load(open(f"{state}/ddpbenchd.json"))
        url = f"http://127.0.0.1:{info['http_port']}"
        ids, took = populate(url)
        runs = sum(len(call(f"{url}/v1/experiments/{i}")["runs"]) for i in ids)
        run_id = call(f"{url}/v1/experiments/{ids[3]}")["runs"][500]["id"]
        print(f"stored {runs} runs in {len(ids)} experiments in {took:.1f}s; wrk -t2 -c{conns} "
              f"-d{seconds}s per endpoint")
        print()
        print("| endpoint | requests/s | p50 | p90 | p99 | non-2xx |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, path in (("list (50 per page)", "/v1/experiments?limit=50"),
                           ("list filtered", "/v1/experiments?status=cancelled&name=bench-7"),
                           ("get experiment (1,000 runs)", f"/v1/experiments/{ids[3]}"),
                           ("get run", f"/v1/runs/{run_id}"),
                           ("healthz", "/healthz")):
            rps, lat, bad = wrk(url + path, seconds, conns)
            print(f"| {name} `{path}` | {rps:,.0f} | {lat.get('50')} | {lat.get('90')} | "
                  f"{lat.get('99')} | {bad} |")
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
