/* vocab: the attributes of vocab.h's names, and the vocabulary as JSON.
 *
 * Decision: each table is indexed by vocab.h's enum (designated initializers), so a row
 * missing for a name added to an X-macro is a NULL name that test_vocab catches, and a row
 * in the wrong place cannot be. The JSON carries everything a copy elsewhere would need
 * (the Python engines' adapter map, dataset norms and model shapes; the dashboard's
 * lists), so those read it instead of copying. */
#include "common/vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/columns.h"
#include "common/model_table.h"

#define VOCAB_COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* The table keeps its own layout (a name in a few lines reads as a row). */
/* clang-format off */
static const struct vocab_strategy vocab_strategies[] = {
    [VOCAB_STRATEGY_NAIVE] = {"naive", false, false, false, VOCAB_BUCKETS_PER_TENSOR,
        "every gradient tensor allreduced alone after backward", false},
    [VOCAB_STRATEGY_DDP] = {"ddp", true, false, false, VOCAB_BUCKETS_SMALL_FIRST,
        "PyTorch DDP: buckets allreduced as they fill during backward", false},
    [VOCAB_STRATEGY_HOROVOD] = {"horovod", true, false, false, VOCAB_BUCKETS_FUSION,
        "Horovod: ready tensors fused every cycle and allreduced during backward", false},
    [VOCAB_STRATEGY_ZERO1] = {"zero1", false, true, false, VOCAB_BUCKETS_BY_SIZE,
        "ZeRO stage 1: optimizer state sharded; reduce-scatter after backward, all-gather "
        "after the step", false},
    [VOCAB_STRATEGY_ZERO2] = {"zero2", true, true, true, VOCAB_BUCKETS_BY_SIZE,
        "ZeRO stage 2: optimizer state and gradients sharded; reduce-scatter during "
        "backward", false},
    /* single process (issue 33): the framework's own replicas in one process */
    [VOCAB_STRATEGY_MIRRORED] = {"mirrored", false, false, false, VOCAB_BUCKETS_BY_SIZE,
        "TensorFlow's MirroredStrategy: one process, world_size replicas (logical CPU "
        "devices on the CPU), gradients all-reduced between them", true},
    [VOCAB_STRATEGY_DP] = {"dp", false, false, false, VOCAB_BUCKETS_PER_TENSOR,
        "torch.nn.DataParallel: one process, world_size GPUs; each step scatters the batch "
        "and gathers the gradients on the first", true},
};

static const struct vocab_engine vocab_engines[] = {
    [VOCAB_ENGINE_DDPBENCH] = {"ddpbench", NULL, NULL, false, VOCAB_ELASTIC_IN_MEMORY,
        "this project's C worker (ddpbench-worker), every strategy"},
    [VOCAB_ENGINE_PYTORCH] = {"pytorch", "torch", "engine_pytorch.py", true,
        VOCAB_ELASTIC_RESTART,
        "torch.distributed: DistributedDataParallel, ZeroRedundancyOptimizer"},
    [VOCAB_ENGINE_HOROVOD] = {"horovod", "horovod.torch", "engine_horovod.py", true,
        VOCAB_ELASTIC_DRIVER,
        "Horovod's PyTorch binding: its DistributedOptimizer"},
    [VOCAB_ENGINE_TENSORFLOW] = {"tensorflow", "tensorflow", "engine_tensorflow.py", true,
        VOCAB_ELASTIC_NONE,
        "TensorFlow's MultiWorkerMirroredStrategy"},
    [VOCAB_ENGINE_DEEPSPEED] = {"deepspeed", "deepspeed", "engine_deepspeed.py", true,
        VOCAB_ELASTIC_NONE,
        "DeepSpeed's engine, ZeRO stage 1 or 2"},
    [VOCAB_ENGINE_SCRIPT] = {"script", NULL, NULL, false, VOCAB_ELASTIC_NONE,
        "a user's program under the daemon's --scripts-dir"},
    [VOCAB_ENGINE_LIGHTNING] = {"lightning", "pytorch_lightning", "engine_lightning.py", true,
        VOCAB_ELASTIC_NONE,
        "PyTorch Lightning's Trainer with its DDP strategy"},
};

