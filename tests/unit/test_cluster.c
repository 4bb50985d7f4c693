/* test_cluster: the leader's registry (daemon/cluster.h) without HTTP: placement as a
 * pure function, joins and rejoins, sessions, malformed syncs refused whole, events
 * queued in order, the lost clock, drain and leave, the nodes table, the engine check
 * against each follower's probe. */
#include <jansson.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "daemon/cluster.h"
#include "daemon/config.h"
#include "daemon/credential.h"
#include "daemon/db.h"
#include "test.h"

/* --- placement ------------------------------------------------------------------------ */

static void place(int world, int per, int nodes, int rpn, const int *room, int n, int want,
                  const int *want_count)
{
    int count[8];
    int got = cluster_place(world, per, nodes, rpn, room, n, count);
    T_EQ_INT(got, want);
    for (int i = 0; i < n; i++)
        T_EQ_INT(count[i], want_count ? want_count[i] : 0);
}

static void test_place_packs_onto_fewest_nodes(void)
{
    int room[] = {2, 4, 8};
    place(2, 1, 0, 0, room, 3, 1, (int[]){2, 0, 0}); /* the first that holds all */
    place(4, 1, 0, 0, room, 3, 1, (int[]){0, 4, 0}); /* not the leader: it has 2 */
    place(8, 1, 0, 0, room, 3, 1, (int[]){0, 0, 8});
    place(12, 1, 0, 0, room, 3, 2, (int[]){0, 4, 8}); /* roomiest first: 2 nodes, not 3 */
    place(14, 1, 0, 0, room, 3, 3, (int[]){2, 4, 8});
    place(15, 1, 0, 0, room, 3, 0, NULL);            /* does not fit now */
    place(4, 2, 0, 0, room, 3, 1, (int[]){0, 0, 4}); /* 2 slots a rank */
}

static void test_place_by_nodes_and_ranks_per_node(void)
{
    int room[] = {4, 4, 4};
    place(4, 1, 2, 0, room, 3, 2, (int[]){2, 2, 0});
    place(5, 1, 2, 0, room, 3, 2, (int[]){3, 2, 0}); /* even: the first one more */
    place(4, 1, 0, 2, room, 3, 2, (int[]){2, 2, 0});
    place(5, 1, 0, 2, room, 3, 3, (int[]){2, 2, 1}); /* the last takes what is left */
    place(4, 1, 4, 0, room, 3, 0, NULL);             /* 4 nodes, 3 exist */
    place(6, 1, 2, 3, room, 3, 2, (int[]){3, 3, 0});
    int busy[] = {1, 4, 4}; /* the leader is busy: nodes 1 and 2 take the shares */
    place(4, 1, 2, 0, busy, 3, 2, (int[]){0, 2, 2});
    place(0, 1, 0, 0, room, 3, 0, NULL);
}

/* --- the registry ---------------------------------------------------------------------- */

struct fx {
    char dir[64];
    struct config cfg;
    struct db *db;
    struct cluster *c;
};

/* A leader in a new state directory; key: its --cluster-key text (NULL: none). */
static int fx_open_key(struct fx *x, int timeout_ms, const char *key, struct err *e)
{
    memset(x, 0, sizeof *x);
    snprintf(x->dir, sizeof x->dir, "/tmp/ddpb-cluster-XXXXXX");
    if (!mkdtemp(x->dir))
        return err_errno(e, "mkdtemp");
    char timeout[16];
    snprintf(timeout, sizeof timeout, "%d", timeout_ms);
    char keyfile[128];
    snprintf(keyfile, sizeof keyfile, "%s/cluster.key", x->dir);
    char *argv[] = {"ddpbenchd", "--state-dir",
                    x->dir,      "--node",
                    "lead",      "--cpu-slots",
                    "2",         "--gpus",
                    "0",         "--node-timeout-ms",
                    timeout,     "--cluster-key",
                    keyfile,     NULL};
    if (key) {
        FILE *f = fopen(keyfile, "w");
        if (!f || fprintf(f, "%s\n", key) < 0 || fclose(f) != 0 || chmod(keyfile, 0600) < 0)
            return err_errno(e, "%s", keyfile);
    }
    optind = 0;
    if (config_parse_args(&x->cfg, key ? 13 : 11, argv, e) < 0)
        return -1;
    char path[128];
    snprintf(path, sizeof path, "%s/ddpbench.db", x->dir);
    if (!(x->db = db_open(path, e)))
        return -1;
    x->c = cluster_create(&x->cfg, x->db, e);
    return x->c ? 0 : -1;
}

