/* vocab: ddpbench's vocabulary, each list written once: training strategies, engines,
 * communication backends and the host backend's transports, dataset formats, storage
 * profiles, pipeline schedules and the report protocol's line types, each name with the
 * attributes code tests instead of comparing names ("overlaps backward", "shards optimizer
 * state", "per-sample files").
 *
 * Decision: each list is an X-macro, so a C enum that must stay a parallel list elsewhere
 * (enum ddp_strategy, enum perf_strategy, enum report_type) is generated from the same
 * rows and cannot drift; the attributes live in vocab.c's table, indexed by the enum.
 * The spec's choices (common/spec_table.c), the CLI's help, the error messages that list names,
 * GET /v1/vocabulary and schema/vocabulary.json (which the Python engines and the
 * dashboard read instead of copying) all come from here. Adding a name is a row here and
 * its attributes in vocab.c, then the code that implements it. */
#ifndef DDPB_VOCAB_H
#define DDPB_VOCAB_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* X(ID, "name"): in this order everywhere (enum values, choices, schema enums). */
#define VOCAB_STRATEGIES(X)                                                                    \
    X(NAIVE, "naive")                                                                          \
    X(DDP, "ddp")                                                                              \
    X(HOROVOD, "horovod")                                                                      \
    X(ZERO1, "zero1")                                                                          \
    X(ZERO2, "zero2")                                                                          \
    X(MIRRORED, "mirrored")                                                                    \
    X(DP, "dp")
#define VOCAB_ENGINES(X)                                                                       \
    X(DDPBENCH, "ddpbench")                                                                    \
    X(PYTORCH, "pytorch")                                                                      \
    X(HOROVOD, "horovod")                                                                      \
    X(TENSORFLOW, "tensorflow")                                                                \
    X(DEEPSPEED, "deepspeed")                                                                  \
    X(SCRIPT, "script")                                                                        \
    X(LIGHTNING, "lightning")
#define VOCAB_BACKENDS(X)                                                                      \
    X(TCP, "tcp")                                                                              \
    X(NCCL, "nccl")                                                                            \
    X(MPI, "mpi")
/* Who starts a run's ranks (daemon/launch_plan.h): ddpbench's own fork/exec and followers,
 * an MPI implementation's launcher, or Slurm's srun inside an allocation. */
#define VOCAB_LAUNCHERS(X)                                                                     \
    X(DDPBENCH, "ddpbench")                                                                    \
    X(MPIRUN, "mpirun")                                                                        \
    X(SRUN, "srun")
/* The MPI implementations Debian ships (spec field "mpi"): each has its own communicator
 * module (worker/comm/mpi.c built once per implementation) and launcher. */
#define VOCAB_MPIS(X)                                                                          \
    X(OPENMPI, "openmpi")                                                                      \
    X(MPICH, "mpich")
/* The path ddpbench's host backend (backend tcp) takes between ranks (worker/comm/shm.h):
 * shared memory inside a node and TCP across nodes, or one of them only. */
#define VOCAB_TRANSPORTS(X)                                                                    \
    X(AUTO, "auto")                                                                            \
    X(SHM, "shm")                                                                              \
    X(TCP, "tcp")
#define VOCAB_FORMATS(X)                                                                       \
    X(NATIVE, "native")                                                                        \
    X(FILES_PNG, "files-png")                                                                  \
    X(FILES_JPEG, "files-jpeg")                                                                \
    X(RECORDS, "records")                                                                      \
    X(RECORDS_ZLIB, "records-zlib")                                                            \
    X(RECORDS_ZSTD, "records-zstd")                                                            \
    X(RECORDS_JPEG, "records-jpeg")                                                            \
    X(TFRECORD, "tfrecord")
#define VOCAB_STORAGES(X)                                                                      \
    X(LOCAL, "local")                                                                          \
    X(NFS, "nfs")                                                                              \
    X(BLOB, "blob")                                                                            \
    X(CUSTOM, "custom")
#define VOCAB_SCHEDULES(X)                                                                     \
    X(1F1B, "1f1b")                                                                            \
    X(GPIPE, "gpipe")
/* The kinds of an injected fault (spec field "faults", daemon/faults.c): what the daemon
 * does to a rank (or to every rank of a node). */
#define VOCAB_FAULT_KINDS(X)                                                                   \
    X(KILL, "kill")                                                                            \
    X(STOP, "stop")                                                                            \
    X(SLOW, "slow")                                                                            \
    X(LINK, "link")
