#!/usr/bin/env python3
"""Every launcher gives a run the same figures and the same supervision (issue 29):
ddpbench's own fork/exec, and mpirun with OpenMPI and with MPICH, each through the checks
of launcher_checks.py (a checked collective; steps, epochs, memory, env and trace of a
training run; a killed rank failing the run naming it; cancel; a frozen rank caught by its
heartbeat; the run's timeout; nothing left behind after any of them). srun's turn is in
test_slurm.py, inside a real Slurm allocation. Also the refusals: srun outside an
allocation and mpirun across nodes without --mpi-agent (409 naming launcher; with one,
test_netlab.py runs it across hosts), backend mpi without an MPI
launcher (400), and a launcher program that cannot start."""
import os
import sys

import launcher_checks
from harness import Daemon, check, run_cases

LAUNCHERS = (("ddpbench", {}),
             ("mpirun_openmpi", {"launcher": "mpirun", "mpi": "openmpi"}),
             ("mpirun_mpich", {"launcher": "mpirun", "mpi": "mpich"}))


def make_case(name, fields, check_fn):
    def case():
        d = Daemon(cpu_slots=2)
        try:
            check_fn(d, fields)
        finally:
            d.close()
    case.__name__ = f"test_{name}_{check_fn.__name__[len('check_'):]}"
    return case


def test_refusals():
    d = Daemon(cpu_slots=2)
    try:
        base = {"workload": "collective", "world_size": 2}
        status, body, _ = d.request("POST", "/v1/experiments", body=dict(base, launcher="srun"))
        check(status == 409 and body["error"]["field"] == "launcher" and
              "Slurm allocation" in body["error"]["message"], (status, body))
        status, body, _ = d.request("POST", "/v1/experiments",
                                    body=dict(base, launcher="mpirun", nodes=2))
        check(status == 409 and body["error"]["field"] == "launcher" and
              "--mpi-agent" in body["error"]["message"], (status, body))  # none given here
        status, body, _ = d.request("POST", "/v1/experiments", body=dict(base, backend="mpi"))
        check(status == 400 and body["error"]["field"] == "launcher", (status, body))
    finally:
        d.close()


def test_launcher_that_cannot_start():
    """No mpirun on the daemon's PATH: the run fails at once naming the launcher."""
    env = dict(os.environ, PATH="/nonexistent")
    d = Daemon(cpu_slots=2, env=env)
    try:
        run = d.run_fails({"workload": "collective", "world_size": 2, "launcher": "mpirun"},
                          "could not start the run's launcher (mpirun)", timeout=30)
        check("mpirun.openmpi" in run["error"], run["error"])
        d.wait_slots_free(2)
    finally:
        d.close()


CASES = [make_case(name, fields, fn) for name, fields in LAUNCHERS
         for fn in launcher_checks.CHECKS] + [test_refusals, test_launcher_that_cannot_start]

if __name__ == "__main__":
    sys.exit(run_cases(CASES))
