"""ZooKeeper's jute client protocol as a ``ClientCodec`` (``zabby.wire.codec``), sans-I/O.

Decoding: each jute request becomes the ``[xid, op, *args]`` list of zabby's op model
(docs/protocol.md), so the session layer serves both protocols with the same code.
Encoding: every message a session sends (a reply ``[xid, zxid, err, *values]``, a watch
event, the connect response), given as the msgpack protocol's values, becomes a jute frame,
using the op (and, for multi, the sub-ops) remembered for that xid when it was decoded.
Replies leave a session in request order, so the remembered ops are a FIFO.

ZooKeeper's conventions kept here: exists on a missing node answers NONODE in the header;
an expired or unknown session gets a ConnectResponse with timeout 0 and session id 0; a
server that cannot take the session (not serving, or behind the client's lastZxidSeen) closes
the connection without an answer, so the client tries another server; a multi answers one
MultiHeader per op (an ErrorResponse for each op of a failed multi); create (op 1) answers
the path only.  Unknown ops get UNIMPLEMENTED; malformed jute closes the connection without
an answer.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from collections.abc import Callable
from typing import Any

from zabby.errors import Err, RefusedRequest, RemoteProtocolError, TooManyOps
from zabby.opcodes import CREATE_OPS, ZABBY_OPS, OpCode
from zabby.wire import jute
from zabby.wire.codec import ClientProtocol, ConnectRequest, too_many_ops
from zabby.wire.messages import PROTOCOL_NAME

LOGGER = logging.getLogger("zabby.wire.jute")

EXPIRED_PASSWORD = bytes(16)

_MULTI_OPS = (OpCode.MULTI, OpCode.MULTI_READ)
_LARGE_REQUESTS = frozenset({OpCode.MULTI, OpCode.MULTI_READ, OpCode.SET_WATCHES, OpCode.SET_WATCHES2})
# The members every reply is told apart by, as globals (see zabby.opcodes)
_SASL, _EXISTS, _GET_DATA, _CREATE = OpCode.SASL, OpCode.EXISTS, OpCode.GET_DATA, OpCode.CREATE
_STAT_REPLIES = frozenset({OpCode.SET_DATA, OpCode.EXISTS})


# ----------------------------------------------------------------------------- requests → op model
def _acl(entries: list[jute.ACL] | None) -> tuple[tuple[int, str, str], ...] | None:
    if entries is None:
        return None
    # kazoo writes an empty id (as for the "auth" scheme) as a null ustring
    return tuple((e.perms, e.id.scheme or "", "" if e.id.id is None else e.id.id) for e in entries)


def _paths(paths: list[str | None] | None) -> list[str]:
    return [p for p in paths or () if p is not None]


def _credential(data: bytes | None) -> bytes:
    return b"" if data is None else data  # an auth packet's null credential is an empty one


def request_args(op: int, record: jute.Record | None) -> tuple[int, list[Any]]:  # noqa: C901 -- one branch per opcode
    """A jute request record → zabby's (op, args), as docs/protocol.md lists them."""
    r: Any = record
    if op in (OpCode.CREATE, OpCode.CREATE2, OpCode.CREATE_CONTAINER):
        return op, [r.path, r.data, _acl(r.acl), r.flags, 0]
    if op == OpCode.CREATE_TTL:
        return op, [r.path, r.data, _acl(r.acl), r.flags, r.ttl]
    if op in (OpCode.DELETE, OpCode.CHECK):
        return op, [r.path, r.version]
    if op in (OpCode.EXISTS, OpCode.GET_DATA, OpCode.GET_CHILDREN, OpCode.GET_CHILDREN2):
        return op, [r.path, r.watch]
    if op == OpCode.SET_DATA:
        return op, [r.path, r.data, r.version]
    if op in (OpCode.GET_ACL, OpCode.SYNC, OpCode.GET_ALL_CHILDREN_NUMBER):
        return op, [r.path]
    if op == OpCode.SET_ACL:
        return op, [r.path, _acl(r.acl), r.version]
    if op in (OpCode.CHECK_WATCHES, OpCode.REMOVE_WATCHES):
        return op, [r.path, r.type]
    if op == OpCode.GET_EPHEMERALS:
        return op, [r.prefix_path]
    if op == OpCode.ADD_WATCH:
        return op, [r.path, r.mode]
    if op == OpCode.AUTH:
        return op, [r.scheme, _credential(r.auth)]
    if op == OpCode.SASL:
        return op, [_credential(r.token)]
    if op == OpCode.SET_WATCHES:
        return op, [r.relative_zxid, _paths(r.data_watches), _paths(r.exist_watches), _paths(r.child_watches), [], []]
    if op == OpCode.SET_WATCHES2:
        return OpCode.SET_WATCHES, [r.relative_zxid, _paths(r.data_watches), _paths(r.exist_watches), _paths(r.child_watches),
                                    _paths(r.persistent_watches), _paths(r.persistent_recursive_watches)]  # fmt: skip
    if op == OpCode.RECONFIG:
        return op, [r.joining_servers, r.leaving_servers, r.new_members, r.cur_config_id]
    if op == OpCode.MULTI:
        return op, [[[sub_op, *request_args(sub_op, sub)[1]] for sub_op, sub in r.ops]]
    if op == OpCode.MULTI_READ:
        return op, [[[sub_op, *request_args(sub_op, sub)[1]] for sub_op, sub in r.ops]]
    return op, []  # ping, whoAmI, closeSession, and ops zabby answers UNIMPLEMENTED


