/* tfrecord: TensorFlow's TFRecord format, its reader (dataset_tfrecord_open) and its writer
 * (data_tfrecord_writer_*): the shards tf.data.TFRecordDataset reads, so one converted
 * dataset feeds ddpbench's C loader and the framework engines alike.
 *
 * Layout (issue 34's contract; every integer little-endian):
 *   dir/<split>-NNNNN-of-MMMMM.tfrecord  shard NNNNN of MMMMM (5 digits each, from 00000):
 *       framed records back to back, in the samples' order, nothing else. A frame is
 *       u64 length, u32 masked CRC-32C of the 8 length bytes, the data, u32 masked CRC-32C
 *       of the data (mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8), as TensorFlow's
 *       RecordWriter writes it (no compression).
 *   dir/<shard>.idx  one text line "offset length\n" per record (length = the whole frame,
 *       16 + data), the index of the `tfrecord` PyPI package's create_index and of DALI's
 *       tfrecord2idx, so those readers use it too.
 *   Each record's data is a tf.train.Example with features image/encoded (bytes: the JPEG
 *   file), image/class/label (int64, ddpbench's 0-based label, not TF ImageNet's 1-based),
 *   image/height, image/width, image/channels (int64) and image/format (bytes "JPEG").
 *
 * Decision: the Example is decoded by the small protobuf reader below, not protobuf-c. It
 * reads exactly the three nesting levels of the messages involved (Example -> Features ->
 * map entry -> Feature -> BytesList / Int64List), is strict where protobuf-c is lenient (a
 * feature named twice, a Feature with two value kinds, a list of the wrong length are
 * errors naming the feature, not a silent last-one-wins) and points into the record
 * instead of copying the JPEG into a heap block per sample; unknown fields are skipped,
 * as protobuf requires, after their framing is checked. The integration test feeds it
 * Examples serialized by TensorFlow itself, so the two stay in agreement; protobuf-c would
 * also add a code generation step to the build for six messages.
 *
 * Reading: the shards are found by name (every NNNNN of the MMMMM must be there); each
 * shard's .idx, when present, gives the records' places, checked to tile the file exactly;
 * without one the framing is scanned at open, one 12-byte read per record through the
 * storage (a request each on an emulated nfs or blob: the note on stderr says how many),
 * as tf.data does at every epoch. Every shard is opened once at open; a fill reads one
 * sample as one request (its whole frame), checks both CRCs, decodes the Example and the
 * JPEG and checks label and shape. Every error names the file, the record (its number in
 * the shard and its offset) and the field. The shape comes from the first record
 * (height, width, channels, else the JPEG's header); the classes from opts->classes, else
 * 10: TFRecord carries no class count, and the datasets that convert (mnist,
 * fashion-mnist, cifar10) have 10.
 *
 * Writing mirrors records.c: shards under temporary names, renamed (each shard before its
 * index) by finish once the shard count is known; no fsync. */
#include "worker/data/tfrecord.h"

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/buf.h"
#include "worker/data/codec.h"
#include "worker/data/crc32c.h"
#include "worker/data/formats.h"
#include "worker/data/images.h"
#include "worker/data/storage.h"

#define TFR_MAX_SHARDS 100000 /* five digits in the name */
#define TFR_DIR_MAX 512
#define TFR_PATH_MAX (TFR_DIR_MAX + 48)
#define TFR_MAX_RECORD ((uint64_t)1 << 30) /* a record's data; an image is far less */
#define TFR_CLASSES 10                     /* when opts->classes does not say */
#define TFR_QUALITY 95

#define TFR_ENCODED "image/encoded"
#define TFR_LABEL "image/class/label"
#define TFR_HEIGHT "image/height"
#define TFR_WIDTH "image/width"
#define TFR_CHANNELS "image/channels"
#define TFR_FORMAT "image/format"

/* --- little-endian fields and names ---------------------------------------------------- */

static uint64_t tfr_get_u64(const uint8_t *p)
{
    return (uint64_t)buf_load_u32(p) | (uint64_t)buf_load_u32(p + 4) << 32;
}

static void tfr_shard_path(char *out, size_t cap, const char *dir, enum data_split split,
                           uint32_t shard, uint32_t nshards)
{
    snprintf(out, cap, "%s/%s-%05u-of-%05u.tfrecord", dir, data_split_name(split),
             (unsigned)shard, (unsigned)nshards);
}

/* Five decimal digits at p into *v. */
static bool tfr_digits5(const char *p, uint32_t *v)
{
    *v = 0;
    for (int i = 0; i < 5; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        *v = *v * 10 + (uint32_t)(p[i] - '0');
    }
    return true;
}

/* A shard's name in dir: "<split>-NNNNN-of-MMMMM.tfrecord" exactly (suffix "" for the
 * shard, ".idx" for its index). */
static bool tfr_parse_name(const char *name, enum data_split split, const char *suffix,
                           uint32_t *shard, uint32_t *nshards)
{
    const char *sp = data_split_name(split);
    size_t sl = strlen(sp);
    if (strncmp(name, sp, sl) != 0 || name[sl] != '-')
        return false;
    const char *p = name + sl + 1;
    if (!tfr_digits5(p, shard) || strncmp(p + 5, "-of-", 4) != 0 ||
        !tfr_digits5(p + 9, nshards) || strncmp(p + 14, ".tfrecord", 9) != 0 ||
        strcmp(p + 23, suffix) != 0)
        return false;
    return *nshards >= 1 && *shard < *nshards;
}

void data_tfrecord_frame_head(uint64_t len, uint8_t head[DATA_TFRECORD_HEAD])
{
    for (int i = 0; i < 8; i++)
        head[i] = (uint8_t)(len >> (8 * i));
    buf_store_u32(head + 8, data_crc32c_mask(data_crc32c(0, head, 8)));
}

void data_tfrecord_frame_foot(const uint8_t *data, size_t len, uint8_t foot[4])
{
    buf_store_u32(foot, data_crc32c_mask(data_crc32c(0, data, len)));
}

