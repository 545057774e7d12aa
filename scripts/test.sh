#!/usr/bin/env bash
# The test command of the README: make (or reuse) .venv, install zabby with its test extra, run pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test,spark]'
exec .venv/bin/python -m pytest -q "$@"
