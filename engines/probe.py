#!/usr/bin/env python3
"""probe: which framework engines this node can run, as JSON on stdout (for GET /v1/engines).

Each framework is imported in a child python3 with a time limit (the children side by
side), so a broken or slow install (torch's import can take seconds, a CUDA probe can
hang) is reported as not installed with the reason instead of stalling the caller. The engines, their modules and
adapters are schema/vocabulary.json's (ddpb_vocab); what each engine supports is the table
below, kept equal to common/spec_table.c's spec_rules for the engine (checked by
tests/integration/test_engines.py, which also checks it names every engine); an engine the daemon does not launch yet says so in
"launched". Some backends depend on how this node's framework was built, so the child
also asks the framework (BACKEND_PROBES): a backend it lacks leaves the engine's
"backends" and is listed in "backends_not_available" with the reason. Output:
{"engines": [{name, installed, version, reason, launched, strategies, backends,
backends_not_available, mpis, devices, precisions}, ...]}; mpis, for a framework whose
build has backend mpi, is the MPI implementation its library is (Horovod linked against
OpenMPI runs under OpenMPI's mpirun only)."""
import concurrent.futures
import ctypes
import json
import os
import subprocess
import sys

TIMEOUT_S = 60
INSTALL = "install with deploy/install-deps.sh --engines"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ddpb_vocab  # noqa: E402  (schema/vocabulary.json)

# The step figures each engine cannot observe (null in its runs' steps), with the reason:
# the one table, which the adapters report in their env event and GET /v1/engines serves.
NOT_OBSERVED = {
    "pytorch": {"bytes_sent": "gloo and NCCL do not report the bytes their allreduce "
                              "algorithms send"},
    "tensorflow": {
        "forward_ms": "one tf.function runs forward, backward, the all-reduce and the update "
                      "as one graph",
        "backward_ms": "as forward_ms", "optimizer_ms": "as forward_ms",
        "comm_ms": "the strategy's collectives run inside the graph, with no hook to time them",
        "comm_exposed_ms": "as comm_ms", "bytes_sent": "TensorFlow does not report it"},
    "horovod": {"comm_ms": "Horovod's allreduces run on its background thread; only the wait "
                           "in synchronize() is observable (comm_exposed_ms)",
                "bytes_sent": "Horovod does not report it"},
    "deepspeed": {"bytes_sent": "DeepSpeed does not report it"},
    "lightning": {"bytes_sent": "gloo does not report the bytes its allreduce algorithms "
                                "send"},
}
# What each framework engine cannot tell of its memory and usage (report "memory" and
# "usage", served null), of the trace (GET /v1/runs/{id}/trace: "trace" when it sends none,
# "trace_comm" when its traced steps have the loop's phases but no collective) and of
# gradient readiness ("gradient_readiness": no "grads" line, so the step model cannot
# predict its runs); the C engine tells everything. pytorch and horovod send the trace
# and readiness, deepspeed and lightning the readiness (engines/ddpb_observe.py).
_FRAMEWORK_MEMORY = {
    "comm_bytes": "the framework's collectives allocate their buffers internally",
    "activations_bytes": "the framework allocates activations per step, with no arena to "
                         "measure"}
