"""ddpb_keras_loop: the Keras training loop the TensorFlow-based engines share: engine
tensorflow (MultiWorkerMirroredStrategy, MirroredStrategy) and engine horovod with
framework keras (hvd.tensorflow.keras). The spec's optimizer as Keras's, the zoo's model
(ddpb_keras_models), one tf.function step, ddpb_data's batches of each replica in
ddpbench's order (NCHW transposed to NHWC), the epoch tally, evaluation and the report
lines. What differs between them is a distribution object:
  dist.scope()               context the model and optimizer are built in
  dist.replica_ids           the global replicas this process feeds (one, or all of a
                             single-process strategy's)
  dist.loss_divisor          the replica loss is divided by it (a strategy sums the
                             replicas' gradients: its replica count; Horovod averages: 1)
  dist.legacy_optimizer      Keras's legacy optimizer classes (Horovod 0.28's
                             DistributedOptimizer subclasses the optimizer's bases, which
                             the new optimizers' update step is not in)
  dist.wrap(opt)             the optimizer the step applies gradients with
  dist.gradients(opt, loss, variables, tape)   the replica's gradients, exchanged if the
                             framework exchanges them there (Horovod)
  dist.run(fn, args)         fn on each local replica (its inputs per replica)
  dist.inputs(xs, ys)        per-replica tensors as dist.run takes them
  dist.locals(value)         the local replicas' values of dist.run's result
  dist.all_sum(values)       the values summed over processes (floats)
  dist.after_first_step(run) what follows the first step (Horovod: the broadcast)
  dist.exchanged(grads)      clip_grad_norm: (the exchanged gradients, apply_gradients'
                             keywords) so the step can read their global norm (a
                             strategy all-reduces them here and tells Keras not to again;
                             Horovod's are exchanged already)

Precision (issue 33): bf16 is the Keras policy "mixed_bfloat16" (fp32 variables, bf16
compute; logits cast to fp32 for the loss); fp16 "mixed_float16" with a LossScaleOptimizer
(dynamic when loss_scale is 0, growth every loss_scale_window steps; static otherwise),
which needs a GPU: refused at submit, as these engines are tensorflow-cpu.
clip_grad_norm is the optimizer's global_clipnorm. Keras 2.15's apply_gradients
aggregates (all-reduces) the gradients before _clip_gradients (the legacy optimizers'
_transform_gradients likewise after Horovod's exchange), so it clips the exchanged
gradient as the contract asks. Keras clips by clip/max(norm, clip): torch's clip/(norm +
1e-6) without the 1e-6.

Loss: each replica's mean cross-entropy over its batch, divided by loss_divisor, so the
exchange yields the mean over the global batch (DDP's average).

Phases: data (the numpy batches to tensors) and the step are timed on the host clock; the
step's forward, backward, exchange and update run as one tf.function graph with no hook
between them (probe.NOT_OBSERVED says so)."""
import time

import numpy as np
import tensorflow as tf

import ddpb_data
import ddpb_keras_models as zoo
import ddpb_train

