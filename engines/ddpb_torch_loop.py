"""ddpb_torch_loop: the training loop the PyTorch-based engines share (pytorch, horovod,
deepspeed): steps and epochs from the spec, the learning rate per step, accumulation,
the per-step phases on the training thread's clock, the epoch tally and evaluation summed
across ranks, and the report lines.

What differs between frameworks is an adapter object (engine_<name>.py):
  adapter.wrap(model)            -> (module to call forward on, optimizer with param_groups)
  adapter.micro(k, acc)          -> context for micro-batch k of acc (DDP's no_sync)
  adapter.backward(loss, k, acc) runs loss's backward (the mean over acc micro-batches)
  adapter.step_begin()           before the step's first micro-batch
  adapter.step_end(backward_end) runs the update; returns {"comm_ms", "comm_exposed_ms",
                                 "optimizer_ms"} (absent or None: not observable),
                                 "update_span" (perf_counter start, end of the update, the
                                 trace's "optimizer" span), and
                                 "in_backward_ms", the part of the exposed time spent
                                 inside the backward window (DDP waits for its buckets
                                 there), which backward_ms then excludes
  adapter.all_sum(values)        -> the values summed over ranks (floats)
  adapter.prec                   the run's Precision (below): autocast of the forward, the
                                 input's dtype, the fp16 loss scale and clip_grad_norm;
                                 step_end adds its step fields (grad_norm, loss_scale,
                                 skipped) to what it returns
Optional (ddpb_observe.py; absent: the engine adds nothing of its own):
  adapter.readiness              true: rank 0 records gradient readiness ("grads")
  adapter.trace_step(tracer, backward_end)  adds the step's communication to its trace
  adapter.trace_window(tracer, on)          the trace window opens (on) / closes, between
                                 steps; returns true when the step lines wait for
                                 adapter.trace_finish(tracer), called after the repeat's
                                 last step (Horovod's timeline is read then)

Decision: one loop, so the engines differ only where the frameworks do, and a figure that
differs between engines is the framework's, not the harness's."""
import contextlib
import os
import time

import torch
import torch.nn.functional as F

import ddpb_elastic
import ddpb_observe
import ddpb_torch_data
import ddpb_torch_models as zoo
import ddpb_train


