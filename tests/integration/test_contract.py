#!/usr/bin/env python3
"""The API contract holds: the served contract (api/openapi.yaml with the spec's JSON
Schema inlined by schema/embed.py) is a well-formed OpenAPI 3.0 document whose every $ref
resolves; its Spec accepts and refuses exactly what schema/spec.schema.json does; it
lists exactly the routes api/routes.c serves; live responses of the running daemon
validate against the schemas it declares (python3-jsonschema); and every curl example in
README.md runs against a real daemon and succeeds."""
import copy
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

import jsonschema
import yaml

from harness import SOURCE, Daemon, check, run_cases

sys.path.insert(0, os.path.join(SOURCE, "schema"))
import embed  # noqa: E402  (the build step that makes the served contract)

SPEC_SCHEMA_PATH = os.path.join(SOURCE, "schema", "spec.schema.json")
ROW_SCHEMA_PATH = os.path.join(SOURCE, "schema", "result_row.schema.json")
CONTRACT_TEXT = embed.openapi_document(os.path.join(SOURCE, "api", "openapi.yaml"),
                                       SPEC_SCHEMA_PATH, ROW_SCHEMA_PATH)
SPEC = yaml.safe_load(CONTRACT_TEXT)
METHODS = ("get", "post", "put", "delete", "patch", "options", "head")
SCHEMA_KEYS = {"type", "properties", "required", "items", "enum", "format", "minimum",
               "maximum", "default", "description", "nullable", "allOf", "oneOf", "anyOf",
               "$ref", "additionalProperties", "title", "example", "not", "minLength",
               "maxLength", "pattern", "minItems", "maxItems", "uniqueItems",
               "exclusiveMinimum", "exclusiveMaximum", "maxProperties", "minProperties"}


def resolve(ref):
    check(ref.startswith("#/"), f"only local refs: {ref}")
    node = SPEC
    for part in ref[2:].split("/"):
        check(part in node, f"unresolved $ref {ref}")
        node = node[part]
    return node


