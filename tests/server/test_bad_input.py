"""Bad input gets a clear error; the server stays up for everyone else."""

from __future__ import annotations

import socket
import struct
import time

from tests.server.wire import OPEN_ACL, raw_session
from zabby.errors import Err
from zabby.testing import ServerProcess
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


def test_bad_paths_answer_as_in_zookeeper_and_keep_the_connection(zabby_server: ServerProcess) -> None:
    """A create refuses a path with no "/" or with a NUL, then looks the parent up (NONODE),
    and checks the whole path last; a read only looks the path up (exists answers "no such
    node" with OK and no Stat), and exists alone refuses a NUL."""
    session = raw_session(zabby_server.port)
    expected = {  # path: (create, getData, exists)
        "": (Err.BADARGUMENTS, Err.NONODE, Err.OK),
        "a": (Err.BADARGUMENTS, Err.NONODE, Err.OK),
        "/a/": (Err.NONODE, Err.NONODE, Err.OK),
        "/a//b": (Err.NONODE, Err.NONODE, Err.OK),
        "/a/./b": (Err.NONODE, Err.NONODE, Err.OK),
        "/a\x00b": (Err.BADARGUMENTS, Err.NONODE, Err.BADARGUMENTS),
        "/a\x01": (Err.BADARGUMENTS, Err.NONODE, Err.OK),  # its parent "/" is there
    }
    for path, codes in expected.items():
        got = (session.create(path)[2], session.call(4, path, False)[2], session.call(3, path, False)[2])
        assert got == codes, path
    assert session.create("/ok")[2] == 0


def test_unknown_op_and_malformed_request(zabby_server: ServerProcess) -> None:
    session = raw_session(zabby_server.port)
    assert session.call(999)[2] == Err.UNIMPLEMENTED
    assert session.call(4, "/")[2] == Err.BADARGUMENTS  # missing the watch flag
    assert session.call(15, "/x", "not-bytes", [], 0, 0)[2] in (Err.BADARGUMENTS, Err.INVALIDACL)
    assert session.call(3, "/", False)[2] == 0  # a bad argument costs the request, not the connection
    session.sock.sendall(pack_frame(["not", "a", "request"]))  # no xid: nothing can be answered in order after it
    reply = session.receive()
    assert reply[2] == Err.BADARGUMENTS and "[xid, op, args...]" in reply[3]
    assert _read_all(session.sock) == b""  # and the connection is closed
    assert raw_session(zabby_server.port).call(3, "/", False)[2] == 0


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


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0): the server's next write to it breaks (EPIPE)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_a_client_that_resets_while_the_server_writes_ends_only_its_connection(zabby_server: ServerProcess) -> None:
    """The server writes many large replies to a client that reads none and then resets: the
    write breaks (EPIPE).  That used to leave ``Connection.run`` as an ExceptionGroup, which
    its ``except BrokenResourceError`` never matched, and kill the whole server."""
    writer = raw_session(zabby_server.port)
    assert writer.call(1, "/big", b"x" * 900_000, OPEN_ACL, 0, None)[2] == 0
    bystander = raw_session(zabby_server.port)
    for _ in range(3):
        greedy = raw_session(zabby_server.port)
        greedy.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        for _ in range(40):
            greedy.send(4, "/big", False)  # getData: 40 x 900 kB of replies nobody reads
        time.sleep(0.3)  # the server is blocked writing to the full socket
        _reset(greedy.sock)
    time.sleep(0.5)
    assert zabby_server.proc is not None and zabby_server.proc.poll() is None, zabby_server.log_tail()
    assert zabby_server.four_letter("ruok") == "imok"
    assert bystander.call(3, "/big", False)[2] == 0
    assert "Traceback" not in zabby_server.log_path.read_text()


def test_an_admin_client_that_resets_mid_request_leaves_the_server_up(zabby_server: ServerProcess) -> None:
    for _ in range(3):
        sock = socket.create_connection(("127.0.0.1", zabby_server.admin_port), timeout=5)
        sock.sendall(b"GET /commands/mntr HTTP/1.1\r\n")  # no end of headers: the server is reading
        time.sleep(0.1)
        _reset(sock)
    time.sleep(0.3)
    assert zabby_server.proc is not None and zabby_server.proc.poll() is None, zabby_server.log_tail()
    assert zabby_server.four_letter("ruok") == "imok"
    assert "Traceback" not in zabby_server.log_path.read_text()
