/* trace: see trace.h. */
#include "daemon/trace.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRACE_MAX_LANES 64 /* communication lanes per rank; more share the last */

/* One rank's communication lanes: when each lane's last operation ends (absolute ns). */
struct trace_lanes {
    int64_t end[TRACE_MAX_LANES];
    int n;
};

struct trace_ctx {
    json_t *events; /* owned until returned */
    int64_t origin; /* absolute ns of ts 0 */
    struct trace_lanes *lanes;
    int world;
    int pipeline; /* stages (1: no pipeline): rank = replica * pipeline + stage */
};

static double trace_us(const struct trace_ctx *t, int64_t abs_ns)
{
    return (double)(abs_ns - t->origin) / 1000.0;
}

static json_int_t trace_int(const json_t *row, size_t i)
{
    return json_integer_value(json_array_get(row, i));
}

/* A row's columns (db_get_trace): rank, repeat, step, clock_offset_ns, spans, ops. */
enum { TR_RANK, TR_REPEAT, TR_STEP, TR_OFFSET, TR_SPANS, TR_OPS };

/* The earliest absolute instant any row traced; 0 when there is none. */
static int64_t trace_origin(const json_t *rows)
{
    int64_t origin = 0;
    bool any = false;
    size_t i, k;
    const json_t *row, *sp;
    json_array_foreach((json_t *)rows, i, row)
    {
        int64_t off = trace_int(row, TR_OFFSET);
        json_array_foreach(json_array_get(row, TR_SPANS), k, sp)
        {
            int64_t at = json_integer_value(json_array_get(sp, 1)) + off;
            if (!any || at < origin)
                origin = at;
            any = true;
        }
        json_array_foreach(json_array_get(row, TR_OPS), k, sp)
        {
            int64_t at = json_integer_value(json_array_get(sp, 4)) + off;
            if (!any || at < origin)
                origin = at;
            any = true;
        }
    }
    return origin;
}

/* A complete event. args stolen. */
static void trace_complete(struct trace_ctx *t, const char *name, const char *cat, int pid,
                           int tid, int64_t from, int64_t to, json_t *args)
{
    json_array_append_new(t->events, json_pack("{s:s, s:s, s:s, s:i, s:i, s:f, s:f, s:o}",
                                               "name", name, "cat", cat, "ph", "X", "pid", pid,
                                               "tid", tid, "ts", trace_us(t, from), "dur",
                                               (double)(to - from) / 1000.0, "args", args));
}

static void trace_meta(struct trace_ctx *t, const char *what, int pid, int tid, json_t *args)
{
    json_array_append_new(t->events, json_pack("{s:s, s:s, s:i, s:i, s:o}", "name", what, "ph",
                                               "M", "pid", pid, "tid", tid, "args", args));
}

static void trace_spans(struct trace_ctx *t, const json_t *row)
{
    int rank = (int)trace_int(row, TR_RANK);
    json_int_t repeat = trace_int(row, TR_REPEAT), step = trace_int(row, TR_STEP);
    int64_t off = trace_int(row, TR_OFFSET);
    size_t i;
    const json_t *sp;
    json_array_foreach(json_array_get(row, TR_SPANS), i, sp)
    {
        const char *name = json_string_value(json_array_get(sp, 0));
        int64_t from = json_integer_value(json_array_get(sp, 1)) + off;
        int64_t to = json_integer_value(json_array_get(sp, 2)) + off;
        bool whole = strcmp(name, "step") == 0 || strcmp(name, "iteration") == 0;
        char label[48];
        if (whole)
            snprintf(label, sizeof label, "%s %lld", name, (long long)step);
        json_t *args = json_pack("{s:I, s:I}", "repeat", repeat, "step", step);
        /* a pipeline's forward, backward and p2p spans: one per micro-batch (report.h) */
        const json_t *micro = json_array_get(sp, 3);
        if (micro)
            json_object_set_new(args, "micro_batch", json_integer(json_integer_value(micro)));
        trace_complete(t, whole ? label : name,
                       whole                               ? "step"
                       : strcmp(name, "comm_exposed") == 0 ? "comm"
                       : strcmp(name, "p2p") == 0          ? "p2p"
                                                           : "phase",
                       rank, 0, from, to, args);
    }
}