/* ======================================================================================= */
/* the tf.train.Example codec                                                              */
/* ======================================================================================= */

/* message Example  { Features features = 1; }
 * message Features { map<string, Feature> feature = 1; }   (entries: key 1, value 2)
 * message Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
 *                                 Int64List int64_list = 3; } }
 * message BytesList { repeated bytes value = 1; }
 * message Int64List { repeated int64 value = 1 [packed = true]; } */
enum { PB_VARINT = 0, PB_FIXED64 = 1, PB_LEN = 2, PB_FIXED32 = 5 };
enum { TFR_KIND_NONE = 0, TFR_KIND_BYTES = 1, TFR_KIND_FLOAT = 2, TFR_KIND_INT64 = 3 };

struct pb_cur {
    const uint8_t *p, *end;
};

struct pb_field {
    uint32_t num;
    int wire;
    uint64_t v;          /* PB_VARINT */
    const uint8_t *data; /* PB_LEN: the payload */
    size_t len;
};

static int pb_varint(struct pb_cur *c, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (c->p == c->end)
            return -1;
        uint8_t b = *c->p++;
        if (shift == 63 && b > 1)
            return -1;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return 0;
    }
    return -1;
}

/* The next field of a message: 1, 0 at its end, -1 (why set) when malformed. */
static int pb_next(struct pb_cur *c, struct pb_field *f, char *why, size_t n)
{
    if (c->p == c->end)
        return 0;
    uint64_t key;
    if (pb_varint(c, &key) < 0 || key >> 3 == 0 || key >> 3 > 0x1fffffff) {
        snprintf(why, n, "malformed protobuf: bad field key");
        return -1;
    }
    *f = (struct pb_field){.num = (uint32_t)(key >> 3), .wire = (int)(key & 7)};
    size_t left;
    switch (f->wire) {
    case PB_VARINT:
        if (pb_varint(c, &f->v) == 0)
            return 1;
        snprintf(why, n, "malformed protobuf: bad varint in field %u", (unsigned)f->num);
        return -1;
    case PB_FIXED64:
    case PB_FIXED32:
        left = f->wire == PB_FIXED64 ? 8 : 4;
        if ((size_t)(c->end - c->p) < left)
            break;
        c->p += left;
        return 1;
    case PB_LEN:
        if (pb_varint(c, &f->v) < 0 || f->v > (uint64_t)(c->end - c->p))
            break;
        f->data = c->p;
        f->len = (size_t)f->v;
        c->p += f->len;
        return 1;
    default:
        snprintf(why, n, "malformed protobuf: wire type %d in field %u", f->wire,
                 (unsigned)f->num);
        return -1;
    }
    snprintf(why, n, "malformed protobuf: field %u runs past the end of its message",
             (unsigned)f->num);
    return -1;
}

/* A feature the decoder looks for, and what it found. */
struct tfr_want {
    const char *key;
    int kind; /* the kind it must have */
    bool required;
    const uint8_t *feature; /* the Feature message, when seen */
    size_t len;
};

static const char *tfr_kind_name(int kind)
{
    switch (kind) {
    case TFR_KIND_BYTES: return "a bytes_list";
    case TFR_KIND_FLOAT: return "a float_list";
    case TFR_KIND_INT64: return "an int64_list";
    default: return "no value";
    }
}

/* One map entry of Features: its key and Feature, recorded in want[] when wanted. */
static int tfr_decode_entry(const uint8_t *p, size_t len, struct tfr_want *want, int nwant,
                            const char **field, char *why, size_t n)
{
    struct pb_cur c = {p, p + len};
    struct pb_field f;
    const uint8_t *key = NULL, *val = NULL;
    size_t klen = 0, vlen = 0;
    int rc;
    while ((rc = pb_next(&c, &f, why, n)) == 1) {
        if ((f.num == 1 || f.num == 2) && f.wire != PB_LEN) {
            snprintf(why, n, "malformed map entry: field %u is not length-delimited",
                     (unsigned)f.num);
            return -1;
        }
        if (f.num == 1)
            key = f.data, klen = f.len;
        else if (f.num == 2)
            val = f.data, vlen = f.len;
    }
    if (rc < 0)
        return -1;
    for (int i = 0; key && i < nwant; i++) {
        if (strlen(want[i].key) != klen || memcmp(want[i].key, key, klen) != 0)
            continue;
        *field = want[i].key;
        if (want[i].feature) {
            snprintf(why, n, "the feature appears twice");
            return -1;
        }
        /* an entry without a value is an empty Feature: no kind, refused when read */
        static const uint8_t empty[1];
        want[i].feature = val ? val : empty;
        want[i].len = val ? vlen : 0;
    }
    return 0;
}

/* The Features message: every entry, each wanted key at most once. */
static int tfr_decode_features(const uint8_t *p, size_t len, struct tfr_want *want, int nwant,
                               const char **field, char *why, size_t n)
{
    struct pb_cur c = {p, p + len};
    struct pb_field f;
    int rc;
    while ((rc = pb_next(&c, &f, why, n)) == 1) {
        if (f.num != 1)
            continue;
        if (f.wire != PB_LEN) {
            snprintf(why, n, "malformed Features: the feature map is not length-delimited");
            return -1;
        }
        if (tfr_decode_entry(f.data, f.len, want, nwant, field, why, n) < 0)
            return -1;
        *field = "Example";
    }
    return rc;
}

