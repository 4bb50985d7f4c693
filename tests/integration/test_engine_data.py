#!/usr/bin/env python3
"""The torch engines' data pipeline (issue 34), against the real daemon and engines:
- engines/ddpb_torch_data.py's DataLoader gives, per rank and epoch, the very batches of
  ddpbench's order: files-png (lossless) equals the native set's arrays bit for bit, crop
  and flip included, at 1 and 2 loader workers; files-jpeg's labels per batch are the
  manifest's at ddpb_data.rank_order (the C loader's sample i is manifest line i);
- pytorch trains 2 ranks on files-png and files-jpeg at 1 and 2 workers: files-png's losses
  per step equal the native set's (the same samples in every step of every rank), the
  worker count changes nothing, the step lines carry data_ms and loader_cpu_ms (null on
  native, as GET /v1/engines' data_not_observed says), and the results rows fill
  data_fraction, input_bound and loader_cpu_ms;
- pytorch loader_only: steps with data_ms = step_ms and nothing trained, a throughput,
  input-bound results;
- tfrecord (`ddpbench dataset convert --to tfrecord`, branch tfrecord) with pytorch: the
  same losses as files-jpeg (the records hold the same JPEG bytes); a record with a bad
  data CRC fails the run naming the shard and the record;
- horovod (torch), deepspeed and lightning train on the files through the same loader;
- refused at submit: records-zstd for pytorch naming dataset.format, loader_only for
  deepspeed and lightning naming loader_only;
- storage nfs through the rank's ddpbench-fs mount: read_bytes and read_mbps (SKIP without
  the mount, branch mount)."""
import os
import shutil
import sys
import tempfile

from harness import BUILD, Daemon, SharedDaemon, Skip, check, run_cases, wait_groups_gone
from test_data_pipeline import convert, write_cifar

SOURCE = os.environ.get("DDPB_SOURCE_DIR",
                        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(SOURCE, "engines"))
import ddpb_data  # noqa: E402  (numpy only)

