/* Unit tests for TensorFlow's TFRecord format (worker/data/tfrecord.c) and CRC-32C
 * (worker/data/crc32c.c): the CRC's standard check value on both paths; a frame and an
 * Example byte for byte as TensorFlow 2.15 wrote them (the fixtures below); the Example
 * codec's round trip and every malformed or wrong Example refused naming the feature; the
 * writer's layout (names, .idx lines tiling each shard, several shards) read back equal to
 * the JPEG codec's own decode, one storage request per sample, with and without .idx; and
 * every corruption (bad length CRC, bad data CRC, truncated record, missing feature, wrong
 * feature type, label out of range, undecodable JPEG, a missing shard) failing with the
 * file, the record and the field named. The equality with files-jpeg through the converter
 * is in test_data_records.c, beside the other formats'. */
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/unit/test.h"
#include "worker/data/codec.h"
#include "worker/data/crc32c.h"
#include "worker/data/formats.h"
#include "worker/data/storage.h"
#include "worker/data/tfrecord.h"

#define C 3
#define H 8
#define W 8
#define N 37

/* tf.io.TFRecordWriter's file of the one record b"hello" (TensorFlow 2.15). */
static const uint8_t tf_hello[] = {0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                   0x00, 0xea, 0xb2, 0x04, 0x3e, 0x68, 0x65,
                                   0x6c, 0x6c, 0x6f, 0xbb, 0x1f, 0x1c, 0x19};

/* tf.train.Example(...).SerializeToString() of image/encoded ff d8 ff d9, label 7, height
 * 32, width 300, channels 3, format "JPEG", in that insertion order (TensorFlow 2.15). */
static const uint8_t tf_example[] = {
    0x0a, 0x98, 0x01, 0x0a, 0x19, 0x0a, 0x0d, 0x69, 0x6d, 0x61, 0x67, 0x65, 0x2f, 0x65, 0x6e,
    0x63, 0x6f, 0x64, 0x65, 0x64, 0x12, 0x08, 0x0a, 0x06, 0x0a, 0x04, 0xff, 0xd8, 0xff, 0xd9,
    0x0a, 0x17, 0x0a, 0x0e, 0x69, 0x6d, 0x61, 0x67, 0x65, 0x2f, 0x63, 0x68, 0x61, 0x6e, 0x6e,
    0x65, 0x6c, 0x73, 0x12, 0x05, 0x1a, 0x03, 0x0a, 0x01, 0x03, 0x0a, 0x15, 0x0a, 0x0c, 0x69,
    0x6d, 0x61, 0x67, 0x65, 0x2f, 0x68, 0x65, 0x69, 0x67, 0x68, 0x74, 0x12, 0x05, 0x1a, 0x03,
    0x0a, 0x01, 0x20, 0x0a, 0x1a, 0x0a, 0x11, 0x69, 0x6d, 0x61, 0x67, 0x65, 0x2f, 0x63, 0x6c,
    0x61, 0x73, 0x73, 0x2f, 0x6c, 0x61, 0x62, 0x65, 0x6c, 0x12, 0x05, 0x1a, 0x03, 0x0a, 0x01,
    0x07, 0x0a, 0x15, 0x0a, 0x0b, 0x69, 0x6d, 0x61, 0x67, 0x65, 0x2f, 0x77, 0x69, 0x64, 0x74,
    0x68, 0x12, 0x06, 0x1a, 0x04, 0x0a, 0x02, 0xac, 0x02, 0x0a, 0x18, 0x0a, 0x0c, 0x69, 0x6d,
    0x61, 0x67, 0x65, 0x2f, 0x66, 0x6f, 0x72, 0x6d, 0x61, 0x74, 0x12, 0x08, 0x0a, 0x06, 0x0a,
    0x04, 0x4a, 0x50, 0x45, 0x47};

/* --- CRC-32C and the frame --------------------------------------------------------------- */

