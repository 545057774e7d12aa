"""``zookeeper import ZK_DATA_DIR --data-dir DIR --myid N``: a ZooKeeper data directory made
into a zabby one, exactly: the same last zxid and epochs, every znode with the same data (null
kept null), ACL and Stat, every session with its timeout and the password ZooKeeper gave it.

Theory of operation, step by step as ZooKeeper's own restart goes (``FileTxnSnapLog.restore``):

1. the newest snapshot that reads whole (``zabby.storage.zk_files``): one that does not is
   reported, with the file and the offset, and the next older one is tried, as ZooKeeper does;
2. the txn logs from the snapshot's zxid on, replayed as ZooKeeper replays them
   (``zabby.tree.zk_replay``).  Where ZooKeeper would replay on past a hole, this refuses: a
   txn that does not follow the one before (``zabby.tree.txns.follows``) is a gap, named with
   both files and the offset.  A torn record ends its file, as in ZooKeeper; if it is the
   last file's, it was never acknowledged and is dropped (and reported);
3. the tree digest ZooKeeper logged with each txn (3.6+) is compared with the replayed
   tree's, once the fuzzy part of the snapshot is behind: a difference is refused;
4. the ephemerals of sessions no longer in the table go, as ZooKeeper's ``loadData`` deletes
   them; ``/zookeeper/config`` is left as a fresh tree has it (the new ensemble's membership
   is its own configuration's, as in ``snapshot restore``);
5. the zabby data dir is written into a hidden sibling and renamed into place only when whole
   (snapshot, epochs, myid), so a failure leaves nothing half-written behind.

A quota's ``zookeeper_stats`` node is written as the replay leaves it; every reader of a zabby
snapshot recounts it at load, as ZooKeeper does at its own (``DataTree.setupQuota``).
"""

from __future__ import annotations

import gc
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

from zabby.ops.errors import DataError, UsageError
from zabby.ops.restore import SERVER_ID_MAX
from zabby.tree.zk_replay import ZkTree
from zabby.server.process.children import DigestChild
from zabby.storage.datadir import MYID, VERSION_DIR
from zabby.storage.epochs import ACCEPTED_EPOCH, CURRENT_EPOCH, write_epoch
from zabby.storage.files import fsync_dir, write_atomically
from zabby.storage.snapshot import write_snapshot
from zabby.storage.zk_files import (
    SNAPSHOT_PREFIX, LogFile, ZkFileError, ZkSnapshot, ZkUnsupportedError, log_files, logs_from, read_epochs, read_snapshot,
    snapshot_candidates, zxid_of_name,
)  # fmt: skip
from zabby.tree.datatree import ZOOKEEPER_CONFIG
from zabby.tree.txns import follows, zxid_epoch, zxid_hex
from zabby.wire.zk_snapshot import DATA, DIGEST_MASK, MTIME, MZXID, VERSION, session_password
from zabby.wire.zk_txn import DIGEST_VERSION, ZkTxn


@dataclass(slots=True)
class ImportReport:
    snapshot: Path | None = None
    snapshot_zxid: int = 0
    skipped: list[str] = field(default_factory=list)  # snapshots not used, and why
    logs: list[str] = field(default_factory=list)  # the log files read
    txns: int = 0  # replayed
    first_txn: int = 0
    last_zxid: int = 0
    torn: str | None = None  # a torn record at the end of the last log, dropped
    digests_matched: int = 0
    digests_differed: int = 0  # inside the snapshot's fuzzy window (ZooKeeper logs those too)
    digest: int | None = None  # ZooKeeper's digest of the result (None: the data has none)
    dead_ephemerals: int = 0
    znodes: int = 0
    sessions: int = 0
    accepted_epoch: int = 0
    current_epoch: int = 0
    target: Path | None = None
    seconds: dict[str, float] = field(default_factory=dict)  # load, replay, write


def version_dir(folder: Path) -> Path:
    """``folder/version-2``, or ``folder`` itself if it is a version-2 folder."""
    if not folder.is_dir():
        raise UsageError(f"{folder}: no such directory")
    inner = folder / VERSION_DIR
    return inner if inner.is_dir() else folder


