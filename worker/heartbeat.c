/* heartbeat: see heartbeat.h. The thread waits on a condition variable with a timeout,
 * so heartbeat_stop returns at once instead of after a period. */
#include "worker/heartbeat.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static void *heartbeat_main(void *arg)
{
    struct heartbeat *hb = arg;
    pthread_mutex_lock(&hb->lock);
    while (!hb->stop) {
        char phase[sizeof hb->phase + 96], wait[80];
        memcpy(phase, hb->phase, sizeof hb->phase);
        pthread_mutex_unlock(&hb->lock);
        wait_note_text(&hb->note, wait, sizeof wait);
        if (wait[0]) {
            size_t len = strlen(phase);
            snprintf(phase + len, sizeof phase - len, "; waiting in %s", wait);
        }
        struct err e = {0};
        if (report_emit_heartbeat(hb->w, phase, atomic_load(&hb->progress), &e) < 0)
            return NULL; /* the daemon is gone; the worker finds out on its own */
        pthread_mutex_lock(&hb->lock);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += hb->period_ms / 1000;
        until.tv_nsec += (long)(hb->period_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!hb->stop && pthread_cond_timedwait(&hb->cond, &hb->lock, &until) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&hb->lock);
    return NULL;
}

int heartbeat_start(struct heartbeat *hb, struct report_writer *w, int period_ms, struct err *e)
{
    memset(hb, 0, sizeof *hb);
    hb->w = w;
    hb->period_ms = period_ms > 0 ? period_ms : 1000;
    snprintf(hb->phase, sizeof hb->phase, "starting");
    pthread_mutex_init(&hb->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&hb->cond, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&hb->thread, NULL, heartbeat_main, hb);
    if (rc != 0) {
        errno = rc;
        return err_errno(e, "heartbeat: pthread_create");
    }
    hb->started = true;
    return 0;
}

void heartbeat_set_phase(struct heartbeat *hb, const char *fmt, ...)
{
    char phase[sizeof hb->phase];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(phase, sizeof phase, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&hb->lock);
    memcpy(hb->phase, phase, sizeof phase);
    pthread_mutex_unlock(&hb->lock);
}

void heartbeat_advance(struct heartbeat *hb)
{
    atomic_fetch_add(&hb->progress, 1);
}

void heartbeat_stop(struct heartbeat *hb)
{
    if (!hb->started)
        return;
    pthread_mutex_lock(&hb->lock);
    hb->stop = true;
    pthread_cond_signal(&hb->cond);
    pthread_mutex_unlock(&hb->lock);
    pthread_join(hb->thread, NULL);
    hb->started = false;
    pthread_cond_destroy(&hb->cond);
    pthread_mutex_destroy(&hb->lock);
}
