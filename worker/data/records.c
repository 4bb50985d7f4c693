/* records: the record-shard format, its reader (dataset_records_open) and its writer
 * (data_records_writer_*): a split's samples packed in order into a few large shard files
 * found through one index file, so an epoch is a few big files instead of one file per
 * sample (what TFRecord, WebDataset and FFCV do for the same reason).
 *
 * Layout (every integer little-endian):
 *   dir/<split>-NNNNN.rec  shard NNNNN (5 digits, from 00000): the stored bytes of its
 *       samples back to back in sample order, nothing else. A sample's stored bytes are
 *       its [c][h][w] pixel bytes raw, or those bytes compressed alone (one zlib stream
 *       from compress2, or one zstd frame from ZSTD_compress), so any sample decodes
 *       without its neighbours.
 *   dir/<split>.index  a 48-byte header
 *         0  magic "DDPBRIX1"   8 bytes
 *         8  version (1)        u32
 *        12  c, h, w            u32 each
 *        24  classes            u32
 *        28  compression        u32: 0 raw, 1 zlib, 2 zstd, 3 jpeg (a JPEG file's bytes)
 *        32  samples            u64
 *        40  shards             u32
 *        44  reserved (0)       u32
 *       then 24 bytes per sample, in sample order: shard u32, offset in the shard u64,
 *       stored size u32, label i32, CRC-32 of the stored bytes u32; then the CRC-32 (zlib's
 *       crc32) of every byte before it, u32. Nothing may follow.
 *
 * Decision: the index is the one thing a reader trusts, so open checks all of it: header
 * fields, exact length, checksum, and the layout itself (samples lie shard by shard in
 * order, each where the previous one of its shard ended, no shard empty, and each shard
 * file exactly as long as its samples), so a wrong offset, a truncated or grown shard or
 * a stale index fails at open naming the file, not as garbage in a batch. Every shard is
 * opened once at open through the storage (an emulated open is paid once per shard, not
 * per sample); a fill is then one pread of the stored bytes, a CRC check and a decode
 * into the caller's buffer, touching no shared mutable state, so loader threads read
 * concurrently on the shared descriptors. The writer writes each shard under a temporary
 * name renamed when it is full or closed, and the index last (also renamed into place),
 * so a split that has an index is whole; it does not fsync: a conversion interrupted by
 * a crash is run again, not recovered. */
#include "worker/data/records.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "worker/data/codec.h"
#include "worker/data/data.h"
#include "worker/data/formats.h"
#include "worker/data/images.h"
#include "worker/data/storage.h"

#define RECORDS_MAGIC "DDPBRIX1"
#define RECORDS_VERSION 1u
#define RECORDS_HEADER 48
#define RECORDS_ENTRY 24
#define RECORDS_TRAILER 4
#define RECORDS_MAX_SHARDS 100000 /* five digits in the name */
/* The index is read whole, so its size caps the samples of one split (~89 million). */
#define RECORDS_MAX_SAMPLES                                                                    \
    ((int64_t)((DATA_FILE_MAX_BYTES - RECORDS_HEADER - RECORDS_TRAILER) / RECORDS_ENTRY))
#define RECORDS_DIR_MAX 512
#define RECORDS_PATH_MAX (RECORDS_DIR_MAX + 32)

/* One sample's place, as the index holds it (packed to 24 bytes in memory too). */
struct records_entry {
    uint64_t offset;
    uint32_t shard;
    uint32_t stored;
    uint32_t crc;
    int32_t label;
};

struct records_header {
    uint32_t c, h, w, classes, comp, shards;
    uint64_t samples;
};

/* --- little-endian fields -------------------------------------------------------------- */

static void records_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void records_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t records_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t records_get_u64(const uint8_t *p)
{
    return (uint64_t)records_get_u32(p) | (uint64_t)records_get_u32(p + 4) << 32;
}

/* --- names and codecs, shared by the reader and the writer ----------------------------- */

static void records_shard_path(char *out, size_t cap, const char *dir, enum data_split split,
                               uint32_t shard)
{
    snprintf(out, cap, "%s/%s-%05u.rec", dir, data_split_name(split), (unsigned)shard);
}

static void records_index_path(char *out, size_t cap, const char *dir, enum data_split split)
{
    snprintf(out, cap, "%s/%s.index", dir, data_split_name(split));
}

