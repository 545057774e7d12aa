"""ZooKeeper's data directory (``version-2/``) as ZooKeeper 3.5 to 3.9 write it: snapshot files
read and checked the way ``FileSnap`` reads them, txn log files read the way
``FileTxnLog.FileTxnIterator`` reads them, and snapshot files written for ZooKeeper to start
from.  The tree inside a snapshot and the txns inside a log are ``zabby.wire.zk_snapshot`` and
``zabby.wire.zk_txn``; the conversion that uses both is ``zabby.ops.zookeeper``.

File formats (jute, big-endian)::

    snapshot name := "snapshot." hex(zxid) [".gz" | ".snappy"]   hex as Long.toHexString (no padding)
    snapshot      := FileHeader tree seal [ZxidDigest seal] [lastProcessedZxid:long seal]
    FileHeader    := magic:int version:int(2) dbid:long(-1)       magic "ZKSN" (snapshot), "ZKLG" (log)
    seal          := checksum:long "/":ustring                     Adler32 of every byte before it
    ZxidDigest    := zxid:long digestVersion:int digest:long       (3.6+; digestVersion < 2: digest:ustring, hex)
                     the digest at the end of the serialization; lastProcessedZxid: 3.9+

    log name      := "log." hex(zxid of its first txn)
    log           := FileHeader record* padding
    record        := checksum:long entry:buffer "B":byte           checksum = Adler32(entry)
    padding       := zero bytes (preallocated); a record of length 0 ends the file

How ZooKeeper reads them, which this follows (``FileSnap.deserialize``, ``FileTxnIterator``):

- Snapshots newest first; one is a candidate if it ends with the seal's ``"/"`` (a ``.gz``
  one: if it starts with gzip's magic).  A candidate that fails to parse or whose checksum
  differs is skipped and the next older one is tried.
- A log ends, and reading goes on with the next log file, at the end of the file, at a
  record of length 0 (padding), at a record cut short, or at a record whose ``B`` is
  missing: a torn write.  A record whose checksum differs, or whose length cannot be, is
  damage: ZooKeeper refuses to start (``CRC check failed``), and so does this reader.
"""

from __future__ import annotations

import gzip
import mmap
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, NamedTuple

from zabby.storage.datadir import DigestBeside
from zabby.storage.files import fsync_dir, write_atomically, write_chunks_atomically
from zabby.wire import zk_snapshot
from zabby.wire.zk_snapshot import ZkTreeError
from zabby.wire.zk_txn import DIGEST_VERSION, ENTRY_BYTES_MAX, ZkTxn, ZkTxnError, decode_entry

SNAPSHOT_PREFIX, LOG_PREFIX = "snapshot", "log"
SNAP_MAGIC, LOG_MAGIC = b"ZKSN", b"ZKLG"
FILE_VERSION = 2
DB_ID = -1
ACCEPTED_EPOCH, CURRENT_EPOCH = "acceptedEpoch", "currentEpoch"
SNAPSHOTS_TRIED_MAX = 100  # FileSnap.deserialize: "we run through 100 snapshots"
GZIP_MAGIC = b"\x1f\x8b"

_FILE_HEADER = struct.Struct(">4siq")
_SEAL = struct.Struct(">qi1s")  # checksum, then the "/" ustring: length 1, "/"
_ZXID_DIGEST = struct.Struct(">qiq")
_LONG = struct.Struct(">q")
_RECORD_HEAD = struct.Struct(">qi")  # checksum, entry length


class ZkFileError(Exception):
    """A ZooKeeper file that cannot be read as ZooKeeper would: the message names the file,
    the offset and what is wrong there."""

    def __init__(self, path: Path, offset: int, reason: str) -> None:
        super().__init__(f"{path}: {reason} at offset {offset}")
        self.path = path
        self.offset = offset
        self.reason = reason


class ZkUnsupportedError(ZkFileError):
    """A file ZooKeeper reads and this reader does not (a snappy-compressed snapshot)."""


def zxid_of_name(name: str, prefix: str) -> int | None:
    """The zxid in a file name ``prefix.<hex>[.ext]`` (``Util.getZxidFromName``), or None."""
    parts = name.split(".")
    if len(parts) < 2 or parts[0] != prefix:
        return None
    try:
        return int(parts[1], 16)
    except ValueError:
        return None


def _named(directory: Path, prefix: str) -> list[tuple[int, Path]]:
    found = []
    for path in directory.iterdir() if directory.is_dir() else ():
        zxid = zxid_of_name(path.name, prefix)
        if zxid is not None and path.is_file():
            found.append((zxid, path))
    return sorted(found)


