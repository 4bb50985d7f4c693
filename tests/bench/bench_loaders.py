#!/usr/bin/python3
"""The talk's loader comparison across frameworks under one ddpbenchd (issue 34): ddpbench's
C loader against PyTorch's DataLoader, tf.data and Keras, every one driven through the
daemon's REST API, so all run under the same launch, pinning and storage mount.

  tests/bench/bench_loaders.py --build build [--rounds 3] [--samples 50000]
        [--peers ddpbench,pytorch,tf.data,keras,ddpbench-inproc] [--formats files-jpeg,tfrecord]
        [--storages local,nfs] [--workers 1,2,4] [--batch 128] [--batches 40]
        [--train-models mnist-cnn:40,resnet18-cifar:6] [--train-storages nfs,blob]
        [--no-loader] [--no-train] [--keep DIR] [--json F]
  tests/bench/bench_loaders.py --build build --done-sweep [SPEC] [--samples 10000] [--keep DIR]

The full run, as the lead runs it on a quiet machine (2 CPUs; about 35-40 minutes: a
loader round is 54 runs of 5-20 s, mostly the frameworks' start, ~10 minutes, then 12
training runs, ~5 minutes):
  /usr/bin/python3 tests/bench/bench_loaders.py --build build --rounds 3 \\
      --keep /tmp/benchloaders --json /tmp/bench_loaders.json
A reduced run proving the harness end to end (10.0 minutes measured on the 2-CPU VM):
  /usr/bin/python3 tests/bench/bench_loaders.py --build build --rounds 1 --samples 10000 \\
      --batches 20 --train-models mnist-cnn:20,resnet18-cifar:3 --keep /tmp/benchloaders-s

Data: bench_data.py's CIFAR-10-sized set (50,000 + 10,000 smooth 3x32x32 images, or
--samples training images and a fifth of that for test), converted once by `ddpbench-data
convert` to each format asked (files-jpeg: quality 95, one file a sample; tfrecord: shards
of tf.train.Example records holding the same JPEG bytes).

Loader only (--no-loader skips it): every cell is one experiment over REST, world_size 1,
`loader_only: true` (the framework's loader alone; steps are the loader's batches),
batch --batch, --batches timed batches after 5, threads --threads (2: the run's CPU slots,
so the rank is pinned to both CPUs of a 2-CPU machine, every peer alike), dataset.augment
(crop + flip + normalize),
dataset.workers N and prefetch max(2, N) (the peers at their best settings: the same
knobs each engine maps onto its own loader), the page cache dropped before each cell. The
peers (--peers):
  ddpbench         engine ddpbench: the C loader (threads);
  pytorch          engine pytorch: torch DataLoader(num_workers=N, prefetch_factor);
  tf.data          engine tensorflow: tf.data (num_parallel_calls=N, prefetch);
  keras            engine horovod, framework keras: image_dataset_from_directory's
                   pipeline (tfrecord: the engine's own reader, as it reports);
  ddpbench-inproc  engine ddpbench with dataset.storage_layer in_process: the C
                   loader's own emulation instead of the mount (the capped storages
                   only): what the mount costs or changes for the same loader.
Every cell of peer x format x storage x workers runs once a round, the order rotated each
round; the headline is the median of the rounds. Figures: samples/s (results'
throughput_mean) and the loader's CPU per sample: results' loader_cpu_ms (loader CPU per
rank and step) / batch, or, where the engine leaves loader_cpu_ms null, the rank
process's CPU (the run's usage windows, RUSAGE_SELF: user + sys over steps x batch, so a
loader's child processes are not in it), marked "p" in the tables. A cell the daemon
refuses (400/409) or whose run fails is skipped, and the table's notes say why.

Training (--no-train skips it): --train-models (model:timed steps) per engine (ddpbench,
pytorch, tensorflow) under --train-storages, on --train-format (files-jpeg): one rank,
batch 64, 2 compute threads, 2 loader workers, prefetch 2, SGD; figures: step ms and data
wait ms (medians of the stored steps), and results' data_fraction, input_bound and
loader_cpu_ms. One round.

--done-sweep: the issue's "Done when" sweep (schema/examples/train-data-sweep.json: engine
ddpbench, pytorch, tensorflow x dataset.format files-jpeg, tfrecord x dataset.storage
local, nfs x dataset.workers 1, 4) submitted as ONE experiment through REST, on this
script's data; prints each run's point, state, throughput and data columns.

A benchmark: figures and ratios, never pass/fail. Takes /tmp/ddpb-bench.lock (flock).
"""
import fcntl
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from bench_data import convert, drop_caches, step_medians, write_cifar  # noqa: E402
from bench_train import Daemon, bench_args, refusal, write_json  # noqa: E402