# The hot requests, read straight from the payload into zabby's args with a few unpacks: no
# Reader, no record objects on the way (a CreateRequest's ACL is a vector of records of
# records).  Anything unusual in one (a null, a bad length, a cut record, bad UTF-8) sends it
# down the record layouts' path instead, which gives the answer or the precise error; for the
# rest each gives what that path gives (tests/jute/test_codec.py checks both on random input).
_XID_OP = struct.Struct(">ii")  # a RequestHeader (xid, type): jute.RequestHeader.FIXED, typed as a Struct
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")


class _Unusual(Exception):
    """Not for the fixed-layout path: the record layouts' path reads it."""


_LEAVE_HOT_PATH = (_Unusual, struct.error, IndexError, UnicodeDecodeError)


def _blob(payload: bytes, pos: int, size_max: int) -> tuple[bytes, int]:
    """A buffer's (or ustring's) bytes at ``pos``, and the position after it."""
    (size,) = _INT.unpack_from(payload, pos)
    end = pos + 4 + size
    if size < 0 or size > size_max or end > len(payload):
        raise _Unusual
    return payload[pos + 4 : end], end


# A create's ACL vector by its bytes: clients repeat a few ACLs, so most creates look theirs up
# here instead of reading it entry by entry (bounded: a client inventing ACLs fills it once).
_ACLS_BY_BYTES: dict[bytes, tuple[tuple[int, str, str], ...]] = {}
_ACLS_BY_BYTES_MAX = 256


def _create_args(payload: bytes, size_max: int) -> list[Any]:
    path, pos = _blob(payload, 8, size_max)
    data, pos = _blob(payload, pos, size_max)
    acl = _ACLS_BY_BYTES.get(payload[pos:-4])  # the flags, an int, end the record
    if acl is None:
        start = pos
        acl, pos = _acl_vector(payload, pos, size_max)
        if pos == len(payload) - 4 and len(_ACLS_BY_BYTES) < _ACLS_BY_BYTES_MAX:
            _ACLS_BY_BYTES[payload[start:pos]] = acl
    else:
        pos = len(payload) - 4
    (flags,) = _INT.unpack_from(payload, pos)
    return [path.decode(), data, acl, flags, 0]


