#!/usr/bin/env python3
"""Adds up the test results of every build tree into "N passed, N failed, N skipped",
and makes sure that number means what it says.

    tests/summarize.py BUILD_DIR:SUITE:LOG [BUILD_DIR:SUITE:LOG ...]

For each tree it asks meson which tests the build declares in SUITE (`meson introspect
--tests`) and reads what ran from LOG (meson's testlog JSON). Each test binary or script
prints "TEST-SUMMARY passed=P failed=F skipped=S" as its last summary line (skipped=
absent counts 0) and a line "skip CASE: reason" for each skipped case.

Decisions:
- A declared test that has no result in the log (it was not run), a test that printed no
  summary (it crashed, timed out or failed to start), a test that exited non-zero with
  no failed case, and a missing log (a suite that did not run) each count as one failed
  case: nothing disappears silently.
- A skipped case is allowed only when it is in ALLOWED_SKIPS with a matching reason;
  everything the suite needs is installed by the test command, so any other skip is a
  failure here (it would otherwise read as "fine" in a count nobody looks at).
"""
import json
import re
import subprocess
import sys

SUMMARY = re.compile(r"TEST-SUMMARY passed=(\d+) failed=(\d+)(?: skipped=(\d+))?")
SKIP_LINE = re.compile(r"^skip (\S+): (.*)$", re.M)

# (suite, test, case or "*", reason): what may skip, and only for that reason; a reason
# is a prefix (str) or a pattern the whole reason must match (re.Pattern).
ALLOWED_SKIPS = [
    # the GPU suite compiles everywhere and runs on a machine with a CUDA device
    ("gpu", "*", "*", "no CUDA device"),
    # one GPU per rank (NCCL cannot run several ranks on one GPU): a multi-rank GPU case
    # on a machine with fewer GPUs than ranks (tests/gpu/gpu_test.h GPU_TEST_NEED_GPUS)
    ("gpu", "*", "*", re.compile(r"needs (?:[2-9]|[1-9]\d+) GPUs, found \d+")),
    # discovery is tested against the CUDA toolkit's own files, which a machine without
    # nvcc does not have (the bundle test needs none and always runs)
    ("packaging", "test_gpu_libs", "*", "no CUDA toolkit"),
    # a build without CUDA (or NCCL) makes no GPU module to delete or break; the missing
    # CUDA engine is still tested there (tests/integration/test_modules.py)
    ("integration", "test_modules", "*", "no CUDA toolkit"),
    # NVML ships with the NVIDIA driver, which a machine without a GPU does not have
    # (gpu_host runs in build-san's unit suite and in build/'s unit-cuda suite)
    ("unit", "gpu_host", "test_nvml_default_library", "NVML unavailable"),
    ("unit-cuda", "gpu_host", "test_nvml_default_library", "NVML unavailable"),
]


def reason_matches(want, reason):
    if isinstance(want, re.Pattern):
        return want.fullmatch(reason) is not None
    return reason.startswith(want)


def allowed(suite, test, case, reason):
    return any(s == suite and t in ("*", test) and c in ("*", case) and
               reason_matches(r, reason) for s, t, c, r in ALLOWED_SKIPS)


def declared(build, suite):
    """Names of the tests build declares in suite (None when meson cannot say)."""
    try:
        out = subprocess.run(["meson", "introspect", build, "--tests"], capture_output=True,
                             text=True, timeout=120, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {t["name"] for t in json.loads(out) if suite in t.get("suite", []) or
            any(s.endswith(":" + suite) for s in t.get("suite", []))}


def read_log(path):
    try:
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except OSError:
        return None


def short_name(t):
    """"ddpbench:unit / buf" (the log's name) -> "buf" (introspect's)."""
    return t.get("name", "?").split(" / ")[-1]


def tally_test(suite, t, counts, problems):
    name = short_name(t)
    out = (t.get("stdout") or "") + "\n" + (t.get("stderr") or "")
    found = SUMMARY.findall(out)
    result = t.get("result")
    if not found or result not in ("OK", "FAIL", "EXPECTEDFAIL"):
        counts["failed"] += 1
        problems.append(f"{name}: {result} without a summary")
        return
    p, f, s = (int(x or 0) for x in found[-1])
    counts["passed"] += p
    counts["failed"] += f
    counts["skipped"] += s
    if result != "OK" and f == 0:
        counts["failed"] += 1
        problems.append(f"{name}: exited non-zero with no failed case")
    elif f:
        problems.append(f"{name}: {f} failed case(s)")
    skips = SKIP_LINE.findall(out)
    if len(skips) != s:
        counts["failed"] += 1
        problems.append(f"{name}: {s} skipped but {len(skips)} skip lines")
    for case, reason in skips:
        if allowed(suite, name, case, reason):
            problems.append(f"{name}: {case} skipped (allowed): {reason}")
        else:
            counts["failed"] += 1
            problems.append(f"{name}: {case} skipped, which is not allowed: {reason}")


def main(specs):
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    problems = []
    for spec in specs:
        build, suite, log = spec.split(":", 2)
        lines = read_log(log)
        if lines is None:
            counts["failed"] += 1
            problems.append(f"{log}: missing (suite {suite} did not run)")
            continue
        ran = set()
        for t in lines:
            ran.add(short_name(t))
            tally_test(suite, t, counts, problems)
        want = declared(build, suite)
        if want is None:
            counts["failed"] += 1
            problems.append(f"{build}: meson cannot list the declared tests")
            continue
        for name in sorted(want - ran):
            counts["failed"] += 1
            problems.append(f"{build} {suite}/{name}: declared but did not run")
    for p in problems:
        print("  " + p)
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