static int fx_open(struct fx *x, int timeout_ms, struct err *e)
{
    return fx_open_key(x, timeout_ms, NULL, e);
}

static void fx_close(struct fx *x)
{
    cluster_destroy(x->c);
    db_close(x->db);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", x->dir);
    T_CHECK(system(cmd) == 0);
}

static json_t *offer(const char *name, int slots)
{
    return json_pack("{s:s, s:s, s:i, s:i, s:i, s:{s:s}, s:s}", "name", name, "address",
                     "10.0.0.2", "port", 7480, "cpu_slots", slots, "gpus", 0, "engines",
                     "ddpbench", "0.1.0", "network_profile", "1gbe");
}

/* Joins name; its id and session into the outputs. */
static void join(struct fx *x, const char *name, int slots, int *id, char session[65])
{
    json_t *o = offer(name, slots), *reply = NULL;
    struct err e = {0};
    T_OK(cluster_join(x->c, o, NULL, &reply, &e));
    *id = (int)json_integer_value(json_object_get(reply, "node_id"));
    snprintf(session, 65, "%s", json_string_value(json_object_get(reply, "session")));
    T_EQ_INT((int)strlen(session), 64);
    T_EQ_INT((int)json_array_size(json_object_get(reply, "runs")), 0);
    json_decref(o);
    json_decref(reply);
}

/* A leader (fx_open with timeout_ms) with follower "f1" of 4 slots joined: its id and
 * session into the outputs. */
static void fx_open_with_f1(struct fx *x, int timeout_ms, int *id, char session[65])
{
    struct err e = {0};
    T_OK(fx_open(x, timeout_ms, &e));
    join(x, "f1", 4, id, session);
}

/* Syncs the body printf makes of fmt; the HTTP status the handler would answer (200,
 * 400, 409; 0 when the test's own text is no JSON) and the reply (owned) when 200. */
