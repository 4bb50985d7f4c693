/* cifar: CIFAR-10 binary-format datasets (data_batch_1..5.bin, test_batch.bin: records of
 * one label byte followed by 3072 pixel bytes, 3 channel planes of 32x32).
 *
 * Decision: records are split into a pixel store and a label array once at open, so a
 * fill reads contiguous [c][h][w] bytes like every other byte-image format. Files are
 * checked one by one (whole records, labels in range) so an error names the file and the
 * record. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/data/data.h"
#include "worker/data/formats.h"
#include "worker/data/images.h"

#define CIFAR_SIDE 32
#define CIFAR_CHANNELS 3
#define CIFAR_PIXELS (CIFAR_CHANNELS * CIFAR_SIDE * CIFAR_SIDE)
#define CIFAR_RECORD (1 + CIFAR_PIXELS)
#define CIFAR_CLASSES 10
#define CIFAR_MAX_FILES 64
/* A file's cap after decompression: all of CIFAR-10's 60000 images in one file (the real
 * batches hold 10000 each), 184 MB, not DATA_FILE_MAX_BYTES: the most a gzip may inflate
 * to is the pixels the format can hold */
#define CIFAR_FILE_MAX_BYTES ((size_t)60000 * CIFAR_RECORD)

static int cifar_check_file(const char *path, const uint8_t *buf, size_t len, int classes,
                            struct err *e)
{
    if (len == 0)
        return err_set(e, ERR_INVALID, "dataset", "%s: empty file, no CIFAR records", path);
    if (len % CIFAR_RECORD)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: %zu bytes is not a whole number of "
                       "%d-byte CIFAR records (%zu records and %zu bytes over: truncated?)",
                       path, len, CIFAR_RECORD, len / CIFAR_RECORD, len % CIFAR_RECORD);
    for (size_t r = 0; r < len / CIFAR_RECORD; r++)
        if (buf[r * CIFAR_RECORD] >= classes)
            return err_set(e, ERR_INVALID, "dataset",
                           "%s: record %zu has label %u, outside "
                           "[0, %d)",
                           path, r, buf[r * CIFAR_RECORD], classes);
    return 0;
}

/* Appends a validated file's records to src (pixels into src->block, labels). */
static int cifar_append(struct data_images_src *src, const uint8_t *buf, size_t len,
                        const char *path, struct err *e)
{
    size_t k = len / CIFAR_RECORD, n = (size_t)src->n;
    if ((int64_t)(n + k) > DATA_MAX_SAMPLES)
        return err_set(e, ERR_TOO_LARGE, "dataset", "%s: more than %lld CIFAR records in all",
                       path, (long long)DATA_MAX_SAMPLES);
    uint8_t *px = realloc(src->block, (n + k) * CIFAR_PIXELS);
    if (px)
        src->block = px;
    uint8_t *lb = realloc(src->labels, n + k);
    if (lb)
        src->labels = lb;
    if (!px || !lb)
        return err_set(e, ERR_NOMEM, "dataset", "%s: out of memory", path);
    for (size_t r = 0; r < k; r++) {
        src->labels[n + r] = buf[r * CIFAR_RECORD];
        memcpy(src->block + (n + r) * CIFAR_PIXELS, buf + r * CIFAR_RECORD + 1, CIFAR_PIXELS);
    }
    src->n = (int64_t)(n + k);
    return 0;
}

static int cifar_load(struct data_images_src *src, const char *path, int classes, struct err *e)
{
    uint8_t *buf;
    size_t len;
    if (data_read_file(path, CIFAR_FILE_MAX_BYTES, &buf, &len, NULL, e) < 0)
        return -1;
    int rc = cifar_check_file(path, buf, len, classes, e);
    if (rc == 0)
        rc = cifar_append(src, buf, len, path, e);
    free(buf);
    return rc;
}

int dataset_cifar_open(const char *const *paths, int npaths, enum data_split split,
                       const struct data_image_opts *opts, struct dataset **out, struct err *e)
{
    *out = NULL;
    if (npaths < 1 || npaths > CIFAR_MAX_FILES)
        return err_set(e, ERR_INVALID, "dataset.path", "%d CIFAR files, expected 1 to %d",
                       npaths, CIFAR_MAX_FILES);
    int classes = opts->classes ? opts->classes : CIFAR_CLASSES;
    struct data_images_src src = {
        .c = CIFAR_CHANNELS, .h = CIFAR_SIDE, .w = CIFAR_SIDE, .classes = CIFAR_CLASSES};
    for (int i = 0; i < npaths; i++) {
        if (cifar_load(&src, paths[i], classes, e) < 0) {
            free(src.block);
            free(src.labels);
            return -1;
        }
    }
    src.pixels = src.block;
    return data_images_create(&src, "cifar10", split, opts, paths[0], out, e);
}

int dataset_cifar_open_dir(const char *dir, enum data_split split,
                           const struct data_image_opts *opts, struct dataset **out,
                           struct err *e)
{
    *out = NULL;
    char paths[5][1024];
    const char *ptrs[5];
    int n = split == DATA_SPLIT_TRAIN ? 5 : 1;
    for (int i = 0; i < n; i++) {
        int len = split == DATA_SPLIT_TRAIN
                      ? snprintf(paths[i], sizeof paths[i], "%s/data_batch_%d.bin", dir, i + 1)
                      : snprintf(paths[i], sizeof paths[i], "%s/test_batch.bin", dir);
        if (len < 0 || (size_t)len >= sizeof paths[i])
            return err_set(e, ERR_INVALID, "dataset.path", "%s: path too long", dir);
        ptrs[i] = paths[i];
    }
    return dataset_cifar_open(ptrs, n, split, opts, out, e);
}
