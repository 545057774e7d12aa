"""Peer-level interactions: one Peer stepped by hand, or a few through the scenario shell.

Each test names the Zab phase it exercises.  The broken-stream tests check the rule of
DESIGN.md §3: where ZooKeeper exits (a COMMIT for a txn the learner does not hold, exit
12), zabby drops the leader and looks again, and never applies out of order.
"""

from __future__ import annotations

from tests.core.scenario import Scenario
from zabby.core.messages import (
    Ack,
    AckEpoch,
    Commit,
    Diff,
    FollowerInfo,
    Inform,
    LeaderInfo,
    NewLeader,
    Notification,
    Proposal,
    Snap,
    Trunc,
    UpToDate,
)  # fmt: skip
from zabby.core.peer import DurableState, Peer, PeerConfig, static_membership
from zabby.core.ready import Ready
from zabby.core.types import ServerState, ZabPhase
from zabby.membership import Member, Membership
from zabby.tree.txns import Txn, make_zxid

VOTERS = frozenset({1, 2, 3})


def z(epoch: int, counter: int) -> int:
    return make_zxid(epoch, counter)


def txn(epoch: int, counter: int) -> Txn:
    return Txn(z(epoch, counter), 0, counter, 0, 1, ())


def drain(peer: Peer) -> Ready:
    """Everything the peer asked for since the last drain, merged (the shell's side done)."""
    merged = Ready(soft_state=peer.soft_state())
    while peer.has_ready():
        rd = peer.ready()
        merged.soft_state = rd.soft_state
        merged.append += rd.append
        merged.committed += rd.committed
        merged.messages += rd.messages
        merged.drop_links += rd.drop_links
        if rd.truncate_to is not None:
            merged.truncate_to = rd.truncate_to
        if rd.current_epoch is not None:
            merged.current_epoch = rd.current_epoch
        peer.advance(rd)
    return merged


def sent(rd: Ready, kind: type, to: int | None = None) -> list:
    return [m for sid, m in rd.messages if isinstance(m, kind) and to in (None, sid)]


def follower(durable: DurableState | None = None, *, sid: int = 2, leader: int = 1, epoch: int = 1) -> Peer:
    """A follower of ``leader`` in BROADCAST, synced by an empty DIFF."""
    durable = durable or DurableState()
    peer = Peer(PeerConfig(sid=sid, voters=VOTERS), durable)
    drain(peer)
    clock = peer.logical_clock
    vote = {"leader": leader, "zxid": durable.last_logged, "peer_epoch": epoch, "election_epoch": clock}
    peer.step(leader, Notification(**vote, state="leading"))
    peer.step(3 if sid != 3 else 2, Notification(**vote, state="following"))
    assert peer.state == ServerState.FOLLOWING
    assert sent(drain(peer), FollowerInfo, to=leader)
    peer.step(leader, LeaderInfo(epoch=epoch))
    assert sent(drain(peer), AckEpoch, to=leader)
    peer.step(leader, Diff(zxid=durable.last_logged))
    peer.step(leader, NewLeader(zxid=z(epoch, 0)))
    assert sent(drain(peer), Ack, to=leader)
    peer.step(leader, UpToDate())
    drain(peer)
    assert peer.soft_state().serving
    return peer


# --------------------------------------------------------------------- broadcast: broken streams
def test_commit_for_a_zxid_the_learner_does_not_hold_goes_looking() -> None:
    peer = follower()
    peer.step(1, Proposal(txns=(txn(1, 1),)))
    assert [m.zxid for m in sent(drain(peer), Ack)] == [z(1, 1)]
    peer.step(1, Commit(zxid=z(1, 2)))  # never proposed to us: ZooKeeper exits 12 here
    rd = drain(peer)
    assert peer.state == ServerState.LOOKING and rd.committed == [] and 1 in rd.drop_links
    assert peer.applied == 0


def test_proposal_gap_goes_looking_without_logging() -> None:
    peer = follower()
    peer.step(1, Proposal(txns=(txn(1, 1),)))
    drain(peer)
    peer.step(1, Proposal(txns=(txn(1, 3),)))  # (1, 2) was lost: the stream is broken
    rd = drain(peer)
    assert peer.state == ServerState.LOOKING and rd.append == [] and peer.last_logged == z(1, 1)