/* The lane of an operation launched at `from` that ends at `to` (1-based tid). */
static int trace_lane(struct trace_lanes *l, int64_t from, int64_t to)
{
    int k = 0;
    while (k < l->n && l->end[k] > from)
        k++;
    if (k == TRACE_MAX_LANES)
        k = TRACE_MAX_LANES - 1;
    if (k == l->n)
        l->n++;
    l->end[k] = to;
    return k + 1;
}

static int trace_op_cmp(const void *a, const void *b)
{
    int64_t x = json_integer_value(json_array_get(*(json_t *const *)a, 4));
    int64_t y = json_integer_value(json_array_get(*(json_t *const *)b, 4));
    return (x > y) - (x < y);
}

static int trace_ops(struct trace_ctx *t, const json_t *row, struct err *e)
{
    int rank = (int)trace_int(row, TR_RANK);
    json_int_t repeat = trace_int(row, TR_REPEAT), step = trace_int(row, TR_STEP);
    int64_t off = trace_int(row, TR_OFFSET);
    const json_t *ops = json_array_get(row, TR_OPS);
    size_t n = json_array_size(ops);
    const json_t **sorted = calloc(n + 1, sizeof *sorted);
    if (!sorted)
        return err_set(e, ERR_NOMEM, NULL, "trace: out of memory");
    for (size_t i = 0; i < n; i++)
        sorted[i] = json_array_get(ops, i);
    qsort(sorted, n, sizeof *sorted, trace_op_cmp); /* lanes are handed out in launch order */
    for (size_t i = 0; i < n; i++) {
        const json_t *op = sorted[i];
        int64_t from = json_integer_value(json_array_get(op, 4)) + off;
        int64_t to = json_integer_value(json_array_get(op, 5)) + off;
        int tid = trace_lane(&t->lanes[rank], from, to);
        trace_complete(t, json_string_value(json_array_get(op, 0)), "collective", rank, tid,
                       from, to,
                       json_pack("{s:I, s:I, s:I, s:I, s:O}", "repeat", repeat, "step", step,
                                 "bucket", json_integer_value(json_array_get(op, 1)), "bytes",
                                 json_integer_value(json_array_get(op, 2)), "algorithm",
                                 json_array_get(op, 3)));
    }
    free(sorted);
    return 0;
}

/* Names of the processes (rank and node) and of every thread a rank used. */
static void trace_names(struct trace_ctx *t, const json_t *ranks)
{
    size_t i;
    const json_t *r;
    json_array_foreach((json_t *)ranks, i, r)
    {
        int rank = (int)json_integer_value(json_object_get(r, "rank"));
        if (rank < 0 || rank >= t->world)
            continue;
        const char *node = json_string_value(json_object_get(r, "node"));
        const char *host = json_string_value(json_object_get(r, "host"));
        char name[200];
        if (t->pipeline > 1)
            snprintf(name, sizeof name, "rank %d (stage %d, replica %d, node %s, host %s)",
                     rank, rank % t->pipeline, rank / t->pipeline, node ? node : "?",
                     host ? host : "?");
        else
            snprintf(name, sizeof name, "rank %d (node %s, host %s)", rank, node ? node : "?",
                     host ? host : "?");
        trace_meta(t, "process_name", rank, 0, json_pack("{s:s}", "name", name));
        trace_meta(t, "process_sort_index", rank, 0, json_pack("{s:i}", "sort_index", rank));
        trace_meta(t, "thread_name", rank, 0, json_pack("{s:s}", "name", "compute"));
        for (int k = 0; k < t->lanes[rank].n; k++) {
            char lane[48];
            snprintf(lane, sizeof lane, k ? "communication (queued %d)" : "communication",
                     k + 1);
            trace_meta(t, "thread_name", rank, k + 1, json_pack("{s:s}", "name", lane));
        }
    }
}

