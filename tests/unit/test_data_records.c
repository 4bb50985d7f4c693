/* Unit tests for the record-shard format (worker/data/records.c) and the converter
 * (worker/data/convert.c) on a small CIFAR-10 binary set the tests generate: records, zlib
 * and zstd round trips whose fills equal the CIFAR set's bit for bit, with normalization
 * and with augmentation, both splits, directly and through dataset_open's format; samples
 * spread over several shards; every index corruption (magic, version, truncation,
 * trailing bytes, CRC, label range, layout) and every shard mismatch (shorter, longer,
 * missing) as an error naming the file; a flipped byte in a shard failing only the fills
 * that read that sample, naming it; the writer's own errors and its temporary names; the
 * per-sample image files equal to CIFAR (PNG) and records made from JPEG files equal to
 * those files, tfrecord's Examples equal to files-jpeg's files; conversion errors and a
 * failed conversion leaving no index. */
#include <ftw.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "tests/unit/test.h"
#include "worker/data/convert.h"
#include "worker/data/dataset.h"
#include "worker/data/formats.h"
#include "worker/data/storage.h"

#define CIFAR_REC 3073
#define CIFAR_PIX 3072
#define PER_BATCH 80 /* 400 train samples: more than one 1 MB shard of raw CIFAR samples */
#define TEST_SAMPLES 23

static char cifar_dir[128];

static bool exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Half of each image is noise (so codecs have work), half smooth (so they compress). */
static uint8_t cifar_byte(size_t sample, size_t k)
{
    if (k % 1024 < 512) {
        uint32_t h = (uint32_t)(sample * 2654435761u) ^ (uint32_t)(k * 40503u);
        h ^= h >> 13;
        h *= 0x5bd1e995u;
        return (uint8_t)(h ^ (h >> 15));
    }
    return (uint8_t)(sample + k / 32);
}

static int cifar_write(const char *path, size_t first, size_t nrec)
{
    uint8_t *p = malloc(nrec * CIFAR_REC);
    for (size_t r = 0; r < nrec; r++) {
        p[r * CIFAR_REC] = (uint8_t)((first + r) * 3 % 10);
        for (size_t k = 0; k < CIFAR_PIX; k++)
            p[r * CIFAR_REC + 1 + k] = cifar_byte(first + r, k);
    }
    int rc = test_write_file(path, p, nrec * CIFAR_REC);
    free(p);
    return rc;
}

/* The CIFAR-10 directory layout: five train batches and the test batch. */
static int cifar_make(const char *dir)
{
    char p[256];
    if (mkdir(dir, 0700) < 0)
        return -1;
    for (int i = 1; i <= 5; i++) {
        snprintf(p, sizeof p, "%s/data_batch_%d.bin", dir, i);
        if (cifar_write(p, (size_t)(i - 1) * PER_BATCH, PER_BATCH) < 0)
            return -1;
    }
    snprintf(p, sizeof p, "%s/test_batch.bin", dir);
    return cifar_write(p, 1000, TEST_SAMPLES);
}

static int convert_to(const char *src_path, const char *src_format, const char *root,
                      const char *format, struct err *e)
{
    struct data_config cfg = {.name = "cifar10"};
    snprintf(cfg.path, sizeof cfg.path, "%s", src_path);
    snprintf(cfg.format, sizeof cfg.format, "%s", src_format);
    struct data_convert_opts o = {0};
    snprintf(o.format, sizeof o.format, "%s", format);
    return data_convert(&cfg, root, &o, e);
}

/* The two ways every round trip is read: normalized (and augmented on the train split),
 * and plain bytes / 255. */
static void opts_make(struct data_image_opts *o, bool plain)
{
    memset(o, 0, sizeof *o);
    if (plain)
        return;
    data_norm_preset("cifar10", &o->norm, NULL);
    o->augment.pad = 4;
    o->augment.flip = true;
}

/* Fills every sample of both (in a scrambled order, two epochs) and compares bit for bit.
 * Returns "" when equal, else what differs. */
static const char *fills_equal(const struct dataset *a, const struct dataset *b)
{
    if (a->n != b->n || a->c != b->c || a->h != b->h || a->w != b->w ||
        a->classes != b->classes)
        return "shape, count or classes";
    size_t per = dataset_sample_floats(a), n = (size_t)a->n;
    float *xa = malloc(n * per * sizeof *xa), *xb = malloc(n * per * sizeof *xb);
    int32_t *ya = malloc(n * sizeof *ya), *yb = malloc(n * sizeof *yb);
    int64_t *idx = malloc(n * sizeof *idx);
    const char *why = "";
    for (int epoch = 0; epoch < 2 && !*why; epoch++) {
        data_permutation(7, epoch, a->n, idx);
        struct data_draw d = {42, epoch, 0};
        struct err e;
        if (dataset_fill(a, idx, (int)n, &d, xa, ya, &e) < 0 ||
            dataset_fill(b, idx, (int)n, &d, xb, yb, &e) < 0)
            why = "a fill failed";
        else if (memcmp(ya, yb, n * sizeof *ya) != 0)
            why = "labels";
        else if (memcmp(xa, xb, n * per * sizeof *xa) != 0)
            why = "values";
    }
    free(xa);
    free(xb);
    free(ya);
    free(yb);
    free(idx);
    return why;
}

