/* observe: see observe.h. */
#include "worker/observe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/nvml.h"
#include "common/stats.h"

/* CLOCK_REALTIME - CLOCK_MONOTONIC now, in ns: the offset that puts this node's
 * monotonic readings on the wall clock every node shares (through NTP). */
static int64_t observe_clock_offset_ns(void)
{
    struct timespec r, m;
    clock_gettime(CLOCK_MONOTONIC, &m);
    clock_gettime(CLOCK_REALTIME, &r);
    return ((int64_t)r.tv_sec - (int64_t)m.tv_sec) * 1000000000LL +
           ((int64_t)r.tv_nsec - (int64_t)m.tv_nsec);
}

void observe_init(struct observe *o, struct report_writer *w, const char *nvml_lib)
{
    memset(o, 0, sizeof *o);
    o->w = w;
    o->clock_offset_ns = observe_clock_offset_ns();
    if (nvml_lib) {
        char why[160];
        o->nvml = gpu_nvml_open(nvml_lib, why, sizeof why); /* NULL: GPU figures left out */
        o->nvml_index = gpu_nvml_index_from_visible(getenv("CUDA_VISIBLE_DEVICES"));
    }
}

/* Frees the readiness record and empties it. */
static void observe_grads_free(struct observe_grads *g)
{
    free(g->bytes);
    free(g->ready);
    free(g->bwd);
    memset(g, 0, sizeof *g);
}

void observe_cleanup(struct observe *o)
{
    gpu_nvml_close(o->nvml);
    json_decref(o->spans);
    json_decref(o->ops);
    observe_grads_free(&o->grads);
    memset(o, 0, sizeof *o);
}

/* --- usage ------------------------------------------------------------------------------ */

void observe_window_begin(struct observe *o, int repeat)
{
    o->repeat = repeat;
    getrusage(RUSAGE_SELF, &o->ru0);
    o->wall0_ns = clock_mono_ns();
    o->steps = 0;
    o->util_sum = o->mem_util_sum = o->power_sum = 0;
    o->nsamples = 0;
}

static void observe_sample_nvml(struct observe *o)
{
    int64_t now = clock_mono_ns();
    if (!o->nvml || now - o->nvml_last_ns < OBSERVE_NVML_PERIOD_NS)
        return;
    o->nvml_last_ns = now;
    struct gpu_nvml_sample s;
    struct err e = {0};
    if (gpu_nvml_sample(o->nvml, o->nvml_index, &s, &e) < 0)
        return; /* a failed sample is a missing one, not a zero */
    o->util_sum += s.util_gpu;
    o->mem_util_sum += s.util_mem;
    o->power_sum += s.power_w;
    o->nsamples++;
}

void observe_window_step(struct observe *o)
{
    o->steps++;
    observe_sample_nvml(o);
}

static double observe_tv_s(struct timeval a, struct timeval b)
{
    return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_usec - a.tv_usec) / 1e6;
}

int observe_window_emit(struct observe *o, int epoch, struct err *e)
{
    if (o->steps == 0)
        return 0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    int64_t now = clock_mono_ns();
    double n = o->nsamples;
    struct report_usage u = {
        .repeat = o->repeat,
        .epoch = epoch,
        .steps = o->steps,
        .wall_s = (double)(now - o->wall0_ns) / 1e9,
        .user_s = observe_tv_s(o->ru0.ru_utime, ru.ru_utime),
        .sys_s = observe_tv_s(o->ru0.ru_stime, ru.ru_stime),
        .voluntary_cs = ru.ru_nvcsw - o->ru0.ru_nvcsw,
        .involuntary_cs = ru.ru_nivcsw - o->ru0.ru_nivcsw,
        .rss_bytes = observe_rss_bytes(),
        .gpu_util_pct = n > 0 ? o->util_sum / n : -1,
        .gpu_mem_util_pct = n > 0 ? o->mem_util_sum / n : -1,
        .gpu_power_w = n > 0 ? o->power_sum / n : -1,
    };
    int rc = report_emit_usage(o->w, &u, e);
    observe_window_begin(o, o->repeat);
    return rc;
}

int64_t observe_peak_rss_bytes(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (int64_t)ru.ru_maxrss * 1024; /* Linux: kilobytes */
}

int64_t observe_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long long size = 0, resident = -1;
    if (!f)
        return -1;
    if (fscanf(f, "%lld %lld", &size, &resident) != 2)
        resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * (int64_t)sysconf(_SC_PAGESIZE);
}

/* --- trace ------------------------------------------------------------------------------ */

void observe_trace_begin(struct observe *o)
{
    json_decref(o->spans);
    json_decref(o->ops);
    o->spans = json_array();
    o->ops = json_array();
}

bool observe_tracing(const struct observe *o)
{
    return o->spans != NULL;
}

void observe_trace_span(struct observe *o, const char *name, int64_t from_ns, int64_t to_ns)
{
    if (!o->spans || json_array_size(o->spans) >= REPORT_TRACE_MAX)
        return;
    json_array_append_new(o->spans, json_pack("[s, I, I]", name, (json_int_t)from_ns,
                                              (json_int_t)(to_ns > from_ns ? to_ns : from_ns)));
}

