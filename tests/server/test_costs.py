"""What a client's requests may cost a server (issue 56), against a real server: the ids a
session proves, the watches it holds, charged to the memory budget and bounded."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.local.jute_session import JuteSession, read_all
from tests.jute.conftest import start_kazoo, stop_kazoo
from zabby.errors import Err
from zabby.opcodes import OpCode
from zabby.testing import ServerProcess, wait_until
from zabby.wire import jute

MiB = 2**20
BUDGET = 8 * MiB


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(Path(tmp_path_factory.mktemp("costs")), clientMemoryBudget=BUDGET, clientConnectionMemoryMax=4 * MiB)
    process.start()
    yield process
    process.kill()


def _mntr(server: ServerProcess, key: str) -> int:
    return int(server.mntr()[key])


def test_a_session_proves_at_most_max_auth_ids(server: ServerProcess) -> None:
    """20,000 made-up ``addauth digest`` on one connection froze every client for 7.7 s (a list
    searched for each), and each id made every ``auth`` ACL of the session larger."""
    with JuteSession(server.port) as session:
        session.connect()
        for n in range(32):
            assert session.call(OpCode.AUTH, jute.AuthPacket(0, "digest", f"u{n}:p".encode()), xid=jute.XID_AUTH)[0].err == 0
        used = _mntr(server, "zk_client_memory_bytes")
        assert used > 32 * 160  # each id is charged to the budget while the session holds it
        assert session.call(OpCode.AUTH, jute.AuthPacket(0, "digest", b"u0:p"), xid=jute.XID_AUTH)[0].err == 0  # one it holds: no more
        header, _ = session.call(OpCode.AUTH, jute.AuthPacket(0, "digest", b"one:more"), xid=jute.XID_AUTH)
        assert header.err == -115  # AUTHFAILED, then the connection closes
        assert read_all(session.sock) == b""
    wait_until(lambda: _mntr(server, "zk_client_memory_bytes") < used, 10, "the ids' bytes released")


def test_watches_are_charged_to_the_budget_and_the_largest_holders_closed(server: ServerProcess) -> None:
    """8 connections with 80,000 watches each held 271 MB against an 8 MiB budget: watches
    were charged to nothing."""
    bystander = start_kazoo(server.hosts)
    hoarders = [JuteSession(server.port) for _ in range(4)]
    try:
        closed = 0
        for hoarder in hoarders:
            hoarder.connect()
            for batch in range(4):  # 4 x 10,000 watches of ~220 bytes each: over the budget's share
                paths: list[str | None] = [f"/hoard/{id(hoarder)}/{batch}/{n}" for n in range(10_000)]
                try:
                    hoarder.call(OpCode.SET_WATCHES, jute.SetWatches(0, [], paths, []), xid=jute.XID_SET_WATCHES)
                except (ConnectionError, OSError):
                    closed += 1
                    break
            assert _mntr(server, "zk_client_memory_bytes") <= BUDGET + 4 * MiB
        assert closed >= 2 and _mntr(server, "zk_client_memory_closed_count") >= 2
        bystander.exists("/", watch=lambda event: None)
        assert bystander.get("/")[1] is not None
    finally:
        for hoarder in hoarders:
            hoarder.close()
        stop_kazoo(bystander)
    wait_until(lambda: _mntr(server, "zk_watch_count") == 0, 10, "every hoarder's watches forgotten")
    wait_until(lambda: _mntr(server, "zk_client_memory_bytes") < 1 * MiB, 10, "their bytes released")
    time.sleep(0.1)
    assert "Traceback" not in server.log_path.read_text()


def test_a_failure_repeated_on_every_connection_logs_one_traceback_an_interval(caplog: pytest.LogCaptureFixture) -> None:
    """A msgpack request whose op was a list logged a full traceback per connection (340 KiB
    of log from 200 connections): what a client can set off again and again is counted."""
    import logging

    import trio

    from zabby.server.process.guard import contained

    async def fails() -> None:
        raise TypeError("unhashable type: 'list'")

    async def connections() -> None:
        for _ in range(200):
            await contained("a client connection (test)", logging.getLogger("zabby.test.guard"), fails)

    with caplog.at_level(logging.ERROR, logger="zabby.test.guard"):
        trio.run(connections)
    assert len(caplog.records) == 1 and caplog.records[0].exc_info is not None


@pytest.mark.parametrize("op", [[1], {"a": 1}, 1.5, "create", None, [[1]]], ids=["list", "map", "float", "str", "nil", "nested"])
def test_a_msgpack_request_whose_op_is_no_int_is_refused_without_a_traceback(server: ServerProcess, op: object) -> None:
    from tests.server.wire import raw_session
    from zabby.wire.messages import pack_frame

    session = raw_session(server.port)
    session.sock.sendall(pack_frame([7, op, "/x", b"", [[31, "world", "anyone"]], 0]))
    reply = session.receive()
    assert reply[0] == 0 and reply[2] == -8  # BADARGUMENTS: "a request must be [xid, op, args...]"
    assert "Traceback" not in server.log_path.read_text()


def test_a_connection_is_not_read_past_its_requests_in_flight(tmp_path: Path) -> None:
    """clientOutstandingLimit: behind a waitForZxid that cannot be answered yet, reads queue in
    their turn; past the limit the connection is not read, so the server holds no more of
    them, and all are answered once the wait ends."""
    import re

    from tests.server.wire import raw_session

    limit = 50
    process = ServerProcess(tmp_path, clientOutstandingLimit=limit)
    process.start()
    try:
        session = raw_session(process.port)
        far = 1 << 40
        session.send(OpCode.WAIT_FOR_ZXID, far, 1500)
        for _ in range(3 * limit):
            session.send(OpCode.EXISTS, "/", False)

        def queued() -> int:
            found = re.findall(r"queued=(\d+)", process.four_letter("cons"))
            return max(map(int, found)) if found else 0

        wait_until(lambda: queued() == limit, 10, "the pipeline held at the limit")
        time.sleep(0.3)
        assert queued() == limit  # not one more is taken while the wait holds the line
        replies = [session.receive() for _ in range(1 + 3 * limit)]
        assert replies[0][2] == -7 and all(reply[2] == 0 for reply in replies[1:])  # OPERATIONTIMEOUT, then each read
    finally:
        process.kill()


def test_a_session_waits_for_at_most_100_zxids(server: ServerProcess) -> None:
    from tests.server.wire import raw_session

    session = raw_session(server.port)
    used = _mntr(server, "zk_client_memory_bytes")
    waits = [session.send(OpCode.WAIT_FOR_ZXID, 1 << 40, 2000) for _ in range(101)]
    wait_until(lambda: _mntr(server, "zk_client_memory_bytes") >= used + 100 * 400 - 64, 5, "each wait charged while it waits")
    answers = [session.receive() for _ in waits]  # in their order: the 101st, refused at once, answered after the others
    assert [reply[2] for reply in answers] == [-7] * 100 + [Err.THROTTLEDOP]  # OPERATIONTIMEOUT at the deadline


def test_a_read_whose_reply_passes_half_the_connection_limit_is_refused(server: ServerProcess) -> None:
    from tests.server.wire import raw_session

    session = raw_session(server.port)
    for n in range(3):
        assert session.create(f"/large{n}", b"x" * 1_000_000)[2] == 0
    reply = session.call(OpCode.MULTI_READ, [[OpCode.GET_DATA, f"/large{n}"] for n in range(3)])
    assert reply[2] == Err.BADARGUMENTS and "2097152-byte limit" in reply[3]
    assert session.call(OpCode.MULTI_READ, [[OpCode.GET_DATA, "/large0"]])[2] == 0
    for n in range(3):
        session.call(OpCode.DELETE, f"/large{n}", -1)


def test_sessions_past_max_sessions_are_refused_until_one_closes(tmp_path: Path) -> None:
    """A client that opens sessions and drops their connections leaves each open until it
    expires (~400 bytes on every server): a loop of connects grew every server's memory without
    bound.  Past ``maxSessions`` the leader refuses the createSession; the connect is closed
    unanswered (ZooKeeper's answer to a connect it does not take), and a new one succeeds once
    a session closes."""
    process = ServerProcess(tmp_path, maxSessions=3)
    process.start()
    try:
        held = [JuteSession(process.port) for _ in range(3)]
        for session in held:
            assert session.connect(timeout_ms=30_000).session_id != 0
        assert _mntr(process, "zk_global_sessions") == 3
        with JuteSession(process.port) as refused:
            with pytest.raises(ConnectionError):
                refused.connect()
        assert "the most maxSessions allows" in process.log_path.read_text()
        header, _ = held[0].call(OpCode.CLOSE_SESSION, None)
        assert header.err == 0
        wait_until(lambda: _mntr(process, "zk_global_sessions") == 2, 10, "the session closed")
        with JuteSession(process.port) as admitted:
            assert admitted.connect().session_id != 0
    finally:
        for session in held:
            session.close()
        process.kill()


def test_the_tree_past_max_znodes_or_max_tree_bytes_refuses_growth_with_quota_exceeded(tmp_path: Path) -> None:
    """Nothing bounded the tree itself: creates until every member ran out of memory.  Past
    ``maxZnodes`` or ``maxTreeBytes`` a write that would grow it is refused (kazoo's
    QuotaExceededError); deletes and smaller data pass, and a restart keeps the bound."""
    from kazoo.exceptions import QuotaExceededError

    process = ServerProcess(tmp_path, maxZnodes=24, maxTreeBytes=40_000)
    process.start()
    client = start_kazoo(f"127.0.0.1:{process.port}")
    try:
        client.create("/big", b"x" * 30_000)
        with pytest.raises(QuotaExceededError):
            client.create("/bigger", b"x" * 20_000)
        with pytest.raises(QuotaExceededError):
            client.set("/big", b"x" * 40_000)
        client.set("/big", b"x" * 10_000)
        made = 0
        with pytest.raises(QuotaExceededError):
            for made in range(30):
                client.create(f"/n{made}")
        # mntr counts the root twice, as ZooKeeper does; the tree holds /, /zookeeper, its config and quota, /big
        assert _mntr(process, "zk_znode_count") == 24 + 1 and made == 24 - 5
        client.delete("/n0")
        client.create("/n0-again")
        stop_kazoo(client)
        process.kill()
        process.start()
        client = start_kazoo(f"127.0.0.1:{process.port}")
        with pytest.raises(QuotaExceededError):
            client.create("/after-restart")
    finally:
        stop_kazoo(client)
        process.kill()


def test_one_source_holds_at_most_max_sessions_per_host_of_the_sessions_a_server_made(tmp_path: Path) -> None:
    """One address that opened sessions and dropped their connections could take all of
    ``maxSessions`` (the adversary's session-churn opened 20,000 from one address): a server
    makes at most ``maxSessionsPerHost`` for one source while they live; other sources are not
    held back, and a session that closes makes room."""
    import socket

    process = ServerProcess(tmp_path, maxSessionsPerHost=3)
    process.start()
    held = [JuteSession(process.port) for _ in range(3)]
    try:
        for session in held:
            assert session.connect(timeout_ms=30_000).session_id != 0
        with JuteSession(process.port) as refused:
            with pytest.raises(ConnectionError):
                refused.connect()
        assert "the most maxSessionsPerHost allows" in process.log_path.read_text()
        elsewhere = socket.create_connection(("127.0.0.1", process.port), timeout=10, source_address=("127.0.0.2", 0))
        with JuteSession(sock=elsewhere) as other:
            assert other.connect().session_id != 0
        header, _ = held[0].call(OpCode.CLOSE_SESSION, None)
        assert header.err == 0
        wait_until(lambda: _mntr(process, "zk_global_sessions") == 3, 10, "the session closed")  # two held, 127.0.0.2's
        with JuteSession(process.port) as admitted:
            assert admitted.connect().session_id != 0
    finally:
        for session in held:
            session.close()
        process.kill()
