/* store/server: the state the store's parts share (the public API is
 * daemon/store_server.h; this header is only for the .c files of daemon/store/).
 *
 * Decision: one struct for the whole server, passed by pointer to every part. Everything
 * in it but the stats belongs to the loop's thread; the stats are atomics so that any
 * thread can read them without a lock. */
#ifndef DDPB_STORE_SERVER_INTERNAL_H
#define DDPB_STORE_SERVER_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include "daemon/loop.h"
#include "daemon/store/conn.h"
#include "daemon/store/keys.h"
#include "daemon/store_server.h"

struct store_server {
    struct loop *loop; /* owned */
    int lfd;
    struct loop_watch listen;
    struct loop_timer accept_resume; /* armed while accepting is paused */
    int reserve_fd;                  /* spare fd given up to shed connections on EMFILE */
    int port;
    int64_t emfile_logged_ms;
    /* Owned by the loop's thread. */
    struct store_run *runs;   /* uthash by name; store/keys.h */
    struct store_conn *conns; /* owned; utlist DL through all_prev/all_next */
    struct store_conn *ready; /* borrowed: woken, to be served after the batch */
    struct store_conn *dead;  /* owned: killed, to be freed after the batch */
    /* Stats, read by any thread. */
    atomic_uint_fast64_t n_clients, n_runs, n_requests, n_rejected;
};

#endif
