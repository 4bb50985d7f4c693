/* outbox: see outbox.h. */
#include "daemon/outbox.h"

#include "common/log.h"

bool outbox_init(struct outbox *o, size_t batch_bytes, size_t cap_bytes, size_t cap_count)
{
    *o = (struct outbox){.events = json_array(),
                         .batch_bytes = batch_bytes,
                         .batch_max = batch_bytes,
                         .cap_bytes = cap_bytes,
                         .cap_count = cap_count};
    return o->events != NULL;
}

void outbox_free(struct outbox *o)
{
    json_decref(o->events);
    o->events = NULL;
    o->bytes = 0;
}

size_t outbox_size_of(const json_t *ev)
{
    return json_dumpb(ev, NULL, 0, JSON_COMPACT);
}

bool outbox_push(struct outbox *o, json_t *ev)
{
    if (!ev)
        return false;
    size_t size = outbox_size_of(ev);
    size_t count = json_array_size(o->events);
    if (count >= o->cap_count || o->bytes + size > o->cap_bytes) {
        log_error("follower: %zu event(s) of %zu bytes wait for the leader (caps %zu, %zu "
                  "bytes): dropping one of %zu bytes",
                  count, o->bytes, o->cap_count, o->cap_bytes, size);
        json_decref(ev);
        return false;
    }
    if (json_array_append_new(o->events, ev) < 0)
        return false;
    o->bytes += size;
    return true;
}

size_t outbox_count(const struct outbox *o)
{
    return json_array_size(o->events);
}

json_t *outbox_batch(struct outbox *o, size_t *n)
{
    json_t *batch = json_array();
    size_t bytes = 0, i;
    for (i = 0; i < json_array_size(o->events); i++) {
        json_t *ev = json_array_get(o->events, i);
        size_t size = outbox_size_of(ev) + 1; /* and its comma */
        if (i > 0 && bytes + size > o->batch_max)
            break;
        bytes += size;
        json_array_append(batch, ev);
    }
    *n = i;
    return batch;
}

/* Removes the first event, keeping bytes in step. */
static void outbox_pop(struct outbox *o)
{
    size_t size = outbox_size_of(json_array_get(o->events, 0));
    o->bytes = o->bytes > size ? o->bytes - size : 0;
    json_array_remove(o->events, 0);
}

void outbox_accepted(struct outbox *o, size_t n)
{
    for (size_t i = 0; i < n && json_array_size(o->events) > 0; i++)
        outbox_pop(o);
    o->batch_max = o->batch_bytes;
}

json_t *outbox_refused_too_large(struct outbox *o, size_t n)
{
    if (n > 1) {
        size_t bytes = 0;
        for (size_t i = 0; i < n && i < json_array_size(o->events); i++)
            bytes += outbox_size_of(json_array_get(o->events, i)) + 1;
        o->batch_max = bytes / 2 > 0 ? bytes / 2 : 1;
        log_warn("follower: the leader refused a batch of %zu event(s) (%zu bytes) as too "
                 "large: sending %zu bytes at most",
                 n, bytes, o->batch_max);
        return NULL;
    }
    json_t *ev = json_incref(json_array_get(o->events, 0));
    if (ev)
        outbox_pop(o);
    return ev;
}

void outbox_clear(struct outbox *o)
{
    json_array_clear(o->events);
    o->bytes = 0;
    o->batch_max = o->batch_bytes;
}

size_t outbox_reply_take(char *p, size_t size, size_t n, void *ctx)
{
    struct outbox_reply *r = ctx;
    size_t len = size * n;
    if (r->over || r->body.len + len > r->cap) {
        if (!r->over)
            log_error("follower: the leader's reply is over %zu bytes: dropped (a reply that "
                      "large is no leader's)",
                      r->cap);
        r->over = true;
        return 0;
    }
    return buf_append(&r->body, p, len) < 0 ? 0 : len;
}
