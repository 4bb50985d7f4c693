/* passthrough: ddpbench-fs's file system operations, a read-only view of the source
 * directory (fs.h).
 *
 * Decision: every file open is direct_io, so every read a reader makes reaches read()
 * here and pays the profile (no kernel page cache between the reader and the caps, as on
 * NFS with a cold client); the kernel splits a large read into requests of at most
 * max_read (main.c: 1 MiB, like an NFS rsize), and each is one data_storage request, as
 * is each open. Directories, attributes and links are not requests: the profile models
 * the data path, and the kernel caches attributes for a second anyway. Every write
 * operation answers EROFS (the mount is also "ro", so the kernel mostly answers first).
 * The stats file's content is taken at open, so one reader sees one consistent line. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "fs/fs.h"

/* One open file (fi->fh): a source file's descriptor, or the stats file's snapshot. */
struct fs_handle {
    int fd; /* -1 for the stats file */
    int stats_len;
    char stats[192];
    struct fs_handle *prev, *next; /* fs_state's open_files */
};

static void fs_handle_link(struct fs_state *s, struct fs_handle *h)
{
    pthread_mutex_lock(&s->mu);
    h->prev = NULL;
    h->next = s->open_files;
    if (h->next)
        h->next->prev = h;
    s->open_files = h;
    pthread_mutex_unlock(&s->mu);
}

static void fs_handle_unlink(struct fs_state *s, struct fs_handle *h)
{
    pthread_mutex_lock(&s->mu);
    if (h->prev)
        h->prev->next = h->next;
    else
        s->open_files = h->next;
    if (h->next)
        h->next->prev = h->prev;
    pthread_mutex_unlock(&s->mu);
}

static void fs_handle_free(struct fs_handle *h)
{
    if (h->fd >= 0)
        close(h->fd);
    free(h);
}

void fs_close_all(struct fs_state *s)
{
    pthread_mutex_lock(&s->mu);
    struct fs_handle *h = s->open_files;
    s->open_files = NULL;
    pthread_mutex_unlock(&s->mu);
    while (h) {
        struct fs_handle *next = h->next;
        fs_handle_free(h);
        h = next;
    }
}

static struct fs_state *fs_state_get(void)
{
    return fuse_get_context()->private_data;
}

/* The path relative to the source directory: "." for the root. */
static const char *fs_rel(const char *path)
{
    while (*path == '/')
        path++;
    return *path ? path : ".";
}

static int fs_is_stats(const char *path)
{
    return strcmp(path, "/" FS_STATS_NAME) == 0;
}

int fs_stats_json(struct data_storage *st, char *buf, size_t cap)
{
    struct data_storage_stats s;
    data_storage_get_stats(st, &s);
    int n = snprintf(buf, cap,
                     "{\"requests\":%lld,\"bytes\":%lld,\"wait_ns\":%lld,\"read_ns\":%lld}\n",
                     (long long)s.requests, (long long)s.bytes, (long long)s.wait_ns,
                     (long long)s.read_ns);
    return n < 0 ? 0 : (n >= (int)cap ? (int)cap - 1 : n);
}

static void fs_stats_attr(struct stat *sb)
{
    char buf[192];
    struct fs_state *s = fs_state_get();
    memset(sb, 0, sizeof *sb);
    sb->st_mode = S_IFREG | 0444;
    sb->st_nlink = 1;
    sb->st_uid = getuid();
    sb->st_gid = getgid();
    sb->st_size = fs_stats_json(s->st, buf, sizeof buf);
    clock_gettime(CLOCK_REALTIME, &sb->st_mtim);
    sb->st_atim = sb->st_ctim = sb->st_mtim;
}

static int fs_getattr(const char *path, struct stat *sb, struct fuse_file_info *fi)
{
    if (fs_is_stats(path)) {
        fs_stats_attr(sb);
        return 0;
    }
    if (fstatat(fs_state_get()->src_fd, fs_rel(path), sb,
                AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) < 0)
        return -errno;
    return 0;
}

static int fs_readlink(const char *path, char *buf, size_t size)
{
    if (size == 0)
        return -EINVAL;
    ssize_t n = readlinkat(fs_state_get()->src_fd, fs_rel(path), buf, size - 1);
    if (n < 0)
        return -errno;
    buf[n] = '\0';
    return 0;
}

/* Owns the DIR (fi->fh) until fs_releasedir. */
static int fs_opendir(const char *path, struct fuse_file_info *fi)
{
    int fd = openat(fs_state_get()->src_fd, fs_rel(path),
                    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        int err = errno;
        close(fd);
        return -err;
    }
    fi->fh = (uint64_t)(uintptr_t)d;
    return 0;
}

/* The whole directory in one call (offsets 0: libfuse buffers it), the stats file's name
 * left out at the root. */
static int fs_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
                      struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
    DIR *d = (DIR *)(uintptr_t)fi->fh;
    bool root = strcmp(fs_rel(path), ".") == 0;
    rewinddir(d);
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de)
            return errno ? -errno : 0;
        if (root && strcmp(de->d_name, FS_STATS_NAME) == 0)
            continue;
        struct stat sb = {.st_ino = de->d_ino, .st_mode = (mode_t)DTTOIF(de->d_type)};
        if (fill(buf, de->d_name, &sb, 0, 0))
            return 0;
    }
}

