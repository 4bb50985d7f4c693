#!/usr/bin/env python3
"""Elastic engines through the REST API (issue 32 item 3): engine pytorch in restart
mode (the daemon stops the group on a lost rank and starts generation N+1, the adapter
resumes from its checkpoint) shrinking 2 -> 1 after a kill and restarting at full size
with a replacement; horovod's and the other engines' answers to "elastic".

Each case checks the run succeeded, the generations the daemon recorded
(<state>/runs/<id>/elastic/generations.jsonl) and the adapter's resume (events.jsonl in the
same folder: its "resumed" with gen, world and lost_steps), step numbers that never go back
(no step row of a slot repeats a number), the lost slot's row, and that no process of any
generation is left. It prints how long each restart took (kill to resumed)."""
import json
import os
import signal
import sys
import time

from harness import Daemon, check, run_cases, wait_gone

ELASTIC = {"workload": "train", "model": "mnist-cnn", "batch_size": 32, "warmup_steps": 1,
           "engine": "pytorch", "strategy": "ddp", "world_size": 2, "epochs": 2,
           "timeout_s": 400, "dataset": {"name": "fashion-mnist", "samples": 1024},
           "optimizer": {"type": "sgd", "lr": 0.05, "momentum": 0.9}}


def read_jsonl(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


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
    for the end. Returns (run, every pid seen, seconds from the kill to the resume)."""
    exp = d.submit(spec)
    run_id = exp["runs"][0]["id"]
    d.wait_run(run_id, lambda r: r["status"] == "running" and len(r["ranks"]) == 2
               and all(k["pid"] for k in r["ranks"]), timeout=180, what="running")
    wait_steps(d, run_id, 0, after_steps)
    pids = rank_pids(d, run_id)
    t_kill = time.time()
    os.kill(pids[victim], signal.SIGKILL)
    seen = set(pids)
    deadline = time.time() + 400
    while time.time() < deadline:  # every process of every generation, for the end check
        run = d.get(f"/v1/runs/{run_id}")
        seen.update(k["pid"] for k in run["ranks"] if k["pid"])
        if run["status"] in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.1)
    resumed = [e for e in read_jsonl(os.path.join(elastic_dir(d, run_id), "events.jsonl"))
               if e["event"] == "resumed"]
    took = resumed[0]["t"] - t_kill if resumed else None
    return d.get(f"/v1/runs/{run_id}"), sorted(seen), took


def check_restart(d, run, pids, world_after):
    """The common checks of a restarted run (see the module's docstring)."""
    run_id = run["id"]
    check(run["status"] == "succeeded", (run["status"], run["error"], d.daemon_log()))
    gens = read_jsonl(os.path.join(elastic_dir(d, run_id), "generations.jsonl"))
    check([g["gen"] for g in gens] == [0, 1], gens)
    check(gens[0]["world"] == 2 and gens[1]["world"] == world_after, gens)
    check(gens[1]["lost"] == [1] and gens[1]["members"] == list(range(world_after)), gens)
    check(gens[1]["stop_ms"] >= 0, gens)
    events = read_jsonl(os.path.join(elastic_dir(d, run_id), "events.jsonl"))
    resumed = [e for e in events if e["event"] == "resumed"]
    check(len(resumed) == 1 and resumed[0]["gen"] == 1 and resumed[0]["world"] == world_after
          and resumed[0]["lost_steps"] >= 0 and resumed[0]["regroup_ms"] > 0, events)
    check(any(e["event"] == "regroup" and e["gen"] == 1 for e in events), events)
    rows = d.step_rows(run_id)
    for rank in range(2):
        nums = [s["step"] for s in rows if s["rank"] == rank]
        check(len(nums) == len(set(nums)), (rank, "a step number repeats", nums))
    # slot 0 ran both generations: its numbers go on past the commit, never back
    zero = sorted(s["step"] for s in rows if s["rank"] == 0)
    check(zero and zero[-1] + 1 >= len(zero), zero)
    check(len(run["epochs"]) == 2 and all(e["train_acc"] is not None for e in run["epochs"]),
          run["epochs"])
    wait_gone(pids)
    return gens, resumed[0]


def test_pytorch_shrinks_after_a_kill():
    """elastic min 1, max 1: rank 1 killed mid-epoch; the group restarts as one rank from
    the last commit, finishes both epochs, and slot 1's row says it was lost."""
    d = Daemon(cpu_slots=2)
    try:
        spec = dict(ELASTIC, elastic={"min_ranks": 1, "max_ranks": 1, "commit_every": 5})
        run, pids, took = kill_and_finish(d, spec)
        gens, resumed = check_restart(d, run, pids, 1)
        slot1 = next(k for k in run["ranks"] if k["rank"] == 1)
        check(slot1["status"] in ("lost", "killed") and "elastic" in (slot1["error"] or ""),
              slot1)
        print(f"pytorch 2->1: kill to resumed {took:.2f} s, stopping the group "
              f"{gens[1]['stop_ms']} ms, lost steps {resumed['lost_steps']}", flush=True)
        d.wait_slots_free(2)
    finally:
        d.close()


def test_pytorch_restarts_at_full_size_with_a_replacement():
    """elastic min 1, max 2: a replacement is allowed, so the group restarts with 2 ranks
    (slot 1 a new process) and both slots report steps after the restart."""
    d = Daemon(cpu_slots=2)
    try:
        spec = dict(ELASTIC, elastic={"min_ranks": 1, "max_ranks": 2, "commit_every": 5})
        run, pids, took = kill_and_finish(d, spec)
        gens, resumed = check_restart(d, run, pids, 2)
        slot1 = next(k for k in run["ranks"] if k["rank"] == 1)
        check(slot1["status"] == "done", slot1)
        print(f"pytorch 2->2: kill to resumed {took:.2f} s, stopping the group "
              f"{gens[1]['stop_ms']} ms, lost steps {resumed['lost_steps']}", flush=True)
        d.wait_slots_free(2)
    finally:
        d.close()


def test_pytorch_fails_below_min_ranks():
    """elastic min 2: losing a rank leaves 1 survivor, under min_ranks (a replacement does
    not count: as in place, the run goes on only while min_ranks live): the run fails
    saying so, with no process left."""
    d = Daemon(cpu_slots=2)
    try:
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
        check(run["status"] == "failed" and run["error"] == "elastic: 1 rank left, min_ranks 2"
              and run["error_rank"] == 1, (run["error"], run["error_rank"]))
        gens = read_jsonl(os.path.join(elastic_dir(d, run_id), "generations.jsonl"))
        check([g["gen"] for g in gens] == [0], gens)
        wait_gone(pids)
        d.wait_slots_free(2)
    finally:
        d.close()


def test_horovod_shrinks_after_a_kill():
    """horovod elastic min 1, max 1: rank 1 killed mid-epoch; Horovod's driver goes on
    with one worker (the daemon's discovery drops the slot), which resumes from the last
    in-memory commit and finishes both epochs."""
    d = Daemon(cpu_slots=2)
    try:
        spec = dict(ELASTIC, engine="horovod", strategy="horovod",
                    elastic={"min_ranks": 1, "max_ranks": 1, "commit_every": 5})
        run, pids, took = kill_and_finish(d, spec)
        check(run["status"] == "succeeded", (run["status"], run["error"], d.daemon_log()))
        folder = elastic_dir(d, run["id"])
        gens = read_jsonl(os.path.join(folder, "generations.jsonl"))
        check([g["gen"] for g in gens] == [0, 1] and gens[1]["lost"] == [1]
              and gens[1]["world"] == 1, gens)
        with open(os.path.join(folder, "hosts")) as f:
            check(f.read().split() == ["0"], "the discovery still lists slot 1")
        events = read_jsonl(os.path.join(folder, "events.jsonl"))
        resumed = [e for e in events if e["event"] == "resumed"]
        check(resumed and resumed[0]["world"] == 1 and resumed[0]["members"] == [0]
              and resumed[0]["lost_steps"] >= 0, events)
        rows = d.step_rows(run["id"])
        for rank in range(2):
            nums = [s["step"] for s in rows if s["rank"] == rank]
            check(len(nums) == len(set(nums)), (rank, "a step number repeats", nums))
        check(len(run["epochs"]) == 2, run["epochs"])
        wait_gone(pids)
        print(f"horovod 2->1: kill to resumed {took:.2f} s, lost steps "
              f"{resumed[0]['lost_steps']}", flush=True)
        d.wait_slots_free(2)
    finally:
        d.close()


def test_horovod_replaces_the_lost_worker():
    """horovod elastic min 1, max 2: the daemon's discovery keeps listing the lost slot,
    Horovod starts a replacement there once its blacklist cooldown ends, the workers take it
    in at a commit, and the run ends with both slots done."""
    d = Daemon(cpu_slots=2)
    try:
        spec = dict(ELASTIC, engine="horovod", strategy="horovod", epochs=3,
                    elastic={"min_ranks": 1, "max_ranks": 2, "commit_every": 5})
        run, pids, took = kill_and_finish(d, spec)
        check(run["status"] == "succeeded", (run["status"], run["error"], d.daemon_log()))
        folder = elastic_dir(d, run["id"])
        with open(os.path.join(folder, "hosts")) as f:
            check(f.read().split() == ["0", "1"], "the discovery dropped slot 1")
        slot1 = next(k for k in run["ranks"] if k["rank"] == 1)
        check(slot1["status"] == "done", slot1)
        gens = read_jsonl(os.path.join(folder, "generations.jsonl"))
        check([(g["gen"], g["members"], g["lost"]) for g in gens] ==
              [(0, [0, 1], []), (1, [0], [1]), (2, [0, 1], [])], gens)
        events = read_jsonl(os.path.join(folder, "events.jsonl"))
        check(any(e["event"] == "detect" for e in events), events)
        worlds = [e["world"] for e in events if e["event"] == "resumed"]
        check(worlds and worlds[0] == 1 and worlds[-1] == 2, events)
        rows = d.step_rows(run["id"])
        for rank in range(2):
            nums = [s["step"] for s in rows if s["rank"] == rank]
            check(len(nums) == len(set(nums)), (rank, "a step number repeats", nums))
        wait_gone(pids)
        print(f"horovod 2->1->2: kill to resumed {took:.2f} s", flush=True)
        d.wait_slots_free(2)
    finally:
        d.close()


if __name__ == "__main__":
    sys.exit(run_cases([test_pytorch_shrinks_after_a_kill,
                        test_pytorch_restarts_at_full_size_with_a_replacement,
                        test_pytorch_fails_below_min_ranks,
                        test_horovod_shrinks_after_a_kill,
                        test_horovod_replaces_the_lost_worker]))
