/* h_experiments: create, list and get experiments.
 *
 * Decision: a submission is validated completely (spec, sweep expansion, every point's
 * slot needs) before anything is stored, and stored in one transaction with all its
 * runs, so an experiment either exists whole or not at all. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handlers.h"
#include "spec.h"

static const char *const h_no_args[] = {NULL};

/* Every point must fit on this node, or the run would wait forever. */
static int h_check_slots(struct api_ctx *ctx, const json_t *runs, struct err *e)
{
    int total = scheduler_slots_total(ctx->sched);
    size_t i;
    json_t *run;
    json_array_foreach(runs, i, run)
    {
        json_t *spec = json_object_get(run, "spec");
        json_int_t ws = json_integer_value(json_object_get(spec, "world_size"));
        if (ws > total)
            return err_set(e, ERR_CONFLICT, "world_size",
                           "world_size %lld needs %lld CPU slots but this node has %d (start "
                           "ddpbenchd with --cpu-slots to allow oversubscription)",
                           (long long)ws, (long long)ws, total);
    }
    return 0;
}

/* Serializes the expanded runs for db_create_experiment. Strings owned by texts[]. */
static int h_encode_runs(const json_t *runs, struct db_new_run *out, char **texts,
                         struct err *e)
{
    size_t i;
    json_t *run;
    json_array_foreach(runs, i, run)
    {
        json_t *spec = json_object_get(run, "spec");
        texts[2 * i] = json_dumps(json_object_get(run, "params"), JSON_COMPACT | JSON_SORT_KEYS);
        texts[2 * i + 1] = json_dumps(spec, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!texts[2 * i] || !texts[2 * i + 1])
            return err_set(e, ERR_NOMEM, NULL, "out of memory");
        out[i] = (struct db_new_run){texts[2 * i], texts[2 * i + 1],
                                     (int)json_integer_value(json_object_get(spec, "world_size"))};
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
    else if (h_encode_runs(runs, rows, texts, e) == 0)
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

int h_experiments_create(struct api_ctx *ctx, const struct api_request *req,
                         struct api_reply *rep, struct err *e)
{
    if (api_query_check(req, h_no_args, e) < 0)
        return -1;
    if (!req->body || req->body_len == 0)
        return err_set(e, ERR_INVALID, NULL, "the request body must be an experiment spec "
                                             "(JSON object); see GET /v1/spec/schema");
    json_t *spec = spec_parse(req->body, req->body_len, e);
    if (!spec)
        return -1;
    json_t *runs = spec_expand(spec, SPEC_MAX_RUNS, e);
    int64_t id = 0;
    int rc = -1;
    if (runs && h_check_slots(ctx, runs, e) == 0 && h_store_experiment(ctx, spec, runs, &id, e) == 0) {
        scheduler_wake(ctx->sched);
        rep->json = db_get_experiment(ctx->db, id, e);
        rep->status = 201;
        snprintf(rep->location, sizeof rep->location, "/v1/experiments/%lld", (long long)id);
        rc = rep->json ? 0 : -1;
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
    return err_set(e, ERR_INVALID, key, "%s must be one of queued, running, succeeded, failed, "
                                        "cancelled, interrupted; got '%s'", key, value);
}

int h_experiments_list(struct api_ctx *ctx, const struct api_request *req,
                       struct api_reply *rep, struct err *e)
{
    static const char *const args[] = {"status", "name", "workload", "limit", "offset", NULL};
    struct db_experiment_filter f = {0};
    if (api_query_check(req, args, e) < 0 ||
        api_query_int(req, "limit", 1, 1000, 50, &f.limit, e) < 0 ||
        api_query_int(req, "offset", 0, INT64_MAX / 2, 0, &f.offset, e) < 0)
        return -1;
    f.status = api_query_get(req, "status");
    f.name = api_query_get(req, "name");
    f.workload = api_query_get(req, "workload");
    if (h_check_enum("status", f.status, h_experiment_statuses, e) < 0)
        return -1;
    rep->json = db_list_experiments(ctx->db, &f, e);
    return rep->json ? 0 : -1;
}

int h_experiments_get(struct api_ctx *ctx, const struct api_request *req,
                      struct api_reply *rep, struct err *e)
{
    if (api_query_check(req, h_no_args, e) < 0)
        return -1;
    rep->json = db_get_experiment(ctx->db, req->ids[0], e);
    return rep->json ? 0 : -1;
}
