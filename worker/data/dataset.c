/* dataset: opening a dataset by name (dataset.h): the table from a spec's "dataset"
 * object to a format's entry point (formats.h), with the published normalization, the
 * augmentation recipe and the train subset applied on the way.
 *
 * Decision: this is the one file that names every format; the formats use the core
 * (data.c) and never this file, so the table calls them and nothing calls back. */
#include "worker/data/dataset.h"

#include <stdio.h>
#include <string.h>

#include "common/vocab.h"
#include "worker/data/guard.h"
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
    char sub[sizeof cfg->path + sizeof cfg->format + 2];
    snprintf(sub, sizeof sub, "%s/%s", dir, f);
    int rc = row->files ? dataset_files_open(sub, cfg->name, split, opts, cfg->storage, out, e)
             : row->tfrecord
                 ? dataset_tfrecord_open(sub, cfg->name, split, opts, cfg->storage, out, e)
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
    /* the daemon checked it at submit; checked again, as it may have moved since */
    if (cfg->path[0] && data_guard_check(cfg->path, e) < 0)
        return -1;
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
