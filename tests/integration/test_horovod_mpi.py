#!/usr/bin/env python3
"""The Python side of the mpirun launcher and Horovod over MPI (issue 29). First without
the daemon: ranks that OpenMPI's mpirun starts run engines/ddpb_launch.py as the daemon's
launcher does (docs/design.md: the launch contract), with a stand-in for ddpbench's store (the
wire format of common/store_proto.h, which engines/ddpb_store.py speaks) and a stand-in
for the daemon's report channel. Each rank finds its rank in mpirun's environment (no
DDPB_RANK), agrees peers through the store, and reports over the channel: first
{"channel": {run, rank, secret, pid, host}}, then exactly the lines it would write on fd 3.

- identity(): the daemon's rank, else that of the launcher DDPB_LAUNCHER names (OpenMPI's
  or MPICH's under mpirun, Slurm's under srun: the C worker's table), else RANK.
- 2 ranks of a script through the bootstrap: pinned by DDPB_CPU_MAP, writing their own
  DDPB_LOG_DIR/rank<N>.log; the channel line, then hello (same pid: the exec keeps the
  process mpirun started), env, a step carrying the sum of a Horovod
  allreduce made through engine_horovod's own rendezvous and init, and done; under both
  controllers (backend mpi: Horovod's MPI controller, MPI_Init from mpirun's environment;
  tcp: Gloo, whose rendezvous runs through the store under mpirun too).
- the horovod adapter trains a few steps of mnist-cnn with backend mpi and records the
  controller and the MPI library in its framework configuration.
- a bootstrap failure under mpirun reaches the channel as an error naming it, and a
  launcher that started the wrong number of ranks is named.
- through the REST API and the daemon's mpirun launcher: horovod with backend mpi trains
  2 ranks, and a sweep over backend tcp and mpi runs both and groups by backend; Gloo
  under MPICH's hydra trains too (its ranks read PMI_RANK); a killed,
  cancelled or frozen Python rank is supervised as a C worker's is; across two netlab
  hosts (root), Horovod's MPI controller trains a rank on each.

Needs openmpi-bin (deploy/install-deps.sh) and .venv's Horovod built with MPI
(deploy/setup-venv.sh)."""
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

from harness import Daemon, SharedDaemon, Skip, check, run_cases

