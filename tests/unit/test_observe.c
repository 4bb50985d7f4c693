/* Unit tests for worker/observe: a usage window reports the steps, wall and CPU time and
 * context switches of its span (a busy loop shows about one core), and nothing for a window
 * without a step; NVML (a fake library, tests/unit/fake_nvml.c) is sampled at most every
 * OBSERVE_NVML_PERIOD_NS and the window reports the exact means of its samples; a traced
 * step carries its spans and collectives and the rank's realtime offset, and nothing is
 * recorded outside a trace; the peak resident set is at least the resident set. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/clock.h"
#include "tests/unit/test.h"
#include "worker/observe.h"

/* A pipe the observer writes its lines to; obs_pipe_events reads them back parsed. */
struct obs_pipe {
    int fds[2];
    struct report_writer w;
};

static int obs_pipe_open(struct obs_pipe *p)
{
    if (pipe(p->fds) != 0)
        return -1;
    report_writer_init(&p->w, p->fds[1], 0);
    return 0;
}

static json_t *obs_pipe_events(struct obs_pipe *p)
{
    close(p->fds[1]);
    report_writer_cleanup(&p->w);
    struct buf b;
    buf_init(&b);
    char chunk[4096];
    ssize_t n;
    while ((n = read(p->fds[0], chunk, sizeof chunk)) > 0)
        buf_append(&b, chunk, (size_t)n);
    close(p->fds[0]);
    json_t *out = json_array();
    size_t start = 0;
    for (size_t i = 0; i < b.len; i++)
        if (b.data[i] == '\n') {
            enum report_type type;
            struct err e = {0};
            json_t *ev = report_parse_line((const char *)b.data + start, i - start, &type, &e);
            if (!ev) /* the caller's count of events then fails its case */
                fprintf(stderr, "    a line the daemon would refuse: %s\n", e.msg);
            else
                json_array_append_new(out, ev);
            start = i + 1;
        }
    buf_free(&b);
    return out;
}

static void obs_busy_ms(int ms)
{
    int64_t end = clock_mono_ns() + (int64_t)ms * 1000000;
    volatile double x = 0;
    while (clock_mono_ns() < end)
        x += 1.0;
}

static double num(const json_t *ev, const char *k)
{
    return json_number_value(json_object_get(ev, k));
}

static void test_observe_usage_window(void)
{
    struct obs_pipe p;
    struct err e = {0};
    T_CHECK(obs_pipe_open(&p) == 0);
    struct observe o;
    observe_init(&o, &p.w, NULL);
    observe_window_begin(&o, 2);
    T_OK(observe_window_emit(&o, 0, &e)); /* no step yet: nothing */
    for (int i = 0; i < 3; i++) {
        obs_busy_ms(40);
        observe_window_step(&o);
    }
    T_OK(observe_window_emit(&o, 4, &e));
    T_OK(observe_window_emit(&o, 5, &e)); /* the next window is empty again */
    observe_cleanup(&o);
    json_t *evs = obs_pipe_events(&p);
    T_EQ_INT(json_array_size(evs), 1);
    json_t *u = json_array_get(evs, 0);
    T_EQ_STR(json_string_value(json_object_get(u, "type")), "usage");
    T_EQ_INT(json_integer_value(json_object_get(u, "repeat")), 2);
    T_EQ_INT(json_integer_value(json_object_get(u, "epoch")), 4);
    T_EQ_INT(json_integer_value(json_object_get(u, "steps")), 3);
    double wall = num(u, "wall_s"), cpu = num(u, "user_s") + num(u, "sys_s");
    T_CHECK_MSG(wall >= 0.12 && wall < 5, "wall %g", wall);
    /* a busy loop keeps one core busy, whatever else the machine runs: at most the wall,
     * and more than a third of it even on a loaded CI machine */
    T_CHECK_MSG(cpu <= wall * 1.05 + 0.01 && cpu > wall / 3, "cpu %g of wall %g", cpu, wall);
    T_CHECK(json_integer_value(json_object_get(u, "rss_bytes")) > 0);
    T_CHECK(!json_object_get(u, "gpu_util_pct") && !json_object_get(u, "gpu_power_w"));
    json_decref(evs);
    T_CHECK(observe_peak_rss_bytes() >= observe_rss_bytes() && observe_rss_bytes() > 0);
}

/* NVML through the fake: samples every OBSERVE_NVML_PERIOD_NS at most, so three steps
 * 120 ms apart take three samples (utilisation 10, 20, 30 %; power 210, 220, 230 W) and
 * a burst of steps within one period takes none more. */
static void test_observe_nvml_means(void)
{
    const char *lib = getenv("DDPB_FAKE_NVML"); /* meson test sets it: never skipped */
    T_CHECK_MSG(lib && *lib, "DDPB_FAKE_NVML is not set: run it through meson test");
    if (!lib || !*lib)
        return;
    struct obs_pipe p;
    struct err e = {0};
    T_CHECK(obs_pipe_open(&p) == 0);
    struct observe o;
    setenv("CUDA_VISIBLE_DEVICES", "0", 1);
    observe_init(&o, &p.w, lib);
    T_CHECK_MSG(o.nvml != NULL, "the fake NVML did not open");
    observe_window_begin(&o, 0);
    for (int i = 0; i < 3; i++) {
        observe_window_step(&o);
        observe_window_step(&o); /* within the period: not sampled */
        struct timespec ts = {0, 120 * 1000000L};
        nanosleep(&ts, NULL);
    }
    T_OK(observe_window_emit(&o, 0, &e));
    observe_cleanup(&o);
    json_t *evs = obs_pipe_events(&p);
    json_t *u = json_array_get(evs, 0);
    T_EQ_INT(json_integer_value(json_object_get(u, "steps")), 6);
    T_NEAR(num(u, "gpu_util_pct"), 20.0, 1e-9);
    T_NEAR(num(u, "gpu_mem_util_pct"), 10.0, 1e-9);
    T_NEAR(num(u, "gpu_power_w"), 220.0, 1e-9);
    json_decref(evs);
}

