/* h_experiments: create, list and get experiments.
 *
 * Decision: a submission is validated completely (spec, sweep expansion, every point's
 * slot and memory needs) before anything is stored, and stored in one transaction with all its
 * runs, so an experiment either exists whole or not at all. */
#include <ctype.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api/handlers.h"
#include "common/columns.h"
#include "common/log.h"
#include "common/paths.h"
#include "common/spec.h"
#include "common/vocab.h"
#include "daemon/gpu_slots.h"
#include "daemon/model.h"
#include "daemon/results.h"
#include "daemon/storage_mount.h"

static const char *const h_no_args[] = {NULL};

/* Runs per experiment reply unless ?runs_limit= says otherwise: a sweep has up to
 * SPEC_MAX_RUNS (1,024) runs, and a reply that always carried them all cost every
 * client (and the list-then-open dashboard) the largest experiment's size. */
#define H_RUNS_PAGE 100

/* A device "cuda" point must fit on this node's GPUs (gpu_slots_plan with all of them
 * free): ERR_CONFLICT naming "device" (no GPU) or "world_size" (more ranks than GPUs
 * without emulate_multi_rank). */
static int h_check_gpus(struct api_ctx *ctx, const json_t *spec, struct err *e)
{
    const char *device = json_string_value(json_object_get(spec, "device"));
    if (!device || strcmp(device, "cuda") != 0)
        return 0;
    bool none_used[GPU_SLOTS_MAX] = {false};
    struct gpu_plan *plan = malloc(sizeof *plan); /* 4 KiB: off the HTTP thread's stack */
    if (!plan)
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    int rc = gpu_slots_plan(scheduler_gpus_total(ctx->sched), none_used,
                            (int)json_integer_value(json_object_get(spec, "world_size")),
                            json_is_true(json_object_get(spec, "emulate_multi_rank")), plan, e);
    free(plan);
    return rc < 0 ? -1 : 0;
}

/* A device "cpu" point whose ranks (all on this node) are estimated to need more memory
 * than the node has can never run: ERR_CONFLICT naming "batch_size", with the estimate.
 * The node's physical memory (sysconf), not MemAvailable: runs wait in the queue, so what
 * is free at submit says nothing about when one starts, and a limit that moves with the
 * load would refuse the same spec one minute and take it the next; like the slot check,
 * this refuses only what cannot fit even on an idle node. Device "cuda" keeps activations
 * on the GPU, whose memory the GPU runner checks when it allocates. */
static int h_check_memory(const json_t *spec, struct err *e)
{
    struct spec_memory m;
    const char *device = json_string_value(json_object_get(spec, "device"));
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (!device || strcmp(device, "cpu") != 0 || spec_memory_estimate(spec, &m) < 0 ||
        pages <= 0 || page <= 0)
        return 0;
    double gib = 1024.0 * 1024.0 * 1024.0, node = (double)pages * (double)page;
    json_int_t ws = json_integer_value(json_object_get(spec, "world_size"));
    if (m.total * (double)ws <= node)
        return 0;
    char text[256];
    spec_memory_text(&m, text, sizeof text);
    return err_set(e, ERR_CONFLICT, "batch_size",
                   "batch_size: %lld rank%s of %s need%s %.4g GiB, more than this node's %.4g "
                   "GiB of memory; lower batch_size or world_size",
                   (long long)ws, ws == 1 ? "" : "s", text, ws == 1 ? "s" : "",
                   m.total * (double)ws / gib, node / gib);
}

/* Whether the point's ranks could ever be placed on the cluster's nodes up now (each
 * node's whole CPU slots) over want nodes of rpn ranks each (cluster_place's 0: as few as
 * fit); *up gets how many nodes there are. */
static bool h_cluster_holds(struct api_ctx *ctx, const json_t *spec, int want, int rpn, int *up)
{
    struct cluster_slot_view v[CLUSTER_MAX_NODES];
    int cap[CLUSTER_MAX_NODES], count[CLUSTER_MAX_NODES];
    int n = cluster_capacity(ctx->cluster, v, CLUSTER_MAX_NODES);
    for (int i = 0; i < n; i++)
        cap[i] = v[i].free_slots;
    *up = n;
    int ws = (int)json_integer_value(json_object_get(spec, "world_size"));
    return cluster_place(ws, spec_slots_per_rank(spec), want, rpn, cap, n, count) > 0;
}

