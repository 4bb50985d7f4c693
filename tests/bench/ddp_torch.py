#!/usr/bin/python3
"""PyTorch peer of ddpbench's training benchmarks (tests/bench/bench_train.py).

  ddp_torch.py MODEL BATCH WORLD STEPS WARMUP [--threads T] [--shape C,H,W] [--no-ddp]

WORLD processes (torch.multiprocessing) join a gloo process group over loopback and train
MODEL (the zoo of nn_bench_torch.py, written as torchvision writes it) with
DistributedDataParallel (bucket_cap_mb 25, PyTorch's default) on one fixed random batch
per rank (the synthetic mode of Horovod and tf_cnn_benchmarks, as ddpbench's
"synthetic" dataset), SGD lr 0.01 momentum 0.9. --no-ddp trains a plain model (WORLD 1
only): PyTorch's single-process speed. Prints one JSON line: throughput in images/s over
the timed steps = WORLD * BATCH * STEPS / wall time of rank 0 (every DDP step ends in an
allreduce, so rank 0's time is the slowest rank's), and the median step time.
Run it with Debian's interpreter and the glibc settings that keep freed memory
(MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=4294967296), as the other peers. Every process
gets T in OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS before torch is imported
(tests/bench/torch_threads.py), besides torch.set_num_threads(T)."""
import argparse, json, os, socket, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_threads


def worker(rank, a, port, out):
    import torch, torch.distributed as dist, torch.nn.functional as F
    from nn_bench_torch import build
    torch.set_num_threads(a.threads)
    c, h, w = (int(v) for v in a.shape.split(","))
    torch.manual_seed(1)
    model = build(a.model, c, h, w, 10)
    if not a.no_ddp:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=a.world)
        model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25)
    torch.manual_seed(100 + rank)
    x = torch.randn(a.batch, c, h, w)
    y = torch.randint(0, 10, (a.batch,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model.train()
    times = []
    for s in range(a.warmup + a.steps):
        t = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        if s >= a.warmup:
            times.append(time.perf_counter() - t)
    if rank == 0:
        times.sort()
        out.put({"throughput": a.world * a.batch * len(times) / sum(times),
                 "step_ms_median": times[len(times) // 2] * 1e3})
    if not a.no_ddp:
        dist.barrier()
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("batch", type=int)
    ap.add_argument("world", type=int)
    ap.add_argument("steps", type=int)
    ap.add_argument("warmup", type=int)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--shape", default=None)
    ap.add_argument("--no-ddp", action="store_true")
    a = ap.parse_args()
    if not a.shape:
        a.shape = "1,28,28" if a.model in ("mnist-cnn", "lenet5") else "3,32,32"
    torch_threads.set_before_import(a.threads)  # inherited by the spawned ranks
    import torch.multiprocessing as mp
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, a, port, q)) for r in range(a.world)]
    for p in procs:
        p.start()
    res = q.get(timeout=1800)
    for p in procs:
        p.join()
    print(json.dumps(res))


if __name__ == "__main__":
    main()
