/* ingest: see ingest.h. The table ingest_types[] has one row per report type; a line is
 * parsed and validated once (report_parse_line), then its row decodes it, stores it,
 * updates its rank's state and publishes it, in that order.
 *
 * Decision: a line whose rows the database refused changes no rank state and publishes
 * nothing, so what a live view shows was stored; the failure is logged and the line still
 * counts as accepted (a database hiccup is not the rank's fault, and failing the run for
 * it would lose the run's other results). */
#include "daemon/ingest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "daemon/trace.h"

/* One decoded event; strings and the env object are borrowed from the parsed line. */
union ingest_record {
    struct {
        const char *host;
        int world_size;
    } hello;
    const json_t *env;
    struct {
        const char *phase;
        int64_t done, total;
    } progress;
    struct report_collective collective;
    struct {
        const char *code, *message, *where;
        int peer; /* -1: none named */
    } error;
    struct {
        const char *phase;
        int64_t progress;
    } heartbeat;
    struct report_step step;
    struct report_epoch epoch;
    struct report_memory memory;
    struct report_usage usage;
    struct report_trace trace; /* spans and ops borrowed from the line */
    struct report_grads grads; /* tensors borrowed from the line */
    struct report_pipe pipe;   /* layers and cuts borrowed from the line */
    struct {
        const char *event;
        int gen, world, peer;
        int64_t commit_step, lost_steps; /* -1: not said */
        double regroup_ms;               /* -1: not said */
        double at;                       /* when it arrived, unix seconds */
    } elastic;
};

/* One line in flight: the run, the rank, the validated event (borrowed) and its record. */
struct ingest_ctx {
    struct ingest_run *run;
    int rank;
    struct ingest_rank *state;
    const json_t *ev;
    union ingest_record rec;
    struct ingest_result *out;
};

/* A report type's knowledge. from_json decodes (fields already validated by report.c);
 * store writes rows (NULL: none); track updates the rank's state (NULL: none); publish
 * returns the owned data of the live event named after the type (NULL fn or NULL
 * result: none published). */
struct ingest_type {
    int (*from_json)(struct ingest_ctx *x, struct err *e);
    int (*store)(struct ingest_ctx *x, struct err *e);
    void (*track)(struct ingest_ctx *x);
    json_t *(*publish)(const struct ingest_ctx *x);
};

/* --- helpers ----------------------------------------------------------------------------- */

static const char *ingest_str(const json_t *ev, const char *key)
{
    const char *s = json_string_value(json_object_get(ev, key));
    return s ? s : "";
}

static void ingest_set_phase(struct ingest_ctx *x, const char *phase)
{
    snprintf(x->state->phase, sizeof x->state->phase, "%s", phase);
}

/* The worker's event as published: its fields without type and t. Owned. */
static json_t *ingest_event_data(const struct ingest_ctx *x)
{
    json_t *d = json_copy((json_t *)x->ev);
    if (d) {
        json_object_del(d, "type");
        json_object_del(d, "t");
    }
    return d;
}

/* --- hello ------------------------------------------------------------------------------- */

static int ingest_hello_from_json(struct ingest_ctx *x, struct err *e)
{
    x->rec.hello.host = ingest_str(x->ev, "host");
    x->rec.hello.world_size = (int)json_integer_value(json_object_get(x->ev, "world_size"));
    if (x->rec.hello.world_size != x->run->world_size)
        return err_set(e, ERR_INVALID, "world_size",
                       "rank %d reported world_size %d, run has %d", x->rank,
                       x->rec.hello.world_size, x->run->world_size);
    return 0;
}

static int ingest_hello_store(struct ingest_ctx *x, struct err *e)
{
    return db_rank_hello(x->run->db, x->run->run_id, x->rank, x->rec.hello.host,
                         x->rec.hello.world_size, e);
}

static void ingest_hello_track(struct ingest_ctx *x)
{
    if (x->state->said_hello)
        return;
    x->state->said_hello = true;
    x->out->run_running = ++x->run->n_hello == x->run->world_size;
}

/* --- env --------------------------------------------------------------------------------- */

static int ingest_env_from_json(struct ingest_ctx *x, struct err *e)
{
    (void)e;
    x->rec.env = json_object_get(x->ev, "env");
    return 0;
}

static int ingest_env_store(struct ingest_ctx *x, struct err *e)
{
    return db_rank_env(x->run->db, x->run->run_id, x->rank, x->rec.env, e);
}

/* --- progress ---------------------------------------------------------------------------- */

