#!/usr/bin/env python3
"""TensorFlow's TFRecord (issue 34) against the real programs and TensorFlow itself (.venv's,
deploy/setup-venv.sh), on the small CIFAR-10 set test_data_pipeline.py makes:
- `ddpbench dataset convert --to tfrecord` writes <split>-00000-of-00001.tfrecord and its
  .idx ("offset length" lines tiling the shard), no temporary file; `verify --against
  files-jpeg` finds every sample equal;
- TensorFlow (tf.data.TFRecordDataset + tf.io.parse_single_example) reads those shards: the
  labels in the source's order and each image/encoded exactly the files-jpeg file's bytes,
  with height, width, channels and format;
- shards written by tf.io.TFRecordWriter (two shards, no .idx, Examples with the contract's
  features) are read by ddpbench's C loader (`ddpbench dataset verify`) equal to files-jpeg;
- a REST run of engine ddpbench trains on dataset.format tfrecord with the same losses as
  files-jpeg (the same JPEG bytes) and runs loader_only on it; a corrupt shard fails the run
  naming the file, the record and the field: a byte flipped in every record but the first
  (met in a fill, while training), an Example without image/class/label (met at open)."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from harness import BUILD, SOURCE, Daemon, check, run_cases
from test_data_pipeline import BASE, convert, data, write_cifar

CLI = os.path.join(BUILD, "cli", "ddpbench")
TMP = tempfile.mkdtemp(prefix="ddpb-tfrecord-")
ROOT = os.path.join(TMP, "cifar")  # beneath it: native, files-jpeg, tfrecord


def venv_python():
    py = os.path.join(SOURCE, ".venv", "bin", "python")
    check(os.path.exists(py), f"{py}: TensorFlow's venv (deploy/setup-venv.sh) is missing")
    return py


def tensorflow(code, *args):
    """Runs code under .venv's Python with TensorFlow imported as tf; returns its stdout."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    r = subprocess.run([venv_python(), "-c", "import sys, json\nimport tensorflow as tf\n" + code,
                        *args], capture_output=True, text=True, timeout=300, env=env)
    check(r.returncode == 0, f"tensorflow: exit {r.returncode}\n{r.stderr[-3000:]}")
    return r.stdout


def ddpbench(*args):
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=300)


def manifest(root, split):
    """files-jpeg's [(bytes, label)] in the samples' order."""
    out = []
    with open(os.path.join(root, "files-jpeg", f"{split}.txt")) as f:
        for line in f.read().splitlines():
            rel, label = line.split()
            with open(os.path.join(root, "files-jpeg", rel), "rb") as img:
                out.append((img.read(), int(label)))
    return out


def setup_module():
    write_cifar(ROOT)
    convert(ROOT, "files-jpeg")
    r = ddpbench("dataset", "convert", "--name", "cifar10", "--path", ROOT, "--to", "tfrecord",
                 "--shard-mb", "4")
    check(r.returncode == 0, (r.returncode, r.stdout, r.stderr))
    check("train: 320 samples" in r.stdout and "test: 64 samples" in r.stdout, r.stdout)


def test_convert_layout_and_verify():
    out = os.path.join(ROOT, "tfrecord")
    names = sorted(os.listdir(out))
    check(names == ["test-00000-of-00001.tfrecord", "test-00000-of-00001.tfrecord.idx",
                    "train-00000-of-00001.tfrecord", "train-00000-of-00001.tfrecord.idx"], names)
    for split, n in (("train", 320), ("test", 64)):
        shard = os.path.join(out, f"{split}-00000-of-00001.tfrecord")
        with open(shard + ".idx") as f:
            lines = [tuple(map(int, ln.split())) for ln in f.read().splitlines()]
        check(len(lines) == n, len(lines))
        at = 0
        with open(shard, "rb") as f:
            blob = f.read()
        for off, length in lines:
            check(off == at, (off, at))
            check(int.from_bytes(blob[off:off + 8], "little") + 16 == length, (off, length))
            at = off + length
        check(at == len(blob), (at, len(blob)))
    r = ddpbench("dataset", "verify", "--name", "cifar10", "--path", ROOT, "--format", "tfrecord",
                 "--against", "files-jpeg")
    check(r.returncode == 0 and "0 differ from files-jpeg" in r.stdout, (r.stdout, r.stderr))


READ = """
out = []
for path in sys.argv[1:]:
    for rec in tf.data.TFRecordDataset([path]):
        ex = tf.io.parse_single_example(rec, {
            "image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64),
            "image/height": tf.io.FixedLenFeature([], tf.int64),
            "image/width": tf.io.FixedLenFeature([], tf.int64),
            "image/channels": tf.io.FixedLenFeature([], tf.int64),
            "image/format": tf.io.FixedLenFeature([], tf.string)})
        img = tf.io.decode_jpeg(ex["image/encoded"])
        out.append([ex["image/encoded"].numpy().hex(), int(ex["image/class/label"]),
                    int(ex["image/height"]), int(ex["image/width"]), int(ex["image/channels"]),
                    ex["image/format"].numpy().decode(), list(img.shape)])
print(json.dumps(out))
"""