MEMORY_NOT_OBSERVED = {
    # device cuda: device_peak_bytes is torch.cuda.max_memory_allocated; NVML is not sampled
    "pytorch": dict(_FRAMEWORK_MEMORY, **{
        k: "the Python engines sample no NVML (ddpbench's C worker does); device memory is "
           "device_peak_bytes" for k in ("gpu_util_pct", "gpu_mem_util_pct", "gpu_power_w")}),
    "horovod": _FRAMEWORK_MEMORY,
    "deepspeed": dict(_FRAMEWORK_MEMORY, grads_bytes="ZeRO moves the reduced gradients into "
                      "its own flat partitions (null when no parameter holds one)",
                      trace_comm="its timers give the gradient reduction's length "
                                 "(comm_ms), not when it ran, and it has no per-bucket hook: "
                                 "the traced steps have the loop's phases only"),
    "tensorflow": dict(_FRAMEWORK_MEMORY, grads_bytes="Keras keeps no gradient between steps",
                       trace="one tf.function runs the whole step: the engine sends no "
                             "traced steps (use TensorFlow's own profiler)",
                       gradient_readiness="the gradients exist only inside the step's graph"),
    "lightning": dict(_FRAMEWORK_MEMORY,
                      trace="Lightning's Trainer runs the loop: the adapter times its phases "
                            "by callbacks but sends no traced steps"),
}
# What the step model simulates of each engine's exchange (issue 35; docs/model.md "The
# framework engines"), served as "model_simulates": a results row of a multi-rank run has
# pred_* from it, or a pred_note saying why not.
MODEL_SIMULATES = {
    "ddpbench": "each strategy's own buckets and schedule, as the C worker runs them, over "
                "the fits of the spec's backend",
    "pytorch": "ddp: DistributedDataParallel's buckets in readiness order (1 MiB first, "
               "then bucket_mb), each allreduce launched at its last gradient, one at a time; "
               "zero1: the same, then ZeroRedundancyOptimizer's broadcast of every parameter "
               "after a step on 1/N; over the gloo fits (a collective on engine pytorch)",
    "lightning": "DDPStrategy's DistributedDataParallel, as engine pytorch's ddp, over the "
                 "gloo fits",
    "horovod": "DistributedOptimizer's tensor fusion: tensors ready in one cycle (cycle_ms) "
               "fused up to fusion_mb, each fused allreduce launched at its cycle's end, over "
               "the gloo fits (framework torch; keras sends no readiness)",
    "deepspeed": "ZeRO 1 and 2 with overlap_comm off: reduce buckets of bucket_mb "
                 "all-reduced after backward, the step on 1/N, then the updated partitions' "
                 "all_gather, over the gloo fits",
    "tensorflow": "nothing: one tf.function runs the step's forward, backward, all-reduce and "
                  "update, with no gradient readiness (pred_note says so)",
    "script": "nothing: the operator's script exchanges as it will (pred_note says so)",
}
# The data columns of the step lines (issue 34: data_ms, loader_cpu_ms, read_bytes; the
# results' data_fraction, input_bound, loader_cpu_ms, read_mbps) an engine cannot observe,
# with why: served as "data_not_observed". One function, extended per framework family.
TORCH_ENGINES = ("pytorch", "horovod", "deepspeed", "lightning")
_NO_MOUNT = ("counted by the ddpbench-fs mount the rank reads through (its stats file): a run "
             "without one (dataset.storage local under storage_layer auto) reports none, nor "
             "does format native, read whole before the first step")
_TORCH_DATA = {
    "loader_cpu_ms": "format native (and synthetic) is in memory as arrays, with no loader "
                     "process to time: only the converted formats' DataLoader workers are",
    "read_bytes": _NO_MOUNT}


# The TensorFlow engines (tensorflow; horovod's framework keras): ddpb_tf_data's pipelines
_TF_LOADER_CPU = ("tf.data (and Keras' image_dataset_from_directory) runs its map and "
                  "prefetch in unnamed threads of the rank's own process, beside the model's "
                  "intra-op threads, so their CPU cannot be told apart in a training step: "
                  "reported in loader_only runs only, as the process' CPU over the step (the "
                  "pipeline is all that runs)")


def data_not_observed(name):
    """{column: reason} for engine name's data columns that some of its runs leave out."""
    out = {}
    if name in TORCH_ENGINES:  # horovod's keras front end reads through ddpb_keras_loop
        out.update(_TORCH_DATA)
    if name == "tensorflow":
        out.update(loader_cpu_ms=_TF_LOADER_CPU, read_bytes=_NO_MOUNT)
    if name == "horovod":
        out["loader_cpu_ms"] += "; framework keras: " + _TF_LOADER_CPU
    return out