static const struct vocab_backend vocab_backends[] = {
    [VOCAB_BACKEND_TCP] = {"tcp", "cpu", "ddpbench's TCP collectives (worker/comm/tcp.c)"},
    [VOCAB_BACKEND_NCCL] = {"nccl", "cuda", "NVIDIA's NCCL on GPU buffers"},
    [VOCAB_BACKEND_MPI] = {"mpi", "cpu",
        "the MPI library's own collectives (spec field mpi: OpenMPI or MPICH)"},
};

static const struct vocab_transport vocab_transports[] = {
    [VOCAB_TRANSPORT_AUTO] = {"auto", true, true,
        "shared memory between ranks of one node, TCP across nodes"},
    [VOCAB_TRANSPORT_SHM] = {"shm", true, false,
        "shared memory only: every rank on one node"},
    [VOCAB_TRANSPORT_TCP] = {"tcp", false, true, "TCP sockets, even between ranks of one node"},
};

static const struct vocab_fault vocab_faults[] = {
    [VOCAB_FAULT_KILL] = {"kill", false, false, false, false,
        "SIGKILL: the rank dies (a non-elastic run fails, naming it)"},
    [VOCAB_FAULT_STOP] = {"stop", true, false, false, false,
        "SIGSTOP for duration_s, then SIGCONT: the rank freezes"},
    [VOCAB_FAULT_SLOW] = {"slow", true, true, false, false,
        "the rank keeps about fraction of its CPUs for duration_s (SCHED_IDLE threads "
        "and a pinned burner)"},
    [VOCAB_FAULT_LINK] = {"link", true, false, true, true,
        "the node's link shaped down to rate Mbit/s for duration_s (netlab only)"},
};

static const struct vocab_launcher vocab_launchers[] = {
    [VOCAB_LAUNCHER_DDPBENCH] = {"ddpbench", true, false,
        "ddpbenchd forks each rank (and its followers theirs)"},
    [VOCAB_LAUNCHER_MPIRUN] = {"mpirun", false, false,
        "the MPI implementation's launcher (OpenMPI mpirun, MPICH mpiexec.hydra)"},
    [VOCAB_LAUNCHER_SRUN] = {"srun", false, true,
        "Slurm's srun, from a daemon running inside the allocation"},
};

static const struct vocab_mpi vocab_mpis[] = {
    [VOCAB_MPI_OPENMPI] = {"openmpi", "ddpb_comm_mpi_openmpi.so", "ddpb_module_mpi_openmpi",
        "mpirun.openmpi", "pmix", "openmpi-bin libopenmpi3", "libopenmpi-dev",
        "Open MPI (Debian's 4.1)"},
    [VOCAB_MPI_MPICH] = {"mpich", "ddpb_comm_mpi_mpich.so", "ddpb_module_mpi_mpich",
        "mpiexec.mpich", "pmi2", "mpich libmpich12", "libmpich-dev",
        "MPICH (Debian's 4.0; the ABI Intel MPI shares)"},
};

static const struct vocab_format vocab_formats[] = {
    [VOCAB_FORMAT_NATIVE] = {"native", false, false, VOCAB_CODEC_NONE, VOCAB_COMPRESS_NONE,
        false, 0, "the dataset's own files (idx, CIFAR batches)", false},
    [VOCAB_FORMAT_FILES_PNG] = {"files-png", true, false, VOCAB_CODEC_PNG,
        VOCAB_COMPRESS_NONE, false, 0, "one PNG file per sample and a manifest", false},
    [VOCAB_FORMAT_FILES_JPEG] = {"files-jpeg", true, false, VOCAB_CODEC_JPEG,
        VOCAB_COMPRESS_NONE, true, 0, "one JPEG file per sample and a manifest", false},
    [VOCAB_FORMAT_RECORDS] = {"records", false, true, VOCAB_CODEC_NONE, VOCAB_COMPRESS_RAW,
        false, 0, "record shards and an index, each sample raw", false},
    [VOCAB_FORMAT_RECORDS_ZLIB] = {"records-zlib", false, true, VOCAB_CODEC_NONE,
        VOCAB_COMPRESS_ZLIB, false, 9, "record shards, each sample zlib-compressed", false},
    [VOCAB_FORMAT_RECORDS_ZSTD] = {"records-zstd", false, true, VOCAB_CODEC_NONE,
        VOCAB_COMPRESS_ZSTD, false, 19, "record shards, each sample zstd-compressed", false},
    [VOCAB_FORMAT_RECORDS_JPEG] = {"records-jpeg", false, true, VOCAB_CODEC_JPEG,
        VOCAB_COMPRESS_JPEG, true, 0, "record shards, each sample a JPEG file's bytes", false},
    [VOCAB_FORMAT_TFRECORD] = {"tfrecord", false, false, VOCAB_CODEC_JPEG, VOCAB_COMPRESS_NONE,
        true, 0, "TensorFlow's TFRecord shards of tf.train.Example, each a JPEG file's bytes",
        true},
};

