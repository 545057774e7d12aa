"""The client port's memory budget: what all connections together may hold.

Theory of operation: a connection holds memory for its client in three places: input read
and not yet handed to the session (a partial frame, frames waiting their turn), requests
taken and not yet answered (their frames' bytes: a write's data lives on in the pipeline
until it commits), and replies and watch events queued and not yet written to the socket.
Each connection charges every change of those to the one ``ClientMemory`` of the server, as
it happens.  Three limits follow:

* a connection stops *reading* once it holds ``pause_bytes`` (its client sends faster than it
  reads its replies, or pipelines large writes); it reads again below half of that.  That is
  the back-pressure a well-behaved client meets, and only that client meets it.
* a connection that holds more than ``connection_bytes_max`` anyway (events or replies it
  never reads pile up while it is paused) is closed, with one log line saying why.
* when all connections together hold more than ``budget_bytes``, the connections holding
  more than their fair share (the budget over the connections holding anything) are closed,
  the largest first, until the total is back within the budget.

So no client, and no number of clients, can make the server hold more than the budget for
them (plus one frame per connection being read), and a well-behaved client, holding little,
is never the one closed.
"""

from __future__ import annotations

from typing import Protocol

MiB = 2**20
BUDGET_BYTES_DEFAULT = 256 * MiB  # clientMemoryBudget
CONNECTION_BYTES_MAX_DEFAULT = 32 * MiB  # clientConnectionMemoryMax
PAUSE_BYTES_MIN = 4 * MiB


class Holder(Protocol):
    """A connection, as the budget sees it."""

    @property
    def held_bytes(self) -> int: ...

    def close_for_memory(self, reason: str) -> None:
        """Drop what it queued and close; it charges what it released."""
        ...


class ClientMemory:
    """The budget and what is charged against it (see the module's docstring)."""

    def __init__(self, budget_bytes: int, connection_bytes_max: int, frame_bytes_max: int) -> None:
        self.budget_bytes = budget_bytes
        self.connection_bytes_max = connection_bytes_max
        # a paused connection may still take its largest frame's reply: keep room for two
        self.pause_bytes = min(connection_bytes_max // 2, max(PAUSE_BYTES_MIN, 2 * frame_bytes_max))
        self.resume_bytes = self.pause_bytes // 2
        self.used_bytes = 0
        self.peak_bytes = 0
        self.closed_count = 0  # connections closed for holding too much
        self._holders: set[Holder] = set()

    def charge(self, holder: Holder, delta: int) -> None:
        """``holder`` now holds ``delta`` bytes more (or fewer)."""
        used = self.used_bytes + delta
        self.used_bytes = used
        held = holder.held_bytes
        if held == delta and delta > 0:  # it held nothing before
            self._holders.add(holder)
        elif held <= 0:
            self._holders.discard(holder)
        if used > self.peak_bytes:
            self.peak_bytes = used
            if used > self.budget_bytes:
                self.reclaim()
        elif used > self.budget_bytes and delta > 0:
            self.reclaim()

    def release(self, holder: Holder) -> None:
        """``holder`` ended: what it still held is free."""
        self.used_bytes -= holder.held_bytes
        self._holders.discard(holder)

    def reclaim(self) -> None:
        """Close the connections over their fair share, the largest first, until the total is
        within the budget again."""
        share = self.budget_bytes // max(1, len(self._holders))
        for holder in sorted(self._holders, key=lambda h: h.held_bytes, reverse=True):
            if self.used_bytes <= self.budget_bytes or holder.held_bytes <= share:
                return
            self.closed_count += 1
            holder.close_for_memory(f"it holds {holder.held_bytes} bytes, over its share ({share}) of the "
                                    f"{self.budget_bytes}-byte client memory budget (clientMemoryBudget), "
                                    f"which all connections together have passed")  # fmt: skip

    def over_connection_limit(self, holder: Holder) -> None:
        """``holder`` passed ``connection_bytes_max``: it is closed."""
        self.closed_count += 1
        holder.close_for_memory(f"it holds {holder.held_bytes} bytes (replies it does not read, or input), over the "
                                f"{self.connection_bytes_max}-byte limit per connection (clientConnectionMemoryMax)")  # fmt: skip
