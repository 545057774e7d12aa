"""The LEADING role's step and tick: discovery, sync and broadcast for every learner.

Theory of operation: ``Peer`` chooses ``step`` and ``tick`` here when it becomes LEADING.
``step`` routes each learner's message to the phase it belongs to (``discovery``, ``sync``,
``broadcast``, ``rounds``); ``tick`` bounds the phases in ticks: initLimit until a quorum is
synced (then the leader looks again), syncLimit of silence per synced learner once established
(initLimit while it syncs; the learner is dropped, and the leader looks again once it has no
quorum left), and a PING every
``ping_interval_ticks``.  Only the leader pings; learners answer.
"""

from __future__ import annotations

from zabby.core import broadcast, discovery, rounds, sync
from zabby.core.messages import Ack, AckEpoch, FollowerInfo, Message, Ping, Request, Sync
from zabby.core.replica import Replica
from zabby.core.roles import LeaderRole
from zabby.tree.txns import make_zxid


def tick(peer: Replica, leader: LeaderRole) -> None:
    if not leader.established:
        if peer.now - leader.started_tick > peer.config.init_limit_ticks:
            peer._become_looking()
        return
    for sid, info in list(leader.learners.items()):
        # silent for syncLimit, or initLimit while it syncs: a ZooKeeper learner says nothing
        # between its ACKEPOCH and its NEWLEADER ack, however long a SNAP takes
        if peer.now - info.heard_tick > (peer.config.sync_limit_ticks if info.synced else peer.config.init_limit_ticks):
            discovery.drop_learner(peer, leader, sid)
    alive = {peer.sid} | {sid for sid, info in leader.learners.items() if info.uptodate}
    if not peer.members.quorum.has_quorum(alive):
        peer._become_looking()
        return
    if peer.now % peer.config.ping_interval_ticks == 0:
        ping = Ping(round=leader.round)
        for sid in leader.learners:
            peer._send(sid, ping)


def step(peer: Replica, leader: LeaderRole, sender: int, message: Message) -> None:
    kind = message.__class__  # the exact classes, as decode makes them: no isinstance per message
    if kind is FollowerInfo:
        discovery.follower_info(peer, leader, sender, message)  # type: ignore[arg-type]
        return
    info = leader.learners.get(sender)
    if info is None:
        return
    info.heard_tick = peer.now
    if kind is Request:  # the busy leader's two messages first: each forwarded write, each ACK
        if leader.established and info.uptodate and sender in peer.members.member_sids:  # named by the committed or the proposed membership
            peer._ready.requests.append((sender, message))  # type: ignore[arg-type]
    elif kind is Ack:
        zxid = message.zxid  # type: ignore[union-attr]
        if zxid == make_zxid(leader.epoch, 0) and not info.synced:
            sync.newleader_acked(peer, leader, sender, info)
        else:
            broadcast.ack(peer, leader, info, zxid)
    elif kind is AckEpoch:
        discovery.ack_epoch(peer, leader, sender, info, message)  # type: ignore[arg-type]
    elif kind is Ping:
        peer._ready.touched_sessions.extend(message.sessions)  # type: ignore[union-attr]
        rounds.answered(peer, leader, info, message.round)  # type: ignore[union-attr]
    elif kind is Sync and leader.established:
        rounds.request(leader, sender, message)  # type: ignore[arg-type]