/* The named profiles' figures (worker/data/storage.h says what each stands for). */
static const struct vocab_storage vocab_storages[] = {
    [VOCAB_STORAGE_LOCAL] = {"local", false, 0, 0, 0,
                             "no caps: the machine's disk and page cache"},
    [VOCAB_STORAGE_NFS] = {"nfs", false, 200, 0.5, 8,
                           "one client of a filer on a datacenter LAN"},
    [VOCAB_STORAGE_BLOB] = {"blob", false, 100, 15, 32, "one VM reading an object store"},
    [VOCAB_STORAGE_CUSTOM] = {"custom", true, 0, 0, 0, "the spec's dataset.read_* figures"},
};

static const struct vocab_schedule vocab_schedules[] = {
    [VOCAB_SCHEDULE_1F1B] = {"1f1b", false,
        "PipeDream-flush: forwards and backwards alternate after a warm-up"},
    [VOCAB_SCHEDULE_GPIPE] = {"gpipe", true,
        "every micro-batch's forward, then every backward"},
};

/* The published mean/std per channel (torchvision's, the datasets' usual ones). */
static const struct vocab_norm vocab_norms[] = {
    {"mnist", 1, {0.1307f}, {0.3081f}},
    {"fashion-mnist", 1, {0.2860f}, {0.3530f}},
    {"cifar10", 3, {0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f}},
    {"none", 0, {0}, {0}},
};
/* clang-format on */

/* A name added to a vocab.h X-macro without its row here fails the build (a row missing in
 * the middle leaves a NULL name, which test_vocab finds). */
_Static_assert(VOCAB_COUNT(vocab_strategies) == VOCAB_NSTRATEGIES, "a row per strategy");
_Static_assert(VOCAB_COUNT(vocab_engines) == VOCAB_NENGINES, "a row per engine");
_Static_assert(VOCAB_COUNT(vocab_backends) == VOCAB_NBACKENDS, "a row per backend");
_Static_assert(VOCAB_COUNT(vocab_formats) == VOCAB_NFORMATS, "a row per format");
_Static_assert(VOCAB_COUNT(vocab_storages) == VOCAB_NSTORAGES, "a row per storage");
_Static_assert(VOCAB_COUNT(vocab_schedules) == VOCAB_NSCHEDULES, "a row per schedule");
_Static_assert(VOCAB_COUNT(vocab_launchers) == VOCAB_NLAUNCHERS, "a row per launcher");
_Static_assert(VOCAB_COUNT(vocab_mpis) == VOCAB_NMPIS, "a row per MPI implementation");
_Static_assert(VOCAB_COUNT(vocab_transports) == VOCAB_NTRANSPORTS, "a row per transport");
_Static_assert(VOCAB_COUNT(vocab_faults) == VOCAB_NFAULTS, "a row per fault kind");

#define VOCAB_NAME(id, name) name,
static const char *const vocab_report_names[] = {VOCAB_REPORTS(VOCAB_NAME)};

#define VOCAB_ROW(table, id)                                                                   \
    ((id) >= 0 && (size_t)(id) < VOCAB_COUNT(table) ? &table[id] : NULL)