def _vector_count(payload: bytes, pos: int) -> tuple[int, int]:
    """A vector's item count at ``pos`` (a null vector, or more items than bytes left, is unusual)."""
    (count,) = _INT.unpack_from(payload, pos)
    pos += 4
    if count < 0 or count > len(payload) - pos:
        raise _Unusual
    return count, pos


def _acl_vector(payload: bytes, pos: int, size_max: int) -> tuple[tuple[tuple[int, str, str], ...], int]:
    """A vector of ACL records at ``pos``, and the position after it."""
    count, pos = _vector_count(payload, pos)
    acl = []
    for _ in range(count):
        (perms,) = _INT.unpack_from(payload, pos)
        scheme, pos = _blob(payload, pos + 4, size_max)
        ident, pos = _blob(payload, pos, size_max)
        acl.append((perms, scheme.decode(), ident.decode()))
    return tuple(acl), pos


def _set_data_args(payload: bytes, size_max: int) -> list[Any]:
    path, pos = _blob(payload, 8, size_max)
    data, pos = _blob(payload, pos, size_max)
    (version,) = _INT.unpack_from(payload, pos)
    return [path.decode(), data, version]


def _path_watch_args(payload: bytes, size_max: int) -> list[Any]:
    path, pos = _blob(payload, 8, size_max)
    return [path.decode(), payload[pos] != 0]


HOT_REQUESTS: dict[int, Callable[[bytes, int], list[Any]]] = {
    OpCode.CREATE: _create_args, OpCode.CREATE2: _create_args, OpCode.CREATE_CONTAINER: _create_args,
    OpCode.SET_DATA: _set_data_args, OpCode.GET_DATA: _path_watch_args, OpCode.EXISTS: _path_watch_args,
}  # fmt: skip


def _path_version(payload: bytes, pos: int, size_max: int) -> tuple[list[Any], int]:
    path, pos = _blob(payload, pos, size_max)
    (version,) = _INT.unpack_from(payload, pos)
    return [path.decode(), version], pos + 4


def _path_data_version(payload: bytes, pos: int, size_max: int) -> tuple[list[Any], int]:
    path, pos = _blob(payload, pos, size_max)
    data, pos = _blob(payload, pos, size_max)
    (version,) = _INT.unpack_from(payload, pos)
    return [path.decode(), data, version], pos + 4


def _path_flag(payload: bytes, pos: int, size_max: int) -> tuple[list[Any], int]:
    path, pos = _blob(payload, pos, size_max)
    return [path.decode(), payload[pos] != 0], pos + 1


def _create_at(payload: bytes, pos: int, size_max: int) -> tuple[list[Any], int]:
    path, pos = _blob(payload, pos, size_max)
    data, pos = _blob(payload, pos, size_max)
    acl, pos = _acl_vector(payload, pos, size_max)
    (flags,) = _INT.unpack_from(payload, pos)
    return [path.decode(), data, acl, flags, 0], pos + 4


_MULTI_HEADER = struct.Struct(">ibi")  # MultiHeader: type, done, err
_MULTI_OP_ARGS: dict[int, Callable[[bytes, int, int], tuple[list[Any], int]]] = {
    OpCode.CREATE: _create_at, OpCode.CREATE2: _create_at, OpCode.CREATE_CONTAINER: _create_at,
    OpCode.DELETE: _path_version, OpCode.CHECK: _path_version, OpCode.SET_DATA: _path_data_version,
    OpCode.GET_DATA: _path_flag, OpCode.GET_CHILDREN: _path_flag,
}  # fmt: skip


