/* cluster: see cluster.h. The registry, the join/sync/leave bodies' validation, the
 * per-node command queues and wanted runs, and the lost-node clock. */
#include "daemon/cluster.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/report.h"
#include "common/spec.h"
#include "daemon/credential.h"
#include "daemon/engines.h"
#include "ddpb_config.h"

/* a node that left this long ago is forgotten when the leader starts (its row removed) */
#define CLUSTER_LEFT_KEEP_S (7 * 86400.0)

enum cluster_state { CLUSTER_UP, CLUSTER_DRAINING, CLUSTER_LOST, CLUSTER_LEFT };
static const char *const cluster_state_names[] = {"up", "draining", "lost", "left"};

struct cluster_node {
    char name[64], address[128], profile[64];
    char session[65]; /* "" while it has none (lost, left, never joined this leader) */
    char ident[CREDENTIAL_IDENTITY]; /* with --cluster-key: the identity it joined with */
    int port, cpu_slots, gpus, slots_used;
    enum cluster_state state;
    json_t *engines;  /* owned object */
    json_t *probe;    /* owned array: the follower's engine probe (sync "engines"), NULL
                         until it sent one this session */
    json_t *commands; /* owned array: queued for the next sync */
    int64_t *runs;    /* owned: the runs it must keep alive */
    size_t nruns, cap_runs;
    double joined_at, heartbeat_at; /* Unix seconds */
    int64_t last_sync_ms;           /* monotonic */
    bool lost_pending;              /* its ranks are gone: the loop has not heard yet */
    char lost_why[160];
};

struct cluster {
    pthread_mutex_t lock;
    const struct config *cfg; /* borrowed */
    struct db *db;            /* borrowed */
    struct cluster_node nodes[CLUSTER_MAX_NODES];
    int n;          /* node 0 is the leader */
    json_t *events; /* owned array, taken by the loop */
    void (*wake)(void *);
    void *wake_ctx;
};

/* --- the nodes table ------------------------------------------------------------------ */

/* A write to the nodes table, taken under the registry's mutex and done after it is
 * released (issue 31 defect 12): SQLite may wait seconds for its write lock, and every
 * sync, list and placement waits on the mutex. */
enum cluster_write { CLUSTER_WRITE_STATE, CLUSTER_WRITE_UPSERT, CLUSTER_WRITE_DELETE };

struct cluster_note {
    enum cluster_write what;
    bool leader;
    char name[64], address[128], profile[64];
    int cpu_slots, gpus;
    enum cluster_state state;
    double joined_at, heartbeat_at;
    char *engines; /* owned: UPSERT's engines as JSON text */
};

/* Under the mutex: what to write of nd, into *out. */
static void cluster_note_take(const struct cluster_node *nd, enum cluster_write what,
                              bool leader, struct cluster_note *out)
{
    *out = (struct cluster_note){.what = what,
                                 .leader = leader,
                                 .cpu_slots = nd->cpu_slots,
                                 .gpus = nd->gpus,
                                 .state = nd->state,
                                 .joined_at = nd->joined_at,
                                 .heartbeat_at = nd->heartbeat_at};
    memcpy(out->name, nd->name, sizeof out->name);
    memcpy(out->address, nd->address, sizeof out->address);
    memcpy(out->profile, nd->profile, sizeof out->profile);
    if (what == CLUSTER_WRITE_UPSERT)
        out->engines = json_dumps(nd->engines, JSON_COMPACT);
}

/* Without the mutex: the n notes written (failures logged), their text freed. */
static void cluster_note_write(struct cluster *c, struct cluster_note *notes, int n)
{
    for (int i = 0; i < n; i++) {
        struct cluster_note *w = &notes[i];
        struct err e = {0};
        int rc = 0;
        if (w->what == CLUSTER_WRITE_STATE) {
            rc = db_node_set_state(c->db, w->name, cluster_state_names[w->state],
                                   w->heartbeat_at, &e);
        } else if (w->what == CLUSTER_WRITE_DELETE) {
            rc = db_node_delete(c->db, w->name, &e);
        } else {
            struct db_node row = {w->name,
                                  w->address,
                                  w->leader ? "leader" : "follower",
                                  w->cpu_slots,
                                  w->gpus,
                                  w->engines ? w->engines : "{}",
                                  w->profile[0] ? w->profile : NULL,
                                  cluster_state_names[w->state],
                                  w->joined_at};
            rc = db_node_upsert(c->db, &row, &e);
        }
        if (rc < 0)
            log_warn("cluster: cannot record node %s: %s", w->name, e.msg);
        free(w->engines);
        w->engines = NULL;
    }
}

/* One note of nd, written now: for the start, before any other thread holds c. */
static void cluster_write_now(struct cluster *c, const struct cluster_node *nd,
                              enum cluster_write what, bool leader)
{
    struct cluster_note w;
    cluster_note_take(nd, what, leader, &w);
    cluster_note_write(c, &w, 1);
}

/* --- small helpers ----------------------------------------------------------------------- */

static int cluster_make_session(char out[65], struct err *e)
{
    unsigned char raw[32];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
        return err_errno(e, "getrandom");
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
    return 0;
}

