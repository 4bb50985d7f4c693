#!/usr/bin/env python3
"""Include layering check (meson test suite 'lint'; by hand: tests/lint/check_layers.py).

Reads every #include "..." of the C and CUDA files under common/ api/ daemon/ worker/ cli/
(includes are root-qualified: "worker/comm/comm.h") and fails on an arrow that runs against
the layers of docs/design.md section 3, or on a cycle between folders:

  common/     includes only common/
  api/        common/, daemon/, api/
  daemon/     common/, daemon/
  cli/        common/, cli/
  fs/         common/, fs/, worker/ (ddpbench-fs serves worker/data/storage.c's profiles)
  worker/**   common/ and worker/**, except that
                worker/nn/**   never includes worker/comm/**, worker/ddp/**, worker/data/**
                worker/comm/** never includes worker/nn/**, worker/ddp/**, worker/data/**
                a subfolder of worker/ never includes a file directly in worker/
  nothing outside worker/ and fs/ includes worker/ (a daemon must not link training code)

Each program's main.c (daemon/main.c, worker/main.c, cli/main.c) is its composition root and
may include any layer its program links (not another program's). The build root's
ddpb_config.h may be included from anywhere; any other quoted include must name a file of
the tree from the root. A cycle is checked between folders (the folder of each file), over
every arrow but the composition roots'.

No loops between files either ("no-file-cycles"). A module is the files of one folder that
share a stem (x.c, x.h, x.cu, x.cuh), plus x_internal.h, x's private header (what x.c gives
the other files of its folder, not the rest of the tree). Any other header with no source
of its own (api/handlers.h, worker/nn/layers.h, worker/data/formats.h) is a node of its
own: an interface several files implement, or a set of types, read alone. An arrow runs
from module A to B when a file of A includes a file of B, or when code of A (a function
body, an initializer, a macro body) names a function or variable that B defines and
exports. The second kind catches a call whose declaration sits in a header of neither side,
or is written `extern` by hand; a prototype is a declaration, not a use, so a shared header
does not tie together the files that implement it. Every strongly connected set of modules
is a loop, and fails with its members and one shortest path through it, arrow by arrow.
Why: a file in a loop cannot be read, tested or replaced without every other file of the
loop. The fix is to split what the members share from what dispatches: the core the parts
use apart from the table that opens them (worker/data/data.c and dataset.c), or callbacks
taken by pointer (daemon/store/state.h's hooks). The scan is lexical (comments and strings
blanked, braces counted), not a compiler's: a name is matched, so a local variable named
like another file's exported function would count as a use.

Decision: an arrow the lead has accepted for now goes in ALLOWED with a comment saying
why and when it goes, and a loop likewise in ALLOWED_CYCLES; either is still printed, as
"allowed", so it stays visible.
Each case is a line "ok NAME" / "not ok NAME"; the last line is
"TEST-SUMMARY passed=P failed=F".
"""
import os
import re
import sys

ROOTS = ("common", "api", "daemon", "worker", "cli", "fs")
SOURCES = (".c", ".h", ".cu", ".cuh")
BUILD_HEADERS = {"ddpb_config.h"}  # generated in the build root (meson.build)
COMPOSITION_ROOTS = {"daemon/main.c", "worker/main.c", "cli/main.c"}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')

# (file, included file): arrows that break a rule and are accepted until a named change.
ALLOWED = set()  # (file, include) pairs; empty: every arrow in the tree follows the rules
# module sets (each a loop as "no-file-cycles" prints it) accepted until a named change.
ALLOWED_CYCLES = {}  # empty: no loop between files is accepted

