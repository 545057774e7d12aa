"""Snapshots: the whole tree at one zxid, streamed to disk and checked before it is trusted.

On-disk format (integers big-endian)::

    name      := "snapshot." hex16(zxid)        (a ".tmp" suffix while being written)
    snapshot  := header record* trailer
    header    := magic:"ZBSN" version:u32(=1) zxid:u64
    record    := one msgpack value               (DataTree.records(): tuples as arrays, bin data)
    trailer   := marker:"ZBSE" count:u64 crc:u32
    crc       := crc32(header record* marker count)   everything before the crc field

Theory of operation: a ``SnapshotWriter`` streams records through ``msgpack.Packer`` in ~1 MiB
chunks, computing the CRC as it goes, into ``snapshot.<zxid>.tmp``; it then fsyncs, renames
and fsyncs the directory, so a snapshot file that has its final name is complete.  It takes
the records in groups and packs each group in one call (``map`` and ``join``): a snapshot of
a million znodes is written by a forked child beside busy servers, and a Python loop per
record cost a quarter more of its CPU.
``write_snapshot`` writes a whole tree through one.
``read_snapshot`` reads the file once to check header, trailer and CRC, and only then returns
an iterator that unpacks the records (checking their count at the end).
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import msgpack

from zabby.storage.files import TMP_SUFFIX, disk_error, fsync, fsync_dir, write_all
from zabby.storage.fs import CREATE_OR_TRUNCATE, OS_FS, FileSystem
from zabby.tree.txns import RECORD_BYTES_MAX

MAGIC = b"ZBSN"
TRAILER_MARKER = b"ZBSE"
VERSION = 1
CHUNK_BYTES = 2**20
# A znode's record: its path, data and ACL, each at most a txn's (zabby.tree.txns.RECORD_BYTES_MAX
# bounds it twice over), and a chunk being read; msgpack's default (100 MiB) is not tied to it.
RECORD_BUFFER_BYTES = 2 * RECORD_BYTES_MAX + CHUNK_BYTES
GROUP_RECORDS_FIRST = 16  # records taken and packed together: the first group, then sized to
GROUP_RECORDS_MAX = 512  # about CHUNK_BYTES / 4 each, so that large znodes make small groups

_HEADER = struct.Struct(">4sIQ")
_TRAILER = struct.Struct(">4sQI")
_TRAILER_START = struct.Struct(">4sQ")
_CRC = struct.Struct(">I")
_SNAPSHOT_NAME = re.compile(r"snapshot\.([0-9a-f]{16})")
_UNFINISHED_NAME = re.compile(r"snapshot\.[0-9a-f]{16}.*" + re.escape(TMP_SUFFIX))  # a writer's file, tagged or not


class CorruptSnapshotError(Exception):
    """A snapshot file is damaged or incomplete; the message names the file and the reason."""


def snapshot_name(zxid: int) -> str:
    return f"snapshot.{zxid:016x}"


def write_snapshot(snap_dir: Path, zxid: int, records: Iterable[tuple[Any, ...]], between: Callable[[], None] | None = None,
                   *, fs: FileSystem = OS_FS) -> Path:  # fmt: skip
    """Stream ``records`` into ``snap_dir/snapshot.<zxid>`` durably; return its path.
    ``between`` is called before each group of records is taken (a child's priority).

    Raises:
        DiskFull, DiskFailure (``zabby.storage.files``), TypeError (a record msgpack cannot
        pack): the ``.tmp`` file is removed.
    """
    writer = SnapshotWriter(snap_dir, zxid, fs=fs)
    try:
        writer.add(records, between)
        return writer.finish()
    except BaseException:
        writer.discard()
        raise


class SnapshotWriter:
    """A snapshot file written as its records come, then either finished (durable, under its
    final name) or discarded.  A learner writes the leader's SNAP stream through one while the
    stream arrives, so installing it costs an fsync and a rename, not a second pass over the
    tree.  ``tmp_tag`` keeps two writers of one zxid (a SNAP and a snapshot of this server's
    own) from sharing a ``.tmp`` file.

    Raises (every method): DiskFull, DiskFailure (``zabby.storage.files``); ``add`` also
    TypeError for a record msgpack cannot pack.
    """

    def __init__(self, snap_dir: Path, zxid: int, *, tmp_tag: str = "", fs: FileSystem = OS_FS) -> None:
        self.zxid = zxid
        self.fs = fs
        self.path = Path(snap_dir) / snapshot_name(zxid)
        self.tmp = self.path.with_name(f"{self.path.name}{tmp_tag}{TMP_SUFFIX}")
        try:
            self._fd: int | None = fs.open(self.tmp, CREATE_OR_TRUNCATE)
        except OSError as exc:
            raise disk_error(exc, f"create {self.tmp}") from exc
        self._stream = _SnapshotStream(self._fd, zxid, str(self.tmp), fs)

    @property
    def count(self) -> int:
        """Records added so far."""
        return self._stream.count

    def add(self, records: Iterable[tuple[Any, ...]], between: Callable[[], None] | None = None) -> None:
        self._stream.add(records, between)

    def add_encoded(self, encoded: bytes | memoryview, count: int) -> None:
        """``count`` records already packed, one msgpack value after another (a SNAP stream's
        bytes as they arrived), written as they are."""
        self._stream.add_encoded(encoded, count)

    def finish(self) -> Path:
        """The trailer, an fsync, the final name and a directory fsync: the snapshot is durable."""
        assert self._fd is not None, "a snapshot writer finished twice, or after discard"
        self._stream.end()
        fsync(self._fd, str(self.tmp), fs=self.fs)
        self.fs.close(self._fd)
        self._fd = None
        self.fs.replace(self.tmp, self.path)
        fsync_dir(self.path.parent, fs=self.fs)
        return self.path

    def discard(self) -> None:
        """Close and remove the unfinished file (a no-op once finished or discarded)."""
        if self._fd is None:
            return
        self.fs.close(self._fd)
        self._fd = None
        self.fs.unlink(self.tmp, missing_ok=True)


def write_snapshot_stream(fd: int, zxid: int, records: Iterable[tuple[Any, ...]]) -> None:
    """The bytes of a snapshot file (header, records, trailer) written to ``fd``: a file, or
    a pipe that streams the snapshot elsewhere (``zabby-admin snapshot save``)."""
    stream = _SnapshotStream(fd, zxid, "a snapshot stream")
    stream.add(records)
    stream.end()


class _SnapshotStream:
    """The file format on an open fd: the header first, records packed and written in ~1 MiB
    chunks with the CRC kept as they go, and at ``end`` the trailer."""

    def __init__(self, fd: int, zxid: int, what: str, fs: FileSystem = OS_FS) -> None:
        self._fd = fd
        self._fs = fs
        self._what = what  # for errors: the file's name
        self._pack = msgpack.Packer(use_bin_type=True).pack
        self._buffer = bytearray(_HEADER.pack(MAGIC, VERSION, zxid))
        self._crc = 0
        self.count = 0

    def add(self, records: Iterable[tuple[Any, ...]], between: Callable[[], None] | None = None) -> None:
        """Pack ``records`` a group at a time; ``between()`` before each group is taken."""
        records = iter(records)
        pack, buffer, take = self._pack, self._buffer, GROUP_RECORDS_FIRST
        while True:
            if between is not None:
                between()
            group = tuple(islice(records, take))
            if not group:
                return
            packed = b"".join(map(pack, group))
            buffer += packed
            self.count += len(group)
            if len(buffer) >= CHUNK_BYTES:
                self._flush()
            take = max(1, min(GROUP_RECORDS_MAX, take * CHUNK_BYTES // (4 * len(packed))))

    def add_encoded(self, encoded: bytes | memoryview, count: int) -> None:
        self._buffer += encoded
        self.count += count
        if len(self._buffer) >= CHUNK_BYTES:
            self._flush()

    def _flush(self) -> None:
        self._crc = zlib.crc32(self._buffer, self._crc)
        write_all(self._fd, self._buffer, self._what, fs=self._fs)
        self._buffer.clear()

    def end(self) -> None:
        buffer = self._buffer
        buffer += _TRAILER_START.pack(TRAILER_MARKER, self.count)
        buffer += _CRC.pack(zlib.crc32(buffer, self._crc))
        write_all(self._fd, buffer, self._what, fs=self._fs)
        buffer.clear()


def read_snapshot(path: Path, *, fs: FileSystem = OS_FS) -> tuple[int, Iterator[tuple[Any, ...]]]:
    """Check a snapshot whole, then return ``(zxid, records)``; records are unpacked lazily.

    Raises:
        CorruptSnapshotError: bad magic or version, truncated file, missing trailer, CRC
            mismatch (now), or undecodable records / wrong record count (while iterating).
    """
    path = Path(path)
    file_bytes = fs.size(path)
    if file_bytes < _HEADER.size + _TRAILER.size:
        raise CorruptSnapshotError(f"snapshot {path}: truncated ({file_bytes} bytes)")
    with fs.reader(path) as f:
        magic, version, zxid = _HEADER.unpack(f.read(_HEADER.size))
        if magic != MAGIC or version != VERSION:
            raise CorruptSnapshotError(f"snapshot {path}: bad magic {magic!r} or version {version}")
        f.seek(file_bytes - _TRAILER.size)
        marker, count, crc_expected = _TRAILER.unpack(f.read(_TRAILER.size))
        if marker != TRAILER_MARKER:
            raise CorruptSnapshotError(f"snapshot {path}: no trailer (truncated or not finished)")
        crc = _crc_of_prefix(f, file_bytes - _CRC.size, path)
    if crc != crc_expected:
        raise CorruptSnapshotError(f"snapshot {path}: CRC mismatch (file 0x{crc_expected:08x}, computed 0x{crc:08x})")
    return zxid, _unpack_records(path, file_bytes - _TRAILER.size, count, fs)


def _crc_of_prefix(f: Any, end_bytes: int, path: Path) -> int:
    f.seek(0)
    crc, remaining = 0, end_bytes
    while remaining > 0:
        chunk = f.read(min(CHUNK_BYTES, remaining))
        if not chunk:
            raise CorruptSnapshotError(f"snapshot {path}: shrank while being read")
        crc = zlib.crc32(chunk, crc)
        remaining -= len(chunk)
    return crc


def _unpack_records(path: Path, end_bytes: int, count_expected: int, fs: FileSystem) -> Iterator[tuple[Any, ...]]:
    unpacker = msgpack.Unpacker(raw=False, use_list=False, max_buffer_size=RECORD_BUFFER_BYTES)
    count = 0
    with fs.reader(path) as f:
        f.seek(_HEADER.size)
        remaining = end_bytes - _HEADER.size
        while remaining > 0:
            chunk = f.read(min(CHUNK_BYTES, remaining))
            remaining -= len(chunk)
            unpacker.feed(chunk)
            try:
                for record in unpacker:
                    count += 1
                    yield record
            except ValueError as error:  # msgpack's FormatError, ExtraData, StackError…
                raise CorruptSnapshotError(f"snapshot {path}: undecodable record {count}: {error}") from None
    if count != count_expected or unpacker.tell() != end_bytes - _HEADER.size:
        raise CorruptSnapshotError(
            f"snapshot {path}: {count} records decoded, trailer says {count_expected}"
            f" (or a partial record at the end)"
        )


def list_snapshots(snap_dir: Path, *, fs: FileSystem = OS_FS) -> list[tuple[int, Path]]:
    """``(zxid, path)`` of the snapshot files in ``snap_dir``, newest first (``.tmp`` ignored)."""
    found = []
    for name in fs.files(snap_dir):
        match = _SNAPSHOT_NAME.fullmatch(name)
        if match is not None:
            found.append((int(match.group(1), 16), Path(snap_dir) / name))
    return sorted(found, reverse=True)


def list_unfinished_snapshots(snap_dir: Path, *, fs: FileSystem = OS_FS) -> list[Path]:
    """The ``.tmp`` files of snapshots still being written, or left half written by a crash."""
    return sorted(Path(snap_dir) / name for name in fs.files(snap_dir) if _UNFINISHED_NAME.fullmatch(name))


def looks_complete(path: Path, *, fs: FileSystem = OS_FS) -> bool:
    """A cheap check (header and trailer only, no CRC): was this snapshot fully written?"""
    try:
        file_bytes = fs.size(path)
        with fs.reader(path) as f:
            head = f.read(_HEADER.size)
            f.seek(max(0, file_bytes - _TRAILER.size))
            tail = f.read(_TRAILER.size)
    except OSError:
        return False
    return (
        file_bytes >= _HEADER.size + _TRAILER.size
        and head[:4] == MAGIC
        and tail[:4] == TRAILER_MARKER
    )
