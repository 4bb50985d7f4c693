#!/usr/bin/env python3
"""Training through the REST API on real workers: every strategy on 1 and 2 ranks stores
its per-rank steps and the results table derives throughput, speed-up and efficiency from
them exactly, with null where a figure cannot be computed (one repeat's intervals, one
rank's overlap); mnist-cnn on Fashion-MNIST reaches the accuracy PyTorch reaches (a shortened
version of the recipe measured in tests/bench/RESULTS.md); a run is deterministic given
its seed; bad training inputs and a rank killed mid-training give clear errors."""
import math
import os
import signal
import sys
import time

from harness import Daemon, check, example, run_cases

SMALL = {"workload": "train", "model": "mnist-cnn", "batch_size": 32, "steps": 12,
         "warmup_steps": 2, "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9}}


def slowest_step_ms(steps):
    """{(repeat, step): slowest rank's step_ms} over non-warm-up steps."""
    cols = steps["columns"]
    at = {c: i for i, c in enumerate(cols)}
    out = {}
    for row in steps["rows"]:
        if row[at["warmup"]]:
            continue
        k = (row[at["repeat"]], row[at["step"]])
        out[k] = max(out.get(k, 0.0), row[at["step_ms"]])
    return out


def test_strategies_end_to_end():
    d = Daemon(cpu_slots=2)
    try:
        spec = example("train-strategies.json")
        spec["steps"] = 16
        exp = d.run_succeeds(spec, timeout=240, runs=10)
        throughput = {}
        for r in exp["runs"]:
            run = d.get(f"/v1/runs/{r['id']}")
            ws, strat = run["spec"]["world_size"], run["spec"]["strategy"]
            steps = d.get(f"/v1/runs/{r['id']}/steps?warmup=true")
            at = {c: i for i, c in enumerate(steps["columns"])}
            rows = steps["rows"]
            # one row per rank and step, warm-up flagged, phases consistent
            check(len(rows) == ws * spec["steps"], (strat, ws, len(rows)))
            check(sorted({row[at["rank"]] for row in rows}) == list(range(ws)), strat)
            check(sum(row[at["warmup"]] for row in rows) == ws * spec["warmup_steps"], strat)
            for row in rows:
                compute = row[at["forward_ms"]] + row[at["backward_ms"]] + row[at["optimizer_ms"]]
                check(row[at["step_ms"]] >= compute > 0, (strat, row))
                check(0 <= row[at["comm_exposed_ms"]] <= row[at["step_ms"]], (strat, row))
                # one clock for both (worker/ddp/ddp.h "Timing"): exposed is part of the
                # communication, all of it for naive; the phases never count it twice
                check(row[at["comm_exposed_ms"]] <= row[at["comm_ms"]], (strat, row))
                if strat == "naive":
                    check(row[at["comm_exposed_ms"]] == row[at["comm_ms"]], row)
                check(row[at["data_ms"]] + compute + row[at["comm_exposed_ms"]]
                      <= row[at["step_ms"]] + 1e-3, (strat, row))
                check(math.isfinite(row[at["loss"]]) and row[at["loss"]] > 0, row)
                if ws == 1:
                    check(row[at["bytes_sent"]] == 0, (strat, row))
                else:  # every step exchanges at least the 21,840 gradients once
                    check(row[at["bytes_sent"]] >= 21840 * 4 // 2, (strat, row))
            slow = slowest_step_ms(steps)
            samples = spec["batch_size"] * ws * len(slow)
            throughput[(strat, ws)] = samples / (sum(slow.values()) / 1e3)
        res = d.get(f"/v1/experiments/{exp['id']}/results")
        cols = res["columns"]
        for c in ("throughput_mean", "speedup", "efficiency", "comm_exposed_ms", "overlap",
                  "step_ms_ci95", "straggler_ms"):
            check(c in cols, c)
        check(len(res["rows"]) == 10, len(res["rows"]))
        for row in res["rows"]:
            key = (row["strategy"], row["world_size"])
            want = throughput[key]
            check(abs(row["throughput_mean"] - want) <= 1e-6 * want, (key, row["throughput_mean"], want))
            base = throughput[(row["strategy"], 1)]
            check(abs(row["speedup"] - want / base) <= 1e-6 * want / base, (key, row["speedup"]))
            # replies carry 10 significant digits (JSON_REAL_PRECISION): compare relatively
            want_eff = row["speedup"] / row["world_size"]
            check(abs(row["efficiency"] - want_eff) <= 1e-9 * abs(want_eff), (key, row))
            # one repeat: no throughput interval, so no speed-up interval (never "± 0");
            # the step time's interval comes from batch means within the repeat
            check(row["throughput_n"] == 1 and row["throughput_ci95"] is None, (key, row))
            check(row["speedup_ci95"] is None, (key, row["speedup_ci95"]))
            check(row["step_ms_ci95"] is not None and row["step_ms_ci95"] > 0, (key, row))
            if row["world_size"] == 1:  # exactly 1 by definition; one rank overlaps nothing
                check(row["speedup"] == 1 and row["overlap"] is None, (key, row))
            else:
                check(row["overlap"] is not None and 0 <= row["overlap"] <= 1, (key, row["overlap"]))
                if row["strategy"] == "naive":  # nothing overlapped, by construction
                    check(row["overlap"] == 0, (key, row["overlap"]))
        # the same table as CSV
        status, body, _ = d.request("GET", f"/v1/experiments/{exp['id']}/results?format=csv")
        check(status == 200 and body.splitlines()[0].startswith("strategy,world_size"), body[:80])
    finally:
        d.close()


def test_fashion_mnist_reaches_pytorch_accuracy():
    """One epoch of the RESULTS.md recipe. PyTorch 1.13 reached the test accuracy in RESULTS.md
    after its first epoch over three seeds (0.734 to 0.745 measured) (tests/bench/RESULTS.md); ddpbench must reach at
    least 0.72 (below PyTorch's worst seed by a margin for the seed-to-seed spread) with a
    falling training loss."""
    d = Daemon(cpu_slots=1)
    try:
        spec = example("train-fashion-mnist.json")
        spec["epochs"] = 1
        exp = d.run_experiment(spec, timeout=300)
        run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
        check(run["status"] == "succeeded", run["error"])
        ep = run["epochs"]
        check(len(ep) == 1 and ep[0]["samples"] == 60000 - 60000 % 64, ep)
        check(ep[0]["test_acc"] >= 0.72, f"test accuracy {ep[0]['test_acc']}")
        check(0 < ep[0]["train_loss"] < 2.0 and ep[0]["test_loss"] < 0.9, ep)  # 1.25 / 0.69 measured
        steps = d.get(f"/v1/runs/{run['id']}/steps?warmup=true")
        at = {c: i for i, c in enumerate(steps["columns"])}
        losses = [row[at["loss"]] for row in steps["rows"]]
        first, last = sum(losses[:50]) / 50, sum(losses[-50:]) / 50
        check(last < first * 0.5, f"loss {first:.3f} -> {last:.3f}")
    finally:
        d.close()


def test_dataset_samples_on_real_data():
    """dataset.samples applies to a real dataset: a 2,048-sample request on Fashion-MNIST
    (60,000 in its files) trains an epoch of exactly 2,048 samples and still evaluates on the
    whole test split; asking for more than the files hold fails the run naming the field."""
    d = Daemon(cpu_slots=1)
    try:
        spec = example("train-fashion-mnist.json")
        spec.update(epochs=1, warmup_steps=1)
        spec["dataset"] = {"name": "fashion-mnist", "samples": 2048}
        too_many = dict(spec, dataset={"name": "fashion-mnist", "samples": 60001})
        exp = d.run_experiment(spec, timeout=300)
        run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
        check(run["status"] == "succeeded", run["error"])
        ep = run["epochs"]
        check(len(ep) == 1 and ep[0]["samples"] == 2048, ep)
        check(ep[0]["test_acc"] is not None and 0 <= ep[0]["test_acc"] <= 1, ep)
        exp = d.run_experiment(too_many, timeout=300)
        run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
        check(run["status"] == "failed" and "dataset.samples" in (run["error"] or "")
              and "60000" in run["error"], run["error"])
    finally:
        d.close()


def test_same_seed_same_run():
    d = Daemon(cpu_slots=2)
    try:
        spec = dict(SMALL, world_size=2, strategy="ddp", dataset={"name": "synthetic", "fresh": True},
                    sweep={"repeats": [1, 2]})
        exp = d.run_experiment(spec, timeout=120)
        check(exp["status"] == "succeeded", exp["runs"])
        losses = []
        for r in exp["runs"]:
            steps = d.get(f"/v1/runs/{r['id']}/steps?warmup=true")
            at = {c: i for i, c in enumerate(steps["columns"])}
            losses.append({(row[at["repeat"]], row[at["step"]], row[at["rank"]]): row[at["loss"]]
                           for row in steps["rows"]})
        common = [k for k in losses[0] if k in losses[1]]
        check(len(common) == 2 * SMALL["steps"], len(common))
        check(all(losses[0][k] == losses[1][k] for k in common), "repeat 0 of both runs differs")
        # repeat 1 starts from seed + 1: a different initialisation
        check(any(losses[1][(1, s, 0)] != losses[1][(0, s, 0)] for s in range(SMALL["steps"])),
              "repeats are not independent")
    finally:
        d.close()


def test_loader_workers_same_batches():
    """dataset.workers fills batches on several threads without changing them: a sweep of 1
    and 3 workers over fresh synthetic data (an epoch of 3 batches, so 12 steps cross
    reshuffled epoch ends) gives both runs the same per-step losses, the model on one thread
    being deterministic; more than one worker without prefetch is refused at submit."""
    d = Daemon(cpu_slots=1)
    try:
        spec = dict(SMALL, threads=1, prefetch=2, eval=False,
                    dataset={"name": "synthetic", "fresh": True, "samples": 100},
                    sweep={"dataset.workers": [1, 3]})
        exp = d.run_experiment(spec, timeout=180)
        check(exp["status"] == "succeeded", exp["runs"])
        check(len(exp["runs"]) == 2, exp["runs"])
        losses = []
        for r in exp["runs"]:
            check(r["status"] == "succeeded", r)
            steps = d.get(f"/v1/runs/{r['id']}/steps?warmup=true")
            at = {c: i for i, c in enumerate(steps["columns"])}
            losses.append({(row[at["repeat"]], row[at["step"]], row[at["rank"]]): row[at["loss"]]
                           for row in steps["rows"]})
        check(len(losses[0]) == SMALL["steps"] and losses[0].keys() == losses[1].keys(),
              (len(losses[0]), len(losses[1])))
        check(all(isinstance(v, float) for v in losses[0].values()), losses[0])
        check(all(losses[0][k] == losses[1][k] for k in losses[0]),
              ("workers 1 and 3 trained on different batches", losses))
        status, body, _ = d.request("POST", "/v1/experiments",
                                    dict(SMALL, prefetch=0, dataset={"workers": 3}))
        check(status == 400 and body["error"]["field"] == "dataset.workers", (status, body))
    finally:
        d.close()


def test_step_times_against_the_daemons_clock():
    """The workers time steps on their own monotonic clocks; the daemon stamps the run's
    start and end on its wall clock, independently. Every step (warm-up included) of a
    1-rank run falls inside the run, so their sum cannot exceed the run's duration; and on
    a run of 150 steps the steps are most of it, so a unit slip (ms read as us, a phase
    counted twice) cannot pass either way."""
    d = Daemon(cpu_slots=1)
    try:
        spec = dict(SMALL, steps=150, warmup_steps=5, dataset={"name": "synthetic"})
        exp = d.run_experiment(spec, timeout=180)
        check(exp["status"] == "succeeded", exp["runs"])
        run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
        steps = d.get(f"/v1/runs/{run['id']}/steps?warmup=true")
        at = {c: i for i, c in enumerate(steps["columns"])}
        total_s = sum(row[at["step_ms"]] for row in steps["rows"]) / 1e3
        check(len(steps["rows"]) == spec["steps"], len(steps["rows"]))  # warm-up among them
        # the run also spawns the process, joins, builds the model and reports: the steps
        # are under its duration, and more than a fifth of it (measured: about 0.7)
        check(total_s <= run["duration_s"], (total_s, run["duration_s"]))
        check(total_s >= 0.2 * run["duration_s"], (total_s, run["duration_s"]))
    finally:
        d.close()


def test_accumulation_and_compression_through_the_api():
    """The strategy knobs reach the workers: accumulate 2 makes every step train 2 batches,
    and fp16 compression halves the gradient bytes each rank sends per step (recursive
    doubling at 2 ranks sends the whole 21,840-gradient bucket once, in 4 or 2 bytes)."""
    d = Daemon(cpu_slots=2)
    try:
        spec = dict(SMALL, world_size=2, strategy="ddp", accumulate=2, steps=6, warmup_steps=1,
                    dataset={"name": "synthetic", "fresh": True},
                    sweep={"compression": ["none", "fp16"]})
        exp = d.run_succeeds(spec, timeout=120)
        sent = {}
        for r in exp["runs"]:
            run = d.get(f"/v1/runs/{r['id']}")
            steps = d.get(f"/v1/runs/{r['id']}/steps?warmup=true")
            at = {c: i for i, c in enumerate(steps["columns"])}
            check(all(row[at["samples"]] == 2 * SMALL["batch_size"] for row in steps["rows"]),
                  "samples per step = batch_size x accumulate")
            sent[run["spec"]["compression"]] = {row[at["bytes_sent"]] for row in steps["rows"]}
        check(len(sent["none"]) == 1 and len(sent["fp16"]) == 1, sent)  # the same every step
        (full,), (half,) = sent["none"], sent["fp16"]
        check(full == 21840 * 4 and half * 2 == full, sent)
    finally:
        d.close()


def test_bad_training_inputs():
    d = Daemon(cpu_slots=2)
    try:
        for bad, field in (({"optimizer": {"lr": 0}}, "optimizer.lr"),
                           ({"dataset": {"name": "imagenet"}}, "dataset.name"),
                           ({"dataset": {"nmae": "mnist"}}, "dataset.nmae"),
                           ({"steps": 10, "epochs": 1}, "epochs"),
                           # mixed precision is a GPU feature: refused at submit on the CPU
                           ({"precision": "fp16"}, "precision"),
                           ({"threads": 2, "world_size": 2}, "world_size")):
            status, body, _ = d.request("POST", "/v1/experiments", dict(SMALL, **bad))
            want = 409 if field == "world_size" else 400
            check(status == want and body["error"]["field"] == field, (bad, status, body))
        # a dataset directory that does not exist: refused at submit naming the field and
        # the path, as one outside the daemon's --data-dir is
        status, body, _ = d.request("POST", "/v1/experiments",
                                    dict(SMALL, dataset={"name": "mnist",
                                                         "path": "/nonexistent/mnist"}))
        check(status == 400 and body["error"]["field"] == "dataset.path"
              and "/nonexistent/mnist" in body["error"]["message"], (status, body))
        # all steps are warm-up: nothing would be measured
        d.run_fails(dict(SMALL, warmup_steps=12), "warmup_steps")
    finally:
        d.close()


def test_rank_killed_mid_training():
    d = Daemon(cpu_slots=2)
    try:
        spec = dict(SMALL, world_size=2, steps=100000, model="lenet5",
                    dataset={"name": "synthetic"}, comm_timeout_s=10)
        exp = d.submit(spec)
        run_id = exp["runs"][0]["id"] if "runs" in exp else d.get(f"/v1/experiments/{exp['id']}")["runs"][0]["id"]
        run = d.wait_run(run_id, lambda r: r["status"] == "running" and (r["progress"] or 0) > 0,
                         timeout=60, what="training under way")
        time.sleep(1)
        pid = [k["pid"] for k in run["ranks"] if k["rank"] == 1][0]
        os.kill(pid, signal.SIGKILL)
        t0 = time.time()
        run = d.wait_run(run_id, lambda r: r["status"] not in ("running", "starting"), timeout=30,
                         what="run failed")
        check(run["status"] == "failed" and run["error_rank"] == 1, (run["status"], run["error"]))
        check("rank 1" in run["error"], run["error"])
        check(time.time() - t0 < 15, "the failure took too long to be noticed")
        # the steps measured before the kill are kept
        steps = d.get(f"/v1/runs/{run_id}/steps?warmup=true")
        check(len(steps["rows"]) > 0, "steps lost")
    finally:
        d.close()


if __name__ == "__main__":
    sys.exit(run_cases([test_strategies_end_to_end, test_fashion_mnist_reaches_pytorch_accuracy,
               test_dataset_samples_on_real_data,
               test_same_seed_same_run, test_loader_workers_same_batches,
               test_step_times_against_the_daemons_clock,
               test_accumulation_and_compression_through_the_api,
               test_bad_training_inputs, test_rank_killed_mid_training]))
