"""The client port's protocols behind one interface: detection, and the ``ClientCodec``s.

Theory of operation: zabby's client port speaks three protocols, told apart by a
connection's first bytes (``detect``): a four-letter word (ASCII, no frame), zabby's msgpack
protocol (a 4-byte length, then a msgpack array: 0x9X, 0xdc or 0xdd) and ZooKeeper's jute
protocol (a 4-byte length, then a ``ConnectRequest`` whose protocolVersion is an int 0, so
the fifth byte is 0x00).  The server's session layer speaks in one set of values, the
msgpack protocol's (docs/protocol.md): requests ``[xid, op, *args]`` in, and out replies
``[xid, zxid, err, *values]``, watch events ``[-1, zxid, 0, type, state, path]`` and the
connect response ``["zabby", version, err, timeout_ms, session_id, password, zxid,
read_only, message]``.  A codec translates frame payloads into those values and those
values into frames, so the session never knows which protocol its client speaks; for
msgpack the translation is the identity.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Protocol

from zabby.errors import Err, RefusedRequest
from zabby.opcodes import WRITE_OPS, OpCode
from zabby.wire.messages import XID_NOTIFICATION, pack_frame, parse_connect_request, unpack

DETECT_BYTES = 5  # a frame's length prefix and the first byte of its payload


class ClientProtocol(enum.Enum):
    FOUR_LETTER = "four-letter word"
    MSGPACK = "msgpack"
    JUTE = "jute"


def detect(prefix: bytes, words: frozenset[str], jute_enabled: bool) -> ClientProtocol | None:
    """The protocol a connection speaks, from its first bytes (None: more bytes are needed).

    Four ASCII letters that are no word are never a frame length under jute.maxbuffer: they
    go to msgpack at once, whose frame decoder refuses them, so nothing more is awaited.
    A caller that gets no more bytes (EOF, timeout) treats the connection as msgpack.
    """
    if len(prefix) < 4:
        return None
    first = prefix[:4]
    if first.decode("latin-1") in words:
        return ClientProtocol.FOUR_LETTER
    if not jute_enabled or first.isalpha():
        return ClientProtocol.MSGPACK
    if len(prefix) < DETECT_BYTES:
        return None
    return ClientProtocol.JUTE if looks_like_jute(prefix) else ClientProtocol.MSGPACK


def looks_like_jute(prefix: bytes) -> bool:
    """A jute ConnectRequest: a length, then protocolVersion 0 (msgpack arrays never start 0x00)."""
    return len(prefix) >= DETECT_BYTES and prefix[4] == 0


def too_many_ops(op: int, ops_max: int) -> str:
    """The reason a multi (or multiRead) over ``maxRequestOps`` is refused."""
    name = "multiRead" if op == OpCode.MULTI_READ else "multi"
    return (f"a {name} of more than {ops_max} ops is refused (maxRequestOps): one request that large would stop every "
            f"client while it runs; split it")  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectRequest:
    """A connection's first frame, decoded: the session it asks for."""

    last_zxid_seen: int
    timeout_ms: int
    session_id: int  # 0: a new session
    password: bytes
    read_only: bool


class ClientCodec(Protocol):
    """One protocol's translation between frame payloads and the msgpack protocol's values.

    Ordering: ``decode_request`` is called in arrival order and ``encode`` in send order.
    A session answers a connection's requests in the order they arrived (watch events may
    come between), which a codec that remembers each request's op (jute) relies on.
    """

    @property
    def name(self) -> str:
        """The protocol's name, for logs."""
        ...

    def decode_connect(self, payload: bytes) -> ConnectRequest:
        """The first frame.  Raises: RemoteProtocolError if it is not a connect request."""
        ...

    def decode_request(self, payload: bytes) -> list[Any]:
        """A request frame → ``[xid, op, *args]``.  Raises: RemoteProtocolError if malformed;
        RefusedRequest if well-formed but refused before it is read whole (it is answered)."""
        ...

    def encode(self, message: list[Any]) -> bytes:
        """The frame for a reply, a watch event or the connect response (b"": send nothing).
        Never raises: a message it cannot encode closes that connection only."""
        ...

    def encode_protocol_error(self, zxid: int, text: str) -> bytes:
        """What a client that broke the protocol hears before the close (b"": nothing)."""
        ...

    def encode_events(self, zxid: int, state: int, events: list[tuple[int, str]]) -> bytes:
        """The frames of many watch events ``(type, path)`` at once, in order (a reconnecting
        client's missed ones: tens of thousands, so one pass, not a call per event)."""
        ...


NESTING_MAX = 6  # a write's arguments: a multi's op list, an op, an ACL, an ACL entry


def nested_within(value: Any, levels: int) -> bool:
    """``value``'s lists and maps nest at most ``levels`` deep."""
    if isinstance(value, list):
        return levels > 0 and all(nested_within(item, levels - 1) for item in value if isinstance(item, (list, dict)))
    if isinstance(value, dict):
        return levels > 0 and all(nested_within(item, levels - 1) for item in value.values() if isinstance(item, (list, dict)))
    return True


class MsgpackCodec:
    """zabby's own protocol: the values are the wire format."""

    name = ClientProtocol.MSGPACK.value
    encode = staticmethod(pack_frame)

    @staticmethod
    def decode_request(payload: bytes) -> list[Any]:
        """A write's arguments nested deeper than any op's are refused: a learner could not
        even forward them to the leader (msgpack packs 512 levels at most).  Jute's records
        nest no deeper than their layouts."""
        request = unpack(payload)
        if len(request) > 2 and request[1].__class__ is int and request[1] in WRITE_OPS and not nested_within(request[2:], NESTING_MAX):
            xid = request[0] if isinstance(request[0], int) else 0
            raise RefusedRequest(xid, Err.BADARGUMENTS, f"the arguments are nested deeper than {NESTING_MAX} levels")
        return request

    @staticmethod
    def decode_connect(payload: bytes) -> ConnectRequest:
        last_zxid, timeout_ms, session_id, password, read_only = parse_connect_request(unpack(payload))
        return ConnectRequest(last_zxid_seen=last_zxid, timeout_ms=timeout_ms, session_id=session_id, password=password, read_only=read_only)

    @staticmethod
    def encode_protocol_error(zxid: int, text: str) -> bytes:
        return pack_frame([0, zxid, int(Err.MARSHALLINGERROR), text])

    @staticmethod
    def encode_events(zxid: int, state: int, events: list[tuple[int, str]]) -> bytes:
        return b"".join([pack_frame([XID_NOTIFICATION, zxid, 0, event_type, state, path]) for event_type, path in events])
