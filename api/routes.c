/* routes: the route table and the dispatch by it.
 *
 * Decision: a flat table of (method, pattern, handler); patterns are '/'-separated with
 * "{name}" segments that match positive integer ids. A path that matches a pattern with
 * another method is 405; an id segment that is not an integer is 404 naming the
 * resource, since no such resource can exist. Anything else under /v1 is 404; other
 * GETs are static dashboard files. The helpers the handlers use (query string, replies,
 * ids) are request.c's and the request counters metrics.c's: this file calls the
 * handlers, so nothing a handler calls may live here. */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/guard.h"
#include "api/handlers.h"

struct api_route {
    const char *method;
    const char *pattern;
    api_handler fn;
    bool heavy; /* scans many rows: runs on the pool (http.c), never on an HTTP thread */
};

static const struct api_route api_routes[] = {
    {"GET", "/healthz", h_system_health, false},
    {"GET", "/metrics", h_system_metrics, false},
    {"GET", "/v1/openapi.yaml", h_system_openapi, false},
    {"GET", "/v1/spec/schema", h_system_spec_schema, false},
    {"GET", "/v1/vocabulary", h_system_vocabulary, false},
    {"GET", "/v1/examples", h_static_examples, false},
    {"GET", "/v1/experiments", h_experiments_list, false},
    {"POST", "/v1/experiments", h_experiments_create, false},
    {"GET", "/v1/experiments/{experiment}", h_experiments_get, false},
    {"DELETE", "/v1/experiments/{experiment}", h_experiments_delete, false},
    {"POST", "/v1/experiments/{experiment}/cancel", h_experiments_cancel, false},
    {"GET", "/v1/experiments/{experiment}/results", h_experiments_results, true},
    {"GET", "/v1/experiments/{experiment}/events", h_experiments_events, false},
    {"GET", "/v1/experiments/{experiment}/fit", h_experiments_fit, true},
    {"GET", "/v1/experiments/{experiment}/report", h_experiments_report, true},
    {"POST", "/v1/predict", h_predict, true},
    {"GET", "/v1/calibrations", h_calibrations_list, true},
    {"GET", "/v1/calibrations/{calibration}", h_calibrations_get, true},
    {"GET", "/v1/events", h_system_events, false},
    {"GET", "/v1/runs/{run}", h_runs_get, false},
    {"POST", "/v1/runs/{run}/cancel", h_runs_cancel, false},
    {"GET", "/v1/runs/{run}/steps", h_runs_steps, true},
    {"GET", "/v1/runs/{run}/trace", h_runs_trace, true},
    {"GET", "/v1/nodes", h_nodes_list, false},
    {"DELETE", "/v1/nodes/{*name}", h_nodes_delete, false},
    {"GET", "/v1/engines", h_engines_list, false},
    {"POST", "/v1/cluster/join", h_cluster_join, false},
    {"POST", "/v1/cluster/sync", h_cluster_sync, false},
    {"POST", "/v1/cluster/leave", h_cluster_leave, false},
};

#define API_NROUTES (sizeof api_routes / sizeof *api_routes)

enum route_match { ROUTE_NO, ROUTE_YES, ROUTE_BAD_ID };

static enum route_match routes_match(const char *pattern, const char *path, int64_t *ids,
                                     char *bad, size_t badcap);

bool api_route_heavy(const char *method, const char *path)
{
    for (size_t i = 0; i < API_NROUTES; i++) {
        int64_t ids[API_MAX_PATH_IDS];
        char bad[8];
        if (api_routes[i].heavy && strcmp(api_routes[i].method, method) == 0 &&
            routes_match(api_routes[i].pattern, path, ids, bad, sizeof bad) == ROUTE_YES)
            return true;
    }
    return false;
}

/* Next path segment of *p (without '/'), advancing *p; length in *len. */
static const char *routes_next_segment(const char **p, size_t *len)
{
    while (**p == '/')
        (*p)++;
    const char *s = *p;
    while (**p && **p != '/')
        (*p)++;
    *len = (size_t)(*p - s);
    return s;
}

