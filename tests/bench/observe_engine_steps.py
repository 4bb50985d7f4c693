#!/usr/bin/env python3
"""One rank of bench_observe.py --part steps: the engines' real loop (ddpb_torch_loop.one_step
with engine_pytorch's or engine_horovod's adapter) alternating blocks of steps observed
(every step traced, rank 0's readiness hooks on; Horovod's timeline recording, read between
blocks as after a repeat) and unobserved (nothing), in one process group, 4 blocks of each
arm a round, so the machine's load drifts into both arms alike. Run by torchrun (pytorch) or horovodrun (horovod):

  observe_engine_steps.py ENGINE ROUNDS BLOCK_STEPS

Prints, on rank 0, one line "OBSERVE-STEPS " + JSON {"engine", "rounds": [[[unobserved_ms,
observed_ms] per QUANTILES], ...]} (each the quantile of the round's steps of that arm); the adapters' own report
lines (hello, heartbeats) go to stdout too, the traced steps' to /dev/null."""
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "engines"))
ENGINE, ROUNDS, BLOCK = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

import ddpb_report  # noqa: E402

SPEC = {"workload": "train", "model": "mnist-cnn", "batch_size": 32, "threads": 1,
        "dataset": {"name": "synthetic", "shape": [1, 28, 28], "classes": 10, "samples": 65536},
        "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9}, "warmup_steps": 0,
        "trace_steps": 100, "steps": 1 << 20, "engine": ENGINE,
        "strategy": "horovod" if ENGINE == "horovod" else "ddp"}


# the step-time quantiles compared: the median, and the 20th percentile, which the load of
# a shared machine (additive: it only ever slows a step) moves least
QUANTILES = (0.5, 0.2)


def quantile(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def main():
    import torch
    torch.set_num_threads(1)
    import ddpb_data
    import ddpb_observe
    import ddpb_torch_loop as loop
    import ddpb_train
    if ENGINE == "horovod":
        os.environ["HOROVOD_TIMELINE"] = "DYNAMIC"
        import engine_horovod as eng
        eng.hvd.init()
        rank, world = eng.hvd.rank(), eng.hvd.size()
        adapter = eng.HorovodAdapter(SPEC, lambda c: None, {})
    else:
        import torch.distributed as dist
        import engine_pytorch as eng
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        dist.init_process_group("gloo", rank=rank, world_size=world)
        adapter = eng.DdpAdapter(SPEC, world, torch.device("cpu"), lambda c: None)
    rep = ddpb_report.Reporter(rank, world, stream=open(os.devnull, "w"))
    data = ddpb_data.Data(SPEC)
    model = loop.build_model(SPEC, data, torch.device("cpu"), 1)
    module, opt = adapter.wrap(model)
    it = data.batches(0, world, rank, 32, seed=1)
    tally = ddpb_train.Tally()
    step, rounds = 0, []

    def block(observed):
        nonlocal step
        tracer = ddpb_observe.Tracer(SPEC, 0) if observed else loop.NO_TRACE
        ready = ddpb_observe.Readiness(model.parameters()) if observed and rank == 0 else None
        hold = loop.trace_window(adapter, tracer, True) if observed else False
        times = []
        for k in range(BLOCK):
            tracer.begin(0, step)
            _, ms, _, _ = loop.one_step(module, adapter, it, torch.device("cpu"), 1, tally,
                                        False, tracer, ready, rep, hold)
            times.append(ms)
            step += 1
        if observed:  # between blocks, as after a repeat: not a step's time
            loop.trace_window(adapter, tracer, False)
            if tracer.held:
                adapter.trace_finish(tracer)
                tracer.emit_held(rep)
            if ready is not None:
                ready.emit(rep, 0)
        return times

    block(False)  # warm-up
    for r in range(ROUNDS):  # a round: 4 blocks of each arm, alternating
        got = {False: [], True: []}
        for j in range(8):
            observed = (j + r) % 2 == 1
            got[observed] += block(observed)
        rounds.append([[quantile(got[False], q), quantile(got[True], q)] for q in QUANTILES])
    if rank == 0:
        print("OBSERVE-STEPS " + json.dumps({"engine": ENGINE, "rounds": rounds}), flush=True)
    if ENGINE == "horovod":
        eng.hvd.shutdown()


if __name__ == "__main__":
    main()