static void test_observe_trace(void)
{
    struct obs_pipe p;
    struct err e = {0};
    T_CHECK(obs_pipe_open(&p) == 0);
    struct observe o;
    observe_init(&o, &p.w, NULL);
    observe_trace_span(&o, "forward", 1, 2); /* not tracing: dropped */
    T_CHECK(!observe_tracing(&o));
    observe_trace_begin(&o);
    T_CHECK(observe_tracing(&o));
    observe_trace_span(&o, "step", 100, 900);
    observe_trace_span(&o, "forward", 150, 140); /* an end before its start is clamped */
    observe_trace_op(&o, "allreduce", 3, 4096, "", 200, 700);
    T_OK(observe_trace_emit(&o, 1, 7, &e));
    T_CHECK(!observe_tracing(&o));
    T_OK(observe_trace_emit(&o, 1, 8, &e)); /* nothing begun: nothing sent */
    int64_t offset = (int64_t)(clock_wall_s() * 1e9) - clock_mono_ns();
    observe_cleanup(&o);
    json_t *evs = obs_pipe_events(&p);
    T_EQ_INT(json_array_size(evs), 1);
    json_t *t = json_array_get(evs, 0);
    T_EQ_INT(json_integer_value(json_object_get(t, "step")), 7);
    T_EQ_INT(json_integer_value(json_object_get(t, "repeat")), 1);
    int64_t got = json_integer_value(json_object_get(t, "clock_offset_ns"));
    T_CHECK_MSG(llabs(got - offset) < 50000000, "offset %lld, now %lld", (long long)got,
                (long long)offset);
    json_t *want = json_pack("[[s, i, i], [s, i, i]]", "step", 100, 900, "forward", 150, 150);
    T_CHECK(json_equal(json_object_get(t, "spans"), want));
    json_decref(want);
    want = json_pack("[[s, i, i, s, i, i]]", "allreduce", 3, 4096, "?", 200, 700);
    T_CHECK(json_equal(json_object_get(t, "ops"), want));
    json_decref(want);
    json_decref(evs);
}

/* Gradient readiness: per tensor the median over the recorded steps of its time from the
 * backward's start (a slow step moves no median), a tensor the hook never named is final
 * when backward ends, nothing is recorded outside a backward, one line per repeat, none
 * when no step was recorded. */
static void test_observe_grads(void)
{
    struct obs_pipe p;
    struct err e = {0};
    T_CHECK(obs_pipe_open(&p) == 0);
    struct observe o;
    observe_init(&o, &p.w, NULL);
    const int64_t bytes[3] = {40, 4000, 400000};
    T_OK(observe_grads_begin(&o, bytes, 3, &e));
    observe_grads_ready(&o, 0, 1, 5); /* no backward begun: ignored */
    static const int64_t t0[3] = {100, 300, 500}, t1[3] = {120, 5000, 510},
                         t2[3] = {110, 310, 490};
    const int64_t *ts[3] = {t0, t1, t2};
    for (int s = 0; s < 3; s++) {
        int64_t start = 1000000 * (s + 1);
        observe_grads_backward(&o, start);
        observe_grads_ready(&o, 0, 1, start + ts[s][0]);
        observe_grads_ready(&o, 1, 1, start + ts[s][1]);
        if (s != 2) /* tensor 2 never named in the last step */
            observe_grads_ready(&o, 2, 1, start + ts[s][2]);
        observe_grads_end(&o, 600 + 10 * s);
    }
    T_OK(observe_grads_emit(&o, 4, &e));
    T_OK(observe_grads_emit(&o, 5, &e)); /* nothing recorded since: nothing sent */
    observe_cleanup(&o);
    json_t *evs = obs_pipe_events(&p);
    T_EQ_INT(json_array_size(evs), 1);
    json_t *g = json_array_get(evs, 0);
    T_EQ_STR(json_string_value(json_object_get(g, "type")), "grads");
    T_EQ_INT(json_integer_value(json_object_get(g, "repeat")), 4);
    T_EQ_INT(json_integer_value(json_object_get(g, "steps")), 3);
    T_EQ_INT(json_integer_value(json_object_get(g, "backward_ns")), 610);
    /* tensor 2: the median of 500 and 510 over the two steps that named it */
    json_t *want = json_pack("[[i, i], [i, i], [i, i]]", 40, 110, 4000, 310, 400000, 505);
    T_CHECK(json_equal(json_object_get(g, "tensors"), want));
    json_decref(want);
    json_decref(evs);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_observe_grads);
    TEST_RUN(test_observe_usage_window);
    TEST_RUN(test_observe_nvml_means);
    TEST_RUN(test_observe_trace);
    return test_end();
}
