#!/usr/bin/env python3
"""deploy/slurm/ddpbench.sbatch under a real Slurm: Debian's slurm-wlm and munge, started
by this test on this machine alone (munged, slurmctld and slurmd as child processes, with
a slurm.conf, a munge key and every socket, port and state directory of their own in a
temporary directory, so a Slurm or munge already on the machine is never touched). The
script is submitted with sbatch with a 2-rank collective spec; the test waits for the job
and checks the results CSV it wrote beside the job's output, and its log.

Needs root (slurmd runs jobs as their user; SlurmUser is root here) and the packages:
deploy/install-deps.sh installs them, so CI runs this; elsewhere it skips with the reason,
and tests/summarize.py does not allow that skip in CI."""
import csv
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from harness import BUILD, SOURCE, Skip, check, run_cases

SCRIPT = os.path.join(SOURCE, "deploy", "slurm", "ddpbench.sbatch")
TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo", "squeue", "sacct", "scontrol")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def why_unavailable():
    missing = [t for t in TOOLS if not shutil.which(t) and not os.path.exists(f"/usr/sbin/{t}")]
    if missing:
        return f"{', '.join(missing)} missing (deploy/install-deps.sh installs slurm-wlm, munge)"
    if os.geteuid() != 0:
        return "needs root (slurmd starts jobs as their user)"
    return None


def tool(name):
    return shutil.which(name) or f"/usr/sbin/{name}"


class MiniSlurm:
    """munged + slurmctld + slurmd for this host alone, all under dir."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="ddpb-slurm-")
        os.chmod(self.dir, 0o755)
        self.host = socket.gethostname().split(".")[0]
        self.procs = []
        self.env = dict(os.environ, SLURM_CONF=os.path.join(self.dir, "slurm.conf"))
        self.munge_socket = os.path.join(self.dir, "munge", "munge.socket")

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def write_conf(self):
        cpus = os.cpu_count() or 1
        mem_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
        for d in ("munge", "ctld", "spool", "log", "jobs"):
            os.makedirs(self.path(d), mode=0o755, exist_ok=True)
        os.chmod(self.path("munge"), 0o700)
        with open(self.path("munge", "munge.key"), "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(self.path("munge", "munge.key"), 0o400)
        conf = f"""ClusterName=ddpbtest
SlurmctldHost={self.host}
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SrunPortRange=60001-60100
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={self.path("ctld")}
SlurmdSpoolDir={self.path("spool")}
SlurmctldPidFile={self.path("slurmctld.pid")}
SlurmdPidFile={self.path("slurmd.pid")}
SlurmctldLogFile={self.path("log", "slurmctld.log")}
SlurmdLogFile={self.path("log", "slurmd.log")}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
NodeName={self.host} CPUs={cpus} RealMemory={max(mem_mb - 512, 256)} State=UNKNOWN
PartitionName=ddpb Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
"""
        with open(self.path("slurm.conf"), "w") as f:
            f.write(conf)

    def start(self):
        self.write_conf()
        self.spawn([tool("munged"), "--foreground", "--force", "--socket", self.munge_socket,
                    "--key-file", self.path("munge", "munge.key"),
                    "--pid-file", self.path("munge", "munged.pid"),
                    "--seed-file", self.path("munge", "munged.seed"),
                    "--log-file", self.path("log", "munged.log")], "munged")
        self.wait(lambda: os.path.exists(self.munge_socket), "munged's socket")
        self.spawn([tool("slurmctld"), "-D", "-i", "-f", self.path("slurm.conf")], "slurmctld")
        self.spawn([tool("slurmd"), "-D", "-f", self.path("slurm.conf")], "slurmd")
        self.wait(self.node_idle, "the node idle in sinfo", timeout=60)

    def spawn(self, argv, name):
        log = open(self.path("log", name + ".out"), "wb")
        self.procs.append((name, subprocess.Popen(argv, stdout=log, stderr=log, env=self.env,
                                                  start_new_session=True)))

    def node_idle(self):
        for name, p in self.procs:
            check(p.poll() is None, f"{name} exited: {self.log(name)}")
        r = subprocess.run([tool("sinfo"), "-h", "-o", "%t"], capture_output=True, text=True,
                           env=self.env, timeout=10)
        return r.returncode == 0 and r.stdout.strip() == "idle"

    def log(self, name):
        for f in (name + ".log", name + ".out"):
            try:
                with open(self.path("log", f), errors="replace") as fh:
                    text = fh.read()[-2000:]
                if text:
                    return text
            except OSError:
                pass
        return ""

    def wait(self, cond, what, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if cond():
                return
            time.sleep(0.2)
        raise AssertionError(f"{what} not reached in {timeout}s: slurmctld: {self.log('slurmctld')}"
                             f" slurmd: {self.log('slurmd')} munged: {self.log('munged')}")

    def job_state(self, job):
        r = subprocess.run([tool("scontrol"), "show", "job", job], capture_output=True, text=True,
                           env=self.env, timeout=10)
        for word in r.stdout.split():
            if word.startswith("JobState="):
                return word.split("=", 1)[1]
        return "GONE"

    def stop(self):
        for name, p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def test_sbatch_runs_a_spec_and_writes_the_csv():
    why = why_unavailable()
    if why:
        raise Skip(why)
    s = MiniSlurm()
    try:
        s.start()
        jobs = s.path("jobs")
        spec = os.path.join(jobs, "spec.json")
        with open(spec, "w") as f:
            f.write('{"name": "slurm-allreduce", "workload": "collective", "world_size": 2,'
                    ' "min_bytes": "4K", "max_bytes": "64K", "factor": 4, "iters": 5,'
                    ' "warmup": 1}')
        env = dict(s.env, DDPB_BIN=BUILD, DDPB_PORT=str(free_port()), DDPB_OUT=jobs)
        r = subprocess.run([tool("sbatch"), "--parsable", "--chdir", jobs, SCRIPT, spec],
                           capture_output=True, text=True, env=env, timeout=30)
        check(r.returncode == 0, f"sbatch: {r.stdout} {r.stderr}")
        job = r.stdout.strip().split(";")[0]
        s.wait(lambda: s.job_state(job) in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "GONE"),
               f"job {job} to end", timeout=90)
        out = os.path.join(jobs, f"ddpbench-{job}.out")
        with open(out, errors="replace") as f:
            log = f.read()
        check(s.job_state(job) in ("COMPLETED", "GONE"), f"job {job}: {s.job_state(job)}: {log}")
        check("experiment 1 succeeded" in log, log)
        with open(os.path.join(jobs, f"ddpbench-{job}.csv")) as f:
            rows = list(csv.DictReader(f))
        check([r["bytes"] for r in rows] == ["4096", "16384", "65536"], rows)
        for row in rows:  # both ranks on this one node, every element right, real figures
            check(row["nodes"] == "1" and row["wrong"] == "0"
                  and float(row["busbw_gbs_mean"]) > 0, row)
        check(os.path.exists(os.path.join(jobs, f"ddpbench-{job}.json")), "experiment JSON")
    finally:
        s.stop()


if __name__ == "__main__":
    raise SystemExit(run_cases([test_sbatch_runs_a_spec_and_writes_the_csv]))
