"""Roles (zabby.core.roles): each role's step and tick are chosen when the role changes, and
an impossible change, or an input the role cannot take, raises InvariantError (etcd raft
panics: "invalid transition [leader -> candidate]")."""

from __future__ import annotations

import pytest

from zabby.core import leader, learner, looking
from zabby.core.election import Vote
from zabby.core.messages import FollowerInfo, Notification, Request, Sync
from zabby.core.peer import DurableState, Peer, PeerConfig
from zabby.core.roles import TRANSITIONS, FollowerRole, LeaderRole, LookingRole, check_transition
from zabby.core.types import ServerState
from zabby.errors import InvariantError
from zabby.tree.txns import Txn, make_zxid

VOTERS = frozenset({1, 2, 3})


def drain(peer: Peer) -> None:
    while peer.has_ready():
        peer.advance(peer.ready())


def standalone() -> Peer:
    """A quorum of one: LEADING and established from the start."""
    peer = Peer(PeerConfig(sid=1, voters=frozenset({1})), DurableState())
    drain(peer)
    assert peer.state == ServerState.LEADING and peer.established_leader
    return peer


def follower() -> Peer:
    """Server 2, following server 1 (in discovery: FOLLOWERINFO sent)."""
    peer = Peer(PeerConfig(sid=2, voters=VOTERS), DurableState())
    drain(peer)
    vote = {"leader": 1, "zxid": 0, "peer_epoch": 0, "election_epoch": peer.logical_clock}
    peer.step(1, Notification(**vote, state="leading"))
    peer.step(3, Notification(**vote, state="following"))
    drain(peer)
    assert peer.state == ServerState.FOLLOWING
    return peer


@pytest.mark.parametrize("old", list(ServerState))
@pytest.mark.parametrize("new", list(ServerState))
def test_only_an_election_changes_a_role_and_any_role_may_look_again(old: ServerState, new: ServerState) -> None:
    allowed = old == ServerState.LOOKING or new == ServerState.LOOKING
    assert (new in TRANSITIONS[old]) == allowed
    if allowed:
        check_transition(old, new)
    else:
        with pytest.raises(InvariantError, match=f"invalid transition \\[{old.value} -> {new.value}\\]"):
            check_transition(old, new)


def test_a_follower_cannot_become_leader_without_an_election() -> None:
    peer = follower()
    role = peer.role
    with pytest.raises(InvariantError, match="invalid transition \\[following -> leading\\]"):
        peer._become_leader({})
    with pytest.raises(InvariantError, match="an election decided while following"):
        peer._decide(Vote(2, 0, 0))
    assert peer.role is role  # nothing changed


def test_a_leader_cannot_become_a_learner_without_an_election() -> None:
    peer = standalone()
    with pytest.raises(InvariantError, match="invalid transition \\[leading -> observing\\]"):
        peer._become_learner(2, observes=True)
    with pytest.raises(InvariantError, match="an election decided while leading"):
        peer._decide(Vote(1, 0, 1))


def test_the_step_and_tick_are_the_new_roles() -> None:
    peer = Peer(PeerConfig(sid=2, voters=VOTERS), DurableState())
    assert isinstance(peer.role, LookingRole) and peer._step.func is looking.step and peer._tick.func is looking.tick  # type: ignore[attr-defined]
    peer = follower()
    assert isinstance(peer.role, FollowerRole) and peer._step.func is learner.step and peer._step.args == (peer, peer.role)  # type: ignore[attr-defined]
    peer = standalone()
    assert isinstance(peer.role, LeaderRole) and peer._tick.func is leader.tick and peer._tick.args == (peer, peer.role)  # type: ignore[attr-defined]


def test_inputs_a_role_cannot_take_raise() -> None:
    leading, following = standalone(), follower()
    with pytest.raises(InvariantError, match="only a learner forwards requests"):
        leading.forward(Request(session_id=1, cxid=1, op=1, args=()))
    with pytest.raises(InvariantError, match="snapshot installed outside of a sync"):
        leading.snapshot_installed(make_zxid(1, 0))
    with pytest.raises(InvariantError, match="not an established leader"):
        following.propose([Txn(make_zxid(1, 1), 0, 1, 0, 1, ())])
    with pytest.raises(InvariantError, match="not an established leader"):
        _ = following.next_zxid
    following.client_sync(Sync(session_id=1, cxid=2))  # a learner forwards a sync: no error


def test_a_follower_ahead_in_membership_that_chose_us_early_makes_us_look_again() -> None:
    """A FOLLOWERINFO kept while we looked (its sender decided first) names a membership
    newer than every one we know: leading, we look again at once.  The Peer of one class
    went on to pick an epoch as a leader it no longer was, and failed an assertion."""
    peer = Peer(PeerConfig(sid=3, voters=VOTERS), DurableState())
    drain(peer)
    peer.step(2, FollowerInfo(accepted_epoch=0, last_zxid=0, observer=False, config_version=5))
    clock = peer.logical_clock
    for sid in (1, 2):
        peer.step(sid, Notification(leader=3, zxid=0, peer_epoch=0, election_epoch=clock, state="looking"))
    for _ in range(peer.config.finalize_wait_ticks):
        peer.tick()
    assert peer.state == ServerState.LOOKING and peer.logical_clock == clock + 1
