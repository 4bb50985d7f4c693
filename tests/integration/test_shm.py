#!/usr/bin/env python3
"""The shared-memory transport (issue 30) end to end through the REST API, on real workers:
- a sweep over transport shm and tcp runs every op of the collective workload (the
  schema's list), in and out of place, every dtype, sizes from 8 bytes to past 1 MiB (more
  than one collective slot), at 2 and 3 ranks: #wrong is 0 on every row (poisoned outputs
  checked), shm rows say algorithm "shm" and tcp rows never do, each run stores its
  transport and its ranks' env reports it; auto resolves to "shm" on one node;
- training under auto goes over shm for every strategy of the vocabulary, with the step's
  communication and exposed time reported as over tcp; a pipeline of 2 stages x 2
  replicas runs over shm;
- a rank killed with SIGKILL mid-allreduce fails the run well within the comm timeout,
  naming it, and while it ran every segment was an unnamed (deleted) file under /dev/shm
  and after it nothing new is in /dev/shm; a rank stopped with SIGSTOP fails the run after
  the comm timeout, naming it;
- a tmpfs too small for the segments (--shm-dir) fails the run naming the transport and
  the bytes it needed, the ranks exiting with an error, not a signal;
- ranks on two emulated nodes: shm is refused naming the nodes, auto runs shm+tcp."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from harness import Daemon, Skip, check, model_params, pid_alive, run_cases, wait_gone

SIZES = [8, "96K", "1100K", "3M"]  # 1100K: slots of 512 KiB plus a part; 3M: several chunks
ESIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8}
TRAIN = {"workload": "train", "model": "mnist-cnn", "batch_size": 8, "steps": 6,
         "warmup_steps": 2, "dataset": {"samples": 256}, "world_size": 2,
         "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9}}
PIPELINE = {"workload": "train", "model": "gpt2-tiny", "seq_len": 32, "batch_size": 8,
            "steps": 4, "warmup_steps": 1, "dataset": {"samples": 256}, "world_size": 4,
            "pipeline": 2, "micro_batches": 2, "strategy": "ddp",
            "optimizer": {"type": "adam", "lr": 0.001}}


def schema_enum(d, field):
    return d.get("/v1/spec/schema")["properties"][field]["enum"]


def env_transports(run):
    """Each rank's env.transport, by rank."""
    return [e["env"]["transport"] for e in sorted(run["env"], key=lambda e: e["rank"])]


def check_transport(run, want):
    """The run stored transport `want` (its spec) and reports what each rank used."""
    world = run["spec"]["world_size"]
    got = env_transports(run)
    check(len(got) == world, f"{run['params']}: env of {len(got)} ranks, want {world}")
    resolved = {"auto": "shm"}.get(want, want)
    check(got == [resolved] * world, f"{run['params']}: env transports {got}, want {resolved}")


def check_collective_rows(run, transport):
    spec = run["spec"]
    rows = run["collectives"]
    check(len(rows) == len(SIZES), f"{run['params']}: {len(rows)} rows")
    check(max(r["bytes"] for r in rows) > 1 << 20, rows)
    for r in rows:
        where = (run["params"], spec["op"], spec["dtype"], r["bytes"])
        check(r["wrong"] == 0, f"{where}: {r['wrong']} wrong")
        check(r["op"] == spec["op"] and r["dtype"] == spec["dtype"], (where, r))
        check(r["inplace"] in (spec["inplace"], int(spec["inplace"])), (where, r))
        check(r["count"] * ESIZE[spec["dtype"]] == r["bytes"] and r["time_us_median"] > 0, r)
        # an op that went over shared memory is recorded as algorithm "shm"
        if transport == "tcp":
            check(r["algorithm"] != "shm", (where, r["algorithm"]))
        else:
            check(r["algorithm"] == "shm", (where, r["algorithm"]))


