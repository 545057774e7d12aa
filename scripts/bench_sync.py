#!/usr/bin/env python3
"""``python -m zabby.bench.sync``, kept so that ``python scripts/bench_sync.py`` works (see zabby/bench/sync.py)."""

from zabby.bench.sync import main

if __name__ == "__main__":
    raise SystemExit(main())
