#!/usr/bin/env python3
"""Benchmark (not a test): ddpbenchd's REST API under wrk with 10,000 runs stored.

Starts the release build's ddpbenchd on a fresh state directory and builds the database
through the real API: 1,000 experiments of 10 runs each (a sweep over 10 seeds, each
experiment cancelled as soon as it is submitted, so nothing runs and every row is what a
submission stores; about 3 s). Then drives each endpoint with wrk (-t2, CONNECTIONS
connections) for SECONDS, ROUNDS rounds, and prints a Markdown table whose every figure is
the median over rounds (requests/s, each latency percentile, and the daemon's CPU time per
request: user + system from /proc/PID/stat over the round, divided by the requests wrk
counted, which a loaded machine disturbs far less than requests/s or p99), with each
round's requests/s and p99 beside it. The load average before and after is printed: on a
shared machine p99 is mostly other processes' time slices.

With DDPB_BASE_BUILD_DIR set (another build, e.g. of main: the peer), a second daemon from
that build gets its own identical database and every round measures both, endpoint by
endpoint, alternating which goes first: a before/after in one run, with the ratios of the
medians (requests/s this / base, CPU per request base / this). DDPB_FLAGS and
DDPB_BASE_FLAGS add ddpbenchd flags to each (the same build twice with DDPB_BASE_BUILD_DIR=
build compares flags, e.g. DDPB_BASE_FLAGS="--http-threads 4").

    deploy/install-deps.sh --bench && ninja -C build && \\
        flock /tmp/ddpb-bench.lock python3 tests/bench/bench_api.py [SECONDS] [CONNECTIONS] \\
            [ROUNDS] [EXPERIMENTS] [RUNS_PER_EXPERIMENT]
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BUILDS = {"this": os.environ.get("DDPB_BUILD_DIR", "build")}
if os.environ.get("DDPB_BASE_BUILD_DIR"):
    BUILDS["base"] = os.environ["DDPB_BASE_BUILD_DIR"]
# more ddpbenchd flags for each daemon (e.g. "--http-threads 4"), split on spaces
FLAGS = {"this": os.environ.get("DDPB_FLAGS", "").split(),
         "base": os.environ.get("DDPB_BASE_FLAGS", "").split()}


def call(url, method="GET", body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def populate(url, experiments, runs_each):
    spec = {"workload": "collective", "world_size": 1, "min_bytes": "8", "max_bytes": "8",
            "iters": 1, "warmup": 0, "sweep": {"seed": list(range(runs_each))}}
    ids = []
    t0 = time.time()
    for i in range(experiments):
        exp = call(f"{url}/v1/experiments", "POST", dict(spec, name=f"bench-{i}"))
        call(f"{url}/v1/experiments/{exp['id']}/cancel", "POST")
        ids.append(exp["id"])
    while call(f"{url}/healthz")["runs"]["active"]:
        time.sleep(0.1)
    return ids, time.time() - t0


def cpu_ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def ms(text):
    """wrk's latency text ("662.00us", "1.49ms", "1.02s") in milliseconds."""
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def wrk(url, seconds, conns, pid):
    t0 = cpu_ticks(pid)
    out = subprocess.run(["wrk", "-t2", f"-c{conns}", f"-d{seconds}s", "--latency", url],
                         capture_output=True, text=True, check=True).stdout
    ticks = cpu_ticks(pid) - t0
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    lat = {p: ms(v) for p, v in re.findall(r"^\s+(50|90|99)%\s+(\S+)", out, re.M)}
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    cpu_us = ticks / os.sysconf("SC_CLK_TCK") * 1e6 / max(total, 1)
    return {"rps": rps, "lat": lat, "bad": int(errors.group(1)) if errors else 0,
            "cpu_us": cpu_us}


def medians(rounds):
    """Each figure's median over rounds."""
    return {"rps": statistics.median(x["rps"] for x in rounds),
            "cpu_us": statistics.median(x["cpu_us"] for x in rounds),
            **{p: statistics.median(x["lat"][p] for x in rounds) for p in ("50", "90", "99")}}


