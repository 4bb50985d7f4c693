/* spec_checks: the cross-field checks of a normalized spec, in one table, spec_checks[],
 * walked in one place (spec_checks_run, called by spec_normalize).
 *
 * Decision: a check between fields is a row of spec_rules[] in spec_table.c when one of its
 * kinds says it (a <= b, one of a and b, b's values allowed by a's, a x b = world_size):
 * those rows are also stated in the JSON Schema. What the kinds cannot say (a model
 * family's data, pipelines, the loader, the memory estimate) is a function here, a row of
 * spec_checks[] with the workloads it is of and where it runs, and a numbered clause of
 * the schema's description (spec_schema.c), which tests/integration/schemathesis_hooks.py
 * restates as a filter. The rows run in table order and the first broken one is the
 * error, so the order is part of the contract: the rules, then the model, the pipeline,
 * the loader, the memory estimate and the transport.
 *
 * Where a check runs (its scope): a spec without a sweep is one run, its top level, and
 * the error names the check's field. With a sweep, a top-level value of a swept field is
 * never run: the rules skip what names a swept field there, the functions (which do not
 * say which fields they read) do not run there at all, and every point of the sweep is
 * checked by every row, the error naming "sweep" and the point. */
#include <stdio.h>
#include <string.h>

#include "common/model_table.h"
#include "common/spec_table.h"

/* Where a row of spec_checks[] runs (bits). */
enum spec_check_scope {
    SPEC_AT_TOP = 1 << 0,       /* the top level of a spec without a sweep (its one run) */
    SPEC_AT_SWEPT_TOP = 1 << 1, /* the top level of a swept spec, given the sweep as skip */
    SPEC_AT_POINT = 1 << 2,     /* every point of the sweep, resolved (skip NULL) */
};

/* True with the field to name and the reason in why (n bytes) when spec breaks the check;
 * a field in skip (the sweep at a swept top level, else NULL) is not judged. */
typedef bool (*spec_check_fn)(const json_t *spec, enum spec_workload wl, const json_t *skip,
                              const char **field, char *why, size_t n);

struct spec_check {
    unsigned workloads; /* bit (1 << enum spec_workload) per workload it is of */
    unsigned scope;     /* enum spec_check_scope */
    spec_check_fn broken;
};

/* --- spec_rules[] (spec_table.c), judged as one check ------------------------------------ */

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

/* The rows of spec_rules[] (spec_table.c) as one check: true with the first broken rule's b in
 * *field and the reason in why; rules with a field in skip (may be NULL) are not judged. */
static bool spec_rules_broken(const json_t *spec, enum spec_workload wl, const json_t *skip,
                              const char **field, char *why, size_t n)
{
    for (size_t i = 0; i < spec_rule_count; i++) {
        const struct spec_rule *r = &spec_rule_table[i];
        if (!spec_rule_in(r, wl) ||
            (skip && (json_object_get(skip, r->a) || json_object_get(skip, r->b))))
            continue;
        *field = r->b;
        if (r->kind == SPEC_RULE_ALLOWED) {
            if (spec_allowed_broken(r, spec, why, n))
                return true;
            continue;
        }
        json_int_t a = json_integer_value(spec_field_value(spec, r->a));
        json_int_t b = json_integer_value(spec_field_value(spec, r->b));
        if (r->kind == SPEC_RULE_LE && a > b) {
            snprintf(why, n,
                     "%s (%" JSON_INTEGER_FORMAT ") must not exceed %s (%" JSON_INTEGER_FORMAT
                     ")",
                     r->a, a, r->b, b);
            return true;
        }
        json_int_t w = json_integer_value(spec_field_value(spec, "world_size"));
        if (r->kind == SPEC_RULE_FILLS && a != 0 && b != 0 && a * b != w) {
            snprintf(why, n,
                     "%s (%" JSON_INTEGER_FORMAT ") times %s (%" JSON_INTEGER_FORMAT
                     ") must be world_size (%" JSON_INTEGER_FORMAT ")",
                     r->a, a, r->b, b, w);
            return true;
        }
        if (r->kind == SPEC_RULE_ONE_OF && (a != 0) == (b != 0)) {
            if (a)
                snprintf(why, n, "%s and %s are mutually exclusive; give only one", r->a, r->b);
            else
                snprintf(why, n, "one of %s and %s must be non-zero", r->a, r->b);
            return true;
        }
    }
    return false;
}

