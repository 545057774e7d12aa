#!/usr/bin/env bash
# The main job: make (or reuse) .venv, install zabby with its Spark extra, then run zabby-demo
# (a local 3-server ensemble, two query nodes, the PySpark cube builds and their metadata).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test,spark]'
exec .venv/bin/zabby-demo "$@"
