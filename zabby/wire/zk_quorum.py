"""ZooKeeper 3.8's peer protocol as bytes: the quorum port's packets, the election port's
handshake and votes, and ZooKeeper's txns as zabby's; sans-I/O.

Grammar (jute and ``DataOutputStream``, big-endian; ZooKeeper's ``Learner``, ``LearnerHandler``,
``QuorumCnxManager`` and ``FastLeaderElection``)::

    quorum port   := QuorumPacket*                       (no frames: one jute record after another)
    QuorumPacket  := type:int zxid:long data:buffer authinfo:vector<Id>
                     (after a SNAP packet the leader writes its serialized tree, then the ustring
                      "BenWasHere", before the next packet: ``zabby.wire.zk_snapshot``)
    data, by type:
      FOLLOWERINFO, OBSERVERINFO  LearnerInfo := serverid:long protocolVersion:int configVersion:long   (zxid: acceptedEpoch << 32)
      LEADERINFO                  protocolVersion:int (0x10000)                                        (zxid: newEpoch << 32)
      ACKEPOCH                    currentEpoch:int, -1 when the epoch was accepted before           (zxid: last logged)
      PROPOSAL, INFORM            a txn log entry (``zabby.wire.zk_txn``: TxnHeader, txn, TxnDigest)
      NEWLEADER                   the leader's membership, as zoo.cfg's server lines (may be empty)
      REQUEST                     sessionId:long cxid:int type:int, then the request record's bytes
      PING  learner → leader      (sessionId:long timeout:int)*: the sessions its clients touched
      REVALIDATE learner → leader sessionId:long timeout:int;  leader → learner: sessionId:long valid:boolean
      ACK, COMMIT, DIFF, TRUNC, SNAP, UPTODATE, SYNC: none (the zxid says it)
    election port := initial message, then frames in both directions
    initial       := protocolVersion:long (-65536; -65535 with several addresses) sid:long
                     length:int "host:port" ("|"-separated for -65535)
    frame         := length:int payload  (at most 512 KiB)
    vote payload  := state:int leader:long zxid:long electionEpoch:long peerEpoch:long version:int (2)
                     configLength:int config  (28- and 40-byte votes of older releases are read too)

A server that dials with the smaller id hangs up after its initial message and waits to be
dialled back: one connection per pair, the larger id's (``QuorumCnxManager``).

Reading anything malformed raises ``RemoteProtocolError`` (the link is dropped, as ZooKeeper
drops it); a packet whose data passes ``packet_bytes_max`` raises ``OversizeError``.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from zabby.errors import OversizeError, RemoteProtocolError
from zabby.opcodes import CONTAINER_OWNER, OpCode, owner_ttl_ms, ttl_owner
from zabby.tree.txns import Txn
from zabby.wire import jute
from zabby.wire.jute import Id, Reader, Record, _record
from zabby.wire.jute_codec import request_args
from zabby.wire.zk_snapshot import session_password
from zabby.wire.zk_txn import ENTRY_BYTES_MAX, ZkTxn, ZkTxnError, decode_entry, encode_entry

PROTOCOL_VERSION = 0x10000  # Zab 1.0, in LearnerInfo and LEADERINFO
SNAP_SIGNATURE = "BenWasHere"  # ends a SNAP's serialized tree
ELECTION_PROTOCOL_V1 = -65536  # QuorumCnxManager.PROTOCOL_VERSION_V1: one address
ELECTION_PROTOCOL_V2 = -65535  # several addresses, "|"-separated
INITIAL_ADDRESS_BYTES_MAX = 2048  # QuorumCnxManager.maxBuffer
ELECTION_FRAME_BYTES_MAX = 512 * 1024  # QuorumCnxManager.PACKETMAXSIZE
VOTE_VERSION = 2  # FastLeaderElection.Notification.CURRENTVERSION: the vote carries its config
PACKET_BYTES_MAX = 2 * ENTRY_BYTES_MAX  # a packet's data: a txn entry, with jute.maxbuffer's slack


class PacketType(enum.IntEnum):
    """``Leader``'s packet types."""

    REQUEST = 1
    PROPOSAL = 2
    ACK = 3
    COMMIT = 4
    PING = 5
    REVALIDATE = 6
    SYNC = 7
    INFORM = 8
    COMMITANDACTIVATE = 9
    NEWLEADER = 10
    FOLLOWERINFO = 11
    UPTODATE = 12
    DIFF = 13
    TRUNC = 14
    SNAP = 15
    OBSERVERINFO = 16
    LEADERINFO = 17
    ACKEPOCH = 18
    INFORMANDACTIVATE = 19


