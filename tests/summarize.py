#!/usr/bin/env python3
"""Adds up test results from meson's testlog.json files into "N passed, N failed".

Each test binary or script prints "TEST-SUMMARY passed=P failed=F" as its last summary
line; its cases are counted. A test that printed no summary (it crashed, timed out or
failed to start) counts as one failed case whatever it printed; a missing log file (a
suite that did not run) counts as one failed case too, so nothing is silently skipped.
"""
import json
import re
import sys

SUMMARY = re.compile(r"TEST-SUMMARY passed=(\d+) failed=(\d+)")


def main(paths):
    passed = failed = 0
    broken = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                lines = [json.loads(l) for l in f if l.strip()]
        except OSError:
            broken.append(f"{path}: missing (suite did not run)")
            failed += 1
            continue
        for t in lines:
            name = t.get("name", "?")
            out = (t.get("stdout") or "") + "\n" + (t.get("stderr") or "")
            found = SUMMARY.findall(out)
            result = t.get("result")
            if found and result in ("OK", "FAIL", "EXPECTEDFAIL"):
                p, f = map(int, found[-1])
                passed += p
                failed += f
                if result != "OK" and f == 0:
                    failed += 1
                    broken.append(f"{name}: exited non-zero with no failed case")
                elif f:
                    broken.append(f"{name}: {f} failed case(s)")
            elif result == "SKIP":
                broken.append(f"{name}: skipped")
            else:
                failed += 1
                broken.append(f"{name}: {result} without a summary")
    for b in broken:
        print("  " + b)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
