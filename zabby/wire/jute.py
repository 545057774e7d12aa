"""ZooKeeper's binary client protocol (jute records), sans-I/O.

Jute is ZooKeeper's serialization: big-endian ``int`` (4 bytes), ``long`` (8), ``boolean``
(1 byte), ``buffer`` (int length, then bytes; length -1 is null), ``ustring`` (a buffer of
UTF-8), ``vector<T>`` (int count, then the items; -1 is null) and records, which are their
fields in order.  Every message on the wire is a frame: a 4-byte length, then the payload
(``zabby.wire.framing`` reads them).  A request payload is a ``RequestHeader`` (xid, type)
followed by the op's request record; a reply is a ``ReplyHeader`` (xid, zxid, err) followed
by the op's response record when err is 0.  The first frame of a connection is a
``ConnectRequest`` (no header) and its answer a ``ConnectResponse``.

Record layouts are ZooKeeper 3.8's (``zookeeper.jute``); op codes are ``zabby.opcodes``'.
Reading anything malformed (truncated, a negative length other than -1, a length beyond the
bytes left or over ``jute.maxbuffer``, text that is not UTF-8, an unknown op inside a multi)
raises ``RemoteProtocolError`` and nothing else.  This module does no I/O and knows nothing
of zabby's op model; ``zabby.wire.jute_codec`` maps records onto it.
"""

from __future__ import annotations

import builtins
import dataclasses
import operator
import struct
from collections.abc import Callable
from typing import Any, ClassVar, Self, TypeVar, cast, dataclass_transform

from zabby.errors import OversizeError, RemoteProtocolError, TooManyOps
from zabby.opcodes import OpCode

BUFFER_BYTES_MAX_DEFAULT = 0xFFFFF  # jute.maxbuffer

XID_NOTIFICATION = -1
XID_PING = -2
XID_AUTH = -4
XID_SET_WATCHES = -8

_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_BOOL = struct.Struct(">b")

T = TypeVar("T")


# ----------------------------------------------------------------------------- primitives
class Reader:
    """Reads jute primitives from ``data`` starting at ``pos``."""

    __slots__ = ("buffer_bytes_max", "data", "ops_max", "pos")

    def __init__(self, data: bytes, pos: int = 0, buffer_bytes_max: int = BUFFER_BYTES_MAX_DEFAULT, ops_max: int = 2**31) -> None:
        self.data = data
        self.pos = pos
        self.buffer_bytes_max = buffer_bytes_max
        self.ops_max = ops_max  # a multi's ops: more raise TooManyOps (read no further)

    @property
    def remaining(self) -> int:
        return len(self.data) - self.pos

    def _need(self, size: int, what: str) -> None:
        if self.pos + size > len(self.data):
            raise RemoteProtocolError(f"truncated record: {what} needs {size} bytes, {self.remaining} left")

    def int(self) -> int:
        self._need(4, "int")
        value = _INT.unpack_from(self.data, self.pos)[0]
        self.pos += 4
        return int(value)

    def long(self) -> builtins.int:
        self._need(8, "long")
        value = _LONG.unpack_from(self.data, self.pos)[0]
        self.pos += 8
        return int(value)

    def bool(self) -> bool:
        self._need(1, "boolean")
        value = self.data[self.pos]
        self.pos += 1
        return value != 0

    def _length(self, what: str) -> builtins.int:
        length = self.int()
        if length < -1:
            raise RemoteProtocolError(f"negative {what} length {length}")
        return length

    def buffer(self) -> bytes | None:
        length = self._length("buffer")
        if length == -1:
            return None
        if length > self.buffer_bytes_max:
            raise OversizeError(f"buffer of {length} bytes is over jute.maxbuffer ({self.buffer_bytes_max})")
        self._need(length, "buffer")
        value = bytes(self.data[self.pos : self.pos + length])
        self.pos += length
        return value

    def ustring(self) -> str | None:
        raw = self.buffer()
        if raw is None:
            return None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RemoteProtocolError(f"ustring is not UTF-8: {exc}") from None

    def vector_length(self) -> builtins.int | None:
        """A vector's item count (None for a null vector)."""
        count = self._length("vector")
        if count == -1:
            return None
        if count > self.remaining:  # every item takes at least one byte
            raise RemoteProtocolError(f"vector of {count} items in {self.remaining} bytes")
        return count

    def vector(self, read_item: Callable[[Reader], T]) -> list[T] | None:
        count = self.vector_length()
        return None if count is None else [read_item(self) for _ in range(count)]


