"""The repository's own tooling, importable from a checkout (never installed with zabby): the
fault harness (``harness.jepsen``), the differential runs against ZooKeeper 3.8 and other clients
(``harness.differential``), the benchmarks (``harness.bench``) and what they share
(``harness.local``: ZooKeeper's processes, link proxies, raw jute sessions, the Java compiler,
the backup drill).  Tests and ``scripts/`` run them from the checkout; they start zabby servers
through the product's ``zabby.testing``.
"""

from __future__ import annotations

import os
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]  # the checkout this harness is part of: its scripts/, docs/, conf/


def checkout_env() -> dict[str, str]:
    """Our environment with the checkout first on PYTHONPATH: for the harness's own modules run
    as subprocesses (``python -m harness...``), wherever their working folder is."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(CHECKOUT), os.environ.get("PYTHONPATH", "")]))}
