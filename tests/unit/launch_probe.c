/* launch_probe: stands in for ddpbench-worker in test_launcher. It reports, as one JSON
 * line on fd 3, what the launcher gave it: its DDPB_* environment, whether any inherited
 * variables leaked, which fds above 3 are open, its process group, and its stdin; it
 * prints a line on stdout and stderr (which must land in the rank's log file); with
 * PROBE_SLEEP set (a name the launcher passes through) it then sleeps until killed; with
 * PROBE_ECHO set it also prints the JSON line on stdout (the rank's log). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

int main(void)
{
    char line[4096];
    int n = snprintf(line, sizeof line, "{\"pid\":%d,\"pgid\":%d,\"env\":{", (int)getpid(),
                     (int)getpgrp());
    int first = 1;
    for (char **e = environ; *e; e++) {
        if (strncmp(*e, "DDPB_", 5) != 0 && strncmp(*e, "CUDA_VISIBLE", 12) != 0 &&
            strncmp(*e, "NCCL_", 5) != 0)
            continue;
        const char *eq = strchr(*e, '=');
        n += snprintf(line + n, sizeof line - (size_t)n, "%s\"%.*s\":\"%s\"", first ? "" : ",",
                      (int)(eq - *e), *e, eq + 1);
        first = 0;
    }
    int open_fds = 0;
    for (int fd = 4; fd < 1024; fd++)
        open_fds += fcntl(fd, F_GETFD) >= 0;
    struct stat st;
    int devnull = fstat(0, &st) == 0 && S_ISCHR(st.st_mode);
    n += snprintf(line + n, sizeof line - (size_t)n,
                  "},\"open_fds\":%d,\"stdin_devnull\":%d}\n", open_fds, devnull);
    if (getenv("PROBE_ECHO")) { /* the same line in the rank's log, for tests of the
                                   monitor: first, since the report may get it killed */
        fputs(line, stdout);
        fflush(stdout);
    }
    if (write(3, line, (size_t)n) != n)
        return 2;
    printf("probe stdout\n");
    fprintf(stderr, "probe stderr\n");
    fflush(NULL);
    if (getenv("PROBE_SLEEP"))
        for (;;)
            pause();
    return 0;
}
