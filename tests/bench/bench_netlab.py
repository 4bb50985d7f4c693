#!/usr/bin/python3
"""Issue 15's measurements on one machine as a cluster (deploy/netlab.sh, root):

  tests/bench/bench_netlab.py --build build [--rounds 3] [--part busbw|hier|ddp|all]

busbw: allreduce between 2 emulated nodes, one rank each (nodes 2), under each profile,
  64 KiB to 64 MiB; the largest message's busbw against the profile's line rate (busbw
  counts payload; TCP/IP headers take about 5% of a 1500-byte frame, so ~95% is the
  ceiling a shaper at line rate allows). Profiles are interleaved within each round.
hier: 2 nodes x 2 ranks under 1gbe: the flat ring against the hierarchical allreduce (and
  what auto picks), 64 KiB to 64 MiB, algorithms interleaved in each round (one sweep).
ddp: DDP training speed-up (strategy ddp) of mnist-cnn (batch 64) and resnet18 (3x32x32,
  batch 32) at 1 rank, 2 ranks on 2 nodes and 4 ranks on 2 nodes, under 1gbe and 10gbe:
  speed-up = throughput(N) / throughput(1) under the same profile, from the daemon's stored
  results.

Every emulated host shares this machine's CPUs: ranks on different "nodes" still compete
for the same cores, and each host's daemon pins within its own view of them. The figures
show what the network costs relative to the compute this machine has, not what a cluster
of such machines would do. Headline: the median over rounds. A benchmark: it prints
figures, never pass/fail. Holds /tmp/ddpb-bench.lock while measuring.
"""
import argparse
import fcntl
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
NETLAB = os.path.join(SOURCE, "deploy", "netlab.sh")
PREFIX = "ddpbbn"
ENV = dict(os.environ, NETLAB_PREFIX=PREFIX, NETLAB_SUBNET="10.216.0")
LINE_GBS = {"1gbe": 0.125, "10gbe": 1.25, "25gbe": 3.125}
PORT = 7600


def log(msg):
    print(msg, flush=True)


class Lab:
    """netlab up with n hosts under profile; submit to host 0's leader from inside host 0."""

    def __init__(self, build, n, profile, tls=False):
        self.dir = tempfile.mkdtemp(prefix="ddpb-bn-")
        r = subprocess.run([NETLAB, "up", "--nodes", str(n), "--profile", profile, "--dir",
                            self.dir, "--build", build, "--port-base", str(PORT)] +
                           (["--tls"] if tls else []),
                           capture_output=True, text=True, env=ENV, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"netlab up: {r.stdout} {r.stderr}")
        with open(os.path.join(self.dir, "token")) as f:
            self.token = f.read().strip()
        with open(os.path.join(self.dir, "h0", "url")) as f:
            self.url = f.read().strip()
        # --tls: the cluster's CA (netlab made it), which every client pins
        self.ca = os.path.join(self.dir, "tls", "ca.pem") if tls else ""

    def call(self, method, path, body=None):
        args = ["ip", "netns", "exec", f"{PREFIX}-h0", "curl", "-sS", "--fail-with-body",
                "--max-time", "60", "-X", method, self.url + path,
                "-H", f"Authorization: Bearer {self.token}"]
        if self.ca:
            args += ["--cacert", self.ca]
        if body is not None:
            args += ["-H", "Content-Type: application/json", "--data-binary", json.dumps(body)]
        r = subprocess.run(args, capture_output=True, text=True, timeout=90)
        if r.returncode != 0:
            raise RuntimeError(f"{method} {path}: {r.stdout} {r.stderr}")
        return json.loads(r.stdout)

    def run(self, spec, timeout=3600):
        exp = self.call("POST", "/v1/experiments", spec)
        deadline = time.time() + timeout
        while time.time() < deadline:
            e = self.call("GET", f"/v1/experiments/{exp['id']}")
            if e["status"] in ("succeeded", "failed", "cancelled", "interrupted"):
                if e["status"] != "succeeded":
                    raise RuntimeError(f"experiment {e['id']} {e['status']}: "
                                       f"{[r.get('error') for r in e['runs']]}")
                return self.call("GET", f"/v1/experiments/{exp['id']}/results")
            time.sleep(0.5)
        raise RuntimeError(f"experiment {exp['id']} did not end in {timeout}s")

    def close(self):
        subprocess.run([NETLAB, "down", "--dir", self.dir], capture_output=True, env=ENV,
                       timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)


def coll_spec(world, nodes, algorithms=None, min_b="64K", max_b="64M", iters=8):
    spec = {"name": "bench-netlab", "workload": "collective", "op": "allreduce",
            "world_size": world, "nodes": nodes, "min_bytes": min_b, "max_bytes": max_b,
            "factor": 4, "iters": iters, "warmup": 2, "timeout_s": 1800}
    if algorithms:
        spec["sweep"] = {"algorithm": algorithms}
    return spec