/* A Feature's one value kind: *kind and its list message. */
static int tfr_feature_kind(const struct tfr_want *w, int *kind, struct pb_cur *list, char *why,
                            size_t n)
{
    struct pb_cur c = {w->feature, w->feature + w->len};
    struct pb_field f;
    int rc;
    *kind = TFR_KIND_NONE;
    while ((rc = pb_next(&c, &f, why, n)) == 1) {
        if (f.num < TFR_KIND_BYTES || f.num > TFR_KIND_INT64)
            continue;
        if (f.wire != PB_LEN) {
            snprintf(why, n, "malformed Feature: its value is not length-delimited");
            return -1;
        }
        if (*kind != TFR_KIND_NONE) {
            snprintf(why, n, "wrong feature type: the Feature holds %s and %s",
                     tfr_kind_name(*kind), tfr_kind_name((int)f.num));
            return -1;
        }
        *kind = (int)f.num;
        *list = (struct pb_cur){f.data, f.data + f.len};
    }
    if (rc < 0)
        return -1;
    if (*kind != w->kind) {
        snprintf(why, n, "wrong feature type: %s, %s expected", tfr_kind_name(*kind),
                 tfr_kind_name(w->kind));
        return -1;
    }
    return 0;
}

/* A bytes_list's values: exactly one, into *data, *len. */
static int tfr_one_bytes(struct pb_cur list, const uint8_t **data, size_t *len, char *why,
                         size_t n)
{
    struct pb_field f;
    int rc, count = 0;
    while ((rc = pb_next(&list, &f, why, n)) == 1) {
        if (f.num != 1)
            continue;
        if (f.wire != PB_LEN) {
            snprintf(why, n, "malformed BytesList: a value is not length-delimited");
            return -1;
        }
        *data = f.data;
        *len = f.len;
        count++;
    }
    if (rc == 0 && count != 1)
        snprintf(why, n, "%d values in the bytes_list, 1 expected", count);
    return rc < 0 || count != 1 ? -1 : 0;
}

/* An int64_list's values, packed or not: exactly one, into *v. */
static int tfr_one_int64(struct pb_cur list, int64_t *v, char *why, size_t n)
{
    struct pb_field f;
    int rc, count = 0;
    uint64_t u = 0;
    while ((rc = pb_next(&list, &f, why, n)) == 1) {
        if (f.num != 1)
            continue;
        if (f.wire == PB_VARINT) {
            u = f.v;
            count++;
            continue;
        }
        if (f.wire != PB_LEN) {
            snprintf(why, n, "malformed Int64List: wire type %d", f.wire);
            return -1;
        }
        struct pb_cur packed = {f.data, f.data + f.len};
        while (packed.p < packed.end) {
            if (pb_varint(&packed, &u) < 0) {
                snprintf(why, n, "malformed Int64List: bad packed varint");
                return -1;
            }
            count++;
        }
    }
    if (rc == 0 && count != 1)
        snprintf(why, n, "%d values in the int64_list, 1 expected", count);
    *v = (int64_t)u;
    return rc < 0 || count != 1 ? -1 : 0;
}

int data_tfrecord_example_decode(const uint8_t *buf, size_t len,
                                 struct data_tfrecord_example *out, const char **field,
                                 char *why, size_t n)
{
    struct tfr_want want[] = {{TFR_ENCODED, TFR_KIND_BYTES, true, NULL, 0},
                              {TFR_LABEL, TFR_KIND_INT64, true, NULL, 0},
                              {TFR_HEIGHT, TFR_KIND_INT64, false, NULL, 0},
                              {TFR_WIDTH, TFR_KIND_INT64, false, NULL, 0},
                              {TFR_CHANNELS, TFR_KIND_INT64, false, NULL, 0},
                              {TFR_FORMAT, TFR_KIND_BYTES, false, NULL, 0}};
    const int nwant = (int)(sizeof want / sizeof want[0]);
    *out = (struct data_tfrecord_example){.height = -1, .width = -1, .channels = -1};
    *field = "Example";
    struct pb_cur c = {buf, buf + len};
    struct pb_field f;
    int rc, seen = 0;
    while ((rc = pb_next(&c, &f, why, n)) == 1) {
        if (f.num != 1)
            continue;
        if (f.wire != PB_LEN || seen++) {
            snprintf(why, n, "malformed Example: %s",
                     seen > 1 ? "features appear twice" : "features not a message");
            return -1;
        }
        if (tfr_decode_features(f.data, f.len, want, nwant, field, why, n) < 0)
            return -1;
    }
    if (rc < 0)
        return -1;
    int64_t *ints[] = {NULL, &out->label, &out->height, &out->width, &out->channels, NULL};
    for (int i = 0; i < nwant; i++) {
        *field = want[i].key;
        if (!want[i].feature) {
            if (!want[i].required)
                continue;
            snprintf(why, n, "missing (a required feature)");
            return -1;
        }
        int kind;
        struct pb_cur list;
        const uint8_t *b = NULL;
        size_t blen = 0;
        if (tfr_feature_kind(&want[i], &kind, &list, why, n) < 0 ||
            (kind == TFR_KIND_INT64 && tfr_one_int64(list, ints[i], why, n) < 0) ||
            (kind == TFR_KIND_BYTES && tfr_one_bytes(list, &b, &blen, why, n) < 0))
            return -1;
        if (i == 0)
            out->encoded = b, out->encoded_len = blen;
        if (i == nwant - 1 &&
            !(blen == 4 && (memcmp(b, "JPEG", 4) == 0 || memcmp(b, "jpeg", 4) == 0))) {
            snprintf(why, n, "\"%.*s\", \"JPEG\" expected", blen > 16 ? 16 : (int)blen,
                     (const char *)b);
            return -1;
        }
    }
    *field = "Example";
    return 0;
}

/* --- encoding --------------------------------------------------------------------------- */

static size_t tfr_varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80)
        v >>= 7, n++;
    return n;
}

