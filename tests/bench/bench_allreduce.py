#!/usr/bin/env python3
"""bench_allreduce: ddpbench's TCP allreduce against Gloo, OpenMPI over TCP, OpenMPI's
default (shared-memory) path and iperf3's loopback throughput, on this machine, in one
run. Not a test: it prints tables (markdown) and ratios and never passes or fails.

    tests/bench/bench_allreduce.py [--build DIR] [--worlds 2,4] [--rounds 5]
                                   [--iters 20] [--warmup 5] [--json FILE] [--threshold]
                                   [--out-of-place]

What runs (float32 sum, in place as Gloo always is, sizes 8 B and 4 KiB to 64 MiB by
doubling; --out-of-place runs ddpbench and MPI out of place, Gloo cannot):
  ddpbench   the real worker through the real daemon: build/daemon/ddpbenchd on free
             ports with a temporary state directory, one experiment per world size
             submitted over REST ("sizes" lists every size), results read back from the
             API. The daemon pins ranks to CPUs when there are enough (2 ranks here);
             4 ranks on 2 CPUs run unpinned.
  gloo       tests/bench/gloo_allreduce.py on Debian's python3-torch (gloo backend,
             loopback, one thread per rank in OMP_NUM_THREADS / OPENBLAS_NUM_THREADS and
             torch.set_num_threads), run twice each round: pinned one rank per CPU
             (sched_setaffinity, like ddpbench's ranks; only where the ranks fit on
             distinct CPUs) and unpinned. The peer is the better of the two, chosen per
             size and per view (median or best of rounds); both are in the detail table.
  mpi-tcp    tests/bench/mpi_allreduce.c built with mpicc, mpirun --mca pml ob1
             --mca btl tcp,self (bound to cores for 2 ranks).
  mpi-shm    the same program with OpenMPI's defaults (shared memory between ranks of
             one node), for reference: not TCP.
  iperf3     one loopback stream (client and server on different CPUs), the TCP limit.
Every peer gets MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=4294967296 (freed memory is
kept, so nothing re-faults pages), warmup iterations, the same iterations, buffers
allocated once, and the same timing: each iteration timed on its own, an iteration takes
as long as its slowest rank, the median over iterations. Peers run interleaved, round by
round in alternating order, so outside load hits them alike. The headline figure of a size
is the median over rounds; the best round (other processes on a shared machine only ever
slow a peer down) is a second view, and each run's "foreign" CPU time (CPU used meanwhile
by processes other than the peer) is recorded. The whole run holds /tmp/ddpb-bench.lock.

--threshold measures ddpbench's allreduce with the algorithm forced to rd, ring and hd
at 2 and 4 ranks from 4 KiB to 1 MiB (the automatic choice's crossovers) instead.
"""
import argparse
import fcntl
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MALLOC_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "4294967296"}
SIZES = [8] + [4096 << k for k in range(15)]  # 8 B, 4 KiB .. 64 MiB
LOCK = "/tmp/ddpb-bench.lock"


def cpu_busy():
    """Seconds of CPU the whole machine has spent busy since boot."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")


def proc_cpu(pid):
    """CPU seconds of a process and the children it has reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            v = f.read().rsplit(") ", 1)[1].split()
        return sum(int(x) for x in v[11:15]) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def busbw(bytes_, us, world):
    return bytes_ / (us * 1e-6) / 1e9 * 2 * (world - 1) / world if us > 0 else 0.0


# --- ddpbench through the daemon -------------------------------------------------------


