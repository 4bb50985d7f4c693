/* config: see config.h. getopt_long over a table; each option validated with a range.
 * The TLS files are loaded once here with GnuTLS (the library libmicrohttpd serves TLS
 * with), so a certificate that is not PEM, or a key that does not match it, stops the
 * start with the flag's name rather than as a listener that will not come up. */
#include "daemon/config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <libgen.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/nvml.h"
#include "common/paths.h"
#include "daemon/credential.h"
#include "daemon/gpu_slots.h"
#include "ddpb_config.h"

static int config_parse_long(const char *opt, const char *s, long lo, long hi, long *out,
                             struct err *e)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi)
        return err_set(e, ERR_INVALID, opt, "--%s must be an integer from %ld to %ld, got '%s'",
                       opt, lo, hi, s);
    *out = v;
    return 0;
}

/* config_parse_long into an int field: every bounded option but --max-body is one. */
static int config_parse_int(const char *opt, const char *s, long lo, long hi, int *out,
                            struct err *e)
{
    long v = 0; /* set by config_parse_long on success; 0 keeps -O3 from guessing */
    if (config_parse_long(opt, s, lo, hi, &v, e) < 0)
        return -1;
    *out = (int)v;
    return 0;
}

static int config_copy(char *dst, size_t cap, const char *opt, const char *s, struct err *e)
{
    if (strlen(s) >= cap || s[0] == '\0')
        return err_set(e, ERR_INVALID, opt, "--%s must be 1 to %zu characters", opt, cap - 1);
    memcpy(dst, s, strlen(s) + 1);
    return 0;
}

/* A program of ours (the worker, ddpbench-fs) lives beside ddpbenchd when installed, and
 * in ../<subdir>/ in the build tree; else its bare name (found on PATH, or not at all). */
static void config_default_program(const char *name, const char *subdir, char *out, size_t cap)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    snprintf(out, cap, "%s", name);
    if (n <= 0)
        return;
    self[n] = '\0';
    char *dir = dirname(self);
    char cand[PATH_MAX];
    snprintf(cand, sizeof cand, "%s/%s", dir, name);
    if (access(cand, X_OK) == 0) {
        snprintf(out, cap, "%s", cand);
        return;
    }
    snprintf(cand, sizeof cand, "%s/../%s/%s", dir, subdir, name);
    char real[PATH_MAX];
    if (access(cand, X_OK) == 0)
        snprintf(out, cap, "%s", realpath(cand, real) ? real : cand);
}

/* A token given in the environment (DDPB_TOKEN): the text checks of a token file. */
static int config_set_token(struct config *c, const char *tok, const char *from, struct err *e)
{
    if (credential_check_text(tok, from, "token", sizeof c->token, e) < 0)
        return -1;
    memcpy(c->token, tok, strlen(tok) + 1);
    return 0;
}

/* --network-profile: a label (letters, digits, '.', '_', '-'), since it becomes a results
 * column and a CSV cell; "none" (the default) clears it. */
static int config_set_network_profile(struct config *c, const char *name, struct err *e)
{
    size_t n = strlen(name);
    if (n == 0 || n >= sizeof c->network_profile)
        return err_set(e, ERR_INVALID, "network-profile",
                       "--network-profile must be 1 to %zu characters",
                       sizeof c->network_profile - 1);
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)name[i]) && !strchr("._-", name[i]))
            return err_set(e, ERR_INVALID, "network-profile",
                           "--network-profile must be letters, digits, '.', '_' or '-', "
                           "got '%s'",
                           name);
    if (strcmp(name, "none") == 0)
        c->network_profile[0] = '\0';
    else
        memcpy(c->network_profile, name, n + 1);
    return 0;
}

/* HTTP threads: one per CPU, 2 to 4. Two to a CPU preempt each other with requests
 * half served: on 2 CPUs under wrk -c32, 4 threads served 0.95 to 1.35 times the
 * requests/s of 2 with 1.4 to 2.7 times the p99 (tests/bench/RESULTS.md), and the API's
 * goal is a tail one. Past 4 they would wait for the database's 4 reader connections. */
static int config_default_http_threads(long ncpu)
{
    return ncpu < 2 ? 2 : ncpu > 4 ? 4 : (int)ncpu;
}

