"""Malformed jute closes that connection (with a log line); the server keeps serving everyone."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.jute.helpers import OPEN_ACL, JuteSession, jute_session, read_all, wait_until
from tests.server.wire import raw_session
from zabby.opcodes import OpCode
from zabby.testing import ServerProcess
from zabby.wire import jute


def _header(xid: int, op: int) -> bytes:
    return struct.pack(">ii", xid, op)


def _closed_after(session: JuteSession, data: bytes) -> bytes:
    session.sock.sendall(data)
    return read_all(session.sock)


MALFORMED_REQUESTS = {
    # a frame whose body stops inside the CreateRequest (path length says 100, 3 bytes follow)
    "truncated record": jute.frame(_header(1, OpCode.CREATE) + struct.pack(">i", 100) + b"/ab"),
    # a GetData with no watch byte
    "truncated boolean": jute.frame(_header(1, OpCode.GET_DATA) + struct.pack(">i", 2) + b"/a"),
    # a data buffer claiming 2 MiB, over jute.maxbuffer (1 MiB - 1)
    "huge buffer": jute.frame(_header(1, OpCode.SET_DATA) + struct.pack(">i", 2) + b"/a" + struct.pack(">i", 2 * 2**20) + b"x" * 16),
    # a negative length other than -1
    "negative length": jute.frame(_header(1, OpCode.EXISTS) + struct.pack(">i", -7) + b"\x00"),
    # a vector count beyond the bytes that follow
    "huge vector": jute.frame(_header(1, OpCode.SET_WATCHES) + struct.pack(">qi", 0, 2**30)),
    # a multi carrying an op that cannot be part of one
    "bad multi op": jute.frame(_header(1, OpCode.MULTI) + jute.MultiHeader(OpCode.SYNC, False, -1).encode() + jute.SyncRequest("/").encode()),
    # a path that is not UTF-8
    "not utf-8": jute.frame(_header(1, OpCode.EXISTS) + struct.pack(">i", 2) + b"/\xff" + b"\x00"),
    # a frame length over jute.maxbuffer (+1 KiB for headers), no payload follows
    "frame over maxbuffer": struct.pack(">i", 3 * 2**20),
    # a negative frame length
    "negative frame length": struct.pack(">i", -5),
    # a frame too short for a RequestHeader
    "short header": jute.frame(b"\x00\x00\x00"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED_REQUESTS))
def test_malformed_request_closes_only_that_connection(shared_server: ServerProcess, name: str) -> None:
    bystander = jute_session(shared_server.port)
    with jute_session(shared_server.port) as victim:
        assert _closed_after(victim, MALFORMED_REQUESTS[name]) == b""  # closed, nothing answered
    assert shared_server.four_letter("ruok") == "imok"
    header, reply = bystander.call(OpCode.EXISTS, jute.ExistsRequest("/", False))
    assert header.err == 0 and reply.stat.num_children >= 1
    bystander.close()


def test_malformed_connect_requests_are_closed(shared_server: ServerProcess) -> None:
    for data in (
        jute.frame(struct.pack(">iqiq", 0, 0, 4000, 0)),  # no password
        jute.frame(struct.pack(">iqiqi", 0, 0, 4000, 0, 999) + b"x"),  # password longer than the frame
        jute.frame(struct.pack(">iqiqi", 7, 0, 4000, 0, 0)),  # protocol version 7: starts 0x00 but is not 0
        b"\x00\x00\x00",  # three bytes, then the client goes away
    ):
        with socket.create_connection(("127.0.0.1", shared_server.port), timeout=5) as sock:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            assert read_all(sock) == b""
    assert shared_server.four_letter("ruok") == "imok"

    def logged() -> bool:  # rate-limited: the first close at once, a count of the rest within a second
        log = shared_server.log_path.read_text()
        return "closing jute connection" in log and ("truncated record" in log or "protocol version 7" in log)

    wait_until(logged, 5.0, "the closes logged")


def test_a_malformed_request_after_good_ones_closes_the_connection(shared_server: ServerProcess) -> None:
    with jute_session(shared_server.port) as session:
        good = jute.encode_request(1, OpCode.EXISTS, jute.ExistsRequest("/", False))
        session.sock.sendall(good + MALFORMED_REQUESTS["truncated record"])
        rest = read_all(session.sock)  # the good request's reply, then the close
        header, _ = jute.decode_reply(rest[4 : 4 + int.from_bytes(rest[:4], "big")], OpCode.EXISTS)
        assert header.xid == 1 and header.err == 0
    assert shared_server.four_letter("ruok") == "imok"


def test_pipelined_requests_are_answered_in_order(shared_server: ServerProcess) -> None:
    with jute_session(shared_server.port) as session:
        burst = b"".join(
            jute.encode_request(xid, OpCode.CREATE, jute.CreateRequest(f"/pipe-{xid}", b"", OPEN_ACL, 1)) if xid % 2
            else jute.encode_request(xid, OpCode.EXISTS, jute.ExistsRequest(f"/pipe-{xid - 1}", False))
            for xid in range(1, 201)
        )  # fmt: skip
        session.sock.sendall(burst)
        for xid in range(1, 201):
            header, record = session.reply(xid, OpCode.CREATE if xid % 2 else OpCode.EXISTS)
            assert header.err == 0, (xid, header)
            if xid % 2 == 0:
                assert isinstance(record, jute.ExistsResponse)  # the write before it is visible


def test_jute_can_be_turned_off(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path, juteEnabled="false")
    server.start()
    try:
        with JuteSession(server.port) as probe:
            probe.sock.sendall(jute.frame(jute.ConnectRequest(0, 0, 4000, 0, bytes(16)).encode()))
            answer = read_all(probe.sock)
        assert b"MARSHALLING" in answer or b"malformed" in answer or b"first frame" in answer  # msgpack's error
        client = KazooClient(hosts=server.hosts, timeout=2.0, connection_retry={"max_tries": 0})
        with pytest.raises(Exception):  # noqa: B017 (kazoo's timeout class depends on the handler)
            client.start(timeout=1.5)
        client.stop()
        client.close()
        assert raw_session(server.port).call(OpCode.EXISTS, "/", False)[2] == 0  # msgpack still served
        assert server.four_letter("ruok") == "imok"
    finally:
        server.kill()


def test_an_unknown_four_letter_word_is_refused_at_once(shared_server: ServerProcess) -> None:
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", shared_server.port), timeout=5) as sock:
        sock.sendall(b"hash")  # a 3.6+ word zabby does not have; nc-style, then wait
        read_all(sock)
    assert time.monotonic() - started < 3  # not held for the handshake timeout
    assert shared_server.four_letter("ruok") == "imok"
