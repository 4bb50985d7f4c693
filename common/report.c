/* report: worker → daemon event lines (report.h).
 *
 * Decision: the shape of every event type is a table of fields (name, kind, optional,
 * lower bound, struct member); one validator walks it on both sides: report_parse_line
 * in the daemon and report_emit in the worker (which refuses to write an event the
 * daemon would reject, so a worker bug shows up at its source). The contract is exact:
 * a missing, mistyped or unknown field is an error naming it. struct report_collective
 * converts to and from JSON through the same table's member offsets.
 *
 * A line is written with one write() loop under the writer's lock on a blocking pipe that
 * only this rank writes (one report_writer per process; the worker's main thread and its
 * heartbeat thread share it). The worker ignores SIGPIPE, so a daemon that went away
 * shows up here as EPIPE → ERR_PEER. */
#include "common/report.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/columns.h"
#include "common/spec.h"

#define REPORT_COUNT(a) (sizeof(a) / sizeof((a)[0]))

enum report_kind {
    REPORT_K_INT,     /* JSON integer in [min, INT_MAX]; member: int */
    REPORT_K_INT64,   /* JSON integer >= min; member: int64_t */
    REPORT_K_NUM,     /* JSON number, finite and >= 0; member: double */
    REPORT_K_STR,     /* JSON string; member: char[size] (length < size); none: any */
    REPORT_K_BOOL,    /* JSON true/false; member: bool */
    REPORT_K_ENV,     /* object of string or number values */
    REPORT_K_ERRCODE, /* string naming an enum err_code (err_code_name) */
    REPORT_K_SPANS,   /* trace spans [[name, start_ns, end_ns(, micro_batch)]...];
                         member: const json_t * */
    REPORT_K_OPS,     /* trace ops [[op, bucket, bytes, algorithm, launch_ns, end_ns]...];
                         member: const json_t * */
    REPORT_K_GRADS,   /* gradient readiness [[bytes, ready_ns]...]; member: const json_t * */
    REPORT_K_LAYERS,  /* a pipeline's layer profile [[forward_ns, backward_ns, param_bytes]...];
                         member: const json_t * */
    REPORT_K_CUTS,    /* a pipeline's cuts [[first_layer, bytes]...]; member: const json_t * */
    REPORT_K_RANKS,   /* ranks [r, ...]: at most SPEC_MAX_WORLD integers >= 0 */
    REPORT_K_FRACS,   /* [f|null, ...]: at most REPORT_MAX_CLASSES numbers in [0, 1] or null;
                         member: json_t * (borrowed) */
};

struct report_field {
    const char *name;
    enum report_kind kind;
    bool optional;
    int64_t min;      /* INT, INT64: smallest value */
    size_t off, size; /* member of the event's struct; size 0: none */
};

#define REPORT_IN(type, m) .off = offsetof(type, m), .size = sizeof(((type *)0)->m)
#define REPORT_AT(m) REPORT_IN(struct report_collective, m)
#define REPORT_STEP_AT(m) REPORT_IN(struct report_step, m)
#define REPORT_EPOCH_AT(m) REPORT_IN(struct report_epoch, m)
#define REPORT_MEMORY_AT(m) REPORT_IN(struct report_memory, m)
#define REPORT_USAGE_AT(m) REPORT_IN(struct report_usage, m)
#define REPORT_TRACE_AT(m) REPORT_IN(struct report_trace, m)
#define REPORT_GRADS_AT(m) REPORT_IN(struct report_grads, m)
#define REPORT_PIPE_AT(m) REPORT_IN(struct report_pipe, m)

/* Every event starts with these. */
static const struct report_field report_common_fields[] = {
    {.name = "type", .kind = REPORT_K_STR},
    {.name = "rank", .kind = REPORT_K_INT, .min = 0},
    {.name = "t", .kind = REPORT_K_NUM},
};

static const struct report_field report_hello_fields[] = {
    {.name = "pid", .kind = REPORT_K_INT, .min = 1},
    {.name = "host", .kind = REPORT_K_STR},
    {.name = "world_size", .kind = REPORT_K_INT, .min = 1},
};

static const struct report_field report_env_fields[] = {
    {.name = "env", .kind = REPORT_K_ENV},
};

static const struct report_field report_progress_fields[] = {
    {.name = "done", .kind = REPORT_K_INT64, .min = 0},
    {.name = "total", .kind = REPORT_K_INT64, .min = 0},
    {.name = "phase", .kind = REPORT_K_STR},
    {.name = "gen", .kind = REPORT_K_INT, .min = 0, .optional = true},   /* elastic runs */
    {.name = "world", .kind = REPORT_K_INT, .min = 1, .optional = true}, /* elastic runs */
};

static const struct report_field report_collective_fields[] = {
    {.name = "repeat", .kind = REPORT_K_INT, .min = 0, REPORT_AT(repeat)},
    {.name = "op", .kind = REPORT_K_STR, REPORT_AT(op)},
    {.name = "dtype", .kind = REPORT_K_STR, REPORT_AT(dtype)},
    {.name = "redop", .kind = REPORT_K_STR, REPORT_AT(redop)},
    {.name = "algorithm", .kind = REPORT_K_STR, REPORT_AT(algorithm)},
    {.name = "inplace", .kind = REPORT_K_BOOL, REPORT_AT(inplace)},
    {.name = "bytes", .kind = REPORT_K_INT64, .min = 0, REPORT_AT(bytes)},
    {.name = "count", .kind = REPORT_K_INT64, .min = 0, REPORT_AT(count)},
    {.name = "iters", .kind = REPORT_K_INT, .min = 0, REPORT_AT(iters)},
    {.name = "time_us_min", .kind = REPORT_K_NUM, REPORT_AT(time_us_min)},
    {.name = "time_us_median", .kind = REPORT_K_NUM, REPORT_AT(time_us_median)},
    {.name = "time_us_p95", .kind = REPORT_K_NUM, REPORT_AT(time_us_p95)},
    {.name = "time_us_mean", .kind = REPORT_K_NUM, REPORT_AT(time_us_mean)},
    {.name = "time_us_max", .kind = REPORT_K_NUM, REPORT_AT(time_us_max)},
    {.name = "algbw_gbs", .kind = REPORT_K_NUM, REPORT_AT(algbw_gbs)},
    {.name = "busbw_gbs", .kind = REPORT_K_NUM, REPORT_AT(busbw_gbs)},
    {.name = "wrong", .kind = REPORT_K_INT64, .min = 0, REPORT_AT(wrong)},
};