class ElectionState(enum.IntEnum):
    """``QuorumPeer.ServerState``, as a vote carries it (its ordinal)."""

    LOOKING = 0
    FOLLOWING = 1
    LEADING = 2
    OBSERVING = 3


# ----------------------------------------------------------------------------- quorum packets
@_record("i", "l", "b", ("v", Id))
class QuorumPacket(Record):
    type: int
    zxid: int
    data: bytes | None
    authinfo: list[Id] | None


@_record("l", "i", "l")
class LearnerInfo(Record):
    server_id: int
    protocol_version: int
    config_version: int


def packet(type_: int, zxid: int, data: bytes | None = None, authinfo: list[Id] | None = None) -> bytes:
    return QuorumPacket(type_, zxid, data, authinfo).encode()


_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_HEAD = struct.Struct(">iqi")  # type, zxid, data length


def _packet_end(buf: bytes | bytearray, pos: int, data_bytes_max: int) -> int | None:
    """Where the packet at ``pos`` ends, or None if ``buf`` does not hold all of it yet."""
    end = len(buf)
    if end - pos < _HEAD.size:
        return None
    _, _, length = _HEAD.unpack_from(buf, pos)
    if length < -1:
        raise RemoteProtocolError(f"a quorum packet with data of length {length}")
    if length > data_bytes_max:
        raise OversizeError(f"a quorum packet of {length} bytes (at most {data_bytes_max})")
    pos += _HEAD.size + max(length, 0)
    if end - pos < 4:
        return None
    (count,) = _INT.unpack_from(buf, pos)
    pos += 4
    if count < -1 or count > end:
        raise RemoteProtocolError(f"a quorum packet with {count} auth ids")
    for _ in range(max(count, 0) * 2):  # each Id: two ustrings
        if end - pos < 4:
            return None
        (size,) = _INT.unpack_from(buf, pos)
        if size < -1 or size > data_bytes_max:
            raise RemoteProtocolError(f"an auth id of {size} bytes in a quorum packet")
        pos += 4 + max(size, 0)
    return pos if pos <= end else None


class PacketReader:
    """A quorum stream as it arrives: ``feed`` bytes, ``next_packet`` until None.  ``take_rest``
    hands over what is buffered (the tree a SNAP packet announced is read elsewhere) and
    ``give_back`` returns what came after it.  O(bytes read): consumed bytes are dropped in
    slices."""

    def __init__(self, data_bytes_max: int = PACKET_BYTES_MAX) -> None:
        self.data_bytes_max = data_bytes_max
        self._buffer = bytearray()
        self._pos = 0

    def feed(self, data: bytes | bytearray) -> None:
        if self._pos > (1 << 16) and self._pos * 2 > len(self._buffer):
            del self._buffer[: self._pos]
            self._pos = 0
        self._buffer += data

    def next_packet(self) -> QuorumPacket | None:
        end = _packet_end(self._buffer, self._pos, self.data_bytes_max)
        if end is None:
            return None
        reader = Reader(bytes(self._buffer[self._pos : end]), 0, self.data_bytes_max)
        self._pos = end
        return QuorumPacket.read(reader)

    def take_rest(self) -> bytes:
        rest = bytes(self._buffer[self._pos :])
        self._buffer, self._pos = bytearray(), 0
        return rest

    def give_back(self, data: bytes) -> None:
        self._buffer[self._pos : self._pos] = data

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer) - self._pos