class Writer:
    """Writes jute primitives into a growing buffer; ``getvalue()`` returns the bytes."""

    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out = bytearray()

    def getvalue(self) -> bytes:
        return bytes(self.out)

    def int(self, value: int) -> None:
        self.out += _INT.pack(value)

    def long(self, value: builtins.int) -> None:
        self.out += _LONG.pack(value)

    def bool(self, value: bool) -> None:
        self.out.append(1 if value else 0)

    def buffer(self, value: bytes | None) -> None:
        if value is None:
            self.out += _INT.pack(-1)
            return
        self.out += _INT.pack(len(value))
        self.out += value

    def ustring(self, value: str | None) -> None:
        self.buffer(None if value is None else value.encode("utf-8"))

    def vector(self, items: list[T] | tuple[T, ...] | None, write_item: Callable[[T], None]) -> None:
        if items is None:
            self.out += _INT.pack(-1)
            return
        self.out += _INT.pack(len(items))
        for item in items:
            write_item(item)


def frame(payload: bytes) -> bytes:
    """One wire frame: the 4-byte big-endian length, then the payload."""
    return len(payload).to_bytes(4, "big") + payload


# ----------------------------------------------------------------------------- records
# A field kind: "i" int, "l" long, "z" boolean, "b" buffer, "s" ustring, ("v", kind) a
# vector of that kind, or a Record class (a nested record).
Kind = Any

_R = TypeVar("_R", bound="Record")


_PRIMITIVE_READERS: dict[str, Callable[[Reader], Any]] = {
    "i": Reader.int, "l": Reader.long, "s": Reader.ustring, "b": Reader.buffer, "z": Reader.bool,
}  # fmt: skip


def _reader_of(kind: Kind) -> Callable[[Reader], Any]:
    """The function that reads a field of ``kind``, chosen once per record class (not per
    field read: requests are decoded on the server's hot path)."""
    if isinstance(kind, str):
        return _PRIMITIVE_READERS[kind]
    if isinstance(kind, tuple):
        read_item = _reader_of(kind[1])
        return lambda reader: reader.vector(read_item)
    return kind.read


def _write_kind(writer: Writer, kind: Kind, value: Any) -> None:
    if kind == "i":
        writer.int(value)
    elif kind == "l":
        writer.long(value)
    elif kind == "s":
        writer.ustring(value)
    elif kind == "b":
        writer.buffer(value)
    elif kind == "z":
        writer.bool(value)
    elif kind == STRINGS and value is not None and getattr(value, "encoded", None) is not None:
        writer.out += value.encoded  # a tree Listing this codec encoded before
    elif kind == STRINGS and value is not None and None not in value:
        _write_strings(writer, value)  # getChildren's hot path: one join, not a call per name
    elif isinstance(kind, tuple):
        writer.vector(value, lambda item: _write_kind(writer, kind[1], item))
    else:
        value.write(writer)


def _write_strings(writer: Writer, items: list[str] | tuple[str, ...]) -> None:
    pack = _INT.pack
    parts = [pack(len(items))]
    append = parts.append
    for item in items:
        raw = item.encode("utf-8")
        append(pack(len(raw)))
        append(raw)
    encoded = b"".join(parts)
    if hasattr(items, "encoded"):  # a tree Listing: it never changes, keep the encoding
        items.encoded = encoded
    writer.out += encoded


class Record:
    """A jute record: its fields, in order, each of a ``Kind`` listed in ``SPEC``."""

    SPEC: ClassVar[tuple[tuple[str, Kind], ...]] = ()
    FIXED: ClassVar[struct.Struct | None] = None  # one struct for records of fixed-size fields
    READERS: ClassVar[tuple[Callable[[Reader], Any], ...]] = ()  # each field's reader, in order
    VALUES: ClassVar[Callable[[Any], tuple[Any, ...]]]  # the field values, in order

    @classmethod
    def read(cls, reader: Reader) -> Self:
        fixed = cls.FIXED
        if fixed is not None:
            reader._need(fixed.size, cls.__name__)
            values = fixed.unpack_from(reader.data, reader.pos)
            reader.pos += fixed.size
            return cls(*values)
        return cls(*[read(reader) for read in cls.READERS])

    def write(self, writer: Writer) -> None:
        fixed = self.FIXED
        if fixed is not None:
            writer.out += fixed.pack(*type(self).VALUES(self))
            return
        for name, kind in self.SPEC:
            _write_kind(writer, kind, getattr(self, name))

    def encode(self) -> bytes:
        writer = Writer()
        self.write(writer)
        return writer.getvalue()

    @classmethod
    def decode(cls, data: bytes, buffer_bytes_max: int = BUFFER_BYTES_MAX_DEFAULT) -> Self:
        return cls.read(Reader(data, 0, buffer_bytes_max))