/* elastic training (worker/elastic.h): one event of a generation change */
static const struct report_field report_elastic_fields[] = {
    {.name = "event", .kind = REPORT_K_STR, .size = 16},
    {.name = "gen", .kind = REPORT_K_INT, .min = 0},
    {.name = "world", .kind = REPORT_K_INT, .min = 0},
    {.name = "members", .kind = REPORT_K_RANKS},
    {.name = "commit_step", .kind = REPORT_K_INT64, .min = 0, .optional = true},
    {.name = "lost_steps", .kind = REPORT_K_INT64, .min = 0, .optional = true},
    {.name = "regroup_ms", .kind = REPORT_K_NUM, .optional = true},
    {.name = "peer", .kind = REPORT_K_INT, .min = -1, .optional = true},
};

static const struct report_field report_heartbeat_fields[] = {
    {.name = "phase", .kind = REPORT_K_STR},
    {.name = "progress", .kind = REPORT_K_INT64, .min = 0},
};

/* A step phase's field: optional, an engine may not observe it (stored as null). */
#define REPORT_PHASE_FIELD(id, nm, ...)                                                        \
    {.name = #nm "_ms", .kind = REPORT_K_NUM, .optional = true, REPORT_STEP_AT(nm##_ms)},
static const struct report_field report_step_fields[] = {
    {.name = "repeat", .kind = REPORT_K_INT, .min = 0, REPORT_STEP_AT(repeat)},
    {.name = "epoch", .kind = REPORT_K_INT, .min = 0, REPORT_STEP_AT(epoch)},
    {.name = "step", .kind = REPORT_K_INT64, .min = 0, REPORT_STEP_AT(step)},
    {.name = "warmup", .kind = REPORT_K_BOOL, REPORT_STEP_AT(warmup)},
    {.name = "samples", .kind = REPORT_K_INT, .min = 0, REPORT_STEP_AT(samples)},
    {.name = "loss", .kind = REPORT_K_NUM, REPORT_STEP_AT(loss)},
    PHASES(REPORT_PHASE_FIELD) /* data_ms ... optimizer_ms: common/columns.h */
    {.name = "step_ms", .kind = REPORT_K_NUM, REPORT_STEP_AT(step_ms)},
    {.name = "bytes_sent",
     .kind = REPORT_K_INT64,
     .min = 0,
     .optional = true,
     REPORT_STEP_AT(bytes_sent)},
    {.name = "stage", .kind = REPORT_K_INT, .min = 0, .optional = true, REPORT_STEP_AT(stage)},
    {.name = "p2p_ms", .kind = REPORT_K_NUM, .optional = true, REPORT_STEP_AT(p2p_ms)},
    {.name = "p2p_bytes",
     .kind = REPORT_K_INT64,
     .min = 0,
     .optional = true,
     REPORT_STEP_AT(p2p_bytes)},
    {.name = "bubble_ms", .kind = REPORT_K_NUM, .optional = true, REPORT_STEP_AT(bubble_ms)},
    {.name = "loader_cpu_ms",
     .kind = REPORT_K_NUM,
     .optional = true,
     REPORT_STEP_AT(loader_cpu_ms)},
    {.name = "read_bytes",
     .kind = REPORT_K_INT64,
     .min = 0,
     .optional = true,
     REPORT_STEP_AT(read_bytes)},
    {.name = "gen", .kind = REPORT_K_INT, .min = 0, .optional = true, REPORT_STEP_AT(gen)},
    {.name = "world", .kind = REPORT_K_INT, .min = 1, .optional = true, REPORT_STEP_AT(world)},
    {.name = "grad_norm", .kind = REPORT_K_NUM, .optional = true, REPORT_STEP_AT(grad_norm)},
    {.name = "loss_scale", .kind = REPORT_K_NUM, .optional = true, REPORT_STEP_AT(loss_scale)},
    {.name = "skipped", .kind = REPORT_K_BOOL, .optional = true, REPORT_STEP_AT(skipped)},
};

static const struct report_field report_epoch_fields[] = {
    {.name = "repeat", .kind = REPORT_K_INT, .min = 0, REPORT_EPOCH_AT(repeat)},
    {.name = "epoch", .kind = REPORT_K_INT, .min = 0, REPORT_EPOCH_AT(epoch)},
    {.name = "samples", .kind = REPORT_K_INT64, .min = 0, REPORT_EPOCH_AT(samples)},
    {.name = "train_loss", .kind = REPORT_K_NUM, .optional = true, REPORT_EPOCH_AT(train_loss)},
    {.name = "train_acc", .kind = REPORT_K_NUM, .optional = true, REPORT_EPOCH_AT(train_acc)},
    {.name = "test_loss", .kind = REPORT_K_NUM, .optional = true, REPORT_EPOCH_AT(test_loss)},
    {.name = "test_acc", .kind = REPORT_K_NUM, .optional = true, REPORT_EPOCH_AT(test_acc)},
    {.name = "time_s", .kind = REPORT_K_NUM, REPORT_EPOCH_AT(time_s)},
    {.name = "test_acc_per_class",
     .kind = REPORT_K_FRACS,
     .optional = true,
     REPORT_EPOCH_AT(test_acc_per_class)},
};

static const struct report_field report_memory_fields[] = {
    {.name = "repeat", .kind = REPORT_K_INT, .min = 0, REPORT_MEMORY_AT(repeat)},
    {.name = "params_bytes",
     .kind = REPORT_K_INT64,
     .optional = true,
     REPORT_MEMORY_AT(params_bytes)},
    {.name = "buffers_bytes",
     .kind = REPORT_K_INT64,
     .optional = true,
     REPORT_MEMORY_AT(buffers_bytes)},
    {.name = "grads_bytes",
     .kind = REPORT_K_INT64,
     .optional = true,
     REPORT_MEMORY_AT(grads_bytes)},
    {.name = "optimizer_bytes",
     .kind = REPORT_K_INT64,
     .optional = true,
     REPORT_MEMORY_AT(optimizer_bytes)},
    {.name = "comm_bytes",
     .kind = REPORT_K_INT64,
     .optional = true,
     REPORT_MEMORY_AT(comm_bytes)},
    {.name = "activations_bytes",
     .kind = REPORT_K_INT64,
     .optional = true,
     REPORT_MEMORY_AT(activations_bytes)},
    {.name = "peak_rss_bytes", .kind = REPORT_K_INT64, REPORT_MEMORY_AT(peak_rss_bytes)},
    {.name = "device_peak_bytes",
     .kind = REPORT_K_INT64,
     .optional = true,
     REPORT_MEMORY_AT(device_peak_bytes)},
};

static const struct report_field report_usage_fields[] = {
    {.name = "repeat", .kind = REPORT_K_INT, .min = 0, REPORT_USAGE_AT(repeat)},
    {.name = "epoch", .kind = REPORT_K_INT, .min = 0, REPORT_USAGE_AT(epoch)},
    {.name = "steps", .kind = REPORT_K_INT64, .min = 0, REPORT_USAGE_AT(steps)},
    {.name = "wall_s", .kind = REPORT_K_NUM, REPORT_USAGE_AT(wall_s)},
    {.name = "user_s", .kind = REPORT_K_NUM, REPORT_USAGE_AT(user_s)},
    {.name = "sys_s", .kind = REPORT_K_NUM, REPORT_USAGE_AT(sys_s)},
    {.name = "voluntary_cs", .kind = REPORT_K_INT64, REPORT_USAGE_AT(voluntary_cs)},
    {.name = "involuntary_cs", .kind = REPORT_K_INT64, REPORT_USAGE_AT(involuntary_cs)},
    {.name = "rss_bytes", .kind = REPORT_K_INT64, .optional = true, REPORT_USAGE_AT(rss_bytes)},
    {.name = "gpu_util_pct",
     .kind = REPORT_K_NUM,
     .optional = true,
     REPORT_USAGE_AT(gpu_util_pct)},
    {.name = "gpu_mem_util_pct",
     .kind = REPORT_K_NUM,
     .optional = true,
     REPORT_USAGE_AT(gpu_mem_util_pct)},
    {.name = "gpu_power_w",
     .kind = REPORT_K_NUM,
     .optional = true,
     REPORT_USAGE_AT(gpu_power_w)},
};

static const struct report_field report_trace_fields[] = {
    {.name = "repeat", .kind = REPORT_K_INT, .min = 0, REPORT_TRACE_AT(repeat)},
    {.name = "step", .kind = REPORT_K_INT64, .min = 0, REPORT_TRACE_AT(step)},
    {.name = "clock_offset_ns", .kind = REPORT_K_INT64, REPORT_TRACE_AT(clock_offset_ns)},
    {.name = "spans", .kind = REPORT_K_SPANS, REPORT_TRACE_AT(spans)},
    {.name = "ops", .kind = REPORT_K_OPS, REPORT_TRACE_AT(ops)},
};

static const struct report_field report_grads_fields[] = {
    {.name = "repeat", .kind = REPORT_K_INT, .min = 0, REPORT_GRADS_AT(repeat)},
    {.name = "steps", .kind = REPORT_K_INT64, .min = 1, REPORT_GRADS_AT(steps)},
    {.name = "backward_ns", .kind = REPORT_K_INT64, .min = 0, REPORT_GRADS_AT(backward_ns)},
    {.name = "tensors", .kind = REPORT_K_GRADS, REPORT_GRADS_AT(tensors)},
};

static const struct report_field report_pipe_fields[] = {
    {.name = "repeat", .kind = REPORT_K_INT, .min = 0, REPORT_PIPE_AT(repeat)},
    {.name = "stages", .kind = REPORT_K_INT, .min = 2, REPORT_PIPE_AT(stages)},
    {.name = "micro_batch", .kind = REPORT_K_INT, .min = 1, REPORT_PIPE_AT(micro_batch)},
    {.name = "tied_bytes", .kind = REPORT_K_INT64, .min = 0, REPORT_PIPE_AT(tied_bytes)},
    {.name = "layers", .kind = REPORT_K_LAYERS, REPORT_PIPE_AT(layers)},
    {.name = "cuts", .kind = REPORT_K_CUTS, REPORT_PIPE_AT(cuts)},
    {.name = "batch", .kind = REPORT_K_INT, .min = 1, .optional = true, REPORT_PIPE_AT(batch)},
    {.name = "batch_forward_ns",
     .kind = REPORT_K_INT64,
     .min = 1,
     .optional = true,
     REPORT_PIPE_AT(batch_forward_ns)},
    {.name = "batch_backward_ns",
     .kind = REPORT_K_INT64,
     .min = 1,
     .optional = true,
     REPORT_PIPE_AT(batch_backward_ns)},
};

static const struct report_field report_error_fields[] = {
    {.name = "code", .kind = REPORT_K_ERRCODE},
    {.name = "message", .kind = REPORT_K_STR},
    {.name = "where", .kind = REPORT_K_STR},
    {.name = "op", .kind = REPORT_K_STR, .optional = true},
    {.name = "peer", .kind = REPORT_K_INT, .optional = true, .min = 0},
};

/* The fields of a report type; its name is vocab.h's. */
struct report_shape {
    const struct report_field *fields;
    size_t n;
};

#define REPORT_SHAPE(fields)                                                                   \
    {                                                                                          \
        fields, REPORT_COUNT(fields)                                                           \
    }

/* Indexed by enum report_type. */
static const struct report_shape report_shapes[] = {
    [REPORT_HELLO] = REPORT_SHAPE(report_hello_fields),
    [REPORT_ENV] = REPORT_SHAPE(report_env_fields),
    [REPORT_PROGRESS] = REPORT_SHAPE(report_progress_fields),
    [REPORT_COLLECTIVE] = REPORT_SHAPE(report_collective_fields),
    [REPORT_ERROR] = REPORT_SHAPE(report_error_fields),
    [REPORT_DONE] = {NULL, 0},
    [REPORT_HEARTBEAT] = REPORT_SHAPE(report_heartbeat_fields),
    [REPORT_STEP] = REPORT_SHAPE(report_step_fields),
    [REPORT_EPOCH] = REPORT_SHAPE(report_epoch_fields),
    [REPORT_MEMORY] = REPORT_SHAPE(report_memory_fields),
    [REPORT_USAGE] = REPORT_SHAPE(report_usage_fields),
    [REPORT_TRACE] = REPORT_SHAPE(report_trace_fields),
    [REPORT_GRADS] = REPORT_SHAPE(report_grads_fields),
    [REPORT_ELASTIC] = REPORT_SHAPE(report_elastic_fields),
    [REPORT_PIPE] = REPORT_SHAPE(report_pipe_fields),
};
_Static_assert(REPORT_COUNT(report_shapes) == REPORT_NTYPES,
               "a row per report type of common/vocab.h");

const char *report_type_name(enum report_type t)
{
    const char *name = vocab_name(VOCAB_REPORT, (int)t);
    return name ? name : "unknown";
}

/* --- validation ---------------------------------------------------------------------- */

static const struct report_field *report_field_find(const struct report_field *fields, size_t n,
                                                    const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(fields[i].name, name) == 0)
            return &fields[i];
    return NULL;
}

