/* spec: experiment specs (spec.h): parse, validate, fill defaults, expand sweeps, fill
 * struct spec, generate the JSON Schema.
 *
 * Decision: a field is one row of spec_fields[] (JSON type, range or choices, default as
 * JSON text, the workloads that have it, sweepable or not, the struct spec member it
 * fills, its description) and a rule between two fields is one row of spec_rules[].
 * Validation, defaults, sweep checks, spec_from_json and spec_schema_json all walk these
 * two tables, and error messages are built from the same row as the schema ("must be an
 * integer from 1 to 1024"), so the contract is written once. A new workload is an enum
 * value, a name in spec_workload_names and its rows. The model names are not listed here:
 * "model" and "buckets_of" take theirs from common/model_table.h.
 *
 * What runs where (device with backend, precision, strategy, compression; backend with
 * algorithm) is SPEC_RULE_ALLOWED rows too, so a combination the workers cannot run is a
 * 400 naming the field when it is submitted, and the worker, which reads its spec through
 * spec_from_json, is held to the same rows; only what depends on how the worker was built
 * stays in worker/device_check.c.
 *
 * "factor" and "step" are a one-of pair in which 0 means "not used": a normalized spec
 * names every field, so it says factor 0 when step is used, and submitting it again
 * normalizes to the same spec. Cross-field rules are checked on the top level (unless a
 * field of the rule is swept: its top-level value is then never run) and on every point
 * of the sweep, so a bad point is rejected when the spec is submitted, not when it runs. */
#include "common/spec.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/model_table.h"
#include "common/vocab.h"

#define SPEC_COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define SPEC_SIZE_LIMIT (INT64_C(2) << 30) /* 2G: largest message a spec may ask for */
#define SPEC_WL_ANY 0xffffffffu
#define SPEC_WL_COLLECTIVE (1u << SPEC_WORKLOAD_COLLECTIVE)
#define SPEC_WL_TRAIN (1u << SPEC_WORKLOAD_TRAIN)

enum spec_type {
    SPEC_T_STRING,
    SPEC_T_ENUM,
    SPEC_T_INT,
    SPEC_T_SIZE,
    SPEC_T_BOOL,
    SPEC_T_SIZE_LIST, /* distinct sizes, at most SPEC_MAX_SIZES */
    SPEC_T_NUMBER,    /* a real number in [dmin, dmax] */
    SPEC_T_SHAPE      /* [] or [c, h, w], each from min to max */
};

enum spec_flag {
    SPEC_F_REQUIRED = 1 << 0,
    SPEC_F_SWEEP = 1 << 1,      /* may be listed under "sweep" */
    SPEC_F_ZERO_UNSET = 1 << 2, /* 0 = not used (the other field of its one-of rule is) */
    SPEC_F_PRINTABLE = 1 << 3,  /* printable ASCII only: names end up in files, CSV, UIs */
    SPEC_F_WORKLOAD = 1 << 4,   /* selects the workload; stored as enum spec_workload */
};

struct spec_field {
    const char *name;
    enum spec_type type;
    unsigned workloads; /* bit (1 << enum spec_workload) per workload having it */
    unsigned flags;     /* enum spec_flag */
    int64_t min, max;   /* INT, SIZE, SHAPE: value range; STRING: length in
                                   characters */
    double dmin, dmax;  /* NUMBER: value range (dmin excluded when dmin_open) */
    bool dmin_open;
    const char *const *choices;      /* ENUM: NULL-terminated (workload: in enum order) */
    const char *(*choice_at)(int i); /* ENUM without choices: the i-th value, NULL after
                                        the last (the model table's names) */
    const char *def;                 /* default as JSON text; NULL: none, or for a string
                                   that is not required, the workload's name */
    size_t off, size;                /* struct spec member it fills; size 0: none */
    const char *desc;
};

#define SPEC_AT(m) .off = offsetof(struct spec, m), .size = sizeof(((struct spec *)0)->m)

static const char *const spec_workload_names[] = {"collective", "train", NULL};
static const char *const spec_devices[] = {"cpu", "cuda", NULL};
static const char *const spec_ops[] = {"allreduce", "reduce_scatter", "all_gather",
                                       "broadcast", "sendrecv",       NULL};
static const char *const spec_dtypes[] = {"float32", "float16", "bfloat16",
                                          "int32",   "int64",   NULL};
static const char *const spec_redops[] = {"sum", "avg", "min", "max", NULL};
static const char *const spec_algorithms[] = {"auto",   "ring", "rd",   "hd",
                                              "direct", "tree", "hier", NULL};
/* "engine": ddpbench's own C worker, or a real framework launched by the daemon (issue 16);
 * which of them a node has installed is GET /v1/engines, checked at submit. The names of
 * strategies, engines, backends, formats, storages and schedules are common/vocab.h's. */

/* "model": the names of common/model_table.h, in its order. */
static const char *spec_model_at(int i)
{
    const struct model_info *mi = i >= 0 ? model_table_at((size_t)i) : NULL;
    return mi ? mi->name : NULL;
}

/* "buckets_of": "none", then the model names. */
static const char *spec_bucket_model_at(int i)
{
    return i == 0 ? "none" : spec_model_at(i - 1);
}
/* fp16 / bf16: mixed precision on device "cuda" (fp32 master weights; fp16 with dynamic
 * loss scaling); the CPU worker trains in fp32 and refuses them naming the field */
static const char *const spec_precisions[] = {"fp32", "fp16", "bf16", NULL};
static const char *const spec_compressions[] = {"none", "fp16", "bf16", NULL};
static const char *const spec_datasets[] = {"synthetic", "mnist", "fashion-mnist",
                                            "cifar10",   "text",  NULL};
static const char *const spec_optimizers[] = {"sgd", "adam", "adamw", NULL};
static const char *const spec_decays[] = {"constant", "step", "cosine", NULL};
static const char *const spec_balances[] = {"params", "time", NULL};

