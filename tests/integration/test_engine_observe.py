#!/usr/bin/env python3
"""Every figure observed for the framework engines (issue 33 item 7), through the REST API:
- pytorch and horovod runs with trace_steps > 0 return a real timeline from GET
  /v1/runs/{id}/trace: for each rank and traced step (the trace_steps after warm-up) the
  step with its data, forward, backward and optimizer spans nested inside it, its
  "comm_exposed" spans, and the collectives: DDP's comm hook one allreduce per bucket,
  Horovod's own timeline converted into negotiate and allreduce ops per fused group, every
  step's allreduces carrying the whole model's gradients; the phase spans add up to the
  stored step phases; deepspeed's traced steps have the phases and no collective, as GET
  /v1/engines says (memory_not_observed "trace_comm");
- rank 0's gradient readiness is stored: with the gloo fits of a collective on engine
  pytorch, the results rows of pytorch, horovod and deepspeed carry pred_* columns
  predicted from their own one-rank run (issue 35);
- the memory lines leave device_peak_bytes null on the CPU (no device);
- a horovod run whose steps end inside the window still has its traced steps' collectives;
- ddpb_observe.horovod_timeline_groups converts a Horovod timeline (fused tensors one group,
  a rank's own request mark, a file cut short by its writer)."""
import json
import os
import sys

from harness import Daemon, check, model_params, run_cases
from test_observe import traced_window, x_events

SOURCE = os.environ.get("DDPB_SOURCE_DIR",
                        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(SOURCE, "engines"))
import ddpb_observe  # noqa: E402  (the standard library only)

COLL = {"workload": "collective", "engine": "pytorch", "world_size": 2, "min_bytes": "4K",
        "max_bytes": "4M", "factor": 4, "iters": 6, "warmup": 2,
        "sweep": {"op": ["allreduce", "all_gather"]}}  # deepspeed gathers its partitions
TRAIN = {"workload": "train", "model": "mnist-cnn", "batch_size": 32, "steps": 12,
         "warmup_steps": 3, "trace_steps": 3, "eval": False, "dataset": {"samples": 1024}}
PAIRS = [{"engine": "pytorch", "strategy": "ddp"}, {"engine": "horovod", "strategy": "horovod"},
         {"engine": "deepspeed", "strategy": "zero1"}]
EPS = 0.002  # ms: the trace's microseconds


def check_engine_trace(d, run, trace, n, cannot):
    """The traced window of every rank, its spans nested in their step and adding up to the
    stored phases, and its collectives."""
    engine, ws = run["spec"]["engine"], run["spec"]["world_size"]
    at, stored, by = traced_window(d, run, trace)
    for (rank, step), evs in by.items():
        row, what = stored[(rank, step)], (engine, ws, rank, step)
        whole = [e for e in evs if e["cat"] == "step"]
        check(len(whole) == 1, (what, whole))
        s = whole[0]
        compute = [e for e in evs if e["tid"] == 0 and e is not s]
        for e in compute:
            check(s["ts"] - 1e-3 <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 1e-3,
                  (what, e, s))

        def total(name):
            return sum(e["dur"] for e in compute if e["name"] == name) / 1000

        def inside(name):
            return sum(c["dur"] for c in compute if c["name"] == "comm_exposed"
                       for p in compute if p["name"] == name
                       if p["ts"] - 1e-3 <= c["ts"] and
                       c["ts"] + c["dur"] <= p["ts"] + p["dur"] + 1e-3) / 1000

        for name in ("data", "forward", "backward", "optimizer"):
            check(sum(1 for e in compute if e["name"] == name) >= 1, (what, name))
        check(abs(s["dur"] / 1000 - row[at["step_ms"]]) < EPS, (what, s, row))
        check(abs(total("forward") - row[at["forward_ms"]]) < EPS, (what, "forward"))
        check(abs(total("data") - row[at["data_ms"]]) < EPS, (what, "data"))
        ops = [e for e in evs if e["cat"] == "collective"]
        if engine == "deepspeed":
            check(ops == [] and "trace_comm" in cannot and "trace" not in cannot, (what, ops))
            continue
        check(abs(total("comm_exposed") - row[at["comm_exposed_ms"]]) < 0.01,
              (what, total("comm_exposed"), row[at["comm_exposed_ms"]]))
        check(abs(total("backward") - inside("backward") - row[at["backward_ms"]]) < 0.01,
              (what, "backward", total("backward"), inside("backward"), row[at["backward_ms"]]))
        check(abs(total("optimizer") - inside("optimizer") - row[at["optimizer_ms"]]) < 0.05,
              (what, "optimizer", total("optimizer"), inside("optimizer"), row[at["optimizer_ms"]]))
        check(all(e["tid"] >= 1 for e in ops), (what, ops))
        reduced = sum(e["args"]["bytes"] for e in ops if e["name"] == "allreduce")
        if engine == "pytorch":  # DDP's buckets, every one of every step
            check(reduced == 4 * n and {e["name"] for e in ops} == {"allreduce"}, (what, ops))
            keys = [e["args"]["bucket"] for e in ops]
            check(len(keys) == len(set(keys)), (what, "a bucket twice", keys))
        elif ws > 1:  # Horovod's timeline: each fused group negotiated, then reduced
            check(reduced == 4 * n and {e["name"] for e in ops} == {"negotiate", "allreduce"},
                  (what, ops))
            check(all(e["args"]["algorithm"] == "gloo_allreduce" for e in ops
                      if e["name"] == "allreduce"), (what, ops))


