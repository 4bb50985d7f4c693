#!/usr/bin/env python3
"""ddpbench under a real Slurm (tests/integration/slurmlab.py starts munged, mariadbd,
slurmdbd, slurmctld and slurmd on this machine, one cluster for every case here, and
checks at the end that no slurmstepd outlived its job).

- Slurm itself: a 2-task sbatch job whose srun step runs on both tasks, listed by sacct;
  a 2-rank MPI hello with each implementation under the srun --mpi plugin that
  schema/vocabulary.json names for it (and the plugins that do not work, failing the way
  this file's docstrings say, so a change in Debian's packages shows here).
- deploy/slurm/ddpbench.sbatch in its daemons-per-node mode: a 2-rank collective spec,
  the leader's API over TLS (keys made per job; followers join https:// pinned to the CA).

Needs root (slurmd runs jobs as their user; SlurmUser is root here) and the packages
deploy/install-deps.sh installs; elsewhere it skips with the reason, and
tests/summarize.py does not allow that skip in CI."""
import csv
import functools
import json
import os
import re
import shutil
import subprocess
import time
import urllib.request

import launcher_checks
from harness import BUILD, SOURCE, Daemon, Skip, check, run_cases
import slurmlab
from slurmlab import AllocatedDaemon, MiniSlurm, free_port, proc_environ, why_unavailable

SCRIPT = os.path.join(SOURCE, "deploy", "slurm", "ddpbench.sbatch")
HELLO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "slurm_mpi_hello.c")
S = None  # the cluster every case uses: the first to need it starts it, main stops it
S2 = None  # the two-node cluster (netlab hosts), likewise for the cases that need it


def on_cluster(case):
    """The case, run once the shared cluster is up (the first case starts it)."""
    @functools.wraps(case)
    def run():
        S.start()
        case()
    return run


def on_two_nodes(case):
    """The case, run with the shared two-node cluster (started by the first) as S2."""
    @functools.wraps(case)
    def run():
        S2.start()
        case()
    return run


def vocab_mpis():
    with open(os.path.join(SOURCE, "schema", "vocabulary.json")) as f:
        return {m["name"]: m for m in json.load(f)["mpis"]}


def mpicc(mpi):
    return {"openmpi": "mpicc.openmpi", "mpich": "mpicc.mpich"}[mpi]


def build_hello(mpi, cluster=None):
    """The MPI hello built with the implementation's mpicc, in the cluster's jobs/ (the
    shared cluster's by default): where every node sees it."""
    exe = (cluster or S).path("jobs", f"hello-{mpi}")
    if not os.path.exists(exe):
        cc = shutil.which(mpicc(mpi))
        check(cc, f"{mpicc(mpi)} missing (deploy/install-deps.sh installs "
              f"{vocab_mpis()[mpi]['dev']})")
        r = subprocess.run([cc, "-O1", "-o", exe, HELLO], capture_output=True, text=True,
                           timeout=120)
        check(r.returncode == 0, f"{mpicc(mpi)}: {r.stderr}")
    return exe


def hello_lines(text):
    """{rank: {size, sum, procid, lib}} of the hello's lines in text."""
    out = {}
    for m in re.finditer(r"hello rank=(-?\d+) size=(\d+) sum=(\d+) procid=(\S+) lib=(.*)", text):
        out[int(m.group(1))] = {"size": int(m.group(2)), "sum": int(m.group(3)),
                                "procid": m.group(4), "lib": m.group(5)}
    return out


def step_row(rows, job, step):
    match = [r for r in rows if r["JobID"] == f"{job}.{step}"]
    check(len(match) == 1, f"sacct has no step {job}.{step}: {rows}")
    return match[0]


@on_cluster
def test_srun_step_runs_two_tasks_listed_by_sacct():
    job = S.sbatch(["--ntasks=2", "--job-name=two-tasks",
                    "--wrap", "srun -n2 sh -c 'echo task procid=$SLURM_PROCID'"])
    state = S.wait_job(job)
    out = S.output(job)
    check(state in ("COMPLETED", "GONE"), f"job {job}: {state}: {out}")
    check(sorted(re.findall(r"task procid=(\S+)", out)) == ["0", "1"], out)
    rows = S.steps(job)
    check({r["JobID"] for r in rows} == {job, f"{job}.batch", f"{job}.0"}, rows)
    step = step_row(rows, job, 0)
    check(step["State"] == "COMPLETED" and step["NTasks"] == "2" and step["JobName"] == "sh"
          and step["ExitCode"] == "0:0", step)
    S.wait_no_job_pids(job)


