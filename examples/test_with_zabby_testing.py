"""Your tests against real zabby servers, with ``zabby.testing`` (no Java, no fixed ports):
``pytest examples/test_with_zabby_testing.py``.  zabby's own test run runs it too."""

from __future__ import annotations

import pytest

import zabby.testing
from zabby import Client, SyncClient
from zabby.testing import ServerProcess


def test_a_write_outlives_its_leader() -> None:
    with zabby.testing.ensemble(3) as ens, SyncClient(ens.hosts) as zk:
        zk.create("/config", b"v1")
        ens.servers[ens.leader()].kill()
        assert zk.retry(zk.get, "/config")[0] == b"v1"


@pytest.mark.anyio
async def test_the_async_form() -> None:
    async with zabby.testing.server() as server, Client(server.hosts) as zk:
        await zk.create("/jobs/1", b"queued", makepath=True)
        assert await zk.get_children("/jobs") == ["1"]


def test_the_pytest_fixture(zabby_server: ServerProcess) -> None:
    with SyncClient(zabby_server.hosts) as zk:
        assert zk.exists("/zookeeper") is not None
