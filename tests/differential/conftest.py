"""Fixtures the differential tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.differential.curator import CuratorUnavailable, build, ensure_curator
from harness.local.zookeeper import ZooKeeperUnavailable


@pytest.fixture(scope="session")
def build_dir() -> Path:
    """CuratorSuite compiled against Debian's Curator and ZooKeeper jars (installed if need be)."""
    try:
        ensure_curator()
    except (CuratorUnavailable, ZooKeeperUnavailable) as exc:
        pytest.skip(f"Curator or ZooKeeper 3.8 cannot run here: {exc}")
    return build()
