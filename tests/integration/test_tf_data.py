#!/usr/bin/env python3
"""TensorFlow's own input pipelines under the TensorFlow engines, through the REST API on
real ranks (issue 34, engines/ddpb_tf_data.py):
- engine tensorflow reads files-png and files-jpeg with tf.data and takes exactly the
  samples ddpbench's rank r takes, in its order and with its values: on files-png (a
  lossless copy of the binaries) its losses equal, step for step, those of the same run on
  the native files (ddpb_data's arrays, ddpbench's order), at 1 and 2 ranks (ddp) and for
  MirroredStrategy's 2 replicas; on files-jpeg dataset.workers 1 and 2 give the same
  losses (the pipeline is deterministic whatever its parallelism), and with augmentation
  too; the pipeline's batches, read in this process, are the C loader's to the bit on
  files-png (crop, flip and normalization included) and its labels ddpbench's order on
  files-jpeg;
- loader_only with engine tensorflow: the pipeline alone, every step's data_ms its
  step_ms, loss 0, loader_cpu_ms observed; the results give throughput, data_fraction 1
  and input_bound;
- engine horovod with framework keras reads files-jpeg through Keras'
  image_dataset_from_directory: 2 ranks train, each epoch's samples floor(n / 2) per
  rank; its loader_only runs too;
- tfrecord (`ddpbench dataset convert --to tfrecord`): engine tensorflow reads the records
  by offset and trains on the very bytes of files-jpeg: the same losses;
- storage nfs goes through the ddpbench-fs mount: read_bytes on every engine's steps.
Each run is short (8 steps of 16 samples of a 320-sample CIFAR-format set)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from harness import BUILD, Daemon, Skip, check, run_cases
from test_data_pipeline import convert, write_cifar

SOURCE = os.environ.get("DDPB_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENGINES = os.path.join(SOURCE, "engines")
VENV_PY = os.path.join(SOURCE, ".venv", "bin", "python")  # the engines' (setup-venv.sh)
BASE = {"workload": "train", "model": "mnist-cnn", "batch_size": 16, "steps": 8,
        "warmup_steps": 1, "eval": False, "world_size": 1, "seed": 3, "threads": 1,
        "engine": "tensorflow", "strategy": "ddp",
        "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9}}


class Cifar:
    """A daemon and the small CIFAR set converted to formats; both gone at close(). One
    for the whole file: the daemon's first submit of a framework engine waits for
    engines/probe.py (every framework imported), so it is asked for once, with time."""

    def __init__(self, *formats, cpu_slots=2):
        self.root = tempfile.mkdtemp(prefix="ddpb-tfdata-")
        write_cifar(self.root)
        for fmt in formats:
            convert(self.root, fmt)
        self.d = Daemon(cpu_slots=cpu_slots, extra_args=["--data-dir", self.root])
        deadline = time.time() + 600  # GET /v1/engines says "probing" until it knows
        while self.d.get("/v1/engines")["nodes"][0]["probing"] and time.time() < deadline:
            time.sleep(1)

    def data(self, **kw):
        return dict({"name": "cifar10", "path": self.root}, **kw)

    def close(self):
        self.d.close()
        shutil.rmtree(self.root, ignore_errors=True)


SHARED = []


def cifar():
    """The file's one Cifar (made on first use): files-png, files-jpeg and, when this
    build converts it, tfrecord."""
    if not SHARED:
        SHARED.append(Cifar("files-png", "files-jpeg",
                            *(["tfrecord"] if tfrecord_available() else [])))
    return SHARED[0]


def pipeline_of(full):
    """The run's framework_config input_pipeline (the engine's env event), or None."""
    for e in full["env"]:
        if "framework_config" in e["env"]:
            return json.loads(e["env"]["framework_config"]).get("input_pipeline")
    return None


def losses_by(d, exp, key):
    """{key(spec): {(rank, step): loss}} of every run of a succeeded experiment; a
    converted format's run read it through tf.data (its env says)."""
    out = {}
    for run in exp["runs"]:
        full = d.get(f"/v1/runs/{run['id']}")
        fmt = full["spec"]["dataset"]["format"]
        pipe = pipeline_of(full)
        check((pipe is None) == (fmt == "native"), (fmt, pipe))
        check(pipe is None or (pipe["reader"] == "tf.data" and pipe["format"] == fmt
                               and pipe["order"] == "ddpbench"), pipe)
        out[key(full["spec"])] = {(r["rank"], r["step"]): r["loss"]
                                  for r in d.step_rows(run["id"])}
    return out


