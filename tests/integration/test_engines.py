#!/usr/bin/env python3
"""Engines through the REST API (issue 16, first slice): a train spec takes "engine", the
default ddpbench (the C worker) is stored with every run and can be swept; what an engine
cannot do is a 400 naming the field; an engine this daemon does not launch yet is a 409
naming "engine" and the node, with the install command for the frameworks not installed,
and nothing of a refused experiment is stored."""
import io
import json
import os
import re
import subprocess
import sys

from harness import Daemon, check, run_cases

SOURCE = os.environ.get("DDPB_SOURCE_DIR",
                        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(SOURCE, "engines"))
import ddpb_report  # noqa: E402  (engines/ is on PYTHONPATH for the daemon's ranks)

SMALL = {"workload": "train", "model": "mnist-cnn", "batch_size": 32, "steps": 4,
         "warmup_steps": 1, "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9}}


def test_default_engine_is_stored():
    d = Daemon(cpu_slots=2)
    try:
        exp = d.run_experiment(dict(SMALL), timeout=120)
        check(exp["status"] == "succeeded", [(r["status"], r["error"]) for r in exp["runs"]])
        run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
        check(run["spec"]["engine"] == "ddpbench", run["spec"])
        # the engine a spec names explicitly is kept as given
        status, body, _ = d.request("POST", "/v1/experiments", dict(SMALL, engine="ddpbench"))
        check(status == 201 and body["spec"]["engine"] == "ddpbench", (status, body))
        # results group by engine like any field: swept, it is a group key by default,
        # and group_by=engine names it explicitly
        exp = d.run_experiment(dict(SMALL, sweep={"engine": ["ddpbench"]}), timeout=120)
        check(exp["status"] == "succeeded", exp["status"])
        for query in ("", "?group_by=engine"):
            res = d.get(f"/v1/experiments/{exp['id']}/results{query}")
            check(res["group_by"] == ["engine"], (query, res["group_by"]))
            check("engine" in res["columns"], res["columns"])
            check([row["engine"] for row in res["rows"]] == ["ddpbench"], (query, res["rows"]))
    finally:
        d.close()


def test_engine_refusals():
    d = Daemon(cpu_slots=2)
    try:
        before = d.get("/v1/experiments")
        cases = (
            # what torch does not offer: 400 naming the field and what it has
            (dict(SMALL, engine="pytorch", strategy="horovod"), 400, "strategy", '"zero1"'),
            (dict(SMALL, engine="pytorch", compression="fp16"), 400, "compression", '"none"'),
            (dict(SMALL, engine="jax"), 400, "engine", "deepspeed"),
            # not launched by this daemon yet: 409 naming the engine and the node
            (dict(SMALL, engine="pytorch"), 409, "engine", "engine pytorch cannot run on node"),
            (dict(SMALL, engine="script"), 409, "engine", "engine script cannot run on node"),
            (dict(SMALL, engine="horovod"), 409, "engine",
             "install with deploy/install-deps.sh --engines"),
            # one refused sweep point refuses the experiment
            (dict(SMALL, sweep={"engine": ["ddpbench", "tensorflow"]}), 409, "engine",
             "engine tensorflow is not installed"),
        )
        for spec, status_want, field, part in cases:
            status, body, _ = d.request("POST", "/v1/experiments", spec)
            check(status == status_want and body["error"]["field"] == field
                  and part in body["error"]["message"], (spec.get("engine"), status, body))
        after = d.get("/v1/experiments")
        check(after == before, "a refused experiment was stored")
    finally:
        d.close()


def c_report_fields():
    """{event type: (required field names, optional ones)} from common/report.c's tables."""
    text = open(os.path.join(SOURCE, "common", "report.c")).read()
    tables = {}
    for m in re.finditer(r"report_(\w+)_fields\[\] = \{(.*?)\n\};", text, re.S):
        req, opt = set(), set()
        for f in re.finditer(r'\{\.name = "(\w+)"[^}]*\}', m.group(2)):
            (opt if ".optional = true" in f.group(0) else req).add(f.group(1))
        tables[m.group(1)] = (req, opt)
    common = tables.pop("common")[0]
    return {k: (req | common, opt) for k, (req, opt) in tables.items()} | {"done": (common, set())}


def test_report_module_matches_the_c_protocol():
    """Every event engines/ddpb_report.py writes has exactly the fields common/report.c
    requires (optional ones allowed), so the daemon accepts a Python rank's lines."""
    want = c_report_fields()
    out = io.StringIO()
    rep = ddpb_report.Reporter(1, 2, stream=out)
    rep.hello()
    rep.env({"torch": "1.13.1", "framework_config": {"bucket_cap_mb": 25}})
    rep.heartbeat("train", 3)
    rep.progress_event("load", 1, 2)
    rep.step(step=0, loss=2.3, samples=32, step_ms=12.5, forward_ms=4.0, backward_ms=6.0)
    rep.epoch(0, 64, 1.5, test_loss=0.5, test_acc=0.8)
    rep.error("rank 1 lost its peer", code="peer", peer=0)
    rep.done()
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    check([x["type"] for x in lines] == ["hello", "env", "heartbeat", "progress", "step",
                                         "epoch", "error", "done"], lines)
    for ev in lines:
        req, opt = want[ev["type"]]
        keys = set(ev)
        check(req <= keys and keys <= req | opt, (ev["type"], sorted(keys ^ req)))
        check(ev["rank"] == 1, ev)
    check(all(isinstance(v, (str, int, float)) for v in lines[1]["env"].values()), lines[1])
    check(lines[4]["data_ms"] == 0.0 and lines[4]["step_ms"] == 12.5, lines[4])
    check("train_loss" not in lines[5], "an epoch figure not measured must be omitted")
    try:
        rep.step(step=1, loss=1.0, samples=32, step_ms=1.0, fwd_ms=1.0)
        check(False, "an unknown phase name was accepted")
    except ValueError as ex:
        check("fwd_ms" in str(ex), ex)


def test_probe_matches_spec_rules():
    """engines/probe.py (what GET /v1/engines will serve) lists every engine of the spec,
    says pytorch is installed exactly when torch imports here, names the install command
    for what is missing, and its pytorch table is what submit allows (spec_rules)."""
    p = subprocess.run([sys.executable, os.path.join(SOURCE, "engines", "probe.py")],
                       capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, p.stderr)
    engines = {e["name"]: e for e in json.loads(p.stdout)["engines"]}
    schema = json.load(open(os.path.join(SOURCE, "schema", "spec.schema.json")))
    check(sorted(engines) == sorted(schema["properties"]["engine"]["enum"]), sorted(engines))
    torch_ok = subprocess.run([sys.executable, "-c", "import torch"],
                              capture_output=True).returncode == 0
    check(engines["pytorch"]["installed"] == torch_ok, engines["pytorch"])
    check(engines["ddpbench"]["installed"] and engines["ddpbench"]["launched"], engines)
    for e in engines.values():
        if not e["installed"]:
            check("deploy/install-deps.sh --engines" in e["reason"], e)
    d = Daemon(cpu_slots=2)
    try:
        status, body, _ = d.request("POST", "/v1/experiments",
                                    dict(SMALL, engine="pytorch", strategy="zero2"))
        has = re.findall(r'"(\w+)"', body["error"]["message"].split("it has", 1)[1])
        check(status == 400 and has[:2] == engines["pytorch"]["strategies"], (has, body))
        status, body, _ = d.request("POST", "/v1/experiments",
                                    dict(SMALL, engine="pytorch", compression="bf16"))
        has = re.findall(r'"(\w+)"', body["error"]["message"].split("it has", 1)[1])
        check(status == 400 and has[:1] == ["none"], (has, body))
    finally:
        d.close()


if __name__ == "__main__":
    sys.exit(run_cases([test_report_module_matches_the_c_protocol, test_probe_matches_spec_rules,
                        test_default_engine_is_stored, test_engine_refusals]))
