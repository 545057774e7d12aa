from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from zabby.local.processes import ServerProcess


@pytest.fixture
def zabby_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A started standalone server process on 127.0.0.1 (tickTime 200 ms); stopped after the test."""
    server = ServerProcess(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.kill()
