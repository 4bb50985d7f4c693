#!/usr/bin/env python3
"""The worker's modules load on demand, through the real daemon: the GPU modules
(worker/gpu_modules.h) and the training workload (worker/train_module.h).
ddpbench-worker links no CUDA library, nor oneDNN; a CPU collective run's workers map
neither the GPU stack nor the training one (oneDNN, its OpenCL loader, OpenMP)
while they run, and a CPU training run's map the training module but no GPU library; a
worker whose modules are missing (a copy of it in a folder of its own, outside the build
tree, so it cannot fall back on the tree's modules) still runs CPU collectives, and fails
a training run, or a device "cuda" / backend "nccl" one, naming the module file and the
meson option or install step that provides it; a module whose library cannot load fails
the run naming the library and the packages that provide it. Runs in every build:
without CUDA there are no GPU modules at all, and the messages name the options that
build them."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import (BUILD, WORKER, Daemon, Skip, check, pid_alive, run_cases,  # noqa: E402
                     worker_pids)

# what a CPU run must not map: the GPU stack and the modules that bring it
GPU_LIBS = re.compile(r"/(libcudnn\w*|libcublas\w*|libcublasLt|libnccl|libcuda|libcudart|"
                      r"ddpb_cuda|ddpb_comm_nccl)\.so")
# what a collective run must not map either: the training stack (not libstdc++, which a
# sanitizer build's runtime maps anyway)
TRAIN_LIBS = re.compile(r"/(ddpb_train|libdnnl|libOpenCL|libgomp)\.so")
TRAIN_SPEC = {"workload": "train", "model": "lenet5", "world_size": 1, "batch_size": 16,
              "steps": 6, "warmup_steps": 2, "eval": False,
              "dataset": {"name": "synthetic", "shape": [1, 28, 28], "classes": 10}}
CUDA_SPEC = {"workload": "collective", "device": "cuda", "backend": "nccl", "world_size": 1,
             "op": "allreduce", "min_bytes": "4K", "max_bytes": "4K", "iters": 2,
             "warmup": 0, "timeout_s": 30}
CPU_SPEC = {"workload": "collective", "world_size": 1, "min_bytes": "4K", "max_bytes": "4K",
            "iters": 2, "warmup": 0}


def config(name):
    """A #define of the build's ddpb_config.h, as text."""
    with open(os.path.join(BUILD, "ddpb_config.h")) as f:
        m = re.search(rf"#define {name} (.*)", f.read())
    return m.group(1).strip().strip('"') if m else ""


def module_path(name):
    return os.path.join(BUILD, "worker", name)


def test_worker_links_no_gpu_library():
    needed = subprocess.run(["readelf", "-d", WORKER], capture_output=True, text=True,
                            check=True).stdout
    names = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", needed)
    check(names, needed)
    ldd = subprocess.run(["ldd", WORKER], capture_output=True, text=True, check=True).stdout
    check(not re.search(r"libcu|libnccl|libcudnn|libdnnl|libOpenCL", ldd), ldd)
    check("cuda" not in needed, needed)  # nor a runpath into the toolkit


def running_maps(d, spec):
    """{pid: /proc/PID/maps} of the workers of an experiment of spec, sampled while they
    run (after the loader: their own code mapped); the experiment must succeed."""
    exp = d.submit(spec)
    seen, deadline = {}, time.time() + 60
    while time.time() < deadline:
        for pid in worker_pids(d.proc.pid):
            try:
                with open(f"/proc/{pid}/maps") as f:
                    maps = f.read()
            except OSError:
                continue  # it ended between the listing and the read
            if "ddpbench-worker" in maps and pid_alive(pid):
                seen[pid] = maps  # the last sample: every module loaded by then
        if d.get(f"/v1/experiments/{exp['id']}")["status"] not in ("queued", "running"):
            break
        time.sleep(0.02)
    exp = d.wait_experiment(exp["id"])
    check(exp["status"] == "succeeded", exp["runs"][0]["error"])
    return seen


def test_cpu_collective_maps_no_gpu_or_training_library():
    # long enough to be seen running: 2 ranks, 16 MiB allreduces over TCP
    spec = {"workload": "collective", "world_size": 2, "op": "allreduce",
            "min_bytes": "16M", "max_bytes": "16M", "iters": 40, "warmup": 1}
    d = Daemon(cpu_slots=2)
    try:
        seen = running_maps(d, spec)
        check(len(seen) == 2, f"both ranks sampled while running: {sorted(seen)}")
        for pid, maps in seen.items():
            mapped = sorted({m.group(0) for rx in (GPU_LIBS, TRAIN_LIBS)
                             for m in rx.finditer(maps)})
            check(not mapped, f"worker {pid} maps {mapped}")
    finally:
        d.close()


