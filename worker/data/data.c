/* data: the format-independent core of the dataset interface (data.h): checked fills,
 * the published normalization constants, counter-based random draws and the epoch
 * permutation. Opening a dataset by name is dataset.c's, which calls the formats; this
 * file calls none.
 *
 * Decision: draws are splitmix64 streams keyed by hashing (seed, a, b); a stream is cheap to
 * start, so every sample gets its own and no generator state is ever shared. */
#include "worker/data/data.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/vocab.h"

void dataset_destroy(struct dataset *ds)
{
    if (ds && ds->ops && ds->ops->destroy)
        ds->ops->destroy(ds);
}

size_t dataset_sample_floats(const struct dataset *ds)
{
    return (size_t)ds->c * (size_t)ds->h * (size_t)ds->w;
}

int dataset_label_len(const struct dataset *ds)
{
    return ds->label_len > 1 ? ds->label_len : 1;
}

int dataset_fill(const struct dataset *ds, const int64_t *idx, int n,
                 const struct data_draw *draw, float *x, int32_t *y, struct err *e)
{
    if (n < 0)
        return err_set(e, ERR_INTERNAL, "", "%s: fill of %d samples", ds->name, n);
    for (int i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= ds->n)
            return err_set(e, ERR_INTERNAL, "", "%s: sample index %lld outside [0, %lld)",
                           ds->name, (long long)idx[i], (long long)ds->n);
    return ds->ops->fill(ds, idx, n, draw, x, y, e);
}

const char *data_split_name(enum data_split split)
{
    return split == DATA_SPLIT_TRAIN ? "train" : "test";
}

_Static_assert(VOCAB_MAX_NORM_CHANNELS <= DATA_MAX_CHANNELS, "a norm fits struct data_norm");

/* The published constants are common/vocab.h's norms (the Python engines read the same
 * rows from schema/vocabulary.json). */
int data_norm_preset(const char *name, struct data_norm *out, struct err *e)
{
    const struct vocab_norm *n = vocab_norm_find(name);
    if (n) {
        *out = (struct data_norm){.channels = n->channels};
        for (int c = 0; c < n->channels && c < VOCAB_MAX_NORM_CHANNELS; c++) {
            out->mean[c] = n->mean[c];
            out->std[c] = n->std[c];
        }
        return 0;
    }
    char names[96] = "";
    for (size_t i = 0; vocab_norm_at(i); i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                 vocab_norm_at(i)->name);
    return err_set(e, ERR_NOT_FOUND, "dataset.norm",
                   "no published normalization for \"%s\" (%s)", name, names);
}

int data_norm_check(const struct data_norm *norm, int channels, struct err *e)
{
    if (norm->channels == 0)
        return 0;
    if (norm->channels != channels)
        return err_set(e, ERR_INVALID, "dataset.norm",
                       "normalization has %d channels, the data has %d", norm->channels,
                       channels);
    for (int c = 0; c < channels; c++) {
        if (!isfinite(norm->mean[c]) || !isfinite(norm->std[c]) || !(norm->std[c] > 0.0f))
            return err_set(e, ERR_INVALID, "dataset.norm",
                           "channel %d: mean %g std %g (std must be finite and > 0)", c,
                           (double)norm->mean[c], (double)norm->std[c]);
    }
    return 0;
}

/* splitmix64's output function (Steele, Lea, Flood 2014). */
static uint64_t data_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#define DATA_GOLDEN 0x9e3779b97f4a7c15ull

uint64_t data_rng_key(uint64_t seed, uint64_t a, uint64_t b)
{
    uint64_t k = data_mix(seed + DATA_GOLDEN);
    k = data_mix(k ^ (a + DATA_GOLDEN));
    return data_mix(k ^ (b + 2 * DATA_GOLDEN));
}

uint64_t data_rng_next(uint64_t *state)
{
    *state += DATA_GOLDEN;
    return data_mix(*state);
}

uint64_t data_rng_below(uint64_t *state, uint64_t bound)
{
    /* Rejecting the lowest (2^64 mod bound) values leaves a whole number of residue
     * cycles, so r % bound is exactly uniform. */
    uint64_t threshold = (0 - bound) % bound;
    for (;;) {
        uint64_t r = data_rng_next(state);
        if (r >= threshold)
            return r % bound;
    }
}

int *data_fds_new(uint32_t n)
{
    int *fds = malloc((n ? n : 1) * sizeof *fds);
    for (uint32_t s = 0; fds && s < n; s++)
        fds[s] = -1;
    return fds;
}

void data_fds_free(int *fds, uint32_t n)
{
    for (uint32_t s = 0; fds && s < n; s++)
        if (fds[s] >= 0)
            close(fds[s]);
    free(fds);
}

void data_permutation(uint64_t seed, int64_t epoch, int64_t n, int64_t *perm)
{
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    uint64_t s = data_rng_key(seed, (uint64_t)epoch, (uint64_t)n);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)data_rng_below(&s, (uint64_t)i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}
