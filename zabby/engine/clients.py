"""What client sessions ask of the engine: writes, sessions, syncs, and read-only mode.

A write is prepared on the leader against the tree plus the writes still in flight
(``zabby.tree.prep``), or forwarded by a learner; either way it comes back through the log,
an ERROR txn for a failed one, so every answer keeps the session's order.  The leader tracks
session expiry and reaps empty containers and expired TTL nodes.

Read-only mode (ZooKeeper's ``readonlymode.enabled``): a server that has been looking for a
leader for ``max(2 s, tickTime)`` serves reads to clients that connected asking for it
(``canBeReadOnly``).  Their sessions are local to this server, or the replicated ones they
already had; writes and syncs answer NOTREADONLY; when the server joins a quorum again, it
closes those connections and the clients move to a read-write server.

``ClientCalls`` is a part of ``Engine``, written apart to keep each file about one thing.
"""

from __future__ import annotations

import heapq
import logging
import random
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

from zabby.config import ServerConfig
from zabby.core.messages import Request, Revalidate, Revalidated, Sync
from zabby.core.peer import Peer, PeerConfig
from zabby.core.ready import SoftState
from zabby.engine.effects import ClientSink, Clock, Done, SyncDone
from zabby.engine.reconfig import prepare_reconfig
from zabby.errors import Err, ZabbyError
from zabby.opcodes import OpCode, owner_ttl_ms
from zabby.tree.datatree import ZOOKEEPER_CONFIG, DataTree
from zabby.tree.prep import Caller, Preparer
from zabby.tree.sessions import SessionTracker
from zabby.tree.txns import ZXID_COUNTER_MASK, Txn
from zabby.tree.watches import WatchHistory, WatchManager
from zabby.wire.zk_snapshot import session_password

LOGGER = logging.getLogger("zabby.server")

SESSION_OPS = frozenset({OpCode.CREATE_SESSION, OpCode.CLOSE_SESSION})
# The members each write is told apart by, as globals (see zabby.opcodes)
_MULTI, _CLOSE_SESSION, _CREATE_SESSION = OpCode.MULTI, OpCode.CLOSE_SESSION, OpCode.CREATE_SESSION
_NOT_PREPARED = frozenset({OpCode.CLOSE_SESSION, OpCode.CREATE_SESSION, OpCode.RECONFIG})  # the ops the preparer does not take
READ_ONLY_AFTER_MS_MIN = 2000  # ZooKeeper starts its read-only server after max(2 s, tickTime)


T = TypeVar("T")


class Waiters(Generic[T]):
    """What waits for a txn (or a sync) of a session, by (session id, cxid).

    The key is the client's: a client may repeat a cxid (kazoo starts again at 1 on every new
    connection, while the old connection's writes may still be in flight), so a repeated key
    queues behind the first instead of replacing it, and each txn with the key takes the
    oldest.  Nothing a client sends can so drop another request's answer or leak the count.
    """

    __slots__ = ("_first", "_more", "peek")

    def __init__(self) -> None:
        self._first: dict[tuple[int, int], T] = {}
        self._more: dict[tuple[int, int], deque[T]] = {}  # keys repeated, in arrival order
        # The oldest value of a key, or None, left in place: the dict's own get, no Python call
        # (the apply asks it of every txn, most of them another server's clients').
        self.peek = self._first.get

    def put(self, key: tuple[int, int], value: T) -> None:
        if key in self._first:
            self._more.setdefault(key, deque()).append(value)
        else:
            self._first[key] = value

    def pop(self, key: tuple[int, int], fits: Callable[[T], bool] | None = None) -> T | None:
        """The oldest value of ``key``; None, the values left as they are, if there is none
        or it does not ``fit`` (the txn is not the answer it waits for)."""
        value = self._first.get(key)
        if value is None or (fits is not None and not fits(value)):
            return None
        del self._first[key]
        if self._more:
            more = self._more.get(key)
            if more:
                self._first[key] = more.popleft()
                if not more:
                    del self._more[key]
        return value

    def pop_answered(self, key: tuple[int, int], txn_type: int) -> T | None:
        """The oldest value of ``key`` if a txn of ``txn_type`` answers it (its first field is
        the write's op: ``ANSWERED_BY``), else None and the values left as they are: ``pop``
        without a function made per txn."""
        first = self._first
        value = first.get(key)
        if value is None:
            return None
        answered_by = ANSWERED_BY.get(value[0])  # type: ignore[index]
        if answered_by is not None and txn_type not in answered_by:
            return None
        if key in self._more:
            return self.pop(key)
        del first[key]  # nearly always: the key's only value
        return value

    def clear(self) -> None:
        self._first.clear()
        self._more.clear()

    def __len__(self) -> int:
        return len(self._first) + sum(len(more) for more in self._more.values())

    def __bool__(self) -> bool:
        return bool(self._first)


