#!/usr/bin/env python3
"""Runs one libFuzzer target for a bounded time over its committed corpus, as a test.

New inputs the fuzzer finds go to a temporary directory, so the committed corpus only
changes when someone copies a finding in on purpose. A crash, leak or timeout fails the
case and leaves the reproducer (crash-*) in the build directory; the summary line is the
harness's "TEST-SUMMARY passed=P failed=F".
Usage: run_fuzzer.py FUZZER CORPUS_DIR SECONDS
"""
import os
import subprocess
import sys
import tempfile


def main(fuzzer, corpus, seconds):
    with tempfile.TemporaryDirectory(prefix="ddpb-fuzz-") as fresh:
        args = [fuzzer, f"-max_total_time={seconds}", "-timeout=10", "-rss_limit_mb=2048",
                f"-artifact_prefix={os.getcwd()}/", fresh, corpus]
        r = subprocess.run(args, capture_output=True, text=True)
        tail = "\n".join(r.stderr.splitlines()[-15:])
        print(tail)
        ok = r.returncode == 0
        print(f"{'ok' if ok else 'not ok'} {os.path.basename(fuzzer)} ({seconds}s over {corpus})")
        print(f"TEST-SUMMARY passed={int(ok)} failed={int(not ok)}")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