def test_duplicated_proposal_goes_looking() -> None:
    peer = follower()
    peer.step(1, Proposal(txns=(txn(1, 1),)))
    drain(peer)
    peer.step(1, Proposal(txns=(txn(1, 1),)))
    assert drain(peer).append == [] and peer.state == ServerState.LOOKING


def test_commits_apply_in_order_and_a_repeated_commit_is_ignored() -> None:
    peer = follower()
    peer.step(1, Proposal(txns=(txn(1, 1), txn(1, 2))))
    drain(peer)
    peer.step(1, Commit(zxid=z(1, 2)))
    assert [t.zxid for t in drain(peer).committed] == [z(1, 1), z(1, 2)]
    peer.step(1, Commit(zxid=z(1, 1)))
    assert drain(peer).committed == [] and peer.state == ServerState.FOLLOWING


def test_second_leaderinfo_goes_looking() -> None:
    """A LEADERINFO the learner did not ask for would start a second sync (sim seed 114)."""
    peer = follower()
    peer.step(1, LeaderInfo(epoch=1))
    assert peer.state == ServerState.LOOKING and not sent(drain(peer), AckEpoch)


def test_second_sync_mode_message_goes_looking() -> None:
    peer = _syncing_learner(DurableState())
    peer.step(1, Diff(zxid=0))
    peer.step(1, Snap(zxid=0))
    assert peer.state == ServerState.LOOKING


def test_snap_never_installed_goes_looking_instead_of_acking_newleader() -> None:
    """Sim seed 463: a reordered stream delivered the snapshot before its SNAP, so the shell
    dropped it; acking NEWLEADER over the old log would claim a history the leader never had."""
    peer = Peer(PeerConfig(sid=2, voters=VOTERS), DurableState(1, 1, z(1, 1), z(1, 1), (txn(1, 1),)))
    drain(peer)
    vote = {"leader": 1, "zxid": z(1, 5), "peer_epoch": 1, "election_epoch": peer.logical_clock}
    peer.step(1, Notification(**vote, state="leading"))
    peer.step(3, Notification(**vote, state="following"))
    peer.step(1, LeaderInfo(epoch=2))
    peer.step(1, Snap(zxid=z(1, 5)))
    drain(peer)
    peer.step(1, NewLeader(zxid=z(2, 0)))  # no snapshot_installed(...) in between
    rd = drain(peer)
    assert peer.state == ServerState.LOOKING and not sent(rd, Ack)


def test_snap_installed_then_newleader_is_acked() -> None:
    peer = Peer(PeerConfig(sid=2, voters=VOTERS), DurableState())
    drain(peer)
    vote = {"leader": 1, "zxid": z(1, 5), "peer_epoch": 1, "election_epoch": peer.logical_clock}
    peer.step(1, Notification(**vote, state="leading"))
    peer.step(3, Notification(**vote, state="following"))
    peer.step(1, LeaderInfo(epoch=2))
    peer.step(1, Snap(zxid=z(1, 5)))
    peer.snapshot_installed(z(1, 5))
    peer.step(1, Proposal(txns=(txn(2, 1),)))
    peer.step(1, NewLeader(zxid=z(2, 0)))
    rd = drain(peer)
    assert [m.zxid for m in sent(rd, Ack)] == [z(2, 0)] and peer.last_logged == z(2, 1)
    peer.step(1, Commit(zxid=z(2, 1)))
    peer.step(1, UpToDate())
    assert [t.zxid for t in drain(peer).committed] == [z(2, 1)] and peer.applied == z(2, 1)