/* A point placed on several nodes must fit the cluster's nodes up now (each node's
 * whole CPU slots), or it would wait forever: ERR_CONFLICT naming "nodes". */
static int h_check_nodes(struct api_ctx *ctx, const json_t *spec, struct err *e)
{
    int ws = (int)json_integer_value(json_object_get(spec, "world_size"));
    int want = (int)json_integer_value(json_object_get(spec, "nodes"));
    int rpn = (int)json_integer_value(json_object_get(spec, "ranks_per_node"));
    int per = spec_slots_per_rank(spec), n;
    if (h_cluster_holds(ctx, spec, want, rpn, &n))
        return 0;
    return err_set(e, ERR_CONFLICT, "nodes",
                   "world_size %d with nodes %d and ranks_per_node %d (%d CPU slot(s) a rank) "
                   "cannot be placed: the cluster has %d node(s) up (GET /v1/nodes); start "
                   "more followers or lower nodes",
                   ws, want, rpn, per, n);
}

/* A train point's engine must run wherever its ranks may go: ddpbench always does; a
 * framework engine where the node's probe finds it installed and launched
 * (daemon/engines.h): this node, and every follower that is up when the point may span
 * nodes (their probes arrive with their syncs). A run that silently trained with another
 * engine would be a wrong result, so anything else is 409 naming "engine" (or "backend" /
 * "mpi", an engine whose build there lacks the spec's backend or MPI: Horovod without MPI,
 * or linked against OpenMPI when the spec asks for MPICH). */
static int h_check_engine(struct api_ctx *ctx, const json_t *spec, bool spread, struct err *e)
{
    const char *engine = json_string_value(json_object_get(spec, "engine"));
    if (!engine || strcmp(engine, "ddpbench") == 0)
        return 0;
    if (engines_check(ctx->engines, spec, e) < 0)
        return -1;
    return spread ? cluster_engine_check(ctx->cluster, spec, e) : 0;
}

/* A point's launcher must be able to start its ranks here: srun only inside a Slurm
 * allocation (the daemon's SLURM_JOB_ID), mpirun across nodes only with the daemon's
 * --mpi-agent (no ssh: daemon/launch_plan.h): ERR_CONFLICT naming "launcher". */
static int h_check_launcher(struct api_ctx *ctx, const json_t *spec, bool spread, struct err *e)
{
    const char *launcher = json_string_value(json_object_get(spec, "launcher"));
    if (launcher && strcmp(launcher, "srun") == 0 && !ctx->cfg->slurm_job[0])
        return err_set(e, ERR_CONFLICT, "launcher",
                       "launcher \"srun\": ddpbenchd is not running inside a Slurm allocation "
                       "(no SLURM_JOB_ID); start it from sbatch or salloc "
                       "(deploy/slurm/ddpbench.sbatch --srun), or use launcher \"ddpbench\"");
    if (launcher && strcmp(launcher, "mpirun") == 0 && spread &&
        !scheduler_launcher_spreads(ctx->cfg, launcher))
        return err_set(e, ERR_CONFLICT, "launcher",
                       "launcher \"mpirun\" starts ranks on this node only: ddpbenchd has no "
                       "--mpi-agent to start MPI's daemon on other nodes (deploy/netlab.sh "
                       "gives one); across nodes use launcher \"srun\" in a Slurm "
                       "allocation, or \"ddpbench\"");
    return 0;
}

/* A point's link fault shapes an emulated node's link: only a daemon run under netlab
 * (--network-profile, deploy/netlab.sh) has one it may shape; anywhere else the fault
 * could never act, so it is 400 naming "faults[i].kind". The placement's checks (a node
 * beyond the run's) wait for the run to be placed (daemon/faults.c). */
