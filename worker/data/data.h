/* data: the interface every data format implements (synthetic, MNIST idx, CIFAR-10
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
 * fills may run on any thread, even concurrently.
 *
 * Layout of worker/data (no loop between its files): this header and data.c are the core
 * that the formats (synthetic.c, idx.c, cifar.c, text.c, files.c, records.c, through
 * images.h and formats.h), the loader and the converter use; dataset.c/.h is the table
 * that opens a format by name, and the only file that names them all. The core names no
 * format, so a format can be read, tested or replaced with only the core beside it. */
#ifndef DDPB_DATA_DATA_H
#define DDPB_DATA_DATA_H

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

/* A shard format's open files (records.c, tfrecord.c): data_fds_new returns n descriptors,
 * each -1 (not open), in an array the caller owns and frees with data_fds_free, which
 * closes the open ones (fds NULL is fine). NULL when out of memory. */
int *data_fds_new(uint32_t n);
void data_fds_free(int *fds, uint32_t n);

#endif
