/* text: byte-level language-modelling data from any file: its bytes are the tokens
 * (vocabulary 256), cut into windows of seq_len inputs and their seq_len next-byte targets.
 *
 * Decision: windows start every seq_len bytes and are seq_len + 1 long, so inputs never
 * overlap (an epoch sees each byte once as an input, as nanoGPT-style loaders over a fixed
 * grid do) while every input still has its next byte as a target. The split is by
 * position, the last tenth of the windows being the test split, so test text is text the
 * model never trained on (a random split would interleave neighbouring windows). The file
 * is kept as stored (bytes) and converted while filling, like the image formats. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/data/data.h"
#include "worker/data/formats.h"
#include "worker/data/images.h"

#define TEXT_VOCAB 256
#define TEXT_TEST_SHARE 10 /* one window in ten goes to the test split */
/* The most bytes a text file may hold (after decompression): every rank holds the whole
 * file, and the CPU transformer trains on a few MB an epoch, so 256 MiB is far more than a
 * run reads while a gzip bomb (a few hundred KB inflating to GBs) stops here, per rank */
#define TEXT_MAX_BYTES ((size_t)256 << 20)

struct text {
    uint8_t *bytes;       /* owned: the whole file */
    const uint8_t *first; /* inside bytes: the split's first window */
};

static int text_fill(const struct dataset *ds, const int64_t *idx, int n,
                     const struct data_draw *draw, float *x, int32_t *y, struct err *e)
{
    const struct text *tx = ds->impl;
    size_t t_len = (size_t)ds->w;
    for (int i = 0; i < n; i++) {
        const uint8_t *win = tx->first + (size_t)idx[i] * t_len;
        float *xi = x + (size_t)i * t_len;
        int32_t *yi = y + (size_t)i * t_len;
        for (size_t t = 0; t < t_len; t++) {
            xi[t] = (float)win[t];
            yi[t] = win[t + 1];
        }
    }
    return 0;
}

static void text_destroy(struct dataset *ds)
{
    struct text *tx = ds->impl;
    if (tx)
        free(tx->bytes);
    free(tx);
    free(ds);
}

static const struct dataset_ops text_ops = {
    .fill = text_fill,
    .destroy = text_destroy,
};

/* The split's first window and window count for a file of len bytes (len >= 2 T + 1). */
static void text_split(size_t len, int seq_len, enum data_split split, int64_t *first,
                       int64_t *n)
{
    int64_t windows = (int64_t)((len - 1) / (size_t)seq_len);
    int64_t test = windows / TEXT_TEST_SHARE > 0 ? windows / TEXT_TEST_SHARE : 1;
    *first = split == DATA_SPLIT_TRAIN ? 0 : windows - test;
    *n = split == DATA_SPLIT_TRAIN ? windows - test : test;
}

/* Checks the opened file's size and cuts the split; the error names path. */
static int text_count(const char *path, size_t len, int seq_len, enum data_split split,
                      int64_t samples, int64_t *first, int64_t *n, struct err *e)
{
    size_t need = 2 * (size_t)seq_len + 1;
    if (len < need)
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: %zu bytes, too small for sequences of %d tokens: a train and a "
                       "test window need at least %zu bytes",
                       path, len, seq_len, need);
    text_split(len, seq_len, split, first, n);
    if (*n > DATA_MAX_SAMPLES)
        return err_set(e, ERR_TOO_LARGE, "dataset", "%s: %lld windows, more than %lld", path,
                       (long long)*n, (long long)DATA_MAX_SAMPLES);
    if (split != DATA_SPLIT_TRAIN || samples <= 0)
        return 0;
    if (samples > *n)
        return err_set(e, ERR_INVALID, "dataset.samples",
                       "dataset.samples: %lld, but the train split of %s has %lld samples "
                       "(windows of %d tokens)",
                       (long long)samples, path, (long long)*n, seq_len);
    *n = samples;
    return 0;
}

int dataset_text_open(const char *path, int seq_len, enum data_split split, int64_t samples,
                      struct dataset **out, struct err *e)
{
    *out = NULL;
    if (seq_len < 1 || seq_len > DATA_MAX_SIDE)
        return err_set(e, ERR_INVALID, "dataset.seq_len", "%d tokens per sample out of [1, %d]",
                       seq_len, DATA_MAX_SIDE);
    if (samples < 0)
        return err_set(e, ERR_INVALID, "dataset.samples", "%lld samples", (long long)samples);
    uint8_t *bytes;
    size_t len;
    if (data_read_file(path, TEXT_MAX_BYTES, &bytes, &len, NULL, e) < 0)
        return -1;
    int64_t first = 0, n = 0;
    if (text_count(path, len, seq_len, split, samples, &first, &n, e) < 0) {
        free(bytes);
        return -1;
    }
    /* owned by the dataset from here on; text_destroy frees both */
    struct dataset *ds = calloc(1, sizeof *ds);
    struct text *tx = calloc(1, sizeof *tx);
    if (!ds || !tx) {
        free(ds);
        free(tx);
        free(bytes);
        return err_set(e, ERR_NOMEM, "", "%s: out of memory", path);
    }
    tx->bytes = bytes;
    tx->first = bytes + (size_t)first * (size_t)seq_len;
    *ds = (struct dataset){.ops = &text_ops,
                           .impl = tx,
                           .split = split,
                           .n = n,
                           .c = 1,
                           .h = 1,
                           .w = seq_len,
                           .classes = TEXT_VOCAB,
                           .label_len = seq_len};
    snprintf(ds->name, sizeof ds->name, "text");
    *out = ds;
    return 0;
}
