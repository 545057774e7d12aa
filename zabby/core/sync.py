"""Phase 2, the leader's choice of how to bring a learner up to date (LearnerHandler.syncFollower).

``choose_sync`` is a pure function of the learner's last logged zxid, the leader's last
logged zxid and its history window.  Cases, in ZooKeeper's order:

1. the learner is where the leader is                      → DIFF, nothing to send
2. the learner is past the window's end                    → TRUNC to the window's end
3. inside the window, and the leader holds that very zxid  → DIFF: the txns after it
4. inside the window, but the leader never had that zxid   → TRUNC to the txn before it, then DIFF
   (the learner logged a proposal of an epoch that died before committing it)
5. below the window, or no window at all                   → SNAP
0. before all of these: the learner asked for a SNAP (``force_snap``), because a TRUNC would
   go below its newest snapshot (see ``Peer``: the snapshot may hold the truncated txns)

The learner's history is a prefix of the leader's (Zab's invariant once the leader's epoch
is established), except for the uncommitted tail that TRUNC removes.

Then, on both sides: the leader sends the plan's DIFF/TRUNC/SNAP, the txns, a COMMIT of those
already committed, and NEWLEADER; the learner logs them and acks NEWLEADER once that is
persisted, taking the new current epoch; the leader is established once a quorum of voters
acked NEWLEADER and sends UPTODATE (with a COMMIT of what it has committed); the learner
serves from UPTODATE on.  Anything out of this order is a broken stream: the learner drops
it and looks again (``Replica._learner_resync``), never exits.
"""

from __future__ import annotations

from dataclasses import dataclass

from zabby.core import broadcast
from zabby.core.history import History
from zabby.core.messages import Ack, AckEpoch, Commit, Diff, NewLeader, Proposal, Snap, Trunc, UpToDate
from zabby.core.replica import Replica
from zabby.core.roles import LeaderRole, LearnerInfo, LearnerRole
from zabby.core.types import SyncMode, ZabPhase
from zabby.errors import InvariantError
from zabby.tree.txns import Txn, make_zxid, zxid_epoch


@dataclass(frozen=True, slots=True)
class SyncPlan:
    mode: SyncMode
    trunc_zxid: int = 0  # for TRUNC and TRUNC+DIFF
    txns: tuple[Txn, ...] = ()  # for DIFF and TRUNC+DIFF
    snap_zxid: int = 0  # for SNAP


def choose_sync(peer_last_zxid: int, leader_last_zxid: int, history: History, *, force_snap: bool = False) -> SyncPlan:
    if force_snap:
        return SyncPlan(SyncMode.SNAP, snap_zxid=leader_last_zxid)
    if peer_last_zxid == leader_last_zxid:
        return SyncPlan(SyncMode.DIFF)
    window = bool(history.txns)
    if window and peer_last_zxid > history.max_zxid:
        return SyncPlan(SyncMode.TRUNC, trunc_zxid=history.max_zxid)
    if not window and peer_last_zxid > leader_last_zxid:
        return SyncPlan(SyncMode.TRUNC, trunc_zxid=leader_last_zxid)
    if window and history.min_zxid <= peer_last_zxid:
        if history.contains(peer_last_zxid):
            return SyncPlan(SyncMode.DIFF, txns=tuple(history.after(peer_last_zxid)))
        floor = history.floor(peer_last_zxid)
        return SyncPlan(SyncMode.TRUNC_DIFF, trunc_zxid=floor, txns=tuple(history.after(floor)))
    return SyncPlan(SyncMode.SNAP, snap_zxid=leader_last_zxid)


# ----------------------------------------------------------------- leader side
def sync_learner(peer: Replica, leader: LeaderRole, sender: int, info: LearnerInfo, ack: AckEpoch) -> None:
    """DIFF, TRUNC or SNAP up to our last logged txn, then NEWLEADER."""
    info.epoch_ack = None
    plan = choose_sync(ack.last_zxid, peer.last_logged, peer.history, force_snap=ack.snapshot_wanted)
    base = ack.last_zxid
    if plan.mode == SyncMode.SNAP:
        peer._send(sender, Snap(zxid=peer.applied))
        base = peer.applied
        # Every logged txn above the tree: ``pending`` holds them all, while the history
        # window may have lost the oldest, leaving a gap the learner rejects, forever
        # (sim seed 138).
        txns = tuple(peer.pending)
    elif plan.mode in (SyncMode.TRUNC, SyncMode.TRUNC_DIFF):
        peer._send(sender, Trunc(zxid=plan.trunc_zxid))
        base, txns = plan.trunc_zxid, plan.txns
    else:
        peer._send(sender, Diff(zxid=peer.last_logged))
        txns = plan.txns
    if txns:
        peer._send(sender, Proposal(txns=txns))
        committed = [t.zxid for t in txns if t.zxid <= leader.commit_point]
        if committed:
            peer._send(sender, Commit(zxid=committed[-1]))
    info.acked = base
    info.newleader_point = peer.last_logged
    peer._send(sender, NewLeader(zxid=make_zxid(leader.epoch, 0), config=peer.membership.text(),
                                 proposed=peer.proposed.text() if peer.proposed else ""))  # fmt: skip