/* A varint's bytes into t (10 at most); returns how many. */
static size_t tfr_varint(uint8_t *t, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        t[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    t[n++] = (uint8_t)v;
    return n;
}

/* The key of a length-delimited field and its length. */
static int tfr_put_len_key(struct buf *b, uint32_t num, size_t len)
{
    uint8_t t[20];
    size_t n = tfr_varint(t, (uint64_t)num << 3 | PB_LEN);
    n += tfr_varint(t + n, len);
    return buf_append(b, t, n);
}

/* One map entry {key, Feature {kind {value = 1: data}}}; an int64 is one packed varint. */
static int tfr_put_feature(struct buf *b, const char *key, int kind, const void *data,
                           size_t dlen, int64_t v)
{
    uint8_t vb[10];
    if (kind == TFR_KIND_INT64) {
        dlen = tfr_varint(vb, (uint64_t)v);
        data = vb;
    }
    size_t list = 1 + tfr_varint_len(dlen) + dlen;    /* value = 1 */
    size_t feature = 1 + tfr_varint_len(list) + list; /* kind */
    size_t klen = strlen(key);
    size_t entry = 1 + tfr_varint_len(klen) + klen + 1 + tfr_varint_len(feature) + feature;
    /* || runs them in order and stops at the first that fails */
    bool failed = tfr_put_len_key(b, 1, entry) || /* Features.feature */
                  tfr_put_len_key(b, 1, klen) || buf_append(b, key, klen) || /* entry key */
                  tfr_put_len_key(b, 2, feature) ||                          /* entry value */
                  tfr_put_len_key(b, (uint32_t)kind, list) ||                /* Feature.kind */
                  tfr_put_len_key(b, 1, dlen) || buf_append(b, data, dlen);  /* the value */
    return failed ? -1 : 0;
}

int data_tfrecord_example_encode(const struct data_tfrecord_example *ex, uint8_t **out,
                                 size_t *len)
{
    struct buf feats, b;
    buf_init(&feats);
    buf_init(&b);
    /* a fixed order (a map's order carries no meaning; TensorFlow writes insertion order) */
    bool failed = tfr_put_feature(&feats, TFR_CHANNELS, TFR_KIND_INT64, NULL, 0,
                                  ex->channels) ||
                  tfr_put_feature(&feats, TFR_LABEL, TFR_KIND_INT64, NULL, 0, ex->label) ||
                  tfr_put_feature(&feats, TFR_ENCODED, TFR_KIND_BYTES, ex->encoded,
                                  ex->encoded_len, 0) ||
                  tfr_put_feature(&feats, TFR_FORMAT, TFR_KIND_BYTES, "JPEG", 4, 0) ||
                  tfr_put_feature(&feats, TFR_HEIGHT, TFR_KIND_INT64, NULL, 0, ex->height) ||
                  tfr_put_feature(&feats, TFR_WIDTH, TFR_KIND_INT64, NULL, 0, ex->width) ||
                  tfr_put_len_key(&b, 1, feats.len) || /* Example.features */
                  buf_append(&b, feats.data, feats.len);
    buf_free(&feats);
    if (failed) {
        buf_free(&b);
        return -1;
    }
    *out = b.data; /* handed over: b is not freed */
    *len = b.len;
    return 0;
}

/* ======================================================================================= */
/* reader                                                                                  */
/* ======================================================================================= */

/* One record's place. */
struct tfr_entry {
    uint64_t offset;
    uint64_t length; /* the whole frame */
    uint32_t shard;
    uint32_t rec; /* its number in the shard, from 0 */
};

struct tfr {
    struct data_storage *st; /* borrowed */
    char dir[TFR_DIR_MAX];
    enum data_split split;
    int c, h, w, classes;
    uint32_t nshards;
    int *fds;                  /* owned [nshards], -1 where not open */
    struct tfr_entry *entries; /* owned [n] */
    int64_t n, cap;
    uint32_t scanned_shards; /* shards without an .idx, and the reads their scan took */
    int64_t scanned_reads;
};

static void tfr_free(void *ctx)
{
    struct tfr *r = ctx;
    if (!r)
        return;
    data_fds_free(r->fds, r->nshards);
    free(r->entries);
    free(r);
}

static int tfr_push(struct tfr *r, const struct tfr_entry *en, struct err *e)
{
    if (r->n == DATA_MAX_SAMPLES)
        return err_set(e, ERR_TOO_LARGE, "dataset", "%s: more than %lld records in a split",
                       r->dir, (long long)DATA_MAX_SAMPLES);
    if (r->n == r->cap) {
        int64_t ncap = r->cap ? r->cap * 2 : 1024;
        struct tfr_entry *ne = realloc(r->entries, (size_t)ncap * sizeof *ne);
        if (!ne)
            return err_set(e, ERR_NOMEM, "dataset", "%s: out of memory for the records",
                           r->dir);
        r->entries = ne;
        r->cap = ncap;
    }
    r->entries[r->n++] = *en;
    return 0;
}

/* The split's shard count: every name <split>-NNNNN-of-MMMMM.tfrecord in dir agrees on
 * MMMMM and every NNNNN below it is there. ERR_NOT_FOUND when there is none. */
static int tfr_find_shards(struct tfr *r, struct err *e)
{
    DIR *d = opendir(r->dir);
    if (!d)
        return errno == ENOENT
                   ? err_set(e, ERR_NOT_FOUND, "dataset", "%s: no such directory", r->dir)
                   : err_errno(e, "%s: opendir", r->dir);
    uint32_t m = 0, count = 0, s, of;
    int rc = 0;
    bool *seen = NULL;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d))) {
        if (!tfr_parse_name(de->d_name, r->split, "", &s, &of))
            continue;
        if (m && of != m)
            rc = err_set(e, ERR_INVALID, "dataset",
                         "%s: shards of %u and of %u for the %s split (two conversions mixed)",
                         r->dir, (unsigned)m, (unsigned)of, data_split_name(r->split));
        else if (!seen && !(seen = calloc(of, 1)))
            rc = err_set(e, ERR_NOMEM, "dataset", "%s: out of memory", r->dir);
        if (rc == 0) {
            m = of;
            count += !seen[s];
            seen[s] = true;
        }
    }
    closedir(d);
    for (uint32_t i = 0; rc == 0 && i < m; i++)
        if (!seen[i]) {
            char p[TFR_PATH_MAX];
            tfr_shard_path(p, sizeof p, r->dir, r->split, i, m);
            rc = err_set(e, ERR_INVALID, "dataset",
                         "%s: missing: %u of the %u shards are there (a conversion that did "
                         "not finish?)",
                         p, (unsigned)count, (unsigned)m);
        }
    free(seen);
    if (rc == 0 && m == 0)
        rc = err_set(e, ERR_NOT_FOUND, "dataset", "%s: no %s-NNNNN-of-MMMMM.tfrecord shards",
                     r->dir, data_split_name(r->split));
    r->nshards = m;
    return rc;
}