class DaemonRunner:
    def __init__(self, build, cpu_slots):
        self.state = tempfile.mkdtemp(prefix="ddpb-bench-")
        env = dict(os.environ, **MALLOC_ENV)
        self.proc = subprocess.Popen(
            [os.path.join(build, "daemon", "ddpbenchd"), "--port", "0", "--store-port", "0",
             "--state-dir", self.state, "--cpu-slots", str(cpu_slots), "--log-level", "warn"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 15
        while time.time() < deadline:
            try:
                with open(os.path.join(self.state, "ddpbenchd.json")) as f:
                    self.url = f"http://127.0.0.1:{json.load(f)['http_port']}"
                return
            except (OSError, ValueError, KeyError):
                time.sleep(0.05)
        raise RuntimeError("ddpbenchd did not start")

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.load(r)

    def run(self, spec, timeout=1800):
        exp = self.call("POST", "/v1/experiments", spec)
        deadline = time.time() + timeout
        while time.time() < deadline:
            exp = self.call("GET", f"/v1/experiments/{exp['id']}")
            if exp["status"] in ("succeeded", "failed", "cancelled", "interrupted"):
                break
            time.sleep(0.2)
        run = self.call("GET", f"/v1/runs/{exp['runs'][0]['id']}")
        if run["status"] != "succeeded":
            raise RuntimeError(f"ddpbench run {run['status']}: {run.get('error')}")
        return run["collectives"]

    def close(self):
        self.proc.terminate()
        self.proc.wait(30)
        shutil.rmtree(self.state, ignore_errors=True)


def run_ddpbench(daemons, world, sizes, iters, warmup, inplace, algorithm="auto", **spec):
    """spec: further fields of the experiment (e.g. transport)."""
    rows = daemons[world].run(dict({
        "name": f"bench-allreduce-{world}", "workload": "collective", "world_size": world,
        "op": "allreduce", "dtype": "float32", "redop": "sum", "algorithm": algorithm,
        "sizes": sizes, "iters": iters, "warmup": warmup, "check": True, "inplace": inplace},
        **spec))
    out = {}
    for r in rows:
        if r["wrong"]:
            raise RuntimeError(f"ddpbench computed {r['wrong']} wrong elements at {r['bytes']} B")
        out[r["bytes"]] = {"us": r["time_us_median"], "alg": r["algorithm"]}
    return out


# --- the peers --------------------------------------------------------------------------


def parse_lines(text):
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            out[int(r["bytes"])] = {"us": r["median_us"]}
    return out


GLOO_VARIANTS = ("gloo-pinned", "gloo-unpinned")


def gloo_runs(world, variant):
    """Whether this Gloo variant runs at this world size: pinning needs a CPU per rank."""
    return variant != "gloo-pinned" or world <= os.cpu_count()


def run_gloo(world, sizes, iters, warmup, pinned):
    env = dict(os.environ, **MALLOC_ENV)
    env.pop("BENCH_CPUS", None)
    if pinned:
        env["BENCH_CPUS"] = ",".join(str(c) for c in range(world))
    p = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "gloo_allreduce.py"), str(world),
                        str(iters), str(warmup)] + [str(s) for s in sizes],
                       env=env, capture_output=True, text=True, timeout=1800)
    if p.returncode:
        raise RuntimeError(f"gloo: {p.stderr[-2000:]}")
    return parse_lines(p.stdout)


def run_mpi(binary, world, sizes, iters, warmup, tcp, inplace):
    args = ["mpirun", "--allow-run-as-root", "-np", str(world)]
    if world <= os.cpu_count():
        args += ["--bind-to", "core"]
    else:
        args += ["--oversubscribe", "--bind-to", "none"]
    if tcp:
        args += ["--mca", "pml", "ob1", "--mca", "btl", "tcp,self"]
    env = dict(os.environ, **MALLOC_ENV)
    if not inplace:
        env["BENCH_OUT_OF_PLACE"] = "1"
    for k in list(MALLOC_ENV) + (["BENCH_OUT_OF_PLACE"] if not inplace else []):
        args += ["-x", k]
    p = subprocess.run(args + [binary, str(iters), str(warmup)] + [str(s) for s in sizes],
                       env=env, capture_output=True, text=True, timeout=1800)
    if p.returncode:
        raise RuntimeError(f"mpi: {p.stderr[-2000:]}")
    return parse_lines(p.stdout)


def run_iperf3(seconds=3):
    port = 5201 + os.getpid() % 1000
    server = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(port), "-A", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        p = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds),
                            "-A", "0", "-J"], capture_output=True, text=True, timeout=60)
        return json.loads(p.stdout)["end"]["sum_received"]["bits_per_second"] / 8e9
    finally:
        server.wait(10)


