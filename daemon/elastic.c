/* elastic: see elastic.h. The state of a run's slots and the rules on it; the store
 * writes of a generation (elastic_publish) are the one place that touches the outside. */
#include "daemon/elastic.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/store_server.h"

int elastic_init(struct elastic_run *el, const struct spec *sp, enum vocab_elastic mode,
                 bool can_replace, struct err *e)
{
    memset(el, 0, sizeof *el);
    if (!sp->elastic.on)
        return 0;
    int w = sp->world_size;
    el->slots = calloc((size_t)w, sizeof *el->slots);
    el->hello = calloc((size_t)w, sizeof *el->hello);
    if (!el->slots || !el->hello) {
        elastic_free(el);
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    }
    el->on = true;
    el->mode = mode;
    el->world_size = w;
    el->min_ranks = sp->elastic.min_ranks;
    el->max_ranks = sp->elastic.max_ranks > 0 ? sp->elastic.max_ranks : w;
    el->commit_every = sp->elastic.commit_every;
    el->can_replace = can_replace;
    return 0;
}

void elastic_free(struct elastic_run *el)
{
    free(el->slots);
    free(el->hello);
    el->slots = NULL;
    el->hello = NULL;
    el->on = false;
}

int elastic_live(const struct elastic_run *el)
{
    int n = 0;
    for (int i = 0; el->on && i < el->world_size; i++)
        n += el->slots[i] == ELASTIC_SLOT_LIVE || el->slots[i] == ELASTIC_SLOT_DONE;
    return n;
}

int elastic_running(const struct elastic_run *el)
{
    int n = 0;
    for (int i = 0; el->on && i < el->world_size; i++)
        n += el->slots[i] == ELASTIC_SLOT_LIVE;
    return n;
}

/* The current members (live or done slots, ascending) into g, none of them joiners. */
static void elastic_members(const struct elastic_run *el, struct elastic_gen *g)
{
    g->n_members = g->n_joiners = 0;
    for (int i = 0; i < el->world_size; i++)
        if (el->slots[i] == ELASTIC_SLOT_LIVE || el->slots[i] == ELASTIC_SLOT_DONE)
            g->members[g->n_members++] = i;
}

/* Fewer than min_ranks left: the run fails, saying both numbers. */
static bool elastic_too_few(const struct elastic_run *el, int live, struct elastic_decision *d)
{
    if (live >= el->min_ranks)
        return false;
    d->action = ELASTIC_FAIL;
    snprintf(d->why, sizeof d->why, "elastic: %d rank%s left, min_ranks %d", live,
             live == 1 ? "" : "s", el->min_ranks);
    return true;
}

/* Restart mode: the group starts again as slots 0..n'-1, n' = max_ranks when a
 * replacement is allowed, else the survivors. */
static void elastic_restart(struct elastic_run *el, int live, const char *reason,
                            struct elastic_decision *d)
{
    int n = el->can_replace && live < el->max_ranks ? el->max_ranks : live;
    el->gen++;
    el->resumed = false;
    d->action = ELASTIC_RESTART;
    d->world = n;
    d->next.gen = el->gen;
    d->next.n_members = n;
    d->next.n_joiners = 0;
    for (int i = 0; i < el->world_size; i++) {
        el->slots[i] = i < n ? ELASTIC_SLOT_LIVE : ELASTIC_SLOT_LOST;
        el->hello[i] = false;
        if (i < n)
            d->next.members[i] = i;
    }
    snprintf(d->next.reason, sizeof d->next.reason, "%s", reason);
    snprintf(d->why, sizeof d->why, "%s: restarting as generation %d of %d rank(s)", reason,
             el->gen, n);
}

/* In place: the survivors form the next generation; a replacement is due while fewer
 * than max_ranks live. */
static void elastic_shrink(struct elastic_run *el, int live, const char *reason,
                           struct elastic_decision *d)
{
    el->gen++;
    el->resumed = false;
    d->action = ELASTIC_SHRINK;
    d->world = live;
    d->replace = el->can_replace && live < el->max_ranks;
    d->next.gen = el->gen;
    elastic_members(el, &d->next);
    snprintf(d->next.reason, sizeof d->next.reason, "%s", reason);
    snprintf(d->why, sizeof d->why, "%s: generation %d of %d rank(s)%s", reason, el->gen, live,
             d->replace ? ", a replacement starts" : "");
}

void elastic_slot_lost(struct elastic_run *el, int slot, const char *reason,
                       struct elastic_decision *d)
{
    memset(d, 0, sizeof *d);
    if (!el->on || slot < 0 || slot >= el->world_size) {
        d->action = ELASTIC_FAIL;
        snprintf(d->why, sizeof d->why, "the run is not elastic");
        return;
    }
    if (el->slots[slot] == ELASTIC_SLOT_LOST) {
        d->action = ELASTIC_IGNORE;
        return;
    }
    bool was_member = el->slots[slot] == ELASTIC_SLOT_LIVE;
    el->slots[slot] = ELASTIC_SLOT_LOST;
    el->hello[slot] = false;
    el->lost++;
    int live = elastic_live(el);
    if (elastic_too_few(el, live, d))
        return;
    if (el->mode == VOCAB_ELASTIC_NONE) {
        d->action = ELASTIC_FAIL;
        snprintf(d->why, sizeof d->why, "the engine is not elastic");
    } else if (el->mode == VOCAB_ELASTIC_RESTART) {
        elastic_restart(el, live, reason, d);
    } else if (el->mode == VOCAB_ELASTIC_DRIVER) {
        d->action = ELASTIC_DRIVER;
        d->world = live;
        snprintf(d->why, sizeof d->why, "%s: left to the engine's elastic driver", reason);
    } else if (!was_member) {
        /* a replacement that died before it joined: nothing to regroup, try again */
        d->action = ELASTIC_SHRINK;
        d->world = live;
        d->replace = false;
        d->next.gen = -1; /* nothing to publish */
        snprintf(d->why, sizeof d->why, "%s before it joined", reason);
    } else {
        elastic_shrink(el, live, reason, d);
    }
}