def test_observer_applies_an_inform_of_txns_its_sync_had_logged() -> None:
    """The DIFF carried (1, 1) as a proposal, uncommitted; the INFORM that commits it must
    apply it even though nothing in it is new to the observer's log."""
    peer = Peer(PeerConfig(sid=4, voters=VOTERS, observers=frozenset({4})), DurableState())
    drain(peer)
    vote = {"leader": 1, "zxid": 0, "peer_epoch": 1, "election_epoch": peer.logical_clock}
    peer.step(1, Notification(**vote, state="leading"))
    peer.step(3, Notification(**vote, state="following"))
    assert peer.state == ServerState.OBSERVING
    for message in (LeaderInfo(epoch=1), Diff(zxid=0), Proposal(txns=(txn(1, 1),)), NewLeader(zxid=z(1, 0)), UpToDate()):
        peer.step(1, message)
    assert drain(peer).committed == []
    peer.step(1, Inform(txns=(txn(1, 1),)))
    assert [t.zxid for t in drain(peer).committed] == [z(1, 1)]
    peer.step(1, Inform(txns=(txn(1, 2), txn(1, 3))))
    assert [t.zxid for t in drain(peer).committed] == [z(1, 2), z(1, 3)]


def _syncing_learner(durable: DurableState) -> Peer:
    """Server 2 in SYNCHRONIZATION with leader 1 (epoch 3), its ACKEPOCH sent."""
    peer = Peer(PeerConfig(sid=2, voters=VOTERS), durable)
    drain(peer)
    return _join(peer)


def _join(peer: Peer) -> Peer:
    """A LOOKING ``peer`` learns that 1 leads epoch 3 and gets its LEADERINFO."""
    vote = {"leader": 1, "zxid": z(2, 1), "peer_epoch": 2, "election_epoch": peer.logical_clock}
    peer.step(1, Notification(**vote, state="leading"))
    peer.step(3, Notification(**vote, state="following"))
    peer.step(1, LeaderInfo(epoch=3))
    return peer


def test_proposal_before_the_sync_mode_goes_looking() -> None:
    """A PROPOSAL overtaking its TRUNC would be logged, then cut by the TRUNC, and NEWLEADER
    acked over a log that misses it: the learner must notice the stream is broken."""
    peer = _syncing_learner(DurableState(1, 1, z(1, 5), z(1, 5), (txn(1, 4), txn(1, 5))))
    peer.step(1, Proposal(txns=(txn(2, 1),)))  # overtook Trunc(zxid=(1, 4))
    assert peer.state == ServerState.LOOKING and drain(peer).append == []


def test_an_inform_or_commit_before_the_sync_mode_is_not_logged() -> None:
    """Sim seed 8058 (reconfig soak): the leader, not yet having read the learner's new
    FOLLOWERINFO, sent an INFORM of the new epoch's first txn to its previous link.  Logged
    right after a log that missed the old epoch's last txns, it was applied over a tree
    without them; the learner must take it for a broken stream."""
    peer = _syncing_learner(DurableState(1, 1, z(1, 5), z(1, 5), (txn(1, 4), txn(1, 5))))
    peer.step(1, Inform(txns=(txn(3, 1),)))
    rd = drain(peer)
    assert peer.state == ServerState.LOOKING and rd.append == [] and peer.last_logged == z(1, 5)
    peer = _syncing_learner(DurableState(1, 1, z(1, 5), z(1, 4), (txn(1, 4), txn(1, 5))))
    peer.step(1, Commit(zxid=z(1, 5)))
    assert peer.state == ServerState.LOOKING and drain(peer).committed == [] and peer.applied == z(1, 4)


def test_newleader_without_a_sync_mode_goes_looking() -> None:
    peer = _syncing_learner(DurableState())
    peer.step(1, NewLeader(zxid=z(3, 0)))
    assert peer.state == ServerState.LOOKING and not sent(drain(peer), Ack)


def test_trunc_below_the_newest_snapshot_is_refused_and_the_next_sync_asks_for_a_snap() -> None:
    """ZOOKEEPER-1549: the snapshot at (1, 5) came from a leader that was never established
    and holds (1, 4) and (1, 5), which the real leader truncates.  Cutting the log cannot take
    them out of the snapshot: the learner must not truncate, and must get a SNAP instead."""
    durable = DurableState(1, 1, z(1, 5), z(1, 5), (), snapshot_zxid=z(1, 5))
    peer = _syncing_learner(durable)
    [ack] = sent(drain(peer), AckEpoch, to=1)
    assert not ack.snapshot_wanted
    peer.step(1, Trunc(zxid=z(1, 3)))
    rd = drain(peer)
    assert peer.state == ServerState.LOOKING and 1 in rd.drop_links
    assert rd.truncate_to is None and peer.last_logged == z(1, 5)
    peer = _join(peer)
    [ack] = sent(drain(peer), AckEpoch, to=1)
    assert ack.snapshot_wanted
    peer.step(1, Snap(zxid=z(1, 3)))
    peer.snapshot_installed(z(1, 3))
    assert peer.snapshot_zxid == z(1, 3) and not peer.snapshot_wanted and peer.last_logged == z(1, 3)