static int h_check_faults(struct api_ctx *ctx, const json_t *spec, struct err *e)
{
    size_t i;
    const json_t *f;
    json_array_foreach(json_object_get(spec, "faults"), i, f)
    {
        const char *kind = json_string_value(json_object_get(f, "kind"));
        const struct vocab_fault *k = vocab_fault(vocab_find(VOCAB_FAULT, kind));
        char field[32];
        snprintf(field, sizeof field, "faults[%zu].kind", i);
        if (k && k->network && !ctx->cfg->network_profile[0])
            return err_set(e, ERR_INVALID, field,
                           "%s: \"%s\" shapes a node's emulated network link, and ddpbenchd "
                           "has none here (no --network-profile): run the cluster under "
                           "deploy/netlab.sh",
                           field, kind);
    }
    return 0;
}

/* A point with transport shm keeps its ranks on one node (the scheduler places it on one
 * only): when they do not fit this node, some node of the cluster up now must hold them all
 * (its whole CPU slots), or it would wait forever: ERR_CONFLICT naming "transport". A
 * point that does not fit this node and has no cluster is refused for its world_size
 * after this. */
static int h_check_transport(struct api_ctx *ctx, const json_t *spec, int need, int total,
                             struct err *e)
{
    const char *name = json_string_value(json_object_get(spec, "transport"));
    const struct vocab_transport *t = vocab_transport(vocab_find(VOCAB_TRANSPORT, name));
    int up = 0, known = 0, n;
    cluster_count(ctx->cluster, &up, &known);
    if (!t || t->tcp || need <= total || up <= 1 || h_cluster_holds(ctx, spec, 1, 0, &n))
        return 0;
    int ws = (int)json_integer_value(json_object_get(spec, "world_size"));
    int per = spec_slots_per_rank(spec);
    return err_set(e, ERR_CONFLICT, "transport",
                   "transport \"%s\" keeps every rank on one node, and no node of the "
                   "cluster's %d up has CPU slots for world_size %d (%d slot(s) a rank); use "
                   "transport \"auto\" or \"tcp\" to place the ranks on several nodes",
                   name, n, ws, per);
}

/* A point whose reads go through per-rank storage mounts (dataset.storage_layer resolved
 * to mount, common/spec_storage.c) needs them on this node: ddpbenchd starts each rank's
 * mount, so only for ranks it starts itself here (launcher ddpbench, one node), and only
 * with a FUSE device it can open and the ddpbench-fs program (daemon/storage_mount.h);
 * else ERR_CONFLICT naming "dataset.storage" and why. */
static int h_check_storage(struct api_ctx *ctx, const json_t *spec, bool spread, struct err *e)
{
    const char *launcher = json_string_value(json_object_get(spec, "launcher"));
    if (spec_storage_layer_json(spec) != SPEC_STORAGE_MOUNT)
        return 0;
    if ((launcher && strcmp(launcher, "ddpbench") != 0) || spread)
        return err_set(e, ERR_CONFLICT, "dataset.storage",
                       "dataset.storage: this run reads through per-rank storage mounts, "
                       "which ddpbenchd makes for the ranks it starts on its own node; %s "
                       "starts them elsewhere: use launcher \"ddpbench\" on one node, or "
                       "storage_layer in_process with engine ddpbench",
                       spread ? "a run across nodes" : "another launcher");
    return storage_mount_available(ctx->cfg->fs_path, ctx->cfg->fuse_device, e);
}

/* A point's dataset.path must resolve beneath one of the daemon's --data-dir directories
 * (common/paths.h), or it is 400 naming "dataset.path": the workers read it as the
 * daemon's user. A missing path and a forbidden one get one message, so the API tells
 * nobody which files exist elsewhere. The workers check again at open (they are given the
 * directories), since the file may move between submit and run. */
static int h_check_dataset(struct api_ctx *ctx, const json_t *spec, struct err *e)
{
    const char *path = json_string_value(
        json_object_get(json_object_get(spec, "dataset"), "path"));
    char real[PATH_MAX];
    if (!path || !path[0] || paths_resolve_beneath(path, ctx->cfg->data_dirs, real) == 0)
        return 0;
    return err_set(e, ERR_INVALID, "dataset.path",
                   "dataset.path '%s': not found or not allowed (datasets live under the "
                   "daemon's --data-dir directories: %s)",
                   path, ctx->cfg->data_dirs);
}

