#!/usr/bin/python3
"""Training benchmarks against PyTorch (Debian's python3-torch), in one run on one machine.

  tests/bench/bench_train.py --build build [--rounds 3] [--part single|ddp|overlap|all]
                             [--models M,...] [--isa avx2] [--pin] [--steps N] [--json F]

single (CPU training issue): images/s of training, 1 rank, one fixed synthetic batch, SGD
  momentum 0.9: mnist-cnn 1x28x28 batch 64 1 thread, resnet18 and resnet18-cifar 3x32x32
  batch 32 2 threads, resnet50 3x224x224 batch 16 2 threads (issue 36: the seeds' main
  model; --models picks rows). ddpbench is the real worker run by a real ddpbenchd (an experiment
  over REST, world_size 1, its stored throughput); PyTorch is tests/bench/ddp_torch.py
  --no-ddp (the same loop, a plain module).
ddp (DDP strategies issue): mnist-cnn (batch 64) and resnet18 (3x32x32, batch 32), 1, 2 and
  4 ranks of 1 thread each: ddpbench's naive and ddp strategies over its TCP collectives
  against PyTorch DDP over gloo (ddp_torch.py, bucket_cap_mb 25). Scaling efficiency =
  throughput(N) / (N * throughput(1)) of the same implementation; overlap and exposed
  communication from ddpbench's per-step breakdown show what ddp hides that naive exposes.
overlap (issue 13): ddpbench alone, every strategy at 2 ranks of 1 thread (the DDP models,
  strategies interleaved round by round): total and exposed communication per step and
  overlap = 1 - exposed / total, both measured on the training thread's clock
  (worker/ddp/ddp.h "Timing"), so naive is 0 by construction. Not part of "all".

Every ddpbench run is its own experiment, one at a time. Both peers run under the same
conditions: the daemon places its ranks as it does by default (more CPU slots than CPUs,
but a run whose ranks fit on idle CPUs of their own is pinned all the same, one CPU per
thread, daemon/scheduler.c, and each OpenMP thread bound to one of them, worker/store/
rendezvous.h), PyTorch unpinned, or with --pin under taskset on the CPUs the daemon pins
the same ranks to (a DDP run's processes share them), the glibc settings that keep freed memory
(MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=4294967296), the same thread count (PyTorch's in
torch.set_num_threads and, before torch is imported, OMP_NUM_THREADS /
OPENBLAS_NUM_THREADS / MKL_NUM_THREADS: tests/bench/torch_threads.py), peers interleaved
round by round; --isa avx2 emulates an AVX2 machine on a newer CPU (ONEDNN_MAX_CPU_ISA=AVX2
for the daemon, its workers and PyTorch's bundled oneDNN, ATEN_CPU_CAPABILITY=avx2 for
PyTorch's own kernels; the output says so). Headline tables are the median of the rounds; the best round follows as a
second view. A benchmark: it prints figures and ratios, never pass/fail. Hold
/tmp/ddpb-bench.lock.
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time, urllib.error, urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SINGLE = [("mnist-cnn", 64, 1, [1, 28, 28], 100), ("resnet18", 32, 2, [3, 32, 32], 60),
          ("resnet18-cifar", 32, 2, [3, 32, 32], 20), ("resnet50", 16, 2, [3, 224, 224], 8)]
DDP = [("mnist-cnn", 64, [1, 28, 28], 60), ("resnet18", 32, [3, 32, 32], 20)]
STRATEGIES = ["naive", "ddp", "horovod", "zero1", "zero2"]
WARMUP = 5


# --isa: what each peer's environment gets to emulate that ISA on a newer CPU. oneDNN (ours
# and PyTorch's bundled copy) and ddpbench's own kernels (worker/nn/isa.h) read
# ONEDNN_MAX_CPU_ISA; PyTorch's own vectorised kernels read ATEN_CPU_CAPABILITY.
ISA_ENV = {"avx2": {"ours": {"ONEDNN_MAX_CPU_ISA": "AVX2"},
                    "torch": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}}}


def pinned_cpus(n):
    """The CPUs the daemon pins a lone rank of n threads to: the first n of its affinity set
    (daemon/scheduler.c takes slots on idle CPUs in order), as taskset's list."""
    cpus = sorted(os.sched_getaffinity(0))[:n]
    return ",".join(map(str, cpus))