# ----------------------------------------------------------------------------- 1. the snapshot
def load_snapshot(snap_dir: Path, log_dir: Path, report: ImportReport) -> ZkSnapshot | None:
    """The newest snapshot that reads whole, as ``FileSnap.deserialize`` picks it; the ones
    passed over go into ``report.skipped``.  None when there is no snapshot at all and no log.

    Raises:
        DataError: no snapshot reads whole while some exist, or logs exist without one.
    """
    named = sorted(((zxid_of_name(p.name, SNAPSHOT_PREFIX), p) for p in snap_dir.iterdir() if p.name.startswith(SNAPSHOT_PREFIX + ".")),
                   key=lambda entry: -1 if entry[0] is None else entry[0], reverse=True)  # fmt: skip
    candidates = {path for _, path in snapshot_candidates(snap_dir)}
    for _, path in named:
        if path not in candidates:
            report.skipped.append(f"{path}: not a whole snapshot (no seal at its end): ZooKeeper passes over it too")
            continue
        try:
            return read_snapshot(path, digest_beside=lambda compute: DigestChild(compute=compute))
        except ZkUnsupportedError as exc:
            raise DataError(str(exc)) from None  # ZooKeeper would load it: passing over it would lose txns
        except ZkFileError as exc:
            report.skipped.append(f"{exc}; ZooKeeper passes over it too and tries an older one")
    if named or log_files(log_dir):
        why = "; ".join(report.skipped) or "no snapshot file"
        raise DataError(f"no snapshot in {snap_dir} reads whole ({why}), and the txn logs in {log_dir} alone do not hold the "
                        f"whole tree: ZooKeeper refuses this directory too (\"No snapshot found, but there are log entries\")")  # fmt: skip
    return None


# ----------------------------------------------------------------------------- 2, 3. the logs
class Replay:
    """The logs replayed onto a snapshot's tree, checked for gaps and against ZooKeeper's digests.

    Digests are compared where ZooKeeper compares them: the snapshot's once the replay reaches
    its zxid, then each txn's.  ZooKeeper applies a txn to its tree before it records the txn's
    digest, so a snapshot may hold a txn past the digest written after it, and the digests of
    the txns up to that one differ (ZooKeeper logs a mismatch for them too).  A difference is
    refused only if it is still there at the last comparison, after the whole log."""

    def __init__(self, tree: ZkTree, snapshot: ZkSnapshot, report: ImportReport) -> None:
        self.tree, self.report = tree, report
        self.prev_zxid, self.prev_where = snapshot.zxid, f"the snapshot {snapshot.path}"
        self.mismatch: str | None = None  # the last comparison's difference, if any
        # DataTree.digestFromLoadedSnapshot: a fuzzy snapshot's digest waits for its zxid
        self.fuzzy = snapshot.digest if snapshot.digest is not None and snapshot.digest[0] >= snapshot.zxid else None
        if self.fuzzy is not None and self.fuzzy[0] == snapshot.zxid:
            self._compare(self.fuzzy[1], self.fuzzy[2], f"the snapshot {snapshot.path}")
            self.fuzzy = None

    def run(self, log_dir: Path) -> None:
        start = self.tree.last_zxid + 1
        for _, path in logs_from(log_dir, start):
            log = LogFile(path)
            read = 0
            for record in log.records():
                if record.txn.zxid < start and not self.report.txns:
                    continue  # before the snapshot: ZooKeeper's iterator fast-forwards past it
                self._apply(record.txn, f"{path} at offset {record.offset}")
                read += 1
            if read:
                self.report.logs.append(path.name)
            if log.torn:
                self.report.torn = f"{path} at offset {log.end_offset}: {log.end}"
                self.prev_where = f"{path} (which ends at offset {log.end_offset} with {log.end})"
        if self.mismatch is not None:
            raise DataError(f"{self.mismatch}: the conversion would not be exact")

    def _apply(self, txn: ZkTxn, where: str) -> None:
        if not follows(self.prev_zxid, txn.zxid):
            what = "a gap in the txn logs" if txn.zxid > self.prev_zxid else "txn logs that overlap"
            raise DataError(f"{what}: after txn {zxid_hex(self.prev_zxid)} ({self.prev_where}) comes {zxid_hex(txn.zxid)} "
                            f"({where}): the txns in between are missing; refusing to convert a tree ZooKeeper would "
                            f"rebuild without them")  # fmt: skip
        tree, report = self.tree, self.report
        tree.apply(txn)
        report.txns += 1
        report.first_txn = report.first_txn or txn.zxid
        self.prev_zxid, self.prev_where = txn.zxid, where
        if self.fuzzy is not None and txn.zxid == self.fuzzy[0]:
            self._compare(self.fuzzy[1], self.fuzzy[2], f"the snapshot's digest at txn {zxid_hex(txn.zxid)}")
            self.fuzzy = None
        if self.fuzzy is None and txn.digest is not None:
            self._compare(txn.digest[0], txn.digest[1], f"txn {zxid_hex(txn.zxid)} ({where})")

    def _compare(self, version: int, expected: int, where: str) -> None:
        actual, expected = self.tree.digest, expected & DIGEST_MASK
        if version != DIGEST_VERSION or actual is None:
            return
        if actual == expected:
            self.report.digests_matched += 1
            self.mismatch = None
            return
        self.report.digests_differed += 1
        self.mismatch = f"digest mismatch after {where}: ZooKeeper logged 0x{expected:016x}, the replayed tree has 0x{actual:016x}"


