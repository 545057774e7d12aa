"""The forging nemesis: packets that servers which are no members, or liars in members' names,
put on a peer port.  A process on the network may connect to the election and quorum ports,
claim any server id and send anything (DESIGN.md, "whom zabby trusts"); what it sends must
change no membership, no data and no session.

Each forgery reaches one live server as if over its links, from its claimed sender:

* ``outsider-vote``: a vote from a server no membership names, carrying a membership of its
  own at a far version (it once became the ensemble's only member, on disk);
* ``stale-vote``: a member's vote carrying a membership older than the receiver's (none while
  the receiver holds the first one: a membership of the receiver's version that leaves it out
  is a lie only quorum authentication stops, see ``zabby.core.membership.Memberships.disowned_by``);
* ``impossible-vote``: a member's vote carrying a membership later than the last zxid the vote
  says its sender logged (no member can have committed it);
* ``outsider-learner``: a FOLLOWERINFO, an ACK far ahead and a forwarded write (as a superuser,
  for the session of a client) from a server no membership names.

What must hold: the checker's invariants (no membership recorded that was not committed: see
``Checker.on_membership``; no forged write applied: ``FORGED_CXID``), and liveness after the
safety phase, as for every other fault.
"""

from __future__ import annotations

import random

from zabby.core.messages import Ack, FollowerInfo, Message, Notification, Request
from zabby.core.types import ServerState
from zabby.membership import Member, Membership
from zabby.opcodes import OpCode
from zabby.sim.checkers import FORGED_CXID
from zabby.sim.cluster import Cluster, Node

OUTSIDER_SIDS = range(90, 100)
KINDS = ("outsider-vote", "stale-vote", "impossible-vote", "outsider-learner")


def forge(cluster: Cluster, rng: random.Random) -> None:
    """One forgery, kind, target and claimed sender drawn from ``rng``."""
    target = cluster.nodes[rng.choice(sorted(cluster.nodes))]
    if not target.alive:
        return
    kind = rng.choice(KINDS)
    sender, messages = _FORGERIES[kind](cluster, target, rng)
    cluster.log(f"forged {kind} from {sender} to server {target.sid}: {messages}")
    cluster.stats["forged"] += 1
    for message in messages:
        target.engine.receive(sender, message)
    cluster.drain(target)


def _membership_of(sids: list[int], version: int) -> str:
    return Membership.of(tuple(Member(sid, "sim", sid, sid, False) for sid in sids), version).text()


def _vote(target: Node, config: str, zxid: int, state: ServerState = ServerState.LOOKING) -> Notification:
    """A vote for ``target`` whose sender says it logged up to ``zxid``."""
    peer = target.peer
    return Notification(leader=target.sid, zxid=zxid, peer_epoch=peer.current_epoch, election_epoch=peer.logical_clock,
                        state=state.value, config=config, proposed=config, logged=zxid)  # fmt: skip


def _outsider_vote(cluster: Cluster, target: Node, rng: random.Random) -> tuple[int, list[Message]]:
    outsider = rng.choice(OUTSIDER_SIDS)
    version = rng.choice((target.peer.membership.version + 1, 2**40))
    state = rng.choice((ServerState.LOOKING, ServerState.LEADING))
    return outsider, [_vote(target, _membership_of([outsider], version), 2**50, state)]


def _member(target: Node, rng: random.Random) -> int:
    members = sorted(target.peer.membership.sids - {target.sid}) or [target.sid]
    return rng.choice(members)


def _stale_vote(cluster: Cluster, target: Node, rng: random.Random) -> tuple[int, list[Message]]:
    member = _member(target, rng)
    if target.peer.membership.version == 0:
        return _impossible_vote(cluster, target, rng)
    version = max(0, target.peer.membership.version - rng.randint(1, 3))
    return member, [_vote(target, _membership_of([member], version), target.peer.last_logged)]


def _impossible_vote(cluster: Cluster, target: Node, rng: random.Random) -> tuple[int, list[Message]]:
    member = _member(target, rng)
    zxid = target.peer.last_logged
    return member, [_vote(target, _membership_of([member], zxid + rng.randint(1, 2**20)), zxid)]


def _outsider_learner(cluster: Cluster, target: Node, rng: random.Random) -> tuple[int, list[Message]]:
    outsider = rng.choice(OUTSIDER_SIDS)
    sessions = sorted(target.tree.sessions) or [0]
    session = rng.choice(sessions)
    write = rng.choice((
        (OpCode.SET_DATA, ("/", b"forged", -1)),
        (OpCode.CLOSE_SESSION, ()),
        (OpCode.CREATE, ("/forged", b"", [[31, "world", "anyone"]], 0, None)),
    ))  # fmt: skip
    peer = target.peer
    return outsider, [
        FollowerInfo(accepted_epoch=peer.accepted_epoch, last_zxid=peer.last_logged, observer=False, config_version=0),
        Ack(zxid=peer.last_logged + rng.randint(0, 5)),
        Request(session_id=session, cxid=FORGED_CXID, op=int(write[0]), args=write[1], auth_ids=(("digest", "super:forged"),), superuser=True),
    ]  # fmt: skip


_FORGERIES = {
    "outsider-vote": _outsider_vote,
    "stale-vote": _stale_vote,
    "impossible-vote": _impossible_vote,
    "outsider-learner": _outsider_learner,
}
assert set(_FORGERIES) == set(KINDS)