def _multi_ops(payload: bytes, size_max: int, ops_max: int) -> list[list[Any]]:
    """A multi's (or multiRead's) ops, ``[op, *args]`` each, read straight from the payload: a
    jute.maxbuffer multi is 50,000 ops, and the record layouts' path took ~10 us an op.
    Raises: TooManyOps past ``ops_max`` (read no further); _LEAVE_HOT_PATH for anything unusual."""
    ops: list[list[Any]] = []
    pos = _XID_OP.size
    while True:
        op, done, _ = _MULTI_HEADER.unpack_from(payload, pos)
        pos += _MULTI_HEADER.size
        if done:
            return ops
        read_args = _MULTI_OP_ARGS.get(op)
        if read_args is None:
            raise _Unusual
        if len(ops) == ops_max:
            raise TooManyOps(f"more than {ops_max} ops")
        args, pos = read_args(payload, pos, size_max)
        ops.append([op, *args])


def _strings(payload: bytes, pos: int, size_max: int) -> tuple[list[str], int]:
    """A vector of ustrings at ``pos`` (no nulls), and the position after it."""
    count, pos = _vector_count(payload, pos)
    items = []
    for _ in range(count):
        item, pos = _blob(payload, pos, size_max)
        items.append(item.decode())
    return items, pos


def _set_watches_args(payload: bytes, size_max: int, vectors: int) -> list[Any]:
    """setWatches (3 vectors of paths) or setWatches2 (5): a reconnecting client's every watch."""
    (relative_zxid,) = _LONG.unpack_from(payload, _XID_OP.size)
    pos = _XID_OP.size + 8
    lists = []
    for _ in range(vectors):
        paths, pos = _strings(payload, pos, size_max)
        lists.append(paths)
    return [relative_zxid, *lists, *([[]] * (5 - vectors))]


# ----------------------------------------------------------------------------- replies → jute
# The hot replies, packed straight from zabby's values: the frame length, the ReplyHeader and
# the response record in one or a few packs, no record objects.  Each gives the bytes
# ``jute.encode_reply`` gives for the records (tests/jute/test_codec.py checks both); values
# that do not fit (a Stat field out of range, a null) go the records' way, which answers or
# raises as it always did.
def _fixed(record: type[jute.Record]) -> struct.Struct:
    """The one struct of a record whose fields are all of fixed size."""
    if record.FIXED is None:
        raise TypeError(f"{record.__name__} has fields of variable size")
    return record.FIXED


_STAT = _fixed(jute.Stat)
_HEADER = struct.Struct(">i" + _fixed(jute.ReplyHeader).format.lstrip(">"))  # the frame length, then the header
_HEADER_AND_STAT = struct.Struct(_HEADER.format + _STAT.format.lstrip(">"))
_EVENT = struct.Struct(">iiqiiii")  # frame length, ReplyHeader(-1, zxid, 0), WatcherEvent's type, state, path length
_LEAVE_HOT_REPLY = (struct.error, TypeError, AttributeError)


def _hot_reply(op: int, xid: int, zxid: int, values: list[Any]) -> bytes | None:
    """The frame of a successful reply to a hot op, or None for the other ops."""
    if op in _STAT_REPLIES:
        return _HEADER_AND_STAT.pack(_HEADER_AND_STAT.size - 4, xid, zxid, 0, *values[0])
    if op == _GET_DATA:
        data = values[0]
        return b"".join((_HEADER.pack(_HEADER.size + len(data) + _STAT.size, xid, zxid, 0), _INT.pack(len(data)), data,
                         _STAT.pack(*values[1])))  # fmt: skip
    if op in CREATE_OPS:
        path = values[0].encode()
        stat = b"" if op == _CREATE else _STAT.pack(*values[1])
        return b"".join((_HEADER.pack(_HEADER.size + len(path) + len(stat), xid, zxid, 0), _INT.pack(len(path)), path, stat))
    return None


def _stat(values: Any) -> jute.Stat:
    return jute.Stat(*values)


def _acls(entries: list[list[Any]]) -> list[jute.ACL]:
    return [jute.ACL(perms, jute.Id(scheme, ident)) for perms, scheme, ident in entries]