@on_cluster
def test_mpi_hello_under_each_implementations_pmi_plugin():
    """Each implementation under the plugin vocabulary.json names (common/vocab.c): one
    world of 2 (size 2, allreduce sum 3) whose MPI rank is SLURM_PROCID, as an sbatch
    job's step that sacct lists, for both OpenMPI 4.1 (pmix) and MPICH 4.0 (pmi2)."""
    mpis = vocab_mpis()
    plugins = S.cmd("srun", "--mpi=list").stdout + S.cmd("srun", "--mpi=list").stderr
    for mpi in ("openmpi", "mpich"):
        pmi = mpis[mpi]["pmi"]
        check(re.search(rf"\b{pmi}\b", plugins), f"srun --mpi=list lacks {pmi}: {plugins}")
        exe = build_hello(mpi)
        job = S.sbatch(["--ntasks=2", f"--job-name=hello-{mpi}",
                        "--wrap", f"srun -n2 --mpi={pmi} {exe}"])
        state = S.wait_job(job)
        out = S.output(job)
        check(state in ("COMPLETED", "GONE"), f"{mpi} job {job}: {state}: {out}")
        ranks = hello_lines(out)
        check(sorted(ranks) == [0, 1], f"{mpi}: {out}")
        for rank, r in ranks.items():
            check(r["size"] == 2 and r["sum"] == 3 and r["procid"] == str(rank), (mpi, r))
        lib = ranks[0]["lib"]
        check(("Open MPI" in lib) if mpi == "openmpi" else ("MPICH" in lib), (mpi, lib))
        step = step_row(S.steps(job), job, 0)
        check(step["State"] == "COMPLETED" and step["NTasks"] == "2", step)
        S.wait_no_job_pids(job)


@on_cluster
def test_the_other_pmi_plugins_do_not_wire_mpi():
    """Why vocab.c names pmix for OpenMPI and pmi2 for MPICH: Debian's OpenMPI 4.1 has
    PMIx support only (its pmix ext3x component, on the libpmix2 that Slurm's mpi_pmix
    uses too), no PMI-1/PMI-2 client, so under --mpi=pmi2 MPI_Init fails in every rank.
    MPICH 4.0's PMI client speaks the PMI-1/PMI-2 wire protocol (PMI_FD), not PMIx: under
    --mpi=pmix it finds no PMI server and each rank silently runs as a world of its own
    (size 1), which is why the launcher must pass pmi2."""
    r = S.cmd("srun", "-n2", "--mpi=pmi2", build_hello("openmpi"), check_rc=False, timeout=60)
    check(r.returncode != 0 and not hello_lines(r.stdout) and "MPI_Init" in r.stderr,
          f"openmpi under pmi2: {r.returncode} {r.stdout} {r.stderr}")
    r = S.cmd("srun", "-n2", "--mpi=pmix", build_hello("mpich"), check_rc=False, timeout=60)
    ranks = re.findall(r"hello rank=(\d+) size=(\d+) sum=(\d+) procid=(\d+)", r.stdout)
    check(r.returncode == 0 and sorted(ranks) == [("0", "1", "1", "0"), ("0", "1", "1", "1")],
          f"mpich under pmix: {r.returncode} {r.stdout} {r.stderr}")


@on_cluster
def test_sbatch_runs_a_spec_and_writes_the_csv():
    """deploy/slurm/ddpbench.sbatch, daemons-per-node mode: ddpbench places the ranks."""
    jobs = S.path("jobs")
    spec = os.path.join(jobs, "spec.json")
    with open(spec, "w") as f:
        f.write('{"name": "slurm-allreduce", "workload": "collective", "world_size": 2,'
                ' "min_bytes": "4K", "max_bytes": "64K", "factor": 4, "iters": 5,'
                ' "warmup": 1}')
    env = dict(S.env, DDPB_BIN=BUILD, DDPB_PORT=str(free_port()), DDPB_OUT=jobs)
    job = S.sbatch([SCRIPT, spec], env=env, output=os.path.join(jobs, "ddpbench-%j.out"))
    state = S.wait_job(job)
    out = os.path.join(jobs, f"ddpbench-{job}.out")
    with open(out, errors="replace") as f:
        log = f.read()
    check(state in ("COMPLETED", "GONE"), f"job {job}: {state}: {log}")
    check("experiment 1 succeeded" in log and "leader https://" in log, log)  # over TLS
    with open(os.path.join(jobs, f"ddpbench-{job}.csv")) as f:
        rows = list(csv.DictReader(f))
    check([r["bytes"] for r in rows] == ["4096", "16384", "65536"], rows)
    for row in rows:  # both ranks on this one node, every element right, real figures
        check(row["nodes"] == "1" and row["wrong"] == "0"
              and float(row["busbw_gbs_mean"]) > 0, row)
    check(os.path.exists(os.path.join(jobs, f"ddpbench-{job}.json")), "experiment JSON")
    S.wait_no_job_pids(job)


