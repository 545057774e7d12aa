"""What a persistent recursive watcher saw, checked against the committed history.

Theory of operation
-------------------
The committed history is every server's txn log after the run, merged by zxid (a server that
took a snapshot from the leader lacks the txns before it in its log).  A log may also hold a
tail of proposals its epoch never committed: a server that falls behind is brought up to date
with a snapshot, and its log keeps what it had logged (ZooKeeper does not truncate it).  Zab
commits a prefix of each epoch's proposals, and the next established leader's history holds
exactly that prefix, so wherever a log goes straight from an epoch's last txn to a later
epoch's first (no snapshot in between: a leader's log, or a log the leader synced by DIFF or
TRUNC), that last txn ends what the epoch committed; the lowest such end of each epoch is its
committed end, and the txns past it are ``uncommitted`` (not expected: an event for one is a
mismatch).  An epoch with no such boundary (the last) is taken whole.  Each txn makes
*changes*: ``(zxid, type, path)`` with type
``CREATED``, ``DELETED`` or ``CHANGED`` (kazoo's names); a multi makes its ops' changes, a
closeSession deletes the session's ephemerals, anything else (errors, checks, setACL, session
creation, failed multis) makes none.  This model is built from the txn bodies alone, not with
the server's tree code, so that a bug in the server's watch triggers shows as a difference.

A persistent recursive watch on ``W`` sees the change of every node at ``W`` or under it
(never NodeChildrenChanged).  Its expected events are those changes with ``start < zxid <=
end``: ``start`` is the zxid the watch was registered at, ``end`` the zxid of a marker node
written after the run had healed, whose event tells the watcher caught up.

With zxids on the events (zabby's clients) the comparison is exact, per zxid:

* **missed**: an expected change no event reported;
* **duplicated**: an expected change reported more than once (each extra copy counts);
* **mismatched**: an event whose ``(type, path)`` no change of its zxid has (a wrong zxid, a
  wrong type, a wrong path, or a zxid that changed nothing under ``W``);
* **reordered**: an event whose zxid is lower than one delivered before it.

The events of one zxid are compared as a multiset: the contract is zxid order, and a multi's
or a closeSession's events in any order within it are still that txn's events.  What the logs
cover is known too: a log covers the zxids from its first record to its last, except where it
jumps (an epoch's counters that do not follow, or a move to a later epoch that does not start
at counter 1 or has a snapshot in between).  An event at a zxid no log covers cannot be
judged and counts as ``unverifiable``, and no change there is expected (``holes`` names such
ranges within the checked window).

ZooKeeper's 3.8 events carry no zxid: they are matched to the expected sequence by ``(type,
path)`` only, greedily in order (each event to the earliest unmatched expected change with
its type and path).  What that finds is reported as figures, not failures: a ZooKeeper
client's persistent watch is re-registered after a reconnect without the changes made
meanwhile, so missing some is ZooKeeper's documented behaviour.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from zabby.opcodes import OpCode
from zabby.tree.txns import Txn, zxid_counter, zxid_epoch

CREATED, DELETED, CHANGED = "CREATED", "DELETED", "CHANGED"
HISTORY_LOST = "HISTORY_LOST"
CREATES = frozenset({OpCode.CREATE, OpCode.CREATE2, OpCode.CREATE_CONTAINER, OpCode.CREATE_TTL})
DELETES = frozenset({OpCode.DELETE, OpCode.DELETE_CONTAINER})
EXAMPLES_MAX = 10  # events quoted per kind in a verdict


@dataclass(frozen=True, slots=True, order=True)
class Change:
    """One event a committed txn makes: ``zxid`` (-1 when the event carried none), kazoo's
    event type name and the node's path."""

    zxid: int
    type: str
    path: str


def txn_changes(txn: Txn) -> list[Change]:
    """The changes a txn makes, in zabby's txn grammar (``zabby.tree.txns``)."""
    return [Change(txn.zxid, kind, path) for kind, path in _body_changes(txn.type, txn.body)]


def _body_changes(txn_type: int, body: Sequence[Any]) -> list[tuple[str, str]]:
    if txn_type in CREATES:
        return [(CREATED, body[0])]
    if txn_type in DELETES:
        return [(DELETED, body[0])]
    if txn_type == OpCode.SET_DATA:
        return [(CHANGED, body[0])]
    if txn_type == OpCode.MULTI:
        return [change for sub_type, sub_body in body[0] for change in _body_changes(sub_type, sub_body)]
    if txn_type == OpCode.CLOSE_SESSION:  # None: more ephemerals than a txn names (no workload of the harness makes so many)
        return [(DELETED, path) for path in body[0] or ()]
    return []  # errors, checks, setACL, sessions, reconfigs (/zookeeper/config) change nothing watched here