static void config_defaults(struct config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->host, sizeof c->host, "127.0.0.1");
    c->port = CONFIG_DEFAULT_PORT;
    snprintf(c->store_host, sizeof c->store_host, "127.0.0.1");
    c->store_port = 0;
    snprintf(c->state_dir, sizeof c->state_dir, "state");
    snprintf(c->web_dir, sizeof c->web_dir, "%s", DDPB_SOURCE_WEB_DIR);
    snprintf(c->engines_dir, sizeof c->engines_dir, "%s", DDPB_SOURCE_ENGINES_DIR);
    snprintf(c->python, sizeof c->python, "%s",
             access(DDPB_SOURCE_VENV_PYTHON, X_OK) == 0 ? DDPB_SOURCE_VENV_PYTHON
                                                        : "/usr/bin/python3");
    if (gethostname(c->node, sizeof c->node) != 0 || c->node[0] == '\0')
        snprintf(c->node, sizeof c->node, "localhost");
    c->node[sizeof c->node - 1] = '\0';
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    c->cpu_slots = ncpu > 0 ? (int)ncpu : 1;
    c->gpus = -1; /* resolved after the options: --gpus, else NVML */
    c->max_body = 1u << 20;
    c->http_threads = config_default_http_threads(ncpu);
    c->rank_memory_margin_mib = 1024;
    c->kill_grace_ms = 3000;
    c->node_timeout_ms = 5000;
    c->sync_ms = 250;
    c->log_level = LOG_INFO;
    config_default_program("ddpbench-worker", "worker", c->worker_path, sizeof c->worker_path);
    config_default_program("ddpbench-fs", "fs", c->fs_path, sizeof c->fs_path);
    snprintf(c->fuse_device, sizeof c->fuse_device, "/dev/fuse");
}

void config_print_usage(const char *prog)
{
    printf("usage: %s [options]\n"
           "  --host ADDR          HTTP bind address (default 127.0.0.1)\n"
           "  --port N             HTTP port, 0 = any free port (default %d)\n"
           "  --store-host ADDR    store bind address (default 127.0.0.1)\n"
           "  --store-port N       store port, 0 = any free port (default 0)\n"
           "  --state-dir DIR      database, run files and logs (default ./state)\n"
           "  --worker PATH        ddpbench-worker binary (default: beside ddpbenchd)\n"
           "  --fs PATH            ddpbench-fs binary, the per-rank storage mounts\n"
           "                       (dataset.storage_layer; default: beside ddpbenchd)\n"
           "  --fuse-device PATH   the FUSE device the mounts open (default /dev/fuse);\n"
           "                       a run that needs a mount is refused (409) when it\n"
           "                       cannot be opened\n"
           "  --web-dir DIR        dashboard files (default: the source tree's web/)\n"
           "  --engines-dir DIR    the framework engines' adapters (default: the source\n"
           "                       tree's engines/)\n"
           "  --python PATH        the interpreter framework engines run under (default:\n"
           "                       the source tree's .venv, else /usr/bin/python3)\n",
           prog, CONFIG_DEFAULT_PORT);
    printf("  --scripts-dir DIR    allow engine \"script\": users' programs under DIR only\n"
           "                       (default: none, the script engine is off)\n"
           "  --data-dir DIR       dataset.path must lie under DIR (repeatable; default:\n"
           "                       the state directory's data/ and /usr/share/datasets)\n"
           "  --node NAME          this node's name (default: hostname)\n"
           "  --cpu-slots N        ranks that may run at once (default: online CPUs)\n"
           "  --gpus N             GPU slots for device cuda runs (default: NVML's count,\n"
           "                       0 when NVML is unavailable)\n"
           "  --max-body BYTES     largest request body (default 1048576)\n"
           "  --http-threads N     HTTP worker threads (default: online CPUs, 2 to 4)\n"
           "  --rank-memory-margin-mib N  each CPU training rank's address space is limited\n"
           "                       to its spec's memory estimate x 1.25 + N MiB (default\n"
           "                       1024; -1: no limit)\n"
           "  --kill-grace-ms N    SIGTERM to SIGKILL delay for workers (default 3000)\n"
           "  --log-level LEVEL    debug, info, warn, error (default info)\n"
           "  --token-file PATH    require 'Authorization: Bearer <token>' on every\n"
           "                       mutation (POST, DELETE); DDPB_TOKEN works too\n"
           "  --read-token PATH    require that token (or the admin one) on every GET but\n"
           "                       /healthz and the dashboard's files\n"
           "  --cluster-key PATH   the cluster's key (leader and followers): a follower\n"
           "                       proves its name with HMAC-SHA256(key, name); without\n"
           "                       it followers join with the admin token (a warning)\n"
           "  --cors-origin ORIGIN allow browser pages from ORIGIN (or *) to call the API\n"
           "  --allow-host NAMES   names clients may reach this daemon under besides its\n"
           "                       addresses, localhost and --node (comma-separated; *: any)\n"
           "  --network-profile NAME  the network runs measure over, stored on each run\n"
           "                       (deploy/netlab.sh sets it; default none: the host's)\n"
           "  --join URL           be a follower of the leader at URL (https://HOST:PORT,\n"
           "                       or http:// in the clear);\n"
           "                       --token-file then holds the cluster token (the\n"
           "                       leader's own token)\n"
           "  --node-timeout-ms N  leader: a follower silent this long is lost (default 5000)\n"
           "  --sync-ms N          follower: how often it syncs with the leader (default 250)\n"
           "  --mpi-agent PATH     launcher mpirun across nodes: the program that starts\n"
           "                       the MPI daemon on another node in place of ssh\n"
           "                       (default none: mpirun runs stay on this node)\n"
           "  --shm-dir DIR        where ranks of one node make their shared memory\n"
           "                       (spec transport auto or shm; an existing directory on a\n"
           "                       tmpfs; default: the workers use /dev/shm)\n"
           "  --tls-cert FILE      serve the API over HTTPS with this PEM certificate\n"
           "                       (chain); needs --tls-key (default: plain HTTP)\n"
           "  --tls-key FILE       the PEM private key of --tls-cert (mode 0600)\n"
           "  --join-ca FILE       follower: the PEM CA (or certificate) the https://\n"
           "                       leader must present; needed by --join https://\n"
           "  --join-system-ca     follower: trust the system's CA store for the\n"
           "                       leader instead of --join-ca\n"
           "  --version, --help\n");
}

