#!/usr/bin/env python3
"""engine_pytorch: one rank of a `"engine": "pytorch"` run, started by engines/ddpb_launch.py
with torch.distributed's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT).

The spec's knobs map onto torch's own (the table is framework_config, stored with the run):
  strategy ddp    DistributedDataParallel(bucket_cap_mb = bucket_mb)
  strategy zero1  DistributedDataParallel + ZeroRedundancyOptimizer (optimizer state sharded)
  backend         tcp -> gloo (device cpu), nccl -> nccl (device cuda), mpi -> mpi
  compression     fp16 / bf16: the gradient bucket is cast before its allreduce and back
                  after (what torch's fp16_compress_hook / bf16_compress_hook do)
  strategy dp     torch.nn.DataParallel over world_size GPUs in ONE process (DpAdapter;
                  device cuda only: on a CPU it would run a single replica)
  accumulate      DDP.no_sync() on every micro-batch but the last
  precision       bf16: torch.autocast(bfloat16) (cpu: oneDNN; cuda); fp16 (cuda only):
                  autocast(float16) + GradScaler (loss_scale 0, loss_scale_window) or a
                  static scale (ddpb_torch_loop.Precision)
  clip_grad_norm  clip_grad_norm_ over the DDP-averaged gradients before the optimizer
                  step (ZeroRedundancyOptimizer: every rank holds the full averaged
                  gradients then), unscaled first under fp16; the step reports grad_norm
  optimizer, lr_schedule, seed, threads, dataset: as ddpb_train / ddpb_data define them.

Phases: data (numpy batch to tensor), forward, backward, optimizer on the training
thread's clock. Communication is timed by the DDP communication hook that does the
allreduce: comm_ms from the first bucket's launch to the last bucket's completion,
comm_exposed_ms the hooks' own launch time plus the wait from the last bucket launched to
backward's return (DDP blocks there until every bucket is reduced); backward_ms excludes
it, as the C worker's does. bytes_sent is not reported: gloo and NCCL do not say what
their algorithms put on the wire (GET /v1/engines lists this).

A `"workload": "collective"` run times torch.distributed's gloo instead (ddpb_collective):
the fits the model predicts the framework engines' rows from (backend "gloo")."""
import contextlib
import datetime
import sys
import time

import ddpb_report  # noqa: E402
if __name__ == "__main__":  # the rank, not a DataLoader worker's import of this script
    ddpb_report.start().heartbeat(phase="import")  # reporting while the framework imports

import torch
import torch.distributed as dist
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP

import ddpb_collective
import ddpb_data
import ddpb_elastic
import ddpb_observe
import ddpb_torch_data
import ddpb_torch_loop as loop
import ddpb_train
import probe

NOT_OBSERVED = probe.NOT_OBSERVED["pytorch"]  # GET /v1/engines serves the same table
# strategy dp: DataParallel's gradient sum runs inside backward, with no hook to time it
NOT_OBSERVED_DP = dict(NOT_OBSERVED, comm_ms="DataParallel sums the replicas' gradients "
                       "inside backward, with no hook to time it", comm_exposed_ms="as comm_ms")
BACKENDS = {"tcp": "gloo", "nccl": "nccl", "mpi": "mpi"}
COMPRESS = {"fp16": torch.float16, "bf16": torch.bfloat16}
VERSIONS = {"python": sys.version.split()[0], "torch": torch.__version__,
            "torchvision": torchvision.__version__}


