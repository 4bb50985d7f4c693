"""ddpb_torch_data: the torch engines' data (pytorch, horovod's torch, deepspeed, lightning):
the native sets in memory (ddpb_data.Data), the converted formats through torch's
DataLoader (issue 34), both with Data's interface (batches, test_batches, steps_per_epoch,
shape, classes, test), so ddpb_torch_loop and the adapters do not tell them apart.

The converted formats, sample i being the C loader's sample i (ddpb_data.files_samples,
tfrecord's records in order) and rank r taking ddpb_data.rank_order's samples:
  files-png, files-jpeg  torchvision.datasets.ImageFolder over <data_dir>/<fmt>/<split>,
                         its sample list replaced by files_samples' (the manifest's order
                         and labels, which the class-folder scan would reorder), images
                         decoded by PIL (ImageFolder's own loader)
  tfrecord               the records by index: each .idx line ("offset length") locates
                         one framed record, read with one pread, both masked CRC-32Cs
                         checked, the tf.train.Example parsed by the `tfrecord` package
                         (deploy/setup-venv.sh pins it); see TFRecordSet for why not its
                         TFRecordDataset
A DataLoader per rank: a sampler yielding (index, epoch, seed) keys in rank_order's order,
batch_size and drop_last as the C loader's LOADER_DROP, num_workers = dataset.workers
(processes), prefetch_factor = max(1, prefetch), persistent workers (started once per
repeat, not per epoch). Decode: PIL, as ImageFolder does: it reads PNG and JPEG alike,
and Debian's Pillow decodes JPEG with libjpeg-turbo's default (islow DCT, fancy
upsampling), the library and settings the C decoder uses (worker/data/codec.c), so the
pixels are the C loader's; torchvision.io.decode_jpeg would need a second path for PNG and
gives no other pixels on the CPU. Augment (dataset.augment): the C recipe exactly: the crop
of the image padded by 4 zero bytes at the (dy, dx) and the flip that ddpb_data.augment_draw
draws for (seed, epoch, sample) as worker/data/images.c does, then the C LUT's
normalization (ddpb_data.norm_lut): the same floats as ddpbench's batches.

Data columns (step_figures, added to each step line): loader_cpu_ms is measured inside the
workers: each worker's collate returns, with the batch, its process CPU time
(time.process_time: every thread of the worker, nanosecond resolution) since its previous
batch, and a step is charged with the batches it took. Not /proc/<pid>/stat polling: its
10 ms ticks are coarser than a step, and the worker pids are DataLoader internals. A step
is charged with the CPU that made its batches (the C loader charges what its threads did
while the step ran: the same sum over a run). read_bytes: ddpb_data.mount_stats()' bytes
read while the step ran (step_begin to step_figures), when the rank reads through a
ddpbench-fs mount; without one it is left out (probe.data_not_observed says why).

Decision: one loader class for every torch engine, framed as ddpb_data.Data, so the loop's
data wait (data_ms) is the wait for the DataLoader's next batch whatever the engine.

Decision: the workers start through a forkserver, not by fork (DataLoader's
multiprocessing_context). A rank is multithreaded by the time it iterates a loader (gloo's
and the framework's threads, the reporter's heartbeat), and a fork of it can hang in the
child before any Python runs: a deepspeed rank's test-split worker was seen stuck in
os.fork (popen_fork._launch) about once in five runs of test_engine_data, its rank
waiting for the batch and the peer timing out in gloo. The forkserver is one
single-threaded process per rank, started at the first loader (it imports the engine's
script once, multiprocessing's default preload, so each worker after it starts at fork
speed; an engine script reports to the daemon only when it runs as __main__); the
workers, their batches and their CPU accounting are as before. Only a loader's first
batch pays the server's start, in a warm-up step or the first evaluation. The
forkserver and its workers stay in the rank's process group, which the daemon ends when
the rank exits (docs/design.md section 9): on their own they outlive the rank."""
import io
import multiprocessing
import os
import time

import numpy as np
import torch
import torch.utils.data as tud
import torchvision
from PIL import Image

import ddpb_data

CONVERTED = ("files-png", "files-jpeg", "tfrecord")
WORKER_START = "forkserver"  # how DataLoader workers start (see the module's decision)


