#!/usr/bin/env python3
"""Packaging tests: the device bundle (tests/gpu/bundle.sh) is self-contained.

The bundle is gathered from this build tree (bundle.sh --from-build, so the test builds
nothing), moved to a second directory (its paths are $ORIGIN-relative, so it must work
wherever it lands), then:
- bundle_check.py passes on the moved copy: every library a bundled file needs resolves
  inside it, except the system's, the driver's and the Python wheels' (listed in EXPECTS);
- with one bundled library removed the check fails naming it, although this machine still
  has that library in /usr/lib: the check reads where a library resolves, not whether;
- the bundle's daemon, started with a cleared environment (PATH=/usr/bin:/bin and nothing
  else), serves the dashboard and runs a CPU collective experiment (backend tcp, 2 ranks)
  end to end through the REST API, and every shared object it maps is the bundle's or
  the system's;
- the same daemon runs the pytorch engine from the bundle's engines/ (the device run's
  engine stage), on the CPU.
No GPU needed: the bundle's GPU libraries are the device's business.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from harness import BUILD, SOURCE, Daemon, check, run_cases  # noqa: E402

TMP = tempfile.mkdtemp(prefix="ddpb-bundle-")
MADE = os.path.join(TMP, "made")
MOVED = os.path.join(TMP, "moved", "bundle")
CHECK = os.path.join(SOURCE, "tests", "gpu", "bundle_check.py")
SYSTEM = re.compile(r"/(ld-linux[-\w]*|lib(c|m|dl|pthread|rt|resolv|gcc_s|nss_\w+))\.so")


def bundle_check(path):
    return subprocess.run([sys.executable, CHECK, path], capture_output=True, text=True,
                          timeout=300)


def test_bundle_builds_and_checks():
    p = subprocess.run([os.path.join(SOURCE, "tests", "gpu", "bundle.sh"), MADE, "--from-build",
                        BUILD], capture_output=True, text=True, timeout=600)
    check(p.returncode == 0, f"bundle.sh failed: {p.stdout[-3000:]}{p.stderr[-2000:]}")
    check("bundle_check: ok" in p.stdout, f"bundle.sh did not run the check: {p.stdout[-2000:]}")
    for rel in ("bin/ddpbenchd", "bin/ddpbench-worker", "lib/libjansson.so.4",
                "lib/libmicrohttpd.so.12", "lib/libsqlite3.so.0", "lib/libz.so.1",
                "share/ddpbench/web/index.html", "share/ddpbench/schema/examples/allreduce-cpu.json",
                "run-on-device.sh", "bench/resnet50_torch_amp.py", "bin/device_report.py",
                "engines/engine_pytorch.py", "engines/probe.py", "engines/ddpb_launch.py",
                "EXPECTS", "MANIFEST"):
        check(os.path.exists(os.path.join(MADE, rel)), f"{rel} missing from the bundle")
    # the worker's modules (the GPU ones in a CUDA build) beside it, where it looks first
    for m in ("ddpb_train.so", "ddpb_cuda.so", "ddpb_comm_nccl.so"):
        if os.path.exists(os.path.join(BUILD, "worker", m)):
            check(os.path.exists(os.path.join(MADE, "bin", m)), f"bin/{m} missing")
    if os.path.exists(os.path.join(SOURCE, "schema", "vocabulary.json")):  # engines read it
        check(os.path.exists(os.path.join(MADE, "schema", "vocabulary.json")),
              "schema/vocabulary.json missing beside the bundle's engines")
    # what a device call carries is the tarball beside the folder (bundle.sh says why)
    size = os.path.getsize(MADE + ".tgz")
    check(size < 60 << 20, f"{MADE}.tgz weighs {size} bytes, over 60 MiB")
    os.makedirs(os.path.dirname(MOVED))
    shutil.move(MADE, MOVED)
    r = bundle_check(MOVED)
    check(r.returncode == 0, f"moved bundle fails its check: {r.stdout[-3000:]}")


def test_check_catches_a_missing_library():
    check(os.path.isdir(MOVED), "no bundle (the first case failed)")
    broken = os.path.join(TMP, "broken")
    shutil.copytree(MOVED, broken, symlinks=True)
    os.unlink(os.path.join(broken, "lib", "libjansson.so.4"))
    r = bundle_check(broken)
    check(r.returncode != 0, f"the check passed without libjansson: {r.stdout[-2000:]}")
    check(re.search(r"MISSING bin/ddpbenchd: libjansson\.so\.4 => /\S+ \(must be in", r.stdout),
          f"the failure does not name ddpbenchd's libjansson: {r.stdout[-2000:]}")


def mapped_objects(pid):
    with open(f"/proc/{pid}/maps") as f:
        return {line.split()[-1] for line in f if ".so" in line.split()[-1]}


def test_daemon_runs_a_collective_from_a_cleared_environment():
    check(os.path.isdir(MOVED), "no bundle (the first case failed)")
    d = Daemon(binary=os.path.join(MOVED, "bin", "ddpbenchd"), env={"PATH": "/usr/bin:/bin"},
               extra_args=["--web-dir", os.path.join(MOVED, "share", "ddpbench", "web")])
    try:
        outside = sorted(o for o in mapped_objects(d.proc.pid)
                         if not o.startswith(MOVED + "/") and not SYSTEM.search(o))
        check(not outside, f"the daemon maps objects from outside the bundle: {outside}")
        status, page, _ = d.request("GET", "/")
        check(status == 200 and "<html" in page.lower(), f"dashboard: {status}")
        exp = d.run_experiment({"workload": "collective", "backend": "tcp", "world_size": 2,
                                "op": "allreduce", "min_bytes": "4K", "max_bytes": "64K",
                                "iters": 3, "warmup": 1}, timeout=120)
        check(exp["status"] == "succeeded", f"experiment: {exp['status']}: {d.daemon_log()}")
        rows = d.get(f"/v1/experiments/{exp['id']}/results")["rows"]
        sizes = sorted(r["bytes"] for r in rows)
        check(sizes == [4096, 8192, 16384, 32768, 65536], f"result sizes {sizes}")
        for r in rows:
            check(r["busbw_gbs_median"] > 0 and r["wrong"] == 0, f"result row {r}")
    finally:
        d.close()


def test_bundled_worker_loads_its_modules():
    """The moved bundle's worker loads its modules from beside it in bin/ (never from this
    build tree, where it does not look), their libraries from the bundle's lib/: a CPU
    training run (the training module, oneDNN) succeeds from a cleared environment, and a
    device "cuda" run gets past the GPU modules' loads to CUDA itself: here, without a
    GPU, CUDA's own error; on a device, a result."""
    check(os.path.isdir(MOVED), "no bundle (the first case failed)")
    d = Daemon(binary=os.path.join(MOVED, "bin", "ddpbenchd"), env={"PATH": "/usr/bin:/bin"},
               extra_args=["--gpus", "1"])
    try:
        exp = d.run_experiment({"workload": "train", "model": "lenet5", "world_size": 1,
                                "batch_size": 16, "steps": 4, "warmup_steps": 1,
                                "eval": False, "dataset": {"name": "synthetic",
                                                           "shape": [1, 28, 28],
                                                           "classes": 10}}, timeout=120)
        check(exp["status"] == "succeeded", f"training: {exp['runs'][0]['error']}")
        if not os.path.exists(os.path.join(MOVED, "bin", "ddpb_cuda.so")):
            check(not os.path.exists(os.path.join(BUILD, "worker", "ddpb_cuda.so")),
                  "the build has ddpb_cuda.so, the bundle not")
            print("  (no CUDA in this build: the bundle has no GPU module to load)")
            return
        exp = d.run_experiment({"workload": "collective", "device": "cuda", "backend": "nccl",
                                "world_size": 1, "min_bytes": "4K", "max_bytes": "4K",
                                "iters": 2, "warmup": 0, "timeout_s": 30}, timeout=120)
        run = exp["runs"][0]
        err = run["error"] or ""
        check(run["status"] == "succeeded" or
              (run["status"] == "failed" and "CUDA" in err and "not installed" not in err and
               "cannot be loaded" not in err), f"{run['status']}: {err}")
    finally:
        d.close()


