#!/bin/bash
# bench_gpu.sh: everything issue 8 needs a GPU for, in ONE device call (< 10 minutes):
#   1. prints what the machine has (GPU, CUDA, NCCL, cuDNN, PyTorch), then builds ddpbench
#      with CUDA, NCCL and cuDNN -- from /usr/local/cuda, or the pip wheels'
#      (nvidia-nccl-cu13 / nvidia-cudnn-cu13, already installed: the device has no network)
#      when /usr/local/cuda lacks them;
#   2. runs tests/gpu (meson suite 'gpu': test_gpu_layers, test_gpu_nccl, and
#      test_gpu_train, the model runner against the CPU engine and mixed precision);
#   3. allreduce busbw: ddpbench's NCCL path (the worker's collective workload through
#      ddpbenchd, 2 emulated ranks on one GPU) against nccl_allreduce_plain (a plain
#      ncclAllReduce loop, nccl-tests style, the same 2 emulated ranks), ratio per size;
#   4. resnet50 bf16 training images/s, batch 64, synthetic 3x224x224, one GPU: ddpbench's
#      train workload (world 1, strategy ddp, SGD momentum) submitted through ddpbenchd,
#      its stored throughput, against PyTorch AMP bf16 channels_last
#      (resnet50_torch_amp.py, same batch); the ratio ddpbench / PyTorch (target >= 1.0).
# Results go to stdout and, when $OUT is set (the device tool's folder), to $OUT/.
# Run from the repository root:  tests/bench/bench_gpu.sh
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$(mktemp -d)}
CUDA=${CUDA:-/usr/local/cuda}
B=build-bench-gpu
PY=/usr/bin/python3
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }

log "machine: $(date -u +%FT%TZ) $(hostname)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$OUT/summary.txt"
log "nvcc: $($CUDA/bin/nvcc --version 2>/dev/null | tail -1)"
pip_prefix() { $PY -c "import nvidia.$1 as m, os; print(os.path.dirname(m.__file__))" 2>/dev/null ||
               python3 -c "import nvidia.$1 as m, os; print(os.path.dirname(m.__file__))" 2>/dev/null; }
NCCL_OPT=""; CUDNN_OPT=""
if [ -f "$CUDA/include/nccl.h" ]; then log "nccl: $CUDA ($(grep -m1 'define NCCL_VERSION_CODE' $CUDA/include/nccl.h))"
else p=$(pip_prefix nccl); log "nccl: not in $CUDA; pip wheel: ${p:-none}"; [ -n "$p" ] && NCCL_OPT="-Dnccl_prefix=$p" && export LD_LIBRARY_PATH="$p/lib:${LD_LIBRARY_PATH:-}"; fi
if [ -f "$CUDA/include/cudnn.h" ]; then log "cudnn: $CUDA"
else p=$(pip_prefix cudnn); log "cudnn: not in $CUDA; pip wheel: ${p:-none}"; [ -n "$p" ] && CUDNN_OPT="-Dcudnn_prefix=$p" && export LD_LIBRARY_PATH="$p/lib:${LD_LIBRARY_PATH:-}"; fi
log "torch: $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda)' 2>&1 | tail -1)"

# 1. build
if [ ! -f $B/build.ninja ]; then
  meson setup $B -Dcuda=enabled -Dnccl=enabled -Dcudnn=auto -Dbuildtype=release $NCCL_OPT $CUDNN_OPT > "$OUT/setup.log" 2>&1 ||
    { log "meson setup failed (tail of $OUT/setup.log):"; tail -20 "$OUT/setup.log"; exit 1; }
fi
ninja -C $B -j16 > "$OUT/build.log" 2>&1 || { log "build failed:"; tail -30 "$OUT/build.log"; exit 1; }
log "built $B"