static const char *records_comp_name(uint32_t comp)
{
    switch (comp) {
    case DATA_RECORD_RAW: return "raw";
    case DATA_RECORD_ZLIB: return "zlib";
    case DATA_RECORD_ZSTD: return "zstd";
    case DATA_RECORD_JPEG: return "jpeg";
    default: return "unknown";
    }
}

/* The most bytes a sample of `bytes` pixel bytes may take stored. */
static size_t records_stored_bound(uint32_t comp, size_t bytes)
{
    switch (comp) {
    case DATA_RECORD_ZLIB: return compressBound((uLong)bytes);
    case DATA_RECORD_ZSTD: return ZSTD_compressBound(bytes);
    /* a JPEG of a tiny or noisy image can outgrow its pixels: headers and tables are
     * about 600 bytes, and quality 100 keeps every coefficient */
    case DATA_RECORD_JPEG: return 2 * bytes + 65536;
    default: return bytes;
    }
}

/* ======================================================================================= */
/* reader                                                                                  */
/* ======================================================================================= */

struct records {
    struct data_storage *st; /* borrowed */
    char dir[RECORDS_DIR_MAX];
    enum data_split split;
    uint32_t comp;
    int c, h, w; /* the shape a JPEG record decodes to */
    size_t sample_bytes;
    uint32_t nshards;
    int *fds;                      /* owned [nshards], -1 where not open */
    uint64_t *shard_end;           /* owned [nshards]: each shard's size, by the index */
    struct records_entry *entries; /* owned [n] */
    int64_t n;
};

static void records_free(void *ctx)
{
    struct records *r = ctx;
    if (!r)
        return;
    data_fds_free(r->fds, r->nshards);
    free(r->shard_end);
    free(r->entries);
    free(r);
}

/* Decodes a stored sample (src, stored bytes) into buf (sample_bytes). */
static int records_decode(const struct records *r, const struct records_entry *en,
                          const uint8_t *src, uint8_t *buf, const char *path, int64_t i,
                          struct err *e)
{
    size_t got = 0;
    const char *why = NULL;
    if (r->comp == DATA_RECORD_JPEG) {
        char what[RECORDS_PATH_MAX + 32];
        snprintf(what, sizeof what, "%s: sample %lld", path, (long long)i);
        return data_image_decode(src, en->stored, what, r->c, r->h, r->w, buf, e);
    }
    if (r->comp == DATA_RECORD_ZLIB) {
        uLongf dlen = (uLongf)r->sample_bytes;
        int zr = uncompress(buf, &dlen, src, (uLong)en->stored);
        got = (size_t)dlen;
        why = zr == Z_OK ? NULL : zError(zr);
    } else {
        size_t zr = ZSTD_decompress(buf, r->sample_bytes, src, en->stored);
        got = zr;
        why = ZSTD_isError(zr) ? ZSTD_getErrorName(zr) : NULL;
    }
    if (why)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: sample %lld: %s data does not decode: %s", path, (long long)i,
                       records_comp_name(r->comp), why);
    if (got != r->sample_bytes)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: sample %lld decodes to %zu bytes, expected %zu", path, (long long)i,
                       got, r->sample_bytes);
    return 0;
}

/* The data_sample_reader's read: one pread, the CRC check, the decode. Thread-safe: the
 * only writes are to buf, *label and a scratch block of its own. */
static int records_read(void *ctx, int64_t i, uint8_t *buf, int32_t *label, struct err *e)
{
    const struct records *r = ctx;
    const struct records_entry *en = &r->entries[i];
    char path[RECORDS_PATH_MAX];
    records_shard_path(path, sizeof path, r->dir, r->split, en->shard);
    uint8_t *src = buf; /* raw samples are read in place */
    if (r->comp != DATA_RECORD_RAW && !(src = malloc(en->stored)))
        return err_set(e, ERR_NOMEM, "dataset", "%s: out of memory for sample %lld", path,
                       (long long)i);
    int rc = data_storage_pread(r->st, r->fds[en->shard], src, en->stored, (off_t)en->offset,
                                path, e);
    uint32_t crc = rc == 0 ? (uint32_t)crc32(0L, src, en->stored) : 0;
    if (rc == 0 && crc != en->crc)
        rc = err_set(e, ERR_INVALID, "dataset",
                     "%s: sample %lld (%u bytes at offset %llu): CRC-32 %08x, the index says "
                     "%08x: the shard is corrupt",
                     path, (long long)i, (unsigned)en->stored, (unsigned long long)en->offset,
                     (unsigned)crc, (unsigned)en->crc);
    if (rc == 0 && r->comp != DATA_RECORD_RAW)
        rc = records_decode(r, en, src, buf, path, i, e);
    if (src != buf)
        free(src);
    if (rc == 0)
        *label = en->label;
    return rc;
}

