"""What a process on the peer ports can make a server do by claiming a server id (issue 43):
votes change memberships only from members, with versions they could have logged; forwarded
writes are taken only from members that completed sync, and never as a superuser on their
word.  (The forging nemesis of the simulator, zabby.sim.forge, does the same at random.)"""

from __future__ import annotations

from tests.core.scenario import Scenario
from tests.core.test_peer_interactions import drain, txn, z
from zabby.core.messages import FollowerInfo, Notification, Request
from zabby.core.peer import DurableState, Peer, PeerConfig
from zabby.core.types import ServerState
from zabby.membership import Member, Membership
from zabby.opcodes import OpCode

VOTERS = frozenset({1, 2, 3})


def _looking() -> Peer:
    peer = Peer(PeerConfig(sid=1, voters=VOTERS), DurableState(1, 1, z(1, 5), z(1, 5), (txn(1, 5),)))
    drain(peer)
    assert peer.state == ServerState.LOOKING
    return peer


def _membership(sids: list[int], version: int) -> str:
    return Membership.of([Member(sid, "", 0, 0) for sid in sids], version).text()


def test_a_vote_from_a_server_no_membership_names_changes_no_membership() -> None:
    """One vote from server 99 carrying a membership of its own was adopted (and written to
    disk): the three servers could never start again."""
    peer = _looking()
    forged = _membership([99], 2**40)
    peer.step(99, Notification(leader=99, zxid=2**50, peer_epoch=9, election_epoch=1, state="looking", config=forged, proposed=forged, logged=2**50))
    drain(peer)
    assert peer.membership.version == 0 and peer.membership.voters == VOTERS and peer.hinted is None


def test_a_members_vote_changes_the_membership_only_to_one_it_could_have_logged() -> None:
    peer = _looking()
    later = _membership([1, 2, 3, 4], z(1, 9))
    peer.step(2, Notification(leader=2, zxid=z(1, 9), peer_epoch=1, election_epoch=1, state="looking", config=later, logged=z(1, 8)))
    assert peer.membership.version == 0  # later than what its sender says it logged: impossible
    peer.step(2, Notification(leader=2, zxid=z(1, 9), peer_epoch=1, election_epoch=1, state="looking", config="garbage", logged=z(1, 9)))
    assert peer.membership.version == 0  # not a membership at all
    peer.step(2, Notification(leader=2, zxid=z(1, 9), peer_epoch=1, election_epoch=1, state="looking", config=later, logged=z(1, 9)))
    assert peer.membership.version == z(1, 9) and 4 in peer.membership.voters  # a member that missed nothing of it


def _serving_leader() -> tuple[Scenario, Peer]:
    c = Scenario(voters=3)
    leader = c.run_until(c.serving_leader)
    c.run_until(c.converged)
    return c, leader.peer


def _forwarded(peer: Peer, sender: int) -> list[tuple[int, Request]]:
    request = Request(session_id=0, cxid=1, op=int(OpCode.SET_DATA), args=("/", b"x", -1), auth_ids=(), superuser=True)
    peer.step(sender, request)
    return list(peer.ready().requests)


def test_the_leader_takes_forwarded_writes_only_from_members_that_completed_sync() -> None:
    c, leader = _serving_leader()
    follower = min(sid for sid in c.cluster.nodes if sid != leader.sid)
    assert _forwarded(leader, follower)  # a member in broadcast: taken
    leader.step(99, FollowerInfo(accepted_epoch=leader.accepted_epoch, last_zxid=leader.last_logged))
    assert not _forwarded(leader, 99)  # a learner no membership names (it may sync, not write)
    leader.step(follower, FollowerInfo(accepted_epoch=leader.accepted_epoch, last_zxid=leader.last_logged))
    assert not _forwarded(leader, follower)  # the same id again, right after FOLLOWERINFO: not synced
