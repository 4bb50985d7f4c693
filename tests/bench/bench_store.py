#!/usr/bin/python3
"""Benchmark (not a test): a store barrier of thousands of clients, ddpbenchd's store
against PyTorch's TCPStore, in one run on one machine.

Each round, for each client count, both servers in turn (the order alternates by round)
take one barrier of N clients from the same driver (tests/bench/store_bench.c: one epoll
thread; connect, ADD count, the last arrival SETs done, everyone WAITs done) and the
driver reports the wall time from the first connect to the last client released. The
headline is the median over rounds; a barrier in which any client failed or timed out is
reported as failed, never timed. The servers stay up across rounds (each round uses new
keys), as a daemon's store does across runs.

ddpbenchd's store is its own code (daemon/store/) run by `store_bench serve`; PyTorch's
is torch.distributed.TCPStore (Debian's python3-torch 1.13: no libuv server in this
version; its only server is the one measured, master with wait_for_workers=False).
With DDPB_BASE_BUILD_DIR set (another build's tree, e.g. of main with store_bench.c
added), that build's store is a third server in the same rounds: a before/after. With
DDPB_STORE_STALL_MS set, each server is stopped while the clients start dialling and
continued that much later (included in the time), so that only its listen queue holds
the connections: the case of a daemon descheduled on a busy node, which a loaded
benchmark machine otherwise hides by slowing the clients as much as the server.

    deploy/install-deps.sh --bench && ninja -C build && \\
        flock /tmp/ddpb-bench.lock /usr/bin/python3 tests/bench/bench_store.py [ROUNDS] [N ...]
"""
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DRIVER = os.path.join(ROOT, os.environ.get("DDPB_BUILD_DIR", "build"), "tests", "store_bench")
TIMEOUT_S = 60

TORCH_SERVER = """
import datetime, sys, torch.distributed as d
s = d.TCPStore("127.0.0.1", 0, None, True, timeout=datetime.timedelta(seconds=120),
               wait_for_workers=False)
print(s.port, flush=True)
sys.stdin.read()
"""


BASE = os.environ.get("DDPB_BASE_BUILD_DIR")
STALL_MS = int(os.environ.get("DDPB_STORE_STALL_MS", "0"))


def start_servers():
    """The servers as child processes; returns {name: (process, port, wire protocol)}."""
    cmds = {"ddpb": ([DRIVER, "serve"], "ddpb"),
            "torch": (["/usr/bin/python3", "-c", TORCH_SERVER], "torch")}
    if BASE:
        cmds["base"] = ([os.path.join(BASE, "tests", "store_bench"), "serve"], "ddpb")
    servers = {}
    for name, (cmd, proto) in cmds.items():
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
        servers[name] = (p, int(p.stdout.readline()), proto)
    return servers


def listen_overflows():
    """The kernel's count of connections a full accept queue turned away (TcpExt
    ListenOverflows: each costs its client a SYN retransmit, 1 s for the first). The
    count is the whole machine's, and nothing else here listens under such load."""
    lines = [l.split() for l in open("/proc/net/netstat") if l.startswith("TcpExt:")]
    return int(dict(zip(lines[0], lines[1]))["ListenOverflows"])


def barrier(server, n, rnd):
    """One barrier of n clients; with STALL_MS the server is stopped (SIGSTOP) while the
    clients start dialling and continued STALL_MS later, as a daemon descheduled on a
    busy node would be: then only its listen queue holds the connections."""
    proc, port, proto = server
    before = listen_overflows()
    if STALL_MS:
        os.kill(proc.pid, signal.SIGSTOP)
    drv = subprocess.Popen([DRIVER, "barrier", proto, str(port), str(n), str(rnd),
                            str(TIMEOUT_S)], stdout=subprocess.PIPE, text=True)
    if STALL_MS:
        time.sleep(STALL_MS / 1000)
        os.kill(proc.pid, signal.SIGCONT)
    res = json.loads(drv.communicate()[0])
    res["overflows"] = listen_overflows() - before
    return res


def fmt(samples):
    """(median s, best s, median s until all connected, failed rounds, median overflows)
    over the rounds in which every client passed."""
    ok = [s for s in samples if s["ok"] == s["clients"]]
    bad = len(samples) - len(ok)
    over = f"{statistics.median(s['overflows'] for s in samples):.0f}"
    if not ok:
        return "failed", "—", "—", bad, over
    return (f"{statistics.median(s['seconds'] for s in ok):.3f}",
            f"{min(s['seconds'] for s in ok):.3f}",
            f"{statistics.median(s['connect_seconds'] for s in ok):.3f}", bad, over)


def main(rounds=5, sizes=(1024, 4096, 8192)):
    servers = start_servers()
    results = {(p, n): [] for p in servers for n in sizes}
    try:
        for r in range(rounds):
            for n in sizes:
                order = list(servers) if r % 2 == 0 else list(reversed(servers))
                for p in order:
                    res = barrier(servers[p], n, r)
                    results[(p, n)].append(res)
                    if res["ok"] != n:
                        print(f"round {r} {p} {n}: {res}", file=sys.stderr)
    finally:
        for proc, _, _ in servers.values():
            proc.stdin.close()
            proc.wait(30)
    print(f"{datetime.date.today()}, {os.cpu_count()} CPUs, somaxconn "
          f"{open('/proc/sys/net/core/somaxconn').read().strip()}, {rounds} interleaved rounds"
          + (f", each server stopped for the first {STALL_MS} ms of each barrier"
             if STALL_MS else ""))
    print()
    print("| clients | ddpbench median s | PyTorch TCPStore median s | ratio (torch / ddpbench) "
          "| ddpbench best | TCPStore best | all connected (ddpb / torch, median s) "
          "| failed rounds (ddpb / torch) | listen overflows (ddpb / torch, median) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        d, t = fmt(results[("ddpb", n)]), fmt(results[("torch", n)])
        ratio = (f"{float(t[0]) / float(d[0]):.2f}×" if "failed" not in (d[0], t[0])
                 else "—")
        print(f"| {n:,} | {d[0]} | {t[0]} | {ratio} | {d[1]} | {t[1]} | {d[2]} / {t[2]} "
              f"| {d[3]} / {t[3]} | {d[4]} / {t[4]} |")
    if BASE:
        print()
        print(f"Base build ({BASE}), same rounds:")
        print()
        print("| clients | base median s | base best | all connected (median s) "
              "| failed rounds | listen overflows (median) |")
        print("|---:|---:|---:|---:|---:|---:|")
        for n in sizes:
            b = fmt(results[("base", n)])
            print(f"| {n:,} | {b[0]} | {b[1]} | {b[2]} | {b[3]} | {b[4]} |")


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    main(args[0] if args else 5, tuple(args[1:]) or (1024, 4096, 8192))