def test_daemon_runs_the_pytorch_engine_from_the_bundle():
    """The device run's engine stage: the bundle's own engines/ (and the schema tables they
    read at ../schema/) under the daemon, here on the CPU with the interpreter the source
    tree's engines use."""
    check(os.path.isdir(MOVED), "no bundle (the first case failed)")
    venv = os.path.join(SOURCE, ".venv", "bin", "python")
    python = venv if os.access(venv, os.X_OK) else "/usr/bin/python3"
    d = Daemon(binary=os.path.join(MOVED, "bin", "ddpbenchd"), env={"PATH": "/usr/bin:/bin"},
               extra_args=["--web-dir", os.path.join(MOVED, "share", "ddpbench", "web"),
                           "--engines-dir", os.path.join(MOVED, "engines"),
                           "--python", python])
    try:
        exp = d.run_experiment({"workload": "train", "engine": "pytorch", "model": "lenet5",
                                "world_size": 1, "batch_size": 16, "steps": 6,
                                "warmup_steps": 2, "eval": False,
                                "dataset": {"name": "synthetic", "shape": [1, 28, 28],
                                            "classes": 10}}, timeout=180)
        run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
        check(exp["status"] == "succeeded",
              f"experiment: {exp['status']}: {run.get('error')}: {d.daemon_log()[-2000:]}")
        rows = d.get(f"/v1/experiments/{exp['id']}/results")["rows"]
        check(rows and (rows[0].get("throughput_mean") or 0) > 0, f"result rows {rows}")
        env = (run.get("env") or [{}])[0].get("env") or {}
        check("torch" in env, f"the engine's env names no torch version: {env}")
    finally:
        d.close()


if __name__ == "__main__":
    try:
        rc = run_cases([test_bundle_builds_and_checks, test_check_catches_a_missing_library,
                        test_daemon_runs_a_collective_from_a_cleared_environment,
                        test_bundled_worker_loads_its_modules,
                        test_daemon_runs_the_pytorch_engine_from_the_bundle])
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(rc)