enum {
    OPT_HOST = 1000,
    OPT_PORT,
    OPT_STORE_HOST,
    OPT_STORE_PORT,
    OPT_STATE_DIR,
    OPT_WORKER,
    OPT_FS,
    OPT_FUSE_DEVICE,
    OPT_WEB_DIR,
    OPT_ENGINES_DIR,
    OPT_PYTHON,
    OPT_SCRIPTS_DIR,
    OPT_DATA_DIR,
    OPT_NODE,
    OPT_CPU_SLOTS,
    OPT_GPUS,
    OPT_MAX_BODY,
    OPT_HTTP_THREADS,
    OPT_RANK_MEMORY_MARGIN,
    OPT_KILL_GRACE,
    OPT_LOG_LEVEL,
    OPT_TOKEN_FILE,
    OPT_READ_TOKEN,
    OPT_CLUSTER_KEY,
    OPT_CORS,
    OPT_ALLOW_HOST,
    OPT_NETWORK_PROFILE,
    OPT_JOIN,
    OPT_NODE_TIMEOUT,
    OPT_SYNC_MS,
    OPT_MPI_AGENT,
    OPT_SHM_DIR,
    OPT_TLS_CERT,
    OPT_TLS_KEY,
    OPT_JOIN_CA,
    OPT_JOIN_SYSTEM_CA,
    OPT_VERSION,
    OPT_HELP,
};