def test_trunc_to_the_snapshot_or_above_cuts_the_log() -> None:
    txns = (txn(1, 4), txn(1, 5))
    peer = _syncing_learner(DurableState(1, 1, z(1, 5), z(1, 5), txns, snapshot_zxid=z(1, 3)))
    drain(peer)
    peer.step(1, Trunc(zxid=z(1, 3)))
    rd = drain(peer)
    assert rd.truncate_to == z(1, 3) and peer.last_logged == z(1, 3) and peer.state == ServerState.FOLLOWING


# --------------------------------------------------------------------- the leader's side
def _elected(durable: DurableState, *, commit_log_count: int = 500) -> Peer:
    """Server 3, elected by 1's vote, in discovery with no learner yet."""
    peer = Peer(PeerConfig(sid=3, voters=VOTERS, finalize_wait_ticks=1, commit_log_count=commit_log_count), durable)
    drain(peer)
    peer.step(1, Notification(leader=3, zxid=durable.last_logged, peer_epoch=durable.current_epoch,
                              election_epoch=peer.logical_clock, state="looking"))  # fmt: skip
    for _ in range(3):
        peer.tick()
    assert peer.state == ServerState.LEADING
    return peer


def _leader(durable: DurableState, *, commit_log_count: int = 500) -> Peer:
    """Server 3, elected by 1's vote, in discovery with learner 1."""
    peer = _elected(durable, commit_log_count=commit_log_count)
    peer.step(1, FollowerInfo(accepted_epoch=durable.accepted_epoch, last_zxid=0))
    assert sent(drain(peer), LeaderInfo, to=1)
    return peer


def test_snap_carries_every_pending_txn_even_beyond_the_window() -> None:
    """Sim seed 138: the leader's tree is at (1, 2) and it logged (1, 3)..(1, 6) as a follower;
    its window holds only 2 txns.  The SNAP must be followed by all four, with no gap."""
    txns = tuple(txn(1, i) for i in range(1, 7))
    peer = _leader(DurableState(1, 1, z(1, 6), z(1, 2), txns), commit_log_count=2)
    peer.step(1, AckEpoch(current_epoch=0, last_zxid=0))
    rd = drain(peer)
    assert [m.zxid for m in sent(rd, Snap, to=1)] == [z(1, 2)]
    [proposal] = sent(rd, Proposal, to=1)
    assert [t.zxid for t in proposal.txns] == [z(1, 3), z(1, 4), z(1, 5), z(1, 6)]


def test_second_ackepoch_drops_the_learner() -> None:
    peer = _leader(DurableState(1, 1, z(1, 1), z(1, 1), (txn(1, 1),)))
    peer.step(1, AckEpoch(current_epoch=1, last_zxid=z(1, 1)))
    drain(peer)
    peer.step(1, AckEpoch(current_epoch=1, last_zxid=z(1, 1)))
    rd = drain(peer)
    assert 1 in rd.drop_links and not sent(rd, Diff)


def test_learner_ahead_of_the_elected_leader_makes_it_step_down() -> None:
    peer = _leader(DurableState(1, 1, z(1, 1), z(1, 1), (txn(1, 1),)))
    peer.step(1, AckEpoch(current_epoch=1, last_zxid=z(1, 2)))
    assert peer.state == ServerState.LOOKING


