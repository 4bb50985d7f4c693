#!/usr/bin/env python3
"""probe: which framework engines this node can run, as JSON on stdout (for GET /v1/engines).

Each framework is imported in a child python3 with a time limit, so a broken or slow
install (torch's import can take seconds, a CUDA probe can hang) is reported as not
installed with the reason instead of stalling the caller. The engines, their modules and
adapters are schema/vocabulary.json's (ddpb_vocab); what each engine supports is the table
below, kept equal to common/spec_table.c's spec_rules for the engine (checked by
tests/integration/test_engines.py, which also checks it names every engine); an engine the daemon does not launch yet says so in
"launched". Output: {"engines": [{name, installed, version, reason, launched, strategies,
backends, devices, precisions}, ...]}."""
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
}
# What each framework engine cannot tell of its memory (report "memory", served null) and
# that it sends no trace (GET /v1/runs/{id}/trace is empty for its runs); the C engine
# tells everything.
_FRAMEWORK_MEMORY = {
    "comm_bytes": "the framework's collectives allocate their buffers internally",
    "activations_bytes": "the framework allocates activations per step, with no arena to "
                         "measure",
    "trace": "the engine sends no traced steps: use the framework's own profiler"}
MEMORY_NOT_OBSERVED = {
    "pytorch": _FRAMEWORK_MEMORY,
    "horovod": _FRAMEWORK_MEMORY,
    "deepspeed": dict(_FRAMEWORK_MEMORY, grads_bytes="ZeRO moves the reduced gradients into "
                      "its own flat partitions (null when no parameter holds one)"),
    "tensorflow": dict(_FRAMEWORK_MEMORY, grads_bytes="Keras keeps no gradient between steps"),
}
ALL = ddpb_vocab.STRATEGIES
BACKENDS = ddpb_vocab.names("backends")
# What each engine of schema/vocabulary.json supports, in the order GET /v1/engines lists
# them (the module each imports for its version and its adapter are the vocabulary's).
# backends use ddpbench's names (tcp on the CPU = gloo for torch, nccl on cuda).
CAPS = {
    "ddpbench": {"strategies": ALL, "backends": BACKENDS,
                 "devices": ["cpu", "cuda"], "precisions": ["fp32", "fp16", "bf16"],
                 "compressions": ["none", "fp16", "bf16"]},
    "pytorch": {"strategies": ["ddp", "zero1"], "backends": ["tcp", "nccl"],
                "devices": ["cpu", "cuda"], "precisions": ["fp32"],
                "compressions": ["none", "fp16", "bf16"]},
    "tensorflow": {"strategies": ["ddp"], "backends": ["tcp"], "devices": ["cpu"],
                   "precisions": ["fp32"], "compressions": ["none"]},
    "horovod": {"strategies": ["horovod"], "backends": ["tcp"], "devices": ["cpu"],
                "precisions": ["fp32"], "compressions": ["none", "fp16"]},
    "deepspeed": {"strategies": ["zero1", "zero2"], "backends": ["tcp"], "devices": ["cpu"],
                  "precisions": ["fp32"], "compressions": ["none"]},
    # a user's program under the daemon's --scripts-dir (the daemon fills in whether it
    # allows one); ddpbench does not interpret the spec's knobs for it: the script reads them
    "script": {"strategies": ALL, "backends": BACKENDS, "devices": ["cpu", "cuda"],
               "precisions": ["fp32"], "compressions": ["none", "fp16", "bf16"]},
}
ADAPTERS = ddpb_vocab.ADAPTERS


def probe_module(module):
    """(version or None, reason or None) from importing module in a child python3; the
    version is its top-level package's (horovod.torch has none of its own)."""
    top = module.split(".")[0]
    code = (f"import {module}, {top} as m; "
            f"print('ddpb-version', getattr(m, '__version__', 'unknown'))")
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, f"import {module} took more than {TIMEOUT_S} s"
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["exit status %d" % p.returncode])[-1]
        return None, f"import {module} failed ({last[:200]}): {INSTALL}"
    lines = [x for x in p.stdout.splitlines() if x.startswith("ddpb-version ")]
    return (lines[-1].split(" ", 1)[1] if lines else "unknown"), None


def main():
    out = []
    for name, caps in CAPS.items():
        module = ddpb_vocab.ENGINES[name]["module"]
        version, reason = (None, None) if module is None else probe_module(module)
        installed = module is None or version is not None
        adapter = ADAPTERS.get(name)
        launched = adapter is None or os.path.exists(os.path.join(HERE, adapter))
        if installed and not launched:
            reason = f"installed, but this ddpbench has no adapter for it ({adapter})"
        out.append(dict({"name": name, "installed": installed, "version": version,
                         "reason": reason, "launched": launched,
                         "not_observed": NOT_OBSERVED.get(name, {}),
                         "memory_not_observed": MEMORY_NOT_OBSERVED.get(name, {})}, **caps))
    json.dump({"engines": out}, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
