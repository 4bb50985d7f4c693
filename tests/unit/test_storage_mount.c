/* test_storage_mount: daemon/storage_mount.c without FUSE. The submit's check (a FUSE
 * device that cannot be opened, no ddpbench-fs: ERR_CONFLICT naming dataset.storage),
 * the mountinfo scan the start-up sweep uses (type, beneath the state directory, octal
 * escapes), and a run's set driven with a stand-in program that speaks ddpbench-fs's
 * side of the contract (its argv, "ready" on --ready-fd): the argv it is given, the wait
 * for ready, a program that fails to mount (its stderr named), one killed -9 (named, by
 * signal), and the stop that ends it. The FUSE mount itself is
 * tests/integration/test_storage_mount.py's. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/storage_mount.h"
#include "tests/unit/test.h"

/* Writes an executable shell script at dir/name with body; its path into out. */
static int write_script(const char *name, const char *body, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", test_tmpdir(), name);
    FILE *f = fopen(out, "w");
    if (!f)
        return -1;
    fprintf(f, "#!/bin/sh\n%s\n", body);
    fclose(f);
    return chmod(out, 0755);
}

static void test_available(void)
{
    struct err e = {0};
    char fs[512];
    T_OK(write_script("fs-ok", "exit 0", fs, sizeof fs));
    T_CHECK(storage_mount_available(fs, "/nonexistent/fuse", &e) < 0);
    T_EQ_INT(e.code, ERR_CONFLICT);
    T_EQ_STR(e.field, "dataset.storage");
    T_CHECK(strstr(e.msg, "/nonexistent/fuse") && strstr(e.msg, "cannot be opened"));
    e = (struct err){0};
    T_CHECK(storage_mount_available("/nonexistent/ddpbench-fs", "/dev/null", &e) < 0);
    T_EQ_STR(e.field, "dataset.storage");
    T_CHECK(strstr(e.msg, "no ddpbench-fs program"));
    e = (struct err){0};
    T_CHECK(storage_mount_available("no-such-program-here", "/dev/null", &e) < 0);
    T_OK(storage_mount_available(fs, "/dev/null", &e));
    T_OK(storage_mount_available("sh", "/dev/null", &e)); /* a bare name: found on PATH */
}

struct seen {
    int n;
    char mnt[4][256];
};

static void seen_one(const char *mnt, void *arg)
{
    struct seen *s = arg;
    if (s->n < 4)
        snprintf(s->mnt[s->n], sizeof s->mnt[0], "%s", mnt);
    s->n++;
}

static void test_scan(void)
{
    static const char info[] =
        "22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        "40 22 0:40 / /st/runs/1/storage/rank0 rw,nosuid,nodev - fuse.ddpbench-fs "
        "ddpbench-fs rw,user_id=0\n"
        "41 22 0:41 / /st/runs/2/storage/rank\\0401 rw shared:9 master:2 - fuse.ddpbench-fs "
        "ddpbench-fs rw\n"
        "42 22 0:42 / /other/runs/1/storage/rank0 rw - fuse.ddpbench-fs ddpbench-fs rw\n"
        "43 22 0:43 / /st/runs/3/storage/rank0 rw - fuse.sshfs x rw\n"
        "44 22 0:44 / /stale rw - fuse.ddpbench-fs ddpbench-fs rw\n"
        "45 22 0:45 / /st rw - fuse.ddpbench-fs ddpbench-fs rw";
    struct seen s = {0};
    T_EQ_INT(storage_mount_scan(info, STORAGE_MOUNT_FSTYPE, "/st", seen_one, &s), 2);
    T_EQ_INT(s.n, 2);
    T_EQ_STR(s.mnt[0], "/st/runs/1/storage/rank0");
    T_EQ_STR(s.mnt[1], "/st/runs/2/storage/rank 1");
    s = (struct seen){0};
    T_EQ_INT(storage_mount_scan(info, "fuse.sshfs", "/st/", seen_one, &s), 1);
    T_EQ_INT(storage_mount_scan("", STORAGE_MOUNT_FSTYPE, "/st", seen_one, &s), 1 - 1);
}

/* A stand-in ddpbench-fs: records its argv, then says ready (or not) and waits. */
static const char standin_body[] =
    "dir=$(dirname \"$0\")\n"
    "echo \"$@\" > \"$dir/argv.txt\"\n"
    "case \"$*\" in *--mount*/rank1*) echo 'fuse: device not found, try modprobe fuse' >&2;"
    " exit 3;; esac\n"
    "echo ready >&3\n"
    "exec sleep 30\n";

