#!/bin/sh
# Creates .venv/: the one virtual environment for what Debian does not package. It sees
# Debian's site packages (--system-site-packages), so the engines' torch, torchvision and
# numpy are Debian's (deploy/install-deps.sh --engines) and only the rest comes from PyPI:
#   schemathesis      tests/integration/test_schemathesis.py against a real daemon
#   tensorflow-cpu    the tensorflow engine (2.15: the last to take numpy < 2, which
#                     Debian's torch was built against)
#   deepspeed         the deepspeed engine (its CPU ops build at run time with ninja)
#   horovod           the horovod engine, built here against Debian's torch and .venv's
#                     TensorFlow (framework torch and keras, issue 33) with both
#                     controllers, Gloo and MPI (Debian's OpenMPI), and no MXNet: the run
#                     picks the controller (backend tcp = Gloo, mpi = MPI)
#   pytorch-lightning the lightning engine (2.0: the last line whose Trainer runs on torch
#                     1.13), installed without its dependencies so pip never brings
#                     another torch; its small ones (lightning-utilities, torchmetrics,
#                     fsspec) pinned beside it
#   tfrecord          the torch engines' TFRecord Example parser (issue 34:
#                     engines/ddpb_torch_data.py), with crc32c, which it imports; both
#                     --no-deps (its protobuf and numpy are the ones above)
# Pinned, so a CI run tests with what a developer tested with; created once, then reused
# offline: a stamp file holds the pins it was made with, and a change of pin remakes it.
# Needs python3-venv, python3-dev, cmake, libtorch-dev, libopenmpi-dev (deploy/install-deps.sh
# --engines)
# and PyPI on the first run. The daemon runs framework engines with .venv/bin/python.
set -eu
cd "$(dirname "$0")/.."
SCHEMATHESIS=4.32.5
TENSORFLOW=2.15.1
DEEPSPEED=0.14.4
HOROVOD=0.28.1
LIGHTNING=2.0.9.post0
LIGHTNING_DEPS="lightning-utilities==0.9.0 torchmetrics==1.1.2 fsspec==2023.9.2"
TFRECORD=1.14.6
CRC32C=2.7.1
# the last word is this script's layout: a change of how it installs remakes the venv too
PINS="schemathesis==$SCHEMATHESIS tensorflow-cpu==$TENSORFLOW deepspeed==$DEEPSPEED horovod==$HOROVOD pytorch-lightning==$LIGHTNING tfrecord==$TFRECORD crc32c==$CRC32C layout-5"
venv=.venv
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/ddpb-pins" 2>/dev/null)" = "$PINS" ]; then
    exit 0
fi
# checked before the old venv goes: Horovod's MPI controller needs OpenMPI's compilers
for tool in mpicc mpicxx mpirun; do
    command -v "$tool.openmpi" >/dev/null || {
        echo "setup-venv: $tool.openmpi is missing: Horovod's MPI controller builds against" \
            "Debian's OpenMPI (libopenmpi-dev openmpi-bin: deploy/install-deps.sh)" >&2
        exit 1
    }
done
echo "setup-venv: installing $PINS into $venv"
rm -rf "$venv"
/usr/bin/python3 -m venv --system-site-packages "$venv"
pip="$venv/bin/pip install -q --disable-pip-version-check --no-cache-dir"
# schemathesis with every dependency of its own (--ignore-installed): Debian's urllib3 1.26
# and hypothesis would otherwise satisfy its requirements on paper, and its event-stream
# reader needs urllib3 2 (HTTPResponse.read1); they shadow Debian's only inside .venv
$pip --ignore-installed "schemathesis==$SCHEMATHESIS"
$pip "tensorflow-cpu==$TENSORFLOW"
# Both build against the torch they find (Debian's): no build isolation, or pip would fetch
# another torch into a throwaway environment to build with.
# DS_BUILD_SHM_COMM: the one op deepspeed.comm's CPU backend loads at init (its shared-memory
# allreduce) is compiled here, into the package. Left to DeepSpeed, the first run on a
# machine compiled it just in time (~50 s of that run's init, its other ranks waiting on
# the build lock) and again whenever the venv's path changed.
DS_ACCELERATOR=cpu DS_BUILD_SHM_COMM=1 MAX_JOBS="$(nproc)" \
    $pip --no-build-isolation "deepspeed==$DEEPSPEED"
# Horovod against OpenMPI by name: with MPICH installed too, the unsuffixed mpicc/mpirun are
# whichever Debian's alternatives chose, and cmake's FindMPI takes the first mpicc on PATH.
# A folder of OpenMPI's suffixed programs under their plain names, first on PATH, pins it.
# No HOROVOD_CPU_OPERATIONS: the engine sets it per run (gloo or mpi) with the controller.
mpibin=$(mktemp -d)
trap 'rm -rf "$mpibin"' EXIT
for tool in mpicc mpicxx mpirun mpiexec; do
    ln -s "/usr/bin/$tool.openmpi" "$mpibin/$tool"
done
PATH="$mpibin:$PATH" MPICC=mpicc.openmpi MPICXX=mpicxx.openmpi CC=gcc CXX=g++ \
    HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
    HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 \
    MAKEFLAGS="-j$(nproc)" $pip --no-build-isolation "horovod==$HOROVOD"
# --no-deps: Lightning's requirements would replace Debian's torch with PyPI's
# shellcheck disable=SC2086 # LIGHTNING_DEPS is a list of words
$pip --no-deps "pytorch-lightning==$LIGHTNING" $LIGHTNING_DEPS
$pip --no-deps "tfrecord==$TFRECORD" "crc32c==$CRC32C"
echo "$PINS" >"$venv/ddpb-pins"
