"""Sync rounds: the leader's answer to ZooKeeper's ``sync``, made linearizable as etcd's ReadIndex.

Theory of operation: the leader answers a sync only once everything it had proposed when the
sync arrived is committed *and* a quorum has confirmed, in a round started after the sync
arrived, that it still leads.  A round is a PING carrying a round number that voters echo
back; every sync that arrives before the next ``ready()`` shares one round (``start`` is
called when a Ready is handed out).  A leader cut off from its quorum, which has not noticed
yet, thus cannot answer a sync from a stale tree (ZOOKEEPER-1675): it steps down first.
"""

from __future__ import annotations

from zabby.core.messages import Ping, Sync
from zabby.core.replica import Replica
from zabby.core.roles import LeaderRole, LearnerInfo


def request(leader: LeaderRole, sid: int, sync: Sync) -> None:
    """A sync waits for what was proposed now, and for the next confirmation round."""
    leader.syncs.append((leader.last_proposed, leader.round + 1, sid, sync))
    leader.round_wanted = True


def start(peer: Replica, leader: LeaderRole) -> None:
    """Ask the voters to confirm this leadership."""
    leader.round += 1
    leader.round_wanted = False
    ping = Ping(round=leader.round)
    for sid, info in leader.learners.items():
        if info.uptodate and not info.observer:
            peer._send(sid, ping)
    advance_syncs(peer, leader)


def answered(peer: Replica, leader: LeaderRole, info: LearnerInfo, round: int) -> None:
    """A learner's answer to a PING of ``round``."""
    if round > info.round_acked:
        info.round_acked = round
        if leader.syncs:
            advance_syncs(peer, leader)


def _confirmed(peer: Replica, leader: LeaderRole) -> int:
    """The highest round a quorum has confirmed (the leader confirms its own at once)."""
    confirmed = {sid: info.round_acked for sid, info in leader.learners.items() if info.uptodate and not info.observer}
    confirmed[peer.sid] = leader.round
    return peer.members.quorum.committed(confirmed)


def advance_syncs(peer: Replica, leader: LeaderRole) -> None:
    """Answer the syncs whose zxid is committed and whose round a quorum confirmed, in order."""
    confirmed = _confirmed(peer, leader) if leader.syncs else 0
    while leader.syncs and leader.syncs[0][0] <= leader.commit_point and leader.syncs[0][1] <= confirmed:
        _, _, sid, sync = leader.syncs.popleft()
        if sid == peer.sid:
            peer._ready.sync_replies.append(sync)
        else:
            peer._send(sid, sync)
