#!/usr/bin/env python3
"""The per-rank storage mounts (issue 34, dataset.storage_layer) through the REST API on
real workers and the real ddpbench-fs:
- a files-jpeg run under nfs (auto: a capped profile) reads through its ranks' mounts:
  it succeeds, every rank's env says storage_layer "mount", the results' read_mbps is
  filled and not above the cap; under a custom cap low enough to bind, the rate is
  within [80 %, 102 %] of it (the mount's stats, not the reader, count the bytes);
- engine pytorch reads through the same mounts (its env says "mount", read_mbps within
  the cap);
- storage_layer "mount" on local mounts too; "in_process" keeps the C loader's own
  emulation (no mount, env "in_process");
- kill -9 of a rank's ddpbench-fs mid-run fails the run naming the storage layer, no
  worker or ddpbench-fs is left, and the mount is gone;
- kill -9 of the daemon mid-run, then a restart: no ddpbench-fs mount is left under the
  state directory, and no ddpbench-fs of the old daemon runs (one that outlived it, as a
  server without --die-with-parent does, is killed and its mount detached by the sweep);
- a daemon whose --fuse-device cannot be opened refuses such a run with 409 naming
  dataset.storage; storage_layer in_process with engine pytorch is 400 naming the field.
The FUSE cases SKIP, with the reason, where /dev/fuse cannot be opened or ddpbench-fs
was not built (no libfuse3)."""
import os
import signal
import subprocess
import sys
import time

from harness import BUILD, Skip, check, live_processes, run_cases, wait_gone, worker_pids
from test_data_pipeline import BASE, cifar_daemon, data

FS = os.path.join(BUILD, "fs", "ddpbench-fs")
BANK_MS = 5.0  # STORAGE_BUCKET_BANK_NS (worker/data/storage.c)


def need_fuse():
    """Skip (with why) where no mount can be made here."""
    try:
        os.close(os.open("/dev/fuse", os.O_RDWR))
    except OSError as e:
        raise Skip(f"/dev/fuse cannot be opened ({e.strerror}): no FUSE mounts here")
    if not os.access(FS, os.X_OK):
        raise Skip(f"{FS} was not built (libfuse3 missing): no storage mounts here")


def fuse_mounts_under(state_dir):
    """The FUSE mount points beneath state_dir (from /proc/self/mountinfo)."""
    real = os.path.realpath(state_dir)
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            fstype = fields[fields.index("-") + 1]
            mnt = fields[4].replace("\\040", " ")
            if fstype.startswith("fuse") and mnt.startswith(real + "/"):
                out.append(mnt)
    return out


def fs_pids(state_dir):
    """PIDs of the live ddpbench-fs processes serving a mount beneath state_dir."""
    real = os.path.realpath(state_dir)
    return [pid for pid, argv in live_processes()
            if os.path.basename(argv[0]) == "ddpbench-fs" and "--mount" in argv
            and argv[argv.index("--mount") + 1].startswith(real + "/")]


def envs(d, run_id):
    return [e.get("env", {}) for e in d.get(f"/v1/runs/{run_id}").get("env", [])]


def results_row(d, exp_id):
    return d.get(f"/v1/experiments/{exp_id}/results")["rows"][0]


def long_run(root):
    """A loader-only run that reads through its mount for a while (a low custom cap)."""
    return dict(BASE, loader_only=True, steps=400, batch_size=16, timeout_s=120,
                dataset=data(root, format="files-jpeg", storage="custom", read_mbps=0.2))


