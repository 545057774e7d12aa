from __future__ import annotations

from collections.abc import Iterator

import pytest

import zabby.testing
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
    with zabby.testing.ensemble(3, workdir=tmp_path_factory.mktemp("ensemble")) as servers:
        yield servers