static int records_bad(struct err *e, const char *path, const char *what)
{
    return err_set(e, ERR_INVALID, "dataset", "%s: %s", path, what);
}

/* The header's fields, each in range; and the file exactly as long as they say. */
static int records_parse_header(const uint8_t *buf, size_t len, const char *path,
                                struct records_header *h, struct err *e)
{
    if (len < RECORDS_HEADER + RECORDS_TRAILER)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: truncated: %zu bytes, a records index has at least %d", path, len,
                       RECORDS_HEADER + RECORDS_TRAILER);
    if (memcmp(buf, RECORDS_MAGIC, 8) != 0)
        return records_bad(e, path, "not a records index (no DDPBRIX1 magic)");
    uint32_t version = records_get_u32(buf + 8);
    if (version != RECORDS_VERSION)
        return err_set(e, ERR_INVALID, "dataset", "%s: index version %u, this build reads %u",
                       path, (unsigned)version, RECORDS_VERSION);
    *h = (struct records_header){.c = records_get_u32(buf + 12),
                                 .h = records_get_u32(buf + 16),
                                 .w = records_get_u32(buf + 20),
                                 .classes = records_get_u32(buf + 24),
                                 .comp = records_get_u32(buf + 28),
                                 .samples = records_get_u64(buf + 32),
                                 .shards = records_get_u32(buf + 40)};
    if (h->c < 1 || h->c > DATA_MAX_CHANNELS || h->h < 1 || h->h > DATA_MAX_SIDE || h->w < 1 ||
        h->w > DATA_MAX_SIDE)
        return err_set(e, ERR_INVALID, "dataset", "%s: sample shape %ux%ux%u out of range",
                       path, (unsigned)h->c, (unsigned)h->h, (unsigned)h->w);
    if (h->classes < 1 || h->classes > DATA_MAX_CLASSES)
        return err_set(e, ERR_INVALID, "dataset", "%s: %u classes, outside [1, %d]", path,
                       (unsigned)h->classes, DATA_MAX_CLASSES);
    if (h->comp > DATA_RECORD_JPEG)
        return err_set(e, ERR_INVALID, "dataset", "%s: unknown compression %u", path,
                       (unsigned)h->comp);
    if (records_get_u32(buf + 44) != 0)
        return records_bad(e, path, "reserved header field is not 0");
    if (h->samples < 1 || h->samples > (uint64_t)RECORDS_MAX_SAMPLES)
        return err_set(e, ERR_INVALID, "dataset", "%s: %llu samples, outside [1, %lld]", path,
                       (unsigned long long)h->samples, (long long)RECORDS_MAX_SAMPLES);
    if (h->shards < 1 || h->shards > RECORDS_MAX_SHARDS || h->shards > h->samples)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: %u shards for %llu samples (1 to one per sample, at most %d)", path,
                       (unsigned)h->shards, (unsigned long long)h->samples, RECORDS_MAX_SHARDS);
    size_t want = RECORDS_HEADER + (size_t)h->samples * RECORDS_ENTRY + RECORDS_TRAILER;
    if (len < want)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: truncated: %zu bytes, %llu samples need %zu", path, len,
                       (unsigned long long)h->samples, want);
    if (len > want)
        return err_set(e, ERR_INVALID, "dataset", "%s: %zu trailing bytes after %llu samples",
                       path, len - want, (unsigned long long)h->samples);
    uint32_t crc = (uint32_t)crc32(0L, buf, (uInt)(len - RECORDS_TRAILER));
    uint32_t stored = records_get_u32(buf + len - RECORDS_TRAILER);
    if (crc != stored)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: CRC-32 %08x, the index's last field says %08x: the index is "
                       "corrupt",
                       path, (unsigned)crc, (unsigned)stored);
    return 0;
}