__attribute__((format(printf, 3, 4))) static int sync_text(struct fx *x, json_t **reply,
                                                           const char *fmt, ...)
{
    char text[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    json_t *b = json_loads(text, 0, NULL);
    *reply = NULL;
    if (!b)
        return 0;
    struct err e = {0};
    int rc = cluster_sync(x->c, b, NULL, reply, &e);
    json_decref(b);
    return rc == 0 ? 200 : e.code == ERR_CONFLICT ? 409 : 400;
}

static const char *state_of(struct fx *x, const char *name)
{
    static char state[16]; /* test only: one call's answer at a time */
    json_t *l = cluster_list(x->c);
    size_t i;
    json_t *n;
    state[0] = '\0';
    json_array_foreach(json_object_get(l, "nodes"), i, n)
    {
        if (strcmp(json_string_value(json_object_get(n, "name")), name) == 0)
            snprintf(state, sizeof state, "%s", json_string_value(json_object_get(n, "state")));
    }
    json_decref(l);
    return state;
}

static void test_join_sync_and_malformed_bodies(void)
{
    struct fx x;
    struct err e = {0};
    int id;
    char s[65];
    fx_open_with_f1(&x, 60000, &id, s);
    T_EQ_INT(id, 1);
    T_EQ_STR(state_of(&x, "lead"), "up");
    T_EQ_STR(state_of(&x, "f1"), "up");
    json_t *r = NULL;
    /* malformed: refused whole, nothing queued */
    /* each: the fields added to a valid {node_id, session} */
    const char *bad[] = {
        "{\"events\": [{\"run\": 1, \"rank\": 0, \"line\": \"a\"}, {\"run\": 1}]}",
        "{\"events\": [{\"run\": 1, \"rank\": 0, \"line\": 5}]}",
        "{\"events\": [{\"run\": 1, \"rank\": 0, \"spawned\": {\"pid\": 0}}]}",
        "{\"events\": [{\"run\": 1, \"rank\": 0, \"exit\": {\"code\": \"x\"}}]}",
        "{\"events\": [{\"run\": 1, \"rank\": 1024, \"line\": \"a\"}]}",
        "{\"events\": [{\"run\": 1, \"rank\": 0, \"line\": \"a\", \"exit\": {}}]}",
        "{\"events\": {}}",
        "{\"events\": [{\"run\": 1, \"rank\": 0, \"exit\": {\"code\": 1, \"error\": 5}}]}",
        "{\"state\": \"gone\"}",
        "{\"who\": 1}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_t *b = json_loads(bad[i], 0, NULL);
        T_CHECK_MSG(b != NULL, "%s", bad[i]);
        json_object_set_new(b, "node_id", json_integer(id));
        json_object_set_new(b, "session", json_string(s));
        T_CHECK_MSG(cluster_sync(x.c, b, NULL, &r, &e) < 0 && e.code == ERR_INVALID, "%s",
                    bad[i]);
        json_decref(b);
    }
    json_t *none = cluster_take_events(x.c);
    T_EQ_INT((int)json_array_size(none), 0);
    json_decref(none);
    T_EQ_INT(sync_text(&x, &r, "{\"node_id\": %d, \"session\": \"%s\"}", id, "f00"), 409);
    /* a good one: events in order with the node's id; commands and runs come back */
    cluster_want_run(x.c, id, 7, true);
    cluster_send(x.c, id,
                 json_pack("{s:s, s:i, s:s}", "op", "signal", "run", 7, "signal", "TERM"));
    T_EQ_INT(sync_text(&x, &r,
                       "{\"node_id\": %d, \"session\": \"%s\", \"events\": [{\"run\": 7, "
                       "\"rank\": 2, \"spawned\": {\"pid\": 42, \"cpus\": null}}, {\"run\": "
                       "7, \"rank\": 2, \"line\": \"{}\"}, {\"run\": 7, \"rank\": 2, "
                       "\"exit\": {\"code\": 0, \"signal\": null, \"error\": \"why\"}}]}",
                       id, s),
             200);
    T_EQ_INT((int)json_array_size(json_object_get(r, "commands")), 1);
    T_EQ_INT((int)json_integer_value(json_array_get(json_object_get(r, "runs"), 0)), 7);
    json_decref(r);
    json_t *evs = cluster_take_events(x.c);
    T_EQ_INT((int)json_array_size(evs), 3);
    T_CHECK(json_object_get(json_array_get(evs, 0), "spawned") != NULL);
    T_CHECK(json_object_get(json_array_get(evs, 2), "exit") != NULL);
    T_EQ_INT((int)json_integer_value(json_object_get(json_array_get(evs, 1), "node")), id);
    json_decref(evs);
    /* commands are handed out once */
    T_EQ_INT(sync_text(&x, &r, "{\"node_id\": %d, \"session\": \"%s\"}", id, s), 200);
    T_EQ_INT((int)json_array_size(json_object_get(r, "commands")), 0);
    json_decref(r);
    /* the leader's name and a bad offer are refused */
    json_t *o = offer("lead", 1);
    T_CHECK(cluster_join(x.c, o, NULL, &r, &e) < 0 && e.code == ERR_CONFLICT);
    json_decref(o);
    o = json_pack("{s:s, s:s, s:i, s:i, s:i}", "name", "f2", "address", "a b", "port", 1,
                  "cpu_slots", 1, "gpus", 0);
    T_CHECK(cluster_join(x.c, o, NULL, &r, &e) < 0 && e.code == ERR_INVALID);
    T_EQ_STR(e.field, "address");
    json_decref(o);
    fx_close(&x);
}

static void test_lost_rejoin_drain_and_leave(void)
{
    struct fx x;
    struct err e = {0};
    int id;
    char s[65];
    fx_open_with_f1(&x, 500, &id, s);
    struct cluster_slot_view v[4];
    T_EQ_INT(cluster_followers(x.c, v, 4), 1);
    T_EQ_INT(v[0].free_slots, 4);
    cluster_reserve(x.c, id, 3);
    T_EQ_INT(cluster_followers(x.c, v, 4), 1);
    T_EQ_INT(v[0].free_slots, 1);
    cluster_want_run(x.c, id, 9, true);
    int ids[4];
    char why[4][160];
    /* within the timeout: nothing lost */
    T_EQ_INT(cluster_take_lost(x.c, clock_mono_ms(), ids, why, 4), 0);
    /* past it: lost, with its runs reported once, its session gone */
    T_EQ_INT(cluster_take_lost(x.c, clock_mono_ms() + 2000, ids, why, 4), 1);
    T_EQ_INT(ids[0], id);
    T_CHECK_MSG(strstr(why[0], "node f1 lost") != NULL, "%s", why[0]);
    T_EQ_INT(cluster_take_lost(x.c, clock_mono_ms() + 4000, ids, why, 4), 0);
    T_EQ_STR(state_of(&x, "f1"), "lost");
    T_EQ_INT(cluster_followers(x.c, v, 4), 0);
    json_t *r = NULL;
    T_EQ_INT(sync_text(&x, &r, "{\"node_id\": %d, \"session\": \"%s\"}", id, s), 409);
    /* it rejoins under its name: same id, new session, up */
    char s2[65];
    int id2;
    join(&x, "f1", 4, &id2, s2);
    T_EQ_INT(id2, id);
    T_CHECK(strcmp(s, s2) != 0);
    T_EQ_STR(state_of(&x, "f1"), "up");
    /* a rejoin while the leader counted runs there is a loss too (the node went silent:
     * without a key only a node past the lost window may be joined under its name) */
    cluster_want_run(x.c, id, 10, true);
    usleep(600 * 1000);
    join(&x, "f1", 4, &id2, s2);
    T_EQ_INT(cluster_take_lost(x.c, clock_mono_ms(), ids, why, 4), 1);
    T_CHECK_MSG(strstr(why[0], "joined again") != NULL, "%s", why[0]);
    /* draining: not offered for new ranks; leave: left */
    T_EQ_INT(sync_text(&x, &r,
                       "{\"node_id\": %d, \"session\": \"%s\", \"state\": \"draining\"}", id,
                       s2),
             200);
    json_decref(r);
    T_EQ_STR(state_of(&x, "f1"), "draining");
    T_EQ_INT(cluster_followers(x.c, v, 4), 0);
    json_t *b = json_pack("{s:i, s:s}", "node_id", id, "session", s2);
    T_OK(cluster_leave(x.c, b, NULL, &e));
    json_decref(b);
    T_EQ_STR(state_of(&x, "f1"), "left");
    /* the table agrees */
    json_t *rows = db_list_nodes(x.db, &e);
    T_EQ_INT((int)json_array_size(rows), 2);
    json_t *f1 = json_array_get(rows, 1);
    T_EQ_STR(json_string_value(json_object_get(f1, "state")), "left");
    T_EQ_STR(json_string_value(json_object_get(f1, "network_profile")), "1gbe");
    T_CHECK(json_is_object(json_object_get(f1, "engines")));
    json_decref(rows);
    /* a restarted leader reads it back (left stays left, others lost) */
    cluster_destroy(x.c);
    x.c = cluster_create(&x.cfg, x.db, &e);
    T_CHECK(x.c != NULL);
    T_EQ_STR(state_of(&x, "f1"), "left");
    fx_close(&x);
}

/* cluster_engine_check of a spec {engine, backend, mpi} answers 0 (want "") or
 * ERR_CONFLICT naming the field want; why into e. */
static void engine_check(struct fx *x, const char *engine, const char *backend, const char *mpi,
                         const char *want, struct err *e)
{
    json_t *spec = json_pack("{s:s, s:s, s:s}", "engine", engine, "backend", backend, "mpi",
                             mpi);
    memset(e, 0, sizeof *e);
    int rc = cluster_engine_check(x->c, spec, e);
    json_decref(spec);
    T_CHECK_MSG(rc == 0 ? !want[0] : e->code == ERR_CONFLICT && strcmp(e->field, want) == 0,
                "%s %s %s: rc %d field '%s' (%s), want '%s'", engine, backend, mpi, rc,
                e->field, e->msg, want);
}

/* A point that may span nodes runs only where every follower's probe has its engine,
 * backend and MPI (engines_row_check): not reported yet, not installed, not known, a
 * build without the backend (Horovod without MPI, with the probe's reason) or linked
 * against another MPI, a row without the lists (taken at its word), and what is there. */
static void test_engine_check_reads_each_followers_probe(void)
{
    struct fx x;
    struct err e = {0};
    int id;
    char s[65];
    fx_open_with_f1(&x, 60000, &id, s);
    engine_check(&x, "horovod", "tcp", "openmpi", "engine", &e);
    T_CHECK_MSG(strstr(e.msg, "not reported its engines") != NULL, "%s", e.msg);
    json_t *r = NULL;
    T_EQ_INT(sync_text(&x, &r,
                       "{\"node_id\": %d, \"session\": \"%s\", \"engines\": ["
                       "{\"name\": \"horovod\", \"installed\": true, \"launched\": true, "
                       "\"backends\": [\"tcp\"], \"backends_not_available\": {\"mpi\": "
                       "\"built without MPI\"}}, {\"name\": \"tensorflow\", \"installed\": "
                       "false, \"launched\": true, \"reason\": \"import failed\"}, "
                       "{\"name\": \"pytorch\", \"installed\": true, \"launched\": "
                       "true}, {\"name\": \"script\", \"installed\": true, \"launched\": "
                       "true, \"backends\": [\"tcp\", \"mpi\"], \"mpis\": [\"openmpi\"]}]}",
                       id, s),
             200);
    json_decref(r);
    engine_check(&x, "horovod", "tcp", "mpich", "", &e);
    engine_check(&x, "pytorch", "mpi", "openmpi", "", &e); /* no lists */
    engine_check(&x, "horovod", "mpi", "openmpi", "backend", &e);
    T_CHECK_MSG(strstr(e.msg, "node f1: built without MPI") != NULL, "%s", e.msg);
    engine_check(&x, "script", "mpi", "openmpi", "", &e);
    engine_check(&x, "script", "mpi", "mpich", "mpi", &e);
    T_CHECK_MSG(strstr(e.msg, "over mpi mpich on node f1") != NULL, "%s", e.msg);
    engine_check(&x, "script", "tcp", "mpich", "", &e); /* mpi matters for mpi */
    engine_check(&x, "tensorflow", "tcp", "openmpi", "engine", &e);
    T_CHECK_MSG(strstr(e.msg, "import failed") != NULL, "%s", e.msg);
    engine_check(&x, "deepspeed", "tcp", "openmpi", "engine", &e);
    T_CHECK_MSG(strstr(e.msg, "not known on node f1") != NULL, "%s", e.msg);
    fx_close(&x);
}

/* Another launcher's host list names nodes by address, and its ranks' report channels
 * are told apart by the address they connect from: each way between a node and its
 * address, the leader's being its store host. */
static void test_node_address_and_name_at(void)
{
    struct fx x;
    int id;
    char s[65], out[128];
    fx_open_with_f1(&x, 60000, &id, s);
    cluster_node_address(x.c, id, out, sizeof out);
    T_EQ_STR(out, "10.0.0.2");
    cluster_node_address(x.c, 0, out, sizeof out);
    T_EQ_STR(out, x.cfg.store_host);
    cluster_node_address(x.c, 7, out, sizeof out);
    T_EQ_STR(out, "");
    T_CHECK(cluster_name_at(x.c, "10.0.0.2", out, sizeof out));
    T_EQ_STR(out, "f1");
    T_CHECK(cluster_name_at(x.c, x.cfg.store_host, out, sizeof out));
    T_EQ_STR(out, "lead");
    snprintf(out, sizeof out, "kept");
    T_CHECK(!cluster_name_at(x.c, "10.0.0.9", out, sizeof out));
    T_EQ_STR(out, "kept");
    fx_close(&x);
}

/* Syncs {node_id, session} with credential cred: the status the handler would answer. */
static int sync_as(struct fx *x, int id, const char *session, const char *cred)
{
    json_t *b = json_pack("{s:i, s:s}", "node_id", id, "session", session), *r = NULL;
    struct err e = {0};
    int rc = cluster_sync(x->c, b, cred, &r, &e);
    json_decref(b);
    json_decref(r);
    return rc == 0                      ? 200
           : e.code == ERR_CONFLICT     ? 409
           : e.code == ERR_UNAUTHORIZED ? 401
                                        : 400;
}

/* Joins name with cred: the status, the message into why. */
static int join_as(struct fx *x, const char *name, const char *cred, char *why, size_t cap)
{
    json_t *o = offer(name, 2), *r = NULL;
    struct err e = {0};
    int rc = cluster_join(x->c, o, cred, &r, &e);
    json_decref(o);
    json_decref(r);
    snprintf(why, cap, "%s", rc == 0 ? "" : e.msg);
    return rc == 0                      ? 200
           : e.code == ERR_CONFLICT     ? 409
           : e.code == ERR_UNAUTHORIZED ? 401
                                        : 400;
}

/* Without a key: a join under the name of a node that synced within the lost window is
 * refused naming it, and the live node keeps its session (issue 31 defect 2). */
static void test_join_cannot_steal_a_live_name(void)
{
    struct fx x;
    int id;
    char s[65], why[256];
    fx_open_with_f1(&x, 60000, &id, s);
    cluster_want_run(x.c, id, 5, true);
    T_EQ_INT(join_as(&x, "f1", NULL, why, sizeof why), 409);
    T_CHECK_MSG(strstr(why, "node f1 is live") != NULL, "%s", why);
    T_EQ_INT(sync_as(&x, id, s, NULL), 200); /* not evicted */
    int ids[4];
    char lost[4][160];
    T_EQ_INT(cluster_take_lost(x.c, clock_mono_ms(), ids, lost, 4), 0); /* its run lives */
    fx_close(&x);
}

/* With --cluster-key: a node proves its name with HMAC-SHA256(key, name) on join and
 * every sync; another node's credential, the admin token or none is refused (401, or 409
 * for a live name), and the same node restarting may take its name back. */
static void test_cluster_key_identities(void)
{
    struct fx x;
    struct err e = {0};
    char why[256], f1[CREDENTIAL_IDENTITY], f2[CREDENTIAL_IDENTITY];
    T_OK(fx_open_key(&x, 60000, "cluster-key-for-the-test-0123", &e));
    T_OK(credential_node_identity("cluster-key-for-the-test-0123", "f1", f1, &e));
    T_OK(credential_node_identity("cluster-key-for-the-test-0123", "f2", f2, &e));
    T_EQ_INT((int)strlen(f1), 64);
    T_CHECK(strcmp(f1, f2) != 0);
    /* RFC 4231 test case 2: HMAC-SHA256("Jefe", "what do ya want for nothing?") */
    char rfc[CREDENTIAL_IDENTITY];
    T_OK(credential_node_identity("Jefe", "what do ya want for nothing?", rfc, &e));
    T_EQ_STR(rfc, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    T_EQ_INT(join_as(&x, "f1", NULL, why, sizeof why), 401);
    T_EQ_INT(join_as(&x, "f1", f2, why, sizeof why), 401);
    T_CHECK_MSG(strstr(why, "join as f1") != NULL, "%s", why);
    json_t *o = offer("f1", 2), *r = NULL;
    T_OK(cluster_join(x.c, o, f1, &r, &e));
    json_decref(o);
    int id = (int)json_integer_value(json_object_get(r, "node_id"));
    char s[65];
    snprintf(s, sizeof s, "%s", json_string_value(json_object_get(r, "session")));
    json_decref(r);
    T_EQ_INT(sync_as(&x, id, s, f1), 200);
    T_EQ_INT(sync_as(&x, id, s, f2), 401); /* a session alone is not enough */
    T_EQ_INT(sync_as(&x, id, s, NULL), 401);
    /* a live name: another's credential gets 409 naming it, f1 keeps its session */
    T_EQ_INT(join_as(&x, "f1", f2, why, sizeof why), 409);
    T_CHECK_MSG(strstr(why, "node f1 is live") != NULL, "%s", why);
    T_EQ_INT(sync_as(&x, id, s, f1), 200);
    /* f1 itself, restarted: takes its name back with a new session */
    T_EQ_INT(join_as(&x, "f1", f1, why, sizeof why), 200);
    T_EQ_INT(sync_as(&x, id, s, f1), 409);
    fx_close(&x);
}

static int count_nodes(struct fx *x)
{
    json_t *l = cluster_list(x->c);
    int n = (int)json_array_size(json_object_get(l, "nodes"));
    json_decref(l);
    return n;
}

/* DELETE /v1/nodes/NAME: not the leader, not a live node (409), not an unknown one (404);
 * a left node goes from the registry and the table, and its slot is taken again. */
static void test_remove_gone_nodes(void)
{
    struct fx x;
    struct err e = {0};
    int id, id2;
    char s[65], s2[65];
    fx_open_with_f1(&x, 60000, &id, s);
    T_CHECK(cluster_remove(x.c, "lead", &e) < 0 && e.code == ERR_CONFLICT);
    T_CHECK(cluster_remove(x.c, "f1", &e) < 0 && e.code == ERR_CONFLICT);
    T_CHECK_MSG(strstr(e.msg, "node f1 is up") != NULL, "%s", e.msg);
    T_CHECK(cluster_remove(x.c, "nobody", &e) < 0 && e.code == ERR_NOT_FOUND);
    json_t *b = json_pack("{s:i, s:s}", "node_id", id, "session", s);
    T_OK(cluster_leave(x.c, b, NULL, &e));
    json_decref(b);
    T_EQ_INT(count_nodes(&x), 2);
    T_OK(cluster_remove(x.c, "f1", &e));
    T_EQ_INT(count_nodes(&x), 1);
    int up = 0, known = 0;
    cluster_count(x.c, &up, &known);
    T_EQ_INT(known, 1);
    json_t *rows = db_list_nodes(x.db, &e);
    T_EQ_INT((int)json_array_size(rows), 1);
    json_decref(rows);
    join(&x, "f2", 2, &id2, s2);
    T_EQ_INT(id2, id); /* the freed slot */
    T_EQ_STR(state_of(&x, "f2"), "up");
    fx_close(&x);
}

/* A full registry takes a new node into the slot of the longest-gone left one; with none
 * gone it refuses, naming the way out. A restarted leader forgets nodes that left over a
 * week ago. */
static void test_full_registry_reclaims_left_nodes(void)
{
    struct fx x;
    struct err e = {0};
    T_OK(fx_open(&x, 60000, &e));
    int id = 0, first = 0;
    char s[65], first_s[65], name[16], why[256];
    for (int i = 1; i < CLUSTER_MAX_NODES; i++) {
        snprintf(name, sizeof name, "n%d", i);
        join(&x, name, 1, &id, s);
        if (i == 1) {
            first = id;
            snprintf(first_s, sizeof first_s, "%s", s);
        }
    }
    T_EQ_INT(join_as(&x, "extra", NULL, why, sizeof why), 409);
    T_CHECK_MSG(strstr(why, "DELETE /v1/nodes/NAME") != NULL, "%s", why);
    json_t *b = json_pack("{s:i, s:s}", "node_id", first, "session", first_s);
    T_OK(cluster_leave(x.c, b, NULL, &e));
    json_decref(b);
    T_EQ_INT(join_as(&x, "extra", NULL, why, sizeof why), 200);
    T_EQ_STR(state_of(&x, "n1"), ""); /* its slot was taken */
    T_EQ_STR(state_of(&x, "extra"), "up");
    T_EQ_INT(count_nodes(&x), CLUSTER_MAX_NODES);
    /* a node that left 8 days ago is forgotten at the next start */
    T_OK(db_node_set_state(x.db, "n2", "left", clock_wall_s() - 8 * 86400.0, &e));
    T_OK(db_node_set_state(x.db, "n3", "left", clock_wall_s() - 3600.0, &e));
    cluster_destroy(x.c);
    x.c = cluster_create(&x.cfg, x.db, &e);
    T_CHECK(x.c != NULL);
    T_EQ_STR(state_of(&x, "n2"), "");
    T_EQ_STR(state_of(&x, "n3"), "left");
    fx_close(&x);
}

struct join_thread {
    struct fx *x;
    int rc;
};

static void *join_thread_main(void *arg)
{
    struct join_thread *j = arg;
    char why[256];
    j->rc = join_as(j->x, "slow", NULL, why, sizeof why);
    return NULL;
}

/* A join whose table write waits for SQLite's lock (another connection holds it) does
 * not hold the registry: a list answers at once (issue 31 defect 12). */
static void test_no_db_write_under_the_mutex(void)
{
    struct fx x;
    struct err e = {0};
    T_OK(fx_open(&x, 60000, &e));
    char path[128];
    snprintf(path, sizeof path, "%s/ddpbench.db", x.dir);
    sqlite3 *h = NULL;
    T_CHECK(sqlite3_open(path, &h) == SQLITE_OK);
    T_CHECK(sqlite3_exec(h, "BEGIN EXCLUSIVE", NULL, NULL, NULL) == SQLITE_OK);
    struct join_thread j = {&x, -1};
    pthread_t t;
    T_CHECK(pthread_create(&t, NULL, join_thread_main, &j) == 0);
    usleep(300 * 1000); /* the join now waits on SQLite */
    int64_t t0 = clock_mono_ms();
    T_EQ_INT(count_nodes(&x), 2);
    int64_t took = clock_mono_ms() - t0;
    T_CHECK_MSG(took < 1000, "a list waited %lld ms for a join's write", (long long)took);
    T_CHECK(sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL) == SQLITE_OK);
    pthread_join(t, NULL);
    T_EQ_INT(j.rc, 200);
    sqlite3_close(h);
    fx_close(&x);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_place_packs_onto_fewest_nodes);
    TEST_RUN(test_place_by_nodes_and_ranks_per_node);
    TEST_RUN(test_join_sync_and_malformed_bodies);
    TEST_RUN(test_lost_rejoin_drain_and_leave);
    TEST_RUN(test_engine_check_reads_each_followers_probe);
    TEST_RUN(test_node_address_and_name_at);
    TEST_RUN(test_join_cannot_steal_a_live_name);
    TEST_RUN(test_cluster_key_identities);
    TEST_RUN(test_remove_gone_nodes);
    TEST_RUN(test_full_registry_reclaims_left_nodes);
    TEST_RUN(test_no_db_write_under_the_mutex);
    return test_end();
}
