/* Unit tests for daemon/trace: stored traced steps become Chrome trace events. Two ranks
 * whose clocks differ by a known offset land on one time line; each collective lands on
 * a communication lane free at its launch (queued ones on a second); every event carries
 * the fields the trace-event format requires; names say rank, node and lane. */
#include <string.h>

#include "daemon/trace.h"
#include "tests/unit/test.h"

/* {"world_size", "ranks", "steps": {"columns", "rows"}} as db_get_trace returns it. */
static json_t *trace_input(void)
{
    json_t *rows = json_array();
    /* rank 0: offset 1000 ns; step [0, 10000), forward inside, two overlapping ops */
    json_array_append_new(rows,
                          json_pack("[i, i, i, I, [[s, i, i], [s, i, i]], [[s, i, i, s, i, i], "
                                    "[s, i, i, s, i, i]]]",
                                    0, 0, 5, (json_int_t)1000, "step", 0, 10000, "forward", 100,
                                    4000, "allreduce", 0, 4096, "ring", 5000, 8000, "allreduce",
                                    1, 1024, "rd", 6000, 9000));
    /* rank 1: its monotonic clock is 500 ns behind rank 0's wall time */
    json_array_append_new(rows, json_pack("[i, i, i, I, [[s, i, i]], []]", 1, 0, 5,
                                          (json_int_t)1500, "step", 0, 9000));
    json_t *ranks = json_pack("[{s:i, s:s, s:s}, {s:i, s:s, s:s}]", "rank", 0, "node", "n0",
                              "host", "h0", "rank", 1, "node", "n1", "host", "h1");
    return json_pack("{s:i, s:o, s:{s:[s,s,s,s,s,s], s:o}}", "world_size", 2, "ranks", ranks,
                     "steps", "columns", "rank", "repeat", "step", "clock_offset_ns", "spans",
                     "ops", "rows", rows);
}

static const json_t *find(const json_t *events, const char *ph, int pid, const char *name,
                          int nth)
{
    size_t i;
    const json_t *ev;
    json_array_foreach((json_t *)events, i, ev)
    {
        const char *n = json_string_value(json_object_get(ev, "name"));
        if (strcmp(json_string_value(json_object_get(ev, "ph")), ph) == 0 &&
            json_integer_value(json_object_get(ev, "pid")) == pid && n &&
            strcmp(n, name) == 0 && nth-- == 0)
            return ev;
    }
    return NULL;
}

static double num(const json_t *ev, const char *k)
{
    return json_number_value(json_object_get(ev, k));
}

static void test_trace_events(void)
{
    struct err e = {0};
    json_t *in = trace_input();
    json_t *t = trace_build(in, 42, &e);
    json_decref(in);
    T_CHECK_MSG(t != NULL, "%s", e.msg);
    const json_t *events = json_object_get(t, "traceEvents");
    /* every event has the format's fields: name, ph, pid, tid; X events ts and dur */
    size_t i;
    const json_t *ev;
    json_array_foreach((json_t *)events, i, ev)
    {
        const char *ph = json_string_value(json_object_get(ev, "ph"));
        T_CHECK(json_is_string(json_object_get(ev, "name")) && ph &&
                json_is_integer(json_object_get(ev, "pid")) &&
                json_is_integer(json_object_get(ev, "tid")));
        if (ph && strcmp(ph, "X") == 0)
            T_CHECK(json_is_number(json_object_get(ev, "ts")) && num(ev, "dur") >= 0 &&
                    json_is_object(json_object_get(ev, "args")));
    }
    /* origin: rank 0's step at 0 + 1000 ns is the earliest instant; rank 1's starts at
     * 1500 ns, 0.5 us later */
    const json_t *s0 = find(events, "X", 0, "step 5", 0),
                 *s1 = find(events, "X", 1, "step 5", 0);
    T_CHECK(s0 && s1);
    T_NEAR(num(s0, "ts"), 0.0, 1e-9);
    T_NEAR(num(s0, "dur"), 10.0, 1e-9);
    T_NEAR(num(s1, "ts"), 0.5, 1e-9);
    T_EQ_INT(
        json_integer_value(json_object_get(json_object_get(t, "otherData"), "origin_unix_ns")),
        1000);
    const json_t *fw = find(events, "X", 0, "forward", 0);
    T_CHECK(fw && json_integer_value(json_object_get(fw, "tid")) == 0);
    T_NEAR(num(fw, "ts"), 0.1, 1e-9);
    /* the second allreduce was launched while the first was in flight: lane 2 */
    const json_t *a = find(events, "X", 0, "allreduce", 0),
                 *b = find(events, "X", 0, "allreduce", 1);
    T_CHECK(a && b);
    T_EQ_INT(json_integer_value(json_object_get(a, "tid")), 1);
    T_EQ_INT(json_integer_value(json_object_get(b, "tid")), 2);
    T_EQ_INT(json_integer_value(json_object_get(json_object_get(b, "args"), "bytes")), 1024);
    T_EQ_STR(json_string_value(json_object_get(json_object_get(b, "args"), "algorithm")), "rd");
    /* names: each rank with its node, its compute thread, its lanes */
    const json_t *pn = find(events, "M", 1, "process_name", 0);
    T_CHECK(pn &&
            strstr(json_string_value(json_object_get(json_object_get(pn, "args"), "name")),
                   "node n1"));
    T_CHECK(find(events, "M", 0, "thread_name", 2) != NULL); /* compute, lane 1, lane 2 */
    T_CHECK(find(events, "M", 1, "thread_name", 1) == NULL); /* rank 1 has no collective */
    json_decref(t);
}

