"""zabby.wire.jute without a server: layouts checked against kazoo's own serializer, round
trips, and fuzzing (any bytes parse or raise RemoteProtocolError, never anything else)."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kazoo.protocol import serialization as kz
from kazoo.security import ACL as KazooACL
from kazoo.security import Id as KazooId

from zabby.errors import RemoteProtocolError
from zabby.opcodes import OpCode
from zabby.tree.datatree import Listing
from zabby.wire import jute
from zabby.wire.codec import looks_like_jute
from zabby.wire.jute_codec import HOT_REQUESTS, JuteCodec, _hot_reply, request_args, response_record
from zabby.wire.messages import connect_request, pack, pack_frame

OPEN = [jute.ACL(31, jute.Id("world", "anyone"))]
STAT = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)


# ----------------------------------------------------------------------------- layouts
def test_requests_match_kazoos_bytes() -> None:
    acl = [KazooACL(31, KazooId("world", "anyone"))]
    pairs = [
        (kz.Create("/a", b"x", acl, 3), jute.CreateRequest("/a", b"x", OPEN, 3)),
        (kz.Delete("/a", 4), jute.DeleteRequest("/a", 4)),
        (kz.Exists("/a", True), jute.ExistsRequest("/a", True)),
        (kz.GetData("/a", False), jute.GetDataRequest("/a", False)),
        (kz.SetData("/a", b"v", -1), jute.SetDataRequest("/a", b"v", -1)),
        (kz.GetACL("/a"), jute.GetACLRequest("/a")),
        (kz.SetACL("/a", acl, 2), jute.SetACLRequest("/a", OPEN, 2)),
        (kz.GetChildren("/a", True), jute.GetChildrenRequest("/a", True)),
        (kz.GetChildren2("/a", False), jute.GetChildren2Request("/a", False)),
        (kz.Sync("/a"), jute.SyncRequest("/a")),
        (kz.Auth(0, "digest", "u:p"), jute.AuthPacket(0, "digest", b"u:p")),
        (kz.Connect(0, 5, 4000, 9, b"p" * 16, True), jute.ConnectRequest(0, 5, 4000, 9, b"p" * 16, True)),
        (kz.Transaction([kz.Create("/b", b"", acl, 0), kz.CheckVersion("/b", 1), kz.Delete("/b", -1)]),
         jute.MultiRequest([(1, jute.CreateRequest("/b", b"", OPEN, 0)), (13, jute.CheckVersionRequest("/b", 1)),
                            (2, jute.DeleteRequest("/b", -1))])),
    ]  # fmt: skip
    for theirs, ours in pairs:
        assert bytes(theirs.serialize()) == ours.encode(), theirs
        assert type(ours).decode(ours.encode()) == ours


def test_responses_decode_with_kazoo() -> None:
    stat = jute.Stat(*STAT)
    assert kz.Exists.deserialize(jute.ExistsResponse(stat).encode(), 0) == kz.ZnodeStat(*STAT)
    data, got = kz.GetData.deserialize(jute.GetDataResponse(b"hi", stat).encode(), 0)
    assert data == b"hi" and tuple(got) == STAT
    children, got = kz.GetChildren2.deserialize(jute.GetChildren2Response(["a", "b"], stat).encode(), 0)
    assert children == ["a", "b"] and tuple(got) == STAT
    acls, got = kz.GetACL.deserialize(jute.GetACLResponse(OPEN, stat).encode(), 0)
    assert acls[0].perms == 31 and acls[0].id.scheme == "world" and tuple(got) == STAT
    connect, _ = kz.Connect.deserialize(jute.ConnectResponse(0, 4000, 77, b"q" * 16, False).encode(), 0)
    assert (connect.time_out, connect.session_id, connect.passwd, connect.read_only) == (4000, 77, b"q" * 16, False)
    multi = jute.MultiResponse([(1, 0, jute.CreateResponse("/x")), (5, 0, jute.SetDataResponse(stat)),
                                (2, 0, None), (13, 0, None)])  # fmt: skip
    assert kz.Transaction.deserialize(multi.encode(), 0) == ["/x", kz.ZnodeStat(*STAT), True, True]
    failed = jute.MultiResponse([(-1, 0, jute.ErrorResponse(0)), (-1, -101, jute.ErrorResponse(-101))])
    names = [type(e).__name__ for e in kz.Transaction.deserialize(failed.encode(), 0)]
    assert names == ["RolledBackError", "NoNodeError"]
    event, _ = kz.Watch.deserialize(jute.WatcherEvent(3, 3, "/w").encode(), 0)
    assert (event.type, event.state, event.path) == (3, 3, "/w")


def test_connect_request_without_the_read_only_byte() -> None:
    old_client = struct.pack(">iqiqi", 0, 5, 4000, 0, 16) + bytes(16)
    request = jute.decode_connect_request(old_client)
    assert (request.last_zxid_seen, request.timeout_ms, request.read_only) == (5, 4000, False)


def test_nulls() -> None:
    record = jute.CreateRequest.decode(struct.pack(">iiii", -1, -1, -1, 0))
    assert record == jute.CreateRequest(None, None, None, 0)
    assert request_args(OpCode.CREATE, record) == (OpCode.CREATE, [None, None, None, 0, 0])  # null data stays null
    with pytest.raises(RemoteProtocolError):
        jute.CreateRequest.decode(struct.pack(">iiii", -2, -1, -1, 0))


def test_detection() -> None:
    assert looks_like_jute(jute.frame(jute.ConnectRequest(0, 0, 4000, 0, bytes(16)).encode()))
    assert not looks_like_jute(pack_frame(connect_request(0, 4000, 0, b"", False)))
    assert not looks_like_jute(b"ruok")
    assert not looks_like_jute(b"\x00\x00\x00")


def test_request_args_map_onto_zabbys_op_model() -> None:
    assert request_args(OpCode.CREATE_TTL, jute.CreateTTLRequest("/t", b"", OPEN, 5, 99)) == (21, ["/t", b"", ((31, "world", "anyone"),), 5, 99])
    watches = jute.SetWatches2(7, ["/d"], ["/e"], ["/c"], ["/p"], None)
    assert request_args(OpCode.SET_WATCHES2, watches) == (OpCode.SET_WATCHES, [7, ["/d"], ["/e"], ["/c"], ["/p"], []])
    multi = jute.MultiRequest([(2, jute.DeleteRequest("/x", 3)), (5, jute.SetDataRequest("/y", None, -1))])
    assert request_args(OpCode.MULTI, multi) == (OpCode.MULTI, [[[2, "/x", 3], [5, "/y", None, -1]]])
    assert request_args(OpCode.AUTH, jute.AuthPacket(0, "digest", b"u:p")) == (OpCode.AUTH, ["digest", b"u:p"])


def test_codec_translates_the_connections_frames() -> None:
    failures: list[bool] = []
    codec = JuteCodec(lambda: failures.append(True))
    hello = ["zabby", 1, 0, 4000, 42, b"p" * 16, 7, False, ""]
    assert jute.ConnectResponse.decode(codec.encode(hello)[4:]) == jute.ConnectResponse(0, 4000, 42, b"p" * 16, False)
    expired = ["zabby", 1, -112, 0, 0, b"", 7, False, "gone"]
    assert jute.ConnectResponse.decode(codec.encode(expired)[4:]) == jute.ConnectResponse(0, 0, 0, bytes(16), False)
    assert codec.encode(["zabby", 1, -4, 0, 0, b"", 7, False, "behind"]) == b""
    codec.expect(5, OpCode.EXISTS)
    assert jute.decode_reply(codec.encode([5, 9, 0, None])[4:], 3) == (jute.ReplyHeader(5, 9, -101), None)
    codec.expect(6, OpCode.CREATE)
    assert jute.decode_reply(codec.encode([6, 10, 0, "/n"])[4:], 1)[1] == jute.CreateResponse("/n")
    codec.expect(7, OpCode.SET_DATA)
    assert jute.decode_reply(codec.encode([7, 10, -103, "bad version"])[4:], 5) == (jute.ReplyHeader(7, 10, -103), None)
    header, event = jute.decode_reply(codec.encode([-1, 11, 0, 2, 3, "/gone"])[4:], None)
    assert header == jute.ReplyHeader(-1, 11, 0) and event == jute.WatcherEvent(2, 3, "/gone")  # the change's zxid, as 3.9
    codec.expect(8, OpCode.MULTI, (OpCode.CREATE, OpCode.CREATE2, OpCode.CREATE_CONTAINER, OpCode.DELETE))
    reply = [8, 12, 0, [[1, 0, ["/a", list(STAT)]], [1, 0, ["/b", list(STAT)]], [19, 0, ["/c", list(STAT)]], [2, 0, None]]]
    _, multi = jute.decode_reply(codec.encode(reply)[4:], OpCode.MULTI)
    # as ZooKeeper 3.8: a create2 inside a multi answers as a create (path only); a container, with its Stat
    assert multi == jute.MultiResponse([(1, 0, jute.CreateResponse("/a")), (1, 0, jute.CreateResponse("/b")),
                                        (15, 0, jute.Create2Response("/c", jute.Stat(*STAT))), (2, 0, None)])  # fmt: skip
    codec.expect(9, OpCode.GET_DATA)
    assert codec.encode([9, 1, 0, "not bytes", "not a stat"]) == b"" and failures == [True]  # logged, never raised


def test_events_at_once_carry_the_zxid_in_their_headers() -> None:
    """setWatches' missed events: each header has the zxid of the state they were read from,
    and the frames are the ones ``encode`` gives one by one."""
    frames = JuteCodec.encode_events(0x500000007, 3, [(2, "/gone"), (3, "/changed")])
    codec = JuteCodec(lambda: None)
    assert frames == codec.encode([-1, 0x500000007, 0, 2, 3, "/gone"]) + codec.encode([-1, 0x500000007, 0, 3, 3, "/changed"])
    first_size = int.from_bytes(frames[:4], "big")
    header, event = jute.decode_reply(frames[4 : 4 + first_size], None)
    assert header == jute.ReplyHeader(-1, 0x500000007, 0) and event == jute.WatcherEvent(2, 3, "/gone")


# ----------------------------------------------------------------------------- round trips
paths = st.one_of(st.none(), st.text(max_size=20))
blobs = st.one_of(st.none(), st.binary(max_size=64))
ints = st.integers(-(2**31), 2**31 - 1)
longs = st.integers(-(2**63), 2**63 - 1)
acls = st.one_of(st.none(), st.lists(st.builds(jute.ACL, ints, st.builds(jute.Id, paths, paths)), max_size=3))
stats = st.builds(jute.Stat, longs, longs, longs, longs, ints, ints, ints, longs, ints, ints, longs)
records = st.one_of(
    st.builds(jute.CreateRequest, paths, blobs, acls, ints),
    st.builds(jute.CreateTTLRequest, paths, blobs, acls, ints, longs),
    st.builds(jute.SetWatches2, longs, *[st.one_of(st.none(), st.lists(paths, max_size=3))] * 5),
    st.builds(jute.GetACLResponse, acls, stats),
    st.builds(jute.ConnectRequest, ints, longs, ints, longs, blobs, st.booleans()),
    st.builds(jute.WhoAmIResponse, st.lists(st.builds(jute.ClientInfo, paths, paths), max_size=3)),
    st.builds(jute.MultiRequest, st.lists(st.tuples(st.just(2), st.builds(jute.DeleteRequest, paths, ints)), max_size=3)),
)


@given(records)
@settings(max_examples=300, deadline=None)
def test_records_round_trip(record: jute.Record) -> None:
    assert type(record).decode(record.encode()) == record


# ----------------------------------------------------------------------------- fuzzing
def _never_other_than_protocol_errors(parse: object, data: bytes) -> None:
    try:
        parse(data)  # type: ignore[operator]
    except RemoteProtocolError:
        pass


@given(st.binary(max_size=200))
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_bytes_parse_or_raise_remote_protocol_error(data: bytes) -> None:
    _never_other_than_protocol_errors(jute.decode_request, data)
    _never_other_than_protocol_errors(jute.decode_connect_request, data)
    _never_other_than_protocol_errors(lambda d: jute.decode_reply(d, OpCode.MULTI), data)
    _never_other_than_protocol_errors(lambda d: jute.decode_reply(d, OpCode.GET_ACL), data)


@given(st.sampled_from(sorted(jute.REQUEST_RECORDS)), st.binary(max_size=120))
@settings(max_examples=1500, deadline=None)
def test_any_body_after_a_valid_header_parses_or_raises(op: int, body: bytes) -> None:
    payload = struct.pack(">ii", 1, op) + body
    try:
        request = jute.decode_request(payload)
    except RemoteProtocolError:
        return
    assert request.op == op and request.known
    request_args(op, request.record)  # mapping a parsed record never fails


@given(st.sampled_from(sorted(jute.REQUEST_RECORDS)), st.data())
@settings(max_examples=300, deadline=None)
def test_truncating_a_valid_request_raises_remote_protocol_error(op: int, data: st.DataObject) -> None:
    valid = {
        OpCode.CREATE: jute.CreateRequest("/a", b"x", OPEN, 0),
        OpCode.MULTI: jute.MultiRequest([(1, jute.CreateRequest("/a", b"", OPEN, 0))]),
        OpCode.SET_WATCHES2: jute.SetWatches2(1, ["/a"], [], [], [], ["/b"]),
    }
    record = valid.get(op)
    if record is None:
        return
    payload = struct.pack(">ii", 1, op) + record.encode()
    cut = data.draw(st.integers(0, len(payload) - 1))
    with pytest.raises(RemoteProtocolError):
        jute.decode_request(payload[:cut])


def _generic_decode(payload: bytes) -> list[object] | type[Exception]:
    """The codec's answer through the record layouts (the path every other op takes)."""
    try:
        request = jute.decode_request(payload)
    except RemoteProtocolError as exc:
        return type(exc)
    op, args = request_args(request.op, request.record)
    return [request.xid, op, *args]


