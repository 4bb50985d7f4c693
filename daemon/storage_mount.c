/* storage_mount: see storage_mount.h. */
#include "daemon/storage_mount.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "daemon/launcher.h"

extern char **environ;

struct storage_mount {
    pid_t pid; /* 0: none running */
    int pidfd;
    bool stopping; /* the daemon ends it: its exit is no death */
    char mnt[PATH_MAX];
};

struct storage_mounts {
    char fs_path[PATH_MAX];
    char run_dir[PATH_MAX];
    char source[PATH_MAX];
    struct spec_dataset d;
    int world_size;
    struct storage_mount *ranks;
};

/* --- checks ------------------------------------------------------------------------------ */

/* Whether name is an executable: a path as given, a bare name on PATH. */
static bool storage_program_found(const char *name)
{
    if (strchr(name, '/'))
        return access(name, X_OK) == 0;
    const char *path = getenv("PATH");
    char dirs[4096], cand[PATH_MAX];
    snprintf(dirs, sizeof dirs, "%s", path ? path : "/usr/bin:/bin");
    for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d;
         d = strtok_r(NULL, ":", &save)) {
        snprintf(cand, sizeof cand, "%s/%s", d, name);
        if (access(cand, X_OK) == 0)
            return true;
    }
    return false;
}

