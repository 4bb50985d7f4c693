#!/usr/bin/env python3
"""ddpb_hvd_driver: the launcher of an elastic horovod run (issue 32): Horovod's own
elastic driver (horovod.runner's ElasticDriver through gloo_run.launch_gloo_elastic, what
`horovodrun --host-discovery-script ... --min-np --max-np` runs), started by the daemon as
the run's one launcher process (daemon/monitor.c, like mpirun), with the daemon as its host
discovery. Each worker it starts is engines/ddpb_launch.py, which reports over the run's
report channel (DDPB_REPORT) under its SLOT and execs engine_horovod.py.

Decisions:
- One Horovod host per slot: the discovery file the daemon writes (DDPB_ELASTIC_DIR/hosts,
  a slot per line) becomes hosts "ddpb-slot-<k>" with one slot each. Horovod blacklists a
  HOST whose worker failed, and fails the job when every host it used is blacklisted: with
  all ranks on one host ("localhost:2") the first lost worker would end the run. A host per
  slot blacklists only the lost slot, and slot identity survives Horovod's re-ranking: the
  worker's DDPB_RANK is the slot its host names, whatever hvd.rank() it gets.
- Those hosts resolve nowhere, so horovodrun's own exec (ssh unless the name resolves to a
  local address) is replaced by exec_command here: every worker runs on this node, as
  Horovod's local exec would (safe_shell_exec, its process group, killed with the driver's
  events). Hence one node only (the daemon refuses ranks placed on followers).
- Replacements: a blacklisted host comes back after Horovod's cooldown (cooldown_range,
  here the smallest Horovod allows, 1 s) if the discovery still lists it; the daemon lists
  a lost slot only while fewer than max_ranks live, so max_ranks decides, not Horovod.
- The workers' interface is the one holding DDPB_HOST (loopback on one node); Horovod's
  common-interface probe (it starts a task service per host over ssh) is skipped."""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from horovod.runner.common.util import safe_shell_exec, secret, timeout  # noqa: E402
from horovod.runner.elastic import settings as elastic_settings  # noqa: E402
from horovod.runner.elastic.discovery import HostDiscovery  # noqa: E402
from horovod.runner.gloo_run import launch_gloo_elastic  # noqa: E402
from horovod.runner.http.http_server import RendezvousServer  # noqa: E402

HOST = "ddpb-slot-"
COOLDOWN_S = (1, 1)


class DaemonDiscovery(HostDiscovery):
    """The hosts the daemon's discovery file lists (a slot per line), one slot each."""

    def __init__(self, path):
        super().__init__()
        self.path = path

    def find_available_hosts_and_slots(self):
        try:
            with open(self.path) as f:
                slots = [int(s) for s in f.read().split() if s.strip().isdigit()]
        except FileNotFoundError:
            slots = []
        return {f"{HOST}{s}": 1 for s in slots}


def slot_of(hostname):
    """The slot a worker's host names."""
    if not hostname.startswith(HOST):
        raise ValueError(f"host {hostname!r} is not one of the daemon's slots")
    return int(hostname[len(HOST):])


def exec_command(command, slot_info, events):
    """Runs one worker on this node as its slot (see the module's decisions); returns
    (exit code, time), what Horovod's exec returns."""
    slot = slot_of(slot_info.hostname)
    if not command.startswith("env "):
        raise ValueError("Horovod's worker command does not start with env")
    command = f"env DDPB_RANK={slot} DDPB_LOCAL_RANK=0 " + command[len("env "):]
    try:
        code = safe_shell_exec.execute(command, index=slot, events=events)
    except Exception as ex:  # what horovodrun's exec does: the worker failed
        print(f"slot {slot}: could not run its worker: {ex}", file=sys.stderr, flush=True)
        code = 1
    if code != 0:
        print(f"slot {slot}: its worker exited with {code}", file=sys.stderr, flush=True)
    return code, time.time()


def iface_of(addr):
    import psutil
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == addr for a in addrs):
            return name
    raise ValueError(f"no network interface has the address {addr} (DDPB_HOST)")


def main():
    env = dict(os.environ, PYTHONFAULTHANDLER="1")  # a worker's crash leaves its stack
    with open(env["DDPB_SPEC"]) as f:
        spec = json.load(f)
    el = spec["elastic"]
    slots = int(env["DDPB_WORLD_SIZE"])
    run_s = int(spec.get("timeout_s", 600))
    settings = elastic_settings.ElasticSettings(
        discovery=DaemonDiscovery(os.path.join(env["DDPB_ELASTIC_DIR"], "hosts")),
        min_num_proc=int(el["min_ranks"]), max_num_proc=slots, elastic_timeout=run_s,
        reset_limit=None, cooldown_range=COOLDOWN_S, num_proc=slots, verbose=0,
        key=secret.make_secret_key(), nics=None, output_filename=None, run_func_mode=False,
        start_timeout=timeout.Timeout(run_s, message="Timed out waiting for {activity}."))
    nic = iface_of(env.get("DDPB_HOST", "127.0.0.1"))
    command = [sys.executable, os.path.join(HERE, "ddpb_launch.py")]
    launch_gloo_elastic(command, exec_command, settings, env, lambda driver: [nic],
                        RendezvousServer(0), sys.executable)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as ex:  # the daemon shows the launcher log's last line
        print(f"ddpb_hvd_driver: {type(ex).__name__}: {ex}", file=sys.stderr, flush=True)
        sys.exit(1)
