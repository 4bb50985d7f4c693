"""ddpb_tf_data: the converted dataset formats (files-jpeg, files-png, tfrecord) read by
TensorFlow's own input pipelines, for the TensorFlow engines (engine tensorflow, engine
horovod with framework keras), in place of ddpb_data's in-memory arrays (dataset.format
native stays there).

- tf.data (engine tensorflow; horovod keras on tfrecord): per epoch, the rank's samples
  in ddpbench's order (ddpb_data.rank_order: the C loader's permutation and LOADER_DROP
  shard), each with the C loader's augmentation draw for it (ddpb_data.augment_draw), as
  from_tensor_slices -> map(read, decode, augment, normalize; num_parallel_calls =
  dataset.workers, deterministic) -> batch(drop_remainder) -> prefetch(prefetch). The
  options' private thread pool is dataset.workers threads, so the knob is the pipeline's
  thread count, as the C loader's workers are its threads.
- files-*: tf.io.read_file of each sample's file (ddpb_data.files_samples: the manifest, or
  the class folders as ImageFolder sorts them), decode_jpeg (INTEGER_ACCURATE: libjpeg's
  default islow IDCT, which the C codec uses) / decode_png.
- tfrecord: the rank's records read by index (ddpb_data.tfrecord_index: the shards' .idx
  files), each with one pread of the framed record, its length and both masked CRC-32Cs
  checked as TensorFlow's reader checks them (ddpb_data.tfrecord_record, the pytorch
  engine's reader too), then tf.io.parse_single_example of image/encoded and
  image/class/label. Decision: tf.data.TFRecordDataset reads a shard front to back, so it
  gives ddpbench's per-sample order only if every rank reads every record of every shard;
  read by offset, each rank reads exactly its own samples in ddpbench's order, at the
  cost of TFRecordDataset's large sequential reads (measured: TFRecordDataset over the
  shards is the faster pipeline when order does not matter). TensorFlow's own reader at
  an offset (_pywrap_record_io.RandomRecordReader) read about 1 MB of the shard for
  each record (/proc/self/io, a 1 KB record), which under an emulated storage profile
  charges every sample a megabyte. The read runs in a tf.py_function (no graph op reads
  a byte range), which releases the GIL in the pread.
- Keras (horovod framework keras on files-*): tf.keras.utils.image_dataset_from_directory
  over the split's class folders, Keras' own pipeline (read_file, decode_image, resize to
  the files' size, map with AUTOTUNE parallelism), with its own order: file paths shuffled
  once by the spec seed, then a 1024-sample shuffle buffer reshuffled each epoch (seeded,
  so every rank sees the same stream), sharded rank r of W = elements r, r+W, ... (its
  .shard), cut to floor(n / W) per rank (LOADER_DROP's count). So each rank takes as many
  samples as ddpbench's rank, disjoint from the others', but not the same ones: Keras has
  no hook for a sampler. dataset.samples keeps the first n of Keras' shuffled stream,
  not ddpbench's first n samples. Labels are the manifest's (ddpbench's), given in the
  order Keras lists the files, which is checked. dataset.workers bounds its AUTOTUNE map
  through the private thread pool; its own prefetch(AUTOTUNE) stays, and the batches are
  prefetched by prefetch. Its test split: sorted paths, .shard (LOADER_UNEVEN's counts).
- Augmentation (dataset.augment): worker/data/images.c exactly: the image padded by 4 with
  byte 0 (the C fill's lut[0]), cropped at (dy, dx) in [0, 8], flipped, from the C draw of
  (seed, epoch, sample index) (ddpb_data.augment_draw, a port of data_augment_draw),
  then normalized through the C loader's own float32 lookup table (ddpb_data.norm_lut:
  (x / 255 - mean) / std with ddpb_vocab.NORMS), so a lossless format's batches are the C
  loader's to the bit. The Keras pipeline draws its own crop and flip (tf.random, seeded),
  as Keras users do. Test split: no augmentation, LOADER_UNEVEN in file order.

Decision: a batch is NHWC float32 (TensorFlow's layout) handed to ddpb_keras_loop as a
tensor, never through numpy. Data columns: data_ms is the wait for the iterator's next
batch; read_bytes the ddpbench-fs mount's byte counter over the step (mount_stats);
loader_cpu_ms only where the pipeline is all the process runs (loader_only: the process'
CPU over the step): tf.data's threads are unnamed threads of the process, beside the
model's intra-op threads, so in training their CPU cannot be told apart
(probe.data_not_observed)."""
import os
import threading

