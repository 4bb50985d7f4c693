/* h_runs: one run with its ranks, environment and results, straight from SQLite. */
#include "handlers.h"

int h_runs_get(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
               struct err *e)
{
    static const char *const args[] = {NULL};
    if (api_query_check(req, args, e) < 0)
        return -1;
    rep->json = db_get_run(ctx->db, req->ids[0], e);
    return rep->json ? 0 : -1;
}
