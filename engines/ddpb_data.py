"""ddpb_data: the spec's dataset for the framework engines, as numpy arrays, with the C
worker's sharding (worker/data/loader.h) so every engine trains on the same samples.

- fashion-mnist / mnist: idx files (gzipped or not, told by the magic bytes), the first
  dataset.samples of the training files; cifar10: the binary batches. Normalized with the
  same published mean/std as the C worker, read with the model shapes from
  schema/vocabulary.json (ddpb_vocab); NCHW float32, labels int64.
- synthetic: values uniform in [-1, 1), labels uniform, one fixed batch reused at every
  step unless dataset.fresh (Horovod's and tf_cnn_benchmarks' synthetic mode, as the C
  worker). Drawn with numpy from the spec's seed: the same distribution as the C worker's
  splitmix draws, not the same values (a synthetic run measures speed, not accuracy).
- Sharding: epoch e's order is data_permutation(seed, e, N), a port of the C function
  (splitmix64 keyed by (seed, epoch, N), Fisher-Yates with rejection sampling), so rank r
  of W takes exactly the samples the C worker's rank r takes: positions r, r+W, ... of the
  order, the last N mod W left out (LOADER_DROP), short last batches dropped. Evaluation
  splits the test set unevenly (LOADER_UNEVEN) and the engines sum counts across ranks.

Decision: numpy only, no framework import, so every adapter (torch, TF, Horovod,
DeepSpeed) reads data the same way and tests check this module without a framework."""
import errno
import gzip
import os
import stat
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddpb_vocab  # noqa: E402  (schema/vocabulary.json)

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
NORMS = ddpb_vocab.NORMS  # the C worker's published constants (common/vocab.c)
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist
# The model table's MNIST and CIFAR forms (a 10-class head): a synthetic run gives them
# dataset.classes; any other model trains at the ImageNet shape.
MODEL_SHAPES = {name: shape for name, shape in ddpb_vocab.MODELS.items() if shape[3] == 10}
IMAGENET_SHAPE = (3, 224, 224, 1000)


def _mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def rng_key(seed, a, b):
    """worker/data/dataset.c data_rng_key."""
    k = _mix((seed + GOLDEN) & MASK)
    k = _mix(k ^ ((a + GOLDEN) & MASK))
    return _mix(k ^ ((b + 2 * GOLDEN) & MASK))


def permutation(seed, epoch, n):
    """worker/data/dataset.c data_permutation: the epoch's order of range(n)."""
    perm = list(range(n))
    s = rng_key(seed, epoch, n)
    for i in range(n - 1, 0, -1):
        bound = i + 1
        threshold = ((1 << 64) - bound) % bound
        while True:
            s = (s + GOLDEN) & MASK
            r = _mix(s)
            if r >= threshold:
                break
        j = r % bound
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def train_shard(seed, epoch, n, world, rank, shuffle=True, start=0):
    """Rank's sample indices for the epoch (LOADER_DROP: floor(n / world) each). start:
    samples of the epoch's order already consumed (an elastic run resumed mid-epoch with
    another world: the ranks' shards interleave, so what a world consumed is a prefix of
    the order, and the rest is sharded over the new world the same way)."""
    order = permutation(seed, epoch, n) if shuffle else list(range(n))
    rest = order[start:]
    per = len(rest) // world
    return rest[rank:per * world:world]


def test_shard(n, world, rank):
    """LOADER_UNEVEN over the test split, in file order."""
    return list(range(rank, n, world))


# The most bytes a dataset file may inflate to (the C loader's cap, worker/data/data.h:
# DATA_FILE_MAX_BYTES is 2 GiB; the image formats here are MNIST's and CIFAR-10's, whose
# largest file is 47 MB): a small gzip that inflates past it is refused, not held.
GZ_MAX_BYTES = 256 << 20


def _allowed(path):
    """path resolved, when it lies beneath the daemon's --data-dir directories (the
    DDPB_DATA_DIRS the launcher gives, worker/data/guard.h), else None; no boundary without
    it. Missing and outside alike: no answer tells which files exist elsewhere."""
    dirs = [d for d in os.environ.get("DDPB_DATA_DIRS", "").split(":") if d]
    real = os.path.realpath(path)
    if not dirs:
        return path
    for d in dirs + [FASHION_MNIST_DIR]:  # no user's choice: always allowed
        if real == d or real.startswith(d.rstrip("/") + "/"):
            return real
    return None


