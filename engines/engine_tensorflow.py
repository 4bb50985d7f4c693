#!/usr/bin/env python3
"""engine_tensorflow: one rank of a `"engine": "tensorflow"` run, started by
engines/ddpb_launch.py with TF_CONFIG (every rank's host:port, agreed through the store).

The spec's knobs map onto TensorFlow's (framework_config, stored with the run):
  strategy ddp  tf.distribute.MultiWorkerMirroredStrategy, collective all-reduce of every
                gradient, CommunicationOptions(implementation=RING) on the CPU
  optimizer     Keras SGD (momentum, nesterov), Adam, AdamW; sgd / adam weight_decay is
                added to the gradient as PyTorch's L2 term (Keras's own is decoupled),
                adamw's is Keras's decoupled decay, as torch.optim.AdamW
  lr_schedule   ddpb_train.lr_at, assigned to the optimizer's learning rate each step
  threads       intra-op threads; one inter-op thread
  precision     bf16: the Keras policy "mixed_bfloat16" (fp32 variables, bf16 compute;
                logits cast to fp32 for the loss); fp16: "mixed_float16" with a
                LossScaleOptimizer (dynamic when loss_scale is 0, growth every
                loss_scale_window steps; static otherwise), which needs a GPU: refused at
                submit, as this engine is tensorflow-cpu
  clip_grad_norm  the optimizer's global_clipnorm. Keras 2.15's Optimizer.apply_gradients
                all-reduces the gradients (aggregate_gradients) before _clip_gradients, so
                it clips the aggregated gradient, as the contract asks; the adapter does
                that same all-reduce itself (replica context, SUM) so that it can report the
                norm (tf.linalg.global_norm) and passes skip_gradients_aggregation. Keras
                clips by tf.clip_by_global_norm: clip/max(norm, clip), torch's clip/(norm +
                1e-6) without the 1e-6
  dataset       ddpb_data's shard of this rank (NCHW batches transposed to NHWC)

Loss: each replica's mean cross-entropy over its batch, divided by the number of
replicas, so the strategy's summed all-reduce yields the mean over the global batch
(DDP's average).

Phases: data (the numpy batch to a tensor) and the step are timed on the host clock; the
step's forward, backward, all-reduce and update run as one tf.function graph with no hook
between them, so forward_ms, backward_ms, comm_ms, comm_exposed_ms and optimizer_ms are not
reported (null), nor bytes_sent; GET /v1/engines gives these reasons."""
import os
import sys
import time

import ddpb_report  # noqa: E402
ddpb_report.start().heartbeat(phase="import")  # reporting while the framework imports

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
import tensorflow as tf  # noqa: E402

import ddpb_data  # noqa: E402
import ddpb_keras_models as zoo  # noqa: E402
import ddpb_train  # noqa: E402
import probe  # noqa: E402

NOT_OBSERVED = probe.NOT_OBSERVED["tensorflow"]  # GET /v1/engines serves the same table
VERSIONS = {"python": sys.version.split()[0], "tensorflow": tf.__version__}


