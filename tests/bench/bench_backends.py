#!/usr/bin/env python3
"""bench_backends: one experiment comparing ddpbench's TCP backend with MPI over OpenMPI and
MPICH (issue 29), through the REST API like any user's. Not a test: it prints tables
(markdown) and the report's findings, and never passes or fails.

    ninja -C build && python3 tests/bench/bench_backends.py [--quick]

Experiments, each a sweep {"backend": ["tcp", "mpi"], "mpi": ["openmpi", "mpich"]} under
launcher mpirun (so tcp runs under each implementation's launcher too, and every point
is started the same way), world sizes 2 and 4 (1 as well for training, the speed-up's
base):
  shm        each implementation's defaults: shared memory between ranks of one node;
  tcp-only   mpi_mca that keeps MPI off shared memory, one experiment per implementation
             (a setting belongs to one implementation): OpenMPI {"pml": "ob1", "btl":
             "self,tcp"}; MPICH {"MPIR_CVAR_NOLOCAL": "1"}, the nearest it has (ranks of one
             node talk through the netmod as if remote; Debian's MPICH is ch4:ucx, and UCX
             may still pick its own shared-memory transport under it);
for the collective benchmark (float32 allreduce, 4 KiB to 16 MiB) and ddp training of
mnist-cnn and resnet18 (synthetic data, short runs). Results come grouped by
backend, mpi and world_size (GET .../results?group_by=...), with busbw, throughput and
speed-up; the findings are the report's (GET .../report).
"""
import argparse
import html
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
SWEEP = {"backend": ["tcp", "mpi"], "mpi": ["openmpi", "mpich"]}
TCP_ONLY = {"openmpi": {"pml": "ob1", "btl": "self,tcp"}, "mpich": {"MPIR_CVAR_NOLOCAL": "1"}}


class Daemon:
    def __init__(self, build, slots):
        self.state = tempfile.mkdtemp(prefix="ddpb-bench-backends-")
        log = open(os.path.join(self.state, "daemon.log"), "ab")
        self.proc = subprocess.Popen([os.path.join(build, "daemon", "ddpbenchd"), "--port", "0",
                                      "--state-dir", self.state, "--cpu-slots", str(slots),
                                      "--log-level", "warn"], stdout=log, stderr=log)
        info = os.path.join(self.state, "ddpbenchd.json")
        while not os.path.exists(info):
            time.sleep(0.05)
        time.sleep(0.1)
        self.url = f"http://127.0.0.1:{json.load(open(info))['http_port']}"

    def call(self, path, body=None, raw=False):
        req = urllib.request.Request(self.url + path, method="POST" if body else "GET",
                                     data=json.dumps(body).encode() if body else None,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.read().decode() if raw else json.load(r)

    def run(self, spec):
        exp = self.call("/v1/experiments", spec)
        while exp["status"] not in ("succeeded", "failed", "cancelled", "interrupted"):
            time.sleep(1)
            exp = self.call(f"/v1/experiments/{exp['id']}?runs_limit=1024")
        bad = [(r["params"], r["error"]) for r in exp["runs"] if r["status"] != "succeeded"]
        if bad:
            print(f"<!-- {spec['name']}: runs not succeeded: {bad} -->")
        return exp

    def close(self):
        self.proc.terminate()
        self.proc.wait()
        shutil.rmtree(self.state, ignore_errors=True)


def table(d, exp, cols, by="backend,mpi,world_size"):
    res = d.call(f"/v1/experiments/{exp['id']}/results?group_by={by}")
    keys = by.split(",")
    print(f"| {' | '.join(keys + [c for c, _ in cols])} |")
    print("|" + "---|" * (len(keys) + len(cols)))
    for row in res["rows"]:
        cells = [str(row.get(k)) for k in keys]
        for c, fmt in cols:
            v = next((row[k] for k in (c, c + "_median", c + "_mean") if row.get(k) is not None),
                     None)
            cells.append("—" if v is None else fmt.format(v))
        print(f"| {' | '.join(cells)} |")
    print()


def findings(d, exp):
    page = d.call(f"/v1/experiments/{exp['id']}/report", raw=True)
    m = re.search(r"<ol class='findings'>(.*?)</ol>", page, re.S)
    for li in re.findall(r"<li[^>]*>(.*?)</li>", m.group(1) if m else "", re.S):
        print("- " + html.unescape(re.sub(r"<[^>]+>", "", li)).strip())
    print()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--quick", action="store_true", help="fewer steps and sizes")
    a = ap.parse_args()
    steps = 6 if a.quick else 20
    coll = {"workload": "collective", "launcher": "mpirun", "op": "allreduce",
            "min_bytes": "4K", "max_bytes": "16M", "factor": 4, "iters": 10, "warmup": 2,
            "check": True, "repeats": 1}
    train = {"workload": "train", "launcher": "mpirun", "strategy": "ddp", "batch_size": 16,
             "steps": steps, "warmup_steps": 2, "trace_steps": 0,
             "dataset": {"name": "synthetic", "samples": 4096}}
    d = Daemon(a.build, 4)
    try:
        print(f"machine: {open('/proc/cpuinfo').read().split('model name')[1].split(':')[1].split(chr(10))[0].strip()}, {os.cpu_count()} CPUs\n")
        for variant in ("shm", "tcp-only"):
            mcas = [None] if variant == "shm" else list(TCP_ONLY)
            for impl in mcas:
                extra = {} if impl is None else {"mpi": impl, "mpi_mca": TCP_ONLY[impl],
                                                 "backend": "mpi"}
                sweep = dict(SWEEP, world_size=[2, 4])
                if impl:
                    sweep = {"world_size": [2, 4]}
                name = f"allreduce {variant}{' ' + impl if impl else ''}"
                exp = d.run(dict(coll, name=name, sweep=sweep, **extra))
                print(f"### {name} (experiment {exp['id']})\n")
                table(d, exp, [("bytes", "{}"), ("busbw_gbs", "{:.3f}"),
                               ("time_us", "{:.1f}")])
                for model in ("mnist-cnn", "resnet18"):
                    sw = dict(sweep, world_size=[1, 2, 4])
                    name = f"{model} ddp {variant}{' ' + impl if impl else ''}"
                    exp = d.run(dict(train, name=name, model=model, sweep=sw, **extra))
                    print(f"### {name} (experiment {exp['id']})\n")
                    table(d, exp, [("throughput", "{:.1f}"), ("speedup", "{:.2f}"),
                                   ("step_ms", "{:.1f}"), ("comm_ms", "{:.1f}")])
                    findings(d, exp)
    finally:
        d.close()


if __name__ == "__main__":
    main()
