"""Request preparation: turn a write request into a txn, against the tree *plus* the changes
that are prepared but not yet applied (ZooKeeper's ``PrepRequestProcessor`` and its
``outstandingChanges``).

Theory of operation: writes are pipelined, so when request N+1 is prepared, txn N may still
be on its way to the disk.  Every prepared txn leaves a ``Pending`` record per path it
touches, tagged with its zxid; lookups see the newest record first, then the tree.  When the
tree applies zxid Z, ``applied(Z)`` drops the records no newer than Z, since the tree now
says the same.  A request that fails here never becomes a txn: its error is answered in the
session's order without consuming a zxid (a failed multi, as in ZooKeeper, does become a
txn, of ERROR entries).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from zabby.errors import Err, ZabbyError, shown
from zabby.opcodes import (
    CONTAINER_OWNER,
    CREATE_OPS,
    TTL_MAX_MS,
    CreateMode,
    OpCode,
    is_session_owner,
    owner_ttl_ms,
    ttl_owner,
)
from zabby.tree import acl as acls
from zabby.tree import quota
from zabby.tree.datatree import ZOOKEEPER, ZOOKEEPER_CONFIG, ZOOKEEPER_QUOTA, DataTree, Znode
from zabby.tree.paths import parent_of, sequential_name, validate_path

PROTECTED_PATHS = frozenset({"/", ZOOKEEPER, ZOOKEEPER_CONFIG, ZOOKEEPER_QUOTA})
TREE = ""  # the quota ledger's key for the whole tree's growth (no path is empty)
_PLAIN_CREATE_OPS = frozenset({OpCode.CREATE, OpCode.CREATE2})  # ops whose flags 0 mean a persistent node
# The members every write is told apart by or made with, as globals (see zabby.opcodes)
_MULTI, _CHECK, _CREATE, _SET_DATA = OpCode.MULTI, OpCode.CHECK, OpCode.CREATE, OpCode.SET_DATA
_MULTI_SUB_OPS = (*CREATE_OPS, OpCode.DELETE, OpCode.SET_DATA, OpCode.CHECK)  # a tuple: a sub-op may be anything a client sent, unhashable too
_NO_TTL = (None, 0, -1)  # what a create that is not a TTL node may carry as its TTL


class Pending(NamedTuple):
    """What prep needs to know of a znode, as it will be once in-flight txns apply.  A tuple:
    every write makes one or two, and a frozen dataclass costs four times as much to make
    (1.7 µs, and 2.8 µs for ``dataclasses.replace``, against 0.3 and 0.8 µs)."""

    exists: bool
    acl: tuple[acls.ACL, ...] = ()
    version: int = 0
    cversion: int = 0
    aversion: int = 0
    owner: int = 0
    num_children: int = 0
    zxid: int = 0
    data_bytes: int = 0

    # The changes every write makes, as tuples built straight from the fields: ``_replace``
    # costs 0.8 us a call, these 0.25 us.
    def with_data(self, version: int, zxid: int, data_bytes: int) -> Pending:
        exists, acl, _, cversion, aversion, owner, num_children, _, _ = self
        return _new_tuple(Pending, (exists, acl, version, cversion, aversion, owner, num_children, zxid, data_bytes))

    def with_children(self, cversion: int, num_children: int, zxid: int) -> Pending:
        exists, acl, version, _, aversion, owner, _, _, data_bytes = self
        return _new_tuple(Pending, (exists, acl, version, cversion, aversion, owner, num_children, zxid, data_bytes))


_new_tuple = tuple.__new__


@dataclass(frozen=True, slots=True)
class Caller:
    """Who asks: the session and the ids it has proven (see ``acl``)."""

    session_id: int
    auth_ids: list[acls.AuthId]
    superuser: bool = False


def _ignore(message: str) -> None:
    pass


TXN_OVERHEAD_BYTES = 48  # a txn's msgpack beyond its ops: its array and five ints (at most 9 bytes each)
OP_OVERHEAD_BYTES = 32  # an op's beyond its path, data and ACL: its arrays, the data's header, the ints


class TxnTooLarge(ZabbyError):
    """The txn a request would make is over ``maxTxnBytes``, or its ACLs over
    ``maxTxnAclEntries``: the whole request is refused, a multi included (not one of its ops)."""


@dataclass(frozen=True, slots=True)
class PrepLimits:
    data_bytes_max: int = 1024 * 1024
    txn_bytes_max: int = 2 * 1024 * 1024  # maxTxnBytes: what the log, peers and snapshots take (zabby.config)
    acl_entries_max: int = 256  # maxAclEntries
    txn_acl_entries_max: int = 8192  # maxTxnAclEntries: the entries of the distinct ACLs one txn sets
    znodes_max: int = 10_000_000  # maxZnodes: the tree's znodes
    tree_bytes_max: int = 4 * 2**30  # maxTreeBytes: its paths, data and distinct ACLs (DataTree.size_bytes)
    ttl_enabled: bool = True
    enforce_quota: bool = False  # zookeeper.enforceQuota: a hard quota refuses a write
    sasl_acls: bool = False  # SASL is configured: "sasl:user" is an ACL scheme
    quota_warning: Callable[[str], None] = field(default=_ignore, compare=False)  # a quota passed, not refused


def _from_node(node: Znode) -> Pending:
    acl, aversion, owner = node.meta
    return _new_tuple(Pending, (True, acl, node.version, node.child_fields()[1], aversion, owner, len(node.children), 0, len(node.data)))


def _acl_key(acl: object) -> tuple[Any, ...] | None:
    """An ACL as asked, as a key: the same entries the same key whether they came as tuples
    (jute, a forwarded request) or lists (zabby's msgpack protocol), so a txn's repeated ACL
    is charged once whichever server its client reached; None for what is no ACL."""
    if acl.__class__ is tuple:
        try:
            hash(acl)
            return acl
        except TypeError:
            pass
    if not isinstance(acl, (list, tuple)):
        return None
    try:
        key = tuple(tuple(entry) if isinstance(entry, (list, tuple)) else entry for entry in acl)
        hash(key)
    except TypeError:
        return None
    return key


class Preparer:
    def __init__(self, tree: DataTree, limits: PrepLimits | None = None) -> None:
        self.tree = tree
        self.limits = limits or PrepLimits()
        self.pending: dict[str, Pending] = {}
        self._order: deque[tuple[int, str]] = deque()
        self._overlay: dict[str, Pending] | None = None
        self._txn_bytes = 0  # the txn being prepared, so far (at least what it will pack to)
        self._measures = 0  # quota stats nodes the txn being prepared creates
        self._txn_acls: dict[Any, tuple[acls.ACL, ...]] = {}  # the txn's ACLs validated so far, as asked
        self._txn_acl_entries = 0  # and their entries, after auth is expanded
        self.quota_ledger = quota.QuotaLedger()
        self._dispatch: dict[int, Callable[..., tuple[int, tuple[Any, ...]]]] = {
            OpCode.CREATE: self._create,
            OpCode.CREATE2: self._create,
            OpCode.CREATE_CONTAINER: self._create,
            OpCode.CREATE_TTL: self._create,
            OpCode.DELETE: self._delete,
            OpCode.DELETE_CONTAINER: self._delete_container,
            OpCode.SET_DATA: self._set_data,
            OpCode.SET_ACL: self._set_acl,
            OpCode.CHECK: self._check,
        }

    # ----------------------------------------------------------------- lookups
    def view(self, path: str) -> Pending | None:
        if self._overlay is not None and path in self._overlay:
            found = self._overlay[path]
            return found if found.exists else None
        pending = self.pending.get(path)
        if pending is not None:
            return pending if pending.exists else None
        node = self.tree.nodes.get(path)
        return None if node is None else _from_node(node)

    def _record(self, path: str, record: Pending) -> None:
        if self._overlay is not None:
            self._overlay[path] = record
        else:
            self.pending[path] = record
            self._order.append((record.zxid, path))

    def applied(self, zxid: int) -> None:
        """The tree has applied every txn up to ``zxid``: forget what it now knows."""
        order, pending = self._order, self.pending
        while order and order[0][0] <= zxid:
            _, path = order.popleft()
            record = pending.get(path)
            if record is not None and record.zxid <= zxid:
                del pending[path]
        self.quota_ledger.applied(zxid)

    def reset(self) -> None:
        self.pending.clear()
        self._order.clear()
        self.quota_ledger.reset()

    # ----------------------------------------------------------------- entry points
    def prepare(self, op: int, args: tuple[Any, ...], caller: Caller, zxid: int, now_ms: int) -> tuple[int, tuple[Any, ...]]:
        """Validate one write and return its ``(txn_type, body)``; raise ZabbyError if it fails.

        Ordering: the caller logs the txn with ``zxid`` before preparing the next one.

        Raises:
            ZabbyError: the request fails; TxnTooLarge where its txn would pass ``maxTxnBytes``
                (then nothing of it is recorded: each op is charged before it records).
        """
        self._txn_bytes, self._measures, self._txn_acl_entries = TXN_OVERHEAD_BYTES, 0, 0
        if self._txn_acls:
            self._txn_acls = {}
        if op == _MULTI:
            return self._multi(args, caller, zxid, now_ms)
        handler = self._dispatch.get(op)
        if handler is None or op == _CHECK:
            # A check is part of a multi only: alone it would be a txn of its own that
            # ZooKeeper could not read back (ZOOKEEPER-2623), and clients cannot send it
            raise ZabbyError(Err.UNIMPLEMENTED, f"op {op} is not a write" if handler is None else "check is only an op of a multi")
        return handler(op, args, caller, zxid, now_ms)

    def close_session(self, session_id: int, zxid: int) -> tuple[int, tuple[Any, ...]]:
        """A CLOSE_SESSION txn naming every ephemeral the session will own by then, or, where
        their paths would pass ``maxTxnBytes``, ``None``: the tree then deletes the ephemerals
        it holds for the session (the same ones, as the session can create no more)."""
        candidates = set(self.tree.ephemerals.get(session_id, ()))
        candidates.update(path for path, rec in self.pending.items() if rec.owner == session_id)
        paths = sorted(p for p in candidates if (v := self.view(p)) is not None and v.owner == session_id)
        for path in paths:
            self._record(path, Pending(False, zxid=zxid))
            parent_path = parent_of(path)
            parent = self.view(parent_path)
            if parent is not None:
                self._record(parent_path, parent.with_children(parent.cversion, parent.num_children - 1, zxid))
        paths_bytes = 5 + sum(acls.packed_text_bytes(path) for path in paths)
        return OpCode.CLOSE_SESSION, (tuple(paths) if TXN_OVERHEAD_BYTES + paths_bytes <= self.limits.txn_bytes_max else None,)

    # ----------------------------------------------------------------- single ops
    def _check_acl(self, record: Pending, perm: int, caller: Caller) -> None:
        if not acls.check(record.acl, perm, caller.auth_ids, caller.superuser):
            raise ZabbyError(Err.NOAUTH, "insufficient permission")

    def _charge(self, path: str, data_bytes: int = 0, acl: tuple[acls.ACL, ...] = ()) -> None:
        """Count one op into the txn being prepared, before it records anything.

        Raises:
            TxnTooLarge: the txn would pass ``maxTxnBytes``.
        """
        path_bytes = len(path) if path.isascii() else acls.text_bytes(path)
        size = self._txn_bytes + OP_OVERHEAD_BYTES + 5 + path_bytes + data_bytes + (acls.acl_bytes(acl) if acl else 0)  # 5: the path's header, at most
        if size > self.limits.txn_bytes_max:
            raise TxnTooLarge(Err.BADARGUMENTS, f"the transaction would be over {size} bytes, more than maxTxnBytes "
                                                f"({self.limits.txn_bytes_max}): its ACLs expanded into the session's ids, "
                                                f"or its ops, are too large")  # fmt: skip
        self._txn_bytes = size

    def _fixed_acl(self, acl: object, caller: Caller) -> tuple[acls.ACL, ...]:
        """The ACL a create or setACL asks for, validated and with ``auth`` expanded (see ``fix_acl``).

        An ACL the txn asked for already costs a look-up; each new one is validated and then
        interned by every member's apply, a microsecond or two an entry: the distinct ACLs' entries
        are bounded per txn (``maxTxnAclEntries``), or a 1 MB multi of fresh ip ACLs (58,000 entries)
        held the server 0.45 s.

        Raises:
            ZabbyError: INVALIDACL, for what fix_acl refuses and an ACL over ``maxAclEntries``;
                TxnTooLarge, past ``maxTxnAclEntries``.
        """
        key = _acl_key(acl)
        limits = self.limits
        entries_max = limits.acl_entries_max
        if key is not None:
            known = self._txn_acls.get(key)
            if known is not None:
                return known
            known = acls.validated_before(key)  # nearly every create's: no entry to check or expand
            if known is not None and len(known) == len(key) <= entries_max:  # (fix_acl drops repeated entries: counted as asked)
                if self._overlay is None and len(known) <= limits.txn_acl_entries_max:
                    return known  # the txn's only op: its only ACL, within both bounds (a multi's are counted)
                self._charge_acl_entries(len(known))
                self._txn_acls[key] = known
                return known
        asked = len(acl) if isinstance(acl, (list, tuple)) else 0  # fix_acl refuses anything else
        if asked > entries_max:  # refused before 30,000 entries are validated
            raise ZabbyError(Err.INVALIDACL, f"an ACL of {asked} entries, more than maxAclEntries ({entries_max})")
        self._charge_acl_entries(asked)
        fixed = acls.fix_acl(acl, caller.auth_ids, sasl=limits.sasl_acls)
        if len(fixed) > entries_max:
            raise ZabbyError(Err.INVALIDACL, f"an ACL of {len(fixed)} entries (with auth expanded into the session's ids), "
                                             f"more than maxAclEntries ({entries_max})")  # fmt: skip
        if len(fixed) != asked:  # what auth expanded into
            self._charge_acl_entries(len(fixed) - asked)
        if key is not None:
            self._txn_acls[key] = fixed
        return fixed

    def _charge_acl_entries(self, count: int) -> None:
        """Raises:
            TxnTooLarge: the txn's distinct ACLs would pass ``maxTxnAclEntries``."""
        self._txn_acl_entries += count
        if self._txn_acl_entries > self.limits.txn_acl_entries_max:
            raise TxnTooLarge(Err.BADARGUMENTS, f"the transaction's distinct ACLs hold more than maxTxnAclEntries "
                                                f"({self.limits.txn_acl_entries_max}) entries: share ACLs, or send fewer ops")  # fmt: skip

    def _existing(self, path: str) -> Pending:
        record = self.view(path)
        if record is None:
            raise ZabbyError(Err.NONODE, path)
        return record

    def _create(self, op: int, args: tuple[Any, ...], caller: Caller, zxid: int, now_ms: int) -> tuple[int, tuple[Any, ...]]:
        path, data, acl, flags, ttl_ms = args
        if flags == 0 and op in _PLAIN_CREATE_OPS and ttl_ms in _NO_TTL:  # persistent: no mode to look up
            sequential, owner = False, 0
        else:
            mode = self._create_mode(op, flags, ttl_ms)
            sequential, owner = mode.is_sequential, self._owner_for(mode, caller.session_id, ttl_ms)
        parent_path = _parent_unchecked(path)  # the whole path is checked once it has its name
        data_bytes = self._check_data(data)
        fixed_acl = self._fixed_acl(acl, caller)
        parent = self._existing(parent_path)
        self._check_acl(parent, acls.CREATE, caller)
        if sequential:
            path = sequential_name(path, parent.cversion)
        validate_path(path)
        if self.view(path) is not None:
            raise ZabbyError(Err.NODEEXISTS, path)
        if is_session_owner(parent.owner):
            raise ZabbyError(Err.NOCHILDRENFOREPHEMERALS, parent_path)
        if path.startswith(quota.QUOTA_PREFIX):
            self._check_quota_node(path, caller)
        self._charge(path, data_bytes, fixed_acl)
        self._check_room(1, len(path) + data_bytes, fixed_acl, zxid)
        if self.tree.quota_roots:  # tested here: the plaintext write path pays one attribute look-up
            self._check_quota(path, 1, data_bytes, zxid)
        new_cversion = parent.cversion + 1
        self._record(parent_path, parent.with_children(new_cversion, parent.num_children + 1, zxid))
        self._record(path, _new_tuple(Pending, (True, fixed_acl, 0, 0, 0, owner, 0, zxid, data_bytes)))
        return _CREATE, (path, data, fixed_acl, owner, new_cversion)

    def _create_mode(self, op: int, flags: Any, ttl_ms: Any) -> CreateMode:
        try:
            mode = CreateMode.of(flags)
        except (ValueError, TypeError):
            raise ZabbyError(Err.BADARGUMENTS, f"unknown create mode {shown(flags)}") from None
        if (op == OpCode.CREATE_CONTAINER and mode != CreateMode.CONTAINER) or (op == OpCode.CREATE_TTL and not mode.is_ttl):
            raise ZabbyError(Err.BADARGUMENTS, f"create mode {mode.name} does not fit op {OpCode(op).name}")
        if mode.is_ttl:
            if not self.limits.ttl_enabled:
                raise ZabbyError(Err.UNIMPLEMENTED, "TTL nodes are disabled (extendedTypesEnabled=false)")
            if not isinstance(ttl_ms, int) or not 0 < ttl_ms <= TTL_MAX_MS:
                raise ZabbyError(Err.BADARGUMENTS, f"ttl must be in 1..{TTL_MAX_MS} ms, got {shown(ttl_ms)}")
        elif ttl_ms not in _NO_TTL:
            raise ZabbyError(Err.BADARGUMENTS, f"ttl given for non-TTL mode {mode.name}")
        return mode

    @staticmethod
    def _owner_for(mode: CreateMode, session_id: int, ttl_ms: int) -> int:
        if mode.is_ephemeral:
            return session_id
        if mode == CreateMode.CONTAINER:
            return CONTAINER_OWNER
        if mode.is_ttl:
            return ttl_owner(ttl_ms)
        return 0

    def _check_data(self, data: Any) -> int:
        """Its size.  None is null data, as ZooKeeper's clients send it: kept apart from empty
        data (a read gives back null), 0 bytes for every count."""
        if data is None:
            return 0
        if not isinstance(data, bytes):
            raise ZabbyError(Err.BADARGUMENTS, f"data must be bytes or null, not {type(data).__name__}")
        if len(data) > self.limits.data_bytes_max:
            raise ZabbyError(Err.BADARGUMENTS, f"data of {len(data)} bytes is over the {self.limits.data_bytes_max} limit")
        return len(data)

    def _delete(self, op: int, args: tuple[Any, ...], caller: Caller, zxid: int, now_ms: int) -> tuple[int, tuple[Any, ...]]:
        path, version = args
        parent_path = _parent_unchecked(path)  # ZooKeeper never checks a delete's path further
        if path in PROTECTED_PATHS:
            raise ZabbyError(Err.BADARGUMENTS, f"{path} cannot be deleted")
        parent = self._existing(parent_path)
        self._check_acl(parent, acls.DELETE, caller)  # before the node's lookup: NOAUTH, not NONODE
        node = self._existing(path)
        _check_version(version, node.version, path)
        if node.num_children:
            raise ZabbyError(Err.NOTEMPTY, path)
        self._charge(path)
        self._record(parent_path, parent.with_children(parent.cversion, parent.num_children - 1, zxid))
        self._record(path, Pending(False, zxid=zxid))
        return OpCode.DELETE, (path,)

    def _delete_container(self, op: int, args: tuple[Any, ...], caller: Caller, zxid: int, now_ms: int) -> tuple[int, tuple[Any, ...]]:
        (path,) = args
        node = self._existing(path)
        if node.num_children:
            raise ZabbyError(Err.NOTEMPTY, path)
        if node.owner != CONTAINER_OWNER and owner_ttl_ms(node.owner) is None:
            raise ZabbyError(Err.BADVERSION, f"{path} is neither a container nor a TTL node")
        parent_path = parent_of(path)
        parent = self._existing(parent_path)
        self._charge(path)
        self._record(parent_path, parent.with_children(parent.cversion, parent.num_children - 1, zxid))
        self._record(path, Pending(False, zxid=zxid))
        return OpCode.DELETE_CONTAINER, (path,)

    def _set_data(self, op: int, args: tuple[Any, ...], caller: Caller, zxid: int, now_ms: int) -> tuple[int, tuple[Any, ...]]:
        path, data, version = args
        validate_path(path)
        data_bytes = self._check_data(data)
        node = self._existing(path)
        self._check_acl(node, acls.WRITE, caller)
        _check_version(version, node.version, path)
        self._charge(path, data_bytes)
        if data_bytes > node.data_bytes:
            self._check_room(0, data_bytes - node.data_bytes, None, zxid)
        if self.tree.quota_roots:
            self._check_quota(path, 0, data_bytes - node.data_bytes, zxid)
        new_version = node.version + 1
        self._record(path, node.with_data(new_version, zxid, data_bytes))
        return _SET_DATA, (path, data, new_version)

    def _set_acl(self, op: int, args: tuple[Any, ...], caller: Caller, zxid: int, now_ms: int) -> tuple[int, tuple[Any, ...]]:
        path, acl, aversion = args
        validate_path(path)
        fixed_acl = self._fixed_acl(acl, caller)
        node = self._existing(path)
        self._check_acl(node, acls.ADMIN, caller)
        _check_version(aversion, node.aversion, path)
        self._charge(path, 0, fixed_acl)
        self._check_room(0, 0, fixed_acl, zxid)
        new_aversion = node.aversion + 1
        self._record(path, node._replace(acl=fixed_acl, aversion=new_aversion, zxid=zxid))
        return OpCode.SET_ACL, (path, fixed_acl, new_aversion)

    def _check(self, op: int, args: tuple[Any, ...], caller: Caller, zxid: int, now_ms: int) -> tuple[int, tuple[Any, ...]]:
        path, version = args
        validate_path(path)
        node = self._existing(path)
        self._check_acl(node, acls.READ, caller)
        _check_version(version, node.version, path)
        self._charge(path)
        return OpCode.CHECK, (path, version)

    def _check_room(self, count_delta: int, bytes_delta: int, acl: tuple[acls.ACL, ...] | None, zxid: int) -> None:
        """The tree's own bounds, counting the writes still in flight: a write that adds a znode
        past ``maxZnodes``, or bytes (its path, its data, an ACL the tree does not hold yet)
        past ``maxTreeBytes``, is refused; one that frees room always passes.  What passes is
        added to the ledger (under ``TREE``) until it is applied: the tree counts it then.

        Raises:
            ZabbyError: QUOTAEXCEEDED, naming the setting.
        """
        tree, limits = self.tree, self.limits
        if acl is not None and acl not in tree.shared.acls:
            bytes_delta += acls.acl_cost(acl)
        if not (count_delta or bytes_delta):
            return
        ledger = self.quota_ledger
        count, size = ledger.add(zxid, TREE, count_delta, bytes_delta)  # counted first, taken back if refused
        if count_delta and len(tree.nodes) + count > limits.znodes_max:
            ledger.drop_last()
            raise ZabbyError(Err.QUOTAEXCEEDED, f"the tree holds maxZnodes ({limits.znodes_max:,}) znodes, "
                                                f"with the writes in flight: delete some first")  # fmt: skip
        if bytes_delta and tree.size_bytes() + size > limits.tree_bytes_max:
            ledger.drop_last()
            raise ZabbyError(Err.QUOTAEXCEEDED, f"the tree's paths, data and ACLs would pass maxTreeBytes "
                                                f"({limits.tree_bytes_max:,} bytes), with the writes in flight")  # fmt: skip

    def _check_quota_node(self, path: str, caller: Caller) -> None:
        """A quota's limits or stats node, created under ``/zookeeper/quota`` (world-writable,
        as ZooKeeper's): it takes ADMIN on the znode the quota governs, where it exists, and
        a txn creates at most one stats node.  Creating one measures the whole subtree of
        its znode in every member's apply (ZooKeeper's ``updateQuotaForPath``): a multi of
        thousands of them stalled every server for seconds.

        Raises:
            ZabbyError: NOAUTH without ADMIN on the governed znode; BADARGUMENTS for a second
                stats node in one txn.
        """
        subject = quota.subject_of(path)
        if subject is None or not quota.can_have_quota(subject[0]):
            return
        governed = self.view(subject[0])
        if governed is not None:
            self._check_acl(governed, acls.ADMIN, caller)
        if subject[1] == quota.STATS_NODE:
            if self._measures:
                raise ZabbyError(Err.BADARGUMENTS, "a transaction creates at most one quota stats node: each measures its whole subtree")
            self._measures = 1

    def _check_quota(self, path: str, count_delta: int, bytes_delta: int, zxid: int) -> None:
        """ZooKeeper's ``checkQuota``, counting the writes still in flight too: past a hard
        limit with ``enforce_quota`` the write is refused, past any other it is let through
        with a warning.  A write that passes is added to the ledger.

        Raises:
            ZabbyError: QUOTAEXCEEDED, naming the quota's root.
        """
        root = quota.governing_root(self.tree.quota_roots, path)
        if root is None:
            return
        in_flight = self.quota_ledger.in_flight(root)
        used = quota.usage(self.tree, root)
        current = (used[0] + in_flight[0], used[1] + in_flight[1])
        for excess in quota.excesses(root, quota.limits(self.tree, root), current, (count_delta, bytes_delta)):
            if excess.hard and self.limits.enforce_quota:
                raise ZabbyError(Err.QUOTAEXCEEDED, root)
            self.limits.quota_warning(excess.message())
        self.quota_ledger.add(zxid, root, count_delta, bytes_delta)

    # ----------------------------------------------------------------- multi
    def _multi(self, args: tuple[Any, ...], caller: Caller, zxid: int, now_ms: int) -> tuple[int, tuple[Any, ...]]:
        """All sub-ops against one overlay; on the first failure the overlay is dropped and the
        txn records ZooKeeper's result codes: OK before, the error, RUNTIMEINCONSISTENCY after."""
        (ops,) = args
        if not isinstance(ops, (list, tuple)):
            raise ZabbyError(Err.BADARGUMENTS, "multi takes a list of ops")
        self._overlay = {}
        quota_mark = self.quota_ledger.mark()
        entries: list[tuple[int, tuple[Any, ...]]] = []
        failed_at, failure = -1, Err.OK
        try:
            for index, sub in enumerate(ops):
                try:
                    entries.append(self._multi_op(sub, caller, zxid, now_ms))
                except TxnTooLarge:
                    self.quota_ledger.rollback(quota_mark)
                    raise
                except ZabbyError as exc:
                    failed_at, failure = index, exc.code
                    break
            overlay = self._overlay
        finally:
            self._overlay = None
        if failed_at < 0:
            for path, record in overlay.items():
                self._record(path, record)
            return OpCode.MULTI, (tuple(entries),)
        self.quota_ledger.rollback(quota_mark)
        codes = [Err.OK] * failed_at + [failure] + [Err.RUNTIMEINCONSISTENCY] * (len(ops) - failed_at - 1)
        return OpCode.MULTI, (tuple((OpCode.ERROR, (int(code),)) for code in codes),)

    def _multi_op(self, sub: Any, caller: Caller, zxid: int, now_ms: int) -> tuple[int, tuple[Any, ...]]:
        if not isinstance(sub, (list, tuple)) or not sub:
            raise ZabbyError(Err.BADARGUMENTS, f"bad multi op {shown(sub)}")
        op, *rest = sub
        if op not in _MULTI_SUB_OPS:
            raise ZabbyError(Err.UNIMPLEMENTED, f"op {op} is not allowed in multi")
        try:
            return self._dispatch[op](op, tuple(rest), caller, zxid, now_ms)
        except (TypeError, ValueError) as exc:
            raise ZabbyError(Err.BADARGUMENTS, f"bad arguments for op {op}: {exc}") from None


def _parent_unchecked(path: Any) -> str:
    """What comes before the last "/" of a create's or delete's path, as ZooKeeper's prep
    takes it: it refuses only a path with no "/" or with a NUL, so "/a/." or "/a//b" meets
    NONODE or NOAUTH before any BADARGUMENTS."""
    if not isinstance(path, str) or "/" not in path or "\0" in path:
        raise ZabbyError(Err.BADARGUMENTS, f"bad path {shown(path)}")
    return path[: path.rindex("/")] or "/"


def _check_version(expected: Any, actual: int, path: str) -> None:
    if not isinstance(expected, int):
        raise ZabbyError(Err.BADARGUMENTS, f"version must be an int, got {shown(expected)}")
    if expected != -1 and expected != actual:
        raise ZabbyError(Err.BADVERSION, path)
