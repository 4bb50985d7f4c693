#!/usr/bin/env python3
"""The results columns and step phases have one source, common/columns.h, exported to
schema/columns.json (tests/test_columns keeps that file current). This check fails when a
Python or JS copy drifts from it or comes back:

- engines/ddpb_report.py's STEP_PHASES are the exported phases, in order, and step_ms;
- common/columns.h's PHASES rows are the exported phases (a row added without
  regenerating the file is caught here too, before a build);
- no file under web/js spells a list of the phase keys (three or more of them as string
  literals in one file): the dashboard reads the results reply's phases and column_info.
  (The engines name phases as the report fields they fill, which is no list: they check
  them against ddpb_report.STEP_PHASES when they report.)
Run by hand: tests/lint/check_columns.py [SOURCE_DIR]."""
import json
import os
import re
import sys

SOURCE = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")


def check_c(keys):
    """common/columns.h's PHASES rows are the exported phases."""
    header = open(os.path.join(SOURCE, "common", "columns.h"), encoding="utf-8").read()
    in_c = [m.group(1) + "_ms" for m in re.finditer(r"X\(\w+, (\w+), \"", header)]
    if in_c != keys:
        return [f"common/columns.h's PHASES {in_c} are not schema/columns.json's "
                f"{keys}: regenerate with <build>/tests/test_columns --write-schema ."]
    return []


def check_python(keys):
    """engines/ddpb_report.py's STEP_PHASES are the exported phases and step_ms."""
    sys.path.insert(0, os.path.join(SOURCE, "engines"))
    import ddpb_report  # noqa: E402
    if list(ddpb_report.STEP_PHASES) != keys + ["step_ms"]:
        return [f"engines/ddpb_report.py STEP_PHASES {ddpb_report.STEP_PHASES} "
                f"differ from {keys} + step_ms"]
    return []


def check_js(keys):
    """No file under web/js spells a list of the phase keys."""
    problems = []
    for root, _, files in os.walk(os.path.join(SOURCE, "web", "js")):
        for name in sorted(files):
            if not name.endswith(".js"):
                continue
            path = os.path.join(root, name)
            text = open(path, encoding="utf-8").read()
            spelled = [k for k in keys if re.search(r"""['"]%s['"]""" % k, text)]
            if len(spelled) >= 3:
                problems.append(f"{os.path.relpath(path, SOURCE)} spells the phases "
                                f"{spelled}: read them from column_info/phases or "
                                f"schema/columns.json")
    return problems


def main():
    """One case a check, each "ok NAME" or "not ok NAME" with its problems, then the
    TEST-SUMMARY line every test of the tree ends with (tests/summarize.py reads it)."""
    with open(os.path.join(SOURCE, "schema", "columns.json"), encoding="utf-8") as f:
        exported = json.load(f)
    keys = [p["key"] for p in exported["phases"]]
    passed = failed = 0
    for name, check in (("c-phases", check_c), ("python-phases", check_python),
                        ("js-no-phase-list", check_js)):
        problems = check(keys)
        print(("not ok " if problems else "ok ") + name)
        for p in problems:
            print("    " + p)
        passed, failed = passed + (not problems), failed + bool(problems)
    print(f"TEST-SUMMARY passed={passed} failed={failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
