"""One server: the Zab core (``core.Peer``) run by a trio task, the tree, sessions, watches.

Theory of operation::

    client write ─▶ leader: prep against tree + in-flight changes ─▶ txn ─▶ peer.propose
                    learner: forward REQUEST to the leader ────────────────┘ (leader preps)
    peer task: feed ticks/messages/proposals into the core; for each Ready:
       persist (epochs, truncate, append + fsync in a thread: group commit) ─▶ apply committed
       txns in zxid order (watch events, then the waiting client's reply) ─▶ send messages
       (a Snap streams the tree, which is exactly at the Snap's zxid) ─▶ advance

A standalone server is an ensemble of one voter: the same path, with a quorum of itself.
A failed write is an ERROR txn, as in ZooKeeper, so every reply (forwarded or not) comes back
through the log in session order.  Snapshots are written by a forked child (a copy-on-write
image of the tree at one zxid), so the server keeps serving while they are written.

Faults: nothing a client, a peer or a race does ends the process.  When running the core
fails (a txn that does not fit the tree, a snapshot at another zxid than declared, a digest
that differs from the leader's, a bug), the server restarts its core in place: it stops
serving, reloads the tree from disk and rejoins as LOOKING, asking for a SNAP.  Only a failed
disk stops it (``disk.fail_stop``); a full disk refuses writes until space is freed.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import logging
import math
import os
import random
import signal
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, BinaryIO

import trio

from zabby.config import ServerConfig
from zabby.core.messages import (
    Diff,
    Message,
    Proposal,
    Request,
    Snap,
    SnapChunk,
    Sync,
    TreeDigest,
    Trunc,
    encode,
)
from zabby.core.peer import DurableState, Peer, PeerConfig
from zabby.core.ready import Ready, SoftState
from zabby.core.types import ServerState
from zabby.errors import Err, Inconsistency, InvariantError, ZabbyError
from zabby.opcodes import OpCode, owner_ttl_ms
from zabby.server.disk import DiskWorker, fail_stop
from zabby.server.guard import contained, only
from zabby.server.stats import ServerStats
from zabby.server.transport import ForkedStream, Transport
from zabby.storage.datadir import DataDir, RecoveryError
from zabby.storage.epochs import read_epoch, write_epoch
from zabby.storage.files import DiskFailure, DiskFull
from zabby.storage.snapshot import write_snapshot
from zabby.storage.txnlog import CorruptLogError, TxnLog
from zabby.tree.datatree import DataTree, TreeBuilder
from zabby.tree.prep import Caller, Preparer, PrepLimits
from zabby.tree.sessions import SessionTracker
from zabby.tree.txns import Txn, decode_txn, encode_txn, zxid_epoch
from zabby.tree.watches import WatchManager
from zabby.wire.framing import encode_frame

if TYPE_CHECKING:
    from zabby.server.client_conn import Connection

LOGGER = logging.getLogger("zabby.server")

Done = Callable[[Txn, Any], None]
CORE_TICK_MS_MAX = 50
SNAP_CHUNK_RECORDS = 2000
PR_SET_PDEATHSIG = 1  # prctl(2)
FINALIZE_WAIT_MS = 200
REPAIR_PAUSE_S = 1.0  # a core restarted again this soon waits first: no busy loop on a bad disk
EXPECTED_DIGESTS_MAX = 256
SESSION_OPS = frozenset({OpCode.CREATE_SESSION, OpCode.CLOSE_SESSION})


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
    )


def durable_state(datadir: DataDir, tree: DataTree, log: TxnLog, history_count: int, *, snapshot_wanted: bool = False) -> DurableState:
    last_logged = max(log.last_zxid, tree.last_zxid)
    # purge keeps the log short (the snapshots' worth); only the window's txns are decoded
    tail = deque((payload for _, payload in log.read_from(0)), maxlen=max(1, history_count))
    default_epoch = zxid_epoch(last_logged)
    return DurableState(
        accepted_epoch=read_epoch(datadir.accepted_epoch_path, default_epoch),
        current_epoch=read_epoch(datadir.current_epoch_path, default_epoch),
        last_logged=last_logged,
        applied=tree.last_zxid,
        history=tuple(decode_txn(payload) for payload in tail) if history_count else (),
        snapshot_zxid=datadir.newest_snapshot_zxid(),
        snapshot_wanted=snapshot_wanted,
    )


def fork_child(work: Callable[[], object]) -> int:
    """Fork; the child runs ``work`` on its copy-on-write image of this process (the tree as
    of now, however the parent changes it) and exits without any of the parent's cleanup.
    Returns the child's pid; its exit status is 0 when ``work`` returned.  Call it from the
    trio thread: the child is killed when the thread that forked it ends (prctl(2))."""
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            _die_with_parent(parent)
            work()
            code = 0
        finally:
            os._exit(code)
    return pid


def _die_with_parent(parent: int) -> None:
    """Linux: SIGKILL this child if the server dies, so a killed server's child never
    outlives it holding the server's inherited listening sockets (a restart could not bind)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the child ends with its work
        return
    if os.getppid() != parent:  # the server died before the prctl took effect
        os._exit(1)


