/* dataset: a dataset by name: what a spec's "dataset" object maps to (struct data_config)
 * and the table that opens it in a format (dataset.c).
 *
 * Decision: the interface every format implements and the core they share are data.h,
 * the formats' entry points formats.h. This header includes both, so a caller that opens
 * by name (the training loop, the converter, the tests) includes only this one; a format
 * never includes it, since dataset.c calls the formats. */
#ifndef DDPB_DATA_DATASET_H
#define DDPB_DATA_DATASET_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "worker/data/data.h"
#include "worker/data/formats.h"

/* --- by name: what a spec's "dataset" object maps to ---------------------------------- */

struct data_config {
    char name[32];  /* "synthetic", "mnist", "fashion-mnist", "cifar10", "text" */
    char path[512]; /* directory; "" = DATA_FASHION_MNIST_DIR for fashion-mnist; text: the
                       file */
    struct data_synthetic_config synthetic; /* synthetic only */
    struct data_norm norm;                  /* channels 0 = the name's published constants */
    bool augment;    /* the CIFAR recipe (pad 4 + flip) on the train split */
    int64_t samples; /* train split: its first `samples` samples in file order; 0 =
                               all (synthetic: its own synthetic.samples) */
    int seq_len;     /* token datasets ("text"): tokens per sample (synthetic token data
                        takes its T from synthetic.w) */
    char format[16]; /* image sets: "native" (idx, CIFAR binaries in path), or one that
                        `ddpbench dataset convert` writes into path/<format>/: "files-png",
                        "files-jpeg", "records", "records-zlib", "records-zstd",
                        "records-jpeg" */
    struct data_storage *storage; /* borrowed: what the file-backed formats read through;
                                     NULL = plain reads, no caps */
};
/* Opens the split of the named dataset. Caller owns *out. ERR_INVALID names field
 * "dataset.name" for an unknown name, "dataset.samples" for a train split shorter than
 * cfg->samples, "dataset.path" for a file format ("text") without a path; ERR_NOT_FOUND
 * when the files are missing.
 *
 * Decision: samples keeps the first N of the files, not N drawn by the seed, so runs that
 * differ only in seed, world_size or strategy train on the same subset (as
 * torch.utils.data.Subset(ds, range(N)) does); the epoch shuffle then permutes those N.
 * The test split is always whole, so accuracies stay comparable. */
int dataset_open(const struct data_config *cfg, enum data_split split, struct dataset **out,
                 struct err *e);

#endif
