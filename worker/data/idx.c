/* idx: MNIST-format datasets (idx3-ubyte images + idx1-ubyte labels, plain or gzipped),
 * MNIST and Fashion-MNIST alike.
 *
 * Decision: each file is read whole (bounded by DATA_FILE_MAX_BYTES after decompression)
 * and then parsed from memory, so "truncated", "trailing bytes" and "counts differ" are
 * comparisons of the header's numbers with the bytes really there, checked before any
 * sample is used. The image file's block is kept as the pixel store (no copy). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "worker/data/data.h"
#include "worker/data/formats.h"
#include "worker/data/images.h"

#define IDX_TYPE_UBYTE 0x08
#define IDX_CLASSES 10

struct idx_file {
    const char *path; /* borrowed */
    const char *kind; /* "images" or "labels" */
    int ndims;
    uint8_t *buf; /* owned */
    size_t len;
    uint32_t dims[3];
    size_t data_off;
};

static const char *idx_type_name(uint8_t t)
{
    switch (t) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "short";
    case 0x0C: return "int";
    case 0x0D: return "float";
    case 0x0E: return "double";
    default: return "unknown";
    }
}

static int idx_parse_magic(const struct idx_file *f, struct err *e)
{
    const uint8_t *p = f->buf;
    if (f->len < 4)
        return err_set(e, ERR_INVALID, "dataset", "%s: %zu bytes, too short for an idx header",
                       f->path, f->len);
    if (p[0] != 0 || p[1] != 0)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: not an idx file: magic bytes "
                       "%02x %02x %02x %02x, expected 00 00 08 %02x",
                       f->path, p[0], p[1], p[2], p[3], (unsigned)f->ndims);
    if (p[2] != IDX_TYPE_UBYTE)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: idx element type 0x%02x (%s) is not "
                       "supported, expected 0x08 (unsigned byte)",
                       f->path, p[2], idx_type_name(p[2]));
    if (p[3] != f->ndims)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: idx file of %u dimensions where %s "
                       "(%d dimensions) were expected",
                       f->path, p[3], f->kind, f->ndims);
    return 0;
}

static int idx_parse_dims(struct idx_file *f, struct err *e)
{
    f->data_off = 4 + 4 * (size_t)f->ndims;
    if (f->len < f->data_off)
        return err_set(e, ERR_INVALID, "dataset", "%s: truncated idx header (%zu bytes)",
                       f->path, f->len);
    uint64_t bytes = 1;
    for (int i = 0; i < f->ndims; i++) {
        const uint8_t *q = f->buf + 4 + 4 * i;
        f->dims[i] = (uint32_t)q[0] << 24 | (uint32_t)q[1] << 16 | (uint32_t)q[2] << 8 | q[3];
    }
    if (f->dims[0] == 0 || f->dims[0] > DATA_MAX_SAMPLES)
        return err_set(e, ERR_INVALID, "dataset", "%s: %u %s, expected 1 to %lld", f->path,
                       f->dims[0], f->kind, (long long)DATA_MAX_SAMPLES);
    for (int i = 1; i < f->ndims; i++)
        if (f->dims[i] == 0 || f->dims[i] > DATA_MAX_SIDE)
            return err_set(e, ERR_INVALID, "dataset", "%s: image side %u out of [1, %d]",
                           f->path, f->dims[i], DATA_MAX_SIDE);
    /* In range now: at most 2^31 * 2^12 * 2^12, no overflow. */
    for (int i = 0; i < f->ndims; i++)
        bytes *= f->dims[i];
    if (bytes > DATA_FILE_MAX_BYTES)
        return err_set(e, ERR_TOO_LARGE, "dataset",
                       "%s: header declares %llu bytes of %s, "
                       "over the %zu-byte limit",
                       f->path, (unsigned long long)bytes, f->kind, DATA_FILE_MAX_BYTES);
    size_t have = f->len - f->data_off;
    if (have < bytes)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: truncated: the header declares %u %s "
                       "(%llu bytes) but only %zu bytes follow it",
                       f->path, f->dims[0], f->kind, (unsigned long long)bytes, have);
    if (have > bytes)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: %llu bytes of trailing data after the "
                       "%u %s the header declares",
                       f->path, (unsigned long long)(have - bytes), f->dims[0], f->kind);
    return 0;
}

/* The most bytes f may hold: its header and the pixels (or labels) its dims declare, so a
 * small gzip cannot inflate past what its header declares (images.h: data_bound); 0 for a
 * header idx_parse_magic or idx_parse_dims refuses, whose read then stops at it. */
