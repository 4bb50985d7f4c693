/* store/state: the state the store's parts share (the public API is
 * daemon/store_server.h; this header is only for the .c files of daemon/store/).
 *
 * Decisions:
 * - One struct for the whole server, passed by pointer to every part. Everything in it
 *   but the stats belongs to the loop's thread; the stats are atomics so that any thread
 *   can read them without a lock.
 * - A header of its own (it was store/server.h), naming the parts' structs only by
 *   pointer, so conn.c can use the state without depending on server.c, which calls it.
 * - What a connection calls on the request logic (store/handlers.h) is taken by pointer,
 *   installed by store_server_create, as redis' ae takes its handlers: conn.c frames and
 *   buffers, handlers.c decides and replies through conn.h, and conn.c never names
 *   handlers.c, so the two are not a loop. */
#ifndef DDPB_STORE_STATE_H
#define DDPB_STORE_STATE_H

#include <stdatomic.h>
#include <stdint.h>

#include "daemon/loop.h"
#include "daemon/store_server.h"

struct store_conn;
struct store_request;
struct store_run;

/* The request logic as conn.c calls it (store/handlers.h has each one's contract). */
struct store_conn_hooks {
    /* Serves one decoded request of c (whose frame is consumed after this returns). */
    void (*serve)(struct store_server *s, struct store_conn *c, const struct store_request *req,
                  int64_t now);
    /* Takes c off the key it is parked on (a no-op when not parked). */
    void (*unpark)(struct store_server *s, struct store_conn *c);
    /* Timer callback (ctx: the connection): its HELLO or its parked request timed out. */
    void (*on_timeout)(void *arg);
};

struct store_server {
    struct loop *loop; /* owned */
    int lfd;
    struct loop_watch listen;
    struct loop_timer accept_resume; /* armed while accepting is paused */
    int reserve_fd;                  /* spare fd given up to shed connections on EMFILE */
    int port;
    int64_t emfile_logged_ms;
    /* store/handlers.h's, set by store_server_create before the loop starts. */
    struct store_conn_hooks hooks;
    /* Owned by the loop's thread. */
    struct store_run *runs;   /* uthash by name; store/keys.h */
    struct store_conn *conns; /* owned; utlist DL through all_prev/all_next */
    struct store_conn *ready; /* borrowed: woken, to be served after the batch */
    struct store_conn *dead;  /* owned: killed, to be freed after the batch */
    /* Stats, read by any thread. */
    atomic_uint_fast64_t n_clients, n_runs, n_requests, n_rejected;
};

#endif
