"""Byte-level differential: the same raw jute requests, one of every client opcode (successes
and errors), to ZooKeeper 3.8 and to zabby; every reply frame and watch event must be the
same bytes once the values that differ by nature (zxids, times, session ids) are masked.

This checks what ZooKeeper's own Java client reads, not what kazoo happens to tolerate: the
Java client reads a response record for some ops kazoo reads nothing for (addWatch's
ErrorResponse), and a null buffer is not an empty one.  How a reply is masked: its header's
zxid is zeroed; its body is read as the op's response record (``jute.RESPONSE_RECORDS``),
which must give back the body's exact bytes when written again (nothing left over, nothing
missing), and each Stat in it loses its zxids, times and owner; bodies of ops with no
response record are compared as they are (they must be empty on both).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from harness.local.jute_session import OPEN_ACL, JuteSession
from zabby.opcodes import OpCode
from zabby.wire import jute

ROOT = "/wire"

# (name, op, request record): run in order on one session; the tree starts without ROOT.
Step = tuple[str, int, jute.Record | None]


def _create(path: str, data: bytes | None = b"x", flags: int = 0) -> jute.CreateRequest:
    return jute.CreateRequest(path, data, OPEN_ACL, flags)


def steps() -> list[Step]:
    r = ROOT
    get_data, get_children = jute.GetDataRequest, jute.GetChildrenRequest
    multi_ok = jute.MultiRequest([(OpCode.CREATE, _create(f"{r}/m1")), (OpCode.CREATE2, _create(f"{r}/m2")),
                                  (OpCode.CREATE, _create(f"{r}/mnull", None)), (OpCode.SET_DATA, jute.SetDataRequest(f"{r}/mnull", None, -1)),
                                  (OpCode.SET_DATA, jute.SetDataRequest(f"{r}/m1", b"y", 0)),
                                  (OpCode.CHECK, jute.CheckVersionRequest(f"{r}/m2", 0)),
                                  (OpCode.DELETE, jute.DeleteRequest(f"{r}/m2", -1))])  # fmt: skip
    multi_failed = jute.MultiRequest([(OpCode.CREATE, _create(f"{r}/m3")), (OpCode.CHECK, jute.CheckVersionRequest(f"{r}/m1", 7)),
                                      (OpCode.DELETE, jute.DeleteRequest(f"{r}/nope", -1))])  # fmt: skip
    multi_read = jute.MultiRequest([(OpCode.GET_DATA, get_data(f"{r}/m1", False)), (OpCode.GET_CHILDREN, get_children(r, False)),
                                    (OpCode.GET_DATA, get_data(f"{r}/nope", False)), (OpCode.GET_DATA, get_data(f"{r}/null", False)),
                                    (OpCode.GET_DATA, get_data(f"{r}/mnull", False))])  # fmt: skip
    return [
        ("create", OpCode.CREATE, _create(r)),
        ("create exists", OpCode.CREATE, _create(r)),
        ("create no parent", OpCode.CREATE, _create(f"{r}/a/b")),
        ("create bad path", OpCode.CREATE, _create(f"{r}/")),
        ("create null data", OpCode.CREATE, _create(f"{r}/null", None)),
        ("create empty data", OpCode.CREATE, _create(f"{r}/empty", b"")),
        ("create sequential", OpCode.CREATE, _create(f"{r}/seq-", b"s", 2)),
        ("create2", OpCode.CREATE2, _create(f"{r}/c2")),
        ("create2 exists", OpCode.CREATE2, _create(f"{r}/c2")),
        ("create container", OpCode.CREATE_CONTAINER, _create(f"{r}/box", b"", 4)),
        ("create ttl", OpCode.CREATE_TTL, jute.CreateTTLRequest(f"{r}/ttl", b"t", OPEN_ACL, 5, 60_000)),
        ("create ephemeral", OpCode.CREATE, _create(f"{r}/eph", b"e", 1)),
        ("create child of ephemeral", OpCode.CREATE, _create(f"{r}/eph/x")),
        ("exists", OpCode.EXISTS, jute.ExistsRequest(r, False)),
        ("exists missing", OpCode.EXISTS, jute.ExistsRequest(f"{r}/nope", False)),
        ("getData", OpCode.GET_DATA, get_data(r, False)),
        ("getData null", OpCode.GET_DATA, get_data(f"{r}/null", False)),
        ("getData empty", OpCode.GET_DATA, get_data(f"{r}/empty", False)),
        ("getData missing", OpCode.GET_DATA, get_data(f"{r}/nope", False)),
        ("setData", OpCode.SET_DATA, jute.SetDataRequest(r, b"xy", -1)),
        ("setData null", OpCode.SET_DATA, jute.SetDataRequest(f"{r}/empty", None, -1)),
        ("getData after null set", OpCode.GET_DATA, get_data(f"{r}/empty", False)),
        ("setData bad version", OpCode.SET_DATA, jute.SetDataRequest(r, b"z", 9)),
        ("setData missing", OpCode.SET_DATA, jute.SetDataRequest(f"{r}/nope", b"z", -1)),
        ("getACL", OpCode.GET_ACL, jute.GetACLRequest(r)),
        ("getACL missing", OpCode.GET_ACL, jute.GetACLRequest(f"{r}/nope")),
        ("setACL", OpCode.SET_ACL, jute.SetACLRequest(f"{r}/c2", OPEN_ACL, -1)),
        ("setACL bad version", OpCode.SET_ACL, jute.SetACLRequest(f"{r}/c2", OPEN_ACL, 5)),
        ("getChildren", OpCode.GET_CHILDREN, get_children(f"{r}/c2", False)),
        ("getChildren missing", OpCode.GET_CHILDREN, get_children(f"{r}/nope", False)),
        ("getChildren2", OpCode.GET_CHILDREN2, jute.GetChildren2Request(f"{r}/c2", False)),
        ("sync", OpCode.SYNC, jute.SyncRequest(r)),
        ("multi", OpCode.MULTI, multi_ok),
        ("multi failed", OpCode.MULTI, multi_failed),
        ("multiRead", OpCode.MULTI_READ, multi_read),
        ("getAllChildrenNumber", OpCode.GET_ALL_CHILDREN_NUMBER, jute.GetAllChildrenNumberRequest(r)),
        ("getAllChildrenNumber missing", OpCode.GET_ALL_CHILDREN_NUMBER, jute.GetAllChildrenNumberRequest(f"{r}/nope")),
        ("getEphemerals", OpCode.GET_EPHEMERALS, jute.GetEphemeralsRequest(r)),
        ("getEphemerals none", OpCode.GET_EPHEMERALS, jute.GetEphemeralsRequest("/elsewhere")),
        ("addWatch persistent", OpCode.ADD_WATCH, jute.AddWatchRequest(f"{r}/c2", 0)),
        ("addWatch recursive", OpCode.ADD_WATCH, jute.AddWatchRequest(r, 1)),
        ("addWatch missing node", OpCode.ADD_WATCH, jute.AddWatchRequest(f"{r}/later", 0)),
        ("setData fires", OpCode.SET_DATA, jute.SetDataRequest(f"{r}/c2", b"w", -1)),
        ("create fires", OpCode.CREATE, _create(f"{r}/later")),
        ("checkWatches", OpCode.CHECK_WATCHES, jute.CheckWatchesRequest(f"{r}/c2", 3)),
        ("checkWatches none", OpCode.CHECK_WATCHES, jute.CheckWatchesRequest(f"{r}/nope", 1)),
        ("exists watch", OpCode.EXISTS, jute.ExistsRequest(f"{r}/empty", True)),
        ("removeWatches data", OpCode.REMOVE_WATCHES, jute.RemoveWatchesRequest(f"{r}/empty", 2)),
        ("removeWatches none", OpCode.REMOVE_WATCHES, jute.RemoveWatchesRequest(f"{r}/empty", 2)),
        ("removeWatches any", OpCode.REMOVE_WATCHES, jute.RemoveWatchesRequest(f"{r}/c2", 3)),
        ("whoAmI", OpCode.WHO_AM_I, None),
        ("setWatches", OpCode.SET_WATCHES, jute.SetWatches(0, [f"{r}/m1"], [f"{r}/nope"], [r])),
        ("setWatches2", OpCode.SET_WATCHES2, jute.SetWatches2(0, [], [], [], [f"{r}/c2"], [])),
        ("delete not empty", OpCode.DELETE, jute.DeleteRequest(r, -1)),
        ("delete bad version", OpCode.DELETE, jute.DeleteRequest(f"{r}/c2", 9)),
        ("delete missing", OpCode.DELETE, jute.DeleteRequest(f"{r}/nope", -1)),
        ("delete", OpCode.DELETE, jute.DeleteRequest(f"{r}/c2", -1)),
        ("reconfig standalone", OpCode.RECONFIG, jute.ReconfigRequest("server.9=127.0.0.1:1:2;3", None, None, -1)),
        ("auth bad scheme", OpCode.AUTH, jute.AuthPacket(0, "nosuchscheme", b"x")),
    ]


# Ops whose request header carries a fixed xid (ZooKeeper's client sends them so).
FIXED_XIDS: dict[int, int] = {OpCode.SET_WATCHES: -8, OpCode.SET_WATCHES2: -8, OpCode.AUTH: -4}
_MASKED_STAT_FIELDS = ("czxid", "mzxid", "ctime", "mtime", "ephemeral_owner", "pzxid")


def _masked(value: Any) -> Any:
    """Stats without zxids, times and owner; children sorted (ZooKeeper's come in a hash
    set's order, which no client may rely on)."""
    if isinstance(value, jute.Stat):
        return dataclasses.replace(value, **dict.fromkeys(_MASKED_STAT_FIELDS, 0))
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return sorted(value)
    if isinstance(value, jute.MultiResponse):
        return jute.MultiResponse([(op, err, _masked(record)) for op, err, record in value.results])
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: _masked(getattr(value, f.name)) for f in dataclasses.fields(value)})
    return value


