/* columns: the results table's columns and a training step's phases, each written once.
 *
 * A results column (daemon/results.c) is a row here: its key, its statistic shape (one
 * value, or mean/ci95/n, or that with median/p95/min/max), the JSON type of its value,
 * its unit, a short label, its group and what it means. results.c fills a row's cells by
 * the enum, findings.c reads them by it, the CLI, the HTML report and the dashboard take
 * labels and units from it (the dashboard from the results reply's column_info, which is
 * columns_json()), and api/openapi.yaml's ResultRow is generated from it
 * (schema/result_row.schema.json, columns_row_schema()).
 * A step phase (data, forward, ...) is a row of PHASES: the database's step columns, the
 * results' phase columns and their predicted twins (pred_<key>), the stacked bars of the
 * report and the dashboard and engines/ddpb_report.py's report keys all come from it
 * (phases_json() for the Python and JS sides).
 *
 * Decision: X-macros, not a runtime table alone, because the enum, the C table and the
 * database's SQL text must agree at compile time, and a designated-initializer table
 * indexed by the enum makes a missing row a test failure (columns_check), not a shifted
 * column. Adding a column: one X row here, and its computation in results.c. */
#ifndef DDPB_COLUMNS_H
#define DDPB_COLUMNS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* The phases of a training step, in report order (common/report.h's step line, the
 * steps table's columns). X(ID, name, label, stacked, description): name is a bare token,
 * so the column "<name>_ms" can be a string literal (#name "_ms": SQL text is built from
 * it) and a struct field (name##_ms: common/report.c's step fields); stacked phases add
 * up to the step (comm is not: it runs beside backward; comm_exposed is its part that
 * did not). */
#define PHASES(X)                                                                              \
    X(DATA, data, "data", true, "waiting for the batch from the loader")                       \
    X(FORWARD, forward, "forward", true, "the forward pass")                                   \
    X(BACKWARD, backward, "backward", true, "the backward pass")                               \
    X(COMM, comm, "comm", false, "gradient communication, overlapped with backward or not")    \
    X(COMM_EXPOSED, comm_exposed, "exposed comm", true,                                        \
      "the communication not hidden behind backward")                                          \
    X(OPTIMIZER, optimizer, "optimizer", true, "the optimizer step")

#define PHASE_ENUM(id, name, label, stacked, desc) PHASE_##id,
enum phase { PHASES(PHASE_ENUM) PHASE_N };
#undef PHASE_ENUM

struct phase_info {
    const char *name;  /* "data": key without "_ms" */
    const char *key;   /* "data_ms": the step report's and the results' column */
    const char *label; /* "data" */
    bool stacked;      /* part of the step's stacked bar */
    const char *description;
};

/* The phase's row (p < PHASE_N). Borrowed, static. */
const struct phase_info *phases_get(enum phase p);
/* [{name, key, label, order, stacked, description}] in order. Owned. */
json_t *phases_json(void);

/* Statistic shapes: one value, or figures over samples. */
enum column_shape {
    COLUMN_VALUE,  /* key itself */
    COLUMN_MEAN,   /* key_mean, key_ci95, key_n */
    COLUMN_SPREAD, /* key_mean, key_ci95, key_median, key_p95, key_min, key_max, key_n */
};
/* The statistics of a shaped column, in the order they appear in a row. */
enum column_stat {
    STAT_MEAN,
    STAT_CI95,
    STAT_MEDIAN,
    STAT_P95,
    STAT_MIN,
    STAT_MAX,
    STAT_N,
    STAT_NONE, /* a COLUMN_VALUE's own key */
};
/* The JSON type of a value (a statistic's: number, and integer for _n); every cell may
 * be null. */
enum column_type { CT_NUMBER, CT_INTEGER, CT_BOOLEAN, CT_STRING };
enum column_group {
    CG_KEY,        /* part of every row's key, whatever group_by says */
    CG_COLLECTIVE, /* a collective benchmark's figures */
    CG_TRAIN,      /* a training group's timing and accuracy */
    CG_PIPELINE,   /* pipeline parallelism */
    CG_DATA,       /* the data pipeline */
    CG_PREDICTION, /* the performance model's */
    CG_MEMORY,     /* what the ranks held */
    CG_USAGE,      /* what the ranks used */
    CG_TTA,        /* time to accuracy */
    CG_ELASTIC,    /* elastic runs and injected faults: what a lost rank cost (issue 32) */
};

/* Results columns, in a row's order. X(ID, key, shape, type, unit, label, group, description).
 * The phase columns and their predictions sit between the sections, from PHASES. */
#define COLUMNS_KEY(X)                                                                         \
    X(EMULATED, "emulated", VALUE, BOOLEAN, "", "emulated", KEY,                               \
      "the ranks shared one GPU (emulate_multi_rank)")                                         \
    X(OVERSUBSCRIBED, "oversubscribed", VALUE, BOOLEAN, "", "CPUs shared", KEY,                \
      "the ranks shared CPUs (more CPU slots than CPUs)")                                      \
    X(NETWORK_PROFILE, "network_profile", VALUE, STRING, "", "network", KEY,                   \
      "the emulated network the runs measured over; null: the host's")                         \
    X(NODES, "nodes", VALUE, INTEGER, "nodes", "nodes", KEY,                                   \
      "how many nodes the ranks spanned")                                                      \
    X(SINGLE_PROCESS, "single_process", VALUE, BOOLEAN, "", "one process", KEY,                \
      "the replicas shared one process (strategy mirrored or dp); world_size counts them")

#define COLUMNS_COLLECTIVE(X)                                                                  \
    X(OP, "op", VALUE, STRING, "", "op", COLLECTIVE, "the collective operation")               \
    X(DTYPE, "dtype", VALUE, STRING, "", "dtype", COLLECTIVE, "the element type")              \
    X(REDOP, "redop", VALUE, STRING, "", "redop", COLLECTIVE, "the reduction")                 \
    X(INPLACE, "inplace", VALUE, BOOLEAN, "", "in place", COLLECTIVE,                          \
      "the result overwrote the input")                                                        \
    X(BYTES, "bytes", VALUE, INTEGER, "bytes", "message size", COLLECTIVE,                     \
      "the message size of one rank")                                                          \
    X(ALGORITHM, "algorithm", VALUE, STRING, "", "algorithm", COLLECTIVE,                      \
      "the algorithms the runs used, joined by +")                                             \
    X(BUSBW_GBS, "busbw_gbs", SPREAD, NUMBER, "GB/s", "busbw", COLLECTIVE,                     \
      "bus bandwidth (nccl-tests), one value per repeat")                                      \
    X(ALGBW_GBS, "algbw_gbs", MEAN, NUMBER, "GB/s", "algbw", COLLECTIVE,                       \
      "bytes / median time, one value per repeat")                                             \
    X(TIME_US, "time_us", SPREAD, NUMBER, "µs", "time", COLLECTIVE,                            \
      "time per operation on the slowest rank, the median of each repeat")                     \
    X(WRONG, "wrong", VALUE, INTEGER, "elements", "wrong", COLLECTIVE,                         \
      "elements that differ from the exact expected result")

#define COLUMNS_TRAIN(X)                                                                       \
    X(WORLD_SIZE, "world_size", VALUE, INTEGER, "ranks", "world size", TRAIN,                  \
      "ranks per run; null where the group's runs differ")                                     \
    X(RUNS, "runs", VALUE, INTEGER, "runs", "runs", TRAIN, "runs pooled in the row")           \
    X(THROUGHPUT, "throughput", MEAN, NUMBER, "samples/s", "throughput", TRAIN,                \
      "global samples per second, one value per repeat")                                       \
    X(STEP_MS, "step_ms", SPREAD, NUMBER, "ms", "step", TRAIN,                                 \
      "the slowest rank's step time over non-warm-up steps")

#define COLUMNS_TRAIN_AFTER_PHASES(X)                                                          \
    X(OVERLAP, "overlap", VALUE, NUMBER, "fraction", "overlap", TRAIN,                         \
      "1 - exposed / total communication; null for one rank")                                  \
    X(STRAGGLER_MS, "straggler_ms", VALUE, NUMBER, "ms", "straggler", TRAIN,                   \
      "the slowest minus the fastest rank's step, mean per step")

#define COLUMNS_PIPELINE(X)                                                                    \
    X(BUBBLE_FRACTION, "bubble_fraction", VALUE, NUMBER, "fraction", "bubble", PIPELINE,       \
      "the ranks' idle time over their step time")                                             \
    X(BUBBLE_THEORY, "bubble_theory", VALUE, NUMBER, "fraction", "bubble (theory)", PIPELINE,  \
      "(P - 1) / (M + P - 1) at P stages and M micro-batches")                                 \
    X(P2P_MS, "p2p_ms", VALUE, NUMBER, "ms", "p2p", PIPELINE,                                  \
      "point-to-point time per rank and step")                                                 \
    X(P2P_BYTES, "p2p_bytes", VALUE, NUMBER, "bytes", "p2p bytes", PIPELINE,                   \
      "point-to-point bytes sent per rank and step")

#define COLUMNS_DATA(X)                                                                        \
    X(DATA_FRACTION, "data_fraction", VALUE, NUMBER, "fraction", "data wait", DATA,            \
      "the ranks' mean data wait over the step time")                                          \
    X(INPUT_BOUND, "input_bound", VALUE, BOOLEAN, "", "input-bound", DATA,                     \
      "data_fraction is at least 0.05: the loader did not keep up")                            \
    X(LOADER_CPU_MS, "loader_cpu_ms", VALUE, NUMBER, "ms", "loader CPU", DATA,                 \
      "the loader threads' CPU time per rank and step")                                        \
    X(READ_MBPS, "read_mbps", VALUE, NUMBER, "MB/s", "read", DATA,                             \
      "what a rank read from storage per second of its steps")

#define COLUMNS_SCALING(X)                                                                     \
    X(SPEEDUP, "speedup", VALUE, NUMBER, "", "speed-up", TRAIN,                                \
      "throughput over the world_size 1 group's")                                              \
    X(SPEEDUP_CI95, "speedup_ci95", VALUE, NUMBER, "", "speed-up ±", TRAIN,                    \
      "the speed-up's 95% half-width")                                                         \
    X(EFFICIENCY, "efficiency", VALUE, NUMBER, "fraction", "efficiency", TRAIN,                \
      "speed-up / world size")

#define COLUMNS_PRED_HEAD(X)                                                                   \
    X(PRED_STEP_MS, "pred_step_ms", VALUE, NUMBER, "ms", "model step", PREDICTION,             \
      "the predicted step time")

#define COLUMNS_PREDICTION(X)                                                                  \
    X(PRED_THROUGHPUT, "pred_throughput", VALUE, NUMBER, "samples/s", "model throughput",      \
      PREDICTION, "the predicted throughput")                                                  \
    X(PRED_EFFICIENCY, "pred_efficiency", VALUE, NUMBER, "fraction", "model efficiency",       \
      PREDICTION, "the predicted efficiency")                                                  \
    X(PRED_OVERLAP, "pred_overlap", VALUE, NUMBER, "fraction", "model overlap", PREDICTION,    \
      "the predicted overlap")                                                                 \
    X(PRED_STEP_ERR, "pred_step_err", VALUE, NUMBER, "fraction", "model step error",           \
      PREDICTION, "(predicted - measured) / measured step time")                               \
    X(PRED_THROUGHPUT_ERR, "pred_throughput_err", VALUE, NUMBER, "fraction",                   \
      "model throughput error", PREDICTION, "(predicted - measured) / measured throughput")    \
    X(PRED_EFFICIENCY_ERR, "pred_efficiency_err", VALUE, NUMBER, "fraction",                   \
      "model efficiency error", PREDICTION, "(predicted - measured) / measured efficiency")    \
    X(PRED_OVERLAP_ERR, "pred_overlap_err", VALUE, NUMBER, "fraction", "model overlap error",  \
      PREDICTION, "predicted - measured overlap")                                              \
    X(PRED_BASE_RUN, "pred_base_run", VALUE, INTEGER, "", "model base run", PREDICTION,        \
      "the one-rank run the prediction starts from")                                           \
    X(PRED_FITS, "pred_fits", VALUE, STRING, "", "model fits", PREDICTION,                     \
      "the network fits used (\"id,id\")")                                                     \
    X(PRED_MODEL_VERSION, "pred_model_version", VALUE, INTEGER, "", "model version",           \
      PREDICTION, "the performance model's version")                                           \
    X(PRED_NOTE, "pred_note", VALUE, STRING, "", "model note", PREDICTION,                     \
      "why there is no prediction; null where there is")                                       \
    X(PRED_EXTRAPOLATED, "pred_extrapolated", VALUE, BOOLEAN, "", "extrapolated", PREDICTION,  \
      "the prediction goes beyond the world sizes or node counts its fits measured")           \
    X(PRED_RANGE, "pred_range", VALUE, STRING, "", "prediction range", PREDICTION,             \
      "what the prediction's data covers: the fits' world sizes and nodes, the base's ranks")  \
    X(PRED_BUBBLE, "pred_bubble", VALUE, NUMBER, "fraction", "model bubble", PREDICTION,       \
      "a pipeline's simulated idle share of the step, beside bubble_fraction; null without "   \
      "a pipeline")                                                                            \
    X(PRED_CONTENTION, "pred_contention", VALUE, NUMBER, "", "contention", PREDICTION,         \
      "the compute slowdown the prediction applied for ranks sharing the node (1: none)")      \
    X(PRED_CALIBRATION, "pred_calibration", VALUE, INTEGER, "", "calibration", PREDICTION,     \
      "the stored calibration used (GET /v1/calibrations); null: none, the core-share rule")   \
    X(PRED_VERDICT, "pred_verdict", VALUE, STRING, "", "model verdict", PREDICTION,            \
      "hit, miss or within_noise: the step error against 15 % and the step's own 95% CI")

#define COLUMNS_ACCURACY(X)                                                                    \
    X(TEST_ACC, "test_acc", MEAN, NUMBER, "fraction", "test accuracy", TRAIN,                  \
      "the last epoch's test accuracy, one value per repeat")                                  \
    X(TEST_ACC_PER_CLASS, "test_acc_per_class", VALUE, STRING, "fraction",                     \
      "test accuracy per class", TRAIN,                                                        \
      "the last epoch's test accuracy of each class, in class order, mean over the repeats, "  \
      "';'-separated (empty: a class the test split lacks); null: none reported, or the "      \
      "group's runs differ in their classes")                                                  \
    X(TRAIN_LOSS, "train_loss", MEAN, NUMBER, "", "loss", TRAIN,                               \
      "the last epoch's training loss, one value per repeat")

#define COLUMNS_MEMORY(X)                                                                      \
    X(PARAMS_BYTES, "params_bytes", MEAN, NUMBER, "bytes", "parameters", MEMORY,               \
      "the largest rank's parameters")                                                         \
    X(BUFFERS_BYTES, "buffers_bytes", MEAN, NUMBER, "bytes", "buffers", MEMORY,                \
      "the largest rank's model buffers")                                                      \
    X(GRADS_BYTES, "grads_bytes", MEAN, NUMBER, "bytes", "gradients", MEMORY,                  \
      "the largest rank's gradients")                                                          \
    X(OPTIMIZER_BYTES, "optimizer_bytes", MEAN, NUMBER, "bytes", "optimizer state", MEMORY,    \
      "the largest rank's optimizer state")                                                    \
    X(COMM_BYTES, "comm_bytes", MEAN, NUMBER, "bytes", "comm buffers", MEMORY,                 \
      "the largest rank's communication buffers")                                              \
    X(ACTIVATIONS_BYTES, "activations_bytes", MEAN, NUMBER, "bytes", "activations", MEMORY,    \
      "the largest rank's activations")                                                        \
    X(MODEL_STATE_BYTES, "model_state_bytes", MEAN, NUMBER, "bytes", "model state", MEMORY,    \
      "parameters + gradients + optimizer state")                                              \
    X(PEAK_RSS_BYTES, "peak_rss_bytes", MEAN, NUMBER, "bytes", "peak RSS", MEMORY,             \
      "the largest rank's peak resident set")                                                  \
    X(DEVICE_PEAK_BYTES, "device_peak_bytes", MEAN, NUMBER, "bytes", "GPU peak", MEMORY,       \
      "the largest rank's peak device memory")

#define COLUMNS_USAGE(X)                                                                       \
    X(CPU_UTIL, "cpu_util", MEAN, NUMBER, "cores", "CPU", USAGE, "CPU cores per rank")         \
    X(VOLUNTARY_CS_PER_S, "voluntary_cs_per_s", MEAN, NUMBER, "1/s", "voluntary switches",     \
      USAGE, "voluntary context switches per second")                                          \
    X(INVOLUNTARY_CS_PER_S, "involuntary_cs_per_s", MEAN, NUMBER, "1/s",                       \
      "involuntary switches", USAGE, "involuntary context switches per second")                \
    X(GPU_UTIL_PCT, "gpu_util_pct", MEAN, NUMBER, "%", "GPU util", USAGE, "GPU utilisation")   \
    X(GPU_POWER_W, "gpu_power_w", MEAN, NUMBER, "W", "GPU power", USAGE, "GPU power draw")

#define COLUMNS_TTA(X)                                                                         \
    X(TARGET_ACCURACY, "target_accuracy", VALUE, NUMBER, "fraction", "target accuracy", TTA,   \
      "the spec's target_accuracy; null: not asked, or different across the group")            \
    X(TTA_S, "tta_s", SPREAD, NUMBER, "s", "time to accuracy", TTA,                            \
      "training time until the target, over the repeats that reached it")                      \
    X(TTA_EPOCHS, "tta_epochs", MEAN, NUMBER, "epochs", "epochs to accuracy", TTA,             \
      "epochs until the target, over the repeats that reached it")                             \
    X(TTA_REACHED, "tta_reached", VALUE, INTEGER, "repeats", "reached", TTA,                   \
      "repeats that reached the target")                                                       \
    X(TTA_REPEATS, "tta_repeats", VALUE, INTEGER, "repeats", "repeats", TTA,                   \
      "repeats that trained towards the target")

/* What a fault cost a run (issue 32): measured from its fault (the first injected fault's
 * event, else the first lost rank's end) to the survivors' first detection and to the
 * first step of the generation that resumed; null for a run without either. */
#define COLUMNS_ELASTIC(X)                                                                     \
    X(GENERATIONS, "generations", MEAN, NUMBER, "", "generations", ELASTIC,                    \
      "generations formed after the launch's (each loss and each growth), per run")            \
    X(DETECT_S, "detect_s", MEAN, NUMBER, "s", "time to detect", ELASTIC,                      \
      "the first detection of the lost rank minus the fault's time, per run")                  \
    X(RESUME_S, "resume_s", MEAN, NUMBER, "s", "time to resume", ELASTIC,                      \
      "the new generation's first step minus the fault's time, per run")                       \
    X(LOST_STEPS, "lost_steps", MEAN, NUMBER, "steps", "lost steps", ELASTIC,                  \
      "steps redone since the last commit, over the run's regroups, per run")                  \
    X(THROUGHPUT_BEFORE, "throughput_before", MEAN, NUMBER, "samples/s", "before fault",       \
      ELASTIC, "global samples per second before the fault, per run")                          \
    X(THROUGHPUT_DURING, "throughput_during", MEAN, NUMBER, "samples/s", "during fault",       \
      ELASTIC, "global samples per second from the fault to the resumption, per run")          \
    X(THROUGHPUT_AFTER, "throughput_after", MEAN, NUMBER, "samples/s", "after fault", ELASTIC, \
      "global samples per second after the resumption, per run")

/* Every column in a row's order: X makes a column's row, P a phase's, Q its prediction's. */
#define COLUMNS(X, P, Q)                                                                       \
    COLUMNS_KEY(X)                                                                             \
    COLUMNS_COLLECTIVE(X)                                                                      \
    COLUMNS_TRAIN(X)                                                                           \
    PHASES(P)                                                                                  \
    COLUMNS_TRAIN_AFTER_PHASES(X)                                                              \
    COLUMNS_PIPELINE(X)                                                                        \
    COLUMNS_DATA(X)                                                                            \
    COLUMNS_SCALING(X)                                                                         \
    COLUMNS_PRED_HEAD(X)                                                                       \
    PHASES(Q)                                                                                  \
    COLUMNS_PREDICTION(X)                                                                      \
    COLUMNS_ACCURACY(X)                                                                        \
    COLUMNS_MEMORY(X)                                                                          \
    COLUMNS_USAGE(X)                                                                           \
    COLUMNS_TTA(X)                                                                             \
    COLUMNS_ELASTIC(X)

#define COLUMN_ENUM(id, ...) COL_##id,
#define COLUMN_PHASE_ENUM(id, ...) COL_PHASE_##id,
#define COLUMN_PRED_PHASE_ENUM(id, ...) COL_PRED_PHASE_##id,
enum column { COLUMNS(COLUMN_ENUM, COLUMN_PHASE_ENUM, COLUMN_PRED_PHASE_ENUM) COL_N };
#undef COLUMN_ENUM
#undef COLUMN_PHASE_ENUM
#undef COLUMN_PRED_PHASE_ENUM

/* The results column of phase p, and of its prediction. */
#define COLUMN_OF_PHASE(p) ((enum column)(COL_PHASE_DATA + (p)))
#define COLUMN_OF_PRED_PHASE(p) ((enum column)(COL_PRED_PHASE_DATA + (p)))

struct column_info {
    const char *key;
    enum column_shape shape;
    enum column_type type;
    const char *unit; /* "" where it has none */
    const char *label;
    enum column_group group;
    const char *description;
};

/* A key with a statistic's suffix fits this. */
#define COLUMNS_KEY_MAX 64

/* The column's row (c < COL_N). Borrowed, static. */
const struct column_info *columns_get(enum column c);
/* The key of column c's statistic st into out (COLUMNS_KEY_MAX): "step_ms_p95", or the
 * key itself for STAT_NONE. Returns out. */
const char *columns_key(enum column c, enum column_stat st, char *out);
/* The statistics a shape has, in row order, into out (STAT_N + 1); returns how many. */
size_t columns_stats_of(enum column_shape shape, enum column_stat *out);
/* "step (ms)", or the label where the unit is empty or "fraction"; into out. */
const char *columns_heading(enum column c, char *out, size_t cap);
/* The column whose key (unsuffixed) is key, or COL_N. */
enum column columns_find(const char *key);
/* [{key, shape, stats: [suffix...], type, unit, label, group, description}] in order.
 * Owned. */
json_t *columns_json(void);
/* JSON Schema (2020-12) of a results row: every expanded key, typed and nullable, other
 * properties (the group_by spec fields) allowed. Owned. */
json_t *columns_row_schema(void);
/* COL_N when every enum value has a row with a unique key; else the first bad column. */
int columns_check(void);

#endif
