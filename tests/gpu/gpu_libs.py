#!/usr/bin/env python3
"""gpu_libs.py: where the CUDA libraries ddpbench links are, for meson and every script.

    gpu_libs.py [--toolkit DIR] [--runtime]   shell assignments, one part per block (eval them)
    gpu_libs.py lib DIR NAME           the file that links libNAME under DIR/lib or lib64

Parts: nccl, cudnn, cublas (and the toolkit itself, CUDA_HOME). Each is looked for, in order:
  1. an explicit prefix in the environment (NCCL_PREFIX, CUDNN_PREFIX, CUBLAS_PREFIX);
  2. the NVIDIA pip wheels of the Python running this file (nvidia-nccl-cu13,
     nvidia-cudnn-cu13, nvidia-cublas: site-packages/nvidia/{nccl,cudnn,cu13});
  3. the CUDA toolkit (--toolkit, else $CUDA_HOME, else /usr/local/cuda).
A candidate counts only when it holds both the header and the library; with --runtime
(run-on-device.sh, which builds nothing) the library alone is enough.

Decisions:
- Wheels come before the toolkit: on a device the Python environment's libraries are the
  ones PyTorch (the benchmarks' peer) loads, so both sides then run the same NCCL and cuDNN.
- The wheels are namespace packages with no __file__ (no __init__.py in nvidia/ or its
  parts): they are found through importlib's spec (submodule_search_locations), which
  lists every directory a namespace package spans.
- A wheel holds only versioned libraries (libnccl.so.2, libcudnn.so.9) and no
  unversioned libNAME.so, so `-lNAME` cannot find them: `lib` answers a full path (the
  unversioned file where there is one, else the highest soname major), which the linker
  records by its soname.
Standard library only: it runs under whichever python3 holds the wheels.
"""
import importlib.util
import os
import re
import shlex
import sys

# part: (header, library, wheel directories under site-packages/nvidia/)
PARTS = {
    "nccl": ("nccl.h", "nccl", ("nccl",)),
    "cudnn": ("cudnn.h", "cudnn", ("cudnn",)),
    # CUDA 13 wheels put every toolkit library in nvidia/cu13; CUDA 12's had nvidia/cublas
    "cublas": ("cublas_v2.h", "cublas", ("cu13", "cublas")),
}
# the header that holds each part's version, and the macros that make it
VERSION = {
    "nccl": ("nccl.h", ("NCCL_MAJOR", "NCCL_MINOR", "NCCL_PATCH")),
    "cudnn": ("cudnn_version.h", ("CUDNN_MAJOR", "CUDNN_MINOR", "CUDNN_PATCHLEVEL")),
    "cublas": ("cublas_api.h", ("CUBLAS_VER_MAJOR", "CUBLAS_VER_MINOR", "CUBLAS_VER_PATCH")),
}


def lib_file(prefix, name):
    """The library file for libNAME under prefix/lib64 or prefix/lib, or None."""
    for sub in ("lib64", "lib"):
        d = os.path.join(prefix, sub)
        plain = os.path.join(d, f"lib{name}.so")
        if os.path.exists(plain):
            return plain
        try:
            entries = os.listdir(d)
        except OSError:
            continue
        versioned = re.compile(re.escape(f"lib{name}.so.") + r"(\d+)$")
        majors = [(int(m.group(1)), e) for e in entries if (m := versioned.match(e))]
        if majors:
            return os.path.join(d, max(majors)[1])
    return None


def wheel_dirs(sub):
    """Directories of the namespace package nvidia.SUB on this Python's path."""
    try:
        spec = importlib.util.find_spec(f"nvidia.{sub}")
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    return list(spec.submodule_search_locations or [])


def candidates(part, toolkit):
    """(origin, prefix) pairs to try for part, in order."""
    env = os.environ.get(f"{part.upper()}_PREFIX")
    if env:
        return [("env", env)]  # an explicit prefix is the answer, found or not
    out = [("wheel", d) for sub in PARTS[part][2] for d in wheel_dirs(sub)]
    return out + [("toolkit", toolkit)]


def version(part, prefix):
    header, macros = VERSION[part]
    try:
        with open(os.path.join(prefix, "include", header), encoding="utf-8",
                  errors="replace") as f:
            text = f.read()
    except OSError:
        return ""
    nums = []
    for m in macros:
        found = re.search(rf"#define\s+{m}\s+(\d+)", text)
        if not found:
            return ""
        nums.append(found.group(1))
    return ".".join(nums)


def locate(part, toolkit, runtime=False):
    """(origin, prefix, library file, version, places looked) for part; prefix None if absent.
    runtime: the library alone will do (nothing is compiled against the header)."""
    header, name, _ = PARTS[part]
    looked = []
    for origin, prefix in candidates(part, toolkit):
        looked.append(prefix)
        lib = lib_file(prefix, name)
        if lib and (runtime or os.path.isfile(os.path.join(prefix, "include", header))):
            return origin, prefix, lib, version(part, prefix), looked
    return None, None, None, "", looked


def assignments(toolkit, runtime):
    """The shell assignments printed by default; GPU_LIB_PATH is what LD_LIBRARY_PATH needs."""
    lines = [f"CUDA_HOME={shlex.quote(toolkit)}"]
    lib_dirs = []
    for part in PARTS:
        origin, prefix, lib, ver, looked = locate(part, toolkit, runtime)
        up = part.upper()
        if prefix is None:
            lines.append(f"# {part}: not found (looked in: {', '.join(looked)})")
        else:
            d = os.path.dirname(lib)
            if d not in lib_dirs:
                lib_dirs.append(d)
        for key, value in (("PREFIX", prefix), ("LIB", lib), ("FROM", origin),
                           ("VERSION", ver)):
            lines.append(f"{up}_{key}={shlex.quote(value or '')}")
    lines.append(f"GPU_LIB_PATH={shlex.quote(':'.join(lib_dirs))}")
    return lines


def main(argv):
    args = list(argv)
    toolkit = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    if "--toolkit" in args:
        i = args.index("--toolkit")
        if i + 1 >= len(args):
            sys.exit("gpu_libs.py: --toolkit needs a directory")
        toolkit = args[i + 1]
        del args[i:i + 2]
    runtime = "--runtime" in args
    if runtime:
        args.remove("--runtime")
    if args[:1] == ["lib"]:
        if len(args) != 3:
            sys.exit("usage: gpu_libs.py lib DIR NAME")
        lib = lib_file(args[1], args[2])
        if lib is None:
            print(f"no lib{args[2]}.so or lib{args[2]}.so.N under {args[1]}/lib or lib64",
                  file=sys.stderr)
            return 1
        print(lib)
        return 0
    if args:
        sys.exit(__doc__.split("\n\n")[1])
    print("\n".join(assignments(toolkit, runtime)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
