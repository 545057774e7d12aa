"""zabby's tests.  They start real servers with ``zabby.testing`` (the product's, for users' tests too) and the repository's ``harness``."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the checkout the tests run in