static const struct option config_options[] = {
    {"host", required_argument, NULL, OPT_HOST},
    {"port", required_argument, NULL, OPT_PORT},
    {"store-host", required_argument, NULL, OPT_STORE_HOST},
    {"store-port", required_argument, NULL, OPT_STORE_PORT},
    {"state-dir", required_argument, NULL, OPT_STATE_DIR},
    {"worker", required_argument, NULL, OPT_WORKER},
    {"fs", required_argument, NULL, OPT_FS},
    {"fuse-device", required_argument, NULL, OPT_FUSE_DEVICE},
    {"web-dir", required_argument, NULL, OPT_WEB_DIR},
    {"engines-dir", required_argument, NULL, OPT_ENGINES_DIR},
    {"python", required_argument, NULL, OPT_PYTHON},
    {"scripts-dir", required_argument, NULL, OPT_SCRIPTS_DIR},
    {"data-dir", required_argument, NULL, OPT_DATA_DIR},
    {"node", required_argument, NULL, OPT_NODE},
    {"cpu-slots", required_argument, NULL, OPT_CPU_SLOTS},
    {"gpus", required_argument, NULL, OPT_GPUS},
    {"max-body", required_argument, NULL, OPT_MAX_BODY},
    {"http-threads", required_argument, NULL, OPT_HTTP_THREADS},
    {"rank-memory-margin-mib", required_argument, NULL, OPT_RANK_MEMORY_MARGIN},
    {"kill-grace-ms", required_argument, NULL, OPT_KILL_GRACE},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
    {"read-token", required_argument, NULL, OPT_READ_TOKEN},
    {"cluster-key", required_argument, NULL, OPT_CLUSTER_KEY},
    {"cors-origin", required_argument, NULL, OPT_CORS},
    {"allow-host", required_argument, NULL, OPT_ALLOW_HOST},
    {"network-profile", required_argument, NULL, OPT_NETWORK_PROFILE},
    {"join", required_argument, NULL, OPT_JOIN},
    {"node-timeout-ms", required_argument, NULL, OPT_NODE_TIMEOUT},
    {"sync-ms", required_argument, NULL, OPT_SYNC_MS},
    {"mpi-agent", required_argument, NULL, OPT_MPI_AGENT},
    {"shm-dir", required_argument, NULL, OPT_SHM_DIR},
    {"tls-cert", required_argument, NULL, OPT_TLS_CERT},
    {"tls-key", required_argument, NULL, OPT_TLS_KEY},
    {"join-ca", required_argument, NULL, OPT_JOIN_CA},
    {"join-system-ca", no_argument, NULL, OPT_JOIN_SYSTEM_CA},
    {"version", no_argument, NULL, OPT_VERSION},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

/* The leader's URL: https://HOST[:PORT] (or http://, kept for clusters set up before TLS)
 * with nothing after it (a trailing '/' is dropped), since every call appends its own
 * /v1/... path. */
static int config_set_join(struct config *c, const char *url, struct err *e)
{
    size_t n = strlen(url);
    while (n > 0 && url[n - 1] == '/')
        n--;
    size_t skip = strncmp(url, "https://", 8) == 0  ? 8
                  : strncmp(url, "http://", 7) == 0 ? 7
                                                    : 0;
    if (skip == 0 || n <= skip || n >= sizeof c->join || memchr(url + skip, '/', n - skip) ||
        memchr(url, '?', n) || memchr(url, ' ', n))
        return err_set(e, ERR_INVALID, "join",
                       "--join must be the leader's URL, https://HOST:PORT (or http://), "
                       "got '%s'",
                       url);
    memcpy(c->join, url, n);
    c->join[n] = '\0';
    return 0;
}

/* The MPI remote-launch agent: an executable file, kept as its real path (mpirun execs
 * it from the run's directory). */
static int config_set_mpi_agent(struct config *c, const char *path, struct err *e)
{
    if (!realpath(path, c->mpi_agent) || access(c->mpi_agent, X_OK) < 0) {
        c->mpi_agent[0] = '\0';
        return err_set(e, ERR_INVALID, "mpi-agent", "--mpi-agent %s: %s", path,
                       strerror(errno));
    }
    return 0;
}

/* The shared-memory directory: an existing directory the ranks can make files in, kept
 * as its real path (every rank, on any launcher, gets the same text). */
static int config_set_shm_dir(struct config *c, const char *path, struct err *e)
{
    struct stat st;
    c->shm_dir[0] = '\0';
    if (!realpath(path, c->shm_dir) || stat(c->shm_dir, &st) < 0) {
        int err = errno;
        c->shm_dir[0] = '\0';
        return err_set(e, ERR_INVALID, "shm-dir", "--shm-dir %s: %s", path, strerror(err));
    }
    if (!S_ISDIR(st.st_mode)) {
        c->shm_dir[0] = '\0';
        return err_set(e, ERR_INVALID, "shm-dir", "--shm-dir %s: not a directory", path);
    }
    if (access(c->shm_dir, W_OK | X_OK) < 0) {
        int err = errno;
        c->shm_dir[0] = '\0';
        return err_set(e, ERR_INVALID, "shm-dir",
                       "--shm-dir %s: ranks cannot make files in it: %s", path, strerror(err));
    }
    return 0;
}

/* A directory the daemon trusts, kept as its real path (resolved once, so every check
 * compares against the real directory): it must exist, be a directory, and not be
 * writable by group or others, or anyone on the node could put in it what the daemon
 * then runs or reads for a run. */
static int config_trusted_dir(const char *opt, const char *arg, char *out, struct err *e)
{
    struct stat st;
    if (!realpath(arg, out) || stat(out, &st) < 0) {
        int err = errno;
        out[0] = '\0';
        return err_set(e, ERR_INVALID, opt, "--%s %s: %s", opt, arg, strerror(err));
    }
    if (!S_ISDIR(st.st_mode) || (st.st_mode & (S_IWGRP | S_IWOTH))) {
        out[0] = '\0';
        return err_set(e, ERR_INVALID, opt, "--%s %s: %s", opt, arg,
                       S_ISDIR(st.st_mode) ? "writable by group or others (chmod go-w it)"
                                           : "not a directory");
    }
    return 0;
}

static int config_set_scripts_dir(struct config *c, const char *arg, struct err *e)
{
    return config_trusted_dir("scripts-dir", arg, c->scripts_dir, e);
}

/* Appends one dataset directory to c->data_dirs (common/paths.h's ':'-joined list). A
 * dataset directory is only read, so a group-writable one is taken as is: only its real
 * path counts. */
static int config_add_data_dir(struct config *c, const char *arg, const char *opt,
                               struct err *e)
{
    char real[PATH_MAX];
    struct stat st;
    if (!realpath(arg, real) || stat(real, &st) < 0)
        return err_set(e, ERR_INVALID, opt, "--%s %s: %s", opt, arg, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return err_set(e, ERR_INVALID, opt, "--%s %s: not a directory", opt, arg);
    size_t have = strlen(c->data_dirs), n = strlen(real);
    if (strchr(real, PATHS_LIST_SEP) || have + n + 2 > sizeof c->data_dirs)
        return err_set(e, ERR_INVALID, opt,
                       "--%s %s: a path with ':' in it, or more directories than fit in %zu "
                       "bytes",
                       opt, arg, sizeof c->data_dirs);
    snprintf(c->data_dirs + have, sizeof c->data_dirs - have, "%s%s", have ? ":" : "", real);
    return 0;
}

int config_default_data_dirs(struct config *c, struct err *e)
{
    if (c->data_dirs[0])
        return 0;
    char dir[PATH_MAX + 8];
    snprintf(dir, sizeof dir, "%s/data", c->state_dir);
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return err_errno(e, "create dataset directory %s", dir);
    if (config_add_data_dir(c, dir, "state-dir", e) < 0)
        return -1;
    struct stat st;
    if (stat(CONFIG_SYSTEM_DATA_DIR, &st) == 0 && S_ISDIR(st.st_mode))
        return config_add_data_dir(c, CONFIG_SYSTEM_DATA_DIR, "data-dir", e);
    return 0;
}

char *config_read_pem(const char *path, const char *flag, struct err *e)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        err_set(e, ERR_INVALID, flag, "--%s %s: %s", flag, path, strerror(errno));
        return NULL;
    }
    struct stat st;
    char *text = NULL;
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
        st.st_size <= CONFIG_PEM_MAX && (text = malloc((size_t)st.st_size + 1))) {
        size_t n = fread(text, 1, (size_t)st.st_size, f);
        text[n] = '\0';
    }
    fclose(f);
    if (!text)
        err_set(e, ERR_INVALID, flag, "--%s %s: not a regular file of 1 byte to %d KiB", flag,
                path, CONFIG_PEM_MAX >> 10);
    return text;
}