class Precision:
    """The spec's precision, fp16 loss scaling and clip_grad_norm for a torch adapter
    (issue 33's contract):
      fp32  nothing
      bf16  torch.autocast(device, bfloat16) around the forward (CPU: oneDNN's bf16 kernels)
      fp16  torch.autocast("cuda", float16) and a loss scaler: loss_scale 0 is
            torch.cuda.amp.GradScaler (init 65536, x0.5 and the step skipped on a
            non-finite gradient, x2 after loss_scale_window finite steps), > 0 StaticScaler
    managed: the framework runs the precision itself (DeepSpeed's "bf16"/"fp16" config casts
    the model): no autocast and no scaler here, only the input cast to the model's dtype.
    Clipping (clip > 0) runs on the exchanged (averaged) gradients, unscaled first:
    torch.nn.utils.clip_grad_norm_, whose returned norm (before clipping) is the step's
    grad_norm. fp16 on a CPU is refused at submit (common/spec_table.c); here too."""

    DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

    def __init__(self, spec, device, managed=False):
        self.name, self.device, self.managed = spec.get("precision", "fp32"), device, managed
        self.dtype = self.DTYPES.get(self.name)
        self.clip = float(spec.get("clip_grad_norm", 0) or 0)
        self.scaler = None
        if self.name == "fp16" and device.type != "cuda":
            raise ValueError("precision fp16 needs device cuda: torch's CPU autocast runs "
                             "bf16 only")
        if self.name == "fp16" and not managed:
            scale = float(spec.get("loss_scale", 0) or 0)
            window = int(spec.get("loss_scale_window", 2000))
            self.scaler = StaticScaler(scale) if scale > 0 else torch.cuda.amp.GradScaler(
                init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5,
                growth_interval=window)

    def config(self):
        """The framework configuration's "precision" entry."""
        if self.managed:
            return {"precision": self.name, "by": "the framework's own config"}
        out = {"precision": self.name, "autocast": None if self.dtype is None else
               f"torch.autocast({self.device.type!r}, {self.dtype})"}
        if self.scaler is not None:
            out["loss_scaler"] = type(self.scaler).__name__
        if self.clip > 0:
            out["clip_grad_norm"] = "torch.nn.utils.clip_grad_norm_ after the exchange"
        return out

    def autocast(self):
        if self.dtype is None or self.managed:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def cast_input(self, xt):
        return xt.to(self.dtype) if self.managed and self.dtype is not None else xt

    def scale(self, loss):
        return self.scaler.scale(loss) if self.scaler is not None else loss

    def step(self, opt, params):
        """The update once the gradients are exchanged: unscale, clip, step (skipped by the
        scaler on a non-finite gradient), scaler update. Returns the step's fields."""
        fields = {}
        if self.scaler is not None:
            self.scaler.unscale_(opt)
        if self.clip > 0:
            fields["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, self.clip))
        if self.scaler is None:
            opt.step()
            return fields
        scale = float(self.scaler.get_scale())
        self.scaler.step(opt)
        self.scaler.update()
        fields.update(loss_scale=scale, skipped=scaler_skipped(self.scaler, scale))
        return fields


def scaler_skipped(scaler, scale_before):
    """Whether the scaler skipped the step: a dynamic scaler halves its scale exactly then."""
    if isinstance(scaler, StaticScaler):
        return scaler.found_inf
    return float(scaler.get_scale()) < scale_before


class StaticScaler:
    """A static fp16 loss scale with GradScaler's interface (GradScaler itself cannot hold
    its scale: its growth factor must exceed 1): the loss times scale, the gradients
    divided by it, a step with a non-finite gradient skipped."""

    def __init__(self, scale):
        self.value, self.found_inf = float(scale), False

    def scale(self, loss):
        return loss * self.value

    def unscale_(self, opt):
        self.found_inf = False
        for g in opt.param_groups:
            for p in g["params"]:
                if p.grad is not None:
                    p.grad.div_(self.value)
                    self.found_inf |= not bool(torch.isfinite(p.grad).all())

    def step(self, opt):
        if not self.found_inf:
            opt.step()

    def update(self):
        pass

    def get_scale(self):
        return self.value


def class_counts(out, yt, classes):
    """This batch's (correct per class, samples per class) as lists of classes numbers."""
    hit = yt[out.argmax(1) == yt]
    return (torch.bincount(hit, minlength=classes)[:classes].tolist(),
            torch.bincount(yt, minlength=classes)[:classes].tolist())


def evaluate(module, data, world, rank, batch, device, all_sum, prec=None):
    """The test split's Tally.as_list() (with per-class sums) summed over ranks (each its
    shard); prec: the run's Precision (autocast, input dtype)."""
    module.eval()
    tally = ddpb_train.Tally(data.classes)
    with torch.no_grad():
        for x, y in data.test_batches(world, rank, batch):
            xt = ddpb_torch_data.as_tensor(x).to(device)
            yt = ddpb_torch_data.as_tensor(y).to(device)
            with prec.autocast() if prec else contextlib.nullcontext():
                out = module(prec.cast_input(xt) if prec else xt).float()
            tally.add(F.cross_entropy(out, yt).item(), (out.argmax(1) == yt).sum().item(),
                      len(y), *class_counts(out, yt, data.classes))
    module.train()
    return all_sum(tally.as_list())


def build_model(spec, data, device, seed):
    torch.manual_seed(seed)
    c, h, w = data.shape
    return zoo.build(spec.get("model", "mnist-cnn"), c, h, w, data.classes).to(device)


def train_repeat(spec, rep, repeat, data, device, world, rank, adapter, el=None, ck=None):
    """One repeat from a fresh model (seed + repeat); el: the restart mode's state
    (engines/ddpb_elastic.py), ck: the checkpoint it resumes from (this repeat's), else
    None: the repeat starts at step 0."""
    seed = int(spec.get("seed", 1)) + repeat
    model = build_model(spec, data, device, seed)
    if ck is not None:  # before the wrap: DDP broadcasts rank 0's parameters
        model.load_state_dict(ck["model"])
        torch.set_rng_state(ck["rng"])
    module, opt = adapter.wrap(model)
    if ck is not None:
        opt.load_state_dict(ck["optimizer"])
    batch, acc = int(spec.get("batch_size", 32)), int(spec.get("accumulate", 1))
    plan = ddpb_train.Plan(spec, data.steps_per_epoch(world, batch) // acc)
    step, first, consumed = (ck["step"], ck["epoch"], ck["consumed"]) if ck else (0, 0, 0)
    it_no = el.iteration if el else 0  # the step number reported: never goes back
    first_steps = plan.steps_per_epoch if consumed == 0 else \
        data.steps_per_epoch(world, batch, consumed) // acc
    # the steps of the repeat in this world: a resumed epoch has what its rest allows
    total = plan.total if int(spec.get("epochs", 0)) <= 0 else \
        step + first_steps + (plan.epochs - first - 1) * plan.steps_per_epoch
    usage, grads, epoch = ddpb_train.Usage(repeat), None, first
    # DDPBENCH_OBSERVE_OFF=1: neither (tests/bench/bench_observe.py --part engines'
    # baseline; not DDPB_*, which the daemon keeps from its ranks)
    off = os.environ.get("DDPBENCH_OBSERVE_OFF") == "1"
    tracer = NO_TRACE if off else ddpb_observe.Tracer(spec, repeat)
    ready = ddpb_observe.Readiness(model.parameters()) \
        if rank == 0 and getattr(adapter, "readiness", False) and not off else None
    hold = opened = False  # the traced steps' lines wait for adapter.trace_finish
    for epoch in range(first, plan.epochs):
        t_epoch = time.perf_counter()
        tally = ddpb_train.Tally()
        start = consumed if epoch == first else 0
        if ck is not None and epoch == first and rank == 0:  # the ranks' sums so far
            tally.loss_sum, tally.correct, tally.count = ck["tally"]
        it = data.batches(epoch, world, rank, batch, seed=seed, start=start)
        n_steps = first_steps if epoch == first else plan.steps_per_epoch
        ran = 0
        for _ in range(n_steps):
            if step >= total:
                break
            lr = ddpb_train.lr_at(spec, step, total)
            for g in opt.param_groups:
                g["lr"] = lr
            last = step == total - 1
            if step == tracer.first and tracer.enabled():  # between steps: not timed
                hold, opened = trace_window(adapter, tracer, True), True
            tracer.begin(step, it_no)
            ddpb_torch_data.step_begin(data)
            loss_mean, step_ms, ph, read = one_step(
                module, adapter, it, device, acc, tally, last, tracer,
                ready if step >= plan.warmup else None, rep, hold)
            if opened and step == tracer.last - 1:
                trace_window(adapter, tracer, False)
                opened = False
            grads = read if last else grads
            ph.update(ddpb_torch_data.step_figures(data))
            if el:
                el.mark(it_no)
                ph.update(el.step_fields())
            rep.step(step=it_no, loss=loss_mean, samples=batch * acc, step_ms=step_ms,
                     repeat=repeat, epoch=epoch, warmup=step < plan.warmup, **ph)
            usage.step()
            step, it_no, ran = step + 1, it_no + 1, ran + 1
            if el and el.pending_resume:
                el.resumed(rep, ck["iteration"] if ck else 0)
            if el and el.due(step) and ran < n_steps:
                commit(el, rank, model, opt, adapter, repeat, epoch,
                       start + ran * batch * acc * world, step, it_no, tally)
        if ran < n_steps:
            break  # steps ran out inside this epoch: the C worker reports no partial epoch
        usage.emit(rep, epoch)
        test = None
        if data.test is not None and spec.get("eval", True):
            def test():
                return evaluate(module, data, world, rank, batch, device, adapter.all_sum,
                                adapter.prec)
        ddpb_train.end_epoch(rep, rank, world, repeat, epoch, tally, t_epoch, adapter.all_sum,
                             test)
        if el:  # the next epoch starts from here
            commit(el, rank, model, opt, adapter, repeat, epoch + 1, 0, step, it_no, None)
        if step >= total:
            break
    usage.emit(rep, epoch)  # the steps after the last epoch that ended
    if opened:  # the steps ran out inside the window
        trace_window(adapter, tracer, False)
    if tracer.held:
        adapter.trace_finish(tracer)
        tracer.emit_held(rep)
    if ready is not None:
        ready.emit(rep, repeat)
    if el:
        el.iteration = it_no
    rep.memory(repeat, ddpb_train.peak_rss_bytes(), grads_bytes=grads,
               device_peak_bytes=ddpb_observe.device_peak_bytes(device),
               **held_bytes(module, opt))


def trace_window(adapter, tracer, on):
    """The trace window opens (on) or closes, between steps; whether the adapter holds the
    traced steps' lines until trace_finish."""
    fn = getattr(adapter, "trace_window", None)
    return bool(fn(tracer, on)) if fn else False


# the tracer of a loop that traces nothing (Horovod's elastic driver's, ddpb_hvd_elastic.py)
NO_TRACE = ddpb_observe.Tracer({"trace_steps": 0}, 0)


def one_step(module, adapter, it, device, acc, tally, last, tracer=NO_TRACE, ready=None,
             rep=None, hold=False):
    """One optimizer step over acc micro-batches from the batch iterator it, tallied:
    (the loss's mean, step_ms, the phases for the step line, and when last the gradient
    bytes, read before the update frees them, else None). The step's spans go to tracer
    (a traced step: its line to rep, or held), the synchronising backward's readiness to
    ready (None: not recorded)."""
    clock = ddpb_train.Clock()
    t_start = clock.t
    adapter.step_begin()
    data_ms = fwd = bwd = 0.0
    loss_sum, grads = 0.0, None
    for k in range(acc):
        t_data = clock.t
        x, y = next(it)
        xt = ddpb_torch_data.as_tensor(x).to(device)
        yt = ddpb_torch_data.as_tensor(y).to(device)
        data_ms += clock.lap()
        tracer.span("data", t_data, clock.t)
        with adapter.micro(k, acc):
            t_fwd = clock.t
            with adapter.prec.autocast():
                out = module(adapter.prec.cast_input(xt)).float()
            loss = F.cross_entropy(out, yt)
            fwd += clock.lap()
            t_bwd = clock.t
            if ready is not None and k == acc - 1:
                ready.begin(t_bwd)
            adapter.backward(loss, k, acc)
            last_bwd = clock.lap()
            bwd += last_bwd
            tracer.span("forward", t_fwd, t_bwd)
            tracer.span("backward", t_bwd, clock.t)
        backward_end = clock.t
        loss_sum += loss.item()
        tally.add(loss.item(), (out.argmax(1) == yt).sum().item(), len(y))
        clock.lap()  # the tally's reads are no phase
    if last:  # frameworks free .grad in the update: read it here
        grads = grad_bytes(module)
        clock.lap()  # the reading is no phase
    t_update = clock.t
    ph = adapter.step_end(backward_end)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    clock.lap()
    # the update as the adapter timed it (its optimizer_ms, plus any exposed wait inside)
    tracer.span("optimizer", *ph.pop("update_span", (t_update, clock.t)))
    exposed = ph.pop("in_backward_ms", 0.0)
    if ready is not None:  # the backward's own time, as the C worker's
        ready.end(max(0.0, last_bwd - exposed) * 1e6)
    if tracer.cur is not None:
        fn = getattr(adapter, "trace_step", None)
        if fn:
            fn(tracer, backward_end)
        tracer.end(rep, t_start, clock.t, hold)
    ph.update(data_ms=data_ms, forward_ms=fwd, backward_ms=max(0.0, bwd - exposed))
    return loss_sum / acc, (clock.t - t_start) * 1000.0, ph, grads


def commit(el, rank, model, opt, adapter, repeat, epoch, consumed, step, it_no, tally):
    """A restart-mode checkpoint (engines/ddpb_elastic.py), a collective of every rank:
    the epoch's tallies summed, ZeRO's optimizer shards gathered; rank 0 writes it."""
    sums = adapter.all_sum(tally.as_list()) if tally is not None else [0.0, 0.0, 0.0]
    opt_state = ddpb_elastic.optimizer_state(opt, rank)
    if rank != 0:
        return
    el.commit({"repeat": repeat, "epoch": epoch, "consumed": consumed, "step": step,
               "iteration": it_no, "model": model.state_dict(), "optimizer": opt_state,
               "rng": torch.get_rng_state(), "tally": sums, "gen": el.gen, "world": el.world})


def tensor_bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def grad_bytes(module):
    """The gradients the parameters hold after the last step's backward, before the update
    (which frees them: zero_grad(set_to_none)); None where the framework moved them out of
    .grad (DeepSpeed's ZeRO reduces them into its own flat partitions)."""
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    return tensor_bytes(grads) if grads else None


def held_bytes(module, opt):
    """What the rank holds after its last step, read from the framework's own tensors:
    parameters and buffers of the (wrapped) module and the optimizer's state tensors
    (ZeroRedundancyOptimizer and DeepSpeed hold only this rank's shard: their inner
    optimizer is read). The communication buffers and activations are the framework's and
    are not told."""
    inner = getattr(opt, "optim", None) or opt
    state = [v for st in inner.state.values() for v in st.values() if torch.is_tensor(v)]
    return {"params_bytes": tensor_bytes(module.parameters()),
            "buffers_bytes": tensor_bytes(module.buffers()), "optimizer_bytes": tensor_bytes(state)}


def train_all(name, rep, versions, not_observed, spec, data, device, world, rank,
              make_adapter, extra=None, el=None):
    """Every repeat of the run. make_adapter(announce) builds a repeat's adapter; repeat 0's
    calls announce(config) once its framework objects exist, which sends the env event:
    versions, the framework configuration (extra added) and what is not observed. el: the
    restart mode's state (engines/ddpb_elastic.py), which resumes from its checkpoint."""
    def announce(config):
        config.update(extra or {})
        config["threads"] = torch.get_num_threads()
        config["data"] = ddpb_torch_data.data_config(data)
        rep.env(ddpb_train.framework_env(name, versions, config, not_observed))

    if spec.get("loader_only"):
        announce({"loader_only": "the DataLoader alone: no model, no optimizer, no exchange"})
        for repeat in range(int(spec.get("repeats", 1))):
            rep.heartbeat(phase="train")
            loader_repeat(spec, rep, repeat, data, world, rank)
        return

    ck = el.load() if el else None
    if el:  # past every step any slot reported (ddpb_elastic's iteration counter)
        hw = el.high_water()
        el.iteration = max(hw, ck["iteration"] if ck else 0)
        el.lost_steps = max(0, hw - (ck["iteration"] if ck else 0))
    for repeat in range(ck["repeat"] if ck else 0, int(spec.get("repeats", 1))):
        rep.heartbeat(phase="train")
        adapter = make_adapter(announce if repeat == 0 or ck else (lambda config: None))
        train_repeat(spec, rep, repeat, data, device, world, rank, adapter, el,
                     ck if ck and ck["repeat"] == repeat else None)
        ck = None


def loader_repeat(spec, rep, repeat, data, world, rank):
    """One repeat of a loader-only run (spec loader_only), as the C worker's
    (worker/workload_train.c train_step_loader): each step takes its accumulate batches
    from the loader and trains nothing, so its time is the loader's (data_ms = step_ms),
    the loss 0, forward, backward, update and exchange 0; the epochs carry no train
    figures, their samples being what the ranks took (every rank takes as many)."""
    seed = int(spec.get("seed", 1)) + repeat
    batch, acc = int(spec.get("batch_size", 32)), int(spec.get("accumulate", 1))
    plan = ddpb_train.Plan(spec, data.steps_per_epoch(world, batch) // acc)
    usage, step, epoch = ddpb_train.Usage(repeat), 0, 0
    for epoch in range(plan.epochs):
        t_epoch = time.perf_counter()
        it = data.batches(epoch, world, rank, batch, seed=seed)
        ran = 0
        while ran < plan.steps_per_epoch and step < plan.total:
            ddpb_torch_data.step_begin(data)
            t0 = time.perf_counter()
            for _ in range(acc):
                next(it)
            step_ms = (time.perf_counter() - t0) * 1000.0
            rep.step(step=step, loss=0.0, samples=batch * acc, step_ms=step_ms, repeat=repeat,
                     epoch=epoch, warmup=step < plan.warmup, data_ms=step_ms, forward_ms=0.0,
                     backward_ms=0.0, optimizer_ms=0.0, comm_ms=0.0, comm_exposed_ms=0.0,
                     **ddpb_torch_data.step_figures(data))
            usage.step()
            step, ran = step + 1, ran + 1
        if ran < plan.steps_per_epoch:
            break  # no partial epoch, as the C worker
        usage.emit(rep, epoch)
        if rank == 0:
            rep.epoch(epoch=epoch, samples=ran * batch * acc * world,
                      time_s=time.perf_counter() - t_epoch, repeat=repeat)
        if step >= plan.total:
            break
    usage.emit(rep, epoch)
    rep.memory(repeat, ddpb_train.peak_rss_bytes())


def no_context(k, acc):
    return contextlib.nullcontext()


def error_code(ex, text):
    """The report's error code for an exception of a torch-based engine."""
    if isinstance(ex, RuntimeError) and any(w in text for w in ("Connection", "closed",
                                                                 "peer", "reset")):
        return "peer"
    if "imed out" in text or "timeout" in text.lower():
        return "timeout"
    if isinstance(ex, (ValueError, KeyError, FileNotFoundError)):
        return "invalid"
    return "internal"


def make_optimizer(spec, params):
    """torch.optim's optimizer for the spec: (class, kwargs, config for the env event)."""
    o = spec.get("optimizer", {})
    kind = o.get("type", "sgd")
    lr = float(o.get("lr", 0.01))
    wd = float(o.get("weight_decay", 0))
    if kind == "sgd":
        cls, kw = torch.optim.SGD, {"lr": lr, "momentum": float(o.get("momentum", 0)),
                                    "nesterov": bool(o.get("nesterov", False)),
                                    "weight_decay": wd}
    else:
        cls = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
        kw = {"lr": lr, "betas": (float(o.get("beta1", 0.9)), float(o.get("beta2", 0.999))),
              "eps": float(o.get("eps", 1e-8)), "weight_decay": wd}
    config = {"class": cls.__name__, **{k: list(v) if isinstance(v, tuple) else v
                                        for k, v in kw.items()}}
    return cls, kw, config
