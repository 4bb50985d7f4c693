"""ddpb_report: the worker -> daemon report protocol (common/report.h) for Python engines.

One JSON object per line, each with "type", "rank" and "t" (Unix seconds), exactly the
events and fields the C worker writes, so the daemon's report_parse_line accepts them
unchanged. The lines go to the report channel when DDPB_REPORT names one (a rank that
mpirun or srun started, which has no fd 3 from the daemon: a TCP connection to the daemon
whose first line is {"channel": {"run", "rank", "secret", "pid", "host"}}), else to fd 3
when the daemon opened it, else to stdout (a script run by hand). A user's script reports
in two lines:

    import ddpb_report
    rep = ddpb_report.start()          # hello + env, heartbeat thread; rank: identity()
    ...  rep.step(step=i, loss=l, step_ms=ms, samples=32)  ... rep.done()

Decision: the fields are the C table's names (tests/integration/test_engines.py checks
them against common/report.c). A step phase or bytes_sent the caller does not pass is left
out of the line, which the daemon stores as null ("not observable by this engine"), never
as 0. A lock keeps lines of the heartbeat thread and the caller whole. The rank is the
daemon's (DDPB_RANK) or, under a launcher that started the ranks itself, the launcher's
(identity()): one reading of it, which ddpb_launch.py hands on as RANK."""
import json
import os
import socket
import sys
import threading
import time

import ddpb_vocab

ERR_CODES = ("invalid", "not_found", "conflict", "too_large", "unavailable", "timeout",
             "aborted", "peer", "protocol", "io", "nomem", "internal")
# The step phases are common/columns.h's PHASES, which the vocabulary carries
# (schema/vocabulary.json, read once by ddpb_vocab); a step also carries its total, step_ms.
STEP_PHASES = tuple(p["key"] for p in ddpb_vocab.VOCABULARY["phases"]) + ("step_ms",)
MEMORY_FIELDS = ("params_bytes", "buffers_bytes", "grads_bytes", "optimizer_bytes", "comm_bytes",
                 "activations_bytes", "device_peak_bytes")