@on_two_nodes
def test_two_slurmd_in_netlab_namespaces():
    """Two nodes on one machine: slurmd h0 and h1, each in a netlab host's network
    namespace (10.213.0.10 and .11), h1 with a /tmp of its own (slurmlab.py says why).
    One step's two tasks run one on each node with their own address; each MPI
    implementation's 2-rank hello spans both nodes under its pmi plugin; sacct names
    both nodes."""
    job = S2.sbatch(["--nodes=2", "--ntasks=2", "--wrap", "srun -n2 --ntasks-per-node=1 "
                     "sh -c 'echo task procid=$SLURM_PROCID node=$SLURMD_NODENAME "
                     "addr=$(hostname -I)'"])
    state = S2.wait_job(job)
    out = S2.output(job)
    check(state in ("COMPLETED", "GONE"), f"job {job}: {state}: {out}")
    tasks = sorted(re.findall(r"task procid=(\S+) node=(\S+) addr=(\S+)", out))
    check(tasks == [("0", "h0", "10.213.0.10"), ("1", "h1", "10.213.0.11")], out)
    check(step_row(S2.steps(job), job, 0)["NodeList"] == "h[0-1]", S2.steps(job))
    for mpi, pmi in ((m, row["pmi"]) for m, row in vocab_mpis().items()):
        exe = build_hello(mpi, S2)
        r = S2.cmd("srun", "-N2", "-n2", f"--mpi={pmi}", exe, timeout=60)
        ranks = hello_lines(r.stdout)
        check(sorted(ranks) == [0, 1] and all(v["size"] == 2 and v["sum"] == 3
                                              and v["procid"] == str(k)
                                              for k, v in ranks.items()),
              f"{mpi} over two nodes: {r.stdout} {r.stderr}")
    S2.wait_no_job_pids(job)


def two_node_job(sbatch_opts, script_opts, spec):
    """Submits ddpbench.sbatch on S2 with the spec; returns (job, its final state, its
    output, the results CSV's rows)."""
    path = write_spec(f"two-nodes-{len(os.listdir(S2.path('jobs')))}.json", spec, S2)
    env = dict(S2.env, DDPB_BIN=BUILD, DDPB_PORT=str(free_port()), DDPB_OUT=S2.path("jobs"))
    job = S2.sbatch([*sbatch_opts, SCRIPT, *script_opts, path], env=env)
    state = S2.wait_job(job)
    rows = []
    if os.path.exists(S2.path("jobs", f"ddpbench-{job}.csv")):
        with open(S2.path("jobs", f"ddpbench-{job}.csv")) as f:
            rows = list(csv.DictReader(f))
    return job, state, S2.output(job), rows


TWO_NODE_SPEC = {"workload": "collective", "world_size": 2, "min_bytes": "4K",
                 "max_bytes": "64K", "iters": 5, "warmup": 1, "check": True}


@on_two_nodes
def test_daemons_mode_across_two_netlab_nodes():
    """ddpbench.sbatch's daemons-per-node mode on two Slurm nodes: the leader on h0, a
    follower on h1 (an srun step), a checked allreduce with one rank on each node; at
    the end the follower drains and exits (its step COMPLETED, not killed) and leaves
    neither its token nor its state on h1."""
    job, state, out, rows = two_node_job(["--nodes=2"], [], dict(TWO_NODE_SPEC, nodes=2,
                                                                 ranks_per_node=1))
    check(state in ("COMPLETED", "GONE") and "experiment 1 succeeded" in out
          and "on h0, 2 node(s)" in out and "leader https://" in out, (state, out))
    check(rows and all(r["nodes"] == "2" and r["wrong"] == "0" for r in rows), rows)
    S2.wait_no_job_pids(job)
    followers = [r for r in S2.steps(job) if r["JobName"] == "ddpbench-followers"]
    check(len(followers) == 1 and followers[0]["State"] == "COMPLETED"
          and followers[0]["NodeList"] == "h1", S2.steps(job))  # drained, not killed
    h1_tmp = S2.path("node-tmp", "h1")  # the follower's node's /tmp: its token and state gone
    check(not [f for f in os.listdir(h1_tmp) if f.startswith(f"ddpbench-{job}")],
          os.listdir(h1_tmp))


