/* files: the writer of the per-sample image files format (files.c; its reader is
 * dataset_files_open, formats.h). Ownership as convert.h says of every writer.
 *
 * Decision: declared here, by the file that implements it (it was in convert.h), so
 * files.c includes no header of the converter, which calls it. */
#ifndef DDPB_DATA_FILES_H
#define DDPB_DATA_FILES_H

#include <stdint.h>

#include "common/err.h"
#include "worker/data/codec.h"
#include "worker/data/data.h"

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

#endif
