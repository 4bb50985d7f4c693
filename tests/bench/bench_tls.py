#!/usr/bin/python3
"""Issue 31's TLS cost: the same 2-node loopback cluster (a leader and a follower that
joins it, tests/integration/harness.py) once over TLS (--tls-cert/--tls-key, followers
--join https:// with --join-ca) and once in plain HTTP, the modes interleaved round by
round:

  tests/bench/bench_tls.py [--build build] [--rounds 3] [--latency-n 20]

latency: POST /v1/experiments -> the experiment read back as succeeded, for a tiny
  collective run (allreduce, 2 ranks on 1 node, 4 KiB, 2 iterations), polled every
  10 ms by the same client; --latency-n submissions per mode per round, the median.
busbw: a 2-rank allreduce with one rank on each node (nodes 2), 64 KiB to 16 MiB, the
  daemons' median busbw per size.
ddp: DDP step time (strategy ddp) of mnist-cnn, batch 32, 2 ranks on 2 nodes, 150 steps
  after 10 of warm-up: the daemons' step_ms median and throughput.

TLS covers the REST API and the follower's sync link only; the ranks exchange their data
over their own TCP transport in both modes, so busbw and step time should not differ:
this shows it. Every "node" shares this machine's CPUs. A benchmark: it prints tables,
never pass/fail. Holds /tmp/ddpb-bench.lock while measuring.
"""
import argparse
import fcntl
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))

TOKEN = "bench-tls-token-5b1e0c7a93"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TINY = {"name": "bench-tls-latency", "workload": "collective", "op": "allreduce",
        "world_size": 2, "min_bytes": "4K", "max_bytes": "4K", "iters": 2, "warmup": 1}
BUSBW = {"name": "bench-tls-busbw", "workload": "collective", "op": "allreduce",
         "world_size": 2, "nodes": 2, "min_bytes": "64K", "max_bytes": "16M", "factor": 4,
         "iters": 10, "warmup": 2, "timeout_s": 600}
DDP = {"name": "bench-tls-ddp", "workload": "train", "model": "mnist-cnn", "batch_size": 32,
       "steps": 150, "warmup_steps": 10, "strategy": "ddp", "world_size": 2, "nodes": 2,
       "dataset": {"name": "synthetic"}, "timeout_s": 600,
       "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9}}


def log(msg):
    print(msg, flush=True)


class Cluster:
    """A leader and one follower, each with 1 CPU slot, over TLS or plain HTTP."""

    def __init__(self, harness, keys, token_file):
        tls = keys
        self.lead = harness.Daemon(cpu_slots=1, tls=tls,
                                   extra_args=["--token-file", token_file, "--node", "lead"])
        pin = ["--join-ca", keys.ca] if keys else []
        self.follower = harness.Daemon(cpu_slots=1, tls=tls,
                                       extra_args=["--join", self.lead.url, "--token-file",
                                                   token_file, "--node", "f1", *pin])
        deadline = time.time() + 15
        while time.time() < deadline:
            nodes = self.lead.get("/v1/nodes")["nodes"]
            if sum(n["state"] == "up" for n in nodes) == 2:
                return
            time.sleep(0.05)
        raise RuntimeError("the follower did not join: " + self.follower.daemon_log())

    def submit(self, spec):
        status, body, _ = self.lead.request("POST", "/v1/experiments", body=spec, headers=AUTH)
        if status != 201:
            raise RuntimeError(f"submit -> {status}: {body}")
        return body["id"]

    def wait(self, exp_id, poll_s, timeout=600):
        deadline = time.time() + timeout
        while time.time() < deadline:
            exp = self.lead.get(f"/v1/experiments/{exp_id}")
            if exp["status"] in ("succeeded", "failed", "cancelled", "interrupted"):
                if exp["status"] != "succeeded":
                    raise RuntimeError(f"experiment {exp_id} {exp['status']}: "
                                       f"{[r.get('error') for r in exp['runs']]}")
                return exp
            time.sleep(poll_s)
        raise RuntimeError(f"experiment {exp_id} did not end in {timeout}s")

    def results(self, spec):
        exp_id = self.submit(spec)
        self.wait(exp_id, 0.2)
        return self.lead.get(f"/v1/experiments/{exp_id}/results")["rows"]

    def close(self):
        self.follower.close()
        self.lead.close()


def latency(c, n):
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        c.wait(c.submit(TINY), 0.01)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(SOURCE, "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency-n", type=int, default=20)
    args = ap.parse_args()
    os.environ["DDPB_BUILD_DIR"] = os.path.abspath(args.build)
    import harness  # reads DDPB_BUILD_DIR at import
    lock = open("/tmp/ddpb-bench.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    keys = harness.TlsKeys()
    token_file = os.path.join(keys.dir, "token")
    with open(os.open(token_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(TOKEN)  # 0600: a daemon refuses a token file others can read
    lat, bw, step, thr = {}, {}, {}, {}
    try:
        for rnd in range(args.rounds):
            modes = [("tls", keys), ("plain", None)]
            for mode, k in modes[rnd % 2:] + modes[:rnd % 2]:
                c = Cluster(harness, k, token_file)
                try:
                    ms = latency(c, args.latency_n)
                    lat.setdefault(mode, []).extend(ms)
                    for r in c.results(BUSBW):
                        bw.setdefault((mode, r["bytes"]), []).append(r["busbw_gbs_median"])
                    row = c.results(DDP)[0]
                    step.setdefault(mode, []).append(row["step_ms_median"])
                    thr.setdefault(mode, []).append(row["throughput_mean"])
                finally:
                    c.close()
                log(f"round {rnd + 1} {mode}: POST->succeeded median "
                    f"{statistics.median(ms):.1f} ms; step {row['step_ms_median']:.2f} ms")
    finally:
        keys.close()
    log(f"\nPOST -> succeeded, tiny collective ({args.latency_n} per mode per round, "
        f"{args.rounds} rounds), ms:")
    log("| mode | median | p10 | p90 | min | n |")
    log("|---|---:|---:|---:|---:|---:|")
    for mode in ("plain", "tls"):
        v = sorted(lat[mode])
        log(f"| {mode} | {statistics.median(v):.1f} | {v[len(v) // 10]:.1f} | "
            f"{v[len(v) * 9 // 10]:.1f} | {v[0]:.1f} | {len(v)} |")
    log("\nallreduce busbw, 2 ranks on 2 nodes (GB/s, median of rounds):")
    log("| bytes | plain | tls | tls / plain |")
    log("|---:|---:|---:|---:|")
    for b in sorted({b for _, b in bw}):
        p, t = statistics.median(bw[("plain", b)]), statistics.median(bw[("tls", b)])
        log(f"| {b} | {p:.4f} | {t:.4f} | {t / p:.3f} |")
    log("\nDDP mnist-cnn batch 32, 2 ranks on 2 nodes (median of rounds):")
    log("| mode | step_ms | samples/s | rounds (step_ms) |")
    log("|---|---:|---:|---|")
    for mode in ("plain", "tls"):
        log(f"| {mode} | {statistics.median(step[mode]):.2f} | "
            f"{statistics.median(thr[mode]):.1f} | "
            f"{', '.join(f'{v:.2f}' for v in step[mode])} |")


if __name__ == "__main__":
    main()