WARMUP = 5
# label -> (spec fields, the label printed)
PEERS = {
    "ddpbench": ({"engine": "ddpbench"}, "ddpbench C loader"),
    "pytorch": ({"engine": "pytorch", "strategy": "ddp"}, "PyTorch DataLoader"),
    "tf.data": ({"engine": "tensorflow", "strategy": "ddp"}, "tf.data"),
    "keras": ({"engine": "horovod", "strategy": "horovod", "framework": "keras"}, "Keras"),
    "ddpbench-inproc": ({"engine": "ddpbench", "dataset": {"storage_layer": "in_process"}},
                        "ddpbench in-process emulation"),
}
TRAIN_ENGINES = ("ddpbench", "pytorch", "tf.data")
DONE_SWEEP = os.path.join(ROOT, "schema", "examples", "train-data-sweep.json")


def machine():
    """Date, CPU model, CPU count and the vector ISA, for RESULTS.md's header."""
    model, flags = "?", []
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and model == "?":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = [x for x in line.split(":", 1)[1].split()
                         if x in ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni",
                                  "avx512_bf16")]
    try:
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = "?"
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": model,
            "cpus": os.cpu_count(), "isa": flags, "commit": commit,
            "command": " ".join(sys.argv)}


def merged(base, extra):
    """base with extra's fields laid over it, one level of groups deep (dataset)."""
    out = dict(base)
    for k, v in extra.items():
        out[k] = dict(out.get(k, {}), **v) if isinstance(v, dict) else v
    return out


def loader_spec(peer, root, fmt, storage, workers, a):
    spec = {"name": f"loaders {peer} {fmt} {storage} w{workers}", "workload": "train",
            "model": "mnist-cnn", "loader_only": True, "batch_size": a.batch,
            "threads": a.threads, "steps": a.batches + WARMUP, "warmup_steps": WARMUP,
            "prefetch": max(2, workers),
            "eval": False, "timeout_s": 900,
            "dataset": {"name": "cifar10", "path": root, "format": fmt, "storage": storage,
                        "workers": workers, "augment": True}}
    return merged(spec, PEERS[peer][0])


def train_spec(engine, model, steps, root, fmt, storage):
    spec = {"name": f"train {engine} {model} {storage}", "workload": "train", "model": model,
            "batch_size": 64, "threads": 2, "steps": steps + 2, "warmup_steps": 2,
            "prefetch": 2, "eval": False, "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9},
            "dataset": {"name": "cifar10", "path": root, "format": fmt, "storage": storage,
                        "workers": 2, "augment": True},
            "timeout_s": 1800}
    return merged(spec, PEERS[engine][0])


def storage_layer(run):
    """The storage layer the run's env records (rank 0), or None where it records none."""
    for row in run.get("env") or []:
        env = row.get("env")
        env = json.loads(env) if isinstance(env, str) else env
        if isinstance(env, dict) and "storage_layer" in env:
            return env["storage_layer"]
    return None


def cpu_per_sample(d, res_row, run, batch):
    """(µs of loader CPU per sample, source): results' loader_cpu_ms / batch ("loader"),
    else the rank process's CPU over its usage windows ("process"), else (None, None)."""
    if res_row.get("loader_cpu_ms") is not None:
        return res_row["loader_cpu_ms"] * 1e3 / batch, "loader"
    usage = [u for u in run.get("usage") or [] if u.get("steps")]
    steps = sum(u["steps"] for u in usage)
    if steps:
        return sum(u["user_s"] + u["sys_s"] for u in usage) * 1e6 / (steps * batch), "process"
    return None, None


def one_cell(d, spec, batch):
    """A cell's figures from its experiment, or {"skipped": why}."""
    exp, why = d.attempt(spec)
    if exp is None:
        return {"skipped": why}
    row = d.call(f"/v1/experiments/{exp['id']}/results")["rows"][0]
    run = d.call(f"/v1/runs/{exp['runs'][0]['id']}")
    cpu, src = cpu_per_sample(d, row, run, batch)
    return {"throughput": row["throughput_mean"], "cpu_us": cpu, "cpu_from": src,
            "loader_cpu_ms": row.get("loader_cpu_ms"), "read_mbps": row.get("read_mbps"),
            "layer": storage_layer(run), "run": run["id"]}