/* One entry: in range, and where the layout says it must lie (r->shard_end tracks each
 * shard's end so far; *cur is the shard of the previous sample). */
static int records_check_entry(struct records *r, const struct records_header *h,
                               const struct records_entry *en, int64_t i, uint32_t *cur,
                               const char *path, struct err *e)
{
    size_t bound = records_stored_bound(h->comp, r->sample_bytes);
    if (en->shard != *cur && en->shard != *cur + 1)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: sample %lld is in shard %u after shard %u (samples lie in order, "
                       "shard by shard)",
                       path, (long long)i, (unsigned)en->shard, (unsigned)*cur);
    if (en->shard >= h->shards)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: sample %lld is in shard %u, the index has %u", path, (long long)i,
                       (unsigned)en->shard, (unsigned)h->shards);
    *cur = en->shard;
    if (en->offset != r->shard_end[en->shard])
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: sample %lld at offset %llu of shard %u, expected %llu (samples "
                       "lie back to back)",
                       path, (long long)i, (unsigned long long)en->offset, (unsigned)en->shard,
                       (unsigned long long)r->shard_end[en->shard]);
    if (en->stored < 1 || en->stored > bound ||
        (h->comp == DATA_RECORD_RAW && en->stored != r->sample_bytes))
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: sample %lld stores %u bytes (%s samples of %zu bytes take %s%zu)",
                       path, (long long)i, (unsigned)en->stored, records_comp_name(h->comp),
                       r->sample_bytes, h->comp == DATA_RECORD_RAW ? "" : "1 to ", bound);
    if (en->label < 0 || (uint32_t)en->label >= h->classes)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: sample %lld has label %d, outside [0, %u)", path, (long long)i,
                       (int)en->label, (unsigned)h->classes);
    r->shard_end[en->shard] += en->stored;
    return 0;
}

/* The entries of a header-checked index into r->entries. */
static int records_parse_entries(struct records *r, const struct records_header *h,
                                 const uint8_t *buf, const char *path, struct err *e)
{
    r->entries = malloc((size_t)h->samples * sizeof *r->entries);
    r->shard_end = calloc(h->shards, sizeof *r->shard_end);
    if (!r->entries || !r->shard_end)
        return err_set(e, ERR_NOMEM, "dataset", "%s: out of memory for %llu entries", path,
                       (unsigned long long)h->samples);
    uint32_t cur = 0;
    for (int64_t i = 0; i < (int64_t)h->samples; i++) {
        const uint8_t *p = buf + RECORDS_HEADER + (size_t)i * RECORDS_ENTRY;
        struct records_entry *en = &r->entries[i];
        *en = (struct records_entry){.shard = records_get_u32(p),
                                     .offset = records_get_u64(p + 4),
                                     .stored = records_get_u32(p + 12),
                                     .label = (int32_t)records_get_u32(p + 16),
                                     .crc = records_get_u32(p + 20)};
        if (records_check_entry(r, h, en, i, &cur, path, e) < 0)
            return -1;
    }
    if (cur != h->shards - 1)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: the samples fill %u shards, the header says %u", path,
                       (unsigned)cur + 1, (unsigned)h->shards);
    return 0;
}

/* Reads and checks dir/<split>.index into r. */
static int records_load_index(struct records *r, struct records_header *h, struct err *e)
{
    char path[RECORDS_PATH_MAX];
    records_index_path(path, sizeof path, r->dir, r->split);
    uint8_t *buf;
    size_t len;
    if (data_storage_read_file(r->st, path, DATA_FILE_MAX_BYTES, &buf, &len, e) < 0)
        return -1;
    int rc = records_parse_header(buf, len, path, h, e);
    if (rc == 0) {
        r->comp = h->comp;
        r->c = (int)h->c, r->h = (int)h->h, r->w = (int)h->w;
        r->sample_bytes = (size_t)h->c * h->h * h->w;
        r->n = (int64_t)h->samples;
        rc = records_parse_entries(r, h, buf, path, e);
    }
    free(buf);
    return rc;
}

