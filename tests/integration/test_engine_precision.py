#!/usr/bin/env python3
"""Issue 33 on the framework engines: precision, clipping and per-class accuracy.

- GET /v1/engines' precisions are what submit accepts on the CPU, and every precision an
  engine does not run is listed with why (precisions_not_available); fp16 on the CPU is a
  400 naming precision, bf16 is accepted on every framework engine; nothing refused is
  stored.
- Every engine (ddpbench's own C worker included) trains 2 ranks of mnist-cnn on
  Fashion-MNIST; the framework engines at fp32 and bf16 with clip_grad_norm set: each run
  succeeds, its framework configuration names the framework's own mechanism (autocast,
  the Keras policy, DeepSpeed's "bf16" config; clipping), each epoch carries
  test_acc_per_class with one entry per class whose mean weighted by the test split's
  class counts is the epoch's test_acc, and the results carry the last epoch's per-class
  accuracies as the test_acc_per_class column; the HTML report has its table with
  Fashion-MNIST's class names.
- Clipping, in each adapter's own code (one process, one rank, the framework's real
  optimizer and collectives): with SGD without momentum and a tiny clip_grad_norm the
  parameters move by lr * clip (the clipped update's norm), and the step's grad_norm is
  the norm of the unclipped (exchanged) gradient computed independently; with a huge clip
  they move by lr * norm."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np

from harness import Daemon, check, run_cases
# test_engines' tables (the engines, their strategies, the venv) and its sys.path
from test_engines import ENGINES_DIR, FRAMEWORKS, STRATEGY, VENV_PY, engines_of
import ddpb_data  # noqa: E402  (numpy only; engines/, put on sys.path by test_engines)

BASE = {"workload": "train", "model": "mnist-cnn", "batch_size": 32, "warmup_steps": 1,
        "epochs": 1, "steps": 0, "world_size": 2,
        "dataset": {"name": "fashion-mnist", "samples": 256},
        "optimizer": {"type": "sgd", "lr": 0.05}}
# what each framework configuration says its bf16 and clipping are
MECHANISM = {"pytorch": ("torch.autocast('cpu', torch.bfloat16)", "clip_grad_norm_"),
             "horovod": ("torch.autocast('cpu', torch.bfloat16)", "clip_grad_norm_"),
             "tensorflow": ("mixed_bfloat16", "global_clipnorm"),
             "deepspeed": ('"bf16": {"enabled": true}', '"gradient_clipping": 1.0'),
             "lightning": ('"bf16-mixed"', '"gradient_clip_algorithm": "norm"')}


def engine_rows(d):
    return {e["name"]: e for e in engines_of(d)["nodes"][0]["engines"]}


def test_precisions_named_at_submit():
    d = Daemon(cpu_slots=2)
    try:
        engines = engine_rows(d)
        before = d.get("/v1/experiments")
        for name in FRAMEWORKS:
            e = engines[name]
            missing = set(e["precisions_not_available"])
            check({"fp32", "bf16", "fp16"} - set(e["precisions"]) <= missing, (name, e))
            for prec in ("fp32", "bf16", "fp16"):
                spec = dict(BASE, engine=name, strategy=STRATEGY[name], world_size=64,
                            precision=prec)
                status, body, _ = d.request("POST", "/v1/experiments", spec)
                runs_here = prec in e["precisions"] and prec not in missing
                if runs_here:  # accepted, then too many ranks for this daemon's slots
                    check(status == 409 and body["error"]["field"] == "world_size",
                          (name, prec, status, body))
                else:
                    check(status == 400 and body["error"]["field"] == "precision"
                          and f'no precision "{prec}"' in body["error"]["message"],
                          (name, prec, status, body))
            check("bf16" in e["precisions"] and "bf16" not in missing, (name, e))
            check("fp16" in missing, (name, e))
        check(d.get("/v1/experiments") == before, "a refused experiment was stored")
    finally:
        d.close()


def class_counts():
    data = ddpb_data.Data({"dataset": {"name": "fashion-mnist", "samples": 256}})
    return np.bincount(data.test[1], minlength=data.classes)


def check_per_class(name, epochs, counts):
    for ep in epochs:
        per = ep["test_acc_per_class"]
        check(isinstance(per, list) and len(per) == len(counts), (name, ep))
        hits = sum(a * n for a, n in zip(per, counts) if a is not None)
        check(all(a is None or 0 <= a <= 1 for a in per), (name, per))
        check(abs(hits / counts.sum() - ep["test_acc"]) < 1e-6,
              (name, hits / counts.sum(), ep["test_acc"]))


def test_bf16_clipping_and_per_class_on_every_engine():
    counts = class_counts()
    d = Daemon(cpu_slots=2)
    try:
        exps = [("ddpbench", d.submit(dict(BASE, engine="ddpbench", strategy="ddp")))]
        for name in FRAMEWORKS:
            exps.append((name, d.submit(dict(BASE, engine=name, strategy=STRATEGY[name],
                                             clip_grad_norm=1.0,
                                             sweep={"precision": ["fp32", "bf16"]}))))
        for name, exp in exps:
            exp = d.wait_experiment(exp["id"], timeout=900)
            # a failure names each rank's log tail: a rank the daemon stopped has written
            # its threads' stacks there (a horovod rank once went 30 s without a heartbeat
            # here, cause not found)
            check(exp["status"] == "succeeded", f"{name}:\n{d.failed_runs(exp, lines=60)}")
            for r in exp["runs"]:
                run = d.get(f"/v1/runs/{r['id']}")
                check(len(run["epochs"]) == 1, (name, run["epochs"]))
                check_per_class(name, run["epochs"], counts)
                if name == "ddpbench":
                    continue
                config = run["env"][0]["env"]["framework_config"]
                autocast, clip = MECHANISM[name]
                check(clip in config, (name, config))
                check((autocast in config) == (run["spec"]["precision"] == "bf16"),
                      (name, run["spec"]["precision"], config))
            status, html, _ = d.request("GET", f"/v1/experiments/{exp['id']}/report")
            check(status == 200 and "Test accuracy per class" in html
                  and "<th>Ankle boot</th>" in html, (name, status, html[-3000:]))
            res = d.get(f"/v1/experiments/{exp['id']}/results?group_by=precision")
            for row in res["rows"]:
                cell = row["test_acc_per_class"]
                vals = [float(v) for v in cell.split(";")]
                check(len(vals) == len(counts), (name, cell))
                check(abs(float(np.dot(vals, counts)) / counts.sum() - row["test_acc_mean"])
                      < 1e-3, (name, cell, row["test_acc_mean"]))
    finally:
        d.close()


# One rank of each adapter in this process's venv: the parameters' move and the reported
# grad_norm for a clip far below the gradient's norm and one far above it.
CLIP_PRELUDE = """
import json, math, os, socket, sys, time
with socket.socket() as free:  # a port nobody holds (29500 is torchrun's, often taken)
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                  MASTER_PORT=str(port), TF_CPP_MIN_LOG_LEVEL="2")
sys.path.insert(0, {engines!r})
LR, CLIPS = 0.1, (1e-3, 1e9)
def dist(a, b):
    return math.sqrt(sum(float(((x - y) ** 2).sum()) for x, y in zip(a, b)))
