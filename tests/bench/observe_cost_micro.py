#!/usr/bin/env python3
"""The engines' observing code's own time, measured directly (bench_observe.py's end-to-end
parts cannot resolve 2 % on a loaded machine): (a) the Tracer calls of one traced step of
pytorch's shape (6 spans, 2 bucket ops, the trace line written to /dev/null), averaged over
3000 steps; (b) mnist-cnn's backward with rank 0's readiness hooks (ddpb_observe.Readiness)
against without, blocks of 20 alternating, medians. One process, one thread.

  .venv/bin/python tests/bench/observe_cost_micro.py    -> one JSON line

A benchmark: figures, never pass/fail."""
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "engines"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import ddpb_observe  # noqa: E402
import ddpb_report  # noqa: E402
import ddpb_torch_models as zoo  # noqa: E402

STEPS = 3000
SPANS = ("data", "forward", "backward", "comm_exposed", "comm_exposed", "optimizer")


def tracer_us(rep):
    """Microseconds of one traced step's Tracer calls."""
    tr, t0 = None, time.perf_counter()
    for i in range(STEPS):
        if i % 100 == 0:  # a repeat's window is at most 100 steps
            tr = ddpb_observe.Tracer({"warmup_steps": 0, "trace_steps": 100}, 0)
        tr.begin(i % 100, i)
        a = time.perf_counter()
        for name in SPANS:
            tr.span(name, a, a + 1e-3)
        tr.op("allreduce", 0, 400000, "?", 1, 2)
        tr.op("allreduce", 1, 400000, "?", 3, 4)
        tr.end(rep, a, a + 0.01)
    return (time.perf_counter() - t0) / STEPS * 1e6


def backward_s(m, x, y, ready):
    loss = F.cross_entropy(m(x), y)
    t = time.perf_counter()
    if ready:
        ready.begin(t)
    loss.backward()
    e = time.perf_counter()
    if ready:
        ready.end((e - t) * 1e9)
    m.zero_grad(set_to_none=True)
    return e - t


def main():
    torch.set_num_threads(1)
    rep = ddpb_report.Reporter(0, 2, stream=open(os.devnull, "w"))
    m = zoo.build("mnist-cnn", 1, 28, 28, 10)
    x, y = torch.randn(32, 1, 28, 28), torch.randint(0, 10, (32,))
    on, off = [], []
    for _ in range(20):
        ready = ddpb_observe.Readiness(m.parameters(), steps=10**6)
        on += [backward_s(m, x, y, ready) for _ in range(20)]
        ready.remove()
        off += [backward_s(m, x, y, None) for _ in range(20)]
    print(json.dumps({"tracer_us_per_traced_step": round(tracer_us(rep), 1),
                      "backward_ms_off": round(statistics.median(off) * 1e3, 3),
                      "backward_ms_on": round(statistics.median(on) * 1e3, 3),
                      "hooks_us_per_step": round((statistics.median(on) -
                                                  statistics.median(off)) * 1e6, 1),
                      "parameter_tensors": len(list(m.parameters()))}))


if __name__ == "__main__":
    main()
