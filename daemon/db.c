/* db: see db.h. SQLite in WAL mode; one writer connection under a mutex, a pool of
 * reader connections; statements prepared once per connection (keyed by their SQL
 * text's address, since every statement is a static string in this file). */
#include "daemon/db.h"

#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/spec.h"
#include "daemon/db_rows.h"
#include "daemon/migrations.h"

#define DB_READERS 4
#define DB_STMT_CACHE 96
#define DB_BUSY_TIMEOUT_MS 5000

struct db_conn {
    sqlite3 *h;
    struct {
        const char *sql;
        sqlite3_stmt *st;
    } cache[DB_STMT_CACHE];
    int ncache;
};

/* The replies built in SQL (db_reply_defs). */
enum db_reply {
    DB_REPLY_RUN,
    DB_REPLY_EXPERIMENT,
    DB_REPLY_LIST,
    DB_REPLY_LIST_ALL,
    DB_REPLY_COUNT
};

struct db {
    pthread_mutex_t wlock; /* the one writer */
    struct db_conn writer;
    pthread_mutex_t plock; /* reader pool */
    pthread_cond_t pfree;
    struct db_conn readers[DB_READERS];
    bool reader_busy[DB_READERS];
    char *reply_sql[DB_REPLY_COUNT]; /* generated at open (db_reply_sql); sqlite3_free */
};

static const char *const db_status_names[] = {
    "queued", "starting", "running", "succeeded", "failed", "cancelled", "interrupted",
};

const char *db_run_status_name(enum db_run_status s)
{
    return (unsigned)s < sizeof db_status_names / sizeof *db_status_names ? db_status_names[s]
                                                                          : "unknown";
}

static int db_fail(struct err *e, sqlite3 *h, const char *what)
{
    int rc = sqlite3_extended_errcode(h);
    enum err_code code = (rc & 0xff) == SQLITE_BUSY ? ERR_UNAVAILABLE : ERR_IO;
    return err_set(e, code, NULL, "database: %s: %s", what, sqlite3_errmsg(h));
}

/* --- connections and statements -------------------------------------------------------- */

static int db_exec(struct db_conn *c, const char *sql, struct err *e)
{
    char *msg = NULL;
    if (sqlite3_exec(c->h, sql, NULL, NULL, &msg) != SQLITE_OK) {
        err_set(e, ERR_IO, NULL, "database: %s", msg ? msg : sqlite3_errmsg(c->h));
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

/* ddpb_iso_time(unix_s): the ISO-8601 text db_col_json shows times as, for JSON built in
 * SQL; NULL stays NULL. */
static void db_iso_time(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    if (sqlite3_value_type(argv[0]) == SQLITE_NULL) {
        sqlite3_result_null(ctx);
        return;
    }
    char iso[40];
    clock_format_iso(sqlite3_value_double(argv[0]), iso, sizeof iso);
    sqlite3_result_text(ctx, iso, -1, SQLITE_TRANSIENT);
}

static int db_conn_open(struct db_conn *c, const char *path, bool writer, struct err *e)
{
    memset(c, 0, sizeof *c);
    int flags = SQLITE_OPEN_NOMUTEX |
                (writer ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE : SQLITE_OPEN_READONLY);
    if (sqlite3_open_v2(path, &c->h, flags, NULL) != SQLITE_OK) {
        err_set(e, ERR_IO, NULL, "database %s: %s", path,
                c->h ? sqlite3_errmsg(c->h) : "out of memory");
        sqlite3_close(c->h);
        c->h = NULL;
        return -1;
    }
    sqlite3_busy_timeout(c->h, DB_BUSY_TIMEOUT_MS);
    sqlite3_extended_result_codes(c->h, 1);
    if (sqlite3_create_function(c->h, "ddpb_iso_time", 1,
                                SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS, NULL,
                                db_iso_time, NULL, NULL) != SQLITE_OK)
        return db_fail(e, c->h, "register ddpb_iso_time");
    if (writer)
        return db_exec(c,
                       "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                       "PRAGMA foreign_keys=ON;",
                       e);
    return db_exec(c, "PRAGMA foreign_keys=ON;", e);
}

static void db_conn_close(struct db_conn *c)
{
    for (int i = 0; i < c->ncache; i++)
        sqlite3_finalize(c->cache[i].st);
    c->ncache = 0;
    sqlite3_close(c->h);
    c->h = NULL;
}

/* Borrowed statement, reset and unbound, prepared on first use. */
static sqlite3_stmt *db_stmt(struct db_conn *c, const char *sql, struct err *e)
{
    for (int i = 0; i < c->ncache; i++) {
        if (c->cache[i].sql == sql) {
            sqlite3_reset(c->cache[i].st);
            sqlite3_clear_bindings(c->cache[i].st);
            return c->cache[i].st;
        }
    }
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v3(c->h, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK) {
        db_fail(e, c->h, "prepare");
        return NULL;
    }
    if (c->ncache < DB_STMT_CACHE) {
        c->cache[c->ncache].sql = sql;
        c->cache[c->ncache].st = st;
        c->ncache++;
    } else {
        log_error("db: statement cache full; raise DB_STMT_CACHE");
    }
    return st;
}

static struct db_conn *db_reader_acquire(struct db *db)
{
    pthread_mutex_lock(&db->plock);
    for (;;) {
        for (int i = 0; i < DB_READERS; i++) {
            if (!db->reader_busy[i]) {
                db->reader_busy[i] = true;
                pthread_mutex_unlock(&db->plock);
                return &db->readers[i];
            }
        }
        pthread_cond_wait(&db->pfree, &db->plock);
    }
}

static void db_reader_release(struct db *db, struct db_conn *c)
{
    pthread_mutex_lock(&db->plock);
    db->reader_busy[c - db->readers] = false;
    pthread_cond_signal(&db->pfree);
    pthread_mutex_unlock(&db->plock);
}

/* Write transactions: BEGIN IMMEDIATE under the writer mutex. */
static struct db_conn *db_write_begin(struct db *db, struct err *e)
{
    pthread_mutex_lock(&db->wlock);
    if (db_exec(&db->writer, "BEGIN IMMEDIATE", e) < 0) {
        pthread_mutex_unlock(&db->wlock);
        return NULL;
    }
    return &db->writer;
}

/* Commits when rc == 0, rolls back otherwise; returns rc (or -1 if commit failed). */
static int db_write_end(struct db *db, int rc, struct err *e)
{
    if (rc == 0)
        rc = db_exec(&db->writer, "COMMIT", e);
    if (rc != 0) {
        char *msg = NULL;
        sqlite3_exec(db->writer.h, "ROLLBACK", NULL, NULL, &msg);
        sqlite3_free(msg);
    }
    pthread_mutex_unlock(&db->wlock);
    return rc;
}

/* Runs a bound statement that returns no rows. */
static int db_step_done(struct db_conn *c, sqlite3_stmt *st, struct err *e)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return db_fail(e, c->h, "step");
    return 0;
}

static void db_bind_text_or_null(sqlite3_stmt *st, int idx, const char *s)
{
    if (s)
        sqlite3_bind_text(st, idx, s, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, idx);
}

/* Binds ?1.. from a format, one letter per parameter:
 *   i int   I int64_t   d double   t text (NULL binds NULL)
 *   o int, NULL when negative      D double, NULL when negative */
static void db_bindv(sqlite3_stmt *st, const char *fmt, va_list ap)
{
    for (int i = 1; *fmt; fmt++, i++) {
        switch (*fmt) {
        case 'i': sqlite3_bind_int(st, i, va_arg(ap, int)); break;
        case 'I': sqlite3_bind_int64(st, i, va_arg(ap, int64_t)); break;
        case 'd': sqlite3_bind_double(st, i, va_arg(ap, double)); break;
        case 't': db_bind_text_or_null(st, i, va_arg(ap, const char *)); break;
        case 'o': {
            int v = va_arg(ap, int);
            if (v >= 0)
                sqlite3_bind_int(st, i, v);
            else
                sqlite3_bind_null(st, i);
            break;
        }
        case 'D': {
            double v = va_arg(ap, double);
            if (v >= 0)
                sqlite3_bind_double(st, i, v);
            else
                sqlite3_bind_null(st, i);
            break;
        }
        case 'J': { /* int64; below 0 (not measured) is NULL */
            int64_t v = va_arg(ap, int64_t);
            if (v >= 0)
                sqlite3_bind_int64(st, i, v);
            else
                sqlite3_bind_null(st, i);
            break;
        }
        default: break;
        }
    }
}

static void db_bind(sqlite3_stmt *st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    db_bindv(st, fmt, ap);
    va_end(ap);
}

/* One statement in its own write transaction, parameters bound from fmt (db_bindv). */
static int db_write_one(struct db *db, struct err *e, const char *sql, const char *fmt, ...)
{
    struct db_conn *c = db_write_begin(db, e);
    if (!c)
        return -1;
    int rc = -1;
    sqlite3_stmt *st = db_stmt(c, sql, e);
    if (st) {
        va_list ap;
        va_start(ap, fmt);
        db_bindv(st, fmt, ap);
        va_end(ap);
        rc = db_step_done(c, st, e);
    }
    return db_write_end(db, rc, e);
}

/* --- rows as JSON ------------------------------------------------------------------- */

static bool db_col_is_json(const char *name)
{
    return strcmp(name, "spec") == 0 || strcmp(name, "params") == 0 ||
           strcmp(name, "env") == 0 || strcmp(name, "summary") == 0 ||
           strcmp(name, "engines") == 0 || strcmp(name, "spans") == 0 ||
           strcmp(name, "ops") == 0 || strcmp(name, "members") == 0 ||
           strcmp(name, "joiners") == 0 || strcmp(name, "test_acc_per_class") == 0 ||
           strcmp(name, "curve") == 0;
}

static bool db_col_is_time(const char *name)
{
    size_t n = strlen(name);
    return n > 3 && strcmp(name + n - 3, "_at") == 0;
}

static bool db_col_is_bool(const char *name)
{
    return strcmp(name, "inplace") == 0 || strcmp(name, "emulated") == 0 ||
           strcmp(name, "pinned") == 0 || strcmp(name, "oversubscribed") == 0 ||
           strcmp(name, "injected") == 0;
}

static json_t *db_col_json(sqlite3_stmt *st, int i)
{
    const char *name = sqlite3_column_name(st, i);
    int type = sqlite3_column_type(st, i);
    if (type == SQLITE_NULL)
        return json_null();
    if (db_col_is_time(name)) {
        char iso[40];
        clock_format_iso(sqlite3_column_double(st, i), iso, sizeof iso);
        return json_string(iso);
    }
    if (db_col_is_bool(name))
        return json_boolean(sqlite3_column_int(st, i));
    switch (type) {
    case SQLITE_INTEGER: return json_integer(sqlite3_column_int64(st, i));
    case SQLITE_FLOAT: return json_real(sqlite3_column_double(st, i));
    default: {
        const char *text = (const char *)sqlite3_column_text(st, i);
        if (db_col_is_json(name)) {
            json_t *v = json_loads(text ? text : "null", JSON_DECODE_ANY, NULL);
            if (v)
                return v;
        }
        return json_string(text ? text : "");
    }
    }
}

/* Owned object of the current row. */
static json_t *db_row_json(sqlite3_stmt *st)
{
    json_t *o = json_object();
    int n = sqlite3_column_count(st);
    for (int i = 0; i < n; i++)
        json_object_set_new(o, sqlite3_column_name(st, i), db_col_json(st, i));
    return o;
}

/* Steps a bound statement to the end. Returns an owned array of row objects. */
static json_t *db_rows_json(struct db_conn *c, sqlite3_stmt *st, struct err *e)
{
    json_t *rows = json_array();
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        json_array_append_new(rows, db_row_json(st));
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) {
        json_decref(rows);
        db_fail(e, c->h, "query");
        return NULL;
    }
    return rows;
}

/* --- replies built in SQL ----------------------------------------------------------------
 *
 * Decision: the replies clients poll (the list, an experiment with a page of its runs, a
 * run with its ranks and results) are one statement each whose JSON functions write the
 * reply text. With thousands of experiments stored, building them through jansson (a
 * tree per row, every stored spec and summary parsed, the reply dumped) cost more than
 * the queries, and a run read in five statements took five read transactions, each
 * locking the WAL's shared memory with fcntl (perf, tests/bench/RESULTS.md). The
 * statements are generated at open from the ones that read the rows (db_reply_defs):
 * every column shows as db_col_json shows it, each rule with its SQL twin here
 * (ddpb_iso_time, json(), true/false), so the rules and the column lists are written
 * once. Times go through ddpb_iso_time, the formatter db_col_json uses. */

/* Appends "'name', expr" for each result column of sql, expr showing column name of
 * the row alias t as db_col_json would. */
static int db_reply_pairs(sqlite3 *h, sqlite3_str *out, const char *sql, struct err *e)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(h, sql, -1, &st, NULL) != SQLITE_OK)
        return db_fail(e, h, "prepare a reply's rows");
    for (int i = 0; i < sqlite3_column_count(st); i++) {
        const char *n = sqlite3_column_name(st, i);
        sqlite3_str_appendf(out, "%s'%q', ", i ? ", " : "", n);
        if (db_col_is_time(n))
            sqlite3_str_appendf(out, "ddpb_iso_time(t.\"%w\")", n);
        else if (db_col_is_json(n))
            sqlite3_str_appendf(out, "json(t.\"%w\")", n);
        else if (db_col_is_bool(n))
            sqlite3_str_appendf(out,
                                "CASE WHEN t.\"%w\" IS NULL THEN NULL WHEN t.\"%w\" "
                                "THEN json('true') ELSE json('false') END",
                                n, n);
        else
            sqlite3_str_appendf(out, "t.\"%w\"", n);
    }
    sqlite3_finalize(st);
    return 0;
}

/* --- the replies' rows --- */

#define DB_EXPERIMENT_SELECT                                                                   \
    "SELECT e.id, e.name, e.workload, e.status, e.n_runs, e.runs_finished, e.created_at, "     \
    "e.started_at, e.finished_at, round(e.finished_at - e.started_at, 3) AS duration_s, "      \
    "e.summary"
#define DB_EXPERIMENT_WHERE                                                                    \
    " WHERE (?1 IS NULL OR e.status = ?1) AND (?2 IS NULL OR instr(e.name, ?2) > 0) "          \
    "AND (?3 IS NULL OR e.workload = ?3) "                                                     \
    "AND (?4 IS NULL OR json_extract(e.spec, '$.model') = ?4 OR EXISTS (SELECT 1 FROM runs r " \
    "  WHERE r.experiment_id = e.id AND json_extract(r.spec, '$.model') = ?4)) "               \
    "AND (?5 IS NULL OR e.created_at >= ?5) AND (?6 IS NULL OR e.created_at < ?6)"
