"""The FOLLOWING and OBSERVING roles' step and tick: one leader's stream, in order.

Theory of operation: ``Peer`` chooses ``step`` and ``tick`` here when it becomes a learner.
``step`` takes only its leader's messages and routes them to the phase they belong to
(``discovery``, ``sync``, ``broadcast``); anything out of the stream's order drops the leader
and looks again (``Replica._learner_resync``): ZooKeeper exits where zabby resyncs.  ``tick``
drops a leader silent for longer than ZooKeeper's per-read socket timeouts: syncLimit between
packets once in broadcast, initLimit while connecting and syncing.
"""

from __future__ import annotations

from zabby.core import broadcast, discovery, sync
from zabby.core.messages import Commit, Diff, Inform, LeaderInfo, Logged, Message, NewLeader, Ping, Proposal, Snap, Sync, Trunc, UpToDate
from zabby.core.replica import Replica
from zabby.core.roles import LearnerRole
from zabby.core.types import ZabPhase


def tick(peer: Replica, learner: LearnerRole) -> None:
    limit = peer.config.sync_limit_ticks if learner.phase == ZabPhase.BROADCAST else peer.config.init_limit_ticks
    if peer.now - learner.heard_tick > limit:
        peer._become_looking()


def step(peer: Replica, learner: LearnerRole, sender: int, message: Message) -> None:
    if sender != learner.leader:
        return
    learner.heard_tick = peer.now
    if learner.snapshot_due is not None:
        # The snapshot that should have come between the SNAP and this message did not
        # (the shell dropped it); going on would ack NEWLEADER over our old log, a history
        # the leader never had (sim seed 463).
        peer._learner_resync()
        return
    kind = message.__class__  # the exact classes, as decode makes them: no isinstance per message
    if (kind is Proposal or kind is Commit or kind is Inform) and not learner.sync_mode_seen:
        # Ahead of this sync's DIFF/TRUNC/SNAP: a reordered stream (a TRUNC after a
        # PROPOSAL would cut it again, and NEWLEADER be acked over a log missing it), or
        # sent to our previous link before the leader read our new FOLLOWERINFO (an INFORM
        # logged then put the new epoch's first txn right after a log missing the old
        # epoch's last ones: sim seed 8058 with the reconfig soak's options).
        peer._learner_resync()
        return
    if kind is Proposal:  # the busy learner's two messages first
        broadcast.proposal(peer, learner, message)  # type: ignore[arg-type]
    elif kind is Commit:
        broadcast.commit(peer, learner, message.zxid, message.designated)  # type: ignore[union-attr]
    elif kind is LeaderInfo:
        discovery.leader_info(peer, learner, message)  # type: ignore[arg-type]
    elif kind is Diff or kind is Trunc or kind is Snap:
        sync.sync_mode(peer, learner, message)  # type: ignore[arg-type]
    elif kind is Logged:
        broadcast.logged(peer, learner, message.zxid)  # type: ignore[union-attr]
    elif kind is Inform:
        broadcast.inform(peer, learner, message)  # type: ignore[arg-type]
    elif kind is NewLeader:
        sync.new_leader(peer, learner, message)  # type: ignore[arg-type]
    elif kind is UpToDate:
        sync.uptodate(peer, learner)
    elif kind is Ping:
        peer._send(sender, Ping(sessions=tuple(sorted(learner.touched)), round=message.round))  # type: ignore[union-attr]
        learner.touched.clear()
    elif kind is Sync:
        peer._ready.sync_replies.append(message)  # type: ignore[arg-type]
