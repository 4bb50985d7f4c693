#!/bin/bash
# run-on-device.sh: the whole GPU path in one device call, from a bundle made here by
# tests/gpu/bundle.sh (this file is copied into it). Nothing is built or installed there.
#
#   tests/gpu/bundle.sh build-bundle        # here
#   build-bundle/run-on-device.sh [OUTDIR]  # there; OUTDIR defaults to $OUT, else a temp dir
#
# In order, each stage bounded so the call ends within BUDGET_S (default 540 s):
#   1. what it found: driver, GPUs, CUDA runtime, cuBLAS/cuDNN/NCCL versions and the files
#      loaded (gpu_probe), PyTorch's versions, and bundle_check.py against the Python
#      environment's wheels (tests/gpu/gpu_libs.py finds them; LD_LIBRARY_PATH is set to
#      exactly those directories);
#   2. the GPU test suite (bin/test_gpu_*; multi-rank cases skip themselves with the reason
#      when there are fewer GPUs than ranks);
#   3. NCCL allreduce 4 KiB..256 MiB: ddpbench's collective workload through the bundle's
#      daemon (world size = number of GPUs) against nccl_allreduce_plain timed the same
#      way (per-iteration event time of the slowest rank, median); ratio plain time /
#      ddpbench time, which is the busbw ratio. With one GPU both run one rank, where busbw
#      is 0 by definition: the ratio then compares one rank's per-iteration time only;
#   4. resnet50 bf16 training, batch 64, synthetic 3x224x224, one GPU: ddpbench's train
#      workload through the daemon with cudnn_benchmark on, against PyTorch AMP bf16 with
#      channels_last and cudnn.benchmark (bench/resnet50_torch_amp.py); ratio ddpbench /
#      PyTorch images/s.
# Writes OUTDIR/summary.txt (the headlines), OUTDIR/log.txt (every command's output) and
# OUTDIR/artifacts.tar.gz (daemon logs, results and runs as JSON): three files, since the
# device tool returns at most eight. Env: PYTHON (default python3, the one with PyTorch),
# BUDGET_S, TRAIN_SPEC_EXTRA (JSON object merged into the resnet50 spec, e.g.
# '{"cudnn_benchmark": false}' to compare with cuDNN's heuristic algorithm choice).
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
    echo "\$ $* (limit ${cap}s)" >>"$LOG"
    timeout "$cap" "$@" 2>&1 | tee -a "$LOG"
    return "${PIPESTATUS[0]}"
}

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

# --- 2. the GPU test suite ------------------------------------------------------------
for t in "$HERE"/bin/test_gpu_*; do
    name=$(basename "$t")
    run 150 "$t" >"$WORK/$name.txt"
    rc=$?
    say "$name: rc $rc, $(grep -E '^TEST-SUMMARY' "$WORK/$name.txt" | tail -1)"
    grep -E '^(not ok|skip) ' "$WORK/$name.txt" | sed 's/^/   /' | tee -a "$SUMMARY"
done

# --- the bundle's daemon, for both benchmarks -------------------------------------------
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
json.dump(exp, open(prefix + ".experiment.json", "w"), indent=1)
json.dump(call(f"/v1/experiments/{exp['id']}/results"), open(prefix + ".results.json", "w"), indent=1)
if exp.get("runs"):
    json.dump(call(f"/v1/runs/{exp['runs'][0]['id']}"), open(prefix + ".run.json", "w"), indent=1)
print(exp["status"])
PYEOF
STATE=$WORK/state
mkdir -p "$STATE"
"$HERE/bin/ddpbenchd" --port 0 --store-port 0 --state-dir "$STATE" --gpus "$NGPU" \
    --web-dir "$HERE/share/ddpbench/web" --log-level info >"$WORK/daemon.log" 2>&1 &
DPID=$!
for _ in $(seq 100); do [ -f "$STATE/ddpbenchd.json" ] && break; sleep 0.1; done
URL=$("$PY" -c "import json; print(json.load(open('$STATE/ddpbenchd.json'))['url'])" 2>/dev/null)
[ -n "$URL" ] || { say "ddpbenchd did not start:"; tail -5 "$WORK/daemon.log" | tee -a "$SUMMARY"; exit 1; }
say "ddpbenchd at $URL, $NGPU GPU slot(s)"

# --- 3. NCCL allreduce busbw: ddpbench against the plain loop -------------------------
W=$NGPU
run 150 "$HERE/bin/nccl_allreduce_plain" "$W" 4096 268435456 20 5 >"$WORK/plain.txt"
SPEC='{"name":"nccl-allreduce","workload":"collective","device":"cuda","backend":"nccl",
  "world_size":'$W',"op":"allreduce","dtype":"float32","min_bytes":"4K","max_bytes":"256M",
  "factor":4,"iters":20,"warmup":5,"timeout_s":200}'