/* A list page: ?1..?6 the filter (db_bind_filter), ?7 limit, ?8 offset. */
static const char SQL_LIST_PAGE[] = DB_EXPERIMENT_SELECT
    " FROM experiments e" DB_EXPERIMENT_WHERE " ORDER BY e.id DESC LIMIT ?7 OFFSET ?8";
static const char SQL_GET_EXPERIMENT[] = DB_EXPERIMENT_SELECT
    ", e.spec FROM experiments e WHERE e.id = ?1";
/* A page of an experiment's runs (?2 limit, ?3 offset), without their specs and results. */
static const char SQL_EXPERIMENT_RUNS[] =
    "SELECT id, point, params, world_size, status, progress, created_at, started_at, "
    "finished_at, finished_at - started_at AS duration_s, error, error_rank, network_profile, "
    "nodes, ranks_per_node FROM runs WHERE experiment_id = ?1 ORDER BY point LIMIT ?2 OFFSET "
    "?3";

static const char SQL_GET_RUN[] =
    "SELECT id, experiment_id, point, params, world_size, status, progress, created_at, "
    "started_at, finished_at, finished_at - started_at AS duration_s, error, error_rank, spec, "
    "emulated, oversubscribed, network_profile, nodes, ranks_per_node FROM runs WHERE id = ?1";
static const char SQL_RUN_RANKS[] =
    "SELECT rank, node, host, pid, cpus, gpu, status, exit_code, signal, error, started_at, "
    "finished_at FROM run_ranks WHERE run_id = ?1 ORDER BY rank";
static const char SQL_RUN_COLLECTIVES[] =
    "SELECT repeat, op, dtype, redop, algorithm, inplace, bytes, count, iters, time_us_min, "
    "time_us_median, time_us_p95, time_us_mean, time_us_max, algbw_gbs, busbw_gbs, wrong "
    "FROM collectives WHERE run_id = ?1 ORDER BY repeat, op, inplace, bytes";
/* what the daemon did to the run (migration 016), run_s: seconds after the run started */
static const char SQL_RUN_EVENTS[] =
    "SELECT e.seq, e.happened_at, round(e.happened_at - r.started_at, 3) AS run_s, e.type, "
    "e.action, e.fault, e.kind, e.rank, e.node, e.step, e.detail FROM run_events e JOIN runs "
    "r ON r.id = e.run_id WHERE e.run_id = ?1 ORDER BY e.seq";
static const char SQL_RUN_FAULTS[] =
    "SELECT f.fault, f.kind, f.rank, f.node, f.at_step, f.at_s, f.duration_s, f.injected, "
    "f.injected_at, round(f.injected_at - r.started_at, 3) AS run_s, f.step, f.restored_at, "
    "f.note FROM run_faults f JOIN runs r ON r.id = f.run_id WHERE f.run_id = ?1 "
    "ORDER BY f.fault";
static const char SQL_RUN_ENV[] =
    "SELECT rank, env FROM run_env WHERE run_id = ?1 ORDER BY rank";
static const char SQL_RUN_EPOCHS[] =
    "SELECT repeat, epoch, samples, train_loss, train_acc, test_loss, test_acc, time_s, "
    "test_acc_per_class FROM epochs WHERE run_id = ?1 ORDER BY repeat, epoch";

static const char SQL_RUN_MEMORY[] =
    "SELECT rank, repeat, params_bytes, buffers_bytes, grads_bytes, optimizer_bytes, "
    "comm_bytes, activations_bytes, peak_rss_bytes, device_peak_bytes FROM rank_memory "
    "WHERE run_id = ?1 ORDER BY repeat, rank";
/* per rank and repeat, over its windows: cores busy and context switches per second */
static const char SQL_RUN_USAGE[] =
    "SELECT rank, repeat, count(*) AS windows, sum(steps) AS steps, "
    "round(sum(wall_s), 6) AS wall_s, round(sum(user_s), 6) AS user_s, "
    "round(sum(sys_s), 6) AS sys_s, round(sum(user_s + sys_s) / sum(wall_s), 4) AS cpu_util, "
    "sum(voluntary_cs) AS voluntary_cs, sum(involuntary_cs) AS involuntary_cs, "
    "max(rss_bytes) AS rss_bytes, avg(gpu_util_pct) AS gpu_util_pct, "
    "avg(gpu_mem_util_pct) AS gpu_mem_util_pct, avg(gpu_power_w) AS gpu_power_w "
    "FROM rank_usage WHERE run_id = ?1 GROUP BY repeat, rank ORDER BY repeat, rank";

/* elastic runs: their generations, in order (members and joiners as arrays) */
static const char SQL_RUN_GENERATIONS[] =
    "SELECT gen, world, members, joiners, reason, "
    "published_at, lost_at, detected_at, resumed_at, regroup_ms, commit_step, lost_steps "
    "FROM generations WHERE run_id = ?1 ORDER BY gen";

/* --- the replies --- */

/* One reply: an object of row's columns (none when row is NULL), then each array of
 * rows, then tail's pairs ("'key', expr, ..."). */
struct db_reply_def {
    const char *row;
    struct {
        const char *key, *sql;
    } arrays[9];
    const char *tail;
};

static const struct db_reply_def db_reply_defs[DB_REPLY_COUNT] = {
    [DB_REPLY_RUN] = {SQL_GET_RUN,
                      {{"ranks", SQL_RUN_RANKS},
                       {"collectives", SQL_RUN_COLLECTIVES},
                       {"epochs", SQL_RUN_EPOCHS},
                       {"env", SQL_RUN_ENV},
                       {"memory", SQL_RUN_MEMORY},
                       {"usage", SQL_RUN_USAGE},
                       {"events", SQL_RUN_EVENTS},
                       {"faults", SQL_RUN_FAULTS},
                       {"generations", SQL_RUN_GENERATIONS}},
                      NULL},
    [DB_REPLY_EXPERIMENT] =
        {SQL_GET_EXPERIMENT,
         {{"runs", SQL_EXPERIMENT_RUNS}},
         "'runs_total', (SELECT count(*) FROM runs WHERE experiment_id = ?1), "
         "'runs_limit', ?2, 'runs_offset', ?3"},
    [DB_REPLY_LIST] = {NULL,
                       {{"items", SQL_LIST_PAGE}},
                       "'total', (SELECT count(*) FROM experiments e" DB_EXPERIMENT_WHERE "), "
                       "'limit', ?7, 'offset', ?8"},
    /* an unfiltered list: its count reads an index instead of every row */
    [DB_REPLY_LIST_ALL] = {NULL,
                           {{"items", SQL_LIST_PAGE}},
                           "'total', (SELECT count(*) FROM experiments), 'limit', ?7, "
                           "'offset', ?8"},
};

/* d's statement: one row (none when d->row matches nothing) of one column, the reply.
 * Owned (sqlite3_free), or NULL with e set. */
static char *db_reply_sql(sqlite3 *h, const struct db_reply_def *d, struct err *e)
{
    sqlite3_str *out = sqlite3_str_new(h);
    sqlite3_str_appendall(out, "SELECT json_object(");
    int rc = d->row ? db_reply_pairs(h, out, d->row, e) : 0;
    const char *sep = d->row ? ", " : "";
    for (size_t i = 0; rc == 0 && i < sizeof d->arrays / sizeof *d->arrays && d->arrays[i].key;
         i++, sep = ", ") {
        /* rows in sql's order: a subquery with ORDER BY under an aggregate is never
         * flattened, so json_group_array sees them in that order */
        sqlite3_str_appendf(out, "%s'%q', (SELECT json_group_array(json_object(", sep,
                            d->arrays[i].key);
        rc = db_reply_pairs(h, out, d->arrays[i].sql, e);
        sqlite3_str_appendf(out, ")) FROM (%s) AS t)", d->arrays[i].sql);
    }
    if (d->tail)
        sqlite3_str_appendf(out, "%s%s", sep, d->tail);
    sqlite3_str_appendall(out, ")");
    if (d->row)
        sqlite3_str_appendf(out, " FROM (%s) AS t", d->row);
    char *sql = sqlite3_str_finish(out);
    if (rc == 0 && !sql)
        rc = err_set(e, ERR_NOMEM, NULL, "out of memory");
    if (rc < 0) {
        sqlite3_free(sql);
        return NULL;
    }
    return sql;
}

/* Steps st, a bound reply statement: its one row's text is the reply (owned, free());
 * no row is ERR_NOT_FOUND naming what and id. Resets st. */
static char *db_reply_step(struct db_conn *c, sqlite3_stmt *st, const char *what, int64_t id,
                           struct err *e)
{
    char *out = NULL;
    int rc = sqlite3_step(st);
    const char *text = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
    if (rc == SQLITE_DONE)
        err_set(e, ERR_NOT_FOUND, NULL, "%s %lld not found", what, (long long)id);
    else if (!text)
        db_fail(e, c->h, what);
    else if (!(out = strdup(text)))
        err_set(e, ERR_NOMEM, NULL, "out of memory");
    sqlite3_reset(st);
    return out;
}

/* Reply which with ?1.. bound to args[0..nargs); args[0] is the id a missing row names.
 * Owned text (free()), or NULL with e set. */
static char *db_reply_text(struct db *db, enum db_reply which, const int64_t *args, int nargs,
                           const char *what, struct err *e)
{
    struct db_conn *c = db_reader_acquire(db);
    char *out = NULL;
    sqlite3_stmt *st = db_stmt(c, db->reply_sql[which], e);
    if (st) {
        for (int i = 0; i < nargs; i++)
            sqlite3_bind_int64(st, i + 1, args[i]);
        out = db_reply_step(c, st, what, args[0], e);
    }
    db_reader_release(db, c);
    return out;
}

/* A reply text as jansson, for callers that read its fields. Owned, or NULL with e. */
static json_t *db_reply_json(char *text, struct err *e)
{
    if (!text)
        return NULL;
    json_error_t je;
    json_t *v = json_loads(text, 0, &je);
    free(text);
    if (!v)
        err_set(e, ERR_INTERNAL, NULL, "database reply is no JSON: %s", je.text);
    return v;
}

/* --- open, migrate, close ------------------------------------------------------------ */

