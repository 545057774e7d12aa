"""Timestamps inside a zabby server, for ``python -m harness.bench.write_path``.

``install`` wraps, in the running server, the transport's decode and encode of quorum messages
and a client connection's read of a batch of requests and its flush of replies; each server
records the spans of one write's path that pass through it (seconds), and writes them to
``out_path`` when it exits.  The server's own code is not changed: the script installs this
from a ``sitecustomize`` it puts first on the servers' ``PYTHONPATH``.
"""

from __future__ import annotations

import atexit
import json
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any


# The spans of one write, in the order it goes through them (the server that sees each: the
# client's follower, the leader, or both followers for the fsync and the wait for LOGGED).
CLIENT_TO_FORWARD = "client's request → forward out"
FORWARD_TO_PROPOSAL = "forward → PROPOSAL back"
REQUEST_TO_PROPOSAL = "forwarded request → PROPOSAL out"
LEADER_FSYNC = "PROPOSAL out → LOGGED out (its fsync)"
FOLLOWER_FSYNC = "PROPOSAL in → ACK out (its fsync)"
LOG_FDATASYNC = "the log's fdatasync call alone"  # inside the two spans above; all three servers' run at once
WAIT_FOR_LOGGED = "ACK → the leader's LOGGED in"
LOGGED_TO_REPLY = "LOGGED in → reply flushed"
CLIENT_TURNAROUND = "reply flushed → next request in (the client)"
PATH = (CLIENT_TO_FORWARD, FORWARD_TO_PROPOSAL, REQUEST_TO_PROPOSAL, LEADER_FSYNC, FOLLOWER_FSYNC, LOG_FDATASYNC,
        WAIT_FOR_LOGGED, LOGGED_TO_REPLY, CLIENT_TURNAROUND)  # fmt: skip


class _Spans:
    """The marks one server left and the spans they closed."""

    def __init__(self) -> None:
        self.marks: dict[str, float] = {}
        self.spans: dict[str, list[float]] = defaultdict(list)

    def mark(self, name: str, now: float) -> None:
        self.marks[name] = now

    def close(self, span: str, mark: str, now: float) -> None:
        started = self.marks.pop(mark, None)
        if started is not None:
            self.spans[span].append(now - started)

    def write(self, out_path: str) -> None:
        with open(out_path, "w") as out:
            json.dump(self.spans, out)


def _chain(*steps: Callable[[float], None]) -> Callable[[float], None]:
    """One hook that runs ``steps`` in order."""

    def run(now: float) -> None:
        for step in steps:
            step(now)

    return run


def install(out_path: str) -> None:
    import os

    import zabby.server.clients.client_conn as client_conn
    import zabby.server.peering.transport as transport
    import zabby.storage.fs as fs
    from zabby.core import messages

    clock, spans = time.perf_counter, _Spans()
    on_decode: dict[type, Callable[[float], None]] = {
        messages.Request: lambda now: spans.mark("request in", now),
        messages.Proposal: _chain(lambda now: spans.mark("proposal in", now), lambda now: spans.close(FORWARD_TO_PROPOSAL, "forward out", now)),
        messages.Logged: _chain(lambda now: spans.mark("logged in", now), lambda now: spans.close(WAIT_FOR_LOGGED, "ack out", now)),
    }  # fmt: skip
    on_encode: dict[type, Callable[[float], None]] = {
        messages.Proposal: _chain(lambda now: spans.close(REQUEST_TO_PROPOSAL, "request in", now), lambda now: spans.mark("proposal out", now)),
        messages.Logged: lambda now: spans.close(LEADER_FSYNC, "proposal out", now),
        messages.Ack: _chain(lambda now: spans.close(FOLLOWER_FSYNC, "proposal in", now), lambda now: spans.mark("ack out", now)),
        messages.Request: _chain(lambda now: spans.close(CLIENT_TO_FORWARD, "client in", now), lambda now: spans.mark("forward out", now)),
    }  # fmt: skip
    decode, encode = transport.decode, transport.encode
    handle_frames, flush = client_conn.Connection._handle_frames, client_conn.Connection.flush

    def timed_decode(frame: bytes) -> Any:
        message = decode(frame)
        on_decode.get(message.__class__, _ignore)(clock())
        return message

    def timed_encode(message: Any) -> bytes:
        on_encode.get(message.__class__, _ignore)(clock())
        return encode(message)

    def timed_handle_frames(self: Any, *args: Any) -> Any:
        now = clock()
        spans.mark("client in", now)
        spans.close(CLIENT_TURNAROUND, "reply out", now)
        return handle_frames(self, *args)

    def timed_flush(self: Any) -> None:
        if "logged in" in spans.marks:  # the first flush after LOGGED carries the reply
            now = clock()
            spans.close(LOGGED_TO_REPLY, "logged in", now)
            spans.mark("reply out", now)
        flush(self)

    fdatasync = os.fdatasync

    def timed_fdatasync(fd: int) -> None:  # a write alone is synced inline, by this call
        started = clock()
        fdatasync(fd)
        spans.spans[LOG_FDATASYNC].append(clock() - started)

    transport.decode, transport.encode = timed_decode, timed_encode
    os.fdatasync = timed_fdatasync  # type: ignore[assignment]
    fs.OsFileSystem.fdatasync = staticmethod(timed_fdatasync)  # type: ignore[arg-type]  # the log's: os.fdatasync itself
    client_conn.Connection._handle_frames = timed_handle_frames  # type: ignore[method-assign, assignment]
    client_conn.Connection.flush = timed_flush  # type: ignore[method-assign]
    atexit.register(spans.write, out_path)


def _ignore(now: float) -> None:
    pass
