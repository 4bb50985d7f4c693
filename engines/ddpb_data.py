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
import json
import os
import re
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


def _below(s, bound):
    """worker/data/data.c data_rng_below: (the next state, a draw uniform in [0, bound))."""
    threshold = ((1 << 64) - bound) % bound
    while True:
        s = (s + GOLDEN) & MASK
        r = _mix(s)
        if r >= threshold:
            return s, r % bound


def permutation(seed, epoch, n):
    """worker/data/dataset.c data_permutation: the epoch's order of range(n)."""
    perm = list(range(n))
    s = rng_key(seed, epoch, n)
    for i in range(n - 1, 0, -1):
        s, j = _below(s, i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


AUGMENT_DOMAIN = 0x4155474D454E54  # worker/data/images.c DATA_AUGMENT_DOMAIN
AUGMENT_PAD = 4  # the C worker's CIFAR recipe (worker/data/dataset.c data_open_opts)


def augment_draw(seed, epoch, index, pad=AUGMENT_PAD, flip=True):
    """worker/data/images.c data_augment_draw: sample index's (dy, dx, flip) in epoch, keyed
    by (seed, epoch, index) alone, so any loader (any worker, any order) draws what the C
    loader draws for that sample."""
    s = rng_key((seed & MASK) ^ AUGMENT_DOMAIN, epoch, index)
    dy = dx = 0
    if pad > 0:
        s, dy = _below(s, 2 * pad + 1)
        s, dx = _below(s, 2 * pad + 1)
    flipped = False
    if flip:
        s = (s + GOLDEN) & MASK
        flipped = bool(_mix(s) >> 63)
    return dy, dx, flipped


def augment_image(u8, dy, dx, flip, pad=AUGMENT_PAD):
    """worker/data/images.c data_images_transform's geometry on one [c][h][w] uint8 image:
    the crop at (dy, dx) of the image padded by pad zero bytes (which normalize to the
    normalized 0, as the C LUT's lut[0]), then the horizontal flip."""
    c, h, w = u8.shape
    padded = np.zeros((c, h + 2 * pad, w + 2 * pad), np.uint8)
    padded[:, pad:pad + h, pad:pad + w] = u8
    out = padded[:, dy:dy + h, dx:dx + w]
    return out[:, :, ::-1] if flip else out


def norm_lut(name, c):
    """[c][256] float32: byte value to normalized input, as worker/data/images.c's LUT
    (v / 255, minus the mean, over the std, in float32); no norm for the dataset: v / 255."""
    v = np.arange(256, dtype=np.float32) / np.float32(255.0)
    if name not in NORMS:
        return np.tile(v, (c, 1))
    mean, std = NORMS[name]
    return np.stack([(v - np.float32(mean[k])) / np.float32(std[k]) for k in range(c)])


def train_shard(seed, epoch, n, world, rank, shuffle=True, start=0):
    """Rank's sample indices for the epoch (LOADER_DROP: floor(n / world) each). start:
    samples of the epoch's order already consumed (an elastic run resumed mid-epoch with
    another world: the ranks' shards interleave, so what a world consumed is a prefix of
    the order, and the rest is sharded over the new world the same way)."""
    order = permutation(seed, epoch, n) if shuffle else list(range(n))
    rest = order[start:]
    per = len(rest) // world
    return rest[rank:per * world:world]


def rank_order(seed, epoch, n, rank, world, start=0):
    """The sample indices rank takes in epoch, in the order it takes them: ddpbench's
    permutation sharded LOADER_DROP (train_shard, start as there), for a framework
    loader's sampler."""
    return train_shard(seed, epoch, n, world, rank, start=start)


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


# --- the converted formats on disk, for the framework loaders (issue 34) ---------------------

# The image files the C loader's class-folder scan counts (worker/data/files.c).
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
STORAGE_STATS = ".ddpbench-fs-stats"  # the ddpbench-fs mount's virtual stats file


def data_dir(spec):
    """The dataset's directory as this rank reads it: DDPB_STORAGE_MOUNT (the daemon's
    per-rank ddpbench-fs mount of that directory) when set, else dataset.path, else the
    dataset's default location (Debian's Fashion-MNIST)."""
    mount = os.environ.get("DDPB_STORAGE_MOUNT")
    if mount:
        return mount
    ds = spec.get("dataset", {})
    name = ds.get("name", "synthetic")
    directory = ds.get("path") or (FASHION_MNIST_DIR if name == "fashion-mnist" else None)
    if not directory:
        raise ValueError(f"dataset.path: dataset {name!r} needs a path")
    return directory


def _manifest_rel(rel, where):
    """A manifest path as the C reader allows it: relative, no "..", no control bytes."""
    if not rel or rel.startswith("/"):
        raise ValueError(f"dataset: {where}: path must be relative and non-empty")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in rel):
        raise ValueError(f"dataset: {where}: control character in the path")
    if ".." in rel.split("/"):
        raise ValueError(f"dataset: {where}: \"..\" in the path (paths stay under the "
                         f"dataset folder)")
    return rel


