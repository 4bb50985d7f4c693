/* h_runs: one run with its ranks, environment and results, straight from SQLite: the
 * reply text is what db_get_run_text's one statement builds, sent as it is; its steps;
 * its trace (daemon/trace.c builds the timeline from the stored traced steps). */
#include <stdint.h>
#include <string.h>

#include "api/handlers.h"
#include "common/spec.h"
#include "daemon/trace.h"

static const char *const h_runs_no_args[] = {NULL};

static int h_runs_reply(struct api_ctx *ctx, int64_t id, struct api_reply *rep, struct err *e)
{
    char *text = db_get_run_text(ctx->db, id, e);
    return text ? api_reply_json_text(rep, text, e) : -1;
}

int h_runs_get(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
               struct err *e)
{
    if (api_query_check(req, h_runs_no_args, e) < 0)
        return -1;
    return h_runs_reply(ctx, req->ids[0], rep, e);
}

int h_runs_steps(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                 struct err *e)
{
    static const char *const args[] = {"rank", "warmup", NULL};
    int64_t rank;
    if (api_query_check(req, args, e) < 0 ||
        api_query_int(req, "rank", 0, SPEC_MAX_WORLD - 1, -1, &rank, e) < 0)
        return -1;
    const char *w = api_query_get(req, "warmup");
    if (w && strcmp(w, "true") != 0 && strcmp(w, "false") != 0)
        return err_set(e, ERR_INVALID, "warmup", "warmup must be true or false, got '%s'", w);
    rep->json = db_get_steps(ctx->db, req->ids[0], (int)rank, w && strcmp(w, "true") == 0, e);
    return rep->json ? 0 : -1;
}

int h_runs_cancel(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                  struct err *e)
{
    if (api_query_check(req, h_runs_no_args, e) < 0 || h_cancel(ctx, 0, req->ids[0], e) < 0)
        return -1;
    rep->status = 202;
    return h_runs_reply(ctx, req->ids[0], rep, e);
}

/* ?rank, ?repeat: only that rank's, that repeat's steps; ?offset, ?limit: a page of the
 * rows in (repeat, step, rank) order, at most TRACE_MAX_ROWS (the default), which is also
 * what ingest stores of a run at most: an unfiltered GET returns a whole run. */
int h_runs_trace(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                 struct err *e)
{
    static const char *const args[] = {"rank", "repeat", "offset", "limit", NULL};
    int64_t rank, repeat, offset, limit;
    if (api_query_check(req, args, e) < 0 ||
        api_query_int(req, "rank", 0, SPEC_MAX_WORLD - 1, -1, &rank, e) < 0 ||
        api_query_int(req, "repeat", 0, INT32_MAX, -1, &repeat, e) < 0 ||
        api_query_int(req, "offset", 0, INT64_MAX / 2, 0, &offset, e) < 0 ||
        api_query_int(req, "limit", 1, TRACE_MAX_ROWS, TRACE_MAX_ROWS, &limit, e) < 0)
        return -1;
    struct db_trace_query q = {(int)rank, (int)repeat, offset, limit};
    json_t *rows = db_get_trace(ctx->db, req->ids[0], &q, e);
    if (!rows)
        return -1;
    rep->json = trace_build(rows, req->ids[0], e);
    json_decref(rows);
    return rep->json ? 0 : -1;
}
