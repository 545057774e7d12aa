"""ZooKeeper's transaction records (``zookeeper.jute``'s ``org.apache.zookeeper.txn``), as its
txn log stores them and its quorum packets carry them; sans-I/O.

Grammar (jute, see ``zabby.wire.jute``)::

    entry        := TxnHeader txn? TxnDigest?            (Util.marshallTxnEntry)
    TxnHeader    := clientId:long cxid:int zxid:long time:long type:int
    txn, by type:
      create, create2      CreateTxn          := path:ustring data:buffer acl:vector<ACL> ephemeral:boolean parentCVersion:int
                           (3.4 and older: no parentCVersion, taken as -1: "the parent's + 1")
      createTTL            CreateTTLTxn       := path data acl parentCVersion:int ttl:long
      createContainer      CreateContainerTxn := path data acl parentCVersion:int
      delete, deleteContainer  DeleteTxn      := path
      setData, reconfig    SetDataTxn         := path data version:int          (the new version)
      setACL               SetACLTxn          := path acl version:int           (the new aversion)
      check                CheckVersionTxn    := path version:int               (inside a multi only)
      createSession        CreateSessionTxn   := timeOut:int
      closeSession         CloseSessionTxn    := paths2Delete:vector<ustring>   (3.5 and older: none)
      error                ErrorTxn           := err:int
      multi                MultiTxn           := vector<Txn>;  Txn := type:int data:buffer (the sub-txn's record)
    TxnDigest    := version:int treeDigest:long          (3.6+, digest.enabled: the tree's digest after the txn)

A decoded entry is a ``ZkTxn``: the header's fields, the body as a tuple in the record's field
order (ACLs as ``(perms, scheme, id)`` tuples, as ``zabby.tree`` keeps them) and the digest.
A multi's body is ``(ops,)``, each op ``(type, body)``.  What ZooKeeper's
``SerializeUtils.deserializeTxn`` tolerates, this does too: a create without parentCVersion,
a closeSession without paths (body None), an entry without a digest.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from zabby.errors import RemoteProtocolError
from zabby.opcodes import OpCode
from zabby.wire.jute import ACL, ACLS, STRINGS, Id, Reader, Record, Writer, _record

# a txn log entry may be as large as ZooKeeper reads one (jute.maxbuffer plus its slack); a
# snapshot or a log written with a larger jute.maxbuffer is read with a larger one
ENTRY_BYTES_MAX = 0xFFFFF + 1024
DIGEST_VERSION = 2  # DigestCalculator.DIGEST_VERSION: the only version whose digests this compares

AclTuple = tuple[tuple[int, str, str], ...]


class ZkTxnError(ValueError):
    """A txn entry that is not one ZooKeeper could have written."""


# ----------------------------------------------------------------------------- records
@_record("l", "i", "l", "l", "i")
class TxnHeader(Record):
    client_id: int
    cxid: int
    zxid: int
    time: int
    type: int


@_record("i", "l")
class TxnDigest(Record):
    version: int
    tree_digest: int


@_record("s", "b", ACLS, "z", "i")
class CreateTxn(Record):
    path: str
    data: bytes | None
    acl: list[ACL]
    ephemeral: bool
    parent_cversion: int


@_record("s", "b", ACLS, "i", "l")
class CreateTTLTxn(Record):
    path: str
    data: bytes | None
    acl: list[ACL]
    parent_cversion: int
    ttl: int


@_record("s", "b", ACLS, "i")
class CreateContainerTxn(Record):
    path: str
    data: bytes | None
    acl: list[ACL]
    parent_cversion: int


@_record("s")
class DeleteTxn(Record):
    path: str


@_record("s", "b", "i")
class SetDataTxn(Record):
    path: str
    data: bytes | None
    version: int


@_record("s", "i")
class CheckVersionTxn(Record):
    path: str
    version: int


@_record("s", ACLS, "i")
class SetACLTxn(Record):
    path: str
    acl: list[ACL]
    version: int


@_record("i")
class CreateSessionTxn(Record):
    timeout: int


@_record(STRINGS)
class CloseSessionTxn(Record):
    paths: list[str]


@_record("i")
class ErrorTxn(Record):
    err: int


@_record("i", "b")
class SubTxn(Record):
    type: int
    data: bytes | None


@_record(("v", SubTxn))
class MultiTxn(Record):
    txns: list[SubTxn]


RECORDS: dict[int, type[Record]] = {
    OpCode.CREATE: CreateTxn, OpCode.CREATE2: CreateTxn, OpCode.CREATE_TTL: CreateTTLTxn,
    OpCode.CREATE_CONTAINER: CreateContainerTxn, OpCode.DELETE: DeleteTxn, OpCode.DELETE_CONTAINER: DeleteTxn,
    OpCode.SET_DATA: SetDataTxn, OpCode.RECONFIG: SetDataTxn, OpCode.SET_ACL: SetACLTxn, OpCode.CHECK: CheckVersionTxn,
    OpCode.CREATE_SESSION: CreateSessionTxn, OpCode.CLOSE_SESSION: CloseSessionTxn, OpCode.ERROR: ErrorTxn,
    OpCode.MULTI: MultiTxn,
}  # fmt: skip
# a multi's ops, as DataTree.processTxn reads them (3.8.4+: create2 too); another type ends the multi
MULTI_OP_TYPES = frozenset({OpCode.CREATE, OpCode.CREATE2, OpCode.CREATE_TTL, OpCode.CREATE_CONTAINER, OpCode.DELETE,
                            OpCode.DELETE_CONTAINER, OpCode.SET_DATA, OpCode.ERROR, OpCode.CHECK})  # fmt: skip


class ZkTxn(NamedTuple):
    """One txn log entry: its header, its body (see the module doc) and its digest."""

    session_id: int
    cxid: int
    zxid: int
    time_ms: int
    type: int
    body: tuple[Any, ...] | None
    digest: tuple[int, int] | None = None  # (version, tree digest)


def acl_tuples(acl: list[ACL] | None) -> AclTuple:
    return tuple((entry.perms, entry.id.scheme or "", entry.id.id or "") for entry in acl or ())


def _acl_records(acl: AclTuple) -> list[ACL]:
    return [ACL(perms, Id(scheme, ident)) for perms, scheme, ident in acl]


def _body(record: Record) -> tuple[Any, ...]:
    """A record's fields as a body tuple, ACLs and multi ops converted."""
    values = type(record).VALUES(record)
    if isinstance(record, MultiTxn):
        return (tuple(decode_op(sub.type, sub.data or b"") for sub in record.txns),)
    if isinstance(record, (CreateTxn, CreateTTLTxn, CreateContainerTxn)):
        return (values[0], values[1], acl_tuples(values[2]), *values[3:])
    if isinstance(record, SetACLTxn):
        return (values[0], acl_tuples(values[1]), values[2])
    if isinstance(record, CloseSessionTxn):
        return (tuple(values[0] or ()),)
    return tuple(values)