static struct cluster_node *cluster_find(struct cluster *c, const char *name)
{
    for (int i = 0; i < c->n; i++)
        if (c->nodes[i].name[0] && strcmp(c->nodes[i].name, name) == 0)
            return &c->nodes[i];
    return NULL;
}

/* A slot in use (a removed node's is free: its name is ""). */
static bool cluster_used(const struct cluster_node *nd)
{
    return nd->name[0] != '\0';
}

/* Synced within the lost window: the node is running now, as far as the leader knows. */
static bool cluster_live(const struct cluster *c, const struct cluster_node *nd, int64_t now_ms)
{
    return (nd->state == CLUSTER_UP || nd->state == CLUSTER_DRAINING) && nd->session[0] &&
           now_ms - nd->last_sync_ms <= c->cfg->node_timeout_ms;
}

/* Frees what a slot owns and marks it free (a removed or reclaimed node). */
static void cluster_free_slot(struct cluster_node *nd)
{
    json_decref(nd->engines);
    json_decref(nd->probe);
    json_decref(nd->commands);
    free(nd->runs);
    memset(nd, 0, sizeof *nd);
    nd->state = CLUSTER_LEFT;
}

static void cluster_wake(struct cluster *c)
{
    if (c->wake)
        c->wake(c->wake_ctx);
}

/* The node's runs are gone (timed out, joined again, left holding runs): the loop fails
 * them; it learns through cluster_take_lost. */
static void cluster_mark_gone(struct cluster_node *nd, const char *why)
{
    if (nd->nruns > 0 && !nd->lost_pending) {
        nd->lost_pending = true;
        snprintf(nd->lost_why, sizeof nd->lost_why, "%s", why);
    }
    nd->nruns = 0;
    json_array_clear(nd->commands);
}

/* --- body validation ------------------------------------------------------------------- */

/* Every key of o must be one of names (NULL-terminated). */
static int cluster_known_keys(const json_t *o, const char *const *names, const char *what,
                              struct err *e)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v)
    {
        bool known = false;
        for (size_t i = 0; names[i] && !known; i++)
            known = strcmp(names[i], k) == 0;
        if (!known)
            return err_set(e, ERR_INVALID, k, "%s: unknown field '%s'", what, k);
    }
    return 0;
}

static int cluster_get_int(const json_t *o, const char *key, json_int_t lo, json_int_t hi,
                           json_int_t *out, struct err *e)
{
    const json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return err_set(e, ERR_INVALID, key,
                       "%s must be an integer from %" JSON_INTEGER_FORMAT
                       " to %" JSON_INTEGER_FORMAT,
                       key, lo, hi);
    *out = json_integer_value(v);
    return 0;
}

/* A name or address: 1 to cap-1 characters of [A-Za-z0-9._:-]. */
static int cluster_get_name(const json_t *o, const char *key, char *out, size_t cap,
                            bool required, struct err *e)
{
    const json_t *v = json_object_get(o, key);
    if (!v && !required) {
        out[0] = '\0';
        return 0;
    }
    const char *s = json_string_value(v);
    size_t n = s ? strlen(s) : 0;
    bool ok = s && n > 0 && n < cap;
    for (size_t i = 0; ok && i < n; i++)
        ok = isalnum((unsigned char)s[i]) || strchr("._:-", s[i]);
    if (!ok)
        return err_set(e, ERR_INVALID, key,
                       "%s must be a string of 1 to %zu letters, digits, '.', '_', ':' or '-'",
                       key, cap - 1);
    memcpy(out, s, n + 1);
    return 0;
}

static const char *const cluster_join_keys[] = {
    "name", "address", "port", "cpu_slots", "gpus", "engines", "network_profile", NULL};

static int cluster_parse_offer(const json_t *b, struct cluster_node *nd, struct err *e)
{
    json_int_t port = 0, slots = 0, gpus = 0;
    if (!json_is_object(b))
        return err_set(e, ERR_INVALID, NULL, "the join body must be a JSON object");
    if (cluster_known_keys(b, cluster_join_keys, "join", e) < 0 ||
        cluster_get_name(b, "name", nd->name, sizeof nd->name, true, e) < 0 ||
        cluster_get_name(b, "address", nd->address, sizeof nd->address, true, e) < 0 ||
        cluster_get_int(b, "port", 0, 65535, &port, e) < 0 ||
        cluster_get_int(b, "cpu_slots", 1, 4096, &slots, e) < 0 ||
        cluster_get_int(b, "gpus", 0, 64, &gpus, e) < 0)
        return -1;
    const json_t *eng = json_object_get(b, "engines");
    if (eng && !json_is_object(eng))
        return err_set(e, ERR_INVALID, "engines", "engines must be an object");
    const json_t *prof = json_object_get(b, "network_profile");
    if (prof && !json_is_null(prof) &&
        cluster_get_name(b, "network_profile", nd->profile, sizeof nd->profile, true, e) < 0)
        return -1;
    nd->port = (int)port;
    nd->cpu_slots = (int)slots;
    nd->gpus = (int)gpus;
    nd->engines = eng ? json_deep_copy(eng) : json_object();
    return 0;
}