/* --- what the rule kinds cannot say ------------------------------------------------ */

/* A train spec whose rank is estimated past SPEC_MAX_RANK_BYTES: true with the field to
 * name (dataset.shape when one sample alone is too much, else batch_size) and why. */
static bool spec_memory_broken(const json_t *spec, enum spec_workload wl, const json_t *skip,
                               const char **field, char *why, size_t n)
{
    struct spec_memory m;
    if (spec_memory_estimate(spec, &m) < 0 || m.total <= (double)SPEC_MAX_RANK_BYTES)
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
static bool spec_model_broken(const json_t *spec, enum spec_workload wl, const json_t *skip,
                              const char **field, char *why, size_t n)
{
    const char *model = json_string_value(spec_field_value(spec, "model"));
    const char *data = json_string_value(spec_field_value(spec, "dataset.name"));
    const char *path = json_string_value(spec_field_value(spec, "dataset.path"));
    const char *device = json_string_value(spec_field_value(spec, "device"));
    const char *engine = json_string_value(spec_field_value(spec, "engine"));
    const struct model_info *mi = model_table_find(model);
    int64_t seq = json_integer_value(spec_field_value(spec, "seq_len"));
    bool text = data && strcmp(data, "text") == 0;
    if (!mi)
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
    else if (mi->cpu_engine_only && device && strcmp(device, "cpu") != 0 &&
             (!engine || strcmp(engine, "ddpbench") == 0))
        *field = "model",
        snprintf(why, n,
                 "%s trains on device cpu only with engine ddpbench (its GPU runner has no "
                 "channel concat yet); the framework engines run it on a GPU",
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
static bool spec_pipeline_broken(const json_t *spec, enum spec_workload wl, const json_t *skip,
                                 const char **field, char *why, size_t n)
{
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
    else if (mi && mi->embd > 0 && spec_strategy_of(spec) &&
             spec_strategy_of(spec)->shards_optimizer)
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
 * another profile than local would measure nothing; for the same reason a storage_layer
 * other than auto is refused where nothing is read while training (synthetic, text,
 * native). True with field and reason. */
static bool spec_loader_broken(const json_t *spec, enum spec_workload wl, const json_t *skip,
                               const char **field, char *why, size_t n)
{
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
    const struct vocab_storage *st = vocab_storage(vocab_find(VOCAB_STORAGE, storage));
    const struct vocab_format *fmt = vocab_format(vocab_find(VOCAB_FORMAT, format));
    for (size_t i = 0; st && !st->custom && i < 3; i++)
        if (spec_storage_set(spec, reads[i])) {
            *field = reads[i];
            snprintf(why, n,
                     "%s is custom storage's figure; dataset.storage \"%s\" has its own",
                     reads[i], storage);
            return true;
        }
    bool image = data && strcmp(data, "synthetic") != 0 && strcmp(data, "text") != 0;
    const char *layer = json_string_value(spec_field_value(spec, "dataset.storage_layer"));
    if (layer && strcmp(layer, "auto") != 0 &&
        (!image || (fmt && !vocab_format_converted(fmt)))) {
        *field = "dataset.storage_layer";
        snprintf(why, n,
                 "dataset.storage_layer \"%s\" sits under the reads made while training; %s "
                 "reads nothing then: leave it auto%s",
                 layer, image ? "format native reads the set whole at start" : data,
                 image ? " or choose a file-backed dataset.format" : "");
        return true;
    }
    if (image && st && vocab_storage_capped(st) && fmt && !vocab_format_converted(fmt)) {
        *field = "dataset.storage";
        snprintf(why, n,
                 "dataset.storage \"%s\" caps the reads made while training; format native "
                 "reads %s whole at start: choose a file-backed dataset.format",
                 storage, data);
        return true;
    }
    return false;
}

/* The ranks of a spec that places them itself on more than one node: nodes above 1, or
 * ranks_per_node below world_size. 0 and 0 leave it to the scheduler (409 there). */
static bool spec_spans_nodes(const json_t *spec, int64_t *nodes)
{
    int64_t n = json_integer_value(spec_field_value(spec, "nodes"));
    int64_t rpn = json_integer_value(spec_field_value(spec, "ranks_per_node"));
    int64_t world = json_integer_value(spec_field_value(spec, "world_size"));
    *nodes = n > 0 ? n : rpn > 0 ? (world + rpn - 1) / rpn : 1;
    return *nodes > 1;
}

/* A transport without TCP (shm) keeps every rank on one node: a spec whose nodes or
 * ranks_per_node place its ranks on several is refused naming transport. */
static bool spec_transport_broken(const json_t *spec, enum spec_workload wl, const json_t *skip,
                                  const char **field, char *why, size_t n)
{
    const char *name = json_string_value(spec_field_value(spec, "transport"));
    const struct vocab_transport *t = vocab_transport(vocab_find(VOCAB_TRANSPORT, name));
    int64_t nodes;
    if (!t || t->tcp || !spec_spans_nodes(spec, &nodes))
        return false;
    *field = "transport";
    snprintf(why, n,
             "transport \"%s\" moves bytes through one node's shared memory, but nodes and "
             "ranks_per_node place the ranks on %lld nodes; use transport \"auto\" (shared "
             "memory inside each node, TCP across) or \"tcp\"",
             name, (long long)nodes);
    return true;
}

/* A fault must target a rank and a node the run has (spec_faults.c): the nodes are known
 * here when the spec places its ranks itself (nodes, ranks_per_node), else once the run is
 * placed (the daemon checks again then). Not a row of spec_checks[]: its error names the
 * fault's member ("faults[1].rank"), a name no row's fixed field could hold. */
static int spec_faults_placement(const json_t *spec, struct err *e)
{
    int64_t n = json_integer_value(spec_field_value(spec, "nodes"));
    int64_t rpn = json_integer_value(spec_field_value(spec, "ranks_per_node"));
    int64_t world = json_integer_value(spec_field_value(spec, "world_size"));
    int64_t nodes = n > 0 ? n : rpn > 0 ? (world + rpn - 1) / rpn : 0;
    const json_t *faults = spec_field_value(spec, "faults");
    return faults ? spec_faults_check_placement(faults, (int)world, (int)nodes, "faults", e)
                  : 0;
}

/* Elastic mode (issue 32): min_ranks <= world_size, max_ranks 0 (world_size) or from
 * min_ranks to world_size; a pipeline cannot lose a stage (no re-partitioning), an MPI
 * world cannot shrink, and tensorflow, deepspeed and script have no way to recover
 * (common/vocab.h's engine attribute elastic). True with field and reason. */
static bool spec_elastic_broken(const json_t *spec, enum spec_workload wl, const json_t *skip,
                                const char **field, char *why, size_t n)
{
    if (!json_object_get(spec, "elastic"))
        return false;
    int64_t lo = json_integer_value(spec_field_value(spec, "elastic.min_ranks"));
    int64_t hi = json_integer_value(spec_field_value(spec, "elastic.max_ranks"));
    int64_t world = json_integer_value(spec_field_value(spec, "world_size"));
    const char *backend = json_string_value(spec_field_value(spec, "backend"));
    const char *engine = json_string_value(spec_field_value(spec, "engine"));
    const struct vocab_engine *g = vocab_engine(vocab_find(VOCAB_ENGINE, engine));
    if (lo > world)
        *field = "elastic.min_ranks",
        snprintf(why, n, "min_ranks %lld is more than world_size %lld", (long long)lo,
                 (long long)world);
    else if (hi != 0 && (hi < lo || hi > world))
        *field = "elastic.max_ranks",
        snprintf(why, n,
                 "max_ranks %lld must be from min_ranks %lld to world_size %lld "
                 "(0: world_size)",
                 (long long)hi, (long long)lo, (long long)world);
    else if (json_integer_value(spec_field_value(spec, "pipeline")) > 1)
        *field = "pipeline",
        snprintf(why, n,
                 "elastic runs cannot be pipelines: a lost stage cannot be "
                 "re-partitioned among the survivors");
    else if (backend && strcmp(backend, vocab_name(VOCAB_BACKEND, VOCAB_BACKEND_MPI)) == 0)
        *field = "backend",
        snprintf(why, n,
                 "elastic runs cannot use backend mpi: an MPI world cannot shrink "
                 "(use tcp)");
    else if (g && g->elastic == VOCAB_ELASTIC_NONE)
        *field = "engine", snprintf(why, n,
                                    "engine %s is not elastic (%s); elastic engines: ddpbench, "
                                    "pytorch, horovod (GET /v1/engines)",
                                    engine, vocab_elastic_desc(VOCAB_ELASTIC_NONE));
    else
        return false;
    return true;
}

/* Issue 33's precision knobs: loss_scale and loss_scale_window are fp16's (another
 * precision has no loss scale to set); ddpbench's CUDA engine does not clip (the norm
 * is a host loop here); a pipeline's stages neither clip by a global norm
 * (it would span the stages) nor train bf16 (its stages are prepared in fp32). True with
 * field and reason. */
static bool spec_precision_broken(const json_t *spec, enum spec_workload wl, const json_t *skip,
                                  const char **field, char *why, size_t n)
{
    const char *prec = json_string_value(spec_field_value(spec, "precision"));
    double scale = json_number_value(spec_field_value(spec, "loss_scale"));
    int64_t window = json_integer_value(spec_field_value(spec, "loss_scale_window"));
    double clip = json_number_value(spec_field_value(spec, "clip_grad_norm"));
    int64_t pipeline = json_integer_value(spec_field_value(spec, "pipeline"));
    const char *device = json_string_value(spec_field_value(spec, "device"));
    const char *engine = json_string_value(spec_field_value(spec, "engine"));
    bool fp16 = prec && strcmp(prec, "fp16") == 0;
    if (!fp16 && scale != 0)
        *field = "loss_scale",
        snprintf(why, n, "loss_scale is fp16's loss scaling; precision \"%s\" has none",
                 prec ? prec : "");
    else if (!fp16 && window != 2000)
        *field = "loss_scale_window",
        snprintf(why, n,
                 "loss_scale_window is fp16's dynamic loss scaling; precision \"%s\" "
                 "has none",
                 prec ? prec : "");
    else if (clip > 0 && device && strcmp(device, "cuda") == 0 && engine &&
             strcmp(engine, "ddpbench") == 0)
        *field = "clip_grad_norm",
        snprintf(why, n,
                 "ddpbench's engine clips on the host; device cuda keeps the "
                 "gradients on the GPU (no device norm yet)");
    else if (pipeline > 1 && clip > 0)
        *field = "clip_grad_norm",
        snprintf(why, n,
                 "a pipeline's global gradient norm would span its stages; clipping "
                 "is for data-parallel runs (pipeline 1)");
    else if (pipeline > 1 && prec && strcmp(prec, "bf16") == 0)
        *field = "precision",
        snprintf(why, n,
                 "pipeline stages train in fp32; bf16 is for data-parallel runs "
                 "(pipeline 1)");
    else
        return false;
    return true;
}

/* A single-process strategy (issue 33: mirrored, dp; vocab.h single_process) runs its
 * world_size replicas in one process the daemon forks: on one node, under launcher
 * ddpbench, not elastic, not a pipeline. True with field and reason. */
static bool spec_single_process_broken(const json_t *spec, enum spec_workload wl,
                                       const json_t *skip, const char **field, char *why,
                                       size_t n)
{
    const struct vocab_strategy *st = spec_strategy_of(spec);
    const char *launcher = json_string_value(spec_field_value(spec, "launcher"));
    int64_t nodes;
    if (!st || !st->single_process)
        return false;
    if (spec_spans_nodes(spec, &nodes))
        *field = "nodes";
    else if (launcher && strcmp(launcher, vocab_name(VOCAB_LAUNCHER, VOCAB_LAUNCHER_DDPBENCH)))
        *field = "launcher";
    else if (json_object_get(spec, "elastic"))
        *field = "elastic.min_ranks";
    else if (json_integer_value(spec_field_value(spec, "pipeline")) > 1)
        *field = "pipeline";
    else
        return false;
    snprintf(why, n,
             "strategy %s runs its world_size replicas in one process the daemon starts: on "
             "one node (nodes at most 1, ranks_per_node 0 or world_size), launcher ddpbench, "
             "not elastic, pipeline 1",
             st->name);
    return true;
}

/* A collective on a framework engine (issue 35): only pytorch runs one, torch.distributed
 * over gloo on the CPU, with what gloo has: no sendrecv or reduce_scatter, no forced
 * algorithm, no bfloat16,
 * no model-shaped sizes (the C worker computes those). True with field and reason. */
static bool spec_collective_engine_broken(const json_t *spec, enum spec_workload wl,
                                          const json_t *skip, const char **field, char *why,
                                          size_t n)
{
    (void)wl;
    (void)skip;
    const char *engine = json_string_value(spec_field_value(spec, "engine"));
    if (!engine || strcmp(engine, "ddpbench") == 0)
        return false;
    const char *backend = json_string_value(spec_field_value(spec, "backend"));
    const char *device = json_string_value(spec_field_value(spec, "device"));
    const char *op = json_string_value(spec_field_value(spec, "op"));
    const char *alg = json_string_value(spec_field_value(spec, "algorithm"));
    const char *dtype = json_string_value(spec_field_value(spec, "dtype"));
    const char *model = json_string_value(spec_field_value(spec, "buckets_of"));
    if (strcmp(engine, "pytorch") != 0)
        *field = "engine",
        snprintf(why, n, "a collective runs on engine ddpbench or pytorch, not %s", engine);
    else if ((backend && strcmp(backend, "tcp") != 0) || (device && strcmp(device, "cpu") != 0))
        *field = backend && strcmp(backend, "tcp") != 0 ? "backend" : "device",
        snprintf(why, n,
                 "engine pytorch measures torch.distributed's gloo: backend tcp, "
                 "device cpu");
    else if (op && (strcmp(op, "sendrecv") == 0 || strcmp(op, "reduce_scatter") == 0))
        *field = "op", snprintf(why, n,
                                "engine pytorch measures allreduce, all_gather and "
                                "broadcast (torch 1.13's gloo has no reduce_scatter)");
    else if (alg && strcmp(alg, "auto") != 0)
        *field = "algorithm", snprintf(why, n, "gloo chooses its own algorithm: auto only");
    else if (dtype && strcmp(dtype, "bfloat16") == 0)
        *field = "dtype", snprintf(why, n, "torch 1.13's gloo has no bfloat16");
    else if (model && strcmp(model, "none") != 0)
        *field = "buckets_of", snprintf(why, n,
                                        "engine pytorch takes explicit sizes: "
                                        "buckets_of none");
    else
        return false;
    return true;
}

/* --- the table and its walk -------------------------------------------------------- */

/* Every cross-field check, in the order they are judged; the comment names its clause
 * in the schema's description (spec_schema.c). */
static const struct spec_check spec_checks[] = {
    /* spec_rules[]: (1) min_bytes, (5) nodes and ranks_per_node; the schema states the rest */
    {SPEC_WL_ANY, SPEC_AT_TOP | SPEC_AT_SWEPT_TOP | SPEC_AT_POINT, spec_rules_broken},
    {SPEC_WL_TRAIN, SPEC_AT_TOP | SPEC_AT_POINT, spec_model_broken},                  /* (6) */
    {SPEC_WL_TRAIN, SPEC_AT_TOP | SPEC_AT_POINT, spec_pipeline_broken},               /* (7) */
    {SPEC_WL_TRAIN, SPEC_AT_TOP | SPEC_AT_POINT, spec_loader_broken},                 /* (8) */
    {SPEC_WL_TRAIN, SPEC_AT_TOP | SPEC_AT_POINT, spec_memory_broken},                 /* (4) */
    {SPEC_WL_ANY, SPEC_AT_TOP | SPEC_AT_POINT, spec_transport_broken},                /* (10) */
    {SPEC_WL_TRAIN, SPEC_AT_TOP | SPEC_AT_POINT, spec_elastic_broken},                /* (12) */
    {SPEC_WL_TRAIN, SPEC_AT_TOP | SPEC_AT_POINT, spec_precision_broken},              /* (14) */
    {SPEC_WL_TRAIN, SPEC_AT_TOP | SPEC_AT_POINT, spec_single_process_broken},         /* (15) */
    {SPEC_WL_COLLECTIVE, SPEC_AT_TOP | SPEC_AT_POINT, spec_collective_engine_broken}, /* (16) */
};

/* The first row of wl running at scope that spec breaks: true with its field and why. */
static bool spec_checks_broken(const json_t *spec, enum spec_workload wl, unsigned scope,
                               const json_t *skip, const char **field, char *why, size_t n)
{
    for (size_t i = 0; i < SPEC_COUNT(spec_checks); i++) {
        const struct spec_check *c = &spec_checks[i];
        if (((c->workloads >> (unsigned)wl) & 1u) && (c->scope & scope) &&
            c->broken(spec, wl, skip, field, why, n))
            return true;
    }
    return false;
}

struct spec_point_arg {
    enum spec_workload wl;
    size_t total;
    const json_t *sweep; /* borrowed: the normalized sweep */
};

/* The field a point's error names: sweep.zip[i].field when the check's field is one the
 * point's zip point set (issue 33), else "sweep". */
static const char *spec_point_field(const struct spec_point_arg *a, const json_t *params,
                                    const char *field, char *buf, size_t n)
{
    int z = spec_sweep_zip_index(a->sweep, params);
    const json_t *pt = json_array_get(json_object_get(a->sweep, SPEC_SWEEP_ZIP), (size_t)z);
    if (z < 0 || !field || !json_object_get(pt, field))
        return "sweep";
    snprintf(buf, n, "sweep.zip[%d].%s", z, field);
    return buf;
}

static int spec_point_check(void *arg, size_t index, const json_t *params,
                            const json_t *resolved, struct err *e)
{
    const struct spec_point_arg *a = arg;
    char why[512], p[96], at[96];
    const char *field = NULL;
    struct err fe = {0};
    spec_value_text(params, p, sizeof p);
    if (spec_checks_broken(resolved, a->wl, SPEC_AT_POINT, NULL, &field, why, sizeof why))
        return err_set(e, ERR_INVALID, spec_point_field(a, params, field, at, sizeof at),
                       "sweep point %zu of %zu %s: %s", index + 1, a->total, p, why);
    if (spec_faults_placement(resolved, &fe) < 0)
        return err_set(e, fe.code, fe.field, "sweep point %zu of %zu %s: %s", index + 1,
                       a->total, p, fe.msg);
    return 0;
}

int spec_checks_run(const json_t *norm, enum spec_workload wl, struct err *e)
{
    char why[512];
    const char *field;
    const json_t *sweep = json_object_get(norm, "sweep");
    json_t *varied = sweep ? spec_sweep_fields(sweep) : NULL; /* swept or zipped: skipped */
    bool broken = spec_checks_broken(norm, wl, sweep ? SPEC_AT_SWEPT_TOP : SPEC_AT_TOP, varied,
                                     &field, why, sizeof why);
    json_decref(varied);
    if (broken)
        return err_set(e, ERR_INVALID, field, "%s: %s", field, why);
    if (!sweep)
        return spec_faults_placement(norm, e);
    struct spec_point_arg a = {.wl = wl, .sweep = sweep};
    if (spec_sweep_count(norm, SPEC_MAX_RUNS, &a.total, e) < 0)
        return -1;
    return spec_sweep_walk(norm, spec_point_check, &a, e);
}
