#!/bin/bash
# bundle.sh: ddpbench for a GPU machine that has nothing installed but the NVIDIA driver
# and a Python environment with PyTorch's NVIDIA wheels (the device this project is lent).
#
#   tests/gpu/bundle.sh OUTDIR                  build here (build-bundle-obj/), then gather
#   tests/gpu/bundle.sh OUTDIR --from-build DIR gather from an existing build tree instead
#
# OUTDIR gets:
#   bin/      ddpbenchd, ddpbench-worker, the GPU tests, gpu_probe,
#             nccl_allreduce_plain, gpu_libs.py, bundle_check.py, device_report.py
#   lib/      every shared library those need beyond the system's (glibc, libgcc_s), the
#             driver's libcuda.so.1 and the Python environment's cuBLAS/cuDNN/NCCL:
#             jansson, libmicrohttpd and its gnutls chain, sqlite, zlib, oneDNN and its
#             OpenCL loader, OpenMP, libstdc++
#   share/ddpbench/{web,schema/examples}, bench/ (the PyTorch peer), run-on-device.sh,
#   engines/  the framework engines' adapters (ddpbenchd --engines-dir), and schema/*.json
#             beside them (they read the vocabulary and column tables at ../schema/)
#   EXPECTS   the libraries it takes from the device (Python wheels, driver) and who needs them
#   MANIFEST  what was built, from which commit, with which libraries, and the sizes
# and OUTDIR.tgz beside it holds the same folder: what a device call carries.
#
# Decisions:
# - Binaries find lib/ through an $ORIGIN-relative DT_RPATH ($ORIGIN/../lib), each bundled
#   library through its own runpath ($ORIGIN). A runpath covers only the object that
#   carries it (gnutls finds nettle beside it only if gnutls says so); the binaries' RPATH,
#   unlike a runpath, also serves the wheels' libraries, so libnccl.so.2 loads the bundle's
#   libstdc++ rather than needing the machine's. patchelf writes both.
# - The CLI (ddpbench) is left out: libcurl's chain (OpenSSL, Kerberos, LDAP, ...) weighs
#   9 MiB, and run-on-device.sh speaks to the REST API with the device's python3.
# - Carried as OUTDIR.tgz, under 60 MiB: the device call carries it and the working tree
#   (about 3 MiB) within 64 MiB together. The folder itself no longer fits since the daemon
#   links libcurl for --join (issue 15: libcurl's TLS and Kerberos chain adds 15 MiB to
#   oneDNN's 38), and gzip halves shared libraries, so the device unpacks it first:
#   run(command="tar xzf build-bundle.tgz && build-bundle/run-on-device.sh",
#       carry=["build-bundle.tgz"]).
# - The CUDA runtime is linked statically (meson.build), so only libcuda.so.1 comes from
#   the driver. cuBLAS (0.6 GB with cuBLASLt), cuDNN and NCCL are far over the 64 MiB the
#   device call may carry: they are taken at run time from the device's Python environment
#   (run-on-device.sh finds them with gpu_libs.py), the same files PyTorch loads.
# - The build links them against the wheels' versioned sonames (libnccl.so.2, libcudnn.so.9,
#   libcublas.so.13), so whatever 2.x / 9.x / 13.x the device has satisfies them.
# - bundle_check.py proves the result (see there); this script fails if it does not pass
#   or if the bundle weighs 64 MiB or more.
set -euo pipefail
usage() { echo "usage: tests/gpu/bundle.sh OUTDIR [--from-build BUILD_DIR]" >&2; exit 2; }
[ $# -ge 1 ] || usage
OUT_DIR=$1
shift
FROM_BUILD=""
if [ $# -gt 0 ]; then
    if [ "$1" != "--from-build" ] || [ $# -ne 2 ]; then usage; fi
    FROM_BUILD=$(cd "$2" && pwd)
fi
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LIMIT=$((60 << 20))
command -v patchelf >/dev/null || { echo "bundle.sh: patchelf missing (deploy/install-deps.sh)" >&2; exit 1; }

# where the GPU libraries are: the wheels of this machine's python3, else the toolkit
eval "$(python3 "$ROOT/tests/gpu/gpu_libs.py")"

if [ -n "$FROM_BUILD" ]; then
    B=$FROM_BUILD
else
    B=$ROOT/build-bundle-obj
    opts=(-Dbuildtype=release -Dcuda=enabled -Dnccl=enabled -Dcudnn=enabled
          "-Dgpu_toolkit=$CUDA_HOME" "-Dnccl_prefix=$NCCL_PREFIX" "-Dcudnn_prefix=$CUDNN_PREFIX"
          "-Dcublas_prefix=$CUBLAS_PREFIX")
    if [ -f "$B/build.ninja" ]; then
        meson setup --reconfigure "$B" "${opts[@]}" >"$B.setup.log" 2>&1
    else
        meson setup "$B" "${opts[@]}" >"$B.setup.log" 2>&1
    fi || { tail -30 "$B.setup.log"; echo "bundle.sh: meson setup failed ($B.setup.log)" >&2; exit 1; }
    ninja -C "$B" >"$B.build.log" 2>&1 ||
        { tail -30 "$B.build.log"; echo "bundle.sh: build failed ($B.build.log)" >&2; exit 1; }
fi

# the installed layout (bin/, share/ddpbench/...), staged, then moved into OUT_DIR
rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
prefix=$(meson introspect "$B" --buildoptions |
         python3 -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"][0])')
meson install -C "$B" --no-rebuild --quiet --destdir "$STAGE" >/dev/null
cp -a "$STAGE$prefix/bin" "$STAGE$prefix/share" "$OUT_DIR/"
rm -rf "$OUT_DIR/share/doc" "$OUT_DIR/bin/ddpbench"
# the worker's modules, installed in libdir/ddpbench, go beside it: the first place it
# looks (worker/module.h), and they get the programs' $ORIGIN/../lib below
find "$STAGE$prefix" -path '*/ddpbench/*.so' -type f -exec cp {} "$OUT_DIR/bin/" \;
# what run-on-device.sh runs beside the programs (present when the build has CUDA)
for t in "$B"/tests/gpu/test_gpu_* "$B/tests/gpu/gpu_probe" "$B/tests/gpu/nccl_allreduce_plain"; do
    if [ -f "$t" ] && [ -x "$t" ]; then cp "$t" "$OUT_DIR/bin/"; fi
done
cp "$ROOT/tests/gpu/gpu_libs.py" "$ROOT/tests/gpu/bundle_check.py" \
    "$ROOT/tests/gpu/device_report.py" "$OUT_DIR/bin/"
# the framework engines' adapters: the daemon runs them with --engines-dir (the pytorch
# engine on cuda is one of the device stages)
mkdir -p "$OUT_DIR/engines"
cp "$ROOT"/engines/*.py "$OUT_DIR/engines/"
# the tables the engines read beside them at ../schema/ (vocabulary.json, through
# engines/ddpb_vocab.py): every top-level JSON file of schema/, so a new one needs no edit
mkdir -p "$OUT_DIR/schema"
for f in "$ROOT"/schema/*.json; do
    if [ -f "$f" ]; then cp "$f" "$OUT_DIR/schema/"; fi
done
mkdir -p "$OUT_DIR/bench"
cp "$ROOT/tests/bench/resnet50_torch_amp.py" "$OUT_DIR/bench/"
cp "$ROOT/tests/gpu/run-on-device.sh" "$OUT_DIR/"

# gather: every library ldd resolves for a binary that is not the system's, the driver's or the
# Python environment's (bundle_check.py's classes), copied under its soname
mkdir -p "$OUT_DIR/lib"
expects=$(mktemp)
for f in "$OUT_DIR"/bin/*; do
    python3 "$ROOT/tests/gpu/bundle_check.py" --classify "$f" "$GPU_LIB_PATH"
done | sort -u | while read -r kind name where user; do
    case $kind in
    bundled)
        [ "$where" != "not_found" ] || { echo "bundle.sh: $user needs $name, not found here" >&2; exit 1; }
        [ -f "$OUT_DIR/lib/$name" ] || cp -L "$where" "$OUT_DIR/lib/$name" ;;
    python | driver) echo "$kind $name $user" >>"$expects" ;;
    esac
done
# shellcheck disable=SC2016 # $ORIGIN is the loader's, not the shell's
for f in "$OUT_DIR"/bin/*; do
    if head -c4 "$f" | grep -q ELF; then patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$f"; fi
done
for f in "$OUT_DIR"/lib/*; do
    chmod u+w "$f"
    # shellcheck disable=SC2016
    patchelf --set-rpath '$ORIGIN' "$f"
done

{
    echo "# libraries this bundle takes from the machine it runs on (kind name needed-by)"
    echo "# python: the Python environment's NVIDIA wheels (gpu_libs.py finds them);"
    echo "# driver: the NVIDIA driver. Built against: nccl $NCCL_VERSION ($NCCL_FROM)," \
         "cudnn $CUDNN_VERSION ($CUDNN_FROM), cublas $CUBLAS_VERSION ($CUBLAS_FROM)"
    echo "driver libcuda.so.1 dlopened-by-the-static-CUDA-runtime"
    awk '{a[$1" "$2] = a[$1" "$2] (a[$1" "$2] ? "," : "") $3} END {for (k in a) print k, a[k]}' "$expects" | sort
} >"$OUT_DIR/EXPECTS"
rm -f "$expects"
size=$(du -sb "$OUT_DIR" | cut -f1)
{
    echo "ddpbench bundle, made $(date -u +%FT%TZ) on $(hostname) by tests/gpu/bundle.sh"
    echo "commit: $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
    echo "build: $B"
    grep -E 'define DDPB_(HAVE|NCCL)' "$B/ddpb_config.h" || true
    echo "size: $size bytes unpacked (the .tgz a device call carries: limit $LIMIT)"
    echo "files:"
    (cd "$OUT_DIR" && find bin lib -type f -printf '  %7k KiB %p\n' | sort -k3)
} >"$OUT_DIR/MANIFEST"

echo "bundle: $OUT_DIR, $((size >> 20)) MiB; takes from the machine:"
grep -v '^#' "$OUT_DIR/EXPECTS" | sed 's/^/  /'
python3 "$ROOT/tests/gpu/bundle_check.py" "$OUT_DIR" --gpu-lib-path "$GPU_LIB_PATH"
out_abs=$(cd "$OUT_DIR" && pwd)
tar czf "$out_abs.tgz" -C "$(dirname "$out_abs")" "$(basename "$out_abs")"
carried=$(stat -c %s "$out_abs.tgz")
echo "bundle: $out_abs.tgz, $((carried >> 20)) MiB to carry ($((size >> 20)) MiB unpacked)"
if [ "$carried" -ge "$LIMIT" ]; then
    echo "bundle.sh: $out_abs.tgz is $carried bytes, over the $LIMIT a device call may carry with the tree" >&2
    exit 1
fi