def run_transport_sweep(d, spec, n_runs):
    """Submits a spec sweeping transport (and more), checks every run and the results
    table; returns the runs."""
    exp = d.submit(spec)
    check(exp["n_runs"] == n_runs, (exp["n_runs"], n_runs))
    exp = d.wait_experiment(exp["id"], timeout=600)
    runs = [d.get(f"/v1/runs/{r['id']}") for r in exp["runs"]]
    for run in runs:
        check(run["status"] == "succeeded", f"{run['params']}: {run['status']}: {run['error']}")
        want = run["params"]["transport"]
        check(run["spec"]["transport"] == want, (run["params"], run["spec"]["transport"]))
        check(run["spec"]["check"] is True, run["spec"])
        check_transport(run, want)
        check_collective_rows(run, want)
    table = d.get(f"/v1/experiments/{exp['id']}/results")
    check("transport" in table["columns"] and "wrong" in table["columns"], table["columns"])
    check({row["transport"] for row in table["rows"]} == set(spec["sweep"]["transport"]),
          table["rows"])
    check(table["rows"] and all(row["wrong"] == 0 for row in table["rows"]), table["rows"])
    return runs


def test_sweep_every_op_shm_and_tcp():
    d = Daemon(cpu_slots=3)
    try:
        ops, dtypes = schema_enum(d, "op"), schema_enum(d, "dtype")
        check({"allreduce", "reduce_scatter", "all_gather", "broadcast", "sendrecv"} <= set(ops),
              ops)
        base = {"workload": "collective", "sizes": SIZES, "iters": 2, "warmup": 1,
                "check": True, "comm_timeout_s": 60}
        for world, dtype, redop in ((2, "float32", "sum"), (3, "bfloat16", "avg")):
            run_transport_sweep(d, dict(base, name=f"ops-{world}", world_size=world,
                                        dtype=dtype, redop=redop,
                                        sweep={"transport": ["shm", "tcp"], "op": ops,
                                               "inplace": [False, True]}),
                                2 * len(ops) * 2)
        # every dtype on the reducing ops, each with another reduction
        for world, op, redop in ((2, "allreduce", "max"), (3, "reduce_scatter", "min"),
                                 (3, "allreduce", "sum")):
            run_transport_sweep(d, dict(base, name=f"dtypes-{op}-{world}", world_size=world,
                                        op=op, redop=redop, inplace=world == 3,
                                        sweep={"transport": ["shm", "tcp"], "dtype": dtypes}),
                                2 * len(dtypes))
        # auto on one node is shm: stored as auto, run over shm
        for world in (2, 3):
            run_transport_sweep(d, dict(base, name=f"auto-{world}", world_size=world,
                                        op="allreduce", sweep={"transport": ["auto"]}), 1)
    finally:
        d.close()


