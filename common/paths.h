/* paths: whether a path lies beneath one of a set of directories: the one boundary check
 * the daemon's --data-dir and --scripts-dir and the workers' re-check of dataset files
 * share.
 *
 * Decision: realpath() then a prefix compare that ends at a '/' (so /data2 is not beneath
 * /data), the form --scripts-dir has always used: it resolves "..", symlinks and relative
 * names before comparing. A path that does not exist and one outside every directory
 * fail alike (ENOENT), so the answer is no oracle for which files exist outside. The
 * directory list is one string of absolute real paths joined by ':' (PATHS_LIST_SEP), the
 * form the daemon hands its workers in DDPB_DATA_DIRS. */
#ifndef DDPB_PATHS_H
#define DDPB_PATHS_H

#include <stdbool.h>

#define PATHS_LIST_SEP ':'

/* Whether real (a resolved path) is dir itself or beneath it (dir resolved too). */
bool paths_beneath(const char *real, const char *dir);

/* Resolves path into out (PATH_MAX bytes) and checks it against the ':'-joined list of
 * resolved directories dirs. 0 when it exists and lies beneath one; -1 with errno ENOENT
 * when it is missing or outside all (out then ""), another errno from realpath
 * otherwise. */
int paths_resolve_beneath(const char *path, const char *dirs, char *out);

#endif
