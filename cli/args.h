/* args: the `ddpbench` command line, parsed into one struct without touching the network,
 * the environment or any file (so every case is a unit test).
 *
 * Decision: a hand-written parser over one option table instead of getopt_long: options
 * may come before or after the command (`ddpbench ls --json` and `ddpbench --json ls`),
 * each option names the commands it belongs to, and there is no global parser state to
 * reset between calls. Every mistake is a usage error (exit status 2) naming the word. */
#ifndef DDPB_CLI_ARGS_H
#define DDPB_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define ARGS_DEFAULT_URL "http://127.0.0.1:7480"
#define ARGS_DEFAULT_TIMEOUT_S 30.0
#define ARGS_MAX_IDS 32

enum args_cmd {
    CMD_NONE = 0,
    CMD_HELP,
    CMD_VERSION,
    CMD_SUBMIT,
    CMD_LS,
    CMD_SHOW,
    CMD_COMPARE,
    CMD_EXPORT,
    CMD_CANCEL,
    CMD_RM,
    CMD_RUNS,
    CMD_NODES,
    CMD_TRACE,
    CMD_FIT,
    CMD_PREDICT,
    CMD_REPORT,
    CMD_DATASET, /* run locally: ddpbench-data with the words after "dataset" */
};

/* Every string is borrowed from argv (or from the environment in args_apply_env). */
struct cli_args {
    /* global */
    const char *url;
    const char *token;
    const char *token_file;
    const char *ca; /* PEM CA file an https:// daemon must present (--ca, $DDPB_CA) */
    bool json;
    double timeout_s;
    enum args_cmd cmd;
    /* positional */
    const char *spec_path; /* submit: a file or "-" for stdin */
    int64_t ids[ARGS_MAX_IDS];
    size_t nids;
    /* command options */
    bool watch;                                        /* submit */
    bool csv;                                          /* export */
    bool run;                                          /* cancel: the id is a run's */
    bool wait;                                         /* cancel: wait until nothing is live */
    const char *status, *name, *workload, *model;      /* ls filters, NULL when not given */
    int64_t limit, offset;                             /* ls; -1 when not given */
    const char *group_by;                              /* show, compare, export */
    const char *output;                                /* export, trace, report -o */
    const char *fit, *link, *world_sizes, *strategies; /* predict */
    const char *nodes, *network_profile, *pred_max_world; /* predict: one value each */
    /* dataset: every word after it, untouched (they are ddpbench-data's arguments) */
    char **rest;
    int nrest;
};

/* Parses argv[1..argc). Returns 0, or -1 with e (ERR_INVALID) saying what is wrong. */
int args_parse(struct cli_args *a, int argc, char **argv, struct err *e);
/* Fills url, token and ca from the environment's values (DDPB_URL, DDPB_TOKEN, DDPB_CA;
 * NULL when unset) where the command line gave none; an explicit --token-file wins over
 * DDPB_TOKEN. */
void args_apply_env(struct cli_args *a, const char *env_url, const char *env_token,
                    const char *env_ca);
/* The --help text into buf (n bytes; ARGS_USAGE_MAX holds it), its vocabulary lists taken
 * from common/vocab.h. Returns buf. */
#define ARGS_USAGE_MAX 8192
char *args_usage(char *buf, size_t n);
const char *args_cmd_name(enum args_cmd cmd);

#endif
