"""ddpb_observe: the trace and the gradient readiness of the PyTorch-based engines (pytorch,
horovod, deepspeed), sent in exactly the C worker's report lines (worker/observe.h):

  trace  {repeat, step, clock_offset_ns, spans: [[name, start_ns, end_ns]...],
          ops: [[op, bucket, bytes, algorithm, launch_ns, end_ns]...]} per rank and traced
         step: the first trace_steps steps after warm-up, as the C worker's window. Spans
         are the loop's own phases ("data", "forward", "backward", "optimizer", "step",
         and "comm_exposed" where the training thread waited for communication); ops are
         what the adapter saw of its collectives (DDP's comm hook: one per bucket, launch
         to the future's completion; Horovod: its own timeline, converted).
  grads  {repeat, steps, backward_ns, tensors: [[bytes, ready_ns]...]} from rank 0 once per
         repeat: each parameter's gradient ready time from the start of the synchronising
         micro-batch's backward, the median over the recorded steps, in the order backward
         finishes the tensors (the reverse of registration, as the C worker's).

Decisions:
- Times are perf_counter_ns, and each line carries clock_offset_ns = time_ns() -
  perf_counter_ns() read once, so the daemon places them on the wall clock as it does the
  C worker's CLOCK_MONOTONIC readings.
- Readiness is recorded by a tensor hook per parameter (torch 1.13 has no
  register_post_accumulate_grad_hook; a leaf's tensor hook runs when its gradient is
  computed, just before AccumulateGrad stores it) on at most GRADS_STEPS non-warm-up steps;
  the hooks are then removed, so the steps after pay nothing. Medians, as the C worker's:
  one slow step moves nothing.
- Outside the trace window the tracer holds nothing and each call returns at its first
  test, so tracing costs the traced steps only (tests/bench/bench_observe.py measures it).

Ownership: a Tracer owns its step records until emitted; Readiness owns its hook handles
(remove() drops them)."""
import statistics
import time

TRACE_MAX = 4096  # common/report.h REPORT_TRACE_MAX: entries of spans and of ops
GRADS_STEPS = 64  # the steps readiness is recorded on (the C worker keeps up to 512)


def clock_offset_ns():
    """Wall clock minus the perf_counter clock, in ns (the C worker's REALTIME - MONOTONIC)."""
    return time.time_ns() - time.perf_counter_ns()


def ns(t):
    """perf_counter seconds as integer ns."""
    return int(t * 1e9)


class Tracer:
    """The trace window of one repeat and its traced steps' spans and ops."""

    def __init__(self, spec, repeat):
        self.repeat = repeat
        self.first = int(spec.get("warmup_steps", 5))
        self.last = self.first + int(spec.get("trace_steps", 5))  # exclusive
        self.offset = clock_offset_ns()
        self.cur = None  # the step being traced: {"step", "spans", "ops", "t0", "t1"}
        self.held = []   # traced steps kept for emit_held (an adapter that adds ops later)

    def enabled(self):
        return self.last > self.first

    def in_window(self, step):
        return self.first <= step < self.last

    def begin(self, step, number):
        """Step `step` of the repeat (reported as `number`) starts: traced when in the
        window. Returns whether it is."""
        self.cur = {"step": number, "spans": [], "ops": []} if self.in_window(step) else None
        return self.cur is not None

    def span(self, name, t0, t1):
        """A span [t0, t1] (perf_counter seconds) of the step being traced, if any."""
        c = self.cur
        if c is not None and len(c["spans"]) < TRACE_MAX:
            a = ns(t0)
            c["spans"].append([name, a, max(a, ns(t1))])

    def op(self, op, bucket, nbytes, algorithm, t0_ns, t1_ns):
        """A collective of the step being traced (times in perf_counter ns)."""
        c = self.cur
        if c is not None and len(c["ops"]) < TRACE_MAX:
            c["ops"].append([op, int(bucket), int(nbytes), algorithm or "?", int(t0_ns),
                             int(max(t0_ns, t1_ns))])

    def end(self, rep, t0, t1, hold=False):
        """The traced step [t0, t1] ended: its "step" span, then its line sent (or held for
        emit_held when hold, an adapter adding its ops once the window is over)."""
        c = self.cur
        if c is None:
            return
        self.span("step", t0, t1)
        c["t0"], c["t1"] = ns(t0), ns(t1)
        self.cur = None
        if hold:
            self.held.append(c)
        else:
            self.send(rep, c)

    def send(self, rep, c):
        rep.emit("trace", repeat=int(self.repeat), step=int(c["step"]),
                 clock_offset_ns=int(self.offset), spans=c["spans"], ops=c["ops"])

    def emit_held(self, rep):
        for c in self.held:
            self.send(rep, c)
        self.held = []


