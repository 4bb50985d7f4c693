/* codec: one image's [c][h][w] bytes to and from a PNG or JPEG file's bytes, for the
 * per-sample files format (files.c) and the converter: libpng's simplified API and
 * libjpeg-turbo, both from and to memory (the file is read and written whole elsewhere,
 * through the rank's storage).
 *
 * Decision: strict and predictable over lenient. The kind is told by the magic bytes, never
 * a name; a libjpeg warning (corrupt or truncated data, which libjpeg would otherwise paper
 * over with grey) is an error, as TurboJPEG's TJFLAG_STOPONWARNING makes it; a file with an
 * alpha channel is refused rather than composited onto a background nobody chose. A gray
 * file read as RGB is replicated (libpng and libjpeg both convert), an RGB file read as
 * gray is refused: dropping colour is a choice the user makes when converting, not here.
 * PNG pixels come back as stored for the 8-bit files the writer makes; libpng's simplified
 * API turns a 16-bit file, or one whose gAMA chunk is not sRGB's, into 8-bit sRGB.
 * JPEG is written 4:4:4 (no chroma subsampling) so that quality 95-100 stays close to the
 * bytes it came from. libjpeg reports errors through a longjmp out of its error manager,
 * never exit(): every call that can fail runs under a setjmp in this file. */
#include "worker/data/codec.h"

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* jpeglib.h comes after stdio.h and stddef.h, which it uses without including */
#include <jpeglib.h>
#include <png.h>

#include "worker/data/data.h"

static const uint8_t codec_png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
static const uint8_t codec_jpeg_magic[3] = {0xff, 0xd8, 0xff};

#define CODEC_META_BYTES ((size_t)1 << 20)
/* The most scans a JPEG may have: a baseline file has one, a progressive one from libjpeg
 * or Photoshop about ten; each scan is another pass over the whole coefficient buffer, so
 * a file of thousands of tiny scans costs seconds per image (libjpeg-turbo's djpeg
 * -maxscans and TurboJPEG's TJPARAM_SCANLIMIT guard the same way) */
#define CODEC_JPEG_MAX_SCANS 100

enum codec_kind { CODEC_KIND_NONE, CODEC_KIND_PNG, CODEC_KIND_JPEG };

static enum codec_kind codec_kind_of(const uint8_t *buf, size_t len)
{
    if (len >= sizeof codec_png_magic && !memcmp(buf, codec_png_magic, sizeof codec_png_magic))
        return CODEC_KIND_PNG;
    if (len >= sizeof codec_jpeg_magic &&
        !memcmp(buf, codec_jpeg_magic, sizeof codec_jpeg_magic))
        return CODEC_KIND_JPEG;
    return CODEC_KIND_NONE;
}

static int codec_check_shape(const char *what, int c, int h, int w, struct err *e)
{
    if ((c != 1 && c != 3) || h < 1 || h > DATA_MAX_SIDE || w < 1 || w > DATA_MAX_SIDE)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: a %dx%dx%d image (c x h x w): the image files take 1 (gray) or 3 "
                       "(RGB) channels and sides in [1, %d]",
                       what, c, h, w, DATA_MAX_SIDE);
    return 0;
}

static int codec_shape_mismatch(const char *what, int fc, int fh, int fw, int c, int h, int w,
                                struct err *e)
{
    return err_set(e, ERR_INVALID, "dataset",
                   "%s: image is %dx%dx%d (c x h x w), expected %dx%dx%d", what, fc, fh, fw, c,
                   h, w);
}

/* What a read asks for: the shape the image must have and where its [h][w][c] pixels go
 * (hwc NULL: the header only, for the probe). */
struct codec_want {
    const char *what;
    int c, h, w;
    uint8_t *hwc; /* caller-owned, c * h * w bytes */
};

/* [c][h][w] planes -> [h][w][c] pixels, and back (c 1 is a copy). */
static void codec_interleave(const uint8_t *chw, int c, size_t plane, uint8_t *hwc)
{
    for (size_t k = 0; k < plane; k++)
        for (int ch = 0; ch < c; ch++)
            hwc[k * (size_t)c + (size_t)ch] = chw[(size_t)ch * plane + k];
}

static void codec_deinterleave(const uint8_t *hwc, int c, size_t plane, uint8_t *chw)
{
    for (size_t k = 0; k < plane; k++)
        for (int ch = 0; ch < c; ch++)
            chw[(size_t)ch * plane + k] = hwc[k * (size_t)c + (size_t)ch];
}

/* --- PNG: libpng's simplified API (its own setjmp inside) ---------------------------- */

static int codec_png_error(png_image *im, const char *what, const char *doing, struct err *e)
{
    err_set(e, ERR_INVALID, "dataset", "%s: %s PNG: %s", what, doing,
            im->message[0] ? im->message : "libpng failed");
    png_image_free(im);
    return -1;
}

