"""ddpb_collective: a `"workload": "collective"` run on engine pytorch (issue 35): the
collective the framework engines exchange over, torch.distributed's gloo, timed as the C
worker times its own (worker/workload_collective.c) and reported in its report lines
(common/report.h "collective"), so the daemon stores and fits them as backend "gloo" (the
network fits of the pytorch, lightning, deepspeed and horovod engines' rows).

Per message size: the buffers once, `warmup` untimed iterations, then `iters` timed ones,
each on its own perf_counter; the first and last are checked (inputs restored before, the
result compared after, outside the timing). Each iteration's time is the slowest rank's
(an allreduce of MAX over the ranks' times, after the size), and rank 0 reports min,
median, p95, mean and max of those with algbw and busbw from the median, as the C worker.

Decisions:
- Sizes are the C worker's (spec_collective_sizes): `sizes` when given, else min_bytes to
  max_bytes by factor or step. all_gather's bytes are the whole gathered buffer (world
  blocks), as nccl-tests and the C worker count them; each rank gives one block.
- redop avg is gloo's sum divided once by world_size inside the timed operation (gloo has
  no AVG); torch 1.13's gloo has no reduce_scatter (the spec refuses it, rule 16).
- The algorithm is gloo's own choice, which torch does not report: "gloo".

Ownership: nothing outlives a size but the reported figures."""
import statistics
import time

import torch
import torch.distributed as dist

DTYPES = {"float32": torch.float32, "float16": torch.float16, "int32": torch.int32,
          "int64": torch.int64}
REDOPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN,
          "max": dist.ReduceOp.MAX}
BUSBW = {"allreduce": lambda n: 2.0 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
         "broadcast": lambda n: 1.0}


def sizes_of(spec):
    """The message sizes of spec, in order (common/spec_parse.c spec_collective_sizes)."""
    if spec.get("sizes"):
        return [int(s) for s in spec["sizes"]]
    lo, hi = int(spec.get("min_bytes", 4096)), int(spec.get("max_bytes", 64 << 20))
    factor, step = int(spec.get("factor", 2) or 0), int(spec.get("step", 0) or 0)
    out, s = [], lo
    while s <= hi and (factor >= 2 or step >= 1):
        out.append(s)
        s = s * factor if factor >= 2 else s + step
    return out


def percentile(sorted_v, q):
    """The q-quantile by linear interpolation (common/stats.c's p95)."""
    pos = q * (len(sorted_v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_v) - 1)
    return sorted_v[lo] + (sorted_v[hi] - sorted_v[lo]) * (pos - lo)


class Point:
    """One message size of op: its buffers, the operation, and its check."""

    def __init__(self, spec, rank, world, nbytes):
        self.op, self.world, self.rank = spec.get("op", "allreduce"), world, rank
        self.redop = spec.get("redop", "sum")
        self.dtype = DTYPES[spec.get("dtype", "float32")]
        self.inplace = bool(spec.get("inplace", False))
        elem = torch.tensor([], dtype=self.dtype).element_size()
        count = max(1, nbytes // elem)
        if self.op == "all_gather":  # the whole buffer: one block per rank
            count = max(world, count - count % world)
        self.count, self.bytes = count, count * elem
        block = count // world if self.op == "all_gather" else count
        idx = torch.arange(block, dtype=torch.int64) % 13
        self.pristine = (idx + rank + 1).to(self.dtype)
        self.src = self.pristine.clone()
        self.out = [torch.empty(block, dtype=self.dtype) for _ in range(world)] \
            if self.op == "all_gather" else None

    def restore(self):
        self.src.copy_(self.pristine)

    def run(self):
        if self.op == "allreduce":
            dist.all_reduce(self.src, op=REDOPS[self.redop])
            if self.redop == "avg":
                self.src.div_(self.world, rounding_mode=None if self.dtype.is_floating_point
                              else "trunc")
        elif self.op == "all_gather":
            dist.all_gather(self.out, self.src)
        else:
            dist.broadcast(self.src, src=0)

    def wrong(self):
        """Elements of the result that differ from what the op must give."""
        idx = (torch.arange(self.pristine.numel(), dtype=torch.int64) % 13).to(torch.float64)
        n = self.world
        if self.op == "allreduce":
            want = {"sum": n * idx + n * (n + 1) / 2, "avg": (n * idx + n * (n + 1) / 2) / n,
                    "min": idx + 1, "max": idx + n}[self.redop]
            if self.redop == "avg" and not self.dtype.is_floating_point:
                want = torch.trunc(want)
            got = [self.src]
            wants = [want]
        elif self.op == "all_gather":
            got = self.out
            wants = [idx + r + 1 for r in range(n)]
        else:
            got, wants = [self.src], [idx + 1]
        tol = 1e-2 if self.dtype == torch.float16 else 1e-6
        return int(sum(int((g.to(torch.float64) - w).abs().gt(tol * w.abs().clamp(min=1)).sum())
                       for g, w in zip(got, wants)))


def point(rep, spec, rank, world, repeat, nbytes):
    """One size: warm-up, timed iterations, the slowest rank's times; rank 0 reports."""
    p = Point(spec, rank, world, nbytes)
    iters, warmup = int(spec.get("iters", 20)), int(spec.get("warmup", 5))
    check = bool(spec.get("check", True))
    for _ in range(warmup):
        p.restore()
        p.run()
    times, wrong = [], 0
    for i in range(iters):
        checked = check and (i == 0 or i == iters - 1)
        p.restore()  # untimed, as the C worker's poisoning and inputs
        t0 = time.perf_counter()
        p.run()
        times.append(time.perf_counter() - t0)
        if checked:
            wrong += p.wrong()
            dist.barrier()  # the check's untimed work ends together
    slow = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(slow, op=dist.ReduceOp.MAX)
    bad = torch.tensor([wrong], dtype=torch.int64)
    dist.all_reduce(bad)
    if rank != 0:
        return
    us = sorted(t * 1e6 for t in slow.tolist())
    med = statistics.median(us)
    algbw = p.bytes / (med * 1e-6) / 1e9 if med > 0 else 0.0
    rep.emit("collective", repeat=repeat, op=p.op, dtype=spec.get("dtype", "float32"),
             redop=p.redop, algorithm="gloo", inplace=p.inplace, bytes=int(p.bytes),
             count=int(p.count), iters=iters, time_us_min=us[0], time_us_median=med,
             time_us_p95=percentile(us, 0.95), time_us_mean=sum(us) / len(us),
             time_us_max=us[-1], algbw_gbs=algbw, busbw_gbs=algbw * BUSBW[p.op](world),
             wrong=int(bad.item()))


def run(rep, spec, rank, world):
    """Every repeat of every size, over the process group already formed."""
    sizes = sizes_of(spec)
    total = int(spec.get("repeats", 1)) * len(sizes)
    done = 0
    for repeat in range(int(spec.get("repeats", 1))):
        for nbytes in sizes:
            rep.heartbeat(phase="collective", progress=done)
            point(rep, spec, rank, world, repeat, nbytes)
            done += 1
    rep.heartbeat(phase="collective", progress=total)