/* A pipeline run (P = 2, world 4): its micro-batch spans keep their names (forward,
 * backward, p2p) with args.micro_batch; spans without an index have none; each rank's
 * process name gives its stage and replica; a run without a pipeline keeps its names. */
static void test_trace_pipeline(void)
{
    struct err e = {0};
    json_t *rows = json_array();
    /* rank 3 = replica 1, stage 1: two micro-batches' forward and backward, a p2p wait */
    json_array_append_new(
        rows, json_pack("[i, i, i, I, [[s, i, i], [s, i, i, i], [s, i, i, i], [s, i, i, i], "
                        "[s, i, i, i], [s, i, i, i], [s, i, i]], []]",
                        3, 0, 2, (json_int_t)0, "step", 0, 10000, "p2p", 0, 1000, 0, "forward",
                        1000, 2000, 0, "forward", 2000, 3000, 1, "backward", 3000, 5000, 0,
                        "backward", 5000, 7000, 1, "optimizer", 9000, 10000));
    json_t *ranks = json_array();
    for (int r = 0; r < 4; r++)
        json_array_append_new(
            ranks, json_pack("{s:i, s:s, s:s}", "rank", r, "node", "n0", "host", "h0"));
    json_t *in = json_pack("{s:i, s:i, s:o, s:{s:[s,s,s,s,s,s], s:o}}", "world_size", 4,
                           "pipeline", 2, "ranks", ranks, "steps", "columns", "rank", "repeat",
                           "step", "clock_offset_ns", "spans", "ops", "rows", rows);
    json_t *t = trace_build(in, 7, &e);
    T_CHECK_MSG(t != NULL, "%s", e.msg);
    const json_t *events = json_object_get(t, "traceEvents");
    const json_t *f1 = find(events, "X", 3, "forward", 1),
                 *b0 = find(events, "X", 3, "backward", 0),
                 *p0 = find(events, "X", 3, "p2p", 0),
                 *opt = find(events, "X", 3, "optimizer", 0);
    T_CHECK(f1 && b0 && p0 && opt);
    T_EQ_INT(json_integer_value(json_object_get(json_object_get(f1, "args"), "micro_batch")),
             1);
    T_EQ_INT(json_integer_value(json_object_get(json_object_get(b0, "args"), "micro_batch")),
             0);
    T_EQ_INT(json_integer_value(json_object_get(json_object_get(p0, "args"), "micro_batch")),
             0);
    T_EQ_STR(json_string_value(json_object_get(p0, "cat")), "p2p");
    T_NEAR(num(p0, "dur"), 1.0, 1e-9);
    T_CHECK(!json_object_get(json_object_get(opt, "args"), "micro_batch"));
    T_CHECK(find(events, "X", 3, "forward", 2) == NULL);
    const json_t *pn = find(events, "M", 3, "process_name", 0);
    T_CHECK(pn != NULL);
    const char *name = json_string_value(json_object_get(json_object_get(pn, "args"), "name"));
    T_CHECK_MSG(name && strstr(name, "rank 3 (stage 1, replica 1, node n0"), "%s", name);
    pn = find(events, "M", 2, "process_name", 0);
    name = json_string_value(json_object_get(json_object_get(pn, "args"), "name"));
    T_CHECK_MSG(name && strstr(name, "rank 2 (stage 0, replica 1,"), "%s", name);
    T_EQ_INT(json_integer_value(json_object_get(json_object_get(t, "otherData"), "pipeline")),
             2);
    json_decref(t);
    /* pipeline 1: the names of a data-parallel run */
    json_object_set_new(in, "pipeline", json_integer(1));
    t = trace_build(in, 7, &e);
    pn = find(json_object_get(t, "traceEvents"), "M", 3, "process_name", 0);
    name = json_string_value(json_object_get(json_object_get(pn, "args"), "name"));
    T_CHECK_MSG(name && strncmp(name, "rank 3 (node n0", 15) == 0, "%s", name);
    json_decref(t);
    json_decref(in);
}

