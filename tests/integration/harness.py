"""Integration-test harness: runs the real ddpbenchd (and through it the real workers)
on free ports with a temporary state directory, talks to it over HTTP with the standard
library only, and counts cases the way tests/run.sh expects ("TEST-SUMMARY passed=P
failed=F skipped=S" as the last line; a case raises Skip when it cannot run here).

Decision: no test framework beyond this file and no third-party packages, so the suite
runs wherever python3 does; every wait is bounded and every daemon started is stopped.

TLS: TlsKeys makes a cluster's keys with deploy/tls-keys.sh; Daemon(tls=keys) serves its
API over HTTPS with them, and every request of the harness verifies it against the keys'
CA (Daemon.opener for a test's own urllib handlers).
"""
import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request

BUILD = os.environ.get("DDPB_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
SOURCE = os.environ.get("DDPB_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
DAEMON = os.path.join(BUILD, "daemon", "ddpbenchd")
WORKER = os.path.join(BUILD, "worker", "ddpbench-worker")
TERMINAL = ("succeeded", "failed", "cancelled", "interrupted")


class TlsKeys:
    """A cluster's TLS keys from deploy/tls-keys.sh in a scratch folder: ca (the CA's PEM,
    for --join-ca and clients) and cert(name) / key(name) per node. Every certificate is
    valid for 127.0.0.1 and localhost, so one serves every daemon of a loopback test."""

    def __init__(self, *names):
        self.dir = tempfile.mkdtemp(prefix="ddpb-tls-")
        self.names = names or ("node",)
        r = subprocess.run([os.path.join(SOURCE, "deploy", "tls-keys.sh"), self.dir,
                            *self.names], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"deploy/tls-keys.sh failed: {r.stderr}")
        self.ca = os.path.join(self.dir, "ca.pem")

    def cert(self, name=None):
        return os.path.join(self.dir, (name or self.names[0]) + ".pem")

    def key(self, name=None):
        return os.path.join(self.dir, (name or self.names[0]) + ".key")

    def context(self):
        """A client context that trusts this CA only (peer and host verified)."""
        return ssl.create_default_context(cafile=self.ca)

    def daemon_args(self, name=None):
        return ["--tls-cert", self.cert(name), "--tls-key", self.key(name)]

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


class Daemon:
    """A ddpbenchd process. state_dir persists across restart() unless removed. tls: a
    TlsKeys the API is served with (HTTPS), None for plain HTTP."""

    def __init__(self, cpu_slots=None, extra_args=(), state_dir=None, binary=None, env=None,
                 tls=None):
        self.tls = tls
        self.ssl = tls.context() if tls else None
        self.binary = binary or DAEMON  # an installed copy (test_deploy) or the build's
        self.env = env  # None: this process's; test_bundle gives a cleared one
        self.state_dir = state_dir or tempfile.mkdtemp(prefix="ddpb-it-")
        self.owns_state = state_dir is None
        self.cpu_slots = cpu_slots
        self.extra_args = list(extra_args)
        self.proc = None
        self.start()

    def argv(self):
        """The daemon's command line (its info file removed first, so that
        read_info() sees only the new one)."""
        info = os.path.join(self.state_dir, "ddpbenchd.json")
        if os.path.exists(info):
            os.unlink(info)
        args = [self.binary, "--port", "0", "--store-port", "0", "--state-dir", self.state_dir,
                "--kill-grace-ms", "1000", "--log-level", "info"]
        if self.cpu_slots:
            args += ["--cpu-slots", str(self.cpu_slots)]
        if self.tls:
            args += self.tls.daemon_args()
        return args + self.extra_args

    def read_info(self):
        """True once the started daemon wrote its info file (self.info, self.url set)."""
        try:
            with open(os.path.join(self.state_dir, "ddpbenchd.json")) as f:
                self.info = json.load(f)
            scheme = "https" if self.tls else "http"
            self.url = f"{scheme}://127.0.0.1:{self.info['http_port']}"
            return True
        except (OSError, ValueError, KeyError):
            return False

    def start(self):
        args = self.argv()
        self.log = open(os.path.join(self.state_dir, "daemon.log"), "ab")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=self.log, env=self.env)
        deadline = time.time() + 15
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ddpbenchd exited with {self.proc.returncode}: {self.daemon_log()}")
            if self.read_info():
                return
            time.sleep(0.05)
        raise RuntimeError("ddpbenchd did not start: " + self.daemon_log())

    def daemon_log(self):
        try:
            with open(os.path.join(self.state_dir, "daemon.log"), errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def request(self, method, path, body=None, raw=None, headers=None, timeout=30):
        """Returns (status, parsed JSON or text, headers)."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        headers = dict(headers or {})
        if data and not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = "application/json"  # the only type a body may have
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.ssl) as r:
                status, payload, hdrs = r.status, r.read(), r.headers
        except urllib.error.HTTPError as e:
            status, payload, hdrs = e.code, e.read(), e.headers
        ctype = hdrs.get("Content-Type", "")
        if ctype.startswith("application/json"):
            return status, json.loads(payload), hdrs
        return status, payload.decode("utf-8", "replace"), hdrs

    def opener(self, *handlers):
        """urllib.request.build_opener(*handlers) that verifies this daemon's TLS."""
        return urllib.request.build_opener(urllib.request.HTTPSHandler(context=self.ssl),
                                           *handlers)

    def get(self, path):
        status, body, _ = self.request("GET", path)
        check(status == 200, f"GET {path} -> {status}: {body}")
        return body

    def step_rows(self, run_id):
        """A run's step rows, warm-up included, each as {column: value}."""
        steps = self.get(f"/v1/runs/{run_id}/steps?warmup=true")
        return [dict(zip(steps["columns"], row)) for row in steps["rows"]]

    def submit(self, spec):
        status, body, _ = self.request("POST", "/v1/experiments", body=spec)
        check(status == 201, f"submit -> {status}: {body}")
        return body

    def wait_experiment(self, exp_id, timeout=120, until=TERMINAL):
        deadline = time.time() + timeout
        while time.time() < deadline:
            exp = self.get(f"/v1/experiments/{exp_id}")
            if exp["status"] in until:
                return exp
            time.sleep(0.1)
        raise AssertionError(f"experiment {exp_id} still {exp['status']} after {timeout}s; "
                             f"log: {self.daemon_log()}")

    def run_experiment(self, spec, timeout=120):
        """Submits spec and returns the experiment once it has ended."""
        return self.wait_experiment(self.submit(spec)["id"], timeout=timeout)

    def failed_runs(self, exp, lines=30):
        """Text naming each run of exp that did not succeed: its status, its error and the
        last lines of each of its ranks' logs (a rank stopped by the daemon has written its
        threads' stacks there: engines/ddpb_train.py), a failure message CI can be read
        by."""
        out = []
        for r in exp["runs"]:
            if r["status"] == "succeeded":
                continue
            logs = {}
            rdir = os.path.join(self.state_dir, "runs", str(r["id"]))
            for name in sorted(os.listdir(rdir)) if os.path.isdir(rdir) else []:
                if name.startswith("rank") and name.endswith(".log"):
                    with open(os.path.join(rdir, name), errors="replace") as f:
                        logs[name] = "".join(f.readlines()[-lines:])
            out.append(f"run {r['id']} {r['status']}: {r['error']}")
            out += [f"--- {name} (last {lines} lines)\n{text}" for name, text in logs.items()]
        return "\n".join(out)

    def run_succeeds(self, spec, timeout=120, runs=None):
        """run_experiment, checking that it succeeded (naming each run's status, error and
        log tails if not) and, given runs, that it had that many runs. Returns the
        experiment."""
        exp = self.run_experiment(spec, timeout=timeout)
        if exp["status"] != "succeeded":
            check(False, self.failed_runs(exp))
        if runs is not None:
            check(len(exp["runs"]) == runs, len(exp["runs"]))
        return exp

    def run_fails(self, spec, needle, timeout=60):
        """run_experiment of a one-run spec, checking that the run failed with needle in
        its error. Returns the run."""
        run = self.run_experiment(spec, timeout=timeout)["runs"][0]
        check(run["status"] == "failed" and needle in (run["error"] or ""), run)
        return run

    def wait_run(self, run_id, cond, timeout=60, what="condition"):
        deadline = time.time() + timeout
        while time.time() < deadline:
            run = self.get(f"/v1/runs/{run_id}")
            if cond(run):
                return run
            time.sleep(0.05)
        raise AssertionError(f"run {run_id}: {what} not reached in {timeout}s: {run}")

    def freeze_rank(self, exp_id, run_id, pid, timeout=60):
        """SIGSTOPs a rank's process and waits for its experiment to end: returns the run
        as stored and the seconds from the stop to the end (frozen-rank tests)."""
        os.kill(pid, signal.SIGSTOP)
        t0 = time.time()
        self.wait_experiment(exp_id, timeout=timeout)
        took = time.time() - t0
        return self.get(f"/v1/runs/{run_id}"), took

    def wait_probed(self, timeout=300):
        """Waits for the end of this node's engine probe (every framework imported), which
        a submit naming a framework engine would otherwise wait for, past one request's
        time limit on a busy machine."""
        deadline = time.time() + timeout
        while self.get("/v1/engines")["nodes"][0]["probing"] and time.time() < deadline:
            time.sleep(0.5)

    def wait_slots_free(self, n, timeout=10):
        """Slots are released just after a run's end is stored: allow that moment."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            free = self.get("/healthz")["slots"]["free"]
            if free == n:
                return
            time.sleep(0.05)
        raise AssertionError(f"{free} slots free, want {n}")

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("ddpbenchd did not stop within the timeout")
        rc = self.proc.returncode if self.proc else None
        self.log.close()
        return rc

    def restart(self):
        self.stop()
        self.start()

    def close(self):
        try:
            self.stop()
        except AssertionError:
            pass
        if self.owns_state and os.environ.get("DDPB_KEEP_STATE") != "1":
            shutil.rmtree(self.state_dir, ignore_errors=True)


# A daemon's extra_args for cases that read from GET /v1/engines only what the daemon
# itself puts there (MPI's list: daemon/engines.c mpi_probe_json; each engine's elastic
# mode: engines_mark_elastic), never what the framework probe found: an interpreter that
# fails at once ends the probe (the daemon's fallback answer) instead of the ~30 s of
# imports of every framework that "probing" would otherwise last on a 2-core machine.
# test_engines checks the real probe.
NO_FRAMEWORK_PROBE = ("--python", "/bin/false")


class SharedDaemon:
    """The one daemon the cases of a test file share, where none needs a fresh one (each
    reads back only its own experiments): a daemon that serves framework engines imports
    every framework in its engine probe, seconds each case would wait for again. get()
    returns it, started by make() at first need, its probe waited for, and started again
    if a case left it dead; close() at the file's end."""

    def __init__(self, make):
        self.make = make
        self.daemon = None

    def get(self):
        if self.daemon is None or self.daemon.proc.poll() is not None:
            self.close()
            self.daemon = self.make()
            self.daemon.wait_probed()
        return self.daemon

    def close(self):
        if self.daemon is not None:
            self.daemon.close()
            self.daemon = None


def raw_exchange(port, data, timeout=10):
    """Sends data as is to 127.0.0.1:port and returns every byte that comes back until the
    server closes (for requests no HTTP client would send, and bytes that are no HTTP)."""
    import socket
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        reply = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return reply
            reply += chunk


def check(cond, msg="check failed"):
    if not cond:
        raise AssertionError(msg)


def example(name):
    with open(os.path.join(SOURCE, "schema", "examples", name)) as f:
        return json.load(f)


def model_params(name):
    """A model's parameter count in common/model_table.c, the table the worker's models
    (test_nn_models) and the engines' zoos (test_engines) are checked against."""
    import re
    with open(os.path.join(SOURCE, "common", "model_table.c")) as f:
        m = re.search(r'\{"%s", \d+, \d+, \d+, \d+, (\d+),' % re.escape(name), f.read())
    check(m, f"{name} is not in common/model_table.c")
    return int(m.group(1))


@contextlib.contextmanager
def corpus_daemon(cpu_slots, lines):
    """A daemon and a text dataset for the byte-level language models: lines (strings
    without their newline) written as corpus.txt in the daemon's own data folder (its
    default --data-dir, state/data). Yields (daemon, the corpus's path); both are gone at
    the end."""
    d = Daemon(cpu_slots=cpu_slots)
    try:
        path = os.path.join(d.state_dir, "data", "corpus.txt")
        with open(path, "w") as f:
            f.writelines(line + "\n" for line in lines)
        yield d, path
    finally:
        d.close()


def proc_stat(pid):
    """The fields of /proc/PID/stat after the command name (state, ppid, pgrp, ...), or
    None when the process is gone or its file cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1].split()
    except (OSError, IndexError):
        return None


def pid_alive(pid):
    """True for a live process that is not a zombie."""
    st = proc_stat(pid)
    return st is not None and st[0] != "Z"


def wait_gone(pids, timeout=15):
    """Waits until none of pids is alive; fails naming those still alive after timeout."""
    deadline = time.time() + timeout
    while time.time() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.05)
    check(not any(pid_alive(p) for p in pids), f"workers left behind: {[p for p in pids if pid_alive(p)]}")


def group_left(pgids):
    """{pid: argv} of every live process whose process group is one of pgids (ranks the
    daemon spawned lead their own group: what a rank left running is in it)."""
    left = {}
    for pid, argv in live_processes():
        st = proc_stat(pid)
        if st is not None and int(st[2]) in pgids:
            left[pid] = " ".join(argv)[:160]
    return left


def wait_groups_gone(pgids, timeout=15):
    """Waits until no process of the groups pgids lives; fails naming those left."""
    pgids = set(pgids)
    deadline = time.time() + timeout
    while time.time() < deadline and group_left(pgids):
        time.sleep(0.1)
    check(not group_left(pgids), f"processes the ranks left behind: {group_left(pgids)}")


def live_processes():
    """(pid, argv as str list) of every live process that is not a zombie."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if pid_alive(int(d)):
            yield int(d), argv


def worker_pids(parent=None):
    """PIDs of every live ddpbench-worker process on the machine, or of those whose parent
    is `parent`."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    argv0 = f.read().split(b"\0")[0]
            except OSError:
                continue
            st = proc_stat(d)
            if (argv0.endswith(b"ddpbench-worker") and st is not None and st[0] != "Z" and
                    parent in (None, int(st[1]))):
                out.append(int(d))
    return out


class Skip(Exception):
    """Raised by a case that cannot run here, with the reason: counted as skipped, never
    as passed (tests/summarize.py fails the run for a skip it does not allow)."""


def run_cases(cases):
    """Runs functions named test_* in order; prints the summary line."""
    only = sys.argv[1] if len(sys.argv) > 1 else None
    passed = failed = skipped = 0
    for fn in cases:
        if only and only not in fn.__name__:
            continue
        t0 = time.time()
        try:
            fn()
            passed += 1
            print(f"ok {fn.__name__} ({time.time() - t0:.1f}s)", flush=True)
        except Skip as why:
            skipped += 1
            print(f"skip {fn.__name__}: {why}", flush=True)
        except Exception:  # a failed case must not stop the others
            failed += 1
            print(f"not ok {fn.__name__} ({time.time() - t0:.1f}s)", flush=True)
            traceback.print_exc(file=sys.stdout)
    print(f"TEST-SUMMARY passed={passed} failed={failed} skipped={skipped}", flush=True)
    return 1 if failed else 0
