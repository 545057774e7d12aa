#!/usr/bin/env python3
"""``python -m zabby.bench.ensemble``, kept so that ``python scripts/bench_ensemble.py`` works (see zabby/bench/ensemble.py)."""

from zabby.bench.ensemble import main

if __name__ == "__main__":
    raise SystemExit(main())
