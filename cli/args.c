/* args: see args.h. Each option is one row of args_opts naming the commands that accept it
 * (0 = every command); the parser records what it saw and checks it against the command
 * once the whole line has been read, since the command may come after its options. */
#include "cli/args.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/vocab.h"

enum args_opt_id {
    O_URL,
    O_TOKEN,
    O_TOKEN_FILE,
    O_CA,
    O_JSON,
    O_TIMEOUT,
    O_HELP,
    O_VERSION,
    O_WATCH,
    O_STATUS,
    O_NAME,
    O_WORKLOAD,
    O_MODEL,
    O_LIMIT,
    O_OFFSET,
    O_GROUP_BY,
    O_CSV,
    O_OUTPUT,
    O_RUN,
    O_WAIT,
    O_FIT,
    O_LINK,
    O_WORLD_SIZES,
    O_STRATEGIES,
    O_NODES,
    O_NETWORK_PROFILE,
    O_PRED_MAX_WORLD,
};

#define ON(cmd) (1u << (cmd))

struct args_opt {
    const char *name;
    char short_name;
    bool takes_value;
    unsigned cmds; /* ON(...) bits of the commands that accept it; 0 = all */
    enum args_opt_id id;
};

static const struct args_opt args_opts[] = {
    {"url", 0, true, 0, O_URL},
    {"token", 0, true, 0, O_TOKEN},
    {"token-file", 0, true, 0, O_TOKEN_FILE},
    {"ca", 0, true, 0, O_CA},
    {"json", 0, false, 0, O_JSON},
    {"timeout", 0, true, 0, O_TIMEOUT},
    {"help", 'h', false, 0, O_HELP},
    {"version", 'V', false, 0, O_VERSION},
    {"watch", 'w', false, ON(CMD_SUBMIT), O_WATCH},
    {"status", 0, true, ON(CMD_LS), O_STATUS},
    {"name", 0, true, ON(CMD_LS), O_NAME},
    {"workload", 0, true, ON(CMD_LS), O_WORKLOAD},
    {"model", 0, true, ON(CMD_LS), O_MODEL},
    {"limit", 'n', true, ON(CMD_LS), O_LIMIT},
    {"offset", 0, true, ON(CMD_LS), O_OFFSET},
    {"group-by", 'g', true, ON(CMD_SHOW) | ON(CMD_COMPARE) | ON(CMD_EXPORT), O_GROUP_BY},
    {"csv", 0, false, ON(CMD_EXPORT), O_CSV},
    {"output", 'o', true, ON(CMD_EXPORT) | ON(CMD_TRACE) | ON(CMD_REPORT), O_OUTPUT},
    {"run", 0, false, ON(CMD_CANCEL) | ON(CMD_PREDICT), O_RUN},
    {"fit", 0, true, ON(CMD_PREDICT), O_FIT},
    {"link", 0, true, ON(CMD_PREDICT), O_LINK},
    {"world-sizes", 0, true, ON(CMD_PREDICT), O_WORLD_SIZES},
    {"strategies", 0, true, ON(CMD_PREDICT), O_STRATEGIES},
    {"nodes", 0, true, ON(CMD_PREDICT), O_NODES},
    {"network-profile", 0, true, ON(CMD_PREDICT), O_NETWORK_PROFILE},
    {"pred-max-world", 0, true, ON(CMD_PREDICT), O_PRED_MAX_WORLD},
    {"wait", 0, false, ON(CMD_CANCEL), O_WAIT},
};

static const struct {
    const char *name;
    enum args_cmd cmd;
} args_cmds[] = {
    {"submit", CMD_SUBMIT},   {"ls", CMD_LS},           {"list", CMD_LS},
    {"show", CMD_SHOW},       {"compare", CMD_COMPARE}, {"export", CMD_EXPORT},
    {"cancel", CMD_CANCEL},   {"rm", CMD_RM},           {"delete", CMD_RM},
    {"runs", CMD_RUNS},       {"run", CMD_RUNS},        {"help", CMD_HELP},
    {"version", CMD_VERSION}, {"nodes", CMD_NODES},     {"trace", CMD_TRACE},
    {"fit", CMD_FIT},         {"predict", CMD_PREDICT}, {"report", CMD_REPORT},
    {"dataset", CMD_DATASET},
};

