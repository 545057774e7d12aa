"""Quorum messages on the wire: every type decodes to what was encoded, and anything else a
peer could send decodes or raises RemoteProtocolError, never another exception."""

from __future__ import annotations

import dataclasses

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zabby.core import messages as m
from zabby.errors import RemoteProtocolError
from zabby.tree.txns import Txn

TXN = Txn(0x100000002, 0x1234, 7, 1_700_000_000_000, 5, ("/a", b"x" * 10, 3))

EVERY_TYPE = [
    m.Notification(leader=1, zxid=5, peer_epoch=1, election_epoch=2, state="LOOKING", config="c", proposed="p"),
    m.Request(session_id=9, cxid=3, op=5, args=("/a", b"d", -1), auth_ids=(("digest", "u:x"),), superuser=True),
    m.Proposal(txns=(TXN, TXN._replace(zxid=TXN.zxid + 1))),
    m.Ack(zxid=3),
    m.Commit(zxid=3, designated=2),
    m.Logged(zxid=4),
    m.Ping(sessions=(1, 2), round=6),
    m.Sync(session_id=9, cxid=1),
    m.Inform(txns=(TXN,)),
    m.NewLeader(zxid=1 << 32, config="cfg", proposed=""),
    m.FollowerInfo(accepted_epoch=1, last_zxid=2, observer=True, config_version=3),
    m.UpToDate(),
    m.Diff(zxid=1),
    m.Trunc(zxid=2),
    m.Snap(zxid=3),
    m.LeaderInfo(epoch=4),
    m.AckEpoch(current_epoch=1, last_zxid=2, snapshot_wanted=True),
    m.SnapChunk(records=(("tree", 1, 0, 1),), last=True),
    m.TreeDigest(zxid=5, digest=77),
]


@pytest.mark.parametrize("message", EVERY_TYPE, ids=lambda message: type(message).__name__)
def test_every_message_decodes_to_what_was_encoded(message: m.Message) -> None:
    decoded = m.decode(m.encode(message))
    assert decoded == message
    assert type(decoded) is type(message)
    if isinstance(decoded, m.Proposal | m.Inform):
        assert all(type(txn) is Txn for txn in decoded.txns)


def test_the_wire_fields_of_every_type_lead_its_fields() -> None:
    # decode passes the wire fields positionally: one kept off the wire must come after them
    for type_, cls in m._TYPES.items():
        names = tuple(field.name for field in dataclasses.fields(cls))
        assert names[: len(m._FIELDS[type_])] == m._FIELDS[type_], cls.__name__
    assert len(m._TYPES) == len(EVERY_TYPE)


def test_a_snap_chunk_keeps_its_records_bytes() -> None:
    chunk = m.SnapChunk(records=(("tree", 1, 0, 1), ("/", b"", ())), last=False)
    decoded = m.decode(m.encode(chunk))
    assert isinstance(decoded, m.SnapChunk)
    assert bytes(decoded.encoded) == b"".join(msgpack.packb(record) for record in chunk.records)


@pytest.mark.parametrize("value", [
    [m.Proposal.TYPE, [[1, 2, 3, 4, 5]]],  # a txn of 5 fields
    [m.Proposal.TYPE, [[1, 2, 3, 4, 5, (), 7]]],  # of 7
    [m.Inform.TYPE, [7]],  # not an array
    [m.Proposal.TYPE],  # no txns
    [m.Ack.TYPE],  # a field missing
    [m.Ack.TYPE, 1, 2],  # one too many
    [m.Commit.TYPE, 1, 2, 3],
    [250, 1],  # no such type
    [],
    7,
])  # fmt: skip
def test_a_malformed_message_is_a_protocol_error(value: object) -> None:
    with pytest.raises(RemoteProtocolError, match="malformed quorum packet"):
        m.decode(msgpack.packb(value))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64) | st.lists(st.integers(0, 255) | st.binary(max_size=4), max_size=4).map(msgpack.packb))
def test_any_bytes_decode_or_raise_a_protocol_error(frame: bytes) -> None:
    try:
        m.decode(frame)
    except RemoteProtocolError:
        pass
