#!/usr/bin/env python3
"""Collectives end to end through the REST API: every op (and every dtype) runs on real
workers and stores rows with #wrong == 0, the algorithm used and nccl-tests' bus
bandwidth; a worker stopped with SIGSTOP makes the run fail within the spec's
comm_timeout_s, naming that rank, with no worker left behind; garbage sent to the
workers' data ports while the mesh forms does not break the run; the hierarchical allreduce
on ranks split into emulated nodes (DDPB_EMULATE_NODES on the daemon) stores verified rows."""
import json
import os
import signal
import socket
import sys
import threading
import time

from harness import Daemon, check, pid_alive, run_cases, wait_gone

ALGORITHMS = {
    "allreduce": {"ring", "rd", "hd", "hier"},
    "reduce_scatter": {"ring", "direct"},
    "all_gather": {"ring", "direct"},
    "broadcast": {"ring", "tree"},
    "sendrecv": {"direct"},
}


def busbw_factor(op, n):
    if op == "allreduce":
        return 2 * (n - 1) / n
    if op in ("reduce_scatter", "all_gather"):
        return (n - 1) / n
    return 1.0


def check_rows(run):
    spec, world = run["spec"], run["spec"]["world_size"]
    rows = run["collectives"]
    if spec.get("buckets_of", "none") == "none":  # else the model's buckets, checked apart
        check(len(rows) == len(spec["sizes"]) * spec["repeats"], f"{len(rows)} rows: {rows}")
    for r in rows:
        check(r["wrong"] == 0, f"wrong results: {r}")
        check(r["op"] == spec["op"] and r["dtype"] == spec["dtype"] and r["redop"] == spec["redop"], r)
        check(r["inplace"] in (spec["inplace"], int(spec["inplace"])), r)
        # transport auto (the default) runs every op of one node's ranks over shared memory
        allowed = ALGORITHMS[spec["op"]] | ({"shm"} if spec.get("transport") != "tcp" else set())
        check(r["algorithm"] in allowed, f"algorithm {r['algorithm']} for {spec['op']}")
        esize = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8}[spec["dtype"]]
        check(r["count"] * esize == r["bytes"], r)
        if spec["op"] in ("reduce_scatter", "all_gather"):  # whole buffer, as nccl-tests
            check(r["bytes"] % (world * esize) == 0, r)
        check(0 < r["time_us_min"] <= r["time_us_median"] <= r["time_us_max"], r)
        want = r["algbw_gbs"] * busbw_factor(spec["op"], world)
        check(abs(r["busbw_gbs"] - want) <= 1e-9 + 1e-6 * want, r)


def run_sweep(d, spec, n_runs):
    exp = d.submit(spec)
    check(exp["n_runs"] == n_runs, exp)
    exp = d.wait_experiment(exp["id"], timeout=300)
    runs = [d.get(f"/v1/runs/{r['id']}") for r in exp["runs"]]
    for run in runs:
        check(run["status"] == "succeeded", f"{run['params']}: {run['status']}: {run.get('error')}")
        check_rows(run)
    return runs


def test_every_op_stores_no_wrong():
    d = Daemon(cpu_slots=3)
    try:
        # transport tcp: TCP's algorithms and their choice by size (test_shm.py runs every
        # op over shared memory)
        base = {"workload": "collective", "sizes": [8, "96K", "1M"], "iters": 3, "warmup": 1,
                "check": True, "transport": "tcp"}
        runs = run_sweep(d, dict(base, name="ops", world_size=3, dtype="bfloat16", redop="avg",
                                 sweep={"op": list(ALGORITHMS)}), 5)
        # small sizes pick the latency algorithm, 1M the ring (or direct for point to point)
        for run in runs:
            algs = [r["algorithm"] for r in run["collectives"]]
            if run["spec"]["op"] != "sendrecv":
                check(algs[0] != "ring" and algs[-1] == "ring", (run["spec"]["op"], algs))
        run_sweep(d, dict(base, name="dtypes", world_size=2, op="allreduce", redop="max",
                          inplace=True, sweep={"dtype": ["float32", "float16", "bfloat16",
                                                         "int32", "int64"]}), 5)
        run_sweep(d, dict(base, name="forced", world_size=3, op="reduce_scatter", inplace=True,
                          sweep={"algorithm": ["ring", "direct"]}), 2)
        # an algorithm the op does not have is refused when submitted
        status, body, _ = d.request("POST", "/v1/experiments",
                                    body=dict(base, op="broadcast", algorithm="rd"))
        check(status == 400 and body["error"]["field"] == "algorithm", (status, body))
    finally:
        d.close()