/* A frame that passes the file's end. */
static int tfr_truncated(const char *path, uint32_t rec, uint64_t off, uint64_t length,
                         uint64_t size, struct err *e)
{
    return err_set(e, ERR_INVALID, "dataset",
                   "%s: record %u (offset %llu): truncated record: its %llu bytes pass the "
                   "file's end at %llu",
                   path, (unsigned)rec, (unsigned long long)off, (unsigned long long)length,
                   (unsigned long long)size);
}

/* The shard's .idx lines: records tiling the file [0, size) in order. */
static int tfr_parse_idx(struct tfr *r, uint32_t shard, const char *path, const char *ipath,
                         const uint8_t *buf, size_t len, uint64_t size, struct err *e)
{
    uint64_t at = 0;
    uint32_t rec = 0;
    size_t pos = 0;
    while (pos < len) {
        const uint8_t *nl = memchr(buf + pos, '\n', len - pos);
        size_t llen = nl ? (size_t)(nl - (buf + pos)) : len - pos;
        char line[64];
        unsigned long long off, length;
        int end = 0;
        if (llen >= sizeof line)
            llen = sizeof line - 1;
        memcpy(line, buf + pos, llen);
        line[llen] = '\0';
        if (!nl || sscanf(line, "%llu %llu%n", &off, &length, &end) != 2 || line[end] != '\0' ||
            line[0] < '0' || line[0] > '9')
            return err_set(e, ERR_INVALID, "dataset", "%s: line %u: not \"offset length\\n\"",
                           ipath, (unsigned)rec + 1);
        if (off != at || length < DATA_TFRECORD_FRAME)
            return err_set(e, ERR_INVALID, "dataset",
                           "%s: line %u: record at %llu of %llu bytes; records lie back to "
                           "back from 0, here at %llu, and take at least %d bytes",
                           ipath, (unsigned)rec + 1, off, length, (unsigned long long)at,
                           DATA_TFRECORD_FRAME);
        if (off + length > size)
            return tfr_truncated(path, rec, off, length, size, e);
        struct tfr_entry en = {.offset = off, .length = length, .shard = shard, .rec = rec++};
        if (tfr_push(r, &en, e) < 0)
            return -1;
        at = off + length;
        pos += (size_t)(nl - (buf + pos)) + 1;
    }
    if (at != size || rec == 0)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: its %u records end at %llu, the shard %s has %llu bytes", ipath,
                       (unsigned)rec, (unsigned long long)at, path, (unsigned long long)size);
    return 0;
}

/* A record's 12 bytes of head: its data length, the length's CRC checked. */
static int tfr_check_head(const uint8_t *head, const char *path, uint32_t rec, uint64_t off,
                          uint64_t *dlen, struct err *e)
{
    *dlen = tfr_get_u64(head);
    uint32_t want = data_crc32c_mask(data_crc32c(0, head, 8));
    if (buf_load_u32(head + 8) != want)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: record %u (offset %llu): bad length CRC (masked CRC-32C %08x, the "
                       "frame says %08x)",
                       path, (unsigned)rec, (unsigned long long)off, (unsigned)want,
                       (unsigned)buf_load_u32(head + 8));
    if (*dlen > TFR_MAX_RECORD)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: record %u (offset %llu): length %llu, more than %llu", path,
                       (unsigned)rec, (unsigned long long)off, (unsigned long long)*dlen,
                       (unsigned long long)TFR_MAX_RECORD);
    return 0;
}

/* No .idx: the framing walked, a read of each record's head. */
static int tfr_scan(struct tfr *r, uint32_t shard, int fd, const char *path, uint64_t size,
                    struct err *e)
{
    uint64_t at = 0;
    uint32_t rec = 0;
    while (at < size) {
        uint8_t head[DATA_TFRECORD_HEAD];
        uint64_t dlen;
        if (size - at < DATA_TFRECORD_HEAD)
            return tfr_truncated(path, rec, at, DATA_TFRECORD_HEAD, size, e);
        if (data_storage_pread(r->st, fd, head, sizeof head, (off_t)at, path, e) < 0 ||
            tfr_check_head(head, path, rec, at, &dlen, e) < 0)
            return -1;
        uint64_t length = dlen + DATA_TFRECORD_FRAME;
        if (length > size - at)
            return tfr_truncated(path, rec, at, length, size, e);
        struct tfr_entry en = {.offset = at, .length = length, .shard = shard, .rec = rec++};
        if (tfr_push(r, &en, e) < 0)
            return -1;
        at += length;
    }
    if (rec == 0)
        return err_set(e, ERR_INVALID, "dataset", "%s: an empty shard", path);
    r->scanned_shards++;
    r->scanned_reads += rec;
    return 0;
}

/* Opens shard s, reads its .idx or scans it. */
static int tfr_open_shard(struct tfr *r, uint32_t s, struct err *e)
{
    char path[TFR_PATH_MAX], ipath[TFR_PATH_MAX + 8];
    tfr_shard_path(path, sizeof path, r->dir, r->split, s, r->nshards);
    snprintf(ipath, sizeof ipath, "%s.idx", path);
    if ((r->fds[s] = data_storage_open(r->st, path, e)) < 0)
        return -1;
    struct stat sb;
    if (fstat(r->fds[s], &sb) < 0)
        return err_errno(e, "%s: stat", path);
    uint8_t *buf;
    size_t len;
    struct err ie;
    if (data_storage_read_file(r->st, ipath, DATA_FILE_MAX_BYTES, &buf, &len, &ie) < 0) {
        if (ie.code != ERR_NOT_FOUND) {
            if (e)
                *e = ie;
            return -1;
        }
        return tfr_scan(r, s, r->fds[s], path, (uint64_t)sb.st_size, e);
    }
    int rc = tfr_parse_idx(r, s, path, ipath, buf, len, (uint64_t)sb.st_size, e);
    free(buf);
    return rc;
}