/* Opens every shard once and checks its size against the index. */
static int records_open_shards(struct records *r, uint32_t nshards, struct err *e)
{
    r->fds = data_fds_new(nshards);
    if (!r->fds)
        return err_set(e, ERR_NOMEM, "dataset", "%s: out of memory for %u shards", r->dir,
                       (unsigned)nshards);
    r->nshards = nshards;
    for (uint32_t s = 0; s < nshards; s++) {
        char path[RECORDS_PATH_MAX];
        records_shard_path(path, sizeof path, r->dir, r->split, s);
        if ((r->fds[s] = data_storage_open(r->st, path, e)) < 0)
            return -1;
        struct stat sb;
        if (fstat(r->fds[s], &sb) < 0)
            return err_errno(e, "%s: stat", path);
        if ((uint64_t)sb.st_size != r->shard_end[s])
            return err_set(e, ERR_INVALID, "dataset",
                           "%s: %lld bytes, the index says %llu (%s)", path,
                           (long long)sb.st_size, (unsigned long long)r->shard_end[s],
                           (uint64_t)sb.st_size < r->shard_end[s] ? "truncated"
                                                                  : "bytes after the samples");
    }
    return 0;
}

int dataset_records_open(const char *dir, const char *name, enum data_split split,
                         const struct data_image_opts *opts, struct data_storage *st,
                         struct dataset **out, struct err *e)
{
    *out = NULL;
    if (strlen(dir) >= RECORDS_DIR_MAX)
        return err_set(e, ERR_INVALID, "dataset.path", "%s: path too long", dir);
    struct records *r = calloc(1, sizeof *r);
    if (!r)
        return err_set(e, ERR_NOMEM, "dataset", "%s: out of memory", dir);
    r->st = st;
    r->split = split;
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    struct records_header h = {0};
    if (records_load_index(r, &h, e) < 0 || records_open_shards(r, h.shards, e) < 0) {
        records_free(r);
        return -1;
    }
    struct data_sample_reader rd = {.ctx = r, .read = records_read, .destroy = records_free};
    return data_images_create_reader(&rd, r->n, (int)h.c, (int)h.h, (int)h.w, (int)h.classes,
                                     name, split, opts, out, e);
}

/* ======================================================================================= */
/* writer                                                                                  */
/* ======================================================================================= */

struct data_records_writer {
    char dir[RECORDS_DIR_MAX];
    enum data_split split;
    enum data_record_compression comp;
    int level; /* the codec's own value (zlib's -1 for its default) */
    int c, h, w, classes;
    size_t sample_bytes;
    int64_t shard_bytes;
    FILE *shard;                   /* the open shard's temporary file; NULL between shards */
    uint32_t nshards;              /* shards begun, the open one included */
    uint64_t shard_off;            /* bytes in the open shard */
    struct records_entry *entries; /* owned */
    int64_t n, cap;
    uint8_t *cbuf; /* owned: one compressed sample */
    size_t cbuf_cap;
    ZSTD_CCtx *zc; /* owned; zstd only */
};

/* The codec's level for a requested one (0 = the codec's default). */
static int records_level(enum data_record_compression comp, int level, int *out, struct err *e)
{
    *out = 0;
    if (comp == DATA_RECORD_ZLIB) {
        if (level < 0 || level > 9)
            return err_set(e, ERR_INVALID, "level", "zlib level %d outside [1, 9] (0: default)",
                           level);
        *out = level ? level : Z_DEFAULT_COMPRESSION;
    } else if (comp == DATA_RECORD_ZSTD) {
        if (level < 0 || level > 19)
            return err_set(e, ERR_INVALID, "level",
                           "zstd level %d outside [1, 19] (0: default)", level);
        *out = level ? level : ZSTD_CLEVEL_DEFAULT;
    } else if (comp == DATA_RECORD_JPEG) {
        if (level < 0 || level > 100)
            return err_set(e, ERR_INVALID, "quality",
                           "JPEG quality %d outside [1, 100] (0: 95)", level);
        *out = level ? level : 95;
    }
    return 0;
}

