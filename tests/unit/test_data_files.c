/* Unit tests for the per-sample image files format (worker/data/files.c) and its codecs
 * (worker/data/codec.c) on images the tests make: PNG round trips exactly (gray, RGB, gray
 * read as RGB), JPEG closely at quality 95 (4:4:4) with the exact shape, the header probe,
 * corrupt, truncated, wrong-size and alpha data refused; the writer read back through
 * dataset_files_open (manifest order, labels, byte / 255 values, reads through a storage),
 * the ImageFolder scan without a manifest (sorted classes and files, other files ignored),
 * manifest lines refused with their line number, a file of another size failing the fill
 * that reads it, and the augmentation giving the same floats as the in-memory images
 * dataset over the same bytes. Inputs that must not blow up: a progressive JPEG of more
 * scans than the cap, a PNG header of huge sides, a sample file past its shape's bound,
 * each a named error; and no manifest bytes in a manifest error. */
#include <ftw.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdio.h>
/* jpeglib.h after stdio.h and stddef.h, which it uses without including */
#include <jpeglib.h>
#include <png.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "tests/unit/test.h"
#include "worker/data/codec.h"
#include "worker/data/convert.h"
#include "worker/data/dataset.h"
#include "worker/data/images.h"
#include "worker/data/storage.h"

/* A made-up image: a smooth wave (so JPEG keeps it close, as it keeps a photograph) plus
 * a little texture (so PNG's exactness means something), different per seed. */
static void make_image(uint8_t *chw, int c, int h, int w, int seed)
{
    for (int ch = 0; ch < c; ch++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                chw[((size_t)ch * h + y) * w + x] =
                    (uint8_t)(120.0 + 60.0 * sin(0.35 * x + 0.25 * y + 0.9 * seed + 1.3 * ch) +
                              (x * 7 + y * 3 + seed) % 3);
}

static int write_text(const char *path, const char *s)
{
    return test_write_file(path, (const uint8_t *)s, strlen(s));
}

/* Encodes a made-up image into path. */
static int write_image(const char *path, enum data_image_codec codec, int c, int h, int w,
                       int seed)
{
    uint8_t px[3 * 64 * 64];
    make_image(px, c, h, w, seed);
    uint8_t *enc;
    size_t len;
    struct err e;
    if (data_image_encode(codec, 95, px, c, h, w, &enc, &len, &e) < 0)
        return -1;
    int rc = test_write_file(path, enc, len);
    free(enc);
    return rc;
}

static void mkdirs(const char *path)
{
    char p[512];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            mkdir(p, 0755);
            *s = '/';
        }
    mkdir(p, 0755);
}

static const struct data_image_opts plain_opts = {{0}, {0, false}, 0};

/* --- codecs ------------------------------------------------------------------------------ */

static void png_roundtrip(int c, int h, int w)
{
    uint8_t px[3 * 20 * 20], back[3 * 20 * 20];
    make_image(px, c, h, w, 7);
    uint8_t *enc;
    size_t len;
    struct err e;
    T_OK(data_image_encode(DATA_CODEC_PNG, 0, px, c, h, w, &enc, &len, &e));
    T_CHECK(len > 8 && enc[1] == 'P' && enc[2] == 'N' && enc[3] == 'G');
    int rc = data_image_decode(enc, len, "mem.png", c, h, w, back, &e);
    free(enc);
    T_CHECK_MSG(rc == 0, "%s", e.msg);
    T_CHECK(memcmp(px, back, (size_t)c * h * w) == 0);
}

static void test_png_roundtrip_exact(void)
{
    png_roundtrip(1, 5, 7);
    if (test_state.case_failed)
        return;
    png_roundtrip(3, 6, 9);
    if (test_state.case_failed)
        return;
    /* a gray file read as RGB: every channel plane is the gray plane */
    uint8_t g[6 * 9], rgb[3 * 6 * 9];
    make_image(g, 1, 6, 9, 3);
    uint8_t *enc;
    size_t len;
    struct err e;
    T_OK(data_image_encode(DATA_CODEC_PNG, 0, g, 1, 6, 9, &enc, &len, &e));
    int rc = data_image_decode(enc, len, "gray.png", 3, 6, 9, rgb, &e);
    free(enc);
    T_CHECK_MSG(rc == 0, "%s", e.msg);
    for (int ch = 0; ch < 3; ch++)
        T_CHECK(memcmp(rgb + ch * 54, g, 54) == 0);
}

static double jpeg_mean_abs_error(int c, int h, int w, int quality, int *fc, int *fh, int *fw)
{
    uint8_t px[3 * 32 * 32], back[3 * 32 * 32];
    make_image(px, c, h, w, 11);
    uint8_t *enc;
    size_t len;
    struct err e;
    if (data_image_encode(DATA_CODEC_JPEG, quality, px, c, h, w, &enc, &len, &e) < 0)
        return 1e9;
    int rc = data_image_probe(enc, len, "mem.jpg", fc, fh, fw, &e);
    if (rc == 0)
        rc = data_image_decode(enc, len, "mem.jpg", c, h, w, back, &e);
    free(enc);
    if (rc < 0)
        return 1e9;
    double sum = 0;
    for (size_t k = 0; k < (size_t)c * h * w; k++)
        sum += fabs((double)px[k] - (double)back[k]);
    return sum / (double)((size_t)c * h * w);
}

