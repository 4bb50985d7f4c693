/* one_rank: a world of one for the tests that run a workload in-process: a real store
 * server, a client registered for run "bench", and a 1-rank TCP communicator built
 * through it, as a worker builds its own. Header-only (static), like test.h.
 *
 * Ownership: one_rank_open fills o with objects it owns; one_rank_close frees them
 * (also after a failed open: each member is NULL or valid). */
#ifndef DDPB_TEST_ONE_RANK_H
#define DDPB_TEST_ONE_RANK_H

#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "store_client.h"
#include "store_server.h"
#include "tcp.h"

struct one_rank {
    struct store_server *srv;
    struct store_client *sc;
    struct comm *c;
};

static int one_rank_open(struct one_rank *o, struct err *e)
{
    memset(o, 0, sizeof *o);
    o->srv = store_server_create("127.0.0.1", 0, e);
    if (!o->srv || store_server_add_run(o->srv, "bench", "pw", e) < 0)
        return -1;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", store_server_port(o->srv));
    o->sc = store_client_connect(addr, "bench", "pw", 0, 2000, NULL, e);
    struct comm_tcp_config cfg = {.rank = 0, .world_size = 1, .listen_host = "127.0.0.1",
                                  .timeout_ms = 5000, .algorithm = "auto", .secret = "pw"};
    o->c = o->sc ? comm_tcp_create(&cfg, o->sc, e) : NULL;
    return o->c ? 0 : -1;
}

static void one_rank_close(struct one_rank *o)
{
    comm_destroy(o->c);
    store_client_destroy(o->sc);
    store_server_destroy(o->srv);
}

#endif
