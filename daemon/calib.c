/* calib: see calib.h. */
#include "daemon/calib.h"

#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/spec.h"

#define CALIB_SCAN 16            /* pending experiments one refresh stores */
#define CALIB_SWITCH_ROUNDS 5000 /* ping-pong round trips: ~50 ms at a few us a switch */

static const char *calib_str(const json_t *spec, const char *name)
{
    const char *v = json_string_value(spec_field_value(spec, name));
    return v ? v : "";
}

static int calib_int(const json_t *spec, const char *name)
{
    return (int)json_integer_value(spec_field_value(spec, name));
}

void calib_key_of(const struct db_data_run *run, char *dataset, size_t n)
{
    const json_t *shape = spec_field_value(run->spec, "dataset.shape");
    char *s = json_array_size(shape) ? json_dumps(shape, JSON_COMPACT) : NULL;
    snprintf(dataset, n, "%s%s%s", calib_str(run->spec, "dataset.name"), s ? " " : "",
             s ? s : "");
    free(s);
}

/* Whether runs a and b calibrate the same key (their node aside). */
static bool calib_same_key(const struct db_data_run *a, const struct db_data_run *b)
{
    char da[128], db_[128];
    calib_key_of(a, da, sizeof da);
    calib_key_of(b, db_, sizeof db_);
    return strcmp(da, db_) == 0 &&
           strcmp(calib_str(a->spec, "model"), calib_str(b->spec, "model")) == 0 &&
           strcmp(calib_str(a->spec, "device"), calib_str(b->spec, "device")) == 0 &&
           calib_int(a->spec, "batch_size") == calib_int(b->spec, "batch_size") &&
           calib_int(a->spec, "threads") == calib_int(b->spec, "threads");
}