def test_engines_trace_readiness_memory():
    n = model_params("mnist-cnn")
    d = Daemon(cpu_slots=2)
    try:
        engines = {e["name"]: e for e in d.get("/v1/engines")["nodes"][0]["engines"]}
        import time
        deadline = time.time() + 180
        while d.get("/v1/engines")["nodes"][0]["probing"] and time.time() < deadline:
            time.sleep(0.3)
        engines = {e["name"]: e for e in d.get("/v1/engines")["nodes"][0]["engines"]}
        for name in ("pytorch", "horovod"):
            cannot = engines[name]["memory_not_observed"]
            check(not {"trace", "trace_comm", "gradient_readiness"} & set(cannot), (name, cannot))
        check("gradient_readiness" not in engines["deepspeed"]["memory_not_observed"],
              engines["deepspeed"])
        check("trace" in engines["tensorflow"]["memory_not_observed"], engines["tensorflow"])
        coll = d.run_experiment(COLL, timeout=240)  # the gloo fits the model needs
        check(coll["status"] == "succeeded", [(r["status"], r["error"]) for r in coll["runs"]])
        exp = d.run_experiment(dict(TRAIN, sweep={"zip": PAIRS, "world_size": [1, 2]}),
                               timeout=900)
        check(exp["status"] == "succeeded", [(r["status"], r["error"]) for r in exp["runs"]])
        one = {}
        for r in exp["runs"]:
            run = d.get(f"/v1/runs/{r['id']}")
            engine, ws = run["spec"]["engine"], run["spec"]["world_size"]
            if ws == 1:
                one[engine] = r["id"]
            trace = d.get(f"/v1/runs/{r['id']}/trace")
            check(trace["otherData"]["traced_steps"] == ws * TRAIN["trace_steps"],
                  (engine, ws, trace["otherData"]))
            check_engine_trace(d, run, trace, n, engines[engine]["memory_not_observed"])
            for m in run["memory"]:
                check(m["device_peak_bytes"] is None and m["peak_rss_bytes"] > 4 * n, m)
        res = d.get(f"/v1/experiments/{exp['id']}/results")
        for row in res["rows"]:
            what = (row["engine"], row["world_size"], row["pred_note"])
            check(row["pred_note"] is None and row["pred_step_ms"] > 0, what)
            check(row["pred_base_run"] == one[row["engine"]], (what, row["pred_base_run"], one))
        # steps that run out inside the window: Horovod's timeline is closed and read all
        # the same, and the steps that ran are traced with their collectives
        exp = d.run_experiment(dict(TRAIN, engine="horovod", strategy="horovod", world_size=2,
                                    steps=5, trace_steps=10), timeout=300)
        check(exp["status"] == "succeeded", [(r["status"], r["error"]) for r in exp["runs"]])
        evs = x_events(d.get(f"/v1/runs/{exp['runs'][0]['id']}/trace"))
        steps = {(e["pid"], e["args"]["step"]) for e in evs if e["cat"] == "step"}
        check(steps == {(r, s) for r in (0, 1) for s in (3, 4)}, sorted(steps))
        for rank in (0, 1):
            reduced = sum(e["args"]["bytes"] for e in evs if e["pid"] == rank and
                          e["cat"] == "collective" and e["name"] == "allreduce")
            check(reduced == 2 * 4 * n, (rank, reduced))
    finally:
        d.close()