/* One record's whole frame read (one request), both CRCs checked, the Example decoded:
 * *data (owned, free()) holds the frame, *ex points into it. */
static int tfr_read_example(const struct tfr *r, const struct tfr_entry *en, const char *path,
                            uint8_t **data, struct data_tfrecord_example *ex, struct err *e)
{
    uint8_t *b = *data = malloc(en->length);
    if (!b)
        return err_set(e, ERR_NOMEM, "dataset", "%s: record %u: out of memory", path,
                       (unsigned)en->rec);
    uint64_t dlen;
    if (data_storage_pread(r->st, r->fds[en->shard], b, en->length, (off_t)en->offset, path,
                           e) < 0 ||
        tfr_check_head(b, path, en->rec, en->offset, &dlen, e) < 0)
        return -1;
    if (dlen + DATA_TFRECORD_FRAME != en->length)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: record %u (offset %llu): length %llu, the index says a frame of "
                       "%llu bytes",
                       path, (unsigned)en->rec, (unsigned long long)en->offset,
                       (unsigned long long)dlen, (unsigned long long)en->length);
    uint8_t foot[4];
    data_tfrecord_frame_foot(b + DATA_TFRECORD_HEAD, dlen, foot);
    if (memcmp(foot, b + DATA_TFRECORD_HEAD + dlen, 4) != 0)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: record %u (offset %llu): bad data CRC (masked CRC-32C %08x, the "
                       "frame says %08x)",
                       path, (unsigned)en->rec, (unsigned long long)en->offset,
                       (unsigned)buf_load_u32(foot),
                       (unsigned)buf_load_u32(b + DATA_TFRECORD_HEAD + dlen));
    const char *field;
    char why[160];
    if (data_tfrecord_example_decode(b + DATA_TFRECORD_HEAD, dlen, ex, &field, why,
                                     sizeof why) < 0)
        return err_set(e, ERR_INVALID, "dataset", "%s: record %u (offset %llu): feature %s: %s",
                       path, (unsigned)en->rec, (unsigned long long)en->offset, field, why);
    return 0;
}

/* The Example's label and shape features against the dataset's. */
static int tfr_check_example(const struct tfr *r, const struct tfr_entry *en, const char *path,
                             const struct data_tfrecord_example *ex, struct err *e)
{
    const char *keys[] = {TFR_CHANNELS, TFR_HEIGHT, TFR_WIDTH};
    const int64_t got[] = {ex->channels, ex->height, ex->width}, want[] = {r->c, r->h, r->w};
    for (int k = 0; k < 3; k++)
        if (got[k] >= 0 && got[k] != want[k])
            return err_set(e, ERR_INVALID, "dataset",
                           "%s: record %u (offset %llu): feature %s: %lld, the dataset's "
                           "samples are %dx%dx%d",
                           path, (unsigned)en->rec, (unsigned long long)en->offset, keys[k],
                           (long long)got[k], r->c, r->h, r->w);
    if (ex->label < 0 || ex->label >= r->classes)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: record %u (offset %llu): feature " TFR_LABEL
                       ": label %lld out of range [0, %d)",
                       path, (unsigned)en->rec, (unsigned long long)en->offset,
                       (long long)ex->label, r->classes);
    return 0;
}

/* The data_sample_reader's read. Thread-safe: it writes buf, *label and its own block. */
static int tfr_read(void *ctx, int64_t i, uint8_t *buf, int32_t *label, struct err *e)
{
    const struct tfr *r = ctx;
    const struct tfr_entry *en = &r->entries[i];
    char path[TFR_PATH_MAX];
    tfr_shard_path(path, sizeof path, r->dir, r->split, en->shard, r->nshards);
    uint8_t *data = NULL;
    struct data_tfrecord_example ex;
    int rc = tfr_read_example(r, en, path, &data, &ex, e);
    if (rc == 0)
        rc = tfr_check_example(r, en, path, &ex, e);
    if (rc == 0) {
        char what[TFR_PATH_MAX + 64];
        snprintf(what, sizeof what, "%s: record %u (offset %llu): feature " TFR_ENCODED, path,
                 (unsigned)en->rec, (unsigned long long)en->offset);
        rc = data_image_decode(ex.encoded, ex.encoded_len, what, r->c, r->h, r->w, buf, e);
    }
    free(data);
    if (rc == 0)
        *label = (int32_t)ex.label;
    return rc;
}

/* The samples' shape, from the first record. */
static int tfr_probe_shape(struct tfr *r, struct err *e)
{
    char path[TFR_PATH_MAX];
    tfr_shard_path(path, sizeof path, r->dir, r->split, 0, r->nshards);
    uint8_t *data = NULL;
    struct data_tfrecord_example ex;
    int rc = tfr_read_example(r, &r->entries[0], path, &data, &ex, e);
    if (rc == 0 && (ex.channels < 0 || ex.height < 0 || ex.width < 0)) {
        char what[TFR_PATH_MAX + 64];
        snprintf(what, sizeof what, "%s: record 0: feature " TFR_ENCODED, path);
        rc = data_image_probe(ex.encoded, ex.encoded_len, what, &r->c, &r->h, &r->w, e);
    } else if (rc == 0) {
        r->c = (int)(ex.channels > DATA_MAX_CHANNELS ? 0 : ex.channels);
        r->h = (int)(ex.height > DATA_MAX_SIDE ? 0 : ex.height);
        r->w = (int)(ex.width > DATA_MAX_SIDE ? 0 : ex.width);
        if (r->c < 1 || r->h < 1 || r->w < 1)
            rc = err_set(e, ERR_INVALID, "dataset",
                         "%s: record 0: features image/channels, height, width: %lldx%lldx%lld "
                         "out of range",
                         path, (long long)ex.channels, (long long)ex.height,
                         (long long)ex.width);
    }
    free(data);
    return rc;
}

