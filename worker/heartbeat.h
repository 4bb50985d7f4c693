/* heartbeat: a thread that tells the daemon every second that this rank is alive and
 * what it is doing (a "heartbeat" report event with a phase and a progress counter).
 *
 * Decision: liveness is reported by a thread of its own rather than by the work loop, so
 * a rank inside one long operation is not mistaken for a dead one; a rank whose whole
 * process is frozen (SIGSTOP, swapped out, wedged in the kernel) goes silent, and the
 * daemon fails the run after the spec's heartbeat_timeout_s, naming it and its last
 * phase. Hangs inside a live process are the communicator's timeouts' job. A beat
 * during a blocking communication names it after the phase ("train repeat 0 step 41/100;
 * waiting in allreduce bucket 3/7"), from the note the waiting code keeps (comm->note
 * points at hb->note), so a frozen rank's failure says what its peers wait in. */
#ifndef DDPB_HEARTBEAT_H
#define DDPB_HEARTBEAT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "common/report.h"
#include "worker/comm/wait_note.h"

struct heartbeat {
    struct report_writer *w; /* borrowed */
    int period_ms;
    pthread_t thread;
    bool started;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool stop;
    char phase[128];
    atomic_int_fast64_t progress;
    struct wait_note note; /* what the working thread blocks in; each beat appends it */
};

/* Starts the thread (first beat at once). w must outlive heartbeat_stop. */
int heartbeat_start(struct heartbeat *hb, struct report_writer *w, int period_ms,
                    struct err *e);
/* What the rank does now ("rendezvous", "allreduce 64 MiB", ...); copied. */
void heartbeat_set_phase(struct heartbeat *hb, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void heartbeat_advance(struct heartbeat *hb);
/* Stops and joins the thread. Safe on a heartbeat that never started. */
void heartbeat_stop(struct heartbeat *hb);

#endif
