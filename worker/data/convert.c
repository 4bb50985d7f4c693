/* convert: data_convert, the whole conversion behind `ddpbench dataset convert`: each split
 * of a dataset read through dataset_open and written, sample by sample in the source's
 * order, through the writer of the target format (files.c's, records.c's or
 * tfrecord.c's).
 *
 * Decision: the source is opened with an identity normalization (mean 0, std 1 on each of
 * the name's channels) rather than "none": a data_config's channels 0 means the name's
 * published constants, and x = (byte / 255 - 0) / 1 is byte / 255 exactly either way, so
 * round(x * 255) gives the stored byte back. The fill runs in chunks of CONVERT_CHUNK
 * samples with a fixed draw (seed 0, no augmentation, so the draw changes nothing): the
 * memory a conversion needs is a chunk, whatever the split's size. */
#include "worker/data/convert.h"

#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/vocab.h"
#include "worker/data/dataset.h"
#include "worker/data/tfrecord.h"

#define CONVERT_CHUNK 256
#define CONVERT_QUALITY 95  /* JPEG, when none is given */
#define CONVERT_SHARD_MB 64 /* records, when none is given */
#define CONVERT_MAX_SHARD_MB ((int64_t)1 << 20)

/* How convert writes one format of common/vocab.h: files or record shards, and the codec
 * or compression its row names. */
struct convert_format {
    const char *name;
    bool files;    /* per-sample image files; else record shards */
    bool tfrecord; /* TensorFlow's TFRecord shards (always JPEG) */
    enum data_image_codec codec;
    enum data_record_compression comp;
};

static int convert_find_format(const char *name, struct convert_format *out, struct err *e)
{
    const struct vocab_format *f = vocab_format(vocab_find(VOCAB_FORMAT, name));
    if (!f || !vocab_format_converted(f)) {
        char names[160];
        return err_set(e, ERR_INVALID, "format", "cannot write format \"%s\" (%s)", name,
                       vocab_format_join(vocab_format_converted, ", ", names, sizeof names));
    }
    static const enum data_record_compression comps[] = {
        [VOCAB_COMPRESS_NONE] = DATA_RECORD_RAW,
        [VOCAB_COMPRESS_RAW] = DATA_RECORD_RAW,
        [VOCAB_COMPRESS_ZLIB] = DATA_RECORD_ZLIB,
        [VOCAB_COMPRESS_ZSTD] = DATA_RECORD_ZSTD,
        [VOCAB_COMPRESS_JPEG] = DATA_RECORD_JPEG};
    *out = (struct convert_format){.name = f->name,
                                   .files = f->files,
                                   .tfrecord = f->tfrecord,
                                   .codec = f->codec == VOCAB_CODEC_JPEG ? DATA_CODEC_JPEG
                                                                         : DATA_CODEC_PNG,
                                   .comp = comps[f->compression]};
    return 0;
}

/* The options with their defaults filled in, checked. */
static int convert_resolve_opts(const struct data_convert_opts *in,
                                struct data_convert_opts *out, struct err *e)
{
    *out = *in;
    if (!out->quality)
        out->quality = CONVERT_QUALITY;
    if (!out->shard_mb)
        out->shard_mb = CONVERT_SHARD_MB;
    if (out->quality < 1 || out->quality > 100)
        return err_set(e, ERR_INVALID, "quality", "JPEG quality %d outside [1, 100]",
                       out->quality);
    if (out->shard_mb < 1 || out->shard_mb > CONVERT_MAX_SHARD_MB)
        return err_set(e, ERR_INVALID, "shard_mb", "shard size %lld MB outside [1, %lld]",
                       (long long)out->shard_mb, (long long)CONVERT_MAX_SHARD_MB);
    return 0;
}

/* --- one writer of either kind --------------------------------------------------------- */

