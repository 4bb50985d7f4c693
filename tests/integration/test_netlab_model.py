#!/usr/bin/env python3
"""The performance model across netlab nodes and its range (issue 35, items 4 and 5), on
deploy/netlab.sh's two hosts under 1gbe (test_netlab's harness: root and ip netns):

- one collective experiment measures allreduce at 2 ranks inside one node, 2 ranks on 2
  nodes (the 1gbe link) and 4 ranks on 2 nodes; a training experiment runs mnist-cnn ddp
  at 1 rank, 2 ranks on 2 nodes and 4 on 2 nodes;
- its results rows across nodes are predicted (pred_note null) from the link's fits
  (pred_fits names a 1gbe fit on 2 nodes), each with pred_range naming what it covers and
  pred_extrapolated false where its placement was measured;
- ?pred_max_world=2 keeps only the 2-rank fits: the 4-rank row is then predicted from the
  link's and one node's 2-rank fits (the hierarchical allreduce composed), and marked
  extrapolated; ?pred_max_world=0 is refused naming the parameter;
- POST /v1/predict with nodes 2 and network_profile 1gbe returns covers and a flag per
  point (8 ranks: extrapolated; 4 ranks too from fits of 2), a profile no fit measured is 409 naming that link, and a
  bad nodes is 400 naming the field;
- `ddpbench predict --nodes 2 --network-profile 1gbe --pred-max-world 2` shows the same
  flags and the range.

Every case skips, with the reason, where namespaces cannot be made (not root)."""
import json
import os
import sys

import test_netlab as nl
from harness import check, run_cases

COLL = {"name": "nodepred-link", "workload": "collective", "op": "allreduce",
        "min_bytes": "64K", "max_bytes": "4M", "factor": 4, "iters": 4, "warmup": 1,
        "timeout_s": 300,
        "sweep": {"zip": [{"world_size": 2, "nodes": 1}, {"world_size": 2, "nodes": 2},
                          {"world_size": 4, "nodes": 2}]}}
TRAIN = {"name": "nodepred-train", "workload": "train", "model": "mnist-cnn",
         "batch_size": 32, "steps": 10, "warmup_steps": 3, "trace_steps": 0,
         "strategy": "ddp", "dataset": {"samples": 512}, "timeout_s": 300,
         "sweep": {"zip": [{"world_size": 1, "nodes": 1}, {"world_size": 2, "nodes": 2},
                           {"world_size": 4, "nodes": 2}]}}


def call(leader, token, method, path, body=None, raw=False):
    """curl from host 1: (HTTP status, parsed reply; raw: the text as it came)."""
    args = ["ip", "netns", "exec", nl.H1, "curl", "-sS", "--max-time", "30",
            "-o", "/dev/stdout", "-w", "\n%{http_code}", "-X", method, leader + path,
            "-H", f"Authorization: Bearer {token}"]
    if body is not None:
        args += ["-H", "Content-Type: application/json", "--data-binary", json.dumps(body)]
    r = nl.sh(*args, timeout=40)
    check(r.returncode == 0, f"{method} {path}: {r.stderr}")
    text, _, code = r.stdout.rpartition("\n")
    return int(code), text if raw else json.loads(text or "null")


def run(leader, token, spec):
    code, exp = call(leader, token, "POST", "/v1/experiments", spec)
    check(code == 201 or code == 200, (code, exp))
    exp = nl.wait_experiment(leader, exp["id"], timeout=100)
    check(exp["status"] == "succeeded", exp)
    return exp


def rows_by_world(leader, token, exp, query=""):
    code, res = call(leader, token, "GET", f"/v1/experiments/{exp['id']}/results{query}")
    check(code == 200, (code, res))
    return {r["world_size"]: r for r in res["rows"]}


