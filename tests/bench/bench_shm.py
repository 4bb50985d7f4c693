#!/usr/bin/env python3
"""bench_shm: issue 30's measurements of the shared-memory transport, on this machine, in
one run. Not a test: it prints markdown tables and never passes or fails.

    tests/bench/bench_shm.py [--build DIR] [--part allreduce,profile,tuning,copy,netlab,train]
                             [--worlds 2,4] [--rounds N] [--iters N] [--warmup N]
                             [--quick] [--json FILE]

allreduce  float32 sum in place, 8 B and 4 KiB..64 MiB by doubling, at each world size,
           interleaved round by round (the order reversed every other round):
             shm, tcp   ddpbench's host backend with transport "shm" / "tcp", the real
                        worker through the real daemon (bench_allreduce.DaemonRunner, one
                        experiment per peer per round, CPU slots = ranks, so ranks are
                        pinned one per CPU where they fit, as the scheduler does);
             openmpi, mpich  tests/bench/mpi_allreduce.c run by each implementation's own
                        launcher with its defaults (shared memory inside a node), ranks
                        bound to hardware threads where they fit (bench_mpi_backend);
             gloo       tests/bench/gloo_allreduce.py (pinned where the ranks fit);
             memcpy     tests/bench/memcpy_bw.c, built at run time: 1 thread, and 2
                        threads copying at once (per-thread figure), the same sizes.
           Headline: busbw (GB/s) median over rounds with min-max; each figure's fraction
           of 1-thread memcpy at that size; 8-byte latency p50 (median over rounds of each
           run's median iteration). Goals at 2 ranks: shm >= 1.0x OpenMPI from 64 KiB,
           8-byte latency <= 1 us.
profile    perf stat -a (software events: the VM counts no hardware ones) around shm and
           OpenMPI at 2 ranks 16 MiB and 4 ranks 1 and 16 MiB: context switches and CPU
           time per allreduce (system-wide, so whatever else ran counts too).
tuning     ddpbench shm only: SHM_SLOT_DEFAULT and SHM_SMALL_BYTES varied through the
           environment variables SHMBENCH_SLOT / SHMBENCH_SMALL, which only a throwaway
           patch of worker/comm/shm.c / shm_algo.c reads (never committed: on a tree
           without it every configuration runs the defaults, and the table says so by
           showing no difference); one daemon per configuration.
copy       tests/bench/shm_copy.c: process_vm_readv (CMA) from a peer against staging
           through a shared mapping (512 KiB chunks, double buffered), 2 processes.
netlab     2 emulated hosts x 2 ranks under 10gbe (--netlab-profile; deploy/netlab.sh through
           bench_netlab.Lab, root): allreduce busbw per size for algorithm hier with
           transport auto (shm inside hosts), hier with tcp, ring and rd with tcp, and auto.
train      DDP (strategy ddp) mnist-cnn and resnet18 at 2 ranks: ddpbench with transport shm
           and tcp (bench_train's daemon and spec: ranks unpinned, 1 thread) and PyTorch
           DDP over gloo (ddp_torch.py), throughput and comm / exposed ms per step.
Holds /tmp/ddpb-bench.lock while measuring.
"""
import argparse
import fcntl
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import bench_allreduce as ba  # noqa: E402
import bench_mpi_backend as bm  # noqa: E402

K, M = 1 << 10, 1 << 20


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def med(v):
    return statistics.median(v)


def span(v, f="{:.2f}"):
    """'median (min-max)' of v."""
    return f"{f.format(med(v))} ({f.format(min(v))}-{f.format(max(v))})" if v else "-"


def build_c(tmp, name, extra=()):
    binary = os.path.join(tmp, name)
    subprocess.run(["cc", "-O2", "-pthread", "-o", binary, os.path.join(HERE, name + ".c")]
                   + list(extra), check=True)
    return binary


def run_json(args, env=None):
    p = subprocess.run(args, capture_output=True, text=True, timeout=1800,
                       env=dict(os.environ, **ba.MALLOC_ENV, **(env or {})))
    if p.returncode:
        raise RuntimeError(f"{args[0]}: {p.stdout[-500:]} {p.stderr[-1500:]}")
    return [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]


