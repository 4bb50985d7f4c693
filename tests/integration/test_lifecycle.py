#!/usr/bin/env python3
"""Control plane through the REST API: cancel an experiment or a run (workers stopped,
what was measured kept), delete an experiment and its files, a frozen worker (SIGSTOP)
detected by its missing heartbeat and named, results grouped and exported as CSV (a
header even before any run finished), live
events over Server-Sent Events, Prometheus metrics, bearer-token protection and CORS."""
import csv
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

from harness import Daemon, check, run_cases, wait_gone

LONG = {"workload": "collective", "min_bytes": "16M", "max_bytes": "16M", "iters": 5000,
        "warmup": 0, "timeout_s": 300}
SMALL = {"workload": "collective", "min_bytes": "4K", "max_bytes": "64K", "factor": 4,
         "iters": 5, "warmup": 1}


def running_pids(d, run_id):
    run = d.wait_run(run_id, lambda r: r["status"] == "running" and len(r["ranks"]) == r["world_size"],
                     what="running")
    return [k["pid"] for k in run["ranks"]]


def test_cancel_experiment_keeps_measurements():
    d = Daemon(cpu_slots=2)
    try:
        spec = dict(LONG, name="to-cancel", world_size=2, min_bytes="4K", max_bytes="64M",
                    factor=2, iters=200)
        exp = d.submit(dict(spec, sweep={"repeats": [1, 2]}))
        first = exp["runs"][0]["id"]
        pids = running_pids(d, first)
        d.wait_run(first, lambda r: len(r["collectives"]) >= 2, what="some results")
        status, body, _ = d.request("POST", f"/v1/experiments/{exp['id']}/cancel")
        check(status == 202, (status, body))
        exp = d.wait_experiment(exp["id"], timeout=30)
        check(exp["status"] == "cancelled", exp)
        runs = {r["id"]: r for r in exp["runs"]}
        check(runs[first]["status"] == "cancelled" and "cancelled" in runs[first]["error"], runs[first])
        second = exp["runs"][1]
        check(second["status"] == "cancelled" and second["started_at"] is None, second)
        run = d.get(f"/v1/runs/{first}")
        check(len(run["collectives"]) >= 2, "measurements kept")
        wait_gone(pids)
        status, body, _ = d.request("POST", f"/v1/experiments/{exp['id']}/cancel")
        check(status == 409 and body["error"]["code"] == "conflict", (status, body))
        d.wait_slots_free(2)
    finally:
        d.close()


def test_cancel_one_run_and_delete():
    d = Daemon(cpu_slots=2)
    try:
        exp = d.submit(dict(LONG, name="two-runs", world_size=1, sweep={"seed": [1, 2]}))
        r0, r1 = (r["id"] for r in exp["runs"])
        pids = running_pids(d, r0)
        status, body, _ = d.request("DELETE", f"/v1/experiments/{exp['id']}")
        check(status == 409, (status, body))  # live runs: cancel first
        status, body, _ = d.request("POST", f"/v1/runs/{r0}/cancel")
        check(status == 202 and body["id"] == r0, (status, body))
        d.wait_run(r0, lambda r: r["status"] == "cancelled", what="cancelled")
        wait_gone(pids)
        # the other run is not touched by cancelling its sibling
        check(d.get(f"/v1/runs/{r1}")["status"] in ("queued", "starting", "running"), "sibling kept")
        d.request("POST", f"/v1/runs/{r1}/cancel")
        d.wait_experiment(exp["id"], timeout=30)
        check(os.path.isdir(os.path.join(d.state_dir, "runs", str(r0))), "run files exist")
        status, body, _ = d.request("DELETE", f"/v1/experiments/{exp['id']}")
        check(status == 200 and body["deleted"] == exp["id"] and body["runs"] == 2, (status, body))
        check(not os.path.exists(os.path.join(d.state_dir, "runs", str(r0))), "run files removed")
        status, _, _ = d.request("GET", f"/v1/experiments/{exp['id']}")
        check(status == 404, status)
        status, _, _ = d.request("GET", f"/v1/runs/{r0}")
        check(status == 404, status)
        # the deleted experiment was the newest: its ids are still never handed out again
        again = d.submit(dict(SMALL, name="after-delete", world_size=1))
        check(again["id"] > exp["id"] and again["runs"][0]["id"] > r1, (again, exp["id"], r1))
        d.wait_experiment(again["id"], timeout=60)
    finally:
        d.close()


FROZEN_TRAIN = {"workload": "train", "model": "mnist-cnn", "batch_size": 32, "steps": 100000,
                "timeout_s": 300}


