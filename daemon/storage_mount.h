/* storage_mount: a run's per-rank storage mounts (spec dataset.storage_layer, issue 34):
 * one ddpbench-fs process per rank (fs/fs.h: its command line and stats) serving the
 * dataset's directory, read-only and held to the storage profile, at a directory private
 * to the run (<run dir>/storage/rank<R>), which the rank reads instead of the dataset
 * directory (DDPB_STORAGE_MOUNT).
 *
 * Decision: the daemon, not the rank, owns the mounts, so a rank of any engine (C or
 * Python) reads through the same emulation, and the mount outlives a restarted rank of an
 * elastic run. Each ddpbench-fs is started with --die-with-parent (it unmounts when the
 * daemon dies) and waited for ("ready" on a pipe, bounded by STORAGE_MOUNT_READY_MS: the
 * daemon's loop waits, so the bound is short). Its pidfd is the monitor's to watch: its
 * death while the run is active fails the run. Every end of a mount is the same:
 * SIGTERM (ddpbench-fs unmounts itself), SIGKILL after a grace, then a lazy detach of
 * whatever is left (umount2 MNT_DETACH as root, fusermount3 -uz otherwise), so no reader
 * is left waiting on a dead server. At daemon start storage_mount_sweep removes what an
 * earlier daemon left under its state directory (kill -9 of the daemon).
 *
 * Ownership: storage_mounts_create returns a set the caller owns (storage_mounts_free,
 * which stops whatever still runs). Not thread-safe: the monitor's loop thread uses it. */
#ifndef DDPB_STORAGE_MOUNT_H
#define DDPB_STORAGE_MOUNT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "common/err.h"
#include "common/spec.h"

#define STORAGE_MOUNT_READY_MS 10000 /* a ddpbench-fs has this long to say "ready" */
#define STORAGE_MOUNT_STOP_MS 2000   /* SIGTERM to SIGKILL */
#define STORAGE_MOUNT_FSTYPE "fuse.ddpbench-fs"

struct storage_mounts;

/* ERR_CONFLICT naming "dataset.storage" when a mount cannot be made on this node: the
 * FUSE device cannot be opened (read-write, as libfuse opens it) or fs_path is no
 * executable program (a bare name is looked up on PATH). */
int storage_mount_available(const char *fs_path, const char *fuse_device, struct err *e);

/* The set of a run: fs_path (borrowed for the call, copied), run_dir (the run's private
 * directory), source (the dataset's resolved directory) and the spec's dataset (its
 * profile: figures of a named one, custom's read_*, cold). NULL on out of memory. */
struct storage_mounts *storage_mounts_create(const char *fs_path, const char *run_dir,
                                             const char *source, const struct spec_dataset *d,
                                             int world_size);
/* Mounts rank's directory (once: a mount that runs is kept), waiting for ready. Returns
 * 0 with the mount's path in mnt (cap bytes), or -1 with e naming "dataset.storage" and
 * why (the program's stderr, the timeout); nothing of the rank's is left running then. */
int storage_mounts_start(struct storage_mounts *m, int rank, char *mnt, size_t cap,
                         struct err *e);
/* The pidfd of rank's ddpbench-fs (-1: none running); the set keeps it. */
int storage_mounts_pidfd(const struct storage_mounts *m, int rank);
/* Whether rank's ddpbench-fs has ended on its own (reaped here): true with why
 * ("killed by signal 9", "exited with status 3: <its last stderr line>"); the caller
 * then ends its mount (storage_mounts_end) at once, so no reader waits on it. False while
 * it runs, or when none was started or the set stopped it. */
bool storage_mounts_died(struct storage_mounts *m, int rank, char *why, size_t n);
/* Ends rank's mount as storage_mounts_stop ends each (its pidfd closed: remove it from
 * any loop first). */
void storage_mounts_end(struct storage_mounts *m, int rank);
/* Stops every mount (see the decision above) and removes the mount directories. The
 * pidfds are closed: remove them from any loop first. */
void storage_mounts_stop(struct storage_mounts *m);
void storage_mounts_free(struct storage_mounts *m);

/* Lazily detaches the mount at mnt: umount2(MNT_DETACH), or fusermount3 -uz when that is
 * not permitted. 0 when detached or not mounted. */
int storage_mount_detach(const char *mnt);

/* The mount points of mountinfo text (the /proc/self/mountinfo format) of file system type
 * fstype lying beneath dir, each passed to fn (the octal escapes decoded). Returns the
 * count. */
int storage_mount_scan(const char *mountinfo, const char *fstype, const char *dir,
                       void (*fn)(const char *mnt, void *arg), void *arg);

/* At daemon start: SIGKILLs the ddpbench-fs processes of earlier daemons serving a mount
 * under state_dir (by /proc/PID/cmdline: the program's name and its --mount), then
 * detaches every fuse.ddpbench-fs mount under state_dir. Returns the mounts detached. */
int storage_mount_sweep(const char *state_dir);

#endif