static int ingest_progress_from_json(struct ingest_ctx *x, struct err *e)
{
    (void)e;
    x->rec.progress.phase = ingest_str(x->ev, "phase");
    x->rec.progress.done = json_integer_value(json_object_get(x->ev, "done"));
    x->rec.progress.total = json_integer_value(json_object_get(x->ev, "total"));
    return 0;
}

static double ingest_progress_fraction(const struct ingest_ctx *x)
{
    return (double)x->rec.progress.done / (double)x->rec.progress.total;
}

static int ingest_progress_store(struct ingest_ctx *x, struct err *e)
{
    if (x->rec.progress.total <= 0)
        return 0; /* nothing to count yet */
    return db_run_progress(x->run->db, x->run->run_id, ingest_progress_fraction(x), e);
}

static void ingest_progress_track(struct ingest_ctx *x)
{
    ingest_set_phase(x, x->rec.progress.phase);
}

static json_t *ingest_progress_publish(const struct ingest_ctx *x)
{
    if (x->rec.progress.total <= 0)
        return NULL;
    return json_pack("{s:f, s:s}", "progress", ingest_progress_fraction(x), "phase",
                     x->rec.progress.phase);
}

/* --- collective -------------------------------------------------------------------------- */

static int ingest_collective_from_json(struct ingest_ctx *x, struct err *e)
{
    return report_collective_from_json(x->ev, &x->rec.collective, e);
}

static int ingest_collective_store(struct ingest_ctx *x, struct err *e)
{
    return db_insert_collective(x->run->db, x->run->run_id, &x->rec.collective, e);
}

static json_t *ingest_collective_publish(const struct ingest_ctx *x)
{
    return report_collective_to_json(&x->rec.collective);
}

/* --- error ------------------------------------------------------------------------------- */

static int ingest_error_from_json(struct ingest_ctx *x, struct err *e)
{
    (void)e;
    const json_t *peer = json_object_get(x->ev, "peer");
    x->rec.error.code = ingest_str(x->ev, "code");
    x->rec.error.message = ingest_str(x->ev, "message");
    x->rec.error.where = ingest_str(x->ev, "where");
    x->rec.error.peer = json_is_integer(peer) ? (int)json_integer_value(peer) : -1;
    return 0;
}

static void ingest_error_track(struct ingest_ctx *x)
{
    struct ingest_rank *k = x->state;
    if (k->error[0])
        return; /* the first error is the cause; later ones are consequences */
    snprintf(k->error_code, sizeof k->error_code, "%s", x->rec.error.code);
    snprintf(k->error, sizeof k->error, "%s (%s)", x->rec.error.message,
             x->rec.error.where[0] ? x->rec.error.where : "?");
    k->error_peer = x->rec.error.peer;
}

/* --- done, heartbeat --------------------------------------------------------------------- */

static int ingest_nothing_from_json(struct ingest_ctx *x, struct err *e)
{
    (void)x;
    (void)e;
    return 0;
}

static void ingest_done_track(struct ingest_ctx *x)
{
    x->state->said_done = true;
}

static int ingest_heartbeat_from_json(struct ingest_ctx *x, struct err *e)
{
    (void)e;
    x->rec.heartbeat.phase = ingest_str(x->ev, "phase");
    x->rec.heartbeat.progress = json_integer_value(json_object_get(x->ev, "progress"));
    return 0;
}

/* The phase, and since when the rank has been in it: a rank blocked on a frozen peer
 * keeps sending the same phase and progress, so "since" tells how long it has waited. */
static void ingest_heartbeat_track(struct ingest_ctx *x)
{
    struct ingest_rank *k = x->state;
    int64_t now = clock_mono_ms();
    if (!k->heartbeat_ms || strcmp(k->heartbeat, x->rec.heartbeat.phase) != 0 ||
        k->heartbeat_progress != x->rec.heartbeat.progress)
        k->heartbeat_since_ms = now;
    snprintf(k->heartbeat, sizeof k->heartbeat, "%s", x->rec.heartbeat.phase);
    k->heartbeat_progress = x->rec.heartbeat.progress;
    k->heartbeat_ms = now;
    ingest_set_phase(x, x->rec.heartbeat.phase);
}

/* --- step, epoch ------------------------------------------------------------------------- */

static int ingest_step_from_json(struct ingest_ctx *x, struct err *e)
{
    return report_step_from_json(x->ev, &x->rec.step, e);
}