import numpy as np
import tensorflow as tf

import ddpb_data

FILES = ("files-jpeg", "files-png")
FORMATS = FILES + ("tfrecord",)
PAD = ddpb_data.AUGMENT_PAD  # worker/data/dataset.c: the CIFAR recipe's crop padding
CLASSES = 10  # the image datasets' heads (ddpb_data.Data)


def wanted(spec):
    """True when the spec's dataset is read by this module (a converted image format)."""
    ds = spec.get("dataset", {})
    return ds.get("name", "synthetic") != "synthetic" and ds.get("format") in FORMATS


class Normalize:
    """The C fill's byte -> float map (worker/data/images.c's LUT, ddpb_data.norm_lut) on
    an HWC uint8 image: a gather from the same float32 table, so the values are the C
    loader's to the bit."""

    def __init__(self, name, c):
        self.lut = tf.constant(ddpb_data.norm_lut(name, c).reshape(-1), tf.float32)
        self.base = tf.constant([256 * k for k in range(c)], tf.int32)

    def __call__(self, u8):
        return tf.gather(self.lut, tf.cast(u8, tf.int32) + self.base)


def crop_flip(u8, dy, dx, flip, h, w):
    """images.c's transform on an HWC uint8 image: pad by PAD with 0, crop (dy, dx), flip."""
    padded = tf.pad(u8, [[PAD, PAD], [PAD, PAD], [0, 0]])
    out = padded[dy:dy + h, dx:dx + w, :]
    return tf.cond(flip, lambda: tf.reverse(out, [1]), lambda: out)


class _Records:
    """The tfrecord records of a split (ddpb_data.tfrecord_index), read by index with
    ddpb_data.tfrecord_record: one pread of the framed record, CRCs checked; each thread
    keeps its own descriptors."""

    def __init__(self, root, split):
        self.index = ddpb_data.tfrecord_index(root, split)
        self.local = threading.local()

    def read(self, i):
        """Record i's tf.train.Example bytes (a tf.py_function: i a scalar tensor)."""
        fds = getattr(self.local, "fds", None)
        if fds is None:
            fds = self.local.fds = {}
        entry = self.index[int(i)]
        if entry[0] not in fds:
            fds[entry[0]] = os.open(entry[0], os.O_RDONLY | os.O_CLOEXEC)
        return ddpb_data.tfrecord_record(fds[entry[0]], entry)


FEATURES = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64)}