class Readiness:
    """Rank 0's gradient readiness: a tensor hook per parameter on the recorded steps."""

    def __init__(self, params, steps=GRADS_STEPS):
        ps = [p for p in params if p.requires_grad]
        ps.reverse()  # the order backward finishes them, as the C worker's
        self.bytes = [p.numel() * p.element_size() for p in ps]
        self.rows, self.bwd = [], []
        self.start, self.cur, self.steps = 0, None, steps
        self.handles = [p.register_hook(self._hook(t)) for t, p in enumerate(ps)]

    def _hook(self, t):
        def hook(grad):
            if self.cur is not None:
                self.cur[t] = time.perf_counter_ns() - self.start
        return hook

    def begin(self, t0):
        """The synchronising micro-batch's backward starts at t0 (perf_counter seconds)."""
        if self.handles:
            self.start, self.cur = ns(t0), [-1] * len(self.bytes)

    def end(self, backward_ns):
        """That backward is over; backward_ns: its own length (the exposed waits inside it
        excluded, as the C worker's)."""
        if self.cur is None:
            return
        self.rows.append(self.cur)
        self.bwd.append(int(backward_ns))
        self.cur = None
        if len(self.rows) >= self.steps:
            self.remove()

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []

    def emit(self, rep, repeat):
        """The "grads" line of the repeat (nothing when no step was recorded); the hooks
        are removed."""
        self.remove()
        if not self.rows:
            return
        bwd = int(statistics.median(self.bwd))
        tensors = []
        for t, nbytes in enumerate(self.bytes):
            seen = [r[t] for r in self.rows if r[t] >= 0]
            # a tensor no hook named (no loss depends on it) is final when backward ends
            tensors.append([int(nbytes), int(statistics.median(seen)) if seen else bwd])
        rep.emit("grads", repeat=int(repeat), steps=len(self.rows), backward_ns=max(0, bwd),
                 tensors=tensors)
        self.rows, self.bwd = [], []


def device_peak_bytes(device):
    """torch's peak of allocated device memory on a cuda device, else None (no device)."""
    if getattr(device, "type", "cpu") != "cuda":
        return None
    import torch
    return int(torch.cuda.max_memory_allocated(device))


# --- Horovod's timeline --------------------------------------------------------------------

# bytes per element of the dtypes Horovod's timeline names
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "uint8": 1,
               "int16": 2, "int32": 4, "int64": 8, "bool": 1}
TIMELINE_WAIT_S = 5.0  # how long rank 0 waits for Horovod's writer to close the file


def read_closed(path, wait_s=TIMELINE_WAIT_S):
    """The timeline file's text once Horovod's writer thread closed it (its JSON array
    ends with "]"), or what is there after wait_s (parsed leniently); None when absent."""
    deadline = time.monotonic() + wait_s
    text = None
    while True:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            text = None
        if (text and text.rstrip().endswith("]")) or time.monotonic() > deadline:
            return text
        time.sleep(0.05)


def timeline_events(text):
    """The events of a Chrome-format timeline, complete or cut short by a writer that had
    not finished (events are written whole, separated by commas)."""
    import json
    dec, out, i = json.JSONDecoder(), [], text.find("[") + 1
    while 0 < i < len(text):
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        if i >= len(text) or text[i] == "]":
            break
        try:
            ev, i = dec.raw_decode(text, i)
        except ValueError:
            break  # a last event cut in the middle
        out.append(ev)
    return out


def _tensor_bytes(args):
    """A tensor's bytes from the dtype and shape Horovod writes at an activity's end."""
    try:
        n = 1
        for d in args["shape"].strip("[]").split(","):
            n *= int(d) if d.strip() else 1
        return n * DTYPE_BYTES.get(args["dtype"], 4)
    except (KeyError, ValueError, AttributeError):
        return 0