static void test_crc32c_check_value(void)
{
    T_EQ_INT(data_crc32c(0, "123456789", 9), 0xE3069283u);
    T_EQ_INT(data_crc32c_portable(0, "123456789", 9), 0xE3069283u);
    /* continued in pieces: the same value */
    T_EQ_INT(data_crc32c(data_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
    T_EQ_INT(data_crc32c(0, "", 0), 0u);
    /* the hardware path (where there is one) and the tables agree at every length and
     * alignment */
    uint8_t buf[300];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)(i * 131u + 7u);
    int differ = 0;
    for (size_t off = 0; off < 9; off++)
        for (size_t n = 0; n + off <= sizeof buf; n += 13)
            differ += data_crc32c(0, buf + off, n) != data_crc32c_portable(0, buf + off, n);
    T_EQ_INT(differ, 0);
}

/* The frame of b"hello" as TensorFlow wrote it: the length, both masked CRCs. */
static void test_frame_matches_tensorflow(void)
{
    uint8_t head[DATA_TFRECORD_HEAD], foot[4];
    data_tfrecord_frame_head(5, head);
    data_tfrecord_frame_foot((const uint8_t *)"hello", 5, foot);
    T_CHECK(memcmp(head, tf_hello, sizeof head) == 0);
    T_CHECK(memcmp(foot, tf_hello + 17, 4) == 0);
    /* the mask alone: ((crc >> 15) | (crc << 17)) + 0xa282ead8 */
    T_EQ_INT(data_crc32c_mask(0), 0xa282ead8u);
    T_EQ_INT(data_crc32c_mask(0x00008000u), 0xa282ead9u);
    T_EQ_INT(data_crc32c_mask(1), 0xa282ead8u + 0x20000u);
}

/* --- the Example codec ------------------------------------------------------------------- */

static void test_example_decodes_tensorflow(void)
{
    struct data_tfrecord_example ex;
    const char *field = NULL;
    char why[160] = "";
    T_CHECK_MSG(data_tfrecord_example_decode(tf_example, sizeof tf_example, &ex, &field, why,
                                             sizeof why) == 0,
                "%s: %s", field, why);
    T_EQ_INT(ex.label, 7);
    T_EQ_INT(ex.height, 32);
    T_EQ_INT(ex.width, 300);
    T_EQ_INT(ex.channels, 3);
    T_EQ_INT(ex.encoded_len, 4);
    T_CHECK(ex.encoded && memcmp(ex.encoded, "\xff\xd8\xff\xd9", 4) == 0);
}

static void test_example_round_trip(void)
{
    const uint8_t jpeg[] = {0xff, 0xd8, 1, 2, 3, 0xff, 0xd9};
    struct data_tfrecord_example in = {.encoded = jpeg,
                                       .encoded_len = sizeof jpeg,
                                       .label = 123456789012LL,
                                       .height = 4096,
                                       .width = 1,
                                       .channels = 1},
                                 out;
    uint8_t *buf = NULL;
    size_t len = 0;
    T_CHECK(data_tfrecord_example_encode(&in, &buf, &len) == 0);
    const char *field;
    char why[160];
    T_CHECK_MSG(data_tfrecord_example_decode(buf, len, &out, &field, why, sizeof why) == 0,
                "%s: %s", field, why);
    T_EQ_INT(out.label, in.label);
    T_EQ_INT(out.height, 4096);
    T_EQ_INT(out.width, 1);
    T_EQ_INT(out.channels, 1);
    T_CHECK(out.encoded_len == sizeof jpeg && memcmp(out.encoded, jpeg, sizeof jpeg) == 0);
    /* a negative label survives (and the reader refuses it by range, not the codec) */
    in.label = -1;
    free(buf);
    T_CHECK(data_tfrecord_example_encode(&in, &buf, &len) == 0);
    T_CHECK(data_tfrecord_example_decode(buf, len, &out, &field, why, sizeof why) == 0);
    T_EQ_INT(out.label, -1);
    free(buf);
}

/* A hand-built protobuf, for the Examples the writer would never make. */
struct pb {
    uint8_t b[512];
    size_t n;
};

static void pb_raw(struct pb *p, const void *d, size_t n)
{
    memcpy(p->b + p->n, d, n);
    p->n += n;
}

static void pb_varint(struct pb *p, uint64_t v)
{
    while (v >= 0x80) {
        p->b[p->n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p->b[p->n++] = (uint8_t)v;
}

static void pb_len(struct pb *p, uint32_t num, const struct pb *inner)
{
    pb_varint(p, (uint64_t)num << 3 | 2);
    pb_varint(p, inner->n);
    pb_raw(p, inner->b, inner->n);
}

static void pb_bytes(struct pb *p, uint32_t num, const void *d, size_t n)
{
    pb_varint(p, (uint64_t)num << 3 | 2);
    pb_varint(p, n);
    pb_raw(p, d, n);
}

/* A map entry key -> Feature{kind: list} where list holds values (bytes each, or int64s
 * packed); kind 0: an empty Feature; two_kinds adds an int64_list beside. */
static void pb_feature(struct pb *features, const char *key, int kind, int nvalues,
                       const char *bytes, int64_t v, bool two_kinds)
{
    struct pb list = {.n = 0}, feature = {.n = 0}, entry = {.n = 0}, packed = {.n = 0};
    for (int i = 0; i < nvalues; i++) {
        if (kind == 1)
            pb_bytes(&list, 1, bytes, strlen(bytes));
        else
            pb_varint(&packed, (uint64_t)v);
    }
    if (kind == 3)
        pb_len(&list, 1, &packed);
    if (kind)
        pb_len(&feature, (uint32_t)kind, &list);
    if (two_kinds)
        pb_len(&feature, 3, &list);
    pb_bytes(&entry, 1, key, strlen(key));
    pb_len(&entry, 2, &feature);
    pb_len(features, 1, &entry);
}

static void pb_example(struct pb *ex, const struct pb *features)
{
    ex->n = 0;
    pb_len(ex, 1, features);
}

/* Every way an Example is refused: the feature named and what is wrong. */
static void test_example_strict(void)
{
    static const struct {
        int edit;
        const char *field, *why;
    } cases[] = {
        {0, "image/encoded", "missing"},
        {1, "image/class/label", "missing"},
        {2, "image/class/label", "wrong feature type: a bytes_list, an int64_list expected"},
        {3, "image/encoded", "wrong feature type: an int64_list, a bytes_list expected"},
        {4, "image/class/label", "2 values in the int64_list, 1 expected"},
        {5, "image/encoded", "appears twice"},
        {6, "image/class/label", "wrong feature type: no value"},
        {7, "image/height", "holds an int64_list and an int64_list"},
        {8, "image/format", "\"PNG\", \"JPEG\" expected"},
        {9, "Example", "malformed protobuf"},
        {10, "image/encoded", "0 values in the bytes_list"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct pb f = {.n = 0}, ex;
        int edit = cases[i].edit;
        if (edit != 0)
            pb_feature(&f, "image/encoded", edit == 3 ? 3 : 1, edit == 10 ? 0 : 1, "\xff\xd8",
                       5, false);
        if (edit != 1)
            pb_feature(&f, "image/class/label",
                       edit == 2   ? 1
                       : edit == 6 ? 0
                                   : 3,
                       edit == 4 ? 2 : 1, "7", 7, false);
        if (edit == 5)
            pb_feature(&f, "image/encoded", 1, 1, "\xff\xd8", 0, false);
        if (edit == 7)
            pb_feature(&f, "image/height", 3, 1, "", 8, true);
        if (edit == 8)
            pb_feature(&f, "image/format", 1, 1, "PNG", 0, false);
        pb_feature(&f, "unrelated/feature", 2, 0, "", 0, false); /* skipped */
        pb_example(&ex, &f);
        if (edit == 9)
            ex.n -= 3; /* the last field runs past the end */
        struct data_tfrecord_example out;
        const char *field = "";
        char why[160] = "";
        int rc = data_tfrecord_example_decode(ex.b, ex.n, &out, &field, why, sizeof why);
        T_CHECK_MSG(rc < 0 && strcmp(field, cases[i].field) == 0 && strstr(why, cases[i].why),
                    "case %d: rc %d, %s: %s", edit, rc, field, why);
    }
    /* the valid base case decodes (so each refusal above is the edit's) */
    struct pb f = {.n = 0}, ex;
    pb_feature(&f, "image/encoded", 1, 1, "\xff\xd8", 0, false);
    pb_feature(&f, "image/class/label", 3, 1, "", 7, false);
    pb_example(&ex, &f);
    struct data_tfrecord_example out;
    const char *field;
    char why[160];
    T_CHECK(data_tfrecord_example_decode(ex.b, ex.n, &out, &field, why, sizeof why) == 0);
    T_EQ_INT(out.label, 7);
    T_EQ_INT(out.height, -1);
}

/* --- writer and reader ------------------------------------------------------------------- */

static uint8_t px(int i, int k)
{
    return (uint8_t)(k % 5 == 0 ? (i * 37 + k * 11) : (i * 3 + k / 8));
}

static void image_of(int i, uint8_t *chw)
{
    for (int k = 0; k < C * H * W; k++)
        chw[k] = px(i, k);
}

/* N samples (label i % 10) into dir in shards of shard_bytes. */
static int write_set(const char *dir, int64_t shard_bytes, struct err *e)
{
    struct data_tfrecord_writer *tw;
    if (data_tfrecord_writer_create(dir, DATA_SPLIT_TRAIN, 90, C, H, W, 10, shard_bytes, &tw,
                                    e) < 0)
        return -1;
    uint8_t chw[C * H * W];
    for (int i = 0; i < N; i++) {
        image_of(i, chw);
        if (data_tfrecord_writer_add(tw, chw, i % 10, e) < 0) {
            data_tfrecord_writer_abort(tw);
            return -1;
        }
    }
    return data_tfrecord_writer_finish(tw, e);
}

static int count_files(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t l = strlen(de->d_name), s = strlen(suffix);
        n += l > s && strcmp(de->d_name + l - s, suffix) == 0;
    }
    if (d)
        closedir(d);
    return n;
}

/* Every sample filled plain equals the JPEG codec's decode of the encoder's bytes, and its
 * label; the dataset's shape and count as written. "" when so. */
static const char *read_matches(struct dataset *ds)
{
    if (ds->n != N || ds->c != C || ds->h != H || ds->w != W || ds->classes != 10)
        return "shape, count or classes";
    float x[C * H * W];
    uint8_t chw[C * H * W], want[C * H * W];
    for (int64_t i = 0; i < N; i++) {
        int32_t y;
        struct data_draw draw = {0, 0, 0};
        struct err e;
        if (dataset_fill(ds, &i, 1, &draw, x, &y, &e) < 0)
            return "a fill failed";
        image_of((int)i, chw);
        uint8_t *jpg;
        size_t len;
        if (data_image_encode(DATA_CODEC_JPEG, 90, chw, C, H, W, &jpg, &len, &e) < 0)
            return "encode";
        int rc = data_image_decode(jpg, len, "ref", C, H, W, want, &e);
        free(jpg);
        if (rc < 0)
            return "decode";
        if (y != i % 10)
            return "a label";
        for (int k = 0; k < C * H * W; k++)
            if (x[k] != (float)want[k] / 255.0f)
                return "a pixel";
    }
    return "";
}

/* Several shards named NNNNN-of-MMMMM, each with an .idx tiling it; read back equal, one
 * storage request per sample; the same without the .idx files (the framing scanned). */
static void test_write_read_layout(void)
{
    struct err e;
    char dir[128], p[256];
    test_tmp_path(dir, sizeof dir, "layout");
    T_OK(write_set(dir, 4000, &e));
    int shards = count_files(dir, ".tfrecord");
    T_CHECK_MSG(shards >= 3, "%d shards", shards);
    T_EQ_INT(count_files(dir, ".idx"), shards);
    T_EQ_INT(count_files(dir, ".tmp"), 0);
    /* every .idx line "offset length", back to back, ending at the file's size */
    int64_t records = 0;
    for (int s = 0; s < shards; s++) {
        size_t n, in;
        snprintf(p, sizeof p, "%s/train-%05d-of-%05d.tfrecord", dir, s, shards);
        uint8_t *shard = test_slurp(p, &n);
        snprintf(p + strlen(p), sizeof p - strlen(p), ".idx");
        char *idx = (char *)test_slurp(p, &in);
        T_CHECK_MSG(shard && idx, "shard %d", s);
        if (!shard || !idx) {
            free(shard);
            free(idx);
            return;
        }
        unsigned long long off, len, at = 0;
        int used;
        for (char *q = idx; sscanf(q, "%llu %llu\n%n", &off, &len, &used) == 2; q += used) {
            T_CHECK(off == at && len >= DATA_TFRECORD_FRAME && off + len <= n);
            uint64_t dlen = 0;
            for (int b = 7; b >= 0 && off + 8 <= n; b--)
                dlen = dlen << 8 | shard[off + (size_t)b];
            T_CHECK(dlen + DATA_TFRECORD_FRAME == len);
            at = off + len;
            records++;
        }
        T_CHECK(at == n);
        free(shard);
        free(idx);
    }
    T_EQ_INT(records, N);
    struct data_storage_profile prof = {.name = "local"};
    struct data_storage *st;
    T_OK(data_storage_create(&prof, &st, &e));
    struct data_image_opts o = {0};
    struct dataset *ds;
    T_OK(dataset_tfrecord_open(dir, "cifar10", DATA_SPLIT_TRAIN, &o, st, &ds, &e));
    struct data_storage_stats before, after;
    data_storage_get_stats(st, &before);
    const char *why = read_matches(ds);
    data_storage_get_stats(st, &after);
    T_CHECK_MSG(!*why, "%s", why);
    T_EQ_INT(after.requests - before.requests, N); /* one read per sample */
    dataset_destroy(ds);
    /* without the indexes: the framing is scanned at open, a read per record */
    for (int s = 0; s < shards; s++) {
        snprintf(p, sizeof p, "%s/train-%05d-of-%05d.tfrecord.idx", dir, s, shards);
        T_CHECK(unlink(p) == 0);
    }
    data_storage_get_stats(st, &before);
    T_OK(dataset_tfrecord_open(dir, "cifar10", DATA_SPLIT_TRAIN, &o, st, &ds, &e));
    data_storage_get_stats(st, &after);
    /* per shard an open, a failed open of its .idx and a read per record; one more read
     * for the shape */
    T_EQ_INT(after.requests - before.requests, 2 * shards + N + 1);
    why = read_matches(ds);
    T_CHECK_MSG(!*why, "%s", why);
    dataset_destroy(ds);
    data_storage_destroy(st);
}

/* --- corruption ------------------------------------------------------------------------- */

/* The one-shard set written afresh into dir; *path its shard. */
static int fresh_set(const char *name, char *dir, size_t dn, char *path, size_t pn,
                     struct err *e)
{
    test_tmp_path(dir, dn, name);
    snprintf(path, pn, "%s/train-00000-of-00001.tfrecord", dir);
    return write_set(dir, 1 << 20, e);
}

/* Record k's offset in the shard, from its .idx. */
static long record_offset(const char *path, int k)
{
    char ip[300];
    snprintf(ip, sizeof ip, "%s.idx", path);
    size_t n;
    char *idx = (char *)test_slurp(ip, &n);
    long off = -1;
    char *q = idx;
    for (int i = 0; q && i <= k; i++) {
        unsigned long long o, l;
        int used;
        if (sscanf(q, "%llu %llu\n%n", &o, &l, &used) != 2)
            break;
        off = i == k ? (long)o : -1;
        q += used;
    }
    free(idx);
    return off;
}

static int flip_byte(const char *path, long at)
{
    FILE *f = fopen(path, "r+b");
    if (!f || fseek(f, at, SEEK_SET) != 0) {
        if (f)
            fclose(f);
        return -1;
    }
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x5a, f);
    return fclose(f);
}

/* Fills sample i alone; the error into *e. */
static int fill_one(const struct dataset *ds, int64_t i, struct err *e)
{
    float x[C * H * W];
    int32_t y;
    struct data_draw draw = {0, 0, 0};
    return dataset_fill(ds, &i, 1, &draw, x, &y, e);
}

static bool names(const struct err *e, const char *file, const char *record, const char *what)
{
    return strstr(e->msg, file) && strstr(e->msg, record) && strstr(e->msg, what);
}

/* Bad length CRC and bad data CRC: the fill of that record fails naming file, record and
 * which CRC, its neighbours read; scanned without an .idx, a bad length CRC fails the open. */
static void test_corrupt_crcs(void)
{
    struct err e;
    char dir[128], path[256];
    struct data_image_opts o = {0};
    struct dataset *ds;
    for (int which = 0; which < 2; which++) {
        T_OK(fresh_set(which ? "crc-data" : "crc-len", dir, sizeof dir, path, sizeof path, &e));
        long off = record_offset(path, 5);
        T_CHECK(off > 0);
        /* the length's CRC (byte 8 of the frame), or a byte of the data */
        T_CHECK(flip_byte(path, off + (which ? 40 : 8)) == 0);
        T_OK(dataset_tfrecord_open(dir, "cifar10", DATA_SPLIT_TRAIN, &o, NULL, &ds, &e));
        T_OK(fill_one(ds, 4, &e));
        T_OK(fill_one(ds, 6, &e));
        T_CHECK(fill_one(ds, 5, &e) < 0);
        T_CHECK_MSG(names(&e, "train-00000-of-00001.tfrecord", "record 5 ",
                          which ? "bad data CRC" : "bad length CRC"),
                    "%s", e.msg);
        dataset_destroy(ds);
    }
    /* no .idx: the scan meets the bad length CRC at open */
    char ip[300];
    snprintf(ip, sizeof ip, "%s.idx", path);
    T_OK(fresh_set("crc-scan", dir, sizeof dir, path, sizeof path, &e));
    snprintf(ip, sizeof ip, "%s.idx", path);
    long off = record_offset(path, 5);
    T_CHECK(unlink(ip) == 0 && flip_byte(path, off + 9) == 0);
    T_CHECK(dataset_tfrecord_open(dir, "cifar10", DATA_SPLIT_TRAIN, &o, NULL, &ds, &e) < 0);
    T_CHECK_MSG(names(&e, path, "record 5 ", "bad length CRC"), "%s", e.msg);
}

/* A shard cut inside its last record: the open fails naming it, with or without .idx. */
static void test_corrupt_truncated(void)
{
    struct err e;
    char dir[128], path[256], ip[300];
    struct data_image_opts o = {0};
    struct dataset *ds;
    T_OK(fresh_set("trunc", dir, sizeof dir, path, sizeof path, &e));
    long off = record_offset(path, N - 1);
    T_CHECK(off > 0 && truncate(path, off + 30) == 0);
    T_CHECK(dataset_tfrecord_open(dir, "cifar10", DATA_SPLIT_TRAIN, &o, NULL, &ds, &e) < 0);
    T_CHECK_MSG(names(&e, path, "record 36 ", "truncated record"), "%s", e.msg);
    snprintf(ip, sizeof ip, "%s.idx", path);
    T_CHECK(unlink(ip) == 0);
    T_CHECK(dataset_tfrecord_open(dir, "cifar10", DATA_SPLIT_TRAIN, &o, NULL, &ds, &e) < 0);
    T_CHECK_MSG(names(&e, path, "record 36 ", "truncated record"), "%s", e.msg);
    /* cut inside a head: still named */
    T_CHECK(truncate(path, off + 5) == 0);
    T_CHECK(dataset_tfrecord_open(dir, "cifar10", DATA_SPLIT_TRAIN, &o, NULL, &ds, &e) < 0);
    T_CHECK_MSG(names(&e, path, "record 36 ", "truncated record"), "%s", e.msg);
}

/* A shard of two framed records: a good Example, then `bad`. */
static int write_pair(const char *dir, const struct pb *bad, char *path, size_t pn)
{
    uint8_t chw[C * H * W], *jpg, *good;
    size_t jlen, glen;
    struct err e;
    image_of(0, chw);
    if (data_image_encode(DATA_CODEC_JPEG, 90, chw, C, H, W, &jpg, &jlen, &e) < 0)
        return -1;
    struct data_tfrecord_example ex = {.encoded = jpg,
                                       .encoded_len = jlen,
                                       .label = 3,
                                       .height = H,
                                       .width = W,
                                       .channels = C};
    int rc = data_tfrecord_example_encode(&ex, &good, &glen);
    free(jpg);
    if (rc < 0 || mkdir(dir, 0700) < 0)
        return -1;
    snprintf(path, pn, "%s/train-00000-of-00001.tfrecord", dir);
    FILE *f = fopen(path, "wb");
    const uint8_t *data[2] = {good, bad->b};
    size_t len[2] = {glen, bad->n};
    for (int r = 0; f && r < 2; r++) {
        uint8_t head[DATA_TFRECORD_HEAD], foot[4];
        data_tfrecord_frame_head(len[r], head);
        data_tfrecord_frame_foot(data[r], len[r], foot);
        fwrite(head, 1, sizeof head, f);
        fwrite(data[r], 1, len[r], f);
        fwrite(foot, 1, 4, f);
    }
    free(good);
    return f && fclose(f) == 0 ? 0 : -1;
}

/* Record 1's Example wrong in each way a reader must name: the fill fails with the file,
 * "record 1" and the feature; record 0 reads. */
static void test_corrupt_examples(void)
{
    static const struct {
        const char *name, *field, *why;
    } cases[] = {
        {"no-encoded", "image/encoded", "missing"},
        {"no-label", "image/class/label", "missing"},
        {"label-bytes", "image/class/label", "wrong feature type"},
        {"label-range", "image/class/label", "label 12 out of range [0, 10)"},
        {"label-negative", "image/class/label", "label -1 out of range"},
        {"bad-jpeg", "image/encoded", "JPEG"},
        {"height", "image/height", "16, the dataset's samples are 3x8x8"},
    };
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        struct pb f = {.n = 0}, ex;
        if (i != 0)
            pb_feature(&f, "image/encoded", 1, 1,
                       i == 5 ? "\xff\xd8\xff\xdb not a JPEG" : "\xff\xd8", 0, false);
        if (i != 1)
            pb_feature(&f, "image/class/label", i == 2 ? 1 : 3, 1, "7",
                       i == 3   ? 12
                       : i == 4 ? -1
                                : 7,
                       false);
        if (i == 6)
            pb_feature(&f, "image/height", 3, 1, "", 16, false);
        pb_example(&ex, &f);
        struct err e;
        char dir[128], path[256];
        test_tmp_path(dir, sizeof dir, cases[i].name);
        T_CHECK(write_pair(dir, &ex, path, sizeof path) == 0);
        struct data_image_opts o = {0};
        struct dataset *ds;
        T_OK(dataset_tfrecord_open(dir, "cifar10", DATA_SPLIT_TRAIN, &o, NULL, &ds, &e));
        T_OK(fill_one(ds, 0, &e));
        T_CHECK(fill_one(ds, 1, &e) < 0);
        T_CHECK_MSG(names(&e, path, "record 1 ", cases[i].field) && strstr(e.msg, cases[i].why),
                    "%s: %s", cases[i].name, e.msg);
        dataset_destroy(ds);
    }
}

/* A shard of the M missing (an interrupted rename, a lost file): the open names it; no
 * shard at all is ERR_NOT_FOUND (dataset_open then says to convert first). */
static void test_missing_shard(void)
{
    struct err e;
    char dir[128], p[256];
    test_tmp_path(dir, sizeof dir, "missing");
    T_OK(write_set(dir, 4000, &e));
    int shards = count_files(dir, ".tfrecord");
    snprintf(p, sizeof p, "%s/train-00001-of-%05d.tfrecord", dir, shards);
    T_CHECK(shards >= 3 && unlink(p) == 0);
    struct data_image_opts o = {0};
    struct dataset *ds;
    T_CHECK(dataset_tfrecord_open(dir, "cifar10", DATA_SPLIT_TRAIN, &o, NULL, &ds, &e) < 0);
    T_CHECK_MSG(strstr(e.msg, p) && strstr(e.msg, "missing"), "%s", e.msg);
    T_CHECK(dataset_tfrecord_open(dir, "cifar10", DATA_SPLIT_TEST, &o, NULL, &ds, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
}

/* The writer's refusals; an abort leaves no file; a rewrite removes the earlier, longer
 * conversion's shards. */
static void test_writer_errors(void)
{
    struct err e;
    char dir[128];
    test_tmp_path(dir, sizeof dir, "werr");
    struct data_tfrecord_writer *tw;
    uint8_t chw[C * H * W] = {0};
    T_CHECK(data_tfrecord_writer_create(dir, DATA_SPLIT_TRAIN, 101, C, H, W, 10, 1000, &tw,
                                        &e) < 0);
    T_EQ_STR(e.field, "quality");
    T_OK(data_tfrecord_writer_create(dir, DATA_SPLIT_TRAIN, 0, C, H, W, 10, 1000, &tw, &e));
    T_CHECK(data_tfrecord_writer_add(tw, chw, 10, &e) < 0);
    T_CHECK_MSG(strstr(e.msg, "label 10"), "%s", e.msg);
    T_CHECK(data_tfrecord_writer_finish(tw, &e) < 0); /* no samples */
    T_EQ_INT(count_files(dir, ".tfrecord") + count_files(dir, ".tmp"), 0);
    T_OK(data_tfrecord_writer_create(dir, DATA_SPLIT_TRAIN, 0, C, H, W, 10, 1000, &tw, &e));
    T_OK(data_tfrecord_writer_add(tw, chw, 1, &e));
    data_tfrecord_writer_abort(tw);
    T_EQ_INT(count_files(dir, ".tfrecord") + count_files(dir, ".tmp"), 0);
    T_OK(write_set(dir, 4000, &e));
    T_CHECK(count_files(dir, ".tfrecord") >= 3);
    T_OK(write_set(dir, 1 << 20, &e));
    T_EQ_INT(count_files(dir, ".tfrecord"), 1);
    T_EQ_INT(count_files(dir, ".idx"), 1);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_crc32c_check_value);
    TEST_RUN(test_frame_matches_tensorflow);
    TEST_RUN(test_example_decodes_tensorflow);
    TEST_RUN(test_example_round_trip);
    TEST_RUN(test_example_strict);
    TEST_RUN(test_write_read_layout);
    TEST_RUN(test_corrupt_crcs);
    TEST_RUN(test_corrupt_truncated);
    TEST_RUN(test_corrupt_examples);
    TEST_RUN(test_missing_shard);
    TEST_RUN(test_writer_errors);
    return test_end();
}