/* The sampling factors in the frame header (SOF0..2) of an RGB JPEG: 0x11 for every
 * component is 4:4:4. */
static bool jpeg_is_444(const uint8_t *p, size_t len)
{
    for (size_t m = 2; m + 18 < len; m++)
        if (p[m] == 0xff && p[m + 1] >= 0xc0 && p[m + 1] <= 0xc2)
            return p[m + 9] == 3 && p[m + 11] == 0x11 && p[m + 14] == 0x11 && p[m + 17] == 0x11;
    return false;
}

static void test_jpeg_roundtrip_close(void)
{
    int fc, fh, fw;
    double rgb = jpeg_mean_abs_error(3, 24, 32, 95, &fc, &fh, &fw);
    T_CHECK_MSG(rgb < 2.0, "RGB q95 mean abs error %.3f", rgb);
    T_EQ_INT(fc, 3);
    T_EQ_INT(fh, 24);
    T_EQ_INT(fw, 32);
    double gray = jpeg_mean_abs_error(1, 13, 17, 95, &fc, &fh, &fw);
    T_CHECK_MSG(gray < 2.0, "gray q95 mean abs error %.3f", gray);
    T_EQ_INT(fc, 1);
    T_EQ_INT(fh, 13);
    T_EQ_INT(fw, 17);
    double q100 = jpeg_mean_abs_error(3, 24, 32, 100, &fc, &fh, &fw);
    T_CHECK_MSG(q100 <= rgb, "q100 %.3f worse than q95 %.3f", q100, rgb);
    uint8_t px[3 * 16 * 16], *enc;
    size_t len;
    struct err e;
    make_image(px, 3, 16, 16, 0);
    T_OK(data_image_encode(DATA_CODEC_JPEG, 95, px, 3, 16, 16, &enc, &len, &e));
    bool s444 = jpeg_is_444(enc, len);
    free(enc);
    T_CHECK(s444);
    fprintf(stderr, "  mean abs error at q95: RGB %.3f, gray %.3f; q100 %.3f\n", rgb, gray,
            q100);
}

static void test_probe(void)
{
    uint8_t px[3 * 10 * 12];
    make_image(px, 3, 10, 12, 1);
    struct {
        enum data_image_codec codec;
        int c;
    } cases[] = {
        {DATA_CODEC_PNG, 1}, {DATA_CODEC_PNG, 3}, {DATA_CODEC_JPEG, 1}, {DATA_CODEC_JPEG, 3}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        uint8_t *enc;
        size_t len;
        struct err e;
        T_OK(data_image_encode(cases[k].codec, 90, px, cases[k].c, 10, 12, &enc, &len, &e));
        int c, h, w;
        int rc = data_image_probe(enc, len, "probe", &c, &h, &w, &e);
        free(enc);
        T_CHECK_MSG(rc == 0, "%s", e.msg);
        T_EQ_INT(c, cases[k].c);
        T_EQ_INT(h, 10);
        T_EQ_INT(w, 12);
    }
}

/* decode must fail with ERR_INVALID and a message naming `what` (and holding `needle`) */
static bool decode_fails(const uint8_t *buf, size_t len, int c, int h, int w,
                         const char *needle)
{
    uint8_t out[3 * 16 * 16];
    struct err e;
    err_clear(&e);
    if (data_image_decode(buf, len, "the-file", c, h, w, out, &e) == 0)
        return false;
    if (e.code != ERR_INVALID || !strstr(e.msg, "the-file") ||
        (needle && !strstr(e.msg, needle))) {
        fprintf(stderr, "  unexpected error: %s\n", e.msg);
        return false;
    }
    return true;
}

static void codec_errors_for(enum data_image_codec codec)
{
    uint8_t px[3 * 16 * 16];
    make_image(px, 3, 16, 16, 5);
    uint8_t *enc;
    size_t len;
    struct err e;
    T_OK(data_image_encode(codec, 95, px, 3, 16, 16, &enc, &len, &e));
    bool ok = decode_fails(enc, len, 3, 16, 15, "expected 3x16x15") && /* wrong size */
              decode_fails(enc, len, 3, 15, 16, "expected 3x15x16") &&
              decode_fails(enc, len, 1, 16, 16, "expected 1x16x16") && /* RGB as gray */
              decode_fails(enc, len / 2, 3, 16, 16, NULL) &&           /* truncated */
              decode_fails(enc, 12, 3, 16, 16, NULL);                  /* just the header */
    /* flipped bytes in the pixel data: zlib's check fails, libjpeg warns of corrupt data */
    if (ok) {
        for (size_t k = len * 3 / 4; k < len * 3 / 4 + 16; k++)
            enc[k] ^= 0x5a;
        ok = decode_fails(enc, len, 3, 16, 16, "corrupt");
    }
    free(enc);
    T_CHECK(ok);
}