#define ARGS_MAX_SEEN 64
#define ARGS_MAX_POS (ARGS_MAX_IDS + 2)

struct args_state {
    const struct args_opt *seen[ARGS_MAX_SEEN];
    const char *seen_as[ARGS_MAX_SEEN]; /* the word as typed, for messages */
    size_t nseen;
    const char *pos[ARGS_MAX_POS];
    size_t npos;
};

const char *args_cmd_name(enum args_cmd cmd)
{
    for (size_t i = 0; i < sizeof args_cmds / sizeof args_cmds[0]; i++)
        if (args_cmds[i].cmd == cmd)
            return args_cmds[i].name;
    return "";
}

static int args_parse_int(const char *word, const char *s, int64_t min, int64_t *out,
                          struct err *e)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!isdigit((unsigned char)s[0]) || *end || errno || v < min)
        return err_set(e, ERR_INVALID, word, "%s: '%s' is not an integer >= %lld", word, s,
                       (long long)min);
    *out = v;
    return 0;
}

static int args_parse_seconds(const char *s, double *out, struct err *e)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v <= 0 || v > 7 * 86400)
        return err_set(e, ERR_INVALID, "--timeout",
                       "--timeout: '%s' is not a number of seconds in (0, 604800]", s);
    *out = v;
    return 0;
}

static int args_set_value(struct cli_args *a, const struct args_opt *o, const char *v,
                          struct err *e)
{
    switch (o->id) {
    case O_URL:
        if (strncmp(v, "http://", 7) != 0 && strncmp(v, "https://", 8) != 0)
            return err_set(e, ERR_INVALID, "--url",
                           "--url: '%s' is not an http:// or "
                           "https:// URL",
                           v);
        a->url = v;
        return 0;
    case O_TOKEN: a->token = v; return 0;
    case O_TOKEN_FILE: a->token_file = v; return 0;
    case O_CA: a->ca = v; return 0;
    case O_TIMEOUT: return args_parse_seconds(v, &a->timeout_s, e);
    case O_STATUS: a->status = v; return 0;
    case O_NAME: a->name = v; return 0;
    case O_WORKLOAD: a->workload = v; return 0;
    case O_MODEL: a->model = v; return 0;
    case O_LIMIT: return args_parse_int("--limit", v, 1, &a->limit, e);
    case O_OFFSET: return args_parse_int("--offset", v, 0, &a->offset, e);
    case O_GROUP_BY: a->group_by = v; return 0;
    case O_OUTPUT: a->output = v; return 0;
    case O_FIT: a->fit = v; return 0;
    case O_LINK: a->link = v; return 0;
    case O_WORLD_SIZES: a->world_sizes = v; return 0;
    case O_STRATEGIES: a->strategies = v; return 0;
    case O_NODES: a->nodes = v; return 0;
    case O_NETWORK_PROFILE: a->network_profile = v; return 0;
    case O_PRED_MAX_WORLD: a->pred_max_world = v; return 0;
    default: return err_set(e, ERR_INTERNAL, NULL, "option without a value handled as one");
    }
}

static void args_set_flag(struct cli_args *a, const struct args_opt *o, bool *help,
                          bool *version)
{
    switch (o->id) {
    case O_JSON: a->json = true; break;
    case O_HELP: *help = true; break;
    case O_VERSION: *version = true; break;
    case O_WATCH: a->watch = true; break;
    case O_CSV: a->csv = true; break;
    case O_RUN: a->run = true; break;
    case O_WAIT: a->wait = true; break;
    default: break;
    }
}

