"""A raw, blocking jute session: ZooKeeper's client protocol one frame at a time, for byte-level
checks, the ops kazoo has no method for, and the hostile clients of the fault harness
(``harness.jepsen.hostile``).  Real programs use kazoo or ``zabby.SyncClient``."""

from __future__ import annotations

import socket
from typing import Any, Self

from zabby.wire import jute
from zabby.wire.framing import FrameDecoder

OPEN_ACL = [jute.ACL(31, jute.Id("world", "anyone"))]
REPLY_BYTES_MAX = 64 * 2**20  # a raw session reads large replies too (kazoo sets no limit)


def read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes the connection (bounded by the socket timeout)."""
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


class JuteSession:
    """One raw jute connection: ``connect`` sends a ConnectRequest and reads the answer."""

    def __init__(self, port: int = 0, *, timeout_s: float = 10.0, host: str = "127.0.0.1", sock: socket.socket | None = None) -> None:
        """Connect to ``host:port``, or use ``sock``, already connected (from a chosen address, say)."""
        self.sock = sock if sock is not None else socket.create_connection((host, port), timeout=timeout_s)
        self.decoder = FrameDecoder(REPLY_BYTES_MAX)
        self.frames: list[bytes] = []
        self.events: list[jute.WatcherEvent] = []
        self.xid = 0
        self.response: jute.ConnectResponse | None = None

    def connect(self, *, session_id: int = 0, password: bytes = bytes(16), timeout_ms: int = 4000,
                last_zxid: int = 0, read_only: bool = False) -> jute.ConnectResponse:  # fmt: skip
        request = jute.ConnectRequest(0, last_zxid, timeout_ms, session_id, password, read_only)
        self.sock.sendall(jute.frame(request.encode()))
        self.response = jute.ConnectResponse.decode(self.receive_frame())
        return self.response

    def receive_frame(self) -> bytes:
        while not self.frames:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("server closed the connection")
            self.frames.extend(self.decoder.receive_data(data))
        return self.frames.pop(0)

    def send(self, op: int, record: jute.Record | None = None, xid: int | None = None) -> int:
        if xid is None:
            self.xid += 1
            xid = self.xid
        self.sock.sendall(jute.encode_request(xid, op, record))
        return xid

    def reply(self, xid: int, op: int) -> tuple[jute.ReplyHeader, jute.Record | None]:
        """The reply for ``xid``, collecting the watch events that come before it."""
        while True:
            header, record = jute.decode_reply(self.receive_frame(), op)
            if header.xid == jute.XID_NOTIFICATION:
                assert isinstance(record, jute.WatcherEvent)
                self.events.append(record)
                continue
            assert header.xid == xid, f"reply for xid {header.xid} while waiting for {xid}"
            return header, record

    def call(self, op: int, record: jute.Record | None = None, xid: int | None = None) -> tuple[jute.ReplyHeader, Any]:
        return self.reply(self.send(op, record, xid), op)

    def wait_event(self, timeout_s: float = 5.0) -> jute.WatcherEvent:
        """The next watch event (one already collected, or the next frame, which must be one)."""
        if self.events:
            return self.events.pop(0)
        self.sock.settimeout(timeout_s)
        header, record = jute.decode_reply(self.receive_frame(), None)
        assert header.xid == jute.XID_NOTIFICATION and isinstance(record, jute.WatcherEvent), header
        return record

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def jute_session(port: int, **connect: Any) -> JuteSession:
    session = JuteSession(port)
    session.connect(**connect)
    return session