/* A PEM file's path for flag, kept as its real path after checking that it reads and
 * holds a block whose label ends in want ("CERTIFICATE", "PRIVATE KEY"). */
static int config_set_pem(char *dst, const char *flag, const char *path, const char *want,
                          struct err *e)
{
    dst[0] = '\0';
    char *text = config_read_pem(path, flag, e);
    if (!text)
        return -1;
    char label[64];
    snprintf(label, sizeof label, "%s-----", want);
    const char *begin = strstr(text, "-----BEGIN ");
    const char *eol = begin ? strchr(begin, '\n') : NULL;
    bool ok = begin && eol && memmem(begin, (size_t)(eol - begin), label, strlen(label));
    free(text);
    if (!ok)
        return err_set(e, ERR_INVALID, flag, "--%s %s: not a PEM file with a %s", flag, path,
                       want);
    if (!realpath(path, dst)) {
        dst[0] = '\0';
        return err_set(e, ERR_INVALID, flag, "--%s %s: %s", flag, path, strerror(errno));
    }
    return 0;
}

/* Which of the pair GnuTLS refuses: the certificate alone, the key alone, then the two
 * together (a key that is not the certificate's). Returns 0 or a GnuTLS error, with
 * *flag naming the file at fault. */
static int config_tls_pair_error(const gnutls_datum_t *dc, const gnutls_datum_t *dk,
                                 const char **flag)
{
    gnutls_x509_crt_t crt = NULL;
    gnutls_x509_privkey_t pk = NULL;
    gnutls_certificate_credentials_t cred = NULL;
    *flag = "tls-cert";
    int rc = gnutls_x509_crt_init(&crt);
    if (rc == GNUTLS_E_SUCCESS)
        rc = gnutls_x509_crt_import(crt, dc, GNUTLS_X509_FMT_PEM);
    if (rc == GNUTLS_E_SUCCESS) {
        *flag = "tls-key";
        rc = gnutls_x509_privkey_init(&pk);
    }
    if (rc == GNUTLS_E_SUCCESS)
        rc = gnutls_x509_privkey_import2(pk, dk, GNUTLS_X509_FMT_PEM, NULL, 0);
    if (rc == GNUTLS_E_SUCCESS)
        rc = gnutls_certificate_allocate_credentials(&cred);
    if (rc == GNUTLS_E_SUCCESS)
        rc = gnutls_certificate_set_x509_key_mem(cred, dc, dk, GNUTLS_X509_FMT_PEM);
    if (cred)
        gnutls_certificate_free_credentials(cred);
    if (pk)
        gnutls_x509_privkey_deinit(pk);
    if (crt)
        gnutls_x509_crt_deinit(crt);
    return rc;
}