static size_t idx_bound(const uint8_t *p, size_t len, void *ctx)
{
    const struct idx_file *f = ctx;
    size_t off = 4 + 4 * (size_t)f->ndims;
    if (len < off || p[3] != f->ndims)
        return 0;
    uint64_t bytes = 1;
    for (int i = 0; i < f->ndims; i++) {
        const uint8_t *q = p + 4 + 4 * i;
        uint64_t d = (uint32_t)q[0] << 24 | (uint32_t)q[1] << 16 | (uint32_t)q[2] << 8 | q[3];
        if (d < 1 || d > (i == 0 ? (uint64_t)DATA_MAX_SAMPLES : DATA_MAX_SIDE))
            return 0;
        bytes *= d; /* at most 2^31 * 2^24: no overflow */
    }
    return bytes > DATA_FILE_MAX_BYTES - off ? 0 : off + (size_t)bytes;
}

/* Reads and validates one file; on failure f->buf is freed. */
static int idx_load(struct idx_file *f, struct err *e)
{
    struct data_bound b = {.head = 4 + 4 * (size_t)f->ndims, .fn = idx_bound, .ctx = f};
    if (data_read_file_bounded(f->path, DATA_FILE_MAX_BYTES, &b, &f->buf, &f->len, NULL, e) < 0)
        return -1;
    if (idx_parse_magic(f, e) < 0 || idx_parse_dims(f, e) < 0) {
        free(f->buf);
        f->buf = NULL;
        return -1;
    }
    return 0;
}

int dataset_idx_open(const char *images_path, const char *labels_path, const char *name,
                     enum data_split split, const struct data_image_opts *opts,
                     struct dataset **out, struct err *e)
{
    *out = NULL;
    struct idx_file img = {.path = images_path, .kind = "images", .ndims = 3};
    struct idx_file lab = {.path = labels_path, .kind = "labels", .ndims = 1};
    if (idx_load(&img, e) < 0)
        return -1;
    if (idx_load(&lab, e) < 0) {
        free(img.buf);
        return -1;
    }
    if (img.dims[0] != lab.dims[0]) {
        err_set(e, ERR_INVALID, "dataset", "%s holds %u labels but %s holds %u images",
                labels_path, lab.dims[0], images_path, img.dims[0]);
        free(img.buf);
        free(lab.buf);
        return -1;
    }
    /* Keep only the labels (n bytes), not the label file's header. */
    memmove(lab.buf, lab.buf + lab.data_off, lab.dims[0]);
    struct data_images_src src = {
        .block = img.buf,
        .pixels = img.buf + img.data_off,
        .labels = lab.buf,
        .n = img.dims[0],
        .c = 1,
        .h = (int)img.dims[1],
        .w = (int)img.dims[2],
        .classes = IDX_CLASSES,
    };
    return data_images_create(&src, name ? name : "idx", split, opts, labels_path, out, e);
}

/* Finds dir/base or dir/base.gz (plain first) into out. */
static int idx_find(const char *dir, const char *base, char *out, size_t outlen, struct err *e)
{
    struct stat st;
    static const char *const suffixes[] = {"", ".gz"};
    for (int i = 0; i < 2; i++) {
        int n = snprintf(out, outlen, "%s/%s%s", dir, base, suffixes[i]);
        if (n < 0 || (size_t)n >= outlen)
            return err_set(e, ERR_INVALID, "dataset.path", "%s: path too long", dir);
        if (stat(out, &st) == 0)
            return 0;
    }
    return err_set(e, ERR_NOT_FOUND, "dataset.path", "%s: neither %s nor %s.gz found", dir,
                   base, base);
}

int dataset_idx_open_dir(const char *dir, const char *name, enum data_split split,
                         const struct data_image_opts *opts, struct dataset **out,
                         struct err *e)
{
    *out = NULL;
    struct stat st;
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
        return err_set(e, ERR_NOT_FOUND, "dataset.path", "%s: no such directory", dir);
    const char *prefix = split == DATA_SPLIT_TRAIN ? "train" : "t10k";
    char ibase[64], lbase[64], ipath[1024], lpath[1024];
    snprintf(ibase, sizeof ibase, "%s-images-idx3-ubyte", prefix);
    snprintf(lbase, sizeof lbase, "%s-labels-idx1-ubyte", prefix);
    if (idx_find(dir, ibase, ipath, sizeof ipath, e) < 0 ||
        idx_find(dir, lbase, lpath, sizeof lpath, e) < 0)
        return -1;
    return dataset_idx_open(ipath, lpath, name, split, opts, out, e);
}