def _open_regular(path):
    """A file object for the regular file at path, opened without following a final
    symlink or blocking on a FIFO; None when missing or not allowed."""
    real = _allowed(path)
    if real is None:
        return None
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, PermissionError, NotADirectoryError):
        return None
    except OSError as ex:  # ELOOP: a symlink
        if ex.errno == errno.ELOOP:
            return None
        raise
    f = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        f.close()
        raise ValueError(f"dataset.path: {path}: not a regular file")
    return f


def _gunzip_capped(f, path, cap=GZ_MAX_BYTES):
    """f's gzip stream inflated, streaming, refusing past cap bytes (a gzip bomb)."""
    out = bytearray()
    with gzip.GzipFile(fileobj=f) as g:
        while True:
            chunk = g.read(1 << 20)
            if not chunk:
                return bytes(out)
            out += chunk
            if len(out) > cap:
                raise ValueError(f"dataset.path: {path}: more than {cap} bytes after "
                                 f"decompression")


def _read_maybe_gz(path):
    for p in (path, path + ".gz"):
        f = _open_regular(p)
        if f is None:
            continue
        with f:
            if f.peek(2)[:2] == b"\x1f\x8b":
                return _gunzip_capped(f, p)
            return f.read()
    raise FileNotFoundError(f"dataset.path: {path} (or {path}.gz): not found or not allowed")


def _idx(path, want_dims):
    raw = _read_maybe_gz(path)
    magic, = struct.unpack(">I", raw[:4])
    dims = magic & 0xFF
    if magic >> 8 != 0x08 or dims != want_dims:
        raise ValueError(f"{path}: not an idx{want_dims}-ubyte file (magic {magic:#x})")
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"{path}: {data.size} bytes of data, header says {shape}")
    return data.reshape(shape)


def _normalize(u8, name):
    mean, std = NORMS[name]
    x = u8.astype(np.float32) / 255.0
    c = x.shape[1]
    return ((x - np.array(mean, np.float32).reshape(1, c, 1, 1)) /
            np.array(std, np.float32).reshape(1, c, 1, 1)).astype(np.float32)


def _open_idx(directory, name, split):
    prefix = "train" if split == "train" else "t10k"
    x = _idx(os.path.join(directory, f"{prefix}-images-idx3-ubyte"), 3)
    y = _idx(os.path.join(directory, f"{prefix}-labels-idx1-ubyte"), 1)
    return _normalize(x[:, None, :, :], name), y.astype(np.int64)


def _open_cifar(directory, split):
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] if split == "train" else \
        ["test_batch.bin"]
    recs = np.concatenate([np.frombuffer(_read_maybe_gz(os.path.join(directory, n)),
                                         dtype=np.uint8).reshape(-1, 3073) for n in names])
    return _normalize(recs[:, 1:].reshape(-1, 3, 32, 32), "cifar10"), \
        recs[:, 0].astype(np.int64)