/* The table keeps its own layout (a field in a few lines reads as a row). */
/* clang-format off */
static const struct spec_field spec_fields[] = {
    {.name = "name", .type = SPEC_T_STRING, .workloads = SPEC_WL_ANY,
     .flags = SPEC_F_PRINTABLE, .min = 1, .max = 128, SPEC_AT(name),
     .desc = "Label shown in lists, reports and the dashboard: 1 to 128 printable ASCII "
             "characters. Default: the workload's name."},
    {.name = "description", .type = SPEC_T_STRING, .workloads = SPEC_WL_ANY, .min = 0,
     .max = 4096, .def = "\"\"",
     .desc = "Free text kept with the experiment (at most 4096 characters)."},
    {.name = "workload", .type = SPEC_T_ENUM, .workloads = SPEC_WL_ANY,
     .flags = SPEC_F_REQUIRED | SPEC_F_WORKLOAD, .choices = spec_workload_names,
     SPEC_AT(workload),
     .desc = "What the workers run: \"collective\" measures one collective operation over "
             "a range of message sizes; \"train\" trains a model data-parallel."},
    {.name = "device", .type = SPEC_T_ENUM, .workloads = SPEC_WL_ANY, .flags = SPEC_F_SWEEP,
     .choices = spec_devices, .def = "\"cpu\"", SPEC_AT(device),
     .desc = "Where each rank's buffers live. \"cpu\" goes with backend \"tcp\" (and trains "
             "in fp32); \"cuda\" with backend \"nccl\" (training with strategy naive or ddp, "
             "no compression). Other combinations are refused naming the field."},
    {.name = "backend", .type = SPEC_T_ENUM, .workloads = SPEC_WL_ANY, .flags = SPEC_F_SWEEP,
     .choice_at = vocab_backend_at, .def = "\"tcp\"", SPEC_AT(backend),
     .desc = "How ranks communicate: \"tcp\" is ddpbench's own TCP collectives (device "
             "\"cpu\"); \"nccl\" is NVIDIA's NCCL on GPU buffers (device \"cuda\")."},
    {.name = "world_size", .type = SPEC_T_INT, .workloads = SPEC_WL_ANY,
     .flags = SPEC_F_SWEEP, .min = 1, .max = SPEC_MAX_WORLD, .def = "1", SPEC_AT(world_size),
     .desc = "Number of ranks, one worker process each."},
    {.name = "nodes", .type = SPEC_T_INT, .workloads = SPEC_WL_ANY, .flags = SPEC_F_SWEEP,
     .min = 0, .max = SPEC_MAX_WORLD, .def = "0", SPEC_AT(nodes),
     .desc = "How many nodes of the cluster the ranks span, spread evenly (ranks contiguous "
             "per node). 0: as few as fit (the leader first, then followers in join order)."},
    {.name = "ranks_per_node", .type = SPEC_T_INT, .workloads = SPEC_WL_ANY,
     .flags = SPEC_F_SWEEP, .min = 0, .max = SPEC_MAX_WORLD, .def = "0",
     SPEC_AT(ranks_per_node),
     .desc = "Ranks on each node (the last may hold fewer). 0: decided by nodes, or packed. "
             "With nodes, nodes times ranks_per_node must be world_size."},
    {.name = "repeats", .type = SPEC_T_INT, .workloads = SPEC_WL_ANY, .flags = SPEC_F_SWEEP,
     .min = 1, .max = 100, .def = "1", SPEC_AT(repeats),
     .desc = "How many times a run repeats its whole measurement, for the spread across "
             "repeats."},
    {.name = "trace_steps", .type = SPEC_T_INT, .workloads = SPEC_WL_ANY,
     .flags = SPEC_F_SWEEP, .min = 0, .max = 100, .def = "5", SPEC_AT(trace_steps),
     .desc = "Timeline (GET /v1/runs/{id}/trace): how many steps after warm-up (train) or "
             "timed iterations of each message size (collective) every rank records, "
             "with their phases and collectives; 0 records none. Bounded so a trace stays "
             "small."},
    {.name = "seed", .type = SPEC_T_INT, .workloads = SPEC_WL_ANY, .flags = SPEC_F_SWEEP,
     .min = 0, .max = INT32_MAX, .def = "1", SPEC_AT(seed),
     .desc = "Seed of every random choice (data, initial values), so a run can be "
             "reproduced."},
    {.name = "timeout_s", .type = SPEC_T_INT, .workloads = SPEC_WL_ANY, .flags = SPEC_F_SWEEP,
     .min = 1, .max = 86400, .def = "600", SPEC_AT(timeout_s),
     .desc = "Wall-clock limit of one run in seconds; the daemon stops a run that takes "
             "longer."},
    {.name = "heartbeat_timeout_s", .type = SPEC_T_INT, .workloads = SPEC_WL_ANY,
     .flags = SPEC_F_SWEEP, .min = 2, .max = 3600, .def = "30",
     SPEC_AT(heartbeat_timeout_s),
     .desc = "A rank that sends nothing (not even its once-a-second heartbeat) for this many "
             "seconds is taken as frozen, and the daemon fails the run naming it."},
    {.name = "comm_timeout_s", .type = SPEC_T_INT, .workloads = SPEC_WL_ANY,
     .flags = SPEC_F_SWEEP, .min = 1, .max = 3600, .def = "60", SPEC_AT(comm_timeout_s),
     .desc = "A communication operation in which no data moves for this many seconds "
             "fails, naming the rank it waited for (a stopped or hung peer)."},
    {.name = "emulate_multi_rank", .type = SPEC_T_BOOL, .workloads = SPEC_WL_ANY,
     .flags = SPEC_F_SWEEP, .def = "false", SPEC_AT(emulate_multi_rank),
     .desc = "Experimental, device \"cuda\": run several ranks on one GPU (each rank "
             "with its own NCCL_HOSTID, or NCCL_MULTI_RANK_GPU_ENABLE=1 with NCCL 2.30 or "
             "newer) so multi-rank NCCL can be exercised on a single-GPU node. NCCL does "
             "not support several ranks on one GPU: a run may hang or measure socket "
             "copies. Results are flagged as emulated and are not comparable with one "
             "rank per GPU."},
    {.name = "op", .type = SPEC_T_ENUM, .workloads = SPEC_WL_COLLECTIVE,
     .flags = SPEC_F_SWEEP, .choices = spec_ops, .def = "\"allreduce\"", SPEC_AT(coll.op),
     .desc = "Collective operation to measure. reduce_scatter and all_gather sizes are "
             "the whole buffer (all ranks' blocks), as nccl-tests counts them; sendrecv "
             "sends to the next rank while receiving from the previous one."},
    {.name = "dtype", .type = SPEC_T_ENUM, .workloads = SPEC_WL_COLLECTIVE,
     .flags = SPEC_F_SWEEP, .choices = spec_dtypes, .def = "\"float32\"",
     SPEC_AT(coll.dtype),
     .desc = "Element type of the buffers. float16 and bfloat16 reduce through float, "
             "rounded to nearest-even."},
    {.name = "redop", .type = SPEC_T_ENUM, .workloads = SPEC_WL_COLLECTIVE,
     .flags = SPEC_F_SWEEP, .choices = spec_redops, .def = "\"sum\"", SPEC_AT(coll.redop),
     .desc = "Reduction operator (allreduce, reduce_scatter). avg is the sum divided once "
             "by world_size; integer dtypes divide toward zero."},
    {.name = "algorithm", .type = SPEC_T_ENUM, .workloads = SPEC_WL_COLLECTIVE,
     .flags = SPEC_F_SWEEP, .choices = spec_algorithms, .def = "\"auto\"",
     SPEC_AT(coll.algorithm),
     .desc = "\"auto\" lets the backend choose the algorithm by message size; any other "
             "value forces that algorithm, which the op must have: allreduce ring, rd "
             "(recursive doubling), hd (halving-doubling) or hier (reduce inside each node, "
             "allreduce between node leaders, broadcast inside each node; auto never "
             "chooses it), reduce_scatter and all_gather "
             "ring or direct, "
             "broadcast ring or tree, sendrecv direct."},
    {.name = "min_bytes", .type = SPEC_T_SIZE, .workloads = SPEC_WL_COLLECTIVE,
     .flags = SPEC_F_SWEEP, .min = 1, .max = SPEC_SIZE_LIMIT, .def = "\"4K\"",
     SPEC_AT(coll.min_bytes),
     .desc = "Smallest message per rank: bytes, or a string with a binary unit (\"4K\" = "
             "4096 bytes)."},
    {.name = "max_bytes", .type = SPEC_T_SIZE, .workloads = SPEC_WL_COLLECTIVE,
     .flags = SPEC_F_SWEEP, .min = 1, .max = SPEC_SIZE_LIMIT, .def = "\"64M\"",
     SPEC_AT(coll.max_bytes),
     .desc = "Largest message per rank, at least min_bytes: bytes, or a string with a "
             "binary unit."},
    {.name = "factor", .type = SPEC_T_INT, .workloads = SPEC_WL_COLLECTIVE,
     .flags = SPEC_F_SWEEP | SPEC_F_ZERO_UNSET, .min = 2, .max = 1024, .def = "2",
     SPEC_AT(coll.factor),
     .desc = "Each message size is the previous one times factor. 0 when step is used."},
    {.name = "step", .type = SPEC_T_SIZE, .workloads = SPEC_WL_COLLECTIVE,
     .flags = SPEC_F_SWEEP | SPEC_F_ZERO_UNSET, .min = 1, .max = SPEC_SIZE_LIMIT,
     .def = "0", SPEC_AT(coll.step),
     .desc = "Each message size is the previous one plus step bytes, instead of factor. "
             "0 when factor is used."},
    {.name = "sizes", .type = SPEC_T_SIZE_LIST, .workloads = SPEC_WL_COLLECTIVE,
     .min = 1, .max = SPEC_SIZE_LIMIT, .def = "[]", SPEC_AT(coll.sizes),
     .desc = "Explicit message sizes, visited in this order instead of min_bytes to "
             "max_bytes (which, with factor and step, are then ignored): for example a "
             "model's gradient bucket sizes. Empty: not used."},
    {.name = "buckets_of", .type = SPEC_T_ENUM, .workloads = SPEC_WL_COLLECTIVE,
     .flags = SPEC_F_SWEEP, .choice_at = spec_bucket_model_at, .def = "\"none\"",
     SPEC_AT(coll.buckets_of),
     .desc = "Model-shaped replay: measure the gradient buckets a DDP run of this model would "
             "allreduce (a 1 MiB first bucket, then bucket_mb; float32; 1000 classes for the "
             "ImageNet models, 10 for the others), each bucket size as one point, in launch "
             "order, instead of min_bytes to max_bytes (tf_cnn_benchmarks' "
             "all_reduce_benchmark). \"none\": not used."},
    {.name = "iters", .type = SPEC_T_INT, .workloads = SPEC_WL_COLLECTIVE,
     .flags = SPEC_F_SWEEP, .min = 1, .max = 100000, .def = "20", SPEC_AT(coll.iters),
     .desc = "Timed iterations per message size."},
    {.name = "warmup", .type = SPEC_T_INT, .workloads = SPEC_WL_COLLECTIVE,
     .flags = SPEC_F_SWEEP, .min = 0, .max = 10000, .def = "5", SPEC_AT(coll.warmup),
     .desc = "Untimed iterations per message size before the timed ones."},
    {.name = "check", .type = SPEC_T_BOOL, .workloads = SPEC_WL_COLLECTIVE,
     .flags = SPEC_F_SWEEP, .def = "true", SPEC_AT(coll.check),
     .desc = "Verify every result and report how many elements are wrong."},
    {.name = "inplace", .type = SPEC_T_BOOL, .workloads = SPEC_WL_COLLECTIVE,
     .flags = SPEC_F_SWEEP, .def = "false", SPEC_AT(coll.inplace),
     .desc = "Use one buffer as both input and output."},
    /* ---- train ---- */
    {.name = "model", .type = SPEC_T_ENUM, .workloads = SPEC_WL_TRAIN, .flags = SPEC_F_SWEEP,
     .choice_at = spec_model_at, .def = "\"mnist-cnn\"", SPEC_AT(train.model),
     .desc = "Network to train, as PyTorch / torchvision define it (resnet18-cifar: 3x3 stem, "
             "no max pool). Input shape and class count come from the dataset."},
    {.name = "strategy", .type = SPEC_T_ENUM, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .choice_at = vocab_strategy_at, .def = "\"ddp\"",
     SPEC_AT(train.strategy),
     .desc = "How gradients are exchanged: naive (allreduce every gradient after backward), "
             "ddp (PyTorch DDP's buckets, overlapping backward), horovod (tensor fusion), "
             "zero1 / zero2 (DeepSpeed ZeRO stages 1 and 2)."},
    {.name = "batch_size", .type = SPEC_T_INT, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .min = 1, .max = 65536, .def = "32", SPEC_AT(train.batch_size),
     .desc = "Samples per rank per step (the global batch is world_size times this)."},
    {.name = "precision", .type = SPEC_T_ENUM, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .choices = spec_precisions, .def = "\"fp32\"",
     SPEC_AT(train.precision),
     .desc = "Arithmetic of the training step: fp32 everywhere; fp16 (dynamic loss scaling) "
             "and bf16 mixed precision on device cuda."},
    {.name = "cudnn_benchmark", .type = SPEC_T_BOOL, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .def = "false", SPEC_AT(train.cudnn_benchmark),
     .desc = "device cuda: choose each convolution's algorithms by timing cuDNN's candidates "
             "once per shape when the model is prepared (cudnnFind*AlgorithmEx, as PyTorch's "
             "torch.backends.cudnn.benchmark) instead of cuDNN's heuristics. Preparing the "
             "model takes longer; no step includes that time."},
    {.name = "steps", .type = SPEC_T_INT, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP | SPEC_F_ZERO_UNSET, .min = 1, .max = 10000000, .def = "100",
     SPEC_AT(train.steps),
     .desc = "Optimizer steps per repeat, warm-up steps included. 0 when epochs is used."},
    {.name = "epochs", .type = SPEC_T_INT, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP | SPEC_F_ZERO_UNSET, .min = 1, .max = 10000, .def = "0",
     SPEC_AT(train.epochs),
     .desc = "Passes over the training split per repeat, instead of steps; each ends with an "
             "evaluation on the test split when eval is set. 0 when steps is used."},
    {.name = "warmup_steps", .type = SPEC_T_INT, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .min = 0, .max = 100000, .def = "5", SPEC_AT(train.warmup_steps),
     .desc = "Steps at the start of each repeat that are run and reported but excluded from "
             "the statistics (caches, allocations, primitive creation)."},
    {.name = "target_accuracy", .type = SPEC_T_NUMBER, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .dmin = 0, .dmax = 1, .def = "0", SPEC_AT(train.target_accuracy),
     .desc = "Time to accuracy (DAWNBench, MLPerf): the results report the training time "
             "and epochs each repeat took until an epoch's test accuracy (train accuracy "
             "without a test split) first reached this fraction, or that it did not. 0: "
             "not measured."},
    {.name = "threads", .type = SPEC_T_INT, .workloads = SPEC_WL_TRAIN, .flags = SPEC_F_SWEEP,
     .min = 1, .max = 256, .def = "1", SPEC_AT(train.threads),
     .desc = "Compute threads per rank; the daemon reserves this many CPU slots per rank."},
    {.name = "accumulate", .type = SPEC_T_INT, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .min = 1, .max = 1024, .def = "1", SPEC_AT(train.accumulate),
     .desc = "Gradient accumulation: micro-batches of batch_size per optimizer step; "
             "gradients are exchanged once per step, after the last one."},
    {.name = "pipeline", .type = SPEC_T_INT, .workloads = SPEC_WL_TRAIN, .flags = SPEC_F_SWEEP,
     .min = 1, .max = 64, .def = "1", SPEC_AT(train.pipeline),
     .desc = "Pipeline stages: the model is cut into this many contiguous stages (balanced "
             "as pipeline_balance says), each on its own rank; world_size is replicas x pipeline, "
             "rank = replica x pipeline + stage, and the replicas of a stage exchange its "
             "gradients with the strategy. 1: data parallelism only."},
    {.name = "micro_batches", .type = SPEC_T_INT, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .min = 1, .max = 1024, .def = "1", SPEC_AT(train.micro_batches),
     .desc = "Pipeline runs: batch_size is split into this many micro-batches (it must "
             "divide it) that flow through the stages; 1 is plain model parallelism."},
    {.name = "schedule", .type = SPEC_T_ENUM, .workloads = SPEC_WL_TRAIN, .flags = SPEC_F_SWEEP,
     .choice_at = vocab_schedule_at, .def = "\"1f1b\"", SPEC_AT(train.schedule),
     .desc = "Pipeline runs: \"gpipe\" runs every micro-batch's forward, then every "
             "backward; \"1f1b\" (PipeDream-flush) alternates them after a warm-up, holding "
             "at most pipeline - stage micro-batches' activations."},
    {.name = "pipeline_balance", .type = SPEC_T_ENUM, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .choices = spec_balances, .def = "\"params\"",
     SPEC_AT(train.pipeline_balance),
     .desc = "Pipeline runs: the stages are cut so that the largest holds as few parameters "
             "as possible (\"params\": the same cut every run) or takes as little time "
             "(\"time\": rank 0 times each layer's forward and backward on a micro-batch "
             "first)."},
    {.name = "pipeline_split", .type = SPEC_T_STRING, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_PRINTABLE, .min = 0, .max = 1023, .def = "\"\"",
     SPEC_AT(train.pipeline_split),
     .desc = "Pipeline runs: where stages 1 .. pipeline-1 start, as the names of those "
             "layers separated by commas (\"transformer.h.6.ln_1\"), instead of "
             "pipeline_balance; a name that is no place to cut fails the run listing the "
             "places. \"\": balanced."},
    {.name = "compression", .type = SPEC_T_ENUM, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .choices = spec_compressions, .def = "\"none\"",
     SPEC_AT(train.compression),
     .desc = "Gradients travel as float16 or bfloat16 (halving the bytes) and are reduced "
             "through float; none keeps float32."},
    {.name = "bucket_mb", .type = SPEC_T_INT, .workloads = SPEC_WL_TRAIN | SPEC_WL_COLLECTIVE,
     .flags = SPEC_F_SWEEP, .min = 1, .max = 1024, .def = "25", SPEC_AT(train.bucket_mb),
     .desc = "ddp (and the collective workload's buckets_of): bucket size in MiB after the "
             "1 MiB first bucket (PyTorch's bucket_cap_mb); zero1 / zero2: the bucket size."},
    {.name = "fusion_mb", .type = SPEC_T_INT, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .min = 1, .max = 1024, .def = "64", SPEC_AT(train.fusion_mb),
     .desc = "horovod: fusion buffer size in MiB (HOROVOD_FUSION_THRESHOLD)."},
    {.name = "cycle_ms", .type = SPEC_T_NUMBER, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .dmin = 0, .dmax = 1000, .def = "1", SPEC_AT(train.cycle_ms),
     .desc = "horovod: how long ready gradients wait for more to join a fusion buffer, in "
             "milliseconds (HOROVOD_CYCLE_TIME)."},
    {.name = "broadcast_init", .type = SPEC_T_BOOL, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .def = "true", SPEC_AT(train.broadcast_init),
     .desc = "Broadcast rank 0's initial parameters to every rank before training (ranks "
             "initialise from the same seed anyway; this is what DDP does)."},
    {.name = "eval", .type = SPEC_T_BOOL, .workloads = SPEC_WL_TRAIN, .flags = SPEC_F_SWEEP,
     .def = "true", SPEC_AT(train.eval),
     .desc = "Evaluate on the test split at the end of every epoch (datasets with one)."},
    {.name = "seq_len", .type = SPEC_T_INT, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .min = 0, .max = 4096, .def = "0", SPEC_AT(train.seq_len),
     .desc = "Transformers (the gpt2 models): tokens per sample, at most the model's "
             "positions (128 for gpt2-tiny, 1024 for gpt2-small); 0: the model's positions. "
             "Other models: 0."},
    {.name = "prefetch", .type = SPEC_T_INT, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .min = 0, .max = 16, .def = "2", SPEC_AT(train.prefetch),
     .desc = "Batches the loader thread prepares ahead; 0 loads each batch inside the step."},
    {.name = "dataset.name", .type = SPEC_T_ENUM, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .choices = spec_datasets, .def = "\"synthetic\"",
     SPEC_AT(train.dataset.name),
     .desc = "synthetic (random values), mnist / fashion-mnist (idx files; fashion-mnist "
             "defaults to Debian's dataset-fashion-mnist) or cifar10 (binary batches)."},
    {.name = "dataset.path", .type = SPEC_T_STRING, .workloads = SPEC_WL_TRAIN, .min = 0,
     .max = 511, .def = "\"\"", SPEC_AT(train.dataset.path),
     .desc = "Directory holding the dataset's files on the node; \"\": the default place. "
             "text: the file to model, byte by byte (required)."},
    {.name = "dataset.shape", .type = SPEC_T_SHAPE, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .min = 1, .max = 4096, .def = "[]",
     SPEC_AT(train.dataset.shape),
     .desc = "synthetic: [channels, height, width] of a sample; []: the model's usual input "
             "(1x28x28 for mnist-cnn and lenet5, 3x32x32 for the CIFAR forms, 3x224x224 "
             "otherwise)."},
    {.name = "dataset.classes", .type = SPEC_T_INT, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .min = 2, .max = 100000, .def = "10",
     SPEC_AT(train.dataset.classes), .desc = "synthetic: number of classes."},
    {.name = "dataset.samples", .type = SPEC_T_INT, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .min = 0, .max = INT32_MAX, .def = "0",
     SPEC_AT(train.dataset.samples),
     .desc = "Samples in one epoch of the training split. mnist, fashion-mnist, cifar10: the "
             "first N samples of the training files, in file order, the same subset for "
             "every seed (each epoch shuffles those N); more than the files hold is an error "
             "naming this field when the run starts; the test split is always whole. "
             "synthetic: the dataset's size. 0: the whole training split (synthetic: 50000)."},
    {.name = "dataset.fresh", .type = SPEC_T_BOOL, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .def = "false", SPEC_AT(train.dataset.fresh),
     .desc = "synthetic: new values every step instead of one fixed batch (Horovod's and "
             "tf_cnn_benchmarks' synthetic mode)."},
    {.name = "dataset.augment", .type = SPEC_T_BOOL, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .def = "false", SPEC_AT(train.dataset.augment),
     .desc = "cifar10: random crop (padding 4) and horizontal flip on the training split."},
    {.name = "dataset.workers", .type = SPEC_T_INT, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .min = 1, .max = 16, .def = "1", SPEC_AT(train.dataset.workers),
     .desc = "Decode/augment threads per rank filling batches ahead (needs prefetch >= 1); "
             "the batches are the same whatever the count."},
    {.name = "dataset.pin", .type = SPEC_T_BOOL, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .def = "false", SPEC_AT(train.dataset.pin),
     .desc = "Pin each loader thread to one CPU of the rank's set, counted from its end (the "
             "compute threads take it from the start), instead of letting the kernel move "
             "them."},
    {.name = "dataset.format", .type = SPEC_T_ENUM, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .choice_at = vocab_format_at, .def = "\"native\"",
     SPEC_AT(train.dataset.format),
     .desc = "mnist, fashion-mnist, cifar10: how the samples are stored. native: the idx or "
             "CIFAR binary files in dataset.path, read whole at start; the others are read "
             "sample by sample while training from dataset.path/<format>/, which `ddpbench "
             "dataset convert` writes: one PNG or JPEG file per sample (files-png, "
             "files-jpeg), or record shards with an index, each sample raw, compressed "
             "(records, records-zlib, records-zstd) or a JPEG file's bytes (records-jpeg). "
             "synthetic and text ignore it."},
    {.name = "dataset.storage", .type = SPEC_T_ENUM, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .choice_at = vocab_storage_at, .def = "\"local\"",
     SPEC_AT(train.dataset.storage),
     .desc = "Emulated storage under the file-backed formats' reads, per rank: local (no "
             "caps), nfs (200 MB/s, 0.5 ms a request, 8 in flight), blob (100 MB/s, 15 ms a "
             "request, 32 in flight), or custom (dataset.read_*). An emulation: the reads "
             "are real, then held to the profile's caps (worker/data/storage.h)."},
    {.name = "dataset.read_mbps", .type = SPEC_T_NUMBER, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .dmin = 0, .dmax = 1e6, .def = "0",
     SPEC_AT(train.dataset.read_mbps),
     .desc = "storage custom: read bandwidth of the rank in MB/s (1e6 bytes); 0: no cap."},
    {.name = "dataset.read_latency_ms", .type = SPEC_T_NUMBER, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .dmin = 0, .dmax = 10000, .def = "0",
     SPEC_AT(train.dataset.read_latency_ms),
     .desc = "storage custom: what every request (an open, a read) waits before it is "
             "issued, in ms."},
    {.name = "dataset.read_concurrency", .type = SPEC_T_INT, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .min = 0, .max = 1024, .def = "0",
     SPEC_AT(train.dataset.read_concurrency),
     .desc = "storage custom: requests in flight at once; 0: no cap."},
    {.name = "dataset.cold", .type = SPEC_T_BOOL, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .def = "false", SPEC_AT(train.dataset.cold),
     .desc = "The file-backed formats: drop the pages each read brought into the page cache "
             "(posix_fadvise DONTNEED), so a repeated epoch or run reads the device, not "
             "memory (native sets are read once, at start)."},
    {.name = "loader_only", .type = SPEC_T_BOOL, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .def = "false", SPEC_AT(train.loader_only),
     .desc = "A loader-only run: each step takes its batches from the loader and trains "
             "nothing, so the throughput is what the data pipeline supplies on its own (sweep "
             "it against false to see whether training is input-bound)."},
    {.name = "optimizer.type", .type = SPEC_T_ENUM, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .choices = spec_optimizers, .def = "\"sgd\"",
     SPEC_AT(train.optimizer.type),
     .desc = "torch.optim.SGD, Adam or AdamW, with PyTorch 1.13's update rules."},
    {.name = "optimizer.lr", .type = SPEC_T_NUMBER, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .dmin = 0, .dmin_open = true, .dmax = 100, .def = "0.01",
     SPEC_AT(train.optimizer.lr), .desc = "Learning rate (the schedule's base rate)."},
    {.name = "optimizer.momentum", .type = SPEC_T_NUMBER, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .dmin = 0, .dmax = 0.999999, .def = "0",
     SPEC_AT(train.optimizer.momentum), .desc = "SGD momentum."},
    {.name = "optimizer.nesterov", .type = SPEC_T_BOOL, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .def = "false", SPEC_AT(train.optimizer.nesterov),
     .desc = "SGD: Nesterov momentum (needs momentum > 0)."},
    {.name = "optimizer.weight_decay", .type = SPEC_T_NUMBER, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .dmin = 0, .dmax = 1, .def = "0",
     SPEC_AT(train.optimizer.weight_decay),
     .desc = "L2 penalty added to the gradient (SGD, Adam) or decoupled decay (AdamW)."},
    {.name = "optimizer.beta1", .type = SPEC_T_NUMBER, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .dmin = 0, .dmax = 0.999999, .def = "0.9",
     SPEC_AT(train.optimizer.beta1), .desc = "Adam / AdamW first-moment decay."},
    {.name = "optimizer.beta2", .type = SPEC_T_NUMBER, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .dmin = 0, .dmax = 0.999999, .def = "0.999",
     SPEC_AT(train.optimizer.beta2), .desc = "Adam / AdamW second-moment decay."},
    {.name = "optimizer.eps", .type = SPEC_T_NUMBER, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .dmin = 0, .dmin_open = true, .dmax = 1, .def = "1e-08",
     SPEC_AT(train.optimizer.eps), .desc = "Adam / AdamW denominator term."},
    {.name = "lr_schedule.decay", .type = SPEC_T_ENUM, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .choices = spec_decays, .def = "\"constant\"",
     SPEC_AT(train.lr_schedule.decay),
     .desc = "After the warm-up: constant, step (StepLR: times gamma every step_size steps) "
             "or cosine (CosineAnnealingLR to 0 over the remaining steps)."},
    {.name = "lr_schedule.warmup_steps", .type = SPEC_T_INT, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .min = 0, .max = 10000000, .def = "0",
     SPEC_AT(train.lr_schedule.warmup_steps),
     .desc = "Linear learning-rate warm-up from lr/3 over this many optimizer steps "
             "(LinearLR)."},
    {.name = "lr_schedule.step_size", .type = SPEC_T_INT, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .min = 1, .max = 10000000, .def = "1000",
     SPEC_AT(train.lr_schedule.step_size), .desc = "step: optimizer steps between decays."},
    {.name = "lr_schedule.gamma", .type = SPEC_T_NUMBER, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .dmin = 0, .dmin_open = true, .dmax = 1, .def = "0.1",
     SPEC_AT(train.lr_schedule.gamma), .desc = "step: factor of each decay."},
    /* Appended, not placed beside "strategy": rows keep their order across branches. */
    {.name = "engine", .type = SPEC_T_ENUM, .workloads = SPEC_WL_TRAIN, .flags = SPEC_F_SWEEP,
     .choice_at = vocab_engine_at, .def = "\"ddpbench\"", SPEC_AT(train.engine),
     .desc = "What trains: ddpbench (this project's C worker, every strategy), pytorch "
             "(torch.distributed: ddp = DistributedDataParallel, zero1 = "
             "ZeroRedundancyOptimizer), horovod, tensorflow (MultiWorkerMirroredStrategy), "
             "deepspeed, or script (the operator's script under --scripts-dir). "
             "GET /v1/engines lists what each node has installed."},
    {.name = "script", .type = SPEC_T_STRING, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_PRINTABLE, .min = 0, .max = 255, .def = "\"\"", SPEC_AT(train.script),
     .desc = "engine script: the program each rank runs, a path relative to the directory "
             "the daemon's operator allowed (ddpbenchd --scripts-dir), nothing outside it; "
             "a .py file runs under the engines' Python. It reads the spec from DDPB_SPEC, "
             "finds its peers in RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, and reports "
             "steps and epochs with engines/ddpb_report.py."},
};
/* clang-format on */