_FIXED_FORMATS = {"i": "i", "l": "q", "z": "?"}


@dataclass_transform()
def _record(*kinds: Kind) -> Callable[[type[_R]], type[_R]]:
    """Make a frozen dataclass of ``cls`` whose fields have the given jute kinds, in order."""

    def wrap(cls: type[_R]) -> type[_R]:
        made = dataclasses.dataclass(slots=True)(cls)
        names = [f.name for f in dataclasses.fields(cast(Any, made))]
        assert len(names) == len(kinds), (cls.__name__, names, kinds)
        made.SPEC = tuple(zip(names, kinds, strict=True))
        made.READERS = tuple(_reader_of(kind) for kind in kinds)
        if len(names) > 1:
            made.VALUES = operator.attrgetter(*names)
        else:
            made.VALUES = staticmethod(lambda record, get=operator.attrgetter(*names): (get(record),))
        if all(isinstance(kind, str) and kind in _FIXED_FORMATS for kind in kinds):
            made.FIXED = struct.Struct(">" + "".join(_FIXED_FORMATS[kind] for kind in kinds))
        return made

    return wrap


# org.apache.zookeeper.data
@_record("s", "s")
class Id(Record):
    scheme: str | None
    id: str | None


@_record("i", Id)
class ACL(Record):
    perms: int
    id: Id


@_record("l", "l", "l", "l", "i", "i", "i", "l", "i", "i", "l")
class Stat(Record):
    czxid: int
    mzxid: int
    ctime: int
    mtime: int
    version: int
    cversion: int
    aversion: int
    ephemeral_owner: int
    data_length: int
    num_children: int
    pzxid: int


ACLS = ("v", ACL)
STRINGS = ("v", "s")


# org.apache.zookeeper.proto: session set-up
@dataclasses.dataclass(slots=True)
class ConnectRequest(Record):
    """The first frame of a connection (no RequestHeader); ``read_only`` is an optional
    trailing byte that clients since 3.3 send."""

    protocol_version: int
    last_zxid_seen: int
    timeout_ms: int
    session_id: int
    password: bytes | None
    read_only: bool = False

    @classmethod
    def read(cls, reader: Reader) -> ConnectRequest:
        version, last_zxid, timeout_ms, session_id = reader.int(), reader.long(), reader.int(), reader.long()
        password = reader.buffer()
        read_only = reader.bool() if reader.remaining else False
        return cls(version, last_zxid, timeout_ms, session_id, password, read_only)

    def write(self, writer: Writer) -> None:
        writer.int(self.protocol_version)
        writer.long(self.last_zxid_seen)
        writer.int(self.timeout_ms)
        writer.long(self.session_id)
        writer.buffer(self.password)
        writer.bool(self.read_only)


@dataclasses.dataclass(slots=True)
class ConnectResponse(Record):
    """The answer to a ConnectRequest; ``timeout_ms`` 0 means the session has expired."""

    protocol_version: int
    timeout_ms: int
    session_id: int
    password: bytes | None
    read_only: bool = False

    @classmethod
    def read(cls, reader: Reader) -> ConnectResponse:
        version, timeout_ms, session_id = reader.int(), reader.int(), reader.long()
        password = reader.buffer()
        read_only = reader.bool() if reader.remaining else False
        return cls(version, timeout_ms, session_id, password, read_only)

    def write(self, writer: Writer) -> None:
        writer.int(self.protocol_version)
        writer.int(self.timeout_ms)
        writer.long(self.session_id)
        writer.buffer(self.password)
        writer.bool(self.read_only)


@_record("i", "i")
class RequestHeader(Record):
    xid: int
    type: int


@_record("i", "l", "i")
class ReplyHeader(Record):
    xid: int
    zxid: int
    err: int


@_record("i", "z", "i")
class MultiHeader(Record):
    type: int
    done: bool
    err: int


@_record("i", "s", "b")
class AuthPacket(Record):
    type: int
    scheme: str | None
    auth: bytes | None