static void test_set_lifecycle(void)
{
    char fs[512], run[512], argv_path[600], text[1024] = "";
    struct err e = {0};
    T_OK(write_script("ddpbench-fs", standin_body, fs, sizeof fs));
    snprintf(run, sizeof run, "%s/run", test_tmpdir());
    T_CHECK(mkdir(run, 0755) == 0);
    struct spec_dataset d = {0};
    snprintf(d.storage, sizeof d.storage, "custom");
    d.read_mbps = 50;
    d.read_latency_ms = 0.5;
    d.read_concurrency = 4;
    d.cold = true;
    struct storage_mounts *m = storage_mounts_create(fs, run, "/data/set", &d, 2);
    T_CHECK(m);
    if (!m)
        return;
    char mnt[4096];
    T_OK(storage_mounts_start(m, 0, mnt, sizeof mnt, &e));
    T_CHECK(strstr(mnt, "/run/storage/rank0") != NULL);
    T_CHECK(storage_mounts_pidfd(m, 0) >= 0);
    T_CHECK(storage_mounts_pidfd(m, 1) < 0);
    snprintf(argv_path, sizeof argv_path, "%s/argv.txt", test_tmpdir());
    FILE *f = fopen(argv_path, "r");
    T_CHECK(f && fgets(text, sizeof text, f));
    if (f)
        fclose(f);
    T_CHECK(strstr(text, "--source /data/set --mount ") && strstr(text, "--storage custom") &&
            strstr(text, "--read-mbps 50 --read-latency-ms 0.5 --read-concurrency 4") &&
            strstr(text, "--cold --ready-fd 3 --die-with-parent"));
    char again[4096];
    T_OK(storage_mounts_start(m, 0, again, sizeof again, &e)); /* kept, not restarted */
    T_EQ_STR(again, mnt);
    /* a program that cannot mount: refused naming the storage and its stderr */
    e = (struct err){0};
    T_CHECK(storage_mounts_start(m, 1, again, sizeof again, &e) < 0);
    T_EQ_STR(e.field, "dataset.storage");
    T_CHECK(strstr(e.msg, "rank 1") && strstr(e.msg, "exited with status 3") &&
            strstr(e.msg, "fuse: device not found"));
    char why[400];
    T_CHECK(!storage_mounts_died(m, 0, why, sizeof why)); /* alive */
    /* killed -9: named by signal, once */
    pid_t pid = 0;
    int pidfd = storage_mounts_pidfd(m, 0);
    T_CHECK(pidfd >= 0);
    /* the pid behind the pidfd, from /proc/self/fdinfo */
    char info[64], line[128];
    snprintf(info, sizeof info, "/proc/self/fdinfo/%d", pidfd);
    f = fopen(info, "r");
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Pid: %d", &pid) == 1)
            break;
    if (f)
        fclose(f);
    T_CHECK(pid > 0);
    if (pid > 0)
        kill(pid, SIGKILL);
    bool died = false;
    for (int i = 0; i < 200 && !died; i++) {
        died = storage_mounts_died(m, 0, why, sizeof why);
        if (!died)
            usleep(10000);
    }
    T_CHECK(died);
    T_CHECK(strstr(why, "killed by signal 9") != NULL);
    T_CHECK(!storage_mounts_died(m, 0, why, sizeof why));
    storage_mounts_end(m, 0);
    T_CHECK(access(mnt, F_OK) < 0); /* its directory removed */
    /* a fresh one, ended by the stop: no death, nothing left */
    T_OK(storage_mounts_start(m, 0, mnt, sizeof mnt, &e));
    storage_mounts_stop(m);
    T_CHECK(!storage_mounts_died(m, 0, why, sizeof why));
    T_CHECK(access(mnt, F_OK) < 0);
    storage_mounts_free(m);
}

static void test_detach_not_mounted(void)
{
    struct err e = {0}; /* T_OK's */
    (void)e;
    T_OK(storage_mount_detach(test_tmpdir())); /* not a mount point: nothing to do */
    T_OK(storage_mount_detach("/nonexistent/mount"));
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_available);
    TEST_RUN(test_scan);
    TEST_RUN(test_set_lifecycle);
    TEST_RUN(test_detach_not_mounted);
    return test_end();
}