#define SPEC_NFIELDS SPEC_COUNT(spec_fields)

enum spec_rule_kind {
    SPEC_RULE_LE,      /* a <= b */
    SPEC_RULE_ONE_OF,  /* exactly one of a and b is non-zero; a is the default one */
    SPEC_RULE_ALLOWED, /* b's value is one the table allows for a's value */
    SPEC_RULE_FILLS,   /* a x b = world_size when both are non-zero (placement) */
};

/* For SPEC_RULE_ALLOWED: the values of b allowed with a value of a (values as text: a
 * string's characters, a boolean's "true" or "false"), and why the others are not (NULL:
 * the reason is the list itself). */
struct spec_allowed {
    const char *a;
    const char *const *b;
    const char *why;
};

struct spec_rule {
    enum spec_rule_kind kind;
    unsigned workloads;
    const char *a, *b;
    const struct spec_allowed *allowed; /* SPEC_RULE_ALLOWED: NULL-terminated */
};

static const char *const spec_algs_allreduce[] = {"auto", "ring", "rd", "hd", "hier", NULL};
static const char *const spec_algs_gather[] = {"auto", "ring", "direct", NULL};
static const char *const spec_algs_broadcast[] = {"auto", "ring", "tree", NULL};
static const char *const spec_algs_p2p[] = {"auto", "direct", NULL};

/* The algorithms each collective op has (worker/comm/tcp_algo.c implements them). */
static const struct spec_allowed spec_op_algorithms[] = {
    {"allreduce", spec_algs_allreduce, NULL}, {"reduce_scatter", spec_algs_gather, NULL},
    {"all_gather", spec_algs_gather, NULL},   {"broadcast", spec_algs_broadcast, NULL},
    {"sendrecv", spec_algs_p2p, NULL},        {NULL, NULL, NULL},
};

/* What runs where (the worker's engines; worker/device_check.h keeps only what depends on
 * how the worker was built). A combination outside these is refused when it is submitted,
 * naming b, instead of failing when its workers start. */
static const char *const spec_only_tcp[] = {"tcp", NULL};
static const char *const spec_only_nccl[] = {"nccl", NULL};
static const char *const spec_only_false[] = {"false", NULL};
static const char *const spec_only_fp32[] = {"fp32", NULL};
static const char *const spec_gpu_strategies[] = {"naive", "ddp", NULL};
static const char *const spec_only_none[] = {"none", NULL};
static const char *const spec_algs_nccl[] = {"auto", "ring", "tree", NULL};

static const struct spec_allowed spec_device_backends[] = {
    {"cpu", spec_only_tcp, "NCCL moves GPU buffers"},
    {"cuda", spec_only_nccl,
     "tcp on GPU buffers, staging through pinned host memory, is not "
     "implemented yet"},
    {NULL, NULL, NULL},
};
static const struct spec_allowed spec_device_emulation[] = {
    {"cpu", spec_only_false, "emulation shares one GPU between ranks"},
    {NULL, NULL, NULL},
};
static const struct spec_allowed spec_device_cudnn[] = {
    {"cpu", spec_only_false, "cuDNN runs on device cuda"},
    {NULL, NULL, NULL},
};
static const struct spec_allowed spec_device_precisions[] = {
    {"cpu", spec_only_fp32,
     "the CPU trains in fp32; fp16 and bf16 are mixed precision on "
     "device cuda"},
    {NULL, NULL, NULL},
};
static const struct spec_allowed spec_device_strategies[] = {
    {"cuda", spec_gpu_strategies,
     "the others stage through host memory, not implemented "
     "on the GPU yet"},
    {NULL, NULL, NULL},
};
static const struct spec_allowed spec_device_compressions[] = {
    {"cuda", spec_only_none,
     "compression converts on the host, not implemented on the GPU "
     "yet"},
    {NULL, NULL, NULL},
};
/* What each framework engine can be asked for (the rest of its table, versions and
 * devices, is GET /v1/engines; engines/probe.py's table must say the same, which
 * tests/integration/test_engines.py checks). pytorch: DDP and ZeroRedundancyOptimizer,
 * fp32, compression by its allreduce hook; tensorflow: MultiWorkerMirroredStrategy's
 * all-reduce (ddp), fp32, no compression; horovod: its DistributedOptimizer; deepspeed:
 * ZeRO stages 1 and 2. */
static const char *const spec_torch_strategies[] = {"ddp", "zero1", NULL};
static const char *const spec_ddp_only[] = {"ddp", NULL};
static const char *const spec_horovod_only[] = {"horovod", NULL};
static const char *const spec_zero_stages[] = {"zero1", "zero2", NULL};
static const struct spec_allowed spec_engine_strategies[] = {
    {"pytorch", spec_torch_strategies,
     "torch offers DistributedDataParallel (ddp) and ZeroRedundancyOptimizer (zero1)"},
    {"tensorflow", spec_ddp_only,
     "TensorFlow's MultiWorkerMirroredStrategy all-reduces every gradient (ddp)"},
    {"horovod", spec_horovod_only, "Horovod trains with its DistributedOptimizer (horovod)"},
    {"deepspeed", spec_zero_stages, "DeepSpeed's engine runs ZeRO stage 1 or 2"},
    {NULL, NULL, NULL},
};
static const struct spec_allowed spec_engine_precisions[] = {
    {"pytorch", spec_only_fp32, "the pytorch adapter trains in fp32 (no autocast yet)"},
    {"tensorflow", spec_only_fp32, "the tensorflow adapter trains in fp32"},
    {"horovod", spec_only_fp32, "the horovod adapter trains in fp32"},
    {"deepspeed", spec_only_fp32, "the deepspeed adapter trains in fp32"},
    {NULL, NULL, NULL},
};
static const char *const spec_cpu_only[] = {"cpu", NULL};
static const struct spec_allowed spec_engine_devices[] = {
    {"tensorflow", spec_cpu_only, "the tensorflow engine is tensorflow-cpu"},
    {"horovod", spec_cpu_only, "the horovod engine is built with Gloo only, no NCCL"},
    {"deepspeed", spec_cpu_only, "the deepspeed engine runs its CPU accelerator over gloo"},
    {NULL, NULL, NULL},
};
static const char *const spec_none_fp16[] = {"none", "fp16", NULL};
static const struct spec_allowed spec_engine_compressions[] = {
    {"horovod", spec_none_fp16, "Horovod compresses to fp16 only (hvd.Compression.fp16)"},
    {"tensorflow", spec_only_none,
     "MultiWorkerMirroredStrategy has no gradient compression on the CPU"},
    {"deepspeed", spec_only_none, "the deepspeed adapter sets no communication compression"},
    {NULL, NULL, NULL},
};
/* The data pipeline's knobs are the C loader's: the framework engines read the native
 * files into memory with their own loaders (engines/ddpb_data.py). */
static const char *const spec_only_native[] = {"native", NULL};
static const char *const spec_only_local[] = {"local", NULL};
#define SPEC_ENGINES_C_LOADER(values, why)                                                     \
    {                                                                                          \
        {"pytorch", values, why}, {"tensorflow", values, why}, {"horovod", values, why},       \
            {"deepspeed", values, why},                                                        \
        {                                                                                      \
            NULL, NULL, NULL                                                                   \
        }                                                                                      \
    }
static const struct spec_allowed spec_engine_loader_only[] = SPEC_ENGINES_C_LOADER(
    spec_only_false, "a loader-only run measures ddpbench's C loader; the framework engines "
                     "load with their own");
static const struct spec_allowed spec_engine_formats[] = SPEC_ENGINES_C_LOADER(
    spec_only_native, "the framework engines read the native files into memory");
static const struct spec_allowed spec_engine_storages[] = SPEC_ENGINES_C_LOADER(
    spec_only_local, "storage emulation sits in ddpbench's C loader");
static const struct spec_allowed spec_backend_algorithms[] = {
    {"nccl", spec_algs_nccl, "NCCL chooses among its own algorithms, once per communicator"},
    {NULL, NULL, NULL},
};

static const struct spec_rule spec_rules[] = {
    {SPEC_RULE_LE, SPEC_WL_COLLECTIVE, "min_bytes", "max_bytes", NULL},
    {SPEC_RULE_ONE_OF, SPEC_WL_COLLECTIVE, "factor", "step", NULL},
    {SPEC_RULE_ALLOWED, SPEC_WL_COLLECTIVE, "op", "algorithm", spec_op_algorithms},
    {SPEC_RULE_ONE_OF, SPEC_WL_TRAIN, "steps", "epochs", NULL},
    {SPEC_RULE_ALLOWED, SPEC_WL_ANY, "device", "backend", spec_device_backends},
    {SPEC_RULE_ALLOWED, SPEC_WL_ANY, "device", "emulate_multi_rank", spec_device_emulation},
    {SPEC_RULE_ALLOWED, SPEC_WL_TRAIN, "device", "precision", spec_device_precisions},
    {SPEC_RULE_ALLOWED, SPEC_WL_TRAIN, "device", "cudnn_benchmark", spec_device_cudnn},
    {SPEC_RULE_ALLOWED, SPEC_WL_TRAIN, "device", "strategy", spec_device_strategies},
    {SPEC_RULE_ALLOWED, SPEC_WL_TRAIN, "device", "compression", spec_device_compressions},
    {SPEC_RULE_ALLOWED, SPEC_WL_COLLECTIVE, "backend", "algorithm", spec_backend_algorithms},
    {SPEC_RULE_LE, SPEC_WL_ANY, "nodes", "world_size", NULL},
    {SPEC_RULE_LE, SPEC_WL_ANY, "ranks_per_node", "world_size", NULL},
    {SPEC_RULE_FILLS, SPEC_WL_ANY, "nodes", "ranks_per_node", NULL},
    {SPEC_RULE_ALLOWED, SPEC_WL_TRAIN, "engine", "strategy", spec_engine_strategies},
    {SPEC_RULE_ALLOWED, SPEC_WL_TRAIN, "engine", "precision", spec_engine_precisions},
    {SPEC_RULE_ALLOWED, SPEC_WL_TRAIN, "engine", "compression", spec_engine_compressions},
    {SPEC_RULE_ALLOWED, SPEC_WL_TRAIN, "engine", "device", spec_engine_devices},
    {SPEC_RULE_ALLOWED, SPEC_WL_TRAIN, "engine", "loader_only", spec_engine_loader_only},
    {SPEC_RULE_ALLOWED, SPEC_WL_TRAIN, "engine", "dataset.format", spec_engine_formats},
    {SPEC_RULE_ALLOWED, SPEC_WL_TRAIN, "engine", "dataset.storage", spec_engine_storages},
};

