#!/usr/bin/env python3
"""``python -m harness.bench.ensemble``, kept so that ``python scripts/bench_ensemble.py`` works (see harness/bench/ensemble.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: its harness/ is not installed

from harness.bench.ensemble import main

if __name__ == "__main__":
    raise SystemExit(main())