static int calib_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) (sorted in place) and its distribution-free 95 % interval: the
 * order statistics (n-1)/2 -+ 0.98 sqrt(n) (the binomial's normal approximation). */
static void calib_median(double *v, size_t n, double *med, double *lo, double *hi)
{
    qsort(v, n, sizeof *v, calib_cmp);
    double c = (double)(n - 1) / 2, half = 0.98 * sqrt((double)n);
    *med = (v[(n - 1) / 2] + v[n / 2]) / 2;
    *lo = v[(size_t)fmax(0, floor(c - half))];
    *hi = v[(size_t)fmin((double)(n - 1), ceil(c + half))];
}

/* What a calibration states per k: each phase, and their sum per step (the compute). */
#define CALIB_NFIG (PERF_NPHASES + 1)
static const char *const calib_fig_names[CALIB_NFIG] = {"forward", "backward", "optimizer",
                                                        "compute"};

/* Figure f of step s: a phase, or forward + backward + optimizer; below 0 when unmeasured. */
static double calib_fig_of(const struct db_step_row *s, int f)
{
    static const int phase[PERF_NPHASES] = {PHASE_FORWARD, PHASE_BACKWARD, PHASE_OPTIMIZER};
    if (f < PERF_NPHASES)
        return s->phase_ms[phase[f]];
    double sum = 0;
    for (int p = 0; p < PERF_NPHASES; p++) {
        if (s->phase_ms[phase[p]] < 0)
            return -1;
        sum += s->phase_ms[phase[p]];
    }
    return sum;
}

/* The median and its interval of each figure over the steps of every run at k of d that
 * calibrates base's key. Returns the steps (0: none). */
struct calib_fig {
    double med, lo, hi;
};

static size_t calib_figs_at(const struct db_experiment_data *d, const struct db_data_run *base,
                            int k, struct calib_fig *fig)
{
    size_t cap = 0, n = 0;
    for (size_t r = 0; r < d->nruns; r++)
        if (d->runs[r].world_size == k && calib_same_key(&d->runs[r], base))
            cap += d->runs[r].nsteps;
    double *v = malloc((cap + 1) * sizeof *v);
    if (!v || cap == 0) {
        free(v);
        return 0;
    }
    for (int f = 0; f < CALIB_NFIG; f++) {
        n = 0;
        for (size_t r = 0; r < d->nruns; r++)
            for (size_t i = 0; d->runs[r].world_size == k &&
                               calib_same_key(&d->runs[r], base) && i < d->runs[r].nsteps;
                 i++)
                if (calib_fig_of(&d->runs[r].steps[i], f) >= 0)
                    v[n++] = calib_fig_of(&d->runs[r].steps[i], f);
        if (n == 0)
            break;
        calib_median(v, n, &fig[f].med, &fig[f].lo, &fig[f].hi);
    }
    free(v);
    return n;
}

static json_t *calib_num(double d)
{
    return isfinite(d) ? json_real(d) : json_null();
}

json_t *calib_curve_of(const struct db_experiment_data *d, struct err *e)
{
    const struct db_data_run *base = NULL;
    for (size_t r = 0; r < d->nruns && !base; r++)
        if (d->runs[r].world_size == 1 && d->runs[r].nsteps > 0)
            base = &d->runs[r];
    struct calib_fig one[CALIB_NFIG];
    if (!base || calib_figs_at(d, base, 1, one) == 0)
        return err_set(e, ERR_CONFLICT, "world_size",
                       "calibration %lld has no measured one-rank run (world_size 1): every "
                       "slowdown is against it",
                       (long long)d->id),
               NULL;
    json_t *curve = json_array();
    for (int k = 1; k <= CALIB_MAX_K; k++) {
        struct calib_fig at[CALIB_NFIG];
        size_t steps = calib_figs_at(d, base, k, at);
        if (steps == 0)
            continue;
        json_t *pt = json_pack("{s:i, s:I}", "k", k, "steps", (json_int_t)steps);
        for (int f = 0; f < CALIB_NFIG; f++) {
            char lo[32], hi[32];
            bool ok = one[f].med > 0 && one[f].lo > 0;
            snprintf(lo, sizeof lo, "%s_lo", calib_fig_names[f]);
            snprintf(hi, sizeof hi, "%s_hi", calib_fig_names[f]);
            json_object_set_new(pt, calib_fig_names[f],
                                calib_num(ok ? at[f].med / one[f].med : NAN));
            json_object_set_new(pt, lo, calib_num(ok ? at[f].lo / one[f].hi : NAN));
            json_object_set_new(pt, hi, calib_num(ok ? at[f].hi / one[f].lo : NAN));
        }
        json_array_append_new(curve, pt);
    }
    return curve;
}

/* ---- the node's context switch ---------------------------------------------------------- */

/* The child: echoes the parent's bytes, as many as it sends, then exits (not at the pipe's
 * end: another process the daemon forks meanwhile may hold a copy of its write end). Only
 * async-signal-safe calls (the daemon has threads). */
static void calib_echo(int in, int out, const cpu_set_t *one)
{
    char b;
    sched_setaffinity(0, sizeof *one, one);
    for (int i = 0; i < CALIB_SWITCH_ROUNDS; i++)
        if (read(in, &b, 1) != 1 || write(out, &b, 1) != 1)
            break;
    _exit(0);
}

double calib_switch_us(void)
{
    cpu_set_t had, one;
    int to[2], from[2];
    if (sched_getaffinity(0, sizeof had, &had) != 0)
        return NAN;
    int cpu = 0;
    while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &had))
        cpu++;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (pipe2(to, O_CLOEXEC) != 0)
        return NAN;
    if (pipe2(from, O_CLOEXEC) != 0) {
        close(to[0]);
        close(to[1]);
        return NAN;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(to[1]);
        close(from[0]);
        calib_echo(to[0], from[1], &one);
    }
    close(to[0]);
    close(from[1]);
    double us = NAN;
    if (pid > 0 && sched_setaffinity(0, sizeof one, &one) == 0) {
        char b = 'x';
        int i = 0;
        int64_t t0 = clock_mono_ns();
        for (; i < CALIB_SWITCH_ROUNDS; i++)
            if (write(to[1], &b, 1) != 1 || read(from[0], &b, 1) != 1)
                break;
        /* a round trip is two switches (there and back) */
        if (i == CALIB_SWITCH_ROUNDS)
            us = (double)(clock_mono_ns() - t0) / 1e3 / (2.0 * CALIB_SWITCH_ROUNDS);
        sched_setaffinity(0, sizeof had, &had);
    }
    close(to[1]);
    close(from[0]);
    if (pid > 0 && !isfinite(us))
        kill(pid, SIGKILL); /* stopped short: the child may still be waiting for a byte */
    if (pid > 0)
        waitpid(pid, NULL, 0);
    return us;
}

