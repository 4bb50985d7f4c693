/* Unit tests for daemon/config's --network-profile: the default is none (the host network,
 * stored as null), a label is kept as given, "none" clears it, and a name that could not
 * be a results column or CSV cell as is (a comma, a space, empty, too long) is refused
 * naming the option. --mpi-agent: off unless given, an executable kept as its real path.
 * --shm-dir: none unless given, an existing directory kept as its real path; a missing path
 * or a file is refused naming the option and the path. Secret files (--token-file,
 * --read-token, --cluster-key): refused naming the option and the mode when group or
 * others may read them; DDPB_TOKEN is gone from the environment once read. --data-dir:
 * repeatable, each kept as its real path in one ':'-joined list; none given: the state
 * directory's data/ (made) and /usr/share/datasets; a missing one refused. --scripts-dir:
 * one writable by group or others is refused at start. common/paths: beneath means the
 * directory or under it at a '/', and a missing path and one outside fail alike. TLS
 * (--tls-cert, --tls-key, --join-ca, --join-system-ca): both halves of the pair or neither,
 * each file PEM of its kind, the key the certificate's (else refused naming the file at
 * fault), and a follower's https:// leader needs a CA said explicitly, while http:// still
 * parses. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/paths.h"
#include "daemon/config.h"
#include "tests/unit/test.h"

/* config_parse_args over {"ddpbenchd", args..., NULL}; getopt restarted each time. */
static int test_config_parse(struct config *c, char **args, int n, struct err *e)
{
    char *argv[16] = {"ddpbenchd"};
    for (int i = 0; i < n && i < 14; i++)
        argv[i + 1] = args[i];
    optind = 0;
    return config_parse_args(c, n + 1, argv, e);
}

