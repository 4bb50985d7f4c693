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
 * frees it, *_abort frees it without one; exactly one of them is called.
 *
 * The writers and the codecs are declared by the files that implement them (files.h,
 * records.h, codec.h), which this header includes: files.c and records.c use the codecs
 * and the core (data.h) but never this file, whose data_convert calls them. */
#ifndef DDPB_DATA_CONVERT_H
#define DDPB_DATA_CONVERT_H

#include <stdint.h>

#include "common/err.h"
#include "worker/data/codec.h"
#include "worker/data/dataset.h"
#include "worker/data/files.h"
#include "worker/data/records.h"

/* --- the whole conversion (convert.c) --------------------------------------------------- */
struct data_convert_opts {
    char format[16];  /* "files-png", "files-jpeg", "records", "records-zlib",
                           "records-zstd", "records-jpeg", "tfrecord" */
    int quality;      /* JPEG; 0 = 95 */
    int level;        /* compression level; 0 = the codec's default */
    int64_t shard_mb; /* records, tfrecord: shard size; 0 = 64 */
};
/* Writes both splits of src_cfg's dataset (src_cfg->format says which format it is read
 * from; its norm and augment are ignored) into out_root/<format>/ . Returns 0, or -1 with
 * e set; samples written so far stay, the index or manifest of an unfinished split does
 * not. */
int data_convert(const struct data_config *src_cfg, const char *out_root,
                 const struct data_convert_opts *opts, struct err *e);

#endif
