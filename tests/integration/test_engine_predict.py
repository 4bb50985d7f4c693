#!/usr/bin/env python3
"""Every engine predicted (issue 35 item 2), through the REST API:
- a collective experiment on engine pytorch (torch.distributed over gloo, 2 ranks, a few
  sizes) is stored as collective rows and fitted as backend "gloo";
- a pytorch sweep of world_size [1, 2] on mnist-cnn then has pred_* on its 2-rank row,
  predicted from its own one-rank run with pred_fits naming the gloo fits (not the tcp
  ones of ddpbench's own collective, which the node also has), its phases adding up to
  the predicted step;
- POST /v1/predict on the pytorch experiment uses the same gloo fits;
- a tensorflow row has no prediction and a pred_note saying why; GET /v1/engines says
  what the model simulates of each engine;
- a collective on engine horovod is refused naming engine."""
import time

from harness import Daemon, check, run_cases

COLL = {"workload": "collective", "world_size": 2, "min_bytes": "4K", "max_bytes": "1M",
        "factor": 4, "iters": 5, "warmup": 2}
TRAIN = {"workload": "train", "model": "mnist-cnn", "batch_size": 32, "steps": 10,
         "warmup_steps": 3, "eval": False, "dataset": {"samples": 512}}
PHASES = ("data_ms", "forward_ms", "backward_ms", "comm_exposed_ms", "optimizer_ms")


def wait_probed(d):
    """{name: engine row} of GET /v1/engines once the probe has answered."""
    deadline = time.time() + 120
    while d.get("/v1/engines")["nodes"][0]["probing"] and time.time() < deadline:
        time.sleep(0.3)
    return {e["name"]: e for e in d.get("/v1/engines")["nodes"][0]["engines"]}


def test_engines_predicted_from_gloo_fits():
    d = Daemon(cpu_slots=2)
    try:
        engines = wait_probed(d)
        for name in ("pytorch", "horovod", "deepspeed", "lightning"):
            check("gloo" in engines[name]["model_simulates"], engines[name])
        check(engines["tensorflow"]["model_simulates"].startswith("nothing"),
              engines["tensorflow"])
        status, reply, _ = d.request("POST", "/v1/experiments",
                                     body=dict(COLL, engine="horovod"))
        check(status == 400 and reply["error"]["field"] == "engine", (status, reply))
        tcp = d.run_experiment(dict(COLL, iters=3), timeout=120)  # ddpbench's own: not used
        check(tcp["status"] == "succeeded", tcp["runs"])
        gloo = d.run_experiment(dict(COLL, engine="pytorch"), timeout=180)
        check(gloo["status"] == "succeeded", [(r["status"], r["error"]) for r in gloo["runs"]])
        res = d.get(f"/v1/experiments/{gloo['id']}/results")
        check(len(res["rows"]) == 5 and all(r["time_us_mean"] > 0 and r["wrong"] == 0
                                            for r in res["rows"]), res["rows"])
        fits = d.get(f"/v1/experiments/{gloo['id']}/fit")["fits"]
        check(len(fits) == 1 and fits[0]["backend"] == "gloo" and fits[0]["op"] == "allreduce"
              and fits[0]["world_size"] == 2 and fits[0]["id"], fits)
        gloo_ids = {str(f["id"]) for f in fits}
        exp = d.run_experiment(dict(TRAIN, engine="pytorch", strategy="ddp",
                                    sweep={"world_size": [1, 2]}), timeout=300)
        check(exp["status"] == "succeeded", [(r["status"], r["error"]) for r in exp["runs"]])
        rows = {r["world_size"]: r for r in d.get(f"/v1/experiments/{exp['id']}/results")["rows"]}
        one = [r["id"] for r in exp["runs"] if d.get(f"/v1/runs/{r['id']}")["spec"]["world_size"]
               == 1]
        two = rows[2]
        check(two["pred_note"] is None and two["pred_step_ms"] > 0, two)
        check(two["pred_base_run"] == one[0], (two["pred_base_run"], one))
        check(set(two["pred_fits"].split(",")) <= gloo_ids, (two["pred_fits"], gloo_ids))
        total = sum(two["pred_" + p] for p in PHASES)
        check(abs(total - two["pred_step_ms"]) < 1e-6 * two["pred_step_ms"], (total, two))
        check(two["pred_comm_ms"] > 0, two)
        # the node's contention calibration of the same model and batch applies to the
        # engine's rows too: their env names the node as the C worker's does
        check(two["pred_calibration"] is None, two)
        cal = d.run_experiment(dict(TRAIN, calibrate=True, sweep={"world_size": [1, 2]}),
                               timeout=180)
        check(cal["status"] == "succeeded", [(r["status"], r["error"]) for r in cal["runs"]])
        cid = d.get("/v1/calibrations?model=mnist-cnn")["calibrations"][0]["id"]
        two = {r["world_size"]: r for r in
               d.get(f"/v1/experiments/{exp['id']}/results")["rows"]}[2]
        check(two["pred_calibration"] == cid and two["pred_contention"] > 0, two)
        status, p, _ = d.request("POST", "/v1/predict",
                                 body={"experiment": exp["id"], "strategies": ["ddp"],
                                       "world_sizes": [2]})
        check(status == 200 and {f["backend"] for f in p["fits"]} == {"gloo"}, (status, p))
        tf = d.run_experiment(dict(TRAIN, engine="tensorflow", strategy="ddp", world_size=2,
                                   steps=6), timeout=300)
        check(tf["status"] == "succeeded", [(r["status"], r["error"]) for r in tf["runs"]])
        row = d.get(f"/v1/experiments/{tf['id']}/results")["rows"][0]
        check(row["pred_step_ms"] is None and "tf.function" in row["pred_note"], row)
    finally:
        d.close()


if __name__ == "__main__":
    raise SystemExit(run_cases([test_engines_predicted_from_gloo_fits]))
