#!/usr/bin/env python3
"""Paired sweeps through the REST API (issue 33 item 8): "sweep": {"zip": [points...]}
lists points whose fields vary together, crossed with the rest of the sweep:
- the issue's example (ddpbench's engine with strategy ddp and with horovod, crossed with
  world_size 1 and 2) is 4 runs that all succeed, each run's params carry the zipped
  fields (never "zip"), and its spec has them;
- the results table groups by the zipped fields (one row per point and world size), the
  CSV and the HTML report say the same, and group_by a zipped field pools its points;
- refused with 400 naming the field: points naming different fields, a field both zipped
  and swept, a point the cross-field rules refuse (sweep.zip[i].field), a value its field
  refuses, and a zip whose cross product is past the 1,024-run limit ("sweep")."""
import csv
import io

from harness import Daemon, check, run_cases

TRAIN = {"workload": "train", "model": "mnist-cnn", "batch_size": 16, "steps": 6,
         "warmup_steps": 2, "trace_steps": 0, "eval": False, "dataset": {"samples": 256}}
PAIRS = [{"engine": "ddpbench", "strategy": "ddp"}, {"engine": "ddpbench", "strategy": "horovod"}]


def test_zip_runs_and_groups_by_the_zipped_fields():
    d = Daemon(cpu_slots=2)
    try:
        exp = d.run_experiment(dict(TRAIN, sweep={"zip": PAIRS, "world_size": [1, 2]}),
                               timeout=300)
        check(exp["status"] == "succeeded", [(r["status"], r["error"]) for r in exp["runs"]])
        got = [(r["params"]["strategy"], r["params"]["world_size"]) for r in exp["runs"]]
        check(got == [("ddp", 1), ("ddp", 2), ("horovod", 1), ("horovod", 2)], got)
        for r in exp["runs"]:
            check(list(r["params"]) == ["engine", "strategy", "world_size"], r["params"])
            run = d.get(f"/v1/runs/{r['id']}")
            check(run["spec"]["strategy"] == r["params"]["strategy"] and
                  run["spec"]["world_size"] == r["params"]["world_size"] and
                  "sweep" not in run["spec"], run["spec"])
        # the experiment keeps the zip as submitted (normalized)
        spec = d.get(f"/v1/experiments/{exp['id']}")["spec"]
        check(spec["sweep"]["zip"] == PAIRS, spec["sweep"])
        res = d.get(f"/v1/experiments/{exp['id']}/results")
        keys = sorted((row["engine"], row["strategy"], row["world_size"]) for row in res["rows"])
        check(keys == [("ddpbench", s, w) for s in ("ddp", "horovod") for w in (1, 2)], keys)
        check(all(row["runs"] == 1 and row["throughput_mean"] > 0 for row in res["rows"]),
              res["rows"])
        # each point's speed-up is against its own one-rank row
        for row in res["rows"]:
            check((row["speedup"] == 1.0) == (row["world_size"] == 1), row)
        status, text, _ = d.request("GET", f"/v1/experiments/{exp['id']}/results?format=csv")
        check(status == 200, status)
        rows = list(csv.DictReader(io.StringIO(text if isinstance(text, str) else text.decode())))
        check(sorted((r["strategy"], r["world_size"]) for r in rows) ==
              [("ddp", "1"), ("ddp", "2"), ("horovod", "1"), ("horovod", "2")], rows)
        pooled = d.get(f"/v1/experiments/{exp['id']}/results?group_by=strategy")
        check(sorted((r["strategy"], r["runs"]) for r in pooled["rows"]) ==
              [("ddp", 2), ("horovod", 2)], pooled["rows"])
        status, html, _ = d.request("GET", f"/v1/experiments/{exp['id']}/report")
        body = (html if isinstance(html, str) else html.decode()).split("<body", 1)[-1]
        check(status == 200 and "horovod" in body and "ddp" in body, status)  # both points
    finally:
        d.close()


def refused(d, sweep, field, part, base=TRAIN):
    status, body, _ = d.request("POST", "/v1/experiments", body=dict(base, sweep=sweep))
    check(status == 400 and body["error"]["field"] == field and part in body["error"]["message"],
          (sweep, status, body))


def test_zip_refusals_name_the_point_and_field():
    d = Daemon(cpu_slots=2)
    try:
        refused(d, {"zip": [PAIRS[0], {"engine": "pytorch"}]}, "sweep.zip[1].strategy",
                "is missing")
        refused(d, {"zip": [{"engine": "ddpbench"}, PAIRS[1]]}, "sweep.zip[1].strategy",
                "does not name it")
        refused(d, {"zip": PAIRS, "strategy": ["ddp"]}, "sweep.strategy", "both zipped")
        refused(d, {"zip": [PAIRS[0], {"engine": "pytorch", "strategy": "horovod"}],
                    "world_size": [1, 2]}, "sweep.zip[1].strategy", "sweep point 3 of 4")
        refused(d, {"zip": [PAIRS[0], {"engine": "ddpbench", "strategy": "nope"}]},
                "sweep.zip[1].strategy", "must be one of")
        refused(d, {"zip": [PAIRS[0], PAIRS[0]]}, "sweep.zip[1]", "the same point")
        refused(d, {"zip": []}, "sweep.zip", "non-empty array")
        # the zip's length counts toward the 1,024-run limit: 2 x 64 x 9 = 1152
        refused(d, {"zip": PAIRS, "seed": list(range(1, 65)),
                    "batch_size": [1, 2, 3, 4, 5, 6, 7, 8, 9]}, "sweep", "1152 runs")
        listed = d.get("/v1/experiments")
        check(not listed.get("experiments", listed.get("items")), ("nothing stored", listed))
    finally:
        d.close()


if __name__ == "__main__":
    raise SystemExit(run_cases([test_zip_runs_and_groups_by_the_zipped_fields,
                                test_zip_refusals_name_the_point_and_field]))
