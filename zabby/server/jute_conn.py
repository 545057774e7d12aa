"""ZooKeeper's jute client protocol on zabby's client port: one server core, two codecs.

``Connection`` (client_conn.py) tells the protocols apart by a connection's first bytes: a
four-letter word, a msgpack frame (its payload starts with an array marker, 0x9X/0xdc/0xdd)
or a jute ``ConnectRequest`` (a 4-byte length, then protocolVersion, an int 0, so the fifth
byte is 0x00).  A jute connection is handed to ``serve``, which runs the same Connection:

* decoding: each jute request becomes the ``[xid, op, *args]`` list the msgpack path hands to
  ``Connection._handle`` (so ordered slots, reads, writes, sync, auth and setWatches are the
  msgpack path's own code), and the ConnectRequest goes through ``Connection._handshake``;
* encoding: ``JuteCodec`` is the Connection's ``codec``: every message the Connection sends (a
  reply ``[xid, zxid, err, *values]``, a watch event, the handshake answer), given as the
  msgpack protocol's values, is encoded as jute instead, using the op (and, for multi, the
  sub-ops) remembered for that xid.  Replies leave a session in request order, so the
  remembered ops are a FIFO.

ZooKeeper's conventions kept here: exists on a missing node answers NONODE in the header;
an expired or unknown session gets a ConnectResponse with timeout 0 and session id 0; a
server that cannot take the session (not serving, or behind the client's lastZxidSeen) closes
the connection without an answer, so the client tries another server; a multi answers one
MultiHeader per op (an ErrorResponse for each op of a failed multi); create (op 1) answers
the path only.  Unknown ops get UNIMPLEMENTED; malformed jute closes the connection.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from zabby.errors import Err, RemoteProtocolError
from zabby.opcodes import OpCode
from zabby.wire import jute
from zabby.wire.framing import FrameDecoder
from zabby.wire.messages import PROTOCOL_NAME, connect_request, pack

if TYPE_CHECKING:
    from zabby.server.client_conn import Connection

LOGGER = logging.getLogger("zabby.server.jute")

RECEIVE_BYTES_MAX = 256 * 1024
HANDSHAKE_TIMEOUT_S = 10.0
DETECT_BYTES = 5  # the length prefix and the first byte of the payload
EXPIRED_PASSWORD = bytes(16)

_CREATE_OPS = (OpCode.CREATE, OpCode.CREATE2, OpCode.CREATE_CONTAINER, OpCode.CREATE_TTL)


# ----------------------------------------------------------------------------- detection
async def read_detect_bytes(conn: Connection, first: bytes) -> bytes:
    """``first`` extended to the bytes that tell jute from msgpack (or what came before EOF).

    Four ASCII letters are an unknown four-letter word, never a frame length under
    jute.maxbuffer: nothing more is awaited (the msgpack path refuses it at once)."""
    if first[:4].isalpha():
        return first
    with trio.move_on_after(HANDSHAKE_TIMEOUT_S):
        while len(first) < DETECT_BYTES:
            chunk = await conn.stream.receive_some(RECEIVE_BYTES_MAX)
            if not chunk:
                break
            first += chunk
    return first


def looks_like_jute(first: bytes) -> bool:
    """A jute ConnectRequest: a length, then protocolVersion 0 (msgpack arrays never start 0x00)."""
    return len(first) >= DETECT_BYTES and first[4] == 0


# ----------------------------------------------------------------------------- requests → op model
def _acl(entries: list[jute.ACL] | None) -> list[list[Any]] | None:
    if entries is None:
        return None
    # kazoo writes an empty id (as for the "auth" scheme) as a null ustring
    return [[e.perms, e.id.scheme, "" if e.id.id is None else e.id.id] for e in entries]


def _paths(paths: list[str | None] | None) -> list[str]:
    return [p for p in paths or () if p is not None]


def _data(data: bytes | None) -> bytes:
    return b"" if data is None else data  # ZooKeeper clients send null for "no data"


def request_args(op: int, record: jute.Record | None) -> tuple[int, list[Any]]:
    """A jute request record → zabby's (op, args), as docs/protocol.md lists them."""
    r: Any = record
    if op in (OpCode.CREATE, OpCode.CREATE2, OpCode.CREATE_CONTAINER):
        return op, [r.path, _data(r.data), _acl(r.acl), r.flags, 0]
    if op == OpCode.CREATE_TTL:
        return op, [r.path, _data(r.data), _acl(r.acl), r.flags, r.ttl]
    if op in (OpCode.DELETE, OpCode.CHECK):
        return op, [r.path, r.version]
    if op in (OpCode.EXISTS, OpCode.GET_DATA, OpCode.GET_CHILDREN, OpCode.GET_CHILDREN2):
        return op, [r.path, r.watch]
    if op == OpCode.SET_DATA:
        return op, [r.path, _data(r.data), r.version]
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
        return op, [r.scheme, _data(r.auth)]
    if op == OpCode.SET_WATCHES:
        return op, [r.relative_zxid, _paths(r.data_watches), _paths(r.exist_watches), _paths(r.child_watches), [], []]
    if op == OpCode.SET_WATCHES2:
        return OpCode.SET_WATCHES, [r.relative_zxid, _paths(r.data_watches), _paths(r.exist_watches), _paths(r.child_watches),
                                    _paths(r.persistent_watches), _paths(r.persistent_recursive_watches)]  # fmt: skip
    if op == OpCode.MULTI:
        return op, [[[sub_op, *request_args(sub_op, sub)[1]] for sub_op, sub in r.ops]]
    if op == OpCode.MULTI_READ:
        return op, [[[sub_op, *request_args(sub_op, sub)[1]] for sub_op, sub in r.ops]]
    return op, []  # ping, whoAmI, closeSession, and ops zabby answers UNIMPLEMENTED


