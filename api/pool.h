/* pool: a bounded worker pool with a fixed-size queue (see pool.c for the decision). */
#ifndef DDPB_API_POOL_H
#define DDPB_API_POOL_H

#include <stddef.h>

#include "common/err.h"

/* A job: cancelled is true when the pool stopped before running it (free arg only). */
typedef void (*api_pool_fn)(void *arg, int cancelled);

struct api_pool;

/* nthreads workers, at most queue_cap jobs waiting. Owned; api_pool_stop frees. */
struct api_pool *api_pool_start(size_t nthreads, size_t queue_cap, struct err *e);
/* Queues fn(arg); -1 when the queue is full or the pool stopping (nothing queued). */
int api_pool_submit(struct api_pool *p, api_pool_fn fn, void *arg);
/* Jobs waiting and jobs running now. */
void api_pool_load(struct api_pool *p, size_t *queued, size_t *busy);
/* Joins the workers, cancels what is queued, frees p (NULL: nothing). */
void api_pool_stop(struct api_pool *p);

#endif