def test_tensorflow_takes_ddpbench_samples():
    c = cifar()
    # files-png holds the binaries' bytes: the same batches as native, so the same losses
    for extra in ({"world_size": 2}, {"world_size": 2, "strategy": "mirrored"}):
        spec = dict(BASE, **extra, dataset=c.data(format="native"),
                    sweep={"dataset.format": ["native", "files-png"]})
        exp = c.d.run_succeeds(spec, timeout=600, runs=2)
        got = losses_by(c.d, exp, lambda s: s["dataset"]["format"])
        ranks = 1 if extra.get("strategy") == "mirrored" else extra["world_size"]
        check(len(got["native"]) == BASE["steps"] * ranks, (extra, got["native"]))
        check(got["files-png"] == got["native"], (extra, got))
    # files-jpeg: the pipeline's parallelism and prefetch change nothing, augmented too
    spec = dict(BASE, world_size=2, dataset=c.data(format="files-jpeg", augment=True),
                sweep={"zip": [{"dataset.workers": 1, "prefetch": 1},
                                   {"dataset.workers": 2, "prefetch": 3}]})
    exp = c.d.run_succeeds(spec, timeout=600, runs=2)
    got = losses_by(c.d, exp, lambda s: (s["dataset"]["workers"], s["prefetch"]))
    ref = got[(1, 1)]
    check(len(ref) == 2 * BASE["steps"] and all(v > 0 for v in ref.values()), ref)
    for key, v in got.items():
        check(v == ref, (key, v, ref))