def check_rows(leader, token, train, fits):
    link = {str(f["id"]) for f in fits if f["nodes"] == 2 and f["world_size"] == 2}
    rows = rows_by_world(leader, token, train)
    for w in (2, 4):
        r = rows[w]
        check(r["pred_note"] is None and r["pred_step_ms"] > 0, r)
        check(r["nodes"] == 2 and r["network_profile"] == "1gbe", r)
        check(r["pred_extrapolated"] is False, (w, r["pred_range"], r["pred_fits"]))
        check(r["pred_range"].endswith("2 nodes; base 1 rank"), r["pred_range"])
    check(set(rows[2]["pred_fits"].split(",")) <= link and rows[2]["pred_fits"], rows[2])
    check(rows[2]["pred_range"] == "fits world 2, 2 nodes; base 1 rank", rows[2]["pred_range"])
    check(rows[4]["pred_range"] == "fits world 4, 2 nodes; base 1 rank", rows[4]["pred_range"])
    check(rows[1]["pred_extrapolated"] is False, rows[1])  # one rank exchanges nothing
    # the extrapolation check: 4 ranks from fits of at most 2
    small = rows_by_world(leader, token, train, "?pred_max_world=2")
    r4 = small[4]
    check(r4["pred_note"] is None and r4["pred_extrapolated"] is True, r4)
    check(r4["pred_range"] == "fits world 2, 1-2 nodes; base 1 rank", r4["pred_range"])
    check(small[2]["pred_extrapolated"] is False, small[2])
    check(r4["pred_step_ms"] != rows[4]["pred_step_ms"], (r4["pred_step_ms"], "composed"))
    code, err = call(leader, token, "GET", f"/v1/experiments/{train['id']}/results"
                     "?pred_max_world=0")
    check(code == 400 and "pred_max_world" in json.dumps(err), (code, err))
    # the report's extrapolation check: said at the top, and its finding gives the errors
    # of the extrapolated row against those within the fits
    code, html = call(leader, token, "GET", f"/v1/experiments/{train['id']}/report"
                      "?pred_max_world=2", raw=True)
    check(code == 200 and "The extrapolation check" in html, (code, html[:300]))
    check("data-rule='model_extrapolated'" in html and
          "1 multi-rank configuration is predicted beyond" in html, html[-3000:])
    code, html = call(leader, token, "GET", f"/v1/experiments/{train['id']}/report", raw=True)
    check(code == 200 and "model_extrapolated" not in html, "unrestricted: none beyond")
    code, err = call(leader, token, "GET", f"/v1/experiments/{train['id']}/report"
                     "?pred_max_world=0")
    check(code == 400 and "pred_max_world" in json.dumps(err), (code, err))


def check_predict(leader, token, train):
    body = {"experiment": train["id"], "strategies": ["ddp"], "world_sizes": [1, 2, 4, 8],
            "nodes": 2, "network_profile": "1gbe"}
    code, p = call(leader, token, "POST", "/v1/predict", body)
    check(code == 200, (code, p))
    cov = p["covers"]
    # 8 ranks on 2 nodes: 4 per node, hierarchical, so one node's fit is used too
    check(cov["world_sizes"] == [2, 4] and cov["nodes"] == [1, 2] and
          cov["base_world_size"] == 1, cov)
    check(cov["text"] == "fits world 2-4, 1-2 nodes; base 1 rank", cov)
    flags = {pt["world_size"]: pt["extrapolated"] for pt in p["predictions"][0]["points"]}
    check(flags == {1: False, 2: False, 4: False, 8: True}, flags)
    code, p = call(leader, token, "POST", "/v1/predict", dict(body, pred_max_world=2))
    check(code == 200, (code, p))
    check(p["covers"]["world_sizes"] == [2] and p["covers"]["nodes"] == [1, 2], p["covers"])
    flags = {pt["world_size"]: pt["extrapolated"] for pt in p["predictions"][0]["points"]}
    check(flags == {1: False, 2: False, 4: True, 8: True}, flags)
    code, err = call(leader, token, "POST", "/v1/predict", dict(body, network_profile="10gbe"))
    check(code == 409 and "10gbe link between 2 nodes" in err["error"]["message"], (code, err))
    code, err = call(leader, token, "POST", "/v1/predict", dict(body, nodes=0))
    check(code == 400 and err["error"]["field"] == "nodes", (code, err))


def check_cli(leader, state, train):
    """`ddpbench predict --nodes --network-profile --pred-max-world` from host 1: the points
    marked extrapolated and the range stated; a second value is refused naming the option."""
    cli = [os.path.join(nl.BUILD, "cli", "ddpbench"), "--url", leader, "--token-file",
           os.path.join(state, "token"), "predict", str(train["id"]), "--strategies", "ddp",
           "--world-sizes", "2,4", "--nodes", "2", "--network-profile", "1gbe"]
    r = nl.sh("ip", "netns", "exec", nl.H1, *cli, "--pred-max-world", "2")
    check(r.returncode == 0, r.stdout + r.stderr)
    check("data: fits world 2, 1-2 nodes; base 1 rank" in r.stdout, r.stdout)
    rows = [line.split() for line in r.stdout.splitlines() if " ddp " in f" {line} "]
    check([row[-1] for row in rows] == ["false", "true"], r.stdout)
    r = nl.sh("ip", "netns", "exec", nl.H1, *cli, "--pred-max-world", "2,4")
    check(r.returncode == 2 and "--pred-max-world" in r.stderr, r.stdout + r.stderr)


def test_predicted_across_nodes():
    with nl.two_hosts("1gbe", tls=False) as (state, _up, leader):
        with open(os.path.join(state, "token")) as f:
            token = f.read().strip()
        coll = run(leader, token, COLL)
        train = run(leader, token, TRAIN)
        code, fit = call(leader, token, "GET", f"/v1/experiments/{coll['id']}/fit")
        check(code == 200 and fit["fits"], (code, fit))
        check({(f["world_size"], f["nodes"]) for f in fit["fits"]} == {(2, 1), (2, 2), (4, 2)},
              fit["fits"])
        check(all(f["network_profile"] == "1gbe" for f in fit["fits"]), fit["fits"])
        check_rows(leader, token, train, fit["fits"])
        check_predict(leader, token, train)
        check_cli(leader, state, train)


if __name__ == "__main__":
    sys.exit(run_cases([test_predicted_across_nodes]))
