"""The simulator's side of the shell's I/O interface: the server's own shell
(``zabby.shell.EffectExecutor``) runs over these, so the scheduling that ships is the one simulated.

``SimIO`` is the world one simulated server sees: the packet simulator for its links, a
``SimStorage`` (the server's ``Storage`` over ``SimFS``, watched by the checkers) for its
disk, the simulated clock, and children that write snapshots some ticks later.  Slow calls
finish at once, except ``sleep_until`` (a ``Pause``), which suspends the shell's peer task
until the tick it names: the cluster resumes it then (``Cluster.drain``).  What a server
syncs how is drawn per seed: fsyncs fast (inline for one write alone) or slow (always in the
background), by the kernel's AIO or by the disk thread.

A crash lands inside the shell: before an effect, or right after an append and before its
fsync (``SimIO.crash_point``), as ``Crashed``, which no handler of the shell catches.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Protocol, Sequence, TypeVar

import msgpack

from zabby.core.messages import Diff, Inform, Message, Proposal, Snap, SnapChunk, Trunc, decode, encode
from zabby.engine import Append, ClientsKept, Install, Persist, Recovered, Reload, WriteSnapshot
from zabby.engine.storage import Storage
from zabby.membership import Member, Membership
from zabby.config import ServerConfig
from zabby.shell import EffectExecutor
from zabby.sim.checkers import Checker, Violation
from zabby.sim.fs import SimFS
from zabby.sim.network import Network
from zabby.sim.options import SimOptions
from zabby.storage.files import DiskFailure, DiskFull, fsync
from zabby.storage.datadir import RecoveryError
from zabby.storage.snapshot import CorruptSnapshotError, SnapshotWriter, read_snapshot
from zabby.storage.txnlog import CorruptLogError
from zabby.tree.datatree import records_digest
from zabby.tree.txns import Txn

T = TypeVar("T")
TICK_MS = 50  # one simulator tick is one core tick of a server
STORAGE_ERRORS = (DiskFull, DiskFailure, CorruptLogError, CorruptSnapshotError, RecoveryError)  # what a fault may raise
SNAP_CHUNK_RECORDS = 8  # small: a SNAP crosses the network as several messages
SLOW_FSYNC_S = 0.05  # past the shell's FSYNC_INLINE_S_MAX: never inline once one was timed
EFFECTS_PER_DRAIN_MAX = 10_000  # a work loop that never ends is an engine bug, not a long run


def _appends(effect: Any) -> bool:
    return (isinstance(effect, Append) and bool(effect.txns)) or (isinstance(effect, Persist) and bool(effect.append))


class Node(Protocol):
    """What the I/O reaches of its simulated server (``zabby.sim.cluster.Node``)."""

    sid: int
    config: ServerConfig
    fs: SimFS
    storage: SimStorage
    executor: EffectExecutor
    io: SimIO
    alive: bool
    crash_armed: bool
    membership: Membership | None
    writing: tuple[int, WriteSnapshot, SnapshotWriter] | None
    tree_zxid: int
    tree_chain: int

    @property
    def faulted(self) -> bool: ...


class Cluster(Protocol):
    """What the I/O reaches of the simulated world (``zabby.sim.cluster.Cluster``)."""

    now: int
    rng: random.Random
    options: SimOptions
    checker: Checker
    network: Network
    stats: dict[str, int]
    trace: Callable[[str], None] | None
    nodes: dict[int, Any]
    on_clients_closed: Callable[[Any, ClientsKept], None]

    def log(self, text: str) -> None: ...

    def crash(self, node: Any, *, in_ready: bool = False) -> None: ...

    def check_step(self, node: Any) -> None: ...

    def check_txn_stream(self, src: int, dst: int, message: Proposal | Inform) -> None: ...

    def recover(self, node: Any, *, snapshot_wanted: bool, at_start: bool = False) -> Recovered: ...


class Crashed(BaseException):
    """The simulated server crashed here: unwinds the shell (whose handlers catch Exception)."""


@dataclass(slots=True)
class Sleep:
    """What a suspended peer task waits for: the tick it resumes at."""

    tick: int

    def __await__(self) -> Generator[Sleep, None, None]:
        yield self


class SimDigest:
    """The digest child of a SNAP being staged: the stream's bytes, digested at the end; or,
    drawn per SNAP, a child that failed (the engine then computes the tree's digest)."""

    def __init__(self, fails: bool) -> None:
        self.fails = fails
        self.parts: list[bytes] = []

    def feed(self, encoded: bytes | memoryview) -> None:
        self.parts.append(bytes(encoded))

    def abandon(self) -> None:
        self.parts = []

    def result(self) -> int | None:
        if self.fails:
            return None
        unpacker = msgpack.Unpacker(raw=False, use_list=False)
        unpacker.feed(b"".join(self.parts))
        return records_digest(unpacker)


class SimStorage(Storage):
    """The server's storage over the simulated file system, watched: the checkers see what is
    logged and truncated, and an armed crash may land right after an append."""

    def __init__(self, node: Node, cluster: Cluster, segment_bytes_max: int) -> None:
        super().__init__(node.config, fs=node.fs, segment_bytes_max=segment_bytes_max)
        self.node, self.cluster = node, cluster
        self.fsync_s = SLOW_FSYNC_S if cluster.options.sync_in_background else 0.0
        self.disk_time_s = 0.0  # the simulated time fsyncs took (the shell times them)

    def append(self, txns: Sequence[Txn]) -> None:
        super().append(txns)
        if txns:
            self.cluster.checker.on_logged(list(txns))
            self.node.io.crash_point(between_append_and_sync=True)

    def sync(self) -> None:
        super().sync()
        self.disk_time_s += self.fsync_s

    def truncate_after(self, zxid: int) -> None:
        node, cluster = self.node, self.cluster
        snapshot_zxid = self.datadir.newest_snapshot_zxid()
        if zxid < snapshot_zxid:
            raise Violation(f"server {node.sid}: TRUNC to 0x{zxid:x} is below its snapshot at 0x{snapshot_zxid:x}")
        cluster.stats["truncs"] += 1
        cluster.log(f"server {node.sid} truncates its log after 0x{zxid:x} (log at 0x{self.log.last_zxid:x})")
        try:
            cut = self.logged_after(zxid)
        except CorruptLogError as exc:  # a flipped bit: the truncation reads it too, and fails as it does
            node.io.expect_fault(exc)
            cut = []
        cluster.checker.on_truncate(node.sid, cut)
        super().truncate_after(zxid)


class SimIO:
    """One simulated server's world, as its shell sees it."""

    def __init__(self, cluster: Cluster, node: Node) -> None:
        self.cluster, self.node = cluster, node
        self.effects = 0  # carried out since the cluster's drain began: bounded, or the work never settles

    # ----------------------------------------------------------------- crashes and faults
    def crash_point(self, *, between_append_and_sync: bool = False) -> None:
        """An armed crash lands here half the time (``Crashed``)."""
        node, cluster = self.node, self.cluster
        if node.crash_armed and node.alive and cluster.rng.random() < 0.5:
            node.crash_armed = False
            cluster.crash(node, in_ready=True)
            raise Crashed(f"server {node.sid}{' between an append and its fsync' if between_append_and_sync else ''}")

    def expect_fault(self, exc: BaseException) -> None:
        if not self.node.faulted:
            raise Violation(f"server {self.node.sid}: its storage failed with no fault injected: {exc}") from exc

    watches_effects = True

    def before_effect(self, effect: Any) -> None:
        self.effects += 1
        if self.effects > EFFECTS_PER_DRAIN_MAX:
            raise Violation(f"server {self.node.sid}: the engine's work does not settle")
        self.cluster.check_step(self.node)
        if not _appends(effect):  # those crash half the time right after their append, the interesting spot
            self.crash_point()

    def failed(self, exc: Exception) -> None:
        """A storage error follows an injected fault; anything else is a finding."""
        if isinstance(exc, Violation):
            raise exc
        if not isinstance(exc, STORAGE_ERRORS):
            raise Violation(f"server {self.node.sid}: carrying out an effect raised {exc!r}") from exc
        self.expect_fault(exc)

    def flush(self) -> None:
        pass

    def wake(self) -> None:
        pass  # the cluster drains a server after each input

    def settled(self, wake: bool) -> None:
        pass  # the cluster's drain goes on while the engine has work

    # ----------------------------------------------------------------- the network
    def send(self, sid: int, message: Message) -> None:
        cluster, node = self.cluster, self.node
        if sid not in cluster.nodes:  # a forged sender's (zabby.sim.forge): nobody there
            return
        cluster.network.send(cluster.now, node.sid, sid, message)
        if message.__class__ is Proposal or message.__class__ is Inform:
            cluster.check_txn_stream(node.sid, sid, message)
        if cluster.trace is not None and isinstance(message, (Diff, Trunc, Snap)):
            cluster.log(f"server {node.sid} -> {sid}: {message} (log at 0x{node.storage.log.last_zxid:x})")

    def send_image(self, sid: int, message: Snap, image: Any) -> None:
        """The image as SnapChunk messages, through the same faulty network."""
        cluster, node = self.cluster, self.node
        if sid not in cluster.nodes:
            return
        records = image
        if records[0][1] != message.zxid:
            raise Violation(f"server {node.sid} sends a SNAP at 0x{message.zxid:x} of a tree at 0x{records[0][1]:x}")
        for start in range(0, len(records), SNAP_CHUNK_RECORDS):
            last = start + SNAP_CHUNK_RECORDS >= len(records)
            chunk = SnapChunk(records=records[start:start + SNAP_CHUNK_RECORDS], last=last)
            cluster.network.send(cluster.now, node.sid, sid, decode(encode(chunk)))  # as it crosses the wire: its records' bytes kept

    def flush_links(self) -> None:
        pass

    def drop_link(self, sid: int) -> None:
        self.cluster.network.close(self.cluster.now, self.node.sid, sid)

    def close_clients(self, keep: ClientsKept) -> None:
        self.cluster.on_clients_closed(self.node, keep)

    def reach(self, members: tuple[Member, ...]) -> None:
        pass  # every simulated server reaches every other by its id

    async def record_membership(self, membership: Membership) -> None:
        node = self.node
        self.cluster.checker.on_membership(node.sid, membership)
        node.membership = membership
        self.cluster.log(f"server {node.sid} records membership {membership.version:x}: "
                         f"voters {sorted(membership.voters)} observers {sorted(membership.observers)}")  # fmt: skip

    # ----------------------------------------------------------------- the disk
    async def on_disk(self, call: Callable[..., T], *args: Any) -> T:
        return call(*args)

    async def kernel_fdatasync(self) -> bool:
        """Drawn per seed: the kernel's fdatasync of the segment, or the disk thread's sync."""
        storage = self.node.storage
        point = storage.log.segment_to_sync() if self.cluster.options.kernel_sync else None
        if point is None:
            return False
        fd, writes = point
        fsync(fd, "the txn log's segment", data_only=True, fs=self.node.fs)
        storage.log.segment_synced(writes)
        storage.disk_time_s += storage.fsync_s
        return True

    def perf_s(self) -> float:
        return self.node.storage.disk_time_s

    def want_sync(self) -> None:
        pass  # done at a later tick (``Cluster.tick``), or before an effect that must wait for it

    async def background_sync_progress(self) -> None:
        await self.node.executor.sync_in_background()  # what the server waits for, done now

    async def reload(self, effect: Reload) -> Recovered:
        self.cluster.stats["reloads"] += 1
        return self.cluster.recover(self.node, snapshot_wanted=effect.snapshot_wanted)

    def write_snapshot(self, effect: WriteSnapshot) -> None:
        """At once, or in the background as the server's child writes it: its file is written
        now and finished some ticks later, unless the server crashes first (the engine skips
        the snapshots due meanwhile, and the start-up removes the ``.tmp`` file)."""
        node, cluster = self.node, self.cluster
        if node.writing is not None:
            raise Violation(f"server {node.sid} asked for a snapshot at 0x{effect.zxid:x} while writing one at 0x{node.writing[1].zxid:x}")
        try:
            writer = SnapshotWriter(node.storage.snap_dir, effect.zxid, fs=node.fs)
            writer.add(effect.image)
        except STORAGE_ERRORS as exc:  # the child could not write it: its exit status says so
            self.expect_fault(exc)
            node.executor.snapshot_written(effect.zxid, False, 0.0)
            return
        if cluster.options.snapshot_ticks_max:
            node.writing = (cluster.now + cluster.rng.randint(1, cluster.options.snapshot_ticks_max), effect, writer)
        else:
            self.snapshot_done(effect, writer)

    def snapshot_done(self, effect: WriteSnapshot, writer: SnapshotWriter) -> None:
        node = self.node
        node.writing = None
        try:
            writer.finish()
        except STORAGE_ERRORS as exc:  # the child's exit status says it failed
            self.expect_fault(exc)
            writer.discard()
            node.executor.snapshot_written(effect.zxid, False, 0.0)
            return
        self.cluster.stats["snapshots"] += 1
        node.executor.snapshot_written(effect.zxid, True, 0.0)

    def digest_child(self, sid: int) -> SimDigest:
        return SimDigest(fails=self.cluster.rng.random() < 0.5)

    async def digest_result(self, digest: SimDigest) -> int | None:
        return digest.result()

    def installed(self, effect: Install, path: Path) -> None:
        """What went to disk is the stream as it came; it must be the tree the engine built from it."""
        node, cluster = self.node, self.cluster
        _, stored = read_snapshot(path, fs=node.fs)
        if tuple(stored) != tuple(effect.tree.records()):
            raise Violation(f"server {node.sid} installed a SNAP at 0x{effect.zxid:x} whose file is not the tree it built")
        # The log above the snapshot went too, committed txns included: the leader resends
        # them (its pending txns) right after.  A crash in between is a window the final
        # checks watch; it is not flagged here.
        node.tree_zxid, node.tree_chain = effect.zxid, cluster.checker.chain_hash(effect.zxid)
        cluster.stats["snaps"] += 1
        cluster.log(f"server {node.sid} installs a snapshot at 0x{effect.zxid:x}")

    # ----------------------------------------------------------------- time and the process
    async def sleep_until(self, until_ms: int) -> None:
        await Sleep(-(-until_ms // TICK_MS))

    def fail_stop(self, reason: str) -> NoReturn:
        node, cluster = self.node, self.cluster
        if not node.faulted:
            raise Violation(f"server {node.sid} failed its disk with no fault injected: {reason}")
        cluster.stats["fail_stops"] += 1
        cluster.log(f"server {node.sid} fail-stops: {reason}")
        cluster.crash(node)  # the process exits (74); its supervisor starts it again
        raise Crashed(f"server {node.sid} fail-stops")
