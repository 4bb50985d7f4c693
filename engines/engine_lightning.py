#!/usr/bin/env python3
"""engine_lightning: one rank of a `"engine": "lightning"` run (PyTorch Lightning's Trainer
with its DDP strategy), started by engines/ddpb_launch.py with torch.distributed's
environment (RANK, WORLD_SIZE, MASTER_ADDR/PORT agreed through ddpbench's store).

The spec's knobs map onto Lightning's (framework_config, stored with the run):
  strategy ddp    DDPStrategy (gloo on the CPU), one device per process: num_nodes is the
                  run's world_size and each process is node `rank` of it, through a
                  ClusterEnvironment that reads ddpbench's rank, so Lightning's ranks are
                  ddpbench's and it starts no process of its own
  bucket_mb       DDPStrategy(bucket_cap_mb)
  optimizer       torch.optim's (ddpb_torch_loop.make_optimizer), the learning rate of
                  each step set by ddpb_train.lr_at before it (no Lightning scheduler)
  precision       fp32 (Trainer precision "32-true"); bf16: "bf16-mixed" (autocast)
  clip_grad_norm  Trainer(gradient_clip_val, gradient_clip_algorithm "norm"): the global
                  norm of the averaged gradients (after DDP's allreduce), as the contract
  accumulate      Trainer(accumulate_grad_batches) over the spec's micro-batches
  dataset         ddpb_data's shard of this rank in ddpbench's order (an iterable, no
                  DistributedSampler: use_distributed_sampler=False)

Steps and epochs: one Trainer.fit per repeat for the plan's steps; ddpbench's epochs (an
epoch's end, evaluation and the epoch line) are counted by a Callback from the steps, as
ddpb_torch_loop does, since Lightning's own epoch is the one iterable.

Phases, on the training thread's clock by the Callback's hooks: data (from the previous
batch's end to this one's start: Lightning fetches the batch there), forward (to
on_before_backward), backward (to on_after_backward, less the exposed communication),
optimizer (on_before_optimizer_step to the batch's end, clipping included). Communication
is timed by the same DDP communication hook as engine pytorch (engine_pytorch.CommHook),
registered on the module Lightning's DDPStrategy wrapped (its own ddp_comm_hook argument
is registered on cuda only)."""
import datetime
import os
import sys
import time

import ddpb_report  # noqa: E402
if __name__ == "__main__":  # the rank, not a DataLoader worker's import of this script
    ddpb_report.start().heartbeat(phase="import")  # reporting while the framework imports

import ddpb_torch_compat  # noqa: E402

ddpb_torch_compat.shard_import()  # before Lightning imports torch.distributed._shard
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import pytorch_lightning as pl  # noqa: E402
from lightning_fabric.plugins.environments import ClusterEnvironment  # noqa: E402
from pytorch_lightning.strategies import DDPStrategy  # noqa: E402

import ddpb_observe  # noqa: E402
import ddpb_torch_data  # noqa: E402
import ddpb_torch_loop as loop  # noqa: E402
import ddpb_train  # noqa: E402
import probe  # noqa: E402
from engine_pytorch import CommHook  # noqa: E402  (the DDP hook and its timing)

NOT_OBSERVED = probe.NOT_OBSERVED["lightning"]  # GET /v1/engines serves the same table
VERSIONS = {"python": sys.version.split()[0], "torch": torch.__version__,
            "pytorch_lightning": pl.__version__}
PRECISIONS = {"fp32": "32-true", "bf16": "bf16-mixed", "fp16": "16-mixed"}


class DdpbEnvironment(ClusterEnvironment):
    """ddpbench's rendezvous as Lightning's cluster: each process is one node of the run
    (devices=1, num_nodes=world), node `rank`, local rank 0; the processes exist already."""

    def __init__(self, rank, world):
        super().__init__()
        self.rank, self.world = rank, world

    @property
    def creates_processes_externally(self):
        return True

    @property
    def main_address(self):
        return os.environ["MASTER_ADDR"]

    @property
    def main_port(self):
        return int(os.environ["MASTER_PORT"])

    @staticmethod
    def detect():
        return True

    def world_size(self):
        return self.world

    def set_world_size(self, size):
        if size != self.world:
            raise ValueError(f"Lightning asks for world size {size}, the run has {self.world}")

    def global_rank(self):
        return self.rank

    def set_global_rank(self, rank):
        if rank != self.rank:
            raise ValueError(f"Lightning numbers this process {rank}, ddpbench {self.rank}")

    def local_rank(self):
        return 0

    def node_rank(self):
        return self.rank


class Batches:
    """The plan's steps of one repeat as one iterable: ddpb_data's batches of this rank,
    epoch after epoch, acc micro-batches a step (no len: max_steps ends the fit)."""

    def __init__(self, data, plan, world, rank, batch, acc, seed):
        self.args = data, plan, world, rank, batch, acc, seed

    def __iter__(self):
        data, plan, world, rank, batch, acc, seed = self.args
        left = plan.total * acc
        for epoch in range(plan.epochs):
            it = data.batches(epoch, world, rank, batch, seed=seed)
            for _ in range(min(plan.steps_per_epoch * acc, left)):
                x, y = next(it)
                left -= 1
                yield ddpb_torch_data.as_tensor(x), ddpb_torch_data.as_tensor(y)


