/* Unit tests for cli/args (every command's command line, options before and after the
 * command, every kind of mistake as a usage error, the environment's defaults) and for
 * the exit-status contract (cli_exit_for_http, cli_exit_for_outcome, the --help text). */
#include "cli/args.h"
#include "cli/client.h"
#include "common/vocab.h"
#include "tests/unit/test.h"

#define ARGV(...)                                                                              \
    (char *[])                                                                                 \
    {                                                                                          \
        "ddpbench", __VA_ARGS__, NULL                                                          \
    }

static int parse(struct cli_args *a, struct err *e, char **argv)
{
    int argc = 0;
    while (argv[argc])
        argc++;
    err_clear(e);
    return args_parse(a, argc, argv, e);
}

static void test_args_submit(void)
{
    struct cli_args a;
    struct err e;
    T_OK(parse(&a, &e, ARGV("submit", "spec.json")));
    T_EQ_INT(a.cmd, CMD_SUBMIT);
    T_EQ_STR(a.spec_path, "spec.json");
    T_CHECK(!a.watch && !a.json);
    T_OK(parse(&a, &e, ARGV("submit", "-", "--watch")));
    T_EQ_STR(a.spec_path, "-");
    T_CHECK(a.watch);
    T_OK(parse(&a, &e, ARGV("--json", "submit", "-w", "x.json")));
    T_CHECK(a.json && a.watch);
    T_EQ_STR(a.spec_path, "x.json");
    /* "--" makes a spec file named like an option possible */
    T_OK(parse(&a, &e, ARGV("submit", "--", "--odd.json")));
    T_EQ_STR(a.spec_path, "--odd.json");
}

static void test_args_globals_anywhere(void)
{
    struct cli_args a;
    struct err e;
    T_OK(parse(
        &a, &e,
        ARGV("--url", "http://h:1", "--token", "t0k", "--timeout", "2.5", "ls", "--json")));
    T_EQ_INT(a.cmd, CMD_LS);
    T_EQ_STR(a.url, "http://h:1");
    T_EQ_STR(a.token, "t0k");
    T_NEAR(a.timeout_s, 2.5, 1e-9);
    T_CHECK(a.json);
    T_OK(parse(&a, &e, ARGV("ls", "--url=https://x.example/", "--token-file=/tmp/t")));
    T_EQ_STR(a.url, "https://x.example/");
    T_EQ_STR(a.token_file, "/tmp/t");
    T_NEAR(a.timeout_s, ARGS_DEFAULT_TIMEOUT_S, 1e-9);
    T_CHECK(a.url && !a.token);
}

static void test_args_ls(void)
{
    struct cli_args a;
    struct err e;
    T_OK(parse(&a, &e, ARGV("ls")));
    T_EQ_INT(a.cmd, CMD_LS);
    T_EQ_INT(a.limit, -1);
    T_EQ_INT(a.offset, -1);
    T_CHECK(!a.status && !a.name && !a.workload && !a.model);
    T_OK(parse(&a, &e,
               ARGV("list", "--status", "running", "--name", "res net", "--workload", "train",
                    "--model=resnet18", "--limit", "10", "--offset=20")));
    T_EQ_INT(a.cmd, CMD_LS);
    T_EQ_STR(a.status, "running");
    T_EQ_STR(a.name, "res net");
    T_EQ_STR(a.workload, "train");
    T_EQ_STR(a.model, "resnet18");
    T_EQ_INT(a.limit, 10);
    T_EQ_INT(a.offset, 20);
    T_OK(parse(&a, &e, ARGV("ls", "-n", "5", "--offset", "0")));
    T_EQ_INT(a.limit, 5);
    T_EQ_INT(a.offset, 0);
}

