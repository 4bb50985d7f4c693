"""ddpb_train: what every Python engine's training loop shares, framework-free: the spec's
step and epoch plan, the learning-rate schedule as a function of the step, the epoch tally
and the env event. engine_pytorch.py and engine_tensorflow.py keep only what is the
framework's own (model, optimizer, collectives, where the phases can be timed).

Decision: the schedule is computed here from the spec (LinearLR warm-up from lr/3, then
constant, StepLR or CosineAnnealingLR to 0 over the remaining steps, the C worker's and
PyTorch's semantics) and handed to each framework as a plain number per step, so no
framework's own scheduler class (each counts steps slightly differently) changes what the
spec means."""
import faulthandler
import json
import math
import os
import resource
import signal
import sys
import time
import traceback


def spec_load():
    with open(os.environ["DDPB_SPEC"]) as f:
        return json.load(f)


def lr_at(spec, step, total_steps):
    """The learning rate of optimizer step `step` (from 0) of total_steps."""
    opt, sch = spec.get("optimizer", {}), spec.get("lr_schedule", {})
    base = float(opt.get("lr", 0.01))
    warm = int(sch.get("warmup_steps", 0))
    if step < warm:
        return base * (1.0 / 3 + (1 - 1.0 / 3) * step / warm)
    decay = sch.get("decay", "constant")
    after = step - warm
    if decay == "step":
        return base * float(sch.get("gamma", 0.1)) ** (after // int(sch.get("step_size", 1000)))
    if decay == "cosine":
        span = max(1, total_steps - warm)
        return base * 0.5 * (1 + math.cos(math.pi * min(after, span) / span))
    return base


class Plan:
    """How many steps each repeat runs and where epochs end. steps > 0: that many steps,
    epochs as the data allows (an epoch boundary every steps_per_epoch); epochs > 0: that
    many passes. warmup_steps at the start of each repeat are reported but flagged."""

    def __init__(self, spec, steps_per_epoch):
        self.steps_per_epoch = max(1, steps_per_epoch)
        epochs = int(spec.get("epochs", 0))
        self.total = epochs * self.steps_per_epoch if epochs > 0 else int(spec.get("steps", 100))
        self.epochs = epochs if epochs > 0 else math.ceil(self.total / self.steps_per_epoch)
        self.warmup = int(spec.get("warmup_steps", 5))
        self.repeats = int(spec.get("repeats", 1))

    def completed(self, epoch, steps_done):
        """True when epoch ran all its steps (steps_done counts from the repeat's start):
        an epoch is reported only then, as the C worker does."""
        return steps_done >= (epoch + 1) * self.steps_per_epoch


class Tally:
    """Loss and correct counts of an epoch or an evaluation, summed across ranks by the
    engine (allreduce of as_list(): [loss_sum, correct, count], then when classes > 0 the
    per-class correct counts and the per-class sample counts, so one allreduce carries
    test_acc_per_class too)."""

    MAX_CLASSES = 1000  # common/report.h REPORT_MAX_CLASSES: more is no class table

    def __init__(self, classes=0):
        self.loss_sum = self.correct = self.count = 0.0
        classes = classes if classes <= self.MAX_CLASSES else 0
        self.classes = classes
        self.class_correct = [0.0] * classes
        self.class_count = [0.0] * classes

    def add(self, loss_mean, correct, n, class_correct=None, class_count=None):
        """class_correct, class_count: this batch's per-class sums (sequences of classes
        numbers), when the tally keeps them."""
        self.loss_sum += float(loss_mean) * n
        self.correct += float(correct)
        self.count += n
        if self.classes and class_count is not None:
            for c in range(self.classes):
                self.class_correct[c] += float(class_correct[c])
                self.class_count[c] += float(class_count[c])

    def as_list(self):
        return [self.loss_sum, self.correct, self.count] + self.class_correct + self.class_count

    @staticmethod
    def figures(summed):
        loss_sum, correct, count = summed[:3]
        if count <= 0:
            return None, None
        return loss_sum / count, correct / count

    @staticmethod
    def per_class(summed):
        """test_acc_per_class from a summed as_list(): one accuracy per class, None for a
        class with no sample (the report line's null); None when the tally kept none."""
        k = (len(summed) - 3) // 2
        if k <= 0:
            return None
        hits, counts = summed[3:3 + k], summed[3 + k:3 + 2 * k]
        return [h / n if n > 0 else None for h, n in zip(hits, counts)]


def end_epoch(rep, rank, world, repeat, epoch, tally, t_epoch, all_sum, evaluate):
    """An epoch's figures: the train tally summed over ranks, the test split's when
    evaluate (a function returning the summed Tally.as_list(), per-class sums included)
    is given; rank 0 reports them (the C worker's epoch event)."""
    summed = all_sum(tally.as_list())
    train_loss, train_acc = Tally.figures(summed)
    tested = evaluate() if evaluate else None
    test_loss, test_acc = Tally.figures(tested) if tested else (None, None)
    if rank == 0:  # the ranks' samples summed (a resumed epoch's rank 0 holds all before)
        rep.epoch(epoch=epoch, samples=int(summed[2]),
                  time_s=time.perf_counter() - t_epoch, repeat=repeat, train_loss=train_loss,
                  train_acc=train_acc, test_loss=test_loss, test_acc=test_acc,
                  test_acc_per_class=Tally.per_class(tested) if tested else None)


class Usage:
    """This process's resource use over a window of steps, as the C worker measures it
    (worker/observe.h): getrusage(RUSAGE_SELF) differences, every thread counted."""

    def __init__(self, repeat):
        self.begin(repeat)

    def begin(self, repeat):
        self.repeat, self.steps = repeat, 0
        self.ru, self.t = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()

    def step(self):
        self.steps += 1

    def emit(self, rep, epoch):
        """Sends the window ending now (epoch: its last step's), starts the next; a window
        without a step sends nothing."""
        if self.steps == 0:
            return
        ru, now = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
        rep.usage(repeat=self.repeat, epoch=epoch, steps=self.steps, wall_s=now - self.t,
                  user_s=ru.ru_utime - self.ru.ru_utime, sys_s=ru.ru_stime - self.ru.ru_stime,
                  voluntary_cs=ru.ru_nvcsw - self.ru.ru_nvcsw,
                  involuntary_cs=ru.ru_nivcsw - self.ru.ru_nivcsw, rss_bytes=rss_bytes())
        self.begin(self.repeat)


def peak_rss_bytes():
    """The process's peak resident set so far (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def rss_bytes():
    """The resident set now, or None where /proc does not say."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class Clock:
    """Milliseconds between marks on the training thread's monotonic clock."""

    def __init__(self):
        self.t = time.perf_counter()

    def lap(self):
        now = time.perf_counter()
        ms = (now - self.t) * 1000.0
        self.t = now
        return ms


def run_main(engine, versions, body, error_code):
    """An adapter's main: hello and env (versions) and the heartbeat thread, then
    body(rep, spec, rank, world); an exception is reported as the rank's error (the daemon
    then stops the run naming this rank) and exits 1; else done and 0."""
    import ddpb_report
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # A rank the daemon stops (another rank failed, a timeout, a cancel) writes every
    # thread's stack to its log first, then dies as before: where a rank hung is the one
    # thing its peers' errors ("timed out waiting for recv") cannot say.
    faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
    rep = ddpb_report.start(versions)
    try:
        body(rep, spec_load(), rank, world)
    except Exception as ex:  # reported, never swallowed: the run fails naming this rank
        report_failure(rep, engine, rank, ex, error_code)
        return 1
    rep.done()
    return 0


def exit_now(rc):
    """Ends the process with rc without the interpreter's teardown. torch's C++ objects
    (gloo's process group, DDP's reducer, DeepSpeed's shared-memory extension) were seen to
    abort there (SIGABRT "terminate called without an active exception", SIGSEGV) after a
    rank had trained, reported everything and said done, which failed a finished run. Every
    report line is written and flushed by then (ddpb_report flushes each line)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


def report_failure(rep, engine, rank, ex, code):
    """The error event of a rank that failed: the exception's first line, its code, and
    the adapter's file:line where it surfaced (the traceback itself goes to the rank's log)."""
    traceback.print_exc()
    lines = str(ex).strip().splitlines()
    text = lines[0] if lines else type(ex).__name__
    where = "python:0"
    for fr in reversed(traceback.extract_tb(ex.__traceback__)):
        if os.path.dirname(os.path.abspath(fr.filename)) == os.path.dirname(
                os.path.abspath(__file__)):
            where = f"{os.path.basename(fr.filename)}:{fr.lineno}"
            break
    rep.error(f"{engine} rank {rank}: {type(ex).__name__}: {text[:400]}",
              code=code(ex, text), where=where)


def framework_env(engine, versions, config, unobserved):
    """The env event's values: framework versions, the resolved framework configuration
    (stored with the run), and which step phases this engine cannot observe and why."""
    out = dict(versions)
    out["engine"] = engine
    out["framework_config"] = json.dumps(config, sort_keys=True)
    out["phases_not_observed"] = json.dumps(unobserved, sort_keys=True)
    out["rendezvous_ms"] = os.environ.get("DDPB_RENDEZVOUS_MS", "")
    return out