class Data:
    """The spec's train (and test, when the dataset has one) split as arrays."""

    def __init__(self, spec):
        ds = spec.get("dataset", {})
        self.name = ds.get("name", "synthetic")
        self.seed = int(spec.get("seed", 1))
        self.fresh = bool(ds.get("fresh", False))
        self.augment = bool(ds.get("augment", False))
        self.test = None
        if self.name == "synthetic":
            c, h, w, classes = self.shape_for(spec)
            self.n = int(ds.get("samples") or 50000)
            self.shape, self.classes = (c, h, w), classes
            self.train = None
            return
        directory = ds.get("path") or (FASHION_MNIST_DIR if self.name == "fashion-mnist"
                                       else None)
        if not directory:
            raise ValueError(f"dataset.path: dataset {self.name!r} needs a path")
        opener = (lambda s: _open_cifar(directory, s)) if self.name == "cifar10" else \
            (lambda s: _open_idx(directory, self.name, s))
        self.train = opener("train")
        want = int(ds.get("samples") or 0)
        if want > len(self.train[1]):
            raise ValueError(f"dataset.samples: {want}, but the train split of {self.name} "
                             f"has {len(self.train[1])} samples")
        if want:
            self.train = (self.train[0][:want], self.train[1][:want])
        self.n = len(self.train[1])
        self.shape = tuple(self.train[0].shape[1:])
        self.classes = 10
        if spec.get("eval", True):
            try:
                self.test = opener("test")
            except FileNotFoundError:
                self.test = None

    @staticmethod
    def shape_for(spec):
        ds = spec.get("dataset", {})
        model = spec.get("model", "mnist-cnn")
        c, h, w, classes = MODEL_SHAPES.get(model, IMAGENET_SHAPE)
        if ds.get("shape"):
            c, h, w = ds["shape"]
            classes = int(ds.get("classes", 10))
        elif ds.get("name", "synthetic") == "synthetic":
            classes = int(ds.get("classes", 10)) if model in MODEL_SHAPES else classes
        return c, h, w, classes

    def batches(self, epoch, world, rank, batch, seed=None, start=0):
        """This rank's (x, y) batches of the epoch: full batches only (drop_last_batch).
        seed: the repeat's (spec seed + repeat), as the C worker's; start: samples of the
        epoch consumed before (train_shard)."""
        seed = self.seed if seed is None else seed
        if self.name == "synthetic":
            yield from self._synthetic(seed, world, rank, batch, start)
            return
        idx = train_shard(seed, epoch, self.n, world, rank, start=start)
        rng = np.random.default_rng([seed, epoch, rank])
        for b in range(len(idx) // batch):
            sel = np.asarray(idx[b * batch:(b + 1) * batch])
            x = self.train[0][sel]
            if self.augment:
                x = self._augment(x, rng)
            yield x, self.train[1][sel]

    def _synthetic(self, seed, world, rank, batch, start=0):
        per = (self.n - start) // world
        steps = per // batch
        rng = np.random.default_rng([seed, rank])
        fixed = None
        for s in range(steps):
            if fixed is None or self.fresh:
                x = rng.uniform(-1, 1, (batch,) + self.shape).astype(np.float32)
                y = rng.integers(0, self.classes, batch).astype(np.int64)
                fixed = (x, y)
            yield fixed

    @staticmethod
    def _augment(x, rng):
        """Random crop with padding 4 and horizontal flip (the C worker's CIFAR recipe)."""
        n, c, h, w = x.shape
        padded = np.pad(x, ((0, 0), (0, 0), (4, 4), (4, 4)))
        out = np.empty_like(x)
        for i in range(n):
            dy, dx = rng.integers(0, 9, 2)
            img = padded[i, :, dy:dy + h, dx:dx + w]
            out[i] = img[:, :, ::-1] if rng.random() < 0.5 else img
        return out

    def test_batches(self, world, rank, batch):
        if self.test is None:
            return
        idx = test_shard(len(self.test[1]), world, rank)
        for b in range(0, len(idx), batch):
            sel = np.asarray(idx[b:b + batch])
            yield self.test[0][sel], self.test[1][sel]

    def steps_per_epoch(self, world, batch, start=0):
        """Batches each rank takes in an epoch (from sample `start` of its order)."""
        return ((self.n - start) // world) // batch


class Replicas:
    """world replicas of one process (a single-process strategy: torch's DataParallel) seen
    as one rank of a world of 1: each batch is the replicas' batches of data (shard r of
    world for replica r, ddpbench's order) stacked along the batch axis, replica 0 first,
    which DataParallel scatters back in equal parts; so replica r trains on what rank r of
    a process per rank would. The test split: every shard's batches in turn (each sample
    once, whatever the shards' lengths)."""

    def __init__(self, data, world):
        self.data, self.world = data, world
        self.shape, self.classes, self.test = data.shape, data.classes, data.test

    def batches(self, epoch, world, rank, batch, seed=None, start=0):
        its = [self.data.batches(epoch, self.world, r, batch, seed=seed, start=start)
               for r in range(self.world)]
        for parts in zip(*its):
            yield (np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts]))

    def test_batches(self, world, rank, batch):
        for r in range(self.world):
            yield from self.data.test_batches(self.world, r, batch)

    def steps_per_epoch(self, world, batch, start=0):
        return self.data.steps_per_epoch(self.world, batch, start)