# 2. GPU tests
timeout 300 meson test -C $B --suite gpu --no-rebuild --print-errorlogs > "$OUT/gpu_tests.log" 2>&1
log "tests/gpu: $(grep -E '^(Ok|Fail|Timeout):' "$OUT/gpu_tests.log" | tr '\n' ' ')"
grep -E "^(ok|not ok)|FAIL" "$OUT/gpu_tests.log" | tee -a "$OUT/summary.txt"

# 3a. plain NCCL allreduce loop
cc -O2 -std=c11 tests/bench/nccl_allreduce_plain.c -I$CUDA/include ${NCCL_OPT:+-I${NCCL_OPT#-Dnccl_prefix=}/include -L${NCCL_OPT#-Dnccl_prefix=}/lib} \
   -L$CUDA/lib64 -lnccl -lcudart -o $B/nccl_allreduce_plain
timeout 120 $B/nccl_allreduce_plain 2 4096 268435456 20 5 > "$OUT/plain.txt" 2>&1
log "plain ncclAllReduce loop:"; cat "$OUT/plain.txt" | tee -a "$OUT/summary.txt"

# 3b. ddpbench through ddpbenchd: collective workload, 2 emulated ranks
STATE=$(mktemp -d)
$B/daemon/ddpbenchd --port 0 --store-port 0 --state-dir "$STATE" --gpus 1 --log-level warn > "$OUT/daemon.log" 2>&1 &
DPID=$!
for _ in $(seq 100); do [ -f "$STATE/ddpbenchd.json" ] && break; sleep 0.1; done
PORT=$($PY -c "import json; print(json.load(open('$STATE/ddpbenchd.json'))['http_port'])")
SPEC='{"name":"nccl-allreduce-emulated","workload":"collective","device":"cuda","backend":"nccl","emulate_multi_rank":true,"world_size":2,"op":"allreduce","dtype":"float32","min_bytes":"4K","max_bytes":"256M","factor":4,"iters":20,"warmup":5,"timeout_s":300}'
EXP=$(curl -s --json "$SPEC" "http://127.0.0.1:$PORT/v1/experiments" | $PY -c 'import json,sys; print(json.load(sys.stdin)["id"])')
for _ in $(seq 300); do
  ST=$(curl -s "http://127.0.0.1:$PORT/v1/experiments/$EXP" | $PY -c 'import json,sys; print(json.load(sys.stdin)["status"])')
  case $ST in succeeded|failed|cancelled|interrupted) break;; esac; sleep 1
done
curl -s "http://127.0.0.1:$PORT/v1/experiments/$EXP/results" > "$OUT/ddpbench_results.json"
curl -s "http://127.0.0.1:$PORT/v1/runs/$(curl -s "http://127.0.0.1:$PORT/v1/experiments/$EXP" | $PY -c 'import json,sys; print(json.load(sys.stdin)["runs"][0]["id"])')" > "$OUT/ddpbench_run.json"
log "ddpbench experiment $EXP: $ST"
$PY - "$OUT/plain.txt" "$OUT/ddpbench_results.json" <<'PYEOF' | tee -a "$OUT/summary.txt"
import json, sys
plain = {}
for line in open(sys.argv[1]):
    if line[:1].isdigit():
        b, bw, _ = line.split()
        plain[int(b)] = float(bw)
t = json.load(open(sys.argv[2]))
print("bytes  ddpbench_busbw  plain_busbw  ratio  wrong  emulated")
for r in t.get("rows", []):
    p = plain.get(r["bytes"])
    d = r["busbw_gbs_median"]
    print(f'{r["bytes"]:>10} {d:14.2f} {p if p else float("nan"):12.2f} {d / p if p else float("nan"):6.3f} {r["wrong"]:6} {r["emulated"]}')
PYEOF
kill $DPID; wait $DPID 2>/dev/null

# 4. resnet50 bf16 training, batch 64: PyTorch AMP, then ddpbench through ddpbenchd
RB=64
timeout 180 python3 tests/bench/resnet50_torch_amp.py --batch $RB --steps 40 --warmup 10 > "$OUT/torch_resnet50.json" 2>"$OUT/torch_resnet50.err"
log "pytorch resnet50 AMP bf16: $(cat "$OUT/torch_resnet50.json" 2>/dev/null) $(tail -2 "$OUT/torch_resnet50.err")"
STATE=$(mktemp -d)
$B/daemon/ddpbenchd --port 0 --store-port 0 --state-dir "$STATE" --gpus 1 --log-level warn > "$OUT/daemon_train.log" 2>&1 &
DPID=$!
for _ in $(seq 100); do [ -f "$STATE/ddpbenchd.json" ] && break; sleep 0.1; done
PORT=$($PY -c "import json; print(json.load(open('$STATE/ddpbenchd.json'))['http_port'])")
SPEC='{"name":"resnet50-bf16","workload":"train","device":"cuda","backend":"nccl","model":"resnet50","precision":"bf16","dataset":{"name":"synthetic","shape":[3,224,224],"classes":1000},"world_size":1,"batch_size":'$RB',"steps":50,"warmup_steps":10,"strategy":"ddp","optimizer":{"type":"sgd","lr":0.01,"momentum":0.9},"timeout_s":400}'
EXP=$(curl -s --json "$SPEC" "http://127.0.0.1:$PORT/v1/experiments" | $PY -c 'import json,sys; print(json.load(sys.stdin)["id"])')
for _ in $(seq 400); do
  ST=$(curl -s "http://127.0.0.1:$PORT/v1/experiments/$EXP" | $PY -c 'import json,sys; print(json.load(sys.stdin)["status"])')
  case $ST in succeeded|failed|cancelled|interrupted) break;; esac; sleep 1
