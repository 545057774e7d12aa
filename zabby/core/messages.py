"""Quorum messages: election notifications and Zab packets, with ZooKeeper's type numbers.

On the wire a message is one msgpack array ``[TYPE, field, ...]`` inside a length-prefixed
frame, its fields in their dataclass's order (``decode`` passes them positionally, so a field
kept off the wire comes after them all); txns travel as their ``Txn`` arrays.  ``decode`` turns anything ill-formed into a
``RemoteProtocolError`` (the link is dropped and the learner resynchronises).

Zabby batches where ZooKeeper sends one packet per txn: ``Proposal`` carries several txns,
and ``Commit``/``Ack`` are cumulative (everything up to the zxid).  A learner still checks
that a COMMIT names a proposal it holds, and never applies out of order.  ``Logged`` has no
ZooKeeper counterpart: it lets a follower that makes a quorum with the leader commit without
waiting for the COMMIT (see ``Peer``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from operator import attrgetter
from typing import Any, ClassVar

import msgpack

from zabby.errors import RemoteProtocolError
from zabby.records import immutable
from zabby.tree.txns import Txn


@immutable
class Notification:
    """A fast-leader-election vote: who the sender proposes, and the sender's own state.
    ``config``: the sender's committed membership (its text), so that a server which missed
    a reconfig learns it while looking, as in ZooKeeper, and a joiner whose zoo.cfg lists
    itself beside the initial servers learns that they do not count it;
    ``proposed``: the one it logged and has not committed, which only makes the receiver's
    quorums stricter (both memberships) until its next sync tells it the leader's."""

    TYPE: ClassVar[int] = 100
    leader: int
    zxid: int
    peer_epoch: int
    election_epoch: int
    state: str  # ServerState value of the sender
    config: str = ""
    proposed: str = ""  # the sender's proposed membership (a RECONFIG logged, not committed)
    logged: int = -1  # the sender's own last logged zxid: a membership it names can be no later


@immutable
class Request:
    """A client write (or session close) forwarded by a learner to the leader: the session and
    the identities its client proved to the learner.  ``superuser`` stays on the wire for older
    servers and is ignored: the leader judges the identities itself."""

    TYPE: ClassVar[int] = 1
    session_id: int
    cxid: int
    op: int
    args: tuple[Any, ...]
    auth_ids: tuple[tuple[str, str], ...] = ()
    superuser: bool = False


@immutable
class Proposal:
    TYPE: ClassVar[int] = 2
    txns: tuple[Txn, ...]


@immutable
class Ack:
    TYPE: ClassVar[int] = 3
    zxid: int


@immutable
class Commit:
    """Everything up to ``zxid`` is committed.  ``designated``: that commit activated a
    membership that leaves the leader out; the learners elect this server next (ZooKeeper's
    COMMITANDACTIVATE with its designated leader)."""

    TYPE: ClassVar[int] = 4
    zxid: int
    designated: int = 0


@immutable
class Logged:
    """Leader → follower: the leader's own log holds everything up to ``zxid`` (as its own
    ACK would say); sent only to a follower that makes a quorum with the leader alone."""

    TYPE: ClassVar[int] = 103
    zxid: int


@immutable
class Ping:
    """Leader → learner: liveness, and the leader's latest confirmation ``round`` (see
    ``Peer``'s sync).  Learner → leader: the sessions its clients touched, and the round of
    the leader's ping it answers."""

    TYPE: ClassVar[int] = 5
    sessions: tuple[int, ...] = ()
    round: int = 0


@immutable
class Sync:
    """A client ``sync``: learner → leader asks, leader → learner answers in stream order."""

    TYPE: ClassVar[int] = 7
    session_id: int
    cxid: int


@immutable
class Inform:
    """Committed txns for observers (PROPOSAL and COMMIT in one)."""

    TYPE: ClassVar[int] = 8
    txns: tuple[Txn, ...]


@immutable
class NewLeader:
    """``config``: the leader's committed membership (``zabby.membership`` text), which a
    learner synced by SNAP could not learn from its log; ``proposed``: the membership of a
    RECONFIG it logged and has not committed (ZooKeeper's NEWLEADER carries this one, the
    last seen), which a SNAP's tree holds but no logged txn names."""

    TYPE: ClassVar[int] = 10
    zxid: int
    config: str = ""
    proposed: str = ""


