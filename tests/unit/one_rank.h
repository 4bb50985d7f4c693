/* one_rank: a world of one for the tests that run a workload in-process: a real store
 * server, a client registered for run "bench", and a 1-rank TCP communicator built
 * through it, as a worker builds its own; a collective bench run on it into a pipe, and
 * the reader of the report lines the workload wrote. Header-only (static), like test.h.
 *
 * Ownership: one_rank_open fills o with objects it owns; one_rank_close frees them
 * (also after a failed open: each member is NULL or valid). */
#ifndef DDPB_TEST_ONE_RANK_H
#define DDPB_TEST_ONE_RANK_H

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/report.h"
#include "common/spec.h"
#include "daemon/store_server.h"
#include "worker/comm/comm.h"
#include "worker/comm/tcp.h"
#include "worker/store/store_client.h"
#include "worker/workload_collective.h"

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
    struct comm_tcp_config cfg = {.rank = 0,
                                  .world_size = 1,
                                  .listen_host = "127.0.0.1",
                                  .timeout_ms = 5000,
                                  .algorithm = "auto",
                                  .secret = "pw"};
    o->c = o->sc ? comm_tcp_create(&cfg, o->sc, e) : NULL;
    return o->c ? 0 : -1;
}

/* Reads the report lines a bench wrote to fd (the read end of its pipe, already closed
 * for writing): up to n collective events into out, and the number of progress events
 * into *progress (may be NULL). Returns the collective events read, or -1 with e set. */
static int one_rank_read_reports(int fd, struct report_collective *out, int n, int *progress,
                                 struct err *e)
{
    char text[16384];
    ssize_t len = read(fd, text, sizeof text - 1);
    text[len > 0 ? len : 0] = '\0';
    int k = 0, rc = 0;
    if (progress)
        *progress = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); rc == 0 && line;
         line = strtok_r(NULL, "\n", &save)) {
        enum report_type type;
        json_t *ev = report_parse_line(line, strlen(line), &type, e);
        if (!ev)
            return -1;
        if (type == REPORT_COLLECTIVE && k < n)
            rc = report_collective_from_json(ev, &out[k++], e);
        if (progress)
            *progress += type == REPORT_PROGRESS;
        json_decref(ev);
    }
    return rc < 0 ? -1 : k;
}

/* A checked one-rank collective spec: op, dtype and redop by name, the auto algorithm,
 * iters timed iterations after one warmup. */
static void one_rank_coll_spec(struct spec *s, int64_t seed, const char *op, const char *dtype,
                               const char *redop, int iters, bool inplace)
{
    memset(s, 0, sizeof *s);
    s->world_size = 1;
    s->repeats = 1;
    s->seed = seed;
    snprintf(s->coll.op, sizeof s->coll.op, "%s", op);
    snprintf(s->coll.dtype, sizeof s->coll.dtype, "%s", dtype);
    snprintf(s->coll.redop, sizeof s->coll.redop, "%s", redop);
    snprintf(s->coll.algorithm, sizeof s->coll.algorithm, "auto");
    s->coll.iters = iters;
    s->coll.warmup = 1;
    s->coll.check = true;
    s->coll.inplace = inplace;
}

/* Runs s's bench over the n sizes on o, its buffers through mem (NULL: host memory), and
 * reads back its reports as one_rank_read_reports does. */
static int one_rank_run_bench(struct one_rank *o, const struct spec *s,
                              const struct collective_mem *mem, const int64_t *sizes, int n,
                              struct report_collective *out, int *progress, struct err *e)
{
    int pfd[2];
    if (pipe(pfd) < 0)
        return err_errno(e, "pipe");
    struct report_writer w;
    report_writer_init(&w, pfd[1], 0);
    struct collective_bench b;
    int rc = collective_bench_init_mem(&b, s, o->c, o->sc, &w, 4096, n, mem, e);
    if (rc == 0)
        rc = collective_bench_run_sizes(&b, 0, sizes, (size_t)n, e);
    collective_bench_cleanup(&b);
    report_writer_cleanup(&w);
    close(pfd[1]);
    int got = rc < 0 ? -1 : one_rank_read_reports(pfd[0], out, n, progress, e);
    close(pfd[0]);
    return got;
}

static void one_rank_close(struct one_rank *o)
{
    comm_destroy(o->c);
    store_client_destroy(o->sc);
    store_server_destroy(o->srv);
}

#endif