/* Text from a line, made safe for e->field and messages (they end up in JSON and logs):
 * truncated, bytes outside printable ASCII become '?'. */
static void report_ascii(const char *in, char *out, size_t n)
{
    snprintf(out, n, "%s", in);
    for (char *p = out; *p; p++)
        if (*p < 0x20 || *p > 0x7e)
            *p = '?';
}

static bool report_is_errcode(const char *s)
{
    for (int c = ERR_OK; c <= ERR_INTERNAL; c++)
        if (strcmp(err_code_name((enum err_code)c), s) == 0)
            return true;
    return false;
}

/* An env object's values: strings, numbers, or objects of them (a library's own facts,
 * "mpi": {"transport": {...}}) down to REPORT_ENV_DEPTH levels. */
static int report_check_env_at(const json_t *v, const char *path, int depth, struct err *e)
{
    const char *key;
    json_t *x;
    /* jansson's iterators take a non-const object; nothing is modified. */
    json_object_foreach((json_t *)v, key, x)
    {
        char name[48], at[160];
        report_ascii(key, name, sizeof name);
        snprintf(at, sizeof at, "%s.%s", path, name);
        if (json_is_object(x) && depth < REPORT_ENV_DEPTH) {
            if (report_check_env_at(x, at, depth + 1, e) < 0)
                return -1;
        } else if (!json_is_string(x) && !json_is_number(x)) {
            return err_set(e, ERR_INVALID, "env",
                           "%s: must be a string, a number or (%d levels deep at most) an "
                           "object of them",
                           at, REPORT_ENV_DEPTH);
        }
    }
    return 0;
}