static int ingest_step_store(struct ingest_ctx *x, struct err *e)
{
    return db_insert_step(x->run->db, x->run->run_id, x->rank, &x->rec.step, e);
}

static void ingest_step_track(struct ingest_ctx *x)
{
    x->state->stepped = true;
    x->state->last_repeat = x->rec.step.repeat;
    x->state->last_step = x->rec.step.step;
}

static json_t *ingest_step_publish(const struct ingest_ctx *x)
{
    return x->rank == 0 ? ingest_event_data(x) : NULL; /* live view: one rank's steps */
}

static int ingest_epoch_from_json(struct ingest_ctx *x, struct err *e)
{
    return report_epoch_from_json(x->ev, &x->rec.epoch, e);
}

static int ingest_epoch_store(struct ingest_ctx *x, struct err *e)
{
    return db_insert_epoch(x->run->db, x->run->run_id, &x->rec.epoch, e);
}

static json_t *ingest_epoch_publish(const struct ingest_ctx *x)
{
    return ingest_event_data(x);
}

/* --- memory, usage, trace (issue 17) ----------------------------------------------------- */

static int ingest_memory_from_json(struct ingest_ctx *x, struct err *e)
{
    return report_memory_from_json(x->ev, &x->rec.memory, e);
}

static int ingest_memory_store(struct ingest_ctx *x, struct err *e)
{
    return db_insert_memory(x->run->db, x->run->run_id, x->rank, &x->rec.memory, e);
}

static int ingest_usage_from_json(struct ingest_ctx *x, struct err *e)
{
    return report_usage_from_json(x->ev, &x->rec.usage, e);
}

static int ingest_usage_store(struct ingest_ctx *x, struct err *e)
{
    return db_insert_usage(x->run->db, x->run->run_id, x->rank, &x->rec.usage, e);
}

static int ingest_trace_from_json(struct ingest_ctx *x, struct err *e)
{
    return report_trace_from_json(x->ev, &x->rec.trace, e);
}

/* A run stores at most r->trace_cap traced steps; past it a line is dropped, and the
 * count of those dropped is stored with the run (the trace's otherData shows it). */
static int ingest_trace_store(struct ingest_ctx *x, struct err *e)
{
    struct ingest_run *r = x->run;
    if (r->trace_rows < r->trace_cap) {
        if (db_insert_trace(r->db, r->run_id, x->rank, &x->rec.trace, e) < 0)
            return -1;
        r->trace_rows++;
        return 0;
    }
    if (r->trace_dropped++ == 0)
        log_warn("run %lld: more than %lld traced steps: the rest are dropped (counted)",
                 (long long)r->run_id, (long long)r->trace_cap);
    return db_set_trace_dropped(r->db, r->run_id, r->trace_dropped, e);
}

/* Gradient readiness is the model's input from one rank: rank 0's, as the worker sends. */
static int ingest_grads_from_json(struct ingest_ctx *x, struct err *e)
{
    if (report_grads_from_json(x->ev, &x->rec.grads, e) < 0)
        return -1;
    if (x->rank != 0)
        return err_set(e, ERR_INVALID, "rank", "grads: only rank 0 sends gradient readiness");
    return 0;
}

static int ingest_grads_store(struct ingest_ctx *x, struct err *e)
{
    return db_insert_grads(x->run->db, x->run->run_id, &x->rec.grads, e);
}

/* A pipeline's layer profile is the model's input from one rank: rank 0's, as the worker
 * sends; its cuts must fit the stages it names. */
static int ingest_pipe_from_json(struct ingest_ctx *x, struct err *e)
{
    if (report_pipe_from_json(x->ev, &x->rec.pipe, e) < 0)
        return -1;
    if (x->rank != 0)
        return err_set(e, ERR_INVALID, "rank", "pipe: only rank 0 sends the layer profile");
    if (json_array_size(x->rec.pipe.cuts) != (size_t)x->rec.pipe.stages - 1)
        return err_set(e, ERR_INVALID, "cuts", "pipe: %d stages need %d cuts, got %zu",
                       x->rec.pipe.stages, x->rec.pipe.stages - 1,
                       json_array_size(x->rec.pipe.cuts));
    const struct report_pipe *pp = &x->rec.pipe;
    if (pp->batch > 0 && pp->batch % pp->micro_batch != 0)
        return err_set(e, ERR_INVALID, "batch",
                       "pipe: batch %d is not a whole number of "
                       "micro-batches of %d",
                       pp->batch, pp->micro_batch);
    if ((pp->batch > 0) != (pp->batch_forward_ns > 0) ||
        (pp->batch > 0) != (pp->batch_backward_ns > 0))
        return err_set(e, ERR_INVALID, "batch",
                       "pipe: batch, batch_forward_ns and "
                       "batch_backward_ns come together");
    return 0;
}

