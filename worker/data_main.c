/* main: ddpbench-data, the dataset tool (`ddpbench dataset ...` execs it): `convert` writes
 * an image dataset's two splits into another storage format (worker/data/convert.h) and
 * says what it wrote; `verify` reads every sample of a format back (every CRC checked,
 * every file decoded) and optionally compares it, bit for bit, with another format.
 *
 * Exit status: 0 done, 1 the conversion or verification failed (message on stderr), 2 a
 * bad command line.
 *
 * Decision: a program of its own, linking the worker's data code, rather than a command
 * of the `ddpbench` client: the client may include only common/ (it talks to the daemon
 * over HTTP), and a conversion must read and write exactly as a rank's loader does. Every
 * option is checked here before any file is touched, so a typo is a usage error (2), not
 * a half-made folder. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/clock.h"
#include "common/vocab.h"
#include "worker/data/convert.h"
#include "worker/data/dataset.h"

#define DATA_MAIN_EXIT_FAILED 1
#define DATA_MAIN_EXIT_USAGE 2
#define DATA_MAIN_CHUNK 256

/* The --help text; each %s is a list of common/vocab.h's formats (data_main_print_usage). */
static const char data_main_usage_fmt[] =
    "usage: ddpbench-data convert --name NAME --path DIR [--from FORMAT] --to FORMAT\n"
    "                             [--out ROOT] [--quality Q] [--level L] [--shard-mb M]\n"
    "       ddpbench-data verify --name NAME --path DIR --format FORMAT [--against FORMAT]\n"
    "\n"
    "convert  writes both splits (train, test) of dataset NAME (mnist, fashion-mnist,\n"
    "         cifar10), read from DIR as FORMAT (default native: the idx or CIFAR binary\n"
    "         files in DIR; else DIR/FORMAT/), into ROOT/FORMAT/ (ROOT defaults to DIR, where\n"
    "         a spec's dataset.format finds it), in the samples' order.\n"
    "  --to FORMAT      %s:\n"
    "                   per-sample images and a manifest (files-*) or shards of samples and\n"
    "                   an index (records*; records-jpeg stores each as a JPEG file's bytes),\n"
    "                   or TensorFlow's TFRecord shards of tf.train.Example (tfrecord)\n"
    "  --quality Q      JPEG quality 1..100 (default 95): %s\n"
    "  --level L        compression level (default: the codec's):\n"
    "                   %s\n"
    "  --shard-mb M     records, tfrecord: shard size in MB (default 64)\n"
    "verify   reads every sample of both splits of DIR/FORMAT (native: DIR) and, with\n"
    "         --against, compares each with the same sample of another format: labels and\n"
    "         normalized values bit for bit. Fails when a sample does not read or differs.\n"
    "\n"
    "Exit status: 0 done, 1 failed, 2 bad command line.\n";

static void data_main_print_usage(FILE *out)
{
    char to[160], lossy[96], levels[96] = "";
    for (int i = 0; vocab_format(i); i++)
        if (vocab_format_leveled(vocab_format(i)))
            snprintf(levels + strlen(levels), sizeof levels - strlen(levels), "%s%s 1..%d",
                     levels[0] ? ", " : "", vocab_format(i)->name, vocab_format(i)->max_level);
    fprintf(out, data_main_usage_fmt,
            vocab_format_join(vocab_format_converted, ", ", to, sizeof to),
            vocab_format_join(vocab_format_lossy, ", ", lossy, sizeof lossy), levels);
}

static const char *const data_main_names[] = {"mnist", "fashion-mnist", "cifar10"};

struct data_main_args {
    const char *name, *path, *from, *to, *out, *against;
    int quality, level;
    int64_t shard_mb;
};

__attribute__((format(printf, 1, 2))) static int data_main_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("ddpbench-data: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n(ddpbench-data --help lists the commands and options)\n", stderr);
    return -1;
}

static bool data_main_in(const char *s, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(s, list[i]) == 0)
            return true;
    return false;
}

static int data_main_int(const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "ddpbench-data: %s: '%s' is not an integer in [%ld, %ld]\n", opt, s, lo,
                hi);
        return -1;
    }
    *out = v;
    return 0;
}

enum {
    OPT_NAME = 1,
    OPT_PATH,
    OPT_FROM,
    OPT_TO,
    OPT_OUT,
    OPT_QUALITY,
    OPT_LEVEL,
    OPT_SHARD,
    OPT_FORMAT,
    OPT_AGAINST,
    OPT_HELP
};

