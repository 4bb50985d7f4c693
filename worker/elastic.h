/* elastic: a rank's side of in-place elastic training (the spec's "elastic", ddpbench's
 * own engine; docs/design.md "Elastic training"): the generations a run's live slots go
 * through, read from the store, and the communicator of the current one.
 *
 * A run has W slots (DDPB_RANK); generation 0 is every slot, over the world
 * communicator main.c built. The daemon publishes each later generation once, in order,
 * as `elastic/g<N>` = {"gen":N,"members":[ascending slots],"joiners":[slots new in N],
 * "reason":"..."}. A rank whose communicator fails (a peer died: EOF, reset, or the comm
 * timeout) reports "detect", destroys the communicator, waits (up to the run's timeout)
 * for `elastic/g<N+1>` and builds its group communicator (comm_create_group, namespace
 * "eg<N+1>/", its rank = its index among the members); a failure while forming N+1 sends
 * it on to N+2. Growth goes through the same path without a failure: the generation's
 * rank 0 checks at each commit whether the next generation exists (elastic_next_exists)
 * and the trainer shares the answer. A replacement (DDPB_ELASTIC_JOIN=1) skips
 * generation 0: it waits for `elastic/join/<slot>` (the generation it joins) and enters
 * that one (elastic_join).
 *
 * Decisions:
 * - This file knows communicators and the store, not models: what state is committed
 *   and how it is restored is the trainer's (worker/train_elastic.h), so the worker
 *   program links none of the training code.
 * - Only failures a lost peer causes are recoverable (elastic_recoverable): ERR_PEER,
 *   ERR_TIMEOUT, ERR_IO, ERR_PROTOCOL. A signal (ERR_ABORTED), a bad spec or a diverged
 *   loss still end the rank.
 * - A failed communicator is stopped before anything waits on it (comm->stop), so its
 *   thread and the operations left in flight end at once instead of at the timeout.
 *
 * Ownership: struct elastic borrows the spec, env, abort flag, store, node map and
 * report writer for its life and owns the current communicator (elastic_rank_cleanup). */
#ifndef DDPB_WORKER_ELASTIC_H
#define DDPB_WORKER_ELASTIC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/report.h"
#include "common/spec.h"
#include "worker/comm/comm.h"
#include "worker/store/rendezvous.h"
#include "worker/store/store_client.h"

/* One generation's record (`elastic/g<N>`). */
struct elastic_record {
    int gen;
    int members[SPEC_MAX_WORLD]; /* ascending slots */
    int n;
    int joiners[SPEC_MAX_WORLD]; /* slots new in this generation (a subset of members) */
    int n_joiners;
    char reason[128];
};

/* Parses a generation record of a run of world_size slots into out. ERR_INVALID naming
 * the field: not an object, "gen" not an integer >= 1, "members" empty or not strictly
 * ascending slots in 0..world_size-1, a joiner that is not a member. */
int elastic_gen_parse(const char *text, size_t len, int world_size, struct elastic_record *out,
                      struct err *e);
/* The index among g's members of slot, or -1. */
int elastic_gen_index(const struct elastic_record *g, int slot);
/* The index of g's lowest member that is not a joiner (the one whose state everyone
 * takes), or -1 when every member is new. */
int elastic_gen_root(const struct elastic_record *g);

/* What every communicator of the run gets set (the worker's heartbeat note and its
 * on_stuck), so a new generation's is like the first. */
struct elastic_comm_hooks {
    struct wait_note *note;
    void (*on_stuck)(struct comm *c, const struct err *e, void *ctx);
    void *on_stuck_ctx;
};

struct elastic {
    const struct spec *s;             /* borrowed */
    const struct rendezvous_env *env; /* borrowed: the slot is env->rank */
    const atomic_bool *abort_flag;    /* borrowed */
    struct store_client *store;       /* borrowed */
    const int *node_of;               /* borrowed: the node of each slot */
    struct report_writer *w;          /* borrowed */
    struct elastic_comm_hooks hooks;
    struct comm *comm;         /* owned: the current generation's communicator */
    struct elastic_record cur; /* the current generation */
    bool joiner;               /* this rank is new in cur: it has no state of its own */
    bool left;                 /* not a member of the generation published: exit 0 */
    int64_t since_ns;          /* when the change began (detect or growth), clock_mono_ns */
    int peer;                  /* the slot blamed at the last detect, else -1 */
};

/* Generation 0 (every slot) over comm, which el takes. Everything else borrowed. */
void elastic_rank_init(struct elastic *el, const struct spec *s,
                       const struct rendezvous_env *env, const atomic_bool *abort_flag,
                       struct store_client *store, const int *node_of, struct report_writer *w,
                       const struct elastic_comm_hooks *hooks, struct comm *comm);
/* Frees the current communicator. */
void elastic_rank_cleanup(struct elastic *el);

/* Whether e is a failure a lost peer causes (see Decisions). */
bool elastic_recoverable(const struct err *e);

/* A replacement's entry (el initialised without a communicator, comm NULL): waits for
 * `elastic/join/<slot>`, then for that generation's record, and enters it as a joiner. */
int elastic_join(struct elastic *el, struct err *e);

/* Leaves the current generation for the next one: after a failure (failed: reports
 * "detect" blaming the comm's error_peer), or to grow (the next generation is known to
 * exist). Stops and destroys the communicator, waits for `elastic/g<N+1>` and builds its
 * communicator, going on to N+2 ... while forming one fails recoverably. Returns 0 with
 * el->comm the new generation's, or 0 with el->left set (not a member: the caller
 * reports nothing more and exits 0), or -1 with e set (no generation came within the
 * run's timeout, or an unrecoverable failure). */
int elastic_next(struct elastic *el, bool failed, struct err *e);

/* The generation's rank 0: whether `elastic/g<N+1>` exists now (no wait). Any other rank:
 * false. */
int elastic_next_exists(struct elastic *el, bool *exists, struct err *e);

/* Reports event ("regroup", "resumed", ...) of the current generation with its members
 * (-1: the figure is left out). */
int elastic_emit(struct elastic *el, const char *event, int64_t commit_step, int64_t lost_steps,
                 double regroup_ms, int peer, struct err *e);

#endif