static int ingest_pipe_store(struct ingest_ctx *x, struct err *e)
{
    return db_insert_pipe(x->run->db, x->run->run_id, &x->rec.pipe, e);
}

/* --- elastic (issue 32) ------------------------------------------------------------------- */

static int64_t ingest_int_or(const json_t *ev, const char *key, int64_t none)
{
    const json_t *v = json_object_get(ev, key);
    return v ? (int64_t)json_integer_value(v) : none;
}

static int ingest_elastic_from_json(struct ingest_ctx *x, struct err *e)
{
    const json_t *ms = json_object_get(x->ev, "regroup_ms");
    x->rec.elastic.event = ingest_str(x->ev, "event");
    x->rec.elastic.gen = (int)json_integer_value(json_object_get(x->ev, "gen"));
    x->rec.elastic.world = (int)json_integer_value(json_object_get(x->ev, "world"));
    x->rec.elastic.peer = (int)ingest_int_or(x->ev, "peer", -1);
    x->rec.elastic.commit_step = ingest_int_or(x->ev, "commit_step", -1);
    x->rec.elastic.lost_steps = ingest_int_or(x->ev, "lost_steps", -1);
    x->rec.elastic.regroup_ms = ms ? json_number_value(ms) : -1;
    x->rec.elastic.at = clock_wall_s();
    static const char *const events[] = {"detect", "regroup", "resumed", "left"};
    for (size_t i = 0; i < sizeof events / sizeof events[0]; i++)
        if (strcmp(x->rec.elastic.event, events[i]) == 0)
            return 0;
    return err_set(e, ERR_INVALID, "event",
                   "elastic: event must be detect, regroup, resumed or left, got \"%.32s\"",
                   x->rec.elastic.event);
}

/* A detection dates the generation that failed; a regroup and a resumption the one that
 * now runs. */
static int ingest_elastic_store(struct ingest_ctx *x, struct err *e)
{
    const char *ev = x->rec.elastic.event;
    if (strcmp(ev, "detect") == 0)
        return db_generation_detected(x->run->db, x->run->run_id, x->rec.elastic.gen,
                                      x->rec.elastic.at, e);
    if (strcmp(ev, "regroup") == 0)
        return db_generation_regrouped(x->run->db, x->run->run_id, x->rec.elastic.gen,
                                       x->rec.elastic.regroup_ms, e);
    if (strcmp(ev, "resumed") == 0)
        return db_generation_resumed(x->run->db, x->run->run_id, x->rec.elastic.gen,
                                     x->rec.elastic.at, x->rec.elastic.commit_step,
                                     x->rec.elastic.lost_steps, x->rec.elastic.regroup_ms, e);
    return 0;
}

/* What the lifecycle acts on (daemon/monitor.c): the event, its generation, the peer. */
static void ingest_elastic_track(struct ingest_ctx *x)
{
    snprintf(x->out->elastic_event, sizeof x->out->elastic_event, "%s", x->rec.elastic.event);
    x->out->elastic_gen = x->rec.elastic.gen;
    x->out->elastic_peer = x->rec.elastic.peer;
}

static json_t *ingest_elastic_publish(const struct ingest_ctx *x)
{
    return ingest_event_data(x);
}

/* --- the table --------------------------------------------------------------------------- */

