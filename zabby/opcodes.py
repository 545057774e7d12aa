"""Numbers shared by every layer: op codes, create modes, watch event types and states.

All values are ZooKeeper's (``ZooDefs.OpCode``, ``CreateMode``, ``Watcher.Event``), so the
msgpack protocol and a jute codec map one to one.

A member read as the class's attribute (``OpCode.CREATE``) costs about 60 ns under Python 3.11,
where ``EnumType.__getattr__`` sends every attribute of an enum class through a slot hook; a
module global costs 10.  A write read some 44 of them across the three servers, so the modules
that compare every request or txn with members keep those members in module globals (the same
objects: a reply, an event or a log line shows them as before).
"""

from __future__ import annotations

import enum


class OpCode(enum.IntEnum):
    NOTIFICATION = 0
    CREATE = 1
    DELETE = 2
    EXISTS = 3
    GET_DATA = 4
    SET_DATA = 5
    GET_ACL = 6
    SET_ACL = 7
    GET_CHILDREN = 8
    SYNC = 9
    PING = 11
    GET_CHILDREN2 = 12
    CHECK = 13
    MULTI = 14
    CREATE2 = 15
    RECONFIG = 16
    CHECK_WATCHES = 17
    REMOVE_WATCHES = 18
    CREATE_CONTAINER = 19
    DELETE_CONTAINER = 20
    CREATE_TTL = 21
    MULTI_READ = 22
    AUTH = 100
    SET_WATCHES = 101
    SASL = 102
    GET_EPHEMERALS = 103
    GET_ALL_CHILDREN_NUMBER = 104
    SET_WATCHES2 = 105
    ADD_WATCH = 106
    WHO_AM_I = 107
    WAIT_FOR_ZXID = 1000  # zabby's own, msgpack only (docs/protocol.md): a jute client is answered UNIMPLEMENTED
    CREATE_SESSION = -10
    CLOSE_SESSION = -11
    ERROR = -1


WRITE_OPS = frozenset(
    {
        OpCode.CREATE,
        OpCode.CREATE2,
        OpCode.CREATE_CONTAINER,
        OpCode.CREATE_TTL,
        OpCode.DELETE,
        OpCode.SET_DATA,
        OpCode.SET_ACL,
        OpCode.MULTI,
        OpCode.RECONFIG,
        OpCode.CLOSE_SESSION,
    }
)

# The four creates.  A tuple, not a set: it is compared with whatever a txn read back or a
# client sent carries as its type, an unhashable value too (then it is no create)
CREATE_OPS = (OpCode.CREATE, OpCode.CREATE2, OpCode.CREATE_CONTAINER, OpCode.CREATE_TTL)

ZABBY_OPS = frozenset({OpCode.WAIT_FOR_ZXID})  # not ZooKeeper's: never taken from a jute client


class CreateMode(enum.IntEnum):
    PERSISTENT = 0
    EPHEMERAL = 1
    PERSISTENT_SEQUENTIAL = 2
    EPHEMERAL_SEQUENTIAL = 3
    CONTAINER = 4
    PERSISTENT_WITH_TTL = 5
    PERSISTENT_SEQUENTIAL_WITH_TTL = 6

    @property
    def is_ephemeral(self) -> bool:
        return self in _EPHEMERAL_MODES

    @property
    def is_sequential(self) -> bool:
        return self in _SEQUENTIAL_MODES

    @property
    def is_ttl(self) -> bool:
        return self in _TTL_MODES

    @classmethod
    def of(cls, flags: object) -> CreateMode:
        """The mode ``flags`` names (as ``CreateMode(flags)``, without an enum call per create);
        ValueError or TypeError if none."""
        try:
            return _CREATE_MODES[flags]
        except KeyError:
            raise ValueError(f"{flags!r} is not a valid CreateMode") from None


# sets of ints: membership is a hash look-up, not enum comparisons (asked on every create)
_EPHEMERAL_MODES = frozenset({1, 3})
_SEQUENTIAL_MODES = frozenset({2, 3, 6})
_TTL_MODES = frozenset({5, 6})
_CREATE_MODES: dict[object, CreateMode] = {int(mode): mode for mode in CreateMode}


class EventType(enum.IntEnum):
    NONE = -1
    NODE_CREATED = 1
    NODE_DELETED = 2
    NODE_DATA_CHANGED = 3
    NODE_CHILDREN_CHANGED = 4
    DATA_WATCH_REMOVED = 5
    CHILD_WATCH_REMOVED = 6
    PERSISTENT_WATCH_REMOVED = 7


class KeeperState(enum.IntEnum):
    DISCONNECTED = 0
    SYNC_CONNECTED = 3
    AUTH_FAILED = 4
    CONNECTED_READ_ONLY = 5
    CLOSED = 7
    EXPIRED = -112


class WatcherType(enum.IntEnum):
    CHILDREN = 1
    DATA = 2
    ANY = 3
    PERSISTENT = 4
    PERSISTENT_RECURSIVE = 5


class AddWatchMode(enum.IntEnum):
    PERSISTENT = 0
    PERSISTENT_RECURSIVE = 1


# ephemeralOwner encodings of ZooKeeper's EphemeralType: containers and TTL nodes
CONTAINER_OWNER = -(2**63)
TTL_OWNER_MARK = 0xFF << 56
TTL_MAX_MS = (1 << 40) - 1


def ttl_owner(ttl_ms: int) -> int:
    """The signed 64-bit ephemeralOwner ZooKeeper stores for a TTL node."""
    raw = TTL_OWNER_MARK | ttl_ms
    return raw - 2**64


def owner_ttl_ms(owner: int) -> int | None:
    """The TTL encoded in an ephemeralOwner, or None if it is not a TTL node."""
    raw = owner % 2**64
    if owner != CONTAINER_OWNER and raw >> 56 == 0xFF:
        return raw & ((1 << 56) - 1)
    return None


def is_session_owner(owner: int) -> bool:
    """True for an ephemeral node's owner (a session id), false for 0, containers and TTL."""
    return owner > 0