def _timeline(events, start_us=1_000_000):
    head = [{"name": "process_name", "ph": "M", "pid": 0,
             "args": {"start_time_since_epoch_in_micros": start_us}}]
    return "[\n" + ",\n".join(json.dumps(e) for e in head + events)


def _tensor(pid, name, neg, red, marks=(), shape="[10]"):
    evs = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}},
           {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": neg[0], "pid": pid}]
    evs += [{"ph": "X", "name": str(r), "ts": t, "pid": pid, "dur": 0} for r, t in marks]
    evs += [{"ph": "E", "ts": neg[1], "pid": pid},
            {"ph": "B", "name": "ALLREDUCE", "ts": red[0], "pid": pid},
            {"ph": "B", "name": "GLOO_ALLREDUCE", "ts": red[0] + 1, "pid": pid},
            {"ph": "E", "ts": red[1] - 1, "pid": pid},
            {"ph": "E", "ts": red[1], "pid": pid, "args": {"dtype": "float32", "shape": shape}}]
    return evs


def test_horovod_timeline_conversion():
    # two tensors fused (overlapping ALLREDUCE), a third reduced later; a tally that is
    # not the optimizer's; rank 1's request marked
    evs = (_tensor(1, "allreduce.fc.weight", (10, 50), (60, 90), [(1, 20), (0, 45)], "[4, 10]")
           + _tensor(2, "allreduce.fc.bias", (12, 52), (61, 91), shape="[10]")
           + _tensor(3, "allreduce.conv.weight", (100, 120), (130, 170), shape="[3, 3]")
           + _tensor(4, "ddpb_tally", (200, 210), (220, 230)))
    text = _timeline(evs) + "]"
    groups = ddpb_observe.horovod_timeline_groups(text)
    check(len(groups) == 2, groups)
    g0, g1 = groups
    us = 1000  # the timeline's microseconds in ns from its start (1 s after the epoch)
    check(g0["bytes"] == 4 * 50 and g0["start"] == (1_000_000 + 60) * us and
          g0["end"] == (1_000_000 + 91) * us and g0["algorithm"] == "gloo_allreduce", g0)
    check(g0["ready"] == {1: (1_000_000 + 20) * us, 0: (1_000_000 + 45) * us} and
          g0["negotiate"] == (1_000_000 + 10) * us and g0["negotiated"] == (1_000_000 + 52) * us,
          g0)
    check(g1["bytes"] == 4 * 9 and g1["ready"] == {}, g1)
    # a file its writer had not closed: the whole events before the cut
    cut = text[:text.index('"ALLREDUCE", "ts": 130') - 30]
    check(len(ddpb_observe.horovod_timeline_groups(cut)) == 1, "cut short")
    check(ddpb_observe.horovod_timeline_groups("[") == [], "empty")
    # placed into a rank's held steps on its own clock: negotiate from its own mark
    tr = ddpb_observe.Tracer({"warmup_steps": 0, "trace_steps": 1}, 0)
    tr.offset = 1_000_000 * us  # this rank's clock starts at the timeline's start
    tr.held = [{"step": 0, "spans": [], "ops": [], "t0": 0, "t1": 100 * us},
               {"step": 1, "spans": [], "ops": [], "t0": 100 * us, "t1": 200 * us}]
    ddpb_observe.place_groups(tr, groups, 1)
    s0, s1 = tr.held[0]["ops"], tr.held[1]["ops"]
    check(s0 == [["negotiate", 0, 200, "horovod", 20 * us, 52 * us],
                 ["allreduce", 0, 200, "gloo_allreduce", 60 * us, 91 * us]], s0)
    check(s1 == [["negotiate", 0, 36, "horovod", 100 * us, 120 * us],
                 ["allreduce", 0, 36, "gloo_allreduce", 130 * us, 170 * us]], s1)


if __name__ == "__main__":
    raise SystemExit(run_cases([test_horovod_timeline_conversion,
                                test_engines_trace_readiness_memory]))
