#!/usr/bin/env python3
"""engine_tensorflow: one rank of a `"engine": "tensorflow"` run, started by
engines/ddpb_launch.py with TF_CONFIG (every rank's host:port, agreed through the store).

The spec's knobs map onto TensorFlow's (framework_config, stored with the run):
  strategy ddp  tf.distribute.MultiWorkerMirroredStrategy, collective all-reduce of every
                gradient, CommunicationOptions(implementation=RING) on the CPU
  strategy mirrored  tf.distribute.MirroredStrategy in ONE process (the daemon starts one:
                common/spec.h spec_processes) over world_size logical CPU devices, set
                before TensorFlow initializes its devices; replica r feeds ddpb_data's
                shard r, as rank r would; the tallies are the process's own
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
  dataset       native: ddpb_data's shard of this rank (NCHW batches transposed to NHWC);
                files-jpeg, files-png, tfrecord: ddpb_tf_data's tf.data pipeline over the
                same samples in the same order (num_parallel_calls and the private thread
                pool = dataset.workers, prefetch(prefetch)); replica r of mirrored reads
                shard r
  loader_only   the input pipelines alone (ddpb_keras_loop.run_loader)

The loop, loss and phases are ddpb_keras_loop's (shared with engine horovod's framework
keras): forward_ms, backward_ms, comm_ms, comm_exposed_ms and optimizer_ms are not
reported (null), nor bytes_sent; GET /v1/engines gives these reasons."""
import os
import sys

import ddpb_report  # noqa: E402
if __name__ == "__main__":  # the rank, not a DataLoader worker's import of this script
    ddpb_report.start().heartbeat(phase="import")  # reporting while the framework imports

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
import tensorflow as tf  # noqa: E402

import ddpb_data  # noqa: E402
import ddpb_keras_loop as keras_loop  # noqa: E402
import ddpb_tf_data  # noqa: E402
import ddpb_train  # noqa: E402
import probe  # noqa: E402

NOT_OBSERVED = probe.NOT_OBSERVED["tensorflow"]  # GET /v1/engines serves the same table
VERSIONS = {"python": sys.version.split()[0], "tensorflow": tf.__version__}


def logical_cpus(n):
    """MirroredStrategy's n replicas on the CPU: n logical devices of the one physical CPU,
    configured before TensorFlow initializes its devices (the adapter's first use)."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(n)])
    return [d.name for d in tf.config.list_logical_devices("CPU")]


def strategy_of(spec, world):
    """(the dist of ddpb_keras_loop, its configuration for the env event): strategy ddp is
    MultiWorkerMirroredStrategy across the run's processes, mirrored is MirroredStrategy
    over world_size logical CPU devices of this one process (spec_processes: the daemon
    started one)."""
    if spec.get("strategy") == "mirrored":
        devices = logical_cpus(world)
        strategy = tf.distribute.MirroredStrategy(
            devices=devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
        return keras_loop.StrategyDist(strategy, list(range(world)), True), {
            "MirroredStrategy": {"devices": devices, "replicas": world,
                                 "cross_device_ops": "ReductionToOneDevice",
                                 "single_process": True}}
    comm = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING,
        timeout_seconds=float(spec.get("comm_timeout_s", 300)))
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=comm)
    rank = int(os.environ["RANK"])
    return keras_loop.StrategyDist(strategy, [rank], False), {
        "MultiWorkerMirroredStrategy": {"implementation": "RING",
                                        "timeout_s": comm.timeout_seconds,
                                        "workers": world}}


def train(rep, spec, rank, world):
    # strategy mirrored: one process holds the spec's world_size replicas (world is 1)
    mirrored = spec.get("strategy") == "mirrored"
    world = int(spec.get("world_size", world)) if mirrored else world
    threads = int(spec.get("threads", 1))
    # the one process of mirrored holds every replica's CPU slots (spec_rank_slots)
    intra, inter = (threads * world, world) if mirrored else (threads, 1)
    tf.config.threading.set_intra_op_parallelism_threads(intra)
    tf.config.threading.set_inter_op_parallelism_threads(inter)
    rep.heartbeat(phase="rendezvous")
    dist, config = strategy_of(spec, world)
    data = ddpb_tf_data.open_data(spec) or ddpb_data.Data(spec)
    for repeat in range(int(spec.get("repeats", 1))):
        seed = int(spec.get("seed", 1)) + repeat
        run = keras_loop.KerasRun(spec, dist, data, seed, world)
        if repeat == 0:
            config.update(threads={"intra_op": intra, "inter_op": inter},
                          optimizer=run.opt_config,
                          mixed_precision_policy=keras_loop.POLICIES[
                              spec.get("precision", "fp32")])
            config.update(ddpb_tf_data.described(data))
            rep.env(ddpb_train.framework_env("tensorflow", VERSIONS, config, NOT_OBSERVED))
        run.run_repeat(rep, repeat, seed, rank)


def main():
    return ddpb_train.run_main("tensorflow", VERSIONS, train, keras_loop.error_code)


if __name__ == "__main__":
    sys.exit(main())
