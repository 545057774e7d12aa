"""addWatch with since_zxid on the wire (zabby's msgpack extension, docs/protocol.md): the
reply first, then the watch's history addressed to that request, then live events."""

from __future__ import annotations

from tests.server.wire import raw_session
from zabby.errors import Err
from zabby.opcodes import AddWatchMode, EventType, OpCode
from zabby.testing import ServerProcess


def test_the_reply_comes_first_then_the_history_addressed_to_the_request(zabby_server: ServerProcess) -> None:
    writer = raw_session(zabby_server.port)
    since = writer.create("/r")[1]
    zxids = [writer.call(OpCode.SET_DATA, "/r", str(i).encode(), -1)[1] for i in range(3)]
    watcher = raw_session(zabby_server.port)
    xid = watcher.send(OpCode.ADD_WATCH, "/r", AddWatchMode.PERSISTENT, since)
    reply = watcher.receive()
    assert reply[0] == xid and reply[2] == 0 and reply[1] >= zxids[-1]  # the watcher's own session is a txn too
    history = [watcher.receive() for _ in zxids]
    assert history == [[-1, zxid, 0, EventType.NODE_DATA_CHANGED, 3, "/r", xid] for zxid in zxids]
    live = writer.call(OpCode.SET_DATA, "/r", b"live", -1)[1]
    assert watcher.receive() == [-1, live, 0, EventType.NODE_DATA_CHANGED, 3, "/r"]  # live: no xid


def test_a_bad_since_zxid_is_refused_and_says_why(zabby_server: ServerProcess) -> None:
    session = raw_session(zabby_server.port)
    now = session.call(OpCode.EXISTS, "/", False)[1]
    ahead = session.call(OpCode.ADD_WATCH, "/", AddWatchMode.PERSISTENT, now + 10)
    assert ahead[2] == Err.BADARGUMENTS and f"0x{now + 10:x}" in ahead[3] and f"0x{now:x}" in ahead[3]
    assert session.call(OpCode.ADD_WATCH, "/", AddWatchMode.PERSISTENT, "zero")[2] == Err.BADARGUMENTS
    assert session.call(OpCode.ADD_WATCH, "/", 7, 0)[2] == Err.BADARGUMENTS
    assert session.call(OpCode.ADD_WATCH, "/", AddWatchMode.PERSISTENT, None)[2] == 0  # no zxid: a plain addWatch


def test_a_history_over_the_reply_limit_is_refused_as_compacted(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A replay is bounded by the session's reply limit (half of clientConnectionMemoryMax):
    refused with the oldest zxid it could serve, never queued past the connection's budget."""
    server = ServerProcess(tmp_path, clientConnectionMemoryMax=3 * 2**20 + 3 * 1024)  # a reply limit near 1.5 MiB
    server.start()
    try:
        session = raw_session(server.port)
        since = session.create("/big")[1]
        long_name = "/big/" + "x" * 4000
        zxids = []
        for batch in range(10):  # 10 multis of 50 creates and 50 deletes of a 4 KB path: about 4 MB of events
            paths = [f"{long_name}{batch}-{index}" for index in range(50)]
            ops = [[OpCode.CREATE, path, b"", [[31, "world", "anyone"]], 0, None] for path in paths]
            reply = session.call(OpCode.MULTI, ops + [[OpCode.DELETE, path, -1] for path in paths])
            assert reply[2] == 0
            zxids.append(reply[1])
        reply = session.call(OpCode.ADD_WATCH, "/big", AddWatchMode.PERSISTENT_RECURSIVE, since)
        assert reply[2] == Err.HISTORYCOMPACTED and "reply limit" in reply[3]
        oldest = reply[4]
        assert since < oldest < zxids[-1]
        fits = session.call(OpCode.ADD_WATCH, "/big", AddWatchMode.PERSISTENT_RECURSIVE, oldest)
        assert fits[2] == 0
    finally:
        server.kill()
