/* api: the REST control plane (contract: api/openapi.yaml). The HTTP glue (http.c)
 * turns libmicrohttpd requests into struct api_request, the route table (routes.c)
 * picks a handler, handlers (h_*.c) fill a struct api_reply or return an error, and
 * http.c maps errors to statuses in exactly one place (api_http_status).
 *
 * Decision: handlers are plain functions of (context, request) → reply | struct err,
 * with no libmicrohttpd types in them, so they are unit-testable without a socket and
 * the error → HTTP mapping cannot drift between handlers. */
#ifndef DDPB_API_H
#define DDPB_API_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "daemon/cluster.h"
#include "daemon/config.h"
#include "daemon/db.h"
#include "daemon/engines.h"
#include "daemon/events.h"
#include "daemon/scheduler.h"
#include "daemon/store_server.h"

/* Request counters for /metrics: by method and status, and a latency histogram
 * (metrics.c). */
#define API_METHODS 5 /* GET, POST, DELETE, OPTIONS, other */
#define API_CODES 16  /* see api_metrics_code_index */
#define API_LATENCY_BUCKETS 10

struct api_metrics {
    atomic_uint_fast64_t requests[API_METHODS][API_CODES];
    atomic_uint_fast64_t latency_le[API_LATENCY_BUCKETS]; /* cumulative at export */
    atomic_uint_fast64_t latency_count, latency_sum_us;
};

extern const double api_latency_bounds[API_LATENCY_BUCKETS]; /* seconds */
extern const int api_metric_codes[API_CODES];                /* 0 = any other */
extern const char *const api_metric_methods[API_METHODS];
void api_metrics_record(struct api_metrics *m, const char *method, int status, double seconds);

/* What handlers may use; every pointer borrowed for the server's lifetime. */
struct api_ctx {
    const struct config *cfg;
    struct db *db;
    struct scheduler *sched; /* NULL on a follower, as are db and store */
    struct cluster *cluster; /* the leader's registry; NULL on a follower */
    struct engines *engines; /* framework engines here (daemon/engines.h); NULL: follower */
    struct store_server *store;
    struct events *events;
    struct api_cache *cache; /* report and fit replies (cache.h); api_server_start makes
                                it, api_server_stop frees it; NULL: none */
    double started_at;       /* Unix seconds */
    atomic_uint_fast64_t requests, errors;
    struct api_metrics metrics;
};

#define API_MAX_PATH_IDS 2

struct api_query_arg {
    const char *key, *value; /* borrowed */
};

struct api_request {
    const char *method; /* "GET", "POST", ... */
    const char *path;   /* without the query string */
    const char *body;   /* NUL-terminated, may be NULL */
    size_t body_len;
    int64_t ids[API_MAX_PATH_IDS]; /* {id} path segments, in order */
    const struct api_query_arg *query;
    size_t nquery;
    const char *authorization; /* the Authorization header, or NULL */
    const char *host;          /* the Host header, or NULL (api/guard.h) */
    const char *origin;        /* the Origin header, or NULL */
    const char *content_type;  /* the Content-Type header, or NULL */
};

struct api_stream;
struct api_cache;

struct api_reply {
    int status;   /* 200 when left 0 */
    json_t *json; /* owned: sent as application/json */
    char *body;   /* owned (malloc): sent as is when json is NULL */
    size_t body_len;
    const char *content_type;  /* for body; static string */
    char location[1024];       /* Location header when non-empty */
    char allow[64];            /* Allow header when non-empty (405: the methods that work) */
    struct api_stream *stream; /* owned: an event stream (text/event-stream) */
};

/* Event streams (sse.c). open subscribes to an experiment's events (0 = all); push
 * queues one event for this stream alone; close unsubscribes and frees (a stream handed
 * to a reply is closed by libmicrohttpd when the client goes). */
struct api_stream *api_stream_open(struct events *hub, int64_t experiment_id);
void api_stream_push(struct api_stream *st, const char *type, const json_t *data);
void api_stream_close(struct api_stream *st);
struct MHD_Response;
struct MHD_Connection;
struct MHD_Response *api_stream_response(struct api_stream *st, struct MHD_Connection *conn);

/* Query and reply helpers (request.c). Whether s[0..len) is an id as a path or a query
 * names one (1 to 18 digits, above 0), into *out. */
bool api_parse_id(const char *s, size_t len, int64_t *out);
/* Value of query argument key, or NULL. */
const char *api_query_get(const struct api_request *req, const char *key);
/* Fails with ERR_INVALID naming the first argument not in allowed (NULL-terminated). */
int api_query_check(const struct api_request *req, const char *const *allowed, struct err *e);
/* Integer query argument within [lo, hi], def when absent. */
int api_query_int(const struct api_request *req, const char *key, int64_t lo, int64_t hi,
                  int64_t def, int64_t *out, struct err *e);

/* Appends the ids of query argument key ("3,7": each an id as a path takes it, repeats
 * dropped) to ids[*n..cap). Absent or empty: nothing. ERR_INVALID naming key. */
int api_query_ids(const struct api_request *req, const char *key, int64_t *ids, size_t cap,
                  size_t *n, struct err *e);

/* Sets rep's body to text, compact JSON built elsewhere (SQLite), ending in a newline as
 * every JSON reply does. Takes text (malloc'd; freed on failure too). */
int api_reply_json_text(struct api_reply *rep, char *text, struct err *e);

/* The HTTP status for an error code. The one mapping. */
int api_http_status(enum err_code code);
/* {"error": {"code", "message", "field"?}}. Owned. */
json_t *api_error_json(const struct err *e);

/* Dispatch (routes.c): finds the handler for method+path and runs it. Fills ids. */
int api_dispatch(struct api_ctx *ctx, struct api_request *req, struct api_reply *rep,
                 struct err *e);

/* Whether method+path is a heavy route (one that scans many rows: trace, report, fit,
 * results, steps, predict), which http.c runs on its bounded pool. */
bool api_route_heavy(const char *method, const char *path);

struct api_server;
/* Starts libmicrohttpd on cfg->host:cfg->port. ctx is borrowed. Owned result. */
struct api_server *api_server_start(struct api_ctx *ctx, struct err *e);
int api_server_port(const struct api_server *s);
/* True when the listener serves HTTPS (--tls-cert): the daemon's URL is then https://. */
bool api_server_tls(const struct api_server *s);
void api_server_stop(struct api_server *s);

#endif