def test_pinned_while_it_fits_marked_when_oversubscribed():
    n = len(os.sched_getaffinity(0))
    d = Daemon(cpu_slots=2 * n)  # twice the node's CPUs: oversubscription allowed
    exps = []
    try:
        # one 1-rank run per CPU: each pinned to a CPU of its own, nothing shared yet
        for i in range(n):
            exps.append(d.submit(dict(LONG, name=f"fits-{i}", world_size=1)))
        runs = [d.wait_run(e["runs"][0]["id"], lambda r: r["status"] == "running" and
                           r["ranks"] and r["ranks"][0]["pid"], what="running") for e in exps]
        cpus = [r["ranks"][0]["cpus"] for r in runs]
        check(all(cpus) and len(set(cpus)) == n, f"pinned to distinct CPUs: {cpus}")
        check(not any(d.get(f"/v1/runs/{r['id']}")["oversubscribed"] for r in runs), "clean")
        # one more rank than CPUs: the newcomer runs unpinned, and every active run shares
        extra = d.submit(dict(LONG, name="extra", world_size=1))
        over = d.wait_run(extra["runs"][0]["id"], lambda r: r["status"] == "running" and
                          r["ranks"] and r["ranks"][0]["pid"], what="running")
        check(not over["ranks"][0]["cpus"], f"unpinned: {over['ranks'][0]}")
        for r in runs + [over]:
            got = d.wait_run(r["id"], lambda x: x["oversubscribed"], timeout=10,
                             what="marked oversubscribed")
            check(got["oversubscribed"] is True, got)
        exps.append(extra)
    finally:  # stop every worker before the next test measures anything
        for e in exps:
            d.request("POST", f"/v1/experiments/{e['id']}/cancel")
        for e in exps:
            d.wait_experiment(e["id"], timeout=60)
        d.close()


def test_frozen_worker_is_named():
    # A long kill grace: a stopped rank never acts on SIGTERM, so the daemon must SIGKILL
    # it at once instead of waiting the grace out.
    d = Daemon(cpu_slots=2, extra_args=["--kill-grace-ms", "30000"])
    try:
        hb_timeout = 3
        # each spec, its ranks' working phase, and the waits the healthy rank can be in once
        # its peer stops (worker/comm/wait_note.c's phrases): LONG's 16 MiB allreduce, or the
        # barrier before its first checked iteration when the peer stopped while still
        # setting up; mnist-cnn's one DDP bucket (87 KB of gradients, under the 1 MiB cap)
        for spec, phase, wait in (
                (LONG, "collective benchmark",
                 r"(allreduce of 16777216 bytes, iteration \d+/5000|barrier)'"),
                (FROZEN_TRAIN, "train repeat 0", r"allreduce bucket 1/1'")):
            exp = d.submit(dict(spec, name="frozen", world_size=2, heartbeat_timeout_s=hb_timeout))
            run_id = exp["runs"][0]["id"]
            pids = running_pids(d, run_id)
            time.sleep(1.5)  # a heartbeat of each rank in its working phase
            run, took = d.freeze_rank(exp["id"], run_id, pids[1])
            check(run["status"] == "failed", run)
            check(took < hb_timeout + 4, f"failed {took:.1f} s after the stop: waited the grace?")
            wait_gone(pids, timeout=2)
            err = run["error"]
            check(run["error_rank"] == 1 and err.startswith("rank 1 stopped reporting"), err)
            check("its last heartbeat" in err and f"said '{phase}" in err, err)
            # what the healthy peer was doing: its heartbeat phase, unchanged since the freeze,
            # naming the collective it waits in for the frozen rank
            check(f"meanwhile rank 0 had been in '{phase}" in err, err)
            check(re.search(r"meanwhile rank 0 had been in '[^']*; waiting in " + wait, err),
                  err)
            if spec is FROZEN_TRAIN:
                # the frozen rank's last step is named from its step lines, which do not lag
                # like its heartbeat: within a step or two of where its peer waits
                last = int(re.search(r"last step report was step index (\d+)", err).group(1))
                peer = int(re.search(r"rank 0 had been in 'train repeat 0 step (\d+)/", err).group(1))
                check(0 <= peer - last <= 2, err)
    finally:
        d.close()