#define VOCAB_REPORTS(X)                                                                       \
    X(HELLO, "hello")                                                                          \
    X(ENV, "env")                                                                              \
    X(PROGRESS, "progress")                                                                    \
    X(COLLECTIVE, "collective")                                                                \
    X(ERROR, "error")                                                                          \
    X(DONE, "done")                                                                            \
    X(HEARTBEAT, "heartbeat")                                                                  \
    X(STEP, "step")                                                                            \
    X(EPOCH, "epoch")                                                                          \
    X(MEMORY, "memory")                                                                        \
    X(USAGE, "usage")                                                                          \
    X(TRACE, "trace")                                                                          \
    X(GRADS, "grads")                                                                          \
    X(ELASTIC, "elastic")                                                                      \
    X(PIPE, "pipe")

#define VOCAB_ENUM_STRATEGY(id, name) VOCAB_STRATEGY_##id,
#define VOCAB_ENUM_ENGINE(id, name) VOCAB_ENGINE_##id,
#define VOCAB_ENUM_BACKEND(id, name) VOCAB_BACKEND_##id,
#define VOCAB_ENUM_FORMAT(id, name) VOCAB_FORMAT_##id,
#define VOCAB_ENUM_STORAGE(id, name) VOCAB_STORAGE_##id,
#define VOCAB_ENUM_SCHEDULE(id, name) VOCAB_SCHEDULE_##id,
#define VOCAB_ENUM_LAUNCHER(id, name) VOCAB_LAUNCHER_##id,
#define VOCAB_ENUM_MPI(id, name) VOCAB_MPI_##id,
#define VOCAB_ENUM_TRANSPORT(id, name) VOCAB_TRANSPORT_##id,
#define VOCAB_ENUM_FAULT(id, name) VOCAB_FAULT_##id,
enum vocab_strategy_id { VOCAB_STRATEGIES(VOCAB_ENUM_STRATEGY) VOCAB_NSTRATEGIES };
enum vocab_engine_id { VOCAB_ENGINES(VOCAB_ENUM_ENGINE) VOCAB_NENGINES };
enum vocab_backend_id { VOCAB_BACKENDS(VOCAB_ENUM_BACKEND) VOCAB_NBACKENDS };
enum vocab_format_id { VOCAB_FORMATS(VOCAB_ENUM_FORMAT) VOCAB_NFORMATS };
enum vocab_storage_id { VOCAB_STORAGES(VOCAB_ENUM_STORAGE) VOCAB_NSTORAGES };
enum vocab_schedule_id { VOCAB_SCHEDULES(VOCAB_ENUM_SCHEDULE) VOCAB_NSCHEDULES };
enum vocab_launcher_id { VOCAB_LAUNCHERS(VOCAB_ENUM_LAUNCHER) VOCAB_NLAUNCHERS };
enum vocab_mpi_id { VOCAB_MPIS(VOCAB_ENUM_MPI) VOCAB_NMPIS };
enum vocab_transport_id { VOCAB_TRANSPORTS(VOCAB_ENUM_TRANSPORT) VOCAB_NTRANSPORTS };
enum vocab_fault_id { VOCAB_FAULT_KINDS(VOCAB_ENUM_FAULT) VOCAB_NFAULTS };

/* The lists, for the functions that treat them alike. */
enum vocab_list {
    VOCAB_STRATEGY,
    VOCAB_ENGINE,
    VOCAB_BACKEND,
    VOCAB_FORMAT,
    VOCAB_STORAGE,
    VOCAB_SCHEDULE,
    VOCAB_REPORT,
    VOCAB_LAUNCHER,
    VOCAB_MPI,
    VOCAB_TRANSPORT,
    VOCAB_FAULT,
    VOCAB_NLISTS
};

/* How a strategy cuts the gradients into exchanges (worker/ddp/ddp.c, daemon/perf.c). */
enum vocab_bucketing {
    VOCAB_BUCKETS_PER_TENSOR,  /* every tensor alone (naive) */
    VOCAB_BUCKETS_BY_SIZE,     /* bucket_mb each, in readiness order */
    VOCAB_BUCKETS_SMALL_FIRST, /* by size, the first one small (PyTorch DDP's 1 MB) */
    VOCAB_BUCKETS_FUSION,      /* fusion_mb by cycle_ms (Horovod's tensor fusion) */
};