def test_a_learner_synced_after_establishment_gets_the_commit_point_before_uptodate() -> None:
    """Sim seed 47: the establishing COMMIT goes to the learners synced by then; one that
    acks NEWLEADER later must get it too, or it serves (and answers syncs) behind."""
    txns = tuple(txn(1, i) for i in range(1, 4))
    peer = _leader(DurableState(1, 1, z(1, 3), z(1, 3), txns))
    peer.step(2, FollowerInfo(accepted_epoch=1, last_zxid=z(1, 1)))
    for sid in (1, 2):
        peer.step(sid, AckEpoch(current_epoch=1, last_zxid=z(1, 1)))
    drain(peer)
    peer.step(2, Ack(zxid=z(2, 0)))
    rd = drain(peer)
    assert peer.soft_state().serving and [m.zxid for m in sent(rd, Commit, to=2)] == [z(1, 3)]
    assert not sent(rd, UpToDate, to=1)
    peer.step(1, Ack(zxid=z(2, 0)))
    rd = drain(peer)
    assert [type(m).__name__ for sid, m in rd.messages if sid == 1] == ["Commit", "UpToDate"]
    assert sent(rd, Commit, to=1)[0].zxid == z(1, 3)


# --------------------------------------------------------------------- roles
def test_leader_that_loses_its_quorum_steps_down() -> None:
    c = Scenario(voters=3)
    leader = c.run_until(c.serving_leader)
    others = [sid for sid in (1, 2, 3) if sid != leader.sid]
    blocked = {(a, b) for a in (leader.sid,) for b in others} | {(b, leader.sid) for b in others}
    c.cluster.network.partition(c.cluster.now, blocked)
    c.run_until(lambda: c.state(leader.sid) == ServerState.LOOKING, ticks_max=200)
    assert not c.node(leader.sid).serving


def test_observer_gets_inform_and_never_votes() -> None:
    c = Scenario(voters=3, observers=1)
    leader = c.run_until(c.serving_leader)
    c.run_until(c.all_serving)
    assert c.node(4).soft is not None and c.node(4).soft.state == ServerState.OBSERVING
    c.write(leader.sid, "/seen-by-observer")
    c.run_until(c.converged)
    assert c.messages(Inform, dst=4)
    assert not c.messages(Proposal, src=leader.sid, dst=4)
    assert not c.messages(Ack, src=4) or all(m.zxid == z(m.zxid >> 32, 0) for m in c.messages(Ack, src=4))
    assert c.node(4).tree.get("/seen-by-observer") is not None


def test_observer_write_is_forwarded() -> None:
    c = Scenario(voters=3, observers=1)
    c.run_until(c.all_serving)
    c.run_until(lambda: c.node(4).serving)
    c.write(4, "/from-observer")
    c.run_until(lambda: c.node(4).tree.get("/from-observer") is not None)
    c.run_until(c.converged)


def test_joiner_learns_the_established_leader_from_the_replies() -> None:
    c = Scenario(voters=3)
    c.down(3)
    leader = c.run_until(c.serving_leader)
    epoch = leader.soft.epoch
    c.write(leader.sid, "/before-join")
    c.run_until(lambda: leader.tree_zxid > 0)
    c.restart(3)
    c.run_until(lambda: c.node(3).serving)
    assert c.node(3).peer.soft_state().leader == leader.sid
    assert c.node(3).soft.epoch == epoch  # joined the running epoch: no new election
    assert c.node(leader.sid).soft.epoch == epoch and c.node(leader.sid).is_leader
    c.run_until(c.converged)
    assert c.node(3).tree.get("/before-join") is not None


def test_a_lone_voter_leads_at_once() -> None:
    peer = Peer(PeerConfig(sid=1, voters=frozenset({1})), DurableState())
    drain(peer)
    assert peer.state == ServerState.LEADING and peer.soft_state().serving
    peer.propose([txn(1, 1)])
    assert [t.zxid for t in drain(peer).committed] == [z(1, 1)]
    assert peer.soft_state().phase == ZabPhase.BROADCAST


def test_a_learner_that_wants_a_snapshot_gets_one_even_inside_the_window() -> None:
    peer = _leader(DurableState(1, 1, z(1, 3), z(1, 3), tuple(txn(1, i) for i in range(1, 4))))
    peer.step(1, AckEpoch(current_epoch=1, last_zxid=z(1, 1), snapshot_wanted=True))
    rd = drain(peer)
    assert [m.zxid for m in sent(rd, Snap, to=1)] == [z(1, 3)] and not sent(rd, Diff, to=1)