/* Every point must fit on this node (or the cluster's), or it would wait forever. */
static int h_check_slots(struct api_ctx *ctx, const json_t *runs, struct err *e)
{
    int total = scheduler_slots_total(ctx->sched);
    size_t i;
    json_t *run;
    json_array_foreach(runs, i, run)
    {
        json_t *spec = json_object_get(run, "spec");
        json_int_t ws = json_integer_value(json_object_get(spec, "world_size"));
        json_int_t need = ws * spec_slots_per_rank(spec);
        bool spread = json_integer_value(json_object_get(spec, "nodes")) > 1 ||
                      (json_integer_value(json_object_get(spec, "ranks_per_node")) > 0 &&
                       json_integer_value(json_object_get(spec, "ranks_per_node")) < ws);
        int up = 0, known = 0;
        cluster_count(ctx->cluster, &up, &known);
        const char *device = json_string_value(json_object_get(spec, "device"));
        if (spread && device && strcmp(device, "cuda") == 0)
            return err_set(e, ERR_CONFLICT, "nodes",
                           "device cuda runs stay on one node for now: NCCL across ddpbench "
                           "nodes is not built (leave nodes and ranks_per_node at 0)");
        const char *launcher = json_string_value(json_object_get(spec, "launcher"));
        bool here = !scheduler_launcher_spreads(ctx->cfg, launcher);
        if (h_check_launcher(ctx, spec, spread, e) < 0 || h_check_faults(ctx, spec, e) < 0 ||
            h_check_transport(ctx, spec, (int)need, total, e) < 0)
            return -1;
        /* srun's ranks take Slurm's slots in the allocation, none of ours (scheduler.c) */
        bool by_slurm = launcher && strcmp(launcher, "srun") == 0;
        if (!by_slurm && !here && (spread || (need > total && up > 1))) {
            if (h_check_nodes(ctx, spec, e) < 0)
                return -1;
        } else if (!by_slurm && need > total) {
            return err_set(e, ERR_CONFLICT, "world_size",
                           "world_size %lld needs %lld CPU slots (threads per rank included) "
                           "but this node has %d (start ddpbenchd with --cpu-slots to allow "
                           "oversubscription)",
                           (long long)ws, (long long)need, total);
        }
        if (h_check_dataset(ctx, spec, e) < 0 ||
            h_check_storage(ctx, spec, spread || (need > total && up > 1), e) < 0 ||
            (ctx->engines && engines_mpi_check(ctx->engines, spec, e) < 0) ||
            h_check_engine(ctx, spec, spread || (need > total && up > 1), e) < 0 ||
            h_check_gpus(ctx, spec, e) < 0 || h_check_memory(spec, e) < 0)
            return -1;
    }
    return 0;
}

/* Serializes the expanded runs for db_create_experiment, each with this node's network
 * profile. Strings owned by texts[]; the profile borrowed from cfg. */
static int h_encode_runs(const struct config *cfg, const json_t *runs, struct db_new_run *out,
                         char **texts, struct err *e)
{
    size_t i;
    json_t *run;
    json_array_foreach(runs, i, run)
    {
        json_t *spec = json_object_get(run, "spec");
        texts[2 * i] = json_dumps(json_object_get(run, "params"),
                                  JSON_COMPACT | JSON_SORT_KEYS);
        texts[2 * i + 1] = json_dumps(spec, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!texts[2 * i] || !texts[2 * i + 1])
            return err_set(e, ERR_NOMEM, NULL, "out of memory");
        out[i] = (struct db_new_run){
            texts[2 * i], texts[2 * i + 1],
            (int)json_integer_value(json_object_get(spec, "world_size")),
            cfg->network_profile[0] ? cfg->network_profile : NULL};
    }
    return 0;
}

static int h_store_experiment(struct api_ctx *ctx, const json_t *spec, const json_t *runs,
                              int64_t *id, struct err *e)
{
    size_t n = json_array_size(runs);
    struct db_new_run *rows = calloc(n, sizeof *rows);
    char **texts = calloc(2 * n, sizeof *texts);
    char *spec_text = json_dumps(spec, JSON_COMPACT | JSON_PRESERVE_ORDER);
    int rc = -1;
    if (!rows || !texts || !spec_text)
        err_set(e, ERR_NOMEM, NULL, "out of memory");
    else if (h_encode_runs(ctx->cfg, runs, rows, texts, e) == 0)
        rc = db_create_experiment(ctx->db, json_string_value(json_object_get(spec, "name")),
                                  json_string_value(json_object_get(spec, "workload")),
                                  spec_text, rows, n, id, e);
    for (size_t i = 0; texts && i < 2 * n; i++)
        free(texts[i]);
    free(texts);
    free(rows);
    free(spec_text);
    return rc;
}

