/* files: the per-sample image files format (one PNG or JPEG per sample, the raw form a user
 * starts with) and its writer. A split's samples are listed by a manifest dir/<split>.txt
 * of "relative/path label" lines (paths relative to dir, in sample order: what the writer
 * makes, like DALI's file_list) or, without one, found in class folders
 * dir/<split>/<class>/ (torchvision's ImageFolder: sorted folder names give the labels,
 * sorted file names the order; only *.png, *.jpg, *.jpeg files count).
 *
 * Decision: only the list of paths and labels is kept at open; every sample is opened,
 * read whole and decoded through the rank's storage (storage.h) during the fill that needs
 * it, as a torchvision DataLoader reads an ImageFolder, so a storage profile's latency and
 * bandwidth show up in the data cost of a step. The first file is read at open for the
 * shape; a file of another size fails the fill that reads it, naming it. The manifest is
 * validated whole at open (an error names the line), and the writer publishes files and
 * manifest through temp names and rename(), so a reader never sees a half-written file or
 * a manifest naming files not yet there. */
#include "worker/data/files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "worker/data/codec.h"
#include "worker/data/data.h"
#include "worker/data/formats.h"
#include "worker/data/images.h"
#include "worker/data/storage.h"

#define FILES_MAX_PATH 4096
#define FILES_MAX_INDEX 99999999 /* the writer's 8-digit file names sort as numbers */

/* --- the list of samples ---------------------------------------------------------------- */

/* Full paths in one block (one allocation for a million files, not a million). */
struct files_list {
    char *names; /* owned: NUL-terminated paths back to back */
    size_t names_len, names_cap;
    size_t *off;     /* owned [n]: sample i's path is names + off[i] */
    int32_t *labels; /* owned [n] */
    int64_t n, cap;
};

static void files_list_free(struct files_list *l)
{
    free(l->names);
    free(l->off);
    free(l->labels);
    memset(l, 0, sizeof *l);
}

static int files_list_grow(struct files_list *l, size_t name_len, struct err *e)
{
    if (l->n == l->cap) {
        int64_t ncap = l->cap ? l->cap * 2 : 1024;
        size_t *off = realloc(l->off, (size_t)ncap * sizeof *off);
        if (off)
            l->off = off;
        int32_t *lab = realloc(l->labels, (size_t)ncap * sizeof *lab);
        if (lab)
            l->labels = lab;
        if (!off || !lab)
            return err_set(e, ERR_NOMEM, "dataset", "out of memory for %lld file names",
                           (long long)ncap);
        l->cap = ncap;
    }
    if (l->names_len + name_len + 1 > l->names_cap) {
        size_t ncap = l->names_cap ? l->names_cap * 2 : 1u << 16;
        while (ncap < l->names_len + name_len + 1)
            ncap *= 2;
        char *names = realloc(l->names, ncap);
        if (!names)
            return err_set(e, ERR_NOMEM, "dataset", "out of memory for file names");
        l->names = names;
        l->names_cap = ncap;
    }
    return 0;
}

/* Appends dir/rel (rel's first rel_len bytes) with its label. */
static int files_list_add(struct files_list *l, const char *dir, const char *rel,
                          size_t rel_len, int32_t label, struct err *e)
{
    size_t dlen = strlen(dir), len = dlen + 1 + rel_len;
    if (len >= FILES_MAX_PATH)
        return err_set(e, ERR_INVALID, "dataset", "%s: a sample path longer than %d bytes", dir,
                       FILES_MAX_PATH - 1); /* no bytes of it: they may be a file's */
    if (l->n >= DATA_MAX_SAMPLES)
        return err_set(e, ERR_TOO_LARGE, "dataset", "%s: more than %lld samples", dir,
                       (long long)DATA_MAX_SAMPLES);
    if (files_list_grow(l, len, e) < 0)
        return -1;
    char *p = l->names + l->names_len;
    memcpy(p, dir, dlen);
    p[dlen] = '/';
    memcpy(p + dlen + 1, rel, rel_len);
    p[len] = '\0';
    l->off[l->n] = l->names_len;
    l->labels[l->n] = label;
    l->names_len += len + 1;
    l->n++;
    return 0;
}

