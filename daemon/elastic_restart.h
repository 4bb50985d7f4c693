/* elastic_restart: what the daemon keeps for an elastic run whose engine recovers by
 * starting processes again (issue 32): restart mode (engine pytorch, what torchrun's
 * elastic agent does: on a lost slot every rank is stopped and the group starts again
 * as the next generation, the adapter resuming from its checkpoint) and Horovod's
 * elastic driver (engine horovod: the driver restarts its workers itself, the daemon is
 * its host discovery). Which generation comes next and whether the run fails are
 * daemon/elastic.h's decisions; daemon/monitor.c stops and spawns; this file holds the
 * state in between, the checkpoint folder and the ranks' environment.
 *
 * Decisions:
 * - One folder per run, <run dir>/elastic (DDPB_ELASTIC_DIR), kept across generations:
 *   the adapter's checkpoint and iteration marks (engines/ddpb_elastic.py), the driver's
 *   discovery file (hosts, daemon/monitor.c).
 * - Each rank of a restart generation gets DDPB_ELASTIC_GEN, DDPB_ELASTIC_DIR,
 *   DDPB_ELASTIC_SLOTS (the run's W: a rank's hello says the run's world_size, its slots,
 *   while DDPB_WORLD_SIZE is the generation's) and, from generation 1,
 *   DDPB_ELASTIC_LOST_AT (Unix seconds the loss was seen: the adapter's regroup time).
 * - At most ELASTIC_RESTART_MAX_GENS generations: a rank that fails the same way at
 *   every start would otherwise restart for ever; the run then fails naming the limit. */
#ifndef DDPB_ELASTIC_RESTART_H
#define DDPB_ELASTIC_RESTART_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ELASTIC_RESTART_MAX_GENS 32
#define ELASTIC_RESTART_ENV 4 /* entries elastic_restart_env fills at most */

struct elastic_restart {
    bool driver;    /* Horovod's elastic driver; false: restart mode */
    int slots;      /* the run's world_size W */
    int gen;        /* the generation running (restart) or last recorded (driver) */
    int world;      /* restart: its ranks, slots 0 .. world - 1 */
    bool stopping;  /* restart: a slot was lost, the generation's ranks are being stopped */
    double lost_at; /* Unix seconds the loss was seen; 0: none yet */
    int64_t stop_began_ms, kill_at_ms; /* monotonic: the stop, and its SIGKILL */
    char dir[PATH_MAX - 32];           /* DDPB_ELASTIC_DIR */
};

/* State of a run of `slots` ranks whose folder is run_dir/elastic (created). Returns 0,
 * or -1 with why (cap bytes) when the folder cannot be made. */
int elastic_restart_init(struct elastic_restart *er, bool driver, int slots,
                         const char *run_dir, char *why, size_t cap);

/* "KEY=VALUE" entries for a rank of the current generation into out (ELASTIC_RESTART_ENV
 * rows of width w); returns how many. */
int elastic_restart_env(const struct elastic_restart *er, char *out, size_t w);

#endif
