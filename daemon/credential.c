/* credential: see credential.h. The file checks use fstat on the opened descriptor, so
 * what is checked is what is read. */
#include "daemon/credential.h"

#include <errno.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool credential_equal(const char *a, const char *b)
{
    size_t n = strlen(b), m = strlen(a);
    unsigned char diff = (unsigned char)(n != m);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(b[i] ^ (i < m ? a[i] : 0));
    return diff == 0;
}

int credential_check_text(const char *tok, const char *from, const char *field, size_t cap,
                          struct err *e)
{
    size_t n = strlen(tok);
    if (n < 16 || n >= cap)
        return err_set(e, ERR_INVALID, field, "the %s from %s must be 16 to %zu characters",
                       field, from, cap - 1);
    for (size_t i = 0; i < n; i++)
        if (tok[i] <= 0x20 || tok[i] > 0x7e)
            return err_set(e, ERR_INVALID, field,
                           "the %s from %s must be printable ASCII without spaces", field,
                           from);
    return 0;
}

/* The opened file may hold a secret: regular, ours (or root's), no group/other bits. */
static int credential_check_mode(int fd, const char *path, const char *opt, struct err *e)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return err_errno(e, "--%s %s", opt, path);
    if (!S_ISREG(st.st_mode))
        return err_set(e, ERR_INVALID, opt, "--%s %s: not a regular file", opt, path);
    if (st.st_uid != geteuid() && st.st_uid != 0)
        return err_set(e, ERR_INVALID, opt,
                       "--%s %s: owned by uid %u, not this daemon's user (uid %u): chown it",
                       opt, path, (unsigned)st.st_uid, (unsigned)geteuid());
    if (st.st_mode & 077)
        return err_set(e, ERR_INVALID, opt,
                       "--%s %s: mode %04o lets group or others read a secret: chmod 600 %s",
                       opt, path, (unsigned)(st.st_mode & 07777), path);
    return 0;
}

int credential_read_file(const char *path, const char *opt, char *out, size_t cap,
                         struct err *e)
{
    char line[512] = "";
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return err_set(e, ERR_INVALID, opt, "--%s %s: %s", opt, path, strerror(errno));
    if (credential_check_mode(fd, path, opt, e) < 0) {
        close(fd);
        return -1;
    }
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        return err_errno(e, "--%s %s", opt, path);
    }
    bool ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' '))
        line[--n] = '\0';
    if (!ok || n == 0)
        return err_set(e, ERR_INVALID, opt, "--%s %s is empty", opt, path);
    if (credential_check_text(line, path, opt, cap, e) < 0)
        return -1;
    memcpy(out, line, n + 1);
    explicit_bzero(line, sizeof line);
    return 0;
}

int credential_node_identity(const char *key, const char *name, char out[CREDENTIAL_IDENTITY],
                             struct err *e)
{
    unsigned char mac[32];
    int rc = gnutls_hmac_fast(GNUTLS_MAC_SHA256, key, strlen(key), name, strlen(name), mac);
    if (rc < 0) {
        out[0] = '\0';
        return err_set(e, ERR_INTERNAL, NULL, "HMAC-SHA256: %s", gnutls_strerror(rc));
    }
    for (size_t i = 0; i < sizeof mac; i++)
        snprintf(out + 2 * i, 3, "%02x", mac[i]);
    return 0;
}
