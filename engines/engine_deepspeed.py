#!/usr/bin/env python3
"""engine_deepspeed: one rank of a `"engine": "deepspeed"` run (DeepSpeed's engine with
ZeRO stage 1 or 2 on the CPU), started by engines/ddpb_launch.py with torch.distributed's
environment. No deepspeed launcher: deepspeed.init_distributed reads RANK, WORLD_SIZE and
MASTER_ADDR/PORT like torch does.

The spec's knobs map onto the ds_config it is given (stored with the run as
framework_config.ds_config):
  strategy zero1 / zero2  zero_optimization.stage 1 / 2
  bucket_mb               reduce_bucket_size and allgather_bucket_size (in elements:
                          bucket_mb MiB of fp32)
  batch_size, accumulate  train_micro_batch_size_per_gpu, gradient_accumulation_steps
  optimizer               the client optimizer (torch.optim's, as the other engines), hence
                          zero_allow_untested_optimizer
  lr_schedule             ddpb_train.lr_at on the optimizer's param_groups each step
  precision               bf16: "bf16": {"enabled": true} (DeepSpeed casts the model to
                          bf16, ZeRO keeps fp32 master partitions; the input is cast to
                          bf16); fp16: "fp16" {enabled, loss_scale (0 = dynamic),
                          loss_scale_window, initial_scale_power 16} on a device whose
                          accelerator has fp16 (DeepSpeed's CPU accelerator has not:
                          is_fp16_supported() is false, so it is refused at submit)
  clip_grad_norm          "gradient_clipping" (ZeRO's global norm over the partitions,
                          after the reduction); the step reports get_global_grad_norm()

On the CPU with Debian's torch 1.13, DeepSpeed's own CPU backend (ccl) needs
oneccl_bindings_for_pytorch, which has no build for this torch and Python, so the process
group is gloo. torch 1.13's gloo lacks all_gather_into_tensor and reduce_scatter_tensor, which
ZeRO calls when torch.distributed has them; the adapter clears DeepSpeed's handles to them
(deepspeed.comm's documented fallback: all_gather of chunks) and sets reduce_scatter false
(gradients are all-reduced and each rank keeps its partition). Both are in
framework_config.

Phases: data, forward, backward, optimizer (engine.step) on the training thread's clock;
DeepSpeed's wall-clock breakdown timers give the gradient all-reduce inside backward
(bwd_allreduce_microstep): with overlap_comm off it runs after the backward compute, so it
is both comm_ms and comm_exposed_ms. bytes_sent is not reported."""
import datetime
import os
import sys
import time

import ddpb_report  # noqa: E402
if __name__ == "__main__":  # the rank, not a DataLoader worker's import of this script
    ddpb_report.start().heartbeat(phase="import")  # reporting while the framework imports

import torch

import ddpb_torch_data
import ddpb_torch_loop as loop
import ddpb_train
import probe

os.environ.setdefault("DS_ACCELERATOR", "cpu")
import deepspeed  # noqa: E402
import deepspeed.comm.comm as ds_comm  # noqa: E402
from deepspeed.utils.timer import BACKWARD_REDUCE_MICRO_TIMER  # noqa: E402

NOT_OBSERVED = probe.NOT_OBSERVED["deepspeed"]  # GET /v1/engines serves the same table
VERSIONS = {"python": sys.version.split()[0], "torch": torch.__version__,
            "deepspeed": deepspeed.__version__}


def ds_config(spec):
    elems = int(spec.get("bucket_mb", 25)) * (1 << 20) // 4
    return {"train_micro_batch_size_per_gpu": int(spec.get("batch_size", 32)),
            "gradient_accumulation_steps": int(spec.get("accumulate", 1)),
            "zero_optimization": {"stage": 1 if spec.get("strategy") == "zero1" else 2,
                                  "reduce_bucket_size": elems, "allgather_bucket_size": elems,
                                  "overlap_comm": False, "reduce_scatter": False,
                                  "contiguous_gradients": True},
            "zero_allow_untested_optimizer": True, "wall_clock_breakdown": True,
            "steps_per_print": 1 << 30, **ds_precision(spec)}


def ds_precision(spec):
    """ds_config's precision and clipping entries for the spec (issue 33's contract)."""
    out, prec = {}, spec.get("precision", "fp32")
    if prec == "bf16":
        out["bf16"] = {"enabled": True}
    elif prec == "fp16":
        out["fp16"] = {"enabled": True, "loss_scale": float(spec.get("loss_scale", 0) or 0),
                       "loss_scale_window": int(spec.get("loss_scale_window", 2000)),
                       "initial_scale_power": 16, "hysteresis": 1, "min_loss_scale": 1}
    clip = float(spec.get("clip_grad_norm", 0) or 0)
    if clip > 0:
        out["gradient_clipping"] = clip
    return out


