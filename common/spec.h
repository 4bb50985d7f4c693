/* spec: experiment specs: parse, validate, fill defaults, expand sweeps, convert to the
 * struct a worker runs. docs/design.md §5 "The experiment spec"; schema/spec.schema.json is
 * generated from the same field table (spec_schema_json) and checked by a test.
 *
 * Decision: one static table of fields (name, type, range or allowed values, default,
 * which workload it belongs to, sweepable or not) drives validation, defaults, sweep
 * checking and the JSON Schema, so the contract is written once. Specs travel as
 * normalized JSON (every field present, defaults filled) between the API, the database
 * and the worker; only the worker converts to struct spec.
 *
 * Error messages name the field as a path: "max_bytes", "sweep.world_size[2]". */
#ifndef DDPB_SPEC_H
#define DDPB_SPEC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define SPEC_MAX_BODY (1u << 20) /* largest accepted spec text */
#define SPEC_MAX_RUNS 1024       /* largest sweep cross product */
#define SPEC_MAX_SWEEP_VALUES 64 /* values per swept field */
#define SPEC_MAX_WORLD 1024
#define SPEC_MAX_SIZES 256 /* entries of an explicit "sizes" list */
#define SPEC_MAX_RANK_BYTES                                                                    \
    (INT64_C(1) << 40) /* 1 TiB: the most memory one rank of a
                                                   train spec may be estimated to need */

enum spec_workload { SPEC_WORKLOAD_COLLECTIVE = 0, SPEC_WORKLOAD_TRAIN };

/* An explicit list of message sizes in bytes, in the order given. */
struct spec_sizes {
    int n; /* 0: none given */
    int64_t bytes[SPEC_MAX_SIZES];
};

struct spec_collective {
    char op[24];        /* "allreduce", "reduce_scatter", "all_gather", "broadcast",
                           "sendrecv" */
    char dtype[16];     /* "float32", "float16", "bfloat16", "int32", "int64" */
    char redop[8];      /* "sum", "avg", "min", "max" */
    char algorithm[16]; /* "auto" or one the op has: "ring", "rd", "hd", "direct", "tree" */
    struct spec_sizes sizes; /* when n > 0, the sizes visited instead of min..max */
    char buckets_of[24];     /* "none" or a model whose DDP bucket sizes are visited */
    int64_t min_bytes, max_bytes;
    int factor;   /* multiplicative step; 0 when step is used */
    int64_t step; /* additive step in bytes; 0 when factor is used */
    int iters, warmup;
    bool check; /* verify results (#wrong) */
    bool inplace;
};

/* A sample shape: n = 0 (not given) or 3 (c, h, w). */
struct spec_shape {
    int n;
    int dims[3];
};

struct spec_dataset {
    char name[16];           /* "synthetic", "mnist", "fashion-mnist", "cifar10" */
    char path[512];          /* "" = the dataset's default place */
    struct spec_shape shape; /* synthetic; n = 0: the model's usual input */
    int classes;             /* synthetic */
    int samples;             /* one epoch: the first N training samples; 0 = all (synthetic:
                           DATA_SYNTHETIC_SAMPLES) */
    bool fresh;              /* synthetic: new values per step */
    bool augment;            /* cifar10: crop + flip */
    int workers;             /* loader threads filling batches; > 1 needs prefetch >= 1 */
    bool pin;                /* loader threads pinned to CPUs */
    char format[16];         /* "native", "files-png", ..., "records-zstd" */
    char storage[8];         /* "local", "nfs", "blob", "custom" */
    double read_mbps, read_latency_ms; /* storage custom */
    int read_concurrency;              /* storage custom */
    bool cold;                         /* drop read pages from the page cache */
    char storage_layer[12];            /* "auto", "mount", "in_process" */
};

struct spec_optimizer {
    char type[8]; /* "sgd", "adam", "adamw" */
    double lr, momentum, weight_decay, beta1, beta2, eps;
    bool nesterov;
};

struct spec_lr_schedule {
    char decay[12]; /* "constant", "step", "cosine" */
    int warmup_steps, step_size;
    double gamma;
};

/* The "train" workload (docs/design.md §5): nested objects "dataset", "optimizer" and
 * "lr_schedule" in JSON, whose fields are named "dataset.name" etc. in errors and sweeps. */
