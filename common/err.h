/* err: the one error type every layer propagates.
 *
 * Decision: an error is a value (code + optional field + message) filled in by the
 * callee and returned upward; only the API layer turns it into an HTTP status
 * (api/http.c, err_http_status) and only the worker may turn it into an exit.
 * No allocation: the struct is fixed-size so it can be filled anywhere, even when
 * memory is exhausted. */
#ifndef DDPB_ERR_H
#define DDPB_ERR_H

#include <stddef.h>

enum err_code {
    ERR_OK = 0,
    ERR_INVALID,      /* bad input: malformed, wrong type, out of range, unknown field */
    ERR_NOT_FOUND,    /* no such experiment / run / key */
    ERR_NOT_ALLOWED,  /* the resource exists but not with this method */
    ERR_CONFLICT,     /* valid request that conflicts with current state */
    ERR_TOO_LARGE,    /* body or frame over its cap */
    ERR_UNAUTHORIZED, /* missing or wrong token / secret */
    ERR_FORBIDDEN,    /* refused whoever asks: a foreign Host or cross-site Origin */
    ERR_MEDIA_TYPE,   /* a body in a media type the resource does not take */
    ERR_UNAVAILABLE,  /* shutting down, resource exhausted for now */
    ERR_TIMEOUT,      /* a deadline passed */
    ERR_ABORTED,      /* an abort flag was raised */
    ERR_PEER,         /* a peer closed, died or misbehaved */
    ERR_PROTOCOL,     /* bytes on a wire that do not follow the protocol */
    ERR_IO,           /* system call or file failure */
    ERR_NOMEM,
    ERR_INTERNAL, /* a bug: an invariant did not hold */
};

struct err {
    enum err_code code;
    char field[64]; /* the offending input field, "" when none */
    char msg[384];
};

/* Fills e (may be NULL) and returns -1 so callers can write `return err_set(...)`. */
int err_set(struct err *e, enum err_code code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Like err_set with ERR_IO and ": strerror(errno)" appended. */
int err_errno(struct err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes the existing message with "prefix: " (for context while propagating). */
int err_prefix(struct err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void err_clear(struct err *e);
/* Stable lowercase name used in API error bodies ("invalid", "not_found", ...). */
const char *err_code_name(enum err_code code);

#endif
