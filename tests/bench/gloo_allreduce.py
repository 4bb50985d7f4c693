#!/usr/bin/python3
"""gloo_allreduce: the Gloo peer of tests/bench/bench_allreduce.py (Debian's python3-torch,
torch.distributed with the gloo backend over loopback).

Times dist.all_reduce (float32 sum, in place as Gloo always is) the way ddpbench's
collective workload does: one buffer allocated at the largest size and sliced per size
(no re-faulting), warmup iterations, each timed iteration measured on its own; an
iteration takes as long as its slowest rank (max over ranks), the figure is the median.
Rank 0 prints one JSON object per size: {"bytes": B, "median_us": T, "busbw_gbs": X}.

Usage: gloo_allreduce.py WORLD ITERS WARMUP SIZE...   (spawns WORLD processes itself;
CPUs to pin rank r to come from BENCH_CPUS="0,1,..." when set, else ranks are unpinned).
Each rank gets one thread: OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS in
its environment before torch is imported (tests/bench/torch_threads.py), and
torch.set_num_threads(1).
"""
import json
import os
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_threads


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank, world, port, iters, warmup, sizes):
    import torch
    import torch.distributed as dist

    cpus = os.environ.get("BENCH_CPUS")
    if cpus:
        cpu_list = [int(c) for c in cpus.split(",")]
        os.sched_setaffinity(0, {cpu_list[rank % len(cpu_list)]})
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    max_count = max(max(sizes) // 4, 1)
    buf = torch.zeros(max_count, dtype=torch.float32)
    buf.fill_(1.0)  # touch every page before timing
    for size in sizes:
        count = max(size // 4, 1)
        t = buf[:count]
        for _ in range(warmup):
            dist.all_reduce(t)
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            dist.all_reduce(t)
            times.append(time.perf_counter() - t0)
        tt = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(tt, op=dist.ReduceOp.MAX)
        if rank == 0:
            med = statistics.median(tt.tolist())
            busbw = count * 4 / med / 1e9 * 2 * (world - 1) / world
            print(json.dumps({"bytes": count * 4, "median_us": med * 1e6,
                              "busbw_gbs": busbw}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--rank":
        rank, world, port, iters, warmup = (int(x) for x in sys.argv[2:7])
        rank_main(rank, world, port, iters, warmup, [int(s) for s in sys.argv[7:]])
        return 0
    if len(sys.argv) < 5:
        print(__doc__, file=sys.stderr)
        return 2
    import subprocess
    world, iters, warmup = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    sizes = sys.argv[4:]
    port = free_port()
    env = torch_threads.thread_env(1, dict(os.environ, GLOO_SOCKET_IFNAME="lo"))
    procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), str(world), str(port),
                               str(iters), str(warmup)] + sizes, env=env)
             for r in range(world)]
    rc = 0
    for p in procs:
        rc |= p.wait()
    return rc


if __name__ == "__main__":
    sys.exit(main())