def write_snapshot_frames(pipe: BinaryIO, records: Iterable[tuple[Any, ...]]) -> None:
    """The quorum frames of a snapshot stream: SnapChunk messages of SNAP_CHUNK_RECORDS records."""
    chunk: list[Any] = []
    for record in records:
        chunk.append(record)
        if len(chunk) >= SNAP_CHUNK_RECORDS:
            pipe.write(encode_frame(encode(SnapChunk(records=tuple(chunk), last=False))))
            chunk = []
    pipe.write(encode_frame(encode(SnapChunk(records=tuple(chunk), last=True))))


class ZabbyServer:
    """One server's tree, sessions, watches and its core; owned by one trio task tree."""

    def __init__(self, config: ServerConfig, datadir: DataDir, tree: DataTree, log: TxnLog) -> None:
        self.config = config
        self.datadir = datadir
        self.tree = tree
        self.log = log
        self.preparer = Preparer(tree, PrepLimits(config.jute_buffer_bytes_max, config.ttl_enabled))
        self.watches = WatchManager()
        self.sessions = SessionTracker(config.tick_ms)
        self.stats = ServerStats()
        self.disk = DiskWorker()
        self.connections: set[Connection] = set()
        self.session_conns: dict[int, Connection] = {}
        self.closing_sessions: set[int] = set()
        self.core_tick_ms, peer_config = core_timing(config)
        self.peer = Peer(peer_config, durable_state(datadir, tree, log, config.commit_log_count))
        self.standalone = not config.peers
        self.soft: SoftState = self.peer.soft_state()
        peers = {p.sid: p for p in config.peers}
        self.transport: Transport | None = None
        if peers:
            self.transport = Transport(config.server_id, peers, self._deliver, self._link_down)
        self.waiting: dict[tuple[int, int], Done] = {}
        self.sync_waiting: dict[tuple[int, int], Callable[[], None]] = {}
        self._inputs: list[tuple[int, Any, Any]] = []
        self._wake = trio.Event()
        self._proposals: list[Txn] = []
        self._snap_in: dict[int, tuple[Snap, TreeBuilder]] = {}
        self.outstanding = 0
        self._unthrottled = trio.Event()
        self._unthrottled.set()
        self._txns_since_snapshot = 0
        self._snapshot_due = self._snapshot_threshold()
        self._snapshot_running = False
        self._next_session_id = ((config.server_id % 128) << 56) | ((((self.now_ms() << 24) & (2**64 - 1)) >> 8) & ((1 << 56) - 1))
        self.last_proposal_bytes = (0, 0, 0)  # last, min, max
        self._expected_digests: deque[tuple[int, int]] = deque(maxlen=EXPECTED_DIGESTS_MAX)  # from the leader
        self._digest_sent_tick = -1
        self._repaired_at = -REPAIR_PAUSE_S

    # ----------------------------------------------------------------- clocks and state
    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)

    @staticmethod
    def monotonic_ms() -> int:
        return int(time.monotonic() * 1000)

    @property
    def last_zxid(self) -> int:
        return self.tree.last_zxid

    @property
    def serving(self) -> bool:
        return self.soft.serving

    @property
    def is_leader(self) -> bool:
        return self.soft.state == ServerState.LEADING

    @property
    def state(self) -> str:
        if not self.soft.serving:
            return "looking" if self.soft.state == ServerState.LOOKING else "syncing"
        if self.standalone:
            return "standalone"
        return {ServerState.LEADING: "leader", ServerState.FOLLOWING: "follower", ServerState.OBSERVING: "observer"}[self.soft.state]

    def _snapshot_threshold(self) -> int:
        # ZooKeeper randomizes so that the servers of an ensemble do not all snapshot at once
        count = self.config.snap_count
        return random.randint(count // 2 + 1, count)

    # ----------------------------------------------------------------- inputs to the core
    def _push(self, kind: int, a: Any = None, b: Any = None) -> None:
        self._inputs.append((kind, a, b))
        self._wake.set()

    def _deliver(self, sid: int, message: Message) -> None:
        self._push(_MESSAGE, sid, message)

    def _link_down(self, sid: int) -> None:
        self._push(_LINK_DOWN, sid)

    # ----------------------------------------------------------------- client writes
    def _next_zxid(self) -> int:
        return self._proposals[-1].zxid + 1 if self._proposals else self.peer.next_zxid

    def submit(self, op: int, args: tuple[Any, ...], caller: Caller, cxid: int, done: Done) -> None:
        """A client write: prepared here on the leader, forwarded by a learner."""
        if not self.serving:
            raise ZabbyError(Err.CONNECTIONLOSS, "this server is not serving")
        if self.log.space_low and op not in SESSION_OPS and not self.is_leader:
            raise self._disk_full_error()
        self.waiting[(caller.session_id, cxid)] = done
        self.outstanding += 1
        if self.outstanding >= self.config.outstanding_requests_max:
            self._unthrottled = trio.Event()
        if self.is_leader:
            self._prepare(op, args, caller, cxid)
        else:
            self.peer.forward(Request(session_id=caller.session_id, cxid=cxid, op=op, args=tuple(args),
                                      auth_ids=tuple(caller.auth_ids), superuser=caller.superuser))  # fmt: skip
            self._wake.set()

    def _prepare(self, op: int, args: tuple[Any, ...], caller: Caller, cxid: int) -> None:
        zxid = self._next_zxid()
        now = self.now_ms()
        try:
            if self.log.space_low and op not in SESSION_OPS:
                raise self._disk_full_error()  # an ERROR txn is tiny: the reserve holds many
            if op == OpCode.CLOSE_SESSION:
                txn_type, body = self.preparer.close_session(caller.session_id, zxid)
            elif op == OpCode.CREATE_SESSION:
                txn_type, body = OpCode.CREATE_SESSION, (int(args[0]), bytes(args[1]))
            else:
                txn_type, body = self.preparer.prepare(op, args, caller, zxid, now)
        except ZabbyError as exc:
            txn_type, body = OpCode.ERROR, (int(exc.code), str(exc))
        except (TypeError, ValueError) as exc:
            txn_type, body = OpCode.ERROR, (int(Err.BADARGUMENTS), f"bad arguments: {exc}")
        self._proposals.append(Txn(zxid, caller.session_id, cxid, now, txn_type, body))
        self._wake.set()

    def _disk_full_error(self) -> ZabbyError:
        return ZabbyError(Err.SYSTEMERROR, f"server {self.config.server_id}: the disk holding {self.datadir.log_dir} is "
                          "full; writes are refused until space is freed (reads and sessions go on)")  # fmt: skip

    def create_session(self, timeout_ms: int, done: Done) -> None:
        session_id = self._next_session_id
        while session_id in self.tree.sessions:
            session_id += 1
        self._next_session_id = session_id + 1
        self.submit(OpCode.CREATE_SESSION, (timeout_ms, os.urandom(16)), Caller(session_id, []), 0, done)

    def close_session(self, session_id: int, cxid: int, done: Done) -> None:
        self.submit(OpCode.CLOSE_SESSION, (), Caller(session_id, []), cxid, done)

    def client_sync(self, session_id: int, cxid: int, done: Callable[[], None]) -> None:
        if not self.serving:
            raise ZabbyError(Err.CONNECTIONLOSS, "this server is not serving")
        self.sync_waiting[(session_id, cxid)] = done
        self.peer.client_sync(Sync(session_id=session_id, cxid=cxid))
        self._wake.set()

    def negotiate_timeout(self, requested_ms: int) -> int:
        return max(self.config.session_timeout_ms_min, min(requested_ms, self.config.session_timeout_ms_max))

    async def wait_unthrottled(self) -> None:
        await self._unthrottled.wait()

    # ----------------------------------------------------------------- the peer task
    async def run_peer(self, nursery: trio.Nursery) -> None:
        """The peer task.  A failure of the core or the tree is repaired in place (see the
        module's docstring); a failed disk stops the server."""
        while True:
            try:
                await self._drive_core(nursery)
            except Exception as exc:  # also the ExceptionGroups of nurseries below
                await self._repair(exc)

    async def _drive_core(self, nursery: trio.Nursery) -> None:
        while True:
            await self._feed()
            if self._proposals and self.is_leader and self.serving:
                batch, self._proposals = self._proposals, []
                self.peer.propose(batch)
            if not self.peer.has_ready():
                await self._wake.wait()
                self._wake = trio.Event()
                continue
            ready = self.peer.ready()
            await self._process(ready, nursery)
            self.peer.advance(ready)

    async def _feed(self) -> None:
        inputs, self._inputs = self._inputs, []
        for kind, a, b in inputs:
            if kind == _TICK:
                self.peer.tick()
            elif kind == _SPACE_CHECK:
                await self.disk.run(self.log.retry_reserve)
            elif isinstance(b, TreeDigest):
                self._expect_digest(a, b)
            elif kind == _LINK_DOWN:
                if self._snap_in.pop(a, None) is not None:
                    await self._reload_tree("the snapshot stream broke")
                self.peer.link_down(a)
            elif isinstance(b, (Snap, SnapChunk)):
                await self._receive_snapshot(a, b)
            else:
                self.peer.step(a, b)

    async def _process(self, ready: Ready, nursery: trio.Nursery) -> None:
        if ready.early_messages:
            self._send(ready.early_messages, {})
        await self._persist(ready)
        frozen = self._apply_and_freeze(ready)
        self._send(ready.messages, frozen)
        if ready.committed:
            self._after_commits()
        for sid in ready.drop_links:
            if self.transport is not None:
                self.transport.drop(sid)
        for sid, request in ready.requests:
            caller = Caller(request.session_id, [tuple(a) for a in request.auth_ids], request.superuser)  # type: ignore[misc]
            self._prepare(request.op, request.args, caller, request.cxid)
        now = self.monotonic_ms()
        for session_id in ready.touched_sessions:
            self.sessions.touch(session_id, now)
        for sync in ready.sync_replies:
            done = self.sync_waiting.pop((sync.session_id, sync.cxid), None)
            if done is not None:
                done()
        if ready.soft_state != self.soft:
            self._change_state(ready.soft_state)
        if self._txns_since_snapshot >= self._snapshot_due and not self._snapshot_running:
            nursery.start_soon(contained, "the snapshot task", LOGGER, self._snapshot)

    async def _persist(self, ready: Ready) -> None:
        if ready.accepted_epoch is not None:
            await self.disk.run(write_epoch, self.datadir.accepted_epoch_path, ready.accepted_epoch)
        if ready.current_epoch is not None:
            await self.disk.run(write_epoch, self.datadir.current_epoch_path, ready.current_epoch)
        if ready.truncate_to is not None:
            await self._truncate(ready.truncate_to)
        if ready.append:
            self.log.append([(txn.zxid, encode_txn(txn)) for txn in ready.append])
        if ready.must_sync and self._sync_enabled():
            started = time.perf_counter()
            await self.disk.run(self.log.sync)
            elapsed = time.perf_counter() - started
            self.stats.record_fsync(elapsed)
            if elapsed > 1.0:
                LOGGER.warning("fsync-ing the write ahead log took %.0f ms", elapsed * 1000)

    async def _truncate(self, zxid: int) -> None:
        LOGGER.info("truncating the log after 0x%x", zxid)
        await self.disk.run(self.log.truncate_after, zxid)
        if self.tree.last_zxid > zxid:
            await self._reload_tree(f"the tree is ahead (0x{self.tree.last_zxid:x})")

    async def _reload_tree(self, why: str) -> None:
        LOGGER.info("%s: reloading the tree from disk", why)
        self.log.close()
        tree, self.log = await self.disk.run(self.datadir.recover)
        self._replace_tree(tree)

    def _sync_enabled(self) -> bool:
        if self.soft.state == ServerState.OBSERVING:
            return self.config.force_sync and self.config.observer_sync_enabled
        return self.config.force_sync

    def _replace_tree(self, tree: DataTree) -> None:
        self.tree = tree
        self.preparer = Preparer(tree, self.preparer.limits)

    def _apply(self, txns: list[Txn]) -> None:
        tree, watches, leader = self.tree, self.watches, self.is_leader
        for txn in txns:
            result, events = tree.apply(txn)
            if leader:
                self.preparer.applied(txn.zxid)
            if events and (watches.data or watches.child or watches.persistent or watches.recursive):
                for conn, event_type, path in watches.trigger(events):
                    conn.send_event(event_type, path, txn.zxid)
            done = self.waiting.pop((txn.session_id, txn.cxid), None)
            if done is not None:
                self.outstanding -= 1
                done(txn, result)
            self._after_apply(txn)
        if txns:
            self.stats.commit_count += len(txns)
            self._txns_since_snapshot += len(txns)
            if self.outstanding < self.config.outstanding_requests_max:
                self._unthrottled.set()

    def _apply_and_freeze(self, ready: Ready) -> dict[tuple[int, int], list[ForkedStream]]:
        """Apply the committed txns; for each SNAP in ``ready.messages``, fork a stream of the
        tree exactly when it is at the SNAP's zxid.  The core declared the SNAP at its applied
        point of that moment, and later commits of the same Ready move the tree past it: a
        snapshot taken after all of them would hold txns the learner is then sent again."""
        points: dict[int, list[int]] = {}
        for sid, message in ready.messages:
            if isinstance(message, Snap):
                points.setdefault(message.zxid, []).append(sid)
        if not points:
            self._apply(ready.committed)
            return {}
        frozen: dict[tuple[int, int], list[ForkedStream]] = {}
        for txn in ready.committed:
            self._freeze(points, frozen)
            self._apply([txn])
        self._freeze(points, frozen)
        return frozen

    def _freeze(self, points: dict[int, list[int]], frozen: dict[tuple[int, int], list[ForkedStream]]) -> None:
        zxid = self.tree.last_zxid
        for sid in points.pop(zxid, ()):
            frozen.setdefault((sid, zxid), []).append(self._fork_snapshot(sid, zxid))

    def _after_apply(self, txn: Txn) -> None:
        if txn.type == OpCode.CREATE_SESSION:
            if self.is_leader:
                self.sessions.add(txn.session_id, txn.body[0], self.monotonic_ms())
        elif txn.type == OpCode.CLOSE_SESSION:
            self.sessions.remove(txn.session_id)
            self.closing_sessions.discard(txn.session_id)
            conn = self.session_conns.pop(txn.session_id, None)
            if conn is not None:
                conn.close_after_flush()
        elif txn.type == OpCode.DELETE_CONTAINER:
            self.stats.ttl_node_deleted_count += 1

    # ----------------------------------------------------------------- digests
    def _after_commits(self) -> None:
        if not self.config.digest_enabled:
            return
        if self.is_leader:
            self._send_digest()
        else:
            self._check_digests()

    def _send_digest(self) -> None:
        """At most once per core tick: the learners compare at their own pace."""
        if self.transport is None or self._digest_sent_tick == self.peer.now:
            return
        self._digest_sent_tick = self.peer.now
        message = TreeDigest(zxid=self.tree.last_zxid, digest=self.tree.digest)
        for sid in self.peer.streaming_learners():
            self.transport.send(sid, message)

    def _expect_digest(self, sid: int, message: TreeDigest) -> None:
        if self.soft.leader != sid or self.is_leader:
            return  # from a leader we no longer follow
        self._expected_digests.append((message.zxid, message.digest))
        self._check_digests()

    def _check_digests(self) -> None:
        """Compare the leader's digests with ours at every zxid the tree has reached.

        Raises:
            Inconsistency: they differ; the peer task resyncs this server by SNAP.
        """
        expected, tree = self._expected_digests, self.tree
        while expected and expected[0][0] <= tree.last_zxid:
            zxid, digest = expected.popleft()
            mine = tree.digest_at(zxid)
            if mine is not None and mine != digest:
                self.stats.digest_mismatches += 1
                raise Inconsistency(f"the tree digest at 0x{zxid:x} is 0x{mine:016x} here but 0x{digest:016x} "
                                    f"on the leader (server {self.soft.leader})")  # fmt: skip

    # ----------------------------------------------------------------- repair
    async def _repair(self, exc: Exception) -> None:
        """Restart the core in place from disk (see the module's docstring)."""
        failure = _first(exc, DiskFailure)
        if failure is not None:
            fail_stop(str(failure))
        full = only(exc, (DiskFull,))
        if only(exc, (Inconsistency, InvariantError, DiskFull)):
            LOGGER.error("%s; restarting the core from disk%s", _describe(exc), "" if full else " and resyncing by SNAP")
        else:
            LOGGER.error("running the core failed; restarting it from disk and resyncing by SNAP", exc_info=exc)
        self.stats.repairs += 1
        since = time.monotonic() - self._repaired_at
        if since < REPAIR_PAUSE_S:
            await trio.sleep(REPAIR_PAUSE_S - since)
        self._repaired_at = time.monotonic()
        await self._restart_core(snapshot_wanted=not full)

    async def _restart_core(self, *, snapshot_wanted: bool) -> None:
        """As a process restart would: stop serving, drop every link, reload the tree and the
        core's durable state from disk.  A disk that cannot be read back stops the server."""
        self._stop_serving()
        self._inputs.clear()
        self._snap_in.clear()
        self._expected_digests.clear()
        if self.transport is not None:
            for sid in list(self.transport.peers):
                self.transport.drop(sid)
        try:
            self.log.close()
            tree, self.log = await self.disk.run(self.datadir.recover)
        except (DiskFailure, RecoveryError, CorruptLogError, OSError) as exc:
            fail_stop(f"cannot reload the data dir after a failure: {exc}")
        self._replace_tree(tree)
        _, peer_config = core_timing(self.config)
        durable = durable_state(self.datadir, tree, self.log, self.config.commit_log_count, snapshot_wanted=snapshot_wanted)
        self.peer = Peer(peer_config, durable)
        self.soft = self.peer.soft_state()
        LOGGER.info("core restarted from disk at 0x%x; looking for the leader", tree.last_zxid)

    # ----------------------------------------------------------------- links and snapshots
    def _send(self, messages: list[tuple[int, Message]], frozen: dict[tuple[int, int], list[ForkedStream]]) -> None:
        if self.transport is None:
            return
        dropped: set[int] = set()
        for sid, message in messages:
            if sid in dropped:
                continue
            if isinstance(message, Snap):
                streams = frozen.get((sid, message.zxid))
                if not streams:
                    self._snapshot_missed(sid, message.zxid)
                    dropped.add(sid)
                    continue
                self.stats.snap_count += 1
                self.transport.send(sid, message)
                self.transport.send_forked(sid, streams.pop(0))
                continue
            if isinstance(message, (Diff, Trunc)):
                self.stats.diff_count += 1
            elif isinstance(message, Proposal):
                self._note_proposal_size(message)
            self.transport.send(sid, message)
        for streams in frozen.values():
            for stream in streams:  # none is left unless a Snap was sent twice: never leak a child
                stream.abandon()

    def _snapshot_missed(self, sid: int, zxid: int) -> None:
        """A SNAP whose zxid the tree never was at while this Ready applied: the learner
        would get a snapshot at another zxid than declared.  Drop it; it resyncs."""
        assert self.transport is not None
        LOGGER.error("a SNAP to server %d declares 0x%x, but the tree never was there (now at 0x%x): dropping "
                     "that learner so that it resyncs", sid, zxid, self.tree.last_zxid)  # fmt: skip
        self.transport.drop(sid)
        self._push(_LINK_DOWN, sid)

    def _note_proposal_size(self, proposal: Proposal) -> None:
        size = sum(len(txn.body[1]) if txn.type in (OpCode.CREATE, OpCode.SET_DATA) else 0 for txn in proposal.txns)
        last, smallest, largest = self.last_proposal_bytes
        self.last_proposal_bytes = (size, min(smallest, size) if smallest else size, max(largest, size))

    def _fork_snapshot(self, sid: int, zxid: int) -> ForkedStream:
        """The tree as it is now, which must be at ``zxid``: a forked child streams its image
        in chunks while this server goes on (the tree is never held twice; the pipe is the
        buffer)."""
        if self.tree.last_zxid != zxid:
            raise InvariantError(f"a snapshot for server {sid} at 0x{zxid:x} of a tree at 0x{self.tree.last_zxid:x}")
        read_fd, write_fd = os.pipe()
        with contextlib.suppress(OSError, AttributeError):  # a bigger pipe: fewer wake-ups (Linux)
            fcntl.fcntl(read_fd, fcntl.F_SETPIPE_SZ, 1 << 20)
        records = self.tree.records

        def stream_tree() -> None:
            os.close(read_fd)
            with os.fdopen(write_fd, "wb", buffering=1 << 20) as pipe:
                write_snapshot_frames(pipe, records())

        pid = fork_child(stream_tree)
        os.close(write_fd)
        return ForkedStream(pid, read_fd, f"a snapshot at 0x{zxid:x} to server {sid}")

    async def _receive_snapshot(self, sid: int, message: Snap | SnapChunk) -> None:
        if isinstance(message, Snap):
            # The old tree goes now, so the whole tree is never held twice; this server is
            # not serving while it syncs, and a broken stream reloads the tree from disk.
            self._replace_tree(DataTree())
            self._snap_in[sid] = (message, TreeBuilder())
            self.peer.step(sid, message)
            return
        entry = self._snap_in.get(sid)
        if entry is None:
            return
        snap, builder = entry
        builder.add(message.records)
        self.peer.heard_from(sid)
        if not message.last:
            return
        del self._snap_in[sid]
        if not self.peer.expects_snapshot(sid, snap.zxid):  # the sync was given up meanwhile
            await self._reload_tree("a snapshot arrived for a sync that was given up")
            return
        tree = builder.finish()
        if tree.last_zxid != snap.zxid:
            raise Inconsistency(f"the snapshot from server {sid} declares 0x{snap.zxid:x} but holds a tree at 0x{tree.last_zxid:x}")
        await self.disk.run(self.datadir.install_snapshot, tree.records(), snap.zxid)
        self._replace_tree(tree)
        self.peer.snapshot_installed(snap.zxid)
        LOGGER.info("installed a snapshot at 0x%x from server %d (%d znodes)", snap.zxid, sid, tree.node_count())
        self._check_digests()

    async def _snapshot(self) -> None:
        """Fork: the child writes the tree as of this instant; the parent keeps serving."""
        self._snapshot_running = True
        self._txns_since_snapshot = 0
        self._snapshot_due = self._snapshot_threshold()
        zxid = self.tree.last_zxid
        started = time.perf_counter()
        try:
            self.log.roll()
            snap_dir, records = self.datadir.snap_dir, self.tree.records
            pid = fork_child(lambda: write_snapshot(snap_dir, zxid, records()))
            _, status = await trio.to_thread.run_sync(os.waitpid, pid, 0)
            if status != 0:
                LOGGER.error("snapshot at 0x%x failed in child (status %d)", zxid, status)
                return
            self.stats.snapshots_taken += 1
            self.stats.snapshot.add((time.perf_counter() - started) * 1000)
            LOGGER.info("snapshot at zxid 0x%x written in %.0f ms", zxid, (time.perf_counter() - started) * 1000)
            if self.config.purge_interval_hours > 0:
                removed = await self.disk.run(self.datadir.purge)
                if removed:
                    LOGGER.info("purged %d old snapshot/log files", len(removed))
        except DiskFailure as exc:
            fail_stop(str(exc))
        finally:
            self._snapshot_running = False

    # ----------------------------------------------------------------- roles
    def _change_state(self, soft: SoftState) -> None:
        old, self.soft = self.soft, soft
        LOGGER.info("state %s, phase %s, leader %s, epoch %d%s", soft.state.value, soft.phase.value,
                    soft.leader, soft.epoch, ", serving" if soft.serving else "")  # fmt: skip
        if old.serving and not soft.serving:
            self._stop_serving()
        if soft.leader != old.leader or soft.epoch != old.epoch:
            self._expected_digests.clear()  # digests of another leader's stream
        if soft.serving and soft.state == ServerState.LEADING:
            now = self.monotonic_ms()
            self.sessions = SessionTracker(self.config.tick_ms)
            for session_id, (timeout_ms, _) in self.tree.sessions.items():
                self.sessions.add(session_id, timeout_ms, now)

    def _stop_serving(self) -> None:
        """Clients of a server that stops serving are told (ConnectionLoss), not served."""
        self._proposals.clear()
        self.preparer.reset()
        self.waiting.clear()
        self.sync_waiting.clear()
        self.outstanding = 0
        self._unthrottled.set()
        self.sessions = SessionTracker(self.config.tick_ms)
        for conn in list(self.connections):
            conn.close_after_flush()

    # ----------------------------------------------------------------- periodic work
    async def run_ticker(self) -> None:
        """Tick the core; on the leader, expire sessions and reap containers and TTL nodes."""
        ticks_per_check = max(1, self.config.tick_ms // self.core_tick_ms)
        container_every = max(1, self.config.container_check_interval_ms // self.core_tick_ms)
        ticks_per_second = max(1, 1000 // self.core_tick_ms)
        count = 0
        while True:
            await trio.sleep(self.core_tick_ms / 1000)
            count += 1
            self._push(_TICK)
            if self.log.space_low and count % ticks_per_second == 0:
                self._push(_SPACE_CHECK)
            if not (self.is_leader and self.serving):
                continue
            if count % ticks_per_check == 0:
                for session_id in self.sessions.expired(self.monotonic_ms()):
                    self._expire(session_id)
            if count % container_every == 0:
                self.reap_containers()

    def _expire(self, session_id: int) -> None:
        self.sessions.remove(session_id)
        if session_id in self.tree.sessions and session_id not in self.closing_sessions:
            LOGGER.info("session 0x%x expired", session_id)
            self.closing_sessions.add(session_id)
            self._prepare(OpCode.CLOSE_SESSION, (), Caller(session_id, []), 0)

    def reap_containers(self) -> None:
        now_ms = self.now_ms()
        candidates = [p for p in sorted(self.tree.containers) if not self.tree.nodes[p].children and self.tree.nodes[p].cversion > 0]
        for path in sorted(self.tree.ttl_nodes):
            node = self.tree.nodes[path]
            ttl_ms = owner_ttl_ms(node.ephemeral_owner)
            if not node.children and ttl_ms is not None and now_ms - node.mtime > ttl_ms:
                candidates.append(path)
        system = Caller(0, [], superuser=True)
        for path in candidates:
            if self.preparer.view(path) is not None:
                self._prepare(OpCode.DELETE_CONTAINER, (path,), system, 0)

    # ----------------------------------------------------------------- sessions on connections
    def attach(self, session_id: int, conn: Connection) -> None:
        old = self.session_conns.get(session_id)
        if old is not None and old is not conn:
            LOGGER.info("session 0x%x moved to a new connection; closing the old one", session_id)
            old.close_after_flush()
        self.session_conns[session_id] = conn

    def detach(self, conn: Connection) -> None:
        self.connections.discard(conn)
        self.watches.remove_watcher(conn)
        if conn.session_id and self.session_conns.get(conn.session_id) is conn:
            del self.session_conns[conn.session_id]

    def touch(self, session_id: int) -> None:
        if self.is_leader:
            self.sessions.touch(session_id, self.monotonic_ms())
        else:
            self.peer.touch_sessions([session_id])

    def check_session(self, session_id: int, password: bytes) -> int | None:
        """The session's timeout if (id, password) names a live session, else None."""
        entry = self.tree.sessions.get(session_id)
        if entry is None or entry[1] != password or session_id in self.closing_sessions:
            return None
        return entry[0]

    def learner_counts(self) -> dict[str, int]:
        if not self.is_leader:
            return {}
        learners = self.peer.status().learners
        return {
            "learners": len(learners),
            "followers": sum(1 for i in learners if not i.observer),
            "synced_followers": sum(1 for i in learners if not i.observer and i.uptodate),
            "synced_observers": sum(1 for i in learners if i.observer and i.uptodate),
            "pending_syncs": sum(1 for i in learners if not i.uptodate),
        }


def _first(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first leaf of ``exc`` (a group or not) that is a ``kind``."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _first(inner, kind)
            if found is not None:
                return found
        return None
    return exc if isinstance(exc, kind) else None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


_TICK, _MESSAGE, _LINK_DOWN, _SPACE_CHECK = 0, 1, 2, 3
