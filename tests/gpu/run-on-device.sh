#!/bin/bash
# run-on-device.sh: the whole GPU path in one device call, from a bundle made here by
# tests/gpu/bundle.sh (this file is copied into it). Nothing is built or installed there.
#
#   tests/gpu/bundle.sh build-bundle        # here
#   build-bundle/run-on-device.sh [OUTDIR]  # there; OUTDIR defaults to $OUT, else a temp dir
#
# Stages, most important first, each bounded so the call ends within BUDGET_S (default
# 540 s; a stage that would start with too little time left is logged as skipped):
#   1. what it found: driver, GPUs, CUDA runtime, cuBLAS/cuDNN/NCCL versions and the files
#      loaded (gpu_probe), PyTorch's versions, and bundle_check.py against the Python
#      environment's wheels (tests/gpu/gpu_libs.py finds them; LD_LIBRARY_PATH is set to
#      exactly those directories);
#   2. resnet50 at batch 128, bf16 then fp32, synthetic 3x224x224, one GPU: ddpbench's
#      train workload through the bundle's daemon (cudnn_benchmark on), against PyTorch
#      with channels_last and cudnn.benchmark (bench/resnet50_torch_amp.py: AMP bf16, and
#      true fp32 with TF32 off as ddpbench's fp32): images/s and ratio, the phases, device
#      peak memory per rank against torch.cuda.max_memory_allocated, NVML utilisation and
#      power as the daemon stored them, cuDNN's choices from the rank's log
#      (bin/device_report.py prints it all, with a RESULTS.md table row);
#   3. the GPU test suite: test_gpu_layers (if it crashes, again under cuDNN's API log,
#      whose tail is kept, then each cuDNN case alone: a crash must not hide the cases
#      after it), test_gpu_nccl, test_gpu_train; a failed test_gpu_train case runs again under
#      NVIDIA_TF32_OVERRIDE=0 (TF32 off process-wide: a failure that disappears is TF32
#      leaking into fp32, one that stays is not);
#   4. the pytorch engine on cuda through the bundle's daemon (resnet50 fp32, batch 64;
#      engines/ is in the bundle, run under $PYTHON);
#   5. NCCL allreduce 4 KiB..256 MiB: ddpbench's collective workload against
#      nccl_allreduce_plain timed the same way (ratio plain time / ddpbench time = the
#      busbw ratio; with one GPU both run one rank, where busbw is 0 by definition);
#   6. resnet50 at batch 256, bf16 then fp32, as stage 2 (last: the least needed).
# Writes OUTDIR/summary.txt (the headlines), OUTDIR/log.txt (every command's output) and
# OUTDIR/artifacts.tar.gz (daemon and rank logs, results and runs as JSON, test outputs):
# three files, since the device tool returns at most eight. Env: PYTHON (default python3,
# the one with PyTorch), BUDGET_S, TRAIN_SPEC_EXTRA (JSON object merged into every
# ddpbench resnet50 spec, e.g. '{"cudnn_benchmark": false}'), SKIP (space-separated
# stage names to leave out: resnet50-128 tests engine nccl resnet50-256).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUTDIR=${1:-${OUT:-$(mktemp -d)}}
mkdir -p "$OUTDIR"
PY=${PYTHON:-python3}
START=$(date +%s)
DEADLINE=$((START + ${BUDGET_S:-540}))
WORK=$(mktemp -d)
SUMMARY=$OUTDIR/summary.txt
LOG=$OUTDIR/log.txt
: >"$SUMMARY"
: >"$LOG"
DPID=""
finish() {
    [ -n "$DPID" ] && kill "$DPID" 2>/dev/null && wait "$DPID" 2>/dev/null
    tar -czf "$OUTDIR/artifacts.tar.gz" -C "$WORK" . 2>/dev/null
    rm -rf "$WORK"
}
trap finish EXIT
say() { echo "== $*" | tee -a "$SUMMARY" "$LOG"; }
# run CAP CMD...: CMD with a time limit of CAP seconds or what is left, output to the log
run() {
    local cap=$1 left
    shift
    left=$((DEADLINE - $(date +%s) - 15))
    [ "$left" -lt "$cap" ] && cap=$left
    if [ "$cap" -le 0 ]; then
        echo "(no time left for: $*)" >>"$LOG"
        return 124
    fi
    echo "\$ $* (limit ${cap}s, at $(($(date +%s) - START)) s)" >>"$LOG"
    timeout "$cap" "$@" 2>&1 | tee -a "$LOG"
    return "${PIPESTATUS[0]}"
}
# run_to FILE CAP CMD...: as run, with the output into FILE only (a verbose log that must
# not swell log.txt)
run_to() {
    local file=$1 cap=$2 left
    shift 2
    left=$((DEADLINE - $(date +%s) - 15))
    [ "$left" -lt "$cap" ] && cap=$left
    if [ "$cap" -le 0 ]; then
        echo "(no time left for: $*)" >>"$LOG"
        return 124
    fi
    echo "\$ $* >$(basename "$file") (limit ${cap}s, at $(($(date +%s) - START)) s)" >>"$LOG"
    timeout "$cap" "$@" >"$file" 2>&1
}
# stage NAME: true unless SKIP names it; says so in the summary when it does
stage() {
    case " ${SKIP:-} " in *" $1 "*) say "$1: skipped (SKIP)"; return 1 ;; esac
    say "$1: starting at $(($(date +%s) - START)) s"
}
REPORT=$HERE/bin/device_report.py

