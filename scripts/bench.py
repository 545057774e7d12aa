#!/usr/bin/env python3
"""``python -m zabby.bench``, kept so that ``python scripts/bench.py`` works (see zabby/bench/cli.py)."""

from zabby.bench.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