def _codec_decode(payload: bytes) -> list[object] | type[Exception]:
    try:
        return JuteCodec(lambda: None).decode_request(payload)
    except RemoteProtocolError as exc:
        return type(exc)


hot_records = st.one_of(
    st.builds(jute.CreateRequest, paths, blobs, acls, ints),
    st.builds(jute.SetDataRequest, paths, blobs, ints),
    st.builds(jute.GetDataRequest, paths, st.booleans()),
)


@pytest.mark.parametrize("op, record", [
    (OpCode.CREATE, jute.CreateRequest("/a", None, [jute.ACL(31, jute.Id("world", None)), jute.ACL(1, jute.Id(None, "x"))], 2)),
    (OpCode.CREATE2, jute.CreateRequest(None, b"d", None, 0)),
    (OpCode.SET_DATA, jute.SetDataRequest("/a", None, -1)),
    (OpCode.EXISTS, jute.ExistsRequest("/b", True)),
])  # fmt: skip
def test_hot_requests_map_nulls_as_request_args_does(op: int, record: jute.Record) -> None:
    payload = struct.pack(">ii", 7, op) + record.encode()
    assert _codec_decode(payload) == _generic_decode(payload)


@pytest.mark.parametrize("op, record", [
    (OpCode.CREATE, jute.CreateRequest("/a/\u00e9", b"\x00d", [jute.ACL(31, jute.Id("world", "anyone")), jute.ACL(1, jute.Id("digest", ""))], 3)),
    (OpCode.CREATE_CONTAINER, jute.CreateRequest("/c", b"", [], 4)),
    (OpCode.SET_DATA, jute.SetDataRequest("/a", b"v" * 300, 7)),
    (OpCode.GET_DATA, jute.GetDataRequest("/b", True)),
    (OpCode.EXISTS, jute.ExistsRequest("/c", False)),
])  # fmt: skip
def test_hot_requests_without_nulls_skip_the_record_layouts(op: int, record: jute.Record, monkeypatch: pytest.MonkeyPatch) -> None:
    payload = struct.pack(">ii", 7, op) + record.encode()
    expected = _generic_decode(payload)
    monkeypatch.setattr(jute, "decode_request", lambda *args: pytest.fail("read through the record layouts"))
    assert _codec_decode(payload) == expected