def test_the_leader_takes_the_new_epoch_only_once_a_quorum_acked_it() -> None:
    """Sim seeds 5457 and 6199: a leader that persisted the new current epoch on FOLLOWERINFO
    alone, then met a follower ahead of it, would win the next election on that epoch with
    its stale log and truncate committed txns (ZooKeeper waits for the ACKEPOCHs)."""
    peer = _elected(DurableState(1, 1, z(1, 4), z(1, 4), (txn(1, 4),)))
    peer.step(1, FollowerInfo(accepted_epoch=1, last_zxid=0))
    assert peer.current_epoch == 1 and drain(peer).current_epoch is None  # epoch 2 picked, not taken
    peer.step(1, AckEpoch(current_epoch=1, last_zxid=z(1, 5)))  # ahead: step down
    assert peer.state == ServerState.LOOKING and peer.current_epoch == 1

    peer = _leader(DurableState(1, 1, z(1, 4), z(1, 4), (txn(1, 4),)))
    drain(peer)
    peer.step(1, AckEpoch(current_epoch=1, last_zxid=z(1, 4)))
    assert peer.current_epoch == 2 and drain(peer).current_epoch == 2


def test_a_joiner_that_the_initial_servers_do_not_list_votes_for_them() -> None:
    """Sim seeds 7986 and 8607: a joiner's zoo.cfg lists the initial servers and itself, at
    version 0 as theirs.  With the newest log and the highest sid it voted for itself, which
    the initial servers cannot elect, while they needed its vote for a quorum of the proposed
    membership that counts it: no leader, ever.  Their copy of version 0 leaves it out, so it
    is no candidate and votes for one of them."""
    joiner = Peer(PeerConfig(sid=4, voters=frozenset({1, 2, 3, 4})), DurableState(1, 1, z(1, 5), z(1, 5), (txn(1, 5),)))
    assert {m.leader for m in sent(drain(joiner), Notification)} == {4}
    initial = static_membership(PeerConfig(sid=3, voters=VOTERS)).text()
    joiner.step(3, Notification(leader=3, zxid=z(1, 5), peer_epoch=1, election_epoch=1, state="looking", config=initial, logged=z(1, 5)))
    votes = sent(drain(joiner), Notification)
    assert votes and {m.leader for m in votes} == {-1}  # a new round, in which it proposes nobody
    joiner.step(3, Notification(leader=3, zxid=z(1, 5), peer_epoch=1, election_epoch=2, state="looking", config=initial, logged=z(1, 5)))
    assert {m.leader for m in sent(drain(joiner), Notification)} == {3}
    joiner.step(2, Notification(leader=3, zxid=z(1, 5), peer_epoch=1, election_epoch=2, state="looking", config=initial, logged=z(1, 5)))
    assert joiner.election is not None and joiner.election.proposal.leader == 3  # no new round for each such vote


def test_no_newleader_goes_out_before_a_quorum_acked_the_epoch() -> None:
    """Sim seed 30817 (with reconfigs): a learner that got NEWLEADER on the first ACKEPOCH took
    a current epoch the leader never reached (its quorum did not come), and was then "ahead"
    of the only server the others could elect: no leader, ever.  ZooKeeper's learner handlers
    wait for the quorum of ACKEPOCHs (waitForEpochAck) before they sync anyone."""
    durable = DurableState(1, 1, z(1, 4), z(1, 4), (txn(1, 4),))
    peer = Peer(PeerConfig(sid=3, voters=frozenset({1, 2, 3, 4, 5}), finalize_wait_ticks=1), durable)
    drain(peer)
    for voter in (1, 2):
        peer.step(voter, Notification(leader=3, zxid=z(1, 4), peer_epoch=1, election_epoch=peer.logical_clock, state="looking"))
    for _ in range(3):
        peer.tick()
    assert peer.state == ServerState.LEADING
    for learner in (1, 2):
        peer.step(learner, FollowerInfo(accepted_epoch=1, last_zxid=z(1, 4)))
    assert sent(drain(peer), LeaderInfo, to=2)
    peer.step(1, AckEpoch(current_epoch=1, last_zxid=z(1, 4)))
    waiting = drain(peer)
    assert not sent(waiting, NewLeader) and not sent(waiting, Diff) and waiting.current_epoch is None
    peer.step(2, AckEpoch(current_epoch=1, last_zxid=z(1, 4)))  # the quorum: both are synced now
    synced = drain(peer)
    assert synced.current_epoch == 2 and [m.zxid for m in sent(synced, NewLeader)] == [z(2, 0), z(2, 0)]
    assert {sid for sid, m in synced.messages if isinstance(m, Diff)} == {1, 2}


