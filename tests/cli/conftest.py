from __future__ import annotations

from collections.abc import Iterator

import pytest

from zabby import SyncClient
from zabby.cli import BufferWriter, Shell
from zabby.testing import ServerProcess


@pytest.fixture
def shell(zabby_server: ServerProcess) -> Iterator[Shell]:
    """A connected Shell writing to memory (``shell.writer`` is a BufferWriter)."""
    sh = Shell(zabby_server.hosts, BufferWriter(), timeout_s=5.0, connect_timeout_s=10.0)
    assert sh.connect(), sh.writer.stderr  # type: ignore[attr-defined]
    sh.writer.take()  # type: ignore[attr-defined]  # the SyncConnected event
    try:
        yield sh
    finally:
        sh.close()


@pytest.fixture
def other(zabby_server: ServerProcess) -> Iterator[SyncClient]:
    """A second session, to change things under the shell's watches."""
    client = SyncClient(zabby_server.hosts, timeout=5.0)
    client.start(timeout=10)
    try:
        yield client
    finally:
        client.close()

