#!/usr/bin/env python3
"""engine_horovod_keras: one rank of a `"engine": "horovod", "framework": "keras"` run:
Horovod's TensorFlow 2 Keras binding (horovod.tensorflow.keras), started by
engines/ddpb_launch.py in place of engine_horovod.py (its FRONT_ENDS) when the spec asks
for framework keras. The rendezvous, controllers and rank check are engine horovod's
(ddpb_hvd_common); the training loop is engine tensorflow's (ddpb_keras_loop).

The spec's knobs map onto Horovod's (framework_config, stored with the run):
  strategy horovod  hvd.DistributedOptimizer over Keras's (legacy) optimizer: each replica's
                    gradients are averaged by Horovod's allreduce in compute_gradients
  fusion_mb, cycle_ms, backend   as engine horovod (HOROVOD_FUSION_THRESHOLD, ...)
  compression       fp16: hvd.Compression.fp16; none: hvd.Compression.none
  broadcast_init    rank 0's variables to all after the first step (the model's and the
                    optimizer's, what hvd.callbacks.BroadcastGlobalVariablesCallback does)
  optimizer         Keras's legacy SGD / Adam (Horovod 0.28 subclasses the optimizer's
                    bases, which the new optimizers' update step is not in; no AdamW)
  dataset           files-jpeg / files-png: Keras' image_dataset_from_directory pipeline
                    (its own order, .shard per rank: ddpb_tf_data.KerasFiles), its threads
                    dataset.workers; tfrecord: engine tensorflow's tf.data pipeline;
                    native: ddpb_data's arrays

Phases: as engine tensorflow's (one tf.function step: forward, backward, Horovod's
allreduce and the update have no hook between them; probe.NOT_OBSERVED)."""
import os
import sys

import ddpb_report  # noqa: E402
if __name__ == "__main__":  # the rank, not a DataLoader worker's import of this script
    ddpb_report.start().heartbeat(phase="import")  # reporting while the framework imports

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
import tensorflow as tf  # noqa: E402
import horovod  # noqa: E402
import horovod.tensorflow as hvd_tf  # noqa: E402  (join, broadcast_variables)
import horovod.tensorflow.keras as hvd  # noqa: E402

import ddpb_data  # noqa: E402
import ddpb_hvd_common as common  # noqa: E402
import ddpb_keras_loop as keras_loop  # noqa: E402
import ddpb_tf_data  # noqa: E402
import ddpb_train  # noqa: E402
import probe  # noqa: E402

NOT_OBSERVED = probe.NOT_OBSERVED["tensorflow"]  # the same one-graph step (GET /v1/engines)
VERSIONS = {"python": sys.version.split()[0], "tensorflow": tf.__version__,
            "horovod": horovod.__version__}


class HorovodDist:
    """Horovod as ddpb_keras_loop's distribution: one replica a process, gradients averaged
    by hvd.DistributedOptimizer's compute_gradients (so the loss is not divided), sums by
    hvd.allreduce."""

    legacy_optimizer = True
    loss_divisor = 1

    def __init__(self, spec, rank):
        self.spec, self.replica_ids = spec, [rank]
        self.compression = hvd.Compression.fp16 if spec.get("compression") == "fp16" else \
            hvd.Compression.none

    def scope(self):
        import contextlib
        return contextlib.nullcontext()

    def wrap(self, opt):
        return hvd.DistributedOptimizer(opt, compression=self.compression)

    def gradients(self, opt, loss, variables, tape):
        return [g for g, _ in opt.compute_gradients(loss, variables, tape=tape)]

    def run(self, fn, args):
        return fn(*args)

    def inputs(self, xs, ys):
        return tf.constant(xs[0]), tf.constant(ys[0])

    def locals(self, value):
        return [value]

    def all_sum(self, values):
        t = tf.constant(values, dtype=tf.float64)
        return hvd.allreduce(t, op=hvd.Sum, name="ddpb_tally").numpy().tolist()

    def exchanged(self, grads):
        """The gradients compute_gradients averaged already; nothing to tell Keras."""
        return grads, {}

    def after_first_step(self, run):
        """BroadcastGlobalVariablesCallback's broadcast: the optimizer's slots exist now."""
        if self.spec.get("broadcast_init", True):
            hvd_tf.broadcast_variables(run.model.variables, root_rank=0)
            hvd_tf.broadcast_variables(run.opt.variables(), root_rank=0)


def train(rep, spec, rank, world):
    if os.environ.get("HOROVOD_ELASTIC") == "1":
        raise ValueError("elastic: engine horovod's framework keras has no elastic mode here")
    threads = int(spec.get("threads", 1))
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    rep.heartbeat(phase="rendezvous")
    server = common.rendezvous(spec, rank, world, hvd.mpi_built)
    try:
        facts = common.init(hvd, rank, world)
        dist = HorovodDist(spec, rank)
        data = ddpb_tf_data.open_data(spec, keras=True) or ddpb_data.Data(spec)
        for repeat in range(int(spec.get("repeats", 1))):
            seed = int(spec.get("seed", 1)) + repeat
            run = keras_loop.KerasRun(spec, dist, data, seed, world)
            if repeat == 0:
                rep.env(ddpb_train.framework_env("horovod", VERSIONS, {
                    "framework": "keras", "DistributedOptimizer": {
                        "optimizer": run.opt_config,
                        "compression": dist.compression.__name__,
                        "fusion_threshold_bytes": int(os.environ.get(
                            "HOROVOD_FUSION_THRESHOLD", common.HOROVOD_DEFAULT_FUSION)),
                        "cycle_time_ms": float(os.environ.get(
                            "HOROVOD_CYCLE_TIME", common.HOROVOD_DEFAULT_CYCLE_MS)),
                        "broadcast_init": bool(spec.get("broadcast_init", True))},
                    "mixed_precision_policy": keras_loop.POLICIES[spec.get("precision", "fp32")],
                    "threads": {"intra_op": threads, "inter_op": 1},
                    **ddpb_tf_data.described(data), **facts}, NOT_OBSERVED))
            run.run_repeat(rep, repeat, seed, rank)
        hvd_tf.join()
        hvd.shutdown()
    finally:
        if server is not None:
            server.stop()


def main():
    return ddpb_train.run_main("horovod", VERSIONS, train, keras_loop.error_code)


if __name__ == "__main__":
    sys.exit(main())
