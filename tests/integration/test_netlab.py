#!/usr/bin/env python3
"""deploy/netlab.sh, for real: `up --nodes 2 --profile 1gbe` makes a namespace per host
with its address and a bridge namespace, shapes every host link both ways to 1 Gbit/s
(tbf or htb), starts a ddpbenchd per host that names its profile, host 0 the leader and
host 1 a follower that joined it (GET /v1/nodes lists both up); host 1 reaches the leader
over REST through the bridge and runs a 2-rank TCP allreduce with one rank on each host
(`nodes: 2`), so its bytes cross the shaped links, stored with network_profile 1gbe and
run_ranks.node naming both hosts; `down` leaves no namespace and no link behind, and the
root namespace's links are the same before, during and after.

launcher "mpirun" across the hosts, without ssh (issue 29): on the same two hosts a 2-rank
checked allreduce with `launcher: mpirun, nodes: 2` under OpenMPI and under MPICH runs one
rank on each host (run_ranks.node names both, each rank's log is in the leader's run
directory) with #wrong 0, and a SIGKILL of the rank on host 1 fails the run naming rank 1;
after each, no orted, hydra_pmi_proxy, mpirun or worker is left in either namespace. MPI's
daemon reaches host 1 through netlab's agent (deploy/netlab-mpi-agent.sh: ip netns exec),
which runs a command in host 1's namespace by its address and refuses an address no host
has.

Every cluster here runs over TLS (`up --tls`, issue 31): the daemons serve HTTPS with keys
deploy/tls-keys.sh made for each host in the state folder (keys mode 0600), the follower
joins https:// pinned to the cluster's CA, and every curl here verifies against that CA.

Needs root and `ip netns` (CI runs as root): elsewhere every case skips with the reason,
and tests/summarize.py does not allow that skip, so CI cannot pass without running it."""
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from harness import BUILD, SOURCE, Skip, check, run_cases

NETLAB = os.path.join(SOURCE, "deploy", "netlab.sh")
PREFIX = f"ddpbit{os.getpid()}"  # this test's namespaces only: NETLAB_PREFIX
ENV = dict(os.environ, NETLAB_PREFIX=PREFIX)
PORT = 7480
H0, H1, BR = f"{PREFIX}-h0", f"{PREFIX}-h1", f"{PREFIX}-br"
ADDR = ["10.213.0.10", "10.213.0.11"]
SPEC = {"name": "netlab-allreduce", "workload": "collective", "device": "cpu", "backend": "tcp",
        "world_size": 2, "op": "allreduce", "min_bytes": "4K", "max_bytes": "64K", "factor": 4,
        "iters": 3, "warmup": 1, "check": True}


def sh(*args, timeout=60):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, env=ENV)


def netlab(*args, timeout=90):
    return sh(NETLAB, *args, timeout=timeout)


