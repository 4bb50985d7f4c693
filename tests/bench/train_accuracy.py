#!/usr/bin/python3
"""Accuracy of ddpbench's training against PyTorch's on a real dataset (issue: CPU training).

mnist-cnn (the classic pytorch/examples MNIST network) on Fashion-MNIST (Debian's
dataset-fashion-mnist), 1 rank, batch 64, SGD lr 0.01 momentum 0.5, normalisation
(0.2860, 0.3530), reshuffled every epoch, EPOCHS epochs, for each seed:
  - PyTorch (Debian's python3-torch, 1 thread): the same network and loop as the
    pytorch/examples script (train mode with dropout, eval on the whole test split);
  - ddpbench: one experiment through a real ddpbenchd (a sweep over the seeds), the test
    accuracy read back from GET /v1/runs/{id} (epochs).
Prints a per-epoch table (mean and min over seeds) and, with --json, writes everything.
The CI threshold in tests/integration/test_train.py is taken from these figures.

  tests/bench/train_accuracy.py --build build [--epochs 3] [--seeds 1,2,3] [--json out]
"""
import argparse, gzip, json, os, struct, subprocess, sys, tempfile, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic, n = struct.unpack(">II", raw[:8])
    dims = [n] + [struct.unpack(">I", raw[8 + 4 * i:12 + 4 * i])[0] for i in range(magic % 256 - 1)]
    return raw[8 + 4 * (len(dims) - 1):], dims


def torch_run(seed, epochs):
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
        for i in range(0, len(xtr), 64):
            idx = perm[i:i + 64]
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
        print(f"  torch seed {seed} epoch {ep}: test acc {right / len(xte):.4f} ({secs:.1f} s)",
              flush=True)
    return out


def ddpb_run(build, seeds, epochs):
    state = tempfile.mkdtemp(prefix="ddpb-acc-")
    d = subprocess.Popen([f"{build}/daemon/ddpbenchd", "--port", "0", "--state-dir", state,
                          "--cpu-slots", "1"], stdout=subprocess.PIPE, text=True)
    line = d.stdout.readline()
    url = line.split("listening on ")[1].split()[0]
    try:
        spec = {"name": "fashion-mnist accuracy", "workload": "train", "model": "mnist-cnn",
                "dataset": {"name": "fashion-mnist"}, "batch_size": 64, "epochs": epochs,
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
                print(f"  ddpbench seed {seed} epoch {x['epoch']}: test acc {x['test_acc']:.4f} "
                      f"({x['time_s']:.1f} s)", flush=True)
        return out
    finally:
        d.terminate()
        d.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--json")
    a = ap.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    res = {"torch": {}, "ddpbench": {}}
    for s in seeds:
        res["torch"][s] = torch_run(s, a.epochs)
    res["ddpbench"] = ddpb_run(a.build, seeds, a.epochs)
    print("\n| epoch | PyTorch test acc, mean (min) | ddpbench test acc, mean (min) |")
    print("|---|---|---|")
    for ep in range(a.epochs):
        t = [res["torch"][s][ep]["test_acc"] for s in seeds]
        d = [res["ddpbench"][s][ep]["test_acc"] for s in seeds]
        print(f"| {ep + 1} | {sum(t) / len(t):.4f} ({min(t):.4f}) | {sum(d) / len(d):.4f} ({min(d):.4f}) |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