static void test_codec_errors(void)
{
    codec_errors_for(DATA_CODEC_PNG);
    if (test_state.case_failed)
        return;
    codec_errors_for(DATA_CODEC_JPEG);
    if (test_state.case_failed)
        return;
    /* an RGBA PNG: refused, not composited onto some background */
    png_image im = {.version = PNG_IMAGE_VERSION, .width = 2, .height = 2};
    im.format = PNG_FORMAT_RGBA;
    uint8_t rgba[16] = {1, 2, 3, 255, 4, 5, 6, 128}, png[512];
    png_alloc_size_t plen = sizeof png;
    T_CHECK(png_image_write_to_memory(&im, png, &plen, 0, rgba, 0, NULL));
    T_CHECK(decode_fails(png, plen, 3, 2, 2, "alpha"));
    const uint8_t junk[] = "GIF89a not an image we take";
    T_CHECK(decode_fails(junk, sizeof junk, 1, 4, 4, "not a PNG or JPEG"));
    T_CHECK(decode_fails(junk, 0, 1, 4, 4, "not a PNG or JPEG"));
    int c, h, w;
    struct err e;
    T_CHECK(data_image_probe(junk, sizeof junk, "junk", &c, &h, &w, &e) < 0);
    T_EQ_INT(e.code, ERR_INVALID);
    uint8_t px[16] = {0}, *enc = NULL;
    size_t len;
    T_CHECK(data_image_encode(DATA_CODEC_JPEG, 0, px, 1, 4, 4, &enc, &len, &e) < 0);
    T_EQ_STR(e.field, "dataset.quality");
    T_CHECK(data_image_encode(DATA_CODEC_PNG, 0, px, 2, 2, 4, &enc, &len, &e) < 0);
    T_EQ_INT(e.code, ERR_INVALID);
    T_CHECK(enc == NULL);
}

/* --- the writer and the dataset ---------------------------------------------------------- */

#define WN 9
static const int32_t w_labels[WN] = {2, 0, 1, 2, 2, 0, 4, 1, 0}; /* not sorted, 3 unused */

/* Writes WN made-up 3 x h x w samples (seed = index) with w_labels into dir's split. */
static int write_split(const char *dir, enum data_split split, enum data_image_codec codec,
                       int h, int w, struct err *e)
{
    struct data_files_writer *fw;
    if (data_files_writer_create(dir, split, codec, 95, 3, h, w, &fw, e) < 0)
        return -1;
    uint8_t px[3 * 64 * 64];
    for (int i = 0; i < WN; i++) {
        make_image(px, 3, h, w, i);
        if (data_files_writer_add(fw, px, w_labels[i], e) < 0) {
            data_files_writer_abort(fw);
            return -1;
        }
    }
    return data_files_writer_finish(fw, e);
}

static void test_writer_roundtrip(void)
{
    char dir[128], path[256];
    test_tmp_path(dir, sizeof dir, "written/deeper"); /* made with its parents */
    struct err e;
    T_OK(write_split(dir, DATA_SPLIT_TRAIN, DATA_CODEC_PNG, 6, 10, &e));
    snprintf(path, sizeof path, "%s/train.txt.tmp", dir);
    T_CHECK(access(path, F_OK) != 0);
    snprintf(path, sizeof path, "%s/train/00004/00000006.png", dir);
    T_CHECK(access(path, F_OK) == 0);
    snprintf(path, sizeof path, "%s/train/00004/00000006.png.tmp", dir);
    T_CHECK(access(path, F_OK) != 0);

    struct data_storage_profile prof;
    struct data_storage *st;
    T_OK(data_storage_profile_get("local", &prof, &e));
    T_OK(data_storage_create(&prof, &st, &e));
    struct dataset *ds;
    int rc = dataset_files_open(dir, "my-files", DATA_SPLIT_TRAIN, &plain_opts, st, &ds, &e);
    if (rc < 0)
        data_storage_destroy(st);
    T_CHECK_MSG(rc == 0, "%s", e.msg);
    bool shape = ds->n == WN && ds->c == 3 && ds->h == 6 && ds->w == 10 && ds->classes == 5 &&
                 !strcmp(ds->name, "my-files") && ds->split == DATA_SPLIT_TRAIN;
    int64_t idx[WN];
    for (int i = 0; i < WN; i++)
        idx[i] = WN - 1 - i; /* reversed: the fill follows the indices */
    float x[WN * 3 * 60];
    int32_t y[WN];
    struct data_draw d = {1, 0, 0};
    rc = dataset_fill(ds, idx, WN, &d, x, y, &e);
    struct data_storage_stats stats;
    data_storage_get_stats(st, &stats);
    dataset_destroy(ds);
    data_storage_destroy(st);
    T_CHECK_MSG(rc == 0, "%s", e.msg);
    T_CHECK(shape);
    T_CHECK_MSG(stats.requests >= WN, "%lld requests through the storage",
                (long long)stats.requests);
    uint8_t px[3 * 60];
    for (int i = 0; i < WN; i++) {
        T_EQ_INT(y[i], w_labels[idx[i]]);
        make_image(px, 3, 6, 10, (int)idx[i]);
        for (int k = 0; k < 3 * 60; k++)
            T_CHECK_MSG(x[i * 180 + k] == (float)px[k] / 255.0f, "sample %d value %d", i, k);
    }
}

