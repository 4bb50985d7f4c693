#!/usr/bin/env python3
"""`ddpbench dataset convert` and `verify` against the real programs (the CLI execs
ddpbench-data), on a small CIFAR-10 binary set the test writes:
- records-zstd into the dataset's folder: what it prints (samples and bytes per split), the
  shards and the index (magic, counts, the trailing CRC-32), no temporary files left;
  verify then reads every sample back equal to the native set;
- files-png into another root (--out): the manifest's lines and labels in the source's
  order, one PNG per sample;
- bad command lines exit 2 naming the mistake before anything is written, a missing source
  exits 1 naming the file;
- ddpbench finds ddpbench-data beside itself or on PATH, and says so clearly (exit 1) when
  neither has it."""
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

from harness import BUILD, check, run_cases

CLI = os.path.join(BUILD, "cli", "ddpbench")
DATA = os.path.join(BUILD, "worker", "ddpbench-data")
TMP = tempfile.mkdtemp(prefix="ddpb-convert-")
SRC = os.path.join(TMP, "cifar-10-batches-bin")
PER_BATCH, TEST = 8, 6


def label_of(i):
    return i * 7 % 10


def write_cifar():
    os.makedirs(SRC)
    rnd = random.Random(5)

    def batch(name, first, n):
        with open(os.path.join(SRC, name), "wb") as f:
            for i in range(first, first + n):
                f.write(bytes([label_of(i)]) + bytes(rnd.getrandbits(8) for _ in range(3072)))

    for b in range(5):
        batch(f"data_batch_{b + 1}.bin", b * PER_BATCH, PER_BATCH)
    batch("test_batch.bin", 1000, TEST)


def ddpbench(*args, env=None):
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=120, env=env)


def ok(r, what):
    check(r.returncode == 0, f"{what}: exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}")
    return r


def test_convert_records_zstd():
    r = ok(ddpbench("dataset", "convert", "--name", "cifar10", "--path", SRC, "--to",
                    "records-zstd", "--level", "3"), "convert")
    out = os.path.join(SRC, "records-zstd")
    check(f"wrote {out}" in r.stdout, r.stdout)
    check(f"train: {5 * PER_BATCH} samples" in r.stdout, r.stdout)
    check(f"test: {TEST} samples" in r.stdout, r.stdout)
    names = sorted(os.listdir(out))
    check(names == ["test-00000.rec", "test.index", "train-00000.rec", "train.index"], names)
    with open(os.path.join(out, "train.index"), "rb") as f:
        idx = f.read()
    check(idx[:8] == b"DDPBRIX1", idx[:8])
    version, c, h, w, classes, comp, samples, shards = struct.unpack_from("<6IQI", idx, 8)
    check((version, c, h, w, classes, comp, samples, shards) == (1, 3, 32, 32, 10, 2, 40, 1),
          (version, c, h, w, classes, comp, samples, shards))
    check(len(idx) == 48 + 24 * samples + 4, len(idx))
    check(struct.unpack_from("<I", idx, len(idx) - 4)[0] == zlib.crc32(idx[:-4]), "index CRC")
    labels = [struct.unpack_from("<i", idx, 48 + 24 * i + 16)[0] for i in range(samples)]
    check(labels == [label_of(i) for i in range(samples)], labels)
    r = ok(ddpbench("dataset", "verify", "--name", "cifar10", "--path", SRC, "--format",
                    "records-zstd", "--against", "native"), "verify")
    check("0 differ from native" in r.stdout, r.stdout)


def test_convert_png_other_root():
    root = os.path.join(TMP, "elsewhere")
    ok(ddpbench("dataset", "convert", "--name", "cifar10", "--path", SRC, "--to", "files-png",
                "--out", root), "convert")
    out = os.path.join(root, "files-png")
    with open(os.path.join(out, "test.txt")) as f:
        lines = [ln.split() for ln in f.read().splitlines()]
    check(len(lines) == TEST, lines)
    check([int(l[1]) for l in lines] == [label_of(1000 + i) for i in range(TEST)], lines)
    for rel, _ in lines:
        with open(os.path.join(out, rel), "rb") as f:
            check(f.read(8) == b"\x89PNG\r\n\x1a\n", rel)
    check(not os.path.exists(os.path.join(SRC, "files-png")), "wrote into --path, not --out")


def test_bad_args():
    bad = [
        (["dataset"], "subcommand"),
        (["dataset", "frob"], "unknown command"),
        (["dataset", "convert", "--name", "cifar10", "--path", SRC, "--to", "records-lz4"],
         "records-lz4"),
        (["dataset", "convert", "--name", "cifar10", "--to", "records"], "--path"),
        (["dataset", "convert", "--name", "imagenet", "--path", SRC, "--to", "records"],
         "imagenet"),
        (["dataset", "convert", "--name", "cifar10", "--path", SRC, "--to", "records",
          "--level", "3"], "--level"),
        (["dataset", "convert", "--name", "cifar10", "--path", SRC, "--to", "records-zlib",
          "--level", "12"], "zlib"),
        (["dataset", "convert", "--name", "cifar10", "--path", SRC, "--to", "records",
          "--shard-mb", "0"], "--shard-mb"),
        (["dataset", "convert", "--name", "cifar10", "--path", SRC, "--to", "records",
          "--bogus"], "--bogus"),
    ]
    for args, word in bad:
        r = ddpbench(*args)
        check(r.returncode == 2, (args, r.returncode, r.stderr))
        check(word in r.stderr, (args, r.stderr))
    check(not os.path.exists(os.path.join(SRC, "records")), "a bad command line wrote files")
    r = ddpbench("dataset", "convert", "--name", "cifar10", "--path",
                 os.path.join(TMP, "missing"), "--to", "records")
    check(r.returncode == 1, (r.returncode, r.stderr))
    check("data_batch_1.bin" in r.stderr, r.stderr)
    r = ok(ddpbench("dataset", "--help"), "help")
    check("ddpbench-data convert" in r.stdout, r.stdout)


def test_program_lookup():
    lone = os.path.join(TMP, "bin")
    os.makedirs(lone)
    cli = shutil.copy(CLI, lone)
    args = [cli, "dataset", "convert", "--name", "cifar10", "--path", SRC, "--to", "records",
            "--out", os.path.join(TMP, "via-path")]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120,
                       env={"PATH": os.path.dirname(DATA)})
    ok(r, "ddpbench-data on PATH")
    check(os.path.exists(os.path.join(TMP, "via-path", "records", "train.index")), r.stdout)
    r = subprocess.run(args, capture_output=True, text=True, timeout=120,
                       env={"PATH": "/nonexistent"})
    check(r.returncode == 1, (r.returncode, r.stderr))
    check("ddpbench-data not found" in r.stderr, r.stderr)


if __name__ == "__main__":
    write_cifar()
    try:
        rc = run_cases([test_convert_records_zstd, test_convert_png_other_root, test_bad_args,
                        test_program_lookup])
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(rc)