def _read_body(reader: Reader, txn_type: int) -> tuple[Any, ...] | None:
    record_type = RECORDS.get(txn_type)
    if record_type is None:
        raise ZkTxnError(f"unsupported txn type {txn_type}")
    if record_type is CreateTxn:
        return _read_create(reader)
    if record_type is CloseSessionTxn and reader.remaining < 4:
        return None  # written before CloseSessionTxn existed (3.5 and older)
    return _body(record_type.read(reader))


def _read_create(reader: Reader) -> tuple[Any, ...]:
    path, data, acl = reader.ustring(), reader.buffer(), reader.vector(ACL.read)
    ephemeral = reader.bool()
    parent_cversion = reader.int() if reader.remaining >= 4 else -1  # CreateTxnV0: none
    return (path, data, acl_tuples(acl), ephemeral, parent_cversion)


def decode_op(op_type: int, data: bytes) -> tuple[int, tuple[Any, ...] | None]:
    """One op of a multi: ``(type, body)``; the body is None for a type a multi cannot hold
    (ZooKeeper's replay stops the multi there)."""
    if op_type not in MULTI_OP_TYPES:
        return op_type, None
    reader = Reader(data, 0, ENTRY_BYTES_MAX)
    try:
        return op_type, _read_body(reader, op_type)
    except RemoteProtocolError as exc:
        raise ZkTxnError(f"multi op of type {op_type}: {exc}") from None


def decode_entry(raw: bytes, buffer_bytes_max: int = ENTRY_BYTES_MAX) -> ZkTxn:
    """A txn log entry's bytes (what its CRC covers) as a ``ZkTxn``.

    Raises:
        ZkTxnError: a truncated or malformed entry, or a txn type ZooKeeper does not log.
    """
    reader = Reader(raw, 0, buffer_bytes_max)
    try:
        header = TxnHeader.read(reader)
        body = _read_body(reader, header.type)
        digest = None
        if reader.remaining >= 12:  # 3.6+ with digest.enabled; older entries end here
            digest = _read_digest(reader)
    except RemoteProtocolError as exc:
        raise ZkTxnError(str(exc)) from None
    return ZkTxn(header.client_id, header.cxid, header.zxid, header.time, header.type, body, digest)


def _read_digest(reader: Reader) -> tuple[int, int]:
    record = TxnDigest.read(reader)
    return record.version, record.tree_digest


# ----------------------------------------------------------------------------- encoding
def _record_of(txn_type: int, body: tuple[Any, ...]) -> Record:
    record_type = RECORDS[txn_type]
    if record_type is MultiTxn:
        return MultiTxn([SubTxn(op_type, _record_of(op_type, op_body).encode()) for op_type, op_body in body[0]])
    if record_type in (CreateTxn, CreateTTLTxn, CreateContainerTxn):
        return record_type(body[0], body[1], _acl_records(body[2]), *body[3:])
    if record_type is SetACLTxn:
        return SetACLTxn(body[0], _acl_records(body[1]), body[2])
    if record_type is CloseSessionTxn:
        return CloseSessionTxn(list(body[0]))
    return record_type(*body)


def encode_entry(txn: ZkTxn) -> bytes:
    """The bytes ZooKeeper logs for ``txn`` (``Util.marshallTxnEntry``)."""
    writer = Writer()
    TxnHeader(txn.session_id, txn.cxid, txn.zxid, txn.time_ms, txn.type).write(writer)
    if txn.body is not None:
        _record_of(txn.type, txn.body).write(writer)
    if txn.digest is not None:
        TxnDigest(*txn.digest).write(writer)
    return writer.getvalue()
