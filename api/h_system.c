/* h_system: health, metrics, the spec schema, the API contract, the global event stream.
 * /healthz answers without touching more than counters, so a load balancer's probe costs
 * nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/cache.h"
#include "api/handlers.h"
#include "common/buf.h"
#include "common/clock.h"
#include "common/spec.h"
#include "common/vocab.h"
#include "ddpb_config.h"

static void h_system_health_common(struct api_ctx *ctx, json_t *o)
{
    json_object_set_new(o, "network_profile",
                        ctx->cfg->network_profile[0] ? json_string(ctx->cfg->network_profile)
                                                     : json_null());
}

/* A follower's health: it runs ranks for the leader it names, and holds nothing else. */
static int h_system_health_follower(struct api_ctx *ctx, struct api_reply *rep, struct err *e)
{
    rep->json = json_pack("{s:s, s:s, s:s, s:f, s:s, s:s}", "status", "ok", "version",
                          DDPB_VERSION, "node", ctx->cfg->node, "uptime_s",
                          clock_wall_s() - ctx->started_at, "role", "follower", "leader",
                          ctx->cfg->join);
    if (rep->json)
        h_system_health_common(ctx, rep->json);
    return rep->json ? 0 : err_set(e, ERR_NOMEM, NULL, "out of memory");
}

int h_system_health(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                    struct err *e)
{
    struct scheduler_stats ss;
    struct store_server_stats st;
    (void)req;
    if (!ctx->sched)
        return h_system_health_follower(ctx, rep, e);
    scheduler_get_stats(ctx->sched, &ss);
    store_server_get_stats(ctx->store, &st);
    rep->json = json_pack("{s:s, s:s, s:s, s:f, s:{s:i, s:i}, s:{s:I, s:i}, s:{s:i, s:I, s:I}}",
                          "status", "ok", "version", DDPB_VERSION, "node", ctx->cfg->node,
                          "uptime_s", clock_wall_s() - ctx->started_at, "slots", "total",
                          ss.slots_total, "free", ss.slots_free, "runs", "queued",
                          (json_int_t)db_count_runs(ctx->db, DB_RUN_QUEUED), "active",
                          ss.runs_active, "store", "port", store_server_port(ctx->store),
                          "clients", (json_int_t)st.clients, "runs", (json_int_t)st.runs);
    if (rep->json) { /* netlab's status and a reader of results can tell hosts apart */
        h_system_health_common(ctx, rep->json);
        int up = 0, known = 0;
        cluster_count(ctx->cluster, &up, &known);
        json_object_set_new(rep->json, "role", json_string("leader"));
        json_object_set_new(rep->json, "nodes",
                            json_pack("{s:i, s:i}", "up", up, "known", known));
    }
    return rep->json ? 0 : err_set(e, ERR_NOMEM, NULL, "out of memory");
}

/* A document generated from a table of common/ (the spec's schema, the vocabulary): it
 * takes no query argument, so one it does not know is a 400 naming it, as on every
 * resource that checks its arguments. Takes the reference make() returns. */
static int h_system_generated(const struct api_request *req, json_t *(*make)(void),
                              struct api_reply *rep, struct err *e)
{
    if (api_query_check(req, (const char *const[]){NULL}, e) < 0)
        return -1;
    rep->json = make();
    return rep->json ? 0 : err_set(e, ERR_NOMEM, NULL, "out of memory");
}

int h_system_spec_schema(struct api_ctx *ctx, const struct api_request *req,
                         struct api_reply *rep, struct err *e)
{
    (void)ctx;
    return h_system_generated(req, spec_schema_json, rep, e);
}

/* common/vocab.h as JSON: the names the spec, the engines and the dashboard share. */
int h_system_vocabulary(struct api_ctx *ctx, const struct api_request *req,
                        struct api_reply *rep, struct err *e)
{
    (void)ctx;
    return h_system_generated(req, vocab_json, rep, e);
}

/* Every experiment's events (the dashboard's list view). */
int h_system_events(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                    struct err *e)
{
    static const char *const args[] = {NULL};
    if (api_query_check(req, args, e) < 0)
        return -1;
    rep->stream = api_stream_open(ctx->events, 0);
    return rep->stream ? 0 : err_set(e, ERR_NOMEM, NULL, "out of memory");
}

/* --- /metrics: Prometheus text exposition format 0.0.4 ------------------------------- */

static void metrics_family(struct buf *b, const char *name, const char *type, const char *help)
{
    char line[512];
    snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    buf_append_str(b, line);
}

static void metrics_value(struct buf *b, const char *name, const char *labels, double v)
{
    char line[512];
    snprintf(line, sizeof line, "%s%s%s%s %.17g\n", name, labels[0] ? "{" : "", labels,
             labels[0] ? "}" : "", v);
    buf_append_str(b, line);
}

static void metrics_runs(struct api_ctx *ctx, struct buf *b)
{
    metrics_family(b, "ddpbench_runs", "gauge", "Runs in the database by status.");
    for (int st = DB_RUN_QUEUED; st <= DB_RUN_INTERRUPTED; st++) {
        char labels[64];
        snprintf(labels, sizeof labels, "status=\"%s\"", db_run_status_name(st));
        metrics_value(b, "ddpbench_runs", labels, (double)db_count_runs(ctx->db, st));
    }
    struct scheduler_stats ss;
    scheduler_get_stats(ctx->sched, &ss);
    metrics_family(b, "ddpbench_queue_depth", "gauge", "Runs waiting for CPU slots.");
    metrics_value(b, "ddpbench_queue_depth", "", (double)db_count_runs(ctx->db, DB_RUN_QUEUED));
    metrics_family(b, "ddpbench_runs_active", "gauge", "Runs with workers alive.");
    metrics_value(b, "ddpbench_runs_active", "", ss.runs_active);
    metrics_family(b, "ddpbench_slots", "gauge", "CPU slots of this node.");
    metrics_value(b, "ddpbench_slots", "state=\"total\"", ss.slots_total);
    metrics_value(b, "ddpbench_slots", "state=\"free\"", ss.slots_free);
}

