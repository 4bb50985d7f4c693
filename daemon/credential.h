/* credential: the secrets a daemon holds and how it checks them: the admin token, the
 * read token (GETs, --read-token) and the cluster key (--cluster-key), each read from a
 * file only the daemon's user can read, compared in constant time, and a follower's
 * identity derived from the cluster key.
 *
 * Decisions:
 * - Roles (issue 31): the admin token mutates, the read token reads, the cluster key
 *   never leaves a node: a follower proves who it is with HMAC-SHA256(cluster key, its
 *   node name), so a stolen sync (or a leaked follower credential) names one node and
 *   grants neither the API nor another node's name.
 * - HMAC comes from GnuTLS (gnutls_hmac_fast), already linked through libmicrohttpd:
 *   a kept library, no SHA-256 of our own.
 * - A secret file must be a regular file owned by the daemon's user (or root) that
 *   neither group nor others may read: a token anyone on the host reads is no token.
 *
 * Ownership: everything is borrowed; the functions write only into the caller's buffers. */
#ifndef DDPB_CREDENTIAL_H
#define DDPB_CREDENTIAL_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"

#define CREDENTIAL_MAX 256     /* a secret's text, with its NUL */
#define CREDENTIAL_IDENTITY 65 /* hex HMAC-SHA256, with its NUL */

/* a == b, in time that depends on b's length only (b is the secret). */
bool credential_equal(const char *a, const char *b);
/* The first line of the secret file at path (trailing whitespace dropped) into out, a
 * token of 16 to cap-1 printable characters without spaces; ERR_INVALID naming opt
 * ("token-file", "read-token", "cluster-key") when the file is missing, not regular,
 * owned by another user, readable by group or others (its mode in the message), empty or
 * not a token. */
int credential_read_file(const char *path, const char *opt, char *out, size_t cap,
                         struct err *e);
/* A token's text checks (16..cap-1 printable, no spaces); from names where it came from. */
int credential_check_text(const char *tok, const char *from, const char *field, size_t cap,
                          struct err *e);
/* The node's identity under key: lowercase hex HMAC-SHA256(key, name). -1 (e set) when
 * the library fails. */
int credential_node_identity(const char *key, const char *name, char out[CREDENTIAL_IDENTITY],
                             struct err *e);

#endif