def loader_cells(a):
    cells = [(p, f, s, w) for w in a.workers for f in a.formats for s in a.storages for p in a.peers
             if not (p == "ddpbench-inproc" and s == "local")]
    return cells


def part_loader(d, root, a, out):
    cells = loader_cells(a)
    for r in range(a.rounds):
        k = (r * 7) % len(cells) if cells else 0
        for peer, fmt, st, w in cells[k:] + cells[:k]:
            key = f"{peer}|{fmt}|{st}|{w}"
            if key in out["skipped"]:
                continue  # refused once: the same spec is refused again
            drop_caches()
            c = one_cell(d, loader_spec(peer, root, fmt, st, w, a), a.batch)
            if "skipped" in c:
                out["skipped"][key] = c["skipped"]
                print(f"round {r} {peer} {fmt} {st} w{w}: SKIP {c['skipped']}", flush=True)
                continue
            out["loader"].setdefault(key, []).append(c)
            print(f"round {r} {peer} {fmt} {st} w{w}: {c['throughput']:.0f} samples/s, "
                  f"cpu {fmt_cpu(c)} per sample, layer {c['layer']}", flush=True)


def part_train(d, root, a, out):
    for spec_of in a.train_models:
        model, steps = spec_of.split(":")
        for st in a.train_storages:
            for eng in TRAIN_ENGINES:
                key = f"{eng}|{model}|{st}"
                drop_caches()
                exp, why = d.attempt(train_spec(eng, model, int(steps), root, a.train_format, st))
                if exp is None:
                    out["skipped"][key] = why
                    print(f"train {eng} {model} {st}: SKIP {why}", flush=True)
                    continue
                row = d.call(f"/v1/experiments/{exp['id']}/results")["rows"][0]
                step, wait = step_medians(d, exp["runs"][0]["id"])
                out["train"][key] = {"step_ms": step, "data_ms": wait,
                                     "data_fraction": row.get("data_fraction"),
                                     "input_bound": row.get("input_bound"),
                                     "loader_cpu_ms": row.get("loader_cpu_ms"),
                                     "throughput": row["throughput_mean"]}
                print(f"train {eng} {model} {st}: {out['train'][key]}", flush=True)


def not_observed(d, out):
    """Each engine's data_not_observed ({column: why}) from GET /v1/engines (this node's
    row, once its probe ended: up to a minute), into out."""
    for _ in range(60):
        try:
            node = d.call("/v1/engines")["nodes"][0]
        except (OSError, KeyError, IndexError) as err:  # a table note, not a failure
            print(f"GET /v1/engines: {err!r}", flush=True)
            return
        if not node.get("probing"):
            break
        time.sleep(1)
    out["not_observed"] = {r["name"]: r.get("data_not_observed") or {}
                           for r in node.get("engines", []) if "name" in r}


def report_not_observed(a, out):
    engines = {PEERS[p][0]["engine"] for p in a.peers} | {"tensorflow", "pytorch"}
    seen = {e: w for e, w in out.get("not_observed", {}).items() if e in engines and w}
    if seen:
        print("\nData columns an engine leaves out of some runs (GET /v1/engines):")
    for eng, cols in sorted(seen.items()):
        for col, why in cols.items():
            print(f"- {eng} {col}: {why}")


def num(v, f="{:.0f}"):
    return "-" if v is None else f.format(v)


def fmt_cpu(c):
    if c["cpu_us"] is None:
        return "-"
    return f"{c['cpu_us']:.0f} µs" + (" p" if c["cpu_from"] == "process" else "")