POLICIES = {"fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


def make_optimizer(spec, legacy=False):
    """Keras's optimizer for the spec: (optimizer, L2 added to the gradient, config).
    legacy: tf.keras.optimizers.legacy's classes (which have no AdamW: refused)."""
    o = spec.get("optimizer", {})
    kind, lr = o.get("type", "sgd"), float(o.get("lr", 0.01))
    wd = float(o.get("weight_decay", 0))
    clip = float(spec.get("clip_grad_norm", 0) or 0)
    kw = {"global_clipnorm": clip} if clip > 0 else {}
    ns = tf.keras.optimizers.legacy if legacy else tf.keras.optimizers
    if kind == "sgd":
        opt = ns.SGD(learning_rate=lr, momentum=float(o.get("momentum", 0)),
                     nesterov=bool(o.get("nesterov", False)), **kw)
    elif kind == "adam":
        opt = ns.Adam(learning_rate=lr, beta_1=float(o.get("beta1", 0.9)),
                      beta_2=float(o.get("beta2", 0.999)), epsilon=float(o.get("eps", 1e-8)),
                      **kw)
    elif legacy:
        raise ValueError("optimizer.type adamw: Horovod's Keras DistributedOptimizer wraps "
                         "Keras's legacy optimizers, which have no AdamW; use sgd or adam")
    else:
        opt = tf.keras.optimizers.AdamW(learning_rate=lr, weight_decay=wd,
                                        beta_1=float(o.get("beta1", 0.9)),
                                        beta_2=float(o.get("beta2", 0.999)),
                                        epsilon=float(o.get("eps", 1e-8)), **kw)
    l2 = wd if kind != "adamw" else 0.0
    config = {"class": type(opt).__name__, "learning_rate": lr, "l2_in_gradient": l2,
              **{k: v for k, v in opt.get_config().items()
                 if k in ("momentum", "nesterov", "beta_1", "beta_2", "epsilon",
                          "weight_decay", "global_clipnorm")}}
    if spec.get("precision") == "fp16":
        scale = float(spec.get("loss_scale", 0) or 0)
        window = int(spec.get("loss_scale_window", 2000))
        opt = tf.keras.mixed_precision.LossScaleOptimizer(
            opt, dynamic=scale <= 0, initial_scale=scale if scale > 0 else 65536.0,
            dynamic_growth_steps=window)
        config["LossScaleOptimizer"] = {"dynamic": scale <= 0, "window": window}
    return opt, l2, config


def error_code(ex, text):
    """The report's error code for a TensorFlow exception."""
    if isinstance(ex, (tf.errors.UnavailableError, tf.errors.CancelledError)):
        return "peer"
    if isinstance(ex, tf.errors.DeadlineExceededError):
        return "timeout"
    if isinstance(ex, (ValueError, KeyError, FileNotFoundError)):
        return "invalid"
    return "internal"


def nhwc(x):
    """A numpy NCHW batch (ddpb_data) as NHWC; a tf.data batch (ddpb_tf_data) is NHWC."""
    if isinstance(x, tf.Tensor):
        return x
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


class KerasRun:
    """One process's model, optimizer and tf.functions under a distribution (above);
    world: the run's replicas."""

    def __init__(self, spec, dist, data, seed, world):
        self.spec, self.dist, self.data, self.world = spec, dist, data, world
        self.fp16 = spec.get("precision") == "fp16"
        self.clip = float(spec.get("clip_grad_norm", 0) or 0)
        tf.keras.utils.set_random_seed(seed)
        tf.keras.mixed_precision.set_global_policy(POLICIES[spec.get("precision", "fp32")])
        c, h, w = data.shape
        with dist.scope():
            self.model = zoo.build(spec.get("model", "mnist-cnn"), c, h, w, data.classes)
            opt, self.l2, self.opt_config = make_optimizer(spec, dist.legacy_optimizer)
            self.opt = dist.wrap(opt)
        self.xent = tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=tf.keras.losses.Reduction.NONE)
        self.train_step = tf.function(self._train_step)
        self.eval_step = tf.function(self._eval_step)

    def _correct(self, logits, y):
        hit = tf.equal(tf.argmax(logits, 1, output_type=tf.int64), y)
        return tf.reduce_sum(tf.cast(hit, tf.float64))

    def _replica_step(self, x, y):
        """x: (B, H, W, C), y: (B,) -> this replica's mean loss, correct count, and the
        global norm of the exchanged gradient (-1 when clip_grad_norm is off)."""
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            logits = tf.cast(self.model(x, training=True), tf.float32)  # mixed: bf16/fp16
            loss = tf.reduce_mean(self.xent(y, logits))
            scaled = loss / self.dist.loss_divisor
            if self.fp16:
                scaled = self.opt.get_scaled_loss(scaled)
        grads = self.dist.gradients(self.opt, scaled, variables, tape)
        if self.fp16:
            grads = self.opt.get_unscaled_gradients(grads)
        if self.l2:  # per replica: a strategy's summed exchange then adds it once
            grads = [g + (self.l2 / self.dist.loss_divisor) * v for g, v in zip(grads, variables)]
        norm, kw = tf.constant(-1.0), {}
        if self.clip > 0:  # exchanged here, as apply_gradients would, to read the norm
            grads, kw = self.dist.exchanged(grads)
            norm = tf.linalg.global_norm(grads)
        self.opt.apply_gradients(zip(grads, variables), **kw)  # a strategy all-reduces here
        return loss, self._correct(logits, y), norm

    def _train_step(self, x, y):
        return self.dist.run(self._replica_step, (x, y))

    def _eval_step(self, x, y):
        def fn(x, y):
            logits = tf.cast(self.model(x, training=False), tf.float32)
            hit = tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int64), y), tf.float64)
            k = self.data.classes
            return (tf.reduce_sum(tf.cast(self.xent(y, logits), tf.float64)),
                    self._correct(logits, y), tf.math.unsorted_segment_sum(hit, y, k),
                    tf.math.unsorted_segment_sum(tf.ones_like(hit), y, k))
        return self.dist.run(fn, (x, y))

    def all_sum(self, values):
        return self.dist.all_sum(values)

    def evaluate(self, rank, batch):
        """The test split's [loss_sum, correct, count] over every replica: each feeds its
        shard, as the other engines' ranks do."""
        ev = ddpb_train.Tally(self.data.classes)
        its = [self.data.test_batches(self.world, r, batch) for r in self.dist.replica_ids]
        for parts in zip(*its):
            out = self.eval_step(*self.dist.inputs([nhwc(x) for x, _ in parts],
                                                   [y for _, y in parts]))
            for (_, y), ls, cr, cc, cn in zip(parts, *(self.dist.locals(v) for v in out)):
                ev.add(float(ls.numpy()) / len(y), float(cr.numpy()), len(y),
                       cc.numpy().tolist(), cn.numpy().tolist())
        return self.all_sum(ev.as_list())

    def run_repeat(self, rep, repeat, seed, rank):
        spec, data, world = self.spec, self.data, self.world
        batch = int(spec.get("batch_size", 32))
        plan = ddpb_train.Plan(spec, data.steps_per_epoch(world, batch))
        step, usage = 0, ddpb_train.Usage(repeat)
        epoch = 0
        if spec.get("loader_only"):
            return self.run_loader(rep, repeat, seed, rank, plan, batch)
        for epoch in range(plan.epochs):
            t_epoch = time.perf_counter()
            tally = ddpb_train.Tally()
            its = [data.batches(epoch, world, r, batch, seed=seed) for r in self.dist.replica_ids]
            rep.heartbeat(phase="train")
            for _ in range(min(plan.steps_per_epoch, plan.total - step)):
                self.opt.learning_rate.assign(ddpb_train.lr_at(spec, step, plan.total))
                clock = ddpb_train.Clock()
                t0 = clock.t
                reads = DataCounters()
                parts = [next(it) for it in its]
                xs, ys = self.dist.inputs([nhwc(x) for x, _ in parts], [y for _, y in parts])
                data_ms = clock.lap()
                loss, correct, norm = self.train_step(xs, ys)
                losses = [float(v.numpy()) for v in self.dist.locals(loss)]  # waits for it
                step_ms = (time.perf_counter() - t0) * 1000.0
                for (_, y), lv, cv in zip(parts, losses, self.dist.locals(correct)):
                    tally.add(lv, float(cv.numpy()), len(y))
                rep.step(step=step, loss=sum(losses) / len(losses), samples=batch,
                         step_ms=step_ms, repeat=repeat, epoch=epoch,
                         warmup=step < plan.warmup, data_ms=data_ms,
                         grad_norm=float(self.dist.locals(norm)[0].numpy()) if self.clip > 0
                         else None, read_bytes=reads.read_bytes(), **self.scale_fields())
                if step == 0:
                    self.dist.after_first_step(self)
                usage.step()
                step += 1
            if not plan.completed(epoch, step):
                break  # steps ran out inside this epoch: no partial epoch, as in C
            usage.emit(rep, epoch)
            test = None
            if data.test is not None and spec.get("eval", True):
                def test():
                    return self.evaluate(rank, batch)
            ddpb_train.end_epoch(rep, rank, world, repeat, epoch, tally, t_epoch,
                                 self.all_sum, test)
            if step >= plan.total:
                break
        usage.emit(rep, epoch)  # the steps after the last epoch that ended
        rep.memory(repeat, ddpb_train.peak_rss_bytes(), **self.held_bytes())

    def run_loader(self, rep, repeat, seed, rank, plan, batch):
        """loader_only: the replicas' input pipelines alone (no model step), each step the
        wait for their next batches (data_ms = step_ms), as worker/workload_train.c's
        train_step_loader; loss 0, epochs with no train figures. loader_cpu_ms: the
        process' CPU over the step, all of it the pipeline's here (DataCounters)."""
        data, world, step, epoch = self.data, self.world, 0, 0
        usage = ddpb_train.Usage(repeat)
        for epoch in range(plan.epochs):
            t_epoch, samples = time.perf_counter(), 0
            its = [data.batches(epoch, world, r, batch, seed=seed) for r in self.dist.replica_ids]
            rep.heartbeat(phase="train")
            for _ in range(min(plan.steps_per_epoch, plan.total - step)):
                reads = DataCounters()
                parts = [next(it) for it in its]
                step_ms = reads.wall_ms()
                samples += sum(len(y) for _, y in parts)
                rep.step(step=step, loss=0.0, samples=batch, step_ms=step_ms, repeat=repeat,
                         epoch=epoch, warmup=step < plan.warmup, data_ms=step_ms,
                         loader_cpu_ms=reads.cpu_ms(), read_bytes=reads.read_bytes())
                usage.step()
                step += 1
            if not plan.completed(epoch, step):
                break
            usage.emit(rep, epoch)
            total = self.all_sum([float(samples)])[0]
            if rank == 0:
                rep.epoch(epoch=epoch, samples=int(total), time_s=time.perf_counter() - t_epoch,
                          repeat=repeat)
            if step >= plan.total:
                break
        usage.emit(rep, epoch)
        rep.memory(repeat, ddpb_train.peak_rss_bytes(), **self.held_bytes())

    def scale_fields(self):
        """fp16's step fields: the loss scale now (after the step's update: Keras' dynamic
        scale halves on a non-finite step and skips it, so a drop marks a skipped step)."""
        if not self.fp16:
            return {}
        scale = float(self.opt.loss_scale.numpy())
        skipped = getattr(self, "last_scale", scale) > scale
        self.last_scale = scale
        return {"loss_scale": scale, "skipped": skipped}

    def held_bytes(self):
        """The model's weights (trainable: parameters; the rest: batch-norm statistics) and
        the optimizer's slot variables, from Keras' own variables; Keras keeps no gradient
        between steps, and its collectives' buffers and activations are not told."""
        def size(vs):
            return sum(int(v.shape.num_elements()) * v.dtype.size for v in vs)
        variables = self.opt.variables() if callable(self.opt.variables) else \
            self.opt.variables
        slots = [v for v in variables if v.shape.rank and v.shape.rank > 0]
        return {"params_bytes": size(self.model.trainable_weights),
                "buffers_bytes": size(self.model.non_trainable_weights),
                "optimizer_bytes": size(slots)}


