"""The server's side of the shell's I/O interface (``zabby.shell.io.ShellIO``): trio on the
operating system.

Theory of operation: the effect executor (``zabby.shell.EffectExecutor``) decides what is done
when; this does it.  Messages go onto the peer links (a SNAP's tree image is a forked child's
pipe, relayed in its place); the slow disk calls go to the disk thread (``DiskWorker``); the
log's fdatasync goes to the kernel's AIO where it can (``KernelSync``); snapshots are written
by forked children, reaped by a task of their own; a SNAP's digest is computed by a child
beside the build.  Two tasks run here for as long as the server does: the peer task
(``run_peer``: the effects that must be awaited) and the background syncer (``_run_syncer``).
Replies queued for client connections by the effects are flushed when the executor says its
effects are done (``flush``).
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, Protocol, TypeVar

import trio

from zabby.config import ServerConfig, write_dynamic_config
from zabby.core.messages import Message, Snap
from zabby.engine import ClientsKept, Engine, Install, Recovered, Reload, WriteSnapshot
from zabby.engine.storage import Storage
from zabby.membership import Membership
from zabby.server.peering.gate import InputGate
from zabby.server.process.children import DigestChild
from zabby.server.process.disk import DiskWorker, fail_stop
from zabby.server.process.forks import DiskImage
from zabby.server.process.guard import contained
from zabby.server.process.kernel_sync import KernelSync, SubmitRefused
from zabby.shell import EffectExecutor
from zabby.storage import faults
from zabby.storage.datadir import RecoveryError
from zabby.storage.epochs import CorruptEpochError
from zabby.storage.files import DiskFailure
from zabby.storage.txnlog import CorruptLogError

LOGGER = logging.getLogger("zabby.server")
T = TypeVar("T")


class SystemClock:
    """The engine's clock in a server process."""

    @staticmethod
    def wall_ms() -> int:
        return int(time.time() * 1000)

    @staticmethod
    def monotonic_ms() -> int:
        return int(time.monotonic() * 1000)


class Process(Protocol):
    """What the I/O reaches of its server process (``zabby.server.node.ZabbyServer``)."""

    executor: EffectExecutor
    engine: Engine
    storage: Storage
    config: ServerConfig
    transport: Any  # Transport | ZkTransport | None
    connections: set[Any]
    input_gate: InputGate
    passes: trio.abc.Instrument
    recorded_membership: Membership | None