static int records_writer_check(enum data_record_compression comp, int c, int h, int w,
                                int classes, int64_t shard_bytes, const char *dir,
                                struct err *e)
{
    if (comp < DATA_RECORD_RAW || comp > DATA_RECORD_JPEG)
        return err_set(e, ERR_INVALID, "format", "unknown record compression %d", (int)comp);
    if (c < 1 || c > DATA_MAX_CHANNELS || h < 1 || h > DATA_MAX_SIDE || w < 1 ||
        w > DATA_MAX_SIDE)
        return err_set(e, ERR_INVALID, "dataset", "sample shape %dx%dx%d out of range", c, h,
                       w);
    if (classes < 1 || classes > DATA_MAX_CLASSES)
        return err_set(e, ERR_INVALID, "dataset", "%d classes, outside [1, %d]", classes,
                       DATA_MAX_CLASSES);
    if (shard_bytes < 1)
        return err_set(e, ERR_INVALID, "shard_mb", "shard size %lld bytes",
                       (long long)shard_bytes);
    if (strlen(dir) == 0 || strlen(dir) >= RECORDS_DIR_MAX)
        return err_set(e, ERR_INVALID, "dataset.path", "'%s': path empty or too long", dir);
    return 0;
}

/* A previous conversion's index would describe shards this one overwrites: it goes first. */
static int records_remove_index(const char *dir, enum data_split split, struct err *e)
{
    char path[RECORDS_PATH_MAX];
    records_index_path(path, sizeof path, dir, split);
    if (unlink(path) < 0 && errno != ENOENT)
        return err_errno(e, "%s: unlink", path);
    return 0;
}

int data_records_writer_create(const char *dir, enum data_split split,
                               enum data_record_compression comp, int level, int c, int h,
                               int w, int classes, int64_t shard_bytes,
                               struct data_records_writer **out, struct err *e)
{
    *out = NULL;
    int clevel;
    if (records_writer_check(comp, c, h, w, classes, shard_bytes, dir, e) < 0 ||
        records_level(comp, level, &clevel, e) < 0 || data_make_dirs(dir, e) < 0 ||
        records_remove_index(dir, split, e) < 0)
        return -1;
    struct data_records_writer *rw = calloc(1, sizeof *rw);
    if (!rw)
        return err_set(e, ERR_NOMEM, "dataset", "%s: out of memory", dir);
    *rw = (struct data_records_writer){.split = split,
                                       .comp = comp,
                                       .level = clevel,
                                       .c = c,
                                       .h = h,
                                       .w = w,
                                       .classes = classes,
                                       .sample_bytes = (size_t)c * (size_t)h * (size_t)w,
                                       .shard_bytes = shard_bytes};
    snprintf(rw->dir, sizeof rw->dir, "%s", dir);
    if (comp != DATA_RECORD_RAW) {
        rw->cbuf_cap = records_stored_bound(comp, rw->sample_bytes);
        rw->cbuf = malloc(rw->cbuf_cap);
        rw->zc = comp == DATA_RECORD_ZSTD ? ZSTD_createCCtx() : NULL;
        if (!rw->cbuf || (comp == DATA_RECORD_ZSTD && !rw->zc)) {
            data_records_writer_abort(rw);
            return err_set(e, ERR_NOMEM, "dataset", "%s: out of memory for the codec", dir);
        }
    }
    *out = rw;
    return 0;
}

/* A sample as a JPEG file's bytes into rw->cbuf (the codec the files format writes, so a
 * records-jpeg sample is byte for byte the files-jpeg file of the same sample). */
static int records_encode_jpeg(struct data_records_writer *rw, const uint8_t *chw, size_t *len,
                               struct err *e)
{
    uint8_t *jpg = NULL;
    if (data_image_encode(DATA_CODEC_JPEG, rw->level, chw, rw->c, rw->h, rw->w, &jpg, len, e) <
        0)
        return -1;
    int rc = 0;
    if (*len > rw->cbuf_cap)
        rc = err_set(e, ERR_INTERNAL, "dataset", "%s: a JPEG of %zu bytes, more than %zu",
                     rw->dir, *len, rw->cbuf_cap);
    else
        memcpy(rw->cbuf, jpg, *len);
    free(jpg);
    return rc;
}