class CommHook:
    """The DDP communication hook: allreduce of the bucket (compressed when asked), with
    the step's communication timing. Each bucket's exchange is in flight from its launch
    to its future's completion (the callback runs on gloo's thread); comm_ms is the union
    of those intervals, as the C worker's (worker/ddp/ddp.h "Timing"), not their span."""

    def __init__(self, world, compression):
        self.world = world
        self.dtype = COMPRESS.get(compression)
        self.reset()

    def reset(self):
        self.spans = []  # [launch, done or None, bucket, bytes, launch end] per bucket
        self.last_launch = None
        self.launch_ms = 0.0

    def allreduce(self, state, bucket):
        t0 = time.perf_counter()
        buf = bucket.buffer()
        send = buf.to(self.dtype) if self.dtype is not None else buf
        span = [t0, None, bucket.index(), send.numel() * send.element_size(), t0]
        self.spans.append(span)
        send.div_(self.world)
        fut = dist.all_reduce(send, async_op=True).get_future()

        def finish(f):
            span[1] = time.perf_counter()
            out = f.value()[0]
            if self.dtype is not None:
                buf.copy_(out)
                return buf
            return out

        result = fut.then(finish)
        t1 = time.perf_counter()
        span[4] = t1
        self.launch_ms += (t1 - t0) * 1000.0
        self.last_launch = t1
        return result

    def trace(self, tracer, backward_end):
        """The step's communication in its trace: each bucket's allreduce as an op (launch
        to its future's completion; the algorithm is the backend's choice, which torch
        does not tell: "?"), and the training thread's exposed time as "comm_exposed"
        spans (each launch inside the hook, then the wait from the last launch to
        backward's return, cut as timing() cuts it), which add up to comm_exposed_ms."""
        for lo, hi, index, nbytes, launched in self.spans:
            tracer.op("allreduce", index, nbytes, "?", ddpb_observe.ns(lo),
                      ddpb_observe.ns(hi or backward_end))
            tracer.span("comm_exposed", lo, launched)
        if self.last_launch is not None:
            wait_s = max(0.0, self.timing(backward_end)[1] - self.launch_ms) / 1000.0
            tracer.span("comm_exposed", self.last_launch, self.last_launch + wait_s)

    def timing(self, backward_end):
        """(comm_ms, comm_exposed_ms) of the step; (0, 0) when nothing was exchanged."""
        if not self.spans:
            return 0.0, 0.0
        comm, cur_lo, cur_hi = 0.0, None, None
        for lo, hi in sorted((s[0], s[1] or backward_end) for s in self.spans):
            if cur_hi is None or lo > cur_hi:
                comm += (cur_hi - cur_lo) if cur_hi is not None else 0.0
                cur_lo, cur_hi = lo, hi
            else:
                cur_hi = max(cur_hi, hi)
        comm = (comm + cur_hi - cur_lo) * 1000.0
        exposed = self.launch_ms + max(0.0, backward_end - self.last_launch) * 1000.0
        return comm, min(exposed, comm + self.launch_ms)


class DdpAdapter:
    """DistributedDataParallel (+ ZeroRedundancyOptimizer for zero1) for ddpb_torch_loop."""

    readiness = True  # rank 0's per-parameter hooks (ddpb_observe.Readiness)

    def __init__(self, spec, world, device, announce):
        self.spec, self.world, self.device, self.announce = spec, world, device, announce
        self.hook = CommHook(world, spec.get("compression", "none"))
        self.prec = loop.Precision(spec, device)

    def wrap(self, model):
        spec = self.spec
        bucket_mb = int(spec.get("bucket_mb", 25))
        self.ddp = DDP(model, bucket_cap_mb=bucket_mb,
                       device_ids=[0] if self.device.type == "cuda" else None)
        self.ddp.register_comm_hook(None, self.hook.allreduce)
        cls, kw, config = loop.make_optimizer(spec, self.ddp.parameters())
        if spec.get("strategy") == "zero1":
            from torch.distributed.optim import ZeroRedundancyOptimizer
            self.opt = ZeroRedundancyOptimizer(self.ddp.parameters(), optimizer_class=cls, **kw)
            config = {"class": "ZeroRedundancyOptimizer", "optimizer_class": config,
                      "overlap_with_ddp": False}
        else:
            self.opt = cls(self.ddp.parameters(), **kw)
        acc = int(spec.get("accumulate", 1))
        self.announce({"DistributedDataParallel": {
            "bucket_cap_mb": bucket_mb, "broadcast_buffers": True,
            "init_broadcast": "always (DDP's constructor broadcasts rank 0's state)",
            "find_unused_parameters": False, "gradient_as_bucket_view": False,
            "comm_hook": "allreduce" + ("" if self.hook.dtype is None else
                                        f" of a {spec.get('compression')} copy")},
            "optimizer": config, "accumulate": acc, "no_sync": acc > 1,
            "precision": self.prec.config()})
        return self.ddp, self.opt

    def micro(self, k, acc):
        return self.ddp.no_sync() if k < acc - 1 else contextlib.nullcontext()

    def backward(self, loss, k, acc):
        self.prec.scale(loss / acc).backward()

    def step_begin(self):
        self.hook.reset()

    def step_end(self, backward_end):
        comm, exposed = self.hook.timing(backward_end)
        t = time.perf_counter()
        fields = self.prec.step(self.opt, self.ddp.parameters())
        self.opt.zero_grad(set_to_none=True)
        end = time.perf_counter()
        return {"comm_ms": comm, "comm_exposed_ms": exposed, "in_backward_ms": exposed,
                "optimizer_ms": (end - t) * 1000.0, "update_span": (t, end), **fields}

    def trace_step(self, tracer, backward_end):
        self.hook.trace(tracer, backward_end)

    def all_sum(self, values):
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.tolist()


