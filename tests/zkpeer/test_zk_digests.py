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


# ----------------------------------------------------------------------------- a learner's check
def learn(tree: DataTree, digests: ZkDigests, txn: Txn) -> tuple[int, int] | None:
    """What a learner's engine does with each txn it applies (``Engine._apply``): the
    leader's digest and ours where they differ, None where they agree or none was carried."""
    carried_and_ours = digests.check(tree, txn)
    tree.apply(txn)
    digests.applied(txn.zxid)
    return carried_and_ours if carried_and_ours is not None and carried_and_ours[0] != carried_and_ours[1] else None


@pytest.mark.parametrize("seed", range(3))
def test_a_learner_finds_its_leaders_digests_where_the_trees_agree(seed: int) -> None:
    batch = txns(["/"], random.Random(seed), 300)
    leader_tree, leader = DataTree(), ZkDigests()
    leader.start(leader_tree)
    leader.proposed(batch)
    learner_tree, learner = DataTree(), ZkDigests()
    for txn in batch:
        learner.carry(txn.zxid, leader.digest_of(txn.zxid))
    assert learner.checking
    checked = []
    for txn in batch:
        checked.append(learner.check(learner_tree, txn))
        learner_tree.apply(txn)
        learner.applied(txn.zxid)
    assert checked == [(leader.digest_of(txn.zxid)[1],) * 2 for txn in batch]  # type: ignore[index]
    assert not learner._carried  # each checked once, then forgotten


def test_a_learner_whose_tree_differs_finds_the_mismatch_at_the_txn_that_shows_it() -> None:
    batch = txns(["/"], random.Random(7), 100)
    leader_tree, leader = DataTree(), ZkDigests()
    leader.start(leader_tree)
    leader.proposed(batch)
    learner_tree, learner = DataTree(), ZkDigests()
    learner_tree.apply(Txn(make_zxid(0, 5), 0, 0, 1, OpCode.CREATE, ("/stray", b"", ACL, 0, 1)))  # a znode the leader has not
    for txn in batch:
        learner.carry(txn.zxid, leader.digest_of(txn.zxid))
    first = learn(learner_tree, learner, batch[0])
    assert first is not None and first[0] == leader.digest_of(batch[0].zxid)[1]  # type: ignore[index]
    assert first[1] == zk_digest(learner_tree)  # ours: the tree as it is once applied


def test_a_learner_checks_only_what_carried_a_digest_of_its_version_and_the_last_carried_counts() -> None:
    learner_tree, learner = DataTree(), ZkDigests()
    assert not learner.checking  # nothing carried: no replay, no cost
    one = Txn(make_zxid(1, 1), 0, 1, 1, OpCode.CREATE, ("/a", b"", ACL, 0, 1))
    learner.carry(one.zxid, (DIGEST_VERSION + 1, 12345))  # a version this does not compute
    learner.carry(one.zxid, (DIGEST_VERSION, 12345))  # then a wrong one, in this version
    learner.carry(one.zxid, None)  # and last none (a TRUNC, then the txn again without a digest)
    assert learn(learner_tree, learner, one) is None
    two = Txn(make_zxid(1, 2), 0, 2, 1, OpCode.SET_DATA, ("/a", b"x", 1))
    learner.carry(two.zxid, (DIGEST_VERSION, 12345))
    assert learn(learner_tree, learner, two) == (12345, zk_digest(learner_tree))
    learner.carry(make_zxid(1, 3), (DIGEST_VERSION, 1))
    learner.forget_carried()  # another leader's stream
    three = Txn(make_zxid(1, 3), 0, 3, 1, OpCode.DELETE, ("/a",))
    assert learn(learner_tree, learner, three) is None


def test_the_carried_digests_are_bounded() -> None:
    learner = ZkDigests(kept=10)
    for counter in range(1, 100):
        learner.carry(make_zxid(1, counter), (DIGEST_VERSION, counter))
    assert len(learner._carried) == 10 and min(learner._carried) == make_zxid(1, 90)