def run_memcpy(binary, threads, sizes, iters, warmup):
    rows = run_json([binary, str(threads), str(iters), str(warmup)] + [str(s) for s in sizes])
    return {r["bytes"]: r["gbs"] for r in rows}


# --- 1. allreduce -----------------------------------------------------------------------


PEERS = ["shm", "tcp", "openmpi", "mpich", "gloo"]


def part_allreduce(a, tmp, out):
    sizes = ba.SIZES if not a.quick else [8, 4 * K, 64 * K, 1 * M, 16 * M]
    mpi = {m: bm.build_plain(tmp, m) for m in ("openmpi", "mpich")}
    mcp = build_c(tmp, "memcpy_bw")
    daemons = {w: ba.DaemonRunner(a.build, w) for w in a.worlds}
    res = {}  # (peer, world) -> {size: [us per round]}; memcpy: GB/s
    algs = {}
    runners = {
        "shm": lambda w: ba.run_ddpbench(daemons, w, sizes, a.iters, a.warmup, True,
                                         transport="shm"),
        "tcp": lambda w: ba.run_ddpbench(daemons, w, sizes, a.iters, a.warmup, True,
                                         transport="tcp"),
        "openmpi": lambda w: bm.run_plain(mpi["openmpi"], "openmpi", w, sizes, a.iters, a.warmup),
        "mpich": lambda w: bm.run_plain(mpi["mpich"], "mpich", w, sizes, a.iters, a.warmup),
        "gloo": lambda w: ba.run_gloo(w, sizes, a.iters, a.warmup, w <= os.cpu_count()),
    }
    try:
        for rnd in range(a.rounds):
            order = PEERS if rnd % 2 == 0 else PEERS[::-1]
            for w in a.worlds:
                for p in order:
                    t0 = time.time()
                    got = runners[p](w)
                    for size, r in got.items():
                        res.setdefault((p, w), {}).setdefault(size, []).append(r["us"])
                        if "alg" in r:
                            algs.setdefault((p, w, size), set()).add(r["alg"])
                    log(f"allreduce round {rnd + 1}/{a.rounds}: {p} x{w} "
                        f"({time.time() - t0:.1f} s)")
            for th in (1, 2):
                for size, gbs in run_memcpy(mcp, th, sizes[1:], a.iters, a.warmup).items():
                    res.setdefault((f"memcpy{th}", 0), {}).setdefault(size, []).append(gbs)
    finally:
        for d in daemons.values():
            d.close()
    out["allreduce"] = {f"{p}|{w}": v for (p, w), v in res.items()}
    report_allreduce(a, res, algs, sizes)


def bw_rounds(res, p, w, size):
    return [ba.busbw(size, us, w) for us in res.get((p, w), {}).get(size, [])]