class TFData:
    """A converted format's train (and test) split for ddpb_keras_loop: what ddpb_data.Data
    offers it (shape (c, h, w), classes, n, test, batches, test_batches, steps_per_epoch),
    its batches NHWC tensors from a tf.data pipeline."""

    def __init__(self, spec):
        ds = spec.get("dataset", {})
        self.name, self.fmt = ds.get("name"), ds.get("format")
        self.seed = int(spec.get("seed", 1))
        self.augment = bool(ds.get("augment", False))
        self.workers = max(1, int(ds.get("workers", 1) or 1))
        self.prefetch = int(spec.get("prefetch", 2))
        self.root = ddpb_data.data_dir(spec)
        self.norm = Normalize(self.name, len(ddpb_data.NORMS[self.name][0]))
        c = len(ddpb_data.NORMS[self.name][0])
        self.train = self._split("train")
        want = int(ds.get("samples") or 0)
        if want > self.train["n"]:
            raise ValueError(f"dataset.samples: {want}, but the train split of {self.name} "
                             f"({self.fmt}) has {self.train['n']} samples")
        self.n = want or self.train["n"]
        self.test = None
        if spec.get("eval", True):
            try:
                self.test = self._split("test")
            except FileNotFoundError:
                self.test = None
        h, w = self._first_shape(c)
        self.shape, self.classes = (c, h, w), CLASSES

    # --- the split's samples ----------------------------------------------------------

    def _split(self, split):
        if self.fmt == "tfrecord":
            rec = _Records(self.root, split)
            return {"n": len(rec.index), "records": rec}
        samples = ddpb_data.files_samples(self.root, self.fmt, split)
        return {"n": len(samples), "paths": [p for p, _ in samples],
                "labels": [lab for _, lab in samples]}

    def _first_shape(self, c):
        """(h, w) of the first train sample, as the C reader takes the shape from it."""
        u8, _ = self._decode_one(self.train, tf.constant(0, tf.int64), c)
        return int(u8.shape[0]), int(u8.shape[1])

    def _decode_one(self, part, i, c):
        """Sample i of a split: (HWC uint8 image, label)."""
        if self.fmt == "tfrecord":
            raw = tf.py_function(part["records"].read, [i], tf.string)
            ex = tf.io.parse_single_example(raw, FEATURES)
            img = tf.io.decode_jpeg(ex["image/encoded"], channels=c,
                                    dct_method="INTEGER_ACCURATE")
            return img, ex["image/class/label"]
        data = tf.io.read_file(tf.gather(tf.constant(part["paths"]), i))
        label = tf.gather(tf.constant(part["labels"], tf.int64), i)
        if self.fmt == "files-png":
            return tf.io.decode_png(data, channels=c), label
        return tf.io.decode_jpeg(data, channels=c, dct_method="INTEGER_ACCURATE"), label

    # --- the pipelines ----------------------------------------------------------------

    def options(self):
        opt = tf.data.Options()
        opt.threading.private_threadpool_size = self.workers
        opt.deterministic = True
        return opt

    def _pipeline(self, part, indices, draws, batch, drop):
        """indices' samples of part in order, each with its (dy, dx, flip) draw (None:
        no augmentation), batched; gathers from constants the map closes over."""
        c, h, w = self.shape
        norm = self.norm
        if draws is None:
            ds = tf.data.Dataset.from_tensor_slices(tf.constant(indices, tf.int64))

            def load(i):
                img, label = self._decode_one(part, i, c)
                img.set_shape((h, w, c))
                return norm(img), label
        else:
            dy, dx, flip = zip(*draws) if draws else ((), (), ())
            ds = tf.data.Dataset.from_tensor_slices(
                (tf.constant(indices, tf.int64), tf.constant(dy, tf.int32),
                 tf.constant(dx, tf.int32), tf.constant(flip, tf.bool)))

            def load(i, dy, dx, flip):
                img, label = self._decode_one(part, i, c)
                img.set_shape((h, w, c))
                return norm(crop_flip(img, dy, dx, flip, h, w)), label
        ds = ds.map(load, num_parallel_calls=self.workers, deterministic=True)
        ds = ds.batch(batch, drop_remainder=drop)
        if self.prefetch > 0:
            ds = ds.prefetch(self.prefetch)
        return ds.with_options(self.options())

    def describe(self):
        """The pipeline as the run's env records it (framework_config's input_pipeline)."""
        return {"reader": "tf.data", "format": self.fmt,
                "read": "pread by .idx offset, CRCs checked" if self.fmt == "tfrecord"
                else "tf.io.read_file", "num_parallel_calls": self.workers,
                "private_threadpool_size": self.workers, "prefetch": self.prefetch,
                "order": "ddpbench", "augment": "ddpbench" if self.augment else "none"}

    def order(self, epoch, world, rank, seed=None):
        """The train sample indices rank takes in epoch (ddpbench's)."""
        seed = self.seed if seed is None else seed
        return ddpb_data.rank_order(seed, epoch, self.n, rank, world)

    def batches(self, epoch, world, rank, batch, seed=None, start=0):
        """Rank's (x NHWC, y) batches of the epoch in ddpbench's order, full batches only."""
        if start:
            raise ValueError("dataset.format: a resumed epoch (elastic) reads native data")
        seed = self.seed if seed is None else seed
        idx = self.order(epoch, world, rank, seed)
        idx = idx[:len(idx) // batch * batch]
        draws = [ddpb_data.augment_draw(seed, epoch, i) for i in idx] if self.augment else None
        return iter(self._pipeline(self.train, idx, draws, batch, True))

    def test_batches(self, world, rank, batch):
        if self.test is None:
            return iter(())
        idx = ddpb_data.test_shard(self.test["n"], world, rank)
        return iter(self._pipeline(self.test, idx, None, batch, False))

    def steps_per_epoch(self, world, batch, start=0):
        return ((self.n - start) // world) // batch


def plain(norm):
    """Keras' (float image, int32 label) as the loop takes them: the image normalized as
    the C loader does (Keras resized to the files' own size: the bytes unchanged), the
    label int64."""
    def fn(img, label):
        return norm(tf.cast(img, tf.uint8)), tf.cast(label, tf.int64)
    return fn


class KerasFiles(TFData):
    """files-* through Keras' image_dataset_from_directory (horovod framework keras): its
    order, sharded by .shard (module docstring)."""

    def __init__(self, spec):
        super().__init__(spec)
        self.epochs_ds = {}

    def _keras(self, split, shuffle, seed):
        """image_dataset_from_directory over <fmt>/<split>/ (class folders), unbatched.
        Labels: ddpbench's (files_samples), in the order Keras lists the files (sorted
        paths), so a class missing from a small split cannot shift them; its listing is
        checked against ours."""
        c, h, w = self.shape
        base = os.path.join(self.root, self.fmt, split)
        part = self.train if split == "train" else self.test
        by_path = sorted(zip(part["paths"], part["labels"]))
        ds = tf.keras.utils.image_dataset_from_directory(
            base, labels=[lab for _, lab in by_path], label_mode="int", batch_size=None,
            image_size=(h, w), color_mode="grayscale" if c == 1 else "rgb",
            shuffle=shuffle, seed=seed, interpolation="bilinear")
        listed = [os.path.normpath(p) for p, _ in by_path]
        if shuffle:
            np.random.RandomState(seed).shuffle(listed)  # what index_directory does
        if [os.path.normpath(p) for p in ds.file_paths] != listed:
            raise ValueError(f"dataset.format {self.fmt}: {base}: Keras lists other files "
                             f"than the split's manifest (files outside it?)")
        return ds

    def _train_stream(self, world, rank, batch, seed):
        """One dataset for the repeat, iterated once per epoch (its shuffle buffer
        reshuffles each iteration, the same on every rank: seeded)."""
        key = (world, rank, batch, seed)
        if key in self.epochs_ds:
            return self.epochs_ds[key]
        c, h, w = self.shape
        ds = self._keras("train", True, seed).take(self.n)
        ds = ds.shard(world, rank).take(self.n // world)
        norm = self.norm
        if self.augment:
            def aug(img, label):
                u8 = tf.cast(img, tf.uint8)  # Keras resized to the same size: exact bytes
                d = tf.random.uniform([2], 0, 2 * PAD + 1, tf.int32)
                flip = tf.random.uniform([]) < 0.5
                return norm(crop_flip(u8, d[0], d[1], flip, h, w)), tf.cast(label, tf.int64)
            ds = ds.map(aug, num_parallel_calls=self.workers)
        else:
            ds = ds.map(plain(norm), num_parallel_calls=self.workers)
        ds = ds.batch(batch, drop_remainder=True)
        if self.prefetch > 0:
            ds = ds.prefetch(self.prefetch)
        opt = tf.data.Options()
        opt.threading.private_threadpool_size = self.workers
        self.epochs_ds[key] = ds.with_options(opt)
        return self.epochs_ds[key]

    def describe(self):
        return dict(super().describe(), reader="tf.keras.utils.image_dataset_from_directory",
                    read="Keras load_image (read_file, decode_image, resize)",
                    num_parallel_calls="AUTOTUNE", order="Keras shuffle (seed), .shard",
                    augment="crop and flip drawn by tf.random" if self.augment else "none")

    def batches(self, epoch, world, rank, batch, seed=None, start=0):
        if start:
            raise ValueError("dataset.format: a resumed epoch (elastic) reads native data")
        return iter(self._train_stream(world, rank, batch, self.seed if seed is None else seed))

    def test_batches(self, world, rank, batch):
        if self.test is None:
            return iter(())
        norm = self.norm
        ds = self._keras("test", False, None).shard(world, rank)
        ds = ds.map(plain(norm), num_parallel_calls=self.workers).batch(batch)
        return iter(ds.with_options(self.options()))


def open_data(spec, keras=False):
    """The spec's dataset for a TensorFlow engine: TFData / KerasFiles for a converted
    format (keras: engine horovod's framework keras, whose files-* go through Keras' own
    pipeline), else None (ddpb_data.Data's in-memory arrays)."""
    if not wanted(spec):
        return None
    if keras and spec["dataset"]["format"] in FILES:
        return KerasFiles(spec)
    return TFData(spec)


def described(data):
    """{"input_pipeline": data.describe()} for a TFData, {} for ddpb_data's arrays."""
    return {"input_pipeline": data.describe()} if isinstance(data, TFData) else {}
