/* sse: Server-Sent Events responses over libmicrohttpd. A stream is a subscription to
 * the daemon's event hub; its content reader copies pending text out and, when there is
 * none, suspends the connection (as libmicrohttpd requires, instead of returning 0 and
 * being polled in a busy loop); the hub resumes it when data arrives. */
#include <microhttpd.h>
#include <stdlib.h>

#include "api/api.h"
#include "daemon/events.h"

struct api_stream {
    struct events_sub *sub;      /* owned */
    struct MHD_Connection *conn; /* borrowed; set when the response is queued */
};

static void sse_suspend(void *arg)
{
    struct api_stream *st = arg;
    MHD_suspend_connection(st->conn);
}

static void sse_resume(void *arg)
{
    struct api_stream *st = arg;
    MHD_resume_connection(st->conn);
}

static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct api_stream *st = cls;
    (void)pos;
    long n = events_read(st->sub, buf, max);
    return n < 0 ? MHD_CONTENT_READER_END_OF_STREAM : (ssize_t)n;
}

static void sse_free(void *cls)
{
    api_stream_close(cls);
}

struct api_stream *api_stream_open(struct events *hub, int64_t experiment_id)
{
    struct api_stream *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->sub = events_subscribe(hub, experiment_id, sse_suspend, sse_resume, st);
    if (!st->sub) {
        free(st);
        return NULL;
    }
    return st;
}

void api_stream_push(struct api_stream *st, const char *type, const json_t *data)
{
    events_push_one(st->sub, type, data);
}

void api_stream_close(struct api_stream *st)
{
    if (!st)
        return;
    events_unsubscribe(st->sub);
    free(st);
}

struct MHD_Response *api_stream_response(struct api_stream *st, struct MHD_Connection *conn)
{
    st->conn = conn;
    return MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_reader, st, sse_free);
}
