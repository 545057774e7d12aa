"""A recording proxy between ZooKeeper clients and a server: every connection's request xids and
ops, and the server's reply xids and error codes, as they cross the wire; which side closed the
connection first.  It shows how each client really numbers its requests (from 0 or 1, in
order or not when threads share a handle) and whether the server answered every one
(``ConnectionLog.unanswered``, ``ConnectionLog.refused``).

``recording_proxy(target_port)`` runs one on asyncio in a thread of its own; the go-zookeeper
launcher (``harness.differential.gozk``) runs ``ClientProxy.serve`` in its own loop, with
``srvr_rewrite`` to answer ``srvr`` in the format its harness parses.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from zabby.errors import Err

CHUNK_BYTES = 65536
FOUR_LETTER_BYTES = 4
START_TIMEOUT_S = 10.0
NOTIFICATION_XID = -1
BAD_ARGUMENTS = int(Err.BADARGUMENTS)


@dataclass(slots=True)
class ConnectionLog:
    """One client connection as the proxy saw it."""

    number: int
    requests: list[tuple[int, int]] = field(default_factory=list)  # (xid, op) after the ConnectRequest
    replies: list[tuple[int, int]] = field(default_factory=list)  # (xid, err) after the ConnectResponse, notifications left out
    closed_by: str = ""  # "client" or "server": whose end of the stream came first
    four_letter: str = ""  # a four-letter-word connection's word (no xids)

    @property
    def xids(self) -> list[int]:
        """The request xids, in the order they reached the server (pings and auth left out)."""
        return [xid for xid, _ in self.requests if xid >= 0]

    def unanswered(self) -> list[int]:
        """Request xids (>= 0) with no reply of that xid."""
        answered = {xid for xid, _ in self.replies}
        return [xid for xid in self.xids if xid not in answered]

    def refused(self) -> list[int]:
        """Xids the server answered BADARGUMENTS."""
        return [xid for xid, err in self.replies if err == BAD_ARGUMENTS]

    def out_of_order(self) -> int:
        """How many request xids reached the server below one sent before them."""
        highest, count = -1, 0
        for xid in self.xids:
            if xid < highest:
                count += 1
            highest = max(highest, xid)
        return count


class _Frames:
    """Length-prefixed jute frames out of a byte stream; the first one (the connect record) is
    handed to ``on_first``, the rest to ``on_frame``."""

    def __init__(self, on_frame: Callable[[bytes], None]) -> None:
        self.buffer = bytearray()
        self.on_frame = on_frame
        self.seen_first = False

    def feed(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= 4:
            (length,) = struct.unpack_from(">i", self.buffer)
            if length < 0 or len(self.buffer) < 4 + length:
                return
            frame = bytes(self.buffer[4 : 4 + length])
            del self.buffer[: 4 + length]
            if self.seen_first:
                self.on_frame(frame)
            self.seen_first = True


class ClientProxy:
    """Listens on ``listen_port`` of 127.0.0.1 (0: any) and forwards to ``target_port``;
    ``srvr_rewrite`` (optional) rewrites the text of a ``srvr`` answer."""

    def __init__(self, target_port: int, listen_port: int = 0, srvr_rewrite: Callable[[str], str] | None = None) -> None:
        self.target_port = target_port
        self.listen_port = listen_port
        self.port = 0
        self.srvr_rewrite = srvr_rewrite
        self.connections: list[ConnectionLog] = []
        self.ready = threading.Event()

    async def serve(self) -> None:
        """Accept and forward until cancelled."""
        server = await asyncio.start_server(self._handle, "127.0.0.1", self.listen_port, reuse_address=True)
        self.port = server.sockets[0].getsockname()[1]
        self.ready.set()
        async with server:
            await server.serve_forever()

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        log = ConnectionLog(len(self.connections) + 1)
        self.connections.append(log)
        try:
            head = await client_reader.read(FOUR_LETTER_BYTES)
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_writer.close()
            return
        if len(head) == FOUR_LETTER_BYTES and head.isalpha():
            log.four_letter = head.decode("ascii")
        requests = _Frames(lambda frame: log.requests.append(struct.unpack_from(">ii", frame)))
        replies = _Frames(lambda frame: self._note_reply(log, frame))
        if log.four_letter == "srvr" and self.srvr_rewrite is not None:
            await self._answer_srvr(upstream_reader, upstream_writer, client_writer)
            return
        if not log.four_letter:
            requests.feed(head)
        upstream_writer.write(head)
        await asyncio.gather(self._pipe(client_reader, upstream_writer, requests.feed, log, "client"),
                             self._pipe(upstream_reader, client_writer, replies.feed, log, "server"))  # fmt: skip

    @staticmethod
    def _note_reply(log: ConnectionLog, frame: bytes) -> None:
        xid, _zxid, err = struct.unpack_from(">iqi", frame)
        if xid != NOTIFICATION_XID:
            log.replies.append((xid, err))

    async def _answer_srvr(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_writer: asyncio.StreamWriter) -> None:
        assert self.srvr_rewrite is not None
        writer.write(b"srvr")
        text = (await reader.read()).decode("utf-8", "replace")
        writer.close()
        client_writer.write(self.srvr_rewrite(text).encode())
        with contextlib.suppress(OSError):
            await client_writer.drain()
        client_writer.close()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, tap: Callable[[bytes], None], log: ConnectionLog, side: str) -> None:
        """Copy one direction until its end; the first end of the two names who closed."""
        try:
            while data := await reader.read(CHUNK_BYTES):
                if not log.four_letter:
                    tap(data)
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            log.closed_by = log.closed_by or side
            writer.close()


async def _end_connections() -> None:
    """Cancel the loop's other tasks (the proxy's connections) and wait for their ends."""
    connections = asyncio.all_tasks() - {asyncio.current_task()}
    for connection in connections:
        connection.cancel()
    await asyncio.gather(*connections, return_exceptions=True)


@contextlib.contextmanager
def recording_proxy(target_port: int) -> Iterator[ClientProxy]:
    """A ``ClientProxy`` to ``target_port`` running in a thread of its own; stopped at the end."""
    proxy = ClientProxy(target_port)
    loop = asyncio.new_event_loop()
    task: asyncio.Task[None] | None = None

    def run() -> None:
        nonlocal task
        task = loop.create_task(proxy.serve())
        with contextlib.suppress(asyncio.CancelledError):
            loop.run_until_complete(task)
        # the connections' tasks end here, in the loop, not when the closed loop's coroutines
        # are collected (their ``finally`` would call into it: "Event loop is closed")
        loop.run_until_complete(_end_connections())

    thread = threading.Thread(target=run, name="xid-proxy", daemon=True)
    thread.start()
    if not proxy.ready.wait(START_TIMEOUT_S):
        raise RuntimeError("the recording proxy did not start")
    try:
        yield proxy
    finally:
        loop.call_soon_threadsafe(lambda: task.cancel() if task is not None else None)
        thread.join(START_TIMEOUT_S)
        loop.close()