# folder -> top-level folders it may include (besides itself, and worker's special rules)
TOP_ALLOWED = {
    "common": {"common"},
    "api": {"common", "daemon", "api"},
    "daemon": {"common", "daemon"},
    "cli": {"common", "cli"},
    "worker": {"common", "worker"},
    # ddpbench-fs (issue 34): the storage emulation is worker/data/storage.c, linked as is
    "fs": {"common", "fs", "worker"},
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


IDENT = re.compile(r"(?<![\w.])(?<!->)[A-Za-z_]\w*")  # not a member after . or ->
NOT_NAMES = {"if", "while", "for", "switch", "return", "sizeof", "defined", "_Alignof",
             "_Static_assert", "static_assert", "typeof", "__typeof__", "main"}
DEFINE = re.compile(r"\s*#\s*define\s+\w+(\([^)]*\))?(.*)")


def strip_code(text):
    """text without comments and string/char literals (lines kept), preprocessor lines
    blanked; and the macro bodies as (line, body)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(" " + "\n" * text.count("\n", i, j))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text[i] in "\"'":
            j = i + 1
            while j < n and text[j] not in (text[i], "\n"):
                j += 2 if text[j] == "\\" else 1
            out.append(text[i] * 2)
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    lines, macros, k = "".join(out).split("\n"), [], 0
    while k < len(lines):
        if not lines[k].lstrip().startswith("#"):
            k += 1
            continue
        first, directive = k, lines[k]
        while lines[k].endswith("\\") and k + 1 < len(lines):  # continued on the next line
            directive = directive[:-1] + " " + lines[k + 1]
            lines[k] = ""
            k += 1
        lines[k] = ""
        k += 1
        m = DEFINE.match(directive)
        if m:
            macros.append((first + 1, m.group(2)))
    return "\n".join(lines), macros


def declared_name(head):
    """The name a top-level declaration or definition head declares, or None."""
    m = re.search(r"([A-Za-z_]\w*)\s*\(", head)
    if m:  # a function, unless it is a pointer to one or has no type before it
        before = head[:m.start()]
        ok = m.group(1) not in NOT_NAMES and "(" not in before and re.search(r"\w", before)
        return m.group(1) if ok else None
    m = re.search(r"([A-Za-z_]\w*)\s*(\[[^\]]*\]\s*)*$", head.strip())
    return m.group(1) if m and len(re.findall(r"\w+", head)) >= 2 else None


def top_level(code):
    """The depth-0 pieces of code: (head, body, line), head the text since the last piece
    up to ';' or '{', body the braces' content (None after ';'). extern "C" { } is
    transparent."""
    depth = paren = opened = 0
    head, body, line, start, transparent = [], [], 1, 1, 0
    for c in code:
        line += c == "\n"
        if depth:
            depth += (c == "{") - (c == "}")
            if depth:
                body.append(c)
            else:
                yield "".join(head), "".join(body), start
                head, body, start = [], [], line
            continue
        paren += (c == "(") - (c == ")")
        if paren == 0 and c == "{":
            if re.fullmatch(r'\s*extern\s*""\s*', "".join(head)):
                transparent += 1
                head, start = [], line
            else:
                depth = 1
        elif paren == 0 and c == "}" and transparent:
            transparent -= 1
            head, start = [], line
        elif paren == 0 and c == ";":
            yield "".join(head), None, start
            head, start = [], line
        else:
            if not head and c.isspace():
                start = line
                continue
            head.append(c)


def scan_symbols(text, is_source):
    """(exported definitions, uses as (line, name)) of one file's text. A definition is a
    non-static function, or a non-static variable of a source file; a use is a name in a
    function body, an initializer or a macro body (a prototype or extern is not a use)."""
    code, macros = strip_code(text)
    defined, uses = set(), []

    def use(part, line):
        for k, text_line in enumerate(part.split("\n")):
            uses.extend((line + k, m.group(0)) for m in IDENT.finditer(text_line))

    carried = set()  # the words of a type definition that declares a variable after "}"
    for head, body, line in top_level(code):
        head = re.sub(r"__attribute__\s*\(\(.*?\)\)", lambda m: " " * len(m.group(0)), head)
        words = set(re.findall(r"\w+", head.split("(")[0].split("=")[0])) | carried
        first = (re.findall(r"\w+", head) or [""])[0]
        carried = set()
        if body is not None and re.search(r"\b(struct|enum|union)\b", head) and not re.search(
                r"[(=]", head):
            carried = words  # static const struct { ... } name[] = {...}: name is static
            continue  # a type: its body declares, it does not use
        if first in ("typedef", "struct", "enum", "union") and "(" not in head and "=" not in head:
            continue
        exported = not words & {"static", "typedef", "extern"}
        if "=" in head:  # a variable with an initializer
            eq = head.index("=")
            use(head[eq + 1:] + (body or ""), line + head[:eq].count("\n"))
            name = declared_name(head[:eq])
            if exported and is_source and name:
                defined.add(name)
        elif body is not None:  # a function definition
            use(body, line + head.count("\n"))
            name = declared_name(head)
            if exported and name:
                defined.add(name)
        elif exported and is_source and "(" not in head:  # a variable, no initializer
            name = declared_name(head)
            if name:
                defined.add(name)
    for line, body in macros:
        use(body, line)
    return defined, uses


def module_of(path, sources):
    """The module path belongs to (see the docstring): "folder/stem", or the path itself
    for a header of no module."""
    folder, name = os.path.split(path)
    stem = name.rsplit(".", 1)[0]
    if f"{folder}/{stem}" in sources:
        return f"{folder}/{stem}"
    if stem.endswith("_internal") and f"{folder}/{stem[:-9]}" in sources:
        return f"{folder}/{stem[:-9]}"  # x_internal.h: x's private header
    return path


def file_graph(root, files, includes_of):
    """Module -> modules it uses, and one example arrow (a "file:line: ..." string) each."""
    sources = {os.path.join(os.path.dirname(p), os.path.basename(p).rsplit(".", 1)[0])
               for p in files if p.endswith((".c", ".cu"))}
    node = {p: module_of(p, sources) for p in files}
    owner, uses = {}, {}
    for p in files:
        with open(os.path.join(root, p), encoding="utf-8", errors="replace") as f:
            defined, uses[p] = scan_symbols(f.read(), p.endswith((".c", ".cu")))
        for name in defined:
            owner.setdefault(name, set()).add(node[p])
    edges, examples = {}, {}

    def arrow(a, b, why):
        if a != b:
            edges.setdefault(a, set()).add(b)
            examples.setdefault((a, b), why)

    for p in files:
        for line, dst in includes_of[p]:
            if dst in node:
                arrow(node[p], node[dst], f"{p}:{line}: #include \"{dst}\"")
        for line, name in uses[p]:
            for m in sorted(owner.get(name, ())):
                arrow(node[p], m, f"{p}:{line}: uses {name} (defined in {m})")
    return edges, examples


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
    files = list(source_files(root))
    includes_of = {src: list(includes(root, src)) for src in files}
    for src in files:
        for line, dst in includes_of[src]:
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
    file_cycles, cycles_seen = [], set()
    file_edges, file_examples = file_graph(root, files, includes_of)
    for comp in find_cycles(file_edges):
        path = shortest_cycle(file_edges, comp)
        text = (f"loop among {len(comp)}: " + ", ".join(comp) + "\n      e.g. "
                + " -> ".join(path) + ":\n      "
                + "\n      ".join(file_examples[(a, b)] for a, b in zip(path, path[1:])))
        if frozenset(comp) in ALLOWED_CYCLES:
            cycles_seen.add(frozenset(comp))
            allowed_seen.append(f"{text}\n    allowed for now: {ALLOWED_CYCLES[frozenset(comp)]}")
        else:
            file_cycles.append(text)
    file_cycles += sorted("loop of " + ", ".join(sorted(c)) + ": ALLOWED_CYCLES entry no "
                          "longer needed, delete it" for c in ALLOWED_CYCLES
                          if c not in cycles_seen)

    for line in allowed_seen:
        print("note: " + line)
    cases = [("root-qualified-includes", unresolved), ("layer-arrows", broken + stale),
             ("no-folder-cycles", cycles), ("no-file-cycles", file_cycles)]
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