def horovod_timeline_groups(text):
    """Horovod's timeline (Chrome trace JSON its coordinator writes: one "process" per
    tensor, named "allreduce.<parameter>", with its NEGOTIATE_ALLREDUCE activity, marks
    named by each rank as its request arrived, then the ALLREDUCE activity and its
    sub-activities, GLOO_ALLREDUCE or MPI_ALLREDUCE the operation itself) as the groups
    of tensors Horovod reduced together, each
      {"start", "end": the ALLREDUCE's wall-clock ns, "bytes": the group's tensors' bytes,
       "algorithm": the operation's activity, lower case ("gloo_allreduce"),
       "negotiate", "negotiated": when the group's first negotiation began and its last
       ended, "ready": {rank: when its first request of the group arrived} (Horovod marks
       the ranks only while its response cache misses: empty in a steady state)}
    in start order (wall-clock ns). Tensors fused into one buffer are reduced together
    (their ALLREDUCE activities overlap): one group. Only the DistributedOptimizer's
    tensors ("allreduce." names) are taken."""
    events = timeline_events(text)
    start_us, names = None, {}
    for ev in events:
        if ev.get("ph") == "M" and ev.get("name") == "process_name":
            args = ev.get("args", {})
            if "start_time_since_epoch_in_micros" in args:
                start_us = int(args["start_time_since_epoch_in_micros"])
            elif "name" in args:
                names[ev["pid"]] = args["name"]
    if start_us is None:
        return []

    def wall(ts):
        return (start_us + float(ts)) * 1000.0

    stacks, negs, reds = {}, {}, {}  # per pid: open activities, negotiations, reductions
    for ev in events:
        pid, ph = ev.get("pid"), ev.get("ph")
        if not str(names.get(pid, "")).startswith("allreduce."):
            continue
        st = stacks.setdefault(pid, [])
        if ph == "B":
            st.append({"name": ev.get("name", ""), "start": wall(ev["ts"]), "ready": {},
                       "sub": None})
        elif ph == "E" and st:
            a = st.pop()
            a["end"] = wall(ev["ts"])
            if st:  # a sub-activity: the operation's own names the algorithm
                if a["name"].endswith("_ALLREDUCE") and st[-1]["sub"] is None:
                    st[-1]["sub"] = a["name"].lower()
                continue
            if a["name"].startswith("NEGOTIATE"):
                negs.setdefault(pid, []).append(a)
            elif a["name"] == "ALLREDUCE":
                a["bytes"] = _tensor_bytes(ev.get("args", {}))
                reds.setdefault(pid, []).append(a)
        elif ph == "X" and st and st[-1]["name"].startswith("NEGOTIATE") and \
                str(ev.get("name", "")).isdigit():
            st[-1]["ready"].setdefault(int(ev["name"]), wall(ev["ts"]))
    tensors = []
    for pid, rs in reds.items():
        ns_ = negs.get(pid, [])
        for i, r in enumerate(rs):
            tensors.append((r, ns_[i] if i < len(ns_) else None))
    groups, cur = [], None
    for r, neg in sorted(tensors, key=lambda t: t[0]["start"]):
        if cur is None or r["start"] > cur["end"]:  # after the group's end: the next round
            cur = {"start": int(r["start"]), "end": int(r["end"]), "bytes": 0,
                   "algorithm": r["sub"] or "allreduce", "ready": {}, "negotiate": None,
                   "negotiated": None}
            groups.append(cur)
        cur["end"] = int(max(cur["end"], r["end"]))
        cur["bytes"] += r["bytes"]
        if neg is not None:
            for rank, at in neg["ready"].items():
                cur["ready"][rank] = int(min(at, cur["ready"].get(rank, at)))
            cur["negotiate"] = int(min(neg["start"], cur["negotiate"] or neg["start"]))
            cur["negotiated"] = int(max(neg["end"], cur["negotiated"] or neg["end"]))
    return groups


def place_groups(tracer, groups, rank):
    """Puts each group of horovod_timeline_groups into the held traced step of this rank
    that its allreduce started in, in this rank's clock: a "negotiate" op from this rank's
    request (or the negotiation's start) to its end, and an "allreduce" op;
    bucket: the group's index in the step."""
    steps = sorted(tracer.held, key=lambda c: c["t0"])
    count = {}
    for g in groups:
        start = g["start"] - tracer.offset
        c = next((c for c in steps if c["t0"] <= start <= c["t1"]), None)
        if c is None or len(c["ops"]) + 2 > TRACE_MAX:
            continue
        b = count[id(c)] = count.get(id(c), -1) + 1
        # this rank's request, when Horovod marked it, else the coordinator's negotiation
        mine = g["ready"].get(rank, g["ready"].get(str(rank), g["negotiate"]))
        if mine is not None and g["negotiated"] is not None:
            c["ops"].append(["negotiate", b, int(g["bytes"]), "horovod",
                             int(mine - tracer.offset),
                             int(max(mine, g["negotiated"]) - tracer.offset)])
        c["ops"].append(["allreduce", b, int(g["bytes"]), g["algorithm"][:23], int(start),
                         int(max(g["start"], g["end"]) - tracer.offset)])
