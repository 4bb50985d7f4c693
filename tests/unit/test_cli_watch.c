/* Unit tests for cli/watch's state machine (what `submit --watch` makes of the events):
 * a snapshot, run status changes, progress, the experiment's end; which lines are printed
 * on a terminal (runs that end) and elsewhere (every change); "lagged" asking for a
 * resynchronising GET; a later snapshot catching up with changes no event carried; the
 * progress bar's text. */
#include "cli/watch.h"
#include "tests/unit/test.h"

static json_t *snapshot(const char *status, const char *s1, const char *s2)
{
    return json_pack("{s:i, s:s, s:[{s:i, s:s, s:f}, {s:i, s:s, s:f}]}", "id", 4, "status",
                     status, "runs", "id", 10, "status", s1, "progress", 0.0, "id", 11,
                     "status", s2, "progress", 0.0);
}

/* Applies the snapshot() of these statuses as a resynchronising GET's answer. */
static void apply_snapshot(struct watch_state *w, const char *status, const char *s1,
                           const char *s2, struct buf *log)
{
    json_t *snap = snapshot(status, s1, s2);
    watch_apply_snapshot(w, snap, log);
    json_decref(snap);
}

static int apply(struct watch_state *w, const char *type, const char *data, struct buf *log)
{
    json_t *d = json_loads(data, 0, NULL);
    int rc = d ? watch_apply(w, type, d, log) : -1;
    json_decref(d);
    return rc;
}

static const char *lines(struct buf *log)
{
    buf_append(log, "", 1);
    log->len--;
    return (const char *)log->data;
}

static void test_watch_terminal_events(void)
{
    struct watch_state w;
    struct buf log;
    buf_init(&log);
    watch_state_init(&w, 4, false);
    json_t *snap = snapshot("queued", "queued", "queued");
    T_EQ_INT(watch_apply(&w, "snapshot", snap, &log), 0);
    json_decref(snap);
    T_EQ_INT(w.nruns, 2);
    T_EQ_STR(lines(&log), "experiment 4 queued: 0/2 runs finished\n");
    buf_reset(&log);
    T_EQ_INT(
        apply(&w, "run", "{\"run\": 10, \"status\": \"running\", \"experiment\": 4}", &log), 0);
    T_EQ_INT(w.cur_run, 10);
    T_EQ_INT(log.len, 0); /* on a terminal the bar shows it */
    T_EQ_INT(
        apply(&w, "progress", "{\"run\": 10, \"progress\": 0.5, \"phase\": \"64K\"}", &log), 0);
    T_NEAR(w.cur_progress, 0.5, 1e-9);
    char bar[256];
    watch_bar(&w, bar, sizeof bar, 10);
    T_EQ_STR(bar, "[###.......] 0/2 runs  run 10 running  50%  64K");
    T_EQ_INT(apply(&w, "collective", "{\"bytes\": 4096}", &log), 0); /* ignored */
    T_EQ_INT(apply(&w, "run", "{\"run\": 10, \"status\": \"succeeded\"}", &log), 0);
    T_EQ_STR(lines(&log), "run 10 succeeded [1/2]\n");
    T_EQ_INT(apply(&w, "experiment", "{\"id\": 4, \"status\": \"running\"}", &log), 0);
    T_CHECK(!w.ended);
    watch_bar(&w, bar, sizeof bar, 10);
    T_EQ_STR(bar, "[#####.....] 1/2 runs");
    buf_reset(&log);
    T_EQ_INT(apply(&w, "run",
                   "{\"run\": 11, \"status\": \"failed\", \"error\": \"rank 1: boom\"}", &log),
             0);
    T_EQ_STR(lines(&log), "run 11 failed: rank 1: boom [2/2]\n");
    T_EQ_INT(apply(&w, "experiment", "{\"id\": 4, \"status\": \"failed\"}", &log), 0);
    T_CHECK(w.ended);
    T_EQ_STR(w.status, "failed");
    T_CHECK(strstr(lines(&log), "experiment 4 failed: 2/2 runs finished\n") != NULL);
    watch_state_cleanup(&w);
    buf_free(&log);
}

static void test_watch_plain_lines_every_change(void)
{
    struct watch_state w;
    struct buf log;
    buf_init(&log);
    watch_state_init(&w, 4, true);
    apply_snapshot(&w, "running", "running", "queued", &log);
    T_EQ_INT(w.cur_run, 10);
    T_EQ_INT(apply(&w, "run", "{\"run\": 10, \"status\": \"succeeded\"}", &log), 0);
    T_EQ_INT(apply(&w, "run", "{\"run\": 11, \"status\": \"starting\"}", &log), 0);
    T_EQ_INT(apply(&w, "run", "{\"run\": 11, \"status\": \"starting\"}", &log),
             0); /* no change */
    T_EQ_INT(apply(&w, "run", "{\"run\": 11, \"status\": \"running\"}", &log), 0);
    T_EQ_INT(apply(&w, "progress", "{\"run\": 11, \"progress\": 0.25}", &log), 0);
    T_EQ_STR(lines(&log), "experiment 4 running: 0/2 runs finished\n"
                          "run 10 succeeded [1/2]\n"
                          "run 11 starting [1/2]\n"
                          "run 11 running [1/2]\n");
    watch_state_cleanup(&w);
    buf_free(&log);
}

/* Changes without events (queued runs cancelled at once) show up in the next GET. */
static void test_watch_snapshot_catches_up(void)
{
    struct watch_state w;
    struct buf log;
    buf_init(&log);
    watch_state_init(&w, 4, false);
    apply_snapshot(&w, "queued", "queued", "queued", &log);
    buf_reset(&log);
    T_EQ_INT(apply(&w, "lagged", "{\"lost\": true}", &log), 0);
    T_CHECK(w.resync);
    apply_snapshot(&w, "cancelled", "cancelled", "cancelled", &log);
    T_CHECK(w.ended);
    T_EQ_INT(watch_runs_done(&w), 2);
    T_EQ_STR(lines(&log), "run 10 cancelled [1/2]\nrun 11 cancelled [2/2]\n"
                          "experiment 4 cancelled: 2/2 runs finished\n");
    watch_state_cleanup(&w);
    buf_free(&log);
}

static void test_watch_ignores_malformed(void)
{
    struct watch_state w;
    struct buf log;
    buf_init(&log);
    watch_state_init(&w, 4, true);
    T_EQ_INT(apply(&w, "run", "{\"status\": \"running\"}", &log), 0); /* no run id */
    T_EQ_INT(apply(&w, "run", "{\"run\": \"x\"}", &log), 0);
    T_EQ_INT(apply(&w, "progress", "{\"run\": 3, \"progress\": \"half\"}", &log), 0);
    T_EQ_INT(apply(&w, "experiment", "{\"status\": 5}", &log), 0);
    T_EQ_INT(apply(&w, "mystery", "[1, 2]", &log), 0);
    T_EQ_INT(w.nruns, 0);
    T_CHECK(!w.ended && w.status[0] == '\0');
    T_EQ_INT(log.len, 0);
    char bar[64];
    watch_bar(&w, bar, sizeof bar, 4);
    T_EQ_STR(bar, "[....] 0/0 runs");
    T_CHECK(watch_is_final("interrupted") && !watch_is_final("running") &&
            !watch_is_final(NULL));
    watch_state_cleanup(&w);
    buf_free(&log);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_watch_terminal_events);
    TEST_RUN(test_watch_plain_lines_every_change);
    TEST_RUN(test_watch_snapshot_catches_up);
    TEST_RUN(test_watch_ignores_malformed);
    return test_end();
}
