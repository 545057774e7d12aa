"""The watch registry of one server: which watcher waits for what (ZooKeeper's WatchManager).

Watchers are the server's sessions: hashable, with the ids they proved (``auth_ids``,
``superuser``), and ``hold_state(delta)``, which charges each watch's bytes (``watch_bytes``)
to the client memory budget as it is added and as it goes.  ``trigger`` turns the ``(EventType, path, acl)`` list that
``DataTree.apply`` returned into ``(watcher, type, path)`` deliveries, removing one-shot
watches as they fire; a watcher that holds several watches on a path gets one event, as in
ZooKeeper.  Persistent watches stay; recursive ones fire for the whole subtree and never
with NodeChildrenChanged.

An event goes only to watchers that may READ the node it is about (ZooKeeper's fix of
CVE-2024-23944, in 3.8.4 and Debian's 3.8.0): else a persistent recursive watch would
reveal the paths of nodes its session cannot read.  A one-shot watch whose event is held
back is used up all the same, as in ZooKeeper, which removes it before the check.

``WatchHistory`` keeps, beside the live watches, the events of the last txns applied (zabby's
extension, docs/protocol.md): a persistent watch added with ``since_zxid`` is first sent what
it would have fired for every txn after that zxid.  It is kept from the applies, not read
back from the txn log: the events of a txn depend on the tree it was applied to (a
closeSession's ephemerals, a multi's parents), and the READ filter on each node's ACL as it
was then.  History replay and live triggers match by the one rule (``recursive_paths``,
``_may_read``).
"""

from __future__ import annotations

from array import array
from collections import deque
from itertools import chain, islice
from collections.abc import Hashable, Iterable, Iterator
from typing import Any

from zabby.errors import HistoryCompacted
from zabby.opcodes import EventType, WatcherType
from zabby.tree import acl as acls
from zabby.tree.paths import ancestors

Delivery = tuple[Hashable, int, str]
Run = tuple[tuple[Hashable, ...], list[tuple[int, str]]]  # watchers, and the events each of them gets, in order
Event = tuple[int, str, tuple[acls.ACL, ...]]  # as DataTree.apply returns them
Replayed = tuple[int, int, str]  # (zxid, event type, path)

_DATA_EVENTS = (EventType.NODE_CREATED, EventType.NODE_DELETED, EventType.NODE_DATA_CHANGED)
WATCH_BYTES = 200  # what a watch costs beside its path: its place in a table's set and in its watcher's


def watch_bytes(path: str) -> int:
    """What one watch on ``path`` is charged (its watcher's ``hold_state``)."""
    return WATCH_BYTES + len(path)
_DATA, _CHILD, _PERSISTENT, _RECURSIVE = range(4)  # the tables, numbered for each watcher's own set