def test_stopped_worker_fails_within_comm_timeout():
    d = Daemon(cpu_slots=3)
    pids = []
    try:
        spec = {"name": "stopped", "workload": "collective", "world_size": 3, "min_bytes": "1M",
                "max_bytes": "1M", "iters": 1000, "warmup": 0, "repeats": 100, "check": False,
                "comm_timeout_s": 3, "timeout_s": 600}
        exp = d.submit(spec)
        run_id = exp["runs"][0]["id"]
        run = d.wait_run(run_id, lambda r: r["status"] == "running" and len(r["ranks"]) == 3
                         and all(k["pid"] for k in r["ranks"]), what="running")
        d.wait_run(run_id, lambda r: r["progress"] > 0, what="first size measured")
        pids = [k["pid"] for k in run["ranks"]]
        run, took = d.freeze_rank(exp["id"], run_id, pids[1])
        check(run["status"] == "failed", run)
        check(run["error_rank"] == 1 and "rank 1" in run["error"], run["error"])
        # 3 s of silence, the blame exchange and the daemon's bookkeeping; far from the
        # 600 s run timeout and the 30 s heartbeat timeout
        check(took < 20, f"the run failed {took:.1f} s after the stop")
        wait_gone(pids)
        d.wait_slots_free(3)
    finally:
        for p in pids:
            if pid_alive(p):
                os.kill(p, signal.SIGKILL)
        d.close()


def listening_ports(pids):
    """TCP ports in LISTEN state that belong to the given processes."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:
            pass
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[3] == "0A" and cols[9] in inodes:
                        ports.add(int(cols[1].rsplit(":", 1)[1], 16))
        except OSError:
            pass
    return ports


def worker_rank(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for kv in f.read().split(b"\0"):
                if kv.startswith(b"DDPB_RANK="):
                    return int(kv[10:])
    except (OSError, ValueError):
        pass
    return None


def daemon_children(daemon_pid):
    """Child PIDs of the daemon (cheap enough to poll in a tight loop)."""
    out = []
    try:
        for tid in os.listdir(f"/proc/{daemon_pid}/task"):
            with open(f"/proc/{daemon_pid}/task/{tid}/children") as f:
                out += [int(p) for p in f.read().split()]
    except OSError:
        pass
    return out


class Spammer(threading.Thread):
    """Stops every worker as it is spawned, lets all but the last rank go on, so those
    wait for it in the join with their data ports open (a worker listens before it
    joins); then sends garbage to, and holds silent connections on, every data port, and
    lets the last rank go."""

    def __init__(self, daemon_pid, world):
        super().__init__(daemon=True)
        self.daemon_pid, self.world = daemon_pid, world
        self.hits, self.held, self.stop = 0, [], False
        self.stopped = []

    def freeze_all(self):
        """Stops each worker once it has exec'd (its environment names its rank)."""
        deadline = time.time() + 20
        while not self.stop and time.time() < deadline and len(self.stopped) < self.world:
            for pid in daemon_children(self.daemon_pid):
                if pid not in self.stopped and worker_rank(pid) is not None:
                    os.kill(pid, signal.SIGSTOP)
                    self.stopped.append(pid)
        return len(self.stopped) == self.world

    def garbage(self, ports):
        for port in ports:
            for payload in (os.urandom(64), b"DDPT\x02\x00\x01\x00" + os.urandom(16), b""):
                try:
                    s = socket.create_connection(("127.0.0.1", port), timeout=0.5)
                    if payload:
                        s.sendall(payload)
                    self.held.append(s)
                    self.hits += 1
                except OSError:
                    pass

    def run(self):
        try:
            if not self.freeze_all():
                return
            ranks = {worker_rank(p): p for p in self.stopped}
            last = ranks.get(self.world - 1)
            others = [p for p in self.stopped if p != last]
            for p in others:
                os.kill(p, signal.SIGCONT)
            deadline, ports = time.time() + 5, set()
            while len(ports) < len(others) and time.time() < deadline:
                ports = listening_ports(others)
            self.garbage(ports)
        finally:
            for p in self.stopped:
                os.kill(p, signal.SIGCONT)

    def close(self):
        self.stop = True
        self.join(10)
        for s in self.held:
            s.close()