static int report_check_env(const json_t *v, struct err *e)
{
    if (!json_is_object(v))
        return err_set(e, ERR_INVALID, "env", "env: must be an object");
    return report_check_env_at(v, "env", 1, e);
}

/* Trace entries: an array of at most REPORT_TRACE_MAX arrays whose items are, in order,
 * a short string ('s'), an integer >= 0 ('n'), an integer >= -1 ('b'), or an integer at
 * least the one before it ('e': an end after its start). Items after a '|' in shape are
 * optional (a pipeline span's micro-batch index). */
static int report_check_tuples(const struct report_field *f, const json_t *v, const char *shape,
                               struct err *e)
{
    size_t need = strcspn(shape, "|"), most = strlen(shape) - (shape[need] ? 1 : 0), i;
    const json_t *t;
    if (!json_is_array(v) || json_array_size(v) > REPORT_TRACE_MAX)
        return err_set(e, ERR_INVALID, f->name, "%s: must be an array of at most %d entries",
                       f->name, REPORT_TRACE_MAX);
    json_array_foreach((json_t *)v, i, t)
    {
        size_t n = json_array_size(t);
        bool ok = json_is_array(t) && n >= need && n <= most;
        for (size_t k = 0; ok && k < n; k++) {
            const json_t *x = json_array_get(t, k);
            json_int_t d = json_integer_value(x);
            switch (shape[k < need ? k : k + 1]) {
            case 's': ok = json_is_string(x) && json_string_length(x) < 24; break;
            case 'n': ok = json_is_integer(x) && d >= 0; break;
            case 'b': ok = json_is_integer(x) && d >= -1; break;
            default:
                ok = json_is_integer(x) && d >= json_integer_value(json_array_get(t, k - 1));
            }
        }
        if (!ok)
            return err_set(e, ERR_INVALID, f->name,
                           "%s[%zu]: must be %s (times in ns, an end not before its start)",
                           f->name, i,
                           f->kind == REPORT_K_SPANS    ? "[name, start_ns, end_ns] or [name, "
                                                          "start_ns, end_ns, micro_batch]"
                           : f->kind == REPORT_K_GRADS  ? "[bytes, ready_ns]"
                           : f->kind == REPORT_K_LAYERS ? "[forward_ns, backward_ns, "
                                                          "param_bytes]"
                           : f->kind == REPORT_K_CUTS   ? "[first_layer, bytes]"
                                                        : "[op, bucket, bytes, algorithm, "
                                                          "launch_ns, end_ns]");
    }
    return 0;
}