@immutable
class FollowerInfo:
    """``config_version``: the version of the learner's committed membership (ZooKeeper's
    LearnerInfo carries it too): a leader that knows no membership that recent is stale."""

    TYPE: ClassVar[int] = 11
    accepted_epoch: int
    last_zxid: int
    observer: bool = False
    config_version: int = 0


@immutable
class UpToDate:
    TYPE: ClassVar[int] = 12


@immutable
class Diff:
    TYPE: ClassVar[int] = 13
    zxid: int


@immutable
class Trunc:
    TYPE: ClassVar[int] = 14
    zxid: int


@immutable
class Snap:
    """Sync by snapshot: the tree as of ``zxid`` follows (as SnapChunk messages)."""

    TYPE: ClassVar[int] = 15
    zxid: int


@immutable
class LeaderInfo:
    TYPE: ClassVar[int] = 17
    epoch: int


@immutable
class AckEpoch:
    """``snapshot_wanted``: the learner cannot truncate to where the leader would (see Peer)."""

    TYPE: ClassVar[int] = 18
    current_epoch: int
    last_zxid: int
    snapshot_wanted: bool = False


@immutable
class SnapChunk:
    """Part of a snapshot stream (shell level: the core never sees chunks).  ``encoded``, not
    on the wire: the records' bytes as they arrived, one msgpack value after another (what a
    snapshot file holds), when ``decode`` could cut them out of the frame; a learner writes
    them to disk as they are (``zabby.storage.snapshot.SnapshotWriter``)."""

    TYPE: ClassVar[int] = 101
    records: tuple[Any, ...]
    last: bool
    encoded: bytes | memoryview = dataclasses.field(default=b"", compare=False, repr=False, metadata={"wire": False})


@immutable
class TreeDigest:
    """Leader → learner: the leader's tree digest right after it applied ``zxid`` (shell level,
    like SnapChunk; ZooKeeper attaches a digest to its txns).  A learner that computes another
    digest at that zxid resyncs by SNAP."""

    TYPE: ClassVar[int] = 102
    zxid: int
    digest: int


@immutable
class Revalidate:
    """Learner → leader: a client re-attached to ``session_id`` here; the leader touches it,
    makes this learner its owner, and answers whether it is still open (ZooKeeper's
    REVALIDATE; shell level, like TreeDigest: the engine keeps the sessions).  Only in
    ZooKeeper's protocol: zabby's leader keeps no session owners."""

    TYPE: ClassVar[int] = 6
    session_id: int
    timeout_ms: int


@immutable
class Revalidated:
    """Leader → learner: the answer to a ``Revalidate``."""

    TYPE: ClassVar[int] = 104
    session_id: int
    valid: bool


Message = (
    Notification | Request | Proposal | Ack | Commit | Logged | Ping | Sync | Inform | NewLeader
    | FollowerInfo | UpToDate | Diff | Trunc | Snap | LeaderInfo | AckEpoch | SnapChunk | TreeDigest | Revalidate | Revalidated
)  # fmt: skip

# zabby's wire; Revalidate and Revalidated travel only in ZooKeeper's protocol (zabby.core.zk_link)
_TYPES: dict[int, type[Any]] = {
    cls.TYPE: cls
    for cls in (Notification, Request, Proposal, Ack, Commit, Logged, Ping, Sync, Inform, NewLeader,
                FollowerInfo, UpToDate, Diff, Trunc, Snap, LeaderInfo, AckEpoch, SnapChunk, TreeDigest)  # fmt: skip
}
_FIELDS = {type_: tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("wire", True)) for type_, cls in _TYPES.items()}
_unpackb = msgpack.unpackb
_new_tuple = tuple.__new__  # a Txn from a decoded array, without Txn.__new__'s call per field
_SNAP_CHUNK_HEAD = bytes([0x93, SnapChunk.TYPE])  # a 3-array, then the type as a positive fixint
_ARRAY_HEADER_BYTES = {**{code: 1 for code in range(0x90, 0xA0)}, 0xDC: 3, 0xDD: 5}  # fixarray, array 16, array 32


_ANNOTATED_KINDS: dict[str, type[Any]] = {"int": int, "str": str, "bool": bool}