SOURCE = os.environ.get("DDPB_SOURCE_DIR",
                        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ENGINES_DIR = os.path.join(SOURCE, "engines")
sys.path.insert(0, ENGINES_DIR)
import ddpb_report  # noqa: E402
import ddpb_store  # noqa: E402

VENV_PY = os.path.join(SOURCE, ".venv", "bin", "python")
MPIRUN = "mpirun.openmpi"
RUN, SECRET = "hvdmpi-1", "s3cret-of-the-run"


class Listener:
    """A TCP server on 127.0.0.1 (addr "host:port") serving each connection on a thread
    of its own with self._serve(conn), until close()."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.addr = "127.0.0.1:%d" % self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def close(self):
        self.sock.close()


class FakeStore(Listener):
    """ddpbench's store as the bootstrap uses it (HELLO, SET, GET, WAIT; ddpb_store.py's
    client side); HELLO with another run or secret is refused."""

    def __init__(self):
        self.data, self.cond = {}, threading.Condition()
        super().__init__()

    @staticmethod
    def _recv(conn, n):
        out = b""
        while len(out) < n:
            chunk = conn.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return out

    @staticmethod
    def _str(body, at):
        (n,) = struct.unpack_from("<I", body, at)
        return body[at + 4:at + 4 + n], at + 4 + n

    def _wait_for(self, keys, timeout_ms):
        with self.cond:
            return self.cond.wait_for(lambda: all(k in self.data for k in keys),
                                      timeout_ms / 1000.0)

    def _reply(self, body):
        op = body[0]
        if op == ddpb_store.OP_HELLO:
            run, at = self._str(body, 7)
            secret, _ = self._str(body, at)
            ok = run.decode() == RUN and secret.decode() == SECRET
            return b"\0" if ok else b"\4" + struct.pack("<I", 4) + b"auth"
        if op == ddpb_store.OP_SET:
            key, at = self._str(body, 1)
            value, _ = self._str(body, at)
            with self.cond:
                self.data[key] = value
                self.cond.notify_all()
            return b"\0"
        if op == ddpb_store.OP_GET:
            key, at = self._str(body, 1)
            (timeout_ms,) = struct.unpack_from("<I", body, at)
            if not self._wait_for([key], timeout_ms):
                return b"\1" + struct.pack("<I", 7) + b"timeout"
            return b"\0" + struct.pack("<I", len(self.data[key])) + self.data[key]
        if op == ddpb_store.OP_WAIT:
            (n,) = struct.unpack_from("<I", body, 1)
            keys, at = [], 5
            for _ in range(n):
                key, at = self._str(body, at)
                keys.append(key)
            (timeout_ms,) = struct.unpack_from("<I", body, at)
            ok = self._wait_for(keys, timeout_ms)
            return b"\0" if ok else b"\1" + struct.pack("<I", 7) + b"timeout"
        return b"\3" + struct.pack("<I", 8) + b"bad op %d" % op

    def _serve(self, conn):
        with conn:
            try:
                while True:
                    (n,) = struct.unpack("<I", self._recv(conn, 4))
                    reply = self._reply(self._recv(conn, n))
                    conn.sendall(struct.pack("<I", len(reply)) + reply)
            except (ConnectionError, OSError):
                return


class FakeChannel(Listener):
    """The daemon's report channel: every connection's lines, in order, by connection."""

    def __init__(self):
        self.conns, self.lock = [], threading.Lock()
        super().__init__()

    def _serve(self, conn):
        lines = []
        with self.lock:
            self.conns.append(lines)
        with conn, conn.makefile("r", encoding="utf-8") as f:
            for line in f:
                lines.append(json.loads(line))
            lines.append("EOF")

    def by_rank(self):
        """{rank: [lines after the channel line]}, checking each connection's first line."""
        out = {}
        with self.lock:
            conns = [list(c) for c in self.conns]
        for lines in conns:
            check(lines and isinstance(lines[0], dict) and set(lines[0]) == {"channel"},
                  lines[:2])
            ch = lines[0]["channel"]
            check(ch["run"] == RUN and ch["secret"] == SECRET and ch["pid"] > 0
                  and ch["host"] == socket.gethostname(), ch)
            check(ch["rank"] not in out, f"rank {ch['rank']} opened two channels")
            check(lines[-1] == "EOF", f"rank {ch['rank']}'s channel is still open")
            body = lines[1:-1]
            check(all(x["rank"] == ch["rank"] for x in body), (ch, body[:3]))
            if body and body[0]["type"] == "hello":  # the exec kept mpirun's process
                check(body[0]["pid"] == ch["pid"], (ch, body[0]))
            out[ch["rank"]] = body
        return out


def needs_mpi_horovod():
    if not shutil.which(MPIRUN):
        raise Skip(f"{MPIRUN} is missing: install openmpi-bin (deploy/install-deps.sh)")
    probe = subprocess.run([VENV_PY, "-c", "import horovod.torch as h; "
                            "print(h.mpi_built(), h.gloo_built())"],
                           capture_output=True, text=True, timeout=120)
    # CI runs after deploy/setup-venv.sh: a Horovod without MPI there is a failure
    check(probe.returncode == 0 and probe.stdout.split() == ["True", "True"],
          f"{VENV_PY}'s Horovod lacks MPI or Gloo ({probe.stdout.strip()} "
          f"{probe.stderr.strip()[-300:]}): remake .venv with deploy/setup-venv.sh")


