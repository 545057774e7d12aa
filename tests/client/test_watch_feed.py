"""Watches as a change feed (issue 46): the zxid on every event, resuming a persistent watch
from a zxid, and waiting for a zxid, against a real server through zabby's clients."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from zabby import SyncClient
from zabby.client.states import EventType, WatchedEvent
from zabby.local.processes import ServerProcess, wait_until
from zabby.opcodes import AddWatchMode


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(Path(tmp_path_factory.mktemp("feed")))
    process.start()
    try:
        yield process
    finally:
        process.kill()


@pytest.fixture
def client(server: ServerProcess) -> Iterator[SyncClient]:
    c = SyncClient(server.hosts, timeout=4.0)
    c.start(timeout=10)
    try:
        yield c
    finally:
        c.close()


def test_every_event_carries_the_zxid_of_its_change(client: SyncClient, server: ServerProcess) -> None:
    seen: list[WatchedEvent] = []
    client.ensure_path("/zx")
    client.add_watch("/zx", seen.append, AddWatchMode.PERSISTENT_RECURSIVE)
    made = client.create("/zx/a", b"1", include_data=True)[1]
    changed = client.set("/zx/a", b"2")
    client.delete("/zx/a")
    deleted = client.exists("/zx").pzxid  # a delete's zxid is its parent's pzxid
    wait_until(lambda: len(seen) == 3, 5, "three events")
    assert [(e.type, e.path, e.zxid) for e in seen] == [
        (EventType.CREATED, "/zx/a", made.czxid), (EventType.CHANGED, "/zx/a", changed.mzxid), (EventType.DELETED, "/zx/a", deleted),
    ]  # fmt: skip
    assert client.last_zxid >= deleted


def test_a_one_shot_event_carries_its_zxid_and_a_session_event_none(client: SyncClient) -> None:
    seen: list[WatchedEvent] = []
    client.create("/one", b"")
    client.get("/one", watch=seen.append)
    stat = client.set("/one", b"x")
    wait_until(lambda: seen, 5, "the data watch")
    assert seen == [WatchedEvent(EventType.CHANGED, seen[0].state, "/one", stat.mzxid)]
    assert WatchedEvent(EventType.NONE, seen[0].state, None).zxid == -1
