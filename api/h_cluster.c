/* h_cluster: a cluster's endpoints on the leader (daemon/cluster.h): a follower joins,
 * syncs (its heartbeat, its ranks' events, the commands for it) and leaves; GET /v1/nodes
 * lists every node, and DELETE /v1/nodes/NAME forgets a gone one. With --cluster-key the
 * bearer credential of a cluster call is the node's identity, which daemon/cluster.c
 * checks; without one the guard (api/guard.c) already demanded the admin token. A leader
 * with neither refuses joins, since a follower would then obey whoever reached its port. */
#include <string.h>

#include "api/guard.h"
#include "api/handlers.h"
#include "daemon/cluster.h"

/* The body as JSON, or ERR_INVALID naming where it breaks. Owned. */
static json_t *h_cluster_body(const struct api_request *req, struct err *e)
{
    json_error_t je;
    json_t *b = req->body ? json_loadb(req->body, req->body_len, 0, &je) : NULL;
    if (!b)
        err_set(e, ERR_INVALID, NULL, "body is not valid JSON: %s",
                req->body ? je.text : "empty");
    return b;
}

static int h_cluster_leader(struct api_ctx *ctx, struct err *e)
{
    if (!ctx->cluster)
        return err_set(e, ERR_CONFLICT, NULL, "this node is a follower: it has no cluster");
    if (!ctx->cfg->token[0] && !ctx->cfg->cluster_key[0])
        return err_set(e, ERR_FORBIDDEN, NULL,
                       "this leader takes no followers: start it with --cluster-key (the "
                       "followers join with the same key) or --token-file");
    return 0;
}

typedef int (*h_cluster_fn)(struct cluster *c, const json_t *body, const char *cred,
                            json_t **reply, struct err *e);

/* The body parsed and handed to fn (join or sync), whose reply is the response. */
static int h_cluster_call(struct api_ctx *ctx, const struct api_request *req,
                          struct api_reply *rep, h_cluster_fn fn, struct err *e)
{
    if (h_cluster_leader(ctx, e) < 0)
        return -1;
    json_t *b = h_cluster_body(req, e);
    int rc = b ? fn(ctx->cluster, b, guard_bearer(req), &rep->json, e) : -1;
    json_decref(b);
    return rc;
}

int h_cluster_join(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                   struct err *e)
{
    return h_cluster_call(ctx, req, rep, cluster_join, e);
}

int h_cluster_sync(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                   struct err *e)
{
    return h_cluster_call(ctx, req, rep, cluster_sync, e);
}

/* cluster_leave with the reply {"state": "left"}. */
static int h_cluster_leave_fn(struct cluster *c, const json_t *body, const char *cred,
                              json_t **reply, struct err *e)
{
    if (cluster_leave(c, body, cred, e) < 0)
        return -1;
    *reply = json_pack("{s:s}", "state", "left");
    return *reply ? 0 : err_set(e, ERR_NOMEM, NULL, "out of memory");
}

int h_cluster_leave(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                    struct err *e)
{
    return h_cluster_call(ctx, req, rep, h_cluster_leave_fn, e);
}

/* The leader's own row counts the slots its scheduler holds; a follower's, what the
 * leader placed there. */
int h_nodes_list(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                 struct err *e)
{
    (void)req;
    if (!ctx->cluster)
        return err_set(e, ERR_CONFLICT, NULL, "this node is a follower: ask the leader");
    rep->json = cluster_list(ctx->cluster);
    json_t *me = json_array_get(json_object_get(rep->json, "nodes"), 0);
    struct scheduler_stats ss;
    scheduler_get_stats(ctx->sched, &ss);
    if (me) {
        json_object_set_new(me, "slots_used", json_integer(ss.slots_total - ss.slots_free));
        json_object_set_new(me, "runs", json_integer(ss.runs_active));
    }
    return rep->json ? 0 : err_set(e, ERR_NOMEM, NULL, "out of memory");
}

/* DELETE /v1/nodes/NAME (the admin token: the guard): the path's last segment. */
int h_nodes_delete(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                   struct err *e)
{
    if (!ctx->cluster)
        return err_set(e, ERR_CONFLICT, NULL, "this node is a follower: ask the leader");
    const char *name = strrchr(req->path, '/') + 1; /* the route has one */
    if (cluster_remove(ctx->cluster, name, e) < 0)
        return -1;
    rep->json = json_pack("{s:s}", "deleted", name);
    return rep->json ? 0 : err_set(e, ERR_NOMEM, NULL, "out of memory");
}

/* This node's probe in full, then each follower's as its last sync carried it ([] until
 * its probe finished after it joined). */
int h_engines_list(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                   struct err *e)
{
    (void)req;
    if (!ctx->cluster || !ctx->engines)
        return err_set(e, ERR_CONFLICT, NULL, "this node is a follower: ask the leader");
    json_t *mine = engines_get(ctx->engines, false, e);
    if (!mine)
        return -1;
    json_t *nodes = cluster_engines(ctx->cluster);
    size_t i;
    json_t *node;
    json_array_foreach(nodes, i, node)
    {
        engines_mark_elastic(node); /* a follower's list comes as its probe wrote it */
    }
    json_array_insert_new(nodes, 0, mine);
    rep->json = json_pack("{s:o}", "nodes", nodes);
    return rep->json ? 0 : err_set(e, ERR_NOMEM, NULL, "out of memory");
}