def part_busbw(build, rounds, profiles):
    got = {p: [] for p in profiles}  # profile -> [busbw of the largest message per round]
    sizes = {}
    for rnd in range(rounds):
        for prof in profiles:
            lab = Lab(build, 2, prof)
            try:
                res = lab.run(coll_spec(2, 2))
            finally:
                lab.close()
            rows = sorted(res["rows"], key=lambda r: r["bytes"])
            for r in rows:
                sizes.setdefault(prof, {}).setdefault(r["bytes"], []).append(r["busbw_gbs_median"])
            got[prof].append(rows[-1]["busbw_gbs_median"])
            log(f"round {rnd + 1} {prof}: 64 MiB busbw {rows[-1]['busbw_gbs_median']:.4f} GB/s")
    log("\n| profile | line rate GB/s | busbw 64 MiB GB/s (median of rounds) | of line rate | rounds |")
    log("|---|---|---|---|---|")
    for prof in profiles:
        med = statistics.median(got[prof])
        line = LINE_GBS.get(prof)
        log(f"| {prof} | {line if line else '-'} | {med:.4f} | "
            f"{f'{100 * med / line:.1f}%' if line else '-'} | {', '.join(f'{v:.4f}' for v in got[prof])} |")
    log("\nbusbw GB/s by size (median of rounds):")
    log("| profile | " + " | ".join(fmt_size(b) for b in sorted(next(iter(sizes.values())))) + " |")
    for prof in profiles:
        log(f"| {prof} | " + " | ".join(f"{statistics.median(v):.4f}" for _, v in sorted(sizes[prof].items())) + " |")


def part_hier(build, rounds):
    """(asked, bytes) -> [(time_us, busbw, what ran)] over rounds; each algorithm its own
    experiment (a row names the algorithm that ran, so auto's choice shows), the three
    interleaved in each round on the same links."""
    algs = ["ring", "hier", "auto"]
    table = {}
    lab = Lab(build, 2, "1gbe")
    try:
        for rnd in range(rounds):
            for alg in algs[rnd % 3:] + algs[:rnd % 3]:
                spec = dict(coll_spec(4, 2, iters=6), algorithm=alg)
                for r in lab.run(spec)["rows"]:
                    table.setdefault((alg, r["bytes"]), []).append(
                        (r["time_us_median"], r["busbw_gbs_median"], r["algorithm"]))
            log(f"round {rnd + 1} done")
    finally:
        lab.close()
    sizes = sorted({b for _, b in table})
    log("\n| size | ring us | hier us | auto us (ran) | hier / ring time | ring busbw | hier busbw |")
    log("|---|---|---|---|---|---|---|")
    for b in sizes:
        med = {k: statistics.median(t for t, _, _ in table[(k, b)]) for k in algs}
        bw = {k: statistics.median(w for _, w, _ in table[(k, b)]) for k in ("ring", "hier")}
        ran = "/".join(sorted({x for _, _, x in table[("auto", b)]}))
        log(f"| {fmt_size(b)} | {med['ring']:.0f} | {med['hier']:.0f} | {med['auto']:.0f} ({ran}) | "
            f"{med['hier'] / med['ring']:.2f} | {bw['ring']:.4f} | {bw['hier']:.4f} |")


def fmt_size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def part_ddp(build, rounds, profiles):
    models = [("mnist-cnn", 64, None, 200), ("resnet18", 32, [3, 32, 32], 30)]
    places = [(1, 0), (2, 2), (4, 2)]
    thr = {}  # (profile, model, world) -> [throughput per round]
    for rnd in range(rounds):
        for prof in profiles:
            lab = Lab(build, 2, prof)
            try:
                for model, batch, shape, steps in models:
                    for world, nodes in places:
                        ds = {"name": "synthetic"}
                        if shape:
                            ds["shape"] = shape
                        spec = {"name": "bench-netlab-ddp", "workload": "train", "model": model,
                                "batch_size": batch, "steps": steps, "warmup_steps": 5,
                                "strategy": "ddp", "world_size": world, "nodes": nodes,
                                "dataset": ds, "timeout_s": 3600,
                                "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9}}
                        res = lab.run(spec)
                        t = res["rows"][0]["throughput_mean"]  # over repeats: one here
                        thr.setdefault((prof, model, world), []).append(t)
                        log(f"round {rnd + 1} {prof} {model} world {world}: {t:.1f} samples/s")
            finally:
                lab.close()
    log("\n| profile | model | ranks (nodes) | samples/s (median) | speed-up | efficiency |")
    log("|---|---|---|---|---|---|")
    for prof in profiles:
        for model, *_ in models:
            base = statistics.median(thr[(prof, model, 1)])
            for world, nodes in places:
                t = statistics.median(thr[(prof, model, world)])
                log(f"| {prof} | {model} | {world} ({max(nodes, 1)}) | {t:.1f} | {t / base:.2f} | "
                    f"{t / base / world:.2f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(SOURCE, "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--part", default="all", choices=["busbw", "hier", "ddp", "all"])
    ap.add_argument("--profiles", default="1gbe,10gbe,25gbe,unshaped", help="busbw part")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench_netlab needs root (deploy/netlab.sh)")
    with open("/tmp/ddpb-bench.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        log(f"# {time.strftime('%Y-%m-%d %H:%M')} {os.uname().nodename}, {os.cpu_count()} CPUs")
        if a.part in ("busbw", "all"):
            part_busbw(a.build, a.rounds, a.profiles.split(","))
        if a.part in ("hier", "all"):
            part_hier(a.build, a.rounds)
        if a.part in ("ddp", "all"):
            part_ddp(a.build, a.rounds, ["1gbe", "10gbe"])


if __name__ == "__main__":
    main()