/* The run's events (run_events: injected faults) are instant events on the time line: on
 * their rank's process, or global for a node's; without traced steps the first is ts 0. */
static void test_trace_run_events(void)
{
    struct err e = {0};
    json_t *in = trace_input();
    json_object_set_new(in, "events",
                        json_pack("[{s:i, s:f, s:s, s:s, s:i, s:s, s:i, s:i, s:i}, "
                                  "{s:i, s:f, s:s, s:s, s:i, s:s, s:n, s:i, s:i}]",
                                  "seq", 1, "unix_s", 5e-6, "type", "fault", "action", "inject",
                                  "fault", 0, "kind", "stop", "rank", 1, "node", 0, "step", 5,
                                  "seq", 2, "unix_s", 9e-6, "type", "fault", "action", "inject",
                                  "fault", 1, "kind", "link", "rank", "node", 1, "step", 6));
    json_t *t = trace_build(in, 42, &e);
    T_CHECK_MSG(t != NULL, "%s", e.msg);
    const json_t *events = json_object_get(t, "traceEvents");
    const json_t *stop = find(events, "i", 1, "fault stop inject", 0);
    const json_t *link = find(events, "i", 0, "fault link inject", 0);
    T_CHECK(stop && link);
    T_CHECK(num(stop, "ts") == 4.0); /* 5000 ns after the origin, rank 0's 1000 ns */
    T_EQ_STR(json_string_value(json_object_get(stop, "s")), "p");
    T_EQ_STR(json_string_value(json_object_get(link, "s")), "g");
    T_EQ_INT(json_integer_value(json_object_get(json_object_get(stop, "args"), "step")), 5);
    T_CHECK(!json_object_get(json_object_get(stop, "args"), "unix_s"));
    json_decref(t);
    json_decref(in);
    /* no traced step: the first event is the origin */
    in = json_pack("{s:i, s:[], s:{s:[], s:[]}, s:[{s:f, s:s, s:s, s:s, s:i}]}", "world_size",
                   2, "ranks", "steps", "columns", "rows", "events", "unix_s", 100.0, "type",
                   "fault", "action", "inject", "kind", "kill", "rank", 0);
    t = trace_build(in, 1, &e);
    events = json_object_get(t, "traceEvents");
    T_CHECK(json_array_size(events) == 1 && num(json_array_get(events, 0), "ts") == 0.0);
    json_decref(t);
    json_decref(in);
}

/* A run with no traced step is an empty, valid trace. */
static void test_trace_empty(void)
{
    struct err e = {0};
    json_t *in = json_pack("{s:i, s:[], s:{s:[], s:[]}}", "world_size", 2, "ranks", "steps",
                           "columns", "rows");
    json_t *t = trace_build(in, 1, &e);
    json_decref(in);
    T_CHECK(t && json_array_size(json_object_get(t, "traceEvents")) == 0);
    json_decref(t);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_trace_events);
    TEST_RUN(test_trace_empty);
    TEST_RUN(test_trace_run_events);
    TEST_RUN(test_trace_pipeline);
    return test_end();
}
