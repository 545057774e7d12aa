#!/usr/bin/env python3
"""``python -m zabby.bench.standalone``, kept so that ``python scripts/bench_standalone.py`` works (see zabby/bench/standalone.py)."""

from zabby.bench.standalone import main

if __name__ == "__main__":
    raise SystemExit(main())
