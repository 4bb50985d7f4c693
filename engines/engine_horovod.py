#!/usr/bin/env python3
"""engine_horovod: one rank of a `"engine": "horovod"` run (Horovod's PyTorch binding),
started by engines/ddpb_launch.py. The spec's backend picks Horovod's controller and CPU
operations (.venv's Horovod is built with both, deploy/setup-venv.sh):
  tcp  Gloo. No horovodrun: rank 0 starts Horovod's own HTTP rendezvous server
       (horovod.runner.http.http_server.RendezvousServer, what horovodrun starts) with the
       slot plan of every rank, publishes its port through ddpbench's store, and every rank
       sets the HOROVOD_* variables horovodrun would before hvd.init(). The same under any
       launcher: the store and the peers are ddpb_launch.py's.
  mpi  MPI (Debian's OpenMPI). The ranks are MPI processes that mpirun (or srun) started
       (the spec requires launcher mpirun or srun), so hvd.init()'s MPI_Init finds the
       world in the launcher's environment: no rendezvous, no HOROVOD_RANK. The adapter
       checks that MPI's rank and size are ddpbench's, and records the MPI implementation
       and its version string in the framework configuration.

The spec's knobs map onto Horovod's (framework_config, stored with the run):
  strategy horovod  hvd.DistributedOptimizer over torch.optim's optimizer
  fusion_mb         HOROVOD_FUSION_THRESHOLD (bytes)
  cycle_ms          HOROVOD_CYCLE_TIME
  compression       fp16: hvd.Compression.fp16; none: hvd.Compression.none
  accumulate        backward_passes_per_step
  broadcast_init    hvd.broadcast_parameters and broadcast_optimizer_state from rank 0
  precision         bf16: torch.autocast(bfloat16) around the forward, as engine pytorch
                    (fp16 needs cuda, which this Horovod build lacks: refused at submit);
                    Horovod's fp16 gradient compression stays the spec's compression
  clip_grad_norm    optimizer.synchronize() (the averaged gradients), clip_grad_norm_, then
                    the step under optimizer.skip_synchronize(); the step reports grad_norm

Phases: data, forward, backward and optimizer on the training thread's clock. The
allreduces run on Horovod's background thread as gradients become ready; what the training
thread observes is the wait in optimizer.synchronize(), reported as comm_exposed_ms (and
excluded from the optimizer's time). comm_ms, the span the allreduces were in flight, is not
observable without Horovod's timeline file, so it is null, as is bytes_sent."""
import os
import sys
import time

import ddpb_report  # noqa: E402
ddpb_report.start().heartbeat(phase="import")  # reporting while the framework imports

import psutil
import torch
import horovod
import horovod.torch as hvd

import ddpb_data
import ddpb_store
import ddpb_torch_loop as loop
import ddpb_train
import probe

NOT_OBSERVED = probe.NOT_OBSERVED["horovod"]  # GET /v1/engines serves the same table
VERSIONS = {"python": sys.version.split()[0], "torch": torch.__version__,
            "horovod": horovod.__version__}


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


def rendezvous(spec, rank, world):
    """HOROVOD_* for this rank; rank 0 keeps the Gloo rendezvous server alive (returned).
    Backend mpi needs none: MPI_Init finds the world in mpirun's (or srun's) environment."""
    os.environ.update(controller_env(spec))
    if spec.get("backend", "tcp") == "mpi":
        if not hvd.mpi_built():
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
            from horovod.runner.http.http_server import RendezvousServer
            server = RendezvousServer(verbose=0)
            port = server.start()
            server.init(plan)
            st.set("engine/horovod", f"{host}:{port}")
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


def init(rank, world):
    """hvd.init() and the check that Horovod runs the controller asked for, with
    ddpbench's rank and size (a launcher that numbered its ranks otherwise would mix up
    the shards and the reports); the controller's facts for the framework configuration."""
    hvd.init()
    want = os.environ["HOROVOD_CONTROLLER"]
    if want == "mpi" and not hvd.mpi_enabled():
        raise RuntimeError("HOROVOD_CONTROLLER=mpi but Horovod did not start MPI")
    if want == "gloo" and not hvd.gloo_enabled():
        raise RuntimeError("HOROVOD_CONTROLLER=gloo but Horovod did not start Gloo")
    if (hvd.rank(), hvd.size()) != (rank, world):
        raise RuntimeError(f"Horovod's {want} controller numbers this process rank "
                           f"{hvd.rank()} of {hvd.size()}, ddpbench rank {rank} of {world}")
    facts = {"controller": want, "cpu_operations": os.environ["HOROVOD_CPU_OPERATIONS"]}
    if want == "mpi":
        facts["mpi"], facts["mpi_library"] = probe.mapped_mpi()
        facts["mpi_threads_supported"] = bool(hvd.mpi_threads_supported())
    return facts


