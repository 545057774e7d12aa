"""Transaction records: what the log stores and every server applies in zxid order.

Grammar (each txn is one msgpack array; bodies are arrays too)::

    Txn          := [zxid, session_id, cxid, time_ms, type, body]
    body CREATE  := [path, data, acl, ephemeral_owner, parent_cversion]
    body DELETE  := [path]                      (also DELETE_CONTAINER)
    body SET_DATA:= [path, data, version]       (version = the new dataVersion)
    body SET_ACL := [path, acl, aversion]       (aversion = the new aclVersion)
    body CHECK   := [path, version]             (only inside MULTI)
    body MULTI   := [[type, body], ...]         (all applied or, as ERROR entries, none)
    body ERROR   := [err]
    body CREATE_SESSION := [timeout_ms, password]
    body CLOSE_SESSION  := [paths]              (the session's ephemerals, known at prep; nil where
                                                 their paths would pass maxTxnBytes: all it owns)

Bodies carry absolute values (new versions, the parent's new cversion), never increments, so
applying a txn depends only on the txn and the tree it meets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import msgpack

from zabby.opcodes import OpCode


class Txn(NamedTuple):
    zxid: int
    session_id: int
    cxid: int
    time_ms: int
    type: int
    body: tuple[Any, ...]


# The largest record the txn log, a peer frame or a snapshot holds.  Every reader refuses a
# larger one, and every writer stays below it: a txn by ``maxTxnBytes`` (at most this, and
# checked before the txn is proposed, after every expansion of its request), a frame of
# several txns by splitting, a snapshot's znode by what its txns could make of it.  So
# nothing written is refused when it is read back (a log record refused at recovery stops a
# server for good).
RECORD_BYTES_MAX = 64 * 2**20


# One Packer for every txn logged: msgpack.packb makes a new one, with a 1 MiB buffer, each
# time, which costs more than packing a txn (0.5 against 0.1 us).  Its buffer stays at the
# largest txn packed, which jute.maxbuffer bounds.  Safe across threads: pack() holds the
# GIL throughout, as nothing in a txn calls back into Python.
_pack = msgpack.Packer(use_bin_type=True).pack
# A txn's log record: the Packer's own method, with no Python frame around it (every server
# packs every txn it logs).
encode_txn: Callable[[Txn], bytes] = _pack


def decode_txn(raw: bytes) -> Txn:
    zxid, session_id, cxid, time_ms, txn_type, body = msgpack.unpackb(raw, raw=False, use_list=False)
    return Txn(zxid, session_id, cxid, time_ms, txn_type, body)


def txn_paths(txn_type: int, body: tuple[Any, ...]) -> list[str]:
    """The paths a txn touches (for pending-change bookkeeping)."""
    if txn_type == OpCode.MULTI:
        return [path for sub_type, sub_body in body[0] for path in txn_paths(sub_type, sub_body)]
    if txn_type == OpCode.CLOSE_SESSION:
        return list(body[0])
    if txn_type in (OpCode.CREATE_SESSION, OpCode.ERROR):
        return []
    return [body[0]]


def zxid_hex(zxid: int) -> str:
    return f"0x{zxid:x}"


# The last counter a leader proposes in its epoch: ZooKeeper never uses 0xffffffff, and a
# leader that reaches it steps down so that an election starts a new epoch (ZOOKEEPER-1277);
# one more would roll the counter into the epoch's bits, an epoch no election chose.
ZXID_COUNTER_LAST = 0xFFFFFFFE


def make_zxid(epoch: int, counter: int) -> int:
    return (epoch << 32) | counter


def zxid_epoch(zxid: int) -> int:
    return zxid >> 32


ZXID_COUNTER_MASK = 0xFFFFFFFF  # a zxid's low 32 bits: its counter within the epoch


def zxid_counter(zxid: int) -> int:
    return zxid & ZXID_COUNTER_MASK


def follows(last: int, zxid: int) -> bool:
    """True if ``zxid`` may come right after ``last`` in a log (no gap, no step back)."""
    if zxid_epoch(zxid) == zxid_epoch(last):
        return zxid == last + 1
    return zxid_epoch(zxid) > zxid_epoch(last) and zxid_counter(zxid) == 1
