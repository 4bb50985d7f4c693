#!/usr/bin/env python3
"""Include layering check (meson test suite 'lint'; by hand: tests/lint/check_layers.py).

Reads every #include "..." of the C and CUDA files under common/ api/ daemon/ worker/ cli/
(includes are root-qualified: "worker/comm/comm.h") and fails on an arrow that runs against
the layers of docs/design.md section 3, or on a cycle between folders:

  common/     includes only common/
  api/        common/, daemon/, api/
  daemon/     common/, daemon/
  cli/        common/, cli/
  worker/**   common/ and worker/**, except that
                worker/nn/**   never includes worker/comm/**, worker/ddp/**, worker/data/**
                worker/comm/** never includes worker/nn/**, worker/ddp/**, worker/data/**
                a subfolder of worker/ never includes a file directly in worker/
  nothing outside worker/ includes worker/ (a daemon must not link training code)

Each program's main.c (daemon/main.c, worker/main.c, cli/main.c) is its composition root and
may include any layer its program links (not another program's). The build root's
ddpb_config.h may be included from anywhere; any other quoted include must name a file of
the tree from the root. A cycle is checked between folders (the folder of each file), over
every arrow but the composition roots'.

Decision: an arrow the lead has accepted for now goes in ALLOWED with a comment saying
why and when it goes; it is still printed, as "allowed", so it stays visible.
Each case is a line "ok NAME" / "not ok NAME"; the last line is
"TEST-SUMMARY passed=P failed=F".
"""
import os
import re
import sys

ROOTS = ("common", "api", "daemon", "worker", "cli")
SOURCES = (".c", ".h", ".cu", ".cuh")
BUILD_HEADERS = {"ddpb_config.h"}  # generated in the build root (meson.build)
COMPOSITION_ROOTS = {"daemon/main.c", "worker/main.c", "cli/main.c"}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')

# (file, included file): arrows that break a rule and are accepted until a named change.
ALLOWED = set()  # (file, include) pairs; empty: every arrow in the tree follows the rules

# folder -> top-level folders it may include (besides itself, and worker's special rules)
TOP_ALLOWED = {
    "common": {"common"},
    "api": {"common", "daemon", "api"},
    "daemon": {"common", "daemon"},
    "cli": {"common", "cli"},
    "worker": {"common", "worker"},
}
# what a composition root may include: the layers its program links
MAIN_ALLOWED = {
    "daemon/main.c": {"common", "api", "daemon"},
    "worker/main.c": {"common", "worker"},
    "cli/main.c": {"common", "cli"},
}
# worker subtrees that must not see each other (the engine, the transport, the data, DDP)
WORKER_FORBIDDEN = {
    "worker/nn": ("worker/comm", "worker/ddp", "worker/data"),
    "worker/comm": ("worker/nn", "worker/ddp", "worker/data"),
}


def under(path, folder):
    return path == folder or path.startswith(folder + "/")


def top(path):
    return path.split("/", 1)[0]


def source_files(root):
    for base in ROOTS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, base)):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith(SOURCES):
                    yield os.path.relpath(os.path.join(dirpath, name), root)


def includes(root, path):
    """(line number, included path) for each #include "..." of path."""
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield n, m.group(1)


def rule_broken(src, dst):
    """Why the arrow src -> dst (both root-relative) breaks a rule, or None."""
    if src in COMPOSITION_ROOTS:
        if top(dst) not in MAIN_ALLOWED[src]:
            return f"{src} is {top(src)}'s composition root: it may not include {top(dst)}/"
        return None
    if top(dst) not in TOP_ALLOWED[top(src)]:
        return f"{top(src)}/ may not include {top(dst)}/"
    for folder, forbidden in WORKER_FORBIDDEN.items():
        if under(src, folder):
            for f in forbidden:
                if under(dst, f):
                    return f"{folder}/ may not include {f}/"
    src_dir, dst_dir = os.path.dirname(src), os.path.dirname(dst)
    if under(src_dir, "worker") and src_dir != "worker" and dst_dir == "worker":
        return "a subfolder of worker/ may not include a file directly in worker/ (its parent)"
    return None


def find_cycles(edges):
    """Strongly connected components of more than one folder (Tarjan), each sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    nodes = sorted(set(edges) | {d for ds in edges.values() for d in ds})

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in nodes:
        if v not in index:
            visit(v)
    return out


def shortest_cycle(edges, comp):
    """One shortest cycle through comp[0] inside comp, as a folder list ending where it
    starts (breadth-first)."""
    start, members = comp[0], set(comp)
    prev, queue = {}, [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(edges.get(v, ())):
            if w not in members or w in prev:
                continue
            prev[w] = v
            if w == start:
                path = [start]
                while True:
                    path.append(prev[path[-1]])
                    if path[-1] == start:
                        return path[::-1]
            queue.append(w)
    return [start, start]  # not reached: comp is strongly connected


def main(root):
    unresolved, broken, allowed_seen = [], [], []
    edges = {}  # folder -> folders it includes, with one example arrow each
    examples = {}
    for src in source_files(root):
        for line, dst in includes(root, src):
            where = f"{src}:{line}: #include \"{dst}\""
            if dst in BUILD_HEADERS:
                continue
            if not os.path.isfile(os.path.join(root, dst)) or top(dst) not in ROOTS:
                unresolved.append(f"{where}: not a file of common/ api/ daemon/ worker/ cli/ "
                                  "named from the repository root")
                continue
            why = rule_broken(src, dst)
            if why and (src, dst) in ALLOWED:
                allowed_seen.append(f"{where}: allowed for now: {why}")
            elif why:
                broken.append(f"{where}: {why}")
            a, b = os.path.dirname(src), os.path.dirname(dst)
            if src not in COMPOSITION_ROOTS and a != b:
                edges.setdefault(a, set()).add(b)
                examples.setdefault((a, b), where)
    cycles = []
    for comp in find_cycles(edges):
        path = shortest_cycle(edges, comp)
        cycles.append("cycle between " + ", ".join(f + "/" for f in comp) + ", e.g.:\n      "
                      + "\n      ".join(examples[(a, b)] for a, b in zip(path, path[1:])))
    stale = sorted(f"{s} -> {d}: ALLOWED entry no longer needed, delete it"
                   for s, d in ALLOWED
                   if not any(x.startswith(f"{s}:") and f'"{d}"' in x for x in allowed_seen))

    for line in allowed_seen:
        print("note: " + line)
    cases = [("root-qualified-includes", unresolved), ("layer-arrows", broken + stale),
             ("no-folder-cycles", cycles)]
    passed = failed = 0
    for name, problems in cases:
        print(("not ok " if problems else "ok ") + name)
        for p in problems:
            print("    " + p)
        failed += bool(problems)
        passed += not problems
    print(f"TEST-SUMMARY passed={passed} failed={failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(here))))