struct vocab_strategy {
    const char *name;
    bool overlaps_backward; /* exchanges run beside backward, on the communication thread */
    bool shards_optimizer;  /* ZeRO: each rank steps the optimizer on its own shard */
    bool shards_gradients;  /* ZeRO-2: each rank keeps only its shard of the gradients */
    enum vocab_bucketing buckets;
    const char *desc;
    /* one process holds every replica (issue 33: TF's MirroredStrategy, torch's
     * DataParallel): the daemon starts one process for world_size replicas, and results
     * mark the run single_process; ddpbench's own worker and the model refuse it */
    bool single_process;
};

/* How an engine recovers from a lost rank in elastic mode (the spec's "elastic", issue
 * 32): not at all (the spec field is refused), in memory (survivors keep running and
 * regroup; ddpbench), by a restart from the last checkpoint (the daemon stops the group
 * and starts it again; pytorch), or by the framework's own elastic driver (horovod). */
enum vocab_elastic {
    VOCAB_ELASTIC_NONE,
    VOCAB_ELASTIC_IN_MEMORY,
    VOCAB_ELASTIC_RESTART,
    VOCAB_ELASTIC_DRIVER,
};

struct vocab_engine {
    const char *name;
    const char *module;  /* Python module imported for its version; NULL: none */
    const char *adapter; /* engines/ file the daemon launches each rank with; NULL: none */
    bool framework;      /* a framework with its own loader (not ddpbench's C loader) */
    enum vocab_elastic elastic; /* how it recovers a lost rank; NONE: refuses "elastic" */
    const char *desc;
};

struct vocab_backend {
    const char *name;
    const char *device; /* the spec's device it goes with */
    const char *desc;
};

enum vocab_codec { VOCAB_CODEC_NONE, VOCAB_CODEC_PNG, VOCAB_CODEC_JPEG };
enum vocab_compression {
    VOCAB_COMPRESS_NONE, /* not a records format */
    VOCAB_COMPRESS_RAW,
    VOCAB_COMPRESS_ZLIB,
    VOCAB_COMPRESS_ZSTD,
    VOCAB_COMPRESS_JPEG
};

struct vocab_format {
    const char *name;
    bool files;                         /* per-sample image files and a manifest */
    bool records;                       /* shards of records and an index */
    enum vocab_codec codec;             /* files: how each image is encoded */
    enum vocab_compression compression; /* records: how each record stores its sample */
    bool lossy;                         /* JPEG: takes a quality */
    int max_level; /* a lossless codec's highest level (zlib 9, zstd 19); 0: takes none */
    const char *desc;
    /* TensorFlow's TFRecord shards of tf.train.Example records, each holding a JPEG file's
     * bytes (worker/data/tfrecord.c); last so the rows before it need not name it */
    bool tfrecord;
};

struct vocab_storage {
    const char *name;
    bool custom;       /* its figures are the spec's dataset.read_* */
    double read_mbps;  /* 1e6 bytes per second; 0 = no cap */
    double latency_ms; /* per request; 0 = none */
    int concurrency;   /* requests in flight; 0 = no cap */
    const char *desc;
};

struct vocab_schedule {
    const char *name;
    bool all_forward_first; /* every micro-batch's forward before any backward (GPipe) */
    const char *desc;
};

struct vocab_launcher {
    const char *name;
    bool per_rank;      /* the daemon spawns each rank itself (report pipe on fd 3) */
    bool in_allocation; /* needs a Slurm allocation around the daemon (SLURM_JOB_ID) */
    const char *desc;
};

struct vocab_mpi {
    const char *name;
    const char *module;   /* the worker's communicator module (worker/module/module.h) */
    const char *symbol;   /* its entry */
    const char *launcher; /* the implementation's own launcher program */
    const char *pmi;      /* srun --mpi= plugin its ranks wire up with */
    const char *runtime;  /* Debian packages a node needs to run it */
    const char *dev;      /* Debian package ddpbench builds its module against */
    const char *desc;
};

struct vocab_transport {
    const char *name;
    bool shm; /* moves bytes between ranks of one node through shared memory */
    bool tcp; /* moves bytes over TCP sockets (across nodes, or every byte) */
    const char *desc;
};

/* A fault kind: which of a fault's fields it takes (each one it takes is required, the
 * others refused), and whether it needs an emulated network to act on. */
