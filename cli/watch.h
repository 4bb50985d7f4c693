/* watch: `ddpbench submit --watch` follows an experiment until it ends.
 *
 * Decision: the experiment's Server-Sent Events stream is the fast path and a plain GET
 * of the experiment is the truth. The stream is followed until the experiment ends; when
 * it breaks, stays silent for WATCH_IDLE_MS, or reports lost events ("lagged"), the
 * watcher GETs the experiment (which also catches changes that publish no event, such as
 * queued runs cancelled at once) and reconnects, so a lost stream degrades into polling
 * once a second instead of failing. The state machine (watch_apply*) is separate from the
 * I/O so it is unit-tested with hand-made events. */
#ifndef DDPB_CLI_WATCH_H
#define DDPB_CLI_WATCH_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cli/client.h"
#include "cli/sse.h"
#include "common/buf.h"
#include "common/err.h"

#define WATCH_IDLE_MS 3000
#define WATCH_POLL_MS 1000

struct watch_run {
    int64_t id;
    char status[16];
};

struct watch_state {
    int64_t id;
    char status[16];        /* the experiment's; "" before anything was heard */
    struct watch_run *runs; /* owned */
    size_t nruns, cap_runs;
    int64_t cur_run;     /* the run progress was last heard of; 0 = none */
    double cur_progress; /* 0..1 */
    char cur_phase[48];
    bool verbose; /* a line for every change, not only for runs that end */
    bool ended, resync;
};

void watch_state_init(struct watch_state *w, int64_t id, bool verbose);
void watch_state_cleanup(struct watch_state *w);
/* An experiment as GET returns it (or a "snapshot" event). Lines for what changed are
 * appended to log. Returns 0 or -1 (no memory). */
int watch_apply_snapshot(struct watch_state *w, const json_t *exp, struct buf *log);
/* One event (type, its parsed data, borrowed). Unknown types and malformed data are
 * ignored. Returns 0 or -1 (no memory). */
int watch_apply(struct watch_state *w, const char *type, const json_t *data, struct buf *log);
/* Runs in a final state. */
size_t watch_runs_done(const struct watch_state *w);
/* The progress line: "[#####.....] 2/3 runs  run 14 running  45%  phase". */
void watch_bar(const struct watch_state *w, char *out, size_t cap, int width);
bool watch_is_final(const char *status);
/* The GET path of experiment id with all its runs: the daemon pages them (100 by
 * default), and an experiment has at most SPEC_MAX_RUNS, which one page may ask for. */
void watch_experiment_path(char *out, size_t cap, int64_t id);

/* Live following; what it prints goes to f (a bar when tty, else lines). */
struct watch {
    struct watch_state st;
    struct sse_parser sse;
    struct client *client; /* borrowed */
    FILE *f;               /* borrowed */
    bool tty, bar_shown;
    int64_t last_draw_ms;
    double give_up_s; /* unreachable this long in a row: stop */
};

/* client and f are borrowed. */
void watch_init(struct watch *w, struct client *client, int64_t id, FILE *f, bool tty,
                double give_up_s);
void watch_cleanup(struct watch *w);
/* Follows the experiment until it ends (0; w->st.status says how). -1 with e when the
 * daemon refused (client->status is the 4xx) or stayed unreachable for give_up_s. */
int watch_follow(struct watch *w, struct err *e);

#endif
