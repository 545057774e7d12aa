"""The transaction log: append-only segment files of (zxid, payload) records, CRC-checked.

On-disk format (all integers big-endian)::

    log_dir   := segment*                    one file per segment, named below
    name      := "log." hex16(first_zxid)    the zxid of the segment's first record
    segment   := header record+
    header    := magic:"ZBLG" version:u32(=1)
    record    := length:u32 crc:u32 zxid:u64 payload:byte[length]
    crc       := crc32(zxid:u64 payload)     zlib.crc32 over the packed zxid, then the payload

Theory of operation:

- Zxids grow strictly, across records and across segments; a segment's name is the zxid of its
  first record, so segment ``i`` holds exactly the zxids in ``[name_i, name_{i+1})``.
- ``append`` builds one buffer per batch and issues ONE write (group commit); ``sync``
  makes it durable with ``fdatasync``.  Records are only ever written at the end, so a torn
  write can only damage the tail.
- Space ahead of the end is *reserved* (ZooKeeper's ``preAllocSize``): ``fallocate``
  allocates ``reserve_bytes`` past the end, topped up after each sync, and the file's size
  covers it (it reads as zeros).  So an append changes no file size, and its ``fdatasync``
  commits no size with the data (on ext4 here: ~190 µs per fdatasync with the size kept,
  ~130 µs without).  Appends write into reserved blocks, so a full disk shows up as a failed
  top-up (``space_low``, and the server refuses writes) long before a write could fail
  half-way.  A filesystem without ``fallocate`` just goes without.
- The log ends at its last record: the file's end, or an all-zero record header (no record
  has one: its zxid is above 0), or fewer zero bytes than a header at the file's end (what a
  crash left of a reserve whose release it lost; found by the simulator's file system).  What follows a zero header was written after the last
  fsync, if at all, and is never read.  ``close`` gives the reserve back (a closed segment
  ends at its last record); ``open`` does it for a segment a crash left with its reserve.
- A new segment is created by the first ``append`` after a roll (its header goes out in the same
  write as the batch, so a segment never exists without records except after a crash).  Before
  the old segment is left, it is fdatasynced, so every segment but the last is fully durable.
- ``open`` validates every record.  A bad record in the *last* segment is a torn tail after a
  crash: the file is cut at the last good record and a WARNING says how much was cut (those
  bytes were never fsynced, hence never acknowledged).  A bad record in an older segment is
  real corruption of acknowledged data: ``CorruptLogError``, never a silent drop.
- Not thread-safe: one owner calls every method.  ``read_from`` sees the log as it was when
  called, so appends during the iteration do not disturb it; ``truncate_after`` and
  ``purge_before`` must not run while an iteration is in progress.
"""

from __future__ import annotations

import errno
import logging
import re
import struct
import zlib
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple

from zabby.errors import InvariantError
from zabby.storage.faults import inject
from zabby.storage.files import NO_SPACE_ERRNOS, DiskFailure, DiskFull, OutOfDescriptors, disk_error, fsync, fsync_dir, write_all
from zabby.storage.fs import CREATE_NEW, CREATE_OR_TRUNCATE, OS_FS, READ_ONLY, WRITE_ONLY, FileSystem
from zabby.tree.txns import RECORD_BYTES_MAX

logger = logging.getLogger("zabby.storage")

MAGIC = b"ZBLG"
VERSION = 1
SEGMENT_BYTES_MAX_DEFAULT = 64 * 2**20

_FILE_HEADER = struct.Struct(">4sI")
_FILE_HEADER_BYTES = _FILE_HEADER.pack(MAGIC, VERSION)
_LENGTH_CRC = struct.Struct(">II")
_ZXID = struct.Struct(">Q")
_RECORD_HEADER = struct.Struct(">IIQ")
_SEGMENT_NAME = re.compile(r"log\.([0-9a-f]{16})")
_ZERO_RECORD_HEADER = bytes(_RECORD_HEADER.size)  # reserved space past the last record
_UNSUPPORTED_ERRNOS = frozenset({errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL})


class CorruptLogError(Exception):
    """The log holds damaged records that are not a torn tail: acknowledged txns are unreadable."""