int dataset_tfrecord_open(const char *dir, const char *name, enum data_split split,
                          const struct data_image_opts *opts, struct data_storage *st,
                          struct dataset **out, struct err *e)
{
    *out = NULL;
    if (strlen(dir) >= TFR_DIR_MAX)
        return err_set(e, ERR_INVALID, "dataset.path", "%s: path too long", dir);
    struct tfr *r = calloc(1, sizeof *r);
    if (!r)
        return err_set(e, ERR_NOMEM, "dataset", "%s: out of memory", dir);
    *r = (struct tfr){
        .st = st, .split = split, .classes = opts->classes ? opts->classes : TFR_CLASSES};
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    int rc = tfr_find_shards(r, e);
    if (rc == 0 && !(r->fds = data_fds_new(r->nshards)))
        rc = err_set(e, ERR_NOMEM, "dataset", "%s: out of memory", dir);
    for (uint32_t s = 0; rc == 0 && s < r->nshards; s++)
        rc = tfr_open_shard(r, s, e);
    if (rc == 0 && r->scanned_shards)
        fprintf(stderr,
                "ddpbench: %s: %u of the %u %s shards have no .idx: their framing was scanned "
                "at open, %lld reads of %d bytes through the storage (`ddpbench dataset "
                "convert` writes the indexes)\n",
                dir, (unsigned)r->scanned_shards, (unsigned)r->nshards, data_split_name(split),
                (long long)r->scanned_reads, DATA_TFRECORD_HEAD);
    if (rc == 0)
        rc = tfr_probe_shape(r, e);
    if (rc < 0) {
        tfr_free(r);
        return -1;
    }
    struct data_sample_reader rd = {.ctx = r, .read = tfr_read, .destroy = tfr_free};
    return data_images_create_reader(&rd, r->n, r->c, r->h, r->w, r->classes, name, split, opts,
                                     out, e);
}

/* ======================================================================================= */
/* writer                                                                                  */
/* ======================================================================================= */

struct data_tfrecord_writer {
    char dir[TFR_DIR_MAX];
    enum data_split split;
    int quality, c, h, w, classes;
    int64_t shard_bytes;
    FILE *shard, *idx;  /* the open shard's temporary files; NULL between shards */
    uint32_t nshards;   /* shards begun, the open one included */
    uint64_t shard_off; /* bytes in the open shard */
    int64_t n;
};

/* A shard's temporary name while the count is unknown (suffix "" or ".idx"). */
static void tfr_tmp_path(char *out, size_t cap, const struct data_tfrecord_writer *tw,
                         uint32_t shard, const char *suffix)
{
    snprintf(out, cap, "%s/%s-%05u.tfrecord%s.tmp", tw->dir, data_split_name(tw->split),
             (unsigned)shard, suffix);
}

/* An earlier conversion's shards and indexes of the split: removed at create. */
static int tfr_remove_split(const char *dir, enum data_split split, struct err *e)
{
    DIR *d = opendir(dir);
    if (!d)
        return err_errno(e, "%s: opendir", dir);
    struct dirent *de;
    uint32_t s, m;
    int rc = 0;
    while (rc == 0 && (de = readdir(d)))
        if (tfr_parse_name(de->d_name, split, "", &s, &m) ||
            tfr_parse_name(de->d_name, split, ".idx", &s, &m)) {
            char p[TFR_PATH_MAX];
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            if (unlink(p) < 0 && errno != ENOENT)
                rc = err_errno(e, "%s: unlink", p);
        }
    closedir(d);
    return rc;
}

int data_tfrecord_writer_create(const char *dir, enum data_split split, int quality, int c,
                                int h, int w, int classes, int64_t shard_bytes,
                                struct data_tfrecord_writer **out, struct err *e)
{
    *out = NULL;
    if (quality < 0 || quality > 100)
        return err_set(e, ERR_INVALID, "quality", "JPEG quality %d outside [1, 100] (0: 95)",
                       quality);
    if (c < 1 || c > DATA_MAX_CHANNELS || h < 1 || h > DATA_MAX_SIDE || w < 1 ||
        w > DATA_MAX_SIDE || classes < 1 || classes > DATA_MAX_CLASSES)
        return err_set(e, ERR_INVALID, "dataset", "sample shape %dx%dx%d or %d classes", c, h,
                       w, classes);
    if (shard_bytes < 1)
        return err_set(e, ERR_INVALID, "shard_mb", "shard size %lld bytes",
                       (long long)shard_bytes);
    if (strlen(dir) == 0 || strlen(dir) >= TFR_DIR_MAX)
        return err_set(e, ERR_INVALID, "dataset.path", "'%s': path empty or too long", dir);
    if (data_make_dirs(dir, e) < 0 || tfr_remove_split(dir, split, e) < 0)
        return -1;
    struct data_tfrecord_writer *tw = calloc(1, sizeof *tw);
    if (!tw)
        return err_set(e, ERR_NOMEM, "dataset", "%s: out of memory", dir);
    *tw = (struct data_tfrecord_writer){.split = split,
                                        .quality = quality ? quality : TFR_QUALITY,
                                        .c = c,
                                        .h = h,
                                        .w = w,
                                        .classes = classes,
                                        .shard_bytes = shard_bytes};
    snprintf(tw->dir, sizeof tw->dir, "%s", dir);
    *out = tw;
    return 0;
}

/* Closes the open shard's files (they keep their temporary names until finish). */
static int tfr_close_shard(struct data_tfrecord_writer *tw, struct err *e)
{
    char tmp[TFR_PATH_MAX];
    tfr_tmp_path(tmp, sizeof tmp, tw, tw->nshards - 1, "");
    int a = fclose(tw->shard), b = fclose(tw->idx);
    tw->shard = tw->idx = NULL;
    return a || b ? err_errno(e, "%s: write", tmp) : 0;
}