@_record("l", STRINGS, STRINGS, STRINGS)
class SetWatches(Record):
    relative_zxid: int
    data_watches: list[str | None] | None
    exist_watches: list[str | None] | None
    child_watches: list[str | None] | None


@_record("l", STRINGS, STRINGS, STRINGS, STRINGS, STRINGS)
class SetWatches2(Record):
    relative_zxid: int
    data_watches: list[str | None] | None
    exist_watches: list[str | None] | None
    child_watches: list[str | None] | None
    persistent_watches: list[str | None] | None
    persistent_recursive_watches: list[str | None] | None


@_record("i", "i", "s")
class WatcherEvent(Record):
    type: int
    state: int
    path: str | None


@_record("i")
class ErrorResponse(Record):
    err: int


# requests
@_record("s", "b", ACLS, "i")
class CreateRequest(Record):
    path: str | None
    data: bytes | None
    acl: list[ACL] | None
    flags: int


@_record("s", "b", ACLS, "i", "l")
class CreateTTLRequest(Record):
    path: str | None
    data: bytes | None
    acl: list[ACL] | None
    flags: int
    ttl: int


@_record("s", "i")
class DeleteRequest(Record):
    path: str | None
    version: int


@_record("s", "z")
class ExistsRequest(Record):
    path: str | None
    watch: bool


@_record("s", "z")
class GetDataRequest(Record):
    path: str | None
    watch: bool


@_record("s", "b", "i")
class SetDataRequest(Record):
    path: str | None
    data: bytes | None
    version: int


@_record("s")
class GetACLRequest(Record):
    path: str | None


@_record("s", ACLS, "i")
class SetACLRequest(Record):
    path: str | None
    acl: list[ACL] | None
    version: int


@_record("s", "z")
class GetChildrenRequest(Record):
    path: str | None
    watch: bool


@_record("s", "z")
class GetChildren2Request(Record):
    path: str | None
    watch: bool


@_record("s")
class SyncRequest(Record):
    path: str | None


@_record("s", "i")
class CheckVersionRequest(Record):
    path: str | None
    version: int


@_record("s", "s", "s", "l")
class ReconfigRequest(Record):
    joining_servers: str | None
    leaving_servers: str | None
    new_members: str | None
    cur_config_id: int


@_record("s", "i")
class CheckWatchesRequest(Record):
    path: str | None
    type: int


@_record("s", "i")
class RemoveWatchesRequest(Record):
    path: str | None
    type: int


@_record("b")
class GetSASLRequest(Record):
    token: bytes | None


@_record("b")
class SetSASLResponse(Record):
    token: bytes | None


@_record("s")
class GetEphemeralsRequest(Record):
    prefix_path: str | None


@_record("s")
class GetAllChildrenNumberRequest(Record):
    path: str | None


@_record("s", "i")
class AddWatchRequest(Record):
    path: str | None
    mode: int


# responses
@_record("s")
class CreateResponse(Record):
    path: str | None


@_record("s", Stat)
class Create2Response(Record):
    path: str | None
    stat: Stat


@_record(Stat)
class ExistsResponse(Record):
    stat: Stat


@_record("b", Stat)
class GetDataResponse(Record):
    data: bytes | None
    stat: Stat


@_record(Stat)
class SetDataResponse(Record):
    stat: Stat


@_record(ACLS, Stat)
class GetACLResponse(Record):
    acl: list[ACL] | None
    stat: Stat


@_record(Stat)
class SetACLResponse(Record):
    stat: Stat


@_record(STRINGS)
class GetChildrenResponse(Record):
    children: list[str | None] | None


@_record(STRINGS, Stat)
class GetChildren2Response(Record):
    children: list[str | None] | None
    stat: Stat


@_record("s")
class SyncResponse(Record):
    path: str | None


@_record(STRINGS)
class GetEphemeralsResponse(Record):
    ephemerals: list[str | None] | None


@_record("i")
class GetAllChildrenNumberResponse(Record):
    total_number: int


@_record("s", "s")
class ClientInfo(Record):
    auth_scheme: str | None
    user: str | None


@_record(("v", ClientInfo))
class WhoAmIResponse(Record):
    client_info: list[ClientInfo] | None


