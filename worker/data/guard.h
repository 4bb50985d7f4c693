/* guard: how a rank opens a dataset file. The daemon checked dataset.path at submit
 * against its --data-dir directories; it hands them to the worker as DDPB_DATA_DIRS and
 * every file is checked again here, at open (the file may have moved since, and a
 * dataset folder may hold a symlink out of it).
 *
 * Decision: realpath plus prefix (common/paths.h, the check the daemon makes), then the
 * resolved path is opened O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC and fstat-checked to be a
 * regular file before a byte is read: a FIFO, a device or a directory fails at once
 * instead of blocking the rank until its timeout. A missing file and a forbidden one get
 * one message ("not found or not allowed"), and no message carries a file's bytes.
 * Without DDPB_DATA_DIRS (the CLI's dataset convert, the unit tests) there is no
 * boundary: whoever runs the tool by hand reads as themselves. The packaged default
 * dataset's directory (DATA_FASHION_MNIST_DIR) is always allowed: it is no user's
 * choice. */
#ifndef DDPB_DATA_GUARD_H
#define DDPB_DATA_GUARD_H

#include "common/err.h"

#define DATA_GUARD_ENV "DDPB_DATA_DIRS"

/* A read-only descriptor for the regular file at path (the caller closes it), or -1 with
 * ERR_NOT_FOUND "PATH: not found or not allowed", ERR_INVALID for a file that is not a
 * regular one, ERR_IO otherwise; field "dataset". */
int data_guard_open(const char *path, struct err *e);

/* 0 when path (dataset.path: a folder or a file) lies beneath the allowed directories, or
 * no boundary is set; -1 with ERR_NOT_FOUND naming "dataset.path" otherwise. */
int data_guard_check(const char *path, struct err *e);

#endif
