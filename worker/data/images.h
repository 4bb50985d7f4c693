/* images: what the byte-image formats (idx, CIFAR) share, internal to worker/data: a
 * dataset over samples stored as bytes (normalized and augmented while filling), and the
 * whole-file reader that opens plain and gzipped files alike.
 *
 * Decision: normalization is a per-channel table of 256 floats computed once, so a fill is
 * one table lookup per value and gives bit-for-bit the value (byte / 255 - mean) / std
 * would give. The augmentation's geometry is its own function (data_images_transform) so
 * tests can check a known image against explicit offsets. */
#ifndef DDPB_DATA_IMAGES_H
#define DDPB_DATA_IMAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/data/data.h"

/* What data_images_create takes over. */
struct data_images_src {
    uint8_t *block;        /* owned heap block holding the pixels (freed with the set) */
    const uint8_t *pixels; /* [n][c][h][w] inside block */
    uint8_t *labels;       /* owned [n] */
    int64_t n;
    int c, h, w, classes;
};

/* Builds a dataset over src. Takes ownership of src->block and src->labels whether it
 * succeeds or not. The augmentation is kept only for the train split. Labels are checked
 * against classes (the error names `what`, the label file). Caller owns *out. */
int data_images_create(struct data_images_src *src, const char *name, enum data_split split,
                       const struct data_image_opts *opts, const char *what,
                       struct dataset **out, struct err *e);

/* A source that reads one sample at a time while filling (the file-backed formats: per
 * sample image files, record shards), so the read and decode are the data cost of the
 * fill that needs them, through the rank's storage (storage.h). */
struct data_sample_reader {
    void *ctx; /* the format's state; owned by the dataset once data_images_create_reader
                  is called */
    /* Reads sample i (0 <= i < n) as [c][h][w] bytes into buf and its label into *label.
     * Called from any loader thread, concurrently: ctx is read-only after open or
     * guards itself. Returns 0, or -1 with e set naming the file. */
    int (*read)(void *ctx, int64_t i, uint8_t *buf, int32_t *label, struct err *e);
    void (*destroy)(void *ctx); /* frees ctx */
};

/* Builds a dataset of n samples of c x h x w bytes read through rd, normalized and
 * augmented as data_images_create's. Takes ownership of rd->ctx whether it succeeds or
 * not. A label read outside [0, classes) fails that fill, naming the sample. Caller owns
 * *out. */
int data_images_create_reader(const struct data_sample_reader *rd, int64_t n, int c, int h,
                              int w, int classes, const char *name, enum data_split split,
                              const struct data_image_opts *opts, struct dataset **out,
                              struct err *e);

/* One augmented sample: out[ch][y][x] = lut[ch][byte] of source pixel
 * (y + dy - pad, (flip ? w-1-x : x) + dx - pad), or lut[ch][0] outside the image.
 * dy, dx in [0, 2 pad]. lut is [c][256]. */
void data_images_transform(const uint8_t *src, int c, int h, int w, const float *lut, int pad,
                           int dy, int dx, bool flip, float *out);
/* The crop offsets and flip a fill draws for (draw, sample index). */
void data_augment_draw(const struct data_augment *aug, const struct data_draw *draw,
                       int64_t index, int *dy, int *dx, bool *flip);

/* Reads a whole file, gunzipping it when it starts with the gzip magic bytes, into an owned
 * heap block (*out, *len; free() it). Fails with ERR_NOT_FOUND when missing, ERR_TOO_LARGE
 * past max_bytes (after decompression), ERR_INVALID for corrupt or truncated gzip data,
 * ERR_IO otherwise; messages start with the path. *gz tells which it was (may be NULL). */
int data_read_file(const char *path, size_t max_bytes, uint8_t **out, size_t *len, bool *gz,
                   struct err *e);

/* A cap told by a format's header: once head bytes are read (after decompression),
 * fn(bytes, len, ctx) gives the most bytes the whole file may hold (its header plus the
 * pixels it declares); the read stops one byte past that, so a small gzip that inflates
 * far past what its header declares costs that much, not max_bytes. fn returns 0 for a
 * header that is not the format's: the read then ends there, with the head bytes alone,
 * for the format's parser to refuse. */
struct data_bound {
    size_t head;
    size_t (*fn)(const uint8_t *head, size_t len, void *ctx);
    void *ctx;
};

/* data_read_file with bound (NULL: max_bytes alone); ERR_TOO_LARGE past either. */
int data_read_file_bounded(const char *path, size_t max_bytes, const struct data_bound *bound,
                           uint8_t **out, size_t *len, bool *gz, struct err *e);

/* mkdir -p: makes each missing component of dir (0755), for the writers of the converted
 * formats. ERR_INVALID naming "dataset.path" when dir exists but is not a folder. */
int data_make_dirs(const char *dir, struct err *e);

#endif