def test_pipeline_batches_are_ddpbench_batches():
    """In this process (the venv's TensorFlow): ddpb_tf_data's batch of rank r in epoch e
    is, on files-png, the C loader's fill of the samples rank_order gives (crop, flip and
    normalization as worker/data/images.c), to the bit; on files-jpeg its labels are."""
    code = r"""
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import ddpb_data, ddpb_tf_data
root = sys.argv[2]
for fmt in ("files-png", "files-jpeg"):
    spec = {"seed": 5, "prefetch": 2, "dataset": {"name": "cifar10", "path": root,
            "format": fmt, "workers": 2, "augment": True}}
    tfd = ddpb_tf_data.open_data(spec)
    nat = ddpb_data.Data(dict(spec, dataset=dict(spec["dataset"], format="native",
                                                  augment=False)))
    mean, std = (np.array(v, np.float32).reshape(1, 3, 1, 1)
                 for v in ddpb_data.NORMS["cifar10"])
    u8 = np.rint((nat.train[0] * std + mean) * 255).astype(np.uint8)
    lut = ddpb_data.norm_lut("cifar10", 3)
    for world, rank, epoch in ((1, 0, 0), (2, 1, 2)):
        idx = ddpb_data.rank_order(5, epoch, nat.n, rank, world)
        got = 0
        for b, (x, y) in enumerate(tfd.batches(epoch, world, rank, 16, seed=5)):
            sel = idx[b * 16:(b + 1) * 16]
            assert (y.numpy() == nat.train[1][sel]).all(), (fmt, b)
            got += len(sel)
            if fmt != "files-png":
                continue
            for k, i in enumerate(sel):
                im = ddpb_data.augment_image(u8[i], *ddpb_data.augment_draw(5, epoch, i))
                ref = np.stack([lut[ch][im[ch]] for ch in range(3)]).transpose(1, 2, 0)
                assert (x.numpy()[k] == ref).all(), (fmt, b, k)
        assert got == len(idx) // 16 * 16, (got, len(idx))
print("batches equal")
"""
    c = cifar()
    r = subprocess.run([VENV_PY, "-c", code, ENGINES, c.root], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    check(r.returncode == 0 and "batches equal" in r.stdout, (r.stdout, r.stderr[-3000:]))


def test_loader_only_tensorflow():
    c = cifar()
    spec = dict(BASE, loader_only=True, steps=12, world_size=2,
                dataset=c.data(format="files-jpeg"), sweep={"dataset.workers": [1, 2]})
    exp = c.d.run_succeeds(spec, timeout=600, runs=2)
    for run in exp["runs"]:
        rows = [r for r in c.d.step_rows(run["id"]) if not r["warmup"]]
        check(len(rows) == 2 * (spec["steps"] - BASE["warmup_steps"]), len(rows))
        for r in rows:
            check(r["loss"] == 0 and r["data_ms"] == r["step_ms"] and r["step_ms"] > 0, r)
            check(r["loader_cpu_ms"] is not None and r["loader_cpu_ms"] >= 0, r)
            check(r["forward_ms"] is None, r)
        check(sum(r["loader_cpu_ms"] for r in rows) > 0, rows)
    res = c.d.get(f"/v1/experiments/{exp['id']}/results")
    check(len(res["rows"]) == 2, res["rows"])
    for row in res["rows"]:
        check(row["throughput_mean"] > 0 and row["loader_cpu_ms"] > 0, row)
        check(row["data_fraction"] > 0.5 and row["input_bound"], row)


def test_engines_say_what_they_cannot_observe():
    """GET /v1/engines: the TensorFlow engines' data_not_observed names loader_cpu_ms (in
    training tf.data's threads are not the model's to tell apart) and read_bytes."""
    node = cifar().d.get("/v1/engines")["nodes"][0]
    rows = {r["name"]: r for r in node["engines"]}
    tf_row = rows["tensorflow"].get("data_not_observed", {})
    check("loader_only" in tf_row.get("loader_cpu_ms", "") and "read_bytes" in tf_row, tf_row)
    hvd = rows["horovod"].get("data_not_observed", {})
    check("framework keras" in hvd.get("loader_cpu_ms", ""), hvd)


def test_horovod_keras_files():
    c = cifar()
    spec = dict(BASE, engine="horovod", strategy="horovod", framework="keras",
                world_size=2, epochs=2, dataset=c.data(format="files-jpeg", workers=2,
                                                        augment=True))
    spec.pop("steps")
    exp = c.d.run_succeeds(spec, timeout=600)
    run = c.d.get(f"/v1/runs/{exp['runs'][0]['id']}")
    rows = c.d.step_rows(run["id"])
    per_epoch = 320 // 2 // 16  # floor(n / world) samples a rank, full batches
    check(len(rows) == 2 * 2 * per_epoch, len(rows))
    check(all(r["loss"] > 0 and r["data_ms"] is not None for r in rows), rows[:2])
    pipe = pipeline_of(run)
    check(pipe["reader"] == "tf.keras.utils.image_dataset_from_directory", pipe)
    epochs = [e for e in run["epochs"]]
    check(len(epochs) == 2 and all(e["samples"] == 2 * per_epoch * 16 for e in epochs),
          epochs)
    spec = dict(BASE, engine="horovod", strategy="horovod", framework="keras",
                world_size=2, loader_only=True, dataset=c.data(format="files-jpeg"))
    exp = c.d.run_succeeds(spec, timeout=600)
    rows = c.d.step_rows(exp["runs"][0]["id"])
    check(len(rows) == 2 * BASE["steps"], len(rows))
    check(all(r["loss"] == 0 and r["data_ms"] == r["step_ms"] for r in rows), rows[:2])


def tfrecord_available():
    r = subprocess.run([os.path.join(BUILD, "cli", "ddpbench"), "dataset", "convert", "--help"],
                       capture_output=True, text=True, timeout=30)
    return "tfrecord" in r.stdout + r.stderr


def test_tfrecord_tensorflow():
    if not tfrecord_available():
        raise Skip("this build's `ddpbench dataset convert` has no --to tfrecord (issue 34 "
                   "part B, branch tfrecord, not merged)")
    c = cifar()
    spec = dict(BASE, world_size=2, dataset=c.data(format="files-jpeg", workers=2),
                sweep={"dataset.format": ["files-jpeg", "tfrecord"]})
    exp = c.d.run_succeeds(spec, timeout=600, runs=2)
    got = losses_by(c.d, exp, lambda s: s["dataset"]["format"])
    check(len(got["tfrecord"]) == 2 * BASE["steps"], got)
    check(got["tfrecord"] == got["files-jpeg"], got)  # the records hold the files' bytes
    run = c.d.get(f"/v1/runs/{exp['runs'][1]['id']}")
    check(pipeline_of(run)["read"].startswith("pread"), pipeline_of(run))
    # a record whose data CRC is wrong fails the run naming the file and the record
    bad = os.path.join(c.root, "bad")
    shutil.copytree(os.path.join(c.root, "tfrecord"), os.path.join(bad, "tfrecord"))
    shard = os.path.join(bad, "tfrecord", "train-00000-of-00001.tfrecord")
    with open(shard + ".idx", encoding="ascii") as f:
        off, length = (int(v) for v in f.readlines()[5].split())
    with open(shard, "r+b") as f:
        f.seek(off + length - 1)  # the last byte of record 5's data CRC
        last = f.read(1)
        f.seek(off + length - 1)
        f.write(bytes([last[0] ^ 0xFF]))
    exp = c.d.run_experiment(dict(BASE, steps=30, dataset=dict(c.data(format="tfrecord"),
                                                                path=bad)), timeout=600)
    err = exp["runs"][0]["error"] or ""
    check(exp["status"] == "failed" and "bad data CRC" in err and "record 5" in err
          and "train-00000-of-00001.tfrecord" in err, (exp["status"], err))


def test_nfs_through_the_mount():
    if not os.path.exists(os.path.join(BUILD, "fs", "ddpbench-fs")):
        raise Skip("no ddpbench-fs in this build (issue 34 parts A1/A2, branches fs and "
                   "mount, not merged): storage nfs has no mount for engine tensorflow")
    c = cifar()
    spec = dict(BASE, steps=6, dataset=c.data(format="files-jpeg", storage="nfs"))
    for extra in ({}, {"engine": "horovod", "strategy": "horovod", "framework": "keras"}):
        exp = c.d.run_succeeds(dict(spec, **extra), timeout=600)
        rows = c.d.step_rows(exp["runs"][0]["id"])
        check(all(r["read_bytes"] is not None and r["read_bytes"] >= 0 for r in rows), rows)
        check(sum(r["read_bytes"] for r in rows) > 0, rows)


def main():
    try:
        return run_cases([test_pipeline_batches_are_ddpbench_batches,
                          test_tensorflow_takes_ddpbench_samples, test_loader_only_tensorflow,
                          test_engines_say_what_they_cannot_observe,
                          test_horovod_keras_files, test_tfrecord_tensorflow,
                          test_nfs_through_the_mount])
    finally:
        for c in SHARED:
            c.close()


if __name__ == "__main__":
    sys.exit(main())