/* The row accessors (vocab.h): one definition each, the same shape. */
#define VOCAB_GETTER(type, fn, table)                                                          \
    const struct type *fn(int id)                                                              \
    {                                                                                          \
        return VOCAB_ROW(table, id);                                                           \
    }
VOCAB_GETTER(vocab_strategy, vocab_strategy, vocab_strategies)
VOCAB_GETTER(vocab_engine, vocab_engine, vocab_engines)
VOCAB_GETTER(vocab_backend, vocab_backend, vocab_backends)
VOCAB_GETTER(vocab_format, vocab_format, vocab_formats)
VOCAB_GETTER(vocab_storage, vocab_storage, vocab_storages)
VOCAB_GETTER(vocab_schedule, vocab_schedule, vocab_schedules)
VOCAB_GETTER(vocab_launcher, vocab_launcher, vocab_launchers)
VOCAB_GETTER(vocab_mpi, vocab_mpi, vocab_mpis)
VOCAB_GETTER(vocab_transport, vocab_transport, vocab_transports)
VOCAB_GETTER(vocab_fault, vocab_fault, vocab_faults)

const struct vocab_norm *vocab_norm_at(size_t i)
{
    return i < VOCAB_COUNT(vocab_norms) ? &vocab_norms[i] : NULL;
}

const struct vocab_norm *vocab_norm_find(const char *name)
{
    for (size_t i = 0; name && i < VOCAB_COUNT(vocab_norms); i++)
        if (strcmp(vocab_norms[i].name, name) == 0)
            return &vocab_norms[i];
    return NULL;
}

const char *vocab_name(enum vocab_list l, int i)
{
    const char *const *name;
    switch (l) {
    case VOCAB_STRATEGY: name = vocab_strategy(i) ? &vocab_strategy(i)->name : NULL; break;
    case VOCAB_ENGINE: name = vocab_engine(i) ? &vocab_engine(i)->name : NULL; break;
    case VOCAB_BACKEND: name = vocab_backend(i) ? &vocab_backend(i)->name : NULL; break;
    case VOCAB_FORMAT: name = vocab_format(i) ? &vocab_format(i)->name : NULL; break;
    case VOCAB_STORAGE: name = vocab_storage(i) ? &vocab_storage(i)->name : NULL; break;
    case VOCAB_SCHEDULE: name = vocab_schedule(i) ? &vocab_schedule(i)->name : NULL; break;
    case VOCAB_REPORT: name = VOCAB_ROW(vocab_report_names, i); break;
    case VOCAB_LAUNCHER: name = vocab_launcher(i) ? &vocab_launcher(i)->name : NULL; break;
    case VOCAB_MPI: name = vocab_mpi(i) ? &vocab_mpi(i)->name : NULL; break;
    case VOCAB_TRANSPORT: name = vocab_transport(i) ? &vocab_transport(i)->name : NULL; break;
    case VOCAB_FAULT: name = vocab_fault(i) ? &vocab_fault(i)->name : NULL; break;
    default: name = NULL;
    }
    return name ? *name : NULL;
}

int vocab_count(enum vocab_list l)
{
    int n = 0;
    while (vocab_name(l, n))
        n++;
    return n;
}

int vocab_find(enum vocab_list l, const char *name)
{
    for (int i = 0; name && vocab_name(l, i); i++)
        if (strcmp(vocab_name(l, i), name) == 0)
            return i;
    return -1;
}

const char *vocab_list_key(enum vocab_list l)
{
    static const char *const keys[] = {
        [VOCAB_STRATEGY] = "strategies",
        [VOCAB_ENGINE] = "engines",
        [VOCAB_BACKEND] = "backends",
        [VOCAB_FORMAT] = "formats",
        [VOCAB_STORAGE] = "storages",
        [VOCAB_SCHEDULE] = "schedules",
        [VOCAB_REPORT] = "reports",
        [VOCAB_LAUNCHER] = "launchers",
        [VOCAB_MPI] = "mpis",
        [VOCAB_TRANSPORT] = "transports",
        [VOCAB_FAULT] = "fault_kinds",
    };
    return (unsigned)l < VOCAB_NLISTS ? keys[l] : NULL;
}

