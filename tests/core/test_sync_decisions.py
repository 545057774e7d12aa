"""How a new leader brings each learner up to date (Zab phase 2; ZooKeeper's
LearnerHandler.syncFollower, as the seed zookeeper-data-sync walks through it).

First ``choose_sync`` alone, one test per case of the seed (empty DIFF, DIFF, TRUNC+DIFF,
TRUNC, SNAP); then whole servers driven through discovery → sync → broadcast, including
the seed's truncA story: leader a logged truncA, crashed before proposing it; b led and
committed more; a rejoins and must TRUNC then DIFF, its tree reloaded.
"""

from __future__ import annotations

from tests.core.scenario import Scenario, create_txn, creates
from zabby.core.history import History
from zabby.core.messages import AckEpoch, Diff, Snap, Trunc
from zabby.core.sync import choose_sync
from zabby.core.types import SyncMode
from zabby.tree.datatree import DataTree
from zabby.tree.txns import Txn, make_zxid


def z(epoch: int, counter: int) -> int:
    return make_zxid(epoch, counter)


def window(*zxids: int, count_max: int = 500) -> History:
    history = History(count_max)
    history.extend(Txn(zxid, 0, 0, 0, 1, ()) for zxid in zxids)
    return history


def zxids(txns: tuple[Txn, ...]) -> list[int]:
    return [t.zxid for t in txns]


# --------------------------------------------------------------------- choose_sync
def test_empty_diff_when_the_learner_is_where_the_leader_is() -> None:
    plan = choose_sync(z(1, 3), z(1, 3), window(z(1, 1), z(1, 2), z(1, 3)))
    assert (plan.mode, plan.txns) == (SyncMode.DIFF, ())


def test_empty_diff_with_no_window_but_in_sync() -> None:
    # ZooKeeper: committedLog empty (fresh snapshot) but peerLastZxid == lastProcessedZxid
    plan = choose_sync(z(2, 7), z(2, 7), window())
    assert (plan.mode, plan.txns) == (SyncMode.DIFF, ())


def test_diff_sends_the_txns_after_the_learner() -> None:
    plan = choose_sync(z(1, 3), z(1, 5), window(*(z(1, i) for i in range(1, 6))))
    assert plan.mode == SyncMode.DIFF
    assert zxids(plan.txns) == [z(1, 4), z(1, 5)]


def test_diff_from_the_window_start() -> None:
    plan = choose_sync(z(1, 3), z(1, 5), window(z(1, 3), z(1, 4), z(1, 5)))
    assert (plan.mode, zxids(plan.txns)) == (SyncMode.DIFF, [z(1, 4), z(1, 5)])


def test_trunc_diff_for_the_truncA_case() -> None:
    """a logged truncA (1,5) and crashed before proposing it; b led epoch 2 and committed more."""
    leader = window(z(1, 1), z(1, 2), z(1, 3), z(1, 4), z(2, 1), z(2, 2), z(2, 3))
    plan = choose_sync(z(1, 5), z(2, 3), leader)
    assert plan.mode == SyncMode.TRUNC_DIFF
    assert plan.trunc_zxid == z(1, 4)  # prevProposalZxid: the last txn both hold
    assert zxids(plan.txns) == [z(2, 1), z(2, 2), z(2, 3)]


def test_trunc_diff_across_a_dead_epoch() -> None:
    # the learner holds proposals of an epoch whose leader never committed them
    plan = choose_sync(z(2, 2), z(3, 1), window(z(1, 1), z(1, 2), z(3, 1)))
    assert (plan.mode, plan.trunc_zxid, zxids(plan.txns)) == (SyncMode.TRUNC_DIFF, z(1, 2), [z(3, 1)])


def test_trunc_when_the_learner_is_past_the_window() -> None:
    plan = choose_sync(z(1, 7), z(1, 5), window(z(1, 3), z(1, 4), z(1, 5)))
    assert (plan.mode, plan.trunc_zxid, plan.txns) == (SyncMode.TRUNC, z(1, 5), ())


