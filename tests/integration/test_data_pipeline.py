#!/usr/bin/env python3
"""The data pipeline as an experimental variable, through the REST API on real workers
(issue 20):
- a small CIFAR-10-format dataset made here is converted by `ddpbench dataset convert` into
  PNG and JPEG files and zstd and JPEG record shards; one experiment sweeps format x loader
  workers x loader_only: every run succeeds, the loader-only rows train nothing (no forward, no
  backward, no epoch loss) and the training rows do, every step row of a file-backed format
  carries the bytes its rank read and the loader's CPU time (the run's steps together read
  something), and the results rows give the
  data-wait share, input_bound, the loader's CPU time and the read rate beside throughput;
- the same seed gives the same loss on every format and worker count that trains on the
  same samples (PNG and zstd records are lossless copies of the binaries, JPEG records hold
  the JPEG files' bytes);
- a loader-only run under a custom storage of R MB/s reads at most R and at least 80 % of
  it (results' read_mbps), and cold mode still reads the same data; real data beside
  synthetic in one experiment;
- bad data-pipeline specs are refused at submit naming the field, and a format that was
  never converted fails the run naming the command that makes it."""
import contextlib
import os
import random
import shutil
import subprocess
import sys
import tempfile

from harness import BUILD, Daemon, check, run_cases

SAMPLES = 64  # per training batch file (5 files) and in the test file


def write_cifar(root, seed=7):
    """CIFAR-10 binary batches of smooth random images (gradients and a block per image),
    so JPEG sizes are realistic rather than noise's."""
    rng = random.Random(seed)
    os.makedirs(root, exist_ok=True)
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
    for name in names:
        out = bytearray()
        for _ in range(SAMPLES):
            label = rng.randrange(10)
            out.append(label)
            for ch in range(3):
                a, b, c = rng.randrange(256), rng.randrange(-4, 5), rng.randrange(-4, 5)
                y0, x0 = rng.randrange(24), rng.randrange(24)
                for y in range(32):
                    for x in range(32):
                        v = a + b * y + c * x + (60 if y0 <= y < y0 + 8 and x0 <= x < x0 + 8 else 0)
                        out.append(max(0, min(255, v)))
        with open(os.path.join(root, name), "wb") as f:
            f.write(out)


def convert(root, fmt):
    cli = os.path.join(BUILD, "cli", "ddpbench")
    r = subprocess.run([cli, "dataset", "convert", "--name", "cifar10", "--path", root, "--to", fmt],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, (fmt, r.returncode, r.stdout, r.stderr))


BASE = {"workload": "train", "model": "mnist-cnn", "batch_size": 16, "steps": 8, "warmup_steps": 1,
        "eval": False, "world_size": 1, "seed": 3, "optimizer": {"lr": 0.01}}


def data(root, **kw):
    return dict({"name": "cifar10", "path": root}, **kw)


@contextlib.contextmanager
def cifar_daemon(*formats):
    """A daemon and a folder holding the small CIFAR set converted to formats; both gone
    at the end."""
    root = tempfile.mkdtemp(prefix="ddpb-data-")
    d = Daemon(cpu_slots=2, extra_args=["--data-dir", root])  # dataset.path lies beneath it
    try:
        write_cifar(root)
        for fmt in formats:
            convert(root, fmt)
        yield d, root
    finally:
        d.close()
        shutil.rmtree(root, ignore_errors=True)