# The txn types that answer each write op: its own op's txn, or ERROR.  A key can be repeated
# by the same session through another connection (kazoo restarts its xids at 1 on each), here
# or on another server, so the txn with the key is not always the one the oldest waiter here
# asked for.  An op missing here (reconfig) takes any txn.
ANSWERED_BY: dict[int, frozenset[int]] = {
    op: frozenset({txn_type, OpCode.ERROR})
    for op, txn_type in ((OpCode.CREATE, OpCode.CREATE), (OpCode.CREATE2, OpCode.CREATE), (OpCode.CREATE_CONTAINER, OpCode.CREATE),
                         (OpCode.CREATE_TTL, OpCode.CREATE), (OpCode.DELETE, OpCode.DELETE), (OpCode.SET_DATA, OpCode.SET_DATA),
                         (OpCode.SET_ACL, OpCode.SET_ACL), (OpCode.CHECK, OpCode.CHECK), (OpCode.MULTI, OpCode.MULTI),
                         (OpCode.CREATE_SESSION, OpCode.CREATE_SESSION), (OpCode.CLOSE_SESSION, OpCode.CLOSE_SESSION))
}  # fmt: skip


ZXID_WAIT_MS_MAX = 60_000  # a wait for a zxid is answered OPERATIONTIMEOUT after this at most
ZXID_WAITS_PER_SESSION_MAX = 100


class _ZxidWait:
    __slots__ = ("zxid", "deadline_ms", "owner", "done")

    def __init__(self, zxid: int, deadline_ms: int, owner: Hashable, done: Callable[[bool], None]) -> None:
        self.zxid, self.deadline_ms, self.owner, self.done = zxid, deadline_ms, owner, done