static int db_user_version(struct db_conn *c)
{
    sqlite3_stmt *st = NULL;
    int v = -1;
    if (sqlite3_prepare_v2(c->h, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* 0 when no row references a missing parent (PRAGMA foreign_key_check finds none). */
static int db_foreign_keys_hold(struct db_conn *c, struct err *e)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(c->h, "PRAGMA foreign_key_check", -1, &st, NULL) != SQLITE_OK)
        return db_fail(e, c->h, "foreign_key_check");
    int rc = sqlite3_step(st);
    char table[64] = "";
    if (rc == SQLITE_ROW)
        snprintf(table, sizeof table, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    if (rc == SQLITE_ROW)
        return err_set(e, ERR_INTERNAL, NULL, "a row of %s references a missing parent", table);
    return rc == SQLITE_DONE ? 0 : db_fail(e, c->h, "foreign_key_check");
}

/* Applies m in one transaction; a foreign key it left dangling undoes it. */
static int db_migrate_one(struct db_conn *c, const struct db_migration *m, struct err *e)
{
    char pragma[64];
    snprintf(pragma, sizeof pragma, "PRAGMA user_version=%d;", m->version);
    if (db_exec(c, "BEGIN IMMEDIATE", e) < 0)
        return -1;
    if (db_exec(c, m->sql, e) < 0 || db_exec(c, pragma, e) < 0 ||
        db_foreign_keys_hold(c, e) < 0) {
        sqlite3_exec(c->h, "ROLLBACK", NULL, NULL, NULL);
        return err_prefix(e, "migration %03d_%s", m->version, m->name);
    }
    if (db_exec(c, "COMMIT", e) < 0)
        return -1;
    log_info("database migrated to %03d_%s", m->version, m->name);
    return 0;
}

static int db_migrate(struct db_conn *c, struct err *e)
{
    int have = db_user_version(c);
    if (have < 0)
        return db_fail(e, c->h, "read user_version");
    if (have > db_migration_count)
        return err_set(e, ERR_CONFLICT, NULL,
                       "database schema version %d is newer than this ddpbenchd (%d): "
                       "upgrade ddpbenchd or use another state directory",
                       have, db_migration_count);
    /* Foreign keys are off while a migration runs (a table rebuild drops a parent table,
     * which would otherwise cascade into its children) and checked before it commits:
     * SQLite's procedure for schema changes ALTER TABLE cannot make. The pragma has no
     * effect inside a transaction, so it is set around it. */
    if (have < db_migration_count && db_exec(c, "PRAGMA foreign_keys=OFF;", e) < 0)
        return -1;
    int rc = 0;
    for (int i = have; rc == 0 && i < db_migration_count; i++)
        rc = db_migrate_one(c, &db_migrations[i], e);
    if (db_exec(c, "PRAGMA foreign_keys=ON;", rc < 0 ? NULL : e) < 0)
        return -1;
    return rc;
}

static int db_check_readers(struct db_conn *c, struct err *e);

/* Process-wide SQLite settings, before SQLite initialises (they cannot change after).
 * Decision: no memory statistics. With them on (SQLite's default) every allocation and
 * free takes one global mutex to count bytes nobody reads here, and the HTTP threads
 * reading at once spent a quarter of a list request's CPU contending for it (perf,
 * tests/bench/RESULTS.md). */
static pthread_once_t db_process_once = PTHREAD_ONCE_INIT;

static void db_process_config(void)
{
    if (sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0) != SQLITE_OK)
        log_debug("db: SQLite was initialised before db_open; memory statistics stay on");
}

struct db *db_open(const char *path, struct err *e)
{
    pthread_once(&db_process_once, db_process_config);
    struct db *db = calloc(1, sizeof *db);
    if (!db) {
        err_set(e, ERR_NOMEM, NULL, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&db->wlock, NULL);
    pthread_mutex_init(&db->plock, NULL);
    pthread_cond_init(&db->pfree, NULL);
    if (db_conn_open(&db->writer, path, true, e) < 0 || db_migrate(&db->writer, e) < 0 ||
        db_check_readers(&db->writer, e) < 0)
        goto fail;
    for (int i = 0; i < DB_REPLY_COUNT; i++)
        if (!(db->reply_sql[i] = db_reply_sql(db->writer.h, &db_reply_defs[i], e)))
            goto fail;
    for (int i = 0; i < DB_READERS; i++)
        if (db_conn_open(&db->readers[i], path, false, e) < 0)
            goto fail;
    return db;
fail:
    db_close(db);
    return NULL;
}

void db_close(struct db *db)
{
    if (!db)
        return;
    for (int i = 0; i < DB_READERS; i++)
        if (db->readers[i].h)
            db_conn_close(&db->readers[i]);
    if (db->writer.h) {
        sqlite3_exec(db->writer.h, "PRAGMA optimize;", NULL, NULL, NULL);
        db_conn_close(&db->writer);
    }
    pthread_mutex_destroy(&db->wlock);
    pthread_mutex_destroy(&db->plock);
    pthread_cond_destroy(&db->pfree);
    for (int i = 0; i < DB_REPLY_COUNT; i++)
        sqlite3_free(db->reply_sql[i]);
    free(db);
}

int db_schema_version(struct db *db)
{
    pthread_mutex_lock(&db->wlock);
    int v = db_user_version(&db->writer);
    pthread_mutex_unlock(&db->wlock);
    return v;
}

/* --- experiments ---------------------------------------------------------------------- */

static const char SQL_INSERT_EXPERIMENT[] =
    "INSERT INTO experiments (name, workload, spec, status, n_runs, created_at) "
    "VALUES (?1, ?2, ?3, 'queued', ?4, ?5)";
/* The distinct values an experiment's runs cover; the same expression as
 * schema/004_experiment_summary.sql, which fills it for experiments made before. */
#define DB_SUMMARY_OF(field)                                                                   \
    "json((SELECT json_group_array(v) FROM (SELECT DISTINCT " field " AS v FROM runs r "       \
    "WHERE r.experiment_id = ?1 AND v IS NOT NULL ORDER BY v)))"
#define DB_SUMMARY_OF_SPEC(key) DB_SUMMARY_OF("json_extract(r.spec, '$." key "')")
/* One key of the summary a line: clang-format would indent each macro call after the last,
 * past the column limit. */
/* clang-format off */
static const char SQL_EXPERIMENT_SUMMARY[] =
    "UPDATE experiments SET summary = json_object("
    "'models', " DB_SUMMARY_OF_SPEC("model") ", "
    "'ops', " DB_SUMMARY_OF_SPEC("op") ", "
    "'backends', " DB_SUMMARY_OF_SPEC("backend") ", "
    "'strategies', " DB_SUMMARY_OF_SPEC("strategy") ", "
    "'world_sizes', " DB_SUMMARY_OF("r.world_size") ") WHERE id = ?1";
/* clang-format on */
static const char SQL_INSERT_RUN[] =
    "INSERT INTO runs (experiment_id, point, params, spec, world_size, status, created_at, "
    "network_profile, processes) VALUES (?1, ?2, ?3, ?4, ?5, 'queued', ?6, ?7, ?8)";

/* The processes a new run starts (migration 019): 1 for a single-process strategy, else
 * its world_size; 0 when its spec text does not parse (stored as it is, failed at start). */
static int db_new_run_processes(const struct db_new_run *run)
{
    json_t *spec = json_loads(run->spec_json, 0, NULL);
    int n = spec ? spec_processes_of(spec) : 0;
    json_decref(spec);
    return n;
}

int db_create_experiment(struct db *db, const char *name, const char *workload,
                         const char *spec_json, const struct db_new_run *runs, size_t n_runs,
                         int64_t *id_out, struct err *e)
{
    struct db_conn *c = db_write_begin(db, e);
    if (!c)
        return -1;
    double now = clock_wall_s();
    int rc = -1;
    sqlite3_stmt *st = db_stmt(c, SQL_INSERT_EXPERIMENT, e);
    if (!st)
        goto out;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, workload, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, spec_json, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 4, (int64_t)n_runs);
    sqlite3_bind_double(st, 5, now);
    if (db_step_done(c, st, e) < 0)
        goto out;
    int64_t id = sqlite3_last_insert_rowid(c->h);
    for (size_t i = 0; i < n_runs; i++) {
        st = db_stmt(c, SQL_INSERT_RUN, e);
        if (!st)
            goto out;
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_int64(st, 2, (int64_t)i);
        sqlite3_bind_text(st, 3, runs[i].params_json, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 4, runs[i].spec_json, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(st, 5, runs[i].world_size);
        sqlite3_bind_double(st, 6, now);
        db_bind_text_or_null(st, 7, runs[i].network_profile);
        int processes = db_new_run_processes(&runs[i]);
        if (processes > 0 && processes != runs[i].world_size)
            sqlite3_bind_int(st, 8, processes);
        else
            sqlite3_bind_null(st, 8);
        if (db_step_done(c, st, e) < 0)
            goto out;
    }
    st = db_stmt(c, SQL_EXPERIMENT_SUMMARY, e);
    if (!st)
        goto out;
    sqlite3_bind_int64(st, 1, id);
    if (db_step_done(c, st, e) < 0)
        goto out;
    *id_out = id;
    rc = 0;
out:
    return db_write_end(db, rc, e);
}

/* Seconds at the millisecond resolution the timestamps are shown with, so the list (built
 * by SQLite's JSON functions) and the experiment (by jansson) print the same number. */
static void db_bind_filter(sqlite3_stmt *st, const struct db_experiment_filter *f)
{
    db_bind_text_or_null(st, 1, f->status);
    db_bind_text_or_null(st, 2, f->name);
    db_bind_text_or_null(st, 3, f->workload);
    db_bind_text_or_null(st, 4, f->model);
    if (f->created_after > 0)
        sqlite3_bind_double(st, 5, f->created_after);
    if (f->created_before > 0)
        sqlite3_bind_double(st, 6, f->created_before);
}

static bool db_filter_is_empty(const struct db_experiment_filter *f)
{
    return !f->status && !f->name && !f->workload && !f->model && f->created_after <= 0 &&
           f->created_before <= 0;
}

char *db_list_experiments(struct db *db, const struct db_experiment_filter *f, struct err *e)
{
    struct db_conn *c = db_reader_acquire(db);
    char *out = NULL;
    sqlite3_stmt *st = db_stmt(
        c, db->reply_sql[db_filter_is_empty(f) ? DB_REPLY_LIST_ALL : DB_REPLY_LIST], e);
    if (st) {
        db_bind_filter(st, f);
        sqlite3_bind_int64(st, 7, f->limit);
        sqlite3_bind_int64(st, 8, f->offset);
        out = db_reply_step(c, st, "list experiments", 0, e);
    }
    db_reader_release(db, c);
    return out;
}

char *db_get_experiment_text(struct db *db, int64_t id, int64_t runs_limit, int64_t runs_offset,
                             struct err *e)
{
    const int64_t args[] = {id, runs_limit, runs_offset};
    return db_reply_text(db, DB_REPLY_EXPERIMENT, args, 3, "experiment", e);
}

json_t *db_get_experiment_page(struct db *db, int64_t id, int64_t runs_limit,
                               int64_t runs_offset, struct err *e)
{
    return db_reply_json(db_get_experiment_text(db, id, runs_limit, runs_offset, e), e);
}

json_t *db_get_experiment(struct db *db, int64_t id, struct err *e)
{
    return db_get_experiment_page(db, id, SPEC_MAX_RUNS, 0, e);
}

/* --- runs ------------------------------------------------------------------------------ */

char *db_get_run_text(struct db *db, int64_t id, struct err *e)
{
    return db_reply_text(db, DB_REPLY_RUN, &id, 1, "run", e);
}

json_t *db_get_run(struct db *db, int64_t id, struct err *e)
{
    return db_reply_json(db_get_run_text(db, id, e), e);
}

static const char SQL_LIST_QUEUED[] =
    "SELECT id, experiment_id, world_size, spec FROM runs WHERE status = 'queued' "
    "ORDER BY id LIMIT ?1";

/* q->spec from q->spec_json; a text that is no valid run spec leaves q->spec_err set. */
static void db_queued_parse_spec(struct db_queued_run *q)
{
    json_error_t je;
    json_t *spec = json_loads(q->spec_json, 0, &je);
    if (!spec)
        err_set(&q->spec_err, ERR_INVALID, NULL, "stored spec: invalid JSON: %s", je.text);
    else if (spec_from_json(spec, &q->spec, &q->spec_err) < 0) {
        err_prefix(&q->spec_err, "stored spec");
        memset(&q->spec, 0, sizeof q->spec);
    }
    json_decref(spec);
}

int db_list_queued(struct db *db, size_t max, struct db_queued_run **out, size_t *n,
                   struct err *e)
{
    *out = NULL;
    *n = 0;
    struct db_conn *c = db_reader_acquire(db);
    int rc = -1;
    sqlite3_stmt *st = db_stmt(c, SQL_LIST_QUEUED, e);
    struct db_queued_run *runs = calloc(max ? max : 1, sizeof *runs);
    if (!st || !runs)
        goto done;
    sqlite3_bind_int64(st, 1, (int64_t)max);
    size_t k = 0;
    int step;
    while (k < max && (step = sqlite3_step(st)) == SQLITE_ROW) {
        runs[k].id = sqlite3_column_int64(st, 0);
        runs[k].experiment_id = sqlite3_column_int64(st, 1);
        runs[k].world_size = sqlite3_column_int(st, 2);
        runs[k].spec_json = strdup((const char *)sqlite3_column_text(st, 3));
        if (!runs[k].spec_json) {
            sqlite3_reset(st);
            db_queued_runs_free(runs, k);
            runs = NULL;
            goto done;
        }
        db_queued_parse_spec(&runs[k]);
        if (runs[k].spec_err.code == ERR_OK) /* what the scheduler places: processes */
            runs[k].world_size = spec_processes(&runs[k].spec);
        k++;
    }
    sqlite3_reset(st);
    *out = runs;
    *n = k;
    runs = NULL;
    rc = 0;
done:
    if (rc < 0 && e && e->code == ERR_OK)
        err_set(e, ERR_NOMEM, NULL, "out of memory");
    free(runs);
    db_reader_release(db, c);
    return rc;
}

void db_queued_runs_free(struct db_queued_run *runs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(runs[i].spec_json);
    free(runs);
}

static const char SQL_COUNT_RUNS[] = "SELECT count(*) FROM runs WHERE status = ?1";

int64_t db_count_runs(struct db *db, enum db_run_status status)
{
    struct db_conn *c = db_reader_acquire(db);
    int64_t n = -1;
    sqlite3_stmt *st = db_stmt(c, SQL_COUNT_RUNS, NULL);
    if (st) {
        sqlite3_bind_text(st, 1, db_run_status_name(status), -1, SQLITE_STATIC);
        if (sqlite3_step(st) == SQLITE_ROW)
            n = sqlite3_column_int64(st, 0);
        sqlite3_reset(st);
    }
    db_reader_release(db, c);
    return n;
}

/* --- a run's life ------------------------------------------------------------------------ */

static const char SQL_RUN_STARTING[] =
    "UPDATE runs SET status = 'starting', started_at = ?2 WHERE id = ?1 AND status = 'queued'";
static const char SQL_EXPERIMENT_STARTED[] =
    "UPDATE experiments SET status = 'running', started_at = coalesce(started_at, ?2) "
    "WHERE id = (SELECT experiment_id FROM runs WHERE id = ?1) AND status = 'queued'";

int db_run_starting(struct db *db, int64_t run_id, struct err *e)
{
    struct db_conn *c = db_write_begin(db, e);
    if (!c)
        return -1;
    int rc = -1;
    double now = clock_wall_s();
    sqlite3_stmt *st = db_stmt(c, SQL_RUN_STARTING, e);
    if (!st)
        goto out;
    sqlite3_bind_int64(st, 1, run_id);
    sqlite3_bind_double(st, 2, now);
    if (db_step_done(c, st, e) < 0)
        goto out;
    if (sqlite3_changes(c->h) != 1) {
        err_set(e, ERR_CONFLICT, NULL, "run %lld is not queued", (long long)run_id);
        goto out;
    }
    st = db_stmt(c, SQL_EXPERIMENT_STARTED, e);
    if (!st)
        goto out;
    sqlite3_bind_int64(st, 1, run_id);
    sqlite3_bind_double(st, 2, now);
    rc = db_step_done(c, st, e);
out:
    return db_write_end(db, rc, e);
}

static const char SQL_RANK_SPAWNED[] =
    "INSERT OR REPLACE INTO run_ranks (run_id, rank, node, pid, cpus, status, started_at) "
    "VALUES (?1, ?2, ?3, ?4, ?5, 'starting', ?6)";

int db_rank_spawned(struct db *db, int64_t run_id, int rank, const char *node, int pid,
                    const char *cpus, struct err *e)
{
    return db_write_one(db, e, SQL_RANK_SPAWNED, "Iititd", run_id, rank, node, pid, cpus,
                        clock_wall_s());
}

static const char SQL_RUN_OVERSUBSCRIBED[] = "UPDATE runs SET oversubscribed = 1 WHERE id = ?1";

int db_run_oversubscribed(struct db *db, int64_t run_id, struct err *e)
{
    return db_write_one(db, e, SQL_RUN_OVERSUBSCRIBED, "I", run_id);
}

static const char SQL_RUN_EMULATED[] = "UPDATE runs SET emulated = ?2 WHERE id = ?1";
static const char SQL_RANK_GPU[] =
    "UPDATE run_ranks SET gpu = ?3 WHERE run_id = ?1 AND rank = ?2";

int db_run_gpu_placement(struct db *db, int64_t run_id, bool emulated, const int *gpu, int n,
                         struct err *e)
{
    struct db_conn *c = db_write_begin(db, e);
    if (!c)
        return -1;
    sqlite3_stmt *st = db_stmt(c, SQL_RUN_EMULATED, e);
    int rc = -1;
    if (!st)
        goto out;
    sqlite3_bind_int64(st, 1, run_id);
    sqlite3_bind_int(st, 2, emulated);
    if (db_step_done(c, st, e) < 0)
        goto out;
    for (int r = 0; r < n; r++) {
        if (!(st = db_stmt(c, SQL_RANK_GPU, e)))
            goto out;
        sqlite3_bind_int64(st, 1, run_id);
        sqlite3_bind_int(st, 2, r);
        sqlite3_bind_int(st, 3, gpu[r]);
        if (db_step_done(c, st, e) < 0)
            goto out;
    }
    rc = 0;
out:
    return db_write_end(db, rc, e);
}

static const char SQL_RANK_HELLO[] =
    "UPDATE run_ranks SET host = ?3, status = 'running' WHERE run_id = ?1 AND rank = ?2";
static const char SQL_RUN_RUNNING[] =
    "UPDATE runs SET status = 'running' WHERE id = ?1 AND status = 'starting' AND "
    "(SELECT count(*) FROM run_ranks WHERE run_id = ?1 AND status IN ('running', 'done')) "
    "= coalesce(processes, world_size)";
/* the processes that say hello: world_size, or 1 for a single-process run (migration 019) */
static const char SQL_RUN_WORLD[] =
    "SELECT coalesce(processes, world_size) FROM runs WHERE id = ?1";

/* One integer column of run run_id, read by sql (a SELECT of one column by ?1 = id).
 * Returns 0 and *out, or -1 with e set: ERR_NOT_FOUND naming the run when it has no row. */
static int db_run_column(struct db_conn *c, const char *sql, int64_t run_id, int64_t *out,
                         struct err *e)
{
    sqlite3_stmt *st = db_stmt(c, sql, e);
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, run_id);
    bool found = sqlite3_step(st) == SQLITE_ROW;
    *out = found ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_reset(st);
    if (!found)
        return err_set(e, ERR_NOT_FOUND, NULL, "run %lld not found", (long long)run_id), -1;
    return 0;
}

int db_rank_hello(struct db *db, int64_t run_id, int rank, const char *host, int world_size,
                  struct err *e)
{
    struct db_conn *c = db_write_begin(db, e);
    if (!c)
        return -1;
    int rc = -1;
    int64_t have = -1;
    if (db_run_column(c, SQL_RUN_WORLD, run_id, &have, e) < 0)
        goto out;
    if (have != world_size) {
        err_set(e, ERR_INVALID, "world_size", "rank %d reported world_size %d, run has %lld",
                rank, world_size, (long long)have);
        goto out;
    }
    sqlite3_stmt *st = db_stmt(c, SQL_RANK_HELLO, e);
    if (!st)
        goto out;
    sqlite3_bind_int64(st, 1, run_id);
    sqlite3_bind_int(st, 2, rank);
    db_bind_text_or_null(st, 3, host);
    if (db_step_done(c, st, e) < 0)
        goto out;
    st = db_stmt(c, SQL_RUN_RUNNING, e);
    if (!st)
        goto out;
    sqlite3_bind_int64(st, 1, run_id);
    rc = db_step_done(c, st, e);
out:
    return db_write_end(db, rc, e);
}

static const char SQL_RANK_ENV[] =
    "INSERT OR REPLACE INTO run_env (run_id, rank, env) VALUES (?1, ?2, ?3)";

int db_rank_env(struct db *db, int64_t run_id, int rank, const json_t *env, struct err *e)
{
    char *text = json_dumps(env, JSON_COMPACT);
    if (!text)
        return err_set(e, ERR_NOMEM, NULL, "cannot encode env");
    struct db_conn *c = db_write_begin(db, e);
    int rc = -1;
    if (c) {
        sqlite3_stmt *st = db_stmt(c, SQL_RANK_ENV, e);
        if (st) {
            sqlite3_bind_int64(st, 1, run_id);
            sqlite3_bind_int(st, 2, rank);
            sqlite3_bind_text(st, 3, text, -1, SQLITE_TRANSIENT);
            rc = db_step_done(c, st, e);
        }
        rc = db_write_end(db, rc, e);
    }
    free(text);
    return rc;
}

static const char SQL_RANK_EXITED[] =
    "UPDATE run_ranks SET status = ?3, exit_code = ?4, signal = ?5, "
    "error = coalesce(?6, error), finished_at = ?7 WHERE run_id = ?1 AND rank = ?2";

int db_rank_exited(struct db *db, int64_t run_id, int rank, const char *status, int exit_code,
                   int signal, const char *error, struct err *e)
{
    return db_write_one(db, e, SQL_RANK_EXITED, "Iitootd", run_id, rank, status, exit_code,
                        signal > 0 ? signal : -1, error, clock_wall_s());
}

static const char SQL_RUN_PROGRESS[] = "UPDATE runs SET progress = ?2 WHERE id = ?1";

int db_run_progress(struct db *db, int64_t run_id, double fraction, struct err *e)
{
    return db_write_one(db, e, SQL_RUN_PROGRESS, "Id", run_id,
                        fraction < 0   ? 0.0
                        : fraction > 1 ? 1.0
                                       : fraction);
}

static const char SQL_INSERT_COLLECTIVE[] =
    "INSERT OR REPLACE INTO collectives (run_id, repeat, op, dtype, redop, algorithm, "
    "inplace, bytes, count, iters, time_us_min, time_us_median, time_us_p95, time_us_mean, "
    "time_us_max, algbw_gbs, busbw_gbs, wrong) VALUES "
    "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)";

int db_insert_collective(struct db *db, int64_t run_id, const struct report_collective *r,
                         struct err *e)
{
    return db_write_one(db, e, SQL_INSERT_COLLECTIVE, "IittttiIIidddddddI", run_id, r->repeat,
                        r->op, r->dtype, r->redop, r->algorithm, (int)r->inplace, r->bytes,
                        r->count, r->iters, r->time_us_min, r->time_us_median, r->time_us_p95,
                        r->time_us_mean, r->time_us_max, r->algbw_gbs, r->busbw_gbs, r->wrong);
}

/* The experiment's status follows from its runs' statuses: any active or queued run keeps
 * it running (queued when none has started), otherwise the worst outcome wins. */
static const char SQL_EXPERIMENT_REFRESH[] =
    "UPDATE experiments SET "
    "status = CASE "
    "  WHEN EXISTS (SELECT 1 FROM runs WHERE experiment_id = ?1 AND status IN "
    "               ('queued', 'starting', 'running')) THEN "
    "    CASE WHEN EXISTS (SELECT 1 FROM runs WHERE experiment_id = ?1 AND status <> 'queued') "
    "         THEN 'running' ELSE 'queued' END "
    "  WHEN NOT EXISTS (SELECT 1 FROM runs WHERE experiment_id = ?1 AND status <> 'succeeded') "
    "    THEN 'succeeded' "
    "  WHEN EXISTS (SELECT 1 FROM runs WHERE experiment_id = ?1 AND status = 'failed') "
    "    THEN 'failed' "
    "  WHEN EXISTS (SELECT 1 FROM runs WHERE experiment_id = ?1 AND status = 'interrupted') "
    "    THEN 'interrupted' "
    "  ELSE 'cancelled' END, "
    "finished_at = CASE WHEN EXISTS (SELECT 1 FROM runs WHERE experiment_id = ?1 AND status IN "
    "               ('queued', 'starting', 'running')) THEN NULL ELSE ?2 END, "
    "runs_finished = (SELECT count(*) FROM runs WHERE experiment_id = ?1 AND status IN "
    "               ('succeeded', 'failed', 'cancelled', 'interrupted')) "
    "WHERE id = ?1";
static const char SQL_RUN_FINISH[] =
    "UPDATE runs SET status = ?2, finished_at = ?3, error = ?4, error_rank = ?5, "
    "progress = CASE WHEN ?2 = 'succeeded' THEN 1 ELSE progress END WHERE id = ?1";
static const char SQL_RUN_EXPERIMENT[] = "SELECT experiment_id FROM runs WHERE id = ?1";

static int db_refresh_experiment(struct db_conn *c, int64_t exp_id, double now, struct err *e)
{
    sqlite3_stmt *st = db_stmt(c, SQL_EXPERIMENT_REFRESH, e);
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, exp_id);
    sqlite3_bind_double(st, 2, now);
    return db_step_done(c, st, e);
}