/* Loads --tls-cert and --tls-key together as GnuTLS will serve them: a certificate that
 * does not parse or a key that is not its own fails here, naming the flag. */
static int config_check_tls_pair(const struct config *c, struct err *e)
{
    char *cert = config_read_pem(c->tls_cert, "tls-cert", e);
    char *key = cert ? config_read_pem(c->tls_key, "tls-key", e) : NULL;
    if (!key) {
        free(cert);
        return -1;
    }
    gnutls_datum_t dc = {(unsigned char *)cert, (unsigned)strlen(cert)};
    gnutls_datum_t dk = {(unsigned char *)key, (unsigned)strlen(key)};
    const char *flag = "tls-cert";
    int rc = config_tls_pair_error(&dc, &dk, &flag);
    free(cert);
    explicit_bzero(key, strlen(key));
    free(key);
    if (rc == GNUTLS_E_SUCCESS)
        return 0;
    return err_set(e, ERR_INVALID, flag, "--%s %s (with --%s %s): %s", flag,
                   strcmp(flag, "tls-cert") == 0 ? c->tls_cert : c->tls_key,
                   strcmp(flag, "tls-cert") == 0 ? "tls-key" : "tls-cert",
                   strcmp(flag, "tls-cert") == 0 ? c->tls_key : c->tls_cert,
                   gnutls_strerror(rc));
}

/* The TLS flags as a whole: the listener's pair both or neither, and a follower's trust
 * for an https:// leader said explicitly (a pinned CA, or the system store). */