static const struct option data_main_options[] = {
    {"name", required_argument, NULL, OPT_NAME},
    {"path", required_argument, NULL, OPT_PATH},
    {"from", required_argument, NULL, OPT_FROM},
    {"to", required_argument, NULL, OPT_TO},
    {"out", required_argument, NULL, OPT_OUT},
    {"quality", required_argument, NULL, OPT_QUALITY},
    {"level", required_argument, NULL, OPT_LEVEL},
    {"shard-mb", required_argument, NULL, OPT_SHARD},
    {"format", required_argument, NULL, OPT_FORMAT},
    {"against", required_argument, NULL, OPT_AGAINST},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

/* One option into a; which options a command takes is checked afterwards. */
static int data_main_take(struct data_main_args *a, int opt, const char *v)
{
    long n = 0;
    switch (opt) {
    case OPT_NAME: a->name = v; return 0;
    case OPT_PATH: a->path = v; return 0;
    case OPT_FROM: a->from = v; return 0;
    case OPT_TO:
    case OPT_FORMAT: a->to = v; return 0;
    case OPT_OUT: a->out = v; return 0;
    case OPT_AGAINST: a->against = v; return 0;
    case OPT_QUALITY:
        if (data_main_int("--quality", v, 1, 100, &n) < 0)
            return -1;
        a->quality = (int)n;
        return 0;
    case OPT_LEVEL:
        if (data_main_int("--level", v, 1, 19, &n) < 0)
            return -1;
        a->level = (int)n;
        return 0;
    case OPT_SHARD:
        if (data_main_int("--shard-mb", v, 1, 1 << 20, &n) < 0)
            return -1;
        a->shard_mb = n;
        return 0;
    default: return data_main_usage_error("unknown option");
    }
}

/* Options that belong to the other command. */
static int data_main_check_scope(const struct data_main_args *a, bool convert, int seen_format,
                                 int seen_to)
{
    if (convert && (seen_format || a->against))
        return data_main_usage_error("convert takes --from/--to, not --format/--against");
    if (!convert && (seen_to || a->from || a->out || a->quality || a->level || a->shard_mb))
        return data_main_usage_error(
            "verify takes --format and --against, not the conversion options");
    return 0;
}

/* The format options of convert (--level, --quality, --shard-mb) against the --to
 * format's row. */
static int data_main_check_format_opts(const struct data_main_args *a,
                                       const struct vocab_format *to)
{
    char names[160];
    if (a->level && !vocab_format_leveled(to))
        return data_main_usage_error(
            "--level applies to %s, not %s",
            vocab_format_join(vocab_format_leveled, " and ", names, sizeof names), a->to);
    if (a->level > to->max_level && vocab_format_leveled(to))
        return data_main_usage_error("--level: %s levels are 1..%d", a->to, to->max_level);
    if (a->quality && !to->lossy)
        return data_main_usage_error(
            "--quality applies to %s, not %s",
            vocab_format_join(vocab_format_lossy, " and ", names, sizeof names), a->to);
    if (a->shard_mb && !to->records && !to->tfrecord)
        return data_main_usage_error(
            "--shard-mb applies to the records formats and tfrecord, not %s", a->to);
    return 0;
}

static int data_main_check_values(const struct data_main_args *a, bool convert)
{
    char names[160];
    if (!a->name || !a->path || !a->to)
        return data_main_usage_error(convert ? "convert needs --name, --path and --to"
                                             : "verify needs --name, --path and --format");
    size_t cap = sizeof((struct data_config *)0)->path;
    if (strlen(a->path) >= cap || (a->out && strlen(a->out) >= cap))
        return data_main_usage_error("--path and --out take at most %zu characters", cap - 1);
    if (!data_main_in(a->name, data_main_names, 3))
        return data_main_usage_error("unknown dataset '%s' (mnist, fashion-mnist, cifar10)",
                                     a->name);
    const struct vocab_format *to = vocab_format(vocab_find(VOCAB_FORMAT, a->to));
    if (!to || (convert && !vocab_format_converted(to)))
        return data_main_usage_error("unknown format '%s' (%s)", a->to,
                                     vocab_format_join(convert ? vocab_format_converted : NULL,
                                                       ", ", names, sizeof names));
    if (a->from && vocab_find(VOCAB_FORMAT, a->from) < 0)
        return data_main_usage_error("unknown source format '%s' (native or a converted one)",
                                     a->from);
    if (a->against && vocab_find(VOCAB_FORMAT, a->against) < 0)
        return data_main_usage_error("unknown format '%s' for --against", a->against);
    return data_main_check_format_opts(a, to);
}

static int data_main_parse(int argc, char **argv, bool convert, struct data_main_args *a)
{
    memset(a, 0, sizeof *a);
    int opt, seen_format = 0, seen_to = 0;
    opterr = 0;
    optind = 2; /* after the command */
    while ((opt = getopt_long(argc, argv, "", data_main_options, NULL)) != -1) {
        if (opt == OPT_HELP) {
            data_main_print_usage(stdout);
            exit(0);
        }
        if (opt == '?' || opt == ':')
            return data_main_usage_error("bad or incomplete option '%s'", argv[optind - 1]);
        seen_format |= opt == OPT_FORMAT;
        seen_to |= opt == OPT_TO;
        if (data_main_take(a, opt, optarg) < 0)
            return -1;
    }
    if (optind < argc)
        return data_main_usage_error("unexpected argument '%s'", argv[optind]);
    if (data_main_check_scope(a, convert, seen_format, seen_to) < 0 ||
        data_main_check_values(a, convert) < 0)
        return -1;
    if (!a->out)
        a->out = a->path;
    return 0;
}

static void data_main_config(const struct data_main_args *a, const char *format,
                             const char *path, struct data_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->name, sizeof cfg->name, "%s", a->name);
    snprintf(cfg->path, sizeof cfg->path, "%s", path);
    snprintf(cfg->format, sizeof cfg->format, "%s", format ? format : "native");
}

