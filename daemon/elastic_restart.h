/* elastic_restart: the restart mode of an elastic run (issue 32; engine pytorch, what
 * torchrun's elastic agent does): when a slot is lost the daemon stops every rank of the
 * generation and starts generation N+1 with a new world, and the adapter resumes from the
 * checkpoint it wrote into the run's elastic folder. This file holds the decisions and
 * the record; daemon/monitor.c does the stopping and spawning.
 *
 * Decisions:
 * - The next world: n' = max_ranks when the survivors are fewer (a replacement is
 *   allowed: the group restarts at max_ranks), else the survivors' count; below
 *   min_ranks the run fails ("elastic: 1 rank left, min_ranks 2"). Generation N+1 is
 *   slots 0..n'-1 with DDPB_WORLD_SIZE=n': a restart renumbers, so there is no gap to
 *   carry.
 * - Which ranks of a generation were lost, not victims: those most to blame as the
 *   monitor ranks blame (killed by a signal the daemon did not send, or ended without
 *   saying why, outranks an error of its own, which outranks a peer or timeout error: a
 *   survivor of a lost peer reports one of those, and the daemon's SIGTERM is no loss).
 * - At most ELASTIC_RESTART_MAX_GENS generations: a rank that fails the same way at
 *   every start would otherwise restart for ever; the run then fails naming the limit.
 * - Each rank gets DDPB_ELASTIC_GEN, DDPB_ELASTIC_DIR, DDPB_ELASTIC_SLOTS (the run's W:
 *   a rank's hello still says the run's world_size, the slots) and, from generation 1,
 *   DDPB_ELASTIC_LOST_AT (Unix seconds the loss was seen, for the resume's timing).
 * - The record of a generation is one JSON object, published live as an "elastic" event
 *   of the run and appended to <run dir>/elastic/generations.jsonl. */
#ifndef DDPB_ELASTIC_RESTART_H
#define DDPB_ELASTIC_RESTART_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/spec.h"

#define ELASTIC_RESTART_MAX_GENS 32
#define ELASTIC_RESTART_ENV 4 /* entries elastic_restart_env fills */

struct elastic_restart {
    const char *mode; /* "restart", or "driver" (horovod's elastic driver; monitor.c) */
    int slots;        /* the run's world_size W */
    int min_ranks, max_ranks;
    int gen;        /* the generation running (or being stopped) */
    int world;      /* its ranks: slots 0 .. world - 1 */
    bool stopping;  /* a slot was lost: the generation's ranks are being stopped */
    int first_lost; /* the slot whose end began the stop */
    double lost_at; /* Unix seconds that end was seen; 0: none yet */
    int64_t stop_began_ms, kill_at_ms; /* monotonic: the stop, and its SIGKILL */
    char dir[PATH_MAX - 32];           /* DDPB_ELASTIC_DIR */
};

/* Restart state of a run of `slots` ranks whose checkpoints go under run_dir/elastic
 * (created). Returns 0, or -1 with why (cap bytes) when the folder cannot be made. */
int elastic_restart_init(struct elastic_restart *er, const struct spec_elastic *el, int slots,
                         const char *run_dir, char *why, size_t cap);

/* The world of the next generation given how many ranks of this one survived, or -1 with
 * why (cap bytes): fewer than min_ranks, or the generation limit reached. */
int elastic_restart_next_world(const struct elastic_restart *er, int survivors, char *why,
                               size_t cap);

/* Whether a rank that ended with blame score `score` (daemon/monitor.c's: 4 killed by
 * someone else, 3 ended without a reason, 2 its own error, 1 a peer's or a timeout, 0
 * fine or stopped by the daemon) was lost, given the highest score of its generation. */
bool elastic_restart_was_lost(int score, int max_score);

/* "KEY=VALUE" entries for a rank of the current generation into out (ELASTIC_RESTART_ENV
 * rows of width w); returns how many. */
int elastic_restart_env(const struct elastic_restart *er, char *out, size_t w);

/* The record of generation er->gen (just begun): {"mode" (er->mode), "gen", "world",
 * "members" (its slots: members, n_members; NULL: 0 .. world - 1, restart mode's), "lost"
 * (slots lost from the one before), "reason", "t" (Unix seconds), "stop_ms" (how long
 * stopping the one before took; -1 for generation 0 and where nothing is stopped)}. Owned,
 * or NULL when out of memory. Also appended to the run's generations.jsonl (best effort,
 * logged). */
json_t *elastic_restart_record(const struct elastic_restart *er, const int *members,
                               int n_members, const int *lost, int n_lost, const char *reason,
                               int64_t stop_ms);

#endif