static void test_config_network_profile(void)
{
    struct config c;
    struct err e = {0};
    T_EQ_INT(test_config_parse(&c, NULL, 0, &e), 0);
    T_EQ_STR(c.network_profile, "");
    char *given[] = {"--network-profile", "10gbe"};
    T_EQ_INT(test_config_parse(&c, given, 2, &e), 0);
    T_EQ_STR(c.network_profile, "10gbe");
    char *none[] = {"--network-profile", "10gbe", "--network-profile", "none"};
    T_EQ_INT(test_config_parse(&c, none, 4, &e), 0);
    T_EQ_STR(c.network_profile, "");
    char long_name[80];
    memset(long_name, 'a', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    char *bad[][2] = {{"--network-profile", "1gbe,10gbe"},
                      {"--network-profile", "1 gbe"},
                      {"--network-profile", ""},
                      {"--network-profile", long_name}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        e = (struct err){0};
        T_CHECK_MSG(test_config_parse(&c, bad[i], 2, &e) < 0, "accepted '%s'", bad[i][1]);
        T_EQ_INT(e.code, ERR_INVALID);
        T_EQ_STR(e.field, "network-profile");
    }
}

/* --mpi-agent: off by default; an executable is kept as its real path; a missing or
 * non-executable file is refused naming the option. */
static void test_config_mpi_agent(void)
{
    struct config c;
    struct err e = {0};
    T_EQ_INT(test_config_parse(&c, NULL, 0, &e), 0);
    T_EQ_STR(c.mpi_agent, "");
    char *given[] = {"--mpi-agent", "/bin/../bin/sh"};
    T_CHECK_MSG(test_config_parse(&c, given, 2, &e) == 0, "%s", e.msg);
    char want[PATH_MAX];
    T_CHECK(realpath("/bin/sh", want) != NULL);
    T_EQ_STR(c.mpi_agent, want);
    char *bad[][2] = {{"--mpi-agent", "/nonexistent/agent"}, {"--mpi-agent", "/etc/passwd"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        e = (struct err){0};
        T_CHECK_MSG(test_config_parse(&c, bad[i], 2, &e) < 0, "accepted '%s'", bad[i][1]);
        T_EQ_STR(e.field, "mpi-agent");
    }
}

/* --rank-memory-margin-mib (issue 31): 1024 by default, -1 turns the limit off, anything
 * else out of range or not a number is refused naming the option. */
static void test_config_rank_memory_margin(void)
{
    struct config c;
    struct err e = {0};
    T_EQ_INT(test_config_parse(&c, NULL, 0, &e), 0);
    T_EQ_INT(c.rank_memory_margin_mib, 1024);
    char *off[] = {"--rank-memory-margin-mib", "-1"};
    T_CHECK_MSG(test_config_parse(&c, off, 2, &e) == 0, "%s", e.msg);
    T_EQ_INT(c.rank_memory_margin_mib, -1);
    char *bad[][2] = {{"--rank-memory-margin-mib", "-2"}, {"--rank-memory-margin-mib", "1G"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        e = (struct err){0};
        T_CHECK_MSG(test_config_parse(&c, bad[i], 2, &e) < 0, "accepted '%s'", bad[i][1]);
        T_EQ_STR(e.field, "rank-memory-margin-mib");
    }
}

/* --shm-dir: "" by default (the workers' /dev/shm); a directory is kept as its real path;
 * a missing path or a file is refused naming the option, the message naming the path. */
static void test_config_shm_dir(void)
{
    struct config c;
    struct err e = {0};
    T_EQ_INT(test_config_parse(&c, NULL, 0, &e), 0);
    T_EQ_STR(c.shm_dir, "");
    char dir[] = "/tmp/ddpb-shm-dir-XXXXXX";
    T_CHECK(mkdtemp(dir) != NULL);
    char given_path[PATH_MAX], want[PATH_MAX], file[PATH_MAX];
    snprintf(given_path, sizeof given_path, "%s/../%s", dir, strrchr(dir, '/') + 1);
    T_CHECK(realpath(dir, want) != NULL);
    char *given[] = {"--shm-dir", given_path};
    T_CHECK_MSG(test_config_parse(&c, given, 2, &e) == 0, "%s", e.msg);
    T_EQ_STR(c.shm_dir, want);
    snprintf(file, sizeof file, "%s/segment", dir);
    FILE *f = fopen(file, "w");
    T_CHECK(f != NULL);
    if (f)
        fclose(f);
    char missing[PATH_MAX];
    snprintf(missing, sizeof missing, "%s/nonexistent", dir);
    char *bad[][2] = {{"--shm-dir", missing}, {"--shm-dir", file}};
    const char *why[] = {"No such file or directory", "not a directory"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        e = (struct err){0};
        T_CHECK_MSG(test_config_parse(&c, bad[i], 2, &e) < 0, "accepted '%s'", bad[i][1]);
        T_EQ_INT(e.code, ERR_INVALID);
        T_EQ_STR(e.field, "shm-dir");
        T_CHECK_MSG(strstr(e.msg, bad[i][1]) && strstr(e.msg, why[i]), "%s", e.msg);
        T_EQ_STR(c.shm_dir, "");
    }
    unlink(file);
    rmdir(dir);
}

/* A secret file holding text at mode into path (a mkstemp template). */
static void test_config_secret(char *path, const char *text, mode_t mode)
{
    int fd = mkstemp(path);
    T_CHECK(fd >= 0);
    T_CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    T_CHECK(fchmod(fd, mode) == 0);
    close(fd);
}

/* Each secret option: a 0600 file is taken, a group/other-readable one is refused naming
 * the option and its mode, a short one naming the option. */
static void test_config_secret_files(void)
{
    static const char *const opts[] = {"--token-file", "--read-token", "--cluster-key"};
    struct config c;
    for (size_t i = 0; i < sizeof opts / sizeof *opts; i++) {
        char good[] = "/tmp/ddpb-secret-XXXXXX", open_[] = "/tmp/ddpb-secret-XXXXXX",
             shrt[] = "/tmp/ddpb-secret-XXXXXX";
        test_config_secret(good, "0123456789abcdef-secret\n", 0600);
        test_config_secret(open_, "0123456789abcdef-secret\n", 0644);
        test_config_secret(shrt, "short\n", 0600);
        struct err e = {0};
        char *ok[] = {(char *)opts[i], good};
        T_EQ_INT(test_config_parse(&c, ok, 2, &e), 0);
        const char *got = i == 0 ? c.token : i == 1 ? c.read_token : c.cluster_key;
        T_EQ_STR(got, "0123456789abcdef-secret");
        char *bad[] = {(char *)opts[i], open_};
        e = (struct err){0};
        T_CHECK_MSG(test_config_parse(&c, bad, 2, &e) < 0, "%s took a 0644 file", opts[i]);
        T_EQ_STR(e.field, opts[i] + 2);
        T_CHECK_MSG(strstr(e.msg, "0644") && strstr(e.msg, open_), "%s", e.msg);
        char *small[] = {(char *)opts[i], shrt};
        e = (struct err){0};
        T_CHECK(test_config_parse(&c, small, 2, &e) < 0);
        T_EQ_STR(e.field, opts[i] + 2);
        unlink(good);
        unlink(open_);
        unlink(shrt);
    }
}

/* DDPB_TOKEN is read, then removed: no child (engine probe, worker) inherits it. */
static void test_config_env_token_removed(void)
{
    struct config c;
    struct err e = {0};
    T_CHECK(setenv("DDPB_TOKEN", "0123456789abcdef-env", 1) == 0);
    T_EQ_INT(test_config_parse(&c, NULL, 0, &e), 0);
    T_EQ_STR(c.token, "0123456789abcdef-env");
    T_CHECK(getenv("DDPB_TOKEN") == NULL);
    /* a bad one is refused, and gone as well */
    T_CHECK(setenv("DDPB_TOKEN", "short", 1) == 0);
    T_CHECK(test_config_parse(&c, NULL, 0, &e) < 0);
    T_CHECK(getenv("DDPB_TOKEN") == NULL);
}

static void test_config_data_dirs(void)
{
    struct config c;
    struct err e = {0};
    char a[] = "/tmp/ddpb-data-a-XXXXXX", b[] = "/tmp/ddpb-data-b-XXXXXX";
    T_CHECK(mkdtemp(a) && mkdtemp(b));
    char ra[PATH_MAX], rb[PATH_MAX], want[2 * PATH_MAX + 2], missing[PATH_MAX];
    T_CHECK(realpath(a, ra) && realpath(b, rb));
    snprintf(want, sizeof want, "%s:%s", ra, rb);
    char *two[] = {"--data-dir", a, "--data-dir", b};
    T_CHECK_MSG(test_config_parse(&c, two, 4, &e) == 0, "%s", e.msg);
    T_EQ_STR(c.data_dirs, want);
    T_OK(config_default_data_dirs(&c, &e)); /* given: the defaults stay out */
    T_EQ_STR(c.data_dirs, want);
    snprintf(missing, sizeof missing, "%s/nonexistent", a);
    char *bad[] = {"--data-dir", missing};
    T_CHECK(test_config_parse(&c, bad, 2, &e) < 0);
    T_EQ_STR(e.field, "data-dir");
    T_CHECK_MSG(strstr(e.msg, missing) != NULL, "%s", e.msg);
    /* none given: <state>/data, made here, and the packaged datasets' folder */
    char *state[] = {"--state-dir", a};
    T_CHECK_MSG(test_config_parse(&c, state, 2, &e) == 0, "%s", e.msg);
    T_EQ_STR(c.data_dirs, "");
    T_OK(config_default_data_dirs(&c, &e));
    struct stat st;
    snprintf(want, sizeof want, "%s/data", ra);
    T_CHECK(stat(want, &st) == 0 && S_ISDIR(st.st_mode));
    T_CHECK_MSG(strncmp(c.data_dirs, want, strlen(want)) == 0, "%s", c.data_dirs);
    if (stat(CONFIG_SYSTEM_DATA_DIR, &st) == 0)
        T_CHECK_MSG(strstr(c.data_dirs, ":" CONFIG_SYSTEM_DATA_DIR), "%s", c.data_dirs);
    rmdir(want);
    rmdir(a);
    rmdir(b);
}

static void test_config_scripts_dir_writable(void)
{
    struct config c;
    struct err e = {0};
    char dir[] = "/tmp/ddpb-scripts-XXXXXX";
    T_CHECK(mkdtemp(dir) != NULL);
    char *given[] = {"--scripts-dir", dir};
    T_CHECK(chmod(dir, 0755) == 0);
    T_CHECK_MSG(test_config_parse(&c, given, 2, &e) == 0, "%s", e.msg);
    mode_t modes[] = {0775, 0757, 0777};
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        T_CHECK(chmod(dir, modes[i]) == 0);
        e = (struct err){0};
        T_CHECK_MSG(test_config_parse(&c, given, 2, &e) < 0, "mode %o accepted",
                    (unsigned)modes[i]);
        T_EQ_STR(e.field, "scripts-dir");
        T_CHECK_MSG(strstr(e.msg, "writable by group or others"), "%s", e.msg);
        T_EQ_STR(c.scripts_dir, "");
    }
    rmdir(dir);
}

static void test_paths_beneath(void)
{
    T_CHECK(paths_beneath("/data", "/data"));
    T_CHECK(paths_beneath("/data/a/b", "/data"));
    T_CHECK(paths_beneath("/data/a", "/data/"));
    T_CHECK(!paths_beneath("/data2/a", "/data"));
    T_CHECK(!paths_beneath("/dat", "/data"));
    T_CHECK(paths_beneath("/etc", "/"));
    char dir[] = "/tmp/ddpb-paths-XXXXXX", in[PATH_MAX], link[PATH_MAX], out[PATH_MAX];
    char real[PATH_MAX], list[2 * PATH_MAX], esc[PATH_MAX];
    T_CHECK(mkdtemp(dir) && realpath(dir, real));
    snprintf(in, sizeof in, "%s/in", real);
    snprintf(link, sizeof link, "%s/out", real);
    snprintf(esc, sizeof esc, "%s/../%s/in", real, strrchr(real, '/') + 1);
    FILE *f = fopen(in, "w");
    T_CHECK(f != NULL);
    fclose(f);
    T_CHECK(symlink("/etc/passwd", link) == 0);
    snprintf(list, sizeof list, "/nonexistent-first:%s", real);
    T_EQ_INT(paths_resolve_beneath(esc, list, out), 0);
    T_EQ_STR(out, in);
    /* a symlink out of the folder, a missing file, "..": one answer, ENOENT */
    const char *bad[] = {link, "/etc/passwd", "/nonexistent/x"};
    for (size_t i = 0; i < 3; i++) {
        errno = 0;
        T_EQ_INT(paths_resolve_beneath(bad[i], list, out), -1);
        T_EQ_INT(errno, ENOENT);
        T_EQ_STR(out, "");
    }
    unlink(link);
    unlink(in);
}

/* A self-signed certificate (CN test-a, 100 years) with its key, and a key of another
 * pair: made once with openssl for this test, since the check under test is GnuTLS's. */
static const char test_cert_a[] =
    "-----BEGIN CERTIFICATE-----\n"
    "MIIBizCCATCgAwIBAgIUNpGeS6JaiWgB0JRj5EhOM7VmcQ0wCgYIKoZIzj0EAwIw\n"
    "ETEPMA0GA1UEAwwGdGVzdC1hMCAXDTI2MTEyODA4MzE0OFoYDzIxMjYxMTA0MDgz\n"
    "MTQ4WjARMQ8wDQYDVQQDDAZ0ZXN0LWEwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNC\n"
    "AASMlmQGWfNotjt+64bq1wKrt913VsCVqHzaNpAuJwgaFMesarLhk8SmJFrbZOEn\n"
    "YOG8HvYfYY45okHaWoQZi37Mo2QwYjAdBgNVHQ4EFgQU+lTd7VbXV2dvfE42VoJ0\n"
    "cD52kOkwHwYDVR0jBBgwFoAU+lTd7VbXV2dvfE42VoJ0cD52kOkwDwYDVR0TAQH/\n"
    "BAUwAwEB/zAPBgNVHREECDAGhwR/AAABMAoGCCqGSM49BAMCA0kAMEYCIQCs8xeg\n"
    "FfzcBjAXtnmqZHRP4kGICHbOvn+0qWwYUQX+zQIhAIMvoUKKWgU0buqHEJlDzKT7\n"
    "U6l5fy8DEmnc8N4OcFMP\n"
    "-----END CERTIFICATE-----\n";
static const char test_key_a[] =
    "-----BEGIN PRIVATE KEY-----\n"
    "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgUcziRXkRSE+QN7+k\n"
    "YEw5lNeT8PyseGfH2kOUuchhsHmhRANCAASMlmQGWfNotjt+64bq1wKrt913VsCV\n"
    "qHzaNpAuJwgaFMesarLhk8SmJFrbZOEnYOG8HvYfYY45okHaWoQZi37M\n"
    "-----END PRIVATE KEY-----\n";
static const char test_key_b[] =
    "-----BEGIN PRIVATE KEY-----\n"
    "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg0LdudUlkYU739m04\n"
    "++PgBYmrZ1fD7CVYfJlW8fBH2HGhRANCAASRRL+xmQE7wOVRq9jf5i3n5nTv3p7f\n"
    "rLjD+RdYVlw3VVsFc6WioipDvLw1ImYEnuDVYEWLrkexnAuH60fXztlI\n"
    "-----END PRIVATE KEY-----\n";

/* Writes text to dir/name; the path into out (PATH_MAX). */
static void test_config_write(const char *dir, const char *name, const char *text, char *out)
{
    snprintf(out, PATH_MAX, "%s/%s", dir, name);
    FILE *f = fopen(out, "w");
    T_CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* One refused command line: the field named, and want in the message. */
static void test_config_refused(char **args, int n, const char *field, const char *want)
{
    struct config c;
    struct err e = {0};
    T_CHECK_MSG(test_config_parse(&c, args, n, &e) < 0, "accepted %s %s", args[0],
                n > 1 ? args[1] : "");
    T_EQ_STR(e.field, field);
    T_CHECK_MSG(strstr(e.msg, want) != NULL, "'%s' lacks '%s'", e.msg, want);
}

/* --tls-cert / --tls-key: off by default; a matching pair is kept as real paths; half a
 * pair, a missing file, a key given as the certificate, a certificate that is not one
 * and a key of another pair are refused naming the flag at fault. */
static void test_config_tls_listener(void)
{
    char dir[] = "/tmp/ddpb-test-tls-XXXXXX", cert[PATH_MAX], key[PATH_MAX], other[PATH_MAX],
         junk[PATH_MAX];
    T_CHECK(mkdtemp(dir) != NULL);
    test_config_write(dir, "a.pem", test_cert_a, cert);
    test_config_write(dir, "a.key", test_key_a, key);
    test_config_write(dir, "b.key", test_key_b, other);
    test_config_write(
        dir, "junk.pem",
        "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n", junk);
    struct config c;
    struct err e = {0};
    T_EQ_INT(test_config_parse(&c, NULL, 0, &e), 0);
    T_EQ_STR(c.tls_cert, "");
    T_EQ_STR(c.tls_key, "");
    char *pair[] = {"--tls-cert", cert, "--tls-key", key};
    T_EQ_INT(test_config_parse(&c, pair, 4, &e), 0);
    T_EQ_STR(c.tls_cert, cert);
    T_EQ_STR(c.tls_key, key);
    char *half_cert[] = {"--tls-cert", cert};
    test_config_refused(half_cert, 2, "tls-key", "--tls-cert needs --tls-key");
    char *half_key[] = {"--tls-key", key};
    test_config_refused(half_key, 2, "tls-cert", "--tls-key needs --tls-cert");
    char *missing[] = {"--tls-cert", "/nonexistent/c.pem", "--tls-key", key};
    test_config_refused(missing, 4, "tls-cert", "/nonexistent/c.pem");
    char *swapped[] = {"--tls-cert", key, "--tls-key", key};
    test_config_refused(swapped, 4, "tls-cert", "not a PEM file with a CERTIFICATE");
    char *cert_as_key[] = {"--tls-cert", cert, "--tls-key", cert};
    test_config_refused(cert_as_key, 4, "tls-key", "not a PEM file with a PRIVATE KEY");
    char *bad_cert[] = {"--tls-cert", junk, "--tls-key", key};
    test_config_refused(bad_cert, 4, "tls-cert", junk);
    char *mismatch[] = {"--tls-cert", cert, "--tls-key", other};
    test_config_refused(mismatch, 4, "tls-key", "do not match");
    char *text = config_read_pem(cert, "tls-cert", &e);
    T_CHECK(text && strcmp(text, test_cert_a) == 0);
    free(text);
    const char *names[] = {"a.pem", "a.key", "b.key", "junk.pem"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

/* --join https:// needs --join-ca (kept as its real path) or --join-system-ca, never both;
 * either without an https:// join is refused; http:// still parses (back-compat, warned
 * about by the follower); any other scheme is refused naming --join. */
/* The daemon takes DDPB_TOKEN out of its environment once read: each parse of a --join
 * line below is given it again (--join needs the cluster's credential). */
#define JOIN_TOKEN "join-test-token-0123456789"

static void test_config_tls_join(void)
{
    char dir[] = "/tmp/ddpb-test-join-XXXXXX", ca[PATH_MAX], key[PATH_MAX];
    T_CHECK(mkdtemp(dir) != NULL);
    test_config_write(dir, "ca.pem", test_cert_a, ca);
    test_config_write(dir, "a.key", test_key_a, key);
    struct config c;
    struct err e = {0};
    char *pinned[] = {"--join", "https://lead:7480/", "--join-ca", ca};
    setenv("DDPB_TOKEN", JOIN_TOKEN, 1);
    T_EQ_INT(test_config_parse(&c, pinned, 4, &e), 0);
    T_EQ_STR(c.join, "https://lead:7480");
    T_EQ_STR(c.join_ca, ca);
    T_CHECK(!c.join_system_ca);
    char *sys[] = {"--join", "https://lead:7480", "--join-system-ca"};
    setenv("DDPB_TOKEN", JOIN_TOKEN, 1);
    T_EQ_INT(test_config_parse(&c, sys, 3, &e), 0);
    T_CHECK(c.join_system_ca && c.join_ca[0] == '\0');
    char *plain[] = {"--join", "http://lead:7480"};
    setenv("DDPB_TOKEN", JOIN_TOKEN, 1);
    T_EQ_INT(test_config_parse(&c, plain, 2, &e), 0);
    T_EQ_STR(c.join, "http://lead:7480");
    char *no_ca[] = {"--join", "https://lead:7480"};
    setenv("DDPB_TOKEN", JOIN_TOKEN, 1);
    test_config_refused(no_ca, 2, "join-ca", "needs --join-ca");
    char *both[] = {"--join", "https://lead:7480", "--join-ca", ca, "--join-system-ca"};
    setenv("DDPB_TOKEN", JOIN_TOKEN, 1);
    test_config_refused(both, 5, "join-ca", "exclude each other");
    char *ca_plain[] = {"--join", "http://lead:7480", "--join-ca", ca};
    setenv("DDPB_TOKEN", JOIN_TOKEN, 1);
    test_config_refused(ca_plain, 4, "join-ca", "needs --join https://");
    char *ca_alone[] = {"--join-system-ca"};
    setenv("DDPB_TOKEN", JOIN_TOKEN, 1);
    test_config_refused(ca_alone, 1, "join-system-ca", "needs --join https://");
    char *ca_key[] = {"--join", "https://lead:7480", "--join-ca", key};
    setenv("DDPB_TOKEN", JOIN_TOKEN, 1);
    test_config_refused(ca_key, 4, "join-ca", "not a PEM file with a CERTIFICATE");
    char *ftp[] = {"--join", "ftp://lead:7480"};
    setenv("DDPB_TOKEN", JOIN_TOKEN, 1);
    test_config_refused(ftp, 2, "join", "https://HOST:PORT");
    char *path[] = {"--join", "https://lead:7480/v1", "--join-ca", ca};
    setenv("DDPB_TOKEN", JOIN_TOKEN, 1);
    test_config_refused(path, 4, "join", "https://HOST:PORT");
    unsetenv("DDPB_TOKEN");
    unlink(ca);
    unlink(key);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_config_network_profile);
    TEST_RUN(test_config_mpi_agent);
    TEST_RUN(test_config_shm_dir);
    TEST_RUN(test_config_secret_files);
    TEST_RUN(test_config_env_token_removed);
    TEST_RUN(test_config_data_dirs);
    TEST_RUN(test_config_scripts_dir_writable);
    TEST_RUN(test_paths_beneath);
    TEST_RUN(test_config_tls_listener);
    TEST_RUN(test_config_tls_join);
    TEST_RUN(test_config_rank_memory_margin);
    return test_end();
}
