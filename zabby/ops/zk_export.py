"""``zookeeper export DATA_DIR --out ZK_DATA_DIR``: the way back, a zabby tree written as a
ZooKeeper data directory that ZooKeeper 3.8 starts from as from its own.

The tree comes from a stopped server's data dir (its newest snapshot that reads whole, then its
log, read without changing a byte: a torn tail is left where it is, and not replayed, as the
server itself would cut it), from a zabby snapshot file, or from a live server's snapshot
stream (``--server``, as ``snapshot save`` fetches it).

What is written, into a hidden sibling renamed into place only when whole::

    ZK_DATA_DIR/version-2/snapshot.<hex zxid>   the tree and the session table, in ZooKeeper's
                                                format (``zabby.storage.zk_files``), sealed, with
                                                the tree digest ZooKeeper computes (ZxidDigest at
                                                the same zxid, so it compares it at load and
                                                finds it equal)
    ZK_DATA_DIR/version-2/acceptedEpoch, currentEpoch   the server's (a snapshot's: its zxid's epoch)
    ZK_DATA_DIR/myid                            with --myid (a quorum member's)

``/zookeeper/config`` is written as a fresh tree has it: each ZooKeeper server sets it from its
own configuration.  Sessions go with their timeouts; ZooKeeper derives a session's password from
its id, so a client whose session began on ZooKeeper (before an import) re-attaches after the
export, while one whose session began on zabby (a random password) does not: its session and
its ephemerals expire after its timeout.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from zabby.errors import InvariantError
from zabby.ops import fetch, logtool
from zabby.ops.errors import DataError, UsageError
from zabby.ops.snapfile import load_tree
from zabby.ops.zk_import import START_ORDER, check_target, written_whole
from zabby.storage.datadir import VERSION_DIR, log_covers
from zabby.storage.epochs import ACCEPTED_EPOCH, CURRENT_EPOCH, CorruptEpochError, read_epoch
from zabby.storage.snapshot import list_snapshots
from zabby.storage.txnlog import list_segments
from zabby.storage.zk_files import write_epochs, write_snapshot
from zabby.tree.datatree import DataTree
from zabby.tree.txns import zxid_epoch, zxid_hex
from zabby.wire.zk_snapshot import tree_digest


@dataclass(slots=True)
class ExportReport:
    source: str = ""
    zxid: int = 0
    znodes: int = 0
    sessions: int = 0
    digest: int = 0  # ZooKeeper's
    epochs: tuple[int, int] = (0, 0)
    notes: list[str] = field(default_factory=list)
    written: Path | None = None
    seconds: float = 0.0


# ----------------------------------------------------------------------------- the tree
def _replay_log(tree: DataTree, log_dir: Path, newest: bool, notes: list[str]) -> None:
    """The log after the tree's zxid, read-only, up to its last whole record."""
    if not list_segments(log_dir):
        return
    report = logtool.verify(log_dir)
    if not report.ok:
        raise DataError(f"the txn log in {log_dir} is damaged: {'; '.join(report.errors)} (start the server once, or see log verify)")
    first, last = report.segments[0].first_zxid, report.segments[-1].last_zxid
    if last > tree.last_zxid and not log_covers(first, tree.last_zxid, newest=newest):
        raise DataError(f"the txn log in {log_dir} starts at {zxid_hex(first)}, after the snapshot at {zxid_hex(tree.last_zxid)}: txns are missing")
    notes.extend(f"left out a torn tail: {warning}" for warning in report.warnings)
    if last <= tree.last_zxid:
        return
    for txn in logtool.dump(log_dir, tree.last_zxid + 1):
        try:
            tree.apply(txn, answered=False)
        except InvariantError as exc:
            raise DataError(f"the txn log in {log_dir} does not continue the snapshot at its {zxid_hex(txn.zxid)}: {exc}") from None
        if txn.zxid >= last:
            break  # what follows is the torn tail