/* The option a word names: "--name", "--name=value" (*inline_value set) or "-x". */
static const struct args_opt *args_find(const char *word, const char **inline_value)
{
    *inline_value = NULL;
    for (size_t i = 0; i < sizeof args_opts / sizeof args_opts[0]; i++) {
        const struct args_opt *o = &args_opts[i];
        if (word[1] != '-') {
            if (o->short_name && word[1] == o->short_name && word[2] == '\0')
                return o;
            continue;
        }
        size_t n = strlen(o->name);
        if (strncmp(word + 2, o->name, n) != 0)
            continue;
        if (word[2 + n] == '\0')
            return o;
        if (word[2 + n] == '=' && o->takes_value) {
            *inline_value = word + 3 + n;
            return o;
        }
    }
    return NULL;
}

struct args_flags {
    bool help, version;
};

/* One option word (and its value, *i advanced past it). */
static int args_take_option(struct cli_args *a, struct args_state *st, struct args_flags *f,
                            int argc, char **argv, int *i, struct err *e)
{
    const char *word = argv[*i], *value;
    const struct args_opt *o = args_find(word, &value);
    if (!o)
        return err_set(e, ERR_INVALID, word, "unknown option '%s'", word);
    if (st->nseen == ARGS_MAX_SEEN)
        return err_set(e, ERR_INVALID, word, "too many options");
    st->seen[st->nseen] = o;
    st->seen_as[st->nseen++] = word;
    if (!o->takes_value) {
        args_set_flag(a, o, &f->help, &f->version);
        return 0;
    }
    if (!value) {
        if (*i + 1 >= argc)
            return err_set(e, ERR_INVALID, word, "option '%s' needs a value", word);
        value = argv[++*i];
    }
    return args_set_value(a, o, value, e);
}

static int args_scan(struct cli_args *a, struct args_state *st, struct args_flags *f, int argc,
                     char **argv, struct err *e)
{
    bool only_positional = false;
    for (int i = 1; i < argc; i++) {
        const char *w = argv[i];
        if (!only_positional && strcmp(w, "--") == 0) {
            only_positional = true;
        } else if (!only_positional && w[0] == '-' && w[1] != '\0') {
            if (args_take_option(a, st, f, argc, argv, &i, e) < 0)
                return -1;
        } else if (st->npos == ARGS_MAX_POS) {
            return err_set(e, ERR_INVALID, w, "too many arguments (at most %d ids)",
                           ARGS_MAX_IDS);
        } else {
            st->pos[st->npos++] = w;
            if (st->npos == 1 && strcmp(w, "dataset") == 0) {
                /* the rest is ddpbench-data's command line, options included */
                a->rest = argv + i + 1;
                a->nrest = argc - i - 1;
                return 0;
            }
        }
    }
    return 0;
}

static int args_check_options(const struct cli_args *a, const struct args_state *st,
                              struct err *e)
{
    for (size_t i = 0; i < st->nseen; i++)
        if (st->seen[i]->cmds && !(st->seen[i]->cmds & ON(a->cmd)))
            return err_set(e, ERR_INVALID, st->seen_as[i],
                           "option '%s' does not apply to "
                           "'%s'",
                           st->seen_as[i], args_cmd_name(a->cmd));
    return 0;
}

/* Positional words after the command: ids (all of them numbers >= 1), or a spec path. */
static int args_positionals(struct cli_args *a, const struct args_state *st, size_t min,
                            size_t max, struct err *e)
{
    const char *cmd = args_cmd_name(a->cmd);
    size_t n = st->npos - 1;
    if (n < min || n > max) {
        if (min == max)
            return err_set(e, ERR_INVALID, cmd, "'%s' takes %zu argument%s, got %zu", cmd, min,
                           min == 1 ? "" : "s", n);
        return err_set(e, ERR_INVALID, cmd, "'%s' takes %zu to %zu arguments, got %zu", cmd,
                       min, max, n);
    }
    if (a->cmd == CMD_SUBMIT) {
        a->spec_path = st->pos[1];
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (args_parse_int("id", st->pos[1 + i], 1, &a->ids[i], e) < 0)
            return err_set(e, ERR_INVALID, "id", "'%s' is not an id (an integer >= 1)",
                           st->pos[1 + i]);
        a->nids++;
    }
    return 0;
}