# --- 1. what is here ------------------------------------------------------------------
say "run-on-device: $(date -u +%FT%TZ) on $(hostname), bundle $(sed -n 2p "$HERE/MANIFEST")"
run 30 nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader \
    | sed 's/^/   gpu /' >>"$SUMMARY"
if ! eval "$("$PY" "$HERE/bin/gpu_libs.py" --runtime)"; then
    say "gpu_libs.py failed under $PY: no Python environment to take cuBLAS/cuDNN/NCCL from"
    exit 1
fi
for part in NCCL CUDNN CUBLAS; do
    lib=${part}_LIB ver=${part}_VERSION from=${part}_FROM
    say "${part,,}: ${!ver:-?} from ${!from:-nowhere}: ${!lib:-not found}"
done
export LD_LIBRARY_PATH=$GPU_LIB_PATH
run 60 "$HERE/bin/gpu_probe" >"$WORK/probe.txt"
sed 's/^/   /' "$WORK/probe.txt" >>"$SUMMARY"
NGPU=$(sed -n 's/^devices: \([0-9]*\).*/\1/p' "$WORK/probe.txt")
NGPU=${NGPU:-0}
run 120 "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
    "cudnn", torch.backends.cudnn.version(), "nccl", ".".join(map(str, torch.cuda.nccl.version())))' \
    | tail -1 | sed 's/^/   /' >>"$SUMMARY"
if run 120 "$PY" "$HERE/bin/bundle_check.py" "$HERE" --gpu-lib-path "$GPU_LIB_PATH" \
    >"$WORK/bundle_check.txt"; then
    say "bundle_check: ok (every library from the bundle, the system, the driver or the wheels)"
else
    say "bundle_check: FAILED:"
    grep MISSING "$WORK/bundle_check.txt" | tee -a "$SUMMARY"
fi
if [ "$NGPU" -lt 1 ]; then
    say "no GPU visible (gpu_probe above says why): stopping before the tests"
    exit 1
fi