def same_txn(first: Txn, second: Txn) -> bool:
    """Whether two logs hold the same txn: the same header, and the same body or, for logs of
    the two kinds of server (``txn_logs``: ZooKeeper's bodies are partly kept raw, and its
    create2 requests logged as create2 txns, zabby's as create), the same changes."""
    if first[:4] != second[:4] or (first.type != second.type and not {first.type, second.type} <= CREATES):
        return False
    return first.body == second.body or txn_changes(first) == txn_changes(second)


def under(watch_path: str, path: str) -> bool:
    """Whether a recursive watch on ``watch_path`` covers ``path``."""
    return path == watch_path or watch_path == "/" or path.startswith(watch_path + "/")


@dataclass(slots=True)
class CommittedHistory:
    """The txns of several servers' logs merged by zxid: ``changes`` of each committed zxid
    held, ``uncommitted`` (proposals past their epoch's committed end, see the module's
    docstring) and ``conflicts`` (zxids whose txn differs between logs; the first log's is kept)."""

    changes: dict[int, list[Change]] = field(default_factory=dict)
    conflicts: list[int] = field(default_factory=list)
    _txns: dict[int, Txn] = field(default_factory=dict)
    _epoch_ends: dict[int, int] = field(default_factory=dict)  # epoch -> the lowest last zxid a log moved to a later epoch from
    _spans: list[list[int]] = field(default_factory=list)  # [first, last] zxids each log covers without a jump

    def add_log(self, txns: Iterable[Txn], snapshot_zxids: Iterable[int] = ()) -> None:
        """One server's log, by zxid, and the zxids of the snapshots it held."""
        snapshots = sorted(snapshot_zxids)
        previous: int | None = None
        for txn in txns:
            held = self._txns.get(txn.zxid)
            if held is None:
                self._txns[txn.zxid] = txn
            elif not same_txn(held, txn) and txn.zxid not in self.conflicts:
                self.conflicts.append(txn.zxid)
            if previous is None or not _follows(previous, txn.zxid, snapshots):
                self._spans.append([txn.zxid, txn.zxid])
            else:
                self._spans[-1][1] = txn.zxid
            if previous is not None and zxid_epoch(txn.zxid) > zxid_epoch(previous) and not _between(snapshots, previous, txn.zxid):
                epoch = zxid_epoch(previous)
                self._epoch_ends[epoch] = min(previous, self._epoch_ends.get(epoch, previous))
            previous = txn.zxid
        self.changes = {zxid: txn_changes(txn) for zxid, txn in sorted(self._txns.items()) if self._committed(zxid)}

    def _committed(self, zxid: int) -> bool:
        end = self._epoch_ends.get(zxid_epoch(zxid))
        return end is None or zxid <= end

    @property
    def uncommitted(self) -> list[int]:
        return sorted(zxid for zxid in self._txns if not self._committed(zxid))

    def covers(self, zxid: int) -> bool:
        """Whether some log covers ``zxid`` (holds it, or shows that no txn had it)."""
        return any(low <= zxid <= high for low, high in self._spans)

    def holes(self, start: int, end: int) -> list[tuple[int, int]]:
        """``(after, before)``: consecutive covered zxids in ``[start, end]`` with zxids no log
        covers between them (``start`` and ``end`` themselves must be covered to be judged)."""
        spans = sorted((max(low, start), min(high, end)) for low, high in self._spans if low <= end and high >= start)
        found, reach = [], None
        for low, high in spans:
            if reach is not None and low > reach + 1:  # (a move to a later epoch is covered only within one log)
                found.append((reach, low))
            reach = high if reach is None else max(reach, high)
        if not spans or spans[0][0] > start:
            found.insert(0, (start, spans[0][0] if spans else end))
        if reach is not None and reach < end:
            found.append((reach, end))
        return found

    def expected(self, watch_path: str, start: int, end: int) -> list[Change]:
        """The events a recursive watch on ``watch_path`` fires for txns in ``(start, end]``."""
        return [c for zxid, changes in self.changes.items() if start < zxid <= end for c in changes if under(watch_path, c.path)]

    def zxid_of(self, change_type: str, path: str) -> int | None:
        """The zxid of the last change of ``change_type`` to ``path`` (a marker's, say)."""
        found = [c.zxid for changes in self.changes.values() for c in changes if c.type == change_type and c.path == path]
        return max(found) if found else None


@dataclass(slots=True, kw_only=True)
class WatchVerdict:
    """The figures of one watcher; ``ok`` when nothing was missed, duplicated, reordered or
    mismatched (with zxids; without them only ``checked_zxids`` False says it is a report)."""

    events: int = 0  # events compared (within (start, end])
    expected: int = 0
    missed: int = 0
    duplicated: int = 0
    reordered: int = 0
    mismatched: int = 0
    unverifiable: int = 0
    history_lost: int = 0
    checked_zxids: bool = True
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.missed or self.duplicated or self.reordered or self.mismatched)

    def note(self, kind: str, text: str) -> None:
        quoted = self.examples.setdefault(kind, [])
        if len(quoted) < EXAMPLES_MAX:
            quoted.append(text)

    def figures(self) -> dict[str, Any]:
        keys = ("events", "expected", "missed", "duplicated", "reordered", "mismatched", "unverifiable", "history_lost")
        return {key: getattr(self, key) for key in keys} | ({"examples": self.examples} if self.examples else {})