/* --- table lookups ------------------------------------------------------------------- */

static const struct spec_field *spec_field_find(const char *name)
{
    for (size_t i = 0; i < SPEC_NFIELDS; i++)
        if (strcmp(spec_fields[i].name, name) == 0)
            return &spec_fields[i];
    return NULL;
}

static const struct spec_field *spec_field_workload(void)
{
    for (size_t i = 0; i < SPEC_NFIELDS; i++)
        if (spec_fields[i].flags & SPEC_F_WORKLOAD)
            return &spec_fields[i];
    return NULL;
}

static bool spec_field_in(const struct spec_field *f, enum spec_workload wl)
{
    return (f->workloads >> (unsigned)wl) & 1u;
}

static bool spec_rule_in(const struct spec_rule *r, enum spec_workload wl)
{
    return (r->workloads >> (unsigned)wl) & 1u;
}

/* The other field of name's one-of rule, or NULL. */
static const char *spec_partner(const char *name)
{
    for (size_t i = 0; i < SPEC_COUNT(spec_rules); i++) {
        const struct spec_rule *r = &spec_rules[i];
        if (r->kind != SPEC_RULE_ONE_OF)
            continue;
        if (strcmp(r->a, name) == 0)
            return r->b;
        if (strcmp(r->b, name) == 0)
            return r->a;
    }
    return NULL;
}

/* Index of s in a NULL-terminated list, or -1. */
static int spec_list_index(const char *const *list, const char *s)
{
    for (int i = 0; list[i]; i++)
        if (strcmp(list[i], s) == 0)
            return i;
    return -1;
}

/* The i-th allowed value of an ENUM field, NULL after the last. */
static const char *spec_choice(const struct spec_field *f, int i)
{
    return f->choices ? f->choices[i] : f->choice_at(i);
}

/* Index of s among f's allowed values, or -1. */
static int spec_choice_index(const struct spec_field *f, const char *s)
{
    for (int i = 0; spec_choice(f, i); i++)
        if (strcmp(spec_choice(f, i), s) == 0)
            return i;
    return -1;
}

/* --- nested fields ------------------------------------------------------------------ */
/* A field named "group.key" lives in the object "group" of the spec: one level only. */

/* True when key is the group of some field ("dataset" for "dataset.name"). */
static bool spec_is_group(const char *key)
{
    size_t n = strlen(key);
    for (size_t i = 0; i < SPEC_NFIELDS; i++)
        if (strncmp(spec_fields[i].name, key, n) == 0 && spec_fields[i].name[n] == '.')
            return true;
    return false;
}

const json_t *spec_field_value(const json_t *spec, const char *name)
{
    const char *dot = strchr(name, '.');
    if (!dot)
        return json_object_get(spec, name);
    char group[32];
    size_t n = (size_t)(dot - name);
    if (n >= sizeof group)
        return NULL;
    memcpy(group, name, n);
    group[n] = '\0';
    return json_object_get(json_object_get(spec, group), dot + 1);
}

/* Sets field `name` of spec to v (stolen, as json_object_set_new), making the group
 * object when missing. Returns 0 or -1 (out of memory; v is released). */
static int spec_set_path(json_t *spec, const char *name, json_t *v)
{
    const char *dot = strchr(name, '.');
    if (!dot)
        return json_object_set_new(spec, name, v);
    char group[32];
    size_t n = (size_t)(dot - name);
    if (n >= sizeof group) {
        json_decref(v);
        return -1;
    }
    memcpy(group, name, n);
    group[n] = '\0';
    json_t *g = json_object_get(spec, group);
    if (!json_is_object(g)) {
        g = json_object();
        if (!g || json_object_set_new(spec, group, g) < 0) {
            json_decref(v);
            return -1;
        }
    }
    return json_object_set_new(g, dot + 1, v);
}

/* --- message helpers ----------------------------------------------------------------- */

static void spec_append(char *out, size_t n, size_t *len, const char *s)
{
    if (*len >= n)
        return;
    int k = snprintf(out + *len, n - *len, "%s", s);
    if (k > 0)
        *len += (size_t)k;
}

/* A value as compact ASCII JSON for "got ..." (messages end up in JSON replies, so no
 * raw bytes that could be cut inside a UTF-8 sequence). */
static void spec_value_text(const json_t *v, char *out, size_t n)
{
    char *s = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    if (!s)
        snprintf(out, n, "%s", "(nothing)");
    else if (strlen(s) >= n && n > 4)
        snprintf(out, n, "%.*s...", (int)(n - 4), s);
    else
        snprintf(out, n, "%s", s);
    free(s);
}

/* A user-given key made safe for e->field and messages: printable ASCII, others '?'. */
static void spec_key_text(const char *prefix, const char *key, char *out, size_t n)
{
    size_t len = 0;
    spec_append(out, n, &len, prefix);
    for (const char *p = key; *p && len + 1 < n; p++)
        out[len++] = (*p >= 0x20 && *p < 0x7f) ? *p : '?';
    if (len < n)
        out[len] = '\0';
}

static void spec_size_text(int64_t v, char *out, size_t n)
{
    static const char units[] = "GMK";
    for (int i = 0; i < 3; i++) {
        int64_t unit = INT64_C(1) << (10 * (3 - i));
        if (v != 0 && v % unit == 0) {
            snprintf(out, n, "%" PRId64 "%c", v / unit, units[i]);
            return;
        }
    }
    snprintf(out, n, "%" PRId64, v);
}

/* What a valid value of f looks like, for "must be ..." messages. */
static void spec_requirement(const struct spec_field *f, char *out, size_t n)
{
    char lo[32], hi[32];
    size_t len = 0;
    switch (f->type) {
    case SPEC_T_STRING:
        len = (size_t)snprintf(out, n, "a string of %" PRId64 " to %" PRId64 "%s characters",
                               f->min, f->max,
                               (f->flags & SPEC_F_PRINTABLE) ? " printable ASCII" : "");
        break;
    case SPEC_T_ENUM:
        spec_append(out, n, &len, "one of ");
        for (int i = 0; spec_choice(f, i); i++) {
            spec_append(out, n, &len, i ? ", \"" : "\"");
            spec_append(out, n, &len, spec_choice(f, i));
            spec_append(out, n, &len, "\"");
        }
        break;
    case SPEC_T_INT:
        len = (size_t)snprintf(out, n, "an integer from %" PRId64 " to %" PRId64, f->min,
                               f->max);
        break;
    case SPEC_T_SIZE:
        spec_size_text(f->min, lo, sizeof lo);
        spec_size_text(f->max, hi, sizeof hi);
        len = (size_t)snprintf(out, n,
                               "a size from %s to %s (bytes as an integer, or a string "
                               "such as \"4K\", \"64M\", \"1G\")",
                               lo, hi);
        break;
    case SPEC_T_BOOL: len = (size_t)snprintf(out, n, "%s", "true or false"); break;
    case SPEC_T_SIZE_LIST:
        spec_size_text(f->min, lo, sizeof lo);
        spec_size_text(f->max, hi, sizeof hi);
        len = (size_t)snprintf(out, n,
                               "a list of at most %d distinct sizes from %s to %s (bytes as "
                               "integers, or strings such as \"4K\", \"64M\")",
                               SPEC_MAX_SIZES, lo, hi);
        break;
    case SPEC_T_NUMBER:
        len = (size_t)snprintf(out, n, "a number %s %g and at most %g",
                               f->dmin_open ? "greater than" : "at least", f->dmin, f->dmax);
        break;
    case SPEC_T_SHAPE:
        len = (size_t)snprintf(
            out, n, "[] or [channels, height, width], integers from %" PRId64 " to %" PRId64,
            f->min, f->max);
        break;
    }
    if ((f->flags & SPEC_F_ZERO_UNSET) && len < n)
        snprintf(out + len, n - len, " (or 0 when %s is used)", spec_partner(f->name));
}

/* Comma-separated names of the fields of wl having every flag in `flags`. */
static void spec_field_list(enum spec_workload wl, unsigned flags, char *out, size_t n)
{
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < SPEC_NFIELDS; i++) {
        const struct spec_field *f = &spec_fields[i];
        if (!spec_field_in(f, wl) || (f->flags & flags) != flags)
            continue;
        spec_append(out, n, &len, len ? ", " : "");
        spec_append(out, n, &len, f->name);
    }
}

/* --- single values ------------------------------------------------------------------- */

/* Returns 0 with *out set, -1 when s is not a size, -2 when it is too large. */
static int spec_size_from_text(const char *s, size_t len, int64_t *out)
{
    static const char units[] = "KMGT";
    const char *p = s, *u;
    int64_t n = 0;
    int shift = 0;
    if (strlen(s) != len || *p < '0' || *p > '9')
        return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        int d = *p - '0';
        if (n > (INT64_MAX - d) / 10)
            return -2;
        n = n * 10 + d;
    }
    if (*p && (u = strchr(units, *p & ~0x20))) {
        shift = 10 * (int)(u - units + 1);
        p++;
        if ((*p == 'i' || *p == 'I') && p[1] != 'b' && p[1] != 'B')
            return -1;
        p += *p == 'i' || *p == 'I';
    }
    p += *p == 'b' || *p == 'B';
    if (*p)
        return -1;
    if (n > (INT64_MAX >> shift))
        return -2;
    *out = n << shift;
    return 0;
}

int spec_parse_size(const json_t *v, int64_t *out, struct err *e)
{
    char got[64];
    int rc = -1;
    int64_t n = 0;
    if (json_is_integer(v))
        rc = json_integer_value(v) < 0 ? -1 : 0;
    else if (json_is_string(v))
        rc = spec_size_from_text(json_string_value(v), json_string_length(v), &n);
    if (rc == 0) {
        *out = json_is_integer(v) ? json_integer_value(v) : n;
        return 0;
    }
    spec_value_text(v, got, sizeof got);
    if (rc == -2)
        return err_set(e, ERR_INVALID, "", "size %s is too large", got);
    return err_set(e, ERR_INVALID, "",
                   "a size is a non-negative integer or digits with an optional binary unit "
                   "K, M, G or T and an optional B or iB (\"4096\", \"4K\", \"64MiB\"), "
                   "got %s",
                   got);
}

static bool spec_string_ok(const struct spec_field *f, const json_t *v)
{
    if (!json_is_string(v))
        return false;
    const char *s = json_string_value(v);
    size_t bytes = json_string_length(v), chars = 0;
    if (strlen(s) != bytes)
        return false; /* an embedded NUL */
    for (size_t i = 0; i < bytes; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((f->flags & SPEC_F_PRINTABLE) && (c < 0x20 || c > 0x7e))
            return false;
        chars += (c & 0xc0) != 0x80; /* count UTF-8 lead bytes: characters */
    }
    return (int64_t)chars >= f->min && (int64_t)chars <= f->max;
}

/* A size list: an array of distinct sizes in f's range, normalized to integers. Returns
 * 0 with *out owned (NULL only when out of memory), or -1. */
static int spec_convert_sizes(const struct spec_field *f, const json_t *v, json_t **out)
{
    size_t n = json_array_size(v);
    if (!json_is_array(v) || n > SPEC_MAX_SIZES)
        return -1;
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        int64_t b = 0;
        bool ok = spec_parse_size(json_array_get(v, i), &b, NULL) == 0 && b >= f->min &&
                  b <= f->max;
        for (size_t j = 0; ok && j < i; j++)
            ok = json_integer_value(json_array_get(arr, j)) != b;
        if (!ok) {
            json_decref(arr);
            return -1;
        }
        if (json_array_append_new(arr, json_integer(b)) < 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    *out = arr;
    return 0;
}

/* A number (integers accepted) in f's range, normalized to a real. Returns 0 with *out
 * owned (NULL only when out of memory), or -1. */
static int spec_convert_number(const struct spec_field *f, const json_t *v, json_t **out)
{
    if (!json_is_number(v))
        return -1;
    double d = json_number_value(v);
    if (!(d <= f->dmax) || !(f->dmin_open ? d > f->dmin : d >= f->dmin))
        return -1; /* written so a NaN fails too */
    *out = json_real(d);
    return 0;
}

/* [] or exactly three integers in f's range. Returns 0 with *out owned (NULL only when
 * out of memory), or -1. */
static int spec_convert_shape(const struct spec_field *f, const json_t *v, json_t **out)
{
    size_t n = json_array_size(v);
    if (!json_is_array(v) || (n != 0 && n != 3))
        return -1;
    for (size_t i = 0; i < n; i++) {
        const json_t *d = json_array_get(v, i);
        if (!json_is_integer(d) || json_integer_value(d) < f->min ||
            json_integer_value(d) > f->max)
            return -1;
    }
    *out = json_deep_copy(v);
    return 0;
}

/* Checks v against f. Returns 0 with *out the owned normalized value (NULL only when
 * out of memory), or -1 when v is not valid for f. */
static int spec_convert(const struct spec_field *f, const json_t *v, json_t **out)
{
    int64_t n = 0;
    *out = NULL;
    switch (f->type) {
    case SPEC_T_STRING:
        if (!spec_string_ok(f, v))
            return -1;
        *out = json_string(json_string_value(v));
        return 0;
    case SPEC_T_ENUM:
        if (!json_is_string(v) || spec_choice_index(f, json_string_value(v)) < 0)
            return -1;
        *out = json_string(json_string_value(v));
        return 0;
    case SPEC_T_INT:
        if (!json_is_integer(v))
            return -1;
        n = json_integer_value(v);
        break;
    case SPEC_T_SIZE:
        if (spec_parse_size(v, &n, NULL) < 0)
            return -1;
        break;
    case SPEC_T_BOOL:
        if (!json_is_boolean(v))
            return -1;
        *out = json_boolean(json_is_true(v));
        return 0;
    case SPEC_T_SIZE_LIST: return spec_convert_sizes(f, v, out);
    case SPEC_T_NUMBER: return spec_convert_number(f, v, out);
    case SPEC_T_SHAPE: return spec_convert_shape(f, v, out);
    }
    if (!(n >= f->min && n <= f->max) && !(n == 0 && (f->flags & SPEC_F_ZERO_UNSET)))
        return -1;
    *out = json_integer(n);
    return 0;
}

/* Returns the owned normalized value of v for field f, or NULL with e naming path. */
static json_t *spec_check_value(const struct spec_field *f, const json_t *v, const char *path,
                                struct err *e)
{
    json_t *out;
    if (spec_convert(f, v, &out) == 0) {
        if (!out)
            err_set(e, ERR_NOMEM, path, "%s: out of memory", path);
        return out;
    }
    char need[256], got[96];
    spec_requirement(f, need, sizeof need);
    spec_value_text(v, got, sizeof got);
    err_set(e, ERR_INVALID, path, "%s: must be %s, got %s", path, need, got);
    return NULL;
}

/* Owned default of f for workload wl (an error for a required field). */
static json_t *spec_default(const struct spec_field *f, enum spec_workload wl, struct err *e)
{
    if (f->flags & SPEC_F_REQUIRED) {
        err_set(e, ERR_INVALID, f->name, "%s: is required", f->name);
        return NULL;
    }
    if (!f->def && f->type == SPEC_T_STRING) {
        json_t *s = json_string(spec_workload_names[wl]);
        if (!s)
            err_set(e, ERR_NOMEM, f->name, "%s: out of memory", f->name);
        return s;
    }
    json_t *raw = f->def ? json_loads(f->def, JSON_DECODE_ANY, NULL) : NULL, *out = NULL;
    if (!raw || spec_convert(f, raw, &out) < 0 || !out)
        err_set(e, ERR_INTERNAL, f->name, "%s: the table's default does not parse", f->name);
    json_decref(raw);
    return out;
}

static bool spec_is_zero(const json_t *v)
{
    return json_is_integer(v) && json_integer_value(v) == 0;
}

/* --- the whole spec ------------------------------------------------------------------ */

static int spec_workload_of(const json_t *in, enum spec_workload *wl, struct err *e)
{
    const struct spec_field *f = spec_field_workload();
    const json_t *v = json_object_get(in, f->name);
    if (!v) {
        char need[128];
        spec_requirement(f, need, sizeof need);
        return err_set(e, ERR_INVALID, f->name, "%s: is required; must be %s", f->name, need);
    }
    json_t *nv = spec_check_value(f, v, f->name, e);
    if (!nv)
        return -1;
    *wl = (enum spec_workload)spec_choice_index(f, json_string_value(nv));
    json_decref(nv);
    return 0;
}

static int spec_unknown_key(const char *prefix, const char *key, enum spec_workload wl,
                            unsigned flags, const char *what, struct err *e)
{
    char path[64], list[256];
    spec_key_text(prefix, key, path, sizeof path);
    spec_field_list(wl, flags, list, sizeof list);
    return err_set(e, ERR_INVALID, path, "%s: %s; %s: %s%s", path, what,
                   flags ? "sweepable fields" : "known fields", list, flags ? "" : ", sweep");
}

/* Every key of a group object must be a field "group.key" of wl. */
static int spec_check_group(const char *group, const json_t *obj, enum spec_workload wl,
                            struct err *e)
{
    char prefix[40], name[96];
    snprintf(prefix, sizeof prefix, "%s.", group);
    if (!json_is_object(obj)) {
        char got[96];
        spec_value_text(obj, got, sizeof got);
        return err_set(e, ERR_INVALID, group, "%s: must be an object of %s* fields, got %s",
                       group, prefix, got);
    }
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        snprintf(name, sizeof name, "%s%s", prefix, key);
        const struct spec_field *f = strlen(key) < 64 ? spec_field_find(name) : NULL;
        if (!f)
            return spec_unknown_key(prefix, key, wl, 0, "unknown field", e);
        if (!spec_field_in(f, wl))
            return spec_unknown_key(prefix, key, wl, 0, "not a field of this workload", e);
    }
    return 0;
}

