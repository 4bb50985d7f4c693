#!/usr/bin/env python3
"""Memory, utilisation, the timeline and time to accuracy of real runs through the REST API
(issue 17):
- every rank's memory accounting is exact: parameters are the model table's count times 4
  bytes; ddp holds whole gradients and optimizer state (one float per parameter for sgd with
  momentum, two for adam); zero1 and zero2 at 2 and 4 ranks hold shards of the optimizer
  state that add up to ddp's exactly, zero2 shards its gradients too; the peak resident set
  is above the model state; usage says how many cores each rank kept busy;
- GET /v1/runs/{id}/trace is valid Chrome trace-event JSON: one process per rank, spans
  nested inside their step, every collective of every traced step present once (its
  gradient bytes add up to the model), the traced window is the one asked for, and its
  phase totals equal the stored step phases; a collective benchmark shows its iterations;
  `ddpbench trace` saves the same bytes;
- target_accuracy gives each repeat's time and epochs to reach it, or that it did not;
- the results table and its CSV carry the new columns."""
import csv
import io
import os
import subprocess
import tempfile
import urllib.request

from harness import BUILD, Daemon, check, model_params, run_cases

SMALL = {"workload": "train", "model": "mnist-cnn", "batch_size": 8, "steps": 6,
         "warmup_steps": 2, "trace_steps": 3, "dataset": {"samples": 256}}



def memory_by_rank(d, run_id):
    run = d.get(f"/v1/runs/{run_id}")
    return run, {m["rank"]: m for m in run["memory"] if m["repeat"] == 0}


