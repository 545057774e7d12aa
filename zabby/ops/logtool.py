"""``zabby-admin log dump | verify | chop``: the txn log, read without repairing it, and cut.

The folder given may be a ``dataLogDir`` (which holds ``version-2/``) or the ``version-2``
folder itself.  Segments are read with ``zabby.storage.txnlog.read_segment`` /
``scan_segment``, which never change a file: ``TxnLog.open`` would cut a torn tail, which a
tool that only looks must not do.

Theory of operation for ``chop`` (the operator's last resort, e.g. a server that holds txns
the ensemble never committed and will not take a TRUNC): every segment file that the cut
changes or removes is first copied whole into a backup folder, with a ``chopped.jsonl``
listing the records cut (as ``log dump --json`` prints them); only then are later segments
removed and the boundary segment truncated after its last record ``<= ZXID``, durably.
Snapshots in the same folder past ``ZXID`` hold the cut txns too, so they move to the backup
as well (recovery would otherwise load them).  A process holding a segment open (a running
server) makes chop refuse.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgpack

from zabby.ops.errors import DataError, UsageError
from zabby.ops.txnformat import txn_to_dict
from zabby.storage.datadir import VERSION_DIR
from zabby.storage.files import fsync, fsync_dir
from zabby.storage.snapshot import list_snapshots
from zabby.storage.txnlog import CorruptLogError, list_segments, read_segment, scan_segment
from zabby.tree.txns import Txn, decode_txn, zxid_counter, zxid_epoch, zxid_hex

Segment = tuple[int, Path]


def find_log_dir(folder: Path) -> Path:
    """The folder holding the ``log.<zxid>`` files: ``folder/version-2`` or ``folder``.

    Raises:
        UsageError: no such folder, or no segment in it.
    """
    if not folder.is_dir():
        raise UsageError(f"{folder}: no such directory")
    candidate = folder / VERSION_DIR
    log_dir = candidate if candidate.is_dir() else folder
    if not list_segments(log_dir):
        raise UsageError(f"{folder}: no txn log segments (log.<zxid> files) here or in {VERSION_DIR}/")
    return log_dir


def decode_record(path: Path, zxid: int, payload: bytes) -> Txn:
    """The txn of one record, checked against the record's zxid.

    Raises:
        DataError: the payload is not a txn, or holds another zxid.
    """
    try:
        txn = decode_txn(payload)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise DataError(f"{path}: record {zxid_hex(zxid)} is not a txn: {exc}") from None
    if txn.zxid != zxid:
        raise DataError(f"{path}: record {zxid_hex(zxid)} holds a txn with zxid {zxid_hex(txn.zxid)}")
    return txn


# ----------------------------------------------------------------------------- dump
def _segments_from(segments: list[Segment], from_zxid: int) -> list[Segment]:
    """Leave out the segments whose records all lie below ``from_zxid``."""
    return [seg for index, seg in enumerate(segments) if index + 1 == len(segments) or segments[index + 1][0] > from_zxid]


def dump(folder: Path, from_zxid: int = 0) -> Iterator[Txn]:
    """Every txn with zxid ``>= from_zxid``, in log order.

    Raises (while iterating, after the txns before the damage):
        UsageError: see ``find_log_dir``.
        DataError: a damaged record.
    """
    log_dir = find_log_dir(folder)
    prev_zxid = 0
    for _first, path in _segments_from(list_segments(log_dir), from_zxid):
        try:
            for zxid, payload, _end in read_segment(path, prev_zxid):
                prev_zxid = zxid
                if zxid >= from_zxid:
                    yield decode_record(path, zxid, payload)
        except CorruptLogError as exc:
            raise DataError(str(exc)) from None


# ----------------------------------------------------------------------------- verify
@dataclass(frozen=True, slots=True)
class SegmentReport:
    path: Path
    first_zxid: int
    last_zxid: int  # of the last good record (the previous segment's when there is none)
    records: int
    file_bytes: int
    problem: str | None = None
    torn_tail: bool = False  # a bad end of the last segment: the server cuts it at start-up


@dataclass(slots=True)
class VerifyReport:
    segments: list[SegmentReport] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def records(self) -> int:
        return sum(segment.records for segment in self.segments)


def _decode_all(path: Path, prev_zxid: int, end_bytes: int) -> str | None:
    """Decode every record of the good prefix ``[.., end_bytes)``; the first problem, if any.
    (Reading stops with a CorruptLogError at ``end_bytes`` when the scan found damage there.)"""
    try:
        for zxid, payload, end in read_segment(path, prev_zxid):
            if end > end_bytes:
                break
            decode_record(path, zxid, payload)
    except DataError as exc:
        return str(exc)
    except CorruptLogError:
        pass
    return None


def _verify_segment(path: Path, first_zxid: int, prev_zxid: int, is_last: bool) -> SegmentReport:
    file_bytes = path.stat().st_size
    try:
        scan = scan_segment(path, first_zxid, prev_zxid)
    except CorruptLogError as exc:
        return SegmentReport(path, first_zxid, prev_zxid, 0, file_bytes, str(exc))
    report = SegmentReport(path, first_zxid, scan.last_zxid, scan.record_count, file_bytes)
    problem = _decode_all(path, prev_zxid, scan.good_bytes)
    if problem is not None:
        return SegmentReport(path, first_zxid, scan.last_zxid, scan.record_count, file_bytes, problem)
    if scan.error is not None:
        cut = scan.file_bytes - scan.good_bytes
        where = f"{path}: {scan.error} at offset {scan.good_bytes} ({cut} bytes to the end)"
        return SegmentReport(path, first_zxid, scan.last_zxid, scan.record_count, file_bytes, where, torn_tail=is_last)
    if scan.record_count == 0:
        return SegmentReport(path, first_zxid, prev_zxid, 0, file_bytes, f"{path}: no complete record", torn_tail=is_last)
    return report


def _gaps(path: Path, prev_zxid: int) -> Iterator[str]:
    """Txns missing inside an epoch: counters grow by one, and a new epoch starts at 1.
    Only the good records are looked at (the caller reports the damage)."""
    records = read_segment(path, prev_zxid)
    while True:
        try:
            zxid, _payload, _end = next(records)
        except (StopIteration, CorruptLogError):
            return
        same_epoch = zxid_epoch(zxid) == zxid_epoch(prev_zxid)
        if prev_zxid and same_epoch and zxid != prev_zxid + 1:
            yield f"{path}: {zxid_hex(zxid)} follows {zxid_hex(prev_zxid)}: txns in between are missing"
        elif prev_zxid and not same_epoch and zxid_counter(zxid) != 1:
            yield f"{path}: epoch {zxid_epoch(zxid)} starts at {zxid_hex(zxid)}, not at counter 1"
        prev_zxid = zxid


def verify(folder: Path) -> VerifyReport:
    """Check every record's CRC, that zxids grow strictly across the whole log, that each
    segment's name is its first zxid, that every record decodes as its txn, and that no txn
    is missing inside an epoch.

    A damaged end of the *last* segment is a warning (a torn write: the server cuts it at
    start-up, and those bytes were never acknowledged); damage anywhere else is an error.
    """
    report = VerifyReport()
    segments = list_segments(find_log_dir(folder))
    prev_zxid = 0
    for index, (first_zxid, path) in enumerate(segments):
        segment = _verify_segment(path, first_zxid, prev_zxid, index == len(segments) - 1)
        report.segments.append(segment)
        if segment.problem is not None:
            (report.warnings if segment.torn_tail else report.errors).append(segment.problem)
        if segment.problem is None or segment.torn_tail:
            report.errors.extend(_gaps(path, prev_zxid))
        prev_zxid = segment.last_zxid
    return report


# ----------------------------------------------------------------------------- chop
@dataclass(frozen=True, slots=True)
class ChopPlan:
    log_dir: Path
    to_zxid: int
    removed: tuple[Path, ...]  # segments whose records all lie above to_zxid
    boundary: Path | None  # the segment cut inside, if any
    cut_offset: int  # the boundary segment keeps its bytes up to here
    last_kept_zxid: int
    snapshots: tuple[Path, ...]  # snapshots past to_zxid (they hold cut txns)
    damage: str | None  # a damaged record met before to_zxid: the log is cut there instead

    @property
    def empty(self) -> bool:
        return not (self.removed or self.boundary or self.snapshots)


@dataclass(frozen=True, slots=True)
class ChopResult:
    plan: ChopPlan
    backup_dir: Path
    records_cut: int


def _cut_point(path: Path, to_zxid: int, prev_zxid: int) -> tuple[int, int, str | None]:
    """(offset after the last good record <= to_zxid, that record's zxid, damage met)."""
    offset, last = 0, prev_zxid
    try:
        for zxid, _payload, end in read_segment(path, prev_zxid):
            if zxid > to_zxid:
                return offset, last, None
            offset, last = end, zxid
    except CorruptLogError as exc:
        return offset, last, str(exc)
    return offset, last, None


def plan_chop(folder: Path, to_zxid: int, snap_dir: Path | None = None) -> ChopPlan:
    """What ``chop`` would do, changing nothing.  ``snap_dir`` is the dataDir's folder of
    snapshots when the log lives elsewhere (dataLogDir); by default the log's own folder."""
    log_dir = find_log_dir(folder)
    segments = list_segments(log_dir)
    kept = [seg for seg in segments if seg[0] <= to_zxid]
    removed = tuple(path for first, path in segments if first > to_zxid)
    boundary, cut_offset, last_kept, damage = None, 0, 0, None
    if kept:
        path = kept[-1][1]
        cut_offset, last_kept, damage = _cut_point(path, to_zxid, 0)
        if cut_offset < path.stat().st_size:
            boundary = path
    snapshots = tuple(path for zxid, path in list_snapshots(_snap_folder(snap_dir or log_dir)) if zxid > to_zxid)
    return ChopPlan(log_dir, to_zxid, removed, boundary, cut_offset, last_kept, snapshots, damage)


def _snap_folder(folder: Path) -> Path:
    if not folder.is_dir():
        raise UsageError(f"{folder}: no such directory")
    return folder / VERSION_DIR if (folder / VERSION_DIR).is_dir() else folder


def _holders(paths: list[Path]) -> list[int]:
    """Pids of processes that hold one of ``paths`` open (Linux /proc; empty elsewhere)."""
    wanted = {str(path.resolve()) for path in paths}
    pids = []
    for entry in Path("/proc").glob("[0-9]*/fd/*"):
        try:
            if os.readlink(entry) in wanted:
                pids.append(int(entry.parts[2]))
        except OSError:
            continue
    return sorted(set(pids))


def _cut_records(plan: ChopPlan) -> Iterator[dict[str, object]]:
    """The records chop removes, as ``log dump --json`` prints them (up to any damage)."""
    for path in ([plan.boundary] if plan.boundary else []) + list(plan.removed):
        try:
            for zxid, payload, _end in read_segment(path, 0):
                if zxid > plan.to_zxid:
                    yield txn_to_dict(decode_record(path, zxid, payload))
        except (CorruptLogError, DataError) as exc:
            yield {"damaged": str(exc)}


def _back_up(plan: ChopPlan, backup_dir: Path) -> int:
    """Copy what chop changes into ``backup_dir`` durably; returns the count of txns cut."""
    backup_dir.mkdir(parents=True, exist_ok=False)
    for path in ([plan.boundary] if plan.boundary else []) + list(plan.removed):
        shutil.copy2(path, backup_dir / path.name)
    count = 0
    with (backup_dir / "chopped.jsonl").open("w") as out:
        for record in _cut_records(plan):
            out.write(json.dumps(record) + "\n")
            count += "damaged" not in record
    for name in os.listdir(backup_dir):
        fd = os.open(backup_dir / name, os.O_RDONLY)
        try:
            fsync(fd, str(backup_dir / name))
        finally:
            os.close(fd)
    fsync_dir(backup_dir)
    return count


def chop(plan: ChopPlan, backup_dir: Path | None = None) -> ChopResult:
    """Cut the log after ``plan.to_zxid``, once what goes is backed up (see the module doc).

    Raises:
        UsageError: a process holds a segment open, or the backup folder exists.
    """
    segments = [path for _, path in list_segments(plan.log_dir)]
    busy = _holders(segments)
    if busy:
        raise UsageError(f"process {', '.join(map(str, busy))} holds the txn log in {plan.log_dir} open: stop the server first")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    backup_dir = backup_dir or plan.log_dir.parent / f"chop-backup-{stamp}-to-{zxid_hex(plan.to_zxid)}"
    if backup_dir.exists():
        raise UsageError(f"backup folder {backup_dir} already exists")
    records_cut = _back_up(plan, backup_dir)
    for path in plan.snapshots:
        shutil.move(path, backup_dir / path.name)
    for folder in {path.parent for path in plan.snapshots}:
        fsync_dir(folder)
    for path in plan.removed:
        path.unlink()
    if plan.boundary is not None:
        _truncate(plan.boundary, plan.cut_offset)
    fsync_dir(plan.log_dir)
    return ChopResult(plan, backup_dir, records_cut)


def _truncate(path: Path, offset: int) -> None:
    if offset == 0:  # no record kept: an empty segment would be refused at start-up
        path.unlink()
        return
    os.truncate(path, offset)
    fd = os.open(path, os.O_RDONLY)
    try:
        fsync(fd, str(path))
    finally:
        os.close(fd)
