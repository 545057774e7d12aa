"""Watches over the wire: one-shot data/child/exists watches, the event-before-data
guarantee, persistent and recursive watches, removeWatches, and setWatches after reconnect."""

from __future__ import annotations

from tests.server.wire import raw_session
from zabby.errors import Err
from zabby.opcodes import AddWatchMode, EventType, WatcherType
from zabby.testing import ServerProcess


def _events(session) -> list[tuple[int, str]]:  # type: ignore[no-untyped-def]
    out = [(event[3], event[5]) for event in session.events]
    session.events.clear()
    return out


def test_event_arrives_before_the_new_data(zabby_server: ServerProcess) -> None:
    reader, writer = raw_session(zabby_server.port), raw_session(zabby_server.port)
    writer.create("/w", b"old")
    assert reader.call(4, "/w", True)[3] == b"old"
    for round_ in range(20):
        writer.call(5, "/w", f"new{round_}".encode(), -1)
        reply = reader.call(4, "/w", True)  # the event must be ahead of this reply
        assert _events(reader) == [(EventType.NODE_DATA_CHANGED, "/w")]
        assert reply[3] == f"new{round_}".encode()


def test_one_shot_watch_kinds(zabby_server: ServerProcess) -> None:
    watcher, writer = raw_session(zabby_server.port), raw_session(zabby_server.port)
    assert watcher.call(3, "/x", True)[3] is None  # exists on a missing node
    writer.create("/x")
    watcher.call(8, "/x", True)
    assert _events(watcher) == [(EventType.NODE_CREATED, "/x")]
    writer.create("/x/c")
    writer.create("/x/d")  # the child watch was one-shot: only one event
    watcher.call(3, "/", False)
    assert _events(watcher) == [(EventType.NODE_CHILDREN_CHANGED, "/x")]
    watcher.call(4, "/x/c", True)
    watcher.call(8, "/x/c", True)
    writer.call(2, "/x/c", -1)
    watcher.call(3, "/", False)
    assert _events(watcher) == [(EventType.NODE_DELETED, "/x/c")]  # one event for both watches


def test_persistent_and_recursive_watches(zabby_server: ServerProcess) -> None:
    watcher, writer = raw_session(zabby_server.port), raw_session(zabby_server.port)
    writer.create("/p")
    assert watcher.call(106, "/p", AddWatchMode.PERSISTENT)[2] == 0
    assert watcher.call(106, "/p", AddWatchMode.PERSISTENT_RECURSIVE)[2] == 0
    writer.call(5, "/p", b"1", -1)
    writer.call(5, "/p", b"2", -1)
    writer.create("/p/a")
    writer.create("/p/a/b")
    watcher.call(3, "/", False)
    events = _events(watcher)
    assert events.count((EventType.NODE_DATA_CHANGED, "/p")) == 2
    assert (EventType.NODE_CHILDREN_CHANGED, "/p") in events  # persistent on /p
    assert (EventType.NODE_CREATED, "/p/a/b") in events  # recursive on the subtree
    assert (EventType.NODE_CHILDREN_CHANGED, "/p/a") not in events  # recursive never sends child events
    assert watcher.call(18, "/p", WatcherType.ANY)[2] == 0
    assert watcher.call(18, "/p", WatcherType.ANY)[2] == Err.NOWATCHER
    writer.call(5, "/p", b"3", -1)
    watcher.call(3, "/", False)
    assert _events(watcher) == []


def test_check_and_remove_watches(zabby_server: ServerProcess) -> None:
    watcher = raw_session(zabby_server.port)
    watcher.create("/r")
    watcher.call(4, "/r", True)
    assert watcher.call(17, "/r", WatcherType.DATA)[2] == 0
    assert watcher.call(17, "/r", WatcherType.CHILDREN)[2] == Err.NOWATCHER
    assert watcher.call(18, "/r", WatcherType.DATA)[2] == 0
    assert watcher.call(17, "/r", WatcherType.DATA)[2] == Err.NOWATCHER


def test_set_watches_fires_missed_events(zabby_server: ServerProcess) -> None:
    writer = raw_session(zabby_server.port)
    writer.create("/s", b"a")
    writer.create("/gone")
    seen_zxid = writer.call(3, "/s", False)[1]
    writer.call(5, "/s", b"b", -1)
    writer.call(2, "/gone", -1)
    writer.create("/born")
    watcher = raw_session(zabby_server.port)
    watcher.call(101, seen_zxid, ["/s", "/gone"], ["/born", "/unborn"], [], [], [])
    watcher.call(3, "/", False)
    assert sorted(_events(watcher)) == sorted([
        (EventType.NODE_CREATED, "/born"),
        (EventType.NODE_DELETED, "/gone"),
        (EventType.NODE_DATA_CHANGED, "/s"),
    ])  # fmt: skip
    writer.create("/unborn")  # the exists watch that had nothing to report is registered
    watcher.call(3, "/", False)
    assert _events(watcher) == [(EventType.NODE_CREATED, "/unborn")]


def test_set_watches_fires_no_missed_event_about_a_node_the_session_may_not_read(zabby_server: ServerProcess) -> None:
    """A stale relative zxid was an oracle: NodeCreated, NodeDataChanged, NodeChildrenChanged
    about protected nodes told a session without READ that they exist and changed when."""
    owner = raw_session(zabby_server.port)
    assert owner.call(100, "digest", b"alice:secret")[2] == 0
    alice_only = [[31, "auth", ""]]
    owner.call(15, "/open", b"", [[31, "world", "anyone"]], 0, 0)
    for path in ("/hidden", "/hidden-born"):
        owner.call(15, path, b"", alice_only, 0, 0)
    owner.call(15, "/hidden/child", b"", alice_only, 0, 0)
    owner.call(5, "/hidden", b"changed", -1)
    owner.call(5, "/open", b"changed", -1)
    stranger = raw_session(zabby_server.port)
    stranger.call(101, 1, ["/hidden", "/open"], ["/hidden-born"], ["/hidden"], [], [])
    stranger.call(3, "/", False)
    assert _events(stranger) == [(EventType.NODE_DATA_CHANGED, "/open")]
    alice = raw_session(zabby_server.port)
    alice.call(100, "digest", b"alice:secret")
    alice.call(101, 1, ["/hidden"], ["/hidden-born"], ["/hidden"], [], [])
    alice.call(3, "/", False)
    assert sorted(_events(alice)) == sorted([(EventType.NODE_DATA_CHANGED, "/hidden"), (EventType.NODE_CREATED, "/hidden-born"),
                                             (EventType.NODE_CHILDREN_CHANGED, "/hidden")])  # fmt: skip
    owner.call(5, "/hidden", b"again", -1)  # the stranger's watch on it was used up, as a held-back event's is
    stranger.call(3, "/", False)
    assert _events(stranger) == []


def test_connection_limit_per_ip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    server = ServerProcess(tmp_path, maxClientCnxns=3)
    server.start()
    try:
        sessions = [raw_session(server.port) for _ in range(3)]
        assert all(s.err == 0 for s in sessions)
        try:
            extra = raw_session(server.port)
            refused = False
            extra.call(3, "/", False)
        except (ConnectionError, OSError):
            refused = True
        assert refused
        assert "too many connections" in server.log_tail()
    finally:
        server.kill()
