#!/usr/bin/env python3
"""DDLBench's three distribution models through the REST API on real workers (issue 19):
- data, model (pipeline 2, one micro-batch) and pipeline parallelism (pipeline 2, four
  micro-batches, both schedules) on the same 2 ranks and model: every run succeeds, every
  rank's step rows carry its stage, the activations it sent (exactly the micro-batches'
  activations or gradients plus the tied embedding's gradient), and a bubble that adds up
  with the phases to the step; the ranks agree on the loss; each stage holds fewer
  parameters than the whole model; the results rows give the bubble fraction beside its
  theory (P-1)/(M+P-1); the trace has a span per micro-batch;
- 2 replicas x 2 stages with ddp on a text file, cut by measured layer time, epochs with
  evaluation: the epoch's train and test loss are reported and the replicas exchanged
  their stages' gradients;
- bad pipeline specs are refused at submit naming the field, and a pipeline longer than
  the model has places to cut fails the run saying so."""
import math
import sys

from harness import Daemon, check, corpus_daemon, model_params, run_cases

BASE = {"workload": "train", "model": "gpt2-tiny", "seq_len": 32, "batch_size": 8, "steps": 6,
        "warmup_steps": 1, "trace_steps": 1, "dataset": {"samples": 256}, "world_size": 2,
        "optimizer": {"type": "adam", "lr": 0.001}}
T, C, V = 32, 64, 256  # gpt2-tiny's channels, the synthetic vocabulary


def test_three_distribution_models():
    d = Daemon(cpu_slots=2)
    try:
        runs = {}
        for label, extra in (("data", {}),
                             ("model", {"pipeline": 2, "pipeline_split": "transformer.h.1.ln_1"}),
                             ("1f1b", {"pipeline": 2, "micro_batches": 4}),
                             ("gpipe", {"pipeline": 2, "micro_batches": 4, "schedule": "gpipe"})):
            exp = d.run_experiment(dict(BASE, **extra), timeout=180)
            check(exp["status"] == "succeeded", (label, [(r["status"], r["error"]) for r in exp["runs"]]))
            runs[label] = (exp, extra)
        whole = model_params("gpt2-tiny")
        for label, (exp, extra) in runs.items():
            run_id = exp["runs"][0]["id"]
            rows = d.step_rows(run_id)
            P, M = extra.get("pipeline", 1), extra.get("micro_batches", 1)
            check(len(rows) == 2 * BASE["steps"], (label, len(rows)))
            for step in range(BASE["steps"]):  # a replica's stages report its one loss
                losses = {r["loss"] for r in rows if r["step"] == step}
                check(P == 1 or len(losses) == 1, (label, step, losses))
            first = [r["loss"] for r in rows if r["step"] == 0][0]
            check(abs(first - math.log(V)) < 0.3, (label, first))
            for r in rows:
                if P == 1:
                    check(r["stage"] is None and r["p2p_ms"] is None and r["bubble_ms"] is None, r)
                    continue
                check(r["stage"] == r["rank"], r)
                # stage 0 sends M activations forward, stage 1 M gradients back, each
                # mb x T x C floats, and both the tied embedding's V x C gradient
                mb = BASE["batch_size"] // M
                check(r["p2p_bytes"] == M * mb * T * C * 4 + V * C * 4, (label, r))
                check(r["bytes_sent"] == 0, r)  # one replica: no gradient exchange
                busy = (r["data_ms"] + r["forward_ms"] + r["backward_ms"] + r["optimizer_ms"]
                        + r["comm_exposed_ms"])
                check(abs(busy + r["bubble_ms"] - r["step_ms"]) < 1e-3 * r["step_ms"] + 1e-3, (label, r))
                check(0 <= r["p2p_ms"] <= r["step_ms"], r)
            run = d.get(f"/v1/runs/{run_id}")
            mem = sorted(run["memory"], key=lambda m: m["rank"])
            if P == 1:
                check(all(m["params_bytes"] == whole * 4 for m in mem), mem)
            else:  # the two stages hold the model once, plus the head's copy of wte
                held = sum(m["params_bytes"] for m in mem)
                check(held == (whole + V * C) * 4, (held, whole))
                check(all(m["params_bytes"] < whole * 4 for m in mem), mem)
            res = d.get(f"/v1/experiments/{exp['id']}/results")
            row = res["rows"][0]
            if P == 1:
                check(row["bubble_theory"] is None and row["bubble_fraction"] is None, row)
            else:
                check(abs(row["bubble_theory"] - (P - 1) / (M + P - 1)) < 1e-9, row)
                check(0 < row["bubble_fraction"] < 1, row)
                trace = d.get(f"/v1/runs/{run_id}/trace")
                spans = [ev for ev in trace["traceEvents"]
                         if ev.get("ph") == "X" and ev.get("name") == "forward"]
                check(len(spans) == 2 * M, (label, len(spans)))  # a span per micro-batch a rank
                check(sorted({ev["args"]["micro_batch"] for ev in spans}) == list(range(M)), spans)
    finally:
        d.close()


