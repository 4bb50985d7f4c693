/* formats: the entry points of the data formats, each implemented in its own file
 * (synthetic.c, idx.c, cifar.c, text.c, files.c, records.c, tfrecord.c) on the core
 * (data.h).
 *
 * Decision: a header of its own, not dataset.h or data.h: each format includes it for
 * its own entry point, and dataset.c (the table that opens a format by name) for all of
 * them, so neither the core nor a format depends on the table that calls them. */
#ifndef DDPB_DATA_FORMATS_H
#define DDPB_DATA_FORMATS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "worker/data/data.h"

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
 * file's bytes (decoded in the fill), with a CRC-32 that the fill checks. The index is read at
 * open; each sample is one read of its bytes from its shard through st during the fill. Caller
 * owns *out; st is borrowed. */
int dataset_records_open(const char *dir, const char *name, enum data_split split,
                         const struct data_image_opts *opts, struct data_storage *st,
                         struct dataset **out, struct err *e);

/* TensorFlow's TFRecord (tfrecord.c has the layout): dir/<split>-NNNNN-of-MMMMM.tfrecord
 * shards of tf.train.Example records (image/encoded a JPEG file, image/class/label), each
 * with its .idx of "offset length" lines (the framing is scanned at open where one is
 * missing). Each sample is one read of its frame through st during the fill, both masked
 * CRC-32C checked, the Example decoded strictly, the JPEG decoded, label and shape checked;
 * errors name the file, the record and the feature. classes: opts->classes, else 10.
 * ERR_NOT_FOUND when the split has no shard. Caller owns *out; st is borrowed. */
int dataset_tfrecord_open(const char *dir, const char *name, enum data_split split,
                          const struct data_image_opts *opts, struct data_storage *st,
                          struct dataset **out, struct err *e);

#endif
