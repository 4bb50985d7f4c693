/* codec: one image as PNG or JPEG bytes, both ways (libpng, libjpeg-turbo): what the
 * per-sample files and the JPEG records store, and what the converter and the tests
 * share.
 *
 * Decision: a header of its own (it was part of convert.h), so the formats that decode
 * (files.c, records.c) depend on the codec alone, not on the converter that calls them. */
#ifndef DDPB_DATA_CODEC_H
#define DDPB_DATA_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

enum data_image_codec { DATA_CODEC_PNG = 0, DATA_CODEC_JPEG };

/* Encoding and decoding of one image, [c][h][w] bytes <-> a PNG or JPEG file's bytes (the
 * codecs the files format uses; the converter and the tests share them). encode: *out is
 * an owned heap block (free()). decode: the image must be c x h x w (ERR_INVALID naming
 * `what` otherwise); c 1 is gray, 3 RGB (a gray file read as RGB is replicated, an RGB
 * file read as gray is refused, as is a file with alpha). Corrupt or truncated data is
 * ERR_INVALID naming `what`. JPEG is written 4:4:4 (no chroma subsampling). */
int data_image_encode(enum data_image_codec codec, int quality, const uint8_t *chw, int c,
                      int h, int w, uint8_t **out, size_t *len, struct err *e);
/* The most bytes one image file of the shape may take (a JPEG at quality 100 or a PNG,
 * plus a megabyte of metadata): the per-sample files format reads no more. */
size_t data_image_file_max(int c, int h, int w);
int data_image_decode(const uint8_t *buf, size_t len, const char *what, int c, int h, int w,
                      uint8_t *chw, struct err *e);
/* The shape in a PNG or JPEG file's header (c 1 or 3). */
int data_image_probe(const uint8_t *buf, size_t len, const char *what, int *c, int *h, int *w,
                     struct err *e);

#endif