/* One event of a sync: {"run", "rank", and exactly one of spawned, line, exit}. */
static int cluster_check_event(const json_t *ev, size_t i, struct err *e)
{
    static const char *const keys[] = {"run", "rank", "spawned", "line", "exit", NULL};
    json_int_t run = 0, rank = 0;
    if (!json_is_object(ev))
        return err_set(e, ERR_INVALID, "events", "events[%zu] must be an object", i);
    if (cluster_known_keys(ev, keys, "event", e) < 0 ||
        cluster_get_int(ev, "run", 1, INT64_MAX, &run, e) < 0 ||
        cluster_get_int(ev, "rank", 0, SPEC_MAX_WORLD - 1, &rank, e) < 0)
        return err_prefix(e, "events[%zu]", i);
    const json_t *sp = json_object_get(ev, "spawned"), *ln = json_object_get(ev, "line"),
                 *ex = json_object_get(ev, "exit");
    if ((sp != NULL) + (ln != NULL) + (ex != NULL) != 1)
        return err_set(e, ERR_INVALID, "events",
                       "events[%zu] must carry exactly one of spawned, line, exit", i);
    json_int_t v = 0;
    if (sp && (!json_is_object(sp) || cluster_get_int(sp, "pid", 1, INT32_MAX, &v, e) < 0))
        return err_set(e, ERR_INVALID, "events", "events[%zu].spawned needs a pid", i);
    if (ln && (!json_is_string(ln) || json_string_length(ln) > REPORT_MAX_LINE))
        return err_set(e, ERR_INVALID, "events",
                       "events[%zu].line must be a string of at most %u bytes", i,
                       REPORT_MAX_LINE);
    if (ex) {
        const json_t *code = json_object_get(ex, "code"), *sig = json_object_get(ex, "signal"),
                     *why = json_object_get(ex, "error");
        if (!json_is_object(ex) || (code && !json_is_integer(code) && !json_is_null(code)) ||
            (sig && !json_is_integer(sig) && !json_is_null(sig)) ||
            (why && (!json_is_string(why) || json_string_length(why) >= 200)))
            return err_set(e, ERR_INVALID, "events",
                           "events[%zu].exit must be {\"code\": int|null, \"signal\": "
                           "int|null, \"error\"?: string of under 200 bytes}",
                           i);
    }
    return 0;
}

/* The node a sync or leave names, if its session is current (else ERR_CONFLICT) and,
 * with --cluster-key, cred is its identity (else ERR_UNAUTHORIZED). */
static struct cluster_node *cluster_session_node(struct cluster *c, const json_t *b,
                                                 const char *cred, struct err *e)
{
    json_int_t id = 0;
    if (cluster_get_int(b, "node_id", 1, CLUSTER_MAX_NODES - 1, &id, e) < 0)
        return NULL;
    const char *session = json_string_value(json_object_get(b, "session"));
    if (!session)
        return err_set(e, ERR_INVALID, "session", "session must be a string"), NULL;
    struct cluster_node *nd = id < c->n ? &c->nodes[id] : NULL;
    if (!nd || !nd->session[0] || !credential_equal(session, nd->session)) {
        err_set(e, ERR_CONFLICT, "session",
                "rejoin: session of node %lld is not current (the leader restarted, the "
                "node joined again or was taken as lost)",
                (long long)id);
        return NULL;
    }
    if (c->cfg->cluster_key[0] && !credential_equal(cred ? cred : "", nd->ident)) {
        err_set(e, ERR_UNAUTHORIZED, NULL,
                "node %s: the credential is not this node's identity (HMAC-SHA256 of its "
                "name under --cluster-key)",
                nd->name);
        return NULL;
    }
    return nd;
}

/* --- life ----------------------------------------------------------------------------- */

static void cluster_load_stored(struct cluster *c)
{
    struct err e = {0};
    if (db_nodes_forget_left(c->db, clock_wall_s() - CLUSTER_LEFT_KEEP_S, &e) < 0)
        log_warn("cluster: cannot forget long-gone nodes: %s", e.msg);
    json_t *rows = db_list_nodes(c->db, &e);
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
    {
        const char *name = json_string_value(json_object_get(row, "name"));
        if (!name || strcmp(name, c->cfg->node) == 0 || c->n >= CLUSTER_MAX_NODES)
            continue;
        struct cluster_node *nd = &c->nodes[c->n++];
        snprintf(nd->name, sizeof nd->name, "%s", name);
        snprintf(nd->address, sizeof nd->address, "%s",
                 json_string_value(json_object_get(row, "address")));
        const char *prof = json_string_value(json_object_get(row, "network_profile"));
        snprintf(nd->profile, sizeof nd->profile, "%s", prof ? prof : "");
        nd->cpu_slots = (int)json_integer_value(json_object_get(row, "cpu_slots"));
        nd->gpus = (int)json_integer_value(json_object_get(row, "gpus"));
        json_t *eng = json_object_get(row, "engines");
        nd->engines = json_is_object(eng) ? json_incref(eng) : json_object();
        nd->commands = json_array();
        const char *state = json_string_value(json_object_get(row, "state"));
        nd->state = state && strcmp(state, "left") == 0 ? CLUSTER_LEFT : CLUSTER_LOST;
        if (nd->state == CLUSTER_LOST)
            cluster_write_now(c, nd, CLUSTER_WRITE_STATE, false);
    }
    json_decref(rows);
}

