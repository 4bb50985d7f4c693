/* fs: ddpbench-fs, a read-only FUSE pass-through of a dataset directory whose every open
 * and read goes through an emulated storage profile (worker/data/storage.h), so a reader
 * in any language (a PyTorch DataLoader, tf.data, ddpbench's own C loader) pays the same
 * caps. main.c holds the command line, the signals and the mount's lifecycle;
 * passthrough.c the file system operations.
 *
 * Decision: libfuse3's high-level (path) API. Paths are resolved beneath one descriptor of
 * the source directory (openat with O_NOFOLLOW, symlinks shown as symlinks and resolved
 * by the kernel through the mount), which is all a read-only pass-through needs; the
 * low-level API's inode bookkeeping would buy nothing measurable next to a capped read.
 * One data_storage per mount: the mount is one client (one rank) of the emulated server. */
#ifndef DDPB_FS_FS_H
#define DDPB_FS_FS_H

#define FUSE_USE_VERSION 312 /* libfuse 3.12: fuse_loop_cfg_* */
#include <fuse.h>
#include <pthread.h>

#include "worker/data/storage.h"

/* The virtual stats file at the mount root: hidden from readdir, never capped, never
 * counted; one JSON line of the storage's stats. */
#define FS_STATS_NAME ".ddpbench-fs-stats"

/* The largest read request the kernel sends (an NFS rsize): the mount option and init's
 * answer must agree. */
#define FS_MAX_READ (1024 * 1024)

struct fs_handle; /* passthrough.c: one open file */

/* What the operations share (fuse_get_context()->private_data). Borrowed from main.c,
 * which owns the descriptor and the storage and outlives the loop. */
struct fs_state {
    int src_fd;              /* the source directory, O_PATH | O_DIRECTORY */
    struct data_storage *st; /* the profile; thread-safe */
    pthread_mutex_t mu;      /* guards open_files */
    struct fs_handle *open_files; /* every file handle not yet released, owned here */
};

/* Closes and frees the handles the kernel never released (a RELEASE is sent after the
 * close() that caused it returns, so an unmount can overtake it). After the loop. */
void fs_close_all(struct fs_state *s);

/* The read-only pass-through's operations (static storage; every write op EROFS). */
const struct fuse_operations *fs_passthrough_ops(void);

/* The stats file's content into buf (cap bytes): one JSON line with a newline. Returns its
 * length (< cap). */
int fs_stats_json(struct data_storage *st, char *buf, size_t cap);

#endif
