"""Reading a connection's socket without trio's stream layer, where every message pays for it.

``trio.SocketStream.receive_some`` makes each read a checkpoint: a ``recv`` that finds data
is followed by a trip through the scheduler, and one that finds none by another ``recv``
once ``wait_readable`` returns.  A connection that reads one message at a time pays that on
every message: a standalone server answered kazoo's one-at-a-time getData with 36-38 µs of
user CPU each, against 28-31 µs read this way (``SocketReader``).

A ``SocketReader`` reads the socket's fd itself (``os.read``) and waits with
``trio.lowlevel.wait_readable`` only when nothing is there.  A read that found data at once
is no checkpoint, so after ``READS_BETWEEN_CHECKPOINTS`` of them in a row it yields to the
scheduler: a connection that always has more to read neither starves the others nor misses
a cancellation for long.  TLS streams keep ``receive_some`` (``receiver`` picks).
"""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Awaitable, Callable

import trio

READS_BETWEEN_CHECKPOINTS = 8


def receiver(stream: trio.abc.ReceiveStream, max_bytes: int) -> Callable[[], Awaitable[bytes | bytearray]]:
    """An async callable returning the next bytes ``stream`` received (b"" at its end)."""
    if isinstance(stream, trio.SocketStream):
        return SocketReader(stream.socket, max_bytes).receive
    if isinstance(stream, PrefixedStream) and isinstance(stream.stream, trio.SocketStream):
        return stream.then(SocketReader(stream.stream.socket, max_bytes).receive)
    return functools.partial(stream.receive_some, max_bytes)


class PrefixedStream(trio.abc.Stream):
    """A stream whose first bytes were read already (to tell its protocol): they are
    received again first."""

    def __init__(self, stream: trio.abc.Stream, prefix: bytes) -> None:
        self.stream = stream
        self._prefix = prefix
        self._closed = False

    @property
    def socket(self) -> trio.socket.SocketType | None:  # for peer_host
        return getattr(self.stream, "socket", None)

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if not self._prefix:
            return await self.stream.receive_some(max_bytes)
        await trio.lowlevel.checkpoint()  # first: a cancellation here loses nothing
        if self._closed:
            raise trio.ClosedResourceError("the stream was closed")
        size = len(self._prefix) if max_bytes is None else max_bytes
        data, self._prefix = self._prefix[:size], self._prefix[size:]
        return data

    def then(self, read: Callable[[], Awaitable[bytes]]) -> Callable[[], Awaitable[bytes | bytearray]]:
        """``read`` (of the same socket, faster than ``receive_some``) once the prefix is
        received."""

        async def receive() -> bytes | bytearray:
            if self._prefix:
                return await self.receive_some()
            return await read()

        return receive

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        self._closed = True
        await self.stream.aclose()


class SocketReader:
    """Reads of one socket, by one task at a time (as ``receive_some``)."""

    def __init__(self, sock: trio.socket.SocketType, max_bytes: int) -> None:
        self._socket = sock
        self._max_bytes = max_bytes
        self._reads_since_checkpoint = 0

    async def receive(self) -> bytes:
        """The next bytes the peer sent; b"" once it closed its side.

        Raises (as ``trio.SocketStream.receive_some``):
            trio.ClosedResourceError: the socket was closed here, by another task.
            trio.BrokenResourceError: the connection broke (reset, timed out...).
        """
        sock = self._socket
        while True:
            fd = sock.fileno()  # -1 once closed: never read a number another socket reuses
            if fd < 0:
                raise trio.ClosedResourceError("the socket was closed")
            try:
                data = os.read(fd, self._max_bytes)
            except BlockingIOError:
                self._reads_since_checkpoint = 0
                await trio.lowlevel.wait_readable(fd)  # a checkpoint
                continue
            except OSError as exc:
                if exc.errno == errno.EBADF:
                    raise trio.ClosedResourceError("the socket was closed") from None
                raise trio.BrokenResourceError(f"socket connection broken: {exc}") from exc
            self._reads_since_checkpoint += 1
            if self._reads_since_checkpoint >= READS_BETWEEN_CHECKPOINTS:
                self._reads_since_checkpoint = 0
                await trio.lowlevel.checkpoint()
            return data
