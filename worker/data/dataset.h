/* dataset: the interface every data format implements (synthetic, MNIST idx, CIFAR-10
 * binary, byte-level text), normalization and augmentation settings, and the seeded random
 * draws they use.
 *
 * Decision: a dataset is random access. It fills a caller-provided batch for a given list
 * of sample indices, so sharding, shuffling, batching and prefetching live once in the
 * loader (loader.h), not in each format. Formats keep samples as stored (bytes) and
 * normalize / augment while filling: the fill is the data cost a step pays. Every random
 * choice made while filling (crop offset, flip, synthetic values) is a pure function of
 * (seed, epoch or step, sample index), never of a generator shared between calls, so a
 * batch's content does not depend on which thread fills it, when, or in what order.
 *
 * Labels: a sample has label_len labels (dataset_label_len): 1 for a classification set
 * (an image and its class), T for a token set (T input tokens and the T next-token
 * targets, one per position). The field defaults to 0, read as 1, so a format that knows
 * nothing of token data needs no change; everything that sizes or copies labels goes
 * through dataset_label_len.
 *
 * Ownership: the open/create functions return a dataset the caller owns and releases with
 * dataset_destroy; it holds every sample in memory (Fashion-MNIST train: 47 MB of bytes).
 * A loader borrows a dataset, which must outlive it. After opening, a dataset is read-only:
 * fills may run on any thread, even concurrently. */
#ifndef DDPB_DATA_DATASET_H
#define DDPB_DATA_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define DATA_MAX_CHANNELS 4
#define DATA_MAX_SIDE 4096 /* largest height or width */
#define DATA_MAX_CLASSES 100000
#define DATA_MAX_SAMPLES ((int64_t)1 << 31)
#define DATA_FILE_MAX_BYTES ((size_t)2 << 30) /* per file, after decompression */
#define DATA_SYNTHETIC_SAMPLES 50000          /* a synthetic epoch when none is given */
#define DATA_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist" /* dataset-fashion-mnist */

enum data_split { DATA_SPLIT_TRAIN = 0, DATA_SPLIT_TEST = 1 };

/* Per-channel normalization of byte pixels: x = (byte / 255 - mean[c]) / std[c].
 * channels == 0 means none (x = byte / 255). */
struct data_norm {
    int channels;
    float mean[DATA_MAX_CHANNELS];
    float std[DATA_MAX_CHANNELS];
};

/* Random crop back to the image size after zero-padding `pad` pixels on each side (pad
 * 0 = no crop), then a horizontal flip with probability 1/2 when flip is set: torchvision's
 * RandomCrop(size, padding=pad) + RandomHorizontalFlip(). Padding is zero bytes, so it
 * normalizes to -mean/std as in torchvision (pad before ToTensor/Normalize). */
struct data_augment {
    int pad;
    bool flip;
};

/* Options of the byte-image formats (idx, CIFAR). The augmentation applies to the train
 * split only and is ignored for the test split. */
struct data_image_opts {
    struct data_norm norm;
    struct data_augment augment;
    int classes; /* labels must lie in [0, classes); 0 = the format's (10 for both) */
};

/* What a fill's random choices derive from; the loader sets it per batch. */
struct data_draw {
    uint64_t seed;
    int64_t epoch; /* augmentation varies per epoch */
    int64_t step;  /* batches since the loader started; fresh synthetic data varies per step */
};

struct dataset;
struct data_storage; /* storage.h */

struct dataset_ops {
    /* Fills n samples: x as [n][c][h][w] floats, y as [n][label_len] labels in
     * [0, classes) (label_len = dataset_label_len(ds)). idx[i] in [0, ds->n)
     * (dataset_fill checks). Returns 0, or -1 with e set. */
    int (*fill)(const struct dataset *ds, const int64_t *idx, int n,
                const struct data_draw *draw, float *x, int32_t *y, struct err *e);
    /* Frees impl and ds itself. NULL for a dataset the caller owns some other way. */
    void (*destroy)(struct dataset *ds);
};

struct dataset {
    const struct dataset_ops *ops;
    void *impl;    /* the format's state, owned by the dataset */
    char name[32]; /* "fashion-mnist", "cifar10", "synthetic", ... */
    enum data_split split;
    int64_t n;     /* samples */
    int c, h, w;   /* shape of one sample */
    int classes;   /* labels lie in [0, classes); a token set's vocabulary size */
    int label_len; /* labels per sample; 0 is read as 1 (dataset_label_len) */
    /* Set by the fixed synthetic mode: the loader fills one batch once and hands the same
     * memory out at every step (no data cost after the first fill). */
    bool reuse_batch;
};

