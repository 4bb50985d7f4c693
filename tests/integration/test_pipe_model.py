#!/usr/bin/env python3
"""Pipelines predicted through the REST API (issue 35 item 3), on real workers:
- a gpt2-tiny sweep of one-rank runs and 2-stage pipelines of 4 micro-batches (gpipe and
  1f1b, one replica) beside a collective experiment that measured allreduce only: the
  pipeline rows carry no prediction and a pred_note saying the sendrecv fit is missing;
- once a collective experiment has measured sendrecv, the same rows carry pred_step_ms,
  its phases and pred_bubble beside bubble_fraction and bubble_theory, naming the sendrecv
  fits and the one-rank base they came from; the one-rank rows have no pred_bubble;
- ?fit= naming the allreduce fits alone gives the note again;
- POST /v1/predict with "pipeline": from a pipeline run its own layer profile, at its own
  stages, micro-batches, schedule and world size, predicts exactly its results row's
  pred_step_ms, pred_bubble and pred_throughput (one computation, daemon/model_pipe.c)
  and names the profile and base runs; from the one-rank base, a what-if over
  micro-batches, schedules and replicas; a stage count no run profiled is refused
  naming pipeline (409), as are bad fields (400) and a missing sendrecv fit (409, fit);
- once the node has a calibration of the pipeline's key (calibrate true, k = 1 and 2),
  the pipeline rows apply it (pred_calibration its id, pred_contention between k = 1's and
  its k = 2 phase slowdowns: the stages idle in the bubble, so fewer than 2 compute at
  once) and POST /v1/predict from the same profile says the same, naming it."""
import math
import sys

from harness import Daemon, check, run_cases

COLL = {"workload": "collective", "world_size": 2, "min_bytes": "4K", "max_bytes": "1M",
        "factor": 4, "iters": 4, "warmup": 1}
TRAIN = {"workload": "train", "model": "gpt2-tiny", "seq_len": 32, "batch_size": 8,
         "steps": 8, "warmup_steps": 2, "trace_steps": 0, "eval": False,
         "dataset": {"samples": 256}, "optimizer": {"type": "adam", "lr": 0.001},
         "sweep": {"zip": [{"world_size": 1, "pipeline": 1, "micro_batches": 1},
                           {"world_size": 2, "pipeline": 2, "micro_batches": 4}],
                   "schedule": ["gpipe", "1f1b"]}}


# the pipeline runs' calibration key (daemon/calib.h): model, batch, threads, device, data
CALIB = {k: v for k, v in TRAIN.items() if k != "sweep"}
CALIB.update(calibrate=True, sweep={"world_size": [1, 2]})
PHASES = ("forward", "backward", "optimizer")


def fit_ids(d, coll):
    return [f["id"] for f in d.get(f"/v1/experiments/{coll['id']}/fit")["fits"]]


def pipe_rows(d, train, query=""):
    res = d.get(f"/v1/experiments/{train['id']}/results{query}")
    rows = [r for r in res["rows"] if r["pipeline"] == 2]
    check(len(rows) == 2, res["rows"])
    return res["rows"], rows


def predict(d, body, want=200):
    status, reply, _ = d.request("POST", "/v1/predict", body=body)
    check(status == want, (body, status, reply))
    return reply


