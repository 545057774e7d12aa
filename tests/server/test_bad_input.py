"""Bad input gets a clear error; the server stays up for everyone else."""

from __future__ import annotations

import socket

from tests.procs import ServerProcess
from tests.server.wire import raw_session
from zabby.errors import Err
from zabby.wire.messages import pack_frame


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def test_garbage_bytes_close_only_that_connection(zabby_server: ServerProcess) -> None:
    bystander = raw_session(zabby_server.port)
    for garbage in (b"\x00\x00\x00\x05\xc1\xc1\xc1\xc1\xc1", b"\x00\x00\x00\x02\x01\x02", b"\x00\x00\x00\x01\x93"):
        with socket.create_connection(("127.0.0.1", zabby_server.port), timeout=5) as sock:
            sock.sendall(garbage)
            sock.shutdown(socket.SHUT_WR)
            reply = _read_all(sock)
        assert reply == b"" or b"MARSHALLING" in reply or b"malformed" in reply or b"first frame" in reply
    assert zabby_server.four_letter("ruok") == "imok"
    assert bystander.call(3, "/", False)[2] == 0


def test_oversize_frame_is_refused_and_closed(zabby_server: ServerProcess) -> None:
    session = raw_session(zabby_server.port)
    session.sock.sendall((2 * 1024 * 1024).to_bytes(4, "big"))  # no payload: nothing unread to reset the socket
    reply = session.receive()
    assert reply[2] == Err.MARSHALLINGERROR
    assert "limit" in reply[3]
    assert _read_all(session.sock) == b""
    assert raw_session(zabby_server.port).call(3, "/", False)[2] == 0


def test_large_value_over_jute_maxbuffer_is_refused(zabby_server: ServerProcess) -> None:
    session = raw_session(zabby_server.port)
    reply = session.call(15, "/big", b"x" * (1024 * 1024 + 1), [[31, "world", "anyone"]], 0, 0)
    assert reply[2] == Err.BADARGUMENTS
    assert session.call(3, "/big", False)[3] is None


def test_bad_paths_answer_bad_arguments_and_keep_the_connection(zabby_server: ServerProcess) -> None:
    session = raw_session(zabby_server.port)
    for path in ("", "a", "/a/", "/a//b", "/a/./b", "/a/../b", "/a\x00b", "/a\x01"):
        reply = session.create(path)
        assert reply[2] == Err.BADARGUMENTS, (path, reply)
        assert session.call(4, path, False)[2] == Err.BADARGUMENTS
    assert session.create("/ok")[2] == 0


def test_unknown_op_and_malformed_request(zabby_server: ServerProcess) -> None:
    session = raw_session(zabby_server.port)
    assert session.call(999)[2] == Err.UNIMPLEMENTED
    assert session.call(4, "/")[2] == Err.BADARGUMENTS  # missing the watch flag
    assert session.call(15, "/x", "not-bytes", [], 0, 0)[2] in (Err.BADARGUMENTS, Err.INVALIDACL)
    session.sock.sendall(pack_frame(["not", "a", "request"]))
    assert session.receive()[2] == Err.BADARGUMENTS
    assert session.call(3, "/", False)[2] == 0


def test_bad_handshake_and_unknown_session(zabby_server: ServerProcess) -> None:
    with socket.create_connection(("127.0.0.1", zabby_server.port), timeout=5) as sock:
        sock.sendall(pack_frame(["hello"]))
        assert b"connect request" in _read_all(sock)
    refused = raw_session(zabby_server.port, session_id=12345, password=b"nope")
    assert refused.err == Err.SESSIONEXPIRED
    assert zabby_server.four_letter("ruok") == "imok"


def test_client_from_the_future_is_refused(zabby_server: ServerProcess) -> None:
    refused = raw_session(zabby_server.port, last_zxid=1 << 60)
    assert refused.err == Err.CONNECTIONLOSS


def test_replies_before_a_malformed_frame_are_delivered(zabby_server: ServerProcess) -> None:
    for _ in range(20):  # the writer once closed with replies still queued: check it repeatedly
        session = raw_session(zabby_server.port)
        session.sock.sendall(pack_frame([1, 3, "/", False]) + b"\x00\x00\x00\x02\xc1\xc1")
        reply = session.receive()
        assert reply[0] == 1 and reply[2] == 0
        assert session.receive()[2] == Err.MARSHALLINGERROR