def own_cpu(daemons):
    """CPU seconds of everything this script started: reaped children (gloo, mpirun and
    their ranks) and the daemons with the workers they reaped."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime + sum(proc_cpu(d.proc.pid) for d in daemons.values())


def build_mpi(tmp):
    binary = os.path.join(tmp, "mpi_allreduce")
    subprocess.run(["mpicc", "-O2", "-o", binary, os.path.join(HERE, "mpi_allreduce.c")],
                   check=True)
    return binary


# --- reporting ----------------------------------------------------------------------------


def fmt_size(b):
    for unit, shift in (("M", 20), ("K", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift}{unit}"
    return str(b)


def machine():
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"{cpu}, {os.cpu_count()} CPUs, Linux {platform.release()}"


def times_of(results, peer, world, size):
    return [r[peer][world][size]["us"] for r in results if size in r.get(peer, {}).get(world, {})]


def stat_of(results, peer, world, size, fn):
    """fn (min or median) over the rounds of peer's time at size. "gloo" is the faster of
    its pinned and unpinned variants, each taken over the rounds first: the better
    configuration, not the luckier round of either."""
    if peer == "gloo":
        vals = [stat_of(results, g, world, size, fn) for g in GLOO_VARIANTS]
        vals = [v for v in vals if v is not None]
        return min(vals) if vals else None
    vals = times_of(results, peer, world, size)
    return fn(vals) if vals else None


def best_of(results, peer, world, size):
    return stat_of(results, peer, world, size, min)


def median_of(results, peer, world, size):
    return stat_of(results, peer, world, size, statistics.median)


def gloo_table(results, world):
    """Both Gloo variants, median and best of rounds, and which one the peer is."""
    print("| size | pinned, median | unpinned, median | peer (median) | pinned, best | "
          "unpinned, best |")
    print("|---|---|---|---|---|---|")
    for size in SIZES[1:]:
        med = {g: median_of(results, g, world, size) for g in GLOO_VARIANTS}
        best = {g: best_of(results, g, world, size) for g in GLOO_VARIANTS}
        cells = [fmt_size(size)]
        for view in (med, best):
            for g in GLOO_VARIANTS:
                cells.append(f"{busbw(size, view[g], world):.3f}" if view[g] else "-")
            if view is med:
                ran = [g for g in GLOO_VARIANTS if med[g]]
                cells.append(min(ran, key=lambda g: med[g]).split("-")[1] if ran else "-")
        print("| " + " | ".join(cells) + " |")
    lat = {g: median_of(results, g, world, 8) for g in GLOO_VARIANTS}
    print(f"\n8-byte latency, {world} ranks, median of rounds (us): " +
          ", ".join(f"{g} {lat[g]:.1f}" for g in GLOO_VARIANTS if lat[g]))


def table(results, world, peers, pick):
    head = ["size"] + peers + [f"ddpbench/{p}" for p in peers if p != "ddpbench"] + ["algorithm"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for size in SIZES[1:]:
        us = {p: pick(results, p, world, size) for p in peers}
        bw = {p: busbw(size, us[p], world) if us[p] else None for p in peers}
        cells = [fmt_size(size)] + [f"{bw[p]:.3f}" if bw[p] else "-" for p in peers]
        for p in peers:
            if p != "ddpbench":
                ok = bw.get("ddpbench") and bw[p]
                cells.append(f"{bw['ddpbench'] / bw[p]:.2f}" if ok else "-")
        algs = [r["ddpbench"][world][size].get("alg", "") for r in results
                if size in r.get("ddpbench", {}).get(world, {})]
        cells.append(max(set(algs), key=algs.count) if algs else "-")
        print("| " + " | ".join(cells) + " |")
    lat = {p: pick(results, p, world, 8) for p in peers}
    print(f"\n8-byte latency, {world} ranks (us): " +
          ", ".join(f"{p} {lat[p]:.1f}" for p in peers if lat[p]))


def report(results, worlds, peers, iperf, args):
    print(f"## Allreduce, float32 sum, {'out of place' if args.out_of_place else 'in place'}, "
          f"loopback ({time.strftime('%Y-%m-%d')})\n")
    print(f"Machine: {machine()}  ")
    print(f"Command: `{' '.join(sys.argv)}`  ")
    print(f"{len(results)} rounds, {args.iters} iterations after {args.warmup} warmup each; a "
          f"round's figure is the median iteration (each iteration as slow as its slowest "
          f"rank).")
    if iperf:
        print(f"\niperf3 loopback, one stream: median {statistics.median(iperf):.2f} GB/s, best "
              f"{max(iperf):.2f} (runs: {', '.join(f'{v:.2f}' for v in iperf)})")
    foreign = [v for r in results for v in r.get("foreign_cpu_s", {}).values()]
    if foreign:
        print(f"\nCPU used by other processes during a peer's run: median {statistics.median(foreign):.1f} s, "
              f"max {max(foreign):.1f} s")
    for world in worlds:
        print(f"\n### {world} ranks: bus bandwidth (GB/s), median of {len(results)} rounds\n")
        table(results, world, peers, median_of)
        print(f"\n### {world} ranks: bus bandwidth (GB/s), best of {len(results)} rounds "
              "(second view)\n")
        table(results, world, peers, best_of)
        if "gloo" in peers:
            print(f"\n### {world} ranks: Gloo pinned and unpinned, bus bandwidth (GB/s)\n")
            gloo_table(results, world)


def report_threshold(results, worlds):
    algs = ("rd", "ring", "hd")
    print(f"## Automatic choice: allreduce float32 sum in place, median time (us) over "
          f"{len(results)} rounds\n")
    for world in worlds:
        print(f"\n### {world} ranks\n\n| size | " + " | ".join(algs) + " | fastest |")
        print("|---|" + "---|" * (len(algs) + 1))
        for size in [4096 << k for k in range(9)]:
            us = {g: median_of(results, g, world, size) for g in algs}
            if all(us.values()):
                best = min(algs, key=lambda g: us[g])
                print(f"| {fmt_size(size)} | " + " | ".join(f"{us[g]:.1f}" for g in algs) +
                      f" | {best} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--peers", default="ddpbench,gloo,mpi-tcp,mpi-shm")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--threshold", action="store_true")
    ap.add_argument("--out-of-place", action="store_true")
    args = ap.parse_args()
    worlds = [int(w) for w in args.worlds.split(",")]
    inplace = not args.out_of_place
    peers = args.peers.split(",")
    lock = open(LOCK, "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    tmp = tempfile.mkdtemp(prefix="ddpb-bench-")
    daemons = {w: DaemonRunner(args.build, w) for w in worlds}
    results, iperf = [], []
    try:
        mpi = build_mpi(tmp) if any(p.startswith("mpi") for p in peers) else None
        if args.threshold:
            sizes = [4096 << k for k in range(9)]
            for rnd in range(args.rounds):
                res = {}
                algs = ("rd", "ring", "hd")
                for world in worlds:
                    for alg in (algs if rnd % 2 == 0 else algs[::-1]):
                        log(f"round {rnd + 1}: {alg} x{world}")
                        res.setdefault(alg, {})[world] = run_ddpbench(
                            daemons, world, sizes, args.iters, args.warmup, inplace, alg)
                results.append(res)
            report_threshold(results, worlds)
            return 0
        runners = {
            "ddpbench": lambda w: run_ddpbench(daemons, w, SIZES, args.iters, args.warmup, inplace),
            "gloo-pinned": lambda w: run_gloo(w, SIZES, args.iters, args.warmup, True),
            "gloo-unpinned": lambda w: run_gloo(w, SIZES, args.iters, args.warmup, False),
            "mpi-tcp": lambda w: run_mpi(mpi, w, SIZES, args.iters, args.warmup, True, inplace),
            "mpi-shm": lambda w: run_mpi(mpi, w, SIZES, args.iters, args.warmup, False, inplace),
        }
        timed = [v for p in peers for v in (GLOO_VARIANTS if p == "gloo" else (p,))]
        for rnd in range(args.rounds):
            res = {}
            order = timed if rnd % 2 == 0 else timed[::-1]
            for world in worlds:
                for p in order:
                    if not gloo_runs(world, p):
                        continue
                    busy0, own0 = cpu_busy(), own_cpu(daemons)
                    res.setdefault(p, {})[world] = runners[p](world)
                    foreign = cpu_busy() - busy0 - (own_cpu(daemons) - own0)
                    res.setdefault("foreign_cpu_s", {})[f"{p} x{world}"] = round(foreign, 2)
                    log(f"round {rnd + 1}/{args.rounds}: {p} x{world} (foreign CPU {foreign:.1f} s)")
            if shutil.which("iperf3"):
                iperf.append(run_iperf3())
            results.append(res)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"results": results, "iperf3": iperf}, f)
        report(results, worlds, peers, iperf, args)
    finally:
        for d in daemons.values():
            d.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
