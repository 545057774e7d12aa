"""Peer: one server's Zab state machine (etcd raft's RawNode analogue).

Theory of operation: the shell feeds inputs (``tick``, ``step(sid, message)``, ``propose``,
``link_down``, ``snapshot_installed``, client forwards) and drains ``ready()``; it executes
each Ready in the documented order (zabby.core.ready) and then calls ``advance``.  Nothing in
here waits: a phase change happens inside the step that completes it, and every timeout is
a count of ticks.

Roles: ``_step_looking`` (fast leader election), ``_step_leader`` (discovery, sync,
broadcast for every learner), ``_step_learner`` (the follower/observer side).  ``_become_*``
switches roles and resets the role's state.

Sync (ZooKeeper's ``sync``, made linearizable as etcd's ReadIndex): the leader answers a
sync only once everything it had proposed when the sync arrived is committed *and* a quorum
has confirmed, in a round started after the sync arrived, that it still leads.  A round is a
PING carrying a round number that voters echo back; every sync that arrives before the next
``ready()`` shares one round.  A leader cut off from its quorum, which has not noticed yet,
thus cannot answer a sync from a stale tree (ZOOKEEPER-1675): it steps down first.

Membership (dynamic reconfiguration, as ZooKeeper 3.5+): ``membership`` is the committed
one; a logged RECONFIG txn makes ``proposed`` the membership it names, and until it commits,
every decision needs a quorum of both (``Quorums``).  It commits like any txn (acked by a
quorum of both); the commit activates it everywhere.  A server that is not a voter of the
committed membership may still follow (its acks count where it votes), which is how a new
server joins before the reconfig that adds it.  A leader the new membership leaves out hands
over: the COMMIT that activates it names a designated leader, for whom every learner votes
first in the election that follows.

Commit by a follower (zabby's own; ZooKeeper waits for the COMMIT): Zab commits a txn once
a quorum has logged it, and the COMMIT only tells.  Where the leader and one follower make a
quorum (three voters), the leader, once its own log holds a txn that no follower has acked
yet, says so (``Logged``) instead of the COMMIT to come: the follower, which holds the
proposals before it, commits up to there at once, without the round trip of its ACK and
the COMMIT.  Not while a reconfig is proposed: quorums are then of two memberships, and
its COMMIT activates the new one.

Durable state, as the log and epoch files hold it: ``accepted_epoch``, ``current_epoch``,
``last_logged`` (the log's last zxid).  ``applied`` is the tree's last zxid; txns between
them (``pending``) are logged but not yet known to be committed, except after a restart,
where recovery applied the whole log (a TRUNC then reloads the tree).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace

from zabby.core.election import Election, Vote
from zabby.core.history import History
from zabby.core.messages import (
    Ack, AckEpoch, Commit, Diff, FollowerInfo, Inform, LeaderInfo, Message, NewLeader,
    Logged, Notification, Ping, Proposal, Request, Snap, Sync, Trunc, UpToDate,
)  # fmt: skip
from zabby.core.quorum import Quorums
from zabby.core.ready import Ready, SoftState
from zabby.core.sync import choose_sync
from zabby.core.types import ServerState, SyncMode, ZabPhase
from zabby.errors import InvariantError
from zabby.membership import Member, Membership, MembershipError
from zabby.opcodes import OpCode
from zabby.tree.txns import ZXID_COUNTER_LAST, Txn, follows, make_zxid, zxid_counter, zxid_epoch


@dataclass(frozen=True, slots=True)
class PeerConfig:
    sid: int
    voters: frozenset[int]
    observers: frozenset[int] = frozenset()
    init_limit_ticks: int = 200
    sync_limit_ticks: int = 100
    ping_interval_ticks: int = 20
    finalize_wait_ticks: int = 4
    notify_interval_ticks_min: int = 4
    notify_interval_ticks_max: int = 40
    commit_log_count: int = 500
    zxid_counter_last: int = ZXID_COUNTER_LAST  # the leader steps down once it proposed this counter

    @property
    def peers(self) -> frozenset[int]:
        return (self.voters | self.observers) - {self.sid}


@dataclass(frozen=True, slots=True)
class DurableState:
    accepted_epoch: int = 0
    current_epoch: int = 0
    last_logged: int = 0
    applied: int = 0
    history: tuple[Txn, ...] = ()  # the log's tail, for DIFF syncs (newest commit_log_count)
    snapshot_zxid: int = 0  # the newest snapshot on disk: a TRUNC below it cannot just cut the log
    snapshot_wanted: bool = False  # the shell doubts its tree: the next sync must be a SNAP
    membership: Membership | None = None  # committed; None: the static one of PeerConfig
    proposed: Membership | None = None  # logged in a RECONFIG txn not known to be committed


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
class LeaderState:
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
    round: int = 0  # the last confirmation round started (see Peer: sync)
    round_wanted: bool = False  # a sync waits for a round not started yet


@dataclass(slots=True)
class LearnerState:
    leader: int
    phase: ZabPhase = ZabPhase.DISCOVERY
    started_tick: int = 0
    heard_tick: int = 0
    commit_point: int = 0
    acked: bool = False  # NEWLEADER acked: later proposals are acked one by one
    sync_mode_seen: bool = False  # the DIFF/TRUNC/SNAP of this sync arrived
    snapshot_due: int | None = None  # SNAP received: the shell must install it before the next step
    touched: set[int] = field(default_factory=set)


class Peer:
    def __init__(self, config: PeerConfig, durable: DurableState) -> None:
        self.config = config
        self.sid = config.sid
        self.membership = durable.membership or static_membership(config)
        self.proposed = durable.proposed
        self.hinted: Membership | None = None  # a vote's proposed membership, for the next election only
        self._disowned_at: int | None = None  # the committed version whose voters, as peers know them, leave us out
        self._disowned_by_sids: frozenset[int] = frozenset()  # that version's servers, as they know it
        self.quorum = self._quorums()
        self.accepted_epoch = durable.accepted_epoch
        self.current_epoch = durable.current_epoch
        self.last_logged = durable.last_logged
        self.applied = durable.applied
        # A snapshot installed from a leader that never got established may hold txns a later
        # leader truncates (ZooKeeper's ZOOKEEPER-1549).  Cutting the log cannot undo them, so a
        # TRUNC below the newest snapshot is refused and the next sync asks for a SNAP instead.
        self.snapshot_zxid = durable.snapshot_zxid
        self.snapshot_wanted = durable.snapshot_wanted
        self.history = History(config.commit_log_count)
        self.history.extend(durable.history)
        self.pending: deque[Txn] = deque(t for t in durable.history if t.zxid > durable.applied)
        self.now = 0
        self.logical_clock = 0
        self.state = ServerState.LOOKING
        self.election: Election | None = None
        self.leader: LeaderState | None = None
        self.learner: LearnerState | None = None
        self._notify_at = 0
        self._notify_interval = config.notify_interval_ticks_min
        self._early_followers: dict[int, FollowerInfo] = {}
        self._regular_sids: set[int] = set()
        self._ready = Ready(soft_state=self.soft_state())
        self._become_looking()

    # ----------------------------------------------------------------- membership
    @property
    def peers(self) -> frozenset[int]:
        """The servers to vote with: every member of the committed, proposed and hinted memberships."""
        return frozenset().union(*(m.sids for m in self._views())) - {self.sid}

    @property
    def linked(self) -> frozenset[int]:
        """Every server we may hold a link with: the peers, our leader, and our learners (a
        joiner that no membership names yet among them)."""
        links = set(self.peers)
        if self.learner is not None:
            links.add(self.learner.leader)
        if self.leader is not None:
            links.update(self.leader.learners)
        return frozenset(links - {self.sid})

    def is_member(self, sid: int) -> bool:
        """Named by the committed membership or the proposed one: a server that is neither may
        sync as a non-voting learner (a joiner does, before its reconfig), but what it forwards
        is not taken, and its acks and votes count for nothing."""
        return sid in self.membership.sids or (self.proposed is not None and sid in self.proposed.sids)

    def counted_as_member(self) -> bool:
        """Whether the ensemble counts this server a member: our own view names us, and no
        peer's copy of the same version leaves us out (a joiner's zoo.cfg lists itself beside
        the initial servers, all at version 0, before the reconfig that adds it)."""
        if not self.is_member(self.sid):
            return False
        return self._disowned_at != self.membership.version or self.sid in self._disowned_by_sids

    def _views(self, *, hinted: bool = True, proposed: bool = True) -> list[Membership]:
        """The committed membership first, then (unless ``proposed`` is False) the proposed
        and (unless ``hinted`` is False: our log's alone) the hinted one where there are."""
        return [m for m in (self.membership, self.proposed if proposed else None, self.hinted if hinted else None) if m is not None]

    def _quorums(self, *, hinted: bool = True, proposed: bool = True) -> Quorums:
        return Quorums(m.voters for m in self._views(hinted=hinted, proposed=proposed))

    def _propose_membership(self, txns: list[Txn]) -> None:
        """A logged RECONFIG txn: its membership is proposed from now on."""
        for txn in txns:
            if txn.type == OpCode.RECONFIG:
                self.proposed = Membership.parse(txn.body[0])
                self.quorum = self._quorums()

    def _activate(self, commit_point: int) -> bool:
        """The proposed membership is committed once the commit point reaches its txn;
        True if it was activated now."""
        if self.proposed is None or commit_point < self.proposed.version:
            return False
        self.membership, self.proposed = self.proposed, None
        self.quorum = self._quorums()
        return True

    def _adopt(self, text: str) -> bool:
        """A committed membership newer than ours (a leader's at NEWLEADER, or a vote's):
        True if adopted."""
        if not text:
            return False
        membership = Membership.parse(text)
        if membership.version <= self.membership.version:
            return False
        self.membership = membership
        if self.proposed is not None and self.proposed.version <= membership.version:
            self.proposed = None
        self.quorum = self._quorums()
        return True

    def _candidates(self) -> frozenset[int]:
        """Whom we may elect: the committed voters, without us if a peer's copy of the same
        version leaves us out (a joiner's zoo.cfg lists itself beside the initial servers,
        both at version 0: voting for itself, it would deny the others the quorum of a
        proposed membership that counts it)."""
        if self._disowned_at == self.membership.version:
            return self.membership.voters - {self.sid}
        return self.membership.voters

    def _disowned_by(self, text: str) -> bool:
        """A peer's committed membership of our version, without us as a voter: True the
        first time (we vote again, for others only)."""
        if not text or self._disowned_at == self.membership.version or self.sid not in self.membership.voters:
            return False
        theirs = Membership.parse(text)
        if theirs.version != self.membership.version or self.sid in theirs.voters:
            return False
        self._disowned_at = theirs.version
        self._disowned_by_sids = theirs.sids
        return True

    def _adopt_hint(self, text: str) -> bool:
        """A vote's proposed membership, newer than what we know: our next election needs a
        quorum of it too, and it may make us a voter (then we follow rather than observe).
        Only a log makes a membership proposed, so the hint goes once the election is over.
        True if adopted."""
        if not text:
            return False
        hinted = Membership.parse(text)
        if hinted.version <= max(m.version for m in self._views()):
            return False
        self.hinted = hinted
        self.quorum = self._quorums()
        return True

    def _drop_hint(self) -> None:
        if self.hinted is not None:
            self.hinted = None
            self.quorum = self._quorums()

    def _synced_proposed(self, text: str) -> None:
        """At NEWLEADER our log is the leader's: so is the proposed membership (its RECONFIG
        may be in the history just synced, maybe only inside a SNAP's tree), or none."""
        proposed = Membership.parse(text) if text else None
        self.proposed = proposed if proposed is not None and proposed.version > self.membership.version else None
        self.quorum = self._quorums()

    def _role_changed(self) -> bool:
        """Following as a voter while the membership makes us an observer, or the reverse."""
        return self.learner is not None and (self.state == ServerState.OBSERVING) != self._observes()

    def _observes(self) -> bool:
        """Learn as an observer: one in our view and no voter there.  A server no membership
        names follows (a joining one, or one a reconfig removed): where a leader counts it
        as a voter, its acks count."""
        observers = self.membership.observers | (self.proposed.observers if self.proposed else frozenset())
        return self.sid in observers and self.sid not in self.quorum.voters

    # ----------------------------------------------------------------- shell API
    def tick(self) -> None:
        self.now += 1
        if self.state == ServerState.LOOKING:
            self._tick_looking()
        elif self.state == ServerState.LEADING:
            self._tick_leader()
        else:
            self._tick_learner()

    def step(self, sender: int, message: Message) -> None:
        if isinstance(message, Notification):
            self._step_notification(sender, message)
        elif self.state == ServerState.LOOKING and isinstance(message, FollowerInfo):
            # a follower that decided before we did: keep it for when we lead
            self._early_followers[sender] = message
        elif self.state == ServerState.LEADING:
            self._step_leader(sender, message)
        elif self.state in (ServerState.FOLLOWING, ServerState.OBSERVING):
            self._step_learner(sender, message)

    def link_down(self, sid: int) -> None:
        # The FOLLOWERINFO kept from that connection is stale now: leading with it would send a
        # LEADERINFO the learner never asked for, and a second sync on its next connection
        # (sim seed 114).
        self._early_followers.pop(sid, None)
        if self.state == ServerState.LEADING and self.leader is not None:
            self._drop_learner(sid, "link down")
        elif self.learner is not None and sid == self.learner.leader:
            self._become_looking()

    @property
    def next_zxid(self) -> int:
        leader = self._established_leader()
        return self._next_zxid(leader.last_proposed, leader.epoch)

    def propose(self, txns: list[Txn]) -> None:
        """Leader only: log and broadcast txns whose zxids follow ``next_zxid`` in order (and
        commit them too, in the same Ready, where the leader alone is a quorum)."""
        leader = self._established_leader()
        for txn in txns:
            expected = self._next_zxid(leader.last_proposed, leader.epoch)
            if txn.zxid != expected or zxid_counter(txn.zxid) > self.config.zxid_counter_last:
                raise InvariantError(f"proposal 0x{txn.zxid:x}, expected 0x{expected:x} (counters up to 0x{self.config.zxid_counter_last:x})")
            leader.last_proposed = txn.zxid
        self._log(txns)
        if not leader.learners and self.quorum.has_quorum((self.sid,)):
            # A quorum of one (standalone): logging is committing.  The txns are applied in
            # step 5 of this Ready, after its persist, rather than in a Ready of their own.
            leader.self_acked = txns[-1].zxid
            self._leader_maybe_commit()
        message = Proposal(txns=tuple(txns))
        for sid, info in leader.learners.items():
            if info.acked_epoch and not info.observer:
                self._send_early(sid, message)
        self._leader_tell_logged(txns[-1].zxid)
        self._advance_syncs()
        if zxid_counter(leader.last_proposed) == self.config.zxid_counter_last:
            # ZooKeeper's ZOOKEEPER-1277: no counter is left in this epoch, so an election
            # starts the next one; what was proposed is recovered by it, as after any step-down
            self._become_looking()

    def client_sync(self, sync: Sync) -> None:
        """Answer (in ``sync_replies``) once everything the leader proposed so far is applied."""
        if self.state == ServerState.LEADING:
            self._leader_sync(self._established_leader(), self.sid, sync)
        elif self.learner is not None:
            self._send(self.learner.leader, sync)

    def forward(self, request: Request) -> None:
        """A client's write to the leader: early, as it promises nothing about this server's
        disk (it need not wait for the fsync of the proposals logged before it).  Always
        early, even behind a regular message, so that forwards never overtake each other; a
        forward overtaking an ACK or a ping's answer changes nothing, and overtaking a sync
        only makes the sync wait for it too."""
        if self.learner is None:
            raise InvariantError("only a learner forwards requests")
        self._ready.early_messages.append((self.learner.leader, request))

    def touch_sessions(self, session_ids: list[int]) -> None:
        if self.learner is not None:
            self.learner.touched.update(session_ids)

    def snapshot_installed(self, zxid: int) -> None:
        """The shell replaced the tree with the leader's snapshot at ``zxid`` and saved it."""
        if self.learner is None or self.learner.phase != ZabPhase.SYNCHRONIZATION:
            raise InvariantError("snapshot installed outside of a sync")
        if self.learner.snapshot_due != zxid:
            raise InvariantError(f"snapshot installed at 0x{zxid:x}, none expected there")
        self.learner.snapshot_due = None
        self.snapshot_zxid, self.snapshot_wanted = zxid, False
        self.last_logged = self.applied = self.learner.commit_point = zxid
        self.pending.clear()
        self.history.clear()

    def expects_snapshot(self, sid: int, zxid: int) -> bool:
        """Is a snapshot at ``zxid`` from ``sid`` still what this learner's sync waits for?"""
        learner = self.learner
        return learner is not None and learner.leader == sid and learner.snapshot_due == zxid

    def heard_from(self, sid: int) -> None:
        """The shell received part of a stream the core does not see (snapshot chunks)."""
        if self.learner is not None and sid == self.learner.leader:
            self.learner.heard_tick = self.now

    def has_ready(self) -> bool:
        if self.leader is not None and self.leader.round_wanted:
            return True
        return not self._ready.is_empty() or self._ready.soft_state != self.soft_state()

    def ready(self) -> Ready:
        if self.state == ServerState.LEADING and self.leader is not None and self.leader.round_wanted:
            self._start_round()
        ready = self._ready
        ready.soft_state = self.soft_state()
        self._ready = Ready(soft_state=ready.soft_state)
        self._regular_sids = set()
        return ready

    def advance(self, ready: Ready) -> None:
        """The shell did everything ``ready`` asked; the leader's own log append now counts."""
        if ready.append and self.state == ServerState.LEADING and self.leader is not None:
            logged = ready.append[-1].zxid
            if logged > self.leader.self_acked:  # a quorum of one counted it when proposing
                self.leader.self_acked = logged
                self._leader_maybe_commit()

    def status(self) -> PeerStatus:
        learners: tuple[LearnerStatus, ...] = ()
        pending_syncs = 0
        if self.state == ServerState.LEADING and self.leader is not None:
            learners = tuple(
                LearnerStatus(sid, info.observer, info.acked_epoch, info.synced, info.uptodate, info.acked)
                for sid, info in sorted(self.leader.learners.items())
            )  # fmt: skip
            pending_syncs = len({zxid for zxid, _, sid, _ in self.leader.syncs if sid != self.sid})
        return PeerStatus(self.soft_state(), self.accepted_epoch, self.current_epoch, self.last_logged, self.applied, learners, pending_syncs)

    @property
    def established_leader(self) -> bool:
        """Leading, with a quorum synced: may propose (``next_zxid``, ``propose``)."""
        return self.state == ServerState.LEADING and self.leader is not None and self.leader.established

    def streaming_learners(self) -> list[int]:
        """Leader: the learners whose stream is in order (ACKEPOCH seen), cheaply."""
        if self.state != ServerState.LEADING or self.leader is None:
            return []
        return [sid for sid, info in self.leader.learners.items() if info.acked_epoch]

    def soft_state(self) -> SoftState:
        serving = False
        phase = ZabPhase.ELECTION
        leader_sid: int | None = None
        if self.state == ServerState.LEADING and self.leader is not None:
            serving = self.leader.established
            phase = ZabPhase.BROADCAST if serving else (ZabPhase.SYNCHRONIZATION if self.leader.epoch else ZabPhase.DISCOVERY)
            leader_sid = self.sid
        elif self.learner is not None:
            phase = self.learner.phase
            serving = phase == ZabPhase.BROADCAST
            leader_sid = self.learner.leader
        return SoftState(self.state, phase, leader_sid, self.current_epoch, serving)

    # ----------------------------------------------------------------- helpers
    def _send(self, sid: int, message: Message) -> None:
        if isinstance(message, Notification):  # our memberships: a peer may adopt them, or find it is no candidate
            message = replace(message, config=self.membership.text(), proposed=self.proposed.text() if self.proposed else "",
                              logged=self.last_logged)  # fmt: skip
        self._ready.messages.append((sid, message))
        self._regular_sids.add(sid)

    def _send_early(self, sid: int, message: Message) -> None:
        """A packet that may leave before this Ready's persistence (a leader's PROPOSAL, COMMIT,
        INFORM, PING; a learner's forwarded write); it stays behind any regular message to
        the same server, so each stream keeps its order."""
        if sid in self._regular_sids:
            self._ready.messages.append((sid, message))
        else:
            self._ready.early_messages.append((sid, message))

    def _log(self, txns: list[Txn]) -> None:
        if not txns:
            return
        if txns[0].zxid <= self.last_logged:
            raise InvariantError(f"log must grow: 0x{txns[0].zxid:x} after 0x{self.last_logged:x}")
        self._ready.append.extend(txns)
        self._ready.must_sync = True
        self.last_logged = txns[-1].zxid
        self.history.extend(txns)
        self.pending.extend(txns)
        self._propose_membership(txns)

    def _apply_up_to(self, zxid: int) -> None:
        while self.pending and self.pending[0].zxid <= zxid:
            txn = self.pending.popleft()
            self._ready.committed.append(txn)
            self.applied = txn.zxid

    def _truncate(self, zxid: int) -> None:
        self._ready.truncate_to = zxid
        self._ready.append = [t for t in self._ready.append if t.zxid <= zxid]
        self.last_logged = min(self.last_logged, zxid)
        self.history.truncate_after(zxid)
        while self.pending and self.pending[-1].zxid > zxid:
            self.pending.pop()
        if self.applied > zxid:
            self.applied = zxid  # the shell reloads the tree from disk up to zxid
        if self.proposed is not None and self.proposed.version > zxid:
            self.proposed = None  # its RECONFIG txn is cut: it never commits
            self.quorum = self._quorums()

    @staticmethod
    def _next_zxid(last: int, epoch: int) -> int:
        if zxid_epoch(last) == epoch:
            return last + 1
        return make_zxid(epoch, 1)

    def _established_leader(self) -> LeaderState:
        if self.state != ServerState.LEADING or self.leader is None or not self.leader.established:
            raise InvariantError("not an established leader")
        return self.leader

    # ----------------------------------------------------------------- election
    def _become_looking(self, vote_for: int = 0, hand_over: bool = False) -> None:
        """LOOKING; the first vote goes to ``vote_for`` when a reconfig designated a leader.
        A leader handing over keeps its learners' links: the COMMIT naming the designated
        leader is queued on them, and each learner closes its link once it has it (as
        ZooKeeper's followers do)."""
        if self.learner is not None:
            self._ready.drop_links.append(self.learner.leader)
        if self.leader is not None and not hand_over:
            self._ready.drop_links.extend(self.leader.learners)
        self.state = ServerState.LOOKING
        self.leader = self.learner = None
        self.logical_clock += 1
        own = Vote(vote_for or self.sid, self.last_logged, self.current_epoch)
        # Joining a leader already established takes a quorum of the memberships our log
        # holds, not of a vote's hint: a server the hint alone makes its only voter would
        # wait for its own word forever (the soak's seed 4578, with reconfigs).
        logged = self._quorums(hinted=False) if self.hinted else None
        self.election = Election(self.sid, self.quorum, self.logical_clock, own, self.config.finalize_wait_ticks,
                                 self._candidates(), logged)  # fmt: skip
        self._notify_interval = self.config.notify_interval_ticks_min
        self._broadcast_notification()
        if self.quorum.voters == {self.sid}:
            self._decide(self.election.proposal)

    def _broadcast_notification(self) -> None:
        assert self.election is not None
        note = self.election.notification(self.state)
        for sid in sorted(self.peers):
            self._send(sid, note)
        self._notify_at = self.now + self._notify_interval

    def _tick_looking(self) -> None:
        assert self.election is not None
        decided = self.election.tick(self.now)
        if decided is not None:
            self._decide(decided)
        elif self.now >= self._notify_at:
            self._notify_interval = min(self._notify_interval * 2, self.config.notify_interval_ticks_max)
            self._broadcast_notification()

    def _step_notification(self, sender: int, note: Notification) -> None:
        trusted = self._speaks_for_membership(sender, note)
        if self.state == ServerState.LOOKING and trusted and (
                self._adopt(note.config) | self._adopt_hint(note.proposed) | self._disowned_by(note.config)):  # fmt: skip
            self._become_looking()  # a newer membership, or we are no candidate: vote again
        if self.state != ServerState.LOOKING:
            if note.state == ServerState.LOOKING.value:
                self._send(sender, self._current_vote_notification())
            return
        assert self.election is not None
        if note.state == ServerState.LEADING.value and trusted and self._abandoned_for(note):
            self.election.join_quorum = self._quorums(hinted=False, proposed=False)
        changed, decided = self.election.receive(sender, note, self.now)
        self.logical_clock = self.election.logical_clock
        if decided is not None:
            self._decide(decided)
        elif changed:
            self._broadcast_notification()
        elif note.state == ServerState.LOOKING.value and (note.election_epoch < self.logical_clock
                                                          or sender not in self.quorum.voters):  # fmt: skip
            # Behind us, or a server we do not count (ZooKeeper answers those too): it may
            # count us, in a membership it knows and we have not learnt yet.
            self._send(sender, self.election.notification(self.state))

    def _speaks_for_membership(self, sender: int, note: Notification) -> bool:
        """Whether a vote's memberships may change ours: only a member's (of a membership we
        hold, committed, proposed or hinted: the one a joiner joins) can, and only memberships it
        could have logged, versions no later than the last zxid it says it logged, text that parses.
        Anyone else's vote is answered and changes nothing (one forged vote from server 99 made
        it the ensemble's only member, on disk)."""
        if not any(sender in view.sids for view in self._views()):
            return False
        try:
            versions = [Membership.parse(text).version for text in (note.config, note.proposed) if text]
        except MembershipError:
            return False
        return all(version <= note.logged for version in versions)

    def _abandoned_for(self, leading: Notification) -> bool:
        """Whether a leader's own notification shows that the membership our log proposes
        never committed and never will: that leader took over on a later epoch, and neither
        its committed membership nor the one it proposes is ours (so its log has not got it,
        and its history holds every txn committed before its epoch).  Joining it then takes
        a quorum of the committed membership alone: a quorum of the dead proposal too may
        never come (simulator seed 722227, with reconfigs: the two servers that logged a
        reconfig adding the second of them looked for ever beside the leader of the next
        epoch).  Its sync truncates the proposal from our log."""
        proposed = self.proposed
        if proposed is None or leading.peer_epoch <= zxid_epoch(proposed.version):
            return False
        committed = Membership.parse(leading.config).version if leading.config else 0
        theirs = Membership.parse(leading.proposed).version if leading.proposed else None
        return committed < proposed.version and theirs != proposed.version

    def _current_vote_notification(self) -> Notification:
        leader = self.sid if self.state == ServerState.LEADING else (self.learner.leader if self.learner else -1)
        return Notification(leader=leader, zxid=self.last_logged, peer_epoch=self.current_epoch,
                            election_epoch=self.logical_clock, state=self.state.value)  # fmt: skip

    def _decide(self, vote: Vote) -> None:
        if self.election is not None and self.election.joined:
            self._drop_hint()  # joined by our log's memberships' word: they say our role too
        self.election = None
        observes = self._observes()  # a vote's hint may make us a voter: then we follow
        self._drop_hint()  # the election is over: our memberships are our log's again
        if vote.leader == self.sid:
            self.state = ServerState.LEADING
            self.leader = LeaderState(started_tick=self.now, previous_epoch=self.current_epoch,
                                      previous_last=self.last_logged)  # fmt: skip
            early, self._early_followers = self._early_followers, {}
            for sid, info in sorted(early.items()):
                self._leader_follower_info(sid, info)
            self._leader_maybe_pick_epoch()
        else:
            self._early_followers.clear()
            self.state = ServerState.OBSERVING if observes else ServerState.FOLLOWING
            self.learner = LearnerState(leader=vote.leader, started_tick=self.now, heard_tick=self.now,
                                        commit_point=self.applied)  # fmt: skip
            self._send(vote.leader, FollowerInfo(accepted_epoch=self.accepted_epoch, last_zxid=self.last_logged,
                                                 observer=self.state == ServerState.OBSERVING,
                                                 config_version=self.membership.version))  # fmt: skip

    # ----------------------------------------------------------------- leader
    def _tick_leader(self) -> None:
        leader = self.leader
        assert leader is not None
        if not leader.established:
            if self.now - leader.started_tick > self.config.init_limit_ticks:
                self._become_looking()
            return
        for sid, info in list(leader.learners.items()):
            if self.now - info.heard_tick > self.config.sync_limit_ticks:
                self._drop_learner(sid, "silent for syncLimit")
        alive = {self.sid} | {sid for sid, info in leader.learners.items() if info.uptodate}
        if not self.quorum.has_quorum(alive):
            self._become_looking()
            return
        if self.now % self.config.ping_interval_ticks == 0:
            ping = Ping(round=leader.round)
            for sid in leader.learners:
                self._send(sid, ping)

    def _drop_learner(self, sid: int, why: str) -> None:
        assert self.leader is not None
        if self.leader.learners.pop(sid, None) is not None:
            self._ready.drop_links.append(sid)
        self.leader.newleader_acks.discard(sid)

    def _step_leader(self, sender: int, message: Message) -> None:
        leader = self.leader
        assert leader is not None
        if isinstance(message, FollowerInfo):
            self._leader_follower_info(sender, message)
            return
        info = leader.learners.get(sender)
        if info is None:
            return
        info.heard_tick = self.now
        if isinstance(message, Request):  # the busy leader's two messages first: each forwarded write, each ACK
            if leader.established and info.uptodate and self.is_member(sender):
                self._ready.requests.append((sender, message))
        elif isinstance(message, Ack):
            self._leader_ack(sender, info, message.zxid)
        elif isinstance(message, AckEpoch):
            self._leader_ack_epoch(sender, info, message)
        elif isinstance(message, Ping):
            self._ready.touched_sessions.extend(message.sessions)
            if message.round > info.round_acked:
                info.round_acked = message.round
                if leader.syncs:
                    self._advance_syncs()
        elif isinstance(message, Sync) and leader.established:
            self._leader_sync(leader, sender, message)

    def _leader_follower_info(self, sender: int, info: FollowerInfo) -> None:
        leader = self.leader
        assert leader is not None
        if info.config_version > max(m.version for m in self._views()):  # a leader holds no hint
            # As ZooKeeper's "Follower is ahead of the leader": a membership committed after
            # every one we know means we were voted in by an old one; its acks must not count.
            self._become_looking()
            return
        if info.accepted_epoch > leader.epoch > 0:
            self._step_down_below(info.accepted_epoch)
            return
        # A server that is no voter may still follow: its acks count where it votes (a new
        # server joins that way, before the reconfig that adds it commits).
        leader.learners[sender] = LearnerInfo(info.observer, info.accepted_epoch, self.now)
        leader.newleader_acks.discard(sender)
        if leader.epoch:
            self._send(sender, LeaderInfo(epoch=leader.epoch))
        else:
            self._leader_maybe_pick_epoch()

    def _step_down_below(self, accepted_epoch: int) -> None:
        """A learner promised an epoch above ours (a discovery of its own that a partition cut
        short): it must refuse our LEADERINFO, and would follow us, refuse and look again for
        as long as we lead (ZooKeeper leaves it so until its leader changes; simulator seeds
        734305 and 735429, and 723131 with reconfigs).  Only a new epoch above its promise lets
        it in: step down, having made that promise ourselves, so that the epoch we pick if
        elected again, or the one a leader picks from our FOLLOWERINFO, is above it.  Raising
        an accepted epoch only promises more: no txn of a lower epoch is taken from then on."""
        self.accepted_epoch = accepted_epoch
        self._ready.accepted_epoch = accepted_epoch
        self._become_looking()

    def _leader_maybe_pick_epoch(self) -> None:
        """Discovery: once a quorum sent FOLLOWERINFO, the new epoch beats every accepted one."""
        leader = self.leader
        assert leader is not None
        voters = {self.sid} | {sid for sid, i in leader.learners.items() if not i.observer}
        if leader.epoch or not self.quorum.has_quorum(voters):
            return
        leader.epoch = max([self.accepted_epoch] + [i.accepted_epoch for i in leader.learners.values()]) + 1
        self.accepted_epoch = leader.epoch
        self._ready.accepted_epoch = leader.epoch
        for sid in leader.learners:
            self._send(sid, LeaderInfo(epoch=leader.epoch))
        self._leader_maybe_sync_self()

    def _leader_maybe_sync_self(self) -> None:
        """The leader's own NEWLEADER, once a quorum acked the new epoch and none of them was
        ahead of it (ZooKeeper's waitForEpochAck): its current epoch is the new one once
        persisted.  Taking the new current epoch any earlier would let a leader that turns
        out to be behind win the next election on that epoch alone, and truncate committed
        txns from the others (sim seed 6199)."""
        leader = self.leader
        assert leader is not None
        if not leader.epoch or self.sid in leader.newleader_acks:
            return
        acked = {self.sid} | {sid for sid, i in leader.learners.items() if i.acked_epoch and not i.observer}
        if not self.quorum.has_quorum(acked):
            return
        self.current_epoch = leader.epoch
        self._ready.current_epoch = leader.epoch
        leader.newleader_acks.add(self.sid)
        leader.last_proposed = self.last_logged
        for sid, info in leader.learners.items():
            if info.epoch_ack is not None:
                self._leader_sync_learner(sid, info, info.epoch_ack)
        self._leader_maybe_establish()

    def _leader_ack_epoch(self, sender: int, info: LearnerInfo, ack: AckEpoch) -> None:
        leader = self.leader
        assert leader is not None
        ahead = (ack.current_epoch, ack.last_zxid) > (leader.previous_epoch, leader.previous_last)
        if ahead and sender in self._candidates() and not leader.established:
            self._become_looking()  # a follower is ahead of us: we are not fit to lead
            return
        # One that no election could make leader (a voter of a proposed membership only) is
        # synced instead: what it holds beyond us is uncommitted, since every commit took a
        # quorum of the committed voters, and we lead with the newest log of a quorum of
        # them.  Stepping down would only elect us again (the soak's seed 501479).
        if info.acked_epoch:
            self._drop_learner(sender, "second ACKEPOCH")  # a broken stream (sim seed 114)
            return
        info.acked_epoch = True
        if self.sid in leader.newleader_acks:
            self._leader_sync_learner(sender, info, ack)
        else:
            # No NEWLEADER before a quorum acked the epoch (ZooKeeper's waitForEpochAck): a
            # learner would take a current epoch that this leader may never reach, and be
            # "ahead" of every later leader we could elect (sim seed 30817, with reconfigs).
            info.epoch_ack = ack
            self._leader_maybe_sync_self()

    def _leader_sync_learner(self, sender: int, info: LearnerInfo, ack: AckEpoch) -> None:
        """DIFF, TRUNC or SNAP up to our last logged txn, then NEWLEADER."""
        leader = self.leader
        assert leader is not None
        info.epoch_ack = None
        plan = choose_sync(ack.last_zxid, self.last_logged, self.history, force_snap=ack.snapshot_wanted)
        base = ack.last_zxid
        if plan.mode == SyncMode.SNAP:
            self._send(sender, Snap(zxid=self.applied))
            base = self.applied
            # Every logged txn above the tree: ``pending`` holds them all, while the history
            # window may have lost the oldest, leaving a gap the learner rejects, forever
            # (sim seed 138).
            txns = tuple(self.pending)
        elif plan.mode in (SyncMode.TRUNC, SyncMode.TRUNC_DIFF):
            self._send(sender, Trunc(zxid=plan.trunc_zxid))
            base, txns = plan.trunc_zxid, plan.txns
        else:
            self._send(sender, Diff(zxid=self.last_logged))
            txns = plan.txns
        if txns:
            self._send(sender, Proposal(txns=txns))
            committed = [t.zxid for t in txns if t.zxid <= leader.commit_point]
            if committed:
                self._send(sender, Commit(zxid=committed[-1]))
        info.acked = base
        info.newleader_point = self.last_logged
        self._send(sender, NewLeader(zxid=make_zxid(leader.epoch, 0), config=self.membership.text(),
                                     proposed=self.proposed.text() if self.proposed else ""))  # fmt: skip

    def _leader_ack(self, sender: int, info: LearnerInfo, zxid: int) -> None:
        leader = self.leader
        assert leader is not None
        if zxid == make_zxid(leader.epoch, 0) and not info.synced:
            info.synced = True
            info.acked = max(info.acked, info.newleader_point)
            leader.newleader_acks.add(sender)
            if leader.established:
                # The COMMIT sent when we became established went only to the learners synced
                # by then; without this one the learner serves (and answers syncs) behind the
                # commit point until the next write (sim seed 47).
                if leader.commit_point:
                    self._send(sender, Commit(zxid=leader.commit_point))
                self._send(sender, UpToDate())
                info.uptodate = True
                self._leader_maybe_commit()
            else:
                self._leader_maybe_establish()
            return
        if zxid > info.acked:
            info.acked = zxid
            self._leader_maybe_commit()

    def _leader_maybe_establish(self) -> None:
        leader = self.leader
        assert leader is not None
        voters_synced = {sid for sid in leader.newleader_acks if sid == self.sid or not leader.learners[sid].observer}
        if leader.established or not self.quorum.has_quorum(voters_synced):
            return
        leader.established = True
        leader.established_by = frozenset(voters_synced)
        leader.commit_point = self.last_logged
        self._apply_up_to(self.last_logged)
        designated = self._leader_activate(self.last_logged)
        for sid in sorted(leader.newleader_acks - {self.sid}):
            if self.last_logged:
                self._send(sid, Commit(zxid=self.last_logged, designated=designated))
            self._send(sid, UpToDate())
            leader.learners[sid].uptodate = True
        if self.sid not in self.quorum.voters:
            self._become_looking(vote_for=designated, hand_over=True)

    def _leader_maybe_commit(self) -> None:
        leader = self.leader
        assert leader is not None
        if not leader.established:
            return
        acked = {sid: info.acked for sid, info in leader.learners.items() if not info.observer and info.synced}  # voters only count
        acked[self.sid] = leader.self_acked
        point = self.quorum.committed(acked)
        if point <= leader.commit_point:
            return
        committed = self._ready.committed
        newly_from = len(committed)  # the txns this commit adds to the Ready: an INFORM's
        leader.commit_point = point
        self._apply_up_to(point)
        designated = self._leader_activate(point)
        commit: Commit | None = None
        inform: Inform | None = None
        for sid, info in leader.learners.items():
            if info.acked_epoch and (info.observer or designated or point > info.logged_sent):
                if info.observer:
                    inform = inform or Inform(txns=tuple(committed[newly_from:]))
                    self._send_early(sid, inform)
                else:
                    commit = commit or Commit(zxid=point, designated=designated)
                    self._send_early(sid, commit)
        self._advance_syncs()
        if self.sid not in self.quorum.voters:  # the new membership leaves us out: hand over
            self._become_looking(vote_for=designated, hand_over=True)

    def _leader_tell_logged(self, logged: int) -> None:
        """LOGGED to each follower that makes a quorum with this leader: the leader's log holds
        everything up to ``logged`` once this Ready's persist is done (see the module's
        docstring).  A regular message, so it leaves after that persist, in the Ready that
        logs the txns: a Ready of its own after ``advance`` would cost the leader a round of
        the engine per write and the follower the wait for it."""
        leader = self.leader
        assert leader is not None
        if not leader.established or logged <= leader.commit_point or self.proposed is not None:
            return
        for sid, info in leader.learners.items():
            if info.uptodate and not info.observer and info.acked < logged and self.quorum.has_quorum((self.sid, sid)):
                info.logged_sent = logged
                self._send(sid, Logged(zxid=logged))

    def _leader_activate(self, commit_point: int) -> int:
        """Activate a membership the commit point reached; the designated next leader if it
        leaves this leader out (0: none, or no hand-over needed)."""
        leader = self.leader
        assert leader is not None
        if not self._activate(commit_point) or self.sid in self.quorum.voters:
            return 0
        candidates = [(info.acked, sid) for sid, info in leader.learners.items()
                      if info.uptodate and sid in self.quorum.voters]  # fmt: skip
        return max(candidates)[1] if candidates else 0

    def _leader_sync(self, leader: LeaderState, sid: int, sync: Sync) -> None:
        """A sync waits for what was proposed now, and for the next confirmation round."""
        leader.syncs.append((leader.last_proposed, leader.round + 1, sid, sync))
        leader.round_wanted = True

    def _start_round(self) -> None:
        """Ask the voters to confirm this leadership (called when a Ready is handed out, so
        every sync of that Ready shares the round)."""
        leader = self.leader
        assert leader is not None
        leader.round += 1
        leader.round_wanted = False
        ping = Ping(round=leader.round)
        for sid, info in leader.learners.items():
            if info.uptodate and not info.observer:
                self._send(sid, ping)
        self._advance_syncs()

    def _confirmed_round(self, leader: LeaderState) -> int:
        """The highest round a quorum has confirmed (the leader confirms its own at once)."""
        rounds = {sid: info.round_acked for sid, info in leader.learners.items() if info.uptodate and not info.observer}
        rounds[self.sid] = leader.round
        return self.quorum.committed(rounds)

    def _advance_syncs(self) -> None:
        leader = self.leader
        assert leader is not None
        confirmed = self._confirmed_round(leader) if leader.syncs else 0
        while leader.syncs and leader.syncs[0][0] <= leader.commit_point and leader.syncs[0][1] <= confirmed:
            _, _, sid, sync = leader.syncs.popleft()
            if sid == self.sid:
                self._ready.sync_replies.append(sync)
            else:
                self._send(sid, sync)

    # ----------------------------------------------------------------- learner
    def _tick_learner(self) -> None:
        learner = self.learner
        assert learner is not None
        # As ZooKeeper's per-read socket timeouts: syncLimit between packets once in
        # broadcast, initLimit between packets while connecting and syncing.
        limit = self.config.sync_limit_ticks if learner.phase == ZabPhase.BROADCAST else self.config.init_limit_ticks
        if self.now - learner.heard_tick > limit:
            self._become_looking()

    def _step_learner(self, sender: int, message: Message) -> None:
        learner = self.learner
        assert learner is not None
        if sender != learner.leader:
            return
        learner.heard_tick = self.now
        if learner.snapshot_due is not None:
            # The snapshot that should have come between the SNAP and this message did not
            # (the shell dropped it); going on would ack NEWLEADER over our old log, a history
            # the leader never had (sim seed 463).
            self._learner_resync()
            return
        if isinstance(message, (Proposal, Commit, Inform)) and not learner.sync_mode_seen:
            # Ahead of this sync's DIFF/TRUNC/SNAP: a reordered stream (a TRUNC after a
            # PROPOSAL would cut it again, and NEWLEADER be acked over a log missing it), or
            # sent to our previous link before the leader read our new FOLLOWERINFO (an INFORM
            # logged then put the new epoch's first txn right after a log missing the old
            # epoch's last ones: sim seed 8058 with the reconfig soak's options).
            self._learner_resync()
            return
        if isinstance(message, LeaderInfo):
            self._learner_leader_info(message)
        elif isinstance(message, (Diff, Trunc, Snap)):
            self._learner_sync_mode(message)
        elif isinstance(message, Proposal):
            self._learner_proposal(message)
        elif isinstance(message, Commit):
            self._learner_commit(message.zxid, message.designated)
        elif isinstance(message, Logged):
            self._learner_logged(message.zxid)
        elif isinstance(message, Inform):
            self._learner_inform(message)
        elif isinstance(message, NewLeader):
            self._learner_new_leader(message)
        elif isinstance(message, UpToDate):
            self._learner_uptodate()
        elif isinstance(message, Ping):
            self._send(sender, Ping(sessions=tuple(sorted(learner.touched)), round=message.round))
            learner.touched.clear()
        elif isinstance(message, Sync):
            self._ready.sync_replies.append(message)

    def _learner_resync(self) -> None:
        """The stream from the leader is broken: drop it and look again (never exit)."""
        self._become_looking()

    def _learner_leader_info(self, info: LeaderInfo) -> None:
        assert self.learner is not None
        if info.epoch < self.accepted_epoch or self.learner.phase != ZabPhase.DISCOVERY:
            # a second LEADERINFO means a broken stream; answering it would start a second
            # sync that may wipe what this one logged and acked (sim seed 114)
            self._learner_resync()
            return
        if info.epoch > self.accepted_epoch:
            self.accepted_epoch = info.epoch
            self._ready.accepted_epoch = info.epoch
        self.learner.phase = ZabPhase.SYNCHRONIZATION
        ack = AckEpoch(current_epoch=self.current_epoch, last_zxid=self.last_logged, snapshot_wanted=self.snapshot_wanted)
        self._send(self.learner.leader, ack)

    def _learner_sync_mode(self, message: Diff | Trunc | Snap) -> None:
        assert self.learner is not None
        if self.learner.phase != ZabPhase.SYNCHRONIZATION or self.learner.sync_mode_seen:
            self._learner_resync()  # one DIFF/TRUNC/SNAP per sync: a second one is a broken stream
            return
        self.learner.sync_mode_seen = True
        if isinstance(message, Snap):
            self.learner.snapshot_due = message.zxid
        elif isinstance(message, Trunc):
            if message.zxid < self.snapshot_zxid:
                self.snapshot_wanted = True  # see __init__: this sync cannot be done here
                self._learner_resync()
                return
            self._truncate(message.zxid)

    def _learner_proposal(self, proposal: Proposal) -> None:
        learner = self.learner
        assert learner is not None
        last = self.last_logged
        for txn in proposal.txns:
            if not follows(last, txn.zxid):
                self._learner_resync()  # a gap or a step back in the proposal stream
                return
            last = txn.zxid
        self._log(list(proposal.txns))
        if learner.acked:
            self._send(learner.leader, Ack(zxid=self.last_logged))

    def _learner_commit(self, zxid: int, designated: int = 0) -> None:
        learner = self.learner
        assert learner is not None
        if zxid <= learner.commit_point:
            return
        if not any(t.zxid == zxid for t in self.pending):
            self._learner_resync()  # a COMMIT for a proposal we do not hold
            return
        learner.commit_point = zxid
        if learner.phase == ZabPhase.BROADCAST:
            self._apply_up_to(zxid)
        self._learner_committed(designated)

    def _learner_logged(self, zxid: int) -> None:
        """The leader's log holds everything up to ``zxid``, and the two of us make a quorum:
        what our own log holds up to there is committed (see the module's docstring), and
        the leader sends no COMMIT of it.  The shell logs a Ready's txns before it applies
        them, so a txn logged in this Ready too is on disk before it is applied."""
        learner = self.learner
        assert learner is not None
        if self.state != ServerState.FOLLOWING or learner.phase != ZabPhase.BROADCAST or zxid > self.last_logged:
            self._learner_resync()  # sent only once our stream is up to date and holds it
            return
        if zxid > learner.commit_point:
            learner.commit_point = zxid
            self._apply_up_to(zxid)
            self._learner_committed()

    def _learner_committed(self, designated: int = 0) -> None:
        """The commit point moved: a membership it reached is active now.  A leader it left
        out hands over (vote for the designated one); a role it changed (voter ↔ observer)
        means reconnecting as the other kind of learner."""
        learner = self.learner
        assert learner is not None
        if not self._activate(learner.commit_point):
            return
        if designated and designated != learner.leader:
            self._become_looking(vote_for=designated)
        elif self._role_changed():
            self._become_looking()

    def _learner_inform(self, inform: Inform) -> None:
        learner = self.learner
        assert learner is not None
        fresh = [t for t in inform.txns if t.zxid > self.last_logged]
        last = self.last_logged
        for txn in fresh:
            if not follows(last, txn.zxid):
                self._learner_resync()
                return
            last = txn.zxid
        self._log(fresh)
        if inform.txns and inform.txns[-1].zxid > learner.commit_point:
            # An INFORM commits all its txns, also those the sync's DIFF had logged already as
            # proposals; counting only the fresh ones left them unapplied (found by review,
            # pinned in tests/core).
            learner.commit_point = inform.txns[-1].zxid
        if learner.phase == ZabPhase.BROADCAST:
            self._apply_up_to(learner.commit_point)
        self._learner_committed()

    def _learner_new_leader(self, message: NewLeader) -> None:
        learner = self.learner
        assert learner is not None
        if (learner.phase != ZabPhase.SYNCHRONIZATION or not learner.sync_mode_seen
                or zxid_epoch(message.zxid) != self.accepted_epoch):  # fmt: skip
            self._learner_resync()  # NEWLEADER with no DIFF/TRUNC/SNAP before it: a broken stream
            return
        self._adopt(message.config)
        self._synced_proposed(message.proposed)
        if self._role_changed():  # the sync's RECONFIG makes us a voter where we observe, or the reverse
            self._become_looking()  # reconnect as the other kind of learner, before acking
            return
        self.current_epoch = self.accepted_epoch
        self._ready.current_epoch = self.current_epoch
        learner.acked = True
        self._ready.must_sync = True
        self._send(learner.leader, Ack(zxid=message.zxid))

    def _learner_uptodate(self) -> None:
        learner = self.learner
        assert learner is not None
        if not learner.acked:
            self._learner_resync()
            return
        learner.phase = ZabPhase.BROADCAST
        self._apply_up_to(learner.commit_point)


def static_membership(config: PeerConfig) -> Membership:
    """The membership of a configuration file without addresses (the core needs none)."""
    members = [Member(sid, "", 0, 0, sid in config.observers) for sid in config.voters | config.observers]
    return Membership.of(members, 0)
