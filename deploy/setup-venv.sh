#!/bin/sh
# Creates .venv-test/: the one virtual environment for test tools Debian does not package
# (schemathesis, which tests/integration/test_schemathesis.py runs against a real daemon).
# Pinned, so a CI run tests with what a developer tested with; created once, then reused
# offline. Needs python3-venv (deploy/install-deps.sh) and PyPI on the first run.
set -eu
cd "$(dirname "$0")/.."
SCHEMATHESIS=4.32.5
venv=.venv-test
if [ -x "$venv/bin/schemathesis" ] &&
    "$venv/bin/python" -c "import importlib.metadata as m; exit(m.version('schemathesis') != '$SCHEMATHESIS')"; then
    exit 0
fi
echo "setup-test-venv: installing schemathesis $SCHEMATHESIS into $venv"
rm -rf "$venv"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "schemathesis==$SCHEMATHESIS"
