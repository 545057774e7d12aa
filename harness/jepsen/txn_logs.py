"""The servers' txn logs during and after a run, as ``zabby.tree.txns.Txn`` records, for the
watch check.

A server's log does not keep its history: a zabby server that installs a leader's snapshot
deletes its whole log (``DataDir.install_snapshot``), a TRUNC deletes later segments, a purge
older ones.  ``LogKeeper`` therefore hard-links every log segment file of every server into a
folder of its own as soon as it sees it (every ``KEEP_POLL_S``), and notes every snapshot's
zxid: the links keep the files' contents (and see the truncations a server makes in place)
after the server unlinks them.  A server's kept history is every record of its kept files,
each file read on its own, merged by zxid (``server_txns``).

zabby's segments are read with ``zabby.storage.txnlog.read_segment`` (read-only).  ZooKeeper's
are read here: a ``log.<zxid>`` file is a header (``ZKLG``, version 2, dbid), then records of
a CRC (long), a length-prefixed buffer (TxnHeader, then the txn's jute record) and an end
byte ``B``; the preallocated zeros after the last record read as a zero length.  Of each
record only what the changes model needs is decoded (``watch_checker._body_changes``): the
path of creates, deletes and setData, a multi's sub-txns, a closeSession's ephemerals; other
bodies are kept as their raw bytes (they make no change, and raw bytes still compare).

A file's read stops at its first damaged record: what came before is used (a server killed
mid-append leaves a torn tail that its next start cuts).
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from zabby.ops.errors import DataError
from zabby.ops.logtool import decode_record
from zabby.opcodes import OpCode
from zabby.storage.txnlog import CorruptLogError, read_segment
from zabby.tree.txns import Txn

KEEP_POLL_S = 0.1
ZK_LOG_MAGIC = b"ZKLG"
ZK_LOG_HEADER = struct.Struct(">4sIq")
ZK_TXN_HEADER = struct.Struct(">qiqqi")  # clientId, cxid, zxid, time, type
END_OF_RECORD = 0x42
VERSION_DIR = "version-2"
PATH_FIRST = frozenset({OpCode.CREATE, OpCode.CREATE2, OpCode.CREATE_CONTAINER, OpCode.CREATE_TTL, OpCode.DELETE,
                        OpCode.DELETE_CONTAINER, OpCode.SET_DATA, OpCode.SET_ACL, OpCode.CHECK, OpCode.RECONFIG})  # fmt: skip


class JuteReader:
    """Big-endian jute primitives over one buffer; IndexError/struct.error past its end."""

    def __init__(self, data: bytes) -> None:
        self.data, self.offset = data, 0

    def take(self, fmt: str) -> Any:
        value = struct.unpack_from(fmt, self.data, self.offset)[0]
        self.offset += struct.calcsize(fmt)
        return value

    def int(self) -> int:
        return int(self.take(">i"))

    def buffer(self) -> bytes:
        length = self.int()
        if length < 0:
            return b""
        if self.offset + length > len(self.data):
            raise IndexError("a buffer past the record's end")
        chunk = self.data[self.offset : self.offset + length]
        self.offset += length
        return chunk

    def string(self) -> str:
        return self.buffer().decode("utf-8")

    def rest(self) -> bytes:
        return self.data[self.offset :]


class LogKeeper(threading.Thread):
    """Hard-links each server's log segments into ``keep_dir/server<sid>/`` (named
    ``<file>.<inode>``: a name a server reuses is another file) and notes its snapshots' zxids,
    until ``stop()``, which takes a last look."""

    def __init__(self, data_dirs: dict[int, Path], keep_dir: Path) -> None:
        super().__init__(name="log-keeper", daemon=True)
        self.data_dirs, self.keep_dir = data_dirs, keep_dir
        self.snapshots: dict[int, set[int]] = {sid: set() for sid in data_dirs}
        self.error = ""
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(KEEP_POLL_S):
            self.look()

    def look(self) -> None:
        for sid, data_dir in self.data_dirs.items():
            version_dir = data_dir / VERSION_DIR
            kept = self.keep_dir / f"server{sid}"
            kept.mkdir(parents=True, exist_ok=True)
            try:
                names = os.listdir(version_dir)
            except FileNotFoundError:
                continue
            for name in names:
                if name.startswith("snapshot.") and _hex_suffix(name):
                    self.snapshots[sid].add(int(name.split(".", 1)[1], 16))
                elif name.startswith("log.") and _hex_suffix(name):
                    self._link(version_dir / name, kept, name)

    def _link(self, source: Path, kept: Path, name: str) -> None:
        try:
            target = kept / f"{name}.{os.stat(source).st_ino}"
            if not target.exists():
                os.link(source, target)
        except FileNotFoundError:
            pass  # deleted between the listing and the link
        except OSError as exc:
            self.error = f"cannot keep {source}: {exc}"

    def stop(self) -> None:
        self._stop_event.set()
        self.join(KEEP_POLL_S * 20)
        self.look()

    def server_txns(self, sid: int, kind: str) -> list[Txn]:
        """Every record of server ``sid``'s kept files (a "zabby" or a "zookeeper" server's), by
        zxid (each file read on its own)."""
        read = _zabby_file if kind == "zabby" else _zookeeper_path
        merged: dict[int, Txn] = {}
        for path in sorted((self.keep_dir / f"server{sid}").glob("log.*")):
            for txn in read(path):
                merged.setdefault(txn.zxid, txn)
        return [merged[zxid] for zxid in sorted(merged)]


def _zabby_file(path: Path) -> Iterator[Txn]:
    try:
        for zxid, payload, _end in read_segment(path):
            yield decode_record(path, zxid, payload)
    except (CorruptLogError, DataError):
        return


def _zookeeper_path(path: Path) -> Iterator[Txn]:
    yield from _zookeeper_file(path.read_bytes())


def _hex_suffix(name: str) -> bool:
    """``name`` is ``<kind>.<hex>`` (not a ``.tmp``, say)."""
    try:
        int(name.split(".", 1)[1], 16)
    except (IndexError, ValueError):
        return False
    return True


def _zookeeper_file(data: bytes) -> Iterator[Txn]:
    if len(data) < ZK_LOG_HEADER.size or ZK_LOG_HEADER.unpack_from(data)[0] != ZK_LOG_MAGIC:
        return
    offset = ZK_LOG_HEADER.size
    while offset + 12 <= len(data):
        length = struct.unpack_from(">i", data, offset + 8)[0]
        end = offset + 12 + length
        if length <= 0 or end >= len(data) or data[end] != END_OF_RECORD:
            return  # the preallocated zeros, or a torn tail
        try:
            yield _zookeeper_txn(data[offset + 12 : end])
        except (IndexError, struct.error, UnicodeDecodeError):
            return
        offset = end + 1


def _zookeeper_txn(record: bytes) -> Txn:
    session_id, cxid, zxid, time_ms, txn_type = ZK_TXN_HEADER.unpack_from(record)
    reader = JuteReader(record[ZK_TXN_HEADER.size :])
    return Txn(zxid, session_id, cxid, time_ms, txn_type, _zookeeper_body(txn_type, reader))


def _zookeeper_body(txn_type: int, reader: JuteReader) -> tuple[Any, ...]:
    """The fields the changes model reads, in zabby's body grammar (path first; a multi's
    ``[[type, body], ...]``; a closeSession's ``[paths]``); the raw record otherwise."""
    if txn_type in PATH_FIRST:
        return (reader.string(), reader.rest())
    if txn_type == OpCode.MULTI:
        subs = []
        for _ in range(reader.int()):
            sub_type = reader.int()
            subs.append((sub_type, _zookeeper_body(sub_type, JuteReader(reader.buffer()))))
        return (tuple(subs),)
    if txn_type == OpCode.CLOSE_SESSION:
        if not reader.rest():
            return ((),)  # logged without its ephemerals (zookeeper.closeSessionTxn.enabled=false)
        return (tuple(reader.string() for _ in range(reader.int())),)
    return (reader.rest(),)
