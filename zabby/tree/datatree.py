"""The data tree: znodes with ZooKeeper's Stat, and the application of txns.

Theory of operation: the tree changes only through ``apply(txn)``, in zxid order.  Txns were
validated by ``prep`` against the tree plus the changes still in flight, so apply meets no
surprises; it still checks what it relies on and raises ``InvariantError`` when the check
fails, because applying a txn that does not fit is a bug that must not pass silently.

``apply`` returns the op's result and the watch triggers ``(EventType, path, acl)`` in the
order ZooKeeper fires them, each with the ACL of the node it is about (the parent's for
NodeChildrenChanged), since only watchers that may read that node get the event; delivering
them is the watch manager's job.

The tree digest (ZooKeeper 3.6+'s ``digest.enabled``): a 64-bit sum over every znode of a
CRC of its path and Stat fields plus a CRC of its path and data, and over every session of
a CRC of its id and timeout.  A sum changes incrementally (subtract a node's old parts, add
its new ones), so each apply costs a few CRCs, and two trees with the same content have the
same digest whatever history built them.  Derived fields (numChildren, dataLength) are left
out, as in ZooKeeper.  ``digest_log`` keeps the digest after each of the last
``DIGEST_LOG_LENGTH`` txns, so a learner can compare with the leader's digest at a zxid it
has already passed.
"""

from __future__ import annotations

import gc
import hashlib
import struct
import sys
import zlib
from collections import deque
from collections.abc import Iterable, Iterator
from itertools import chain, islice
from typing import Any, cast

from sortedcontainers import SortedList

from zabby.errors import InvariantError
from zabby.opcodes import CONTAINER_OWNER, CREATE_OPS, EventType, OpCode, is_session_owner, owner_ttl_ms
from zabby.tree import acl as acls
from zabby.tree import quota
from zabby.tree.paths import int32, parent_of
from zabby.tree.txns import Txn

Stat = tuple[int, int, int, int, int, int, int, int, int, int, int]
Event = tuple[int, str, tuple[acls.ACL, ...]]

ZOOKEEPER = "/zookeeper"
ZOOKEEPER_CONFIG = "/zookeeper/config"
ZOOKEEPER_QUOTA = "/zookeeper/quota"

DIGEST_MASK = (1 << 64) - 1
DIGEST_LOG_LENGTH = 1024
_STAT_DIGEST = struct.Struct(">9Q")  # czxid mzxid pzxid ctime mtime version cversion aversion owner
_SESSION_DIGEST = struct.Struct(">qq")
class NullData(bytes):
    """A znode's null data (a client created or set it with null, as ZooKeeper's may): empty
    for every count and digest (as in ZooKeeper's), but read back as null, and kept as null
    (None) in txns, snapshots and SNAPs.  One instance, ``NULL_DATA``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NULL_DATA"


NULL_DATA = NullData()


def stored_data(data: bytes | None) -> bytes:
    """A txn's or a record's data as a znode holds it."""
    return NULL_DATA if data is None else data


def shown_data(data: bytes) -> bytes | None:
    """A znode's data as a read answers it, a txn or record carries it: None for null."""
    return None if data.__class__ is NullData else data


_DATA_CRC_SEED = 0x5A  # a znode's data CRC starts from its path's CRC with this seed, its Stat's from 0
_crc32 = zlib.crc32
_new_znode = object.__new__  # a Znode with no __init__: its fields set by the caller (a create, TreeBuilder)
_QUOTA_PREFIX = quota.QUOTA_PREFIX
# The members every apply compares with or puts in its events, as globals (see zabby.opcodes)
_SET_DATA, _ERROR = OpCode.SET_DATA, OpCode.ERROR
_NODE_CREATED, _NODE_DELETED = EventType.NODE_CREATED, EventType.NODE_DELETED
_NODE_DATA_CHANGED, _NODE_CHILDREN_CHANGED = EventType.NODE_DATA_CHANGED, EventType.NODE_CHILDREN_CHANGED


def _is_system(path: str) -> bool:
    """``/zookeeper`` and below, which count nothing in the digest, as in ZooKeeper:
    ``/zookeeper/config`` holds each server's own view of the membership until a reconfig
    replicates one."""
    return path.startswith(ZOOKEEPER) and (len(path) == len(ZOOKEEPER) or path[len(ZOOKEEPER)] == "/")


def _stat_bytes(node: Znode) -> bytes:
    """The Stat fields a txn sets (derived ones left out), as the digest reads them."""
    _, aversion, owner = node.meta
    pzxid, cversion = node.child_fields()
    return _pack_stat(node.czxid, node.mzxid, pzxid, node.ctime, node.mtime, node.version, cversion, aversion, owner)


SET_SEEDS_MAX = 4096  # paths whose digest seeds and last events a tree keeps (for setData, and a create's parent)
SET_SEEDS_PATH_MAX = 256  # the longest path kept among them (4,096 of them: at most about 3 MB)
SET_SEEDS_ACL_BYTES_MAX = 512  # an event is kept only with an ACL of at most this (``acl_bytes``): 4 MB more at most


def _keep_event(kept: list[Any], slot: int, event_type: int, acl: tuple[acls.ACL, ...]) -> Event:
    """A new event of ``event_type`` for the path ``kept`` is for (``DataTree._kept``), kept in its
    ``slot`` if its ACL is at most ``SET_SEEDS_ACL_BYTES_MAX`` bytes: kept past its node's life, a
    large ACL is not."""
    event: Event = (event_type, kept[4], acl)
    if acls.acl_bytes(acl) <= SET_SEEDS_ACL_BYTES_MAX:
        kept[slot] = event
    return event