class HorovodAdapter:
    """hvd.DistributedOptimizer for ddpb_torch_loop. broadcast: rank 0's initial state to
    all (broadcast_init); off in elastic mode, where TorchState's sync does it inside
    hvd.elastic.run (a collective outside it would meet a joiner's sync)."""

    def __init__(self, spec, announce, facts, broadcast=True):
        self.spec, self.announce, self.facts = spec, announce, facts
        self.broadcast = broadcast
        self.prec = loop.Precision(spec, torch.device("cpu"))

    def wrap(self, model):
        spec = self.spec
        cls, kw, config = loop.make_optimizer(spec, model.parameters())
        acc = int(spec.get("accumulate", 1))
        comp = hvd.Compression.fp16 if spec.get("compression") == "fp16" else \
            hvd.Compression.none
        self.opt = hvd.DistributedOptimizer(cls(model.parameters(), **kw),
                                            named_parameters=model.named_parameters(),
                                            compression=comp, backward_passes_per_step=acc)
        if spec.get("broadcast_init", True) and self.broadcast:
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            hvd.broadcast_optimizer_state(self.opt, root_rank=0)
        self.announce({"DistributedOptimizer": {
            "optimizer": config, "compression": comp.__name__,
            "backward_passes_per_step": acc,
            "fusion_threshold_bytes": int(os.environ.get("HOROVOD_FUSION_THRESHOLD",
                                                         HOROVOD_DEFAULT_FUSION)),
            "cycle_time_ms": float(os.environ.get("HOROVOD_CYCLE_TIME",
                                                  HOROVOD_DEFAULT_CYCLE_MS)),
            "broadcast_init": bool(spec.get("broadcast_init", True))},
            "precision": self.prec.config(), **self.facts})
        self.model = model
        return model, self.opt

    def micro(self, k, acc):
        return loop.no_context(k, acc)

    def backward(self, loss, k, acc):
        self.prec.scale(loss / acc).backward()

    def step_begin(self):
        pass

    def step_end(self, backward_end):
        t0 = time.perf_counter()
        self.opt.synchronize()
        t1 = time.perf_counter()
        with self.opt.skip_synchronize():  # unscale and clip the averaged gradients, step
            fields = self.prec.step(self.opt, self.model.parameters())
        self.opt.zero_grad()
        return {"comm_exposed_ms": (t1 - t0) * 1000.0,
                "optimizer_ms": (time.perf_counter() - t1) * 1000.0, **fields}

    def all_sum(self, values):
        t = torch.tensor(values, dtype=torch.float64)
        return hvd.allreduce(t, op=hvd.Sum, name="ddpb_tally").tolist()


def train(rep, spec, rank, world):
    torch.set_num_threads(int(spec.get("threads", 1)))
    rep.heartbeat(phase="rendezvous")
    if os.environ.get("HOROVOD_ELASTIC") == "1":  # started by Horovod's elastic driver
        os.environ.update(controller_env(spec, elastic=True))
        hvd.init()
        import ddpb_hvd_elastic
        ddpb_hvd_elastic.train(rep, spec, rank, VERSIONS, NOT_OBSERVED, HorovodAdapter)
        hvd.shutdown()
        return
    server = rendezvous(spec, rank, world)
    try:
        facts = init(rank, world)
        loop.train_all("horovod", rep, VERSIONS, NOT_OBSERVED, spec, ddpb_data.Data(spec),
                       torch.device("cpu"), world, rank,
                       lambda announce: HorovodAdapter(spec, announce, facts))
        hvd.join()
        hvd.shutdown()
    finally:
        if server is not None:
            server.stop()


def main():
    return ddpb_train.run_main("horovod", VERSIONS, train, loop.error_code)


if __name__ == "__main__":
    sys.exit(main())
