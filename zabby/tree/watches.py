"""The watch registry of one server: which watcher waits for what (ZooKeeper's WatchManager).

Watchers are the server's sessions: hashable, with the ids they proved (``auth_ids``,
``superuser``).  ``trigger`` turns the ``(EventType, path, acl)`` list that
``DataTree.apply`` returned into ``(watcher, type, path)`` deliveries, removing one-shot
watches as they fire; a watcher that holds several watches on a path gets one event, as in
ZooKeeper.  Persistent watches stay; recursive ones fire for the whole subtree and never
with NodeChildrenChanged.

An event goes only to watchers that may READ the node it is about (ZooKeeper's fix of
CVE-2024-23944, in 3.8.4 and Debian's 3.8.0): else a persistent recursive watch would
reveal the paths of nodes its session cannot read.  A one-shot watch whose event is held
back is used up all the same, as in ZooKeeper, which removes it before the check.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

from zabby.opcodes import EventType, WatcherType
from zabby.tree import acl as acls
from zabby.tree.paths import ancestors

Delivery = tuple[Hashable, int, str]

_DATA_EVENTS = (EventType.NODE_CREATED, EventType.NODE_DELETED, EventType.NODE_DATA_CHANGED)


class WatchManager:
    def __init__(self) -> None:
        self.data: dict[str, set[Hashable]] = {}
        self.child: dict[str, set[Hashable]] = {}
        self.persistent: dict[str, set[Hashable]] = {}
        self.recursive: dict[str, set[Hashable]] = {}

    def _tables(self) -> tuple[dict[str, set[Hashable]], ...]:
        return (self.data, self.child, self.persistent, self.recursive)

    def add(self, table: dict[str, set[Hashable]], path: str, watcher: Hashable) -> None:
        table.setdefault(path, set()).add(watcher)

    def add_data(self, path: str, watcher: Hashable) -> None:
        self.data.setdefault(path, set()).add(watcher)

    def add_child(self, path: str, watcher: Hashable) -> None:
        self.child.setdefault(path, set()).add(watcher)

    def add_persistent(self, path: str, watcher: Hashable, recursive: bool) -> None:
        self.add(self.recursive if recursive else self.persistent, path, watcher)

    def trigger(self, events: Iterable[tuple[int, str, tuple[acls.ACL, ...]]]) -> list[Delivery]:
        out: list[Delivery] = []
        for event_type, path, acl in events:
            watchers: set[Hashable] = set()
            if event_type == EventType.NODE_CHILDREN_CHANGED:
                watchers.update(self.child.pop(path, ()))
            else:
                watchers.update(self.data.pop(path, ()))
                if event_type == EventType.NODE_DELETED:
                    watchers.update(self.child.pop(path, ()))
            watchers.update(self.persistent.get(path, ()))
            if self.recursive and event_type in _DATA_EVENTS:
                watchers.update(self.recursive.get(path, ()))
                for ancestor in ancestors(path):
                    watchers.update(self.recursive.get(ancestor, ()))
            out.extend((watcher, event_type, path) for watcher in watchers if _may_read(watcher, acl))
        return out

    def _tables_for(self, watcher_type: int) -> tuple[dict[str, set[Hashable]], ...]:
        if watcher_type == WatcherType.ANY:
            return self._tables()
        return {
            WatcherType.CHILDREN: (self.child,),
            WatcherType.DATA: (self.data,),
            WatcherType.PERSISTENT: (self.persistent,),
            WatcherType.PERSISTENT_RECURSIVE: (self.recursive,),
        }.get(watcher_type, ())

    def remove(self, path: str, watcher: Hashable, watcher_type: int) -> bool:
        """Remove this watcher's watches of one type on ``path``; False if there were none."""
        removed = False
        for table in self._tables_for(watcher_type):
            watchers = table.get(path)
            if watchers is not None and watcher in watchers:
                watchers.discard(watcher)
                removed = True
                if not watchers:
                    del table[path]
        return removed

    def has(self, path: str, watcher: Hashable, watcher_type: int) -> bool:
        return any(watcher in table.get(path, ()) for table in self._tables_for(watcher_type))

    def remove_watcher(self, watcher: Hashable) -> None:
        """Forget every watch of a watcher (its connection closed)."""
        for table in self._tables():
            empty = []
            for path, watchers in table.items():
                watchers.discard(watcher)
                if not watchers:
                    empty.append(path)
            for path in empty:
                del table[path]

    def count(self) -> int:
        return sum(len(w) for table in self._tables() for w in table.values())

    def paths_by_watcher(self) -> dict[Hashable, set[str]]:
        out: dict[Hashable, set[str]] = {}
        for table in self._tables():
            for path, watchers in table.items():
                for watcher in watchers:
                    out.setdefault(watcher, set()).add(path)
        return out

    def watchers_by_path(self) -> dict[str, set[Hashable]]:
        out: dict[str, set[Hashable]] = {}
        for table in self._tables():
            for path, watchers in table.items():
                out.setdefault(path, set()).update(watchers)
        return out


def _may_read(watcher: Any, acl: tuple[acls.ACL, ...]) -> bool:
    return acls.check(acl, acls.READ, watcher.auth_ids, watcher.superuser)
