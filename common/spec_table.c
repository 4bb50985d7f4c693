/* spec_table: the spec module's tables and their lookups: every field of a spec
 * (spec_fields[]), every rule between two fields (spec_rules[]) with the value lists its
 * ALLOWED rows take, the choices of the enum fields that are not the vocabulary's
 * (common/vocab.h) or the model table's (common/model_table.h); the lookups in them and the
 * text helpers every file of the module uses (declared in common/spec_table.h, internal to
 * the module), and spec_field_value of spec.h.
 *
 * Decision: the tables sit at the bottom of the module and call none of its other files,
 * so spec_parse.c (validation, defaults, spec_from_json), the checks, sweeps, the memory
 * estimate and the schema generator all read one copy without calling each other in a
 * loop; a field is a row here and nothing else. */
#include "common/spec_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/model_table.h"
#include "common/vocab.h"

#define SPEC_AT(m) .off = offsetof(struct spec, m), .size = sizeof(((struct spec *)0)->m)
/* mpi_mca's member: the count, then the entries right after it (SPEC_T_MAP) */
/* faults' members: n_faults and faults[], which spec_faults_store fills by name */
#define SPEC_FAULTS_SIZE (sizeof(int) + sizeof(((struct spec *)0)->faults))
#define SPEC_MAP_SIZE (sizeof(int) + sizeof(((struct spec *)0)->mpi_params))
_Static_assert(offsetof(struct spec, mpi_params) ==
                   offsetof(struct spec, n_mpi_params) + sizeof(int),
               "struct spec: mpi_params must follow n_mpi_params (SPEC_T_MAP)");

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
 * loss scaling); the CPU worker trains fp32 or bf16 (oneDNN) and refuses fp16 naming the
 * field */
static const char *const spec_precisions[] = {"fp32", "fp16", "bf16", NULL};
static const char *const spec_compressions[] = {"none", "fp16", "bf16", NULL};
/* storage_layer in_process is the C loader's own emulation (worker/data/storage.h) */
static const char *const spec_layer_not_in_process[] = {"auto", "mount", NULL};
#define SPEC_IN_PROCESS_WHY                                                                    \
    "in_process is ddpbench's C loader's; this engine reads through the mount"
static const struct spec_allowed spec_engine_storage_layers[] = {
    {"pytorch", spec_layer_not_in_process, SPEC_IN_PROCESS_WHY},
    {"tensorflow", spec_layer_not_in_process, SPEC_IN_PROCESS_WHY},
    {"horovod", spec_layer_not_in_process, SPEC_IN_PROCESS_WHY},
    {"deepspeed", spec_layer_not_in_process, SPEC_IN_PROCESS_WHY},
    {"lightning", spec_layer_not_in_process, SPEC_IN_PROCESS_WHY},
    {"script", spec_layer_not_in_process, SPEC_IN_PROCESS_WHY},
    {NULL, NULL, NULL},
};
/* "framework" (issue 33): an engine's front end; only horovod has more than one */
static const char *const spec_frameworks[] = {"auto", "torch", "keras", NULL};
static const char *const spec_datasets[] = {"synthetic", "mnist", "fashion-mnist",
                                            "cifar10",   "text",  NULL};