def test_memory_accounting_exact():
    n = model_params("mnist-cnn")
    d = Daemon(cpu_slots=4)
    try:
        spec = dict(SMALL, trace_steps=0, optimizer={"type": "sgd", "lr": 0.01, "momentum": 0.9},
                    sweep={"world_size": [2, 4], "strategy": ["ddp", "zero1", "zero2"],
                           "optimizer.type": ["sgd", "adam"]})
        exp = d.run_experiment(spec, timeout=300)
        check(exp["status"] == "succeeded", [(r["status"], r["error"]) for r in exp["runs"]])
        got = {}
        for r in exp["runs"]:
            run, mem = memory_by_rank(d, r["id"])
            s = run["spec"]
            ws, strat, opt = s["world_size"], s["strategy"], s["optimizer"]["type"]
            check(sorted(mem) == list(range(ws)), (strat, ws, sorted(mem)))
            k = 1 if opt == "sgd" else 2  # momentum; adam's two moments
            for rank, m in mem.items():
                what = (strat, ws, opt, rank)
                check(m["params_bytes"] == 4 * n, (what, m))
                check(m["buffers_bytes"] == 0, (what, m))  # mnist-cnn has no batch norm
                if strat == "ddp":
                    check(m["optimizer_bytes"] == k * 4 * n, (what, m))
                    check(m["grads_bytes"] == 4 * n, (what, m))
                else:  # a shard: at most one padded chunk more than 1/N
                    check(0 < m["optimizer_bytes"] <= k * 4 * (n // ws + 64), (what, m))
                    want_grads = 4 * n if strat == "zero1" else m["optimizer_bytes"] // k
                    check(m["grads_bytes"] == want_grads, (what, m))
                state = m["params_bytes"] + m["grads_bytes"] + m["optimizer_bytes"]
                check(m["activations_bytes"] > 0, (what, m))
                check(m["peak_rss_bytes"] > state + m["activations_bytes"], (what, m))
                check(m["device_peak_bytes"] is None, (what, m))  # a CPU run has no device
            got[(strat, ws, opt)] = mem
            use = run["usage"]
            check(sorted(u["rank"] for u in use) == list(range(ws)), use)
            for u in use:
                check(u["steps"] == spec["steps"] and u["wall_s"] > 0, u)
                check(0 < u["cpu_util"] < 64 and u["voluntary_cs"] >= 0, u)
                check(u["gpu_util_pct"] is None, u)
        for ws in (2, 4):
            for opt, k in (("sgd", 1), ("adam", 2)):
                for strat in ("zero1", "zero2"):
                    shards = sum(m["optimizer_bytes"] for m in got[(strat, ws, opt)].values())
                    check(shards == k * 4 * n, (strat, ws, opt, shards, k * 4 * n))
                grads = sum(m["grads_bytes"] for m in got[("zero2", ws, opt)].values())
                check(grads == 4 * n, ("zero2 grads", ws, opt, grads))
        # the results table: one row per point, the largest rank's bytes
        res = d.get(f"/v1/experiments/{exp['id']}/results")
        for row in res["rows"]:
            check(row["params_bytes_mean"] == 4 * n, row)
            check(row["peak_rss_bytes_n"] == 1 and row["peak_rss_bytes_mean"] > 4 * n, row)
            check(row["cpu_util_mean"] > 0 and row["cpu_util_n"] == 1, row)
            if row["strategy"] == "ddp":
                k = 1 if row["optimizer.type"] == "sgd" else 2
                check(row["model_state_bytes_mean"] == (2 + k) * 4 * n, row)
        status, text, _ = d.request("GET", f"/v1/experiments/{exp['id']}/results?format=csv")
        check(status == 200, text)
        table = list(csv.DictReader(io.StringIO(text)))
        check(len(table) == len(res["rows"]) and "optimizer_bytes_mean" in table[0], table[:1])
    finally:
        d.close()


def x_events(trace):
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def check_trace_format(trace, ws):
    """The trace-event format's requirements, and one named process per rank."""
    check(isinstance(trace["traceEvents"], list) and trace["displayTimeUnit"] == "ms", trace.keys())
    for ev in trace["traceEvents"]:
        check(ev["ph"] in ("X", "M") and isinstance(ev["name"], str), ev)
        check(isinstance(ev["pid"], int) and isinstance(ev["tid"], int), ev)
        if ev["ph"] == "X":
            check(isinstance(ev["ts"], (int, float)) and ev["dur"] >= 0 and ev["ts"] >= 0, ev)
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    check(sorted(names) == list(range(ws)) and all("node" in v for v in names.values()), names)


def traced_window(d, run, trace):
    """(column index, the stored steps by (rank, step), the trace's events by (rank,
    step)), checking that every rank traced exactly the trace_steps after warm-up (the
    C worker's window, which the Python engines keep too: test_engine_observe.py)."""
    ws = run["spec"]["world_size"]
    warmup, traced = run["spec"]["warmup_steps"], run["spec"]["trace_steps"]
    steps = d.get(f"/v1/runs/{run['id']}/steps?warmup=true")
    at = {c: i for i, c in enumerate(steps["columns"])}
    stored = {(r[at["rank"]], r[at["step"]]): r for r in steps["rows"]}
    by = {}
    for ev in x_events(trace):
        by.setdefault((ev["pid"], ev["args"]["step"]), []).append(ev)
    want = {(r, s) for r in range(ws) for s in range(warmup, warmup + traced)}
    check(set(by) == want, (run["spec"].get("engine"), ws, sorted(by), sorted(want)))
    return at, stored, by


def check_trace_against_steps(d, run, trace, n):
    """Spans nest inside their step, the collectives are each there once and carry the
    model's gradients, and each phase's total is the stored phase."""
    ws, strat = run["spec"]["world_size"], run["spec"]["strategy"]
    at, stored, by = traced_window(d, run, trace)
    eps = 0.002  # ms: the trace's microseconds carry 10 significant digits
    for (rank, step), evs in by.items():
        row = stored[(rank, step)]
        whole = [e for e in evs if e["cat"] == "step"]
        check(len(whole) == 1 and whole[0]["tid"] == 0, whole)
        s = whole[0]
        compute = [e for e in evs if e["tid"] == 0 and e is not s]
        for e in compute:  # nested inside their step
            check(s["ts"] - 1e-3 <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 1e-3,
                  (e, s))

        def total(name):
            return sum(e["dur"] for e in compute if e["name"] == name) / 1000

        def inside(name):  # exposed communication nested in a phase's spans
            return sum(c["dur"] for c in compute if c["name"] == "comm_exposed"
                       for p in compute if p["name"] == name
                       if p["ts"] <= c["ts"] and c["ts"] + c["dur"] <= p["ts"] + p["dur"]) / 1000

        check(abs(s["dur"] / 1000 - row[at["step_ms"]]) < eps, (s, row))
        check(abs(total("forward") - row[at["forward_ms"]]) < eps, ("forward", rank, step))
        check(abs(total("data") - row[at["data_ms"]]) < eps, ("data", rank, step))
        check(abs(total("comm_exposed") - row[at["comm_exposed_ms"]]) < eps, ("exposed", rank, step))
        check(abs(total("backward") - inside("backward") - row[at["backward_ms"]]) < eps,
              ("backward", rank, step, total("backward"), inside("backward"), row))
        check(abs(total("optimizer") - inside("optimizer") - row[at["optimizer_ms"]]) < eps,
              ("optimizer", rank, step))
        ops = [e for e in evs if e["cat"] == "collective"]
        check(all(e["tid"] >= 1 for e in ops), ops)
        keys = [(e["name"], e["args"]["bucket"]) for e in ops]
        check(len(keys) == len(set(keys)), ("a collective twice", keys))
        if strat == "ddp":
            check(sum(e["args"]["bytes"] for e in ops) == 4 * n and
                  {e["name"] for e in ops} == {"allreduce"}, ops)
        else:  # zero1: every bucket reduce-scattered, then all-gathered
            rs = sum(e["args"]["bytes"] for e in ops if e["name"] == "reduce_scatter")
            ag = sum(e["args"]["bytes"] for e in ops if e["name"] == "all_gather")
            check(4 * n <= rs == ag < 4 * n + 64 * ws * len(ops), (rs, ag))
        for e in ops:
            check(e["args"]["algorithm"] not in ("", "?"), e)


def test_trace_of_training_runs():
    n = model_params("mnist-cnn")
    d = Daemon(cpu_slots=4)
    tmp = tempfile.mkdtemp(prefix="ddpb-trace-")
    try:
        spec = dict(SMALL, world_size=2, bucket_mb=1, sweep={"strategy": ["ddp", "zero1"]})
        exp = d.run_experiment(spec, timeout=180)
        check(exp["status"] == "succeeded", [(r["status"], r["error"]) for r in exp["runs"]])
        for r in exp["runs"]:
            run = d.get(f"/v1/runs/{r['id']}")
            trace = d.get(f"/v1/runs/{r['id']}/trace")
            check_trace_format(trace, 2)
            check_trace_against_steps(d, run, trace, n)
            check(trace["otherData"]["traced_steps"] == 2 * spec["trace_steps"], trace["otherData"])
        # the CLI saves the reply byte for byte
        rid = exp["runs"][0]["id"]
        out = os.path.join(tmp, "run.json")
        cli = os.path.join(BUILD, "cli", "ddpbench")
        r = subprocess.run([cli, "--url", d.url, "trace", str(rid), "-o", out],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, r.stderr)
        with open(out, "rb") as f, urllib.request.urlopen(f"{d.url}/v1/runs/{rid}/trace") as r:
            check(f.read() == r.read(), "cli trace bytes")
        r = subprocess.run([cli, "--url", d.url, "trace", "999999"], capture_output=True,
                           text=True, timeout=60)
        check(r.returncode == 3 and "not found" in r.stderr, (r.returncode, r.stderr))
        # trace_steps 0: nothing traced, a valid empty trace
        exp = d.run_experiment(dict(SMALL, trace_steps=0), timeout=120)
        trace = d.get(f"/v1/runs/{exp['runs'][0]['id']}/trace")
        check(x_events(trace) == [], trace)
        status, body, _ = d.request("GET", "/v1/runs/999999/trace")
        check(status == 404 and body["error"]["code"] == "not_found", body)
        status, body, _ = d.request("GET", f"/v1/runs/{rid}/trace?steps=3")
        check(status == 400, body)
        # the window is bounded, so a trace stays small
        status, body, _ = d.request("POST", "/v1/experiments", body=dict(SMALL, trace_steps=101))
        check(status == 400 and body["error"]["field"] == "trace_steps", body)
    finally:
        d.close()


def test_trace_of_a_collective_run():
    d = Daemon(cpu_slots=2)
    try:
        spec = {"workload": "collective", "world_size": 2, "min_bytes": "4K", "max_bytes": "16K",
                "factor": 4, "iters": 5, "warmup": 1, "trace_steps": 2}
        exp = d.run_experiment(spec, timeout=120)
        check(exp["status"] == "succeeded", exp["runs"])
        trace = d.get(f"/v1/runs/{exp['runs'][0]['id']}/trace")
        check_trace_format(trace, 2)
        evs = x_events(trace)
        iters = [e for e in evs if e["cat"] == "step"]
        ops = [e for e in evs if e["cat"] == "collective"]
        # two sizes, two traced iterations each, on both ranks
        check(len(iters) == 2 * 2 * 2 and len(ops) == len(iters), (len(iters), len(ops)))
        check(sorted({e["args"]["bytes"] for e in ops}) == [4096, 16384], ops)
        check(all(e["name"] == "allreduce" for e in ops), ops)
    finally:
        d.close()


def test_time_to_accuracy():
    d = Daemon(cpu_slots=2)
    try:
        base = dict(SMALL, steps=0, epochs=3, warmup_steps=1, repeats=2, trace_steps=0,
                    optimizer={"type": "sgd", "lr": 0.05, "momentum": 0.9},
                    dataset={"samples": 128})
        # any accuracy above 0 is reached in the first epoch; 1.0 on random labels never
        exp = d.run_experiment(dict(base, sweep={"target_accuracy": [0.01, 1.0]}), timeout=180)
        check(exp["status"] == "succeeded", [(r["status"], r["error"]) for r in exp["runs"]])
        res = d.get(f"/v1/experiments/{exp['id']}/results")
        rows = {row["target_accuracy"]: row for row in res["rows"]}
        easy, never = rows[0.01], rows[1.0]
        run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
        first = sorted(e["time_s"] for e in run["epochs"] if e["epoch"] == 0)
        check(easy["tta_reached"] == 2 and easy["tta_repeats"] == 2, easy)
        check(easy["tta_epochs_mean"] == 1, easy)
        check(abs(easy["tta_s_min"] - first[0]) < 1e-6 and abs(easy["tta_s_max"] - first[1]) < 1e-6,
              (easy, first))
        check(never["tta_reached"] == 0 and never["tta_repeats"] == 2, never)
        check(never["tta_s_mean"] is None and never["tta_s_n"] == 0, never)
        status, body, _ = d.request("POST", "/v1/experiments", body=dict(base, target_accuracy=1.5))
        check(status == 400 and body["error"]["field"] == "target_accuracy", body)
    finally:
        d.close()


if __name__ == "__main__":
    run_cases([test_memory_accounting_exact, test_trace_of_training_runs,
               test_trace_of_a_collective_run, test_time_to_accuracy])