class TrioIO:
    """One server process's I/O, for its executor."""

    def __init__(self, server: Process) -> None:
        self.server = server
        self.disk = DiskWorker()
        self.kernel_sync = KernelSync.open()
        self.wake_event = trio.Event()  # the peer task has work
        self._sync_wanted = trio.Event()  # an Append asked the background sync for more
        self._sync_progress = trio.Event()  # set (and replaced) after each background sync
        self._nursery: trio.Nursery | None = None
        self._to_flush: list[Any] = []  # connections with replies queued
        self._throttled: set[Any] = set()  # connections waiting for globalOutstandingLimit

    # ----------------------------------------------------------------- the tasks
    async def run_peer(self, nursery: trio.Nursery) -> None:
        """Carry out the effects that must be awaited, and what the engine asks after each,
        for as long as the server runs; meanwhile each pass of trio's scheduler starts a turn of
        the engine and a budget of request bytes (``server.passes``)."""
        executor = self.server.executor
        self._nursery = nursery
        nursery.start_soon(self._run_syncer)
        trio.lowlevel.add_instrument(self.server.passes)
        try:
            while True:
                await self.wake_event.wait()
                self.wake_event = trio.Event()
                executor.run_effects()
                await executor.carry_out_awaited()
        finally:
            trio.lowlevel.remove_instrument(self.server.passes)

    async def _run_syncer(self) -> None:
        executor = self.server.executor
        while True:
            await self._sync_wanted.wait()
            self._sync_wanted = trio.Event()
            await executor.sync_in_background()
            progress, self._sync_progress = self._sync_progress, trio.Event()
            progress.set()

    # ----------------------------------------------------------------- clients
    def flush_soon(self, connection: Any) -> None:
        """A connection queued a reply: it is flushed when the running task's batch is done
        (the reader flushes its own; the executor's ``flush`` the rest after each step)."""
        self._to_flush.append(connection)

    def wake_when_unthrottled(self, connection: Any) -> None:
        self._throttled.add(connection)

    def flush(self) -> None:
        if self._to_flush:
            to_flush, self._to_flush = self._to_flush, []
            for connection in to_flush:
                connection.flush()
        if self._throttled and not self.server.engine.throttled:
            waiting, self._throttled = self._throttled, set()
            for connection in waiting:
                connection.requests_answered()

    def close_clients(self, keep: ClientsKept = ClientsKept.NONE) -> None:
        for conn in list(self.server.connections):
            if not conn.kept(keep):
                conn.close_after_flush()

    def wake(self) -> None:
        self.wake_event.set()

    def settled(self, wake: bool) -> None:
        if wake:
            self.wake_event.set()
        server = self.server
        if not server.engine.inputs_queued:
            server.input_gate.drained()
        # The cyclic collector is off while a SNAP's chunks arrive: they decode and build
        # millions of objects and no cycles, and the collections of the young ones cost ~0.4 s
        # per million znodes.  ``installed`` freezes the finished tree (see main.open_server).
        receiving = server.engine.receiving_snapshot
        if receiving == gc.isenabled():
            if receiving:
                gc.disable()
            else:
                gc.enable()

    watches_effects = False

    def before_effect(self, effect: Any) -> None:
        pass

    def failed(self, exc: Exception) -> None:
        pass  # the engine is told, and decides

    # ----------------------------------------------------------------- peers
    def send(self, sid: int, message: Message) -> None:
        transport = self.server.transport
        if transport is not None:
            transport.send(sid, message)

    def send_image(self, sid: int, message: Snap, image: Any) -> None:
        transport = self.server.transport
        if transport is not None:
            transport.send_forked(sid, image)

    def flush_links(self) -> None:
        transport = self.server.transport
        if transport is not None:
            transport.flush()

    def drop_link(self, sid: int) -> None:
        transport = self.server.transport
        if transport is not None:
            transport.drop(sid)

    def reach(self, members: tuple[Any, ...]) -> None:
        transport = self.server.transport
        if transport is not None:
            transport.add_peers(members)

    async def record_membership(self, membership: Membership) -> None:
        server = self.server
        server.recorded_membership = membership
        if server.config.source is not None:
            path = await self.disk.run(write_dynamic_config, server.config, membership)
            LOGGER.info("membership version %x written to %s", membership.version, path)

    # ----------------------------------------------------------------- the disk
    async def on_disk(self, call: Callable[..., T], *args: Any) -> T:
        result: T = await self.disk.run(call, *args)
        return result

    async def kernel_fdatasync(self) -> bool:
        """The segment's fdatasync by the kernel, if that is all the log's sync needs (no
        directory entry, no reservation), no disk fault is being injected and the kernel
        takes it; False, having done nothing, otherwise."""
        kernel = self.kernel_sync
        log = self.server.storage.log
        point = log.segment_to_sync() if kernel is not None and not faults.active() else None
        if point is None:
            return False
        fd, writes = point
        try:
            await kernel.fdatasync(fd, "the txn log's segment")  # type: ignore[union-attr]
        except SubmitRefused as exc:
            LOGGER.info("the kernel refused an fsync of the txn log (%s): the disk thread does them", exc)
            kernel.close()  # type: ignore[union-attr]
            self.kernel_sync = None
            return False
        log.segment_synced(writes)
        return True

    perf_s = staticmethod(time.perf_counter)

    def want_sync(self) -> None:
        self._sync_wanted.set()

    async def background_sync_progress(self) -> None:
        await self._sync_progress.wait()

    async def reload(self, effect: Reload) -> Recovered:
        """Recover from disk as a restart would; a data dir that cannot be read back stops
        the server (it cannot serve a tree it cannot rebuild)."""
        server = self.server
        recover = functools.partial(server.storage.recover, server.recorded_membership, snapshot_wanted=effect.snapshot_wanted)
        try:
            recovered: Recovered = await self.disk.run(recover)
        except (DiskFailure, RecoveryError, CorruptLogError, CorruptEpochError, OSError) as exc:
            fail_stop(f"cannot reload the data dir ({effect.why}): {exc}")
        return recovered

    def write_snapshot(self, effect: WriteSnapshot) -> None:
        assert self._nursery is not None, "snapshots are written once the peer task runs"
        self._nursery.start_soon(contained, "the snapshot task", LOGGER, self._await_snapshot, effect.image)

    async def _await_snapshot(self, image: DiskImage) -> None:
        started = time.perf_counter()
        _, status = await trio.to_thread.run_sync(os.waitpid, image.pid, 0)
        if status != 0:
            LOGGER.error("snapshot at 0x%x failed in child (status %d)", image.zxid, status)
        self.server.executor.snapshot_written(image.zxid, status == 0, (time.perf_counter() - started) * 1000)

    def digest_child(self, sid: int) -> DigestChild | None:
        try:
            return DigestChild()
        except OSError as exc:  # no fork: the engine computes the digest
            LOGGER.warning("the digest of the SNAP from server %d is computed after it: %s", sid, exc)
            return None

    async def digest_result(self, digest: DigestChild) -> int | None:
        return await trio.to_thread.run_sync(digest.result)

    def installed(self, effect: Install, path: Path) -> None:
        gc.freeze()  # as after recovery (zabby.server.main): the new tree, out of full collections' way

    # ----------------------------------------------------------------- time and the process
    async def sleep_until(self, until_ms: int) -> None:
        await trio.sleep(max(0, until_ms - SystemClock.monotonic_ms()) / 1000)

    def fail_stop(self, reason: str) -> NoReturn:
        fail_stop(reason)

    def close(self) -> None:
        if self.kernel_sync is not None:
            self.kernel_sync.close()
            self.kernel_sync = None