class ZxidWaiters:
    """Client waits for this server to apply a zxid (``wait_for_zxid``): each is answered once
    the tree has applied it (``done(True)``), or at its deadline (``done(False)``), or never
    if its session's connection ends first.  A zxid this server cannot know yet (a later
    epoch's) is waited for like any other.

    Two heaps, by zxid and by deadline, each leave a wait answered through the other behind
    them; once such leftovers outnumber the live waits, both heaps are rebuilt from the live
    ones.  So what waits hold stays within twice the live waits (answered waits on a far
    zxid piled up for as long as any other wait was pending: 82 MB for 358,500 of them), and
    each wait costs O(log n) to put, answer or expire."""

    def __init__(self) -> None:
        self._by_zxid: list[tuple[int, int, _ZxidWait]] = []  # (zxid, arrival, wait): the lowest zxid first
        self._by_deadline: list[tuple[int, int, _ZxidWait]] = []  # (deadline, arrival, wait): the soonest first
        self._by_owner: dict[Hashable, set[_ZxidWait]] = {}
        self._live = 0
        self._arrivals = 0

    def __bool__(self) -> bool:
        return self._live > 0

    def __len__(self) -> int:
        return self._live

    def held(self) -> int:
        """Entries both heaps hold, live or answered (at most twice the live waits, and a few)."""
        return len(self._by_zxid) + len(self._by_deadline)

    def count(self, owner: Hashable) -> int:
        return len(self._by_owner.get(owner, ()))

    def put(self, zxid: int, deadline_ms: int, owner: Hashable, done: Callable[[bool], None]) -> None:
        wait = _ZxidWait(zxid, deadline_ms, owner, done)
        self._arrivals += 1
        heapq.heappush(self._by_zxid, (zxid, self._arrivals, wait))
        heapq.heappush(self._by_deadline, (deadline_ms, self._arrivals, wait))
        self._by_owner.setdefault(owner, set()).add(wait)
        self._live += 1

    def applied(self, last_zxid: int) -> None:
        """The tree has applied up to ``last_zxid``: answer the waits for it, lowest zxid first."""
        heap = self._by_zxid
        while heap and heap[0][0] <= last_zxid:
            self._answer(heapq.heappop(heap)[2], True)

    def expire(self, now_ms: int) -> None:
        """Answer the waits whose deadline passed, soonest first."""
        heap = self._by_deadline
        while heap and heap[0][0] <= now_ms:
            self._answer(heapq.heappop(heap)[2], False)

    def drop(self, owner: Hashable) -> None:
        """The owner's connection ended: its waits are never answered."""
        for wait in self._by_owner.pop(owner, ()):
            wait.done = None  # type: ignore[assignment]
            self._live -= 1
        self._compact()

    def clear(self) -> None:
        self._by_zxid.clear()
        self._by_deadline.clear()
        self._by_owner.clear()
        self._live = 0

    def _answer(self, wait: _ZxidWait, applied: bool) -> None:
        done = wait.done
        if done is None:  # answered already through the other heap, or dropped
            return
        wait.done = None  # type: ignore[assignment]
        self._live -= 1
        waits = self._by_owner.get(wait.owner)
        if waits is not None:
            waits.discard(wait)
            if not waits:
                del self._by_owner[wait.owner]
        done(applied)
        self._compact()

    def _compact(self) -> None:
        if self.held() <= 2 * (2 * self._live + 32):
            return
        self._by_zxid = [entry for entry in self._by_zxid if entry[2].done is not None]
        self._by_deadline = [entry for entry in self._by_deadline if entry[2].done is not None]
        heapq.heapify(self._by_zxid)
        heapq.heapify(self._by_deadline)