_pack_stat_unmasked = _STAT_DIGEST.pack  # the applies call it inline, and ``_pack_stat`` where it raises


def _pack_stat(czxid: int, mzxid: int, pzxid: int, ctime: int, mtime: int, version: int, cversion: int, aversion: int, owner: int) -> bytes:  # fmt: skip
    try:
        return _pack_stat_unmasked(czxid, mzxid, pzxid, ctime, mtime, version, cversion, aversion, owner)
    except struct.error:  # a negative owner (container, TTL) or odd times in a test: masked, alike on all servers
        m = DIGEST_MASK
        return _STAT_DIGEST.pack(czxid & m, mzxid & m, pzxid & m, ctime & m, mtime & m,
                                 version & m, cversion & m, aversion & m, owner & m)  # fmt: skip


def _stat_seed(path: str) -> int | None:
    """Where the CRC of a znode's Stat bytes starts: its path's CRC (None for the system
    znodes, which count nothing).  An apply that changes a Stat computes it once for the CRCs
    before and after."""
    return None if _is_system(path) else _crc32(path.encode())


def _seeds(path: str) -> tuple[int | None, int | None]:
    """``_stat_seed(path)`` and where the CRC of its data starts, the path checked and
    encoded once (None for both for the system znodes)."""
    if path.startswith(ZOOKEEPER) and _is_system(path):
        return None, None
    encoded = path.encode()
    return _crc32(encoded), _crc32(encoded, _DATA_CRC_SEED)


def _stat_crc(seed: int | None, node: Znode) -> int:
    return 0 if seed is None else _crc32(_stat_bytes(node), seed)


def _data_crc(seed: int | None, data: bytes) -> int:
    return 0 if seed is None else _crc32(data, seed)


def _meta_digest(path: str, node: Znode) -> int:
    """The CRC of a znode's path and its Stat bytes."""
    return _stat_crc(_stat_seed(path), node)


def _data_digest(path: str, data: bytes) -> int:
    """Kept apart from the Stat's CRC, so a parent's child change never re-reads its data."""
    return _data_crc(_seeds(path)[1], data)


def _node_digest(path: str, node: Znode) -> int:
    """``_meta_digest + _data_digest``."""
    _, aversion, owner = node.meta
    return _record_digest(path, node.data, node.czxid, node.mzxid, node.pzxid, node.ctime, node.mtime,
                          node.version, node.cversion, aversion, owner)  # fmt: skip


def _record_digest(path: str, data: bytes, czxid: int, mzxid: int, pzxid: int, ctime: int, mtime: int, version: int, cversion: int, aversion: int, owner: int) -> int:  # fmt: skip
    """``_node_digest`` from a znode's fields, the path checked and encoded once: a snapshot
    load computes it for every record, before (and without) reading the fields back."""
    if path.startswith(ZOOKEEPER) and _is_system(path):
        return 0
    encoded = path.encode()
    stat = _pack_stat(czxid, mzxid, pzxid, ctime, mtime, version, cversion, aversion, owner)
    return _crc32(stat, _crc32(encoded)) + _crc32(data, _crc32(encoded, _DATA_CRC_SEED))


def _session_digest(session_id: int, timeout_ms: int) -> int:
    return _crc32(_SESSION_DIGEST.pack(session_id & DIGEST_MASK, timeout_ms))


class Listing(list[str]):
    """A node's sorted child names, shared by every reply until the children change.  A wire
    codec may keep its encoding of the list in ``encoded`` (the list never changes)."""

    __slots__ = ("encoded",)

    def __init__(self, names: Iterable[str]) -> None:
        super().__init__(names)
        self.encoded: bytes | None = None


NO_CHILDREN: tuple[str, ...] = ()  # every leaf shares it: an empty container costs ~60-200 B
Meta = tuple[tuple[acls.ACL, ...], int, int]  # acl, aversion, ephemeral owner


