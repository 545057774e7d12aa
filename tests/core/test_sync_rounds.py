"""A leader answers ``sync`` only after a quorum confirmed, in a round started after the sync
arrived, that it still leads (etcd's ReadIndex; ZOOKEEPER-1675).  The cluster is brought up by
the simulator, then the leader's core is driven by hand."""

from __future__ import annotations

from tests.core.scenario import Scenario
from zabby.core.messages import Ping, Sync
from zabby.core.peer import Peer


def established(voters: int = 3) -> tuple[Peer, list[int]]:
    c = Scenario(voters=voters)
    leader = c.run_until(c.serving_leader)
    c.run_until(c.converged)
    c.run(5)
    return leader.peer, [sid for sid in c.cluster.nodes if sid != leader.sid]


def rounds_sent(peer: Peer) -> list[tuple[int, int]]:
    return [(sid, m.round) for sid, m in peer.ready().messages if isinstance(m, Ping) and m.round]


def test_a_sync_is_answered_once_a_quorum_echoes_a_round_started_after_it() -> None:
    peer, followers = established()
    round_before = peer.leader.round  # type: ignore[union-attr]
    peer.client_sync(Sync(session_id=7, cxid=1))
    ready = peer.ready()
    pings = [(sid, m.round) for sid, m in ready.messages if isinstance(m, Ping)]
    assert sorted(pings) == [(sid, round_before + 1) for sid in sorted(followers)]
    assert not ready.sync_replies
    peer.step(followers[0], Ping(round=round_before))  # an echo of an older round proves nothing
    assert not peer.ready().sync_replies
    peer.step(followers[0], Ping(round=round_before + 1))  # with the leader: 2 of 3
    assert peer.ready().sync_replies == [Sync(session_id=7, cxid=1)]


def test_syncs_of_one_batch_share_one_round() -> None:
    peer, followers = established()
    for cxid in (1, 2, 3):
        peer.client_sync(Sync(session_id=7, cxid=cxid))
    sent = rounds_sent(peer)
    assert len(sent) == len(followers) and len({r for _, r in sent}) == 1
    peer.step(followers[1], Ping(round=sent[0][1]))
    assert [s.cxid for s in peer.ready().sync_replies] == [1, 2, 3]


def test_a_sync_after_a_round_began_waits_for_the_next_one() -> None:
    peer, followers = established()
    peer.client_sync(Sync(session_id=7, cxid=1))
    [(_, first), _] = rounds_sent(peer)
    peer.client_sync(Sync(session_id=7, cxid=2))  # arrives while round `first` is in flight
    [(_, second), _] = rounds_sent(peer)
    assert second == first + 1
    peer.step(followers[0], Ping(round=first))
    assert [s.cxid for s in peer.ready().sync_replies] == [1]
    peer.step(followers[0], Ping(round=second))
    assert [s.cxid for s in peer.ready().sync_replies] == [2]


def test_a_standalone_leader_confirms_alone() -> None:
    peer, _ = established(voters=1)
    peer.client_sync(Sync(session_id=7, cxid=1))
    assert peer.ready().sync_replies == [Sync(session_id=7, cxid=1)]
