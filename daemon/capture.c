/* capture: see capture.h. */
#include "daemon/capture.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"

extern char **environ;

/* Reads the child's stdout until EOF or the deadline; -1 when it took too long. */
static int capture_read_all(int fd, struct buf *out, int64_t deadline_ms)
{
    char chunk[4096];
    for (;;) {
        int64_t left = deadline_ms - clock_mono_ms();
        if (left <= 0)
            return -1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int rc = poll(&p, 1, (int)(left > 1000 ? 1000 : left));
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            continue;
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n == 0)
            return 0;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || buf_append(out, chunk, (size_t)n) < 0)
            return -1;
    }
}

int capture_run(char *const argv[], int timeout_ms, atomic_int *child,
                const atomic_bool *cancel, struct buf *out, int *status, struct err *e)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0)
        return err_errno(e, "%s: pipe", argv[0]);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    pid_t pid;
    int src = posix_spawnp(&pid, argv[0], &fa, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(pfd[1]);
    if (src != 0) {
        close(pfd[0]);
        errno = src;
        return err_errno(e, "cannot start %s", argv[0]);
    }
    if (child)
        atomic_store(child, (int)pid);
    if (cancel && atomic_load(cancel))
        kill(-pid, SIGKILL); /* cancelled while it was starting */
    int rc = capture_read_all(pfd[0], out, clock_mono_ms() + timeout_ms);
    close(pfd[0]);
    if (rc < 0)
        kill(-pid, SIGKILL);
    *status = 0;
    waitpid(pid, status, 0);
    if (child)
        atomic_store(child, 0);
    if (rc < 0)
        return err_set(e, ERR_TIMEOUT, NULL, "%s took more than %d ms", argv[0], timeout_ms);
    return 0;
}