def test_tensorflow_reads_ddpbench_shards():
    for split in ("train", "test"):
        shard = os.path.join(ROOT, "tfrecord", f"{split}-00000-of-00001.tfrecord")
        got = json.loads(tensorflow(READ, shard))
        want = manifest(ROOT, split)
        check(len(got) == len(want), (len(got), len(want)))
        for i, ((enc, label, h, w, c, fmt, shape), (jpg, wl)) in enumerate(zip(got, want)):
            check(bytes.fromhex(enc) == jpg, f"{split} record {i}: image/encoded differs")
            check(label == wl, (split, i, label, wl))
            check((h, w, c, fmt, shape) == (32, 32, 3, "JPEG", [32, 32, 3]), (h, w, c, fmt, shape))


WRITE = """
root, split, shards, drop = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
items = [ln.split() for ln in open(f"{root}/files-jpeg/{split}.txt").read().splitlines()]
per = -(-len(items) // shards)
for s in range(shards):
    name = f"{root}/tfrecord/{split}-{s:05d}-of-{shards:05d}.tfrecord"
    with tf.io.TFRecordWriter(name) as w:
        for rel, label in items[s * per:(s + 1) * per]:
            jpg = open(f"{root}/files-jpeg/{rel}", "rb").read()
            b = lambda v: tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))
            i = lambda v: tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))
            f = {"image/encoded": b(jpg), "image/class/label": i(int(label)),
                 "image/height": i(32), "image/width": i(32), "image/channels": i(3),
                 "image/format": b(b"JPEG")}
            f.pop(drop, None)
            w.write(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())
"""


def tf_written(name, drop="", shards=2):
    """A dataset root holding files-jpeg (a copy of ROOT's) and tfrecord shards that
    TensorFlow wrote from those files, without .idx files."""
    root = os.path.join(TMP, name)
    shutil.copytree(os.path.join(ROOT, "files-jpeg"), os.path.join(root, "files-jpeg"))
    os.makedirs(os.path.join(root, "tfrecord"))
    for split in ("train", "test"):
        tensorflow(WRITE, root, split, str(shards), drop)
    return root


def test_ddpbench_reads_tensorflow_shards():
    root = tf_written("tf-written")
    check(not any(n.endswith(".idx") for n in os.listdir(os.path.join(root, "tfrecord"))), "idx")
    r = ddpbench("dataset", "verify", "--name", "cifar10", "--path", root, "--format", "tfrecord",
                 "--against", "files-jpeg")
    check(r.returncode == 0 and "0 differ from files-jpeg" in r.stdout, (r.stdout, r.stderr))
    check("have no .idx" in r.stderr and "scanned" in r.stderr, r.stderr)


def flip_every_record(shard):
    """A byte of every record's data flipped (the offsets from its .idx) but the first's,
    which the open reads for the shape: the run fails in a fill, while training."""
    with open(shard + ".idx") as f:
        offsets = [int(ln.split()[0]) for ln in f.read().splitlines()][1:]
    with open(shard, "r+b") as f:
        for off in offsets:
            f.seek(off + 20)
            b = f.read(1)
            f.seek(off + 20)
            f.write(bytes([b[0] ^ 0x55]))


def test_rest_training_and_corrupt_shards():
    bad_crc = os.path.join(TMP, "bad-crc")
    shutil.copytree(ROOT, bad_crc)
    flip_every_record(os.path.join(bad_crc, "tfrecord", "train-00000-of-00001.tfrecord"))
    no_label = tf_written("no-label", drop="image/class/label", shards=1)
    d = Daemon(cpu_slots=2, extra_args=["--data-dir", TMP])
    try:
        spec = dict(BASE, dataset=data(ROOT, format="tfrecord"),
                    sweep={"dataset.format": ["files-jpeg", "tfrecord"],
                           "loader_only": [False, True]})
        exp = d.run_succeeds(spec, timeout=300, runs=4)
        losses = {}
        for run in exp["runs"]:
            full = d.get(f"/v1/runs/{run['id']}")
            rows = [r for r in d.step_rows(run["id"]) if not r["warmup"]]
            check(len(rows) == BASE["steps"] - BASE["warmup_steps"], len(rows))
            check(sum(r["read_bytes"] for r in rows) > 0, rows)
            if full["spec"]["loader_only"]:  # the loader alone: nothing trained
                check(all(r["forward_ms"] == 0 and r["loss"] == 0 for r in rows), rows)
            else:
                losses[full["spec"]["dataset"]["format"]] = [r["loss"] for r in rows]
        # the same JPEG bytes, the same decoder: the same batches and losses
        check(losses["tfrecord"] == losses["files-jpeg"], losses)
        for root, shard, why in (
                (bad_crc, "train-00000-of-00001.tfrecord", r"bad data CRC"),
                (no_label, "train-00000-of-00001.tfrecord",
                 r"feature image/class/label: missing")):
            exp = d.run_experiment(dict(BASE, steps=2, dataset=data(root, format="tfrecord")),
                                   timeout=120)
            check(exp["status"] == "failed", exp["status"])
            err = exp["runs"][0]["error"] or ""
            check(re.search(re.escape(shard) + r": record \d+ \(offset \d+\): " + why, err), err)
            print(f"# {os.path.basename(root)}: {err}")
    finally:
        d.close()


if __name__ == "__main__":
    try:
        setup_module()
        rc = run_cases([test_convert_layout_and_verify, test_tensorflow_reads_ddpbench_shards,
                        test_ddpbench_reads_tensorflow_shards,
                        test_rest_training_and_corrupt_shards])
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(rc)