/* The bytes a sample is stored as: chw itself (raw) or rw->cbuf. */
static int records_encode(struct data_records_writer *rw, const uint8_t *chw,
                          const uint8_t **stored, size_t *len, struct err *e)
{
    if (rw->comp == DATA_RECORD_RAW) {
        *stored = chw;
        *len = rw->sample_bytes;
        return 0;
    }
    *stored = rw->cbuf;
    if (rw->comp == DATA_RECORD_ZLIB) {
        uLongf dlen = (uLongf)rw->cbuf_cap;
        int zr = compress2(rw->cbuf, &dlen, chw, (uLong)rw->sample_bytes, rw->level);
        *len = (size_t)dlen;
        return zr == Z_OK ? 0
                          : err_set(e, ERR_INTERNAL, "dataset", "%s: zlib compress2: %s",
                                    rw->dir, zError(zr));
    }
    if (rw->comp == DATA_RECORD_JPEG)
        return records_encode_jpeg(rw, chw, len, e);
    size_t zr = ZSTD_compressCCtx(rw->zc, rw->cbuf, rw->cbuf_cap, chw, rw->sample_bytes,
                                  rw->level);
    *len = zr;
    return ZSTD_isError(zr) ? err_set(e, ERR_INTERNAL, "dataset", "%s: ZSTD_compress: %s",
                                      rw->dir, ZSTD_getErrorName(zr))
                            : 0;
}

/* Closes the open shard and renames it into place. */
static int records_close_shard(struct data_records_writer *rw, struct err *e)
{
    char tmp[RECORDS_PATH_MAX + 8], path[RECORDS_PATH_MAX];
    records_shard_path(path, sizeof path, rw->dir, rw->split, rw->nshards - 1);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int rc = fclose(rw->shard);
    rw->shard = NULL;
    if (rc != 0) {
        err_errno(e, "%s: write", tmp);
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, path) < 0) {
        err_errno(e, "%s: rename to %s", tmp, path);
        unlink(tmp);
        return -1;
    }
    return 0;
}

static int records_open_shard(struct data_records_writer *rw, struct err *e)
{
    if (rw->nshards == RECORDS_MAX_SHARDS)
        return err_set(e, ERR_TOO_LARGE, "shard_mb",
                       "%s: more than %d shards: choose a larger shard size", rw->dir,
                       RECORDS_MAX_SHARDS);
    char tmp[RECORDS_PATH_MAX + 8], path[RECORDS_PATH_MAX];
    records_shard_path(path, sizeof path, rw->dir, rw->split, rw->nshards);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (!(rw->shard = fopen(tmp, "wb")))
        return err_errno(e, "%s: open", tmp);
    rw->nshards++;
    rw->shard_off = 0;
    return 0;
}

static int records_push_entry(struct data_records_writer *rw, const struct records_entry *en,
                              struct err *e)
{
    if (rw->n == rw->cap) {
        int64_t ncap = rw->cap ? rw->cap * 2 : 1024;
        struct records_entry *ne = realloc(rw->entries, (size_t)ncap * sizeof *ne);
        if (!ne)
            return err_set(e, ERR_NOMEM, "dataset", "%s: out of memory for the index", rw->dir);
        rw->entries = ne;
        rw->cap = ncap;
    }
    rw->entries[rw->n++] = *en;
    return 0;
}

int data_records_writer_add(struct data_records_writer *rw, const uint8_t *chw, int32_t label,
                            struct err *e)
{
    if (label < 0 || label >= rw->classes)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: sample %lld has label %d, outside [0, %d)", rw->dir,
                       (long long)rw->n, (int)label, rw->classes);
    if (rw->n == RECORDS_MAX_SAMPLES)
        return err_set(e, ERR_TOO_LARGE, "dataset", "%s: more than %lld samples in a split",
                       rw->dir, (long long)RECORDS_MAX_SAMPLES);
    const uint8_t *stored;
    size_t len;
    if (records_encode(rw, chw, &stored, &len, e) < 0)
        return -1;
    /* a new shard once this sample would pass the size; a sample larger than a whole shard
     * gets one of its own */
    if (rw->shard && rw->shard_off > 0 && rw->shard_off + len > (uint64_t)rw->shard_bytes &&
        records_close_shard(rw, e) < 0)
        return -1;
    if (!rw->shard && records_open_shard(rw, e) < 0)
        return -1;
    if (fwrite(stored, 1, len, rw->shard) != len)
        return err_errno(e, "%s: write shard %u", rw->dir, (unsigned)rw->nshards - 1);
    struct records_entry en = {.shard = rw->nshards - 1,
                               .offset = rw->shard_off,
                               .stored = (uint32_t)len,
                               .label = label,
                               .crc = (uint32_t)crc32(0L, stored, (uInt)len)};
    rw->shard_off += len;
    return records_push_entry(rw, &en, e);
}