# a process per rank: every strategy but the frameworks' single-process ones (mirrored, dp)
PER_PROCESS = [s["name"] for s in ddpb_vocab.VOCABULARY["strategies"] if not s["single_process"]]
BACKENDS = ddpb_vocab.names("backends")
# the spec's framework values of the torch engines: torch is what they are (issue 33)
TORCH_FRONT = ["auto", "torch"]
# What each engine of schema/vocabulary.json supports, in the order GET /v1/engines lists
# them (the module each imports for its version and its adapter are the vocabulary's).
# backends use ddpbench's names (tcp on the CPU = gloo for torch, nccl on cuda).
CAPS = {
    "ddpbench": {"strategies": PER_PROCESS, "backends": BACKENDS,
                 "frameworks": ["auto"],
                 "devices": ["cpu", "cuda"], "precisions": ["fp32", "fp16", "bf16"],
                 "compressions": ["none", "fp16", "bf16"]},
    "pytorch": {"strategies": ["ddp", "zero1", "dp"], "backends": ["tcp", "nccl"],
                "frameworks": TORCH_FRONT,
                "devices": ["cpu", "cuda"], "precisions": ["fp32", "bf16", "fp16"],
                "compressions": ["none", "fp16", "bf16"]},
    "tensorflow": {"strategies": ["ddp", "mirrored"], "backends": ["tcp"], "devices": ["cpu"],
                   "frameworks": ["auto"],
                   "precisions": ["fp32", "bf16"], "compressions": ["none"]},
    "horovod": {"strategies": ["horovod"], "backends": ["tcp", "mpi"], "devices": ["cpu"],
                "frameworks": ["auto", "torch", "keras"],
                "precisions": ["fp32", "bf16"], "compressions": ["none", "fp16"]},
    "deepspeed": {"strategies": ["zero1", "zero2"], "backends": ["tcp"], "devices": ["cpu"],
                  "frameworks": TORCH_FRONT,
                  "precisions": ["fp32", "bf16"], "compressions": ["none"]},
    # a user's program under the daemon's --scripts-dir (the daemon fills in whether it
    # allows one); ddpbench does not interpret the spec's knobs for it: the script reads them
    "script": {"strategies": PER_PROCESS, "backends": BACKENDS, "devices": ["cpu", "cuda"],
               "frameworks": ["auto"],
               "precisions": ["fp32", "bf16", "fp16"],
               "compressions": ["none", "fp16", "bf16"]},
    "lightning": {"strategies": ["ddp"], "backends": ["tcp"], "devices": ["cpu"],
                  "frameworks": TORCH_FRONT,
                  "precisions": ["fp32", "bf16"], "compressions": ["none"]},
}
# Why a precision does not run, per engine (served as "precisions_not_available"; the
# reasons are common/spec_table.c's spec_engine_precisions and spec_device_precisions, which
# refuse them at submit naming precision). pytorch's fp16 runs on device cuda only.
CPU_FP16 = ("on device cpu: fp16 mixed precision runs on device cuda (torch's CPU autocast, "
            "Keras' mixed_float16 and DeepSpeed's CPU accelerator have no fp16 there)")
PRECISIONS_NOT_AVAILABLE = {
    "pytorch": {"fp16": CPU_FP16},
    "tensorflow": {"fp16": "Keras' mixed_float16 needs a GPU and the tensorflow engine is "
                           "tensorflow-cpu"},
    "horovod": {"fp16": "fp16 autocast needs device cuda, which this Horovod build lacks; "
                        "Horovod's fp16 gradient compression is the spec's compression"},
    "deepspeed": {"fp16": "DeepSpeed's CPU accelerator has no fp16 (is_fp16_supported() is "
                          "false)"},
    "lightning": {"fp16": "Lightning's 16-mixed needs device cuda, which this engine "
                          "lacks; bf16-mixed runs"},
    # the spec passes precision to a script, which applies it as its framework does; only
    # the device's rule (fp16 on cuda) stands
    "script": {"fp16": CPU_FP16},
}
ADAPTERS = ddpb_vocab.ADAPTERS
# The backends whose presence depends on how the framework was built: engine: {backend:
# (a Python expression, true when this node's build has it, evaluated after importing the
# engine's module; the reason when false)}. The spec refuses pytorch's mpi whatever the
# build (common/spec_table.c spec_engine_backends), so its row only says why.
TORCH_NO_MPI = ("torch.distributed.is_mpi_available() is false: neither Debian's python3-torch "
                "nor PyPI's wheels are built with MPI")
HOROVOD_NO_MPI = ("this node's Horovod is built without MPI (hvd.mpi_built() is false): remake "
                  ".venv with deploy/setup-venv.sh, which builds it with HOROVOD_WITH_MPI=1 "
                  "against Debian's OpenMPI (libopenmpi-dev)")
HOROVOD_NO_GLOO = ("this node's Horovod is built without Gloo (hvd.gloo_built() is false): "
                   "remake .venv with deploy/setup-venv.sh")
BACKEND_PROBES = {
    "pytorch": {"mpi": ("torch.distributed.is_available() and "
                        "torch.distributed.is_mpi_available()", TORCH_NO_MPI)},
    "horovod": {"tcp": ("horovod.torch.gloo_built()", HOROVOD_NO_GLOO),
                "mpi": ("horovod.torch.mpi_built()", HOROVOD_NO_MPI)},
}


# The MPI implementations of schema/vocabulary.json's "mpis" by how their library
# names itself (MPI_Get_library_version's first words).
MPI_BANNERS = {"Open MPI": "openmpi", "MPICH": "mpich"}


def mapped_mpi():
    """(implementation name or None, MPI_Get_library_version's first line) of the MPI
    library this process has loaded (a framework linked against it: Horovod), or (None,
    None) when none is. MPI_Get_library_version may be called before MPI_Init."""
    with open("/proc/self/maps") as f:
        paths = sorted({line.split()[-1] for line in f
                        if "/libmpi.so" in line or "/libmpich.so" in line})
    if not paths:
        return None, None
    buf, n = ctypes.create_string_buffer(8192), ctypes.c_int(0)
    if ctypes.CDLL(paths[0]).MPI_Get_library_version(buf, ctypes.byref(n)) != 0:
        return None, None
    banner = buf.value.decode(errors="replace").strip().splitlines()[0]
    return next((v for k, v in MPI_BANNERS.items() if banner.startswith(k)), None), banner