static int tfr_open_shard_w(struct data_tfrecord_writer *tw, struct err *e)
{
    if (tw->nshards == TFR_MAX_SHARDS)
        return err_set(e, ERR_TOO_LARGE, "shard_mb",
                       "%s: more than %d shards: choose a larger shard size", tw->dir,
                       TFR_MAX_SHARDS);
    char tmp[TFR_PATH_MAX], itmp[TFR_PATH_MAX];
    tfr_tmp_path(tmp, sizeof tmp, tw, tw->nshards, "");
    tfr_tmp_path(itmp, sizeof itmp, tw, tw->nshards, ".idx");
    tw->nshards++; /* counted first, so abort removes what was begun */
    if (!(tw->shard = fopen(tmp, "wb")))
        return err_errno(e, "%s: open", tmp);
    if (!(tw->idx = fopen(itmp, "w"))) {
        int rc = err_errno(e, "%s: open", itmp);
        fclose(tw->shard);
        tw->shard = NULL;
        return rc;
    }
    tw->shard_off = 0;
    return 0;
}

/* One framed record of data into the open shard, and its index line. */
static int tfr_write_record(struct data_tfrecord_writer *tw, const uint8_t *data, size_t len,
                            struct err *e)
{
    uint64_t frame = len + DATA_TFRECORD_FRAME;
    if (tw->shard && tw->shard_off > 0 && tw->shard_off + frame > (uint64_t)tw->shard_bytes &&
        tfr_close_shard(tw, e) < 0)
        return -1;
    if (!tw->shard && tfr_open_shard_w(tw, e) < 0)
        return -1;
    uint8_t head[DATA_TFRECORD_HEAD], foot[4];
    data_tfrecord_frame_head(len, head);
    data_tfrecord_frame_foot(data, len, foot);
    if (fwrite(head, 1, sizeof head, tw->shard) != sizeof head ||
        fwrite(data, 1, len, tw->shard) != len || fwrite(foot, 1, 4, tw->shard) != 4 ||
        fprintf(tw->idx, "%llu %llu\n", (unsigned long long)tw->shard_off,
                (unsigned long long)frame) < 0)
        return err_errno(e, "%s: write shard %u", tw->dir, (unsigned)tw->nshards - 1);
    tw->shard_off += frame;
    return 0;
}

int data_tfrecord_writer_add(struct data_tfrecord_writer *tw, const uint8_t *chw, int32_t label,
                             struct err *e)
{
    if (label < 0 || label >= tw->classes)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: sample %lld has label %d, outside [0, %d)", tw->dir,
                       (long long)tw->n, (int)label, tw->classes);
    if (tw->n == DATA_MAX_SAMPLES)
        return err_set(e, ERR_TOO_LARGE, "dataset", "%s: more than %lld samples in a split",
                       tw->dir, (long long)DATA_MAX_SAMPLES);
    uint8_t *jpg = NULL, *ex = NULL;
    size_t jlen = 0, elen = 0;
    if (data_image_encode(DATA_CODEC_JPEG, tw->quality, chw, tw->c, tw->h, tw->w, &jpg, &jlen,
                          e) < 0)
        return -1;
    struct data_tfrecord_example x = {.encoded = jpg,
                                      .encoded_len = jlen,
                                      .label = label,
                                      .height = tw->h,
                                      .width = tw->w,
                                      .channels = tw->c};
    int rc = data_tfrecord_example_encode(&x, &ex, &elen) < 0
                 ? err_set(e, ERR_NOMEM, "dataset", "%s: out of memory for a record", tw->dir)
                 : tfr_write_record(tw, ex, elen, e);
    free(jpg);
    free(ex);
    if (rc == 0)
        tw->n++;
    return rc;
}

/* Every shard, then its index, renamed from its temporary name to its final one. */
static int tfr_rename_all(struct data_tfrecord_writer *tw, struct err *e)
{
    for (uint32_t s = 0; s < tw->nshards; s++) {
        char tmp[TFR_PATH_MAX], path[TFR_PATH_MAX], ipath[TFR_PATH_MAX + 8];
        tfr_shard_path(path, sizeof path, tw->dir, tw->split, s, tw->nshards);
        snprintf(ipath, sizeof ipath, "%s.idx", path);
        tfr_tmp_path(tmp, sizeof tmp, tw, s, "");
        if (rename(tmp, path) < 0)
            return err_errno(e, "%s: rename to %s", tmp, path);
        tfr_tmp_path(tmp, sizeof tmp, tw, s, ".idx");
        if (rename(tmp, ipath) < 0)
            return err_errno(e, "%s: rename to %s", tmp, ipath);
    }
    return 0;
}

int data_tfrecord_writer_finish(struct data_tfrecord_writer *tw, struct err *e)
{
    int rc = 0;
    if (tw->n == 0)
        rc = err_set(e, ERR_INVALID, "dataset", "%s: no samples to write for the %s split",
                     tw->dir, data_split_name(tw->split));
    if (rc == 0 && tw->shard)
        rc = tfr_close_shard(tw, e);
    if (rc == 0 && (rc = tfr_rename_all(tw, e)) < 0)
        tfr_remove_split(tw->dir, tw->split, NULL); /* the ones renamed: no half split */
    if (rc == 0)
        tw->nshards = 0; /* renamed: nothing for abort to remove */
    data_tfrecord_writer_abort(tw);
    return rc;
}

void data_tfrecord_writer_abort(struct data_tfrecord_writer *tw)
{
    if (!tw)
        return;
    if (tw->shard)
        fclose(tw->shard);
    if (tw->idx)
        fclose(tw->idx);
    for (uint32_t s = 0; s < tw->nshards; s++) {
        char tmp[TFR_PATH_MAX];
        tfr_tmp_path(tmp, sizeof tmp, tw, s, "");
        unlink(tmp);
        tfr_tmp_path(tmp, sizeof tmp, tw, s, ".idx");
        unlink(tmp);
    }
    free(tw);
}
