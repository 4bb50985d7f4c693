/* loader: turns a dataset into this rank's stream of batches: sharded by rank, reshuffled
 * per epoch from a seed, filled ahead by one or more worker threads into a small ring of
 * buffers allocated once, with the time the caller blocked for each batch measured ("data
 * wait", the data phase of a step).
 *
 * Sharding (DistributedSampler semantics): epoch e's global order is
 * data_permutation(seed, e, N) (identity when shuffle is off), the same on every rank;
 * rank r takes the strided positions r, r + W, r + 2W, ... of that order. What happens to
 * the N mod W positions that do not divide evenly is `remainder`:
 *   LOADER_DROP   every rank gets floor(N / W) samples; the last N mod W positions of the
 *                 epoch's order are left out (they differ per epoch, so no sample is left
 *                 out for good). Ranks are disjoint; their union is N - N mod W samples.
 *   LOADER_PAD    every rank gets ceil(N / W) samples; positions past N wrap to the start
 *                 of the order (PyTorch's DistributedSampler with drop_last=False). The
 *                 union is the whole set; the ceil(N/W)*W - N padded positions repeat
 *                 the first ones.
 *   LOADER_UNEVEN rank r gets the positions r + kW < N: ranks disjoint, union exactly the
 *                 set, but ranks may differ by one sample and so in batch count, which
 *                 suits evaluation (sum correct and counts), not lock-step training.
 * A rank's shard is cut into batches of batch_size in order; the last batch of an epoch
 * is short when the shard does not divide, or dropped with drop_last_batch.
 *
 * Determinism: batch number s (epoch s / batches_per_epoch) has indices that are a pure
 * function of (seed, epoch, rank, world size, remainder, batch size), and the dataset's
 * random choices are keyed by (seed, epoch, step, sample index) (dataset.h), so the same
 * config gives the same batches in the same order whatever the thread timing, with or
 * without the prefetch thread and whatever the number of workers: with N workers, worker w
 * fills the batches s with s % N == w, and the caller still takes them in order of s. A
 * dataset error is deterministic too: the caller gets every batch before the first batch
 * whose fill failed, then that batch's error.
 *
 * Ownership: the loader borrows the dataset (it must outlive the loader) and owns its ring
 * of batch buffers and its threads. A batch returned by loader_next stays valid, and is not
 * written to, until the next loader_next or loader_destroy call; the caller reads it and
 * must not write to it (a reused synthetic batch is handed out again).
 * loader_next and loader_destroy are called from one thread (the trainer's). */
#ifndef DDPB_DATA_LOADER_H
#define DDPB_DATA_LOADER_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "worker/data/data.h"

#define LOADER_MAX_PREFETCH 16
#define LOADER_MAX_WORKERS 16

enum loader_remainder { LOADER_DROP = 0, LOADER_PAD, LOADER_UNEVEN };

struct loader_config {
    int rank, world_size; /* 0 <= rank < world_size */
    int batch_size;       /* per rank */
    uint64_t seed;
    bool shuffle; /* false: the dataset's order every epoch (evaluation) */
    enum loader_remainder remainder;
    bool drop_last_batch; /* drop an epoch's short last batch */
    int64_t epochs;       /* 0 = no end: loader_next never reports the end */
    int prefetch;         /* batches the thread fills ahead; 0 = no thread, each batch
                                is filled inside loader_next (the synchronous path) */
    int workers;          /* threads filling batches (decode, augment): 0 or 1 = one
                             prefetch thread; N > 1 needs prefetch >= 1 (ERR_INVALID naming
                             "dataset.workers" otherwise) and fills up to max(prefetch, N)
                             batches ahead, N at a time */
    bool pin;             /* pin worker w to CPU loader_pin_cpu(w) (threads only) */
    /* Resuming (elastic training, worker/elastic.h): the first epoch delivered is
     * start_epoch, of whose order the first start_offset positions were consumed already
     * (by every rank together, under another world maybe); that epoch's remaining
     * positions start_offset + r, start_offset + r + W, ... are sharded as above, and
     * the epochs after it are whole. epochs counts from 0 still (the end is epoch
     * `epochs`, not start_epoch + epochs). Both 0: from the start. */
    int64_t start_epoch, start_offset;
};

struct data_batch {
    float *x;       /* [n][c][h][w], owned by the loader */
    int32_t *y;     /* [n][label_len] labels (dataset_label_len: 1 for a classification
                       set, T next-token targets for a token set), owned by the loader */
    int64_t *index; /* [n] the dataset indices in x, owned by the loader */
    int n;          /* samples; batch_size except an epoch's short last batch */
    int64_t step;   /* batches before this one since the loader started */
    int64_t epoch;
    int64_t batch_in_epoch;
    bool last_in_epoch;
    int64_t wait_ns; /* how long loader_next blocked to deliver this batch */
};

struct loader_stats {
    int64_t batches;     /* delivered */
    int64_t wait_ns;     /* total data wait over those batches */
    int64_t fill_ns;     /* time spent filling (by the threads or inline), summed over
                            the workers: more than the elapsed time when they overlap */
    int64_t fill_cpu_ns; /* CPU time of those fills (CLOCK_THREAD_CPUTIME_ID), summed */
};

struct loader;

/* rank 0 of 1, batch 32, seed 1, shuffle on, LOADER_DROP, short batches kept, no end,
 * prefetch 2, 1 worker. */
void loader_config_default(struct loader_config *cfg);

/* Samples rank gets per epoch (see the sharding rules above). */
int64_t loader_shard_len(int64_t n, int world_size, int rank, enum loader_remainder rem);

/* Checks cfg against ds, allocates the ring and starts the threads (prefetch > 0). Fails
 * with ERR_INVALID for a config that would yield no batch at all or an endless loop of
 * empty epochs. Caller owns *out (loader_destroy). */
int loader_create(struct dataset *ds, const struct loader_config *cfg, struct loader **out,
                  struct err *e);
/* Stops the threads (waiting at most for the fills in progress) and frees the ring. Safe at
 * any point, mid-epoch included; NULL is fine. */
void loader_destroy(struct loader *l);

/* Returns 1 with *out set to the next batch, 0 at the end (epochs reached; *out NULL), or
 * -1 with e set when filling failed (the dataset's error, propagated from whichever worker
 * filled that batch). Every batch before the first failed one is delivered first; after the
 * end or an error every call returns the same. The batch is owned by the loader (see
 * above). */
int loader_next(struct loader *l, const struct data_batch **out, struct err *e);

int64_t loader_batches_per_epoch(const struct loader *l);
/* Batches this rank gets in all (start_epoch's remainder and the epochs after it); -1
 * with no end. */
int64_t loader_batches_total(const struct loader *l);
/* The CPU a pinned worker `id` runs on: the id-th of this process's allowed CPUs counted
 * from the end, wrapping (OpenMP's compute threads take them from the start); -1 when the
 * set cannot be read. */
int loader_pin_cpu(int id);

/* A consistent snapshot (safe while the threads run). */
void loader_get_stats(struct loader *l, struct loader_stats *out);

#endif
