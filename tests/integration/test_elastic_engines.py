#!/usr/bin/env python3
"""Elastic engines through the REST API (issue 32 item 3): engine pytorch in restart
mode (the daemon stops the group on a lost rank and starts generation N+1, the adapter
resumes from its checkpoint) shrinking 2 -> 1 after a kill and restarting at full size
with a replacement; horovod's and the other engines' answers to "elastic".

Each case checks the run succeeded, its generations as GET /v1/runs/{id} serves them (the
daemon's record, with the "resumed" the adapter reported: lost_steps, commit_step, when),
step rows that carry their generation and world and whose numbers never go back (no step
row of a slot repeats a number), the lost slot's row, and that no process of any
generation is left. It prints how long each restart took (the loss to the resume)."""
import datetime
import os
import signal
import sys
import time

from harness import Daemon, SharedDaemon, check, run_cases, wait_gone

ELASTIC = {"workload": "train", "model": "mnist-cnn", "batch_size": 32, "warmup_steps": 1,
           "engine": "pytorch", "strategy": "ddp", "world_size": 2, "epochs": 2,
           "timeout_s": 400, "dataset": {"name": "fashion-mnist", "samples": 1024},
           "optimizer": {"type": "sgd", "lr": 0.05, "momentum": 0.9}}


# The daemon every case shares (harness.SharedDaemon: one engine probe for the file).
SHARED = SharedDaemon(lambda: Daemon(cpu_slots=2))


def elastic_dir(d, run_id):
    return os.path.join(d.state_dir, "runs", str(run_id), "elastic")


def rank_pids(d, run_id):
    return [k["pid"] for k in d.get(f"/v1/runs/{run_id}")["ranks"] if k["pid"]]


def wait_steps(d, run_id, rank, n, timeout=180):
    """Until slot `rank` reported n steps (training, past the framework's import)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if sum(1 for s in d.step_rows(run_id) if s["rank"] == rank) >= n:
            return
        time.sleep(0.1)
    raise AssertionError(f"run {run_id}: rank {rank} did not reach {n} steps: "
                         f"{d.daemon_log()}")


def kill_and_finish(d, spec, victim=1, after_steps=12):
    """Submits spec, SIGKILLs slot `victim` once slot 0 reported after_steps steps, waits
    for the end. Returns (run, every pid seen)."""
    exp = d.submit(spec)
    run_id = exp["runs"][0]["id"]
    d.wait_run(run_id, lambda r: r["status"] == "running" and len(r["ranks"]) == 2
               and all(k["pid"] for k in r["ranks"]), timeout=180, what="running")
    wait_steps(d, run_id, 0, after_steps)
    pids = rank_pids(d, run_id)
    os.kill(pids[victim], signal.SIGKILL)
    seen = set(pids)
    deadline = time.time() + 400
    while time.time() < deadline:  # every process of every generation, for the end check
        run = d.get(f"/v1/runs/{run_id}")
        seen.update(k["pid"] for k in run["ranks"] if k["pid"])
        if run["status"] in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.1)
    run = d.get(f"/v1/runs/{run_id}")
    check(run["status"] == "succeeded", (run["status"], run["error"], d.daemon_log()))
    return run, sorted(seen)


def check_steps(d, run):
    """No slot repeats a step number; every step row carries its generation and world."""
    rows = d.step_rows(run["id"])
    for rank in range(2):
        nums = [s["step"] for s in rows if s["rank"] == rank]
        check(nums and len(nums) == len(set(nums)), (rank, "a step number repeats", nums))
    check(all(s["generation"] is not None and s["world"] in (1, 2) for s in rows),
          "a step row without its generation")
    check({s["generation"] for s in rows} >= {0, 1}, "no step of a later generation")
    check(len(run["epochs"]) >= 2 and all(e["train_acc"] is not None for e in run["epochs"]),
          run["epochs"])


def resume_took(gen):
    """Seconds from the loss the daemon saw to the generation's first step."""
    def at(iso):
        return datetime.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    return at(gen["resumed_at"]) - at(gen["lost_at"])


