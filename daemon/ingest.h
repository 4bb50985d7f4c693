/* ingest: turns one report line of rank R of a run (common/report.h) into stored rows,
 * published live events and the rank's reported state.
 *
 * Decision: one table row per report type, {from_json, store, track, publish}, holds
 * everything the daemon knows about that type: how its fields decode, which rows it
 * stores, which rank state it changes, which live event it publishes. The entry point
 * takes the run's ingestion state, a rank and a line, and nothing about processes or
 * pipes: a line read from a local rank's fd 3 and a line a follower node forwards over
 * HTTP enter the same function. The run's lifecycle (daemon/monitor.c) owns a struct
 * ingest_run and reads the outcome (every rank said hello; a rank's error or done) from
 * the result and the rank state, never by parsing lines itself. */
#ifndef DDPB_INGEST_H
#define DDPB_INGEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/report.h"
#include "daemon/db.h"
#include "daemon/events.h"

/* What one rank has said about itself so far. */
struct ingest_rank {
    bool said_hello, said_done;
    char phase[128];     /* what it last said it was doing; "" = nothing yet */
    char error_code[24]; /* its first error event (later ones are consequences): code, */
    char error[512];     /* "message (file:line)" and the peer it blames (-1: none); */
    int error_peer;      /* error[0] == '\0' while it reported none */
    /* Where it was, to name what a frozen run was doing (daemon/monitor.c). A heartbeat
     * comes every second from a thread of its own, so it can lag the rank's work by up
     * to a second; a step line is written as the step ends. Times are the daemon's
     * monotonic milliseconds when the line arrived. */
    char heartbeat[128];        /* phase of its last heartbeat; "" = none yet */
    int64_t heartbeat_progress; /* ... and its progress counter */
    int64_t heartbeat_ms;       /* when it arrived; 0 = none yet */
    int64_t heartbeat_since_ms; /* when that phase and progress were first heard */
    bool stepped;               /* it reported a step: the last one's repeat and step */
    int last_repeat;
    int64_t last_step;
};

/* Ingestion state of one run; the lifecycle owns it (ingest_run_init/cleanup). */
struct ingest_run {
    struct db *db;         /* borrowed */
    struct events *events; /* borrowed */
    int64_t run_id, experiment_id;
    int world_size;
    int n_hello;               /* ranks that said hello */
    struct ingest_rank *ranks; /* owned: world_size entries */
    /* traced steps: stored, the most that may be (TRACE_MAX_ROWS unless a test lowers
     * it), and dropped past that (stored with the run: db_set_trace_dropped) */
    int64_t trace_rows, trace_cap, trace_dropped;
};

/* What a line did, for the caller's bookkeeping. */
struct ingest_result {
    enum report_type type;
    bool run_running;  /* this was the last rank's hello: every rank is running */
    bool store_failed; /* the database refused its rows (logged): no state changed,
                          nothing published */
    /* type elastic (issue 32): its event ("detect", "regroup", "resumed", "left"), the
     * generation it is of and the peer a detection blames (-1: none) */
    char elastic_event[16];
    int elastic_gen, elastic_peer;
};

int ingest_run_init(struct ingest_run *r, struct db *db, struct events *events, int64_t run_id,
                    int64_t experiment_id, int world_size, struct err *e);
void ingest_run_cleanup(struct ingest_run *r);

/* Ingests one line (without its newline) that rank `rank` of r sent. Returns 0 when the
 * line was accepted (out filled), or -1 with e set and nothing stored when it breaks the
 * report protocol: ERR_INVALID for a malformed line, an unknown type, a rank outside the
 * run or other than `rank`, a hello that contradicts the run; ERR_TOO_LARGE. */
int ingest_line(struct ingest_run *r, int rank, const char *line, size_t len,
                struct ingest_result *out, struct err *e);

/* A new process took slot `rank` (an elastic run's replacement): what the slot's last
 * process said is forgotten, so its hello, done and errors are the new one's. The run's
 * count of hellos is kept: the run is running already. */
void ingest_rank_reset(struct ingest_run *r, int rank);
/* Borrowed state of a rank of r (0 <= rank < world_size). */
const struct ingest_rank *ingest_rank_state(const struct ingest_run *r, int rank);

#endif