# Where each launcher (DDPB_LAUNCHER; unset: ddpbench) puts a rank's index, local index
# and its rank count, the first set of each tuple: worker/store/rendezvous.c's
# rendezvous_launchers, which the C worker reads (test_horovod_mpi.py checks they agree).
# By launcher, not the first variable set: a daemon inside a Slurm job hands its own
# SLURM_PROCID down to the ranks it forks.
LAUNCHER_IDENTITY = {
    "ddpbench": (("DDPB_RANK",), ("DDPB_LOCAL_RANK",), ()),
    "mpirun": (("OMPI_COMM_WORLD_RANK", "PMI_RANK"),
               ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"),
               ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")),
    "srun": (("SLURM_PROCID",), ("SLURM_LOCALID",), ("SLURM_STEP_NUM_TASKS",)),
}
CHANNEL_CONNECT_S = 30.0


def _first(env, names):
    return next((env[n] for n in names if n in env), None)


def identity(env=None):
    """(rank, local_rank, world_size) of this process. DDPB_RANK when set (the daemon
    forked the rank, or ddpb_launch.py already read it); else the variables of the
    launcher DDPB_LAUNCHER names (LAUNCHER_IDENTITY: mpirun or srun started it, and the
    daemon set only DDPB_WORLD_SIZE), with the launcher's own rank count when it says
    one (ddpb_launch.py checks it against the run's); without DDPB_LAUNCHER, RANK /
    LOCAL_RANK / WORLD_SIZE (a user's script run by hand or by torchrun), else rank 0 of 1.
    ValueError naming the variable a named launcher should have set."""
    env = os.environ if env is None else env
    world = env.get("DDPB_WORLD_SIZE")
    if "DDPB_RANK" in env:
        return (int(env["DDPB_RANK"]), int(env.get("DDPB_LOCAL_RANK", "0")),
                int(world or env.get("WORLD_SIZE", "1")))
    launcher = env.get("DDPB_LAUNCHER")
    if not launcher or launcher == "ddpbench":
        return (int(env.get("RANK", "0")), int(env.get("LOCAL_RANK", "0")),
                int(world or env.get("WORLD_SIZE", "1")))
    if launcher not in LAUNCHER_IDENTITY:
        raise ValueError(f"DDPB_LAUNCHER={launcher!r}: want one of "
                         f"{', '.join(LAUNCHER_IDENTITY)}")
    rank_vars, local_vars, size_vars = LAUNCHER_IDENTITY[launcher]
    rank = _first(env, rank_vars)
    if rank is None:
        raise ValueError(f"{rank_vars[0]} is not set (launcher {launcher} sets it when it "
                         f"starts a rank)")
    return (int(rank), int(_first(env, local_vars) or "0"),
            int(_first(env, size_vars) or world or "1"))


def _open_channel(addr, rank, env):
    """The report channel to the daemon at addr ("host:port", "[v6]:port"), past its first
    line; a line-buffered text stream on the socket (the socket is not inherited by exec)."""
    host, _, port = addr.rpartition(":")
    sock = socket.create_connection((host.strip("[]"), int(port)), timeout=CHANNEL_CONNECT_S)
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    stream = sock.makefile("w", buffering=1, encoding="utf-8", newline="\n")
    sock.close()  # the stream holds its own reference to the connection
    hello = {"run": env.get("DDPB_RUN", ""), "rank": int(rank),
             "secret": env.get("DDPB_SECRET", ""), "pid": os.getpid(),
             "host": socket.gethostname()}  # where the daemon says the rank ran
    stream.write(json.dumps({"channel": hello}, separators=(",", ":")) + "\n")
    stream.flush()
    return stream


def _report_stream(rank):
    """The report channel when DDPB_REPORT names one, fd 3 when the daemon opened it, else
    stdout (a script run by hand)."""
    addr = os.environ.get("DDPB_REPORT")
    if addr:
        return _open_channel(addr, rank, os.environ)
    try:
        os.fstat(3)
    except OSError:
        return sys.stdout
    return os.fdopen(3, "w", buffering=1, closefd=False)


class Reporter:
    """Writes report events for one rank. Thread-safe."""

    def __init__(self, rank, world_size, stream=None):
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.stream = stream if stream is not None else _report_stream(self.rank)
        self.lock = threading.Lock()
        self.phase = "start"
        self.progress = 0
        self._stop = threading.Event()
        self._beat = None

    def emit(self, kind, **fields):
        ev = {"type": kind, "rank": self.rank, "t": time.time()}
        ev.update(fields)
        line = json.dumps(ev, separators=(",", ":"), allow_nan=False) + "\n"
        with self.lock:
            self.stream.write(line)
            self.stream.flush()

    def hello(self):
        self.emit("hello", pid=os.getpid(), host=socket.gethostname(),
                  world_size=self.world_size)

    def env(self, values):
        """values: {name: str or number}; e.g. framework versions, framework_config. Adds
        storage_layer: "mount" when the daemon gave the rank a storage mount
        (DDPB_STORAGE_MOUNT), else "none" (in_process is the C loader's alone), and
        hostname."""
        values = dict(values)
        values.setdefault("storage_layer",
                          "mount" if os.environ.get("DDPB_STORAGE_MOUNT") else "none")
        # the node, as the C worker's env names it: a contention calibration of the node
        # (daemon/calib.c) applies to the runs whose rank 0 ran there
        values.setdefault("hostname", socket.gethostname())
        clean = {str(k): (v if isinstance(v, (int, float, str)) and not isinstance(v, bool)
                          else json.dumps(v, sort_keys=True)) for k, v in values.items()}
        self.emit("env", env=clean)

    def heartbeat(self, phase=None, progress=None):
        if phase is not None:
            self.phase = phase
        if progress is not None:
            self.progress = int(progress)
        self.emit("heartbeat", phase=self.phase, progress=self.progress)

    def start_heartbeat(self, every_s=1.0):
        """A daemon thread beating every second, as the C worker's does."""
        def beat():
            while not self._stop.wait(every_s):
                try:
                    self.heartbeat()
                except (OSError, ValueError) as err:
                    # the daemon is gone: the main thread finds out on its next write. Said
                    # in the rank's log, so a rank the daemon later takes for frozen says
                    # why its heartbeats stopped
                    print(f"ddpb_report: rank {self.rank}: the heartbeat thread stops: "
                          f"{err!r}", file=sys.stderr, flush=True)
                    return
        self._beat = threading.Thread(target=beat, name="ddpb-heartbeat", daemon=True)
        self._beat.start()

    def progress_event(self, phase, done, total):
        self.emit("progress", done=int(done), total=int(total), phase=phase)

    def step(self, step, loss, samples, step_ms, repeat=0, epoch=0, warmup=False,
             bytes_sent=None, gen=None, world=None, grad_norm=None, loss_scale=None,
             skipped=False, loader_cpu_ms=None, read_bytes=None, **phases):
        """One training step of this rank; phases in ms by their report names. A phase
        not passed, or bytes_sent None, is left out: the engine cannot observe it, and the
        daemon stores null (common/report.h), never 0. gen and world: an elastic run's
        generation and its world size (left out otherwise). grad_norm: the global
        gradient norm before clipping (runs with clip_grad_norm > 0), loss_scale: the fp16
        loss scale the step used, skipped: an fp16 step the scaler skipped (issue 33).
        loader_cpu_ms: the loader workers' CPU time charged to the step, read_bytes: what
        the rank read from its storage mount during it (issue 34; None: not observed)."""
        unknown = set(phases) - set(STEP_PHASES)
        if unknown:
            raise ValueError(f"unknown step phase(s): {sorted(unknown)}")
        fields = {p: float(v) for p, v in phases.items() if v is not None}
        fields["step_ms"] = float(step_ms)
        if bytes_sent is not None:
            fields["bytes_sent"] = int(bytes_sent)
        if gen is not None:
            fields.update(gen=int(gen), world=int(world))
        if grad_norm is not None:
            fields["grad_norm"] = float(grad_norm)
        if loss_scale is not None:
            fields["loss_scale"] = float(loss_scale)
        if skipped:
            fields["skipped"] = True
        if loader_cpu_ms is not None:
            fields["loader_cpu_ms"] = float(loader_cpu_ms)
        if read_bytes is not None:
            fields["read_bytes"] = int(read_bytes)
        self.progress = int(step) + 1
        self.emit("step", repeat=int(repeat), epoch=int(epoch), step=int(step),
                  warmup=bool(warmup), samples=int(samples), loss=float(loss), **fields)

    def epoch(self, epoch, samples, time_s, repeat=0, train_loss=None, train_acc=None,
              test_loss=None, test_acc=None, test_acc_per_class=None):
        """Rank 0, after each epoch; a figure not measured is omitted (stored NULL).
        test_acc_per_class: one accuracy per class, None for a class the test split lacks
        (sent null)."""
        opt = {"train_loss": train_loss, "train_acc": train_acc, "test_loss": test_loss,
               "test_acc": test_acc}
        extra = {}
        if test_acc_per_class is not None:
            extra["test_acc_per_class"] = [None if v is None else float(v)
                                           for v in test_acc_per_class]
        self.emit("epoch", repeat=int(repeat), epoch=int(epoch), samples=int(samples),
                  time_s=float(time_s), **{k: float(v) for k, v in opt.items() if v is not None},
                  **extra)

    def memory(self, repeat, peak_rss_bytes, **held):
        """What this rank holds at the end of a repeat (common/report.h struct
        report_memory): bytes by name; a figure None is left out, the engine cannot tell."""
        unknown = set(held) - set(MEMORY_FIELDS)
        if unknown:
            raise ValueError(f"unknown memory figure(s): {sorted(unknown)}")
        self.emit("memory", repeat=int(repeat), peak_rss_bytes=int(peak_rss_bytes),
                  **{k: int(v) for k, v in held.items() if v is not None})

    def usage(self, repeat, epoch, steps, wall_s, user_s, sys_s, voluntary_cs,
              involuntary_cs, rss_bytes=None):
        """What this rank used over a window of steps (struct report_usage); no GPU
        figures: the framework engines run on the CPU."""
        fields = {"rss_bytes": int(rss_bytes)} if rss_bytes is not None else {}
        self.emit("usage", repeat=int(repeat), epoch=int(epoch), steps=int(steps),
                  wall_s=float(wall_s), user_s=float(user_s), sys_s=float(sys_s),
                  voluntary_cs=int(voluntary_cs), involuntary_cs=int(involuntary_cs), **fields)

    def error(self, message, code="internal", where=None, op=None, peer=None):
        if code not in ERR_CODES:
            code = "internal"
        fields = {"code": code, "message": str(message),
                  "where": where or f"{os.path.basename(sys.argv[0] or 'python')}:0"}
        if op is not None:
            fields["op"] = op
        if peer is not None:
            fields["peer"] = int(peer)
        self.emit("error", **fields)

    def done(self):
        self._stop.set()
        self.emit("done")


_STARTED = None  # this process's reporter, once start() made it


def start(env=None, heartbeat=True):
    """hello, env (python version + the caller's values), heartbeat thread, once per
    process: a later call only sends env (its values), so an adapter starts reporting
    before it imports its framework (seconds, silent otherwise: a run with a short
    heartbeat_timeout_s would take the rank for frozen) and adds the framework's versions
    once it has them. Rank and world size from identity() (ddpb_launch.py sets RANK /
    WORLD_SIZE from the same reading)."""
    global _STARTED
    if _STARTED is not None:
        if env:
            _STARTED.env(env)
        return _STARTED
    rank, _, world = identity()
    # an elastic run restarted with a smaller world still has the run's slots: its hello
    # says those (DDPB_ELASTIC_SLOTS, daemon/elastic_restart.h), as the daemon checks
    rep = Reporter(rank, int(os.environ.get("DDPB_ELASTIC_SLOTS") or world))
    rep.hello()
    values = {"python": sys.version.split()[0]}
    values.update(env or {})
    rep.env(values)
    if heartbeat:
        rep.start_heartbeat()
    _STARTED = rep
    return rep
