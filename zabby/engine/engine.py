"""The engine: everything one server decides, run by a driver that only does I/O.

Theory of operation::

    driver inputs:  tick() · receive(sid, message) · link_down(sid) · snapshot_written(zxid, ok)
    client inputs:  submit · create_session · close_session · client_sync · touch · attach/detach
                                       │
               Engine: core.Peer + DataTree + Preparer + sessions + watches (synchronous)
                                       │
    effects out:    next_effect(result) → Send · Persist · Reload · StageSnapshot · Install ·
                    DropLinks · CloseClients · WriteSnapshot · Purge · CheckSpace · Pause · FailStop

The trio server (``zabby.server.node``) and the simulator (``zabby.sim.cluster``) are two
drivers of this one engine; nothing that decides lives in a driver.  Work runs as a
generator per unit (feeding queued inputs, one core Ready, a repair): it yields an effect,
the driver carries it out and hands back the result, and the generator goes on.  Every
Ready takes one path (``_process``), so the Ready contract (``zabby.core.ready``) — send
early, persist, apply (or apply first, when an earlier Ready logged what it commits), send,
drop links, act on it, then ``advance`` — is written here once, whether the Ready waits for
the log's sync, changes more than the log, or asks for no effect at all (a forwarded write
to prepare, sessions a ping touched).  Driver inputs that arrive while a unit of work waits
for its effect are queued, and fed when it is done.  Durability is an input like the others:
a broadcast Ready appends (``Append``) and goes on, and what must follow its fsync waits
until the driver answers that the log is durable (at once, for a sync done inline) or
reports it (``log_synced``, for a sync done in the background); see "one Ready".  The
engine has this one way whichever way the driver syncs.  Client calls act at once: a write
is prepared on the leader (or forwarded by a learner) while the previous Ready is on disk,
as ZooKeeper's pipeline does.

Faults: when a unit of work fails (a txn that does not fit the tree, a snapshot at another
zxid than declared, a digest that differs from the leader's, a bug, a full disk), the engine
repairs itself in place: it stops serving, drops its links, reloads the tree and its durable
state from disk, and starts a new core that looks for the leader and asks it for a SNAP.
A failed disk is the one thing it does not repair: ``FailStop``.
"""

from __future__ import annotations

import logging
import math
import random
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from zabby.config import ServerConfig
from zabby.core.messages import Ack, Diff, Logged, Message, Proposal, Request, Revalidate, Revalidated, Snap, SnapChunk, TreeDigest, Trunc
from zabby.core.peer import Peer, PeerConfig
from zabby.core.zk_link import SUPER_ID
from zabby.core.ready import Ready, SoftState
from zabby.core.types import ServerState
from zabby.engine.clients import ClientCalls, Waiters, ZxidWaiters, first_session_id
from zabby.engine.digests import DigestCheck
from zabby.engine.zk_digests import ZkDigests
from zabby.engine.effects import (
    FLUSH_CLIENTS, Append, CheckSpace, ClientSink, ClientsKept, CloseClients, Clock, Done, DropLinks, Effect, FailStop, Freezer,
    Frozen, Install, Pause, Persist, Purge, Reconfigure, Recovered, Reload, Send, StageSnapshot, SyncDone, WriteSnapshot,
)  # fmt: skip
from zabby.errors import Inconsistency, InvariantError
from zabby.opcodes import OpCode
from zabby.engine.stats import ServerStats
from zabby.storage.files import DiskFailure, DiskFull
from zabby.tree.datatree import DataTree, Event, TreeBuilder
from zabby.tree.prep import Caller, Preparer, PrepLimits
from zabby.tree.sessions import SessionTracker
from zabby.tree.txns import ZXID_COUNTER_MASK, Txn, zxid_counter
from zabby.tree.watches import Run, WatchHistory, WatchManager

LOGGER = logging.getLogger("zabby.server")

CORE_TICK_MS_MAX = 50
FORWARDED_CALLERS_MAX = 4096  # the Callers of forwarded writes kept, by session and ids: each write made one anew
# config.turn_ops_max: the ops a turn of the driver applies before the engine applies no more
# in it (1,000: about 7 ms of applies on a quiet machine); the driver lets its other tasks run,
# and the next turn goes on.  Without it, a burst of big multis from many connections was
# applied in one go while every other client waited (0.6 s).  A txn is applied whole, however
# many ops it has.  The trio driver's turn is a pass of its scheduler (``zabby.server.clients.passes``),
# whichever of its tasks run the engine in it; the simulator's is a step of its loop.
FINALIZE_WAIT_MS = 200
# The members the per-txn paths compare with, as globals (see zabby.opcodes: an Enum's own
# attribute costs six times a global's under Python 3.11)
_MULTI = OpCode.MULTI
_DATA_TXNS = frozenset({OpCode.CREATE, OpCode.SET_DATA})
_OBSERVING = ServerState.OBSERVING
# Sessions a leader expires in one check: each is a closeSession prepared (its ephemerals
# listed) and a log line.  All of a bucket at once, 20,000 sessions a client opened and
# dropped together stalled every client for 0.3-0.6 s when they expired; past this many, the
# rest are expired at the next core tick (50 ms): up to 4,000 a second.
EXPIRIES_PER_CHECK_MAX = 200
REPAIR_PAUSE_MS = 1000  # a repair this soon after the last one waits first
Work = Generator[Effect, Any, None]