static void test_writer_jpeg_and_manifest_order(void)
{
    char dir[128], path[256];
    test_tmp_path(dir, sizeof dir, "jpeg");
    struct err e;
    T_OK(write_split(dir, DATA_SPLIT_TEST, DATA_CODEC_JPEG, 16, 16, &e));
    snprintf(path, sizeof path, "%s/test.txt", dir);
    FILE *f = fopen(path, "r");
    T_CHECK(f != NULL);
    char line[128];
    bool order = fgets(line, sizeof line, f) && !strcmp(line, "test/00002/00000000.jpg 2\n") &&
                 fgets(line, sizeof line, f) && !strcmp(line, "test/00000/00000001.jpg 0\n");
    fclose(f);
    T_CHECK(order);
    struct dataset *ds;
    T_OK(dataset_files_open(dir, "j", DATA_SPLIT_TEST, &plain_opts, NULL, &ds, &e));
    float x[WN * 3 * 256];
    int32_t y[WN];
    int64_t idx[WN] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
    struct data_draw d = {1, 0, 0};
    int rc = dataset_fill(ds, idx, WN, &d, x, y, &e);
    dataset_destroy(ds);
    T_CHECK_MSG(rc == 0, "%s", e.msg);
    uint8_t px[3 * 256];
    double sum = 0;
    for (int i = 0; i < WN; i++) {
        T_EQ_INT(y[i], w_labels[i]);
        make_image(px, 3, 16, 16, i);
        for (int k = 0; k < 3 * 256; k++)
            sum += fabs(x[i * 768 + k] * 255.0 - px[k]);
    }
    double mae = sum / (WN * 768.0);
    T_CHECK_MSG(mae < 2.0, "mean abs error %.3f", mae);
}

static void test_writer_errors(void)
{
    char dir[128], path[256];
    test_tmp_path(dir, sizeof dir, "werr");
    struct data_files_writer *fw;
    struct err e;
    T_CHECK(data_files_writer_create(dir, DATA_SPLIT_TRAIN, DATA_CODEC_JPEG, 101, 3, 4, 4, &fw,
                                     &e) < 0);
    T_EQ_STR(e.field, "dataset.quality");
    T_CHECK(data_files_writer_create(dir, DATA_SPLIT_TRAIN, DATA_CODEC_PNG, 0, 4, 4, 4, &fw,
                                     &e) < 0);
    T_OK(data_files_writer_create(dir, DATA_SPLIT_TRAIN, DATA_CODEC_PNG, 0, 1, 4, 4, &fw, &e));
    uint8_t px[16] = {1};
    bool bad = data_files_writer_add(fw, px, -1, &e) < 0 &&
               data_files_writer_add(fw, px, DATA_MAX_CLASSES, &e) < 0;
    bool good = data_files_writer_add(fw, px, 3, &e) == 0;
    data_files_writer_abort(fw); /* no manifest: the split is not there */
    T_CHECK(bad && good);
    snprintf(path, sizeof path, "%s/train.txt", dir);
    T_CHECK(access(path, F_OK) != 0);
    snprintf(path, sizeof path, "%s/train.txt.tmp", dir);
    T_CHECK(access(path, F_OK) != 0);
    struct dataset *ds;
    snprintf(path, sizeof path, "%s/test.txt", dir); /* a stale manifest goes at create */
    T_CHECK(write_text(path, "x.png 0\n") == 0);
    T_OK(data_files_writer_create(dir, DATA_SPLIT_TEST, DATA_CODEC_PNG, 0, 1, 4, 4, &fw, &e));
    T_CHECK(access(path, F_OK) != 0);
    T_CHECK(data_files_writer_finish(fw, &e) < 0); /* nothing written: no manifest */
    T_CHECK(dataset_files_open(dir, "w", DATA_SPLIT_TEST, &plain_opts, NULL, &ds, &e) < 0);
    T_CHECK_MSG(strstr(e.msg, "no class folders") != NULL, "%s", e.msg);
}

