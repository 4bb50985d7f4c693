#!/bin/sh
# Format check of the tree (meson test suite 'lint'; by hand: tests/lint/check_format.sh).
#   tests/lint/check_format.sh         lists what is not clean, exits 1 if anything is
#   tests/lint/check_format.sh --fix   rewrites it: clang-format -i on C and CUDA, trailing
#                                      whitespace stripped and a final newline added elsewhere
# Five cases, each a line "ok NAME" or "not ok NAME" with the files under it, then
# "TEST-SUMMARY passed=P failed=F" like every test:
#   clang-format   C and CUDA sources (*.c *.h *.cu *.cuh) under common/ api/ daemon/
#                  worker/ cli/ tests/ are unchanged by clang-format with .clang-format
#   column-limit   no line of those sources is longer than .clang-format's ColumnLimit
#   final-newline, trailing-whitespace, tabs
#                  .editorconfig's basics, for every other text file of the tree
# Files are the tracked and untracked-but-not-ignored ones (git), so a build tree is never
# read; outside a git checkout (a release tarball) it falls back to find. Fuzz corpus
# entries are byte-exact inputs and binary files are not text: neither is checked.
# Decision: tabs are reported but never rewritten by --fix, since the width a tab stood for
# is a guess; the tree has none today.
set -u
cd "$(dirname "$0")/../.." || exit 1

fix=0
case "${1:-}" in
    --fix) fix=1 ;;
    "") ;;
    *) echo "usage: $0 [--fix]" >&2; exit 2 ;;
esac
CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
passed=0
failed=0

list_files() {
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git ls-files --cached --others --exclude-standard | sort -u
    else
        find . \( -name '.git' -o -name 'build*' -o -name '__pycache__' \) -prune -o \
            -type f -print | sed 's|^\./||' | sort
    fi
}

# result NAME LISTFILE: one case; the list (one offending file a line) is printed under it
result() {
    if [ -s "$2" ]; then
        echo "not ok $1"
        sed 's/^/    /' "$2"
        failed=$((failed + 1))
    else
        echo "ok $1"
        passed=$((passed + 1))
    fi
}

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
list_files >"$tmp/all"
grep -E '^(common|api|daemon|worker|cli|tests)/.*\.(c|h|cu|cuh)$' "$tmp/all" >"$tmp/csrc"
# text files other than C/CUDA: grep -I skips binary ones; files listed but gone are skipped
grep -vE '\.(c|h|cu|cuh)$' "$tmp/all" | grep -v '^tests/fuzz/corpus/' |
    while IFS= read -r f; do [ -f "$f" ] && echo "$f"; done >"$tmp/others"
tr '\n' '\0' <"$tmp/others" | xargs -0 -r grep -Il '' >"$tmp/text" 2>/dev/null

# --- clang-format ---------------------------------------------------------------------
: >"$tmp/cf"
if ! command -v "$CLANG_FORMAT" >/dev/null 2>&1; then
    echo "$CLANG_FORMAT not found: install clang-format (deploy/install-deps.sh does)" >"$tmp/cf"
else
    v=$("$CLANG_FORMAT" --version | sed -n 's/.*version \([0-9]*\).*/\1/p')
    [ "$v" = 14 ] || echo "note: .clang-format was tuned with clang-format 14, this is $v"
    while IFS= read -r f; do
        [ -f "$f" ] || continue
        if [ $fix = 1 ]; then
            "$CLANG_FORMAT" -i --style=file "$f"
        elif ! "$CLANG_FORMAT" --style=file "$f" | cmp -s - "$f"; then
            n=$("$CLANG_FORMAT" --style=file "$f" | diff "$f" - | grep -c '^<')
            echo "$f ($n lines differ)" >>"$tmp/cf"
        fi
    done <"$tmp/csrc"
fi
result clang-format "$tmp/cf"

# --- the column limit -------------------------------------------------------------------
# clang-format leaves a line past ColumnLimit where it cannot break it (a comment, since
# ReflowComments is off; a string; a macro call it indents after the last one, a staircase):
# such a line is rewritten by hand, never accepted. Characters, not bytes (a comment's §).
: >"$tmp/col"
limit=$(sed -n 's/^ColumnLimit: *//p' .clang-format)
python3 - "$limit" "$tmp/csrc" >>"$tmp/col" <<'PY'
import sys
limit, listing = int(sys.argv[1]), sys.argv[2]
for path in open(listing, encoding="utf-8").read().split("\n"):
    if not path:
        continue
    try:
        text = open(path, encoding="utf-8").read()
    except FileNotFoundError:
        continue
    for n, line in enumerate(text.split("\n"), 1):
        if len(line) > limit:
            print(f"{path}: line {n} has {len(line)} columns")
PY
result column-limit "$tmp/col"

# --- .editorconfig basics ---------------------------------------------------------------
: >"$tmp/nl"
: >"$tmp/ws"
: >"$tmp/tab"
while IFS= read -r f; do
    if [ -s "$f" ] && [ "$(tail -c 1 "$f" | od -An -c | tr -d ' ')" != '\n' ]; then
        if [ $fix = 1 ]; then echo >>"$f"; else echo "$f" >>"$tmp/nl"; fi
    fi
    if grep -q '[[:blank:]]$' "$f"; then
        if [ $fix = 1 ]; then
            sed -i 's/[[:blank:]]*$//' "$f"
        else
            echo "$f: line $(grep -n '[[:blank:]]$' "$f" | cut -d: -f1 | head -5 | paste -sd, -)" \
                >>"$tmp/ws"
        fi
    fi
    if grep -q "$(printf '\t')" "$f"; then
        echo "$f: line $(grep -n "$(printf '\t')" "$f" | cut -d: -f1 | head -5 | paste -sd, -)" \
            >>"$tmp/tab"
    fi
done <"$tmp/text"
result final-newline "$tmp/nl"
result trailing-whitespace "$tmp/ws"
result tabs "$tmp/tab"

[ $failed = 0 ] || [ $fix = 1 ] || echo "to fix: tests/lint/check_format.sh --fix"
echo "TEST-SUMMARY passed=$passed failed=$failed"
[ $failed = 0 ]
