#!/usr/bin/python3
"""The emulated storage through ddpbench-fs (issue 34): how close the mount's measured rate
comes to each profile's cap, and what the mount itself costs.

  tests/bench/bench_storage_mount.py --build build [--rounds 3] [--json F]

Accuracy: 16 MiB files written fresh (8 for nfs, 4 for blob and custom: about a second
at the cap), read whole through a fresh ddpbench-fs mount (a new storage, nothing banked)
from Python (open + read per file, threads) and from C (tests/integration/storage_read.c:
ddpbench's loader's own read, open + fstat + one pread, threads), 1 and 4 readers, under
nfs (200 MB/s, 0.5 ms, 8 in flight), blob (100 MB/s, 15 ms, 32 in flight) and custom
50 MB/s; figure: MB/s, the median over rounds, and its ratio to the cap (the issue's goal:
[90 %, 102 %]; blob's single reader is latency-bound by design: 15 ms before each 1 MiB
request of 10.5 ms).

Overhead: the mount on `local` (no caps) against reading the source directory itself,
warm page cache, interleaved within each round; large files (the same 16 MiB set, MB/s)
and small files (2,000 of 110 KB, a JPEG-sized sample; files/s), Python and C, 1 and 4
readers; figure: mount / direct (< 1: the mount is slower). A benchmark: it prints
figures and ratios, never pass/fail. Takes /tmp/ddpb-bench.lock itself (flock)."""
import argparse
import fcntl
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import bench_allreduce  # noqa: E402 (its machine())

MIB = 1 << 20
PROFILES = (("nfs", [], 200.0, 8), ("blob", [], 100.0, 4), ("custom", ["--read-mbps", "50"], 50.0, 4))


def machine():
    """bench_allreduce's line (CPU model, CPUs, kernel) with the ISA extensions."""
    with open("/proc/cpuinfo") as f:
        flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    isa = "+".join(x for x in ("avx2", "avx512f") if x in flags) or "base"
    return f"{bench_allreduce.machine()}, {platform.machine()} ({isa})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    os.environ["DDPB_BUILD_DIR"] = os.path.abspath(a.build)
    import test_storage_fs as t  # after DDPB_BUILD_DIR: it names the binaries from it

    lock = open("/tmp/ddpb-bench.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    readers = {"python": t.py_read, "c": t.c_read}
    out = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "command": " ".join(sys.argv), "accuracy": [], "overhead": []}
    root = tempfile.mkdtemp(prefix="ddpb-bench-fs-")
    try:
        os.makedirs(os.path.join(root, "big"))
        big = t.write_set(os.path.join(root, "big"), 8, 16 * MIB)
        small_dir = os.path.join(root, "small")
        os.makedirs(small_dir)
        small = t.write_set(small_dir, 2000, 110_000)
        acc = {}
        ovh = {}
        for rnd in range(a.rounds):
            for name, args, cap, nfiles in PROFILES:
                for lang, fn in readers.items():
                    for n in (1, 4):
                        mbps = t.measure(big[:nfiles], name, args, fn, n)
                        acc.setdefault((name, cap, lang, n), []).append(mbps)
            # overhead: direct and mounted, back to back in each round (warm cache)
            for label, paths in (("16 MiB files", big), ("110 KB files", small)):
                for lang, fn in readers.items():
                    for n in (1, 4):
                        fn(paths, n)  # warm the page cache
                        nb, secs_direct = fn(paths, n)
                        with t.Mount(os.path.dirname(paths[0]), "local") as m:
                            nb2, secs_mount = fn([m.path(os.path.basename(p)) for p in paths], n)
                        ovh.setdefault((label, lang, n), []).append((nb / secs_direct, nb2 / secs_mount,
                                                                     len(paths) / secs_direct,
                                                                     len(paths) / secs_mount))
            print(f"round {rnd + 1}/{a.rounds} done", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print(f"machine: {out['machine']}\ndate: {out['date']}\ncommand: {out['command']}\n")
    print("| profile | cap MB/s | reader | readers | MB/s (median) | / cap |")
    print("|---|---|---|---|---|---|")
    for (name, cap, lang, n), v in acc.items():
        med = statistics.median(v)
        out["accuracy"].append({"profile": name, "cap": cap, "reader": lang, "readers": n,
                                "mbps": v, "median": med, "ratio": med / cap})
        print(f"| {name} | {cap:g} | {lang} | {n} | {med:.1f} | {med / cap:.1%} |")
    print("\n| local, warm | reader | readers | direct | through the mount | mount / direct |")
    print("|---|---|---|---|---|---|")
    for (label, lang, n), v in ovh.items():
        if label.startswith("16"):
            d, m = statistics.median(x[0] for x in v) / 1e6, statistics.median(x[1] for x in v) / 1e6
            unit = "MB/s"
        else:
            d, m = statistics.median(x[2] for x in v), statistics.median(x[3] for x in v)
            unit = "files/s"
        out["overhead"].append({"set": label, "reader": lang, "readers": n, "direct": d, "mount": m,
                                "unit": unit})
        print(f"| {label} | {lang} | {n} | {d:.0f} {unit} | {m:.0f} {unit} | {m / d:.2f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
