#!/usr/bin/env python3
"""ddpb_launch: the program the daemon spawns for each rank of a framework engine
(daemon/launcher.c); it does what torchrun, horovodrun or a TF_CONFIG script would, then
execs the engine's adapter with the framework's environment.

0. Knows its rank: the daemon's DDPB_RANK when the daemon forked it (launcher ddpbench),
   else that of the launcher DDPB_LAUNCHER names (OMPI_COMM_WORLD_RANK under OpenMPI's
   mpirun, PMI_RANK under MPICH's, SLURM_PROCID under srun: ddpb_report.identity), and
   hands it on as DDPB_RANK, RANK, WORLD_SIZE and LOCAL_RANK, so what follows and the
   framework read one answer. Its report lines go to fd 3, or to the report channel
   DDPB_REPORT names when mpirun or srun started it (ddpb_report); its stdout and stderr
   then go to DDPB_LOG_DIR/rank<N>.log, where the daemon serves each rank's log from, as
   the C worker's do (the launcher would interleave every rank's into one).
   Under another launcher it listens on its own host's address towards the store, not
   the leader's DDPB_HOST (own_host), as the C worker does.
1. Pins itself to the daemon's CPUs (DDPB_CPUS, or its entry of DDPB_CPU_MAP under
   mpirun) and sets the framework's thread count.
2. Agrees peers through ddpbench's store (engines/ddpb_store.py): every rank binds a free
   port on its DDPB_HOST, publishes "host:port node" under engine/addr/<rank>, and waits
   for all the others; rank 0's address is MASTER_ADDR/MASTER_PORT (torch), the list is
   TF_CONFIG's cluster (TensorFlow); LOCAL_WORLD_SIZE counts the ranks on this node.
3. execs engines/engine_<engine>.py (or the adapter of the spec's framework, FRONT_ENDS:
   horovod's keras is engine_horovod_keras.py), or for engine "script" the user's program the daemon
   resolved inside its --scripts-dir (DDPB_SCRIPT), with the same pid: the daemon's pidfd,
   signals and fd 3 stay valid, and the framework reads a complete environment from its
   first line. Under mpirun the exec keeps the process the MPI launcher started, so the
   framework's MPI_Init finds the launcher's environment (Horovod's MPI controller).

Decision: ports are picked by the rank that will listen on them and released just before
exec (the window torchrun has too); a run whose port was taken in between fails at
init_process_group with the address in its error, which the daemon stores. A failure here
is reported on fd 3 as an error event naming the store key or the engine, so the run fails
with a reason instead of a timeout."""
import json
import os
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ddpb_report  # noqa: E402
import ddpb_store  # noqa: E402
import ddpb_vocab  # noqa: E402

ENGINES = ddpb_vocab.ADAPTERS  # engine: the adapter each rank runs
# (engine, spec framework): the adapter of an engine's other front end (issue 33); an
# engine's own front end (framework auto, or its default) is ENGINES'
FRONT_ENDS = {("horovod", "keras"): "engine_horovod_keras.py"}


def free_port(host):
    """A port the kernel says is free on host (released again: see the module's decision)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def rendezvous(env, spec):
    """{MASTER_ADDR, MASTER_PORT, TF_CONFIG, LOCAL_WORLD_SIZE, DDPB_PEERS (host:port per
    rank), DDPB_PEER_NODES (node per rank)} agreed through the store; every rank returns
    the same peers."""
    rank, world = int(env["DDPB_RANK"]), int(env["DDPB_WORLD_SIZE"])
    host = env.get("DDPB_HOST", "127.0.0.1")
    node = env.get("DDPB_NODE_NAME") or socket.gethostname()
    timeout_ms = int(spec.get("timeout_s", 600)) * 1000
    st = ddpb_store.Store(env["DDPB_STORE"], env["DDPB_RUN"], env["DDPB_SECRET"], rank)
    # an elastic run's generation N (restart mode) agrees afresh, under g<N>/
    gen = f"g{env['DDPB_ELASTIC_GEN']}/" if env.get("DDPB_ELASTIC_GEN") else ""
    try:
        st.set(f"{gen}engine/addr/{rank}", f"{host}:{free_port(host)} {node}")
        keys = [f"{gen}engine/addr/{r}" for r in range(world)]
        st.wait(keys, timeout_ms)
        peers = [st.get(k, timeout_ms).decode().split(" ", 1) for k in keys]
    finally:
        st.close()
    addrs = [p[0] for p in peers]
    m_host, _, m_port = addrs[0].rpartition(":")
    cluster = {"cluster": {"worker": addrs}, "task": {"type": "worker", "index": rank}}
    return {"MASTER_ADDR": m_host, "MASTER_PORT": m_port,
            "TF_CONFIG": json.dumps(cluster, separators=(",", ":")),
            "LOCAL_WORLD_SIZE": str(sum(1 for p in peers if p[1] == node)),
            "DDPB_PEERS": ",".join(addrs), "DDPB_PEER_NODES": ",".join(p[1] for p in peers)}


def map_entry(env, var, rank):
    """Entry rank of a ';'-separated map of every rank (DDPB_CPU_MAP), or ""."""
    items = env[var].split(";") if env.get(var) else []
    return items[rank] if rank < len(items) else ""


def route_addr(addr):
    """The local address the kernel would send from to reach addr ("host:port"): a
    connected UDP socket's own address, so nothing is sent (common/net.c net_route_addr)."""
    host, _, port = addr.rpartition(":")
    host = host.strip("[]")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                       socket.SOCK_DGRAM) as s:
        s.connect((host, int(port)))
        return s.getsockname()[0]