# ----------------------------------------------------------------------------- replies → jute
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
    if request_op == OpCode.CREATE:
        return OpCode.CREATE, 0, jute.CreateResponse(value[0])
    if request_op in _CREATE_OPS:
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
    if op in _CREATE_OPS:
        return jute.Create2Response(values[0], _stat(values[1]))
    if op == OpCode.EXISTS:
        return jute.ExistsResponse(_stat(values[0]))
    if op == OpCode.GET_DATA:
        return jute.GetDataResponse(values[0], _stat(values[1]))
    if op == OpCode.SET_DATA:
        return jute.SetDataResponse(_stat(values[0]))
    if op == OpCode.GET_ACL:
        return jute.GetACLResponse(_acls(values[0]), _stat(values[1]))
    if op == OpCode.SET_ACL:
        return jute.SetACLResponse(_stat(values[0]))
    if op == OpCode.GET_CHILDREN:
        return jute.GetChildrenResponse(values[0])
    if op == OpCode.GET_CHILDREN2:
        return jute.GetChildren2Response(values[0], _stat(values[1]))
    if op == OpCode.SYNC:
        return jute.SyncResponse(values[0])
    if op in (OpCode.MULTI, OpCode.MULTI_READ):
        return jute.MultiResponse([_multi_result(sub_op, result) for sub_op, result in zip(sub_ops, values[0], strict=True)])
    if op == OpCode.GET_EPHEMERALS:
        return jute.GetEphemeralsResponse(values[0])
    if op == OpCode.GET_ALL_CHILDREN_NUMBER:
        return jute.GetAllChildrenNumberResponse(values[0])
    if op == OpCode.WHO_AM_I:
        return jute.WhoAmIResponse([_client_info(scheme, ident) for scheme, ident in values[0]])
    return None