def learner_info(packet_: QuorumPacket) -> LearnerInfo:
    """A FOLLOWERINFO's or OBSERVERINFO's LearnerInfo (``LearnerHandler`` reads as much as there is)."""
    data = packet_.data or b""
    if len(data) < 8:
        raise RemoteProtocolError(f"a {PacketType(packet_.type).name} without a server id")
    server_id = _LONG.unpack_from(data)[0]
    version = _INT.unpack_from(data, 8)[0] if len(data) >= 12 else 0
    config_version = _LONG.unpack_from(data, 12)[0] if len(data) >= 20 else 0
    return LearnerInfo(server_id, version, config_version)


def int_data(packet_: QuorumPacket) -> int:
    """The int a LEADERINFO or ACKEPOCH carries."""
    data = packet_.data or b""
    if len(data) < 4:
        raise RemoteProtocolError(f"a {PacketType(packet_.type).name} without its int")
    return int(_INT.unpack_from(data)[0])


def int_bytes(value: int) -> bytes:
    return _INT.pack(value)


# ----------------------------------------------------------------------------- data of packets
_TOUCH = struct.Struct(">qi")
_REQUEST_HEAD = struct.Struct(">qii")
_REVALIDATED = struct.Struct(">q?")


def encode_touches(touches: Iterable[tuple[int, int]]) -> bytes:
    """A learner's PING answer: each touched session and its timeout."""
    return b"".join(_TOUCH.pack(session_id, timeout_ms) for session_id, timeout_ms in touches)


def decode_touches(data: bytes | None) -> list[tuple[int, int]]:
    data = data or b""
    if len(data) % _TOUCH.size:
        raise RemoteProtocolError(f"a PING's session touches of {len(data)} bytes")
    return [(int(s), int(t)) for s, t in _TOUCH.iter_unpack(data)]


def encode_revalidate(session_id: int, timeout_ms: int) -> bytes:
    return _TOUCH.pack(session_id, timeout_ms)


def decode_revalidate(data: bytes | None) -> tuple[int, int]:
    if data is None or len(data) < _TOUCH.size:
        raise RemoteProtocolError("a REVALIDATE without its session and timeout")
    session_id, timeout_ms = _TOUCH.unpack_from(data)
    return int(session_id), int(timeout_ms)


def encode_revalidated(session_id: int, valid: bool) -> bytes:
    return _REVALIDATED.pack(session_id, valid)


def decode_revalidated(data: bytes | None) -> tuple[int, bool]:
    if data is None or len(data) < _REVALIDATED.size:
        raise RemoteProtocolError("a REVALIDATE answer without its session and verdict")
    session_id, valid = _REVALIDATED.unpack_from(data)
    return int(session_id), bool(valid)


def encode_request(session_id: int, cxid: int, op: int, body: bytes) -> bytes:
    return _REQUEST_HEAD.pack(session_id, cxid, op) + body


def decode_request(data: bytes | None) -> tuple[int, int, int, bytes]:
    """A REQUEST's (session id, cxid, op, the request record's bytes)."""
    if data is None or len(data) < _REQUEST_HEAD.size:
        raise RemoteProtocolError("a REQUEST without its session, cxid and type")
    session_id, cxid, op = _REQUEST_HEAD.unpack_from(data)
    return int(session_id), int(cxid), int(op), bytes(data[_REQUEST_HEAD.size :])


# ----------------------------------------------------------------------------- forwarded requests
def request_body(op: int, args: tuple[Any, ...] | list[Any]) -> bytes:
    """The bytes ZooKeeper's learner forwards for a write of zabby's ``(op, args)``: the
    client's request record (``createSession``: its timeout; ``closeSession``: nothing).

    Raises:
        ValueError: an op no learner forwards.
    """
    if op == OpCode.CREATE_SESSION:
        return _INT.pack(int(args[0]))
    if op == OpCode.CLOSE_SESSION:
        return b""
    return _request_record(op, args).encode()


def _acl_records(acl: Iterable[Iterable[Any]] | None) -> list[jute.ACL] | None:
    if acl is None:
        return None
    return [jute.ACL(int(perms), Id(scheme, ident)) for perms, scheme, ident in acl]


