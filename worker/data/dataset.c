/* dataset: the format-independent part of the dataset interface: checked fills, the
 * published normalization constants, counter-based random draws, the epoch permutation
 * and opening a dataset by name.
 *
 * Decision: draws are splitmix64 streams keyed by hashing (seed, a, b); a stream is cheap to
 * start, so every sample gets its own and no generator state is ever shared. */
#include "worker/data/dataset.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

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

/* The image options a named dataset gets: its published normalization unless the config
 * overrides it, and the CIFAR augmentation recipe when asked for. */
static int data_open_opts(const struct data_config *cfg, struct data_image_opts *opts,
                          struct err *e)
{
    memset(opts, 0, sizeof *opts);
    if (cfg->norm.channels > 0)
        opts->norm = cfg->norm;
    else if (data_norm_preset(cfg->name, &opts->norm, e) < 0)
        return -1;
    if (cfg->augment) {
        opts->augment.pad = 4;
        opts->augment.flip = true;
    }
    return 0;
}

static const char *data_open_dir(const struct data_config *cfg, struct err *e)
{
    if (cfg->path[0])
        return cfg->path;
    if (strcmp(cfg->name, "fashion-mnist") == 0)
        return DATA_FASHION_MNIST_DIR;
    err_set(e, ERR_INVALID, "dataset.path", "dataset \"%s\" needs a path (a directory)",
            cfg->name);
    return NULL;
}

/* Keeps the first cfg->samples samples of an opened train split (the rest stay loaded but
 * are never indexed: dataset_fill checks against n). Frees *out on error. */
static int data_open_subset(const struct data_config *cfg, struct dataset **out, struct err *e)
{
    if (cfg->samples <= 0 || cfg->samples == (*out)->n)
        return 0;
    if (cfg->samples > (*out)->n) {
        err_set(e, ERR_INVALID, "dataset.samples",
                "dataset.samples: %lld, but the train "
                "split of %s has %lld samples",
                (long long)cfg->samples, cfg->name, (long long)(*out)->n);
        dataset_destroy(*out);
        *out = NULL;
        return -1;
    }
    (*out)->n = cfg->samples;
    return 0;
}

/* The image set in dir as cfg->format stores it: the native files in dir itself, a
 * converted format in dir/<format>/ (where `ddpbench dataset convert` writes it). */
static int data_open_format(const struct data_config *cfg, const char *dir,
                            enum data_split split, const struct data_image_opts *opts, bool idx,
                            struct dataset **out, struct err *e)
{
    const char *f = cfg->format[0] ? cfg->format : vocab_format(VOCAB_FORMAT_NATIVE)->name;
    const struct vocab_format *row = vocab_format(vocab_find(VOCAB_FORMAT, f));
    char names[160];
    if (!row)
        return err_set(e, ERR_INVALID, "dataset.format", "unknown dataset format \"%s\" (%s)",
                       f, vocab_join(VOCAB_FORMAT, ", ", names, sizeof names));
    if (!vocab_format_converted(row))
        return idx ? dataset_idx_open_dir(dir, cfg->name, split, opts, out, e)
                   : dataset_cifar_open_dir(dir, split, opts, out, e);
    bool files = row->files;
    char sub[sizeof cfg->path + sizeof cfg->format + 2];
    snprintf(sub, sizeof sub, "%s/%s", dir, f);
    int rc = files ? dataset_files_open(sub, cfg->name, split, opts, cfg->storage, out, e)
                   : dataset_records_open(sub, cfg->name, split, opts, cfg->storage, out, e);
    if (rc < 0 && e && e->code == ERR_NOT_FOUND)
        err_prefix(e,
                   "dataset.format %s: convert it first (ddpbench dataset convert --name %s "
                   "--path %s --to %s)",
                   f, cfg->name, dir, f);
    return rc;
}

int dataset_open(const struct data_config *cfg, enum data_split split, struct dataset **out,
                 struct err *e)
{
    *out = NULL;
    if (strcmp(cfg->name, "synthetic") == 0) {
        if (dataset_synthetic_create(&cfg->synthetic, out, e) < 0)
            return -1;
        (*out)->split = split;
        return 0;
    }
    if (strcmp(cfg->name, "text") == 0) {
        /* a file, not a directory: no default location, and dataset_text_open keeps the
         * first cfg->samples windows itself (it knows where the train split ends) */
        if (!cfg->path[0])
            return err_set(e, ERR_INVALID, "dataset.path",
                           "dataset \"text\" needs a path (a file)");
        return dataset_text_open(cfg->path, cfg->seq_len, split, cfg->samples, out, e);
    }
    bool idx = strcmp(cfg->name, "mnist") == 0 || strcmp(cfg->name, "fashion-mnist") == 0;
    if (!idx && strcmp(cfg->name, "cifar10") != 0)
        return err_set(e, ERR_INVALID, "dataset.name",
                       "unknown dataset \"%s\" (synthetic, mnist, fashion-mnist, cifar10, "
                       "text)",
                       cfg->name);
    struct data_image_opts opts;
    if (data_open_opts(cfg, &opts, e) < 0)
        return -1;
    const char *dir = data_open_dir(cfg, e);
    if (!dir)
        return -1;
    int rc = data_open_format(cfg, dir, split, &opts, idx, out, e);
    if (rc < 0 || split != DATA_SPLIT_TRAIN)
        return rc;
    return data_open_subset(cfg, out, e);
}