POLICIES = {"fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


def make_optimizer(spec):
    o = spec.get("optimizer", {})
    kind, lr = o.get("type", "sgd"), float(o.get("lr", 0.01))
    wd = float(o.get("weight_decay", 0))
    clip = float(spec.get("clip_grad_norm", 0) or 0)
    kw = {"global_clipnorm": clip} if clip > 0 else {}
    if kind == "sgd":
        opt = tf.keras.optimizers.SGD(learning_rate=lr, momentum=float(o.get("momentum", 0)),
                                      nesterov=bool(o.get("nesterov", False)), **kw)
    elif kind == "adam":
        opt = tf.keras.optimizers.Adam(learning_rate=lr, beta_1=float(o.get("beta1", 0.9)),
                                       beta_2=float(o.get("beta2", 0.999)),
                                       epsilon=float(o.get("eps", 1e-8)), **kw)
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
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


class KerasRun:
    """One rank's model, optimizer and tf.functions under MultiWorkerMirroredStrategy."""

    def __init__(self, spec, strategy, data, seed):
        self.spec, self.strategy, self.data = spec, strategy, data
        self.fp16 = spec.get("precision") == "fp16"
        self.clip = float(spec.get("clip_grad_norm", 0) or 0)
        tf.keras.utils.set_random_seed(seed)
        tf.keras.mixed_precision.set_global_policy(POLICIES[spec.get("precision", "fp32")])
        c, h, w = data.shape
        with strategy.scope():
            self.model = zoo.build(spec.get("model", "mnist-cnn"), c, h, w, data.classes)
            self.opt, self.l2, self.opt_config = make_optimizer(spec)
        self.xent = tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=tf.keras.losses.Reduction.NONE)
        self.train_step = tf.function(self._train_step)
        self.eval_step = tf.function(self._eval_step)
        self.reduce_sum = tf.function(self._reduce_sum)

    def _correct(self, logits, y):
        hit = tf.equal(tf.argmax(logits, 1, output_type=tf.int64), y)
        return tf.reduce_sum(tf.cast(hit, tf.float64))

    def _replica_step(self, x, y):
        """x: (B, H, W, C), y: (B,) -> this replica's mean loss, correct count, and the
        global norm of the all-reduced gradient (-1 when clip_grad_norm is off)."""
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            logits = tf.cast(self.model(x, training=True), tf.float32)  # mixed: bf16/fp16
            loss = tf.reduce_mean(self.xent(y, logits))
            scaled = loss / self.strategy.num_replicas_in_sync
            if self.fp16:
                scaled = self.opt.get_scaled_loss(scaled)
        grads = tape.gradient(scaled, variables)
        if self.fp16:
            grads = self.opt.get_unscaled_gradients(grads)
        if self.l2:  # per replica, so the summed all-reduce adds it once (torch's L2 term)
            n = self.strategy.num_replicas_in_sync
            grads = [g + (self.l2 / n) * v for g, v in zip(grads, variables)]
        norm = tf.constant(-1.0)
        if self.clip > 0:  # aggregate here, as apply_gradients would, to read the norm
            grads = tf.distribute.get_replica_context().all_reduce(
                tf.distribute.ReduceOp.SUM, grads)
            norm = tf.linalg.global_norm(grads)
            self.opt.apply_gradients(zip(grads, variables), skip_gradients_aggregation=True)
        else:
            self.opt.apply_gradients(zip(grads, variables))  # the strategy all-reduces here
        return loss, self._correct(logits, y), norm

    def _train_step(self, x, y):
        return self.strategy.run(self._replica_step, args=(x, y))

    def _eval_step(self, x, y):
        def fn(x, y):
            logits = tf.cast(self.model(x, training=False), tf.float32)
            hit = tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int64), y), tf.float64)
            k = self.data.classes
            return (tf.reduce_sum(tf.cast(self.xent(y, logits), tf.float64)),
                    self._correct(logits, y), tf.math.unsorted_segment_sum(hit, y, k),
                    tf.math.unsorted_segment_sum(tf.ones_like(hit), y, k))
        return self.strategy.run(fn, args=(x, y))

    def _reduce_sum(self, t):
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM,
                                    self.strategy.run(tf.identity, args=(t,)), axis=None)

    def all_sum(self, values):
        return self.reduce_sum(tf.constant(values, dtype=tf.float64)).numpy().tolist()

    def evaluate(self, world, rank, batch):
        ev = ddpb_train.Tally(self.data.classes)
        for x, y in self.data.test_batches(world, rank, batch):
            ls, cr, cc, cn = self.eval_step(tf.constant(nhwc(x)), tf.constant(y))
            ev.add(float(ls.numpy()) / len(y), float(cr.numpy()), len(y), cc.numpy().tolist(),
                   cn.numpy().tolist())
        return self.all_sum(ev.as_list())

    def run_repeat(self, rep, repeat, seed, world, rank):
        spec, data = self.spec, self.data
        batch = int(spec.get("batch_size", 32))
        plan = ddpb_train.Plan(spec, data.steps_per_epoch(world, batch))
        step, usage = 0, ddpb_train.Usage(repeat)
        for epoch in range(plan.epochs):
            t_epoch = time.perf_counter()
            tally = ddpb_train.Tally()
            it = data.batches(epoch, world, rank, batch, seed=seed)
            rep.heartbeat(phase="train")
            for _ in range(min(plan.steps_per_epoch, plan.total - step)):
                self.opt.learning_rate.assign(ddpb_train.lr_at(spec, step, plan.total))
                clock = ddpb_train.Clock()
                t0 = clock.t
                x, y = next(it)
                xt, yt = tf.constant(nhwc(x)), tf.constant(y)
                data_ms = clock.lap()
                loss, correct, norm = self.train_step(xt, yt)
                loss_v = float(loss.numpy())  # waits for the step's graph
                step_ms = (time.perf_counter() - t0) * 1000.0
                tally.add(loss_v, float(correct.numpy()), len(y))
                rep.step(step=step, loss=loss_v, samples=batch, step_ms=step_ms,
                         repeat=repeat, epoch=epoch, warmup=step < plan.warmup,
                         data_ms=data_ms, grad_norm=float(norm.numpy()) if self.clip > 0
                         else None, **self.scale_fields())
                usage.step()
                step += 1
            if not plan.completed(epoch, step):
                break  # steps ran out inside this epoch: no partial epoch, as in C
            usage.emit(rep, epoch)
            test = None
            if data.test is not None and spec.get("eval", True):
                def test():
                    return self.evaluate(world, rank, batch)
            ddpb_train.end_epoch(rep, rank, world, repeat, epoch, tally, t_epoch,
                                 self.all_sum, test)
            if step >= plan.total:
                break
        usage.emit(rep, epoch)  # the steps after the last epoch that ended
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
        slots = [v for v in self.opt.variables() if v.shape.rank and v.shape.rank > 0]
        return {"params_bytes": size(self.model.trainable_weights),
                "buffers_bytes": size(self.model.non_trainable_weights),
                "optimizer_bytes": size(slots)}


def train(rep, spec, rank, world):
    threads = int(spec.get("threads", 1))
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    rep.heartbeat(phase="rendezvous")
    comm = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING,
        timeout_seconds=float(spec.get("comm_timeout_s", 300)))
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=comm)
    data = ddpb_data.Data(spec)
    for repeat in range(int(spec.get("repeats", 1))):
        seed = int(spec.get("seed", 1)) + repeat
        run = KerasRun(spec, strategy, data, seed)
        if repeat == 0:
            config = {"MultiWorkerMirroredStrategy": {"implementation": "RING",
                                                      "timeout_s": comm.timeout_seconds,
                                                      "workers": world},
                      "threads": {"intra_op": threads, "inter_op": 1},
                      "optimizer": run.opt_config,
                      "mixed_precision_policy": POLICIES[spec.get("precision", "fp32")]}
            rep.env(ddpb_train.framework_env("tensorflow", VERSIONS, config, NOT_OBSERVED))
        run.run_repeat(rep, repeat, seed, world, rank)


def main():
    return ddpb_train.run_main("tensorflow", VERSIONS, train, error_code)


if __name__ == "__main__":
    sys.exit(main())