def _request_record(op: int, args: tuple[Any, ...] | list[Any]) -> Record:  # noqa: C901 -- one branch per op
    if op in (OpCode.CREATE, OpCode.CREATE2, OpCode.CREATE_CONTAINER):
        path, data, acl, flags, _ = args
        return jute.CreateRequest(path, data, _acl_records(acl), flags)
    if op == OpCode.CREATE_TTL:
        path, data, acl, flags, ttl_ms = args
        return jute.CreateTTLRequest(path, data, _acl_records(acl), flags, ttl_ms)
    if op == OpCode.DELETE:
        return jute.DeleteRequest(*args)
    if op == OpCode.CHECK:
        return jute.CheckVersionRequest(*args)
    if op == OpCode.SET_DATA:
        return jute.SetDataRequest(*args)
    if op == OpCode.SET_ACL:
        path, acl, version = args
        return jute.SetACLRequest(path, _acl_records(acl), version)
    if op == OpCode.SYNC:
        return jute.SyncRequest(*args)
    if op == OpCode.DELETE_CONTAINER:
        return jute.DeleteRequest(args[0], -1)
    if op == OpCode.MULTI:
        return jute.MultiRequest([(sub[0], _request_record(sub[0], tuple(sub[1:]))) for sub in args[0]])
    raise ValueError(f"op {op} is not a write a learner forwards")


def request_from_body(session_id: int, op: int, body: bytes) -> tuple[Any, ...]:
    """A forwarded request's bytes as zabby's args for ``op`` (a createSession's with the
    password ZooKeeper derives from the session id).

    Raises:
        RemoteProtocolError: bytes that are not the op's request record.
    """
    if op == OpCode.CREATE_SESSION:
        if len(body) < 4:
            raise RemoteProtocolError("a forwarded createSession without its timeout")
        return (int(_INT.unpack_from(body)[0]), session_password(session_id))
    if op == OpCode.CLOSE_SESSION:
        return ()
    if op == OpCode.DELETE_CONTAINER:
        path = Reader(body).ustring()
        return (path,)
    record_type = jute.REQUEST_RECORDS.get(op)
    if record_type is None:
        raise RemoteProtocolError(f"a forwarded request of op {op}, which is no write")
    return tuple(request_args(op, record_type.decode(body))[1])


# ----------------------------------------------------------------------------- txns
def txn_from_zk(zk: ZkTxn) -> Txn:
    """ZooKeeper's txn as the zabby txn that does the same to a tree.

    Raises:
        ZkTxnError: a txn zabby does not take from a ZooKeeper leader (reconfig).
    """
    return Txn(zk.zxid, zk.session_id, zk.cxid, zk.time_ms, *_zabby_body(zk.type, zk.body, zk.session_id))


def _zabby_body(txn_type: int, body: tuple[Any, ...] | None, session_id: int) -> tuple[int, tuple[Any, ...]]:
    if txn_type in (OpCode.CREATE, OpCode.CREATE2):
        path, data, acl, ephemeral, parent_cversion = body  # type: ignore[misc]
        return OpCode.CREATE, (path, data, acl, session_id if ephemeral else 0, parent_cversion)
    if txn_type == OpCode.CREATE_TTL:
        path, data, acl, parent_cversion, ttl_ms = body  # type: ignore[misc]
        return OpCode.CREATE, (path, data, acl, ttl_owner(ttl_ms), parent_cversion)
    if txn_type == OpCode.CREATE_CONTAINER:
        path, data, acl, parent_cversion = body  # type: ignore[misc]
        return OpCode.CREATE, (path, data, acl, CONTAINER_OWNER, parent_cversion)
    if txn_type == OpCode.CREATE_SESSION:
        return OpCode.CREATE_SESSION, (body[0], session_password(session_id))  # type: ignore[index]
    if txn_type == OpCode.ERROR:
        return OpCode.ERROR, (body[0], "")  # type: ignore[index]
    if txn_type == OpCode.MULTI:
        ops: list[tuple[int, tuple[Any, ...]]] = []
        failed = any(op_type == OpCode.ERROR for op_type, _ in body[0])  # type: ignore[index]
        for op_type, op_body in body[0]:  # type: ignore[index]
            if op_body is None:
                raise ZkTxnError(f"a multi with an op of type {op_type}")
            if failed and op_type != OpCode.ERROR:
                # ZooKeeper's leader logs the ops before the one that failed as they were,
                # and every server's DataTree.processTxn reads them as errors of code 0: a
                # failed multi changes nothing (zabby's leader logs the errors themselves)
                ops.append((OpCode.ERROR, (0,)))
                continue
            sub_type, sub_body = _zabby_body(op_type, op_body, session_id)
            ops.append((sub_type, sub_body[:1] if sub_type == OpCode.ERROR else sub_body))
        return OpCode.MULTI, (tuple(ops),)
    if txn_type == OpCode.RECONFIG:
        raise ZkTxnError("a reconfig txn: zabby does not follow a ZooKeeper leader through a reconfig")
    if txn_type in (OpCode.DELETE, OpCode.DELETE_CONTAINER, OpCode.SET_DATA, OpCode.SET_ACL, OpCode.CHECK, OpCode.CLOSE_SESSION):
        return txn_type, body if body is not None else (None,)
    raise ZkTxnError(f"unsupported txn type {txn_type}")


