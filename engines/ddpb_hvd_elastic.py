"""ddpb_hvd_elastic: the training loop of an elastic horovod run (issue 32) inside
hvd.elastic.run with an hvd.elastic.TorchState, for a worker Horovod's elastic driver
started (engines/ddpb_hvd_driver.py).

Decisions:
- The state Horovod commits (in memory, every commit_every optimizer steps and at each
  epoch's end; state.commit() is also where a worker learns that hosts were added) holds
  the model and optimizer (TorchState) and the position: repeat, epoch, samples of the
  epoch consumed by the whole world, the optimizer-step counter, the iteration counter at
  the commit and the epoch's tallies summed over the ranks. On a peer's failure Horovod
  restores the last commit on the survivors, re-forms the world, broadcasts the state from
  its rank 0 (sync) and calls the body again, which re-shards the rest of the epoch over
  the new world (ddpb_data's start) with the per-rank batch kept.
- Horovod re-ranks workers at every reset; reports stay the SLOT's (DDPB_RANK, the host the
  driver gave the worker), the data shard is hvd.rank() of hvd.size().
- Step numbers are the run's iteration counter and never go back: at every (re)start of
  the body the ranks agree the highest number any of them reported plus one (allreduce
  max; a replacement brings 0), so redone work gets new numbers. lost_steps is that minus
  the commit's iteration; the generation is the highest reset count any member has seen.
- The contract's elastic events: "detect" when a worker's restore begins (a peer
  failed), "regroup" and "resumed" from the new world's rank 0 (members: the slots of the
  world); the daemon stores them with its generations (daemon/ingest.c).
"""
import os
import time

import torch
import horovod.torch as hvd

import ddpb_elastic
import ddpb_torch_data
import ddpb_torch_loop as loop
import ddpb_train


class State(hvd.elastic.TorchState):
    """TorchState that notes when a restore began (a peer failed: Horovod's detection) and
    tells on_detect (set by the loop: the "detect" event)."""

    on_detect = None

    def restore(self):
        self.detected_at = time.time()
        if self.on_detect is not None:
            self.on_detect()
        super().restore()


class Events:
    """The elastic events of this worker (ddpb_elastic.Restart's writer, with Horovod's
    world in place of the daemon's generation)."""

    def __init__(self, rep, slot, spec):
        self.rep, self.slot = rep, slot
        self.out = ddpb_elastic.Restart(spec, slot, 0, env={
            "DDPB_ELASTIC_DIR": os.environ["DDPB_ELASTIC_DIR"], "DDPB_ELASTIC_GEN": "0"})

    def set_world(self, gen, world, members):
        self.out.gen, self.out.world, self.out.members = gen, world, members

    def emit(self, event, **fields):
        self.out.event(self.rep, event, **fields)