int db_run_finish(struct db *db, int64_t run_id, enum db_run_status status, const char *error,
                  int error_rank, struct err *e)
{
    struct db_conn *c = db_write_begin(db, e);
    if (!c)
        return -1;
    int rc = -1;
    double now = clock_wall_s();
    int64_t exp_id = -1;
    if (db_run_column(c, SQL_RUN_EXPERIMENT, run_id, &exp_id, e) < 0)
        goto out;
    sqlite3_stmt *st = db_stmt(c, SQL_RUN_FINISH, e);
    if (!st)
        goto out;
    sqlite3_bind_int64(st, 1, run_id);
    sqlite3_bind_text(st, 2, db_run_status_name(status), -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 3, now);
    db_bind_text_or_null(st, 4, error);
    if (error_rank >= 0)
        sqlite3_bind_int(st, 5, error_rank);
    if (db_step_done(c, st, e) < 0)
        goto out;
    rc = db_refresh_experiment(c, exp_id, now, e);
out:
    return db_write_end(db, rc, e);
}

static const char SQL_RECOVER_RANKS[] =
    "UPDATE run_ranks SET status = 'killed', finished_at = ?1, "
    "error = coalesce(error, 'ddpbenchd stopped while this rank was active') "
    "WHERE status IN ('starting', 'running') AND run_id IN "
    "(SELECT id FROM runs WHERE status IN ('starting', 'running'))";
static const char SQL_RECOVER_EXPERIMENTS[] =
    "SELECT DISTINCT experiment_id FROM runs WHERE status IN ('starting', 'running')";
static const char SQL_RECOVER_RUNS[] =
    "UPDATE runs SET status = 'interrupted', finished_at = ?1, "
    "error = 'ddpbenchd stopped while this run was active' "
    "WHERE status IN ('starting', 'running')";

static const char SQL_RECOVER_ORPHANS[] =
    "SELECT k.run_id, k.rank, k.pid, k.node FROM run_ranks k JOIN runs r ON r.id = k.run_id "
    "WHERE r.status IN ('starting', 'running') AND k.status IN ('starting', 'running') "
    "AND k.pid IS NOT NULL";

static int db_collect_orphans(struct db_conn *c, struct db_orphan **out, size_t *n,
                              struct err *e)
{
    sqlite3_stmt *st = db_stmt(c, SQL_RECOVER_ORPHANS, e);
    if (!st)
        return -1;
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            struct db_orphan *grown = realloc(*out, cap * sizeof **out);
            if (!grown) {
                sqlite3_reset(st);
                return err_set(e, ERR_NOMEM, NULL, "out of memory");
            }
            *out = grown;
        }
        struct db_orphan *o = &(*out)[(*n)++];
        *o = (struct db_orphan){sqlite3_column_int64(st, 0), sqlite3_column_int(st, 1),
                                sqlite3_column_int(st, 2), ""};
        const unsigned char *node = sqlite3_column_text(st, 3);
        snprintf(o->node, sizeof o->node, "%s", node ? (const char *)node : "");
    }
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? 0 : db_fail(e, c->h, "orphans");
}

int db_recover(struct db *db, int64_t *n_out, struct db_orphan **orphans, size_t *n_orphans,
               struct err *e)
{
    *n_out = 0;
    *orphans = NULL;
    *n_orphans = 0;
    struct db_conn *c = db_write_begin(db, e);
    if (!c)
        return -1;
    int rc = -1;
    double now = clock_wall_s();
    json_t *exps = NULL;
    sqlite3_stmt *st = db_stmt(c, SQL_RECOVER_EXPERIMENTS, e);
    if (!st || !(exps = db_rows_json(c, st, e)) ||
        db_collect_orphans(c, orphans, n_orphans, e) < 0)
        goto out;
    st = db_stmt(c, SQL_RECOVER_RANKS, e);
    if (!st)
        goto out;
    sqlite3_bind_double(st, 1, now);
    if (db_step_done(c, st, e) < 0)
        goto out;
    st = db_stmt(c, SQL_RECOVER_RUNS, e);
    if (!st)
        goto out;
    sqlite3_bind_double(st, 1, now);
    if (db_step_done(c, st, e) < 0)
        goto out;
    *n_out = sqlite3_changes(c->h);
    size_t i;
    json_t *row;
    rc = 0;
    json_array_foreach(exps, i, row)
    {
        int64_t exp_id = json_integer_value(json_object_get(row, "experiment_id"));
        if (db_refresh_experiment(c, exp_id, now, e) < 0) {
            rc = -1;
            break;
        }
    }
out:
    json_decref(exps);
    if (rc < 0) {
        free(*orphans);
        *orphans = NULL;
        *n_orphans = 0;
    }
    return db_write_end(db, rc, e);
}

/* --- training figures -------------------------------------------------------------------- */

static const char SQL_INSERT_STEP[] =
    "INSERT OR REPLACE INTO steps (run_id, rank, repeat, epoch, step, warmup, samples, loss, "
    "data_ms, forward_ms, backward_ms, comm_ms, comm_exposed_ms, optimizer_ms, step_ms, "
    "bytes_sent, stage, p2p_ms, p2p_bytes, bubble_ms, loader_cpu_ms, read_bytes, generation, "
    "world, at, grad_norm, loss_scale, skipped) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
    "?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, "
    "?28)";

int db_insert_step(struct db *db, int64_t run_id, int rank, const struct report_step *r,
                   struct err *e)
{
    /* D, J, o: a phase or bytes_sent below 0 (not observable by the engine, report.h) is
     * stored as NULL, and so are the pipeline's figures of a run without one (-1); skipped
     * is 0 or 1 on a step with a loss scale (fp16), NULL on the others */
    int skipped = r->skipped ? 1 : r->loss_scale >= 0 ? 0 : -1;
    return db_write_one(
        db, e, SQL_INSERT_STEP, "IiiiIiidDDDDDDdJoDJDDJoodDDo", run_id, rank, r->repeat,
        r->epoch, r->step, (int)r->warmup, r->samples, r->loss, r->data_ms, r->forward_ms,
        r->backward_ms, r->comm_ms, r->comm_exposed_ms, r->optimizer_ms, r->step_ms,
        r->bytes_sent, r->stage, r->p2p_ms, r->p2p_bytes, r->bubble_ms, r->loader_cpu_ms,
        r->read_bytes, r->gen, r->world, clock_wall_s(), r->grad_norm, r->loss_scale, skipped);
}

static const char SQL_INSERT_GENERATION[] =
    "INSERT OR REPLACE INTO generations (run_id, gen, world, members, joiners, reason, "
    "published_at, lost_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

int db_insert_generation(struct db *db, int64_t run_id, const struct db_generation *g,
                         struct err *e)
{
    return db_write_one(db, e, SQL_INSERT_GENERATION, "IiitttdD", run_id, g->gen, g->world,
                        g->members, g->joiners, g->reason, g->published_at, g->lost_at);
}

/* the first detection and the first resumption count: later reports of the same event
 * (every rank detects) keep them */
static const char SQL_GENERATION_DETECTED[] =
    "UPDATE generations SET detected_at = ?3 WHERE run_id = ?1 AND gen = ?2 AND "
    "detected_at IS NULL";
static const char SQL_GENERATION_RESUMED[] =
    "UPDATE generations SET resumed_at = ?3, commit_step = ?4, lost_steps = ?5, "
    "regroup_ms = coalesce(regroup_ms, ?6) WHERE run_id = ?1 AND gen = ?2 AND "
    "resumed_at IS NULL";
static const char SQL_GENERATION_REGROUPED[] =
    "UPDATE generations SET regroup_ms = ?3 WHERE run_id = ?1 AND gen = ?2 AND "
    "regroup_ms IS NULL";

int db_generation_regrouped(struct db *db, int64_t run_id, int gen, double regroup_ms,
                            struct err *e)
{
    return db_write_one(db, e, SQL_GENERATION_REGROUPED, "IiD", run_id, gen, regroup_ms);
}

int db_generation_detected(struct db *db, int64_t run_id, int gen, double at, struct err *e)
{
    return db_write_one(db, e, SQL_GENERATION_DETECTED, "Iid", run_id, gen, at);
}

int db_generation_resumed(struct db *db, int64_t run_id, int gen, double at,
                          int64_t commit_step, int64_t lost_steps, double regroup_ms,
                          struct err *e)
{
    return db_write_one(db, e, SQL_GENERATION_RESUMED, "IidJJD", run_id, gen, at, commit_step,
                        lost_steps, regroup_ms);
}