def own_host(env):
    """Under another launcher the environment is the leader's wherever the rank runs, so
    DDPB_HOST and DDPB_NODE_NAME name the leader: as the C worker does, the rank listens
    on its own interface towards the store (which every peer reaches too), and that
    address is its node for the peers' grouping (LOCAL_WORLD_SIZE, Horovod's slots)."""
    if env.get("DDPB_LAUNCHER", "ddpbench") != "ddpbench" and env.get("DDPB_STORE"):
        env["DDPB_HOST"] = env["DDPB_NODE_NAME"] = route_addr(env["DDPB_STORE"])


def pin(env, rank):
    """The daemon's CPU list (DDPB_CPUS, "0,1" or "2-3"), else this rank's entry of
    DDPB_CPU_MAP ("0,1;2,3": a list per rank, the scheduler's choice for a launcher whose
    own binding is off); none: not pinned."""
    cpus = env.get("DDPB_CPUS") or map_entry(env, "DDPB_CPU_MAP", rank)
    if cpus:
        want = set()
        for part in cpus.split(","):
            lo, _, hi = part.partition("-")
            want.update(range(int(lo), int(hi or lo) + 1))
        os.sched_setaffinity(0, want)


def adopt_identity(env, rank, local, world):
    """Writes ddpb_report.identity's answer where the bootstrap and the frameworks read it
    (DDPB_RANK / DDPB_LOCAL_RANK / DDPB_WORLD_SIZE, RANK / LOCAL_RANK / WORLD_SIZE).
    ValueError when a launcher started another number of ranks than the run has: they
    would wait for peers that never come."""
    if int(env.get("DDPB_WORLD_SIZE", world)) != world:
        raise ValueError(f"the launcher started {world} ranks but the run's world_size is "
                         f"{env['DDPB_WORLD_SIZE']}")
    env.update({"DDPB_RANK": str(rank), "DDPB_LOCAL_RANK": str(local),
                "DDPB_WORLD_SIZE": str(world), "RANK": str(rank), "LOCAL_RANK": str(local),
                "WORLD_SIZE": str(world)})


def own_log(env, rank):
    """stdout and stderr to DDPB_LOG_DIR/rank<rank>.log when the daemon names a log folder
    (a rank it did not fork); the exec keeps them. DDPB_LOG_DIR is the leader's run
    folder: on another node without a shared file system it does not exist, and the rank
    keeps the launcher's output (mpirun forwards it to the run's launcher.log)."""
    if not env.get("DDPB_LOG_DIR"):
        return
    path = os.path.join(env["DDPB_LOG_DIR"], f"rank{rank}.log")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except FileNotFoundError:
        print(f"rank {rank}: no {env['DDPB_LOG_DIR']} on this node: its log stays in the "
              f"launcher's", file=sys.stderr, flush=True)
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def main():
    env = dict(os.environ)
    engine = env.get("DDPB_ENGINE", "")
    rank = 0
    try:
        rank, local, world = ddpb_report.identity(env)
        own_log(env, rank)
        adopt_identity(env, rank, local, world)
        own_host(env)
        with open(env["DDPB_SPEC"]) as f:
            spec = json.load(f)
        if not engine:  # mpirun's and srun's environment is the run's, not a rank's
            engine = env["DDPB_ENGINE"] = str(spec.get("engine", ""))
        if engine == "script":  # the daemon resolved it inside its --scripts-dir
            program = env.get("DDPB_SCRIPT")
            if not program:
                raise FileNotFoundError("engine script: this node's daemon resolved no script "
                                        "under its --scripts-dir (its log says why)")
        else:
            program = os.path.join(HERE, FRONT_ENDS.get((engine, spec.get("framework")),
                                                        ENGINES[engine]))
        if not os.path.exists(program):
            raise FileNotFoundError(f"engine {engine}: its program {program} is missing")
        pin(env, rank)
        threads = str(spec.get("threads", 1))
        env.update({"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
                    "PYTHONUNBUFFERED": "1",
                    "TF_NUM_INTRAOP_THREADS": threads, "TF_NUM_INTEROP_THREADS": "1",
                    "TF_CPP_MIN_LOG_LEVEL": "1", "PYTHONPATH": HERE + (
                        ":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")})
        t0 = time.monotonic()
        if env.get("HOROVOD_ELASTIC") != "1":  # Horovod's elastic driver agrees its own
            env.update(rendezvous(env, spec))
        env["DDPB_RENDEZVOUS_MS"] = "%.1f" % ((time.monotonic() - t0) * 1000)
    except Exception as ex:  # reported, then the rank exits: the run fails naming it
        code = "timeout" if isinstance(ex, ddpb_store.StoreError) and ex.status == 1 else \
            "invalid" if isinstance(ex, (KeyError, FileNotFoundError, ValueError)) else "peer"
        what = f"unknown engine {engine!r}" if isinstance(ex, KeyError) else str(ex)
        return bootstrap_failed(env, rank, what, code)
    # a .py runs under this interpreter; anything else is executed as it is (argv only, no
    # shell: a script engine's file must be executable then)
    argv = [sys.executable, program] if program.endswith(".py") else [program]
    try:
        os.execve(argv[0], argv, env)
    except OSError as ex:  # not executable, a missing interpreter: an error event, no traceback
        return bootstrap_failed(env, rank, f"cannot execute {os.path.basename(program)}: "
                                f"{ex.strerror}", "invalid")


def bootstrap_failed(env, rank, what, code):
    """Reports the bootstrap's failure as the rank's error event (the report protocol's
    error line), so the run fails naming it; returns the rank's exit status."""
    rep = ddpb_report.Reporter(rank, env.get("DDPB_WORLD_SIZE", "1"))
    rep.error(f"engine bootstrap: {what}", code=code, where="ddpb_launch.py:0")
    return 1


if __name__ == "__main__":
    sys.exit(main())