@given(st.sampled_from(sorted(HOT_REQUESTS)), hot_records, st.data())
@settings(max_examples=600, deadline=None)
def test_hot_requests_decode_as_their_records_do(op: int, record: jute.Record, data: st.DataObject) -> None:
    """The hot path gives what the record layouts give: for a valid request (its record, or
    another op's record read as this op's), any cut of it, and bytes appended."""
    payload = struct.pack(">ii", 7, op) + record.encode()
    payload = payload[: data.draw(st.integers(8, len(payload)))] + data.draw(st.binary(max_size=12))
    assert _codec_decode(payload) == _generic_decode(payload)


HOT_REPLY_OPS = (OpCode.CREATE, OpCode.CREATE2, OpCode.CREATE_CONTAINER, OpCode.CREATE_TTL, OpCode.SET_DATA, OpCode.EXISTS, OpCode.GET_DATA)
longs = st.integers(-(2**63), 2**63 - 1)
stats = st.tuples(*(longs if kind == "l" else ints for kind in "lllliiiliil"))
any_stats = st.one_of(stats, st.tuples(*[st.integers(-(2**64), 2**64)] * 11))  # some fields out of range


def _outcome(make: Callable[[], bytes]) -> bytes | type[Exception]:
    try:
        return make()
    except Exception as exc:
        return type(exc)