def open_data(spec):
    """The spec's data: ddpb_data.Data (native and synthetic: arrays in memory), a Loader
    for the converted formats."""
    ds = spec.get("dataset", {})
    if ds.get("name", "synthetic") == "synthetic" or ds.get("format", "native") not in CONVERTED:
        return ddpb_data.Data(spec)
    return Loader(spec)


def step_begin(data):
    """Marks a step's start for its data columns (nothing for the in-memory sets)."""
    fn = getattr(data, "step_begin", None)
    if fn:
        fn()


def step_figures(data):
    """The data columns of the step just taken ({} for the in-memory sets)."""
    fn = getattr(data, "step_figures", None)
    return fn() if fn else {}


def data_config(data):
    """The framework configuration's "data" entry: the loader and its settings."""
    fn = getattr(data, "config", None)
    if fn:
        return fn()
    return {"format": "native", "reader": "ddpb_data.Data: the set in memory as arrays"}


def as_tensor(x):
    """A batch part as a tensor: the loaders' tensors as they are, Data's arrays shared."""
    return x if torch.is_tensor(x) else torch.from_numpy(x)


# --- the samples ---------------------------------------------------------------------------

class Images:
    """What both formats share: a sample's [c][h][w] bytes to its input tensor, keyed by
    (index, epoch, seed), augmented (train split, dataset.augment) as the C loader does."""

    def setup(self, name, c, augment):
        self.c, self.augment = c, augment
        self.lut = ddpb_data.norm_lut(name, c)
        self.chan = np.arange(c)[:, None, None]

    def finish(self, u8, label, key, where):
        i, epoch, seed = key
        if u8.shape[0] != self.c or (self.shape is not None and u8.shape != self.shape):
            raise ValueError(f"dataset: {where}: {u8.shape[0]}x{u8.shape[1]}x{u8.shape[2]}, "
                             f"the set is {'x'.join(map(str, self.shape))}")
        if self.augment:
            u8 = ddpb_data.augment_image(u8, *ddpb_data.augment_draw(seed, epoch, i))
        return torch.from_numpy(np.ascontiguousarray(self.lut[self.chan, u8])), int(label)


def chw(img, c, where):
    """A PIL image as [c][h][w] bytes: gray for one channel, RGB for three (a gray file
    replicated), refused otherwise, as the C decoder refuses (worker/data/codec.c)."""
    if c == 1 and img.mode != "L":
        raise ValueError(f"dataset: {where}: a {img.mode} image, the set is gray (L)")
    if c == 3 and img.mode not in ("L", "RGB"):
        raise ValueError(f"dataset: {where}: a {img.mode} image, the set is RGB")
    a = np.asarray(img if c == 1 or img.mode == "RGB" else img.convert("RGB"))
    return a[None] if a.ndim == 2 else a.transpose(2, 0, 1)


def pil_open(path):
    """ImageFolder's loader, keeping the file's mode (its default converts to RGB)."""
    with open(path, "rb") as f:
        img = Image.open(f)
        img.load()
    return img


class FilesSet(torchvision.datasets.ImageFolder, Images):
    """files-png / files-jpeg: ImageFolder over <data_dir>/<fmt>/<split>, its samples
    ddpb_data.files_samples' (ddpbench's order and labels; first `limit` of them)."""

    def __init__(self, root, fmt, split, name, c, augment, limit=0):
        self._listed = ddpb_data.files_samples(root, fmt, split)
        if limit:
            self._listed = self._listed[:limit]
        super().__init__(os.path.join(root, fmt, split), loader=pil_open)
        self.setup(name, c, augment)
        self.shape = None
        self.shape = self.read(0)[0].shape

    def find_classes(self, directory):
        labels = sorted({y for _, y in self._listed})
        return [str(y) for y in labels], {str(y): y for y in labels}

    def make_dataset(self, directory, class_to_idx, extensions=None, is_valid_file=None):
        return self._listed

    def read(self, i):
        path, label = self.samples[i]
        return chw(self.loader(path), self.c, path), label, path

    def __getitem__(self, key):
        u8, label, path = self.read(key[0])
        return self.finish(u8, label, key, path)


