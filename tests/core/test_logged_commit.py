"""Commit by a follower: where the leader and one follower make a quorum, the leader's LOGGED
lets that follower commit what it has logged itself, before the COMMIT (see ``Peer``)."""

from __future__ import annotations

from tests.core.scenario import Scenario, create_txn
from tests.core.test_peer_interactions import drain, follower, sent, txn, z
from zabby.core.messages import Ack, Commit, Logged, Proposal
from zabby.core.types import ServerState


def test_a_follower_commits_what_both_logs_hold_and_then_ignores_the_commit() -> None:
    peer = follower()
    peer.step(1, Proposal(txns=(txn(1, 1), txn(1, 2), txn(1, 3))))
    assert [m.zxid for m in sent(drain(peer), Ack)] == [z(1, 3)]
    peer.step(1, Logged(zxid=z(1, 2)))
    assert [t.zxid for t in drain(peer).committed] == [z(1, 1), z(1, 2)]
    peer.step(1, Commit(zxid=z(1, 2)))  # the leader's COMMIT, now old news
    assert drain(peer).committed == [] and peer.state == ServerState.FOLLOWING
    peer.step(1, Commit(zxid=z(1, 3)))
    assert [t.zxid for t in drain(peer).committed] == [z(1, 3)]


def test_logged_beyond_the_followers_log_is_a_broken_stream() -> None:
    peer = follower()
    peer.step(1, Proposal(txns=(txn(1, 1),)))
    drain(peer)
    peer.step(1, Logged(zxid=z(1, 2)))  # its proposal never reached us
    rd = drain(peer)
    assert peer.state == ServerState.LOOKING and rd.committed == [] and peer.applied == 0


def test_logged_from_another_server_is_ignored() -> None:
    peer = follower()
    peer.step(1, Proposal(txns=(txn(1, 1),)))
    drain(peer)
    peer.step(3, Logged(zxid=z(1, 1)))
    assert drain(peer).committed == [] and peer.applied == 0


def _write_through_a_follower(voters: int, observers: int = 0) -> tuple[Scenario, int, int]:
    """A cluster that wrote one znode through a follower; the follower's tree got it before
    any COMMIT of it could have reached the follower where LOGGED lets it commit."""
    c = Scenario(voters=voters, observers=observers)
    leader = c.run_until(c.serving_leader)
    c.run_until(c.converged)
    via = min(sid for sid in c.cluster.nodes if sid != leader.sid and sid <= voters)
    c.write(via, "/through-a-follower")
    c.run_until(lambda: c.node(via).tree.get("/through-a-follower") is not None)
    return c, leader.sid, via


def _commits_delivered(c: Scenario, dst: int) -> list[int]:
    """The COMMITs sent to ``dst`` before this tick (one-tick links: delivered by now)."""
    return [m.zxid for tick, _, d, m in c.sent if isinstance(m, Commit) and d == dst and tick < c.cluster.now]


def test_three_voters_a_write_through_a_follower_is_applied_there_before_its_commit() -> None:
    c, leader, via = _write_through_a_follower(3)
    applied = c.node(via).peer.applied
    assert c.messages(Logged, src=leader, dst=via)
    assert all(zxid < applied for zxid in _commits_delivered(c, via))
    c.run_until(c.converged)


def test_no_logged_where_the_leader_and_one_follower_are_no_quorum_nor_to_an_observer() -> None:
    c, _, via = _write_through_a_follower(5)
    assert not c.messages(Logged)
    assert max(_commits_delivered(c, via)) >= c.node(via).peer.applied  # it waited for the COMMIT
    c, _, _ = _write_through_a_follower(3, observers=1)
    c.run_until(c.converged)
    assert not c.messages(Logged, dst=4)
    assert c.node(4).tree.get("/through-a-follower") is not None


def test_the_leader_says_logged_in_the_ready_that_logs_the_txns_after_their_persist() -> None:
    c = Scenario(voters=3)
    leader = c.run_until(c.serving_leader)
    c.run_until(c.converged)
    peer = leader.peer
    peer.ready()  # whatever the run left
    zxid = peer.next_zxid
    peer.propose([create_txn(zxid >> 32, zxid & 0xFFFFFFFF, "/logged", 1)])
    ready = peer.ready()
    followers = sorted(sid for sid in c.cluster.nodes if sid != leader.sid)
    assert sorted(sid for sid, m in ready.early_messages if isinstance(m, Proposal)) == followers
    # steps 6, not 0: the LOGGED leaves once this Ready's persist holds the txn
    assert sorted((sid, m.zxid) for sid, m in ready.messages if isinstance(m, Logged)) == [(sid, zxid) for sid in followers]
    assert not any(isinstance(m, Logged) for _, m in ready.early_messages)
    assert [t.zxid for t in ready.append] == [zxid] and ready.must_sync
    peer.advance(ready)  # the leader's own log now counts: nothing more to say
    after = peer.ready()
    assert not any(isinstance(m, Logged) for _, m in after.early_messages + after.messages)