"""
TORCH_BODY = """
import copy, torch, torch.nn.functional as F
import ddpb_torch_loop as loop, ddpb_train
ENGINE = {engine!r}
if ENGINE == "pytorch":
    import torch.distributed as tdist, engine_pytorch as eng
    # an in-process store: one rank needs no TCPStore, whose port (picked free, then
    # released) another process can take first; CI once saw this case abort within its
    # first second ("terminate called without an active exception")
    tdist.init_process_group("gloo", store=tdist.HashStore(), rank=0, world_size=1)
elif ENGINE == "horovod":
    import engine_horovod as eng, horovod.torch as hvd
    hvd.init()
else:
    import engine_deepspeed as eng, deepspeed, deepspeed.comm.comm as ds_comm
    deepspeed.init_distributed(dist_backend="gloo")
    ds_comm.cdb.all_gather_function = None
    ds_comm.cdb.reduce_scatter_function = None
torch.manual_seed(0)
x, y = torch.randn(32, 1, 28, 28), torch.randint(0, 10, (32,))
out = {{}}
for clip in CLIPS:
    spec = {{"batch_size": 32, "strategy": {strategy!r}, "precision": "fp32",
            "clip_grad_norm": clip, "optimizer": {{"type": "sgd", "lr": LR}}}}
    torch.manual_seed(1)
    model = loop.zoo.build("lenet5", 1, 28, 28, 10)  # no dropout: one forward = another
    ref = copy.deepcopy(model)
    F.cross_entropy(ref(x), y).backward()
    norm = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in ref.parameters()))
    before = [p.detach().clone() for p in model.parameters()]
    if ENGINE == "pytorch":
        ad = eng.DdpAdapter(spec, 1, torch.device("cpu"), lambda c: None)
    elif ENGINE == "horovod":
        ad = eng.HorovodAdapter(spec, lambda c: None, {{}})
    else:
        ad = eng.DeepSpeedAdapter(spec, lambda c: None)
    module, opt = ad.wrap(model)
    ad.step_begin()
    ad.backward(F.cross_entropy(module(x).float(), y), 0, 1)
    fields = ad.step_end(time.perf_counter())
    after = [p.detach().clone() for p in (module.module if ENGINE == "deepspeed"
                                           else model).parameters()]
    out[str(clip)] = {{"grad_norm": fields.get("grad_norm"), "norm": norm,
                      "moved": dist(after, before)}}
if ENGINE == "pytorch":
    tdist.destroy_process_group()