class WatchManager:
    """The four tables (path → watchers) and, beside them, each watcher's own watches, so that
    forgetting a watcher (its connection closed) touches only its watches, never the rest."""

    def __init__(self) -> None:
        self.data: dict[str, set[Hashable]] = {}
        self.child: dict[str, set[Hashable]] = {}
        self.persistent: dict[str, set[Hashable]] = {}
        self.recursive: dict[str, set[Hashable]] = {}
        self._held: dict[Hashable, set[tuple[int, str]]] = {}  # watcher → (table number, path)
        self._numbered = (self.data, self.child, self.persistent, self.recursive)

    def _tables(self) -> tuple[dict[str, set[Hashable]], ...]:
        return self._numbered

    def _add(self, number: int, path: str, watcher: Any) -> None:
        key = (number, path)
        held = self._held.get(watcher)
        if held is None:
            held = self._held[watcher] = set()
        elif key in held:
            return
        held.add(key)
        self._numbered[number].setdefault(path, set()).add(watcher)
        watcher.hold_state(watch_bytes(path))

    def add_data(self, path: str, watcher: Any) -> None:
        self._add(_DATA, path, watcher)

    def add_child(self, path: str, watcher: Any) -> None:
        self._add(_CHILD, path, watcher)

    def add_persistent(self, path: str, watcher: Any, recursive: bool) -> None:
        self._add(_RECURSIVE if recursive else _PERSISTENT, path, watcher)

    def trigger(self, events: Iterable[tuple[int, str, tuple[acls.ACL, ...]]]) -> list[Delivery]:
        """Each ``(watcher, type, path)`` delivery of ``events``, event by event (``runs``, flat)."""
        return [(watcher, event_type, path) for readers, heard in self.runs(events) for event_type, path in heard for watcher in readers]

    def runs(self, events: Iterable[tuple[int, str, tuple[acls.ACL, ...]]]) -> list[Run]:
        """The deliveries of ``events`` as runs: the watchers that get the run's events, and the
        events, in order.  Consecutive events heard by the same watchers make one run, so a
        multi of 5,000 setData seen by 50 recursive watches is one run of 5,000 events for 50
        watchers, not 250,000 deliveries; the persistent and recursive watchers of a path, and
        which of them may read it, are found once for each path, type and ACL."""
        runs: list[Run] = []
        standing: dict[tuple[int, str, int], tuple[set[Hashable], tuple[Hashable, ...]]] = {}
        same: dict[tuple[Hashable, ...], tuple[Hashable, ...]] = {}  # one tuple for the same readers
        last: tuple[Hashable, ...] | None = None
        for event_type, path, acl in events:
            fired: set[Hashable] = set()
            if event_type == EventType.NODE_CHILDREN_CHANGED:
                self._fire(_CHILD, self.child, path, fired)
            else:
                self._fire(_DATA, self.data, path, fired)
                if event_type == EventType.NODE_DELETED:
                    self._fire(_CHILD, self.child, path, fired)
            key = (event_type, path, id(acl))  # the events hold their ACLs: no id is reused meanwhile
            found = standing.get(key)
            if found is None:
                watchers: set[Hashable] = set(self.persistent.get(path, ()))
                if self.recursive:
                    for watch_path in recursive_paths(event_type, path):
                        watchers.update(self.recursive.get(watch_path, ()))
                found = standing[key] = (watchers, tuple(watcher for watcher in watchers if _may_read(watcher, acl)))
            if fired:  # one event for a watcher with several watches on the path
                fired.update(found[0])
                readers = tuple(watcher for watcher in fired if _may_read(watcher, acl))
            else:
                readers = found[1]
            if not readers:
                continue
            readers = same.setdefault(readers, readers)
            if readers is last:
                runs[-1][1].append((event_type, path))
            else:
                runs.append((readers, [(event_type, path)]))
                last = readers
        return runs

    def _fire(self, number: int, table: dict[str, set[Hashable]], path: str, into: set[Hashable]) -> None:
        """One-shot watches on ``path`` fire: they leave the table and their watchers' sets."""
        fired = table.pop(path, None)
        if fired:
            key, cost = (number, path), -watch_bytes(path)
            for watcher in fired:
                held = self._held.get(watcher)
                if held is not None:
                    held.discard(key)
                    if not held:
                        del self._held[watcher]
                watcher.hold_state(cost)  # type: ignore[attr-defined]
            into.update(fired)

    def _tables_for(self, watcher_type: int) -> tuple[int, ...]:
        if watcher_type == WatcherType.ANY:
            return (_DATA, _CHILD, _PERSISTENT, _RECURSIVE)
        tables: dict[int, tuple[int, ...]] = {
            WatcherType.CHILDREN: (_CHILD,),
            WatcherType.DATA: (_DATA,),
            WatcherType.PERSISTENT: (_PERSISTENT,),
            WatcherType.PERSISTENT_RECURSIVE: (_RECURSIVE,),
        }
        return tables.get(watcher_type, ())

    def remove(self, path: str, watcher: Hashable, watcher_type: int) -> bool:
        """Remove this watcher's watches of one type on ``path``; False if there were none."""
        removed = False
        for number in self._tables_for(watcher_type):
            removed = self._remove_one(number, path, watcher) or removed
        return removed

    def _remove_one(self, number: int, path: str, watcher: Any) -> bool:
        table = self._tables()[number]
        watchers = table.get(path)
        if watchers is None or watcher not in watchers:
            return False
        watchers.discard(watcher)
        if not watchers:
            del table[path]
        held = self._held.get(watcher)
        if held is not None:
            held.discard((number, path))
            if not held:
                del self._held[watcher]
        watcher.hold_state(-watch_bytes(path))
        return True

    def has(self, path: str, watcher: Hashable, watcher_type: int) -> bool:
        tables = self._tables()
        return any(watcher in tables[number].get(path, ()) for number in self._tables_for(watcher_type))

    def remove_watcher(self, watcher: Any) -> None:
        """Forget every watch of a watcher (its connection closed): O(its watches)."""
        held = self._held.pop(watcher, None)
        if not held:
            return
        tables = self._tables()
        for number, path in held:
            table = tables[number]
            watchers = table.get(path)
            if watchers is not None:
                watchers.discard(watcher)
                if not watchers:
                    del table[path]
        watcher.hold_state(-sum(watch_bytes(path) for _, path in held))

    def count(self) -> int:
        return sum(len(held) for held in self._held.values())

    def paths_by_watcher(self) -> dict[Hashable, set[str]]:
        return {watcher: {path for _, path in held} for watcher, held in self._held.items()}

    def watchers_by_path(self) -> dict[str, set[Hashable]]:
        out: dict[str, set[Hashable]] = {}
        for table in self._tables():
            for path, watchers in table.items():
                out.setdefault(path, set()).update(watchers)
        return out