def wait_for(cond, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached in {timeout}s")


def test_nfs_through_the_mount():
    need_fuse()
    with cifar_daemon("files-jpeg") as (d, root):
        exp = d.run_succeeds(dict(BASE, world_size=2, steps=6,
                                  dataset=data(root, format="files-jpeg", storage="nfs")),
                             timeout=180)
        run = exp["runs"][0]["id"]
        layers = [e.get("storage_layer") for e in envs(d, run)]
        check(layers == ["mount", "mount"], layers)
        row = results_row(d, exp["id"])
        check(row["read_mbps"] is not None and 0 < row["read_mbps"] <= 200 * 1.02, row)
        check(fuse_mounts_under(d.state_dir) == [], fuse_mounts_under(d.state_dir))
        # a cap that binds: the mount's own count of the bytes gives the rate
        cap = 0.5
        exp = d.run_succeeds(dict(BASE, loader_only=True, steps=12, prefetch=2,
                                  dataset=data(root, format="files-jpeg", storage="custom",
                                               read_mbps=cap, workers=2)), timeout=180)
        row = results_row(d, exp["id"])
        check(0.8 * cap <= row["read_mbps"] <= cap * 1.02, row)
        check(fs_pids(d.state_dir) == [] and fuse_mounts_under(d.state_dir) == [],
              (fs_pids(d.state_dir), fuse_mounts_under(d.state_dir)))


def test_pytorch_through_the_mount():
    """A framework engine reads through the same mounts: its loader opens the dataset at
    DDPB_STORAGE_MOUNT (ddpb_data.data_dir) and its read_bytes are the mount's."""
    need_fuse()
    with cifar_daemon("files-jpeg") as (d, root):
        cap = 0.5
        spec = dict(BASE, engine="pytorch", world_size=2, steps=6,
                    dataset=data(root, format="files-jpeg", storage="custom", read_mbps=cap))
        # the first framework submit waits for the engines' probe (it imports torch)
        status, body, _ = d.request("POST", "/v1/experiments", body=spec, timeout=300)
        check(status == 201, (status, body))
        exp = d.wait_experiment(body["id"], timeout=300)
        check(exp["status"] == "succeeded", [(r["status"], r["error"]) for r in exp["runs"]])
        run = exp["runs"][0]["id"]
        layers = [e.get("storage_layer") for e in envs(d, run)]
        check(layers == ["mount", "mount"], layers)
        row = results_row(d, exp["id"])
        # read_mbps is bytes over step time, and the bucket may bank BANK_MS of idle link
        # between steps (storage.c: bytes in a window <= rate x (window + bank)): over
        # steps of tens of ms that is a few percent above the cap, never more
        bound = cap * (1 + BANK_MS / row["step_ms_min"]) * 1.02
        check(row["read_mbps"] is not None and 0 < row["read_mbps"] <= bound, (bound, row))
        check(fs_pids(d.state_dir) == [] and fuse_mounts_under(d.state_dir) == [],
              (fs_pids(d.state_dir), fuse_mounts_under(d.state_dir)))


def test_mount_on_local_and_in_process():
    need_fuse()
    with cifar_daemon("files-jpeg") as (d, root):
        exp = d.run_succeeds(dict(BASE, steps=4, dataset=data(root, format="files-jpeg",
                                                               storage_layer="mount")),
                             timeout=180)
        check([e.get("storage_layer") for e in envs(d, exp["runs"][0]["id"])] == ["mount"])
        check(results_row(d, exp["id"])["read_mbps"] > 0, results_row(d, exp["id"]))
        exp = d.run_succeeds(dict(BASE, steps=4, dataset=data(root, format="files-jpeg",
                                                               storage="nfs",
                                                               storage_layer="in_process")),
                             timeout=180)
        run = exp["runs"][0]["id"]
        check([e.get("storage_layer") for e in envs(d, run)] == ["in_process"], envs(d, run))
        check(not os.path.exists(os.path.join(d.state_dir, "runs", str(run), "storage")),
              "in_process made a mount")
        check(results_row(d, exp["id"])["read_mbps"] > 0, results_row(d, exp["id"]))
        # local under auto: no layer at all
        exp = d.run_succeeds(dict(BASE, steps=2, dataset=data(root, format="files-jpeg")),
                             timeout=180)
        check([e.get("storage_layer") for e in envs(d, exp["runs"][0]["id"])] == ["none"])


def test_killed_fs_fails_the_run():
    need_fuse()
    with cifar_daemon("files-jpeg") as (d, root):
        exp = d.submit(long_run(root))
        pids = wait_for(lambda: fs_pids(d.state_dir), 60, "a ddpbench-fs")
        run = d.wait_run(d.get(f"/v1/experiments/{exp['id']}")["runs"][0]["id"],
                         lambda r: r["status"] == "running", timeout=60, what="running")
        workers = worker_pids(d.proc.pid)
        time.sleep(0.5)  # mid-read
        os.kill(pids[0], signal.SIGKILL)
        got = d.wait_experiment(exp["id"], timeout=60)["runs"][0]
        check(got["status"] == "failed", got)
        want = "dataset.storage: the storage layer for rank 0 (ddpbench-fs) died: killed by signal 9"
        check(want in (got["error"] or ""), got["error"])
        wait_gone(workers + pids, timeout=15)
        check(fuse_mounts_under(d.state_dir) == [], fuse_mounts_under(d.state_dir))
        check(run["id"] == got["id"], (run, got))


def test_daemon_killed_leaves_no_mount():
    need_fuse()
    with cifar_daemon("files-jpeg") as (d, root):
        exp = d.submit(long_run(root))
        wait_for(lambda: fuse_mounts_under(d.state_dir), 60, "the run's mount")
        workers = worker_pids(d.proc.pid)
        # and a mount whose server does not die with the daemon (no --die-with-parent):
        # only the restart's sweep can end it
        stale = os.path.join(d.state_dir, "runs", "999", "storage", "rank0")
        os.makedirs(stale)
        r, w = os.pipe()
        orphan = subprocess.Popen([FS, "--source", root, "--mount", os.path.realpath(stale),
                                   "--storage", "local", "--ready-fd", str(w)], pass_fds=(w,),
                                  start_new_session=True)
        os.close(w)
        check(os.read(r, 16).startswith(b"ready"), "the orphan mount is not ready")
        os.close(r)
        d.stop(sig=signal.SIGKILL)
        d.start()
        check(orphan.wait(timeout=15) == -signal.SIGKILL, orphan.returncode)
        check("detached a stale mount" in d.daemon_log() or not fuse_mounts_under(d.state_dir),
              d.daemon_log())
        # the restart swept: nothing mounted, no ddpbench-fs of the old daemon, and the run
        # it could not finish is failed as any interrupted run is
        check(fuse_mounts_under(d.state_dir) == [], fuse_mounts_under(d.state_dir))
        wait_gone(workers + fs_pids(d.state_dir), timeout=15)
        got = d.wait_experiment(exp["id"], timeout=60)["runs"][0]
        check(got["status"] != "running", got)


def test_refused_at_submit():
    with cifar_daemon("files-jpeg") as (d, root):
        bad = dict(BASE, engine="pytorch", dataset={"storage_layer": "in_process"})
        status, body, _ = d.request("POST", "/v1/experiments", body=bad)
        check(status == 400 and body["error"]["field"] == "dataset.storage_layer", (status, body))
        status, body, _ = d.request("POST", "/v1/experiments", body=dict(
            BASE, dataset=data(root, format="files-jpeg", storage="nfs"), launcher="mpirun",
            backend="mpi"))
        check(status == 409 and body["error"]["field"] == "dataset.storage", (status, body))
    root_daemon = cifar_daemon("files-jpeg")
    d, root = root_daemon.__enter__()
    try:
        d.stop()
        d.extra_args += ["--fuse-device", "/nonexistent/fuse"]
        d.start()
        status, body, _ = d.request("POST", "/v1/experiments", body=dict(
            BASE, dataset=data(root, format="files-jpeg", storage="nfs")))
        check(status == 409 and body["error"]["field"] == "dataset.storage", (status, body))
        check("/nonexistent/fuse" in body["error"]["message"], body)
        # in_process needs no FUSE, and local reads no mount: both still run there
        d.run_succeeds(dict(BASE, steps=2, dataset=data(root, format="files-jpeg", storage="nfs",
                                                         storage_layer="in_process")), timeout=120)
        d.run_succeeds(dict(BASE, steps=2, dataset=data(root, format="files-jpeg")), timeout=120)
    finally:
        root_daemon.__exit__(None, None, None)


if __name__ == "__main__":
    sys.exit(run_cases([test_refused_at_submit, test_nfs_through_the_mount,
                        test_pytorch_through_the_mount, test_mount_on_local_and_in_process,
                        test_killed_fs_fails_the_run,
                        test_daemon_killed_leaves_no_mount]))