def _client_info(scheme: str, ident: str) -> jute.ClientInfo:
    # ZooKeeper's whoAmI names a digest identity by its user name, other schemes by the id
    return jute.ClientInfo(scheme, ident.partition(":")[0] if scheme == "digest" else ident)


def _multi_result(request_op: int, result: list[Any]) -> tuple[int, int, jute.Record | None]:
    result_type, err, value = result
    if result_type == OpCode.ERROR or err:  # a failed multi: every op is an error (0: rolled back)
        return -1, err, jute.ErrorResponse(err)
    if request_op in (OpCode.CREATE, OpCode.CREATE2):  # ZooKeeper's multi answers a create2 as a create
        return OpCode.CREATE, 0, jute.CreateResponse(value[0])
    if request_op in CREATE_OPS:
        return OpCode.CREATE2, 0, jute.Create2Response(value[0], _stat(value[1]))
    if request_op == OpCode.SET_DATA:
        return OpCode.SET_DATA, 0, jute.SetDataResponse(_stat(value))
    if request_op == OpCode.GET_DATA:
        return OpCode.GET_DATA, 0, jute.GetDataResponse(value[0], _stat(value[1]))
    if request_op == OpCode.GET_CHILDREN:
        return OpCode.GET_CHILDREN, 0, jute.GetChildrenResponse(value)
    return request_op, 0, None  # delete, check


def response_record(op: int, values: list[Any], sub_ops: tuple[int, ...]) -> jute.Record | None:
    """zabby's reply values for ``op`` → the jute response record (None: header only)."""
    if op == OpCode.CREATE:
        return jute.CreateResponse(values[0])
    if op in CREATE_OPS:
        return jute.Create2Response(values[0], _stat(values[1]))
    if op == OpCode.EXISTS:
        return jute.ExistsResponse(_stat(values[0]))
    if op in (OpCode.GET_DATA, OpCode.RECONFIG):  # a reconfig answers the new configuration
        return jute.GetDataResponse(values[0], _stat(values[1]))
    if op == OpCode.SET_DATA:
        return jute.SetDataResponse(_stat(values[0]))
    if op == OpCode.GET_ACL:
        return jute.GetACLResponse(_acls(values[0]), _stat(values[1]))
    if op == OpCode.SET_ACL:
        return jute.SetACLResponse(_stat(values[0]))
    if op == OpCode.GET_CHILDREN2:
        return jute.GetChildren2Response(values[0], _stat(values[1]))
    if op in _MULTI_OPS:
        return jute.MultiResponse([_multi_result(sub_op, result) for sub_op, result in zip(sub_ops, values[0], strict=True)])
    if op == OpCode.WHO_AM_I:
        return jute.WhoAmIResponse([_client_info(scheme, ident) for scheme, ident in values[0]])
    single = _ONE_VALUE_RESPONSES.get(op)
    if single is not None:
        return single(values[0])
    return _FIXED_RESPONSES.get(op)


# Replies that are one record of zabby's one reply value.
_ONE_VALUE_RESPONSES: dict[int, Callable[[Any], jute.Record]] = {
    OpCode.GET_CHILDREN: jute.GetChildrenResponse, OpCode.SYNC: jute.SyncResponse,
    OpCode.GET_EPHEMERALS: jute.GetEphemeralsResponse, OpCode.GET_ALL_CHILDREN_NUMBER: jute.GetAllChildrenNumberResponse,
    OpCode.SASL: jute.SetSASLResponse,
}  # fmt: skip


# Replies whose record never varies: addWatch's ErrorResponse(0), which ZooKeeper's Java
# client reads (and breaks without).
_FIXED_RESPONSES: dict[int, jute.Record] = {OpCode.ADD_WATCH: jute.ErrorResponse(0)}


