/* images: the byte-image dataset the idx and CIFAR formats build on (normalize and augment
 * while filling) and the whole-file reader for plain and gzipped files.
 *
 * Decision: the reader goes through zlib's gzread for both kinds: zlib looks at the first
 * bytes (1f 8b) and reads anything else through unchanged, so the file name never decides,
 * and a truncated or corrupt gzip stream surfaces as gzerror() instead of short data. */
#include "worker/data/images.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "worker/data/guard.h"

struct data_images {
    uint8_t *block;                   /* owned; NULL for a reader-backed set */
    const uint8_t *pixels;            /* inside block */
    uint8_t *labels;                  /* owned; NULL for a reader-backed set */
    struct data_sample_reader reader; /* reader.read non-NULL: samples read while filling */
    struct data_augment augment;      /* zero on the test split */
    float lut[DATA_MAX_CHANNELS * 256];
};

#define DATA_AUGMENT_DOMAIN 0x4155474d454e54ull /* keeps augment draws apart from others */

void data_augment_draw(const struct data_augment *aug, const struct data_draw *draw,
                       int64_t index, int *dy, int *dx, bool *flip)
{
    *dy = *dx = 0;
    *flip = false;
    if (aug->pad == 0 && !aug->flip)
        return;
    uint64_t s = data_rng_key(draw->seed ^ DATA_AUGMENT_DOMAIN, (uint64_t)draw->epoch,
                              (uint64_t)index);
    if (aug->pad > 0) {
        *dy = (int)data_rng_below(&s, (uint64_t)(2 * aug->pad + 1));
        *dx = (int)data_rng_below(&s, (uint64_t)(2 * aug->pad + 1));
    }
    if (aug->flip)
        *flip = data_rng_next(&s) >> 63;
}

static void data_images_row(const uint8_t *srow, int w, const float *lut, int pad, int dx,
                            bool flip, float *orow)
{
    for (int x = 0; x < w; x++) {
        int sx = (flip ? w - 1 - x : x) + dx - pad;
        orow[x] = sx >= 0 && sx < w ? lut[srow[sx]] : lut[0];
    }
}

void data_images_transform(const uint8_t *src, int c, int h, int w, const float *lut, int pad,
                           int dy, int dx, bool flip, float *out)
{
    size_t plane = (size_t)h * (size_t)w;
    for (int ch = 0; ch < c; ch++) {
        const float *l = lut + (size_t)ch * 256;
        const uint8_t *s = src + ch * plane;
        float *o = out + ch * plane;
        if (pad == 0 && !flip) {
            for (size_t k = 0; k < plane; k++)
                o[k] = l[s[k]];
            continue;
        }
        for (int y = 0; y < h; y++) {
            int sy = y + dy - pad;
            float *orow = o + (size_t)y * (size_t)w;
            if (sy < 0 || sy >= h) {
                for (int x = 0; x < w; x++)
                    orow[x] = l[0];
                continue;
            }
            data_images_row(s + (size_t)sy * (size_t)w, w, l, pad, dx, flip, orow);
        }
    }
}

/* Sample i's bytes: in memory, or read through the reader into scratch (per bytes). */
static const uint8_t *data_images_sample(const struct dataset *ds, const struct data_images *im,
                                         int64_t i, uint8_t *scratch, int32_t *label,
                                         struct err *e)
{
    if (!im->reader.read) {
        *label = im->labels[i];
        return im->pixels + (size_t)i * dataset_sample_floats(ds);
    }
    if (im->reader.read(im->reader.ctx, i, scratch, label, e) < 0)
        return NULL;
    if (*label < 0 || *label >= ds->classes) {
        err_set(e, ERR_INVALID, "dataset", "%s: sample %lld has label %d, outside [0, %d)",
                ds->name, (long long)i, (int)*label, ds->classes);
        return NULL;
    }
    return scratch;
}

static int data_images_fill(const struct dataset *ds, const int64_t *idx, int n,
                            const struct data_draw *draw, float *x, int32_t *y, struct err *e)
{
    const struct data_images *im = ds->impl;
    size_t per = dataset_sample_floats(ds);
    uint8_t *scratch = NULL;
    if (im->reader.read && !(scratch = malloc(per)))
        return err_set(e, ERR_NOMEM, "dataset", "%s: out of memory for a sample", ds->name);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        int dy, dx;
        bool flip;
        const uint8_t *px = data_images_sample(ds, im, idx[i], scratch, &y[i], e);
        if (!px) {
            rc = -1;
            break;
        }
        data_augment_draw(&im->augment, draw, idx[i], &dy, &dx, &flip);
        data_images_transform(px, ds->c, ds->h, ds->w, im->lut, im->augment.pad, dy, dx, flip,
                              x + (size_t)i * per);
    }
    free(scratch);
    return rc;
}

static void data_images_destroy(struct dataset *ds)
{
    struct data_images *im = ds->impl;
    if (im) {
        free(im->block);
        free(im->labels);
        if (im->reader.destroy)
            im->reader.destroy(im->reader.ctx);
        free(im);
    }
    free(ds);
}