class _BadRecord(Exception):
    """``damaged``: no torn write explains it (a record with a valid CRC out of order, or one
    flipped bit that would make the CRC match): the disk changed bytes it had written."""

    def __init__(self, offset: int, reason: str, *, damaged: bool = False) -> None:
        super().__init__(reason)
        self.offset = offset
        self.reason = reason
        self.damaged = damaged


def _crc_table() -> list[int]:
    table = []
    for byte in range(256):
        value = byte
        for _ in range(8):
            value = (value >> 1) ^ (CRC32_POLYNOMIAL if value & 1 else 0)
        table.append(value)
    return table


CRC32_POLYNOMIAL = 0xEDB88320  # zlib's, reflected
FLIP_SEARCH_BYTES_MAX = 1 << 20  # a longer record with a bad CRC is called damaged without a search
_CRC_TABLE = _crc_table()


def one_bit_flip(covered: bytes, stored_crc: int) -> int | None:
    """Where one flipped bit would make ``covered`` (what the CRC covers) and ``stored_crc``
    match: the index of the byte in ``covered``, or ``-1`` for a bit of the CRC itself; None if
    no one bit does.  CRC-32 is linear: a flip of bit ``k`` of byte ``t`` changes the CRC by
    L^(8(n-t))(1 << k), L the register's step on a zero byte, so the search walks back from
    the last byte once, eight registers abreast."""
    syndrome = zlib.crc32(covered) ^ stored_crc
    if syndrome == 0:
        return None
    if syndrome & (syndrome - 1) == 0:
        return -1
    if len(covered) > FLIP_SEARCH_BYTES_MAX:
        return 0  # too long to search: taken for a flip at its start, the safe side
    table, registers = _CRC_TABLE, [1 << k for k in range(8)]
    for back in range(len(covered)):
        registers = [(r >> 8) ^ table[r & 0xFF] for r in registers]
        if syndrome in registers:
            return len(covered) - 1 - back
    return None


def one_bit_explains(covered: bytes, stored_crc: int) -> bool:
    return one_bit_flip(covered, stored_crc) is not None


class SegmentScan(NamedTuple):
    """What validating one segment found: the good prefix ends at ``good_bytes``."""

    good_bytes: int
    file_bytes: int
    record_count: int
    last_zxid: int
    error: str | None
    damaged: bool = False  # the error is no torn write (``_BadRecord.damaged``)


def segment_name(first_zxid: int) -> str:
    return f"log.{first_zxid:016x}"


def list_segments(log_dir: Path, *, fs: FileSystem = OS_FS) -> list[tuple[int, Path]]:
    """``(first_zxid, path)`` of every segment file in ``log_dir``, oldest first."""
    found = []
    for name in fs.files(log_dir):
        match = _SEGMENT_NAME.fullmatch(name)
        if match is not None:
            found.append((int(match.group(1), 16), Path(log_dir) / name))
    return sorted(found)


def _all_at_or_below(segments: list[tuple[int, Path]], index: int, zxid: int) -> bool:
    """Every record of ``segments[index]`` is at or below ``zxid``: the next segment starts by ``zxid + 1``."""
    return index + 1 < len(segments) and segments[index + 1][0] <= zxid + 1


def _records(f: BinaryIO, offset: int, end_bytes: int, prev_zxid: int) -> Iterator[tuple[int, bytes, int]]:
    """Yield ``(zxid, payload, end_offset)`` for each record in ``f`` from ``offset`` (where ``f``
    is positioned) to ``end_bytes`` or a zero header (the log's end); raise ``_BadRecord`` at
    the first record that fails a check."""
    header_size, unpack, crc32, pack_zxid = _RECORD_HEADER.size, _RECORD_HEADER.unpack, zlib.crc32, _ZXID.pack
    while offset < end_bytes:
        if end_bytes - offset < header_size:
            if not f.read(end_bytes - offset).strip(b"\0"):
                return  # the last zeros of a reserve (its release was lost in a crash): the end
            raise _BadRecord(offset, f"incomplete record header ({end_bytes - offset} bytes)")
        header = f.read(header_size)
        if header == _ZERO_RECORD_HEADER:
            return
        length, crc, zxid = unpack(header)
        if length > RECORD_BYTES_MAX or length > end_bytes - offset - header_size:
            rest = f.read(min(end_bytes - offset - header_size, FLIP_SEARCH_BYTES_MAX))
            raise _BadRecord(offset, f"record length {length} runs past the end of the file", damaged=_flipped(header, rest))
        payload = f.read(length)
        if crc32(payload, crc32(pack_zxid(zxid))) != crc:
            rest = payload + f.read(max(0, min(end_bytes - offset - header_size, FLIP_SEARCH_BYTES_MAX) - length))
            raise _BadRecord(offset, "CRC mismatch", damaged=_flipped(header, rest))
        if zxid <= prev_zxid:
            raise _BadRecord(offset, f"zxid 0x{zxid:x} does not follow 0x{prev_zxid:x}", damaged=True)
        offset += header_size + length
        prev_zxid = zxid
        yield zxid, payload, offset


