"""The shell: it carries out the engine's effects, in the engine's order, and decides nothing
the engine decides.  Written once, run by the server and by the simulator alike.

Theory of operation: the engine hands out one effect at a time (``Engine.next_effect``) and
takes its result on the next call.  The shell carries effects out through an I/O interface
(``zabby.shell.io.ShellIO``): messages onto the peer links, the log and epoch files, SNAP
streams staged to disk, snapshots written by forked children, client connections closed.

Who carries effects out: the task that fed the engine, at the end of its batch (a burst of
client requests, the frames of one read from a peer, a tick), as long as each effect can be
done without waiting (``run_effects``).  The first that must be awaited (the disk thread, a
reload, a snapshot) goes to the peer task (``carry_out_awaited``), which carries it out and
the rest after it; while it does, fed input waits for it.  So one message costs one task
switch, not three, and the effects stay one at a time, in order.

The log's sync is the shell's choice, and the engine's path is the same whichever it makes:
an ``Append`` is synced inline when one write waits for it alone on a fast disk (answered
durable), and otherwise, in an ensemble, in the background (``sync_in_background``: the
kernel's AIO fdatasync while the loop goes on, or the disk thread, with Appends awaited
meanwhile), which reports ``log_synced``; one sync covers every append made before it (group
commit).  A standalone server awaits that sync instead (``_appends_now``), and a ``Persist``
(epochs, a truncation, or the sync before a role change) is awaited too.  The rule that an
ACK leaves only after its fsync lives here: an Append answers durable only once its sync ran.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from zabby.core.messages import Snap
from zabby.engine import (
    FLUSH_CLIENTS, Append, CheckSpace, CloseClients, DropLinks, Effect, Engine, FailStop, Install, Pause, Persist, Purge,
    Reconfigure, Reload, Send, StageSnapshot, WriteSnapshot,
)  # fmt: skip
from zabby.engine.storage import Storage
from zabby.errors import InvariantError
from zabby.shell.io import Digest, ShellIO
from zabby.storage.files import DiskFailure
from zabby.storage.snapshot import SnapshotWriter

LOGGER = logging.getLogger("zabby.server")
FSYNC_WARNING_S = 1.0
FSYNC_INLINE_S_MAX = 0.02  # a disk slower than this on average keeps its fsyncs off the loop


@dataclass(slots=True)
class StagedSnap:
    """A SNAP stream being written to disk as it arrives, and its digest being computed beside
    it (None: the engine computes the tree's after the build)."""

    writer: SnapshotWriter
    digest: Digest | None = None

    def discard(self) -> None:
        """Drop what is unfinished (a no-op for a finished writer or a digest that answered)."""
        self.writer.discard()
        if self.digest is not None:
            self.digest.abandon()


class EffectExecutor:
    """Carries out one engine's effects through ``io``; ``ensemble``: the server has peers."""

    def __init__(self, storage: Storage, io: ShellIO, *, ensemble: bool) -> None:
        self.engine: Engine = None  # type: ignore[assignment]  # set by ``drive``
        self.storage = storage
        self.io = io
        self.ensemble = ensemble
        self.awaited: Effect | None = None  # an effect handed to the peer task (it must be awaited)
        self._result: Any = None  # what the last effect gave, for the engine's next step
        self._error: Exception | None = None  # or what it raised
        self._running = False  # run_effects is on the stack (no task switch inside it)
        self._feeding = False  # inside a batch (begin_batch): effects wait for its end
        self._work_left = False  # a client call left the engine work (its ``wake``) since effects last ran
        self.sync_idle = True  # no background sync running or wanted
        self.sync_wanted = False  # an Append asked the background sync for more
        self._sync_on_thread = False  # the background sync is the disk thread's: no append meanwhile
        self._fsync_recent_s = 0.0  # a moving average of fsync times
        self._fsync_unrecorded_s: float | None = None  # an inline fsync's time, in the stats once the answers left
        self._staged: dict[int, StagedSnap] = {}  # SNAP streams being written, by leader

    def drive(self, engine: Engine) -> None:
        """Carry out ``engine``'s effects from now on (it calls ``wake_up`` when a client call
        left it work)."""
        self.engine = engine
        engine.wake = self.wake_up

    # ----------------------------------------------------------------- batches of input
    def begin_batch(self) -> None:
        """A batch of client calls begins: their effects are carried out once, at ``end_batch``
        (which the caller reaches in a ``finally``; a context manager cost a generator per batch,
        a microsecond of every read)."""
        self._feeding = True

    def end_batch(self) -> None:
        """Carry out the batch's effects, if its calls left the engine any: a batch of reads
        left none, and asking the engine for them cost a dozen calls of every read.  Its
        replies are flushed either way."""
        self._feeding = False
        if self._work_left:
            self.run_effects()
        else:
            self.io.flush()

    def wake_up(self) -> None:
        """The engine has work (called from inside it: never carry effects out here)."""
        self._work_left = True
        if not (self._feeding or self._running):
            self.io.wake()

    # ----------------------------------------------------------------- the effect loop
    def run_effects(self) -> None:
        """Carry out the engine's effects now, in the calling task, up to the first that must
        be awaited, which goes to the peer task.  While the peer task is carrying one out (or
        this is already on the stack, as when a send finds a link full), it does nothing:
        effects stay one at a time and in the engine's order."""
        self._work_left = False
        if self._running or self.awaited is not None:
            return  # the loop on the stack, or the peer task after its effect, takes this input too
        self._running = True
        try:
            self._run_until_awaited()
        finally:
            self._running = False
        self.io.settled(self.awaited is not None or self.engine.has_work())

    def _run_until_awaited(self) -> None:
        engine, io = self.engine, self.io
        watched = io.watches_effects
        while True:
            effect = engine.next_effect(self._result, self._error)
            self._result, self._error = None, None
            if effect is None:
                break
            if watched:
                io.before_effect(effect)
            if effect is FLUSH_CLIENTS:  # outside the try, as the flush below: no failure of the engine's
                io.flush()
                continue
            try:
                done, self._result = self._carry_out_now(effect)
            except Exception as exc:  # handed back: the engine decides what a failure means
                io.failed(exc)
                self._error = exc
                continue
            if not done:
                self.awaited = effect
                break
        io.flush()
        if self._fsync_unrecorded_s is not None:
            self._record_inline_fsync()

    async def carry_out_awaited(self) -> None:
        """The peer task's part: the effect that must be awaited, and what the engine asks
        after it, until none is left to await."""
        while self.awaited is not None:
            try:
                self._result = await self._carry_out(self.awaited)
            except Exception as exc:  # handed back: the engine decides what a failure means
                self.io.failed(exc)
                self._error = exc
            self.awaited = None
            self.run_effects()

    def _carry_out_now(self, effect: Effect) -> tuple[bool, Any]:
        """(True, its result) if ``effect`` was carried out without waiting; (False, None) if
        it must be awaited."""
        if isinstance(effect, Send):
            self._send(effect)
        elif isinstance(effect, Append) and self._appends_now(effect):
            return True, self._append_in_background(effect)
        elif isinstance(effect, Persist) and self._persists_now(effect):
            self.storage.append(effect.append)
            return True, self.storage.space_low
        elif isinstance(effect, DropLinks):
            for sid in effect.sids:
                self.io.drop_link(sid)
        elif isinstance(effect, CloseClients):
            self.io.close_clients(effect.keep)
        elif isinstance(effect, StageSnapshot):
            self._stage(effect)
        else:
            return False, None
        return True, None

    async def _carry_out(self, effect: Effect) -> Any:
        """An effect that must be awaited (the others: ``_carry_out_now``), once the log's
        background sync is done: these use the disk, and the kernel syncs one thing at a time."""
        await self._until_sync_idle()
        io = self.io
        if isinstance(effect, Append):
            if self.ensemble:  # it waited for the disk thread's sync of the log
                return self._append_in_background(effect)
            return await self._append_and_sync(effect)
        if isinstance(effect, Persist):
            return await self._persist(effect)
        elif isinstance(effect, Reload):
            self._discard_staged()  # the core starts over: a SNAP it was receiving is abandoned
            return await io.reload(effect)
        elif isinstance(effect, Install):
            return await self._install(effect)
        elif isinstance(effect, WriteSnapshot):
            self.storage.snapshot_due()
            io.write_snapshot(effect)
        elif isinstance(effect, Purge):
            removed = await io.on_disk(self.storage.purge)
            if removed:
                LOGGER.info("purged %d old snapshot/log files", len(removed))
        elif isinstance(effect, CheckSpace):
            return not await io.on_disk(self.storage.retry_reserve)
        elif isinstance(effect, Reconfigure):
            io.reach(effect.membership.members + (effect.proposed.members if effect.proposed else ()))
            if effect.committed and effect.membership.version:
                await io.record_membership(effect.membership)
        elif isinstance(effect, Pause):
            await io.sleep_until(effect.until_ms)
        elif isinstance(effect, FailStop):
            io.fail_stop(effect.reason)
        return None

    def snapshot_written(self, zxid: int, ok: bool, elapsed_ms: float) -> None:
        """The snapshot ``write_snapshot`` began is written (``ok``) or failed."""
        self.engine.snapshot_written(zxid, ok, elapsed_ms)
        self.run_effects()

    def _send(self, effect: Send) -> None:
        """Queue the messages, then send them: a Send's messages leave before what follows it
        (the leader's PROPOSALs go out before its own fsync)."""
        io = self.io
        for sid, message in effect.messages:
            io.send(sid, message)
            if isinstance(message, Snap):
                io.send_image(sid, message, effect.images[(sid, message.zxid)])
        io.flush_links()

    # ----------------------------------------------------------------- the log
    @staticmethod
    def _persists_now(effect: Persist) -> bool:
        """A Persist that only appends (forceSync=no): no epoch file, no truncation, no sync.
        The others come with a role change, a SNAP or links dropped (a broadcast Ready is an
        ``Append``), so their fsync is never worth blocking the loop for."""
        return (effect.accepted_epoch is None and effect.current_epoch is None and effect.truncate_to is None
                and not effect.sync)  # fmt: skip

    async def _persist(self, effect: Persist) -> bool:
        """The parts in the order ``Persist`` names: the current epoch last, only once the log
        holds (durably, if asked) what came with it."""
        storage, io = self.storage, self.io
        if effect.accepted_epoch is not None:
            await io.on_disk(storage.write_accepted_epoch, effect.accepted_epoch)
        if effect.truncate_to is not None:
            await io.on_disk(storage.truncate_after, effect.truncate_to)
        storage.append(effect.append)
        if effect.sync:  # off the loop, which reads on meanwhile
            await self._sync_log()
        if effect.current_epoch is not None:
            await io.on_disk(storage.write_current_epoch, effect.current_epoch)
        return storage.space_low

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
        return self.ensemble or not effect.sync or (self.sync_idle and self._fsync_inline(len(effect.txns)))

    async def _append_and_sync(self, effect: Append) -> tuple[bool, bool]:
        """A standalone server's Append with its sync awaited, off the loop: durable when answered."""
        self.storage.append(effect.txns)
        await self._sync_log()
        return self.storage.space_low, True

    def _append_in_background(self, effect: Append) -> tuple[bool, bool]:
        """Append; sync here when one write waits for it alone (``_fsync_inline``), else have
        ``sync_in_background`` do it.  Whether the disk is short of space, and the log durable now."""
        storage = self.storage
        storage.append(effect.txns)
        if not effect.sync:
            return storage.space_low, False
        if self.sync_idle and self._fsync_inline(len(effect.txns)):
            self._sync_here()
            return storage.space_low, True
        self.sync_idle = False
        if not self.sync_wanted:
            self.sync_wanted = True
            self.io.want_sync()
        return storage.space_low, False

    async def sync_in_background(self) -> None:
        """The background sync an Append asked for (``io.want_sync``): sync the log, and tell
        the engine up to which zxid it is durable; the appends made meanwhile wait for the
        next.  The kernel does the fdatasync while the loop goes on; where it cannot (a
        directory entry or a reservation to write too, a disk fault injected), the disk
        thread syncs, and Appends are awaited until it is done."""
        self.sync_wanted = False
        zxid = self.storage.log.last_zxid
        error: Exception | None = None
        try:
            await self._sync_log()
        except DiskFailure as exc:
            self.io.fail_stop(str(exc))
        except Exception as exc:  # handed to the engine: it decides what a failure means
            self.io.failed(exc)
            error = exc
        if not self.sync_wanted:
            self.sync_idle = True
        self.engine.log_synced(zxid, error)
        self.run_effects()

    async def _until_sync_idle(self) -> None:
        while not self.sync_idle:
            await self.io.background_sync_progress()

    async def _sync_log(self) -> None:
        """The log's sync off the loop, timed: the kernel's (``io.kernel_fdatasync``) when that
        is all it needs, else the disk thread's."""
        io = self.io
        started = io.perf_s()
        if not await io.kernel_fdatasync():
            self._sync_on_thread = True  # Appends wait for it: TxnLog.sync must not race them
            try:
                await io.on_disk(self.storage.sync)
            finally:
                self._sync_on_thread = False
        self._fsynced(io.perf_s() - started)

    def _sync_here(self) -> None:
        """The log's sync right here, blocking the loop; its time goes into the stats once the
        loop is done (``_run_until_awaited``): the answers it made durable leave first."""
        if self._fsync_unrecorded_s is not None:
            self._record_inline_fsync()
        started = self.io.perf_s()
        self.storage.sync()
        elapsed = self._fsync_unrecorded_s = self.io.perf_s() - started
        self._average_fsync(elapsed)  # at once: the next Append's choice (``_fsync_inline``) reads it

    def _record_inline_fsync(self) -> None:
        elapsed, self._fsync_unrecorded_s = self._fsync_unrecorded_s, None
        assert elapsed is not None
        self._record_fsync(elapsed)

    def _fsynced(self, elapsed: float) -> None:
        self._average_fsync(elapsed)
        self._record_fsync(elapsed)

    def _average_fsync(self, elapsed: float) -> None:
        self._fsync_recent_s = 0.8 * self._fsync_recent_s + 0.2 * elapsed

    def _record_fsync(self, elapsed: float) -> None:
        self.engine.stats.record_fsync(elapsed)
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

    # ----------------------------------------------------------------- SNAPs
    def _stage(self, effect: StageSnapshot) -> None:
        """Right here, not in the disk thread: this server is not serving while it syncs, and
        a SNAP's ~1 MiB writes to the page cache cost less than a hop per chunk."""
        if effect.start:
            self._discard_staged(effect.sid)
            staged = self._staged[effect.sid] = StagedSnap(self.storage.stage_snapshot(effect.zxid, effect.sid))
            staged.digest = self.io.digest_child(effect.sid)
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
            path = await self.io.on_disk(self.storage.install_snapshot, staged.writer)
            value = None if digest is None else await self.io.digest_result(digest)
        finally:
            staged.discard()  # a no-op for what finished or answered
        self.io.installed(effect, path)
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
        """At shutdown or a crash: nothing half written left behind."""
        self._discard_staged()


def run_now(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends (the simulator's I/O finishes at once), and return
    what it returns.

    Raises:
        InvariantError: it suspended (then it is closed).
    """
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value
    coroutine.close()
    raise InvariantError("a shell coroutine suspended where the simulator runs it to its end")