/* Frees ds (NULL is fine). */
void dataset_destroy(struct dataset *ds);
/* Floats in one sample: c * h * w. */
size_t dataset_sample_floats(const struct dataset *ds);
/* Labels in one sample: max(1, ds->label_len). */
int dataset_label_len(const struct dataset *ds);
/* Checks the indices, then fills through ds->ops (x: n * dataset_sample_floats floats,
 * y: n * dataset_label_len labels, both caller-owned). */
int dataset_fill(const struct dataset *ds, const int64_t *idx, int n,
                 const struct data_draw *draw, float *x, int32_t *y, struct err *e);
const char *data_split_name(enum data_split split);

/* Published constants: "mnist" (0.1307 / 0.3081), "fashion-mnist" (0.2860 / 0.3530),
 * "cifar10" (0.4914, 0.4822, 0.4465 / 0.2470, 0.2435, 0.2616), "none". Returns -1 with e
 * set (ERR_NOT_FOUND) for another name. */
int data_norm_preset(const char *name, struct data_norm *out, struct err *e);
/* Checks channel count (0 or `channels`) and that every std is finite and > 0. */
int data_norm_check(const struct data_norm *norm, int channels, struct err *e);

/* --- seeded draws: counter-based, so any thread computes the same value -------------- */
/* A generator state for the stream keyed by (seed, a, b). */
uint64_t data_rng_key(uint64_t seed, uint64_t a, uint64_t b);
uint64_t data_rng_next(uint64_t *state);
/* Uniform in [0, bound), bound >= 1 (unbiased). */
uint64_t data_rng_below(uint64_t *state, uint64_t bound);
/* The epoch's permutation of [0, n) (Fisher-Yates from data_rng_key(seed, epoch, n)):
 * the same on every rank. perm has n entries, caller-owned. */
void data_permutation(uint64_t seed, int64_t epoch, int64_t n, int64_t *perm);

/* --- formats -------------------------------------------------------------------------- */

struct data_synthetic_config {
    int c, h, w, classes;
    int64_t samples; /* dataset size (an epoch's length) */
    bool fresh;      /* false: one fixed batch reused at every step (Horovod's and
                         tf_cnn_benchmarks' synthetic mode); true: new values per step */
    bool tokens;     /* token sequences for a language model: shape 1x1xT, classes = the
                         vocabulary size (>= 2) */
};
/* Values uniform in [-1, 1), labels uniform in [0, classes). Fixed mode: a sample's values
 * depend on (seed, index) and the dataset sets reuse_batch; fresh mode: on (seed, step,
 * index). Caller owns *out.
 *
 * With tokens, a sample is a sequence of T + 1 token ids (T = w) uniform in [0, classes),
 * drawn in order from the same per-sample stream: x holds the first T as floats (exact
 * integers), y the last T (y[t] = token t + 1, the next-token target at position t), and
 * label_len = T. Because the ids are drawn in order, a shorter T gives a prefix of the
 * same sequence. ERR_INVALID ("dataset.shape", "dataset.classes") for c or h other than
 * 1 or fewer than 2 classes. */
int dataset_synthetic_create(const struct data_synthetic_config *cfg, struct dataset **out,
                             struct err *e);

/* MNIST idx files (idx3-ubyte images, idx1-ubyte labels), each gzipped or not (told by the
 * gzip magic bytes, not the name). Validated strictly: magic, element type, dimensions,
 * counts matching between the two files, truncated or trailing bytes, label range, sizes;
 * errors name the file and what is wrong. name is copied into ds->name. Caller owns *out. */
int dataset_idx_open(const char *images_path, const char *labels_path, const char *name,
                     enum data_split split, const struct data_image_opts *opts,
                     struct dataset **out, struct err *e);
/* The same from a directory holding the standard names train-images-idx3-ubyte,
 * train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, each plain or
 * with ".gz" (plain preferred when both exist). */
int dataset_idx_open_dir(const char *dir, const char *name, enum data_split split,
                         const struct data_image_opts *opts, struct dataset **out,
                         struct err *e);

/* CIFAR-10 binary files: records of 1 label byte + 3072 pixel bytes (3x32x32, channel
 * planes R, G, B), any number of records per file, read in the order given. Validated
 * strictly (whole records only, labels < classes, non-empty). Caller owns *out. */
int dataset_cifar_open(const char *const *paths, int npaths, enum data_split split,
                       const struct data_image_opts *opts, struct dataset **out, struct err *e);
/* The same from a directory: data_batch_1.bin .. data_batch_5.bin (all five) for the
 * train split, test_batch.bin for the test split. */
int dataset_cifar_open_dir(const char *dir, enum data_split split,
                           const struct data_image_opts *opts, struct dataset **out,
                           struct err *e);

