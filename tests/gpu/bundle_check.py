#!/usr/bin/env python3
"""bundle_check.py: proves a bundle made by tests/gpu/bundle.sh is self-contained.

    bundle_check.py BUNDLE [--gpu-lib-path DIRS]
    bundle_check.py --classify FILE DIRS     "kind name path file" per library FILE needs

For every ELF file in BUNDLE/bin and BUNDLE/lib it runs `ldd` in a cleared environment
(PATH=/usr/bin:/bin, LD_LIBRARY_PATH=DIRS only) and sorts each needed library into:
  bundled   resolved inside BUNDLE/lib (through the $ORIGIN-relative runpath)
  system    glibc's own files, which every Linux has and which must not be copied, and
            libgcc_s.so.1 (Essential in Debian and Ubuntu; in a process the first object to
            ask for it wins, often a wheel's library, so a copy would not even be used)
  python    expected from the device's Python environment (cuBLAS, cuDNN, NCCL wheels:
            far over the 64 MiB a bundle may weigh), listed in BUNDLE/EXPECTS
  driver    libcuda.so.1, which comes with the NVIDIA driver
and fails for anything else that a file of the bundle needs (DT_NEEDED): a library resolved
outside the bundle (it would be missing on a bare machine) or not found at all. A library
needed only by the Python environment's libraries (libnccl.so.2 needs libstdc++) is that
environment's own need, met on the device as it is for PyTorch: listed as "python-dep". Python- and driver-side libraries may be unresolved
(no wheel dirs given, no driver here); with DIRS given they must resolve inside DIRS.

Decision: the check reads where each library resolved, not whether it resolved, because
on this machine every system library is present anyway: a library the bundle forgot
still loads here from /usr/lib, and only its path gives that away. Used by bundle.sh
after gathering, by tests/packaging/test_bundle.py, and on the device by run-on-device.sh.
Exit 0 when every file passes; the table is printed either way.
"""
import os
import re
import subprocess
import sys

SYSTEM = re.compile(r"^(linux-vdso|ld-linux[-\w]*|libc|libm|libdl|libpthread|librt|libresolv|"
                    r"libutil|libmvec|libanl|libnsl|libgcc_s)\.so")
DRIVER = re.compile(r"^libcuda\.so")
# what the device's Python environment provides (nvidia-cublas, -cudnn-cu13, -nccl-cu13)
PYTHON = re.compile(r"^lib(cublas|cublasLt|cudnn\w*|nccl)\.so")
LDD_LINE = re.compile(r"^\s*(\S+)\s+=>\s+(not found|\S+)")


def kind_of(name):
    for kind, rx in (("system", SYSTEM), ("driver", DRIVER), ("python", PYTHON)):
        if rx.match(name):
            return kind
    return "bundled"


def is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def ldd(path, gpu_lib_path):
    env = {"PATH": "/usr/bin:/bin"}
    if gpu_lib_path:
        env["LD_LIBRARY_PATH"] = gpu_lib_path
    out = subprocess.run(["ldd", path], capture_output=True, text=True, env=env, timeout=60)
    return [m.groups() for m in map(LDD_LINE.match, out.stdout.splitlines()) if m]


def within(path, dirs):
    real = os.path.realpath(path)
    return any(real.startswith(os.path.realpath(d) + os.sep) or
               os.path.dirname(path) == d.rstrip("/") for d in dirs)


NEEDED_CACHE = {}


def needed(path):
    """The DT_NEEDED names of one ELF file."""
    if path in NEEDED_CACHE:
        return NEEDED_CACHE[path]
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, timeout=60)
    NEEDED_CACHE[path] = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]",
                                        out.stdout))
    return NEEDED_CACHE[path]


def check_file(path, bundle_lib, gpu_dirs, gpu_lib_path):
    """Problems with one ELF file's needs, and the rows of the table."""
    problems, rows = [], []
    resolved = ldd(path, gpu_lib_path)
    # what the file and the bundle's libraries it loads need themselves
    own = needed(path).union(*(needed(w) for _, w in resolved if within(w, [bundle_lib])))
    for name, where in resolved:
        kind = kind_of(name)
        if kind == "bundled" and name not in own:
            kind = "python-dep"
        elif kind == "bundled" and (where == "not found" or not within(where, [bundle_lib])):
            problems.append(f"{name} => {where} (must be in {bundle_lib})")
        elif kind == "python" and gpu_dirs and not within(where, gpu_dirs):
            problems.append(f"{name} => {where} (expected from {':'.join(gpu_dirs)})")
        elif kind == "system" and within(where, [bundle_lib]):
            problems.append(f"{name} => {where} (must come from the system)")
        rows.append((kind, name, where))
    return problems, rows


def classify(path, gpu_lib_path):
    """bundle.sh's gather step: each library path needs, with its class, one line each."""
    if not is_elf(path):
        return 0
    for name, where in ldd(path, gpu_lib_path):
        where = where.replace(" ", "_")  # "not found" stays one field
        print(f"{kind_of(name)} {name} {where} {os.path.basename(path)}")
    return 0


def main(argv):
    if argv[:1] == ["--classify"] and len(argv) == 3:
        return classify(argv[1], argv[2])
    if not argv or argv[0].startswith("-"):
        sys.exit(__doc__.split("\n\n")[1])
    bundle = os.path.abspath(argv[0])
    gpu_lib_path = ""
    if "--gpu-lib-path" in argv:
        gpu_lib_path = argv[argv.index("--gpu-lib-path") + 1]
    gpu_dirs = [d for d in gpu_lib_path.split(":") if d]
    bundle_lib = os.path.join(bundle, "lib")
    failed = 0
    seen = {}
    files = [os.path.join(bundle, sub, f) for sub in ("bin", "lib")
             for f in sorted(os.listdir(os.path.join(bundle, sub)))]
    files = [p for p in files if not os.path.islink(p) and is_elf(p)]
    for path in files:
        sub, f = os.path.basename(os.path.dirname(path)), os.path.basename(path)
        problems, rows = check_file(path, bundle_lib, gpu_dirs, gpu_lib_path)
        for kind, name, where in rows:
            seen.setdefault((kind, name), where)
        for p in problems:
            print(f"MISSING {sub}/{f}: {p}")
        failed += bool(problems)
    for (kind, name), where in sorted(seen.items()):
        print(f"{kind:10} {name:28} {where}")
    print(f"bundle_check: {'FAILED' if failed else 'ok'}: {failed} file(s) with a library "
          f"outside the bundle, the system, the driver and the Python environment")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