def _field_kinds(cls: type[Any]) -> tuple[type[Any], ...]:
    """The Python type each wire field must decode to (a tuple for any ``tuple[...]``)."""
    kinds = []
    for field in dataclasses.fields(cls):
        if field.metadata.get("wire", True):
            annotation = str(field.type)
            kinds.append(tuple if annotation.startswith("tuple") else _ANNOTATED_KINDS[annotation])
    return tuple(kinds)


_KINDS = {type_: _field_kinds(cls) for type_, cls in _TYPES.items()}


def _check_kinds(type_: int, values: tuple[Any, ...]) -> None:
    """Every field has its type: a packet that lies about one is refused here, as malformed,
    rather than failing somewhere in the core (a forged ``Ack(zxid="x")`` would have).  Asked
    when the fields are not all of their exact types, as msgpack decodes them (``decode``
    compares those first): fewer fields (defaults), or a subclass, or a lie."""
    kinds = _KINDS[type_]
    if len(values) > len(kinds):
        raise TypeError(f"{len(values)} fields for {len(kinds)}")
    for value, kind in zip(values, kinds):
        if not isinstance(value, kind) or (kind is int and value.__class__ is bool):
            raise TypeError(f"a field of type {type(value).__name__} where {kind.__name__} belongs")


def _checked_txns(txns: tuple[Any, ...]) -> tuple[Txn, ...]:
    """The txns of a PROPOSAL or INFORM, each checked to be [zxid, session, cxid, time, type,
    body]: five ints (not bools) and a tuple, as msgpack decodes them (exact classes, in one
    loop: every follower pays it for every txn)."""
    made = []
    for txn in txns:
        if (len(txn) != 6 or txn[5].__class__ is not tuple or txn[0].__class__ is not int or txn[1].__class__ is not int
                or txn[2].__class__ is not int or txn[3].__class__ is not int or txn[4].__class__ is not int):  # fmt: skip
            raise TypeError("a txn is not [zxid, session, cxid, time, type, body]")
        made.append(_new_tuple(Txn, txn))
    return tuple(made)


def _wire_values(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """A message's wire fields as a tuple, read in one call (attrgetter gives a tuple for two
    names or more)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        name = names[0]
        return lambda message: (getattr(message, name),)
    return lambda message: ()


_VALUES = {type_: _wire_values(names) for type_, names in _FIELDS.items()}
# One Packer for every message: msgpack.packb makes a new one each time, which costs more
# than packing an ACK (see zabby.tree.txns for why one can be shared).
_pack = msgpack.Packer(use_bin_type=True).pack


def encode(message: Message) -> bytes:
    return _pack((message.TYPE, *_VALUES[message.TYPE](message)))


def decode(frame: bytes) -> Message:
    try:
        value = _unpackb(frame, raw=False, use_list=False)
        cls = _TYPES[value[0]]
        if cls is Proposal or cls is Inform:
            (_, txns) = value
            return cls(_checked_txns(txns))
        if cls is SnapChunk:
            (_, records, last) = value
            if (records.__class__, last.__class__) != _KINDS[SnapChunk.TYPE]:
                _check_kinds(SnapChunk.TYPE, (records, last))
            return SnapChunk(records, last, _records_bytes(frame))
        fields = value[1:]
        if tuple(map(type, fields)) != _KINDS[value[0]]:  # every field of its exact type: no call
            _check_kinds(value[0], fields)
        # the wire fields in their order, positionally: no dict of them per message
        return cls(*fields)
    except Exception as exc:  # any malformed frame, whatever msgpack, the unpacking or __init__ raised
        raise RemoteProtocolError(f"malformed quorum packet: {exc}") from None


def _records_bytes(frame: bytes) -> memoryview | bytes:
    """The records of a SnapChunk frame that decoded, as bytes: between the array header that
    counts them and the ``last`` flag, the frame's final byte.  b"" when the frame is laid out
    otherwise (another encoder's choices), and the records are packed again instead."""
    header = _ARRAY_HEADER_BYTES.get(frame[2]) if frame[:2] == _SNAP_CHUNK_HEAD and len(frame) > 3 else None
    if header is None or frame[-1] not in (0xC2, 0xC3):  # msgpack's false, true
        return b""
    return memoryview(frame)[2 + header : -1]