# ----------------------------------------------------------------------------- multi
# The ops a multi (14) or multiRead (22) may carry, and the record each one's request uses.
MULTI_OP_RECORDS: dict[int, type[Record]] = {
    OpCode.CREATE: CreateRequest,
    OpCode.CREATE2: CreateRequest,
    OpCode.CREATE_CONTAINER: CreateRequest,
    OpCode.CREATE_TTL: CreateTTLRequest,
    OpCode.DELETE: DeleteRequest,
    OpCode.SET_DATA: SetDataRequest,
    OpCode.CHECK: CheckVersionRequest,
    OpCode.GET_DATA: GetDataRequest,
    OpCode.GET_CHILDREN: GetChildrenRequest,
}

# The record each result of a multi carries, by the result's MultiHeader type (-1: an error).
MULTI_RESULT_RECORDS: dict[int, type[Record] | None] = {
    OpCode.CREATE: CreateResponse,
    OpCode.CREATE2: Create2Response,
    OpCode.DELETE: None,
    OpCode.SET_DATA: SetDataResponse,
    OpCode.CHECK: None,
    OpCode.GET_DATA: GetDataResponse,
    OpCode.GET_CHILDREN: GetChildrenResponse,
    -1: ErrorResponse,
}


@dataclasses.dataclass(slots=True)
class MultiRequest(Record):
    """``MultiOperationRecord``: (MultiHeader(op, false, -1), op record)*, MultiHeader(-1, true, -1)."""

    ops: list[tuple[int, Record]]

    @classmethod
    def read(cls, reader: Reader) -> MultiRequest:
        ops: list[tuple[int, Record]] = []
        while True:
            header = MultiHeader.read(reader)
            if header.done:
                return cls(ops)
            record_type = MULTI_OP_RECORDS.get(header.type)
            if record_type is None:
                raise RemoteProtocolError(f"op {header.type} cannot be part of a multi")
            if len(ops) == reader.ops_max:
                raise TooManyOps(f"more than {reader.ops_max} ops")
            ops.append((header.type, record_type.read(reader)))

    def write(self, writer: Writer) -> None:
        for op, record in self.ops:
            MultiHeader(op, False, -1).write(writer)
            record.write(writer)
        MultiHeader(-1, True, -1).write(writer)


@dataclasses.dataclass(slots=True)
class MultiResponse(Record):
    """``MultiResponse``: (MultiHeader(type, false, err), result record)*, MultiHeader(-1, true, -1).

    Each result is ``(type, err, record)``; a failed op has type -1 and an ErrorResponse.
    """

    results: list[tuple[int, int, Record | None]]

    @classmethod
    def read(cls, reader: Reader) -> MultiResponse:
        results: list[tuple[int, int, Record | None]] = []
        while True:
            header = MultiHeader.read(reader)
            if header.done:
                return cls(results)
            if header.type not in MULTI_RESULT_RECORDS:
                raise RemoteProtocolError(f"op {header.type} cannot be a multi result")
            record_type = MULTI_RESULT_RECORDS[header.type]
            results.append((header.type, header.err, None if record_type is None else record_type.read(reader)))

    def write(self, writer: Writer) -> None:
        for op, err, record in self.results:
            MultiHeader(op, False, err).write(writer)
            if record is not None:
                record.write(writer)
        MultiHeader(-1, True, -1).write(writer)


# ----------------------------------------------------------------------------- requests by op
# The request record of every client op ZooKeeper 3.8 defines (None: the header is all).
REQUEST_RECORDS: dict[int, type[Record] | None] = {
    OpCode.CREATE: CreateRequest,
    OpCode.DELETE: DeleteRequest,
    OpCode.EXISTS: ExistsRequest,
    OpCode.GET_DATA: GetDataRequest,
    OpCode.SET_DATA: SetDataRequest,
    OpCode.GET_ACL: GetACLRequest,
    OpCode.SET_ACL: SetACLRequest,
    OpCode.GET_CHILDREN: GetChildrenRequest,
    OpCode.SYNC: SyncRequest,
    OpCode.PING: None,
    OpCode.GET_CHILDREN2: GetChildren2Request,
    OpCode.CHECK: CheckVersionRequest,
    OpCode.MULTI: MultiRequest,
    OpCode.CREATE2: CreateRequest,
    OpCode.RECONFIG: ReconfigRequest,
    OpCode.CHECK_WATCHES: CheckWatchesRequest,
    OpCode.REMOVE_WATCHES: RemoveWatchesRequest,
    OpCode.CREATE_CONTAINER: CreateRequest,
    OpCode.CREATE_TTL: CreateTTLRequest,
    OpCode.MULTI_READ: MultiRequest,
    OpCode.AUTH: AuthPacket,
    OpCode.SET_WATCHES: SetWatches,
    OpCode.SASL: GetSASLRequest,
    OpCode.GET_EPHEMERALS: GetEphemeralsRequest,
    OpCode.GET_ALL_CHILDREN_NUMBER: GetAllChildrenNumberRequest,
    OpCode.SET_WATCHES2: SetWatches2,
    OpCode.ADD_WATCH: AddWatchRequest,
    OpCode.WHO_AM_I: None,
    OpCode.CLOSE_SESSION: None,
}