struct cluster *cluster_create(const struct config *cfg, struct db *db, struct err *e)
{
    struct cluster *c = calloc(1, sizeof *c);
    if (!c) {
        err_set(e, ERR_NOMEM, NULL, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&c->lock, NULL);
    c->cfg = cfg;
    c->db = db;
    c->events = json_array();
    struct cluster_node *me = &c->nodes[c->n++];
    snprintf(me->name, sizeof me->name, "%s", cfg->node);
    snprintf(me->address, sizeof me->address, "%s", cfg->store_host);
    snprintf(me->profile, sizeof me->profile, "%s", cfg->network_profile);
    me->port = cfg->port;
    me->cpu_slots = cfg->cpu_slots;
    me->gpus = cfg->gpus;
    me->engines = json_pack("{s:s}", "ddpbench", DDPB_VERSION);
    me->commands = json_array();
    me->state = CLUSTER_UP;
    me->joined_at = me->heartbeat_at = clock_wall_s();
    cluster_write_now(c, me, CLUSTER_WRITE_UPSERT, true);
    cluster_load_stored(c);
    return c;
}

void cluster_set_wake(struct cluster *c, void (*wake)(void *), void *ctx)
{
    pthread_mutex_lock(&c->lock);
    c->wake = wake;
    c->wake_ctx = ctx;
    pthread_mutex_unlock(&c->lock);
}

void cluster_destroy(struct cluster *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++)
        cluster_free_slot(&c->nodes[i]);
    json_decref(c->events);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* --- HTTP threads -------------------------------------------------------------------- */

/* A slot for a new node: a free one, a new one, else (the registry full) the longest
 * gone node whose runs are all failed, left ones before lost ones, its row removed by the
 * note in *drop (*dropped set). NULL when every slot holds a node in use. */
static struct cluster_node *cluster_new_slot(struct cluster *c, struct cluster_note *drop,
                                             bool *dropped)
{
    struct cluster_node *best = NULL;
    for (int i = 1; i < c->n; i++)
        if (!cluster_used(&c->nodes[i]))
            return &c->nodes[i];
    if (c->n < CLUSTER_MAX_NODES)
        return &c->nodes[c->n++];
    for (int i = 1; i < c->n; i++) {
        struct cluster_node *nd = &c->nodes[i];
        bool gone = (nd->state == CLUSTER_LEFT || nd->state == CLUSTER_LOST) &&
                    !nd->session[0] && !nd->lost_pending && nd->nruns == 0 &&
                    nd->slots_used == 0;
        if (gone && (!best || (nd->state == CLUSTER_LEFT) > (best->state == CLUSTER_LEFT) ||
                     ((nd->state == CLUSTER_LEFT) == (best->state == CLUSTER_LEFT) &&
                      nd->heartbeat_at < best->heartbeat_at)))
            best = nd;
    }
    if (best) {
        log_info("cluster: the registry is full: node %s (%s) makes room", best->name,
                 cluster_state_names[best->state]);
        cluster_note_take(best, CLUSTER_WRITE_DELETE, false, drop);
        *dropped = true;
        cluster_free_slot(best);
    }
    return best;
}

/* The join's credential against the node's identity under --cluster-key (ident into
 * want); without a key the guard took the admin token and nothing here tells nodes apart.
 * A name that synced within the lost window is not taken over by a join that does not
 * prove it: 409 naming the node, which keeps its session. */
static int cluster_check_joiner(struct cluster *c, const struct cluster_node *offer,
                                const struct cluster_node *nd, const char *cred,
                                char want[CREDENTIAL_IDENTITY], struct err *e)
{
    want[0] = '\0';
    bool proven = false;
    if (c->cfg->cluster_key[0]) {
        if (credential_node_identity(c->cfg->cluster_key, offer->name, want, e) < 0)
            return -1;
        proven = cred && credential_equal(cred, want);
    }
    int64_t now = clock_mono_ms();
    if (!proven && nd && cluster_live(c, nd, now))
        return err_set(e, ERR_CONFLICT, "name",
                       "node %s is live (it synced %.1f s ago): a join under its name must "
                       "prove its identity (--cluster-key), or wait until it is lost",
                       nd->name, (double)(now - nd->last_sync_ms) / 1000.0);
    if (!proven && c->cfg->cluster_key[0])
        return err_set(e, ERR_UNAUTHORIZED, NULL,
                       "join as %s refused: its credential is not HMAC-SHA256(cluster key, "
                       "node name): start the follower with the leader's --cluster-key",
                       offer->name);
    return 0;
}

static int cluster_join_locked(struct cluster *c, struct cluster_node *offer, const char *cred,
                               json_t **reply, struct cluster_note *notes, int *nnotes,
                               struct err *e)
{
    char ident[CREDENTIAL_IDENTITY];
    if (strcmp(offer->name, c->cfg->node) == 0)
        return err_set(e, ERR_CONFLICT, "name",
                       "node name '%s' is the leader's own: give the follower another "
                       "(--node NAME)",
                       offer->name);
    struct cluster_node *nd = cluster_find(c, offer->name);
    if (cluster_check_joiner(c, offer, nd, cred, ident, e) < 0)
        return -1;
    if (!nd) {
        bool dropped = false;
        if (!(nd = cluster_new_slot(c, &notes[0], &dropped)))
            return err_set(e, ERR_CONFLICT, NULL,
                           "the cluster is full (%d nodes, none gone): remove a lost or left "
                           "one (DELETE /v1/nodes/NAME)",
                           CLUSTER_MAX_NODES);
        *nnotes += dropped;
        nd->commands = json_array();
    } else {
        char why[160];
        snprintf(why, sizeof why, "node %s joined again (it restarted): its ranks are gone",
                 nd->name);
        cluster_mark_gone(nd, why);
    }
    if (cluster_make_session(nd->session, e) < 0)
        return -1;
    memcpy(nd->ident, ident, sizeof nd->ident);
    json_decref(nd->engines);
    json_decref(nd->probe); /* a new session probes again */
    nd->probe = NULL;
    memcpy(nd->name, offer->name, sizeof nd->name);
    memcpy(nd->address, offer->address, sizeof nd->address);
    memcpy(nd->profile, offer->profile, sizeof nd->profile);
    nd->engines = offer->engines;
    offer->engines = NULL;
    nd->port = offer->port;
    nd->cpu_slots = offer->cpu_slots;
    nd->gpus = offer->gpus;
    nd->state = CLUSTER_UP;
    nd->joined_at = nd->heartbeat_at = clock_wall_s();
    nd->last_sync_ms = clock_mono_ms();
    cluster_note_take(nd, CLUSTER_WRITE_UPSERT, false, &notes[(*nnotes)++]);
    *reply = json_pack("{s:i, s:s, s:s, s:i, s:i, s:[]}", "node_id", (int)(nd - c->nodes),
                       "session", nd->session, "leader", c->cfg->node, "sync_ms",
                       c->cfg->sync_ms, "timeout_ms", c->cfg->node_timeout_ms, "runs");
    log_info("cluster: node %s joined from %s (%d CPU slots, %d GPUs)", nd->name, nd->address,
             nd->cpu_slots, nd->gpus);
    return *reply ? 0 : err_set(e, ERR_NOMEM, NULL, "out of memory");
}

int cluster_join(struct cluster *c, const json_t *body, const char *cred, json_t **reply,
                 struct err *e)
{
    struct cluster_node offer = {0};
    struct cluster_note notes[2];
    int nnotes = 0;
    *reply = NULL;
    if (cluster_parse_offer(body, &offer, e) < 0) {
        json_decref(offer.engines);
        return -1;
    }
    pthread_mutex_lock(&c->lock);
    int rc = cluster_join_locked(c, &offer, cred, reply, notes, &nnotes, e);
    bool lost = rc == 0 && cluster_find(c, offer.name)->lost_pending;
    pthread_mutex_unlock(&c->lock);
    cluster_note_write(c, notes, nnotes);
    json_decref(offer.engines);
    if (lost)
        cluster_wake(c);
    return rc;
}

static json_t *cluster_runs_json(const struct cluster_node *nd)
{
    json_t *a = json_array();
    for (size_t i = 0; i < nd->nruns; i++)
        json_array_append_new(a, json_integer(nd->runs[i]));
    return a;
}

static int cluster_sync_locked(struct cluster *c, const json_t *b, const char *cred,
                               const json_t *events, json_t **reply, struct cluster_note *note,
                               bool *noted, struct err *e)
{
    struct cluster_node *nd = cluster_session_node(c, b, cred, e);
    if (!nd)
        return -1;
    const char *state = json_string_value(json_object_get(b, "state"));
    enum cluster_state st = state && strcmp(state, "draining") == 0 ? CLUSTER_DRAINING
                                                                    : CLUSTER_UP;
    nd->last_sync_ms = clock_mono_ms();
    nd->heartbeat_at = clock_wall_s();
    if (st != nd->state) {
        nd->state = st;
        log_info("cluster: node %s is %s", nd->name, cluster_state_names[st]);
        cluster_note_take(nd, CLUSTER_WRITE_STATE, false, note);
        *noted = true;
    }
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev)
    {
        json_t *copy = json_copy(ev);
        json_object_set_new(copy, "node", json_integer(nd - c->nodes));
        json_array_append_new(c->events, copy);
    }
    const json_t *probe = json_object_get(b, "engines");
    if (probe) {
        json_decref(nd->probe);
        nd->probe = json_deep_copy(probe);
    }
    *reply = json_pack("{s:o, s:o}", "commands", nd->commands, "runs", cluster_runs_json(nd));
    nd->commands = json_array();
    return *reply ? 0 : err_set(e, ERR_NOMEM, NULL, "out of memory");
}

