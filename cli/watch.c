/* watch: see watch.h. The display on a terminal is one line rewritten in place ("\r",
 * then the ANSI erase-to-end-of-line "\033[K"), at most ten times a second; lines about
 * runs that end are printed above it. Elsewhere every change is one plain line. */
#include "cli/watch.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/spec.h"

static const char *const watch_final[] = {"succeeded", "failed", "cancelled", "interrupted"};

void watch_experiment_path(char *out, size_t cap, int64_t id)
{
    snprintf(out, cap, "/v1/experiments/%lld?runs_limit=%d", (long long)id, SPEC_MAX_RUNS);
}

bool watch_is_final(const char *status)
{
    for (size_t i = 0; status && i < sizeof watch_final / sizeof watch_final[0]; i++)
        if (strcmp(status, watch_final[i]) == 0)
            return true;
    return false;
}

void watch_state_init(struct watch_state *w, int64_t id, bool verbose)
{
    memset(w, 0, sizeof *w);
    w->id = id;
    w->verbose = verbose;
}

void watch_state_cleanup(struct watch_state *w)
{
    free(w->runs);
    w->runs = NULL;
    w->nruns = w->cap_runs = 0;
}

static struct watch_run *watch_run_get(struct watch_state *w, int64_t id)
{
    for (size_t i = 0; i < w->nruns; i++)
        if (w->runs[i].id == id)
            return &w->runs[i];
    if (w->nruns == w->cap_runs) {
        size_t cap = w->cap_runs ? w->cap_runs * 2 : 8;
        struct watch_run *p = realloc(w->runs, cap * sizeof *p);
        if (!p)
            return NULL;
        w->runs = p;
        w->cap_runs = cap;
    }
    struct watch_run *r = &w->runs[w->nruns++];
    r->id = id;
    r->status[0] = '\0';
    return r;
}

size_t watch_runs_done(const struct watch_state *w)
{
    size_t n = 0;
    for (size_t i = 0; i < w->nruns; i++)
        n += watch_is_final(w->runs[i].status);
    return n;
}