static int codec_png_header(const uint8_t *buf, size_t len, const char *what, png_image *im,
                            int *c, struct err *e)
{
    memset(im, 0, sizeof *im);
    im->version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(im, buf, len))
        return codec_png_error(im, what, "corrupt", e);
    if (im->format & PNG_FORMAT_FLAG_ALPHA) {
        png_image_free(im);
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: PNG with an alpha channel (or transparency): the image files take "
                       "gray or RGB only",
                       what);
    }
    *c = im->format & PNG_FORMAT_FLAG_COLOR ? 3 : 1;
    return 0;
}

static int codec_png_read(const uint8_t *buf, size_t len, const struct codec_want *want,
                          struct err *e)
{
    png_image im;
    int fc;
    if (codec_png_header(buf, len, want->what, &im, &fc, e) < 0)
        return -1;
    if ((int64_t)im.height != want->h || (int64_t)im.width != want->w ||
        (want->c == 1 && fc == 3)) {
        codec_shape_mismatch(want->what, fc, (int)im.height, (int)im.width, want->c, want->h,
                             want->w, e);
        png_image_free(&im);
        return -1;
    }
    im.format = want->c == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
    if (!png_image_finish_read(&im, NULL, want->hwc, 0, NULL))
        return codec_png_error(&im, want->what, "corrupt", e);
    return 0;
}

/* Caller owns *out. One compression into a buffer of libpng's upper bound, then shrunk:
 * asking for the size first would compress twice. */
static int codec_png_encode(const uint8_t *hwc, int c, int h, int w, uint8_t **out, size_t *len,
                            struct err *e)
{
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w;
    im.height = (png_uint_32)h;
    im.format = c == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
    png_alloc_size_t cap = PNG_IMAGE_PNG_SIZE_MAX(im), n = cap;
    uint8_t *mem = malloc(cap);
    if (!mem)
        return err_set(e, ERR_NOMEM, "dataset", "out of memory for a %zu-byte PNG", cap);
    if (!png_image_write_to_memory(&im, mem, &n, 0, hwc, 0, NULL)) {
        free(mem);
        return codec_png_error(&im, "image", "cannot write", e);
    }
    uint8_t *shrunk = realloc(mem, n);
    *out = shrunk ? shrunk : mem;
    *len = n;
    return 0;
}

/* --- JPEG: libjpeg-turbo, errors as a longjmp back to the caller's setjmp ------------- */

struct codec_jpeg_err {
    struct jpeg_error_mgr pub; /* first: libjpeg hands back a pointer to it */
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
};

static void codec_jpeg_exit(j_common_ptr ci)
{
    struct codec_jpeg_err *je = (struct codec_jpeg_err *)ci->err;
    ci->err->format_message(ci, je->msg);
    longjmp(je->jump, 1);
}

/* Level -1 is a warning: corrupt or truncated data libjpeg would decode anyway. */
static void codec_jpeg_emit(j_common_ptr ci, int level)
{
    if (level < 0)
        codec_jpeg_exit(ci);
}

static struct jpeg_error_mgr *codec_jpeg_errors(struct codec_jpeg_err *je)
{
    memset(je, 0, sizeof *je);
    jpeg_std_error(&je->pub);
    je->pub.error_exit = codec_jpeg_exit;
    je->pub.emit_message = codec_jpeg_emit;
    return &je->pub;
}

/* libjpeg calls this while it reads the file's scans (jpeg_start_decompress reads all of a
 * progressive file's): past the cap it is an error, out through the error manager. */
static void codec_jpeg_progress(j_common_ptr ci)
{
    const struct jpeg_decompress_struct *d = (const struct jpeg_decompress_struct *)ci;
    if (ci->is_decompressor && d->input_scan_number > CODEC_JPEG_MAX_SCANS) {
        struct codec_jpeg_err *je = (struct codec_jpeg_err *)ci->err;
        snprintf(je->msg, sizeof je->msg, "more than %d scans", CODEC_JPEG_MAX_SCANS);
        longjmp(je->jump, 1);
    }
}

/* The header's shape: c 1 for gray, 3 for a YCbCr or RGB file; anything else is refused. */
static int codec_jpeg_channels(const struct jpeg_decompress_struct *ci, const char *what,
                               int *c, struct err *e)
{
    bool gray = ci->num_components == 1 && ci->jpeg_color_space == JCS_GRAYSCALE;
    bool color = ci->num_components == 3 &&
                 (ci->jpeg_color_space == JCS_YCbCr || ci->jpeg_color_space == JCS_RGB);
    if (!gray && !color)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: JPEG with %d components (colour space %d): the image files take "
                       "gray or RGB only",
                       what, ci->num_components, (int)ci->jpeg_color_space);
    *c = gray ? 1 : 3;
    return 0;
}

