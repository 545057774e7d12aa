#!/usr/bin/env python3
"""``python -m harness.bench.standalone``, kept so that ``python scripts/bench_standalone.py`` works (see harness/bench/standalone.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: its harness/ is not installed

from harness.bench.standalone import main

if __name__ == "__main__":
    raise SystemExit(main())