def train(rep, spec, slot, versions, not_observed, make_adapter):
    """The whole run of one worker (every repeat) under hvd.elastic.run."""
    data, device = ddpb_torch_data.open_data(spec), torch.device("cpu")
    batch, acc = int(spec.get("batch_size", 32)), int(spec.get("accumulate", 1))
    every = max(1, int(spec["elastic"].get("commit_every", 1)))
    repeats, seed0 = int(spec.get("repeats", 1)), int(spec.get("seed", 1))

    def announce(config):
        config["threads"] = torch.get_num_threads()
        rep.env(ddpb_train.framework_env("horovod", versions, config, not_observed))

    facts = {"controller": "gloo", "cpu_operations": "gloo",
             "elastic": "hvd.elastic.run with hvd.elastic.TorchState under Horovod's elastic "
                        "driver (engines/ddpb_hvd_driver.py)"}
    adapter = make_adapter(spec, announce, facts, broadcast=False)
    model = loop.build_model(spec, data, device, seed0)
    module, opt = adapter.wrap(model)
    state = State(model=model, optimizer=opt, repeat=0, epoch=0, consumed=0, step=0,
                  iteration=0, tally=[0.0, 0.0, 0.0])
    ev = Events(rep, slot, spec)
    state.on_detect = lambda: ev.emit("detect", peer=-1)
    mine = {"gen": 0, "hw": 0}  # resets this process saw; the next step number it would use
    state.register_reset_callbacks([lambda: mine.update(gen=mine["gen"] + 1)])

    @hvd.elastic.run
    def body(state):
        rank, world = hvd.rank(), hvd.size()
        agreed = hvd.allreduce(torch.tensor([float(mine["gen"]), float(max(
            mine["hw"], state.iteration))], dtype=torch.float64), op=hvd.Max,
            name="ddpb_elastic_agree").tolist()
        mine["gen"], it_no = int(agreed[0]), int(agreed[1])
        members = sorted(hvd.allgather_object(slot))
        ev.set_world(mine["gen"], world, members)
        lost = it_no - state.iteration
        resuming = mine["gen"] > 0
        detected = getattr(state, "detected_at", None)  # None: a growth, not a loss

        def since_detect():
            return (time.time() - detected) * 1000.0 if detected else None
        if resuming and rank == 0:
            ev.emit("regroup", peer=-1, regroup_ms=since_detect())
        while state.repeat < repeats:
            seed = seed0 + state.repeat
            plan = ddpb_train.Plan(spec, data.steps_per_epoch(world, batch) // acc)
            total = plan.total if int(spec.get("epochs", 0)) <= 0 else None
            while state.epoch < plan.epochs and (total is None or state.step < total):
                t_epoch = time.perf_counter()
                start = state.consumed
                tally = ddpb_train.Tally()
                if rank == 0:  # the ranks' sums up to the commit
                    tally.loss_sum, tally.correct, tally.count = state.tally
                it = data.batches(state.epoch, world, rank, batch, seed=seed, start=start)
                n_steps = data.steps_per_epoch(world, batch, start) // acc
                usage = ddpb_train.Usage(state.repeat)
                for ran in range(1, n_steps + 1):
                    if total is not None and state.step >= total:
                        break
                    lr = ddpb_train.lr_at(spec, state.step, total or plan.total)
                    for g in opt.param_groups:
                        g["lr"] = lr
                    ddpb_torch_data.step_begin(data)
                    loss, step_ms, ph, _ = loop.one_step(module, adapter, it, device, acc,
                                                         tally, False)
                    ph.update(ev.out.step_fields())
                    ph.update(ddpb_torch_data.step_figures(data))
                    rep.step(step=it_no, loss=loss, samples=batch * acc, step_ms=step_ms,
                             repeat=state.repeat, epoch=state.epoch,
                             warmup=state.step < plan.warmup, **ph)
                    usage.step()
                    state.step, it_no = state.step + 1, it_no + 1
                    mine["hw"] = it_no
                    if resuming:
                        resuming, state.detected_at = False, None
                        if rank == 0:
                            ev.emit("resumed", commit_step=state.iteration, lost_steps=lost,
                                    peer=-1, regroup_ms=since_detect())
                    if state.step % every == 0 and ran < n_steps:
                        state.tally = adapter.all_sum(tally.as_list())
                        state.consumed = start + ran * batch * acc * world
                        state.iteration = it_no
                        state.commit()
                else:
                    usage.emit(rep, state.epoch)
                    test = None
                    if data.test is not None and spec.get("eval", True):
                        def test():
                            return loop.evaluate(module, data, world, rank, batch, device,
                                                 adapter.all_sum, adapter.prec)
                    ddpb_train.end_epoch(rep, rank, world, state.repeat, state.epoch, tally,
                                         t_epoch, adapter.all_sum, test)
                    state.epoch, state.consumed, state.tally = state.epoch + 1, 0, [0.0] * 3
                    state.iteration = it_no
                    state.commit()
                    continue
                break  # the steps ran out inside the epoch: no partial epoch is reported
            rep.memory(state.repeat, ddpb_train.peak_rss_bytes(),
                       **loop.held_bytes(module, opt))
            next_repeat(state, spec, data, device, model, opt, seed0)
            state.iteration = it_no
            state.commit()

    body(state)


def next_repeat(state, spec, data, device, model, opt, seed0):
    """The next repeat starts from a fresh model (seed + repeat) and optimizer state."""
    state.repeat, state.epoch, state.consumed, state.step = state.repeat + 1, 0, 0, 0
    state.tally = [0.0, 0.0, 0.0]
    fresh = loop.build_model(spec, data, device, seed0 + state.repeat)
    model.load_state_dict(fresh.state_dict())
    opt.state.clear()