def _record_bytes(record: jute.Record) -> bytes:
    writer = jute.Writer()
    record.write(writer)
    return writer.getvalue()


def normalised(op: int | None, payload: bytes) -> tuple[int, int, str, bytes]:
    """(xid, err, what the body is, the body's bytes masked) of one reply or event frame."""
    header_size = 16  # ReplyHeader: xid, zxid, err
    header = jute.ReplyHeader.decode(payload[:header_size])
    body = payload[header_size:]
    if header.xid == jute.XID_NOTIFICATION:
        return header.xid, header.err, "event", body
    record_type = None if op is None else jute.RESPONSE_RECORDS.get(op)
    if header.err or record_type is None or not body:
        return header.xid, header.err, "raw", body
    record = record_type.decode(body)
    if _record_bytes(record) != body:
        return header.xid, header.err, "unread bytes", body
    return header.xid, header.err, type(record).__name__, _record_bytes(_masked(record))


def run_steps(port: int, timeout_s: float = 10.0) -> list[tuple[str, list[tuple[int, int, str, bytes]]]]:
    """Each step's name and the frames it brought (its reply, and the watch events before it)."""
    out: list[tuple[str, list[tuple[int, int, str, bytes]]]] = []
    with JuteSession(port, timeout_s=timeout_s) as session:
        session.connect(timeout_ms=30_000)
        for name, op, record in steps():
            xid = session.send(op, record, FIXED_XIDS.get(op))
            frames = []
            while True:
                try:
                    payload = session.receive_frame()
                except (ConnectionError, TimeoutError, OSError) as exc:
                    frames.append((0, 0, f"connection ended: {type(exc).__name__}", b""))
                    out.append((name, frames))
                    return out
                frames.append(normalised(op, payload))
                if frames[-1][0] == xid:
                    break
            out.append((name, frames))
    return out


def differences(reference: list[Any], zabby: list[Any], describe: Callable[[bytes], str] = bytes.hex) -> list[str]:
    """Human-readable differences between two ``run_steps`` results."""
    found = []
    for (name, theirs), (_, ours) in zip(reference, zabby, strict=False):
        if theirs != ours:
            found.append(f"{name}: ZooKeeper {[(x, e, k, describe(b)) for x, e, k, b in theirs]} "
                         f"zabby {[(x, e, k, describe(b)) for x, e, k, b in ours]}")  # fmt: skip
    if len(reference) != len(zabby):
        found.append(f"ZooKeeper answered {len(reference)} steps, zabby {len(zabby)}")
    return found
