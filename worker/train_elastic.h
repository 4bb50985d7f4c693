/* train_elastic: what elastic training (worker/elastic.h) commits of a trainer and how a
 * new generation takes it up: one byte blob, a header then the parameters, the
 * batch-norm buffers and the optimizer's FULL state (ddp_optim_export: ZeRO's shards
 * gathered), so a world of any size can restore it (ddp_optim_import re-slices).
 *
 * Decisions:
 * - In memory, every rank its own copy: any member that is not new can be the one whose
 *   commit everyone takes (elastic_gen_root), and all hold the same (parameters and the
 *   gathered state are identical on every rank after a step).
 * - The RNG needs no entry: the data order is a pure function of (seed, epoch) and the
 *   position (loader.h), dropout's masks of the seed and the step.
 * - Shared by broadcast from the root: first the blob's length and the highest iteration
 *   counter of the members (one allreduce of their maxima), then the bytes, so a joiner
 *   needs nothing in advance and the iteration counter never goes back on any rank.
 *
 * Ownership: a train_commit owns its blob (train_commit_free). */
#ifndef DDPB_WORKER_TRAIN_ELASTIC_H
#define DDPB_WORKER_TRAIN_ELASTIC_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "worker/comm/comm.h"
#include "worker/ddp/ddp.h"
#include "worker/nn/optim.h"

#define TRAIN_COMMIT_MAGIC 0x44454c43u /* "DELC" */

/* A commit's header: the position and the running figures of the epoch. */
struct train_commit_head {
    uint32_t magic, version;
    int32_t repeat, epoch; /* the epoch the next batch belongs to */
    int64_t step;          /* optimizer steps done in the repeat */
    int64_t iter;          /* the run's iteration counter at the commit */
    int64_t offset;        /* samples of `epoch`'s order consumed, over all ranks */
    int64_t opt_step;      /* the optimizer's own count (Adam's bias correction) */
    double tally[3];       /* the epoch so far over all ranks: loss sum, correct, count */
    double epoch_s;        /* the epoch's training time before the commit */
    int64_t nparams, nbuffers, nstate; /* floats that follow, in this order */
};

struct train_commit {
    struct train_commit_head h; /* of the blob */
    uint8_t *blob;              /* owned: h, then the floats; NULL before the first */
    size_t len, cap;
};

void train_commit_free(struct train_commit *c);

/* Records h and the state in c (a collective under zero: every rank calls it, between
 * steps). params: nparams floats, buffers: nbuffers. */
int train_commit_save(struct train_commit *c, const struct train_commit_head *h,
                      const float *params, size_t nparams, const float *buffers,
                      size_t nbuffers, struct ddp *d, const struct nn_optim *o, struct err *e);

/* Every member of comm: the root's commit into every other's c (a joiner's c may be
 * empty); *iter_max gets the highest iteration counter any member passed. */
int train_commit_share(struct comm *comm, int root, struct train_commit *c, int64_t iter,
                       int64_t *iter_max, struct err *e);

/* Checks c's blob and reads its header into c->h (after a share). */
int train_commit_parse(struct train_commit *c, struct err *e);

/* Copies c's state into the arenas and the optimizer of d's world (d, o built for the
 * same model). ERR_INVALID when the sizes differ. */
int train_commit_load(const struct train_commit *c, float *params, size_t nparams,
                      float *buffers, size_t nbuffers, const struct ddp *d, struct nn_optim *o,
                      struct err *e);

#endif
