"""What every launcher must give a run the same way (issue 29): the checks each launcher's
test runs against a daemon, with the spec fields that pick the launcher (`fields`, e.g.
{"launcher": "mpirun", "mpi": "mpich"}). tests/integration/test_launchers.py runs them for
ddpbench's own launcher and mpirun with each MPI implementation; test_slurm.py for srun.

Each check takes (d, fields, cpu_slots) and fails with what it saw: a collective whose
results are checked, a training run's steps, epochs, memory, env and trace, a killed rank
that fails the run naming it, cancel, a frozen rank caught by its heartbeat, the run's
timeout; and after every one, nothing the launcher started is left running."""
import os
import signal
import time

from harness import check, pid_alive

# what a launcher may start besides the ranks: none of it may outlive a run
LAUNCHER_PROGRAMS = (b"ddpbench-worker", b"orted", b"orterun", b"mpirun", b"mpiexec",
                     b"hydra_pmi_proxy", b"mpiexec.hydra", b"srun", b"slurmstepd")

TRAIN = {"workload": "train", "model": "mnist-cnn", "batch_size": 8, "steps": 6,
         "warmup_steps": 2, "trace_steps": 3, "dataset": {"samples": 256}, "world_size": 2}
LONG_TRAIN = dict(TRAIN, steps=100000, trace_steps=0, dataset={"samples": 4096})


def launched_pids(run_dir_marker=None):
    """PIDs of live processes a launcher may have started (LAUNCHER_PROGRAMS), except the
    Slurm daemons' own steps of other jobs when run_dir_marker is given (only processes
    whose environment names it count)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv0 = os.path.basename(f.read().split(b"\0")[0])
            if argv0 not in LAUNCHER_PROGRAMS or not pid_alive(int(d)):
                continue
            if run_dir_marker:
                with open(f"/proc/{d}/environ", "rb") as f:
                    if run_dir_marker.encode() not in f.read():
                        continue
            out.append(int(d))
        except OSError:
            pass
    return out


def check_nothing_left(run_id, timeout=20):
    """Nothing started for run run_id is alive (its ranks carry DDPB_RUN=run-<id>, and so
    does every process a launcher started with the run's environment)."""
    marker = f"DDPB_RUN=run-{run_id}\0"
    deadline = time.time() + timeout
    left = launched_pids(marker)
    while left and time.time() < deadline:
        time.sleep(0.1)
        left = launched_pids(marker)
    check(not left, f"run {run_id} left processes behind: {left}")


def spec(fields, base, **kw):
    out = dict(base)
    out.update(fields)
    out.update(kw)
    return out


def wait_ranks_up(d, exp, n):
    """The run's ranks all connected (pids known) and it is running: the run."""
    run_id = exp["runs"][0]["id"]
    return d.wait_run(run_id, lambda r: r["status"] == "running" and len(r["ranks"]) == n and
                      all(k["pid"] for k in r["ranks"]), what="ranks up", timeout=90)


def check_collective(d, fields):
    """A checked allreduce and all_gather: #wrong 0, a done status and a log per rank."""
    for op in ("allreduce", "all_gather"):
        exp = d.run_succeeds(spec(fields, {"workload": "collective", "world_size": 2, "op": op,
                                           "min_bytes": "4K", "max_bytes": "256K", "iters": 5,
                                           "warmup": 1, "check": True}), timeout=120)
        run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
        check(run["collectives"] and all(c["wrong"] == 0 for c in run["collectives"]),
              run["collectives"])
        check([k["status"] for k in run["ranks"]] == ["done", "done"], run["ranks"])
        check(all(k["pid"] for k in run["ranks"]), run["ranks"])
        if fields.get("launcher") != "srun":  # pinned by the scheduler's CPUs, srun binds
            check(all(k["cpus"] for k in run["ranks"]) and
                  run["ranks"][0]["cpus"] != run["ranks"][1]["cpus"], run["ranks"])
        check(len(run["env"]) == 2, run["env"])
        for r in (0, 1):  # each rank's own log, whoever started it
            log = os.path.join(d.state_dir, "runs", str(run["id"]), f"rank{r}.log")
            with open(log) as f:
                check("joined: 2 ranks" in f.read(), log)
        check_nothing_left(run["id"])


def check_train_figures(d, fields):
    """Steps, epochs, memory, env and the trace arrive from every rank."""
    exp = d.run_succeeds(spec(fields, TRAIN, epochs=0), timeout=180)
    run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
    rows = d.step_rows(run["id"])
    check({r["rank"] for r in rows} == {0, 1}, rows[:3])
    check(len([r for r in rows if r["rank"] == 0]) == TRAIN["steps"], len(rows))
    check({m["rank"] for m in run["memory"]} == {0, 1}, run["memory"])
    check(all(m["params_bytes"] > 0 for m in run["memory"]), run["memory"])
    trace = d.get(f"/v1/runs/{run['id']}/trace")
    pids = {e["pid"] for e in trace["traceEvents"] if e.get("ph") == "X"}
    check(len(pids) == 2, pids)
    exp = d.run_succeeds(spec(fields, TRAIN, steps=0, epochs=1, trace_steps=0), timeout=180)
    run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
    check(len(run["epochs"]) >= 1, run["epochs"])
    check_nothing_left(run["id"])


def check_killed_rank(d, fields):
    """SIGKILL of rank 1 fails the run naming rank 1; nothing is left."""
    exp = d.submit(spec(fields, LONG_TRAIN))
    run = wait_ranks_up(d, exp, 2)
    time.sleep(1.0)
    os.kill(run["ranks"][1]["pid"], signal.SIGKILL)
    d.wait_experiment(exp["id"], timeout=60)
    run = d.get(f"/v1/runs/{run['id']}")
    check(run["status"] == "failed" and run["error_rank"] == 1 and "rank 1" in run["error"], run)
    check(run["ranks"][1]["status"] == "killed", run["ranks"])
    check_nothing_left(run["id"])


def check_cancel(d, fields):
    exp = d.submit(spec(fields, LONG_TRAIN))
    run = wait_ranks_up(d, exp, 2)
    status, body, _ = d.request("POST", f"/v1/runs/{run['id']}/cancel")
    check(status in (200, 202), (status, body))
    d.wait_experiment(exp["id"], timeout=60)
    run = d.get(f"/v1/runs/{run['id']}")
    check(run["status"] == "cancelled", run)
    check_nothing_left(run["id"])


def check_frozen_rank(d, fields):
    """A SIGSTOPped rank stops its heartbeats: the run fails naming it within the
    heartbeat timeout (plus the grace to stop the rest)."""
    exp = d.submit(spec(fields, LONG_TRAIN, heartbeat_timeout_s=3))
    run = wait_ranks_up(d, exp, 2)
    time.sleep(0.5)
    run, took = d.freeze_rank(exp["id"], run["id"], run["ranks"][0]["pid"], timeout=60)
    check(run["status"] == "failed" and run["error_rank"] == 0 and
          "stopped reporting" in run["error"], run)
    check(took < 20, took)
    check_nothing_left(run["id"])


def check_timeout(d, fields):
    exp = d.submit(spec(fields, LONG_TRAIN, timeout_s=3))
    d.wait_experiment(exp["id"], timeout=60)
    run = d.get(f"/v1/runs/{exp['runs'][0]['id']}")
    check(run["status"] == "failed" and "timeout of 3 s" in run["error"], run)
    check_nothing_left(run["id"])


CHECKS = (check_collective, check_train_figures, check_killed_rank, check_cancel,
          check_frozen_rank, check_timeout)