# ----------------------------------------------------------------------------- snapshots
@dataclass(slots=True)
class ZkSnapshot:
    """One snapshot, parsed and checked whole."""

    path: Path
    zxid: int  # from its name: the last txn applied when the (fuzzy) serialization began
    sessions: dict[int, int]  # id -> timeout_ms
    nodes: dict[str, list[Any]]  # path -> node, root first, parents before children (zk_snapshot.NODE_FIELDS)
    owned: list[str]  # the paths of the nodes with an ephemeralOwner (ephemerals, containers, TTL nodes)
    digest_sum: int  # the tree digest of ``nodes`` (computed when asked for, else 0)
    digest: tuple[int, int, int] | None = None  # ZxidDigest: (zxid, version, digest), when written and not empty
    digest_written: bool = False  # a ZxidDigest, empty or not: the writer had digest.enabled (its logs have digests)
    last_processed_zxid: int | None = None  # 3.9+
    file_bytes: int = 0


def snapshot_candidates(snap_dir: Path) -> list[tuple[int, Path]]:
    """``(zxid, path)`` of the snapshot files ZooKeeper would try, newest first, at most
    ``SNAPSHOTS_TRIED_MAX`` (``FileSnap.findNValidSnapshots``)."""
    found = [(zxid, path) for zxid, path in reversed(_named(snap_dir, SNAPSHOT_PREFIX)) if looks_valid(path)]
    return found[:SNAPSHOTS_TRIED_MAX]


def looks_valid(path: Path) -> bool:
    """``SnapStream.isValidSnapshot``: a gzip one starts with gzip's magic, a plain one ends
    with its seal's ``"/"``; a snappy one, with snappy's magic (read later: unsupported)."""
    try:
        with path.open("rb") as f:
            if path.name.endswith(".gz"):
                return f.read(2) == GZIP_MAGIC
            if path.name.endswith(".snappy"):
                return f.read(8) == b"\x82SNAPPY\x00"
            size = f.seek(0, 2)
            if size < 10:
                return False
            f.seek(size - 5)
            return f.read(5) == b"\x00\x00\x00\x01/"
    except OSError:
        return False


def snapshot_bytes(path: Path) -> bytes:
    """The snapshot's bytes as its checksum covers them: a ``.gz`` file decompressed."""
    if path.name.endswith(".snappy"):
        raise ZkUnsupportedError(path, 0, "a snappy-compressed snapshot (snapshot.compression.method=snappy), which this "
                                   "tool does not read: restart ZooKeeper once with the method unset, so it writes a plain snapshot")  # fmt: skip
    raw = path.read_bytes()
    if not path.name.endswith(".gz"):
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise ZkFileError(path, 0, f"not a whole gzip stream ({exc})") from None


class _Seals:
    """Checks a file's seals in order: each covers every byte before it, the earlier seals
    included, so the checksum is carried from one to the next rather than computed again."""

    def __init__(self, path: Path, buf: bytes) -> None:
        self.path, self.buf = path, buf
        self.checksum, self.checked = 1, 0  # Adler32's start

    def check(self, pos: int, what: str) -> int:
        """The offset after the seal at ``pos``."""
        path, buf = self.path, self.buf
        try:
            stored, length, slash = _SEAL.unpack_from(buf, pos)
        except struct.error:
            raise ZkFileError(path, pos, f"truncated before the checksum after the {what}") from None
        if length != 1 or slash != b"/":
            raise ZkFileError(path, pos, f"no seal after the {what}")
        self.checksum = zlib.adler32(memoryview(buf)[self.checked : pos], self.checksum)
        self.checked = pos
        if stored != self.checksum:
            raise ZkFileError(path, pos, f"checksum mismatch after the {what} (damaged)")
        return pos + _SEAL.size


def _read_trailers(seals: _Seals, pos: int) -> tuple[tuple[int, int, int] | None, int | None]:
    """The optional ZxidDigest (``(0, version, 0)`` when written empty) and lastProcessedZxid
    after the tree's seal, each sealed; told apart by what is left, as a reader with both
    features on reads them."""
    path, buf = seals.path, seals.buf
    digest = last_zxid = None
    last_zxid_bytes = _LONG.size + _SEAL.size
    try:
        if len(buf) - pos > last_zxid_bytes:
            zxid, version = struct.unpack_from(">qi", buf, pos)
            if version >= 2:
                value, end = _LONG.unpack_from(buf, pos + 12)[0], pos + 20
            else:  # the digest as a hex string
                value, end = _hex_digest(path, buf, pos + 12)
            digest, pos = (zxid, version, value), seals.check(end, "digest")
        if len(buf) - pos == last_zxid_bytes:
            last_zxid = _LONG.unpack_from(buf, pos)[0]
            pos = seals.check(pos + _LONG.size, "last processed zxid")
    except struct.error:
        raise ZkFileError(path, pos, "a trailer cut short") from None
    if pos != len(buf):
        raise ZkFileError(path, pos, f"{len(buf) - pos} bytes after the trailers that no ZooKeeper 3.5-3.9 writes")
    return digest, last_zxid


