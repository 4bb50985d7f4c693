/* h_system: health and the spec schema. /healthz answers without touching more than
 * counters, so a load balancer's probe costs nothing. */
#include "clock.h"
#include "ddpb_config.h"
#include "handlers.h"
#include "spec.h"

int h_system_health(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                    struct err *e)
{
    struct scheduler_stats ss;
    struct store_server_stats st;
    (void)req;
    (void)e;
    scheduler_get_stats(ctx->sched, &ss);
    store_server_get_stats(ctx->store, &st);
    rep->json = json_pack(
        "{s:s, s:s, s:s, s:f, s:{s:i, s:i}, s:{s:I, s:i}, s:{s:i, s:I, s:I}}",
        "status", "ok", "version", DDPB_VERSION, "node", ctx->cfg->node,
        "uptime_s", clock_wall_s() - ctx->started_at,
        "slots", "total", ss.slots_total, "free", ss.slots_free,
        "runs", "queued", (json_int_t)db_count_runs(ctx->db, DB_RUN_QUEUED),
        "active", ss.runs_active,
        "store", "port", store_server_port(ctx->store), "clients", (json_int_t)st.clients,
        "runs", (json_int_t)st.runs);
    return rep->json ? 0 : err_set(e, ERR_NOMEM, NULL, "out of memory");
}

int h_system_spec_schema(struct api_ctx *ctx, const struct api_request *req,
                         struct api_reply *rep, struct err *e)
{
    (void)ctx;
    (void)req;
    rep->json = spec_schema_json();
    return rep->json ? 0 : err_set(e, ERR_NOMEM, NULL, "out of memory");
}