def check_restart(d, run, pids, world_after):
    """The common checks of a restarted run (see the module's docstring); returns the
    generation that resumed."""
    gens = run["generations"]
    check([g["gen"] for g in gens] == [0, 1], gens)
    check(gens[0]["world"] == 2 and gens[1]["world"] == world_after, gens)
    check(gens[1]["members"] == list(range(world_after)) and gens[1]["lost_at"], gens)
    check(gens[1]["resumed_at"] and gens[1]["lost_steps"] is not None
          and gens[1]["lost_steps"] >= 0 and gens[1]["commit_step"] is not None
          and gens[1]["regroup_ms"] > 0, gens)
    check(os.path.exists(os.path.join(elastic_dir(d, run["id"]), "commit.pt")),
          "no checkpoint in the run's elastic folder")
    check_steps(d, run)
    zero = sorted(s["step"] for s in d.step_rows(run["id"]) if s["rank"] == 0)
    check(zero[-1] + 1 >= len(zero), zero)  # slot 0 ran both: its numbers went on
    wait_gone(pids)
    return gens[1]


def pytorch_restart(max_ranks):
    """A pytorch elastic run (min 1, max max_ranks) whose rank 1 is killed mid-epoch goes on
    as generation 1 of max_ranks rank(s); returns slot 1's row."""
    d = SHARED.get()
    spec = dict(ELASTIC, elastic={"min_ranks": 1, "max_ranks": max_ranks,
                                  "commit_every": 5})
    run, pids = kill_and_finish(d, spec)
    g = check_restart(d, run, pids, max_ranks)
    print(f"pytorch 2->{max_ranks}: loss to resumed {resume_took(g):.2f} s (regroup "
          f"{g['regroup_ms']:.0f} ms), lost steps {g['lost_steps']}", flush=True)
    d.wait_slots_free(2)
    return next(k for k in run["ranks"] if k["rank"] == 1)


def test_pytorch_shrinks_after_a_kill():
    """elastic min 1, max 1: rank 1 killed mid-epoch; the group restarts as one rank from
    the last commit, finishes both epochs, and slot 1's row says it was lost."""
    slot1 = pytorch_restart(1)
    check(slot1["status"] == "killed" and (slot1["error"] or "").startswith("elastic: lost"),
          slot1)


def test_pytorch_restarts_at_full_size_with_a_replacement():
    """elastic min 1, max 2: a replacement is allowed, so the group restarts with 2 ranks
    (slot 1 a new process) and both slots report steps after the restart."""
    slot1 = pytorch_restart(2)
    check(slot1["status"] == "done", slot1)


def test_pytorch_fails_below_min_ranks():
    """elastic min 2: losing a rank leaves 1 survivor, under min_ranks (a replacement does
    not count: as in place, the run goes on only while min_ranks live): the run fails
    saying so, with no process left."""
    d = SHARED.get()
    exp = d.submit(dict(ELASTIC, elastic={"min_ranks": 2, "max_ranks": 2,
                                           "commit_every": 5}, epochs=0, steps=100000))
    run_id = exp["runs"][0]["id"]
    d.wait_run(run_id, lambda r: len(r["ranks"]) == 2 and all(k["pid"] for k in r["ranks"]),
               timeout=180, what="spawned")
    wait_steps(d, run_id, 0, 3)
    pids = rank_pids(d, run_id)
    os.kill(pids[1], signal.SIGKILL)
    d.wait_experiment(exp["id"], timeout=120)
    run = d.get(f"/v1/runs/{run_id}")
    check(run["status"] == "failed" and run["error"].startswith(
        "elastic: 1 rank left, min_ranks 2") and run["error_rank"] == 1,
        (run["error"], run["error_rank"]))
    check([g["gen"] for g in run["generations"]] == [0], run["generations"])
    wait_gone(pids)
    d.wait_slots_free(2)