/* An array of at most SPEC_MAX_WORLD ranks (integers >= 0). */
static int report_check_ranks(const struct report_field *f, const json_t *v, struct err *e)
{
    size_t i;
    const json_t *r;
    bool ok = json_is_array(v) && json_array_size(v) <= SPEC_MAX_WORLD;
    json_array_foreach((json_t *)v, i, r)
    {
        ok = ok && json_is_integer(r) && json_integer_value(r) >= 0;
    }
    return ok ? 0
              : err_set(e, ERR_INVALID, f->name, "%s: must be an array of at most %d ranks",
                        f->name, SPEC_MAX_WORLD);
}

static int report_check_fracs(const struct report_field *f, const json_t *v, struct err *e)
{
    size_t i;
    const json_t *x;
    bool ok = json_is_array(v) && json_array_size(v) <= REPORT_MAX_CLASSES;
    json_array_foreach((json_t *)v, i, x)
    {
        ok = ok && (json_is_null(x) || (json_is_number(x) && json_number_value(x) >= 0 &&
                                        json_number_value(x) <= 1));
    }
    return ok ? 0
              : err_set(e, ERR_INVALID, f->name,
                        "%s: must be an array of at most %d fractions in [0, 1] or null",
                        f->name, REPORT_MAX_CLASSES);
}

/* Checks one present value against f. */
static int report_check_value(const struct report_field *f, const json_t *v, struct err *e)
{
    json_int_t n = json_integer_value(v);
    switch (f->kind) {
    case REPORT_K_INT:
    case REPORT_K_INT64:
        if (!json_is_integer(v) || n < f->min || (f->kind == REPORT_K_INT && n > INT_MAX))
            return err_set(e, ERR_INVALID, f->name, "%s: must be an integer >= %" PRId64,
                           f->name, f->min);
        return 0;
    case REPORT_K_NUM:
        if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < 0)
            return err_set(e, ERR_INVALID, f->name, "%s: must be a finite number >= 0",
                           f->name);
        return 0;
    case REPORT_K_STR:
        if (!json_is_string(v) || (f->size && json_string_length(v) >= f->size))
            return err_set(e, ERR_INVALID, f->name, "%s: must be a string%s", f->name,
                           f->size ? " (short: it names an op, type or algorithm)" : "");
        return 0;
    case REPORT_K_BOOL:
        if (!json_is_boolean(v))
            return err_set(e, ERR_INVALID, f->name, "%s: must be true or false", f->name);
        return 0;
    case REPORT_K_ENV: return report_check_env(v, e);
    case REPORT_K_ERRCODE:
        if (!json_is_string(v) || !report_is_errcode(json_string_value(v)))
            return err_set(e, ERR_INVALID, f->name,
                           "%s: must name an error code (\"io\", "
                           "\"timeout\", ...)",
                           f->name);
        return 0;
    case REPORT_K_SPANS: return report_check_tuples(f, v, "sne|n", e);
    case REPORT_K_OPS: return report_check_tuples(f, v, "sbnsne", e);
    case REPORT_K_GRADS: return report_check_tuples(f, v, "nn", e);
    case REPORT_K_LAYERS: return report_check_tuples(f, v, "nnn", e);
    case REPORT_K_CUTS: return report_check_tuples(f, v, "nn", e);
    case REPORT_K_RANKS: return report_check_ranks(f, v, e);
    case REPORT_K_FRACS: return report_check_fracs(f, v, e);
    }
    return err_set(e, ERR_INTERNAL, f->name, "%s: unknown kind", f->name);
}

static int report_check_fields(const json_t *obj, const struct report_field *fields, size_t n,
                               const char *type, struct err *e)
{
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_object_get(obj, fields[i].name);
        if (!v && !fields[i].optional)
            return err_set(e, ERR_INVALID, fields[i].name, "%s: missing from a %s event",
                           fields[i].name, type);
        if (v && report_check_value(&fields[i], v, e) < 0)
            return -1;
    }
    return 0;
}

/* Keys of obj must be in `fields` or, when with_common, the common fields. */
static int report_check_extra(const json_t *obj, const struct report_field *fields, size_t n,
                              bool with_common, const char *type, struct err *e)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        if (report_field_find(fields, n, key))
            continue;
        if (with_common &&
            report_field_find(report_common_fields, REPORT_COUNT(report_common_fields), key))
            continue;
        char name[48];
        report_ascii(key, name, sizeof name);
        return err_set(e, ERR_INVALID, name, "%s: not a field of a %s event", name, type);
    }
    return 0;
}

/* Validates a whole event; *type is set on success. */
static int report_check_event(const json_t *ev, enum report_type *type, struct err *e)
{
    if (!json_is_object(ev))
        return err_set(e, ERR_INVALID, "", "report: a line must be a JSON object");
    const json_t *t = json_object_get(ev, "type");
    if (!json_is_string(t))
        return err_set(e, ERR_INVALID, "type", "type: missing or not a string");
    int found = vocab_find(VOCAB_REPORT, json_string_value(t));
    size_t k = found < 0 ? REPORT_COUNT(report_shapes) : (size_t)found;
    if (k == REPORT_COUNT(report_shapes)) {
        char name[48];
        report_ascii(json_string_value(t), name, sizeof name);
        return err_set(e, ERR_INVALID, "type", "type: unknown event type \"%s\"", name);
    }
    const struct report_shape *s = &report_shapes[k];
    const char *name = report_type_name((enum report_type)k);
    if (report_check_fields(ev, report_common_fields, REPORT_COUNT(report_common_fields), name,
                            e) < 0 ||
        report_check_fields(ev, s->fields, s->n, name, e) < 0 ||
        report_check_extra(ev, s->fields, s->n, true, name, e) < 0)
        return -1;
    *type = (enum report_type)k;
    return 0;
}

json_t *report_parse_line(const char *line, size_t len, enum report_type *type, struct err *e)
{
    if (len > REPORT_MAX_LINE) {
        err_set(e, ERR_TOO_LARGE, "", "report: line of %zu bytes, more than the limit of %u",
                len, REPORT_MAX_LINE);
        return NULL;
    }
    json_error_t je;
    json_t *ev = json_loadb(line ? line : "", line ? len : 0, JSON_REJECT_DUPLICATES, &je);
    if (!ev) {
        err_set(e, ERR_INVALID, "", "report: not JSON (column %d): %s", je.column, je.text);
        return NULL;
    }
    if (report_check_event(ev, type, e) < 0) {
        json_decref(ev);
        return NULL;
    }
    return ev;
}

