#!/bin/sh
# The main job, as README.md shows it: install dependencies, build, start ddpbenchd on
# 127.0.0.1 with its SQLite database in ./state, run the default experiment (a 2-rank
# TCP allreduce benchmark, 4 KiB to 64 MiB), print its results and the dashboard address.
# The daemon keeps running afterwards; `kill $(cat state/ddpbenchd.pid)` stops it.
#   PORT=7480 STATE=state SPEC=schema/examples/allreduce-cpu.json deploy/quickstart.sh
set -eu
cd "$(dirname "$0")/.."
PORT=${PORT:-7480}
STATE=${STATE:-state}
SPEC=${SPEC:-schema/examples/allreduce-cpu.json}
URL="http://127.0.0.1:$PORT"

deploy/install-deps.sh
if [ -f build/build.ninja ]; then
    meson setup --reconfigure build -Dbuildtype=release >/dev/null
else
    meson setup build -Dbuildtype=release >/dev/null
fi
ninja -C build

mkdir -p "$STATE"
if curl -sf "$URL/healthz" >/dev/null 2>&1; then
    echo "ddpbenchd already answers at $URL"
else
    nohup build/daemon/ddpbenchd --port "$PORT" --state-dir "$STATE" \
        >>"$STATE/ddpbenchd.log" 2>&1 &
    echo $! >"$STATE/ddpbenchd.pid"
    i=0
    until curl -sf "$URL/healthz" >/dev/null 2>&1; do
        i=$((i + 1))
        if [ $i -gt 100 ]; then
            echo "ddpbenchd did not start; see $STATE/ddpbenchd.log" >&2
            tail -n 20 "$STATE/ddpbenchd.log" >&2
            exit 1
        fi
        sleep 0.1
    done
    echo "ddpbenchd started (pid $(cat "$STATE/ddpbenchd.pid")), log in $STATE/ddpbenchd.log"
fi

echo "submitting $SPEC"
exp=$(curl -sf --json @"$SPEC" "$URL/v1/experiments")
id=$(printf '%s' "$exp" | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
python3 deploy/show_experiment.py "$URL" "$id"
echo
echo "dashboard: $URL/"
echo "API:       curl -s $URL/v1/experiments/$id"
echo "fits:      curl -s $URL/v1/experiments/$id/fit"
echo "report:    $URL/v1/experiments/$id/report"
echo "training:  curl -s --json @schema/examples/train-strategies.json $URL/v1/experiments"
echo "stop:      kill \$(cat $STATE/ddpbenchd.pid)"
