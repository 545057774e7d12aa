"""Make two systems' outcomes comparable, and find where they differ.

Zxids, times and session ids differ between two servers even when they behave alike, so
each system's values go through its own ``Normalizer``:

* a zxid becomes its rank among the distinct zxids that system has shown so far.  Ranks are
  taken op by op: if every op so far put its zxids at the same ranks on both systems (and
  both have shown as many distinct zxids), the two sequences are order-isomorphic, so equal
  ranks mean the same order and the same equality pattern (czxid == mzxid, a parent's pzxid
  == its newest child's czxid, ...);
* a time is checked against the zxid it belongs to (ctime with czxid, mtime with mzxid):
  one zxid must always show one time, and times must not go backwards as zxids grow.  A
  time that passes both checks becomes ``"t"``; one that fails keeps its raw value, so it
  cannot match.  (Whether two txns fell in the same millisecond is timing, not behaviour.)
* a session id becomes the session's label and generation ("a1", "b2");
* the events a session close causes are compared as a set: ZooKeeper deletes a closing
  session's ephemerals in the iteration order of a java.util.HashSet (which depends on the
  set's history, and changes when ZooKeeper restarts); zabby deletes deepest first, then by
  path.  Only the order between two replies is given up: which events came before which
  reply is still compared.
"""

from __future__ import annotations

import bisect
import re
from typing import Any

from harness.differential.model import Event, Outcome, Stat

TIME_OK = "t"
_INDEX = re.compile(r"\[\d+\]")


class Normalizer:
    """One system's value maps, fed the outcomes of a run in order."""

    def __init__(self) -> None:
        self.zxids: list[int] = []  # distinct zxids shown so far, sorted
        self.time_zxids: list[int] = []  # zxids whose txn time is known, sorted
        self.times: dict[int, int] = {}

    def outcome(self, outcome: Outcome, owners: dict[int, str], *, events_unordered: bool = False) -> dict[str, Any]:
        for zxid in sorted(_zxids_in(outcome.result)):
            index = bisect.bisect_left(self.zxids, zxid)
            if index == len(self.zxids) or self.zxids[index] != zxid:
                self.zxids.insert(index, zxid)
        return {
            "result": self._value(outcome.result, owners),
            "logs": {label: _unordered(log) if events_unordered else tuple(log) for label, log in sorted(outcome.logs.items())},
            "unreaped": outcome.unreaped,
            "distinct zxids": len(self.zxids),
        }

    def _rank(self, zxid: int) -> int:
        return bisect.bisect_left(self.zxids, zxid)

    def _value(self, value: Any, owners: dict[int, str]) -> Any:
        if isinstance(value, Stat):
            return self._stat(value, owners)
        if isinstance(value, (tuple, list)):
            return tuple(self._value(item, owners) for item in value)
        return value

    def _stat(self, stat: Stat, owners: dict[int, str]) -> Stat:
        """``stat`` with zxids as ranks, times checked, the owner as its label: a Stat of
        comparable values, not of ints."""
        owner: Any = owners.get(stat.ephemeralOwner, stat.ephemeralOwner)
        return stat._replace(
            czxid=self._rank(stat.czxid), mzxid=self._rank(stat.mzxid), pzxid=self._rank(stat.pzxid),
            ctime=self._time(stat.czxid, stat.ctime), mtime=self._time(stat.mzxid, stat.mtime),
            ephemeralOwner=owner,
        )  # fmt: skip

    def _time(self, zxid: int, time_ms: int) -> Any:
        """``TIME_OK`` if ``time_ms`` fits what this system showed before, else the raw time."""
        known = self.times.get(zxid)
        if known is not None:
            return TIME_OK if known == time_ms else time_ms
        index = bisect.bisect_left(self.time_zxids, zxid)
        before = self.times[self.time_zxids[index - 1]] if index else None
        after = self.times[self.time_zxids[index]] if index < len(self.time_zxids) else None
        if (before is not None and before > time_ms) or (after is not None and after < time_ms):
            return time_ms
        self.time_zxids.insert(index, zxid)
        self.times[zxid] = time_ms
        return TIME_OK


def _unordered(log: list[Event]) -> tuple[Event, ...]:
    """``log`` with the events between two replies sorted."""
    out: list[Event] = []
    run: list[Event] = []
    for entry in log:
        if entry[0] == "reply":
            out += sorted(run)
            out.append(entry)
            run = []
        else:
            run.append(entry)
    return tuple(out + sorted(run))


def _zxids_in(value: Any) -> set[int]:
    if isinstance(value, Stat):
        return {value.czxid, value.mzxid, value.pzxid}
    if isinstance(value, (tuple, list)):
        return {zxid for item in value for zxid in _zxids_in(item)}
    return set()


def first_difference(reference: Any, candidate: Any, where: str = "") -> tuple[str, Any, Any] | None:
    """Where two normalized values first differ: (location, reference part, candidate part)."""
    if isinstance(reference, dict) and isinstance(candidate, dict):
        for key in [*reference, *(key for key in candidate if key not in reference)]:
            found = first_difference(reference.get(key), candidate.get(key), f"{where}.{key}" if where else str(key))
            if found:
                return found
        return None
    if isinstance(reference, Stat) and isinstance(candidate, Stat):
        for name, mine, theirs in zip(Stat._fields, reference, candidate, strict=True):
            if mine != theirs:
                return f"{where}.{name}", mine, theirs
        return None
    if isinstance(reference, tuple) and isinstance(candidate, tuple) and len(reference) == len(candidate):
        for index, (mine, theirs) in enumerate(zip(reference, candidate, strict=True)):
            found = first_difference(mine, theirs, f"{where}[{index}]")
            if found:
                return found
        return None
    return None if reference == candidate else (where, reference, candidate)


def kind_of(op_kind: str, where: str) -> str:
    """A divergence's kind for summaries: the op and the place, without indexes."""
    return f"{op_kind}: {_INDEX.sub('[]', where)}"