static enum route_match routes_match(const char *pattern, const char *path, int64_t *ids,
                                     char *bad, size_t badcap)
{
    const char *pp = pattern, *xp = path;
    int nid = 0;
    enum route_match result = ROUTE_YES;
    for (;;) {
        size_t plen, xlen;
        const char *ps = routes_next_segment(&pp, &plen);
        const char *xs = routes_next_segment(&xp, &xlen);
        if (plen == 0 || xlen == 0)
            return plen == 0 && xlen == 0 ? result : ROUTE_NO;
        if (plen > 2 && ps[0] == '{' && ps[1] == '*') {
            continue; /* a name: any segment, the handler reads it from the path */
        } else if (ps[0] == '{') {
            if (nid >= API_MAX_PATH_IDS)
                return ROUTE_NO;
            if (!api_parse_id(xs, xlen, &ids[nid])) {
                snprintf(bad, badcap, "%.*s '%.*s'", (int)(plen - 2), ps + 1,
                         xlen > 64 ? 64 : (int)xlen, xs);
                result = ROUTE_BAD_ID;
            }
            nid++;
        } else if (plen != xlen || memcmp(ps, xs, plen) != 0) {
            return ROUTE_NO;
        }
    }
}

/* Appends s to out percent-encoded (all but RFC 3986's unreserved characters). */
static void routes_encode(char *out, size_t cap, size_t *len, const char *s)
{
    for (; *s && *len + 4 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if (isalnum(ch) || strchr("-._~", ch))
            out[(*len)++] = (char)ch;
        else
            *len += (size_t)snprintf(out + *len, cap - *len, "%%%02X", ch);
    }
    out[*len] = '\0';
}

/* A follower holds no experiments: every /v1 request is sent to the leader it joined
 * (307 keeps the method and body; the bearer token is the cluster's, so a client that
 * follows it with its token is authorized there too). */
static int routes_redirect_to_leader(struct api_ctx *ctx, const struct api_request *req,
                                     struct api_reply *rep, struct err *e)
{
    size_t len = 0;
    int n = snprintf(rep->location, sizeof rep->location, "%s%s", ctx->cfg->join, req->path);
    if (n < 0 || (size_t)n >= sizeof rep->location)
        return err_set(e, ERR_INVALID, NULL, "path too long to redirect");
    len = (size_t)n;
    for (size_t i = 0; i < req->nquery && len + 2 < sizeof rep->location; i++) {
        rep->location[len++] = i ? '&' : '?';
        routes_encode(rep->location, sizeof rep->location, &len, req->query[i].key);
        if (len + 2 < sizeof rep->location)
            rep->location[len++] = '=';
        routes_encode(rep->location, sizeof rep->location, &len, req->query[i].value);
    }
    rep->status = 307;
    rep->json = json_pack("{s:{s:s, s:s}, s:s}", "error", "code", "redirect", "message",
                          "this node is a follower: experiments live on its leader", "leader",
                          ctx->cfg->join);
    return rep->json ? 0 : err_set(e, ERR_NOMEM, NULL, "out of memory");
}

int api_dispatch(struct api_ctx *ctx, struct api_request *req, struct api_reply *rep,
                 struct err *e)
{
    if (guard_check(ctx->cfg, req, e) < 0)
        return -1;
    if (ctx->cfg->join[0] && strncmp(req->path, "/v1/", 4) == 0 &&
        strcmp(req->path, "/v1/openapi.yaml") != 0)
        return routes_redirect_to_leader(ctx, req, rep, e);
    char allowed[64] = "";
    char bad[128] = "";
    for (size_t i = 0; i < API_NROUTES; i++) {
        const struct api_route *r = &api_routes[i];
        int64_t ids[API_MAX_PATH_IDS] = {0};
        enum route_match m = routes_match(r->pattern, req->path, ids, bad, sizeof bad);
        if (m == ROUTE_NO)
            continue;
        if (strcmp(r->method, req->method) != 0) {
            size_t n = strlen(allowed);
            snprintf(allowed + n, sizeof allowed - n, "%s%s", n ? ", " : "", r->method);
            continue;
        }
        if (m == ROUTE_BAD_ID)
            return err_set(e, ERR_NOT_FOUND, NULL, "%s not found: ids are positive integers",
                           bad);
        memcpy(req->ids, ids, sizeof ids);
        return r->fn(ctx, req, rep, e);
    }
    if (allowed[0]) {
        snprintf(rep->allow, sizeof rep->allow, "%s", allowed);
        return err_set(e, ERR_NOT_ALLOWED, NULL, "%s is not allowed on %s (allowed: %s)",
                       req->method, req->path, allowed);
    }
    bool api_path = strncmp(req->path, "/v1/", 4) == 0 || strcmp(req->path, "/v1") == 0;
    if (!api_path && (strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0))
        return h_static_get(ctx, req, rep, e);
    return err_set(e, ERR_NOT_FOUND, NULL, "no resource %s %s (see /v1/openapi.yaml)",
                   req->method, req->path);
}