def mpirun(spec, np_, world=None, engine=None, script=None, timeout=300):
    """np_ ranks of ddpb_launch.py under mpirun with the contract's environment (no
    DDPB_RANK; DDPB_CPU_MAP pins rank r to CPU r mod the CPU count); (completed process,
    {rank: report lines}, the store's keys, {rank: its DDPB_LOG_DIR/rank<r>.log})."""
    store, chan = FakeStore(), FakeChannel()
    tmp = tempfile.mkdtemp(prefix="ddpb-hvdmpi-")
    try:
        with open(os.path.join(tmp, "spec.json"), "w") as f:
            json.dump(spec, f)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("DDPB_", "OMPI_", "PMI_", "SLURM_", "HOROVOD_"))
               and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
        env.update({"DDPB_RUN": RUN, "DDPB_WORLD_SIZE": str(world or np_),
                    "DDPB_STORE": store.addr, "DDPB_SECRET": SECRET,
                    "DDPB_SPEC": os.path.join(tmp, "spec.json"), "DDPB_HOST": "127.0.0.1",
                    "DDPB_LAUNCHER": "mpirun", "DDPB_REPORT": chan.addr,
                    "DDPB_LOG_DIR": tmp,
                    "DDPB_CPU_MAP": ";".join(str(r % os.cpu_count()) for r in range(np_))})
        if engine:
            env["DDPB_ENGINE"] = engine
        if script:
            path = os.path.join(tmp, "rank.py")
            with open(path, "w") as f:
                f.write(script)
            env["DDPB_SCRIPT"] = path
        p = subprocess.run([MPIRUN, "--allow-run-as-root", "--oversubscribe", "--bind-to",
                            "none", "-np", str(np_), VENV_PY,
                            os.path.join(ENGINES_DIR, "ddpb_launch.py")],
                           env=env, capture_output=True, text=True, timeout=timeout)
        chan.close()
        # the channel readers end at each connection's EOF, which the ranks' exit gave
        for _ in range(100):
            with chan.lock:
                if all(c and c[-1] == "EOF" for c in chan.conns):
                    break
            threading.Event().wait(0.05)
        logs = {}
        for name in os.listdir(tmp):
            if re.fullmatch(r"rank\d+\.log", name):
                with open(os.path.join(tmp, name)) as f:
                    logs[int(name[4:-4])] = f.read()
        return p, chan.by_rank(), set(store.data), logs
    finally:
        store.close()
        shutil.rmtree(tmp, ignore_errors=True)


def c_launcher_table():
    """worker/store/rendezvous.c's rendezvous_launchers as {launcher: (rank vars, local
    vars, size vars)}, NULLs left out."""
    text = open(os.path.join(SOURCE, "worker", "store", "rendezvous.c")).read()
    body = re.search(r"rendezvous_launchers\[\] = \{(.*?)\n\};", text, re.S).group(1)
    out = {}
    for m in re.finditer(r'\{"(\w+)",\s*(\{[^}]*\}),\s*(\{[^}]*\}),\s*(\{[^}]*\})\}', body):
        out[m.group(1)] = tuple(tuple(re.findall(r'"(\w+)"', m.group(i))) for i in (2, 3, 4))
    return out


def test_identity_reads_each_launcher():
    """The rank is DDPB_RANK when set, else the variables of the launcher DDPB_LAUNCHER
    names, the same table as the C worker's (worker/store/rendezvous.c): OpenMPI's or
    MPICH hydra's under mpirun, Slurm's under srun, never a Slurm variable a daemon inside
    an allocation handed down to a rank it forked; without a launcher, RANK; the launcher's
    rank count, which ddpb_launch checks against the run's."""
    import ddpb_launch
    check(c_launcher_table() == ddpb_report.LAUNCHER_IDENTITY,
          (c_launcher_table(), ddpb_report.LAUNCHER_IDENTITY))
    cases = [
        ({"DDPB_RANK": "3", "DDPB_LOCAL_RANK": "1", "DDPB_WORLD_SIZE": "4",
          "SLURM_PROCID": "0", "DDPB_LAUNCHER": "ddpbench"}, (3, 1, 4)),
        ({"DDPB_LAUNCHER": "mpirun", "OMPI_COMM_WORLD_RANK": "1",
          "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
          "DDPB_WORLD_SIZE": "2", "RANK": "0", "SLURM_PROCID": "7"}, (1, 1, 2)),
        ({"DDPB_LAUNCHER": "mpirun", "PMI_RANK": "2", "MPI_LOCALRANKID": "0",
          "PMI_SIZE": "3"}, (2, 0, 3)),
        ({"DDPB_LAUNCHER": "srun", "SLURM_PROCID": "5", "SLURM_LOCALID": "1",
          "SLURM_STEP_NUM_TASKS": "6", "DDPB_WORLD_SIZE": "6"}, (5, 1, 6)),
        ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "SLURM_PROCID": "0"}, (1, 1, 2)),
        ({}, (0, 0, 1)),
    ]
    for env, want in cases:
        check(ddpb_report.identity(env) == want, (env, ddpb_report.identity(env), want))
    for env, part in (({"DDPB_LAUNCHER": "srun", "OMPI_COMM_WORLD_RANK": "1"},
                       "SLURM_PROCID is not set (launcher srun"),
                      ({"DDPB_LAUNCHER": "pbs"}, "DDPB_LAUNCHER='pbs'")):
        try:
            ddpb_report.identity(env)
            check(False, f"{env} gave a rank")
        except ValueError as ex:
            check(part in str(ex), ex)
    env = {"DDPB_LAUNCHER": "mpirun", "OMPI_COMM_WORLD_RANK": "1",
           "OMPI_COMM_WORLD_SIZE": "2", "DDPB_WORLD_SIZE": "2"}
    ddpb_launch.adopt_identity(env, *ddpb_report.identity(env))
    check(env["RANK"] == env["DDPB_RANK"] == "1" and env["WORLD_SIZE"] == "2"
          and env["LOCAL_RANK"] == "0", env)
    try:
        ddpb_launch.adopt_identity({"DDPB_WORLD_SIZE": "3"}, 0, 0, 2)
        check(False, "a launcher that started 2 ranks of 3 was accepted")
    except ValueError as ex:
        check("started 2 ranks" in str(ex) and "world_size is 3" in str(ex), ex)


