"""The trio driver of one server's engine: it carries out effects, and decides nothing.

Theory of operation: ``zabby.engine.Engine`` owns the core, the tree, sessions, watches and
every decision.  This driver feeds it (peer messages from the transport, ticks from the
ticker, client calls from the connections) and carries out what it asks, one effect at a
time: messages onto the peer links (a SNAP's tree image is a forked child's pipe, relayed
in its place), the log and epoch files, snapshots written by forked children, client
connections closed.

The log's sync is the driver's choice, and the engine's path is the same whichever it
makes: an ``Append`` is synced inline when one write waits for it alone on a fast disk
(answered durable), and otherwise, in an ensemble, in the background (``_run_syncer``: the
kernel's AIO fdatasync while the loop goes on, or the disk thread, with Appends awaited
meanwhile), which reports ``log_synced``; one sync covers every append made before it (group
commit).  A standalone server awaits that sync instead (``_appends_now``), and a ``Persist``
(epochs, a truncation, or the sync before a role change) is awaited too.

Who carries effects out: the task that fed the engine, at the end of its batch (a burst of
client requests, the frames of one read from a peer, a tick), as long as each effect can be
done without waiting (``run_effects``).  The first that must be awaited (the disk thread,
a reload, a snapshot) goes to the peer task, which carries it out and the rest after it;
while it does, fed input waits for it.  So one message costs one task switch, not three
(its reader, the peer task, a link's sender), and the effects stay one at a time, in order.

A failed disk is the one thing that stops the process (``disk.fail_stop``, exit code 74),
and the engine decides that too.
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import random
import time
from dataclasses import dataclass
from typing import Any

import trio

from zabby.config import ZOOKEEPER_PROTOCOL, ServerConfig, write_dynamic_config
from zabby.core.messages import Message, Snap
from zabby.errors import InvariantError
from zabby.engine import (
    ClientSink,
    Append, CheckSpace, CloseClients, DropLinks, Effect, Engine, FailStop, Install, Pause, Persist, Purge,
    Reconfigure, Recovered, Reload, Send, StageSnapshot, WriteSnapshot, core_timing,
)  # fmt: skip
from zabby.engine.storage import Storage
from zabby.server.clients.budget import ClientMemory
from zabby.server.process.disk import DiskWorker, fail_stop
from zabby.server.process.ratelog import RateLimitedLogs
from zabby.server.process.descriptors import Descriptors
from zabby.server.process.forks import DigestChild, DiskImage, ForkFreezer
from zabby.server.peering.gate import InputGate
from zabby.server.clients.passes import PassBudget
from zabby.server.process.guard import contained
from zabby.server.process.kernel_sync import KernelSync, SubmitRefused
from zabby.server.clients.session import ClientSession
from zabby.server.process.sources import SessionSources, source_of
from zabby.server.clients.throttle import GuessThrottle
from zabby.engine.stats import ServerStats
from zabby.server.peering.transport import Transport
from zabby.server.peering.zk_transport import ZkTransport
from zabby.storage import faults
from zabby.storage.datadir import DataDir, RecoveryError
from zabby.storage.epochs import CorruptEpochError
from zabby.storage.files import DiskFailure
from zabby.storage.snapshot import SnapshotWriter
from zabby.storage.txnlog import CorruptLogError, TxnLog
from zabby.membership import Membership
from zabby.tree.datatree import DataTree
from zabby.tree.watches import WatchHistory
from zabby.wire.framing import FRAME_HEADROOM_BYTES

LOGGER = logging.getLogger("zabby.server")
CONN_LOGGER = logging.getLogger("zabby.server.conn")
CLIENT_LOG_INTERVAL_S = 1.0
FSYNC_WARNING_S = 1.0
FSYNC_INLINE_S_MAX = 0.02  # a disk slower than this on average keeps its fsyncs off the loop


@dataclass(slots=True)
class StagedSnap:
    """A SNAP stream being written to disk as it arrives, and its digest being computed beside
    it (None: the engine computes the tree's after the build)."""

    writer: SnapshotWriter
    digest: DigestChild | None = None

    def discard(self) -> None:
        """Drop what is unfinished (a no-op for a finished writer or a digest that answered)."""
        self.writer.discard()
        if self.digest is not None:
            self.digest.abandon()


class SystemClock:
    @staticmethod
    def wall_ms() -> int:
        return int(time.time() * 1000)

    @staticmethod
    def monotonic_ms() -> int:
        return int(time.monotonic() * 1000)


class ZabbyServer:
    """One server process: its engine, peer links, disk thread and client connections."""

    def __init__(self, config: ServerConfig, storage: Storage, recovered: Recovered, descriptors: Descriptors | None = None) -> None:
        """``recovered``: what ``storage.recover`` gave, with ``config.membership``;
        ``descriptors``: what connections may hold (default: this process's, now)."""
        self.config = config
        self.descriptors = descriptors or Descriptors.for_server(config)
        self.storage = storage
        self.stats = ServerStats()
        self.disk = DiskWorker()
        self.connections: set[ClientSession] = set()  # every client session, attached or not
        self.core_tick_ms, peer_config = core_timing(config)
        self.recorded_membership = config.membership  # what the configuration files say now
        self._kernel_sync = KernelSync.open()
        self.engine = Engine(config, peer_config, self.core_tick_ms, recovered, clock=SystemClock(),
                             freezer=ForkFreezer(storage.snap_dir, zookeeper_peers=config.quorum_protocol == ZOOKEEPER_PROTOCOL),
                             rng=random.SystemRandom(), wake=self._wake_up,
                             stats=self.stats)  # fmt: skip
        self.engine.space_low = storage.space_low
        self._wake = trio.Event()
        self._throttled_connections: set[Any] = set()  # connections waiting for globalOutstandingLimit
        self.client_memory = ClientMemory(config.client_memory_budget_bytes, config.connection_memory_bytes_max,
                                          config.jute_buffer_bytes_max + FRAME_HEADROOM_BYTES)  # fmt: skip
        self.client_logs = RateLimitedLogs(CONN_LOGGER, CLIENT_LOG_INTERVAL_S)  # refusals and closes a flood repeats
        self.guesses = GuessThrottle()  # SASL responses, by client host
        self.session_sources = SessionSources(config.sessions_per_host_max, self._session_alive, config.sessions_max)
        self.passes = PassBudget(self.engine)  # what a pass of trio's scheduler may do (installed by run_peer)
        self.transport: Transport | ZkTransport | None = None
        self.input_gate = InputGate()  # what peers queue in the engine while it awaits an effect
        if config.peers and config.quorum_protocol == ZOOKEEPER_PROTOCOL:
            self.transport = ZkTransport(config.server_id, {p.sid: p for p in config.peers}, self._deliver, self._link_down,
                                         session_timeout=self._session_timeout, heard=self.engine.heard_from, gate=self.input_gate,
                                         digest_of=self._zk_digest_of, carried=self.engine.zk_digest_carried,
                                         membership_version=config.membership_version, warn=self.warn_rate_limited)  # fmt: skip
        elif config.peers:  # peer links' unread input counts in the same budget as the clients'
            self.transport = Transport(config.server_id, {p.sid: p for p in config.peers}, self._deliver, self._link_down,
                                       config.quorum_tls,
                                       memory=self.client_memory, warn=self.warn_rate_limited, auth=config.quorum_auth,
                                       gate=self.input_gate, limits=config.peer_links)  # fmt: skip
        self._fsync_recent_s = 0.0  # a moving average of fsync times
        self._sync_wanted = trio.Event()  # an Append asked the background sync for more
        self._sync_idle = trio.Event()  # no background sync running or wanted
        self._sync_idle.set()
        self._sync_on_thread = False  # the background sync is the disk thread's: no append meanwhile
        self._to_flush: list[Any] = []  # connections with replies queued by the peer task
        self._awaited: Effect | None = None  # an effect handed to the peer task (it must be awaited)
        self._result: Any = None  # what the last effect gave, for the engine's next step
        self._error: Exception | None = None  # or what it raised
        self._running_effects = False  # run_effects is on the stack (no task switch inside it)
        self._feeding = False  # inside a batch (begin_batch): effects wait for its end
        self._work_left = False  # a client call left the engine work (its ``wake``) since effects last ran
        self._staged: dict[int, StagedSnap] = {}  # SNAP streams being written, by leader

    # ----------------------------------------------------------------- what sessions see
    @property
    def datadir(self) -> DataDir:
        return self.storage.datadir

    @property
    def log(self) -> TxnLog:
        return self.storage.log

    @property
    def tree(self) -> DataTree:
        return self.engine.tree

    @property
    def watches(self) -> Any:
        return self.engine.watches

    @property
    def history(self) -> WatchHistory:
        return self.engine.history

    @property
    def sessions(self) -> Any:
        return self.engine.sessions

    @property
    def peer(self) -> Any:
        return self.engine.peer

    @property
    def last_zxid(self) -> int:
        return self.engine.tree.last_zxid

    @property
    def serving(self) -> bool:
        return self.engine.serving

    @property
    def is_leader(self) -> bool:
        return self.engine.is_leader

    @property
    def standalone(self) -> bool:
        return self.engine.standalone

    @property
    def state(self) -> str:
        return self.engine.state

    @property
    def outstanding(self) -> int:
        return self.engine.outstanding

    @property
    def quorum_size(self) -> int:
        """The voters of the committed membership (ZooKeeper's ``getVotingView().size()``), not
        the majority of them."""
        return len(self.engine.peer.membership.voters)

    @property
    def membership(self) -> Membership | None:
        """The committed membership, addresses and all (None for a standalone server)."""
        return self.engine.peer.membership if self.config.peers else None

    @property
    def current_epoch(self) -> int:
        return int(self.engine.peer.current_epoch)

    @property
    def space_low(self) -> bool:
        return bool(self.engine.space_low)

    def learner_acked(self) -> tuple[tuple[int, int], ...]:
        """The leader's learners and the last zxid each acknowledged (empty elsewhere)."""
        if not self.engine.is_leader:
            return ()
        return tuple((learner.sid, learner.acked_zxid) for learner in self.engine.peer.status().learners)

    @property
    def last_proposal_bytes(self) -> tuple[int, int, int]:
        return self.engine.last_proposal_bytes

    def submit(self, op: int, args: tuple[Any, ...], caller: Any, cxid: int, done: Any) -> None:
        self.engine.submit(op, args, caller, cxid, done)

    @property
    def throttled(self) -> bool:
        return self.engine.throttled

    def wake_when_unthrottled(self, connection: Any) -> None:
        self._throttled_connections.add(connection)

    def secret_attempt(self, source: str) -> bool:
        """Whether ``source`` (a client's address) may try a secret now: a SASL response, the
        admin port's HTTP Basic credentials (an IPv6 /64 counts as one source)."""
        return self.guesses.attempt(source_of(source), time.monotonic())

    def warn_rate_limited(self, kind: str, message: str) -> None:
        self.client_logs.warning(kind, message)

    def create_session(self, timeout_ms: int, done: Any) -> None:
        self.engine.create_session(timeout_ms, done)

    def check_member(self) -> None:
        self.engine.check_member()

    @property
    def read_only(self) -> bool:
        return self.engine.read_only

    def create_local_session(self, timeout_ms: int) -> tuple[int, bytes]:
        return self.engine.create_local_session(timeout_ms)

    def close_session(self, session_id: int, cxid: int, done: Any) -> None:
        self.engine.close_session(session_id, cxid, done)

    def client_sync(self, session_id: int, cxid: int, done: Any) -> None:
        self.engine.client_sync(session_id, cxid, done)

    def wait_for_zxid(self, owner: Any, zxid: int, timeout_ms: int, done: Any) -> None:
        self.engine.wait_for_zxid(owner, zxid, timeout_ms, done)

    def negotiate_timeout(self, requested_ms: int) -> int:
        return self.engine.negotiate_timeout(requested_ms)

    def check_session(self, session_id: int, password: bytes) -> int | None:
        return self.engine.check_session(session_id, password)

    def touch(self, session_id: int) -> None:
        self.engine.touch(session_id)

    def attach(self, session_id: int, sink: ClientSink) -> None:
        self.engine.attach(session_id, sink)

    def detach(self, sink: ClientSink) -> None:
        self.connections.discard(sink)
        self.engine.detach(sink)

    def learner_counts(self) -> dict[str, int]:
        return self.engine.learner_counts()

    def flush_soon(self, connection: Any) -> None:
        """A connection queued a reply: it is flushed when the running task's batch is done
        (the reader flushes its own; the peer task flushes the rest after each step)."""
        self._to_flush.append(connection)

    def _flush_connections(self) -> None:
        to_flush, self._to_flush = self._to_flush, []
        for connection in to_flush:
            connection.flush()

    # ----------------------------------------------------------------- inputs
    def begin_batch(self) -> None:
        """A batch of client calls begins: their effects are carried out once, at ``end_batch``
        (which the caller reaches in a ``finally``; a context manager cost a generator per batch,
        a microsecond of every read)."""
        self._feeding = True

    def end_batch(self) -> None:
        """Carry out the batch's effects, if its calls left the engine any: a batch of reads
        left none, and asking the engine for them cost a dozen calls of every read.  Its
        replies are flushed either way: ``flush_soon``'s list must not grow until a tick."""
        self._feeding = False
        if self._work_left:
            self.run_effects()
        elif self._to_flush:
            self._flush_connections()

    def _wake_up(self) -> None:
        """The engine has work (called from inside it: never carry effects out here)."""
        self._work_left = True
        if not (self._feeding or self._running_effects):
            self._wake.set()

    def _zk_digest_of(self, zxid: int) -> tuple[int, int] | None:
        digests = self.engine.zk_digests
        return None if digests is None else digests.digest_of(zxid)

    def _session_alive(self, session_id: int) -> bool:
        return session_id in self.engine.tree.sessions

    def _session_timeout(self, session_id: int) -> int | None:
        entry = self.engine.tree.sessions.get(session_id)
        return None if entry is None else entry[0]

    def _deliver(self, sid: int, messages: list[Message]) -> None:
        for message in messages:
            self.engine.receive(sid, message)
        self.run_effects()

    def _link_down(self, sid: int) -> None:
        self.engine.link_down(sid)
        self.run_effects()

    async def run_ticker(self) -> None:
        while True:
            await trio.sleep(self.core_tick_ms / 1000)
            self.engine.tick()
            self.run_effects()
            self.client_logs.flush()

    # ----------------------------------------------------------------- the effect loop
    def run_effects(self) -> None:
        """Carry out the engine's effects now, in the calling task, up to the first that must
        be awaited, which goes to the peer task.  While the peer task is carrying one out (or
        this is already on the stack, as when a send finds a link full), it does nothing:
        effects stay one at a time and in the engine's order."""
        self._work_left = False
        if self._running_effects or self._awaited is not None:
            return  # the loop on the stack, or the peer task after its effect, takes this input too
        self._running_effects = True
        try:
            self._run_until_awaited()
        finally:
            self._running_effects = False
        if self._awaited is not None or self.engine.has_work():  # the peer task: after the others had their turn
            self._wake.set()
        if not self.engine.inputs_queued:
            self.input_gate.drained()
        # The cyclic collector is off while a SNAP's chunks arrive: they decode and build
        # millions of objects and no cycles, and the collections of the young ones cost ~0.4 s
        # per million znodes.  ``_install`` freezes the finished tree (see main.open_server).
        receiving = self.engine.receiving_snapshot
        if receiving == gc.isenabled():
            if receiving:
                gc.disable()
            else:
                gc.enable()

    def _run_until_awaited(self) -> None:
        engine = self.engine
        while True:
            effect = engine.next_effect(self._result, self._error)
            self._result, self._error = None, None
            if effect is None:
                break
            try:
                done, self._result = self._carry_out_now(effect)
            except Exception as exc:  # handed back: the engine decides what a failure means
                self._error = exc
                continue
            if not done:
                self._awaited = effect
                break
        if self._to_flush:
            self._flush_connections()
        if self._throttled_connections and not engine.throttled:
            waiting, self._throttled_connections = self._throttled_connections, set()
            for connection in waiting:
                connection.requests_answered()

    async def run_peer(self, nursery: trio.Nursery) -> None:
        """Carry out the effects that must be awaited, and what the engine asks after each,
        for as long as the server runs; meanwhile each pass of trio's scheduler starts a turn of
        the engine and a budget of request bytes (``self.passes``)."""
        nursery.start_soon(self._run_syncer)
        trio.lowlevel.add_instrument(self.passes)
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                self.run_effects()
                while self._awaited is not None:
                    try:
                        self._result = await self._carry_out(self._awaited, nursery)
                    except Exception as exc:  # handed back: the engine decides what a failure means
                        self._error = exc
                    self._awaited = None
                    self.run_effects()
        finally:
            trio.lowlevel.remove_instrument(self.passes)

    def _carry_out_now(self, effect: Effect) -> tuple[bool, Any]:
        """(True, its result) if ``effect`` was carried out without waiting; (False, None) if
        it must be awaited."""
        if isinstance(effect, Send):
            self._send(effect)
        elif isinstance(effect, Append) and self._appends_now(effect):
            return True, self._append_in_background(effect)
        elif isinstance(effect, Persist) and self._persists_now(effect):
            self.storage.append(effect.append)
            return True, self.log.space_low
        elif isinstance(effect, DropLinks):
            self._drop_links(effect)
        elif isinstance(effect, CloseClients):
            self._close_clients()
        elif isinstance(effect, StageSnapshot):
            self._stage(effect)
        else:
            return False, None
        return True, None

    async def _carry_out(self, effect: Effect, nursery: trio.Nursery) -> Any:
        """An effect that must be awaited (the others: ``_carry_out_now``), once the log's
        background sync is done: these use the disk, and the kernel syncs one thing at a time."""
        await self._sync_idle.wait()
        if isinstance(effect, Append):
            if self.config.peers:  # it waited for the disk thread's sync of the log
                return self._append_in_background(effect)
            return await self._append_and_sync(effect)
        if isinstance(effect, Persist):
            return await self._persist(effect)
        elif isinstance(effect, Reload):
            return await self._reload(effect)
        elif isinstance(effect, Install):
            return await self._install(effect)
        elif isinstance(effect, WriteSnapshot):
            self.storage.snapshot_due()
            nursery.start_soon(contained, "the snapshot task", LOGGER, self._await_snapshot, effect.image)
        elif isinstance(effect, Purge):
            removed = await self.disk.run(self.storage.purge)
            if removed:
                LOGGER.info("purged %d old snapshot/log files", len(removed))
        elif isinstance(effect, CheckSpace):
            return not await self.disk.run(self.storage.retry_reserve)
        elif isinstance(effect, Reconfigure):
            await self._reconfigure(effect)
        elif isinstance(effect, Pause):
            await trio.sleep(max(0, effect.until_ms - SystemClock.monotonic_ms()) / 1000)
        elif isinstance(effect, FailStop):
            fail_stop(effect.reason)
        return None

    def _send(self, effect: Send) -> None:
        """Queue the messages, then send them: a Send's messages leave before what follows it
        (the leader's PROPOSALs go out before its own fsync)."""
        if self.transport is None:
            return
        for sid, message in effect.messages:
            self.transport.send(sid, message)
            if isinstance(message, Snap):
                self.transport.send_forked(sid, effect.images[(sid, message.zxid)])
        self.transport.flush()

    def _drop_links(self, effect: DropLinks) -> None:
        if self.transport is not None:
            for sid in effect.sids:
                self.transport.drop(sid)

    def _close_clients(self) -> None:
        for conn in list(self.connections):
            conn.close_after_flush()

    @staticmethod
    def _persists_now(effect: Persist) -> bool:
        """A Persist that only appends (forceSync=no): no epoch file, no truncation, no sync.
        The others come with a role change, a SNAP or links dropped (a broadcast Ready is an
        ``Append``), so their fsync is never worth blocking the loop for."""
        return (effect.accepted_epoch is None and effect.current_epoch is None and effect.truncate_to is None
                and not effect.sync)  # fmt: skip

    async def _persist(self, effect: Persist) -> bool:
        if effect.accepted_epoch is not None:
            await self.disk.run(self.storage.write_accepted_epoch, effect.accepted_epoch)
        if effect.truncate_to is not None:
            await self.disk.run(self.storage.truncate_after, effect.truncate_to)
        self.storage.append(effect.append)
        if effect.sync:  # off the loop, which reads on meanwhile
            await self._sync_log()
        if effect.current_epoch is not None:  # last: only once the log holds what came with it
            await self.disk.run(self.storage.write_current_epoch, effect.current_epoch)
        return self.log.space_low

    async def _sync_log(self) -> None:
        """The log's sync off the loop, timed: its segment's fdatasync by the kernel
        (``KernelSync``) when that is all it needs and no disk fault is being injected, else
        the disk thread's."""
        started = time.perf_counter()
        if not await self._kernel_fdatasync():
            self._sync_on_thread = True  # Appends wait for it: TxnLog.sync must not race them
            try:
                await self.disk.run(self.storage.sync)
            finally:
                self._sync_on_thread = False
        self._fsynced(time.perf_counter() - started)

    async def _kernel_fdatasync(self) -> bool:
        """The segment's fdatasync by the kernel, if that is all the log's sync needs (no
        directory entry, no reservation), no disk fault is being injected and the kernel
        takes it; False, having done nothing, otherwise."""
        kernel = self._kernel_sync
        point = self.log.segment_to_sync() if kernel is not None and not faults.active() else None
        if point is None:
            return False
        fd, writes = point
        try:
            await kernel.fdatasync(fd, "the txn log's segment")  # type: ignore[union-attr]
        except SubmitRefused as exc:
            LOGGER.info("the kernel refused an fsync of the txn log (%s): the disk thread does them", exc)
            kernel.close()  # type: ignore[union-attr]
            self._kernel_sync = None
            return False
        self.log.segment_synced(writes)
        return True

    def _sync_here(self) -> None:
        """The log's sync right here, blocking the loop."""
        started = time.perf_counter()
        self.storage.sync()
        self._fsynced(time.perf_counter() - started)

    # ----------------------------------------------------------------- the log's background sync
    def _appends_now(self, effect: Append) -> bool:
        """Whether an Append is carried out without waiting: not while the disk thread syncs the
        log (``TxnLog.sync`` must not race an append), and on a standalone server only when it
        syncs nothing or inline.  A standalone server commits only on its own fsync: its
        Appends await their sync (off the loop, answered durable), and the writes read
        meanwhile go into the next one, a bigger batch than a sync in the background would
        leave to each Ready.  An ensemble's server goes on meanwhile: its followers log the
        next proposals while syncing the last."""
        if self._sync_on_thread:
            return False
        return bool(self.config.peers) or not effect.sync or (self._sync_idle.is_set() and self._fsync_inline(len(effect.txns)))

    async def _append_and_sync(self, effect: Append) -> tuple[bool, bool]:
        """A standalone server's Append with its sync awaited, off the loop: durable when answered."""
        self.storage.append(effect.txns)
        await self._sync_log()
        return self.log.space_low, True

    def _append_in_background(self, effect: Append) -> tuple[bool, bool]:
        """Append; sync here when one write waits for it alone (``_fsync_inline``), else have
        ``_run_syncer`` do it.  Whether the disk is short of space, and the log durable now."""
        self.storage.append(effect.txns)
        if not effect.sync:
            return self.log.space_low, False
        if self._sync_idle.is_set() and self._fsync_inline(len(effect.txns)):
            self._sync_here()
            return self.log.space_low, True
        if self._sync_idle.is_set():
            self._sync_idle = trio.Event()
        self._sync_wanted.set()
        return self.log.space_low, False

    async def _run_syncer(self) -> None:
        """Sync the log whenever an Append asks, and tell the engine up to which zxid each
        sync made it durable: the appends made while one runs wait for the next.  The kernel
        does the fdatasync while the loop goes on; where it cannot (a directory entry or a
        reservation to write too, a disk fault injected), the disk thread syncs, and Appends
        are awaited until it is done."""
        while True:
            await self._sync_wanted.wait()
            self._sync_wanted = trio.Event()
            zxid = self.log.last_zxid
            error: Exception | None = None
            try:
                await self._sync_log()
            except DiskFailure as exc:
                fail_stop(str(exc))
            except Exception as exc:  # handed to the engine: it decides what a failure means
                error = exc
            if not self._sync_wanted.is_set():
                self._sync_idle.set()
            self.engine.log_synced(zxid, error)
            self.run_effects()

    def _fsynced(self, elapsed: float) -> None:
        self.stats.record_fsync(elapsed)
        self._fsync_recent_s = 0.8 * self._fsync_recent_s + 0.2 * elapsed
        if elapsed > FSYNC_WARNING_S:
            LOGGER.warning("fsync-ing the write ahead log took %.0f ms", elapsed * 1000)

    def _fsync_inline(self, txns: int) -> bool:
        """Fsync right here, blocking the event loop, when a single write waits for it and
        fsyncs are fast: the hop to the disk thread and back (a queue, a futex, trio's
        wake-up socket) costs about what the fsync does.  Under pipelined load the fsync
        runs elsewhere and the loop reads the next requests meanwhile (group commit).  The
        txns it logs count, not only this server's own clients' writes: a leader or a
        follower logs the writes of the whole ensemble's clients."""
        return txns <= 1 and self.engine.outstanding <= 1 and self._fsync_recent_s < FSYNC_INLINE_S_MAX

    async def _reconfigure(self, effect: Reconfigure) -> None:
        """Reach the members of the new membership; record a committed one in the files."""
        if self.transport is not None:
            members = effect.membership.members + (effect.proposed.members if effect.proposed else ())
            self.transport.add_peers(members)
        if effect.committed and effect.membership.version:
            self.recorded_membership = effect.membership
        if effect.committed and effect.membership.version and self.config.source is not None:
            path = await self.disk.run(write_dynamic_config, self.config, effect.membership)
            LOGGER.info("membership version %x written to %s", effect.membership.version, path)

    def _stage(self, effect: StageSnapshot) -> None:
        """Right here, not in the disk thread: this server is not serving while it syncs, and
        a SNAP's ~1 MiB writes to the page cache cost less than a hop per chunk."""
        if effect.start:
            self._discard_staged(effect.sid)
            staged = self._staged[effect.sid] = StagedSnap(self.storage.stage_snapshot(effect.zxid, effect.sid))
            try:
                staged.digest = DigestChild()
            except OSError as exc:  # no fork: the engine computes the digest
                LOGGER.warning("the digest of the SNAP from server %d is computed after it: %s", effect.sid, exc)
            return
        stream = self._staged.get(effect.sid)
        if stream is None or stream.writer.zxid != effect.zxid:
            raise InvariantError(f"records of a SNAP at 0x{effect.zxid:x} from server {effect.sid} with no stream begun")
        if effect.encoded:  # the records as they came over the wire: no packing them again
            stream.writer.add_encoded(effect.encoded, len(effect.records))
            if stream.digest is not None:
                stream.digest.feed(effect.encoded)
        else:
            stream.writer.add(effect.records)
            if stream.digest is not None:  # records without their bytes: the engine computes the digest
                stream.digest.abandon()
                stream.digest = None

    async def _install(self, effect: Install) -> int | None:
        """The staged stream made durable; returns its records' digest (see ``Install``)."""
        staged = self._staged.pop(effect.sid, None)
        records = effect.tree.record_count()
        if staged is None or staged.writer.zxid != effect.zxid or staged.writer.count != records:
            if staged is not None:
                staged.discard()
            raise InvariantError(f"the SNAP at 0x{effect.zxid:x} from server {effect.sid} is not what was staged "
                                 f"({'nothing' if staged is None else f'{staged.writer.count} records at 0x{staged.writer.zxid:x}'}, "
                                 f"not {records})")  # fmt: skip
        digest = staged.digest
        try:
            await self.disk.run(self.storage.install_snapshot, staged.writer)
            value = None if digest is None else await trio.to_thread.run_sync(digest.result)
        finally:
            staged.discard()  # a no-op for what finished or answered
        gc.freeze()  # as after recovery (zabby.server.main): the new tree, out of full collections' way
        if digest is not None and value is None:
            LOGGER.warning("the digest of the SNAP from server %d was not computed beside it: computing it now", effect.sid)
        return value

    def _discard_staged(self, sid: int | None = None) -> None:
        """Drop the SNAP stream being written from ``sid`` (None: every one)."""
        for staged_sid in [sid] if sid is not None else list(self._staged):
            staged = self._staged.pop(staged_sid, None)
            if staged is not None:
                staged.discard()

    def close(self) -> None:
        """At shutdown: nothing half written left behind, the log closed."""
        self._discard_staged()
        self.storage.close()
        if self._kernel_sync is not None:
            self._kernel_sync.close()
            self._kernel_sync = None

    async def _reload(self, effect: Reload) -> Recovered:
        """Recover from disk as a restart would; a data dir that cannot be read back stops
        the server (it cannot serve a tree it cannot rebuild)."""
        self._discard_staged()  # the core starts over: a SNAP it was receiving is abandoned
        recover = functools.partial(self.storage.recover, self.recorded_membership, snapshot_wanted=effect.snapshot_wanted)
        try:
            return await self.disk.run(recover)
        except (DiskFailure, RecoveryError, CorruptLogError, CorruptEpochError, OSError) as exc:
            fail_stop(f"cannot reload the data dir ({effect.why}): {exc}")

    async def _await_snapshot(self, image: DiskImage) -> None:
        started = time.perf_counter()
        _, status = await trio.to_thread.run_sync(os.waitpid, image.pid, 0)
        if status != 0:
            LOGGER.error("snapshot at 0x%x failed in child (status %d)", image.zxid, status)
        self.engine.snapshot_written(image.zxid, status == 0, (time.perf_counter() - started) * 1000)
        self.run_effects()