static const char *const spec_optimizers[] = {"sgd", "adam", "adamw", NULL};
static const char *const spec_storage_layers[] = {"auto", "mount", "in_process", NULL};
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
             "\"cpu\"); \"mpi\" the MPI library's own collectives (device \"cpu\"; the "
             "implementation is field mpi, and the ranks are started by launcher mpirun or "
             "srun); \"nccl\" is NVIDIA's NCCL on GPU buffers (device \"cuda\")."},
    {.name = "launcher", .type = SPEC_T_ENUM, .workloads = SPEC_WL_ANY, .flags = SPEC_F_SWEEP,
     .choice_at = vocab_launcher_at, .def = "\"ddpbench\"", SPEC_AT(launcher),
     .desc = "Who starts the ranks: \"ddpbench\" (the daemon and its followers fork each "
             "rank), \"mpirun\" (the MPI implementation's own launcher, field mpi; required "
             "by backend mpi unless under srun) or \"srun\" (Slurm places, binds and starts "
             "them; the daemon must run inside a Slurm allocation). Every launcher reports "
             "the same figures: ranks it did not fork connect back to the daemon."},
    {.name = "mpi", .type = SPEC_T_ENUM, .workloads = SPEC_WL_ANY, .flags = SPEC_F_SWEEP,
     .choice_at = vocab_mpi_at, .def = "\"openmpi\"", SPEC_AT(mpi),
     .desc = "The MPI implementation backend \"mpi\" and launcher \"mpirun\" use: "
             "\"openmpi\" (Open MPI 4.1) or \"mpich\" (MPICH 4.0, whose ABI Intel MPI "
             "shares). GET /v1/engines says which this node has; an absent one is refused "
             "at submit (409)."},
    {.name = "mpi_mca", .type = SPEC_T_MAP, .workloads = SPEC_WL_ANY, .def = "{}",
     .off = offsetof(struct spec, n_mpi_params), .size = SPEC_MAP_SIZE,
     .desc = "MPI transport settings, stored with the run: an object of at most 16 "
             "entries, each an OpenMPI MCA parameter (\"btl\": \"self,tcp\" compares TCP "
             "against shared memory; set as OMPI_MCA_<name>) or an MPICH control variable "
             "(\"MPIR_CVAR_CH4_NETMOD\": \"ofi\"), with a value of letters, digits and "
             "_.,:/^+=@- only. An MCA name this node's OpenMPI does not know is refused at "
             "submit."},
    {.name = "transport", .type = SPEC_T_ENUM, .workloads = SPEC_WL_ANY,
     .flags = SPEC_F_SWEEP, .choice_at = vocab_transport_at, .def = "\"auto\"",
     SPEC_AT(transport),
     .desc = "Which path ddpbench's host backend (backend \"tcp\") uses between ranks: "
             "\"auto\" = shared memory between ranks of one node and TCP across nodes "
             "(hier's intra-node steps over shared memory), \"shm\" = shared memory only "
             "(every rank on one node), \"tcp\" = TCP sockets even on one node. Backends "
             "nccl and mpi and the framework engines have transports of their own: with "
             "them only \"auto\" (shm also not with the framework engines). \"shm\" with "
             "ranks placed on several nodes is refused (400 when the spec's nodes or "
             "ranks_per_node say so, 409 when no one node can ever hold the run)."},
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
    {.name = "faults", .type = SPEC_T_FAULTS, .workloads = SPEC_WL_ANY, .flags = SPEC_F_SWEEP,
     .def = "[]", .off = offsetof(struct spec, n_faults), .size = SPEC_FAULTS_SIZE,
     .desc = "Faults the daemon injects into the run (at most 16), each an object: when "
             "(at_step: once the run has reported that many steps, or at_s: seconds after "
             "its first step), whom (rank, or node: the run's node index, every rank on "
             "it) and kind: \"kill\" (SIGKILL), \"stop\" (SIGSTOP for duration_s, then "
             "SIGCONT), \"slow\" (the rank keeps about fraction, in (0, 1), of its CPUs for "
             "duration_s), \"link\" (under netlab, the node's link shaped down to rate "
             "Mbit/s for duration_s). Each injection and restore is an event of the run; a "
             "fault the run ended before is reported as not injected. Swept as a whole "
             "list: \"sweep\": {\"faults\": [[], [...]]}."},
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
             "no max pool; resnet50-cifar, vgg16-cifar, mobilenetv2-cifar: kuangliu's "
             "pytorch-cifar forms DDLBench trains; inception-v3: without its auxiliary head, "
             "at least 75x75; deepspeed-cifar-net: the DeepSpeed CIFAR tutorial's). Input "
             "shape and class count come from the dataset."},
    {.name = "strategy", .type = SPEC_T_ENUM, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .choice_at = vocab_strategy_at, .def = "\"ddp\"",
     SPEC_AT(train.strategy),
     .desc = "How gradients are exchanged: naive (allreduce every gradient after backward), "
             "ddp (PyTorch DDP's buckets, overlapping backward), horovod (tensor fusion), "
             "zero1 / zero2 (DeepSpeed ZeRO stages 1 and 2); single process, world_size "
             "replicas in one process: mirrored (engine tensorflow's MirroredStrategy) and "
             "dp (engine pytorch's DataParallel, device cuda)."},
    {.name = "batch_size", .type = SPEC_T_INT, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .min = 1, .max = 65536, .def = "32", SPEC_AT(train.batch_size),
     .desc = "Samples per rank per step (the global batch is world_size times this)."},
    {.name = "precision", .type = SPEC_T_ENUM, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .choices = spec_precisions, .def = "\"fp32\"",
     SPEC_AT(train.precision),
     .desc = "Arithmetic of the training step: fp32 everywhere; fp16 (dynamic loss scaling) "
             "and bf16 mixed precision on device cuda; bf16 on device cpu too (engine "
             "ddpbench: oneDNN's bf16 convolutions and inner products where the CPU has "
             "them, else bf16-rounded operands with fp32 compute; fp32 master weights and "
             "optimizer either way); each framework engine through its own mechanism (GET "
             "/v1/engines lists what each runs and why not)."},
    {.name = "clip_grad_norm", .type = SPEC_T_NUMBER, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .dmin = 0, .dmax = 1e9, .def = "0", SPEC_AT(train.clip_grad_norm),
     .desc = "Gradient clipping by global norm: after the exchange, the L2 norm over every "
             "parameter's averaged gradient (ZeRO: each rank's shard's sum of squares, "
             "allreduced); when above this value every gradient is multiplied by "
             "clip_grad_norm / (norm + 1e-6), as torch.nn.utils.clip_grad_norm_. Steps then "
             "report grad_norm, the norm before clipping. 0: off."},
    {.name = "loss_scale", .type = SPEC_T_NUMBER, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .dmin = 0, .dmax = 4294967296.0, .def = "0",
     SPEC_AT(train.loss_scale),
     .desc = "precision fp16 only: the loss is multiplied by this before backward and the "
             "gradients divided by it (static scaling, at most 2^32); 0: dynamic, PyTorch "
             "GradScaler's (starts at 65536, halves and skips the step on a non-finite "
             "gradient, doubles after loss_scale_window finite steps)."},
    {.name = "loss_scale_window", .type = SPEC_T_INT, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .min = 1, .max = 1000000, .def = "2000",
     SPEC_AT(train.loss_scale_window),
     .desc = "precision fp16 with dynamic loss scaling: finite steps in a row after which "
             "the scale doubles (GradScaler's growth_interval)."},
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
             "as pipeline_balance says), each on its own rank; world_size is replicas x "
             "pipeline, "
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
             "(records, records-zlib, records-zstd) or a JPEG file's bytes (records-jpeg), "
             "or TensorFlow's TFRecord shards of tf.train.Example records holding the JPEG "
             "bytes and the label (tfrecord). synthetic and text ignore it."},
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
    {.name = "dataset.storage_layer", .type = SPEC_T_ENUM, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .choices = spec_storage_layers, .def = "\"auto\"",
     SPEC_AT(train.dataset.storage_layer),
     .desc = "Where dataset.storage is emulated, for the file-backed formats. auto: a "
             "profile with a cap (nfs, blob, custom with a read_* figure) or cold mode goes "
             "through a per-rank ddpbench-fs mount (FUSE) that every engine reads; local "
             "reads the disk directly. mount: always the mount, local too (the mount's own "
             "overhead). in_process: ddpbench's C loader holds its reads to the profile "
             "itself (engine ddpbench only; needs no FUSE). synthetic, text and format "
             "native read nothing while training: they take auto only."},
    {.name = "loader_only", .type = SPEC_T_BOOL, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .def = "false", SPEC_AT(train.loader_only),
     .desc = "A loader-only run: each step takes its batches from the loader and trains "
             "nothing, so the throughput is what the data pipeline supplies on its own (sweep "
             "it against false to see whether training is input-bound)."},
    {.name = "calibrate", .type = SPEC_T_BOOL, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .def = "false", SPEC_AT(train.calibrate),
     .desc = "A contention calibration (issue 35, docs/model.md \"Co-location and "
             "contention\"): each rank trains its own replica and exchanges nothing, "
             "placed and pinned as a training run of the same world_size, so the phases at "
             "world_size k over those at 1 are what k co-located ranks cost each other. "
             "Sweep world_size (e.g. [1, 2, 3, 4]); with none given, k runs from 1 to twice "
             "the node's CPUs, at most the daemon's CPU slots. The finished experiment is "
             "stored once as a calibration (GET /v1/calibrations) that predictions on the "
             "node apply."},
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
    {.name = "engine", .type = SPEC_T_ENUM, .workloads = SPEC_WL_TRAIN | SPEC_WL_COLLECTIVE,
     .flags = SPEC_F_SWEEP,
     .choice_at = vocab_engine_at, .def = "\"ddpbench\"", SPEC_AT(train.engine),
     .desc = "What trains: ddpbench (this project's C worker, every strategy), pytorch "
             "(torch.distributed: ddp = DistributedDataParallel, zero1 = "
             "ZeroRedundancyOptimizer), horovod, tensorflow (MultiWorkerMirroredStrategy), "
             "deepspeed, lightning (PyTorch Lightning's DDP), or script (the operator's "
             "script under --scripts-dir). "
             "A collective runs on ddpbench or pytorch (torch.distributed over gloo: the "
             "network fits of the framework engines, backend \"gloo\"). "
             "GET /v1/engines lists what each node has installed."},
    {.name = "script", .type = SPEC_T_STRING, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_PRINTABLE, .min = 0, .max = 255, .def = "\"\"", SPEC_AT(train.script),
     .desc = "engine script: the program each rank runs, a path relative to the directory "
             "the daemon's operator allowed (ddpbenchd --scripts-dir), nothing outside it; "
             "a .py file runs under the engines' Python. It reads the spec from DDPB_SPEC, "
             "finds its peers in RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, and reports "
             "steps and epochs with engines/ddpb_report.py."},
    /* "elastic" (issue 32): filled only when the group is given or one of its fields swept;
     * its presence turns elastic mode on (struct spec_elastic.on). */
    {.name = "elastic.min_ranks", .type = SPEC_T_INT, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP | SPEC_F_OPTIONAL_GROUP, .min = 1, .max = SPEC_MAX_WORLD,
     .def = "1", SPEC_AT(elastic.min_ranks),
     .desc = "Elastic mode (given with any of its fields): a lost rank does not fail the run "
             "while at least min_ranks ranks live (1 to world_size); fewer fail it. How each "
             "engine recovers is GET /v1/engines' elastic."},
    {.name = "elastic.max_ranks", .type = SPEC_T_INT, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP | SPEC_F_OPTIONAL_GROUP, .min = 0, .max = SPEC_MAX_WORLD,
     .def = "0", SPEC_AT(elastic.max_ranks),
     .desc = "Elastic mode: the daemon starts a replacement into a lost rank's slot while "
             "fewer than max_ranks live (min_ranks to world_size; 0, the default, is "
             "world_size; max_ranks = min_ranks never replaces)."},
    {.name = "elastic.commit_every", .type = SPEC_T_INT, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP | SPEC_F_OPTIONAL_GROUP, .min = 1, .max = 1000000, .def = "10",
     SPEC_AT(elastic.commit_every),
     .desc = "Elastic mode: steps between two commits of the ranks' state (in memory for "
             "ddpbench, a checkpoint for pytorch), and at every epoch's end; a lost rank "
             "costs the steps since the last commit."},
    /* issue 33, part C: which of an engine's front ends trains */
    {.name = "framework", .type = SPEC_T_ENUM, .workloads = SPEC_WL_TRAIN,
     .flags = SPEC_F_SWEEP, .choices = spec_frameworks, .def = "\"auto\"",
     SPEC_AT(train.framework),
     .desc = "The engine's front end: auto (its own), torch, or keras. Only engine horovod "
             "has two: torch (its PyTorch binding, what auto means) and keras "
             "(hvd.tensorflow.keras over TensorFlow 2); the torch engines (pytorch, "
             "lightning, deepspeed) take torch too."},
};
/* clang-format on */