/* The experiment with a page of its runs as the reply, the text SQLite built. */
static int h_experiment_reply(struct api_ctx *ctx, int64_t id, int64_t runs_limit,
                              int64_t runs_offset, struct api_reply *rep, struct err *e)
{
    char *text = db_get_experiment_text(ctx->db, id, runs_limit, runs_offset, e);
    return text ? api_reply_json_text(rep, text, e) : -1;
}

/* A calibration (spec calibrate true, docs/model.md "Co-location and contention") that
 * names no world_size measures k = 1 .. K, K twice the node's CPUs (oversubscription
 * measured too) but at most the CPU slots a run may take here. The body with that sweep
 * added (owned, *len set), or NULL to take it as it is. */
static char *h_calibration_ranks(struct api_ctx *ctx, const char *body, size_t *len)
{
    json_t *o = json_loadb(body, *len, 0, NULL);
    json_t *sweep = json_object_get(o, "sweep");
    char *out = NULL;
    if (json_is_true(json_object_get(o, "calibrate")) && !json_object_get(o, "world_size") &&
        (!sweep || (json_is_object(sweep) && !json_object_get(sweep, "world_size") &&
                    !json_object_get(sweep, "zip")))) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        int k = (int)(cpus > 0 ? 2 * cpus : 2), slots = scheduler_slots_total(ctx->sched);
        k = slots > 0 && slots < k ? slots : k;
        k = k > CALIB_MAX_K ? CALIB_MAX_K : k;
        json_t *ks = json_array();
        for (int i = 1; i <= k; i++)
            json_array_append_new(ks, json_integer(i));
        if (!sweep)
            json_object_set_new(o, "sweep", sweep = json_object());
        json_object_set_new(sweep, "world_size", ks);
        out = json_dumps(o, JSON_COMPACT);
        *len = out ? strlen(out) : 0;
    }
    json_decref(o);
    return out;
}

int h_experiments_create(struct api_ctx *ctx, const struct api_request *req,
                         struct api_reply *rep, struct err *e)
{
    if (api_query_check(req, h_no_args, e) < 0)
        return -1;
    if (!req->body || req->body_len == 0)
        return err_set(e, ERR_INVALID, NULL,
                       "the request body must be an experiment spec "
                       "(JSON object); see GET /v1/spec/schema");
    size_t len = req->body_len;
    char *calib = h_calibration_ranks(ctx, req->body, &len);
    json_t *spec = spec_parse(calib ? calib : req->body, len, e);
    free(calib);
    if (!spec)
        return -1;
    json_t *runs = spec_expand(spec, SPEC_MAX_RUNS, e);
    int64_t id = 0;
    int rc = -1;
    if (runs && h_check_slots(ctx, runs, e) == 0 &&
        h_store_experiment(ctx, spec, runs, &id, e) == 0) {
        scheduler_wake(ctx->sched);
        rep->status = 201;
        snprintf(rep->location, sizeof rep->location, "/v1/experiments/%lld", (long long)id);
        rc = h_experiment_reply(ctx, id, H_RUNS_PAGE, 0, rep, e);
    }
    json_decref(runs);
    json_decref(spec);
    return rc;
}

static const char *const h_experiment_statuses[] = {
    "queued", "running", "succeeded", "failed", "cancelled", "interrupted", NULL,
};

static int h_check_enum(const char *key, const char *value, const char *const *allowed,
                        struct err *e)
{
    if (!value)
        return 0;
    for (const char *const *a = allowed; *a; a++)
        if (strcmp(*a, value) == 0)
            return 0;
    return err_set(e, ERR_INVALID, key,
                   "%s must be one of queued, running, succeeded, failed, "
                   "cancelled, interrupted; got '%s'",
                   key, value);
}

/* The fixed-width number at s (digits already checked). */
static int h_fixed_num(const char *s, int width)
{
    int v = 0;
    for (int i = 0; i < width; i++)
        v = v * 10 + (s[i] - '0');
    return v;
}