static int fs_releasedir(const char *path, struct fuse_file_info *fi)
{
    closedir((DIR *)(uintptr_t)fi->fh);
    return 0;
}

/* The handle (fi->fh) is owned by s->open_files until fs_release (or fs_close_all). */
static int fs_open(const char *path, struct fuse_file_info *fi)
{
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC))
        return -EROFS;
    struct fs_handle *h = calloc(1, sizeof *h);
    if (!h)
        return -ENOMEM;
    h->fd = -1;
    struct fs_state *s = fs_state_get();
    if (fs_is_stats(path)) {
        h->stats_len = fs_stats_json(s->st, h->stats, sizeof h->stats);
    } else {
        h->fd = data_storage_openat(s->st, s->src_fd, fs_rel(path),
                                    O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (h->fd < 0) {
            int err = errno;
            free(h);
            return -err;
        }
    }
    fi->direct_io = 1;
    fi->keep_cache = 0;
    fi->fh = (uint64_t)(uintptr_t)h;
    fs_handle_link(s, h);
    return 0;
}

static int fs_read(const char *path, char *buf, size_t size, off_t off,
                   struct fuse_file_info *fi)
{
    struct fs_handle *h = (struct fs_handle *)(uintptr_t)fi->fh;
    if (h->fd < 0) {
        if (off < 0)
            return -EINVAL;
        if (off >= h->stats_len)
            return 0;
        size_t n = (size_t)(h->stats_len - off);
        n = n < size ? n : size;
        memcpy(buf, h->stats + off, n);
        return (int)n;
    }
    size_t got = 0;
    if (data_storage_pread_upto(fs_state_get()->st, h->fd, buf, size, off, &got) < 0)
        return -errno;
    return (int)got;
}

static int fs_release(const char *path, struct fuse_file_info *fi)
{
    struct fs_handle *h = (struct fs_handle *)(uintptr_t)fi->fh;
    fs_handle_unlink(fs_state_get(), h);
    fs_handle_free(h);
    return 0;
}

static int fs_statfs(const char *path, struct statvfs *sv)
{
    if (fstatvfs(fs_state_get()->src_fd, sv) < 0)
        return -errno;
    sv->f_flag |= ST_RDONLY;
    return 0;
}

/* --- every write operation: EROFS ------------------------------------------------------ */

static int fs_rofs_mknod(const char *p, mode_t m, dev_t d)
{
    return -EROFS;
}
static int fs_rofs_mkdir(const char *p, mode_t m)
{
    return -EROFS;
}
static int fs_rofs_path(const char *p)
{
    return -EROFS;
}
static int fs_rofs_two(const char *a, const char *b)
{
    return -EROFS;
}
static int fs_rofs_rename(const char *a, const char *b, unsigned int flags)
{
    return -EROFS;
}
static int fs_rofs_chmod(const char *p, mode_t m, struct fuse_file_info *fi)
{
    return -EROFS;
}
static int fs_rofs_chown(const char *p, uid_t u, gid_t g, struct fuse_file_info *fi)
{
    return -EROFS;
}
static int fs_rofs_truncate(const char *p, off_t o, struct fuse_file_info *fi)
{
    return -EROFS;
}
static int fs_rofs_write(const char *p, const char *b, size_t n, off_t o,
                         struct fuse_file_info *fi)
{
    return -EROFS;
}
static int fs_rofs_create(const char *p, mode_t m, struct fuse_file_info *fi)
{
    return -EROFS;
}
static int fs_rofs_utimens(const char *p, const struct timespec tv[2],
                           struct fuse_file_info *fi)
{
    return -EROFS;
}
static int fs_rofs_setxattr(const char *p, const char *n, const char *v, size_t s, int f)
{
    return -EROFS;
}
static int fs_rofs_fallocate(const char *p, int m, off_t o, off_t n, struct fuse_file_info *fi)
{
    return -EROFS;
}

/* Every read through the mount is direct (see top); attributes are cached as usual. */
static void *fs_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
    conn->max_read = FS_MAX_READ;
    cfg->direct_io = 1;
    cfg->kernel_cache = 0;
    cfg->use_ino = 1;
    return fuse_get_context()->private_data;
}

static const struct fuse_operations fs_ops = {
    .init = fs_init,
    .getattr = fs_getattr,
    .readlink = fs_readlink,
    .opendir = fs_opendir,
    .readdir = fs_readdir,
    .releasedir = fs_releasedir,
    .open = fs_open,
    .read = fs_read,
    .release = fs_release,
    .statfs = fs_statfs,
    .mknod = fs_rofs_mknod,
    .mkdir = fs_rofs_mkdir,
    .unlink = fs_rofs_path,
    .rmdir = fs_rofs_path,
    .removexattr = fs_rofs_two,
    .symlink = fs_rofs_two,
    .link = fs_rofs_two,
    .rename = fs_rofs_rename,
    .chmod = fs_rofs_chmod,
    .chown = fs_rofs_chown,
    .truncate = fs_rofs_truncate,
    .write = fs_rofs_write,
    .create = fs_rofs_create,
    .utimens = fs_rofs_utimens,
    .setxattr = fs_rofs_setxattr,
    .fallocate = fs_rofs_fallocate,
};

const struct fuse_operations *fs_passthrough_ops(void)
{
    return &fs_ops;
}