class SharedMetas:
    """The ACLs and metas a tree's znodes share, each counted by the znodes that hold it and
    forgotten with the last of them.

    Nearly every znode has one of a few ACLs, and one of a few metas (its ACL, aversion 0, no
    owner): one shared tuple each, instead of a fresh tuple of tuples of fresh strings per
    znode (~230 B).  An ephemeral's meta, with its session as the owner, is its own (sessions
    come and go) but shares its ACL.  Counted, not only interned: a client could set fresh
    ACLs and delete their znodes for ever, and the table would keep every one of them.  What
    the ACLs held take is ``acl_bytes`` (``acl_cost`` each), charged to the tree's bound."""

    __slots__ = ("acls", "metas", "acl_bytes")

    def __init__(self) -> None:
        self.acls: dict[tuple[acls.ACL, ...], list[Any]] = {}  # ACL → [the shared tuple, znodes holding it]
        self.metas: dict[Meta, list[Any]] = {}  # meta → [the shared tuple, znodes holding it, its ACL's entry]
        self.acl_bytes = 0  # acl_cost of every ACL held

    def take(self, acl: Iterable[Iterable[Any]], aversion: int, owner: int) -> Meta:
        """The shared meta for a znode that now holds it (and its ACL): one look-up for a meta
        the tree holds already (nearly every create's), two or three for a new one."""
        if not is_session_owner(owner):
            try:  # a txn's ACL is a tuple of tuples already (msgpack's, the preparer's): no copy to look it up
                held = self.metas.get((acl, aversion, owner))  # type: ignore[arg-type]
            except TypeError:  # lists: not hashable
                held = None
            if held is not None:
                held[1] += 1
                held[2][1] += 1
                return held[0]
        entry = self._acl_entry(acl)
        entry[1] += 1
        meta = (entry[0], aversion, owner)
        if is_session_owner(owner):
            return meta
        held = self.metas[meta] = [meta, 1, entry]
        return meta

    def _acl_entry(self, acl: Iterable[Iterable[Any]]) -> list[Any]:
        table = self.acls
        try:
            entry = table.get(acl)  # type: ignore[call-overload]
        except TypeError:
            entry = None
        if entry is None:
            key = tuple(tuple(item) for item in acl)
            entry = table.get(key)
            if entry is None:
                key = tuple((perms, sys.intern(scheme), sys.intern(ident)) for perms, scheme, ident in key)
                entry = table[key] = [key, 0]
                self.acl_bytes += acls.acl_cost(key)
        return entry

    def drop(self, meta: Meta) -> None:
        """A znode no longer holds ``meta`` (it was deleted, or took another ACL)."""
        acl, _, owner = meta
        if is_session_owner(owner):
            entry = self.acls[acl]
        else:
            held = self.metas[meta]
            held[1] -= 1
            if not held[1]:
                del self.metas[meta]
            entry = held[2]
        entry[1] -= 1
        if not entry[1]:
            del self.acls[acl]
            self.acl_bytes -= acls.acl_cost(acl)

    def entries(self) -> int:
        """The ACL entries held, all ACLs together (each shared ACL once)."""
        return sum(len(acl) for acl in self.acls)


class Children(SortedList):
    """A znode's children's full paths, sorted (the very strings that key ``DataTree.nodes``,
    so a child costs its parent one reference), with their names' listing cached, and the
    Stat fields only children move: ``pzxid`` and ``cversion``.  A znode that never had a
    child has none, so a leaf carries two slots fewer (16 B of each znode's 128)."""

    def __init__(self, pzxid: int) -> None:
        super().__init__()
        self.cached_listing: Listing | None = None
        self.pzxid = pzxid
        self.cversion = 0


EMPTY_LISTING = Listing(())


class Znode:
    """A znode: 8 slots, 96 B of object (the 16-byte size classes make 9 or 10 slots cost
    112 B).  ``meta`` holds the ACL, aversion and owner, shared with other znodes where they
    are the same (see ``SharedMetas``: only the tree sets it); the children, once it has had
    any, hold pzxid and cversion (see ``Children``)."""

    __slots__ = ("data", "meta", "czxid", "mzxid", "ctime", "mtime", "version", "children")

    def __init__(self, data: bytes, meta: Meta, zxid: int, time_ms: int) -> None:
        self.data = data
        self.meta = meta
        self.czxid = self.mzxid = zxid
        self.ctime = self.mtime = time_ms
        self.version = 0
        # its own Children from its first child on, kept when they are gone (pzxid, cversion)
        self.children: Children | tuple[str, ...] = NO_CHILDREN

    @property
    def acl(self) -> tuple[acls.ACL, ...]:
        return self.meta[0]

    @property
    def aversion(self) -> int:
        return self.meta[1]

    @property
    def ephemeral_owner(self) -> int:  # set once, at the create
        return self.meta[2]

    def child_fields(self) -> tuple[int, int]:
        """``(pzxid, cversion)`` in one look at the children: a leaf that never had a child
        has no Children, and its pzxid is its czxid.  The hot readers of both (a Stat, its
        digest bytes, prep's view) call this once rather than the two properties."""
        children = self.children
        if children.__class__ is Children:
            return children.pzxid, children.cversion
        return self.czxid, 0

    @property
    def pzxid(self) -> int:
        return self.child_fields()[0]

    @pzxid.setter
    def pzxid(self, zxid: int) -> None:
        self.own_children().pzxid = zxid

    @property
    def cversion(self) -> int:
        return self.child_fields()[1]

    @cversion.setter
    def cversion(self, cversion: int) -> None:
        self.own_children().cversion = cversion

    def own_children(self) -> Children:
        children = self.children
        if children.__class__ is not Children:
            children = self.children = Children(self.czxid)
        return children

    def add_child(self, path: str) -> None:
        children = self.own_children()
        children.add(path)
        children.cached_listing = None

    def remove_child(self, path: str) -> None:
        children = self.children
        assert isinstance(children, Children), "remove_child of a znode without children"
        children.remove(path)
        children.cached_listing = None

    def listing(self) -> Listing:
        """The children's names, sorted, kept until they change: getChildren of a big node is
        a hot read.  Full paths under one parent sort as their names do."""
        children = self.children
        if not isinstance(children, Children):
            return EMPTY_LISTING
        if children.cached_listing is None:
            first = next(iter(children), "/")
            cut = first.rfind("/") + 1  # one parent: every child's name starts there
            children.cached_listing = Listing([path[cut:] for path in children])
        return children.cached_listing

    def stat(self) -> Stat:
        """The Stat in jute field order: czxid mzxid ctime mtime version cversion aversion
        ephemeralOwner dataLength numChildren pzxid, as ZooKeeper's DataNode.copyStat shows it.

        ``cversion`` is kept as ZooKeeper keeps it, a count of child creates (the sequential
        suffix); a Stat counts deletes too, as 2 × creates − children (an int, as in Java).
        Only a session shows as the owner: containers and TTL nodes show 0.
        """
        children = len(self.children)
        _, aversion, owner = self.meta
        pzxid, cversion = self.child_fields()
        return (
            self.czxid, self.mzxid, self.ctime, self.mtime, self.version, int32(2 * cversion - children),
            aversion, owner if is_session_owner(owner) else 0, len(self.data), children, pzxid,
        )  # fmt: skip