class JuteCodec:
    """ZooKeeper's jute protocol for one connection; it remembers the op of each request
    until its reply is encoded."""

    name = ClientProtocol.JUTE.value

    def __init__(self, on_failure: Callable[[], None], buffer_bytes_max: int = jute.BUFFER_BYTES_MAX_DEFAULT, ops_max: int = 2**31) -> None:
        self.on_failure = on_failure
        self.buffer_bytes_max = buffer_bytes_max
        self.ops_max = ops_max  # maxRequestOps: a larger multi is refused before it is read whole
        self.pending: deque[tuple[int, int, tuple[int, ...]]] = deque()  # (xid, op, sub-ops)
        self.failed = False  # a reply could not be encoded: the connection must close

    def decode_connect(self, payload: bytes) -> ConnectRequest:
        request = jute.decode_connect_request(payload, self.buffer_bytes_max)
        if request.protocol_version != 0:
            raise RemoteProtocolError(f"unsupported jute protocol version {request.protocol_version}")
        return ConnectRequest(last_zxid_seen=request.last_zxid_seen, timeout_ms=request.timeout_ms, session_id=request.session_id,
                              password=request.password or b"", read_only=request.read_only)  # fmt: skip

    def decode_request(self, payload: bytes) -> list[Any]:
        if len(payload) >= _XID_OP.size:
            xid, op = _XID_OP.unpack_from(payload)
            read_args = HOT_REQUESTS.get(op)
            if read_args is not None:
                try:
                    args = read_args(payload, self.buffer_bytes_max)
                except _LEAVE_HOT_PATH:
                    pass
                else:
                    self.pending.append((xid, op, ()))
                    return [xid, op, *args]
            elif op in _LARGE_REQUESTS:
                large = self._large_request(payload, xid, op)
                if large is not None:
                    return large
        try:
            request = jute.decode_request(payload, self.buffer_bytes_max, self.ops_max)
        except TooManyOps:
            xid, op = _XID_OP.unpack_from(payload)
            self.pending.append((xid, op, ()))
            raise RefusedRequest(xid, Err.BADARGUMENTS, too_many_ops(op, self.ops_max)) from None
        op, args = request_args(request.op, request.record) if request.known else (request.op, [])
        sub_ops: tuple[int, ...] = ()
        if request.op in _MULTI_OPS:
            sub_ops = tuple(sub_op for sub_op, _ in request.record.ops)  # type: ignore[union-attr]
        self.pending.append((request.xid, op, sub_ops))  # as expect() does, without a call per request
        if op in ZABBY_OPS:  # zabby's msgpack extensions: a jute client sees ZooKeeper's protocol only
            raise RefusedRequest(request.xid, Err.UNIMPLEMENTED, f"unknown or unsupported op {op}")
        return [request.xid, op, *args]

    def _large_request(self, payload: bytes, xid: int, op: int) -> list[Any] | None:
        """A multi, multiRead or setWatches read the fast way (None: the record layouts' way)."""
        try:
            if op == OpCode.SET_WATCHES or op == OpCode.SET_WATCHES2:
                args = _set_watches_args(payload, self.buffer_bytes_max, 3 if op == OpCode.SET_WATCHES else 5)
                self.pending.append((xid, op, ()))
                return [xid, OpCode.SET_WATCHES, *args]
            ops = _multi_ops(payload, self.buffer_bytes_max, self.ops_max)
        except TooManyOps:
            self.pending.append((xid, op, ()))
            raise RefusedRequest(xid, Err.BADARGUMENTS, too_many_ops(op, self.ops_max)) from None
        except _LEAVE_HOT_PATH:
            return None
        self.pending.append((xid, op, tuple(sub[0] for sub in ops)))
        return [xid, op, ops]

    def expect(self, xid: int, op: int, sub_ops: tuple[int, ...] = ()) -> None:
        """Remember the op of a request handed to the session; its reply comes in order."""
        self.pending.append((xid, op, sub_ops))

    def encode(self, message: list[Any]) -> bytes:
        """The jute frame for one message of the session, given as the msgpack protocol's
        values (b"": send nothing).

        Runs inside the server's apply loop (write replies, watch events), so it never
        raises: a frame it cannot translate is logged and ends this connection only.
        """
        try:
            return self._encode(message)
        except Exception:
            LOGGER.exception("cannot encode a reply as jute; closing the connection")
            self.failed = True
            self.on_failure()
            return b""

    @staticmethod
    def encode_protocol_error(zxid: int, text: str) -> bytes:
        return b""  # ZooKeeper closes a connection that sends malformed jute without a word

    @staticmethod
    def encode_events(zxid: int, state: int, events: list[tuple[int, str]]) -> bytes:
        pack, header_bytes = _EVENT.pack, _EVENT.size - 4
        parts = []
        for event_type, path in events:
            raw = path.encode()
            parts.append(pack(header_bytes + len(raw), jute.XID_NOTIFICATION, zxid, 0, event_type, state, len(raw)))
            parts.append(raw)
        return b"".join(parts)

    def _encode(self, value: list[Any]) -> bytes:
        if value[0] == PROTOCOL_NAME:
            return self._connect_response(value)
        xid, zxid, err = value[0], value[1], value[2]
        if xid == jute.XID_NOTIFICATION and len(value) == 6:  # (a client that sent xid -1 is answered as it asked)
            # the header carries the zxid of the change, as ZooKeeper 3.9 sends it (ZOOKEEPER-4655);
            # kazoo and 3.8's Java client read a notification's header for its xid alone
            try:
                path = value[5].encode()
                return _EVENT.pack(_EVENT.size - 4 + len(path), xid, zxid, 0, value[3], value[4], len(path)) + path
            except _LEAVE_HOT_REPLY:
                return jute.encode_reply(jute.ReplyHeader(xid, zxid, 0), jute.WatcherEvent(value[3], value[4], value[5]))
        pending = self.pending
        if pending and pending[0][0] == xid:  # the reply due next, as nearly every one is
            _, op, sub_ops = pending.popleft()
        else:
            op, sub_ops = self._pop(xid)
        if op == _SASL:  # as ZooKeeper's processSasl: zxid 0, and the record even with an error
            return jute.encode_reply(jute.ReplyHeader(xid, 0, err), jute.SetSASLResponse(None if err else value[3]))
        if err:
            return jute.encode_reply(jute.ReplyHeader(xid, zxid, err))
        if op == _EXISTS and value[3] is None:  # ZooKeeper: a missing node is NONODE
            return jute.encode_reply(jute.ReplyHeader(xid, zxid, int(Err.NONODE)))
        values = value[3:]
        try:
            hot = _hot_reply(op, xid, zxid, values)
        except _LEAVE_HOT_REPLY:
            hot = None
        if hot is not None:
            return hot
        return jute.encode_reply(jute.ReplyHeader(xid, zxid, 0), response_record(op, values, sub_ops))

    def _pop(self, xid: int) -> tuple[int, tuple[int, ...]]:
        while self.pending:
            pending_xid, op, sub_ops = self.pending.popleft()
            if pending_xid == xid:
                return op, sub_ops
            LOGGER.error("jute reply for xid %d while xid %d was due; dropping that expectation", xid, pending_xid)
        return -1, ()  # a reply nobody asked for: answered with the header only

    @staticmethod
    def _connect_response(value: list[Any]) -> bytes:
        _, _, err, timeout_ms, session_id, password, _, read_only, _ = value
        if err == Err.SESSIONEXPIRED:  # ZooKeeper's answer for an expired or unknown session
            return jute.frame(jute.ConnectResponse(0, 0, 0, EXPIRED_PASSWORD, False).encode())
        if err:  # not serving / behind the client: ZooKeeper closes without an answer
            return b""
        return jute.frame(jute.ConnectResponse(0, timeout_ms, session_id, password, bool(read_only)).encode())
