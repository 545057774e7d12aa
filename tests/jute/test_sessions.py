"""Sessions over jute: ephemerals go with the session, re-attach with id + password, expired
sessions answered as ZooKeeper does, lastZxidSeen honoured, failover inside an ensemble."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import EventType, KazooState

from tests.jute.conftest import start_kazoo, stop_kazoo
from tests.jute.helpers import JuteSession, jute_session, read_all, wait_until
from zabby.opcodes import OpCode
from zabby.testing import Ensemble, ServerProcess
from zabby.wire import jute


def test_ephemerals_are_deleted_when_the_session_closes(shared_server: ServerProcess, kz: KazooClient) -> None:
    owner = start_kazoo(shared_server.hosts)
    owner.create("/eph-parent")
    owner.create("/eph-parent/mine", b"", ephemeral=True)
    assert kz.exists("/eph-parent/mine").ephemeralOwner == owner.client_id[0]
    deleted = threading.Event()
    kz.exists("/eph-parent/mine", watch=lambda event: event.type == EventType.DELETED and deleted.set())
    stop_kazoo(owner)  # closeSession
    assert deleted.wait(5)
    assert kz.exists("/eph-parent/mine") is None
    kz.delete("/eph-parent")


def test_ephemerals_go_when_the_session_expires(shared_server: ServerProcess, kz: KazooClient) -> None:
    session = jute_session(shared_server.port, timeout_ms=800)  # raised to minSessionTimeout (400 ms)
    header, _ = session.call(OpCode.CREATE, jute.CreateRequest("/eph-expiring", b"", [jute.ACL(31, jute.Id("world", "anyone"))], 1))
    assert header.err == 0
    session.close()  # no ping, no closeSession: the server expires it
    wait_until(lambda: kz.exists("/eph-expiring") is None, 10, "the expired session's ephemeral to go")


def test_reattach_with_id_and_password_keeps_the_session(shared_server: ServerProcess, kz: KazooClient) -> None:
    first = jute_session(shared_server.port, timeout_ms=6000)
    assert first.response is not None and first.response.timeout_ms == 4000  # maxSessionTimeout = 20 ticks
    session_id, password = first.response.session_id, first.response.password
    assert len(password or b"") == 16
    header, _ = first.call(OpCode.CREATE, jute.CreateRequest("/reattach", b"", [jute.ACL(31, jute.Id("world", "anyone"))], 1))
    assert header.err == 0
    first.sock.close()
    with jute_session(shared_server.port, session_id=session_id, password=password, last_zxid=header.zxid) as again:
        assert again.response is not None
        assert (again.response.session_id, again.response.password) == (session_id, password)
        assert again.response.read_only is False
        header, reply = again.call(OpCode.GET_EPHEMERALS, jute.GetEphemeralsRequest("/"))
        assert reply.ephemerals == ["/reattach"]
        again.call(OpCode.CLOSE_SESSION)
    assert kz.exists("/reattach") is None


def test_unknown_or_wrong_password_session_is_reported_expired(shared_server: ServerProcess, kz: KazooClient) -> None:
    with jute_session(shared_server.port) as live:
        assert live.response is not None
        for session_id, password in ((0x7EADBEEF, bytes(16)), (live.response.session_id, b"x" * 16)):
            with JuteSession(shared_server.port) as probe:
                response = probe.connect(session_id=session_id, password=password)
                assert (response.timeout_ms, response.session_id, response.password) == (0, 0, bytes(16))
                assert read_all(probe.sock) == b""  # and the server closes the connection
    states: list[str] = []
    stale = KazooClient(hosts=shared_server.hosts, timeout=4.0, client_id=(0x7EADBEEF, bytes(16)))
    stale.add_listener(states.append)
    try:
        stale.start(timeout=10)  # kazoo: "Session has expired", then a fresh session
        assert stale.client_id[0] not in (0, 0x7EADBEEF)
        assert states == [KazooState.CONNECTED]
        assert stale.exists("/") is not None
    finally:
        stop_kazoo(stale)


def test_a_server_behind_the_client_refuses_the_session(shared_server: ServerProcess, kz: KazooClient) -> None:
    with JuteSession(shared_server.port) as probe, pytest.raises(ConnectionError):  # closed without an answer
        probe.connect(last_zxid=2**62)
    ahead = KazooClient(hosts=shared_server.hosts, timeout=4.0)
    ahead.last_zxid = 2**62  # as if it had seen a newer server: it must not be served here
    try:
        with pytest.raises(Exception):  # noqa: B017 (kazoo's timeout class depends on the handler)
            ahead.start(timeout=1.5)
    finally:
        ahead.stop()
        ahead.close()
    with JuteSession(shared_server.port) as probe:  # the read-only flag is read and answered
        response = probe.connect(read_only=True)
        assert response.session_id != 0 and response.read_only is False


def _port_of(client: KazooClient) -> int:
    sock = client._connection._socket
    assert isinstance(sock, socket.socket)
    return int(sock.getpeername()[1])


def test_session_moves_to_another_server_of_the_ensemble(tmp_path: Path) -> None:
    ensemble = Ensemble(tmp_path, 3, maxSessionTimeout=8000)
    ensemble.start()
    try:
        leader = ensemble.wait_leader()
        followers = [s for sid, s in ensemble.servers.items() if sid != leader]
        hosts = ",".join(s.hosts for s in followers)
        client = KazooClient(hosts=hosts, timeout=8.0)
        states: list[str] = []
        client.add_listener(states.append)
        client.start(timeout=15)
        try:
            session = client.client_id
            client.create("/moving", b"v1", ephemeral=True)
            fired = threading.Event()
            client.get("/moving", watch=lambda event: fired.set())
            connected_to = next(s for s in followers if s.port == _port_of(client))
            connected_to.kill()
            wait_until(lambda: states and states[-1] == KazooState.CONNECTED and _port_of(client) != connected_to.port,
                       20, "kazoo to reconnect to the other follower")  # fmt: skip
            assert client.client_id == session  # same session id and password
            assert KazooState.LOST not in states
            assert client.get("/moving")[0] == b"v1"  # the ephemeral survived the move
            client.set("/moving", b"v2")
            assert client.get("/moving")[0] == b"v2"
            survivor = KazooClient(hosts=ensemble.servers[leader].hosts, timeout=8.0)
            survivor.start(timeout=10)
            try:
                assert survivor.exists("/moving").ephemeralOwner == session[0]
            finally:
                stop_kazoo(survivor)
        finally:
            stop_kazoo(client)
    finally:
        ensemble.kill_all()
