"""Phase 1, discovery, on both sides: FOLLOWERINFO → LEADERINFO(new epoch) → ACKEPOCH.

Theory of operation: a newly elected leader collects FOLLOWERINFOs (each with the learner's
acceptedEpoch); once a quorum of voters sent one, it picks a new epoch above every accepted
epoch it heard of and sends LEADERINFO.  A learner accepts the epoch (persisted before its
ACKEPOCH leaves) and answers with its current epoch and last zxid.  Once a quorum acked the
epoch, and none of them is ahead of the leader, the leader takes the new epoch as its current
one and syncs every learner that acked (``zabby.core.sync``); a learner that acks later is
synced at once.
"""

from __future__ import annotations

from zabby.core import sync
from zabby.core.messages import AckEpoch, FollowerInfo, LeaderInfo
from zabby.core.replica import Replica
from zabby.core.roles import LeaderRole, LearnerInfo, LearnerRole
from zabby.core.types import ZabPhase


# ----------------------------------------------------------------- leader side
def follower_info(peer: Replica, leader: LeaderRole, sender: int, info: FollowerInfo) -> None:
    if info.config_version > peer.members.newest_version():  # a leader holds no hint
        # As ZooKeeper's "Follower is ahead of the leader": a membership committed after
        # every one we know means we were voted in by an old one; its acks must not count.
        peer._become_looking()
        return
    if info.accepted_epoch > leader.epoch > 0:
        _step_down_below(peer, info.accepted_epoch)
        return
    # A server that is no voter may still follow: its acks count where it votes (a new
    # server joins that way, before the reconfig that adds it commits).
    leader.learners[sender] = LearnerInfo(info.observer, info.accepted_epoch, peer.now)
    leader.newleader_acks.discard(sender)
    if leader.epoch:
        peer._send(sender, LeaderInfo(epoch=leader.epoch))
    else:
        maybe_pick_epoch(peer, leader)


def _step_down_below(peer: Replica, accepted_epoch: int) -> None:
    """A learner promised an epoch above ours (a discovery of its own that a partition cut
    short): it must refuse our LEADERINFO, and would follow us, refuse and look again for
    as long as we lead (ZooKeeper leaves it so until its leader changes; simulator seeds
    734305 and 735429, and 723131 with reconfigs).  Only a new epoch above its promise lets
    it in: step down, having made that promise ourselves, so that the epoch we pick if
    elected again, or the one a leader picks from our FOLLOWERINFO, is above it.  Raising
    an accepted epoch only promises more: no txn of a lower epoch is taken from then on."""
    peer.accepted_epoch = accepted_epoch
    peer._ready.accepted_epoch = accepted_epoch
    peer._become_looking()


def maybe_pick_epoch(peer: Replica, leader: LeaderRole) -> None:
    """Once a quorum sent FOLLOWERINFO, the new epoch beats every accepted one."""
    voters = {peer.sid} | {sid for sid, i in leader.learners.items() if not i.observer}
    if leader.epoch or not peer.members.quorum.has_quorum(voters):
        return
    leader.epoch = max([peer.accepted_epoch] + [i.accepted_epoch for i in leader.learners.values()]) + 1
    peer.accepted_epoch = leader.epoch
    peer._ready.accepted_epoch = leader.epoch
    for sid in leader.learners:
        peer._send(sid, LeaderInfo(epoch=leader.epoch))
    _maybe_sync_self(peer, leader)


def _maybe_sync_self(peer: Replica, leader: LeaderRole) -> None:
    """The leader's own NEWLEADER, once a quorum acked the new epoch and none of them was
    ahead of it (ZooKeeper's waitForEpochAck): its current epoch is the new one once
    persisted.  Taking the new current epoch any earlier would let a leader that turns
    out to be behind win the next election on that epoch alone, and truncate committed
    txns from the others (sim seed 6199)."""
    if not leader.epoch or peer.sid in leader.newleader_acks:
        return
    acked = {peer.sid} | {sid for sid, i in leader.learners.items() if i.acked_epoch and not i.observer}
    if not peer.members.quorum.has_quorum(acked):
        return
    peer.current_epoch = leader.epoch
    peer._ready.current_epoch = leader.epoch
    leader.newleader_acks.add(peer.sid)
    leader.last_proposed = peer.last_logged
    for sid, info in leader.learners.items():
        if info.epoch_ack is not None:
            sync.sync_learner(peer, leader, sid, info, info.epoch_ack)
    sync.maybe_establish(peer, leader)


def ack_epoch(peer: Replica, leader: LeaderRole, sender: int, info: LearnerInfo, ack: AckEpoch) -> None:
    ahead = (ack.current_epoch, ack.last_zxid) > (leader.previous_epoch, leader.previous_last)
    if ahead and sender in peer.members.candidates() and not leader.established:
        peer._become_looking()  # a follower is ahead of us: we are not fit to lead
        return
    # One that no election could make leader (a voter of a proposed membership only) is
    # synced instead: what it holds beyond us is uncommitted, since every commit took a
    # quorum of the committed voters, and we lead with the newest log of a quorum of
    # them.  Stepping down would only elect us again (the soak's seed 501479).
    if info.acked_epoch:
        drop_learner(peer, leader, sender)  # a broken stream (sim seed 114)
        return
    info.acked_epoch = True
    if peer.sid in leader.newleader_acks:
        sync.sync_learner(peer, leader, sender, info, ack)
    else:
        # No NEWLEADER before a quorum acked the epoch (ZooKeeper's waitForEpochAck): a
        # learner would take a current epoch that this leader may never reach, and be
        # "ahead" of every later leader we could elect (sim seed 30817, with reconfigs).
        info.epoch_ack = ack
        _maybe_sync_self(peer, leader)


def drop_learner(peer: Replica, leader: LeaderRole, sid: int) -> None:
    """Forget a learner (its link went down, it fell silent, or its stream broke)."""
    if leader.learners.pop(sid, None) is not None:
        peer._ready.drop_links.append(sid)
    leader.newleader_acks.discard(sid)


# ----------------------------------------------------------------- learner side
def leader_info(peer: Replica, learner: LearnerRole, info: LeaderInfo) -> None:
    if info.epoch < peer.accepted_epoch or learner.phase != ZabPhase.DISCOVERY:
        # a second LEADERINFO means a broken stream; answering it would start a second
        # sync that may wipe what this one logged and acked (sim seed 114)
        peer._learner_resync()
        return
    if info.epoch > peer.accepted_epoch:
        peer.accepted_epoch = info.epoch
        peer._ready.accepted_epoch = info.epoch
    learner.phase = ZabPhase.SYNCHRONIZATION
    ack = AckEpoch(current_epoch=peer.current_epoch, last_zxid=peer.last_logged, snapshot_wanted=peer.snapshot_wanted)
    peer._send(learner.leader, ack)
