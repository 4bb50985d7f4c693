/* h_model: the performance model's endpoints (issue 18, daemon/model.h): an experiment's
 * network fits, what-if predictions, and the written report. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/cache.h"
#include "api/handlers.h"
#include "daemon/calib.h"
#include "daemon/model.h"
#include "daemon/model_pipe.h"
#include "daemon/report_html.h"

#define H_MAX_IDS 16
#define H_MODEL_SCAN                                                                           \
    32 /* finished collective experiments a report may borrow fits from
                           (daemon/model.c MODEL_LATEST_SCAN): part of the cache key */
#define H_KEY_MAX 2048

/* The cache key of what (fit, report) of ids: their versions (db_experiments_version),
 * and for a report those of the finished collectives it may borrow fits from (scan) and
 * the stored calibrations its rows' pred_contention reads (the pending ones stored
 * first, as the report's own calib_load would: a calibration finished after a report was
 * cached gives a new key, not the stale report); false when there is none (no cache, or
 * an experiment missing: the handler's own load then says which). */
static bool h_model_key(struct api_ctx *ctx, const char *what, size_t scan, const int64_t *ids,
                        size_t n, char *key, size_t cap)
{
    struct err e = {0};
    int w = snprintf(key, cap, "%s|", what);
    if (!ctx->cache || w <= 0 || (size_t)w >= cap ||
        db_experiments_version(ctx->db, ids, n, scan, key + w, cap - (size_t)w, &e) < 0)
        return false;
    return scan == 0 || (calib_refresh(ctx->db, &e) == 0 &&
                         db_calibrations_version(ctx->db, key, cap, &e) == 0);
}

/* The cached body of key into rep (json: sent as JSON text); false on a miss. */
static bool h_model_cached(struct api_ctx *ctx, const char *key, bool json,
                           struct api_reply *rep, struct err *e)
{
    size_t len;
    char *body = api_cache_get(ctx->cache, key, &len);
    if (!body)
        return false;
    if (json)
        return api_reply_json_text(rep, body, e) == 0;
    rep->body = body;
    rep->body_len = len;
    rep->content_type = "text/html; charset=utf-8";
    return true;
}

/* The experiment of the path, then those of ?with=, into ids (H_MAX_IDS); args: the query
 * arguments the route takes (with among them). */
static int h_model_ids(const struct api_request *req, const char *const *args, int64_t *ids,
                       size_t *n, struct err *e)
{
    ids[0] = req->ids[0];
    *n = 1;
    if (api_query_check(req, args, e) < 0)
        return -1;
    return api_query_ids(req, "with", ids, H_MAX_IDS, n, e);
}

int h_experiments_fit(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                      struct err *e)
{
    int64_t ids[H_MAX_IDS];
    size_t n;
    static const char *const args[] = {"with", NULL};
    if (h_model_ids(req, args, ids, &n, e) < 0)
        return -1;
    char key[H_KEY_MAX];
    bool keyed = h_model_key(ctx, "fit", 0, ids, n, key, sizeof key);
    if (keyed && h_model_cached(ctx, key, true, rep, e))
        return 0;
    struct perf_fit *fits = NULL;
    size_t nf = 0;
    if (model_fits_load(ctx->db, ids, n, &fits, &nf, e) < 0)
        return -1;
    json_t *arr = json_array(), *exps = json_array();
    for (size_t i = 0; i < nf; i++)
        json_array_append_new(arr, model_fit_json(&fits[i]));
    for (size_t i = 0; i < n; i++)
        json_array_append_new(exps, json_integer((json_int_t)ids[i]));
    free(fits);
    json_t *out = json_pack("{s:o, s:i, s:o}", "experiments", exps, "model_version",
                            PERF_MODEL_VERSION, "fits", arr);
    char *text = out ? json_dumps(out,
                                  JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10))
                     : NULL;
    json_decref(out);
    if (!text)
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    if (keyed)
        api_cache_put(ctx->cache, key, text, strlen(text));
    return api_reply_json_text(rep, text, e);
}

int h_predict(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
              struct err *e)
{
    if (api_query_check(req, (const char *const[]){NULL}, e) < 0)
        return -1;
    json_error_t je;
    json_t *body = req->body ? json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &je)
                             : NULL;
    if (!body)
        return err_set(e, ERR_INVALID, NULL, "the body must be a JSON object: %s",
                       req->body ? je.text : "empty");
    /* a pipeline's what-if is model_pipe.c's (it builds on model.c's, not the reverse) */
    struct model_pipe_ask ask;
    int pipe = model_parse_pipe_ask(body, &ask, e);
    rep->json = pipe < 0    ? NULL
                : pipe == 1 ? model_pipe_whatif(ctx->db, &ask, e)
                            : model_predict(ctx->db, body, e);
    json_decref(body);
    return rep->json ? 0 : -1;
}

int h_experiments_report(struct api_ctx *ctx, const struct api_request *req,
                         struct api_reply *rep, struct err *e)
{
    int64_t ids[H_MAX_IDS], max_world = 0;
    size_t n;
    static const char *const args[] = {"with", "pred_max_world", NULL};
    if (h_model_ids(req, args, ids, &n, e) < 0 ||
        api_query_int(req, "pred_max_world", 1, PERF_MAX_WORLD, 0, &max_world, e) < 0)
        return -1;
    char key[H_KEY_MAX], what[32];
    snprintf(what, sizeof what, "report:%lld", (long long)max_world); /* one report per K */
    bool keyed = h_model_key(ctx, what, H_MODEL_SCAN, ids, n, key, sizeof key);
    if (keyed && h_model_cached(ctx, key, false, rep, e))
        return 0;
    rep->body = report_html_build(ctx->db, ids, n, (int)max_world, &rep->body_len, e);
    rep->content_type = "text/html; charset=utf-8";
    if (rep->body && keyed)
        api_cache_put(ctx->cache, key, rep->body, rep->body_len);
    return rep->body ? 0 : -1;
}

/* GET /v1/calibrations[?node=&model=]: the stored contention calibrations (daemon/calib.h),
 * newest first; finished calibration experiments are stored first. */
int h_calibrations_list(struct api_ctx *ctx, const struct api_request *req,
                        struct api_reply *rep, struct err *e)
{
    static const char *const args[] = {"node", "model", NULL};
    if (api_query_check(req, args, e) < 0)
        return -1;
    rep->json = calib_list(ctx->db, api_query_get(req, "node"), api_query_get(req, "model"), 0,
                           e);
    return rep->json ? 0 : -1;
}

/* GET /v1/calibrations/{calibration}: one of them. ERR_NOT_FOUND. */
int h_calibrations_get(struct api_ctx *ctx, const struct api_request *req,
                       struct api_reply *rep, struct err *e)
{
    json_t *all = calib_list(ctx->db, NULL, NULL, req->ids[0], e);
    if (!all)
        return -1;
    json_t *one = json_array_get(json_object_get(all, "calibrations"), 0);
    if (!one) {
        json_decref(all);
        return err_set(e, ERR_NOT_FOUND, NULL, "calibration %lld not found",
                       (long long)req->ids[0]);
    }
    rep->json = json_incref(one);
    json_decref(all);
    return 0;
}
