"""waitForZxid (zabby's msgpack extension): answered once the server has applied the zxid,
or OPERATIONTIMEOUT at the deadline; bounded per session; requests after it wait their turn."""

from __future__ import annotations

import time

from harness.local.jute_session import JuteSession
from tests.server.wire import raw_session
from zabby.engine.clients import ZXID_WAITS_PER_SESSION_MAX, ZxidWaiters
from zabby.errors import Err
from zabby.opcodes import OpCode
from zabby.testing import ServerProcess
from zabby.wire import jute


def test_waits_are_answered_lowest_zxid_first_at_their_deadline_or_never_once_dropped() -> None:
    waiters = ZxidWaiters()
    answers: list[tuple[str, bool]] = []
    for name, zxid, deadline in (("c", 7, 100), ("a", 5, 100), ("b", 6, 50), ("gone", 5, 100)):
        waiters.put(zxid, deadline, "gone" if name == "gone" else "session", lambda applied, name=name: answers.append((name, applied)))  # type: ignore[misc]
    waiters.drop("gone")
    waiters.expire(60)
    assert answers == [("b", False)]
    waiters.applied(7)
    assert answers == [("b", False), ("a", True), ("c", True)]
    assert not waiters and waiters.count("session") == 0


def test_a_wait_is_answered_once_the_zxid_is_applied_and_reads_after_it_wait_their_turn(zabby_server: ServerProcess) -> None:
    waiter, writer = raw_session(zabby_server.port), raw_session(zabby_server.port)
    writer.create("/w")
    now = writer.call(OpCode.EXISTS, "/w", False)[1]
    assert waiter.call(OpCode.WAIT_FOR_ZXID, now, 1000)[2:] == [0, now]  # applied already: at once
    wait = waiter.send(OpCode.WAIT_FOR_ZXID, now + 1, 5000)
    read = waiter.send(OpCode.GET_DATA, "/w", False)  # behind the wait: it sees the write
    time.sleep(0.2)
    written = writer.call(OpCode.SET_DATA, "/w", b"new", -1)[1]
    assert written == now + 1
    answer = waiter.receive()
    assert answer[0] == wait and answer[2:] == [0, written]
    reply = waiter.receive()
    assert reply[0] == read and reply[3] == b"new"


def test_a_wait_for_a_zxid_never_reached_times_out_and_says_where_the_server_is(zabby_server: ServerProcess) -> None:
    session = raw_session(zabby_server.port)
    future = (99 << 32) + 1  # an epoch this server cannot know: waited for like any other
    started = time.monotonic()
    reply = session.call(OpCode.WAIT_FOR_ZXID, future, 300)
    assert reply[2] == Err.OPERATIONTIMEOUT and f"0x{future:x}" in reply[3]
    assert 0.25 < time.monotonic() - started < 5


def test_waits_are_bounded_per_session_and_bad_ones_refused(zabby_server: ServerProcess) -> None:
    session = raw_session(zabby_server.port)
    future = (99 << 32) + 1
    xids = [session.send(OpCode.WAIT_FOR_ZXID, future, 500) for _ in range(ZXID_WAITS_PER_SESSION_MAX + 1)]
    replies = {reply[0]: reply for reply in (session.receive() for _ in xids)}
    assert [replies[xid][2] for xid in xids] == [Err.OPERATIONTIMEOUT] * ZXID_WAITS_PER_SESSION_MAX + [Err.THROTTLEDOP]
    for args in ((), (-1, 10), ("1", 10), (1, True), (1, 2, 3)):
        assert session.call(OpCode.WAIT_FOR_ZXID, *args)[2] == Err.BADARGUMENTS


def test_a_jute_client_is_answered_as_zookeeper_answers_an_unknown_op(zabby_server: ServerProcess) -> None:
    with JuteSession(zabby_server.port, timeout_s=10) as session:
        session.connect(timeout_ms=10_000)
        xid = session.send(OpCode.WAIT_FOR_ZXID, None)
        header = jute.ReplyHeader.decode(session.receive_frame()[:16])
        assert header.xid == xid and header.err == Err.UNIMPLEMENTED