class DataCounters:
    """What the input pipeline did from its creation to a read-out: the wall time, the
    process' CPU time (time.process_time: every thread, tf.data's included) and the bytes
    the rank's ddpbench-fs mount served (ddpb_data.mount_stats; None without a mount)."""

    def __init__(self):
        self.t, self.cpu = time.perf_counter(), time.process_time()
        self.stats = ddpb_data.mount_stats()

    def wall_ms(self):
        return (time.perf_counter() - self.t) * 1000.0

    def cpu_ms(self):
        return (time.process_time() - self.cpu) * 1000.0

    def read_bytes(self):
        if self.stats is None:
            return None
        now = ddpb_data.mount_stats()
        return None if now is None else max(0, int(now["bytes"]) - int(self.stats["bytes"]))


class StrategyDist:
    """A tf.distribute strategy as KerasRun's distribution: MultiWorkerMirroredStrategy
    (one replica a process, ranks summed by the strategy's collectives) or
    MirroredStrategy (every replica in this process: all_sum is the identity)."""

    legacy_optimizer = False

    def __init__(self, strategy, replica_ids, single_process):
        self.strategy, self.replica_ids = strategy, replica_ids
        self.single = single_process
        self.loss_divisor = strategy.num_replicas_in_sync
        self._reduce = tf.function(self._reduce_sum)

    def scope(self):
        return self.strategy.scope()

    def wrap(self, opt):
        return opt

    def gradients(self, opt, loss, variables, tape):
        return tape.gradient(loss, variables)

    def run(self, fn, args):
        return self.strategy.run(fn, args=args)

    def inputs(self, xs, ys):
        if not self.single:
            return tf.constant(xs[0]), tf.constant(ys[0])

        def part(values):
            return self.strategy.experimental_distribute_values_from_function(
                lambda ctx: tf.constant(values[ctx.replica_id_in_sync_group]))
        return part(xs), part(ys)

    def locals(self, value):
        return self.strategy.experimental_local_results(value)

    def _reduce_sum(self, t):
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM,
                                    self.strategy.run(tf.identity, args=(t,)), axis=None)

    def all_sum(self, values):
        if self.single:  # one process: its tallies hold every replica already
            return [float(v) for v in values]
        return self._reduce(tf.constant(values, dtype=tf.float64)).numpy().tolist()

    def after_first_step(self, run):
        pass

    def exchanged(self, grads):
        """The replica's gradients all-reduced (SUM) in its replica context, as
        apply_gradients would, and the keyword that keeps Keras from doing it again."""
        grads = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM,
                                                               grads)
        return grads, {"skip_gradients_aggregation": True}