/* --- convert ----------------------------------------------------------------------------- */

/* Bytes of a file, or of every file under a folder. */
static int64_t data_main_du(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) < 0)
        return 0;
    if (!S_ISDIR(sb.st_mode))
        return S_ISREG(sb.st_mode) ? (int64_t)sb.st_size : 0;
    int64_t sum = 0;
    DIR *d = opendir(path);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char sub[4096];
        if (snprintf(sub, sizeof sub, "%s/%s", path, de->d_name) < (int)sizeof sub)
            sum += data_main_du(sub);
    }
    if (d)
        closedir(d);
    return sum;
}

/* What one split took in dir: every entry named <split>, <split>.* or <split>-* (index or
 * manifest, shards, the folder of image files). */
static int64_t data_main_split_bytes(const char *dir, const char *split)
{
    size_t n = strlen(split);
    int64_t sum = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (strncmp(de->d_name, split, n) != 0 || !strchr(".-", de->d_name[n]) ||
            strstr(de->d_name, ".tmp"))
            continue;
        char sub[4096];
        if (snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name) < (int)sizeof sub)
            sum += data_main_du(sub);
    }
    if (d)
        closedir(d);
    return sum;
}

/* Opens what was written, which checks it, and prints each split's size. */
static int data_main_report(const struct data_main_args *a, double secs)
{
    struct data_config cfg;
    data_main_config(a, a->to, a->out, &cfg);
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/%s", a->out, a->to);
    printf("wrote %s (%s from %s) in %.2f s\n", dir, a->name, a->from ? a->from : "native",
           secs);
    const enum data_split splits[] = {DATA_SPLIT_TRAIN, DATA_SPLIT_TEST};
    for (int i = 0; i < 2; i++) {
        struct dataset *ds;
        struct err e = {0};
        if (dataset_open(&cfg, splits[i], &ds, &e) < 0) {
            fprintf(stderr, "ddpbench-data: the written %s split does not open: %s\n",
                    data_split_name(splits[i]), e.msg);
            return -1;
        }
        const char *sp = data_split_name(splits[i]);
        printf("%s: %lld samples, %lld bytes\n", sp, (long long)ds->n,
               (long long)data_main_split_bytes(dir, sp));
        dataset_destroy(ds);
    }
    return 0;
}

static int data_main_convert(int argc, char **argv)
{
    struct data_main_args a;
    if (data_main_parse(argc, argv, true, &a) < 0)
        return DATA_MAIN_EXIT_USAGE;
    struct data_config src;
    data_main_config(&a, a.from, a.path, &src);
    struct data_convert_opts opts = {
        .quality = a.quality, .level = a.level, .shard_mb = a.shard_mb};
    snprintf(opts.format, sizeof opts.format, "%s", a.to);
    struct err e = {0};
    int64_t t0 = clock_mono_ns();
    if (data_convert(&src, a.out, &opts, &e) < 0) {
        fprintf(stderr, "ddpbench-data: convert: %s\n", e.msg);
        return e.code == ERR_INVALID && strcmp(e.field, "format") == 0 ? DATA_MAIN_EXIT_USAGE
                                                                       : DATA_MAIN_EXIT_FAILED;
    }
    double secs = (double)(clock_mono_ns() - t0) / 1e9;
    return data_main_report(&a, secs) < 0 ? DATA_MAIN_EXIT_FAILED : 0;
}

/* --- verify ------------------------------------------------------------------------------ */

struct data_main_pair {
    struct dataset *ds, *ref; /* ref NULL without --against */
    float *x, *rx;
    int32_t *y, *ry;
    int64_t idx[DATA_MAIN_CHUNK];
    int64_t differ;
};

