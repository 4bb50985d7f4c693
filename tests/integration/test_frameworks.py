#!/usr/bin/env python3
"""Framework choice and single-process strategies through the REST API (issue 33, part C):
horovod with framework keras (hvd.tensorflow.keras over TensorFlow 2) and the lightning
engine each train mnist-cnn at 2 ranks; tensorflow's MirroredStrategy trains 2 replicas in
ONE process, which the run and its results say (one rank started, world_size 2,
single_process true, steps of one process); dp on a CPU and keras on another engine are
refused naming the field and why.

The frameworks come from deploy/setup-venv.sh (.venv: TensorFlow, Horovod built with it,
PyTorch Lightning); each run is short (20 steps of 16 samples) so the file stays quick."""
import json
import sys

from harness import Daemon, SharedDaemon, check, run_cases

SMALL = {"workload": "train", "model": "mnist-cnn", "batch_size": 16, "steps": 20,
         "warmup_steps": 2, "dataset": {"name": "synthetic", "samples": 1024},
         "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9}}


# The daemon every case shares (harness.SharedDaemon: one engine probe for the file).
SHARED = SharedDaemon(lambda: Daemon(cpu_slots=2))


def steps_of(d, run_id):
    steps = d.get(f"/v1/runs/{run_id}/steps?warmup=true")
    return [dict(zip(steps["columns"], row)) for row in steps["rows"]]


def trained(d, spec, timeout=600):
    """Runs spec to success: (its one run, its steps, its env values)."""
    exp = d.run_experiment(spec, timeout=timeout)
    run_id = exp["runs"][0]["id"]
    run = d.get(f"/v1/runs/{run_id}")
    check(exp["status"] == "succeeded", (spec["engine"], run["status"], run["error"]))
    env = {}
    for e in run["env"]:
        env.update(e["env"])
    return run, steps_of(d, run_id), env


def test_horovod_keras_trains_two_ranks():
    """framework keras: two ranks of hvd.tensorflow.keras, each 20 steps; the env says
    Horovod's Keras binding over TensorFlow with its DistributedOptimizer, and the steps
    have the phases of a one-graph step (null where GET /v1/engines says)."""
    d = SHARED.get()
    run, steps, env = trained(d, dict(SMALL, engine="horovod", strategy="horovod",
                                      framework="keras", world_size=2))
    check(len(run["ranks"]) == 2 and len(steps) == 40, (len(run["ranks"]), len(steps)))
    check(sorted({s["rank"] for s in steps}) == [0, 1], steps[:2])
    check(all(s["loss"] > 0 and s["forward_ms"] is None for s in steps), steps[:2])
    config = json.loads(env["framework_config"])
    check(env["engine"] == "horovod" and "tensorflow" in env and "horovod" in env, env)
    check(config["framework"] == "keras" and config["controller"] == "gloo"
          and config["DistributedOptimizer"]["optimizer"]["class"] == "SGD", config)
    check(run["spec"]["framework"] == "keras", run["spec"])
    # bf16 and clipping through the shared Keras loop: the policy, and each step's norm
    # of the averaged gradient before clipping, the same on both ranks
    run, steps, env = trained(d, dict(SMALL, engine="horovod", strategy="horovod",
                                      framework="keras", world_size=2, precision="bf16",
                                      clip_grad_norm=0.5))
    config = json.loads(env["framework_config"])
    check(config["mixed_precision_policy"] == "mixed_bfloat16"
          and config["DistributedOptimizer"]["optimizer"]["global_clipnorm"] == 0.5, config)
    norms = {}
    for s in steps:
        check(s["grad_norm"] is not None and s["grad_norm"] > 0, s)
        norms.setdefault(s["step"], set()).add(round(s["grad_norm"], 4))
    check(all(len(v) == 1 for v in norms.values()), norms)


def test_lightning_trains_two_ranks():
    """engine lightning: Lightning's Trainer under DDP at 2 ranks, 20 steps each, with the
    phases engine pytorch observes (communication timed by the same DDP hook)."""
    d = SHARED.get()
    run, steps, env = trained(d, dict(SMALL, engine="lightning", strategy="ddp",
                                      world_size=2))
    check(len(run["ranks"]) == 2 and len(steps) == 40, (len(run["ranks"]), len(steps)))
    check(all(s["forward_ms"] is not None and s["comm_ms"] is not None
              and s["bytes_sent"] is None for s in steps), steps[:2])
    check(any(s["comm_ms"] > 0 for s in steps), steps[:4])
    config = json.loads(env["framework_config"])
    check(env["engine"] == "lightning" and env["pytorch_lightning"].startswith("2.0"), env)
    check(config["DDPStrategy"]["num_nodes"] == 2
          and config["DDPStrategy"]["process_group_backend"] == "gloo", config)
    check(sorted(m["rank"] for m in run["memory"]) == [0, 1], run["memory"])


def test_tensorflow_mirrored_is_one_process():
    """strategy mirrored: MirroredStrategy with 2 replicas in one process: the run started
    one rank holding both replicas' CPU slots, its steps are that process's (20), an epoch
    counts both replicas' samples, and results say world_size 2, single_process true."""
    d = SHARED.get()
    spec = dict(SMALL, engine="tensorflow", strategy="mirrored", world_size=2,
                steps=32)  # 1024 / 2 replicas / 16 = 32 steps: one whole epoch
    run, steps, env = trained(d, spec)
    check(run["world_size"] == 2 and len(run["ranks"]) == 1, (run["world_size"],
                                                              run["ranks"]))
    check(len(run["ranks"][0]["cpus"].split(",")) == 2, run["ranks"])
    check(len(steps) == 32 and {s["rank"] for s in steps} == {0}, len(steps))
    check(len(run["epochs"]) == 1 and run["epochs"][0]["samples"] == 1024, run["epochs"])
    config = json.loads(env["framework_config"])
    check(config["MirroredStrategy"]["replicas"] == 2
          and len(config["MirroredStrategy"]["devices"]) == 2, config)
    res = d.get(f"/v1/experiments/{run['experiment_id']}/results")
    rows = res["rows"]
    check(len(rows) == 1 and rows[0]["single_process"] is True
          and rows[0]["world_size"] == 2 and rows[0]["throughput_mean"] > 0, rows)
    check("single_process" in res["columns"], res["columns"])


def test_refusals_name_the_field():
    """dp on a CPU: 400 naming strategy (DataParallel there runs one replica); keras on
    engine pytorch or tensorflow: 400 naming framework; mirrored for ddpbench's worker:
    400 naming strategy; mirrored across nodes: 400 naming nodes. Nothing is stored."""
    d = SHARED.get()
    before = d.get("/v1/experiments")
    cases = (
        (dict(SMALL, engine="pytorch", strategy="dp", world_size=2), "strategy",
         "on a CPU it runs a single replica"),
        (dict(SMALL, engine="pytorch", strategy="ddp", framework="keras"), "framework",
         "keras is engine horovod's"),
        (dict(SMALL, engine="tensorflow", strategy="ddp", framework="keras"), "framework",
         "keras is engine horovod's"),
        (dict(SMALL, strategy="mirrored"), "strategy", "single-process strategies"),
        (dict(SMALL, engine="tensorflow", strategy="mirrored", world_size=2, nodes=2),
         "nodes", "one process"),
    )
    for spec, field, part in cases:
        status, body, _ = d.request("POST", "/v1/experiments", spec)
        check(status == 400 and body["error"]["field"] == field
              and part in body["error"]["message"], (spec, status, body))
    check(d.get("/v1/experiments") == before, "a refused experiment was stored")


if __name__ == "__main__":
    try:
        rc = run_cases([test_refusals_name_the_field, test_tensorflow_mirrored_is_one_process,
                        test_lightning_trains_two_ranks, test_horovod_keras_trains_two_ranks])
    finally:
        SHARED.close()
    sys.exit(rc)
