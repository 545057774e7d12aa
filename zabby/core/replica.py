"""Replica: what every role of a Peer acts on, and the Ready it builds.

Durable state, as the log and epoch files hold it: ``accepted_epoch``, ``current_epoch``,
``last_logged`` (the log's last zxid).  ``applied`` is the tree's last zxid; txns between
them (``pending``) are logged but not yet known to be committed, except after a restart,
where recovery applied the whole log (a TRUNC then reloads the tree).

The step functions of the roles (``looking``, ``leader``, ``learner`` and the phases they
call) take the Replica and their role object.  The underscored methods here are theirs, not
the shell's: the shell drives a ``Peer`` through its public methods only.  ``Peer`` subclasses
Replica and implements the role changes a step may ask for (``_become_looking``,
``_decide``), so that no step module imports the Peer.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace

from zabby.core.election import Vote
from zabby.core.history import History
from zabby.core.membership import Memberships
from zabby.core.messages import Message, Notification
from zabby.core.ready import Ready, SoftState
from zabby.core.roles import LearnerRole, Role
from zabby.core.types import ServerState, ZabPhase
from zabby.errors import InvariantError
from zabby.membership import Member, Membership
from zabby.tree.txns import ZXID_COUNTER_LAST, Txn


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
    logged_commits: bool = True  # LOGGED (zabby's own) to a follower that makes a quorum with us; not to ZooKeeper's

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
    repairing: bool = False  # the storage found damage: acknowledged txns may be gone from this log


def static_membership(config: PeerConfig) -> Membership:
    """The membership of a configuration file without addresses (the core needs none)."""
    members = [Member(sid, "", 0, 0, sid in config.observers) for sid in config.voters | config.observers]
    return Membership.of(members, 0)


class Replica:
    role: Role

    def __init__(self, config: PeerConfig, durable: DurableState) -> None:
        self.config = config
        self.sid = config.sid
        self.members = Memberships(config.sid, durable.membership or static_membership(config), durable.proposed)
        self.accepted_epoch = durable.accepted_epoch
        self.current_epoch = durable.current_epoch
        self.last_logged = durable.last_logged
        self.applied = durable.applied
        # A snapshot installed from a leader that never got established may hold txns a later
        # leader truncates (ZooKeeper's ZOOKEEPER-1549).  Cutting the log cannot undo them, so a
        # TRUNC below the newest snapshot is refused and the next sync asks for a SNAP instead.
        self.snapshot_zxid = durable.snapshot_zxid
        self.snapshot_wanted = durable.snapshot_wanted
        # A server whose storage lost txns it may have acknowledged must not help elect a
        # leader that lacks them: it votes for nobody (its vote counts for no one) until a
        # leader has synced it, and joins a leader the others established.
        self.repairing = durable.repairing
        self.history = History(config.commit_log_count)
        self.history.extend(durable.history)
        self.pending: deque[Txn] = deque(t for t in durable.history if t.zxid > durable.applied)
        self.now = 0
        self.logical_clock = 0
        self._regular_sids: set[int] = set()  # servers this Ready has regular messages for
        # Servers that Readys handed out and not yet advanced have regular messages for, and
        # how many such Readys: the shell may send those late (after a background fsync), so
        # an early message to one of them would overtake them (see ``_send_early``).
        self._unsent_sids: dict[int, int] = {}
        self._ready = Ready(soft_state=SoftState(ServerState.LOOKING, ZabPhase.ELECTION, None, self.current_epoch, False))

    # ----------------------------------------------------------------- membership views
    @property
    def membership(self) -> Membership:
        """The committed membership."""
        return self.members.committed

    @property
    def proposed(self) -> Membership | None:
        """The membership of a logged RECONFIG txn not known to be committed."""
        return self.members.proposed

    @property
    def hinted(self) -> Membership | None:
        """A vote's proposed membership, for the next election only."""
        return self.members.hinted

    @property
    def peers(self) -> frozenset[int]:
        """The servers to vote with: every member of the committed, proposed and hinted memberships."""
        return self.members.peers()

    def _role_changed(self) -> bool:
        """Following as a voter while the membership makes us an observer, or the reverse."""
        role = self.role
        return isinstance(role, LearnerRole) and (role.state == ServerState.OBSERVING) != self.members.observes()

    # ----------------------------------------------------------------- role changes (Peer's)
    def _become_looking(self, vote_for: int = 0, hand_over: bool = False) -> None:
        """LOOKING; the first vote goes to ``vote_for`` when a reconfig designated a leader."""
        raise NotImplementedError

    def _decide(self, vote: Vote) -> None:
        """The election is over: take the role ``vote`` gives us."""
        raise NotImplementedError

    def _learner_resync(self) -> None:
        """The stream from the leader is broken: drop it and look again (never exit)."""
        self._become_looking()

    # ----------------------------------------------------------------- the Ready
    def _send(self, sid: int, message: Message) -> None:
        if isinstance(message, Notification):  # our memberships: a peer may adopt them, or find it is no candidate
            message = replace(message, config=self.membership.text(), proposed=self.proposed.text() if self.proposed else "",
                              logged=self.last_logged)  # fmt: skip
        self._ready.messages.append((sid, message))
        self._regular_sids.add(sid)

    def _send_early(self, sid: int, message: Message) -> None:
        """A packet that may leave before this Ready's persistence (a leader's PROPOSAL, COMMIT,
        INFORM, PING); it stays behind any regular message to the same server, of this Ready
        or of one handed out and not yet advanced (a PROPOSAL made regular behind a PING
        waits for the fsync; the next PROPOSAL must not overtake it: the learner would see a
        gap), so each stream keeps its order.  A learner's forwarded writes do not come here:
        they are all early, in order (``Peer.forward``)."""
        if sid in self._regular_sids or sid in self._unsent_sids:
            self._ready.messages.append((sid, message))
            self._regular_sids.add(sid)
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
        self.members.logged(txns)

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
        self.members.truncated(zxid)