class Net(pl.LightningModule):
    """The torch zoo's model (ddpb_torch_models) as a LightningModule: cross-entropy, the
    epoch tally, and the spec's optimizer."""

    def __init__(self, spec, net, tally):
        super().__init__()
        self.spec, self.net, self.tally = spec, net, tally
        self.opt_config = None

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        out = self.net(x)
        loss = F.cross_entropy(out, y)
        self.tally["now"].add(loss.item(), (out.argmax(1) == y).sum().item(), len(y))
        self.tally["losses"].append(loss.item())
        return loss

    def configure_optimizers(self):
        cls, kw, self.opt_config = loop.make_optimizer(self.spec, self.net.parameters())
        return cls(self.net.parameters(), **kw)


def all_sum(values):
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t)
    return t.tolist()


class Reporter(pl.Callback):
    """The report lines of one repeat from Lightning's hooks: each optimizer step's phases
    and loss, ddpbench's epochs (their end, evaluation, usage window) counted from the
    steps, and memory at the end."""

    def __init__(self, rep, spec, data, plan, hook, world, rank, repeat, tally, announce):
        self.rep, self.spec, self.data, self.plan, self.hook = rep, spec, data, plan, hook
        self.world, self.rank, self.repeat, self.tally = world, rank, repeat, tally
        self.announce = announce
        self.acc = int(spec.get("accumulate", 1))
        self.batch = int(spec.get("batch_size", 32))
        self.usage = ddpb_train.Usage(repeat)
        self.step = self.micro = 0
        self.grads = None
        self.prec = loop.Precision(spec, torch.device("cpu"))  # the evaluation's autocast
        self.clip = float(spec.get("clip_grad_norm", 0) or 0)
        self.grad_norm = None
        self.t_epoch = time.perf_counter()
        self.last_end = None
        self.ready = None  # rank 0's gradient readiness (ddpb_observe.Readiness), from start
        self.last_bwd = 0.0

    def on_train_start(self, trainer, module):
        # Lightning's DDPStrategy registers a ddp_comm_hook on cuda only: the wrapped
        # module (DistributedDataParallel by now) gets ddpbench's timing hook here
        trainer.strategy.model.register_comm_hook(None, self.hook.allreduce)
        if self.rank == 0 and os.environ.get("DDPBENCH_OBSERVE_OFF") != "1":
            self.ready = ddpb_observe.Readiness(module.parameters())  # the model's step
        self.announce(trainer, module)
        self.t_epoch = self.last_end = time.perf_counter()

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        now = time.perf_counter()
        if self.micro == 0:  # a step's first micro-batch: its learning rate, its clock
            for opt in trainer.optimizers:
                for g in opt.param_groups:
                    g["lr"] = ddpb_train.lr_at(self.spec, self.step, self.plan.total)
            self.hook.reset()
            self.t_step, self.ph = self.last_end, dict.fromkeys(
                ("data_ms", "forward_ms", "backward_ms"), 0.0)
            self.tally["losses"] = []
        self.ph["data_ms"] += (now - self.last_end) * 1000.0
        self.mark = now

    def on_before_backward(self, trainer, module, loss):
        now = time.perf_counter()
        self.ph["forward_ms"] += (now - self.mark) * 1000.0
        self.mark = now
        # the synchronising micro-batch's backward of a measured step: its readiness
        if self.ready is not None and self.micro == self.acc - 1 and \
                self.step >= self.plan.warmup:
            self.ready.begin(now)

    def on_after_backward(self, trainer, module):
        now = time.perf_counter()
        self.ph["backward_ms"] += (now - self.mark) * 1000.0
        self.last_bwd = now - self.mark
        self.mark = self.backward_end = now

    def on_before_optimizer_step(self, trainer, module, optimizer):
        if self.step == self.plan.total - 1:  # the update frees nothing, but read it here
            grads = [p.grad for p in module.parameters() if p.grad is not None]
            self.grads = loop.tensor_bytes(grads) if grads else None
        if self.clip > 0:  # Lightning clips after this hook: the exchanged gradients' norm
            norms = [p.grad.detach().float().norm(2) for p in module.parameters()
                     if p.grad is not None]
            self.grad_norm = float(torch.stack(norms).norm(2)) if norms else None
        self.t_opt = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        now = time.perf_counter()
        self.micro += 1
        self.last_end = now
        if self.micro < self.acc:
            return
        self.micro = 0
        comm, exposed = self.hook.timing(self.backward_end)
        ph = dict(self.ph, comm_ms=comm, comm_exposed_ms=exposed,
                  optimizer_ms=(now - self.t_opt) * 1000.0)
        ph["backward_ms"] = max(0.0, ph["backward_ms"] - exposed)
        if self.ready is not None:  # the backward's own time, as the C worker's
            self.ready.end(max(0.0, self.last_bwd * 1000.0 - exposed) * 1e6)
        ph.update(ddpb_torch_data.step_figures(self.data))
        losses = self.tally["losses"]
        self.rep.step(step=self.step, loss=sum(losses) / max(1, len(losses)),
                      samples=self.batch * self.acc, step_ms=(now - self.t_step) * 1000.0,
                      repeat=self.repeat, epoch=self.step // self.plan.steps_per_epoch,
                      warmup=self.step < self.plan.warmup, grad_norm=self.grad_norm, **ph)
        self.usage.step()
        self.step += 1
        if self.step % self.plan.steps_per_epoch == 0:
            self.end_epoch(module, self.step // self.plan.steps_per_epoch - 1)
        self.last_end = time.perf_counter()  # the epoch's figures are no step's data time

    def end_epoch(self, module, epoch):
        self.usage.emit(self.rep, epoch)
        test = None
        if self.data.test is not None and self.spec.get("eval", True):
            def test():
                return loop.evaluate(module.net, self.data, self.world, self.rank, self.batch,
                                     torch.device("cpu"), all_sum, self.prec)
        ddpb_train.end_epoch(self.rep, self.rank, self.world, self.repeat, epoch,
                             self.tally["now"], self.t_epoch, all_sum, test)
        self.tally["now"] = ddpb_train.Tally()
        self.t_epoch = time.perf_counter()

    def on_train_end(self, trainer, module):
        epoch = max(0, (self.step - 1) // self.plan.steps_per_epoch)
        self.usage.emit(self.rep, epoch)  # the steps after the last epoch that ended
        if self.ready is not None:
            self.ready.emit(self.rep, self.repeat)
        opt = trainer.optimizers[0]
        self.rep.memory(self.repeat, ddpb_train.peak_rss_bytes(), grads_bytes=self.grads,
                        **loop.held_bytes(module.net, opt))


def trainer_of(spec, world, rank, hook, callback):
    """The Trainer of one repeat: DDP over gloo with the spec's bucket and timeout, one
    device per process, ddpbench's ranks, no logger, checkpoint, progress bar or sanity
    check (nothing of Lightning's own writes files or talks)."""
    clip = float(spec.get("clip_grad_norm", 0) or 0)
    strategy = DDPStrategy(
        cluster_environment=DdpbEnvironment(rank, world), process_group_backend="gloo",
        timeout=datetime.timedelta(seconds=int(spec.get("comm_timeout_s", 300))),
        bucket_cap_mb=int(spec.get("bucket_mb", 25)))
    return pl.Trainer(
        accelerator="cpu", devices=1, num_nodes=world, strategy=strategy,
        precision=PRECISIONS[spec.get("precision", "fp32")],
        max_epochs=1, max_steps=-1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        use_distributed_sampler=False, accumulate_grad_batches=int(spec.get("accumulate", 1)),
        gradient_clip_val=clip if clip > 0 else None,
        gradient_clip_algorithm="norm" if clip > 0 else None, callbacks=[callback],
        default_root_dir=os.environ.get("DDPB_LOG_DIR") or os.getcwd())


def train(rep, spec, rank, world):
    torch.set_num_threads(int(spec.get("threads", 1)))
    rep.heartbeat(phase="rendezvous")
    data = ddpb_torch_data.open_data(spec)
    batch, acc = int(spec.get("batch_size", 32)), int(spec.get("accumulate", 1))
    for repeat in range(int(spec.get("repeats", 1))):
        seed = int(spec.get("seed", 1)) + repeat
        plan = ddpb_train.Plan(spec, data.steps_per_epoch(world, batch) // acc)
        tally = {"now": ddpb_train.Tally(), "losses": []}
        module = Net(spec, loop.build_model(spec, data, torch.device("cpu"), seed), tally)
        hook = CommHook(world, "none")

        def announce(trainer, module, repeat=repeat):
            if repeat != 0:
                return
            s = trainer.strategy
            rep.env(ddpb_train.framework_env("lightning", VERSIONS, {
                "DDPStrategy": {"process_group_backend": s.process_group_backend,
                                "bucket_cap_mb": int(spec.get("bucket_mb", 25)),
                                "num_nodes": trainer.num_nodes, "devices": 1,
                                "comm_hook": "allreduce"},
                "precision": PRECISIONS[spec.get("precision", "fp32")],
                "gradient_clip_val": trainer.gradient_clip_val,
                "gradient_clip_algorithm": str(getattr(trainer.gradient_clip_algorithm, "value",
                                                       trainer.gradient_clip_algorithm) or ""),
                "accumulate_grad_batches": acc, "optimizer": module.opt_config,
                "threads": torch.get_num_threads(),
                "data": ddpb_torch_data.data_config(data)}, NOT_OBSERVED))

        cb = Reporter(rep, spec, data, plan, hook, world, rank, repeat, tally, announce)
        trainer = trainer_of(spec, world, rank, hook, cb)
        rep.heartbeat(phase="train")
        trainer.fit(module, train_dataloaders=Batches(data, plan, world, rank, batch, acc,
                                                      seed))
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def main():
    return ddpb_train.run_main("lightning", VERSIONS, train, loop.error_code)


if __name__ == "__main__":
    ddpb_train.exit_now(main())  # not sys.exit: ddpb_train.exit_now says why