def test_garbage_on_data_ports_does_not_break_run():
    d = Daemon(cpu_slots=3)
    try:
        spec = {"name": "garbage", "workload": "collective", "world_size": 3, "sizes": ["4K", "1M"],
                "iters": 5, "warmup": 1, "check": True, "comm_timeout_s": 20}
        spam = Spammer(d.proc.pid, spec["world_size"])
        spam.start()
        exp = d.run_experiment(spec, timeout=120)
        spam.close()
        run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
        check(run["status"] == "succeeded", f"{run['status']}: {run.get('error')}")
        check_rows(run)
        hits = spam.hits
        check(hits >= 3 * (spec["world_size"] - 1), f"reached data ports {hits} times")
    finally:
        d.close()


def test_hier_on_emulated_nodes():
    """algorithm "hier" through REST with the daemon's 4 ranks split into 2 emulated nodes
    of 2: every dtype, results checked (#wrong == 0 on poisoned outputs) and recorded as
    hier; a node map that does not fit the run fails it naming DDPB_EMULATE_NODES, which
    shows the variable reaches the workers' rendezvous."""
    d = Daemon(cpu_slots=4, env=dict(os.environ, DDPB_EMULATE_NODES="2"))
    try:
        base = {"workload": "collective", "op": "allreduce", "algorithm": "hier",
                "world_size": 4, "sizes": [8, "96K", "3M"], "iters": 3, "warmup": 1,
                "check": True}
        runs = run_sweep(d, dict(base, name="hier-2x2", redop="avg",
                                 sweep={"dtype": ["float32", "bfloat16", "int64"]}), 3)
        runs += run_sweep(d, dict(base, name="hier-inplace", redop="max", inplace=True), 1)
        for run in runs:
            algs = {r["algorithm"] for r in run["collectives"]}
            check(algs == {"hier"}, algs)
    finally:
        d.close()
    d = Daemon(cpu_slots=4, env=dict(os.environ, DDPB_EMULATE_NODES="3,3"))
    try:
        exp = d.submit(dict(base, name="hier-bad-map"))
        exp = d.wait_experiment(exp["id"], timeout=120)
        run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
        check(run["status"] == "failed", run["status"])
        check("DDPB_EMULATE_NODES" in json.dumps(run.get("error")), run.get("error"))
    finally:
        d.close()


def test_model_bucket_replay():
    """buckets_of replays a DDP run's gradient buckets: ResNet-50 (25,557,032 float32
    parameters, torchvision's count) launches its fc layer (2048 x 1000 + 1000) first, then
    buckets of at least 25 MiB; together they are every gradient byte, each checked."""
    d = Daemon(cpu_slots=2)
    try:
        with open(os.path.join(os.environ["DDPB_SOURCE_DIR"], "schema", "examples",
                               "allreduce-model-buckets.json")) as f:
            spec = json.load(f)
        spec.update(iters=2, warmup=1)
        run = run_sweep(d, spec, 1)[0]
        sizes = [r["bytes"] for r in run["collectives"]]  # stored by size, not launch order
        check(sum(sizes) == 25557032 * 4, sizes)
        check((2048 * 1000 + 1000) * 4 in sizes, sizes)
        # besides the fc bucket only the last (the remainder) is under the 25 MiB cap
        check(len([s for s in sizes if s < 25 << 20]) <= 2 and len(sizes) >= 4, sizes)
        status, body, _ = d.request("POST", "/v1/experiments", dict(spec, buckets_of="resnet51"))
        check(status == 400 and body["error"]["field"] == "buckets_of", body)
    finally:
        d.close()


if __name__ == "__main__":
    sys.exit(run_cases([
        test_model_bucket_replay,
        test_every_op_stores_no_wrong,
        test_stopped_worker_fails_within_comm_timeout,
        test_garbage_on_data_ports_does_not_break_run,
        test_hier_on_emulated_nodes,
    ]))
