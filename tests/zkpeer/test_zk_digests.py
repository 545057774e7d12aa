"""ZooKeeper's digest of each proposal a zabby leader makes (``zabby.engine.zk_digests``): the
digest ZooKeeper's DigestCalculator gives the tree once the txn is applied, computed while
earlier proposals are still unapplied."""

from __future__ import annotations

import random

import pytest

from zabby.engine.zk_digests import ZkDigests, node_of
from zabby.opcodes import CONTAINER_OWNER, OpCode, ttl_owner
from zabby.tree.datatree import DataTree
from zabby.tree.txns import Txn, make_zxid
from zabby.wire.zk_snapshot import DIGEST_MASK, node_digest
from zabby.wire.zk_txn import DIGEST_VERSION

ACL = ((31, "world", "anyone"),)
SESSION = 0x0300000000000001


def zk_digest(tree: DataTree) -> int:
    """The digest from scratch: what ZooKeeper computes when it loads the tree."""
    return sum(node_digest(node) for path in tree.nodes if (node := node_of(tree, path)) is not None) & DIGEST_MASK


def txns(tree_paths: list[str], rng: random.Random, count: int) -> list[Txn]:
    """Random txns that a leader's prep could make one after another (creates of every owner,
    deletes of leaves, setData, setACL, multis that commit and fail, sessions)."""
    made: list[Txn] = []
    live = {path: 0 for path in tree_paths}  # path -> its children's count
    cversions = {path: 0 for path in tree_paths}
    versions: dict[str, int] = {path: 0 for path in tree_paths}
    ephemerals: set[str] = set()
    zxid = 0

    def nxt() -> int:
        nonlocal zxid
        zxid += 1
        return make_zxid(1, zxid)

    def create(path: str, owner: int) -> tuple[int, tuple[object, ...]]:
        parent = path.rsplit("/", 1)[0] or "/"
        cversions[parent] += 1
        live[parent] += 1
        live[path] = cversions[path] = versions[path] = 0
        if owner == SESSION:
            ephemerals.add(path)
        return OpCode.CREATE, (path, rng.choice([b"", None, b"x" * rng.randrange(20)]), ACL, owner, cversions[parent])

    def delete(path: str) -> tuple[int, tuple[object, ...]]:
        live.pop(path)
        live[path.rsplit("/", 1)[0] or "/"] -= 1
        ephemerals.discard(path)
        return OpCode.DELETE, (path,)

    made.append(Txn(nxt(), SESSION, 0, 1, OpCode.CREATE_SESSION, (4000, b"p" * 16)))
    for n in range(count):
        roll = rng.random()
        persistent = [p for p in live if p not in ephemerals and p.startswith("/t")] or ["/"]
        leaves = [p for p, c in live.items() if c == 0 and p.startswith("/t")]
        time_ms = 1000 + n
        if roll < 0.4:
            parent = rng.choice(persistent)
            owner = rng.choice([0, 0, SESSION, CONTAINER_OWNER, ttl_owner(5000)])
            body = create(f"{parent.rstrip('/')}/t{n}", owner)
            made.append(Txn(nxt(), SESSION, n, time_ms, *body))
        elif roll < 0.55 and leaves:
            made.append(Txn(nxt(), SESSION, n, time_ms, *delete(rng.choice(leaves))))
        elif roll < 0.75:
            path = rng.choice(list(live))
            versions[path] = versions.get(path, 0) + 1
            made.append(Txn(nxt(), SESSION, n, time_ms, OpCode.SET_DATA, (path, b"d%d" % n, versions[path])))
        elif roll < 0.8:
            made.append(Txn(nxt(), SESSION, n, time_ms, OpCode.SET_ACL, (rng.choice(list(live)), ((1, "world", "anyone"),), 1)))
        elif roll < 0.9:
            parent = rng.choice(persistent)
            ops = (create(f"{parent.rstrip('/')}/m{n}", 0), (OpCode.SET_DATA, (parent, b"m", versions.setdefault(parent, 0) + 1)))
            versions[parent] += 1
            made.append(Txn(nxt(), SESSION, n, time_ms, OpCode.MULTI, (ops,)))
        else:
            made.append(Txn(nxt(), SESSION, n, time_ms, OpCode.MULTI, (((OpCode.ERROR, (0,)), (OpCode.ERROR, (-101,))),)))
    made.append(Txn(nxt(), SESSION, 0, 9, OpCode.CLOSE_SESSION, (None,)))  # "all it owns"
    return made


@pytest.mark.parametrize("seed", range(5))
def test_each_proposals_digest_is_the_applied_trees(seed: int) -> None:
    rng = random.Random(seed)
    tree = DataTree()
    digests = ZkDigests()
    digests.start(tree)
    batch = txns(list(tree.nodes), rng, 300)
    applied = 0
    for start in range(0, len(batch), 7):  # proposals run ahead of the tree by up to two batches
        digests.proposed(batch[start : start + 7])
        while applied < start - 7:
            txn = batch[applied]
            tree.apply(txn)
            digests.applied(txn.zxid)
            expected = digests.digest_of(txn.zxid)
            assert expected == (DIGEST_VERSION, zk_digest(tree)), f"after {txn}"
            applied += 1
    for txn in batch[applied:]:
        tree.apply(txn)
        assert digests.digest_of(txn.zxid) == (DIGEST_VERSION, zk_digest(tree)), f"after {txn}"
    assert not tree.ephemerals.get(SESSION)


def test_no_digests_before_leading_and_after() -> None:
    digests = ZkDigests()
    txn = Txn(make_zxid(1, 1), 0, 1, 1, OpCode.CREATE, ("/a", b"", ACL, 0, 1))
    digests.proposed([txn])
    assert digests.digest_of(txn.zxid) is None
    digests.start(DataTree())
    digests.proposed([txn])
    assert digests.digest_of(txn.zxid) is not None
    digests.stop()
    assert digests.digest_of(txn.zxid) is None
