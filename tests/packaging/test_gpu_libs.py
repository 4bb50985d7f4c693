#!/usr/bin/env python3
"""Packaging tests: GPU library discovery against a pip-wheel layout, without a GPU.

A fake site-packages holds nvidia/{nccl,cudnn,cu13}/{include,lib} the way the
nvidia-nccl-cu13, nvidia-cudnn-cu13 and nvidia-cublas wheels lay them out: namespace
packages (no __init__.py, so no __file__) and only versioned libraries (libnccl.so.2,
libcudnn.so.9, libcublas.so.13), here symbolic links to this machine's toolkit. Then
tests/gpu/gpu_libs.py must find that tree through the interpreter's path, meson must
configure and link against it (the summary naming the fake files), the probe it builds
must load the fake tree's libraries, and a requested part that is missing must stop the
configure with a message naming it.

Decision: only the probe (tests/gpu/gpu_probe) is built, not the worker: it links the same
dependencies the worker does and compiles in seconds, so the test stays short on two cores.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from harness import SOURCE, Skip, check, run_cases  # noqa: E402

TOOLKIT = os.environ.get("CUDA_HOME", "/usr/local/cuda")
TMP = tempfile.mkdtemp(prefix="ddpb-gpulibs-")
SITE = os.path.join(TMP, "site-packages")
LOCATOR = os.path.join(SOURCE, "tests", "gpu", "gpu_libs.py")
# part: (wheel directory, header globs from the toolkit's include/, versioned libraries)
WHEELS = {
    "nccl": ("nccl", ("nccl",), ("libnccl.so.2",)),
    "cudnn": ("cudnn", ("cudnn",), ("libcudnn.so.9", "libcudnn_graph.so.9", "libcudnn_ops.so.9",
                                    "libcudnn_cnn.so.9", "libcudnn_adv.so.9",
                                    "libcudnn_heuristic.so.9",
                                    "libcudnn_engines_precompiled.so.9",
                                    "libcudnn_engines_runtime_compiled.so.9")),
    "cublas": ("cu13", ("cublas",), ("libcublas.so.13", "libcublasLt.so.13")),
}


def toolkit_file(name):
    for sub in ("lib64", "lib", "include"):
        p = os.path.join(TOOLKIT, sub, name)
        if os.path.exists(p):
            return p
    raise AssertionError(f"{name} not in the toolkit {TOOLKIT}")


def need_toolkit():
    if not os.path.exists(os.path.join(TOOLKIT, "bin", "nvcc")):
        raise Skip(f"no CUDA toolkit (nvcc) under {TOOLKIT}")


def make_fake_wheels():
    """The wheel tree, once: headers and versioned libraries as links, no __init__.py."""
    if os.path.isdir(SITE):
        return
    inc = os.path.join(TOOLKIT, "include")
    for part, (sub, header_prefixes, libs) in WHEELS.items():
        root = os.path.join(SITE, "nvidia", sub)
        os.makedirs(os.path.join(root, "include"))
        os.makedirs(os.path.join(root, "lib"))
        for h in os.listdir(inc):
            if h.startswith(header_prefixes) and h.endswith(".h"):
                os.symlink(os.path.join(inc, h), os.path.join(root, "include", h))
        for lib in libs:
            os.symlink(toolkit_file(lib), os.path.join(root, "lib", lib))


def locator_env():
    env = {k: v for k, v in os.environ.items() if not k.endswith("_PREFIX")}
    env["PYTHONPATH"] = SITE
    return env


def locate():
    """gpu_libs.py's assignments, run with the fake site-packages on the path."""
    out = subprocess.run([sys.executable, LOCATOR, "--toolkit", TOOLKIT], env=locator_env(),
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return dict(shlex.split(line)[0].split("=", 1) for line in out.splitlines()
                if line and not line.startswith("#"))


def meson_setup(build, *opts):
    return subprocess.run(["meson", "setup", build, "-Dbuildtype=release", "-Dmpi=disabled",
                           f"-Dgpu_toolkit={TOOLKIT}", *opts], cwd=SOURCE,
                          capture_output=True, text=True, timeout=300)


def test_fake_wheels_are_namespace_packages():
    need_toolkit()
    make_fake_wheels()
    code = "import nvidia.nccl as m; print(getattr(m, '__file__', None))"
    out = subprocess.run([sys.executable, "-c", code], env=locator_env(), capture_output=True,
                         text=True, timeout=60)
    check(out.returncode == 0 and out.stdout.strip() == "None",
          f"the fake nvidia.nccl must import with no __file__: {out.stdout}{out.stderr}")


def test_locator_finds_wheels_before_the_toolkit():
    need_toolkit()
    make_fake_wheels()
    got = locate()
    for part, (sub, _, libs) in WHEELS.items():
        up = part.upper()
        want = os.path.join(SITE, "nvidia", sub)
        check(got[f"{up}_PREFIX"] == want, f"{part}: prefix {got[f'{up}_PREFIX']}, want {want}")
        check(got[f"{up}_FROM"] == "wheel", f"{part}: from {got[f'{up}_FROM']}")
        check(got[f"{up}_LIB"] == os.path.join(want, "lib", libs[0]),
              f"{part}: library {got[f'{up}_LIB']}, want the versioned {libs[0]}")
        check(re.fullmatch(r"\d+\.\d+\.\d+", got[f"{up}_VERSION"]),
              f"{part}: version {got[f'{up}_VERSION']!r}")
    dirs = got["GPU_LIB_PATH"].split(":")
    check(sorted(dirs) == sorted(os.path.join(SITE, "nvidia", w[0], "lib") for w in WHEELS.values()),
          f"GPU_LIB_PATH {dirs}")


def test_meson_links_the_versioned_wheel_libraries():
    need_toolkit()
    make_fake_wheels()
    got = locate()
    build = os.path.join(TMP, "build")
    p = meson_setup(build, "-Dcuda=enabled", "-Dnccl=enabled", "-Dcudnn=enabled",
                    f"-Dnccl_prefix={got['NCCL_PREFIX']}", f"-Dcudnn_prefix={got['CUDNN_PREFIX']}",
                    f"-Dcublas_prefix={got['CUBLAS_PREFIX']}")
    check(p.returncode == 0, f"meson setup failed: {p.stdout[-3000:]}{p.stderr[-2000:]}")
    for part in WHEELS:  # the summary says which file each part is linked from
        lib = got[f"{part.upper()}_LIB"]
        check(re.search(rf"^\s+{part}\s+:\s+{re.escape(lib)}$", p.stdout, re.M),
              f"summary does not show {part} from {lib}: {p.stdout[-1500:]}")
    b = subprocess.run(["ninja", "-C", build, "tests/gpu/gpu_probe"], capture_output=True,
                       text=True, timeout=600)
    check(b.returncode == 0, f"probe build failed: {b.stdout[-3000:]}")
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": got["GPU_LIB_PATH"]}
    r = subprocess.run([os.path.join(build, "tests", "gpu", "gpu_probe")], env=env,
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, f"gpu_probe: rc {r.returncode}: {r.stdout}{r.stderr}")
    for part, (sub, _, libs) in WHEELS.items():
        path = os.path.join(SITE, "nvidia", sub, "lib", libs[0])
        check(f"loaded: {path}\n" in r.stdout, f"{libs[0]} not loaded from the wheel: {r.stdout}")
        check(f"{part}: {got[f'{part.upper()}_VERSION']}" in r.stdout,
              f"{part} version {got[f'{part.upper()}_VERSION']} not reported: {r.stdout}")


def test_requested_part_missing_stops_the_configure():
    need_toolkit()
    empty = os.path.join(TMP, "no-cudnn")  # a prefix with the header but no library
    os.makedirs(os.path.join(empty, "include"), exist_ok=True)
    os.makedirs(os.path.join(empty, "lib"), exist_ok=True)
    p = meson_setup(os.path.join(TMP, "build-missing"), "-Dcuda=enabled", "-Dnccl=disabled",
                    "-Dcudnn=auto", f"-Dcudnn_prefix={empty}")
    out = p.stdout + p.stderr
    check(p.returncode != 0, "a cuDNN prefix without libcudnn must fail the configure")
    check("cudnn requested" in out and f"no libcudnn.so or libcudnn.so.N under {empty}" in out,
          f"the error does not name cuDNN and where it looked: {out[-1500:]}")


if __name__ == "__main__":
    try:
        rc = run_cases([test_fake_wheels_are_namespace_packages,
                        test_locator_finds_wheels_before_the_toolkit,
                        test_meson_links_the_versioned_wheel_libraries,
                        test_requested_part_missing_stops_the_configure])
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(rc)