BASE = {"workload": "train", "engine": "pytorch", "strategy": "ddp", "model": "mnist-cnn",
        "batch_size": 16, "steps": 12, "warmup_steps": 1, "world_size": 2, "seed": 3,
        "prefetch": 2, "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9}}
ROOT = None
SHARED = SharedDaemon(lambda: Daemon(cpu_slots=2, extra_args=["--data-dir", dataset_root()]))


def dataset_root():
    """The small CIFAR set (test_data_pipeline's) with files-png and files-jpeg, made once."""
    global ROOT
    if ROOT is None:
        ROOT = tempfile.mkdtemp(prefix="ddpb-engine-data-")
        write_cifar(ROOT)
        for fmt in ("files-png", "files-jpeg"):
            convert(ROOT, fmt)
    return ROOT


def daemon():
    """The daemon every case shares (SharedDaemon), which may read the set, its engine
    probe ended."""
    return SHARED.get()


def torch_data():
    try:
        import ddpb_torch_data
    except ImportError as ex:
        raise Skip(f"engines/ddpb_torch_data.py needs {ex.name}: install-deps.sh --engines")
    return ddpb_torch_data


def spec_of(fmt, **ds):
    return dict(BASE, dataset=dict({"name": "cifar10", "path": dataset_root(), "format": fmt},
                                   **ds))


def test_loader_takes_ddpbenchs_samples():
    tdata, root = torch_data(), dataset_root()
    import numpy as np
    import torch
    for workers in (1, 2):
        spec = spec_of("native", augment=True, workers=workers)
        native = ddpb_data.Data(spec)
        png = tdata.open_data(spec_of("files-png", augment=True, workers=workers))
        check(png.n == native.n == 320 and png.shape == native.shape, (png.n, png.shape))
        for epoch in (0, 1):
            for rank in (0, 1):
                a = list(native.batches(epoch, 2, rank, 16, seed=4))
                b = list(png.batches(epoch, 2, rank, 16, seed=4))
                check(len(a) == len(b) == 10, (len(a), len(b)))
                for (xa, ya), (xb, yb) in zip(a, b):
                    check(torch.equal(torch.from_numpy(ya), yb), (epoch, rank, ya, yb))
                    check(torch.equal(torch.from_numpy(xa), xb), (epoch, rank, workers))
        fig = png.step_figures()
        check(fig["loader_cpu_ms"] > 0 and "read_bytes" not in fig, fig)
        tests = list(png.test_batches(2, 1, 16))
        ref = list(native.test_batches(2, 1, 16))
        check(len(tests) == len(ref) and all(np.array_equal(x, y.numpy()) for (x, _), (y, _)
                                             in zip(ref, tests)), "the test split")
    labels = [y for _, y in ddpb_data.files_samples(root, "files-jpeg", "train")]
    jpeg = tdata.open_data(spec_of("files-jpeg", workers=2))
    for rank in (0, 1):
        order = ddpb_data.rank_order(4, 1, 320, rank, 2)
        got = [y.tolist() for _, y in jpeg.batches(1, 2, rank, 16, seed=4)]
        want = [[labels[i] for i in order[b * 16:(b + 1) * 16]] for b in range(10)]
        check(got == want, (rank, got[:1], want[:1]))


def losses_of(d, exp):
    """{(format, workers): [rank 0's losses per step]} of an experiment's runs."""
    out = {}
    for run in exp["runs"]:
        spec = d.get(f"/v1/runs/{run['id']}")["spec"]
        rows = sorted((r for r in d.step_rows(run["id"]) if r["rank"] == 0),
                      key=lambda r: r["step"])
        out[(spec["dataset"]["format"], spec["dataset"]["workers"])] = rows
    return out


def test_pytorch_trains_on_files_with_ddpbenchs_samples():
    torch_data()
    d = daemon()
    exp = d.run_succeeds(dict(spec_of("files-png"), sweep={
        "dataset.format": ["native", "files-png", "files-jpeg"], "dataset.workers": [1, 2]}),
        timeout=600, runs=6)
    runs = losses_of(d, exp)
    loss = {k: [r["loss"] for r in rows] for k, rows in runs.items()}
    check(all(len(v) == BASE["steps"] for v in loss.values()), {k: len(v) for k, v in loss.items()})
    # the same samples in every step of every rank: the same losses as the arrays'
    for key in (("files-png", 1), ("files-png", 2), ("native", 2)):
        check(max(abs(a - b) for a, b in zip(loss[("native", 1)], loss[key])) < 1e-6,
              (key, loss[("native", 1)], loss[key]))
    check(loss[("files-jpeg", 1)] == loss[("files-jpeg", 2)], "workers changed the data")
    for (fmt, workers), rows in runs.items():
        for r in rows:
            check(r["data_ms"] is not None and r["data_ms"] >= 0, r)
            check((r["loader_cpu_ms"] is None) == (fmt == "native"), (fmt, r))
            check(r["read_bytes"] is None, ("no mount, no read_bytes", r))
        if fmt != "native":
            check(sum(r["loader_cpu_ms"] for r in rows) > 0, (fmt, workers, rows))
    # the DataLoader's forkserver and workers end with their rank, not after the run
    wait_groups_gone(k["pid"] for r in exp["runs"]
                     for k in d.get(f"/v1/runs/{r['id']}")["ranks"] if k["pid"])
    res = d.get(f"/v1/experiments/{exp['id']}/results")
    for row in res["rows"]:
        check(0 <= row["data_fraction"] <= 1 and isinstance(row["input_bound"], bool), row)
        check((row["loader_cpu_ms"] is None) == (row["dataset.format"] == "native"), row)
        check(row["read_mbps"] is None, row)
    engines = d.get("/v1/engines")["nodes"][0]["engines"]
    torch_row = next(e for e in engines if e["name"] == "pytorch")
    check({"loader_cpu_ms", "read_bytes"} <= set(torch_row["data_not_observed"]), torch_row)


def test_pytorch_loader_only():
    torch_data()
    d = daemon()
    exp = d.run_succeeds(dict(spec_of("files-jpeg"), loader_only=True,
                              sweep={"dataset.workers": [1, 2]}), timeout=300, runs=2)
    for run in exp["runs"]:
        rows = d.step_rows(run["id"])
        check(len(rows) == BASE["steps"] * 2, len(rows))
        for r in rows:
            check(r["loss"] == 0 and r["forward_ms"] == 0 and r["backward_ms"] == 0, r)
            check(r["data_ms"] == r["step_ms"] and r["loader_cpu_ms"] >= 0, r)
        check(sum(r["loader_cpu_ms"] for r in rows) > 0, rows)
        epochs = d.get(f"/v1/runs/{run['id']}")["epochs"]
        check(epochs and epochs[0]["train_loss"] is None, epochs)
    res = d.get(f"/v1/experiments/{exp['id']}/results")
    for row in res["rows"]:
        check(row["throughput_mean"] > 0 and row["input_bound"] is True, row)
        # the ranks pooled: a step is the slowest rank's, data the ranks' mean wait
        check(row["data_fraction"] > 0.5 and row["loader_cpu_ms"] > 0, row)


def test_other_torch_engines_read_files():
    """horovod (torch), deepspeed and lightning share the DataLoader: each trains 2 ranks on
    files-jpeg with loader_cpu_ms on its steps; horovod runs loader_only too."""
    torch_data()
    d = daemon()
    points = [dict(spec_of("files-jpeg", workers=2), engine="horovod", strategy="horovod"),
              dict(spec_of("files-jpeg", workers=2), engine="horovod", strategy="horovod",
                   loader_only=True),
              dict(spec_of("files-jpeg"), engine="deepspeed", strategy="zero1"),
              dict(spec_of("files-png"), engine="lightning", strategy="ddp")]
    exps = [(p, d.submit(p)["id"]) for p in points]
    for p, exp_id in exps:
        exp = d.wait_experiment(exp_id, timeout=600)
        what = (p["engine"], p.get("loader_only", False))
        check(exp["status"] == "succeeded", f"{what}\n{d.failed_runs(exp)}")
        rows = d.step_rows(exp["runs"][0]["id"])
        check(len(rows) == BASE["steps"] * 2, (what, len(rows)))
        check(all(r["loader_cpu_ms"] is not None and r["data_ms"] is not None
                  for r in rows), (what, rows[:2]))
        check(sum(r["loader_cpu_ms"] for r in rows) > 0, (what, rows))
        if p.get("loader_only"):
            check(all(r["loss"] == 0 and r["data_ms"] == r["step_ms"] for r in rows), rows)
        wait_groups_gone(k["pid"] for k in d.get(f"/v1/runs/{exp['runs'][0]['id']}")["ranks"]
                         if k["pid"])


def test_pytorch_reads_tfrecord():
    torch_data()
    root = dataset_root()
    if not os.path.isdir(os.path.join(root, "tfrecord")):
        cli = os.path.join(BUILD, "cli", "ddpbench")
        import subprocess
        r = subprocess.run([cli, "dataset", "convert", "--name", "cifar10", "--path", root,
                            "--to", "tfrecord"], capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise Skip("`ddpbench dataset convert --to tfrecord` is branch tfrecord's (part B): "
                       f"{(r.stderr.strip().splitlines() or ['?'])[-1][:120]}")
    d = daemon()
    exp = d.run_succeeds(dict(spec_of("files-jpeg", workers=2),
                              sweep={"dataset.format": ["files-jpeg", "tfrecord"]}),
                         timeout=300, runs=2)
    loss = {k[0]: [r["loss"] for r in rows] for k, rows in losses_of(d, exp).items()}
    check(loss["tfrecord"] == loss["files-jpeg"], loss)
    # a record whose data CRC is wrong fails the run naming the shard and the record
    bad = os.path.join(root, "bad")
    shutil.copytree(os.path.join(root, "tfrecord"), os.path.join(bad, "tfrecord"))
    shard = os.path.join(bad, "tfrecord", "train-00000-of-00001.tfrecord")
    with open(shard + ".idx") as f:
        off, _ = map(int, f.readlines()[5].split())
    with open(shard, "r+b") as f:
        f.seek(off + 20)
        byte = f.read(1)
        f.seek(off + 20)
        f.write(bytes([byte[0] ^ 0xFF]))
    spec = dict(spec_of("tfrecord", workers=2), world_size=1, steps=40)
    spec["dataset"]["path"] = bad
    d.run_fails(spec, "train-00000-of-00001.tfrecord: record 5 (offset "
                f"{off}): bad data CRC", timeout=300)


def test_refusals_name_the_field():
    d = daemon()
    for bad, field, part in (
            (spec_of("records-zstd"), "dataset.format", "ddpbench's own shard format"),
            (dict(spec_of("files-jpeg"), engine="deepspeed", strategy="zero1",
                  loader_only=True), "loader_only", "deepspeed"),
            (dict(spec_of("files-jpeg"), engine="lightning", loader_only=True),
             "loader_only", "Lightning")):
        status, body, _ = d.request("POST", "/v1/experiments", body=bad)
        check(status == 400 and body["error"]["field"] == field, (field, status, body))
        check(part in body["error"]["message"], body)


def test_nfs_reads_through_the_mount():
    torch_data()
    if not os.path.exists(os.path.join(BUILD, "fs", "ddpbench-fs")):
        raise Skip("storage nfs under a framework engine reads through the rank's ddpbench-fs "
                   "mount (branches fs and mount, parts A1/A2), not in this build")
    d = daemon()
    exp = d.run_succeeds(dict(spec_of("files-jpeg", storage="nfs"), world_size=1),
                         timeout=300)
    rows = [r for r in d.step_rows(exp["runs"][0]["id"]) if not r["warmup"]]
    check(sum(r["read_bytes"] for r in rows) > 0, rows)
    row = d.get(f"/v1/experiments/{exp['id']}/results")["rows"][0]
    check(row["read_mbps"] > 0 and row["loader_cpu_ms"] > 0, row)


if __name__ == "__main__":
    try:
        rc = run_cases([test_loader_takes_ddpbenchs_samples,
                        test_pytorch_trains_on_files_with_ddpbenchs_samples,
                        test_pytorch_loader_only, test_other_torch_engines_read_files,
                        test_pytorch_reads_tfrecord,
                        test_refusals_name_the_field, test_nfs_reads_through_the_mount])
    finally:
        SHARED.close()
        if ROOT:
            shutil.rmtree(ROOT, ignore_errors=True)
    sys.exit(rc)