struct convert_writer {
    const struct convert_format *fmt;
    struct data_files_writer *fw;    /* owned, files formats */
    struct data_records_writer *rw;  /* owned, records formats */
    struct data_tfrecord_writer *tw; /* owned, tfrecord */
};

static int convert_writer_create(struct convert_writer *cw, const struct convert_format *fmt,
                                 const char *dir, enum data_split split,
                                 const struct data_convert_opts *opts, const struct dataset *ds,
                                 struct err *e)
{
    *cw = (struct convert_writer){.fmt = fmt};
    if (fmt->files)
        return data_files_writer_create(dir, split, fmt->codec, opts->quality, ds->c, ds->h,
                                        ds->w, &cw->fw, e);
    if (fmt->tfrecord)
        return data_tfrecord_writer_create(dir, split, opts->quality, ds->c, ds->h, ds->w,
                                           ds->classes, opts->shard_mb << 20, &cw->tw, e);
    /* a JPEG record's level is its quality, the same as files-jpeg's */
    int level = fmt->comp == DATA_RECORD_JPEG ? opts->quality : opts->level;
    return data_records_writer_create(dir, split, fmt->comp, level, ds->c, ds->h, ds->w,
                                      ds->classes, opts->shard_mb << 20, &cw->rw, e);
}

static int convert_writer_add(struct convert_writer *cw, const uint8_t *chw, int32_t label,
                              struct err *e)
{
    return cw->fw   ? data_files_writer_add(cw->fw, chw, label, e)
           : cw->tw ? data_tfrecord_writer_add(cw->tw, chw, label, e)
                    : data_records_writer_add(cw->rw, chw, label, e);
}

static int convert_writer_finish(struct convert_writer *cw, struct err *e)
{
    return cw->fw   ? data_files_writer_finish(cw->fw, e)
           : cw->tw ? data_tfrecord_writer_finish(cw->tw, e)
                    : data_records_writer_finish(cw->rw, e);
}

static void convert_writer_abort(struct convert_writer *cw)
{
    if (cw->fw)
        data_files_writer_abort(cw->fw);
    else if (cw->tw)
        data_tfrecord_writer_abort(cw->tw);
    else
        data_records_writer_abort(cw->rw);
}

/* --- the source ------------------------------------------------------------------------ */

/* The split as stored: identity normalization, no augmentation, every sample. Caller owns
 * *out. */
static int convert_open_source(const struct data_config *src_cfg, enum data_split split,
                               struct dataset **out, struct err *e)
{
    struct data_config cfg = *src_cfg;
    struct data_norm preset;
    if (data_norm_preset(cfg.name, &preset, e) < 0 || preset.channels == 0)
        return err_set(e, ERR_INVALID, "dataset.name",
                       "cannot convert dataset \"%s\": only image datasets convert (mnist, "
                       "fashion-mnist, cifar10)",
                       cfg.name);
    memset(&cfg.norm, 0, sizeof cfg.norm);
    cfg.norm.channels = preset.channels;
    for (int c = 0; c < preset.channels; c++)
        cfg.norm.std[c] = 1.0f;
    cfg.augment = false;
    cfg.samples = 0;
    if (dataset_open(&cfg, split, out, e) < 0)
        return -1;
    if (dataset_label_len(*out) != 1) {
        dataset_destroy(*out);
        *out = NULL;
        return err_set(e, ERR_INVALID, "dataset.name",
                       "cannot convert \"%s\": not one label per sample", cfg.name);
    }
    return 0;
}