class JuteCodec:
    """Encodes what a Connection sends (the msgpack protocol's values) as jute frames."""

    def __init__(self, on_failure: Callable[[], None]) -> None:
        self.on_failure = on_failure
        self.pending: deque[tuple[int, int, tuple[int, ...]]] = deque()  # (xid, op, sub-ops)
        self.failed = False  # a reply could not be encoded: the connection must close

    def expect(self, xid: int, op: int, sub_ops: tuple[int, ...] = ()) -> None:
        """Remember the op of a request handed to the Connection; its reply comes in order."""
        self.pending.append((xid, op, sub_ops))

    def encode(self, value: list[Any]) -> bytes:
        """The jute frame for one message of the Connection, given as the msgpack protocol's
        values (b"": send nothing).

        Runs inside the server's apply loop (write replies, watch events), so it never
        raises: a frame it cannot translate is logged and ends this connection only.
        """
        try:
            return self._encode(value)
        except Exception:
            LOGGER.exception("cannot encode a reply as jute; closing the connection")
            self.failed = True
            self.on_failure()
            return b""

    def _encode(self, value: list[Any]) -> bytes:
        if value[0] == PROTOCOL_NAME:
            return self._connect_response(value)
        xid, zxid, err = value[0], value[1], value[2]
        if xid == jute.XID_NOTIFICATION:
            event = jute.WatcherEvent(value[3], value[4], value[5])
            return jute.encode_reply(jute.ReplyHeader(xid, -1, 0), event)
        op, sub_ops = self._pop(xid)
        if err:
            return jute.encode_reply(jute.ReplyHeader(xid, zxid, err))
        if op == OpCode.EXISTS and value[3] is None:  # ZooKeeper: a missing node is NONODE
            return jute.encode_reply(jute.ReplyHeader(xid, zxid, int(Err.NONODE)))
        return jute.encode_reply(jute.ReplyHeader(xid, zxid, 0), response_record(op, value[3:], sub_ops))

    def _pop(self, xid: int) -> tuple[int, tuple[int, ...]]:
        while self.pending:
            pending_xid, op, sub_ops = self.pending.popleft()
            if pending_xid == xid:
                return op, sub_ops
            LOGGER.error("jute reply for xid %d while xid %d was due; dropping that expectation", xid, pending_xid)
        return -1, ()  # a reply nobody asked for: answered with the header only

    @staticmethod
    def _connect_response(value: list[Any]) -> bytes:
        _, _, err, timeout_ms, session_id, password, _, _, _ = value
        if err == Err.SESSIONEXPIRED:  # ZooKeeper's answer for an expired or unknown session
            return jute.frame(jute.ConnectResponse(0, 0, 0, EXPIRED_PASSWORD, False).encode())
        if err:  # not serving / behind the client: ZooKeeper closes without an answer
            return b""
        return jute.frame(jute.ConnectResponse(0, timeout_ms, session_id, password, False).encode())


# ----------------------------------------------------------------------------- the connection
async def serve(conn: Connection, first: bytes) -> None:
    """Run ``conn`` as a jute connection; ``first`` holds the bytes read so far."""
    server = conn.server
    codec = JuteCodec(conn.close_after_flush)
    conn.codec = codec
    buffer_bytes_max = server.config.jute_buffer_bytes_max
    decoder = FrameDecoder(buffer_bytes_max + 1024)
    try:
        frames = decoder.receive_data(first)
        with trio.move_on_after(HANDSHAKE_TIMEOUT_S):
            while not frames:
                data = await conn.stream.receive_some(RECEIVE_BYTES_MAX)
                if not data:
                    return
                frames = decoder.receive_data(data)
        if not frames:
            return
        request = jute.decode_connect_request(frames.pop(0), buffer_bytes_max)
        if request.protocol_version != 0:
            raise RemoteProtocolError(f"unsupported jute protocol version {request.protocol_version}")
        password = request.password or b""
        handshake = connect_request(request.last_zxid_seen, request.timeout_ms, request.session_id, password, request.read_only)
        if not await conn._handshake(pack(handshake)):
            return
        _handle_frames(conn, codec, frames, buffer_bytes_max)
        while not conn._closing:
            if server.outstanding >= server.config.outstanding_requests_max:
                await server.wait_unthrottled()
            data = await conn.stream.receive_some(RECEIVE_BYTES_MAX)
            if not data:
                return
            _handle_frames(conn, codec, decoder.receive_data(data), buffer_bytes_max)
    except RemoteProtocolError as exc:
        LOGGER.warning("closing jute connection %s:%d: %s", *conn.address, exc)
        server.stats.connection_drop_count += 1
        if "over" in str(exc):
            server.stats.large_requests_rejected += 1
        conn.close_after_flush()


def _handle_frames(conn: Connection, codec: JuteCodec, frames: list[bytes], buffer_bytes_max: int) -> None:
    if not frames:
        return
    conn.server.touch(conn.session_id)
    for payload in frames:
        if conn._closing:
            return
        request = jute.decode_request(payload, buffer_bytes_max)
        op, args = request_args(request.op, request.record) if request.known else (request.op, [])
        sub_ops: tuple[int, ...] = ()
        if request.op in (OpCode.MULTI, OpCode.MULTI_READ):
            sub_ops = tuple(sub_op for sub_op, _ in request.record.ops)  # type: ignore[union-attr]
        codec.expect(request.xid, op, sub_ops)
        conn._handle([request.xid, op, *args])
