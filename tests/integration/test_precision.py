#!/usr/bin/env python3
"""Issue 33's precision and clipping on ddpbench's own engine, through the REST API on real
workers:
- precision bf16 on device cpu trains (mnist-cnn, 2 ranks): the run succeeds, its loss is
  finite, and its env says which path ran (bf16_path: "onednn-native" where oneDNN has bf16
  kernels for this CPU, "emulated-storage" where not); the same run with the workers under
  ONEDNN_MAX_CPU_ISA=AVX2 (oneDNN sees an AVX2 CPU: no bf16 kernels) runs emulated-storage;
- clip_grad_norm swept over every strategy at 2 ranks: every step row carries grad_norm
  (the norm before clipping, > 0 and the same on both ranks), runs without clipping carry
  null, and loss_scale and skipped are null on the CPU (no fp16);
- what cannot run is a 400 naming the field: fp16 on the CPU, loss_scale without fp16,
  clipping on a pipeline."""
import math
import os
import sys

from harness import Daemon, check, run_cases

BASE = {"workload": "train", "model": "mnist-cnn", "world_size": 2, "batch_size": 8,
        "steps": 4, "warmup_steps": 1, "dataset": {"name": "synthetic"}}


def env_of(d, run_id):
    envs = [e.get("env", {}) for e in d.get(f"/v1/runs/{run_id}").get("env", [])]
    check(len(envs) == 2, envs)
    return envs


def test_bf16_runs_and_says_its_path():
    d = Daemon(cpu_slots=4)
    try:
        exp = d.run_succeeds(dict(BASE, precision="bf16"), timeout=180)
        run = exp["runs"][0]["id"]
        paths = {e.get("bf16_path") for e in env_of(d, run)}
        check(len(paths) == 1 and paths <= {"onednn-native", "emulated-storage"}, paths)
        rows = d.step_rows(run)
        check(rows and all(math.isfinite(r["loss"]) for r in rows), rows)
    finally:
        d.close()
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2")
    d = Daemon(cpu_slots=4, env=env)
    try:
        exp = d.run_succeeds(dict(BASE, precision="bf16"), timeout=180)
        paths = {e.get("bf16_path") for e in env_of(d, exp["runs"][0]["id"])}
        check(paths == {"emulated-storage"}, paths)
    finally:
        d.close()


def test_clip_every_strategy_reports_grad_norm():
    d = Daemon(cpu_slots=4)
    try:
        spec = dict(BASE, sweep={"strategy": ["naive", "ddp", "horovod", "zero1", "zero2"],
                                 "clip_grad_norm": [0, 0.5]})
        exp = d.run_succeeds(spec, timeout=600, runs=10)
        for run in exp["runs"]:
            clip = run["params"]["clip_grad_norm"]
            rows = d.step_rows(run["id"])
            check(len(rows) == 2 * BASE["steps"], (run["params"], len(rows)))
            for r in rows:
                check(r["loss_scale"] is None and r["skipped"] is None, r)
                if clip == 0:
                    check(r["grad_norm"] is None, r)
                else:
                    check(r["grad_norm"] is not None and r["grad_norm"] > 0, r)
            if clip:
                by_step = {}
                for r in rows:
                    by_step.setdefault(r["step"], []).append(r["grad_norm"])
                for step, norms in by_step.items():  # every rank measured the same norm
                    check(len(norms) == 2 and abs(norms[0] - norms[1]) <= 1e-5 * norms[0],
                          (run["params"], step, norms))
    finally:
        d.close()


def test_refusals_name_the_field():
    d = Daemon(cpu_slots=4)
    try:
        for bad, field in (({"precision": "fp16"}, "precision"),
                           ({"loss_scale": 128}, "loss_scale"),
                           ({"precision": "bf16", "loss_scale_window": 10}, "loss_scale_window"),
                           ({"clip_grad_norm": -1}, "clip_grad_norm"),
                           ({"clip_grad_norm": 1, "pipeline": 2}, "clip_grad_norm")):
            status, body, _ = d.request("POST", "/v1/experiments", body=dict(BASE, **bad))
            check(status == 400, (bad, status, body))
            check(body["error"]["field"] == field, (bad, body))
    finally:
        d.close()


if __name__ == "__main__":
    sys.exit(run_cases([test_bf16_runs_and_says_its_path, test_clip_every_strategy_reports_grad_norm,
                        test_refusals_name_the_field]))