/* Byte-level language-modelling data from any file (text or binary; gzipped files are read
 * decompressed, as every format here reads them): tokens are its bytes (classes 256), and
 * sample i is the window of seq_len + 1 bytes starting at byte i * seq_len, so inputs do
 * not overlap and each window's last byte is the next one's first: x = the first seq_len
 * bytes as floats (0 to 255, not normalized), y = the seq_len bytes after each of them.
 * Shape 1x1xseq_len, label_len = seq_len, name "text". The file has
 * W = (bytes - 1) / seq_len windows (bytes past the last whole window are unused); the
 * last max(1, W / 10) form the test split, the rest the train split.
 *
 * samples > 0 keeps the first `samples` train windows (ERR_INVALID, field
 * "dataset.samples", when fewer exist); the test split is always whole. The file is read
 * whole (at most DATA_FILE_MAX_BYTES): ERR_NOT_FOUND when missing, ERR_INVALID naming the
 * file when it is too small to give both splits a window (2 * seq_len + 1 bytes), field
 * "dataset.seq_len" for seq_len out of [1, DATA_MAX_SIDE]. Caller owns *out. */
int dataset_text_open(const char *path, int seq_len, enum data_split split, int64_t samples,
                      struct dataset **out, struct err *e);

/* Per-sample image files, the raw form a user starts with: PNG or JPEG (told by each
 * file's magic bytes, decoded with libpng / libjpeg-turbo), all of one size (no resize: a
 * file of another size or channel count fails the fill naming it). dir holds, per split
 * ("train", "test"), either a manifest dir/<split>.txt of "relative/path label" lines (the
 * order of the samples; what `ddpbench dataset convert` writes, like DALI's file_list) or,
 * without one, class folders dir/<split>/<class>/ whose sorted names give the labels and
 * whose sorted files the order (torchvision's ImageFolder; byte order, only *.png, *.jpg,
 * *.jpeg files, an empty class folder refused). Manifest paths are relative to dir and may
 * not contain ".."; a bad line fails the open naming its number. classes = the largest
 * label + 1 (manifest) or the number of class folders, unless opts->classes is set (then a
 * label past it fails the open). The first file gives the shape. Every file is opened, read
 * and decoded through st during the fill. Caller owns *out; st is borrowed and must outlive
 * it. */
int dataset_files_open(const char *dir, const char *name, enum data_split split,
                       const struct data_image_opts *opts, struct data_storage *st,
                       struct dataset **out, struct err *e);

/* The record format: a split's samples packed in order into large shard files with an
 * index (dir/<split>.index and dir/<split>-NNNNN.rec), each sample's [c][h][w] bytes
 * stored raw, compressed (zlib or zstd, per sample, so any one reads alone) or as a JPEG
 * file's bytes (decoded in the fill), with a CRC-32 that the fill checks. The index is read at open; each sample is one read of its
 * bytes from its shard through st during the fill. Caller owns *out; st is borrowed. */
int dataset_records_open(const char *dir, const char *name, enum data_split split,
                         const struct data_image_opts *opts, struct data_storage *st,
                         struct dataset **out, struct err *e);

/* --- by name: what a spec's "dataset" object maps to ---------------------------------- */

struct data_config {
    char name[32];  /* "synthetic", "mnist", "fashion-mnist", "cifar10", "text" */
    char path[512]; /* directory; "" = DATA_FASHION_MNIST_DIR for fashion-mnist; text: the
                       file */
    struct data_synthetic_config synthetic; /* synthetic only */
    struct data_norm norm;                  /* channels 0 = the name's published constants */
    bool augment;    /* the CIFAR recipe (pad 4 + flip) on the train split */
    int64_t samples; /* train split: its first `samples` samples in file order; 0 =
                               all (synthetic: its own synthetic.samples) */
    int seq_len;     /* token datasets ("text"): tokens per sample (synthetic token data
                        takes its T from synthetic.w) */
    char format[16]; /* image sets: "native" (idx, CIFAR binaries in path), or one that
                        `ddpbench dataset convert` writes into path/<format>/: "files-png",
                        "files-jpeg", "records", "records-zlib", "records-zstd",
                        "records-jpeg" */
    struct data_storage *storage; /* borrowed: what the file-backed formats read through;
                                     NULL = plain reads, no caps */
};
/* Opens the split of the named dataset. Caller owns *out. ERR_INVALID names field
 * "dataset.name" for an unknown name, "dataset.samples" for a train split shorter than
 * cfg->samples, "dataset.path" for a file format ("text") without a path; ERR_NOT_FOUND
 * when the files are missing.
 *
 * Decision: samples keeps the first N of the files, not N drawn by the seed, so runs that
 * differ only in seed, world_size or strategy train on the same subset (as
 * torch.utils.data.Subset(ds, range(N)) does); the epoch shuffle then permutes those N.
 * The test split is always whole, so accuracies stay comparable. */
int dataset_open(const struct data_config *cfg, enum data_split split, struct dataset **out,
                 struct err *e);

#endif
