"""ZooKeeper's own data-loss bugs, as schedules against zabby's core (issue 45).

Each test names the ZooKeeper issue, replays the schedule that lost data there, and checks
what zabby does instead.  The Ready contract (zabby/core/ready.py) is what the shell carries
out, in order: a Ready's messages leave only after its appends are on disk (fsynced when
``must_sync``), and its ``current_epoch`` is written only after them.

ZOOKEEPER-4394 (a COMMIT after NEWLEADER for a proposal sent during the sync) is the
transcript tests/core/testdata/follower_commit_after_newleader.txt.

Each was checked against a deliberately broken core (zabby/core/peer.py, then restored):
* the DIFF logged without ``must_sync`` and NEWLEADER acked without it: the first test fails;
* the current epoch written at LEADERINFO, before the DIFF (ZOOKEEPER-4643): all four fail;
* a learner's DIFF left out of its window of recent txns (ZOOKEEPER-4925's hole): the 4925
  test fails (the staler server never syncs: its learner refuses the gap, so nothing is lost
  silently even then).
"""

from __future__ import annotations

from tests.core.scenario import ACL, Scenario
from tests.core.test_peer_interactions import VOTERS, drain, txn, z
from zabby.core.messages import Ack, AckEpoch, Commit, Diff, LeaderInfo, NewLeader, Notification, Proposal
from zabby.core.peer import DurableState, Peer, PeerConfig
from zabby.core.ready import Ready
from zabby.core.types import ServerState
from zabby.opcodes import OpCode


def _learner_in_sync(durable: DurableState, *, leader: int = 1, epoch: int = 2) -> Peer:
    """A follower of ``leader`` that has sent its ACKEPOCH for ``epoch`` (SYNCHRONIZATION)."""
    peer = Peer(PeerConfig(sid=2, voters=VOTERS), durable)
    drain(peer)
    vote = {"leader": leader, "zxid": durable.last_logged + 10, "peer_epoch": epoch, "election_epoch": peer.logical_clock}
    peer.step(leader, Notification(**vote, state="leading"))
    peer.step(3, Notification(**vote, state="following"))
    assert peer.state == ServerState.FOLLOWING and drain(peer).messages
    peer.step(leader, LeaderInfo(epoch=epoch))
    acked = drain(peer)
    assert any(isinstance(m, AckEpoch) for _, m in acked.messages)
    assert acked.current_epoch is None  # the new epoch is current only once NEWLEADER comes
    return peer


def _readies(peer: Peer) -> list[Ready]:
    out = []
    while peer.has_ready():
        ready = peer.ready()
        out.append(ready)
        peer.advance(ready)
    return out


def test_zookeeper_3911_4785_a_diff_is_on_disk_before_newleader_is_acked_and_before_the_epoch() -> None:
    """ZOOKEEPER-3911 / -4785 (and -4643): a follower acked NEWLEADER while the txns of its
    DIFF were not yet on disk (logged asynchronously, or raced by syncWithLeader); the
    leader counted that ack as a quorum's copy, served, and a crash of the quorum lost them.
    -4643: the new current epoch was written before those txns, so a server could win the
    next election on that epoch with a log missing committed txns.

    Here: the follower logs the DIFF's txns in the Ready that acks NEWLEADER, or one before
    it, with ``must_sync``; that Ready's ``current_epoch`` is written after its appends."""
    durable = DurableState(accepted_epoch=1, current_epoch=1, last_logged=z(1, 3), applied=z(1, 3))
    peer = _learner_in_sync(durable)
    diff = tuple(txn(1, counter) for counter in (4, 5, 6))
    for message in (Diff(zxid=z(1, 6)), Proposal(txns=diff), Commit(zxid=z(1, 6)), NewLeader(zxid=z(2, 0))):
        peer.step(1, message)
    readies = _readies(peer)
    acking = [i for i, ready in enumerate(readies) if any(isinstance(m, Ack) and m.zxid == z(2, 0) for _, m in ready.messages)]
    assert len(acking) == 1, readies
    logged_before_ack = [t.zxid for ready in readies[: acking[0] + 1] for t in ready.append]
    assert logged_before_ack == [t.zxid for t in diff]
    assert all(ready.must_sync for ready in readies[: acking[0] + 1] if ready.append)
    epoch_readies = [i for i, ready in enumerate(readies) if ready.current_epoch == 2]
    assert epoch_readies and epoch_readies[0] >= max(i for i, ready in enumerate(readies) if ready.append)
    # nothing of the DIFF is applied before the sync completes: no COMMIT counts before UPTODATE
    assert not [t for ready in readies for t in ready.committed]


def test_zookeeper_3911_the_whole_quorum_crashing_right_after_newleader_loses_nothing() -> None:
    """The crash half of ZOOKEEPER-3911: a stale follower syncs by DIFF, the leader is
    established by its ack, writes commit with that follower as the quorum, and then every
    server crashes at once, losing whatever was not fsynced.  Every write a client was told
    of survives, on every server, once they come back."""
    c = Scenario(voters=3)
    c.run_until(c.converged)
    leader = c.run_until(c.serving_leader).sid
    stale = max(sid for sid in c.cluster.nodes if sid != leader)
    c.down(stale)
    for index in range(15):
        c.write(leader, f"/before-{index}")  # committed by the leader and the other follower
    c.run_until(lambda: c.node(leader).tree.get("/before-14") is not None)
    other = next(sid for sid in c.cluster.nodes if sid not in (leader, stale))
    c.restart(stale)
    c.run_until(lambda: c.node(stale).serving and c.node(stale).tree.get("/before-14") is not None)
    c.down(other)  # from here the stale follower and the leader are the quorum
    answered: list[str] = []
    for index in range(10):
        path = f"/after-{index}"
        answers = c.call(leader, 0, *_create(path))
        c.run_until(lambda: answers)  # noqa: B023 -- this iteration's
        answered.append(path)
    for sid in (leader, stale):  # the quorum crashes at once; unsynced tails are lost
        c.down(sid)
    for sid in c.cluster.nodes:
        c.restart(sid)
    c.run_until(c.converged, ticks_max=4000)
    for node in c.cluster.nodes.values():
        missing = [p for p in [f"/before-{i}" for i in range(15)] + answered if node.tree.get(p) is None]
        assert not missing, f"server {node.sid} lost {missing}"


