#!/usr/bin/python3
"""Issue 35 items 4 and 5 measured (root, deploy/netlab.sh):

  tests/bench/bench_nodepred.py --build build [--profiles 1gbe,10gbe] [--models mnist-cnn]

Per profile, on two netlab hosts (2 CPU slots each): one collective experiment of allreduce
at 2 ranks on one node, 2 ranks on 2 nodes (one each) and 4 on 2 nodes; one training
experiment per model (ddp) at 1 rank, 2 on 2 nodes and 4 on 2 nodes. Then on the host
("host", no netlab: one daemon on loopback with 4 CPU slots): allreduce at 2 and 4 ranks,
training at 1, 2 and 4 ranks. Each time the stored results twice: as the model predicts them from every fit (GET .../results), and
from fits of at most 2 ranks (?pred_max_world=2: the 4-rank rows extrapolated from 1- and
2-rank data). Prints each row's measured and predicted step, the error, forward+backward
and exposed communication measured and predicted (where a miss comes from), pred_range
and pred_extrapolated, and the machine's load average before and after. A benchmark: it
prints figures, never pass/fail. Holds /tmp/ddpb-bench.lock while measuring."""
import argparse
import fcntl
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_netlab as bn  # noqa: E402  (its Lab: netlab up, REST from host 0)

# namespaces, addresses and ports of our own: bench_netlab.py's labs may run beside
bn.PREFIX = "ddpbnp"
bn.ENV = dict(os.environ, NETLAB_PREFIX=bn.PREFIX, NETLAB_SUBNET="10.217.0")
bn.PORT = 7650

NETLAB = [{"world_size": 2, "nodes": 1}, {"world_size": 2, "nodes": 2},
          {"world_size": 4, "nodes": 2}]
HOST = [{"world_size": 2, "nodes": 1}, {"world_size": 4, "nodes": 1}]
MODELS = {"mnist-cnn": (64, None, 60), "resnet18": (32, [3, 32, 32], 20)}


def coll_spec(places):
    return {"name": "nodepred-fits", "workload": "collective", "op": "allreduce",
            "min_bytes": "64K", "max_bytes": "16M", "factor": 4, "iters": 8, "warmup": 2,
            "timeout_s": 1800, "sweep": {"zip": places}}


def train_spec(model, places):
    batch, shape, steps = MODELS[model]
    ds = {"name": "synthetic"}
    if shape:
        ds["shape"] = shape
    return {"name": f"nodepred-{model}", "workload": "train", "model": model,
            "batch_size": batch, "steps": steps, "warmup_steps": 5, "strategy": "ddp",
            "dataset": ds, "timeout_s": 3600,
            "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9},
            "sweep": {"zip": [{"world_size": 1, "nodes": 1}] + places}}


def load():
    return " ".join(open("/proc/loadavg").read().split()[:3])


class HostLab:
    """One daemon on loopback with 4 CPU slots (tests/integration/harness.py's Daemon)."""

    def __init__(self, build):
        os.environ["DDPB_BUILD_DIR"] = os.path.abspath(build)
        sys.path.insert(0, os.path.join(bn.SOURCE, "tests", "integration"))
        import harness
        self.d = harness.Daemon(cpu_slots=4)

    def call(self, method, path, body=None):
        return self.d.get(path)

    def run(self, spec):
        exp = self.d.run_experiment(spec, timeout=3600)
        if exp["status"] != "succeeded":
            raise RuntimeError(f"experiment {exp['id']} {exp['status']}")
        return self.d.get(f"/v1/experiments/{exp['id']}/results")

    def close(self):
        self.d.close()


def measure(lab, where, places, models):
    before = load()
    first = lab.run(coll_spec(places))["experiment"]
    for model in models:
        exp = lab.run(train_spec(model, places))["experiment"]
        for query, label in (("", "all"), ("?pred_max_world=2", "<=2")):
            res = lab.call("GET", f"/v1/experiments/{exp}/results{query}")
            for r in sorted(res["rows"], key=lambda r: (r["world_size"], r["nodes"] or 0)):
                if r["world_size"] == 1:
                    continue
                err = r["pred_step_err"]
                fb = r["forward_ms"] + r["backward_ms"]
                pfb = (r["pred_forward_ms"] or 0) + (r["pred_backward_ms"] or 0)
                bn.log(f"| {where} | {model} | {r['world_size']} ({r['nodes']}) | {label} | "
                       f"{r['step_ms_mean']:.1f} | {fmt(r['pred_step_ms'])} | "
                       f"{'-' if err is None else f'{100 * err:+.1f}%'} | "
                       f"{fb:.1f} / {pfb:.1f} | {r['comm_exposed_ms']:.1f} / "
                       f"{fmt(r['pred_comm_exposed_ms'])} | "
                       f"{r['pred_range'] or r['pred_note']} | {r['pred_extrapolated']} |")
    bn.log(f"# {where}: experiments {first}..{exp}, load average before "
           f"{before}, after {load()}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--profiles", default="1gbe,10gbe,host")
    ap.add_argument("--models", default="mnist-cnn,resnet18")
    a = ap.parse_args()
    models = a.models.split(",")
    with open("/tmp/ddpb-bench.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        bn.log("| profile | model | ranks (nodes) | fits | measured ms | predicted ms | err | "
               "fwd+bwd ms meas. / pred. | exposed comm ms meas. / pred. | pred_range | "
               "extrapolated |")
        bn.log("|---|---|---|---|---|---|---|---|---|---|---|")
        for prof in a.profiles.split(","):
            lab = HostLab(a.build) if prof == "host" else bn.Lab(a.build, 2, prof)
            try:
                measure(lab, prof, HOST if prof == "host" else NETLAB, models)
            finally:
                lab.close()


def fmt(v):
    return "-" if v is None else f"{v:.1f}"


if __name__ == "__main__":
    main()