def test_replicas_of_stages_on_text():
    lines = (f"line {i % 37} of a small corpus for pipeline parallel training."
             for i in range(1500))
    with corpus_daemon(4, lines) as (d, path):
        spec = dict(BASE, world_size=4, pipeline=2, micro_batches=2, strategy="ddp",
                    pipeline_balance="time",
                    dataset={"name": "text", "path": path, "samples": 256}, epochs=1,
                    trace_steps=0, optimizer={"type": "adam", "lr": 0.003})
        del spec["steps"]
        exp = d.run_succeeds(spec, timeout=240)
        run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
        ep = run["epochs"]
        check(len(ep) == 1 and ep[0]["samples"] == 256 and ep[0]["test_loss"] is not None, ep)
        check(ep[0]["train_loss"] < math.log(V), ep)
        rows = d.step_rows(run["id"])
        check(sorted({(r["rank"], r["stage"]) for r in rows}) == [(0, 0), (1, 1), (2, 0), (3, 1)], rows[:4])
        check(all(r["bytes_sent"] > 0 for r in rows), "each stage's replicas exchanged gradients")


def test_bad_pipeline_specs():
    d = Daemon(cpu_slots=2)
    try:
        for bad, field in (({"world_size": 3, "pipeline": 2}, "world_size"),
                           ({"pipeline": 2, "micro_batches": 3}, "micro_batches"),
                           ({"micro_batches": 2}, "micro_batches"),
                           ({"pipeline": 2, "accumulate": 2}, "accumulate"),
                           ({"pipeline": 2, "strategy": "zero1"}, "strategy"),
                           ({"pipeline": 2, "schedule": "interleaved"}, "schedule"),
                           ({"pipeline": 2, "pipeline_balance": "flops"}, "pipeline_balance")):
            status, body, _ = d.request("POST", "/v1/experiments", dict(BASE, **bad))
            check(status == 400 and body["error"]["field"] == field, (bad, status, body))
    finally:
        d.close()
    d = Daemon(cpu_slots=8)  # 8 ranks on this machine's CPUs: oversubscribed, and brief
    try:
        exp = d.run_experiment(dict(BASE, world_size=8, pipeline=8), timeout=120)
        check(exp["status"] == "failed", exp["status"])
        errors = " ".join(r["error"] or "" for r in exp["runs"])
        check("places to cut" in errors, errors)
        # a named cut that is none: the run fails listing where stages can start
        exp = d.run_experiment(dict(BASE, pipeline=2, pipeline_split="transformer.h.0.attn"),
                               timeout=120)
        errors = " ".join(r["error"] or "" for r in exp["runs"])
        check(exp["status"] == "failed" and "stages can start at: transformer.h.0.ln_1" in errors,
              errors)
    finally:
        d.close()


if __name__ == "__main__":
    sys.exit(run_cases([test_three_distribution_models, test_replicas_of_stages_on_text,
                        test_bad_pipeline_specs]))