def _created_stat(zxid: int, time_ms: int, owner: int, data_length: int) -> Stat:
    """``Znode.stat()`` of a znode its create just made, from the create's own fields: no
    child, every version 0 (a create's answer, for each create)."""
    return zxid, zxid, time_ms, time_ms, 0, 0, 0, owner if is_session_owner(owner) else 0, data_length, 0, zxid


class DataTree:
    """Znodes by path, plus the indexes ZooKeeper keeps: ephemerals per session, containers,
    TTL nodes, and the session table (id → (timeout_ms, password)), which is replicated state."""

    def __init__(self) -> None:
        self.nodes: dict[str, Znode] = {}
        self.ephemerals: dict[int, set[str]] = {}
        self.containers: set[str] = set()
        self.ttl_nodes: set[str] = set()
        self.sessions: dict[int, tuple[int, bytes]] = {}
        self.last_zxid = 0
        self.data_size = 0
        self.digest = 0
        self.digest_log: deque[tuple[int, int]] = deque(maxlen=DIGEST_LOG_LENGTH)
        self.quota_roots: set[str] = set()  # paths with a quota (zabby.tree.quota)
        self.shared = SharedMetas()
        self._time_ms = 0  # the last txn's time, the int object znodes share (_shared_time)
        # For the paths set lately, and the parents of the nodes created lately: ``_seeds`` (an
        # encode and two CRCs), and the last NodeDataChanged and NodeChildrenChanged events
        # (``_kept``).  A setData's path is set again and again (a counter, a config, a lock's
        # data), creates come under a few parents, and each such event is the same tuple each
        # time: the watch history keeps one per txn, and shared, it holds a reference, not a
        # tuple and its path
        self._set_seeds: dict[str, list[Any]] = {}
        self._add_system_nodes()

    def _kept(self, path: str) -> list[Any]:
        """What ``_set_seeds`` keeps for ``path``, made on its first sight: [stat seed, data seed,
        NodeDataChanged event, NodeChildrenChanged event, the path].  A long path's is made
        each time and not kept: the cache stays small in bytes too."""
        kept: list[Any] = [*_seeds(path), None, None, path]
        if len(path) <= SET_SEEDS_PATH_MAX:
            if len(self._set_seeds) >= SET_SEEDS_MAX:  # bounded: started again when full
                self._set_seeds.clear()
            self._set_seeds[path] = kept
        return kept

    def size_bytes(self) -> int:
        """What ``maxTreeBytes`` bounds: the paths and data (ZooKeeper's approximate data size)
        and the distinct ACLs the znodes hold."""
        return self.data_size + self.shared.acl_bytes

    def _add_system_nodes(self) -> None:
        self.nodes["/"] = Znode(b"", self.shared.take(acls.OPEN_ACL_UNSAFE, 0, 0), 0, 0)
        for path in (ZOOKEEPER, ZOOKEEPER_CONFIG, ZOOKEEPER_QUOTA):
            # ZooKeeper's DataTree.addConfigNode sets the config's ACL with version -1, which setACL stores as the aversion
            meta = self.shared.take(*((acls.READ_ACL_UNSAFE, -1) if path == ZOOKEEPER_CONFIG else (acls.OPEN_ACL_UNSAFE, 0)), 0)
            self.nodes[path] = Znode(b"", meta, 0, 0)
            self.nodes[parent_of(path)].add_child(path)
        self.data_size = sum(len(path) for path in self.nodes)  # every node counts, as in TreeBuilder._add_nodes
        self.digest = sum(_node_digest(path, node) for path, node in self.nodes.items())

    # ----------------------------------------------------------------- reads
    def get(self, path: str) -> Znode | None:
        return self.nodes.get(path)

    def node_count(self) -> int:
        return len(self.nodes)

    def ephemeral_count(self) -> int:
        return sum(len(paths) for paths in self.ephemerals.values())

    def count_descendants(self, path: str) -> int:
        total, stack = 0, [self.nodes[path]]
        while stack:
            current = stack.pop()
            total += len(current.children)
            stack.extend(self.nodes[child] for child in current.children)
        return total

    # ----------------------------------------------------------------- apply
    def apply(self, txn: Txn, answered: bool = True) -> tuple[Any, list[Event]]:
        """Apply one txn; return (result, watch triggers). Zxids must grow.

        ``answered=False``: nobody here answers the txn's client (a server applying another
        server's write), so a setData's result is None rather than the Stat it would show, and
        a create's ``(path, None)``."""
        kind = txn.type
        if txn.zxid <= self.last_zxid and kind != _ERROR:
            raise InvariantError(f"txn 0x{txn.zxid:x} applied after 0x{self.last_zxid:x}")
        events: list[Event] = []
        result: Any
        if kind == _SET_DATA:  # the hot writes, straight to their apply
            result = self._set_data(txn, txn.body, events, answered)
        elif kind in CREATE_OPS:  # (an unhashable type is no txn: InvariantError)
            result = self._create(txn, txn.body, events, answered)
        else:
            result = self._apply_body(txn, txn.type, txn.body, events)
        if txn.zxid > self.last_zxid:  # an ERROR txn may come at a zxid applied already
            self.last_zxid = txn.zxid
        self.digest &= DIGEST_MASK
        self.digest_log.append((self.last_zxid, self.digest))
        return result, events

    def _shared_time(self, time_ms: int) -> int:
        """The same int object for the txns of one millisecond (a busy leader stamps many), so
        that their znodes do not keep a 32-byte copy each."""
        if time_ms == self._time_ms:
            return self._time_ms
        self._time_ms = time_ms
        return time_ms

    def digest_at(self, zxid: int) -> int | None:
        """The digest right after txn ``zxid`` was applied, if it is still in ``digest_log``."""
        for logged_zxid, digest in reversed(self.digest_log):
            if logged_zxid == zxid:
                return digest
            if logged_zxid < zxid:
                return None
        return None

    def _apply_body(self, txn: Txn, txn_type: int, body: tuple[Any, ...], events: list[Event]) -> Any:
        if txn_type in CREATE_OPS:
            return self._create(txn, body, events)
        if txn_type in (OpCode.DELETE, OpCode.DELETE_CONTAINER):
            return self._delete(txn.zxid, body[0], events)
        if txn_type == OpCode.SET_DATA:
            return self._set_data(txn, body, events)
        if txn_type == OpCode.SET_ACL:
            return self._set_acl(body)
        if txn_type == OpCode.CHECK:
            return None
        if txn_type == OpCode.MULTI:
            return self._multi(txn, body[0], events)
        if txn_type == OpCode.CREATE_SESSION:
            self._forget_session(txn.session_id)
            self.sessions[txn.session_id] = (body[0], body[1])
            self.digest += _session_digest(txn.session_id, body[0])
            return txn.session_id
        if txn_type == OpCode.CLOSE_SESSION:
            return self._close_session(txn, body[0], events)
        if txn_type == OpCode.ERROR:
            return body[0]
        if txn_type == OpCode.RECONFIG:
            return self._reconfig(txn, body[0], events)
        raise InvariantError(f"unknown txn type {txn_type}")

    def _reconfig(self, txn: Txn, text: str, events: list[Event]) -> tuple[bytes, Stat]:
        """A committed reconfiguration: ``/zookeeper/config`` holds the new membership."""
        node = self._set_config(text.encode(), txn.zxid, self._shared_time(txn.time_ms))
        events.append((EventType.NODE_DATA_CHANGED, ZOOKEEPER_CONFIG, node.acl))
        return node.data, node.stat()

    def _set_config(self, data: bytes, version: int, time_ms: int) -> Znode:
        """``/zookeeper/config`` set as ZooKeeper sets it (a SetDataTxn with version -1, whether
        a reconfig's or its initConfigInZKDatabase's): its version is -1, its mzxid the
        membership's version (a reconfig's zxid), so the mzxid tells which membership it holds."""
        node = self.nodes[ZOOKEEPER_CONFIG]
        self.data_size += len(data) - len(node.data)
        node.data, node.version, node.mzxid, node.mtime = data, -1, version, time_ms
        return node

    def show_config(self, text: str, version: int, time_ms: int) -> None:
        """This server's view of the membership in ``/zookeeper/config``, which ZooKeeper sets
        at start-up from its configuration files, unless the tree holds a newer one (a
        reconfig logged and not yet in the files)."""
        if self.nodes[ZOOKEEPER_CONFIG].mzxid <= version:
            self._set_config(text.encode(), version, time_ms)

    def forget_reconfig(self) -> bool:
        """``/zookeeper/config`` as a fresh tree has it, for a snapshot restored into a new
        ensemble, whose membership is its own configuration's (``zabby-admin snapshot
        restore``).  True if a reconfig's membership was there (a static configuration's is
        version 0).  The digest leaves ``/zookeeper`` out, so it does not change."""
        node = self.nodes[ZOOKEEPER_CONFIG]
        reconfigured = node.mzxid > 0
        self.data_size -= len(node.data)
        node.data = b""
        node.version = node.mzxid = node.mtime = 0
        return reconfigured

    def _create(self, txn: Txn, body: tuple[Any, ...], events: list[Event], answered: bool = True) -> tuple[str, Stat | None]:
        path, data, acl, owner, parent_cversion = body
        if data is None:
            data = NULL_DATA
        nodes, zxid = self.nodes, txn.zxid
        parent_path = parent_of(path)
        parent = nodes.get(parent_path)
        if parent is None or path in nodes:
            raise InvariantError(f"create {path}: parent missing or node exists")
        meta = self.shared.take(acl, 0, owner)
        acl = meta[0]
        time_ms = txn.time_ms  # _shared_time, inline (as in _set_data): the same int as the last txn's
        if time_ms == self._time_ms:
            time_ms = self._time_ms
        else:
            self._time_ms = time_ms
        # Znode(data, meta, zxid, time_ms), its fields set here: no call per create
        node = nodes[path] = _new_znode(Znode)
        node.data, node.meta, node.czxid, node.mzxid, node.ctime, node.mtime = data, meta, zxid, zxid, time_ms, time_ms
        node.version, node.children = 0, NO_CHILDREN
        parent_kept = self._set_seeds.get(parent_path) or self._kept(parent_path)
        parent_seed = parent_kept[0]
        children = parent.children  # the parent's own from now on, read once (child_fields, own_children)
        if children.__class__ is Children:
            pzxid, cversion = children.pzxid, children.cversion
        else:
            pzxid, cversion = parent.czxid, 0
            children = parent.children = Children(pzxid)
        if parent_seed is not None:  # its Stat's digest bytes before and after from one read of its fields
            _, aversion, parent_owner = parent.meta
            czxid, mzxid, ctime, mtime, version = parent.czxid, parent.mzxid, parent.ctime, parent.mtime, parent.version
            try:
                before = _pack_stat_unmasked(czxid, mzxid, pzxid, ctime, mtime, version, cversion, aversion, parent_owner)
                after = _pack_stat_unmasked(czxid, mzxid, zxid, ctime, mtime, version, parent_cversion, aversion, parent_owner)
            except struct.error:  # see _pack_stat
                before = _pack_stat(czxid, mzxid, pzxid, ctime, mtime, version, cversion, aversion, parent_owner)
                after = _pack_stat(czxid, mzxid, zxid, ctime, mtime, version, parent_cversion, aversion, parent_owner)
            self.digest += _crc32(after, parent_seed) - _crc32(before, parent_seed)
        children.add(path)  # add_child, inline
        children.cached_listing = None
        children.cversion = parent_cversion
        children.pzxid = zxid
        # the new node's digest from the fields it was just given, as _node_digest would read them
        self.digest += _record_digest(path, data, zxid, zxid, zxid, time_ms, time_ms, 0, 0, 0, owner)
        self.data_size += len(data) + len(path)
        if owner:  # a persistent znode is in no index
            self._index_add(path, owner)
        if self.quota_roots or path.startswith(_QUOTA_PREFIX):
            quota.node_created(self, path, len(data))
        events.append((_NODE_CREATED, path, acl))
        children_changed = parent_kept[3]
        if children_changed is None or children_changed[2] is not parent.meta[0]:  # first, or the parent's ACL changed
            children_changed = _keep_event(parent_kept, 3, _NODE_CHILDREN_CHANGED, parent.meta[0])
        events.append(children_changed)
        return path, (_created_stat(zxid, time_ms, owner, len(data)) if answered else None)

    def _delete(self, zxid: int, path: str, events: list[Event]) -> None:
        node = self.nodes.get(path)
        if node is None or node.children or path == "/":
            raise InvariantError(f"delete {path}: missing, root or not empty")
        del self.nodes[path]
        self.shared.drop(node.meta)
        parent_path = parent_of(path)
        parent = self.nodes[parent_path]
        self.digest -= _node_digest(path, node) + _meta_digest(parent_path, parent)
        parent.remove_child(path)
        parent.pzxid = zxid
        self.digest += _meta_digest(parent_path, parent)
        self.data_size -= len(node.data) + len(path)
        self._index_remove(path, node.ephemeral_owner)
        if self.quota_roots:
            quota.node_deleted(self, path, len(node.data))
        events.append((_NODE_DELETED, path, node.acl))
        events.append((_NODE_CHILDREN_CHANGED, parent_path, parent.acl))

    def _set_data(self, txn: Txn, body: tuple[Any, ...], events: list[Event], answered: bool = True) -> Stat | None:
        path, data, version = body
        if data is None:
            data = NULL_DATA
        node = self.nodes.get(path)
        if node is None:
            raise InvariantError(f"setData {path}: no node")
        old_data, zxid, mtime = node.data, txn.zxid, txn.time_ms
        if mtime == self._time_ms:  # _shared_time, inline: the same int as the last txn's
            mtime = self._time_ms
        else:
            self._time_ms = mtime
        self.data_size += len(data) - len(old_data)
        if self.quota_roots:
            quota.data_changed(self, path, len(data) - len(old_data))
        kept = self._set_seeds.get(path) or self._kept(path)
        stat_seed, data_seed, event = kept[0], kept[1], kept[2]
        acl = node.meta[0]
        if event is None or event[2] is not acl:  # first, or its node's ACL changed
            event = _keep_event(kept, 2, _NODE_DATA_CHANGED, acl)
        if stat_seed is not None and data_seed is not None:  # a system znode counts nothing (both None)
            # the Stat's digest bytes before and after from one read of the fields it keeps
            _, aversion, owner = node.meta
            children = node.children  # child_fields, inline
            pzxid, cversion = (children.pzxid, children.cversion) if children.__class__ is Children else (node.czxid, 0)
            czxid, ctime, old_mzxid, old_mtime, old_version = node.czxid, node.ctime, node.mzxid, node.mtime, node.version
            try:
                before = _pack_stat_unmasked(czxid, old_mzxid, pzxid, ctime, old_mtime, old_version, cversion, aversion, owner)
                after = _pack_stat_unmasked(czxid, zxid, pzxid, ctime, mtime, version, cversion, aversion, owner)
            except struct.error:  # see _pack_stat
                before = _pack_stat(czxid, old_mzxid, pzxid, ctime, old_mtime, old_version, cversion, aversion, owner)
                after = _pack_stat(czxid, zxid, pzxid, ctime, mtime, version, cversion, aversion, owner)
            self.digest += (_crc32(after, stat_seed) + _crc32(data, data_seed)
                            - _crc32(before, stat_seed) - _crc32(old_data, data_seed))  # fmt: skip
        node.data = data
        node.version = version
        node.mzxid = zxid
        node.mtime = mtime
        events.append(event)
        return node.stat() if answered else None

    def _set_acl(self, body: tuple[Any, ...]) -> Stat:
        path, acl, aversion = body
        node = self.nodes.get(path)
        if node is None:
            raise InvariantError(f"setACL {path}: no node")
        self.digest -= _meta_digest(path, node)
        old, node.meta = node.meta, self.shared.take(acl, aversion, node.ephemeral_owner)
        self.shared.drop(old)
        self.digest += _meta_digest(path, node)
        return node.stat()

    def set_quota_usage(self, path: str, data: bytes) -> None:
        """A quota stats node's new usage: its data changes, its Stat does not (ZooKeeper's
        ``updateQuotaStat``); the digest and data size follow the data."""
        node = self.nodes[path]
        self.digest += _data_digest(path, data) - _data_digest(path, node.data)
        self.data_size += len(data) - len(node.data)
        node.data = data

    def _multi(self, txn: Txn, ops: tuple[Any, ...], events: list[Event]) -> list[tuple[int, int, Any]]:
        """Apply every sub-txn; a failed multi is a list of ERROR entries and changes nothing."""
        results: list[tuple[int, int, Any]] = []
        for sub_type, sub_body in ops:
            if sub_type == OpCode.ERROR:
                results.append((OpCode.ERROR, sub_body[0], None))
            else:
                results.append((sub_type, 0, self._apply_body(txn, sub_type, sub_body, events)))
        return results

    def _close_session(self, txn: Txn, paths: tuple[str, ...] | None, events: list[Event]) -> None:
        """Delete the session's ephemerals: those the txn names, or (None: their paths would have
        passed maxTxnBytes) every one the tree holds for it."""
        if paths is None:
            paths = tuple(self.ephemerals.get(txn.session_id, ()))
        for path in sorted(paths, key=lambda p: (-p.count("/"), p)):
            node = self.nodes.get(path)
            if node is not None and node.ephemeral_owner == txn.session_id and not node.children:
                self._delete(txn.zxid, path, events)
        self._forget_session(txn.session_id)
        self.ephemerals.pop(txn.session_id, None)

    def _forget_session(self, session_id: int) -> None:
        entry = self.sessions.pop(session_id, None)
        if entry is not None:
            self.digest -= _session_digest(session_id, entry[0])

    def _index_add(self, path: str, owner: int) -> None:
        if is_session_owner(owner):
            self.ephemerals.setdefault(owner, set()).add(path)
        elif owner == CONTAINER_OWNER:
            self.containers.add(path)
        elif owner_ttl_ms(owner) is not None:
            self.ttl_nodes.add(path)

    def _index_remove(self, path: str, owner: int) -> None:
        if is_session_owner(owner):
            paths = self.ephemerals.get(owner)
            if paths is not None:
                paths.discard(path)
                if not paths:
                    del self.ephemerals[owner]
        else:
            self.containers.discard(path)
            self.ttl_nodes.discard(path)

    # ----------------------------------------------------------------- snapshots
    def records(self) -> Iterator[tuple[Any, ...]]:
        """Snapshot records: one header, the sessions, then every znode parent-first.

        Dict order is creation order, and a parent always outlives its children, so each
        znode comes after its parent.
        """
        yield ("tree", self.last_zxid, len(self.sessions), len(self.nodes))
        for session_id, (timeout_ms, password) in self.sessions.items():
            yield ("session", session_id, timeout_ms, password)
        # A znode's fields read here, not through a method and the pzxid and cversion
        # properties: half the CPU of making a snapshot's million records (0.08 against 0.16 s).
        for path, node in self.nodes.items():
            acl, aversion, owner = node.meta
            children = node.children
            if children.__class__ is Children:  # as the properties say; a leaf: pzxid is czxid
                pzxid, cversion = children.pzxid, children.cversion
            else:
                pzxid, cversion = node.czxid, 0
            data = node.data
            yield (path, None if data.__class__ is NullData else data, acl, node.czxid, node.mzxid, pzxid, node.ctime, node.mtime,
                   node.version, cversion, aversion, owner)  # fmt: skip

    def record_count(self) -> int:
        """How many records ``records()`` yields."""
        return 1 + len(self.sessions) + len(self.nodes)

    @classmethod
    def from_records(cls, records: Iterable[tuple[Any, ...]]) -> DataTree:
        builder = TreeBuilder()
        builder.add(records)
        return builder.finish()

    def add_session(self, session_id: int, timeout_ms: int, password: bytes) -> None:
        """A session read from a snapshot."""
        self.sessions[session_id] = (timeout_ms, password)
        self.digest += _session_digest(session_id, timeout_ms)

    def adopt_digest(self, digest: int | None) -> None:
        """The digest of a tree built by ``TreeBuilder(digest=False)``: ``records_digest`` of
        its records, computed apart from the build, or None where that failed: then it is
        computed here, from the tree."""
        if self.digest_log:
            raise InvariantError("adopt_digest on a tree that has its digest")
        self.digest = (self.compute_digest() if digest is None else digest) & DIGEST_MASK
        self.digest_log.append((self.last_zxid, self.digest))

    def compute_digest(self) -> int:
        """The digest computed from scratch (``digest`` is kept incrementally; tests compare)."""
        total = sum(_node_digest(path, node) for path, node in self.nodes.items())
        total += sum(_session_digest(session_id, timeout_ms) for session_id, (timeout_ms, _) in self.sessions.items())
        return total & DIGEST_MASK

    def content_hash(self) -> str:
        """A strong hash of the whole tree (paths, data, stats, ACLs, sessions), order-independent."""
        h = hashlib.blake2b(digest_size=16)
        for path in sorted(self.nodes):
            node = self.nodes[path]
            if path == ZOOKEEPER_CONFIG:  # each server's own view (see show_config), outside the digest as in ZooKeeper
                h.update(repr((path, node.acl)).encode())
                continue
            h.update(repr((path, node.data, node.acl, node.stat()[:8], node.stat()[9:])).encode())
        h.update(repr(sorted(self.sessions.items())).encode())
        return h.hexdigest()