struct spec_train {
    char model[24];
    char strategy[12];   /* "naive", "ddp", "horovod", "zero1", "zero2", "mirrored", "dp" */
    char engine[12];     /* "ddpbench" (the C worker) or a framework (vocab.h) */
    char framework[8];   /* the engine's front end (issue 33): "auto" = its own; horovod:
                          * "torch" or "keras" (hvd.tensorflow.keras over TensorFlow 2) */
    char script[256];    /* engine "script": a file under the daemon's --scripts-dir */
    char precision[8];   /* "fp32", "fp16", "bf16" (the last two on device cuda) */
    char compression[8]; /* "none", "fp16", "bf16" */
    /* Gradient clipping (issue 33), every engine the same: the global L2 norm over all
     * parameters' gradients after the exchange (ZeRO: shard norms allreduced), scaled down
     * to clip_grad_norm when above it; 0 = off. */
    double clip_grad_norm;
    /* fp16 loss scaling: loss_scale 0 = dynamic (PyTorch GradScaler: starts at 65536, halves
     * on a non-finite step, doubles after loss_scale_window finite ones); > 0 = static. */
    double loss_scale;
    int loss_scale_window;
    int batch_size;    /* per rank */
    int steps, epochs; /* exactly one non-zero */
    int warmup_steps;
    double target_accuracy; /* 0: none; else time to accuracy is reported */
    int threads;
    int accumulate;
    int bucket_mb, fusion_mb; /* bucket_mb: also the collective workload's buckets_of */
    double cycle_ms;
    int prefetch;
    int seq_len;               /* gpt2 models: tokens per sample; 0 = the model's positions */
    int pipeline;              /* stages; 1 = data parallelism only */
    int micro_batches;         /* per step of a pipeline run; divides batch_size */
    char schedule[8];          /* "1f1b", "gpipe" */
    char pipeline_balance[8];  /* "params", "time" */
    char pipeline_split[1024]; /* the layers stages 1.. start at, comma-separated; "" */
    bool broadcast_init, eval;
    bool cudnn_benchmark; /* device cuda: convolution algorithms measured once per shape */
    bool loader_only;     /* the loader alone: no model is trained */
    bool calibrate;       /* a contention calibration: no exchange (docs/model.md) */
    struct spec_dataset dataset;
    struct spec_optimizer optimizer;
    struct spec_lr_schedule lr_schedule;
};

/* One injected fault of the spec's "faults" (issue 32): what the daemon does to a rank or
 * a node of the run, when. Exactly one of at_step / at_s is set (the other -1), exactly
 * one of rank / node (the other -1). kind is a name of vocab.h VOCAB_FAULT_KINDS: "kill"
 * (SIGKILL), "stop" (SIGSTOP for duration_s, then SIGCONT), "slow" (the rank's CPU share
 * cut to fraction for duration_s), "link" (under netlab, the node's link shaped down to
 * rate_mbit for duration_s). */
#define SPEC_MAX_FAULTS 16
struct spec_fault {
    char kind[8];
    int64_t at_step;   /* the run's step (its progress) at which it fires; -1: at_s */
    double at_s;       /* seconds after the run's first step; -1: at_step */
    int rank;          /* the rank it targets; -1: node */
    int node;          /* the run's node index (0 .. its nodes - 1, as placed); -1: rank */
    double duration_s; /* stop, slow, link; 0 for kill */
    double fraction;   /* slow: the CPU share left, (0, 1) */
    double rate_mbit;  /* link: the shaped rate */
};

/* The spec's "elastic" (issue 32): on = the field was given. A run keeps going while at
 * least min_ranks ranks live; the daemon starts replacements while fewer than
 * max_ranks (at most world_size: a replacement takes a lost rank's slot) live; ranks
 * commit their state every commit_every steps. */
struct spec_elastic {
    bool on;
    int min_ranks, max_ranks, commit_every;
};

/* One MPI transport setting of the spec's mpi_mca: an OpenMPI MCA parameter ("btl" =
 * "self,tcp") or an MPICH control variable ("MPIR_CVAR_CH4_NETMOD" = "ofi"). */
#define SPEC_MAX_MPI_PARAMS 16
struct spec_mpi_param {
    char key[64];
    char value[128];
};

struct spec {
    char name[129]; /* 1 to 128 printable ASCII characters + NUL */
    enum spec_workload workload;
    char device[8];    /* "cpu" or "cuda" */
    char backend[8];   /* "tcp" or "mpi" (device cpu), "nccl" (device cuda) */
    char launcher[12]; /* who starts the ranks: "ddpbench", "mpirun", "srun" (vocab.h) */
    char mpi[12];      /* the MPI implementation: "openmpi", "mpich" (vocab.h) */
    char transport[8]; /* backend tcp's path between ranks: "auto", "shm", "tcp" (vocab.h) */
    int n_mpi_params;  /* mpi_mca's entries, in the order given */
    struct spec_mpi_param mpi_params[SPEC_MAX_MPI_PARAMS];
    int world_size;
    int nodes;          /* nodes the ranks span; 0 = as few as fit */
    int ranks_per_node; /* 0 = from nodes, or packed */
    int repeats;
    int64_t seed;
    int timeout_s;           /* whole-run limit enforced by the daemon */
    int heartbeat_timeout_s; /* silence after which the daemon fails the run */
    int comm_timeout_s;      /* a communication operation with no progress this long fails */
    int trace_steps;         /* steps (iterations per size) each rank traces after warm-up */
    bool emulate_multi_rank; /* device cuda: several ranks share a GPU (flagged) */
    struct spec_collective coll;
    struct spec_train train;
    int n_faults;
    struct spec_fault faults[SPEC_MAX_FAULTS];
    struct spec_elastic elastic;
};

/* Parses a submitted spec body. Returns the owned normalized spec (every field present,
 * defaults filled, sizes as integers, "sweep" kept when given) or NULL with e set
 * (ERR_INVALID naming the field; ERR_TOO_LARGE over SPEC_MAX_BODY). */
