/* tfrecord: the writer of TensorFlow's TFRecord format (tfrecord.c; its reader is
 * dataset_tfrecord_open, formats.h), and the pieces of it the tests drive alone: the
 * record framing and the tf.train.Example codec of the features ddpbench writes and reads.
 * Ownership as convert.h says of every writer. */
#ifndef DDPB_DATA_TFRECORD_H
#define DDPB_DATA_TFRECORD_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "worker/data/data.h"

/* A framed record: u64 length, u32 masked CRC-32C of those 8 bytes, the data, u32 masked
 * CRC-32C of the data (every integer little-endian). */
#define DATA_TFRECORD_HEAD 12
#define DATA_TFRECORD_FRAME 16 /* head and footer around the data */

struct data_tfrecord_writer;
/* Into dir/<split>-NNNNN-of-MMMMM.tfrecord shards of about shard_bytes each (a shard is
 * closed before the record that would pass shard_bytes; a record larger than that gets a
 * shard alone), each with its index <shard>.idx of "offset length" lines, one per framed
 * record. Each record is a tf.train.Example of the sample's JPEG file (quality 1..100, 0 =
 * 95; the files-jpeg encoder, so the bytes are that format's file) and its label. Shards
 * are written under temporary names and renamed, shard then index, by finish once M is
 * known; create removes the split's shards and indexes of an earlier conversion, so a
 * failed conversion leaves no split, and one interrupted while renaming leaves a set that
 * the reader refuses (a shard of the M missing). add refuses a label outside
 * [0, classes); finish refuses a split of no samples. */
int data_tfrecord_writer_create(const char *dir, enum data_split split, int quality, int c,
                                int h, int w, int classes, int64_t shard_bytes,
                                struct data_tfrecord_writer **out, struct err *e);
int data_tfrecord_writer_add(struct data_tfrecord_writer *tw, const uint8_t *chw, int32_t label,
                             struct err *e);
int data_tfrecord_writer_finish(struct data_tfrecord_writer *tw, struct err *e);
void data_tfrecord_writer_abort(struct data_tfrecord_writer *tw);

/* The features of one Example that ddpbench reads: image/encoded and image/class/label are
 * required; height, width and channels are -1 when absent. encoded points into the
 * decoded buffer (borrowed). */
struct data_tfrecord_example {
    const uint8_t *encoded;
    size_t encoded_len;
    int64_t label;
    int64_t height, width, channels;
};
/* Decodes a serialized tf.train.Example strictly: well-formed protobuf (varints, lengths,
 * wire types), no feature named twice, no Feature with two value kinds, the read features
 * of the right kind (bytes_list or int64_list) holding exactly one value, image/format
 * "JPEG" when present. Returns 0, or -1 with *field the feature at fault ("Example" when
 * no single one) and why (n bytes) saying what is wrong. */
int data_tfrecord_example_decode(const uint8_t *buf, size_t len,
                                 struct data_tfrecord_example *out, const char **field,
                                 char *why, size_t n);
/* Serializes the Example with every contract feature (image/encoded, image/class/label,
 * image/height, image/width, image/channels, image/format "JPEG") into an owned heap block
 * (*out, *len; free() it). Returns 0, or -1 when out of memory. */
int data_tfrecord_example_encode(const struct data_tfrecord_example *ex, uint8_t **out,
                                 size_t *len);
/* The 12 bytes before a record of len data bytes, and the 4 after its data. */
void data_tfrecord_frame_head(uint64_t len, uint8_t head[DATA_TFRECORD_HEAD]);
void data_tfrecord_frame_foot(const uint8_t *data, size_t len, uint8_t foot[4]);

#endif