/* A fill's floats (byte / 255) back to the bytes. */
static void convert_to_bytes(const float *x, size_t n, uint8_t *out)
{
    for (size_t k = 0; k < n; k++) {
        long v = lrintf(x[k] * 255.0f);
        out[k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
}

struct convert_bufs {
    float *x;
    int32_t *y;
    int64_t *idx;
    uint8_t *chw;
};

static void convert_bufs_free(struct convert_bufs *b)
{
    free(b->x);
    free(b->y);
    free(b->idx);
    free(b->chw);
}

/* Every sample of ds, in order, into cw. */
static int convert_copy(const struct dataset *ds, struct convert_writer *cw, struct err *e)
{
    size_t per = dataset_sample_floats(ds);
    struct convert_bufs b = {.x = malloc(CONVERT_CHUNK * per * sizeof *b.x),
                             .y = malloc(CONVERT_CHUNK * sizeof *b.y),
                             .idx = malloc(CONVERT_CHUNK * sizeof *b.idx),
                             .chw = malloc(per)};
    int rc = b.x && b.y && b.idx && b.chw
                 ? 0
                 : err_set(e, ERR_NOMEM, "dataset", "%s: out of memory for a chunk", ds->name);
    const struct data_draw draw = {0, 0, 0};
    for (int64_t first = 0; rc == 0 && first < ds->n; first += CONVERT_CHUNK) {
        int k = ds->n - first < CONVERT_CHUNK ? (int)(ds->n - first) : CONVERT_CHUNK;
        for (int i = 0; i < k; i++)
            b.idx[i] = first + i;
        rc = dataset_fill(ds, b.idx, k, &draw, b.x, b.y, e);
        for (int i = 0; rc == 0 && i < k; i++) {
            convert_to_bytes(b.x + (size_t)i * per, per, b.chw);
            rc = convert_writer_add(cw, b.chw, b.y[i], e);
        }
    }
    convert_bufs_free(&b);
    return rc;
}

static int convert_split(const struct data_config *src_cfg, const char *dir,
                         const struct convert_format *fmt, const struct data_convert_opts *opts,
                         enum data_split split, struct err *e)
{
    struct dataset *ds;
    if (convert_open_source(src_cfg, split, &ds, e) < 0)
        return err_prefix(e, "%s split", data_split_name(split));
    struct convert_writer cw;
    int rc = convert_writer_create(&cw, fmt, dir, split, opts, ds, e);
    if (rc == 0 && convert_copy(ds, &cw, e) < 0) {
        convert_writer_abort(&cw);
        rc = -1;
    } else if (rc == 0) {
        rc = convert_writer_finish(&cw, e);
    }
    dataset_destroy(ds);
    if (rc < 0)
        err_prefix(e, "%s split", data_split_name(split));
    return rc;
}

/* The source and the target are the same files: refused, the writer would overwrite what
 * the reader reads. */
static bool convert_same_place(const struct data_config *src_cfg, const char *out_root,
                               const char *format)
{
    const char *from = src_cfg->format[0] ? src_cfg->format : "native";
    if (strcmp(from, format) != 0)
        return false;
    char a[PATH_MAX], b[PATH_MAX];
    if (realpath(src_cfg->path, a) && realpath(out_root, b))
        return strcmp(a, b) == 0;
    return strcmp(src_cfg->path, out_root) == 0;
}

int data_convert(const struct data_config *src_cfg, const char *out_root,
                 const struct data_convert_opts *opts, struct err *e)
{
    struct data_convert_opts o;
    struct convert_format format;
    const struct convert_format *fmt = &format;
    if (convert_find_format(opts->format, &format, e) < 0 ||
        convert_resolve_opts(opts, &o, e) < 0)
        return -1;
    if (convert_same_place(src_cfg, out_root, fmt->name))
        return err_set(e, ERR_INVALID, "format", "%s/%s: converting a format into itself",
                       out_root, fmt->name);
    char dir[1024];
    int len = snprintf(dir, sizeof dir, "%s/%s", out_root, fmt->name);
    if (len < 0 || (size_t)len >= sizeof dir)
        return err_set(e, ERR_INVALID, "out", "%s: path too long", out_root);
    const enum data_split splits[] = {DATA_SPLIT_TRAIN, DATA_SPLIT_TEST};
    for (size_t i = 0; i < 2; i++)
        if (convert_split(src_cfg, dir, fmt, &o, splits[i], e) < 0)
            return -1;
    return 0;
}