static int config_check_tls(const struct config *c, struct err *e)
{
    if (c->tls_cert[0] && !c->tls_key[0])
        return err_set(e, ERR_INVALID, "tls-key",
                       "--tls-cert needs --tls-key (its private key)");
    if (c->tls_key[0] && !c->tls_cert[0])
        return err_set(e, ERR_INVALID, "tls-cert",
                       "--tls-key needs --tls-cert (its certificate)");
    if (c->tls_cert[0] && config_check_tls_pair(c, e) < 0)
        return -1;
    bool https = strncmp(c->join, "https://", 8) == 0;
    if (c->join_ca[0] && c->join_system_ca)
        return err_set(e, ERR_INVALID, "join-ca",
                       "--join-ca and --join-system-ca exclude each other: give one");
    if ((c->join_ca[0] || c->join_system_ca) && !https)
        return err_set(e, ERR_INVALID, c->join_ca[0] ? "join-ca" : "join-system-ca",
                       "--%s needs --join https://LEADER:PORT",
                       c->join_ca[0] ? "join-ca" : "join-system-ca");
    if (https && !c->join_ca[0] && !c->join_system_ca)
        return err_set(e, ERR_INVALID, "join-ca",
                       "--join %s needs --join-ca FILE (the cluster's CA, PEM; "
                       "deploy/tls-keys.sh makes one) or --join-system-ca",
                       c->join);
    return 0;
}

static int config_apply(struct config *c, int opt, const char *arg, struct err *e)
{
    long v = 0;
    switch (opt) {
    case OPT_HOST: return config_copy(c->host, sizeof c->host, "host", arg, e);
    case OPT_STORE_HOST:
        return config_copy(c->store_host, sizeof c->store_host, "store-host", arg, e);
    case OPT_STATE_DIR:
        return config_copy(c->state_dir, sizeof c->state_dir, "state-dir", arg, e);
    case OPT_WORKER:
        return config_copy(c->worker_path, sizeof c->worker_path, "worker", arg, e);
    case OPT_FS: return config_copy(c->fs_path, sizeof c->fs_path, "fs", arg, e);
    case OPT_FUSE_DEVICE:
        return config_copy(c->fuse_device, sizeof c->fuse_device, "fuse-device", arg, e);
    case OPT_WEB_DIR: return config_copy(c->web_dir, sizeof c->web_dir, "web-dir", arg, e);
    case OPT_ENGINES_DIR:
        return config_copy(c->engines_dir, sizeof c->engines_dir, "engines-dir", arg, e);
    case OPT_PYTHON: return config_copy(c->python, sizeof c->python, "python", arg, e);
    case OPT_SCRIPTS_DIR: return config_set_scripts_dir(c, arg, e);
    case OPT_DATA_DIR: return config_add_data_dir(c, arg, "data-dir", e);
    case OPT_NODE: return config_copy(c->node, sizeof c->node, "node", arg, e);
    case OPT_PORT: return config_parse_int("port", arg, 0, 65535, &c->port, e);
    case OPT_STORE_PORT:
        return config_parse_int("store-port", arg, 0, 65535, &c->store_port, e);
    case OPT_CPU_SLOTS: return config_parse_int("cpu-slots", arg, 1, 4096, &c->cpu_slots, e);
    case OPT_GPUS: return config_parse_int("gpus", arg, 0, GPU_SLOTS_MAX, &c->gpus, e);
    case OPT_MAX_BODY:
        if (config_parse_long("max-body", arg, 1024, 64L << 20, &v, e) < 0)
            return -1;
        c->max_body = (size_t)v;
        return 0;
    case OPT_HTTP_THREADS:
        return config_parse_int("http-threads", arg, 1, 256, &c->http_threads, e);
    case OPT_RANK_MEMORY_MARGIN:
        return config_parse_int("rank-memory-margin-mib", arg, -1, 1 << 20,
                                &c->rank_memory_margin_mib, e);
    case OPT_KILL_GRACE:
        return config_parse_int("kill-grace-ms", arg, 0, 600000, &c->kill_grace_ms, e);
    case OPT_TOKEN_FILE:
        return credential_read_file(arg, "token-file", c->token, sizeof c->token, e);
    case OPT_READ_TOKEN:
        return credential_read_file(arg, "read-token", c->read_token, sizeof c->read_token, e);
    case OPT_CLUSTER_KEY:
        return credential_read_file(arg, "cluster-key", c->cluster_key, sizeof c->cluster_key,
                                    e);
    case OPT_CORS:
        return config_copy(c->cors_origin, sizeof c->cors_origin, "cors-origin", arg, e);
    case OPT_ALLOW_HOST:
        return config_copy(c->allow_hosts, sizeof c->allow_hosts, "allow-host", arg, e);
    case OPT_NETWORK_PROFILE: return config_set_network_profile(c, arg, e);
    case OPT_JOIN: return config_set_join(c, arg, e);
    case OPT_NODE_TIMEOUT:
        return config_parse_int("node-timeout-ms", arg, 500, 3600000, &c->node_timeout_ms, e);
    case OPT_SYNC_MS: return config_parse_int("sync-ms", arg, 20, 60000, &c->sync_ms, e);
    case OPT_MPI_AGENT: return config_set_mpi_agent(c, arg, e);
    case OPT_SHM_DIR: return config_set_shm_dir(c, arg, e);
    case OPT_TLS_CERT: return config_set_pem(c->tls_cert, "tls-cert", arg, "CERTIFICATE", e);
    case OPT_TLS_KEY: return config_set_pem(c->tls_key, "tls-key", arg, "PRIVATE KEY", e);
    case OPT_JOIN_CA: return config_set_pem(c->join_ca, "join-ca", arg, "CERTIFICATE", e);
    case OPT_JOIN_SYSTEM_CA: c->join_system_ca = true; return 0;
    case OPT_LOG_LEVEL:
        if (log_parse_level(arg, &c->log_level) < 0)
            return err_set(e, ERR_INVALID, "log-level",
                           "--log-level must be debug, info, warn or error, got '%s'", arg);
        return 0;
    default: return err_set(e, ERR_INVALID, NULL, "unknown option");
    }
}