static const struct dataset_ops data_images_ops = {
    .fill = data_images_fill,
    .destroy = data_images_destroy,
};

static int data_images_check(const struct data_images_src *src, int classes,
                             const struct data_image_opts *opts, const char *what,
                             struct err *e)
{
    if (src->n < 1 || src->n > DATA_MAX_SAMPLES || src->c < 1 || src->c > DATA_MAX_CHANNELS ||
        src->h < 1 || src->h > DATA_MAX_SIDE || src->w < 1 || src->w > DATA_MAX_SIDE)
        return err_set(e, ERR_INVALID, "dataset", "%s: %lld samples of %dx%dx%d out of range",
                       what, (long long)src->n, src->c, src->h, src->w);
    if (classes < 1 || classes > DATA_MAX_CLASSES)
        return err_set(e, ERR_INVALID, "dataset.classes", "%d classes out of [1, %d]", classes,
                       DATA_MAX_CLASSES);
    if (opts->augment.pad < 0 || opts->augment.pad > DATA_MAX_SIDE)
        return err_set(e, ERR_INVALID, "dataset.augment", "crop padding %d out of [0, %d]",
                       opts->augment.pad, DATA_MAX_SIDE);
    if (data_norm_check(&opts->norm, src->c, e) < 0)
        return -1;
    for (int64_t i = 0; src->labels && i < src->n; i++)
        if (src->labels[i] >= classes)
            return err_set(e, ERR_INVALID, "dataset",
                           "%s: sample %lld has label %u, outside "
                           "[0, %d)",
                           what, (long long)i, src->labels[i], classes);
    return 0;
}

static void data_images_lut(const struct data_norm *norm, int c, float *lut)
{
    for (int ch = 0; ch < c; ch++) {
        for (int b = 0; b < 256; b++) {
            float v = (float)b / 255.0f;
            lut[ch * 256 + b] = norm->channels ? (v - norm->mean[ch]) / norm->std[ch] : v;
        }
    }
}

int data_images_create(struct data_images_src *src, const char *name, enum data_split split,
                       const struct data_image_opts *opts, const char *what,
                       struct dataset **out, struct err *e)
{
    *out = NULL;
    int classes = opts->classes ? opts->classes : src->classes;
    struct dataset *ds = NULL;
    struct data_images *im = NULL;
    if (data_images_check(src, classes, opts, what, e) < 0)
        goto fail;
    ds = calloc(1, sizeof *ds);
    im = calloc(1, sizeof *im);
    if (!ds || !im) {
        err_set(e, ERR_NOMEM, "", "%s: out of memory", what);
        goto fail;
    }
    im->block = src->block;
    im->pixels = src->pixels;
    im->labels = src->labels;
    if (split == DATA_SPLIT_TRAIN)
        im->augment = opts->augment;
    data_images_lut(&opts->norm, src->c, im->lut);
    *ds = (struct dataset){.ops = &data_images_ops,
                           .impl = im,
                           .split = split,
                           .n = src->n,
                           .c = src->c,
                           .h = src->h,
                           .w = src->w,
                           .classes = classes};
    snprintf(ds->name, sizeof ds->name, "%s", name);
    *out = ds;
    return 0;
fail:
    free(src->block);
    free(src->labels);
    free(im);
    free(ds);
    return -1;
}

int data_images_create_reader(const struct data_sample_reader *rd, int64_t n, int c, int h,
                              int w, int classes, const char *name, enum data_split split,
                              const struct data_image_opts *opts, struct dataset **out,
                              struct err *e)
{
    *out = NULL;
    /* no labels up front: data_images_check skips them and the fill checks each one read */
    struct data_images_src src = {.n = n, .c = c, .h = h, .w = w, .classes = classes};
    if (data_images_create(&src, name, split, opts, name, out, e) < 0) {
        rd->destroy(rd->ctx);
        return -1;
    }
    struct data_images *im = (*out)->impl;
    im->reader = *rd;
    return 0;
}

/* mkdir -p (images.h). */
int data_make_dirs(const char *dir, struct err *e)
{
    char p[4096];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char was = *s;
        *s = '\0';
        if (mkdir(p, 0755) < 0 && errno != EEXIST)
            return err_errno(e, "%s: mkdir", p);
        if (was == '\0')
            break;
        *s = was;
    }
    struct stat sb;
    if (stat(dir, &sb) < 0 || !S_ISDIR(sb.st_mode))
        return err_set(e, ERR_INVALID, "dataset.path", "%s: not a directory", dir);
    return 0;
}

/* --- whole-file reader --------------------------------------------------------------- */

static int data_read_gzerr(gzFile g, const char *path, struct err *e)
{
    int num = Z_OK;
    const char *msg = gzerror(g, &num);
    if (num == Z_ERRNO)
        return err_errno(e, "%s: read", path);
    if (num == Z_BUF_ERROR)
        return err_set(e, ERR_INVALID, "dataset", "%s: truncated gzip data (%s)", path, msg);
    if (num == Z_MEM_ERROR)
        return err_set(e, ERR_NOMEM, "dataset", "%s: out of memory in zlib", path);
    return err_set(e, ERR_INVALID, "dataset", "%s: corrupt gzip data: %s", path, msg);
}

