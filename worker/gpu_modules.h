/* gpu_modules: the worker's GPU modules (module.h), each loaded only when a run's spec
 * asks for it: ddpb_cuda.so, the CUDA engine (device "cuda": train_cuda.c's training
 * engine over worker/nn/cuda/, and worker_gpu.c's device buffers for the collective
 * benchmark and GPU facts for the env report; with cuBLAS and cuDNN), loaded here, and
 * ddpb_comm_nccl.so, the NCCL communicator (backend "nccl": comm/nccl.c), which the
 * communicator factory loads (comm_factory_nccl_module). A CPU run maps neither, nor
 * any library they need.
 *
 * Decisions:
 * - Each module links the static CUDA runtime (libcudart_static.a), whose symbols are
 *   hidden, so each has its own copy: the worker links none. Two copies are what NCCL
 *   does itself (libnccl carries its own runtime and takes the program's streams): both
 *   run on the device's primary context, where streams, events and device pointers are
 *   the driver's and mean the same to either copy.
 * - Each module carries its own copy of the worker and common code it calls (linked
 *   from the static libraries), so it loads into any program (the unit tests); in
 *   ddpbench-worker, which exports its symbols, those calls bind to the worker's copy
 *   (one logger, one state), and a copy the worker lacks (nn/, ddp/: the training
 *   module's, train_module.h) binds to the first module loaded that has it.
 * - Whether a module exists is a fact of the installation, not of the binary: a build
 *   without CUDA has no module file, and the message names the meson options that build
 *   it; a build with CUDA names the module it lost and the packages its libraries come
 *   from.
 * - The NCCL pieces the CUDA engine's hooks need (the device time of a collective, the
 *   library version for the env report) are joined here, so neither module calls into
 *   the other.
 *
 * Ownership: the entries are borrowed for the life of the process (modules are never
 * closed). */
#ifndef DDPB_WORKER_GPU_MODULES_H
#define DDPB_WORKER_GPU_MODULES_H

#include <jansson.h>
#include <stddef.h>

#include "common/err.h"
#include "worker/comm/comm.h"
#include "worker/train_engine.h"
#include "worker/workload_collective.h"

/* ddpb_cuda.so's entry (symbol ddpb_module_cuda). */
struct gpu_module_cuda {
    int abi;                              /* MODULE_ABI */
    const struct train_engine_ops *train; /* NULL: the module was built without cuDNN */
    /* worker_gpu.h: device buffers (no device timing: gpu_modules_collective_mem adds
     * NCCL's) and the env report's GPU facts */
    void (*collective_mem)(struct collective_mem *out);
    void (*env_add)(json_t *env);
};

/* The CUDA engine, loaded on first use; NULL with e set (ERR_INVALID, field "device"),
 * naming ddpb_cuda.so and what builds or installs it. */
const struct gpu_module_cuda *gpu_module_cuda(struct err *e);
/* The CUDA training engine: gpu_module_cuda's, or NULL with e set (field "device") when
 * the module is missing or was built without cuDNN. */
const struct train_engine_ops *gpu_module_train(struct err *e);

/* Hooks for the collective benchmark's device buffers, timed by the NCCL communicator's
 * events; -1 with e set when a module is missing. */
int gpu_modules_collective_mem(struct collective_mem *out, struct err *e);
/* The env report of a rank on device "cuda": the CUDA engine's GPU facts and the loaded
 * NCCL's version, or "gpu" holding why the module is missing. */
void gpu_modules_env_add(json_t *env);

#endif
