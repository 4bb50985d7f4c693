#!/usr/bin/env python3
"""Issue 36's env record of a CPU training run, read back over REST (GET /v1/runs/{id}):
- every rank's env names the ISA level ddpbench's own kernels ran (cpu_isa: what
  /proc/cpuinfo's flags allow, the rule of worker/nn/isa.h), oneDNN's effective ISA
  (onednn_isa) and how many convolution layers ran each algorithm (conv_algos: ResNet-18's
  twenty, each counted once);
- with the daemon started under ONEDNN_MAX_CPU_ISA=AVX2 (an AVX2 machine emulated on a
  newer CPU), its workers say cpu_isa "avx2" and onednn_isa "avx2", and no layer ran
  oneDNN's Winograd (it has none for AVX2);
- a rank the daemon pins (as it does by default: a run whose ranks fit on idle CPUs of
  their own) names its CPUs (affinity) and the OpenMP placement its worker gave it: one
  place per CPU (omp_places "{0},{1}") and omp_proc_bind "close", so each of its threads
  has a CPU of its own; a placement the user set in the daemon's environment is kept."""
import os
import sys

from harness import Daemon, Skip, check, run_cases

SPEC = {"workload": "train", "model": "resnet18", "world_size": 2, "batch_size": 4,
        "steps": 2, "warmup_steps": 1, "dataset": {"name": "synthetic", "shape": [3, 32, 32]}}
CONVS = 20  # ResNet-18: the stem, sixteen 3x3, three 1x1 downsamples


def cpuinfo_isa():
    """The level worker/nn/isa.c should find here, from /proc/cpuinfo's flags."""
    with open("/proc/cpuinfo") as f:
        flags = next((line.split(":", 1)[1].split() for line in f
                      if line.startswith("flags")), [])
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= set(flags):
        return "avx512"
    return "avx2" if {"avx2", "fma"} <= set(flags) else "base"


def envs_of(d, spec):
    """Each rank's env of spec's one run, once it succeeded."""
    run = d.run_succeeds(spec, timeout=180)["runs"][0]["id"]
    envs = [e.get("env", {}) for e in d.get(f"/v1/runs/{run}").get("env", [])]
    check(len(envs) == spec["world_size"], envs)
    return envs


def test_env_names_isa_and_conv_algorithms():
    d = Daemon(cpu_slots=4)
    try:
        for env in envs_of(d, SPEC):
            check(env.get("cpu_isa") == cpuinfo_isa(), env)
            check(isinstance(env.get("onednn_isa"), str) and env["onednn_isa"], env)
            algos = env.get("conv_algos")
            check(isinstance(algos, dict) and sum(algos.values()) == CONVS, env)
            check(set(algos) <= {"direct", "winograd-onednn", "winograd-own"}, algos)
    finally:
        d.close()


def test_env_under_avx2_cap():
    if cpuinfo_isa() == "base":
        raise Skip("this CPU has no AVX2: nothing to cap")
    d = Daemon(cpu_slots=4, env=dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2"))
    try:
        for env in envs_of(d, SPEC):
            check(env.get("cpu_isa") == "avx2" and env.get("onednn_isa") == "avx2", env)
            algos = env.get("conv_algos", {})
            check(sum(algos.values()) == CONVS and "winograd-onednn" not in algos, algos)
    finally:
        d.close()


def cpu_list(cpus):
    """cpus as worker/store/rendezvous.c formats a CPU list: "0-3,6"."""
    out, i = [], 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(out)


def test_pinned_rank_binds_its_openmp_threads():
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise Skip("one CPU: a rank of 2 threads cannot be pinned")
    spec = {"workload": "train", "model": "mnist-cnn", "world_size": 1, "threads": 2,
            "batch_size": 8, "steps": 2, "warmup_steps": 1, "dataset": {"name": "synthetic"}}
    d = Daemon()  # the default slots: one per CPU, an idle daemon pins the run
    try:
        env = envs_of(d, spec)[0]
        check(env.get("affinity") == cpu_list(cpus[:2]), env)
        check(env.get("omp_places") == f"{{{cpus[0]}}},{{{cpus[1]}}}", env)
        check(env.get("omp_proc_bind") == "close", env)
    finally:
        d.close()
    d = Daemon(env=dict(os.environ, OMP_PROC_BIND="false"))
    try:
        env = envs_of(d, spec)[0]
        check(env.get("affinity") == cpu_list(cpus[:2]), env)
        check(env.get("omp_proc_bind") == "false" and "omp_places" not in env, env)
    finally:
        d.close()


if __name__ == "__main__":
    sys.exit(run_cases([test_env_names_isa_and_conv_algorithms, test_env_under_avx2_cap,
                        test_pinned_rank_binds_its_openmp_threads]))