static const char SQL_INSERT_EPOCH[] =
    "INSERT OR REPLACE INTO epochs (run_id, repeat, epoch, samples, train_loss, train_acc, "
    "test_loss, test_acc, time_s, test_acc_per_class) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";

int db_insert_epoch(struct db *db, int64_t run_id, const struct report_epoch *r, struct err *e)
{
    /* D: a figure below 0 (not measured) is stored as NULL; so is an absent per-class array
     * (t: NULL text binds NULL) */
    char *per_class = r->test_acc_per_class ? json_dumps(r->test_acc_per_class,
                                                         JSON_COMPACT | JSON_REAL_PRECISION(10))
                                            : NULL; /* owned, freed below */
    if (r->test_acc_per_class && !per_class)
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    int rc = db_write_one(db, e, SQL_INSERT_EPOCH, "IiiIDDDDdt", run_id, r->repeat, r->epoch,
                          r->samples, r->train_loss, r->train_acc, r->test_loss, r->test_acc,
                          r->time_s, per_class);
    free(per_class);
    return rc;
}

static const char SQL_INSERT_MEMORY[] =
    "INSERT OR REPLACE INTO rank_memory (run_id, rank, repeat, params_bytes, buffers_bytes, "
    "grads_bytes, optimizer_bytes, comm_bytes, activations_bytes, peak_rss_bytes, "
    "device_peak_bytes) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";

int db_insert_memory(struct db *db, int64_t run_id, int rank, const struct report_memory *m,
                     struct err *e)
{
    /* J: a figure the engine cannot tell (-1) is stored as NULL */
    return db_write_one(db, e, SQL_INSERT_MEMORY, "IiiJJJJJJIJ", run_id, rank, m->repeat,
                        m->params_bytes, m->buffers_bytes, m->grads_bytes, m->optimizer_bytes,
                        m->comm_bytes, m->activations_bytes, m->peak_rss_bytes,
                        m->device_peak_bytes);
}

static const char SQL_INSERT_USAGE[] =
    "INSERT OR REPLACE INTO rank_usage (run_id, rank, repeat, epoch, steps, wall_s, user_s, "
    "sys_s, voluntary_cs, involuntary_cs, rss_bytes, gpu_util_pct, gpu_mem_util_pct, "
    "gpu_power_w) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";

int db_insert_usage(struct db *db, int64_t run_id, int rank, const struct report_usage *u,
                    struct err *e)
{
    return db_write_one(db, e, SQL_INSERT_USAGE, "IiiiIdddIIJDDD", run_id, rank, u->repeat,
                        u->epoch, u->steps, u->wall_s, u->user_s, u->sys_s, u->voluntary_cs,
                        u->involuntary_cs, u->rss_bytes, u->gpu_util_pct, u->gpu_mem_util_pct,
                        u->gpu_power_w);
}

static const char SQL_INSERT_TRACE[] =
    "INSERT OR REPLACE INTO trace_steps (run_id, rank, repeat, step, clock_offset_ns, spans, "
    "ops) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

int db_insert_trace(struct db *db, int64_t run_id, int rank, const struct report_trace *t,
                    struct err *e)
{
    char *spans = json_dumps(t->spans, JSON_COMPACT), *ops = json_dumps(t->ops, JSON_COMPACT);
    int rc = spans && ops ? db_write_one(db, e, SQL_INSERT_TRACE, "IiiIItt", run_id, rank,
                                         t->repeat, t->step, t->clock_offset_ns, spans, ops)
                          : err_set(e, ERR_NOMEM, NULL, "out of memory");
    free(spans);
    free(ops);
    return rc;
}

static const char SQL_INSERT_GRADS[] =
    "INSERT OR REPLACE INTO run_grads (run_id, repeat, steps, backward_ns, tensors) "
    "VALUES (?1, ?2, ?3, ?4, ?5)";

int db_insert_grads(struct db *db, int64_t run_id, const struct report_grads *g, struct err *e)
{
    char *tensors = json_dumps(g->tensors, JSON_COMPACT);
    int rc = tensors ? db_write_one(db, e, SQL_INSERT_GRADS, "IiIIt", run_id, g->repeat,
                                    g->steps, g->backward_ns, tensors)
                     : err_set(e, ERR_NOMEM, NULL, "out of memory");
    free(tensors);
    return rc;
}

static const char SQL_INSERT_PIPE[] =
    "INSERT OR REPLACE INTO run_pipe (run_id, repeat, stages, micro_batch, tied_bytes, layers, "
    "cuts, batch, batch_forward_ns, batch_backward_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, "
    "?9, ?10)";

int db_insert_pipe(struct db *db, int64_t run_id, const struct report_pipe *p, struct err *e)
{
    char *layers = json_dumps(p->layers, JSON_COMPACT),
         *cuts = json_dumps(p->cuts, JSON_COMPACT);
    int rc = layers && cuts
                 ? db_write_one(db, e, SQL_INSERT_PIPE, "IiiiIttJJJ", run_id, p->repeat,
                                p->stages, p->micro_batch, p->tied_bytes, layers, cuts,
                                (int64_t)p->batch, p->batch_forward_ns, p->batch_backward_ns)
                 : err_set(e, ERR_NOMEM, NULL, "out of memory");
    free(layers);
    free(cuts);
    return rc;
}

#define DB_STR_(x) #x
#define DB_STR(x) DB_STR_(x)
static const char SQL_INSERT_FIT[] =
    "INSERT OR IGNORE INTO fits (experiment_id, model_version, backend, device, op, "
    "algorithm, world_size, nodes, network_profile, alpha_s, beta_s_per_byte, "
    "gamma_s_per_byte, r2, worst_resid, points, min_bytes, max_bytes, created_at) VALUES "
    "(?1, " DB_STR(PERF_MODEL_VERSION) ", ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, "
                                       "?13, ?14, ?15, ?16, ?17)";

int db_store_fits(struct db *db, const struct perf_fit *fits, size_t n, struct err *e)
{
    struct db_conn *c = db_write_begin(db, e);
    if (!c)
        return -1;
    int rc = 0;
    double now = clock_wall_s();
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const struct perf_fit *f = &fits[i];
        sqlite3_stmt *st = db_stmt(c, SQL_INSERT_FIT, e);
        if (!st) {
            rc = -1;
            break;
        }
        db_bind(st, "IttttiitddDddiIId", f->experiment_id, f->backend, f->device, f->op,
                f->algorithm, f->world_size, f->nodes, f->network_profile, f->alpha_s,
                f->beta_s, isfinite(f->gamma_s) ? f->gamma_s : -1.0, f->r2, f->worst_resid,
                f->points, f->min_bytes, f->max_bytes, now);
        rc = db_step_done(c, st, e);
    }
    return db_write_end(db, rc, e);
}

static const char SQL_RUN_EXISTS[] = "SELECT 1 FROM runs WHERE id = ?1";
static const char SQL_RUN_STEPS[] =
    "SELECT rank, repeat, epoch, step, warmup, samples, loss, data_ms, forward_ms, "
    "backward_ms, comm_ms, comm_exposed_ms, optimizer_ms, step_ms, bytes_sent, stage, p2p_ms, "
    "p2p_bytes, bubble_ms, loader_cpu_ms, read_bytes, generation, world, at, grad_norm, "
    "loss_scale, skipped FROM steps "
    "WHERE run_id = ?1 AND (?2 < 0 OR rank = ?2) AND (?3 OR warmup = 0) "
    "ORDER BY repeat, step, rank";

static bool db_exists(struct db_conn *c, const char *sql, int64_t id, struct err *e)
{
    sqlite3_stmt *st = db_stmt(c, sql, e);
    if (!st)
        return false;
    sqlite3_bind_int64(st, 1, id);
    bool found = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_reset(st);
    return found;
}

/* {"columns": [names], "rows": [[values]...]} of a bound statement. Owned. */
static json_t *db_rows_compact(struct db_conn *c, sqlite3_stmt *st, struct err *e)
{
    json_t *cols = json_array(), *rows = json_array();
    int n = sqlite3_column_count(st);
    for (int i = 0; i < n; i++)
        json_array_append_new(cols, json_string(sqlite3_column_name(st, i)));
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        json_t *row = json_array();
        for (int i = 0; i < n; i++)
            json_array_append_new(row, db_col_json(st, i));
        json_array_append_new(rows, row);
    }
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) {
        json_decref(cols);
        json_decref(rows);
        db_fail(e, c->h, "query");
        return NULL;
    }
    return json_pack("{s:o, s:o}", "columns", cols, "rows", rows);
}

json_t *db_get_steps(struct db *db, int64_t run_id, int rank, bool include_warmup,
                     struct err *e)
{
    struct db_conn *c = db_reader_acquire(db);
    json_t *out = NULL;
    int64_t world = -1;
    if (db_run_column(c, SQL_RUN_WORLD, run_id, &world, e) < 0)
        goto done;
    /* a rank the run does not have is not an empty list: it names a missing resource */
    if (rank >= world) {
        err_set(e, ERR_NOT_FOUND, "rank", "run %lld has no rank %d: its world size is %lld",
                (long long)run_id, rank, (long long)world);
        goto done;
    }
    sqlite3_stmt *st = db_stmt(c, SQL_RUN_STEPS, e);
    if (!st)
        goto done;
    sqlite3_bind_int64(st, 1, run_id);
    sqlite3_bind_int(st, 2, rank);
    sqlite3_bind_int(st, 3, include_warmup);
    out = db_rows_compact(c, st, e);
done:
    db_reader_release(db, c);
    return out;
}

/* The run's pipeline stages (its spec's pipeline; 1 for a run from before it existed). */
static const char SQL_RUN_PIPELINE[] =
    "SELECT coalesce(json_extract(spec, '$.pipeline'), 1) FROM runs WHERE id = ?1";
static const char SQL_TRACE_RANKS[] =
    "SELECT rank, node, host FROM run_ranks WHERE run_id = ?1 ORDER BY rank";
static const char SQL_TRACE_STEPS[] =
    "SELECT rank, repeat, step, clock_offset_ns, spans, ops FROM trace_steps "
    "WHERE run_id = ?1 AND (?2 < 0 OR rank = ?2) AND (?3 < 0 OR repeat = ?3) "
    "ORDER BY repeat, step, rank LIMIT ?4 OFFSET ?5";
static const char SQL_RUN_TRACE_DROPPED[] = "SELECT trace_dropped FROM runs WHERE id = ?1";

/* The rows of q's page, and whether more follow (one row past the page is read). */
static json_t *db_trace_page(struct db_conn *c, int64_t run_id, const struct db_trace_query *q,
                             bool *more, struct err *e)
{
    sqlite3_stmt *st = db_stmt(c, SQL_TRACE_STEPS, e);
    if (!st)
        return NULL;
    sqlite3_bind_int64(st, 1, run_id);
    sqlite3_bind_int(st, 2, q->rank);
    sqlite3_bind_int(st, 3, q->repeat);
    sqlite3_bind_int64(st, 4, q->limit + 1);
    sqlite3_bind_int64(st, 5, q->offset);
    json_t *steps = db_rows_compact(c, st, e);
    json_t *rows = json_object_get(steps, "rows");
    *more = json_array_size(rows) > (size_t)q->limit;
    if (*more)
        json_array_remove(rows, json_array_size(rows) - 1);
    return steps;
}

/* the run's events (migration 016) for the trace's instant events: unix_s, not an ISO
 * time, so the trace can place them */
static const char SQL_TRACE_EVENTS[] =
    "SELECT seq, happened_at AS unix_s, type, action, fault, kind, rank, node, step, detail "
    "FROM run_events WHERE run_id = ?1 ORDER BY seq";

json_t *db_get_trace(struct db *db, int64_t run_id, const struct db_trace_query *q,
                     struct err *e)
{
    struct db_conn *c = db_reader_acquire(db);
    json_t *out = NULL, *ranks = NULL, *steps = NULL, *events = NULL;
    int64_t world = -1, pipeline = 1, dropped = 0;
    bool more = false;
    sqlite3_stmt *st;
    if (db_run_column(c, SQL_RUN_WORLD, run_id, &world, e) < 0 ||
        db_run_column(c, SQL_RUN_PIPELINE, run_id, &pipeline, e) < 0 ||
        db_run_column(c, SQL_RUN_TRACE_DROPPED, run_id, &dropped, e) < 0 ||
        !(st = db_stmt(c, SQL_TRACE_RANKS, e)))
        goto done;
    sqlite3_bind_int64(st, 1, run_id);
    if (!(ranks = db_rows_json(c, st, e)) || !(steps = db_trace_page(c, run_id, q, &more, e)))
        goto done;
    if (!(st = db_stmt(c, SQL_TRACE_EVENTS, e)))
        goto done;
    sqlite3_bind_int64(st, 1, run_id);
    if (!(events = db_rows_json(c, st, e)))
        goto done;
    out = json_pack("{s:I, s:I, s:O, s:O, s:O, s:{s:I, s:I, s:b, s:I}}", "world_size",
                    (json_int_t)world, "pipeline", (json_int_t)(pipeline > 1 ? pipeline : 1),
                    "ranks", ranks, "steps", steps, "events", events, "page", "offset",
                    (json_int_t)q->offset, "limit", (json_int_t)q->limit, "more", more,
                    "dropped_at_ingest", (json_int_t)dropped);
    if (!out)
        err_set(e, ERR_NOMEM, NULL, "out of memory");
done:
    json_decref(ranks);
    json_decref(steps);
    json_decref(events);
    db_reader_release(db, c);
    return out;
}

static const char SQL_RUN_SET_TRACE_DROPPED[] =
    "UPDATE runs SET trace_dropped = ?2 WHERE id = ?1";

int db_set_trace_dropped(struct db *db, int64_t run_id, int64_t dropped, struct err *e)
{
    return db_write_one(db, e, SQL_RUN_SET_TRACE_DROPPED, "II", run_id, dropped);
}

/* --- run events and faults (migration 016) -------------------------------------------- */

static const char SQL_INSERT_RUN_EVENT[] =
    "INSERT INTO run_events (run_id, seq, happened_at, type, action, fault, kind, rank, "
    "node, step, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";
static const char SQL_INSERT_RUN_FAULT[] =
    "INSERT OR REPLACE INTO run_faults (run_id, fault, kind, rank, node, at_step, at_s, "
    "duration_s) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";
static const char SQL_RUN_FAULT_OUTCOME[] =
    "UPDATE run_faults SET injected = ?3, injected_at = ?4, step = ?5, restored_at = ?6, "
    "note = ?7 WHERE run_id = ?1 AND fault = ?2";

int db_insert_run_event(struct db *db, int64_t run_id, int64_t seq,
                        const struct db_run_event *ev, struct err *e)
{
    return db_write_one(db, e, SQL_INSERT_RUN_EVENT, "IIdttotooJt", run_id, seq, ev->at,
                        ev->type, ev->action, ev->fault, ev->kind, ev->rank, ev->node, ev->step,
                        ev->detail);
}