def _read_manifest(base, mpath):
    """[(path, label)] from a "relative/path label" manifest (split at the last blank)."""
    out = []
    with open(mpath, encoding="utf-8", newline="\n") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n").rstrip("\r")
            where = f"{mpath}: line {lineno}"
            cut = max(line.rfind(" "), line.rfind("\t"))
            label = line[cut + 1:]
            if cut < 1 or line[cut - 1] in " \t" or not label.isdigit() or len(label) > 9:
                raise ValueError(f"dataset: {where}: expected \"relative/path label\"")
            out.append((os.path.join(base, _manifest_rel(line[:cut], where)), int(label)))
    if not out:
        raise ValueError(f"dataset: {mpath}: no samples listed")
    return out


def _scan_classes(base, split):
    """[(path, label)] from <base>/<split>/<class>/ folders: labels by sorted folder name,
    files by sorted name (byte order, as ImageFolder and worker/data/files.c sort)."""
    root = os.path.join(base, split)
    if not os.path.isdir(root):
        raise FileNotFoundError(f"dataset: {base}: neither a manifest {split}.txt nor a "
                                f"folder {split}/")
    classes = [c for c in sorted(os.listdir(root)) if os.path.isdir(os.path.join(root, c))]
    if not classes:
        raise ValueError(f"dataset: {root}: no class folders")
    out = []
    for label, c in enumerate(classes):
        cdir = os.path.join(root, c)
        files = [os.path.join(cdir, f) for f in sorted(os.listdir(cdir))
                 if os.path.splitext(f)[1].lower() in IMAGE_SUFFIXES and f[0] != "."
                 and os.path.isfile(os.path.join(cdir, f))]
        if not files:
            raise ValueError(f"dataset: {cdir}: no .png, .jpg or .jpeg file in the class")
        out += [(p, label) for p in files]
    return out


def files_samples(root, fmt, split):
    """[(path, label)] of a files-* format's split in ddpbench's sample order: the
    manifest <root>/<fmt>/<split>.txt (paths relative to <root>/<fmt>) when there is one,
    else the class folders <root>/<fmt>/<split>/<class>/ as ImageFolder sorts them (the
    C reader's rule, worker/data/files.c). Sample i here is sample i of the C loader."""
    base = os.path.join(root, fmt)
    mpath = os.path.join(base, f"{split}.txt")
    if os.path.isfile(mpath):
        return _read_manifest(base, mpath)
    if not os.path.isdir(base):
        raise FileNotFoundError(f"dataset.format {fmt}: {base}: not found: convert it first "
                                f"(ddpbench dataset convert --path {root} --to {fmt})")
    return _scan_classes(base, split)


def tfrecord_shards(root, split):
    """[(shard, index)] of <root>/tfrecord/<split>-NNNNN-of-MMMMM.tfrecord, sorted (the
    records' order is the source's sample order, shards filled in turn), each with its
    "<shard>.idx" index ("offset length" per record)."""
    base = os.path.join(root, "tfrecord")
    if not os.path.isdir(base):
        raise FileNotFoundError(f"dataset.format tfrecord: {base}: not found: convert it "
                                f"first (ddpbench dataset convert --path {root} --to tfrecord)")
    pat = re.compile(re.escape(split) + r"-\d{5}-of-\d{5}\.tfrecord")
    shards = sorted(f for f in os.listdir(base) if pat.fullmatch(f))
    if not shards:
        raise FileNotFoundError(f"dataset.format tfrecord: no {split}-NNNNN-of-MMMMM.tfrecord "
                                f"in {base}")
    return [(os.path.join(base, f), os.path.join(base, f + ".idx")) for f in shards]