def walk(node, path="#"):
    """Yields (path, node) for every dict in the document."""
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            yield from walk(v, f"{path}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk(v, f"{path}/{i}")


def test_document_is_well_formed():
    check(SPEC["openapi"].startswith("3.0"), SPEC.get("openapi"))
    check(SPEC["info"]["title"] and SPEC["info"]["version"], "info")
    for path, node in walk(SPEC):
        if "$ref" in node:
            resolve(node["$ref"])
    ops = 0
    for p, item in SPEC["paths"].items():
        check(p.startswith("/"), p)
        for m, op in item.items():
            check(m in METHODS, f"{p}: {m}")
            check(op.get("operationId") and op.get("responses"), f"{m} {p}")
            for code in op["responses"]:
                check(re.fullmatch(r"[1-5]\d\d", str(code)), f"{m} {p}: status {code}")
            for prm in op.get("parameters", []):
                check(prm["in"] in ("path", "query", "header") and "schema" in prm, prm)
                if prm["in"] == "path":
                    check(prm.get("required") is True and "{" + prm["name"] + "}" in p, prm)
            ops += 1
    for name, schema in SPEC["components"]["schemas"].items():
        for path, node in walk(schema, name):
            if "type" in node and isinstance(node["type"], str) and path.split("/")[-1] != "properties":
                check(set(node) <= SCHEMA_KEYS, f"{path}: unknown keys {set(node) - SCHEMA_KEYS}")
    check(ops >= 14, f"{ops} operations")


def spec_cases():
    """Example specs and, from each, specs that break one rule of the schema."""
    cases = []
    for path in sorted(glob.glob(os.path.join(SOURCE, "schema", "examples", "*.json"))):
        with open(path) as f:
            spec = json.load(f)
        cases.append(spec)
        for change in ({"workload": None}, {"model": "mnist-cnn"}, {"op": "allreduce"},
                       {"op": "allreduce", "algorithm": "tree"}, {"device": "cpu", "backend": "nccl"},
                       {"device": "cuda", "backend": "tcp"}, {"device": "cuda", "compression": "fp16"},
                       {"backend": "nccl", "algorithm": "direct"}, {"lr_schedule": {"gamma": 0}},
                       {"world_size": 0}, {"name": ""}, {"sweep": {"world_size": []}}):
            cases.append(dict(copy.deepcopy(spec), **change))
        cases.append({k: v for k, v in spec.items() if k != "workload"})
    return cases


def test_spec_schema_inlined_exactly():
    """The contract's Spec (OpenAPI 3.0, draft 4 semantics) decides every case as the
    2020-12 original does: embed.py's translation loses and adds nothing."""
    with open(SPEC_SCHEMA_PATH) as f:
        original = jsonschema.Draft202012Validator(json.load(f))
    inlined = jsonschema.Draft4Validator(to_json_schema({"$ref": "#/components/schemas/Spec"}))
    cases = spec_cases()
    verdicts = [original.is_valid(c) for c in cases]
    check(len(cases) > 50 and any(verdicts) and not all(verdicts), f"{len(cases)} cases")
    for case, verdict in zip(cases, verdicts):
        check(inlined.is_valid(case) == verdict,
              f"2020-12 schema says {verdict}, the contract's Spec the opposite: {case}")
    fields = SPEC["components"]["schemas"]["SpecField"]["enum"]
    check("workload" in fields and "sweep" not in fields, fields)


# Specs at the edge of each rule the spec schema states between fields or through a
# pattern, with the verdict both the schema and the server must give (True: accepted;
# the node has no GPU, so an accepted device "cuda" spec meets 409, not 400).
C, TR = {"workload": "collective"}, {"workload": "train"}
EDGE_SPECS = [
    (dict(C, backend="nccl"), False),  # device's default, cpu, has only tcp
    (dict(C, device="cuda"), False),  # backend's default, tcp, is not cuda's
    (dict(C, device="cuda", backend="nccl"), True),
    (dict(C, sweep={"device": ["cuda"]}), False),
    (dict(C, sweep={"device": ["cuda"], "backend": ["nccl"]}), True),
    (dict(C, sweep={"device": ["cpu", "cuda"], "backend": ["tcp"]}), False),
    (dict(C, device="cuda", backend="tcp", sweep={"backend": ["nccl"]}), True),
    (dict(C, device="cpu", backend="nccl", sweep={"device": ["cuda"]}), True),
    (dict(C, emulate_multi_rank=True), False),
    (dict(C, op="broadcast", sweep={"algorithm": ["tree"]}), True),
    (dict(C, op="broadcast", sweep={"algorithm": ["tree", "rd"]}), False),
    (dict(C, algorithm="rd", sweep={"op": ["allreduce"]}), True),
    (dict(C, algorithm="rd", sweep={"op": ["allreduce", "broadcast"]}), False),
    (dict(C, factor=4, step=1024), False),
    (dict(C, factor=0, step="0K"), True),
    (dict(C, step="4K", sweep={"factor": [2]}), False),
    (dict(C, sweep={"factor": [0]}), False),
    (dict(C, factor=0, sweep={"step": [4096]}), True),
    (dict(TR, steps=10, epochs=1), False),
    (dict(TR, epochs=1), True),
    (dict(TR, sweep={"steps": [0]}), False),
    (dict(TR, device="cuda", backend="nccl", strategy="zero1"), False),
    (dict(TR, backend="nccl", sweep={"device": ["cuda"]}), True),
    (dict(TR, device="cuda", backend="nccl", sweep={"strategy": ["ddp", "zero2"]}), False),
    # sweep.zip (issue 33): points of sweepable fields that vary together
    (dict(TR, sweep={"zip": [{"engine": "ddpbench", "strategy": "ddp"},
                             {"engine": "ddpbench", "strategy": "horovod"}],
                     "world_size": [1, 2]}), True),
    (dict(TR, sweep={"zip": [{"engine": "ddpbench", "name": "x"}]}), False),
    (dict(TR, sweep={"zip": []}), False),
    (dict(C, sweep={"zip": [{"strategy": "ddp"}]}), False),  # not a collective field
    (dict(C, sweep={"zip": [{"engine": "ddpbench"}]}), True),  # issue 35: gloo's collectives
    (dict(C, max_bytes="2G"), True),
    (dict(C, max_bytes="0002GiB"), True),
    (dict(C, max_bytes="2097152K"), True),
    (dict(C, max_bytes="2097153KiB"), False),
    (dict(C, max_bytes="2049M"), False),
    (dict(C, max_bytes=2147483649), False),
    (dict(C, min_bytes="0K"), False),
    (dict(C, step="0"), True),
    (dict(C, factor=0, step="3G"), False),
    (dict(C, sizes=["2G", "1T"]), False),
    (dict(C, description="a\u0000b"), False),
]


def test_spec_schema_decides_as_the_server():
    """At the edge of every rule the schema states (field switches with defaults and
    sweeps, one-of pairs, size patterns), the schema and the server give the same verdict,
    and the expected one."""
    with open(SPEC_SCHEMA_PATH) as f:
        schema = jsonschema.Draft202012Validator(json.load(f))
    stub = os.path.join(os.path.abspath(SOURCE), "tests", "integration", "stub_worker.sh")
    d = Daemon(cpu_slots=2, extra_args=["--worker", stub, "--gpus", "0"])
    try:
        for body, verdict in EDGE_SPECS:
            status, text, _ = d.request("POST", "/v1/experiments", body)
            check(status in ((201, 409) if verdict else (400,)),
                  f"{body}: server {status} {str(text)[:300]}")
            check(schema.is_valid(body) == verdict, f"{body}: the schema says {not verdict}")
    finally:
        d.close()


def routes_in_code():
    text = open(os.path.join(SOURCE, "api", "routes.c")).read()
    out = set()
    for method, pattern in re.findall(
            r'\{"([A-Z]+)", "(/[^"]*)", h_\w+(?:, (?:true|false))?\}', text):
        pattern = re.sub(r"\{\*(\w+)\}", r"<\1>", pattern)  # a name segment keeps its name
        pattern = re.sub(r"\{\w+\}", "{id}", pattern)
        out.add((method.lower(), re.sub(r"<(\w+)>", r"{\1}", pattern)))
    return out


def test_document_lists_exactly_the_routes():
    code = routes_in_code()
    doc = {(m, p) for p, item in SPEC["paths"].items() for m in item}
    check(code, "no routes parsed from api/routes.c")
    check(code == doc, f"only in code: {sorted(code - doc)}; only in openapi.yaml: {sorted(doc - code)}")


def to_json_schema(s):
    """OpenAPI 3.0 schema object → JSON Schema (nullable → a union with null)."""
    if isinstance(s, list):
        return [to_json_schema(x) for x in s]
    if not isinstance(s, dict):
        return s
    if "$ref" in s:
        return to_json_schema(resolve(s["$ref"]))
    out = {k: to_json_schema(v) for k, v in s.items() if k not in ("nullable", "example")}
    if s.get("nullable"):
        out = {"anyOf": [out, {"type": "null"}]}
    return out


def response_schema(method, path, status, ctype="application/json"):
    op = SPEC["paths"][path][method]
    resp = op["responses"][str(status)]
    if "$ref" in resp:
        resp = resolve(resp["$ref"])
    return to_json_schema(resp["content"][ctype]["schema"])


def validate(method, path, status, body):
    jsonschema.validate(body, response_schema(method, path, status))


def check_results_columns(results):
    """The results reply's column_info and phases are common/columns.c's tables (the
    committed schema/columns.json), and ResultRow, generated from them, types the rows:
    a row whose figure has the wrong type is refused."""
    with open(os.path.join(SOURCE, "schema", "columns.json"), encoding="utf-8") as f:
        table = json.load(f)
    check(results["column_info"] == table["columns"], "column_info is the columns table")
    check(results["phases"] == table["phases"], "phases is the phases table")
    keys = {c["key"] if not c["stats"] else f"{c['key']}_{s}"
            for c in table["columns"] for s in (c["stats"] or [None])}
    check(set(results["columns"]) - set(results["group_by"]) <= keys,
          set(results["columns"]) - keys)
    row_schema = to_json_schema({"$ref": "#/components/schemas/ResultRow"})
    check(results["rows"], "a row to check")
    bad = dict(results["rows"][0], busbw_gbs_mean="fast")
    try:
        jsonschema.validate(bad, row_schema)
    except jsonschema.ValidationError:
        pass
    else:
        check(False, "ResultRow accepted a string busbw_gbs_mean")


def test_live_responses_match_schemas():
    d = Daemon(cpu_slots=2)
    try:
        spec = {"name": "contract", "workload": "collective", "world_size": 2,
                "min_bytes": "4K", "max_bytes": "16K", "factor": 4, "iters": 3, "warmup": 1,
                "sweep": {"inplace": [False, True]}}
        status, exp, _ = d.request("POST", "/v1/experiments", body=spec)
        validate("post", "/v1/experiments", status, exp)
        exp = d.wait_experiment(exp["id"], timeout=60)
        validate("get", "/v1/experiments/{id}", 200, exp)
        validate("get", "/v1/experiments", 200, d.get("/v1/experiments"))
        run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
        validate("get", "/v1/runs/{id}", 200, run)
        check(run["collectives"], "results present")
        results = d.get(f"/v1/experiments/{exp['id']}/results")
        validate("get", "/v1/experiments/{id}/results", 200, results)
        check_results_columns(results)
        validate("get", "/v1/runs/{id}/steps", 200, d.get(f"/v1/runs/{run['id']}/steps"))
        trace = d.get(f"/v1/runs/{run['id']}/trace")
        check(any(e["ph"] == "X" for e in trace["traceEvents"]), "a collective run's iterations")
        validate("get", "/v1/runs/{id}/trace", 200, trace)
        validate("get", "/healthz", 200, d.get("/healthz"))
        for path, st in (("/v1/experiments/999", 404), ("/v1/runs/999", 404)):
            status, body, _ = d.request("GET", path)
            check(status == st, status)
            jsonschema.validate(body, to_json_schema({"$ref": "#/components/schemas/Error"}))
        status, body, _ = d.request("POST", "/v1/experiments", body={"workload": "x"})
        validate("post", "/v1/experiments", 400, body)
        status, body, _ = d.request("POST", f"/v1/experiments/{exp['id']}/cancel")
        validate("post", "/v1/experiments/{id}/cancel", status, body)  # 409: finished
        status, body, _ = d.request("DELETE", f"/v1/experiments/{exp['id']}")
        validate("delete", "/v1/experiments/{id}", status, body)
        status, text, _ = d.request("GET", "/v1/openapi.yaml")
        check(status == 200 and text == CONTRACT_TEXT,
              "served contract is api/openapi.yaml with schema/spec.schema.json inlined")
        schema = d.get("/v1/spec/schema")
        with open(os.path.join(SOURCE, "schema", "spec.schema.json")) as f:
            check(schema == json.load(f), "served spec schema is the committed file")
        vocabulary = d.get("/v1/vocabulary")
        validate("get", "/v1/vocabulary", 200, vocabulary)
        with open(os.path.join(SOURCE, "schema", "vocabulary.json")) as f:
            check(vocabulary == json.load(f), "served vocabulary is schema/vocabulary.json")
    finally:
        d.close()


def readme_curls():
    text = open(os.path.join(SOURCE, "README.md")).read()
    return [l.strip() for l in text.splitlines() if l.strip().startswith("curl ")]


def test_readme_curl_examples_run():
    cmds = readme_curls()
    check(len(cmds) >= 5, f"{len(cmds)} curl examples found")
    # the README's datasets: the text example's license file, and /data, where it keeps
    # CIFAR-10 (an empty stand-in here: a POST only checks the path lies beneath a
    # --data-dir); its examples assume ddpbenchd --data-dir for both
    data = tempfile.mkdtemp(prefix="ddpb-readme-data-")
    os.makedirs(os.path.join(data, "cifar10"))
    d = Daemon(cpu_slots=2, extra_args=["--data-dir", data,
                                        "--data-dir", "/usr/share/common-licenses"])
    try:
        base = d.url
        for cmd in cmds:
            cmd = cmd.replace('"/data/', f'"{data}/')
            argv = shlex.split(cmd.replace("http://127.0.0.1:7480", base))
            argv = [a if not a.startswith("@") else "@" + os.path.join(SOURCE, a[1:]) for a in argv]
            r = subprocess.run(argv + ["-w", "\n%{http_code}"], capture_output=True, text=True,
                               timeout=60, cwd=SOURCE)
            body, _, code = r.stdout.rpartition("\n")
            if "-N" in argv:  # an event stream: ends by --max-time (curl exit 28)
                check(r.returncode == 28 and body.startswith("id: "), f"{cmd}: {r.returncode} {body[:200]}")
                continue
            check(r.returncode == 0 and code.startswith("2"), f"{cmd}: exit {r.returncode}, HTTP {code}: {body[:300]}")
            # as a person would: results are read after the first experiment ends, and a
            # cancelled experiment is deleted once its workers have stopped
            posted = "--json" in argv and any(a.endswith("/v1/experiments") for a in argv)
            if posted and json.loads(body)["id"] == 1:
                d.wait_experiment(1, timeout=120)
            cancelled = re.search(r"/v1/experiments/(\d+)/cancel", cmd)
            if cancelled:
                d.wait_experiment(int(cancelled.group(1)), timeout=60)
    finally:
        d.close()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(run_cases([
        test_document_is_well_formed,
        test_spec_schema_inlined_exactly,
        test_spec_schema_decides_as_the_server,
        test_document_lists_exactly_the_routes,
        test_live_responses_match_schemas,
        test_readme_curl_examples_run,
    ]))