# The response record of every op that answers more than a ReplyHeader.
RESPONSE_RECORDS: dict[int, type[Record]] = {
    OpCode.CREATE: CreateResponse,
    OpCode.CREATE2: Create2Response,
    OpCode.CREATE_CONTAINER: Create2Response,
    OpCode.CREATE_TTL: Create2Response,
    OpCode.EXISTS: ExistsResponse,
    OpCode.GET_DATA: GetDataResponse,
    OpCode.RECONFIG: GetDataResponse,  # the new configuration
    OpCode.SET_DATA: SetDataResponse,
    OpCode.GET_ACL: GetACLResponse,
    OpCode.SET_ACL: SetACLResponse,
    OpCode.GET_CHILDREN: GetChildrenResponse,
    OpCode.GET_CHILDREN2: GetChildren2Response,
    OpCode.SYNC: SyncResponse,
    OpCode.MULTI: MultiResponse,
    OpCode.MULTI_READ: MultiResponse,
    OpCode.GET_EPHEMERALS: GetEphemeralsResponse,
    OpCode.GET_ALL_CHILDREN_NUMBER: GetAllChildrenNumberResponse,
    OpCode.WHO_AM_I: WhoAmIResponse,
    OpCode.SASL: SetSASLResponse,
    OpCode.ADD_WATCH: ErrorResponse,  # always 0: ZooKeeper's Java client reads it, and breaks without it
}


@dataclasses.dataclass(slots=True)
class Request:
    """One decoded request: its header and record.  ``known`` is False for an op this
    module has no layout for; its body is then left unread (the frame delimits it)."""

    xid: int
    op: int
    record: Record | None
    known: bool = True


def decode_connect_request(payload: bytes, buffer_bytes_max: int = BUFFER_BYTES_MAX_DEFAULT) -> ConnectRequest:
    return ConnectRequest.decode(payload, buffer_bytes_max)


def decode_request(payload: bytes, buffer_bytes_max: int = BUFFER_BYTES_MAX_DEFAULT, ops_max: int = 2**31) -> Request:
    """A request frame's payload → ``Request``.  Raises: RemoteProtocolError if it is malformed;
    TooManyOps (one of them) for a multi of more than ``ops_max`` ops."""
    reader = Reader(payload, 0, buffer_bytes_max, ops_max)
    header = RequestHeader.read(reader)
    if header.type not in REQUEST_RECORDS:
        return Request(header.xid, header.type, None, known=False)
    record_type = REQUEST_RECORDS[header.type]
    record = None if record_type is None else record_type.read(reader)
    return Request(header.xid, header.type, record)


def encode_request(xid: int, op: int, record: Record | None = None) -> bytes:
    """A request frame (length prefix included)."""
    writer = Writer()
    RequestHeader(xid, op).write(writer)
    if record is not None:
        record.write(writer)
    return frame(writer.getvalue())


def encode_reply(header: ReplyHeader, record: Record | None = None) -> bytes:
    """A reply frame (length prefix included): the header, then the record if any."""
    writer = Writer()
    header.write(writer)
    if record is not None:
        record.write(writer)
    return frame(writer.getvalue())


def decode_reply(payload: bytes, op: int | None, buffer_bytes_max: int = BUFFER_BYTES_MAX_DEFAULT) -> tuple[ReplyHeader, Record | None]:
    """A reply payload → (header, record).  ``op`` is the request's op (None: unknown);
    notifications (xid -1) carry a WatcherEvent whatever ``op`` says."""
    reader = Reader(payload, 0, buffer_bytes_max)
    header = ReplyHeader.read(reader)
    if header.xid == XID_NOTIFICATION:
        return header, WatcherEvent.read(reader)
    if header.err or op is None:
        return header, None
    record_type = RESPONSE_RECORDS.get(op)
    return header, None if record_type is None else record_type.read(reader)