def test_a_server_that_only_a_votes_hint_makes_a_voter_joins_the_established_leader() -> None:
    """Sim seed 4578 (with reconfigs): a leader logged a membership whose only voter was an
    observer of the committed one, and lost its quorum.  The others elected a new leader from
    the committed voters.  The observer took that proposal from the old leader's vote as a
    hint, and needed a quorum of it (its own word) to join the new leader: never; the old
    leader, which had logged it, needed the observer's word: never either.  Joining a leader
    already established now takes a quorum of the memberships the log holds, and the role
    they give (the hint goes)."""
    committed = Membership.of([Member(sid, "", 0, 0, sid in (2, 5)) for sid in (1, 2, 3, 4, 5)], 8)
    hinted = Membership.of([Member(sid, "", 0, 0, sid != 5) for sid in (1, 3, 4, 5)], 9)
    observer = Peer(PeerConfig(sid=5, voters=frozenset({1, 3, 4}), observers=frozenset({2, 5})),
                    DurableState(1, 1, z(1, 8), z(1, 8), (txn(1, 8),), membership=committed))  # fmt: skip
    drain(observer)
    observer.step(3, Notification(leader=3, zxid=z(1, 9), peer_epoch=1, election_epoch=observer.logical_clock,
                                  state="looking", config=committed.text(), proposed=hinted.text(), logged=z(1, 9)))  # fmt: skip
    drain(observer)
    assert observer.hinted == hinted and observer.state == ServerState.LOOKING
    for sid, state in ((1, "following"), (4, "leading")):
        observer.step(sid, Notification(leader=4, zxid=z(2, 0), peer_epoch=2, election_epoch=observer.logical_clock,
                                        state=state, config=committed.text(), logged=z(2, 0)))  # fmt: skip
    assert observer.state == ServerState.OBSERVING and observer.learner is not None and observer.learner.leader == 4
    assert observer.hinted is None


def test_a_leader_syncs_a_learner_ahead_of_it_that_no_election_could_make_leader() -> None:
    """Sim seed 501479 (with reconfigs): the one committed voter, leading, proposed a membership
    that adds server 1, sent 1 its next proposal and crashed before its own fsync.  Back, it was
    elected again (1 is no candidate: the committed membership does not name it), and stepped
    down at 1's ACKEPOCH, ahead of it, again and again.  What 1 holds beyond the leader is
    uncommitted (every commit took the committed voter), so the leader syncs it instead."""
    committed = Membership.of([Member(3, "", 0, 0, False), Member(2, "", 0, 0, True)], z(1, 2))
    proposed = Membership.of([Member(1, "", 0, 0, False), Member(3, "", 0, 0, False), Member(2, "", 0, 0, True)], z(1, 3))
    history = tuple(txn(1, i) for i in range(1, 5))
    peer = Peer(PeerConfig(sid=3, voters=frozenset({3}), observers=frozenset({2}), finalize_wait_ticks=1),
                DurableState(1, 1, z(1, 4), z(1, 4), history, membership=committed, proposed=proposed))  # fmt: skip
    drain(peer)
    peer.step(1, Notification(leader=3, zxid=z(1, 4), peer_epoch=1, election_epoch=peer.logical_clock, state="looking"))
    for _ in range(3):
        peer.tick()
    assert peer.state == ServerState.LEADING
    peer.step(1, FollowerInfo(accepted_epoch=1, last_zxid=z(1, 5), config_version=committed.version))
    drain(peer)
    peer.step(1, AckEpoch(current_epoch=1, last_zxid=z(1, 5)))
    rd = drain(peer)
    assert peer.state == ServerState.LEADING and rd.current_epoch == 2
    assert [m.zxid for m in sent(rd, Trunc, to=1)] == [z(1, 4)]