def test_rank_of_another_launcher_uses_its_own_host():
    """Under mpirun or srun DDPB_HOST and DDPB_NODE_NAME are the leader's (the launcher's
    one environment): the rank listens on its own address towards the store instead, as
    the C worker does, and groups by it; a rank the daemon forked keeps the daemon's. A
    log folder missing on the rank's node (no shared file system) leaves its output with
    the launcher rather than failing it."""
    import ddpb_launch
    env = {"DDPB_LAUNCHER": "mpirun", "DDPB_STORE": "127.0.0.1:9",
           "DDPB_HOST": "10.99.0.1", "DDPB_NODE_NAME": "leader"}
    ddpb_launch.own_host(env)
    check(env["DDPB_HOST"] == env["DDPB_NODE_NAME"] == "127.0.0.1", env)
    env = {"DDPB_LAUNCHER": "ddpbench", "DDPB_STORE": "127.0.0.1:9",
           "DDPB_HOST": "10.99.0.1", "DDPB_NODE_NAME": "n1"}
    ddpb_launch.own_host(env)
    check(env["DDPB_HOST"] == "10.99.0.1" and env["DDPB_NODE_NAME"] == "n1", env)
    check(ddpb_launch.map_entry({"DDPB_CPU_MAP": "0,1;2"}, "DDPB_CPU_MAP", 1) == "2" and
          ddpb_launch.map_entry({"DDPB_CPU_MAP": "0"}, "DDPB_CPU_MAP", 1) == "" and
          ddpb_launch.map_entry({}, "DDPB_CPU_MAP", 0) == "", "map_entry")
    out1, out2 = os.fstat(1), os.fstat(2)
    ddpb_launch.own_log({"DDPB_LOG_DIR": "/nonexistent/run-9"}, 1)
    check((os.fstat(1).st_ino, os.fstat(2).st_ino) == (out1.st_ino, out2.st_ino),
          "stdout or stderr moved for a missing log folder")


ALLREDUCE_SCRIPT = """
import os, time
import torch
import ddpb_report, ddpb_train
import engine_horovod as eh
import horovod.torch as hvd
rep = ddpb_report.start({"torch": torch.__version__})
spec = ddpb_train.spec_load()
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
assert rank == int(os.environ["OMPI_COMM_WORLD_RANK"]), "RANK is not mpirun's rank"
assert os.environ["LOCAL_RANK"] == os.environ["OMPI_COMM_WORLD_LOCAL_RANK"]
server = eh.rendezvous(spec, rank, world)
facts = eh.init(rank, world)
rep.env({"facts": facts, "peers": os.environ["DDPB_PEERS"],
         "cpus": ",".join(map(str, sorted(os.sched_getaffinity(0))))})
print("rank", rank, "logs here", flush=True)
t0 = time.perf_counter()
got = hvd.allreduce(torch.tensor([float(rank + 1)] * 4), op=hvd.Sum, name="t").tolist()
rep.step(step=0, loss=got[0], samples=4, step_ms=(time.perf_counter() - t0) * 1000)
hvd.shutdown()
if server is not None:
    server.stop()
rep.done()
"""