# ----------------------------------------------------------------------------- 4, 5. the zabby dir
def _zabby_records(tree: ZkTree) -> Iterator[Any]:
    nodes = list(tree.reachable()) if tree.detached else tree.nodes.values()
    sessions = sorted(tree.sessions.items())
    header = ("tree", tree.last_zxid, len(sessions), len(nodes))
    return chain((header,), (("session", sid, timeout, session_password(sid)) for sid, timeout in sessions), nodes)


def _reset_config(tree: ZkTree) -> None:
    node = tree.nodes.get(ZOOKEEPER_CONFIG)
    if node is not None:
        node[DATA], node[VERSION], node[MZXID], node[MTIME] = b"", 0, 0, 0


def _in_use(target: Path, myid: int | None) -> bool:
    """Does ``target`` hold anything but the same server's ``myid`` (which an operator writes
    first, and the new data dir holds again)?"""
    if not target.is_dir():
        return False
    names = [entry.name for entry in target.iterdir()]
    if names == [MYID] and myid is not None:
        return (target / MYID).read_text(errors="replace").strip() != str(myid)
    return bool(names)


def check_target(target: Path, myid: int | None, force: bool) -> None:
    """``target`` may be written whole: absent or empty (but for the same ``myid``) or
    ``force``, its parent there, the id a server's."""
    if myid is not None and not 1 <= myid <= SERVER_ID_MAX:
        raise UsageError(f"--myid {myid}: a server id is between 1 and {SERVER_ID_MAX}")
    if target.exists() and not target.is_dir():
        raise UsageError(f"{target}: not a directory")
    if _in_use(target, myid) and not force:
        raise UsageError(f"{target} is not empty: a whole new data dir is written there (--force moves the old one aside)")
    if not target.parent.is_dir():
        raise UsageError(f"{target.parent}: no such directory")