def test_training_over_shm_under_auto():
    d = Daemon(cpu_slots=4)
    try:
        # every strategy ddpbench's worker runs (the single-process ones are frameworks')
        strategies = [s["name"] for s in d.get("/v1/vocabulary")["strategies"]
                      if not s["single_process"]]
        check({"ddp", "zero1", "zero2", "naive", "horovod"} <= set(strategies), strategies)
        exp = d.run_succeeds(dict(TRAIN, name="train-shm",
                                  sweep={"transport": ["auto", "tcp"], "strategy": strategies}),
                             timeout=600, runs=2 * len(strategies))
        for r in exp["runs"]:
            run = d.get(f"/v1/runs/{r['id']}")
            check_transport(run, run["params"]["transport"])
            rows = [s for s in d.step_rows(run["id"]) if not s["warmup"]]
            check(len(rows) == 2 * (TRAIN["steps"] - TRAIN["warmup_steps"]), (r["params"], rows))
            for s in rows:
                check(s["comm_ms"] is not None and s["comm_ms"] > 0, (r["params"], s))
                check(s["comm_exposed_ms"] is not None and
                      0 <= s["comm_exposed_ms"] <= s["comm_ms"], (r["params"], s))
                # every step exchanges every gradient at least once; over shm bytes_sent
                # is the ring model's count (it was 0 before)
                check(s["bytes_sent"] >= model_params("mnist-cnn") * 4 // 2, (r["params"], s))
        table = d.get(f"/v1/experiments/{exp['id']}/results?group_by=transport,strategy")
        check(len(table["rows"]) == 2 * len(strategies), table["rows"])
        for row in table["rows"]:
            where = (row["transport"], row["strategy"])
            check(row["comm_exposed_ms"] is not None and row["comm_exposed_ms"] > 0, (where, row))
            check(row["throughput_mean"] > 0, (where, row))
        # a pipeline of 2 stages x 2 replicas: activations between stages, gradients
        # between replicas, all over shm
        exp = d.run_succeeds(dict(PIPELINE, name="pipeline-shm", transport="shm"),
                             timeout=300, runs=1)
        run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
        check_transport(run, "shm")
        rows = d.step_rows(run["id"])
        check(sorted({(s["rank"], s["stage"]) for s in rows}) == [(0, 0), (1, 1), (2, 0), (3, 1)],
              rows[:4])
        check(all(s["p2p_bytes"] > 0 and s["bytes_sent"] > 0 for s in rows), rows)
    finally:
        d.close()


def shm_listing():
    return sorted(os.listdir("/dev/shm"))


def shm_maps(pid):
    """The lines of a process's memory map that map a file of /dev/shm."""
    with open(f"/proc/{pid}/maps") as f:
        return [line.strip() for line in f if " /dev/shm/" in line]


def long_run(d, name, world):
    """Submits a long shm allreduce of large sizes; returns (experiment, run id, pids) once
    every rank runs and the first size is measured."""
    spec = {"name": name, "workload": "collective", "world_size": world, "transport": "shm",
            "op": "allreduce", "min_bytes": "16M", "max_bytes": "16M", "iters": 100,
            "warmup": 0, "repeats": 100, "check": False, "comm_timeout_s": 6,
            "timeout_s": 600}
    exp = d.submit(spec)
    run_id = exp["runs"][0]["id"]
    run = d.wait_run(run_id, lambda r: r["status"] == "running" and len(r["ranks"]) == world
                     and all(k["pid"] for k in r["ranks"]), what="running")
    d.wait_run(run_id, lambda r: r["progress"] > 0, what="first size measured")
    return exp, run_id, [k["pid"] for k in run["ranks"]]


def test_killed_rank_leaves_nothing_in_dev_shm():
    before = shm_listing()
    d = Daemon(cpu_slots=3)
    pids = []
    try:
        exp, run_id, pids = long_run(d, "shm-kill", 3)
        # the segments are mapped (its own and its peers') but have no name: the kernel
        # shows an O_TMPFILE file as "/dev/shm/#<inode> (deleted)"
        for pid in pids:
            maps = shm_maps(pid)
            check(len({line.split()[-2] for line in maps}) >= 3, (pid, maps))
            check(all(line.endswith("(deleted)") for line in maps), (pid, maps))
        check(shm_listing() == before, (before, shm_listing()))
        os.kill(pids[1], signal.SIGKILL)
        t0 = time.time()
        d.wait_experiment(exp["id"], timeout=60)
        took = time.time() - t0
        run = d.get(f"/v1/runs/{run_id}")
        check(run["status"] == "failed" and run["error_rank"] == 1, run)
        check("rank 1" in run["error"], run["error"])
        # a dead peer is seen at once (pidfd), not after the 6 s comm timeout
        check(took < 4, f"the run failed {took:.1f} s after the kill")
        # the survivors left their wait and exited with an error (the daemon's abort or
        # their own check of the peer's pidfd, whichever came first): none hung until the
        # daemon killed it
        for k in run["ranks"]:
            if k["rank"] != 1:
                check(k["signal"] is None and k["exit_code"] and k["error"], k)
        wait_gone(pids)
        check(shm_listing() == before, (before, shm_listing()))
    finally:
        for p in pids:
            if pid_alive(p):
                os.kill(p, signal.SIGKILL)
        d.close()


def test_stopped_rank_fails_after_comm_timeout():
    d = Daemon(cpu_slots=2)
    pids = []
    try:
        exp, run_id, pids = long_run(d, "shm-stop", 2)
        run, took = d.freeze_rank(exp["id"], run_id, pids[1])
        check(run["status"] == "failed", run)
        check(run["error_rank"] == 1 and "rank 1" in run["error"], run["error"])
        check("allreduce" in run["error"], run["error"])  # named with the op, as over TCP
        # the 6 s comm timeout, then the blame and the daemon's bookkeeping; far from the
        # 30 s heartbeat timeout and the 600 s run timeout
        check(5 <= took < 20, f"the run failed {took:.1f} s after the stop")
        wait_gone(pids)  # the daemon killed the stopped rank too
        d.wait_slots_free(2)
    finally:
        for p in pids:
            if pid_alive(p):  # SIGCONT first: a stopped rank left behind must not linger
                os.kill(p, signal.SIGCONT)
                os.kill(p, signal.SIGKILL)
        d.close()


def test_tmpfs_too_small_fails_naming_size():
    if os.geteuid() != 0:
        raise Skip("mounting a tmpfs needs root")
    mnt = tempfile.mkdtemp(prefix="ddpb-shm-small-")
    try:
        # room for one rank's segment (about 1.3 MiB for 2 ranks), not for two: one rank or
        # both fail to reserve theirs, whichever comes first
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", mnt],
                       check=True, capture_output=True)
        try:
            d = Daemon(cpu_slots=2, extra_args=["--shm-dir", mnt])
            try:
                spec = {"name": "shm-small", "workload": "collective", "world_size": 2,
                        "transport": "shm", "sizes": ["4K"], "iters": 2, "warmup": 0}
                exp = d.run_experiment(spec, timeout=120)
                run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
                check(run["status"] == "failed", run)
                m = re.search(r"transport shm: (\S+) has no room for this rank's (\d+)-byte "
                              r"segment", run["error"] or "")
                check(m and m.group(1) == mnt and 1 << 20 < int(m.group(2)) < 2 << 20 and
                      "for the 2 ranks of this node" in run["error"], run["error"])
                # the rank said so and exited: no SIGBUS, no signal at all
                check(all(k["signal"] is None for k in run["ranks"]), run["ranks"])
                check(any(k["exit_code"] and "has no room" in (k["error"] or "")
                          for k in run["ranks"]), run["ranks"])
                # the segment the other rank did reserve went with it
                check(os.listdir(mnt) == [] and shutil.disk_usage(mnt).used == 0,
                      (os.listdir(mnt), shutil.disk_usage(mnt)))
            finally:
                d.close()
        finally:
            subprocess.run(["umount", mnt], check=True)
    finally:
        os.rmdir(mnt)