int config_parse_args(struct config *c, int argc, char **argv, struct err *e)
{
    config_defaults(c);
    const char *env_token = getenv("DDPB_TOKEN"), *job = getenv("SLURM_JOB_ID");
    if (job)
        snprintf(c->slurm_job, sizeof c->slurm_job, "%s", job);
    int rc = env_token && *env_token ? config_set_token(c, env_token, "DDPB_TOKEN", e) : 0;
    /* read once, then gone: the engine probe, workers and every other child inherit the
     * environment, and none of them is the admin */
    unsetenv("DDPB_TOKEN");
    if (rc < 0)
        return -1;
    optind = 1;
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, "", config_options, NULL)) != -1) {
        if (opt == OPT_HELP) {
            config_print_usage(argv[0]);
            return 1;
        }
        if (opt == OPT_VERSION) {
            printf("ddpbenchd %s (%s)\n", DDPB_VERSION, DDPB_COMPILER);
            return 1;
        }
        if (opt == '?' || opt == ':')
            return err_set(e, ERR_INVALID, NULL,
                           "unknown or incomplete option '%s' (see --help)", argv[optind - 1]);
        if (config_apply(c, opt, optarg, e) < 0)
            return -1;
    }
    if (optind < argc)
        return err_set(e, ERR_INVALID, NULL, "unexpected argument '%s' (see --help)",
                       argv[optind]);
    if (c->join[0] && !c->token[0] && !c->cluster_key[0])
        return err_set(e, ERR_INVALID, "join",
                       "--join needs the cluster's credential: --cluster-key (the leader's "
                       "key), or the leader's token with --token-file");
    if (config_check_tls(c, e) < 0)
        return -1;
    if (c->gpus < 0) { /* not given: NVML's count; a node without NVML has no GPU slots */
        char why[256] = "";
        c->gpus = gpu_nvml_detect_count(NULL, why, sizeof why);
        if (c->gpus > GPU_SLOTS_MAX)
            c->gpus = GPU_SLOTS_MAX;
        if (c->gpus == 0 && why[0])
            log_debug("GPU slots: 0 (%s)", why);
    }
    return 0;
}
