#!/usr/bin/env python3
"""A cluster on loopback: one leader and followers (ddpbenchd --join), each its own process
with its own state directory and ports, as on separate machines but for the addresses.
Joining and the nodes list, the follower's redirects, refused joins and malformed syncs,
runs whose ranks span nodes (collective and training: run_ranks.node, the placement in
results), and the faults: a follower killed with -9 mid-run, a follower draining on
SIGTERM, the leader restarting under running followers.

Every cluster here runs over TLS (issue 31): the daemons serve HTTPS with keys from
deploy/tls-keys.sh and the followers join https:// pinned to that CA (--join-ca). The
TLS cases: a follower pinned to another CA never joins and says why, plain HTTP to a TLS
port fails without harm, the API and the CLI over TLS end to end, and an http:// join,
still taken for clusters set up before TLS, with its warning.

deploy/netlab.sh runs the same cluster over shaped links between network namespaces
(test_netlab); this file needs no root and keeps every case to seconds."""
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

from harness import (BUILD, Daemon, TlsKeys, check, pid_alive, raw_exchange, run_cases,
                     wait_gone)

CLI = os.path.join(BUILD, "cli", "ddpbench")

TOKEN = "cluster-test-token-7f3c2a91d0"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
COLL = {"workload": "collective", "op": "allreduce", "min_bytes": 1024, "max_bytes": 65536,
        "iters": 5, "warmup": 1, "timeout_s": 60}