def records_digest(records: Iterable[tuple[Any, ...]]) -> int:
    """The digest of the tree that snapshot records build, computed from the records alone:
    what ``TreeBuilder`` adds up as it builds, for a tree built without (``digest=False``)."""
    records = iter(records)
    _, _, sessions, nodes = next(records)
    digest = sum(_session_digest(session_id, timeout_ms) for _, session_id, timeout_ms, _ in islice(records, sessions))
    for path, data, _, czxid, mzxid, pzxid, ctime, mtime, version, cversion, aversion, owner in records:
        digest += _record_digest(path, data, czxid, mzxid, pzxid, ctime, mtime, version, cversion, aversion, owner)
        nodes -= 1
    if nodes:
        raise InvariantError(f"snapshot records: {abs(nodes)} znodes {'fewer' if nodes > 0 else 'more'} than the header says")
    return digest & DIGEST_MASK


class TreeBuilder:
    """Builds a DataTree from snapshot records arriving in chunks (a SNAP sync), so the
    records never have to be held all at once.

    Records come parent-first: each znode's parent is looked up (a missing one is a broken
    stream), but its children are gathered in plain lists and sorted once, in ``finish``.

    ``digest=False``: the znodes' digest (a third of the build's time) is left to the caller,
    who gets it from ``records_digest`` of the same records, computed elsewhere at the same
    time (``zabby.server.process.forks.DigestChild``), and gives it to ``DataTree.adopt_digest``."""

    def __init__(self, *, digest: bool = True) -> None:
        self._digest = digest
        self.tree = DataTree()
        self.tree.nodes.clear()
        self.tree.shared = SharedMetas()
        self.tree.data_size = 0
        self.tree.digest = 0
        self._sessions_left = -1
        self._nodes_left = -1
        self._children: dict[str, list[str]] = {}  # parent path → its children's, in arrival order

    def add(self, records: Iterable[tuple[Any, ...]]) -> None:
        tree, records = self.tree, iter(records)
        for record in records:
            if self._nodes_left < 0:
                _, tree.last_zxid, self._sessions_left, self._nodes_left = record
            elif self._sessions_left > 0:
                _, session_id, timeout_ms, password = record
                tree.add_session(session_id, timeout_ms, password)
                self._sessions_left -= 1
            elif self._nodes_left > 0:
                self._add_nodes(chain((record,), islice(records, self._nodes_left - 1)))
            else:
                raise InvariantError("snapshot stream has more records than its header says")

    def _add_nodes(self, records: Iterable[tuple[Any, ...]]) -> None:
        """The znodes' records; the hot loop of a restart and of a SNAP (about 2 µs per znode,
        a third of it the digest).  Each Znode is made with ``__new__`` and every slot set
        here once, from the record: ``Znode()`` would set most of them twice."""
        tree, nodes, children = self.tree, self.tree.nodes, self._children
        take, index_add, shared_time = tree.shared.take, tree._index_add, tree._shared_time
        new_znode, with_digest = _new_znode, self._digest
        data_size = digest = loaded = 0
        last_parent, siblings = "", cast("list[str]", [])
        collecting = gc.isenabled()
        gc.disable()  # the loop makes no cycles; a million new objects would set off full collections
        try:
            for path, data, acl, czxid, mzxid, pzxid, ctime, mtime, version, cversion, aversion, owner in records:
                loaded += 1
                node = nodes[path] = new_znode(Znode)
                if data is None:
                    data = NULL_DATA
                node.data = data
                node.meta = take(acl, aversion, owner)
                # each field is a fresh int from the stream: keep one object where the values
                # are equal, as a live tree does (about 100 B per znode)
                node.czxid = czxid
                node.mzxid = shared_mzxid = czxid if mzxid == czxid else mzxid
                node.ctime = shared_ctime = shared_time(ctime)
                node.mtime = shared_ctime if mtime == ctime else shared_time(mtime)
                node.version = version
                if pzxid != czxid or cversion:  # it has or had children: it keeps them
                    kept = node.children = Children(shared_mzxid if pzxid == mzxid else pzxid)
                    kept.cversion = cversion
                else:
                    node.children = NO_CHILDREN
                if path != "/":
                    parent = parent_of(path)
                    if parent != last_parent:  # else the same siblings: they mostly come together
                        found = children.get(parent)
                        if found is None:
                            nodes[parent]  # noqa: B018  # KeyError: the parent did not come first
                            found = children[parent] = []
                        siblings, last_parent = found, parent
                    siblings.append(path)
                data_size += len(data) + len(path)
                if with_digest:
                    digest += _record_digest(path, data, czxid, mzxid, pzxid, ctime, mtime, version, cversion, aversion, owner)
                if owner:
                    index_add(path, owner)
        finally:
            if collecting:
                gc.enable()
            self._nodes_left -= loaded
            tree.data_size += data_size
            tree.digest += digest

    def finish(self) -> DataTree:
        if self._nodes_left != 0 or self._sessions_left > 0 or "/" not in self.tree.nodes:
            raise InvariantError("snapshot stream ended early")
        tree = self.tree
        for parent, paths in self._children.items():
            tree.nodes[parent].own_children().update(paths)
        self._children = {}
        quota.rebuild(tree)
        if self._digest:
            tree.adopt_digest(tree.digest)  # the sum the build kept
        else:
            tree.digest = 0  # the caller's adopt_digest sets it
        return tree