/* "2026-11-22", "2026-11-22T10:00:00" or with a final "Z" (UTC), fields in range. */
static bool h_parse_iso_time(const char *s, double *out)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:ddZ";
    size_t n = strlen(s);
    if (n != 10 && n != 19 && n != 20)
        return false;
    for (size_t i = 0; i < n; i++)
        if (shape[i] == 'd' ? !isdigit((unsigned char)s[i]) : s[i] != shape[i])
            return false;
    struct tm tm = {.tm_year = h_fixed_num(s, 4) - 1900,
                    .tm_mon = h_fixed_num(s + 5, 2) - 1,
                    .tm_mday = h_fixed_num(s + 8, 2)};
    if (n > 10) {
        tm.tm_hour = h_fixed_num(s + 11, 2);
        tm.tm_min = h_fixed_num(s + 14, 2);
        tm.tm_sec = h_fixed_num(s + 17, 2);
    }
    if (tm.tm_mon > 11 || tm.tm_mon < 0 || tm.tm_mday < 1 || tm.tm_mday > 31 ||
        tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 59)
        return false;
    *out = (double)timegm(&tm);
    return true;
}

/* Unix seconds: 1 to 12 digits, optionally '.' and 1 to 9 digits. */
static bool h_parse_unix_time(const char *s, double *out)
{
    size_t whole = strspn(s, "0123456789");
    size_t frac = s[whole] == '.' ? strspn(s + whole + 1, "0123456789") : 0;
    size_t end = whole + (s[whole] == '.' ? 1 + frac : 0);
    if (whole < 1 || whole > 12 || (s[whole] == '.' && (frac < 1 || frac > 9)) || s[end])
        return false;
    *out = strtod(s, NULL);
    return true;
}

/* A time bound, exactly the contract's TimeBound: Unix seconds or ISO-8601 UTC. 0 is no
 * bound. Strict by design: strtod and strptime would also take " 5", "1e3", "inf" or
 * "2026-1-1", which the contract cannot state. */
static int h_parse_time(const struct api_request *req, const char *key, double *out,
                        struct err *e)
{
    const char *s = api_query_get(req, key);
    *out = 0;
    if (!s || h_parse_unix_time(s, out) || h_parse_iso_time(s, out))
        return 0;
    return err_set(e, ERR_INVALID, key,
                   "%s must be Unix seconds or an ISO-8601 date or time "
                   "(2026-11-22, 2026-11-22T10:00:00Z), got '%s'",
                   key, s);
}

int h_experiments_list(struct api_ctx *ctx, const struct api_request *req,
                       struct api_reply *rep, struct err *e)
{
    static const char *const args[] = {"status", "name",          "workload",
                                       "model",  "created_after", "created_before",
                                       "limit",  "offset",        NULL};
    struct db_experiment_filter f = {0};
    if (api_query_check(req, args, e) < 0 ||
        api_query_int(req, "limit", 1, 1000, 50, &f.limit, e) < 0 ||
        api_query_int(req, "offset", 0, INT64_MAX / 2, 0, &f.offset, e) < 0 ||
        h_parse_time(req, "created_after", &f.created_after, e) < 0 ||
        h_parse_time(req, "created_before", &f.created_before, e) < 0)
        return -1;
    f.status = api_query_get(req, "status");
    f.name = api_query_get(req, "name");
    f.workload = api_query_get(req, "workload");
    f.model = api_query_get(req, "model");
    if (h_check_enum("status", f.status, h_experiment_statuses, e) < 0)
        return -1;
    char *text = db_list_experiments(ctx->db, &f, e); /* compact JSON from SQLite */
    return text ? api_reply_json_text(rep, text, e) : -1;
}

int h_experiments_get(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                      struct err *e)
{
    static const char *const args[] = {"runs_limit", "runs_offset", NULL};
    int64_t limit, offset;
    if (api_query_check(req, args, e) < 0 ||
        api_query_int(req, "runs_limit", 1, SPEC_MAX_RUNS, H_RUNS_PAGE, &limit, e) < 0 ||
        api_query_int(req, "runs_offset", 0, SPEC_MAX_RUNS, 0, &offset, e) < 0)
        return -1;
    return h_experiment_reply(ctx, req->ids[0], limit, offset, rep, e);
}

