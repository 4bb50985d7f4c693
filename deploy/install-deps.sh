#!/bin/sh
# Installs the Debian packages ddpbench needs. The one place the package list lives.
#   deploy/install-deps.sh           build + test dependencies
#   deploy/install-deps.sh --bench   also the peers the benchmarks compare against
#   deploy/install-deps.sh --engines also the frameworks the engines run (issue 16): PyTorch and
#                                    torchvision from Debian, and what deploy/setup-venv.sh needs
#                                    to put TensorFlow, DeepSpeed and Horovod (built against
#                                    Debian's torch) into .venv; then it runs setup-venv.sh
#   deploy/install-deps.sh --engine-packages
#                                    the same Debian packages as --engines, without .venv:
#                                    the test command's form, since tests/run.sh makes .venv
#                                    itself beside its C builds (~5 minutes of PyPI and
#                                    Horovod's compile that would otherwise come first)
# The flags combine (--bench --engines).
# Uses sudo only when not root; does nothing when everything is already installed.
set -eu

PKGS="build-essential meson ninja-build pkg-config python3 curl ca-certificates systemd iproute2
      libmicrohttpd-dev libgnutls28-dev openssl libjansson-dev libsqlite3-dev sqlite3 zlib1g-dev
      libpng-dev libjpeg62-turbo-dev libzstd-dev libfuse3-dev fuse3
      libcurl4-openssl-dev uthash-dev libopenmpi-dev openmpi-bin mpich libmpich-dev libdnnl-dev patchelf
      dataset-fashion-mnist
      clang libclang-rt-14-dev clang-format prometheus python3-jsonschema python3-yaml
      python3-venv
      chromium chromium-driver python3-selenium poppler-utils
      slurm-wlm munge slurmdbd mariadb-server-core"
# poppler-utils: pdftotext / pdftoppm read back the report Chromium printed to PDF
# (tests/integration/test_report_pdf.py).
# libfuse3-dev: ddpbench-fs (fs/), the storage profiles as a FUSE mount; fuse3: its
# fusermount3 (mounts as non-root, `fusermount3 -uz` detaches a stale mount).
# libgnutls28-dev: ddpbenchd checks --tls-cert/--tls-key with GnuTLS, the library
# libmicrohttpd serves TLS with; openssl: deploy/tls-keys.sh makes a cluster's keys.
# slurmdbd, mariadb-server-core: tests/integration/slurmlab.py runs Slurm with accounting
# (slurmdbd on a MariaDB of its own) so sacct lists a job's steps; the server's core only
# (mariadbd, ~8 MB): the mariadb-server package would start a system database on install.
# libopenblas0-pthread: python3-torch only asks for some libblas.so.3, and with the reference
# libblas3 alone its linear layers run unoptimised; the PyTorch peer gets Debian's OpenBLAS.
# python3-pil, python3-numpy: bench_data.py makes its images with numpy, and its PyTorch peer
# (data_torch.py) decodes the JPEG files with PIL, as torchvision's loaders do.
BENCH_PKGS="python3-torch libopenblas0-pthread iperf3 hyperfine wrk python3-pil python3-numpy"

# engines/: torch.distributed (gloo on the CPU) and torchvision's models; OpenBLAS for the
# same reason as the bench peer (~150 s to install on the CI image); libtorch-dev (torch's
# C++ headers), python3-dev and cmake to build Horovod's torch extension in .venv (its MPI
# controller against libopenmpi-dev, which the base list has);
# pybind11-dev because Debian's torch headers include <pybind11/pybind11.h> from the system
# (a torch wheel bundles it; Debian's python3-torch only recommends it, and recommends are
# not installed here).
ENGINE_PKGS="python3-torch python3-torchvision libopenblas0-pthread libtorch-dev python3-dev
             pybind11-dev cmake"

engines=""
for arg in "$@"; do
    case "$arg" in
    --bench) PKGS="$PKGS $BENCH_PKGS" ;;
    --engines)
        PKGS="$PKGS $ENGINE_PKGS"
        engines=1
        ;;
    --engine-packages) PKGS="$PKGS $ENGINE_PKGS" ;;
    *)
        echo "install-deps: unknown option $arg (use --bench, --engines or --engine-packages)" >&2
        exit 2
        ;;
    esac
done

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
venv() {
    [ -z "$engines" ] || "$(dirname "$0")/setup-venv.sh"
}
# The emulated storage profiles are FUSE mounts (ddpbench-fs): the kernel's fuse module and
# its device node. A container or minimal VM may have the module but no /dev/fuse; as root
# this makes the node (misc device 10:229, as udev would). Where the kernel has no FUSE at
# all the daemon refuses such runs with 409 naming dataset.storage.
fuse_device() {
    [ -c /dev/fuse ] && return 0
    [ "$(id -u)" -eq 0 ] || return 0
    modprobe fuse 2>/dev/null || true
    [ -c /dev/fuse ] || mknod -m 0666 /dev/fuse c 10 229 ||
        echo "install-deps: no /dev/fuse (the storage mounts need it)" >&2
}
if [ -z "$missing" ]; then
    echo "install-deps: all packages present"
    fuse_device
    venv
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
echo "install-deps: installing$missing"
$SUDO apt-get update -qq
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fuse_device
venv