def test_two_nodes_shm_refused_auto_is_shm_tcp():
    d = Daemon(cpu_slots=4, env=dict(os.environ, DDPB_EMULATE_NODES="2"))
    try:
        spec = {"workload": "collective", "world_size": 4, "sizes": [8, "1100K"], "iters": 2,
                "warmup": 0, "check": True}
        run = d.run_fails(dict(spec, name="shm-2-nodes", transport="shm"), "transport shm",
                          timeout=120)
        check(re.search(r"on 2 nodes", run["error"]), run["error"])
        exp = d.run_succeeds(dict(spec, name="auto-2-nodes", transport="auto"), timeout=120,
                             runs=1)
        run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
        check(env_transports(run) == ["shm+tcp"] * 4, run["env"])
        check(all(r["wrong"] == 0 for r in run["collectives"]) and run["collectives"],
              run["collectives"])
    finally:
        d.close()


if __name__ == "__main__":
    sys.exit(run_cases([
        test_sweep_every_op_shm_and_tcp,
        test_training_over_shm_under_auto,
        test_killed_rank_leaves_nothing_in_dev_shm,
        test_tmpfs_too_small_fails_naming_size,
        test_two_nodes_shm_refused_auto_is_shm_tcp,
        test_stopped_rank_fails_after_comm_timeout,
    ]))
