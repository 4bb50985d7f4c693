/* module: the worker's loadable parts (each MPI implementation's communicator, NCCL, the
 * CUDA training engine, the training workload), opened only when a run's spec asks for
 * one, so a CPU run over TCP maps none of their libraries and starts without paying for
 * them.
 *
 * Decisions:
 * - A module is a shared object with one entry symbol, a const table of function pointers
 *   whose first member is its ABI version (MODULE_ABI): a module built from another tree
 *   is refused by version, not called into.
 * - Where modules are looked for, in order: the directory of the running program
 *   (/proc/self/exe: the build tree's worker/ and the GPU bundle keep them beside
 *   ddpbench-worker), the install directory (DDPB_MODULE_DIR, libdir/ddpbench), then the
 *   build tree's worker/ (DDPB_BUILD_MODULE_DIR: unit tests run from tests/), the last
 *   only for a program that lives inside that build tree: a copied, installed or bundled
 *   worker never picks up the modules of the tree it was built in.
 * - dlopen with RTLD_NOW | RTLD_GLOBAL: a missing symbol fails at open, naming the
 *   library, not in the middle of a run; and OpenMPI's own plugins, which it dlopens in
 *   MPI_Init, resolve libmpi's symbols only when libmpi is global.
 * - A module stays loaded for the life of the process (never dlclosed): MPI and CUDA keep
 *   threads and atexit handlers inside their libraries.
 * - A failure names the module and the Debian package (or build option) that provides
 *   what is missing, so the run's error says what to install. */
#ifndef DDPB_MODULE_H
#define DDPB_MODULE_H

#include "common/err.h"

/* Bumped when a module's entry table changes shape. */
#define MODULE_ABI 1

/* What a module provides, for the messages of module_load: its file name without the
 * directory ("ddpb_comm_mpi_openmpi.so"), its entry symbol, and what to install or
 * rebuild when it or a library it needs is missing. */
struct module_spec {
    const char *file;
    const char *symbol;
    const char *what;    /* "the OpenMPI communicator" */
    const char *install; /* "apt-get install openmpi-bin libopenmpi3" */
    const char *rebuild; /* "rebuild with libopenmpi-dev installed" */
    const char *field;   /* the spec field a failure names ("mpi", "backend"); NULL: none */
};

/* Loads the module (once per process; later calls return the same entry) and returns its
 * entry table, borrowed for the life of the process; NULL with e set (ERR_INVALID naming
 * m->field) when no directory has the file, the loader
 * refuses it (a library it needs is missing: the message says which and the install
 * command), the symbol is absent or the ABI version differs. */
const void *module_load(const struct module_spec *m, struct err *e);

/* The path module_load would open for file (the first directory holding it) into out;
 * 0, or -1 when none has it. For GET /v1/engines-style reports and tests. */
int module_find(const char *file, char *out, size_t cap);

#endif