json_t *spec_parse(const char *text, size_t len, struct err *e);
/* The same checks on an already parsed object (borrowed). Returns an owned copy. */
json_t *spec_normalize(const json_t *in, struct err *e);

/* Expands a normalized spec's sweep into runs (cross product, in the order the sweep
 * lists fields and values; last field varies fastest). Returns an owned array of
 * objects {"params": {field: value, ...}, "spec": {resolved spec, no "sweep"}}; one
 * element with empty params when there is no sweep. Each resolved spec is checked as a
 * whole (cross-field rules such as min_bytes <= max_bytes). Fails with ERR_INVALID when
 * the product exceeds max_runs. */
json_t *spec_expand(const json_t *normalized, size_t max_runs, struct err *e);

/* The value of a field by its table name, "dataset.name" looking inside "dataset".
 * Borrowed; NULL when absent. */
const json_t *spec_field_value(const json_t *spec, const char *name);

/* The fields of a normalized spec (borrowed) that differ from the field table's defaults
 * (a field without a default: whenever present), the swept ones left out (the sweep says
 * them): a new object {"dataset.name": value, ...} holding references; NULL on no memory.
 * The report's setup table. */
json_t *spec_nondefault(const json_t *spec);
/* CPU slots one rank of a resolved spec (borrowed) takes: its "threads", else 1. */
int spec_slots_per_rank(const json_t *resolved);
/* The CPU slots one process of a parsed spec (spec_from_json) takes: a rank's threads;
 * a single-process strategy's one process (mirrored, dp) holds world_size replicas and
 * takes theirs. */
int spec_rank_slots(const struct spec *s);
/* The processes the daemon starts for a parsed spec: world_size, or 1 for a
 * single-process strategy (vocab.h single_process), whose replicas share one. */
int spec_processes(const struct spec *s);
/* The same for a resolved spec (borrowed), as the submit stores it. */
int spec_processes_of(const json_t *resolved);

/* Fills out from a resolved spec (no "sweep") after checking it as spec_normalize does:
 * every field and every cross-field rule, what runs where (device, backend, precision,
 * strategy, compression, algorithm) included, so a worker is held to the same rules as a
 * submit. */
int spec_from_json(const json_t *resolved, struct spec *out, struct err *e);

/* Sizes: a non-negative integer or a string "4096", "4K", "64M", "1G" (binary units,
 * case-insensitive, optional trailing "B"/"iB"). */
int spec_parse_size(const json_t *v, int64_t *out, struct err *e);

/* Where a train run's reads meet the emulated storage (dataset.storage_layer resolved,
 * common/spec_storage.c): none (synthetic, text, native, or auto on an uncapped local),
 * the C loader's own emulation, or a per-rank ddpbench-fs mount. */
enum spec_storage_layer {
    SPEC_STORAGE_NONE,
    SPEC_STORAGE_IN_PROCESS,
    SPEC_STORAGE_MOUNT,
};
/* The layer of a parsed spec's dataset (struct spec_dataset) and of a resolved spec's
 * (json, a point of a sweep). */
enum spec_storage_layer spec_storage_layer_of(const struct spec_dataset *d);
enum spec_storage_layer spec_storage_layer_json(const json_t *resolved);
/* "none", "in_process", "mount": what a run's env records. */
const char *spec_storage_layer_name(enum spec_storage_layer l);

/* The JSON Schema (draft 2020-12) of specs, generated from the field table. Owned. */
json_t *spec_schema_json(void);

/* One rank's memory, in bytes, as spec_memory_estimate sees it. */
struct spec_memory {
    double params, grads, optimizer, comm, activations, data;
    double total;
};

/* Estimates one rank's memory for a resolved "train" spec (borrowed), in doubles so no
 * product overflows: parameters and gradients (model_table_params at the run's input and
 * classes), optimizer state (sgd with momentum one copy of the parameters, adam / adamw
 * two; zero1 / zero2 shard it over world_size), communication buffers (horovod's fusion
 * buffer and zero's staging copy of the gradients; 2 bytes a parameter more with
 * compression), activations and their gradients (model_table_activations x batch_size x
 * 2 floats) and the loader's max(prefetch, dataset.workers) + 1 input batches (1 with prefetch
 * 0). The input is dataset.shape, else the real dataset's own (mnist, fashion-mnist 1x28x28;
 * cifar10 3x32x32), else the model's usual one. An estimate, in fp32 (an upper bound for fp16 /
 * bf16). Returns 0, or -1 with out zeroed for a spec that is not "train". */
int spec_memory_estimate(const json_t *resolved, struct spec_memory *out);
/* "about 12.3 GiB (parameters 0.1, ... GiB; an estimate)" into buf. */
void spec_memory_text(const struct spec_memory *m, char *buf, size_t n);

/* Message sizes a collective spec visits, in order: the "sizes" list when given, else
 * min_bytes to max_bytes by factor or step. Returns the count written (at most max). */
size_t spec_collective_sizes(const struct spec_collective *c, int64_t *sizes, size_t max);

#endif