/* A follower's engine probe (engines/probe.py's list, daemon/engines.h): an array of at
 * most CLUSTER_MAX_ENGINES objects, each with a name and the installed and launched flags
 * the submit check reads. */
static int cluster_check_probe(const json_t *probe, struct err *e)
{
    if (!json_is_array(probe) || json_array_size(probe) > CLUSTER_MAX_ENGINES)
        return err_set(e, ERR_INVALID, "engines", "engines must be an array of at most %d",
                       CLUSTER_MAX_ENGINES);
    size_t i;
    json_t *row;
    json_array_foreach(probe, i, row)
    {
        const char *name = json_string_value(json_object_get(row, "name"));
        if (!name || strlen(name) >= 32 ||
            !json_is_boolean(json_object_get(row, "installed")) ||
            !json_is_boolean(json_object_get(row, "launched")))
            return err_set(e, ERR_INVALID, "engines",
                           "engines[%zu] needs a name, installed and launched", i);
    }
    return 0;
}

int cluster_sync(struct cluster *c, const json_t *b, const char *cred, json_t **reply,
                 struct err *e)
{
    static const char *const keys[] = {"node_id", "session", "state",
                                       "events",  "engines", NULL};
    *reply = NULL;
    if (!json_is_object(b))
        return err_set(e, ERR_INVALID, NULL, "the sync body must be a JSON object");
    if (cluster_known_keys(b, keys, "sync", e) < 0)
        return -1;
    const json_t *state = json_object_get(b, "state");
    const char *s = json_string_value(state);
    if (state && (!s || (strcmp(s, "up") != 0 && strcmp(s, "draining") != 0)))
        return err_set(e, ERR_INVALID, "state", "state must be \"up\" or \"draining\"");
    const json_t *probe = json_object_get(b, "engines");
    if (probe && cluster_check_probe(probe, e) < 0)
        return -1;
    const json_t *events = json_object_get(b, "events");
    if (events && (!json_is_array(events) || json_array_size(events) > CLUSTER_MAX_EVENTS))
        return err_set(e, ERR_INVALID, "events", "events must be an array of at most %d",
                       CLUSTER_MAX_EVENTS);
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev)
    {
        if (cluster_check_event(ev, i, e) < 0)
            return -1;
    }
    struct cluster_note note;
    bool noted = false;
    pthread_mutex_lock(&c->lock);
    int rc = cluster_sync_locked(c, b, cred, events, reply, &note, &noted, e);
    pthread_mutex_unlock(&c->lock);
    cluster_note_write(c, &note, noted);
    if (rc == 0 && json_array_size(events) > 0)
        cluster_wake(c);
    return rc;
}