static void test_args_id_commands(void)
{
    struct cli_args a;
    struct err e;
    T_OK(parse(&a, &e, ARGV("show", "12", "--group-by", "op,world_size")));
    T_EQ_INT(a.cmd, CMD_SHOW);
    T_EQ_INT(a.nids, 1);
    T_EQ_INT(a.ids[0], 12);
    T_EQ_STR(a.group_by, "op,world_size");
    T_OK(parse(&a, &e, ARGV("compare", "3", "5", "8", "-g", "backend")));
    T_EQ_INT(a.cmd, CMD_COMPARE);
    T_EQ_INT(a.nids, 3);
    T_EQ_INT(a.ids[2], 8);
    T_EQ_STR(a.group_by, "backend");
    T_OK(parse(&a, &e, ARGV("export", "4", "--csv", "-o", "out.csv")));
    T_EQ_INT(a.cmd, CMD_EXPORT);
    T_CHECK(a.csv && !a.json);
    T_EQ_STR(a.output, "out.csv");
    T_OK(parse(&a, &e, ARGV("export", "--json", "4", "--group-by=op")));
    T_CHECK(!a.csv && a.json);
    T_OK(parse(&a, &e, ARGV("cancel", "7")));
    T_EQ_INT(a.cmd, CMD_CANCEL);
    T_CHECK(!a.run && !a.wait);
    T_EQ_INT(a.ids[0], 7);
    T_OK(parse(&a, &e, ARGV("cancel", "--run", "9", "--wait")));
    T_CHECK(a.run && a.wait);
    T_EQ_INT(a.ids[0], 9);
    T_OK(parse(&a, &e, ARGV("rm", "3")));
    T_EQ_INT(a.cmd, CMD_RM);
    T_OK(parse(&a, &e, ARGV("delete", "3")));
    T_EQ_INT(a.cmd, CMD_RM);
    T_OK(parse(&a, &e, ARGV("runs", "9223372036854775807")));
    T_EQ_INT(a.cmd, CMD_RUNS);
    T_EQ_INT(a.ids[0], INT64_MAX);
}

/* The model's commands: fit and report take several ids (the first is the page's, the
 * others go in "with"); predict one id and its options; what they do not take is refused. */
static void test_args_model_commands(void)
{
    struct cli_args a;
    struct err e;
    T_OK(parse(&a, &e, ARGV("fit", "3", "4")));
    T_EQ_INT(a.cmd, CMD_FIT);
    T_EQ_INT(a.nids, 2);
    T_OK(parse(&a, &e, ARGV("report", "5", "3", "-o", "r.html")));
    T_EQ_INT(a.cmd, CMD_REPORT);
    T_EQ_INT(a.ids[1], 3);
    T_EQ_STR(a.output, "r.html");
    T_OK(parse(&a, &e,
               ARGV("predict", "5", "--fit", "3,4", "--world-sizes", "1,8,64", "--strategies",
                    "ddp,zero1")));
    T_EQ_INT(a.cmd, CMD_PREDICT);
    T_CHECK(!a.run && !a.link);
    T_EQ_STR(a.fit, "3,4");
    T_EQ_STR(a.world_sizes, "1,8,64");
    T_EQ_STR(a.strategies, "ddp,zero1");
    T_OK(parse(&a, &e, ARGV("predict", "--run", "12", "--link", "10,25")));
    T_CHECK(a.run);
    T_EQ_STR(a.link, "10,25");
    T_CHECK(!a.nodes && !a.network_profile && !a.pred_max_world);
    T_OK(parse(&a, &e,
               ARGV("predict", "5", "--nodes", "2", "--network-profile", "1gbe",
                    "--pred-max-world", "2")));
    T_EQ_STR(a.nodes, "2");
    T_EQ_STR(a.network_profile, "1gbe");
    T_EQ_STR(a.pred_max_world, "2");
    T_CHECK(parse(&a, &e, ARGV("report", "3", "--nodes", "2")) < 0); /* predict's only */
    T_CHECK(parse(&a, &e, ARGV("predict", "5", "6")) < 0 && e.code == ERR_INVALID);
    T_CHECK(parse(&a, &e, ARGV("predict")) < 0);
    T_CHECK(parse(&a, &e, ARGV("fit", "3", "--fit", "4")) < 0);
    T_CHECK(parse(&a, &e, ARGV("report", "3", "--link", "4,5")) < 0);
}

