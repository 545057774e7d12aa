from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from zabby import SyncClient
from zabby.testing import (
    Ensemble,
    ServerProcess,
    wait_until,  # noqa: F401  (re-exported for this folder's tests)
)


@pytest.fixture
def client(zabby_server: ServerProcess) -> Iterator[SyncClient]:
    c = SyncClient(zabby_server.hosts, timeout=4.0)
    c.start(timeout=10)
    try:
        yield c
    finally:
        try:
            c.close()
        except Exception:
            pass


@pytest.fixture(scope="module")
def ensemble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ensemble]:
    """A 3-server ensemble shared by a module's tests, every server following its leader."""
    servers = Ensemble(Path(tmp_path_factory.mktemp("ensemble")), 3)
    servers.start()
    try:
        servers.wait_leader(everyone=True)
        yield servers
    finally:
        servers.kill_all()