def test_trunc_with_no_window() -> None:
    plan = choose_sync(z(1, 7), z(1, 5), window())
    assert (plan.mode, plan.trunc_zxid) == (SyncMode.TRUNC, z(1, 5))


def test_snap_below_the_window() -> None:
    plan = choose_sync(z(1, 2), z(1, 12), window(z(1, 10), z(1, 11), z(1, 12)))
    assert (plan.mode, plan.snap_zxid) == (SyncMode.SNAP, z(1, 12))


def test_snap_for_a_new_server() -> None:
    # the seed's "add a node to the ensemble" case: peerLastZxid 0 < minCommittedLog
    plan = choose_sync(0, z(1, 3), window(z(1, 1), z(1, 2), z(1, 3)))
    assert plan.mode == SyncMode.SNAP


def test_snap_with_no_window_and_a_learner_behind() -> None:
    assert choose_sync(z(1, 1), z(1, 5), window()).mode == SyncMode.SNAP


def test_forced_snap() -> None:
    assert choose_sync(z(1, 5), z(1, 5), window(z(1, 5)), force_snap=True).mode == SyncMode.SNAP


# --------------------------------------------------------------------- whole servers
def _establish(c: Scenario) -> int:
    leader = c.run_until(c.serving_leader)
    c.run_until(c.all_serving)
    return int(leader.sid)


def _lead_without_1(c: Scenario, common: list[Txn]) -> int:
    """Servers 2 and 3, holding ``common``, elect a leader of epoch 2 while server 1 is down."""
    for sid in (2, 3):
        c.preload(sid, accepted_epoch=1, txns=common)
    c.down(1)
    c.restart(2)
    c.restart(3)
    return _establish(c)


def test_diff_brings_a_restarted_follower_up_to_date() -> None:
    c = Scenario(voters=3)
    leader = _establish(c)
    follower = next(sid for sid in (1, 2, 3) if sid != leader)
    c.write(leader, "/first")  # so the follower's last zxid is inside the window
    c.run_until(c.converged)
    c.down(follower)
    for i in range(3):
        c.write(leader, f"/d{i}")
    c.run_until(lambda: c.node(leader).tree_zxid == c.node(leader).peer.last_logged and c.node(leader).tree_zxid)
    c.restart(follower)
    c.run_until(c.converged)
    diffs = c.messages(Diff, dst=follower)
    assert diffs and not c.messages(Snap, dst=follower) and not c.messages(Trunc, dst=follower)
    assert c.node(follower).tree.content_hash() == c.node(leader).tree.content_hash()


def test_empty_diff_for_a_follower_already_in_sync() -> None:
    c = Scenario(voters=3)
    txns = creates(1, 3)
    for sid in (1, 2, 3):
        c.preload(sid, accepted_epoch=1, txns=txns)
        c.restart(sid)
    _establish(c)
    diffs = c.messages(Diff)
    assert len(diffs) == 2 and all(d.zxid == txns[-1].zxid for d in diffs)
    assert all(c.node(sid).tree_zxid == txns[-1].zxid for sid in (1, 2, 3))


def test_truncA_trunc_then_diff_and_tree_reloaded() -> None:
    """The seed's TRUNC+DIFF story, server by server."""
    c = Scenario(voters=3)
    common = creates(1, 4)
    trunc_a = create_txn(1, 5, "/truncA", 5)
    c.preload(1, accepted_epoch=1, txns=[*common, trunc_a])  # a: logged truncA, never proposed it
    b = _lead_without_1(c, common)  # b leads epoch 2 ...
    for i in range(3):
        c.write(b, f"/b{i}")  # ... and commits more
    c.run_until(lambda: c.node(b).tree_zxid == make_zxid(2, 3))
    c.node(1).restart_at = 0
    c.restart(1)  # a rejoins; recovery applied truncA to its tree
    assert c.node(1).tree.get("/truncA") is not None
    c.run_until(c.converged)
    assert [t.zxid for t in c.messages(Trunc, dst=1)] == [z(1, 4)]
    assert c.cluster.stats["reloads"] == 1
    a = c.node(1)
    assert a.tree.get("/truncA") is None and a.tree.get("/b2") is not None
    assert [t.zxid for t in a.storage.logged_after(0)] == [t.zxid for t in common] + [z(2, 1), z(2, 2), z(2, 3)]
    assert a.tree.content_hash() == c.node(b).tree.content_hash()