def gloo_bf16_shim(cdb):
    """torch 1.13's gloo has no bfloat16 collective ("Invalid scalar type"), and DeepSpeed's
    bf16 mode broadcasts, all-reduces and all-gathers its bf16 parameters and gradients:
    its communication backend's all_reduce, broadcast and all_gather carry a bf16 tensor as
    fp32 (widened, exchanged, narrowed back, synchronously; the sums are exact for the
    values bf16 holds). So a deepspeed bf16 run's collectives move twice the bytes a
    bf16-capable backend would (stated in framework_config)."""
    from deepspeed.comm.torch import Noop
    reduce_, bcast, gather = cdb.all_reduce, cdb.broadcast, cdb.all_gather

    def all_reduce(tensor, op=torch.distributed.ReduceOp.SUM, group=None, async_op=False):
        if tensor.dtype != torch.bfloat16:
            return reduce_(tensor, op=op, group=group, async_op=async_op)
        wide = tensor.float()
        reduce_(wide, op=op, group=group, async_op=False)
        tensor.copy_(wide)
        return Noop()

    def broadcast(tensor, src, group=None, async_op=False):
        if tensor.dtype != torch.bfloat16:
            return bcast(tensor, src, group=group, async_op=async_op)
        wide = tensor.float()
        bcast(wide, src, group=group, async_op=False)
        tensor.copy_(wide)
        return Noop()

    def all_gather(tensor_list, tensor, group=None, async_op=False):
        if tensor.dtype != torch.bfloat16:
            return gather(tensor_list, tensor, group=group, async_op=async_op)
        outs = [torch.empty(t.shape, dtype=torch.float32) for t in tensor_list]
        gather(outs, tensor.float(), group=group, async_op=False)
        for t, o in zip(tensor_list, outs):
            t.copy_(o)
        return Noop()

    cdb.all_reduce, cdb.broadcast, cdb.all_gather = all_reduce, broadcast, all_gather


class DeepSpeedAdapter:
    """deepspeed.initialize's engine for ddpb_torch_loop."""

    readiness = True  # rank 0's per-parameter hooks (ddpb_observe.Readiness): ZeRO keeps
    # the Parameter objects (their data moves into its flat buffers), so their hooks fire

    def __init__(self, spec, announce):
        self.spec, self.announce = spec, announce
        self.prec = loop.Precision(spec, torch.device("cpu"), managed=True)
        self.clip = float(spec.get("clip_grad_norm", 0) or 0)

    def wrap(self, model):
        cls, kw, opt_config = loop.make_optimizer(self.spec, model.parameters())
        self.client = cls(model.parameters(), **kw)
        config = ds_config(self.spec)
        self.engine, _, _, _ = deepspeed.initialize(model=model, optimizer=self.client,
                                                    config=config)
        self.announce({"ds_config": config, "optimizer": opt_config,
                       "process_group": "gloo",
                       "gloo_fallbacks": ["all_gather_into_tensor -> all_gather",
                                          "reduce_scatter false"] + (
                           ["bf16 collectives carried as fp32 (gloo has no bfloat16)"]
                           if self.spec.get("precision") == "bf16" else [])})
        return self.engine, self.client

    def micro(self, k, acc):
        return loop.no_context(k, acc)

    def backward(self, loss, k, acc):
        self.engine.backward(loss)  # DeepSpeed divides by gradient_accumulation_steps
        if k < acc - 1:
            self.engine.step()  # not a boundary: DeepSpeed only counts the micro-step

    def step_begin(self):
        pass

    def step_end(self, backward_end):
        reduce_ms = self.engine.timers(BACKWARD_REDUCE_MICRO_TIMER).elapsed(reset=False)
        scale = self.engine.optimizer.cur_scale if self.spec.get("precision") == "fp16" \
            else None
        t = time.perf_counter()
        self.engine.step()
        end = time.perf_counter()
        out = {"comm_ms": reduce_ms, "comm_exposed_ms": reduce_ms, "in_backward_ms": reduce_ms,
               "optimizer_ms": (end - t) * 1000.0, "update_span": (t, end)}
        norm = self.engine.get_global_grad_norm() if self.clip > 0 else None
        if norm is not None:  # ZeRO's norm of the reduced gradients, before clipping
            out["grad_norm"] = float(norm)
        if self.spec.get("precision") == "fp16":
            out["loss_scale"] = float(scale)
            out["skipped"] = bool(getattr(self.engine.optimizer, "overflow", False))
        return out

    def all_sum(self, values):
        t = torch.tensor(values, dtype=torch.float64)
        torch.distributed.all_reduce(t)
        return t.tolist()


def train(rep, spec, rank, world):
    torch.set_num_threads(int(spec.get("threads", 1)))
    rep.heartbeat(phase="rendezvous")
    deepspeed.init_distributed(dist_backend="gloo", timeout=datetime.timedelta(
        seconds=int(spec.get("comm_timeout_s", 300))))
    ds_comm.cdb.all_gather_function = None  # gloo in torch 1.13: see the module's doc
    ds_comm.cdb.reduce_scatter_function = None
    if spec.get("precision") == "bf16":
        gloo_bf16_shim(ds_comm.cdb)
    loop.train_all("deepspeed", rep, VERSIONS, NOT_OBSERVED, spec, ddpb_torch_data.open_data(spec),
                   torch.device("cpu"), world, rank,
                   lambda announce: DeepSpeedAdapter(spec, announce))
    torch.distributed.barrier()


def main():
    return ddpb_train.run_main("deepspeed", VERSIONS, train, loop.error_code)


if __name__ == "__main__":
    ddpb_train.exit_now(main())