ST=$(run 210 "$PY" "$WORK/api.py" "$URL" "$SPEC" "$WORK/nccl" 200 | tail -1)
say "ddpbench nccl allreduce, world $W: $ST"
"$PY" - "$WORK/plain.txt" "$WORK/nccl.results.json" "$W" <<'PYEOF' 2>&1 | tee -a "$SUMMARY" "$LOG"
import json, sys
plain = {}
for line in open(sys.argv[1]):
    if line[:1].isdigit():
        f = line.split()
        plain[int(f[0])] = (float(f[1]), float(f[2]))
try:
    rows = json.load(open(sys.argv[2])).get("rows", [])
except (OSError, ValueError) as ex:
    rows = []
    print("   ddpbench results missing:", ex)
w = int(sys.argv[3])
print(f"   {'bytes':>10} {'ddpb_us':>9} {'plain_us':>9} {'ddpb_busbw':>10} {'plain_busbw':>11} {'ratio':>6} wrong")
for r in rows:
    b, us, bw = r["bytes"], r.get("time_us_median"), r.get("busbw_gbs_median")
    p = plain.get(b)
    ratio = p[1] / us if p and us else float("nan")
    print(f"   {b:>10} {us or 0:9.1f} {p[1] if p else float('nan'):9.1f} {bw or 0:10.2f} "
          f"{p[0] if p else float('nan'):11.2f} {ratio:6.3f} {r.get('wrong')}")
if w == 1:
    print("   one GPU: one rank each, busbw is 0 by definition; the ratio (plain time / ddpbench"
          " time) is one-rank only and says nothing of the transport")
PYEOF

# --- 4. resnet50 bf16 images/s: ddpbench against PyTorch AMP ---------------------------
RB=64
run 200 "$PY" "$HERE/bench/resnet50_torch_amp.py" --batch $RB --steps 40 --warmup 10 \
    >"$WORK/torch_resnet50.txt"
EXTRA=${TRAIN_SPEC_EXTRA:-}
[ -n "$EXTRA" ] || EXTRA='{}'
SPEC=$("$PY" - "$EXTRA" <<PYEOF
import json, sys
spec = {"name": "resnet50-bf16", "workload": "train", "device": "cuda", "backend": "nccl",
        "model": "resnet50", "precision": "bf16", "cudnn_benchmark": True,
        "dataset": {"name": "synthetic", "shape": [3, 224, 224], "classes": 1000},
        "world_size": 1, "batch_size": $RB, "steps": 50, "warmup_steps": 10, "strategy": "ddp",
        "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9}, "timeout_s": 250}
spec.update(json.loads(sys.argv[1]))
print(json.dumps(spec))
PYEOF
)
ST=$(run 270 "$PY" "$WORK/api.py" "$URL" "$SPEC" "$WORK/resnet50" 250 | tail -1)
say "ddpbench resnet50 bf16 batch $RB: $ST"
"$PY" - "$WORK/torch_resnet50.txt" "$WORK/resnet50.results.json" "$WORK/resnet50.run.json" <<'PYEOF' 2>&1 | tee -a "$SUMMARY" "$LOG"
import json, sys
peer = None
try:
    peer = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])["images_per_s"]
except (OSError, ValueError, IndexError, KeyError) as ex:
    print("   pytorch figure missing:", ex)
try:
    run = json.load(open(sys.argv[3]))
    if run.get("status") != "succeeded":
        print("   ddpbench run", run.get("status"), run.get("error"))
    rows = json.load(open(sys.argv[2])).get("rows", [])
except (OSError, ValueError) as ex:
    rows = []
    print("   ddpbench results missing:", ex)
r = rows[0] if rows else {}
ours = r.get("throughput_mean")
print("   phases (ms, mean):", {k: r.get(k + "_mean") for k in
      ("forward_ms", "backward_ms", "comm_exposed_ms", "optimizer_ms", "step_ms")})
try:  # the GPU and its peak memory, from rank 0's env event
    env = (run.get("ranks") or [{}])[0].get("env") or {}
    env = json.loads(env) if isinstance(env, str) else env
    print("   env:", {k: v for k, v in env.items() if k.startswith("gpu")})
except (NameError, AttributeError, ValueError) as ex:
    print("   env not shown:", ex)
if ours and peer:
    print(f"   images/s: ddpbench {ours:.1f}, pytorch AMP channels_last {peer:.1f}, "
          f"ratio {ours / peer:.3f}")
else:
    print(f"   images/s: ddpbench {ours}, pytorch {peer}: no ratio")
PYEOF
say "done in $(($(date +%s) - START)) s; details in log.txt and artifacts.tar.gz"