def recursive_paths(event_type: int, path: str) -> tuple[str, ...]:
    """The paths whose persistent recursive watches an event on ``path`` reaches: its own and
    its ancestors', for data events only (never NodeChildrenChanged).  A plain persistent
    watch sees every event on its own path, and nothing else."""
    if event_type not in _DATA_EVENTS:
        return ()
    return (path, *ancestors(path))


def sees(watch_path: str, recursive: bool, event_type: int, path: str) -> bool:
    """Whether a persistent watch on ``watch_path`` fires for this event (the rule above)."""
    return watch_path in recursive_paths(event_type, path) if recursive else watch_path == path


def _may_read(watcher: Any, acl: tuple[acls.ACL, ...]) -> bool:
    return acls.check(acl, acls.READ, watcher.auth_ids, watcher.superuser)


REPLAY_BYTES_PER_EVENT = 24  # an event's frame without its path: the length prefix, six msgpack values, the xid
HISTORY_TXN_BYTES = 120  # what the history holds for a txn: its entry, its place in an index or two
HISTORY_EVENT_BYTES = 80  # and for each of its events beside the path
_ONE_EVENT_TXN_BYTES = HISTORY_TXN_BYTES + HISTORY_EVENT_BYTES
_TWO_EVENT_TXN_BYTES = HISTORY_TXN_BYTES + 2 * HISTORY_EVENT_BYTES
Kept = tuple[int, int, str, tuple[acls.ACL, ...]]  # an event in the history: (zxid, type, path, acl)
# A txn in the history: its zxid in an array of them, and its events' type, path and ACL in one
# flat tuple: for a txn of one event (nearly all), the apply's own event tuple, kept as it is.  A
# txn so costs no object of its own, which a pipelined write felt twice: in the young collections
# that walked one (every 10,000 txns kept, where a server that keeps nothing runs none) and in
# the memory it held (a tuple, its size and zxid as ints: 140 bytes beside the path).
Entry = tuple[Any, ...]
_CONCATENATED_MAX = 8  # events of a txn joined by concatenation (faster for a few, quadratic)
_COMPACT_AT = 4096  # forgotten entries at the front of the list before it is cut
# Txns recorded and not indexed before a record indexes them; None: only when a resume needs the
# index.  Indexing costs about 0.6 µs a txn, on every server, for every write: paid only where
# watches resume, the first resume indexes what the history holds (at most watchHistoryTxns:
# 40-80 ms at the default 100,000), and each later one what was recorded since.
INDEX_BACKLOG_MAX: int | None = None


def _entry_bytes(entry: Entry) -> int:
    """What the history counts for a txn kept: ``HISTORY_TXN_BYTES``, and for each of its
    events ``HISTORY_EVENT_BYTES`` and its path (``record`` counts a txn of one or two events
    the same way, inline)."""
    if len(entry) == 3:  # one event: nearly every txn a full history forgets
        return _ONE_EVENT_TXN_BYTES + len(entry[1])
    return HISTORY_TXN_BYTES + len(entry) // 3 * HISTORY_EVENT_BYTES + sum(map(len, entry[1::3]))


