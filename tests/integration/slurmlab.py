"""A real Slurm on this machine for the integration tests: munged, mariadbd, slurmdbd,
slurmctld and slurmd (Debian's slurm-wlm 22.05, munge, slurmdbd and mariadb-server-core,
installed by deploy/install-deps.sh), started as children of the test with every key,
socket, port, state and spool directory of their own in one temporary directory, so a
Slurm, munge or MariaDB already on the machine is never touched; and all of it torn down
after, checked: no slurmstepd of this cluster (nor anything it started) is left.

    with MiniSlurm() as s:            # or MiniSlurm(nodes=2): two slurmd, see below
        job = s.sbatch(["--ntasks=2", "--wrap", "srun sh -c 'echo $SLURM_PROCID'"])
        s.wait_job(job)
        s.steps(job)   # sacct's rows for the job and its steps

Decisions:
- Accounting is real: slurmdbd on a MariaDB of its own, so `sacct` lists jobs and their
  steps as on a cluster. The alternatives cannot show steps: jobcomp/filetxt records only
  whole jobs, and accounting_storage/filetxt left Slurm long ago. mariadbd starts on an
  empty data directory with --skip-grant-tables (no mariadb-install-db, which needs the
  client package; no users or passwords: it listens on 127.0.0.1 only, for this test)
  and slurmdbd creates its database and registers the cluster itself; all of it takes
  about a second.
- No cgroups: a container (CI) cannot delegate them to slurmd. proctrack/linuxproc finds
  a step's processes by their parentage, task/none binds nothing, and
  jobacct_gather/linux reads /proc, so steps still have usage figures (sstat, sacct).
- SlurmUser and SlurmdUser are root (jobs run as the root that runs the tests). The
  node is this host (its short name) with the CPUs the machine has; select/cons_tres
  with CR_CPU, so a 2-task job on 2 CPUs runs at once.
- nodes=2 runs two slurmd, each in a netlab host (deploy/netlab.sh up --no-daemons: a
  network namespace with its own address, joined to the other by a veth bridge), named
  h0 and h1 (slurmd -N) at 10.213.0.10 and .11. Every other daemon runs in h0's
  namespace, where slurmctld listens on h0's address and MariaDB and slurmdbd on its
  loopback, and the commands (sbatch, sacct...) run there too; nothing is added to the
  root namespace. Each node gets the machine's CPUs shared out (one each on two cores).
  A job's tasks on h1 reach h0 over the bridge, as on two machines; they still share
  this machine's filesystem, so no file needs copying. One slurmd (nodes=1) is this
  host itself, in the root namespace.
- Each daemon runs in the foreground as a child of its own session; stop() scancels
  every job first (slurmd ends their steps, as on a cluster), waits for the steps of
  this cluster to end, then stops the daemons. A slurmstepd is told from another
  cluster's by SLURM_CONF in its environment (slurmd passes its own on)."""
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from harness import SOURCE, Daemon, check, pid_alive

NETLAB = os.path.join(SOURCE, "deploy", "netlab.sh")

TOOLS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd", "sbatch", "srun", "sinfo",
         "squeue", "sacct", "scontrol", "scancel")
PACKAGES = "slurm-wlm, slurmdbd, mariadb-server-core, munge"
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
         "PREEMPTED", "BOOT_FAIL", "DEADLINE")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tool(name):
    return shutil.which(name) or f"/usr/sbin/{name}"


def why_unavailable():
    """None when a MiniSlurm can start here, else the reason (the tests fail with it in
    CI: tests/summarize.py allows no skip of test_slurm)."""
    missing = [t for t in TOOLS if not shutil.which(t) and not os.path.exists(f"/usr/sbin/{t}")]
    if missing:
        return f"{', '.join(missing)} missing (deploy/install-deps.sh installs {PACKAGES})"
    if os.geteuid() != 0:
        return "needs root (slurmd starts jobs as their user; SlurmUser is root)"
    return None