/* --- events as structs (collective, step, epoch) -------------------------------------- */

/* Fills the struct at out from obj through the members named in fields. An optional
 * number (int, int64) that is absent reads as -1. */
static int report_struct_from_json(const struct report_field *fs, size_t n, const char *type,
                                   const json_t *obj, void *out, size_t out_size, struct err *e)
{
    if (!json_is_object(obj))
        return err_set(e, ERR_INVALID, "", "%s: must be a JSON object", type);
    if (report_check_fields(obj, fs, n, type, e) < 0 ||
        report_check_extra(obj, fs, n, true, type, e) < 0)
        return -1;
    memset(out, 0, out_size);
    for (size_t i = 0; i < n; i++) {
        if (fs[i].size == 0)
            continue; /* validated, no member to fill */
        const json_t *v = json_object_get(obj, fs[i].name);
        char *dst = (char *)out + fs[i].off;
        int i32 = v ? (int)json_integer_value(v) : -1; /* optional and absent: -1 */
        int64_t i64 = v ? json_integer_value(v) : -1;  /* optional and absent: -1 */
        double d = v ? json_number_value(v) : -1.0;
        bool b = json_is_true(v);
        switch (fs[i].kind) {
        case REPORT_K_INT: memcpy(dst, &i32, sizeof i32); break;
        case REPORT_K_INT64: memcpy(dst, &i64, sizeof i64); break;
        case REPORT_K_NUM: memcpy(dst, &d, sizeof d); break;
        case REPORT_K_BOOL: memcpy(dst, &b, sizeof b); break;
        case REPORT_K_STR: memcpy(dst, json_string_value(v), json_string_length(v) + 1); break;
        case REPORT_K_SPANS:
        case REPORT_K_GRADS:
        case REPORT_K_LAYERS:
        case REPORT_K_CUTS:
        case REPORT_K_RANKS:
        case REPORT_K_FRACS:
        case REPORT_K_OPS: memcpy(dst, &v, sizeof v); break; /* borrowed from obj */
        case REPORT_K_ENV:
        case REPORT_K_ERRCODE: break;
        }
    }
    return 0;
}

int report_collective_from_json(const json_t *obj, struct report_collective *out, struct err *e)
{
    return report_struct_from_json(report_collective_fields,
                                   REPORT_COUNT(report_collective_fields), "collective", obj,
                                   out, sizeof *out, e);
}

int report_step_from_json(const json_t *obj, struct report_step *out, struct err *e)
{
    return report_struct_from_json(report_step_fields, REPORT_COUNT(report_step_fields), "step",
                                   obj, out, sizeof *out, e);
}

int report_epoch_from_json(const json_t *obj, struct report_epoch *out, struct err *e)
{
    return report_struct_from_json(report_epoch_fields, REPORT_COUNT(report_epoch_fields),
                                   "epoch", obj, out, sizeof *out, e);
}

int report_memory_from_json(const json_t *obj, struct report_memory *out, struct err *e)
{
    return report_struct_from_json(report_memory_fields, REPORT_COUNT(report_memory_fields),
                                   "memory", obj, out, sizeof *out, e);
}

int report_usage_from_json(const json_t *obj, struct report_usage *out, struct err *e)
{
    return report_struct_from_json(report_usage_fields, REPORT_COUNT(report_usage_fields),
                                   "usage", obj, out, sizeof *out, e);
}

int report_trace_from_json(const json_t *obj, struct report_trace *out, struct err *e)
{
    return report_struct_from_json(report_trace_fields, REPORT_COUNT(report_trace_fields),
                                   "trace", obj, out, sizeof *out, e);
}

/* The JSON member of the struct at c (kinds with a json_t * member). */
static const json_t *report_member_ptr(const void *c, const struct report_field *f)
{
    const json_t *j;
    memcpy(&j, (const char *)c + f->off, sizeof j);
    return j;
}

/* One member of the struct at c as an owned JSON value, or NULL when it breaks the
 * contract (not finite, negative, unterminated or not UTF-8) or memory runs out. */
static json_t *report_member_json(const void *c, const struct report_field *f)
{
    const char *src = (const char *)c + f->off;
    int i32;
    int64_t i64;
    double d;
    bool b;
    switch (f->kind) {
    case REPORT_K_INT:
        memcpy(&i32, src, sizeof i32);
        return i32 >= f->min ? json_integer(i32) : NULL;
    case REPORT_K_INT64:
        memcpy(&i64, src, sizeof i64);
        return i64 >= f->min ? json_integer(i64) : NULL;
    case REPORT_K_NUM:
        memcpy(&d, src, sizeof d);
        return isfinite(d) && d >= 0 ? json_real(d) : NULL;
    case REPORT_K_BOOL: memcpy(&b, src, sizeof b); return json_boolean(b);
    case REPORT_K_STR: return strnlen(src, f->size) < f->size ? json_string(src) : NULL;
    case REPORT_K_SPANS:
    case REPORT_K_GRADS:
    case REPORT_K_LAYERS:
    case REPORT_K_CUTS:
    case REPORT_K_RANKS:
    case REPORT_K_FRACS:
    case REPORT_K_OPS: {
        json_t *j;
        memcpy(&j, src, sizeof j);
        return json_incref(j); /* the event's own reference; the caller keeps its one */
    }
    case REPORT_K_ENV:
    case REPORT_K_ERRCODE: break;
    }
    return NULL;
}

/* Owned object of every member of the struct at c, or NULL with e naming the bad member.
 * An optional number (int, int64) below zero is left out: -1 means "not known"; an
 * optional boolean is written only when true (a flag: "skipped"). */