/* Every key of the top level must be a field of wl, a group of such fields, or
 * "sweep". */
static int spec_check_keys(const json_t *in, enum spec_workload wl, struct err *e)
{
    const char *key;
    json_t *v;
    /* jansson's iterators take a non-const object; nothing is modified. */
    json_object_foreach((json_t *)in, key, v)
    {
        if (strcmp(key, "sweep") == 0)
            continue;
        const struct spec_field *f = strchr(key, '.') ? NULL : spec_field_find(key);
        if (!f && !strchr(key, '.') && spec_is_group(key)) {
            if (spec_check_group(key, v, wl, e) < 0)
                return -1;
            continue;
        }
        if (!f)
            return spec_unknown_key("", key, wl, 0, "unknown field", e);
        if (!spec_field_in(f, wl))
            return spec_unknown_key("", key, wl, 0, "not a field of this workload", e);
    }
    return 0;
}

/* Validates one swept field's array into an owned array of normalized values. */
static json_t *spec_sweep_values(const struct spec_field *f, const json_t *arr, struct err *e)
{
    char path[64], got[96];
    snprintf(path, sizeof path, "sweep.%s", f->name);
    size_t n = json_array_size(arr);
    if (!json_is_array(arr) || n == 0 || n > SPEC_MAX_SWEEP_VALUES) {
        spec_value_text(arr, got, sizeof got);
        err_set(e, ERR_INVALID, path,
                "%s: must be a non-empty array of at most %d values, got %s", path,
                SPEC_MAX_SWEEP_VALUES, got);
        return NULL;
    }
    json_t *out = json_array();
    if (!out) {
        err_set(e, ERR_NOMEM, path, "%s: out of memory", path);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        char at[64];
        snprintf(at, sizeof at, "%s[%zu]", path, i);
        json_t *v = spec_check_value(f, json_array_get(arr, i), at, e);
        for (size_t j = 0; v && j < i; j++) {
            if (json_equal(v, json_array_get(out, j))) {
                spec_value_text(v, got, sizeof got);
                err_set(e, ERR_INVALID, at, "%s: %s is already listed at [%zu]", at, got, j);
                json_decref(v);
                v = NULL;
            }
        }
        if (!v || json_array_append_new(out, v) < 0) {
            if (v)
                err_set(e, ERR_NOMEM, at, "%s: out of memory", at);
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

/* Returns the owned normalized sweep (same field order) or NULL with e set. */
static json_t *spec_sweep_normalize(const json_t *sweep, enum spec_workload wl, struct err *e)
{
    if (!json_is_object(sweep)) {
        char got[96];
        spec_value_text(sweep, got, sizeof got);
        err_set(e, ERR_INVALID, "sweep",
                "sweep: must be an object mapping fields to arrays of values, got %s", got);
        return NULL;
    }
    json_t *out = json_object();
    const char *key;
    json_t *arr;
    if (!out) {
        err_set(e, ERR_NOMEM, "sweep", "sweep: out of memory");
        return NULL;
    }
    json_object_foreach((json_t *)sweep, key, arr)
    {
        const struct spec_field *f = spec_field_find(key);
        json_t *vals = NULL;
        if (!f || !spec_field_in(f, wl))
            spec_unknown_key("sweep.", key, wl, SPEC_F_SWEEP, "unknown field", e);
        else if (!(f->flags & SPEC_F_SWEEP))
            spec_unknown_key("sweep.", key, wl, SPEC_F_SWEEP, "cannot be swept", e);
        else
            vals = spec_sweep_values(f, arr, e);
        if (!vals || json_object_set_new(out, key, vals) < 0) {
            if (vals)
                err_set(e, ERR_NOMEM, "sweep", "sweep: out of memory");
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

/* A field of a one-of pair is given when it is set non-zero or swept. */
static bool spec_given(const json_t *in, const json_t *out, const json_t *sweep,
                       const char *name)
{
    if (sweep && json_object_get(sweep, name))
        return true;
    return spec_field_value(in, name) && !spec_is_zero(spec_field_value(out, name));
}

/* One-of pairs: giving both is an error; giving b makes a 0; otherwise b is 0 and a
 * keeps its value, or its default when it was not given (absent or 0). */
static int spec_apply_one_of(json_t *out, const json_t *in, const json_t *sweep,
                             enum spec_workload wl, struct err *e)
{
    for (size_t i = 0; i < SPEC_COUNT(spec_rules); i++) {
        const struct spec_rule *r = &spec_rules[i];
        if (r->kind != SPEC_RULE_ONE_OF || !spec_rule_in(r, wl))
            continue;
        bool ga = spec_given(in, out, sweep, r->a), gb = spec_given(in, out, sweep, r->b);
        if (ga && gb)
            return err_set(e, ERR_INVALID, r->b,
                           "%s: %s and %s are mutually exclusive (set or sweep only one)", r->b,
                           r->a, r->b);
        if (spec_set_path(out, gb ? r->a : r->b, json_integer(0)) < 0)
            return err_set(e, ERR_NOMEM, r->b, "%s: out of memory", r->b);
        json_t *def = NULL;
        if (!ga && !gb &&
            (!(def = spec_default(spec_field_find(r->a), wl, e)) ||
             spec_set_path(out, r->a, def) < 0))
            return def ? err_set(e, ERR_NOMEM, r->a, "%s: out of memory", r->a) : -1;
    }
    return 0;
}

/* Owned top level: every field of wl, validated or defaulted, in table order. */
static json_t *spec_fill(const json_t *in, const json_t *sweep, enum spec_workload wl,
                         struct err *e)
{
    json_t *out = json_object();
    if (!out) {
        err_set(e, ERR_NOMEM, "", "spec: out of memory");
        return NULL;
    }
    for (size_t i = 0; i < SPEC_NFIELDS; i++) {
        const struct spec_field *f = &spec_fields[i];
        if (!spec_field_in(f, wl))
            continue;
        const json_t *v = spec_field_value(in, f->name);
        json_t *nv = v ? spec_check_value(f, v, f->name, e) : spec_default(f, wl, e);
        if (!nv || spec_set_path(out, f->name, nv) < 0) {
            if (nv)
                err_set(e, ERR_NOMEM, f->name, "%s: out of memory", f->name);
            json_decref(out);
            return NULL;
        }
    }
    if (spec_apply_one_of(out, in, sweep, wl, e) < 0) {
        json_decref(out);
        return NULL;
    }
    return out;
}

/* A string's or a boolean's value as the text spec_allowed lists it; NULL for others. */
static const char *spec_value_word(const json_t *v)
{
    if (json_is_boolean(v))
        return json_is_true(v) ? "true" : "false";
    return json_string_value(v);
}

/* SPEC_RULE_ALLOWED: true with the reason in why when b's value is not allowed with a's. */
static bool spec_allowed_broken(const struct spec_rule *r, const json_t *spec, char *why,
                                size_t n)
{
    const char *a = spec_value_word(spec_field_value(spec, r->a));
    const char *b = spec_value_word(spec_field_value(spec, r->b));
    if (!a || !b)
        return false;
    for (const struct spec_allowed *al = r->allowed; al->a; al++) {
        if (strcmp(al->a, a) != 0)
            continue;
        if (spec_list_index(al->b, b) >= 0)
            return false;
        size_t len = (size_t)snprintf(why, n, "%s \"%s\" has no %s \"%s\"; it has ", r->a, a,
                                      r->b, b);
        for (int i = 0; al->b[i]; i++) {
            spec_append(why, n, &len, i ? ", \"" : "\"");
            spec_append(why, n, &len, al->b[i]);
            spec_append(why, n, &len, "\"");
        }
        if (al->why) {
            spec_append(why, n, &len, " (");
            spec_append(why, n, &len, al->why);
            spec_append(why, n, &len, ")");
        }
        return true;
    }
    return false;
}

/* The first rule of wl that spec breaks (skipping rules with a field in `skip`, may be
 * NULL), with the reason in why; NULL when all hold. */
static const struct spec_rule *spec_rule_broken(const json_t *spec, enum spec_workload wl,
                                                const json_t *skip, char *why, size_t n)
{
    for (size_t i = 0; i < SPEC_COUNT(spec_rules); i++) {
        const struct spec_rule *r = &spec_rules[i];
        if (!spec_rule_in(r, wl) ||
            (skip && (json_object_get(skip, r->a) || json_object_get(skip, r->b))))
            continue;
        if (r->kind == SPEC_RULE_ALLOWED) {
            if (spec_allowed_broken(r, spec, why, n))
                return r;
            continue;
        }
        json_int_t a = json_integer_value(spec_field_value(spec, r->a));
        json_int_t b = json_integer_value(spec_field_value(spec, r->b));
        if (r->kind == SPEC_RULE_LE && a > b) {
            snprintf(why, n,
                     "%s (%" JSON_INTEGER_FORMAT ") must not exceed %s (%" JSON_INTEGER_FORMAT
                     ")",
                     r->a, a, r->b, b);
            return r;
        }
        json_int_t w = json_integer_value(spec_field_value(spec, "world_size"));
        if (r->kind == SPEC_RULE_FILLS && a != 0 && b != 0 && a * b != w) {
            snprintf(why, n,
                     "%s (%" JSON_INTEGER_FORMAT ") times %s (%" JSON_INTEGER_FORMAT
                     ") must be world_size (%" JSON_INTEGER_FORMAT ")",
                     r->a, a, r->b, b, w);
            return r;
        }
        if (r->kind == SPEC_RULE_ONE_OF && (a != 0) == (b != 0)) {
            if (a)
                snprintf(why, n, "%s and %s are mutually exclusive; give only one", r->a, r->b);
            else
                snprintf(why, n, "one of %s and %s must be non-zero", r->a, r->b);
            return r;
        }
    }
    return NULL;
}

/* --- memory estimate ------------------------------------------------------------------ */

#define SPEC_GIB (1024.0 * 1024.0 * 1024.0)

/* The shape and classes of the real datasets (their files decide; dataset.shape and
 * dataset.classes are synthetic's). */
struct spec_data_shape {
    const char *name;
    int c, h, w, classes;
};

static const struct spec_data_shape spec_data_shapes[] = {
    {"mnist", 1, 28, 28, 10},
    {"fashion-mnist", 1, 28, 28, 10},
    {"cifar10", 3, 32, 32, 10},
};

/* The input (c, h, w) and classes a resolved train spec trains on. */
static void spec_train_input(const json_t *spec, const struct model_info *mi, int dims[3],
                             int *classes)
{
    const char *data = json_string_value(spec_field_value(spec, "dataset.name"));
    const json_t *shape = spec_field_value(spec, "dataset.shape");
    dims[0] = mi->c, dims[1] = mi->h, dims[2] = mi->w;
    *classes = (int)json_integer_value(spec_field_value(spec, "dataset.classes"));
    if (mi->embd > 0) { /* a transformer: (1, 1, tokens); bytes or the model's vocabulary */
        int t = (int)json_integer_value(spec_field_value(spec, "seq_len"));
        dims[2] = t > 0 ? t : mi->w;
        *classes = data && strcmp(data, "text") == 0 ? 256 : mi->classes;
        return;
    }
    for (size_t i = 0; data && i < SPEC_COUNT(spec_data_shapes); i++) {
        const struct spec_data_shape *d = &spec_data_shapes[i];
        if (strcmp(d->name, data) == 0) {
            dims[0] = d->c, dims[1] = d->h, dims[2] = d->w;
            *classes = d->classes;
            return;
        }
    }
    if (json_array_size(shape) == 3)
        for (size_t i = 0; i < 3; i++)
            dims[i] = (int)json_integer_value(json_array_get(shape, i));
}

/* Bytes of optimizer state per parameter. */
static double spec_optimizer_bytes(const json_t *spec)
{
    const char *type = json_string_value(spec_field_value(spec, "optimizer.type"));
    if (type && strcmp(type, "sgd") != 0)
        return 8; /* adam, adamw: two moments */
    return json_number_value(spec_field_value(spec, "optimizer.momentum")) > 0 ? 4 : 0;
}

/* Bytes of communication buffers per parameter, by strategy (worker/ddp/ddp.c). */
static double spec_comm_bytes(const json_t *spec)
{
    const char *strategy = json_string_value(spec_field_value(spec, "strategy"));
    const char *compression = json_string_value(spec_field_value(spec, "compression"));
    double b = 0;
    if (strategy && (strcmp(strategy, "horovod") == 0 || strncmp(strategy, "zero", 4) == 0))
        b += 4; /* the fusion buffer / the padded staging copy */
    if (compression && strcmp(compression, "none") != 0)
        b += 2; /* the 16-bit wire copy */
    return b;
}

int spec_memory_estimate(const json_t *resolved, struct spec_memory *out)
{
    memset(out, 0, sizeof *out);
    const char *wl = json_string_value(json_object_get(resolved, "workload"));
    const struct model_info *mi = model_table_find(
        json_string_value(spec_field_value(resolved, "model")));
    if (!wl || strcmp(wl, "train") != 0 || !mi)
        return -1;
    int dims[3], classes;
    spec_train_input(resolved, mi, dims, &classes);
    double batch = (double)json_integer_value(spec_field_value(resolved, "batch_size"));
    double world = (double)json_integer_value(spec_field_value(resolved, "world_size"));
    double prefetch = (double)json_integer_value(spec_field_value(resolved, "prefetch"));
    double workers = (double)json_integer_value(spec_field_value(resolved, "dataset.workers"));
    const char *strategy = json_string_value(spec_field_value(resolved, "strategy"));
    double p = model_table_params(mi, dims[0], dims[1], dims[2], classes);
    bool zero = strategy && strncmp(strategy, "zero", 4) == 0;
    out->params = 4 * p;
    out->grads = 4 * p;
    out->optimizer = spec_optimizer_bytes(resolved) * p / (zero && world > 1 ? world : 1);
    out->comm = spec_comm_bytes(resolved) * p;
    out->activations = 2 * 4 * batch * model_table_activations(mi, dims[0], dims[1], dims[2]);
    /* the loader's ring: max(prefetch, workers) + 1 batches, 1 without a thread
     * (prefetch 0; worker/data/loader.c) */
    double ahead = prefetch > 0 && workers > prefetch ? workers : prefetch;
    out->data = (ahead + 1) * batch * 4 * (double)dims[0] * dims[1] * dims[2];
    out->total = out->params + out->grads + out->optimizer + out->comm + out->activations +
                 out->data;
    return 0;
}

void spec_memory_text(const struct spec_memory *m, char *buf, size_t n)
{
    snprintf(buf, n,
             "about %.4g GiB (parameters %.3g, gradients %.3g, optimizer %.3g, "
             "buffers %.3g, activations %.3g, input %.3g GiB; an estimate)",
             m->total / SPEC_GIB, m->params / SPEC_GIB, m->grads / SPEC_GIB,
             m->optimizer / SPEC_GIB, m->comm / SPEC_GIB, m->activations / SPEC_GIB,
             m->data / SPEC_GIB);
}

/* A train spec whose rank is estimated past SPEC_MAX_RANK_BYTES: true with the field to
 * name (dataset.shape when one sample alone is too much, else batch_size) and why. */
static bool spec_memory_broken(const json_t *spec, enum spec_workload wl, const char **field,
                               char *why, size_t n)
{
    struct spec_memory m;
    if (wl != SPEC_WORKLOAD_TRAIN || spec_memory_estimate(spec, &m) < 0 ||
        m.total <= (double)SPEC_MAX_RANK_BYTES)
        return false;
    double batch = (double)json_integer_value(spec_field_value(spec, "batch_size"));
    double one = m.total - (m.activations + m.data) * (batch - 1) / (batch > 0 ? batch : 1);
    const struct model_info *mi = model_table_find(
        json_string_value(spec_field_value(spec, "model")));
    const char *shape = mi && mi->embd > 0 ? "seq_len" : "dataset.shape";
    *field = one > (double)SPEC_MAX_RANK_BYTES ? shape : "batch_size";
    char text[320];
    spec_memory_text(&m, text, sizeof text);
    snprintf(why, n, "one rank needs %s, more than the %.0f GiB a rank may use; lower %s", text,
             (double)SPEC_MAX_RANK_BYTES / SPEC_GIB,
             strcmp(*field, "batch_size") == 0
                 ? (strcmp(shape, "seq_len") == 0 ? "batch_size or seq_len"
                                                  : "batch_size or dataset.shape")
             : strcmp(shape, "seq_len") == 0 ? "seq_len or the model"
                                             : "dataset.shape or the model");
    return true;
}

/* Which data and devices a model family trains on: transformers take tokens (synthetic
 * ids or a text file's bytes) on the CPU engine, the CNNs images; seq_len belongs to the
 * first. True with the field and the reason when spec breaks that. */
static bool spec_model_broken(const json_t *spec, enum spec_workload wl, const char **field,
                              char *why, size_t n)
{
    const char *model = json_string_value(spec_field_value(spec, "model"));
    const char *data = json_string_value(spec_field_value(spec, "dataset.name"));
    const char *path = json_string_value(spec_field_value(spec, "dataset.path"));
    const char *device = json_string_value(spec_field_value(spec, "device"));
    const char *engine = json_string_value(spec_field_value(spec, "engine"));
    const struct model_info *mi = model_table_find(model);
    int64_t seq = json_integer_value(spec_field_value(spec, "seq_len"));
    bool text = data && strcmp(data, "text") == 0;
    if (wl != SPEC_WORKLOAD_TRAIN || !mi)
        return false;
    *field = "dataset.name";
    if (mi->embd == 0 && text)
        snprintf(why, n,
                 "dataset \"text\" is token data, for the gpt2 models; %s trains on "
                 "images",
                 model);
    else if (mi->embd > 0 && !text && strcmp(data ? data : "", "synthetic") != 0)
        snprintf(why, n, "%s trains on tokens: dataset \"synthetic\" or \"text\", not \"%s\"",
                 model, data ? data : "");
    else if (text && (!path || !*path))
        *field = "dataset.path", snprintf(why, n, "dataset \"text\" needs the file to model");
    else if (mi->embd == 0 && seq != 0)
        *field = "seq_len", snprintf(why, n, "seq_len is for the gpt2 models, not %s", model);
    else if (mi->embd > 0 && seq > mi->w)
        *field = "seq_len", snprintf(why, n, "%s has %d positions; seq_len %lld is longer",
                                     model, mi->w, (long long)seq);
    else if (mi->embd > 0 && device && strcmp(device, "cpu") != 0)
        *field = "model",
        snprintf(why, n, "%s runs on the CPU engine only (no GPU transformer layers yet)",
                 model);
    else if (mi->embd > 0 && engine && strcmp(engine, "ddpbench") != 0)
        *field = "model",
        snprintf(why, n, "%s is ddpbench's own model; engine %s has no adapter for it", model,
                 engine);
    else
        return false;
    return true;
}

/* Pipeline runs: stages divide the world and micro-batches the batch; they run on the C
 * engine's CPU path, one micro-batch size per step (no accumulate on top), and a tied weight
 * split across stages (gpt2's) is summed between its two stages after the exchange, which
 * the ZeRO strategies' sharded gradients do not allow. True with field and reason. */
static bool spec_pipeline_broken(const json_t *spec, enum spec_workload wl, const char **field,
                                 char *why, size_t n)
{
    if (wl != SPEC_WORKLOAD_TRAIN)
        return false;
    int64_t p = json_integer_value(spec_field_value(spec, "pipeline"));
    int64_t m = json_integer_value(spec_field_value(spec, "micro_batches"));
    int64_t world = json_integer_value(spec_field_value(spec, "world_size"));
    int64_t batch = json_integer_value(spec_field_value(spec, "batch_size"));
    int64_t acc = json_integer_value(spec_field_value(spec, "accumulate"));
    const char *device = json_string_value(spec_field_value(spec, "device"));
    const char *engine = json_string_value(spec_field_value(spec, "engine"));
    const char *strategy = json_string_value(spec_field_value(spec, "strategy"));
    const struct model_info *mi = model_table_find(
        json_string_value(spec_field_value(spec, "model")));
    const char *split = json_string_value(spec_field_value(spec, "pipeline_split"));
    int64_t names = split && *split ? 1 : 0;
    for (const char *c = split; c && *c; c++)
        names += *c == ',';
    *field = "micro_batches";
    if (p <= 1 && m > 1)
        snprintf(why, n,
                 "micro_batches is for pipeline runs (pipeline > 1); accumulate "
                 "splits a data-parallel step");
    else if (p <= 1 && names > 0)
        *field = "pipeline_split", snprintf(why, n, "pipeline_split is for pipeline runs");
    else if (p <= 1)
        return false;
    else if (names > 0 && names != p - 1)
        *field = "pipeline_split",
        snprintf(why, n, "%lld stages start at %lld layers after the first; %lld named",
                 (long long)p, (long long)p - 1, (long long)names);
    else if (batch % m != 0)
        snprintf(why, n, "%lld micro-batches do not divide batch_size %lld", (long long)m,
                 (long long)batch);
    else if (world % p != 0)
        *field = "world_size",
        snprintf(why, n,
                 "world_size %lld is not a multiple of pipeline %lld (replicas x "
                 "stages)",
                 (long long)world, (long long)p);
    else if (acc != 1)
        *field = "accumulate",
        snprintf(why, n,
                 "a pipeline step's micro-batches are micro_batches; accumulate must "
                 "be 1");
    else if ((device && strcmp(device, "cpu") != 0) || (engine && strcmp(engine, "ddpbench")))
        *field = "pipeline",
        snprintf(why, n,
                 "pipelines run on ddpbench's own CPU engine (device cpu, engine "
                 "ddpbench)");
    else if (mi && mi->embd > 0 && strategy && strncmp(strategy, "zero", 4) == 0)
        *field = "strategy",
        snprintf(why, n,
                 "%s's tied embedding spans the first and the last stage, whose "
                 "gradients are summed after the exchange; %s shards them",
                 mi->name, strategy);
    else
        return false;
    return true;
}

/* Whether a storage field is given a value other than its default ("dataset.read_mbps" 0). */
static bool spec_storage_set(const json_t *spec, const char *name)
{
    const json_t *v = spec_field_value(spec, name);
    return v && json_number_value(v) != 0;
}

/* The data pipeline's rules: the loader's workers fill batches ahead of the step, so they
 * need a ring to fill (worker/data/loader.h): more than one with prefetch 0 is refused; the
 * read_* figures are custom storage's (a named profile has its own); and the profile caps
 * the reads of the file-backed formats, so an image set read whole at start (native) under
 * another profile than local would measure nothing. True with field and reason. */
static bool spec_loader_broken(const json_t *spec, enum spec_workload wl, const char **field,
                               char *why, size_t n)
{
    if (wl != SPEC_WORKLOAD_TRAIN)
        return false;
    int64_t workers = json_integer_value(spec_field_value(spec, "dataset.workers"));
    int64_t prefetch = json_integer_value(spec_field_value(spec, "prefetch"));
    const char *storage = json_string_value(spec_field_value(spec, "dataset.storage"));
    const char *format = json_string_value(spec_field_value(spec, "dataset.format"));
    const char *data = json_string_value(spec_field_value(spec, "dataset.name"));
    static const char *const reads[] = {"dataset.read_mbps", "dataset.read_latency_ms",
                                        "dataset.read_concurrency"};
    if (workers > 1 && prefetch < 1) {
        *field = "dataset.workers";
        snprintf(why, n,
                 "%lld loader workers fill batches ahead and need prefetch >= 1; prefetch 0 "
                 "loads each batch inside the step",
                 (long long)workers);
        return true;
    }
    for (size_t i = 0; storage && strcmp(storage, "custom") != 0 && i < 3; i++)
        if (spec_storage_set(spec, reads[i])) {
            *field = reads[i];
            snprintf(why, n,
                     "%s is custom storage's figure; dataset.storage \"%s\" has its own",
                     reads[i], storage);
            return true;
        }
    bool image = data && strcmp(data, "synthetic") != 0 && strcmp(data, "text") != 0;
    if (image && storage && strcmp(storage, "local") != 0 && format &&
        strcmp(format, "native") == 0) {
        *field = "dataset.storage";
        snprintf(why, n,
                 "dataset.storage \"%s\" caps the reads made while training; format native "
                 "reads %s whole at start: choose a file-backed dataset.format",
                 storage, data);
        return true;
    }
    return false;
}

/* --- sweeps -------------------------------------------------------------------------- */

/* Called for each point: params and resolved are borrowed for the call. */
typedef int (*spec_point_fn)(void *arg, size_t index, const json_t *params,
                             const json_t *resolved, struct err *e);

/* Advances the per-field value indexes, last field fastest; false after the last point. */
static bool spec_odometer_next(size_t *idx, json_t *const *vals, size_t n)
{
    for (size_t k = n; k-- > 0;) {
        if (++idx[k] < json_array_size(vals[k]))
            return true;
        idx[k] = 0;
    }
    return false;
}

static int spec_walk(const json_t *norm, spec_point_fn fn, void *arg, struct err *e)
{
    const char *keys[SPEC_NFIELDS];
    json_t *vals[SPEC_NFIELDS];
    size_t idx[SPEC_NFIELDS] = {0}, n = 0;
    const char *key;
    json_t *arr, *sweep = json_object_get(norm, "sweep");
    if (sweep) {
        json_object_foreach(sweep, key, arr)
        {
            if (n == SPEC_NFIELDS)
                return err_set(e, ERR_INTERNAL, "sweep", "sweep: more fields than exist");
            keys[n] = key;
            vals[n++] = arr;
        }
    }
    json_t *resolved = json_deep_copy(norm);
    if (!resolved)
        return err_set(e, ERR_NOMEM, "", "spec: out of memory");
    json_object_del(resolved, "sweep");
    int rc = 0;
    size_t i = 0;
    do {
        json_t *params = json_object();
        for (size_t k = 0; params && k < n; k++) {
            json_t *v = json_array_get(vals[k], idx[k]);
            if (json_object_set(params, keys[k], v) < 0 ||
                spec_set_path(resolved, keys[k], json_incref(v)) < 0) {
                json_decref(params);
                params = NULL;
            }
        }
        rc = params ? fn(arg, i++, params, resolved, e)
                    : err_set(e, ERR_NOMEM, "", "spec: out of memory");
        json_decref(params);
    } while (rc == 0 && spec_odometer_next(idx, vals, n));
    json_decref(resolved);
    return rc;
}

/* Number of runs of a normalized spec into *total; an error naming "sweep" over cap. */
static int spec_count_runs(const json_t *norm, size_t cap, size_t *total, struct err *e)
{
    const char *key;
    json_t *arr, *sweep = json_object_get(norm, "sweep");
    size_t p = 1;
    if (sweep) {
        json_object_foreach(sweep, key, arr)
        {
            size_t s = json_array_size(arr);
            if (s && p > SIZE_MAX / s) {
                p = SIZE_MAX;
                break;
            }
            p *= s;
        }
    }
    *total = p;
    if (p <= cap)
        return 0;
    char runs[32] = "more";
    if (p != SIZE_MAX)
        snprintf(runs, sizeof runs, "%zu", p);
    return err_set(e, ERR_INVALID, "sweep",
                   "sweep: expands to %s runs, more than the limit of %zu; sweep fewer "
                   "values or split the experiment",
                   runs, cap);
}

struct spec_check_arg {
    enum spec_workload wl;
    size_t total;
};

static int spec_point_check(void *arg, size_t index, const json_t *params,
                            const json_t *resolved, struct err *e)
{
    const struct spec_check_arg *a = arg;
    char why[512], p[96];
    const char *field;
    if (!spec_rule_broken(resolved, a->wl, NULL, why, sizeof why) &&
        !spec_model_broken(resolved, a->wl, &field, why, sizeof why) &&
        !spec_pipeline_broken(resolved, a->wl, &field, why, sizeof why) &&
        !spec_loader_broken(resolved, a->wl, &field, why, sizeof why) &&
        !spec_memory_broken(resolved, a->wl, &field, why, sizeof why))
        return 0;
    spec_value_text(params, p, sizeof p);
    return err_set(e, ERR_INVALID, "sweep", "sweep point %zu of %zu %s: %s", index + 1,
                   a->total, p, why);
}

static int spec_check_rules(const json_t *norm, enum spec_workload wl, struct err *e)
{
    char why[512];
    const json_t *sweep = json_object_get(norm, "sweep");
    const struct spec_rule *r = spec_rule_broken(norm, wl, sweep, why, sizeof why);
    const char *field;
    if (r)
        return err_set(e, ERR_INVALID, r->b, "%s: %s", r->b, why);
    if (!sweep && (spec_model_broken(norm, wl, &field, why, sizeof why) ||
                   spec_pipeline_broken(norm, wl, &field, why, sizeof why) ||
                   spec_loader_broken(norm, wl, &field, why, sizeof why)))
        return err_set(e, ERR_INVALID, field, "%s: %s", field, why);
    if (!sweep) /* with a sweep, each point's estimate is checked below instead */
        return spec_memory_broken(norm, wl, &field, why, sizeof why)
                   ? err_set(e, ERR_INVALID, field, "%s: %s", field, why)
                   : 0;
    struct spec_check_arg a = {.wl = wl};
    if (spec_count_runs(norm, SPEC_MAX_RUNS, &a.total, e) < 0)
        return -1;
    return spec_walk(norm, spec_point_check, &a, e);
}

json_t *spec_normalize(const json_t *in, struct err *e)
{
    enum spec_workload wl;
    if (!json_is_object(in)) {
        char got[64];
        spec_value_text(in, got, sizeof got);
        err_set(e, ERR_INVALID, "", "spec: must be a JSON object, got %s", got);
        return NULL;
    }
    if (spec_workload_of(in, &wl, e) < 0 || spec_check_keys(in, wl, e) < 0)
        return NULL;
    json_t *sweep = NULL;
    const json_t *sweep_in = json_object_get(in, "sweep");
    if (sweep_in && !(sweep = spec_sweep_normalize(sweep_in, wl, e)))
        return NULL;
    json_t *out = spec_fill(in, sweep, wl, e);
    if (out && sweep && json_object_set(out, "sweep", sweep) < 0) {
        err_set(e, ERR_NOMEM, "sweep", "sweep: out of memory");
        json_decref(out);
        out = NULL;
    }
    json_decref(sweep);
    if (out && spec_check_rules(out, wl, e) < 0) {
        json_decref(out);
        out = NULL;
    }
    return out;
}

json_t *spec_parse(const char *text, size_t len, struct err *e)
{
    if (len > SPEC_MAX_BODY) {
        err_set(e, ERR_TOO_LARGE, "", "spec: %zu bytes, more than the limit of %u", len,
                SPEC_MAX_BODY);
        return NULL;
    }
    json_error_t je;
    json_t *in = json_loadb(text ? text : "", text ? len : 0, JSON_REJECT_DUPLICATES, &je);
    if (!in) {
        err_set(e, ERR_INVALID, "", "spec: invalid JSON at line %d, column %d: %s", je.line,
                je.column, je.text);
        return NULL;
    }
    json_t *out = spec_normalize(in, e);
    json_decref(in);
    return out;
}

static int spec_point_collect(void *arg, size_t index, const json_t *params,
                              const json_t *resolved, struct err *e)
{
    json_t *runs = arg, *run = json_object();
    if (run && json_object_set(run, "params", (json_t *)params) == 0 &&
        json_object_set_new(run, "spec", json_deep_copy(resolved)) == 0 &&
        json_array_append_new(runs, run) == 0)
        return 0;
    json_decref(run);
    return err_set(e, ERR_NOMEM, "", "spec: out of memory expanding point %zu", index + 1);
}

json_t *spec_expand(const json_t *normalized, size_t max_runs, struct err *e)
{
    /* Normalizing again costs little and makes a stored spec as safe as a submitted one. */
    json_t *norm = spec_normalize(normalized, e), *runs = NULL;
    size_t total;
    if (norm && spec_count_runs(norm, max_runs, &total, e) == 0) {
        runs = json_array();
        if (!runs)
            err_set(e, ERR_NOMEM, "", "spec: out of memory");
        else if (spec_walk(norm, spec_point_collect, runs, e) < 0) {
            json_decref(runs);
            runs = NULL;
        }
    }
    json_decref(norm);
    return runs;
}

/* --- struct spec --------------------------------------------------------------------- */

static int spec_store(const struct spec_field *f, const json_t *v, struct spec *s,
                      struct err *e)
{
    char *dst = (char *)s + f->off;
    if (f->flags & SPEC_F_WORKLOAD) {
        enum spec_workload wl = (enum spec_workload)spec_choice_index(f, json_string_value(v));
        if (f->size != sizeof wl)
            goto bad;
        memcpy(dst, &wl, sizeof wl);
        return 0;
    }
    switch (f->type) {
    case SPEC_T_STRING:
    case SPEC_T_ENUM: {
        size_t n = json_string_length(v);
        if (n >= f->size)
            goto bad;
        memcpy(dst, json_string_value(v), n + 1);
        return 0;
    }
    case SPEC_T_INT:
    case SPEC_T_SIZE: {
        int64_t n64 = json_integer_value(v);
        int n32 = (int)n64;
        if (f->size == sizeof n64)
            memcpy(dst, &n64, sizeof n64);
        else if (f->size == sizeof n32 && f->max <= INT32_MAX)
            memcpy(dst, &n32, sizeof n32);
        else
            goto bad;
        return 0;
    }
    case SPEC_T_BOOL: {
        bool b = json_is_true(v);
        if (f->size != sizeof b)
            goto bad;
        memcpy(dst, &b, sizeof b);
        return 0;
    }
    case SPEC_T_NUMBER: {
        double d = json_number_value(v);
        if (f->size != sizeof d)
            goto bad;
        memcpy(dst, &d, sizeof d);
        return 0;
    }
    case SPEC_T_SHAPE: {
        struct spec_shape sh = {.n = (int)json_array_size(v)};
        if (f->size != sizeof sh || sh.n > 3)
            goto bad;
        for (int i = 0; i < sh.n; i++)
            sh.dims[i] = (int)json_integer_value(json_array_get(v, (size_t)i));
        memcpy(dst, &sh, sizeof sh);
        return 0;
    }
    case SPEC_T_SIZE_LIST: {
        struct spec_sizes sz = {.n = (int)json_array_size(v)};
        if (f->size != sizeof sz || sz.n > SPEC_MAX_SIZES)
            goto bad;
        for (int i = 0; i < sz.n; i++)
            sz.bytes[i] = json_integer_value(json_array_get(v, (size_t)i));
        memcpy(dst, &sz, sizeof sz);
        return 0;
    }
    }
bad:
    return err_set(e, ERR_INTERNAL, f->name, "%s: does not fit its struct spec member",
                   f->name);
}

/* threads is validated (1 to 256) for the workloads that have it, absent or 0 for the
 * others, which take one slot a rank */
static int spec_slots_of_threads(json_int_t t)
{
    return t >= 1 && t <= 256 ? (int)t : 1;
}

int spec_slots_per_rank(const json_t *resolved)
{
    return spec_slots_of_threads(json_integer_value(json_object_get(resolved, "threads")));
}

int spec_rank_slots(const struct spec *s)
{
    return spec_slots_of_threads(s->train.threads);
}

int spec_from_json(const json_t *resolved, struct spec *out, struct err *e)
{
    if (json_is_object(resolved) && json_object_get(resolved, "sweep"))
        return err_set(e, ERR_INVALID, "sweep",
                       "sweep: a run's spec has no sweep; expand it first (spec_expand)");
    json_t *norm = spec_normalize(resolved, e);
    if (!norm)
        return -1;
    enum spec_workload wl;
    int rc = spec_workload_of(norm, &wl, e);
    memset(out, 0, sizeof *out);
    for (size_t i = 0; rc == 0 && i < SPEC_NFIELDS; i++) {
        const struct spec_field *f = &spec_fields[i];
        if (spec_field_in(f, wl) && f->size > 0)
            rc = spec_store(f, spec_field_value(norm, f->name), out, e);
    }
    json_decref(norm);
    return rc;
}

size_t spec_collective_sizes(const struct spec_collective *c, int64_t *sizes, size_t max)
{
    size_t n = 0;
    if (c->sizes.n > 0) {
        for (int i = 0; i < c->sizes.n && n < max; i++)
            sizes[n++] = c->sizes.bytes[i];
        return n;
    }
    if (c->min_bytes < 1 || (c->factor < 2 && c->step < 1))
        return 0; /* not a valid spec: no sizes rather than an endless loop */
    for (int64_t s = c->min_bytes; s <= c->max_bytes && n < max;
         s = c->factor >= 2 ? s * c->factor : s + c->step)
        sizes[n++] = s;
    return n;
}

/* --- JSON Schema --------------------------------------------------------------------- */
/* Patterns are written with plain groups and [0-9] (no \d, no (?:)), so one text reads
 * alike in ECMA 262 (JSON Schema), Python, Rust and POSIX ERE, which the unit test checks
 * them with (regcomp) against what validation accepts. */

#define SPEC_PATTERN_MAX 2048 /* a size field's pattern is about 600 characters */
/* The unit suffixes spec_size_from_text accepts, after the digits. */
#define SPEC_RE_UNIT "([Ii]?[Bb])?"
#define SPEC_RE_ANY_UNIT "([KkMmGgTt]" SPEC_RE_UNIT "|[Bb])?"

static void spec_append_n(char *out, size_t n, size_t *len, const char *s, size_t k)
{
    char part[24];
    snprintf(part, sizeof part, "%.*s", (int)(k < sizeof part ? k : sizeof part - 1), s);
    spec_append(out, n, len, part);
}

/* Appends a regular expression matching exactly the n-digit strings from lo to hi (both n
 * digits, lo <= hi): their common prefix, then the first differing digit split into
 * lo's digit with the rest of its range, whole digits between, and hi's digit with the
 * rest of its range. */
static void spec_re_digits(const char *lo, const char *hi, size_t n, char *out, size_t cap,
                           size_t *len)
{
    size_t k = 0;
    while (k < n && lo[k] == hi[k])
        k++;
    spec_append_n(out, cap, len, lo, k);
    if (k == n)
        return;
    lo += k, hi += k, n -= k;
    char zeros[24], nines[24], part[40];
    memset(zeros, '0', n - 1), zeros[n - 1] = '\0';
    memset(nines, '9', n - 1), nines[n - 1] = '\0';
    bool lo_whole = strcmp(lo + 1, zeros) == 0, hi_whole = strcmp(hi + 1, nines) == 0;
    char first = (char)(lo[0] + !lo_whole), last = (char)(hi[0] - !hi_whole);
    const char *sep = "";
    spec_append(out, cap, len, "(");
    if (!lo_whole) {
        spec_append_n(out, cap, len, lo, 1);
        spec_re_digits(lo + 1, nines, n - 1, out, cap, len);
        sep = "|";
    }
    if (first <= last) {
        snprintf(part, sizeof part, n > 1 ? "%s[%c-%c][0-9]{%zu}" : "%s[%c-%c]", sep, first,
                 last, n - 1);
        spec_append(out, cap, len, part);
        sep = "|";
    }
    if (!hi_whole) {
        spec_append(out, cap, len, sep);
        spec_append_n(out, cap, len, hi, 1);
        spec_re_digits(zeros, hi + 1, n - 1, out, cap, len);
    }
    spec_append(out, cap, len, ")");
}

/* Appends a group matching exactly the decimal numbers from lo to hi (0 <= lo <= hi),
 * without leading zeros: one alternative per digit count. */
static void spec_re_range(int64_t lo, int64_t hi, char *out, size_t cap, size_t *len)
{
    char a[24], b[24];
    int64_t low = 1; /* the smallest number of d digits, d > 1 */
    spec_append(out, cap, len, "(");
    for (size_t d = 1; low <= hi; d++, low *= 10) {
        int64_t from = d == 1 ? lo : (lo > low ? lo : low);
        int64_t to = low <= INT64_MAX / 10 && low * 10 - 1 < hi ? low * 10 - 1 : hi;
        if (from > to)
            continue;
        snprintf(a, sizeof a, "%" PRId64, from);
        snprintf(b, sizeof b, "%" PRId64, to);
        spec_append(out, cap, len, from == lo ? "" : "|");
        spec_re_digits(a, b, d, out, cap, len);
    }
    spec_append(out, cap, len, ")");
}

/* The pattern of a SIZE field's string form: exactly the strings spec_parse_size reads as
 * a size in the field's range (or as 0 where 0 means "not used" and zero is true),
 * leading zeros and unit spellings included: per unit, the range of counts it allows. */
static void spec_schema_size_pattern(const struct spec_field *f, bool zero, char *out,
                                     size_t cap)
{
    static const char units[] = "KMGT";
    size_t len = 0;
    const char *sep = "";
    spec_append(out, cap, &len, "^0*(");
    for (int u = 0; u <= 4; u++) {
        int shift = 10 * u;
        int64_t lo = (f->min + (INT64_C(1) << shift) - 1) >> shift, hi = f->max >> shift;
        char suffix[24];
        if (lo > hi)
            continue;
        spec_append(out, cap, &len, sep);
        spec_re_range(lo, hi, out, cap, &len);
        if (u == 0)
            snprintf(suffix, sizeof suffix, "[Bb]?");
        else
            snprintf(suffix, sizeof suffix, "[%c%c]%s", units[u - 1], units[u - 1] | 0x20,
                     SPEC_RE_UNIT);
        spec_append(out, cap, &len, suffix);
        sep = "|";
    }
    if (zero) {
        spec_append(out, cap, &len, sep);
        spec_append(out, cap, &len, "0" SPEC_RE_ANY_UNIT);
    }
    spec_append(out, cap, &len, ")$");
}

static json_t *spec_schema_range(int64_t min, int64_t max)
{
    return json_pack("{s:s, s:I, s:I}", "type", "integer", "minimum", (json_int_t)min,
                     "maximum", (json_int_t)max);
}

/* The integer 0 ("not used"): const alone would take 0.0, which validation refuses. */
static json_t *spec_schema_zero(void)
{
    return json_pack("{s:s, s:i}", "type", "integer", "const", 0);
}

/* A size as an integer or a string, in f's range (or 0 when zero is true). */
static void spec_schema_size_forms(const struct spec_field *f, bool zero, json_t *alts)
{
    char pattern[SPEC_PATTERN_MAX];
    spec_schema_size_pattern(f, zero, pattern, sizeof pattern);
    if (zero)
        json_array_append_new(alts, spec_schema_zero());
    json_array_append_new(alts, spec_schema_range(f->min, f->max));
    json_array_append_new(alts, json_pack("{s:s, s:s}", "type", "string", "pattern", pattern));
}

/* Owned schema of one value of f (no description, no default). zero: 0 ("not used") is a
 * value too; false for a swept one-of field, whose partner is then 0, so a swept 0 leaves
 * both unused and is refused. */
static json_t *spec_schema_value(const struct spec_field *f, bool zero)
{
    json_t *s = json_object(), *alts = json_array();
    switch (f->type) {
    case SPEC_T_STRING:
        json_object_set_new(s, "type", json_string("string"));
        json_object_set_new(s, "minLength", json_integer(f->min));
        json_object_set_new(s, "maxLength", json_integer(f->max));
        /* printable ASCII, or anything but NUL (a C string ends there) */
        json_object_set_new(
            s, "pattern",
            json_string(f->flags & SPEC_F_PRINTABLE ? "^[ -~]*$" : "^[^\\x00]*$"));
        break;
    case SPEC_T_ENUM: {
        json_t *choices = json_array();
        for (int i = 0; spec_choice(f, i); i++)
            json_array_append_new(choices, json_string(spec_choice(f, i)));
        json_object_set_new(s, "type", json_string("string"));
        json_object_set_new(s, "enum", choices);
        break;
    }
    case SPEC_T_INT:
        if (zero)
            json_array_append_new(alts, spec_schema_zero());
        json_array_append_new(alts, spec_schema_range(f->min, f->max));
        break;
    case SPEC_T_SIZE: spec_schema_size_forms(f, zero, alts); break;
    case SPEC_T_BOOL: json_object_set_new(s, "type", json_string("boolean")); break;
    case SPEC_T_NUMBER:
        json_object_set_new(s, "type", json_string("number"));
        json_object_set_new(s, f->dmin_open ? "exclusiveMinimum" : "minimum",
                            json_real(f->dmin));
        json_object_set_new(s, "maximum", json_real(f->dmax));
        break;
    case SPEC_T_SHAPE:
        json_object_set_new(s, "type", json_string("array"));
        json_object_set_new(s, "items", spec_schema_range(f->min, f->max));
        json_array_append_new(alts, json_pack("{s:i}", "maxItems", 0));
        json_array_append_new(alts, json_pack("{s:i, s:i}", "minItems", 3, "maxItems", 3));
        break;
    case SPEC_T_SIZE_LIST: {
        json_t *item = json_array();
        spec_schema_size_forms(f, false, item);
        json_object_set_new(s, "type", json_string("array"));
        json_object_set_new(s, "maxItems", json_integer(SPEC_MAX_SIZES));
        json_object_set_new(s, "uniqueItems", json_true());
        json_object_set_new(s, "items", json_pack("{s:o}", "anyOf", item));
        break;
    }
    }
    if (json_array_size(alts) == 1)
        json_object_update(s, json_array_get(alts, 0));
    else if (json_array_size(alts) > 1)
        json_object_set(s, "anyOf", alts);
    json_decref(alts);
    return s;
}

static json_t *spec_schema_field(const struct spec_field *f)
{
    json_t *s = json_pack("{s:s}", "description", f->desc);
    json_t *v = spec_schema_value(f, f->flags & SPEC_F_ZERO_UNSET);
    json_object_update(s, v);
    json_decref(v);
    if (f->def)
        json_object_set_new(s, "default", json_loads(f->def, JSON_DECODE_ANY, NULL));
    return s;
}

/* The group of a nested field name ("dataset" of "dataset.name") into out (32 bytes). */
static const char *spec_schema_group_name(const char *name, const char *dot, char *out)
{
    snprintf(out, 32, "%.*s", (int)(dot - name), name);
    return out;
}

/* The properties object of group in props, made (an object schema) when missing.
 * Borrowed. */
static json_t *spec_schema_group(json_t *props, const char *group)
{
    json_t *g = json_object_get(props, group);
    if (!g) {
        g = json_pack("{s:s, s:s, s:{}, s:b}", "description", "", "type", "object",
                      "properties", "additionalProperties", 0);
        char desc[96];
        snprintf(desc, sizeof desc, "The %s.* fields, as one object.", group);
        json_object_set_new(g, "description", json_string(desc));
        json_object_set_new(props, group, g);
    }
    return json_object_get(g, "properties");
}

/* Fields that exist only for some workloads are forbidden for the others. */
static json_t *spec_schema_workload_rules(void)
{
    json_t *all = json_array();
    for (int w = 0; spec_workload_names[w]; w++) {
        json_t *top = json_object(), *swept = json_object();
        char group[32];
        for (size_t i = 0; i < SPEC_NFIELDS; i++) {
            if (spec_field_in(&spec_fields[i], (enum spec_workload)w))
                continue;
            /* a nested field forbids its whole group: groups belong to one workload */
            const char *name = spec_fields[i].name, *dot = strchr(name, '.');
            if (dot)
                json_object_set_new(top, spec_schema_group_name(name, dot, group),
                                    json_false());
            else
                json_object_set_new(top, name, json_false());
            json_object_set_new(swept, spec_fields[i].name, json_false());
        }
        if (json_object_size(top) == 0) {
            json_decref(top);
            json_decref(swept);
            continue;
        }
        json_object_set_new(top, "sweep", json_pack("{s:o}", "properties", swept));
        json_array_append_new(all, json_pack("{s:{s:{s:{s:s}}}, s:{s:o}}", "if", "properties",
                                             "workload", "const", spec_workload_names[w],
                                             "then", "properties", top));
    }
    return all;
}

/* {properties: {name: S}} with name's group when it has one ("dataset.shape" is "shape"
 * inside "dataset"), and name (and its group) required when required is true. Owned; S is
 * stolen. */
static json_t *spec_schema_at(const char *name, json_t *value, bool required)
{
    const char *dot = strchr(name, '.');
    json_t *s = json_pack("{s:{s:o}}", "properties", dot ? dot + 1 : name, value);
    if (required)
        json_object_set_new(s, "required", json_pack("[s]", dot ? dot + 1 : name));
    if (dot) {
        char group[32];
        s = json_pack("{s:{s:o}}", "properties", spec_schema_group_name(name, dot, group), s);
        if (required)
            json_object_set_new(s, "required", json_pack("[s]", group));
    }
    return s;
}

/* "sweep" lists name (S: the schema of its list, NULL: any) or, when present is false,
 * does not. Owned; S is stolen. */
static json_t *spec_schema_swept(const char *name, json_t *list, bool present)
{
    json_t *sweep = json_pack("{s:{s:o}}", "properties", name,
                              present ? (list ? list : json_object()) : json_false());
    if (present)
        json_object_set_new(sweep, "required", json_pack("[s]", name));
    return json_pack("{s:{s:o}, s:[s]}", "properties", "sweep", sweep, "required", "sweep");
}

/* The alternatives (an owned array, for anyOf) of "the value of b that runs is one of
 * `values` (stolen)": b's sweep lists only those, or b is not swept and its value (given,
 * or the default when that is one) is. */
static json_t *spec_schema_runs_with(const struct spec_field *b, json_t *values)
{
    json_t *def = json_loads(b->def ? b->def : "null", JSON_DECODE_ANY, NULL), *v;
    bool default_ok = false;
    size_t i;
    json_array_foreach(values, i, v) default_ok |= json_equal(v, def);
    json_decref(def);
    json_t *top = spec_schema_at(b->name, json_pack("{s:O}", "enum", values), !default_ok);
    json_t *unswept = spec_schema_swept(b->name, NULL, false);
    json_object_update(json_object_get(top, "properties"),
                       json_object_get(unswept, "properties"));
    json_decref(unswept);
    json_t *swept = spec_schema_swept(b->name, json_pack("{s:{s:o}}", "items", "enum", values),
                                      true);
    return json_pack("[o, o]", swept, top);
}

/* A rule's values as JSON: strings, or booleans for a BOOL field. Owned. */
static json_t *spec_schema_words(const struct spec_field *f, const char *const *words)
{
    json_t *out = json_array();
    for (int k = 0; words[k]; k++)
        json_array_append_new(out, f->type == SPEC_T_BOOL
                                       ? json_boolean(!strcmp(words[k], "true"))
                                       : json_string(words[k]));
    return out;
}

/* SPEC_RULE_ALLOWED rules: for each value of a, two if/then clauses. When a has that
 * value at the top (or by default) and is not swept, the b that runs is allowed; when a's
 * sweep lists it, likewise (the cross product pairs it with every b that runs). Each rule's
 * b must be a field of every workload the rule is of, or have an allowed default
 * (test_spec checks), so a clause never requires b where it cannot be. */
static void spec_schema_allowed_rules(json_t *all)
{
    for (size_t i = 0; i < SPEC_COUNT(spec_rules); i++) {
        const struct spec_rule *r = &spec_rules[i];
        const struct spec_field *fa = spec_field_find(r->a), *fb = spec_field_find(r->b);
        for (const struct spec_allowed *al = r->kind == SPEC_RULE_ALLOWED ? r->allowed : NULL;
             al && al->a; al++) {
            json_t *va = spec_schema_words(fa, (const char *const[]){al->a, NULL});
            json_t *def = json_loads(fa->def ? fa->def : "null", JSON_DECODE_ANY, NULL);
            bool is_default = json_equal(json_array_get(va, 0), def);
            json_decref(def);
            json_t *values = spec_schema_words(fb, al->b);
            json_t *top_if = spec_schema_at(
                r->a, json_pack("{s:O}", "const", json_array_get(va, 0)), !is_default);
            json_t *top_then = spec_schema_runs_with(fb, json_incref(values));
            json_array_insert_new(top_then, 0, spec_schema_swept(r->a, NULL, true));
            json_t *contains = json_pack("{s:{s:{s:{s:O}}}}", "not", "items", "not", "const",
                                         json_array_get(va, 0));
            json_array_append_new(
                all, json_pack("{s:o, s:{s:o}}", "if", top_if, "then", "anyOf", top_then));
            json_array_append_new(
                all, json_pack("{s:o, s:{s:o}}", "if", spec_schema_swept(r->a, contains, true),
                               "then", "anyOf", spec_schema_runs_with(fb, values)));
            json_decref(va);
        }
    }
}

/* The schema's one-of value "not given": absent or 0 at the top, and not swept. */
static json_t *spec_schema_not_given(const struct spec_field *f)
{
    json_t *zero = spec_schema_zero();
    if (f->type == SPEC_T_SIZE)
        zero = json_pack("{s:[o, {s:s, s:s}]}", "anyOf", zero, "type", "string", "pattern",
                         "^0+" SPEC_RE_ANY_UNIT "$");
    json_t *s = spec_schema_at(f->name, zero, false);
    json_t *unswept = spec_schema_swept(f->name, NULL, false);
    json_object_update(json_object_get(s, "properties"),
                       json_object_get(unswept, "properties"));
    json_decref(unswept);
    return s;
}

/* SPEC_RULE_ONE_OF: a and b are not both given (set non-zero or swept). A swept value
 * of either is non-zero (spec_schema_value), so the one that runs is never 0. */
static void spec_schema_one_of_rules(json_t *all)
{
    for (size_t i = 0; i < SPEC_COUNT(spec_rules); i++) {
        const struct spec_rule *r = &spec_rules[i];
        if (r->kind != SPEC_RULE_ONE_OF)
            continue;
        char desc[128];
        snprintf(desc, sizeof desc, "%s and %s: set or sweep at most one", r->a, r->b);
        json_array_append_new(all, json_pack("{s:s, s:[o, o]}", "description", desc, "anyOf",
                                             spec_schema_not_given(spec_field_find(r->a)),
                                             spec_schema_not_given(spec_field_find(r->b))));
    }
}

/* The schema's own description: what it is, and the rules of the validator that JSON
 * Schema cannot state (relations between two values, counts over the cross product, the
 * memory estimate). tests/integration/schemathesis_hooks.py filters exactly these, so a
 * new rule here is a new filter there. */
static const char spec_schema_description_format[] =
    "An experiment for ddpbenchd (POST /v1/experiments). Generated from the field table in "
    "common/spec.c; do not edit by hand. The server also applies rules this schema cannot "
    "state, each refused with 400 naming the field: (1) min_bytes at most max_bytes, at the "
    "top and at every sweep point; (2) the sizes of \"sizes\" and the values of each sweep "
    "list distinct once their units are read (\"4K\" and 4096 are the same size); (3) at "
    "most %d runs in the sweep's cross product; (4) a train run's memory estimate for one "
    "rank (parameters, gradients, optimizer state, buffers, activations and input batches) "
    "at most %.0f TiB at every point; (5) nodes and ranks_per_node each at most world_size, "
    "and, when both are non-zero, nodes times ranks_per_node equal to world_size, at every "
    "point; (6) a model's data and engine, at every point: a gpt2 model trains on dataset "
    "synthetic or text, on device cpu with engine ddpbench, with seq_len at most its "
    "positions; any other model trains on images (not text) with seq_len 0; dataset text "
    "names its file in dataset.path; (7) pipelines, at every point: micro_batches above 1 "
    "and a non-empty pipeline_split only with pipeline above 1; then pipeline divides "
    "world_size, micro_batches divides batch_size, pipeline_split names pipeline - 1 layers "
    "(when given), accumulate is 1, device cpu and engine ddpbench, and a gpt2 model's "
    "strategy is not zero1 or zero2; (8) loader workers, at every point: dataset.workers "
    "above 1 only with prefetch at least 1; dataset.read_mbps, dataset.read_latency_ms and "
    "dataset.read_concurrency non-zero only with dataset.storage custom; dataset.storage "
    "other than local on mnist, fashion-mnist or cifar10 only with a dataset.format other "
    "than native. A run must also fit this node or the cluster's nodes "
    "(CPU slots, GPUs, and for device cpu its memory), else 409.";

json_t *spec_schema_json(void)
{
    json_t *props = json_object(), *swept = json_object(), *required = json_array();
    char group[32];
    for (size_t i = 0; i < SPEC_NFIELDS; i++) {
        const struct spec_field *f = &spec_fields[i];
        const char *dot = strchr(f->name, '.');
        if (dot)
            json_object_set_new(
                spec_schema_group(props, spec_schema_group_name(f->name, dot, group)), dot + 1,
                spec_schema_field(f));
        else
            json_object_set_new(props, f->name, spec_schema_field(f));
        if (f->flags & SPEC_F_REQUIRED)
            json_array_append_new(required, json_string(f->name));
        if (f->flags & SPEC_F_SWEEP)
            json_object_set_new(swept, f->name,
                                json_pack("{s:s, s:i, s:i, s:b, s:o}", "type", "array",
                                          "minItems", 1, "maxItems", SPEC_MAX_SWEEP_VALUES,
                                          "uniqueItems", 1, "items",
                                          spec_schema_value(f, false)));
    }
    char sweep_desc[512];
    snprintf(sweep_desc, sizeof sweep_desc,
             "Fields to sweep, each with a list of 1 to %d distinct values: the experiment "
             "runs every combination (the cross product, last field varying fastest). The "
             "product of the lists' lengths may be at most %d runs; a larger sweep is refused "
             "(400, field \"sweep\"): sweep fewer values or split the experiment.",
             SPEC_MAX_SWEEP_VALUES, SPEC_MAX_RUNS);
    json_object_set_new(props, "sweep",
                        json_pack("{s:s, s:s, s:o, s:b}", "description", sweep_desc, "type",
                                  "object", "properties", swept, "additionalProperties", 0));
    char description[sizeof spec_schema_description_format + 32];
    snprintf(description, sizeof description, spec_schema_description_format, SPEC_MAX_RUNS,
             (double)SPEC_MAX_RANK_BYTES / (1024.0 * SPEC_GIB));
    json_t *schema = json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:b}", "$schema",
                               "https://json-schema.org/draft/2020-12/schema", "title",
                               "ddpbench experiment spec", "description", description, "type",
                               "object", "required", required, "properties", props,
                               "additionalProperties", 0);
    json_t *rules = spec_schema_workload_rules();
    spec_schema_one_of_rules(rules);
    spec_schema_allowed_rules(rules);
    if (schema && json_array_size(rules) > 0)
        json_object_set(schema, "allOf", rules);
    json_decref(rules);
    return schema;
}