def test_results_grouped_and_csv():
    d = Daemon(cpu_slots=2)
    try:
        # an experiment none of whose runs has finished (queued behind a blocker): no row,
        # and the CSV is still its header, which csv readers (and pandas) need
        blocker = d.submit(dict(LONG, name="blocker", world_size=2))
        queued = d.submit(dict(SMALL, name="queued", world_size=2))
        table = d.get(f"/v1/experiments/{queued['id']}/results")
        check(table["rows"] == [] and "busbw_gbs_mean" in table["columns"], table)
        status, text, _ = d.request("GET", f"/v1/experiments/{queued['id']}/results?format=csv")
        reader = csv.DictReader(io.StringIO(text))
        check(status == 200 and list(reader) == [] and reader.fieldnames == table["columns"],
              repr(text[:200]))
        for e in (queued, blocker):
            d.request("POST", f"/v1/experiments/{e['id']}/cancel")
        d.wait_experiment(blocker["id"], timeout=60)
        exp = d.submit(dict(SMALL, name="grouped", repeats=3, sweep={"world_size": [1, 2]}))
        d.wait_experiment(exp["id"], timeout=120)
        table = d.get(f"/v1/experiments/{exp['id']}/results")
        check(table["group_by"] == ["world_size"], table["group_by"])
        rows = table["rows"]
        check(len(rows) == 2 * 3, f"{len(rows)} rows")  # 2 world sizes x 3 message sizes
        for r in rows:
            check(list(r.keys()) == table["columns"], "row keys follow columns")
            check(r["busbw_gbs_n"] == 3 and r["wrong"] == 0, r)
            check(r["busbw_gbs_min"] <= r["busbw_gbs_median"] <= r["busbw_gbs_max"], r)
        two = [r for r in rows if r["world_size"] == 2]
        check(all(r["busbw_gbs_mean"] > 0 and r["busbw_gbs_ci95"] is not None for r in two), two)
        status, text, hdrs = d.request("GET", f"/v1/experiments/{exp['id']}/results?format=csv")
        check(status == 200 and hdrs["Content-Type"].startswith("text/csv"), hdrs)
        parsed = list(csv.DictReader(io.StringIO(text)))
        check(len(parsed) == len(rows) and list(parsed[0].keys()) == table["columns"], parsed[:1])
        check(float(parsed[0]["busbw_gbs_mean"]) == rows[0]["busbw_gbs_mean"], "same figures")
        pooled = d.get(f"/v1/experiments/{exp['id']}/results?group_by=op")
        check(all(r["busbw_gbs_n"] == 6 for r in pooled["rows"]), "world sizes pooled")
        status, body, _ = d.request("GET", f"/v1/experiments/{exp['id']}/results?group_by=bogus")
        check(status == 400 and body["error"]["field"] == "group_by", body)
        # an empty name is no field either ("group_by=" alone is the empty list: the default)
        for q in ("op,", ",op", "op,,dtype"):
            status, body, _ = d.request("GET",
                                        f"/v1/experiments/{exp['id']}/results?group_by={q}")
            check(status == 400 and "empty field name" in body["error"]["message"], (q, body))
        status, body, _ = d.request("GET", f"/v1/experiments/{exp['id']}/results?format=xml")
        check(status == 400, body)
    finally:
        d.close()


def read_sse(url, stop_on, timeout=60):
    """Reads an SSE stream with curl until an event satisfies stop_on; returns events."""
    proc = subprocess.Popen(["curl", "-sN", "--max-time", str(timeout), url],
                            stdout=subprocess.PIPE, text=True)
    events, cur = [], {}
    try:
        for line in proc.stdout:
            line = line.rstrip("\n")
            if not line:
                if cur:
                    events.append(cur)
                    if stop_on(cur):
                        break
                cur = {}
            elif line.startswith(":"):
                continue
            else:
                k, _, v = line.partition(": ")
                cur[k] = json.loads(v) if k == "data" else v
    finally:
        proc.kill()
        proc.wait()
    return events


def test_live_events():
    d = Daemon(cpu_slots=2)
    try:
        # the experiment waits behind a blocker until the stream is open, so no event can
        # happen before the subscription (a small run can finish within 0.1 s)
        hold = d.submit(dict(LONG, name="hold", world_size=2))
        exp = d.submit(dict(SMALL, name="live", world_size=2, iters=50))
        threading.Timer(0.5, lambda: d.request("POST", f"/v1/experiments/{hold['id']}/cancel")).start()
        events = read_sse(f"{d.url}/v1/experiments/{exp['id']}/events",
                          lambda ev: ev.get("event") == "experiment" and ev["data"]["status"] in
                          ("succeeded", "failed"))
        kinds = [e["event"] for e in events]
        check(kinds[0] == "snapshot" and events[0]["data"]["id"] == exp["id"], kinds[:3])
        check("collective" in kinds and "run" in kinds, kinds)
        check(events[-1]["data"]["status"] == "succeeded", events[-1])
        runs = [e["data"]["status"] for e in events if e["event"] == "run"]
        check(runs[-1] == "succeeded", runs)
        ids = [int(e["id"]) for e in events[1:]]
        check(ids == sorted(ids), "event ids increase")
        # a stream of a finished experiment starts with its final snapshot; unknown ids 404
        status, _, _ = d.request("GET", "/v1/experiments/99999/events")
        check(status == 404, status)
        # cancelling a queued experiment is seen live too (no worker ever reports it)
        blocker = d.submit(dict(LONG, name="blocker", world_size=2))
        queued = d.submit(dict(SMALL, name="queued", world_size=2))
        threading.Timer(0.5, lambda: d.request("POST", f"/v1/experiments/{queued['id']}/cancel")).start()
        events = read_sse(f"{d.url}/v1/experiments/{queued['id']}/events",
                          lambda ev: ev.get("event") == "experiment", timeout=20)
        check(events[-1]["event"] == "experiment" and events[-1]["data"]["status"] == "cancelled",
              events[-2:])
        check(any(e["event"] == "run" and e["data"]["status"] == "cancelled" for e in events), events)
        d.request("POST", f"/v1/experiments/{blocker['id']}/cancel")
        # many idle streams do not take HTTP threads: the API still answers
        procs = [subprocess.Popen(["curl", "-sN", f"{d.url}/v1/events"], stdout=subprocess.DEVNULL)
                 for _ in range(12)]
        try:
            time.sleep(0.5)
            check(d.get("/healthz")["status"] == "ok", "answers with 12 open streams")
            d.submit(dict(SMALL, name="while-streaming", world_size=1))
        finally:
            for p in procs:
                p.kill()
                p.wait()
    finally:
        d.close()