@on_two_nodes
def test_srun_run_across_two_netlab_nodes():
    """ddpbench.sbatch --srun on two nodes: the daemon on h0, a checked 2-rank TCP
    allreduce with nodes 2 (srun's --nodes, not ddpbench's placement: the daemon holds
    none of its slots) whose ranks Slurm puts one on each node; each rank must listen on its own
    node's address and reach the daemon's store and report channel over the bridge. The
    run's files (spec, logs) are in DDPB_SHARED_DIR, which both nodes see."""
    job, state, out, rows = two_node_job(["--nodes=2", "--ntasks=2"], ["--srun"],
                                         dict(TWO_NODE_SPEC, launcher="srun", nodes=2))
    check(state in ("COMPLETED", "GONE") and "experiment 1 succeeded" in out, (state, out))
    check(rows and all(r["wrong"] == "0" for r in rows), rows)
    steps = [r for r in S2.steps(job) if r["JobName"] == "ddpbench-run-1"]
    check(len(steps) == 1 and steps[0]["NodeList"] == "h[0-1]"
          and steps[0]["NTasks"] == "2", S2.steps(job))
    S2.wait_no_job_pids(job)


def write_spec(name, spec, cluster=None):
    path = (cluster or S).path("jobs", name)
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


def script_env(**extra):
    """The environment sbatch passes the script: this build, a free port, results in
    jobs/, the leader on 127.0.0.1 (the one node), in plain HTTP (DDPB_TLS=0): these cases
    read the job's daemon while it runs, and its TLS keys live in the job's private folder
    (the daemons-mode cases run the job's cluster over TLS)."""
    env = dict(S.env, DDPB_BIN=BUILD, DDPB_PORT=str(free_port()), DDPB_OUT=S.path("jobs"),
               DDPB_IFACE_ADDR_CMD="echo 127.0.0.1", DDPB_TLS="0")
    env.update(extra)
    return env


@on_cluster
def test_sbatch_srun_mode_refuses_what_it_cannot_run():
    """--srun without --ntasks (no tasks to run ranks as), or with a spec that does not
    name the srun launcher: the job fails at once, saying so, and starts no daemon."""
    spec = write_spec("tcp-no-launcher.json", {"workload": "collective", "world_size": 2})
    cases = [([], "--ntasks N"), (["--ntasks=2"], 'names no "launcher": "srun"')]
    for opts, needle in cases:
        job = S.sbatch(opts + [SCRIPT, "--srun", spec], env=script_env())
        state = S.wait_job(job)
        out = S.output(job)
        check(state == "FAILED" and needle in out and "leader" not in out, (opts, state, out))


def run_steps(job, n_runs=None):
    """sacct's steps of a daemon's job that are runs (srun steps named ddpbench-run-ID),
    checked to have two tasks each (and to be n_runs, given, waiting for accounting to
    record that many): {run id: row}."""
    def is_run(r):
        return r["JobID"] not in (job, f"{job}.batch")

    def enough(rows):
        ended = all(r["State"].split()[0] in slurmlab.ENDED for r in rows)
        return rows and ended and len([r for r in rows if is_run(r)]) >= (n_runs or 1)

    rows = [r for r in S.steps(job, want=enough) if is_run(r)]
    runs = {}
    for r in rows:
        m = re.fullmatch(r"ddpbench-run-(\d+)", r["JobName"])
        check(m and r["NTasks"] == "2", f"job {job}: a step that is no 2-rank run: {r}")
        runs[int(m.group(1))] = r
    check(n_runs is None or len(runs) == n_runs, f"job {job}: run steps {rows}")
    return runs


def rank_env(pid):
    return dict(v.decode().split("=", 1) for v in proc_environ(pid) if b"=" in v)


