#!/usr/bin/env python3
"""Issue 36's layer table: where a training step's time goes, ddpbench against PyTorch, by
layer kind (convolutions by shape). Reads the outputs of `nn_bench ... --layers` and
`nn_bench_torch.py ... --layers` saved as DIR/<side>-<model>-<round>.txt (side: any
prefix, e.g. base, new, torch) and prints one markdown table per model: per row and side,
forward and backward milliseconds per step, the median over rounds of each round's sum.

  nn_layer_table.py DIR MODEL SIDE [SIDE...]

ddpbench rows come from its per-layer clock (the layer's reorders inside); PyTorch rows
from torch.profiler self CPU times (its reorders are inside mkldnn_convolution). "step" is
each program's own median step time, without profiling for PyTorch."""
import glob, re, statistics, sys
from collections import defaultdict

TORCH_FWD = {
    "aten::mkldnn_convolution": "conv", "aten::native_batch_norm": "batchnorm",
    "aten::clamp_min": "relu", "aten::clamp_min_": "relu", "aten::relu_": "relu",
    "aten::max_pool2d_with_indices": "pool", "aten::adaptive_avg_pool2d": "pool",
    "aten::mean": "pool", "aten::addmm": "linear", "aten::_log_softmax": "loss",
    "aten::nll_loss_forward": "loss", "aten::bernoulli_": "dropout", "aten::div_": "dropout",
    "aten::mul": "dropout"}
TORCH_BWD = {
    "aten::convolution_backward": "conv", "aten::native_batch_norm_backward": "batchnorm",
    "aten::threshold_backward": "relu", "aten::max_pool2d_with_indices_backward": "pool",
    "aten::mean_backward": "pool", "aten::mm": "linear", "aten::sum": "linear",
    "aten::_log_softmax_backward_data": "loss", "aten::nll_loss_backward": "loss"}
DDPB_KIND = {"conv2d": "conv", "batchnorm": "batchnorm", "act": "relu", "maxpool": "pool",
             "avgpool": "pool", "gavgpool": "pool", "adaptive_avgpool": "pool",
             "linear": "linear", "add": "add", "dropout": "dropout", "flatten": "flatten"}


def dims(s):
    return [int(v) for v in s.split("x")]


def conv_key(inp, w):
    """'64->128 3x3 in 8x8' from the input (NCHW) and the weight (OIHW) shapes."""
    return f"conv {w[1]}->{w[0]} {w[2]}x{w[3]} in {inp[2]}x{inp[3]}"


LAYER = re.compile(r"layer +(\d+) (\S+) +(\S+) +(\S+) +-> +(\S+) +(k(\d+)x(\d+)/s\d+)? *"
                   r"fwd +([\d.]+) bwd +([\d.]+)")
OLD_LAYER = re.compile(r"layer +(\d+) (\S+) +(\S+) +(\S+) +fwd +([\d.]+) bwd +([\d.]+)")


def layer_kinds(paths):
    """Layer index -> row name, from any output with input shapes and kernels (an older
    nn_bench printed neither: its lines are named by index through these)."""
    for path in paths:
        kinds = {}
        for line in open(path):
            m = LAYER.match(line)
            if not m:
                continue
            kind = DDPB_KIND.get(m.group(3), m.group(3))
            if kind == "conv":
                i, o = dims(m.group(4)), dims(m.group(5))
                kind = conv_key(i, [o[1], i[1], int(m.group(7)), int(m.group(8))])
            kinds[int(m.group(1))] = kind
        if kinds:
            return kinds
    return {}


def read_ddpb(path, kinds):
    rows, step = defaultdict(lambda: [0.0, 0.0]), None
    for line in open(path):
        m = re.match(r"ddpbench .*median ([\d.]+) ms/step.*forward ([\d.]+), "
                     r"loss\+backward ([\d.]+), optimizer ([\d.]+)", line)
        if m:
            step = float(m.group(1))
            rows["optimizer"][0] += float(m.group(4))
            fw, lb = float(m.group(2)), float(m.group(3))
            continue
        m = LAYER.match(line)
        if m:
            idx, fwd, bwd = int(m.group(1)), float(m.group(9)), float(m.group(10))
        else:
            m = OLD_LAYER.match(line)
            if not m:
                continue
            idx, fwd, bwd = int(m.group(1)), float(m.group(5)), float(m.group(6))
        kind = kinds.get(idx, DDPB_KIND.get(m.group(3), m.group(3)))
        rows[kind][0] += fwd
        rows[kind][1] += bwd
    if step is not None:
        fl = sum(v[0] for k, v in rows.items() if k != "optimizer")
        rows["loss (ddpb: loss+backward phase minus the layers)"][1] += lb - sum(
            v[1] for k, v in rows.items())
        rows["zero_grad (ddpb: forward phase minus the layers)"][0] += fw - fl
    return rows, step