#define SPEC_NFIELDS SPEC_COUNT(spec_fields)
_Static_assert(SPEC_NFIELDS <= SPEC_MAX_FIELDS, "spec_table.h: raise SPEC_MAX_FIELDS");

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
static const char *const spec_host_backends[] = {"tcp", "mpi", NULL};
static const char *const spec_mpi_launchers[] = {"mpirun", "srun", NULL};
static const char *const spec_only_ddpbench[] = {"ddpbench", NULL};
static const char *const spec_only_nccl[] = {"nccl", NULL};
static const char *const spec_only_false[] = {"false", NULL};
static const char *const spec_gpu_strategies[] = {"naive", "ddp", "dp", NULL};
/* every strategy but dp: DataParallel on a CPU would run one replica (issue 33) */
static const char *const spec_cpu_strategies[] = {"naive", "ddp",      "horovod", "zero1",
                                                  "zero2", "mirrored", NULL};
static const char *const spec_only_none[] = {"none", NULL};
static const char *const spec_algs_nccl[] = {"auto", "ring", "tree", NULL};
static const char *const spec_only_auto[] = {"auto", NULL};

static const struct spec_allowed spec_device_backends[] = {
    {"cpu", spec_host_backends, "NCCL moves GPU buffers"},
    {"cuda", spec_only_nccl,
     "tcp on GPU buffers, staging through pinned host memory, is not "
     "implemented yet"},
    {NULL, NULL, NULL},
};
static const struct spec_allowed spec_backend_launchers[] = {
    {"mpi", spec_mpi_launchers,
     "MPI's ranks are started by its own launcher (mpirun) or by Slurm (srun)"},
    {NULL, NULL, NULL},
};
static const struct spec_allowed spec_device_launchers[] = {
    {"cuda", spec_only_ddpbench,
     "GPU placement (one GPU per rank, emulation) is the ddpbench launcher's"},
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
static const char *const spec_cpu_precisions[] = {"fp32", "bf16", NULL};
static const struct spec_allowed spec_device_precisions[] = {
    {"cpu", spec_cpu_precisions,
     "fp16 mixed precision runs on device cuda: ddpbench's engine, torch's CPU autocast, "
     "Keras' mixed_float16 and DeepSpeed's CPU accelerator have no fp16 on the CPU; bf16 "
     "runs there"},
    {NULL, NULL, NULL},
};
static const struct spec_allowed spec_device_strategies[] = {
    {"cpu", spec_cpu_strategies,
     "dp (torch.nn.DataParallel) replicates over GPUs: on a CPU it runs a single replica, "
     "so it needs device cuda"},
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
static const char *const spec_torch_strategies[] = {"ddp", "zero1", "dp", NULL};
static const char *const spec_tf_strategies[] = {"ddp", "mirrored", NULL};
static const char *const spec_ddp_only[] = {"ddp", NULL};
/* ddpbench's worker and a user's script run a replica per process: every strategy but
 * the single-process ones (vocab.c single_process) */
static const char *const spec_process_strategies[] = {"naive", "ddp",   "horovod",
                                                      "zero1", "zero2", NULL};
static const char *const spec_horovod_only[] = {"horovod", NULL};
static const char *const spec_zero_stages[] = {"zero1", "zero2", NULL};
static const struct spec_allowed spec_engine_strategies[] = {
    {"ddpbench", spec_process_strategies,
     "ddpbench's worker runs one replica per process; mirrored and dp are TensorFlow's and "
     "PyTorch's single-process strategies"},
    {"pytorch", spec_torch_strategies,
     "torch offers DistributedDataParallel (ddp), ZeroRedundancyOptimizer (zero1) and "
     "DataParallel (dp, device cuda)"},
    {"tensorflow", spec_tf_strategies,
     "TensorFlow offers MultiWorkerMirroredStrategy (ddp) and MirroredStrategy (mirrored, one "
     "process)"},
    {"lightning", spec_ddp_only, "the lightning adapter runs Lightning's DDP strategy (ddp)"},
    {"script", spec_process_strategies,
     "a script's ranks are processes: mirrored and dp are the framework engines' "
     "single-process strategies"},
    {"horovod", spec_horovod_only, "Horovod trains with its DistributedOptimizer (horovod)"},
    {"deepspeed", spec_zero_stages, "DeepSpeed's engine runs ZeRO stage 1 or 2"},
    {NULL, NULL, NULL},
};
/* issue 33: each framework's own mixed precision (engines/ddpb_torch_loop.py Precision,
 * engine_tensorflow.py POLICIES, engine_deepspeed.py ds_precision); engines/probe.py's
 * CAPS "precisions" and "precisions_not_available" say the same. */
static const char *const spec_torch_precisions[] = {"fp32", "bf16", "fp16", NULL};
static const char *const spec_fp32_bf16[] = {"fp32", "bf16", NULL};
static const struct spec_allowed spec_engine_precisions[] = {
    {"pytorch", spec_torch_precisions, "torch autocast runs bf16, and fp16 on device cuda"},
    {"tensorflow", spec_fp32_bf16,
     "Keras' mixed_float16 needs a GPU and the tensorflow engine is tensorflow-cpu; "
     "mixed_bfloat16 runs"},
    {"horovod", spec_fp32_bf16,
     "fp16 autocast needs device cuda, which this Horovod build lacks; Horovod's fp16 "
     "gradient compression is the spec's compression"},
    {"deepspeed", spec_fp32_bf16,
     "DeepSpeed's CPU accelerator has no fp16 (is_fp16_supported() is false); its bf16 runs"},
    {"lightning", spec_fp32_bf16,
     "Lightning's 16-mixed needs device cuda, which this engine lacks; bf16-mixed runs"},
    {NULL, NULL, NULL},
};
static const char *const spec_cpu_only[] = {"cpu", NULL};
static const struct spec_allowed spec_engine_devices[] = {
    {"tensorflow", spec_cpu_only, "the tensorflow engine is tensorflow-cpu"},
    {"horovod", spec_cpu_only, "the horovod engine has no NCCL: its build has Gloo and MPI"},
    {"deepspeed", spec_cpu_only, "the deepspeed engine runs its CPU accelerator over gloo"},
    {"lightning", spec_cpu_only, "the lightning adapter runs Lightning's DDP over gloo"},
    {NULL, NULL, NULL},
};
static const char *const spec_tcp_nccl[] = {"tcp", "nccl", NULL};
static const char *const spec_tcp_only[] = {"tcp", NULL};
static const struct spec_allowed spec_engine_backends[] = {
    {"pytorch", spec_tcp_nccl,
     "torch.distributed's MPI backend needs a torch built with MPI, and neither Debian's nor "
     "PyPI's is (GET /v1/engines says so)"},
    {"horovod", spec_host_backends, "Horovod runs over Gloo (tcp) or its MPI controller (mpi)"},
    {"tensorflow", spec_tcp_only, "MultiWorkerMirroredStrategy talks gRPC and its own ring"},
    {"deepspeed", spec_tcp_only, "the deepspeed adapter runs over torch's gloo"},
    {"lightning", spec_tcp_only, "the lightning adapter runs Lightning's DDP over gloo"},
    {NULL, NULL, NULL},
};
static const char *const spec_none_fp16[] = {"none", "fp16", NULL};
static const struct spec_allowed spec_engine_compressions[] = {
    {"horovod", spec_none_fp16, "Horovod compresses to fp16 only (hvd.Compression.fp16)"},
    {"tensorflow", spec_only_none,
     "MultiWorkerMirroredStrategy has no gradient compression on the CPU"},
    {"deepspeed", spec_only_none, "the deepspeed adapter sets no communication compression"},
    {"lightning", spec_only_none, "Lightning's DDP strategy sets no compression hook here"},
    {NULL, NULL, NULL},
};
/* The data pipeline across engines (issue 34): the framework engines read the converted
 * formats with their own loaders (torch's DataLoader, tf.data: engines/ddpb_torch_data.py),
 * through the same storage emulation as ddpbench's (a ddpbench-fs mount per rank), so every
 * dataset.storage runs; the record shards are ddpbench's own format, which no framework
 * reads. loader_only iterates a framework's loader alone where the adapter owns its loop;
 * DeepSpeed's and Lightning's training loops are their frameworks'. */
static const char *const spec_framework_formats[] = {"native", "files-png", "files-jpeg",
                                                     "tfrecord", NULL};
#define SPEC_FRAMEWORK_FORMATS_WHY                                                             \
    "records, records-zlib, records-zstd and records-jpeg are ddpbench's own shard format, "   \
    "which no framework reads: the framework engines read native, files-png, files-jpeg and "  \
    "tfrecord"
#define SPEC_ENGINES_C_LOADER(values, why)                                                     \
    {                                                                                          \
        {"pytorch", values, why}, {"tensorflow", values, why}, {"horovod", values, why},       \
            {"deepspeed", values, why}, {"lightning", values, why},                            \
        {                                                                                      \
            NULL, NULL, NULL                                                                   \
        }                                                                                      \
    }
/* A calibration (spec calibrate) is ddpbench's own loop with its exchange left out; the
 * strategy must be one whose update needs nothing from the other ranks. */
static const struct spec_allowed spec_engine_calibrate[] = {
    {"pytorch", spec_only_false, "a calibration runs ddpbench's engine"},
    {"horovod", spec_only_false, "a calibration runs ddpbench's engine"},
    {"tensorflow", spec_only_false, "a calibration runs ddpbench's engine"},
    {"deepspeed", spec_only_false, "a calibration runs ddpbench's engine"},
    {"script", spec_only_false, "a calibration runs ddpbench's engine"},
    {"lightning", spec_only_false, "a calibration runs ddpbench's engine"},
    {NULL, NULL, NULL},
};
static const char *const spec_calibrate_strategies[] = {"ddp", NULL};
static const struct spec_allowed spec_calibrate_strategy[] = {
    {"true", spec_calibrate_strategies,
     "a calibration's ranks exchange nothing, so each updates its own whole replica: "
     "strategy ddp (ZeRO's shards need the exchange)"},
    {NULL, NULL, NULL},
};
static const struct spec_allowed spec_engine_loader_only[] = {
    {"deepspeed", spec_only_false,
     "deepspeed.initialize's engine runs the training step; its loader alone is torch's "
     "DataLoader, which engine pytorch's loader_only measures"},
    {"lightning", spec_only_false,
     "Lightning's Trainer owns the loop and has no loader-only mode; engine pytorch's "
     "loader_only measures the same DataLoader"},
    {NULL, NULL, NULL},
};
static const struct spec_allowed spec_engine_formats[] = SPEC_ENGINES_C_LOADER(
    spec_framework_formats, SPEC_FRAMEWORK_FORMATS_WHY);
/* "framework" (issue 33): keras is Horovod's TensorFlow binding; the torch engines are torch
 * whatever is asked; the others have their one front end (auto). */
static const char *const spec_auto_torch[] = {"auto", "torch", NULL};
#define SPEC_ONE_FRONT_END "has one front end (framework auto); keras is engine horovod's"
static const struct spec_allowed spec_engine_frameworks[] = {
    {"ddpbench", spec_only_auto, "ddpbench's C worker " SPEC_ONE_FRONT_END},
    {"pytorch", spec_auto_torch, "engine pytorch is torch; keras is engine horovod's"},
    {"tensorflow", spec_only_auto,
     "engine tensorflow " SPEC_ONE_FRONT_END " (hvd.tensorflow.keras)"},
    {"deepspeed", spec_auto_torch, "engine deepspeed is torch; keras is engine horovod's"},
    {"lightning", spec_auto_torch, "engine lightning is torch; keras is engine horovod's"},
    {"script", spec_only_auto, "a script chooses its own framework"},
    {NULL, NULL, NULL},
};
static const struct spec_allowed spec_backend_algorithms[] = {
    {"nccl", spec_algs_nccl, "NCCL chooses among its own algorithms, once per communicator"},
    {"mpi", spec_only_auto,
     "MPI chooses its own algorithms; steer them through mpi_mca (e.g. coll_tuned_* or "
     "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM)"},
    {NULL, NULL, NULL},
};

/* transport is the host backend's (worker/comm/shm.h): NCCL and MPI choose their own paths;
 * the framework engines talk over theirs (Gloo, gRPC, Horovod's), so shared memory is
 * ddpbench's own; and a forced algorithm other than hier is one of TCP's (shm has its own
 * algorithms; hier's steps inside a node run over shm). */
static const char *const spec_auto_tcp[] = {"auto", "tcp", NULL};
static const struct spec_allowed spec_backend_transports[] = {
    {"nccl", spec_only_auto, "NCCL chooses its own transports (NCCL_P2P_*, NCCL_SHM_*)"},
    {"mpi", spec_only_auto, "MPI chooses its own transports; steer them through mpi_mca"},
    {NULL, NULL, NULL},
};
#define SPEC_FRAMEWORK_TRANSPORTS(why)                                                         \
    {                                                                                          \
        {"pytorch", spec_auto_tcp, why}, {"tensorflow", spec_auto_tcp, why},                   \
            {"horovod", spec_auto_tcp, why}, {"deepspeed", spec_auto_tcp, why},                \
            {"script", spec_auto_tcp, why}, {"lightning", spec_auto_tcp, why},                 \
        {                                                                                      \
            NULL, NULL, NULL                                                                   \
        }                                                                                      \
    }
static const struct spec_allowed spec_engine_transports[] = SPEC_FRAMEWORK_TRANSPORTS(
    "shared memory is ddpbench's own host backend's; the framework engines use their own "
    "transports");
#define SPEC_TCP_ALGORITHM(name)                                                               \
    {                                                                                          \
        name, spec_auto_tcp,                                                                   \
            "a TCP algorithm; transport shm has its own (algorithm auto, or "                  \
            "hier)"                                                                            \
    }
static const struct spec_allowed spec_algorithm_transports[] = {
    SPEC_TCP_ALGORITHM("ring"),   SPEC_TCP_ALGORITHM("rd"),   SPEC_TCP_ALGORITHM("hd"),
    SPEC_TCP_ALGORITHM("direct"), SPEC_TCP_ALGORITHM("tree"), {NULL, NULL, NULL},
};

static const struct spec_rule spec_rules[] = {
    {SPEC_RULE_LE, SPEC_WL_COLLECTIVE, "min_bytes", "max_bytes", NULL},
    {SPEC_RULE_ONE_OF, SPEC_WL_COLLECTIVE, "factor", "step", NULL},
    {SPEC_RULE_ALLOWED, SPEC_WL_COLLECTIVE, "op", "algorithm", spec_op_algorithms},
    {SPEC_RULE_ONE_OF, SPEC_WL_TRAIN, "steps", "epochs", NULL},
    {SPEC_RULE_ALLOWED, SPEC_WL_ANY, "device", "backend", spec_device_backends},
    {SPEC_RULE_ALLOWED, SPEC_WL_ANY, "device", "emulate_multi_rank", spec_device_emulation},
    {SPEC_RULE_ALLOWED, SPEC_WL_ANY, "backend", "launcher", spec_backend_launchers},
    {SPEC_RULE_ALLOWED, SPEC_WL_ANY, "device", "launcher", spec_device_launchers},
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
    {SPEC_RULE_ALLOWED, SPEC_WL_TRAIN, "engine", "backend", spec_engine_backends},
    {SPEC_RULE_ALLOWED, SPEC_WL_TRAIN, "engine", "loader_only", spec_engine_loader_only},
    {SPEC_RULE_ALLOWED, SPEC_WL_TRAIN, "engine", "calibrate", spec_engine_calibrate},
    {SPEC_RULE_ALLOWED, SPEC_WL_TRAIN, "calibrate", "strategy", spec_calibrate_strategy},
    {SPEC_RULE_ALLOWED, SPEC_WL_TRAIN, "engine", "dataset.format", spec_engine_formats},
    {SPEC_RULE_ALLOWED, SPEC_WL_TRAIN, "engine", "dataset.storage_layer",
     spec_engine_storage_layers},
    {SPEC_RULE_ALLOWED, SPEC_WL_ANY, "backend", "transport", spec_backend_transports},
    {SPEC_RULE_ALLOWED, SPEC_WL_TRAIN, "engine", "transport", spec_engine_transports},
    {SPEC_RULE_ALLOWED, SPEC_WL_TRAIN, "engine", "framework", spec_engine_frameworks},
    {SPEC_RULE_ALLOWED, SPEC_WL_COLLECTIVE, "algorithm", "transport",
     spec_algorithm_transports},
};

/* The tables as common/spec_table.h exports them to the module's other files. */
const struct spec_field *const spec_field_table = spec_fields;
const size_t spec_field_count = SPEC_NFIELDS;
const struct spec_rule *const spec_rule_table = spec_rules;
const size_t spec_rule_count = SPEC_COUNT(spec_rules);
const char *const *const spec_workload_table = spec_workload_names;

/* --- lookups ------------------------------------------------------------------------ */

const struct vocab_strategy *spec_strategy_of(const json_t *spec)
{
    const char *name = json_string_value(spec_field_value(spec, "strategy"));
    return vocab_strategy(vocab_find(VOCAB_STRATEGY, name));
}

const struct spec_field *spec_field_find(const char *name)
{
    for (size_t i = 0; i < spec_field_count; i++)
        if (strcmp(spec_field_table[i].name, name) == 0)
            return &spec_field_table[i];
    return NULL;
}

bool spec_field_in(const struct spec_field *f, enum spec_workload wl)
{
    return (f->workloads >> (unsigned)wl) & 1u;
}

bool spec_rule_in(const struct spec_rule *r, enum spec_workload wl)
{
    return (r->workloads >> (unsigned)wl) & 1u;
}

/* n characters of s from the set ok (ok(c) true), then its end */
static bool spec_chars(const char *s, size_t lo, size_t hi, bool (*ok)(unsigned char c))
{
    size_t n = 0;
    for (; s[n]; n++)
        if (n >= hi || !ok((unsigned char)s[n]))
            return false;
    return n >= lo;
}

static bool spec_mca_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

static bool spec_cvar_char(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static bool spec_value_char(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           (c && strchr("_.,:/^+=@-", c) != NULL);
}

bool spec_map_key_ok(const char *s)
{
    if (strncmp(s, "MPIR_CVAR_", 10) == 0)
        return spec_chars(s + 10, 1, 53, spec_cvar_char);
    return s[0] >= 'a' && s[0] <= 'z' && spec_chars(s + 1, 0, 62, spec_mca_char);
}

bool spec_map_value_ok(const char *s)
{
    return spec_chars(s, 1, 127, spec_value_char);
}

int spec_list_index(const char *const *list, const char *s)
{
    for (int i = 0; list[i]; i++)
        if (strcmp(list[i], s) == 0)
            return i;
    return -1;
}

const char *spec_choice(const struct spec_field *f, int i)
{
    return f->choices ? f->choices[i] : f->choice_at(i);
}

/* --- nested fields ----------------------------------------------------------------- */
/* A field named "group.key" lives in the object "group" of the spec: one level only. */

bool spec_group_given(const json_t *in, const json_t *sweep, const char *field)
{
    const char *dot = strchr(field, '.');
    size_t n = dot ? (size_t)(dot - field) : strlen(field);
    char group[32];
    if (n >= sizeof group)
        return false;
    memcpy(group, field, n);
    group[n] = '\0';
    if (json_object_get(in, group))
        return true;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)sweep, key, v)
    {
        if (strncmp(key, group, n) == 0 && key[n] == '.')
            return true;
    }
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

int spec_set_path(json_t *spec, const char *name, json_t *v)
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

/* --- message helpers --------------------------------------------------------------- */

void spec_append(char *out, size_t n, size_t *len, const char *s)
{
    if (*len >= n)
        return;
    int k = snprintf(out + *len, n - *len, "%s", s);
    if (k > 0)
        *len += (size_t)k;
}

void spec_value_text(const json_t *v, char *out, size_t n)
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