def report_allreduce(a, res, algs, sizes):
    print(f"\n### Allreduce busbw (GB/s), float32 sum in place, median of {a.rounds} rounds "
          f"(min-max)\n")
    mc1 = {s: med(v) for s, v in res[("memcpy1", 0)].items()}
    for w in a.worlds:
        print(f"\n#### {w} ranks{' (oversubscribed: 2 CPUs)' if w > os.cpu_count() else ''}\n")
        print("| size | " + " | ".join(PEERS) + " | memcpy 1 thread | memcpy 2 threads (each) |")
        print("|---|" + "---|" * (len(PEERS) + 2))
        for size in sizes[1:]:
            cells = [span(bw_rounds(res, p, w, size)) for p in PEERS]
            print(f"| {ba.fmt_size(size)} | " + " | ".join(cells) +
                  f" | {span(res[('memcpy1', 0)][size])} | {span(res[('memcpy2', 0)][size])} |")
        print(f"\n{w} ranks: ratios of medians, and each peer's busbw as a fraction of "
              f"1-thread memcpy at that size (shm's algorithm in the last column)\n")
        others = [p for p in PEERS if p != "shm"]
        print("| size | " + " | ".join(f"shm/{p}" for p in others) + " | " +
              " | ".join(f"{p} of memcpy" for p in PEERS) + " | shm ran |")
        print("|---|" + "---|" * (len(others) + len(PEERS) + 1))
        for size in sizes[1:]:
            m = {p: med(bw_rounds(res, p, w, size)) if bw_rounds(res, p, w, size) else None
                 for p in PEERS}
            cells = [f"{m['shm'] / m[p]:.2f}" if m[p] and m["shm"] else "-" for p in others]
            cells += [f"{m[p] / mc1[size]:.3f}" if m[p] else "-" for p in PEERS]
            cells.append("/".join(sorted(algs.get(("shm", w, size), ()))) or "-")
            print(f"| {ba.fmt_size(size)} | " + " | ".join(cells) + " |")
        print(f"\n8-byte latency p50, {w} ranks, us, median of rounds (min-max): " +
              ", ".join(f"{p} {span(res.get((p, w), {}).get(8, []))}" for p in PEERS))
    if 2 in a.worlds:
        print("\n**Goals at 2 ranks.**")
        miss = []
        for size in sizes[1:]:
            if size < 64 * K:
                continue
            s, o = med(bw_rounds(res, "shm", 2, size)), med(bw_rounds(res, "openmpi", 2, size))
            if s < o:
                miss.append(f"{ba.fmt_size(size)} {s / o:.2f}x")
        print("- busbw >= 1.0x OpenMPI from 64 KiB: " +
              ("met" if not miss else "MISSED at " + ", ".join(miss)))
        lat = med(res[("shm", 2)][8])
        print(f"- 8-byte latency <= 1 us: {'met' if lat <= 1 else 'MISSED'} ({lat:.2f} us; "
              f"OpenMPI {med(res[('openmpi', 2)][8]):.2f} us)")
    if 4 in a.worlds:
        worse = [ba.fmt_size(s) for s in sizes[1:]
                 if med(bw_rounds(res, "shm", 4, s)) < med(bw_rounds(res, "openmpi", 4, s))]
        print(f"- 4 ranks (oversubscribed) no worse than OpenMPI: "
              f"{'met' if not worse else 'worse at ' + ', '.join(worse)}")


# --- 1b. profile ------------------------------------------------------------------------

PROFILE = [(2, 16 * M), (4, 1 * M), (4, 16 * M)]