/* Runs under codec_jpeg_read's setjmp: a libjpeg error longjmps out of here. The file's
 * shape goes to *fc, *fh, *fw. */
static int codec_jpeg_read_run(struct jpeg_decompress_struct *ci, const uint8_t *buf,
                               size_t len, const struct codec_want *want, int *fc, int *fh,
                               int *fw, struct err *e)
{
    jpeg_mem_src(ci, buf, (unsigned long)len);
    jpeg_read_header(ci, TRUE);
    if (codec_jpeg_channels(ci, want->what, fc, e) < 0)
        return -1;
    *fh = (int)ci->image_height; /* at most 65500 */
    *fw = (int)ci->image_width;
    if (!want->hwc)
        return 0;
    if (*fh != want->h || *fw != want->w || (want->c == 1 && *fc == 3))
        return codec_shape_mismatch(want->what, *fc, *fh, *fw, want->c, want->h, want->w, e);
    ci->out_color_space = want->c == 3 ? JCS_RGB : JCS_GRAYSCALE;
    jpeg_start_decompress(ci);
    size_t stride = (size_t)want->w * (size_t)want->c;
    while (ci->output_scanline < ci->output_height) {
        JSAMPROW row = want->hwc + (size_t)ci->output_scanline * stride;
        jpeg_read_scanlines(ci, &row, 1);
    }
    jpeg_finish_decompress(ci);
    return 0;
}

static int codec_jpeg_read(const uint8_t *buf, size_t len, const struct codec_want *want,
                           int *fc, int *fh, int *fw, struct err *e)
{
    struct jpeg_decompress_struct ci;
    struct codec_jpeg_err je;
    memset(&ci, 0, sizeof ci); /* jpeg_destroy after a failed create sees no memory manager */
    struct jpeg_progress_mgr progress = {.progress_monitor = codec_jpeg_progress};
    ci.err = codec_jpeg_errors(&je);
    if (setjmp(je.jump)) {
        jpeg_destroy_decompress(&ci);
        return err_set(e, ERR_INVALID, "dataset", "%s: corrupt JPEG: %s", want->what, je.msg);
    }
    jpeg_create_decompress(&ci);
    ci.progress = &progress;
    int rc = codec_jpeg_read_run(&ci, buf, len, want, fc, fh, fw, e);
    jpeg_destroy_decompress(&ci);
    return rc;
}

/* Room for any 4:4:4 or gray JPEG of w x h at any quality (TurboJPEG's tjBufSize: 6 or 2
 * bytes per pixel of the 8x8-padded image, plus headers), so jpeg_mem_dest never grows
 * the buffer: a buffer it grew would leak if an error longjmped past its cleanup. */
static size_t codec_jpeg_bound(int c, int h, int w)
{
    size_t ph = ((size_t)h + 7) & ~(size_t)7, pw = ((size_t)w + 7) & ~(size_t)7;
    return ph * pw * (c == 3 ? 6 : 2) + 2048;
}

/* Runs under codec_jpeg_encode's setjmp. */
static void codec_jpeg_encode_run(struct jpeg_compress_struct *ci, const uint8_t *hwc, int c,
                                  int h, int w, int quality, unsigned char **mem,
                                  unsigned long *n)
{
    jpeg_mem_dest(ci, mem, n);
    ci->image_width = (JDIMENSION)w;
    ci->image_height = (JDIMENSION)h;
    ci->input_components = c;
    ci->in_color_space = c == 3 ? JCS_RGB : JCS_GRAYSCALE;
    jpeg_set_defaults(ci);
    jpeg_set_quality(ci, quality, TRUE);
    ci->comp_info[0].h_samp_factor = ci->comp_info[0].v_samp_factor = 1; /* 4:4:4 */
    jpeg_start_compress(ci, TRUE);
    size_t stride = (size_t)w * (size_t)c;
    while (ci->next_scanline < ci->image_height) {
        JSAMPROW row = (JSAMPROW)(hwc + (size_t)ci->next_scanline * stride);
        jpeg_write_scanlines(ci, &row, 1);
    }
    jpeg_finish_compress(ci);
}