/* Opens root/<format> (a records format) and the CIFAR source with the same options and
 * compares them, for both splits and both option sets. */
static const char *records_match_cifar(const char *root, const char *format, struct err *e)
{
    char dir[256];
    snprintf(dir, sizeof dir, "%s/%s", root, format);
    static char why[128];
    for (int split = 0; split < 2; split++) {
        for (int plain = 0; plain < 2; plain++) {
            struct data_image_opts o;
            opts_make(&o, plain);
            struct dataset *rec = NULL, *ref = NULL;
            if (dataset_records_open(dir, "cifar10", (enum data_split)split, &o, NULL, &rec,
                                     e) < 0)
                return e->msg;
            if (dataset_cifar_open_dir(cifar_dir, (enum data_split)split, &o, &ref, e) < 0) {
                dataset_destroy(rec);
                return e->msg;
            }
            const char *r = fills_equal(rec, ref);
            bool named = strcmp(rec->name, "cifar10") == 0;
            dataset_destroy(rec);
            dataset_destroy(ref);
            snprintf(why, sizeof why, "%s split, %s: %s", split ? "test" : "train",
                     plain ? "plain" : "normalized+augmented", *r ? r : "name");
            if (*r || !named)
                return why;
        }
    }
    return NULL;
}

/* --- round trips ----------------------------------------------------------------------- */

static void test_records_round_trip(void)
{
    struct err e;
    const char *formats[] = {"records", "records-zlib", "records-zstd"};
    char root[128];
    test_tmp_path(root, sizeof root, "rt");
    for (int f = 0; f < 3; f++) {
        T_OK(convert_to(cifar_dir, "native", root, formats[f], &e));
        const char *why = records_match_cifar(root, formats[f], &e);
        T_CHECK_MSG(!why, "%s: %s", formats[f], why);
    }
    /* the compressed forms are smaller than the raw one (half of each image is smooth) */
    char raw[256], zs[256];
    size_t nraw, nzs;
    snprintf(raw, sizeof raw, "%s/records/test-00000.rec", root);
    snprintf(zs, sizeof zs, "%s/records-zstd/test-00000.rec", root);
    uint8_t *a = test_slurp(raw, &nraw), *b = test_slurp(zs, &nzs);
    free(a);
    free(b);
    T_CHECK(a && b);
    T_EQ_INT(nraw, TEST_SAMPLES * CIFAR_PIX);
    T_CHECK_MSG(nzs < nraw * 3 / 4, "zstd %zu bytes, raw %zu", nzs, nraw);
}

static void test_records_through_dataset_open(void)
{
    struct err e;
    char root[128];
    test_tmp_path(root, sizeof root, "byconfig");
    T_OK(mkdir(root, 0700));
    /* dataset_open reads path/<format>/ */
    T_OK(convert_to(cifar_dir, "native", root, "records-zlib", &e));
    struct data_storage_profile p;
    struct data_storage *st;
    T_OK(data_storage_profile_get("local", &p, &e));
    T_OK(data_storage_create(&p, &st, &e));
    struct data_config cfg = {
        .name = "cifar10", .augment = true, .format = "records-zlib", .storage = st};
    snprintf(cfg.path, sizeof cfg.path, "%s", root);
    struct data_config ref_cfg = {.name = "cifar10", .augment = true};
    snprintf(ref_cfg.path, sizeof ref_cfg.path, "%s", cifar_dir);
    struct dataset *rec, *ref;
    T_OK(dataset_open(&cfg, DATA_SPLIT_TRAIN, &rec, &e));
    T_OK(dataset_open(&ref_cfg, DATA_SPLIT_TRAIN, &ref, &e));
    const char *why = fills_equal(rec, ref);
    int64_t n = rec->n;
    dataset_destroy(rec);
    dataset_destroy(ref);
    struct data_storage_stats s;
    data_storage_get_stats(st, &s);
    data_storage_destroy(st);
    T_CHECK_MSG(!*why, "%s", why);
    /* every sample read went through the storage: two epochs of one read each, at least */
    T_CHECK_MSG(s.requests >= 2 * n, "%lld requests", (long long)s.requests);
    T_CHECK(s.bytes > 0);
}

