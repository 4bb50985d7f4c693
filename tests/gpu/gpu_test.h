/* gpu_test: what every tests/gpu binary does first: find a CUDA device, or mark all its
 * cases skipped with the reason; and, for multi-rank cases, skip a case that needs more
 * GPUs than the machine has. tests/summarize.py allows exactly these two reasons, in the
 * gpu suite only: "no CUDA device ..." and "needs N GPUs, found M". So the suite runs in
 * every build with CUDA, and a machine without a GPU (or with too few) reports what it
 * could not run instead of leaving it out.
 *
 * Decisions:
 * - One GPU per rank: NCCL does not support several ranks on one GPU (NVIDIA/nccl issue
 *   418), so a multi-rank case never shares a device (the daemon's emulate_multi_rank is
 *   experimental and not tested here); on one GPU, NCCL is tested with one rank.
 * - A binary whose cases fork ranks counts devices in a child process
 *   (gpu_test_count_devices_forked): CUDA does not survive fork, so the parent must never
 *   initialise it, and cudaGetDeviceCount does.
 *
 * Ownership: the reasons live in static buffers for the whole run. */
#ifndef DDPB_GPU_TEST_H
#define DDPB_GPU_TEST_H

#include <cuda_runtime_api.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/unit/test.h"

/* Marks every later case skipped unless n > 0; rc and n as cudaGetDeviceCount left
 * them (rc_text: its error string, or "ok"). Returns n > 0. */
static inline int gpu_test_require_count(const char *rc_text, int n)
{
    static char reason[160];
    if (n > 0)
        return 1;
    snprintf(reason, sizeof reason, "no CUDA device (cudaGetDeviceCount: %s, %d devices)",
             rc_text, n);
    test_skip_all(reason);
    return 0;
}

/* A crash inside a vendor library leaves no line of its own in a device log (the first
 * device run ended test_gpu_layers with a bare rc 139): the frames, as "library(+offset)"
 * even without symbols, go to stderr, then the signal's default action runs, so the
 * exit status stays what it was. */
static void gpu_test_crash(int sig)
{
    void *frames[48];
    int n = backtrace(frames, 48);
    char head[] = "  CRASH: signal 00; frames (innermost first):\n";
    head[16] = (char)('0' + sig / 10 % 10), head[17] = (char)('0' + sig % 10);
    (void)!write(2, head, sizeof head - 1);
    backtrace_symbols_fd(frames, n, 2);
    signal(sig, SIG_DFL);
    raise(sig);
}

static inline void gpu_test_catch_crashes(void)
{
    void *warm[1];
    (void)backtrace(warm, 1); /* loads libgcc now, not inside the handler */
    signal(SIGSEGV, gpu_test_crash);
    signal(SIGBUS, gpu_test_crash);
    signal(SIGFPE, gpu_test_crash);
    signal(SIGABRT, gpu_test_crash);
}

/* true when a device is there; otherwise every later TEST_RUN is skipped */
static inline int gpu_test_require_device(void)
{
    gpu_test_catch_crashes();
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess)
        n = 0;
    return gpu_test_require_count(rc == cudaSuccess ? "ok" : cudaGetErrorString(rc), n);
}

/* gpu_test_require_device for a process that must not initialise CUDA itself: asks a
 * forked child. Returns the number of devices (0: every later case is skipped). */
static inline int gpu_test_require_device_forked(void)
{
    static char text[128];
    int pfd[2], n = 0;
    if (pipe(pfd) < 0)
        return gpu_test_require_count("pipe failed", 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        cudaError_t rc = cudaGetDeviceCount(&n);
        dprintf(pfd[1], "%d %s", rc == cudaSuccess ? n : 0,
                rc == cudaSuccess ? "ok" : cudaGetErrorString(rc));
        _exit(0);
    }
    close(pfd[1]);
    ssize_t k = pid > 0 ? read(pfd[0], text, sizeof text - 1) : -1;
    close(pfd[0]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    text[k > 0 ? k : 0] = '\0';
    int used = 0;
    if (sscanf(text, "%d %n", &n, &used) != 1)
        return gpu_test_require_count("the counting child said nothing", 0);
    return gpu_test_require_count(text + used, n) ? n : 0;
}

/* In a case: skips it unless the machine has at least `need` GPUs (`found`). */
#define GPU_TEST_NEED_GPUS(need, found)                                                        \
    do {                                                                                       \
        if ((found) < (need))                                                                  \
            T_SKIP("needs %d GPUs, found %d", (need), (found));                                \
    } while (0)

#endif