def newleader_acked(peer: Replica, leader: LeaderRole, sender: int, info: LearnerInfo) -> None:
    """The learner's log is ours: it counts towards establishing us, or, once we are, it is
    up to date."""
    info.synced = True
    info.acked = max(info.acked, info.newleader_point)
    leader.newleader_acks.add(sender)
    if leader.established:
        # The COMMIT sent when we became established went only to the learners synced
        # by then; without this one the learner serves (and answers syncs) behind the
        # commit point until the next write (sim seed 47).
        if leader.commit_point:
            peer._send(sender, Commit(zxid=leader.commit_point))
        peer._send(sender, UpToDate())
        info.uptodate = True
        broadcast.maybe_commit(peer, leader)
    else:
        maybe_establish(peer, leader)


def maybe_establish(peer: Replica, leader: LeaderRole) -> None:
    """A quorum of voters acked NEWLEADER: what we logged is committed, and we serve."""
    voters_synced = {sid for sid in leader.newleader_acks if sid == peer.sid or not leader.learners[sid].observer}
    if leader.established or not peer.members.quorum.has_quorum(voters_synced):
        return
    leader.established = True
    leader.established_by = frozenset(voters_synced)
    leader.commit_point = peer.last_logged
    peer._apply_up_to(peer.last_logged)
    designated = broadcast.activate(peer, leader, peer.last_logged)
    for sid in sorted(leader.newleader_acks - {peer.sid}):
        if peer.last_logged:
            peer._send(sid, Commit(zxid=peer.last_logged, designated=designated))
        peer._send(sid, UpToDate())
        leader.learners[sid].uptodate = True
    if peer.sid not in peer.members.quorum.voters:
        peer._become_looking(vote_for=designated, hand_over=True)


# ----------------------------------------------------------------- learner side
def sync_mode(peer: Replica, learner: LearnerRole, message: Diff | Trunc | Snap) -> None:
    if learner.phase != ZabPhase.SYNCHRONIZATION or learner.sync_mode_seen:
        peer._learner_resync()  # one DIFF/TRUNC/SNAP per sync: a second one is a broken stream
        return
    learner.sync_mode_seen = True
    if isinstance(message, Snap):
        learner.snapshot_due = message.zxid
    elif isinstance(message, Trunc):
        if message.zxid < peer.snapshot_zxid:
            peer.snapshot_wanted = True  # see Replica: this sync cannot be done here
            peer._learner_resync()
            return
        peer._truncate(message.zxid)


def snapshot_installed(peer: Replica, learner: LearnerRole, zxid: int) -> None:
    """The shell replaced the tree with the leader's snapshot at ``zxid`` and saved it.

    Raises:
        InvariantError: no SNAP of this sync asked for that snapshot.
    """
    if learner.phase != ZabPhase.SYNCHRONIZATION:
        raise InvariantError("snapshot installed outside of a sync")
    if learner.snapshot_due != zxid:
        raise InvariantError(f"snapshot installed at 0x{zxid:x}, none expected there")
    learner.snapshot_due = None
    peer.snapshot_zxid, peer.snapshot_wanted = zxid, False
    peer.last_logged = peer.applied = learner.commit_point = zxid
    peer.pending.clear()
    peer.history.clear()


def new_leader(peer: Replica, learner: LearnerRole, message: NewLeader) -> None:
    if (learner.phase != ZabPhase.SYNCHRONIZATION or not learner.sync_mode_seen
            or zxid_epoch(message.zxid) != peer.accepted_epoch):  # fmt: skip
        peer._learner_resync()  # NEWLEADER with no DIFF/TRUNC/SNAP before it: a broken stream
        return
    peer.members.adopt(message.config)
    peer.members.synced_proposed(message.proposed)
    if peer._role_changed():  # the sync's RECONFIG makes us a voter where we observe, or the reverse
        peer._become_looking()  # reconnect as the other kind of learner, before acking
        return
    peer.current_epoch = peer.accepted_epoch
    peer._ready.current_epoch = peer.current_epoch  # with the leader's history logged: a repair ends here too
    peer.repairing = False
    learner.acked = True
    peer._ready.must_sync = True
    peer._send(learner.leader, Ack(zxid=message.zxid))


def uptodate(peer: Replica, learner: LearnerRole) -> None:
    if not learner.acked:
        peer._learner_resync()
        return
    learner.phase = ZabPhase.BROADCAST
    peer._apply_up_to(learner.commit_point)
