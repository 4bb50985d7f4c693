#!/usr/bin/env python3
"""Print the ninja targets one test suite of a build tree needs, one a line.

tests/run.sh builds build-tsan/ only to run suite 'tsan' (19 of its ~80 test binaries);
`ninja` with no target would also build every other test, program and benchmark under
ThreadSanitizer for nothing (the programs are compiled, with -Werror, in build/; in
build-san/ the unit suite needs all but 16 of ~340 edges, 7 s, so it builds the lot). The
decision here: build what meson's own record says the suite runs, and nothing guessed.
That is each test's program and arguments (comm_mpi's program under mpirun), what it
depends on, every file of the build tree its environment names (DDPB_WORKER_BIN:
worker_e2e spawns the worker; DDPB_PROBE_BIN, DDPB_FAKE_NVML), and every shared module
of the tree, because the worker dlopens its modules (ddpb_train.so, the MPI ones) from
beside itself and no test's record names them. A test added to a suite is picked up
with no edit here.

usage: suite_targets.py BUILD_DIR SUITE
"""
import json
import os
import subprocess
import sys


def introspect(build, what):
    out = subprocess.check_output(["meson", "introspect", build, what])
    return json.loads(out)


def suite_files(tests, suite, targets):
    """The build outputs the suite's tests run, take as an argument, declare in depends:
    or name in their environment; None when the suite has no test here."""
    outputs = {f for t in targets for f in t["filename"]}
    by_id = {t["id"]: t["filename"] for t in targets}
    want, found = set(), False
    for test in tests:
        if not any(s == suite or s.endswith(":" + suite) for s in test["suite"]):
            continue
        found = True
        for path in test["cmd"] + list(test["env"].values()):
            if path in outputs:
                want.add(path)
        for dep in test["depends"]:
            want.update(by_id.get(dep, []))
    return want if found else None


def main(argv):
    if len(argv) != 3:
        sys.exit("usage: suite_targets.py BUILD_DIR SUITE")
    build, suite = argv[1], argv[2]
    targets = introspect(build, "--targets")
    want = suite_files(introspect(build, "--tests"), suite, targets)
    if want is None:
        sys.exit(f"suite_targets.py: suite '{suite}' has no tests in {build}")
    for t in targets:
        if t["type"] == "shared module":
            want.update(t["filename"])
    root = os.path.abspath(build)
    for path in sorted(want):
        print(os.path.relpath(path, root))


if __name__ == "__main__":
    main(sys.argv)
