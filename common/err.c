/* err: formatting helpers for struct err. Messages are truncated, never allocated. */
#include "common/err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int err_set(struct err *e, enum err_code code, const char *field, const char *fmt, ...)
{
    if (!e)
        return -1;
    e->code = code;
    snprintf(e->field, sizeof e->field, "%s", field ? field : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int err_errno(struct err *e, const char *fmt, ...)
{
    int saved = errno;
    if (!e)
        return -1;
    char head[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    e->code = ERR_IO;
    e->field[0] = '\0';
    snprintf(e->msg, sizeof e->msg, "%s: %s", head, strerror(saved));
    errno = saved;
    return -1;
}

int err_prefix(struct err *e, const char *fmt, ...)
{
    if (!e)
        return -1;
    char head[256], old[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    snprintf(e->msg, sizeof e->msg, "%s: %s", head, old);
    return -1;
}

void err_clear(struct err *e)
{
    if (!e)
        return;
    e->code = ERR_OK;
    e->field[0] = '\0';
    e->msg[0] = '\0';
}

const char *err_code_name(enum err_code code)
{
    switch (code) {
    case ERR_OK: return "ok";
    case ERR_INVALID: return "invalid";
    case ERR_NOT_FOUND: return "not_found";
    case ERR_NOT_ALLOWED: return "method_not_allowed";
    case ERR_CONFLICT: return "conflict";
    case ERR_TOO_LARGE: return "too_large";
    case ERR_UNAUTHORIZED: return "unauthorized";
    case ERR_FORBIDDEN: return "forbidden";
    case ERR_MEDIA_TYPE: return "unsupported_media_type";
    case ERR_UNAVAILABLE: return "unavailable";
    case ERR_TIMEOUT: return "timeout";
    case ERR_ABORTED: return "aborted";
    case ERR_PEER: return "peer";
    case ERR_PROTOCOL: return "protocol";
    case ERR_IO: return "io";
    case ERR_NOMEM: return "nomem";
    case ERR_INTERNAL: return "internal";
    }
    return "internal";
}
