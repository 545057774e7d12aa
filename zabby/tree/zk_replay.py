"""ZooKeeper's data tree rebuilt the way ZooKeeper's own recovery rebuilds it: a (fuzzy)
snapshot, then its txn log replayed with ``DataTree.processTxn``'s rules, quirks included.

Theory of operation: a ZooKeeper snapshot is *fuzzy*: it is written while txns go on being
applied, so it may hold the effect of txns after the zxid in its name, and replaying them
meets nodes that already exist or are already gone.  ZooKeeper's replay tolerates that in
precise ways, which this follows (3.8.4's ``DataTree``):

* a create whose node exists fails (NODEEXISTS) and, for a plain ``create`` only, still
  raises the parent's cversion and pzxid to the txn's (``setCversionPzxid``); a create moves
  the parent's cversion and pzxid only if its parentCVersion is above the parent's;
* a delete moves the parent's pzxid (if the zxid is above it) *before* it finds the node
  missing; it never checks for children: a deleted node's children stay in the node map,
  detached from any parent (counted in the digest, written to no snapshot) until a create
  replaces them;
* a multi applies each op on its own (an op that fails is skipped), unless one of its ops
  is an ERROR: then none is applied;
* a closeSession deletes the paths its txn lists, then whatever else the session still owns.

A node is a list in ``zabby.wire.zk_snapshot.NODE_FIELDS`` order, which is also the order of
zabby's snapshot records.  The tree digest is kept as ZooKeeper keeps it (``NodeHashMapImpl``:
a node's part taken out before a change and put back after), so after each txn it can be
compared with the digest ZooKeeper logged with it: a difference means the replay did not do
what ZooKeeper did.

Two indexes are built only when needed, each in one pass over the nodes: the children of each
node (a delete of a node that ever had a child, to detach them), and the ephemerals of each
session (the first closeSession).  A node that never had a child has cversion 0, so most
deletes need neither.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

from zabby.opcodes import CONTAINER_OWNER, OpCode, owner_ttl_ms, ttl_owner
from zabby.wire.zk_snapshot import (
    AVERSION, CVERSION, DATA, DIGEST_MASK, MZXID, MTIME, OWNER, PZXID, VERSION, ACL_FIELD, node_digest,
)  # fmt: skip
from zabby.wire.zk_txn import ZkTxn

Node = list[Any]
CREATES = frozenset({OpCode.CREATE, OpCode.CREATE2, OpCode.CREATE_TTL, OpCode.CREATE_CONTAINER})


class NoNode(Exception):
    """KeeperException.NoNodeException: the txn does nothing more (replay goes on)."""


class NodeExists(Exception):
    """KeeperException.NodeExistsException."""


def parent_path(path: str) -> str:
    return path[: path.rfind("/")] or "/"


def is_normal_owner(owner: int) -> bool:
    """``EphemeralType.get(owner) == NORMAL`` (extended types on): a session's ephemeral."""
    return owner != 0 and owner != CONTAINER_OWNER and owner_ttl_ms(owner) is None


