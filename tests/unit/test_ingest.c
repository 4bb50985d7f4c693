/* Unit tests for daemon/ingest: every report type, fed as a line of rank R of a run with
 * no process or pipe of the daemon's behind it (as a follower's forwarded line will be),
 * stores its rows, updates its rank's state and publishes its live event; the last hello
 * says the run is running; a malformed line, an unknown type, a line of another rank, a
 * rank outside the run and a hello that contradicts the run are rejected with a clear
 * error and store, publish and change nothing. Lines are written by the worker's own
 * report writer (common/report.h), so they are exactly what a rank sends. */
#include <stdlib.h>
#include <unistd.h>

#include "daemon/db.h"
#include "daemon/events.h"
#include "daemon/ingest.h"
#include "daemon/trace.h"
#include "tests/unit/test.h"

/* every traced step of a run (within the cap) */
static const struct db_trace_query test_trace_all = {-1, -1, 0, TRACE_MAX_ROWS};

struct fx {
    char dir[64];
    struct db *db;
    struct events *events;
    struct events_sub *sub;
    int64_t exp, run;
    struct ingest_run in;
    int pipefd[2];
    struct report_writer w[2]; /* rank 0's and rank 1's writers, both into pipefd[1] */
};

static void fx_nop(void *arg)
{
    (void)arg;
}

/* A run of world size 2, starting, both ranks recorded as spawned; a subscriber to its
 * experiment's events. */
static int fx_open(struct fx *x, struct err *e)
{
    memset(x, 0, sizeof *x);
    char path[128];
    snprintf(x->dir, sizeof x->dir, "/tmp/ddpb-test-ingest-XXXXXX");
    if (!mkdtemp(x->dir))
        return err_errno(e, "mkdtemp");
    snprintf(path, sizeof path, "%s/t.db", x->dir);
    const char *spec = "{\"workload\":\"collective\",\"world_size\":2}";
    struct db_new_run row = {"{}", spec, 2, NULL};
    if (!(x->db = db_open(path, e)) ||
        db_create_experiment(x->db, "ingest", "collective", spec, &row, 1, &x->exp, e) < 0)
        return -1;
    struct db_queued_run *q;
    size_t n;
    if (db_list_queued(x->db, 1, &q, &n, e) < 0)
        return -1;
    x->run = n == 1 ? q[0].id : -1;
    db_queued_runs_free(q, n);
    if (x->run < 0 || db_run_starting(x->db, x->run, e) < 0 ||
        db_rank_spawned(x->db, x->run, 0, "node", 100, NULL, e) < 0 ||
        db_rank_spawned(x->db, x->run, 1, "node", 101, NULL, e) < 0)
        return -1;
    x->events = events_create();
    x->sub = events_subscribe(x->events, x->exp, fx_nop, fx_nop, NULL);
    if (pipe(x->pipefd) < 0)
        return err_errno(e, "pipe");
    report_writer_init(&x->w[0], x->pipefd[1], 0);
    report_writer_init(&x->w[1], x->pipefd[1], 1);
    return ingest_run_init(&x->in, x->db, x->events, x->run, x->exp, 2, e);
}