static void test_args_help_and_version(void)
{
    struct cli_args a;
    struct err e;
    T_OK(parse(&a, &e, ARGV("--help")));
    T_EQ_INT(a.cmd, CMD_HELP);
    T_OK(parse(&a, &e, ARGV("help")));
    T_EQ_INT(a.cmd, CMD_HELP);
    /* help wins over an incomplete command line */
    T_OK(parse(&a, &e, ARGV("export", "-h")));
    T_EQ_INT(a.cmd, CMD_HELP);
    T_OK(parse(&a, &e, ARGV("--version")));
    T_EQ_INT(a.cmd, CMD_VERSION);
}

/* Each line is a usage error, and the message names the offending word. */
static void test_args_usage_errors(void)
{
    static const struct {
        char *argv[8];
        const char *names;
    } bad[] = {
        {{"ddpbench", NULL}, "command"},
        {{"ddpbench", "frobnicate", NULL}, "frobnicate"},
        {{"ddpbench", "ls", "--bogus", NULL}, "--bogus"},
        {{"ddpbench", "ls", "--watch", NULL}, "--watch"},
        {{"ddpbench", "show", "1", "--csv", NULL}, "--csv"},
        {{"ddpbench", "submit", "--status", "x", "s.json", NULL}, "--status"},
        {{"ddpbench", "ls", "--url", NULL}, "--url"},
        {{"ddpbench", "--url", "ftp://h", "ls", NULL}, "ftp://h"},
        {{"ddpbench", "show", "abc", NULL}, "abc"},
        {{"ddpbench", "show", "0", NULL}, "'0'"},
        {{"ddpbench", "show", "12x", NULL}, "12x"},
        {{"ddpbench", "show", "-1", NULL}, "-1"},
        {{"ddpbench", "show", NULL}, "show"},
        {{"ddpbench", "show", "1", "2", NULL}, "show"},
        {{"ddpbench", "submit", NULL}, "submit"},
        {{"ddpbench", "submit", "a.json", "b.json", NULL}, "submit"},
        {{"ddpbench", "export", "1", NULL}, "--csv"},
        {{"ddpbench", "export", "1", "--csv", "--json", NULL}, "--csv"},
        {{"ddpbench", "compare", NULL}, "compare"},
        {{"ddpbench", "ls", "extra", NULL}, "ls"},
        {{"ddpbench", "ls", "--limit", "0", NULL}, "--limit"},
        {{"ddpbench", "ls", "--limit", "ten", NULL}, "--limit"},
        {{"ddpbench", "ls", "--offset", "-3", NULL}, "--offset"},
        {{"ddpbench", "--timeout", "0", "ls", NULL}, "--timeout"},
        {{"ddpbench", "--timeout", "abc", "ls", NULL}, "--timeout"},
        {{"ddpbench", "--timeout", "nan", "ls", NULL}, "--timeout"},
        {{"ddpbench", "--json=1", "ls", NULL}, "--json=1"},
        {{"ddpbench", "cancel", "--wait", NULL}, "cancel"},
        {{"ddpbench", "rm", "--run", "3", NULL}, "--run"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct cli_args a;
        struct err e;
        char **argv = (char **)bad[i].argv;
        int rc = parse(&a, &e, argv);
        T_CHECK_MSG(rc == -1, "case %zu accepted", i);
        T_CHECK_MSG(e.code == ERR_INVALID, "case %zu: code %d", i, (int)e.code);
        T_CHECK_MSG(strstr(e.msg, bad[i].names) != NULL, "case %zu: '%s' lacks '%s'", i, e.msg,
                    bad[i].names);
    }
}

static void test_args_too_many_ids(void)
{
    char *argv[ARGS_MAX_IDS + 4];
    char ids[ARGS_MAX_IDS + 1][8];
    int argc = 0;
    argv[argc++] = "ddpbench";
    argv[argc++] = "compare";
    for (int i = 0; i <= ARGS_MAX_IDS; i++) {
        snprintf(ids[i], sizeof ids[i], "%d", i + 1);
        argv[argc++] = ids[i];
    }
    argv[argc] = NULL;
    struct cli_args a;
    struct err e;
    T_CHECK(args_parse(&a, argc, argv, &e) < 0);
    T_EQ_INT(e.code, ERR_INVALID);
    T_CHECK(args_parse(&a, argc - 1, argv, &e) == 0);
    T_EQ_INT(a.nids, ARGS_MAX_IDS);
}

static void test_args_environment(void)
{
    struct cli_args a;
    struct err e;
    T_OK(parse(&a, &e, ARGV("ls")));
    args_apply_env(&a, NULL, NULL, NULL);
    T_EQ_STR(a.url, ARGS_DEFAULT_URL);
    T_CHECK(!a.token);
    T_OK(parse(&a, &e, ARGV("ls")));
    args_apply_env(&a, "http://env:1", "envtok", NULL);
    T_EQ_STR(a.url, "http://env:1");
    T_EQ_STR(a.token, "envtok");
    T_OK(parse(&a, &e, ARGV("--url", "http://cli:2", "--token", "clitok", "ls")));
    args_apply_env(&a, "http://env:1", "envtok", NULL);
    T_EQ_STR(a.url, "http://cli:2");
    T_EQ_STR(a.token, "clitok");
    /* an explicit --token-file beats DDPB_TOKEN: main reads the file */
    T_OK(parse(&a, &e, ARGV("--token-file", "/t", "ls")));
    args_apply_env(&a, "", "envtok", NULL);
    T_CHECK(a.token == NULL);
    T_EQ_STR(a.url, ARGS_DEFAULT_URL);
    /* the CA for an https:// daemon: --ca, else DDPB_CA, else none (the system store) */
    T_OK(parse(&a, &e, ARGV("ls")));
    args_apply_env(&a, NULL, NULL, "/env/ca.pem");
    T_EQ_STR(a.ca, "/env/ca.pem");
    T_OK(parse(&a, &e, ARGV("--ca", "/cli/ca.pem", "--url", "https://h:1", "ls")));
    args_apply_env(&a, NULL, NULL, "/env/ca.pem");
    T_EQ_STR(a.ca, "/cli/ca.pem");
    T_EQ_STR(a.url, "https://h:1");
    T_OK(parse(&a, &e, ARGV("ls")));
    args_apply_env(&a, NULL, NULL, "");
    T_CHECK(a.ca == NULL);
}

static void test_exit_codes(void)
{
    T_EQ_INT(cli_exit_for_http(200), CLI_EXIT_OK);
    T_EQ_INT(cli_exit_for_http(201), CLI_EXIT_OK);
    T_EQ_INT(cli_exit_for_http(202), CLI_EXIT_OK);
    static const long refused[] = {400, 401, 404, 405, 409, 413, 499};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        T_EQ_INT(cli_exit_for_http(refused[i]), CLI_EXIT_REFUSED);
    static const long unreachable[] = {0, 500, 502, 503, 504, 301, 101};
    for (size_t i = 0; i < sizeof unreachable / sizeof unreachable[0]; i++)
        T_EQ_INT(cli_exit_for_http(unreachable[i]), CLI_EXIT_UNREACHABLE);
    T_EQ_INT(cli_exit_for_outcome("succeeded"), CLI_EXIT_OK);
    T_EQ_INT(cli_exit_for_outcome("failed"), CLI_EXIT_FAILED);
    T_EQ_INT(cli_exit_for_outcome("cancelled"), CLI_EXIT_FAILED);
    T_EQ_INT(cli_exit_for_outcome("interrupted"), CLI_EXIT_FAILED);
    T_EQ_INT(cli_exit_for_outcome(NULL), CLI_EXIT_FAILED);
    T_EQ_INT(CLI_EXIT_USAGE, 2);
    T_EQ_INT(CLI_EXIT_REFUSED, 3);
    T_EQ_INT(CLI_EXIT_UNREACHABLE, 4);
}

/* `dataset`: everything after it is ddpbench-data's, options included, untouched. */
static void test_args_dataset(void)
{
    struct cli_args a;
    struct err e;
    char **conv = ARGV("dataset", "convert", "--name", "cifar10", "--to", "records");
    T_OK(parse(&a, &e, conv)); /* a.rest points into conv, which lives to the end */
    T_EQ_INT(a.cmd, CMD_DATASET);
    T_EQ_INT(a.nrest, 5);
    T_EQ_STR(a.rest[0], "convert");
    T_EQ_STR(a.rest[2], "cifar10");
    T_EQ_STR(a.rest[4], "records");
    /* --help and --json after it are its own; a global option before it is ours */
    T_OK(parse(&a, &e, ARGV("--timeout", "5", "dataset", "--help", "--json")));
    T_EQ_INT(a.cmd, CMD_DATASET);
    T_EQ_INT(a.nrest, 2);
    T_CHECK(!a.json);
    T_CHECK(parse(&a, &e, ARGV("dataset")) < 0);
    T_CHECK_MSG(strstr(e.msg, "subcommand"), "%s", e.msg);
    T_CHECK(parse(&a, &e, ARGV("--watch", "dataset", "convert")) < 0);
    /* "dataset" as a later word is not the command */
    T_CHECK(parse(&a, &e, ARGV("show", "dataset")) < 0);
}

static void test_usage_documents_everything(void)
{
    char buf[ARGS_USAGE_MAX];
    const char *u = args_usage(buf, sizeof buf);
    static const char *const words[] = {"submit",
                                        "ls",
                                        "show",
                                        "compare",
                                        "export",
                                        "cancel",
                                        "rm",
                                        "runs",
                                        "fit",
                                        "predict",
                                        "--link",
                                        "report",
                                        "dataset convert",
                                        "dataset verify",
                                        "--watch",
                                        "--json",
                                        "--csv",
                                        "--token-file",
                                        "DDPB_URL",
                                        "DDPB_TOKEN",
                                        "0  success",
                                        "1  the experiment",
                                        "2  usage",
                                        "3  the daemon refused",
                                        "4  the daemon cannot"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        T_CHECK_MSG(strstr(u, words[i]) != NULL, "usage lacks '%s'", words[i]);
    for (const char *p = u; *p; p++)
        T_CHECK((unsigned char)*p < 0x80);
    /* the lists come from common/vocab.h: every converted format and strategy is named */
    for (int i = 0; vocab_format(i); i++)
        if (vocab_format_converted(vocab_format(i)))
            T_CHECK_MSG(strstr(u, vocab_format(i)->name), "usage lacks %s",
                        vocab_format(i)->name);
    for (int i = 0; vocab_strategy(i); i++)
        T_CHECK_MSG(strstr(u, vocab_strategy(i)->name), "usage lacks %s",
                    vocab_strategy(i)->name);
    /* spec field transport with its values, as the vocabulary joins them */
    char transports[64], want[96];
    vocab_join(VOCAB_TRANSPORT, " or ", transports, sizeof transports);
    snprintf(want, sizeof want, "between ranks: %s)", transports);
    T_EQ_STR(transports, "auto, shm or tcp");
    T_CHECK_MSG(strstr(u, "transport") && strstr(u, want), "usage lacks '%s'", want);
    /* the fault kinds of `runs`, from the vocabulary */
    char kinds[64];
    vocab_join(VOCAB_FAULT, ", ", kinds, sizeof kinds);
    snprintf(want, sizeof want, "spec field faults: %s)", kinds);
    T_EQ_STR(kinds, "kill, stop, slow, link");
    T_CHECK_MSG(strstr(u, want), "usage lacks '%s'", want);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_args_submit);
    TEST_RUN(test_args_globals_anywhere);
    TEST_RUN(test_args_ls);
    TEST_RUN(test_args_id_commands);
    TEST_RUN(test_args_model_commands);
    TEST_RUN(test_args_help_and_version);
    TEST_RUN(test_args_usage_errors);
    TEST_RUN(test_args_too_many_ids);
    TEST_RUN(test_args_environment);
    TEST_RUN(test_args_dataset);
    TEST_RUN(test_exit_codes);
    TEST_RUN(test_usage_documents_everything);
    return test_end();
}