/* names[0..count) that keep (NULL: all), joined into buf. */
static char *vocab_join_names(const char *const *names, const bool *keep, int count,
                              const char *last, char *buf, size_t n)
{
    size_t len = 0;
    int total = 0, done = 0;
    for (int i = 0; i < count; i++)
        total += keep[i];
    if (n == 0)
        return buf;
    buf[0] = '\0';
    for (int i = 0; i < count && len < n; i++) {
        if (!keep[i])
            continue;
        const char *sep = done == 0 ? "" : done == total - 1 ? last : ", ";
        int w = snprintf(buf + len, n - len, "%s%s", sep, names[i]);
        len += w > 0 ? (size_t)w : 0;
        done++;
    }
    return buf;
}

#define VOCAB_MAX_NAMES 32

char *vocab_join(enum vocab_list l, const char *last, char *buf, size_t n)
{
    const char *names[VOCAB_MAX_NAMES];
    bool keep[VOCAB_MAX_NAMES];
    int count = 0;
    for (; count < VOCAB_MAX_NAMES && vocab_name(l, count); count++) {
        names[count] = vocab_name(l, count);
        keep[count] = true;
    }
    return vocab_join_names(names, keep, count, last, buf, n);
}

char *vocab_format_join(bool (*keep)(const struct vocab_format *f), const char *last, char *buf,
                        size_t n)
{
    const char *names[VOCAB_NFORMATS];
    bool kept[VOCAB_NFORMATS];
    for (int i = 0; i < VOCAB_NFORMATS; i++) {
        names[i] = vocab_formats[i].name;
        kept[i] = !keep || keep(&vocab_formats[i]);
    }
    return vocab_join_names(names, kept, VOCAB_NFORMATS, last, buf, n);
}

char *vocab_storage_join_named(const char *last, char *buf, size_t n)
{
    const char *names[VOCAB_NSTORAGES];
    bool kept[VOCAB_NSTORAGES];
    for (int i = 0; i < VOCAB_NSTORAGES; i++) {
        names[i] = vocab_storages[i].name;
        kept[i] = !vocab_storages[i].custom;
    }
    return vocab_join_names(names, kept, VOCAB_NSTORAGES, last, buf, n);
}

bool vocab_storage_capped(const struct vocab_storage *s)
{
    return s->custom || s->read_mbps > 0 || s->latency_ms > 0 || s->concurrency > 0;
}

bool vocab_format_converted(const struct vocab_format *f)
{
    return f->files || f->records || f->tfrecord;
}

bool vocab_format_lossy(const struct vocab_format *f)
{
    return f->lossy;
}

bool vocab_format_leveled(const struct vocab_format *f)
{
    return f->max_level > 0;
}

/* spec_table.c's choice_at functions: one list each. */
#define VOCAB_AT(fn, list)                                                                     \
    const char *fn(int i)                                                                      \
    {                                                                                          \
        return vocab_name(list, i);                                                            \
    }
VOCAB_AT(vocab_strategy_at, VOCAB_STRATEGY)
VOCAB_AT(vocab_engine_at, VOCAB_ENGINE)
VOCAB_AT(vocab_backend_at, VOCAB_BACKEND)
VOCAB_AT(vocab_format_at, VOCAB_FORMAT)
VOCAB_AT(vocab_storage_at, VOCAB_STORAGE)
VOCAB_AT(vocab_schedule_at, VOCAB_SCHEDULE)
VOCAB_AT(vocab_launcher_at, VOCAB_LAUNCHER)
VOCAB_AT(vocab_mpi_at, VOCAB_MPI)
VOCAB_AT(vocab_transport_at, VOCAB_TRANSPORT)
VOCAB_AT(vocab_fault_at, VOCAB_FAULT)

/* --- JSON ------------------------------------------------------------------------------ */

static json_t *vocab_str_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

