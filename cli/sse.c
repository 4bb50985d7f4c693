/* sse: see sse.h. Lines end in "\r\n", "\n" or "\r" (all three are legal); a line is
 * complete only when its terminator has been seen, so each chunk is scanned for
 * terminators and the rest is kept for the next one. */
#include "cli/sse.h"

#include <stdio.h>
#include <string.h>

void sse_init(struct sse_parser *p, sse_event_fn fn, void *arg)
{
    memset(p, 0, sizeof *p);
    buf_init(&p->line);
    buf_init(&p->data);
    p->fn = fn;
    p->arg = arg;
}

void sse_cleanup(struct sse_parser *p)
{
    buf_free(&p->line);
    buf_free(&p->data);
}

void sse_reset(struct sse_parser *p)
{
    buf_reset(&p->line);
    buf_reset(&p->data);
    p->type[0] = '\0';
    p->id[0] = '\0';
    p->after_cr = 0;
}

/* An empty line ends the event: dispatched only when it carried data (the format's rule). */
static int sse_dispatch(struct sse_parser *p, struct err *e)
{
    int rc = 0;
    if (p->data.len > 0) {
        p->data.len--; /* the "\n" after the last data line */
        if (buf_append(&p->data, "", 1) < 0)
            return err_set(e, ERR_NOMEM, NULL, "event stream: out of memory");
        struct sse_event ev = {
            .type = p->type[0] ? p->type : "message",
            .id = p->id,
            .data = (const char *)p->data.data,
            .data_len = p->data.len - 1,
        };
        p->events++;
        rc = p->fn ? p->fn(p->arg, &ev) : 0;
    }
    buf_reset(&p->data);
    p->type[0] = '\0';
    p->id[0] = '\0';
    return rc;
}

static int sse_field(struct sse_parser *p, const char *name, size_t nlen, const char *value,
                     size_t vlen, struct err *e)
{
    if (nlen == 4 && memcmp(name, "data", 4) == 0) {
        if (p->data.len + vlen + 1 > SSE_MAX_LINE)
            return err_set(e, ERR_TOO_LARGE, NULL, "event stream: an event over %u bytes",
                           SSE_MAX_LINE);
        if (buf_append(&p->data, value, vlen) < 0 || buf_append(&p->data, "\n", 1) < 0)
            return err_set(e, ERR_NOMEM, NULL, "event stream: out of memory");
    } else if (nlen == 5 && memcmp(name, "event", 5) == 0) {
        snprintf(p->type, sizeof p->type, "%.*s", (int)vlen, value);
    } else if (nlen == 2 && memcmp(name, "id", 2) == 0 && !memchr(value, '\0', vlen)) {
        snprintf(p->id, sizeof p->id, "%.*s", (int)vlen, value);
        memcpy(p->last_id, p->id, sizeof p->id);
    }
    return 0; /* "retry" and unknown fields are ignored, as the format says */
}

/* One complete line (without its terminator) in p->line. */
static int sse_line(struct sse_parser *p, struct err *e)
{
    const char *s = (const char *)p->line.data;
    size_t n = p->line.len;
    buf_reset(&p->line);
    if (n == 0)
        return sse_dispatch(p, e);
    if (s[0] == ':') {
        p->comments++;
        return 0;
    }
    const char *colon = memchr(s, ':', n);
    size_t nlen = colon ? (size_t)(colon - s) : n;
    const char *value = colon ? colon + 1 : s + n;
    size_t vlen = n - (size_t)(value - s);
    if (vlen > 0 && value[0] == ' ') {
        value++;
        vlen--;
    }
    return sse_field(p, s, nlen, value, vlen, e);
}

static int sse_take(struct sse_parser *p, const char *s, size_t n, struct err *e)
{
    if (p->line.len + n > SSE_MAX_LINE)
        return err_set(e, ERR_TOO_LARGE, NULL, "event stream: a line over %u bytes",
                       SSE_MAX_LINE);
    if (buf_append(&p->line, s, n) < 0)
        return err_set(e, ERR_NOMEM, NULL, "event stream: out of memory");
    return 0;
}

static const char *sse_find_eol(const char *s, const char *end)
{
    for (; s < end; s++)
        if (*s == '\n' || *s == '\r')
            return s;
    return NULL;
}

int sse_feed(struct sse_parser *p, const char *chunk, size_t len, struct err *e)
{
    const char *s = chunk, *end = chunk + len;
    if (len > 0) {
        if (p->after_cr && *s == '\n')
            s++;
        p->after_cr = 0;
    }
    while (s < end) {
        const char *eol = sse_find_eol(s, end);
        if (!eol)
            return sse_take(p, s, (size_t)(end - s), e);
        int rc = sse_take(p, s, (size_t)(eol - s), e);
        if (rc == 0)
            rc = sse_line(p, e);
        if (rc != 0)
            return rc;
        if (*eol == '\r' && eol + 1 == end)
            p->after_cr = 1;
        else if (*eol == '\r' && eol[1] == '\n')
            eol++;
        s = eol + 1;
    }
    return 0;
}
