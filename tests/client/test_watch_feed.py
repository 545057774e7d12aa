"""Watches as a change feed (issue 46): the zxid on every event, resuming a persistent watch
from a zxid, and waiting for a zxid, against a real server through zabby's clients."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import zabby.testing
from zabby import SyncClient
from zabby.client.states import EventType, WatchedEvent
from zabby.opcodes import AddWatchMode
from zabby.testing import Ensemble, ServerProcess, wait_until


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with zabby.testing.server(workdir=tmp_path_factory.mktemp("feed")) as process:
        yield process


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


def test_a_watch_added_since_a_zxid_hears_every_change_after_it_then_the_live_ones(client: SyncClient, server: ServerProcess) -> None:
    """Writes run on while the watch is added: the history ends exactly where the live events
    begin (no change missed or heard twice at the seam), in zxid order."""
    writer = SyncClient(server.hosts, timeout=4.0)
    writer.start(timeout=10)
    try:
        writer.ensure_path("/seam")
        since = writer.create("/seam/n", b"0", include_data=True)[1].czxid
        results = [writer.set_async("/seam/n", str(i).encode()) for i in range(1, 200)]
        seen: list[WatchedEvent] = []
        client.add_watch("/seam", seen.append, AddWatchMode.PERSISTENT_RECURSIVE, since_zxid=since)
        results += [writer.set_async("/seam/n", str(i).encode()) for i in range(200, 400)]
        written = sorted(result.get(10).mzxid for result in results)  # the calls run as tasks, in any order
        wait_until(lambda: len(seen) >= len(written), 10, "every change")
        assert [event.zxid for event in seen] == written
        assert {(event.type, event.path) for event in seen} == {(EventType.CHANGED, "/seam/n")}
    finally:
        writer.close()


def test_resuming_ahead_of_the_server_or_with_no_zxid_is_refused(client: SyncClient) -> None:
    from zabby.errors import BadArgumentsError

    with pytest.raises(BadArgumentsError, match="ahead of this server"):
        client.add_watch("/", print, AddWatchMode.PERSISTENT, since_zxid=client.last_zxid + (1 << 40))
    with pytest.raises(BadArgumentsError):
        client.add_watch("/", print, AddWatchMode.PERSISTENT, since_zxid=-1)
    with pytest.raises(TypeError):
        client.add_watch("/", print, AddWatchMode.PERSISTENT, since_zxid="0x5")  # type: ignore[arg-type]


def test_a_resume_hears_only_what_the_session_may_read(client: SyncClient, server: ServerProcess) -> None:
    from zabby import make_digest_acl

    owner = SyncClient(server.hosts, timeout=4.0, auth_data=[("digest", "alice:secret")])
    owner.start(timeout=10)
    try:
        since = owner.create("/acl", b"", include_data=True)[1].czxid
        owner.create("/acl/hidden", b"", acl=[make_digest_acl("alice", "secret", all=True)])
        owner.create("/acl/open", b"")
        seen: list[WatchedEvent] = []
        client.add_watch("/acl", seen.append, AddWatchMode.PERSISTENT_RECURSIVE, since_zxid=since)
        marker = client.create("/acl/marker", b"", include_data=True)[1].czxid
        wait_until(lambda: seen and seen[-1].zxid == marker, 5, "the marker")
        assert [event.path for event in seen] == ["/acl/open", "/acl/marker"]
    finally:
        owner.close()


def test_a_history_too_short_is_refused_naming_the_oldest_zxid(tmp_path: Path) -> None:
    from zabby.errors import HistoryCompactedError

    short = ServerProcess(tmp_path, watchHistoryTxns=5)
    short.start()
    c = SyncClient(short.hosts, timeout=4.0)
    try:
        c.start(timeout=10)
        first = c.create("/h", b"", include_data=True)[1].czxid
        zxids = [c.set("/h", str(i).encode()).mzxid for i in range(10)]
        with pytest.raises(HistoryCompactedError) as caught:
            c.add_watch("/h", print, AddWatchMode.PERSISTENT, since_zxid=first)
        assert caught.value.oldest_zxid == zxids[-6]  # the five newest txns are kept
        assert f"0x{zxids[-6]:x}" in str(caught.value)
        seen: list[WatchedEvent] = []
        c.add_watch("/h", seen.append, AddWatchMode.PERSISTENT, since_zxid=caught.value.oldest_zxid)
        wait_until(lambda: len(seen) == 5, 5, "the five kept events")
        assert [event.zxid for event in seen] == zxids[-5:]
        c.stop()
        short.stop()
        short.start()  # the history comes back from the log replayed onto the snapshot
        c.start(timeout=10)
        again: list[WatchedEvent] = []
        c.add_watch("/h", again.append, AddWatchMode.PERSISTENT, since_zxid=zxids[-3])
        wait_until(lambda: len(again) == 2, 5, "the two newest events")
        assert [event.zxid for event in again] == zxids[-2:]
    finally:
        c.close()
        short.kill()


# ----------------------------------------------------------------------------- resuming by itself
async def feed_through_reconnects(hosts: str, reconnects: int, writer_hosts: str | None = None,
                                  seconds_max: float = 120.0) -> tuple[list[tuple[int, str]], list[WatchedEvent], set[tuple[str, int]]]:  # fmt: skip
    """A recursive watcher whose connection is dropped ``reconnects`` times while a writer
    commits multis of two setData (two events of one zxid) without pause; returns what was
    written, as (zxid, path) in commit order, what the watcher heard, and the servers it
    heard it from."""
    import trio

    from zabby import Client

    writer, watcher = Client(writer_hosts or hosts, timeout=8.0), Client(hosts, timeout=8.0)
    await writer.start()
    await watcher.start()
    written: list[tuple[int, str]] = []
    seen: list[WatchedEvent] = []
    servers: set[tuple[str, int]] = set()
    await writer.ensure_path("/feed/a")
    await writer.ensure_path("/feed/b")
    await watcher.add_watch("/feed", seen.append, AddWatchMode.PERSISTENT_RECURSIVE)
    forced = 0

    async def write() -> None:
        count = 0
        while forced < reconnects:
            count += 1
            transaction = writer.transaction()
            transaction.set_data("/feed/a", str(count).encode())
            transaction.set_data("/feed/b", str(count).encode())
            zxid = (await transaction.commit())[0].mzxid
            written.extend([(zxid, "/feed/a"), (zxid, "/feed/b")])

    async def force() -> None:
        nonlocal forced
        while forced < reconnects:
            conn = watcher._conn  # noqa: SLF001  (the test drops the live connection)
            if conn is None or conn.closed:
                await trio.sleep(0.001)
                continue
            servers.add(conn.host)
            await trio.sleep(0.002)  # a few of the writer's commits on this connection
            conn.leave("dropped by the test")
            forced += 1
            while watcher._conn is conn:  # noqa: SLF001
                await trio.sleep(0.001)

    with trio.fail_after(seconds_max):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(write)
            nursery.start_soon(force)
        while not seen or seen[-1].zxid < written[-1][0] or len(seen) < len(written):
            await trio.sleep(0.01)
            if len(seen) > len(written):
                break
    heard = list(seen)  # before the close, which tells every watch EventType.NONE
    await writer.close()
    await watcher.close()
    return written, heard, servers


def assert_heard_once_in_order(written: list[tuple[int, str]], seen: list[WatchedEvent]) -> None:
    heard = [(event.zxid, event.path) for event in seen]
    missed = sorted(set(written) - set(heard))
    assert not missed, f"{len(missed)} changes missed, the first {missed[:3]}"
    assert len(heard) == len(set(heard)), "a change heard twice"
    assert heard == written, "heard out of zxid order"
    assert {event.type for event in seen} == {EventType.CHANGED}


def test_a_watcher_hears_every_change_once_in_order_through_many_reconnects(server: ServerProcess) -> None:
    import trio

    reconnects = 300
    written, seen, _ = trio.run(feed_through_reconnects, server.hosts, reconnects)
    assert len(written) > 2 * reconnects // 10  # the writes ran on through the reconnects
    assert_heard_once_in_order(written, seen)


def test_a_watcher_hears_every_change_once_in_order_failing_over_between_servers(ensemble: Ensemble) -> None:
    import trio

    written, seen, servers = trio.run(feed_through_reconnects, ensemble.hosts, 60)
    assert len(servers) == 3  # it moved between all of them
    assert_heard_once_in_order(written, seen)


# ----------------------------------------------------------------------------- waiting for a zxid
def test_wait_for_zxid_returns_once_applied_and_times_out_on_a_zxid_never_reached(client: SyncClient, server: ServerProcess) -> None:
    from zabby.errors import BadArgumentsError, OperationTimeoutError

    zxid = client.create("/waited", b"", include_data=True)[1].czxid
    assert client.wait_for_zxid(zxid) >= zxid
    assert client.wait_for_zxid(zxid, timeout=2, sync=True) >= zxid
    started = time.monotonic()
    with pytest.raises(OperationTimeoutError):
        client.wait_for_zxid((99 << 32) + 1, timeout=0.5)
    assert time.monotonic() - started < 5
    with pytest.raises(BadArgumentsError):
        client.wait_for_zxid(-1)
    writer = SyncClient(server.hosts, timeout=4.0)
    writer.start(timeout=10)
    try:
        writer.sync("/")  # its reply carries the server's zxid
        ahead = writer.last_zxid + 2  # the writer's second write from now
        pending = client._submit(client._client.wait_for_zxid, (ahead, 5.0, False), 6.0)  # noqa: SLF001
        time.sleep(0.2)
        assert not pending.ready()
        writer.set("/waited", b"1")
        writer.set("/waited", b"2")
        assert pending.get(6) >= ahead
    finally:
        writer.close()


def test_a_writer_hands_its_zxid_to_a_reader_on_another_server_who_reads_the_write(ensemble: Ensemble) -> None:
    servers = list(ensemble.servers.values())
    writer = SyncClient(servers[0].hosts, timeout=8.0)
    readers = [SyncClient(server.hosts, timeout=8.0) for server in servers[1:]]
    for c in (writer, *readers):
        c.start(timeout=20)
    try:
        writer.ensure_path("/handed")
        for round_ in range(100):
            zxid = writer.set("/handed", str(round_).encode()).mzxid
            for reader in readers:
                assert reader.wait_for_zxid(zxid, timeout=5) >= zxid
                assert reader.get("/handed")[0] == str(round_).encode()
    finally:
        for c in (writer, *readers):
            c.close()


def test_a_watch_no_server_can_resume_is_added_again_live_and_says_history_lost(tmp_path: Path) -> None:
    import trio

    from zabby import Client

    forgetful = ServerProcess(tmp_path, watchHistoryTxns=0)  # no history: only the present can be resumed from
    forgetful.start()

    async def main() -> None:
        watcher, writer = Client(forgetful.hosts, timeout=4.0), Client(forgetful.hosts, timeout=4.0)
        await watcher.start()
        await writer.start()
        seen: list[WatchedEvent] = []
        await writer.create("/lost", b"")
        await watcher.add_watch("/lost", seen.append, AddWatchMode.PERSISTENT)
        first = (await writer.set("/lost", b"1")).mzxid
        with trio.fail_after(5):
            while not seen:
                await trio.sleep(0.01)
        conn = watcher._conn  # noqa: SLF001
        assert conn is not None
        conn.leave("dropped by the test")
        with trio.fail_after(10):
            while len(seen) < 2:
                await trio.sleep(0.01)
        later = (await writer.set("/lost", b"2")).mzxid
        with trio.fail_after(5):
            while len(seen) < 3:
                await trio.sleep(0.01)
        assert [(event.type, event.path) for event in seen] == [
            (EventType.CHANGED, "/lost"), (EventType.HISTORY_LOST, "/lost"), (EventType.CHANGED, "/lost"),
        ]  # fmt: skip
        assert seen[0].zxid == first and first <= seen[1].zxid < later == seen[2].zxid
        await watcher.close()
        await writer.close()

    try:
        trio.run(main)
    finally:
        forgetful.kill()