def _flipped(header: bytes, rest: bytes) -> bool:
    """A record that fails its checks (``header``, then the file's bytes after it): is it a
    bit the disk flipped, rather than a torn write?  Yes if one flipped bit of its length
    (which then framed the wrong bytes), CRC, zxid or payload explains it, at a place where a
    torn write could not have left what is there: a torn write leaves zeros (reserved space)
    from where it stopped, so a flip is told apart where the byte, or one after it, is not zero."""
    length, crc, zxid = _RECORD_HEADER.unpack(header)
    zxid_bytes = _ZXID.pack(zxid)
    record = header + rest
    places = []
    if length <= len(rest):
        flip = one_bit_flip(zxid_bytes + rest[:length], crc)
        if flip is not None:
            places.append(4 if flip < 0 else 8 + flip)  # the CRC field, or the zxid and payload after it
    for bit in range(32):
        candidate = length ^ (1 << bit)
        if candidate <= len(rest) and zlib.crc32(rest[:candidate], zlib.crc32(zxid_bytes)) == crc:
            places.append(3 - bit // 8)
    return any(record[place:].strip(b"\0") for place in places)


def _check_file_header(path: Path, raw: bytes) -> str | None:
    """None if ``raw`` is a good header; the reason if it is torn; raise if it is foreign."""
    if len(raw) < _FILE_HEADER.size:
        return f"incomplete file header ({len(raw)} bytes)"
    if raw == bytes(_FILE_HEADER.size):
        return "zeroed file header"
    magic, version = _FILE_HEADER.unpack(raw)
    written = raw.rstrip(b"\0")
    if raw != _FILE_HEADER_BYTES and _FILE_HEADER_BYTES.startswith(written):
        return "torn file header"  # its first bytes, then the zeros of the reserve
    if magic != MAGIC or version != VERSION:
        raise CorruptLogError(f"{path}: not a zabby txn log segment (magic {magic!r}, version {version})")
    return None


def scan_segment(path: Path, first_zxid: int, prev_zxid: int, *, fs: FileSystem = OS_FS) -> SegmentScan:
    """Validate every record of one segment (read-only); stop at the first bad one.

    Raises:
        CorruptLogError: the file is not a zabby segment, or its first record is not the
            zxid its name says.
    """
    file_bytes = fs.size(path)
    with fs.reader(path) as f:
        reason = _check_file_header(path, f.read(_FILE_HEADER.size))
        if reason is not None:
            return SegmentScan(0, file_bytes, 0, prev_zxid, reason)
        good_bytes, count, last_zxid = _FILE_HEADER.size, 0, prev_zxid
        try:
            for zxid, _payload, end in _records(f, good_bytes, file_bytes, prev_zxid):
                if count == 0 and zxid != first_zxid:
                    raise CorruptLogError(f"{path}: first record has zxid 0x{zxid:x}, the name says 0x{first_zxid:x}")
                good_bytes, count, last_zxid = end, count + 1, zxid
        except _BadRecord as bad:
            return SegmentScan(bad.offset, file_bytes, count, last_zxid, bad.reason, bad.damaged)
    return SegmentScan(good_bytes, file_bytes, count, last_zxid, None)


def read_segment(path: Path, prev_zxid: int = 0, *, fs: FileSystem = OS_FS) -> Iterator[tuple[int, bytes, int]]:
    """Read-only: ``(zxid, payload, end_offset)`` of each record of one segment file, for tools
    that must not repair what they read (``TxnLog.open`` cuts a torn tail).

    Raises (while iterating):
        CorruptLogError: at the first bad record or a bad file header, naming the offset.
    """
    file_bytes = fs.size(path)
    with fs.reader(path) as f:
        reason = _check_file_header(path, f.read(_FILE_HEADER.size))
        if reason is not None:
            raise CorruptLogError(f"txn log {path}: {reason} at offset 0")
        try:
            yield from _records(f, _FILE_HEADER.size, file_bytes, prev_zxid)
        except _BadRecord as bad:
            raise CorruptLogError(f"txn log {path}: {bad.reason} at offset {bad.offset}") from None


class TxnLog:
    """A segmented, CRC-checked, append-only log of ``(zxid, payload)`` records.

    Args:
        log_dir: the directory of the segment files (created if missing).
        segment_bytes_max: a batch that finds the current segment at least this large starts
            a new segment first.
        reserve_bytes: space kept allocated past the end of the current segment (0: none).

    Call ``open()`` before anything else, and ``close()`` at the end.
    """

    def __init__(self, log_dir: Path, *, segment_bytes_max: int = SEGMENT_BYTES_MAX_DEFAULT, reserve_bytes: int = 0,
                 fs: FileSystem = OS_FS) -> None:  # fmt: skip
        if segment_bytes_max <= _FILE_HEADER.size:
            raise ValueError(f"segment_bytes_max must exceed {_FILE_HEADER.size}, got {segment_bytes_max}")
        self.log_dir = Path(log_dir)
        self.fs = fs
        self.segment_bytes_max = segment_bytes_max
        self.reserve_bytes = reserve_bytes
        self.space_low = False  # the last reservation failed for want of space
        self._reserved_end = 0  # the current segment's blocks are allocated up to here
        self.last_zxid = 0
        self._segments: list[tuple[int, Path]] = []
        self._fd: int | None = None
        self._segment_bytes = 0
        self._roll_requested = False
        self._roll_put_off = False  # a roll failed for want of a descriptor (logged once until one succeeds)
        self._file_unsynced = False
        self._dir_unsynced = False
        self._opened = False
        self.writes = 0  # writes to the log so far: a sync done elsewhere covers those before it began

    # ----------------------------------------------------------------- open / close
    def open(self, *, check_from: int = 0) -> None:
        """Validate every segment, cut a torn tail of the last one, and get ready to append.

        Segments whose records all lie at or below ``check_from`` are not read: a recovery
        passes its snapshot's zxid, as the snapshot holds them (ZooKeeper does not read them
        either; at 1M records, reading them cost a restart a second).  ``zabby-log verify``
        checks every record.

        Raises:
            CorruptLogError: an older segment is damaged, a segment is not ours, or zxids do
                not grow; nothing is changed on disk in that case.
        """
        if self._opened:
            raise InvariantError(f"txn log {self.log_dir} opened twice")
        self.fs.makedirs(self.log_dir)
        self._segments = []
        found = list_segments(self.log_dir, fs=self.fs)
        prev_zxid, unread = 0, set()
        for index, (first_zxid, path) in enumerate(found):
            if check_from and _all_at_or_below(found, index, check_from):
                self._segments.append((first_zxid, path))
                unread.add(path)
                prev_zxid = first_zxid
                continue
            prev_zxid = self._admit(path, first_zxid, prev_zxid, is_last=index == len(found) - 1)
        while self._segments and self._segments[-1][1] in unread:  # what came after held no record
            first_zxid, path = self._segments.pop()
            unread.discard(path)
            bound = self._segments[-1][0] if self._segments else 0
            prev_zxid = self._admit(path, first_zxid, bound, is_last=True)
        self.last_zxid = prev_zxid
        if self._segments:
            self._open_for_append(self._segments[-1][1])
        self._opened = True

    def _admit(self, path: Path, first_zxid: int, prev_zxid: int, *, is_last: bool) -> int:
        """Check one segment (cutting the last one's torn tail), keep it if it holds records,
        and return the last zxid so far."""
        scan = scan_segment(path, first_zxid, prev_zxid, fs=self.fs)
        if (scan.error is not None or scan.record_count == 0) and not is_last:
            where = f"at offset {scan.good_bytes}: {scan.error}" if scan.error else "it holds no records"
            raise CorruptLogError(
                f"txn log segment {path} is damaged {where}; it is not the last segment, so "
                f"acknowledged txns would be lost: refusing to start (restore it or resync this server)"
            )
        if scan.damaged:
            raise CorruptLogError(
                f"txn log segment {path} is damaged at offset {scan.good_bytes}: {scan.error}, which one flipped "
                f"bit explains and no torn write does; the record may have been acknowledged: refusing to "
                f"start (restore it or resync this server)"
            )
        if scan.error is not None:
            self._cut_torn_tail(path, scan)
        elif scan.good_bytes < scan.file_bytes:
            # The reserve a crash left: zeros, given back.  In a segment before the last one
            # too (its release was lost): it is the last one if the empty one after it goes,
            # and appends after its zeros would be read back as nothing (the simulator's seed 82).
            self.fs.truncate(path, scan.good_bytes)
        if scan.record_count == 0:
            self._remove_empty_segment(path)
            return prev_zxid
        self._segments.append((first_zxid, path))
        return scan.last_zxid

    def _cut_torn_tail(self, path: Path, scan: SegmentScan) -> None:
        cut_bytes = scan.file_bytes - scan.good_bytes
        logger.warning(
            "txn log %s: %s at offset %d; cutting %d bytes after the last good record "
            "(a torn tail from a crash: those bytes were never synced)",
            path, scan.error, scan.good_bytes, cut_bytes,
        )  # fmt: skip
        self.fs.truncate(path, scan.good_bytes)
        fd = self.fs.open(path, READ_ONLY)
        try:
            fsync(fd, str(path), fs=self.fs)
        finally:
            self.fs.close(fd)

    def _remove_empty_segment(self, path: Path) -> None:
        logger.warning("txn log %s holds no complete record; removing it", path)
        self.fs.unlink(path)
        fsync_dir(self.log_dir, fs=self.fs)

    def _open_for_append(self, path: Path) -> None:
        """Append to ``path``, which ends at its last record (its reserve is made here)."""
        self._fd = self.fs.open(path, WRITE_ONLY)
        self._segment_bytes = self.fs.fsize(self._fd)
        self._reserved_end = 0
        self._reserve()

    def close(self) -> None:
        """Sync what was appended, give the reserve back, and release the file."""
        if self._fd is not None:
            self.sync()
            self._release_reservation()
            self.fs.close(self._fd)
            self._fd = None
        self._opened = False

    def __enter__(self) -> TxnLog:
        self.open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ----------------------------------------------------------------- writing
    def append(self, records: list[tuple[int, bytes]]) -> None:
        """Append ``(zxid, payload)`` records with one write; not durable until ``sync()``.

        Raises:
            InvariantError: a zxid is not above the previous one (nothing is written then).
            OSError: the write failed; the segment is cut back to where it was.
        """
        if not records:
            return
        if not self._opened:
            raise InvariantError(f"append to txn log {self.log_dir} before open()")
        rolling = self._fd is None or self._roll_requested or self._segment_bytes >= self.segment_bytes_max
        parts: list[bytes] = []
        last_zxid = self.last_zxid
        pack_length_crc, pack_zxid, crc32 = _LENGTH_CRC.pack, _ZXID.pack, zlib.crc32
        for zxid, payload in records:
            if zxid <= last_zxid:
                raise InvariantError(f"txn log append: zxid 0x{zxid:x} after 0x{last_zxid:x}")
            size = len(payload)
            if size > RECORD_BYTES_MAX:  # prep keeps txns below it: the reader would refuse it
                raise InvariantError(f"txn log append: a record of {size} bytes at zxid 0x{zxid:x}, over {RECORD_BYTES_MAX}")
            zxid_bytes = pack_zxid(zxid)
            parts += (pack_length_crc(size, crc32(payload, crc32(zxid_bytes))), zxid_bytes, payload)
            last_zxid = zxid
        data = b"".join(parts)
        if rolling and self._start_segment(records[0][0], len(_FILE_HEADER_BYTES) + len(data)):
            data = _FILE_HEADER_BYTES + data  # a roll put off writes on in the current segment, with no header
        self._write(data)
        self.last_zxid = last_zxid

    def _write(self, data: bytes) -> None:
        assert self._fd is not None
        if self._segment_bytes + len(data) > self._reserved_end:
            self._reserve(len(data))
        try:
            write_all(self._fd, data, str(self._segments[-1][1]), offset=self._segment_bytes, fs=self.fs)
        except DiskFull:
            self._cut_back()
            raise
        self._segment_bytes += len(data)
        self._file_unsynced = True
        self.writes += 1

    def _cut_back(self) -> None:
        """Undo a failed write: nothing of it stays in the log."""
        assert self._fd is not None
        try:
            self.fs.ftruncate(self._fd, self._segment_bytes)
        except OSError as exc:
            raise DiskFailure(f"cannot cut back a failed write to the txn log: {exc}") from exc
        self._reserved_end = self._segment_bytes  # the cut took the reserve too
        if self._segment_bytes == 0:
            self._drop_current_segment()

    def _start_segment(self, first_zxid: int, first_write_bytes: int) -> bool:
        """Leave the current segment durable and create the next one (empty until written).

        When the new segment cannot get its reservation while the current one still has
        room, or no descriptor is free to create it, the roll is put off (segments are a
        convenience of purging; the log is not): False, and the batch goes on in the current
        segment (with no file header in it: the simulator's full disk found one written
        there)."""
        path = self.log_dir / segment_name(first_zxid)
        try:
            fd = self.fs.open(path, CREATE_NEW)
        except OSError as exc:
            error = disk_error(exc, f"create {path}")
            if isinstance(error, OutOfDescriptors) and self._fd is not None:
                if not self._roll_put_off:
                    logger.warning("txn log: the roll to a new segment is put off: %s", error)
                self._roll_put_off = True
                self._roll_requested = False  # until the next snapshot asks again
                return False
            raise error from exc
        if not self._reserve_new(fd, first_write_bytes) and self._fd is not None and not self._segment_full():
            self.fs.close(fd)
            self.fs.unlink(path)
            self._roll_requested = False  # until the next snapshot asks again
            return False
        if self._fd is not None:
            if self._file_unsynced:
                fsync(self._fd, f"txn log segment {self._segments[-1][1]}", data_only=True, fs=self.fs)
                self._file_unsynced = False
            self._release_reservation()
            self.fs.close(self._fd)
        self._fd = fd
        self._roll_put_off = False
        self._segments.append((first_zxid, path))
        self._segment_bytes = 0
        self._reserved_end = first_write_bytes + self.reserve_bytes if self.reserve_bytes else 0
        self._roll_requested = False
        self._dir_unsynced = True
        return True

    def _segment_full(self) -> bool:
        return self._segment_bytes >= self.segment_bytes_max

    # ----------------------------------------------------------------- space
    def _reserve(self, needed_bytes: int = 0) -> None:
        """Top the reservation up to ``reserve_bytes`` past what is written (plus ``needed``)
        once less than half of it is left; a failure for want of space sets ``space_low``."""
        if not self._reserve_due(needed_bytes) or self._fd is None:
            return
        if self._allocate(self._fd, self._segment_bytes, needed_bytes + self.reserve_bytes):
            self._reserved_end = self._segment_bytes + needed_bytes + self.reserve_bytes

    def _reserve_due(self, needed_bytes: int = 0) -> bool:
        """Less than half of the reservation is left past what is written (plus ``needed``)."""
        if not self.reserve_bytes or self._fd is None:
            return False
        return self._reserved_end - self._segment_bytes - needed_bytes < self.reserve_bytes // 2

    def _reserve_new(self, fd: int, first_write_bytes: int) -> bool:
        return not self.reserve_bytes or self._allocate(fd, 0, first_write_bytes + self.reserve_bytes)

    def _allocate(self, fd: int, offset: int, length: int) -> bool:
        """fallocate; False (and ``space_low``) if the disk has no room."""
        try:
            inject("allocate")
            self.fs.fallocate(fd, offset, length)
        except OSError as exc:
            if exc.errno in NO_SPACE_ERRNOS:
                if not self.space_low:
                    logger.error("txn log %s: no space to reserve %d bytes (%s): writes are refused until space is freed",
                                 self.log_dir, length, exc.strerror)  # fmt: skip
                self.space_low = True
                return False
            if exc.errno in _UNSUPPORTED_ERRNOS:
                logger.info("txn log %s: this filesystem cannot reserve space (%s); going without", self.log_dir, exc.strerror)
                self.reserve_bytes = 0
                return True
            raise DiskFailure(f"reserving space for the txn log in {self.log_dir} failed: {exc}") from exc
        if self.space_low:
            logger.info("txn log %s: space reserved again; writes resume", self.log_dir)
            self.space_low = False
        return True

    def _release_reservation(self) -> None:
        """Give back what the segment reserved past its last record (a finished one, or at close)."""
        if self.reserve_bytes and self._fd is not None:
            try:
                self.fs.ftruncate(self._fd, self._segment_bytes)
            except OSError as exc:
                logger.warning("txn log: cannot release a finished segment's reserved space: %s", exc)

    def retry_reserve(self) -> bool:
        """After ``space_low``: try to reserve again; True once writes can go on."""
        if self._fd is not None:
            self._reserved_end = 0
            self._reserve()
        elif self.reserve_bytes:
            probe = self.log_dir / ".space-probe"
            try:
                fd = self.fs.open(probe, CREATE_OR_TRUNCATE)
            except OSError as exc:
                if exc.errno in NO_SPACE_ERRNOS:
                    return False  # no room even for the probe: still low on space (seed 384)
                raise
            try:
                self._allocate(fd, 0, self.reserve_bytes)
            finally:
                self.fs.close(fd)
                self.fs.unlink(probe)
        return not self.space_low

    def _drop_current_segment(self) -> None:
        assert self._fd is not None
        self.fs.close(self._fd)
        self._fd = None
        self.fs.unlink(self._segments.pop()[1])
        self._segment_bytes = 0

    def sync(self) -> None:
        """Make every appended record durable: ``fdatasync`` the segment, and fsync the
        directory if a segment was created or removed since the last sync."""
        if self._fd is not None and self._file_unsynced:
            fsync(self._fd, f"txn log segment {self._segments[-1][1]}", data_only=True, fs=self.fs)
            self._file_unsynced = False
        if self._dir_unsynced:
            fsync_dir(self.log_dir, fs=self.fs)
            self._dir_unsynced = False
        self._reserve()

    def segment_to_sync(self) -> tuple[int, int] | None:
        """``(fd, writes)``: the open segment's fd and the count of writes so far, when all that
        ``sync`` has to do is its fdatasync, for a caller that has it done elsewhere (the
        kernel's AIO) and then calls ``segment_synced(writes)``; None when there is nothing to
        sync or more to do (a directory entry, a reservation to top up): then ``sync``."""
        if self._fd is None or not self._file_unsynced or self._dir_unsynced or self._reserve_due():
            return None
        return self._fd, self.writes

    def segment_synced(self, writes: int) -> None:
        """The fd ``segment_to_sync`` gave was fdatasync-ed; ``writes``: its count then.  A
        write since (appends go on while the kernel syncs) leaves the segment unsynced."""
        if writes == self.writes:
            self._file_unsynced = False

    def roll(self) -> None:
        """Make the next ``append`` start a new segment (called when a snapshot is taken)."""
        self._roll_requested = True

    # ----------------------------------------------------------------- reading
    @property
    def first_zxid(self) -> int:
        """The zxid of the oldest record kept (0 if the log is empty)."""
        return self._segments[0][0] if self._segments else 0

    def segments(self) -> list[Path]:
        """The segment files, oldest first."""
        return [path for _, path in self._segments]

    def read_from(self, zxid: int) -> Iterator[tuple[int, bytes]]:
        """Every record with a zxid above ``zxid``, in order, streamed from disk.

        The iteration covers the log as it is at the call; later appends are not seen.

        Raises (while iterating):
            CorruptLogError: a record does not read back (damaged since ``open()``, or in a
                segment it left unread).
        """
        if not self._opened:
            raise InvariantError(f"read from txn log {self.log_dir} before open()")
        plan = [self._extent(index) for index in range(len(self._segments)) if not _all_at_or_below(self._segments, index, zxid)]
        return self._stream(plan, zxid)

    def tail(self, count: int) -> list[tuple[int, bytes]]:
        """The last ``count`` records (all of them if there are fewer), oldest first; only the
        newest segments that hold them are read."""
        if not self._opened:
            raise InvariantError(f"read from txn log {self.log_dir} before open()")
        newest_first: list[deque[tuple[int, bytes]]] = []
        needed = count
        for index in reversed(range(len(self._segments))):
            if needed <= 0:
                break
            records = deque(self._stream([self._extent(index)], 0), maxlen=needed)
            newest_first.append(records)
            needed -= len(records)
        return [record for records in reversed(newest_first) for record in records]

    def _extent(self, index: int) -> tuple[Path, int]:
        """Segment ``index`` and where its records end (the current one: as appended so far)."""
        path = self._segments[index][1]
        is_current = index == len(self._segments) - 1 and self._fd is not None
        return path, self._segment_bytes if is_current else self.fs.size(path)

    def _stream(self, plan: list[tuple[Path, int]], zxid: int) -> Iterator[tuple[int, bytes]]:
        prev_zxid = 0
        for path, end_bytes in plan:
            with self.fs.reader(path) as f:
                f.seek(_FILE_HEADER.size)
                try:
                    for record_zxid, payload, _end in _records(f, _FILE_HEADER.size, end_bytes, prev_zxid):
                        prev_zxid = record_zxid
                        if record_zxid > zxid:
                            yield record_zxid, payload
                except _BadRecord as bad:
                    raise CorruptLogError(f"txn log {path}: {bad.reason} at offset {bad.offset}") from None

    # ----------------------------------------------------------------- cutting
    def truncate_after(self, zxid: int) -> None:
        """Drop every record above ``zxid`` (Zab TRUNC), durably: later segments are deleted
        and the segment holding the boundary is cut after its last record ``<= zxid``."""
        if not self._opened:
            raise InvariantError(f"truncate txn log {self.log_dir} before open()")
        if zxid >= self.last_zxid:
            return
        if self._fd is not None:
            self.fs.close(self._fd)
            self._fd = None
        while self._segments and self._segments[-1][0] > zxid:
            self.fs.unlink(self._segments.pop()[1])
        self.last_zxid = self._segment_bytes = 0
        if self._segments:
            self._cut_segment_after(self._segments[-1][1], zxid)
        fsync_dir(self.log_dir, fs=self.fs)
        self._file_unsynced = self._dir_unsynced = False

    def _cut_segment_after(self, path: Path, zxid: int) -> None:
        good_bytes, last_zxid = _FILE_HEADER.size, 0
        with self.fs.reader(path) as f:
            f.seek(_FILE_HEADER.size)
            try:
                for record_zxid, _payload, end in _records(f, good_bytes, self.fs.size(path), 0):
                    if record_zxid > zxid:
                        break
                    good_bytes, last_zxid = end, record_zxid
            except _BadRecord as bad:
                raise CorruptLogError(f"txn log {path}: {bad.reason} at offset {bad.offset}") from None
        self.fs.truncate(path, good_bytes)
        self._open_for_append(path)
        assert self._fd is not None
        fsync(self._fd, str(path), fs=self.fs)
        self.last_zxid = last_zxid

    def purge_before(self, zxid: int) -> list[Path]:
        """Delete the segments whose records are all ``<= zxid``; the last segment always stays.

        Returns:
            the paths removed, oldest first.
        """
        if not self._opened:
            raise InvariantError(f"purge txn log {self.log_dir} before open()")
        removed: list[Path] = []
        while len(self._segments) > 1 and self._segments[1][0] <= zxid + 1:
            path = self._segments.pop(0)[1]
            self.fs.unlink(path)
            removed.append(path)
        if removed:
            fsync_dir(self.log_dir, fs=self.fs)
            logger.info("txn log: purged %d segments up to zxid 0x%x", len(removed), zxid)
        return removed