TRAIN = {"workload": "train", "model": "mnist-cnn", "batch_size": 32, "steps": 12,
         "warmup_steps": 2, "dataset": {"name": "synthetic"},
         "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9}, "timeout_s": 120}


def token_file():
    fd, path = tempfile.mkstemp(prefix="ddpb-token-")
    os.write(fd, TOKEN.encode())
    os.close(fd)
    return path


TOKEN_FILE = token_file()
KEYS = TlsKeys()  # the cluster's CA and the one certificate every daemon here serves


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def leader(**kw):
    """port: fixed (a restarted leader must come back where its followers look); tls: the
    keys (default the cluster's; None: plain HTTP)."""
    return Daemon(cpu_slots=kw.get("slots", 2), tls=kw.get("tls", KEYS),
                  extra_args=["--token-file", TOKEN_FILE, "--node", "lead",
                              "--node-timeout-ms", str(kw.get("timeout_ms", 2000)),
                              "--port", str(kw.get("port", 0)), *kw.get("extra", ())])


def follower(lead, name, slots=2, state_dir=None, extra=(), ca=None):
    """A follower of lead, over TLS pinned to ca (default: the cluster's CA) when lead
    serves HTTPS."""
    pin = ["--join-ca", ca or KEYS.ca] if lead.tls else []
    return Daemon(cpu_slots=slots, state_dir=state_dir, tls=lead.tls,
                  extra_args=["--join", lead.url, "--token-file", TOKEN_FILE, "--node", name,
                              "--sync-ms", "100", *pin, *extra])


def post(d, path, body, headers=AUTH):
    return d.request("POST", path, body=body, headers=headers)


def submit(d, spec):
    status, body, _ = post(d, "/v1/experiments", spec)
    check(status == 201, f"submit -> {status}: {body}")
    return body


def nodes(d):
    return {n["name"]: n for n in d.get("/v1/nodes")["nodes"]}


def wait_node(d, name, state, timeout=15):
    deadline = time.time() + timeout
    while time.time() < deadline:
        n = nodes(d).get(name)
        if n and n["state"] == state:
            return n
        time.sleep(0.05)
    raise AssertionError(f"node {name} not {state} in {timeout}s: {nodes(d).get(name)}; "
                         f"log: {d.daemon_log()}")


def first_run(d, exp_id):
    return d.get(f"/v1/experiments/{exp_id}")["runs"][0]["id"]


def remote_pids(run, node):
    return [k["pid"] for k in run["ranks"] if k["node"] == node and k["pid"]]


def start_long_run(lead):
    """A 4-rank training run over 2 nodes that would run for hours, once its 2 ranks on f1
    have started: (experiment id, run id, run)."""
    exp_id = submit(lead, dict(TRAIN, world_size=4, nodes=2, steps=100000))["id"]
    rid = first_run(lead, exp_id)
    run = lead.wait_run(rid, lambda r: r["status"] == "running" and
                        len(remote_pids(r, "f1")) == 2, what="running on both nodes")
    return exp_id, rid, run


def test_join_and_nodes():
    lead = leader()
    f1 = follower(lead, "f1", slots=3)
    try:
        n = wait_node(lead, "f1", "up")
        check(n["role"] == "follower" and n["cpu_slots"] == 3 and n["gpus"] >= 0, n)
        check(n["engines"].get("ddpbench") and n["heartbeat_age_s"] < 2, n)
        me = nodes(lead)["lead"]
        check(me["role"] == "leader" and me["state"] == "up" and me["cpu_slots"] == 2, me)
        h = lead.get("/healthz")
        check(h["role"] == "leader" and h["nodes"] == {"up": 2, "known": 2}, h)
        hf = f1.get("/healthz")
        check(hf["role"] == "follower" and hf["leader"] == lead.url, hf)
        # `ddpbench nodes`: the same nodes, as a table and as JSON
        env = {k: v for k, v in os.environ.items() if not k.startswith("DDPB_")}
        r = subprocess.run([CLI, "--url", lead.url, "--ca", KEYS.ca, "nodes"],
                           capture_output=True, text=True, timeout=30, env=env)
        check(r.returncode == 0, r.stderr)
        rows = {line.split()[0]: line.split() for line in r.stdout.splitlines()[1:] if line}
        check(rows["lead"][1:3] == ["leader", "up"] and rows["f1"][1:3] == ["follower", "up"],
              r.stdout)
        check("0/3" in rows["f1"] and "2 of 2 nodes up" in r.stdout, r.stdout)
        r = subprocess.run([CLI, "--url", lead.url, "--json", "nodes"], capture_output=True,
                           text=True, timeout=30, env=dict(env, DDPB_CA=KEYS.ca))
        check(r.returncode == 0, r.stderr)
        check([n["name"] for n in json.loads(r.stdout)["nodes"]] == ["lead", "f1"], r.stdout)
    finally:
        f1.close()
        lead.close()


def test_follower_redirects_to_leader():
    lead = leader()
    f1 = follower(lead, "f1")
    try:
        wait_node(lead, "f1", "up")
        req = urllib.request.Request(f1.url + "/v1/experiments?limit=5&status=running")

        class NoFollow(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *a, **k):
                return None

        opener = f1.opener(NoFollow)
        try:
            opener.open(req, timeout=10)
            raise AssertionError("no redirect")
        except urllib.error.HTTPError as e:
            check(e.code == 307, e.code)
            loc = e.headers["Location"]
            check(loc == lead.url + "/v1/experiments?limit=5&status=running", loc)
            body = json.loads(e.read())
            check(body["leader"] == lead.url and "follower" in body["error"]["message"], body)
        # a submission is redirected too (307 keeps method and body)
        status, body, hdrs = post(f1, "/v1/experiments", dict(COLL))
        check(status == 307 and hdrs["Location"] == lead.url + "/v1/experiments", (status, body))
    finally:
        f1.close()
        lead.close()


def test_joins_refused():
    lead = leader()
    offer = {"name": "x1", "address": "127.0.0.1", "port": 1, "cpu_slots": 1, "gpus": 0}
    try:
        status, body, _ = post(lead, "/v1/cluster/join", offer, headers={})
        check(status == 401, (status, body))
        status, body, _ = post(lead, "/v1/cluster/join", offer,
                               headers={"Authorization": "Bearer wrong"})
        check(status == 401, (status, body))
        status, body, _ = post(lead, "/v1/cluster/join", dict(offer, color="red"))
        check(status == 400 and body["error"]["field"] == "color", (status, body))
        status, body, _ = post(lead, "/v1/cluster/join", dict(offer, cpu_slots="2"))
        check(status == 400 and body["error"]["field"] == "cpu_slots", (status, body))
        status, body, _ = post(lead, "/v1/cluster/join", dict(offer, name="lead"))
        check(status == 409 and "leader" in body["error"]["message"], (status, body))
        status, body, _ = post(lead, "/v1/cluster/join", dict(offer, name="a b"))
        check(status == 400, (status, body))
        check("x1" not in nodes(lead), nodes(lead))
    finally:
        lead.close()
    # a leader without a token takes no followers
    bare = Daemon(cpu_slots=1)
    try:
        status, body, _ = post(bare, "/v1/cluster/join", offer, headers={})
        check(status == 403 and "--cluster-key" in body["error"]["message"], (status, body))
    finally:
        bare.close()


def test_cluster_key_identities_and_removal():
    """--cluster-key (issue 31): a follower joins with its node identity, not the admin
    token, and runs ranks; the admin token is no cluster credential; a join under a live
    node's name is refused naming it and the node stays up; a live node cannot be removed,
    a left one can."""
    fd, key = tempfile.mkstemp(prefix="ddpb-key-")
    os.write(fd, b"cluster-key-0123456789abcdef")
    os.close(fd)
    lead = Daemon(cpu_slots=1, extra_args=["--token-file", TOKEN_FILE, "--cluster-key", key,
                                           "--node", "lead", "--node-timeout-ms", "60000"])
    f1 = Daemon(cpu_slots=2, extra_args=["--join", lead.url, "--cluster-key", key, "--node",
                                         "f1", "--sync-ms", "100"])
    try:
        wait_node(lead, "f1", "up")
        check("no --cluster-key" not in lead.daemon_log(), lead.daemon_log())
        offer = {"name": "f1", "address": "127.0.0.1", "port": 1, "cpu_slots": 1, "gpus": 0}
        status, body, _ = post(lead, "/v1/cluster/join", offer)  # the admin token
        check(status == 409 and "node f1 is live" in body["error"]["message"], (status, body))
        status, body, _ = post(lead, "/v1/cluster/join", dict(offer, name="x9"))
        check(status == 401 and "x9" in body["error"]["message"], (status, body))
        check("x9" not in nodes(lead) and nodes(lead)["f1"]["state"] == "up", nodes(lead))
        exp_id = submit(lead, dict(COLL, world_size=2, nodes=2))["id"]
        rid = first_run(lead, exp_id)
        run = lead.wait_run(rid, lambda r: r["status"] in ("succeeded", "failed"), timeout=90,
                            what="finished")
        check(run["status"] == "succeeded", run)
        status, body, _ = lead.request("DELETE", "/v1/nodes/f1", headers=AUTH)
        check(status == 409 and "node f1 is up" in body["error"]["message"], (status, body))
        status, _, _ = lead.request("DELETE", "/v1/nodes/f1")
        check(status == 401, status)
        f1.close()
        wait_node(lead, "f1", "left")
        status, body, _ = lead.request("DELETE", "/v1/nodes/f1", headers=AUTH)
        check(status == 200 and body == {"deleted": "f1"}, (status, body))
        check("f1" not in nodes(lead), nodes(lead))
        status, _, _ = lead.request("DELETE", "/v1/nodes/f1", headers=AUTH)
        check(status == 404, status)
    finally:
        f1.close()
        lead.close()
        os.unlink(key)


def test_malformed_syncs_refused():
    lead = leader(timeout_ms=60000)
    offer = {"name": "fake", "address": "127.0.0.1", "port": 1, "cpu_slots": 1, "gpus": 0}
    try:
        status, j, _ = post(lead, "/v1/cluster/join", offer)
        check(status == 200 and j["node_id"] >= 1 and len(j["session"]) == 64, j)
        sid, nid = j["session"], j["node_id"]
        bad = [
            ({"node_id": nid, "session": "0" * 64}, 409),
            ({"node_id": nid, "session": sid, "events": "x"}, 400),
            ({"node_id": nid, "session": sid, "events": [{"run": 1}]}, 400),
            ({"node_id": nid, "session": sid, "events": [{"run": 1, "rank": 0}]}, 400),
            ({"node_id": nid, "session": sid,
              "events": [{"run": 1, "rank": 0, "line": "x", "exit": {}}]}, 400),
            ({"node_id": nid, "session": sid, "events": [{"run": -1, "rank": 0, "line": "x"}]},
             400),
            ({"node_id": nid, "session": sid, "state": "sleepy"}, 400),
            ({"node_id": nid, "session": sid, "extra": 1}, 400),
            ({"node_id": 999, "session": sid}, 400),
            ({"node_id": nid, "session": sid, "engines": {"pytorch": True}}, 400),
            ({"node_id": nid, "session": sid, "engines": [{"name": "pytorch"}]}, 400),
            ({"node_id": nid, "session": sid, "engines": [{"installed": True}] * 17}, 400),
        ]
        for body, want in bad:
            status, reply, _ = post(lead, "/v1/cluster/sync", body)
            check(status == want, f"{body} -> {status} {reply}, want {want}")
        status, _, _ = lead.request("POST", "/v1/cluster/sync", raw=b"{not json",
                                    headers=dict(AUTH, **{"Content-Type": "application/json"}))
        check(status == 400, status)
        # events for a run the leader never placed there are dropped; the sync is fine
        status, reply, _ = post(lead, "/v1/cluster/sync",
                                {"node_id": nid, "session": sid, "state": "draining",
                                 "events": [{"run": 12345, "rank": 0, "line": "{}"}]})
        check(status == 200 and reply == {"commands": [], "runs": []}, (status, reply))
        check(nodes(lead)["fake"]["state"] == "draining", nodes(lead))
        status, reply, _ = post(lead, "/v1/cluster/leave", {"node_id": nid, "session": sid})
        check(status == 200, reply)
        check(nodes(lead)["fake"]["state"] == "left", nodes(lead))
        status, reply, _ = post(lead, "/v1/cluster/sync", {"node_id": nid, "session": sid})
        check(status == 409 and reply.get("error"), (status, reply))
        check(lead.get("/healthz")["status"] == "ok", "leader still serves")
    finally:
        lead.close()


def test_run_spans_two_nodes():
    lead = leader()
    f1 = follower(lead, "f1")
    try:
        wait_node(lead, "f1", "up")
        exp = lead.wait_experiment(submit(lead, dict(COLL, world_size=4, nodes=2))["id"])
        check(exp["status"] == "succeeded", exp)
        run = lead.get(f"/v1/runs/{first_run(lead, exp['id'])}")
        where = {k["rank"]: k["node"] for k in run["ranks"]}
        check(where == {0: "lead", 1: "lead", 2: "f1", 3: "f1"}, where)
        check(run["nodes"] == 2 and run["ranks_per_node"] == 2, run)
        check(all(k["status"] == "done" for k in run["ranks"]), run["ranks"])
        # the follower pins its ranks as the leader pins its own: CPUs of their own
        remote = [k["cpus"] for k in run["ranks"] if k["node"] == "f1"]
        if (os.cpu_count() or 1) >= 2:
            check(all(remote) and len(set(remote)) == 2, f"f1's ranks' CPUs: {remote}")
        rows = lead.get(f"/v1/experiments/{exp['id']}/results")["rows"]
        check(rows and all(r["nodes"] == 2 for r in rows), rows[:1])
        # grouped by ranks_per_node: the placement the run got
        rows = lead.get(f"/v1/experiments/{exp['id']}/results?group_by=ranks_per_node")["rows"]
        check(rows and all(r["ranks_per_node"] == 2 and r["nodes"] == 2 for r in rows), rows[:1])
        # training: every rank's steps arrive, the remote ones through the follower
        exp = lead.wait_experiment(submit(lead, dict(TRAIN, world_size=4, ranks_per_node=2))["id"])
        check(exp["status"] == "succeeded", exp)
        rid = first_run(lead, exp["id"])
        for rank in range(4):
            steps = lead.get(f"/v1/runs/{rid}/steps?rank={rank}")
            check(len(steps["rows"]) >= 10, (rank, steps))
        # the default packs: 2 ranks fit on the leader alone
        exp = lead.wait_experiment(submit(lead, dict(COLL, world_size=2))["id"])
        run = lead.get(f"/v1/runs/{first_run(lead, exp['id'])}")
        check({k["node"] for k in run["ranks"]} == {"lead"} and run["nodes"] == 1, run)
        # more nodes than the cluster has: refused at submit, naming the field
        status, body, _ = post(lead, "/v1/experiments", dict(COLL, world_size=3, nodes=3))
        check(status == 409 and "nodes" in body["error"]["message"], (status, body))
        # transport shm keeps every rank on one node: 4 ranks fit no node of 2 slots (409
        # naming transport, where auto spreads them); 2 go on one node
        status, body, _ = post(lead, "/v1/experiments", dict(COLL, world_size=4, transport="shm"))
        check(status == 409 and body["error"]["field"] == "transport"
              and "one node" in body["error"]["message"], (status, body))
        exp = lead.wait_experiment(submit(lead, dict(COLL, world_size=2, transport="shm"))["id"])
        run = lead.get(f"/v1/runs/{first_run(lead, exp['id'])}")
        check(exp["status"] == "succeeded" and run["nodes"] == 1, run)
    finally:
        f1.close()
        lead.close()


def test_follower_ranks_get_the_memory_limit():
    """The leader decides each rank's address-space limit (issue 31), and its spawn command
    carries it to the follower: with no margin the limit is below what a worker needs, so
    the follower's rank fails naming it in its own log, as the leader's rank does."""
    lead = leader(extra=["--rank-memory-margin-mib", "0"])
    f1 = follower(lead, "f1")
    try:
        wait_node(lead, "f1", "up")
        exp = lead.wait_experiment(submit(lead, dict(TRAIN, world_size=2, nodes=2))["id"])
        check(exp["status"] == "failed", exp["status"])
        rid = first_run(lead, exp["id"])
        run = lead.get(f"/v1/runs/{rid}")
        remote = [k["rank"] for k in run["ranks"] if k["node"] == "f1"]
        check(remote, run["ranks"])
        with open(os.path.join(f1.state_dir, "runs", str(rid), f"rank{remote[0]}.log")) as f:
            text = f.read()
        check(re.search(r"memory limit \d+ MiB", text), text[-2000:])
    finally:
        f1.close()
        lead.close()


def follower_engines(lead, name, timeout=120):
    """The follower's engine list as the leader serves it, once its probe has arrived."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        by = {n.get("node"): n for n in lead.get("/v1/engines")["nodes"]}
        if by.get(name, {}).get("engines"):
            return {e["name"]: e for e in by[name]["engines"]}
        time.sleep(0.3)
    raise AssertionError(f"{name} never reported its engines")


def test_framework_engine_spans_nodes():
    """A framework engine across nodes: the follower's engine probe reaches the leader with
    its syncs (GET /v1/engines lists it per node); a pytorch run of one rank per node then
    trains, each rank's steps arriving, gloo's rendezvous agreed through the leader's store.
    A follower whose probe cannot run (no interpreter) reports the frameworks unusable, and
    a point that may span it is refused naming that node and the reason."""
    lead = leader(slots=1)
    f1 = follower(lead, "f1", slots=1)
    f2 = None
    try:
        wait_node(lead, "f1", "up")
        row = follower_engines(lead, "f1").get("pytorch")
        check(row and row["installed"] and row["launched"], row)
        spec = dict(TRAIN, engine="pytorch", world_size=2, nodes=2)
        exp = lead.wait_experiment(submit(lead, spec)["id"], timeout=180)
        check(exp["status"] == "succeeded", [(r["status"], r["error"]) for r in exp["runs"]])
        rid = first_run(lead, exp["id"])
        run = lead.get(f"/v1/runs/{rid}")
        check({k["rank"]: k["node"] for k in run["ranks"]} == {0: "lead", 1: "f1"}, run["ranks"])
        for rank in range(2):
            steps = lead.get(f"/v1/runs/{rid}/steps?rank={rank}")
            check(len(steps["rows"]) >= 10, (rank, steps))
        check(run["env"][1]["env"]["engine"] == "pytorch", run["env"])
        f2 = follower(lead, "f2", slots=1, extra=["--python", "/nonexistent/python3"])
        wait_node(lead, "f2", "up")
        check(not follower_engines(lead, "f2")["pytorch"]["installed"], "f2 has no torch")
        status, body, _ = post(lead, "/v1/experiments", dict(spec, world_size=3, nodes=3))
        msg = body.get("error", {}).get("message", "")
        check(status == 409 and body["error"]["field"] == "engine" and "node f2" in msg
              and "the engine probe failed" in msg, (status, body))
    finally:
        if f2:
            f2.close()
        f1.close()
        lead.close()


def test_follower_killed_mid_run():
    lead = leader(timeout_ms=2000)
    f1 = follower(lead, "f1")
    try:
        wait_node(lead, "f1", "up")
        exp_id, rid, run = start_long_run(lead)
        deadline = time.time() + 30
        while len(lead.get(f"/v1/runs/{rid}/steps?rank=2")["rows"]) < 3:
            check(time.time() < deadline, "no steps from rank 2")
            time.sleep(0.1)
        before = len(lead.get(f"/v1/runs/{rid}/steps?rank=0")["rows"])
        pids = remote_pids(run, "f1") + [k["pid"] for k in run["ranks"] if k["node"] == "lead"]
        t0 = time.time()
        f1.proc.send_signal(signal.SIGKILL)
        f1.proc.wait()
        exp = lead.wait_experiment(exp_id, timeout=30)
        took = time.time() - t0
        run = lead.get(f"/v1/runs/{rid}")
        check(exp["status"] == "failed", exp)
        check("node f1 lost" in run["error"] and "ranks 2, 3" in run["error"], run["error"])
        check(took < 2.0 + 5.0, f"failed {took:.1f}s after the kill")
        check(len(lead.get(f"/v1/runs/{rid}/steps?rank=0")["rows"]) >= before, "steps kept")
        check(len(lead.get(f"/v1/runs/{rid}/steps?rank=2")["rows"]) >= 3, "remote steps kept")
        wait_gone(pids)  # the leader's ranks stopped, the follower's died with it
        check(nodes(lead)["f1"]["state"] == "lost", nodes(lead)["f1"])
        # it comes back under its name
        f1b = follower(lead, "f1", state_dir=f1.state_dir)
        try:
            wait_node(lead, "f1", "up")
            exp = lead.wait_experiment(submit(lead, dict(COLL, world_size=4, nodes=2))["id"])
            check(exp["status"] == "succeeded", exp)
        finally:
            f1b.close()
    finally:
        f1.close()
        lead.close()


def test_follower_drains_on_sigterm():
    lead = leader()
    f1 = follower(lead, "f1")
    try:
        wait_node(lead, "f1", "up")
        exp_id = submit(lead, dict(TRAIN, world_size=4, nodes=2, steps=40))["id"]
        rid = first_run(lead, exp_id)
        lead.wait_run(rid, lambda r: len(remote_pids(r, "f1")) == 2, what="remote ranks")
        f1.proc.send_signal(signal.SIGTERM)
        wait_node(lead, "f1", "draining", timeout=10)
        exp = lead.wait_experiment(exp_id, timeout=120)
        check(exp["status"] == "succeeded", (exp, lead.get(f"/v1/runs/{rid}")))
        check(f1.proc.wait(timeout=20) == 0, "the follower exits 0 once drained")
        wait_node(lead, "f1", "left", timeout=10)
        # a left node takes no ranks: 4 ranks over 2 nodes cannot be placed now
        status, body, _ = post(lead, "/v1/experiments", dict(COLL, world_size=4, nodes=2))
        check(status == 409, (status, body))
    finally:
        f1.close()
        lead.close()


def test_leader_restart_interrupts_and_followers_rejoin():
    lead = leader(port=free_port())
    f1 = follower(lead, "f1")
    try:
        wait_node(lead, "f1", "up")
        exp_id, rid, run = start_long_run(lead)
        remote = remote_pids(run, "f1")
        lead.restart()
        run = lead.get(f"/v1/runs/{rid}")
        check(run["status"] == "interrupted", run)
        wait_node(lead, "f1", "up", timeout=15)  # rejoined with a new session
        wait_gone(remote)  # and killed the ranks of the run the leader no longer wants
        check(not any(pid_alive(p) for p in remote), remote)
        exp = lead.wait_experiment(submit(lead, dict(COLL, world_size=4, nodes=2))["id"])
        check(exp["status"] == "succeeded", exp)
    finally:
        f1.close()
        lead.close()


def test_follower_with_wrong_ca_cannot_join():
    """A follower pinned to another cluster's CA refuses the leader's certificate: it never
    joins (the leader lists no such node) and its log names the CA it checked against."""
    other = TlsKeys()
    lead = leader()
    f1 = follower(lead, "f1", ca=other.ca)
    try:
        deadline = time.time() + 5
        while time.time() < deadline and "TLS with the leader" not in f1.daemon_log():
            time.sleep(0.1)
        log = f1.daemon_log()
        check("TLS with the leader" in log and f"checked against {other.ca}" in log
              and "certificate" in log, log)
        check("f1" not in nodes(lead), nodes(lead))
        check(f1.proc.poll() is None, "the follower keeps trying (a CA can be fixed by restart)")
    finally:
        f1.close()
        lead.close()
        other.close()


def test_plain_http_to_tls_port_fails_cleanly():
    """Plain HTTP to an HTTPS listener gets no HTTP reply (the handshake fails and the
    connection closes at once), neither the raw bytes nor urllib hang, and the daemon
    serves HTTPS after it as before."""
    lead = leader()
    try:
        port = lead.info["http_port"]
        got = raw_exchange(port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        check(not got.startswith(b"HTTP/"), got[:100])
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10)
            raise AssertionError("plain HTTP got an answer from a TLS port")
        except (urllib.error.URLError, ConnectionError, OSError) as e:
            check(not isinstance(e, urllib.error.HTTPError), e)
        check(lead.get("/healthz")["status"] == "ok", "the daemon still serves HTTPS")
        check(lead.proc.poll() is None, "the daemon is alive")
    finally:
        lead.close()


def test_api_over_tls_end_to_end():
    """The API over HTTPS end to end: a small collective run across a TLS cluster POSTed
    and its results read back; the CLI verifies the daemon against --ca / DDPB_CA and
    refuses one it cannot verify (the system store does not hold the cluster's CA)."""
    lead = leader()
    f1 = follower(lead, "f1")
    try:
        check(lead.url.startswith("https://") and lead.info["url"].startswith("https://"),
              lead.info)
        wait_node(lead, "f1", "up")
        exp = lead.wait_experiment(submit(lead, dict(COLL, world_size=2, nodes=2))["id"])
        check(exp["status"] == "succeeded", exp)
        rows = lead.get(f"/v1/experiments/{exp['id']}/results")["rows"]
        check(rows and all(r["nodes"] == 2 and r["busbw_gbs_median"] > 0 for r in rows),
              rows[:1])
        env = {k: v for k, v in os.environ.items() if not k.startswith("DDPB_")}
        r = subprocess.run([CLI, "--url", lead.url, "--ca", KEYS.ca, "--json", "show",
                            str(exp["id"])], capture_output=True, text=True, timeout=30, env=env)
        check(r.returncode == 0 and json.loads(r.stdout)["experiment"]["status"] == "succeeded",
              r.stderr)
        r = subprocess.run([CLI, "--url", lead.url, "nodes"], capture_output=True, text=True,
                           timeout=30, env=env)
        check(r.returncode == 4 and "certificate" in r.stderr.lower(), (r.returncode, r.stderr))
        r = subprocess.run([CLI, "--url", lead.url, "--ca", "/nonexistent/ca.pem", "nodes"],
                           capture_output=True, text=True, timeout=30, env=env)
        check(r.returncode == 2 and "--ca" in r.stderr, (r.returncode, r.stderr))
    finally:
        f1.close()
        lead.close()


def test_plain_http_join_still_works():
    """A plain-HTTP cluster (set up before TLS) still joins, and the follower warns that
    the token and secrets cross in the clear."""
    lead = leader(tls=None)
    f1 = follower(lead, "f1")
    try:
        check(lead.url.startswith("http://"), lead.url)
        wait_node(lead, "f1", "up")
        check("is plain HTTP" in f1.daemon_log(), f1.daemon_log())
    finally:
        f1.close()
        lead.close()


if __name__ == "__main__":
    try:
        raise SystemExit(run_cases([
            test_join_and_nodes,
            test_follower_redirects_to_leader,
            test_joins_refused,
            test_malformed_syncs_refused,
            test_cluster_key_identities_and_removal,
            test_run_spans_two_nodes,
            test_follower_ranks_get_the_memory_limit,
            test_framework_engine_spans_nodes,
            test_follower_killed_mid_run,
            test_follower_drains_on_sigterm,
            test_leader_restart_interrupts_and_followers_rejoin,
            test_follower_with_wrong_ca_cannot_join,
            test_plain_http_to_tls_port_fails_cleanly,
            test_api_over_tls_end_to_end,
            test_plain_http_join_still_works,
        ]))
    finally:
        os.unlink(TOKEN_FILE)
        KEYS.close()