def _top(path: str) -> str:
    """The first name of ``path`` ("a" of /a/b; "" of /): the key of the history's index."""
    cut = path.find("/", 1)
    return path[1:cut] if cut > 0 else path[1:]


class WatchHistory:
    """The events of the last txns applied (zabby's extension): at most ``txns_max`` txns that
    made any (``watchHistoryTxns``) and ``bytes_max`` bytes of them (``watchHistoryBytes``),
    oldest first.  ``since`` is the zxid the history starts after: every txn with a greater
    zxid is in it (a txn that made no event trivially), so a watch may resume from any zxid
    from ``since`` on.  A history starts at the zxid of the tree it follows and is started
    again whenever the tree is replaced (a SNAP, a reload from disk).

    Recording a txn appends its events' tuple and its zxid (every server records every write;
    a resume is rare).  The txns are indexed by the first names of their events' paths (nearly
    always one) in bulk, when a resume needs the index, from where the last indexing left it
    (or the oldest txn kept), so a resume reads only the txns of its
    top-level subtree (every txn for a watch on ``/``), newest first down to its zxid: it
    costs about what it returns, not the history's size.  The index holds the txns' sequence
    numbers; the ones of forgotten txns are dropped from it once as many txns were forgotten
    as it has names."""

    def __init__(self, txns_max: int, since: int, bytes_max: int = 64 * 2**20) -> None:
        if txns_max < 0 or bytes_max < 0:
            raise ValueError(f"watchHistoryTxns and watchHistoryBytes must be 0 or more, not {txns_max}, {bytes_max}")
        self.txns_max = txns_max
        self.bytes_max = bytes_max
        self.since = since
        self.bytes = 0
        self._entries: list[Entry | None] = []  # oldest first; None where forgotten, before ``_head``
        self._zxids = array("Q")  # each entry's txn zxid
        self._head = 0  # the index in ``_entries`` of the oldest kept
        self._base = 0  # the sequence number of ``_entries[0]``
        self._indexed = 0  # the sequence number of the first txn not in the index yet
        self._by_top: dict[str, deque[int]] = {}  # a first name → the sequence numbers of the txns with an event under it
        self._forgotten_unpruned = 0  # txns forgotten since the index was last pruned

    def __len__(self) -> int:
        return len(self._entries) - self._head

    def record(self, zxid: int, events: list[Event]) -> None:
        """The events txn ``zxid`` made, as it was applied (after every zxid recorded before)."""
        if not self.txns_max or not self.bytes_max:
            self.since = zxid
            return
        entry: Entry
        count = len(events)
        if count == 1:  # nearly every txn: one event, no loop and no sum (``_entry_bytes`` of it)
            entry = events[0]
            size = _ONE_EVENT_TXN_BYTES + len(entry[1])
        elif count == 2:  # a create or a delete: its node's event and its parent's
            first, second = events
            entry = first + second
            size = _TWO_EVENT_TXN_BYTES + len(first[1]) + len(second[1])
        else:
            if count <= _CONCATENATED_MAX:  # the events' fields: tuple concatenation, in C
                entry = sum(events, ())
            else:  # a multi's: concatenation copies the growing tuple per event (5,000 events: 0.33 s)
                entry = tuple(chain.from_iterable(events))
            size = _entry_bytes(entry)
        entries = self._entries
        entries.append(entry)
        self._zxids.append(zxid)
        self.bytes += size
        if len(entries) - self._head > self.txns_max or self.bytes > self.bytes_max:
            self._forget_oldest()
        if INDEX_BACKLOG_MAX is not None and self._base + len(entries) - self._indexed >= INDEX_BACKLOG_MAX:
            self._index()

    def _forget_oldest(self) -> None:
        """Forget the oldest txns until both bounds hold (no more: a watch may resume over
        every txn the bounds allow)."""
        entries, zxids, head = self._entries, self._zxids, self._head
        while len(entries) - head > self.txns_max or self.bytes > self.bytes_max:
            oldest = entries[head]
            assert oldest is not None
            entries[head] = None
            self.since = zxids[head]
            head += 1
            self.bytes -= _entry_bytes(oldest)
            self._forgotten_unpruned += 1
        if head >= _COMPACT_AT and head * 2 >= len(entries):
            del entries[:head]
            del zxids[:head]
            self._base += head
            head = 0
        self._head = head

    def _index(self) -> dict[str, deque[int]]:
        """The index, brought up to the newest txn, without the forgotten ones."""
        by_top, entries, base = self._by_top, self._entries, self._base
        first = base + self._head
        seq = max(self._indexed, first)
        for entry in islice(entries, seq - base, None):
            path = entry[1]  # type: ignore[index]  # kept entries are never None
            cut = path.find("/", 1)
            top = path[1:cut] if cut > 0 else path[1:]
            found = by_top.get(top)
            if found is None:
                found = by_top[top] = deque()
            found.append(seq)
            if len(entry) > 3:  # type: ignore[arg-type]  # more than one event: under other first names too?
                for at in range(4, len(entry), 3):  # type: ignore[arg-type]
                    other = _top(entry[at])  # type: ignore[index]
                    if other != top and (not by_top.get(other) or by_top[other][-1] != seq):
                        by_top.setdefault(other, deque()).append(seq)
            seq += 1
        self._indexed = seq
        if self._forgotten_unpruned >= len(by_top):  # as many forgotten as names: the pruning costs about what they did
            for key in list(by_top):
                found = by_top[key]
                while found and found[0] < first:
                    found.popleft()
                if not found:
                    del by_top[key]
            self._forgotten_unpruned = 0
        return by_top

    def _newest_first(self, watch_path: str, recursive: bool) -> Iterator[Kept]:
        """The events a watch on ``watch_path`` may see, newest first: a recursive one on ``/``
        every txn's, any other the events of the txns of its top-level subtree."""
        entries, zxids, base = self._entries, self._zxids, self._base
        first = base + self._head
        if watch_path == "/" and recursive:
            seqs: Iterable[int] = range(base + len(entries) - 1, first - 1, -1)
        else:
            seqs = reversed(self._index().get(_top(watch_path), ()))
        for seq in seqs:
            if seq < first:
                return
            entry = entries[seq - base]
            assert entry is not None
            zxid = zxids[seq - base]
            for at in range(len(entry) - 3, -1, -3):
                yield zxid, entry[at], entry[at + 1], entry[at + 2]

    def replay(self, watcher: Any, watch_path: str, recursive: bool, since_zxid: int, bytes_max: int) -> list[Replayed]:
        """What a persistent watch of ``watcher`` on ``watch_path`` would have fired for the
        txns after ``since_zxid``, in zxid order (READ-filtered with its ids now).

        Raises:
            HistoryCompacted: HISTORYCOMPACTED when ``since_zxid`` is before ``since``, or when the
                events would pass ``bytes_max`` (the session's reply limit): its ``oldest_zxid``
                is then the oldest zxid this watch can resume from here.
        """
        if since_zxid < self.since:
            raise _compacted(since_zxid, self.since, "this server's watch history (watchHistoryTxns, watchHistoryBytes) starts after it")
        out: list[Replayed] = []
        total = 0
        for zxid, event_type, path, acl in self._newest_first(watch_path, recursive):
            if zxid <= since_zxid:  # newest first: stop at since_zxid, or at the limit
                break
            if sees(watch_path, recursive, event_type, path) and _may_read(watcher, acl):
                total += REPLAY_BYTES_PER_EVENT + len(path)
                if total > bytes_max:
                    raise _compacted(since_zxid, zxid, f"its events pass the {bytes_max}-byte reply limit (half of clientConnectionMemoryMax)")
                out.append((zxid, event_type, path))
        out.reverse()
        return out


def _compacted(since_zxid: int, oldest_zxid: int, why: str) -> HistoryCompacted:
    return HistoryCompacted(f"cannot resume from zxid 0x{since_zxid:x}: {why}; the oldest zxid this watch can resume from here is "
                            f"0x{oldest_zxid:x} (read the current state, then resume from the zxid of that read)", oldest_zxid)  # fmt: skip
