from __future__ import annotations

from zabby.local.processes import wait_until  # noqa: F401  (re-exported for this folder's tests)

from collections.abc import Iterator

import pytest

from zabby import SyncClient
from zabby.local.processes import ServerProcess


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