class Daemon:
    def __init__(self, build, slots, state=None, data_dir=None, env=None):
        """state: an existing state directory to serve again (bench_engines --reuse-state);
        data_dir: a folder the specs' dataset.path may name (ddpbenchd --data-dir); env: the
        daemon's (and so its workers') environment, None for this process's."""
        self.state = state or tempfile.mkdtemp(prefix="ddpb-bench-")
        extra = ["--data-dir", data_dir] if data_dir else []
        self.p = subprocess.Popen([f"{build}/daemon/ddpbenchd", "--port", "0", "--state-dir",
                                   self.state, "--cpu-slots", str(slots), "--log-level", "warn"]
                                  + extra, stdout=subprocess.PIPE, text=True, env=env)
        self.url = self.p.stdout.readline().split("listening on ")[1].split()[0]

    def call(self, path, body=None):
        req = urllib.request.Request(self.url + path, json.dumps(body).encode() if body else None,
                                     {"Content-Type": "application/json"})
        return json.load(urllib.request.urlopen(req, timeout=60))

    def ended(self, spec):
        """The experiment of spec once it ended, whatever its status."""
        return self.wait(self.call("/v1/experiments", spec)["id"])

    def wait(self, exp_id):
        """Experiment exp_id once it ended, whatever its status."""
        while True:
            e = self.call(f"/v1/experiments/{exp_id}")
            if e["status"] not in ("queued", "running"):
                return e
            time.sleep(0.5)

    def attempt(self, spec):
        """(the experiment of spec once it succeeded, None), or (None, why): the daemon
        refused spec ("409 dataset.storage: ...", its status, field and message) or the
        experiment did not succeed (its status and the runs' errors)."""
        try:
            exp = self.call("/v1/experiments", spec)
        except urllib.error.HTTPError as err:
            return None, refusal(err)
        e = self.wait(exp["id"])
        if e["status"] != "succeeded":
            return None, f"{e['status']}: " + "; ".join(str(r.get("error")) for r in e["runs"])
        return e, None

    def finish(self, spec):
        """The experiment of spec once it ended; exits when it did not succeed."""
        e = self.ended(spec)
        if e["status"] != "succeeded":
            raise SystemExit(f"ddpbench experiment failed: {[r['error'] for r in e['runs']]}")
        return e

    def run(self, spec):
        """The results rows of spec's experiment."""
        return self.call(f"/v1/experiments/{self.finish(spec)['id']}/results")["rows"]

    def close(self):
        self.p.terminate()
        self.p.wait()


def refusal(err):
    """An HTTPError of the API as "409 dataset.storage: message" (status, field, message)."""
    body = err.read().decode(errors="replace")
    try:
        why = json.loads(body)["error"]
        field, msg = why.get("field", "-"), why["message"]
        return f"{err.code} " + (msg if msg.startswith(field + ":") else f"{field}: {msg}")
    except (ValueError, KeyError, TypeError):
        return f"{err.code} {body[:300]}"


def torch_run(model, batch, world, steps, threads, shape, ddp=True, env=None, cpus=None):
    """env: the peer's environment (None: this process's); cpus: taskset's CPU list to pin
    it to (every process of a DDP run shares them), None unpinned."""
    cmd = (["taskset", "-c", cpus] if cpus else []) + ["/usr/bin/python3", f"{HERE}/ddp_torch.py", model, str(batch), str(world), str(steps),
           str(WARMUP), "--threads", str(threads), "--shape", ",".join(map(str, shape))]
    if not ddp:
        cmd.append("--no-ddp")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])["throughput"]