done
RUN=$(curl -s "http://127.0.0.1:$PORT/v1/experiments/$EXP" | $PY -c 'import json,sys; print(json.load(sys.stdin)["runs"][0]["id"])')
curl -s "http://127.0.0.1:$PORT/v1/experiments/$EXP/results" > "$OUT/ddpbench_resnet50.json"
curl -s "http://127.0.0.1:$PORT/v1/runs/$RUN" > "$OUT/ddpbench_resnet50_run.json"
curl -s "http://127.0.0.1:$PORT/v1/runs/$RUN/steps?warmup=true" > "$OUT/ddpbench_resnet50_steps.json"
log "ddpbench resnet50 bf16 experiment $EXP: $ST"
$PY - "$OUT/torch_resnet50.json" "$OUT/ddpbench_resnet50.json" "$OUT/ddpbench_resnet50_run.json" <<'PYEOF' | tee -a "$OUT/summary.txt"
import json, sys
try:
    peer = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["images_per_s"]
except Exception as ex:
    peer = None
    print("pytorch figure missing:", ex)
run = json.load(open(sys.argv[3]))
if run.get("status") != "succeeded":
    print("ddpbench run", run.get("status"), run.get("error"))
rows = json.load(open(sys.argv[2])).get("rows", [])
r = rows[0] if rows else {}
ours = r.get("throughput_mean")
med = r.get("step_ms_median")
ours_med = 64 * 1000.0 / med if med else None
print("phases (ms, mean):", {k: r.get(k + "_mean") for k in ("forward_ms", "backward_ms", "comm_exposed_ms", "optimizer_ms", "step_ms")})
try:  # the GPU and its peak memory, from rank 0's env event where the run shows it
    env = (run.get("ranks") or [{}])[0].get("env") or {}
    env = json.loads(env) if isinstance(env, str) else env
    print("env:", {k: v for k, v in env.items() if k.startswith("gpu")})
except Exception as ex:
    print("env not shown:", ex)
if ours and peer:
    print(f"resnet50 bf16 batch 64 images/s: ddpbench {ours:.1f} (from median step {ours_med:.1f}), pytorch {peer:.1f}, ratio {ours / peer:.3f} (target >= 1.0)")
else:
    print(f"resnet50 bf16: ddpbench {ours}, pytorch {peer}: no ratio")
PYEOF
kill $DPID; wait $DPID 2>/dev/null