def read_torch(path):
    rows, step, batch = defaultdict(lambda: [0.0, 0.0]), None, 0
    for line in open(path):
        m = re.match(r"torch .* batch (\d+) .*median ([\d.]+) ms/step", line)
        if m:
            batch, step = int(m.group(1)), float(m.group(2))
            continue
        m = re.match(r"total (Optimizer\.\S+) +([\d.]+) ms", line)
        if m:
            rows["optimizer" if "step" in m.group(1) else "zero_grad"][0] += float(m.group(2))
            continue
        m = re.match(r"op (\S+(?: \S+)*?) +((?:[\dx]+;?)*) +calls +[\d.]+ self +([\d.]+) ms",
                     line)
        if not m:
            continue
        op, shapes, ms = m.group(1), [dims(s) for s in m.group(2).split(";") if s], \
            float(m.group(3))
        pas, kind = (0, TORCH_FWD.get(op)) if op in TORCH_FWD else (1, TORCH_BWD.get(op))
        act = shapes and len(shapes[0]) == 4 and shapes[0][0] == batch  # not a weight
        if op == "aten::add" and act:  # the residual sum, out of place
            pas, kind = 0, "add"
        elif op == "aten::add_" and act:  # autograd summing a branch's gradients
            pas, kind = 1, "add"
        if kind == "conv":
            inp, w = (shapes[0], shapes[1]) if pas == 0 else (shapes[1], shapes[2])
            kind = conv_key(inp, w)
        if kind is None:
            kind = "other (autograd, allocation, ...)"
            pas = 1
        rows[kind][pas] += ms
    return rows, step


def files(d, side, model):
    """DIR/SIDE-MODEL-ROUND.txt, ROUND a number (resnet18 is not resnet18-cifar)."""
    pat = re.compile(re.escape(model) + r"-\d+\.txt$")
    return sorted(f for f in glob.glob(f"{d}/{side}-{model}-*.txt") if pat.search(f))


def main():
    d, model, sides = sys.argv[1], sys.argv[2], sys.argv[3:]
    per = {}
    kinds = layer_kinds(files(d, "*", model))
    for side in sides:
        runs = [read_torch(f) if side == "torch" else read_ddpb(f, kinds)
                for f in files(d, side, model)]
        per[side] = runs
    keys = []
    for side in sides:
        for rows, _ in per[side]:
            keys += [k for k in rows if k not in keys]
    convs = sorted((k for k in keys if k.startswith("conv")),
                   key=lambda k: -max(statistics.median(sum(r[0].get(k, [0, 0])) for r in
                                                        per[s]) for s in sides if per[s]))
    rest = [k for k in keys if not k.startswith("conv")]
    print(f"| {model} | " + " | ".join(f"{s} fwd | {s} bwd" for s in sides) + " |")
    print("|---|" + "---|---|" * len(sides))

    def med(side, k, p):
        v = [r[0][k][p] if k in r[0] else 0.0 for r in per[side]]
        return statistics.median(v) if v else float("nan")

    for k in convs + ["conv (all)"] + rest:
        cells = []
        for s in sides:
            for p in (0, 1):
                if k == "conv (all)":
                    v = [sum(r[0][c][p] for c in r[0] if c.startswith("conv")) for r in per[s]]
                    cells.append(f"**{statistics.median(v):.2f}**" if v else "")
                else:
                    cells.append(f"{med(s, k, p):.2f}")
        print(f"| {k} | " + " | ".join(cells) + " |")
    steps = [f"{statistics.median([st for _, st in per[s] if st is not None]):.1f}"
             for s in sides if per[s]]
    print(f"| **step (median, ms)** | " + " | ".join(f"**{v}** | " for v in steps) + " |")


if __name__ == "__main__":
    main()
