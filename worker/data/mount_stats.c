/* mount_stats: see mount_stats.h. */
#include "worker/data/mount_stats.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

const char *data_mount_dir(void)
{
    const char *m = getenv(DATA_MOUNT_ENV);
    return m && m[0] ? m : NULL;
}

int data_mount_stats_parse(const char *text, struct data_storage_stats *out, struct err *e)
{
    json_error_t je;
    json_t *j = json_loads(text, JSON_DISABLE_EOF_CHECK, &je);
    static const char *const keys[] = {"requests", "bytes", "wait_ns", "read_ns"};
    int64_t v[4];
    for (int i = 0; j && i < 4; i++) {
        const json_t *x = json_object_get(j, keys[i]);
        if (!json_is_integer(x) || json_integer_value(x) < 0) {
            json_decref(j);
            return err_set(e, ERR_PROTOCOL, "dataset.storage",
                           "storage mount stats: no count \"%s\" in %.80s", keys[i], text);
        }
        v[i] = json_integer_value(x);
    }
    if (!j || !json_is_object(j)) {
        json_decref(j);
        return err_set(e, ERR_PROTOCOL, "dataset.storage",
                       "storage mount stats: not a JSON object: %.80s", text);
    }
    json_decref(j);
    *out = (struct data_storage_stats){
        .requests = v[0], .bytes = v[1], .wait_ns = v[2], .read_ns = v[3]};
    return 0;
}

int data_mount_stats_read(const char *mnt, struct data_storage_stats *out, struct err *e)
{
    char path[PATH_MAX], buf[512];
    snprintf(path, sizeof path, "%s/%s", mnt, DATA_MOUNT_STATS_FILE);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_errno(e, "%s", path);
    ssize_t n, got = 0;
    while (got < (ssize_t)sizeof buf - 1 &&
           (n = read(fd, buf + got, sizeof buf - 1 - (size_t)got)) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int saved = errno;
            close(fd);
            errno = saved;
            return err_errno(e, "%s", path);
        }
        got += n;
    }
    close(fd);
    buf[got] = '\0';
    return data_mount_stats_parse(buf, out, e);
}
