/* events: see events.h. Subscribers sit in a doubly linked list (utlist); each has a
 * byte queue (struct buf) of formatted SSE text and a read offset. */
#include "daemon/events.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utlist.h>

#include "common/buf.h"

struct events_sub {
    struct events *hub;
    int64_t experiment_id;
    events_notify_fn suspend, resume;
    void *arg;
    struct buf queue; /* pending text */
    size_t off;       /* bytes of queue already read */
    bool suspended, lagged;
    struct events_sub *prev, *next;
};

struct events {
    pthread_mutex_t lock;
    struct events_sub *subs;
    uint64_t seq;
    bool closed;
    size_t nsubs;
};

struct events *events_create(void)
{
    struct events *h = calloc(1, sizeof *h);
    if (h)
        pthread_mutex_init(&h->lock, NULL);
    return h;
}

static void events_wake(struct events_sub *s)
{
    if (s->suspended) {
        s->suspended = false;
        s->resume(s->arg);
    }
}

void events_shutdown(struct events *h)
{
    pthread_mutex_lock(&h->lock);
    h->closed = true;
    struct events_sub *s;
    DL_FOREACH(h->subs, s) events_wake(s);
    pthread_mutex_unlock(&h->lock);
}

void events_destroy(struct events *h)
{
    if (!h)
        return;
    pthread_mutex_destroy(&h->lock);
    free(h);
}

/* Appends text to s, dropping the oldest whole events when over the cap. */
static void events_append(struct events_sub *s, const char *text, size_t len)
{
    if (s->queue.len - s->off + len > EVENTS_SUB_MAX_BYTES) {
        buf_reset(&s->queue);
        s->off = 0;
        s->lagged = true;
    }
    if (s->off > 0 && s->off >= s->queue.len / 2) { /* drop what was read */
        buf_consume(&s->queue, s->off);
        s->off = 0;
    }
    if (s->lagged) {
        static const char note[] = "event: lagged\ndata: {\"lost\": true}\n\n";
        buf_append(&s->queue, note, sizeof note - 1);
        s->lagged = false;
    }
    buf_append(&s->queue, text, len);
    events_wake(s);
}

/* Owned SSE text of one event. */
static char *events_format(uint64_t seq, const char *type, const json_t *data, size_t *len)
{
    char *json = json_dumps(data, JSON_COMPACT | JSON_REAL_PRECISION(10) | JSON_ENCODE_ANY);
    if (!json)
        return NULL;
    size_t cap = strlen(json) + strlen(type) + 64;
    char *text = malloc(cap);
    if (text)
        *len = (size_t)snprintf(text, cap, "id: %llu\nevent: %s\ndata: %s\n\n",
                                (unsigned long long)seq, type, json);
    free(json);
    return text;
}

void events_publish(struct events *h, int64_t experiment_id, const char *type,
                    const json_t *data)
{
    pthread_mutex_lock(&h->lock);
    if (!h->subs) {
        h->seq++;
        pthread_mutex_unlock(&h->lock);
        return; /* nobody listens: do not even format */
    }
    size_t len = 0;
    char *text = events_format(++h->seq, type, data, &len);
    struct events_sub *s;
    DL_FOREACH(h->subs, s)
    {
        if (text && (s->experiment_id == 0 || s->experiment_id == experiment_id))
            events_append(s, text, len);
    }
    pthread_mutex_unlock(&h->lock);
    free(text);
}

void events_publish_run(struct events *h, int64_t experiment_id, int64_t run_id,
                        const char *type, json_t *data)
{
    if (!data)
        return;
    json_object_set_new(data, "run", json_integer(run_id));
    json_object_set_new(data, "experiment", json_integer(experiment_id));
    events_publish(h, experiment_id, type, data);
    json_decref(data);
}

void events_heartbeat(struct events *h)
{
    static const char beat[] = ": keepalive\n\n";
    pthread_mutex_lock(&h->lock);
    struct events_sub *s;
    DL_FOREACH(h->subs, s) events_append(s, beat, sizeof beat - 1);
    pthread_mutex_unlock(&h->lock);
}

struct events_sub *events_subscribe(struct events *h, int64_t experiment_id,
                                    events_notify_fn suspend, events_notify_fn resume,
                                    void *arg)
{
    struct events_sub *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->hub = h;
    s->experiment_id = experiment_id;
    s->suspend = suspend;
    s->resume = resume;
    s->arg = arg;
    buf_init(&s->queue);
    pthread_mutex_lock(&h->lock);
    DL_APPEND(h->subs, s);
    h->nsubs++;
    pthread_mutex_unlock(&h->lock);
    return s;
}

void events_push_one(struct events_sub *s, const char *type, const json_t *data)
{
    struct events *h = s->hub;
    pthread_mutex_lock(&h->lock);
    size_t len = 0;
    char *text = events_format(h->seq, type, data, &len);
    if (text)
        events_append(s, text, len);
    pthread_mutex_unlock(&h->lock);
    free(text);
}

long events_read(struct events_sub *s, char *out, size_t max)
{
    struct events *h = s->hub;
    pthread_mutex_lock(&h->lock);
    size_t avail = s->queue.len - s->off;
    long n;
    if (avail > 0) {
        n = (long)(avail < max ? avail : max);
        memcpy(out, s->queue.data + s->off, (size_t)n);
        s->off += (size_t)n;
    } else if (h->closed) {
        n = -1;
    } else {
        s->suspended = true;
        s->suspend(s->arg);
        n = 0;
    }
    pthread_mutex_unlock(&h->lock);
    return n;
}

void events_unsubscribe(struct events_sub *s)
{
    if (!s)
        return;
    struct events *h = s->hub;
    pthread_mutex_lock(&h->lock);
    DL_DELETE(h->subs, s);
    h->nsubs--;
    pthread_mutex_unlock(&h->lock);
    buf_free(&s->queue);
    free(s);
}

size_t events_subscribers(struct events *h)
{
    pthread_mutex_lock(&h->lock);
    size_t n = h->nsubs;
    pthread_mutex_unlock(&h->lock);
    return n;
}
