/* Unit tests for worker/data's file formats on files the tests generate: MNIST idx (plain and
 * gzipped, told apart by magic bytes; directory lookup; every malformed variant: magic,
 * element type, dimensions, counts, truncation, trailing bytes, absurd sizes, labels out of
 * range, corrupt and truncated gzip), CIFAR-10 binary (parsing, directory layout,
 * malformed files), normalization constants and values, the CIFAR augmentation (the
 * geometry of a known image, determinism, coverage of every offset, train split only),
 * byte-level text (windows and next-byte targets, split sizes, samples, too small and
 * missing files, gzip, a Debian-shipped corpus) and synthetic token sequences (targets are
 * the inputs shifted within one sequence, id range, fixed and fresh modes). Files nobody
 * may read and inputs that must not blow up: a FIFO fails at once instead of blocking, a
 * symlinked file is not followed, DDPB_DATA_DIRS bounds every file (missing and outside
 * alike: "not found or not allowed"), and a small gzip that inflates past its purpose's
 * cap (an idx file's header, CIFAR's records, the text limit) fails ERR_TOO_LARGE. */
#include <ftw.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "tests/unit/test.h"
#include "worker/data/dataset.h"
#include "worker/data/images.h"
#include "worker/data/loader.h"

static int write_bytes(const char *path, const uint8_t *p, size_t n, bool gz)
{
    if (gz) {
        gzFile g = gzopen(path, "wb");
        if (!g)
            return -1;
        int w = n ? gzwrite(g, p, (unsigned)n) : 0;
        return gzclose(g) == Z_OK && (size_t)w == n ? 0 : -1;
    }
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

static uint8_t img_byte(size_t sample, size_t k)
{
    return (uint8_t)(sample * 37 + k * 11 + 3);
}

/* --- idx files --------------------------------------------------------------------- */

struct idx_spec {
    uint8_t magic[4]; /* magic[3] = how many dims are written */
    uint32_t dims[4];
    long delta;       /* payload bytes beyond product(dims) (negative: fewer) */
    long keep;        /* >= 0: cut the file to this many bytes */
    int bad_label_at; /* >= 0: that label becomes 10 */
    bool gz;
};

static int idx_write(const char *path, const struct idx_spec *s)
{
    int nd = s->magic[3];
    uint64_t prod = 1;
    for (int i = 0; i < nd && i < 4; i++)
        prod *= s->dims[i];
    if (prod > (1u << 20))
        prod = 0; /* an absurd header: no payload */
    long payload = (long)prod + s->delta;
    size_t hdr = 4 + 4 * (size_t)nd, len = hdr + (size_t)(payload > 0 ? payload : 0);
    uint8_t *p = calloc(1, len);
    memcpy(p, s->magic, 4);
    for (int i = 0; i < nd; i++) {
        uint32_t d = s->dims[i];
        uint8_t be[4] = {(uint8_t)(d >> 24), (uint8_t)(d >> 16), (uint8_t)(d >> 8), (uint8_t)d};
        memcpy(p + 4 + 4 * i, be, 4);
    }
    size_t per = nd == 3 ? (size_t)s->dims[1] * s->dims[2] : 1;
    for (size_t k = hdr; k < len; k++)
        p[k] = nd == 1 ? (uint8_t)((k - hdr) % 10) : img_byte((k - hdr) / per, (k - hdr) % per);
    if (s->bad_label_at >= 0 && hdr + (size_t)s->bad_label_at < len)
        p[hdr + (size_t)s->bad_label_at] = 10;
    if (s->keep >= 0 && (size_t)s->keep < len)
        len = (size_t)s->keep;
    int rc = write_bytes(path, p, len, s->gz);
    free(p);
    return rc;
}

static const struct idx_spec idx_good_images = {{0, 0, 8, 3}, {20, 5, 4, 0}, 0, -1, -1, false};
static const struct idx_spec idx_good_labels = {{0, 0, 8, 1}, {20, 0, 0, 0}, 0, -1, -1, false};

static int idx_write_pair(const char *img, const char *lab, bool gz_img, bool gz_lab)
{
    struct idx_spec i = idx_good_images, l = idx_good_labels;
    i.gz = gz_img;
    l.gz = gz_lab;
    return idx_write(img, &i) < 0 || idx_write(lab, &l) < 0 ? -1 : 0;
}

/* Every value a plain (no augmentation) fill gives is lut(byte); labels are i % 10. */
static bool idx_content_ok(const struct dataset *ds, const struct data_norm *norm)
{
    size_t per = dataset_sample_floats(ds);
    float *x = malloc(per * (size_t)ds->n * sizeof *x);
    int32_t *y = malloc((size_t)ds->n * sizeof *y);
    int64_t *idx = malloc((size_t)ds->n * sizeof *idx);
    for (int64_t i = 0; i < ds->n; i++)
        idx[i] = ds->n - 1 - i; /* reversed: a fill follows the indices, not storage order */
    struct data_draw d = {1, 0, 0};
    struct err e;
    bool ok = dataset_fill(ds, idx, (int)ds->n, &d, x, y, &e) == 0;
    for (int64_t i = 0; ok && i < ds->n; i++) {
        ok = y[i] == idx[i] % 10;
        for (size_t k = 0; ok && k < per; k++) {
            float v = (float)img_byte((size_t)idx[i], k) / 255.0f;
            if (norm->channels)
                v = (v - norm->mean[0]) / norm->std[0];
            ok = x[(size_t)i * per + k] == v;
        }
    }
    free(x);
    free(y);
    free(idx);
    return ok;
}

static void test_idx_plain_and_gz(void)
{
    struct err e;
    char img[128], lab[128];
    struct data_image_opts o = {0};
    T_OK(data_norm_preset("fashion-mnist", &o.norm, &e));
    for (int v = 0; v < 4; v++) {
        test_tmp_path(img, sizeof img, "imgs");
        test_tmp_path(lab, sizeof lab, "labs");
        T_CHECK(idx_write_pair(img, lab, v & 1, v & 2) == 0);
        struct dataset *ds;
        T_OK(dataset_idx_open(img, lab, "fmnist-tiny", DATA_SPLIT_TRAIN, &o, &ds, &e));
        T_EQ_INT(ds->n, 20);
        T_EQ_INT(ds->c, 1);
        T_EQ_INT(ds->h, 5);
        T_EQ_INT(ds->w, 4);
        T_EQ_INT(ds->classes, 10);
        T_EQ_STR(ds->name, "fmnist-tiny");
        T_CHECK(!ds->reuse_batch);
        bool ok = idx_content_ok(ds, &o.norm);
        dataset_destroy(ds);
        T_CHECK_MSG(ok, "variant %d", v);
    }
}

/* gzip is told by its magic bytes: a gzipped file named without .gz and a plain one named
 * .gz both open; data_read_file reports which it was. */
static void test_idx_gzip_by_magic_not_name(void)
{
    struct err e;
    char img[128], lab[128];
    test_tmp_path(img, sizeof img, "images.bin");
    test_tmp_path(lab, sizeof lab, "labels.gz");
    T_CHECK(idx_write_pair(img, lab, true, false) == 0);
    struct data_image_opts o = {0};
    struct dataset *ds;
    T_OK(dataset_idx_open(img, lab, NULL, DATA_SPLIT_TEST, &o, &ds, &e));
    T_EQ_STR(ds->name, "idx");
    T_EQ_INT(ds->split, DATA_SPLIT_TEST);
    bool ok = idx_content_ok(ds, &o.norm);
    dataset_destroy(ds);
    T_CHECK(ok);
    uint8_t *p;
    size_t n;
    bool gz;
    T_OK(data_read_file(img, 1u << 20, &p, &n, &gz, &e));
    free(p);
    T_CHECK(gz);
    T_EQ_INT(n, 16 + 20 * 5 * 4);
    T_OK(data_read_file(lab, 1u << 20, &p, &n, &gz, &e));
    free(p);
    T_CHECK(!gz);
    T_EQ_INT(n, 8 + 20);
}

static void test_idx_directory(void)
{
    struct err e;
    char dir[128], img[256], lab[256];
    test_tmp_path(dir, sizeof dir, "mnistdir");
    T_CHECK(mkdir(dir, 0700) == 0);
    struct data_image_opts o = {0};
    struct dataset *ds;
    T_CHECK(dataset_idx_open_dir(dir, "mnist", DATA_SPLIT_TRAIN, &o, &ds, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    T_CHECK_MSG(strstr(e.msg, "train-images-idx3-ubyte.gz"), "%s", e.msg);
    snprintf(img, sizeof img, "%s/train-images-idx3-ubyte.gz", dir);
    snprintf(lab, sizeof lab, "%s/train-labels-idx1-ubyte", dir);
    T_CHECK(idx_write_pair(img, lab, true, false) == 0);
    snprintf(img, sizeof img, "%s/t10k-images-idx3-ubyte", dir);
    snprintf(lab, sizeof lab, "%s/t10k-labels-idx1-ubyte.gz", dir);
    T_CHECK(idx_write_pair(img, lab, false, true) == 0);
    T_OK(dataset_idx_open_dir(dir, "mnist", DATA_SPLIT_TRAIN, &o, &ds, &e));
    T_EQ_INT(ds->split, DATA_SPLIT_TRAIN);
    dataset_destroy(ds);
    T_OK(dataset_idx_open_dir(dir, "mnist", DATA_SPLIT_TEST, &o, &ds, &e));
    T_EQ_INT(ds->n, 20);
    dataset_destroy(ds);
    /* by name, with the published MNIST constants */
    struct data_config cfg = {.name = "mnist"};
    snprintf(cfg.path, sizeof cfg.path, "%s", dir);
    T_OK(dataset_open(&cfg, DATA_SPLIT_TEST, &ds, &e));
    struct data_norm mnist;
    T_OK(data_norm_preset("mnist", &mnist, &e));
    bool ok = idx_content_ok(ds, &mnist);
    dataset_destroy(ds);
    T_CHECK(ok);
    T_CHECK(dataset_idx_open_dir(img, "mnist", DATA_SPLIT_TRAIN, &o, &ds, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
}

/* dataset.samples on a real dataset: a 2,048-sample request on a 3,000-sample train split
 * trains on exactly the first 2,048 samples in file order (an epoch of the loader, as the
 * trainer configures it, delivers 2,048 and never an index past them), the test split
 * stays whole, 0 keeps everything, and asking for more than the file has is refused naming
 * the field. */
static void test_idx_samples_subset(void)
{
    struct err e;
    char dir[128], img[256], lab[256];
    test_tmp_path(dir, sizeof dir, "subsetdir");
    T_CHECK(mkdir(dir, 0700) == 0);
    struct idx_spec i = idx_good_images, l = idx_good_labels;
    i.dims[0] = l.dims[0] = 3000;
    snprintf(img, sizeof img, "%s/train-images-idx3-ubyte", dir);
    snprintf(lab, sizeof lab, "%s/train-labels-idx1-ubyte", dir);
    T_CHECK(idx_write(img, &i) == 0 && idx_write(lab, &l) == 0);
    snprintf(img, sizeof img, "%s/t10k-images-idx3-ubyte", dir);
    snprintf(lab, sizeof lab, "%s/t10k-labels-idx1-ubyte", dir);
    T_CHECK(idx_write_pair(img, lab, false, false) == 0);
    struct data_config cfg = {.name = "mnist", .samples = 2048};
    snprintf(cfg.path, sizeof cfg.path, "%s", dir);
    struct dataset *ds;
    T_OK(dataset_open(&cfg, DATA_SPLIT_TRAIN, &ds, &e));
    T_EQ_INT(ds->n, 2048);
    struct data_norm mnist;
    bool ok = data_norm_preset("mnist", &mnist, &e) == 0 &&
              idx_content_ok(ds, &mnist); /* the first 2,048 of the file, in its order */
    struct loader_config lc;
    loader_config_default(&lc);
    lc.batch_size = 64;
    lc.epochs = 1;
    lc.prefetch = 0;
    lc.drop_last_batch = true;
    struct loader *ld = NULL;
    int64_t seen = 0, max_index = -1;
    const struct data_batch *b;
    if (loader_create(ds, &lc, &ld, &e) == 0) {
        while (loader_next(ld, &b, &e) == 1) {
            seen += b->n;
            for (int k = 0; k < b->n; k++)
                max_index = b->index[k] > max_index ? b->index[k] : max_index;
        }
    }
    loader_destroy(ld);
    int64_t outside = 2048;
    struct data_draw d = {1, 0, 0};
    float x[20];
    int32_t y;
    int fill_rc = dataset_fill(ds, &outside, 1, &d, x, &y, &e);
    dataset_destroy(ds);
    T_CHECK(ok);
    T_EQ_INT(seen, 2048);
    T_EQ_INT(max_index, 2047);
    T_CHECK(fill_rc != 0);
    T_OK(dataset_open(&cfg, DATA_SPLIT_TEST, &ds, &e));
    T_EQ_INT(ds->n, 20);
    dataset_destroy(ds);
    cfg.samples = 0;
    T_OK(dataset_open(&cfg, DATA_SPLIT_TRAIN, &ds, &e));
    T_EQ_INT(ds->n, 3000);
    dataset_destroy(ds);
    cfg.samples = 3001;
    T_CHECK(dataset_open(&cfg, DATA_SPLIT_TRAIN, &ds, &e) < 0);
    T_CHECK(ds == NULL);
    T_EQ_STR(e.field, "dataset.samples");
    T_CHECK_MSG(strstr(e.msg, "3001") && strstr(e.msg, "3000"), "%s", e.msg);
}

struct idx_bad {
    const char *what;
    bool labels; /* the bad file is the labels file */
    struct idx_spec spec;
    enum err_code code;
    const char *needle;
};

static const struct idx_bad idx_bad_cases[] = {
    {"bad magic",
     false,
     {{1, 2, 8, 3}, {20, 5, 4, 0}, 0, -1, -1, false},
     ERR_INVALID,
     "not an idx file"},
    {"float elements",
     false,
     {{0, 0, 0x0d, 3}, {20, 5, 4, 0}, 0, -1, -1, false},
     ERR_INVALID,
     "0x0d (float)"},
    {"labels as images",
     false,
     {{0, 0, 8, 1}, {20, 0, 0, 0}, 0, -1, -1, false},
     ERR_INVALID,
     "1 dimensions where images"},
    {"four dims",
     false,
     {{0, 0, 8, 4}, {20, 5, 4, 1}, 0, -1, -1, false},
     ERR_INVALID,
     "4 dimensions"},
    {"images as labels",
     true,
     {{0, 0, 8, 3}, {20, 5, 4, 0}, 0, -1, -1, false},
     ERR_INVALID,
     "3 dimensions where labels"},
    {"no images",
     false,
     {{0, 0, 8, 3}, {0, 5, 4, 0}, 0, -1, -1, false},
     ERR_INVALID,
     "0 images"},
    {"zero side",
     false,
     {{0, 0, 8, 3}, {20, 0, 4, 0}, 0, -1, -1, false},
     ERR_INVALID,
     "image side 0"},
    {"huge side",
     false,
     {{0, 0, 8, 3}, {20, 5000, 4, 0}, 0, -1, -1, false},
     ERR_INVALID,
     "image side 5000"},
    {"absurd bytes",
     false,
     {{0, 0, 8, 3}, {0x7fffffff, 4096, 4096, 0}, 0, -1, -1, false},
     ERR_TOO_LARGE,
     "over the"},
    {"absurd count",
     false,
     {{0, 0, 8, 3}, {0xffffffff, 28, 28, 0}, 0, -1, -1, false},
     ERR_INVALID,
     "expected 1 to"},
    {"truncated pixels",
     false,
     {{0, 0, 8, 3}, {20, 5, 4, 0}, -7, -1, -1, false},
     ERR_INVALID,
     "truncated"},
    {"truncated pixels gz",
     false,
     {{0, 0, 8, 3}, {20, 5, 4, 0}, -7, -1, -1, true},
     ERR_INVALID,
     "truncated"},
    {"trailing bytes",
     false,
     {{0, 0, 8, 3}, {20, 5, 4, 0}, 3, -1, -1, false},
     ERR_INVALID,
     "3 bytes of trailing data"},
    {"truncated header",
     false,
     {{0, 0, 8, 3}, {20, 5, 4, 0}, 0, 10, -1, false},
     ERR_INVALID,
     "truncated idx header"},
    {"two bytes",
     false,
     {{0, 0, 8, 3}, {20, 5, 4, 0}, 0, 2, -1, false},
     ERR_INVALID,
     "too short"},
    {"empty", false, {{0, 0, 8, 3}, {20, 5, 4, 0}, 0, 0, -1, false}, ERR_INVALID, "0 bytes"},
    {"count mismatch",
     true,
     {{0, 0, 8, 1}, {19, 0, 0, 0}, 0, -1, -1, false},
     ERR_INVALID,
     "holds 19 labels but"},
    {"truncated labels",
     true,
     {{0, 0, 8, 1}, {20, 0, 0, 0}, -1, -1, -1, false},
     ERR_INVALID,
     "truncated"},
    {"label out of range",
     true,
     {{0, 0, 8, 1}, {20, 0, 0, 0}, 0, -1, 7, true},
     ERR_INVALID,
     "sample 7 has label 10"},
};

static void test_idx_malformed(void)
{
    struct err e;
    char img[128], lab[128];
    test_tmp_path(img, sizeof img, "bad-images");
    test_tmp_path(lab, sizeof lab, "bad-labels");
    struct data_image_opts o = {0};
    for (size_t i = 0; i < sizeof idx_bad_cases / sizeof idx_bad_cases[0]; i++) {
        const struct idx_bad *c = &idx_bad_cases[i];
        T_CHECK(idx_write_pair(img, lab, false, false) == 0);
        T_CHECK(idx_write(c->labels ? lab : img, &c->spec) == 0);
        struct dataset *ds = NULL;
        err_clear(&e);
        int rc = dataset_idx_open(img, lab, "bad", DATA_SPLIT_TRAIN, &o, &ds, &e);
        dataset_destroy(ds);
        T_CHECK_MSG(rc < 0 && ds == NULL, "%s: accepted", c->what);
        T_CHECK_MSG(e.code == c->code, "%s: code %s: %s", c->what, err_code_name(e.code),
                    e.msg);
        T_CHECK_MSG(strstr(e.msg, c->needle), "%s: \"%s\" not in: %s", c->what, c->needle,
                    e.msg);
        T_CHECK_MSG(strstr(e.msg, c->labels ? lab : img), "%s: no file name in: %s", c->what,
                    e.msg);
    }
}

/* Rewrites path (a gzip file) through edit, then expects opening the pair to fail with a
 * gzip error that names the file. */
static bool gz_broken_fails(const char *img, const char *lab, size_t keep, size_t flip_at,
                            size_t flip_len, const char *needle, struct err *e)
{
    size_t n = 0;
    FILE *f = fopen(img, "rb");
    uint8_t *p = malloc(1 << 16);
    n = fread(p, 1, 1 << 16, f);
    fclose(f);
    for (size_t k = flip_at; k < flip_at + flip_len && k < n; k++)
        p[k] ^= 0xa5;
    write_bytes(img, p, keep < n ? keep : n, false);
    free(p);
    struct data_image_opts o = {0};
    struct dataset *ds = NULL;
    int rc = dataset_idx_open(img, lab, "bad", DATA_SPLIT_TRAIN, &o, &ds, e);
    dataset_destroy(ds);
    return rc < 0 && e->code == ERR_INVALID && strstr(e->msg, img) && strstr(e->msg, needle);
}

static void test_idx_gzip_corrupt(void)
{
    struct err e;
    char img[128], lab[128];
    test_tmp_path(img, sizeof img, "gzbad-images");
    test_tmp_path(lab, sizeof lab, "gzbad-labels");
    struct stat st;
    T_CHECK(idx_write_pair(img, lab, true, false) == 0 && stat(img, &st) == 0);
    size_t gzlen = (size_t)st.st_size;
    T_CHECK_MSG(gzlen > 40, "%zu", gzlen);
    /* deflate data scrambled in the middle */
    T_CHECK(idx_write_pair(img, lab, true, false) == 0);
    T_CHECK_MSG(gz_broken_fails(img, lab, SIZE_MAX, 14, 12, "gzip", &e), "%s", e.msg);
    /* only the CRC32 of the trailer altered */
    T_CHECK(idx_write_pair(img, lab, true, false) == 0);
    T_CHECK_MSG(gz_broken_fails(img, lab, SIZE_MAX, gzlen - 8, 1, "corrupt gzip", &e), "%s",
                e.msg);
    /* cut in the middle of the stream, and after the gzip header alone */
    T_CHECK(idx_write_pair(img, lab, true, false) == 0);
    T_CHECK_MSG(gz_broken_fails(img, lab, gzlen / 2, 0, 0, "truncated", &e), "%s", e.msg);
    T_CHECK(idx_write_pair(img, lab, true, false) == 0);
    T_CHECK_MSG(gz_broken_fails(img, lab, 10, 0, 0, "truncated", &e), "%s", e.msg);
    /* an unknown compression method in the header */
    T_CHECK(idx_write_pair(img, lab, true, false) == 0);
    T_CHECK_MSG(gz_broken_fails(img, lab, SIZE_MAX, 2, 1, "gzip", &e), "%s", e.msg);
}

static void test_read_file_limits(void)
{
    struct err e;
    char plain[128], gz[128], dir[128];
    test_tmp_path(plain, sizeof plain, "big-plain");
    test_tmp_path(gz, sizeof gz, "big-gz");
    uint8_t *zeros = calloc(1, 1 << 20);
    T_CHECK(write_bytes(plain, zeros, 5000, false) == 0);
    T_CHECK(write_bytes(gz, zeros, 1 << 20, true) == 0); /* a small gzip bomb */
    free(zeros);
    uint8_t *p = NULL;
    size_t n;
    T_CHECK(data_read_file(plain, 4999, &p, &n, NULL, &e) < 0);
    T_EQ_INT(e.code, ERR_TOO_LARGE);
    T_CHECK(p == NULL);
    T_OK(data_read_file(plain, 5000, &p, &n, NULL, &e));
    T_EQ_INT(n, 5000);
    free(p);
    T_CHECK(data_read_file(gz, 100000, &p, &n, NULL, &e) < 0);
    T_EQ_INT(e.code, ERR_TOO_LARGE);
    T_CHECK_MSG(strstr(e.msg, "after decompression"), "%s", e.msg);
    test_tmp_path(dir, sizeof dir, "");
    T_CHECK(data_read_file(dir, 100, &p, &n, NULL, &e) < 0);
    T_CHECK_MSG(strstr(e.msg, "not a regular file"), "%s", e.msg);
    test_tmp_path(dir, sizeof dir, "missing");
    T_CHECK(data_read_file(dir, 100, &p, &n, NULL, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    T_CHECK(strstr(e.msg, dir));
}

/* --- normalization ------------------------------------------------------------------ */

static void test_norm_presets(void)
{
    struct err e;
    struct data_norm n;
    T_OK(data_norm_preset("fashion-mnist", &n, &e));
    T_CHECK(n.channels == 1 && n.mean[0] == 0.2860f && n.std[0] == 0.3530f);
    T_OK(data_norm_preset("mnist", &n, &e));
    T_CHECK(n.channels == 1 && n.mean[0] == 0.1307f && n.std[0] == 0.3081f);
    T_OK(data_norm_preset("cifar10", &n, &e));
    T_CHECK(n.channels == 3 && n.mean[0] == 0.4914f && n.mean[1] == 0.4822f &&
            n.mean[2] == 0.4465f);
    T_CHECK(n.std[0] == 0.2470f && n.std[1] == 0.2435f && n.std[2] == 0.2616f);
    T_OK(data_norm_preset("none", &n, &e));
    T_EQ_INT(n.channels, 0);
    T_CHECK(data_norm_preset("imagenet", &n, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    /* checks: channel count, std > 0 and finite */
    T_OK(data_norm_preset("cifar10", &n, &e));
    T_OK(data_norm_check(&n, 3, &e));
    T_CHECK(data_norm_check(&n, 1, &e) < 0);
    T_EQ_STR(e.field, "dataset.norm");
    n.std[1] = 0.0f;
    T_CHECK(data_norm_check(&n, 3, &e) < 0);
    n.std[1] = NAN;
    T_CHECK(data_norm_check(&n, 3, &e) < 0);
    /* the wrong channel count is refused when opening */
    char img[128], lab[128];
    test_tmp_path(img, sizeof img, "norm-images");
    test_tmp_path(lab, sizeof lab, "norm-labels");
    T_CHECK(idx_write_pair(img, lab, false, false) == 0);
    struct data_image_opts o = {0};
    T_OK(data_norm_preset("cifar10", &o.norm, &e));
    struct dataset *ds;
    T_CHECK(dataset_idx_open(img, lab, "x", DATA_SPLIT_TRAIN, &o, &ds, &e) < 0);
    T_CHECK_MSG(strstr(e.msg, "3 channels, the data has 1"), "%s", e.msg);
}

static void test_open_by_name_errors(void)
{
    struct err e;
    struct dataset *ds;
    struct data_config cfg = {.name = "imagenet"};
    T_CHECK(dataset_open(&cfg, DATA_SPLIT_TRAIN, &ds, &e) < 0);
    T_EQ_STR(e.field, "dataset.name");
    struct data_config mn = {.name = "mnist"};
    T_CHECK(dataset_open(&mn, DATA_SPLIT_TRAIN, &ds, &e) < 0);
    T_EQ_STR(e.field, "dataset.path");
    struct data_config cf = {.name = "cifar10", .path = "/nonexistent/cifar"};
    T_CHECK(dataset_open(&cf, DATA_SPLIT_TEST, &ds, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    T_CHECK_MSG(strstr(e.msg, "/nonexistent/cifar/test_batch.bin"), "%s", e.msg);
}

/* --- CIFAR-10 binary ---------------------------------------------------------------- */

#define REC 3073

static uint8_t cifar_byte(size_t sample, size_t k)
{
    return (uint8_t)(sample * 101 + k * 7 + k / 1024);
}

/* nrec records of samples first..first+nrec-1, label (sample * 3) % 10. */
static int cifar_write(const char *path, size_t first, size_t nrec, long delta)
{
    size_t len = nrec * REC;
    uint8_t *p = calloc(1, len + 16);
    for (size_t r = 0; r < nrec; r++) {
        p[r * REC] = (uint8_t)((first + r) * 3 % 10);
        for (size_t k = 0; k < 3072; k++)
            p[r * REC + 1 + k] = cifar_byte(first + r, k);
    }
    int rc = write_bytes(path, p, (size_t)((long)len + delta), false);
    free(p);
    return rc;
}

static void test_cifar_parse(void)
{
    struct err e;
    char a[128], b[128];
    test_tmp_path(a, sizeof a, "cifar-a.bin");
    test_tmp_path(b, sizeof b, "cifar-b.bin");
    T_CHECK(cifar_write(a, 0, 3, 0) == 0 && cifar_write(b, 3, 2, 0) == 0);
    const char *paths[] = {a, b};
    struct data_image_opts o = {0};
    T_OK(data_norm_preset("cifar10", &o.norm, &e));
    struct dataset *ds;
    T_OK(dataset_cifar_open(paths, 2, DATA_SPLIT_TRAIN, &o, &ds, &e));
    T_EQ_INT(ds->n, 5);
    T_CHECK(ds->c == 3 && ds->h == 32 && ds->w == 32 && ds->classes == 10);
    T_EQ_STR(ds->name, "cifar10");
    float *x = malloc(5 * 3072 * sizeof *x);
    int32_t y[5];
    int64_t idx[5] = {4, 0, 3, 1, 2};
    struct data_draw d = {3, 0, 0};
    int rc = dataset_fill(ds, idx, 5, &d, x, y, &e);
    dataset_destroy(ds);
    bool ok = rc == 0;
    for (int i = 0; ok && i < 5; i++) {
        ok = y[i] == idx[i] * 3 % 10;
        for (int k = 0; ok && k < 3072; k++) {
            int c = k / 1024;
            float v = ((float)cifar_byte((size_t)idx[i], (size_t)k) / 255.0f - o.norm.mean[c]) /
                      o.norm.std[c];
            ok = x[i * 3072 + k] == v;
        }
    }
    free(x);
    T_CHECK(ok);
}

static void test_cifar_directory(void)
{
    struct err e;
    char dir[128], p[256];
    test_tmp_path(dir, sizeof dir, "cifar-10-batches-bin");
    T_CHECK(mkdir(dir, 0700) == 0);
    for (int i = 1; i <= 5; i++) {
        snprintf(p, sizeof p, "%s/data_batch_%d.bin", dir, i);
        T_CHECK(cifar_write(p, (size_t)i - 1, 1, 0) == 0);
    }
    snprintf(p, sizeof p, "%s/test_batch.bin", dir);
    T_CHECK(cifar_write(p, 100, 2, 0) == 0);
    struct data_config cfg = {.name = "cifar10", .augment = true};
    snprintf(cfg.path, sizeof cfg.path, "%s", dir);
    struct dataset *ds;
    T_OK(dataset_open(&cfg, DATA_SPLIT_TRAIN, &ds, &e));
    T_EQ_INT(ds->n, 5);
    dataset_destroy(ds);
    T_OK(dataset_open(&cfg, DATA_SPLIT_TEST, &ds, &e));
    T_EQ_INT(ds->n, 2);
    T_EQ_INT(ds->split, DATA_SPLIT_TEST);
    dataset_destroy(ds);
    snprintf(p, sizeof p, "%s/data_batch_3.bin", dir);
    T_CHECK(unlink(p) == 0);
    T_CHECK(dataset_open(&cfg, DATA_SPLIT_TRAIN, &ds, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    T_CHECK_MSG(strstr(e.msg, "data_batch_3.bin"), "%s", e.msg);
}

static void test_cifar_malformed(void)
{
    struct err e;
    char good[128], bad[128];
    test_tmp_path(good, sizeof good, "cifar-good.bin");
    test_tmp_path(bad, sizeof bad, "cifar-bad.bin");
    T_CHECK(cifar_write(good, 0, 2, 0) == 0);
    const char *paths[] = {good, bad};
    struct data_image_opts o = {0};
    struct dataset *ds = NULL;
    static const struct {
        size_t nrec;
        long delta;
        const char *needle;
    } cases[] = {
        {0, 0, "empty file"},
        {2, -5, "1 records and 3068 bytes over"},
        {1, 1, "1 records and 1 bytes over"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        T_CHECK(cifar_write(bad, 0, cases[i].nrec, cases[i].delta) == 0);
        T_CHECK(dataset_cifar_open(paths, 2, DATA_SPLIT_TRAIN, &o, &ds, &e) < 0);
        T_CHECK(ds == NULL);
        T_EQ_INT(e.code, ERR_INVALID);
        T_CHECK_MSG(strstr(e.msg, cases[i].needle) && strstr(e.msg, bad), "%s", e.msg);
    }
    /* a label byte past the classes, in the third record */
    T_CHECK(cifar_write(bad, 0, 4, 0) == 0);
    FILE *f = fopen(bad, "r+b");
    T_CHECK(f && fseek(f, 2 * REC, SEEK_SET) == 0 && fputc(200, f) == 200);
    fclose(f);
    T_CHECK(dataset_cifar_open(paths, 2, DATA_SPLIT_TRAIN, &o, &ds, &e) < 0);
    T_CHECK_MSG(strstr(e.msg, "record 2 has label 200") && strstr(e.msg, bad), "%s", e.msg);
    T_CHECK(dataset_cifar_open(paths, 0, DATA_SPLIT_TRAIN, &o, &ds, &e) < 0);
    T_EQ_STR(e.field, "dataset.path");
    o.augment.pad = -1;
    T_CHECK(dataset_cifar_open(paths, 1, DATA_SPLIT_TRAIN, &o, &ds, &e) < 0);
    T_EQ_STR(e.field, "dataset.augment");
}

/* --- augmentation ------------------------------------------------------------------- */

/* A 1-channel 4x4 image with values 1..16 and the identity table lut[b] = b. */
static void aug_fixture(uint8_t img[16], float lut[256])
{
    for (int i = 0; i < 16; i++)
        img[i] = (uint8_t)(i + 1);
    for (int b = 0; b < 256; b++)
        lut[b] = (float)b;
}

static void test_augment_transform_known_image(void)
{
    uint8_t img[16];
    float lut[256], out[16];
    aug_fixture(img, lut);
    /* pad 1, offsets (1, 1): the crop is the image itself */
    data_images_transform(img, 1, 4, 4, lut, 1, 1, 1, false, out);
    for (int i = 0; i < 16; i++)
        T_EQ_INT(out[i], i + 1);
    /* offsets (0, 0): shifted down and right by one, zero padding on top and left */
    static const float down_right[16] = {0, 0, 0, 0, 0, 1, 2, 3, 0, 5, 6, 7, 0, 9, 10, 11};
    data_images_transform(img, 1, 4, 4, lut, 1, 0, 0, false, out);
    T_CHECK(memcmp(out, down_right, sizeof out) == 0);
    /* offsets (2, 2): shifted up and left */
    static const float up_left[16] = {6, 7, 8, 0, 10, 11, 12, 0, 14, 15, 16, 0, 0, 0, 0, 0};
    data_images_transform(img, 1, 4, 4, lut, 1, 2, 2, false, out);
    T_CHECK(memcmp(out, up_left, sizeof out) == 0);
    /* flip only */
    static const float flipped[16] = {4, 3, 2, 1, 8, 7, 6, 5, 12, 11, 10, 9, 16, 15, 14, 13};
    data_images_transform(img, 1, 4, 4, lut, 1, 1, 1, true, out);
    T_CHECK(memcmp(out, flipped, sizeof out) == 0);
    data_images_transform(img, 1, 4, 4, lut, 0, 0, 0, true, out);
    T_CHECK(memcmp(out, flipped, sizeof out) == 0);
    /* crop then flip (torchvision's order): crop (1, 2) then mirror */
    static const float crop_flip[16] = {0, 8, 7, 6, 0, 12, 11, 10, 0, 16, 15, 14, 0, 0, 0, 0};
    data_images_transform(img, 1, 4, 4, lut, 1, 2, 2, true, out);
    T_CHECK(memcmp(out, crop_flip, sizeof out) == 0);
}

/* The expected augmented CIFAR sample, computed here from the drawn offsets. */
static float aug_expect(size_t sample, int c, int y, int x, int dy, int dx, bool flip,
                        const struct data_norm *n)
{
    int sy = y + dy - 4, sx = (flip ? 31 - x : x) + dx - 4;
    uint8_t b = sy >= 0 && sy < 32 && sx >= 0 && sx < 32
                    ? cifar_byte(sample, (size_t)(c * 1024 + sy * 32 + sx))
                    : 0;
    return ((float)b / 255.0f - n->mean[c]) / n->std[c];
}

static bool aug_sample_ok(const float *x, size_t sample, const struct data_draw *d,
                          const struct data_image_opts *o)
{
    int dy, dx;
    bool flip;
    data_augment_draw(&o->augment, d, (int64_t)sample, &dy, &dx, &flip);
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < 32; y++)
            for (int xx = 0; xx < 32; xx++)
                if (x[c * 1024 + y * 32 + xx] !=
                    aug_expect(sample, c, y, xx, dy, dx, flip, &o->norm))
                    return false;
    return true;
}

/* A 4-sample CIFAR file opened with the CIFAR recipe (pad 4, flip, published norm). */
static int aug_open(const char *name, enum data_split split, struct data_image_opts *o,
                    struct dataset **ds, struct err *e)
{
    char a[128];
    test_tmp_path(a, sizeof a, name);
    const char *paths[] = {a};
    *o = (struct data_image_opts){.augment = {4, true}};
    if (cifar_write(a, 0, 4, 0) < 0 || data_norm_preset("cifar10", &o->norm, e) < 0)
        return -1;
    return dataset_cifar_open(paths, 1, split, o, ds, e);
}

static void test_augment_fill(void)
{
    struct err e;
    struct data_image_opts o;
    struct dataset *ds;
    T_OK(aug_open("cifar-aug.bin", DATA_SPLIT_TRAIN, &o, &ds, &e));
    float *x = malloc(2 * 3072 * sizeof *x), *x2 = malloc(3072 * sizeof *x2);
    int32_t y[2];
    int64_t idx[2] = {2, 3}, one = 3;
    bool seen_dy[9] = {0}, seen_dx[9] = {0}, seen_flip[2] = {0}, ok = true, varied = false;
    for (int64_t epoch = 0; ok && epoch < 300; epoch++) {
        struct data_draw d = {11, epoch, 999};
        ok = dataset_fill(ds, idx, 2, &d, x, y, &e) == 0 && aug_sample_ok(x, 2, &d, &o) &&
             aug_sample_ok(x + 3072, 3, &d, &o);
        /* the same sample alone, at another step, gets the same crop: keyed by sample */
        d.step = epoch;
        ok = ok && dataset_fill(ds, &one, 1, &d, x2, y, &e) == 0 &&
             memcmp(x2, x + 3072, 3072 * sizeof *x2) == 0;
        int dy, dx;
        bool flip;
        data_augment_draw(&o.augment, &d, 2, &dy, &dx, &flip);
        seen_dy[dy] = seen_dx[dx] = seen_flip[flip] = true;
        varied = varied || dy != 4 || dx != 4 || flip;
    }
    dataset_destroy(ds);
    free(x);
    free(x2);
    T_CHECK(ok);
    T_CHECK(varied);
    for (int i = 0; i < 9; i++)
        T_CHECK_MSG(seen_dy[i] && seen_dx[i], "offset %d never drawn", i);
    T_CHECK(seen_flip[0] && seen_flip[1]);
}

/* data_augment_draw's values for a few (seed, epoch, sample): the framework engines'
 * loaders draw the same crop and flip (engines/ddpb_data.py augment_draw, checked against
 * these values by tests/integration/test_engines.py), so a change here must change both. */
static void test_augment_draw_values(void)
{
    static const struct {
        uint64_t seed;
        int64_t epoch, sample;
        int dy, dx;
        bool flip;
    } want[] = {{1, 0, 0, 5, 1, true},
                {1, 1, 2, 5, 5, false},
                {2, 1, 3, 5, 1, false},
                {3, 0, 1, 8, 6, true},
                {3, 1, 3, 5, 2, true}};
    struct data_augment aug = {.pad = 4, .flip = true};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        struct data_draw d = {want[i].seed, want[i].epoch, 0};
        int dy, dx;
        bool flip;
        data_augment_draw(&aug, &d, want[i].sample, &dy, &dx, &flip);
        T_CHECK_MSG(dy == want[i].dy && dx == want[i].dx && flip == want[i].flip,
                    "case %zu: %d %d %d", i, dy, dx, (int)flip);
    }
}

/* The same augmentation options on the test split leave images as they are. */
static void test_augment_train_split_only(void)
{
    struct err e;
    struct data_image_opts o;
    struct dataset *ds;
    T_OK(aug_open("cifar-test.bin", DATA_SPLIT_TEST, &o, &ds, &e));
    float *x = malloc(3072 * sizeof *x);
    int32_t y;
    int64_t idx = 1;
    bool ok = true;
    for (int64_t epoch = 0; ok && epoch < 20; epoch++) {
        struct data_draw d = {5, epoch, epoch};
        ok = dataset_fill(ds, &idx, 1, &d, x, &y, &e) == 0;
        for (int k = 0; ok && k < 3072; k++)
            ok = x[k] == aug_expect(1, k / 1024, k % 1024 / 32, k % 32, 4, 4, false, &o.norm);
    }
    dataset_destroy(ds);
    free(x);
    T_CHECK(ok);
}

/* --- byte-level text ------------------------------------------------------------------ */

/* Byte k of the generated text files: every value 0..255 occurs. */
static uint8_t text_byte(size_t k)
{
    return (uint8_t)(k * 131 + (k >> 3));
}

static int text_write(const char *path, size_t len, bool gz)
{
    uint8_t *p = malloc(len + 1);
    for (size_t k = 0; k < len; k++)
        p[k] = text_byte(k);
    int rc = write_bytes(path, p, len, gz);
    free(p);
    return rc;
}

/* Every sample of ds (filled in reverse order) is the window of the generated file that
 * starts at byte (first + i) * T: x its first T bytes, y the T bytes after each. */
static bool text_windows_ok(const struct dataset *ds, int64_t first)
{
    size_t t_len = (size_t)ds->w, n = (size_t)ds->n;
    float *x = malloc(n * t_len * sizeof *x);
    int32_t *y = malloc(n * t_len * sizeof *y);
    int64_t *idx = calloc(n, sizeof *idx);
    for (size_t i = 0; i < n; i++)
        idx[i] = (int64_t)(n - 1 - i); /* reversed: a fill follows the indices */
    struct data_draw d = {1, 0, 0};
    struct err e;
    bool ok = dataset_fill(ds, idx, (int)n, &d, x, y, &e) == 0;
    for (size_t i = 0; ok && i < n; i++) {
        size_t start = (size_t)(first + idx[i]) * t_len;
        for (size_t t = 0; ok && t < t_len; t++)
            ok = x[i * t_len + t] == (float)text_byte(start + t) &&
                 y[i * t_len + t] == text_byte(start + t + 1);
    }
    free(x);
    free(y);
    free(idx);
    return ok;
}

/* "abcdefghij" with 3 tokens per sample: windows "abcd", "defg", "ghij" (3 of them: 9
 * bytes after the first, 3 per window); the last is the test split. */
static void test_text_windows_literal(void)
{
    struct err e;
    char path[128];
    test_tmp_path(path, sizeof path, "abc.txt");
    T_CHECK(write_bytes(path, (const uint8_t *)"abcdefghij", 10, false) == 0);
    struct dataset *tr, *te;
    T_OK(dataset_text_open(path, 3, DATA_SPLIT_TRAIN, 0, &tr, &e));
    if (dataset_text_open(path, 3, DATA_SPLIT_TEST, 0, &te, &e) < 0) {
        dataset_destroy(tr);
        T_CHECK_MSG(false, "%s", e.msg);
    }
    float x[6], xt[3];
    int32_t y[6], yt[3];
    int64_t idx[2] = {0, 1}, zero = 0;
    struct data_draw d = {1, 0, 0};
    int rc = dataset_fill(tr, idx, 2, &d, x, y, &e) |
             dataset_fill(te, &zero, 1, &d, xt, yt, &e);
    int64_t ntr = tr->n, nte = te->n;
    dataset_destroy(tr);
    dataset_destroy(te);
    T_OK(rc);
    T_EQ_INT(ntr, 2);
    T_EQ_INT(nte, 1);
    static const char *const want_x = "abcdef", *const want_y = "bcdefg";
    for (int k = 0; k < 6; k++) {
        T_EQ_INT(x[k], want_x[k]);
        T_EQ_INT(y[k], want_y[k]);
    }
    for (int k = 0; k < 3; k++) {
        T_EQ_INT(xt[k], "ghi"[k]);
        T_EQ_INT(yt[k], "hij"[k]);
    }
}

static void test_text_windows_and_split(void)
{
    struct err e;
    char path[128];
    test_tmp_path(path, sizeof path, "corpus.txt");
    /* 403 bytes, 4 tokens: (403 - 1) / 4 = 100 windows (the last 2 bytes are unused), 10
     * for the test split */
    T_CHECK(text_write(path, 403, false) == 0);
    struct dataset *ds;
    T_OK(dataset_text_open(path, 4, DATA_SPLIT_TRAIN, 0, &ds, &e));
    T_EQ_INT(ds->n, 90);
    T_CHECK(ds->c == 1 && ds->h == 1 && ds->w == 4);
    T_EQ_INT(ds->classes, 256);
    T_EQ_INT(ds->label_len, 4);
    T_EQ_INT(dataset_label_len(ds), 4);
    T_EQ_INT(dataset_sample_floats(ds), 4);
    T_EQ_STR(ds->name, "text");
    T_EQ_INT(ds->split, DATA_SPLIT_TRAIN);
    T_CHECK(!ds->reuse_batch);
    bool ok = text_windows_ok(ds, 0);
    dataset_destroy(ds);
    T_CHECK(ok);
    T_OK(dataset_text_open(path, 4, DATA_SPLIT_TEST, 0, &ds, &e));
    T_EQ_INT(ds->n, 10);
    T_EQ_INT(ds->split, DATA_SPLIT_TEST);
    ok = text_windows_ok(ds, 90);
    dataset_destroy(ds);
    T_CHECK(ok);
    /* the test split is the last 10 % of the windows, at least one */
    static const int64_t windows[] = {2, 9, 10, 19, 20, 101, 1234};
    for (size_t i = 0; i < sizeof windows / sizeof windows[0]; i++) {
        int64_t w = windows[i], want_test = w / 10 > 0 ? w / 10 : 1;
        T_CHECK(text_write(path, (size_t)w * 7 + 1 + i % 7, false) == 0);
        struct dataset *tr, *te;
        T_OK(dataset_text_open(path, 7, DATA_SPLIT_TRAIN, 0, &tr, &e));
        int64_t ntr = tr->n;
        dataset_destroy(tr);
        T_OK(dataset_text_open(path, 7, DATA_SPLIT_TEST, 0, &te, &e));
        ok = text_windows_ok(te, ntr);
        int64_t nte = te->n;
        dataset_destroy(te);
        T_CHECK_MSG(ntr == w - want_test && nte == want_test && ok,
                    "%lld windows: train %lld, test %lld", (long long)w, (long long)ntr,
                    (long long)nte);
    }
}

/* samples keeps the first train windows (by name too), leaves the test split whole and is
 * refused, naming the field, past the train split's size. */
static void test_text_samples(void)
{
    struct err e;
    char path[128];
    test_tmp_path(path, sizeof path, "samples.txt");
    T_CHECK(text_write(path, 403, false) == 0);
    struct dataset *ds;
    T_OK(dataset_text_open(path, 4, DATA_SPLIT_TRAIN, 5, &ds, &e));
    T_EQ_INT(ds->n, 5);
    bool ok = text_windows_ok(ds, 0);
    int64_t outside = 5;
    float x[4];
    int32_t y[4];
    struct data_draw d = {1, 0, 0};
    int fill_rc = dataset_fill(ds, &outside, 1, &d, x, y, &e);
    dataset_destroy(ds);
    T_CHECK(ok);
    T_CHECK(fill_rc != 0);
    T_OK(dataset_text_open(path, 4, DATA_SPLIT_TRAIN, 90, &ds, &e));
    T_EQ_INT(ds->n, 90);
    dataset_destroy(ds);
    T_OK(dataset_text_open(path, 4, DATA_SPLIT_TEST, 5, &ds, &e));
    T_EQ_INT(ds->n, 10);
    ok = text_windows_ok(ds, 90);
    dataset_destroy(ds);
    T_CHECK(ok);
    T_CHECK(dataset_text_open(path, 4, DATA_SPLIT_TRAIN, 91, &ds, &e) < 0);
    T_CHECK(ds == NULL);
    T_EQ_INT(e.code, ERR_INVALID);
    T_EQ_STR(e.field, "dataset.samples");
    T_CHECK_MSG(strstr(e.msg, "91") && strstr(e.msg, "90") && strstr(e.msg, path), "%s", e.msg);
    /* by name */
    struct data_config cfg = {.name = "text", .seq_len = 4, .samples = 7};
    snprintf(cfg.path, sizeof cfg.path, "%s", path);
    T_OK(dataset_open(&cfg, DATA_SPLIT_TRAIN, &ds, &e));
    T_EQ_INT(ds->n, 7);
    T_EQ_INT(dataset_label_len(ds), 4);
    ok = text_windows_ok(ds, 0);
    dataset_destroy(ds);
    T_CHECK(ok);
    T_OK(dataset_open(&cfg, DATA_SPLIT_TEST, &ds, &e));
    T_EQ_INT(ds->n, 10);
    dataset_destroy(ds);
    cfg.samples = 1000;
    T_CHECK(dataset_open(&cfg, DATA_SPLIT_TRAIN, &ds, &e) < 0);
    T_EQ_STR(e.field, "dataset.samples");
}

static void test_text_errors(void)
{
    struct err e;
    char path[128];
    test_tmp_path(path, sizeof path, "small.txt");
    struct dataset *ds = NULL;
    /* two windows of 4 + 1 bytes sharing one: 9 bytes at least */
    static const size_t lens[] = {0, 1, 8};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        T_CHECK(text_write(path, lens[i], false) == 0);
        T_CHECK(dataset_text_open(path, 4, DATA_SPLIT_TRAIN, 0, &ds, &e) < 0);
        T_CHECK(ds == NULL);
        T_EQ_INT(e.code, ERR_INVALID);
        T_CHECK_MSG(strstr(e.msg, path) && strstr(e.msg, "at least 9 bytes"), "%s", e.msg);
    }
    T_CHECK(text_write(path, 9, false) == 0);
    T_OK(dataset_text_open(path, 4, DATA_SPLIT_TEST, 0, &ds, &e));
    T_EQ_INT(ds->n, 1);
    dataset_destroy(ds);
    /* seq_len out of range */
    T_CHECK(dataset_text_open(path, 0, DATA_SPLIT_TRAIN, 0, &ds, &e) < 0);
    T_EQ_STR(e.field, "dataset.seq_len");
    T_CHECK(dataset_text_open(path, DATA_MAX_SIDE + 1, DATA_SPLIT_TRAIN, 0, &ds, &e) < 0);
    T_EQ_STR(e.field, "dataset.seq_len");
    /* missing file, a directory */
    test_tmp_path(path, sizeof path, "no-such.txt");
    T_CHECK(dataset_text_open(path, 4, DATA_SPLIT_TRAIN, 0, &ds, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    T_CHECK_MSG(strstr(e.msg, path), "%s", e.msg);
    T_CHECK(dataset_text_open(test_tmpdir(), 4, DATA_SPLIT_TRAIN, 0, &ds, &e) < 0);
    T_CHECK_MSG(strstr(e.msg, test_tmpdir()), "%s", e.msg);
    /* by name: a path is required; the error names the file */
    struct data_config cfg = {.name = "text", .seq_len = 4};
    T_CHECK(dataset_open(&cfg, DATA_SPLIT_TRAIN, &ds, &e) < 0);
    T_EQ_INT(e.code, ERR_INVALID);
    T_EQ_STR(e.field, "dataset.path");
    snprintf(cfg.path, sizeof cfg.path, "%s", path);
    T_CHECK(dataset_open(&cfg, DATA_SPLIT_TRAIN, &ds, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    cfg.seq_len = 0;
    T_CHECK(dataset_open(&cfg, DATA_SPLIT_TRAIN, &ds, &e) < 0);
    T_EQ_STR(e.field, "dataset.seq_len");
}

/* A gzipped file is read decompressed (as every format reads files): the same windows. */
static void test_text_gzip(void)
{
    struct err e;
    char path[128];
    test_tmp_path(path, sizeof path, "corpus.txt.gz");
    T_CHECK(text_write(path, 403, true) == 0);
    struct dataset *ds;
    T_OK(dataset_text_open(path, 4, DATA_SPLIT_TRAIN, 0, &ds, &e));
    T_EQ_INT(ds->n, 90);
    bool ok = text_windows_ok(ds, 0);
    dataset_destroy(ds);
    T_CHECK(ok);
}

/* A real corpus every Debian system has: the GPL-3 text from base-files (Essential: yes),
 * 35,149 bytes in 1024-token windows: train and test windows are the file's bytes. */
#define TEXT_SYSTEM_CORPUS "/usr/share/common-licenses/GPL-3"

static void test_text_system_corpus(void)
{
    struct err e;
    uint8_t *raw;
    size_t len;
    T_CHECK_MSG(data_read_file(TEXT_SYSTEM_CORPUS, 1u << 24, &raw, &len, NULL, &e) == 0,
                "%s (Debian's base-files ships it)", e.msg);
    enum { T = 1024 };
    struct dataset *tr = NULL, *te = NULL;
    bool ok = len > 2 * T + 1 &&
              dataset_text_open(TEXT_SYSTEM_CORPUS, T, DATA_SPLIT_TRAIN, 0, &tr, &e) == 0 &&
              dataset_text_open(TEXT_SYSTEM_CORPUS, T, DATA_SPLIT_TEST, 0, &te, &e) == 0;
    int64_t windows = (int64_t)(len - 1) / T;
    ok = ok && tr->n + te->n == windows && te->n == (windows / 10 > 0 ? windows / 10 : 1);
    float *x = malloc(T * sizeof *x);
    int32_t *y = malloc(T * sizeof *y);
    struct data_draw d = {1, 0, 0};
    for (int64_t i = 0; ok && i < windows; i++) {
        struct dataset *ds = i < tr->n ? tr : te;
        int64_t k = i < tr->n ? i : i - tr->n;
        ok = dataset_fill(ds, &k, 1, &d, x, y, &e) == 0;
        for (size_t t = 0; ok && t < T; t++)
            ok = x[t] == (float)raw[(size_t)i * T + t] && y[t] == raw[(size_t)i * T + t + 1];
    }
    dataset_destroy(tr);
    dataset_destroy(te);
    free(raw);
    free(x);
    free(y);
    T_CHECK_MSG(ok, "%zu bytes: %s", len, e.msg);
}

/* --- synthetic tokens --------------------------------------------------------------- */

static int tok_create(int t_len, int vocab, int64_t samples, bool fresh, struct dataset **ds,
                      struct err *e)
{
    struct data_synthetic_config sc = {.c = 1,
                                       .h = 1,
                                       .w = t_len,
                                       .classes = vocab,
                                       .samples = samples,
                                       .fresh = fresh,
                                       .tokens = true};
    return dataset_synthetic_create(&sc, ds, e);
}

/* Fills samples 0..n-1 of ds (x: n * T floats, y: n * T labels). */
static int tok_fill(const struct dataset *ds, int n, int64_t step, float *x, int32_t *y)
{
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    for (int i = 0; i < n; i++)
        idx[i] = i;
    struct data_draw d = {77, 0, step};
    struct err e;
    int rc = dataset_fill(ds, idx, n, &d, x, y, &e);
    free(idx);
    return rc;
}

/* Each sample is one sequence: y is x shifted by one, the ids are integers in the
 * vocabulary, and the last target is the sequence's next token (a set with one more token
 * per sample has it as its last input: the ids are drawn in order). */
static void test_synthetic_tokens_sequence(void)
{
    struct err e;
    enum { N = 400, T = 8, V = 50 };
    struct dataset *ds, *longer;
    T_OK(tok_create(T, V, N, false, &ds, &e));
    T_EQ_INT(ds->label_len, T);
    T_EQ_INT(dataset_label_len(ds), T);
    T_EQ_INT(dataset_sample_floats(ds), T);
    T_EQ_INT(ds->classes, V);
    T_CHECK(ds->reuse_batch);
    if (tok_create(T + 1, V, N, false, &longer, &e) < 0) {
        dataset_destroy(ds);
        T_CHECK_MSG(false, "%s", e.msg);
    }
    float *x = malloc(N * T * sizeof *x), *x9 = malloc(N * (T + 1) * sizeof *x9);
    int32_t *y = malloc(N * T * sizeof *y), *y9 = malloc(N * (T + 1) * sizeof *y9);
    int rc = tok_fill(ds, N, 0, x, y) | tok_fill(longer, N, 0, x9, y9);
    dataset_destroy(ds);
    dataset_destroy(longer);
    bool ok = rc == 0, in_range = true, shifted = true, prefix = true;
    int64_t hist[V] = {0};
    for (int i = 0; ok && i < N; i++) {
        const float *xi = x + i * T, *x9i = x9 + i * (T + 1);
        const int32_t *yi = y + i * T, *y9i = y9 + i * (T + 1);
        for (int t = 0; t < T; t++) {
            in_range = in_range && xi[t] >= 0 && xi[t] < V && xi[t] == (float)(int)xi[t] &&
                       yi[t] >= 0 && yi[t] < V;
            shifted = shifted && (t == T - 1 || yi[t] == (int32_t)xi[t + 1]);
            hist[yi[t]]++;
        }
        for (int t = 0; t <= T; t++)
            prefix = prefix && (t == T ? (float)yi[T - 1] == x9i[T] : xi[t] == x9i[t]) &&
                     (t == T || yi[t] == y9i[t]);
    }
    free(x);
    free(x9);
    free(y);
    free(y9);
    T_CHECK(ok);
    T_CHECK(in_range);
    T_CHECK(shifted);
    T_CHECK(prefix);
    /* uniform ids: N * T = 3200 targets, each id 64 +- 5 standard deviations (~40) */
    for (int v = 0; v < V; v++)
        T_CHECK_MSG(hist[v] > 24 && hist[v] < 104, "id %d: %lld", v, (long long)hist[v]);
}

/* Fixed mode: a sample's sequence depends on (seed, index) only; fresh: on the step too. */
static void test_synthetic_tokens_fixed_and_fresh(void)
{
    struct err e;
    enum { N = 16, T = 32, V = 50257 };
    struct dataset *fixed, *fresh;
    T_OK(tok_create(T, V, N, false, &fixed, &e));
    if (tok_create(T, V, N, true, &fresh, &e) < 0) {
        dataset_destroy(fixed);
        T_CHECK_MSG(false, "%s", e.msg);
    }
    T_CHECK(fixed->reuse_batch && !fresh->reuse_batch);
    float xa[N * T], xb[N * T], xc[N * T], one_x[T];
    int32_t ya[N * T], yb[N * T], yc[N * T], one_y[T];
    int64_t five = 5;
    struct data_draw d = {77, 3, 9};
    int rc = tok_fill(fixed, N, 1, xa, ya) | tok_fill(fixed, N, 2, xb, yb) |
             dataset_fill(fixed, &five, 1, &d, one_x, one_y, &e);
    bool fixed_same = rc == 0 && memcmp(xa, xb, sizeof xa) == 0 &&
                      memcmp(ya, yb, sizeof ya) == 0 &&
                      memcmp(one_x, xa + 5 * T, sizeof one_x) == 0 &&
                      memcmp(one_y, ya + 5 * T, sizeof one_y) == 0;
    rc |= tok_fill(fresh, N, 1, xa, ya) | tok_fill(fresh, N, 2, xb, yb) |
          tok_fill(fresh, N, 1, xc, yc);
    bool fresh_varies = rc == 0 && memcmp(xa, xb, sizeof xa) != 0 &&
                        memcmp(ya, yb, sizeof ya) != 0 && memcmp(xa, xc, sizeof xa) == 0 &&
                        memcmp(ya, yc, sizeof ya) == 0;
    dataset_destroy(fixed);
    dataset_destroy(fresh);
    T_CHECK(rc == 0);
    T_CHECK(fixed_same);
    T_CHECK(fresh_varies);
}

/* Token shapes the synthetic dataset refuses (10 samples): the field its error names and,
 * where set, a phrase of its message. */
static const struct {
    int c, h, w, classes;
    const char *field, *says;
} bad_tokens[] = {
    {3, 1, 8, 50, "dataset.shape", "1x1xT"},
    {1, 2, 8, 50, "dataset.shape", NULL},
    {1, 1, 8, 1, "dataset.classes", "at least 2"},
    {1, 1, 0, 50, "dataset.shape", NULL},
};

static void test_synthetic_tokens_errors(void)
{
    struct err e;
    struct dataset *ds;
    for (size_t i = 0; i < sizeof bad_tokens / sizeof *bad_tokens; i++) {
        struct data_synthetic_config sc = {.c = bad_tokens[i].c,
                                           .h = bad_tokens[i].h,
                                           .w = bad_tokens[i].w,
                                           .classes = bad_tokens[i].classes,
                                           .samples = 10,
                                           .tokens = true};
        T_CHECK_MSG(dataset_synthetic_create(&sc, &ds, &e) < 0, "case %zu", i);
        T_EQ_INT(e.code, ERR_INVALID);
        T_EQ_STR(e.field, bad_tokens[i].field);
        T_CHECK_MSG(!bad_tokens[i].says || strstr(e.msg, bad_tokens[i].says), "%s", e.msg);
    }
    /* image data keeps one label per sample; a format that never sets label_len gets 1 */
    struct data_synthetic_config sc = {
        .c = 3, .h = 4, .w = 4, .classes = 10, .samples = 10, .fresh = true};
    T_OK(dataset_synthetic_create(&sc, &ds, &e));
    int label_len = dataset_label_len(ds);
    dataset_destroy(ds);
    T_EQ_INT(label_len, 1);
    struct dataset unset = {.label_len = 0};
    T_EQ_INT(dataset_label_len(&unset), 1);
}

/* --- files nobody may read, inputs that must not blow up ------------------------- */

/* A gzip at path of head (hlen bytes) then n zero bytes, written in 1 MiB pieces: a few
 * hundred KB on disk for hundreds of MB inflated. */
static int gz_bomb(const char *path, const uint8_t *head, size_t hlen, size_t n)
{
    static uint8_t zeros[1 << 20];
    gzFile g = gzopen(path, "wb9");
    if (!g)
        return -1;
    bool ok = hlen == 0 || gzwrite(g, head, (unsigned)hlen) == (int)hlen;
    for (size_t k = 0; ok && k < n; k += sizeof zeros) {
        unsigned piece = (unsigned)(n - k < sizeof zeros ? n - k : sizeof zeros);
        ok = gzwrite(g, zeros, piece) == (int)piece;
    }
    return gzclose(g) == Z_OK && ok ? 0 : -1;
}

static void test_gzip_bombs_capped_by_purpose(void)
{
    struct err e = {0};
    char img[128], lab[128], txt[128], cif[128];
    struct dataset *ds = NULL;
    struct data_image_opts o = {0}, oc = {0};
    T_OK(data_norm_preset("fashion-mnist", &o.norm, &e));
    T_OK(data_norm_preset("cifar10", &oc.norm, &e));
    /* an idx header of 10 images of 28x28 (7840 bytes), inflating to 64 MiB */
    const uint8_t head[16] = {0, 0, 8, 3, 0, 0, 0, 10, 0, 0, 0, 28, 0, 0, 0, 28};
    test_tmp_path(img, sizeof img, "bomb-images");
    test_tmp_path(lab, sizeof lab, "bomb-labels");
    T_CHECK(gz_bomb(img, head, sizeof head, (size_t)64 << 20) == 0);
    T_CHECK(idx_write(lab, &idx_good_labels) == 0);
    T_CHECK(dataset_idx_open(img, lab, "mnist", DATA_SPLIT_TRAIN, &o, &ds, &e) < 0);
    T_EQ_INT(e.code, ERR_TOO_LARGE);
    T_CHECK_MSG(strstr(e.msg, "more than 7856 bytes") && strstr(e.msg, "header"), "%s", e.msg);
    /* text: past its stated limit (256 MiB) */
    test_tmp_path(txt, sizeof txt, "bomb.txt");
    T_CHECK(gz_bomb(txt, NULL, 0, ((size_t)256 << 20) + 4096) == 0);
    err_clear(&e);
    T_CHECK(dataset_text_open(txt, 16, DATA_SPLIT_TRAIN, 0, &ds, &e) < 0);
    T_EQ_INT(e.code, ERR_TOO_LARGE);
    T_CHECK_MSG(strstr(e.msg, "after decompression"), "%s", e.msg);
    /* CIFAR: past 60000 records (label 0, black pixels: valid records on their own) */
    test_tmp_path(cif, sizeof cif, "bomb-cifar.bin");
    T_CHECK(gz_bomb(cif, NULL, 0, (size_t)60001 * 3073) == 0);
    const char *paths[] = {cif};
    err_clear(&e);
    T_CHECK(dataset_cifar_open(paths, 1, DATA_SPLIT_TRAIN, &oc, &ds, &e) < 0);
    T_EQ_INT(e.code, ERR_TOO_LARGE);
    unlink(img);
    unlink(txt);
    unlink(cif);
}

static void test_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "  FAIL: an open blocked (a FIFO?)\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
    _exit(1);
}

/* A FIFO fails at once (a blocked open would be ended by the alarm, failing the binary),
 * a symlink to a readable file is not followed. */
static void test_fifo_and_symlink(void)
{
    struct err e = {0};
    char fifo[128], link[128], real[128];
    test_tmp_path(fifo, sizeof fifo, "fifo");
    test_tmp_path(link, sizeof link, "link");
    test_tmp_path(real, sizeof real, "real.txt");
    T_CHECK(mkfifo(fifo, 0600) == 0);
    T_CHECK(text_write(real, 4096, false) == 0);
    T_CHECK(symlink(real, link) == 0);
    signal(SIGALRM, test_alarm);
    alarm(10);
    uint8_t *p = NULL;
    size_t n = 0;
    int rf = data_read_file(fifo, 100, &p, &n, NULL, &e);
    alarm(0);
    T_EQ_INT(rf, -1);
    T_CHECK_MSG(strstr(e.msg, "not a regular file"), "%s", e.msg);
    err_clear(&e);
    T_CHECK(data_read_file(link, 1 << 20, &p, &n, NULL, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    T_CHECK_MSG(strstr(e.msg, "not found or not allowed"), "%s", e.msg);
    unlink(fifo);
    unlink(link);
    unlink(real);
}

/* DDPB_DATA_DIRS (the daemon's --data-dir): a file beneath it opens (through a symlinked
 * folder that stays beneath too); one outside, one missing and a symlink out of it all
 * fail alike, naming dataset.path. */
static void test_data_dirs_boundary(void)
{
    struct err e = {0};
    char in[128], out[128], inside[192], outside[192], missing[192], escape[192], alias[192];
    char realin[PATH_MAX];
    test_tmp_path(in, sizeof in, "allowed");
    test_tmp_path(out, sizeof out, "elsewhere");
    T_CHECK(mkdir(in, 0755) == 0 && mkdir(out, 0755) == 0 && realpath(in, realin));
    snprintf(inside, sizeof inside, "%s/a.txt", in);
    snprintf(outside, sizeof outside, "%s/b.txt", out);
    snprintf(missing, sizeof missing, "%s/none.txt", in);
    snprintf(escape, sizeof escape, "%s/escape", in);
    snprintf(alias, sizeof alias, "%s/alias", in);
    T_CHECK(text_write(inside, 4096, false) == 0 && text_write(outside, 4096, false) == 0);
    T_CHECK(symlink(out, escape) == 0 && symlink(realin, alias) == 0);
    setenv("DDPB_DATA_DIRS", realin, 1);
    struct data_config cfg = {.name = "text", .seq_len = 16};
    const char *bad[] = {outside, missing, "/etc/passwd", NULL};
    char via_escape[256], via_alias[256];
    snprintf(via_escape, sizeof via_escape, "%s/b.txt", escape);
    snprintf(via_alias, sizeof via_alias, "%s/a.txt", alias);
    bad[3] = via_escape;
    struct dataset *ds = NULL;
    bool ok = true;
    for (size_t i = 0; i < 4 && ok; i++) {
        snprintf(cfg.path, sizeof cfg.path, "%s", bad[i]);
        err_clear(&e);
        ok = dataset_open(&cfg, DATA_SPLIT_TRAIN, &ds, &e) < 0 && e.code == ERR_NOT_FOUND &&
             strcmp(e.field, "dataset.path") == 0 && strstr(e.msg, "not found or not allowed");
        if (!ok)
            fprintf(stderr, "  %s: %s\n", bad[i], e.msg);
    }
    snprintf(cfg.path, sizeof cfg.path, "%s", via_alias);
    int rc = dataset_open(&cfg, DATA_SPLIT_TRAIN, &ds, &e);
    unsetenv("DDPB_DATA_DIRS");
    T_CHECK(ok);
    T_CHECK_MSG(rc == 0, "%s", e.msg);
    T_EQ_INT(ds->n, (4096 - 1) / 16 - (4096 - 1) / 16 / 10);
    dataset_destroy(ds);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_idx_plain_and_gz);
    TEST_RUN(test_idx_gzip_by_magic_not_name);
    TEST_RUN(test_idx_directory);
    TEST_RUN(test_idx_samples_subset);
    TEST_RUN(test_idx_malformed);
    TEST_RUN(test_idx_gzip_corrupt);
    TEST_RUN(test_read_file_limits);
    TEST_RUN(test_norm_presets);
    TEST_RUN(test_open_by_name_errors);
    TEST_RUN(test_cifar_parse);
    TEST_RUN(test_cifar_directory);
    TEST_RUN(test_cifar_malformed);
    TEST_RUN(test_augment_transform_known_image);
    TEST_RUN(test_augment_fill);
    TEST_RUN(test_augment_train_split_only);
    TEST_RUN(test_text_windows_literal);
    TEST_RUN(test_text_windows_and_split);
    TEST_RUN(test_text_samples);
    TEST_RUN(test_text_errors);
    TEST_RUN(test_text_gzip);
    TEST_RUN(test_text_system_corpus);
    TEST_RUN(test_synthetic_tokens_sequence);
    TEST_RUN(test_synthetic_tokens_fixed_and_fresh);
    TEST_RUN(test_synthetic_tokens_errors);
    TEST_RUN(test_gzip_bombs_capped_by_purpose);
    TEST_RUN(test_fifo_and_symlink);
    TEST_RUN(test_data_dirs_boundary);
    TEST_RUN(test_augment_draw_values);
    return test_end();
}