def start(build, flags, experiments, runs_each):
    """A daemon of `build` with its database built; returns (process, url, state, ids, s)."""
    state = tempfile.mkdtemp(prefix="ddpb-bench-api-")
    env = dict(os.environ, MALLOC_MMAP_MAX_="0", MALLOC_TRIM_THRESHOLD_="4294967296")
    daemon = os.path.join(ROOT, build, "daemon", "ddpbenchd")
    worker = os.path.join(ROOT, BUILDS["this"], "worker", "ddpbench-worker")  # the same for all
    proc = subprocess.Popen([daemon, "--port", "0", "--store-port", "0", "--state-dir", state,
                             "--cpu-slots", "1", "--worker", worker, "--log-level", "warn",
                             *flags], env=env, stdout=subprocess.DEVNULL)
    for _ in range(100):
        if os.path.exists(f"{state}/ddpbenchd.json"):
            break
        time.sleep(0.05)
    info = json.load(open(f"{state}/ddpbenchd.json"))
    url = f"http://127.0.0.1:{info['http_port']}"
    ids, took = populate(url, experiments, runs_each)
    return proc, url, state, ids, took


def main(seconds=10, conns=32, rounds=3, experiments=1000, runs_each=10):
    daemons = {}
    try:
        for name, build in BUILDS.items():
            daemons[name] = start(build, FLAGS[name], experiments, runs_each)
        _, url, _, ids, took = daemons["this"]
        run_id = call(f"{url}/v1/experiments/{ids[0]}")["runs"][0]["id"]
        mid = ids[len(ids) // 2]
        print(f"stored {experiments * runs_each:,} runs in {len(ids):,} experiments through the "
              f"API in {took:.1f}s per daemon; wrk -t2 -c{conns} -d{seconds}s per endpoint, "
              f"{rounds} rounds, builds {BUILDS}, flags {FLAGS}; load average before: "
              f"{' '.join(open('/proc/loadavg').read().split()[:3])}")
        print()
        endpoints = (("list (20 per page)", "/v1/experiments?limit=20"),
                     ("list (50 per page)", "/v1/experiments?limit=50"),
                     ("list filtered", "/v1/experiments?status=cancelled&name=bench-7"),
                     ("get experiment (10 runs)", f"/v1/experiments/{mid}"),
                     ("get run", f"/v1/runs/{run_id}"),
                     ("healthz", "/healthz"))
        got = {(d, path): [] for d in daemons for _, path in endpoints}
        for r in range(rounds):
            order = list(daemons) if r % 2 == 0 else list(reversed(daemons))
            for _, path in endpoints:
                for d in order:
                    proc, durl = daemons[d][0], daemons[d][1]
                    got[(d, path)].append(wrk(durl + path, seconds, conns, proc.pid))
        print("| build | endpoint | requests/s | p50 ms | p90 ms | p99 ms | "
              "daemon CPU µs/request | non-2xx | each round: requests/s (p99 ms) |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---|")
        for name, path in endpoints:
            for d in daemons:
                m = medians(got[(d, path)])
                each = " / ".join(f"{x['rps']:,.0f} ({x['lat']['99']:.1f})"
                                  for x in got[(d, path)])
                print(f"| {d} | {name} `{path}` | {m['rps']:,.0f} | {m['50']:.2f} | "
                      f"{m['90']:.2f} | {m['99']:.2f} | {m['cpu_us']:.0f} | "
                      f"{sum(x['bad'] for x in got[(d, path)])} | {each} |")
        if "base" in daemons:
            print()
            print("| endpoint | requests/s, this / base | CPU per request, base / this |")
            print("|---|---:|---:|")
            for name, path in endpoints:
                t, b = medians(got[("this", path)]), medians(got[("base", path)])
                print(f"| {name} | {t['rps'] / b['rps']:.2f} | {b['cpu_us'] / t['cpu_us']:.2f} |")
        print()
        print(f"load average after: {' '.join(open('/proc/loadavg').read().split()[:3])}")
    finally:
        for proc, _, state, _, _ in daemons.values():
            proc.terminate()
            proc.wait(30)
            shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:6]))