static int args_check_command(struct cli_args *a, const struct args_state *st, struct err *e)
{
    switch (a->cmd) {
    case CMD_SUBMIT: return args_positionals(a, st, 1, 1, e);
    case CMD_LS: return args_positionals(a, st, 0, 0, e);
    case CMD_COMPARE: return args_positionals(a, st, 1, ARGS_MAX_IDS, e);
    case CMD_EXPORT:
        if (a->csv == a->json)
            return err_set(e, ERR_INVALID, "export",
                           "'export' needs exactly one of --csv "
                           "and --json");
        return args_positionals(a, st, 1, 1, e);
    case CMD_CANCEL:
    case CMD_SHOW:
    case CMD_RM:
    case CMD_RUNS:
    case CMD_TRACE:
    case CMD_PREDICT: return args_positionals(a, st, 1, 1, e);
    case CMD_FIT:
    case CMD_REPORT: return args_positionals(a, st, 1, 16, e);
    case CMD_NODES: return args_positionals(a, st, 0, 0, e);
    case CMD_DATASET:
        if (a->nrest == 0)
            return err_set(e, ERR_INVALID, "dataset",
                           "'dataset' needs a subcommand (convert, verify)");
        return 0;
    default: return 0;
    }
}

static enum args_cmd args_lookup_cmd(const char *word)
{
    for (size_t i = 0; i < sizeof args_cmds / sizeof args_cmds[0]; i++)
        if (strcmp(args_cmds[i].name, word) == 0)
            return args_cmds[i].cmd;
    return CMD_NONE;
}

int args_parse(struct cli_args *a, int argc, char **argv, struct err *e)
{
    memset(a, 0, sizeof *a);
    a->timeout_s = ARGS_DEFAULT_TIMEOUT_S;
    a->limit = a->offset = -1;
    struct args_state st = {0};
    struct args_flags f = {0};
    if (args_scan(a, &st, &f, argc, argv, e) < 0)
        return -1;
    if (st.npos > 0 && (a->cmd = args_lookup_cmd(st.pos[0])) == CMD_NONE)
        return err_set(e, ERR_INVALID, st.pos[0], "unknown command '%s'", st.pos[0]);
    if (f.help || a->cmd == CMD_HELP) {
        a->cmd = CMD_HELP;
        return 0;
    }
    if (f.version || a->cmd == CMD_VERSION) {
        a->cmd = CMD_VERSION;
        return 0;
    }
    if (a->cmd == CMD_NONE)
        return err_set(e, ERR_INVALID, NULL, "no command given");
    if (args_check_options(a, &st, e) < 0)
        return -1;
    return args_check_command(a, &st, e);
}

void args_apply_env(struct cli_args *a, const char *env_url, const char *env_token,
                    const char *env_ca)
{
    if (!a->ca && env_ca && *env_ca)
        a->ca = env_ca;
    if (!a->url)
        a->url = env_url && *env_url ? env_url : ARGS_DEFAULT_URL;
    if (!a->token && !a->token_file && env_token && *env_token)
        a->token = env_token;
}

/* The --help text with "%s" where vocabulary lists go: transports, fault kinds, strategies,
 * converted formats. */