def test_horovod_shrinks_after_a_kill():
    """horovod elastic min 1, max 1: rank 1 killed mid-epoch; Horovod's driver goes on
    with one worker (the daemon's discovery drops the slot), which resumes from the last
    in-memory commit and finishes both epochs."""
    d = SHARED.get()
    spec = dict(ELASTIC, engine="horovod", strategy="horovod",
                elastic={"min_ranks": 1, "max_ranks": 1, "commit_every": 5})
    run, pids = kill_and_finish(d, spec)
    gens = run["generations"]
    check([(g["gen"], g["members"]) for g in gens] == [(0, [0, 1]), (1, [0])], gens)
    check(gens[1]["resumed_at"] and gens[1]["lost_steps"] is not None
          and gens[0]["detected_at"], gens)  # the generation that failed saw it
    with open(os.path.join(elastic_dir(d, run["id"]), "hosts")) as f:
        check(f.read().split() == ["0"], "the discovery still lists slot 1")
    slot1 = next(k for k in run["ranks"] if k["rank"] == 1)
    check(slot1["status"] == "killed" and (slot1["error"] or "").startswith("elastic: lost"),
          slot1)
    check_steps(d, run)
    wait_gone(pids)
    print(f"horovod 2->1: loss to resumed {resume_took(gens[1]):.2f} s, lost steps "
          f"{gens[1]['lost_steps']}", flush=True)
    d.wait_slots_free(2)


def test_horovod_replaces_the_lost_worker():
    """horovod elastic min 1, max 2: the daemon's discovery keeps listing the lost slot,
    Horovod starts a replacement there once its blacklist cooldown ends, the workers take it
    in at a commit, and the run ends with both slots done."""
    d = SHARED.get()
    # epochs: enough work left after the kill for the replacement (Horovod's 1 s cooldown,
    # then its start and imports) to join while slot 0 still trains; at 3 slot 0 once
    # finished right after the join, before the regroup, and gen 2 never resumed
    spec = dict(ELASTIC, engine="horovod", strategy="horovod", epochs=6,
                elastic={"min_ranks": 1, "max_ranks": 2, "commit_every": 5})
    run, pids = kill_and_finish(d, spec)
    with open(os.path.join(elastic_dir(d, run["id"]), "hosts")) as f:
        check(f.read().split() == ["0", "1"], "the discovery dropped slot 1")
    slot1 = next(k for k in run["ranks"] if k["rank"] == 1)
    check(slot1["status"] == "done", slot1)
    gens = run["generations"]
    check([(g["gen"], g["members"], g["joiners"]) for g in gens] ==
          [(0, [0, 1], []), (1, [0], []), (2, [0, 1], [1])], gens)
    check(gens[1]["resumed_at"] and gens[2]["resumed_at"], gens)
    check_steps(d, run)
    check({s["world"] for s in d.step_rows(run["id"])} == {1, 2}, "no step at world 1")
    wait_gone(pids)
    print(f"horovod 2->1->2: loss to resumed {resume_took(gens[1]):.2f} s", flush=True)
    d.wait_slots_free(2)


def test_elastic_refusals():
    """tensorflow and deepspeed cannot recover: 400 naming the field and saying why;
    GET /v1/engines says how each engine recovers."""
    d = SHARED.get()
    for engine, strategy in (("tensorflow", "ddp"), ("deepspeed", "zero1")):
        st, body, _ = d.request("POST", "/v1/experiments", dict(
            ELASTIC, engine=engine, strategy=strategy,
            elastic={"min_ranks": 1, "max_ranks": 2, "commit_every": 5}))
        err = body["error"] if st == 400 else body
        check(st == 400 and "elastic" in err["message"] and engine in err["message"],
              (engine, st, body))
    deadline = time.time() + 180
    node = d.get("/v1/engines")["nodes"][0]
    while node["probing"] and time.time() < deadline:  # its table once probed
        time.sleep(0.3)
        node = d.get("/v1/engines")["nodes"][0]
    engines = {g["name"]: g["elastic"] for g in node["engines"]}
    check(engines["pytorch"]["mode"] == "restart"
          and "checkpoint" in engines["pytorch"]["recovery"]
          and engines["horovod"]["mode"] == "driver"
          and engines["ddpbench"]["mode"] == "in_memory"
          and engines["tensorflow"]["mode"] == "none", engines)


if __name__ == "__main__":
    try:
        rc = run_cases([test_pytorch_shrinks_after_a_kill,
                        test_pytorch_restarts_at_full_size_with_a_replacement,
                        test_pytorch_fails_below_min_ranks,
                        test_horovod_shrinks_after_a_kill,
                        test_horovod_replaces_the_lost_worker,
                        test_elastic_refusals])
    finally:
        SHARED.close()
    sys.exit(rc)