class ClientCalls:
    # the Engine's state these methods use (see zabby.engine.engine)
    config: ServerConfig
    clock: Clock
    rng: random.Random
    wake: Callable[[], None]
    peer: Peer
    peer_config: PeerConfig
    soft: SoftState
    is_leader: bool  # leading, serving or not: set with ``soft`` (asked on every request)
    tree: DataTree
    preparer: Preparer
    watches: WatchManager
    history: WatchHistory
    sessions: SessionTracker
    session_sinks: dict[int, ClientSink]
    closing_sessions: set[int]
    opening_sessions: set[int]
    local_sessions: dict[int, tuple[int, bytes]]
    waiting: Waiters[tuple[int, Done, int]]
    sync_waiting: Waiters[SyncDone]
    zxid_waiting: ZxidWaiters
    outstanding: int
    space_low: bool
    looking_since_ms: int | None
    leading_since_ms: int | None
    standalone: bool
    _proposals: list[Txn]
    _next_session_id: int

    @property
    def serving(self) -> bool:
        return self.soft.serving

    @property
    def outside_membership(self) -> bool:
        """A learner the ensemble does not count as a member: one started before the reconfig
        that adds it, or one a reconfig removed.  It syncs, but the leader takes nothing it
        forwards, so it serves no session: its clients would wait on writes that never go."""
        return not self.is_leader and not self.peer.members.counted  # kept by the views: asked for every write

    def check_member(self) -> None:
        """Raises: ZabbyError NOTREADONLY when ``outside_membership``."""
        if self.outside_membership:
            raise ZabbyError(Err.NOTREADONLY, f"server {self.config.server_id} is no member of the ensemble (a reconfig that "
                             "adds it has not committed, or one removed it): the leader takes no writes through it")  # fmt: skip

    @property
    def read_only(self) -> bool:
        """Serving reads only, to clients that asked for it (see the module's docstring)."""
        if not self.config.read_only_enabled or self.looking_since_ms is None or not self.config.peers:
            return False
        waited_ms = self.clock.monotonic_ms() - self.looking_since_ms
        return waited_ms >= max(READ_ONLY_AFTER_MS_MIN, self.config.tick_ms)

    # ----------------------------------------------------------------- client writes
    def _next_zxid(self) -> int:
        return self._proposals[-1].zxid + 1 if self._proposals else self.peer.next_zxid

    def submit(self, op: int, args: tuple[Any, ...], caller: Caller, cxid: int, done: Done) -> None:
        """A client write: prepared here on the leader, forwarded by a learner.

        Raises:
            ZabbyError: CONNECTIONLOSS when not serving; SYSTEMERROR when a learner's disk
                is full (a leader answers that with an ERROR txn, in the session's order).
        """
        self._check_serving()
        self.check_member()
        if self.space_low and op not in SESSION_OPS and not self.is_leader:
            raise self._disk_full_error()
        weight = len(args[0]) if op == _MULTI and args and isinstance(args[0], (list, tuple)) else 1  # a multi weighs its ops
        self.waiting.put((caller.session_id, cxid), (op, done, weight))  # the op: only its txn answers it
        self.outstanding += weight
        if self.is_leader:
            self._prepare(op, args, caller, cxid)
        else:
            self.peer.forward(Request(session_id=caller.session_id, cxid=cxid, op=op, args=tuple(args),
                                      auth_ids=tuple(caller.auth_ids), superuser=caller.superuser))  # fmt: skip
        self.wake()

    def _prepare(self, op: int, args: tuple[Any, ...], caller: Caller, cxid: int, forwarded: bool = False) -> None:
        """Turn a write into the next txn (an ERROR txn for a failed one).  A forwarded write's
        session must be open whatever its id: session id 0 (the leader's own system writes)
        bypasses nothing that comes over the network."""
        zxid = self._next_zxid()
        if (zxid & ZXID_COUNTER_MASK) > self.peer_config.zxid_counter_last:  # zxid_counter, without a call a write
            # the epoch has no counter left: the leader steps down once the last one is
            # proposed, and this write's client hears ConnectionLoss as all of its clients do
            return
        now = self.clock.wall_ms()
        try:
            if self.space_low and op not in SESSION_OPS:
                raise self._disk_full_error()  # an ERROR txn is tiny: the reserve holds many
            if op not in SESSION_OPS and (caller.session_id or forwarded) and not self._session_open(caller.session_id):
                # ZooKeeper's checkSession: an ephemeral of a closed session would never go
                raise ZabbyError(Err.SESSIONEXPIRED, f"session 0x{caller.session_id:x} is closed or closing")
            if op not in _NOT_PREPARED:
                txn_type, body = self.preparer.prepare(op, args, caller, zxid, now)
            elif op == _CLOSE_SESSION:
                self.closing_sessions.add(caller.session_id)
                txn_type, body = self.preparer.close_session(caller.session_id, zxid)
            elif op == _CREATE_SESSION:
                txn_type, body = OpCode.CREATE_SESSION, (int(args[0]), bytes(args[1]))
                self._check_sessions_max()
                self.opening_sessions.add(caller.session_id)
            else:
                txn_type, body = self._prepare_reconfig(tuple(args), caller, zxid)
        except ZabbyError as exc:
            txn_type, body = OpCode.ERROR, (int(exc.code), str(exc))
        except (TypeError, ValueError) as exc:
            txn_type, body = OpCode.ERROR, (int(Err.BADARGUMENTS), f"bad arguments: {exc}")
        self._proposals.append(Txn(zxid, caller.session_id, cxid, now, txn_type, body))

    def _prepare_reconfig(self, args: tuple[Any, ...], caller: Caller, zxid: int) -> tuple[int, tuple[Any, ...]]:
        if self.config.reconfig_enabled and not self.config.peers:  # as ZooKeeper's PrepRequestProcessor
            raise ZabbyError(Err.UNIMPLEMENTED, "a standalone server cannot be reconfigured")
        peer = self.peer
        # As ZooKeeper's isQuorumSynced: followers only.  An observer is sent no proposals, so
        # it could not ack the reconfig that makes it a voter (it must follow first).
        synced = {self.config.server_id} | {info.sid for info in peer.status().learners if info.uptodate and not info.observer}
        in_progress = peer.proposed is not None or any(t.type == OpCode.RECONFIG for t in self._proposals)
        return prepare_reconfig(args, caller, zxid, enabled=self.config.reconfig_enabled, committed=peer.membership,
                                in_progress=in_progress, config_acl=self.tree.nodes[ZOOKEEPER_CONFIG].acl, synced=synced)  # fmt: skip

    def _check_serving(self) -> None:
        """A leader whose core stepped down in the Ready being carried out still looks like
        one until that Ready is done: it takes nothing more.  So does a learner whose core
        left its leader (a committed reconfig took the leader out): it has nobody to forward to.

        Raises:
            ZabbyError: NOTREADONLY in read-only mode, CONNECTIONLOSS when not serving.
        """
        if self.read_only:
            raise ZabbyError(Err.NOTREADONLY, "this server is in read-only mode: writes and syncs need a quorum")
        stale = not self.peer.established_leader if self.is_leader else self.peer.learner is None
        if not self.serving or stale:
            raise ZabbyError(Err.CONNECTIONLOSS, "this server is not serving")

    def _check_sessions_max(self) -> None:
        """Raises: ZabbyError THROTTLEDOP when ``maxSessions`` sessions are open or opening (each
        holds ~400 bytes on every server until it is closed or expires: a client that opens
        sessions and drops their connections would otherwise grow every server's memory)."""
        open_sessions = len(self.tree.sessions) + len(self.opening_sessions)
        if open_sessions >= self.config.sessions_max:
            raise ZabbyError(Err.THROTTLEDOP, f"{open_sessions} sessions are open, the most maxSessions allows: "
                             "a new one can open once one is closed or expires")  # fmt: skip

    def _session_open(self, session_id: int) -> bool:
        """Open from its createSession's prepare on, as ZooKeeper's session tracker has it: a
        quorum of followers may apply that txn, and answer the client's connect, before this
        leader's own fsync lets it apply it (the client's next write found the session
        "closed": SESSIONEXPIRED)."""
        return (session_id in self.tree.sessions or session_id in self.opening_sessions) and session_id not in self.closing_sessions

    def _disk_full_error(self) -> ZabbyError:
        return ZabbyError(Err.SYSTEMERROR, f"server {self.config.server_id}: the disk holding {self.config.data_log_dir} is "
                          "full; writes are refused until space is freed (reads and sessions go on)")  # fmt: skip

    def create_session(self, timeout_ms: int, done: Done) -> None:
        session_id = self._take_session_id()
        self.submit(OpCode.CREATE_SESSION, (timeout_ms, self._new_password(session_id)), Caller(session_id, []), 0, done)

    def _new_password(self, session_id: int) -> bytes:
        """Random, but among ZooKeeper servers the one they derive from the id (their
        createSession txn carries none): a client must re-attach anywhere."""
        return session_password(session_id) if self.config.zookeeper_peers else self.rng.randbytes(16)

    def close_session(self, session_id: int, cxid: int, done: Done) -> None:
        self.submit(OpCode.CLOSE_SESSION, (), Caller(session_id, []), cxid, done)

    def client_sync(self, session_id: int, cxid: int, done: SyncDone) -> None:
        self._check_serving()
        self.sync_waiting.put((session_id, cxid), done)
        self.peer.client_sync(Sync(session_id=session_id, cxid=cxid))
        self.wake()

    def wait_for_zxid(self, owner: Hashable, zxid: int, timeout_ms: int, done: Callable[[bool], None]) -> None:
        """Call ``done(True)`` once the tree has applied ``zxid`` (at once if it has), or
        ``done(False)`` after ``timeout_ms`` (at most ``ZXID_WAIT_MS_MAX``).

        Raises:
            ZabbyError: THROTTLEDOP when ``owner`` already waits ``ZXID_WAITS_PER_SESSION_MAX`` times.
        """
        if self.tree.last_zxid >= zxid:
            done(True)
            return
        if self.zxid_waiting.count(owner) >= ZXID_WAITS_PER_SESSION_MAX:
            raise ZabbyError(Err.THROTTLEDOP, f"a session may wait for at most {ZXID_WAITS_PER_SESSION_MAX} zxids at once")
        deadline_ms = self.clock.monotonic_ms() + max(0, min(timeout_ms, ZXID_WAIT_MS_MAX))
        self.zxid_waiting.put(zxid, deadline_ms, owner, done)

    def negotiate_timeout(self, requested_ms: int) -> int:
        return max(self.config.session_timeout_ms_min, min(requested_ms, self.config.session_timeout_ms_max))

    # ----------------------------------------------------------------- sessions
    def _expire(self, session_id: int) -> None:
        self.sessions.remove(session_id)
        if session_id in self.tree.sessions and session_id not in self.closing_sessions:
            LOGGER.info("session 0x%x expired", session_id)
            self.closing_sessions.add(session_id)
            self._prepare(OpCode.CLOSE_SESSION, (), Caller(session_id, []), 0)

    def reap_containers(self) -> None:
        """Leader: delete empty containers (once they had children) and expired TTL nodes."""
        now_ms = self.clock.wall_ms()
        tree = self.tree
        candidates = [p for p in sorted(tree.containers) if not tree.nodes[p].children and tree.nodes[p].cversion > 0]
        for path in sorted(tree.ttl_nodes):
            node = tree.nodes[path]
            ttl_ms = owner_ttl_ms(node.ephemeral_owner)
            if not node.children and ttl_ms is not None and now_ms - node.mtime > ttl_ms:
                candidates.append(path)
        system = Caller(0, [], superuser=True)
        for path in java_hash_set_order(candidates):  # ZooKeeper's order, so its watchers see theirs
            if self.preparer.view(path) is not None:
                self._prepare(OpCode.DELETE_CONTAINER, (path,), system, 0)

    def attach(self, session_id: int, sink: ClientSink) -> None:
        old = self.session_sinks.get(session_id)
        if old is not None and old is not sink:
            LOGGER.info("session 0x%x moved to a new connection; closing the old one", session_id)
            old.close_after_flush()
        self.session_sinks[session_id] = sink
        self.revalidate_at_leader(session_id)

    def revalidate_at_leader(self, session_id: int) -> None:
        """A ZooKeeper leader answers a session's writes only from the learner it last heard
        of it from (else SESSIONMOVED): a learner under ZooKeeper's protocol that takes a
        session sends REVALIDATE, ahead of its writes on the link."""
        if self.config.zookeeper_peers and self.peer.learner is not None and session_id in self.tree.sessions:
            self.peer.forward(Revalidate(session_id=session_id, timeout_ms=self.tree.sessions[session_id][0]))
            self.wake()

    def revalidate(self, sid: int, request: Revalidate) -> Revalidated:
        """Leader: a learner's client re-attached to a session; touch it if it is open."""
        valid = self._session_open(request.session_id)
        if valid:
            self.sessions.touch(request.session_id, self.clock.monotonic_ms())
        return Revalidated(session_id=request.session_id, valid=valid)

    def revalidated(self, answer: Revalidated) -> None:
        """Learner: the leader's verdict on a session a client re-attached to here."""
        sink = self.session_sinks.get(answer.session_id)
        if not answer.valid and sink is not None:
            LOGGER.info("session 0x%x is no longer open at the leader: closing its connection", answer.session_id)
            sink.close_after_flush()

    def detach(self, sink: ClientSink) -> None:
        self.watches.remove_watcher(sink)
        self.zxid_waiting.drop(sink)
        if sink.session_id and self.session_sinks.get(sink.session_id) is sink:
            del self.session_sinks[sink.session_id]
            self.local_sessions.pop(sink.session_id, None)  # a read-only session ends with its connection

    def touch(self, session_id: int) -> None:
        if self.is_leader:
            self.sessions.touch(session_id, self.clock.monotonic_ms())
        else:
            self.peer.touch_sessions([session_id])

    def check_session(self, session_id: int, password: bytes) -> int | None:
        """The session's timeout if (id, password) names a live session, else None."""
        entry = self.tree.sessions.get(session_id) or self.local_sessions.get(session_id)
        if entry is None or entry[1] != password or session_id in self.closing_sessions:
            return None
        return entry[0]

    def create_local_session(self, timeout_ms: int) -> tuple[int, bytes]:
        """Read-only mode: a session of this server alone (nothing to replicate it through).

        Raises:
            ZabbyError: CONNECTIONLOSS unless in read-only mode.
        """
        if not self.read_only:
            raise ZabbyError(Err.CONNECTIONLOSS, "this server is not serving")
        session_id = self._take_session_id()
        password = self.rng.randbytes(16)
        self.local_sessions[session_id] = (timeout_ms, password)
        return session_id, password

    def _take_session_id(self) -> int:
        session_id = self._next_session_id
        while session_id in self.tree.sessions or session_id in self.local_sessions:
            session_id += 1
        self._next_session_id = session_id + 1
        return session_id

    def learner_counts(self) -> dict[str, int]:
        """The leader-only gauges of ZooKeeper 3.8's mntr (LeaderZooKeeperServer's), by name;
        empty on a follower, an observer and a standalone server, which have none of them."""
        if not self.is_leader or self.standalone:
            return {}
        status = self.peer.status()
        learners = status.learners
        voters = self.peer.membership.voters
        leading_since = self.leading_since_ms
        return {
            "learners": len(learners),  # connected, synced or not (Leader.getLearners)
            "followers": len(learners),  # ZooKeeper 3.4's name for the same count
            "synced_followers": sum(1 for i in learners if not i.observer and i.uptodate),
            "synced_non_voting_followers": sum(1 for i in learners if not i.observer and i.uptodate and i.sid not in voters),
            "synced_observers": sum(1 for i in learners if i.observer and i.uptodate),
            "pending_syncs": status.pending_syncs,
            "leader_uptime": self.clock.monotonic_ms() - leading_since if leading_since is not None else 0,
        }


def first_session_id(server_id: int, wall_ms: int) -> int:
    """ZooKeeper's initial session id: the server id in the top byte, the time below it."""
    return ((server_id % 128) << 56) | ((((wall_ms << 24) & (2**64 - 1)) >> 8) & ((1 << 56) - 1))


def java_hash_set_order(items: Iterable[str]) -> list[str]:
    """``items`` in the order a new ``java.util.HashSet`` they were added to (in this order)
    iterates them.  ZooKeeper's ContainerManager gathers the containers, then the TTL nodes,
    to delete into one, and deletes them in its order.  That order is by bucket: String's
    hashCode over UTF-16 units, spread as HashMap spreads it (``h ^ h >>> 16``), masked by the
    table the set has grown to (16, doubled past three quarters full); insertion order within
    a bucket.  (Eight or more in one bucket would make HashMap grow sooner; not followed.)"""
    unique = list(dict.fromkeys(items))
    capacity = 16
    while len(unique) > capacity * 3 // 4:
        capacity *= 2

    def bucket(text: str) -> int:
        units = text.encode("utf-16-be")
        h = 0
        for i in range(0, len(units), 2):
            h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(unique, key=bucket)  # stable: insertion order within a bucket