/* Each rank's clock offset, for otherData. */
static json_t *trace_offsets(const json_t *rows)
{
    json_t *o = json_object();
    size_t i;
    const json_t *row;
    json_array_foreach((json_t *)rows, i, row)
    {
        char key[16];
        snprintf(key, sizeof key, "%lld", (long long)trace_int(row, TR_RANK));
        if (!json_object_get(o, key))
            json_object_set_new(o, key, json_integer(trace_int(row, TR_OFFSET)));
    }
    return o;
}

/* What the daemon did to the run (run_events: injected faults, their undoing): an instant
 * event each, on its rank's process (scope "p") or, for a node or the whole run, global
 * ("g"). A run without traced steps takes its first event as the origin. */
static void trace_run_events(struct trace_ctx *t, const json_t *events)
{
    size_t i;
    const json_t *ev;
    json_array_foreach((json_t *)events, i, ev)
    {
        int64_t at = (int64_t)(json_number_value(json_object_get(ev, "unix_s")) * 1e9);
        json_int_t rank = json_integer_value(json_object_get(ev, "rank"));
        bool ranked = json_is_integer(json_object_get(ev, "rank")) && rank >= 0;
        const char *kind = json_string_value(json_object_get(ev, "kind"));
        char name[64];
        if (t->origin == 0)
            t->origin = at;
        snprintf(name, sizeof name, "%s %s %s", json_string_value(json_object_get(ev, "type")),
                 kind ? kind : "", json_string_value(json_object_get(ev, "action")));
        json_t *args = json_deep_copy(ev);
        json_object_del(args, "unix_s");
        json_array_append_new(t->events,
                              json_pack("{s:s, s:s, s:s, s:s, s:I, s:i, s:f, s:o}", "name",
                                        name, "cat", "fault", "ph", "i", "s",
                                        ranked ? "p" : "g", "pid", ranked ? rank : 0, "tid", 0,
                                        "ts", trace_us(t, at), "args", args));
    }
}

json_t *trace_build(const json_t *in, int64_t run_id, struct err *e)
{
    const json_t *rows = json_object_get(json_object_get(in, "steps"), "rows");
    int world = (int)json_integer_value(json_object_get(in, "world_size"));
    json_int_t pipeline = json_integer_value(json_object_get(in, "pipeline"));
    struct trace_ctx t = {.events = json_array(),
                          .origin = trace_origin(rows),
                          .lanes = calloc(world > 0 ? (size_t)world : 1, sizeof *t.lanes),
                          .world = world,
                          .pipeline = pipeline > 1 && pipeline <= world ? (int)pipeline : 1};
    if (!t.events || !t.lanes) {
        json_decref(t.events);
        free(t.lanes);
        err_set(e, ERR_NOMEM, NULL, "trace: out of memory");
        return NULL;
    }
    size_t i;
    const json_t *row;
    int rc = 0;
    json_array_foreach((json_t *)rows, i, row)
    {
        int rank = (int)trace_int(row, TR_RANK);
        if (rank < 0 || rank >= world)
            continue; /* report.c checked the line's rank against the run's world */
        trace_spans(&t, row);
        if ((rc = trace_ops(&t, row, e)) < 0)
            break;
    }
    if (rc == 0)
        trace_names(&t, json_object_get(in, "ranks"));
    if (rc == 0)
        trace_run_events(&t, json_object_get(in, "events"));
    free(t.lanes);
    if (rc < 0) {
        json_decref(t.events);
        return NULL;
    }
    json_t *out = json_pack(
        "{s:o, s:s, s:{s:I, s:I, s:o, s:I, s:i, s:s}}", "traceEvents", t.events,
        "displayTimeUnit", "ms", "otherData", "run", (json_int_t)run_id, "origin_unix_ns",
        (json_int_t)t.origin, "clock_offsets_ns", trace_offsets(rows), "traced_steps",
        (json_int_t)json_array_size(rows), "pipeline", t.pipeline, "clock",
        "ts: microseconds from origin_unix_ns; each rank's CLOCK_MONOTONIC plus "
        "its clock_offsets_ns (CLOCK_REALTIME - CLOCK_MONOTONIC)");
    json_t *page = json_object_get(in, "page");
    if (out && page)
        json_object_set(json_object_get(out, "otherData"), "page", page);
    if (!out)
        err_set(e, ERR_NOMEM, NULL, "trace: out of memory");
    return out;
}
