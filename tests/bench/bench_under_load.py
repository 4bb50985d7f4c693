#!/usr/bin/python3
"""Issue 31's "under load" measurement on one machine as a 2-node cluster (deploy/netlab.sh,
root):

  tests/bench/bench_under_load.py --build build [--seconds 60] [--clients 16]

A 2-node netlab cluster (plaintext HTTP, or HTTPS with --tls: netlab's own CA, pinned by
every client) trains resnet18 (3x32x32 synthetic, batch 32, world 2 on 2 nodes) while `clients` threads
inside host 0 hammer the leader with GET report, trace and fit of that experiment and run
for `seconds` (their versions change at every step, so each report and fit is computed, the
worst case for the cache). A probing client POSTs /v1/cluster/sync (a sync for a node that
never joined, with a well-formed body: the leader answers it on the same threads, through
the same validation and the cluster registry's lookup under its mutex as a follower's
sync, with 404/409) every 50 ms and times each reply. Prints: the
requests by endpoint and status, the probe's latency (median, p99, max), whether the
follower was ever declared lost, and how the run ended. A benchmark: it prints figures,
never pass/fail. Holds /tmp/ddpb-bench.lock while measuring.
"""
import argparse
import fcntl
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_netlab import PREFIX, Lab, log  # noqa: E402

# Runs inside host 0's network namespace: the hammering clients and the probe, for
# `seconds`; prints one JSON object.
HAMMER = r'''
import json, ssl, sys, threading, time, urllib.request, urllib.error
url, token, exp, run, seconds, clients = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]), int(sys.argv[6])
ctx = ssl.create_default_context(cafile=sys.argv[7]) if len(sys.argv) > 7 and sys.argv[7] else None
paths = [f"/v1/experiments/{exp}/report", f"/v1/runs/{run}/trace", f"/v1/experiments/{exp}/fit"]
counts, lock, stop = {}, threading.Lock(), time.time() + seconds
def get(path, method="GET", body=None):
    req = urllib.request.Request(url + path, method=method, data=body,
                                 headers={"Authorization": "Bearer " + token,
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
            r.read(); return r.status
    except urllib.error.HTTPError as e:
        e.read(); return e.code
    except Exception:
        return "error"
def client(i):
    k = i
    while time.time() < stop:
        p = paths[k % 3]; k += 1
        s = get(p)
        with lock:
            key = p.rsplit("/", 1)[1] + " " + str(s)
            counts[key] = counts.get(key, 0) + 1
        if s == 503:
            time.sleep(0.05)
lat = []
def probe():
    body = json.dumps({"node_id": 250, "session": "0" * 64, "state": "up"}).encode()
    while time.time() < stop:
        t0 = time.time(); s = get("/v1/cluster/sync", "POST", body); lat.append((time.time() - t0, s))
        time.sleep(0.05)
ts = [threading.Thread(target=client, args=(i,)) for i in range(clients)] + [threading.Thread(target=probe)]
for t in ts: t.start()
for t in ts: t.join()
print(json.dumps({"counts": counts, "probe": lat}))
'''


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "..", "build"))
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--profile", default="10gbe")
    ap.add_argument("--tls", action="store_true", help="the cluster over HTTPS (netlab --tls)")
    ap.add_argument("--steps", type=int, default=400, help="resnet18 steps: enough to outlast the hammer")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench_under_load needs root (deploy/netlab.sh)")
    with open("/tmp/ddpb-bench.lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        log(f"# {time.strftime('%Y-%m-%d %H:%M')} {os.uname().nodename}, {os.cpu_count()} CPUs; "
            f"{a.clients} clients for {a.seconds:.0f} s, profile {a.profile}, "
            f"{'TLS' if a.tls else 'plaintext'}")
        lab = Lab(os.path.abspath(a.build), 2, a.profile, tls=a.tls)
        try:
            spec = {"name": "bench-under-load", "workload": "train", "model": "resnet18",
                    "batch_size": 32, "steps": a.steps, "warmup_steps": 2, "trace_steps": 20,
                    "strategy": "ddp", "world_size": 2, "nodes": 2,
                    "dataset": {"name": "synthetic", "shape": [3, 32, 32]}, "timeout_s": 1800,
                    "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9}}
            exp = lab.call("POST", "/v1/experiments", spec)
            run = None
            while run is None:
                e = lab.call("GET", f"/v1/experiments/{exp['id']}")
                run = e["runs"][0]["id"] if e.get("runs") else None
                time.sleep(0.2)
            t0 = time.time()
            hammer_from = time.time()
            r = subprocess.run(["ip", "netns", "exec", f"{PREFIX}-h0", sys.executable, "-c", HAMMER,
                                lab.url, lab.token, str(exp["id"]), str(run), str(a.seconds),
                                str(a.clients), lab.ca], capture_output=True, text=True,
                               timeout=a.seconds + 120)
            if r.returncode != 0:
                raise RuntimeError(f"hammer: {r.stderr[-2000:]}")
            got = json.loads(r.stdout)
            wall = time.time() - t0
            deadline = time.time() + 1800
            while True:
                e = lab.call("GET", f"/v1/experiments/{exp['id']}")
                if e["status"] in ("succeeded", "failed", "cancelled", "interrupted") or \
                        time.time() > deadline:
                    break
                time.sleep(0.5)
            nodes = lab.call("GET", "/v1/nodes")
            logs = ""
            for h in ("h0", "h1"):
                try:
                    with open(os.path.join(lab.dir, h, "daemon.log"), errors="replace") as f:
                        logs += f.read()
                except OSError:
                    pass
        finally:
            lab.close()
    lat = [t for t, _ in got["probe"]]
    statuses = sorted({str(s) for _, s in got["probe"]})
    log("\n| endpoint | status | requests |")
    log("|---|---|---|")
    for k in sorted(got["counts"]):
        ep, st = k.split(" ")
        log(f"| {ep} | {st} | {got['counts'][k]} |")
    total = sum(got["counts"].values())
    log(f"\nheavy requests: {total} in {a.seconds:.0f} s ({total / a.seconds:.0f}/s); hammer wall {wall:.1f} s")
    log("\n| /v1/cluster/sync probe | replies | median ms | p99 ms | max ms | statuses |")
    log("|---|---|---|---|---|---|")
    log(f"| leader, from host 0 | {len(lat)} | {1000 * statistics.median(lat):.1f} | "
        f"{1000 * pct(lat, 0.99):.1f} | {1000 * max(lat):.1f} | {', '.join(statuses)} |")
    node_rows = nodes.get("nodes", nodes) if isinstance(nodes, dict) else nodes
    lost = "lost (no sync" in logs or any(
        isinstance(n, dict) and n.get("state") == "lost" for n in node_rows)
    started, finished = e.get("started_at"), e.get("finished_at")
    hf = time.strftime("%H:%M:%S", time.gmtime(hammer_from))
    log(f"\ntraining: started {started}, finished {finished}; the hammer ran from {hf} UTC "
        f"for {a.seconds:.0f} s")
    log(f"\nrun: {e['status']} {[x.get('error') for x in e.get('runs', [])] if e['status'] != 'succeeded' else ''}")
    log(f"nodes at the end: {[(n.get('name'), n.get('state')) for n in node_rows if isinstance(n, dict)]}")
    log(f"a follower declared lost (daemon logs): {'yes' if lost else 'no'}")


if __name__ == "__main__":
    main()