struct vocab_fault {
    const char *name;
    bool duration; /* lasts duration_s, then the daemon undoes it */
    bool fraction; /* the CPU share left to the rank, (0, 1) */
    bool rate;     /* the link's rate while it lasts, Mbit/s */
    bool network;  /* needs netlab's emulated network (a link the daemon can shape) */
    const char *desc;
};

/* The published per-channel normalization of a dataset (worker/data/dataset.c uses it,
 * engines/ddpb_data.py reads it from schema/vocabulary.json). */
#define VOCAB_MAX_NORM_CHANNELS 3
struct vocab_norm {
    const char *name; /* the spec's dataset.name, or "none" */
    int channels;     /* 0: no normalization */
    float mean[VOCAB_MAX_NORM_CHANNELS], std[VOCAB_MAX_NORM_CHANNELS];
};

/* Rows by enum; NULL for a value out of range. */
const struct vocab_strategy *vocab_strategy(int id);
const struct vocab_engine *vocab_engine(int id);
/* The name of an elastic mode ("none", "in_memory", "restart", "driver") and a sentence
 * saying how an engine of that mode recovers a lost rank. Static strings. */
const char *vocab_elastic_name(enum vocab_elastic m);
const char *vocab_elastic_desc(enum vocab_elastic m);
const struct vocab_backend *vocab_backend(int id);
const struct vocab_format *vocab_format(int id);
const struct vocab_storage *vocab_storage(int id);
const struct vocab_schedule *vocab_schedule(int id);
const struct vocab_launcher *vocab_launcher(int id);
const struct vocab_mpi *vocab_mpi(int id);
const struct vocab_transport *vocab_transport(int id);
const struct vocab_fault *vocab_fault(int id);
/* The norm rows, in order, NULL past the last; by name, NULL when none. */
const struct vocab_norm *vocab_norm_at(size_t i);
const struct vocab_norm *vocab_norm_find(const char *name);

/* The i-th name of list l, NULL past the last (or for a bad l). */
const char *vocab_name(enum vocab_list l, int i);
/* The index of name in l; -1 when it is not there (or name is NULL). */
int vocab_find(enum vocab_list l, const char *name);
int vocab_count(enum vocab_list l);
/* The list's key in the JSON ("strategies", ...). */
const char *vocab_list_key(enum vocab_list l);
/* l's names joined into buf (size n, always terminated): "a, b, c or d" with
 * last = " or ", "a, b, c, d" with last = ", ". Returns buf. */
char *vocab_join(enum vocab_list l, const char *last, char *buf, size_t n);

/* The formats for which keep(row) is true (every one when keep is NULL), joined as
 * vocab_join does. Returns buf. */
char *vocab_format_join(bool (*keep)(const struct vocab_format *f), const char *last, char *buf,
                        size_t n);
/* The storage profiles with figures of their own (all but custom), joined. Returns buf. */
char *vocab_storage_join_named(const char *last, char *buf, size_t n);
/* keep functions: the formats `ddpbench dataset convert` writes (all but native); those
 * taking --quality (lossy); those taking --level (a lossless codec's). */
bool vocab_format_converted(const struct vocab_format *f);
/* Whether a storage profile caps reads at all (every one but local): custom's caps are the
 * spec's dataset.read_* figures. */
bool vocab_storage_capped(const struct vocab_storage *s);
bool vocab_format_lossy(const struct vocab_format *f);
bool vocab_format_leveled(const struct vocab_format *f);

/* spec_table.c's choice_at form: the i-th name, NULL after the last. */
const char *vocab_strategy_at(int i);
const char *vocab_engine_at(int i);
const char *vocab_backend_at(int i);
const char *vocab_format_at(int i);
const char *vocab_storage_at(int i);
const char *vocab_schedule_at(int i);
const char *vocab_launcher_at(int i);
const char *vocab_mpi_at(int i);
const char *vocab_transport_at(int i);
const char *vocab_fault_at(int i);

/* The whole vocabulary as JSON (GET /v1/vocabulary, schema/vocabulary.json): every list
 * with its attributes, the dataset norms, the model table's names, shapes and classes, and
 * the step phases (common/columns.h's phases_json). New reference (caller decrefs); NULL only
 * when out of memory. */
json_t *vocab_json(void);

/* Where the source tree keeps vocab_json's output (test_spec --write-vocabulary writes
 * it, test_vocab compares): two-space indent, keys in order, reals at 9 digits. */
#define VOCAB_JSON_PATH "schema/vocabulary.json"
#define VOCAB_JSON_REAL_PRECISION 9

#endif