int cluster_leave(struct cluster *c, const json_t *b, const char *cred, struct err *e)
{
    static const char *const keys[] = {"node_id", "session", NULL};
    if (!json_is_object(b))
        return err_set(e, ERR_INVALID, NULL, "the leave body must be a JSON object");
    if (cluster_known_keys(b, keys, "leave", e) < 0)
        return -1;
    struct cluster_note note;
    pthread_mutex_lock(&c->lock);
    struct cluster_node *nd = cluster_session_node(c, b, cred, e);
    bool gone = false;
    if (nd) {
        char why[160];
        snprintf(why, sizeof why, "node %s left while holding ranks", nd->name);
        cluster_mark_gone(nd, why);
        gone = nd->lost_pending;
        nd->state = CLUSTER_LEFT;
        nd->session[0] = '\0';
        nd->heartbeat_at = clock_wall_s();
        cluster_note_take(nd, CLUSTER_WRITE_STATE, false, &note);
        log_info("cluster: node %s left", nd->name);
    }
    pthread_mutex_unlock(&c->lock);
    cluster_note_write(c, &note, nd != NULL);
    if (gone)
        cluster_wake(c);
    return nd ? 0 : -1;
}

int cluster_remove(struct cluster *c, const char *name, struct err *e)
{
    struct cluster_note note;
    int rc = 0;
    pthread_mutex_lock(&c->lock);
    struct cluster_node *nd = cluster_find(c, name);
    if (!nd)
        rc = err_set(e, ERR_NOT_FOUND, "name", "no node %s", name);
    else if (nd == &c->nodes[0])
        rc = err_set(e, ERR_CONFLICT, "name", "node %s is the leader", name);
    else if (nd->session[0] || nd->state == CLUSTER_UP || nd->state == CLUSTER_DRAINING)
        rc = err_set(e, ERR_CONFLICT, "name",
                     "node %s is %s: only a lost or left node can be removed (stop or drain "
                     "it first)",
                     name, cluster_state_names[nd->state]);
    else if (nd->lost_pending || nd->nruns > 0 || nd->slots_used > 0)
        rc = err_set(e, ERR_CONFLICT, "name",
                     "node %s still has runs being failed: try again in a moment", name);
    if (rc == 0) {
        cluster_note_take(nd, CLUSTER_WRITE_DELETE, false, &note);
        cluster_free_slot(nd);
        log_info("cluster: node %s removed", name);
    }
    pthread_mutex_unlock(&c->lock);
    if (rc == 0)
        cluster_note_write(c, &note, 1);
    return rc;
}

static json_t *cluster_node_json(const struct cluster *c, const struct cluster_node *nd,
                                 double now)
{
    char joined[40] = "", beat[40] = "";
    if (nd->joined_at > 0)
        clock_format_iso(nd->joined_at, joined, sizeof joined);
    if (nd->heartbeat_at > 0)
        clock_format_iso(nd->heartbeat_at, beat, sizeof beat);
    bool leader = nd == &c->nodes[0];
    json_t *o = json_pack(
        "{s:s, s:s, s:i, s:s, s:s, s:i, s:i, s:i, s:O, s:o, s:o, s:o, s:o, s:i}", "name",
        nd->name, "address", nd->address, "port", nd->port, "role",
        leader ? "leader" : "follower", "state", cluster_state_names[nd->state], "cpu_slots",
        nd->cpu_slots, "slots_used", nd->slots_used, "gpus", nd->gpus, "engines", nd->engines,
        "network_profile", nd->profile[0] ? json_string(nd->profile) : json_null(), "joined_at",
        joined[0] ? json_string(joined) : json_null(), "last_heartbeat_at",
        beat[0] ? json_string(beat) : json_null(), "heartbeat_age_s",
        nd->heartbeat_at > 0 && !leader ? json_real(now - nd->heartbeat_at) : json_null(),
        "runs", (int)nd->nruns);
    return o;
}

