/* elastic: generations and their communicators (elastic.h).
 *
 * Decision: a generation is entered through one function (elastic_enter) whatever led
 * to it (a failure, growth, a replacement's start), and a failure while forming it is
 * handled like any other: on to the next generation, which the daemon publishes once it
 * sees the slot gone. */
#include "worker/elastic.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "worker/comm/comm_factory.h"

/* Reads an array of slots (ascending when `ascending`) into out. */
static int elastic_parse_slots(const json_t *a, const char *field, int world_size,
                               bool ascending, int *out, int *n, struct err *e)
{
    size_t i;
    const json_t *v;
    *n = 0;
    if (!json_is_array(a) || json_array_size(a) > (size_t)world_size)
        return err_set(e, ERR_INVALID, field, "%s: must be an array of at most %d slots", field,
                       world_size);
    json_array_foreach((json_t *)a, i, v)
    {
        json_int_t s = json_integer_value(v);
        if (!json_is_integer(v) || s < 0 || s >= world_size)
            return err_set(e, ERR_INVALID, field, "%s[%zu]: must be a slot 0..%d", field, i,
                           world_size - 1);
        if (ascending && i > 0 && s <= out[i - 1])
            return err_set(e, ERR_INVALID, field, "%s: slots not strictly ascending", field);
        out[(*n)++] = (int)s;
    }
    return 0;
}

int elastic_gen_parse(const char *text, size_t len, int world_size, struct elastic_record *out,
                      struct err *e)
{
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *o = json_loadb(text, len, 0, &je);
    int rc = 0;
    const json_t *gen = json_object_get(o, "gen");
    if (!json_is_object(o))
        rc = err_set(e, ERR_INVALID, "", "generation record: not a JSON object");
    else if (!json_is_integer(gen) || json_integer_value(gen) < 1 ||
             json_integer_value(gen) > 1000000)
        rc = err_set(e, ERR_INVALID, "gen", "gen: must be an integer >= 1");
    else if (elastic_parse_slots(json_object_get(o, "members"), "members", world_size, true,
                                 out->members, &out->n, e) < 0)
        rc = -1;
    else if (out->n == 0)
        rc = err_set(e, ERR_INVALID, "members", "members: a generation has at least one");
    else if (json_object_get(o, "joiners") &&
             elastic_parse_slots(json_object_get(o, "joiners"), "joiners", world_size, false,
                                 out->joiners, &out->n_joiners, e) < 0)
        rc = -1;
    for (int i = 0; rc == 0 && i < out->n_joiners; i++)
        if (elastic_gen_index(out, out->joiners[i]) < 0)
            rc = err_set(e, ERR_INVALID, "joiners", "joiners: slot %d is not a member",
                         out->joiners[i]);
    if (rc == 0) {
        out->gen = (int)json_integer_value(gen);
        const char *why = json_string_value(json_object_get(o, "reason"));
        snprintf(out->reason, sizeof out->reason, "%s", why ? why : "");
    }
    json_decref(o);
    return rc;
}

int elastic_gen_index(const struct elastic_record *g, int slot)
{
    for (int i = 0; i < g->n; i++)
        if (g->members[i] == slot)
            return i;
    return -1;
}

static bool elastic_is_joiner(const struct elastic_record *g, int slot)
{
    for (int i = 0; i < g->n_joiners; i++)
        if (g->joiners[i] == slot)
            return true;
    return false;
}

int elastic_gen_root(const struct elastic_record *g)
{
    for (int i = 0; i < g->n; i++)
        if (!elastic_is_joiner(g, g->members[i]))
            return i;
    return -1;
}

void elastic_rank_init(struct elastic *el, const struct spec *s,
                       const struct rendezvous_env *env, const atomic_bool *abort_flag,
                       struct store_client *store, const int *node_of, struct report_writer *w,
                       const struct elastic_comm_hooks *hooks, struct comm *comm)
{
    *el = (struct elastic){.s = s,
                           .env = env,
                           .abort_flag = abort_flag,
                           .store = store,
                           .node_of = node_of,
                           .w = w,
                           .hooks = *hooks,
                           .comm = comm,
                           .peer = -1};
    el->cur.n = env->world_size;
    for (int i = 0; i < env->world_size; i++)
        el->cur.members[i] = i;
}

void elastic_rank_cleanup(struct elastic *el)
{
    comm_destroy(el->comm);
    el->comm = NULL;
}

bool elastic_recoverable(const struct err *e)
{
    return e->code == ERR_PEER || e->code == ERR_TIMEOUT || e->code == ERR_IO ||
           e->code == ERR_PROTOCOL;
}

int elastic_emit(struct elastic *el, const char *event, int64_t commit_step, int64_t lost_steps,
                 double regroup_ms, int peer, struct err *e)
{
    struct report_elastic r = {.event = event,
                               .gen = el->cur.gen,
                               .world = el->cur.n,
                               .members = el->cur.members,
                               .n_members = el->cur.n,
                               .commit_step = commit_step,
                               .lost_steps = lost_steps,
                               .regroup_ms = regroup_ms,
                               .peer = peer};
    return report_emit_elastic(el->w, &r, e);
}