def test_a_leader_steps_down_for_a_learner_that_promised_an_epoch_above_its_own() -> None:
    """Simulator seeds 734305 and 735429 (and 723131 with reconfigs): a server picked an epoch of its
    own as a would-be leader, and a partition cut its LEADERINFO off from the follower it had;
    the others then elected a leader on a lower epoch.  That server must refuse the lower
    LEADERINFO (its promise), so it followed, refused and looked again for as long as that
    leader led.  The leader steps down, having made the promise its own, and the next epoch is
    above it: everyone converges."""
    c = Scenario(voters=3)
    leader = c.run_until(c.serving_leader)
    c.run_until(c.converged)
    epoch = leader.soft.epoch
    stuck = next(sid for sid in (1, 2, 3) if sid != leader.sid)
    c.down(stuck)
    c.write(leader.sid, "/while-down")
    c.run_until(lambda: leader.tree_zxid > make_zxid(epoch, 0))
    c.preload(stuck, accepted_epoch=epoch + 3, current_epoch=epoch, txns=[])
    c.restart(stuck)
    c.run_until(c.converged, ticks_max=600)
    new_leader = c.serving_leader()
    assert new_leader is not None and new_leader.soft.epoch > epoch + 3
    assert c.node(stuck).tree.get("/while-down") is not None
    assert c.node(leader.sid).peer.accepted_epoch >= epoch + 3  # its promise, raised before it stepped down


def _looking_with_a_logged_reconfig() -> tuple[Peer, Membership, Membership]:
    """Server 2, looking, its log holding a reconfig of epoch 3 (adding 4) not known to be
    committed: the peer, the committed membership and the proposed one."""
    committed = Membership.of([Member(sid, "", 0, 0, False) for sid in (1, 2, 3)])
    proposed = Membership.of([Member(sid, "", 0, 0, False) for sid in (1, 2, 3, 4)], z(3, 0x1A))
    history = tuple(txn(3, i) for i in range(1, 0x1B))
    peer = Peer(PeerConfig(sid=2, voters=VOTERS), DurableState(3, 3, z(3, 0x1A), z(3, 0x19), history, membership=committed,
                                                                proposed=proposed))  # fmt: skip
    drain(peer)
    return peer, committed, proposed


def test_a_server_whose_logged_reconfig_a_later_leader_never_had_joins_that_leader() -> None:
    """Simulator seed 722227 (with reconfigs): servers 2 and 4 logged a reconfig adding 4 that never
    committed; the others elected a leader on the next epoch without it.  Joining takes a
    quorum of every membership the log holds, and no quorum of the dead proposal's (2 and 4
    voted for 2) ever followed that leader: both looked for ever.  The leader's own vote shows
    the proposal dead (a later epoch, and neither its committed membership nor its proposed
    one is ours), so the committed membership's quorum lets us join, and the sync cuts it."""
    peer, committed, _ = _looking_with_a_logged_reconfig()
    assert peer.state == ServerState.LOOKING
    established = {"leader": 3, "zxid": z(4, 20), "peer_epoch": 4, "election_epoch": 6, "config": committed.text(), "logged": z(4, 20)}
    peer.step(3, Notification(**established, state="leading"))
    peer.step(1, Notification(**established, state="following"))
    assert peer.state == ServerState.FOLLOWING and peer.soft_state().leader == 3
    assert sent(drain(peer), FollowerInfo, to=3)


def test_a_server_whose_logged_reconfig_the_leader_also_proposes_needs_its_quorum_to_join() -> None:
    """The same, but the leader's vote carries the proposal: it is alive, and its quorum counts."""
    peer, committed, proposed = _looking_with_a_logged_reconfig()
    established = {"leader": 3, "zxid": z(4, 20), "peer_epoch": 4, "election_epoch": 6, "config": committed.text(),
                   "proposed": proposed.text()}  # fmt: skip
    peer.step(3, Notification(**established, state="leading"))
    peer.step(1, Notification(**established, state="following"))
    assert peer.state == ServerState.LOOKING  # 1 and 3 of {1, 2, 3, 4}: no quorum of the proposal yet
    peer.step(4, Notification(**established, state="following"))
    assert peer.state == ServerState.FOLLOWING and peer.soft_state().leader == 3