def check_predict_pipe(d, train, rows, fit):
    by_sched = {r["params"]["schedule"]: r for r in train["runs"]
                if r["params"]["pipeline"] == 2}
    for row in rows:
        run = by_sched[row["schedule"]]
        p = predict(d, {"run": run["id"], "pipeline": [2], "schedules": [row["schedule"]]})
        check(len(p["predictions"]) == 1 and p["link"] is None, p)
        c = p["predictions"][0]
        check(c["profile_run"] == run["id"] and c["base_run"] == row["pred_base_run"], c)
        check(c["pipeline"] == 2 and c["micro_batches"] == 4, c)
        pt = c["points"][0]
        check(pt["world_size"] == 2 and pt["replicas"] == 1, pt)
        # rank 0 timed the whole batch beside the micro-batch: 4 calls of 2 samples cost
        # what the two timings say, usually more than one of 8 (each call's fixed cost is
        # repeated), at times less (gpt2-tiny on a loaded machine read 0.88: the line's
        # fixed cost negative); exactly 1 would mean the batch's timing never reached the
        # model (base / M)
        check(pt["micro_batch_cost"] > 0 and abs(pt["micro_batch_cost"] - 1) > 1e-9, pt)
        for got, want in ((pt["step_ms"], row["pred_step_ms"]),
                          (pt["bubble"], row["pred_bubble"]),
                          (pt["throughput"], row["pred_throughput"]),
                          (pt["efficiency"], row["pred_efficiency"])):
            check(math.isclose(got, want, rel_tol=1e-9), (pt, row))
        check(pt["calibration"] == row["pred_calibration"], (pt, row))
        check(math.isclose(pt["contention"], row["pred_contention"], rel_tol=1e-9), (pt, row))
        check({f["id"] for f in p["fits"]} == {int(i) for i in row["pred_fits"].split(",")},
              (p["fits"], row["pred_fits"]))
    latest = max(by_sched.values(), key=lambda r: r["id"])  # the what-if's profile
    own_cost = predict(d, {"run": latest["id"], "pipeline": [2], "schedules": [
        latest["params"]["schedule"]]})["predictions"][0]["points"][0]["micro_batch_cost"]
    # a what-if from the one-rank base: the latest profile of 2 stages, both schedules,
    # 2 micro-batches, one and two replicas (their exchange: the allreduce fit)
    base = rows[0]["pred_base_run"]
    p = predict(d, {"run": base, "pipeline": [2], "micro_batches": 2, "world_sizes": [2, 4],
                    "fit": fit})
    check([c["schedule"] for c in p["predictions"]] == ["gpipe", "1f1b"], p["predictions"])
    for c in p["predictions"]:
        check(c["base_run"] == base and c["profile_run"] == max(by_sched[s]["id"]
                                                                for s in by_sched), c)
        check([pt["world_size"] for pt in c["points"]] == [2, 4], c["points"])
        check(all(pt["step_ms"] > 0 and 0 < pt["bubble"] < 1 for pt in c["points"]), c)
        check(all(pt["calibration"] == rows[0]["pred_calibration"] for pt in c["points"]),
              (c["points"], rows[0]["pred_calibration"]))
        check(c["points"][1]["throughput"] > c["points"][0]["throughput"], c["points"])
        # 2 micro-batches of 4 samples: on the line, between one batch's cost (1) and the
        # profile's 4 of 2, whichever way the line leans
        lo, hi = min(1, own_cost) - 1e-9, max(1, own_cost) + 1e-9
        check(lo <= c["points"][0]["micro_batch_cost"] <= hi, (c["points"], own_cost))
    bad = [({"run": base, "pipeline": [4]}, 409, "pipeline"),
           ({"experiment": train["id"], "pipeline": [2]}, 400, "run"),
           ({"run": base, "pipeline": [1]}, 400, "pipeline"),
           ({"run": base, "pipeline": [2], "strategies": ["ddp"]}, 400, "strategies"),
           ({"run": base, "pipeline": [2], "world_sizes": [3]}, 400, "world_sizes"),
           ({"run": base, "pipeline": [2], "micro_batches": 9}, 400, "micro_batches"),
           ({"run": base, "pipeline": [2], "schedules": ["zb"]}, 400, "schedules")]
    for body, status, field in bad:
        reply = predict(d, body, status)
        check(reply["error"]["field"] == field, (body, reply))