def check_ranks_are_tasks(run, job):
    """Each live rank of run is a task of job's srun step whose SLURM_PROCID is its rank:
    read from the rank's own environment (/proc), where srun put it. Returns the step."""
    steps = set()
    for k in run["ranks"]:
        env = rank_env(k["pid"])
        check(env.get("SLURM_JOB_ID") == job and env.get("SLURM_PROCID") == str(k["rank"])
              and env.get("SLURM_LOCALID") == str(k["rank"])  # one node: local = global
              and env.get("DDPB_LAUNCHER") == "srun" and "DDPB_RANK" not in env,
              (k, {n: v for n, v in env.items() if n.startswith(("SLURM_", "DDPB_"))}))
        steps.add(env.get("SLURM_STEP_ID"))
    check(len(steps) == 1 and None not in steps, f"ranks in steps {steps}")
    return steps.pop()


def srun_case(check_fn):
    """launcher_checks' check_fn with launcher srun, against a daemon that is an sbatch
    job's batch step (AllocatedDaemon); then sacct lists each run as a 2-task step of
    that job, and nothing of the job is left."""
    @on_cluster
    def case():
        d = AllocatedDaemon(S, cpu_slots=2)
        try:
            check_fn(d, {"launcher": "srun"})
        finally:
            d.close()
        run_steps(d.job)
        S.wait_no_job_pids(d.job)
    case.__name__ = f"test_srun_{check_fn.__name__[len('check_'):]}"
    return case


def srun_mpi_case(mpi):
    """backend mpi under launcher srun with mpi's implementation: the daemon passes srun
    the pmi plugin vocabulary.json names, and a checked allreduce and all_gather over
    MPI's own collectives come out right (#wrong 0), each a 2-task step of the job."""
    @on_cluster
    def case():
        d = AllocatedDaemon(S, cpu_slots=2)
        try:
            launcher_checks.check_collective(d, {"launcher": "srun", "backend": "mpi",
                                                 "mpi": mpi})
        finally:
            d.close()
        check(all(r["State"] == "COMPLETED" for r in run_steps(d.job, 2).values()),
              S.steps(d.job))
        S.wait_no_job_pids(d.job)
    case.__name__ = f"test_srun_mpi_{mpi}_collective"
    return case


@on_cluster
def test_srun_ranks_are_the_jobs_tasks():
    """A run's ranks under launcher srun are the tasks of one step of the daemon's job,
    SLURM_PROCID their rank, no DDPB_RANK given; sacct names the step after the run."""
    d = AllocatedDaemon(S, cpu_slots=2)
    try:
        exp = d.submit(dict(launcher_checks.LONG_TRAIN, launcher="srun"))
        run = launcher_checks.wait_ranks_up(d, exp, 2)
        step = check_ranks_are_tasks(run, d.job)
        status, body, _ = d.request("POST", f"/v1/runs/{run['id']}/cancel")
        check(status in (200, 202), (status, body))
        d.wait_experiment(exp["id"], timeout=60)
    finally:
        d.close()
    check(run_steps(d.job, 1) == {run["id"]: step_row(S.steps(d.job), d.job, step)},
          S.steps(d.job))
    S.wait_no_job_pids(d.job)


def poll_run(url, run_id, cond, timeout=60):
    """GET url/v1/runs/run_id until cond(run) (None while the daemon is not up)."""
    deadline = time.time() + timeout
    run = None
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/v1/runs/{run_id}", timeout=5) as r:
                run = json.load(r)
            if cond(run):
                return run
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} at {url}: not reached in {timeout}s: {run}")


def ranks_up(run):
    return (run["status"] == "running" and len(run["ranks"]) == 2
            and all(k["pid"] for k in run["ranks"]))