int db_insert_run_fault(struct db *db, int64_t run_id, int fault, const struct spec_fault *f,
                        struct err *e)
{
    return db_write_one(db, e, SQL_INSERT_RUN_FAULT, "IitooJDD", run_id, fault, f->kind,
                        f->rank, f->node, f->at_step, f->at_s,
                        f->duration_s > 0 ? f->duration_s : -1.0);
}

int db_run_fault_outcome(struct db *db, int64_t run_id, int fault, bool injected, double at,
                         int64_t step, double restored_at, const char *note, struct err *e)
{
    return db_write_one(db, e, SQL_RUN_FAULT_OUTCOME, "IiiDJDt", run_id, fault,
                        injected ? 1 : 0, injected ? at : -1.0, injected ? step : -1,
                        restored_at, note);
}

/* --- experiment versions (migration 015: bumped by triggers) ----------------------------- */

static const char SQL_EXPERIMENT_VERSION[] = "SELECT version FROM experiments WHERE id = ?1";
static const char SQL_COLLECTIVE_DONE_VERSIONS[] =
    "SELECT id, version FROM experiments WHERE workload = 'collective' AND status IN "
    "('succeeded', 'failed', 'cancelled', 'interrupted') ORDER BY id DESC LIMIT ?1";

/* Appends "id:version," of each row of st (two integer columns) to key; -1 when it is
 * full. */
static int db_version_append(sqlite3_stmt *st, char *key, size_t cap, size_t *len, bool *found)
{
    int rc = 0;
    *found = false;
    while (sqlite3_step(st) == SQLITE_ROW) {
        int n = snprintf(key + *len, cap - *len, "%lld:%lld,",
                         (long long)sqlite3_column_int64(st, 0),
                         (long long)sqlite3_column_int64(st, 1));
        *found = true;
        if (n < 0 || (size_t)n >= cap - *len) {
            rc = -1;
            break;
        }
        *len += (size_t)n;
    }
    sqlite3_reset(st);
    return rc;
}

int db_experiments_version(struct db *db, const int64_t *ids, size_t n, size_t scan, char *key,
                           size_t cap, struct err *e)
{
    struct db_conn *c = db_reader_acquire(db);
    size_t len = 0;
    int rc = -1;
    bool found;
    key[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        int64_t v;
        sqlite3_stmt *st = db_stmt(c, SQL_EXPERIMENT_VERSION, e);
        if (!st)
            goto done;
        sqlite3_bind_int64(st, 1, ids[i]);
        found = sqlite3_step(st) == SQLITE_ROW;
        v = found ? sqlite3_column_int64(st, 0) : 0;
        sqlite3_reset(st);
        if (!found) {
            err_set(e, ERR_NOT_FOUND, NULL, "experiment %lld not found", (long long)ids[i]);
            goto done;
        }
        int w = snprintf(key + len, cap - len, "%lld:%lld,", (long long)ids[i], (long long)v);
        if (w < 0 || (size_t)w >= cap - len)
            goto too_long;
        len += (size_t)w;
    }
    if (len + 2 >= cap)
        goto too_long;
    key[len++] = '|';
    key[len] = '\0';
    sqlite3_stmt *st = db_stmt(c, SQL_COLLECTIVE_DONE_VERSIONS, e);
    if (!st)
        goto done;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)scan);
    if (db_version_append(st, key, cap, &len, &found) < 0)
        goto too_long;
    rc = 0;
    goto done;
too_long:
    err_set(e, ERR_INVALID, NULL, "experiment version key longer than %zu bytes", cap);
done:
    db_reader_release(db, c);
    return rc;
}

/* The newest stored calibration of this model version and how many there are: a
 * calibration is never updated nor deleted (021_calibrations.sql), so the pair changes
 * exactly when one is stored. */
static const char SQL_CALIB_VERSION[] =
    "SELECT count(*), coalesce(max(id), 0) FROM calibrations WHERE model_version = " DB_STR(
        PERF_MODEL_VERSION);

int db_calibrations_version(struct db *db, char *key, size_t cap, struct err *e)
{
    struct db_conn *c = db_reader_acquire(db);
    size_t len = strlen(key);
    bool found;
    int rc = -1;
    sqlite3_stmt *st = db_stmt(c, SQL_CALIB_VERSION, e);
    if (st && len + 5 < cap) {
        memcpy(key + len, "|cal:", 6);
        len += 5;
        rc = db_version_append(st, key, cap, &len, &found);
        if (rc < 0)
            err_set(e, ERR_INVALID, NULL, "calibration version key longer than %zu bytes", cap);
    } else if (st) {
        err_set(e, ERR_INVALID, NULL, "calibration version key longer than %zu bytes", cap);
    }
    db_reader_release(db, c);
    return rc;
}

/* --- nodes of a cluster (migration 009; the leader is their only writer) ------------------ */

static const char SQL_NODE_UPSERT[] =
    "INSERT INTO nodes (name, address, role, cpu_slots, gpus, engines, network_profile, state, "
    "joined_at, last_heartbeat_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9) "
    "ON CONFLICT (name) DO UPDATE SET address = ?2, role = ?3, cpu_slots = ?4, gpus = ?5, "
    "engines = ?6, network_profile = ?7, state = ?8, joined_at = ?9, last_heartbeat_at = ?9";
static const char SQL_NODE_STATE[] =
    "UPDATE nodes SET state = ?2, last_heartbeat_at = coalesce(?3, last_heartbeat_at) "
    "WHERE name = ?1";
static const char SQL_NODES_ALL[] =
    "SELECT name, address, role, cpu_slots, gpus, engines, network_profile, state, joined_at, "
    "last_heartbeat_at FROM nodes ORDER BY joined_at, name";

int db_node_upsert(struct db *db, const struct db_node *n, struct err *e)
{
    return db_write_one(db, e, SQL_NODE_UPSERT, "tttiitttd", n->name, n->address, n->role,
                        n->cpu_slots, n->gpus, n->engines, n->network_profile, n->state,
                        n->joined_at);
}

int db_node_set_state(struct db *db, const char *name, const char *state, double heartbeat_at,
                      struct err *e)
{
    return db_write_one(db, e, SQL_NODE_STATE, "ttD", name, state, heartbeat_at);
}

static const char SQL_NODE_DELETE[] = "DELETE FROM nodes WHERE name = ?1";

int db_node_delete(struct db *db, const char *name, struct err *e)
{
    return db_write_one(db, e, SQL_NODE_DELETE, "t", name);
}

static const char SQL_NODES_FORGET_LEFT[] =
    "DELETE FROM nodes WHERE state = 'left' AND last_heartbeat_at < ?1";

int db_nodes_forget_left(struct db *db, double before, struct err *e)
{
    return db_write_one(db, e, SQL_NODES_FORGET_LEFT, "D", before);
}

json_t *db_list_nodes(struct db *db, struct err *e)
{
    struct db_conn *c = db_reader_acquire(db);
    json_t *out = NULL;
    sqlite3_stmt *st = db_stmt(c, SQL_NODES_ALL, e);
    if (st)
        out = db_rows_json(c, st, e);
    db_reader_release(db, c);
    return out;
}

static const char SQL_RUN_PLACEMENT[] =
    "UPDATE runs SET nodes = ?2, ranks_per_node = ?3 WHERE id = ?1";

int db_run_placement(struct db *db, int64_t run_id, int nodes, int ranks_per_node,
                     struct err *e)
{
    return db_write_one(db, e, SQL_RUN_PLACEMENT, "Iii", run_id, nodes, ranks_per_node);
}

/* --- an experiment's figures, typed (db_rows.h) ---------------------------------------- */

static const char SQL_DATA_EXPERIMENT[] =
    "SELECT id, workload, name, status, created_at FROM experiments WHERE id = ?1";
static const struct db_col db_data_experiment_cols[] = {
    DB_COL("id", DB_COL_INT64, struct db_experiment_data, id),
    DB_COL("workload", DB_COL_TEXT, struct db_experiment_data, workload),
    DB_COL("name", DB_COL_TEXT, struct db_experiment_data, name),
    DB_COL("status", DB_COL_TEXT, struct db_experiment_data, status),
    DB_COL("created_at", DB_COL_REAL, struct db_experiment_data, created_at),
};

static const char SQL_DATA_RUNS[] =
    "SELECT id, params, spec, world_size, emulated, oversubscribed, network_profile, "
    "coalesce(nodes, 1) AS nodes, coalesce(ranks_per_node, world_size) AS ranks_per_node, "
    "coalesce((SELECT json_extract(env, '$.cpus_online') FROM run_env "
    "WHERE run_env.run_id = runs.id AND rank = 0), 0) AS cpus_online, "
    "coalesce((SELECT substr(json_extract(env, '$.hostname'), 1, 63) FROM run_env "
    "WHERE run_env.run_id = runs.id AND rank = 0), '') AS host "
    "FROM runs WHERE experiment_id = ?1 ORDER BY point";
static const struct db_col db_data_run_cols[] = {
    DB_COL("id", DB_COL_INT64, struct db_data_run, id),
    DB_COL("params", DB_COL_JSON, struct db_data_run, params),
    DB_COL("spec", DB_COL_JSON, struct db_data_run, spec),
    DB_COL("world_size", DB_COL_INT, struct db_data_run, world_size),
    DB_COL("emulated", DB_COL_BOOL, struct db_data_run, emulated),
    DB_COL("oversubscribed", DB_COL_BOOL, struct db_data_run, oversubscribed),
    DB_COL("network_profile", DB_COL_TEXT, struct db_data_run, network_profile),
    DB_COL("nodes", DB_COL_INT, struct db_data_run, nodes),
    DB_COL("ranks_per_node", DB_COL_INT, struct db_data_run, ranks_per_node),
    DB_COL("cpus_online", DB_COL_INT, struct db_data_run, cpus_online),
    DB_COL("host", DB_COL_TEXT, struct db_data_run, host),
};

/* Per step of a run: the slowest rank's time (the step time), the mean phases over
 * ranks, and the spread between the fastest and the slowest rank. */
