#!/usr/bin/python3
"""Accuracy of ddpbench's training against PyTorch's on a real dataset (issue: CPU training).

mnist-cnn (the classic pytorch/examples MNIST network) on Fashion-MNIST (Debian's
dataset-fashion-mnist), 1 rank, batch BATCH (64 by default; --batch 64,128 runs both), SGD
lr 0.01 momentum 0.5, normalisation (0.2860, 0.3530), reshuffled every epoch, EPOCHS
epochs, for each seed:
  - PyTorch (Debian's python3-torch, 1 thread in torch.set_num_threads and in
    OMP_NUM_THREADS / OPENBLAS_NUM_THREADS before torch is imported): the same network and
    loop as the pytorch/examples script (train mode with dropout, the last partial batch
    trained as DataLoader's default does, eval on the whole test split); --torch-drop-last
    drops that batch as ddpbench does (a control for the comparison);
  - ddpbench: one experiment through a real ddpbenchd (a sweep over the seeds), the test
    accuracy read back from GET /v1/runs/{id} (epochs).
Prints a per-epoch table per batch size: mean, standard deviation and min over seeds, the
difference of the means and a verdict: "tie" when the difference is inside the seed spread
(smaller than the larger of the two standard deviations over seeds), else which is ahead.
With --json, writes everything. The CI threshold in tests/integration/test_train.py is
taken from these figures.

  tests/bench/train_accuracy.py --build build [--epochs 3] [--seeds 1,2,3] [--batch 64,128]
                                [--only torch|ddpbench] [--torch-drop-last] [--json out]
"""
import argparse, gzip, json, os, statistics, struct, subprocess, sys, tempfile, time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_threads

torch_threads.set_before_import(1)  # torch is imported later, by torch_run
DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic, n = struct.unpack(">II", raw[:8])
    dims = [n] + [struct.unpack(">I", raw[8 + 4 * i:12 + 4 * i])[0] for i in range(magic % 256 - 1)]
    return raw[8 + 4 * (len(dims) - 1):], dims


