"""ddpb_hvd_common: what Horovod's two adapters share, framework-free (no torch, no
TensorFlow imported here): the HOROVOD_* environment of the spec's controller, Gloo's
rendezvous through ddpbench's store (rank 0 starts Horovod's own RendezvousServer, as
horovodrun would, in a child process: see serve_rendezvous), and the check after hvd.init() that Horovod numbers the ranks as
ddpbench does. engine_horovod.py (horovod.torch) and engine_horovod_keras.py
(horovod.tensorflow.keras) pass their binding's module in.

Decision: one rendezvous for both front ends, so framework torch and keras differ only in
the training loop; a process horovodrun started (HOROVOD_RANK set, no DDPB_STORE: the
benches' own-launcher baseline) keeps horovodrun's environment."""
import os
import subprocess
import sys

import psutil

import ddpb_store
import probe


def iface_of(addr):
    """The network interface holding addr (HOROVOD_GLOO_IFACE)."""
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == addr for a in addrs):
            return name
    raise ValueError(f"no network interface has the address {addr} (DDPB_HOST)")


def slot_plan(nodes):
    """Horovod's SlotInfo per rank from the node each rank runs on (ranks contiguous)."""
    from horovod.runner.common.util.hosts import SlotInfo
    order = list(dict.fromkeys(nodes))
    plan = []
    for r, node in enumerate(nodes):
        local = [i for i, n in enumerate(nodes) if n == node]
        plan.append(SlotInfo(hostname=node, rank=r, local_rank=local.index(r),
                             cross_rank=order.index(node), size=len(nodes),
                             local_size=len(local), cross_size=len(order)))
    return plan


# backend: (HOROVOD_CONTROLLER, HOROVOD_CPU_OPERATIONS)
CONTROLLERS = {"tcp": ("gloo", "gloo"), "mpi": ("mpi", "mpi")}


# Horovod's own defaults (horovod/common/operations.cc): what an elastic worker leaves unset
HOROVOD_DEFAULT_FUSION, HOROVOD_DEFAULT_CYCLE_MS = 128 << 20, 1.0


def controller_env(spec, elastic=False):
    """The HOROVOD_* every rank sets whatever the controller: the controller and CPU
    operations of the spec's backend, the fusion threshold and the cycle time.

    elastic: a worker of Horovod's elastic driver, which re-initializes Horovod at every
    reset. Horovod 0.28 (.venv) crashes there (SIGSEGV in hvd.init()) when both
    HOROVOD_FUSION_THRESHOLD and HOROVOD_CYCLE_TIME are set, either alone is fine: so a
    value equal to Horovod's default is left unset, and a spec that changes both is
    refused (ValueError naming the fields)."""
    controller, ops = CONTROLLERS[spec.get("backend", "tcp")]
    fusion, cycle = int(spec.get("fusion_mb", 64)) << 20, float(spec.get("cycle_ms", 1))
    env = {"HOROVOD_CONTROLLER": controller, "HOROVOD_CPU_OPERATIONS": ops,
           "HOROVOD_FUSION_THRESHOLD": str(fusion), "HOROVOD_CYCLE_TIME": str(cycle),
           # the spec's limit on an operation in which nothing moves is Gloo's timeout
           "HOROVOD_GLOO_TIMEOUT_SECONDS": str(int(spec.get("comm_timeout_s", 60)))}
    if not elastic:
        return env
    if fusion != HOROVOD_DEFAULT_FUSION and cycle != HOROVOD_DEFAULT_CYCLE_MS:
        raise ValueError("elastic: Horovod 0.28 crashes re-initializing with both fusion_mb "
                         "and cycle_ms set; keep fusion_mb 128 or cycle_ms 1")
    if fusion == HOROVOD_DEFAULT_FUSION:
        del env["HOROVOD_FUSION_THRESHOLD"]
    if cycle == HOROVOD_DEFAULT_CYCLE_MS:
        del env["HOROVOD_CYCLE_TIME"]
    return env