/* Live events for what a cancel changed at once: each queued run that will never start,
 * and the experiment's status (running runs publish their own end when they stop). */
static void h_publish_cancelled(struct api_ctx *ctx, const struct db_cancel_result *r)
{
    for (size_t i = 0; i < r->n_cancelled; i++) {
        json_t *d = json_pack("{s:I, s:I, s:s, s:s}", "run", (json_int_t)r->cancelled[i],
                              "experiment", (json_int_t)r->experiment_id, "status", "cancelled",
                              "error", "cancelled before it started");
        if (d)
            events_publish(ctx->events, r->experiment_id, "run", d);
        json_decref(d);
    }
    struct err e = {0};
    json_t *exp = db_get_experiment(ctx->db, r->experiment_id, &e);
    json_t *d = exp ? json_pack("{s:O, s:O, s:O}", "id", json_object_get(exp, "id"), "status",
                                json_object_get(exp, "status"), "runs_finished",
                                json_object_get(exp, "runs_finished"))
                    : NULL;
    if (d)
        events_publish(ctx->events, r->experiment_id, "experiment", d);
    json_decref(d);
    json_decref(exp);
}

int h_cancel(struct api_ctx *ctx, int64_t exp_id, int64_t run_id, struct err *e)
{
    struct db_cancel_result r;
    if (db_cancel(ctx->db, exp_id, run_id, &r, e) < 0)
        return -1;
    if (r.n_cancelled)
        h_publish_cancelled(ctx, &r);
    int rc = r.n_active ? scheduler_cancel_runs(ctx->sched, r.active, r.n_active, e) : 0;
    db_cancel_result_free(&r);
    return rc;
}

int h_experiments_cancel(struct api_ctx *ctx, const struct api_request *req,
                         struct api_reply *rep, struct err *e)
{
    if (api_query_check(req, h_no_args, e) < 0 || h_cancel(ctx, req->ids[0], 0, e) < 0)
        return -1;
    rep->status = 202; /* active runs stop within the kill grace period */
    return h_experiment_reply(ctx, req->ids[0], H_RUNS_PAGE, 0, rep, e);
}

static int h_rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    if (remove(path) < 0)
        log_warn("cannot remove %s: %s", path, strerror(errno));
    return 0;
}

/* Removes state_dir/runs/<id> (spec and rank logs). No shell: nftw, depth first, never
 * following links. */
static void h_remove_run_files(const struct config *cfg, int64_t run_id)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/runs/%lld", cfg->state_dir, (long long)run_id);
    if (nftw(dir, h_rm_entry, 16, FTW_DEPTH | FTW_PHYS) < 0 && errno != ENOENT)
        log_warn("cannot remove %s: %s", dir, strerror(errno));
}