class DpAdapter:
    """torch.nn.DataParallel (strategy dp, device cuda; the spec refuses it on a CPU) for
    ddpb_torch_loop: ONE process (the daemon starts one: common/spec.h spec_processes) with
    world replicas on GPUs 0..world-1. Each step scatters the stacked batch
    (ddpb_data.Replicas: replica r's part is shard r's batch), runs the replicas' forward
    and backward in threads and sums their gradients onto GPU 0 inside backward; the loss
    is the mean over the global batch, as DDP's average. No process group: all_sum is the
    identity, and the exchange is no separate phase (comm_ms is not observable)."""

    def __init__(self, spec, world, device, announce):
        self.spec, self.world, self.device, self.announce = spec, world, device, announce
        self.prec = loop.Precision(spec, device)

    def wrap(self, model):
        if torch.cuda.device_count() < self.world:
            raise ValueError(f"world_size: strategy dp runs {self.world} replicas on as many "
                             f"GPUs, this process sees {torch.cuda.device_count()}")
        self.dp = torch.nn.DataParallel(model, device_ids=list(range(self.world)))
        cls, kw, config = loop.make_optimizer(self.spec, self.dp.parameters())
        self.opt = cls(self.dp.parameters(), **kw)
        self.announce({"DataParallel": {"device_ids": list(range(self.world)),
                                        "output_device": 0, "single_process": True},
                       "optimizer": config, "accumulate": int(self.spec.get("accumulate", 1)),
                       "precision": self.prec.config()})
        return self.dp, self.opt

    def micro(self, k, acc):
        return contextlib.nullcontext()

    def backward(self, loss, k, acc):
        self.prec.scale(loss / acc).backward()

    def step_begin(self):
        pass

    def step_end(self, backward_end):
        t = time.perf_counter()
        fields = self.prec.step(self.opt, self.dp.parameters())
        self.opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize(self.device)
        return {"optimizer_ms": (time.perf_counter() - t) * 1000.0, **fields}

    def all_sum(self, values):
        return [float(v) for v in values]  # one process holds every replica's tally


def train_dp(rep, spec):
    """Strategy dp: the one process of the run's world_size replicas (DpAdapter)."""
    world = int(spec.get("world_size", 1))
    torch.set_num_threads(int(spec.get("threads", 1)))
    device = torch.device("cuda", 0)
    loop.train_all("pytorch", rep, VERSIONS, NOT_OBSERVED_DP, spec,
                   ddpb_data.Replicas(ddpb_torch_data.open_data(spec), world), device, 1, 0,
                   lambda announce: DpAdapter(spec, world, device, announce))


def collective(rep, spec, rank, world):
    """A collective workload (ddpb_collective): torch.distributed's gloo timed, the network
    fits of the framework engines (backend "gloo")."""
    torch.set_num_threads(int(spec.get("threads", 1)))
    rep.heartbeat(phase="rendezvous")
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world,
                            timeout=datetime.timedelta(
                                seconds=int(spec.get("comm_timeout_s", 300))))
    ddpb_collective.run(rep, spec, rank, world)
    dist.barrier()
    dist.destroy_process_group()


def train(rep, spec, rank, world):
    if spec.get("workload") == "collective":
        return collective(rep, spec, rank, world)
    if spec.get("strategy") == "dp":
        return train_dp(rep, spec)
    backend = BACKENDS[spec.get("backend", "tcp")]
    torch.set_num_threads(int(spec.get("threads", 1)))
    cuda = spec.get("device", "cpu") == "cuda"
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    rep.heartbeat(phase="rendezvous")
    timeout_s = int(spec.get("comm_timeout_s", 300))
    el = ddpb_elastic.from_env(spec, rank, world)
    try:
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout_s))
        if el and el.gen > 0 and rank == 0:  # the new group formed
            el.event(rep, "regroup", peer=-1, regroup_ms=(
                time.time() - el.lost_at) * 1000.0 if el.lost_at > 0 else None)
        train_group(rep, spec, rank, world, backend, device, timeout_s, el)
    except Exception:
        if el:  # a peer went (the daemon restarts the group), or this rank failed
            el.event(rep, "detect", peer=-1)
        raise


def train_group(rep, spec, rank, world, backend, device, timeout_s, el):
    """The run once the process group exists (el: restart mode's state, or None)."""
    extra = {"process_group": {"backend": backend, "init_method": "env://",
                               "timeout_s": timeout_s}}
    if spec.get("strategy") == "zero1":
        extra["timing"] = ("optimizer_ms includes ZeroRedundancyOptimizer's parameter "
                           "broadcast, which torch exposes no hook to time")
    loop.train_all("pytorch", rep, VERSIONS, NOT_OBSERVED, spec, ddpb_torch_data.open_data(spec),
                   device, world, rank, lambda announce: DdpAdapter(spec, world, device, announce),
                   extra, el)
    dist.barrier()
    dist.destroy_process_group()


def main():
    return ddpb_train.run_main("pytorch", VERSIONS, train, loop.error_code)


if __name__ == "__main__":
    ddpb_train.exit_now(main())  # not sys.exit: ddpb_train.exit_now says why