print("RESULT " + json.dumps(out), flush=True)
# torch's C++ objects can abort in the interpreter's teardown (ddpb_train.exit_now says
# when): the script leaves as the engines leave, its figures printed
ddpb_train.exit_now(0)
"""
KERAS_BODY = """
import numpy as np, tensorflow as tf
import ddpb_data, ddpb_keras_loop as et
strategy = tf.distribute.MultiWorkerMirroredStrategy()
sdist = et.StrategyDist(strategy, [0], False)
data = ddpb_data.Data({{"model": "lenet5", "dataset": {{"name": "synthetic"}}}})
x, y = next(data.batches(0, 1, 0, 32, seed=1))
xt, yt = tf.constant(et.nhwc(x)), tf.constant(y)
out = {{}}
for clip in CLIPS:
    spec = {{"model": "lenet5", "precision": "fp32", "clip_grad_norm": clip,
            "optimizer": {{"type": "sgd", "lr": LR}}}}
    run = et.KerasRun(spec, sdist, data, 1, 1)
    variables = run.model.trainable_variables
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(run.xent(yt, run.model(xt, training=True)))
    norm = float(tf.linalg.global_norm(tape.gradient(loss, variables)))
    before = [v.numpy().copy() for v in variables]
    _, _, reported = run.train_step(xt, yt)
    out[str(clip)] = {{"grad_norm": float(reported), "norm": norm,
                      "moved": dist([v.numpy() for v in variables], before)}}
print("RESULT " + json.dumps(out), flush=True)
"""


def clip_figures(engine):
    body = KERAS_BODY if engine == "tensorflow" else TORCH_BODY
    code = textwrap.dedent(CLIP_PRELUDE.format(engines=ENGINES_DIR)) + textwrap.dedent(
        body.format(engine=engine, strategy=STRATEGY[engine]))
    env = dict(os.environ, PYTHONPATH=ENGINES_DIR, OMP_NUM_THREADS="1")
    env.pop("DDPB_REPORT", None)
    p = subprocess.run([VENV_PY, "-c", code], capture_output=True, text=True, timeout=600,
                       env=env, stdin=subprocess.DEVNULL)
    lines = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    check(p.returncode == 0 and lines, (engine, p.returncode, p.stderr[-3000:]))
    return json.loads(lines[-1][len("RESULT "):])


def test_clipping_bounds_the_update_on_every_engine():
    lr = 0.1
    for engine in FRAMEWORKS:
        got = clip_figures(engine)
        tiny, huge = got["0.001"], got["1000000000.0"]
        print(f"  {engine}: {got}")
        for g in (tiny, huge):  # the norm before clipping, as computed without the engine
            check(g["grad_norm"] is not None and
                  abs(g["grad_norm"] - g["norm"]) <= 1e-4 * g["norm"], (engine, g))
        check(tiny["norm"] > 100 * 1e-3, (engine, tiny))  # the clip does bind
        # clipped: the update is lr * clip (torch: clip / (norm + 1e-6) of the norm)
        check(abs(tiny["moved"] - lr * 1e-3) <= 1e-3 * lr * 1e-3, (engine, tiny))
        check(abs(huge["moved"] - lr * huge["norm"]) <= 1e-3 * lr * huge["norm"],
              (engine, huge))


STATIC_SCALE = """
import sys, torch, torch.nn.functional as F
sys.path.insert(0, {engines!r})
import ddpb_torch_loop as loop
torch.manual_seed(0)
net = torch.nn.Linear(8, 3)
x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
F.cross_entropy(net(x), y).backward()
want = [p.grad.clone() for p in net.parameters()]
net.zero_grad()
sc = loop.StaticScaler(1024.0)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
sc.scale(F.cross_entropy(net(x), y)).backward()
sc.unscale_(opt)
assert all(torch.allclose(p.grad, w, rtol=1e-5) for p, w in zip(net.parameters(), want))
before = [p.detach().clone() for p in net.parameters()]
sc.step(opt)
assert not sc.found_inf and any(not torch.equal(p, b) for p, b in zip(net.parameters(), before))
net.zero_grad()
sc.scale(F.cross_entropy(net(x), y) * float("inf")).backward()
sc.unscale_(opt)
before = [p.detach().clone() for p in net.parameters()]
sc.step(opt)
assert sc.found_inf and loop.scaler_skipped(sc, 1024.0), "a non-finite step must be skipped"
assert all(torch.equal(p, b) for p, b in zip(net.parameters(), before))
try:
    loop.Precision({{"precision": "fp16"}}, torch.device("cpu"))
    raise AssertionError("fp16 on the CPU was accepted")
except ValueError as ex:
    assert "cuda" in str(ex), ex
print("RESULT ok", flush=True)
"""


def test_static_loss_scale_skips_a_non_finite_step():
    """fp16's static loss scale (ddpb_torch_loop.StaticScaler; the dynamic one is
    GradScaler's, on cuda only): the gradients come back unscaled, a step whose gradient is
    not finite is skipped and reported so; Precision refuses fp16 on the CPU."""
    p = subprocess.run([VENV_PY, "-c", STATIC_SCALE.format(engines=ENGINES_DIR)],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    check(p.returncode == 0 and "RESULT ok" in p.stdout, p.stderr[-3000:])


if __name__ == "__main__":
    sys.exit(run_cases([test_precisions_named_at_submit,
                        test_static_loss_scale_skips_a_non_finite_step,
                        test_clipping_bounds_the_update_on_every_engine,
                        test_bf16_clipping_and_per_class_on_every_engine]))