class ZkTree:
    """The nodes and sessions of a ZooKeeper snapshot, replayed onto (``apply``)."""

    def __init__(self, nodes: MutableMapping[str, Node], sessions: dict[int, int], zxid: int, digest: int | None,
                 owned: list[str] | None = None) -> None:  # fmt: skip
        """``nodes``: a dict, or any mapping that reads like one (``zabby.engine.zk_digests``
        replays proposals over a view of zabby's tree); ``owned``: the paths of the nodes that
        have an ephemeralOwner, if known (else every node is looked at when the ephemerals are
        first needed)."""
        self.nodes = nodes
        self.sessions = sessions
        self.last_zxid = zxid
        self.digest = digest  # None: not kept (the data has no digest to compare with)
        self.detached: set[str] = set()  # in the node map, in no parent's children
        self._children: dict[str, set[str]] | None = None
        self._ephemerals: dict[int, set[str]] | None = None
        self._owned = owned  # then the owned ones created since, until the index is built

    # ----------------------------------------------------------------- digest
    def _untrack(self, node: Node) -> None:
        if self.digest is not None:
            self.digest -= node_digest(node)

    def _track(self, node: Node) -> None:
        if self.digest is not None:
            self.digest = (self.digest + node_digest(node)) & DIGEST_MASK

    # ----------------------------------------------------------------- indexes
    def _children_index(self) -> dict[str, set[str]]:
        if self._children is None:
            index: dict[str, set[str]] = {}
            detached = self.detached
            for path in self.nodes:
                if path != "/" and path not in detached:
                    index.setdefault(parent_path(path), set()).add(path)
            self._children = index
        return self._children

    def _ephemerals_index(self) -> dict[int, set[str]]:
        if self._ephemerals is None:
            index: dict[int, set[str]] = {}
            nodes = self.nodes
            for path in nodes if self._owned is None else self._owned:
                node = nodes.get(path)
                if node is not None and is_normal_owner(node[OWNER]):
                    index.setdefault(node[OWNER], set()).add(path)
            self._ephemerals, self._owned = index, None
        return self._ephemerals

    def _detach_children(self, path: str, node: Node) -> None:
        """``node`` leaves the map: its children stay there, detached."""
        if node[CVERSION] == 0 and self._children is None:
            return  # it never had a child
        self.detached.update(self._children_index().pop(path, ()))

    def _attach(self, path: str, parent: str) -> None:
        self.detached.discard(path)
        if self._children is not None:
            self._children.setdefault(parent, set()).add(path)

    # ----------------------------------------------------------------- txns
    def apply(self, txn: ZkTxn) -> int:
        """Replay one txn as ``FileTxnSnapLog.processTransaction`` does; its error code (0: ok)."""
        if txn.type == OpCode.CREATE_SESSION and txn.body is not None:
            self.sessions[txn.session_id] = txn.body[0]
        elif txn.type == OpCode.CLOSE_SESSION:
            self.sessions.pop(txn.session_id, None)
        err = self._process(txn, txn.type, txn.body)
        if txn.type == OpCode.CREATE and err == _NODE_EXISTS:
            path, parent_cversion = txn.body[0], txn.body[4]  # type: ignore[index]
            self._raise_cversion(parent_path(path), parent_cversion, txn.zxid)
        self.last_zxid = max(self.last_zxid, txn.zxid)
        return err

    def _process(self, txn: ZkTxn, txn_type: int, body: tuple[Any, ...] | None) -> int:
        try:
            self._dispatch(txn, txn_type, body)
        except NoNode:
            return _NO_NODE
        except NodeExists:
            return _NODE_EXISTS
        return 0

    def _dispatch(self, txn: ZkTxn, txn_type: int, body: tuple[Any, ...] | None) -> None:  # noqa: C901 -- one branch per txn type
        if body is None and txn_type != OpCode.CLOSE_SESSION:
            return
        assert body is not None or txn_type == OpCode.CLOSE_SESSION
        if txn_type in (OpCode.CREATE, OpCode.CREATE2):
            path, data, acl, ephemeral, parent_cversion = body  # type: ignore[misc]
            self._create(path, data, acl, txn.session_id if ephemeral else 0, parent_cversion, txn)
        elif txn_type == OpCode.CREATE_TTL:
            path, data, acl, parent_cversion, ttl_ms = body  # type: ignore[misc]
            self._create(path, data, acl, ttl_owner(ttl_ms), parent_cversion, txn)
        elif txn_type == OpCode.CREATE_CONTAINER:
            path, data, acl, parent_cversion = body  # type: ignore[misc]
            self._create(path, data, acl, CONTAINER_OWNER, parent_cversion, txn)
        elif txn_type in (OpCode.DELETE, OpCode.DELETE_CONTAINER):
            self._delete(body[0], txn.zxid)  # type: ignore[index]
        elif txn_type in (OpCode.SET_DATA, OpCode.RECONFIG):
            path, data, version = body  # type: ignore[misc]
            self._change(path, ((DATA, data), (VERSION, version), (MZXID, txn.zxid), (MTIME, txn.time_ms)))
        elif txn_type == OpCode.SET_ACL:
            path, acl, aversion = body  # type: ignore[misc]
            self._change(path, ((AVERSION, aversion), (ACL_FIELD, acl)))
        elif txn_type == OpCode.CLOSE_SESSION:
            self._kill_session(txn.session_id, txn.zxid, None if body is None else body[0])
        elif txn_type == OpCode.MULTI:
            self._multi(txn, body[0])  # type: ignore[index]

    def _create(self, path: str, data: bytes | None, acl: Any, owner: int, parent_cversion: int, txn: ZkTxn) -> None:
        nodes, parent_key = self.nodes, parent_path(path)
        parent = nodes.get(parent_key)
        if parent is None:
            raise NoNode(path)
        old = nodes.get(path)
        if old is not None and path not in self.detached:
            raise NodeExists(path)
        self._untrack(parent)
        if parent_cversion == -1:
            parent_cversion = parent[CVERSION] + 1
        if parent_cversion > parent[CVERSION]:
            parent[CVERSION], parent[PZXID] = parent_cversion, txn.zxid
        self._track(parent)
        if old is not None:  # a detached node it replaces: its own children are detached now
            self._untrack(old)
            self._detach_children(path, old)
            self._forget_ephemeral(path, old[OWNER])
        zxid, time_ms = txn.zxid, txn.time_ms
        node = nodes[path] = [path, data, acl, zxid, zxid, zxid, time_ms, time_ms, 0, 0, 0, owner]
        self._track(node)
        self._attach(path, parent_key)
        if self._ephemerals is not None and is_normal_owner(owner):
            self._ephemerals.setdefault(owner, set()).add(path)
        elif self._owned is not None and owner:
            self._owned.append(path)

    def _delete(self, path: str, zxid: int) -> None:
        nodes, parent_key = self.nodes, parent_path(path)
        parent = nodes.get(parent_key)
        if parent is None:
            raise NoNode(path)
        if zxid > parent[PZXID]:  # moved even when the node turns out to be gone (a fuzzy snapshot)
            self._untrack(parent)
            parent[PZXID] = zxid
            self._track(parent)
        if self._children is not None:
            self._children.get(parent_key, set()).discard(path)
        node = nodes.pop(path, None)
        if node is None:
            raise NoNode(path)
        self._untrack(node)
        self.detached.discard(path)
        self._detach_children(path, node)
        self._forget_ephemeral(path, node[OWNER])

    def _forget_ephemeral(self, path: str, owner: int) -> None:
        if self._ephemerals is not None and is_normal_owner(owner):
            owned = self._ephemerals.get(owner)
            if owned is not None:
                owned.discard(path)

    def _change(self, path: str, fields: tuple[tuple[int, Any], ...]) -> None:
        node = self.nodes.get(path)
        if node is None:
            raise NoNode(path)
        self._untrack(node)
        for index, value in fields:
            node[index] = value
        self._track(node)

    def _raise_cversion(self, path: str, cversion: int, zxid: int) -> None:
        """``DataTree.setCversionPzxid``, after a plain create met its node already there."""
        node = self.nodes.get(path)
        if node is None:
            return
        if cversion == -1:
            cversion = node[CVERSION] + 1
        if cversion > node[CVERSION]:
            self._untrack(node)
            node[CVERSION], node[PZXID] = cversion, zxid
            self._track(node)

    def _kill_session(self, session_id: int, zxid: int, listed: tuple[str, ...] | None) -> None:
        owned = self._ephemerals_index().pop(session_id, None)
        for path in listed or ():
            self._delete_quietly(path, zxid)
        if owned is None:
            return
        for path in owned.difference(listed or ()):
            self._delete_quietly(path, zxid)

    def _delete_quietly(self, path: str, zxid: int) -> None:
        try:
            self._delete(path, zxid)
        except NoNode:
            pass

    def _multi(self, txn: ZkTxn, ops: tuple[tuple[int, tuple[Any, ...] | None], ...]) -> None:
        """Every op on its own; none if any is an ERROR; stops at an op a multi cannot hold."""
        if any(op_type == OpCode.ERROR for op_type, _ in ops):
            return
        for op_type, op_body in ops:
            if op_body is None:
                return  # processTxn's IOException: the ops after it are not applied
            self._process(txn, op_type, op_body)

    # ----------------------------------------------------------------- results
    def reachable(self) -> Iterator[Node]:
        """The nodes a snapshot of this tree would hold, parents first: every node but the
        detached ones and those under them."""
        if not self.detached:
            yield from self.nodes.values()
            return
        children, stack = self._children_index(), ["/"]
        order = []
        while stack:
            path = stack.pop()
            order.append(path)
            stack.extend(sorted(children.get(path, ()), reverse=True))
        nodes = self.nodes
        yield from (nodes[path] for path in order)

    def dead_session_ephemerals(self) -> list[str]:
        """Ephemerals whose session is in no session table: ZooKeeper deletes them when it
        loads the data (``ZooKeeperServer.loadData``, "Clean up dead sessions")."""
        return sorted(path for owner, paths in self._ephemerals_index().items() if owner not in self.sessions for path in paths)

    def delete_dead_ephemerals(self) -> int:
        paths = self.dead_session_ephemerals()
        for path in paths:
            self._delete_quietly(path, self.last_zxid)
        return len(paths)


_NO_NODE, _NODE_EXISTS = -101, -110  # KeeperException.Code