class TFRecordSet(tud.Dataset, Images):
    """tfrecord: <data_dir>/tfrecord/<split>-NNNNN-of-MMMMM.tfrecord, record i read by
    index. The `tfrecord` package reads a shard front to back (tfrecord_iterator, and its
    torch TFRecordDataset is an IterableDataset over a contiguous slice or a shuffle
    queue), so it cannot follow rank_order's random order; its .idx format gives each
    record's offset and framed length, which this reads with one pread, checks as
    TensorFlow does (both masked CRC-32Cs; the package checks neither) and parses with the
    package's Example protobuf and feature decoder."""

    FEATURES = {"image/encoded": "byte", "image/class/label": "int"}

    def __init__(self, root, split, name, c, augment, limit=0):
        try:
            import tfrecord.reader  # noqa: F401 (here: a missing package fails at open, named)
        except ImportError as ex:
            raise ValueError(f"dataset.format tfrecord: the torch engines parse records with "
                             f"the tfrecord package ({ex}): deploy/setup-venv.sh installs "
                             f"it") from None
        # (shard path, offset, length, record in the shard), in order
        self.index = ddpb_data.tfrecord_index(root, split)
        if limit:
            self.index = self.index[:limit]
        self.fds = {}
        self.setup(name, c, augment)
        self.shape = None
        self.shape = self.read(0)[0].shape

    def __len__(self):
        return len(self.index)

    def _fd(self, path):
        """This process's descriptor of a shard (a worker opens its own after the fork)."""
        key = (os.getpid(), path)
        if key not in self.fds:
            self.fds[key] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        return self.fds[key]

    def record(self, i):
        """Record i's Example bytes, its framing checked (ddpb_data.tfrecord_record)."""
        entry = self.index[i]
        shard, off, _, k = entry
        return ddpb_data.tfrecord_record(self._fd(shard), entry), \
            f"{shard}: record {k} (offset {off})"

    def read(self, i):
        from tfrecord import example_pb2
        from tfrecord.reader import extract_feature_dict
        data, where = self.record(i)
        ex = example_pb2.Example()
        ex.ParseFromString(data)
        try:
            f = extract_feature_dict(ex.features, self.FEATURES,
                                     {"byte": "bytes_list", "int": "int64_list"})
        except (KeyError, TypeError) as e:
            raise ValueError(f"dataset: {where}: {e}") from None
        img = Image.open(io.BytesIO(f["image/encoded"]))
        img.load()
        return chw(img, self.c, where), int(f["image/class/label"][0]), where

    def __getitem__(self, key):
        u8, label, where = self.read(key[0])
        return self.finish(u8, label, key, where)


# --- the loader ----------------------------------------------------------------------------

_MARK = [None]  # a worker's process CPU time at its last batch (None in the main process)


def _worker_start(_worker_id):
    _MARK[0] = time.process_time()


def _collate(samples):
    """A worker's batch: the stacked inputs, the labels, and the worker's CPU ms since its
    previous batch (None where no worker process made it)."""
    x = torch.stack([s[0] for s in samples])
    y = torch.tensor([s[1] for s in samples], dtype=torch.int64)
    if _MARK[0] is None:
        return x, y, None
    now = time.process_time()
    cpu, _MARK[0] = (now - _MARK[0]) * 1000.0, now
    return x, y, cpu


def worker_error(ex):
    """A worker's exception as its own message: torch re-raises it as "Caught ValueError in
    DataLoader worker process 0." with the original last, and the run's error is the first
    line (ddpb_train.report_failure), which would name neither file nor record."""
    lines = str(ex).strip().splitlines()
    if len(lines) < 2 or not lines[0].startswith("Caught "):
        return ex
    last = lines[-1]
    name = type(ex).__name__ + ": "
    return type(ex)(last[len(name):] if last.startswith(name) else last)


class Order(tud.Sampler):
    """The keys of an epoch, set before each pass (the DataLoader asks on iter())."""

    def __init__(self):
        super().__init__(None)
        self.keys = []

    def __iter__(self):
        return iter(self.keys)

    def __len__(self):
        return len(self.keys)