def zk_from_txn(txn: Txn, digest: tuple[int, int] | None = None) -> ZkTxn:
    """A zabby txn as the txn ZooKeeper's learners apply.  A create's type is what ZooKeeper's
    leader would have logged for it: createContainer and createTTL by their owner, else
    create2 at the top (a follower answers a create2 from that txn's Stat, and a create
    likewise) and create inside a multi (kazoo reads only create results there)."""
    txn_type, body = _zk_body(txn.type, txn.body, top=True)
    return ZkTxn(txn.session_id, txn.cxid, txn.zxid, txn.time_ms, txn_type, body, digest)


def _zk_body(txn_type: int, body: tuple[Any, ...], *, top: bool) -> tuple[int, tuple[Any, ...] | None]:
    if txn_type == OpCode.CREATE:
        path, data, acl, owner, parent_cversion = body
        if owner == CONTAINER_OWNER:
            return OpCode.CREATE_CONTAINER, (path, data, acl, parent_cversion)
        ttl_ms = owner_ttl_ms(owner)
        if ttl_ms is not None:
            return OpCode.CREATE_TTL, (path, data, acl, parent_cversion, ttl_ms)
        return OpCode.CREATE2 if top else OpCode.CREATE, (path, data, acl, owner != 0, parent_cversion)
    if txn_type == OpCode.CREATE_SESSION:
        return OpCode.CREATE_SESSION, (body[0],)
    if txn_type == OpCode.ERROR:
        return OpCode.ERROR, (body[0],)
    if txn_type == OpCode.MULTI:
        return OpCode.MULTI, (tuple(_zk_body(op_type, op_body, top=False) for op_type, op_body in body[0]),)
    if txn_type == OpCode.CLOSE_SESSION:
        return OpCode.CLOSE_SESSION, body if body[0] is not None else ((),)
    return txn_type, body


def encode_txn(txn: Txn, digest: tuple[int, int] | None = None) -> bytes:
    """A PROPOSAL's or INFORM's data for a zabby txn."""
    return encode_entry(zk_from_txn(txn, digest))


def decode_txn(data: bytes | None) -> ZkTxn:
    """A PROPOSAL's or INFORM's data.  Raises: RemoteProtocolError for an entry ZooKeeper
    could not have written."""
    try:
        return decode_entry(data or b"")
    except ZkTxnError as exc:
        raise RemoteProtocolError(f"a txn in a quorum packet: {exc}") from None


# ----------------------------------------------------------------------------- the election port
@dataclass(frozen=True, slots=True)
class InitialMessage:
    """What a server dialling the election port says first: its id and election address(es)."""

    sid: int
    addresses: tuple[tuple[str, int], ...] = ()


def encode_initial_message(sid: int, host: str, port: int) -> bytes:
    address = f"{host}:{port}".encode()
    return _LONG.pack(ELECTION_PROTOCOL_V1) + _LONG.pack(sid) + _INT.pack(len(address)) + address


