"""``WatchStream``: a persistent watch's events as an async iterator, for asyncio and trio.

``Client.watch(path, mode, since_zxid)`` makes one.  Its watcher is an ordinary persistent
watcher (``add_watch``), run in the client's event-delivery task like any callback; it puts
each event into an anyio memory object stream that ``__anext__`` reads.  The stream's buffer is
unbounded on purpose, as the delivery queue is: the client never waits on a slow reader.

The iteration ends after an event that ends the watch: the session's loss or the client's
close (``EventType.NONE``), or a removal of the path's watches (``PERSISTENT_WATCH_REMOVED``);
that event is delivered first.  ``HISTORY_LOST`` (the watch could not resume from its last
event after a reconnect) is delivered and the iteration goes on: re-read, then carry on.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from zabby.errors import ConnectionClosedError
from zabby.opcodes import AddWatchMode

from .states import EventType, WatchedEvent

Watcher = Callable[[WatchedEvent], Any]
AddWatch = Callable[[str, Watcher, AddWatchMode, "int | None"], Awaitable[None]]  # Client.add_watch
RemoveWatcher = Callable[[str, Watcher, AddWatchMode], Awaitable[None]]  # Client._remove_watcher

_LAST_EVENTS = (EventType.NONE, EventType.PERSISTENT_WATCH_REMOVED)


class WatchStream:
    """``async for event in client.watch(path)``; ``async with`` removes the watch at exit."""

    def __init__(self, path: str, mode: AddWatchMode, since_zxid: int | None, *, add: AddWatch, remove: RemoveWatcher) -> None:
        """``add`` and ``remove`` are the client's: the stream knows its client by them alone."""
        self.path = path
        self.mode = mode
        self.since_zxid = since_zxid
        self._add = add
        self._remove = remove
        self._send: MemoryObjectSendStream[WatchedEvent] | None = None
        self._receive: MemoryObjectReceiveStream[WatchedEvent] | None = None
        self._closed = False

    async def open(self) -> None:
        """Add the watch (once); raises what ``add_watch`` raises."""
        if self._closed:
            raise ConnectionClosedError(f"the watch on {self.path} was closed")
        if self._receive is not None:
            return
        send, receive = anyio.create_memory_object_stream[WatchedEvent](math.inf)
        self._send, self._receive = send, receive
        try:
            await self._add(self.path, self._deliver, self.mode, self.since_zxid)
        except BaseException:
            self._send = self._receive = None
            send.close()
            receive.close()
            raise

    async def aclose(self) -> None:
        """Remove the watch and end the iteration (idempotent)."""
        if self._closed:
            return
        self._closed = True
        send, receive = self._send, self._receive
        self._send = None
        if send is not None:
            send.close()
        if receive is not None:
            receive.close()
            await self._remove(self.path, self._deliver, self.mode)

    def _deliver(self, event: WatchedEvent) -> None:
        send = self._send
        if send is None:
            return
        send.send_nowait(event)
        if event.type in _LAST_EVENTS:
            self._send = None
            send.close()  # the reader gets what is buffered, then the end

    def __aiter__(self) -> WatchStream:
        return self

    async def __anext__(self) -> WatchedEvent:
        if self._closed:
            raise StopAsyncIteration
        await self.open()
        receive = self._receive
        if receive is None:
            raise StopAsyncIteration
        try:
            return await receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def __aenter__(self) -> WatchStream:
        await self.open()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()