json_t *cluster_list(struct cluster *c)
{
    json_t *a = json_array();
    double now = clock_wall_s();
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->n; i++)
        if (cluster_used(&c->nodes[i]))
            json_array_append_new(a, cluster_node_json(c, &c->nodes[i], now));
    pthread_mutex_unlock(&c->lock);
    return json_pack("{s:o}", "nodes", a);
}

json_t *cluster_engines(struct cluster *c)
{
    json_t *a = json_array();
    pthread_mutex_lock(&c->lock);
    for (int i = 1; i < c->n; i++) {
        const struct cluster_node *nd = &c->nodes[i];
        if (!cluster_used(nd))
            continue;
        json_t *o = json_pack("{s:s, s:s, s:O*, s:b}", "node", nd->name, "state",
                              cluster_state_names[nd->state], "engines", nd->probe, "probing",
                              nd->probe == NULL);
        if (o && !nd->probe)
            json_object_set_new(o, "engines", json_array());
        json_array_append_new(a, o);
    }
    pthread_mutex_unlock(&c->lock);
    return a;
}

int cluster_engine_check(struct cluster *c, const json_t *spec, struct err *e)
{
    const char *engine = json_string_value(json_object_get(spec, "engine"));
    int rc = 0;
    pthread_mutex_lock(&c->lock);
    for (int i = 1; i < c->n && rc == 0; i++) {
        const struct cluster_node *nd = &c->nodes[i];
        if (nd->state != CLUSTER_UP || !cluster_used(nd))
            continue;
        if (json_array_size(nd->probe) == 0)
            rc = err_set(e, ERR_CONFLICT, "engine",
                         "engine %s cannot run on node %s: it has not reported its engines "
                         "yet (its probe runs after it joins)",
                         engine, nd->name);
        else
            rc = engines_row_check(engines_row(nd->probe, engine), nd->name, spec, e);
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

void cluster_count(struct cluster *c, int *up, int *known)
{
    pthread_mutex_lock(&c->lock);
    *known = 0;
    *up = 0;
    for (int i = 0; i < c->n; i++) {
        *known += cluster_used(&c->nodes[i]);
        *up += cluster_used(&c->nodes[i]) && c->nodes[i].state == CLUSTER_UP;
    }
    pthread_mutex_unlock(&c->lock);
}

/* --- the loop thread ---------------------------------------------------------------- */

int cluster_followers(struct cluster *c, struct cluster_slot_view *out, int cap)
{
    int k = 0;
    pthread_mutex_lock(&c->lock);
    for (int i = 1; i < c->n && k < cap; i++) {
        const struct cluster_node *nd = &c->nodes[i];
        if (nd->state == CLUSTER_UP && nd->session[0])
            out[k++] = (struct cluster_slot_view){i, nd->cpu_slots - nd->slots_used};
    }
    pthread_mutex_unlock(&c->lock);
    return k;
}

int cluster_capacity(struct cluster *c, struct cluster_slot_view *out, int cap)
{
    int k = 0;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->n && k < cap; i++) {
        const struct cluster_node *nd = &c->nodes[i];
        if (i == 0 || (nd->state == CLUSTER_UP && nd->session[0]))
            out[k++] = (struct cluster_slot_view){i, nd->cpu_slots};
    }
    pthread_mutex_unlock(&c->lock);
    return k;
}

/* Ranks each candidate can take. */
static int cluster_room(const int *free, int i, int per)
{
    return free[i] > 0 ? free[i] / per : 0;
}

/* "As few nodes as fit": the first candidate holding every rank, else candidates by
 * room, largest first (fewest nodes), ties in order of preference. */
static int cluster_pack(int world, int per, const int *free, int ncand, int *count)
{
    for (int i = 0; i < ncand; i++)
        if (cluster_room(free, i, per) >= world) {
            count[i] = world;
            return 1;
        }
    int left = world, used = 0;
    while (left > 0) {
        int best = -1;
        for (int i = 0; i < ncand; i++)
            if (count[i] == 0 && cluster_room(free, i, per) > 0 &&
                (best < 0 || cluster_room(free, i, per) > cluster_room(free, best, per)))
                best = i;
        if (best < 0)
            return 0;
        count[best] = cluster_room(free, best, per) < left ? cluster_room(free, best, per)
                                                           : left;
        left -= count[best];
        used++;
    }
    return used;
}

int cluster_place(int world, int per, int want_nodes, int want_rpn, const int *free, int ncand,
                  int *count)
{
    for (int i = 0; i < ncand; i++)
        count[i] = 0;
    if (world < 1 || per < 1)
        return 0;
    if (want_nodes == 0 && want_rpn == 0) {
        int used = cluster_pack(world, per, free, ncand, count);
        if (used == 0)
            for (int i = 0; i < ncand; i++)
                count[i] = 0;
        return used;
    }
    /* node j's share: ranks_per_node each (the last what is left), or world split evenly
     * over nodes (the first world % nodes one more) */
    int k = want_nodes ? want_nodes : (world + want_rpn - 1) / want_rpn;
    int left = world, used = 0;
    for (int i = 0; i < ncand && used < k; i++) {
        int share = want_rpn ? (left < want_rpn ? left : want_rpn)
                             : world / k + (used < world % k ? 1 : 0);
        if (cluster_room(free, i, per) < share)
            continue;
        count[i] = share;
        left -= share;
        used++;
    }
    if (used < k || left > 0) {
        for (int i = 0; i < ncand; i++)
            count[i] = 0;
        return 0;
    }
    return used;
}

void cluster_reserve(struct cluster *c, int id, int slots)
{
    pthread_mutex_lock(&c->lock);
    if (id > 0 && id < c->n) {
        struct cluster_node *nd = &c->nodes[id];
        nd->slots_used += slots;
        if (nd->slots_used < 0)
            nd->slots_used = 0;
    }
    pthread_mutex_unlock(&c->lock);
}

void cluster_node_name(struct cluster *c, int id, char *out, size_t cap)
{
    pthread_mutex_lock(&c->lock);
    snprintf(out, cap, "%s", id >= 0 && id < c->n ? c->nodes[id].name : "");
    pthread_mutex_unlock(&c->lock);
}

void cluster_node_address(struct cluster *c, int id, char *out, size_t cap)
{
    pthread_mutex_lock(&c->lock);
    snprintf(out, cap, "%s", id >= 0 && id < c->n ? c->nodes[id].address : "");
    pthread_mutex_unlock(&c->lock);
}

bool cluster_name_at(struct cluster *c, const char *addr, char *out, size_t cap)
{
    pthread_mutex_lock(&c->lock);
    int i = 0;
    while (i < c->n && (!cluster_used(&c->nodes[i]) || strcmp(c->nodes[i].address, addr) != 0))
        i++;
    if (i < c->n)
        snprintf(out, cap, "%s", c->nodes[i].name);
    pthread_mutex_unlock(&c->lock);
    return i < c->n;
}

void cluster_send(struct cluster *c, int id, json_t *cmd)
{
    pthread_mutex_lock(&c->lock);
    if (id > 0 && id < c->n && c->nodes[id].session[0])
        json_array_append(c->nodes[id].commands, cmd);
    pthread_mutex_unlock(&c->lock);
    json_decref(cmd);
}

void cluster_want_run(struct cluster *c, int id, int64_t run, bool want)
{
    pthread_mutex_lock(&c->lock);
    struct cluster_node *nd = id > 0 && id < c->n ? &c->nodes[id] : NULL;
    size_t at = 0;
    while (nd && at < nd->nruns && nd->runs[at] != run)
        at++;
    if (nd && want && at == nd->nruns && nd->session[0]) {
        if (nd->nruns == nd->cap_runs) {
            size_t cap = nd->cap_runs ? 2 * nd->cap_runs : 8;
            int64_t *grown = realloc(nd->runs, cap * sizeof *grown);
            if (grown) {
                nd->runs = grown;
                nd->cap_runs = cap;
            }
        }
        if (nd->nruns < nd->cap_runs)
            nd->runs[nd->nruns++] = run;
    } else if (nd && !want && at < nd->nruns) {
        nd->runs[at] = nd->runs[--nd->nruns];
    }
    pthread_mutex_unlock(&c->lock);
}

json_t *cluster_take_events(struct cluster *c)
{
    pthread_mutex_lock(&c->lock);
    json_t *ev = c->events;
    c->events = json_array();
    pthread_mutex_unlock(&c->lock);
    return ev;
}

int cluster_take_lost(struct cluster *c, int64_t now_ms, int *ids, char (*why)[160], int cap)
{
    int k = 0, nnotes = 0;
    struct cluster_note *notes = calloc(CLUSTER_MAX_NODES, sizeof *notes);
    pthread_mutex_lock(&c->lock);
    for (int i = 1; i < c->n; i++) {
        struct cluster_node *nd = &c->nodes[i];
        bool live = nd->state == CLUSTER_UP || nd->state == CLUSTER_DRAINING;
        int64_t silent = now_ms - nd->last_sync_ms;
        if (live && nd->session[0] && silent > c->cfg->node_timeout_ms) {
            char w[160];
            snprintf(w, sizeof w, "node %s lost (no sync for %.1f s)", nd->name,
                     (double)silent / 1000.0);
            log_warn("cluster: %s", w);
            cluster_mark_gone(nd, w);
            nd->state = CLUSTER_LOST;
            nd->session[0] = '\0';
            if (notes) /* else the table says up until its next change: logged below */
                cluster_note_take(nd, CLUSTER_WRITE_STATE, false, &notes[nnotes++]);
            else
                log_warn("cluster: out of memory: node %s not recorded lost", nd->name);
        }
        if (nd->lost_pending && k < cap) {
            nd->lost_pending = false;
            ids[k] = i;
            snprintf(why[k], sizeof why[k], "%s", nd->lost_why);
            k++;
        }
    }
    pthread_mutex_unlock(&c->lock);
    cluster_note_write(c, notes, nnotes);
    free(notes);
    return k;
}
