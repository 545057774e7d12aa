"""A deliberately raw, blocking client for poking the server's byte stream in tests
(garbage, oversize frames, exact pipelining); real programs use zabby.Client."""

from __future__ import annotations

import socket
from typing import Any

import msgpack

from zabby.wire.framing import FrameDecoder
from zabby.wire.messages import connect_request, pack_frame

OPEN_ACL = [[31, "world", "anyone"]]


class RawSession:
    def __init__(self, port: int, *, session_id: int = 0, password: bytes = b"", timeout_ms: int = 4000, last_zxid: int = 0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.decoder = FrameDecoder()
        self.pending: list[list[Any]] = []
        self.xid = 0
        self.sock.sendall(pack_frame(connect_request(last_zxid, timeout_ms, session_id, password, False)))
        self.handshake = self.receive()
        self.err = self.handshake[2]
        self.session_id, self.password = self.handshake[4], self.handshake[5]

    def receive(self) -> list[Any]:
        while not self.pending:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("server closed the connection")
            self.pending.extend(msgpack.unpackb(f) for f in self.decoder.receive_data(data))
        return self.pending.pop(0)

    def send(self, op: int, *args: Any) -> int:
        self.xid += 1
        self.sock.sendall(pack_frame([self.xid, op, *args]))
        return self.xid

    def call(self, op: int, *args: Any) -> list[Any]:
        """Send one request and return its reply, collecting events that come first."""
        xid = self.send(op, *args)
        while True:
            reply = self.receive()
            if reply[0] == xid:
                return reply
            if reply[0] != -1:
                raise AssertionError(f"reply for xid {reply[0]} while waiting for {xid}")
            self.events.append(reply)

    events: list[list[Any]]

    def __enter__(self) -> RawSession:
        self.events = []
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def create(self, path: str, data: bytes = b"", mode: int = 0) -> list[Any]:
        return self.call(15, path, data, OPEN_ACL, mode, 0)


def raw_session(port: int, **kwargs: Any) -> RawSession:
    session = RawSession(port, **kwargs)
    session.events = []
    return session