def test_trunc_only_when_the_learner_is_ahead_of_everything() -> None:
    c = Scenario(voters=3)
    common = creates(1, 4)
    c.preload(1, accepted_epoch=1, txns=[*common, create_txn(1, 5, "/truncA", 5)])
    b = _lead_without_1(c, common)  # epoch 2, no new txn: the leader's log ends at (1, 4)
    c.restart(1)
    c.run_until(c.converged)
    assert [t.zxid for t in c.messages(Trunc, dst=1)] == [z(1, 4)]
    assert c.node(1).storage.log.last_zxid == z(1, 4)
    assert c.node(1).tree.content_hash() == c.node(b).tree.content_hash()


def test_trunc_below_a_dirty_snapshot_becomes_a_snap() -> None:
    """ZOOKEEPER-1549: server 1 installed a SNAP holding an unestablished leader's tail
    ((1, 5), (1, 6), never committed).  Epoch 2 is led without it; the TRUNC to (1, 4) it
    gets would cut only the log (the sim disk refuses that outright), so it must ask for
    a SNAP instead and end up with the leader's tree."""
    c = Scenario(voters=3)
    common = creates(1, 4)
    ghosts = [create_txn(1, 5, "/ghost5", 5), create_txn(1, 6, "/ghost6", 6)]
    tree = DataTree()
    for txn in (*common, *ghosts):
        tree.apply(txn)
    c.preload(1, accepted_epoch=1, txns=[], snapshot=(z(1, 6), tuple(tree.records())))
    b = _lead_without_1(c, common)
    c.write(b, "/b0")
    c.run_until(lambda: c.node(b).tree_zxid == z(2, 1))
    c.node(1).restart_at = 0
    c.restart(1)
    c.run_until(c.converged)
    assert [t.zxid for t in c.messages(Trunc, dst=1)] == [z(1, 4)]  # refused ...
    assert any(m.snapshot_wanted for m in c.messages(AckEpoch, src=1))  # ... and a SNAP asked for
    assert c.messages(Snap, dst=1)
    a = c.node(1)
    assert a.tree.get("/ghost5") is None and a.tree.get("/b0") is not None
    assert a.tree.content_hash() == c.node(b).tree.content_hash()


def test_snap_when_the_learner_is_below_the_window() -> None:
    c = Scenario(voters=3, commit_log_count=2)
    leader = _establish(c)
    follower = next(sid for sid in (1, 2, 3) if sid != leader)
    c.down(follower)
    for i in range(6):
        c.write(leader, f"/s{i}")
    c.run_until(lambda: c.node(leader).tree_zxid == c.node(leader).peer.last_logged and c.node(leader).tree_zxid)
    c.restart(follower)
    c.run_until(c.converged)
    assert c.messages(Snap, dst=follower) and c.cluster.stats["snaps"] == 1
    assert c.node(follower).tree.content_hash() == c.node(leader).tree.content_hash()
    assert c.node(follower).storage.datadir.newest_snapshot_zxid() == c.node(leader).tree_zxid


def test_snap_of_a_leader_with_more_pending_txns_than_its_window() -> None:
    """A leader elected with logged-but-uncommitted txns sends its tree plus *all* of them
    (before the fix it sent only the window's, and the learner resynced forever)."""
    c = Scenario(voters=3, commit_log_count=2)
    base = creates(1, 2)
    tail = creates(1, 4, first=3, cversion=3)
    c.preload(2, accepted_epoch=1, txns=base + tail)
    c.preload(3, accepted_epoch=1, txns=base + tail)
    c.preload(1, accepted_epoch=1, txns=[])
    for sid in (1, 2, 3):
        c.restart(sid)
    c.down(2)
    c.run_until(c.converged)
    assert c.node(1).tree.content_hash() == c.node(3).tree.content_hash()
    assert c.node(1).tree_zxid == z(1, 6)