void elastic_slot_done(struct elastic_run *el, int slot)
{
    if (el->on && slot >= 0 && slot < el->world_size && el->slots[slot] == ELASTIC_SLOT_LIVE)
        el->slots[slot] = ELASTIC_SLOT_DONE;
}

bool elastic_all_done(const struct elastic_run *el)
{
    if (!el->on)
        return false;
    int done = 0;
    for (int i = 0; i < el->world_size; i++) {
        if (el->slots[i] == ELASTIC_SLOT_LIVE || el->slots[i] == ELASTIC_SLOT_JOINING)
            return false;
        done += el->slots[i] == ELASTIC_SLOT_DONE;
    }
    return done > 0;
}

bool elastic_slot_forgiven(const struct elastic_run *el, int slot)
{
    return el->on && slot >= 0 && slot < el->world_size && el->slots[slot] == ELASTIC_SLOT_LOST;
}

bool elastic_blame_kills(const struct elastic_run *el, int gen, int slot)
{
    return el->on && gen == el->gen && slot >= 0 && slot < el->world_size &&
           el->slots[slot] == ELASTIC_SLOT_LIVE;
}

void elastic_replacement_started(struct elastic_run *el, int slot)
{
    if (el->on && slot >= 0 && slot < el->world_size && el->slots[slot] == ELASTIC_SLOT_LOST) {
        el->slots[slot] = ELASTIC_SLOT_JOINING;
        el->hello[slot] = false;
        el->replaced++;
    }
}

void elastic_slot_rejoined(struct elastic_run *el, int slot)
{
    if (el->on && el->mode == VOCAB_ELASTIC_DRIVER && slot >= 0 && slot < el->world_size &&
        el->slots[slot] == ELASTIC_SLOT_LOST)
        el->slots[slot] = ELASTIC_SLOT_LIVE;
}

void elastic_joiner_hello(struct elastic_run *el, int slot)
{
    if (el->on && slot >= 0 && slot < el->world_size && el->slots[slot] == ELASTIC_SLOT_JOINING)
        el->hello[slot] = true;
}

void elastic_gen_resumed(struct elastic_run *el, int gen)
{
    if (el->on && gen == el->gen)
        el->resumed = true;
}

bool elastic_grow(struct elastic_run *el, struct elastic_gen *g)
{
    if (!el->on || el->mode != VOCAB_ELASTIC_IN_MEMORY || !el->resumed)
        return false;
    int ready = 0;
    for (int i = 0; i < el->world_size; i++)
        ready += el->slots[i] == ELASTIC_SLOT_JOINING && el->hello[i];
    if (ready == 0)
        return false;
    memset(g, 0, sizeof *g);
    for (int i = 0; i < el->world_size; i++) {
        bool joins = el->slots[i] == ELASTIC_SLOT_JOINING && el->hello[i];
        if (joins) {
            el->slots[i] = ELASTIC_SLOT_LIVE;
            g->joiners[g->n_joiners++] = i;
        }
        if (el->slots[i] == ELASTIC_SLOT_LIVE || el->slots[i] == ELASTIC_SLOT_DONE)
            g->members[g->n_members++] = i;
    }
    el->gen++;
    el->resumed = false;
    g->gen = el->gen;
    snprintf(g->reason, sizeof g->reason, "%d replacement%s joined", g->n_joiners,
             g->n_joiners == 1 ? "" : "s");
    return true;
}

/* An array of n slots, owned, or NULL. */
static json_t *elastic_slots_json(const int *slots, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer(slots[i])) < 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

char *elastic_gen_text(const struct elastic_gen *g)
{
    json_t *j = json_pack("{s:i, s:o, s:o, s:s}", "gen", g->gen, "members",
                          elastic_slots_json(g->members, g->n_members), "joiners",
                          elastic_slots_json(g->joiners, g->n_joiners), "reason", g->reason);
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return text;
}

int elastic_publish(struct store_server *store, const char *run, const struct elastic_gen *g,
                    struct err *e)
{
    char key[64], num[24];
    snprintf(num, sizeof num, "%d", g->gen);
    for (int i = 0; i < g->n_joiners; i++) {
        snprintf(key, sizeof key, "elastic/join/%d", g->joiners[i]);
        if (store_server_set(store, run, key, num, strlen(num), e) < 0)
            return -1;
    }
    char *text = elastic_gen_text(g);
    if (!text)
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    snprintf(key, sizeof key, "elastic/g%d", g->gen);
    int rc = store_server_set(store, run, key, text, strlen(text), e);
    free(text);
    if (rc == 0)
        rc = store_server_set(store, run, "elastic/gen", num, strlen(num), e);
    return rc;
}
