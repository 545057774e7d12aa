"""TreeCache on the resumable watch feed (issue 46), against real servers: the load and its
zxid, a reconnect and a failover caught up from events with no re-read (``full_reads``
counts whole-subtree reads), the HISTORY_LOST fallback, and a saved mirror resumed."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.local.netproxy import Mode, ProxyHub
from tests.client.test_recipes import _storm
from zabby import SyncClient, TreeEvent
from zabby.client.recipes.cache import NodeData, TreeCache
from zabby.client.states import ZnodeStat
from zabby.errors import NoNodeError
from zabby.testing import Ensemble, ServerProcess, wait_until

WAIT_S = 15.0


def tree_state(client: SyncClient, root: str) -> dict[str, tuple[bytes, tuple[int, ...], frozenset[str]]]:
    """Every node under ``root``: data, stat and children names, as the server has them."""
    out = {}
    todo = [root]
    while todo:
        path = todo.pop()
        try:
            data, stat = client.get(path)
            children = client.get_children(path)
        except NoNodeError:
            continue
        out[path] = (data, tuple(stat), frozenset(children))
        todo.extend(f"{path}/{c}" for c in children)
    return out


def cache_state(cache: TreeCache) -> dict[str, tuple[bytes, tuple[int, ...], frozenset[str]]]:
    return {p: (n.data, tuple(n.stat), cache.get_children(p, frozenset())) for p, n in cache.snapshot().items()}


def settle(cache: TreeCache, writer: SyncClient, root: str) -> int:
    """A last write under ``root``; once the cache reflects its zxid it must equal the tree."""
    zxid = writer.set(root, b"marker-%d" % random.random()).mzxid
    assert cache.wait_for_zxid(zxid, WAIT_S), f"cache at 0x{cache.zxid:x}, not at 0x{zxid:x}"
    assert cache.zxid >= zxid
    return zxid


@pytest.fixture
def hub() -> Iterator[ProxyHub]:
    proxies = ProxyHub()
    try:
        yield proxies
    finally:
        proxies.close()


def start_cache(client: SyncClient, root: str, **kw: object) -> tuple[TreeCache, list[TreeEvent]]:
    cache = client.TreeCache(root, **kw)
    events: list[TreeEvent] = []
    cache.listen(events.append)
    cache.start()
    assert cache.initialized.wait(WAIT_S)
    return cache, events


def test_load_changes_and_the_zxid_it_reflects(zabby_server: ServerProcess) -> None:
    with SyncClient(zabby_server.hosts, timeout=4.0) as client:
        client.ensure_path("/tc/a/b")
        loaded_at = client.set("/tc/a", b"x").mzxid
        cache, events = start_cache(client, "/tc")
        assert cache.zxid >= loaded_at and cache.full_reads == 1
        assert cache_state(cache) == tree_state(client, "/tc")
        assert [e.event_type for e in events] == [TreeEvent.NODE_ADDED] * 3 + [TreeEvent.INITIALIZED]
        _storm(client, "/tc", 300, random.Random(3))
        settle(cache, client, "/tc")
        assert cache_state(cache) == tree_state(client, "/tc")  # stats too: parents' are re-read
        kinds = {e.event_type for e in events}
        assert {TreeEvent.NODE_UPDATED, TreeEvent.NODE_REMOVED} <= kinds
        assert cache.full_reads == 1
        assert not cache.wait_for_zxid(cache.zxid + 1000, 0.2)  # nothing that far yet
        cache.close()


def test_closing_one_cache_leaves_another_on_the_same_root_watching(zabby_server: ServerProcess) -> None:
    """close() removes its own watcher only (it removed every recursive watch on the root)."""
    with SyncClient(zabby_server.hosts, timeout=4.0) as client:
        client.ensure_path("/tc2")
        first, _ = start_cache(client, "/tc2")
        second, _ = start_cache(client, "/tc2")
        first.close()
        client.create("/tc2/after", b"x")
        settle(second, client, "/tc2")
        assert second.get_data("/tc2/after") is not None
        second.close()


def test_a_reconnect_catches_up_from_events_without_a_reread(zabby_server: ServerProcess, hub: ProxyHub) -> None:
    link = hub.add(zabby_server.port)
    with SyncClient(f"127.0.0.1:{link.port}", timeout=6.0) as client, SyncClient(zabby_server.hosts) as writer:
        writer.ensure_path("/rc")
        cache, events = start_cache(client, "/rc")
        rng = random.Random(5)
        _storm(writer, "/rc", 100, rng)
        settle(cache, writer, "/rc")
        reads_before = cache.node_reads
        link.set_mode(Mode.CUT)
        wait_until(lambda: not client.connected, 10, "the cache's client disconnected")
        _storm(writer, "/rc", 200, rng)  # made while the cache's client is away
        link.heal()
        settle(cache, writer, "/rc")
        assert cache_state(cache) == tree_state(writer, "/rc")
        assert cache.full_reads == 1  # caught up from the resumed feed, not by re-reading
        assert cache.node_reads - reads_before <= 2 * 200 + 2  # at most a node and its parent per event
        kinds = [e.event_type for e in events]
        assert TreeEvent.CONNECTION_SUSPENDED in kinds and TreeEvent.CONNECTION_RECONNECTED in kinds
        cache.close()


def test_a_failover_to_another_server_catches_up_without_a_reread(tmp_path: Path) -> None:
    ensemble = Ensemble(tmp_path / "ens", 3, tickTime=200)
    ensemble.start()
    try:
        ensemble.wait_leader()
        first = ensemble.servers[1]
        others = ",".join(s.hosts for sid, s in ensemble.servers.items() if sid != 1)
        with SyncClient(f"{first.hosts},{others}", timeout=6.0, randomize_hosts=False) as client, \
                SyncClient(others, timeout=6.0) as writer:  # fmt: skip
            writer.ensure_path("/fo")
            cache, _ = start_cache(client, "/fo")
            rng = random.Random(11)
            _storm(writer, "/fo", 100, rng)
            settle(cache, writer, "/fo")
            first.kill()
            _storm(writer, "/fo", 200, rng)
            settle(cache, writer, "/fo")
            assert client._client._current_host[1] != first.port  # on another server now
            assert cache_state(cache) == tree_state(writer, "/fo")
            assert cache.full_reads == 1
            cache.close()
    finally:
        ensemble.kill_all()


def test_history_lost_falls_back_to_a_full_read(tmp_path: Path, hub: ProxyHub) -> None:
    short = ServerProcess(tmp_path, watchHistoryTxns=5)
    short.start()
    link = hub.add(short.port)
    try:
        with SyncClient(f"127.0.0.1:{link.port}", timeout=6.0) as client, SyncClient(short.hosts) as writer:
            writer.ensure_path("/hl")
            for i in range(4):
                writer.create(f"/hl/n{i}", b"old")
            cache, events = start_cache(client, "/hl")
            link.set_mode(Mode.CUT)
            wait_until(lambda: not client.connected, 10, "the cache's client disconnected")
            writer.delete("/hl/n0")
            for i in range(20):  # more txns than the server keeps
                writer.set("/hl/n1", b"%d" % i)
            writer.create("/hl/new", b"fresh")
            link.heal()
            settle(cache, writer, "/hl")
            assert cache_state(cache) == tree_state(writer, "/hl")
            assert cache.full_reads == 2  # the load, then the resync the lost history forced
            reported = {(e.event_type, e.event_data.path) for e in events if e.event_data is not None}
            assert {(TreeEvent.NODE_REMOVED, "/hl/n0"), (TreeEvent.NODE_UPDATED, "/hl/n1"), (TreeEvent.NODE_ADDED, "/hl/new")} <= reported
            cache.close()
    finally:
        short.kill()


def test_a_saved_mirror_resumes_from_its_zxid(zabby_server: ServerProcess) -> None:
    with SyncClient(zabby_server.hosts, timeout=4.0) as client:
        client.ensure_path("/sv")
        rng = random.Random(17)
        _storm(client, "/sv", 100, rng)
        cache, _ = start_cache(client, "/sv")
        saved = cache.save_state()
        cache.close()
        assert saved["zxid"] == cache.zxid
        _storm(client, "/sv", 200, rng)  # changes while no cache runs
        resumed, events = start_cache(client, "/sv", saved_state=saved)
        assert resumed.full_reads == 0  # INITIALIZED comes after the history, from events alone
        assert cache_state(resumed) == tree_state(client, "/sv")
        assert events[-1].event_type == TreeEvent.INITIALIZED
        assert {e.event_type for e in events} >= {TreeEvent.NODE_ADDED, TreeEvent.NODE_UPDATED}
        settle(resumed, client, "/sv")
        assert cache_state(resumed) == tree_state(client, "/sv")
        resumed.close()


def test_a_saved_mirror_older_than_the_history_is_reloaded(tmp_path: Path) -> None:
    short = ServerProcess(tmp_path, watchHistoryTxns=5)
    short.start()
    try:
        with SyncClient(short.hosts, timeout=4.0) as client:
            client.ensure_path("/old/gone")
            cache, _ = start_cache(client, "/old")
            saved = cache.save_state()
            cache.close()
            client.delete("/old/gone")
            for i in range(10):
                client.create(f"/old/n{i}", b"")
            resumed, events = start_cache(client, "/old", saved_state=saved)
            assert resumed.full_reads == 1
            assert cache_state(resumed) == tree_state(client, "/old")
            assert (TreeEvent.NODE_REMOVED, "/old/gone") in {(e.event_type, e.event_data.path) for e in events if e.event_data}
            resumed.close()
    finally:
        short.kill()


def test_a_saved_state_that_does_not_fit_is_refused() -> None:
    good = {"format": 1, "root": "/a", "zxid": 5, "nodes": {"/a": ["", [0] * 11]}}
    with pytest.raises(ValueError, match="root '/a', want format 1 of root '/b'"):
        TreeCache(None, "/b", saved_state=good)
    with pytest.raises(ValueError, match="unusable saved state"):
        TreeCache(None, "/a", saved_state={**good, "nodes": {"/a": ["!!", [0] * 11]}})
    with pytest.raises(ValueError, match="unusable saved state"):
        TreeCache(None, "/a", saved_state={"root": "/a"})
    assert TreeCache(None, "/a", saved_state=good)._mirror.saved == (5, {"/a": NodeData("/a", b"", ZnodeStat(*[0] * 11))})


def test_a_new_session_after_expiry_resumes_the_watch_from_the_feed(zabby_server: ServerProcess, hub: ProxyHub) -> None:
    """The session expires while the link is cut; the client starts a new one (which has no
    watches) and the cache adds its watch again from the last zxid its feed brought."""
    link = hub.add(zabby_server.port)
    with SyncClient(f"127.0.0.1:{link.port}", timeout=2.0, reconnect_after_expiry=True) as client, \
            SyncClient(zabby_server.hosts) as writer:  # fmt: skip
        writer.ensure_path("/ex")
        cache, events = start_cache(client, "/ex")
        rng = random.Random(23)
        _storm(writer, "/ex", 50, rng)
        settle(cache, writer, "/ex")
        session = client.client_id
        link.set_mode(Mode.CUT)
        with SyncClient(zabby_server.hosts, client_id=session) as thief:
            assert thief.client_id == session
            thief.stop()  # ends the shared session on the server
        _storm(writer, "/ex", 100, rng)
        link.heal()
        settle(cache, writer, "/ex")
        assert client.client_id is not None and client.client_id[0] != session[0]
        assert cache_state(cache) == tree_state(writer, "/ex")
        assert cache.full_reads == 1
        assert TreeEvent.CONNECTION_LOST in [e.event_type for e in events]
        cache.close()


def test_reads_too_big_for_one_reply_are_split(tmp_path: Path) -> None:
    """A level of the tree whose multiRead would pass the server's reply limit (half of
    clientConnectionMemoryMax) is read in smaller requests."""
    small = ServerProcess(tmp_path, clientConnectionMemoryMax=300_000, **{"jute.maxbuffer": 100_000})
    small.start()
    try:
        with SyncClient(small.hosts, timeout=4.0) as client:
            client.ensure_path("/big")
            for i in range(8):  # 8 x 60 kB in one level: 480 kB, the limit 150 kB
                client.create(f"/big/n{i}", bytes([i]) * 60_000)
            cache, _ = start_cache(client, "/big")
            assert cache_state(cache) == tree_state(client, "/big")
            settle(cache, client, "/big")
            cache.close()
    finally:
        small.kill()


def test_a_saved_mirror_of_another_history_is_dropped_and_reloaded(zabby_server: ServerProcess) -> None:
    """A saved zxid ahead of the ensemble (a mirror of another ensemble, or of one restored
    from a backup) cannot be resumed; its nodes are dropped, whatever their zxids say."""
    with SyncClient(zabby_server.hosts, timeout=4.0) as client:
        client.ensure_path("/ah/real")
        stat = [1 << 40] * 11
        saved = {"format": 1, "root": "/ah", "zxid": 1 << 40,
                 "nodes": {"/ah": ["", stat], "/ah/real": ["", stat], "/ah/ghost": ["Zw==", stat]}}  # fmt: skip
        cache, events = start_cache(client, "/ah", saved_state=saved)
        assert cache.full_reads == 1 and cache.zxid < 1 << 40
        assert cache_state(cache) == tree_state(client, "/ah")
        assert (TreeEvent.NODE_REMOVED, "/ah/ghost") in {(e.event_type, e.event_data.path) for e in events if e.event_data}
        cache.close()


def test_reconnects_under_a_steady_write_load_miss_nothing(zabby_server: ServerProcess, hub: ProxyHub) -> None:
    """30 connection resets while a writer keeps changing the tree: the cache ends equal to
    the tree having read it once."""
    import threading

    link = hub.add(zabby_server.port)
    with SyncClient(f"127.0.0.1:{link.port}", timeout=6.0) as client, SyncClient(zabby_server.hosts) as writer:
        writer.ensure_path("/st")
        cache, _ = start_cache(client, "/st")
        stop = threading.Event()

        def write() -> None:
            rng = random.Random(31)
            while not stop.is_set():
                _storm(writer, "/st", 10, rng)

        writing = threading.Thread(target=write)
        writing.start()
        try:
            for _ in range(30):
                accepted = link.accepted
                assert link.reset_connections() <= 1
                wait_until(lambda: link.accepted > accepted and client.connected, 15, "reconnected")
                time.sleep(0.05)  # writes between the resets
        finally:
            stop.set()
            writing.join(30)
        settle(cache, writer, "/st")
        assert link.accepted >= 31
        assert cache_state(cache) == tree_state(writer, "/st")
        assert cache.full_reads == 1
        cache.close()