def test_zookeeper_4925_a_learner_that_synced_by_diff_leads_with_a_window_without_holes() -> None:
    """ZOOKEEPER-4925 (3.9.3): a stale follower committed its DIFF's txns without adding them
    to its in-memory committed log, so once it led, the DIFF it sent a staler server skipped
    them, and that server lost them.  Here, on five voters: A misses writes W1 and gets them
    by DIFF, then follows W2 live; A leads (the servers that hold W1 besides it are down or
    lose the election) and syncs B, staler still, from its window.  B must end with W1."""
    c = Scenario(voters=5, commit_log_count=1000)
    c.run_until(c.converged)
    leader = c.run_until(c.serving_leader).sid
    b, c_sid, d, a = sorted(sid for sid in c.cluster.nodes if sid != leader)  # a: the highest id of the four
    for index in range(3):
        c.write(leader, f"/w0-{index}")  # on every server: b's last zxid is inside a's window
    c.run_until(c.converged)
    c.down(b)
    c.down(a)
    for index in range(6):
        c.write(leader, f"/w1-{index}")  # committed by the leader, c and d
    c.run_until(lambda: c.node(d).tree.get("/w1-5") is not None)
    c.restart(a)  # synced by DIFF: W1 reaches it in the sync
    c.run_until(lambda: c.node(a).serving and c.node(a).tree.get("/w1-5") is not None)
    for index in range(4):
        c.write(leader, f"/w2-{index}")
    c.run_until(lambda: all(c.node(sid).tree.get("/w2-3") is not None for sid in (a, c_sid)))
    for sid in (leader, c_sid, d):
        c.down(sid)
    for sid in (b, c_sid):  # a and c hold the same txns; a wins on its id
        c.restart(sid)
    c.run_until(lambda: c.serving_leader() is not None, ticks_max=4000)
    assert c.serving_leader().sid == a
    c.run_until(lambda: c.node(b).serving, ticks_max=4000)
    for sid in (leader, d):
        c.restart(sid)
    c.run_until(c.converged, ticks_max=4000)
    paths = [f"/w0-{i}" for i in range(3)] + [f"/w1-{i}" for i in range(6)] + [f"/w2-{i}" for i in range(4)]
    for node in c.cluster.nodes.values():
        missing = [path for path in paths if node.tree.get(path) is None]
        assert not missing, f"server {node.sid} lost {missing}"
    assert len({node.tree.content_hash() for node in c.cluster.nodes.values()}) == 1


def test_a_follower_shut_down_mid_sync_keeps_log_and_tree_together() -> None:
    """ZOOKEEPER-4712: a follower shut down in the middle of a sync wrote its log and its
    tree apart (the tree ahead of the log, or the reverse), and served the difference after
    restarting.  Here a follower is crashed at every tick of its sync in turn; each time it
    restarts from its disk alone, and the checker compares every apply's history with the
    other servers'."""
    for crash_after in range(1, 12):
        c = Scenario(voters=3, commit_log_count=3)
        c.run_until(c.converged)
        leader = c.run_until(c.serving_leader).sid
        follower = max(sid for sid in c.cluster.nodes if sid != leader)
        c.down(follower)
        for index in range(8):  # past the DIFF window: a SNAP or a DIFF, depending on the window
            c.write(leader, f"/s{index}")
        c.run_until(lambda: c.node(leader).tree.get("/s7") is not None)  # noqa: B023
        c.restart(follower)
        c.run(crash_after)
        c.down(follower)
        c.restart(follower)
        c.run_until(c.converged, ticks_max=4000)
        node = c.node(follower)
        assert all(node.tree.get(f"/s{i}") is not None for i in range(8)), crash_after


def _create(path: str) -> tuple[object, ...]:
    return (OpCode.CREATE, path, b"x", ACL, 0, None)


def test_zookeeper_2623_a_check_outside_a_multi_is_no_txn() -> None:
    """ZOOKEEPER-2623: a check sent alone became a txn of its own that ZooKeeper's log could
    not read back (a corrupt database on restart).  A client cannot send one to zabby (the
    session answers UNIMPLEMENTED); a forwarded one reaches the leader's preparer, which
    answers it with an ERROR txn, and every server restarts from its log."""
    c = Scenario(voters=3)
    c.run_until(c.converged)
    leader = c.run_until(c.serving_leader).sid
    answers = c.call(leader, 0, OpCode.CHECK, "/", -1)
    c.run_until(lambda: answers)
    assert answers[0][0].type == OpCode.ERROR
    for sid in c.cluster.nodes:
        c.down(sid)
    for sid in c.cluster.nodes:
        c.restart(sid)
    c.run_until(c.converged, ticks_max=4000)