/* dir/train/<class>/ folders, no manifest: classes and files in byte order */
static void test_imagefolder_scan(void)
{
    char dir[128], path[256];
    test_tmp_path(dir, sizeof dir, "folder");
    const char *files[] = {"cat/b.png", "cat/a.JPG", "ant/z.png", "ant/m.png", "Bee/q.jpeg"};
    for (int k = 0; k < 5; k++) {
        snprintf(path, sizeof path, "%s/train/%s", dir, files[k]);
        *strrchr(path, '/') = '\0';
        mkdirs(path);
        snprintf(path, sizeof path, "%s/train/%s", dir, files[k]);
        enum data_image_codec codec = strstr(files[k], ".png") ? DATA_CODEC_PNG
                                                               : DATA_CODEC_JPEG;
        T_CHECK(write_image(path, codec, 1, 5, 5, k) == 0);
    }
    snprintf(path, sizeof path, "%s/train/ant/notes.txt", dir); /* not an image: skipped */
    T_CHECK(write_text(path, "hello") == 0);
    snprintf(path, sizeof path, "%s/train/stray.png", dir); /* not in a class folder */
    T_CHECK(write_image(path, DATA_CODEC_PNG, 1, 5, 5, 0) == 0);

    struct dataset *ds;
    struct err e;
    T_OK(dataset_files_open(dir, "folder", DATA_SPLIT_TRAIN, &plain_opts, NULL, &ds, &e));
    int64_t n = ds->n;
    int classes = ds->classes;
    float x[5 * 25];
    int32_t y[5];
    int64_t idx[5] = {0, 1, 2, 3, 4};
    struct data_draw d = {1, 0, 0};
    int rc = n == 5 ? dataset_fill(ds, idx, 5, &d, x, y, &e) : -1;
    dataset_destroy(ds);
    T_EQ_INT(n, 5);
    T_EQ_INT(classes, 3);
    T_CHECK_MSG(rc == 0, "%s", e.msg);
    /* "Bee" < "ant" < "cat" in byte order; within a class, sorted names */
    const int want_label[5] = {0, 1, 1, 2, 2}, want_seed[5] = {4, 3, 2, 1, 0};
    uint8_t px[25];
    for (int i = 0; i < 5; i++) {
        T_EQ_INT(y[i], want_label[i]);
        make_image(px, 1, 5, 5, want_seed[i]);
        bool png = want_seed[i] == 0 || want_seed[i] == 2 || want_seed[i] == 3;
        for (int k = 0; k < 25; k++)
            T_CHECK_MSG(fabs(x[i * 25 + k] * 255.0f - px[k]) <= (png ? 0.001 : 12.0),
                        "sample %d value %d", i, k);
    }
    /* an empty class folder is refused, as torchvision refuses it */
    snprintf(path, sizeof path, "%s/train/dog", dir);
    mkdirs(path);
    T_CHECK(dataset_files_open(dir, "folder", DATA_SPLIT_TRAIN, &plain_opts, NULL, &ds, &e) <
            0);
    T_CHECK_MSG(strstr(e.msg, "/dog") != NULL, "%s", e.msg);
    /* dataset.classes below the folder count */
    rmdir(path);
    struct data_image_opts two = plain_opts;
    two.classes = 2;
    T_CHECK(dataset_files_open(dir, "folder", DATA_SPLIT_TRAIN, &two, NULL, &ds, &e) < 0);
    /* the test split has neither manifest nor folder */
    T_CHECK(dataset_files_open(dir, "folder", DATA_SPLIT_TEST, &plain_opts, NULL, &ds, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
}

/* A manifest whose line 3 is `bad` must be refused naming line 3. */
static bool manifest_refused(const char *dir, const char *bad, int classes)
{
    char path[256], text[512];
    snprintf(path, sizeof path, "%s/train.txt", dir);
    snprintf(text, sizeof text, "a.png 0\nsub/b.png 1\n%s\nsub/b.png 2\n", bad);
    if (write_text(path, text) < 0)
        return false;
    struct data_image_opts o = plain_opts;
    o.classes = classes;
    struct dataset *ds = NULL;
    struct err e;
    if (dataset_files_open(dir, "m", DATA_SPLIT_TRAIN, &o, NULL, &ds, &e) == 0) {
        dataset_destroy(ds);
        fprintf(stderr, "  accepted line \"%s\"\n", bad);
        return false;
    }
    if (e.code != ERR_INVALID || !strstr(e.msg, "train.txt: line 3")) {
        fprintf(stderr, "  line \"%s\": %s\n", bad, e.msg);
        return false;
    }
    return true;
}

static void test_manifest_errors(void)
{
    char dir[128], path[256];
    test_tmp_path(dir, sizeof dir, "manifest");
    snprintf(path, sizeof path, "%s/sub", dir);
    mkdirs(path);
    snprintf(path, sizeof path, "%s/a.png", dir);
    T_CHECK(write_image(path, DATA_CODEC_PNG, 3, 4, 4, 0) == 0);
    snprintf(path, sizeof path, "%s/sub/b.png", dir);
    T_CHECK(write_image(path, DATA_CODEC_PNG, 3, 4, 4, 1) == 0);
    const char *bad[] = {"a.png",
                         "a.png x",
                         "a.png -1",
                         "a.png 1.5",
                         "/etc/passwd 0",
                         "../a.png 0",
                         "sub/../a.png 0",
                         "",
                         " 0",
                         "a.png  0",
                         "a.png 7",
                         "a.png 123456789012",
                         "a\x01.png 0"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        T_CHECK_MSG(manifest_refused(dir, bad[k], k == 10 ? 5 : 0), "case %zu", k);
    /* the good lines alone: CRLF endings, a space in a path, classes = max label + 1 */
    snprintf(path, sizeof path, "%s/sub/with space.png", dir);
    T_CHECK(write_image(path, DATA_CODEC_PNG, 3, 4, 4, 2) == 0);
    snprintf(path, sizeof path, "%s/train.txt", dir);
    T_CHECK(write_text(path, "a.png 0\r\nsub/with space.png 6\r\nsub/b.png 1") == 0);
    struct dataset *ds;
    struct err e;
    T_OK(dataset_files_open(dir, "m", DATA_SPLIT_TRAIN, &plain_opts, NULL, &ds, &e));
    int64_t n = ds->n;
    int classes = ds->classes;
    int64_t idx[1] = {1};
    float x[48];
    int32_t y[1];
    struct data_draw d = {1, 0, 0};
    int rc = dataset_fill(ds, idx, 1, &d, x, y, &e);
    dataset_destroy(ds);
    T_EQ_INT(n, 3);
    T_EQ_INT(classes, 7);
    T_CHECK_MSG(rc == 0, "%s", e.msg);
    T_EQ_INT(y[0], 6);
    T_CHECK(write_text(path, "") == 0);
    T_CHECK(dataset_files_open(dir, "m", DATA_SPLIT_TRAIN, &plain_opts, NULL, &ds, &e) < 0);
    T_CHECK_MSG(strstr(e.msg, "no samples") != NULL, "%s", e.msg);
}

/* The first file gives the shape; another size, a missing file or junk fails that fill. */
/* dir/train.txt holding manifest, then the train split opened (NULL with e on failure). */
static struct dataset *open_listed(const char *dir, const char *manifest, struct err *e)
{
    char path[256];
    snprintf(path, sizeof path, "%s/train.txt", dir);
    struct dataset *ds = NULL;
    if (write_text(path, manifest) < 0)
        err_set(e, ERR_IO, "test", "cannot write %s", path);
    else
        dataset_files_open(dir, "s", DATA_SPLIT_TRAIN, &plain_opts, NULL, &ds, e);
    return ds;
}

/* One fill of sample i alone (up to 3x8x8 floats); its rc, e cleared first. */
static int fill_sample(struct dataset *ds, int64_t i, struct err *e)
{
    float x[3 * 64];
    int32_t y[1];
    struct data_draw d = {1, 0, 0};
    err_clear(e);
    return dataset_fill(ds, &i, 1, &d, x, y, e);
}

static void test_fill_errors_name_the_file(void)
{
    char dir[128], path[256];
    test_tmp_path(dir, sizeof dir, "sizes");
    mkdirs(dir);
    const char *names[] = {"ok.png", "big.png", "gray.jpg", "junk.png"};
    snprintf(path, sizeof path, "%s/ok.png", dir);
    T_CHECK(write_image(path, DATA_CODEC_PNG, 3, 8, 8, 0) == 0);
    snprintf(path, sizeof path, "%s/big.png", dir);
    T_CHECK(write_image(path, DATA_CODEC_PNG, 3, 8, 9, 1) == 0);
    snprintf(path, sizeof path, "%s/gray.jpg", dir); /* gray read as RGB: fine */
    T_CHECK(write_image(path, DATA_CODEC_JPEG, 1, 8, 8, 2) == 0);
    snprintf(path, sizeof path, "%s/junk.png", dir);
    T_CHECK(write_text(path, "not really a png") == 0);
    struct err e;
    struct dataset *ds = open_listed(
        dir, "ok.png 0\nbig.png 1\ngray.jpg 0\njunk.png 1\nmissing.png 0\n", &e);
    T_CHECK_MSG(ds != NULL, "%s", e.msg);
    bool ok = true;
    for (int64_t i = 0; i < 5 && ok; i++) {
        int rc = fill_sample(ds, i, &e);
        if (i == 0 || i == 2)
            ok = rc == 0;
        else
            ok = rc < 0 && strstr(e.msg, i == 4 ? "missing.png" : names[i]) &&
                 e.code == (i == 4 ? ERR_NOT_FOUND : ERR_INVALID);
        if (!ok)
            fprintf(stderr, "  sample %lld: rc %d: %s\n", (long long)i, rc, e.msg);
    }
    dataset_destroy(ds);
    T_CHECK(ok);
}

/* The same bytes through the files format and the in-memory images dataset give the same
 * augmented, normalized floats: the files format is the same data. */
static void test_augment_matches_in_memory(void)
{
    enum { H = 12, W = 10, PER = 3 * H * W };
    char dir[128];
    test_tmp_path(dir, sizeof dir, "augment");
    struct err e;
    T_OK(write_split(dir, DATA_SPLIT_TRAIN, DATA_CODEC_PNG, H, W, &e));
    struct data_image_opts o = {.augment = {4, true}};
    T_OK(data_norm_preset("cifar10", &o.norm, &e));
    struct dataset *files, *mem;
    T_OK(dataset_files_open(dir, "files", DATA_SPLIT_TRAIN, &o, NULL, &files, &e));
    struct data_images_src src = {.block = malloc(WN * PER),
                                  .labels = malloc(WN),
                                  .n = WN,
                                  .c = 3,
                                  .h = H,
                                  .w = W,
                                  .classes = 5};
    T_CHECK(src.block && src.labels);
    for (int i = 0; i < WN; i++) {
        make_image(src.block + i * PER, 3, H, W, i);
        src.labels[i] = (uint8_t)w_labels[i];
    }
    src.pixels = src.block;
    int rc = data_images_create(&src, "mem", DATA_SPLIT_TRAIN, &o, "mem", &mem, &e);
    if (rc < 0)
        dataset_destroy(files);
    T_CHECK_MSG(rc == 0, "%s", e.msg);
    static float xf[WN * PER], xm[WN * PER];
    int32_t yf[WN], ym[WN];
    int64_t idx[WN] = {3, 1, 4, 0, 5, 8, 2, 6, 7};
    bool same = true, varied = false;
    for (int64_t epoch = 0; epoch < 3 && same && rc == 0; epoch++) {
        struct data_draw d = {42, epoch, 0};
        rc = dataset_fill(files, idx, WN, &d, xf, yf, &e);
        if (rc == 0)
            rc = dataset_fill(mem, idx, WN, &d, xm, ym, &e);
        same = !memcmp(xf, xm, sizeof xf) && !memcmp(yf, ym, sizeof yf);
        for (int k = 0; k < PER && !varied; k++) /* the augmentation did something */
            varied = xf[k] != (float)((src.pixels[idx[0] * PER + k] / 255.0f - o.norm.mean[0]) /
                                      o.norm.std[0]);
    }
    dataset_destroy(files);
    dataset_destroy(mem);
    T_CHECK_MSG(rc == 0, "%s", e.msg);
    T_CHECK(same);
    T_CHECK(varied);
}

/* A valid progressive gray 8x8 JPEG of 137 scans (DC in 11 successive-approximation steps,
 * then each of the 63 AC coefficients alone, first and refined): libjpeg reads it without
 * a warning. Caller frees *out (malloc'd by jpeg_mem_dest). */
static int many_scans_jpeg(unsigned char **out, unsigned long *len)
{
    static jpeg_scan_info scans[11 + 2 * 63];
    int n = 0;
    scans[n++] = (jpeg_scan_info){1, {0}, 0, 0, 0, 10};
    for (int al = 9; al >= 0; al--)
        scans[n++] = (jpeg_scan_info){1, {0}, 0, 0, al + 1, al};
    for (int k = 1; k < 64; k++)
        scans[n++] = (jpeg_scan_info){1, {0}, k, k, 0, 1};
    for (int k = 1; k < 64; k++)
        scans[n++] = (jpeg_scan_info){1, {0}, k, k, 1, 0};
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr jerr;
    ci.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&ci);
    *out = NULL;
    *len = 0;
    jpeg_mem_dest(&ci, out, len);
    ci.image_width = ci.image_height = 8;
    ci.input_components = 1;
    ci.in_color_space = JCS_GRAYSCALE;
    jpeg_set_defaults(&ci);
    ci.scan_info = scans;
    ci.num_scans = n;
    jpeg_start_compress(&ci, TRUE);
    uint8_t row[8];
    for (int y = 0; y < 8; y++) {
        for (int x = 0; x < 8; x++)
            row[x] = (uint8_t)(x * 29 + y * 13);
        JSAMPROW r = row;
        jpeg_write_scanlines(&ci, &r, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    return n;
}

/* A PNG signature and an IHDR of w x h (8-bit RGB, its CRC right), then IEND. */
static size_t huge_png_header(uint8_t *p, uint32_t w, uint32_t h)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    size_t n = 0;
    memcpy(p, sig, 8);
    n = 8;
    const uint8_t ihdr[] = {0,      0,       0,       13,     'I', 'H',     'D',
                            'R',    w >> 24, w >> 16, w >> 8, w,   h >> 24, h >> 16,
                            h >> 8, h,       8,       2,      0,   0,       0};
    memcpy(p + n, ihdr, sizeof ihdr);
    uint32_t crc = (uint32_t)crc32(0, ihdr + 4, sizeof ihdr - 4);
    n += sizeof ihdr;
    p[n++] = (uint8_t)(crc >> 24), p[n++] = (uint8_t)(crc >> 16), p[n++] = (uint8_t)(crc >> 8),
    p[n++] = (uint8_t)crc;
    const uint8_t iend[] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xae, 0x42, 0x60, 0x82};
    memcpy(p + n, iend, sizeof iend);
    return n + sizeof iend;
}

static void test_codec_bombs(void)
{
    unsigned char *jpg;
    unsigned long jlen;
    T_EQ_INT(many_scans_jpeg(&jpg, &jlen), 137);
    int c = 0, h = 0, w = 0;
    struct err e = {0};
    T_OK(data_image_probe(jpg, jlen, "scans.jpg", &c, &h, &w, &e)); /* a valid file */
    uint8_t px[64];
    int rc = data_image_decode(jpg, jlen, "scans.jpg", 1, 8, 8, px, &e);
    free(jpg);
    T_CHECK(rc < 0);
    T_EQ_INT(e.code, ERR_INVALID);
    T_CHECK_MSG(strstr(e.msg, "scans.jpg") && strstr(e.msg, "more than 100 scans"), "%s",
                e.msg);
    uint8_t png[64];
    size_t plen = huge_png_header(png, 100000, 100000);
    err_clear(&e);
    T_CHECK(data_image_probe(png, plen, "huge.png", &c, &h, &w, &e) < 0);
    T_CHECK_MSG(strstr(e.msg, "huge.png"), "%s", e.msg);
    err_clear(&e);
    T_CHECK(data_image_decode(png, plen, "huge.png", 3, 8, 8, px, &e) < 0);
    T_CHECK_MSG(strstr(e.msg, "huge.png"), "%s", e.msg);
}

/* A sample file past what its shape can take (an 8x8 PNG with 2 MiB after it) fails the
 * fill that reads it, naming the file, before a byte of it is decoded. */
static void test_sample_file_capped(void)
{
    char dir[128], path[256];
    test_tmp_path(dir, sizeof dir, "capped");
    mkdirs(dir);
    snprintf(path, sizeof path, "%s/a.png", dir);
    T_CHECK(write_image(path, DATA_CODEC_PNG, 3, 8, 8, 0) == 0);
    snprintf(path, sizeof path, "%s/b.png", dir);
    T_CHECK(write_image(path, DATA_CODEC_PNG, 3, 8, 8, 1) == 0);
    FILE *f = fopen(path, "ab");
    T_CHECK(f != NULL);
    static uint8_t junk[2 << 20];
    size_t wrote = fwrite(junk, 1, sizeof junk, f);
    fclose(f);
    T_EQ_INT(wrote, sizeof junk);
    struct err e;
    struct dataset *ds = open_listed(dir, "a.png 0\nb.png 1\n", &e);
    T_CHECK_MSG(ds != NULL, "%s", e.msg);
    int ok0 = fill_sample(ds, 0, &e);
    int ok1 = fill_sample(ds, 1, &e);
    dataset_destroy(ds);
    T_EQ_INT(ok0, 0);
    T_EQ_INT(ok1, -1);
    T_EQ_INT(e.code, ERR_TOO_LARGE);
    T_CHECK_MSG(strstr(e.msg, "b.png"), "%s", e.msg);
}

/* A manifest error names the file and line, never the line's bytes (the manifest could be
 * any file the daemon's user can read). */
static void test_manifest_errors_echo_nothing(void)
{
    char dir[128], path[256];
    test_tmp_path(dir, sizeof dir, "echo");
    mkdirs(dir);
    const char *lines[] = {"SECRETLINE\n", "a.png SECRETLABEL\n"};
    for (size_t k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/train.txt", dir);
        T_CHECK(write_text(path, lines[k]) == 0);
        struct dataset *ds = NULL;
        struct err e = {0};
        T_CHECK(dataset_files_open(dir, "s", DATA_SPLIT_TRAIN, &plain_opts, NULL, &ds, &e) < 0);
        T_CHECK_MSG(strstr(e.msg, "train.txt: line 1") && !strstr(e.msg, "SECRET"), "%s",
                    e.msg);
    }
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_png_roundtrip_exact);
    TEST_RUN(test_jpeg_roundtrip_close);
    TEST_RUN(test_probe);
    TEST_RUN(test_codec_errors);
    TEST_RUN(test_writer_roundtrip);
    TEST_RUN(test_writer_jpeg_and_manifest_order);
    TEST_RUN(test_writer_errors);
    TEST_RUN(test_imagefolder_scan);
    TEST_RUN(test_manifest_errors);
    TEST_RUN(test_fill_errors_name_the_file);
    TEST_RUN(test_augment_matches_in_memory);
    TEST_RUN(test_codec_bombs);
    TEST_RUN(test_sample_file_capped);
    TEST_RUN(test_manifest_errors_echo_nothing);
    return test_end();
}
