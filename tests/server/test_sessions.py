"""Sessions: expiry deletes ephemerals and fires watches; reattach with id and password; a
session is a logged txn, so it survives a restart."""

from __future__ import annotations

import time
from pathlib import Path

from tests.server.wire import raw_session
from zabby.errors import Err
from zabby.opcodes import EventType
from zabby.testing import ServerProcess


def _wait_event(session, deadline_s: float) -> list:  # type: ignore[no-untyped-def]
    session.sock.settimeout(deadline_s)
    return session.receive()


def test_expiry_deletes_ephemerals_and_fires_watches(zabby_server: ServerProcess) -> None:
    owner = raw_session(zabby_server.port, timeout_ms=400)  # min is 2 ticks = 400 ms
    assert owner.handshake[3] == 400
    assert owner.create("/eph", b"x", mode=1)[2] == 0
    watcher = raw_session(zabby_server.port)
    assert watcher.call(3, "/eph", True)[3] is not None
    started = time.monotonic()
    event = _wait_event(watcher, 5.0)  # the owner never pings again
    assert event[:2] == [-1, event[1]] and event[3] == EventType.NODE_DELETED and event[5] == "/eph"
    assert 0.3 < time.monotonic() - started < 3.0
    assert watcher.call(3, "/eph", False)[3] is None
    again = raw_session(zabby_server.port, session_id=owner.session_id, password=owner.password)
    assert again.err == Err.SESSIONEXPIRED


def test_timeout_is_negotiated_into_bounds(zabby_server: ServerProcess) -> None:
    assert raw_session(zabby_server.port, timeout_ms=1).handshake[3] == 400
    assert raw_session(zabby_server.port, timeout_ms=10**9).handshake[3] == 4000


def test_reattach_and_wrong_password(zabby_server: ServerProcess) -> None:
    first = raw_session(zabby_server.port)
    assert first.create("/mine", mode=1)[2] == 0
    second = raw_session(zabby_server.port, session_id=first.session_id, password=first.password)
    assert second.err == 0 and second.session_id == first.session_id
    assert second.call(103, "/")[3] == ["/mine"]
    wrong = raw_session(zabby_server.port, session_id=first.session_id, password=b"x" * 16)
    assert wrong.err == Err.SESSIONEXPIRED


def test_close_session_deletes_ephemerals_at_once(zabby_server: ServerProcess) -> None:
    owner = raw_session(zabby_server.port)
    owner.create("/e1", mode=1)
    owner.create("/e2", mode=3)
    watcher = raw_session(zabby_server.port)
    watcher.call(8, "/", True)
    assert owner.call(-11)[2] == 0
    event = _wait_event(watcher, 5.0)
    assert event[3] == EventType.NODE_CHILDREN_CHANGED and event[5] == "/"
    names = watcher.call(8, "/", False)[3]
    assert not any(name.startswith("e") for name in names)


def test_session_survives_restart(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path, maxSessionTimeout=20000)
    server.start()
    try:
        session = raw_session(server.port, timeout_ms=20000)
        assert session.create("/held", mode=1)[2] == 0
        last_zxid = session.call(3, "/held", False)[1]
        server.restart()
        again = raw_session(server.port, session_id=session.session_id, password=session.password, last_zxid=last_zxid)
        assert again.err == 0
        assert again.call(103, "/")[3] == ["/held"]
        assert again.call(4, "/held", False)[2] == 0
    finally:
        server.kill()


def test_a_session_nobody_reattaches_expires_after_a_restart(tmp_path: Path) -> None:
    """A standalone server's core leads from the start, with no state change to fill the
    session tracker from the recovered tree: its sessions never expired (issue 58)."""
    server = ServerProcess(tmp_path, tickTime=200, minSessionTimeout=400)
    server.start()
    try:
        session = raw_session(server.port, timeout_ms=1000)
        assert session.create("/left", mode=1)[2] == 0
        server.restart()
        watcher = raw_session(server.port)
        deadline = time.monotonic() + 15
        while watcher.call(4, "/left", False)[2] == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert watcher.call(4, "/left", False)[2] == Err.NONODE
    finally:
        server.kill()