def tfrecord_index(root, split):
    """[(shard path, offset, framed length, record number in the shard)] of a tfrecord
    split, in sample order, from the shards' .idx files ("offset length" per record)."""
    out = []
    for shard, idx in tfrecord_shards(root, split):
        with open(idx, encoding="ascii") as f:
            for lineno, line in enumerate(f, 1):
                parts = line.split()
                if len(parts) != 2 or not all(p.isdigit() for p in parts):
                    raise ValueError(f"dataset: {idx}: line {lineno}: expected "
                                     f"\"offset length\"")
                out.append((shard, int(parts[0]), int(parts[1]), lineno - 1))
    return out


def _masked_crc(data):
    """TFRecord's masked CRC-32C of data, as its 4 little-endian bytes (the `crc32c`
    package, the `tfrecord` package's dependency: deploy/setup-venv.sh)."""
    import crc32c
    crc = crc32c.crc32c(data)
    return struct.pack("<I", ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8)
                       & 0xFFFFFFFF)


def tfrecord_record(fd, entry):
    """The tf.train.Example bytes of one tfrecord_index entry, read from fd (its shard,
    open) with one pread of the framed record, checked as TensorFlow's reader checks it
    (the length, both masked CRC-32Cs); ValueError naming file, record and offset."""
    shard, off, length, k = entry
    where = f"{shard}: record {k} (offset {off})"
    buf = os.pread(fd, length, off)
    if length < 16 or len(buf) != length:
        raise ValueError(f"dataset: {where}: truncated ({len(buf)} of {length} bytes)")
    n, = struct.unpack("<Q", buf[:8])
    if n != length - 16:
        raise ValueError(f"dataset: {where}: length {n}, the index says {length - 16}")
    if buf[8:12] != _masked_crc(buf[:8]):
        raise ValueError(f"dataset: {where}: bad length CRC")
    data = buf[12:12 + n]
    if buf[12 + n:] != _masked_crc(data):
        raise ValueError(f"dataset: {where}: bad data CRC")
    return data


def mount_stats():
    """The ddpbench-fs mount's counters {"requests", "bytes", "wait_ns", "read_ns"} (its
    virtual DDPB_STORAGE_MOUNT/.ddpbench-fs-stats), or None with no mount or no file."""
    mount = os.environ.get("DDPB_STORAGE_MOUNT")
    if not mount:
        return None
    try:
        with open(os.path.join(mount, STORAGE_STATS), encoding="utf-8") as f:
            return json.loads(f.readline())
    except (OSError, ValueError):
        return None


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
        fmt = ds.get("format", "native")
        if fmt != "native":  # a converted format is a framework loader's (ddpb_torch_data)
            raise ValueError(f"dataset.format: {fmt}: ddpb_data.Data holds the native files "
                             f"only; this engine has no reader for {fmt}")
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
        for b in range(len(idx) // batch):
            sel = np.asarray(idx[b * batch:(b + 1) * batch])
            x = self.train[0][sel]
            if self.augment:
                x = self._augment(x, sel, epoch, seed)
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

    def _augment(self, x, sel, epoch, seed):
        """The C worker's CIFAR recipe (worker/data/images.c): sample i's crop of the image
        padded by 4 zero bytes (normalized: the LUT's value of 0) at the (dy, dx), and
        flip, that augment_draw draws for (seed, epoch, i): the C loader's floats."""
        n, c, h, w = x.shape
        p = AUGMENT_PAD
        fill = norm_lut(self.name, c)[:, 0].reshape(1, c, 1, 1)
        padded = np.broadcast_to(fill, (n, c, h + 2 * p, w + 2 * p)).copy()
        padded[:, :, p:p + h, p:p + w] = x
        out = np.empty_like(x)
        for k, i in enumerate(sel):
            dy, dx, flip = augment_draw(seed, epoch, int(i))
            img = padded[k, :, dy:dy + h, dx:dx + w]
            out[k] = img[:, :, ::-1] if flip else img
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

    def step_begin(self):
        fn = getattr(self.data, "step_begin", None)
        if fn:
            fn()

    def step_figures(self):
        """The replicas' loader's data columns (a converted format's Loader), else none."""
        fn = getattr(self.data, "step_figures", None)
        return fn() if fn else {}