static json_t *vocab_strategy_json(const struct vocab_strategy *s)
{
    static const char *const buckets[] = {[VOCAB_BUCKETS_PER_TENSOR] = "per_tensor",
                                          [VOCAB_BUCKETS_BY_SIZE] = "by_size",
                                          [VOCAB_BUCKETS_SMALL_FIRST] = "small_first",
                                          [VOCAB_BUCKETS_FUSION] = "fusion"};
    return json_pack("{s:s, s:b, s:b, s:b, s:s, s:b, s:s}", "name", s->name,
                     "overlaps_backward", s->overlaps_backward, "shards_optimizer",
                     s->shards_optimizer, "shards_gradients", s->shards_gradients, "buckets",
                     buckets[s->buckets], "single_process", s->single_process, "description",
                     s->desc);
}

/* The elastic modes' names and what each does, in enum vocab_elastic's order. */
static const char *const vocab_elastic_names[] = {"none", "in_memory", "restart", "driver"};
static const char *const vocab_elastic_descs[] = {
    "not elastic: \"elastic\" is refused; a lost rank fails the run",
    "in memory: the survivors keep running, regroup under a new generation and restore "
    "their last in-memory commit; a replacement receives the state by broadcast",
    "restart from checkpoint: the daemon stops every rank and starts the group again with "
    "the new world size; the adapter resumes from its last checkpoint",
    "its elastic driver: horovodrun's elastic driver restarts the workers, with a host "
    "discovery script backed by the daemon's view of the live ranks",
};

const char *vocab_elastic_name(enum vocab_elastic m)
{
    return (unsigned)m < VOCAB_COUNT(vocab_elastic_names) ? vocab_elastic_names[m] : "none";
}

const char *vocab_elastic_desc(enum vocab_elastic m)
{
    return (unsigned)m < VOCAB_COUNT(vocab_elastic_descs) ? vocab_elastic_descs[m]
                                                          : vocab_elastic_descs[0];
}

static json_t *vocab_engine_json(const struct vocab_engine *g)
{
    return json_pack("{s:s, s:o, s:o, s:b, s:s, s:s}", "name", g->name, "module",
                     vocab_str_or_null(g->module), "adapter", vocab_str_or_null(g->adapter),
                     "framework", g->framework, "elastic", vocab_elastic_name(g->elastic),
                     "description", g->desc);
}

static json_t *vocab_backend_json(const struct vocab_backend *b)
{
    return json_pack("{s:s, s:s, s:s}", "name", b->name, "device", b->device, "description",
                     b->desc);
}

static json_t *vocab_format_json(const struct vocab_format *f)
{
    static const char *const codecs[] = {
        [VOCAB_CODEC_NONE] = NULL, [VOCAB_CODEC_PNG] = "png", [VOCAB_CODEC_JPEG] = "jpeg"};
    static const char *const comps[] = {[VOCAB_COMPRESS_NONE] = NULL,
                                        [VOCAB_COMPRESS_RAW] = "raw",
                                        [VOCAB_COMPRESS_ZLIB] = "zlib",
                                        [VOCAB_COMPRESS_ZSTD] = "zstd",
                                        [VOCAB_COMPRESS_JPEG] = "jpeg"};
    return json_pack("{s:s, s:b, s:b, s:b, s:o, s:o, s:b, s:i, s:s}", "name", f->name, "files",
                     f->files, "records", f->records, "tfrecord", f->tfrecord, "codec",
                     vocab_str_or_null(codecs[f->codec]), "compression",
                     vocab_str_or_null(comps[f->compression]), "lossy", f->lossy, "max_level",
                     f->max_level, "description", f->desc);
}

static json_t *vocab_storage_json(const struct vocab_storage *s)
{
    return json_pack("{s:s, s:b, s:f, s:f, s:i, s:s}", "name", s->name, "custom", s->custom,
                     "read_mbps", s->read_mbps, "latency_ms", s->latency_ms, "concurrency",
                     s->concurrency, "description", s->desc);
}

static json_t *vocab_schedule_json(const struct vocab_schedule *s)
{
    return json_pack("{s:s, s:b, s:s}", "name", s->name, "all_forward_first",
                     s->all_forward_first, "description", s->desc);
}

static json_t *vocab_launcher_json(const struct vocab_launcher *l)
{
    return json_pack("{s:s, s:b, s:b, s:s}", "name", l->name, "per_rank", l->per_rank,
                     "in_allocation", l->in_allocation, "description", l->desc);
}