def why_unavailable():
    """None when network namespaces can be made here, else the reason."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns); not root here"
    if not shutil.which("ip") or not shutil.which("tc"):
        return "ip or tc (iproute2) not installed"
    probe = f"{PREFIX}-probe"
    r = sh("ip", "netns", "add", probe)
    if r.returncode != 0:
        return f"ip netns add failed: {r.stderr.strip()}"
    sh("ip", "netns", "del", probe)
    return None


@contextlib.contextmanager
def two_hosts(profile, tls=True):
    """Hosts 0 and 1 up under the link profile, over TLS unless told otherwise, as (state
    dir, up's output, the leader's URL); torn down after, and the teardown must succeed.
    Skip where namespaces cannot be made (only root may, and CI is root)."""
    why = why_unavailable()
    if why:
        raise Skip(why)
    state = tempfile.mkdtemp(prefix="ddpb-netlab-")
    try:
        up = netlab("up", "--nodes", "2", "--profile", profile, "--port-base", str(PORT),
                    "--dir", state, "--build", BUILD, *(["--tls"] if tls else []))
        check(up.returncode == 0, f"up: {up.stdout} {up.stderr}")
        CA["file"] = os.path.join(state, "tls", "ca.pem")
        yield state, up, f"{'https' if tls else 'http'}://{ADDR[0]}:{PORT}"
    finally:
        down = netlab("down", "--dir", state)
        shutil.rmtree(state, ignore_errors=True)
    check(down.returncode == 0, f"down: {down.stdout} {down.stderr}")


def namespaces():
    r = sh("ip", "netns", "list")
    return {line.split()[0] for line in r.stdout.splitlines() if line.strip()}


def ns_json(ns, *args):
    r = sh("ip", "netns", "exec", ns, *args)
    check(r.returncode == 0, f"{ns}: {' '.join(args)}: {r.stderr}")
    return json.loads(r.stdout or "[]")


def root_links():
    return sorted(link["ifname"] for link in json.loads(sh("ip", "-j", "link", "show").stdout))


CA = {}  # "file": the running cluster's CA (two_hosts sets it), for https:// URLs


def http(ns, method, url, body=None, token=None):
    """curl inside namespace ns; returns the parsed JSON reply (fails on an HTTP error). An
    https:// URL is verified against the cluster's CA."""
    args = ["ip", "netns", "exec", ns, "curl", "-sS", "--fail-with-body", "--max-time", "20",
            "-X", method, url]
    if url.startswith("https://"):
        args += ["--cacert", CA["file"]]
    if token:
        args += ["-H", f"Authorization: Bearer {token}"]
    if body is not None:
        args += ["-H", "Content-Type: application/json", "--data-binary", json.dumps(body)]
    r = sh(*args, timeout=30)
    check(r.returncode == 0, f"{ns}: {method} {url}: rc {r.returncode}: {r.stdout} {r.stderr}")
    return json.loads(r.stdout)


def shaped_rate(ns, dev):
    """The rate (bits/s) dev's root qdisc shapes to: tbf's own (bytes/s in tc -j), or
    htb's one class's (tc prints classes as text only, "rate 1Gbit")."""
    qdiscs = [q for q in ns_json(ns, "tc", "-j", "qdisc", "show", "dev", dev) if q.get("root")]
    check(len(qdiscs) == 1, f"{ns}/{dev}: root qdiscs {qdiscs}")
    kind = qdiscs[0]["kind"]
    check(kind in ("tbf", "htb"), f"{ns}/{dev}: qdisc {kind}, want tbf or htb")
    if kind == "tbf":
        return qdiscs[0]["options"]["rate"] * 8
    text = sh("ip", "netns", "exec", ns, "tc", "class", "show", "dev", dev).stdout
    rates = re.findall(r" rate (\d+)([KMG]?)bit", text)
    check(len(rates) == 1, f"{ns}/{dev}: htb classes {text}")
    return int(rates[0][0]) * {"": 1, "K": 10**3, "M": 10**6, "G": 10**9}[rates[0][1]]


