"""ddpb_elastic: the restart mode of an elastic run (issue 32) for the torch-based loop
(engines/ddpb_torch_loop.py): what torchrun's elastic agent asks of a training script.
The daemon (daemon/elastic_restart.h) stops every rank when one is lost and starts the
group again as generation N with the new world; each rank of it finds:
  DDPB_ELASTIC_GEN     N (0: the first start)
  DDPB_ELASTIC_DIR     the run's checkpoint folder, kept across generations
  DDPB_ELASTIC_SLOTS   the run's world_size W (its hello says W: the run's slots)
  DDPB_ELASTIC_LOST_AT Unix seconds the daemon saw the loss (from generation 1)
and RANK / WORLD_SIZE of the new world (slots 0..n-1).

Decisions:
- Rank 0 checkpoints every commit_every optimizer steps and at each epoch's end, into
  commit.pt (torch.save to a temporary file, then os.replace: a kill leaves the old one or
  the new one, never half of one): the model, the optimizer's full state (ZeRO's shards
  consolidated on rank 0 first), the data position (repeat, epoch, samples of the epoch
  consumed by the whole world), the optimizer-step counter, the iteration counter, torch's
  RNG state and the epoch's running tallies summed over the ranks. Every rank restores
  from it (one node: the daemon restarts the group on its own), the new world re-shards
  the rest of the epoch (ddpb_data.train_shard's start) and keeps the per-rank batch, so
  a smaller world takes more steps for what is left.
- Steps are reported by the run's ITERATION counter, which never goes back: each rank
  writes the next number it would use into iter.<slot> after every step, and a new
  generation starts past the highest of them, so redone work gets new numbers and step
  rows never collide. Every rank reads those files before its first step, which needs
  every rank (its gradients are reduced), so all read the same value. lost_steps is that
  high-water mark minus the checkpoint's iteration: the work done since the commit.
- The contract's "elastic" report lines: "regroup" (rank 0, the new group formed) and
  "resumed" (rank 0, after the generation's first step, with lost_steps and the commit's
  iteration) of generation N > 0, "detect" from a rank whose group failed under it; the
  daemon stores them with the generation (daemon/ingest.c). Steps carry gen and world.
  Each event is printed to the rank's log too."""
import json
import os
import sys
import time

import torch

COMMIT = "commit.pt"


def from_env(spec, rank, world):
    """The restart-mode state of this process, or None when the run is not elastic or
    the daemon did not start it in restart mode."""
    el = spec.get("elastic") or {}
    if not os.environ.get("DDPB_ELASTIC_DIR") or int(el.get("min_ranks", 0) or 0) <= 0:
        return None
    return Restart(spec, rank, world)


class Restart:
    """Checkpoints, resume and the elastic report lines of one rank of a generation."""

    def __init__(self, spec, rank, world, env=None):
        env = os.environ if env is None else env
        self.rank, self.world = rank, world
        self.gen = int(env.get("DDPB_ELASTIC_GEN", "0"))
        self.dir = env["DDPB_ELASTIC_DIR"]
        self.lost_at = float(env.get("DDPB_ELASTIC_LOST_AT") or 0)
        self.every = max(1, int((spec.get("elastic") or {}).get("commit_every", 1)))
        self.started = time.time()
        self.resumed_from = None  # the checkpoint's iteration, once restored
        self.lost_steps = 0
        self.iteration = 0  # the next step number to report
        self.pending_resume = self.gen > 0

    # --- the iteration counter ---------------------------------------------------------

    def high_water(self):
        """The highest iteration any slot reported plus one (0 when none)."""
        best = 0
        for name in os.listdir(self.dir):
            if name.startswith("iter.") and not name.endswith(".tmp"):
                try:
                    with open(os.path.join(self.dir, name)) as f:
                        best = max(best, int(f.read().strip() or 0))
                except (OSError, ValueError):
                    continue
        return best

    def mark(self, iteration):
        """This slot reported iteration: the next generation starts past it."""
        path = os.path.join(self.dir, f"iter.{self.rank}")
        _write_atomic(path, str(iteration + 1).encode())

    # --- checkpoints -------------------------------------------------------------------

    def load(self):
        """The last commit (a dict), or None when there is none yet."""
        path = os.path.join(self.dir, COMMIT)
        if not os.path.exists(path):
            return None
        return torch.load(path, map_location="cpu")

    def due(self, step):
        """Whether optimizer step count `step` (done so far) is a commit point."""
        return step > 0 and step % self.every == 0

    def commit(self, state):
        """Rank 0 writes state atomically (the other ranks pass None)."""
        if self.rank != 0 or state is None:
            return
        buf = os.path.join(self.dir, COMMIT)
        tmp = buf + ".tmp"
        torch.save(state, tmp)
        os.replace(tmp, buf)

    # --- report lines ------------------------------------------------------------------

    def step_fields(self):
        """gen and world for a step line."""
        return {"gen": self.gen, "world": self.world}

    def event(self, rep, event, **fields):
        """One elastic event (the contract's report line; a field None is left out), also
        printed to the rank's log."""
        line = {"event": event, "gen": self.gen, "world": self.world,
                "members": getattr(self, "members", None) or list(range(self.world)),
                **{k: v for k, v in fields.items() if v is not None}}
        rep.emit("elastic", **line)
        print(f"elastic: {json.dumps(line)}", file=sys.stderr, flush=True)

    def resumed(self, rep, commit_step):
        """After the first step of a generation N > 0 (rank 0 reports)."""
        self.pending_resume = False
        if self.rank != 0:
            return
        ms = (time.time() - self.lost_at) * 1000.0 if self.lost_at > 0 else None
        self.event(rep, "resumed", commit_step=int(commit_step), lost_steps=self.lost_steps,
                   regroup_ms=ms, peer=-1)


def _write_atomic(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def optimizer_state(opt, rank):
    """The optimizer's full state on rank 0 (None elsewhere): ZeroRedundancyOptimizer
    gathers its shards there first, which every rank must call."""
    if hasattr(opt, "consolidate_state_dict"):
        opt.consolidate_state_dict(to=0)
    return opt.state_dict() if rank == 0 else None
