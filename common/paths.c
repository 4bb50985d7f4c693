/* paths: see paths.h. */
#include "common/paths.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

bool paths_beneath(const char *real, const char *dir)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') /* "/" itself, or a list entry given with a slash */
        n--;
    if (n == 1 && dir[0] == '/')
        return real[0] == '/';
    return n > 0 && strncmp(real, dir, n) == 0 && (real[n] == '/' || real[n] == '\0');
}

int paths_resolve_beneath(const char *path, const char *dirs, char *out)
{
    out[0] = '\0';
    char real[PATH_MAX];
    if (!path || !realpath(path, real))
        return -1;
    for (const char *d = dirs; d && *d;) {
        const char *end = strchr(d, PATHS_LIST_SEP);
        size_t n = end ? (size_t)(end - d) : strlen(d);
        char dir[PATH_MAX];
        if (n > 0 && n < sizeof dir) {
            memcpy(dir, d, n);
            dir[n] = '\0';
            if (paths_beneath(real, dir)) {
                memcpy(out, real, strlen(real) + 1);
                return 0;
            }
        }
        d = end ? end + 1 : d + n;
    }
    errno = ENOENT;
    return -1;
}