#define DB_PHASE_AVG(id, name, ...) "avg(" #name "_ms) AS " #name "_ms, "
#define DB_PHASE_COL(id, name, ...)                                                            \
    DB_COL(#name "_ms", DB_COL_REAL_OR_NEG1, struct db_step_row, phase_ms[PHASE_##id]),
/* the phases' columns are one macro among the SQL's lines: */
/* clang-format off */
static const char SQL_DATA_STEPS[] =
    "SELECT repeat, step, max(step_ms) AS step_ms, min(step_ms) AS fastest_ms, "
    "sum(samples) AS samples, "
    PHASES(DB_PHASE_AVG)
    "sum(bytes_sent) AS bytes_sent, count(*) AS ranks, sum(bubble_ms) AS bubble_ms, "
    "sum(CASE WHEN bubble_ms IS NOT NULL THEN step_ms END) AS bubble_step_ms, "
    "sum(p2p_ms) AS p2p_ms, count(p2p_ms) AS p2p_ranks, sum(p2p_bytes) AS p2p_bytes, "
    "count(p2p_bytes) AS p2p_bytes_ranks, sum(loader_cpu_ms) AS loader_cpu_ms, "
    "count(loader_cpu_ms) AS loader_ranks, sum(read_bytes) AS read_bytes, "
    "count(read_bytes) AS read_ranks FROM steps "
    "WHERE run_id = ?1 AND warmup = 0 GROUP BY repeat, step ORDER BY repeat, step";
static const struct db_col db_data_step_cols[] = {
    DB_COL("repeat", DB_COL_INT, struct db_step_row, repeat),
    DB_COL("step", DB_COL_INT64, struct db_step_row, step),
    DB_COL("step_ms", DB_COL_REAL, struct db_step_row, step_ms),
    DB_COL("fastest_ms", DB_COL_REAL, struct db_step_row, fastest_ms),
    DB_COL("samples", DB_COL_INT64, struct db_step_row, samples),
    PHASES(DB_PHASE_COL)
    DB_COL("bytes_sent", DB_COL_INT64, struct db_step_row, bytes_sent),
    DB_COL("ranks", DB_COL_INT, struct db_step_row, ranks),
    DB_COL("bubble_ms", DB_COL_REAL_OR_NEG1, struct db_step_row, bubble_ms),
    DB_COL("bubble_step_ms", DB_COL_REAL_OR_NEG1, struct db_step_row, bubble_step_ms),
    DB_COL("p2p_ms", DB_COL_REAL_OR_NEG1, struct db_step_row, p2p_ms),
    DB_COL("p2p_ranks", DB_COL_INT, struct db_step_row, p2p_ranks),
    DB_COL("p2p_bytes", DB_COL_REAL_OR_NEG1, struct db_step_row, p2p_bytes),
    DB_COL("p2p_bytes_ranks", DB_COL_INT, struct db_step_row, p2p_bytes_ranks),
    DB_COL("loader_cpu_ms", DB_COL_REAL_OR_NEG1, struct db_step_row, loader_cpu_ms),
    DB_COL("loader_ranks", DB_COL_INT, struct db_step_row, loader_ranks),
    DB_COL("read_bytes", DB_COL_REAL_OR_NEG1, struct db_step_row, read_bytes),
    DB_COL("read_ranks", DB_COL_INT, struct db_step_row, read_ranks),
};
/* clang-format on */

/* The rows db_get_run returns as JSON, read here into report.h's structs. */
static const struct db_col db_data_collective_cols[] = {
    DB_COL("repeat", DB_COL_INT, struct report_collective, repeat),
    DB_COL("op", DB_COL_TEXT, struct report_collective, op),
    DB_COL("dtype", DB_COL_TEXT, struct report_collective, dtype),
    DB_COL("redop", DB_COL_TEXT, struct report_collective, redop),
    DB_COL("algorithm", DB_COL_TEXT, struct report_collective, algorithm),
    DB_COL("inplace", DB_COL_BOOL, struct report_collective, inplace),
    DB_COL("bytes", DB_COL_INT64, struct report_collective, bytes),
    DB_COL("count", DB_COL_INT64, struct report_collective, count),
    DB_COL("iters", DB_COL_INT, struct report_collective, iters),
    DB_COL("time_us_min", DB_COL_REAL, struct report_collective, time_us_min),
    DB_COL("time_us_median", DB_COL_REAL, struct report_collective, time_us_median),
    DB_COL("time_us_p95", DB_COL_REAL, struct report_collective, time_us_p95),
    DB_COL("time_us_mean", DB_COL_REAL, struct report_collective, time_us_mean),
    DB_COL("time_us_max", DB_COL_REAL, struct report_collective, time_us_max),
    DB_COL("algbw_gbs", DB_COL_REAL, struct report_collective, algbw_gbs),
    DB_COL("busbw_gbs", DB_COL_REAL, struct report_collective, busbw_gbs),
    DB_COL("wrong", DB_COL_INT64, struct report_collective, wrong),
};
static const struct db_col db_data_epoch_cols[] = {
    DB_COL("repeat", DB_COL_INT, struct report_epoch, repeat),
    DB_COL("epoch", DB_COL_INT, struct report_epoch, epoch),
    DB_COL("samples", DB_COL_INT64, struct report_epoch, samples),
    DB_COL("train_loss", DB_COL_REAL_OR_NEG1, struct report_epoch, train_loss),
    DB_COL("train_acc", DB_COL_REAL_OR_NEG1, struct report_epoch, train_acc),
    DB_COL("test_loss", DB_COL_REAL_OR_NEG1, struct report_epoch, test_loss),
    DB_COL("test_acc", DB_COL_REAL_OR_NEG1, struct report_epoch, test_acc),
    DB_COL("time_s", DB_COL_REAL, struct report_epoch, time_s),
    DB_COL("test_acc_per_class", DB_COL_JSON, struct report_epoch, test_acc_per_class),
};

/* Per repeat, the largest rank's figures (the one whose node must hold it). */
static const char SQL_DATA_MEMORY[] =
    "SELECT repeat, max(params_bytes) AS params_bytes, max(buffers_bytes) AS buffers_bytes, "
    "max(grads_bytes) AS grads_bytes, max(optimizer_bytes) AS optimizer_bytes, "
    "max(comm_bytes) AS comm_bytes, max(activations_bytes) AS activations_bytes, "
    "max(peak_rss_bytes) AS peak_rss_bytes, max(device_peak_bytes) AS device_peak_bytes "
    "FROM rank_memory WHERE run_id = ?1 GROUP BY repeat ORDER BY repeat";
static const struct db_col db_data_memory_cols[] = {
    DB_COL("repeat", DB_COL_INT, struct db_memory_row, repeat),
    DB_COL("params_bytes", DB_COL_REAL_OR_NEG1, struct db_memory_row, params_bytes),
    DB_COL("buffers_bytes", DB_COL_REAL_OR_NEG1, struct db_memory_row, buffers_bytes),
    DB_COL("grads_bytes", DB_COL_REAL_OR_NEG1, struct db_memory_row, grads_bytes),
    DB_COL("optimizer_bytes", DB_COL_REAL_OR_NEG1, struct db_memory_row, optimizer_bytes),
    DB_COL("comm_bytes", DB_COL_REAL_OR_NEG1, struct db_memory_row, comm_bytes),
    DB_COL("activations_bytes", DB_COL_REAL_OR_NEG1, struct db_memory_row, activations_bytes),
    DB_COL("peak_rss_bytes", DB_COL_REAL_OR_NEG1, struct db_memory_row, peak_rss_bytes),
    DB_COL("device_peak_bytes", DB_COL_REAL_OR_NEG1, struct db_memory_row, device_peak_bytes),
};
/* Per repeat, every rank's windows pooled: the mean rank's cores and switch rates. */
static const char SQL_DATA_USAGE[] =
    "SELECT repeat, sum(user_s + sys_s) / sum(wall_s) AS cpu_util, "
    "sum(voluntary_cs) / sum(wall_s) AS voluntary_cs_per_s, "
    "sum(involuntary_cs) / sum(wall_s) AS involuntary_cs_per_s, "
    "avg(gpu_util_pct) AS gpu_util_pct, avg(gpu_power_w) AS gpu_power_w "
    "FROM rank_usage WHERE run_id = ?1 GROUP BY repeat ORDER BY repeat";
static const struct db_col db_data_usage_cols[] = {
    DB_COL("repeat", DB_COL_INT, struct db_usage_row, repeat),
    DB_COL("cpu_util", DB_COL_REAL_OR_NEG1, struct db_usage_row, cpu_util),
    DB_COL("voluntary_cs_per_s", DB_COL_REAL_OR_NEG1, struct db_usage_row, voluntary_cs_per_s),
    DB_COL("involuntary_cs_per_s", DB_COL_REAL_OR_NEG1, struct db_usage_row,
           involuntary_cs_per_s),
    DB_COL("gpu_util_pct", DB_COL_REAL_OR_NEG1, struct db_usage_row, gpu_util_pct),
    DB_COL("gpu_power_w", DB_COL_REAL_OR_NEG1, struct db_usage_row, gpu_power_w),
};

static const char SQL_DATA_GRADS[] =
    "SELECT repeat, steps, backward_ns, tensors FROM run_grads WHERE run_id = ?1 "
    "ORDER BY repeat";
static const struct db_col db_data_grads_cols[] = {
    DB_COL("repeat", DB_COL_INT, struct db_grads_row, repeat),
    DB_COL("steps", DB_COL_INT64, struct db_grads_row, steps),
    DB_COL("backward_ns", DB_COL_INT64, struct db_grads_row, backward_ns),
    DB_COL("tensors", DB_COL_JSON, struct db_grads_row, tensors),
};
static const char SQL_DATA_PIPE[] =
    "SELECT repeat, stages, micro_batch, tied_bytes, layers, cuts, "
    "COALESCE(batch, -1) AS batch, COALESCE(batch_forward_ns, -1) AS batch_forward_ns, "
    "COALESCE(batch_backward_ns, -1) AS batch_backward_ns FROM run_pipe "
    "WHERE run_id = ?1 ORDER BY repeat";
static const struct db_col db_data_pipe_cols[] = {
    DB_COL("repeat", DB_COL_INT, struct db_pipe_row, repeat),
    DB_COL("stages", DB_COL_INT, struct db_pipe_row, stages),
    DB_COL("micro_batch", DB_COL_INT, struct db_pipe_row, micro_batch),
    DB_COL("tied_bytes", DB_COL_INT64, struct db_pipe_row, tied_bytes),
    DB_COL("layers", DB_COL_JSON, struct db_pipe_row, layers),
    DB_COL("cuts", DB_COL_JSON, struct db_pipe_row, cuts),
    DB_COL("batch", DB_COL_INT, struct db_pipe_row, batch),
    DB_COL("batch_forward_ns", DB_COL_INT64, struct db_pipe_row, batch_forward_ns),
    DB_COL("batch_backward_ns", DB_COL_INT64, struct db_pipe_row, batch_backward_ns),
};
static const char SQL_FITS[] =
    "SELECT id, experiment_id, backend, device, op, algorithm, network_profile, world_size, "
    "nodes, alpha_s, beta_s_per_byte AS beta_s, gamma_s_per_byte AS gamma_s, r2, worst_resid, "
    "points, min_bytes, max_bytes FROM fits WHERE model_version = " DB_STR(
        PERF_MODEL_VERSION) " AND (?1 = 0 OR experiment_id = ?1) ORDER BY id";
static const struct db_col db_fit_cols[] = {
    DB_COL("id", DB_COL_INT64, struct perf_fit, id),
    DB_COL("experiment_id", DB_COL_INT64, struct perf_fit, experiment_id),
    DB_COL("backend", DB_COL_TEXT, struct perf_fit, backend),
    DB_COL("device", DB_COL_TEXT, struct perf_fit, device),
    DB_COL("op", DB_COL_TEXT, struct perf_fit, op),
    DB_COL("algorithm", DB_COL_TEXT, struct perf_fit, algorithm),
    DB_COL("network_profile", DB_COL_TEXT, struct perf_fit, network_profile),
    DB_COL("world_size", DB_COL_INT, struct perf_fit, world_size),
    DB_COL("nodes", DB_COL_INT, struct perf_fit, nodes),
    DB_COL("alpha_s", DB_COL_REAL, struct perf_fit, alpha_s),
    DB_COL("beta_s", DB_COL_REAL, struct perf_fit, beta_s),
    DB_COL("gamma_s", DB_COL_REAL_OR_NEG1, struct perf_fit, gamma_s),
    DB_COL("r2", DB_COL_REAL, struct perf_fit, r2),
    DB_COL("worst_resid", DB_COL_REAL, struct perf_fit, worst_resid),
    DB_COL("points", DB_COL_INT, struct perf_fit, points),
    DB_COL("min_bytes", DB_COL_INT64, struct perf_fit, min_bytes),
    DB_COL("max_bytes", DB_COL_INT64, struct perf_fit, max_bytes),
};

#define DB_READER(sql, cols, type)                                                             \
    {                                                                                          \
        sql, cols, sizeof cols / sizeof cols[0], sizeof(type)                                  \
    }
static const struct db_reader db_data_experiment_reader = DB_READER(
    SQL_DATA_EXPERIMENT, db_data_experiment_cols, struct db_experiment_data);
static const struct db_reader db_data_run_reader = DB_READER(SQL_DATA_RUNS, db_data_run_cols,
                                                             struct db_data_run);
static const struct db_reader db_data_step_reader = DB_READER(SQL_DATA_STEPS, db_data_step_cols,
                                                              struct db_step_row);
static const struct db_reader db_data_collective_reader = DB_READER(
    SQL_RUN_COLLECTIVES, db_data_collective_cols, struct report_collective);
static const struct db_reader db_data_epoch_reader = DB_READER(
    SQL_RUN_EPOCHS, db_data_epoch_cols, struct report_epoch);
static const struct db_reader db_data_memory_reader = DB_READER(
    SQL_DATA_MEMORY, db_data_memory_cols, struct db_memory_row);
static const struct db_reader db_data_usage_reader = DB_READER(
    SQL_DATA_USAGE, db_data_usage_cols, struct db_usage_row);
static const struct db_reader db_data_grads_reader = DB_READER(
    SQL_DATA_GRADS, db_data_grads_cols, struct db_grads_row);
static const struct db_reader db_data_pipe_reader = DB_READER(SQL_DATA_PIPE, db_data_pipe_cols,
                                                              struct db_pipe_row);
static const struct db_reader db_fit_reader = DB_READER(SQL_FITS, db_fit_cols, struct perf_fit);

/* Every typed reader, checked against its statement when the database opens. */
static const struct db_reader *const db_readers[] = {
    &db_data_experiment_reader, &db_data_run_reader,   &db_data_step_reader,
    &db_data_collective_reader, &db_data_epoch_reader, &db_data_memory_reader,
    &db_data_usage_reader,      &db_data_grads_reader, &db_fit_reader,
    &db_data_pipe_reader,
};

static int db_check_readers(struct db_conn *c, struct err *e)
{
    for (size_t i = 0; i < sizeof db_readers / sizeof db_readers[0]; i++) {
        sqlite3_stmt *st = db_stmt(c, db_readers[i]->sql, e);
        if (!st || db_rows_check(st, db_readers[i], e) < 0)
            return -1;
    }
    return 0;
}

/* The rows of reader r for one id (?1) into *rows (owned, db_rows_free). */
static int db_read_typed(struct db_conn *c, const struct db_reader *r, int64_t id, void **rows,
                         size_t *n, struct err *e)
{
    sqlite3_stmt *st = db_stmt(c, r->sql, e);
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, id);
    return db_rows_read(st, r, rows, n, e);
}

/* --- what a fault cost (issue 32) --- */

/* The fault's time: the first injected fault's event (run_events, daemon/faults.c), else
 * the first lost slot's end (generations.lost_at: a rank that died by itself). */
static const char SQL_FAULT_AT[] =
    "SELECT coalesce((SELECT min(happened_at) FROM run_events WHERE run_id = ?1 AND "
    "type = 'fault' AND action = 'inject'), (SELECT min(lost_at) FROM generations WHERE "
    "run_id = ?1))";
/* ?2: the fault's time. Detection is the first of a survivor seeing its communicator
 * fail (detected_at) and the daemon seeing the slot end (lost_at): under restart mode the
 * daemon alone notices. */
static const char SQL_ELASTIC_FIG[] =
    "SELECT (SELECT count(*) - 1 FROM generations WHERE run_id = ?1), "
    "(SELECT min(t) FROM (SELECT detected_at AS t FROM generations WHERE run_id = ?1 UNION "
    "ALL SELECT lost_at FROM generations WHERE run_id = ?1) WHERE t >= ?2) - ?2, "
    "(SELECT min(resumed_at) FROM generations WHERE run_id = ?1 AND gen > 0 AND "
    "resumed_at >= ?2) - ?2, "
    "(SELECT sum(lost_steps) FROM generations WHERE run_id = ?1 AND gen > 0)";
/* the samples of the non-warm-up steps stored in [?2, ?3), their first and last time and
 * how many steps they were */
static const char SQL_STEPS_WINDOW[] =
    "SELECT sum(samples), min(at), max(at), count(DISTINCT repeat || '/' || step) FROM steps "
    "WHERE run_id = ?1 AND warmup = 0 AND at IS NOT NULL AND at >= ?2 AND at < ?3";

/* One real of a one-row statement's column, -1 for NULL. */
static double db_col_real_or(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? -1 : sqlite3_column_double(st, i);
}

/* Global samples per second of the steps stored in [from, to): n steps span n - 1 gaps
 * between their times, so (n - 1) / n of their samples fill that span. -1 when fewer
 * than two steps. */
static double db_steps_rate(struct db_conn *c, int64_t run_id, double from, double to,
                            struct err *e)
{
    sqlite3_stmt *st = db_stmt(c, SQL_STEPS_WINDOW, e);
    double rate = -1;
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, run_id);
    sqlite3_bind_double(st, 2, from);
    sqlite3_bind_double(st, 3, to);
    if (sqlite3_step(st) == SQLITE_ROW) {
        double samples = db_col_real_or(st, 0), t0 = db_col_real_or(st, 1);
        double t1 = db_col_real_or(st, 2), n = db_col_real_or(st, 3);
        if (n >= 2 && t1 > t0)
            rate = samples * (n - 1) / n / (t1 - t0);
    }
    sqlite3_reset(st);
    return rate;
}

/* The fault's time of run_id, -1 when it had none. */
static double db_fault_at(struct db_conn *c, int64_t run_id)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(c->h, SQL_FAULT_AT, -1, &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_int64(st, 1, run_id);
    double at = sqlite3_step(st) == SQLITE_ROW ? db_col_real_or(st, 0) : -1;
    sqlite3_finalize(st);
    return at;
}

