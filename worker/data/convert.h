/* convert: writes a dataset split into another format (what `ddpbench dataset convert`
 * runs): per-sample image files (PNG, JPEG) or record shards (raw, zlib, zstd).
 *
 * Decision: a converter reads the source through the ordinary dataset interface, opened
 * without normalization or augmentation, so a fill gives byte / 255 exactly and the bytes
 * come back as round(x * 255): any readable format converts to any writable one, and the
 * order of the samples is the source's, which is what makes "the same samples in every
 * format" checkable index by index. Each writer takes samples in order as [c][h][w] bytes
 * and a label, and writes its index or manifest last, so a reader never sees a half-written
 * split as whole (a failed conversion leaves no index / manifest behind).
 *
 * Ownership: each *_create returns a writer the caller owns; *_finish writes the index and
 * frees it, *_abort frees it without one; exactly one of them is called. */
#ifndef DDPB_DATA_CONVERT_H
#define DDPB_DATA_CONVERT_H

#include <stdint.h>

#include "worker/data/dataset.h"
#include "common/err.h"

enum data_image_codec { DATA_CODEC_PNG = 0, DATA_CODEC_JPEG };
/* How a record stores its sample: the pixel bytes raw, compressed losslessly (zlib,
 * zstd), or as a JPEG file's bytes (TFRecord's and WebDataset's way for images: the decode
 * is paid while reading, the I/O is the records'). */
enum data_record_compression {
    DATA_RECORD_RAW = 0,
    DATA_RECORD_ZLIB,
    DATA_RECORD_ZSTD,
    DATA_RECORD_JPEG
};

/* --- per-sample image files (files.c) ------------------------------------------------- */
struct data_files_writer;
/* Into dir/<split>/<label>/<index>.{png,jpg} (label and index zero-padded to 5 and 8
 * digits, so sorted names give ImageFolder the same labels) and the manifest
 * dir/<split>.txt of "<split>/<label>/<index>.<ext> label" lines (written by finish, which
 * refuses a split with no samples). Each file and the manifest appear under their names by
 * rename() from a ".tmp" name, whole. quality: JPEG 1..100 (ignored for PNG). c is 1 (gray)
 * or 3 (RGB). dir is made when missing (mkdir -p). */
int data_files_writer_create(const char *dir, enum data_split split,
                             enum data_image_codec codec, int quality, int c, int h, int w,
                             struct data_files_writer **out, struct err *e);
int data_files_writer_add(struct data_files_writer *fw, const uint8_t *chw, int32_t label,
                          struct err *e);
int data_files_writer_finish(struct data_files_writer *fw, struct err *e);
void data_files_writer_abort(struct data_files_writer *fw);

/* Encoding and decoding of one image, [c][h][w] bytes <-> a PNG or JPEG file's bytes (the
 * codecs the files format uses; the converter and the tests share them). encode: *out is
 * an owned heap block (free()). decode: the image must be c x h x w (ERR_INVALID naming
 * `what` otherwise); c 1 is gray, 3 RGB (a gray file read as RGB is replicated, an RGB
 * file read as gray is refused, as is a file with alpha). Corrupt or truncated data is
 * ERR_INVALID naming `what`. JPEG is written 4:4:4 (no chroma subsampling). */
int data_image_encode(enum data_image_codec codec, int quality, const uint8_t *chw, int c,
                      int h, int w, uint8_t **out, size_t *len, struct err *e);
int data_image_decode(const uint8_t *buf, size_t len, const char *what, int c, int h, int w,
                      uint8_t *chw, struct err *e);
/* The shape in a PNG or JPEG file's header (c 1 or 3). */
int data_image_probe(const uint8_t *buf, size_t len, const char *what, int *c, int *h, int *w,
                     struct err *e);

/* --- record shards (records.c) -------------------------------------------------------- */
struct data_records_writer;
/* Into dir/<split>-NNNNN.rec shards of about shard_bytes each (a shard is closed before
 * the sample that would pass shard_bytes; a sample larger than that gets a shard alone) and
 * the index dir/<split>.index (written by finish; the layout is in records.c). level: the
 * codec's (zlib 1..9, zstd 1..19, JPEG's quality 1..100; 0 = its default, JPEG's 95; raw
 * ignores it). dir is made when
 * missing (parents too); create removes an earlier index of the split, finish the shards
 * an earlier, longer conversion left past the last one it wrote. add refuses a label
 * outside [0, classes); finish refuses a split of no samples. */
int data_records_writer_create(const char *dir, enum data_split split,
                               enum data_record_compression comp, int level, int c, int h,
                               int w, int classes, int64_t shard_bytes,
                               struct data_records_writer **out, struct err *e);
int data_records_writer_add(struct data_records_writer *rw, const uint8_t *chw, int32_t label,
                            struct err *e);
int data_records_writer_finish(struct data_records_writer *rw, struct err *e);
void data_records_writer_abort(struct data_records_writer *rw);

/* --- the whole conversion (convert.c) --------------------------------------------------- */
struct data_convert_opts {
    char format[16];  /* "files-png", "files-jpeg", "records", "records-zlib",
                           "records-zstd" */
    int quality;      /* JPEG; 0 = 95 */
    int level;        /* compression level; 0 = the codec's default */
    int64_t shard_mb; /* records: shard size; 0 = 64 */
};
/* Writes both splits of src_cfg's dataset (src_cfg->format says which format it is read
 * from; its norm and augment are ignored) into out_root/<format>/ . Returns 0, or -1 with
 * e set; samples written so far stay, the index or manifest of an unfinished split does
 * not. */
int data_convert(const struct data_config *src_cfg, const char *out_root,
                 const struct data_convert_opts *opts, struct err *e);

#endif