static json_t *report_struct_build(const struct report_field *fs, size_t n, const char *type,
                                   const void *c, struct err *e)
{
    json_t *obj = json_object();
    if (!obj) {
        err_set(e, ERR_NOMEM, "", "%s: out of memory", type);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        const struct report_field *f = &fs[i];
        if (f->size == 0 || (f->kind == REPORT_K_FRACS && !report_member_ptr(c, f)))
            continue; /* no member; an optional array absent */
        double d = 0;
        int64_t i64 = 0;
        int i32 = 0;
        if (f->kind == REPORT_K_NUM)
            memcpy(&d, (const char *)c + f->off, sizeof d);
        if (f->kind == REPORT_K_INT64)
            memcpy(&i64, (const char *)c + f->off, sizeof i64);
        if (f->kind == REPORT_K_INT)
            memcpy(&i32, (const char *)c + f->off, sizeof i32);
        bool b = false;
        if (f->kind == REPORT_K_BOOL)
            memcpy(&b, (const char *)c + f->off, sizeof b);
        if (f->optional &&
            ((f->kind == REPORT_K_NUM && d < 0) || (f->kind == REPORT_K_INT64 && i64 < 0) ||
             (f->kind == REPORT_K_INT && i32 < 0) || (f->kind == REPORT_K_BOOL && !b)))
            continue;
        json_t *v = report_member_json(c, f);
        if (!v || json_object_set_new(obj, f->name, v) < 0) {
            err_set(e, ERR_INVALID, f->name,
                    "%s: not a valid value (finite, >= 0, a short "
                    "terminated string)",
                    f->name);
            json_decref(obj);
            return NULL;
        }
    }
    return obj;
}

static json_t *report_collective_build(const struct report_collective *c, struct err *e)
{
    return report_struct_build(report_collective_fields, REPORT_COUNT(report_collective_fields),
                               "collective", c, e);
}

json_t *report_collective_to_json(const struct report_collective *c)
{
    return report_collective_build(c, NULL);
}

/* --- writing ------------------------------------------------------------------------- */

void report_writer_init(struct report_writer *w, int fd, int rank)
{
    w->fd = fd;
    w->rank = rank;
    pthread_mutex_init(&w->lock, NULL);
}

void report_writer_cleanup(struct report_writer *w)
{
    pthread_mutex_destroy(&w->lock);
}

static int report_write_all(int fd, const uint8_t *p, size_t n, struct err *e)
{
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            if (poll(&pfd, 1, 1000) < 0 && errno != EINTR)
                return err_errno(e, "report: poll on fd %d", fd);
            continue;
        }
        if (k < 0 && errno == EPIPE)
            return err_set(e, ERR_PEER, "", "report: the pipe to the daemon is closed");
        if (k < 0)
            return err_errno(e, "report: write to fd %d", fd);
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int report_dump_cb(const char *chunk, size_t n, void *data)
{
    return buf_append(data, chunk, n);
}

/* Owned event: type, rank, t, then the keys of fields (stolen). */
static json_t *report_event_build(const struct report_writer *w, enum report_type type,
                                  json_t *fields, struct err *e)
{
    json_t *ev = json_pack("{s:s, s:i, s:f}", "type", report_type_name(type), "rank", w->rank,
                           "t", clock_wall_s());
    const char *key;
    json_t *v;
    if (!ev)
        err_set(e, ERR_NOMEM, "", "report: out of memory");
    json_object_foreach(fields, key, v)
    {
        if (!ev)
            break;
        if (json_object_get(ev, key)) {
            err_set(e, ERR_INVALID, key, "%s: set by report_emit itself", key);
            json_decref(ev);
            ev = NULL;
        } else if (json_object_set(ev, key, v) < 0) {
            err_set(e, ERR_NOMEM, "", "report: out of memory");
            json_decref(ev);
            ev = NULL;
        }
    }
    json_decref(fields);
    return ev;
}

int report_emit(struct report_writer *w, enum report_type type, json_t *fields, struct err *e)
{
    if (!fields && !(fields = json_object()))
        return err_set(e, ERR_NOMEM, "", "report: out of memory");
    json_t *ev = report_event_build(w, type, fields, e);
    enum report_type checked;
    if (!ev)
        return -1;
    if (report_check_event(ev, &checked, e) < 0) {
        json_decref(ev);
        return err_prefix(e, "report: refusing a %s event", report_type_name(type));
    }
    struct buf b;
    buf_init(&b);
    int rc = json_dump_callback(ev, report_dump_cb, &b, JSON_COMPACT);
    json_decref(ev);
    if (rc < 0 || buf_put_u8(&b, '\n') < 0)
        rc = err_set(e, ERR_NOMEM, "", "report: cannot encode a %s event",
                     report_type_name(type));
    else if (b.len - 1 > REPORT_MAX_LINE)
        rc = err_set(e, ERR_TOO_LARGE, "",
                     "report: a %s event of %zu bytes is over the "
                     "line limit of %u",
                     report_type_name(type), b.len - 1, REPORT_MAX_LINE);
    else if (w->fd >= 0) {
        pthread_mutex_lock(&w->lock);
        rc = report_write_all(w->fd, b.data, b.len, e);
        pthread_mutex_unlock(&w->lock);
    }
    buf_free(&b);
    return rc;
}

/* For the helpers: fields built by json_pack are NULL when an argument was bad (a NULL
 * or non-UTF-8 string), which would otherwise read as "field missing". */
static int report_emit_built(struct report_writer *w, enum report_type type, json_t *fields,
                             struct err *e)
{
    if (!fields)
        return err_set(e, ERR_INVALID, "",
                       "report: cannot build a %s event (a string "
                       "argument is NULL or not UTF-8)",
                       report_type_name(type));
    return report_emit(w, type, fields, e);
}

int report_emit_hello(struct report_writer *w, int world_size, struct err *e)
{
    char host[256] = "unknown";
    if (gethostname(host, sizeof host - 1) < 0)
        snprintf(host, sizeof host, "%s", "unknown");
    host[sizeof host - 1] = '\0';
    json_t *host_v = json_string(host);
    return report_emit_built(w, REPORT_HELLO,
                             json_pack("{s:i, s:o, s:i}", "pid", (int)getpid(), "host",
                                       host_v ? host_v : json_string("unknown"), "world_size",
                                       world_size),
                             e);
}