double calib_quantum_ms(int cpus)
{
    FILE *f = fopen("/sys/kernel/debug/sched/base_slice_ns", "r");
    long long ns = 0;
    if (f) {
        if (fscanf(f, "%lld", &ns) != 1)
            ns = 0;
        fclose(f);
    }
    if (ns > 0)
        return (double)ns / 1e6;
    /* the kernel's default: 0.75 ms scaled by 1 + log2 of the CPUs, counted up to 8 */
    int c = cpus < 1 ? 1 : cpus > 8 ? 8 : cpus;
    return 0.75 * (1 + floor(log2((double)c)));
}

/* ---- storing and reading ----------------------------------------------------------------- */

/* Stores the calibration of experiment id (an empty curve when it measured nothing usable:
 * it is then not asked again). */
static int calib_store_one(struct db *db, int64_t id, struct err *e)
{
    struct db_experiment_data d;
    if (db_get_experiment_data(db, id, &d, e) < 0) {
        db_experiment_data_free(&d);
        return -1;
    }
    struct err ce = {0};
    json_t *curve = calib_curve_of(&d, &ce);
    if (!curve)
        curve = json_array();
    const struct db_data_run *base = NULL;
    bool pinned = true;
    for (size_t r = 0; r < d.nruns; r++) {
        const struct db_data_run *run = &d.runs[r];
        if (!base && run->world_size == 1)
            base = run;
        if (run->nsteps > 0 && run->oversubscribed &&
            (run->cpus_online <= 0 || run->world_size <= run->cpus_online))
            pinned = false;
    }
    char dataset[128] = "";
    if (base)
        calib_key_of(base, dataset, sizeof dataset);
    int cpus = base && base->cpus_online > 0 ? base->cpus_online
                                             : (int)sysconf(_SC_NPROCESSORS_ONLN);
    double sw = calib_switch_us();
    struct db_calibration cal = {
        .experiment_id = id,
        .node = base ? base->host : "",
        .model = base ? calib_str(base->spec, "model") : "",
        .device = base ? calib_str(base->spec, "device") : "",
        .dataset = dataset,
        .batch_size = base ? calib_int(base->spec, "batch_size") : 0,
        .threads = base ? calib_int(base->spec, "threads") : 0,
        .cpus = cpus,
        .pinned = pinned,
        .switch_us = isfinite(sw) ? sw : 0,
        .quantum_ms = calib_quantum_ms(cpus),
        .curve = curve,
    };
    int rc = db_store_calibration(db, &cal, e);
    json_decref(curve);
    db_experiment_data_free(&d);
    return rc;
}

