"""The packet simulator: one TCP-like connection per pair of servers, FIFO per direction.

Theory of operation: a connection is ``up`` (messages flow, each delivered after a drawn
delay but never before the one sent ahead of it on the same direction), ``dead`` (it broke:
everything in flight and everything sent on it is lost, and each end learns of it with
``link_down`` after a detection delay), or ``down`` (both ends know; the next send opens a
new connection).  That is what a real shell sees: loss is never a silent gap inside a
stream, it is a broken connection.

On top of that, rare *stream corruptions* that TCP would never produce — a message
duplicated, or overtaking the one before it on its link — are injected on purpose, to show
that the core notices a broken stream and resynchronises instead of applying out of order.

Partitions block directions (``(src, dst)`` pairs); a send over a blocked direction kills
the connection, as a TCP sender whose data is never acknowledged eventually does.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass
from typing import Any, NamedTuple

from zabby.sim.options import SimOptions

UP, DEAD, DOWN = "up", "dead", "down"


@dataclass(slots=True)
class Connection:
    generation: int = 0
    state: str = DOWN
    downs_pending: int = 0  # link_down notifications not yet delivered
    flushing: int = 0  # a dead connection still delivers what this server sent before closing


@dataclass(slots=True)
class NetworkStats:
    sent: int = 0
    delivered: int = 0
    dropped: int = 0
    breaks: int = 0
    duplicated: int = 0
    reordered: int = 0


class Event(NamedTuple):
    """Heap entries: (time, order) is unique, so the rest is never compared."""

    time: int
    order: float
    seq: int  # unique: ties on (time, order) never reach the message
    kind: str  # "msg" or "down"
    src: int  # "down": the server that gets link_down ...
    dst: int  # ... about this one
    message: Any = None
    generation: int = 0


def pair(a: int, b: int) -> tuple[int, int]:
    return (a, b) if a < b else (b, a)


class Network:
    def __init__(self, rng: random.Random, options: SimOptions) -> None:
        self.rng = rng
        self.options = options
        self.heap: list[Event] = []
        self.seq = 0
        self.connections: dict[tuple[int, int], Connection] = {}
        self.blocked: set[tuple[int, int]] = set()
        self.last_key: dict[tuple[int, int], tuple[int, float]] = {}
        self.stats = NetworkStats()

    # ----------------------------------------------------------------- sending
    def send(self, now: int, src: int, dst: int, message: Any) -> None:
        self.stats.sent += 1
        conn = self.connections.setdefault(pair(src, dst), Connection())
        if (src, dst) in self.blocked:
            if conn.state == UP:
                self._kill(now, src, dst, conn, detect=True)
            self.stats.dropped += 1
            return
        if conn.state == DEAD:
            self.stats.dropped += 1
            return
        if conn.state == DOWN:
            conn.state = UP
            conn.generation += 1
        if self.options.break_probability and self.rng.random() < self.options.break_probability:
            self._kill(now, src, dst, conn, detect=True)
            self.stats.dropped += 1
            return
        self._enqueue(now, src, dst, message, conn.generation)

    def _enqueue(self, now: int, src: int, dst: int, message: Any, generation: int) -> None:
        options, rng = self.options, self.rng
        time = now + rng.randint(options.delay_ticks_min, options.delay_ticks_max)
        self.seq += 1
        key: tuple[int, float] = (time, float(self.seq))
        last = self.last_key.get((src, dst))
        if last is not None and key < last:
            key = (last[0], float(self.seq))  # FIFO: never before the previous message
        if (options.reorder_probability and last is not None and last[0] > now
                and rng.random() < options.reorder_probability):  # fmt: skip
            key = (last[0], last[1] - 0.5)  # overtake the message queued just before
            self.stats.reordered += 1
        else:
            self.last_key[(src, dst)] = key
        heapq.heappush(self.heap, Event(key[0], key[1], self.seq, "msg", src, dst, message, generation))
        if options.duplicate_probability and rng.random() < options.duplicate_probability:
            self.seq += 1
            self.last_key[(src, dst)] = (key[0], float(self.seq))
            heapq.heappush(self.heap, Event(key[0], float(self.seq), self.seq, "msg", src, dst, message, generation))
            self.stats.duplicated += 1

    # ----------------------------------------------------------------- breaking
    def _kill(self, now: int, a: int, b: int, conn: Connection, *, detect: bool, notify_a: bool = True) -> None:
        """The connection a-b breaks; each end to notify learns after a detection delay."""
        conn.state = DEAD
        self.stats.breaks += 1
        for end, other, notify in ((a, b, notify_a), (b, a, True)):
            if not notify:
                continue
            delay = self.rng.randint(0, self.options.break_detect_ticks_max) if detect else 0
            conn.downs_pending += 1
            self.seq += 1
            heapq.heappush(self.heap, Event(now + delay, float(self.seq), self.seq, "down", end, other, None, conn.generation))
        conn.flushing = 0
        if conn.downs_pending == 0:
            conn.state = DOWN

    def close(self, now: int, src: int, dst: int) -> None:
        """``src`` closes its link to ``dst`` (a Ready's drop_links, or a crash).

        Half the time the close is graceful, as a socket's usually is: what ``src`` sent
        before still arrives, and ``dst`` sees link_down right after it.  Otherwise (a reset)
        everything in flight is lost.  Either way, what ``dst`` was sending is lost.
        """
        conn = self.connections.get(pair(src, dst))
        if conn is None or conn.state != UP:
            return
        last = self.last_key.get((src, dst))
        if last is None or last[0] < now or self.rng.random() < 0.5:
            self._kill(now, src, dst, conn, detect=False, notify_a=False)
            return
        conn.state = DEAD
        conn.flushing = src
        conn.downs_pending += 1
        self.stats.breaks += 1
        self.seq += 1
        heapq.heappush(self.heap, Event(last[0], last[1] + 0.25, self.seq, "down", dst, src, None, conn.generation))

    def partition(self, now: int, blocked: set[tuple[int, int]]) -> None:
        self.blocked = set(blocked)
        for src, dst in sorted(blocked):
            conn = self.connections.get(pair(src, dst))
            if conn is not None and conn.state == UP:
                self._kill(now, src, dst, conn, detect=True)

    def heal(self) -> None:
        self.blocked = set()

    # ----------------------------------------------------------------- delivering
    def pop_due(self, now: int) -> Event | None:
        """The next event due by ``now`` that still means something, or None."""
        while self.heap and self.heap[0].time <= now:
            event = heapq.heappop(self.heap)
            conn = self.connections[pair(event.src, event.dst)]
            if event.kind == "down":
                conn.downs_pending -= 1
                if conn.downs_pending == 0 and conn.state == DEAD:
                    conn.state = DOWN
                    conn.flushing = 0
                return event
            live = conn.state == UP or (conn.state == DEAD and conn.flushing == event.src)
            if not live or conn.generation != event.generation:
                self.stats.dropped += 1
                continue
            self.stats.delivered += 1
            return event
        return None