def backends_of(name, built):
    """(the backends engine name can run here, {backend: why not}) from its CAPS row and
    what its build has (built: {backend: bool} from the child; a backend not probed is
    taken as there)."""
    caps, probes = CAPS[name]["backends"], BACKEND_PROBES.get(name, {})
    have = [b for b in caps if built.get(b, True)]
    missing = {}
    for backend, (_, why) in probes.items():
        if backend not in caps:  # the spec refuses it: say why, whatever the build
            missing[backend] = why if not built.get(backend, False) else (
                f"this build has it, but ddpbench's {name} adapter does not run backend "
                f"{backend}")
        elif not built.get(backend, True):
            missing[backend] = why
    return have, missing


# What a child runs before importing an engine's module: Lightning imports torch's
# torch.distributed._shard, which Debian's torch 1.13 cannot import under Python 3.11
# without ddpb_torch_compat's fix (the adapter applies it the same way).
PREPARE = {"lightning": "import ddpb_torch_compat; ddpb_torch_compat.shard_import(); "}


def probe_module(module, probes=None, prepare=""):
    """(version or None, reason or None, {backend: built}) from importing module in a
    child python3; the version is its top-level package's (horovod.torch has none of its
    own); probes is BACKEND_PROBES' row of the engine, prepare its PREPARE code."""
    top = module.split(".")[0]
    code = (f"import sys; sys.path.insert(0, {HERE!r}); {prepare}import {module}, {top} as m; "
            f"print('ddpb-version', getattr(m, '__version__', 'unknown'))")
    for backend, (expr, _) in (probes or {}).items():
        code += f"; print('ddpb-backend', {backend!r}, bool({expr}))"
    if "mpi" in (probes or {}):  # which MPI the framework's build loaded, if any
        code += (f"; import sys; sys.path.insert(0, {HERE!r}); import probe; "
                 f"print('ddpb-mpi', probe.mapped_mpi()[0])")
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, f"import {module} took more than {TIMEOUT_S} s", {}
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["exit status %d" % p.returncode])[-1]
        return None, f"import {module} failed ({last[:200]}): {INSTALL}", {}
    lines = [x for x in p.stdout.splitlines() if x.startswith("ddpb-version ")]
    built = {x.split()[1]: x.split()[2] == "True" for x in p.stdout.splitlines()
             if x.startswith("ddpb-backend ")}
    mpis = [x.split()[1] for x in p.stdout.splitlines() if x.startswith("ddpb-mpi ")]
    if mpis and mpis[-1] != "None":
        built["mpis"] = [mpis[-1]]
    return (lines[-1].split(" ", 1)[1] if lines else "unknown"), None, built


def probe_engine(name):
    """probe_module's answer for engine name; (None, None, {}) for one without a module."""
    module = ddpb_vocab.ENGINES[name]["module"]
    if module is None:
        return None, None, {}
    return probe_module(module, BACKEND_PROBES.get(name), PREPARE.get(name, ""))


def main():
    # The children at once: each is a framework's import, seconds of one core's work that
    # the caller (a submit, GET /v1/engines) waits for; one after another they took as long
    # as all of them together, side by side they take as long as the machine allows.
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(CAPS)) as pool:
        answers = dict(zip(CAPS, pool.map(probe_engine, CAPS)))
    out = []
    for name, caps in CAPS.items():
        module = ddpb_vocab.ENGINES[name]["module"]
        version, reason, built = answers[name]
        installed = module is None or version is not None
        adapter = ADAPTERS.get(name)
        launched = adapter is None or os.path.exists(os.path.join(HERE, adapter))
        if installed and not launched:
            reason = f"installed, but this ddpbench has no adapter for it ({adapter})"
        row = dict({"name": name, "installed": installed, "version": version,
                    "reason": reason, "launched": launched,
                    "not_observed": NOT_OBSERVED.get(name, {}),
                    "memory_not_observed": MEMORY_NOT_OBSERVED.get(name, {}),
                    "data_not_observed": data_not_observed(name),
                    "model_simulates": MODEL_SIMULATES.get(name),
                    "precisions_not_available": PRECISIONS_NOT_AVAILABLE.get(name, {})}, **caps)
        if installed:
            row["backends"], row["backends_not_available"] = backends_of(name, built)
        if installed and "mpi" in row["backends"] and name in BACKEND_PROBES:
            row["mpis"] = built.get("mpis", [])  # the implementations backend mpi runs over
        out.append(row)
    json.dump({"engines": out}, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
