/* engines: which framework engines this node can run (issue 16), as engines/probe.py
 * finds them: per engine installed or not (with the reason and the install command),
 * version, whether this daemon launches it, and what it supports.
 *
 * Decision: the probe imports each framework in a child python3, which takes seconds
 * (TensorFlow's import alone is several), so it runs on first need, a GET /v1/engines or
 * a submit naming a framework engine, not at start-up where every daemon would pay it;
 * its answer is kept for the daemon's life (installing a framework means restarting the
 * daemon, as installing a library does). It runs on a thread of its own: a submit that
 * needs the answer waits for it, GET /v1/engines does not (it says "probing" meanwhile),
 * so no HTTP client is held for the seconds an import takes.
 *
 * Ownership: engines_create returns an owned handle (engines_destroy); engines_get
 * returns a new reference. Thread-safe. */
#ifndef DDPB_ENGINES_H
#define DDPB_ENGINES_H

#include <jansson.h>
#include <stdbool.h>

#include "common/err.h"
#include "daemon/config.h"

#define ENGINES_PROBE_TIMEOUT_S 180

struct engines;

/* Each engine row of a node's list ({"engines": [...]}, borrowed) gets how its engine
 * recovers a lost rank under the spec's "elastic", from the vocabulary's one table:
 * "elastic": {"mode": ..., "recovery": ...}. A follower's list as the leader serves it too. */
void engines_mark_elastic(json_t *all);

/* Borrows cfg (python, engines_dir), which must outlive the handle. NULL on ENOMEM. */
struct engines *engines_create(const struct config *cfg);
void engines_destroy(struct engines *en);
/* Kills a probe in flight (its caller then gets the fallback answer) and makes later
 * engines_get calls not probe: a daemon that is stopping does not wait for a Python import. */
void engines_cancel(struct engines *en);
/* {"node": N, "python": P, "probing": B, "engines": [...], "mpi": [...]} (new reference;
 * "mpi": mpi_probe_json, which the probe's thread runs first; [] while probing); the first
 * call
 * starts the probe. wait: until it finished; else, while it runs, probing true and an
 * empty list. A probe that cannot run answers ddpbench alone installed and every framework
 * with the probe's failure as its reason; NULL only on ENOMEM. */
json_t *engines_get(struct engines *en, bool wait, struct err *e);
/* 0 when the spec's engine runs on this node ("ddpbench" always does); else ERR_CONFLICT
 * naming "engine", the node, the reason and, for a framework not installed, the install
 * command. A framework engine must also have the spec's backend in this node's build of
 * it, which the probe tells (Horovod's MPI controller): else ERR_CONFLICT naming
 * "backend" with the probe's reason; and for backend mpi, the spec's mpi among the
 * implementations the build links (Horovod built against OpenMPI): else naming "mpi".
 * engine "script" also needs --scripts-dir and a script that resolves inside it
 * (engines_resolve_script). Borrows spec. */
int engines_check(struct engines *en, const json_t *spec, struct err *e);
/* The row of engine in a probe's "engines" list (borrowed), or NULL. */
json_t *engines_row(const json_t *list, const char *engine);
/* engines_check's verdict on one probe row (NULL: the node does not know the engine) for
 * the spec's engine, backend and mpi, for this node's probe and a follower's alike; node
 * names the node in the message. */
int engines_row_check(const json_t *row, const char *node, const json_t *spec, struct err *e);
/* A run's MPI, when it uses one (backend "mpi" or launcher "mpirun"): ERR_CONFLICT
 * naming "mpi" when its implementation is not available on this node (daemon/mpi_probe.h:
 * why and the install command); ERR_INVALID naming "mpi_mca.<key>" for a setting of the
 * other implementation or an OpenMPI parameter name this node's OpenMPI does not know.
 * spec is one run's, borrowed. */
int engines_mpi_check(struct engines *en, const json_t *spec, struct err *e);
/* The real path of script (relative to cfg->scripts_dir) into out (PATH_MAX bytes): 0, or
 * -1 with ERR_CONFLICT naming "engine" when the script engine is off, ERR_INVALID naming
 * "script" when script is empty, absolute, outside the directory (symbolic links and ".."
 * resolved), missing, or not a regular file. */
int engines_resolve_script(const struct config *cfg, const char *script, char *out,
                           struct err *e);

#endif