def test_cpu_training_maps_the_training_module_only():
    d = Daemon(cpu_slots=1)
    try:
        seen = running_maps(d, dict(TRAIN_SPEC, steps=60))
        check(seen, "the rank was sampled while running")
        maps = list(seen.values())[-1]
        check("/ddpb_train.so" in maps and "/libdnnl.so" in maps, "no training module mapped")
        gpu = sorted({m.group(0) for m in GPU_LIBS.finditer(maps)})
        check(not gpu, f"a CPU training worker maps {gpu}")
    finally:
        d.close()


def lone_worker(folder, modules=()):
    """A copy of ddpbench-worker in folder, with copies of the named modules beside it."""
    shutil.copy2(WORKER, folder)
    for m in modules:
        shutil.copy2(module_path(m), folder)
    return os.path.join(folder, "ddpbench-worker")


def none_installed():
    """Skips the case when the install directory holds a module: every worker finds it
    there, so none can miss it."""
    where = config("DDPB_MODULE_DIR")
    there = [m for m in ("ddpb_train.so", "ddpb_cuda.so", "ddpb_comm_nccl.so")
             if os.path.exists(os.path.join(where, m))]
    if there:
        raise Skip(f"{there} installed in {where}: no worker here can miss them")


def run_error(worker, spec, gpus=1):
    d = Daemon(cpu_slots=2, extra_args=["--worker", worker, "--gpus", str(gpus)])
    try:
        exp = d.run_experiment(spec, timeout=60)
        run = exp["runs"][0]
        return run["status"], run["error"] or ""
    finally:
        d.close()


def lone_run_fails(modules, spec, *needles):
    """A run of spec by a lone worker with only `modules` beside it fails, its error
    holding every needle."""
    with tempfile.TemporaryDirectory(prefix="ddpb-modules-") as tmp:
        status, err = run_error(lone_worker(tmp, modules), spec)
    check(status == "failed" and all(n in err for n in needles), f"{status}: {err}")


def test_missing_train_module_named():
    none_installed()
    with tempfile.TemporaryDirectory(prefix="ddpb-modules-") as tmp:
        status, err = run_error(lone_worker(tmp), CPU_SPEC)  # a CPU collective needs none
    check(status == "succeeded", err)
    lone_run_fails([], TRAIN_SPEC, "the training workload", "ddpb_train.so", "ninja install")
    # nor does buckets_of, which builds a model, run without it
    lone_run_fails([], dict(CPU_SPEC, buckets_of="lenet5"), "ddpb_train.so")


def test_missing_cuda_module_named():
    none_installed()
    lone_run_fails([], CUDA_SPEC, "the CUDA engine", "ddpb_cuda.so", "-Dcuda=enabled")


def test_missing_nccl_module_named():
    if config("DDPB_HAVE_CUDA") != "1":  # without NCCL the same message says how to build it
        raise Skip("no CUDA toolkit: a build without CUDA has no CUDA engine to keep")
    none_installed()
    lone_run_fails(["ddpb_cuda.so"], CUDA_SPEC, "the NCCL communicator", "ddpb_comm_nccl.so",
                   "-Dnccl=enabled")


def test_unloadable_module_names_library():
    if config("DDPB_HAVE_CUDA") != "1":
        raise Skip("no CUDA toolkit: a build without CUDA has no module to break")
    none_installed()
    if not shutil.which("patchelf"):
        raise Skip("patchelf missing (deploy/install-deps.sh)")
    with tempfile.TemporaryDirectory(prefix="ddpb-modules-") as tmp:
        worker = lone_worker(tmp, ["ddpb_cuda.so", "ddpb_comm_nccl.so"])
        # the module asks for a cuBLAS no machine has: what a missing wheel looks like
        subprocess.run(["patchelf", "--replace-needed", "libcublas.so.13",
                        "libcublas_absent.so.13", os.path.join(tmp, "ddpb_cuda.so")],
                       check=True)
        status, err = run_error(worker, CUDA_SPEC)
        check(status == "failed", err)
        check("ddpb_cuda.so" in err and "libcublas_absent.so.13" in err and
              "nvidia-cublas" in err, err)


if __name__ == "__main__":
    sys.exit(run_cases([test_worker_links_no_gpu_library,
                        test_cpu_collective_maps_no_gpu_or_training_library,
                        test_cpu_training_maps_the_training_module_only,
                        test_missing_train_module_named, test_missing_cuda_module_named,
                        test_missing_nccl_module_named, test_unloadable_module_names_library]))