static const char args_usage_fmt[] =
    "usage: ddpbench [--url URL] [--token T | --token-file F] [--ca FILE] [--json]\n"
    "                [--timeout S] COMMAND [ARGS]\n"
    "\n"
    "Commands:\n"
    "  submit SPEC.json|- [--watch]   submit an experiment; prints its id. --watch follows\n"
    "                                 it live and prints its results when it ends\n"
    "  ls [--status S] [--name N] [--workload W] [--model M] [--limit N] [--offset N]\n"
    "                                 list experiments, newest first\n"
    "  show ID [--group-by F,...]     an experiment, its runs and its results; F: spec\n"
    "                                 fields (default: the swept ones), e.g. backend or\n"
    "                                 transport (backend tcp's path between ranks: %s)\n"
    "  compare ID [ID...] [--group-by F,...]\n"
    "                                 results of several experiments in one table\n"
    "  export ID --csv|--json [--group-by F,...] [-o FILE]\n"
    "                                 the results table as CSV (byte for byte as the\n"
    "                                 daemon sends it) or JSON\n"
    "  cancel ID [--wait]             cancel an experiment's unfinished runs\n"
    "  cancel --run ID [--wait]       cancel one run\n"
    "  rm ID                          delete an experiment and its data\n"
    "  runs ID                        one run: ranks, memory, usage, results and its\n"
    "                                 faults (spec field faults: %s)\n"
    "  trace ID [-o FILE]             one run's timeline as Chrome trace-event JSON\n"
    "                                 (open it in Perfetto or chrome://tracing)\n"
    "  nodes                          the cluster's nodes: role, state, slots\n"
    "  fit ID [ID...]                 latency-bandwidth fits of collective experiments\n"
    "  predict ID [--run] [--fit ID,...] [--link GBPS,US] [--world-sizes N,...]\n"
    "          [--strategies S,...]   what-if scaling from a training experiment's one-rank\n"
    "          [--nodes N] [--network-profile P] [--pred-max-world K]\n"
    "                                 (S: %s)\n"
    "                                 runs (--run: ID is one run) with the fits of the\n"
    "                                 collective experiments named (default: the latest)\n"
    "                                 or a link of GBPS Gbit/s and US microseconds; ranks\n"
    "                                 over N nodes under profile P; only fits of at most K\n"
    "                                 ranks (the extrapolation check)\n"
    "  report ID [ID...] [-o FILE]    one self-contained HTML report of the experiments\n"
    "  dataset convert --name NAME --path DIR [--from FORMAT] --to FORMAT [--out ROOT]\n"
    "          [--quality Q] [--level L] [--shard-mb M]\n"
    "                                 write a dataset's splits into ROOT/FORMAT/\n"
    "                                 (FORMAT: %s);\n"
    "                                 runs here, not on the daemon, through ddpbench-data\n"
    "                                 (beside ddpbench or on PATH), which exits 0 done,\n"
    "                                 1 failed, 2 usage (ddpbench dataset --help)\n"
    "  dataset verify --name NAME --path DIR --format FORMAT [--against FORMAT]\n"
    "                                 read every sample back, compare with another format\n"
    "\n"
    "Options:\n"
    "  --url URL        the daemon (default: $DDPB_URL, else " ARGS_DEFAULT_URL ")\n"
    "  --token T        bearer token sent with mutations (else --token-file F, else\n"
    "                   $DDPB_TOKEN)\n"
    "  --ca FILE        the PEM CA (or certificate) an https:// daemon must present\n"
    "                   (default: $DDPB_CA, else the system's CA store)\n"
    "  --json           print the API's JSON instead of tables (show: {experiment,\n"
    "                   results}; compare: an array of result tables)\n"
    "  --timeout S      seconds allowed per request (default 30); submit --watch\n"
    "                   gives up when the daemon is unreachable that long\n"
    "\n"
    "Exit status:\n"
    "  0  success (submit --watch: the experiment succeeded)\n"
    "  1  the experiment or run ended failed, cancelled or interrupted\n"
    "  2  usage error (bad command line, unreadable spec or token file)\n"
    "  3  the daemon refused the request (4xx); its message and field on stderr\n"
    "  4  the daemon cannot be reached, answered 5xx, or timed out\n";

char *args_usage(char *buf, size_t n)
{
    char transports[64], faults[64], strategies[128], formats[160];
    vocab_join(VOCAB_TRANSPORT, " or ", transports, sizeof transports);
    vocab_join(VOCAB_FAULT, ", ", faults, sizeof faults);
    vocab_join(VOCAB_STRATEGY, ", ", strategies, sizeof strategies);
    vocab_format_join(vocab_format_converted, ", ", formats, sizeof formats);
    snprintf(buf, n, args_usage_fmt, transports, faults, strategies, formats);
    return buf;
}