def _adjacent(low: int, high: int) -> bool:
    """Whether no zxid can lie between ``low`` and ``high``: the next counter of an epoch, or
    the first of a later one."""
    if zxid_epoch(high) == zxid_epoch(low):
        return zxid_counter(high) == zxid_counter(low) + 1
    return zxid_counter(high) == 1


def _follows(low: int, high: int, snapshots: list[int]) -> bool:
    """Whether a log that goes from ``low`` to ``high`` covers what lies between: nothing lies
    between, or it moves from an epoch's last txn it has to the next epoch's first (its epoch
    ended there, unless a snapshot between says it skipped ahead)."""
    return _adjacent(low, high) and not _between(snapshots, low, high)


def _between(sorted_zxids: list[int], low: int, high: int) -> bool:
    """Whether some zxid of ``sorted_zxids`` lies strictly between ``low`` and ``high``."""
    index = bisect.bisect_right(sorted_zxids, low)
    return index < len(sorted_zxids) and sorted_zxids[index] < high


def check_zxid_events(observed: Sequence[Change], expected: Sequence[Change], start: int, end: int,
                      covers: Callable[[int], bool] | None = None) -> WatchVerdict:  # fmt: skip
    """A watcher whose events carry zxids against the expected changes (see the module's
    docstring); ``observed`` in delivery order, HISTORY_LOST events among them counted apart."""
    verdict = WatchVerdict(expected=len(expected))
    seen: dict[int, Counter[tuple[str, str]]] = defaultdict(Counter)
    highest = start
    for event in observed:
        if event.type == HISTORY_LOST:
            verdict.history_lost += 1
            verdict.note("history_lost", f"{event.path} resumed live at 0x{event.zxid:x}")
            continue
        if not start < event.zxid <= end:
            continue
        verdict.events += 1
        if event.zxid < highest:
            verdict.reordered += 1
            verdict.note("reordered", f"0x{event.zxid:x} {event.type} {event.path} after 0x{highest:x}")
        highest = max(highest, event.zxid)
        seen[event.zxid][(event.type, event.path)] += 1
    wanted: dict[int, Counter[tuple[str, str]]] = defaultdict(Counter)
    for change in expected:
        wanted[change.zxid][(change.type, change.path)] += 1
    for zxid in sorted(set(seen) | set(wanted)):
        got, want = seen.get(zxid, Counter()), wanted.get(zxid, Counter())
        for key in sorted(set(got) | set(want)):
            extra, short = got[key] - want[key], want[key] - got[key]
            label = f"0x{zxid:x} {key[0]} {key[1]}"
            if extra > 0 and not want[key]:
                if covers is not None and not covers(zxid):
                    verdict.unverifiable += extra
                else:
                    verdict.mismatched += extra
                    verdict.note("mismatched", label)
            elif extra > 0:
                verdict.duplicated += extra
                verdict.note("duplicated", f"{label} x{got[key]}")
            elif short > 0:
                verdict.missed += short
                verdict.note("missed", label)
    return verdict


def check_unzxid_events(observed: Sequence[Change], expected: Sequence[Change]) -> WatchVerdict:
    """A watcher whose events carry no zxid (ZooKeeper 3.8's) against the expected changes,
    matched by ``(type, path)`` greedily in order: missed = expected changes no event matched,
    duplicated = events with no expected change left to match.  Order is not judged: without
    zxids, a missed change shifts the matching of its path's later events."""
    verdict = WatchVerdict(expected=len(expected), checked_zxids=False)
    positions: dict[tuple[str, str], list[int]] = defaultdict(list)
    for index, change in enumerate(expected):
        positions[(change.type, change.path)].append(index)
    cursor: Counter[tuple[str, str]] = Counter()
    matched = 0
    for event in observed:
        if event.type == HISTORY_LOST:
            verdict.history_lost += 1
            continue
        verdict.events += 1
        key = (event.type, event.path)
        slots = positions.get(key, [])
        if cursor[key] >= len(slots):
            verdict.duplicated += 1
            verdict.note("duplicated", f"{event.type} {event.path}")
            continue
        cursor[key] += 1
        matched += 1
    verdict.missed = len(expected) - matched
    for key, slots in positions.items():
        for index in slots[cursor[key] :][:EXAMPLES_MAX]:
            verdict.note("missed", f"{expected[index].type} {expected[index].path}")
    return verdict