static void test_records_multiple_shards(void)
{
    struct err e;
    char root[128], p[256];
    test_tmp_path(root, sizeof root, "shards");
    struct data_config cfg = {.name = "cifar10"};
    snprintf(cfg.path, sizeof cfg.path, "%s", cifar_dir);
    struct data_convert_opts o = {.format = "records", .shard_mb = 1};
    T_OK(data_convert(&cfg, root, &o, &e));
    /* 400 samples of 3072 bytes in 1 MiB shards: 341 + 59 */
    snprintf(p, sizeof p, "%s/records/train-00001.rec", root);
    T_CHECK(exists(p));
    snprintf(p, sizeof p, "%s/records/train-00002.rec", root);
    T_CHECK(!exists(p));
    size_t n;
    snprintf(p, sizeof p, "%s/records/train-00000.rec", root);
    free(test_slurp(p, &n));
    T_EQ_INT(n, 341 * CIFAR_PIX);
    const char *why = records_match_cifar(root, "records", &e);
    T_CHECK_MSG(!why, "%s", why);
    /* a conversion with bigger shards over the same folder removes the shard it no longer
     * writes, and the new index reads */
    o.shard_mb = 4;
    T_OK(data_convert(&cfg, root, &o, &e));
    snprintf(p, sizeof p, "%s/records/train-00001.rec", root);
    T_CHECK(!exists(p));
    why = records_match_cifar(root, "records", &e);
    T_CHECK_MSG(!why, "%s", why);
}

/* --- a small split written by the writer itself ------------------------------------------ */

#define SM_N 10
#define SM_C 1
#define SM_H 5
#define SM_W 4
#define SM_PER (SM_C * SM_H * SM_W)
#define SM_SHARD (3 * SM_PER) /* three raw samples a shard: 4 shards */

static uint8_t sm_byte(int i, int k)
{
    return (uint8_t)(i * 29 + k * 13 + 1);
}

/* SM_N samples (label i % 4 of 4 classes) into dir's train split. */
static int sm_write(const char *dir, enum data_record_compression comp, struct err *e)
{
    struct data_records_writer *rw;
    if (data_records_writer_create(dir, DATA_SPLIT_TRAIN, comp, 0, SM_C, SM_H, SM_W, 4,
                                   SM_SHARD, &rw, e) < 0)
        return -1;
    for (int i = 0; i < SM_N; i++) {
        uint8_t px[SM_PER];
        for (int k = 0; k < SM_PER; k++)
            px[k] = sm_byte(i, k);
        if (data_records_writer_add(rw, px, i % 4, e) < 0) {
            data_records_writer_abort(rw);
            return -1;
        }
    }
    return data_records_writer_finish(rw, e);
}

static int sm_open(const char *dir, struct dataset **ds, struct err *e)
{
    struct data_image_opts o = {0};
    err_clear(e);
    return dataset_records_open(dir, "small", DATA_SPLIT_TRAIN, &o, NULL, ds, e);
}

/* Fills the given samples; true when each is byte / 255 of what sm_write wrote. */
static bool sm_fill_ok(const struct dataset *ds, const int64_t *idx, int n, struct err *e)
{
    float x[SM_N * SM_PER];
    int32_t y[SM_N];
    struct data_draw d = {0, 0, 0};
    if (dataset_fill(ds, idx, n, &d, x, y, e) < 0)
        return false;
    for (int i = 0; i < n; i++) {
        if (y[i] != idx[i] % 4)
            return false;
        for (int k = 0; k < SM_PER; k++)
            if (x[i * SM_PER + k] != (float)sm_byte((int)idx[i], k) / 255.0f)
                return false;
    }
    return true;
}

static void test_records_writer_small_shards(void)
{
    struct err e;
    char dir[128], p[256];
    const enum data_record_compression comps[] = {DATA_RECORD_RAW, DATA_RECORD_ZLIB,
                                                  DATA_RECORD_ZSTD};
    for (int c = 0; c < 3; c++) {
        snprintf(dir, sizeof dir, "%s/small-%d/deeper", test_tmpdir(),
                 c); /* made, parents too */
        T_OK(sm_write(dir, comps[c], &e));
        struct dataset *ds;
        T_OK(sm_open(dir, &ds, &e));
        T_EQ_INT(ds->n, SM_N);
        T_CHECK(ds->c == SM_C && ds->h == SM_H && ds->w == SM_W && ds->classes == 4);
        int64_t idx[SM_N] = {9, 0, 5, 3, 8, 1, 7, 2, 6, 4};
        bool ok = sm_fill_ok(ds, idx, SM_N, &e);
        dataset_destroy(ds);
        T_CHECK_MSG(ok, "compression %d: %s", c, e.msg);
        if (comps[c] == DATA_RECORD_RAW) {
            snprintf(p, sizeof p, "%s/train-00003.rec", dir); /* 3 + 3 + 3 + 1 */
            T_CHECK(exists(p));
            snprintf(p, sizeof p, "%s/train-00004.rec", dir);
            T_CHECK(!exists(p));
        }
        snprintf(p, sizeof p, "%s/train.index.tmp", dir);
        T_CHECK(!exists(p));
        snprintf(p, sizeof p, "%s/train-00000.rec.tmp", dir);
        T_CHECK(!exists(p));
    }
}

