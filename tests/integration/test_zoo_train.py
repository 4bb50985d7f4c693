#!/usr/bin/env python3
"""Issue 33's models train through the REST API: each of inception-v3, resnet101, resnet152,
vgg11, resnet50-cifar, vgg16-cifar, mobilenetv2-cifar and deepspeed-cifar-net runs a few
steps at one rank on ddpbench's own engine, and the CIFAR forms also on the pytorch engine
(the torch zoo, engines/ddpb_torch_models.py), on synthetic data at small sizes: every run
succeeds, stores a step per step with a finite loss, and reports the parameter memory of
the model the row counts (4 bytes a parameter).

Sizes keep it to seconds a model: batch 2, 3 steps; the ImageNet models at 75x75 (the
least Inception V3 takes) with 10 classes, the CIFAR forms at their 32x32."""
import math
import sys
import time

from harness import Daemon, check, model_params, run_cases

CIFAR = ["resnet50-cifar", "vgg16-cifar", "mobilenetv2-cifar", "deepspeed-cifar-net"]
IMAGENET = ["inception-v3", "resnet101", "resnet152", "vgg11"]
# parameters at 3x75x75 with 10 classes (tests/unit/test_nn_models.c's cases for
# inception-v3; the others are not checked exactly at this shape)
AT_75 = {"inception-v3": 21806058}
BASE = {"workload": "train", "batch_size": 2, "steps": 3, "warmup_steps": 1,
        "world_size": 1, "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9}}


def check_runs(d, exp, engine, want_params):
    """Every run of exp succeeded with 3 steps of finite positive loss; its memory row
    reports want_params[model] parameters (None: any)."""
    check(exp["status"] == "succeeded",
          (engine, [(r["status"], r["error"]) for r in exp["runs"]]))
    seen = set()
    for r in exp["runs"]:
        run = d.get(f"/v1/runs/{r['id']}")
        model = run["spec"]["model"]
        seen.add(model)
        rows = d.step_rows(r["id"])
        check(len(rows) == 3, (engine, model, len(rows)))
        # a fixed synthetic batch of 2: batch-norm networks memorise it, to a loss of 0.0
        losses = [v["loss"] for v in rows]
        check(all(v is not None and math.isfinite(v) and v >= 0 for v in losses) and
              losses[0] > 0, (engine, model, losses))
        want = want_params.get(model)
        check(run["memory"], (engine, model, "no memory row"))
        for m in run["memory"]:
            check(m["params_bytes"] > 0 and (want is None or m["params_bytes"] == 4 * want),
                  (engine, model, m["params_bytes"], want))
    check(seen == set(want_params), (engine, seen))


def wait_probe(d, timeout=300):
    """Until this node's engine probe has finished (GET /v1/engines says "probing" until
    then; a submit for a framework engine waits on it)."""
    deadline = time.time() + timeout
    while d.get("/v1/engines")["nodes"][0]["probing"] and time.time() < deadline:
        time.sleep(0.3)


def test_new_models_train():
    d = Daemon(cpu_slots=2)
    try:
        wait_probe(d)
        cifar = dict(BASE, dataset={"name": "synthetic", "samples": 64},
                     sweep={"model": CIFAR})
        imagenet = dict(BASE, dataset={"name": "synthetic", "samples": 64, "shape": [3, 75, 75],
                                       "classes": 10}, sweep={"model": IMAGENET})
        exps = [("ddpbench", d.submit(dict(cifar, engine="ddpbench", strategy="ddp"))),
                ("ddpbench", d.submit(dict(imagenet, engine="ddpbench", strategy="ddp"))),
                ("pytorch", d.submit(dict(cifar, engine="pytorch", strategy="ddp")))]
        cifar_params = {m: model_params(m) for m in CIFAR}
        imagenet_params = {m: AT_75.get(m) for m in IMAGENET}
        for i, (engine, e) in enumerate(exps):
            exp = d.wait_experiment(e["id"], timeout=540)
            check_runs(d, exp, engine, imagenet_params if i == 1 else cifar_params)
    finally:
        d.close()


if __name__ == "__main__":
    sys.exit(run_cases([test_new_models_train]))
