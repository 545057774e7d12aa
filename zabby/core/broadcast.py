"""Phase 3, broadcast, on both sides: PROPOSAL → log and fsync → ACK → COMMIT / INFORM.

Theory of operation: the established leader logs each proposal and sends it to the synced
followers (early: it promises nothing about the leader's disk); a follower logs it and, once
that is persisted, acks it.  The leader commits the highest zxid that a quorum of voters
(itself counted once its own append is done, ``Peer.advance``) acked, in order, and tells
followers (COMMIT) and observers (INFORM, with the txns, as they never get proposals).  A
COMMIT for a txn the learner does not hold, or a gap in the stream, is a broken stream: the
learner drops it and looks again (``Replica._learner_resync``), never applying out of order.

Commit by a follower (zabby's own; ZooKeeper waits for the COMMIT): Zab commits a txn once
a quorum has logged it, and the COMMIT only tells.  Where the leader and one follower make a
quorum (three voters), the leader, once its own log holds a txn that no follower has acked
yet, says so (``Logged``) instead of the COMMIT to come: the follower, which holds the
proposals before it, commits up to there at once, without the round trip of its ACK and
the COMMIT.  Not while a reconfig is proposed: quorums are then of two memberships, and
its COMMIT activates the new one.

A commit that reaches a proposed membership's RECONFIG activates it (``zabby.core.membership``).
A leader it leaves out names the most up-to-date voter of the new membership in that COMMIT
(``designated``) and hands over: it goes LOOKING, voting for it, and so does every learner.
"""

from __future__ import annotations

from zabby.core import rounds
from zabby.core.messages import Ack, Commit, Inform, Logged, Proposal
from zabby.core.replica import Replica
from zabby.core.roles import LeaderRole, LearnerInfo, LearnerRole
from zabby.core.types import ServerState, ZabPhase
from zabby.errors import InvariantError
from zabby.tree.txns import Txn, follows, make_zxid, zxid_counter, zxid_epoch

_BROADCAST, _FOLLOWING = ZabPhase.BROADCAST, ServerState.FOLLOWING  # globals: read per COMMIT (see zabby.opcodes)


# ----------------------------------------------------------------- leader side
def next_zxid(leader: LeaderRole) -> int:
    if zxid_epoch(leader.last_proposed) == leader.epoch:
        return leader.last_proposed + 1
    return make_zxid(leader.epoch, 1)


def propose(peer: Replica, leader: LeaderRole, txns: list[Txn]) -> None:
    """Log and broadcast txns whose zxids follow ``next_zxid`` in order (and commit them
    too, in the same Ready, where the leader alone is a quorum).

    Raises:
        InvariantError: a txn's zxid is not the next one, or past the epoch's last counter.
    """
    expected = next_zxid(leader)  # in the leader's epoch, as every zxid it proposes
    last_allowed = make_zxid(leader.epoch, peer.config.zxid_counter_last)
    for txn in txns:  # without a call per txn: a batch holds up to turn_ops_max of them
        if txn.zxid != expected or expected > last_allowed:
            raise InvariantError(f"proposal 0x{txn.zxid:x}, expected 0x{expected:x} (counters up to 0x{peer.config.zxid_counter_last:x})")
        leader.last_proposed = expected
        expected += 1
    peer._log(txns)
    if not leader.learners and peer.members.quorum.has_quorum((peer.sid,)):
        # A quorum of one (standalone): logging is committing.  The txns are applied in
        # step 5 of this Ready, after its persist, rather than in a Ready of their own.
        leader.self_acked = txns[-1].zxid
        maybe_commit(peer, leader)
        if peer.role is not leader:
            return
    if leader.learners:  # none on a standalone server, or before any learner connects
        message = Proposal(txns=tuple(txns))
        for sid, info in leader.learners.items():
            if info.acked_epoch and not info.observer:
                peer._send_early(sid, message)
        _tell_logged(peer, leader, txns[-1].zxid)
    if leader.syncs:  # asked first: a call per proposal saved (it answers nothing without syncs)
        rounds.advance_syncs(peer, leader)
    if zxid_counter(leader.last_proposed) == peer.config.zxid_counter_last:
        # ZooKeeper's ZOOKEEPER-1277: no counter is left in this epoch, so an election
        # starts the next one; what was proposed is recovered by it, as after any step-down
        peer._become_looking()


def ack(peer: Replica, leader: LeaderRole, info: LearnerInfo, zxid: int) -> None:
    if zxid > info.acked:
        info.acked = zxid
        maybe_commit(peer, leader)


