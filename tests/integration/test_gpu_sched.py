#!/usr/bin/env python3
"""GPU scheduling through the real daemon, without needing a GPU: a device "cuda" point
that can never fit is refused at submit with 409 naming the field (no GPU slots at all:
"device"; more ranks than GPUs without emulate_multi_rank: "world_size"); an accepted
emulated run is placed with both ranks on GPU 0, stored as emulated, logged as
experimental by the daemon, and its worker either
refuses the device with device_check's message (a worker built without CUDA), fails
setting up CUDA (a CUDA build on a machine without a GPU), or, on a GPU machine, succeeds
with every element right; the results table carries the emulated column either way."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(__file__))
from harness import BUILD, Daemon, check, run_cases  # noqa: E402

SPEC = {"workload": "collective", "device": "cuda", "backend": "nccl", "op": "allreduce",
        "min_bytes": "4K", "max_bytes": "64K", "factor": 4, "iters": 3, "warmup": 1,
        "timeout_s": 60}


def built_with_cuda():
    with open(os.path.join(BUILD, "ddpb_config.h")) as f:
        return re.search(r"#define DDPB_HAVE_CUDA 1", f.read()) is not None


def test_refused_without_gpus():
    d = Daemon(extra_args=["--gpus", "0"])
    try:
        status, body, _ = d.request("POST", "/v1/experiments", body=dict(SPEC, world_size=1))
        check(status == 409, f"{status}: {body}")
        check(body["error"]["field"] == "device", body)
        check("GPU" in body["error"]["message"], body)
        # a CPU spec is unaffected
        status, body, _ = d.request("POST", "/v1/experiments", body={"workload": "collective",
                                    "world_size": 1, "max_bytes": "4K", "min_bytes": "4K"})
        check(status == 201, f"{status}: {body}")
    finally:
        d.close()


def test_more_ranks_than_gpus():
    d = Daemon(cpu_slots=4, extra_args=["--gpus", "1"])
    try:
        status, body, _ = d.request("POST", "/v1/experiments", body=dict(SPEC, world_size=2))
        check(status == 409, f"{status}: {body}")
        check(body["error"]["field"] == "world_size", body)
        check("emulate_multi_rank" in body["error"]["message"], body)
        # one point of a sweep that cannot fit refuses the whole experiment
        status, body, _ = d.request("POST", "/v1/experiments", body=dict(
            SPEC, sweep={"world_size": [1, 2]}))
        check(status == 409 and body["error"]["field"] == "world_size", f"{status}: {body}")
        listed = d.get("/v1/experiments")
        check(listed["total"] == 0, f"nothing stored: {listed}")
    finally:
        d.close()


def test_emulated_run_placed_and_flagged():
    d = Daemon(cpu_slots=4, extra_args=["--gpus", "1"])
    try:
        exp = d.run_experiment(dict(SPEC, world_size=2, emulate_multi_rank=True), timeout=120)
        run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
        check(run["emulated"] is True, run)
        check([k["gpu"] for k in run["ranks"]] == [0, 0], run["ranks"])
        # experimental: the daemon says so when the run starts
        check(f"run {run['id']}: emulate_multi_rank is experimental" in d.daemon_log(),
              d.daemon_log())
        table = d.get(f"/v1/experiments/{exp['id']}/results")
        if run["status"] == "succeeded":  # a GPU machine: NCCL between two emulated ranks
            check("emulated" in table["columns"] and table["rows"], table)
            check(all(r["emulated"] is True and r["wrong"] == 0 for r in table["rows"]), table)
            return
        check(run["status"] == "failed", run)
        err = run["error"] or ""
        if not built_with_cuda():
            check("built without CUDA" in err and "-Dcuda=enabled" in err, err)
        else:  # no GPU here: CUDA's own message, from the rank that tried
            check(re.search(r"CUDA|cuda|device", err) is not None, err)
        check(table["rows"] == [] or all(r["emulated"] is True for r in table["rows"]), table)
    finally:
        d.close()


if __name__ == "__main__":
    sys.exit(run_cases([test_refused_without_gpus, test_more_ranks_than_gpus,
                        test_emulated_run_placed_and_flagged]))
