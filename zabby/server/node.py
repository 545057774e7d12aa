"""The standalone server's state and its write pipeline (the seam the quorum splits later).

Theory of operation::

    connection ──request──▶ prep (validate against tree + in-flight changes, assign zxid)
                              │ txn
                              ▼
                      commit queue ──▶ log.append + fsync (group commit: every txn that
                                       arrived while the previous fsync ran goes in one batch)
                                              │
                                              ▼
                      apply in zxid order ──▶ watch events ──▶ reply to the connection

A client hears OK only after its txn is on disk.  Reads are answered from the tree, which
holds only what is on disk, so no read ever sees a write that a crash could take back.
Snapshots are taken by a forked child (a copy-on-write image of the tree at exactly one
zxid), so the server keeps serving while it is written, and replay starts right after it.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from zabby.config import ServerConfig
from zabby.errors import ZabbyError
from zabby.opcodes import OpCode, owner_ttl_ms
from zabby.storage.datadir import DataDir
from zabby.storage.snapshot import write_snapshot
from zabby.storage.txnlog import TxnLog
from zabby.tree.datatree import DataTree
from zabby.tree.prep import Caller, Preparer, PrepLimits
from zabby.tree.sessions import SessionTracker
from zabby.tree.txns import Txn, encode_txn, make_zxid, zxid_counter, zxid_epoch
from zabby.tree.watches import WatchManager
from zabby.server.stats import ServerStats

if TYPE_CHECKING:
    from zabby.server.client_conn import Connection

LOGGER = logging.getLogger("zabby.server")

Done = Callable[[Txn, Any], None]


@dataclass(slots=True)
class Queued:
    txn: Txn
    payload: bytes
    done: Done | None


class ZabbyServer:
    """One server's tree, sessions, watches and write pipeline; owned by one trio task tree."""

    def __init__(self, config: ServerConfig, datadir: DataDir, tree: DataTree, log: TxnLog) -> None:
        self.config = config
        self.datadir = datadir
        self.tree = tree
        self.log = log
        self.preparer = Preparer(tree, PrepLimits(config.jute_buffer_bytes_max, config.ttl_enabled))
        self.watches = WatchManager()
        self.sessions = SessionTracker(config.tick_ms)
        self.stats = ServerStats()
        self.connections: set[Connection] = set()
        self.session_conns: dict[int, Connection] = {}
        self.closing_sessions: set[int] = set()
        self.state = "standalone"
        self._queue: list[Queued] = []
        self._queue_ready = trio.Event()
        self._unthrottled = trio.Event()
        self._unthrottled.set()
        self.outstanding = 0
        self._txns_since_snapshot = 0
        self._snapshot_due = self._snapshot_threshold()
        self._snapshot_running = False
        self.last_snapshot_zxid = 0
        self.epoch = zxid_epoch(tree.last_zxid) + 1
        self.next_zxid = make_zxid(self.epoch, 1)
        self._next_session_id = self._initial_session_id()
        for session_id, (timeout_ms, _) in tree.sessions.items():
            self.sessions.add(session_id, timeout_ms, self.monotonic_ms())

    # ----------------------------------------------------------------- clocks
    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)

    @staticmethod
    def monotonic_ms() -> int:
        return int(time.monotonic() * 1000)

    @property
    def last_zxid(self) -> int:
        return self.tree.last_zxid

    def _initial_session_id(self) -> int:
        base = ((self.now_ms() << 24) & (2**64 - 1)) >> 8
        return (self.config.server_id % 128) << 56 | base

    def _snapshot_threshold(self) -> int:
        # ZooKeeper randomizes so that the servers of an ensemble do not all snapshot at once
        count = self.config.snap_count
        return random.randint(count // 2 + 1, count)

    # ----------------------------------------------------------------- writes
    def _allocate_zxid(self) -> int:
        zxid = self.next_zxid
        if zxid_counter(zxid) == 0xFFFFFFFF:
            self.epoch += 1
            self.next_zxid = make_zxid(self.epoch, 1)
        else:
            self.next_zxid = zxid + 1
        return zxid

    def submit(self, op: int, args: tuple[Any, ...], caller: Caller, cxid: int, done: Done | None) -> None:
        """Prepare one write and queue it for the log; raise ZabbyError if it is refused."""
        zxid = self.next_zxid
        txn_type, body = self.preparer.prepare(op, args, caller, zxid, self.now_ms())
        self._enqueue(Txn(self._allocate_zxid(), caller.session_id, cxid, self.now_ms(), txn_type, body), done)

    def _enqueue(self, txn: Txn, done: Done | None) -> None:
        self._queue.append(Queued(txn, encode_txn(txn), done))
        self.outstanding += 1
        if self.outstanding >= self.config.outstanding_requests_max:
            self._unthrottled = trio.Event()
        self._queue_ready.set()

    def create_session(self, timeout_ms: int, done: Done) -> None:
        session_id = self._next_session_id
        while session_id in self.tree.sessions or session_id in self.sessions:
            session_id += 1
        self._next_session_id = session_id + 1
        password = os.urandom(16)
        txn = Txn(self._allocate_zxid(), session_id, 0, self.now_ms(), OpCode.CREATE_SESSION, (timeout_ms, password))
        self._enqueue(txn, done)

    def close_session(self, session_id: int, done: Done | None) -> None:
        if session_id in self.closing_sessions:
            return
        self.closing_sessions.add(session_id)
        zxid = self.next_zxid
        txn_type, body = self.preparer.close_session(session_id, zxid)
        self._enqueue(Txn(self._allocate_zxid(), session_id, 0, self.now_ms(), txn_type, body), done)

    def negotiate_timeout(self, requested_ms: int) -> int:
        return max(self.config.session_timeout_ms_min, min(requested_ms, self.config.session_timeout_ms_max))

    async def wait_unthrottled(self) -> None:
        await self._unthrottled.wait()

    # ----------------------------------------------------------------- the commit loop
    async def run_commit_loop(self, nursery: trio.Nursery) -> None:
        while True:
            await self._queue_ready.wait()
            self._queue_ready = trio.Event()
            while self._queue:
                batch, self._queue = self._queue, []
                await self._persist(batch)
                self._apply(batch)
            if self._txns_since_snapshot >= self._snapshot_due and not self._snapshot_running:
                nursery.start_soon(self._snapshot)

    async def _persist(self, batch: list[Queued]) -> None:
        self.log.append([(item.txn.zxid, item.payload) for item in batch])
        if self.config.force_sync:
            started = time.perf_counter()
            await trio.to_thread.run_sync(self.log.sync)
            elapsed = time.perf_counter() - started
            self.stats.record_fsync(elapsed)
            if elapsed > 1.0:
                LOGGER.warning("fsync-ing the write ahead log took %.0f ms", elapsed * 1000)

    def _apply(self, batch: list[Queued]) -> None:
        tree, watches = self.tree, self.watches
        for item in batch:
            txn = item.txn
            result, events = tree.apply(txn)
            self.preparer.applied(txn.zxid)
            if events and (watches.data or watches.child or watches.persistent or watches.recursive):
                for conn, event_type, path in watches.trigger(events):
                    conn.send_event(event_type, path, txn.zxid)
            if item.done is not None:
                item.done(txn, result)
            self._after_apply(txn)
        self.stats.commit_count += len(batch)
        self._txns_since_snapshot += len(batch)
        self.outstanding -= len(batch)
        if self.outstanding < self.config.outstanding_requests_max:
            self._unthrottled.set()

    def _after_apply(self, txn: Txn) -> None:
        if txn.type == OpCode.CREATE_SESSION:
            self.sessions.add(txn.session_id, txn.body[0], self.monotonic_ms())
        elif txn.type == OpCode.CLOSE_SESSION:
            self.sessions.remove(txn.session_id)
            self.closing_sessions.discard(txn.session_id)
            conn = self.session_conns.pop(txn.session_id, None)
            if conn is not None:
                conn.close_after_flush()
        elif txn.type == OpCode.DELETE_CONTAINER:
            self.stats.ttl_node_deleted_count += 1

    # ----------------------------------------------------------------- snapshots
    async def _snapshot(self) -> None:
        """Fork: the child writes the tree as of this instant; the parent keeps serving."""
        self._snapshot_running = True
        self._txns_since_snapshot = 0
        self._snapshot_due = self._snapshot_threshold()
        zxid = self.tree.last_zxid
        started = time.perf_counter()
        try:
            self.log.roll()
            pid = os.fork()
            if pid == 0:  # the child: write and leave without running any parent cleanup
                code = 1
                try:
                    write_snapshot(self.datadir.snap_dir, zxid, self.tree.records())
                    code = 0
                finally:
                    os._exit(code)
            _, status = await trio.to_thread.run_sync(os.waitpid, pid, 0)
            if status != 0:
                LOGGER.error("snapshot at 0x%x failed in child (status %d)", zxid, status)
                return
            self.last_snapshot_zxid = zxid
            self.stats.snap_count += 1
            self.stats.snapshot.add((time.perf_counter() - started) * 1000)
            LOGGER.info("snapshot at zxid 0x%x written in %.0f ms", zxid, (time.perf_counter() - started) * 1000)
            if self.config.purge_interval_hours > 0:
                removed = await trio.to_thread.run_sync(self.datadir.purge)
                if removed:
                    LOGGER.info("purged %d old snapshot/log files", len(removed))
        finally:
            self._snapshot_running = False

    # ----------------------------------------------------------------- periodic work
    async def run_ticker(self) -> None:
        """Expire sessions (bucketed by tick) and reap empty containers and expired TTL nodes."""
        next_container_check = self.monotonic_ms() + self.config.container_check_interval_ms
        next_purge = self.monotonic_ms() + int(self.config.purge_interval_hours * 3600_000)
        while True:
            await trio.sleep(self.config.tick_ms / 1000)
            now = self.monotonic_ms()
            for session_id in self.sessions.expired(now):
                LOGGER.info("session 0x%x expired", session_id)
                self.close_session(session_id, None)
            if now >= next_container_check:
                next_container_check = now + self.config.container_check_interval_ms
                self.reap_containers()
            if self.config.purge_interval_hours > 0 and now >= next_purge:
                next_purge = now + int(self.config.purge_interval_hours * 3600_000)
                await trio.to_thread.run_sync(self.datadir.purge)

    def reap_containers(self) -> None:
        now_ms = self.now_ms()
        candidates = []
        for path in sorted(self.tree.containers):
            node = self.tree.nodes[path]
            if not node.children and node.cversion > 0:
                candidates.append(path)
        for path in sorted(self.tree.ttl_nodes):
            node = self.tree.nodes[path]
            ttl_ms = owner_ttl_ms(node.ephemeral_owner)
            if not node.children and ttl_ms is not None and now_ms - node.mtime > ttl_ms:
                candidates.append(path)
        system = Caller(0, [], superuser=True)
        for path in candidates:
            try:
                self.submit(OpCode.DELETE_CONTAINER, (path,), system, 0, None)
            except ZabbyError as exc:  # changed since we looked: a later pass decides again
                LOGGER.debug("container %s not reaped: %s", path, exc)

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

    def touch(self, session_id: int) -> bool:
        return self.sessions.touch(session_id, self.monotonic_ms())

    def check_session(self, session_id: int, password: bytes) -> int | None:
        """The session's timeout if (id, password) names a live session, else None."""
        entry = self.tree.sessions.get(session_id)
        if entry is None or entry[1] != password or session_id in self.closing_sessions:
            return None
        return entry[0]