def perf_stat(fn):
    """fn() run under a system-wide perf stat of software events (this VM counts no
    hardware events): {event: count}. System-wide, so it counts whatever else ran too."""
    out = tempfile.mktemp(prefix="ddpb-perf-")
    p = subprocess.Popen(["perf", "stat", "-a", "-x,", "-o", out, "-e",
                          "context-switches,cpu-migrations,task-clock"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    try:
        fn()
    finally:
        p.send_signal(2)
        p.wait(30)
    got = {}
    with open(out) as f:
        for line in f:
            v = line.strip().split(",")
            if len(v) > 2 and v[0].replace(".", "").isdigit():
                got[v[2]] = float(v[0])
    os.unlink(out)
    return got


def part_profile(a, tmp, out):
    """Context switches and CPU per allreduce, shm against OpenMPI, at one size each."""
    iters = 200
    mpi = bm.build_plain(tmp, "openmpi")
    res = {}
    for w, size in PROFILE:
        d = ba.DaemonRunner(a.build, w)
        try:
            for rnd in range(a.rounds):
                for p in (("shm", "openmpi") if rnd % 2 == 0 else ("openmpi", "shm")):
                    t0 = time.time()
                    if p == "shm":
                        got = perf_stat(lambda: ba.run_ddpbench({w: d}, w, [size], iters, 5,
                                                                True, transport="shm"))
                    else:
                        got = perf_stat(lambda: bm.run_plain(mpi, "openmpi", w, [size],
                                                             iters, 5))
                    got["wall"] = time.time() - t0
                    res.setdefault((p, w, size), []).append(got)
        finally:
            d.close()
        log(f"profile x{w} {ba.fmt_size(size)} done")
    out["profile"] = {f"{p}|{w}|{s}": v for (p, w, s), v in res.items()}
    print(f"\n### Profile: perf stat -a (software events), {iters} allreduces + 5 warmup per "
          f"run (and the run's start), median of {a.rounds} rounds\n")
    print("| ranks | size | peer | context switches per allreduce | CPU ms per allreduce "
          "(all CPUs) | migrations per allreduce | run wall s |")
    print("|---|---|---|---|---|---|---|")
    for w, size in PROFILE:
        for p in ("shm", "openmpi"):
            rows = res[(p, w, size)]
            n = iters + 5
            print(f"| {w} | {ba.fmt_size(size)} | {p} | "
                  f"{med([r.get('context-switches', 0) / n for r in rows]):.1f} | "
                  f"{med([r.get('task-clock', 0) / n for r in rows]):.2f} | "
                  f"{med([r.get('cpu-migrations', 0) / n for r in rows]):.2f} | "
                  f"{med([r['wall'] for r in rows]):.1f} |")


# --- 2. tuning ----------------------------------------------------------------------------

DEF_SLOT, DEF_SMALL = 512 * K, 16 * K


SPINS = (0, 200, 1000)  # SHMBENCH_SPIN_US at 4 ranks (the default there: 50 us, yielding)


def tuning_configs(world):
    """(slot, small, spin_us or None for the default) to measure at world ranks."""
    cfgs = [(s, DEF_SMALL, None) for s in (128 * K, 256 * K, 512 * K, 1 * M, 2 * M)]
    cfgs += [(DEF_SLOT, s, None) for s in (4 * K, 64 * K)]
    return cfgs + ([(DEF_SLOT, DEF_SMALL, u) for u in SPINS] if world > os.cpu_count() else [])


def cfg_name(c):
    slot, small, spin = c
    return (f"slot {ba.fmt_size(slot)} small {ba.fmt_size(small)}" +
            (f" spin {spin} us" if spin is not None else ""))


def part_tuning(a, tmp, out):
    sizes = ([4 * K << k for k in range(6)] + [256 * K, 1 * M, 4 * M, 16 * M, 64 * M]
             if not a.quick else [4 * K, 32 * K, 1 * M, 16 * M])
    res = {}  # (slot, small, spin, world) -> {size: [us]}
    for rnd in range(a.rounds):
        for w in a.worlds:
            cfgs = tuning_configs(w)
            for slot, small, spin in (cfgs if rnd % 2 == 0 else cfgs[::-1]):
                env = dict(SHMBENCH_SLOT=str(slot), SHMBENCH_SMALL=str(small))
                if spin is not None:
                    env["SHMBENCH_SPIN_US"] = str(spin)
                os.environ.update(env)
                try:
                    d = ba.DaemonRunner(a.build, w)
                finally:
                    for k in env:
                        del os.environ[k]
                try:
                    got = ba.run_ddpbench({w: d}, w, sizes, a.iters, a.warmup, True,
                                          transport="shm")
                finally:
                    d.close()
                for size, r in got.items():
                    res.setdefault((slot, small, spin, w), {}).setdefault(size, []).append(
                        r["us"])
            log(f"tuning round {rnd + 1}/{a.rounds} x{w} done")
    out["tuning"] = {f"{s}|{m}|{u}|{w}": v for (s, m, u, w), v in res.items()}
    for w in a.worlds:
        print(f"\n### shm tuning, {w} ranks: busbw GB/s, median of {a.rounds} rounds "
              f"(best of the row in bold)\n")
        cfgs = tuning_configs(w)
        names = [cfg_name(c) for c in cfgs]
        print("| size | " + " | ".join(names) + " |")
        print("|---|" + "---|" * len(cfgs))
        wins = {}
        for size in sizes:
            bw = [ba.busbw(size, med(res[c + (w,)][size]), w) for c in cfgs]
            top = max(range(len(cfgs)), key=lambda i: bw[i])
            wins[size] = names[top]
            print(f"| {ba.fmt_size(size)} | " + " | ".join(
                f"**{v:.3f}**" if i == top else f"{v:.3f}" for i, v in enumerate(bw)) + " |")
        print(f"\n{w} ranks, best per size: " +
              "; ".join(f"{ba.fmt_size(b)} {n}" for b, n in wins.items()))
        print(f"\n{w} ranks, us (median) up to 128 KiB by SHM_SMALL_BYTES at slot 512K: " +
              "; ".join(f"small {ba.fmt_size(m)}: " + ", ".join(
                  f"{ba.fmt_size(s)} {med(res[(DEF_SLOT, m, None, w)][s]):.1f}"
                  for s in sizes if s <= 128 * K) for m in (4 * K, 16 * K, 64 * K)))


# --- 2b. single copy vs staged ----------------------------------------------------------


def part_copy(a, tmp, out):
    sizes = [4 * K << k for k in range(15)] if not a.quick else [4 * K, 256 * K, 16 * M]
    binary = build_c(tmp, "shm_copy")
    res = {}
    for rnd in range(a.rounds):
        for r in run_json([binary, str(a.iters), str(a.warmup), str(DEF_SLOT)] +
                          [str(s) for s in sizes]):
            if "error" in r:
                print(f"\nshm_copy: {r['error']}: CMA unavailable here")
                return
            res.setdefault((r["mode"], r["bytes"]), []).append(r["gbs"])
        log(f"copy round {rnd + 1}/{a.rounds} done")
    out["copy"] = {f"{m}|{b}": v for (m, b), v in res.items()}
    print(f"\n### Single copy (process_vm_readv) vs staged through a shared mapping (512 KiB "
          f"chunks, double buffered), 2 processes, GB/s, median of {a.rounds} rounds (min-max)\n")
    print("| size | CMA | staged | CMA / staged |")
    print("|---|---|---|---|")
    for size in sizes:
        c, s = res[("cma", size)], res[("staged", size)]
        print(f"| {ba.fmt_size(size)} | {span(c)} | {span(s)} | {med(c) / med(s):.2f} |")


# --- 3. netlab ----------------------------------------------------------------------------

NET_CFGS = [("hier", "auto"), ("hier", "tcp"), ("ring", "tcp"), ("rd", "tcp"), ("auto", "auto")]


def part_netlab(a, tmp, out):
    import bench_netlab as bn
    # namespaces, subnet and ports of this bench only (bench_netlab and the integration
    # tests use others), so it can not collide with either
    bn.PREFIX = "ddpbsh"
    bn.ENV = dict(os.environ, NETLAB_PREFIX=bn.PREFIX, NETLAB_SUBNET="10.218.0")
    bn.PORT = 7660
    lab = bn.Lab(a.build, 2, a.netlab_profile)
    res = {}
    try:
        for rnd in range(a.rounds):
            order = NET_CFGS if rnd % 2 == 0 else NET_CFGS[::-1]
            for alg, tr in order:
                spec = dict(bn.coll_spec(4, 2, min_b="4K", max_b="16M" if a.quick else "64M",
                                         iters=min(a.iters, 8)),
                            algorithm=alg, transport=tr)
                for r in lab.run(spec)["rows"]:
                    res.setdefault((alg, tr, r["bytes"]), []).append(
                        (r["busbw_gbs_median"], r["algorithm"]))
                log(f"netlab round {rnd + 1}/{a.rounds}: {alg}+{tr}")
    finally:
        lab.close()
    out["netlab"] = {f"{g}|{t}|{b}": v for (g, t, b), v in res.items()}
    sizes = sorted({b for _, _, b in res})
    print(f"\n### 2 netlab hosts x 2 ranks, {a.netlab_profile}: allreduce busbw GB/s, median of "
          f"{a.rounds} "
          f"rounds (min-max)\n")
    print("| size | " + " | ".join(f"{g}+{t}" for g, t in NET_CFGS) +
          " | hier+shm / best tcp | auto ran |")
    print("|---|" + "---|" * (len(NET_CFGS) + 2))
    for b in sizes:
        bw = {c: [v for v, _ in res[c + (b,)]] for c in NET_CFGS}
        best_tcp = max(med(bw[c]) for c in NET_CFGS if c[1] == "tcp")
        ran = "/".join(sorted({x for _, x in res[("auto", "auto", b)]}))
        print(f"| {ba.fmt_size(b)} | " + " | ".join(span(bw[c], "{:.3f}") for c in NET_CFGS) +
              f" | {med(bw[('hier', 'auto')]) / best_tcp:.2f} | {ran} |")


# --- 4. training --------------------------------------------------------------------------


def part_train(a, tmp, out):
    import bench_train as bt
    models = bt.DDP if not a.quick else [(m, b, s, 10) for m, b, s, _ in bt.DDP]
    os.environ.update(ba.MALLOC_ENV)
    d = bt.Daemon(a.build, 4 * os.cpu_count())
    res = {}
    peers = ["shm", "tcp", "torch"]
    try:
        for rnd in range(a.rounds):
            for model, batch, shape, steps in models:
                for p in (peers if rnd % 2 == 0 else peers[::-1]):
                    if p == "torch":
                        row = {"throughput_mean": bt.torch_run(model, batch, 2, steps, 1, shape)}
                    else:
                        spec = bt.train_spec(model, batch, shape, steps)
                        spec.update(world_size=2, strategy="ddp", transport=p)
                        row = d.run(spec)[0]
                    res.setdefault((model, p), []).append(row)
                log(f"train round {rnd + 1}/{a.rounds} {model}: " + ", ".join(
                    f"{p} {res[(model, p)][-1]['throughput_mean']:.0f}" for p in peers))
    finally:
        d.close()
    out["train"] = {f"{m}|{p}": v for (m, p), v in res.items()}
    print(f"\n### DDP (strategy ddp), 2 ranks of 1 thread, unpinned: median of {a.rounds} rounds "
          f"(min-max)\n")
    print("| model | shm samples/s | tcp samples/s | PyTorch DDP gloo samples/s | shm / tcp | "
          "shm / PyTorch | shm comm / exposed ms per step | tcp comm / exposed ms per step |")
    print("|---|---|---|---|---|---|---|---|")
    for model, batch, shape, steps in models:
        thr = {p: [r["throughput_mean"] for r in res[(model, p)]] for p in peers}

        def brk(p):
            rows = res[(model, p)]
            return (f"{span([r['comm_ms'] for r in rows])} / "
                    f"{span([r['comm_exposed_ms'] for r in rows])}")
        print(f"| {model} {'x'.join(map(str, shape))} b{batch}, {steps} steps | "
              f"{span(thr['shm'], '{:.1f}')} | {span(thr['tcp'], '{:.1f}')} | "
              f"{span(thr['torch'], '{:.1f}')} | {med(thr['shm']) / med(thr['tcp']):.2f} | "
              f"{med(thr['shm']) / med(thr['torch']):.2f} | {brk('shm')} | {brk('tcp')} |")


def cpu_isa():
    with open("/proc/cpuinfo") as f:
        flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
    return "+".join(x.upper().replace("_", "-") for x in ("avx2", "avx512f", "avx512bw")
                    if x in flags) or "no AVX2"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--part", default="allreduce,profile,tuning,copy,netlab,train")
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--netlab-profile", default="10gbe",
                    help="network profile of the netlab part's host links (deploy/netlab.sh)")
    ap.add_argument("--rounds", type=int, default=None, help="default 5 (allreduce), 3 (others)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="1 round, few sizes: a dry run")
    ap.add_argument("--json", help="also write the raw results here")
    a = ap.parse_args()
    a.worlds = [int(w) for w in a.worlds.split(",")]
    if a.quick:
        a.iters, a.warmup = min(a.iters, 5), min(a.warmup, 2)
    parts = a.part.split(",")
    lock = open(ba.LOCK, "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    print(f"## Shared-memory transport (issue 30), {time.strftime('%Y-%m-%d %H:%M')}\n")
    print(f"Machine: {ba.machine()}, {cpu_isa()}  ")
    print(f"Command: `{' '.join(sys.argv)}`  ")
    print(f"{a.iters} iterations after {a.warmup} warmup; a run's figure is its median "
          f"iteration (each as slow as its slowest rank); load at start {os.getloadavg()[0]:.2f}")
    out = {}
    tmp = tempfile.mkdtemp(prefix="ddpb-bench-shm-")
    rounds = a.rounds
    fns = {"allreduce": part_allreduce, "profile": part_profile, "tuning": part_tuning,
           "copy": part_copy,
           "netlab": part_netlab, "train": part_train}
    try:
        for part in parts:
            a.rounds = 1 if a.quick else rounds or (5 if part == "allreduce" else 3)
            t0 = time.time()
            fns[part](a, tmp, out)
            sys.stdout.flush()
            log(f"part {part} took {time.time() - t0:.0f} s")
            print(f"\n(part {part}: {time.time() - t0:.0f} s, load average at its end "
                  f"{os.getloadavg()[0]:.2f})")
    finally:
        subprocess.run(["rm", "-rf", tmp])
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