static const struct ingest_type ingest_types[] = {
    [REPORT_HELLO] = {ingest_hello_from_json, ingest_hello_store, ingest_hello_track, NULL},
    [REPORT_ENV] = {ingest_env_from_json, ingest_env_store, NULL, NULL},
    [REPORT_PROGRESS] = {ingest_progress_from_json, ingest_progress_store,
                         ingest_progress_track, ingest_progress_publish},
    [REPORT_COLLECTIVE] = {ingest_collective_from_json, ingest_collective_store, NULL,
                           ingest_collective_publish},
    [REPORT_ERROR] = {ingest_error_from_json, NULL, ingest_error_track, NULL},
    [REPORT_DONE] = {ingest_nothing_from_json, NULL, ingest_done_track, NULL},
    [REPORT_HEARTBEAT] = {ingest_heartbeat_from_json, NULL, ingest_heartbeat_track, NULL},
    [REPORT_STEP] = {ingest_step_from_json, ingest_step_store, ingest_step_track,
                     ingest_step_publish},
    [REPORT_EPOCH] = {ingest_epoch_from_json, ingest_epoch_store, NULL, ingest_epoch_publish},
    /* stored, not published: the run page reads them when the run has ended */
    [REPORT_MEMORY] = {ingest_memory_from_json, ingest_memory_store, NULL, NULL},
    [REPORT_USAGE] = {ingest_usage_from_json, ingest_usage_store, NULL, NULL},
    [REPORT_TRACE] = {ingest_trace_from_json, ingest_trace_store, NULL, NULL},
    [REPORT_GRADS] = {ingest_grads_from_json, ingest_grads_store, NULL, NULL},
    [REPORT_ELASTIC] = {ingest_elastic_from_json, ingest_elastic_store, ingest_elastic_track,
                        ingest_elastic_publish},
    [REPORT_PIPE] = {ingest_pipe_from_json, ingest_pipe_store, NULL, NULL},
};

#define INGEST_NTYPES (sizeof ingest_types / sizeof ingest_types[0])

/* --- entry points ------------------------------------------------------------------------ */

int ingest_run_init(struct ingest_run *r, struct db *db, struct events *events, int64_t run_id,
                    int64_t experiment_id, int world_size, struct err *e)
{
    memset(r, 0, sizeof *r);
    r->ranks = calloc(world_size > 0 ? (size_t)world_size : 1, sizeof *r->ranks);
    if (!r->ranks)
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    r->db = db;
    r->events = events;
    r->run_id = run_id;
    r->experiment_id = experiment_id;
    r->world_size = world_size;
    r->trace_cap = TRACE_MAX_ROWS;
    for (int i = 0; i < world_size; i++)
        r->ranks[i].error_peer = -1;
    return 0;
}

void ingest_run_cleanup(struct ingest_run *r)
{
    free(r->ranks);
    r->ranks = NULL;
}

void ingest_rank_reset(struct ingest_run *r, int rank)
{
    if (rank < 0 || rank >= r->world_size)
        return;
    memset(&r->ranks[rank], 0, sizeof r->ranks[rank]);
    r->ranks[rank].error_peer = -1;
}

const struct ingest_rank *ingest_rank_state(const struct ingest_run *r, int rank)
{
    return &r->ranks[rank];
}

/* The row of a validated event whose "rank" must be `rank`, a rank of r. */
static const struct ingest_type *ingest_row(const struct ingest_run *r, int rank,
                                            const json_t *ev, enum report_type type,
                                            struct err *e)
{
    if (rank < 0 || rank >= r->world_size) {
        err_set(e, ERR_INVALID, "rank", "run %lld has no rank %d (world size %d)",
                (long long)r->run_id, rank, r->world_size);
        return NULL;
    }
    int said = (int)json_integer_value(json_object_get(ev, "rank"));
    if (said != rank) {
        err_set(e, ERR_INVALID, "rank", "a line of rank %d carried rank %d's event", rank,
                said);
        return NULL;
    }
    if ((size_t)type >= INGEST_NTYPES || !ingest_types[type].from_json) {
        err_set(e, ERR_INTERNAL, "type", "report type %s has no ingestion row",
                report_type_name(type));
        return NULL;
    }
    return &ingest_types[type];
}

int ingest_line(struct ingest_run *r, int rank, const char *line, size_t len,
                struct ingest_result *out, struct err *e)
{
    memset(out, 0, sizeof *out);
    json_t *ev = report_parse_line(line, len, &out->type, e); /* owned */
    if (!ev)
        return -1;
    const struct ingest_type *t = ingest_row(r, rank, ev, out->type, e);
    struct ingest_ctx x = {
        .run = r, .rank = rank, .state = t ? &r->ranks[rank] : NULL, .ev = ev, .out = out};
    if (!t || t->from_json(&x, e) < 0) {
        json_decref(ev);
        return -1;
    }
    struct err se = {0};
    if (t->store && t->store(&x, &se) < 0) {
        log_error("run %lld: rank %d's %s: database: %s", (long long)r->run_id, rank,
                  report_type_name(out->type), se.msg);
        out->store_failed = true;
        json_decref(ev);
        return 0;
    }
    if (t->track)
        t->track(&x);
    if (t->publish)
        events_publish_run(r->events, r->experiment_id, r->run_id, report_type_name(out->type),
                           t->publish(&x));
    json_decref(ev);
    return 0;
}
