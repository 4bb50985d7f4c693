#!/bin/sh
# The whole test suite, as README.md and .ci/run call it.
#
# Four build trees: build-san/ (ASan + UBSan, GPU code off) runs the unit tests and the
# checks of the tree (suite 'lint': format, include layering), build/ (the optimized tree
# the quickstart uses; GPU code compiled when nvcc is present) runs the integration tests
# against the real programs, build-tsan/ (ThreadSanitizer, GPU code off) runs the threaded
# unit tests (suite 'tsan'), and build-fuzz/ (clang, libFuzzer, ASan + UBSan) runs each
# fuzz target for FUZZ_SECONDS over its committed corpus. build/ also runs the unit tests
# whose behaviour depends on CUDA (suite 'unit-cuda') and the GPU suite, whose cases
# report skipped without a device. Every tree is built with -Dwerror=true (the project's
# default is off, for people building a release). The last line printed is "N passed,
# N failed, N skipped", summed over every test case of every binary and script by
# tests/summarize.py, which also fails the run for a declared test that did not run and
# for any skip outside its short allowed list.
set -u
cd "$(dirname "$0")/.."
root=$(pwd)
# seconds since the run began after each step: where CI's 35 minutes go
t0=$(date +%s)
elapsed() { echo "run.sh: $1 done at $(($(date +%s) - t0)) s"; }

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$root/tests/lsan.supp}"

setup() {
    dir=$1
    shift
    if [ -f "$dir/build.ninja" ]; then
        meson setup --reconfigure "$dir" "$@" >"$dir.setup.log" 2>&1
    else
        meson setup "$dir" "$@" >"$dir.setup.log" 2>&1
    fi || { cat "$dir.setup.log"; return 1; }
}

fail_build() {
    echo "build of $1 failed"
    # no pip of the venv's setup outlives the run (it may be half way through a wheel)
    [ -n "$venv_pid" ] && wait "$venv_pid"
    echo "0 passed, 1 failed"
    exit 1
}

# .venv (schemathesis and the engines' frameworks: deploy/setup-venv.sh) is first needed by
# the integration suite; no unit, lint, tsan or fuzz test uses it. On a fresh machine its
# setup waits much on PyPI (TensorFlow's wheel alone is ~200 MB), not on the cores the C
# trees build on, so it runs beside the builds, its output in build-venv.log; the run
# waits for it, and fails as a build does, when they are done.
deploy/setup-venv.sh >build-venv.log 2>&1 &
venv_pid=$!
setup build-san -Db_sanitize=address,undefined -Db_lundef=false -Dcuda=disabled \
    -Dmpi=enabled -Dbuildtype=debugoptimized -Dwerror=true || fail_build build-san
ninja -C build-san || fail_build build-san
elapsed "build-san"
# Where the CUDA toolkit is, its GPU parts are required, not "auto": a build that lost NCCL
# or cuDNN would otherwise drop their tests without a word.
gpu_opts=""
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    gpu_opts="-Dcuda=enabled -Dnccl=enabled -Dcudnn=enabled"
fi
# shellcheck disable=SC2086
setup build -Dbuildtype=release -Dwerror=true -Dmpi=enabled $gpu_opts || fail_build build
ninja -C build || fail_build build
elapsed "build"
setup build-tsan -Db_sanitize=thread -Db_lundef=false -Dcuda=disabled \
    -Dbuildtype=debugoptimized -Dwerror=true || fail_build build-tsan
# only what suite 'tsan' runs (its tests, the worker and modules they start: see
# tests/suite_targets.py), not every program and test of the tree under ThreadSanitizer
tsan_targets=$(python3 tests/suite_targets.py build-tsan tsan) || fail_build build-tsan
# shellcheck disable=SC2086 # one target a word
ninja -C build-tsan $tsan_targets || fail_build build-tsan
elapsed "build-tsan"
CC=clang setup build-fuzz -Dfuzz=true -Dfuzz_seconds="${FUZZ_SECONDS:-20}" -Dcuda=disabled \
    -Db_sanitize=address,undefined -Db_lundef=false -Dc_args=-fsanitize=fuzzer-no-link \
    -Dwerror=true || fail_build build-fuzz
ninja -C build-fuzz tests/fuzz/fuzz_spec tests/fuzz/fuzz_store_proto tests/fuzz/fuzz_report ||
    fail_build build-fuzz
elapsed "build-fuzz"

# every build is done: the venv's setup is waited for here, before any test, so no test
# (some time their own work) runs beside its pip or its Horovod compile
venv_status=0
wait "$venv_pid" || venv_status=$?
venv_pid=""
if [ "$venv_status" -ne 0 ]; then
    cat build-venv.log
    fail_build .venv
fi
elapsed ".venv"
rm -f build-san/meson-logs/testlog.json build-san/meson-logs/lint.json \
    build/meson-logs/testlog.json build/meson-logs/unit-cuda.json build/meson-logs/gpu.json \
    build/meson-logs/packaging.json \
    build-tsan/meson-logs/testlog-tsan.json build-fuzz/meson-logs/testlog.json
meson test -C build-san --suite unit --print-errorlogs --num-processes 2 ${TEST_ARGS:-}
elapsed "unit tests"
# its own log name: a second run in build-san would overwrite testlog.json
meson test -C build-san --suite lint --no-rebuild --print-errorlogs --logbase lint
elapsed "lint tests"
# the 'tsan' setup sets TSAN_OPTIONS and one OpenMP thread (tests/meson.build says why);
# meson names the log after the setup: testlog-tsan.json
meson test -C build-tsan --suite tsan --setup tsan --print-errorlogs --num-processes 2 \
    ${TEST_ARGS:-}
elapsed "tsan tests"
# two at a time only among the tests tests/meson.build lists as integration_shared (they
# mostly wait); every other integration test has is_parallel false and runs alone
meson test -C build --suite integration --print-errorlogs --num-processes 2 ${TEST_ARGS:-}
elapsed "integration tests"
# what ships to a GPU machine: discovery against a fake wheel tree, the self-contained bundle
meson test -C build --suite packaging --no-rebuild --print-errorlogs --num-processes 1 \
    --logbase packaging
elapsed "packaging tests"
if grep -q "DDPB_HAVE_CUDA 1" build/ddpb_config.h; then
    meson test -C build --suite unit-cuda --no-rebuild --print-errorlogs --logbase unit-cuda
    meson test -C build --suite gpu --no-rebuild --print-errorlogs --logbase gpu
    cuda_logs="build:unit-cuda:build/meson-logs/unit-cuda.json build:gpu:build/meson-logs/gpu.json"
else
    cuda_logs=""
    echo "build/ has no CUDA (no nvcc here): the unit-cuda and gpu suites are not built"
fi
meson test -C build-fuzz --suite fuzz --no-rebuild --print-errorlogs --num-processes 2
elapsed "fuzz tests"

# every suite's declared tests must have run; the last line is "N passed, N failed, N skipped"
# shellcheck disable=SC2086
exec python3 tests/summarize.py build-san:unit:build-san/meson-logs/testlog.json \
    build-san:lint:build-san/meson-logs/lint.json \
    build-tsan:tsan:build-tsan/meson-logs/testlog-tsan.json \
    build:integration:build/meson-logs/testlog.json \
    build:packaging:build/meson-logs/packaging.json $cuda_logs \
    build-fuzz:fuzz:build-fuzz/meson-logs/testlog.json