int h_experiments_delete(struct api_ctx *ctx, const struct api_request *req,
                         struct api_reply *rep, struct err *e)
{
    int64_t *runs = NULL;
    size_t n = 0;
    if (api_query_check(req, h_no_args, e) < 0 ||
        db_delete_experiment(ctx->db, req->ids[0], &runs, &n, e) < 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        h_remove_run_files(ctx->cfg, runs[i]);
    free(runs);
    rep->json = json_pack("{s:I, s:I}", "deleted", (json_int_t)req->ids[0], "runs",
                          (json_int_t)n);
    return rep->json ? 0 : err_set(e, ERR_NOMEM, NULL, "out of memory");
}

#define H_MAX_GROUP_BY 8

/* Splits "a,b,c" into at most H_MAX_GROUP_BY names held in buf. "group_by=" is the empty
 * list (form style: the default, the swept fields); an empty name inside a list ("a,,b",
 * a trailing comma) is refused, since the contract's items are field names. */
static int h_split_group_by(const char *s, char *buf, size_t cap, const char **names, size_t *n,
                            struct err *e)
{
    *n = 0;
    if (!s || !*s)
        return 0;
    if (strlen(s) >= cap)
        return err_set(e, ERR_INVALID, "group_by", "group_by is too long");
    memcpy(buf, s, strlen(s) + 1);
    for (char *tok = buf; tok;) {
        char *comma = strchr(tok, ',');
        if (comma)
            *comma = '\0';
        if (!*tok)
            return err_set(e, ERR_INVALID, "group_by",
                           "group_by has an empty field name (leave group_by out for the "
                           "default: the swept fields)");
        if (*n == H_MAX_GROUP_BY)
            return err_set(e, ERR_INVALID, "group_by", "group_by takes at most %d fields",
                           H_MAX_GROUP_BY);
        names[(*n)++] = tok;
        tok = comma ? comma + 1 : NULL;
    }
    return 0;
}

/* The fits a training experiment's predictions use: those of the experiments named in
 * ?fit=, else the latest finished collective experiment's on its backend and device; with
 * ?pred_max_world=K only those measured at world <= K (rows above are extrapolated). */
static int h_results_fits(struct api_ctx *ctx, const struct db_experiment_data *data,
                          const int64_t *ids, size_t n, int max_world, struct perf_fit **fits,
                          size_t *nf, struct err *e)
{
    *fits = NULL;
    *nf = 0;
    if (strcmp(data->workload, "train") != 0 || data->nruns == 0)
        return 0;
    if (model_fits_choose(ctx->db, ids, n, data->runs[0].spec, fits, nf, e) < 0)
        return -1;
    perf_fits_restrict(*fits, nf, max_world);
    return 0;
}

int h_experiments_results(struct api_ctx *ctx, const struct api_request *req,
                          struct api_reply *rep, struct err *e)
{
    static const char *const args[] = {"group_by", "format", "fit", "pred_max_world", NULL};
    char buf[512];
    const char *names[H_MAX_GROUP_BY];
    size_t n;
    const char *format = api_query_get(req, "format");
    int64_t fit_ids[16];
    size_t nfit_ids = 0;
    int64_t max_world = 0;
    if (api_query_check(req, args, e) < 0 ||
        h_split_group_by(api_query_get(req, "group_by"), buf, sizeof buf, names, &n, e) < 0 ||
        api_query_ids(req, "fit", fit_ids, 16, &nfit_ids, e) < 0 ||
        api_query_int(req, "pred_max_world", 1, PERF_MAX_WORLD, 0, &max_world, e) < 0)
        return -1;
    if (format && strcmp(format, "json") != 0 && strcmp(format, "csv") != 0)
        return err_set(e, ERR_INVALID, "format", "format must be json or csv, got '%s'",
                       format);
    struct db_experiment_data data;
    json_t *table = NULL;
    if (db_get_experiment_data(ctx->db, req->ids[0], &data, e) == 0) {
        struct perf_fit *fits = NULL;
        size_t nf = 0;
        struct calib_set cals = {0};
        int rc = h_results_fits(ctx, &data, fit_ids, nfit_ids, (int)max_world, &fits, &nf, e);
        if (rc == 0 && strcmp(data.workload, "train") == 0)
            rc = calib_load(ctx->db, &cals, e);
        if (rc == 0)
            table = results_build_calibrated(&data, names, n, fits, nf, &cals, e);
        calib_set_free(&cals);
        free(fits);
    }
    db_experiment_data_free(&data);
    if (!table)
        return -1;
    if (format && strcmp(format, "csv") == 0) {
        rep->body = results_csv(table, &rep->body_len, e);
        rep->content_type = "text/csv; charset=utf-8";
        json_decref(table);
        return rep->body ? 0 : -1;
    }
    /* what each column is, for a client that labels them (the dashboard) */
    json_object_set_new(table, "column_info", columns_json());
    json_object_set_new(table, "phases", phases_json());
    rep->json = table;
    return 0;
}

/* A stream of one experiment's events, starting with a snapshot of the experiment so a
 * client that connects late misses nothing that matters. */
int h_experiments_events(struct api_ctx *ctx, const struct api_request *req,
                         struct api_reply *rep, struct err *e)
{
    if (api_query_check(req, h_no_args, e) < 0)
        return -1;
    struct api_stream *st = api_stream_open(ctx->events, req->ids[0]);
    if (!st)
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    json_t *exp = db_get_experiment(ctx->db, req->ids[0], e); /* after subscribing: no gap */
    if (!exp) {
        api_stream_close(st);
        return -1;
    }
    api_stream_push(st, "snapshot", exp);
    json_decref(exp);
    rep->stream = st;
    return 0;
}
