"""ZooKeeper's tree digest after each txn (``quorum.protocol=zookeeper``): a leader's for the
PROPOSALs and INFORMs its learners check, and a learner's check of its leader's.

ZooKeeper's leader puts in each proposal the digest its tree will have once the txn is
applied (``TxnDigest``: ``DigestCalculator``'s sum of each znode's CRC, ``zabby.wire.zk_snapshot``);
a learner that applies the txn and finds another digest logs a mismatch and counts it
(``digest_mismatches_count``).  zabby's own tree keeps another digest (its own, sessions
included), so this one is kept apart, and only under ZooKeeper's peer protocol.

Theory of operation: when this server starts leading, the digest of its tree is added up
once (O(znodes)); then each txn proposed is replayed, with ZooKeeper's own rules
(``zabby.tree.zk_replay.ZkTree``), onto a ``TreeOverlay``: the znodes proposed txns changed,
as they will be, over the tree as it is.  A znode's overlay entry goes once the tree has
applied the txn that last changed it: the tree then holds the same.  The digests of the last
``kept`` proposals are kept for the links (a DIFF sends recent txns again; an older one goes
without its digest, which ZooKeeper then does not check).

A learner checks as ZooKeeper's does, when it applies a txn: the digest its leader carried
with the txn (``carry``, as the link reads it) against the one replayed, the same way, over
its tree as it is just before the apply (``check``).  The replay starts at the first txn
applied with a digest to check (adding the tree up once) and goes on with every txn applied
after it, until the role or the tree changes.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterator, MutableMapping
from typing import Any

from zabby.opcodes import OpCode
from zabby.tree.datatree import DataTree, NullData
from zabby.tree.txns import Txn
from zabby.tree.zk_replay import ZkTree
from zabby.wire.zk_quorum import zk_from_txn
from zabby.wire.zk_snapshot import DIGEST_MASK, node_digest
from zabby.wire.zk_txn import DIGEST_VERSION

DIGESTS_KEPT = 65536

Node = list[Any]


def node_of(tree: DataTree, path: str) -> Node | None:
    """A znode of zabby's tree as ZooKeeper's replay holds one (``zk_snapshot.NODE_FIELDS``)."""
    node = tree.nodes.get(path)
    if node is None:
        return None
    acl, aversion, owner = node.meta
    pzxid, cversion = node.child_fields()
    data = None if node.data.__class__ is NullData else node.data
    return [path, data, acl, node.czxid, node.mzxid, pzxid, node.ctime, node.mtime, node.version, cversion, aversion, owner]


class TreeOverlay(MutableMapping[str, Node]):
    """The znodes as proposed txns leave them, over a zabby tree: reading one copies it in
    (the replay changes the lists it reads, in place), tagged with the txn being replayed
    (``zxid``), and so does reading one again in a later txn; deleting one leaves a tombstone.  Iteration sees only what the overlay holds (the replay
    iterates to build its indexes, which here start empty and grow with the proposals)."""

    def __init__(self, tree: DataTree) -> None:
        self.tree = tree
        self.zxid = 0  # the txn being replayed: what it reads or writes goes when the tree applies it
        self._nodes: dict[str, tuple[int, Node | None]] = {}
        self._order: deque[tuple[int, str]] = deque()

    def _put(self, path: str, node: Node | None) -> None:
        self._nodes[path] = (self.zxid, node)
        self._order.append((self.zxid, path))

    def __getitem__(self, path: str) -> Node:
        entry = self._nodes.get(path)
        if entry is not None:
            zxid, node = entry
            if node is None:
                raise KeyError(path)
            if zxid < self.zxid:  # the replay may change it in place now: it stays until the tree has that too
                self._put(path, node)
            return node
        node = node_of(self.tree, path)
        if node is None:
            raise KeyError(path)
        self._put(path, node)
        return node

    def __setitem__(self, path: str, node: Node) -> None:
        self._put(path, node)

    def __delitem__(self, path: str) -> None:
        self[path]  # noqa: B018 -- KeyError for a znode that is not there
        self._put(path, None)

    def __iter__(self) -> Iterator[str]:
        return (path for path, (_, node) in self._nodes.items() if node is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def applied(self, zxid: int) -> None:
        """The tree applied every txn up to ``zxid``: it holds what the overlay held for them."""
        order, nodes = self._order, self._nodes
        while order and order[0][0] <= zxid:
            _, path = order.popleft()
            entry = nodes.get(path)
            if entry is not None and entry[0] <= zxid:
                del nodes[path]


class ZkDigests:
    """The digests of the txns this leader proposes (see the module's docstring)."""

    def __init__(self, kept: int = DIGESTS_KEPT) -> None:
        self.kept = kept
        self._digests: OrderedDict[int, int] = OrderedDict()
        self._carried: OrderedDict[int, int] = OrderedDict()  # a learner's: its leader's, by zxid
        self._overlay: TreeOverlay | None = None
        self._replay: ZkTree | None = None

    def start(self, tree: DataTree) -> None:
        """Replay from ``tree``: as a leader, one that holds every txn logged so far; as a
        learner, as it is before the next apply."""
        overlay = self._overlay = TreeOverlay(tree)
        digest = sum(node_digest(node) for path in tree.nodes if (node := node_of(tree, path)) is not None) & DIGEST_MASK
        self._replay = ZkTree(overlay, {}, tree.last_zxid, digest, owned=[])

    def stop(self) -> None:
        self._overlay = self._replay = None
        self._digests.clear()

    def proposed(self, txns: list[Txn]) -> None:
        if self._replay is None:
            return
        digests = self._digests
        for txn in txns:
            digests[txn.zxid] = self._replayed(txn)
        while len(digests) > self.kept:
            digests.popitem(last=False)

    def _replayed(self, txn: Txn) -> int:
        """The digest once ``txn`` is applied after everything replayed so far."""
        replay, overlay = self._replay, self._overlay
        assert replay is not None and overlay is not None
        zk = zk_from_txn(txn)
        if txn.type == OpCode.CLOSE_SESSION and txn.body[0] is None:  # "all it owns": ZooKeeper's txn lists them
            zk = zk._replace(body=(tuple(self._ephemerals(txn.session_id)),))
        overlay.zxid = txn.zxid
        replay.apply(zk)
        assert replay.digest is not None
        return replay.digest

    # ----------------------------------------------------------------- a learner's check
    def carry(self, zxid: int, digest: tuple[int, int] | None) -> None:
        """The digest the leader sent with txn ``zxid`` (None: none, or of a version this does
        not compute).  The last one sent for a zxid counts: after a TRUNC, a new leader may
        send another txn with the zxid of one this learner dropped."""
        carried = self._carried
        carried.pop(zxid, None)
        if digest is None or digest[0] != DIGEST_VERSION:
            return  # nothing to check it against: no replay for it (a bridging leader on zabby's protocol sends none)
        carried[zxid] = digest[1]
        if len(carried) > self.kept:
            carried.popitem(last=False)

    def forget_carried(self) -> None:
        """Another leader's stream begins: what the last one sent is no longer to be applied."""
        self._carried.clear()

    @property
    def checking(self) -> bool:
        """A learner has digests to check, or has started replaying the txns it applies."""
        return self._replay is not None or bool(self._carried)

    def check(self, tree: DataTree, txn: Txn) -> tuple[int, int] | None:
        """A learner is about to apply ``txn`` to ``tree``: ``(carried, ours)``, the digest its
        leader carried with it and ours once it is applied (None: none was carried).  Call
        ``applied(txn.zxid)`` once the tree applied it."""
        if self._replay is None:
            self.start(tree)
        carried = self._carried.pop(txn.zxid, None)
        ours = self._replayed(txn)
        return None if carried is None else (carried, ours)

    def _ephemerals(self, session_id: int) -> set[str]:
        assert self._overlay is not None
        overlay = self._overlay
        owned = {path for path in overlay.tree.ephemerals.get(session_id, ()) if path in overlay}
        owned.update(path for path in overlay if overlay[path][11] == session_id)
        return owned

    def applied(self, zxid: int) -> None:
        if self._overlay is not None:
            self._overlay.applied(zxid)

    def digest_of(self, zxid: int) -> tuple[int, int] | None:
        """``(version, digest)`` of a txn this leader proposed, as a TxnDigest carries it (None:
        not known here, and the txn goes without one)."""
        digest = self._digests.get(zxid)
        return None if digest is None else (DIGEST_VERSION, digest)