/* Grows *buf so that at least one more byte fits, never past limit. */
static int data_read_grow(uint8_t **buf, size_t *cap, size_t limit, const char *path,
                          struct err *e)
{
    size_t ncap = *cap < (1u << 20) ? (1u << 20) : *cap * 2;
    if (ncap > limit)
        ncap = limit;
    uint8_t *nb = realloc(*buf, ncap);
    if (!nb)
        return err_set(e, ERR_NOMEM, "dataset", "%s: out of memory for %zu bytes", path, ncap);
    *buf = nb;
    *cap = ncap;
    return 0;
}

/* Reads g to its end into *buf (at most limit bytes; limit = max + 1 detects "too large").
 * With a bound (gzip only: a plain file's size is known before the read, and its parser
 * names trailing bytes), the limit drops to what the first b->head bytes declare. */
static int data_read_all(gzFile g, const char *path, size_t *limit, const struct data_bound *b,
                         uint8_t **buf, size_t *cap, size_t *len, struct err *e)
{
    bool bounded = !b || !b->fn;
    for (;;) {
        if (!bounded && *len >= b->head) {
            size_t max = b->fn(*buf, *len, b->ctx);
            if (max == 0) /* not the format's header: its parser says what is wrong */
                return 0;
            if (max < *limit - 1)
                *limit = max + 1;
            bounded = true;
        }
        if (*len >= *limit)
            return 0; /* past the cap: the caller says so */
        if (*len == *cap && data_read_grow(buf, cap, *limit, path, e) < 0)
            return -1;
        size_t want = *cap - *len;
        if (want > (1u << 24))
            want = 1u << 24;
        if (!bounded && want > b->head - *len)
            want = b->head - *len; /* stop at the header: the bound comes from it */
        if (want == 0)
            return 0;
        int r = gzread(g, *buf + *len, (unsigned)want);
        if (r < 0)
            return data_read_gzerr(g, path, e);
        if (r == 0) {
            int num = Z_OK;
            gzerror(g, &num);
            return num == Z_OK ? 0 : data_read_gzerr(g, path, e);
        }
        *len += (size_t)r;
    }
}

/* Opens path through the guard (guard.h: a regular file beneath the allowed directories)
 * and fills *st. */
static int data_read_open(const char *path, struct stat *st, struct err *e)
{
    int fd = data_guard_open(path, e);
    if (fd < 0)
        return -1;
    if (fstat(fd, st) < 0) {
        err_errno(e, "%s: stat", path);
        close(fd);
        return -1;
    }
    return fd;
}

int data_read_file(const char *path, size_t max_bytes, uint8_t **out, size_t *len, bool *gz,
                   struct err *e)
{
    return data_read_file_bounded(path, max_bytes, NULL, out, len, gz, e);
}

int data_read_file_bounded(const char *path, size_t max_bytes, const struct data_bound *bound,
                           uint8_t **out, size_t *len, bool *gz, struct err *e)
{
    *out = NULL;
    *len = 0;
    struct stat st;
    int fd = data_read_open(path, &st, e);
    if (fd < 0)
        return -1;
    gzFile g = gzdopen(fd, "rb");
    if (!g) {
        close(fd);
        return err_set(e, ERR_NOMEM, "dataset", "%s: cannot start zlib", path);
    }
    gzbuffer(g, 1u << 17);
    bool direct = gzdirect(g);
    if (direct && (uint64_t)st.st_size > max_bytes) {
        gzclose_r(g);
        return err_set(e, ERR_TOO_LARGE, "dataset", "%s: %lld bytes, more than %zu", path,
                       (long long)st.st_size, max_bytes);
    }
    size_t limit = max_bytes + 1, cap = 0;
    uint8_t *buf = NULL;
    int rc = 0;
    /* A plain file's size is known: one allocation (and one extra byte to see its end). */
    if (direct) {
        cap = (size_t)st.st_size + 1;
        buf = malloc(cap);
        if (!buf)
            rc = err_set(e, ERR_NOMEM, "dataset", "%s: out of memory for %zu bytes", path, cap);
    }
    if (rc == 0)
        rc = data_read_all(g, path, &limit, direct ? NULL : bound, &buf, &cap, len, e);
    int crc = gzclose_r(g);
    /* a read stopped at the cap leaves the gzip stream unfinished: the cap is the news */
    if (rc == 0 && *len >= limit)
        rc = err_set(e, ERR_TOO_LARGE, "dataset", "%s: more than %zu bytes%s%s", path,
                     limit - 1, direct ? "" : " after decompression",
                     limit - 1 < max_bytes ? " (what its header declares)" : "");
    else if (rc == 0 && crc != Z_OK)
        rc = err_set(e, ERR_INVALID, "dataset", "%s: truncated or corrupt gzip data", path);
    if (rc < 0) {
        free(buf);
        *len = 0;
        return -1;
    }
    if (gz)
        *gz = !direct;
    *out = buf;
    return 0;
}