static int db_read_elastic(struct db_conn *c, struct db_data_run *run, struct err *e)
{
    struct db_elastic_fig *f = &run->elastic;
    *f = (struct db_elastic_fig){false, false, -1, -1, -1, -1, -1, -1, -1, -1};
    f->fault_at = db_fault_at(c, run->id);
    f->faulted = f->fault_at >= 0;
    sqlite3_stmt *st = db_stmt(c, SQL_ELASTIC_FIG, e);
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, run->id);
    sqlite3_bind_double(st, 2, f->fault_at);
    if (sqlite3_step(st) == SQLITE_ROW) {
        f->generations = sqlite3_column_int64(st, 0);
        f->elastic = f->generations >= 0;
        if (f->fault_at >= 0) {
            f->detect_s = db_col_real_or(st, 1);
            f->resume_s = db_col_real_or(st, 2);
            f->lost_steps = db_col_real_or(st, 3);
        }
    }
    sqlite3_reset(st);
    if (f->fault_at < 0)
        return 0;
    double resumed = f->resume_s >= 0 ? f->fault_at + f->resume_s : -1;
    f->thr_before = db_steps_rate(c, run->id, 0, f->fault_at, e);
    if (resumed >= 0) {
        sqlite3_stmt *w = db_stmt(c, SQL_STEPS_WINDOW, e);
        if (w) { /* during: whatever was done between, over the whole gap */
            sqlite3_bind_int64(w, 1, run->id);
            sqlite3_bind_double(w, 2, f->fault_at);
            sqlite3_bind_double(w, 3, resumed);
            if (sqlite3_step(w) == SQLITE_ROW && resumed > f->fault_at)
                f->thr_during = fmax(0, db_col_real_or(w, 0)) / (resumed - f->fault_at);
            sqlite3_reset(w);
        }
        f->thr_after = db_steps_rate(c, run->id, resumed, 1e300, e);
    }
    return 0;
}

/* The figures of one run (id, spec, params, world_size, emulated filled). */
static int db_read_run_figures(struct db_conn *c, struct db_data_run *run, struct err *e)
{
    void *rows;
    if (db_read_typed(c, &db_data_collective_reader, run->id, &rows, &run->ncollectives, e) < 0)
        return -1;
    run->collectives = rows;
    if (db_read_typed(c, &db_data_step_reader, run->id, &rows, &run->nsteps, e) < 0)
        return -1;
    run->steps = rows;
    if (db_read_typed(c, &db_data_epoch_reader, run->id, &rows, &run->nepochs, e) < 0)
        return -1;
    run->epochs = rows;
    if (db_read_typed(c, &db_data_memory_reader, run->id, &rows, &run->nmemory, e) < 0)
        return -1;
    run->memory = rows;
    if (db_read_typed(c, &db_data_usage_reader, run->id, &rows, &run->nusage, e) < 0)
        return -1;
    run->usage = rows;
    if (db_read_typed(c, &db_data_grads_reader, run->id, &rows, &run->ngrads, e) < 0)
        return -1;
    run->grads = rows;
    if (db_read_typed(c, &db_data_pipe_reader, run->id, &rows, &run->npipes, e) < 0)
        return -1;
    run->pipes = rows;
    return db_read_elastic(c, run, e);
}

static const char SQL_COLLECTIVE_DONE[] =
    "SELECT id FROM experiments WHERE workload = 'collective' AND status IN ('succeeded', "
    "'failed', 'cancelled', 'interrupted') ORDER BY id DESC LIMIT ?1";

/* The ids a statement selects, given at most max (?1), into ids[0..*n). */
static int db_ids_upto(struct db *db, const char *sql, int64_t *ids, size_t max, size_t *n,
                       struct err *e)
{
    struct db_conn *c = db_reader_acquire(db);
    sqlite3_stmt *st = db_stmt(c, sql, e);
    *n = 0;
    if (st) {
        sqlite3_bind_int64(st, 1, (sqlite3_int64)max);
        while (*n < max && sqlite3_step(st) == SQLITE_ROW)
            ids[(*n)++] = sqlite3_column_int64(st, 0);
        sqlite3_reset(st);
    }
    db_reader_release(db, c);
    return st ? 0 : -1;
}

int db_finished_collectives(struct db *db, int64_t *ids, size_t max, size_t *n, struct err *e)
{
    return db_ids_upto(db, SQL_COLLECTIVE_DONE, ids, max, n, e);
}

int db_run_experiment_id(struct db *db, int64_t run_id, int64_t *exp_id, struct err *e)
{
    struct db_conn *c = db_reader_acquire(db);
    int rc = db_run_column(c, SQL_RUN_EXPERIMENT, run_id, exp_id, e);
    db_reader_release(db, c);
    return rc;
}

int db_get_fits(struct db *db, int64_t exp_id, struct perf_fit **out, size_t *n, struct err *e)
{
    struct db_conn *c = db_reader_acquire(db);
    void *rows = NULL;
    int rc = db_read_typed(c, &db_fit_reader, exp_id, &rows, n, e);
    db_reader_release(db, c);
    *out = rows;
    for (size_t i = 0; rc == 0 && i < *n; i++)
        if ((*out)[i].gamma_s < 0) /* NULL: not separated */
            (*out)[i].gamma_s = NAN;
    return rc;
}

int db_get_experiment_data(struct db *db, int64_t id, struct db_experiment_data *out,
                           struct err *e)
{
    memset(out, 0, sizeof *out);
    struct db_conn *c = db_reader_acquire(db);
    void *rows = NULL;
    size_t n = 0;
    int rc = db_read_typed(c, &db_data_experiment_reader, id, &rows, &n, e);
    if (rc == 0 && n == 0)
        rc = err_set(e, ERR_NOT_FOUND, NULL, "experiment %lld not found", (long long)id);
    if (rc == 0)
        memcpy(out, rows, sizeof *out);
    db_rows_free(&db_data_experiment_reader, rows, n);
    if (rc == 0 && db_read_typed(c, &db_data_run_reader, id, &rows, &out->nruns, e) < 0)
        rc = -1;
    else if (rc == 0)
        out->runs = rows;
    for (size_t i = 0; rc == 0 && i < out->nruns; i++)
        rc = db_read_run_figures(c, &out->runs[i], e);
    db_reader_release(db, c);
    return rc;
}

void db_experiment_data_free(struct db_experiment_data *d)
{
    for (size_t i = 0; i < d->nruns; i++) {
        struct db_data_run *run = &d->runs[i];
        db_rows_free(&db_data_collective_reader, run->collectives, run->ncollectives);
        db_rows_free(&db_data_step_reader, run->steps, run->nsteps);
        db_rows_free(&db_data_epoch_reader, run->epochs, run->nepochs);
        db_rows_free(&db_data_memory_reader, run->memory, run->nmemory);
        db_rows_free(&db_data_usage_reader, run->usage, run->nusage);
        db_rows_free(&db_data_grads_reader, run->grads, run->ngrads);
        db_rows_free(&db_data_pipe_reader, run->pipes, run->npipes);
    }
    db_rows_free(&db_data_run_reader, d->runs, d->nruns);
    memset(d, 0, sizeof *d);
}

/* --- cancel and delete -------------------------------------------------------------------- */

static const char SQL_EXPERIMENT_EXISTS[] = "SELECT 1 FROM experiments WHERE id = ?1";
static const char SQL_CANCEL_QUEUED[] =
    "UPDATE runs SET status = 'cancelled', finished_at = ?3, error = 'cancelled before it "
    "started' WHERE status = 'queued' AND ((?1 > 0 AND experiment_id = ?1) OR id = ?2)";
static const char SQL_QUEUED_RUNS[] =
    "SELECT id FROM runs WHERE status = 'queued' AND ((?1 > 0 AND experiment_id = ?1) OR id = "
    "?2)";
static const char SQL_ACTIVE_RUNS[] =
    "SELECT id FROM runs WHERE status IN ('starting', 'running') "
    "AND ((?1 > 0 AND experiment_id = ?1) OR id = ?2)";
static const char SQL_ANY_ACTIVE[] =
    "SELECT id FROM runs WHERE status IN ('queued', 'starting', 'running') "
    "AND ((?1 > 0 AND experiment_id = ?1) OR id = ?2)";
static const char SQL_EXPERIMENT_RUN_IDS[] =
    "SELECT id FROM runs WHERE ((?1 > 0 AND experiment_id = ?1) OR id = ?2)";
static const char SQL_DELETE_EXPERIMENT[] = "DELETE FROM experiments WHERE id = ?1";

/* Run ids of a bound two-parameter selection (?1 experiment, ?2 run) into *out (owned). */
static int db_select_ids(struct db_conn *c, const char *sql, int64_t exp_id, int64_t run_id,
                         int64_t **out, size_t *n, struct err *e)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st = db_stmt(c, sql, e);
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, exp_id);
    sqlite3_bind_int64(st, 2, run_id);
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? 2 * cap : 8;
            int64_t *grown = realloc(*out, cap * sizeof **out);
            if (!grown) {
                sqlite3_reset(st);
                return err_set(e, ERR_NOMEM, NULL, "out of memory");
            }
            *out = grown;
        }
        (*out)[(*n)++] = sqlite3_column_int64(st, 0);
    }
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? 0 : db_fail(e, c->h, "select ids");
}

/* ERR_NOT_FOUND unless the experiment (exp_id > 0) or the run exists. */
static int db_check_target(struct db_conn *c, int64_t exp_id, int64_t run_id, struct err *e)
{
    bool exp = exp_id > 0;
    if (db_exists(c, exp ? SQL_EXPERIMENT_EXISTS : SQL_RUN_EXISTS, exp ? exp_id : run_id, e))
        return 0;
    return err_set(e, ERR_NOT_FOUND, NULL, "%s %lld not found", exp ? "experiment" : "run",
                   (long long)(exp ? exp_id : run_id));
}

int db_cancel(struct db *db, int64_t exp_id, int64_t run_id, struct db_cancel_result *out,
              struct err *e)
{
    memset(out, 0, sizeof *out);
    struct db_conn *c = db_write_begin(db, e);
    if (!c)
        return -1;
    int rc = -1;
    double now = clock_wall_s();
    if (db_check_target(c, exp_id, run_id, e) < 0 ||
        db_select_ids(c, SQL_QUEUED_RUNS, exp_id, run_id, &out->cancelled, &out->n_cancelled,
                      e) < 0)
        goto out;
    sqlite3_stmt *st = db_stmt(c, SQL_CANCEL_QUEUED, e);
    if (!st)
        goto out;
    sqlite3_bind_int64(st, 1, exp_id);
    sqlite3_bind_int64(st, 2, run_id);
    sqlite3_bind_double(st, 3, now);
    if (db_step_done(c, st, e) < 0 ||
        db_select_ids(c, SQL_ACTIVE_RUNS, exp_id, run_id, &out->active, &out->n_active, e) < 0)
        goto out;
    if (out->n_cancelled == 0 && out->n_active == 0) {
        err_set(e, ERR_CONFLICT, NULL, "nothing to cancel: the %s has already finished",
                exp_id > 0 ? "experiment" : "run");
        goto out;
    }
    if (!(st = db_stmt(c, SQL_RUN_EXPERIMENT, e)))
        goto out;
    sqlite3_bind_int64(st, 1, run_id);
    out->experiment_id = exp_id;
    if (exp_id <= 0)
        out->experiment_id = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_reset(st);
    rc = db_refresh_experiment(c, out->experiment_id, now, e);
out:
    if (rc < 0)
        db_cancel_result_free(out);
    return db_write_end(db, rc, e);
}

void db_cancel_result_free(struct db_cancel_result *r)
{
    free(r->cancelled);
    free(r->active);
    r->cancelled = r->active = NULL;
    r->n_cancelled = r->n_active = 0;
}

int db_delete_experiment(struct db *db, int64_t id, int64_t **run_ids, size_t *n, struct err *e)
{
    *run_ids = NULL;
    *n = 0;
    struct db_conn *c = db_write_begin(db, e);
    if (!c)
        return -1;
    int rc = -1;
    int64_t *busy = NULL;
    size_t nbusy = 0;
    if (db_check_target(c, id, 0, e) < 0 ||
        db_select_ids(c, SQL_ANY_ACTIVE, id, 0, &busy, &nbusy, e) < 0)
        goto out;
    if (nbusy > 0) {
        err_set(e, ERR_CONFLICT, NULL,
                "experiment %lld has %zu run(s) queued or running: "
                "cancel it first",
                (long long)id, nbusy);
        goto out;
    }
    if (db_select_ids(c, SQL_EXPERIMENT_RUN_IDS, id, 0, run_ids, n, e) < 0)
        goto out;
    sqlite3_stmt *st = db_stmt(c, SQL_DELETE_EXPERIMENT, e);
    if (!st)
        goto out;
    sqlite3_bind_int64(st, 1, id);
    rc = db_step_done(c, st, e);
out:
    free(busy);
    if (rc < 0) {
        free(*run_ids);
        *run_ids = NULL;
        *n = 0;
    }
    return db_write_end(db, rc, e);
}

/* --- calibrations (issue 35, migration 021) ----------------------------------------- */

static const char SQL_CALIB_PENDING[] =
    "SELECT id FROM experiments e WHERE workload = 'train' AND status IN ('succeeded', "
    "'failed', 'cancelled', 'interrupted') AND json_extract(spec, '$.calibrate') = 1 AND NOT "
    "EXISTS (SELECT 1 FROM calibrations c WHERE c.experiment_id = e.id AND c.model_version "
    "= " DB_STR(PERF_MODEL_VERSION) ") ORDER BY id LIMIT ?1";

int db_calibrations_pending(struct db *db, int64_t *ids, size_t max, size_t *n, struct err *e)
{
    return db_ids_upto(db, SQL_CALIB_PENDING, ids, max, n, e);
}

static const char SQL_CALIB_INSERT[] =
    "INSERT OR IGNORE INTO calibrations (experiment_id, model_version, node, model, "
    "batch_size, threads, device, dataset, pinned, cpus, switch_us, quantum_ms, curve, "
    "created_at) VALUES (?1, " DB_STR(PERF_MODEL_VERSION) ", ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
                                                          "?10, ?11, ?12, ?13)";

int db_store_calibration(struct db *db, const struct db_calibration *cal, struct err *e)
{
    char *curve = json_dumps(cal->curve, JSON_COMPACT);
    if (!curve)
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    int rc = db_write_one(db, e, SQL_CALIB_INSERT, "Ittiittiiddtd", cal->experiment_id,
                          cal->node, cal->model, cal->batch_size, cal->threads, cal->device,
                          cal->dataset, (int)cal->pinned, cal->cpus, cal->switch_us,
                          cal->quantum_ms, curve, clock_wall_s());
    free(curve);
    return rc;
}

static const char SQL_CALIB_LIST[] =
    "SELECT id, experiment_id AS experiment, model_version, node, model, batch_size, threads, "
    "device, dataset, pinned, cpus, switch_us, quantum_ms, curve, created_at FROM "
    "calibrations WHERE (?1 IS NULL OR node = ?1) AND (?2 IS NULL OR model = ?2) AND (?3 = 0 "
    "OR id = ?3) AND model_version = " DB_STR(PERF_MODEL_VERSION) " ORDER BY id DESC";

json_t *db_list_calibrations(struct db *db, const char *node, const char *model, int64_t id,
                             struct err *e)
{
    struct db_conn *c = db_reader_acquire(db);
    json_t *out = NULL;
    sqlite3_stmt *st = db_stmt(c, SQL_CALIB_LIST, e);
    if (st) {
        db_bind(st, "ttI", node, model, id);
        out = db_rows_json(c, st, e);
    }
    db_reader_release(db, c);
    return out;
}
