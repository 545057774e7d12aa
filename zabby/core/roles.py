"""The roles a Peer takes, each with its own state (etcd raft's ``StateLeader`` & co).

Theory of operation: a Peer is always in exactly one role, and the role object holds
everything that lives only as long as the role does: the election of a LOOKING server, the
leader's learners, epoch and ack sets, a learner's leader, phase and commit point.  When the
role changes, ``Peer`` builds the new role object and chooses the ``step`` and ``tick`` that
act on it (etcd raft's ``becomeLeader`` setting ``r.step = stepLeader`` and
``r.tick = r.tickHeartbeat``): ``zabby.core.looking``, ``zabby.core.leader`` and
``zabby.core.learner``.  Nothing is kept in nullable fields of the Peer.

The roles change only as ``TRANSITIONS`` allows: from LOOKING to any role (LOOKING again is
a new vote), from any other role back to LOOKING.  Anything else is a bug in zabby and
raises ``InvariantError`` (etcd raft panics: "invalid transition [leader -> candidate]").

This module holds data only, no protocol: the step functions live with the phase they
implement (``discovery``, ``sync``, ``broadcast``, ``rounds``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from zabby.core.election import Election
from zabby.core.messages import AckEpoch, FollowerInfo, Sync
from zabby.core.ready import SoftState
from zabby.core.types import ServerState, ZabPhase
from zabby.errors import InvariantError

_BROADCAST = ZabPhase.BROADCAST  # a global: read for every Ready's soft state (see zabby.opcodes)

TRANSITIONS: dict[ServerState, frozenset[ServerState]] = {
    ServerState.LOOKING: frozenset(ServerState),
    ServerState.LEADING: frozenset({ServerState.LOOKING}),
    ServerState.FOLLOWING: frozenset({ServerState.LOOKING}),
    ServerState.OBSERVING: frozenset({ServerState.LOOKING}),
}


def check_transition(old: ServerState, new: ServerState) -> None:
    """Raises:
    InvariantError: ``old`` → ``new`` is no transition of ``TRANSITIONS``."""
    if new not in TRANSITIONS[old]:
        raise InvariantError(f"invalid transition [{old.value} -> {new.value}]")


class Role:
    """What every role answers; the defaults are a LOOKING server's."""

    __slots__ = ()
    state: ClassVar[ServerState]

    def soft_state(self, sid: int, epoch: int) -> SoftState:
        return SoftState(self.state, ZabPhase.ELECTION, None, epoch, False)

    def vote_leader(self, sid: int) -> int:
        """The leader our vote names outside an election (-1: none, we are looking)."""
        return -1

    def links(self) -> Iterable[int]:
        """The servers this role holds links with beyond the peers (a leader's learners, a
        learner's leader)."""
        return ()

    def links_to_drop(self, hand_over: bool) -> list[int]:
        """The links to close when leaving this role."""
        return []


@dataclass(slots=True)
class LookingRole(Role):
    """LOOKING: fast leader election (``zabby.core.looking``)."""

    state: ClassVar[ServerState] = ServerState.LOOKING
    election: Election
    notify_interval: int
    notify_at: int = 0
    early_followers: dict[int, FollowerInfo] = field(default_factory=dict)  # FOLLOWERINFOs from those that decided before us


@dataclass(slots=True)
class LearnerInfo:
    """What the leader knows of one connected learner."""

    observer: bool
    accepted_epoch: int
    heard_tick: int
    acked_epoch: bool = False
    synced: bool = False  # NEWLEADER acked
    uptodate: bool = False
    acked: int = 0
    newleader_point: int = 0  # the leader's last zxid when it sent NEWLEADER
    epoch_ack: AckEpoch | None = None  # its ACKEPOCH, until the leader has a quorum of them and syncs it
    round_acked: int = 0  # the highest confirmation round it answered
    logged_sent: int = 0  # the last LOGGED sent to it: it commits up to there without a COMMIT


@dataclass(slots=True)
class LeaderRole(Role):
    """LEADING: discovery, sync and broadcast for every learner (``zabby.core.leader``)."""

    state: ClassVar[ServerState] = ServerState.LEADING
    epoch: int = 0  # the new epoch, 0 until a quorum sent FOLLOWERINFO
    previous_epoch: int = 0  # our currentEpoch and last zxid when elected: a learner
    previous_last: int = 0  # ahead of these means we must not lead
    learners: dict[int, LearnerInfo] = field(default_factory=dict)
    newleader_acks: set[int] = field(default_factory=set)
    established: bool = False
    established_by: frozenset[int] = frozenset()  # the voters whose NEWLEADER acks established us
    started_tick: int = 0
    last_proposed: int = 0
    commit_point: int = 0
    self_acked: int = 0
    syncs: deque[tuple[int, int, int, Sync]] = field(default_factory=deque)  # (zxid needed, round needed, sid, sync)
    round: int = 0  # the last confirmation round started (see zabby.core.rounds)
    round_wanted: bool = False  # a sync waits for a round not started yet

    def soft_state(self, sid: int, epoch: int) -> SoftState:
        serving = self.established
        phase = _BROADCAST if serving else (ZabPhase.SYNCHRONIZATION if self.epoch else ZabPhase.DISCOVERY)
        return SoftState(self.state, phase, sid, epoch, serving)

    def vote_leader(self, sid: int) -> int:
        return sid

    def links(self) -> Iterable[int]:
        return self.learners

    def links_to_drop(self, hand_over: bool) -> list[int]:
        """A leader handing over keeps its learners' links: the COMMIT naming the designated
        leader is queued on them, and each learner closes its link once it has it (as
        ZooKeeper's followers do)."""
        return [] if hand_over else list(self.learners)


@dataclass(slots=True)
class LearnerRole(Role):
    """FOLLOWING or OBSERVING a leader (``zabby.core.learner``)."""

    leader: int
    phase: ZabPhase = ZabPhase.DISCOVERY
    started_tick: int = 0
    heard_tick: int = 0
    commit_point: int = 0
    acked: bool = False  # NEWLEADER acked: later proposals are acked one by one
    sync_mode_seen: bool = False  # the DIFF/TRUNC/SNAP of this sync arrived
    snapshot_due: int | None = None  # SNAP received: the shell must install it before the next step
    touched: set[int] = field(default_factory=set)

    def soft_state(self, sid: int, epoch: int) -> SoftState:
        return SoftState(self.state, self.phase, self.leader, epoch, self.phase == _BROADCAST)

    def vote_leader(self, sid: int) -> int:
        return self.leader

    def links(self) -> Iterable[int]:
        return (self.leader,)

    def links_to_drop(self, hand_over: bool) -> list[int]:
        return [self.leader]


class FollowerRole(LearnerRole):
    """FOLLOWING: a voting learner; its acks count."""

    __slots__ = ()
    state: ClassVar[ServerState] = ServerState.FOLLOWING


class ObserverRole(LearnerRole):
    """OBSERVING: a learner that never votes; it is told of commits by INFORM."""

    __slots__ = ()
    state: ClassVar[ServerState] = ServerState.OBSERVING