static int watch_line(struct buf *log, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int watch_line(struct buf *log, const char *fmt, ...)
{
    char line[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    for (char *p = line; *p; p++) /* text from the daemon reaches a terminal */
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    return buf_append_str(log, line) < 0 || buf_append_str(log, "\n") < 0 ? -1 : 0;
}

/* A run's new status; a line when it changed (every change, or only final ones). */
static int watch_run_status(struct watch_state *w, int64_t id, const char *status,
                            const char *error, bool announce, struct buf *log)
{
    struct watch_run *r = watch_run_get(w, id);
    if (!r)
        return -1;
    if (!status || strcmp(r->status, status) == 0)
        return 0;
    snprintf(r->status, sizeof r->status, "%s", status);
    bool final = watch_is_final(status);
    if (!final && strcmp(status, "queued") != 0 && id != w->cur_run) {
        w->cur_run = id;
        w->cur_progress = 0;
        w->cur_phase[0] = '\0';
    }
    if (!announce || !(final || w->verbose))
        return 0;
    return watch_line(log, "run %lld %s%s%s [%zu/%zu]", (long long)id, status,
                      error ? ": " : "", error ? error : "", watch_runs_done(w), w->nruns);
}

static int watch_exp_status(struct watch_state *w, const char *status, struct buf *log)
{
    if (!status || strcmp(w->status, status) == 0)
        return 0;
    bool first = w->status[0] == '\0';
    snprintf(w->status, sizeof w->status, "%s", status);
    w->ended = watch_is_final(status);
    if (!w->verbose && !first && !w->ended)
        return 0;
    return watch_line(log, "experiment %lld %s: %zu/%zu runs finished", (long long)w->id,
                      status, watch_runs_done(w), w->nruns);
}

int watch_apply_snapshot(struct watch_state *w, const json_t *exp, struct buf *log)
{
    bool first = w->status[0] == '\0';
    size_t i;
    const json_t *r;
    json_array_foreach(json_object_get(exp, "runs"), i, r)
    {
        int64_t id = json_integer_value(json_object_get(r, "id"));
        const char *st = json_string_value(json_object_get(r, "status"));
        if (watch_run_status(w, id, st, json_string_value(json_object_get(r, "error")), !first,
                             log) < 0)
            return -1;
        if (id == w->cur_run && json_is_number(json_object_get(r, "progress")))
            w->cur_progress = json_number_value(json_object_get(r, "progress"));
    }
    return watch_exp_status(w, json_string_value(json_object_get(exp, "status")), log);
}

static void watch_progress(struct watch_state *w, const json_t *data)
{
    const json_t *run = json_object_get(data, "run");
    const json_t *p = json_object_get(data, "progress");
    if (!json_is_integer(run) || !json_is_number(p))
        return;
    w->cur_run = json_integer_value(run);
    w->cur_progress = json_number_value(p);
    const char *phase = json_string_value(json_object_get(data, "phase"));
    snprintf(w->cur_phase, sizeof w->cur_phase, "%s", phase ? phase : "");
}

int watch_apply(struct watch_state *w, const char *type, const json_t *data, struct buf *log)
{
    if (strcmp(type, "snapshot") == 0)
        return watch_apply_snapshot(w, data, log);
    if (strcmp(type, "lagged") == 0) {
        w->resync = true; /* events were lost: a GET tells the truth */
        return 0;
    }
    if (strcmp(type, "progress") == 0) {
        watch_progress(w, data);
        return 0;
    }
    if (strcmp(type, "run") == 0 && json_is_integer(json_object_get(data, "run")))
        return watch_run_status(w, json_integer_value(json_object_get(data, "run")),
                                json_string_value(json_object_get(data, "status")),
                                json_string_value(json_object_get(data, "error")), true, log);
    if (strcmp(type, "experiment") == 0)
        return watch_exp_status(w, json_string_value(json_object_get(data, "status")), log);
    return 0;
}

void watch_bar(const struct watch_state *w, char *out, size_t cap, int width)
{
    size_t done = watch_runs_done(w), n = w->nruns;
    struct watch_run *cur = NULL;
    for (size_t i = 0; i < w->nruns; i++)
        if (w->runs[i].id == w->cur_run)
            cur = &w->runs[i];
    bool active = cur && !watch_is_final(cur->status);
    double p = active && w->cur_progress > 0 ? w->cur_progress : 0;
    double frac = n ? ((double)done + (p > 1 ? 1 : p)) / (double)n : 0;
    char bar[128];
    int fill = (int)(frac * width + 0.5);
    width = width < (int)sizeof bar - 1 ? width : (int)sizeof bar - 1;
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    int len = snprintf(out, cap, "[%s] %zu/%zu runs", bar, done, n);
    if (active && len >= 0 && (size_t)len < cap)
        snprintf(out + len, cap - (size_t)len, "  run %lld %s %3.0f%%%s%.32s",
                 (long long)cur->id, cur->status, p * 100, w->cur_phase[0] ? "  " : "",
                 w->cur_phase);
    for (char *c = out; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
}

/* --- live following ---------------------------------------------------------------- */

void watch_init(struct watch *w, struct client *client, int64_t id, FILE *f, bool tty,
                double give_up_s)
{
    memset(w, 0, sizeof *w);
    watch_state_init(&w->st, id, !tty);
    w->client = client;
    w->f = f;
    w->tty = tty;
    w->give_up_s = give_up_s;
}

void watch_cleanup(struct watch *w)
{
    watch_state_cleanup(&w->st);
    sse_cleanup(&w->sse);
}

static void watch_clear_bar(struct watch *w)
{
    if (w->bar_shown)
        fputs("\r\033[K", w->f);
    w->bar_shown = false;
}

/* Prints the lines in log, then (on a terminal) the bar, at most every 100 ms unless a
 * line was printed. */
static void watch_draw(struct watch *w, struct buf *log)
{
    int64_t now = clock_mono_ms();
    if (log->len > 0) {
        watch_clear_bar(w);
        fwrite(log->data, 1, log->len, w->f);
        buf_reset(log);
    } else if (!w->tty || now - w->last_draw_ms < 100) {
        return;
    }
    if (w->tty && !w->st.ended) {
        char line[256];
        watch_bar(&w->st, line, sizeof line, 24);
        fprintf(w->f, "\r%s\033[K", line);
        w->bar_shown = true;
        w->last_draw_ms = now;
    }
    fflush(w->f);
}

static int watch_on_event(void *arg, const struct sse_event *ev)
{
    struct watch *w = arg;
    json_t *data = json_loadb(ev->data, ev->data_len, 0, NULL);
    struct buf log;
    buf_init(&log);
    if (data) /* a malformed event is skipped: the next GET resynchronises */
        watch_apply(&w->st, ev->type, data, &log);
    json_decref(data);
    watch_draw(w, &log);
    buf_free(&log);
    return w->st.ended || w->st.resync;
}

static int watch_on_data(void *arg, const char *data, size_t len)
{
    struct watch *w = arg;
    struct err e = {0};
    /* a line over SSE_MAX_LINE ends this stream; the poll that follows carries on */
    return sse_feed(&w->sse, data, len, &e) != 0;
}

static void watch_sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* GET the experiment. 1: got it; 0: no answer (yet); -1: refused (4xx), stop. */
static int watch_poll(struct watch *w, int64_t *unreachable_since_ms, struct err *e)
{
    char path[96];
    watch_experiment_path(path, sizeof path, w->st.id);
    json_t *exp = client_json(w->client, "GET", path, e);
    if (!exp && cli_exit_for_http(w->client->status) == CLI_EXIT_REFUSED)
        return -1;
    if (!exp) {
        int64_t now = clock_mono_ms();
        if (*unreachable_since_ms < 0)
            *unreachable_since_ms = now;
        return (double)(now - *unreachable_since_ms) > w->give_up_s * 1000.0 ? -1 : 0;
    }
    *unreachable_since_ms = -1;
    struct buf log;
    buf_init(&log);
    int rc = watch_apply_snapshot(&w->st, exp, &log);
    json_decref(exp);
    watch_draw(w, &log);
    buf_free(&log);
    return rc < 0 ? err_set(e, ERR_NOMEM, NULL, "out of memory") : 1;
}

int watch_follow(struct watch *w, struct err *e)
{
    char path[80];
    snprintf(path, sizeof path, "/v1/experiments/%lld/events", (long long)w->st.id);
    sse_init(&w->sse, watch_on_event, w);
    int64_t unreachable_since = -1;
    int rc = 0;
    while (!w->st.ended) {
        enum client_stream_end how = CLIENT_STREAM_CLOSED;
        struct err se = {0};
        sse_reset(&w->sse);
        w->st.resync = false;
        int srv = client_stream(w->client, path, WATCH_IDLE_MS, watch_on_data, w, &how, &se);
        if (w->st.ended)
            break;
        if ((rc = watch_poll(w, &unreachable_since, e)) < 0)
            break;
        if (!w->st.ended && (srv < 0 || how == CLIENT_STREAM_CLOSED || rc == 0))
            watch_sleep_ms(WATCH_POLL_MS); /* the stream is failing: poll, then retry it */
    }
    watch_clear_bar(w);
    fflush(w->f);
    return rc < 0 ? -1 : 0;
}
