"""Peer: one server's Zab state machine (etcd raft's RawNode analogue).

Theory of operation: the shell feeds inputs (``tick``, ``step(sid, message)``, ``propose``,
``link_down``, ``snapshot_installed``, client forwards) and drains ``ready()``; it executes
each Ready in the documented order (zabby.core.ready) and then calls ``advance``.  Nothing in
here waits: a phase change happens inside the step that completes it, and every timeout is
a count of ticks.

Roles (zabby.core.roles): the Peer is a thin dispatcher over ``self.role``, one of
``LookingRole``, ``LeaderRole``, ``FollowerRole`` and ``ObserverRole``, each holding the state
that lives as long as the role.  The ``_become_*`` methods build the new role and choose the
``step`` and ``tick`` that act on it, as etcd raft's ``becomeLeader`` sets ``r.step =
stepLeader``: ``zabby.core.looking`` (fast leader election), ``zabby.core.leader`` (discovery,
sync, broadcast for every learner) and ``zabby.core.learner`` (the follower/observer side).
An impossible role change (LEADING → FOLLOWING, say, without an election between) raises
``InvariantError``; so does an input the role cannot take (``propose`` to a learner,
``forward`` from a leader).  Votes (``Notification``) reach every role
(``looking.step_notification``).

The protocol lives with its phase: ``discovery`` (FOLLOWERINFO, LEADERINFO, ACKEPOCH),
``sync`` (DIFF/TRUNC/SNAP, NEWLEADER, UPTODATE), ``broadcast`` (PROPOSAL, ACK, COMMIT,
INFORM, LOGGED), ``rounds`` (the leader's linearizable sync), ``membership`` (dynamic
reconfiguration's committed, proposed and hinted memberships).  The state they share (epochs,
log, tree point, the Ready being built) is the ``Replica`` this class extends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from zabby.core import broadcast, discovery, leader, learner, looking, rounds, sync
from zabby.core.election import Election, Vote
from zabby.core.messages import FollowerInfo, Message, Notification, Request, Revalidate, Sync
from zabby.core.ready import Ready, SoftState
from zabby.core.replica import DurableState, PeerConfig, Replica, static_membership
from zabby.core.roles import FollowerRole, LeaderRole, LearnerRole, LookingRole, ObserverRole, check_transition
from zabby.core.types import ServerState
from zabby.errors import InvariantError
from zabby.tree.txns import Txn

__all__ = ["DurableState", "LearnerStatus", "Peer", "PeerConfig", "PeerStatus", "static_membership"]


@dataclass(frozen=True, slots=True)
class LearnerStatus:
    sid: int
    observer: bool
    in_stream: bool  # ACKEPOCH received: the leader's packets to it are in order from here
    synced: bool  # NEWLEADER acked
    uptodate: bool
    acked_zxid: int


@dataclass(frozen=True, slots=True)
class PeerStatus:
    """A frozen view of the core for the shell, the four-letter words and tests."""

    soft_state: SoftState
    accepted_epoch: int
    current_epoch: int
    last_logged: int
    applied: int
    learners: tuple[LearnerStatus, ...] = ()
    pending_syncs: int = 0  # the leader's: zxids that learners' syncs wait for (ZooKeeper's pendingSyncs keys)


class Peer(Replica):
    def __init__(self, config: PeerConfig, durable: DurableState) -> None:
        super().__init__(config, durable)
        self._step: Callable[[int, Message], None]  # the role's, chosen with it
        self._tick: Callable[[], None]
        self.leader_silent_ticks = 0  # when it last went LOOKING, how long its leader had been silent (0: it led or looked)
        self._look(0, {})

    # ----------------------------------------------------------------- the role, as the shell sees it
    @property
    def state(self) -> ServerState:
        return self.role.state

    @property
    def election(self) -> Election | None:
        """The election while LOOKING (for tests)."""
        role = self.role
        return role.election if isinstance(role, LookingRole) else None

    @property
    def leader(self) -> LeaderRole | None:
        """The leader's state while LEADING (for the shell's checks and tests)."""
        role = self.role
        return role if isinstance(role, LeaderRole) else None

    @property
    def learner(self) -> LearnerRole | None:
        """The learner's state while FOLLOWING or OBSERVING (for the shell's checks and tests)."""
        role = self.role
        return role if isinstance(role, LearnerRole) else None

    @property
    def linked(self) -> frozenset[int]:
        """Every server we may hold a link with: the peers, our leader, and our learners (a
        joiner that no membership names yet among them)."""
        links = set(self.peers)
        links.update(self.role.links())
        return frozenset(links - {self.sid})

    # ----------------------------------------------------------------- shell API
    def tick(self) -> None:
        self.now += 1
        self._tick()

    def step(self, sender: int, message: Message) -> None:
        if message.__class__ is Notification:  # the exact class, as decoded: no isinstance per message
            looking.step_notification(self, sender, message)
        else:
            self._step(sender, message)

    def link_down(self, sid: int) -> None:
        role = self.role
        if isinstance(role, LookingRole):
            # The FOLLOWERINFO kept from that connection is stale now: leading with it would
            # send a LEADERINFO the learner never asked for, and a second sync on its next
            # connection (sim seed 114).
            role.early_followers.pop(sid, None)
        elif isinstance(role, LeaderRole):
            discovery.drop_learner(self, role, sid)
        elif isinstance(role, LearnerRole) and sid == role.leader:
            self._become_looking()

    @property
    def next_zxid(self) -> int:
        return broadcast.next_zxid(self._established_leader())

    def propose(self, txns: list[Txn]) -> None:
        """Leader only: log and broadcast txns whose zxids follow ``next_zxid`` in order (and
        commit them too, in the same Ready, where the leader alone is a quorum).

        Raises:
            InvariantError: not an established leader, or a zxid out of order.
        """
        broadcast.propose(self, self._established_leader(), txns)

    def client_sync(self, sync: Sync) -> None:
        """Answer (in ``sync_replies``) once everything the leader proposed so far is applied."""
        role = self.role
        if isinstance(role, LeaderRole):
            rounds.request(self._established_leader(), self.sid, sync)
        elif isinstance(role, LearnerRole):
            self._send(role.leader, sync)

    def forward(self, request: Request | Revalidate) -> None:
        """A client's write to the leader: early, as it promises nothing about this server's
        disk (it need not wait for the fsync of the proposals logged before it).  Always
        early, even behind a regular message, so that forwards never overtake each other; a
        forward overtaking an ACK or a ping's answer changes nothing, and overtaking a sync
        only makes the sync wait for it too.

        Raises:
            InvariantError: not a learner.
        """
        role = self.role
        if not isinstance(role, LearnerRole):
            raise InvariantError("only a learner forwards requests")
        self._ready.early_messages.append((role.leader, request))

    def touch_sessions(self, session_ids: list[int]) -> None:
        role = self.role
        if isinstance(role, LearnerRole):
            role.touched.update(session_ids)

    def snapshot_installed(self, zxid: int) -> None:
        """The shell replaced the tree with the leader's snapshot at ``zxid`` and saved it.

        Raises:
            InvariantError: no sync of a learner waits for that snapshot.
        """
        role = self.role
        if not isinstance(role, LearnerRole):
            raise InvariantError("snapshot installed outside of a sync")
        sync.snapshot_installed(self, role, zxid)

    def expects_snapshot(self, sid: int, zxid: int) -> bool:
        """Is a snapshot at ``zxid`` from ``sid`` still what this learner's sync waits for?"""
        role = self.role
        return isinstance(role, LearnerRole) and role.leader == sid and role.snapshot_due == zxid

    def heard_from(self, sid: int) -> None:
        """The shell received part of a stream the core does not see (snapshot chunks)."""
        role = self.role
        if isinstance(role, LearnerRole) and sid == role.leader:
            role.heard_tick = self.now

    def has_ready(self) -> bool:
        role = self.role
        if isinstance(role, LeaderRole) and role.round_wanted:
            return True
        return not self._ready.is_empty() or self._ready.soft_state != role.soft_state(self.sid, self.current_epoch)

    def ready(self) -> Ready:
        role = self.role
        if isinstance(role, LeaderRole) and role.round_wanted:
            rounds.start(self, role)  # every sync of this Ready shares the round
        ready = self._ready
        ready.soft_state = role.soft_state(self.sid, self.current_epoch)
        self._ready = Ready(soft_state=ready.soft_state)
        unsent = self._unsent_sids
        for sid in self._regular_sids:
            unsent[sid] = unsent.get(sid, 0) + 1
        self._regular_sids = set()
        return ready

    def advance(self, ready: Ready) -> None:
        """The shell did everything ``ready`` asked (its messages are sent); the leader's own
        log append now counts.  The shell may take more Readys before advancing this one, and
        advances each once."""
        if ready.messages:
            unsent = self._unsent_sids
            for sid in {sid for sid, _ in ready.messages}:
                left = unsent.pop(sid, 0) - 1
                if left > 0:
                    unsent[sid] = left
        role = self.role
        if ready.append and isinstance(role, LeaderRole):
            logged = ready.append[-1].zxid
            if logged > role.self_acked:  # a quorum of one counted it when proposing
                role.self_acked = logged
                broadcast.maybe_commit(self, role)

    def status(self) -> PeerStatus:
        learners: tuple[LearnerStatus, ...] = ()
        pending_syncs = 0
        role = self.role
        if isinstance(role, LeaderRole):
            learners = tuple(
                LearnerStatus(sid, info.observer, info.acked_epoch, info.synced, info.uptodate, info.acked)
                for sid, info in sorted(role.learners.items())
            )  # fmt: skip
            pending_syncs = len({zxid for zxid, _, sid, _ in role.syncs if sid != self.sid})
        return PeerStatus(self.soft_state(), self.accepted_epoch, self.current_epoch, self.last_logged, self.applied, learners, pending_syncs)

    @property
    def established_leader(self) -> bool:
        """Leading, with a quorum synced: may propose (``next_zxid``, ``propose``)."""
        role = self.role
        return isinstance(role, LeaderRole) and role.established

    def streaming_learners(self) -> list[int]:
        """Leader: the learners whose stream is in order (ACKEPOCH seen), cheaply."""
        role = self.role
        if not isinstance(role, LeaderRole):
            return []
        return [sid for sid, info in role.learners.items() if info.acked_epoch]

    def soft_state(self) -> SoftState:
        return self.role.soft_state(self.sid, self.current_epoch)

    # ----------------------------------------------------------------- role changes
    def _become_looking(self, vote_for: int = 0, hand_over: bool = False) -> None:
        """LOOKING; the first vote goes to ``vote_for`` when a reconfig designated a leader.
        A leader handing over keeps its learners' links (``LeaderRole.links_to_drop``).
        LOOKING again while LOOKING is a new vote: the followers that chose us stay known."""
        old = self.role
        check_transition(old.state, ServerState.LOOKING)
        self.leader_silent_ticks = self.now - old.heard_tick if isinstance(old, LearnerRole) else 0
        self._ready.drop_links.extend(old.links_to_drop(hand_over))
        self._look(vote_for, old.early_followers if isinstance(old, LookingRole) else {})

    def _look(self, vote_for: int, early_followers: dict[int, FollowerInfo]) -> None:
        self.logical_clock += 1
        own = Vote(vote_for or self.sid, self.last_logged, self.current_epoch)
        # Joining a leader already established takes a quorum of the memberships our log
        # holds, not of a vote's hint: a server the hint alone makes its only voter would
        # wait for its own word forever (the soak's seed 4578, with reconfigs).
        logged = self.members.quorums(hinted=False) if self.hinted else None
        election = Election(self.sid, self.members.quorum, self.logical_clock, own, self.config.finalize_wait_ticks,
                            self.members.candidates(), logged, abstain=self.repairing)  # fmt: skip
        role = LookingRole(election=election, notify_interval=self.config.notify_interval_ticks_min, early_followers=early_followers)
        self.role, self._step, self._tick = role, partial(looking.step, self, role), partial(looking.tick, self, role)
        looking.broadcast_notification(self, role)
        if self.members.quorum.voters == {self.sid} and not self.repairing:
            self._decide(election.proposal)

    def _decide(self, vote: Vote) -> None:
        """Raises:
        InvariantError: not LOOKING (only an election decides)."""
        role = self.role
        if not isinstance(role, LookingRole):
            raise InvariantError(f"an election decided while {role.state.value}")
        if role.election.joined:
            self.members.drop_hint()  # joined by our log's memberships' word: they say our role too
        observes = self.members.observes()  # a vote's hint may make us a voter: then we follow
        self.members.drop_hint()  # the election is over: our memberships are our log's again
        if vote.leader == self.sid:
            self._become_leader(role.early_followers)
        else:
            self._become_learner(vote.leader, observes)

    def _become_leader(self, early_followers: dict[int, FollowerInfo]) -> None:
        check_transition(self.role.state, ServerState.LEADING)
        role = LeaderRole(started_tick=self.now, previous_epoch=self.current_epoch, previous_last=self.last_logged)
        self.role, self._step, self._tick = role, partial(leader.step, self, role), partial(leader.tick, self, role)
        for sid, info in sorted(early_followers.items()):
            discovery.follower_info(self, role, sid, info)
            if self.role is not role:
                return  # that follower showed we must not lead: we look again
        discovery.maybe_pick_epoch(self, role)

    def _become_learner(self, leader_sid: int, observes: bool) -> None:
        kind = ObserverRole if observes else FollowerRole
        check_transition(self.role.state, kind.state)
        role = kind(leader=leader_sid, started_tick=self.now, heard_tick=self.now, commit_point=self.applied)
        self.role, self._step, self._tick = role, partial(learner.step, self, role), partial(learner.tick, self, role)
        self._send(leader_sid, FollowerInfo(accepted_epoch=self.accepted_epoch, last_zxid=self.last_logged, observer=observes,
                                            config_version=self.membership.version))  # fmt: skip

    def _established_leader(self) -> LeaderRole:
        role = self.role
        if not isinstance(role, LeaderRole) or not role.established:
            raise InvariantError("not an established leader")
        return role
