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
if __name__ == "__main__":  # the rank, not a DataLoader worker's import of this script
    ddpb_report.start().heartbeat(phase="import")  # reporting while the framework imports

import torch
import horovod
import horovod.torch as hvd

import ddpb_hvd_common as common
import ddpb_observe
import ddpb_torch_data
import ddpb_torch_loop as loop
import ddpb_train
import probe

NOT_OBSERVED = probe.NOT_OBSERVED["horovod"]  # GET /v1/engines serves the same table
VERSIONS = {"python": sys.version.split()[0], "torch": torch.__version__,
            "horovod": horovod.__version__}


controller_env = common.controller_env
HOROVOD_DEFAULT_FUSION = common.HOROVOD_DEFAULT_FUSION
HOROVOD_DEFAULT_CYCLE_MS = common.HOROVOD_DEFAULT_CYCLE_MS


def rendezvous(spec, rank, world):
    """HOROVOD_* for this rank (ddpb_hvd_common.rendezvous): rank 0 keeps the Gloo
    rendezvous server alive (returned)."""
    return common.rendezvous(spec, rank, world, hvd.mpi_built)


def init(rank, world):
    """hvd.init() and ddpbench's numbering checked (ddpb_hvd_common.init)."""
    return common.init(hvd, rank, world)


class HorovodAdapter:
    """hvd.DistributedOptimizer for ddpb_torch_loop. broadcast: rank 0's initial state to
    all (broadcast_init); off in elastic mode, where TorchState's sync does it inside
    hvd.elastic.run (a collective outside it would meet a joiner's sync).

    Observed: rank 0's gradient readiness (per-parameter hooks, as DistributedOptimizer's
    own fire), and the trace: each rank's phases and its wait in synchronize()
    ("comm_exposed"), plus Horovod's timeline of the traced window (HOROVOD_TIMELINE=DYNAMIC,
    hvd.start_timeline / stop_timeline around the window, written by the coordinator, rank
    0, for all ranks), converted by ddpb_observe.horovod_timeline_groups and broadcast to
    every rank once the repeat's steps are over, so each rank's traced steps carry the
    negotiation and allreduce of each fused group as ops."""

    readiness = True

    def __init__(self, spec, announce, facts, broadcast=True):
        self.spec, self.announce, self.facts = spec, announce, facts
        self.broadcast = broadcast
        self.sync = None  # (start, end) of the step's synchronize(), perf_counter seconds
        self.timeline = None  # the traced window's timeline file (rank 0's), when recording
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
        self.sync = (t0, t1)
        with self.opt.skip_synchronize():  # unscale and clip the averaged gradients, step
            fields = self.prec.step(self.opt, self.model.parameters())
        self.opt.zero_grad()
        end = time.perf_counter()
        return {"comm_exposed_ms": (t1 - t0) * 1000.0, "optimizer_ms": (end - t1) * 1000.0,
                "update_span": (t0, end), **fields}

    def all_sum(self, values):
        t = torch.tensor(values, dtype=torch.float64)
        return hvd.allreduce(t, op=hvd.Sum, name="ddpb_tally").tolist()

    def trace_step(self, tracer, backward_end):
        if self.sync is not None:
            tracer.span("comm_exposed", *self.sync)

    def trace_window(self, tracer, on):
        """Horovod's timeline on (every rank calls it; the coordinator writes the file)
        for the traced window; whether the steps' lines wait for trace_finish. Without
        HOROVOD_TIMELINE=DYNAMIC (an elastic worker) the trace has the spans only."""
        if not on:
            if self.timeline is not None:
                hvd.stop_timeline()
            return False
        if os.environ.get("HOROVOD_TIMELINE") != "DYNAMIC":
            return False
        self.timeline = os.path.join(timeline_dir(), f"timeline-{tracer.repeat}.json")
        hvd.start_timeline(self.timeline)
        return True

    def trace_finish(self, tracer):
        """Rank 0 reads the timeline and every rank takes the converted groups (a
        broadcast: a collective of every rank, once per repeat), then places its part in
        the steps it traced."""
        global _TIMELINE_DIR
        groups = None
        if hvd.rank() == 0:
            text = ddpb_observe.read_closed(self.timeline)
            groups = ddpb_observe.horovod_timeline_groups(text) if text else []
            for rm in (lambda: os.remove(self.timeline), lambda: os.rmdir(_TIMELINE_DIR)):
                try:
                    rm()
                except OSError:
                    pass  # not written (no step traced), or not empty: left in the temp dir
            _TIMELINE_DIR = None
        groups = hvd.broadcast_object(groups, root_rank=0, name="ddpb_timeline")
        ddpb_observe.place_groups(tracer, groups, hvd.rank())
        self.timeline = None


def timeline_dir():
    """Where rank 0's timeline files go: a directory of this process's own."""
    global _TIMELINE_DIR
    if _TIMELINE_DIR is None:
        import tempfile
        _TIMELINE_DIR = tempfile.mkdtemp(prefix="ddpb-hvd-timeline-")
    return _TIMELINE_DIR


_TIMELINE_DIR = None


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
    if int(spec.get("trace_steps", 5)) > 0:  # timeline on demand (trace_window)
        os.environ["HOROVOD_TIMELINE"] = "DYNAMIC"
    server = rendezvous(spec, rank, world)
    try:
        facts = init(rank, world)
        loop.train_all("horovod", rep, VERSIONS, NOT_OBSERVED, spec,
                       ddpb_torch_data.open_data(spec), torch.device("cpu"), world, rank,
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