def _hex_digest(path: Path, buf: bytes, pos: int) -> tuple[int, int]:
    length = struct.unpack_from(">i", buf, pos)[0]
    try:
        return int(buf[pos + 4 : pos + 4 + length].decode("ascii"), 16), pos + 4 + length
    except (ValueError, UnicodeDecodeError):
        raise ZkFileError(path, pos, "an old-style digest that is not hex") from None


def read_snapshot(path: Path, *, digest_beside: Callable[[Callable[[], int]], DigestBeside] | None = None) -> ZkSnapshot:
    """Parse and check one snapshot file whole, and add up its tree digest when it carries
    one (a 3.6+ writer had digest.enabled).  ``digest_beside(compute)`` starts ``compute``
    elsewhere (``zabby.server.process.children.DigestChild``: on the other core, while this builds
    the nodes); if it cannot, or it gives None, the digest is computed here.

    Raises:
        ZkFileError: not a snapshot, truncated, malformed, or a checksum mismatch.
    """
    zxid = zxid_of_name(path.name, SNAPSHOT_PREFIX)
    if zxid is None:
        raise ZkFileError(path, 0, "not a snapshot.<zxid> file name")
    buf = snapshot_bytes(path)
    magic = buf[:4]
    if len(buf) < _FILE_HEADER.size or magic != SNAP_MAGIC:
        raise ZkFileError(path, 0, f"not a ZooKeeper snapshot (magic {magic!r})")
    beside = None
    try:
        sessions, pos = zk_snapshot.parse_sessions(buf, _FILE_HEADER.size)
        acls, nodes_at = zk_snapshot.parse_acl_map(buf, pos)
        beside = _started(digest_beside, lambda: zk_snapshot.nodes_digest(buf, nodes_at))
        nodes, owned, pos = zk_snapshot.parse_nodes(buf, nodes_at, acls)
        seals = _Seals(path, buf)
        zxid_digest, last_zxid = _read_trailers(seals, seals.check(pos, "tree"))
        digest_sum = 0
        if zxid_digest is not None:  # the writer had digest.enabled: its logs carry digests to compare with
            found = beside.result() if beside is not None else None
            digest_sum = found if found is not None else zk_snapshot.nodes_digest(buf, nodes_at)
    except ZkTreeError as exc:
        raise ZkFileError(path, exc.offset, exc.reason) from None
    finally:
        if beside is not None:
            beside.abandon()
    written, zxid_digest = zxid_digest is not None, zxid_digest if zxid_digest is not None and zxid_digest[0] > 0 else None
    return ZkSnapshot(path, zxid, sessions, nodes, owned, digest_sum, zxid_digest, written, last_zxid, len(buf))


def _started(digest_beside: Callable[[Callable[[], int]], DigestBeside] | None, compute: Callable[[], int]) -> DigestBeside | None:
    if digest_beside is None:
        return None
    try:
        return digest_beside(compute)
    except OSError:  # no fork here: computed in this process
        return None


def snapshot_name(zxid: int) -> str:
    return f"{SNAPSHOT_PREFIX}.{zxid:x}"


def _sealed(chunks: Iterable[bytes], digest: tuple[int, int, int] | None) -> Iterator[bytes]:
    checksum = 1  # Adler32's start
    for chunk in chunks:
        checksum = zlib.adler32(chunk, checksum)
        yield chunk
    seal = _SEAL.pack(checksum, 1, b"/")
    yield seal
    if digest is not None:
        trailer = _ZXID_DIGEST.pack(*digest)
        checksum = zlib.adler32(trailer, zlib.adler32(seal, checksum))
        yield trailer + _SEAL.pack(checksum, 1, b"/")


def write_snapshot(snap_dir: Path, zxid: int, sessions: dict[int, int], records: list[tuple[Any, ...]],
                   digest: tuple[int, int] | None) -> Path:  # fmt: skip
    """``snap_dir/snapshot.<zxid>`` in ZooKeeper 3.6+'s format, durably.  ``digest``: the
    ZxidDigest, ``(zxid, tree digest)`` (None: none, as digest.enabled=false writes)."""
    path = snap_dir / snapshot_name(zxid)
    header = _FILE_HEADER.pack(SNAP_MAGIC, FILE_VERSION, DB_ID)
    body = zk_snapshot.serialize_tree(sessions, records)
    trailer = None if digest is None else (digest[0], DIGEST_VERSION, digest[1])
    write_chunks_atomically(path, _sealed(chain((header,), body), trailer))
    return path


# ----------------------------------------------------------------------------- txn logs
def log_files(log_dir: Path) -> list[tuple[int, Path]]:
    """``(first zxid, path)`` of every ``log.*`` file, oldest first."""
    return _named(log_dir, LOG_PREFIX)