/* Emits an event whose fields are the members of a struct, through its table. */
static int report_emit_struct(struct report_writer *w, enum report_type type,
                              const struct report_field *fs, size_t n, const void *c,
                              struct err *e)
{
    json_t *fields = report_struct_build(fs, n, report_type_name(type), c, e);
    if (!fields)
        return err_prefix(e, "report: refusing a %s event", report_type_name(type));
    return report_emit(w, type, fields, e);
}

int report_emit_collective(struct report_writer *w, const struct report_collective *c,
                           struct err *e)
{
    return report_emit_struct(w, REPORT_COLLECTIVE, report_collective_fields,
                              REPORT_COUNT(report_collective_fields), c, e);
}

int report_emit_progress(struct report_writer *w, const char *phase, int64_t done,
                         int64_t total, struct err *e)
{
    return report_emit_progress_gen(w, phase, done, total, -1, 0, e);
}

int report_emit_progress_gen(struct report_writer *w, const char *phase, int64_t done,
                             int64_t total, int gen, int world, struct err *e)
{
    json_t *f = json_pack("{s:I, s:I, s:s}", "done", (json_int_t)done, "total",
                          (json_int_t)total, "phase", phase);
    if (f && gen >= 0) {
        json_object_set_new(f, "gen", json_integer(gen));
        json_object_set_new(f, "world", json_integer(world));
    }
    return report_emit_built(w, REPORT_PROGRESS, f, e);
}

int report_emit_elastic(struct report_writer *w, const struct report_elastic *el, struct err *e)
{
    json_t *members = json_array();
    for (int i = 0; members && i < el->n_members; i++)
        json_array_append_new(members, json_integer(el->members[i]));
    json_t *f = json_pack("{s:s, s:i, s:i, s:o, s:i}", "event", el->event, "gen", el->gen,
                          "world", el->world, "members", members, "peer", el->peer);
    if (f && el->commit_step >= 0)
        json_object_set_new(f, "commit_step", json_integer(el->commit_step));
    if (f && el->lost_steps >= 0)
        json_object_set_new(f, "lost_steps", json_integer(el->lost_steps));
    if (f && el->regroup_ms >= 0)
        json_object_set_new(f, "regroup_ms", json_real(el->regroup_ms));
    return report_emit_built(w, REPORT_ELASTIC, f, e);
}

/* A string value that always exists: text that is not UTF-8 gets '?' for its non-ASCII
 * bytes rather than losing the whole error report. */
static json_t *report_text(const char *s)
{
    json_t *v = json_string(s);
    if (v)
        return v;
    char safe[sizeof((struct err *)0)->msg];
    snprintf(safe, sizeof safe, "%s", s);
    for (char *p = safe; *p; p++)
        if ((unsigned char)*p > 0x7e)
            *p = '?';
    return json_string(safe);
}

int report_emit_error(struct report_writer *w, const struct err *cause, const char *where,
                      const char *op, int peer, struct err *e)
{
    json_t *f = json_pack("{s:s, s:o, s:o}", "code", err_code_name(cause->code), "message",
                          report_text(cause->msg), "where", report_text(where ? where : "?"));
    if (f && op)
        json_object_set_new(f, "op", report_text(op));
    if (f && peer >= 0)
        json_object_set_new(f, "peer", json_integer(peer));
    return report_emit_built(w, REPORT_ERROR, f, e);
}

int report_emit_done(struct report_writer *w, struct err *e)
{
    return report_emit(w, REPORT_DONE, NULL, e);
}

int report_emit_heartbeat(struct report_writer *w, const char *phase, int64_t progress,
                          struct err *e)
{
    return report_emit_built(w, REPORT_HEARTBEAT,
                             json_pack("{s:o, s:I}", "phase", report_text(phase ? phase : ""),
                                       "progress", (json_int_t)progress),
                             e);
}

int report_emit_step(struct report_writer *w, const struct report_step *s, struct err *e)
{
    return report_emit_struct(w, REPORT_STEP, report_step_fields,
                              REPORT_COUNT(report_step_fields), s, e);
}

int report_emit_epoch(struct report_writer *w, const struct report_epoch *ep, struct err *e)
{
    return report_emit_struct(w, REPORT_EPOCH, report_epoch_fields,
                              REPORT_COUNT(report_epoch_fields), ep, e);
}

int report_emit_memory(struct report_writer *w, const struct report_memory *m, struct err *e)
{
    return report_emit_struct(w, REPORT_MEMORY, report_memory_fields,
                              REPORT_COUNT(report_memory_fields), m, e);
}

int report_emit_usage(struct report_writer *w, const struct report_usage *u, struct err *e)
{
    return report_emit_struct(w, REPORT_USAGE, report_usage_fields,
                              REPORT_COUNT(report_usage_fields), u, e);
}

int report_emit_trace(struct report_writer *w, const struct report_trace *t, struct err *e)
{
    return report_emit_struct(w, REPORT_TRACE, report_trace_fields,
                              REPORT_COUNT(report_trace_fields), t, e);
}

int report_grads_from_json(const json_t *obj, struct report_grads *out, struct err *e)
{
    return report_struct_from_json(report_grads_fields, REPORT_COUNT(report_grads_fields),
                                   "grads", obj, out, sizeof *out, e);
}

int report_emit_grads(struct report_writer *w, const struct report_grads *g, struct err *e)
{
    return report_emit_struct(w, REPORT_GRADS, report_grads_fields,
                              REPORT_COUNT(report_grads_fields), g, e);
}

int report_pipe_from_json(const json_t *obj, struct report_pipe *out, struct err *e)
{
    return report_struct_from_json(report_pipe_fields, REPORT_COUNT(report_pipe_fields), "pipe",
                                   obj, out, sizeof *out, e);
}

int report_emit_pipe(struct report_writer *w, const struct report_pipe *p, struct err *e)
{
    return report_emit_struct(w, REPORT_PIPE, report_pipe_fields,
                              REPORT_COUNT(report_pipe_fields), p, e);
}
