#!/usr/bin/env python3
"""Contention calibrations through the REST API (issue 35, docs/model.md "Co-location and
contention"), on mnist-cnn with few steps:
- a train spec with calibrate true runs k-rank launches that exchange nothing (k = 1 ..
  the daemon's slots when it names no world_size); once
  finished it is stored as a calibration (GET /v1/calibrations, filtered by node and
  model, and by id): one point per k, k = 1 exactly 1, the node's context switch measured;
- its runs run one at a time, on a node nothing else runs on;
- running it twice keeps both, and the latest is the one predictions use;
- a 2-rank training run's results row names that calibration in pred_calibration and
  carries in pred_contention the compute slowdown its k = 2 point gives the one-rank
  run's phases (each at least 1); POST /v1/predict at ranks_per_node 2 says the same step time;
- its report, cached before the calibrations were stored, is computed again after
  (api/h_model.c keys it by the stored calibrations too): before, it says the core-share
  rule stands; after, which calibration its predictions apply;
- bad input is refused naming the field (a strategy with shards, another engine, a
  model that does not exist, an unknown query parameter); an unknown id is 404."""
import os
import re
from datetime import datetime

from harness import Daemon, check, run_cases

COLL = {"name": "net", "workload": "collective", "world_size": 2, "min_bytes": "4K",
        "max_bytes": "1M", "factor": 4, "iters": 4, "warmup": 1,
        "sweep": {"op": ["allreduce", "reduce_scatter", "all_gather"]}}
COMMON = {"model": "mnist-cnn", "batch_size": 16, "steps": 12, "warmup_steps": 2,
          "trace_steps": 0, "eval": False, "dataset": {"samples": 512}}
CALIB = dict(COMMON, name="calibrate", workload="train", calibrate=True,
             sweep={"world_size": [1, 2]})
# no world_size: k = 1 .. twice the CPUs, at most the daemon's slots (3 here)
CALIB_DEFAULT = dict(COMMON, name="calibrate", workload="train", calibrate=True)
SLOTS = 3
TRAIN = dict(COMMON, name="train", workload="train", sweep={"world_size": [1, 2]})
PHASES = ("forward", "backward", "optimizer")


def close(a, b, tol=1e-6):
    return abs(a - b) <= tol * max(1.0, abs(a), abs(b))


def check_calibration(d, exp):
    got = d.get("/v1/calibrations")["calibrations"]
    mine = [c for c in got if c["experiment"] == exp["id"]]
    check(len(mine) == 1, got)
    cal = mine[0]
    check(cal["model"] == "mnist-cnn" and cal["batch_size"] == 16 and cal["device"] == "cpu",
          cal)
    check(cal["node"] and cal["cpus"] >= 1 and cal["model_version"] == 2, cal)
    check(cal["switch_us"] > 0 and cal["quantum_ms"] > 0, cal)
    check([p["k"] for p in cal["curve"]] == [r["params"]["world_size"] for r in exp["runs"]],
          cal["curve"])
    one, two = cal["curve"][:2]
    for ph in PHASES:
        check(one[ph] == 1.0, one)  # the median at 1 over itself
        check(two[ph] > 0 and two[ph + "_lo"] <= two[ph] <= two[ph + "_hi"], two)
    check(two["steps"] >= 10, two)
    check(d.get(f"/v1/calibrations/{cal['id']}") == cal, "by id")
    # its own results rows are measurements, not training: no prediction, and why
    rows = d.get(f"/v1/experiments/{exp['id']}/results")["rows"]
    check(all(r["pred_step_ms"] is None and "calibration" in r["pred_note"] for r in rows),
          rows)
    check(d.get(f"/v1/calibrations?model=mnist-cnn&node={cal['node']}")["calibrations"][0]
          == got[0], "filtered")
    check(d.get("/v1/calibrations?model=resnet18")["calibrations"] == [], "other model")
    check(d.get("/v1/calibrations?node=nowhere")["calibrations"] == [], "other node")
    return cal


def check_alone(exp):
    """A calibration's runs ran one at a time: its k = 1 run beside its k = 2 run would
    measure both (3 slots hold both)."""
    spans = sorted((datetime.fromisoformat(r["started_at"]),
                    datetime.fromisoformat(r["finished_at"])) for r in exp["runs"])
    check(all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans)


