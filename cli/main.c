/* ddpbench: the command-line client of ddpbenchd. Everything it does is one or a few
 * calls of the REST API (api/openapi.yaml); `ddpbench --help` lists the commands. The one
 * exception, `ddpbench dataset ...`, works on local files: it execs ddpbench-data (which
 * links the worker's data code, which this program may not), whose exit status it is.
 *
 * Exit status, which scripts may rely on:
 *   0  success (for `submit --watch`: the experiment succeeded)
 *   1  the experiment or run ended failed, cancelled or interrupted
 *   2  usage error: a bad command line, an unreadable spec, token or output file
 *   3  the daemon refused the request (HTTP 4xx); its message and field are on stderr
 *   4  the daemon cannot be reached, answered 5xx, or did not answer in time
 *
 * Decision: main only assembles the inputs (argv, DDPB_URL, DDPB_TOKEN, DDPB_CA, the token
 * file)
 * and hands them to cmd_run; no command logic lives here. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "ddpb_config.h"

/* The token file's first line, trailing whitespace removed, into out. 0 or -1. */
static int main_read_token(const char *path, char *out, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "ddpbench: cannot open token file %s: %s\n", path, strerror(errno));
        return -1;
    }
    bool got = fgets(out, (int)cap, f) != NULL;
    fclose(f);
    size_t n = got ? strlen(out) : 0;
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r' || out[n - 1] == ' ' ||
                     out[n - 1] == '\t'))
        out[--n] = '\0';
    if (n == 0) {
        fprintf(stderr, "ddpbench: token file %s is empty\n", path);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct cli cli = {.out = stdout, .err = stderr};
    struct err e = {0};
    if (args_parse(&cli.args, argc, argv, &e) < 0) {
        fprintf(stderr, "ddpbench: %s\n(ddpbench --help lists commands and options)\n", e.msg);
        return CLI_EXIT_USAGE;
    }
    if (cli.args.cmd == CMD_HELP) {
        char usage[ARGS_USAGE_MAX];
        fputs(args_usage(usage, sizeof usage), stdout);
        return CLI_EXIT_OK;
    }
    if (cli.args.cmd == CMD_VERSION) {
        printf("ddpbench %s\n", DDPB_VERSION);
        return CLI_EXIT_OK;
    }
    if (cli.args.cmd == CMD_DATASET) /* runs here: no daemon, so no client */
        return cmd_run(&cli);
    args_apply_env(&cli.args, getenv("DDPB_URL"), getenv("DDPB_TOKEN"), getenv("DDPB_CA"));
    char token[1024]; /* lives as long as cli, which borrows it */
    if (!cli.args.token && cli.args.token_file) {
        if (main_read_token(cli.args.token_file, token, sizeof token) < 0)
            return CLI_EXIT_USAGE;
        cli.args.token = token;
    }
    if (client_init(&cli.client, cli.args.url, cli.args.token, cli.args.timeout_s, &e) < 0) {
        fprintf(stderr, "ddpbench: %s\n", e.msg);
        client_cleanup(&cli.client);
        return e.code == ERR_INVALID ? CLI_EXIT_USAGE : CLI_EXIT_UNREACHABLE;
    }
    if (cli.args.ca && client_set_ca(&cli.client, cli.args.ca, &e) < 0) {
        fprintf(stderr, "ddpbench: %s\n", e.msg);
        client_cleanup(&cli.client);
        return CLI_EXIT_USAGE;
    }
    int rc = cmd_run(&cli);
    client_cleanup(&cli.client);
    return rc;
}