static void test_records_writer_errors(void)
{
    struct err e;
    char dir[128], p[256];
    test_tmp_path(dir, sizeof dir, "werr");
    struct data_records_writer *rw;
    T_CHECK(data_records_writer_create(dir, DATA_SPLIT_TRAIN, DATA_RECORD_ZLIB, 10, 1, 2, 2, 4,
                                       1024, &rw, &e) < 0);
    T_EQ_STR(e.field, "level");
    T_CHECK(data_records_writer_create(dir, DATA_SPLIT_TRAIN, DATA_RECORD_ZSTD, 20, 1, 2, 2, 4,
                                       1024, &rw, &e) < 0);
    T_CHECK(data_records_writer_create(dir, DATA_SPLIT_TRAIN, DATA_RECORD_RAW, 0, 0, 2, 2, 4,
                                       1024, &rw, &e) < 0);
    T_CHECK(data_records_writer_create(dir, DATA_SPLIT_TRAIN, DATA_RECORD_RAW, 0, 1, 2, 2, 4, 0,
                                       &rw, &e) < 0);
    /* a label out of range is refused; the writer goes on */
    T_OK(data_records_writer_create(dir, DATA_SPLIT_TEST, DATA_RECORD_ZSTD, 19, 1, 2, 2, 4,
                                    1024, &rw, &e));
    uint8_t px[4] = {1, 2, 3, 4};
    T_CHECK(data_records_writer_add(rw, px, 4, &e) < 0);
    T_CHECK_MSG(strstr(e.msg, "label 4"), "%s", e.msg);
    T_CHECK(data_records_writer_add(rw, px, -1, &e) < 0);
    T_OK(data_records_writer_add(rw, px, 3, &e));
    /* abort: no index, no temporary shard left */
    data_records_writer_abort(rw);
    snprintf(p, sizeof p, "%s/test.index", dir);
    T_CHECK(!exists(p));
    snprintf(p, sizeof p, "%s/test-00000.rec.tmp", dir);
    T_CHECK(!exists(p));
    /* no samples: finish fails and writes no index */
    T_OK(data_records_writer_create(dir, DATA_SPLIT_TEST, DATA_RECORD_RAW, 0, 1, 2, 2, 4, 1024,
                                    &rw, &e));
    T_CHECK(data_records_writer_finish(rw, &e) < 0);
    T_CHECK_MSG(strstr(e.msg, "no samples"), "%s", e.msg);
    snprintf(p, sizeof p, "%s/test.index", dir);
    T_CHECK(!exists(p));
    /* a file where the folder should be */
    test_tmp_path(p, sizeof p, "werr-file");
    T_CHECK(test_write_file(p, px, 4) == 0);
    T_CHECK(data_records_writer_create(p, DATA_SPLIT_TEST, DATA_RECORD_RAW, 0, 1, 2, 2, 4, 1024,
                                       &rw, &e) < 0);
}

/* --- corruption ------------------------------------------------------------------------ */

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void fix_crc(uint8_t *idx, size_t n)
{
    put32(idx + n - 4, (uint32_t)crc32(0L, idx, (uInt)(n - 4)));
}

struct index_case {
    const char *what;
    const char *expect; /* in the message */
    int edit;
};

enum {
    E_MAGIC,
    E_VERSION,
    E_TRUNCATED,
    E_SHORT_HEADER,
    E_TRAILING,
    E_CRC,
    E_LABEL,
    E_OFFSET,
    E_STORED,
    E_SHARDS,
    E_COMPRESSION,
    E_SAMPLES,
};

/* The index bytes with one defect; *n may change. */
static void index_edit(uint8_t *b, size_t *n, int edit)
{
    uint8_t *entry3 = b + 48 + 3 * 24;
    switch (edit) {
    case E_MAGIC: b[3] ^= 0x20; break;
    case E_VERSION:
        put32(b + 8, 2);
        fix_crc(b, *n);
        break;
    case E_TRUNCATED: *n -= 10; break;
    case E_SHORT_HEADER: *n = 30; break;
    case E_TRAILING:
        memset(b + *n, 0, 3);
        *n += 3;
        break;
    case E_CRC: entry3[16] ^= 1; break; /* a label bit, CRC left stale */
    case E_LABEL:
        put32(entry3 + 16, 4);
        fix_crc(b, *n);
        break;
    case E_OFFSET:
        put32(entry3 + 4, 7);
        fix_crc(b, *n);
        break;
    case E_STORED:
        put32(entry3 + 12, SM_PER + 1);
        fix_crc(b, *n);
        break;
    case E_SHARDS:
        put32(b + 40, 5);
        fix_crc(b, *n);
        break;
    case E_COMPRESSION:
        put32(b + 28, 4); /* 0..3: raw, zlib, zstd, jpeg */
        fix_crc(b, *n);
        break;
    case E_SAMPLES:
        put32(b + 32, 0);
        fix_crc(b, *n);
        break;
    default: break;
    }
}

