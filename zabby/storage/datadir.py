"""The data directories: layout, recovery (newest valid snapshot + log replay) and retention.

Layout (ZooKeeper's)::

    <data_dir>/myid                       decimal server id (optional, quorum mode)
    <data_dir>/version-2/snapshot.<hex16>  snapshots (see snapshot.py)
    <data_dir>/version-2/acceptedEpoch     epochs (see epochs.py)
    <data_dir>/version-2/currentEpoch
    <log_dir>/version-2/log.<hex16>        txn log segments (see txnlog.py); log_dir = data_dir
                                           unless dataLogDir is set

Theory of operation: ``recover`` loads the newest snapshot that passes its checks (a damaged
one is logged and skipped), then replays every logged txn above the snapshot's zxid.  The log
must *cover* the snapshot: its oldest record must be the snapshot's successor or older, else
txns in between are lost and recovery refuses to start.  Zxids are ``(epoch << 32) | counter``
with counters starting at 1 in each epoch, so the successor of ``z`` is ``z + 1`` or the first
zxid of a later epoch; a log starting at such a zxid counts as covering ``z`` (a log purged
exactly at an epoch boundary is therefore not detected).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from zabby.errors import InvariantError
from zabby.storage.epochs import ACCEPTED_EPOCH, CURRENT_EPOCH
from zabby.storage.files import dir_bytes, fsync_dir, write_atomically
from zabby.storage.fs import OS_FS, FileSystem
from zabby.storage.snapshot import (
    CorruptSnapshotError, SnapshotWriter, list_snapshots, list_unfinished_snapshots, looks_complete, read_snapshot,
    write_snapshot,
)  # fmt: skip
from zabby.storage.txnlog import CorruptLogError, TxnLog
from zabby.tree.datatree import DataTree, Event, TreeBuilder
from zabby.tree.txns import decode_txn, zxid_counter, zxid_epoch, zxid_hex

logger = logging.getLogger("zabby.storage")

VERSION_DIR = "version-2"
MYID = "myid"
REPAIR_MARKER = "repairing"  # in the snapshot dir while a member rebuilds its damaged history from its leader
QUARANTINE_DIR = "damaged"  # where a repair moves the damaged snapshots and log segments
SNAP_RETAIN_COUNT_MIN = 3


class RecoveryError(Exception):
    """The data on disk cannot be turned back into the tree without losing txns."""


def log_covers(log_first_zxid: int, snapshot_zxid: int, *, newest: bool = True) -> bool:
    """Does a log whose oldest record is ``log_first_zxid`` hold every txn after the snapshot?

    A log that starts a later epoch at its first counter continues the snapshot when the
    snapshot is the newest one here: it was taken at the end of the history the log goes on
    from (the log rolls at each snapshot, and a SNAP's snapshot starts a new log).  An older
    snapshot, used because the newer ones are damaged, proves nothing of the kind: the log
    may have been cut at a newer one (a SNAP replaces the log, and purge keeps only what the
    snapshots it keeps need), so the log must reach back to it."""
    if log_first_zxid == 0 or log_first_zxid <= snapshot_zxid + 1:
        return True
    if zxid_epoch(log_first_zxid) == 1 and zxid_counter(log_first_zxid) == 1:
        return True  # the first txn of the first epoch: the whole history is here
    return newest and zxid_epoch(log_first_zxid) > zxid_epoch(snapshot_zxid) and zxid_counter(log_first_zxid) == 1


class DigestBeside(Protocol):
    """A snapshot's tree digest being computed elsewhere (``DataDir.recover``)."""

    def result(self) -> int | None: ...  # None: it could not be computed there

    def abandon(self) -> None: ...


def _load_tree(path: Path, records: Iterator[tuple[Any, ...]], digest_beside: Callable[[Path], DigestBeside] | None) -> DataTree:
    beside = None
    if digest_beside is not None:
        try:
            beside = digest_beside(path)
        except OSError as error:  # no fork: the build computes it
            logger.warning("the digest of snapshot %s is computed in the load: %s", path, error)
    try:
        builder = TreeBuilder(digest=beside is None)
        builder.add(records)
        tree = builder.finish()
        for extra in records:  # drain: checks the record count and the file's end
            raise CorruptSnapshotError(f"snapshot {path}: records after the tree ({extra[:1]!r}…)")
        if beside is not None:
            digest = beside.result()
            if digest is None:
                logger.warning("the digest of snapshot %s was not computed beside the load: computing it now", path)
            tree.adopt_digest(digest)
        return tree
    finally:
        if beside is not None:
            beside.abandon()


@dataclass(frozen=True, slots=True)
class Recovered:
    snapshot_zxid: int = 0  # the snapshot recovery started from (0: none, an empty tree)
    snap_load_ms: float = 0.0  # reading the newest snapshot
    txns_loaded: int = 0  # txns replayed from the log after it
    txns_load_ms: float = 0.0


class DataDir:
    """The server's durable state in ``data_dir`` (and ``data_log_dir`` for the txn log).

    Args:
        data_dir: ZooKeeper's ``dataDir``.
        data_log_dir: ZooKeeper's ``dataLogDir``; the log goes to ``data_dir`` if None.
        snap_retain_count: snapshots kept by ``purge`` (at least 3, as ZooKeeper).
        log_reserve_bytes: space the txn log keeps allocated ahead (``TxnLog.reserve_bytes``).
        fs: the file system (``zabby.storage.fs``): the real one, or the simulator's.
    """

    def __init__(self, data_dir: Path, data_log_dir: Path | None = None, *, snap_retain_count: int = 3,
                 log_reserve_bytes: int = 0, fs: FileSystem = OS_FS) -> None:  # fmt: skip
        if snap_retain_count < SNAP_RETAIN_COUNT_MIN:
            logger.warning("snap_retain_count %d raised to the minimum, %d", snap_retain_count, SNAP_RETAIN_COUNT_MIN)
            snap_retain_count = SNAP_RETAIN_COUNT_MIN
        self.fs = fs
        self.data_dir = Path(data_dir)
        self.snap_dir = self.data_dir / VERSION_DIR
        self.log_dir = Path(data_log_dir if data_log_dir is not None else data_dir) / VERSION_DIR
        self.snap_retain_count = snap_retain_count
        self.log_reserve_bytes = log_reserve_bytes
        self.accepted_epoch_path = self.snap_dir / ACCEPTED_EPOCH
        self.current_epoch_path = self.snap_dir / CURRENT_EPOCH
        self.log: TxnLog | None = None
        self.recovered = Recovered()  # what ``recover`` took (mntr's startup_* figures)
        fs.makedirs(self.snap_dir)
        fs.makedirs(self.log_dir)

    # ----------------------------------------------------------------- recovery
    def recover(self, *, segment_bytes_max: int | None = None, digest_beside: Callable[[Path], DigestBeside] | None = None,
                on_replayed: Callable[[int, list[Event]], None] | None = None) -> tuple[DataTree, TxnLog]:  # fmt: skip
        """Rebuild the tree from the newest valid snapshot plus the log; open the log.

        ``digest_beside(path)`` starts computing the tree digest of the snapshot ``path``
        elsewhere (``zabby.server.process.forks.DigestChild``), while this builds the tree without.
        ``on_replayed(zxid, events)``: told of each txn of the log replayed onto the snapshot
        that made watch events, with them (the watch history's start).

        Returns:
            the tree, and the opened log positioned for appends (also kept as ``self.log``).

        Raises:
            RecoveryError: the log does not reach back to the snapshot used (or to the start
                of history when no snapshot is usable while some exist).
            CorruptLogError: see ``TxnLog.open``.
        """
        started = time.monotonic()
        tree, snapshot_zxid, snapshot_count, skipped = self._load_newest_snapshot(digest_beside)
        loaded = time.monotonic()
        sizes = {} if segment_bytes_max is None else {"segment_bytes_max": segment_bytes_max}
        log = TxnLog(self.log_dir, reserve_bytes=self.log_reserve_bytes, fs=self.fs, **sizes)
        log.open(check_from=snapshot_zxid)
        try:
            self._check_coverage(log, snapshot_zxid, snapshot_count, skipped)
            replayed = self._replay(tree, log, snapshot_zxid, on_replayed)
        except BaseException:
            log.close()
            raise
        logger.info(
            "recovered %s: snapshot at zxid %s, %d txns replayed, last zxid %s, %d znodes, in %.3f s",
            self.data_dir, zxid_hex(snapshot_zxid), replayed, zxid_hex(tree.last_zxid),
            tree.node_count(), time.monotonic() - started,
        )  # fmt: skip
        self.log = log
        self.recovered = Recovered(snapshot_zxid=snapshot_zxid, snap_load_ms=(loaded - started) * 1000, txns_loaded=replayed,
                                   txns_load_ms=(time.monotonic() - loaded) * 1000)  # fmt: skip
        return tree, log

    def _load_newest_snapshot(self, digest_beside: Callable[[Path], DigestBeside] | None) -> tuple[DataTree, int, int, int]:
        """``(tree, snapshot zxid, snapshot files seen, newer ones skipped as unusable)``; an
        empty tree at 0 if none is valid."""
        snapshots = list_snapshots(self.snap_dir, fs=self.fs)
        for skipped, (zxid, path) in enumerate(snapshots):
            try:
                snapshot_zxid, records = read_snapshot(path, fs=self.fs)
                tree = _load_tree(path, records, digest_beside)
            except CorruptSnapshotError as error:
                logger.warning("skipping damaged snapshot %s: %s", path, error)
                continue
            if snapshot_zxid != zxid or tree.last_zxid != zxid:
                # not what its name promises: unusable as a base for the log, like a damaged one
                logger.warning("skipping snapshot %s: its name, header and tree disagree on the zxid "
                               "(0x%x, 0x%x, 0x%x)", path, zxid, snapshot_zxid, tree.last_zxid)  # fmt: skip
                continue
            return tree, zxid, len(snapshots), skipped
        return DataTree(), 0, len(snapshots), len(snapshots)

    def _check_coverage(self, log: TxnLog, snapshot_zxid: int, snapshot_count: int, skipped: int) -> None:
        if log_covers(log.first_zxid, snapshot_zxid, newest=skipped == 0):
            return
        if snapshot_zxid == 0 and snapshot_count > 0:
            raise RecoveryError(
                f"all {snapshot_count} snapshots in {self.snap_dir} are damaged and the txn log in "
                f"{self.log_dir} starts at zxid {zxid_hex(log.first_zxid)}, not at the first txn: "
                f"starting would lose data (restore a snapshot or resync this server from the ensemble)"
            )
        start = f"the snapshot at {zxid_hex(snapshot_zxid)}" if snapshot_zxid else "an empty tree (no snapshot)"
        newer = f" ({skipped} newer snapshots unusable)" if skipped else ""
        raise RecoveryError(
            f"the txn log in {self.log_dir} starts at zxid {zxid_hex(log.first_zxid)}, but recovery "
            f"starts from {start}{newer}: the txns in between may be missing"
        )

    @staticmethod
    def _replay(tree: DataTree, log: TxnLog, snapshot_zxid: int, on_replayed: Callable[[int, list[Event]], None] | None) -> int:
        replayed = 0
        for zxid, payload in log.read_from(snapshot_zxid):
            try:
                txn = decode_txn(payload)
            except (ValueError, TypeError) as error:  # msgpack errors, wrong arity
                raise CorruptLogError(f"log record {zxid_hex(zxid)} is not a txn: {error}") from None
            if txn.zxid != zxid:
                raise CorruptLogError(f"log record {zxid_hex(zxid)} holds a txn with zxid {zxid_hex(txn.zxid)}")
            try:
                _, events = tree.apply(txn)
            except InvariantError as error:  # the log does not continue this tree: a snapshot between them is gone
                raise RecoveryError(f"replaying {zxid_hex(zxid)} on the tree at {zxid_hex(snapshot_zxid)}: {error}: "
                                    f"the log does not continue the snapshot recovery started from") from None  # fmt: skip
            if events and on_replayed is not None:
                on_replayed(zxid, events)
            replayed += 1
        return replayed

    # ----------------------------------------------------------------- snapshots and retention
    def take_snapshot(self, tree_records: Iterable[tuple[Any, ...]], zxid: int) -> Path:
        """Write a snapshot of this server's tree at ``zxid``; the log (if open) starts a new segment."""
        path = write_snapshot(self.snap_dir, zxid, tree_records, fs=self.fs)
        if self.log is not None:
            self.log.roll()
        return path

    def stage_snapshot(self, zxid: int, sid: int) -> SnapshotWriter:
        """A writer for the leader ``sid``'s SNAP stream at ``zxid``, written as it arrives; give
        it to ``install_snapshot`` once whole (or ``discard`` it)."""
        return SnapshotWriter(self.snap_dir, zxid, tmp_tag=f".from{sid}", fs=self.fs)

    def install_snapshot(self, staged: SnapshotWriter) -> Path:
        """Zab SNAP: the leader's snapshot, written whole into ``staged``, replaces this
        server's whole history.

        The log goes: its records are in the snapshot, or were never committed, or the leader
        sends them next.  Snapshots past its zxid go too: they hold txns the leader truncated
        (see ``zabby.core.peer`` on a TRUNC below a snapshot).  The new snapshot is durable
        before anything is deleted, so a crash in between recovers one history or the other,
        and the next sync asks for a SNAP again.
        """
        zxid = staged.zxid
        path = staged.finish()
        if self.log is not None and self.log.last_zxid:
            logger.info("snapshot %s replaces the log (to %s)", path, zxid_hex(self.log.last_zxid))
            self.log.truncate_after(0)
        stale = [old for old_zxid, old in list_snapshots(self.snap_dir, fs=self.fs) if old_zxid > zxid]
        for old in stale:
            logger.warning("deleting snapshot %s: it is past the leader's snapshot at %s", old, zxid_hex(zxid))
            self.fs.unlink(old)
        if stale:
            fsync_dir(self.snap_dir, fs=self.fs)
        return path

    def remove_unfinished_snapshots(self) -> list[Path]:
        """The ``.tmp`` snapshot files a crash left (a SNAP half received, a snapshot half
        written); call it at start-up only, while no writer can be running."""
        removed = list_unfinished_snapshots(self.snap_dir, fs=self.fs)
        for path in removed:
            logger.info("removing %s, a snapshot a crash left unfinished", path)
            self.fs.unlink(path)
        return removed

    # ----------------------------------------------------------------- repair
    @property
    def repairing(self) -> bool:
        """A repair began and no leader has synced this server since (``start_repair``)."""
        return REPAIR_MARKER in self.fs.files(self.snap_dir)

    def start_repair(self, reason: str) -> None:
        """The history here is damaged (``CorruptLogError``, ``RecoveryError``): mark the repair
        durably first, then move every snapshot and log segment into ``version-2/damaged/``
        (replacing what an earlier repair left there), so the next recovery finds an empty
        tree and the leader sends this member its whole history.  The epoch files stay: a
        member never goes back to an epoch it accepted."""
        write_atomically(self.snap_dir / REPAIR_MARKER, f"{reason}\n".encode(), fs=self.fs)
        self.close()
        quarantine = self.snap_dir / QUARANTINE_DIR  # kept for a post-mortem, out of recovery's sight
        self.fs.makedirs(quarantine)
        for directory, pattern in ((self.log_dir, "log."), (self.snap_dir, "snapshot.")):
            for name in self.fs.files(directory):
                if name.startswith(pattern):
                    self.fs.replace(directory / name, quarantine / name)
            fsync_dir(directory, fs=self.fs)
        fsync_dir(quarantine, fs=self.fs)

    def end_repair(self) -> None:
        """A leader synced this server: its history is whole again."""
        self.fs.unlink(self.snap_dir / REPAIR_MARKER, missing_ok=True)
        fsync_dir(self.snap_dir, fs=self.fs)

    def newest_snapshot_zxid(self) -> int:
        """The zxid of the newest snapshot file (damaged or not), 0 if there is none."""
        snapshots = list_snapshots(self.snap_dir, fs=self.fs)
        return snapshots[0][0] if snapshots else 0

    def purge(self) -> list[Path]:
        """Keep the newest ``snap_retain_count`` complete snapshots and the log they need.

        Returns:
            every file removed (older snapshots, then log segments).
        """
        complete = [(zxid, path) for zxid, path in list_snapshots(self.snap_dir, fs=self.fs) if looks_complete(path, fs=self.fs)]
        if not complete:
            return []
        kept = complete[: self.snap_retain_count]
        oldest_kept_zxid = kept[-1][0]
        removed = []
        for zxid, path in list_snapshots(self.snap_dir, fs=self.fs):
            if zxid < oldest_kept_zxid:
                self.fs.unlink(path)
                removed.append(path)
        if self.log is not None:
            removed += self.log.purge_before(oldest_kept_zxid)
        else:
            with TxnLog(self.log_dir, fs=self.fs) as log:
                removed += log.purge_before(oldest_kept_zxid)
        return removed

    # ----------------------------------------------------------------- the rest
    def read_myid(self) -> int | None:
        """The server id in ``<data_dir>/myid``, or None if there is no such file."""
        path = self.data_dir / MYID
        try:
            text = path.read_text(encoding="ascii").strip()
        except FileNotFoundError:
            return None
        if not text.isdigit():
            raise ValueError(f"{path}: expected the server id as a decimal number, found {text[:40]!r}")
        return int(text)

    def data_dir_bytes(self) -> int:
        """Bytes in the snapshot directory (the ``dirs`` four-letter word's ``datadir_size``)."""
        return dir_bytes(self.snap_dir)

    def log_dir_bytes(self) -> int:
        """Bytes in the log directory (``logdir_size``)."""
        return dir_bytes(self.log_dir)

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None