int calib_refresh(struct db *db, struct err *e)
{
    int64_t ids[CALIB_SCAN];
    size_t n = 0;
    if (db_calibrations_pending(db, ids, CALIB_SCAN, &n, e) < 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (calib_store_one(db, ids[i], e) < 0)
            return -1;
    return 0;
}

static void calib_copy(char *dst, size_t n, const json_t *row, const char *name)
{
    const char *v = json_string_value(json_object_get(row, name));
    snprintf(dst, n, "%s", v ? v : "");
}

/* One stored row into c; false when its curve has no usable point. */
static bool calib_of_row(const json_t *row, struct calib *c)
{
    memset(c, 0, sizeof *c);
    c->id = json_integer_value(json_object_get(row, "id"));
    calib_copy(c->node, sizeof c->node, row, "node");
    calib_copy(c->model, sizeof c->model, row, "model");
    calib_copy(c->device, sizeof c->device, row, "device");
    calib_copy(c->dataset, sizeof c->dataset, row, "dataset");
    c->batch_size = (int)json_integer_value(json_object_get(row, "batch_size"));
    c->threads = (int)json_integer_value(json_object_get(row, "threads"));
    size_t i, n = 0;
    json_t *pt;
    int cores = (int)json_integer_value(json_object_get(row, "cpus"));
    json_array_foreach(json_object_get(row, "curve"), i, pt)
    {
        if (n >= CALIB_MAX_K)
            break;
        struct perf_calib_point *p = &c->pts[n];
        p->k = (int)json_integer_value(json_object_get(pt, "k"));
        bool ok = p->k >= 1;
        /* more ranks than cores: the whole compute's ratio for every phase, since a phase
         * shorter than the time slice mostly runs within one and its own median misses
         * the slices the step waits for */
        bool sliced = cores > 0 && p->k > cores;
        for (int ph = 0; ph < PERF_NPHASES; ph++) {
            const char *name = calib_fig_names[sliced ? PERF_NPHASES : ph];
            p->slow[ph] = json_number_value(json_object_get(pt, name));
            ok = ok && p->slow[ph] > 0;
        }
        n += ok;
    }
    c->perf = (struct perf_calib){
        .pts = c->pts,
        .n = n,
        .cores = cores,
        .switch_s = json_number_value(json_object_get(row, "switch_us")) * 1e-6,
        .quantum_s = json_number_value(json_object_get(row, "quantum_ms")) * 1e-3,
    };
    return n > 0 && c->pts[0].k == 1;
}

int calib_load(struct db *db, struct calib_set *out, struct err *e)
{
    memset(out, 0, sizeof *out);
    if (calib_refresh(db, e) < 0)
        return -1;
    json_t *rows = db_list_calibrations(db, NULL, NULL, 0, e);
    if (!rows)
        return -1;
    out->c = calloc(json_array_size(rows) + 1, sizeof *out->c);
    if (!out->c) {
        json_decref(rows);
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    }
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
    {
        if (calib_of_row(row, &out->c[out->n]))
            out->n++;
    }
    for (i = 0; i < out->n; i++) /* the copies moved: each one's own points */
        out->c[i].perf.pts = out->c[i].pts;
    json_decref(rows);
    return 0;
}

void calib_set_free(struct calib_set *s)
{
    free(s->c);
    memset(s, 0, sizeof *s);
}

const struct calib *calib_match(const struct calib_set *s, const struct db_data_run *run)
{
    if (!s || !run)
        return NULL;
    char dataset[128];
    calib_key_of(run, dataset, sizeof dataset);
    for (size_t i = 0; i < s->n; i++) {
        const struct calib *c = &s->c[i];
        if (strcmp(c->node, run->host) == 0 &&
            strcmp(c->model, calib_str(run->spec, "model")) == 0 &&
            strcmp(c->device, calib_str(run->spec, "device")) == 0 &&
            strcmp(c->dataset, dataset) == 0 &&
            c->batch_size == calib_int(run->spec, "batch_size") &&
            c->threads == calib_int(run->spec, "threads"))
            return c;
    }
    return NULL;
}

json_t *calib_list(struct db *db, const char *node, const char *model, int64_t id,
                   struct err *e)
{
    if (calib_refresh(db, e) < 0)
        return NULL;
    json_t *rows = db_list_calibrations(db, node, model, id, e);
    return rows ? json_pack("{s:o}", "calibrations", rows) : NULL;
}