/* Fills samples [first, first + k) of both sets and counts the ones that differ. */
static int data_main_verify_chunk(struct data_main_pair *p, int64_t first, int k, struct err *e)
{
    const struct data_draw draw = {0, 0, 0};
    size_t per = dataset_sample_floats(p->ds);
    for (int i = 0; i < k; i++)
        p->idx[i] = first + i;
    if (dataset_fill(p->ds, p->idx, k, &draw, p->x, p->y, e) < 0)
        return -1;
    if (!p->ref)
        return 0;
    if (dataset_fill(p->ref, p->idx, k, &draw, p->rx, p->ry, e) < 0)
        return -1;
    for (int i = 0; i < k; i++)
        p->differ += p->y[i] != p->ry[i] || memcmp(p->x + (size_t)i * per,
                                                   p->rx + (size_t)i * per, per * sizeof *p->x);
    return 0;
}

static int data_main_verify_pair(struct data_main_pair *p, enum data_split split, struct err *e)
{
    if (p->ref && (p->ref->n != p->ds->n || p->ref->c != p->ds->c || p->ref->h != p->ds->h ||
                   p->ref->w != p->ds->w))
        return err_set(e, ERR_INVALID, "against",
                       "%s split: %lld samples of %dx%dx%d, the other format has %lld of "
                       "%dx%dx%d",
                       data_split_name(split), (long long)p->ds->n, p->ds->c, p->ds->h,
                       p->ds->w, (long long)p->ref->n, p->ref->c, p->ref->h, p->ref->w);
    size_t floats = DATA_MAIN_CHUNK * dataset_sample_floats(p->ds);
    p->x = malloc(floats * sizeof *p->x);
    p->rx = malloc(floats * sizeof *p->rx);
    p->y = malloc(DATA_MAIN_CHUNK * sizeof *p->y);
    p->ry = malloc(DATA_MAIN_CHUNK * sizeof *p->ry);
    if (!p->x || !p->rx || !p->y || !p->ry)
        return err_set(e, ERR_NOMEM, "", "out of memory");
    for (int64_t first = 0; first < p->ds->n; first += DATA_MAIN_CHUNK) {
        int k = p->ds->n - first < DATA_MAIN_CHUNK ? (int)(p->ds->n - first) : DATA_MAIN_CHUNK;
        if (data_main_verify_chunk(p, first, k, e) < 0)
            return -1;
    }
    return 0;
}

/* One split: every sample read; with a reference, compared. Returns 0 when all read and
 * none differ. */
static int data_main_verify_split(const struct data_main_args *a, enum data_split split)
{
    struct data_config cfg, rcfg;
    data_main_config(a, a->to, a->path, &cfg);
    data_main_config(a, a->against, a->path, &rcfg);
    struct data_main_pair p = {0};
    struct err e = {0};
    int64_t t0 = clock_mono_ns();
    int rc = dataset_open(&cfg, split, &p.ds, &e);
    if (rc == 0 && a->against)
        rc = dataset_open(&rcfg, split, &p.ref, &e);
    if (rc == 0)
        rc = data_main_verify_pair(&p, split, &e);
    const char *sp = data_split_name(split);
    if (rc < 0)
        fprintf(stderr, "ddpbench-data: verify: %s split: %s\n", sp, e.msg);
    else if (a->against)
        printf("%s: %lld samples read in %.2f s, %lld differ from %s\n", sp, (long long)p.ds->n,
               (double)(clock_mono_ns() - t0) / 1e9, (long long)p.differ, a->against);
    else
        printf("%s: %lld samples read in %.2f s\n", sp, (long long)p.ds->n,
               (double)(clock_mono_ns() - t0) / 1e9);
    free(p.x);
    free(p.rx);
    free(p.y);
    free(p.ry);
    dataset_destroy(p.ds);
    dataset_destroy(p.ref);
    return rc < 0 || p.differ ? -1 : 0;
}

static int data_main_verify(int argc, char **argv)
{
    struct data_main_args a;
    if (data_main_parse(argc, argv, false, &a) < 0)
        return DATA_MAIN_EXIT_USAGE;
    int bad = data_main_verify_split(&a, DATA_SPLIT_TRAIN) < 0;
    bad |= data_main_verify_split(&a, DATA_SPLIT_TEST) < 0;
    return bad ? DATA_MAIN_EXIT_FAILED : 0;
}

int main(int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : "";
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        data_main_print_usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "convert"))
        return data_main_convert(argc, argv);
    if (!strcmp(cmd, "verify"))
        return data_main_verify(argc, argv);
    if (*cmd)
        data_main_usage_error("unknown command '%s' (convert, verify)", cmd);
    else
        data_main_usage_error("no command given (convert, verify)");
    return DATA_MAIN_EXIT_USAGE;
}