def install(staged: Path, target: Path, label: str, myid: int | None) -> Path | None:
    """Rename the whole ``staged`` folder to ``target``; an old ``target`` in use is moved aside
    first, to ``<target>.<label>-<time>`` (returned)."""
    aside = None
    if _in_use(target, myid):
        aside = target.with_name(f"{target.name}.{label}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
        target.rename(aside)
    elif target.is_dir():
        (target / MYID).unlink(missing_ok=True)
        target.rmdir()
    staged.rename(target)
    fsync_dir(target.parent)
    return aside


@contextmanager
def written_whole(target: Path, action: str, myid: int | None) -> Iterator[Path]:
    """A hidden sibling of ``target`` for the block to write a data dir into (its ``version-2``
    made); when the block ends, ``myid`` is added, everything made durable and the folder
    renamed to ``target`` (what was there in use moved aside, ``<target>.before-<action>-<time>``);
    if the block raises, the sibling is removed."""
    staged = target.with_name(f".{target.name}.{action}")
    shutil.rmtree(staged, ignore_errors=True)  # what a failed run left
    try:
        (staged / VERSION_DIR).mkdir(parents=True)
        yield staged
        if myid is not None:
            write_atomically(staged / MYID, f"{myid}\n".encode())
        fsync_dir(staged)
        install(staged, target, f"before-{action}", myid)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise


def write_zabby_dir(tree: ZkTree, data_dir: Path, myid: int, epochs: tuple[int, int]) -> None:
    with written_whole(data_dir, "import", myid) as staged:
        snap_dir = staged / VERSION_DIR
        write_snapshot(snap_dir, tree.last_zxid, _zabby_records(tree))
        write_epoch(snap_dir / ACCEPTED_EPOCH, epochs[0])
        write_epoch(snap_dir / CURRENT_EPOCH, epochs[1])


def _epochs(snap_dir: Path, last_zxid: int) -> tuple[int, int]:
    """ZooKeeper's epochs, or the last zxid's epoch where it wrote none (standalone); never
    below the last zxid's epoch, which zabby's core requires."""
    try:
        accepted, current = read_epochs(snap_dir)
    except ZkFileError as exc:
        raise DataError(str(exc)) from None
    floor = zxid_epoch(last_zxid)
    current = max(floor, current if current is not None else floor)
    return max(current, accepted if accepted is not None else current), current


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off: a million new node lists would set off its full
    passes again and again (a third of a conversion's time), and a conversion makes no cycles."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def import_zookeeper(zk_dir: Path, data_dir: Path, myid: int, *, zk_log_dir: Path | None = None, force: bool = False) -> ImportReport:
    """Convert ZooKeeper's data in ``zk_dir`` (its logs in ``zk_log_dir``, if apart) into a
    zabby data dir at ``data_dir`` for server ``myid``.

    Raises:
        UsageError: a missing folder, a bad id, a ``data_dir`` in use (without ``force``).
        DataError: damage ZooKeeper would not start from either, a gap in the logs, or a
            replay whose digest differs from ZooKeeper's (nothing is written then).
    """
    snap_dir, log_dir = version_dir(zk_dir), version_dir(zk_log_dir or zk_dir)
    check_target(data_dir, myid, force)
    with collector_paused():
        return _convert(snap_dir, log_dir, data_dir, myid)


def _convert(snap_dir: Path, log_dir: Path, data_dir: Path, myid: int) -> ImportReport:
    report, started = ImportReport(), time.monotonic()
    snapshot = load_snapshot(snap_dir, log_dir, report)
    if snapshot is None:
        raise DataError(f"{snap_dir}: no ZooKeeper snapshot or txn log here (is it ZooKeeper's dataDir?)")
    report.snapshot, report.snapshot_zxid = snapshot.path, snapshot.zxid
    tree = ZkTree(snapshot.nodes, dict(snapshot.sessions), snapshot.zxid, snapshot.digest_sum if snapshot.digest_written else None,
                  snapshot.owned)  # fmt: skip
    loaded = time.monotonic()
    try:
        Replay(tree, snapshot, report).run(log_dir)
    except ZkFileError as exc:
        raise DataError(f"{exc}: ZooKeeper does not start from this directory either") from None
    report.digest, report.last_zxid = tree.digest, tree.last_zxid
    report.dead_ephemerals = tree.delete_dead_ephemerals()
    _reset_config(tree)
    report.accepted_epoch, report.current_epoch = _epochs(snap_dir, tree.last_zxid)
    replayed = time.monotonic()
    write_zabby_dir(tree, data_dir, myid, (report.accepted_epoch, report.current_epoch))
    report.znodes = len(tree.nodes) - len(tree.detached)
    report.sessions, report.target = len(tree.sessions), data_dir
    report.seconds = {"load": loaded - started, "replay": replayed - loaded, "write": time.monotonic() - replayed}
    return report


def summary(report: ImportReport) -> list[str]:
    """What an operator reads after an import, one fact a line."""
    lines = [f"skipped {why}" for why in report.skipped]
    lines.append(f"snapshot {report.snapshot} (zxid {zxid_hex(report.snapshot_zxid)})")
    if report.txns:
        lines.append(f"replayed {report.txns} txns {zxid_hex(report.first_txn)}..{zxid_hex(report.last_zxid)} from {', '.join(report.logs)}")
    if report.torn:
        lines.append(f"dropped a torn record at the end of the log: {report.torn} (never acknowledged; ZooKeeper drops it too)")
    if report.digest is not None:
        fuzzy = f" (and differed {report.digests_differed} times inside the snapshot's fuzzy window, as on ZooKeeper)" if report.digests_differed else ""
        lines.append(f"digest 0x{report.digest:016x} at {zxid_hex(report.last_zxid)}: matched ZooKeeper's {report.digests_matched} times{fuzzy}")
    if report.dead_ephemerals:
        lines.append(f"deleted {report.dead_ephemerals} ephemerals of sessions that had ended (as ZooKeeper does when it loads them)")
    lines.append(f"wrote {report.target}: {report.znodes} znodes, {report.sessions} sessions, last zxid {zxid_hex(report.last_zxid)}, "
                 f"acceptedEpoch {report.accepted_epoch}, currentEpoch {report.current_epoch}")  # fmt: skip
    lines.append("took " + ", ".join(f"{step} {seconds:.2f} s" for step, seconds in report.seconds.items()))
    lines.append(START_ORDER.format(what="zabby"))
    return lines


# the rule of docs/operations.md, "Moving from ZooKeeper": the data is on one server, not on a quorum
START_ORDER = ("start {what} on this server first, with only enough empty servers to make a bare majority with it; "
               "start the rest once it leads (empty servers that are a majority of their own elect one of them and empty this one)")
