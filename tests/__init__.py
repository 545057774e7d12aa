"""zabby's tests.  The harness that starts real servers is ``zabby.local.processes``."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the checkout the tests run in