/* Waits up to the run's timeout for generation n's record. */
static int elastic_wait_gen(struct elastic *el, int n, struct elastic_record *g, struct err *e)
{
    char key[48], *v = NULL;
    size_t len = 0;
    snprintf(key, sizeof key, "elastic/g%d", n);
    if (store_client_get(el->store, key, el->env->timeout_ms, &v, &len, e) < 0)
        return err_prefix(e, "elastic: waiting for generation %d (%s)", n, key);
    int rc = elastic_gen_parse(v, len, el->env->world_size, g, e);
    free(v);
    if (rc == 0 && g->gen != n)
        rc = err_set(e, ERR_PROTOCOL, "gen", "%s says gen %d", key, g->gen);
    return rc < 0 ? err_prefix(e, "elastic: %s", key) : 0;
}

/* Builds g's communicator (this slot a member) and makes g current. */
static int elastic_enter(struct elastic *el, const struct elastic_record *g, struct err *e)
{
    char ns[32];
    snprintf(ns, sizeof ns, "eg%d/", g->gen);
    struct comm *c = comm_create_group(el->s, el->env, el->abort_flag, el->store, g->members,
                                       g->n, ns, el->node_of, e);
    if (!c)
        return err_prefix(e, "elastic: generation %d's communicator", g->gen);
    c->note = el->hooks.note;
    c->on_stuck = el->hooks.on_stuck;
    c->on_stuck_ctx = el->hooks.on_stuck_ctx;
    el->comm = c;
    el->cur = *g;
    log_info("elastic: generation %d, %d ranks (%s), this slot is rank %d", g->gen, g->n,
             g->reason[0] ? g->reason : "no reason given", c->rank);
    return 0;
}

/* Stops and frees the communicator: a failed one's thread and operations end at once. */
static void elastic_drop_comm(struct elastic *el)
{
    if (!el->comm)
        return;
    atomic_store(&el->comm->stop, true);
    comm_destroy(el->comm);
    el->comm = NULL;
}

/* Enters generation n, or a later one while forming fails recoverably. */
static int elastic_enter_from(struct elastic *el, int n, struct err *e)
{
    for (;; n++) {
        struct elastic_record g;
        if (elastic_wait_gen(el, n, &g, e) < 0)
            return -1;
        if (elastic_gen_index(&g, el->env->rank) < 0) {
            el->cur = g;
            el->left = true;
            log_info("elastic: slot %d is not in generation %d: leaving", el->env->rank, n);
            return elastic_emit(el, "left", -1, -1, -1, -1, e);
        }
        el->joiner = el->joiner || elastic_is_joiner(&g, el->env->rank);
        if (elastic_enter(el, &g, e) == 0)
            return 0;
        if (!elastic_recoverable(e))
            return -1;
        log_warn("elastic: %s; on to generation %d", e->msg, n + 1);
    }
}

int elastic_next(struct elastic *el, bool failed, struct err *e)
{
    el->since_ns = clock_mono_ns();
    el->peer = -1;
    if (failed && el->comm) {
        el->peer = el->comm->error_peer;
        int slot = el->peer >= 0 && el->peer < el->cur.n ? el->cur.members[el->peer] : -1;
        el->peer = slot;
        struct err ignored;
        elastic_emit(el, "detect", -1, -1, -1, slot, &ignored);
    }
    elastic_drop_comm(el);
    return elastic_enter_from(el, el->cur.gen + 1, e);
}

int elastic_join(struct elastic *el, struct err *e)
{
    char key[48], *v = NULL;
    size_t len = 0;
    el->since_ns = clock_mono_ns();
    snprintf(key, sizeof key, "elastic/join/%d", el->env->rank);
    if (store_client_get(el->store, key, el->env->timeout_ms, &v, &len, e) < 0)
        return err_prefix(e, "elastic: a replacement waiting for %s", key);
    char *end = NULL;
    long n = strtol(v, &end, 10);
    bool ok = end != v && n >= 1 && n <= 1000000;
    free(v);
    if (!ok)
        return err_set(e, ERR_PROTOCOL, key, "elastic: %s is not a generation", key);
    el->joiner = true;
    return elastic_enter_from(el, (int)n, e);
}

int elastic_next_exists(struct elastic *el, bool *exists, struct err *e)
{
    *exists = false;
    if (el->comm->rank != 0)
        return 0;
    char key[48];
    snprintf(key, sizeof key, "elastic/g%d", el->cur.gen + 1);
    const char *keys[1] = {key};
    int all = 0;
    if (store_client_check(el->store, keys, 1, &all, e) < 0)
        return err_prefix(e, "elastic: checking for %s", key);
    *exists = all != 0;
    return 0;
}