@on_cluster
def test_sbatch_srun_mode_runs_a_tcp_spec():
    """deploy/slurm/ddpbench.sbatch --srun: one ddpbenchd in the job, a 2-rank TCP
    training run whose ranks are the job's tasks (SLURM_PROCID = rank, read while they
    run), the experiment succeeded and exported, sacct lists the run's step."""
    port = free_port()
    spec = write_spec("srun-tcp.json", dict(launcher_checks.TRAIN, steps=600, launcher="srun",
                                            backend="tcp", name="slurm-srun-tcp"))
    job = S.sbatch(["--ntasks=2", SCRIPT, "--srun", spec],
                   env=script_env(DDPB_PORT=str(port)), output=S.path("jobs", "srun-%j.out"))
    run = poll_run(f"http://127.0.0.1:{port}", 1, ranks_up)
    step = check_ranks_are_tasks(run, job)
    state = S.wait_job(job)
    with open(S.path("jobs", f"srun-{job}.out"), errors="replace") as f:
        log = f.read()
    check(state in ("COMPLETED", "GONE") and "experiment 1 succeeded" in log, (state, log))
    with open(S.path("jobs", f"ddpbench-{job}.json")) as f:
        exp = json.load(f)
    check(exp["status"] == "succeeded" and len(exp["runs"]) == 1, exp["runs"])
    check(os.path.getsize(S.path("jobs", f"ddpbench-{job}.csv")) > 0, "the results CSV")
    steps = run_steps(job, 1)
    check(steps[1]["State"] == "COMPLETED" and steps[1]["JobID"] == f"{job}.{step}", steps)
    S.wait_no_job_pids(job)


@on_cluster
def test_scancel_ends_the_srun_run_cancelled():
    """scancel of the job while its run trains: Slurm sends SIGTERM to every process of
    the job, the daemon ends the run 'cancelled' naming the job (stored in
    DDPB_STATE_DIR, read back by a daemon started on it after the job), and nothing of
    the job (slurmstepd, srun, ranks) is left."""
    port, state_dir = free_port(), S.path("jobs", "scancel-state")
    spec = write_spec("srun-long.json", dict(launcher_checks.LONG_TRAIN, launcher="srun"))
    job = S.sbatch(["--ntasks=2", SCRIPT, "--srun", spec],
                   env=script_env(DDPB_PORT=str(port), DDPB_STATE_DIR=state_dir))
    run = poll_run(f"http://127.0.0.1:{port}", 1, ranks_up)
    check_ranks_are_tasks(run, job)
    S.cmd("scancel", job)
    state = S.wait_job(job, timeout=60)
    check(state == "CANCELLED", (state, S.output(job)))
    S.wait_no_job_pids(job)
    launcher_checks.check_nothing_left(run["id"])
    rows = S.steps(job)
    check(rows[0]["State"].startswith("CANCELLED"), rows)
    run_steps(job, 1)
    d = Daemon(state_dir=state_dir)  # outside Slurm: what the job's daemon stored
    try:
        stored = d.get(f"/v1/runs/{run['id']}")
    finally:
        d.close()
    check(stored["status"] == "cancelled" and f"Slurm ended job {job}" in stored["error"],
          stored)


CASES = [
    test_srun_step_runs_two_tasks_listed_by_sacct,
    test_mpi_hello_under_each_implementations_pmi_plugin,
    test_the_other_pmi_plugins_do_not_wire_mpi,
    test_sbatch_runs_a_spec_and_writes_the_csv,
    test_sbatch_srun_mode_refuses_what_it_cannot_run,
    test_two_slurmd_in_netlab_namespaces,
    test_daemons_mode_across_two_netlab_nodes,
    test_srun_run_across_two_netlab_nodes,
    test_srun_ranks_are_the_jobs_tasks,
    test_sbatch_srun_mode_runs_a_tcp_spec,
    test_scancel_ends_the_srun_run_cancelled,
] + [srun_case(fn) for fn in launcher_checks.CHECKS] + [srun_mpi_case(m)
                                                         for m in ("openmpi", "mpich")]


def test_nothing_of_the_cluster_is_left():
    """After every job: scancel, stop the daemons; no slurmstepd of either cluster left,
    and no netlab namespace of the two-node one."""
    global S, S2
    clusters, S, S2 = (S, S2), None, None
    for s in clusters:
        if s.started is True:
            s.stop(check_clean=True)
            check(not s.stepd_pids(), s.stepd_pids())
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    check(clusters[1].netlab_prefix not in r.stdout, f"namespaces left: {r.stdout}")


def main():
    global S, S2
    why = why_unavailable()
    if why:
        def test_the_cluster_can_start():
            raise Skip(why)
        return run_cases([test_the_cluster_can_start])
    S, S2 = MiniSlurm(), MiniSlurm(nodes=2)
    try:
        return run_cases(CASES + [test_nothing_of_the_cluster_is_left])
    finally:
        for s in (S, S2):
            if s:
                s.stop()


if __name__ == "__main__":
    raise SystemExit(main())