static void test_records_index_corruption(void)
{
    struct err e;
    char dir[128], path[256];
    test_tmp_path(dir, sizeof dir, "corrupt-index");
    T_OK(sm_write(dir, DATA_RECORD_RAW, &e));
    snprintf(path, sizeof path, "%s/train.index", dir);
    size_t n0;
    uint8_t *good = test_slurp(path, &n0);
    T_CHECK(good && n0 == 48 + SM_N * 24 + 4);
    static const struct index_case cases[] = {
        {"bad magic", "magic", E_MAGIC},
        {"version", "version 2", E_VERSION},
        {"truncated", "truncated", E_TRUNCATED},
        {"shorter than a header", "truncated", E_SHORT_HEADER},
        {"trailing bytes", "3 trailing bytes", E_TRAILING},
        {"crc mismatch", "CRC-32", E_CRC},
        {"label out of range", "sample 3 has label 4", E_LABEL},
        {"offset", "sample 3 at offset 7", E_OFFSET},
        {"stored size", "sample 3 stores 21 bytes", E_STORED},
        {"shard count", "fill 4 shards, the header says 5", E_SHARDS},
        {"compression", "unknown compression 4", E_COMPRESSION},
        {"no samples", "0 samples", E_SAMPLES},
    };
    uint8_t *b = malloc(n0 + 16);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = n0;
        memcpy(b, good, n0);
        index_edit(b, &n, cases[i].edit);
        T_CHECK(test_write_file(path, b, n) == 0);
        struct dataset *ds = NULL;
        int rc = sm_open(dir, &ds, &e);
        dataset_destroy(ds);
        T_CHECK_MSG(rc < 0, "%s: opened", cases[i].what);
        T_CHECK_MSG(e.code == ERR_INVALID, "%s: code %d", cases[i].what, (int)e.code);
        T_CHECK_MSG(strstr(e.msg, path), "%s: %s", cases[i].what, e.msg);
        T_CHECK_MSG(strstr(e.msg, cases[i].expect), "%s: %s", cases[i].what, e.msg);
    }
    free(b);
    /* the good index opens again; then without it, not found */
    T_CHECK(test_write_file(path, good, n0) == 0);
    free(good);
    struct dataset *ds;
    T_OK(sm_open(dir, &ds, &e));
    dataset_destroy(ds);
    T_CHECK(unlink(path) == 0);
    T_CHECK(sm_open(dir, &ds, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    T_CHECK_MSG(strstr(e.msg, path), "%s", e.msg);
}

static void test_records_shard_mismatch(void)
{
    struct err e;
    char dir[128], shard[256];
    test_tmp_path(dir, sizeof dir, "corrupt-shard");
    T_OK(sm_write(dir, DATA_RECORD_RAW, &e));
    snprintf(shard, sizeof shard, "%s/train-00001.rec", dir);
    size_t n;
    uint8_t *b = test_slurp(shard, &n);
    T_CHECK(b && n == SM_SHARD);
    struct dataset *ds = NULL;
    /* shorter than the index says */
    T_CHECK(test_write_file(shard, b, n - 1) == 0);
    T_CHECK(sm_open(dir, &ds, &e) < 0);
    T_CHECK_MSG(strstr(e.msg, shard) && strstr(e.msg, "truncated"), "%s", e.msg);
    /* longer */
    uint8_t more[SM_SHARD + 1] = {0};
    memcpy(more, b, n);
    T_CHECK(test_write_file(shard, more, n + 1) == 0);
    T_CHECK(sm_open(dir, &ds, &e) < 0);
    T_CHECK_MSG(strstr(e.msg, shard) && strstr(e.msg, "bytes after"), "%s", e.msg);
    /* missing */
    T_CHECK(unlink(shard) == 0);
    T_CHECK(sm_open(dir, &ds, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    T_CHECK_MSG(strstr(e.msg, shard), "%s", e.msg);
    T_CHECK(test_write_file(shard, b, n) == 0);
    free(b);
    T_OK(sm_open(dir, &ds, &e));
    dataset_destroy(ds);
}

/* The sample whose stored bytes hold byte `off` of the train split's shard `shard`, from
 * the index; -1 if none. */
static int sample_at(const char *dir, uint32_t shard, uint64_t off)
{
    char path[256];
    snprintf(path, sizeof path, "%s/train.index", dir);
    size_t n;
    uint8_t *b = test_slurp(path, &n);
    int found = -1;
    for (int i = 0; b && i < SM_N; i++) {
        const uint8_t *en = b + 48 + (size_t)i * 24;
        uint32_t s = en[0] | en[1] << 8 | (uint32_t)en[2] << 16 | (uint32_t)en[3] << 24;
        uint64_t o = 0;
        for (int k = 7; k >= 0; k--)
            o = o << 8 | en[4 + k];
        uint32_t len = en[12] | en[13] << 8 | (uint32_t)en[14] << 16 | (uint32_t)en[15] << 24;
        if (s == shard && off >= o && off < o + len)
            found = i;
    }
    free(b);
    return found;
}

/* One flipped byte in the middle of shard 1: fills of the other samples work, a fill of
 * the sample holding it fails naming the shard and the sample. */
static void test_records_flipped_byte(void)
{
    struct err e;
    const enum data_record_compression comps[] = {DATA_RECORD_RAW, DATA_RECORD_ZSTD};
    for (int c = 0; c < 2; c++) {
        char dir[128], shard[256];
        snprintf(dir, sizeof dir, "%s/flip-%d", test_tmpdir(), c);
        T_OK(sm_write(dir, comps[c], &e));
        snprintf(shard, sizeof shard, "%s/train-00001.rec", dir);
        size_t n;
        uint8_t *b = test_slurp(shard, &n);
        T_CHECK(b && n > 0);
        b[n / 2] ^= 0x10;
        T_CHECK(test_write_file(shard, b, n) == 0);
        free(b);
        int hit = sample_at(dir, 1, n / 2);
        T_CHECK(hit >= 0);
        int64_t fine[SM_N], bad[3] = {0, hit, SM_N - 1};
        int nfine = 0;
        for (int i = 0; i < SM_N; i++)
            if (i != hit)
                fine[nfine++] = i;
        struct dataset *ds;
        T_OK(sm_open(dir, &ds, &e));
        bool ok = sm_fill_ok(ds, fine, nfine, &e);
        float x[3 * SM_PER];
        int32_t y[3];
        struct data_draw d = {0, 0, 0};
        err_clear(&e);
        int rc = dataset_fill(ds, bad, 3, &d, x, y, &e);
        dataset_destroy(ds);
        T_CHECK_MSG(ok, "compression %d: %s", c, e.msg);
        T_CHECK(rc < 0);
        char want[32];
        snprintf(want, sizeof want, "sample %d ", hit);
        T_CHECK_MSG(strstr(e.msg, shard) && strstr(e.msg, want) && strstr(e.msg, "CRC"), "%s",
                    e.msg);
    }
}

/* --- per-sample image files ------------------------------------------------------------ */

static void test_files_png_equals_cifar(void)
{
    struct err e;
    char root[128], dir[256];
    test_tmp_path(root, sizeof root, "png");
    T_OK(convert_to(cifar_dir, "native", root, "files-png", &e));
    snprintf(dir, sizeof dir, "%s/files-png", root);
    for (int split = 0; split < 2; split++) {
        struct data_image_opts o;
        opts_make(&o, false);
        struct dataset *png, *ref;
        T_OK(dataset_files_open(dir, "cifar10", (enum data_split)split, &o, NULL, &png, &e));
        T_OK(dataset_cifar_open_dir(cifar_dir, (enum data_split)split, &o, &ref, &e));
        const char *why = fills_equal(png, ref);
        dataset_destroy(png);
        dataset_destroy(ref);
        T_CHECK_MSG(!*why, "split %d: %s", split, why);
    }
}

static void test_records_from_jpeg_equal_jpeg(void)
{
    struct err e;
    char jroot[128], rroot[128], jdir[256], rdir[256];
    test_tmp_path(jroot, sizeof jroot, "jpeg");
    test_tmp_path(rroot, sizeof rroot, "from-jpeg");
    T_OK(convert_to(cifar_dir, "native", jroot, "files-jpeg", &e));
    T_OK(convert_to(jroot, "files-jpeg", rroot, "records-zstd", &e));
    snprintf(jdir, sizeof jdir, "%s/files-jpeg", jroot);
    snprintf(rdir, sizeof rdir, "%s/records-zstd", rroot);
    bool lossy = false;
    for (int split = 0; split < 2; split++) {
        struct data_image_opts o;
        opts_make(&o, split == 1);
        struct dataset *jpg, *rec, *ref;
        T_OK(dataset_files_open(jdir, "cifar10", (enum data_split)split, &o, NULL, &jpg, &e));
        T_OK(dataset_records_open(rdir, "cifar10", (enum data_split)split, &o, NULL, &rec, &e));
        T_OK(dataset_cifar_open_dir(cifar_dir, (enum data_split)split, &o, &ref, &e));
        const char *why = fills_equal(jpg, rec);
        lossy |= *fills_equal(jpg, ref) != '\0';
        dataset_destroy(jpg);
        dataset_destroy(rec);
        dataset_destroy(ref);
        T_CHECK_MSG(!*why, "split %d: %s", split, why);
    }
    /* the records hold the decoded JPEG, not the original pixels */
    T_CHECK(lossy);
}

/* Whether the first training sample's file of the files format in jdir lies in the file
 * at path, starting within its first `within` bytes. */
static bool first_file_in(const char *jdir, const char *path, size_t within)
{
    char p[512], first[256] = "";
    size_t fn = 0, sn = 0;
    snprintf(p, sizeof p, "%s/train.txt", jdir);
    uint8_t *manifest = test_slurp(p, &fn);
    if (manifest)
        sscanf((const char *)manifest, "%255s", first);
    free(manifest);
    snprintf(p, sizeof p, "%s/%s", jdir, first);
    uint8_t *file = test_slurp(p, &fn), *shard = test_slurp(path, &sn);
    bool found = false;
    for (size_t k = 0; file && shard && fn > 0 && k + fn <= sn && k < within && !found; k++)
        found = memcmp(shard + k, file, fn) == 0;
    free(file);
    free(shard);
    return found;
}

/* A JPEG format's reader (records-jpeg's, tfrecord's). */
typedef int (*jpeg_open_fn)(const char *dir, const char *name, enum data_split split,
                            const struct data_image_opts *opts, struct data_storage *st,
                            struct dataset **out, struct err *e);

/* Both splits of files-jpeg in root and of `format` (opened with open) fill the same bit for
 * bit, normalized and augmented on the train split, plain on the test split. "" when so. */
static const char *jpeg_formats_equal(const char *root, const char *format, jpeg_open_fn open,
                                      struct err *e)
{
    char jdir[256], dir[256];
    snprintf(jdir, sizeof jdir, "%s/files-jpeg", root);
    snprintf(dir, sizeof dir, "%s/%s", root, format);
    for (int split = 0; split < 2; split++) {
        struct data_image_opts o;
        opts_make(&o, split == 1);
        struct dataset *jpg = NULL, *other = NULL;
        const char *why = "an open failed";
        if (dataset_files_open(jdir, "cifar10", (enum data_split)split, &o, NULL, &jpg, e) ==
                0 &&
            open(dir, "cifar10", (enum data_split)split, &o, NULL, &other, e) == 0)
            why = fills_equal(jpg, other);
        dataset_destroy(jpg);
        dataset_destroy(other);
        if (*why)
            return why;
    }
    return "";
}

/* records-jpeg stores each sample as the JPEG file files-jpeg writes for it: the fills are
 * the same bit for bit (normalized and augmented), and the first training sample's stored
 * bytes are exactly its file's bytes (shard 0, offset 0). */
static void test_records_jpeg_equal_files_jpeg(void)
{
    struct err e;
    char root[128], jdir[256], rdir[256], p[512];
    test_tmp_path(root, sizeof root, "rjpeg");
    T_OK(convert_to(cifar_dir, "native", root, "files-jpeg", &e));
    T_OK(convert_to(cifar_dir, "native", root, "records-jpeg", &e));
    snprintf(jdir, sizeof jdir, "%s/files-jpeg", root);
    snprintf(rdir, sizeof rdir, "%s/records-jpeg", root);
    const char *why = jpeg_formats_equal(root, "records-jpeg", dataset_records_open, &e);
    T_CHECK_MSG(!*why, "%s (%s)", why, e.msg);
    snprintf(p, sizeof p, "%s/train-00000.rec", rdir);
    T_CHECK(first_file_in(jdir, p, 1)); /* at offset 0 */
}

/* tfrecord stores each sample's files-jpeg file as its Example's image/encoded: the fills
 * are the same bit for bit (normalized and augmented, both splits), through dataset_open's
 * format too, and the first training record holds exactly the first file's bytes. */
static void test_tfrecord_equal_files_jpeg(void)
{
    struct err e;
    char root[128], jdir[256], tdir[256], p[512];
    test_tmp_path(root, sizeof root, "tfrec");
    T_OK(convert_to(cifar_dir, "native", root, "files-jpeg", &e));
    T_OK(convert_to(cifar_dir, "native", root, "tfrecord", &e));
    snprintf(jdir, sizeof jdir, "%s/files-jpeg", root);
    snprintf(tdir, sizeof tdir, "%s/tfrecord", root);
    const char *why = jpeg_formats_equal(root, "tfrecord", dataset_tfrecord_open, &e);
    T_CHECK_MSG(!*why, "%s (%s)", why, e.msg);
    struct data_config cfg = {.name = "cifar10", .format = "tfrecord", .augment = true};
    snprintf(cfg.path, sizeof cfg.path, "%s", root);
    struct dataset *via, *jpg;
    struct data_image_opts o;
    opts_make(&o, false);
    T_OK(dataset_open(&cfg, DATA_SPLIT_TRAIN, &via, &e));
    T_OK(dataset_files_open(jdir, "cifar10", DATA_SPLIT_TRAIN, &o, NULL, &jpg, &e));
    why = fills_equal(via, jpg);
    T_CHECK_MSG(!*why, "through dataset_open: %s", why);
    dataset_destroy(via);
    dataset_destroy(jpg);
    /* the first record's image/encoded is the first file, byte for byte */
    snprintf(p, sizeof p, "%s/train-00000-of-00001.tfrecord", tdir);
    T_CHECK(first_file_in(jdir, p, 256));
}

/* --- conversion errors ------------------------------------------------------------------ */

static void test_convert_errors(void)
{
    struct err e;
    char root[128], p[256];
    test_tmp_path(root, sizeof root, "cerr");
    T_CHECK(convert_to(cifar_dir, "native", root, "records-lz4", &e) < 0);
    T_EQ_STR(e.field, "format");
    T_CHECK(convert_to(cifar_dir, "native", root, "native", &e) < 0);
    struct data_config syn = {.name = "synthetic"};
    struct data_convert_opts o = {.format = "records"};
    T_CHECK(data_convert(&syn, root, &o, &e) < 0);
    T_EQ_STR(e.field, "dataset.name");
    o.quality = 101;
    T_CHECK(data_convert(&syn, root, &o, &e) < 0);
    T_EQ_STR(e.field, "quality");
    T_CHECK(convert_to("/nonexistent/cifar", "native", root, "records", &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    /* a format into itself: the writer would overwrite what the reader reads */
    test_tmp_path(p, sizeof p, "rt");
    T_CHECK(convert_to(p, "records", p, "records", &e) < 0);
    T_CHECK_MSG(strstr(e.msg, "into itself"), "%s", e.msg);
}

/* The test split's source is missing: the train split is written whole, the test split
 * leaves no index. */
static void test_convert_failure_leaves_no_index(void)
{
    struct err e;
    char src[128], root[128], p[256];
    test_tmp_path(src, sizeof src, "cifar-no-test");
    test_tmp_path(root, sizeof root, "partial");
    T_CHECK(cifar_make(src) == 0);
    snprintf(p, sizeof p, "%s/test_batch.bin", src);
    T_CHECK(unlink(p) == 0);
    T_CHECK(convert_to(src, "native", root, "records", &e) < 0);
    T_CHECK_MSG(strstr(e.msg, "test split") && strstr(e.msg, "test_batch.bin"), "%s", e.msg);
    snprintf(p, sizeof p, "%s/records/train.index", root);
    T_CHECK(exists(p));
    snprintf(p, sizeof p, "%s/records/test.index", root);
    T_CHECK(!exists(p));
    /* tfrecord: the train shard and its index whole, nothing of the test split */
    T_CHECK(convert_to(src, "native", root, "tfrecord", &e) < 0);
    snprintf(p, sizeof p, "%s/tfrecord/train-00000-of-00001.tfrecord.idx", root);
    T_CHECK(exists(p));
    snprintf(p, sizeof p, "%s/tfrecord/test-00000-of-00001.tfrecord", root);
    T_CHECK(!exists(p));
    snprintf(p, sizeof p, "%s/tfrecord/test-00000.tfrecord.tmp", root);
    T_CHECK(!exists(p));
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    test_tmp_path(cifar_dir, sizeof cifar_dir, "cifar-10-batches-bin");
    if (cifar_make(cifar_dir) < 0) {
        perror("writing the CIFAR files");
        return 1;
    }
    TEST_RUN(test_records_round_trip);
    TEST_RUN(test_records_through_dataset_open);
    TEST_RUN(test_records_multiple_shards);
    TEST_RUN(test_records_writer_small_shards);
    TEST_RUN(test_records_writer_errors);
    TEST_RUN(test_records_index_corruption);
    TEST_RUN(test_records_shard_mismatch);
    TEST_RUN(test_records_flipped_byte);
    TEST_RUN(test_files_png_equals_cifar);
    TEST_RUN(test_records_from_jpeg_equal_jpeg);
    TEST_RUN(test_records_jpeg_equal_files_jpeg);
    TEST_RUN(test_tfrecord_equal_files_jpeg);
    TEST_RUN(test_convert_errors);
    TEST_RUN(test_convert_failure_leaves_no_index);
    return test_end();
}