def read_initial_message(buf: bytes | bytearray) -> tuple[InitialMessage, int] | None:
    """The initial message at the start of ``buf`` and its length; None until it is whole.
    An id alone (a protocol version that is not negative) is the oldest releases' form.

    Raises:
        RemoteProtocolError: an unknown protocol version, an address of a bad length or form.
    """
    if len(buf) < 8:
        return None
    (version,) = _LONG.unpack_from(buf)
    if version >= 0:
        return InitialMessage(version), 8
    if version not in (ELECTION_PROTOCOL_V1, ELECTION_PROTOCOL_V2):
        raise RemoteProtocolError(f"an election link of protocol version {version}")
    if len(buf) < 20:
        return None
    (sid,) = _LONG.unpack_from(buf, 8)
    (length,) = _INT.unpack_from(buf, 16)
    if not 0 < length <= INITIAL_ADDRESS_BYTES_MAX:
        raise RemoteProtocolError(f"an election address of {length} bytes")
    if len(buf) < 20 + length:
        return None
    addresses = []
    for text in bytes(buf[20 : 20 + length]).decode(errors="replace").split("|"):
        host, _, port = text.strip().rpartition(":")
        if not host or not port.isdigit():
            raise RemoteProtocolError(f"an election address {text!r} that is not host:port")
        addresses.append((host.strip("[]"), int(port)))
    return InitialMessage(sid, tuple(addresses)), 20 + length


@dataclass(frozen=True, slots=True)
class Vote:
    """One FastLeaderElection notification as it travels (``ToSend``)."""

    state: int
    leader: int
    zxid: int
    election_epoch: int
    peer_epoch: int
    version: int = VOTE_VERSION
    config: bytes = b""


_VOTE = struct.Struct(">iqqqqii")  # state leader zxid electionEpoch peerEpoch version configLength
_VOTE_28 = struct.Struct(">iqqq")


def encode_vote(vote: Vote) -> bytes:
    """A vote's payload (the frame's length prefix is the caller's)."""
    return _VOTE.pack(vote.state, vote.leader, vote.zxid, vote.election_epoch, vote.peer_epoch, vote.version, len(vote.config)) + vote.config


def decode_vote(payload: bytes) -> Vote:
    """A vote as ``FastLeaderElection.WorkerReceiver`` reads it: 28 bytes (no peer epoch: the
    zxid's), 40 (no version), or the full form with the config after version 2.

    Raises:
        RemoteProtocolError: shorter than 28 bytes, or a config length past the end.
    """
    size = len(payload)
    if size < 28:
        raise RemoteProtocolError(f"a vote of {size} bytes")
    state, leader, zxid, election_epoch = _VOTE_28.unpack_from(payload)
    if size == 28:
        return Vote(state, leader, zxid, election_epoch, zxid >> 32, 0)
    if size < 40:
        raise RemoteProtocolError(f"a vote of {size} bytes")
    (peer_epoch,) = _LONG.unpack_from(payload, 28)
    if size == 40:
        return Vote(state, leader, zxid, election_epoch, peer_epoch, 0)
    if size < 44:
        raise RemoteProtocolError(f"a vote of {size} bytes")
    (version,) = _INT.unpack_from(payload, 36)
    config = b""
    if version > 1:
        (length,) = _INT.unpack_from(payload, 40)
        if not 0 <= length <= size - 44:
            raise RemoteProtocolError(f"a vote's config of {length} bytes in {size - 44}")
        config = bytes(payload[44 : 44 + length])
    return Vote(state, leader, zxid, election_epoch, peer_epoch, version, config)


def election_frame(payload: bytes) -> bytes:
    return _INT.pack(len(payload)) + payload


def config_text(members: Iterable[tuple[int, str, int, int, bool]], version: int = 0) -> str:
    """A membership as ZooKeeper's ``QuorumMaj.toString`` writes it into votes and NEWLEADER:
    ``server.N=host:quorumPort:electionPort:participant|observer`` lines, then ``version=<hex>``.
    ``members``: (sid, host, quorum port, election port, observer)."""
    lines = [f"server.{sid}={host}:{quorum}:{election}:{'observer' if observer else 'participant'}"
             for sid, host, quorum, election, observer in sorted(members)]  # fmt: skip
    return "".join(line + "\n" for line in lines) + f"version={version:x}"