def core_timing(config: ServerConfig) -> tuple[int, PeerConfig]:
    """The core's tick (ms) and its limits in ticks, from zoo.cfg's tickTime-based limits."""
    core_tick_ms = min(CORE_TICK_MS_MAX, config.tick_ms)
    per_tick = max(1, config.tick_ms // core_tick_ms)
    voters = frozenset(p.sid for p in config.peers if not p.observer) or frozenset({config.server_id})
    observers = frozenset(p.sid for p in config.peers if p.observer)
    return core_tick_ms, PeerConfig(
        sid=config.server_id,
        voters=voters,
        observers=observers,
        init_limit_ticks=config.init_limit_ticks * per_tick,
        sync_limit_ticks=config.sync_limit_ticks * per_tick,
        ping_interval_ticks=max(1, per_tick // 2),
        finalize_wait_ticks=math.ceil(FINALIZE_WAIT_MS / core_tick_ms),
        notify_interval_ticks_min=math.ceil(FINALIZE_WAIT_MS / core_tick_ms),
        notify_interval_ticks_max=math.ceil(2000 / core_tick_ms),
        commit_log_count=config.commit_log_count,
        zxid_counter_last=config.zxid_counter_last,
        logged_commits=not config.zookeeper_peers,
    )



def _deliver(runs: list[Run], zxid: int) -> None:
    """Each watcher's events of one txn in one call, in the order they fired, and one list for
    the watchers that heard the same events (their connections then encode it once): a multi
    of 5,000 setData seen by 50 recursive watches fires 250,000 events, and a call each (a
    frame encoded, queued and charged apiece) held the server 0.96 s of CPU."""
    if len(runs) == 1:  # nearly always: every watcher gets the same events
        readers, events = runs[0]
        for sink in readers:
            sink.send_events(zxid, events)  # type: ignore[attr-defined]  # the watchers are the ClientSinks
        return
    by_sink: dict[Any, list[tuple[int, str]]] = {}
    for readers, events in runs:
        for sink in readers:
            held = by_sink.get(sink)
            if held is None:
                by_sink[sink] = list(events)
            else:
                held.extend(events)
    same: dict[tuple[tuple[int, str], ...], list[tuple[int, str]]] = {}
    for sink, held in by_sink.items():
        sink.send_events(zxid, same.setdefault(tuple(held), held))


class Engine(ClientCalls):
    """One server's decisions.  Not thread-safe: the driver and the client sessions call it
    from one thread (the trio thread, or the simulator's loop).

    Args:
        config: the server's zoo.cfg settings.
        peer_config: the core's identity, quorum and limits in core ticks.
        core_tick_ms: how long one ``tick()`` stands for.
        recovered: the tree and durable state read from disk at start-up.
        clock, freezer, rng: the ports (wall and monotonic time; tree images; randomness
            for snapshot spacing and session passwords).
        wake: called when a client call left work for ``next_effect``.
        on_applied: called with each committed txn the tree applies (the simulator's checks).
    """

    def __init__(self, config: ServerConfig, peer_config: PeerConfig, core_tick_ms: int, recovered: Recovered, *,
                 clock: Clock, freezer: Freezer, rng: random.Random, wake: Callable[[], None] = lambda: None,
                 on_applied: Callable[[Txn, Any], None] | None = None, stats: ServerStats | None = None) -> None:  # fmt: skip
        self.config = config
        self.peer_config = peer_config
        self.core_tick_ms = core_tick_ms
        self.clock = clock
        self.freezer = freezer
        self.rng = rng
        self.wake = wake
        self.on_applied = on_applied
        self.stats = stats if stats is not None else ServerStats()
        self.standalone = not config.peers
        self.tree = recovered.tree
        self.preparer = Preparer(self.tree, PrepLimits(config.jute_buffer_bytes_max, config.txn_bytes_max, config.acl_entries_max,
                                                       config.txn_acl_entries_max, config.znodes_max, config.tree_bytes_max, config.ttl_enabled,
                                                       sasl_acls=config.sasl_acls))  # fmt: skip
        self.peer = Peer(peer_config, recovered.durable)
        self._set_soft(self.peer.soft_state())
        self.watches = WatchManager()
        self.history = recovered.history if recovered.history is not None else WatchHistory(config.watch_history_txns, self.tree.last_zxid, config.watch_history_bytes)
        self.sessions = SessionTracker(config.tick_ms)
        self.session_sinks: dict[int, ClientSink] = {}
        self.closing_sessions: set[int] = set()
        self.opening_sessions: set[int] = set()  # createSessions prepared here and not yet applied
        self.local_sessions: dict[int, tuple[int, bytes]] = {}  # read-only mode's sessions
        self.looking_since_ms: int | None = clock.monotonic_ms()  # None while not LOOKING
        self.leading_since_ms: int | None = None  # since when this server leads and serves (mntr's leader_uptime)
        self.waiting: Waiters[tuple[int, Done, int]] = Waiters()  # a client write's answer: (op, done, its ops)
        self.sync_waiting: Waiters[SyncDone] = Waiters()
        self.zxid_waiting = ZxidWaiters()  # clients' waits for a zxid
        self.outstanding = 0
        self._answered = False  # an apply answered a client's write since the last FlushClients
        self.space_low = False
        self.last_proposal_bytes = (0, 0, 0)  # last, min, max
        self.digests = DigestCheck(self.stats)
        # ZooKeeper's digest of each proposal, for ZooKeeper learners (None: zabby's protocol)
        self.zk_digests = ZkDigests() if config.zookeeper_peers else None
        self._zk_mismatch_logged = False  # a learner's first mismatch with this leader's digests was logged
        self._zk_check_failed = False  # a learner could not replay one of this leader's txns: no more checks
        self._inputs: deque[tuple[int, Any, Any]] = deque()
        self._proposals: list[Txn] = []
        self._turn_ops = 0  # ops applied in the driver's turn (``begin_turn``)
        self._forwarded_callers: dict[tuple[int, Any], Caller] = {}  # (session, its ids) → the Caller its forwarded writes run as
        self._snap_in: dict[int, tuple[Snap, TreeBuilder]] = {}
        self._work: Work | None = None
        self._logged_zxid = self._durable_zxid = recovered.durable.last_logged  # the log holds, and durably
        self._sync_asked_zxid = 0  # an Append asked for the log to be durable up to here
        self._tails: deque[_Tail] = deque()  # what Readys left until the log is durable, oldest first
        self._ticks = 0
        self._expiry_checked_ms: int | None = None  # the last session expiry check
        self._stall_excused = False  # that check was skipped: this server had stalled
        self._expiries_left = False  # the last check left expired sessions for the next
        self._digest_sent_tick = -1
        self._repaired_at_ms: int | None = None
        self.last_failure: BaseException | None = None  # what the last repair was for
        self._tree_committed = False  # every txn in the tree is known to be committed
        self._txns_since_snapshot = 0
        self._snapshot_due = self._snapshot_threshold()
        self._snapshot_running = False
        self._next_session_id = first_session_id(config.server_id, clock.wall_ms())
        self._membership_seen = (self.peer.membership, self.peer.proposed, self.peer.hinted)
        self._clients_held_since_ms: int | None = None  # the idle clients are held since (see ``_stop_serving``)
        self._clients_leave_at: int | None = None  # the version of a committed membership that leaves this server out, until applied
        if not self.standalone:  # a standalone server's /zookeeper/config is empty, as ZooKeeper's
            self._show_config()
        if _leads(self.soft):  # a standalone server leads from the start: no state change will say so
            self._track_tree_sessions()

    def _show_config(self) -> None:
        membership = self.peer.membership
        self.tree.show_config(membership.text(), membership.version, self.clock.wall_ms())

    # ----------------------------------------------------------------- state
    @property
    def last_zxid(self) -> int:
        return self.tree.last_zxid

    @property
    def state(self) -> str:
        """The mode as ZooKeeper's ``srvr`` names it."""
        if self.read_only:
            return "read-only"
        if not self.soft.serving:
            return "looking" if self.soft.state == ServerState.LOOKING else "syncing"
        if self.standalone:
            return "standalone"
        return {ServerState.LEADING: "leader", ServerState.FOLLOWING: "follower", ServerState.OBSERVING: "observer"}[self.soft.state]

    @property
    def receiving_snapshot(self) -> bool:
        """A SNAP arrived and its chunks are still coming: the tree is empty meanwhile."""
        return bool(self._snap_in)

    @property
    def awaiting_sync(self) -> bool:
        """Readys wait for the log's background sync (``Append``) to finish them."""
        return bool(self._tails)

    @property
    def applied_once_synced(self) -> int:
        """The zxid the tree reaches once the Readys waiting for the log's sync are finished."""
        for tail in reversed(self._tails):
            if tail.committed:
                return tail.committed[-1].zxid
        return self.tree.last_zxid

    @property
    def throttled(self) -> bool:
        return self.outstanding >= self.config.outstanding_requests_max

    def _snapshot_threshold(self) -> int:
        # ZooKeeper randomizes so that the servers of an ensemble do not all snapshot at once
        count = self.config.snap_count
        return self.rng.randint(count // 2 + 1, count)

    # ----------------------------------------------------------------- driver inputs
    def tick(self) -> None:
        self._inputs.append((_TICK, None, None))

    def receive(self, sid: int, message: Message) -> None:
        self._inputs.append((_MESSAGE, sid, message))

    def heard_from(self, sid: int) -> None:
        """Part of a stream from ``sid`` arrived that is no message yet (a SNAP's tree in
        ZooKeeper's protocol): its sender is alive."""
        self.peer.heard_from(sid)

    def link_down(self, sid: int) -> None:
        self._inputs.append((_LINK_DOWN, sid, None))

    def snapshot_written(self, zxid: int, ok: bool, elapsed_ms: float) -> None:
        self._inputs.append((_SNAPSHOT_WRITTEN, (zxid, ok, elapsed_ms), None))

    def log_synced(self, zxid: int, error: Exception | None = None) -> None:
        """The log is durable up to ``zxid`` (an ``Append``'s sync done in the background), or
        that sync raised ``error``, which fails the engine's work as a failed effect would."""
        self._inputs.append((_LOG_SYNCED, zxid, error))

    @property
    def inputs_queued(self) -> int:
        """Driver inputs not fed yet: they queue while a unit of work waits for its effect."""
        return len(self._inputs)

    def begin_turn(self) -> None:
        """The driver starts a turn: up to ``config.turn_ops_max`` ops applied, then ``next_effect``
        answers None with work left (``has_work``) for the next turn.  A turn after one that
        did a large thing (a txn of more ops than a turn, the driver's own ``take_turn``)
        applies nothing: a client whose request came in meanwhile waits for one large thing,
        not for two."""
        limit = self.config.turn_ops_max
        self._turn_ops = limit if self._turn_ops > limit else 0

    def take_turn(self) -> bool:
        """The driver's own large work (a large request prepared) takes the whole turn if
        nothing was applied in it yet: True, and the engine applies nothing more until the
        turn after next; False if the turn has applied something (the large work waits)."""
        if self._turn_ops:
            return False
        self._turn_ops = self.config.turn_ops_max + 1
        return True

    def _end_turn(self) -> None:
        self._turn_ops = max(self._turn_ops, self.config.turn_ops_max)

    def has_work(self) -> bool:
        """Asked when ``next_effect`` answered None: whether work is left for the driver's next
        turn.  ``next_effect`` answers None only with no input, no unit of work, no Ready and
        no proposal it could make, so what can be left is the Readys the durable log covers
        whose applies this turn had no room for (``_next_work``).  (Asking the core again cost
        a soft state built per request, reads included.)"""
        tails = self._tails
        return bool(tails) and tails[0].needs <= self._durable_zxid

    # ----------------------------------------------------------------- the work loop
    def next_effect(self, result: Any = None, error: BaseException | None = None) -> Effect | None:
        """The next effect for the driver to carry out, given the result of the last one (or
        the exception carrying it out raised); None when there is nothing to do."""
        while True:
            if self._work is None:
                try:
                    self._work = self._next_work()
                except Exception as exc:  # proposing or taking a Ready failed: as a unit of work's failure
                    self._work = self._repair(exc)
                if self._work is None:
                    return None
                result, error = None, None
            try:
                return self._work.throw(error) if error is not None else self._work.send(result)
            except StopIteration:
                self._work = None
            except Exception as exc:  # the unit of work failed: repair in place
                self._work = self._repair(exc)
            result, error = None, None

    def _next_work(self) -> Work | None:
        if self._inputs:
            return self._feed()
        # Once the driver's turn has applied its ops, the applies left wait for its next turn
        # (other clients are served between); Readys go on meanwhile: what they apply is
        # within the turn too (``_turn_room``), and what they send (pings, proposals,
        # acknowledgements) must not wait behind a backlog of applies (a leader whose pings
        # waited so lost its followers).
        if self._tails and self._turn_ops < self.config.turn_ops_max and self.has_work():
            return self._finish_durable()
        if self._proposals and self.peer.established_leader:  # the core's state: it may have just stepped down
            batch = self._next_batch()
            self.peer.propose(batch)
            if self.zk_digests is not None:
                self.zk_digests.proposed(batch)
            if (batch[-1].zxid & ZXID_COUNTER_MASK) == self.peer_config.zxid_counter_last:  # zxid_counter, without a call
                LOGGER.warning("the zxid counter of epoch %d is used up at 0x%x: this leader steps down, and the "
                               "election that follows starts a new epoch", batch[-1].zxid >> 32, batch[-1].zxid)  # fmt: skip
        if not self.peer.has_ready():
            return None
        return self._process(self.peer.ready())

    def _next_batch(self) -> list[Txn]:
        """The prepared txns to propose together: up to ``config.turn_ops_max`` ops (a bigger multi
        alone), so that one Ready's applies fit a turn of the driver."""
        proposals = self._proposals
        if len(proposals) == 1:  # one at a time: a turn with no ops yet takes the first whatever its ops
            self._proposals = []
            return proposals
        count, _ = self._turn_room(proposals, 0)
        batch, self._proposals = proposals[:count], proposals[count:]
        return batch

    def _feed(self) -> Work:
        while self._inputs:
            kind, a, b = self._inputs.popleft()
            if kind == _TICK:
                yield from self._tick()
            elif kind == _LINK_DOWN:
                self.peer.link_down(a)
            elif kind == _SNAPSHOT_WRITTEN:
                yield from self._snapshot_written(*a)
            elif kind == _LOG_SYNCED:
                if b is not None:
                    raise b
                self._durable_zxid = max(self._durable_zxid, a)
                yield from self._finish_durable()
            elif b.__class__ not in _ENGINE_MESSAGES:  # nearly every message: the core's (exact classes, as decoded)
                self.peer.step(a, b)
            elif b.__class__ is TreeDigest:
                if b.zxid and self.soft.leader == a and not self.is_leader:
                    self.digests.expect(b.zxid, b.digest, a, self.tree)
            elif b.__class__ is Snap or b.__class__ is SnapChunk:
                yield from self._receive_snapshot(a, b)
            elif b.__class__ is Revalidate:
                if self.peer.established_leader:
                    yield Send([(a, self.revalidate(a, b))])
            elif self.soft.leader == a:  # Revalidated
                self.revalidated(b)  # type: ignore[arg-type]
            if self._snap_in:
                yield from self._abandon_snapshot()
        yield from self._membership_changed()

    def _tick(self) -> Work:
        self._ticks += 1
        self.peer.tick()
        if self.zxid_waiting:
            self.zxid_waiting.expire(self.clock.monotonic_ms())
        if self.space_low and self._ticks % max(1, 1000 // self.core_tick_ms) == 0:
            self.space_low = yield CheckSpace()
        if self._clients_held_since_ms is not None:
            yield from self._release_held_clients()
        if not self.peer.established_leader:  # the core's state now: this feed may have changed it
            self._expiry_checked_ms = None
            self._expiries_left = False
            return
        if self._expiries_left or self._ticks % max(1, self.config.tick_ms // self.core_tick_ms) == 0:
            self._expire_sessions()
        if self._ticks % max(1, self.config.container_check_interval_ms // self.core_tick_ms) == 0:
            self.reap_containers()

    def _expire_sessions(self) -> None:
        """Expire the sessions nobody touched in time, except right after this server itself
        stood still (a blocking fsync on a busy disk, a paused process): the pings and touches
        of that time wait unread in its sockets, so the check waits one round for them."""
        now = self.clock.monotonic_ms()
        last, self._expiry_checked_ms = self._expiry_checked_ms, now
        if last is not None and now - last > 2 * self.config.tick_ms and not self._stall_excused:
            LOGGER.warning("no session expiry check for %d ms (this server stalled): the next one waits a tick", now - last)
            self._stall_excused = True
            return
        self._stall_excused = False
        expired = self.sessions.expired(now, EXPIRIES_PER_CHECK_MAX + 1)
        for session_id in expired[:EXPIRIES_PER_CHECK_MAX]:
            self._expire(session_id)
        self._expiries_left = len(expired) > EXPIRIES_PER_CHECK_MAX  # the rest at the next core tick, not the next tickTime

    # ----------------------------------------------------------------- one Ready
    # Every Ready takes one path, the contract's steps in order (``zabby.core.ready``):
    # early messages (step 0); the commits the log already holds durably, when step 5 may
    # come first (``_applies_first``); the log (steps 1-4); the requests and touched
    # sessions (step 7's, at once: a forwarded write is prepared while the log syncs); and
    # the rest (``_finish``: steps 5-8) now, or once the log is durable up to what it needs.
    #
    # A Ready of the broadcast phase (``_only_logs``) does not wait for its fsync: it
    # appends its txns (``Append``), and what must follow the fsync waits in a ``_Tail``
    # (its regular messages, ACKs and LOGGED among them; its other commits; its sync
    # answers; ``advance``, which counts a leader's own log) until the log is durable: at
    # once, when the driver synced inline, or when it reports ``log_synced``.  Meanwhile
    # the engine goes on with the next inputs and Readys, the next fsync covering their
    # appends, as ZooKeeper's SyncRequestProcessor does, and the tails the durable log
    # covers are finished together (``_finish_durable``).  The tree never gets ahead of the
    # durable log.  A Ready that does more (epochs, a truncation, a SNAP, a role change,
    # links to drop) first makes the log durable and finishes every earlier one
    # (``_sync_all``), then persists (``Persist``) and is finished at once.  A Ready that
    # asks for no effect but early messages (a forwarded write, a ping's touched sessions)
    # takes ``_process_light``: nothing to store, apply or wait for.
    def _process(self, ready: Ready) -> Work:
        if not ready.sync_replies and ready.soft_state == self.soft and not ready.asks_beyond_early_messages():
            yield from self._process_light(ready)
            return
        broadcast = self._only_logs(ready)
        if self._tails and not broadcast:
            yield from self._sync_all()
        if ready.early_messages:  # the core keeps them behind what waits on their links
            yield Send(ready.early_messages)
        tail = _Tail(0, ready, ready.committed)
        applied_first = bool(ready.committed) and self._applies_first(ready)
        if applied_first:
            committed = ready.committed
            # a broadcast Ready's, as many as the turn has room for: the rest wait with its tail
            if not broadcast or (len(committed) == 1 and not self._turn_ops):  # a turn with no ops yet takes one whole
                fits = len(committed)
            else:
                fits = self._turn_room(committed, self._turn_ops)[0]
            if fits == len(committed):
                tail.images = self._apply_and_freeze(committed, ready.messages)
                tail.committed = []
            elif fits:  # no SNAP in a broadcast Ready: no image to take
                self._apply(committed[:fits])
                tail.committed = committed[fits:]
            applied_first = fits > 0
            if self._answered:  # not held behind the log's append and its fsync
                yield from self._flush_answers()
        if broadcast:
            yield from self._append(tail)
        else:
            yield from self._persist(ready)
        if applied_first and self.config.digest_enabled:
            yield from self._digests_after_commits()
        self._act_on(ready)
        tails = self._tails
        must_wait = tails or tail.needs > self._durable_zxid
        if (broadcast and tail.committed) or (must_wait and (ready.messages or tail.committed or ready.sync_replies or ready.append)):
            tails.append(tail)  # a broadcast Ready's commits are applied within the turns (_finish_durable)
        else:  # nothing waits before it, or it holds nothing that must wait: finished now
            yield from self._finish([tail])
        if tails and tails[0].needs <= self._durable_zxid:  # an Append synced here covers them
            yield from self._finish_durable()

    def _process_light(self, ready: Ready) -> Work:
        """A Ready that sends early messages at most and asks for no other effect (a learner's
        forward of a client's write, the leader's REQUEST from a learner, touched sessions):
        nothing to store, apply, answer or wait for, so of ``_process``'s steps only step 0,
        step 7 and ``advance`` are left, with no tail and no ``_finish`` (a leader took 60
        µs from a learner's REQUEST to its PROPOSAL, 51 with this: ``harness.bench.write_path``)."""
        if ready.early_messages:
            yield Send(ready.early_messages)
        self._act_on(ready)
        if self._membership_moved():
            yield from self._membership_changed()
        self.peer.advance(ready)

    def _flush_answers(self) -> Work:
        """The answers the applies made leave now (``FlushClients``), not once the driver
        has nothing left to do: one client writing one request at a time waits for them."""
        self._answered = False
        yield FLUSH_CLIENTS

    def _only_logs(self, ready: Ready) -> bool:
        if (ready.accepted_epoch is not None or ready.current_epoch is not None or ready.truncate_to is not None
                or ready.drop_links or ready.soft_state != self.soft):  # fmt: skip
            return False
        for _, message in ready.messages:
            if message.__class__ is Snap:
                return False
        return True

    def _applies_first(self, ready: Ready) -> bool:
        """Whether step 5 comes before steps 1-4: an earlier Ready logged every txn this one
        commits, durably, no earlier Ready's commits wait, and this one writes no epoch and
        cuts nothing.  Under pipelined load those txns are then answered without waiting for
        the fsync of the ones logged after them."""
        committed = ready.committed
        return bool(committed and committed[-1].zxid <= self._durable_zxid and ready.truncate_to is None
                    and ready.accepted_epoch is None and ready.current_epoch is None
                    and not (self._tails and any(t.committed for t in self._tails)))  # fmt: skip

    def _append(self, tail: _Tail) -> Work:
        """Step 3 of a broadcast Ready: append its txns and have the log made durable, here or
        in the background; ``tail.needs`` is where the log must be durable up to before the
        rest of it is carried out (its appends and commits, and those of the Readys before it)."""
        ready, committed = tail.ready, tail.committed
        needs = max(ready.append[-1].zxid if ready.append else 0, committed[-1].zxid if committed else 0)
        if ready.append or needs > max(self._durable_zxid, self._sync_asked_zxid):
            sync = self._sync_enabled()
            self.space_low, durable = yield Append(ready.append, sync)
            if ready.append:
                self._logged_zxid = ready.append[-1].zxid
            if sync:
                self._sync_asked_zxid = self._logged_zxid
            if durable or not sync:
                self._durable_zxid = self._logged_zxid
        tail.needs = max(needs, self._tails[-1].needs if self._tails else 0)

    def _persist(self, ready: Ready) -> Work:
        sync = ready.must_sync and self._sync_enabled()
        if (ready.accepted_epoch is None and ready.current_epoch is None and ready.truncate_to is None
                and not ready.append and not sync):  # fmt: skip
            return
        if ready.truncate_to is not None:
            self._logged_zxid = min(self._logged_zxid, ready.truncate_to)
            self._durable_zxid = min(self._durable_zxid, ready.truncate_to)
        if ready.truncate_to is not None and self.tree.last_zxid > ready.truncate_to:
            # the tree holds txns the cut takes out: reload it from the cut log, before the
            # txns this Ready appends after the cut are in the log too
            LOGGER.info("truncating the log after 0x%x", ready.truncate_to)
            self.space_low = yield Persist(ready.accepted_epoch, None, ready.truncate_to, [], False)
            yield from self._reload(f"the tree is ahead of the log (0x{self.tree.last_zxid:x})")
            if ready.append or sync or ready.current_epoch is not None:
                self.space_low = yield Persist(None, ready.current_epoch, None, ready.append, sync)
        else:
            if ready.truncate_to is not None:
                LOGGER.info("truncating the log after 0x%x", ready.truncate_to)
            self.space_low = yield Persist(ready.accepted_epoch, ready.current_epoch, ready.truncate_to, ready.append, sync)
        if ready.append:
            self._logged_zxid = ready.append[-1].zxid
        if sync or not self._sync_enabled():
            self._durable_zxid = self._logged_zxid

    def _finish(self, tails: list[_Tail]) -> Work:
        """Steps 5-8 of the Readys ``tails`` left, oldest first, now that the log holds
        durably what they wait for: apply the commits not applied first, send the messages,
        drop links, answer the syncs, change state, then ``advance`` each Ready.  Several
        tails are broadcast Readys (a SNAP, a link to drop or a role change comes in a
        Ready finished alone), done with one apply and one Send, an ACK or LOGGED that a
        later one covers left out (the one sync made all of them durable)."""
        last = tails[-1]
        if len(tails) == 1:
            committed, messages, images = last.committed, last.ready.messages, last.images
        else:
            committed = [txn for tail in tails for txn in tail.committed]
            messages = [m for tail in tails for m in tail.ready.messages]
            images = None
        if images is None:  # not applied first
            images = self._apply_and_freeze(committed, messages) if committed or messages else {}
        unsent: tuple[int, ...] = ()
        if messages:
            messages, unsent = self._with_images(_without_superseded(messages), images)
            if messages:
                yield Send(messages, images)
        if self._answered:  # after the ACKs and LOGGEDs, before the rest of the Ready's work
            yield from self._flush_answers()
        if committed and self.config.digest_enabled:
            yield from self._digests_after_commits()
        ready = last.ready
        if ready.drop_links or unsent:
            yield DropLinks(tuple(ready.drop_links) + unsent)
        for tail in tails:
            self._answer_syncs(tail.ready)
        if ready.soft_state != self.soft:
            yield from self._change_state(ready.soft_state)
        if self._txns_since_snapshot >= self._snapshot_due:  # asked first: a call per Ready saved
            snapshot = self._due_snapshot()
            if snapshot is not None:
                yield snapshot
        if self._membership_moved():
            yield from self._membership_changed()
        for tail in tails:
            self.peer.advance(tail.ready)

    def _finish_durable(self, budgeted: bool = True) -> Work:
        """Finish, in order, the Readys whose wait the durable log now covers, with as many
        commits as the driver's turn has room for (``_turn_room``): a Ready whose commits do
        not all fit has the first of them applied now, and the rest, and the Ready, wait for
        the next turns (``_next_work``); all of them, not ``budgeted``."""
        tails = self._tails
        done: list[_Tail] = []
        first_of_next: list[Txn] = []
        turn_ops = self._turn_ops
        while tails and tails[0].needs <= self._durable_zxid:
            head = tails[0]
            if budgeted and head.committed:
                fits, turn_ops = self._turn_room(head.committed, turn_ops)
                if fits < len(head.committed):
                    first_of_next, head.committed = head.committed[:fits], head.committed[fits:]
                    break
            done.append(tails.popleft())
        if done:
            yield from self._finish(done)
        if first_of_next:  # a broadcast Ready's: no SNAP among its messages, no image to take
            self._apply(first_of_next)
            if self.config.digest_enabled:
                yield from self._digests_after_commits()
        if budgeted and tails and tails[0].needs <= self._durable_zxid:
            self._end_turn()  # the rest in the next turn

    def _turn_room(self, txns: list[Txn], turn_ops: int) -> tuple[int, int]:
        """How many of ``txns``, from the first, a turn of the driver has room for after
        ``turn_ops`` ops, and its ops then: within ``config.turn_ops_max``, and in a turn
        that has none yet the first whatever its ops (a txn is applied whole)."""
        limit, count = self.config.turn_ops_max, 0
        for txn in txns:
            ops = turn_ops + (len(txn.body[0]) if txn.type == _MULTI else 1)
            if ops > limit and turn_ops:
                break
            count, turn_ops = count + 1, ops
        return count, turn_ops

    def _sync_all(self) -> Work:
        """Make the whole log durable here and finish every Ready still waiting for it."""
        if self._durable_zxid < self._logged_zxid:
            self.space_low = yield Persist(None, None, None, [], True)
            self._durable_zxid = self._logged_zxid
        yield from self._finish_durable(budgeted=False)

    def _sync_enabled(self) -> bool:
        if self.soft.state == _OBSERVING:
            return self.config.force_sync and self.config.observer_sync_enabled
        return self.config.force_sync

    def _reload(self, why: str) -> Work:
        """The tree from disk (snapshot plus the whole log), as after a restart."""
        LOGGER.info("%s: reloading the tree from disk", why)
        recovered: Recovered = yield Reload(why)
        if recovered.durable.repairing:  # the reload found damage and started over empty: so must the core
            raise Inconsistency(f"the storage found its history damaged while reloading ({why})")
        yield from self._replace_tree(recovered.tree, recovered.history)
        self._tree_committed = False

    def _forwarded_caller(self, sid: int, request: Request) -> Caller | None:
        """Who a learner's forwarded write is for: the session and the identities its client
        proved to the learner (as ZooKeeper forwards authInfo).  Superuser is this server's
        judgement of those ids (skipACL, superDigest), never the packet's word, but for the
        ``super`` id a ZooKeeper learner adds for a client that proved its superDigest, which
        ZooKeeper's leader trusts (with ``quorum.protocol=zookeeper`` only: its links carry no
        proof anyway); None, and the request dropped, if the ids are not (scheme, id) pairs of
        strings.  The callers made are kept by session and ids, and looked up by ``_act_on``
        first (every forwarded write asks)."""
        auth_ids = request.auth_ids
        if not all(isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], str) and isinstance(a[1], str) for a in auth_ids):
            LOGGER.warning("dropping a request forwarded by server %d: its identities are not (scheme, id) pairs", sid)
            return None
        ids = [(scheme, ident) for scheme, ident in auth_ids]
        super_digest = self.config.super_digest
        superuser = self.config.skip_acl or (super_digest is not None and ("digest", super_digest) in ids)
        if self.config.zookeeper_peers and SUPER_ID in ids:
            superuser = True
        caller = Caller(request.session_id, ids, superuser)
        if len(self._forwarded_callers) >= FORWARDED_CALLERS_MAX:  # sessions come and go: start again
            self._forwarded_callers.clear()
        self._forwarded_callers[(request.session_id, auth_ids)] = caller
        return caller

    def _apply_checking_zk_digest(self, txn: Txn, with_stat: bool) -> tuple[Any, list[Event]]:
        """``DataTree.apply`` on a learner that checks its ZooKeeper leader's digests."""
        zk_digests = self.zk_digests
        assert zk_digests is not None
        checked = not self._zk_check_failed and self._check_zk_digest(zk_digests, txn)
        applied = self.tree.apply(txn, with_stat)
        if checked:
            zk_digests.applied(txn.zxid)
        return applied

    def _check_zk_digest(self, zk_digests: ZkDigests, txn: Txn) -> bool:
        """A learner about to apply ``txn`` checks its ZooKeeper leader's digest of it
        (``ZkDigests.check``): a mismatch is counted and, the first with this leader, logged,
        as ZooKeeper's learner does.  False: the check failed, and stops until another
        leader's stream (the apply goes on: a check never stops the server)."""
        try:
            digests = zk_digests.check(self.tree, txn)
        except Exception:  # noqa: BLE001 -- a txn ZooKeeper's replay cannot follow
            LOGGER.exception("ZooKeeper's digest of txn 0x%x could not be replayed: this leader's digests are not "
                             "checked from now on", txn.zxid)  # fmt: skip
            zk_digests.stop()
            zk_digests.forget_carried()
            self._zk_check_failed = True
            return False
        if digests is None:
            return True
        self.stats.zk_digests_checked += 1
        carried, ours = digests
        if carried != ours:
            self.stats.digest_mismatches += 1
            if not self._zk_mismatch_logged:
                self._zk_mismatch_logged = True
                LOGGER.error("digest mismatch after zxid 0x%x: ZooKeeper's tree digest is 0x%016x here but 0x%016x in the "
                             "leader's proposal (server %s); further ones with this leader are counted in "
                             "digest_mismatches_count, not logged", txn.zxid, ours, carried, self.soft.leader)  # fmt: skip
        return True

    def zk_digest_carried(self, zxid: int, digest: tuple[int, int] | None) -> None:
        """The digest a ZooKeeper leader's PROPOSAL or INFORM of ``zxid`` carried (None: none),
        checked when the txn is applied (``ZkDigests.carry``)."""
        if self.zk_digests is not None:
            self.zk_digests.carry(zxid, digest)

    def _replace_tree(self, tree: DataTree, history: WatchHistory | None = None) -> Work:
        """The one place the tree is replaced: the watch history starts again with it (from
        the log replayed onto it, if it came from disk), as its events are about the old tree;
        so does a learner's replay of ZooKeeper's digest.  Clients still connected (held
        through an election) are closed: their watches and what they read are of the old tree,
        which the new one may be behind."""
        if self.session_sinks or self._clients_held_since_ms is not None:
            self._clients_held_since_ms = None
            yield CloseClients()
        self.tree = tree
        if self.zk_digests is not None:
            self.zk_digests.stop()
        self.preparer = Preparer(tree, self.preparer.limits)
        self.history = history if history is not None else WatchHistory(self.config.watch_history_txns, tree.last_zxid, self.config.watch_history_bytes)

    def _act_on(self, ready: Ready) -> None:
        """Step 7 of the Ready: forwarded writes, touched sessions; as soon as its log is
        written, as they ask for no effect.  Writes that reached a leader which stepped down
        in this Ready are dropped: their learners lose this leader too, and their clients see
        the connection lost (nothing was acknowledged)."""
        known = self._forwarded_callers
        for sid, request in ready.requests if ready.requests and self.peer.established_leader else ():
            try:
                caller = known.get((request.session_id, request.auth_ids))
            except TypeError:  # not hashable: not a tuple of (scheme, id) pairs of strings
                caller = None
            if caller is None:
                caller = self._forwarded_caller(sid, request)
            if caller is not None:
                self._prepare(request.op, request.args, caller, request.cxid, forwarded=True)
        if ready.touched_sessions:
            now = self.clock.monotonic_ms()
            for session_id in ready.touched_sessions:
                self.sessions.touch(session_id, now)

    def _answer_syncs(self, ready: Ready) -> None:
        """Step 7's sync answers: after the Ready's commits are applied."""
        for sync in ready.sync_replies:
            done = self.sync_waiting.pop((sync.session_id, sync.cxid))
            if done is not None:
                done()

    # ----------------------------------------------------------------- apply
    def _apply(self, txns: list[Txn]) -> None:
        tree, watches, history, on_applied = self.tree, self.watches, self.history, self.on_applied
        waiting = self.waiting  # no waiter is added meanwhile
        peek, pop_answered = (waiting.peek, waiting.pop_answered) if waiting else (None, None)
        # Watches are set by reads, never while a batch is applied: whether any is set is
        # asked once (a fired one-shot watch only makes the later triggers find less).
        watched = bool(watches.data or watches.child or watches.persistent or watches.recursive)
        zk = self.zk_digests
        apply = self._apply_checking_zk_digest if zk is not None and zk.checking and not (self.is_leader or self._zk_check_failed) else tree.apply
        ops, multi = 0, _MULTI
        for txn in txns:
            kind = txn.type
            if peek is not None and peek(key := (txn.session_id, txn.cxid)) is not None:
                waiter = pop_answered(key, kind)  # type: ignore[misc]  # peek and pop_answered are set together
            else:
                waiter = None
            result, events = apply(txn, waiter is not None)  # no waiter: no Stat to make
            if on_applied is not None:
                on_applied(txn, result)
            if events:
                history.record(txn.zxid, events)
                if watched:
                    runs = watches.runs(events)
                    if runs:
                        _deliver(runs, txn.zxid)
            if waiter is not None:
                self.outstanding -= waiter[2]
                self._answered = True
                try:
                    waiter[1](txn, result)
                except Exception:  # a client's answer must never stop the engine
                    LOGGER.exception("answering the write of session 0x%x cxid %d (zxid 0x%x) failed",
                                     txn.session_id, txn.cxid, txn.zxid)  # fmt: skip
            if kind in _SESSION_AND_REAP_TXNS:
                self._after_apply(txn)
            ops += len(txn.body[0]) if kind == multi else 1
        self._turn_ops += ops
        if txns:
            if self.zxid_waiting:
                self.zxid_waiting.applied(tree.last_zxid)
            if self.is_leader:  # once for the batch: what it prepared stays ahead of the tree meanwhile
                self.preparer.applied(txns[-1].zxid)
                if self.zk_digests is not None:
                    self.zk_digests.applied(txns[-1].zxid)
            self._tree_committed = True
            if self.is_leader and not self.standalone:  # ZooKeeper's commit_count: the leader's commits only
                self.stats.commit_count += len(txns)
            self._txns_since_snapshot += ops  # a multi's ops each: a restart replays them all

    def _apply_and_freeze(self, txns: list[Txn], messages: list[tuple[int, Message]]) -> dict[tuple[int, int], Frozen]:
        """Apply ``txns``; for each SNAP among ``messages``, take an image of the tree exactly
        when it is at the SNAP's zxid.  The core declared the SNAP at its applied point of
        that moment, and later commits of the same Ready move the tree past it: an image
        taken after all of them would hold txns the learner is then sent again."""
        points: dict[int, list[int]] = {}
        for sid, message in messages:
            if message.__class__ is Snap:
                points.setdefault(message.zxid, []).append(sid)
        if not points:
            if txns:
                self._apply(txns)
            return {}
        images: dict[tuple[int, int], Frozen] = {}
        for txn in txns:
            self._freeze(points, images)
            self._apply([txn])
        self._freeze(points, images)
        return images

    def _freeze(self, points: dict[int, list[int]], images: dict[tuple[int, int], Frozen]) -> None:
        zxid = self.tree.last_zxid
        for sid in points.pop(zxid, ()):
            if (sid, zxid) in images:
                self.freezer.discard(images[(sid, zxid)])  # two SNAPs to one learner: the last counts
            images[(sid, zxid)] = self.freezer.image_for_peer(self.tree, sid)

    def _with_images(self, messages: list[tuple[int, Message]], images: dict[tuple[int, int], Frozen]) -> tuple[list[tuple[int, Message]], tuple[int, ...]]:
        """The messages to send, and the learners to drop instead.  Every SNAP leaves with its
        image or not at all: a SNAP whose zxid the tree never was at in this Ready would carry
        a tree at another zxid than it declares, so that learner gets nothing more in this
        Ready and is dropped (it resyncs)."""
        missing = sorted({sid for sid, m in messages if m.__class__ is Snap and (sid, m.zxid) not in images})
        for sid in missing:
            LOGGER.error("a SNAP to server %d declares a zxid the tree never was at (now 0x%x): dropping that "
                         "learner so that it resyncs", sid, self.tree.last_zxid)  # fmt: skip
            self.link_down(sid)
        out = []
        for sid, message in messages:
            if missing and sid in missing:
                continue
            kind = message.__class__
            if kind is Proposal:
                self._note_proposal_size(message)  # type: ignore[arg-type]
            elif kind is Snap:
                self.stats.snap_count += 1
            elif kind is Diff or kind is Trunc:
                self.stats.diff_count += 1
            out.append((sid, message))
        return out, tuple(missing)

    def _note_proposal_size(self, proposal: Proposal) -> None:
        size = sum(len(txn.body[1] or b"") if txn.type in _DATA_TXNS else 0 for txn in proposal.txns)  # None: null data
        last, smallest, largest = self.last_proposal_bytes
        self.last_proposal_bytes = (size, min(smallest, size) if smallest else size, max(largest, size))

    def _after_apply(self, txn: Txn) -> None:
        if txn.type == OpCode.CREATE_SESSION:
            self.opening_sessions.discard(txn.session_id)
            if self.is_leader:
                self.sessions.add(txn.session_id, txn.body[0], self.clock.monotonic_ms())
        elif txn.type == OpCode.CLOSE_SESSION:
            self.sessions.remove(txn.session_id)
            self.closing_sessions.discard(txn.session_id)
            sink = self.session_sinks.pop(txn.session_id, None)
            if sink is not None:
                sink.close_after_flush()
        elif txn.type == OpCode.DELETE_CONTAINER:
            self.stats.ttl_node_deleted_count += 1

    # ----------------------------------------------------------------- digests
    def _digests_after_commits(self) -> Work:
        if not self.is_leader:
            self.digests.check(self.tree, self.soft.leader)
            return
        if self.standalone or self._digest_sent_tick == self._ticks:
            return  # at most once per core tick: the learners compare at their own pace
        self._digest_sent_tick = self._ticks
        message = TreeDigest(zxid=self.tree.last_zxid, digest=self.tree.digest)
        learners = self.peer.streaming_learners()
        if learners:
            yield Send([(sid, message) for sid in learners])

    # ----------------------------------------------------------------- SNAP on a learner
    def _receive_snapshot(self, sid: int, message: Snap | SnapChunk) -> Work:
        """A SNAP's records build the new tree and go to disk as they arrive (``StageSnapshot``),
        so that once the last one is in, installing it is an fsync and a rename."""
        if isinstance(message, Snap):
            if self._tails:  # their commits are for the old tree
                yield from self._sync_all()
            # The old tree goes now, so the whole tree is never held twice; this server is
            # not serving while it syncs, and a broken stream reloads the tree from disk.
            yield from self._replace_tree(DataTree())
            self._tree_committed = False
            self._snap_in[sid] = (message, TreeBuilder(digest=False))  # Install answers it
            self.peer.step(sid, message)
            yield StageSnapshot(sid, message.zxid, (), start=True)
            return
        entry = self._snap_in.get(sid)
        if entry is None:
            return
        snap, builder = entry
        self.peer.heard_from(sid)
        try:
            builder.add(message.records)
            tree = builder.finish() if message.last else None
        except (InvariantError, ValueError, TypeError, KeyError) as exc:
            yield from self._broken_snapshot(sid, f"its records do not make a tree ({_describe(exc)})")
            return
        yield StageSnapshot(sid, snap.zxid, message.records, start=False, encoded=message.encoded)
        if tree is None:
            return
        del self._snap_in[sid]
        if tree.last_zxid != snap.zxid:
            yield from self._broken_snapshot(sid, f"it declares 0x{snap.zxid:x} but holds a tree at 0x{tree.last_zxid:x}")
            return
        digest = yield Install(tree, snap.zxid, sid)
        tree.adopt_digest(digest)
        yield from self._replace_tree(tree)
        self.peer.snapshot_installed(snap.zxid)
        self._logged_zxid = self._durable_zxid = snap.zxid  # the snapshot is the whole log now
        self._sync_asked_zxid = 0
        LOGGER.info("installed a snapshot at 0x%x from server %d (%d znodes)", snap.zxid, sid, tree.node_count())
        self.digests.check(self.tree, self.soft.leader)

    def _broken_snapshot(self, sid: int, what: str) -> Work:
        """A SNAP stream that cannot be installed: never serve it.  Drop that leader and look
        again, from the tree and core state on disk (the old tree went at the SNAP)."""
        LOGGER.error("the snapshot from server %d is refused: %s; dropping that leader to resync", sid, what)
        yield from self._restart_core(snapshot_wanted=True, why="a snapshot stream was refused")

    def _abandon_snapshot(self) -> Work:
        """The sync a SNAP was for is over (the link broke, the core gave up on the leader)
        before its tree was installed: the tree is empty since the SNAP, and the core's idea
        of what it applied no longer matches any tree, so both come back from disk."""
        if any(self.peer.expects_snapshot(sid, snap.zxid) for sid, (snap, _) in self._snap_in.items()):
            return
        LOGGER.info("a SNAP from server %s was abandoned before its tree arrived", ", ".join(map(str, self._snap_in)))
        yield from self._restart_core(snapshot_wanted=False, why="a SNAP was abandoned")

    def _membership_moved(self) -> bool:
        """Whether ``_membership_changed`` has anything to do: asked first, as a Ready's end
        asks on every write, and a generator that yields nothing still costs its making."""
        members = self.peer.members
        seen = self._membership_seen
        return (members.committed is not seen[0] or members.proposed is not seen[1] or members.hinted is not seen[2]
                or self._clients_leave_at is not None)  # fmt: skip

    def _membership_changed(self) -> Work:
        members = self.peer.members
        seen = (members.committed, members.proposed, members.hinted)
        if seen != self._membership_seen:
            committed = seen[0] != self._membership_seen[0]
            self._membership_seen = seen
            if committed:
                LOGGER.info("membership version %x active: voters %s, observers %s", seen[0].version,
                            sorted(seen[0].voters), sorted(seen[0].observers))  # fmt: skip
                self._clients_leave_at = seen[0].version if self.outside_membership else None
            yield Reconfigure(seen[0], seen[1] or seen[2], committed)  # a vote's hint: reach its servers too
        # The core knows the commit before the tree applies it (that waits for the log's sync):
        # the clients are closed once the reconfig is applied here, so that its answer, and
        # every earlier one, goes out first (a client that asked this server for the reconfig
        # saw ConnectionLoss).
        if self._clients_leave_at is not None and self.tree.last_zxid >= self._clients_leave_at:
            self._clients_leave_at = None
            if self.serving and self.session_sinks and self.outside_membership:
                LOGGER.info("membership version %x leaves this server out: its clients move to the members", seen[0].version)
                yield CloseClients()

    # ----------------------------------------------------------------- snapshots to disk
    def _due_snapshot(self) -> WriteSnapshot | None:
        """A snapshot to write, if one is due now."""
        if not self._tree_committed or self._txns_since_snapshot < self._snapshot_due:
            return None
        self._txns_since_snapshot = 0
        self._snapshot_due = self._snapshot_threshold()
        if self._snapshot_running:
            # ZooKeeper's rule ("Too busy to snap, skipping"): a snapshot due while the last
            # one is still being written is skipped, not queued behind it.  Queued, a server
            # whose snapshots take longer than its writes take to fill snapCount would write
            # them back to back, a child's CPU for as long as the load lasts.
            self.stats.snapshots_skipped += 1
            LOGGER.warning("too busy to snapshot at 0x%x: the previous snapshot is still being written; "
                           "the next one is due in %d txns", self.tree.last_zxid, self._snapshot_due)  # fmt: skip
            return None
        self._snapshot_running = True
        return WriteSnapshot(self.freezer.image_for_disk(self.tree), self.tree.last_zxid)

    def _snapshot_written(self, zxid: int, ok: bool, elapsed_ms: float) -> Work:
        self._snapshot_running = False
        if not ok:
            LOGGER.error("the snapshot at 0x%x failed; the next one is due in %d txns", zxid, self._snapshot_due)
            return
        self.stats.snapshots_taken += 1
        self.stats.snapshot.add(elapsed_ms)
        LOGGER.info("snapshot at zxid 0x%x written in %.0f ms", zxid, elapsed_ms)
        if self.config.purge_interval_hours > 0:
            yield Purge()

    # ----------------------------------------------------------------- roles
    def _set_soft(self, soft: SoftState) -> None:
        self.soft = soft
        self.is_leader = soft.state is ServerState.LEADING

    def _change_state(self, soft: SoftState) -> Work:
        old = self.soft
        self._set_soft(soft)
        LOGGER.info("state %s, phase %s, leader %s, epoch %d%s", soft.state.value, soft.phase.value,
                    soft.leader, soft.epoch, ", serving" if soft.serving else "")  # fmt: skip
        if soft.leader != old.leader or soft.epoch != old.epoch:
            self.digests.clear()  # digests of another leader's stream
            if self.zk_digests is not None:
                self.zk_digests.forget_carried()
                self._zk_mismatch_logged = self._zk_check_failed = False
        if old.serving and not soft.serving:
            yield from self._stop_serving()
        elif soft.serving and not old.serving and self._clients_held_since_ms is not None:
            yield from self._serve_held_clients()
        if soft.state != ServerState.LOOKING:
            yield from self._leave_read_only()
        elif old.state != ServerState.LOOKING:
            self.looking_since_ms = self.clock.monotonic_ms()
        leading = _leads(soft)
        if not leading:
            self.leading_since_ms = None
        elif self.leading_since_ms is None:
            self.leading_since_ms = self.clock.monotonic_ms()
        if leading:
            self._track_tree_sessions()
        if self.zk_digests is not None:
            if leading and soft.serving and not old.serving:
                self.zk_digests.start(self.tree)  # the tree holds every txn logged: the Ready that established us applied them
            elif not (leading and soft.serving):
                self.zk_digests.stop()

    def _track_tree_sessions(self) -> None:
        """A serving leader tracks every session of its tree, each from now: a session its
        client does not come back to expires (ZooKeeper's SessionTrackerImpl, filled at start
        from the snapshot's and the log's sessions)."""
        now = self.clock.monotonic_ms()
        self.sessions = SessionTracker(self.config.tick_ms)
        for session_id, (timeout_ms, _) in self.tree.sessions.items():
            self.sessions.add(session_id, timeout_ms, now)

    def _leave_read_only(self) -> Work:
        """A leader is found: read-only clients move on to read-write servers."""
        self.looking_since_ms = None
        if self.local_sessions or (self.session_sinks and not self.serving):
            self.local_sessions.clear()
            yield CloseClients(ClientsKept.HELD if self._clients_held_since_ms is not None else ClientsKept.NONE)

    def _stop_serving(self, *, hold: bool = True) -> Work:
        """Clients of a server that stops serving are told (ConnectionLoss), not served, but
        for the idle ones (a session, no request unanswered): unless ``hold`` is False, those
        are held for ``electionClientHoldMs`` (``_release_held_clients``), so that when an
        election gives this server a leader again before then, they go on without noticing.
        ZooKeeper closes them all, and a Curator LeaderLatch on any server loses its leadership
        at every election (a disconnection is SUSPENDED, which it takes as a loss).  Held,
        they are answered pings and reads from this server's tree (it only moves forward:
        ``_replace_tree`` closes them); a write or sync closes the connection, as ZooKeeper's
        would have been (``zabby.server.clients.session``)."""
        self._proposals.clear()
        self.preparer.reset()
        self.waiting.clear()
        self.sync_waiting.clear()
        self.zxid_waiting.clear()
        self.closing_sessions.clear()  # closes prepared here commit only under this leadership
        self.opening_sessions.clear()  # and so do the session creates
        self.outstanding = 0
        self.sessions = SessionTracker(self.config.tick_ms)
        # The hold counts from when the leader was last heard: a learner cut off from a leader
        # that lives on notices only after syncLimit, and that leader heard no touch since.
        now = self.clock.monotonic_ms()
        silent_ms = self.peer.leader_silent_ticks * self.core_tick_ms if self.soft.state is ServerState.LOOKING else 0
        if hold and self.config.election_client_hold_ms > silent_ms:
            self._clients_held_since_ms = now - silent_ms
            yield CloseClients(ClientsKept.IDLE)
        else:
            self._clients_held_since_ms = None
            yield CloseClients()

    def _serve_held_clients(self) -> Work:
        """Serving again within the hold: the held clients go on, unless this server may not
        serve them now (a reconfig left it out of the membership; it leads with
        ``leaderServes=no``).  Under ZooKeeper's protocol a learner revalidates each of their
        sessions, as a reconnect does: a ZooKeeper leader takes a session's writes only from
        the learner link it last heard the session on (else SESSIONMOVED)."""
        held_ms = self.clock.monotonic_ms() - (self._clients_held_since_ms or 0)
        self._clients_held_since_ms = None
        if self.outside_membership or (self.is_leader and not self.standalone and not self.config.leader_serves):
            LOGGER.info("serving again %d ms into its clients' hold, but not clients here: closing the clients held", held_ms)
            yield CloseClients()
            return
        LOGGER.info("serving again %d ms into its clients' hold: the clients held go on", held_ms)
        for session_id in self.session_sinks:
            self.revalidate_at_leader(session_id)

    def _release_held_clients(self) -> Work:
        """Held clients whose server did not serve again within ``electionClientHoldMs`` are
        closed, to reconnect to one that serves (this one may be cut off from the quorum)."""
        held_ms = self.clock.monotonic_ms() - (self._clients_held_since_ms or 0)
        if held_ms >= self.config.election_client_hold_ms:
            LOGGER.info("not serving %d ms into its clients' hold: closing the clients held", held_ms)
            self._clients_held_since_ms = None
            yield CloseClients(ClientsKept.UNHELD)  # a read-only session made meanwhile stays

    # ----------------------------------------------------------------- repair
    def _repair(self, exc: Exception) -> Work:
        """Restart the core in place from disk (see the module's docstring)."""
        failure = _first(exc, DiskFailure)
        if failure is not None:
            yield FailStop(str(failure))
            return
        full = _only(exc, (DiskFull,))
        if _only(exc, (Inconsistency, InvariantError, DiskFull)):
            LOGGER.error("%s; restarting the core from disk%s", _describe(exc), "" if full else " and resyncing by SNAP")
        else:
            LOGGER.error("running the core failed; restarting it from disk and resyncing by SNAP", exc_info=exc)
        self.stats.repairs += 1
        self.last_failure = exc
        now = self.clock.monotonic_ms()
        if self._repaired_at_ms is not None and now - self._repaired_at_ms < REPAIR_PAUSE_MS:
            yield Pause(self._repaired_at_ms + REPAIR_PAUSE_MS)
        self._repaired_at_ms = self.clock.monotonic_ms()
        yield from self._restart_core(snapshot_wanted=not full)

    def _restart_core(self, *, snapshot_wanted: bool, why: str = "restarting the core") -> Work:
        """As a process restart would: stop serving, drop every link, reload the tree and the
        core's durable state from disk, and look for the leader."""
        yield from self._stop_serving(hold=False)
        self._inputs.clear()
        self._snap_in.clear()
        self.digests.clear()
        # Every link, not the static configuration's alone: a link left up to a server a
        # reconfig added carries the old core's stream on into the new one's sync (sim seed
        # 2187 with the soak's options: an INFORM queued before the restart, then a SNAP).
        peers = tuple(sorted(self.peer_config.peers | self.peer.linked))
        if peers:
            yield DropLinks(peers)
        self._tails.clear()  # what they would send and apply: the new core decides again
        recovered: Recovered = yield Reload(why, snapshot_wanted=snapshot_wanted)
        yield from self._replace_tree(recovered.tree, recovered.history)
        self._tree_committed = False
        self._logged_zxid = self._durable_zxid = recovered.durable.last_logged
        self._sync_asked_zxid = 0
        self.peer = Peer(self.peer_config, recovered.durable)
        if not self.standalone:
            self._show_config()
        self._set_soft(self.peer.soft_state())
        if _leads(self.soft):
            self._track_tree_sessions()
        self.looking_since_ms = self.clock.monotonic_ms()
        LOGGER.info("core restarted from disk at 0x%x; looking for the leader", self.tree.last_zxid)


def _leads(soft: SoftState) -> bool:
    return soft.serving and soft.state == ServerState.LEADING


@dataclass(slots=True)
class _Tail:
    """What a Ready leaves for after its log (``_finish``): its regular messages, the commits
    it did not apply first, its sync answers, and ``advance``; a broadcast Ready's wait until
    the log is durable up to ``needs`` (its own appends and commits, and those of the Readys
    before it).  ``images``: the SNAP images taken when its commits were applied first
    (before its log); None if they were not."""

    needs: int
    ready: Ready
    committed: list[Txn]
    images: dict[tuple[int, int], Frozen] | None = None


def _without_superseded(messages: list[tuple[int, Message]]) -> list[tuple[int, Message]]:
    """``messages`` but each ACK or LOGGED that a later one to the same server covers (both
    say "logged up to zxid"); a NEWLEADER's ACK (counter 0) always stays."""
    if len(messages) < 2:
        return messages
    last: dict[tuple[int, type], int] = {}
    for index, (sid, message) in enumerate(messages):
        if message.__class__ is Ack or message.__class__ is Logged:
            last[(sid, message.__class__)] = index
    return [(sid, message) for index, (sid, message) in enumerate(messages)
            if last.get((sid, message.__class__), index) == index or not zxid_counter(message.zxid)]  # type: ignore[union-attr]


def _first(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first leaf of ``exc`` (a group or not) that is a ``kind``."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _first(inner, kind)
            if found is not None:
                return found
        return None
    return exc if isinstance(exc, kind) else None


def _only(exc: BaseException, kinds: tuple[type[BaseException], ...]) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_only(inner, kinds) for inner in exc.exceptions)
    return isinstance(exc, kinds)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


_SESSION_AND_REAP_TXNS = frozenset({OpCode.CREATE_SESSION, OpCode.CLOSE_SESSION, OpCode.DELETE_CONTAINER})
_ENGINE_MESSAGES = frozenset({TreeDigest, Snap, SnapChunk, Revalidate, Revalidated})  # handled here, not by the core
_TICK, _MESSAGE, _LINK_DOWN, _SNAPSHOT_WRITTEN, _LOG_SYNCED = 0, 1, 2, 3, 4
