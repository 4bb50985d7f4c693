/* storage: the reads a dataset makes while training, through an emulated storage profile,
 * so the local / NFS / blob comparison of a data pipeline runs on one machine.
 *
 * Decision: emulation, not a network. A profile caps what the rank's reads may do and the
 * reads themselves are real (pread on the local file): every request (an open, a read)
 * waits for one of `concurrency` request slots, then pays `latency_ms` before it is issued
 * (a round trip to the server), and its bytes pass through one token bucket of `read_mbps`
 * shared by every thread of the rank (the link or the per-client quota). A cap of 0 is no
 * cap. The profile is per rank: each rank is one client of the emulated server, as each
 * process of a real job is one NFS client or one blob-storage SDK. The real medium under
 * the emulation must be faster than the profile for the figures to mean anything; cold
 * mode drops the pages a read brought into the page cache (posix_fadvise DONTNEED) so a
 * repeated epoch or run reads from the device, not memory, where the platform allows it.
 *
 * The figures the named profiles assume (docs/design.md §12.5 keeps no more precise claim):
 *   local  no caps: whatever the machine's disk and page cache give.
 *   nfs    200 MB/s, 0.5 ms per request, 8 requests in flight: one client of a filer on a
 *          shared 10 GbE network (NFSv4 over TCP, default rsize, a busy server).
 *   blob   100 MB/s, 15 ms per request, 32 requests in flight: one VM reading an object
 *          store over HTTPS (first-byte latency of a GET; the per-client throughput cloud
 *          providers quote for a small VM).
 *
 * Ownership: data_storage_create returns a storage the caller owns (data_storage_destroy);
 * datasets borrow it, so it must outlive every dataset opened on it. All functions but
 * create and destroy are thread-safe. The read functions take st NULL as plain reads: no
 * caps, no stats (a dataset opened without a profile). */
#ifndef DDPB_DATA_STORAGE_H
#define DDPB_DATA_STORAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"

#define DATA_STORAGE_MAX_CONCURRENCY 1024

struct data_storage_profile {
    char name[16];     /* "local", "nfs", "blob" */
    double read_mbps;  /* 1e6 bytes per second; 0 = no cap */
    double latency_ms; /* paid by every request before it is issued; 0 = none */
    int concurrency;   /* requests in flight at once; 0 = no cap */
    bool cold;         /* drop the pages each read brought into the page cache */
};

/* The named profile's figures into *out (cold false). ERR_INVALID naming "dataset.storage"
 * for an unknown name. */
int data_storage_profile_get(const char *name, struct data_storage_profile *out, struct err *e);

struct data_storage_stats {
    int64_t requests; /* opens and reads issued */
    int64_t bytes;    /* bytes read */
    int64_t wait_ns;  /* time requests spent waiting on the caps (slots, latency,
                          bandwidth), summed over threads */
    int64_t read_ns;  /* time in the real open and pread calls, summed over threads */
};

struct data_storage;

/* Checks the profile (finite, >= 0, concurrency <= DATA_STORAGE_MAX_CONCURRENCY;
 * ERR_INVALID naming "dataset.read_mbps", "dataset.read_latency_ms" or
 * "dataset.read_concurrency"). Caller owns *out. */
int data_storage_create(const struct data_storage_profile *p, struct data_storage **out,
                        struct err *e);
/* NULL is fine. */
void data_storage_destroy(struct data_storage *st);

/* Opens path read-only (one request). Returns the fd (the caller closes it with close()),
 * or -1 with e set: ERR_NOT_FOUND when missing, ERR_IO otherwise; the message starts with
 * the path. */
int data_storage_open(struct data_storage *st, const char *path, struct err *e);
/* Reads exactly n bytes at off from fd (one request, however many pread calls the kernel
 * needs). path names the file in errors. Returns 0, or -1 with e set: ERR_INVALID ("path:
 * truncated: N bytes at OFF, file ends at ...") when the file is shorter, ERR_IO otherwise. */
int data_storage_pread(struct data_storage *st, int fd, void *buf, size_t n, off_t off,
                       const char *path, struct err *e);
/* Reads a whole file (open, size, one read request, close) into an owned heap block
 * (*out, *len; free() it). ERR_TOO_LARGE past max_bytes. */
int data_storage_read_file(struct data_storage *st, const char *path, size_t max_bytes,
                           uint8_t **out, size_t *len, struct err *e);

/* The server's side of a request, for a reader that is not ddpbench's loader: ddpbench-fs
 * (fs/) serves every open and read of its FUSE mount with these two, so the mount and the
 * in-process emulation are one piece of code. Both return errno values rather than a
 * struct err: that is what a file system answers.
 * data_storage_openat opens rel beneath dirfd with flags (O_RDONLY is the caller's; one
 * request): the fd (the caller closes it), or -1 with errno. */
int data_storage_openat(struct data_storage *st, int dirfd, const char *rel, int flags);
/* Reads up to n bytes at off from fd (one request, however many pread calls the kernel
 * needs), stopping at the end of the file: *got is what was read (0 at or past the end).
 * Cold mode drops those pages. 0, or -1 with errno (*got then counts the bytes charged). */
int data_storage_pread_upto(struct data_storage *st, int fd, void *buf, size_t n, off_t off,
                            size_t *got);

/* A consistent snapshot. */
void data_storage_get_stats(struct data_storage *st, struct data_storage_stats *out);

#endif
