#!/usr/bin/env bash
# The test command of the README: make (or reuse) .venv, install zabby with its test extra, run ruff and mypy, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test,spark]'
.venv/bin/python -m ruff check zabby harness tests scripts examples
.venv/bin/python -m mypy zabby harness  # harness: the repository's tooling, run from a checkout
.venv/bin/python -m mypy --strict --follow-imports=silent zabby/client  # the client's public API is fully typed (its imports are checked by the line above)
# Two pytest-xdist workers by default, each given whole files (a module's shared servers and
# Spark start once); ZABBY_TEST_WORKERS=0 runs them in this one process.  With the servers forked
# from a template (zabby.testing.use_fork_server), two workers ran the 1,646 tests in 547 s
# against 961 s in one process, the fault and Spark tests' timing bounds holding.
exec .venv/bin/python -m pytest -q -n "${ZABBY_TEST_WORKERS:-2}" --dist loadfile --durations=25 "$@"  # the slowest 25: where the 10 minutes go