static void fx_close(struct fx *x)
{
    char cmd[160];
    ingest_run_cleanup(&x->in);
    report_writer_cleanup(&x->w[0]);
    report_writer_cleanup(&x->w[1]);
    close(x->pipefd[0]);
    close(x->pipefd[1]);
    events_unsubscribe(x->sub);
    events_destroy(x->events);
    db_close(x->db);
    snprintf(cmd, sizeof cmd, "rm -rf %s", x->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", x->dir);
}

/* The line the last emit wrote (without its newline) into buf. */
static size_t fx_take_line(struct fx *x, char *buf, size_t cap)
{
    size_t n = 0;
    while (n + 1 < cap && read(x->pipefd[0], buf + n, 1) == 1 && buf[n] != '\n')
        n++;
    buf[n] = '\0';
    return n;
}

/* Ingests the line just emitted as rank `rank`'s; the return value of ingest_line. */
static int fx_ingest(struct fx *x, int rank, struct ingest_result *res, struct err *e)
{
    char line[4096];
    size_t n = fx_take_line(x, line, sizeof line);
    return ingest_line(&x->in, rank, line, n, res, e);
}

/* Every live event published since the last call, as SSE text. */
static const char *fx_events(struct fx *x, char *buf, size_t cap)
{
    long n = events_read(x->sub, buf, cap - 1);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

static int fx_count(const char *hay, const char *needle)
{
    int k = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        k++;
    return k;
}

static void test_ingest_every_type(void)
{
    struct fx x;
    struct err e = {0};
    struct ingest_result res;
    char ev[16384];
    T_OK(fx_open(&x, &e));

    /* hello: the rank is running; the second hello makes the run running */
    T_OK(report_emit_hello(&x.w[0], 2, &e));
    T_OK(fx_ingest(&x, 0, &res, &e));
    T_EQ_INT(res.type, REPORT_HELLO);
    T_CHECK(!res.run_running && !res.store_failed);
    T_CHECK(ingest_rank_state(&x.in, 0)->said_hello);
    T_OK(report_emit_hello(&x.w[1], 2, &e));
    T_OK(fx_ingest(&x, 1, &res, &e));
    T_CHECK(res.run_running);

    /* env */
    T_OK(report_emit(&x.w[0], REPORT_ENV, json_pack("{s:{s:s}}", "env", "kernel", "6.1"), &e));
    T_OK(fx_ingest(&x, 0, &res, &e));
    T_EQ_INT(res.type, REPORT_ENV);

    /* progress: stored fraction, phase, event */
    T_OK(report_emit_progress(&x.w[0], "warming up", 1, 4, &e));
    T_OK(fx_ingest(&x, 0, &res, &e));
    T_EQ_STR(ingest_rank_state(&x.in, 0)->phase, "warming up");

    /* collective */
    struct report_collective c = {.op = "allreduce",
                                  .dtype = "float32",
                                  .redop = "sum",
                                  .algorithm = "ring",
                                  .bytes = 4096,
                                  .count = 1024,
                                  .iters = 5,
                                  .time_us_min = 1,
                                  .time_us_median = 2,
                                  .time_us_p95 = 3,
                                  .time_us_mean = 2,
                                  .time_us_max = 4,
                                  .algbw_gbs = 2.048,
                                  .busbw_gbs = 2.048};
    T_OK(report_emit_collective(&x.w[0], &c, &e));
    T_OK(fx_ingest(&x, 0, &res, &e));
    T_EQ_INT(res.type, REPORT_COLLECTIVE);

    /* steps of both ranks: both stored, only rank 0's published; rank 1's as a pipeline
     * stage's (its stage, p2p and bubble stored beside the phases) with the data pipeline's
     * figures (rank 0's leaves them out: stored NULL) */
    struct report_step st = {REPORT_STEP_NO_PIPELINE, .samples = 8, .loss = 2.0, .step_ms = 10,
                             .forward_ms = 3};
    T_OK(report_emit_step(&x.w[0], &st, &e));
    T_OK(fx_ingest(&x, 0, &res, &e));
    st.step_ms = 12;
    st.step = 5;
    st.stage = 1;
    st.p2p_ms = 2.5;
    st.p2p_bytes = 65536;
    st.bubble_ms = 4.25;
    st.loader_cpu_ms = 0.75;
    st.read_bytes = 98304;
    T_CHECK(!ingest_rank_state(&x.in, 1)->stepped);
    T_OK(report_emit_step(&x.w[1], &st, &e));
    T_OK(fx_ingest(&x, 1, &res, &e));
    T_EQ_INT(res.type, REPORT_STEP);
    T_CHECK(ingest_rank_state(&x.in, 1)->stepped); /* its last step, for a frozen rank */
    T_EQ_INT(ingest_rank_state(&x.in, 1)->last_step, 5);

    /* epoch */
    struct report_epoch ep = {.samples = 16,
                              .train_loss = 1.5,
                              .train_acc = 0.5,
                              .test_loss = -1,
                              .test_acc = -1,
                              .time_s = 0.1};
    T_OK(report_emit_epoch(&x.w[0], &ep, &e));
    T_OK(fx_ingest(&x, 0, &res, &e));
    /* an epoch that trained on no sample: its train figures are left out, stored NULL */
    struct report_epoch empty = {.epoch = 1,
                                 .samples = 0,
                                 .train_loss = -1,
                                 .train_acc = -1,
                                 .test_loss = -1,
                                 .test_acc = -1,
                                 .time_s = 0.0};
    T_OK(report_emit_epoch(&x.w[0], &empty, &e));
    T_OK(fx_ingest(&x, 0, &res, &e));

    /* memory, usage and trace: stored per rank, not published */
    struct report_memory mem = {.params_bytes = 400,
                                .buffers_bytes = 0,
                                .grads_bytes = 400,
                                .optimizer_bytes = 200,
                                .comm_bytes = 8,
                                .activations_bytes = 64,
                                .peak_rss_bytes = 1 << 20,
                                .device_peak_bytes = -1};
    T_OK(report_emit_memory(&x.w[1], &mem, &e));
    T_OK(fx_ingest(&x, 1, &res, &e));
    T_EQ_INT(res.type, REPORT_MEMORY);
    struct report_usage use = {.steps = 3,
                               .wall_s = 1,
                               .user_s = 0.5,
                               .sys_s = 0.25,
                               .voluntary_cs = 2,
                               .involuntary_cs = 1,
                               .rss_bytes = -1,
                               .gpu_util_pct = -1,
                               .gpu_mem_util_pct = -1,
                               .gpu_power_w = -1};
    T_OK(report_emit_usage(&x.w[1], &use, &e));
    T_OK(fx_ingest(&x, 1, &res, &e));
    T_EQ_INT(res.type, REPORT_USAGE);
    json_t *spans = json_pack("[[s, i, i], [s, i, i, i], [s, i, i, i]]", "step", 10, 20,
                              "forward", 11, 14, 0, "p2p", 14, 15, 0),
           *ops = json_array();
    struct report_trace tr = {.step = 2, .clock_offset_ns = 5, .spans = spans, .ops = ops};
    T_OK(report_emit_trace(&x.w[1], &tr, &e));
    T_OK(fx_ingest(&x, 1, &res, &e));
    T_EQ_INT(res.type, REPORT_TRACE);
    json_decref(ops);
    /* gradient readiness: rank 0's is stored; another rank's is refused */
    json_t *tensors = json_pack("[[i, i]]", 400, 1000);
    struct report_grads gr = {.steps = 3, .backward_ns = 2000, .tensors = tensors};
    T_OK(report_emit_grads(&x.w[0], &gr, &e));
    T_OK(fx_ingest(&x, 0, &res, &e));
    T_EQ_INT(res.type, REPORT_GRADS);
    T_OK(report_emit_grads(&x.w[1], &gr, &e));
    T_CHECK(fx_ingest(&x, 1, &res, &e) < 0 && e.code == ERR_INVALID &&
            strcmp(e.field, "rank") == 0);
    json_decref(tensors);
    /* a pipeline's layer profile: rank 0's is stored; another rank's, or cuts that do not
     * fit the stages, are refused naming the field */
    json_t *layers = json_pack("[[i, i, i], [i, i, i]]", 10, 20, 64, 30, 60, 0),
           *cuts = json_pack("[[i, i]]", 1, 512);
    struct report_pipe pp = {.stages = 2,
                             .micro_batch = 2,
                             .layers = layers,
                             .cuts = cuts,
                             .batch = 4,
                             .batch_forward_ns = 30,
                             .batch_backward_ns = 70};
    T_OK(report_emit_pipe(&x.w[0], &pp, &e));
    T_OK(fx_ingest(&x, 0, &res, &e));
    T_EQ_INT(res.type, REPORT_PIPE);
    /* the whole batch's timing: a whole number of micro-batches, its three fields
     * together (a worker from before them sends none, and is stored) */
    pp.batch = 3;
    T_OK(report_emit_pipe(&x.w[0], &pp, &e));
    T_CHECK(fx_ingest(&x, 0, &res, &e) < 0 && e.code == ERR_INVALID &&
            strcmp(e.field, "batch") == 0);
    pp.batch = 4;
    pp.batch_backward_ns = -1;
    T_OK(report_emit_pipe(&x.w[0], &pp, &e));
    T_CHECK(fx_ingest(&x, 0, &res, &e) < 0 && e.code == ERR_INVALID &&
            strcmp(e.field, "batch") == 0);
    pp.batch = -1;
    pp.batch_forward_ns = -1;
    T_OK(report_emit_pipe(&x.w[0], &pp, &e));
    T_OK(fx_ingest(&x, 0, &res, &e));
    T_OK(report_emit_pipe(&x.w[1], &pp, &e));
    T_CHECK(fx_ingest(&x, 1, &res, &e) < 0 && e.code == ERR_INVALID &&
            strcmp(e.field, "rank") == 0);
    pp.stages = 3;
    T_OK(report_emit_pipe(&x.w[0], &pp, &e));
    T_CHECK(fx_ingest(&x, 0, &res, &e) < 0 && e.code == ERR_INVALID &&
            strcmp(e.field, "cuts") == 0);
    json_decref(layers);
    json_decref(cuts);

    /* heartbeat: phase and progress, and since when they have not changed */
    const struct ingest_rank *hb = ingest_rank_state(&x.in, 1);
    T_CHECK(!hb->heartbeat_ms && !hb->heartbeat[0]);
    T_OK(report_emit_heartbeat(&x.w[1], "allreduce 4096", 3, &e));
    T_OK(fx_ingest(&x, 1, &res, &e));
    T_EQ_INT(res.type, REPORT_HEARTBEAT);
    T_EQ_STR(hb->phase, "allreduce 4096");
    T_EQ_STR(hb->heartbeat, "allreduce 4096");
    T_EQ_INT(hb->heartbeat_progress, 3);
    int64_t first = hb->heartbeat_ms;
    T_CHECK(first > 0 && hb->heartbeat_since_ms == first);
    usleep(20000);
    T_OK(report_emit_heartbeat(&x.w[1], "allreduce 4096", 3, &e)); /* still there */
    T_OK(fx_ingest(&x, 1, &res, &e));
    T_CHECK(hb->heartbeat_ms >= first + 20 && hb->heartbeat_since_ms == first);
    usleep(20000);
    T_OK(report_emit_heartbeat(&x.w[1], "allreduce 4096", 4, &e)); /* moved on */
    T_OK(fx_ingest(&x, 1, &res, &e));
    T_CHECK(hb->heartbeat_since_ms == hb->heartbeat_ms && hb->heartbeat_ms >= first + 40);

    /* error: the first one is the rank's cause, a later one does not replace it */
    struct err cause = {0};
    err_set(&cause, ERR_PEER, NULL, "rank 0 closed the connection");
    T_OK(report_emit_error(&x.w[1], &cause, "tcp.c:10", "allreduce", 0, &e));
    T_OK(fx_ingest(&x, 1, &res, &e));
    err_set(&cause, ERR_TIMEOUT, NULL, "later");
    T_OK(report_emit_error(&x.w[1], &cause, "tcp.c:20", NULL, -1, &e));
    T_OK(fx_ingest(&x, 1, &res, &e));
    const struct ingest_rank *r1 = ingest_rank_state(&x.in, 1);
    T_EQ_STR(r1->error_code, "peer");
    T_EQ_STR(r1->error, "rank 0 closed the connection (tcp.c:10)");
    T_EQ_INT(r1->error_peer, 0);

    /* done */
    T_CHECK(!ingest_rank_state(&x.in, 0)->said_done);
    T_OK(report_emit_done(&x.w[0], &e));
    T_OK(fx_ingest(&x, 0, &res, &e));
    T_EQ_INT(res.type, REPORT_DONE);
    T_CHECK(ingest_rank_state(&x.in, 0)->said_done);
    T_CHECK(!ingest_rank_state(&x.in, 1)->said_done);

    /* what the database holds */
    json_t *run = db_get_run(x.db, x.run, &e);
    T_CHECK(run != NULL);
    T_EQ_STR(json_string_value(json_object_get(run, "status")), "running");
    T_CHECK(fabs(json_number_value(json_object_get(run, "progress")) - 0.25) < 1e-9);
    json_t *ranks = json_object_get(run, "ranks");
    for (size_t i = 0; i < 2; i++)
        T_EQ_STR(json_string_value(json_object_get(json_array_get(ranks, i), "status")),
                 "running");
    json_t *coll = json_array_get(json_object_get(run, "collectives"), 0);
    T_EQ_INT(json_array_size(json_object_get(run, "collectives")), 1);
    T_EQ_STR(json_string_value(json_object_get(coll, "op")), "allreduce");
    T_EQ_INT(json_integer_value(json_object_get(coll, "bytes")), 4096);
    json_t *eps = json_object_get(run, "epochs");
    T_EQ_INT(json_array_size(eps), 2);
    T_NEAR(json_number_value(json_object_get(json_array_get(eps, 0), "train_loss")), 1.5, 0);
    T_CHECK(json_is_null(json_object_get(json_array_get(eps, 1), "train_loss")));
    T_CHECK(json_is_null(json_object_get(json_array_get(eps, 1), "train_acc")));
    json_t *m0 = json_array_get(json_object_get(run, "memory"), 0);
    T_EQ_INT(json_integer_value(json_object_get(m0, "rank")), 1);
    T_EQ_INT(json_integer_value(json_object_get(m0, "optimizer_bytes")), 200);
    T_CHECK(json_is_null(json_object_get(m0, "device_peak_bytes")));
    json_t *u0 = json_array_get(json_object_get(run, "usage"), 0);
    T_NEAR(json_number_value(json_object_get(u0, "cpu_util")), 0.75, 1e-9);
    json_t *trace = db_get_trace(x.db, x.run, &test_trace_all, &e);
    T_EQ_INT(json_array_size(json_object_get(json_object_get(trace, "steps"), "rows")), 1);
    T_CHECK(json_equal(
        json_array_get(
            json_array_get(json_object_get(json_object_get(trace, "steps"), "rows"), 0), 4),
        spans));
    json_decref(trace);
    json_decref(spans);
    char *env = json_dumps(json_object_get(run, "env"), JSON_COMPACT);
    T_CHECK_MSG(strstr(env, "\"kernel\":\"6.1\"") != NULL, "%s", env);
    free(env);
    json_decref(run);
    json_t *steps = db_get_steps(x.db, x.run, -1, true, &e);
    T_CHECK(steps != NULL);
    T_EQ_INT(json_array_size(json_object_get(steps, "rows")), 2);
    char *rows = json_dumps(json_object_get(steps, "rows"), JSON_COMPACT);
    /* ... step_ms, bytes_sent, stage, p2p_ms, p2p_bytes, bubble_ms, loader_cpu_ms,
     * read_bytes, generation, world (not elastic: null), at */
    T_CHECK_MSG(strstr(rows, ",10.0,0,null,null,null,null,null,null,null,null,") &&
                    strstr(rows, ",12.0,0,1,2.5,65536,4.25,0.75,98304,null,null,"),
                "%s", rows);
    free(rows);
    json_decref(steps);

    /* what was published: each event names the run and its experiment */
    const char *text = fx_events(&x, ev, sizeof ev);
    T_EQ_INT(fx_count(text, "event: progress\n"), 1);
    T_EQ_INT(fx_count(text, "event: collective\n"), 1);
    T_EQ_INT(fx_count(text, "event: step\n"), 1);
    T_EQ_INT(fx_count(text, "event: epoch\n"), 2);
    T_EQ_INT(fx_count(text, "event: "), 5); /* hello, env, heartbeat, error, done: none */
    char run_key[64];
    snprintf(run_key, sizeof run_key, "\"run\":%lld", (long long)x.run);
    T_EQ_INT(fx_count(text, run_key), 5);
    T_CHECK_MSG(strstr(text, "\"progress\":0.25") != NULL, "%s", text);
    fx_close(&x);
}

/* The rejected line left no rows, no events and no rank state behind. */
static void expect_rejected(struct fx *x, int rank, const char *line, const char *why)
{
    struct ingest_result res;
    struct err e = {0};
    T_CHECK_MSG(ingest_line(&x->in, rank, line, strlen(line), &res, &e) < 0, "%s", line);
    T_EQ_INT(e.code, ERR_INVALID);
    T_CHECK_MSG(strstr(e.msg, why) != NULL, "'%s' does not say '%s'", e.msg, why);
    char ev[4096];
    T_EQ_STR(fx_events(x, ev, sizeof ev), "");
    json_t *steps = db_get_steps(x->db, x->run, -1, true, &e);
    T_CHECK(steps != NULL);
    T_EQ_INT(json_array_size(json_object_get(steps, "rows")), 0);
    json_decref(steps);
    json_t *run = db_get_run(x->db, x->run, &e);
    T_CHECK(run != NULL);
    T_EQ_STR(json_string_value(json_object_get(run, "status")), "starting");
    T_EQ_INT(json_array_size(json_object_get(run, "collectives")), 0);
    json_decref(run);
    for (int i = 0; i < 2; i++) {
        const struct ingest_rank *k = ingest_rank_state(&x->in, i);
        T_CHECK(!k->said_hello && !k->said_done && !k->phase[0] && !k->error[0]);
    }
}

static void test_ingest_rejects(void)
{
    struct fx x;
    struct err e = {0};
    T_OK(fx_open(&x, &e));
    char step[2048];
    struct report_step st = {REPORT_STEP_NO_PIPELINE, .samples = 8, .step_ms = 10};
    T_OK(report_emit_step(&x.w[1], &st, &e));
    fx_take_line(&x, step, sizeof step); /* a valid step line of rank 1 */

    expect_rejected(&x, 0, "{\"type\":\"step\",", "not JSON");
    expect_rejected(&x, 0, "{\"type\":\"gossip\",\"rank\":0,\"t\":1.0}", "gossip");
    expect_rejected(&x, 0, "{\"type\":\"heartbeat\",\"rank\":0,\"t\":1.0}", "phase");
    expect_rejected(&x, 0, step, "a line of rank 0 carried rank 1's event");
    expect_rejected(&x, 2, step, "has no rank 2");
    expect_rejected(&x, -1, step, "has no rank -1");
    expect_rejected(&x, 0,
                    "{\"type\":\"hello\",\"rank\":0,\"t\":1.0,\"pid\":5,\"host\":\"h\","
                    "\"world_size\":3}",
                    "world_size 3, run has 2");
    expect_rejected(&x, 0,
                    "{\"type\":\"step\",\"rank\":0,\"t\":1,\"repeat\":0,\"epoch\":0,\"step\":1,"
                    "\"warmup\":false,\"samples\":8,\"loss\":1,\"step_ms\":2,\"stage\":\"0\"}",
                    "stage: must be an integer >= 0");
    expect_rejected(&x, 0,
                    "{\"type\":\"step\",\"rank\":0,\"t\":1,\"repeat\":0,\"epoch\":0,\"step\":1,"
                    "\"warmup\":false,\"samples\":8,\"loss\":1,\"step_ms\":2,\"bubble_ms\":-3}",
                    "bubble_ms: must be a finite number >= 0");
    /* the same step line, as rank 1's, is accepted */
    struct ingest_result res;
    T_OK(ingest_line(&x.in, 1, step, strlen(step), &res, &e));
    json_t *steps = db_get_steps(x.db, x.run, 1, true, &e);
    T_EQ_INT(json_array_size(json_object_get(steps, "rows")), 1);
    json_decref(steps);
    fx_close(&x);
}

/* Trace rows are capped per run (issue 31): past the cap a line is accepted but not
 * stored, and the count of those dropped is stored with the run. */
/* Elastic lines (issue 32): a detection dates the generation that failed (the first
 * one counts), a resumption the one that runs, with its commit and lost steps; the result
 * says the event, generation and blamed peer for the monitor; a step carries its
 * generation and world; an unknown event is refused; a reset slot says hello again
 * without the run counting another start. */
static void test_ingest_elastic(void)
{
    struct fx x;
    struct err e = {0};
    struct ingest_result res;
    char sse[8192];
    T_OK(fx_open(&x, &e));
    expect_rejected(&x, 0,
                    "{\"type\":\"elastic\",\"rank\":0,\"t\":1.0,\"event\":\"vanish\","
                    "\"gen\":1,\"world\":1,\"members\":[0]}",
                    "event must be detect, regroup, resumed or left");
    struct db_generation g0 = {0, 2, "[0,1]", "[]", "launch", 100.0, -1};
    struct db_generation g1 = {1, 1, "[0]", "[]", "rank 1 lost", 101.0, 100.5};
    T_OK(db_insert_generation(x.db, x.run, &g0, &e));
    T_OK(db_insert_generation(x.db, x.run, &g1, &e));
    const int members0[] = {0, 1}, members1[] = {0};
    struct report_elastic det = {.event = "detect",
                                 .gen = 0,
                                 .world = 2,
                                 .members = members0,
                                 .n_members = 2,
                                 .commit_step = -1,
                                 .lost_steps = -1,
                                 .regroup_ms = -1,
                                 .peer = 1};
    T_OK(report_emit_elastic(&x.w[0], &det, &e));
    T_OK(fx_ingest(&x, 0, &res, &e));
    T_EQ_INT(res.type, REPORT_ELASTIC);
    T_EQ_STR(res.elastic_event, "detect");
    T_EQ_INT(res.elastic_gen, 0);
    T_EQ_INT(res.elastic_peer, 1);
    struct report_elastic regroup = {.event = "regroup",
                                     .gen = 1,
                                     .world = 1,
                                     .members = members1,
                                     .n_members = 1,
                                     .commit_step = 20,
                                     .lost_steps = -1,
                                     .regroup_ms = 150.5,
                                     .peer = -1};
    T_OK(report_emit_elastic(&x.w[0], &regroup, &e));
    T_OK(fx_ingest(&x, 0, &res, &e));
    T_EQ_STR(res.elastic_event, "regroup");
    struct report_elastic resumed = {.event = "resumed",
                                     .gen = 1,
                                     .world = 1,
                                     .members = members1,
                                     .n_members = 1,
                                     .commit_step = 20,
                                     .lost_steps = 7,
                                     .regroup_ms = -1,
                                     .peer = -1};
    T_OK(report_emit_elastic(&x.w[0], &resumed, &e));
    T_OK(fx_ingest(&x, 0, &res, &e));
    T_EQ_STR(res.elastic_event, "resumed");
    T_EQ_INT(res.elastic_gen, 1);
    T_OK(report_emit_elastic(&x.w[0], &det, &e)); /* a second detection keeps the first */
    T_OK(fx_ingest(&x, 0, &res, &e));
    struct report_step st = {REPORT_STEP_NO_PIPELINE,
                             .step = 27,
                             .samples = 8,
                             .loss = 1,
                             .step_ms = 5,
                             .data_ms = -1,
                             .forward_ms = -1,
                             .backward_ms = -1,
                             .comm_ms = -1,
                             .comm_exposed_ms = -1,
                             .optimizer_ms = -1,
                             .bytes_sent = -1};
    st.gen = st.world = 1;
    T_OK(report_emit_step(&x.w[0], &st, &e));
    T_OK(fx_ingest(&x, 0, &res, &e));
    json_t *run = db_get_run(x.db, x.run, &e);
    const json_t *gens = json_object_get(run, "generations");
    T_EQ_INT(json_array_size(gens), 2);
    char *text = json_dumps(gens, JSON_COMPACT);
    T_CHECK_MSG(strstr(text, "\"gen\":1,\"world\":1,\"members\":[0],\"joiners\":[],"
                             "\"reason\":\"rank 1 lost\"") != NULL,
                "%s", text);
    const json_t *r0 = json_array_get(gens, 0), *r1 = json_array_get(gens, 1);
    T_CHECK(json_is_string(json_object_get(r0, "detected_at"))); /* times are ISO 8601 */
    T_CHECK(json_is_null(json_object_get(r0, "resumed_at")));
    T_EQ_INT(json_integer_value(json_object_get(r1, "commit_step")), 20);
    T_EQ_INT(json_integer_value(json_object_get(r1, "lost_steps")), 7);
    T_NEAR(json_number_value(json_object_get(r1, "regroup_ms")), 150.5, 1e-9);
    T_EQ_STR(json_string_value(json_object_get(r1, "lost_at")), "1970-01-01T00:01:40.500Z");
    free(text);
    json_decref(run);
    json_t *steps = db_get_steps(x.db, x.run, 0, true, &e);
    char *rows = json_dumps(json_object_get(steps, "rows"), JSON_COMPACT);
    T_CHECK_MSG(strstr(rows, ",1,1,") != NULL, "%s", rows); /* generation 1, world 1 */
    free(rows);
    json_decref(steps);
    T_CHECK_MSG(fx_count(fx_events(&x, sse, sizeof sse), "event: elastic") == 4, "%s", sse);
    /* a replacement in slot 1: its hello counts for the slot, not as a new start */
    T_OK(report_emit_hello(&x.w[0], 2, &e));
    T_OK(fx_ingest(&x, 0, &res, &e));
    T_OK(report_emit_hello(&x.w[1], 2, &e));
    T_OK(fx_ingest(&x, 1, &res, &e));
    T_CHECK(res.run_running);
    T_CHECK(ingest_rank_state(&x.in, 1)->said_hello);
    ingest_rank_reset(&x.in, 1);
    T_CHECK(!ingest_rank_state(&x.in, 1)->said_hello);
    T_OK(report_emit_hello(&x.w[1], 2, &e));
    T_OK(fx_ingest(&x, 1, &res, &e));
    T_CHECK(ingest_rank_state(&x.in, 1)->said_hello);
    T_CHECK(!res.run_running);
    fx_close(&x);
}

static void test_ingest_trace_cap(void)
{
    struct fx x;
    struct err e = {0};
    struct ingest_result res;
    T_OK(fx_open(&x, &e));
    T_EQ_INT(x.in.trace_cap, TRACE_MAX_ROWS);
    x.in.trace_cap = 3;
    json_t *spans = json_pack("[[s, I, I]]", "step", (json_int_t)10, (json_int_t)20);
    json_t *ops = json_array();
    for (int step = 0; step < 5; step++) {
        struct report_trace tr = {.step = step, .spans = spans, .ops = ops};
        T_OK(report_emit_trace(&x.w[step % 2], &tr, &e));
        T_OK(fx_ingest(&x, step % 2, &res, &e));
        T_CHECK(!res.store_failed);
    }
    json_t *trace = db_get_trace(x.db, x.run, &test_trace_all, &e);
    T_CHECK_MSG(trace != NULL, "%s", e.msg);
    T_EQ_INT(json_array_size(json_object_get(json_object_get(trace, "steps"), "rows")), 3);
    T_EQ_INT(json_integer_value(
                 json_object_get(json_object_get(trace, "page"), "dropped_at_ingest")),
             2);
    json_decref(trace);
    json_decref(spans);
    json_decref(ops);
    fx_close(&x);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_ingest_every_type);
    TEST_RUN(test_ingest_rejects);
    TEST_RUN(test_ingest_trace_cap);
    TEST_RUN(test_ingest_elastic);
    return test_end();
}
