"""Client-visible states, events and the stat tuple, shaped exactly like kazoo's.

``KazooState``, ``KeeperState`` and ``EventType`` are ``str`` enums whose values are kazoo's
strings, so ``state == "CONNECTED"`` and ``state == KazooState.CONNECTED`` both hold.
``WatchedEvent`` and ``ZnodeStat`` are namedtuples with kazoo's field names and properties.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from zabby.opcodes import EventType as WireEventType


class KazooState(str, enum.Enum):
    """High-level connection state (Curator-style): CONNECTED, SUSPENDED, LOST."""

    SUSPENDED = "SUSPENDED"
    CONNECTED = "CONNECTED"
    LOST = "LOST"

    def __str__(self) -> str:
        return self.value


class KeeperState(str, enum.Enum):
    """The lower-level session state (kazoo's ``client_state``)."""

    AUTH_FAILED = "AUTH_FAILED"
    CONNECTED = "CONNECTED"
    CONNECTED_RO = "CONNECTED_RO"
    CONNECTING = "CONNECTING"
    CLOSED = "CLOSED"
    EXPIRED_SESSION = "EXPIRED_SESSION"

    def __str__(self) -> str:
        return self.value


class EventType(str, enum.Enum):
    """What happened to a watched node; NONE is a session event (watch dropped at LOST).

    HISTORY_LOST is zabby's own and never comes off the wire: a persistent watch that could
    not resume from its last event after a reconnect (no server's history reaches back) was
    registered again live, and what changed meanwhile is unknown: re-read."""

    CREATED = "CREATED"
    DELETED = "DELETED"
    CHANGED = "CHANGED"
    CHILD = "CHILD"
    NONE = "NONE"
    DATA_WATCH_REMOVED = "DATA_WATCH_REMOVED"
    CHILD_WATCH_REMOVED = "CHILD_WATCH_REMOVED"
    PERSISTENT_WATCH_REMOVED = "PERSISTENT_WATCH_REMOVED"
    HISTORY_LOST = "HISTORY_LOST"

    def __str__(self) -> str:
        return self.value


EVENT_TYPE_MAP: dict[int, EventType] = {
    WireEventType.NONE: EventType.NONE,
    WireEventType.NODE_CREATED: EventType.CREATED,
    WireEventType.NODE_DELETED: EventType.DELETED,
    WireEventType.NODE_DATA_CHANGED: EventType.CHANGED,
    WireEventType.NODE_CHILDREN_CHANGED: EventType.CHILD,
    WireEventType.DATA_WATCH_REMOVED: EventType.DATA_WATCH_REMOVED,
    WireEventType.CHILD_WATCH_REMOVED: EventType.CHILD_WATCH_REMOVED,
    WireEventType.PERSISTENT_WATCH_REMOVED: EventType.PERSISTENT_WATCH_REMOVED,
}


class WatchedEvent(NamedTuple):
    """A change a watch function is told about: ``(type, state, path)`` as in kazoo, then
    ``zxid``: the txn that made the change (-1 for events no txn made, such as a session's).
    ``event[0]``, ``event[1]``, ``event[2]`` and the field names are kazoo's."""

    type: EventType
    state: KeeperState
    path: str | None
    zxid: int = -1


class ZnodeStat(NamedTuple):
    """A znode's stat, with kazoo's (ZooKeeper's) field names and convenience properties."""

    czxid: int
    mzxid: int
    ctime: int
    mtime: int
    version: int
    cversion: int
    aversion: int
    ephemeralOwner: int
    dataLength: int
    numChildren: int
    pzxid: int

    @property
    def acl_version(self) -> int:
        return self.aversion

    @property
    def children_version(self) -> int:
        return self.cversion

    @property
    def created(self) -> float:
        """Creation time in seconds since the epoch (``ctime`` is milliseconds)."""
        return self.ctime / 1000.0

    @property
    def last_modified(self) -> float:
        return self.mtime / 1000.0

    @property
    def owner_session_id(self) -> int | None:
        """The owning session of an ephemeral node, or None (kazoo returns None for 0)."""
        return self.ephemeralOwner or None

    @property
    def creation_transaction_id(self) -> int:
        return self.czxid

    @property
    def last_modified_transaction_id(self) -> int:
        return self.mzxid

    @property
    def data_length(self) -> int:
        return self.dataLength

    @property
    def children_count(self) -> int:
        return self.numChildren
