from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from tests.procs import ServerProcess
from zabby import SyncClient


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


def wait_until(predicate: Callable[[], object], timeout_s: float = 10.0, what: str = "condition") -> None:
    """Bounded polling: fail the test if ``predicate`` is not true within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
