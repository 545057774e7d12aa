"""The history of a run: every client operation as an invoke event and one completion event
(``ok``, ``fail`` or ``unknown``), with times in seconds since the run started.

Meaning of a completion, as in Jepsen:

* ``ok``: the operation took effect (a read returned what it returns);
* ``fail``: the operation certainly did not take effect (the server said so: BadVersion,
  NoNode, ...);
* ``unknown``: it may or may not have taken effect, at any time after its invoke (connection
  loss, timeout, session expired while the request was out).

A nemesis action is recorded the same way (process ``nemesis``), so the history file shows
what was injected when.  The file is JSON: ``{"events": [...]}`` with one object per event.
"""

from __future__ import annotations

import gzip
import json
import math
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

EVENTS_MAX = 2_000_000  # a run that records more stops recording (and says so)

INVOKE, OK, FAIL, UNKNOWN = "invoke", "ok", "fail", "unknown"
WRITE_FUNCTIONS = frozenset({"write", "cas", "create"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    op_id: int
    process: str
    type: str  # invoke | ok | fail | unknown
    f: str  # read | write | cas | create | open | close | nemesis ...
    key: str
    value: Any  # JSON-able arguments (invoke) or result (completion)
    time_s: float
    error: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Operation:
    """An invoke paired with its completion; ``complete_s`` is inf while nothing came back."""

    op_id: int
    process: str
    f: str
    key: str
    args: Any
    status: str
    result: Any
    invoke_s: float
    complete_s: float
    error: str = ""


class History:
    """Thread-safe, append-only; ``invoke`` returns the id that ``complete`` takes."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._events: list[Event] = []
        self._next_id = 0
        self.truncated = False

    def now_s(self) -> float:
        return time.monotonic() - self.started

    def invoke(self, process: str, f: str, key: str = "", value: Any = None) -> int:
        with self._lock:
            op_id = self._next_id
            self._next_id += 1
            self._append(Event(op_id=op_id, process=process, type=INVOKE, f=f, key=key, value=value, time_s=self.now_s()))
        return op_id

    def complete(self, op_id: int, status: str, value: Any = None, error: str = "") -> None:
        assert status in (OK, FAIL, UNKNOWN), status
        with self._lock:
            invoked = self._invoke_of(op_id)
            self._append(Event(op_id=op_id, process=invoked.process, type=status, f=invoked.f, key=invoked.key, value=value, time_s=self.now_s(), error=error))

    def _invoke_of(self, op_id: int) -> Event:
        # ids are handed out in order and events are appended in order, so a bounded scan back finds it
        for event in reversed(self._events):
            if event.op_id == op_id and event.type == INVOKE:
                return event
        return Event(op_id=op_id, process="?", type=INVOKE, f="?", key="", value=None, time_s=0.0)

    def _append(self, event: Event) -> None:
        if len(self._events) >= EVENTS_MAX:
            self.truncated = True
            return
        self._events.append(event)

    def events(self) -> list[Event]:
        with self._lock:
            return list(self._events)

    def operations(self) -> list[Operation]:
        return pair_events(self.events())

    def write_json(self, path: Path) -> None:
        """``path`` ending in ``.gz`` is written gzipped."""
        text = json.dumps({"truncated": self.truncated, "events": [asdict(e) for e in self.events()]}, default=repr)
        if path.suffix == ".gz":
            path.write_bytes(gzip.compress(text.encode(), compresslevel=6))
        else:
            path.write_text(text)


def pair_events(events: list[Event]) -> list[Operation]:
    """Operations in invoke order; an invoke with no completion counts as unknown."""
    invokes: dict[int, Event] = {}
    done: dict[int, Event] = {}
    for event in events:
        (invokes if event.type == INVOKE else done)[event.op_id] = event
    operations = []
    for op_id, call in sorted(invokes.items(), key=lambda item: item[1].time_s):
        end = done.get(op_id)
        status = end.type if end is not None else UNKNOWN
        complete_s = end.time_s if end is not None and status != UNKNOWN else math.inf
        operations.append(Operation(
            op_id=op_id, process=call.process, f=call.f, key=call.key, args=call.value, status=status,
            result=end.value if end is not None else None, invoke_s=call.time_s, complete_s=complete_s,
            error=end.error if end is not None else "",
        ))  # fmt: skip
    return operations


def read_json(path: Path) -> list[Event]:
    raw = path.read_bytes()
    data = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    return [Event(**item) for item in data["events"]]


def longest_write_gap_s(operations: list[Operation], start_s: float, end_s: float) -> float:
    """The longest stretch of [start_s, end_s] in which no write was acknowledged."""
    return longest_gap_s((op.complete_s for op in operations if op.f in WRITE_FUNCTIONS and op.status == OK), start_s, end_s)


def longest_gap_s(times: Iterable[float], start_s: float, end_s: float) -> float:
    """The longest stretch of [start_s, end_s] without one of ``times`` in it."""
    return longest_gap(times, start_s, end_s)[0]


def longest_gap(times: Iterable[float], start_s: float, end_s: float) -> tuple[float, float]:
    """(the length, the start) of the longest stretch of [start_s, end_s] without one of ``times``."""
    edges = [start_s, *sorted(t for t in times if start_s <= t <= end_s), end_s]
    return max(((later - earlier, earlier) for earlier, later in zip(edges, edges[1:])), default=(end_s - start_s, start_s))
