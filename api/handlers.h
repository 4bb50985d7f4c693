/* handlers: one function per endpoint (see api/openapi.yaml), grouped by resource in
 * h_*.c. Each fills rep (status defaults to 200) or returns -1 with e set. */
#ifndef DDPB_HANDLERS_H
#define DDPB_HANDLERS_H

#include "api/api.h"

typedef int (*api_handler)(struct api_ctx *ctx, const struct api_request *req,
                           struct api_reply *rep, struct err *e);

/* h_experiments.c */
int h_experiments_create(struct api_ctx *ctx, const struct api_request *req,
                         struct api_reply *rep, struct err *e);
int h_experiments_list(struct api_ctx *ctx, const struct api_request *req,
                       struct api_reply *rep, struct err *e);
int h_experiments_get(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                      struct err *e);
int h_experiments_cancel(struct api_ctx *ctx, const struct api_request *req,
                         struct api_reply *rep, struct err *e);
int h_experiments_delete(struct api_ctx *ctx, const struct api_request *req,
                         struct api_reply *rep, struct err *e);
int h_experiments_results(struct api_ctx *ctx, const struct api_request *req,
                          struct api_reply *rep, struct err *e);
int h_experiments_events(struct api_ctx *ctx, const struct api_request *req,
                         struct api_reply *rep, struct err *e);
/* Cancels queued runs at once (in the database) and hands the active ones of experiment
 * exp_id, or the one run run_id (exp_id 0), to the scheduler to stop. */
int h_cancel(struct api_ctx *ctx, int64_t exp_id, int64_t run_id, struct err *e);
/* h_model.c */
int h_experiments_fit(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                      struct err *e);
int h_experiments_report(struct api_ctx *ctx, const struct api_request *req,
                         struct api_reply *rep, struct err *e);
int h_predict(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
              struct err *e);
int h_calibrations_list(struct api_ctx *ctx, const struct api_request *req,
                        struct api_reply *rep, struct err *e);
int h_calibrations_get(struct api_ctx *ctx, const struct api_request *req,
                       struct api_reply *rep, struct err *e);
/* h_runs.c */
int h_runs_get(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
               struct err *e);
int h_runs_cancel(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                  struct err *e);
/* GET /v1/runs/{run}/trace: the run's traced steps as Chrome trace-event JSON. */
int h_runs_trace(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                 struct err *e);
int h_runs_steps(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                 struct err *e);
/* h_system.c */
int h_system_health(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                    struct err *e);
int h_system_spec_schema(struct api_ctx *ctx, const struct api_request *req,
                         struct api_reply *rep, struct err *e);
int h_system_vocabulary(struct api_ctx *ctx, const struct api_request *req,
                        struct api_reply *rep, struct err *e);
int h_system_events(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                    struct err *e);
int h_system_metrics(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                     struct err *e);
int h_system_openapi(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                     struct err *e);
/* h_cluster.c */
int h_cluster_join(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                   struct err *e);
int h_cluster_sync(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                   struct err *e);
int h_cluster_leave(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                    struct err *e);
int h_nodes_list(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                 struct err *e);
/* DELETE /v1/nodes/{name}: forgets a lost or left node (cluster_remove) */
int h_nodes_delete(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                   struct err *e);
/* h_cluster.c: GET /v1/engines, per node what engines it runs (daemon/engines.h) */
int h_engines_list(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                   struct err *e);
/* h_static.c: files under cfg->web_dir for any GET outside /v1 */
int h_static_get(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                 struct err *e);
/* GET /v1/examples: every .json file of schema/examples beside the web directory */
int h_static_examples(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                      struct err *e);

#endif