def train_spec(model, batch, shape, steps, threads=1, sweep=None):
    spec = {"name": f"bench {model}", "workload": "train", "model": model, "batch_size": batch,
            "threads": threads, "steps": steps + WARMUP, "warmup_steps": WARMUP,
            "dataset": {"name": "synthetic", "shape": shape},
            "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9}, "timeout_s": 1800}
    if sweep:
        spec["sweep"] = sweep
    return spec


def bench_args(rounds, **kw):
    """The command line every bench that runs the daemon takes: --build (the tree holding
    ddpbenchd), --rounds (default rounds) and --json (a file for the raw results); kw go
    to ArgumentParser. The caller adds its own options."""
    ap = argparse.ArgumentParser(**kw)
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--json")
    return ap


def write_json(path, res):
    """Writes res to path as JSON, where --json named a file."""
    if path:
        with open(path, "w") as f:
            json.dump(res, f, indent=1)


class Peer:
    """How PyTorch's peer runs beside the daemon's ranks: env (its environment, None: this
    process's) and pin (taskset to the CPUs the daemon pins the same ranks to)."""

    def __init__(self, env=None, pin=False):
        self.env, self.pin = env, pin

    def cpus(self, n):
        """taskset's list for a run of n pinned CPUs; None unpinned (as the daemon leaves
        ranks that do not fit on CPUs of their own)."""
        return pinned_cpus(n) if self.pin and n <= len(os.sched_getaffinity(0)) else None


def env_line(d, exp):
    """What rank 0 of exp's run said about where it ran: pinning, OpenMP, ISA, conv
    algorithms (issue 36's env fields), as one line."""
    envs = d.call(f"/v1/runs/{exp['runs'][0]['id']}").get("env", [])
    env = envs[0].get("env", {}) if envs else {}
    keys = ("affinity", "omp_places", "omp_proc_bind", "cpu_isa", "onednn_isa", "conv_algos")
    return ", ".join(f"{k} {json.dumps(env[k])}" for k in keys if k in env)


def part_single(d, rounds, res, peer=Peer()):
    for model, batch, threads, shape, steps in SINGLE:
        ours, theirs = [], []
        for r in range(rounds):
            order = [0, 1] if r % 2 == 0 else [1, 0]
            for who in order:
                if who == 0:
                    exp = d.finish(train_spec(model, batch, shape, steps, threads))
                    rows = d.call(f"/v1/experiments/{exp['id']}/results")["rows"]
                    ours.append(rows[0]["throughput_mean"])
                    if r == 0:
                        print(f"  {model} ddpbench env: {env_line(d, exp)}", flush=True)
                else:
                    theirs.append(torch_run(model, batch, 1, steps, threads, shape, ddp=False,
                                            env=peer.env, cpus=peer.cpus(threads)))
            print(f"  {model} round {r}: ddpbench {ours[-1]:.1f} img/s, torch {theirs[-1]:.1f}",
                  flush=True)
        res["single"].append({"model": model, "batch": batch, "threads": threads, "shape": shape,
                              "ddpbench": ours, "torch": theirs})


def part_ddp(d, rounds, res, peer=Peer()):
    for model, batch, shape, steps in DDP:
        ours = {}  # (strategy, world) -> list of rows
        theirs = {}
        for r in range(rounds):
            # one run at a time: the daemon would start runs side by side while CPU slots
            # are free, and they would compete for the CPUs
            for w in (1, 2, 4):
                for strat in ("naive", "ddp"):
                    spec = train_spec(model, batch, shape, steps)
                    spec.update(world_size=w, strategy=strat)
                    ours.setdefault((strat, w), []).append(d.run(spec)[0])
                theirs.setdefault(w, []).append(torch_run(model, batch, w, steps, 1, shape,
                                                          env=peer.env, cpus=peer.cpus(w)))
            print(f"  {model} round {r}: " + ", ".join(
                f"{k[0]}x{k[1]} {v[-1]['throughput_mean']:.0f}" for k, v in sorted(ours.items())) +
                  "; torch " + ", ".join(f"x{w} {v[-1]:.0f}" for w, v in sorted(theirs.items())),
                  flush=True)
        res["ddp"].append({"model": model, "batch": batch, "shape": shape,
                           "ddpbench": {f"{k[0]}/{k[1]}": v for k, v in ours.items()},
                           "torch": theirs})


def part_overlap(d, rounds, res):
    for model, batch, shape, steps in DDP:
        rows = {}  # strategy -> one results row per round
        for r in range(rounds):
            # rotate the order so no strategy always runs first (or last) in a round
            order = STRATEGIES[r % len(STRATEGIES):] + STRATEGIES[:r % len(STRATEGIES)]
            for strat in order:
                spec = train_spec(model, batch, shape, steps)
                spec.update(world_size=2, strategy=strat)
                rows.setdefault(strat, []).append(d.run(spec)[0])
            print(f"  {model} round {r}: " + ", ".join(
                f"{s} {rows[s][-1]['comm_ms']:.2f}/{rows[s][-1]['comm_exposed_ms']:.2f} ms"
                for s in STRATEGIES), flush=True)
        res["overlap"].append({"model": model, "batch": batch, "shape": shape, "rows": rows})


def med(v):
    return statistics.median(v)


def report_overlap(res):
    for m in res["overlap"]:
        print(f"\n### Overlap, {m['model']} {'x'.join(map(str, m['shape']))}, batch "
              f"{m['batch']}, 2 ranks (median of rounds)\n")
        print("| strategy | img/s | step ms | comm ms | exposed ms | overlap | overlap per round |")
        print("|---|---|---|---|---|---|---|")
        for strat in STRATEGIES:
            rows = m["rows"][strat]
            ov = [r["overlap"] for r in rows if r["overlap"] is not None]
            print(f"| {strat} | {med([r['throughput_mean'] for r in rows]):.1f} | "
                  f"{med([r['step_ms_mean'] for r in rows]):.2f} | "
                  f"{med([r['comm_ms'] for r in rows]):.2f} | "
                  f"{med([r['comm_exposed_ms'] for r in rows]):.2f} | "
                  + (f"{med(ov):.3f}" if ov else "-") + " | "
                  + ", ".join(f"{v:.3f}" for v in ov) + " |")


def best(v):
    return max(v)  # of throughputs: other processes only ever slow a peer down


def report(res, agg=med, view="median of rounds"):
    """The throughput tables with agg (med or best) over rounds; the per-step breakdown
    columns (comm, exposed, overlap) are medians in both views."""
    if res["single"]:
        print(f"\n### Training throughput, 1 rank (images/s, {view})\n")
        print("| model | batch | threads | ddpbench | PyTorch | ddpbench / PyTorch |")
        print("|---|---|---|---|---|---|")
        for s in res["single"]:
            a, b = agg(s["ddpbench"]), agg(s["torch"])
            print(f"| {s['model']} {'x'.join(map(str, s['shape']))} | {s['batch']} | {s['threads']} "
                  f"| {a:.1f} | {b:.1f} | {a / b:.2f} |")
    for m in res["ddp"]:
        o, t = m["ddpbench"], m["torch"]
        def thr(strat, w):
            return agg([r["throughput_mean"] for r in o[f"{strat}/{w}"]])
        print(f"\n### {m['model']} {'x'.join(map(str, m['shape']))}, batch {m['batch']} per rank "
              f"({view})\n")
        print("| ranks | ddpbench naive img/s (eff.) | ddpbench ddp img/s (eff.) | PyTorch DDP img/s "
              "(eff.) | ddp eff. / PyTorch eff. | naive: comm / exposed ms, overlap | ddp: comm / "
              "exposed ms, overlap |")
        print("|---|---|---|---|---|---|---|")
        for w in (1, 2, 4):
            n, d_, p = thr("naive", w), thr("ddp", w), agg(t[w])
            en, ed, ep = n / (w * thr("naive", 1)), d_ / (w * thr("ddp", 1)), p / (w * agg(t[1]))
            def brk(strat):
                rows = o[f"{strat}/{w}"]
                ov = [r["overlap"] for r in rows if r["overlap"] is not None]
                return (f"{med([r['comm_ms'] for r in rows]):.2f} / "
                        f"{med([r['comm_exposed_ms'] for r in rows]):.2f}, "
                        + (f"{med(ov):.2f}" if ov else "-"))
            print(f"| {w} | {n:.1f} ({en:.2f}) | {d_:.1f} ({ed:.2f}) | {p:.1f} ({ep:.2f}) | "
                  f"{ed / ep:.2f} | {brk('naive')} | {brk('ddp')} |")


def main():
    ap = bench_args(3)
    ap.add_argument("--part", default="all", choices=["single", "ddp", "overlap", "all"])
    ap.add_argument("--models", default=None, help="comma-separated subset of the models")
    ap.add_argument("--isa", choices=sorted(ISA_ENV),
                    help="emulate this ISA on a newer CPU (both peers; see the docstring)")
    ap.add_argument("--pin", action="store_true",
                    help="PyTorch under taskset on the CPUs the daemon pins its ranks to")
    ap.add_argument("--steps", type=int, help="timed steps of every row (a quick check)")
    a = ap.parse_args()
    os.environ.update(MALLOC_MMAP_MAX_="0", MALLOC_TRIM_THRESHOLD_="4294967296")
    if a.models:
        keep = a.models.split(",")
        SINGLE[:] = [m for m in SINGLE if m[0] in keep]
        DDP[:] = [m for m in DDP if m[0] in keep]
    if a.steps:
        SINGLE[:] = [m[:4] + (a.steps,) for m in SINGLE]
        DDP[:] = [m[:3] + (a.steps,) for m in DDP]
    isa = ISA_ENV.get(a.isa, {"ours": {}, "torch": {}})
    if a.isa:
        print(f"ISA: {a.isa.upper()} emulated on this CPU by ONEDNN_MAX_CPU_ISA: ddpbench "
              + " ".join(f"{k}={v}" for k, v in isa["ours"].items()) + "; PyTorch "
              + " ".join(f"{k}={v}" for k, v in isa["torch"].items()), flush=True)
    print("ddpbench's ranks as the daemon places them (pinned where they fit on idle CPUs); "
          + ("PyTorch under taskset on the same CPUs" if a.pin else "PyTorch unpinned"),
          flush=True)
    d = Daemon(a.build, 4 * os.cpu_count(), env=dict(os.environ, **isa["ours"]))
    peer = Peer(env=dict(os.environ, **isa["torch"]), pin=a.pin)
    res = {"single": [], "ddp": [], "overlap": [], "date": time.strftime("%Y-%m-%d %H:%M"),
           "isa": a.isa, "pin": a.pin}
    try:
        if a.part in ("single", "all"):
            part_single(d, a.rounds, res, peer)
        if a.part in ("ddp", "all"):
            part_ddp(d, a.rounds, res, peer)
        if a.part == "overlap":
            part_overlap(d, a.rounds, res)
    finally:
        d.close()
    report(res)
    report(res, best, "best of rounds, second view")
    report_overlap(res)
    write_json(a.json, res)


if __name__ == "__main__":
    main()