def logs_from(log_dir: Path, zxid: int) -> list[tuple[int, Path]]:
    """The log files ZooKeeper reads to find the txns from ``zxid`` on, oldest first: every
    file named ``zxid`` or later, and the newest one named before it
    (``FileTxnIterator.init``)."""
    files = log_files(log_dir)
    before = [entry for entry in files if entry[0] < zxid]
    return before[-1:] + [entry for entry in files if entry[0] >= zxid]


@dataclass(slots=True)
class LogRecord:
    offset: int
    txn: ZkTxn


@dataclass(slots=True)
class LogFile:
    """One log file read as ZooKeeper reads it: ``records()`` yields its txns; afterwards
    ``end`` says how it ended (a torn write, padding, or the end of the file)."""

    path: Path
    end: str = ""
    end_offset: int = 0
    torn: bool = False  # a record cut short or without its end marker: a write the crash tore

    def records(self) -> Iterator[LogRecord]:
        """Mapped, not read: ZooKeeper preallocates 64 MB of zeros, and only the pages up to
        the first zero record are touched."""
        with self.path.open("rb") as f:
            size = f.seek(0, 2)
            if size < _FILE_HEADER.size:
                raise ZkFileError(self.path, 0, f"only {size} bytes, not a whole file header (ZooKeeper does not start from this either)")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                yield from self._records(mapped)

    def _records(self, buf: Any) -> Iterator[LogRecord]:
        if len(buf) < _FILE_HEADER.size:
            raise ZkFileError(self.path, 0, f"only {len(buf)} bytes, not a whole file header (ZooKeeper does not start from this either)")
        magic = buf[:4]
        if magic != LOG_MAGIC:
            raise ZkFileError(self.path, 0, f"not a ZooKeeper txn log (magic {magic!r})")
        pos = _FILE_HEADER.size
        while True:
            ended = self._ended(buf, pos)
            if ended is not None:
                self.end, self.end_offset = ended, pos
                return
            checksum, length = _RECORD_HEAD.unpack_from(buf, pos)
            entry_at = pos + _RECORD_HEAD.size
            entry = buf[entry_at : entry_at + length]
            if checksum != zlib.adler32(entry):
                raise ZkFileError(self.path, pos, "checksum mismatch (CRC check failed: a damaged record, ZooKeeper refuses it too)")
            yield LogRecord(pos, self._decode(entry, pos))
            pos = entry_at + length + 1

    def _ended(self, buf: bytes, pos: int) -> str | None:
        """Why the log ends at ``pos``, or None if a whole record is there."""
        if pos + _RECORD_HEAD.size > len(buf):
            self.torn = pos < len(buf)
            return "a record header cut short" if self.torn else "the end of the file"
        _, length = _RECORD_HEAD.unpack_from(buf, pos)
        if length == 0:
            return "padding"
        if length < 0 or length > ENTRY_BYTES_MAX:
            raise ZkFileError(self.path, pos, f"a record length of {length} (damaged)")
        end = pos + _RECORD_HEAD.size + length
        if end >= len(buf) or buf[end] != 0x42:  # 'B', the end-of-record marker
            self.torn = True
            return "a record cut short" if end >= len(buf) else "a record without its end marker"
        return None

    def _decode(self, entry: bytes, pos: int) -> ZkTxn:
        try:
            return decode_entry(entry)
        except ZkTxnError as exc:
            raise ZkFileError(self.path, pos, f"a record that is not a txn: {exc}") from None


class Epochs(NamedTuple):
    accepted: int | None
    current: int | None


def read_epochs(snap_dir: Path) -> Epochs:
    """ZooKeeper's acceptedEpoch and currentEpoch files (a quorum member's; None where absent)."""
    values: list[int | None] = []
    for name in (ACCEPTED_EPOCH, CURRENT_EPOCH):
        try:
            text = (snap_dir / name).read_text(encoding="ascii").strip()
        except FileNotFoundError:
            values.append(None)
            continue
        except (OSError, UnicodeDecodeError) as exc:
            raise ZkFileError(snap_dir / name, 0, f"unreadable ({exc})") from None
        if not text.isdigit():
            raise ZkFileError(snap_dir / name, 0, f"not a decimal epoch: {text[:40]!r}")
        values.append(int(text))
    return Epochs(*values)


def write_epochs(snap_dir: Path, accepted: int, current: int) -> None:
    """ZooKeeper's epoch files (decimal, no newline, as ``QuorumPeer.writeLongToFile``)."""
    for name, value in ((ACCEPTED_EPOCH, accepted), (CURRENT_EPOCH, current)):
        write_atomically(snap_dir / name, str(value).encode("ascii"))
    fsync_dir(snap_dir)
