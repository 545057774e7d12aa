"""The servers' txn logs after a run, as ``zabby.tree.txns.Txn`` records, for the watch check.

zabby's logs are read with ``zabby.ops.logtool.dump`` (read-only).  ZooKeeper's are read
here: a ``log.<zxid>`` file is a header (``ZKLG``, version 2, dbid), then records of a CRC
(long), a length-prefixed buffer (TxnHeader, then the txn's jute record) and an end byte
``B``; the preallocated zeros after the last record read as a zero length.  Of each record
only what the changes model needs is decoded (``watch_checker._body_changes``): the path of
creates, deletes and setData, a multi's sub-txns, a closeSession's ephemerals; other bodies
are kept as their raw bytes (they make no change, and raw bytes still compare across logs).

A log read stops at its first damaged record: what came before is returned (a server killed
mid-append leaves a torn tail that its next start cuts).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from zabby.ops.errors import DataError, UsageError
from zabby.ops.logtool import dump
from zabby.opcodes import OpCode
from zabby.tree.txns import Txn

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


def zabby_log_txns(data_dir: Path) -> Iterator[Txn]:
    """Every txn of a zabby server's log, up to its first damage (none if it has no log)."""
    try:
        yield from dump(data_dir)
    except (DataError, UsageError):
        return


def zookeeper_log_txns(data_dir: Path) -> Iterator[Txn]:
    """Every txn of a ZooKeeper server's ``version-2/log.*`` files, in zxid order."""
    log_dir = data_dir / VERSION_DIR
    if not log_dir.is_dir():
        return
    files = sorted((int(p.name.split(".", 1)[1], 16), p) for p in log_dir.glob("log.*") if _hex_suffix(p.name))
    for _first, path in files:
        yield from _zookeeper_file(path.read_bytes())


def snapshot_zxids(data_dir: Path) -> list[int]:
    """The zxids of the snapshot files in ``data_dir/version-2`` (``snapshot.<hex zxid>``, for
    zabby and ZooKeeper alike)."""
    snap_dir = data_dir / VERSION_DIR
    if not snap_dir.is_dir():
        return []
    return sorted(int(p.name.split(".", 1)[1], 16) for p in snap_dir.glob("snapshot.*") if _hex_suffix(p.name))


def _hex_suffix(name: str) -> bool:
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