def torch_run(seed, epochs, batch, drop_last):
    import torch, torch.nn.functional as F
    from nn_bench_torch import MnistCnn
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    def load(split):
        x, dims = read_idx(f"{DATA}/{split}-images-idx3-ubyte.gz")
        y, _ = read_idx(f"{DATA}/{split}-labels-idx1-ubyte.gz")
        xt = torch.frombuffer(bytearray(x), dtype=torch.uint8).float().div(255).view(dims[0], 1, 28, 28)
        return (xt - 0.2860) / 0.3530, torch.frombuffer(bytearray(y), dtype=torch.uint8).long()
    xtr, ytr = load("train")
    xte, yte = load("t10k")
    model = MnistCnn(1, 28, 28, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    out = []
    for ep in range(epochs):
        model.train()
        perm = torch.randperm(len(xtr))
        t0 = time.time()
        end = len(xtr) - len(xtr) % batch if drop_last else len(xtr)
        for i in range(0, end, batch):
            idx = perm[i:i + batch]
            opt.zero_grad()
            loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
        secs = time.time() - t0
        model.eval()
        right = 0
        with torch.no_grad():
            for i in range(0, len(xte), 1000):
                right += (model(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum().item()
        out.append({"epoch": ep, "test_acc": right / len(xte), "time_s": secs})
        print(f"  torch batch {batch} seed {seed} epoch {ep}: test acc {right / len(xte):.4f} ({secs:.1f} s)",
              flush=True)
    return out


def ddpb_run(build, seeds, epochs, batch):
    state = tempfile.mkdtemp(prefix="ddpb-acc-")
    d = subprocess.Popen([f"{build}/daemon/ddpbenchd", "--port", "0", "--state-dir", state,
                          "--cpu-slots", "1"], stdout=subprocess.PIPE, text=True)
    line = d.stdout.readline()
    url = line.split("listening on ")[1].split()[0]
    try:
        spec = {"name": "fashion-mnist accuracy", "workload": "train", "model": "mnist-cnn",
                "dataset": {"name": "fashion-mnist"}, "batch_size": batch, "epochs": epochs,
                "warmup_steps": 0, "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.5},
                "timeout_s": 3600, "sweep": {"seed": seeds}}
        req = urllib.request.Request(f"{url}/v1/experiments", json.dumps(spec).encode(),
                                     {"Content-Type": "application/json"})
        exp = json.load(urllib.request.urlopen(req))
        while True:
            e = json.load(urllib.request.urlopen(f"{url}/v1/experiments/{exp['id']}"))
            if e["status"] not in ("queued", "running"):
                break
            time.sleep(2)
        out = {}
        for r in e["runs"]:
            run = json.load(urllib.request.urlopen(f"{url}/v1/runs/{r['id']}"))
            if run["status"] != "succeeded":
                raise SystemExit(f"run {r['id']} {run['status']}: {run['error']}")
            seed = run["spec"]["seed"]
            out[seed] = [{"epoch": x["epoch"], "test_acc": x["test_acc"], "time_s": x["time_s"]}
                         for x in run["epochs"]]
            for x in out[seed]:
                print(f"  ddpbench batch {batch} seed {seed} epoch {x['epoch']}: test acc {x['test_acc']:.4f} "
                      f"({x['time_s']:.1f} s)", flush=True)
        return out
    finally:
        d.terminate()
        d.wait()


def verdict(t, d):
    """"tie" when the difference of the means is inside the seed spread (the larger of the
    two sample standard deviations over seeds), else who is ahead and by how much."""
    if min(len(t), len(d)) < 2:
        return "no verdict (one seed has no spread)"
    diff = statistics.mean(d) - statistics.mean(t)
    if abs(diff) <= max(statistics.stdev(t), statistics.stdev(d)):
        return "tie"
    return f"{'ddpbench' if diff > 0 else 'PyTorch'} ahead"


def summary(v):
    sd = f"{statistics.stdev(v):.4f}" if len(v) > 1 else "-"
    return f"{statistics.mean(v):.4f} ± {sd} ({min(v):.4f})"


def report(res, batches, seeds, epochs):
    for b in batches:
        t_res, d_res = res["torch"].get(b, {}), res["ddpbench"].get(b, {})
        print(f"\n### batch {b}, {len(seeds)} seeds: test accuracy, mean ± sd over seeds (min)\n")
        print("| epoch | PyTorch | ddpbench | ddpbench - PyTorch | verdict |")
        print("|---|---|---|---|---|")
        for ep in range(epochs):
            t = [t_res[s][ep]["test_acc"] for s in seeds if s in t_res]
            d = [d_res[s][ep]["test_acc"] for s in seeds if s in d_res]
            both = t and d
            print(f"| {ep + 1} | {summary(t) if t else '-'} | {summary(d) if d else '-'} | "
                  + (f"{statistics.mean(d) - statistics.mean(t):+.4f} | {verdict(t, d)} |"
                     if both else "- | - |"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--batch", default="64", help="comma-separated batch sizes")
    ap.add_argument("--only", choices=["torch", "ddpbench"])
    ap.add_argument("--torch-drop-last", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    batches = [int(b) for b in a.batch.split(",")]
    res = {"torch": {}, "ddpbench": {}, "torch_drop_last": a.torch_drop_last,
           "threads": torch_threads.describe(), "date": time.strftime("%Y-%m-%d %H:%M")}
    for b in batches:
        if a.only != "ddpbench":
            res["torch"][b] = {s: torch_run(s, a.epochs, b, a.torch_drop_last) for s in seeds}
        if a.only != "torch":
            res["ddpbench"][b] = ddpb_run(a.build, seeds, a.epochs, b)
    report(res, batches, seeds, a.epochs)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