__attribute__((format(printf, 4, 5))) static int files_path(char *out, size_t n, struct err *e,
                                                            const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(out, n, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= n)
        return err_set(e, ERR_INVALID, "dataset", "path too long (over %zu bytes): %.200s...",
                       n - 1, out);
    return 0;
}

/* --- the manifest ----------------------------------------------------------------------- */

/* A path the manifest may name: relative, no ".." component (it stays under dir), no
 * control characters (a NUL would cut it short). */
static int files_check_rel(const char *rel, size_t len, const char *where, struct err *e)
{
    if (len == 0 || rel[0] == '/')
        return err_set(e, ERR_INVALID, "dataset", "%s: path must be relative and non-empty",
                       where);
    for (size_t k = 0; k < len; k++)
        if ((unsigned char)rel[k] < 0x20 || rel[k] == 0x7f)
            return err_set(e, ERR_INVALID, "dataset",
                           "%s: control character 0x%02x in the path", where,
                           (unsigned)(unsigned char)rel[k]);
    for (size_t k = 0; k < len;) {
        size_t end = k;
        while (end < len && rel[end] != '/')
            end++;
        if (end - k == 2 && rel[k] == '.' && rel[k + 1] == '.')
            return err_set(e, ERR_INVALID, "dataset",
                           "%s: \"..\" in the path (paths stay under the dataset folder)",
                           where);
        k = end + 1;
    }
    return 0;
}

/* A label: decimal digits only, below limit. */
static int files_parse_label(const char *s, size_t len, int limit, const char *where,
                             int32_t *label, struct err *e)
{
    long long v = 0;
    bool ok = len > 0 && len <= 9;
    for (size_t k = 0; ok && k < len; k++) {
        ok = s[k] >= '0' && s[k] <= '9';
        v = v * 10 + (s[k] - '0');
    }
    if (!ok)
        return err_set(e, ERR_INVALID, "dataset", "%s: the label is not a number", where);
    if (v >= limit)
        return err_set(e, ERR_INVALID, "dataset", "%s: label %lld outside [0, %d)", where, v,
                       limit);
    *label = (int32_t)v;
    return 0;
}

/* One line (without its newline): "relative/path label", split at the last space or tab so
 * a path may hold spaces. */
static int files_parse_line(const char *line, size_t len, const char *dir, const char *where,
                            int limit, struct files_list *l, int32_t *label, struct err *e)
{
    if (len > 0 && line[len - 1] == '\r') /* a manifest written on Windows */
        len--;
    size_t sep = len;
    while (sep > 0 && line[sep - 1] != ' ' && line[sep - 1] != '\t')
        sep--;
    if (sep < 2 || line[sep - 2] == ' ' || line[sep - 2] == '\t')
        return err_set(e, ERR_INVALID, "dataset",
                       "%s: expected \"relative/path label\" (one space between)", where);
    if (files_parse_label(line + sep, len - sep, limit, where, label, e) < 0 ||
        files_check_rel(line, sep - 1, where, e) < 0)
        return -1;
    return files_list_add(l, dir, line, sep - 1, *label, e);
}

/* Every line of the manifest's bytes into l; *classes = the largest label + 1. */
static int files_parse_manifest(const char *buf, size_t len, const char *dir, const char *mpath,
                                int limit, struct files_list *l, int *classes, struct err *e)
{
    *classes = 0;
    long lineno = 0;
    for (size_t pos = 0; pos < len;) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - buf) : len;
        char where[FILES_MAX_PATH + 32];
        snprintf(where, sizeof where, "%s: line %ld", mpath, ++lineno);
        int32_t label = 0;
        if (files_parse_line(buf + pos, end - pos, dir, where, limit, l, &label, e) < 0)
            return -1;
        if (label >= *classes)
            *classes = label + 1;
        pos = end + 1;
    }
    if (l->n == 0)
        return err_set(e, ERR_INVALID, "dataset", "%s: no samples listed", mpath);
    return 0;
}