void observe_trace_span_mb(struct observe *o, const char *name, int mb, int64_t from_ns,
                           int64_t to_ns)
{
    if (!o->spans || json_array_size(o->spans) >= REPORT_TRACE_MAX)
        return;
    json_array_append_new(o->spans,
                          json_pack("[s, I, I, i]", name, (json_int_t)from_ns,
                                    (json_int_t)(to_ns > from_ns ? to_ns : from_ns), mb));
}

void observe_trace_op(struct observe *o, const char *op, int bucket, int64_t bytes,
                      const char *algorithm, int64_t launch_ns, int64_t end_ns)
{
    if (!o->ops || json_array_size(o->ops) >= REPORT_TRACE_MAX)
        return;
    json_array_append_new(o->ops,
                          json_pack("[s, i, I, s, I, I]", op, bucket, (json_int_t)bytes,
                                    algorithm[0] ? algorithm : "?", (json_int_t)launch_ns,
                                    (json_int_t)(end_ns > launch_ns ? end_ns : launch_ns)));
}

int observe_trace_emit(struct observe *o, int repeat, int64_t step, struct err *e)
{
    if (!o->spans)
        return 0;
    struct report_trace t = {.repeat = repeat,
                             .step = step,
                             .clock_offset_ns = o->clock_offset_ns,
                             .spans = o->spans,
                             .ops = o->ops};
    int rc = report_emit_trace(o->w, &t, e);
    json_decref(o->spans);
    json_decref(o->ops);
    o->spans = o->ops = NULL;
    return rc;
}

/* --- gradient readiness ------------------------------------------------------------------ */

int observe_grads_begin(struct observe *o, const int64_t *bytes, int nt, struct err *e)
{
    struct observe_grads *g = &o->grads;
    observe_grads_free(g);
    g->bytes = malloc((size_t)(nt + 1) * sizeof *g->bytes);
    g->ready = malloc((size_t)OBSERVE_GRADS_STEPS * (size_t)(nt + 1) * sizeof *g->ready);
    g->bwd = malloc(OBSERVE_GRADS_STEPS * sizeof *g->bwd);
    if (!g->bytes || !g->ready || !g->bwd) {
        observe_grads_free(g);
        return err_set(e, ERR_NOMEM, NULL, "gradient readiness: out of memory");
    }
    memcpy(g->bytes, bytes, (size_t)nt * sizeof *bytes);
    g->nt = nt;
    return 0;
}

void observe_grads_backward(struct observe *o, int64_t start_ns)
{
    struct observe_grads *g = &o->grads;
    if (!g->bytes || g->nsteps >= OBSERVE_GRADS_STEPS)
        return;
    g->start_ns = start_ns;
    for (int t = 0; t < g->nt; t++)
        g->ready[(size_t)g->nsteps * (size_t)g->nt + (size_t)t] = -1;
}

void observe_grads_ready(struct observe *o, int first, int n, int64_t now_ns)
{
    struct observe_grads *g = &o->grads;
    if (g->start_ns == 0)
        return;
    for (int t = first; t < first + n; t++)
        if (t >= 0 && t < g->nt)
            g->ready[(size_t)g->nsteps * (size_t)g->nt + (size_t)t] = now_ns - g->start_ns;
}

void observe_grads_end(struct observe *o, int64_t backward_ns)
{
    struct observe_grads *g = &o->grads;
    if (g->start_ns == 0)
        return;
    g->bwd[g->nsteps++] = backward_ns;
    g->start_ns = 0;
}

/* The median of column t (t < 0: the backward lengths) over the recorded steps, leaving
 * out the steps the hook did not name the tensor in; -1 when none did. */
static int64_t observe_grads_median(const struct observe_grads *g, int t, double *scratch)
{
    size_t n = 0;
    for (int s = 0; s < g->nsteps; s++) {
        int64_t v = t < 0 ? g->bwd[s] : g->ready[(size_t)s * (size_t)g->nt + (size_t)t];
        if (v >= 0)
            scratch[n++] = (double)v;
    }
    if (n == 0)
        return -1;
    struct stats_summary sum;
    stats_summarize(scratch, n, &sum);
    return (int64_t)llround(sum.median);
}

int observe_grads_emit(struct observe *o, int repeat, struct err *e)
{
    struct observe_grads *g = &o->grads;
    if (!g->bytes || g->nsteps == 0) {
        observe_grads_free(g);
        return 0;
    }
    double *scratch = malloc((size_t)g->nsteps * sizeof *scratch);
    json_t *tensors = json_array();
    int rc = 0;
    if (!scratch || !tensors) {
        rc = err_set(e, ERR_NOMEM, NULL, "gradient readiness: out of memory");
    } else {
        /* a tensor the hook never named (a parameter no loss depends on) is final when
         * backward ends: its bucket cannot launch earlier */
        int64_t bwd = observe_grads_median(g, -1, scratch);
        for (int t = 0; t < g->nt; t++) {
            int64_t r = observe_grads_median(g, t, scratch);
            json_array_append_new(tensors, json_pack("[I, I]", (json_int_t)g->bytes[t],
                                                     (json_int_t)(r >= 0 ? r : bwd)));
        }
        struct report_grads rg = {
            .repeat = repeat, .steps = g->nsteps, .backward_ns = bwd, .tensors = tensors};
        rc = report_emit_grads(o->w, &rg, e);
    }
    json_decref(tensors);
    free(scratch);
    observe_grads_free(g);
    return rc;
}