def wait_experiment(url, exp_id, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        exp = http(H1, "GET", f"{url}/v1/experiments/{exp_id}")
        if exp["status"] in ("succeeded", "failed", "cancelled", "interrupted"):
            return exp
        time.sleep(0.2)
    raise AssertionError(f"experiment {exp_id} still {exp['status']} after {timeout}s")


# what launcher mpirun may start in a host's namespace: none of it may outlive a run
MPI_PROGRAMS = {"orted", "hydra_pmi_proxy", "mpirun.openmpi", "mpiexec.mpich", "mpiexec.hydra",
                "ddpbench-worker"}


def mpi_left(timeout=20):
    """The processes of MPI_PROGRAMS still alive in host 0's or 1's namespace after up to
    timeout seconds (a remote orted notices a killed mpirun within a few)."""
    deadline = time.time() + timeout
    while True:
        left = []
        for ns in (H0, H1):
            for pid in sh("ip", "netns", "pids", ns).stdout.split():
                try:
                    with open(f"/proc/{pid}/comm") as f:
                        name = f.read().strip()
                except OSError:
                    continue
                if name in MPI_PROGRAMS:
                    left.append(f"{ns}:{name}:{pid}")
        if not left or time.time() > deadline:
            return left
        time.sleep(0.2)


def check_mpirun_across(state, leader, token):
    """launcher mpirun with nodes 2 under each implementation: a checked allreduce with a
    rank on each host, then a SIGKILL of host 1's rank failing the run naming it; nothing
    of MPI's left in either namespace after each."""
    def daemon_log():
        with open(os.path.join(state, "h0", "daemon.log")) as f:
            return f.read()[-3000:]
    # the agent itself, as mpirun calls it from host 0: into host 1's namespace by its
    # address (ssh's options skipped), and an address of no host here refused naming it
    agent = os.path.join(SOURCE, "deploy", "netlab-mpi-agent.sh")
    r = sh("ip", "netns", "exec", H0, agent, "-x", ADDR[1], "ip", "-o", "-4", "addr", "show",
           "dev", "eth0")
    check(r.returncode == 0 and f" {ADDR[1]}/" in r.stdout, f"agent: {r.stdout} {r.stderr}")
    r = sh("ip", "netns", "exec", H0, agent, "10.213.0.99", "true")
    check(r.returncode == 255 and "10.213.0.99" in r.stderr, f"agent: {r.returncode} {r.stderr}")
    for mpi in ("openmpi", "mpich"):
        fields = {"launcher": "mpirun", "mpi": mpi, "nodes": 2}
        exp = wait_experiment(leader, http(H0, "POST", f"{leader}/v1/experiments",
                                           dict(SPEC, **fields), token=token)["id"])
        run_id = exp["runs"][0]["id"]
        check(exp["status"] == "succeeded", f"{mpi}: {exp}; log: {daemon_log()}")
        run = http(H0, "GET", f"{leader}/v1/runs/{run_id}")
        check({k["rank"]: k["node"] for k in run["ranks"]} == {0: H0, 1: H1},
              f"{mpi}: {run['ranks']}")
        check(run["collectives"] and all(c["wrong"] == 0 for c in run["collectives"]),
              f"{mpi}: {run['collectives']}")
        for r in (0, 1):
            with open(os.path.join(state, "h0", "runs", str(run_id), f"rank{r}.log")) as f:
                check("joined: 2 ranks" in f.read(), f"{mpi}: rank {r}'s log")
        check(not mpi_left(), f"{mpi}: left after the run: {mpi_left(0)}")

        train = {"workload": "train", "model": "mnist-cnn", "batch_size": 8, "steps": 100000,
                 "world_size": 2, "dataset": {"samples": 4096}, "timeout_s": 120}
        exp_id = http(H0, "POST", f"{leader}/v1/experiments", dict(train, **fields),
                      token=token)["id"]
        run_id = http(H0, "GET", f"{leader}/v1/experiments/{exp_id}")["runs"][0]["id"]
        deadline = time.time() + 60
        while True:
            run = http(H0, "GET", f"{leader}/v1/runs/{run_id}")
            if run["status"] == "running" and all(k["pid"] for k in run["ranks"]):
                break
            check(time.time() < deadline and run["status"] in ("queued", "starting"),
                  f"{mpi}: ranks not up: {run['status']} {run['error']}")
            time.sleep(0.2)
        check(run["ranks"][1]["node"] == H1, f"{mpi}: {run['ranks']}")
        os.kill(run["ranks"][1]["pid"], 9)  # one PID space: netns splits the network only
        exp = wait_experiment(leader, exp_id, timeout=60)
        run = http(H0, "GET", f"{leader}/v1/runs/{run_id}")
        check(exp["status"] == "failed" and run["error_rank"] == 1 and "rank 1" in run["error"],
              f"{mpi}: {run['status']} {run['error_rank']} {run['error']}")
        check(not mpi_left(), f"{mpi}: left after a killed rank: {mpi_left(0)}")


def test_up_shape_run_down():
    before = root_links()
    with two_hosts("1gbe") as (state, up, leader):
        check(f"leader: {leader}" in up.stdout, up.stdout)
        check(f"host 1: {H1} https://{ADDR[1]}:{PORT + 1}" in up.stdout, up.stdout)
        check(f"the cluster's CA is {CA['file']}" in up.stdout, up.stdout)
        for name in ("ca", H0, H1):  # keys private, certificates readable
            check(os.stat(os.path.join(state, "tls", name + ".key")).st_mode & 0o077 == 0, name)
            check(os.path.exists(os.path.join(state, "tls", name + ".pem")), name)
        check("delay emulation: " in up.stdout, "delay emulation reported either way")
        check({H0, H1, BR} <= namespaces(), namespaces())
        for i, ns in enumerate((H0, H1)):
            addrs = [a["local"] for link in ns_json(ns, "ip", "-j", "addr", "show", "dev", "eth0")
                     for a in link["addr_info"] if a["family"] == "inet"]
            check(addrs == [ADDR[i]], f"{ns}: eth0 addresses {addrs}")
            # 1 Gbit/s both ways: the host's egress and the bridge's egress towards it
            check(shaped_rate(ns, "eth0") == 10**9, f"{ns}: eth0 not at 1Gbit")
            check(shaped_rate(BR, f"h{i}") == 10**9, f"bridge h{i} not at 1Gbit")
        check(root_links() == before, f"root namespace links changed: {root_links()}")

        # host 1 reaches host 0's daemon through the bridge; it names its profile
        health = http(H1, "GET", f"{leader}/healthz")
        check(health["network_profile"] == "1gbe" and health["node"] == H0, health)
        check(http(H0, "GET", f"https://{ADDR[1]}:{PORT + 1}/healthz")["node"] == H1, "h0 -> h1")
        # plain HTTP to the TLS port gets no HTTP reply; the follower joined over https
        plain = sh("ip", "netns", "exec", H1, "curl", "-sS", "--max-time", "5",
                   f"http://{ADDR[0]}:{PORT}/healthz")
        check(plain.returncode != 0 and "HTTP/" not in plain.stdout, plain)
        with open(os.path.join(state, "h1", "daemon.log")) as f:
            check(f"as a follower of {leader}" in f.read(), "h1 joined the https:// leader")
        nodes = {n["name"]: n for n in http(H1, "GET", f"{leader}/v1/nodes")["nodes"]}
        check(nodes[H0]["role"] == "leader" and nodes[H1]["role"] == "follower", nodes)
        check(all(n["state"] == "up" and n["network_profile"] == "1gbe" for n in nodes.values()),
              nodes)
        check(nodes[H1]["address"] == ADDR[1], nodes[H1])
        with open(os.path.join(state, "token")) as f:
            token = f.read().strip()
        check(os.stat(os.path.join(state, "token")).st_mode & 0o077 == 0, "token file private")
        spec = dict(SPEC, nodes=2)
        exp = wait_experiment(leader, http(H1, "POST", f"{leader}/v1/experiments", spec,
                                           token=token)["id"])
        check(exp["status"] == "succeeded", f"{exp}; log: {open(os.path.join(state, 'h0', 'daemon.log')).read()[-3000:]}")
        run = http(H1, "GET", f"{leader}/v1/runs/{exp['runs'][0]['id']}")
        check(run["network_profile"] == "1gbe", run["network_profile"])
        check({k["rank"]: k["node"] for k in run["ranks"]} == {0: H0, 1: H1}, run["ranks"])
        check(run["nodes"] == 2 and run["ranks_per_node"] == 1, run)
        check(run["collectives"] and all(c["wrong"] == 0 for c in run["collectives"]), "results")
        table = http(H1, "GET", f"{leader}/v1/experiments/{exp['id']}/results")
        check(table["rows"] and all(r["network_profile"] == "1gbe" for r in table["rows"]), table)
        check_mpirun_across(state, leader, token)

        status = netlab("status", "--dir", state)
        check(status.returncode == 0 and "profile 1gbe" in status.stdout, status.stdout)
        check(status.stdout.count("daemon up") == 2, status.stdout)
        check("2 \"state\":\"up\"" in status.stdout, status.stdout)
        again = netlab("up", "--nodes", "2", "--profile", "1gbe", "--dir", state, "--build", BUILD)
        check(again.returncode != 0 and "down" in again.stderr, "a second up is refused")
    left = {ns for ns in namespaces() if ns.startswith(PREFIX + "-")}
    check(not left, f"namespaces left: {left}")
    check(root_links() == before, f"root namespace links changed: {root_links()}")
    again = netlab("down", "--dir", state)
    check(again.returncode == 0, f"down is idempotent: {again.stderr}")


def test_follower_lost_over_netlab():
    """A run across both hosts; host 1's daemon killed with -9 mid-run: the run fails
    within the leader's node timeout naming host 1 and its rank, the rank on host 0 is
    stopped, the steps already stored stay, and host 1 is listed lost."""
    with two_hosts("10gbe") as (state, _, leader):
        with open(os.path.join(state, "token")) as f:
            token = f.read().strip()
        spec = {"workload": "train", "model": "mnist-cnn", "batch_size": 32, "steps": 100000,
                "world_size": 2, "nodes": 2, "dataset": {"name": "synthetic"},
                "timeout_s": 300}
        exp_id = http(H0, "POST", f"{leader}/v1/experiments", spec, token=token)["id"]
        run_id = http(H0, "GET", f"{leader}/v1/experiments/{exp_id}")["runs"][0]["id"]
        deadline = time.time() + 60
        while True:
            steps = http(H0, "GET", f"{leader}/v1/runs/{run_id}/steps?rank=1")["rows"]
            if len(steps) >= 3:
                break
            check(time.time() < deadline, "no steps from the rank on host 1")
            time.sleep(0.2)
        with open(os.path.join(state, "h1", "pid")) as f:
            os.kill(int(f.read()), 9)
        t0 = time.time()
        exp = wait_experiment(leader, exp_id, timeout=30)
        took = time.time() - t0
        run = http(H0, "GET", f"{leader}/v1/runs/{run_id}")
        check(exp["status"] == "failed", exp)
        check(f"node {H1} lost" in run["error"] and "its rank 1 is gone" in run["error"],
              run["error"])
        check(took < 5 + 5, f"failed {took:.1f}s after the kill")
        check(len(http(H0, "GET", f"{leader}/v1/runs/{run_id}/steps?rank=1")["rows"]) >= 3,
              "the lost rank's steps are kept")
        nodes = {n["name"]: n["state"] for n in http(H0, "GET", f"{leader}/v1/nodes")["nodes"]}
        check(nodes == {H0: "up", H1: "lost"}, nodes)


def test_bad_arguments_refused():
    why = why_unavailable()
    if why:
        raise Skip(why)
    for args, says in ((["up", "--nodes", "2", "--profile", "2gbe"], "--profile"),
                       (["up", "--nodes", "0", "--profile", "1gbe"], "--nodes"),
                       (["up", "--profile", "1gbe"], "--nodes"),
                       (["sideways"], "unknown command")):
        r = netlab(*args, "--build", BUILD) if args[0] == "up" else netlab(*args)
        check(r.returncode != 0 and says in r.stderr, f"{args}: rc {r.returncode}: {r.stderr}")
    check(not {ns for ns in namespaces() if ns.startswith(PREFIX + "-")}, "nothing made")


if __name__ == "__main__":
    sys.exit(run_cases([test_up_shape_run_down, test_follower_lost_over_netlab,
                        test_bad_arguments_refused]))
