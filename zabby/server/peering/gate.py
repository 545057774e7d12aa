"""The bound on what peers may queue in the engine while it is busy.

Theory of operation: the task that reads a peer link hands each read's messages to the engine
(``Engine.receive``), and the engine takes them at once unless it is waiting for an effect the
driver must await (a fsync of epochs, a reload, a SNAP's install).  Meanwhile messages queue
in the engine, and a peer that keeps sending (a leader streaming proposals, or one that lies
and floods) would make that queue as long as the effect is slow.  So each link may queue at
most ``budget_bytes`` (the bytes of the reads it delivered) until the engine's queue is empty
again; then its reader waits, reads no more, and TCP's window stops the sender.  A link never
waits while the engine is free: its messages are taken in the read that brought them, and no
task switch is added to a write's path.

Bound: ``budget_bytes`` plus one read (``zabby.server.peering.transport.PEER_READ_BYTES``) per link, and
links are bounded by the transport (members plus ``STRANGER_LINKS_MAX``).
"""

from __future__ import annotations

from collections.abc import Hashable

import trio

PEER_BYTES_QUEUED_MAX = 8 << 20  # per link, while the engine awaits an effect


class InputGate:
    """Per-link accounting of the bytes delivered since the engine's input queue was last empty."""

    def __init__(self, budget_bytes: int = PEER_BYTES_QUEUED_MAX) -> None:
        self.budget_bytes = budget_bytes
        self._queued: dict[Hashable, int] = {}
        self._drained: trio.Event | None = None  # made when a reader waits
        self.waits = 0  # how often a reader waited

    async def admit(self, link: Hashable, nbytes: int) -> None:
        """Count a read ``link`` delivered; wait while the link is over its budget."""
        if self.over(link, nbytes):
            await self.wait(link)

    def over(self, link: Hashable, nbytes: int) -> bool:
        """Count a read ``link`` delivered: True when the link is over its budget, and its reader
        must ``wait`` (``admit`` without a coroutine per read: nearly every read is within it)."""
        queued = self._queued[link] = self._queued.get(link, 0) + nbytes
        return queued >= self.budget_bytes

    async def wait(self, link: Hashable) -> None:
        """Until the link is within its budget again (the engine's input queue emptied)."""
        self.waits += 1
        while self._queued.get(link, 0) >= self.budget_bytes:
            if self._drained is None:
                self._drained = trio.Event()
            await self._drained.wait()

    def drained(self) -> None:
        """The engine's input queue is empty: every link starts from zero again."""
        if self._queued:
            self._queued.clear()
        if self._drained is not None:
            self._drained.set()
            self._drained = None

    def forget(self, link: Hashable) -> None:
        self._queued.pop(link, None)