@given(st.sampled_from(HOT_REPLY_OPS), st.integers(0, 2**31 - 1), longs, st.text(max_size=20), st.one_of(st.none(), st.binary(max_size=64)), any_stats)
@settings(max_examples=600, deadline=None)
def test_hot_replies_encode_as_their_records_do(op: int, xid: int, zxid: int, path: str, data: bytes | None, stat: tuple[int, ...]) -> None:
    """The packed replies are the records' bytes; what does not fit fails as the records do."""
    values = {OpCode.SET_DATA: [stat], OpCode.EXISTS: [stat], OpCode.GET_DATA: [data, stat], OpCode.CREATE: [path]}.get(op, [path, stat])
    expected = _outcome(lambda: jute.encode_reply(jute.ReplyHeader(xid, zxid, 0), response_record(op, values, ())))
    codec = JuteCodec(lambda: None)
    codec.expect(xid, op)
    assert _outcome(lambda: codec._encode([xid, zxid, 0, *values])) == expected
    if isinstance(expected, bytes) and data is not None:
        assert _hot_reply(op, xid, zxid, values) == expected  # packed, not the records' way


def test_handshake_bytes_are_zabbys_msgpack() -> None:
    # detection tells the protocols apart by the payload's first byte: msgpack's is an array marker, jute's 0x00
    assert pack(connect_request(1, 2, 3, b"p", True))[0] & 0xF0 == 0x90


def test_a_tree_listing_is_encoded_once_and_like_a_plain_list() -> None:
    listing = Listing(["a", "bé", "c" * 300])
    plain = jute.GetChildrenResponse(list(listing)).encode()
    assert jute.GetChildrenResponse(listing).encode() == plain
    assert listing.encoded is not None
    assert jute.GetChildrenResponse(listing).encode() == plain  # from the kept encoding
