#!/usr/bin/env python3
"""Self-test of check_layers.py's file-loop check (meson suite 'lint'; by hand:
tests/lint/test_check_layers.py). Builds small trees in a temporary folder and checks that
each loop the check promises to find fails "no-file-cycles" with its path, and that what
is not a loop passes.

Decision: the trees are written here, not kept as fixture folders, so each case reads as
the files it holds; the check runs on them through its main(), as the lint suite runs it.
Each case is a line "ok NAME" / "not ok NAME"; the last line is
"TEST-SUMMARY passed=P failed=F"."""
import contextlib
import io
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layers  # noqa: E402

HEADER = "#ifndef G_{0}\n#define G_{0}\n{1}\n#endif\n"


def run(files, allowed=None):
    """check_layers' exit status and output on a tree of files (path -> text), with
    ALLOWED_CYCLES set to allowed (none by default) for the call."""
    saved = dict(check_layers.ALLOWED_CYCLES)
    check_layers.ALLOWED_CYCLES.clear()
    check_layers.ALLOWED_CYCLES.update(allowed or {})
    try:
        return run_tree(files)
    finally:
        check_layers.ALLOWED_CYCLES.clear()
        check_layers.ALLOWED_CYCLES.update(saved)


def run_tree(files):
    with tempfile.TemporaryDirectory() as root:
        for path, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = check_layers.main(root)
        return rc, out.getvalue()


def header(name, body):
    return HEADER.format(name.upper(), body)


# a.c calls b.c, and b.c includes a.h: a loop through an include and a call
INCLUDE_LOOP = {
    "common/a.h": header("a", "int a_one(void);"),
    "common/a.c": '#include "common/a.h"\n#include "common/b.h"\n'
                  "int a_one(void) { return b_two(); }\n",
    "common/b.h": header("b", "int b_two(void);"),
    "common/b.c": '#include "common/b.h"\n#include "common/a.h"\n'
                  "int b_two(void) { return 2; }\n",
}
# no include between them, but each declares the other's function by hand and calls it
EXTERN_LOOP = {
    "common/a.c": "int b_two(void);\nint a_one(void);\n"
                  "int a_one(void) { return b_two(); }\n",
    "common/b.c": "int a_one(void);\nint b_two(void);\n"
                  "int b_two(void) { return a_one() + 1; }\n",
}
# a table (t.c) calls two parts through their shared header; the parts include the header
# but never call the table: no loop
SHARED_HEADER = {
    "common/parts.h": header("parts", "int p_one(void);\nint p_two(void);"),
    "common/p1.c": '#include "common/parts.h"\nint p_one(void) { return 1; }\n',
    "common/p2.c": '#include "common/parts.h"\nint p_two(void) { return 2; }\n',
    "common/t.h": header("t", "int t_sum(void);"),
    "common/t.c": '#include "common/t.h"\n#include "common/parts.h"\n'
                  "int t_sum(void) { return p_one() + p_two(); }\n",
}
# x_internal.h is x's own: x.c including it, and it including x.h, is no loop
PRIVATE_HEADER = {
    "common/x.h": header("x", "int x_run(void);"),
    "common/x_internal.h": header("x_internal", '#include "common/x.h"\nint x_step(void);'),
    "common/x.c": '#include "common/x.h"\n#include "common/x_internal.h"\n'
                  "int x_step(void) { return 1; }\nint x_run(void) { return x_step(); }\n",
}
# the same include loop, accepted in ALLOWED_CYCLES: printed as allowed, passes
ALLOWED = frozenset({"common/a", "common/b"})


def case_include_loop():
    rc, out = run(INCLUDE_LOOP)
    return (rc == 1 and "not ok no-file-cycles" in out and "loop among 2: common/a, common/b"
            in out and 'common/a.c:2: #include "common/b.h"' in out
            and 'common/b.c:2: #include "common/a.h"' in out)


def case_extern_loop():
    rc, out = run(EXTERN_LOOP)
    return rc == 1 and "uses a_one (defined in common/a)" in out and \
        "uses b_two (defined in common/b)" in out


def case_shared_header_no_loop():
    rc, out = run(SHARED_HEADER)
    return rc == 0 and "ok no-file-cycles" in out and "loop" not in out


def case_private_header_no_loop():
    rc, out = run(PRIVATE_HEADER)
    return rc == 0 and "ok no-file-cycles" in out


def case_allowed_loop_printed():
    rc, out = run(INCLUDE_LOOP, {ALLOWED: "a test's reason"})
    return rc == 0 and "allowed for now: a test's reason" in out and "ok no-file-cycles" in out


def case_stale_allowed_fails():
    rc, out = run(SHARED_HEADER, {ALLOWED: "a test's reason"})
    return rc == 1 and "ALLOWED_CYCLES entry no longer needed" in out


def main():
    cases = [(name[5:], fn) for name, fn in globals().items() if name.startswith("case_")]
    failed = 0
    for name, fn in cases:
        ok = fn()
        print(("ok " if ok else "not ok ") + name)
        failed += not ok
    print(f"TEST-SUMMARY passed={len(cases) - failed} failed={failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
