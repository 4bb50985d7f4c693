#!/usr/bin/env python3
"""probe: which framework engines this node can run, as JSON on stdout (for GET /v1/engines).

Each framework is imported in a child python3 with a time limit, so a broken or slow
install (torch's import can take seconds, a CUDA probe can hang) is reported as not
installed with the reason instead of stalling the caller. What each engine supports is the
table below, kept equal to common/spec.c's spec_rules for the engine (checked by
tests/integration/test_engines.py); an engine the daemon does not launch yet says so in
"launched". Output: {"engines": [{name, installed, version, reason, launched, strategies,
backends, devices, precisions}, ...]}."""
import json
import subprocess
import sys

TIMEOUT_S = 60
INSTALL = "install with deploy/install-deps.sh --engines"

# name: (module to import for its version, or None: part of ddpbench), what it supports.
# backends use ddpbench's names (tcp on the CPU = gloo for torch, nccl on cuda).
ENGINES = {
    "ddpbench": (None, {"strategies": ["naive", "ddp", "horovod", "zero1", "zero2"],
                        "backends": ["tcp", "nccl"], "devices": ["cpu", "cuda"],
                        "precisions": ["fp32", "fp16", "bf16"]}),
    "pytorch": ("torch", {"strategies": ["ddp", "zero1"], "backends": ["tcp", "nccl"],
                          "devices": ["cpu", "cuda"], "precisions": ["fp32"]}),
    "horovod": ("horovod", {"strategies": ["horovod"], "backends": ["tcp"],
                            "devices": ["cpu"], "precisions": ["fp32"]}),
    "tensorflow": ("tensorflow", {"strategies": ["ddp"], "backends": ["tcp"],
                                  "devices": ["cpu"], "precisions": ["fp32"]}),
    "deepspeed": ("deepspeed", {"strategies": ["zero1", "zero2"], "backends": ["tcp"],
                                "devices": ["cpu"], "precisions": ["fp32"]}),
    "script": (None, {"strategies": [], "backends": [], "devices": ["cpu", "cuda"],
                      "precisions": []}),
}
LAUNCHED = {"ddpbench"}  # the daemon launches only these so far (issue 16 in progress)


def probe_module(module):
    """(version or None, reason or None) from importing module in a child python3."""
    code = f"import {module} as m; print(getattr(m, '__version__', 'unknown'))"
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, f"import {module} took more than {TIMEOUT_S} s"
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["exit status %d" % p.returncode])[-1]
        return None, f"import {module} failed ({last[:200]}): {INSTALL}"
    return p.stdout.strip(), None


def main():
    out = []
    for name, (module, caps) in ENGINES.items():
        version, reason = (None, None) if module is None else probe_module(module)
        installed = module is None or version is not None
        if installed and name not in LAUNCHED and reason is None:
            reason = "installed, but this ddpbenchd does not launch it yet"
        out.append(dict({"name": name, "installed": installed, "version": version,
                         "reason": reason, "launched": name in LAUNCHED}, **caps))
    json.dump({"engines": out}, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