# --- the bundle's daemon, for every workload below ---------------------------------------
cat >"$WORK/api.py" <<'PYEOF'
"""api.py URL SPEC_JSON OUT_PREFIX TIMEOUT: submits, waits, saves the experiment, its first
run and its results as OUT_PREFIX.{experiment,run,results}.json; prints the status."""
import json, sys, time, urllib.error, urllib.request
url, spec, prefix, timeout = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
def call(path, body=None):
    req = urllib.request.Request(url + path, data=body and body.encode(), method="POST" if body else "GET",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        sys.exit(f"{path}: HTTP {e.code}: {e.read().decode(errors='replace')}")
exp = call("/v1/experiments", spec)
deadline = time.time() + timeout
while time.time() < deadline:
    exp = call(f"/v1/experiments/{exp['id']}")
    if exp["status"] in ("succeeded", "failed", "cancelled", "interrupted"):
        break
    time.sleep(1)
if exp["status"] not in ("succeeded", "failed", "cancelled", "interrupted"):
    try:  # out of time: the next stage needs the GPU
        urllib.request.urlopen(urllib.request.Request(
            f"{url}/v1/experiments/{exp['id']}/cancel", data=b"{}", method="POST",
            headers={"Content-Type": "application/json"}), timeout=30).read()
        time.sleep(3)
    except (OSError, urllib.error.HTTPError) as ex:
        print("cancel:", ex)
json.dump(exp, open(prefix + ".experiment.json", "w"), indent=1)
json.dump(call(f"/v1/experiments/{exp['id']}/results"), open(prefix + ".results.json", "w"), indent=1)
if exp.get("runs"):
    json.dump(call(f"/v1/runs/{exp['runs'][0]['id']}"), open(prefix + ".run.json", "w"), indent=1)
print(exp["status"])
PYEOF
STATE=$WORK/state
mkdir -p "$STATE"
PYPATH=$(command -v "$PY")
"$HERE/bin/ddpbenchd" --port 0 --store-port 0 --state-dir "$STATE" --gpus "$NGPU" \
    --web-dir "$HERE/share/ddpbench/web" --engines-dir "$HERE/engines" --python "$PYPATH" \
    --log-level info >"$WORK/daemon.log" 2>&1 &
DPID=$!
for _ in $(seq 100); do [ -f "$STATE/ddpbenchd.json" ] && break; sleep 0.1; done
URL=$("$PY" -c "import json; print(json.load(open('$STATE/ddpbenchd.json'))['url'])" 2>/dev/null)
[ -n "$URL" ] || { say "ddpbenchd did not start:"; tail -5 "$WORK/daemon.log" | tee -a "$SUMMARY"; exit 1; }
say "ddpbenchd at $URL, $NGPU GPU slot(s), engines under $PYPATH"

# resnet50 BATCH: PyTorch (bf16, fp32) in one process, then ddpbench bf16 and fp32
resnet50() {
    local b=$1 p steps warm cap spec st
    # bounds: run 1 took 12 s for 60 bf16 steps at batch 64 (setup included), PyTorch's
    # process under 30 s; each cap is several times what a healthy stage needs
    run 100 "$PY" "$HERE/bench/resnet50_torch_amp.py" --batch "$b" --steps 30 --warmup 10 \
        --precision bf16,fp32 >"$WORK/torch_resnet50_$b.txt"
    for p in bf16 fp32; do
        steps=40 warm=10 cap=90
        [ "$p" = fp32 ] && steps=25 warm=5 cap=120 # true fp32 is slower: fewer steps
        spec=$("$PY" "$REPORT" spec "resnet50-$p-$b" ddpbench resnet50 $p "$b" $steps $warm \
            "${TRAIN_SPEC_EXTRA:-}")
        st=$(run $cap "$PY" "$WORK/api.py" "$URL" "$spec" "$WORK/resnet50_${p}_$b" $((cap - 10)) |
            tail -1)
        say "ddpbench resnet50 $p batch $b: $st"
        "$PY" "$REPORT" train "$WORK/resnet50_${p}_$b" "$WORK/torch_resnet50_$b.txt" $p "$b" \
            "$STATE" 2>&1 | tee -a "$SUMMARY" "$LOG"
    done
}

# --- 2. resnet50 batch 128, bf16 and fp32 ------------------------------------------------
if stage resnet50-128; then resnet50 128; fi

# --- 3. the GPU test suite ------------------------------------------------------------
# one_test BIN [CASE]: runs it (all cases, or those whose name holds CASE), says the result
one_test() {
    local t=$1 c=${2:-} name rc out
    name=$(basename "$t")${2:+.$2}
    out=$WORK/$name.txt
    run 150 "$t" ${c:+"$c"} >"$out"
    rc=$?
    say "$name: rc $rc, $(grep -E '^TEST-SUMMARY' "$out" | tail -1)"
    grep -E '^(not ok|skip) |FAIL' "$out" | sed 's/^/   /' | tee -a "$SUMMARY"
    if [ "$rc" -ge 128 ] && [ "$rc" -ne 137 ]; then # a signal: its frames, then cuDNN's view
        grep -A24 'CRASH' "$out" | sed 's/^/   /' >>"$SUMMARY"
        # to stderr, which is unbuffered: a log file's last calls could die in its buffer
        run_to "$WORK/$name.cudnn.txt" 60 env CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG=stderr \
            "$t" ${c:+"$c"}
        say "$name again with cuDNN's API log (CUDNN_LOGLEVEL_DBG=3): rc $?; its last lines:"
        tail -80 "$WORK/$name.cudnn.txt" | cut -c1-200 | sed 's/^/   /' >>"$SUMMARY"
        gzip -f "$WORK/$name.cudnn.txt"
    fi
    return "$rc"
}
if stage tests; then
    # test_gpu_layers whole, as run 1 ran it; if it dies of a signal, each cuDNN case again
    # alone: one that passes alone crashed only after the cuBLAS cases before it
    if [ -x "$HERE/bin/test_gpu_layers" ] && ! one_test "$HERE/bin/test_gpu_layers" &&
        grep -q CRASH "$WORK/test_gpu_layers.txt"; then
        for c in test_conv_benchmark test_bn_fused_fp16 test_bn_fused_bf16; do
            one_test "$HERE/bin/test_gpu_layers" $c
        done
    fi
    [ -x "$HERE/bin/test_gpu_nccl" ] && one_test "$HERE/bin/test_gpu_nccl"
    if [ -x "$HERE/bin/test_gpu_train" ] && ! one_test "$HERE/bin/test_gpu_train"; then
        # the fp32 cases only (TF32 cannot touch the half-precision ones)
        sed -n 's/^not ok //p' "$WORK/test_gpu_train.txt" | grep -E 'resnet18|benchmark' |
            while read -r c; do
                run 60 env NVIDIA_TF32_OVERRIDE=0 "$HERE/bin/test_gpu_train" "$c" \
                    >"$WORK/$c.notf32.txt"
                say "$c again with NVIDIA_TF32_OVERRIDE=0: rc $?"
                grep -E '^(ok|not ok) |FAIL|^    ' "$WORK/$c.notf32.txt" | grep -v 'cudnn conv' |
                    sed 's/^/   /' | tee -a "$SUMMARY"
            done
    fi
    if [ -f "$WORK/test_gpu_train.txt" ]; then # which algorithms fp32 ran (Winograd? FFT?)
        say "test_gpu_train's cuDNN choices (count dtype direction algo math how):"
        sed -nE 's/.*cudnn conv ([a-z0-9]+) ([a-z-]+) .*: algo ([0-9]+), ([a-z_]+) math.*, (measured|heuristic|cached)$/\1 \2 algo \3 \4 \5/p' \
            "$WORK/test_gpu_train.txt" | sort | uniq -c | sed 's/^/   /' >>"$SUMMARY"
    fi
fi

# --- 4. the pytorch engine on cuda, through the daemon ---------------------------------
if stage engine; then
    SPEC=$("$PY" "$REPORT" spec torch-resnet50-fp32-64 pytorch resnet50 fp32 64 20 5)
    ST=$(run 120 "$PY" "$WORK/api.py" "$URL" "$SPEC" "$WORK/engine_pytorch" 110 | tail -1)
    say "pytorch engine, resnet50 fp32 batch 64 on cuda: $ST"
    "$PY" "$REPORT" engine "$WORK/engine_pytorch" 2>&1 | tee -a "$SUMMARY" "$LOG"
fi

# --- 5. NCCL allreduce busbw: ddpbench against the plain loop -------------------------
if stage nccl; then
    W=$NGPU
    run 100 "$HERE/bin/nccl_allreduce_plain" "$W" 4096 268435456 20 5 >"$WORK/plain.txt"
    SPEC='{"name":"nccl-allreduce","workload":"collective","device":"cuda","backend":"nccl",
      "world_size":'$W',"op":"allreduce","dtype":"float32","min_bytes":"4K","max_bytes":"256M",
      "factor":4,"iters":20,"warmup":5,"timeout_s":100}'
    ST=$(run 110 "$PY" "$WORK/api.py" "$URL" "$SPEC" "$WORK/nccl" 100 | tail -1)
    say "ddpbench nccl allreduce, world $W: $ST"
    "$PY" "$REPORT" nccl "$WORK/plain.txt" "$WORK/nccl.results.json" "$W" 2>&1 | tee -a "$SUMMARY" "$LOG"
fi

# --- 6. resnet50 batch 256 -------------------------------------------------------------
if stage resnet50-256; then resnet50 256; fi
say "done in $(($(date +%s) - START)) s; details in log.txt and artifacts.tar.gz"