class Loader:
    """A converted format through torch's DataLoader, with ddpb_data.Data's interface."""

    def __init__(self, spec):
        ds = spec.get("dataset", {})
        self.name, self.fmt = ds.get("name"), ds.get("format")
        self.seed = int(spec.get("seed", 1))
        self.workers = max(1, int(ds.get("workers", 1)))
        self.prefetch = max(1, int(spec.get("prefetch", 2)))
        root = ddpb_data.data_dir(spec)
        self.stats0 = None  # the mount's counters at the step's start (step_begin)
        self.cpu_ms, self.loaders = 0.0, {}
        c = len(ddpb_data.NORMS[self.name][0]) if self.name in ddpb_data.NORMS else 3
        limit = int(ds.get("samples") or 0)
        augment = bool(ds.get("augment", False))
        self.train = self._open(root, "train", c, augment, limit)
        if limit > len(self.train):
            raise ValueError(f"dataset.samples: {limit}, but the train split of {self.name} "
                             f"({self.fmt}) has {len(self.train)} samples")
        self.n = len(self.train)
        self.shape, self.classes = tuple(int(v) for v in self.train.shape), 10
        self.test = None
        if spec.get("eval", True):
            try:
                self.test = self._open(root, "test", c, False, 0)
            except FileNotFoundError:
                self.test = None

    def _open(self, root, split, c, augment, limit):
        if self.fmt == "tfrecord":
            return TFRecordSet(root, split, self.name, c, augment, limit)
        return FilesSet(root, self.fmt, split, self.name, c, augment, limit)

    def config(self):
        """The framework configuration's "data" entry."""
        return {"format": self.fmt, "reader": type(self.train).__name__,
                "DataLoader": {"num_workers": self.workers, "prefetch_factor": self.prefetch,
                               "persistent_workers": True, "drop_last": True,
                               "multiprocessing_context": WORKER_START},
                "decode": "PIL", "storage_mount": os.environ.get("DDPB_STORAGE_MOUNT")}

    def _loader(self, dataset, batch, drop_last, key):
        if key not in self.loaders:
            order = Order()
            self.loaders[key] = (order, tud.DataLoader(
                dataset, batch_size=batch, sampler=order, drop_last=drop_last,
                num_workers=self.workers, prefetch_factor=self.prefetch,
                persistent_workers=True, worker_init_fn=_worker_start, collate_fn=_collate,
                multiprocessing_context=multiprocessing.get_context(WORKER_START),
                # its own generator: the workers' base seed drawn from the global one would
                # move the model's random stream (dropout) away from the in-memory run's
                generator=torch.Generator().manual_seed(self.seed)))
        return self.loaders[key]

    def _pass(self, dataset, keys, batch, drop_last, key):
        order, loader = self._loader(dataset, batch, drop_last, key)
        order.keys = keys
        try:
            for x, y, cpu in loader:
                if cpu is not None:
                    self.cpu_ms += cpu
                yield x, y
        except Exception as ex:
            raise worker_error(ex) from None

    def batches(self, epoch, world, rank, batch, seed=None, start=0):
        """This rank's batches of the epoch as tensors, in ddpbench's order."""
        seed = self.seed if seed is None else seed
        keys = [(i, epoch, seed) for i in ddpb_data.rank_order(seed, epoch, self.n, rank,
                                                                world, start=start)]
        yield from self._pass(self.train, keys, batch, True, ("train", world, rank, batch))

    def test_batches(self, world, rank, batch):
        if self.test is None:
            return
        keys = [(i, 0, self.seed) for i in ddpb_data.test_shard(len(self.test), world, rank)]
        yield from self._pass(self.test, keys, batch, False, ("test", world, rank, batch))

    def steps_per_epoch(self, world, batch, start=0):
        return ((self.n - start) // world) // batch

    def step_begin(self):
        """The mount's counters as a step starts: its read_bytes are what the workers read
        while it ran, not between steps (the report's time is in no step_ms, and a rate of
        bytes over step time would count it)."""
        self.stats0 = ddpb_data.mount_stats()

    def step_figures(self):
        """loader_cpu_ms since the previous call and read_bytes since step_begin (else the
        previous call), read_bytes only through a mount that reports them."""
        out = {"loader_cpu_ms": self.cpu_ms}
        self.cpu_ms = 0.0
        now = ddpb_data.mount_stats()
        if now is not None and self.stats0 is not None:
            out["read_bytes"] = max(0, int(now["bytes"]) - int(self.stats0["bytes"]))
        self.stats0 = now
        return out