/* 1 when there is a manifest (then l is filled), 0 when there is none, -1 on an error. */
static int files_read_manifest(const char *dir, const char *split, int limit,
                               struct data_storage *st, struct files_list *l, int *classes,
                               struct err *e)
{
    char mpath[FILES_MAX_PATH];
    if (files_path(mpath, sizeof mpath, e, "%s/%s.txt", dir, split) < 0)
        return -1;
    uint8_t *buf;
    size_t len;
    struct err re;
    if (data_storage_read_file(st, mpath, DATA_FILE_MAX_BYTES, &buf, &len, &re) < 0) {
        if (re.code == ERR_NOT_FOUND)
            return 0;
        if (e)
            *e = re;
        return -1;
    }
    int rc = files_parse_manifest((const char *)buf, len, dir, mpath, limit, l, classes, e);
    free(buf);
    return rc < 0 ? -1 : 1;
}

/* --- the class folders (ImageFolder) ----------------------------------------------------- */

/* Byte order, as Python's sorted() orders str: never the locale's collation. */
static int files_cmp_names(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int files_not_dots(const struct dirent *d)
{
    return strcmp(d->d_name, ".") != 0 && strcmp(d->d_name, "..") != 0;
}

static int files_is_image_name(const struct dirent *d)
{
    const char *dot = strrchr(d->d_name, '.');
    return dot && dot != d->d_name &&
           (!strcasecmp(dot, ".png") || !strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"));
}

/* Whether parent/name is a directory (want_dir) or a regular file, symlinks followed. */
static bool files_is_kind(const char *parent, const char *name, bool want_dir)
{
    char p[FILES_MAX_PATH];
    struct stat sb;
    if (snprintf(p, sizeof p, "%s/%s", parent, name) >= (int)sizeof p || stat(p, &sb) < 0)
        return false;
    return want_dir ? S_ISDIR(sb.st_mode) : S_ISREG(sb.st_mode);
}

static void files_free_dirents(struct dirent **ents, int n)
{
    for (int k = 0; k < n; k++)
        free(ents[k]);
    free(ents);
}

/* Sorted entries of path passing filter; caller frees with files_free_dirents. */
static int files_list_dir(const char *path, int (*filter)(const struct dirent *),
                          struct dirent ***ents, struct err *e)
{
    int n = scandir(path, ents, filter, files_cmp_names);
    if (n < 0) {
        if (errno == ENOENT)
            return err_set(e, ERR_NOT_FOUND, "dataset", "%s: no such folder", path);
        return err_errno(e, "%s: scandir", path);
    }
    return n;
}

/* The image files of one class folder, in name order, labelled label. */
static int files_scan_class(const char *cdir, int32_t label, struct files_list *l,
                            struct err *e)
{
    struct dirent **ents;
    int n = files_list_dir(cdir, files_is_image_name, &ents, e);
    if (n < 0)
        return -1;
    int64_t before = l->n;
    int rc = 0;
    for (int k = 0; k < n && rc == 0; k++)
        if (files_is_kind(cdir, ents[k]->d_name, false))
            rc = files_list_add(l, cdir, ents[k]->d_name, strlen(ents[k]->d_name), label, e);
    files_free_dirents(ents, n);
    if (rc == 0 && l->n == before) /* torchvision refuses an empty class folder too */
        rc = err_set(e, ERR_INVALID, "dataset", "%s: no .png, .jpg or .jpeg file in the class",
                     cdir);
    return rc;
}

/* dir/<split>/<class>/ folders: labels by sorted folder name. */
static int files_scan(const char *dir, const char *split, int limit, struct files_list *l,
                      int *classes, struct err *e)
{
    char root[FILES_MAX_PATH], cdir[FILES_MAX_PATH];
    if (files_path(root, sizeof root, e, "%s/%s", dir, split) < 0)
        return -1;
    struct dirent **ents;
    struct err le;
    int n = files_list_dir(root, files_not_dots, &ents, &le);
    if (n < 0 && le.code == ERR_NOT_FOUND)
        return err_set(e, ERR_NOT_FOUND, "dataset",
                       "%s: neither a manifest %s.txt nor a folder %s/", dir, split, split);
    if (n < 0) {
        if (e)
            *e = le;
        return -1;
    }
    int rc = 0;
    *classes = 0;
    for (int k = 0; k < n && rc == 0; k++) {
        if (!files_is_kind(root, ents[k]->d_name, true))
            continue;
        if (*classes >= limit)
            rc = err_set(e, ERR_INVALID, "dataset", "%s: more than %d class folders", root,
                         limit);
        else if (files_path(cdir, sizeof cdir, e, "%s/%s", root, ents[k]->d_name) == 0)
            rc = files_scan_class(cdir, (*classes)++, l, e);
        else
            rc = -1;
    }
    files_free_dirents(ents, n);
    if (rc == 0 && *classes == 0)
        rc = err_set(e, ERR_INVALID, "dataset", "%s: no class folders", root);
    return rc;
}

/* --- the dataset -------------------------------------------------------------------------- */

struct files_set {
    struct files_list list;
    int c, h, w;
    struct data_storage *st; /* borrowed */
};

static void files_set_destroy(void *ctx)
{
    struct files_set *fs = ctx;
    if (fs)
        files_list_free(&fs->list);
    free(fs);
}

/* Sample i's file, read whole through the storage: *bytes is owned by the caller (free()). */
static const char *files_load(const struct files_set *fs, int64_t i, uint8_t **bytes,
                              size_t *len, struct err *e)
{
    const char *path = fs->list.names + fs->list.off[i];
    /* before the probe: the largest image the format takes; after it, the shape's */
    size_t max = fs->c ? data_image_file_max(fs->c, fs->h, fs->w)
                       : data_image_file_max(3, DATA_MAX_SIDE, DATA_MAX_SIDE);
    if (data_storage_read_file(fs->st, path, max, bytes, len, e) < 0)
        return NULL;
    return path;
}

/* The reader: one whole-file read, decoded into buf (the decoder checks the magic bytes and
 * the shape, and names the file). */
static int files_read_sample(void *ctx, int64_t i, uint8_t *buf, int32_t *label, struct err *e)
{
    const struct files_set *fs = ctx;
    uint8_t *bytes;
    size_t len;
    const char *path = files_load(fs, i, &bytes, &len, e);
    if (!path)
        return -1;
    int rc = data_image_decode(bytes, len, path, fs->c, fs->h, fs->w, buf, e);
    free(bytes);
    *label = fs->list.labels[i];
    return rc;
}

/* The shape from the first file's header. */
static int files_probe_first(struct files_set *fs, struct err *e)
{
    uint8_t *bytes;
    size_t len;
    const char *path = files_load(fs, 0, &bytes, &len, e);
    if (!path)
        return -1;
    int rc = data_image_probe(bytes, len, path, &fs->c, &fs->h, &fs->w, e);
    free(bytes);
    return rc;
}

int dataset_files_open(const char *dir, const char *name, enum data_split split,
                       const struct data_image_opts *opts, struct data_storage *st,
                       struct dataset **out, struct err *e)
{
    *out = NULL;
    const char *sname = data_split_name(split);
    int limit = opts->classes ? opts->classes : DATA_MAX_CLASSES, classes = 0;
    if (limit < 1 || limit > DATA_MAX_CLASSES)
        return err_set(e, ERR_INVALID, "dataset.classes", "%d classes out of [1, %d]", limit,
                       DATA_MAX_CLASSES);
    struct files_set *fs = calloc(1, sizeof *fs);
    if (!fs)
        return err_set(e, ERR_NOMEM, "dataset", "%s: out of memory", dir);
    fs->st = st;
    int rc = files_read_manifest(dir, sname, limit, st, &fs->list, &classes, e);
    if (rc == 0)
        rc = files_scan(dir, sname, limit, &fs->list, &classes, e);
    if (rc >= 0)
        rc = files_probe_first(fs, e);
    if (rc < 0) {
        files_set_destroy(fs);
        return -1;
    }
    struct data_sample_reader rd = {
        .ctx = fs, .read = files_read_sample, .destroy = files_set_destroy};
    /* takes fs over, failing or not */
    return data_images_create_reader(&rd, fs->list.n, fs->c, fs->h, fs->w, classes, name, split,
                                     opts, out, e);
}

/* --- the writer --------------------------------------------------------------------------- */

struct data_files_writer {
    char dir[FILES_MAX_PATH];
    const char *split; /* "train", "test" */
    enum data_image_codec codec;
    int quality, c, h, w;
    int64_t n;                         /* samples written */
    FILE *manifest;                    /* owned: the temp manifest, renamed by finish */
    char manifest_tmp[FILES_MAX_PATH]; /* dir/<split>.txt.tmp */
    char manifest_path[FILES_MAX_PATH];
};

static int files_write_all(int fd, const uint8_t *p, size_t n, const char *path, struct err *e)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return err_errno(e, "%s: write", path);
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Writes path's bytes under a temp name, then renames it into place. */
static int files_write_atomic(const char *path, const uint8_t *p, size_t n, struct err *e)
{
    char tmp[FILES_MAX_PATH];
    if (files_path(tmp, sizeof tmp, e, "%s.tmp", path) < 0)
        return -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return err_errno(e, "%s: open", tmp);
    int rc = files_write_all(fd, p, n, tmp, e);
    if (close(fd) < 0 && rc == 0)
        rc = err_errno(e, "%s: close", tmp);
    if (rc == 0 && rename(tmp, path) < 0)
        rc = err_errno(e, "rename %s to %s", tmp, path);
    if (rc < 0)
        unlink(tmp);
    return rc;
}

static int files_writer_check(enum data_image_codec codec, int quality, int c, int h, int w,
                              struct err *e)
{
    if (codec != DATA_CODEC_PNG && codec != DATA_CODEC_JPEG)
        return err_set(e, ERR_INVALID, "dataset.format", "unknown image codec %d", (int)codec);
    if (codec == DATA_CODEC_JPEG && (quality < 1 || quality > 100))
        return err_set(e, ERR_INVALID, "dataset.quality", "JPEG quality %d out of [1, 100]",
                       quality);
    if ((c != 1 && c != 3) || h < 1 || h > DATA_MAX_SIDE || w < 1 || w > DATA_MAX_SIDE)
        return err_set(e, ERR_INVALID, "dataset",
                       "a %dx%dx%d sample (c x h x w): image files take 1 or 3 channels and "
                       "sides in [1, %d]",
                       c, h, w, DATA_MAX_SIDE);
    return 0;
}

/* Caller owns *out (finish or abort frees it). */
int data_files_writer_create(const char *dir, enum data_split split,
                             enum data_image_codec codec, int quality, int c, int h, int w,
                             struct data_files_writer **out, struct err *e)
{
    *out = NULL;
    if (files_writer_check(codec, quality, c, h, w, e) < 0)
        return -1;
    struct data_files_writer *fw = calloc(1, sizeof *fw);
    if (!fw)
        return err_set(e, ERR_NOMEM, "dataset", "%s: out of memory", dir);
    *fw = (struct data_files_writer){.split = data_split_name(split),
                                     .codec = codec,
                                     .quality = quality,
                                     .c = c,
                                     .h = h,
                                     .w = w};
    char sdir[FILES_MAX_PATH];
    if (files_path(fw->dir, sizeof fw->dir, e, "%s", dir) < 0 ||
        files_path(sdir, sizeof sdir, e, "%s/%s", dir, fw->split) < 0 ||
        files_path(fw->manifest_path, sizeof fw->manifest_path, e, "%s/%s.txt", dir,
                   fw->split) < 0 ||
        files_path(fw->manifest_tmp, sizeof fw->manifest_tmp, e, "%s.tmp", fw->manifest_path) <
            0 ||
        data_make_dirs(sdir, e) < 0) {
        free(fw);
        return -1;
    }
    /* an old manifest goes first: it would list files this writer is about to replace, and
     * a conversion that fails must leave no manifest behind */
    if (unlink(fw->manifest_path) < 0 && errno != ENOENT) {
        err_errno(e, "%s: unlink", fw->manifest_path);
        free(fw);
        return -1;
    }
    fw->manifest = fopen(fw->manifest_tmp, "we");
    if (!fw->manifest) {
        err_errno(e, "%s: open", fw->manifest_tmp);
        free(fw);
        return -1;
    }
    *out = fw;
    return 0;
}

int data_files_writer_add(struct data_files_writer *fw, const uint8_t *chw, int32_t label,
                          struct err *e)
{
    if (label < 0 || label >= DATA_MAX_CLASSES)
        return err_set(e, ERR_INVALID, "dataset", "label %d outside [0, %d)", (int)label,
                       DATA_MAX_CLASSES);
    if (fw->n > FILES_MAX_INDEX)
        return err_set(e, ERR_TOO_LARGE, "dataset", "%s: more than %d samples in image files",
                       fw->dir, FILES_MAX_INDEX + 1);
    const char *ext = fw->codec == DATA_CODEC_PNG ? "png" : "jpg";
    char rel[64], cdir[FILES_MAX_PATH], path[FILES_MAX_PATH];
    snprintf(rel, sizeof rel, "%s/%05d/%08lld.%s", fw->split, (int)label, (long long)fw->n,
             ext);
    if (files_path(cdir, sizeof cdir, e, "%s/%s/%05d", fw->dir, fw->split, (int)label) < 0 ||
        files_path(path, sizeof path, e, "%s/%s", fw->dir, rel) < 0)
        return -1;
    if (mkdir(cdir, 0755) < 0 && errno != EEXIST)
        return err_errno(e, "mkdir %s", cdir);
    uint8_t *bytes;
    size_t len;
    if (data_image_encode(fw->codec, fw->quality, chw, fw->c, fw->h, fw->w, &bytes, &len, e) <
        0)
        return err_prefix(e, "%s", path);
    int rc = files_write_atomic(path, bytes, len, e);
    free(bytes);
    if (rc < 0)
        return -1;
    if (fprintf(fw->manifest, "%s %d\n", rel, (int)label) < 0)
        return err_errno(e, "%s: write", fw->manifest_tmp);
    fw->n++;
    return 0;
}

int data_files_writer_finish(struct data_files_writer *fw, struct err *e)
{
    int rc = 0;
    if (fw->n == 0)
        rc = err_set(e, ERR_INVALID, "dataset", "%s: no samples written", fw->manifest_path);
    if (rc == 0 && (fflush(fw->manifest) != 0 || ferror(fw->manifest)))
        rc = err_errno(e, "%s: write", fw->manifest_tmp);
    if (fclose(fw->manifest) != 0 && rc == 0)
        rc = err_errno(e, "%s: close", fw->manifest_tmp);
    if (rc == 0 && rename(fw->manifest_tmp, fw->manifest_path) < 0)
        rc = err_errno(e, "rename %s to %s", fw->manifest_tmp, fw->manifest_path);
    if (rc < 0)
        unlink(fw->manifest_tmp);
    free(fw);
    return rc;
}

void data_files_writer_abort(struct data_files_writer *fw)
{
    if (!fw)
        return;
    fclose(fw->manifest);
    unlink(fw->manifest_tmp);
    free(fw);
}
