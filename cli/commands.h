/* commands: one function per `ddpbench` command, each a short sequence of API calls
 * (client.h) and a rendering (view.h), returning the process's exit status.
 *
 * Decision: commands print only through the two streams in struct cli, and every failure
 * goes through one reporter that writes "ddpbench: ..." on the error stream and picks
 * the exit status from what failed (cli_exit_for_http), so the exit-code contract lives
 * in one place. With --json, stdout carries nothing but the API's JSON. */
#ifndef DDPB_CLI_COMMANDS_H
#define DDPB_CLI_COMMANDS_H

#include <stdio.h>

#include "cli/args.h"
#include "cli/client.h"

struct cli {
    struct cli_args args;
    struct client client;
    FILE *out; /* borrowed: results (stdout) */
    FILE *err; /* borrowed: messages (stderr) */
};

/* Runs cli->args.cmd against cli->client. Returns the exit status (enum cli_exit). */
int cmd_run(struct cli *cli);

#endif
