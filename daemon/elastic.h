/* elastic: a run's elastic state as the daemon keeps it (the spec's "elastic", issue 32):
 * which of its W slots live, which are lost, which hold a replacement on its way in, the
 * generations published so far, and what to do when a slot is lost. The monitor
 * (daemon/monitor.c) asks it where a rank's death would otherwise fail the run; the
 * pytorch and horovod engines' drivers ask it the same question and get their own answer
 * (restart, or leave it to the driver).
 *
 * Decisions:
 * - The decisions are plain functions of the state (no store, no database, no process):
 *   elastic_slot_lost says what to do and fills the next generation; the caller acts on
 *   it (kills, spawns, records) and elastic_publish writes what workers wait for, so the
 *   rules are unit-tested without a run (tests/unit/test_elastic.c).
 * - A generation is published whole and in order: elastic/g<N> (JSON {gen, members,
 *   joiners, reason}) then elastic/gen = N; a joiner's elastic/join/<slot> = N is written
 *   before the generation that names it, so the replacement, which waits for its join key,
 *   never misses the generation it belongs to (the contract in docs/design.md).
 * - Growth waits for the current generation to have resumed: a replacement that said
 *   hello joins only once the survivors run again, so a join never lands in the middle
 *   of a regroup, and two losses in a row are two shrinks before any growth.
 * - The mode is the engine's (common/vocab.h enum vocab_elastic): in memory (ddpbench),
 *   restart (pytorch: every rank stopped, the group started again), driver (horovod: its
 *   driver recovers; the daemon only keeps the count). Fewer than min_ranks live fails
 *   the run in every mode, with a message naming both numbers.
 *
 * Ownership: struct elastic_run owns its slot array (elastic_init / elastic_free). */
#ifndef DDPB_ELASTIC_H
#define DDPB_ELASTIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/spec.h"
#include "common/vocab.h"

struct store_server;

/* What became of a slot. */
enum elastic_slot_state {
    ELASTIC_SLOT_LIVE,    /* a member of the current generation */
    ELASTIC_SLOT_LOST,    /* its process ended without done; no replacement (yet) */
    ELASTIC_SLOT_JOINING, /* a replacement was started into it; not a member yet */
    ELASTIC_SLOT_DONE,    /* it said done: it ended well */
};

/* What the caller does about a lost slot. */
enum elastic_action {
    ELASTIC_FAIL,    /* not elastic, or fewer than min_ranks left: the run fails (why) */
    ELASTIC_SHRINK,  /* in place: publish gen (the survivors); spawn a replacement when
                        replace is set */
    ELASTIC_RESTART, /* restart mode: stop every rank, start world ranks as gen */
    ELASTIC_DRIVER,  /* the engine's elastic driver recovers; nothing to do */
    ELASTIC_IGNORE,  /* the slot was lost already (a second report of the same death) */
};

/* One generation: its number, its members (ascending slots) and which of them are new. */
struct elastic_gen {
    int gen;
    int n_members, n_joiners;
    int members[SPEC_MAX_WORLD];
    int joiners[SPEC_MAX_WORLD];
    char reason[96];
};

struct elastic_decision {
    enum elastic_action action;
    bool replace;            /* SHRINK: start a replacement into the slot (live < max_ranks) */
    int world;               /* RESTART: the new world size; SHRINK: the survivors' count */
    struct elastic_gen next; /* SHRINK, RESTART: the generation to publish / start */
    char why[160];           /* FAIL: the run's error; else what happened, for logs */
};

struct elastic_run {
    bool on;
    enum vocab_elastic mode;
    int world_size, min_ranks, max_ranks, commit_every;
    bool can_replace; /* replacements can be started here (local ranks, ddpbench's launcher) */
    int gen;          /* the latest generation published (0: the launch's) */
    bool resumed;     /* the latest generation reported its first step */
    enum elastic_slot_state *slots; /* owned, world_size entries */
    bool *hello;                    /* owned: a JOINING slot's replacement said hello */
    int64_t lost, replaced;         /* slots lost, replacements started, in all */
};

/* From a run's spec and its engine's mode; on = false (and nothing allocated) when the
 * spec has no "elastic". can_replace: replacements may be started (every rank on this node,
 * ddpbench's own launcher). Returns 0, or -1 with e set (out of memory). */
int elastic_init(struct elastic_run *el, const struct spec *sp, enum vocab_elastic mode,
                 bool can_replace, struct err *e);
void elastic_free(struct elastic_run *el);

/* Slots that live now (members of the current generation, done or not). */
int elastic_live(const struct elastic_run *el);
/* Members still training (live, not done yet). */
int elastic_running(const struct elastic_run *el);
/* Slot `slot` ended without done (crashed, killed, blamed and killed). Marks it lost and
 * says what to do; for SHRINK and RESTART the generation in d->next is the state's
 * current one from here (published or started by the caller). reason: a few words for
 * the generation ("rank 1 lost"), copied. */
void elastic_slot_lost(struct elastic_run *el, int slot, const char *reason,
                       struct elastic_decision *d);
/* A slot said done: it ended well and counts as finished, not lost. */
void elastic_slot_done(struct elastic_run *el, int slot);
/* True when every slot that lives said done (lost slots without a replacement do not
 * count): the run succeeded. */
bool elastic_all_done(const struct elastic_run *el);
/* True when slot is lost for good (no replacement in it), so its end does not fail the
 * run once the run is over. */
bool elastic_slot_forgiven(const struct elastic_run *el, int slot);

/* A member of generation gen blamed slot `slot` for its failure: true when that slot's
 * process is to be killed (a member of the current generation still running: stopped or
 * hung). A detection of an older generation names a slot already handled, which may now
 * hold a replacement that was never in it. */
bool elastic_blame_kills(const struct elastic_run *el, int gen, int slot);
/* A replacement was started into lost slot `slot`: it is JOINING until it grows a
 * generation. */
void elastic_replacement_started(struct elastic_run *el, int slot);
/* Driver mode: the engine's driver started a process in lost slot `slot` again and it
 * proved itself (Horovod's replacement): the slot lives from here. */
void elastic_slot_rejoined(struct elastic_run *el, int slot);
/* The replacement in `slot` said hello. */
void elastic_joiner_hello(struct elastic_run *el, int slot);
/* The generation `gen` reported "resumed" (its first step completed). */
void elastic_gen_resumed(struct elastic_run *el, int gen);
/* When a grow generation is due (the current one resumed and at least one joiner said
 * hello): true with it in *g (members: the live slots and those joiners; joiners live
 * from here). False: nothing to publish now. */
bool elastic_grow(struct elastic_run *el, struct elastic_gen *g);

/* g as the JSON text of elastic/g<N> ({"gen":N,"members":[...],"joiners":[...],
 * "reason":"..."}), owned (free), or NULL (out of memory). */
char *elastic_gen_text(const struct elastic_gen *g);
/* Writes g into run's store namespace: elastic/join/<slot> = N for each joiner, then
 * elastic/g<N>, then elastic/gen = N. Returns 0 or -1 with e set. */
int elastic_publish(struct store_server *store, const char *run, const struct elastic_gen *g,
                    struct err *e);

#endif
