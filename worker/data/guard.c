/* guard: see guard.h. */
#include "worker/data/guard.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/paths.h"
#include "worker/data/data.h"

/* Resolves path into real when a boundary is set (the packaged dataset's folder added to
 * it), else copies it. 0, or -1: missing or outside. */
static int guard_resolve(const char *path, char *real)
{
    const char *dirs = getenv(DATA_GUARD_ENV);
    if (!dirs || !dirs[0]) {
        snprintf(real, PATH_MAX, "%s", path);
        return 0;
    }
    size_t n = strlen(dirs) + sizeof DATA_FASHION_MNIST_DIR + 2;
    char *list = malloc(n);
    if (!list)
        return -1;
    snprintf(list, n, "%s%c%s", dirs, PATHS_LIST_SEP, DATA_FASHION_MNIST_DIR);
    int rc = paths_resolve_beneath(path, list, real);
    free(list);
    return rc;
}

static int guard_refuse(const char *field, const char *path, struct err *e)
{
    return err_set(e, ERR_NOT_FOUND, field, "%s: not found or not allowed", path);
}

int data_guard_check(const char *path, struct err *e)
{
    char real[PATH_MAX];
    return guard_resolve(path, real) < 0 ? guard_refuse("dataset.path", path, e) : 0;
}

int data_guard_open(const char *path, struct err *e)
{
    char real[PATH_MAX];
    if (guard_resolve(path, real) < 0)
        return guard_refuse("dataset", path, e);
    int fd;
    do
        fd = open(real, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    if (fd < 0 && (errno == ENOENT || errno == EACCES || errno == EPERM || errno == ELOOP ||
                   errno == ENOTDIR))
        return guard_refuse("dataset", path, e);
    if (fd < 0)
        return err_errno(e, "%s: open", path);
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return err_errno(e, "%s: stat", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(e, ERR_INVALID, "dataset", "%s: not a regular file", path);
    }
    /* a regular file never blocks: the flag only kept open() from waiting on a FIFO */
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}
