#!/usr/bin/env python3
"""Citation check (meson test suite 'lint'; by hand: tests/lint/check_citations.py [ROOT]).

The design lives in the repository (docs/design.md). The founding design document sat
outside it, beside the checkout, where a user who clones the project does not have it. This
check fails on any tracked file that still cites that document: a path into the folder
beside the checkout, or the founding file's name.

Decision: the patterns are assembled from pieces, so this file does not match itself.
Tracked files come from `git ls-files`. Without git (an unpacked tarball) every file under
the root is read instead, skipping build trees, the venv and .git.
Each case is a line "ok NAME" / "not ok NAME"; the last line is
"TEST-SUMMARY passed=P failed=F".
"""
import os
import re
import subprocess
import sys

SHARED = "shared"
# the folder beside the checkout, and the founding file's name (upper case: docs/design.md,
# the design as built, is lower case)
PATTERNS = (re.compile(re.escape("../" + SHARED)),
            re.compile(re.escape(SHARED + "/") + "DESIGN" + re.escape(".md")),
            re.compile(r"(?<![\w/.-])" + "DESIGN" + re.escape(".md")))
SKIP_DIRS = {".git", ".venv", "node_modules", "__pycache__"}


def tracked_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], check=True,
                             capture_output=True).stdout
        return [p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames
                                 if d not in SKIP_DIRS and not d.startswith("build"))
            files += [os.path.relpath(os.path.join(dirpath, f), root) for f in sorted(filenames)]
        return files


def citations(text):
    """(line number, line) of every line that cites the founding design."""
    hits = []
    for n, line in enumerate(text.splitlines(), 1):
        if any(p.search(line) for p in PATTERNS):
            hits.append((n, line.strip()))
    return hits


def self_test():
    """The patterns find what they must and leave the design as built alone."""
    bad = ["see ../" + SHARED + "/DESIGN.md", "(" + "DESIGN" + ".md §3)",
           SHARED + "/" + "DESIGN" + ".md section 5", "`" + "DESIGN" + ".md`"]
    good = ["docs/design.md §10", "shared memory between ranks", "a shared library",
            "tests/bench/RESULTS.md", "MY" + "DESIGN" + ".md"]
    return all(citations(s) for s in bad) and not any(citations(s) for s in good)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__),
                                                              "..", "..")
    root = os.path.abspath(root)
    passed = failed = 0
    if self_test():
        print("ok patterns")
        passed += 1
    else:
        print("not ok patterns: the citation patterns miss a citation or flag a non-citation")
        failed += 1
    found = []
    for rel in tracked_files(root):
        path = os.path.join(root, rel)
        if not os.path.isfile(path) or os.path.islink(path):
            continue
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        found += [(rel, n, line) for n, line in citations(text)]
    if found:
        for rel, n, line in found:
            print(f"# {rel}:{n}: {line[:160]}")
        print(f"not ok no-founding-design: {len(found)} line(s) cite the design outside the "
              "repository; cite docs/design.md (its section) instead")
        failed += 1
    else:
        print("ok no-founding-design")
        passed += 1
    print(f"TEST-SUMMARY passed={passed} failed={failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