def allreduce_under_mpirun(backend):
    needs_mpi_horovod()
    spec = {"engine": "script", "backend": backend, "launcher": "mpirun", "timeout_s": 120}
    p, ranks, keys, logs = mpirun(spec, 2, engine="script", script=ALLREDUCE_SCRIPT)
    check(p.returncode == 0, (p.returncode, p.stdout[-2000:], p.stderr[-3000:], logs))
    check(sorted(ranks) == [0, 1], (sorted(ranks), p.stderr[-2000:]))
    check({b"engine/addr/0", b"engine/addr/1"} <= keys, keys)
    for rank, lines in ranks.items():
        types = [x["type"] for x in lines if x["type"] != "heartbeat"]
        # hello first; env lines (the python version when engine_horovod's import started
        # reporting, the torch version, the script's facts); its step; done
        check(types[0] == "hello" and types[-2:] == ["step", "done"]
              and set(types[1:-2]) == {"env"}, (rank, types))
        env = [x for x in lines if x["type"] == "env"][-1]["env"]
        check(env["cpus"] == str(rank % os.cpu_count()), (rank, env))  # DDPB_CPU_MAP
        check(f"rank {rank} logs here" in logs[rank], (rank, logs))  # its own log
        check("logs here" not in p.stdout, p.stdout[-500:])
        facts = json.loads(env["facts"])
        step = [x for x in lines if x["type"] == "step"][0]
        check(step["loss"] == 3.0, (rank, step))  # 1 + 2: both ranks' values summed
        yield rank, facts


def test_horovod_mpi_allreduce_through_the_bootstrap():
    """backend mpi: two ranks mpirun started reach Horovod's MPI controller through the
    bootstrap and the adapter's rendezvous and init; the allreduce sums; each rank's
    channel carries its lines; the MPI library is Debian's OpenMPI."""
    for rank, facts in allreduce_under_mpirun("mpi"):
        check(facts["controller"] == "mpi" and facts["cpu_operations"] == "mpi", facts)
        check(facts["mpi"] == "openmpi" and facts["mpi_library"].startswith("Open MPI v4"),
              facts)


def test_horovod_gloo_rendezvous_under_mpirun():
    """backend tcp under mpirun: Horovod's Gloo rendezvous still runs through the store
    and ports the bootstrap agreed (rank 0's HTTP server, published in the store)."""
    for rank, facts in allreduce_under_mpirun("tcp"):
        check(facts["controller"] == "gloo" and "mpi_library" not in facts, facts)


