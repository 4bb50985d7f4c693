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

`bench_api.py launch [ROUNDS] [TINY_RUNS]` measures instead what a run pays to start, each
build with its own worker (DDPB_BASE_BUILD_DIR: the before), rounds interleaved, alternating
which build goes first, medians over everything:
- the worker's start: ddpbench-worker without its launch environment (it exits at once,
  having loaded every library it links), spawn to exit, 10 per round;
- worker start to its first report line: the worker with a launch environment and a spec
  (its store unreachable), from spawn to the hello line, and its peak RSS then (VmHWM:
  wait4's figure would hold the forking Python's), 10 per round; the same for a CPU
  training spec (lenet5), whose check loads the training module before the hello;
- POST to succeeded of a 2-rank 4 KiB allreduce collective run (--cpu-slots 2; the
  experiment polled every 2 ms), 3 per round;
- tiny 1-rank runs scheduled per second: TINY_RUNS runs of an 8-byte 1-iteration
  collective (experiments sweeping 50 seeds each, submitted back to back), from the first
  POST to the last experiment's end, once per round.
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


def launch_daemon(build):
    """A daemon of `build` with its own worker and 2 CPU slots; returns (process, url, state)."""
    state = tempfile.mkdtemp(prefix="ddpb-bench-launch-")
    daemon = os.path.join(ROOT, build, "daemon", "ddpbenchd")
    worker = os.path.join(ROOT, build, "worker", "ddpbench-worker")
    proc = subprocess.Popen([daemon, "--port", "0", "--store-port", "0", "--state-dir", state,
                             "--cpu-slots", "2", "--worker", worker, "--log-level", "warn"],
                            stdout=subprocess.DEVNULL)
    for _ in range(200):
        if os.path.exists(f"{state}/ddpbenchd.json"):
            break
        time.sleep(0.05)
    info = json.load(open(f"{state}/ddpbenchd.json"))
    return proc, f"http://127.0.0.1:{info['http_port']}", state


def worker_bare_start(worker):
    """Seconds from spawning a worker without its launch environment to its exit."""
    t0 = time.perf_counter()
    subprocess.run([worker], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={"PATH": "/usr/bin:/bin"})
    return time.perf_counter() - t0


def worker_first_report(worker, spec_path):
    """Seconds from spawning a worker with a launch environment to its hello line, and its
    peak RSS in KiB then."""
    env = {"PATH": "/usr/bin:/bin", "DDPB_RUN": "bench", "DDPB_WORLD_SIZE": "1",
           "DDPB_RANK": "0", "DDPB_LOCAL_RANK": "0", "DDPB_STORE": "127.0.0.1:9",
           "DDPB_SECRET": "bench", "DDPB_SPEC": spec_path, "DDPB_TIMEOUT_MS": "500"}
    t0 = time.perf_counter()
    p = subprocess.Popen([worker], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    line = p.stdout.readline()
    took = time.perf_counter() - t0
    with open(f"/proc/{p.pid}/status") as f:
        hwm = int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1))
    p.kill()
    p.wait()
    p.stdout.close()
    if b'"hello"' not in line:
        raise RuntimeError(f"{worker}: first line {line!r}")
    return took, hwm


def post_to_end(url, specs, poll_s):
    """Seconds from POSTing specs (back to back) to the end of all their experiments;
    fails unless each succeeded."""
    t0 = time.perf_counter()
    ids = [call(f"{url}/v1/experiments", "POST", spec)["id"] for spec in specs]
    for i in ids:
        while True:
            got = call(f"{url}/v1/experiments/{i}")
            if got["status"] not in ("queued", "running"):
                break
            time.sleep(poll_s)
        if got["status"] != "succeeded":
            raise RuntimeError(f"{got['spec']}: {got['status']}: "
                               f"{[r.get('error') for r in got['runs']]}")
    return time.perf_counter() - t0


def launch(rounds=7, tiny_runs=100):
    spec_path = os.path.join(tempfile.mkdtemp(prefix="ddpb-bench-spec-"), "spec.json")
    with open(spec_path, "w") as f:
        json.dump({"workload": "collective", "world_size": 1, "min_bytes": "4K",
                   "max_bytes": "4K"}, f)
    train_path = os.path.join(os.path.dirname(spec_path), "train.json")
    with open(train_path, "w") as f:
        json.dump({"workload": "train", "model": "lenet5", "world_size": 1,
                   "dataset": {"name": "synthetic", "shape": [1, 28, 28], "classes": 10}}, f)
    two = {"workload": "collective", "world_size": 2, "op": "allreduce", "min_bytes": "4K",
           "max_bytes": "4K"}
    # a sweep axis holds at most 64 values: experiments of 50 runs, submitted together
    tiny = [{"workload": "collective", "world_size": 1, "min_bytes": "8", "max_bytes": "8",
             "iters": 1, "warmup": 0, "sweep": {"seed": list(range(i, min(i + 50, tiny_runs)))}}
            for i in range(0, tiny_runs, 50)]
    daemons = {name: launch_daemon(build) for name, build in BUILDS.items()}
    keys = ("bare", "rss", "first", "train", "train_rss", "post", "tiny")
    got = {(d, k): [] for d in daemons for k in keys}
    try:
        for r in range(rounds):
            for d in (list(daemons) if r % 2 == 0 else list(reversed(daemons))):
                worker = os.path.join(ROOT, BUILDS[d], "worker", "ddpbench-worker")
                url = daemons[d][1]
                for _ in range(10):
                    got[(d, "bare")].append(worker_bare_start(worker))
                    took, rss = worker_first_report(worker, spec_path)
                    got[(d, "first")].append(took)
                    got[(d, "rss")].append(rss)
                    took, rss = worker_first_report(worker, train_path)
                    got[(d, "train")].append(took)
                    got[(d, "train_rss")].append(rss)
                for _ in range(3):
                    got[(d, "post")].append(post_to_end(url, [two], 0.002))
                got[(d, "tiny")].append(tiny_runs / post_to_end(url, tiny, 0.01))
        print(f"launch costs, builds {BUILDS}, {rounds} rounds interleaved; load average "
              f"after: {' '.join(open('/proc/loadavg').read().split()[:3])}")
        print()
        print("| build | worker start ms | worker peak RSS at first report MiB | "
              "start to first report ms | training spec: start to first report ms "
              "(peak RSS MiB) | POST to succeeded s (2-rank 4 KiB allreduce) | "
              "tiny 1-rank runs/s |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for d in daemons:
            med = {k: statistics.median(got[(d, k)]) for k in keys}
            print(f"| {d} | {med['bare'] * 1e3:.1f} | {med['rss'] / 1024:.0f} | "
                  f"{med['first'] * 1e3:.1f} | {med['train'] * 1e3:.1f} "
                  f"({med['train_rss'] / 1024:.0f}) | {med['post']:.3f} "
                  f"(min {min(got[(d, 'post')]):.3f}, n={len(got[(d, 'post')])}) | "
                  f"{med['tiny']:.1f} (each round: "
                  f"{' / '.join(f'{x:.0f}' for x in got[(d, 'tiny')])}) |")
    finally:
        for proc, _, state in daemons.values():
            proc.terminate()
            proc.wait(30)
            shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(os.path.dirname(spec_path), ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["launch"]:
        launch(*(int(a) for a in sys.argv[2:4]))
    else:
        main(*(int(a) for a in sys.argv[1:6]))