def maybe_commit(peer: Replica, leader: LeaderRole) -> None:
    if not leader.established:
        return
    acked = {sid: info.acked for sid, info in leader.learners.items() if not info.observer and info.synced}  # voters only count
    acked[peer.sid] = leader.self_acked
    point = peer.members.quorum.committed(acked)
    if point <= leader.commit_point:
        return
    committed = peer._ready.committed
    newly_from = len(committed)  # the txns this commit adds to the Ready: an INFORM's
    leader.commit_point = point
    peer._apply_up_to(point)
    designated = activate(peer, leader, point)
    commit: Commit | None = None
    inform: Inform | None = None
    for sid, info in leader.learners.items():
        if info.acked_epoch and (info.observer or designated or point > info.logged_sent):
            if info.observer:
                inform = inform or Inform(txns=tuple(committed[newly_from:]))
                peer._send_early(sid, inform)
            else:
                commit = commit or Commit(zxid=point, designated=designated)
                peer._send_early(sid, commit)
    if leader.syncs:
        rounds.advance_syncs(peer, leader)
    if peer.sid not in peer.members.quorum.voters:  # the new membership leaves us out: hand over
        peer._become_looking(vote_for=designated, hand_over=True)


def _tell_logged(peer: Replica, leader: LeaderRole, logged: int) -> None:
    """LOGGED to each follower that makes a quorum with this leader: the leader's log holds
    everything up to ``logged`` once this Ready's persist is done (see the module's
    docstring).  A regular message, so it leaves after that persist, in the Ready that
    logs the txns: a Ready of its own after ``advance`` would cost the leader a round of
    the engine per write and the follower the wait for it."""
    if not leader.established or logged <= leader.commit_point or peer.proposed is not None or not peer.config.logged_commits:
        return
    for sid, info in leader.learners.items():
        if info.uptodate and not info.observer and info.acked < logged and peer.members.quorum.has_quorum((peer.sid, sid)):
            info.logged_sent = logged
            peer._send(sid, Logged(zxid=logged))


def activate(peer: Replica, leader: LeaderRole, commit_point: int) -> int:
    """Activate a membership the commit point reached; the designated next leader if it
    leaves this leader out (0: none, or no hand-over needed)."""
    if not peer.members.activate(commit_point) or peer.sid in peer.members.quorum.voters:
        return 0
    candidates = [(info.acked, sid) for sid, info in leader.learners.items()
                  if info.uptodate and sid in peer.members.quorum.voters]  # fmt: skip
    return max(candidates)[1] if candidates else 0


# ----------------------------------------------------------------- learner side
def proposal(peer: Replica, learner: LearnerRole, message: Proposal) -> None:
    last = peer.last_logged
    for txn in message.txns:
        zxid = txn.zxid
        # the next counter of the same epoch (no carry into the epoch's bits) follows: the
        # stream's every txn but an epoch's first, checked without ``follows``'s four calls
        if not (zxid == last + 1 and zxid & 0xFFFFFFFF) and not follows(last, zxid):
            peer._learner_resync()  # a gap or a step back in the proposal stream
            return
        last = zxid
    peer._log(list(message.txns))
    if learner.acked:
        peer._send(learner.leader, Ack(zxid=peer.last_logged))


def commit(peer: Replica, learner: LearnerRole, zxid: int, designated: int = 0) -> None:
    if zxid <= learner.commit_point:
        return
    if not any(t.zxid == zxid for t in peer.pending):
        peer._learner_resync()  # a COMMIT for a proposal we do not hold
        return
    learner.commit_point = zxid
    if learner.phase == _BROADCAST:
        peer._apply_up_to(zxid)
    _committed(peer, learner, designated)


def logged(peer: Replica, learner: LearnerRole, zxid: int) -> None:
    """The leader's log holds everything up to ``zxid``, and the two of us make a quorum:
    what our own log holds up to there is committed (see the module's docstring), and
    the leader sends no COMMIT of it.  The shell logs a Ready's txns before it applies
    them, so a txn logged in this Ready too is on disk before it is applied."""
    if learner.state != _FOLLOWING or learner.phase != _BROADCAST or zxid > peer.last_logged:
        peer._learner_resync()  # sent only once our stream is up to date and holds it
        return
    if zxid > learner.commit_point:
        learner.commit_point = zxid
        peer._apply_up_to(zxid)
        _committed(peer, learner)


def inform(peer: Replica, learner: LearnerRole, message: Inform) -> None:
    fresh = [t for t in message.txns if t.zxid > peer.last_logged]
    last = peer.last_logged
    for txn in fresh:
        if not follows(last, txn.zxid):
            peer._learner_resync()
            return
        last = txn.zxid
    peer._log(fresh)
    if message.txns and message.txns[-1].zxid > learner.commit_point:
        # An INFORM commits all its txns, also those the sync's DIFF had logged already as
        # proposals; counting only the fresh ones left them unapplied (found by review,
        # pinned in tests/core).
        learner.commit_point = message.txns[-1].zxid
    if learner.phase == ZabPhase.BROADCAST:
        peer._apply_up_to(learner.commit_point)
    _committed(peer, learner)


def _committed(peer: Replica, learner: LearnerRole, designated: int = 0) -> None:
    """The commit point moved: a membership it reached is active now.  A leader it left
    out hands over (vote for the designated one); a role it changed (voter ↔ observer)
    means reconnecting as the other kind of learner."""
    if not peer.members.activate(learner.commit_point):
        return
    if designated and designated != learner.leader:
        peer._become_looking(vote_for=designated)
    elif peer._role_changed():
        peer._become_looking()