int storage_mount_available(const char *fs_path, const char *fuse_device, struct err *e)
{
    int fd = open(fuse_device, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return err_set(e, ERR_CONFLICT, "dataset.storage",
                       "dataset.storage: this run reads through a per-rank storage mount "
                       "(dataset.storage_layer), and this node's FUSE device %s cannot be "
                       "opened: %s; use storage local, or storage_layer in_process with "
                       "engine ddpbench",
                       fuse_device, strerror(errno));
    close(fd);
    if (!fs_path[0] || !storage_program_found(fs_path))
        return err_set(e, ERR_CONFLICT, "dataset.storage",
                       "dataset.storage: this run reads through a per-rank storage mount "
                       "(dataset.storage_layer), and this node has no ddpbench-fs program "
                       "(%s; built from fs/ when libfuse3 is installed, or ddpbenchd --fs)",
                       fs_path[0] ? fs_path : "none");
    return 0;
}

/* --- the set of a run ------------------------------------------------------------------- */

struct storage_mounts *storage_mounts_create(const char *fs_path, const char *run_dir,
                                             const char *source, const struct spec_dataset *d,
                                             int world_size)
{
    struct storage_mounts *m = calloc(1, sizeof *m);
    if (!m || !(m->ranks = calloc((size_t)world_size, sizeof *m->ranks))) {
        free(m);
        return NULL;
    }
    snprintf(m->fs_path, sizeof m->fs_path, "%s", fs_path);
    snprintf(m->run_dir, sizeof m->run_dir, "%s", run_dir);
    snprintf(m->source, sizeof m->source, "%s", source);
    m->d = *d;
    m->world_size = world_size;
    for (int i = 0; i < world_size; i++)
        m->ranks[i].pidfd = -1;
    return m;
}

int storage_mounts_pidfd(const struct storage_mounts *m, int rank)
{
    return m && rank >= 0 && rank < m->world_size ? m->ranks[rank].pidfd : -1;
}

/* The argv of rank's ddpbench-fs into av (strings in text, each 32 bytes). */
static void storage_argv(const struct storage_mounts *m, const char *mnt, char *av[24],
                         char text[4][32])
{
    int n = 0;
    av[n++] = (char *)m->fs_path;
    av[n++] = "--source";
    av[n++] = (char *)m->source;
    av[n++] = "--mount";
    av[n++] = (char *)mnt;
    av[n++] = "--storage";
    av[n++] = (char *)(m->d.storage[0] ? m->d.storage : "local");
    if (strcmp(m->d.storage, "custom") == 0) { /* a named profile's figures are its own */
        snprintf(text[0], 32, "%.17g", m->d.read_mbps);
        snprintf(text[1], 32, "%.17g", m->d.read_latency_ms);
        snprintf(text[2], 32, "%d", m->d.read_concurrency);
        av[n++] = "--read-mbps";
        av[n++] = text[0];
        av[n++] = "--read-latency-ms";
        av[n++] = text[1];
        av[n++] = "--read-concurrency";
        av[n++] = text[2];
    }
    if (m->d.cold)
        av[n++] = "--cold";
    snprintf(text[3], 32, "3");
    av[n++] = "--ready-fd";
    av[n++] = text[3];
    av[n++] = "--die-with-parent";
    av[n] = NULL;
}

static void storage_how_ended(int wstatus, const char *log, char *out, size_t cap)
{
    char tail[300];
    launcher_log_tail(log, tail, sizeof tail);
    if (WIFSIGNALED(wstatus))
        snprintf(out, cap, "killed by signal %d", WTERMSIG(wstatus));
    else
        snprintf(out, cap, "exited with status %d%s%s", WEXITSTATUS(wstatus),
                 tail[0] ? ": " : "", tail);
}

/* Spawns rank's ddpbench-fs with the ready pipe's write end on fd 3 and its output in
 * log. Returns the pid, or -1 with e set. */
static pid_t storage_spawn(const struct storage_mounts *m, const char *mnt, const char *log,
                           int ready_w, struct err *e)
{
    char *av[24], text[4][32];
    storage_argv(m, mnt, av, text);
    int logfd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (logfd < 0)
        return err_errno(e, "dataset.storage: open %s", log);
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    launcher_spawn_setup(&fa, &attr, logfd, ready_w);
    pid_t pid = -1;
    int rc = strchr(m->fs_path, '/') ? posix_spawn(&pid, av[0], &fa, &attr, av, environ)
                                     : posix_spawnp(&pid, av[0], &fa, &attr, av, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(logfd);
    if (rc != 0) {
        errno = rc;
        return err_errno(e, "dataset.storage: cannot start %s", m->fs_path);
    }
    return pid;
}

/* Waits (bounded) for "ready" on fd; false on EOF (the program ended) or the timeout. */
static bool storage_wait_ready(int fd, bool *timed_out)
{
    int64_t until = clock_mono_ms() + STORAGE_MOUNT_READY_MS;
    char buf[16];
    size_t got = 0;
    *timed_out = false;
    for (;;) {
        int64_t left = until - clock_mono_ms();
        if (left <= 0) {
            *timed_out = true;
            return false;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int rc = poll(&p, 1, (int)left);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            continue;
        ssize_t n = read(fd, buf + got, sizeof buf - 1 - got);
        if (n <= 0)
            return false;
        got += (size_t)n;
        buf[got] = '\0';
        if (strstr(buf, "ready"))
            return true;
        if (got >= sizeof buf - 1)
            return false;
    }
}

/* Ends one mount: SIGTERM, SIGKILL after STORAGE_MOUNT_STOP_MS, reaped; then the lazy
 * detach of what is left and the directory removed. */
static void storage_end(struct storage_mount *s)
{
    if (s->pid > 0) {
        s->stopping = true;
        kill(s->pid, SIGTERM);
        int64_t until = clock_mono_ms() + STORAGE_MOUNT_STOP_MS;
        while (waitpid(s->pid, NULL, WNOHANG) == 0) {
            if (clock_mono_ms() >= until) {
                kill(s->pid, SIGKILL);
                waitpid(s->pid, NULL, 0);
                break;
            }
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        s->pid = 0;
    }
    if (s->pidfd >= 0)
        close(s->pidfd);
    s->pidfd = -1;
    if (s->mnt[0]) {
        storage_mount_detach(s->mnt);
        rmdir(s->mnt);
    }
}

int storage_mounts_start(struct storage_mounts *m, int rank, char *mnt, size_t cap,
                         struct err *e)
{
    struct storage_mount *s = &m->ranks[rank];
    if (s->pid > 0) {
        snprintf(mnt, cap, "%s", s->mnt);
        return 0;
    }
    char dir[PATH_MAX], log[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/storage", m->run_dir);
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return err_errno(e, "dataset.storage: mkdir %s", dir);
    char real[PATH_MAX]; /* absolute: the sweep finds it in mountinfo and cmdline */
    if (!realpath(dir, real))
        return err_errno(e, "dataset.storage: realpath %s", dir);
    snprintf(s->mnt, sizeof s->mnt, "%.*s/rank%d", PATH_MAX - 16, real, rank);
    if (mkdir(s->mnt, 0755) < 0 && errno != EEXIST)
        return err_errno(e, "dataset.storage: mkdir %s", s->mnt);
    snprintf(log, sizeof log, "%s/storage-rank%d.log", m->run_dir, rank);
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return err_errno(e, "dataset.storage: pipe");
    pid_t pid = storage_spawn(m, s->mnt, log, p[1], e);
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        return -1;
    }
    s->pid = pid;
    s->stopping = false;
    bool timed_out;
    bool ready = storage_wait_ready(p[0], &timed_out);
    close(p[0]);
    s->pidfd = ready ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
    if (ready && s->pidfd >= 0) {
        snprintf(mnt, cap, "%s", s->mnt);
        log_info("storage: rank %d reads %s through %s (%s)", rank, m->source, s->mnt,
                 m->d.storage);
        return 0;
    }
    char why[400] = "no pidfd";
    int wstatus = 0;
    if (timed_out)
        snprintf(why, sizeof why, "not ready within %d ms", STORAGE_MOUNT_READY_MS);
    else if (!ready && waitpid(pid, &wstatus, 0) == pid) {
        storage_how_ended(wstatus, log, why, sizeof why);
        s->pid = 0;
    }
    storage_end(s);
    return err_set(e, ERR_IO, "dataset.storage",
                   "dataset.storage: the storage layer for rank %d (ddpbench-fs) could not "
                   "mount %s: %s",
                   rank, m->source, why);
}

bool storage_mounts_died(struct storage_mounts *m, int rank, char *why, size_t n)
{
    if (!m || rank < 0 || rank >= m->world_size)
        return false;
    struct storage_mount *s = &m->ranks[rank];
    int wstatus;
    if (s->pid <= 0 || s->stopping || waitpid(s->pid, &wstatus, WNOHANG) != s->pid)
        return false;
    char log[PATH_MAX + 32];
    snprintf(log, sizeof log, "%s/storage-rank%d.log", m->run_dir, rank);
    storage_how_ended(wstatus, log, why, n);
    s->pid = 0;
    return true;
}

void storage_mounts_end(struct storage_mounts *m, int rank)
{
    if (m && rank >= 0 && rank < m->world_size)
        storage_end(&m->ranks[rank]);
}

void storage_mounts_stop(struct storage_mounts *m)
{
    for (int i = 0; m && i < m->world_size; i++)
        if (m->ranks[i].pid > 0 || m->ranks[i].mnt[0])
            storage_end(&m->ranks[i]);
}

void storage_mounts_free(struct storage_mounts *m)
{
    if (!m)
        return;
    storage_mounts_stop(m);
    free(m->ranks);
    free(m);
}

/* --- detaching and the sweep at start ----------------------------------------------------- */

int storage_mount_detach(const char *mnt)
{
    if (umount2(mnt, MNT_DETACH) == 0 || errno == EINVAL || errno == ENOENT)
        return 0;
    if (errno != EPERM)
        return -1;
    pid_t pid;
    char *const av[] = {"fusermount3", "-uz", (char *)mnt, NULL};
    if (posix_spawnp(&pid, av[0], NULL, NULL, av, environ) != 0)
        return -1;
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* mountinfo's octal escapes (\040 for a space) decoded in place. */
static void storage_unescape(char *s)
{
    char *w = s;
    for (char *r = s; *r; r++) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
            r[3] >= '0' && r[3] <= '7') {
            *w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
            r += 3;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
}

/* Whether path lies strictly beneath dir. */
static bool storage_beneath(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    return strncmp(path, dir, n) == 0 && path[n] == '/';
}

int storage_mount_scan(const char *mountinfo, const char *fstype, const char *dir,
                       void (*fn)(const char *mnt, void *arg), void *arg)
{
    int count = 0;
    const char *line = mountinfo;
    while (line && *line) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[4096];
        if (len < sizeof buf) {
            memcpy(buf, line, len);
            buf[len] = '\0';
            /* id parent major:minor root mountpoint options [optional...] - fstype src */
            char *f[6] = {0}, *save = NULL;
            char *tok = strtok_r(buf, " ", &save);
            for (int i = 0; tok && i < 5; i++, tok = strtok_r(NULL, " ", &save))
                f[i] = tok;
            while (tok && strcmp(tok, "-") != 0)
                tok = strtok_r(NULL, " ", &save);
            char *type = tok ? strtok_r(NULL, " ", &save) : NULL;
            if (f[4] && type && strcmp(type, fstype) == 0) {
                storage_unescape(f[4]);
                if (storage_beneath(f[4], dir)) {
                    fn(f[4], arg);
                    count++;
                }
            }
        }
        line = end ? end + 1 : NULL;
    }
    return count;
}

/* /proc/self/mountinfo, whole (owned; NULL when unreadable). */
static char *storage_read_mountinfo(void)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap);
    while (s) {
        n += fread(s + n, 1, cap - n - 1, f);
        if (n < cap - 1)
            break;
        char *t = realloc(s, cap *= 2);
        if (!t)
            free(s);
        s = t;
    }
    fclose(f);
    if (s)
        s[n] = '\0';
    return s;
}

/* Whether /proc/<pid>/cmdline is a ddpbench-fs serving a mount beneath dir. */
static bool storage_is_leftover(pid_t pid, const char *dir)
{
    char cmd[8192];
    long got = launcher_proc_read(pid, "cmdline", cmd, sizeof cmd);
    if (got < 0)
        return false;
    size_t n = (size_t)got;
    const char *base = strrchr(cmd, '/');
    if (strcmp(base ? base + 1 : cmd, "ddpbench-fs") != 0)
        return false;
    for (size_t i = strlen(cmd) + 1; i < n; i += strlen(cmd + i) + 1)
        if (strcmp(cmd + i, "--mount") == 0 && i + 8 < n)
            return storage_beneath(cmd + i + 8, dir);
    return false;
}

static void storage_sweep_one(const char *mnt, void *arg)
{
    int *n = arg;
    if (storage_mount_detach(mnt) == 0) {
        log_info("storage: detached a stale mount %s", mnt);
        (*n)++;
    } else {
        log_error("storage: cannot detach the stale mount %s: %s", mnt, strerror(errno));
    }
}

int storage_mount_sweep(const char *state_dir)
{
    char dir[PATH_MAX];
    if (!realpath(state_dir, dir))
        return 0;
    DIR *pd = opendir("/proc");
    for (struct dirent *de; pd && (de = readdir(pd));) {
        char *endp;
        long pid = strtol(de->d_name, &endp, 10);
        if (*endp || pid <= 1 || pid == getpid() || !storage_is_leftover((pid_t)pid, dir))
            continue;
        log_info("storage: killing ddpbench-fs %ld, left by an earlier daemon", pid);
        kill((pid_t)pid, SIGKILL);
    }
    if (pd)
        closedir(pd);
    char *info = storage_read_mountinfo();
    int detached = 0;
    if (info) /* "fuse": a ddpbench-fs that named no subtype; beneath dir it is ours */
        for (int i = 0; i < 2; i++)
            storage_mount_scan(info, i ? "fuse" : STORAGE_MOUNT_FSTYPE, dir, storage_sweep_one,
                               &detached);
    free(info);
    return detached;
}