def report_loader(a, out, rounds):
    notes = {}
    for fmt in a.formats:
        peers = [p for p in a.peers]
        print(f"\n### Loader only, {fmt}: samples/s (median of {rounds} rounds) / loader CPU "
              f"µs per sample\n")
        print("| workers | storage | " + " | ".join(PEERS[p][1] for p in peers) + " |")
        print("|---:|---|" + "---:|" * len(peers))
        for w in a.workers:
            for st in a.storages:
                cells = []
                for p in peers:
                    key = f"{p}|{fmt}|{st}|{w}"
                    got = out["loader"].get(key)
                    if got:
                        thr = statistics.median(c["throughput"] for c in got)
                        cpus = [c["cpu_us"] for c in got if c["cpu_us"] is not None]
                        proc = any(c["cpu_from"] == "process" for c in got)
                        cells.append(f"{thr:.0f} / " + (f"{statistics.median(cpus):.0f}"
                                                         + (" p" if proc else "") if cpus else "-"))
                    elif key in out["skipped"]:
                        n = notes.setdefault(out["skipped"][key][:240], len(notes) + 1)
                        cells.append(f"skipped [{n}]")
                    else:
                        cells.append("")
                print(f"| {w} | {st} | " + " | ".join(cells) + " |")
    layers = sorted({(k.split("|")[0], k.split("|")[2], c["layer"])
                     for k, v in out["loader"].items() for c in v})
    if layers:
        print("\nStorage layer per peer and storage (the run's env): "
              + "; ".join(f"{p} {s}: {lay}" for p, s, lay in layers))
    if any(c["cpu_from"] == "process" for v in out["loader"].values() for c in v):
        print("\n\"p\": the rank process's CPU (the engine leaves loader_cpu_ms null).")
    for why, n in notes.items():
        print(f"[{n}] {why}")
    if rounds > 1:
        print("\nPer round (samples/s):")
    for key, v in out["loader"].items() if rounds > 1 else ():
        rates = ", ".join(f"{c['throughput']:.0f}" for c in v)
        print(f"- {key.replace('|', ' ')}: {rates}")


def report_train(a, out):
    if not out["train"]:
        return
    print(f"\n### Training on {a.train_format}: input-bound or not (1 rank, batch 64, 2 "
          "threads, 2 loader workers)\n")
    print("| model | storage | engine | step ms | data wait ms | data_fraction | input-bound | "
          "loader CPU ms/step |")
    print("|---|---|---|---:|---:|---:|---|---:|")
    for key, t in out["train"].items():
        eng, model, st = key.split("|")
        print(f"| {model} | {st} | {PEERS[eng][0]['engine']} | {t['step_ms']:.1f} | "
              f"{t['data_ms']:.1f} | "
              f"{num(t['data_fraction'], '{:.3f}')} | {t['input_bound']} | "
              f"{num(t['loader_cpu_ms'], '{:.2f}')} |")
    for key, why in out["skipped"].items():
        if key.count("|") == 2:
            print(f"- skipped {key.replace('|', ' ')}: {why}")


def done_sweep(d, path, root, out):
    """The sweep of spec file path (the issue's), one experiment through REST, its
    dataset.path set to root: each run's point, state, throughput and data columns."""
    with open(path) as f:
        spec = json.load(f)
    spec["dataset"]["path"] = root
    try:
        exp = d.wait(d.call("/v1/experiments", spec)["id"])
    except urllib.error.HTTPError as err:
        out["done_sweep"] = {"refused": refusal(err)}
        print(f"done-sweep refused: {out['done_sweep']['refused']}")
        return
    rows = d.call(f"/v1/experiments/{exp['id']}/results")["rows"]
    fields = list(spec["sweep"])
    by_point = {tuple(r.get(f) for f in fields): r for r in rows}
    print(f"\n### Done-when sweep: experiment {exp['id']} {exp['status']}\n")
    print("| " + " | ".join(fields) + " | state | samples/s | data_fraction | input-bound | "
          "loader CPU ms | read MB/s | error |")
    print("|" + "---|" * (len(fields) + 7))
    out["done_sweep"] = {"experiment": exp["id"], "status": exp["status"], "runs": []}
    for run in exp["runs"]:
        params = run["params"] if isinstance(run["params"], dict) else json.loads(run["params"])
        point = tuple(params.get(f) for f in fields)
        r = by_point.get(point, {}) if run["status"] == "succeeded" else {}
        print("| " + " | ".join(str(x) for x in point) + f" | {run['status']} | "
              f"{num(r.get('throughput_mean'))} | {num(r.get('data_fraction'), '{:.3f}')} | "
              f"{r.get('input_bound', '-')} | {num(r.get('loader_cpu_ms'), '{:.2f}')} | "
              f"{num(r.get('read_mbps'), '{:.1f}')} | {run.get('error') or ''} |")
        out["done_sweep"]["runs"].append({"params": params, "status": run["status"],
                                          "error": run.get("error"), "results": r})