def check_prediction(d, train, cal):
    res = d.get(f"/v1/experiments/{train['id']}/results")
    row1 = [r for r in res["rows"] if r["world_size"] == 1][0]
    row2 = [r for r in res["rows"] if r["world_size"] == 2][0]
    check(row2["pred_note"] is None and row2["pred_calibration"] == cal["id"], row2)
    check(row1["pred_contention"] == 1.0, row1)  # one rank on the node: k = 1
    base = {ph: row1[ph + "_ms"] for ph in PHASES}
    # each phase's k = 2 slowdown, read as at least 1 (below 1 is the k = 1 run's noise)
    two = {ph: max(1.0, cal["curve"][1][ph]) for ph in PHASES}
    want = sum(base[ph] * two[ph] for ph in PHASES) / sum(base.values())
    check(close(row2["pred_contention"], want, 1e-3), (row2["pred_contention"], want))
    check(close(row2["pred_forward_ms"], base["forward"] * two["forward"], 1e-3), row2)
    status, p, _ = d.request("POST", "/v1/predict", body={
        "run": row2["pred_base_run"], "world_sizes": [2], "strategies": ["ddp"],
        "ranks_per_node": 2})
    check(status == 200, p)
    pt = p["predictions"][0]["points"][0]
    check(pt["calibration"] == cal["id"] and close(pt["step_ms"], row2["pred_step_ms"]),
          (pt, row2))
    check(close(pt["contention"], row2["pred_contention"]), (pt, row2))
    # without ranks_per_node every rank has its cores: no calibration applies
    status, p, _ = d.request("POST", "/v1/predict", body={
        "run": row2["pred_base_run"], "world_sizes": [2], "strategies": ["ddp"]})
    pt = p["predictions"][0]["points"][0]
    check(status == 200 and pt["calibration"] is None and pt["contention"] == 1.0, pt)


def report(d, exp):
    """The report of exp and how many reports the daemon computed for it (0: cached)."""
    def computed():
        status, text, _ = d.request("GET", "/metrics")
        check(status == 200, text)
        m = re.search(r"^ddpbench_reply_cache_computed_total (\S+)$", text, re.M)
        check(m, "no ddpbench_reply_cache_computed_total in /metrics")
        return float(m.group(1))
    before = computed()
    status, body, _ = d.request("GET", f"/v1/experiments/{exp['id']}/report")
    check(status == 200, body)
    return body, computed() - before


def check_bad_input(d):
    bad = [(dict(CALIB, strategy="zero1"), "strategy"),
           (dict(CALIB, engine="pytorch"), "calibrate"),
           (dict(CALIB, model="nope"), "model"),
           (dict(CALIB, calibrate="yes"), "calibrate")]
    for spec, field in bad:
        status, reply, _ = d.request("POST", "/v1/experiments", body=spec)
        check(status == 400 and field in str(reply["error"].get("field")), (spec, reply))
    status, reply, _ = d.request("GET", "/v1/calibrations?bogus=1")
    check(status == 400 and reply["error"]["field"] == "bogus", reply)
    status, reply, _ = d.request("GET", "/v1/calibrations/999999")
    check(status == 404, reply)
    status, reply, _ = d.request("GET", "/v1/calibrations/x")
    check(status == 404 and "positive integers" in reply["error"]["message"], reply)


def test_calibration_end_to_end():
    d = Daemon(cpu_slots=SLOTS)
    try:
        check_bad_input(d)
        coll = d.run_succeeds(COLL, timeout=120)
        # its report before any calibration: computed once, then served from the cache
        train = d.run_succeeds(dict(TRAIN), timeout=120, runs=2)
        stale, computed = report(d, train)
        check(computed == 1 and report(d, train) == (stale, 0), "not cached")
        k = min(2 * (os.cpu_count() or 1), SLOTS)
        first = d.run_succeeds(CALIB_DEFAULT, timeout=120, runs=k)
        check([r["params"]["world_size"] for r in first["runs"]] == list(range(1, k + 1)),
              first["runs"])
        check_alone(first)
        cal1 = check_calibration(d, first)
        second = d.run_succeeds(CALIB, timeout=120, runs=2)
        cal2 = check_calibration(d, second)
        ids = [c["id"] for c in d.get("/v1/calibrations")["calibrations"]]
        check(ids == [cal2["id"], cal1["id"]], ids)  # both kept, newest first
        check(coll["status"] == "succeeded", coll["status"])
        check_prediction(d, train, cal2)
        # the calibrations stored since: the cached report is not served again, and says
        # which calibration its predictions apply (before: the core-share rule)
        fresh, computed = report(d, train)
        check(computed == 1 and fresh != stale, "the report from before the calibrations")
        check("core-share rule" in stale and "calibration" in stale, "before: the rule")
        check(f"apply the measured calibration {cal2['id']} " in fresh, "names it")
    finally:
        d.close()


if __name__ == "__main__":
    run_cases([test_calibration_end_to_end])