def test_metrics_are_prometheus_text():
    d = Daemon(cpu_slots=2)
    try:
        d.request("GET", "/v1/experiments/424242")  # one 404 to count
        status, text, hdrs = d.request("GET", "/metrics")
        check(status == 200 and hdrs["Content-Type"].startswith("text/plain; version=0.0.4"), hdrs)
        for name in ("ddpbench_queue_depth", "ddpbench_runs{status=\"queued\"}",
                     "ddpbench_http_requests_total{method=\"GET\",code=\"404\"}",
                     "ddpbench_http_request_duration_seconds_bucket{le=\"+Inf\"}",
                     "ddpbench_store_clients"):
            check(name in text, f"{name} missing")
        # Prometheus's own checker, installed by the test command: a missing one fails
        # rather than leaving the format checked by the asserts above only
        promtool = shutil.which("promtool")
        check(promtool, "promtool missing: deploy/install-deps.sh installs prometheus")
        r = subprocess.run([promtool, "check", "metrics"], input=text, text=True,
                           capture_output=True)
        check(r.returncode == 0, r.stdout + r.stderr)
    finally:
        d.close()


def test_token_and_cors():
    token = "s3cret-token-0123456789"
    tokfile = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"ddpb-token-{os.getpid()}")
    with open(tokfile, "w") as f:
        f.write(token + "\n")
    os.chmod(tokfile, 0o600)  # a secret file only its owner reads (else refused at start)
    d = Daemon(cpu_slots=2, extra_args=["--token-file", tokfile, "--cors-origin", "http://ui.example"])
    try:
        status, body, hdrs = d.request("POST", "/v1/experiments", body=dict(SMALL, world_size=1))
        check(status == 401 and hdrs.get("WWW-Authenticate") == "Bearer", (status, body))
        status, body, _ = d.request("POST", "/v1/experiments", body=dict(SMALL, world_size=1),
                                    headers={"Authorization": "Bearer wrong-token-0123456789"})
        check(status == 401, status)
        status, body, hdrs = d.request("POST", "/v1/experiments", body=dict(SMALL, world_size=1),
                                       headers={"Authorization": f"Bearer {token}"})
        check(status == 201, (status, body))
        check(hdrs.get("Access-Control-Allow-Origin") == "http://ui.example", dict(hdrs))
        status, _, _ = d.request("GET", "/v1/experiments")  # reads stay open
        check(status == 200, status)
        status, _, _ = d.request("DELETE", f"/v1/experiments/{body['id']}")
        check(status == 401, status)
        status, _, hdrs = d.request("OPTIONS", "/v1/experiments")
        check(status == 204 and "POST" in hdrs.get("Access-Control-Allow-Methods", ""), dict(hdrs))
    finally:
        d.close()
        os.unlink(tokfile)
    d = Daemon(cpu_slots=2)  # no CORS unless configured
    try:
        status, _, hdrs = d.request("GET", "/healthz")
        check("Access-Control-Allow-Origin" not in hdrs, dict(hdrs))
        status, _, _ = d.request("OPTIONS", "/v1/experiments")
        check(status == 405, status)
    finally:
        d.close()


if __name__ == "__main__":
    sys.exit(run_cases([
        test_pinned_while_it_fits_marked_when_oversubscribed,
        test_cancel_experiment_keeps_measurements,
        test_cancel_one_run_and_delete,
        test_frozen_worker_is_named,
        test_results_grouped_and_csv,
        test_live_events,
        test_metrics_are_prometheus_text,
        test_token_and_cors,
    ]))