def proc_environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def proc_argv(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


class MiniSlurm:
    """munged + mariadbd + slurmdbd + slurmctld + slurmd for this host alone, under dir."""

    def __init__(self, nodes=1):
        self.dir = tempfile.mkdtemp(prefix="ddpb-slurm-")
        os.chmod(self.dir, 0o755)
        self.host = socket.gethostname().split(".")[0]
        self.nodes = nodes
        self.cpus = max((os.cpu_count() or 1) // nodes, 1)
        # nodes > 1: netlab hosts of a prefix of our own (so `down` removes only ours)
        self.netlab_prefix = f"ddpbsl{os.getpid()}" if nodes > 1 else None
        self.node_names = [f"h{i}" for i in range(nodes)] if nodes > 1 else [self.host]
        self.node_addrs = [f"10.213.0.{10 + i}" for i in range(nodes)] if nodes > 1 else []
        self.procs = []
        self.started = False  # True, or the exception start() failed with
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        for k in list(self.env):  # a job's own variables would steer sbatch and srun
            if k.startswith("SLURM_") and k != "SLURM_CONF":
                del self.env[k]
        self.munge_socket = self.path("munge", "munge.socket")
        self.db_port = free_port()
        self.dbd_port = free_port()

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop(check_clean=exc[0] is None)

    def path(self, *p):
        return os.path.join(self.dir, *p)

    # --- configuration ---------------------------------------------------------------

    def write_conf(self):
        mem_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
        for d in ("munge", "ctld", "spool", "log", "jobs", "db"):
            os.makedirs(self.path(d), mode=0o755, exist_ok=True)
        os.chmod(self.path("munge"), 0o700)
        with open(self.path("munge", "munge.key"), "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(self.path("munge", "munge.key"), 0o400)
        conf = f"""ClusterName=ddpbtest
SlurmctldHost={self.host}{f"({self.node_addrs[0]})" if self.node_addrs else ""}
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SrunPortRange=60001-60100
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={self.path("ctld")}
SlurmdSpoolDir={self.path("spool")}/%n
SlurmctldPidFile={self.path("slurmctld.pid")}
SlurmdPidFile={self.path("slurmd-%n.pid")}
SlurmctldLogFile={self.path("log", "slurmctld.log")}
SlurmdLogFile={self.path("log", "slurmd-%n.log")}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={self.dbd_port}
AccountingStoragePass={self.munge_socket}
MailProg=/bin/true
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
PartitionName=ddpb Nodes={",".join(self.node_names)} Default=YES MaxTime=INFINITE State=UP
"""
        mem = max(mem_mb - 512, 256) // self.nodes
        for i, name in enumerate(self.node_names):
            addr = f" NodeAddr={self.node_addrs[i]}" if self.node_addrs else ""
            conf += f"NodeName={name}{addr} CPUs={self.cpus} RealMemory={mem} State=UNKNOWN\n"
            os.makedirs(self.path("spool", name), mode=0o755, exist_ok=True)
        with open(self.conf, "w") as f:
            f.write(conf)
        # slurmdbd reads slurmdbd.conf beside SLURM_CONF; it must be private to SlurmUser
        dbd = f"""AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
DbdHost={self.host}
DbdAddr=127.0.0.1
DbdPort={self.dbd_port}
SlurmUser=root
PidFile={self.path("slurmdbd.pid")}
LogFile={self.path("log", "slurmdbd.log")}
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={self.db_port}
StorageUser=root
StorageLoc=ddpb_slurm_acct
"""
        fd = os.open(self.path("slurmdbd.conf"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(dbd)

    # --- daemons ---------------------------------------------------------------------

    def start(self):
        """Starts the cluster; once started (or failed to), again returns at once (or
        raises the same error): the cases of a file share one cluster."""
        if self.started:
            if isinstance(self.started, BaseException):
                raise self.started
            return
        try:
            self.start_daemons()
            self.started = True
        except BaseException as e:
            self.started = e
            raise

    def start_daemons(self):
        self.write_conf()
        if self.netlab_prefix:
            self.netlab("up", "--nodes", str(self.nodes), "--profile", "unshaped",
                        "--no-daemons")
        self.spawn([tool("munged"), "--foreground", "--force", "--socket", self.munge_socket,
                    "--key-file", self.path("munge", "munge.key"),
                    "--pid-file", self.path("munge", "munged.pid"),
                    "--seed-file", self.path("munge", "munged.seed"),
                    "--log-file", self.path("log", "munged.log")], "munged")
        self.spawn([tool("mariadbd"), "--no-defaults", "--datadir=" + self.path("db"),
                    "--socket=" + self.path("db.sock"), "--port=%d" % self.db_port,
                    "--bind-address=127.0.0.1", "--skip-grant-tables", "--user=root",
                    "--pid-file=" + self.path("mariadbd.pid"),
                    "--log-error=" + self.path("log", "mariadbd.log"),
                    "--innodb-buffer-pool-size=16M", "--innodb-log-file-size=8M"], "mariadbd")
        self.wait(lambda: os.path.exists(self.munge_socket), "munged's socket")
        self.wait(lambda: self.port_open(self.db_port), "mariadbd's port")
        self.spawn([tool("slurmdbd"), "-D"], "slurmdbd")
        self.wait(lambda: self.port_open(self.dbd_port), "slurmdbd's port")
        self.spawn([tool("slurmctld"), "-D", "-i", "-f", self.conf], "slurmctld")
        for i, name in enumerate(self.node_names):
            argv = [tool("slurmd"), "-D", "-f", self.conf, "-N", name]
            if i > 0:  # h0 keeps the machine's /tmp, where the test's files are
                argv = self.own_tmp(argv, i)
            self.spawn(argv, f"slurmd-{name}", node=i)
        self.wait(self.node_idle, "the node idle in sinfo", timeout=60)

    def in_node(self, argv, node=0):
        """argv run in the node's network namespace (as is with one node). nsenter, not ip
        netns exec: that one remounts /sys for the namespace, and slurmd then finds no
        /sys/fs/cgroup and will not start; nsenter enters the network namespace alone,
        and execs argv, so the process started is argv's own."""
        if not self.netlab_prefix:
            return list(argv)
        return ["nsenter", f"--net=/run/netns/{self.netlab_prefix}-h{node}", *argv]

    def own_tmp(self, argv, node):
        """argv with a /tmp of the node's own, in a mount namespace of its own (unshare).
        The nodes of one machine must not share /tmp: Slurm's PMIx plugin makes each
        step's directory there (spmix_appdir_UID_JOB.STEP, and fails if it exists), so
        OpenMPI under srun --mpi=pmix would fail on the second node. This cluster's
        directory stays at its path: when it is under /tmp it is bound into the node's
        /tmp first, and --rbind carries it along. unshare execs the shell, which execs
        argv: the process started is still argv's own."""
        tmp = self.path("node-tmp", self.node_names[node])
        os.makedirs(tmp, exist_ok=True)
        os.chmod(tmp, 0o1777)
        inner = tmp
        rel = os.path.relpath(self.dir, "/tmp")
        if not rel.startswith(".."):
            inner = os.path.join(tmp, rel)
            os.makedirs(inner, mode=0o755, exist_ok=True)
        script = ('[ "$2" = "$3" ] || mount --bind "$1" "$2" && mount --rbind "$3" /tmp && '
                  'shift 3 && exec "$@"')
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                self.dir, inner, tmp, *argv]

    def netlab(self, *args):
        env = dict(os.environ, NETLAB_PREFIX=self.netlab_prefix)
        r = subprocess.run([NETLAB, *args, "--dir", self.path("netlab")], capture_output=True,
                           text=True, env=env, timeout=60)
        check(r.returncode == 0, f"netlab.sh {' '.join(args)}: {r.stdout} {r.stderr}")

    def spawn(self, argv, name, node=0):
        """Starts a daemon in the foreground, in node's namespace (h0: every daemon but
        the other slurmd), logging to log/NAME.out."""
        log = open(self.path("log", name + ".out"), "wb")
        self.procs.append((name, subprocess.Popen(self.in_node(argv, node), stdout=log,
                                                  stderr=log, env=self.env,
                                                  start_new_session=True)))
        log.close()

    def port_open(self, port):
        """Something listens on h0's loopback at port (bash's /dev/tcp, run in h0's
        namespace: a socket of this process would be in the root namespace)."""
        self.check_daemons()
        r = subprocess.run(self.in_node(["bash", "-c", f"exec 3<>/dev/tcp/127.0.0.1/{port}"]),
                           capture_output=True, timeout=10)
        return r.returncode == 0

    def check_daemons(self):
        for name, p in self.procs:
            check(p.poll() is None, f"{name} exited {p.returncode}: {self.log(name)}")

    def node_idle(self):
        """Every node idle in sinfo (one line per node)."""
        self.check_daemons()
        r = self.cmd("sinfo", "-N", "-h", "-o", "%N %t", check_rc=False)
        states = dict(line.split() for line in r.stdout.splitlines() if line.strip())
        return r.returncode == 0 and states == {n: "idle" for n in self.node_names}

    def log(self, name):
        """The tail of a daemon's log file, or of its stdout/stderr when that is empty."""
        for f in (name + ".log", name + ".out"):
            try:
                with open(self.path("log", f), errors="replace") as fh:
                    text = fh.read()[-2000:]
                if text:
                    return text
            except OSError:
                pass
        return ""

    def logs(self):
        names = ["slurmctld", "slurmdbd"] + [f"slurmd-{n}" for n in self.node_names]
        return " ".join(f"{n}: {self.log(n)}" for n in names)

    def wait(self, cond, what, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if cond():
                return
            time.sleep(0.2)
        raise AssertionError(f"{what} not reached in {timeout}s: {self.logs()}")

    # --- commands --------------------------------------------------------------------

    def cmd(self, name, *args, env=None, timeout=30, check_rc=True):
        """Runs a Slurm command of this cluster (in h0's namespace when there are several
        nodes); returns the CompletedProcess."""
        r = subprocess.run(self.in_node([tool(name), *args]), capture_output=True, text=True,
                           env=env or self.env, timeout=timeout)
        if check_rc:
            check(r.returncode == 0, f"{name} {' '.join(args)}: {r.returncode}: {r.stdout} "
                  f"{r.stderr}")
        return r

    def sbatch(self, args, env=None, output=None):
        """Submits a batch job (args: sbatch's options, then the script and its arguments,
        or --wrap); returns its id as a string. The job runs in jobs/, its output goes to
        output (default jobs/slurm-JOBID.out, what output() reads)."""
        r = self.cmd("sbatch", "--parsable", "--chdir", self.path("jobs"),
                     "--output", output or self.path("jobs", "slurm-%j.out"), *args, env=env)
        return r.stdout.strip().split(";")[0]

    def output(self, job):
        try:
            with open(self.path("jobs", f"slurm-{job}.out"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def job_state(self, job):
        r = self.cmd("scontrol", "show", "job", job, check_rc=False)
        for word in r.stdout.split():
            if word.startswith("JobState="):
                return word.split("=", 1)[1]
        return "GONE"

    def wait_job(self, job, timeout=90, until=ENDED):
        """Waits for the job to reach a state in until; returns the state."""
        state = None

        def reached():
            nonlocal state
            state = self.job_state(job)
            return state in until or (state == "GONE" and "GONE" not in until)

        self.wait(reached, f"job {job} in {until} (output: {self.output(job)})", timeout)
        return state

    def steps(self, job, timeout=20, want=None):
        """sacct's rows for the job and its steps, each {JobID, JobName, State, NTasks,
        ExitCode, NodeList}. Accounting reaches slurmdbd a moment after the job's end:
        waits until want(rows) holds (default: every row in an ended state)."""
        fields = ("JobID", "JobName", "State", "NTasks", "ExitCode", "NodeList")
        rows = []

        def got():
            nonlocal rows
            r = self.cmd("sacct", "-n", "-P", "-a", "-j", job, "-o", ",".join(fields),
                         check_rc=False)
            rows = [dict(zip(fields, line.split("|"))) for line in r.stdout.splitlines() if line]
            if want:
                return want(rows)
            return bool(rows) and all(row["State"].split()[0] in ENDED for row in rows)

        deadline = time.time() + timeout
        while time.time() < deadline and not got():
            time.sleep(0.3)
        check(got(), f"sacct for job {job}: {rows}")
        return rows

    # --- processes -------------------------------------------------------------------

    def stepd_pids(self):
        """This cluster's slurmstepd processes (their environment names our slurm.conf)."""
        mine = b"SLURM_CONF=" + self.conf.encode()
        return [int(d) for d in os.listdir("/proc") if d.isdigit()
                and proc_argv(int(d))[:1] and proc_argv(int(d))[0].startswith("slurmstepd")
                and mine in proc_environ(int(d)) and pid_alive(int(d))]

    def job_pids(self, job):
        """Live processes that Slurm started for the job (SLURM_JOB_ID in their
        environment, and this cluster's conf): what must be gone after it ends."""
        mine = (b"SLURM_JOB_ID=" + job.encode(), b"SLURM_CONF=" + self.conf.encode())
        out = []
        for d in os.listdir("/proc"):
            if d.isdigit() and int(d) != os.getpid():
                env = proc_environ(int(d))
                if all(m in env for m in mine) and pid_alive(int(d)):
                    out.append(int(d))
        return out

    def wait_no_job_pids(self, job, timeout=20):
        """Fails naming what is still alive of the job after timeout."""
        deadline = time.time() + timeout
        while time.time() < deadline and (self.job_pids(job) or self.stepd_pids()):
            time.sleep(0.2)
        left = [(p, " ".join(proc_argv(p))) for p in set(self.job_pids(job) + self.stepd_pids())]
        check(not left, f"left behind by job {job}: {left}")

    def stop(self, check_clean=False):
        """Cancels every job, waits for their steps to end, stops the daemons and removes
        the directory. check_clean: fail if a slurmstepd of this cluster outlived its job
        (after the daemons are stopped, so a failed check leaves nothing running)."""
        left = []
        if any(n.startswith("slurmd-") and p.poll() is None for n, p in self.procs):
            self.cmd("scancel", "--full", "-u", "root", check_rc=False)
            deadline = time.time() + 20
            while time.time() < deadline and (self.stepd_pids() or self.queued()):
                time.sleep(0.2)
            left = [(p, " ".join(proc_argv(p))) for p in self.stepd_pids()]
        for pid, _ in left:  # never leave them: but the check below still fails
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for name, p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        if self.netlab_prefix and os.path.isdir(self.path("netlab")):
            self.netlab("down")  # every process left in our namespaces, then them
        if os.environ.get("DDPB_KEEP_STATE") != "1":
            shutil.rmtree(self.dir, ignore_errors=True)
        if check_clean:
            check(not left, f"slurmstepd left after scancel: {left}")

    def queued(self):
        r = self.cmd("squeue", "-h", "-o", "%i", check_rc=False)
        return r.returncode == 0 and bool(r.stdout.strip())


class AllocatedDaemon(Daemon):
    """A harness Daemon (tests/integration/harness.py) running inside a Slurm allocation:
    ddpbenchd as the batch step of an sbatch job of ntasks tasks (the shell execs it, as
    deploy/slurm/ddpbench.sbatch --srun runs it, with the job's SLURM_* variables), so
    runs with launcher "srun" are steps of that job. Its output is the daemon's log; the
    test reaches it on 127.0.0.1 (one node). stop() signals the batch step alone
    (scancel --batch: the daemon, which the shell became) and waits for the job's end;
    restart() submits a new job on the same state directory."""

    def __init__(self, slurm, ntasks=2, **kw):
        self.slurm = slurm
        self.ntasks = ntasks
        self.job = None
        super().__init__(**kw)

    def start(self):
        args = self.argv()
        self.log = open(os.devnull, "wb")  # Daemon.stop closes it; the job writes the log
        self.job = self.slurm.sbatch([f"--ntasks={self.ntasks}", "--job-name=ddpbenchd",
                                      "--wrap", "exec " + shlex.join(args)],
                                     output=os.path.join(self.state_dir, "daemon.log"),
                                     env=self.env)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.read_info():
                return
            state = self.slurm.job_state(self.job)
            if state in ENDED or state == "GONE":
                raise RuntimeError(f"ddpbenchd's job {self.job} ended {state}: "
                                   f"{self.daemon_log()}")
            time.sleep(0.1)
        raise RuntimeError(f"ddpbenchd did not start in job {self.job}: {self.daemon_log()}")

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.job and self.slurm.job_state(self.job) not in ENDED + ("GONE",):
            self.slurm.cmd("scancel", "--batch", f"--signal={signal.Signals(sig).name[3:]}",
                           self.job, check_rc=False)
            try:
                self.slurm.wait_job(self.job, timeout=timeout)
            except AssertionError:
                self.slurm.cmd("scancel", self.job, check_rc=False)
                self.slurm.wait_job(self.job, timeout=timeout)
                raise AssertionError(f"ddpbenchd's job {self.job} did not end on {sig}")
        self.log.close()
        return None


def main(argv):
    """python3 tests/integration/slurmlab.py [--nodes N] [SBATCH_OPTION...] -- COMMAND...:
    COMMAND as the batch job of a fresh MiniSlurm (e.g. tests/bench/bench_launch.py,
    whose srun figure needs an allocation), its output printed; the exit status is the
    job's."""
    nodes = 1
    if argv[:1] == ["--nodes"]:
        nodes, argv = int(argv[1]), argv[2:]
    if "--" not in argv or why_unavailable():
        print(main.__doc__ if "--" not in argv else why_unavailable(), file=sys.stderr)
        return 2
    opts, command = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    with MiniSlurm(nodes=nodes) as s:
        job = s.sbatch([*opts, "--wrap", shlex.join(command)],
                       env=dict(s.env, SLURM_EXPORT_ENV="ALL"))
        state = s.wait_job(job, timeout=24 * 3600)
        print(s.output(job), end="")
        return 0 if state in ("COMPLETED", "GONE") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
