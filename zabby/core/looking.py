"""The LOOKING role's step and tick, and the votes every role answers.

Theory of operation: ``Peer`` chooses ``step`` and ``tick`` here when it becomes LOOKING.
The election itself is ``zabby.core.election`` (pure FastLeaderElection); this module wires it
to the Replica: it sends our notifications (again, with a backoff, until a vote decides),
feeds the ones received to the election, lets a trusted vote change our memberships (then we
vote again: a new LookingRole), and keeps the FOLLOWERINFO of a follower that decided before
us for when we lead.

Notifications reach a server in any role (``step_notification``): one that is not LOOKING
answers a LOOKING sender with the vote it holds, so that the sender can join it.
"""

from __future__ import annotations

from zabby.core.messages import FollowerInfo, Message, Notification
from zabby.core.replica import Replica
from zabby.core.roles import LookingRole
from zabby.core.types import ServerState


def tick(peer: Replica, role: LookingRole) -> None:
    decided = role.election.tick(peer.now)
    if decided is not None:
        peer._decide(decided)
    elif peer.now >= role.notify_at:
        role.notify_interval = min(role.notify_interval * 2, peer.config.notify_interval_ticks_max)
        broadcast_notification(peer, role)


def step(peer: Replica, role: LookingRole, sender: int, message: Message) -> None:
    """Every message but a Notification (``step_notification``) while LOOKING."""
    if isinstance(message, FollowerInfo):
        # a follower that decided before we did: keep it for when we lead
        role.early_followers[sender] = message


def broadcast_notification(peer: Replica, role: LookingRole) -> None:
    note = role.election.notification(role.state)
    for sid in sorted(peer.peers):
        peer._send(sid, note)
    role.notify_at = peer.now + role.notify_interval


def step_notification(peer: Replica, sender: int, note: Notification) -> None:
    """A vote, received in any role."""
    members = peer.members
    trusted = members.speaks_for(sender, note)
    if isinstance(peer.role, LookingRole) and trusted and (
            members.adopt(note.config) | members.adopt_hint(note.proposed) | members.disowned_by(note.config)):  # fmt: skip
        peer._become_looking()  # a newer membership, or we are no candidate: vote again
    role = peer.role  # a new one when we voted again (and maybe decided at once, alone)
    if not isinstance(role, LookingRole):
        if note.state == ServerState.LOOKING.value:
            peer._send(sender, current_vote(peer))
        return
    election = role.election
    if note.state == ServerState.LEADING.value and trusted and members.abandoned_for(note):
        election.join_quorum = members.quorums(hinted=False, proposed=False)
    changed, decided = election.receive(sender, note, peer.now)
    peer.logical_clock = election.logical_clock
    if decided is not None:
        peer._decide(decided)
    elif changed:
        broadcast_notification(peer, role)
    elif note.state == ServerState.LOOKING.value and (note.election_epoch < peer.logical_clock
                                                      or sender not in peer.members.quorum.voters):  # fmt: skip
        # Behind us, or a server we do not count (ZooKeeper answers those too): it may
        # count us, in a membership it knows and we have not learnt yet.
        peer._send(sender, election.notification(role.state))


def current_vote(peer: Replica) -> Notification:
    """The vote of a server that is not LOOKING: the leader it leads or follows."""
    return Notification(leader=peer.role.vote_leader(peer.sid), zxid=peer.last_logged, peer_epoch=peer.current_epoch,
                        election_epoch=peer.logical_clock, state=peer.role.state.value)  # fmt: skip