def test_horovod_adapter_trains_over_mpi():
    """engine horovod, backend mpi, 2 ranks of mnist-cnn for 4 steps on synthetic data:
    every rank reports its steps and done over its channel; the stored framework
    configuration says controller mpi and the MPI library."""
    needs_mpi_horovod()
    spec = {"workload": "train", "engine": "horovod", "strategy": "horovod",
            "backend": "mpi", "launcher": "mpirun", "model": "mnist-cnn", "batch_size": 16,
            "steps": 4, "warmup_steps": 1, "timeout_s": 120,
            "dataset": {"name": "synthetic", "samples": 256, "classes": 10},
            "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9}}
    p, ranks, _, _ = mpirun(spec, 2)  # no DDPB_ENGINE: the bootstrap reads the spec's
    check(p.returncode == 0, (p.returncode, p.stdout[-2000:], p.stderr[-3000:]))
    check(sorted(ranks) == [0, 1], sorted(ranks))
    for rank, lines in ranks.items():
        steps = [x for x in lines if x["type"] == "step"]
        check([s["step"] for s in steps] == [0, 1, 2, 3], (rank, steps))
        check(all(s["step_ms"] > 0 and s["loss"] > 0 for s in steps), steps)
        check(lines[-1]["type"] == "done", (rank, lines[-1]))
        env = [x for x in lines if x["type"] == "env"][-1]["env"]
        config = json.loads(env["framework_config"])
        check(config["controller"] == "mpi" and config["cpu_operations"] == "mpi", config)
        check(config["mpi_library"].startswith("Open MPI"), config)


def test_bootstrap_failures_reach_the_channel():
    """An unknown engine under mpirun: the rank's channel carries its error naming it and
    no done (the daemon fails the run naming the rank); a launcher that started another
    number of ranks than the run has is named before anything waits for the missing."""
    if not shutil.which(MPIRUN):
        raise Skip(f"{MPIRUN} is missing: install openmpi-bin (deploy/install-deps.sh)")
    p, ranks, _, _ = mpirun({"engine": "nope"}, 1, engine="nope", timeout=120)
    check(p.returncode != 0 and list(ranks) == [0], (p.returncode, ranks))
    check([x["type"] for x in ranks[0]] == ["error"], ranks[0])
    check("unknown engine 'nope'" in ranks[0][0]["message"], ranks[0])
    p, ranks, keys, _ = mpirun({"engine": "script"}, 2, world=3, engine="script",
                            script="raise SystemExit(3)", timeout=120)
    check(p.returncode != 0 and sorted(ranks) == [0, 1], (p.returncode, ranks))
    for lines in ranks.values():
        check(lines[0]["type"] == "error" and "started 2 ranks" in lines[0]["message"]
              and "world_size is 3" in lines[0]["message"], lines)
    check(not keys, f"a rank of a wrong-sized launch waited in the store: {keys}")


REST_TRAIN = {"workload": "train", "engine": "horovod", "strategy": "horovod",
              "launcher": "mpirun", "mpi": "openmpi", "world_size": 2, "model": "mnist-cnn",
              "batch_size": 32, "steps": 6, "warmup_steps": 1,
              "dataset": {"name": "fashion-mnist", "samples": 512},
              "optimizer": {"type": "sgd", "lr": 0.05, "momentum": 0.9}}


REST = SharedDaemon(lambda: Daemon(cpu_slots=2))


def rest_daemon():
    """The daemon the REST cases share (SharedDaemon), its engine probe finished (a submit
    naming a framework waits for it, which on a loaded machine can take longer than one
    HTTP request)."""
    return REST.get()


def check_horovod_run(d, run_id, controller):
    """A succeeded run of 2 ranks that mpirun started: 6 steps per rank stored, epochs,
    memory and usage of each rank, and the framework configuration naming the controller
    (and for mpi, OpenMPI)."""
    run = d.get(f"/v1/runs/{run_id}")
    check(run["status"] == "succeeded", (run["status"], run["error"]))
    check(run["spec"]["launcher"] == "mpirun", run["spec"])
    steps = d.get(f"/v1/runs/{run_id}/steps?warmup=true")
    cols = steps["columns"]
    ranks = sorted({dict(zip(cols, r))["rank"] for r in steps["rows"]})
    check(len(steps["rows"]) == 12 and ranks == [0, 1], (len(steps["rows"]), ranks))
    check(all(dict(zip(cols, r))["step_ms"] > 0 for r in steps["rows"]), steps["rows"][:2])
    check(sorted(m["rank"] for m in run["memory"]) == [0, 1], run["memory"])
    check(sorted({u["rank"] for u in run["usage"]}) == [0, 1], run["usage"])
    env = {e["rank"]: e["env"] for e in run["env"]}
    check(sorted(env) == [0, 1], sorted(env))
    for rank, values in env.items():
        config = json.loads(values["framework_config"])
        check(config["controller"] == controller, (rank, config))
        if controller == "mpi":
            check(config["mpi"] == "openmpi" and config["mpi_library"].startswith("Open MPI"),
                  config)
    return run


def test_rest_horovod_trains_over_mpi_under_mpirun():
    """Through the REST API: engine horovod, backend mpi, launcher mpirun, 2 ranks of
    mnist-cnn for 6 steps: the run succeeds with every rank's steps, memory, usage and
    env stored (through the report channel), over Horovod's MPI controller on OpenMPI."""
    needs_mpi_horovod()
    d = rest_daemon()
    exp = d.run_succeeds(dict(REST_TRAIN, backend="mpi"), timeout=300, runs=1)
    check_horovod_run(d, exp["runs"][0]["id"], "mpi")


def test_rest_sweep_compares_gloo_and_mpi():
    """"sweep": {"backend": ["tcp", "mpi"]} with launcher mpirun runs both points, one over
    Gloo and one over MPI, and the results group by backend."""
    needs_mpi_horovod()
    d = rest_daemon()
    exp = d.run_succeeds(dict(REST_TRAIN, sweep={"backend": ["tcp", "mpi"]}),
                         timeout=600, runs=2)
    by = {d.get(f"/v1/runs/{r['id']}")["spec"]["backend"]: r["id"] for r in exp["runs"]}
    check(sorted(by) == ["mpi", "tcp"], by)
    check_horovod_run(d, by["tcp"], "gloo")
    check_horovod_run(d, by["mpi"], "mpi")
    res = d.get(f"/v1/experiments/{exp['id']}/results?group_by=backend")
    check(sorted(r["backend"] for r in res["rows"]) == ["mpi", "tcp"], res["rows"])


def test_rest_gloo_under_mpich_hydra():
    """Horovod over Gloo under MPICH's launcher (mpi mpich): the ranks find themselves by
    hydra's PMI_RANK and train; its MPI controller there is refused at submit naming mpi
    (Horovod links OpenMPI: test_engines.py)."""
    needs_mpi_horovod()
    if not shutil.which("mpiexec.mpich"):
        raise Skip("mpiexec.mpich is missing: install mpich (deploy/install-deps.sh)")
    d = rest_daemon()
    exp = d.run_succeeds(dict(REST_TRAIN, backend="tcp", mpi="mpich"), timeout=300, runs=1)
    run = check_horovod_run(d, exp["runs"][0]["id"], "gloo")
    check(run["spec"]["mpi"] == "mpich", run["spec"])


def test_rest_supervision_of_python_ranks_under_mpirun():
    """The launcher checks main runs on the C worker (launcher_checks.py), on Horovod's
    Python ranks over MPI under mpirun: a killed rank fails the run naming it, cancel
    cancels it, a frozen rank is caught by its heartbeat, and nothing is left behind."""
    import launcher_checks
    needs_mpi_horovod()
    fields = {"launcher": "mpirun", "mpi": "openmpi", "engine": "horovod",
              "strategy": "horovod", "backend": "mpi"}
    d = rest_daemon()
    for fn in (launcher_checks.check_killed_rank, launcher_checks.check_cancel,
               launcher_checks.check_frozen_rank):
        fn(d, fields)
        d.wait_slots_free(2)


def test_netlab_horovod_mpi_across_hosts():
    """Horovod's MPI controller across two netlab hosts (network namespaces, root only):
    launcher mpirun with nodes 2 starts a rank on each host without ssh (the leader's
    --mpi-agent), each listens on its own host's address, and the run trains with every
    rank's figures stored; nothing of MPI is left in either namespace."""
    import test_netlab as lab
    needs_mpi_horovod()
    with lab.two_hosts("1gbe") as (state, _, leader):
        with open(os.path.join(state, "token")) as f:
            token = f.read().strip()
        deadline = time.time() + 300  # both nodes' engine probes, the follower's by sync
        while True:
            nodes = lab.http(lab.H0, "GET", f"{leader}/v1/engines")["nodes"]
            if len(nodes) == 2 and all(n.get("engines") and not n.get("probing")
                                       for n in nodes):
                break
            check(time.time() < deadline, f"engine probes: {nodes}")
            time.sleep(1)
        spec = dict(REST_TRAIN, backend="mpi", nodes=2, steps=4, timeout_s=180,
                    dataset={"name": "synthetic", "samples": 256})
        exp = lab.wait_experiment(leader, lab.http(lab.H0, "POST", f"{leader}/v1/experiments",
                                                   spec, token=token)["id"], timeout=240)
        run = lab.http(lab.H0, "GET", f"{leader}/v1/runs/{exp['runs'][0]['id']}")
        check(run["status"] == "succeeded", (run["status"], run["error"]))
        check({k["rank"]: k["node"] for k in run["ranks"]} == {0: lab.H0, 1: lab.H1},
              run["ranks"])
        configs = {e["rank"]: json.loads(e["env"]["framework_config"]) for e in run["env"]}
        check(sorted(configs) == [0, 1] and all(c["controller"] == "mpi" and
                                                c["mpi"] == "openmpi" for c in configs.values()),
              configs)
        steps = lab.http(lab.H0, "GET", f"{leader}/v1/runs/{run['id']}/steps?warmup=true")
        check(len(steps["rows"]) == 8, steps["rows"])
        check(not lab.mpi_left(), f"left after the run: {lab.mpi_left(0)}")


if __name__ == "__main__":
    try:
        rc = run_cases([test_identity_reads_each_launcher,
                        test_rank_of_another_launcher_uses_its_own_host,
                        test_horovod_mpi_allreduce_through_the_bootstrap,
                        test_horovod_gloo_rendezvous_under_mpirun,
                        test_horovod_adapter_trains_over_mpi,
                        test_bootstrap_failures_reach_the_channel,
                        test_rest_horovod_trains_over_mpi_under_mpirun,
                        test_rest_sweep_compares_gloo_and_mpi,
                        test_rest_gloo_under_mpich_hydra,
                        test_rest_supervision_of_python_ranks_under_mpirun,
                        test_netlab_horovod_mpi_across_hosts])
    finally:
        REST.close()
    sys.exit(rc)