def rendezvous(spec, rank, world, mpi_built):
    """HOROVOD_* for this rank; rank 0 keeps the Gloo rendezvous server alive (returned).
    Backend mpi needs none: MPI_Init finds the world in mpirun's (or srun's) environment."""
    if os.environ.get("HOROVOD_RANK") and not os.environ.get("DDPB_STORE"):
        return None  # horovodrun's worker: its environment is complete
    os.environ.update(controller_env(spec))
    if spec.get("backend", "tcp") == "mpi":
        if not mpi_built():
            raise RuntimeError(probe.HOROVOD_NO_MPI)  # GET /v1/engines says so too
        return None
    nodes = os.environ["DDPB_PEER_NODES"].split(",")
    host = os.environ.get("DDPB_HOST", "127.0.0.1")
    plan = slot_plan(nodes)
    st = ddpb_store.Store(os.environ["DDPB_STORE"], os.environ["DDPB_RUN"],
                          os.environ["DDPB_SECRET"], rank)
    server = None
    try:
        if rank == 0:
            server = RendezvousProcess(nodes)
            st.set("engine/horovod", f"{host}:{server.port}")
        where = st.get("engine/horovod", int(spec.get("timeout_s", 600)) * 1000).decode()
    finally:
        st.close()
    r_host, _, r_port = where.rpartition(":")
    me = plan[rank]
    os.environ.update({
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": r_host, "HOROVOD_GLOO_RENDEZVOUS_PORT": r_port,
        "HOROVOD_GLOO_IFACE": iface_of(host), "HOROVOD_HOSTNAME": me.hostname,
        "HOROVOD_RANK": str(me.rank), "HOROVOD_SIZE": str(me.size),
        "HOROVOD_LOCAL_RANK": str(me.local_rank), "HOROVOD_LOCAL_SIZE": str(me.local_size),
        "HOROVOD_CROSS_RANK": str(me.cross_rank), "HOROVOD_CROSS_SIZE": str(me.cross_size)})
    return server


class RendezvousProcess:
    """Horovod's RendezvousServer (the HTTP store Gloo's contexts meet through) in a child
    process of rank 0, serving the slot plan of nodes until stop() or rank 0's end (the
    child exits when its stdin, rank 0's pipe, closes: a killed rank 0 leaves none behind).

    Why not a thread of rank 0, as horovodrun's own launcher has it in its driver: Horovod's
    torch binding waits for a collective (horovod_torch_wait_and_clear, every synchronize)
    in a C++ loop that holds the GIL, so while rank 0 waits in its first broadcast, a server
    thread of its own cannot answer a peer still building its Gloo contexts: both wait until
    Gloo's timeout. The heartbeat thread starves the same way; a process of its own has
    neither problem."""

    def __init__(self, nodes):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--serve", ",".join(nodes)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if not line.isdigit():
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("Horovod's rendezvous server did not start "
                               f"(exit status {self.proc.poll()}): {line!r}")
        self.port = int(line)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()  # the child's cue to stop serving
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def serve_rendezvous(nodes):
    """The child of RendezvousProcess: serves until its stdin closes; prints the port."""
    from horovod.runner.http.http_server import RendezvousServer
    server = RendezvousServer(verbose=0)
    port = server.start()
    server.init(slot_plan(nodes))
    print(port, flush=True)
    sys.stdin.read()  # returns at EOF: rank 0 stopped it, or rank 0 is gone
    server.stop()


def init(hvd, rank, world):
    """hvd.init() and the check that Horovod runs the controller asked for, with
    ddpbench's rank and size (a launcher that numbered its ranks otherwise would mix up
    the shards and the reports); the controller's facts for the framework configuration."""
    hvd.init()
    want = os.environ.get("HOROVOD_CONTROLLER", "gloo")  # horovodrun --gloo may leave it
    if want == "mpi" and not hvd.mpi_enabled():
        raise RuntimeError("HOROVOD_CONTROLLER=mpi but Horovod did not start MPI")
    if want == "gloo" and not hvd.gloo_enabled():
        raise RuntimeError("HOROVOD_CONTROLLER=gloo but Horovod did not start Gloo")
    if (hvd.rank(), hvd.size()) != (rank, world):
        raise RuntimeError(f"Horovod's {want} controller numbers this process rank "
                           f"{hvd.rank()} of {hvd.size()}, ddpbench rank {rank} of {world}")
    facts = {"controller": want,
             "cpu_operations": os.environ.get("HOROVOD_CPU_OPERATIONS", want)}
    if want == "mpi":
        facts["mpi"], facts["mpi_library"] = probe.mapped_mpi()
        facts["mpi_threads_supported"] = bool(hvd.mpi_threads_supported())
    return facts


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve_rendezvous(sys.argv[2].split(","))
    else:
        sys.exit("usage: ddpb_hvd_common.py --serve NODE,NODE,...")
