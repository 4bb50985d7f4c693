/* faults: the spec's injected faults (issue 32, spec field "faults") on one run: when each
 * fires, what it does to its ranks, its undoing, and the record of both.
 *
 * Decision: the module knows the run only through struct faults_host, a table of
 * callbacks the run's lifecycle (daemon/monitor.c) fills: where a rank lives (its pid on
 * this node, or its node), how to ask a follower to act on a rank of its own, and where
 * an event goes (the run_events table, the SSE stream). So monitor.c keeps three small
 * hooks (create, tick, end) and the policy lives here: a fault fires on the tick that
 * sees its step (the run's steps done: the highest step any rank reported, plus one) or
 * its second (after the run's first step); a timed fault (stop, slow, link) is undone on
 * the tick past its duration and, whatever happens, when the run ends (faults_end),
 * before the daemon stops the ranks; a fault still waiting then is recorded as not
 * injected, with why. A kill is SIGKILL and nothing more: the run's lifecycle treats the
 * death as any other (a non-elastic run fails naming the rank, and the message says the
 * daemon injected it, faults_note).
 *
 * slow: the rank's threads go to SCHED_IDLE and a burner process per CPU of the rank's
 * affinity, pinned there, runs a duty cycle of (1 - fraction) busy in every 10 ms. A
 * SCHED_IDLE thread runs only when nothing else wants its CPU, so the rank gets about
 * fraction of it. Chosen over a cgroup's cpu.max: it needs no cgroup delegation (the
 * daemon may run unprivileged, in a container or a netlab namespace without its own
 * cgroup tree), it acts on a follower's ranks the same way, and undoing it is two
 * things the daemon owns: each thread back to SCHED_OTHER and the burners killed and
 * reaped (a burner also dies with the daemon: PR_SET_PDEATHSIG). Its limit: a rank not
 * pinned to CPUs of its own shares them with its neighbours, which the burners slow
 * too (the inject event says "unpinned").
 *
 * link: under netlab (the daemon runs in a host's network namespace, --network-profile
 * set) the namespace's eth0 egress is shaped to rate with tc for the duration, then put
 * back to the profile's shaping; only a node's own daemon can reach its link, so a link
 * fault on a follower's node is sent to that follower. */
#ifndef DDPB_FAULTS_H
#define DDPB_FAULTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/spec.h"

/* What the module needs of the run (callbacks get arg). */
struct faults_host {
    void *arg;
    int world_size;
    /* The rank's pid on this node; 0 when it is on another node or not running. */
    pid_t (*local_pid)(void *arg, int rank);
    /* The run's index of the node the rank is on (0 .. nodes - 1). */
    int (*node_index)(void *arg, int rank);
    /* Asks the rank's follower to act on it: "KILL", "STOP", "CONT", "SLOW" (with
     * fraction), "FAST" (slow undone). Returns false when it cannot be asked. */
    bool (*remote)(void *arg, int rank, const char *action, double fraction);
    /* One event (stolen): stored in run_events and published. */
    void (*record)(void *arg, json_t *event);
    /* The outcome of fault i changed (injected, restored, not injected). */
    void (*outcome)(void *arg, int fault, bool injected, double at, int64_t step,
                    double restored_at, const char *note);
    /* The network profile this daemon shapes its link to ("" = none: no netlab). */
    const char *network_profile;
};

struct faults;

/* The run's faults (owned, faults_free; NULL when the spec has none or out of memory).
 * host is copied. */
struct faults *faults_create(const struct spec *spec, const struct faults_host *host);
/* Why a fault cannot be injected on this run as placed (node beyond the run's nodes, a
 * link without netlab): false with msg naming "faults[i].node" or "faults[i].kind". */
bool faults_check_placement(const struct faults *f, int nodes, char *msg, size_t cap);
/* Fires what is due and undoes what has lasted: steps_done is the run's progress. */
void faults_tick(struct faults *f, int64_t now_ms, int64_t steps_done);
/* The run is ending (why: its reason): every fault in effect is undone now, every one that
 * never fired is recorded as not injected. Idempotent. */
void faults_end(struct faults *f, const char *why);
/* Whether rank was killed by an injected fault: true with a note for the run's error. */
bool faults_note(const struct faults *f, int rank, char *out, size_t cap);
void faults_free(struct faults *f);

/* --- acting on one local process (the follower uses these for its own ranks) --- */

/* A slowed process: its burners. */
#define FAULTS_MAX_BURNERS 64
struct faults_slow {
    pid_t pid;
    pid_t burners[FAULTS_MAX_BURNERS];
    int n;
    bool pinned; /* the rank had CPUs of its own (not every CPU) */
};
/* Slows pid to about fraction of its CPUs. Returns 0, or -1 with nothing left behind. */
int faults_slow_begin(pid_t pid, double fraction, struct faults_slow *s);
/* Undoes it: the threads to SCHED_OTHER, the burners killed and reaped. Idempotent. */
void faults_slow_end(struct faults_slow *s);
/* This namespace's link (netlab's eth0) shaped to rate_mbit, or back to the network
 * profile's shaping (none for "unshaped"). 0, or -1 with why. */
int faults_link_shape(double rate_mbit, char *why, size_t cap);
int faults_link_restore(const char *profile, char *why, size_t cap);

#endif