/* Caller owns *out. */
static int codec_jpeg_encode(const uint8_t *hwc, int c, int h, int w, int quality,
                             uint8_t **out, size_t *len, struct err *e)
{
    unsigned long cap = (unsigned long)codec_jpeg_bound(c, h, w), n = cap;
    unsigned char *mine = malloc(cap), *mem = mine;
    if (!mine)
        return err_set(e, ERR_NOMEM, "dataset", "out of memory for a %lu-byte JPEG", cap);
    struct jpeg_compress_struct ci;
    struct codec_jpeg_err je;
    memset(&ci, 0, sizeof ci);
    ci.err = codec_jpeg_errors(&je);
    if (setjmp(je.jump)) {
        jpeg_destroy_compress(&ci);
        free(mine);
        return err_set(e, ERR_INVALID, "dataset", "cannot write JPEG: %s", je.msg);
    }
    jpeg_create_compress(&ci);
    codec_jpeg_encode_run(&ci, hwc, c, h, w, quality, &mem, &n);
    jpeg_destroy_compress(&ci);
    if (mem != mine) /* grown after all (the bound was wrong): libjpeg malloc'd the new one */
        free(mine);
    uint8_t *shrunk = realloc(mem, n);
    *out = shrunk ? shrunk : mem;
    *len = n;
    return 0;
}

/* --- the interface --------------------------------------------------------------------- */

int data_image_encode(enum data_image_codec codec, int quality, const uint8_t *chw, int c,
                      int h, int w, uint8_t **out, size_t *len, struct err *e)
{
    *out = NULL;
    *len = 0;
    if (codec_check_shape("image", c, h, w, e) < 0)
        return -1;
    if (codec != DATA_CODEC_PNG && codec != DATA_CODEC_JPEG)
        return err_set(e, ERR_INVALID, "dataset.format", "unknown image codec %d", (int)codec);
    if (codec == DATA_CODEC_JPEG && (quality < 1 || quality > 100))
        return err_set(e, ERR_INVALID, "dataset.quality", "JPEG quality %d out of [1, 100]",
                       quality);
    size_t plane = (size_t)h * (size_t)w;
    uint8_t *hwc = malloc(plane * (size_t)c);
    if (!hwc)
        return err_set(e, ERR_NOMEM, "dataset", "out of memory for a %dx%dx%d image", c, h, w);
    codec_interleave(chw, c, plane, hwc);
    int rc = codec == DATA_CODEC_PNG ? codec_png_encode(hwc, c, h, w, out, len, e)
                                     : codec_jpeg_encode(hwc, c, h, w, quality, out, len, e);
    free(hwc);
    return rc;
}

size_t data_image_file_max(int c, int h, int w)
{
    /* the JPEG bound holds any PNG of the shape too (PNG stores at most c bytes a pixel, a
     * filter byte a row and zlib's 5 bytes in 16 KB), and the megabyte is for metadata
     * (EXIF, ICC profiles) a camera or editor leaves in */
    return codec_jpeg_bound(c, h, w) + CODEC_META_BYTES;
}

int data_image_decode(const uint8_t *buf, size_t len, const char *what, int c, int h, int w,
                      uint8_t *chw, struct err *e)
{
    if (codec_check_shape(what, c, h, w, e) < 0)
        return -1;
    enum codec_kind kind = codec_kind_of(buf, len);
    if (kind == CODEC_KIND_NONE)
        return err_set(e, ERR_INVALID, "dataset", "%s: not a PNG or JPEG file (%zu bytes)",
                       what, len);
    size_t plane = (size_t)h * (size_t)w;
    /* gray needs no interleaving: decode straight into the caller's buffer */
    uint8_t *hwc = c == 1 ? chw : malloc(plane * (size_t)c);
    if (!hwc)
        return err_set(e, ERR_NOMEM, "dataset", "%s: out of memory for a %dx%dx%d image", what,
                       c, h, w);
    struct codec_want want = {.what = what, .c = c, .h = h, .w = w, .hwc = hwc};
    int fc, fh, fw;
    int rc = kind == CODEC_KIND_PNG ? codec_png_read(buf, len, &want, e)
                                    : codec_jpeg_read(buf, len, &want, &fc, &fh, &fw, e);
    if (rc == 0 && c > 1)
        codec_deinterleave(hwc, c, plane, chw);
    if (hwc != chw)
        free(hwc);
    return rc;
}

int data_image_probe(const uint8_t *buf, size_t len, const char *what, int *c, int *h, int *w,
                     struct err *e)
{
    *c = *h = *w = 0;
    enum codec_kind kind = codec_kind_of(buf, len);
    if (kind == CODEC_KIND_NONE)
        return err_set(e, ERR_INVALID, "dataset", "%s: not a PNG or JPEG file (%zu bytes)",
                       what, len);
    if (kind == CODEC_KIND_JPEG) {
        struct codec_want header = {.what = what};
        if (codec_jpeg_read(buf, len, &header, c, h, w, e) < 0)
            return -1;
    } else {
        png_image im;
        if (codec_png_header(buf, len, what, &im, c, e) < 0)
            return -1;
        *h = im.height > DATA_MAX_SIDE ? DATA_MAX_SIDE + 1 : (int)im.height;
        *w = im.width > DATA_MAX_SIDE ? DATA_MAX_SIDE + 1 : (int)im.width;
        png_image_free(&im);
    }
    return codec_check_shape(what, *c, *h, *w, e);
}