def test_formats_workers_loader_only():
    with cifar_daemon("files-jpeg", "files-png", "records-zstd", "records-jpeg") as (d, root):
        check(os.path.exists(os.path.join(root, "files-jpeg", "train.txt")), os.listdir(root))
        spec = dict(BASE, dataset=data(root, format="files-jpeg"),
                    sweep={"dataset.format": ["files-jpeg", "files-png", "records-zstd", "records-jpeg"],
                           "dataset.workers": [1, 2], "loader_only": [True, False]})
        exp = d.run_succeeds(spec, timeout=300, runs=16)
        losses = {}
        for run in exp["runs"]:
            full = d.get(f"/v1/runs/{run['id']}")
            rows = [r for r in d.step_rows(run["id"]) if not r["warmup"]]
            check(len(rows) == BASE["steps"] - BASE["warmup_steps"], len(rows))
            only = full["spec"]["loader_only"]
            fmt = full["spec"]["dataset"]["format"]
            # the batches came from the files; a step is charged what the loader read while
            # it ran, so one whose batches were read ahead may read nothing itself
            check(sum(r["read_bytes"] for r in rows) > 0, (fmt, rows))
            check(sum(r["loader_cpu_ms"] for r in rows) > 0, (fmt, rows))
            for r in rows:
                check(r["read_bytes"] >= 0 and r["loader_cpu_ms"] >= 0, r)
                if only:
                    check(r["forward_ms"] == 0 and r["backward_ms"] == 0 and r["loss"] == 0, r)
            if not only:
                losses[(fmt, full["spec"]["dataset"]["workers"])] = [r["loss"] for r in rows]
        # lossless formats and any worker count: the same batches, so the same losses
        ref = losses[("files-png", 1)]
        for key in (("files-png", 2), ("records-zstd", 1), ("records-zstd", 2)):
            check(max(abs(a - b) for a, b in zip(ref, losses[key])) < 1e-5, (key, ref, losses[key]))
        check(losses[("files-jpeg", 1)] == losses[("files-jpeg", 2)], "jpeg: workers changed the data")
        # JPEG records hold the files' very bytes
        check(losses[("records-jpeg", 1)] == losses[("files-jpeg", 1)], "records-jpeg differs from files-jpeg")
        res = d.get(f"/v1/experiments/{exp['id']}/results")
        for c in ("data_fraction", "input_bound", "loader_cpu_ms", "read_mbps"):
            check(c in res["columns"], res["columns"])
        check(len(res["rows"]) == 16, len(res["rows"]))
        for row in res["rows"]:
            check(0 <= row["data_fraction"] <= 1, row)
            check(isinstance(row["input_bound"], bool), row)
            check(row["read_mbps"] > 0 and row["loader_cpu_ms"] > 0, row)
            if row["loader_only"]:  # nothing but the data: the step is the wait
                check(row["data_fraction"] > 0.5 and row["input_bound"], row)
        only = {(r["dataset.format"], r["dataset.workers"]): r["throughput_mean"]
                for r in res["rows"] if r["loader_only"]}
        trained = {(r["dataset.format"], r["dataset.workers"]): r["throughput_mean"]
                   for r in res["rows"] if not r["loader_only"]}
        for key, thr in trained.items():  # the loader alone supplies at least what training took
            check(only[key] > thr * 0.8, (key, only[key], thr))


def test_storage_cap_and_cold():
    with cifar_daemon("records") as (d, root):
        cap = 0.5  # MB/s: 16 samples of 3 KB a step, ~0.1 s a step at the cap
        spec = dict(BASE, loader_only=True, steps=12, batch_size=16,
                    dataset=data(root, format="records", storage="custom", read_mbps=cap, cold=True,
                                 workers=2), prefetch=2)
        exp = d.run_succeeds(spec, timeout=180)
        row = d.get(f"/v1/experiments/{exp['id']}/results")["rows"][0]
        check(0.8 * cap <= row["read_mbps"] <= cap * 1.02, row)
        check(row["input_bound"], row)
        # the named profiles are accepted as they are, and real data beside synthetic in one
        # experiment: synthetic ignores the format and the storage (nothing is read)
        exp = d.run_succeeds(dict(BASE, steps=3, dataset=data(root, format="records", storage="nfs"),
                                  sweep={"dataset.name": ["synthetic", "cifar10"]}), timeout=180)
        rows = {r["dataset.name"]: r for r in d.get(f"/v1/experiments/{exp['id']}/results")["rows"]}
        check(rows["cifar10"]["read_mbps"] > 0 and rows["synthetic"]["read_mbps"] == 0, rows)


def test_bad_specs_and_missing_format():
    with cifar_daemon() as (d, root):
        for bad, field in (({"dataset": data(root, format="parquet")}, "dataset.format"),
                           ({"dataset": data(root, storage="nfs")}, "dataset.storage"),
                           ({"dataset": data(root, format="records", read_mbps=10)}, "dataset.read_mbps"),
                           ({"loader_only": "yes"}, "loader_only"),
                           ({"engine": "pytorch", "dataset": data(root, format="records")}, "dataset.format")):
            status, body, _ = d.request("POST", "/v1/experiments", body=dict(BASE, **bad))
            check(status == 400, (bad, status, body))
            check(body["error"]["field"] == field, (bad, body))
        exp = d.run_experiment(dict(BASE, steps=2, dataset=data(root, format="records-zlib")), timeout=120)
        check(exp["status"] == "failed", exp["status"])
        err = exp["runs"][0]["error"] or ""
        check("ddpbench dataset convert" in err and "records-zlib" in err, err)


if __name__ == "__main__":
    sys.exit(run_cases([test_formats_workers_loader_only, test_storage_cap_and_cold,
                        test_bad_specs_and_missing_format]))