def main():
    ap = bench_args(3)
    ap.add_argument("--samples", type=int, default=50000,
                    help="training images written (a multiple of 5; test: a fifth of it)")
    ap.add_argument("--peers", default="ddpbench,pytorch,tf.data,keras,ddpbench-inproc",
                    help=f"of {', '.join(PEERS)}")
    ap.add_argument("--formats", default="files-jpeg,tfrecord")
    ap.add_argument("--storages", default="local,nfs")
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2,
                    help="the loader run's threads, so its CPU slots: the CPUs it is pinned to")
    ap.add_argument("--train-models", default="mnist-cnn:40,resnet18-cifar:6",
                    help="model:timed steps, comma-separated")
    ap.add_argument("--train-storages", default="nfs,blob")
    ap.add_argument("--train-format", default="files-jpeg")
    ap.add_argument("--no-loader", action="store_true")
    ap.add_argument("--no-train", action="store_true")
    ap.add_argument("--done-sweep", nargs="?", const=DONE_SWEEP, default="", metavar="SPEC",
                    help="only the issue's sweep (or SPEC's), on this script's data")
    ap.add_argument("--keep", default="", help="reuse or keep the generated data here")
    a = ap.parse_args()
    a.peers = a.peers.split(",")
    bad = [p for p in a.peers if p not in PEERS]
    if bad:
        raise SystemExit(f"--peers: unknown {bad}; known: {', '.join(PEERS)}")
    a.formats, a.storages = a.formats.split(","), a.storages.split(",")
    a.workers = [int(w) for w in a.workers.split(",")]
    a.train_models = [m for m in a.train_models.split(",") if m]
    a.train_storages = a.train_storages.split(",")
    lock = open("/tmp/ddpb-bench.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    root = a.keep or tempfile.mkdtemp(prefix="ddpb-bench-loaders-")
    os.makedirs(root, exist_ok=True)  # the daemon's --data-dir must exist
    out = {"machine": machine(), "conversions": {}, "loader": {}, "train": {}, "skipped": {}}
    t0 = time.time()
    m = out["machine"]
    print(f"Date {m['date']}, {m['cpu']} x{m['cpus']} ({' '.join(m['isa'])}), commit "
          f"{m['commit']}\n{m['command']}", flush=True)
    # 16 slots: a run is pinned to CPUs of its own while it fits (spec threads = its slots),
    # every peer alike; the sweep's runs (one rank of one thread each) run two at a time
    # so they do not all start at once on a small machine
    d = Daemon(a.build, 2 if a.done_sweep else 16, data_dir=root)
    try:
        if not os.path.exists(os.path.join(root, "test_batch.bin")):
            write_cifar(root, a.samples, a.samples // 5)
        kept = os.path.getsize(os.path.join(root, "data_batch_1.bin")) // 3073 * 5
        if kept != a.samples:  # --keep reuses the data and its conversions as they are
            raise SystemExit(f"--keep {root} holds {kept} training images, not --samples "
                             f"{a.samples}: name another folder")
        fmts = set(a.formats) | {"files-jpeg"} | ({"tfrecord"} if a.done_sweep else set())
        for fmt in sorted(fmts):
            if not os.path.exists(os.path.join(root, fmt)):
                try:
                    out["conversions"][fmt] = convert(a.build, root, fmt)
                except subprocess.CalledProcessError as e:
                    print(f"convert {fmt}: failed ({e.stderr.strip()[-300:]}); its cells will "
                          "be skipped", flush=True)
                    continue
                print(f"convert {fmt}: {out['conversions'][fmt][0]:.1f} s, "
                      f"{out['conversions'][fmt][1] / 1e6:.1f} MB", flush=True)
        if a.done_sweep:
            done_sweep(d, a.done_sweep, root, out)
        else:
            if not a.no_loader:
                part_loader(d, root, a, out)
            if not a.no_train:
                part_train(d, root, a, out)
            not_observed(d, out)
    finally:
        d.close()
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    if not a.done_sweep:
        if not a.no_loader:
            report_loader(a, out, a.rounds)
        report_train(a, out)
        report_not_observed(a, out)
    out["elapsed_s"] = time.time() - t0
    print(f"\nelapsed {out['elapsed_s'] / 60:.1f} min")
    write_json(a.json, out)


if __name__ == "__main__":
    main()