/* The index's bytes (owned heap block of *len bytes). */
static uint8_t *records_index_bytes(const struct data_records_writer *rw, size_t *len)
{
    *len = RECORDS_HEADER + (size_t)rw->n * RECORDS_ENTRY + RECORDS_TRAILER;
    uint8_t *b = calloc(1, *len);
    if (!b)
        return NULL;
    memcpy(b, RECORDS_MAGIC, 8);
    records_put_u32(b + 8, RECORDS_VERSION);
    records_put_u32(b + 12, (uint32_t)rw->c);
    records_put_u32(b + 16, (uint32_t)rw->h);
    records_put_u32(b + 20, (uint32_t)rw->w);
    records_put_u32(b + 24, (uint32_t)rw->classes);
    records_put_u32(b + 28, (uint32_t)rw->comp);
    records_put_u64(b + 32, (uint64_t)rw->n);
    records_put_u32(b + 40, rw->nshards);
    for (int64_t i = 0; i < rw->n; i++) {
        uint8_t *p = b + RECORDS_HEADER + (size_t)i * RECORDS_ENTRY;
        const struct records_entry *en = &rw->entries[i];
        records_put_u32(p, en->shard);
        records_put_u64(p + 4, en->offset);
        records_put_u32(p + 12, en->stored);
        records_put_u32(p + 16, (uint32_t)en->label);
        records_put_u32(p + 20, en->crc);
    }
    uint32_t crc = (uint32_t)crc32(0L, b, (uInt)(*len - RECORDS_TRAILER));
    records_put_u32(b + *len - RECORDS_TRAILER, crc);
    return b;
}

/* Writes the index under a temporary name and renames it into place. */
static int records_write_index(const struct data_records_writer *rw, struct err *e)
{
    char tmp[RECORDS_PATH_MAX + 8], path[RECORDS_PATH_MAX];
    records_index_path(path, sizeof path, rw->dir, rw->split);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    size_t len;
    uint8_t *b = records_index_bytes(rw, &len);
    if (!b)
        return err_set(e, ERR_NOMEM, "dataset", "%s: out of memory for the index", path);
    FILE *f = fopen(tmp, "wb");
    int rc = f ? 0 : err_errno(e, "%s: open", tmp);
    if (f && fwrite(b, 1, len, f) != len)
        rc = err_errno(e, "%s: write", tmp);
    if (f && fclose(f) != 0 && rc == 0)
        rc = err_errno(e, "%s: write", tmp);
    free(b);
    if (rc == 0 && rename(tmp, path) < 0)
        rc = err_errno(e, "%s: rename to %s", tmp, path);
    if (rc < 0)
        unlink(tmp);
    return rc;
}

/* Shards past the last one written, left by an earlier, larger conversion into dir. */
static void records_remove_stale(const struct data_records_writer *rw)
{
    for (uint32_t s = rw->nshards; s < RECORDS_MAX_SHARDS; s++) {
        char path[RECORDS_PATH_MAX];
        records_shard_path(path, sizeof path, rw->dir, rw->split, s);
        if (unlink(path) < 0)
            break;
    }
}

int data_records_writer_finish(struct data_records_writer *rw, struct err *e)
{
    int rc = 0;
    if (rw->n == 0)
        rc = err_set(e, ERR_INVALID, "dataset", "%s: no samples to write for the %s split",
                     rw->dir, data_split_name(rw->split));
    if (rc == 0 && rw->shard)
        rc = records_close_shard(rw, e);
    if (rc == 0)
        rc = records_write_index(rw, e);
    if (rc == 0)
        records_remove_stale(rw);
    data_records_writer_abort(rw);
    return rc;
}

void data_records_writer_abort(struct data_records_writer *rw)
{
    if (!rw)
        return;
    if (rw->shard) {
        char tmp[RECORDS_PATH_MAX + 8], path[RECORDS_PATH_MAX];
        records_shard_path(path, sizeof path, rw->dir, rw->split, rw->nshards - 1);
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        fclose(rw->shard);
        unlink(tmp);
    }
    ZSTD_freeCCtx(rw->zc);
    free(rw->cbuf);
    free(rw->entries);
    free(rw);
}