def check_calibrated(d, train, fit):
    """A calibration of the pipeline's key: its rows and what-ifs apply it."""
    cal_exp = d.run_experiment(CALIB, timeout=180)
    check(cal_exp["status"] == "succeeded",
          [(r["status"], r["error"]) for r in cal_exp["runs"]])
    cals = [c for c in d.get("/v1/calibrations")["calibrations"]
            if c["experiment"] == cal_exp["id"]]
    check(len(cals) == 1, cals)
    two = [p for p in cals[0]["curve"] if p["k"] == 2]
    check(len(two) == 1, cals[0]["curve"])
    lo = min(1, min(two[0][ph] for ph in PHASES))
    hi = max(1, max(two[0][ph] for ph in PHASES))
    _, rows = pipe_rows(d, train)
    for r in rows:
        check(r["pred_note"] is None and r["pred_calibration"] == cals[0]["id"], r)
        # the stages' compute slowed phase by phase at the ranks busy at once (1 to 2): in
        # all, between k = 1's and the k = 2 phases' slowdowns
        check(lo - 1e-9 <= r["pred_contention"] <= hi + 1e-9, (r["pred_contention"], two))
    check_predict_pipe(d, train, rows, fit)


def test_pipelines_predicted():
    d = Daemon(cpu_slots=2)
    try:
        ar = d.run_experiment(dict(COLL, op="allreduce"), timeout=120)
        check(ar["status"] == "succeeded", [(r["status"], r["error"]) for r in ar["runs"]])
        train = d.run_experiment(TRAIN, timeout=240)
        check(train["status"] == "succeeded",
              [(r["status"], r["error"]) for r in train["runs"]])
        _, rows = pipe_rows(d, train)
        for r in rows:  # the latest fits are allreduce's: no transfer can be predicted
            check(r["pred_step_ms"] is None and r["pred_bubble"] is None, r)
            check("sendrecv" in r["pred_note"], r["pred_note"])
        pipe_ids = [r["id"] for r in train["runs"] if r["params"]["pipeline"] == 2]
        status, reply, _ = d.request("POST", "/v1/predict",
                                     body={"run": pipe_ids[0], "pipeline": [2]})
        check(status == 409 and reply["error"]["field"] == "fit"
              and "sendrecv" in reply["error"]["message"], reply)
        sr = d.run_experiment(dict(COLL, op="sendrecv"), timeout=120)
        check(sr["status"] == "succeeded", [(r["status"], r["error"]) for r in sr["runs"]])
        sr_ids = {str(i) for i in fit_ids(d, sr)}
        one = {r["params"]["schedule"]: r["id"] for r in train["runs"]
               if r["params"]["world_size"] == 1}
        every, rows = pipe_rows(d, train)
        for r in rows:
            check(r["pred_note"] is None, r["pred_note"])
            check(r["pred_step_ms"] > 0 and 0 < r["pred_bubble"] < 1, r)
            check(set(r["pred_fits"].split(",")) <= sr_ids, (r["pred_fits"], sr_ids))
            check(r["pred_base_run"] in one.values(), (r["pred_base_run"], one))
            check(abs(r["bubble_theory"] - 1 / 5) < 1e-9 and 0 < r["bubble_fraction"] < 1, r)
            err = (r["pred_step_ms"] - r["step_ms_mean"]) / r["step_ms_mean"]
            check(math.isclose(err, r["pred_step_err"], rel_tol=1e-6, abs_tol=1e-9), r)
            # a replica's step: the stages' mean forward and backward, no more than the step
            check(r["pred_forward_ms"] + r["pred_backward_ms"] < r["pred_step_ms"], r)
            print(f"# {r['schedule']}: step {r['step_ms_mean']:.2f} ms, predicted "
                  f"{r['pred_step_ms']:.2f} ({r['pred_step_err']:+.0%}); bubble "
                  f"{r['bubble_fraction']:.3f}, predicted {r['pred_bubble']:.3f}, theory "
                  f"{r['bubble_theory']:.3f}")
        check(all(r["pred_bubble"] is None for r in every if r["pipeline"] == 1), every)
        check_predict_pipe(d, train, rows, [ar["id"], sr["id"]])
        check(all(r["pred_calibration"] is None for r in rows), rows)
        check_calibrated(d, train, [ar["id"], sr["id"]])
        ids = ",".join(str(i) for i in fit_ids(d, ar))
        _, rows = pipe_rows(d, train, f"?fit={ids}")
        check(all(r["pred_step_ms"] is None and "sendrecv" in r["pred_note"] for r in rows),
              rows)
    finally:
        d.close()


if __name__ == "__main__":
    sys.exit(run_cases([test_pipelines_predicted]))