static json_t *vocab_mpi_json(const struct vocab_mpi *m)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "name", m->name, "module",
                     m->module, "launcher", m->launcher, "pmi", m->pmi, "runtime", m->runtime,
                     "dev", m->dev, "description", m->desc);
}

static json_t *vocab_transport_json(const struct vocab_transport *t)
{
    return json_pack("{s:s, s:b, s:b, s:s}", "name", t->name, "shm", t->shm, "tcp", t->tcp,
                     "description", t->desc);
}

static json_t *vocab_fault_json(const struct vocab_fault *f)
{
    return json_pack("{s:s, s:b, s:b, s:b, s:b, s:s}", "name", f->name, "duration", f->duration,
                     "fraction", f->fraction, "rate", f->rate, "network", f->network,
                     "description", f->desc);
}

/* Row i of list l as JSON; NULL past the last. */
static json_t *vocab_row_json(enum vocab_list l, int i)
{
    if (!vocab_name(l, i))
        return NULL;
    switch (l) {
    case VOCAB_STRATEGY: return vocab_strategy_json(vocab_strategy(i));
    case VOCAB_ENGINE: return vocab_engine_json(vocab_engine(i));
    case VOCAB_BACKEND: return vocab_backend_json(vocab_backend(i));
    case VOCAB_FORMAT: return vocab_format_json(vocab_format(i));
    case VOCAB_STORAGE: return vocab_storage_json(vocab_storage(i));
    case VOCAB_SCHEDULE: return vocab_schedule_json(vocab_schedule(i));
    case VOCAB_LAUNCHER: return vocab_launcher_json(vocab_launcher(i));
    case VOCAB_MPI: return vocab_mpi_json(vocab_mpi(i));
    case VOCAB_TRANSPORT: return vocab_transport_json(vocab_transport(i));
    case VOCAB_FAULT: return vocab_fault_json(vocab_fault(i));
    default: return json_pack("{s:s}", "name", vocab_name(l, i));
    }
}

/* A float's shortest decimal (0.1307f is 0.1307, not 0.13070000708). */
static json_t *vocab_float_json(float x)
{
    char s[32];
    snprintf(s, sizeof s, "%.6g", (double)x);
    return json_real(strtod(s, NULL));
}

static json_t *vocab_norms_json(void)
{
    json_t *list = json_array();
    for (size_t i = 0; vocab_norm_at(i); i++) {
        const struct vocab_norm *n = vocab_norm_at(i);
        json_t *mean = json_array(), *std = json_array();
        for (int c = 0; c < n->channels; c++) {
            json_array_append_new(mean, vocab_float_json(n->mean[c]));
            json_array_append_new(std, vocab_float_json(n->std[c]));
        }
        json_array_append_new(
            list, json_pack("{s:s, s:o, s:o}", "name", n->name, "mean", mean, "std", std));
    }
    return list;
}

static json_t *vocab_models_json(void)
{
    json_t *list = json_array();
    for (size_t i = 0; model_table_at(i); i++) {
        const struct model_info *m = model_table_at(i);
        json_array_append_new(list, json_pack("{s:s, s:i, s:i, s:i, s:i, s:I}", "name", m->name,
                                              "channels", m->c, "height", m->h, "width", m->w,
                                              "classes", m->classes, "params",
                                              (json_int_t)m->params));
    }
    return list;
}

json_t *vocab_json(void)
{
    json_t *out = json_object();
    for (int l = 0; out && l < VOCAB_NLISTS; l++) {
        json_t *list = json_array();
        for (int i = 0; vocab_name((enum vocab_list)l, i); i++)
            json_array_append_new(list, vocab_row_json((enum vocab_list)l, i));
        json_object_set_new(out, vocab_list_key((enum vocab_list)l), list);
    }
    json_object_set_new(out, "norms", vocab_norms_json());
    json_object_set_new(out, "models", vocab_models_json());
    /* the step phases are written once with the results columns (common/columns.h) */
    json_object_set_new(out, "phases", phases_json());
    return out;
}
