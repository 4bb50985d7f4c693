/* records: the writer of the record shard format (records.c; its reader is
 * dataset_records_open, formats.h). Ownership as convert.h says of every writer.
 *
 * Decision: declared here, by the file that implements it (it was in convert.h), so
 * records.c includes no header of the converter, which calls it. */
#ifndef DDPB_DATA_RECORDS_H
#define DDPB_DATA_RECORDS_H

#include <stdint.h>

#include "common/err.h"
#include "worker/data/data.h"

/* How a record stores its sample: the pixel bytes raw, compressed losslessly (zlib,
 * zstd), or as a JPEG file's bytes (TFRecord's and WebDataset's way for images: the decode
 * is paid while reading, the I/O is the records'). */
enum data_record_compression {
    DATA_RECORD_RAW = 0,
    DATA_RECORD_ZLIB,
    DATA_RECORD_ZSTD,
    DATA_RECORD_JPEG
};

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

#endif