static void metrics_store(struct api_ctx *ctx, struct buf *b)
{
    struct store_server_stats st;
    store_server_get_stats(ctx->store, &st);
    metrics_family(b, "ddpbench_store_clients", "gauge",
                   "Connections to the rendezvous store.");
    metrics_value(b, "ddpbench_store_clients", "", (double)st.clients);
    metrics_family(b, "ddpbench_store_requests_total", "counter", "Store requests served.");
    metrics_value(b, "ddpbench_store_requests_total", "", (double)st.requests);
    metrics_family(b, "ddpbench_store_rejected_total", "counter",
                   "Store connections closed for protocol or authentication errors.");
    metrics_value(b, "ddpbench_store_rejected_total", "", (double)st.rejected);
    metrics_family(b, "ddpbench_event_streams", "gauge", "Open Server-Sent Events streams.");
    metrics_value(b, "ddpbench_event_streams", "", (double)events_subscribers(ctx->events));
}

static void metrics_http(struct api_ctx *ctx, struct buf *b)
{
    struct api_metrics *m = &ctx->metrics;
    metrics_family(b, "ddpbench_http_requests_total", "counter",
                   "HTTP requests by method and status.");
    for (int mi = 0; mi < API_METHODS; mi++)
        for (int ci = 0; ci < API_CODES; ci++) {
            uint64_t n = atomic_load(&m->requests[mi][ci]);
            if (!n)
                continue;
            char labels[96], code[16];
            snprintf(code, sizeof code, "%d", api_metric_codes[ci]);
            snprintf(labels, sizeof labels, "method=\"%s\",code=\"%s\"", api_metric_methods[mi],
                     api_metric_codes[ci] ? code : "other");
            metrics_value(b, "ddpbench_http_requests_total", labels, (double)n);
        }
    metrics_family(b, "ddpbench_http_request_duration_seconds", "histogram",
                   "Time from a request's arrival to its response being queued.");
    uint64_t cum = 0;
    for (int i = 0; i < API_LATENCY_BUCKETS; i++) {
        char labels[48];
        cum += atomic_load(&m->latency_le[i]);
        snprintf(labels, sizeof labels, "le=\"%g\"", api_latency_bounds[i]);
        metrics_value(b, "ddpbench_http_request_duration_seconds_bucket", labels, (double)cum);
    }
    uint64_t count = atomic_load(&m->latency_count);
    metrics_value(b, "ddpbench_http_request_duration_seconds_bucket", "le=\"+Inf\"",
                  (double)count);
    metrics_value(b, "ddpbench_http_request_duration_seconds_sum", "",
                  (double)atomic_load(&m->latency_sum_us) * 1e-6);
    metrics_value(b, "ddpbench_http_request_duration_seconds_count", "", (double)count);
}

/* The report and fit cache (cache.h): replies computed, replies served from it. */
static void metrics_cache(struct api_ctx *ctx, struct buf *b)
{
    unsigned long long computed, hits;
    if (!ctx->cache)
        return;
    api_cache_counts(ctx->cache, &computed, &hits);
    metrics_family(b, "ddpbench_reply_cache_computed_total", "counter",
                   "Reports and fits computed (a cache miss).");
    metrics_value(b, "ddpbench_reply_cache_computed_total", "", (double)computed);
    metrics_family(b, "ddpbench_reply_cache_hits_total", "counter",
                   "Reports and fits served from the cache (their experiments unchanged).");
    metrics_value(b, "ddpbench_reply_cache_hits_total", "", (double)hits);
}

int h_system_metrics(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                     struct err *e)
{
    static const char *const args[] = {NULL};
    if (api_query_check(req, args, e) < 0)
        return -1;
    struct buf b;
    buf_init(&b);
    char labels[96];
    snprintf(labels, sizeof labels, "version=\"%s\",node=\"%s\"", DDPB_VERSION, ctx->cfg->node);
    metrics_family(&b, "ddpbench_build_info", "gauge", "Version and node of this ddpbenchd.");
    metrics_value(&b, "ddpbench_build_info", labels, 1);
    metrics_family(&b, "ddpbench_uptime_seconds", "gauge", "Seconds since ddpbenchd started.");
    metrics_value(&b, "ddpbench_uptime_seconds", "", clock_wall_s() - ctx->started_at);
    if (ctx->sched) { /* a follower has no queue, store or database of its own */
        metrics_runs(ctx, &b);
        metrics_store(ctx, &b);
    }
    metrics_http(ctx, &b);
    metrics_cache(ctx, &b);
    if (buf_append(&b, "", 1) < 0) {
        buf_free(&b);
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    }
    rep->body = (char *)b.data;
    rep->body_len = b.len - 1;
    rep->content_type = "text/plain; version=0.0.4; charset=utf-8";
    return 0;
}

extern const char api_openapi_yaml[];
extern const size_t api_openapi_yaml_len;

int h_system_openapi(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                     struct err *e)
{
    (void)ctx;
    (void)req;
    rep->body = malloc(api_openapi_yaml_len + 1);
    if (!rep->body)
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    memcpy(rep->body, api_openapi_yaml, api_openapi_yaml_len + 1);
    rep->body_len = api_openapi_yaml_len;
    rep->content_type = "application/yaml";
    return 0;
}