def recovered_tree(data_dir: Path, data_log_dir: Path | None = None) -> tuple[DataTree, list[str]]:
    """The tree a stopped server would recover from ``data_dir``, without changing its files;
    and notes on what was passed over."""
    snap_dir = data_dir / VERSION_DIR
    if not snap_dir.is_dir():
        raise UsageError(f"{data_dir}: not a zabby data dir (no {VERSION_DIR}/)")
    notes: list[str] = []
    tree, skipped = DataTree(), 0
    for _, path in list_snapshots(snap_dir):
        try:
            tree = load_tree(path)
            break
        except DataError as exc:
            notes.append(f"skipped {exc}")
            skipped += 1
    _replay_log(tree, (data_log_dir or data_dir) / VERSION_DIR, skipped == 0, notes)
    return tree, notes


def _epochs(data_dir: Path | None, zxid: int) -> tuple[int, int]:
    floor = zxid_epoch(zxid)
    if data_dir is None:
        return floor, floor
    try:
        current = max(floor, read_epoch(data_dir / VERSION_DIR / CURRENT_EPOCH, floor))
        return max(current, read_epoch(data_dir / VERSION_DIR / ACCEPTED_EPOCH, current)), current
    except CorruptEpochError as exc:
        raise DataError(str(exc)) from None


def source_tree(source: Path | None, server: str | None, auth: str | None, report: ExportReport) -> tuple[DataTree, Path | None]:
    """The tree to export and the data dir it came from (None for a snapshot or a stream)."""
    if server is not None:
        with tempfile.TemporaryDirectory(prefix="zabby-export-") as scratch:
            saved = fetch.save(server, Path(scratch) / "snapshot", auth=auth)
            report.source = f"a snapshot streamed from http://{server} at {zxid_hex(saved.snapshot.zxid)}"
            return load_tree(Path(scratch) / "snapshot"), None
    if source is None:
        raise UsageError("give a data dir or a snapshot file, or --server")
    report.source = str(source)
    if source.is_file():
        return load_tree(source), None
    tree, notes = recovered_tree(source)
    report.notes.extend(notes)
    return tree, source


# ----------------------------------------------------------------------------- writing
def write_zookeeper_dir(tree: DataTree, out: Path, epochs: tuple[int, int], myid: int | None) -> int:
    """The ZooKeeper data dir of ``tree`` at ``out``; ZooKeeper's digest of it."""
    records = list(tree.records())
    session_count = records[0][2]
    sessions = {record[1]: record[2] for record in records[1 : 1 + session_count]}
    nodes = records[1 + session_count :]
    digest = tree_digest(nodes)
    with written_whole(out, "export", myid) as staged:
        snap_dir = staged / VERSION_DIR
        write_snapshot(snap_dir, tree.last_zxid, sessions, nodes, (tree.last_zxid, digest))
        write_epochs(snap_dir, *epochs)
    return digest


def export_zookeeper(source: Path | None, out: Path, *, server: str | None = None, auth: str | None = None,
                     myid: int | None = None, force: bool = False) -> ExportReport:  # fmt: skip
    """Write the tree of ``source`` (a stopped server's data dir or a snapshot file) or of the
    live ``server`` as a ZooKeeper data dir at ``out``.

    Raises:
        UsageError: no source, a bad id, ``out`` in use (without ``force``).
        DataError: the source is damaged (nothing is written).
        ServerError: ``server`` could not be reached or streamed (see ``fetch.save``).
    """
    check_target(out, myid, force)
    started = time.monotonic()
    report = ExportReport()
    tree, data_dir = source_tree(source, server, auth, report)
    if tree.forget_reconfig():
        report.notes.append("left out the reconfigured membership (/zookeeper/config): each ZooKeeper server sets its own")
    report.epochs = _epochs(data_dir, tree.last_zxid)
    report.digest = write_zookeeper_dir(tree, out, report.epochs, myid)
    report.zxid, report.znodes, report.sessions = tree.last_zxid, tree.node_count(), len(tree.sessions)
    report.written, report.seconds = out, time.monotonic() - started
    return report


def summary(report: ExportReport) -> list[str]:
    lines = [f"read {report.source}", *report.notes]
    lines.append(f"wrote {report.written}/{VERSION_DIR}: {report.znodes} znodes, {report.sessions} sessions, zxid {zxid_hex(report.zxid)}, "
                 f"ZooKeeper digest 0x{report.digest:016x}, acceptedEpoch {report.epochs[0]}, currentEpoch {report.epochs[1]}")  # fmt: skip
    lines.append(f"took {report.seconds:.2f} s")
    lines.append(START_ORDER.format(what="ZooKeeper"))
    return lines
