/* storage_read: reads files from C exactly as ddpbench's loader reads a sample file
 * (data_storage_read_file with no profile: open, fstat, one pread of the whole file), from
 * N threads taking the files in turn, and prints one JSON line
 * {"files":K,"bytes":B,"seconds":S}. test_storage_fs.py and bench_storage_mount.py
 * measure ddpbench-fs's caps with it: the C side of "reading through the mount from C and
 * from Python".
 *
 *   storage_read THREADS FILE...
 *
 * Exit status: 0 every file read, 1 a read failed (its message on stderr), 2 usage. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "worker/data/storage.h"

#define STORAGE_READ_MAX_FILE ((size_t)1 << 32)
#define STORAGE_READ_MAX_THREADS 64

struct storage_read_job {
    char **files;
    int nfiles;
    atomic_int next;
    atomic_llong bytes;
    atomic_int failed;
};

static void *storage_read_thread(void *arg)
{
    struct storage_read_job *j = arg;
    for (;;) {
        int i = atomic_fetch_add(&j->next, 1);
        if (i >= j->nfiles || atomic_load(&j->failed))
            return NULL;
        uint8_t *buf = NULL;
        size_t len = 0;
        struct err e;
        if (data_storage_read_file(NULL, j->files[i], STORAGE_READ_MAX_FILE, &buf, &len, &e) <
            0) {
            fprintf(stderr, "storage_read: %s\n", e.msg);
            atomic_store(&j->failed, 1);
            return NULL;
        }
        free(buf);
        atomic_fetch_add(&j->bytes, (long long)len);
    }
}

int main(int argc, char **argv)
{
    int threads = argc > 2 ? atoi(argv[1]) : 0;
    if (threads < 1 || threads > STORAGE_READ_MAX_THREADS) {
        fprintf(stderr, "usage: storage_read THREADS(1..%d) FILE...\n",
                STORAGE_READ_MAX_THREADS);
        return 2;
    }
    struct storage_read_job j = {.files = argv + 2, .nfiles = argc - 2};
    pthread_t tid[STORAGE_READ_MAX_THREADS];
    int started = 0;
    int64_t t0 = clock_mono_ns();
    for (; started < threads; started++)
        if (pthread_create(&tid[started], NULL, storage_read_thread, &j) != 0)
            break;
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    double seconds = (double)(clock_mono_ns() - t0) * 1e-9;
    if (started < threads || atomic_load(&j.failed))
        return 1;
    printf("{\"files\":%d,\"bytes\":%lld,\"seconds\":%.6f}\n", j.nfiles,
           (long long)atomic_load(&j.bytes), seconds);
    return 0;
}
